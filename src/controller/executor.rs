//! Applies the core's [`Action`]s through the Kubernetes API: a launch
//! becomes a NodeClaim (created before any instance exists; the lifecycle
//! reconciler launches it), a cordon a taint and `unschedulable`, a
//! checkpoint request a pod annotation, an eviction an Eviction, a delete
//! the NodeClaim's deletion (its finalizer does the rest). Every action is
//! logged with its `Display`. Nothing here decides; a lost lease stops the
//! batch before its next write.

use super::checkpoint::{self, CheckpointRequest, HookClient};
use super::events::{self, Events};
use super::kube_api::{Eviction, KubeApi, NodeChange};
use super::lifecycle::{format_fallbacks, FALLBACKS_ANNOTATION};
use super::snapshot::{NodeInfo, PodInfo};
use crate::api::labels as l;
use crate::api::{NodeClaim, NodeClaimSpec, Taint, TaintEffect};
use crate::cluster::Pod;
use crate::core::{
    fallback, Action, ClaimRequest, DisruptionDecision, DisruptionReason, ManagedNode, Time, World,
};
use crate::metrics::Metrics;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::watch;

/// Errors applying one action; none is retried here: the core learns the
/// outcome ([`core_outcome`]) and issues the action again.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The claim cannot be built: its pool or instance type is unknown.
    #[error("cannot build NodeClaim {0}: unknown pool or instance type")]
    Build(String),
    /// The checkpoint annotation could not be written.
    #[error("checkpoint request: {0}")]
    Checkpoint(String),
    /// A write failed.
    #[error("{action}: {source}")]
    Kube {
        /// The action, as displayed.
        action: String,
        /// The API error.
        source: kube::Error,
    },
}

/// The module's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Claim label naming the pre-warm window a claim holds capacity for
/// (metrics count such nodes per pool).
pub const PREWARM_LABEL: &str = "quartermaster.dev/prewarm-window";

/// A short lowercase tag for this process (base 36 of the start time in
/// seconds), for the names of the claims its core makes
/// ([`crate::core::Core::with_claim_tag`]).
pub fn boot_tag(now: Time) -> String {
    let mut n = now.timestamp().max(0) as u64;
    let mut out = Vec::new();
    while n > 0 {
        out.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize]);
        n /= 36;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// The EFA interfaces a claim's instance gets: every one its type supports
/// (`maxEfaInterfaces`) when any of its pods requests `vpc.amazonaws.com/efa`
/// or its pool asks for EFA (`spec.template.spec.efa`); `None` otherwise
/// (no EFA type, or neither pod nor pool wants the fabric).
pub fn efa_interfaces(req: &ClaimRequest, world: &World, pods: &[&Pod]) -> Option<u32> {
    let it = world.catalog.instance_type(&req.offering.instance_type)?;
    let pool_wants = world
        .pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(req.nodepool.as_str()))
        .is_some_and(|p| p.spec.template.spec.efa);
    // EFA interfaces through the EFA DRA driver are attached at launch too.
    let dra_efa =
        crate::catalog::devices::resource_name(crate::catalog::devices::EFA_DRIVER, "efa");
    let wanted = pool_wants
        || pods.iter().any(|p| p.requests.get(l::RESOURCE_EFA) > 0)
        || dra_demand(req, world, pods).get(&dra_efa) > 0;
    (wanted && it.efa_supported && it.max_efa_interfaces > 0).then_some(it.max_efa_interfaces)
}

/// The devices the DRA claims of a claim's pods take on its node (each
/// shared claim once), as matched on its instance type with its pool's
/// GPU sharing.
pub fn dra_demand(req: &ClaimRequest, world: &World, pods: &[&Pod]) -> crate::cluster::Resources {
    let mut total = crate::cluster::Resources::new();
    let pool = world
        .pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(req.nodepool.as_str()))
        .and_then(|p| crate::cluster::Pool::from_api(p, crate::cluster::Resources::new()).ok());
    let shape = crate::cluster::dra::ShapeKey::new(
        &req.offering.instance_type,
        pool.as_ref()
            .map(crate::cluster::Pool::gpu_layout)
            .unwrap_or_default(),
    );
    let mut seen = std::collections::BTreeSet::new();
    for d in pods.iter().filter_map(|p| p.devices.as_ref()) {
        if !seen.insert(Arc::as_ptr(d)) {
            continue;
        }
        if let Some(Ok(a)) = d.shapes.get(&shape) {
            total.add(&a.demand);
        }
    }
    total
}

/// The NodeClaim for a launch: our finalizer, the pool label, the node's
/// labels and taints as [`ManagedNode::launched`] gives them, the pool's
/// startup taints plus `quartermaster.dev/unregistered`, the expected
/// allocatable as `resources`, and the fallback offerings as an annotation.
/// `pods` are the claim's pods as the world has them (for fallbacks).
///
/// # Errors
/// [`Error::Build`] when the pool or instance type is unknown.
pub fn build_claim(
    req: &ClaimRequest,
    name: &str,
    world: &World,
    pods: &[&Pod],
    now: Time,
) -> Result<NodeClaim> {
    let node = ManagedNode::launched(req, world, now).ok_or_else(|| Error::Build(name.into()))?;
    let pool = world
        .pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(req.nodepool.as_str()))
        .ok_or_else(|| Error::Build(name.into()))?;
    let template = &pool.spec.template.spec;
    let mut startup_taints = template.startup_taints.clone();
    startup_taints.push(Taint::new(
        l::TAINT_UNREGISTERED,
        "",
        TaintEffect::NoSchedule,
    ));
    let resources: BTreeMap<String, Quantity> = node
        .state
        .allocatable
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| {
            let q = if k == crate::cluster::resources::CPU {
                format!("{v}m")
            } else {
                v.to_string()
            };
            (k.to_string(), Quantity(q))
        })
        .collect();
    let mut labels = node.state.labels.clone();
    if let Some(n) = efa_interfaces(req, world, pods) {
        labels.insert(l::EFA_INTERFACES.to_string(), n.to_string());
    }
    let mut claim = NodeClaim::new(
        name,
        NodeClaimSpec {
            node_pool: req.nodepool.clone(),
            instance_type: req.offering.instance_type.clone(),
            zone: req.offering.zone.clone(),
            capacity_type: req.offering.capacity_type,
            price_per_hour: req.price_per_hour,
            resources,
            labels,
            taints: template.taints.clone(),
            startup_taints,
            termination_grace_period: template.termination_grace_period.clone(),
            expire_after: template.expire_after.clone(),
        },
    );
    claim.metadata.finalizers = Some(vec![l::FINALIZER.to_string()]);
    // Owned by its pool, as Karpenter's NodeClaims are: deleting the pool
    // deletes its claims, whose finalizer drains and terminates the nodes.
    if let Some(uid) = &pool.metadata.uid {
        claim.metadata.owner_references = Some(vec![OwnerReference {
            api_version: crate::api::NodePool::api_version(&()).into_owned(),
            kind: crate::api::NodePool::kind(&()).into_owned(),
            name: req.nodepool.clone(),
            uid: uid.clone(),
            block_owner_deletion: None,
            controller: None,
        }]);
    }
    // The DRA drivers its pods' claims need: it is Initialized once they
    // have published its devices.
    let drivers: std::collections::BTreeSet<String> = if node.state.labels.contains_key(l::DRA) {
        dra_demand(req, world, pods)
            .iter()
            .filter_map(|(k, _)| k.split_once('/').map(|(d, _)| d.to_string()))
            .collect()
    } else {
        Default::default()
    };
    // What the pool's template was, for drift (requirements the cloud
    // added to the world's pool are not in the hash).
    claim.metadata.annotations = Some(BTreeMap::from([
        (
            l::NODEPOOL_HASH.to_string(),
            crate::core::drift::pool_template_hash(&pool.spec),
        ),
        (
            l::DRIFT_HASH_VERSION.to_string(),
            crate::core::drift::HASH_VERSION.to_string(),
        ),
    ]));
    if !drivers.is_empty() {
        let list: Vec<String> = drivers.into_iter().collect();
        claim
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(l::DRA_DRIVERS.to_string(), list.join(","));
    }
    let mut labels = BTreeMap::from([(l::NODEPOOL.to_string(), req.nodepool.clone())]);
    if let Some(w) = &req.prewarm_window {
        labels.insert(PREWARM_LABEL.to_string(), w.clone());
    }
    claim.metadata.labels = Some(labels);
    let fallbacks = fallback::fallbacks(req, world, pods);
    if !fallbacks.is_empty() {
        claim
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(
                FALLBACKS_ANNOTATION.to_string(),
                format_fallbacks(&fallbacks),
            );
    }
    Ok(claim)
}

/// What an action came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Written.
    Done,
    /// This NodeClaim was created (as the API server returned it).
    Created(Box<NodeClaim>),
    /// Nothing to write (a cordon of a node not registered yet).
    Skipped(&'static str),
    /// A PDB refused the eviction; the core retries.
    Blocked,
    /// The object is gone already (a pod evicted before, a node deleted).
    Gone,
    /// Not written: this replica lost the lease.
    NotLeader,
}

pub use super::checkpoint::HookAcks;

/// What the executor reads about the objects the actions name, copied out
/// of the snapshot for the round.
#[derive(Debug, Default)]
pub struct Targets {
    /// The registered node of each claim.
    pub nodes: HashMap<String, NodeInfo>,
    /// Pods by `namespace/name`.
    pub pods: HashMap<String, PodInfo>,
}

/// Applies actions; borrowed for one round.
pub struct Executor<'a> {
    /// Kubernetes writes.
    pub api: &'a KubeApi,
    /// Metrics (checkpoints requested, hook acknowledgements, claims
    /// created and disrupted).
    pub metrics: &'a Arc<Metrics>,
    /// Leadership; checked before every write.
    pub leader: &'a watch::Receiver<bool>,
    /// Kubernetes Events, when published (tests leave them out).
    pub events: Option<&'a Events>,
    /// HTTP client of checkpoint hooks.
    pub hooks: &'a HookClient,
    /// Where hook acknowledgements are recorded.
    pub hook_acks: &'a HookAcks,
    /// How many claims' actions are applied at once ([`PARALLEL`] in the
    /// controller); 1 applies every action in the order given.
    pub parallel: usize,
    /// The disruptions the core started this round: a launch that
    /// replaces one of their nodes is counted as created for its reason.
    pub disruptions: &'a [DisruptionDecision],
}

impl Executor<'_> {
    /// Annotates the pod and calls its hook, if any ([`checkpoint::signal`]),
    /// with an Event on the pod (and one saying why a hook was refused).
    async fn request_checkpoint(
        &self,
        pod: &str,
        claim: &str,
        deadline: Time,
        world: &World<'_>,
        targets: &Targets,
    ) -> Result<Outcome> {
        let (ns, name) = split_pod(pod);
        let node = targets
            .nodes
            .get(claim)
            .map_or_else(|| claim.to_string(), |n| n.name.clone());
        let request = CheckpointRequest {
            namespace: ns.into(),
            name: name.into(),
            node,
            deadline,
            reason: "node disruption".into(),
        };
        let policy = world
            .nodes
            .iter()
            .find(|n| n.claim == claim)
            .and_then(|n| {
                world
                    .pools
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(n.nodepool.as_str()))
            })
            .map(|p| &p.spec.interruption);
        let refused = checkpoint::signal(
            self.api,
            self.hooks,
            self.hook_acks,
            self.metrics,
            &request,
            targets.pods.get(pod),
            policy,
        )
        .await
        .map_err(|e| Error::Checkpoint(e.to_string()))?;
        if let Some(e) = refused {
            tracing::warn!(%pod, error = %e, "checkpoint hook unusable; annotation only");
            if let Some(ev) = self.events {
                ev.checkpoint_hook_refused(&events::pod_ref(pod, None), &e.to_string())
                    .await;
            }
        }
        if let Some(ev) = self.events {
            ev.checkpoint_requested(&events::pod_ref(pod, None), claim, "node disruption")
                .await;
        }
        Ok(Outcome::Done)
    }
}

/// The claim an action is about (a launch's new claim).
fn action_claim(a: &Action) -> &str {
    match a {
        Action::Launch(req) => &req.claim,
        Action::Cordon { claim, .. }
        | Action::Uncordon { claim }
        | Action::RequestCheckpoint { claim, .. }
        | Action::Evict { claim, .. }
        | Action::Delete { claim, .. }
        | Action::Reboot { claim, .. } => claim,
    }
}

fn split_pod(pod: &str) -> (&str, &str) {
    pod.split_once('/').unwrap_or(("default", pod))
}

/// How many claims' actions [`Executor::execute`] applies at once.
pub const PARALLEL: usize = 16;

/// What the core learns of an action from what came of it: written is
/// done, an object already gone is gone, anything else (a PDB's 429, an API
/// error, a node not registered yet, a lost lease) failed and is issued
/// again after a backoff ([`crate::core::retry`]).
pub fn core_outcome(result: &Result<Outcome>) -> crate::core::Outcome {
    use crate::core::Outcome as O;
    match result {
        Ok(Outcome::Done | Outcome::Created(_)) => O::Done,
        Ok(Outcome::Gone) => O::Gone,
        Ok(Outcome::Skipped(_) | Outcome::Blocked | Outcome::NotLeader) => O::Failed,
        Err(Error::Kube { source, .. }) if super::kube_api::is_status(source, 404) => O::Gone,
        Err(_) => O::Failed,
    }
}

impl Executor<'_> {
    /// Applies the actions and returns each one's outcome, in the order
    /// given. The actions of one claim are applied in their order, those of
    /// different claims concurrently, at most [`PARALLEL`] claims at once,
    /// so that a slow write holds one claim, not the batch. After a cordon
    /// that is not written, the rest of its claim's actions are not tried
    /// ([`Outcome::Skipped`]): nothing is evicted from a node that is not
    /// cordoned. Stops writing (every later outcome is
    /// [`Outcome::NotLeader`]) as soon as the lease is lost. `targets` gives
    /// the registered node of each claim and the pods the actions name.
    pub async fn execute(
        &self,
        actions: &[Action],
        world: &World<'_>,
        targets: &Targets,
        now: Time,
    ) -> Vec<Result<Outcome>> {
        use futures::StreamExt;
        if self.parallel <= 1 {
            let all: Vec<usize> = (0..actions.len()).collect();
            return self
                .group(all, actions, world, targets, now)
                .await
                .into_iter()
                .map(|(_, r)| r)
                .collect();
        }
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        for (i, a) in actions.iter().enumerate() {
            let claim = action_claim(a);
            match groups.iter_mut().find(|(c, _)| *c == claim) {
                Some((_, members)) => members.push(i),
                None => groups.push((claim, vec![i])),
            }
        }
        let runs: Vec<_> = groups
            .into_iter()
            .map(|(_, members)| self.group(members, actions, world, targets, now))
            .collect();
        let done: Vec<Vec<(usize, Result<Outcome>)>> = futures::stream::iter(runs)
            .buffer_unordered(self.parallel)
            .collect()
            .await;
        let mut out: Vec<Option<Result<Outcome>>> = (0..actions.len()).map(|_| None).collect();
        for (i, r) in done.into_iter().flatten() {
            out[i] = Some(r);
        }
        out.into_iter()
            .map(|r| r.unwrap_or(Ok(Outcome::Skipped("not applied"))))
            .collect()
    }

    /// The actions of one claim (`members`, indices into `actions`), in
    /// order; after a cordon that is not written the rest of its claim's
    /// are skipped.
    async fn group(
        &self,
        members: Vec<usize>,
        actions: &[Action],
        world: &World<'_>,
        targets: &Targets,
        now: Time,
    ) -> Vec<(usize, Result<Outcome>)> {
        let mut out = Vec::with_capacity(members.len());
        let mut not_cordoned: Vec<&str> = Vec::new();
        for i in members {
            let action = &actions[i];
            let claim = action_claim(action);
            let result = if not_cordoned.contains(&claim) {
                Ok(Outcome::Skipped("waits for its node's cordon"))
            } else {
                self.one(action, world, targets, now).await
            };
            if matches!(action, Action::Cordon { .. }) && !matches!(result, Ok(Outcome::Done)) {
                not_cordoned.push(claim);
            }
            out.push((i, result));
        }
        out
    }

    /// One action, unless the lease is lost.
    async fn one(
        &self,
        action: &Action,
        world: &World<'_>,
        targets: &Targets,
        now: Time,
    ) -> Result<Outcome> {
        if !*self.leader.borrow() {
            tracing::warn!(%action, "not leader: action dropped");
            self.metrics.actions_dropped.inc();
            return Ok(Outcome::NotLeader);
        }
        tracing::info!(%action, "executing");
        let result = self.apply(action, world, targets, now).await;
        if let Err(e) = &result {
            tracing::warn!(%action, error = %e, "action failed");
        }
        self.metrics.progress.beat();
        result
    }

    async fn apply(
        &self,
        action: &Action,
        world: &World<'_>,
        targets: &Targets,
        now: Time,
    ) -> Result<Outcome> {
        let kube = |source| Error::Kube {
            action: action.to_string(),
            source,
        };
        match action {
            Action::Launch(req) => {
                let name = req.claim.clone();
                let pods: Vec<&Pod> = req
                    .pods
                    .iter()
                    .filter_map(|n| {
                        world.pending.iter().find(|p| &p.name == n).or_else(|| {
                            world
                                .nodes
                                .iter()
                                .flat_map(|m| m.pods.iter())
                                .map(|b| &b.pod)
                                .find(|p| &p.name == n)
                        })
                    })
                    .collect();
                let claim = build_claim(req, &name, world, &pods, now)?;
                let created = self.api.create_node_claim(&claim).await.map_err(kube)?;
                self.metrics.karpenter.created(req, self.disruptions);
                if let Some(ev) = self.events {
                    let offering = req.offering.to_string();
                    // Stand-ins for pods not created yet have no object.
                    let real = req
                        .pods
                        .iter()
                        .filter(|p| !crate::cluster::podgroups::is_reservation(p));
                    for p in real {
                        ev.nominated(&events::pod_ref(p, None), &name, &offering)
                            .await;
                    }
                }
                Ok(Outcome::Created(Box::new(created)))
            }
            Action::Cordon { claim, reason } => {
                let Some(node) = targets.nodes.get(claim) else {
                    return Ok(Outcome::Skipped("node not registered"));
                };
                self.api
                    .patch_node(node, &NodeChange::cordon())
                    .await
                    .map_err(kube)?;
                if *reason == DisruptionReason::Drifted {
                    let nodepool = world
                        .nodes
                        .iter()
                        .find(|n| n.claim == *claim)
                        .map(|n| n.nodepool.clone())
                        .unwrap_or_default();
                    self.metrics
                        .drift_replacements
                        .get_or_create(&crate::metrics::PoolLabels { nodepool })
                        .inc();
                }
                Ok(Outcome::Done)
            }
            Action::Uncordon { claim } => {
                let Some(node) = targets.nodes.get(claim) else {
                    return Ok(Outcome::Gone);
                };
                self.api
                    .patch_node(node, &NodeChange::uncordon())
                    .await
                    .map_err(kube)?;
                Ok(Outcome::Done)
            }
            Action::RequestCheckpoint {
                pod,
                claim,
                deadline,
            } => {
                self.request_checkpoint(pod, claim, *deadline, world, targets)
                    .await
            }
            Action::Evict { pod, claim } => {
                let (ns, name) = split_pod(pod);
                match self.api.evict(ns, name).await.map_err(kube)? {
                    Eviction::Blocked => Ok(Outcome::Blocked),
                    Eviction::Evicted => {
                        if let Some(ev) = self.events {
                            ev.evicted(&events::pod_ref(pod, None), claim, "node disrupted")
                                .await;
                        }
                        Ok(Outcome::Done)
                    }
                    Eviction::Gone => Ok(Outcome::Gone),
                }
            }
            // The cloud reboots: the loop hands these to it.
            Action::Reboot { .. } => Ok(Outcome::Skipped("rebooted by the cloud")),
            Action::Delete { claim, reason } => {
                self.api.delete_node_claim(claim).await.map_err(kube)?;
                if let Some(n) = world.nodes.iter().find(|n| n.claim == *claim) {
                    self.metrics.karpenter.disrupted(
                        &n.nodepool,
                        n.offering.capacity_type,
                        *reason,
                    );
                }
                Ok(Outcome::Done)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodePool, NodePoolSpec};
    use crate::catalog::{CapacityType, Catalog};
    use crate::core::OfferingKey;
    use chrono::TimeZone;
    use kube::ResourceExt;
    use std::sync::OnceLock;

    fn catalog() -> &'static Catalog {
        static C: OnceLock<Catalog> = OnceLock::new();
        C.get_or_init(|| Catalog::embedded().unwrap())
    }

    #[test]
    fn a_launch_becomes_a_claim_with_finalizer_labels_taints_and_the_unregistered_startup_taint() {
        let mut spec = NodePoolSpec {
            capacity_types: vec![CapacityType::Spot],
            ..Default::default()
        };
        spec.template.spec.taints = vec![Taint::new(l::TAINT_GPU, "", TaintEffect::NoSchedule)];
        spec.template.spec.expire_after = Some("720h".into());
        spec.template.spec.termination_grace_period = Some("1h".into());
        let mut pool = NodePool::new("gpu", spec);
        pool.metadata.uid = Some("0b1c-pool-uid".into());
        let pools = [pool];
        let world = World {
            nodes_revision: 0,
            catalog: catalog(),
            region: "us-east-1",
            pools: &pools,
            pending: &[],
            nodes: &[],
            pdbs: &[],
        };
        let zone = catalog()
            .offerings_of("us-east-1", "g5.xlarge")
            .find(|o| o.capacity_type == CapacityType::Spot)
            .unwrap()
            .zone_id
            .clone();
        let req = ClaimRequest {
            cluster_placement: false,
            claim: "gpu-000001".into(),
            nodepool: "gpu".into(),
            offering: OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone: zone.clone(),
                capacity_type: CapacityType::Spot,
            },
            price_per_hour: 0.4,
            pods: vec![],
            prewarm_window: None,
            reservation: None,
        };
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let claim = build_claim(&req, "gpu-000001-x", &world, &[], now).unwrap();
        assert_eq!(claim.metadata.name.as_deref(), Some("gpu-000001-x"));
        assert_eq!(
            claim.metadata.finalizers.as_deref(),
            Some(&[l::FINALIZER.to_string()][..])
        );
        // Owned by its pool, as Karpenter's are: deleting the pool deletes
        // the claim, whose finalizer drains the node.
        let owner = &claim.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("NodePool", "gpu", "0b1c-pool-uid")
        );
        assert_eq!(owner.api_version, "quartermaster.dev/v1alpha1");
        assert_eq!(claim.spec.labels[l::NODEPOOL], "gpu");
        assert_eq!(claim.spec.labels[l::INSTANCE_TYPE], "g5.xlarge");
        assert_eq!(claim.spec.labels[l::ZONE_ID], zone);
        assert_eq!(claim.spec.taints[0].key, l::TAINT_GPU);
        assert!(claim
            .spec
            .startup_taints
            .iter()
            .any(|t| t.key == l::TAINT_UNREGISTERED));
        assert_eq!(claim.spec.resources[l::RESOURCE_GPU].0, "1");
        // What the controller builds passes the checks a claim must pass
        // before it is launched.
        assert_eq!(
            crate::api::validate_node_claim(&claim, catalog(), "us-east-1"),
            []
        );
        // Its lifetime is the pool's as it is now: a later change of the
        // pool's applies to new nodes only.
        assert_eq!(claim.spec.expire_after.as_deref(), Some("720h"));
        assert_eq!(claim.spec.termination_grace_period.as_deref(), Some("1h"));
        // No pod pins it: fallbacks in other zones are recorded.
        let fallbacks = claim.annotations()[FALLBACKS_ANNOTATION].clone();
        assert!(fallbacks.starts_with("g5.xlarge/"), "{fallbacks}");
        assert!(!fallbacks.contains(&format!("/{zone}/")), "{fallbacks}");
        // The lifecycle hands the same fallbacks to the provider.
        assert_eq!(
            super::super::lifecycle::template_of(&claim).fallbacks,
            fallback::fallbacks(&req, &world, &[])
        );
        // An unknown pool cannot be built.
        let mut bad = req.clone();
        bad.nodepool = "nope".into();
        assert!(matches!(
            build_claim(&bad, "x", &world, &[], now),
            Err(Error::Build(_))
        ));
    }

    #[test]
    fn a_claim_gets_every_efa_interface_of_its_type_only_when_a_pod_or_its_pool_asks_for_efa() {
        let pools = [NodePool::new("train", NodePoolSpec::default())];
        let world = World {
            nodes_revision: 0,
            catalog: catalog(),
            region: "us-east-1",
            pools: &pools,
            pending: &[],
            nodes: &[],
            pdbs: &[],
        };
        let req = |instance_type: &str| ClaimRequest {
            cluster_placement: false,
            claim: "train-000001".into(),
            nodepool: "train".into(),
            offering: OfferingKey {
                instance_type: instance_type.into(),
                zone: "use1-az4".into(),
                capacity_type: CapacityType::OnDemand,
            },
            price_per_hour: 1.0,
            pods: vec![],
            prewarm_window: None,
            reservation: None,
        };
        let efa = Pod::new(
            "ml/allreduce",
            crate::cluster::Resources::new().with(l::RESOURCE_EFA, 1),
        );
        let plain = Pod::new("ml/solo", crate::cluster::Resources::new());
        let p4d = catalog().instance_type("p4d.24xlarge").unwrap();
        assert!(p4d.max_efa_interfaces > 0);
        assert_eq!(
            efa_interfaces(&req("p4d.24xlarge"), &world, &[&plain, &efa]),
            Some(p4d.max_efa_interfaces)
        );
        assert_eq!(
            efa_interfaces(&req("p4d.24xlarge"), &world, &[&plain]),
            None
        );
        assert_eq!(efa_interfaces(&req("g5.xlarge"), &world, &[&efa]), None);
        // A pool that asks for EFA gets it on its EFA types without a pod
        // asking; its other types launch as usual.
        let mut asking = pools[0].clone();
        asking.spec.template.spec.efa = true;
        let pools = [asking];
        let world = World {
            pools: &pools,
            ..world
        };
        assert_eq!(
            efa_interfaces(&req("p4d.24xlarge"), &world, &[&plain]),
            Some(p4d.max_efa_interfaces)
        );
        assert_eq!(efa_interfaces(&req("g5.xlarge"), &world, &[&plain]), None);
    }

    #[test]
    fn boot_tags_differ_per_second_and_are_lowercase_alphanumeric() {
        let t = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let a = boot_tag(t);
        let b = boot_tag(t + chrono::TimeDelta::seconds(1));
        assert_ne!(a, b);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()));
    }
}
