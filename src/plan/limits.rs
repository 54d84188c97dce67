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

/// What each pool may still add, in the order of `input.pools`.
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
            let mut b = Budget {
                resources: p
                    .limits
                    .resources
                    .iter()
                    .map(|(k, v)| {
                        let used: i64 = mine.iter().map(|n| n.allocatable.get(k)).sum();
                        (k.to_string(), (v - used) as f64)
                    })
                    .collect(),
                nodes: p.limits.nodes.map(|n| (n - mine.len() as i64) as f64),
                cost: p
                    .limits
                    .cost_per_hour
                    .map(|c| c - mine.iter().map(|n| n.price_per_hour).sum::<f64>()),
            };
            for v in b.resources.values_mut() {
                *v = v.max(0.0);
            }
            b.nodes = b.nodes.map(|n| n.max(0.0));
            b.cost = b.cost.map(|c| c.max(0.0));
            b
        })
        .collect()
}
