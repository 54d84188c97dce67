//! The NodeClaim CRD (`quartermaster.dev/v1alpha1`, cluster-scoped): the
//! record of one launch decision, created before the instance is launched so
//! that a restarted controller neither leaks nor doubles instances. The spec
//! is immutable; the lifecycle reconciler fills the status one condition at
//! a time (Launched, Registered, Initialized).

use super::common::{is_condition_true, resource_list_schema, Condition, ResourceList, Taint};
use crate::catalog::CapacityType;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Condition types of a NodeClaim, set in this order by the lifecycle reconciler.
pub mod conditions {
    /// The instance was launched (the status has a provider ID).
    pub const LAUNCHED: &str = "Launched";
    /// The instance joined the cluster as a node (the status has a node name).
    pub const REGISTERED: &str = "Registered";
    /// The node is ready, its startup taints are gone and its extended
    /// resources (GPUs, MIG devices, Neuron devices) are advertised.
    pub const INITIALIZED: &str = "Initialized";
    /// All of the above: the claim's capacity is usable.
    pub const READY: &str = "Ready";
    /// Set while the claim is being deleted: `False` names the pods whose
    /// eviction failed (retried) or that the termination grace period had
    /// deleted.
    pub const DRAINED: &str = "Drained";
    /// The instance was told it will be interrupted (reason
    /// `SpotInterruption`: a spot interruption warning; `ScheduledChange`:
    /// an AWS Health scheduled retirement, stop, reboot or maintenance):
    /// the durable record of the notice, written before the notice is let
    /// go, so that a restarted controller carries on with the response.
    /// The message ends with the deadline or start
    /// (see `controller::interruptions`).
    pub const INTERRUPTED: &str = "Interrupted";
    /// The node no longer matches its pool's template or its node class;
    /// the reason says which (`PoolTemplateChanged`, `NodeClassChanged`,
    /// `ImageChanged`, see `core::drift`). Such a node is replaced within
    /// the pool's disruption budget. Removed when it matches again.
    pub const DRIFTED: &str = "Drifted";
}

/// The launch a NodeClaim records: pool, offering, price and the node's
/// labels and taints.
// kube's `printcolumn(..)` repeats `type_ = ...`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "quartermaster.dev",
    version = "v1alpha1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    shortname = "qnc",
    category = "quartermaster",
    status = "NodeClaimStatus",
    derive = "PartialEq",
    doc = "A NodeClaim: one node Quartermaster decided to launch, with the offering it chose (instance type, zone, capacity type) and the price it expected. Created before the launch; its spec never changes.",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.instanceType"),
    printcolumn(name = "Capacity", type_ = "string", json_path = ".spec.capacityType"),
    printcolumn(name = "Zone", type_ = "string", json_path = ".spec.zone"),
    printcolumn(
        name = "Price",
        type_ = "number",
        description = "USD per hour at launch",
        json_path = ".spec.pricePerHour"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.nodeName"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Initialized",
        type_ = "string",
        priority = 1,
        json_path = ".status.conditions[?(@.type==\"Initialized\")].status"
    ),
    printcolumn(
        name = "Pool",
        type_ = "string",
        priority = 1,
        json_path = ".spec.nodePool"
    ),
    printcolumn(
        name = "ID",
        type_ = "string",
        priority = 1,
        json_path = ".status.providerID"
    ),
    printcolumn(
        name = "Drifted",
        type_ = "string",
        priority = 1,
        description = "What no longer matches the pool or node class",
        json_path = ".status.conditions[?(@.type==\"Drifted\")].reason"
    )
)]
#[x_kube(validation = Rule::new("self == oldSelf").message("spec is immutable"))]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimSpec {
    /// The NodePool the claim belongs to.
    #[schemars(length(min = 1, max = 253))]
    pub node_pool: String,
    /// EC2 instance type, e.g. `p5.48xlarge`.
    #[schemars(length(min = 1, max = 64))]
    pub instance_type: String,
    /// Availability zone ID (the same in every account), e.g. `use1-az4`.
    #[schemars(length(min = 1, max = 32))]
    pub zone: String,
    /// `spot`, `on-demand` or `reserved` (the reservation's ID is the
    /// `quartermaster.dev/capacity-reservation-id` label).
    pub capacity_type: CapacityType,
    /// USD per instance-hour the planner expected when it chose the offering.
    #[schemars(range(min = 0))]
    pub price_per_hour: f64,
    /// Resources the claim was launched for (the pods' requests it must fit).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub resources: ResourceList,
    /// Labels the node gets (the pool's, the offering's and the well-known ones).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Taints the node carries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Taints the node carries until it is initialized.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    /// Longest the node may take to drain once the claim is deleted (Go
    /// duration), copied from the pool's template at creation: after it,
    /// remaining pods are deleted rather than evicted and the instance is
    /// terminated. Unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = super::duration::DURATION_PATTERN), length(max = 32))]
    pub termination_grace_period: Option<String>,
    /// How long the node may live (Go duration or `Never`), copied from the
    /// pool's template at creation: an older node is replaced (`expireAfter`
    /// in `docs/disruption.md`). Unset: forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = super::nodepool::EXPIRE_AFTER_PATTERN), length(max = 32))]
    pub expire_after: Option<String>,
}

/// What the lifecycle reconciler observed about a claim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// The instance's provider ID (`aws:///use1-az4/i-0123456789abcdef0`),
    /// once launched.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Name of the node, once registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Conditions: `Launched`, `Registered`, `Initialized`, `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Capacity of the node as launched.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub capacity: ResourceList,
    /// Allocatable resources of the node (capacity less reservations).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub allocatable: ResourceList,
    /// The image (AMI ID) the instance was launched with, when the
    /// provider has node classes (for drift).
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The hash of the node class the instance was launched with (for
    /// drift; versioned by the `quartermaster.dev/drift-hash-version`
    /// annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_hash: Option<String>,
}

impl NodeClaimStatus {
    /// The condition of that type, if present.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        super::common::find_condition(&self.conditions, type_)
    }

    /// Whether the condition of that type is `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        is_condition_true(&self.conditions, type_)
    }
}

impl NodeClaim {
    /// Whether the claim is `Ready` (launched, registered and initialized).
    pub fn is_ready(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.is_true(conditions::READY))
    }
}
