//! Capacity that exists or is on its way: registered nodes and in-flight
//! NodeClaims, with what is still free on them.

use super::requirements::{Labels, Taint};
use super::resources::Resources;
use crate::catalog::CapacityType;

/// A node, or a NodeClaim whose node has not registered yet.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeState {
    /// Node name (or claim name while in flight).
    pub name: String,
    /// The NodePool that owns it, if it is one of ours.
    pub nodepool: Option<String>,
    /// Instance type, if known.
    pub instance_type: Option<String>,
    /// Zone ID.
    pub zone: String,
    /// Spot or on-demand, if known.
    pub capacity_type: Option<CapacityType>,
    /// Node labels (for in-flight claims: the labels it will carry).
    pub labels: Labels,
    /// Node taints (startup taints excluded: they are lifted at registration).
    pub taints: Vec<Taint>,
    /// Allocatable resources.
    pub allocatable: Resources,
    /// Requests of daemonset pods and pods bound to the node.
    pub used: Resources,
    /// USD per hour, if known.
    pub price_per_hour: f64,
    /// A NodeClaim that has not become a Ready node yet.
    pub in_flight: bool,
    /// Cordoned: takes no new pods.
    pub unschedulable: bool,
}

impl NodeState {
    /// Allocatable minus what is used (never negative).
    pub fn free(&self) -> Resources {
        self.allocatable.minus(&self.used).at_least_zero()
    }
}
