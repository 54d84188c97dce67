//! Disruption budgets (`spec.disruption.budgets` of a NodePool), with
//! Karpenter's semantics: how many more of a pool's nodes voluntary
//! disruption (consolidation) may take right now. Owns the arithmetic and
//! the schedules; choosing which nodes go is consolidation's job. Spot
//! interruptions are not voluntary and ignore budgets.
//!
//! A budget without `schedule` is always active. A budget with one is active
//! from each `schedule` time (a 5-field cron expression in UTC) for
//! `duration`: at `s` it is active, at `s + duration` it no longer is. The
//! pool may disrupt the minimum of `nodes` over its active budgets (a count,
//! or a percentage of the pool's nodes rounded up), minus the nodes already
//! being disrupted, never below zero. With no active budget the pool is
//! unbounded (`u32::MAX`), as in Karpenter. See `docs/lifecycle-timing.md`.

use super::prewarm::first_start_after;
use super::time::{after, before, sooner};
use super::Time;
use crate::api::{
    parse_cron, parse_duration, Budget, BudgetNodes, BudgetReason, DurationError, NodePool,
    ScheduleError,
};
use chrono::Utc;
use std::time::Duration;

/// Errors of this module: a budget that cannot be read. Not retryable (the
/// NodePool must be fixed; `quartermaster validate` reports the same).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// `nodes` is neither a count nor a percentage.
    #[error("NodePool {pool}, disruption budget {index}: nodes: {reason}")]
    Nodes {
        /// NodePool.
        pool: String,
        /// Position in `spec.disruption.budgets`.
        index: usize,
        /// What is wrong.
        reason: String,
    },
    /// `schedule` is not a valid cron expression.
    #[error("NodePool {pool}, disruption budget {index}: schedule: {source}")]
    Schedule {
        /// NodePool.
        pool: String,
        /// Position in `spec.disruption.budgets`.
        index: usize,
        /// What is wrong.
        source: ScheduleError,
    },
    /// `duration` is not a duration.
    #[error("NodePool {pool}, disruption budget {index}: duration: {source}")]
    Duration {
        /// NodePool.
        pool: String,
        /// Position in `spec.disruption.budgets`.
        index: usize,
        /// What is wrong.
        source: DurationError,
    },
    /// Only one of `schedule` and `duration` is set.
    #[error(
        "NodePool {pool}, disruption budget {index}: schedule and duration must be set together"
    )]
    Unpaired {
        /// NodePool.
        pool: String,
        /// Position in `spec.disruption.budgets`.
        index: usize,
    },
}

/// This module's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A budget, parsed.
struct Parsed {
    nodes: BudgetNodes,
    reasons: Vec<BudgetReason>,
    window: Option<(cron::Schedule, Duration)>,
}

impl Parsed {
    fn of(pool: &NodePool, index: usize, b: &Budget) -> Result<Parsed> {
        let name = || pool.metadata.name.clone().unwrap_or_default();
        let nodes = BudgetNodes::parse(&b.nodes).map_err(|reason| Error::Nodes {
            pool: name(),
            index,
            reason,
        })?;
        let window = match (&b.schedule, &b.duration) {
            (None, None) => None,
            (Some(s), Some(d)) => Some((
                parse_cron(s).map_err(|source| Error::Schedule {
                    pool: name(),
                    index,
                    source,
                })?,
                parse_duration(d).map_err(|source| Error::Duration {
                    pool: name(),
                    index,
                    source,
                })?,
            )),
            _ => {
                return Err(Error::Unpaired {
                    pool: name(),
                    index,
                })
            }
        };
        Ok(Parsed {
            nodes,
            window,
            reasons: b.reasons.clone(),
        })
    }

    /// The start of the scheduled occurrence active at `now`; `None` when
    /// inactive or unscheduled.
    fn current_start(&self, now: Time) -> Option<Time> {
        let (schedule, d) = self.window.as_ref()?;
        first_start_after(schedule, &Utc, before(now, *d)).filter(|s| *s <= now)
    }

    fn active(&self, now: Time) -> bool {
        self.window.is_none() || self.current_start(now).is_some()
    }
}

fn parse_all(pool: &NodePool) -> Result<Vec<Parsed>> {
    pool.spec
        .disruption
        .budgets
        .iter()
        .enumerate()
        .map(|(i, b)| Parsed::of(pool, i, b))
        .collect()
}

/// The `nodes` of the pool's budgets active at `now`, with their positions
/// in `spec.disruption.budgets`.
///
/// # Errors
///
/// [`Error`] for the first budget that cannot be read.
pub fn active_budgets(pool: &NodePool, now: Time) -> Result<Vec<(usize, BudgetNodes)>> {
    Ok(parse_all(pool)?
        .into_iter()
        .enumerate()
        .filter(|(_, b)| b.active(now))
        .map(|(i, b)| (i, b.nodes))
        .collect())
}

/// How many more of the pool's nodes may be disrupted at `now`: the minimum
/// of [`BudgetNodes::allowed`] over the active budgets, with
/// `nodes_in_pool` as the total (count the pool's initialized nodes,
/// including those being disrupted, as Karpenter does), minus
/// `disrupting_now` (nodes already being disrupted), never below 0.
/// `u32::MAX` (unbounded) when no budget is active.
///
/// # Errors
///
/// [`Error`] for the first budget that cannot be read.
pub fn allowed_disruptions(
    pool: &NodePool,
    nodes_in_pool: u32,
    disrupting_now: u32,
    now: Time,
) -> Result<u32> {
    let allowed = active_budgets(pool, now)?
        .into_iter()
        .map(|(_, n)| n.allowed(nodes_in_pool))
        .min()
        .unwrap_or(u32::MAX);
    Ok(allowed.saturating_sub(disrupting_now))
}

/// [`allowed_disruptions`] for one kind of disruption: only the active
/// budgets that limit `reason` (those naming it in `reasons`, and those
/// naming none) count.
///
/// # Errors
///
/// [`Error`] for the first budget that cannot be read.
pub fn allowed_disruptions_for(
    pool: &NodePool,
    reason: BudgetReason,
    nodes_in_pool: u32,
    disrupting_now: u32,
    now: Time,
) -> Result<u32> {
    let allowed = parse_all(pool)?
        .into_iter()
        .filter(|b| b.active(now) && (b.reasons.is_empty() || b.reasons.contains(&reason)))
        .map(|b| b.nodes.allowed(nodes_in_pool))
        .min()
        .unwrap_or(u32::MAX);
    Ok(allowed.saturating_sub(disrupting_now))
}

/// The next instant after `now` at which one of the pool's scheduled
/// budgets becomes active or inactive; `None` when none ever will.
///
/// # Errors
///
/// [`Error`] for the first budget that cannot be read.
pub fn next_deadline(pool: &NodePool, now: Time) -> Result<Option<Time>> {
    let mut next: Option<Time> = None;
    for b in parse_all(pool)? {
        let Some((schedule, d)) = &b.window else {
            continue;
        };
        let candidates = [
            b.current_start(now).map(|s| after(s, *d)),
            first_start_after(schedule, &Utc, now),
        ];
        for t in candidates.into_iter().flatten().filter(|t| *t > now) {
            sooner(&mut next, t);
        }
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn budget(nodes: &str, window: Option<(&str, &str)>) -> Budget {
        Budget {
            nodes: nodes.into(),
            schedule: window.map(|(s, _)| s.to_string()),
            duration: window.map(|(_, d)| d.to_string()),
            reasons: Vec::new(),
        }
    }

    fn pool(budgets: Vec<Budget>) -> NodePool {
        let mut p = NodePool::new("train", Default::default());
        p.spec.disruption.budgets = budgets;
        p
    }

    fn utc(d: u32, h: u32, mi: u32) -> Time {
        // March 2026: the 23rd is a Monday, the 28th a Saturday.
        Utc.with_ymd_and_hms(2026, 3, d, h, mi, 0).unwrap()
    }

    fn business_hours_freeze() -> NodePool {
        pool(vec![
            budget("10%", None),
            budget("0", Some(("0 9 * * 1-5", "8h"))),
        ])
    }

    #[test]
    fn a_zero_budget_blocks_disruption_inside_its_window_only() {
        let p = business_hours_freeze();
        assert_eq!(allowed_disruptions(&p, 15, 0, utc(23, 9, 0)).unwrap(), 0);
        assert_eq!(allowed_disruptions(&p, 15, 0, utc(23, 16, 59)).unwrap(), 0);
        // 17:00 ends the window; 10% of 15 rounds up to 2.
        assert_eq!(allowed_disruptions(&p, 15, 0, utc(23, 17, 0)).unwrap(), 2);
        assert_eq!(allowed_disruptions(&p, 15, 0, utc(23, 8, 59)).unwrap(), 2);
        assert_eq!(
            allowed_disruptions(&p, 15, 0, utc(28, 10, 0)).unwrap(),
            2,
            "Saturday"
        );
        assert_eq!(active_budgets(&p, utc(23, 12, 0)).unwrap().len(), 2);
        assert_eq!(
            active_budgets(&p, utc(28, 12, 0)).unwrap(),
            [(0, BudgetNodes::Percent(10))]
        );
    }

    #[test]
    fn percentages_round_up_and_nodes_in_flight_count_against_the_budget() {
        let p = pool(vec![budget("10%", None)]);
        let now = utc(23, 12, 0);
        assert_eq!(allowed_disruptions(&p, 5, 0, now).unwrap(), 1);
        assert_eq!(allowed_disruptions(&p, 20, 0, now).unwrap(), 2);
        assert_eq!(allowed_disruptions(&p, 21, 0, now).unwrap(), 3);
        assert_eq!(allowed_disruptions(&p, 0, 0, now).unwrap(), 0);
        assert_eq!(allowed_disruptions(&p, 21, 1, now).unwrap(), 2);
        assert_eq!(
            allowed_disruptions(&p, 21, 7, now).unwrap(),
            0,
            "never negative"
        );
    }

    #[test]
    fn the_most_restrictive_active_budget_wins() {
        let p = pool(vec![
            budget("5", None),
            budget("20%", None),
            budget("3", None),
            budget("1", Some(("0 0 1 1 *", "1h"))),
        ]);
        let now = utc(23, 12, 0);
        assert_eq!(allowed_disruptions(&p, 40, 0, now).unwrap(), 3);
        assert_eq!(allowed_disruptions(&p, 10, 0, now).unwrap(), 2, "20% of 10");
        assert_eq!(allowed_disruptions(&p, 40, 2, now).unwrap(), 1);
        let new_year = Utc.with_ymd_and_hms(2027, 1, 1, 0, 30, 0).unwrap();
        assert_eq!(allowed_disruptions(&p, 40, 0, new_year).unwrap(), 1);
    }

    #[test]
    fn a_budget_naming_reasons_limits_only_those() {
        let only_drift = Budget {
            reasons: vec![BudgetReason::Drifted],
            ..budget("0", None)
        };
        let p = pool(vec![budget("50%", None), only_drift]);
        let now = utc(23, 12, 0);
        let allowed = |r| allowed_disruptions_for(&p, r, 10, 0, now).unwrap();
        assert_eq!(allowed(BudgetReason::Drifted), 0);
        assert_eq!(allowed(BudgetReason::Unhealthy), 5);
        assert_eq!(allowed(BudgetReason::Empty), 5);
        // Without a reason, every budget counts.
        assert_eq!(allowed_disruptions(&p, 10, 0, now).unwrap(), 0);
        let none = pool(vec![Budget {
            reasons: vec![BudgetReason::Empty],
            ..budget("1", None)
        }]);
        assert_eq!(
            allowed_disruptions_for(&none, BudgetReason::Unhealthy, 10, 0, now).unwrap(),
            u32::MAX,
            "no budget limits repair: unbounded"
        );
    }

    #[test]
    fn without_an_active_budget_the_pool_is_unbounded() {
        let p = pool(vec![]);
        assert_eq!(
            allowed_disruptions(&p, 3, 1, utc(23, 12, 0)).unwrap(),
            u32::MAX - 1
        );
        let weekend_only = pool(vec![budget("2", Some(("0 0 * * 6", "48h")))]);
        assert_eq!(
            allowed_disruptions(&weekend_only, 3, 0, utc(23, 12, 0)).unwrap(),
            u32::MAX
        );
        assert_eq!(
            allowed_disruptions(&weekend_only, 3, 0, utc(28, 12, 0)).unwrap(),
            2
        );
    }

    #[test]
    fn next_deadline_is_the_next_window_start_or_end() {
        let p = business_hours_freeze();
        assert_eq!(
            next_deadline(&p, utc(23, 12, 0)).unwrap(),
            Some(utc(23, 17, 0))
        );
        assert_eq!(
            next_deadline(&p, utc(23, 17, 0)).unwrap(),
            Some(utc(24, 9, 0))
        );
        assert_eq!(
            next_deadline(&p, utc(27, 18, 0)).unwrap(),
            Some(utc(30, 9, 0))
        );
        assert_eq!(
            next_deadline(&pool(vec![budget("1", None)]), utc(23, 0, 0)).unwrap(),
            None
        );
    }

    #[test]
    fn an_unreadable_budget_is_an_error_naming_pool_and_position() {
        let now = utc(23, 12, 0);
        for (b, needle) in [
            (budget("ten", None), "nodes"),
            (budget("1", Some(("0 9 * *", "8h"))), "schedule"),
            (budget("1", Some(("0 9 * * *", "8 hours"))), "duration"),
            (
                Budget {
                    duration: None,
                    ..budget("1", Some(("0 9 * * *", "8h")))
                },
                "together",
            ),
        ] {
            let p = pool(vec![budget("10%", None), b]);
            let e = allowed_disruptions(&p, 10, 0, now).unwrap_err().to_string();
            assert!(
                e.contains("train") && e.contains("budget 1") && e.contains(needle),
                "{e}"
            );
            assert!(next_deadline(&p, now).is_err());
        }
    }
}
