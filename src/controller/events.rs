//! Kubernetes Events (events.k8s.io/v1) that tell users what Quartermaster
//! did and why, where `kubectl describe` shows them: on pods (why they
//! cannot be placed, what was launched for them, checkpoint requests,
//! evictions) and on NodePools (failed launches, failed validation, limits
//! reached). Written through kube-runtime's [`Recorder`], which folds
//! repeats into one Event's series; one recorder per distinct note, so that
//! only true repeats fold (see [`Events`]).
//!
//! Events are best-effort: the reporting methods log a failure and carry
//! on; nothing the controller does depends on them.

use crate::api::labels::GROUP;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `reportingController` of our Events.
pub const CONTROLLER: &str = "quartermaster.dev/controller";

/// Reasons of our Events (short, PascalCase; what `kubectl get events`
/// shows in its REASON column).
pub mod reasons {
    /// A pod could not be placed on any node the pools may launch.
    pub const NOT_PLACEABLE: &str = "NotPlaceable";
    /// A node (NodeClaim) was launched for the pod.
    pub const NOMINATED: &str = "Nominated";
    /// The pod was asked to checkpoint.
    pub const CHECKPOINT_REQUESTED: &str = "CheckpointRequested";
    /// The pod's checkpoint hook was not called (the annotation was still
    /// written).
    pub const CHECKPOINT_HOOK_REFUSED: &str = "CheckpointHookRefused";
    /// The pod was left for a later batch (the batch cap).
    pub const BATCH_DEFERRED: &str = "BatchDeferred";
    /// The pod was evicted from a node being disrupted.
    pub const EVICTED: &str = "Evicted";
    /// A launch for the pool failed.
    pub const LAUNCH_FAILED: &str = "LaunchFailed";
    /// The pool failed validation.
    pub const VALIDATION_FAILED: &str = "ValidationFailed";
    /// The pool reached one of its limits.
    pub const LIMIT_REACHED: &str = "LimitReached";
    /// The pool's EC2NodeClass is missing or did not resolve.
    pub const NODE_CLASS_NOT_READY: &str = "NodeClassNotReady";
    /// An annotation of the pod does not parse: the pod is not placed,
    /// and its node is not consolidated, until it is fixed.
    pub const ANNOTATION_UNREADABLE: &str = "AnnotationUnreadable";
    /// The NodeClaim no longer matches its pool or node class.
    pub const DRIFTED: &str = "Drifted";
    /// Repair rebooted the NodeClaim's instance.
    pub const REBOOTED: &str = "Rebooted";
    /// The cloud did not reboot the instance repair asked it to.
    pub const REBOOT_FAILED: &str = "RebootFailed";
    /// Repair replaces the NodeClaim's node (unhealthy, or still unhealthy
    /// after a reboot).
    pub const UNHEALTHY: &str = "Unhealthy";
    /// A repair the NodeClaim's node is due for is held (do-not-repair,
    /// the breaker, do-not-disrupt, the budgets).
    pub const REPAIR_HELD: &str = "RepairHeld";
    /// The pod's GPUs were busy less than the threshold over the read
    /// window (DCGM).
    pub const GPU_UNDERUSED: &str = "GPUUnderused";
    // On a ProvisioningRequest, the Event's reason is the condition's reason
    // (`CapacityIsProvisioned`, `CapacityIsNotFound`, ...), as set.
}

/// Longest Event note the API accepts (1 kB).
const MAX_NOTE: usize = 1024;

/// How long kube's recorder keeps an Event to fold repeats into (its
/// cache's time to live): a note unused for longer needs no recorder.
const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);

/// Publishes our Events.
///
/// kube-runtime's recorder folds every Event with the same type, reason and
/// action about the same object within six minutes into one series and
/// keeps the first note: its key has no note, where client-go's has. A
/// NodePool's second `LaunchFailed` with another error, or a pod's
/// `NotPlaceable` whose reason changed, would show the old message twice.
/// So each distinct note gets its own recorder: repeats of one note fold,
/// a new note is a new Event.
#[derive(Clone)]
pub struct Events {
    client: Client,
    reporter: Reporter,
    /// Recorder of each note published within [`SERIES_WINDOW`], with when
    /// it was last used.
    recorders: Arc<Mutex<HashMap<String, (Recorder, Instant)>>>,
}

/// A reference to the pod `namespace/name` (a bare name means `default`),
/// with its UID when known (Events then follow that pod, not a namesake).
pub fn pod_ref(pod: &str, uid: Option<&str>) -> ObjectReference {
    namespaced_ref("v1", "Pod", pod, uid)
}

/// A reference to the namespaced object `namespace/name` (a bare name
/// means `default`).
fn namespaced_ref(api_version: &str, kind: &str, key: &str, uid: Option<&str>) -> ObjectReference {
    let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid: uid.map(str::to_string),
        ..ObjectReference::default()
    }
}

/// A reference to the ProvisioningRequest `namespace/name`.
pub fn provisioning_request_ref(request: &str, uid: Option<&str>) -> ObjectReference {
    namespaced_ref(
        "autoscaling.x-k8s.io/v1",
        "ProvisioningRequest",
        request,
        uid,
    )
}

/// A reference to the CapacityBuffer `namespace/name`.
pub fn capacity_buffer_ref(buffer: &str, uid: Option<&str>) -> ObjectReference {
    namespaced_ref(
        "autoscaling.x-k8s.io/v1beta1",
        "CapacityBuffer",
        buffer,
        uid,
    )
}

/// A reference to a NodePool.
pub fn node_pool_ref(name: &str, uid: Option<&str>) -> ObjectReference {
    cluster_ref("NodePool", name, uid)
}

/// A reference to a NodeClaim.
pub fn node_claim_ref(name: &str, uid: Option<&str>) -> ObjectReference {
    cluster_ref("NodeClaim", name, uid)
}

fn cluster_ref(kind: &str, name: &str, uid: Option<&str>) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{GROUP}/v1alpha1")),
        kind: Some(kind.into()),
        name: Some(name.into()),
        uid: uid.map(str::to_string),
        ..ObjectReference::default()
    }
}

/// `note` cut to the API's 1 kB, on a character boundary.
fn bounded(note: String) -> String {
    if note.len() <= MAX_NOTE {
        return note;
    }
    let mut end = MAX_NOTE - '…'.len_utf8();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &note[..end])
}

impl Events {
    /// Events reported by `instance` (the pod name of this replica, when
    /// known) of [`CONTROLLER`], over `client`.
    pub fn new(client: Client, instance: Option<String>) -> Events {
        let reporter = Reporter {
            controller: CONTROLLER.into(),
            instance,
        };
        Events {
            client,
            reporter,
            recorders: Arc::default(),
        }
    }

    /// The recorder of `note`: the one its earlier Events went through
    /// (so a repeat folds into their series), or a new one. Recorders of
    /// notes unused for [`SERIES_WINDOW`] are dropped.
    fn recorder_for(&self, note: &str) -> Recorder {
        let now = Instant::now();
        let mut recorders = self
            .recorders
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        recorders.retain(|_, (_, used)| now.duration_since(*used) < SERIES_WINDOW);
        let (recorder, used) = recorders.entry(note.to_string()).or_insert_with(|| {
            (
                Recorder::new(self.client.clone(), self.reporter.clone()),
                now,
            )
        });
        *used = now;
        recorder.clone()
    }

    /// Publishes one Event about `regarding`.
    ///
    /// # Errors
    /// The API error when the Event is rejected.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
        related: Option<ObjectReference>,
    ) -> kube::Result<()> {
        let note = bounded(note);
        let recorder = self.recorder_for(&note);
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: related,
        };
        recorder.publish(&event, regarding).await
    }

    /// [`Events::publish`], logging a failure instead of returning it.
    async fn report(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
        related: Option<ObjectReference>,
    ) {
        if let Err(error) = self
            .publish(regarding, type_, reason, action, note, related)
            .await
        {
            tracing::warn!(
                kind = regarding.kind.as_deref().unwrap_or_default(),
                name = regarding.name.as_deref().unwrap_or_default(),
                reason,
                %error,
                "failed to publish Event"
            );
        }
    }

    /// On a ProvisioningRequest: a condition was set (a `Failed` or
    /// `CapacityRevoked` one is a warning). The reason is the condition's.
    pub async fn provisioning_request(
        &self,
        request: &ObjectReference,
        condition: &str,
        status: bool,
        reason: &'static str,
        message: &str,
    ) {
        let bad = status && (condition == "Failed" || condition == "CapacityRevoked");
        self.report(
            request,
            if bad {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason,
            "Provision",
            format!(
                "{condition}={}: {message}",
                if status { "True" } else { "False" }
            ),
            None,
        )
        .await
    }

    /// On a CapacityBuffer: it became `Infeasible` (no pool can hold its
    /// chunks, or what it names is missing or unreadable). The reason is
    /// the condition's (`NotPlaceable`, `ScalableRefNotFound`, ...).
    pub async fn buffer_infeasible(
        &self,
        buffer: &ObjectReference,
        reason: &'static str,
        message: &str,
    ) {
        self.report(
            buffer,
            EventType::Warning,
            reason,
            "Provision",
            format!("Infeasible: {message}"),
            None,
        )
        .await
    }

    /// On a pod: it cannot be placed, and why (the planner's explanation).
    pub async fn not_placeable(&self, pod: &ObjectReference, explanation: &str) {
        self.report(
            pod,
            EventType::Warning,
            reasons::NOT_PLACEABLE,
            "Plan",
            format!("Quartermaster cannot place the pod: {explanation}"),
            None,
        )
        .await
    }

    /// On a pod: annotations that do not parse. The pod is not placed as
    /// though they were absent, and its node is kept out of consolidation,
    /// until they are fixed.
    pub async fn annotation_unreadable(&self, pod: &ObjectReference, problems: &[String]) {
        self.report(
            pod,
            EventType::Warning,
            reasons::ANNOTATION_UNREADABLE,
            "Read",
            format!(
                "cannot be read (the pod is not placed, and its node is not consolidated, until it is fixed): {}",
                problems.join("; ")
            ),
            None,
        )
        .await
    }

    /// On a pod: the claim (and what it launches) that will hold it.
    pub async fn nominated(&self, pod: &ObjectReference, claim: &str, offering: &str) {
        self.report(
            pod,
            EventType::Normal,
            reasons::NOMINATED,
            "Launch",
            format!("launched NodeClaim {claim} ({offering}) for the pod"),
            Some(node_claim_ref(claim, None)),
        )
        .await
    }

    /// On a pod: it was asked to checkpoint (`why`: the node's disruption).
    /// The note leaves the deadline to the pod's
    /// `quartermaster.dev/checkpoint-requested` annotation: kube's recorder
    /// merges a pod's requests within six minutes into one Event with a
    /// series count and keeps the first note, so a deadline in it would
    /// go stale as a checkpoint cadence asks again.
    pub async fn checkpoint_requested(&self, pod: &ObjectReference, claim: &str, why: &str) {
        self.report(
            pod,
            EventType::Normal,
            reasons::CHECKPOINT_REQUESTED,
            "RequestCheckpoint",
            format!(
                "checkpoint requested ({why}); the deadline is in the pod's {} annotation",
                crate::labels::CHECKPOINT_REQUESTED
            ),
            Some(node_claim_ref(claim, None)),
        )
        .await
    }

    /// On a pod: its checkpoint hook was not called, and why (the pool did
    /// not opt in, host network, a forbidden address, an undeclared port,
    /// a malformed hook); the annotation still asks it to checkpoint.
    pub async fn checkpoint_hook_refused(&self, pod: &ObjectReference, why: &str) {
        self.report(
            pod,
            EventType::Warning,
            reasons::CHECKPOINT_HOOK_REFUSED,
            "RequestCheckpoint",
            format!("{why}; the checkpoint is requested through the annotation only"),
            None,
        )
        .await
    }

    /// On a pod: the batch cap left it for a later plan, and why.
    pub async fn batch_deferred(&self, pod: &ObjectReference, why: &str) {
        self.report(
            pod,
            EventType::Warning,
            reasons::BATCH_DEFERRED,
            "Plan",
            why.to_string(),
            None,
        )
        .await
    }

    /// On a pod: it was evicted from the claim's node.
    pub async fn evicted(&self, pod: &ObjectReference, claim: &str, why: &str) {
        self.report(
            pod,
            EventType::Normal,
            reasons::EVICTED,
            "Evict",
            format!("evicted from NodeClaim {claim} ({why})"),
            Some(node_claim_ref(claim, None)),
        )
        .await
    }

    /// On a NodePool: launching `claim` failed with the provider's error
    /// code (`InsufficientInstanceCapacity`, ...).
    pub async fn launch_failed(
        &self,
        pool: &ObjectReference,
        claim: &str,
        code: &str,
        message: &str,
    ) {
        self.report(
            pool,
            EventType::Warning,
            reasons::LAUNCH_FAILED,
            "Launch",
            format!("launching NodeClaim {claim} failed: {code}: {message}"),
            Some(node_claim_ref(claim, None)),
        )
        .await
    }

    /// On a NodePool: it failed validation (the first problem).
    pub async fn validation_failed(&self, pool: &ObjectReference, problem: &str) {
        self.report(
            pool,
            EventType::Warning,
            reasons::VALIDATION_FAILED,
            "Validate",
            format!("the NodePool is invalid and launches nothing: {problem}"),
            None,
        )
        .await
    }

    /// On a NodePool: its EC2NodeClass is missing or not Ready, so it
    /// launches nothing (`why` names the class and its reason).
    pub async fn node_class_not_ready(&self, pool: &ObjectReference, why: &str) {
        self.report(
            pool,
            EventType::Warning,
            reasons::NODE_CLASS_NOT_READY,
            "Launch",
            format!("the NodePool launches nothing: {why}"),
            None,
        )
        .await
    }

    /// On a NodeClaim: it drifted (`why` says what changed) and its node is
    /// replaced within the pool's disruption budget.
    pub async fn drifted(&self, claim: &ObjectReference, why: &str) {
        self.report(
            claim,
            EventType::Normal,
            reasons::DRIFTED,
            "Replace",
            format!("{why}: the node is replaced within the pool's disruption budget"),
            None,
        )
        .await
    }

    /// On a NodeClaim: repair rebooted its instance for `condition`.
    pub async fn rebooted(&self, claim: &ObjectReference, condition: &str) {
        self.report(
            claim,
            EventType::Normal,
            reasons::REBOOTED,
            "Repair",
            format!("unhealthy ({condition}): instance rebooted; replaced if still unhealthy after the pool's rebootTimeout"),
            None,
        )
        .await
    }

    /// On a NodeClaim: the cloud did not reboot its instance (`why`).
    pub async fn reboot_failed(&self, claim: &ObjectReference, why: &str) {
        self.report(
            claim,
            EventType::Warning,
            reasons::REBOOT_FAILED,
            "Repair",
            format!("reboot failed: {why}"),
            None,
        )
        .await
    }

    /// On a NodeClaim: its node is replaced for `condition` (`escalated`:
    /// a reboot did not help).
    pub async fn unhealthy(&self, claim: &ObjectReference, condition: &str, escalated: bool) {
        let why = if escalated {
            "still unhealthy after a reboot"
        } else {
            "unhealthy"
        };
        self.report(
            claim,
            EventType::Warning,
            reasons::UNHEALTHY,
            "Repair",
            format!("{why} ({condition}): the node is replaced"),
            None,
        )
        .await
    }

    /// On a NodeClaim: a repair it is due for is held (`why`).
    pub async fn repair_held(&self, claim: &ObjectReference, condition: &str, why: &str) {
        self.report(
            claim,
            EventType::Warning,
            reasons::REPAIR_HELD,
            "Repair",
            format!("unhealthy ({condition}), repair held: {why}"),
            None,
        )
        .await
    }

    /// On a pod: its GPUs are under-used (`note` says how much, over what).
    pub async fn gpu_underused(&self, pod: &ObjectReference, note: &str) {
        self.report(
            pod,
            EventType::Warning,
            reasons::GPU_UNDERUSED,
            "Measure",
            note.to_string(),
            None,
        )
        .await
    }

    /// On a NodePool: a limit held back launches (`detail` names the
    /// resource, e.g. `nvidia.com/gpu: 64 of 64 in use`).
    pub async fn limit_reached(&self, pool: &ObjectReference, detail: &str) {
        self.report(
            pool,
            EventType::Warning,
            reasons::LIMIT_REACHED,
            "Launch",
            format!("limit reached, launches held back: {detail}"),
            None,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_references_split_namespace_and_name() {
        let r = pod_ref("ml/trainer-0", Some("uid-1"));
        assert_eq!(r.namespace.as_deref(), Some("ml"));
        assert_eq!(r.name.as_deref(), Some("trainer-0"));
        assert_eq!(r.uid.as_deref(), Some("uid-1"));
        assert_eq!(
            pod_ref("lonely", None).namespace.as_deref(),
            Some("default")
        );
        let pool = node_pool_ref("train", None);
        assert_eq!(
            pool.api_version.as_deref(),
            Some("quartermaster.dev/v1alpha1")
        );
        assert_eq!(pool.namespace, None);
    }

    #[test]
    fn long_notes_are_cut_to_the_api_limit_on_a_character_boundary() {
        let short = "fits".to_string();
        assert_eq!(bounded(short.clone()), short);
        let long = "é".repeat(MAX_NOTE);
        let cut = bounded(long);
        assert!(cut.len() <= MAX_NOTE, "{}", cut.len());
        assert!(cut.ends_with('…'));
    }
}
