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
use crate::cluster::dra::PodDevices;
use crate::cluster::podgroups::{self, PodGroupSpec};
use crate::cluster::{ClaimRef, GangSource, Pod, Resources};
use crate::core::drift::{self, ClassStamp, Stamp};
use crate::core::{BoundPod, ClaimRequest, ManagedNode, OfferingKey, Pdb, Time, World};
use kube::{Resource, ResourceExt};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::Arc;

mod objects;
pub use objects::{
    is_accelerator, to_chrono, to_k8s_time, Interners, NodeInfo, PdbInfo, PodInfo, PodShape,
    STUCK_TERMINATING,
};

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
    /// (watched where ProvisioningRequests or CapacityBuffers are served).
    pub pod_templates: BTreeMap<String, Result<Pod, String>>,
    /// CapacityBuffers, where the cluster serves them (without managed
    /// fields).
    pub capacity_buffers: BTreeMap<String, crate::api::foreign::CapacityBuffer>,
    /// The workloads a CapacityBuffer's `scalableRef` may name, watched
    /// where CapacityBuffers are served (`super::scalables`).
    pub scalables: super::scalables::Scalables,
    /// DRA objects, where the cluster serves them (`super::dra`).
    pub dra: crate::cluster::dra::Objects,
    /// Whether DRA objects are watched (the cluster serves
    /// `resource.k8s.io/v1`): only then are pending pods' claims matched;
    /// elsewhere a pod with claims is not placeable.
    pub dra_served: bool,
    /// Matches pending pods' DRA claims, keeping what it compiled and
    /// evaluated across rounds.
    pub dra_resolver: std::sync::Arc<std::sync::Mutex<crate::cluster::dra::Resolver>>,
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
                podgroups::apply(&mut pod, &name, spec);
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

    /// The lifecycle's view of a claim: its node's allocatable with the
    /// devices its DRA drivers publish.
    pub fn claim_view(&self, claim: &NodeClaim) -> ClaimView {
        let node = self.node_of(claim).cloned().map(|mut n| {
            n.allocatable.add(&self.dra.node_devices(&n.name).0);
            n
        });
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
            nodes_revision: 0,
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
        cluster_placement: claim
            .spec
            .labels
            .get(crate::api::labels::CLUSTER_PLACEMENT)
            .is_some_and(|v| v == "true"),
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
    // DRA claims matched against the cluster's classes and claims: the
    // pending pods', and those of running pods whose claims are their own
    // (made from templates), as the claims a re-created pod would get, so
    // that consolidation and drift can move them (`docs/dra.md`).
    let movable: Vec<Pod> = if s.dra_served {
        by_node
            .values()
            .flatten()
            .filter(|p| !p.daemon && !p.shape.pod.resource_claims.is_empty())
            .map(|p| s.gang_pod(p))
            .filter(|p| p.resource_claims.iter().all(ClaimRef::is_own))
            .map(|mut p| {
                for c in &mut p.resource_claims {
                    c.generated = None;
                }
                p
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut running_devices: HashMap<String, Arc<PodDevices>> = HashMap::new();
    if s.dra_served
        && (!movable.is_empty() || pending.iter().any(|p| !p.resource_claims.is_empty()))
    {
        let n = pending.len();
        pending.extend(movable);
        s.dra_resolver
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .share_gpus(
                pools
                    .iter()
                    .filter_map(|p| p.spec.gpu_sharing.dra_gpu_shares()),
            )
            .attach(&mut pending, &s.dra, catalog);
        running_devices = pending
            .split_off(n)
            .into_iter()
            .filter_map(|p| Some((p.name, p.devices?)))
            .collect();
    }
    let shape_world = World {
        nodes_revision: 0,
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
        serve_dra(claim, &mut m, &shape_world);
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
            // What a pod pinned to the node requires (an allocated DRA
            // claim's node selector).
            m.state
                .labels
                .insert(l::HOSTNAME.to_string(), node.name.clone());
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
            // The devices its DRA drivers publish count once it is ready;
            // those allocated claims take are used.
            let (published, taken) = s.dra.node_devices(&node.name);
            if m.ready_at.is_some() && !node.allocatable.is_empty() {
                m.state.allocatable = node.allocatable.plus(&published);
            }
            m.state.used.add(&taken);
            for p in by_node.get(node.name.as_str()).into_iter().flatten() {
                if p.is_stuck_terminating(node, now) {
                    // Gone, but for the kubelet that cannot say so.
                    continue;
                }
                m.state.used.add(&p.shape.pod.requests);
                if p.daemon {
                    continue;
                }
                let mut pod = s.gang_pod(p);
                pod.devices = running_devices.get(&pod.name).cloned();
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

/// The node a claim stands for, as launched ([`ManagedNode::launched`]),
/// serving DRA claims when it was launched to, not ready yet.
pub fn managed_node(claim: &NodeClaim, world: &World, at: Time) -> Option<ManagedNode> {
    let mut m = ManagedNode::launched(&request_of(claim), world, at)?;
    serve_dra(claim, &mut m, world);
    Some(m)
}

/// Offers a claim's node's devices through the DRA drivers its pool runs
/// when the claim was launched to serve DRA claims (its
/// `quartermaster.dev/dra` label).
fn serve_dra(claim: &NodeClaim, m: &mut ManagedNode, world: &World) {
    if claim.spec.labels.get(l::DRA).is_some_and(|v| v == "true") {
        m.serve_dra(world);
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
