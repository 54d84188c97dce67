//! The controller's view of the cluster: one watch per kind (Pods, Nodes,
//! NodePools, NodeClaims, PodDisruptionBudgets) feeds an index of distilled
//! structs (only the fields decisions and the lifecycle read; no
//! `managedFields`, no specs of containers), and [`world_parts`] turns the
//! index into the core's [`World`] inputs. The index is fed by synchronous
//! `apply` / `delete` / `reset` calls from one generic watch loop
//! ([`watch`]), as kubert's indexes are; what it holds at 100,000 pods is,
//! per pod, a shared [`PodShape`] (one per workload), its name, labels and
//! a few flags (about 0.6 KB a pod).
//!
//! Nothing here writes to the API or decides anything.

use crate::api::labels as l;
use crate::api::nodeclaim::conditions;
use crate::api::{NodeClaim, NodePool};
use crate::catalog::Catalog;
use crate::cluster::podgroups::{self, PodGroupSpec};
use crate::cluster::{GangSource, Pod, Resources};
use crate::controller::intern::Interner;
use crate::core::drift::{self, ClassStamp, Stamp};
use crate::core::{BoundPod, ClaimRequest, ManagedNode, OfferingKey, Pdb, Time, World};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::{Selector, SelectorExt};
use kube::{Resource, ResourceExt};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
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
            hostname_anti_affinity,
            group,
            checkpoint_interval_s,
            expected_runtime_s,
            checkpoint_duration_s,
            checkpoint_pause_s,
            deadline,
            checkpoints,
            holds_work,
            labels,
            not_placeable,
        } = &self.pod;
        let bits = |s: &Option<f64>| s.map(f64::to_bits);
        (
            (name, requests, affinity, tolerations, zone_spread),
            (hostname_anti_affinity, group, deadline, checkpoints, labels),
            (holds_work, not_placeable),
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

fn strip<K: Resource>(mut k: K) -> K {
    k.meta_mut().managed_fields = None;
    k.annotations_mut()
        .remove("kubectl.kubernetes.io/last-applied-configuration");
    k
}

/// Everything the watches have seen, distilled, keyed by name
/// (`namespace/name` for namespaced kinds).
#[derive(Debug, Default, Clone)]
pub struct Snapshot {
    /// Pods (finished ones are dropped).
    pub pods: BTreeMap<String, PodInfo>,
    /// Nodes.
    pub nodes: BTreeMap<String, NodeInfo>,
    /// NodePools (few and small: kept whole, without managed fields).
    pub pools: BTreeMap<String, NodePool>,
    /// NodeClaims (kept whole, without managed fields).
    pub claims: BTreeMap<String, NodeClaim>,
    /// PodDisruptionBudgets.
    pub pdbs: BTreeMap<String, PdbInfo>,
    /// Volcano PodGroups, where the cluster serves them.
    pub volcano_groups: BTreeMap<String, PodGroupSpec>,
    /// Workload API PodGroups, where the cluster serves them.
    pub scheduling_groups: BTreeMap<String, PodGroupSpec>,
    /// ProvisioningRequests, where the cluster serves them (without managed
    /// fields).
    pub provisioning_requests: BTreeMap<String, crate::api::foreign::ProvisioningRequest>,
    /// PodTemplates as the pods they make, or why they cannot be read
    /// (watched where ProvisioningRequests are served).
    pub pod_templates: BTreeMap<String, Result<Pod, String>>,
}

/// What the lifecycle reconciler reads about one claim, copied out of the
/// snapshot so that no lock is held across API calls.
#[derive(Debug, Clone)]
pub struct ClaimView {
    /// The claim.
    pub claim: NodeClaim,
    /// Its node (by the status' node name, else by provider ID).
    pub node: Option<NodeInfo>,
    /// Pods bound to that node (only filled for a claim being deleted).
    pub pods: Vec<PodInfo>,
}

impl Snapshot {
    /// Whether a pending pod pins Karpenter's `karpenter.sh/nodepool`
    /// label (in its node selector or every term of its required node
    /// affinity) to pools none of which is a Quartermaster NodePool: the
    /// pod is Karpenter's when both run in one cluster, so it is neither
    /// planned nor reported as not placeable (no NodePool of ours could
    /// take it anyway). A pod pinning the name of a pool of ours is ours.
    pub fn left_to_karpenter(&self, p: &PodInfo) -> bool {
        let Some(pools) = p
            .shape
            .pod
            .affinity
            .pinned(crate::api::karpenter::NODEPOOL_LABEL)
        else {
            return false;
        };
        let theirs = pools.iter().all(|n| !self.pools.contains_key(*n));
        if theirs {
            tracing::debug!(pod = %p.key(), ?pools, "pod pins karpenter.sh/nodepool to pools Quartermaster does not have: left to Karpenter");
        }
        theirs
    }

    /// The planner's view of a pod ([`PodInfo::planner_pod`]) with its gang
    /// sized by the PodGroup that declares it, where one does.
    pub fn gang_pod(&self, p: &PodInfo) -> Pod {
        let mut pod = p.planner_pod();
        let groups = match p.gang_source {
            Some(GangSource::Volcano) => &self.volcano_groups,
            Some(GangSource::Workload) => &self.scheduling_groups,
            None => return pod,
        };
        if let Some(name) = pod.group.as_ref().map(|g| g.name.clone()) {
            if let Some(spec) = groups.get(&name) {
                podgroups::size(&mut pod, &name, spec);
            }
        }
        pod
    }

    /// Stand-ins for the members Volcano groups with `minResources` have not
    /// created yet ([`podgroups::reservations`]), given the pending pods and
    /// how many members of each group exist. Pending pods and stand-ins
    /// together stay within `max_pods` (the batch cap): a group larger than
    /// that (it can never be planned whole), or missing more members than
    /// are left of it, gets none (logged).
    fn reservations(
        &self,
        pending: &[Pod],
        members: &HashMap<String, usize>,
        max_pods: usize,
    ) -> Vec<Pod> {
        let mut out = Vec::new();
        for (name, spec) in self
            .volcano_groups
            .iter()
            .filter(|(_, g)| g.min_resources.is_some())
        {
            let room = max_pods.saturating_sub(pending.len() + out.len());
            if spec.min_member as usize > max_pods {
                tracing::debug!(podgroup = %name, min_member = spec.min_member, "no stand-ins: more members than one plan considers");
                continue;
            }
            let mine: Vec<&Pod> = pending
                .iter()
                .filter(|p| p.group.as_ref().is_some_and(|g| &g.name == name))
                .collect();
            let have = members.get(name).copied().unwrap_or(0);
            out.extend(podgroups::reservations(name, spec, &mine, have, room));
        }
        out
    }

    /// The node with that provider ID.
    pub fn node_by_provider_id(&self, provider_id: &str) -> Option<&NodeInfo> {
        self.nodes
            .values()
            .find(|n| n.provider_id.as_deref() == Some(provider_id))
    }

    /// The node of a claim: by the name its status recorded, else by its
    /// provider ID.
    pub fn node_of(&self, claim: &NodeClaim) -> Option<&NodeInfo> {
        let status = claim.status.as_ref()?;
        status
            .node_name
            .as_ref()
            .and_then(|n| self.nodes.get(n))
            .or_else(|| {
                status
                    .provider_id
                    .as_deref()
                    .and_then(|p| self.node_by_provider_id(p))
            })
    }

    /// Pods bound to the node.
    pub fn pods_on<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a PodInfo> + 'a {
        self.pods
            .values()
            .filter(move |p| p.node_name.as_deref() == Some(node))
    }

    /// The lifecycle's view of a claim.
    pub fn claim_view(&self, claim: &NodeClaim) -> ClaimView {
        let node = self.node_of(claim).cloned();
        let pods = match (&node, claim.metadata.deletion_timestamp.is_some()) {
            (Some(n), true) => self.pods_on(&n.name).cloned().collect(),
            _ => Vec::new(),
        };
        ClaimView {
            claim: claim.clone(),
            node,
            pods,
        }
    }
}

/// The core's inputs, owned; [`WorldParts::world`] lends them as a [`World`].
#[derive(Debug, Clone, Default)]
pub struct WorldParts {
    /// NodePools.
    pub pools: Vec<NodePool>,
    /// Pending accelerator pods.
    pub pending: Vec<Pod>,
    /// Our nodes and in-flight claims.
    pub nodes: Vec<ManagedNode>,
    /// Disruption budgets.
    pub pdbs: Vec<Pdb>,
}

impl WorldParts {
    /// The core's world over these parts.
    pub fn world<'a>(&'a self, catalog: &'a Catalog, region: &'a str) -> World<'a> {
        World {
            catalog,
            region,
            pools: &self.pools,
            pending: &self.pending,
            nodes: &self.nodes,
            pdbs: &self.pdbs,
        }
    }
}

/// The launch request a claim records (pods unknown: the claim does not
/// list them).
pub fn request_of(claim: &NodeClaim) -> ClaimRequest {
    ClaimRequest {
        claim: claim.name_any(),
        nodepool: claim.spec.node_pool.clone(),
        offering: OfferingKey {
            instance_type: claim.spec.instance_type.clone(),
            zone: claim.spec.zone.clone(),
            capacity_type: claim.spec.capacity_type,
        },
        price_per_hour: claim.spec.price_per_hour,
        pods: Vec::new(),
        prewarm_window: None,
        reservation: claim
            .spec
            .labels
            .get(crate::api::labels::CAPACITY_RESERVATION_ID)
            .filter(|_| claim.spec.capacity_type == crate::catalog::CapacityType::Reserved)
            .cloned(),
    }
}

/// What a claim expected its node to offer (`spec.resources`), or, where
/// it recorded nothing readable, what its instance type offers.
fn recorded_allocatable(claim: &NodeClaim, catalog: &Catalog) -> Resources {
    let recorded = Resources::parse(
        claim
            .spec
            .resources
            .iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str())),
    )
    .unwrap_or_default();
    if !recorded.is_empty() {
        return recorded;
    }
    catalog
        .instance_type(&claim.spec.instance_type)
        .map(|it| crate::cluster::shape::allocatable(it, &crate::cluster::GpuSharing::None))
        .unwrap_or_default()
}

/// Builds the core's inputs from the snapshot: pending accelerator pods,
/// managed nodes from the NodeClaims joined with their Nodes and bound pods
/// (claims being deleted count as cordoned), PDBs with their allowed
/// disruptions, do-not-disrupt and checkpoint acknowledgements. Every claim
/// is in the world: one whose pool is gone or invalid, or whose instance
/// type or reservation left the catalog, is shaped by what it recorded
/// ([`ManagedNode::recorded`]), so that its notices are still acted on and
/// it still counts against its pool's limits. `now` stands in
/// for a claim's creation time when the API has not set one. `max_pods`
/// (the batch cap) bounds the stand-ins made for Volcano groups.
pub fn world_parts(
    s: &Snapshot,
    catalog: &Catalog,
    region: &str,
    now: Time,
    max_pods: usize,
) -> WorldParts {
    let pools: Vec<NodePool> = s.pools.values().cloned().collect();
    let pdb_list: Vec<&PdbInfo> = s.pdbs.values().collect();
    let pdbs: Vec<Pdb> = pdb_list
        .iter()
        .map(|p| Pdb {
            name: p.name.clone(),
            disruptions_allowed: p.disruptions_allowed,
        })
        .collect();
    let mut by_node: HashMap<&str, Vec<&PodInfo>> = HashMap::new();
    let mut pending = Vec::new();
    // Members of Volcano groups that exist, by group.
    let mut volcano_members: HashMap<String, usize> = HashMap::new();
    for p in s.pods.values() {
        if p.gang_source == Some(GangSource::Volcano) {
            if let Some(g) = &p.shape.pod.group {
                *volcano_members.entry(g.name.clone()).or_default() += 1;
            }
        }
        match &p.node_name {
            Some(n) => by_node.entry(n.as_ref()).or_default().push(p),
            None if p.is_pending_accelerator() && !s.left_to_karpenter(p) => {
                pending.push(s.gang_pod(p))
            }
            None => {}
        }
    }
    pending.extend(s.reservations(&pending, &volcano_members, max_pods));
    let shape_world = World {
        catalog,
        region,
        pools: &pools,
        pending: &[],
        nodes: &[],
        pdbs: &[],
    };
    let mut nodes = Vec::new();
    for claim in s.claims.values() {
        let req = request_of(claim);
        let created = claim
            .metadata
            .creation_timestamp
            .as_ref()
            .and_then(to_chrono)
            .unwrap_or(now);
        let mut m = ManagedNode::recorded(
            &req,
            &claim.spec.labels,
            &claim.spec.taints,
            recorded_allocatable(claim, catalog),
            &shape_world,
            created,
        )
        .with_claim_lifetime(
            claim.spec.expire_after.as_deref(),
            claim.spec.termination_grace_period.as_deref(),
        );
        let status = claim.status.clone().unwrap_or_default();
        m.ready_at = status
            .condition(conditions::READY)
            .filter(|c| c.status == "True")
            .and_then(|c| to_chrono(&c.last_transition_time));
        m.state.in_flight = m.ready_at.is_none();
        let deleting = claim.metadata.deletion_timestamp.is_some();
        m.state.unschedulable = deleting;
        if let Some(node) = s.node_of(claim) {
            m.state.name = node.name.clone();
            // A fallback launch runs elsewhere than the claim says; the
            // node's labels (set from the instance) are the truth.
            if let Some(zone) = node.labels.get(l::ZONE_ID) {
                m.offering.zone = zone.clone();
                m.state.zone = zone.clone();
            }
            if let Some(ct) = node
                .labels
                .get(l::CAPACITY_TYPE)
                .and_then(|c| c.parse().ok())
            {
                m.offering.capacity_type = ct;
                m.state.capacity_type = Some(ct);
            }
            m.disrupted = !deleting && node.has_taint(l::TAINT_DISRUPTED);
            m.state.unschedulable |= node.unschedulable || m.disrupted;
            m.do_not_disrupt = node.do_not_disrupt;
            m.health = crate::core::repair::Health {
                signals: node.conditions.clone(),
                do_not_repair: node.do_not_repair
                    || claim
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(l::do_not_repair),
                rebooted_at: status
                    .condition(conditions::REBOOTED)
                    .and_then(|c| to_chrono(&c.last_transition_time)),
            };
            if m.ready_at.is_some() && !node.allocatable.is_empty() {
                m.state.allocatable = node.allocatable.clone();
            }
            for p in by_node.get(node.name.as_str()).into_iter().flatten() {
                if p.is_stuck_terminating(node, now) {
                    // Gone, but for the kubelet that cannot say so.
                    continue;
                }
                m.state.used.add(&p.shape.pod.requests);
                if p.daemon {
                    continue;
                }
                let pod = s.gang_pod(p);
                let pdb = pdb_list
                    .iter()
                    .position(|b| b.covers(&p.namespace, &pod.labels));
                m.pods.push(BoundPod {
                    pod,
                    // Until its annotations read, the pod's wishes are
                    // unknown: keep its node out of consolidation.
                    do_not_disrupt: p.do_not_disrupt || !p.unreadable.is_empty(),
                    checkpoint_completed: p.checkpoint_completed,
                    started: p.started,
                    pdb,
                    placeholder: false,
                });
            }
        }
        nodes.push(m);
    }
    WorldParts {
        pools,
        pending,
        nodes,
        pdbs,
    }
}

/// What a claim records it was launched with, for drift: its pool's
/// template hash and the hash version (annotations, set at creation), its
/// node class's hash and its image (status, set at launch).
pub fn launched_stamp(claim: &NodeClaim) -> Stamp {
    let annotation = |key: &str| {
        claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .cloned()
    };
    let status = claim.status.as_ref();
    Stamp {
        version: annotation(l::DRIFT_HASH_VERSION),
        pool: annotation(l::NODEPOOL_HASH),
        node_class: status.and_then(|s| s.node_class_hash.clone()),
        image: status.and_then(|s| s.image_id.clone()),
    }
}

/// Sets [`ManagedNode::drifted`] on every node whose claim no longer
/// matches what would be launched now (`core::drift::detect_for`): its
/// pool's template as the API has it, and what `current` (the cloud's
/// `launch_stamp`) says of its class and image. Claims being deleted and
/// claims of unknown pools never drift.
pub fn mark_drift(
    s: &Snapshot,
    nodes: &mut [ManagedNode],
    current: &dyn Fn(&crate::api::NodeClaimSpec) -> Option<ClassStamp>,
) {
    for n in nodes {
        n.drifted = None;
        let Some(claim) = s.claims.get(&n.claim) else {
            continue;
        };
        let Some(pool) = s.pools.get(&claim.spec.node_pool) else {
            continue;
        };
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let class = current(&claim.spec);
        let now = Stamp {
            version: Some(drift::HASH_VERSION.to_string()),
            pool: Some(drift::pool_template_hash(&pool.spec)),
            node_class: class.as_ref().map(|c| c.hash.clone()),
            image: class.map(|c| c.image),
        };
        let labels = s
            .node_of(claim)
            .map_or(&claim.spec.labels, |node| &node.labels);
        n.drifted = drift::detect_for(&launched_stamp(claim), &now, &pool.spec, labels);
    }
}

/// Which pods' unreadable annotations were already reported, so that each
/// problem gets one Event, not one per round.
#[derive(Debug, Default)]
pub struct UnreadableReports {
    reported: HashMap<String, Vec<String>>,
}

impl UnreadableReports {
    /// The pods (`namespace/name`) whose problems are new since the last
    /// call, with the problems; pods that were fixed or are gone are
    /// forgotten (a problem that comes back is reported again).
    pub fn fresh(&mut self, s: &Snapshot) -> Vec<(String, Vec<String>)> {
        let mut fresh = Vec::new();
        let mut now = HashMap::new();
        for (key, p) in s.pods.iter().filter(|(_, p)| !p.unreadable.is_empty()) {
            if self.reported.get(key) != Some(&p.unreadable) {
                fresh.push((key.clone(), p.unreadable.clone()));
            }
            now.insert(key.clone(), p.unreadable.clone());
        }
        self.reported = now;
        fresh
    }
}

mod store;
pub use store::{check_access, spawn_watches, watch, Indexed, Kind, Relist, Store};

#[cfg(test)]
mod tests;
