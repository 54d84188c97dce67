//! Sizing of the `static` strategy's node groups (cluster-autoscaler node
//! groups with min = max): a pool's jobs are split into shape classes (the
//! jobs that run on the same node offerings), and classes share a group when
//! one offering holds them all for no more than separate groups would cost.
//! So a pool whose jobs no single instance type holds (8-GPU A100 jobs beside
//! 1-GPU A10G ones) gets one group per class instead of none. Pure: the
//! engine says which job runs where and how much of a node it takes.

use crate::core::Time;
use std::collections::BTreeMap;

/// One job of a pool, as the sizing sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    /// When it appears.
    pub from: Time,
    /// When it would end if it started at once.
    pub to: Time,
}

/// A node group: `nodes` nodes of one offering for a set of jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Index of the offering (into the caller's options).
    pub option: usize,
    /// Nodes in the group.
    pub nodes: usize,
    /// Indices of the jobs it is sized for.
    pub jobs: Vec<usize>,
    /// Nodes times price per hour.
    cost: f64,
}

/// The jobs of one candidate group, with their start and end events in time
/// order (ends before starts at the same instant).
struct Members {
    jobs: Vec<usize>,
    events: Vec<(Time, bool, usize)>,
    /// Options that run every member.
    fits: Vec<bool>,
}

impl Members {
    fn new(jobs: Vec<usize>, spans: &[Span], fits: Vec<bool>) -> Members {
        let mut events: Vec<(Time, bool, usize)> = jobs
            .iter()
            .flat_map(|&j| [(spans[j].from, true, j), (spans[j].to, false, j)])
            .collect();
        events.sort_by_key(|&(t, start, j)| (t, start, j));
        Members { jobs, events, fits }
    }

    fn merged(&self, other: &Members, spans: &[Span]) -> Members {
        let fits = self.fits.iter().zip(&other.fits).map(|(a, b)| *a && *b);
        let jobs = self.jobs.iter().chain(&other.jobs).copied().collect();
        Members::new(jobs, spans, fits.collect())
    }

    /// Nodes of option `o` for the peak: the most node shares held at once.
    fn nodes(&self, o: usize, share: &dyn Fn(usize, usize) -> Option<f64>) -> Option<usize> {
        let (mut now, mut most) = (0.0f64, 0.0f64);
        for &(_, start, j) in &self.events {
            let s = share(j, o)?;
            now += if start { s } else { -s };
            most = most.max(now);
        }
        // Float sums of shares such as 1/3 must not round up a whole node.
        Some(((most - 1e-9).ceil() as usize).max(1))
    }

    /// The cheapest group for these jobs, if one option runs them all.
    fn cheapest(
        self,
        prices: &[f64],
        share: &dyn Fn(usize, usize) -> Option<f64>,
    ) -> Option<(Group, Members)> {
        let best = (0..prices.len())
            .filter(|&o| self.fits[o])
            .filter_map(|o| {
                let n = self.nodes(o, share)?;
                Some((n as f64 * prices[o], o, n))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))?;
        let group = Group {
            option: best.1,
            nodes: best.2,
            jobs: self.jobs.clone(),
            cost: best.0,
        };
        Some((group, self))
    }
}

/// The node groups of one pool whose jobs are `spans`, given each option's
/// price per hour and `share(job, option)`: the part of one node of that
/// option a job takes (`1 / jobs per node`), `None` where it cannot run.
/// Every job some option runs is in exactly one group, and each group has
/// nodes for its jobs' peak if each started when it appeared. Groups come
/// cheapest node first, so a first-fit scheduler fills small nodes before
/// large ones.
pub fn groups(
    spans: &[Span],
    prices: &[f64],
    share: &dyn Fn(usize, usize) -> Option<f64>,
) -> Vec<Group> {
    // Shape classes: the jobs that run on the same options.
    let mut classes: BTreeMap<Vec<bool>, Vec<usize>> = BTreeMap::new();
    for j in 0..spans.len() {
        let fits: Vec<bool> = (0..prices.len()).map(|o| share(j, o).is_some()).collect();
        if fits.iter().any(|f| *f) {
            classes.entry(fits).or_default().push(j);
        }
    }
    // The most constrained classes first: they decide the large nodes that
    // the others may share.
    let mut classes: Vec<(Vec<bool>, Vec<usize>)> = classes.into_iter().collect();
    classes.sort_by_key(|(fits, jobs)| (fits.iter().filter(|f| **f).count(), jobs[0]));
    let mut groups: Vec<(Group, Members)> = Vec::new();
    for (fits, jobs) in classes {
        let class = Members::new(jobs, spans, fits);
        let merge = groups
            .iter()
            .enumerate()
            .filter_map(|(g, (group, members))| {
                let (merged, m) = members.merged(&class, spans).cheapest(prices, share)?;
                Some((merged.cost - group.cost, g, merged, m))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let Some(alone) = class.cheapest(prices, share) else {
            continue;
        };
        match merge {
            Some((extra, g, merged, m)) if extra <= alone.0.cost => groups[g] = (merged, m),
            _ => groups.push(alone),
        }
    }
    let mut groups: Vec<Group> = groups.into_iter().map(|(g, _)| g).collect();
    groups.sort_by(|a, b| {
        let per_node = |g: &Group| prices[g.option];
        per_node(a)
            .total_cmp(&per_node(b))
            .then(a.option.cmp(&b.option))
    });
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: i64) -> Time {
        chrono::Utc.with_ymd_and_hms(2026, 1, 5, 0, 0, 0).unwrap() + chrono::Duration::hours(h)
    }

    fn span(from: i64, to: i64) -> Span {
        Span {
            from: at(from),
            to: at(to),
        }
    }

    /// Options: 0 a small node ($1/h) holding one small job; 1 a large node
    /// ($10/h) holding eight small jobs or one large job. Jobs 0..2 are
    /// small, 2..4 large (only the large node runs them).
    fn small_and_large(j: usize, o: usize) -> Option<f64> {
        match (j < 2, o) {
            (true, 0) => Some(1.0),
            (true, 1) => Some(0.125),
            (false, 1) => Some(1.0),
            _ => None,
        }
    }

    #[test]
    fn a_pool_whose_jobs_no_single_option_holds_gets_a_group_per_class() {
        // The small jobs overlap each other; the large ones overlap too.
        let spans = [span(0, 2), span(1, 3), span(0, 4), span(2, 5)];
        let g = groups(&spans, &[1.0, 10.0], &small_and_large);
        let all: usize = g.iter().map(|g| g.jobs.len()).sum();
        assert_eq!(all, 4, "every job is in a group: {g:?}");
        // Two small nodes ($2) cost less than a third large one ($10).
        assert_eq!(g.len(), 2, "{g:?}");
        assert_eq!((g[0].option, g[0].nodes), (0, 2));
        assert_eq!((g[1].option, g[1].nodes), (1, 2));
    }

    #[test]
    fn classes_share_a_group_when_that_costs_no_more() {
        // Job 1 (large class) takes half a large node; job 0 (small class)
        // fits in the other half for nothing, rather than $1 on its own.
        let half = |j: usize, o: usize| match (j, o) {
            (0, 0) => Some(1.0),
            (0, 1) => Some(0.25),
            (1, 1) => Some(0.5),
            _ => None,
        };
        let spans = [span(0, 2), span(0, 2)];
        let g = groups(&spans, &[1.0, 10.0], &half);
        assert_eq!(g.len(), 1, "{g:?}");
        assert_eq!((g[0].option, g[0].nodes), (1, 1));
        assert_eq!(g[0].jobs.len(), 2);
    }

    #[test]
    fn nodes_cover_the_peak_of_shares_not_of_each_resource() {
        // Three jobs that each take 5 of 8 GPUs: two nodes hold only two at
        // once (the peak of GPUs alone, 15 of 16, would say two nodes).
        let five_eighths = |_: usize, _: usize| Some(1.0);
        let spans = [span(0, 3), span(0, 3), span(1, 3)];
        let g = groups(&spans, &[10.0], &five_eighths);
        assert_eq!(g[0].nodes, 3);
        // Jobs that never overlap need one node.
        let spans = [span(0, 1), span(1, 2), span(2, 3)];
        assert_eq!(groups(&spans, &[10.0], &five_eighths)[0].nodes, 1);
    }

    #[test]
    fn jobs_no_option_runs_are_left_out() {
        let none = |j: usize, _: usize| (j == 0).then_some(0.5);
        let g = groups(&[span(0, 1), span(0, 1)], &[1.0], &none);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].jobs, [0]);
    }
}
