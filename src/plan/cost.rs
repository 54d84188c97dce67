//! What one new node costs a plan: the objective every planner reports
//! (`Plan::risk_adjusted_cost_per_hour`) is the sum of these over the new
//! nodes. Three separate terms: the offering's price, the expected
//! interruption cost of the pods on it ([`super::risk`]), and the
//! idle-accelerator charge, a share of the node's price per accelerator its
//! pods leave idle (a tie-breaker toward fuller nodes, not money spent).

use super::candidates::Candidate;
use super::risk::exposure;
use super::{pod_risk_cost, Input};
use crate::cluster::Pod;

/// The cost terms of one node, USD per hour.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NodeCost {
    /// The offering's price.
    pub price: f64,
    /// Expected interruption cost of its pods.
    pub interruption: f64,
    /// Idle-accelerator charge.
    pub idle: f64,
}

impl NodeCost {
    /// Price + expected interruption cost + idle charge.
    pub fn total(&self) -> f64 {
        self.price + self.interruption + self.idle
    }
}

/// What a node of `c` holding `pods` costs, with `idle_charge` as the share
/// of the price per idle accelerator (`Options::idle_accelerator_charge`).
/// Each pod's interruption cost is its share of the node as if the node were
/// full of pods like it ([`pods_like_it`]), as the model prices it.
pub fn node_cost<'a>(
    input: &Input,
    c: &Candidate,
    pods: impl IntoIterator<Item = &'a Pod>,
    idle_charge: f64,
) -> NodeCost {
    let aversion = input.pools[c.pool].risk_aversion;
    let mut interruption = 0.0;
    let mut used = 0;
    for p in pods {
        let k = pods_like_it(p, c);
        interruption += pod_risk_cost(&exposure(p), c, k, aversion);
        if let Some(r) = &c.accelerator_resource {
            used += p.requests.get(r);
        }
    }
    let idle = if c.accelerator_units > 0 {
        idle_charge * c.price() * (c.accelerator_units - used).max(0) as f64
            / c.accelerator_units as f64
    } else {
        0.0
    };
    NodeCost {
        price: c.price(),
        interruption,
        idle,
    }
}

/// How many pods like `pod` a node of `c` holds, for pricing its share of
/// the node: the copies of its requests that fit, 1 with hostname
/// anti-affinity (it has the node to itself), at least 1.
pub fn pods_like_it(pod: &Pod, c: &Candidate) -> u32 {
    pod.requests
        .copies_in(&c.allocatable)
        .min(pod.per_node_max.unwrap_or(u32::MAX))
        .max(1)
}
