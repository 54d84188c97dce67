//! NodePool limits as budgets: what each pool may still add given what it
//! already has, charged node by node, so no plan exceeds a limit.

use super::candidates::Candidate;
use super::Input;
use std::collections::BTreeMap;

/// What a pool may still add (its limit minus what exists or was planned).
#[derive(Clone, Debug, Default)]
pub struct Budget {
    /// Resource capacity left per limited resource.
    pub resources: BTreeMap<String, f64>,
    /// Nodes left.
    pub nodes: Option<f64>,
    /// USD per hour left.
    pub cost: Option<f64>,
}

impl Budget {
    /// Whether one more node of `c` stays within every limit.
    pub fn affords(&self, c: &Candidate) -> bool {
        self.resources
            .iter()
            .all(|(k, left)| c.capacity.get(k) as f64 <= *left + 1e-9)
            && self.nodes.is_none_or(|n| n >= 1.0 - 1e-9)
            && self.cost.is_none_or(|x| c.price() <= x + 1e-9)
    }

    /// Gives one node of `c` back: the inverse of [`Budget::charge`] where
    /// that took the whole node (a budget that ran dry may get back more
    /// than it lost, so check launches against a budget only charged).
    pub fn refund(&mut self, c: &Candidate) {
        for (k, v) in self.resources.iter_mut() {
            *v += c.capacity.get(k) as f64;
        }
        if let Some(n) = self.nodes.as_mut() {
            *n += 1.0;
        }
        if let Some(x) = self.cost.as_mut() {
            *x += c.price();
        }
    }

    /// Takes one node of `c` out of the budget.
    pub fn charge(&mut self, c: &Candidate) {
        for (k, v) in self.resources.iter_mut() {
            *v = (*v - c.capacity.get(k) as f64).max(0.0);
        }
        if let Some(n) = self.nodes.as_mut() {
            *n = (*n - 1.0).max(0.0);
        }
        if let Some(x) = self.cost.as_mut() {
            *x = (*x - c.price()).max(0.0);
        }
    }
}

/// What each pool may still add, in the order of `input.pools`. The
/// arithmetic is checked: a limit that the subtraction would overflow (a
/// negative limit that slipped past validation) leaves nothing, never a
/// wrapped-around, unlimited budget.
pub fn budgets(input: &Input) -> Vec<Budget> {
    input
        .pools
        .iter()
        .map(|p| {
            let mine: Vec<_> = input
                .nodes
                .iter()
                .filter(|n| n.nodepool.as_deref() == Some(p.name.as_str()))
                .collect();
            let left = |limit: i64, used: i64| limit.checked_sub(used).unwrap_or(0).max(0) as f64;
            let mut b = Budget {
                resources: p
                    .limits
                    .resources
                    .iter()
                    .map(|(k, v)| {
                        let used = mine
                            .iter()
                            .fold(0i64, |sum, n| sum.saturating_add(n.allocatable.get(k)));
                        (k.to_string(), left(v, used))
                    })
                    .collect(),
                nodes: p
                    .limits
                    .nodes
                    .map(|n| left(n, i64::try_from(mine.len()).unwrap_or(i64::MAX))),
                cost: p
                    .limits
                    .cost_per_hour
                    .map(|c| c - mine.iter().map(|n| n.price_per_hour).sum::<f64>()),
            };
            b.cost = b.cost.map(|c| c.max(0.0));
            b
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::cluster::resources::Resources;
    use crate::cluster::{NodeState, Pool};

    fn node(pool: &str, gpus: i64) -> NodeState {
        NodeState {
            name: format!("{pool}-node"),
            nodepool: Some(pool.into()),
            instance_type: None,
            zone: "use1-az4".into(),
            capacity_type: None,
            labels: Default::default(),
            taints: Vec::new(),
            allocatable: Resources::new().with("nvidia.com/gpu", gpus),
            used: Resources::new(),
            price_per_hour: 1.0,
            in_flight: false,
            unschedulable: false,
        }
    }

    fn budgets_of(pool: Pool, nodes: &[NodeState]) -> Vec<Budget> {
        let catalog = Catalog::default();
        budgets(&Input {
            catalog: &catalog,
            region: "us-east-1",
            pools: &[pool],
            nodes,
            pods: &[],
            unavailable: &|_| false,
            learned_rate: None,
            now: None,
        })
    }

    #[test]
    fn a_limit_the_subtraction_would_overflow_leaves_no_budget() {
        let mut pool = Pool::new("p");
        pool.limits.resources = Resources::new().with("nvidia.com/gpu", i64::MIN);
        pool.limits.nodes = Some(i64::MIN);
        let b = &budgets_of(pool, &[node("p", 8)])[0];
        assert_eq!(b.resources["nvidia.com/gpu"], 0.0);
        assert_eq!(b.nodes, Some(0.0));
    }

    #[test]
    fn what_is_left_is_the_limit_minus_the_pools_nodes() {
        let mut pool = Pool::new("p");
        pool.limits.resources = Resources::new().with("nvidia.com/gpu", 20);
        pool.limits.nodes = Some(3);
        pool.limits.cost_per_hour = Some(10.0);
        let b = &budgets_of(pool, &[node("p", 8), node("other", 8)])[0];
        assert_eq!(b.resources["nvidia.com/gpu"], 12.0);
        assert_eq!(b.nodes, Some(2.0));
        assert_eq!(b.cost, Some(9.0));
    }
}
