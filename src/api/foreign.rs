//! Other projects' API objects the controller reads: Volcano PodGroups,
//! Workload API PodGroups (KEP-4671), cluster-autoscaler's
//! ProvisioningRequests and CapacityBuffers. Minimal serde structs holding only the fields
//! Quartermaster reads (everything else is ignored on the way in), with
//! `kube::Resource` implemented by hand, so no other project's crate is
//! pulled in. The Workload API is beta in Kubernetes 1.37 and alpha before,
//! changing version from release to release, so its version is chosen at
//! start-up (a [`ApiResource`]); the fields read here are the same in each.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::core::{ApiResource, NamespaceResourceScope};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Implements `kube::Resource` with static group, version and kind.
macro_rules! static_resource {
    ($t:ty, $group:literal, $version:literal, $kind:literal, $plural:literal) => {
        impl kube::Resource for $t {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;
            fn kind(_: &()) -> Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// API group of Volcano's PodGroup.
pub const VOLCANO_API_GROUP: &str = "scheduling.volcano.sh";
/// API version of Volcano's PodGroup that is read.
pub const VOLCANO_VERSION: &str = "v1beta1";
/// API group of the Workload API's PodGroup (KEP-4671).
pub const SCHEDULING_API_GROUP: &str = "scheduling.k8s.io";
/// Versions of `scheduling.k8s.io` serving a PodGroup with
/// `spec.schedulingPolicy.gang.minCount`, newest first (`v1beta1`: Kubernetes
/// 1.37).
pub const SCHEDULING_POD_GROUP_VERSIONS: [&str; 3] = ["v1beta1", "v1alpha3", "v1alpha2"];
/// API group of ProvisioningRequests.
pub const PROVISIONING_API_GROUP: &str = "autoscaling.x-k8s.io";
/// API version of ProvisioningRequests that is served.
pub const PROVISIONING_VERSION: &str = "v1";

/// A Volcano `PodGroup` (`scheduling.volcano.sh/v1beta1`): the pods naming
/// it in `scheduling.k8s.io/group-name` run together.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct VolcanoPodGroup {
    /// Object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the group needs.
    #[serde(default)]
    pub spec: VolcanoPodGroupSpec,
}

/// The fields of a Volcano PodGroup's spec that are read.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoPodGroupSpec {
    /// Pods that must run together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,
    /// What the whole group needs to start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
}

static_resource!(
    VolcanoPodGroup,
    "scheduling.volcano.sh",
    "v1beta1",
    "PodGroup",
    "podgroups"
);

/// A Workload API `PodGroup` (`scheduling.k8s.io`, beta or alpha): the pods naming
/// it in `spec.schedulingGroup.podGroupName` are scheduled as one group.
/// Its version is the one the cluster serves ([`SchedulingPodGroup::api`]).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct SchedulingPodGroup {
    /// Object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Its scheduling policy.
    #[serde(default)]
    pub spec: SchedulingPodGroupSpec,
    /// The claims made for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SchedulingPodGroupStatus>,
}

/// The fields of a Workload API PodGroup's spec that are read.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPodGroupSpec {
    /// `basic` or `gang`.
    #[serde(default)]
    pub scheduling_policy: SchedulingPolicy,
    /// Where the members must land together (a topology domain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_constraints: Option<SchedulingConstraints>,
    /// ResourceClaims the group holds once for all its members (a member
    /// names one by an entry of its own `spec.resourceClaims` equal to it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_claims: Vec<PodGroupResourceClaim>,
}

/// A PodGroup's scheduling constraints.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct SchedulingConstraints {
    /// Node label keys whose value every member's node must share (the API
    /// allows one today).
    #[serde(default)]
    pub topology: Vec<TopologyConstraint>,
}

/// One topology constraint: the members' nodes share one value of `key`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct TopologyConstraint {
    /// A node label key, e.g. `topology.kubernetes.io/zone`.
    #[serde(default)]
    pub key: String,
}

/// A ResourceClaim a PodGroup holds for its members: named directly, or
/// made once for the group from a template.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupResourceClaim {
    /// The entry's name in the group (and in each member's claims).
    #[serde(default)]
    pub name: String,
    /// A ResourceClaim of the group's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim_name: Option<String>,
    /// A ResourceClaimTemplate the group's claim is made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim_template_name: Option<String>,
}

/// A PodGroup's scheduling policy: only `gang` matters here (`basic`
/// schedules pods one by one).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    /// All-or-nothing scheduling of at least `minCount` pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangPolicy>,
}

/// The gang policy of a Workload API PodGroup.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GangPolicy {
    /// Pods that must be schedulable at the same time.
    #[serde(default)]
    pub min_count: Option<i32>,
}

impl SchedulingPodGroup {
    /// The PodGroup resource of `scheduling.k8s.io` at `version`.
    pub fn api(version: &str) -> ApiResource {
        ApiResource {
            group: SCHEDULING_API_GROUP.into(),
            version: version.into(),
            api_version: format!("{SCHEDULING_API_GROUP}/{version}"),
            kind: "PodGroup".into(),
            plural: "podgroups".into(),
        }
    }
}

/// What a PodGroup's status says about its claims.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPodGroupStatus {
    /// The claims made for the group from templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_claim_statuses: Vec<PodGroupResourceClaimStatus>,
}

/// The ResourceClaim made for one of a PodGroup's template claims.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupResourceClaimStatus {
    /// The entry's name in the group.
    #[serde(default)]
    pub name: String,
    /// The ResourceClaim made for it, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim_name: Option<String>,
}

impl kube::Resource for SchedulingPodGroup {
    type DynamicType = ApiResource;
    type Scope = NamespaceResourceScope;
    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A cluster-autoscaler `ProvisioningRequest` (`autoscaling.x-k8s.io/v1`):
/// capacity asked for before the pods exist (Kueue's ProvisioningRequest
/// admission check creates them).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct ProvisioningRequest {
    /// Object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What is asked for.
    #[serde(default)]
    pub spec: ProvisioningRequestSpec,
    /// Conditions as the autoscaler set them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ProvisioningRequestStatus>,
}

/// A ProvisioningRequest's spec (immutable).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestSpec {
    /// Groups of identical pods.
    #[serde(default)]
    pub pod_sets: Vec<PodSet>,
    /// How to provision (see [`CLASS_ATOMIC`], [`CLASS_CHECK_CAPACITY`]).
    #[serde(default)]
    pub provisioning_class_name: String,
    /// Class parameters (`ValidUntilSeconds`, `noRetry`, ...).
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
}

/// `count` pods shaped like a PodTemplate of the request's namespace.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    /// The PodTemplate.
    pub pod_template_ref: Reference,
    /// How many pods.
    pub count: i32,
}

/// A reference to an object in the same namespace.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct Reference {
    /// Its name.
    #[serde(default)]
    pub name: String,
}

/// A ProvisioningRequest's status.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestStatus {
    /// `Accepted`, `Provisioned`, `Failed`, `BookingExpired`, `CapacityRevoked`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Class-specific details for users.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub provisioning_class_details: BTreeMap<String, String>,
}

static_resource!(
    ProvisioningRequest,
    "autoscaling.x-k8s.io",
    "v1",
    "ProvisioningRequest",
    "provisioningrequests"
);

/// The class that launches a whole request or nothing.
pub const CLASS_ATOMIC: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";
/// The class answered from existing capacity, without launching.
pub const CLASS_CHECK_CAPACITY: &str = "check-capacity.autoscaling.x-k8s.io";
/// Pod annotation naming the ProvisioningRequest whose capacity the pod
/// consumes.
pub const CONSUME_ANNOTATION: &str = "autoscaling.x-k8s.io/consume-provisioning-request";
/// Pod annotation naming the request's class (Kueue sets it with the one above).
pub const CLASS_ANNOTATION: &str = "autoscaling.x-k8s.io/provisioning-class-name";
/// Parameter of the atomic class: seconds from creation to keep trying.
pub const PARAM_VALID_UNTIL_SECONDS: &str = "ValidUntilSeconds";
/// Parameter of check-capacity: fail instead of retrying.
pub const PARAM_NO_RETRY: &str = "noRetry";

/// ProvisioningRequest condition types, as cluster-autoscaler sets them.
pub mod conditions {
    /// The request was accepted and will be worked on.
    pub const ACCEPTED: &str = "Accepted";
    /// The capacity exists (launched, or found).
    pub const PROVISIONED: &str = "Provisioned";
    /// The capacity cannot be had.
    pub const FAILED: &str = "Failed";
    /// The capacity was held for its reservation time and is released.
    pub const BOOKING_EXPIRED: &str = "BookingExpired";
    /// The capacity is no longer there (a spot reclaim took part of it).
    pub const CAPACITY_REVOKED: &str = "CapacityRevoked";
}

/// ProvisioningRequest condition reasons, as cluster-autoscaler sets them.
pub mod reasons {
    /// With `Accepted`.
    pub const ACCEPTED: &str = "Accepted";
    /// With `Provisioned=True` (atomic class).
    pub const CAPACITY_IS_PROVISIONED: &str = "CapacityIsProvisioned";
    /// With `Provisioned=True` (check-capacity).
    pub const CAPACITY_IS_FOUND: &str = "CapacityIsFound";
    /// With `Provisioned=False` or `Failed=True`: not enough capacity.
    pub const CAPACITY_IS_NOT_FOUND: &str = "CapacityIsNotFound";
    /// With `Failed=True`: the request's pods cannot be made (a missing or
    /// bad PodTemplate).
    pub const FAILED_TO_CREATE_PODS: &str = "FailedToCreatePods";
    /// With `Failed=True`: a parameter does not read or is out of range
    /// (`ValidUntilSeconds`); Quartermaster's own reason.
    pub const INVALID_PARAMETERS: &str = "InvalidParameters";
    /// With `Failed=True`: `ValidUntilSeconds` passed before provisioning.
    pub const EXPIRED: &str = "Expired";
    /// With `BookingExpired=True`.
    pub const CAPACITY_RESERVATION_TIME_EXPIRED: &str = "CapacityReservationTimeExpired";
}

/// API version of CapacityBuffers that is read: the one cluster-autoscaler
/// 1.37 stores and serves (`autoscaling.x-k8s.io/v1beta1`).
pub const CAPACITY_BUFFER_VERSION: &str = "v1beta1";

/// A `CapacityBuffer` (`autoscaling.x-k8s.io/v1beta1`, served by
/// cluster-autoscaler 1.37 and Karpenter): spare capacity for `replicas`
/// copies of a PodTemplate's pod, kept ready for pods not created yet.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct CapacityBuffer {
    /// Object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What is to be kept spare.
    #[serde(default)]
    pub spec: CapacityBufferSpec,
    /// What the autoscaler made of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CapacityBufferStatus>,
}

/// The fields of a CapacityBuffer's spec that are read.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferSpec {
    /// Who provisions it: [`STRATEGY_ACTIVE_CAPACITY`] (the default, also
    /// when empty) is served here; other strategies are left to others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
    /// The PodTemplate (same namespace) shaping one chunk of the buffer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<Reference>,
    /// A scalable workload (same namespace) whose pod is one chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    /// Chunks wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Chunks as a share of the `scalableRef`'s replicas, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<i32>,
    /// Whether consumed capacity is made again: `recreate` (the default) or
    /// `none` (one-shot). Proposed upstream (kubernetes/autoscaler#10108),
    /// not in the v1beta1 schema: read when a CRD carries it, else from
    /// `quartermaster.dev/buffer-refill-strategy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refill_strategy: Option<String>,
    /// Most the chunks may ask for together, by resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
}

/// A CapacityBuffer's reference to a scalable workload.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    /// API group (empty: core).
    #[serde(default)]
    pub api_group: String,
    /// Kind (`Deployment`, ...).
    #[serde(default)]
    pub kind: String,
    /// Name.
    #[serde(default)]
    pub name: String,
}

/// A CapacityBuffer's status.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    /// The PodTemplate the chunks were made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<Reference>,
    /// Chunks made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// `ReadyForProvisioning`, `Provisioning`, `Infeasible`.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

static_resource!(
    CapacityBuffer,
    "autoscaling.x-k8s.io",
    "v1beta1",
    "CapacityBuffer",
    "capacitybuffers"
);

/// The provisioning strategy served here: placeholder pods for which
/// capacity is launched.
pub const STRATEGY_ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";

/// CapacityBuffer condition types and reasons.
pub mod buffer_conditions {
    /// The buffer's chunks are resolved (template and replicas read).
    pub const READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
    /// Capacity for the chunks is held, launching, or being planned.
    pub const PROVISIONING: &str = "Provisioning";
    /// No capacity can be had for the buffer (proposed upstream,
    /// kubernetes-sigs/karpenter#3223): no pool can hold its pod, or the
    /// buffer cannot be read.
    pub const INFEASIBLE: &str = "Infeasible";
    /// With `ReadyForProvisioning=True` (cluster-autoscaler's reason).
    pub const ATTRIBUTES_SET_SUCCESSFULLY: &str = "AttributesSetSuccessfully";
    /// With `Provisioning=True`: every chunk has room on a Ready node (the
    /// reason Karpenter sets and Kueue's buffer-backed admission check,
    /// KEP-5133, waits for).
    pub const FITS_EXISTING_CAPACITY: &str = "FitsExistingCapacity";
    /// With `Provisioning=False`: capacity for some chunks is being planned
    /// or launched, or their node is not Ready yet (Karpenter's reason; Kueue
    /// keeps the workload pending).
    pub const REQUIRES_NEW_CAPACITY: &str = "RequiresNewCapacity";
    /// With `Provisioning=False`: a one-shot buffer whose every chunk was
    /// consumed by pods; it holds and launches nothing more.
    pub const CONSUMED: &str = "Consumed";
    /// With `Infeasible=True`, `Provisioning=False`: no pool can hold a chunk.
    pub const NOT_PLACEABLE: &str = "NotPlaceable";
    /// With `Provisioning=False`: a scheduled buffer outside its window.
    pub const OUTSIDE_SCHEDULE: &str = "OutsideSchedule";
    /// With `Infeasible=False`: a pool can hold the chunks again.
    pub const PLACEABLE: &str = "Placeable";
    /// The PodTemplate named is missing.
    pub const POD_TEMPLATE_NOT_FOUND: &str = "PodTemplateNotFound";
    /// The PodTemplate does not read as a pod.
    pub const INVALID_POD_TEMPLATE: &str = "InvalidPodTemplate";
    /// The spec cannot be served (negative replicas, unreadable limits, no
    /// template or workload, both, `percentage` without `scalableRef`).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The workload `spec.scalableRef` names is missing.
    pub const SCALABLE_REF_NOT_FOUND: &str = "ScalableRefNotFound";
    /// `spec.scalableRef` names a kind not served here (served: apps/v1
    /// Deployment, StatefulSet, ReplicaSet; batch/v1 Job).
    pub const SCALABLE_REF_NOT_SUPPORTED: &str = "ScalableRefNotSupported";
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn paths_name_each_foreign_resource() {
        assert_eq!(
            VolcanoPodGroup::url_path(&(), Some("ml")),
            "/apis/scheduling.volcano.sh/v1beta1/namespaces/ml/podgroups"
        );
        assert_eq!(
            ProvisioningRequest::url_path(&(), None),
            "/apis/autoscaling.x-k8s.io/v1/provisioningrequests"
        );
        assert_eq!(
            SchedulingPodGroup::url_path(&SchedulingPodGroup::api("v1alpha2"), None),
            "/apis/scheduling.k8s.io/v1alpha2/podgroups"
        );
    }

    #[test]
    fn only_the_fields_read_are_kept() {
        let pg: VolcanoPodGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"minMember": 4, "queue": "default", "minResources": {"nvidia.com/gpu": "8"}},
            "status": {"phase": "Pending"}
        }))
        .unwrap();
        assert_eq!(pg.spec.min_member, Some(4));
        assert_eq!(pg.spec.min_resources.unwrap()["nvidia.com/gpu"].0, "8");
    }
}
