//! The NodeClaim lifecycle reconciler: one step per status condition, each
//! idempotent, so that a controller restarted at any point converges
//! without leaking or doubling an instance (launches are idempotent per
//! claim name at the [`CloudProvider`] seam, and the claim exists before any
//! launch).
//!
//! ```text
//! created ──launch──► Launched ──node with the provider ID──► Registered
//!    │  (error: Launched=False,        (labels, taints, startup taint off)
//!    │   claim deleted, re-planned)              │
//!    │                                           ▼  node Ready + accelerators published
//!    │                                      Initialized + Ready
//!    ▼
//! deleting (deletionTimestamp + our finalizer): taint + cordon, evict
//! (PDB-aware, waits for pods to go), terminate, delete the Node, remove
//! the finalizer.
//! ```
//!
//! It decides nothing about what to launch or drain (that is `core`); it
//! reports what it did as a [`Step`] for the loop to hand on to the core.

use super::checkpoint::{self, CheckpointRequest, HookAcks, HookClient};
use super::kube_api::{Eviction, KubeApi, NodeChange};
use super::snapshot::{is_accelerator, request_of, to_k8s_time, ClaimView, NodeInfo, PodInfo};
use crate::api::labels as l;
use crate::api::nodeclaim::conditions;
use crate::api::{InterruptionPolicy, NodeClaim, NodeClaimStatus};
use crate::catalog::{CapacityType, ZoneNames};
use crate::cloud::{self, CloudProvider, Instance, NodeTemplate};
use crate::core::termination::{self, Deletion, DrainPod, PodStep};
use crate::core::{Notice, OfferingKey, Time};
use crate::metrics::{LaunchFailureLabels, Metrics};
use k8s_openapi::api::core::v1::Taint as KubeTaint;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::time::Duration;

/// Claim annotation the executor writes: the fallback offerings for the
/// launch (`type/zone/capacity-type`, comma-separated, best first).
pub const FALLBACKS_ANNOTATION: &str = "quartermaster.dev/fallback-offerings";

/// Errors of one reconcile step. All are retryable: the next round runs the
/// same step again.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write to the Kubernetes API failed.
    #[error("{step} for {claim}: {source}")]
    Kube {
        /// NodeClaim.
        claim: String,
        /// What was being written.
        step: &'static str,
        /// The API error.
        source: kube::Error,
    },
    /// The cloud failed to describe or terminate the claim's instance.
    #[error("{step} for {claim}: {source}")]
    Cloud {
        /// NodeClaim.
        claim: String,
        /// What was being done.
        step: &'static str,
        /// The cloud's error.
        source: cloud::Error,
    },
}

/// The module's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What one reconcile of a claim did.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Nothing to do (Ready, or not ours to finalize).
    Idle,
    /// Waiting for the world (registration, device plugin, a launch that
    /// cannot start yet).
    Waiting(&'static str),
    /// The instance was launched (or found launched) and recorded.
    Launched(Instance),
    /// The launch failed; the claim was deleted so that its pods are planned
    /// again. `notice` is what the core should hear (a capacity error).
    LaunchFailed {
        /// The provider's error code, or a short reason.
        reason: String,
        /// For the core.
        notice: Option<Notice>,
    },
    /// The node registered: labels and taints applied, startup taint off.
    Registered {
        /// Node name.
        node: String,
    },
    /// The node is Ready with its accelerators advertised.
    Initialized {
        /// Node name.
        node: String,
    },
    /// A launch or registration timeout (or a node that vanished): the
    /// claim was deleted.
    TimedOut(&'static str),
    /// Deleting: pods are still leaving.
    Draining {
        /// Evictions accepted this round.
        evicted: usize,
        /// Evictions a PDB refused this round (retried later).
        blocked: usize,
        /// Evictions that failed otherwise this round (recorded on the
        /// claim's `Drained` condition, retried later).
        failed: usize,
        /// Pods still on the node.
        remaining: usize,
        /// When the drain has a step to take without the pods changing (a
        /// checkpoint wait ends, a pod is due for deletion), if it does.
        until: Option<Time>,
    },
    /// Instance terminated, node deleted, finalizer removed.
    Finalized,
}

/// Reason of `Launched=False` on a claim whose labels or taints are refused
/// ([`crate::api::validate_node_claim`]).
pub const INVALID_REASON: &str = "InvalidNodeClaim";

/// The reconciler's handles and settings.
pub struct Lifecycle<'a, C> {
    /// Kubernetes writes.
    pub api: &'a KubeApi,
    /// The cloud.
    pub cloud: &'a C,
    /// Metrics (`launch_failures`, `nodeclaims_terminated`).
    pub metrics: &'a Metrics,
    /// A claim not launched this long after creation is deleted.
    pub launch_timeout: Duration,
    /// A launched claim whose node has not registered this long after the
    /// launch is deleted.
    pub registration_timeout: Duration,
    /// What the claims' offerings are: a claim's labels are checked against
    /// it before it is launched or registered
    /// ([`crate::api::validate_node_claim`]).
    pub catalog: std::sync::Arc<crate::catalog::Catalog>,
    /// The region the claims are launched in.
    pub region: &'a str,
    /// Each NodePool's interruption policy, by name (checkpoint grace
    /// period and hook of a drain).
    pub policies: &'a BTreeMap<String, InterruptionPolicy>,
    /// HTTP client of checkpoint hooks.
    pub hooks: &'a HookClient,
    /// Checkpoint acknowledgements from hooks.
    pub hook_acks: &'a HookAcks,
    /// This process' launches, which the notice path reads to know our
    /// instances before their claims' status names them.
    pub launches: &'a super::interruptions::Launches,
}

/// Whether [`Lifecycle::reconcile`] has anything to do for the claim: it is
/// being deleted with our finalizer, or not launched, registered and
/// initialized yet. Ready claims are left alone (no request made).
pub fn needs_work(claim: &NodeClaim) -> bool {
    if claim.metadata.deletion_timestamp.is_some() {
        return claim.finalizers().iter().any(|f| f == l::FINALIZER);
    }
    let Some(status) = &claim.status else {
        return true;
    };
    status.provider_id.is_none()
        || !status.is_true(conditions::REGISTERED)
        || !status.is_true(conditions::INITIALIZED)
}

fn kube_err<'a>(claim: &'a str, step: &'static str) -> impl FnOnce(kube::Error) -> Error + 'a {
    move |source| Error::Kube {
        claim: claim.to_string(),
        step,
        source,
    }
}

fn cloud_err<'a>(claim: &'a str, step: &'static str) -> impl FnOnce(cloud::Error) -> Error + 'a {
    move |source| Error::Cloud {
        claim: claim.to_string(),
        step,
        source,
    }
}

/// Sets a condition, moving its transition time only when its status
/// changes.
pub fn set_condition(
    status: &mut NodeClaimStatus,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    now: Time,
) {
    let value = if ok { "True" } else { "False" };
    match status.conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = to_k8s_time(now);
            }
            c.status = value.to_string();
            c.reason = reason.to_string();
            c.message = message.to_string();
        }
        None => status
            .conditions
            .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: type_.to_string(),
                status: value.to_string(),
                reason: reason.to_string(),
                message: message.to_string(),
                last_transition_time: to_k8s_time(now),
                observed_generation: None,
            }),
    }
}

/// The claim's status with its `Drifted` condition brought in line with
/// `drifted` (set `True` with the drift as reason, or removed), or `None`
/// when it already is. Only Ready claims carry the condition: a claim still
/// launching is left to its lifecycle (and is not replaced for drift), and
/// a claim being deleted keeps what it has (its drain writes the status).
pub fn drift_status(
    claim: &NodeClaim,
    drifted: Option<crate::core::drift::Drift>,
    now: Time,
) -> Option<NodeClaimStatus> {
    if claim.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let mut status = claim.status.clone().unwrap_or_default();
    apply_drift(&mut status, drifted, now).then_some(status)
}

/// Brings `status`'s `Drifted` condition in line with `drifted` (see
/// [`drift_status`]); whether it changed anything.
pub fn apply_drift(
    status: &mut NodeClaimStatus,
    drifted: Option<crate::core::drift::Drift>,
    now: Time,
) -> bool {
    let ready = status.is_true(conditions::READY);
    let current = status.condition(conditions::DRIFTED);
    match drifted.filter(|_| ready) {
        Some(d) => {
            if current.is_some_and(|c| c.status == "True" && c.reason == d.reason()) {
                return false;
            }
            let message = format!("{d}: the node is replaced within the pool's disruption budget");
            set_condition(status, conditions::DRIFTED, true, d.reason(), &message, now);
        }
        None => {
            if current.is_none() {
                return false;
            }
            status.conditions.retain(|c| c.type_ != conditions::DRIFTED);
        }
    }
    true
}

/// The error code of a launch failure for metrics and conditions: the EC2
/// code the AWS provider writes into its messages (`... failed with CODE:
/// ...`), else the class of the error.
pub fn error_code(e: &cloud::Error) -> String {
    if let cloud::Error::InsufficientCapacity { code, .. } = e {
        return code.clone();
    }
    let msg = e.to_string();
    let code = msg
        .split_once("failed with ")
        .and_then(|(_, rest)| rest.split([':', ' ']).next())
        .filter(|c| !c.is_empty());
    match (code, e) {
        (Some(c), _) => c.to_string(),
        (None, cloud::Error::NotReady { .. }) => "NotReady".into(),
        (None, cloud::Error::NotFound { .. }) => "NotFound".into(),
        (None, _) => "LaunchFailed".into(),
    }
}

/// Renders fallback offerings for [`FALLBACKS_ANNOTATION`].
pub fn format_fallbacks(fallbacks: &[OfferingKey]) -> String {
    fallbacks
        .iter()
        .map(|k| {
            format!(
                "{}/{}/{}",
                k.instance_type,
                k.zone,
                k.capacity_type.as_str()
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Reads [`FALLBACKS_ANNOTATION`]; malformed entries are skipped.
pub fn parse_fallbacks(text: &str) -> Vec<OfferingKey> {
    text.split(',')
        .filter_map(|entry| {
            let mut parts = entry.trim().split('/');
            let (t, z, c) = (parts.next()?, parts.next()?, parts.next()?);
            let capacity_type: CapacityType = c.parse().ok()?;
            (!t.is_empty() && !z.is_empty()).then(|| OfferingKey {
                instance_type: t.to_string(),
                zone: z.to_string(),
                capacity_type,
            })
        })
        .collect()
}

/// What the claim's instance is bootstrapped with: its spec's labels and
/// taints, and the fallbacks the executor recorded.
pub fn template_of(claim: &NodeClaim) -> NodeTemplate {
    let mut t = NodeTemplate::from(&claim.spec);
    if let Some(f) = claim.annotations().get(FALLBACKS_ANNOTATION) {
        t.fallbacks = parse_fallbacks(f);
    }
    t
}

/// The node's labels as the claim wants them, corrected to the offering the
/// instance actually runs as (a fallback zone or capacity type), the zone
/// named as `zones` name it for the claim's region, and the instance's
/// place in the network (`network`: its network nodes, top layer first) as
/// EKS labels it (`topology.k8s.aws/network-node-layer-N`).
pub fn node_labels(
    claim: &NodeClaim,
    actual: Option<&OfferingKey>,
    zones: &ZoneNames,
    network: &[String],
) -> BTreeMap<String, String> {
    let mut labels = claim.spec.labels.clone();
    for (i, node) in network.iter().enumerate() {
        labels.insert(l::network_node_layer(i + 1), node.clone());
    }
    if let Some(a) = actual {
        let region = labels.get(l::REGION).cloned().unwrap_or_default();
        let capacity_type = a.capacity_type.as_str();
        labels.insert(l::INSTANCE_TYPE.into(), a.instance_type.clone());
        labels.insert(l::ZONE_ID.into(), a.zone.clone());
        labels.insert(l::ZONE.into(), zones.name_of(&region, &a.zone));
        labels.insert(l::CAPACITY_TYPE.into(), capacity_type.into());
        labels.insert(l::KARPENTER_CAPACITY_TYPE.into(), capacity_type.into());
    }
    labels
}

fn kube_taint(t: &crate::api::Taint) -> KubeTaint {
    KubeTaint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: t.effect.as_str().to_string(),
        time_added: None,
    }
}

/// The change registration makes to the node: the claim's labels (`labels`)
/// and its taints where missing, and our unregistered taint off. The pool's
/// startup taints are the bootstrap's to add and their owners' to remove:
/// they are never written here, so one removed is never put back.
pub fn registered_change(claim: &NodeClaim, labels: BTreeMap<String, String>) -> NodeChange {
    NodeChange {
        labels,
        add_taints: claim.spec.taints.iter().map(kube_taint).collect(),
        remove_taints: vec![l::TAINT_UNREGISTERED.to_string()],
        unschedulable: None,
    }
}

/// Whether the node is initialized for the claim: Ready, every startup
/// taint gone, and every accelerator resource the claim expects advertised
/// in allocatable (the device plugin is up), or, for a node launched for
/// DRA claims, published by the drivers its pods' claims need (the
/// claim's `quartermaster.dev/dra-drivers`; every driver whose devices it
/// expects when the annotation is missing) in ResourceSlices, which the
/// node's view counts in its allocatable ([`super::snapshot::Snapshot::claim_view`]).
pub fn is_initialized(node: &NodeInfo, claim: &NodeClaim) -> bool {
    let startup_gone = claim
        .spec
        .startup_taints
        .iter()
        .all(|t| !node.has_taint(&t.key))
        && !node.has_taint(l::TAINT_UNREGISTERED);
    let expected: crate::cluster::Resources = claim
        .spec
        .resources
        .iter()
        .filter_map(|(k, q)| Some((k, crate::cluster::resources::canonical(k, &q.0).ok()?)))
        .filter(|(_, v)| *v > 0)
        .fold(crate::cluster::Resources::new(), |r, (k, v)| r.with(k, v));
    let plugin = expected
        .iter()
        .filter(|(k, _)| is_accelerator(k))
        .all(|(k, _)| node.allocatable.get(k) > 0);
    // The same rule the simulator applies (`cluster::dra::drivers_published`),
    // for the drivers the claim's pods need.
    let dra = claim.spec.labels.get(l::DRA).is_none_or(|v| v != "true") || {
        let listed = claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(l::DRA_DRIVERS));
        let drivers: Vec<&str> = match listed {
            Some(list) => list.split(',').collect(),
            None => crate::cluster::dra::DRIVERS.to_vec(),
        };
        crate::cluster::dra::drivers_published_by(&expected, &node.allocatable, &drivers)
    };
    node.ready && startup_gone && plugin && dra
}

fn condition_time(status: &NodeClaimStatus, type_: &str) -> Option<Time> {
    status.condition(type_).and_then(|c| {
        chrono::DateTime::from_timestamp(
            c.last_transition_time.0.as_second(),
            c.last_transition_time.0.subsec_nanosecond().max(0) as u32,
        )
    })
}

fn created(claim: &NodeClaim, now: Time) -> Time {
    claim
        .metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp(t.0.as_second(), 0))
        .unwrap_or(now)
}

/// The claim's deletion as the drain plans it: its start, the claim's
/// `terminationGracePeriod` (an unreadable one is logged and ignored: the
/// drain then waits for its pods) and the pool's checkpoint grace period.
fn deletion(claim: &NodeClaim, policy: Option<&InterruptionPolicy>, now: Time) -> Deletion {
    let started = claim
        .metadata
        .deletion_timestamp
        .as_ref()
        .and_then(|t| chrono::DateTime::from_timestamp(t.0.as_second(), 0))
        .unwrap_or(now);
    let grace = claim.spec.termination_grace_period.as_deref().and_then(|text| {
        crate::api::parse_duration(text)
            .map_err(|e| {
                tracing::warn!(claim = %claim.name_any(), error = %e, "unreadable terminationGracePeriod; the drain waits for its pods");
            })
            .ok()
    });
    Deletion {
        started,
        grace,
        checkpoint_grace: crate::core::interruption::checkpoint_grace(policy),
    }
}

/// A pod as the drain plan reads it: its checkpoint request's deadline and
/// acknowledgement (the annotation, or a hook's 2xx since the deletion
/// started) from its annotations.
fn drain_pod(p: &PodInfo, hook: bool, acked_by_hook: Option<Time>, started: Time) -> DrainPod {
    let requested = p
        .checkpoint_annotations
        .get(l::CHECKPOINT_REQUESTED)
        .and_then(|v| checkpoint::parse_time(v));
    let annotated = p
        .checkpoint_annotations
        .contains_key(l::CHECKPOINT_COMPLETED);
    DrainPod {
        name: p.key(),
        do_not_disrupt: p.do_not_disrupt,
        checkpoints: p.shape.pod.checkpoints || hook,
        requested,
        acknowledged: requested.is_some()
            && (annotated || acked_by_hook.is_some_and(|t| t >= started)),
        terminating: p.terminating.is_some(),
        grace: Duration::from_secs(u64::from(p.grace_seconds)),
    }
}

fn older_than(since: Time, now: Time, limit: Duration) -> bool {
    (now - since).to_std().is_ok_and(|age| age > limit)
}

impl<C: CloudProvider + Send + Sync> Lifecycle<'_, C> {
    /// Takes the claim one step further. Idempotent: running it twice on
    /// the same view does the same writes (or none).
    ///
    /// # Errors
    /// A failed API write or cloud call; the step is retried next round.
    pub async fn reconcile(&self, view: &ClaimView, now: Time) -> Result<Step> {
        let claim = &view.claim;
        if claim.metadata.deletion_timestamp.is_some() {
            return self.finalize(view, now).await;
        }
        let status = claim.status.clone().unwrap_or_default();
        if !status.is_true(conditions::REGISTERED) {
            // Its labels and taints go to the kubelet and onto the Node
            // with our privileges: only what a pool may set, and what its
            // offering gives.
            let problems = crate::api::validate_node_claim(claim, &self.catalog, self.region);
            if !problems.is_empty() {
                return self.refuse(claim, &problems, now).await;
            }
        }
        if status.provider_id.is_none() {
            return self.launch(claim, now).await;
        }
        if !status.is_true(conditions::REGISTERED) {
            return self.register(view, status, now).await;
        }
        if !status.is_true(conditions::INITIALIZED) {
            return self.initialize(view, status, now).await;
        }
        Ok(Step::Idle)
    }

    /// Deletes every claim whose instance is gone (terminated, or unknown to
    /// the cloud) although the claim is not being deleted: without this a
    /// Ready claim whose instance was reclaimed or terminated by hand would
    /// stay Idle forever, its capacity counted and its node gone. Claims
    /// launched less than `grace` ago are spared (a new instance may not be
    /// listed yet); a claim missing from the listing is confirmed with
    /// `describe` first. Returns the claims deleted.
    ///
    /// # Errors
    /// Listing the instances failed; a failed describe or delete of one
    /// claim is logged and the others carry on.
    pub async fn collect_lost(
        &self,
        views: &[ClaimView],
        now: Time,
        grace: Duration,
    ) -> Result<Vec<String>> {
        let suspects: Vec<&NodeClaim> = views
            .iter()
            .map(|v| &v.claim)
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter(|c| {
                c.status.as_ref().is_some_and(|s| {
                    s.provider_id.is_some()
                        && condition_time(s, conditions::LAUNCHED)
                            .is_some_and(|t| older_than(t, now, grace))
                })
            })
            .collect();
        if suspects.is_empty() {
            return Ok(Vec::new());
        }
        let alive: std::collections::HashSet<String> = self
            .cloud
            .instances()
            .await
            .map_err(cloud_err("*", "listing the instances"))?
            .into_iter()
            .filter(|i| i.state.is_alive())
            .map(|i| i.claim)
            .collect();
        let mut lost = Vec::new();
        for claim in suspects {
            let name = claim.name_any();
            if alive.contains(&name) {
                continue;
            }
            match self.cloud.describe(&name).await {
                Ok(Some(i)) if i.state.is_alive() => continue,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(claim = %name, error = %e, "cannot confirm that the claim's instance is gone");
                    continue;
                }
            }
            tracing::warn!(claim = %name, "the claim's instance is gone; the claim is deleted");
            match self.api.delete_node_claim(&name).await {
                Ok(()) => lost.push(name),
                Err(e) => {
                    tracing::warn!(claim = %name, error = %e, "deleting the claim of a gone instance failed")
                }
            }
        }
        Ok(lost)
    }

    /// Applies `change` to the claim's current status
    /// ([`KubeApi::update_node_claim_status`]).
    async fn update_status(
        &self,
        claim: &NodeClaim,
        change: impl Fn(&mut NodeClaimStatus) -> bool,
    ) -> Result<()> {
        let name = claim.name_any();
        self.api
            .update_node_claim_status(claim, change)
            .await
            .map_err(kube_err(&name, "recording the status"))
    }

    fn count_failure(&self, claim: &NodeClaim, reason: &str) {
        self.metrics
            .launch_failures
            .get_or_create(&LaunchFailureLabels {
                nodepool: claim.spec.node_pool.clone(),
                reason: reason.to_string(),
            })
            .inc();
    }

    async fn launch(&self, claim: &NodeClaim, now: Time) -> Result<Step> {
        let name = claim.name_any();
        let req = request_of(claim);
        let template = template_of(claim);
        self.launches.started(&name);
        let launched = self.cloud.launch(&req, &template, now).await;
        self.launches.finished(
            &name,
            launched.as_ref().ok(),
            matches!(launched, Err(cloud::Error::NotReady { .. })),
            now,
        );
        match launched {
            Ok(instance) => {
                let message = if instance.offering == req.offering {
                    format!("launched {} as {}", instance.provider_id, instance.offering)
                } else {
                    format!(
                        "launched {} as {} (fallback from {})",
                        instance.provider_id, instance.offering, req.offering
                    )
                };
                // What it was launched with, for drift.
                let stamp = self.cloud.launch_stamp(&claim.spec);
                self.update_status(claim, |status| {
                    status.provider_id = Some(instance.provider_id.clone());
                    if let Some(stamp) = &stamp {
                        status.image_id = Some(stamp.image.clone());
                        status.node_class_hash = Some(stamp.hash.clone());
                    }
                    set_condition(
                        status,
                        conditions::LAUNCHED,
                        true,
                        "Launched",
                        &message,
                        now,
                    );
                    true
                })
                .await?;
                tracing::info!(claim = %name, "{message}");
                Ok(Step::Launched(instance))
            }
            Err(e) => {
                let timed_out = older_than(created(claim, now), now, self.launch_timeout);
                let reason = if matches!(e, cloud::Error::NotReady { .. }) && timed_out {
                    "launch-timeout".to_string()
                } else {
                    error_code(&e)
                };
                let message = e.to_string();
                let failed = |status: &mut NodeClaimStatus| {
                    if status.provider_id.is_some() {
                        // Recorded launched meanwhile (another replica).
                        return false;
                    }
                    set_condition(status, conditions::LAUNCHED, false, &reason, &message, now);
                    true
                };
                if matches!(e, cloud::Error::NotReady { .. }) && !timed_out {
                    tracing::info!(claim = %name, error = %e, "launch not possible yet");
                    self.update_status(claim, failed).await?;
                    return Ok(Step::Waiting("launch"));
                }
                tracing::warn!(claim = %name, error = %e, %reason, "launch failed; the claim is deleted and its pods re-planned");
                self.count_failure(claim, &reason);
                self.update_status(claim, failed).await?;
                self.api
                    .delete_node_claim(&name)
                    .await
                    .map_err(kube_err(&name, "deleting the failed claim"))?;
                Ok(Step::LaunchFailed {
                    reason,
                    notice: e.notice(),
                })
            }
        }
    }

    /// Refuses an invalid claim: `Launched=False` (reason
    /// [`INVALID_REASON`], the problems as the message), counted, and the
    /// claim deleted (its finalizer terminates an instance launched before
    /// the check), so that its pods are planned again.
    async fn refuse(
        &self,
        claim: &NodeClaim,
        problems: &[crate::api::FieldError],
        now: Time,
    ) -> Result<Step> {
        let name = claim.name_any();
        let message = problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        tracing::warn!(claim = %name, %message, "invalid NodeClaim: not launched, deleted");
        self.count_failure(claim, INVALID_REASON);
        self.update_status(claim, |status| {
            set_condition(
                status,
                conditions::LAUNCHED,
                false,
                INVALID_REASON,
                &message,
                now,
            );
            true
        })
        .await?;
        self.api
            .delete_node_claim(&name)
            .await
            .map_err(kube_err(&name, "deleting the invalid claim"))?;
        Ok(Step::LaunchFailed {
            reason: INVALID_REASON.to_string(),
            notice: None,
        })
    }

    async fn register(&self, view: &ClaimView, status: NodeClaimStatus, now: Time) -> Result<Step> {
        let claim = &view.claim;
        let name = claim.name_any();
        let Some(node) = &view.node else {
            let since = condition_time(&status, conditions::LAUNCHED)
                .unwrap_or_else(|| created(claim, now));
            if older_than(since, now, self.registration_timeout) {
                tracing::warn!(claim = %name, "node did not register in time; the claim is deleted");
                self.count_failure(claim, "registration-timeout");
                self.api
                    .delete_node_claim(&name)
                    .await
                    .map_err(kube_err(&name, "deleting the unregistered claim"))?;
                return Ok(Step::TimedOut("registration-timeout"));
            }
            return Ok(Step::Waiting("registration"));
        };
        // Label by the offering actually bought (a fallback may have been
        // used) and by where the instance sits in the network.
        let instance = self
            .cloud
            .describe(&name)
            .await
            .map_err(cloud_err(&name, "describing the instance"))?;
        let network = match instance.as_ref().filter(|i| i.state.is_alive()) {
            Some(i) => match self.cloud.network_nodes(&name, i).await {
                Ok(nodes) => nodes,
                Err(e) if e.is_retryable() => {
                    return Err(cloud_err(&name, "describing the instance's topology")(e))
                }
                Err(e) => {
                    tracing::warn!(claim = %name, error = %e, "network topology not known: the node is registered without its labels");
                    Vec::new()
                }
            },
            None => Vec::new(),
        };
        let actual = instance
            .map(|i| i.offering)
            .filter(|o| o.zone != claim.spec.zone || o.capacity_type != claim.spec.capacity_type);
        let labels = node_labels(claim, actual.as_ref(), self.catalog.zone_names(), &network);
        self.api
            .patch_node(node, &registered_change(claim, labels))
            .await
            .map_err(kube_err(&name, "labelling and tainting the node"))?;
        let message = format!("node {} registered", node.name);
        self.update_status(claim, |status| {
            status.node_name = Some(node.name.clone());
            set_condition(
                status,
                conditions::REGISTERED,
                true,
                "Registered",
                &message,
                now,
            );
            true
        })
        .await?;
        tracing::info!(claim = %name, node = %node.name, "registered");
        Ok(Step::Registered {
            node: node.name.clone(),
        })
    }

    async fn initialize(
        &self,
        view: &ClaimView,
        status: NodeClaimStatus,
        now: Time,
    ) -> Result<Step> {
        let claim = &view.claim;
        let name = claim.name_any();
        let Some(node) = &view.node else {
            tracing::warn!(claim = %name, "the claim's node is gone; the claim is deleted");
            self.api
                .delete_node_claim(&name)
                .await
                .map_err(kube_err(&name, "deleting the claim of a vanished node"))?;
            return Ok(Step::TimedOut("node-gone"));
        };
        if !is_initialized(node, claim) {
            let since = condition_time(&status, conditions::REGISTERED)
                .unwrap_or_else(|| created(claim, now));
            if older_than(since, now, self.registration_timeout) {
                tracing::warn!(claim = %name, node = %node.name, "node not initialized in time; the claim is deleted");
                self.count_failure(claim, "initialization-timeout");
                self.api
                    .delete_node_claim(&name)
                    .await
                    .map_err(kube_err(&name, "deleting the uninitialized claim"))?;
                return Ok(Step::TimedOut("initialization-timeout"));
            }
            return Ok(Step::Waiting("initialization"));
        }
        let message = format!("node {} is ready with its accelerators", node.name);
        let allocatable: BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> =
            node.allocatable
                .iter()
                .map(|(k, v)| {
                    let q = if k == crate::cluster::resources::CPU {
                        format!("{v}m")
                    } else {
                        v.to_string()
                    };
                    (
                        k.to_string(),
                        k8s_openapi::apimachinery::pkg::api::resource::Quantity(q),
                    )
                })
                .collect();
        self.update_status(claim, |status| {
            set_condition(
                status,
                conditions::INITIALIZED,
                true,
                "Initialized",
                &message,
                now,
            );
            set_condition(status, conditions::READY, true, "Ready", &message, now);
            status.allocatable = allocatable.clone();
            true
        })
        .await?;
        tracing::info!(claim = %name, node = %node.name, "initialized");
        Ok(Step::Initialized {
            node: node.name.clone(),
        })
    }

    /// One step of the drain of a claim being deleted, as
    /// [`termination::plan`] has it: checkpoint requests first (annotation
    /// and hook), evictions (PDB-aware) of pods that acknowledged, waited
    /// long enough or never checkpoint, do-not-disrupt pods left alone,
    /// and, once the claim's `terminationGracePeriod` requires it, pods
    /// deleted early enough to finish their own grace period by its
    /// deadline. A failed eviction, deletion or request does not stop the
    /// others; each is named on the claim's `Drained` condition and retried.
    /// `None`: the node is empty, or the claim's deadline has come, and the
    /// instance may be terminated.
    async fn drain(&self, view: &ClaimView, node: &NodeInfo, now: Time) -> Result<Option<Step>> {
        let claim = &view.claim;
        let name = claim.name_any();
        let policy = self.policies.get(&claim.spec.node_pool);
        let hook = policy.is_some_and(|p| p.checkpoint_hook.is_some());
        let deletion = deletion(claim, policy, now);
        // A pod terminating on an unreachable node long past its grace
        // period is gone as far as the drain goes: no kubelet will ever
        // confirm it.
        let pods: Vec<&PodInfo> = view
            .pods
            .iter()
            .filter(|p| !p.daemon && !p.is_stuck_terminating(node, now))
            .collect();
        let acks: std::collections::HashMap<String, Time> =
            self.hook_acks.lock().map(|a| a.clone()).unwrap_or_default();
        let planned: Vec<DrainPod> = pods
            .iter()
            .map(|p| drain_pod(p, hook, acks.get(&p.key()).copied(), deletion.started))
            .collect();
        let plan = termination::plan(&deletion, &planned, now);
        let (mut evicted, mut blocked, mut deleted) = (0, 0, Vec::new());
        let mut failures = Vec::new();
        let mut remaining = 0;
        for (p, (_, step)) in pods.iter().zip(&plan.pods) {
            match step {
                PodStep::Wait => remaining += 1,
                PodStep::RequestCheckpoint { deadline } => {
                    remaining += 1;
                    let request = CheckpointRequest {
                        namespace: p.namespace.to_string(),
                        name: p.name.to_string(),
                        node: node.name.clone(),
                        deadline: *deadline,
                        reason: "node claim deleted".into(),
                    };
                    match checkpoint::signal(
                        self.api,
                        self.hooks,
                        self.hook_acks,
                        self.metrics,
                        &request,
                        Some(p),
                        policy,
                    )
                    .await
                    {
                        Ok(refused) => {
                            tracing::info!(claim = %name, pod = %p.key(), deadline = %deadline, "checkpoint requested before the drain");
                            if let Some(e) = refused {
                                tracing::warn!(pod = %p.key(), error = %e, "checkpoint hook unusable; annotation only");
                            }
                        }
                        Err(e) => {
                            failures.push(format!("requesting a checkpoint of {}: {e}", p.key()))
                        }
                    }
                }
                PodStep::Evict => match self.api.evict(&p.namespace, &p.name).await {
                    Ok(Eviction::Evicted) => {
                        evicted += 1;
                        remaining += 1;
                    }
                    Ok(Eviction::Blocked) => {
                        blocked += 1;
                        remaining += 1;
                    }
                    Ok(Eviction::Gone) => {}
                    Err(e) => {
                        tracing::warn!(claim = %name, pod = %p.key(), error = %e, "eviction failed; trying the other pods");
                        failures.push(format!("evicting {}: {e}", p.key()));
                        remaining += 1;
                    }
                },
                PodStep::Delete => {
                    remaining += 1;
                    match self.api.delete_pod(&p.namespace, &p.name).await {
                        Ok(()) => deleted.push(p.key()),
                        Err(e) => failures.push(format!("deleting {}: {e}", p.key())),
                    }
                }
            }
        }
        if !failures.is_empty() {
            self.record_drain(claim, "EvictionFailed", &failures.join("; "), now)
                .await?;
        } else if !deleted.is_empty() {
            let grace = claim.spec.termination_grace_period.as_deref().unwrap_or("");
            let message = format!(
                "terminationGracePeriod {grace} ends at {}: {} pod(s) deleted to finish by then ({})",
                deletion
                    .deadline()
                    .map(super::checkpoint::rfc3339)
                    .unwrap_or_default(),
                deleted.len(),
                deleted.join(", ")
            );
            tracing::warn!(claim = %name, node = %node.name, "{message}");
            self.record_drain(claim, "GracePeriodElapsed", &message, now)
                .await?;
        }
        if plan.terminate {
            if !pods.is_empty() {
                tracing::warn!(claim = %name, node = %node.name, pods = pods.len(), "terminationGracePeriod over: the instance is terminated with pods left");
            }
            return Ok(None);
        }
        Ok(Some(Step::Draining {
            evicted,
            blocked,
            failed: failures.len(),
            remaining,
            until: plan.next,
        }))
    }

    /// Records a drain problem on the claim's `Drained` condition (unless it
    /// says so already).
    async fn record_drain(
        &self,
        claim: &NodeClaim,
        reason: &str,
        message: &str,
        now: Time,
    ) -> Result<()> {
        self.update_status(claim, |status| {
            if status
                .condition(conditions::DRAINED)
                .is_some_and(|c| c.reason == reason && c.message == message)
            {
                return false;
            }
            set_condition(status, conditions::DRAINED, false, reason, message, now);
            true
        })
        .await
    }

    async fn finalize(&self, view: &ClaimView, now: Time) -> Result<Step> {
        let claim = &view.claim;
        let name = claim.name_any();
        if !claim.finalizers().iter().any(|f| f == l::FINALIZER) {
            return Ok(Step::Idle);
        }
        let alive = self
            .cloud
            .describe(&name)
            .await
            .map_err(cloud_err(&name, "describing the instance"))?
            .is_some_and(|i| i.state.is_alive());
        if let (Some(node), true) = (&view.node, alive) {
            if !node.unschedulable || !node.has_taint(l::TAINT_DISRUPTED) {
                self.api
                    .patch_node(node, &NodeChange::cordon())
                    .await
                    .map_err(kube_err(&name, "cordoning the node"))?;
            }
            if let Some(step) = self.drain(view, node, now).await? {
                return Ok(step);
            }
        }
        match self.cloud.terminate(&name, now).await {
            Ok(_) | Err(cloud::Error::NotFound { .. }) => {}
            Err(e) => return Err(cloud_err(&name, "terminating the instance")(e)),
        }
        if let Some(node) = &view.node {
            self.api
                .delete_node(&node.name)
                .await
                .map_err(kube_err(&name, "deleting the node"))?;
        }
        self.api
            .remove_finalizer(claim)
            .await
            .map_err(kube_err(&name, "removing the finalizer"))?;
        self.metrics.karpenter.terminated(claim);
        tracing::info!(claim = %name, "terminated and finalized");
        Ok(Step::Finalized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_come_from_the_message_or_the_class() {
        let ice = cloud::Error::InsufficientCapacity {
            claim: "c".into(),
            offering: OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::Spot,
            },
            code: "UnfulfillableCapacity".into(),
        };
        assert_eq!(error_code(&ice), "UnfulfillableCapacity");
        assert_eq!(
            error_code(&cloud::Error::Other(
                "CreateFleet for gpu-1: CreateFleet failed with InvalidParameterValue: bad AMI"
                    .into()
            )),
            "InvalidParameterValue"
        );
        assert_eq!(
            error_code(&cloud::Error::Other("cannot launch x: not offered".into())),
            "LaunchFailed"
        );
        assert_eq!(
            error_code(&cloud::Error::NotReady {
                claim: "c".into(),
                reason: "throttled".into()
            }),
            "NotReady"
        );
    }

    #[test]
    fn fallbacks_round_trip_through_the_annotation_and_bad_entries_are_skipped() {
        let keys = vec![
            OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone: "use1-az2".into(),
                capacity_type: CapacityType::Spot,
            },
            OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone: "use1-az4".into(),
                capacity_type: CapacityType::OnDemand,
            },
        ];
        let text = format_fallbacks(&keys);
        assert_eq!(parse_fallbacks(&text), keys);
        assert_eq!(
            parse_fallbacks("g5.xlarge/use1-az2/spot,garbage,a/b/notatype"),
            keys[..1]
        );
    }

    #[test]
    fn a_fallback_launch_is_labelled_by_the_offering_actually_bought() {
        let mut claim = NodeClaim::new(
            "gpu-1",
            crate::api::NodeClaimSpec {
                node_pool: "gpu".into(),
                instance_type: "g5.xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::Spot,
                price_per_hour: 0.4,
                resources: BTreeMap::new(),
                labels: [
                    (l::REGION.to_string(), "us-east-1".to_string()),
                    (l::ZONE_ID.to_string(), "use1-az1".to_string()),
                    (l::ZONE.to_string(), "us-east-1b".to_string()),
                    (l::CAPACITY_TYPE.to_string(), "spot".to_string()),
                    (l::NODEPOOL.to_string(), "gpu".to_string()),
                ]
                .into(),
                taints: vec![],
                startup_taints: vec![],
                termination_grace_period: None,
                expire_after: None,
            },
        );
        claim.metadata.annotations = Some(
            [(
                FALLBACKS_ANNOTATION.to_string(),
                "g5.xlarge/use1-az2/spot".to_string(),
            )]
            .into(),
        );
        // The account's names (moto's): use1-az1 is us-east-1b, use1-az2
        // us-east-1c.
        let zones = ZoneNames::new().with_region(
            "us-east-1",
            [
                ("us-east-1b".to_string(), "use1-az1".to_string()),
                ("us-east-1c".to_string(), "use1-az2".to_string()),
            ],
        );
        assert_eq!(node_labels(&claim, None, &zones, &[]), claim.spec.labels);
        let actual = OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "use1-az2".into(),
            capacity_type: CapacityType::Spot,
        };
        let labels = node_labels(&claim, Some(&actual), &zones, &[]);
        assert_eq!(labels[l::ZONE_ID], "use1-az2");
        assert_eq!(labels[l::ZONE], "us-east-1c");
        assert_eq!(labels[l::NODEPOOL], "gpu");
        assert_eq!(template_of(&claim).fallbacks, [actual]);
        let network = ["nn-a".to_string(), "nn-b".into(), "nn-c".into()];
        let labels = node_labels(&claim, None, &zones, &network);
        for (layer, nn) in [(1, "nn-a"), (2, "nn-b"), (3, "nn-c")] {
            assert_eq!(labels[&l::network_node_layer(layer)], nn);
        }
        assert!(!labels.contains_key(&l::network_node_layer(4)));
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        use chrono::TimeZone;
        let t0 = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let t1 = t0 + chrono::TimeDelta::seconds(60);
        let mut s = NodeClaimStatus::default();
        set_condition(&mut s, conditions::LAUNCHED, false, "NotReady", "a", t0);
        set_condition(&mut s, conditions::LAUNCHED, false, "NotReady", "b", t1);
        assert_eq!(condition_time(&s, conditions::LAUNCHED), Some(t0));
        set_condition(&mut s, conditions::LAUNCHED, true, "Launched", "c", t1);
        assert_eq!(condition_time(&s, conditions::LAUNCHED), Some(t1));
        assert!(s.is_true(conditions::LAUNCHED));
        assert_eq!(s.conditions.len(), 1);
    }
}
