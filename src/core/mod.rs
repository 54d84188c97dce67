//! Lifecycle decisions as pure functions of the world, the catalog and `now`:
//! provisioning batches, spot interruption response, pre-warm windows,
//! scale-down, and the learned interruption rates the planner uses. Nothing
//! here does I/O, reads the clock or spawns tasks; pending timers are data
//! (`next_deadline`) so that the simulator can jump to them and the
//! controller can sleep until them.
//!
//! This module holds the shared vocabulary (time, notices, actions, the
//! world the drivers fill); each decision lives in its own submodule.

pub mod batch;
pub mod budgets;
pub mod buffers;
pub mod cadence;
pub mod consolidation;
mod decide;
pub mod drift;
pub mod estimator;
pub mod fallback;
pub mod gang;
pub mod gang_launch;
pub mod interruption;
pub mod pool_index;
pub mod prewarm;
pub mod provisioning;
pub mod repair;
pub mod retry;
pub mod termination;
pub mod time;

pub use decide::{Config, Core, PlanReport, StepFailure};
pub use retry::Outcome;

use crate::catalog::CapacityType;
use crate::cluster::{NodeState, Pod};
use std::fmt;

/// A point in time. Calendar time, because pre-warm windows and disruption
/// budgets are cron schedules in named time zones.
pub type Time = chrono::DateTime<chrono::Utc>;

/// A spot pool: one instance type in one zone, bought one way. What
/// capacity errors and interruptions are counted against.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OfferingKey {
    /// Instance type.
    pub instance_type: String,
    /// Zone ID.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
}

impl fmt::Display for OfferingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} in {}",
            self.instance_type, self.capacity_type, self.zone
        )
    }
}

/// A pod running on one of our nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundPod {
    /// The pod (requests, labels, checkpoint settings).
    pub pod: Pod,
    /// `quartermaster.dev/do-not-disrupt` is set on the pod.
    pub do_not_disrupt: bool,
    /// When the workload acknowledged the last checkpoint request, if it did.
    pub checkpoint_completed: Option<Time>,
    /// When the pod started on this node (`status.startTime`), if known:
    /// the checkpoint cadence counts from it.
    pub started: Option<Time>,
    /// Index into [`World::pdbs`] of the budget that covers the pod.
    pub pdb: Option<usize>,
    /// The pod is a pre-warm placeholder, not real work.
    pub placeholder: bool,
}

/// A node Quartermaster launched (a NodeClaim), with its pods.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedNode {
    /// NodeClaim name.
    pub claim: String,
    /// NodePool name.
    pub nodepool: String,
    /// What was bought.
    pub offering: OfferingKey,
    /// USD per hour.
    pub price_per_hour: f64,
    /// When the launch was requested.
    pub launched_at: Time,
    /// When the node became Ready with its accelerators advertised.
    pub ready_at: Option<Time>,
    /// Shape, labels, taints, free room; `state.unschedulable` is the cordon.
    pub state: NodeState,
    /// Pods bound to it.
    pub pods: Vec<BoundPod>,
    /// A number the driver changes whenever `pods` may have changed, or 0
    /// where it keeps none (the controller rebuilds its nodes each round).
    /// Consolidation's clock skips comparing the pods of a node whose
    /// nonzero number is the one it saw last: the simulator's rounds ask
    /// this of every node.
    pub pods_revision: u64,
    /// The node carries `quartermaster.dev/do-not-disrupt`.
    pub do_not_disrupt: bool,
    /// What no longer matches its pool or node class, if anything
    /// ([`drift::detect`], filled by the driver): such a node is replaced.
    pub drifted: Option<drift::Drift>,
    /// The node carries `quartermaster.dev/disrupted` (our cordon, not a
    /// user's `kubectl cordon`) and its claim is not being deleted (that is
    /// its finalizer's): a disruption of ours started on it. One that no
    /// in-memory drain owns was lost with a restarted controller.
    pub disrupted: bool,
    /// What the node's conditions (and DCGM) say of its health, for repair
    /// ([`repair`]); empty where nothing is known.
    pub health: repair::Health,
    /// Since when every GPU of the node has been idle, as DCGM reports
    /// (filled by the driver from a fresh reading only; `None` when busy or
    /// not known), for pools that consolidate idle GPU nodes
    /// (`disruption.consolidateIdleGpusAfter`).
    pub gpu_idle_since: Option<Time>,
    /// How long it may live (its claim's `expireAfter`: its pool's when it
    /// was launched); `None`: forever. An older node is replaced
    /// (`consolidation::expired`).
    pub expire_after: Option<std::time::Duration>,
    /// Its claim's `terminationGracePeriod` (its pool's when it was
    /// launched); `None`: none.
    pub termination_grace: Option<std::time::Duration>,
}

impl ManagedNode {
    /// The pods bound to it that have a per-node cap, counted by their
    /// set's key ([`NodeState::capped`]): what a pending sibling must count
    /// before it is taken to fit here.
    pub fn capped(&self) -> std::collections::BTreeMap<String, u32> {
        let mut out = std::collections::BTreeMap::new();
        for b in &self.pods {
            if let Some(k) = crate::plan::pack::anti_affinity_key(&b.pod) {
                *out.entry(k).or_default() += 1;
            }
        }
        out
    }

    /// Its state with [`NodeState::capped`] filled, if it holds capped pods.
    pub fn state_with_caps(&self) -> Option<NodeState> {
        let capped = self.capped();
        (!capped.is_empty()).then(|| NodeState {
            capped,
            ..self.state.clone()
        })
    }
}

/// A PodDisruptionBudget, reduced to what eviction decisions need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdb {
    /// `namespace/name`.
    pub name: String,
    /// Evictions it allows right now (`status.disruptionsAllowed`).
    pub disruptions_allowed: u32,
}

pub(crate) use crate::cluster::{FastMap, FastSet};

/// Everything a decision reads, filled by a driver.
#[derive(Debug, Clone, Copy)]
pub struct World<'a> {
    /// Instance types and offerings.
    pub catalog: &'a crate::catalog::Catalog,
    /// Region.
    pub region: &'a str,
    /// NodePools as the API has them (policies, windows, budgets).
    pub pools: &'a [crate::api::NodePool],
    /// Pods waiting for capacity.
    pub pending: &'a [Pod],
    /// Our nodes and in-flight claims.
    pub nodes: &'a [ManagedNode],
    /// A number the driver changes whenever anything in `nodes` changes (a
    /// node added, removed, or changed in any field), so that the core may
    /// keep what it worked out from the nodes while it stays the same: the
    /// simulator's rounds mostly see the same nodes, and reading every node
    /// on every round was most of a long replay's time. 0 when the driver
    /// does not say (the controller): the core then reads every node.
    pub nodes_revision: u64,
    /// Disruption budgets.
    pub pdbs: &'a [Pdb],
}

impl World<'_> {
    /// Whether `nodes` are known to be what they were at `revision` (a
    /// [`World::nodes_revision`] read before; 0 is never known).
    pub fn same_nodes_as(&self, revision: u64) -> bool {
        self.nodes_revision != 0 && self.nodes_revision == revision
    }
}

/// Something the cloud told us about an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// EC2 Spot Instance Interruption Warning: reclaimed at `deadline`
    /// (two minutes after the notice).
    SpotInterruption {
        /// NodeClaim of the instance.
        claim: String,
        /// When EC2 takes the instance back.
        deadline: Time,
    },
    /// EC2 Instance Rebalance Recommendation: elevated risk, no deadline.
    Rebalance {
        /// NodeClaim of the instance.
        claim: String,
    },
    /// A scheduled change to the instance (AWS Health: retirement, stop,
    /// reboot, maintenance) that starts at `start` (`None`: not said).
    /// Cordoned at once, replaced first, drained before the start
    /// (`docs/disruption.md`, Scheduled changes); not evidence of any spot
    /// pool's rate.
    ScheduledChange {
        /// NodeClaim of the instance.
        claim: String,
        /// When the change starts.
        start: Option<Time>,
    },
    /// The instance stopped or terminated outside our control.
    Terminated {
        /// NodeClaim of the instance.
        claim: String,
    },
    /// The capacity reservation (a Capacity Block for ML, or a reservation
    /// with an end date) the node runs in ends at `end`: EC2's expiry
    /// warning, or the core's own clock ([`interruption::reservation_endings`]).
    /// Handled like a spot interruption with `end` as the deadline, but not
    /// evidence of any spot pool's rate.
    ReservationEnding {
        /// NodeClaim of the instance.
        claim: String,
        /// When EC2 takes the reservation's instances back.
        end: Time,
    },
    /// Launching this offering failed for lack of capacity.
    InsufficientCapacity {
        /// The offering.
        offering: OfferingKey,
    },
}

/// Why a node is going away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisruptionReason {
    /// A spot interruption notice.
    Interrupted,
    /// A rebalance recommendation, with the pool's action `Drain`/`Replace`.
    Rebalance,
    /// Empty for longer than `consolidateAfter`.
    Empty,
    /// Its pods fit elsewhere and the result is cheaper.
    Underutilized,
    /// The instance is gone already.
    Terminated,
    /// It no longer matches its pool's template or node class
    /// ([`drift`]): replaced, new node first.
    Drifted,
    /// Launched for an EFA gang another member of which failed to launch:
    /// released so that the gang is planned again whole.
    GangLaunchFailed,
    /// Unhealthy past its pool's repair policy (or still unhealthy after a
    /// reboot): replaced, new node first where the pool can stage one.
    Unhealthy,
    /// A scheduled change (instance retirement, stop, reboot, maintenance)
    /// is coming: drained before it starts.
    ScheduledChange,
    /// Older than its pool's `expireAfter`: replaced, new node first,
    /// whatever the disruption budgets say (`consolidation::expired`).
    Expired,
}

impl fmt::Display for DisruptionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DisruptionReason::Interrupted => "spot interruption",
            DisruptionReason::Rebalance => "rebalance recommendation",
            DisruptionReason::Empty => "empty",
            DisruptionReason::Underutilized => "underutilized",
            DisruptionReason::Terminated => "instance terminated",
            DisruptionReason::Drifted => "drifted",
            DisruptionReason::GangLaunchFailed => "another member of its gang failed to launch",
            DisruptionReason::Unhealthy => "unhealthy",
            DisruptionReason::ScheduledChange => "scheduled maintenance",
            DisruptionReason::Expired => "expired",
        })
    }
}

impl DisruptionReason {
    /// The reason as a machine name, in Karpenter's metric vocabulary where
    /// it has one (`empty`, `underutilized`, `drifted`, and its AWS
    /// interruption message kinds `spot_interrupted`,
    /// `rebalance_recommendation`, `scheduled_change`,
    /// `instance_terminated`).
    pub fn name(self) -> &'static str {
        match self {
            DisruptionReason::Interrupted => "spot_interrupted",
            DisruptionReason::Rebalance => "rebalance_recommendation",
            DisruptionReason::Empty => "empty",
            DisruptionReason::Underutilized => "underutilized",
            DisruptionReason::Terminated => "instance_terminated",
            DisruptionReason::Drifted => "drifted",
            DisruptionReason::GangLaunchFailed => "gang_launch_failed",
            DisruptionReason::Unhealthy => "unhealthy",
            DisruptionReason::ScheduledChange => "scheduled_change",
            DisruptionReason::Expired => "expired",
        }
    }

    /// The budgets' name for a voluntary disruption (`spec.disruption.budgets[].reasons`);
    /// `None` for the involuntary ones, which no budget limits.
    pub fn budget_reason(self) -> Option<crate::api::BudgetReason> {
        use crate::api::BudgetReason as B;
        match self {
            DisruptionReason::Empty => Some(B::Empty),
            DisruptionReason::Underutilized => Some(B::Underutilized),
            DisruptionReason::Drifted => Some(B::Drifted),
            DisruptionReason::Unhealthy => Some(B::Unhealthy),
            DisruptionReason::Interrupted
            | DisruptionReason::Rebalance
            | DisruptionReason::Terminated
            | DisruptionReason::GangLaunchFailed
            | DisruptionReason::ScheduledChange
            // Budgets do not hold an expired node back (Karpenter v1).
            | DisruptionReason::Expired => None,
        }
    }
}

/// A disruption [`Core::decide`] started (consolidation, drift replacement,
/// repair's replacement of an unhealthy node, or the forceful replacement
/// of an expired node): which nodes go, why,
/// and the claims launched to take their pods. Data for the drivers'
/// metrics; the actions carry it out.
#[derive(Debug, Clone, PartialEq)]
pub struct DisruptionDecision {
    /// Why: [`DisruptionReason::Empty`], [`DisruptionReason::Underutilized`],
    /// [`DisruptionReason::Drifted`], [`DisruptionReason::Unhealthy`] or
    /// [`DisruptionReason::Expired`].
    pub reason: DisruptionReason,
    /// The claims to remove (several empty nodes go in one decision).
    pub claims: Vec<String>,
    /// The claims launched in their place; empty: removed without one.
    pub replacements: Vec<String>,
}

/// A node to launch: the NodeClaim the driver creates before it launches.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimRequest {
    /// NodeClaim name (unique, chosen by the core).
    pub claim: String,
    /// NodePool.
    pub nodepool: String,
    /// What to buy.
    pub offering: OfferingKey,
    /// USD per hour expected.
    pub price_per_hour: f64,
    /// Pods it is launched for (`namespace/name`); empty for pre-warm.
    pub pods: Vec<String>,
    /// The pre-warm window it holds capacity for, if any.
    pub prewarm_window: Option<String>,
    /// The capacity reservation (or Capacity Block) it launches into, for
    /// reserved capacity.
    pub reservation: Option<String>,
    /// Whether it goes into its pool's cluster placement group of its zone
    /// because its pods' gang must share one network block
    /// ([`crate::cluster::Pod::network_block`]); the NodeClaim carries it as
    /// `quartermaster.dev/cluster-placement`.
    pub cluster_placement: bool,
}

/// A decision, as data. Executing it is the driver's job.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create the NodeClaim, then launch its instance.
    Launch(ClaimRequest),
    /// Cordon the node and taint it `quartermaster.dev/disrupted:NoSchedule`.
    Cordon {
        /// NodeClaim.
        claim: String,
        /// Why.
        reason: DisruptionReason,
    },
    /// Take back a cordon of ours: remove `quartermaster.dev/disrupted` and
    /// `unschedulable` (a removal that no longer holds on a fresh world).
    Uncordon {
        /// NodeClaim.
        claim: String,
    },
    /// Ask a pod to checkpoint by `deadline` (annotation, and the hook if
    /// the pod or pool names one).
    RequestCheckpoint {
        /// Pod.
        pod: String,
        /// Its node's claim.
        claim: String,
        /// When the node goes away (or the grace period ends).
        deadline: Time,
    },
    /// Evict a pod through the Eviction API (PDBs apply).
    Evict {
        /// Pod.
        pod: String,
        /// Its node's claim.
        claim: String,
    },
    /// Delete the NodeClaim: terminate the instance, remove the node.
    Delete {
        /// NodeClaim.
        claim: String,
        /// Why.
        reason: DisruptionReason,
    },
    /// Reboot the node's instance (repair): its pods stay bound and are
    /// restarted by the kubelet when it is back.
    Reboot {
        /// NodeClaim.
        claim: String,
        /// The unhealthy condition, as `Type=Status (Reason)`.
        condition: String,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Launch(c) => {
                write!(
                    f,
                    "launch {} for pool {}: {} at ${:.4}/h",
                    c.claim, c.nodepool, c.offering, c.price_per_hour
                )?;
                match &c.prewarm_window {
                    Some(w) => write!(f, " (pre-warm window {w})"),
                    None => write!(f, " ({} pods)", c.pods.len()),
                }
            }
            Action::Cordon { claim, reason } => write!(f, "cordon {claim} ({reason})"),
            Action::Uncordon { claim } => write!(f, "uncordon {claim}"),
            Action::RequestCheckpoint {
                pod,
                claim,
                deadline,
            } => write!(
                f,
                "request checkpoint of {pod} on {claim} by {}",
                deadline.to_rfc3339()
            ),
            Action::Evict { pod, claim } => write!(f, "evict {pod} from {claim}"),
            Action::Delete { claim, reason } => write!(f, "delete {claim} ({reason})"),
            Action::Reboot { claim, condition } => {
                write!(f, "reboot {claim} (unhealthy: {condition})")
            }
        }
    }
}
