//! The distilled objects the index keeps: pods ([`PodInfo`], with a shared
//! [`PodShape`] per workload and interned names), nodes ([`NodeInfo`]) and
//! PodDisruptionBudgets ([`PdbInfo`]), each built from its Kubernetes object,
//! and the conversions between Kubernetes and chrono times.

use crate::api::labels as l;
use crate::cluster::{Pod, Resources};
use crate::controller::intern::Interner;
use crate::core::Time;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::{Selector, SelectorExt};
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A pod, reduced to what decisions and draining read. What the planner
/// reads is one shared [`PodShape`] per workload, and the namespace, node
/// name and label names and values are shared strings ([`Interners`]): a
/// pod costs the index its key, its name, its IP, a list of label pairs
/// and a few flags.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    /// The planner's view less the name and labels, and the hook endpoint
    /// (shared by the pods of one workload); [`PodInfo::planner_pod`]
    /// names and labels it.
    pub shape: Arc<PodShape>,
    /// Pod labels, by name.
    pub labels: Box<[(Arc<str>, Arc<str>)]>,
    /// Namespace.
    pub namespace: Arc<str>,
    /// Name within the namespace.
    pub name: Box<str>,
    /// The node it is bound to.
    pub node_name: Option<Arc<str>>,
    /// The scheduler said it does not fit anywhere (`PodScheduled=False`,
    /// reason `Unschedulable`).
    pub unschedulable: bool,
    /// It requests GPUs, MIG devices or Neuron devices.
    pub accelerator: bool,
    /// `quartermaster.dev/do-not-disrupt` is set.
    pub do_not_disrupt: bool,
    /// When the workload acknowledged a checkpoint request
    /// (`quartermaster.dev/checkpoint-completed`: its RFC 3339 value, or when
    /// the annotation was first seen if the value is not a time).
    pub checkpoint_completed: Option<Time>,
    /// When it started on its node (`status.startTime`).
    pub started: Option<Time>,
    /// It is terminating (deletion requested): when its grace period ends
    /// (`metadata.deletionTimestamp`, which the API server sets to the
    /// request's time plus the grace period).
    pub terminating: Option<Time>,
    /// Its `terminationGracePeriodSeconds` (Kubernetes' 30 when unset).
    pub grace_seconds: u32,
    /// A DaemonSet pod or a static (mirror) pod: never evicted, never a
    /// reason to keep a node.
    pub daemon: bool,
    /// `status.podIP` (where a checkpoint hook is called).
    pub pod_ip: Option<Box<str>>,
    /// The pod's checkpoint annotations only (requested, completed, opt-in,
    /// hook), for the checkpoint signalling.
    pub checkpoint_annotations: BTreeMap<String, String>,
    /// What of the pod could not be read and was left out (an optional
    /// annotation that does not parse), each naming the annotation. Such a
    /// pod is kept, planned without it, reported in an Event and, while
    /// bound, protected from consolidation as if it were do-not-disrupt
    /// (drains still evict it): it is never dropped.
    pub unreadable: Vec<String>,
    /// Where its gang's size is declared, when another object (a Volcano
    /// or Workload API PodGroup) declares it: [`world_parts`] reads it there.
    pub gang_source: Option<crate::cluster::GangSource>,
    /// The ProvisioningRequest (in the pod's namespace) whose capacity it
    /// consumes (`autoscaling.x-k8s.io/consume-provisioning-request`).
    pub consumes: Option<Box<str>>,
}

/// What the planner reads of a pod, less its name and labels (a
/// StatefulSet's or indexed Job's pods differ in a label), with the facts
/// of its spec a checkpoint hook call depends on: the same for every pod
/// of a workload, so the index keeps one per workload ([`Interners`]).
#[derive(Debug, Clone)]
pub struct PodShape {
    /// The planner's view, with an empty name and no labels.
    pub pod: Pod,
    /// Host network and declared ports: whether its checkpoint hook may
    /// be called.
    pub hook_endpoint: crate::controller::checkpoint::HookEndpoint,
}

impl PodShape {
    /// Every field, durations by their bits (so that equality is an
    /// equivalence and agrees with the hash). Destructured in full: a new
    /// field of the planner's pod must be added here.
    fn identity(&self) -> impl Hash + Eq + '_ {
        let Pod {
            name,
            requests,
            affinity,
            tolerations,
            zone_spread,
            per_node_max,
            group,
            required_topology,
            network_block,
            checkpoint_interval_s,
            expected_runtime_s,
            checkpoint_duration_s,
            checkpoint_pause_s,
            deadline,
            checkpoints,
            holds_work,
            labels,
            not_placeable,
            resource_claims,
            devices,
        } = &self.pod;
        let bits = |s: &Option<f64>| s.map(f64::to_bits);
        (
            (name, requests, affinity, tolerations, zone_spread),
            (per_node_max, group, deadline, checkpoints, labels),
            (holds_work, not_placeable, resource_claims),
            (required_topology, network_block),
            devices.as_ref().map(std::sync::Arc::as_ptr),
            (
                bits(checkpoint_interval_s),
                bits(expected_runtime_s),
                bits(checkpoint_duration_s),
                bits(checkpoint_pause_s),
            ),
            &self.hook_endpoint,
        )
    }
}

impl PartialEq for PodShape {
    fn eq(&self, other: &Self) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for PodShape {}

impl Hash for PodShape {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

/// The values pods share in the index: namespaces, node names, label
/// names and values, and pod shapes. Each distilled pod takes its copies from here.
#[derive(Debug, Default)]
pub struct Interners {
    names: Interner<str>,
    shapes: Interner<PodShape>,
}

impl Interners {
    /// Drops what no pod holds any more.
    pub fn sweep(&mut self) {
        self.names.sweep();
        self.shapes.sweep();
    }

    /// Distinct pod shapes held.
    pub fn shapes(&self) -> usize {
        self.shapes.len()
    }
}

/// How long past the end of its deletion grace period a pod on a node that
/// is not Ready counts as gone ([`PodInfo::is_stuck_terminating`]):
/// Karpenter's one minute.
pub const STUCK_TERMINATING: std::time::Duration = std::time::Duration::from_secs(60);

/// A node, reduced to what the lifecycle and decisions read.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// `spec.providerID`.
    pub provider_id: Option<String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints, as the API has them.
    pub taints: Vec<core::Taint>,
    /// Cordoned.
    pub unschedulable: bool,
    /// `Ready=True`.
    pub ready: bool,
    /// Allocatable resources (canonical units).
    pub allocatable: Resources,
    /// The node carries `quartermaster.dev/do-not-disrupt`.
    pub do_not_disrupt: bool,
    /// The node carries `quartermaster.dev/do-not-repair`.
    pub do_not_repair: bool,
    /// Its conditions, as repair reads them (one without a transition time
    /// never becomes eligible for repair: no decision on missing data).
    pub conditions: Vec<crate::core::repair::Signal>,
    /// `metadata.resourceVersion`: the precondition of our node patches.
    pub resource_version: Option<String>,
}

/// A PodDisruptionBudget, reduced to what eviction decisions read.
#[derive(Debug, Clone)]
pub struct PdbInfo {
    /// `namespace/name`.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Its pod selector (`None` selects nothing).
    pub selector: Option<Selector>,
    /// `status.disruptionsAllowed`.
    pub disruptions_allowed: u32,
}

/// Whether a resource name is an accelerator (whole GPUs, time-sliced
/// shares, MIG slices, Neuron devices or cores).
pub fn is_accelerator(resource: &str) -> bool {
    resource == l::RESOURCE_GPU
        || resource == l::RESOURCE_GPU_SHARED
        || resource.starts_with(l::RESOURCE_MIG_PREFIX)
        || resource == l::RESOURCE_NEURON
        || resource == l::RESOURCE_NEURONCORE
}

/// An API time as a chrono time (`None` out of chrono's range).
pub fn to_chrono(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<Time> {
    chrono::DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
}

/// A chrono time as the API's time type.
pub fn to_k8s_time(t: Time) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

impl PodInfo {
    /// Distills a pod; `None` only for a pod that has finished (Succeeded or
    /// Failed: it holds nothing). A pod the planner cannot fully read is
    /// kept with what could be read and the problems in
    /// [`PodInfo::unreadable`]. `seen` is when the annotation of an
    /// acknowledgement without a time value counts as made; shared values
    /// come from `interners`.
    pub fn from_k8s(pod: &core::Pod, seen: Time, interners: &mut Interners) -> Option<PodInfo> {
        let status = pod.status.as_ref();
        if matches!(
            status.and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        ) {
            return None;
        }
        let (mut planner, unreadable) = match Pod::from_k8s_lenient(pod, &BTreeMap::new()) {
            Ok((p, ignored)) => (p, ignored.into_iter().map(|i| i.problem).collect()),
            Err(e) => {
                // Only a malformed quantity, operator or effect gets here,
                // which the API server refuses: keep the pod (with no
                // requests) rather than lose track of it.
                let name = format!(
                    "{}/{}",
                    pod.namespace().unwrap_or_else(|| "default".into()),
                    pod.name_any()
                );
                (Pod::new(&name, Resources::new()), vec![e.to_string()])
            }
        };
        if !unreadable.is_empty() {
            tracing::debug!(pod = %planner.name, problems = ?unreadable, "pod kept without what cannot be read");
        }
        // The index's key names the pod and its labels are its own: the
        // shared shape has neither.
        planner.name = String::new();
        let labels = std::mem::take(&mut planner.labels)
            .iter()
            .map(|(k, v)| {
                (
                    interners.names.intern(k.as_str()),
                    interners.names.intern(v.as_str()),
                )
            })
            .collect();
        let annotations = pod.annotations();
        let unschedulable = status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            });
        let daemon = pod.owner_references().iter().any(|o| o.kind == "DaemonSet")
            || annotations.contains_key("kubernetes.io/config.mirror");
        let checkpoint_completed = annotations.get(l::CHECKPOINT_COMPLETED).map(|v| {
            chrono::DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&chrono::Utc))
                .unwrap_or(seen)
        });
        // A pod that asks for devices through DRA resource claims is an
        // accelerator pod too: it is reported as not placeable (until DRA
        // claims are planned), never silently skipped as a CPU pod.
        let accelerator = planner
            .requests
            .iter()
            .any(|(k, v)| v > 0 && is_accelerator(k))
            || pod
                .spec
                .as_ref()
                .and_then(|s| s.resource_claims.as_ref())
                .is_some_and(|c| !c.is_empty());
        let checkpoint_annotations = annotations
            .iter()
            .filter(|(k, _)| {
                [
                    l::CHECKPOINT_REQUESTED,
                    l::CHECKPOINT_COMPLETED,
                    l::CHECKPOINT_ENABLED,
                    l::CHECKPOINT_HOOK,
                ]
                .contains(&k.as_str())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let shape = interners.shapes.intern(PodShape {
            pod: planner,
            hook_endpoint: crate::controller::checkpoint::HookEndpoint::of(pod),
        });
        let namespace = interners
            .names
            .intern(pod.metadata.namespace.as_deref().unwrap_or("default"));
        let node_name = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .map(|n| interners.names.intern(n));
        Some(PodInfo {
            shape,
            labels,
            accelerator,
            pod_ip: status.and_then(|s| s.pod_ip.as_deref()).map(Box::from),
            checkpoint_annotations,
            namespace,
            name: pod.name_any().into_boxed_str(),
            node_name,
            unschedulable,
            do_not_disrupt: l::do_not_disrupt(annotations),
            checkpoint_completed,
            started: status
                .and_then(|s| s.start_time.as_ref())
                .and_then(to_chrono),
            terminating: pod.metadata.deletion_timestamp.as_ref().and_then(to_chrono),
            grace_seconds: pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .map_or(30, |g| u32::try_from(g.max(0)).unwrap_or(u32::MAX)),
            daemon,
            unreadable,
            gang_source: crate::cluster::GangSource::of(pod),
            consumes: annotations
                .get(crate::api::foreign::CONSUME_ANNOTATION)
                .map(|v| v.as_str().into()),
        })
    }

    /// The planner's view of the pod (its shape, named `namespace/name`,
    /// with its labels).
    pub fn planner_pod(&self) -> Pod {
        Pod {
            name: self.key(),
            labels: self
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..self.shape.pod.clone()
        }
    }

    /// Whether the pod is stuck terminating on `node`: its deletion grace
    /// period ended more than [`STUCK_TERMINATING`] ago and its node is not
    /// Ready (unreachable: no kubelet will confirm the deletion). Such a pod
    /// is gone as far as drains and decisions go, as Karpenter treats it.
    pub fn is_stuck_terminating(&self, node: &NodeInfo, now: Time) -> bool {
        !node.ready
            && self
                .terminating
                .is_some_and(|end| now >= crate::core::time::after(end, STUCK_TERMINATING))
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Waiting for capacity Quartermaster can add: unbound, unschedulable,
    /// requesting accelerators, not terminating.
    pub fn is_pending_accelerator(&self) -> bool {
        self.node_name.is_none()
            && self.unschedulable
            && self.accelerator
            && self.terminating.is_none()
    }
}

impl NodeInfo {
    /// Distills a node (unreadable quantities count as zero, logged).
    pub fn from_k8s(node: &core::Node) -> NodeInfo {
        let spec = node.spec.clone().unwrap_or_default();
        let status = node.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let conditions = status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| crate::core::repair::Signal {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone().unwrap_or_default(),
                since: c
                    .last_transition_time
                    .as_ref()
                    .and_then(to_chrono)
                    .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC),
            })
            .collect();
        let allocatable = status
            .and_then(|s| s.allocatable.as_ref())
            .map(|a| {
                let mut r = Resources::new();
                for (k, q) in a {
                    match crate::cluster::resources::canonical(k, &q.0) {
                        Ok(v) => r.set(k, v),
                        Err(e) => tracing::warn!(node = %node.name_any(), resource = %k, error = %e.0, "unreadable allocatable quantity"),
                    }
                }
                r
            })
            .unwrap_or_default();
        NodeInfo {
            name: node.name_any(),
            provider_id: spec.provider_id,
            labels: node.labels().clone(),
            taints: spec.taints.unwrap_or_default(),
            unschedulable: spec.unschedulable.unwrap_or(false),
            ready,
            allocatable,
            do_not_disrupt: l::do_not_disrupt(node.annotations()),
            do_not_repair: l::do_not_repair(node.annotations()),
            conditions,
            resource_version: node.metadata.resource_version.clone(),
        }
    }

    /// Whether the node carries a taint with that key.
    pub fn has_taint(&self, key: &str) -> bool {
        self.taints.iter().any(|t| t.key == key)
    }
}

impl PdbInfo {
    /// Distills a PodDisruptionBudget (a selector that does not parse
    /// selects nothing, logged).
    pub fn from_k8s(pdb: &PodDisruptionBudget) -> PdbInfo {
        let namespace = pdb.namespace().unwrap_or_else(|| "default".into());
        let selector = pdb
            .spec
            .as_ref()
            .and_then(|s| s.selector.clone())
            .and_then(|s| match Selector::try_from(s) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(pdb = %pdb.name_any(), error = %e, "unreadable PDB selector");
                    None
                }
            });
        PdbInfo {
            name: format!("{namespace}/{}", pdb.name_any()),
            namespace,
            selector,
            disruptions_allowed: pdb
                .status
                .as_ref()
                .map_or(0, |s| s.disruptions_allowed.unwrap_or(0).max(0) as u32),
        }
    }

    /// Whether the budget covers a pod in `namespace` with these labels.
    pub fn covers(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        namespace == self.namespace && self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }
}
