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
use futures::StreamExt;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::core::{Selector, SelectorExt};
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::Notify;

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
    /// It is terminating (deletion requested, grace period running).
    pub terminating: bool,
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
            terminating: pod.metadata.deletion_timestamp.is_some(),
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

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Waiting for capacity Quartermaster can add: unbound, unschedulable,
    /// requesting accelerators, not terminating.
    pub fn is_pending_accelerator(&self) -> bool {
        self.node_name.is_none() && self.unschedulable && self.accelerator && !self.terminating
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
    /// how many members of each group exist.
    fn reservations(&self, pending: &[Pod], members: &HashMap<String, usize>) -> Vec<Pod> {
        let mut out = Vec::new();
        for (name, spec) in self
            .volcano_groups
            .iter()
            .filter(|(_, g)| g.min_resources.is_some())
        {
            let mine: Vec<&Pod> = pending
                .iter()
                .filter(|p| p.group.as_ref().is_some_and(|g| &g.name == name))
                .collect();
            let have = members.get(name).copied().unwrap_or(0);
            out.extend(podgroups::reservations(name, spec, &mine, have));
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

/// Builds the core's inputs from the snapshot: pending accelerator pods,
/// managed nodes from the NodeClaims joined with their Nodes and bound pods
/// (claims being deleted count as cordoned), PDBs with their allowed
/// disruptions, do-not-disrupt and checkpoint acknowledgements. A claim
/// whose pool or instance type is unknown is left out (logged): the core
/// cannot reason about it, and its lifecycle still runs. `now` stands in
/// for a claim's creation time when the API has not set one.
pub fn world_parts(s: &Snapshot, catalog: &Catalog, region: &str, now: Time) -> WorldParts {
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
    pending.extend(s.reservations(&pending, &volcano_members));
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
        let Some(mut m) = ManagedNode::launched(&req, &shape_world, created) else {
            tracing::debug!(claim = %req.claim, "claim of an unknown pool or instance type left out of the world");
            continue;
        };
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

/// The kinds watched; the store is ready once every one has listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Pods.
    Pods = 0,
    /// Nodes.
    Nodes = 1,
    /// NodePools.
    NodePools = 2,
    /// NodeClaims.
    NodeClaims = 3,
    /// PodDisruptionBudgets.
    Pdbs = 4,
    /// Volcano PodGroups (watched only where served).
    VolcanoPodGroups = 5,
    /// Workload API PodGroups (watched only where served).
    SchedulingPodGroups = 6,
    /// ProvisioningRequests (watched only where served).
    ProvisioningRequests = 7,
    /// PodTemplates (watched where ProvisioningRequests are served).
    PodTemplates = 8,
}

/// Kinds every cluster serves: the store waits for each of them.
const REQUIRED_KINDS: usize = 5;
/// Every kind, required or optional.
const KINDS: usize = 9;

/// The shared index: the snapshot behind a lock, which kinds have synced,
/// and a wake-up for the main loop on every change.
#[derive(Debug, Default)]
pub struct Store {
    snapshot: RwLock<Snapshot>,
    synced: [AtomicBool; KINDS],
    /// Optional kinds being watched (the store waits for those too).
    watched: [AtomicBool; KINDS],
    /// What the pods share (locked only while one pod is distilled).
    interners: Mutex<Interners>,
    /// Notified on every change (one stored permit: changes coalesce).
    pub changed: Notify,
}

impl Store {
    /// An empty, unsynced store.
    pub fn new() -> Store {
        Store::default()
    }

    /// Runs `f` on the current snapshot (a read lock held for its length;
    /// never across an `.await`).
    pub fn read<T>(&self, f: impl FnOnce(&Snapshot) -> T) -> T {
        let guard = self.snapshot.read().unwrap_or_else(|e| e.into_inner());
        f(&guard)
    }

    /// The shared values, for distilling objects (never held across an
    /// `.await`).
    pub fn interners(&self) -> std::sync::MutexGuard<'_, Interners> {
        self.interners.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self, f: impl FnOnce(&mut Snapshot)) {
        {
            let mut guard = self.snapshot.write().unwrap_or_else(|e| e.into_inner());
            f(&mut guard);
        }
        self.changed.notify_one();
    }

    /// Whether every kind has completed its first list.
    pub fn is_synced(&self) -> bool {
        self.synced.iter().enumerate().all(|(i, s)| {
            s.load(Ordering::Acquire)
                || (i >= REQUIRED_KINDS && !self.watched[i].load(Ordering::Acquire))
        })
    }

    /// Makes the store wait for an optional kind's first list (its watch is
    /// starting).
    pub fn expect(&self, kind: Kind) {
        self.watched[kind as usize].store(true, Ordering::Release);
    }

    fn mark_synced(&self, kind: Kind) {
        self.synced[kind as usize].store(true, Ordering::Release);
    }

    /// Adds or replaces one object.
    pub fn apply<K: Indexed>(&self, obj: K) {
        let key = K::key(&obj);
        let item = obj.distill(&mut self.interners());
        self.write(|s| match item {
            Some(item) => {
                K::slot(s).insert(key, item);
            }
            None => {
                K::slot(s).remove(&key);
            }
        });
    }

    /// Removes one object.
    pub fn delete<K: Indexed>(&self, obj: &K) {
        let key = K::key(obj);
        self.write(|s| {
            K::slot(s).remove(&key);
        });
    }

    /// Replaces every object of the kind (after a full list) and marks the
    /// kind synced.
    pub fn reset<K: Indexed>(&self, objs: Vec<K>) {
        let mut items = Relist::<K>::default();
        objs.into_iter().for_each(|o| items.push(self, o));
        self.reset_distilled(items);
    }

    /// [`Store::reset`] with objects distilled as they were listed.
    pub fn reset_distilled<K: Indexed>(&self, items: Relist<K>) {
        self.write(|s| *K::slot(s) = items.items);
        // What only the replaced objects held goes now.
        self.interners().sweep();
        self.mark_synced(K::KIND);
    }
}

/// A full list of one kind being received: each object distilled as it
/// comes (a relist of 100,000 pods holds 100,000 [`PodInfo`]s, never
/// 100,000 API objects), swapped into the store whole at its end.
pub struct Relist<K: Indexed> {
    items: BTreeMap<String, K::Item>,
}

impl<K: Indexed> Default for Relist<K> {
    fn default() -> Self {
        Relist {
            items: BTreeMap::new(),
        }
    }
}

impl<K: Indexed> Relist<K> {
    /// Distills and keeps one listed object (a finished pod is left out),
    /// sharing values through `store`'s interners.
    pub fn push(&mut self, store: &Store, obj: K) {
        let key = K::key(&obj);
        if let Some(item) = obj.distill(&mut store.interners()) {
            self.items.insert(key, item);
        }
    }
}

/// A kind the store indexes: how it is keyed, distilled and where it goes.
pub trait Indexed: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static {
    /// What the store keeps.
    type Item;
    /// Which kind it is.
    const KIND: Kind;
    /// `name`, or `namespace/name`.
    fn key(&self) -> String {
        match self.meta().namespace.as_deref() {
            Some(ns) => format!("{ns}/{}", self.meta().name.as_deref().unwrap_or("")),
            None => self.meta().name.clone().unwrap_or_default(),
        }
    }
    /// The item to keep, or `None` to keep nothing (a finished pod);
    /// repeated values are shared through `interners`.
    fn distill(self, interners: &mut Interners) -> Option<Self::Item>;
    /// The snapshot's map for the kind.
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, Self::Item>;
}

impl Indexed for core::Pod {
    type Item = PodInfo;
    const KIND: Kind = Kind::Pods;
    fn distill(self, interners: &mut Interners) -> Option<PodInfo> {
        PodInfo::from_k8s(&self, chrono::Utc::now(), interners)
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, PodInfo> {
        &mut s.pods
    }
}

impl Indexed for core::Node {
    type Item = NodeInfo;
    const KIND: Kind = Kind::Nodes;
    fn distill(self, _: &mut Interners) -> Option<NodeInfo> {
        Some(NodeInfo::from_k8s(&self))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, NodeInfo> {
        &mut s.nodes
    }
}

impl Indexed for NodePool {
    type Item = NodePool;
    const KIND: Kind = Kind::NodePools;
    fn distill(self, _: &mut Interners) -> Option<NodePool> {
        Some(strip(self))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, NodePool> {
        &mut s.pools
    }
}

impl Indexed for NodeClaim {
    type Item = NodeClaim;
    const KIND: Kind = Kind::NodeClaims;
    fn distill(self, _: &mut Interners) -> Option<NodeClaim> {
        Some(strip(self))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, NodeClaim> {
        &mut s.claims
    }
}

impl Indexed for PodDisruptionBudget {
    type Item = PdbInfo;
    const KIND: Kind = Kind::Pdbs;
    fn distill(self, _: &mut Interners) -> Option<PdbInfo> {
        Some(PdbInfo::from_k8s(&self))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, PdbInfo> {
        &mut s.pdbs
    }
}

/// Feeds one kind into the store until the stream ends (it does not: the
/// watcher retries with backoff; errors are logged). A relist is distilled
/// as it comes ([`Relist`]) and swapped in whole at its end, so a
/// half-listed kind is never seen.
pub async fn watch<K: Indexed>(api: Api<K>, config: watcher::Config, store: Arc<Store>) {
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut relist = Relist::<K>::default();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => relist = Relist::default(),
            Ok(Event::InitApply(k)) => relist.push(&store, k),
            Ok(Event::InitDone) => store.reset_distilled(std::mem::take(&mut relist)),
            Ok(Event::Apply(k)) => store.apply(k),
            Ok(Event::Delete(k)) => store.delete(&k),
            Err(e) => tracing::warn!(kind = ?K::KIND, error = %e, "watch error, retrying"),
        }
    }
}

/// Checks that every watched kind can be listed (CRDs installed, RBAC in
/// place), so that a misconfigured controller fails at start rather than
/// retrying forever.
///
/// # Errors
/// The first kind that cannot be listed.
pub async fn check_access(client: &kube::Client) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let lp = kube::api::ListParams::default().limit(1);
    Api::<core::Pod>::all(client.clone())
        .list_metadata(&lp)
        .await
        .context("listing pods")?;
    Api::<core::Node>::all(client.clone())
        .list_metadata(&lp)
        .await
        .context("listing nodes")?;
    Api::<NodePool>::all(client.clone())
        .list_metadata(&lp)
        .await
        .context("listing NodePools (are the CRDs installed?)")?;
    Api::<NodeClaim>::all(client.clone())
        .list_metadata(&lp)
        .await
        .context("listing NodeClaims (are the CRDs installed?)")?;
    Api::<PodDisruptionBudget>::all(client.clone())
        .list_metadata(&lp)
        .await
        .context("listing PodDisruptionBudgets")?;
    Ok(())
}

/// Starts the five watches on `store`; they run until the returned handles
/// are aborted.
pub fn spawn_watches(
    client: &kube::Client,
    store: &Arc<Store>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let config = || watcher::Config::default().any_semantic().page_size(500);
    vec![
        tokio::spawn(watch(
            Api::<core::Pod>::all(client.clone()),
            config(),
            store.clone(),
        )),
        tokio::spawn(watch(
            Api::<core::Node>::all(client.clone()),
            config(),
            store.clone(),
        )),
        tokio::spawn(watch(
            Api::<NodePool>::all(client.clone()),
            config(),
            store.clone(),
        )),
        tokio::spawn(watch(
            Api::<NodeClaim>::all(client.clone()),
            config(),
            store.clone(),
        )),
        tokio::spawn(watch(
            Api::<PodDisruptionBudget>::all(client.clone()),
            config(),
            store.clone(),
        )),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::json;
    use std::sync::OnceLock;

    fn catalog() -> &'static Catalog {
        static C: OnceLock<Catalog> = OnceLock::new();
        C.get_or_init(|| Catalog::embedded().unwrap())
    }

    fn t(s: i64) -> Time {
        chrono::Utc.timestamp_opt(1_767_571_200 + s, 0).unwrap()
    }

    fn zone() -> String {
        catalog()
            .offerings_of("us-east-1", "g5.xlarge")
            .find(|o| o.capacity_type == crate::catalog::CapacityType::Spot)
            .unwrap()
            .zone_id
            .clone()
    }

    fn pod(name: &str, gpus: u32, node: Option<&str>, extra: serde_json::Value) -> core::Pod {
        let mut resources = json!({"cpu": "1", "memory": "1Gi"});
        if gpus > 0 {
            resources["nvidia.com/gpu"] = json!(gpus.to_string());
        }
        let mut v = json!({
            "metadata": {"name": name, "namespace": "ml", "labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": resources}}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            ]}
        });
        if let Some(n) = node {
            v["spec"]["nodeName"] = json!(n);
            v["status"] = json!({"phase": "Running"});
        }
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn claim(name: &str, extra: serde_json::Value) -> NodeClaim {
        let mut v = json!({
            "apiVersion": "quartermaster.dev/v1alpha1",
            "kind": "NodeClaim",
            "metadata": {"name": name, "creationTimestamp": "2026-01-05T00:00:00Z",
                         "finalizers": [l::FINALIZER]},
            "spec": {"nodePool": "gpu", "instanceType": "g5.xlarge", "zone": zone(),
                     "capacityType": "spot", "pricePerHour": 0.5},
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn node(name: &str, provider_id: &str, extra: serde_json::Value) -> core::Node {
        let mut v = json!({
            "metadata": {"name": name},
            "spec": {"providerID": provider_id},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "allocatable": {"cpu": "3920m", "memory": "15Gi", "nvidia.com/gpu": "1", "pods": "58"}}
        });
        merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn pdb(name: &str, app: &str, allowed: i32) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"selector": {"matchLabels": {"app": app}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
                       "expectedPods": 1}
        }))
        .unwrap()
    }

    fn pool() -> NodePool {
        NodePool::new(
            "gpu",
            crate::api::NodePoolSpec {
                capacity_types: vec![crate::catalog::CapacityType::Spot],
                ..Default::default()
            },
        )
    }

    #[test]
    fn a_claim_drifts_by_what_it_recorded_against_the_pool_and_the_clouds_stamp_now() {
        let pool_hash = drift::pool_template_hash(&pool().spec);
        let stamped = |name: &str, pool_hash: &str, image: &str, extra: serde_json::Value| {
            let mut v = json!({
                "metadata": {"annotations": {
                    l::NODEPOOL_HASH: pool_hash,
                    l::DRIFT_HASH_VERSION: drift::HASH_VERSION,
                }},
                "status": {"imageID": image, "nodeClassHash": "c1"}
            });
            merge(&mut v, extra);
            claim(name, v)
        };
        let claims = vec![
            stamped("same", &pool_hash, "ami-new", json!({})),
            stamped("old-image", &pool_hash, "ami-old", json!({})),
            stamped("old-template", "0123456789abcdef", "ami-new", json!({})),
            // Being deleted: it is going anyway.
            stamped(
                "leaving",
                "0123456789abcdef",
                "ami-old",
                json!({"metadata": {"deletionTimestamp": "2026-01-05T00:10:00Z"}}),
            ),
            // From before drift was recorded: nothing to compare.
            claim("unstamped", json!({})),
        ];
        let s = snapshot(vec![], vec![], claims, vec![]);
        let mut parts = world_parts(&s, catalog(), "us-east-1", t(0));
        let now = ClassStamp {
            hash: "c1".into(),
            image: "ami-new".into(),
        };
        mark_drift(&s, &mut parts.nodes, &|_| Some(now.clone()));
        let drifted: BTreeMap<&str, Option<drift::Drift>> = parts
            .nodes
            .iter()
            .map(|n| (n.claim.as_str(), n.drifted))
            .collect();
        assert_eq!(
            drifted,
            BTreeMap::from([
                ("leaving", None),
                ("old-image", Some(drift::Drift::ImageChanged)),
                ("old-template", Some(drift::Drift::PoolTemplateChanged)),
                ("same", None),
                ("unstamped", None),
            ])
        );
        // A provider without node classes: only the template is compared.
        mark_drift(&s, &mut parts.nodes, &|_| None);
        let drifted: Vec<&str> = parts
            .nodes
            .iter()
            .filter(|n| n.drifted.is_some())
            .map(|n| n.claim.as_str())
            .collect();
        assert_eq!(drifted, ["old-template"]);
    }

    fn snapshot(
        pods: Vec<core::Pod>,
        nodes: Vec<core::Node>,
        claims: Vec<NodeClaim>,
        pdbs: Vec<PodDisruptionBudget>,
    ) -> Snapshot {
        let store = Store::new();
        store.reset(pods);
        store.reset(nodes);
        store.reset(claims);
        store.reset(pdbs);
        assert!(!store.is_synced(), "pools have not listed yet");
        store.reset(vec![pool()]);
        assert!(store.is_synced());
        store.read(Snapshot::clone)
    }

    #[test]
    fn only_unschedulable_accelerator_pods_are_pending_and_finished_pods_are_dropped() {
        let finished = pod("done", 1, None, json!({"status": {"phase": "Succeeded"}}));
        let s = snapshot(
            vec![
                pod("gpu", 1, None, json!({})),
                pod("cpu", 0, None, json!({})),
                pod(
                    "mig",
                    0,
                    None,
                    json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}]}}),
                ),
                pod("bound", 1, Some("n1"), json!({})),
                pod(
                    "leaving",
                    1,
                    None,
                    json!({"metadata": {"deletionTimestamp": "2026-01-05T00:00:00Z"}}),
                ),
                finished,
            ],
            vec![],
            vec![],
            vec![],
        );
        assert!(!s.pods.contains_key("ml/done"));
        let parts = world_parts(&s, catalog(), "us-east-1", t(0));
        let names: Vec<&str> = parts.pending.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["ml/gpu", "ml/mig"]);
        assert!(parts.nodes.is_empty());
    }

    #[test]
    fn pods_pinned_to_karpenter_pools_we_lack_are_left_to_karpenter() {
        let pinned = |name: &str, pool: &str| {
            pod(
                name,
                1,
                None,
                json!({"spec": {"nodeSelector": {"karpenter.sh/nodepool": pool}}}),
            )
        };
        let either = pod(
            "either",
            1,
            None,
            json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["karp"]}]},
                {"matchExpressions": [{"key": "team", "operator": "In", "values": ["ml"]}]}
            ]}}}}}),
        );
        let s = snapshot(
            vec![pinned("theirs", "karp"), pinned("ours", "gpu"), either],
            vec![],
            vec![],
            vec![],
        );
        let parts = world_parts(&s, catalog(), "us-east-1", t(0));
        let names: Vec<&str> = parts.pending.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["ml/either", "ml/ours"]);
    }

    #[test]
    fn a_claim_joins_its_node_and_bound_pods_with_pdbs_annotations_and_readiness() {
        let pid = format!("aws:///{}/i-0abc", zone());
        let ready_claim = claim(
            "gpu-1",
            json!({"status": {"providerID": pid, "conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                 "lastTransitionTime": "2026-01-05T00:05:00Z"}]}}),
        );
        let in_flight = claim("gpu-2", json!({}));
        let leaving = claim(
            "gpu-3",
            json!({"metadata": {"deletionTimestamp": "2026-01-05T00:00:00Z"}}),
        );
        let s = snapshot(
            vec![
                pod(
                    "train",
                    1,
                    Some("ip-1"),
                    json!({"metadata": {"annotations": {
                        l::CHECKPOINT_COMPLETED: "2026-01-05T00:10:00Z",
                        l::DO_NOT_DISRUPT: "true"}},
                        "status": {"startTime": "2026-01-05T00:06:00Z"}}),
                ),
                pod("other", 0, Some("ip-1"), json!({})),
                pod(
                    "karpenter",
                    0,
                    Some("ip-1"),
                    json!({"metadata": {"annotations": {l::KARPENTER_DO_NOT_DISRUPT: "true"}}}),
                ),
                pod(
                    "logs",
                    0,
                    Some("ip-1"),
                    json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "logs", "uid": "u"}]}}),
                ),
                pod("elsewhere", 1, Some("ip-9"), json!({})),
            ],
            vec![node(
                "ip-1",
                &pid,
                json!({"metadata": {"annotations": {l::DO_NOT_DISRUPT: "true"}}}),
            )],
            vec![ready_claim, in_flight, leaving],
            vec![pdb("a", "nothing", 3), pdb("b", "other", 0)],
        );
        let parts = world_parts(&s, catalog(), "us-east-1", t(0));
        assert_eq!(parts.nodes.len(), 3);
        let n = &parts.nodes[0];
        assert_eq!(n.claim, "gpu-1");
        assert_eq!(n.state.name, "ip-1");
        assert_eq!(n.ready_at, Some(t(300)));
        assert!(!n.state.in_flight && !n.state.unschedulable && n.do_not_disrupt);
        let pods: Vec<&str> = n.pods.iter().map(|b| b.pod.name.as_str()).collect();
        assert_eq!(
            pods,
            ["ml/karpenter", "ml/other", "ml/train"],
            "the daemonset pod is not a bound pod"
        );
        let train = &n.pods[2];
        assert!(train.do_not_disrupt);
        assert!(n.pods[0].do_not_disrupt, "Karpenter's annotation holds too");
        assert!(!n.pods[1].do_not_disrupt);
        let n = &parts.nodes[0];
        assert_eq!(train.checkpoint_completed, Some(t(600)));
        assert_eq!(train.started, Some(t(360)), "status.startTime");
        assert_eq!(n.pods[0].started, None, "not started yet");
        assert_eq!(train.pdb, None);
        assert_eq!(n.pods[1].pdb, Some(1));
        assert_eq!(parts.pdbs[1].name, "ml/b");
        assert_eq!(parts.pdbs[1].disruptions_allowed, 0);
        // Used counts every pod on the node, the daemonset's included.
        assert_eq!(n.state.used.get("cpu"), 4000);
        assert_eq!(n.state.used.get(l::RESOURCE_GPU), 1);
        let flight = &parts.nodes[1];
        assert!(flight.state.in_flight && flight.ready_at.is_none() && flight.pods.is_empty());
        assert_eq!(flight.launched_at, t(0));
        assert!(
            parts.nodes[2].state.unschedulable,
            "a deleting claim takes no pods"
        );
        // The lifecycle's view of the deleting claim has no node, so no pods.
        let view = s.claim_view(&s.claims["gpu-3"]);
        assert!(view.node.is_none() && view.pods.is_empty());
    }

    #[test]
    fn a_relist_replaces_the_kind_and_deletes_apply_one_by_one() {
        let store = Store::new();
        store.reset(vec![
            pod("a", 1, None, json!({})),
            pod("b", 1, None, json!({})),
        ]);
        store.apply(pod("c", 1, None, json!({})));
        store.delete(&pod("a", 1, None, json!({})));
        // A pod that finishes leaves the index on its update.
        store.apply(pod("b", 1, None, json!({"status": {"phase": "Failed"}})));
        assert_eq!(
            store.read(|s| s.pods.keys().cloned().collect::<Vec<_>>()),
            ["ml/c"]
        );
        store.reset(vec![pod("d", 1, None, json!({}))]);
        assert_eq!(
            store.read(|s| s.pods.keys().cloned().collect::<Vec<_>>()),
            ["ml/d"]
        );
    }

    #[test]
    fn a_pod_with_unreadable_annotations_is_kept_protected_and_reported_once() {
        let pid = format!("aws:///{}/i-0abc", zone());
        let ready = claim(
            "gpu-1",
            json!({"status": {"providerID": pid, "conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                 "lastTransitionTime": "2026-01-05T00:05:00Z"}]}}),
        );
        let bad_gang = json!({"metadata": {"annotations": {
            l::POD_GROUP: "g", l::POD_GROUP_SIZE: "four"}}});
        let kueue_without_count = json!({"metadata": {"labels": {l::KUEUE_GROUP: "g2"},
                                "annotations": {l::CHECKPOINT_INTERVAL: "soon"}}});
        let store = Store::new();
        store.reset(vec![
            pod("bound", 1, Some("ip-1"), bad_gang),
            pod("waiting", 1, None, kueue_without_count),
        ]);
        store.reset(vec![node("ip-1", &pid, json!({}))]);
        store.reset(vec![ready]);
        store.reset(Vec::<PodDisruptionBudget>::new());
        store.reset(vec![pool()]);
        let s = store.read(Snapshot::clone);
        assert!(s.pods["ml/bound"].unreadable[0].contains(l::POD_GROUP_SIZE));
        let parts = world_parts(&s, catalog(), "us-east-1", t(0));
        // The bound pod still holds its node, which consolidation must keep.
        let bound = &parts.nodes[0].pods;
        assert_eq!(bound.len(), 1);
        assert_eq!(bound[0].pod.name, "ml/bound");
        assert!(bound[0].do_not_disrupt && bound[0].pod.group.is_none());
        assert_eq!(parts.nodes[0].state.used.get(l::RESOURCE_GPU), 1);
        // The pending one is not planned as though what cannot be read
        // were absent: it carries the problems, and the planner reports it.
        assert_eq!(parts.pending.len(), 1);
        assert_eq!(parts.pending[0].name, "ml/waiting");
        assert_eq!(parts.pending[0].not_placeable.len(), 2);
        // Each problem is reported once, and again only when it changes.
        let mut reports = UnreadableReports::default();
        let first = reports.fresh(&s);
        assert_eq!(
            first.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
            ["ml/bound", "ml/waiting"]
        );
        assert_eq!(first[1].1.len(), 2, "{:?}", first[1].1);
        assert!(reports.fresh(&s).is_empty());
        store.apply(pod("bound", 1, Some("ip-1"), json!({})));
        assert!(reports.fresh(&store.read(Snapshot::clone)).is_empty());
        store.apply(pod(
            "bound",
            1,
            Some("ip-1"),
            json!({"metadata": {"annotations": {l::CHECKPOINT_INTERVAL: "soon"}}}),
        ));
        let again = reports.fresh(&store.read(Snapshot::clone));
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].0, "ml/bound");
    }

    #[test]
    fn pods_of_one_workload_share_one_shape_and_plan_as_they_read() {
        let labelled = |extra: serde_json::Value| {
            let mut v = json!({"metadata": {"labels": {"app": "x"}}});
            merge(&mut v, extra);
            v
        };
        let a = pod("a", 1, Some("n1"), labelled(json!({})));
        // A StatefulSet's pods differ in a label, not in their shape.
        let own = json!({"metadata": {"labels": {"statefulset.kubernetes.io/pod-name": "b"}}});
        let b = pod("b", 1, Some("n1"), labelled(own));
        let bigger = pod("c", 2, None, labelled(json!({})));
        let every = json!({"metadata": {"annotations": {l::CHECKPOINT_INTERVAL: "30m"}}});
        let checkpointed = pod("d", 1, Some("n2"), labelled(every));
        let store = Store::new();
        store.reset(vec![
            a.clone(),
            b.clone(),
            bigger.clone(),
            checkpointed.clone(),
        ]);
        let s = store.read(Snapshot::clone);
        let [pa, pb, pc, pd] = ["a", "b", "c", "d"].map(|n| &s.pods[&format!("ml/{n}")]);
        assert!(Arc::ptr_eq(&pa.shape, &pb.shape));
        assert!(!Arc::ptr_eq(&pa.shape, &pc.shape), "other requests");
        assert!(!Arc::ptr_eq(&pa.shape, &pd.shape), "other annotations");
        assert!(Arc::ptr_eq(&pa.namespace, &pc.namespace));
        assert_eq!((pa.labels.len(), pb.labels.len()), (1, 2));
        assert!(Arc::ptr_eq(&pa.labels[0].1, &pb.labels[0].1), "app=x, once");
        let node = |p: &PodInfo| p.node_name.clone().unwrap();
        assert!(Arc::ptr_eq(&node(pa), &node(pb)));
        assert_eq!(&*node(pd), "n2");
        // The planner reads each pod as the direct conversion does.
        for (info, k8s) in [(pa, &a), (pb, &b), (pc, &bigger), (pd, &checkpointed)] {
            assert_eq!(
                info.planner_pod(),
                Pod::from_k8s(k8s, &BTreeMap::new()).unwrap()
            );
        }
        assert_eq!(store.interners().shapes(), 3);
        // Shapes no pod holds go with the next relist.
        drop(s);
        store.reset(vec![a]);
        assert_eq!(store.interners().shapes(), 1);
    }

    #[test]
    fn stored_claims_carry_no_managed_fields() {
        let mut c = claim("gpu-1", json!({}));
        c.metadata.managed_fields = Some(vec![Default::default()]);
        let store = Store::new();
        store.apply(c);
        assert!(store.read(|s| s.claims["gpu-1"].metadata.managed_fields.is_none()));
    }
}
