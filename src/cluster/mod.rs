//! The cluster snapshot: pods, nodes, in-flight claims and NodePools, with
//! requirements, taints/tolerations, gangs and resource arithmetic (GPU, MIG,
//! Neuron). Kubernetes types are converted at the edge into compact types of
//! our own; nothing here talks to the API server.

pub mod dra;
pub mod gpu_use;
pub mod node;
pub mod pod;
pub mod podgroups;
pub mod pool;
pub mod requirements;
pub mod resources;
pub mod shape;
pub mod workloads;

/// A map for lookups by claim, pod name or pod shape made on every round or
/// plan: a fixed-seed hash, so every run iterates it in the same order (the
/// simulator replays byte for byte), but not a sorted one. Iterate it only
/// where order does not matter.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

/// The set form of [`FastMap`], under the same rule.
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::FixedState>;

pub use node::NodeState;
pub use pod::{ClaimRef, GangSource, GroupRef, Pod, ZoneSpread};
pub use pool::{Limits, Pool};
pub use requirements::{Effect, Labels, NodeAffinity, Operator, Requirement, Taint, Toleration};
pub use resources::Resources;
pub use shape::GpuSharing;

/// Everything the planner reads about the cluster at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Pods waiting for capacity.
    pub pending: Vec<Pod>,
    /// Registered nodes and in-flight claims.
    pub nodes: Vec<NodeState>,
    /// NodePools.
    pub pools: Vec<Pool>,
}
