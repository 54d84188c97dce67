//! CRD types (NodePool, NodeClaim, EC2NodeClass) with defaults and validation, and the
//! well-known keys shared by every part of the system. Also the parsers of
//! the value formats the CRDs use: Go durations, 5-field cron expressions and
//! IANA time zones, Kubernetes quantities.

pub mod common;
pub mod crds;
pub mod duration;
pub mod foreign;
pub mod karpenter;
pub mod nodeclaim;
pub mod nodeclass;
pub mod nodepool;
pub mod quantity;
pub mod read;
pub mod schedule;
pub mod validate;

/// The well-known keys, re-exported where the CRD types use them; they live
/// in the leaf [`crate::labels`] so that lower layers (`catalog`) need not
/// depend on the CRD types.
pub use crate::labels;

pub use common::{Condition, Operator, Requirement, ResourceList, Taint, TaintEffect};
pub use duration::{format_duration, parse_duration, DurationError};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use nodeclass::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus, NodeClassReference};
pub use nodepool::{
    Budget, BudgetNodes, BudgetReason, CheckpointHook, ConditionStatus, ConsolidationPolicy,
    Disruption, DraPolicy, FirstAvailable, GpuSharing, GpuSharingMode, InterruptionPolicy,
    LimitError, NodeClaimTemplate, NodePool, NodePoolSpec, NodePoolStatus, PrewarmWindow,
    RebalanceAction, Repair, RepairAction, RepairCondition, RiskPolicy,
};
pub use quantity::{parse_quantity, QuantityError};
pub use schedule::{parse_cron, parse_time_zone, ScheduleError};
pub use validate::{selected_instance_types, validate_node_claim, validate_node_pool, FieldError};
