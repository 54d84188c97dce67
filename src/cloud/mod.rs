//! The seam between deciding and launching: the [`CloudProvider`] trait, the
//! [`Instance`] it reports and the [`Error`] it classifies failures into.
//! Implemented by [`simulated`] (virtual time, seeded randomness) and by
//! [`aws`] (aws-sdk-ec2), where all EC2 error-code mapping lives. What to
//! launch and when is decided in `core`; nothing here decides.
//!
//! Notices about instances that a cloud delivers on its own (spot
//! interruptions, rebalance recommendations, state changes) arrive as
//! [`InstanceNotice`]s keyed by instance ID; the driver maps the instance to
//! its NodeClaim and hands the core a [`Notice`].

pub mod aws;
pub mod simulated;

use crate::core::{ClaimRequest, Notice, OfferingKey, Time};
use std::fmt;
use std::future::Future;

/// Lifecycle state of an instance, as EC2 names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InstanceState {
    /// Launched, still booting.
    Pending,
    /// Booted; the node may not have registered yet.
    Running,
    /// Termination requested and under way; no longer billed.
    ShuttingDown,
    /// Stopped or stopping (someone stopped it, or EC2 did for a scheduled
    /// stop): not usable, but it keeps its volumes and addresses until it
    /// is terminated; garbage collection terminates one without a claim.
    Stopped,
    /// Gone.
    Terminated,
}

impl InstanceState {
    /// The EC2 name (`pending`, `running`, `shutting-down`, `terminated`).
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Running => "running",
            InstanceState::ShuttingDown => "shutting-down",
            InstanceState::Stopped => "stopped",
            InstanceState::Terminated => "terminated",
        }
    }

    /// Pending or running: the instance exists and is (or will be) usable.
    pub fn is_alive(self) -> bool {
        matches!(self, InstanceState::Pending | InstanceState::Running)
    }
}

impl fmt::Display for InstanceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An instance launched for a NodeClaim, as the provider sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// NodeClaim name (the instance carries it as an ownership tag).
    pub claim: String,
    /// Kubernetes `spec.providerID` of the node, e.g.
    /// `aws:///use1-az4/i-0123456789abcdef0`.
    pub provider_id: String,
    /// What was bought.
    pub offering: OfferingKey,
    /// USD per hour at launch (spot is billed at the pool's price as it
    /// changes; this field is not updated).
    pub price_per_hour: f64,
    /// When the launch was accepted.
    pub launched_at: Time,
    /// Where the instance is in its life.
    pub state: InstanceState,
}

/// What can go wrong at the cloud seam, classified so that callers can react
/// without knowing the provider: [`InsufficientCapacity`](Error::InsufficientCapacity)
/// and [`NotReady`](Error::NotReady) are retryable (see [`Error::is_retryable`]),
/// [`NotFound`](Error::NotFound) and [`Other`](Error::Other) are not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The offering has no capacity right now. Retryable elsewhere: launch
    /// the claim again with another offering (and count this one as
    /// exhausted, see [`Error::notice`]); retrying the same offering at once
    /// usually fails the same way.
    #[error("insufficient capacity to launch {claim} as {offering} ({code})")]
    InsufficientCapacity {
        /// NodeClaim being launched.
        claim: String,
        /// The pool that is out of capacity.
        offering: OfferingKey,
        /// The provider's error code (`InsufficientInstanceCapacity`,
        /// `UnfulfillableCapacity`, ...), for NodeClaim conditions and Events.
        code: String,
    },
    /// No instance exists for the claim (never launched, or forgotten by the
    /// provider). Not retryable: for a terminate this means done; for
    /// anything else the claim must be launched again.
    #[error("no instance for {claim}")]
    NotFound {
        /// NodeClaim asked about.
        claim: String,
    },
    /// The provider cannot act on the claim yet but will (throttled,
    /// eventually consistent state, launch prerequisites not resolved).
    /// Retryable: the same call, later.
    #[error("cannot act on {claim} yet: {reason}")]
    NotReady {
        /// NodeClaim concerned.
        claim: String,
        /// Why not yet.
        reason: String,
    },
    /// Anything else (invalid request, unknown offering, permissions). Not
    /// retryable: the same call fails the same way. The message names the
    /// claim and the step.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// Whether trying again can succeed: `InsufficientCapacity` (with a
    /// different offering) and `NotReady` (the same call, later).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::InsufficientCapacity { .. } | Error::NotReady { .. }
        )
    }

    /// The [`Notice`] the core should hear about this failure:
    /// `InsufficientCapacity` for a capacity error, nothing otherwise.
    pub fn notice(&self) -> Option<Notice> {
        match self {
            Error::InsufficientCapacity { offering, .. } => Some(Notice::InsufficientCapacity {
                offering: offering.clone(),
            }),
            _ => None,
        }
    }
}

/// How a launched node must present itself when it registers: what the
/// instance's bootstrap (user data) sets on the kubelet. Built from the
/// NodeClaim's spec, so the claim and the instance agree.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeTemplate {
    /// Node labels (pool, offering and well-known labels).
    pub labels: std::collections::BTreeMap<String, String>,
    /// Taints the node keeps.
    pub taints: Vec<crate::api::Taint>,
    /// Taints the node carries until the controller initializes it
    /// (`quartermaster.dev/unregistered` among them).
    pub startup_taints: Vec<crate::api::Taint>,
    /// Offerings to try, in this order, when the claim's own has no
    /// capacity (same instance type and capacity type in other zones, see
    /// `core::fallback`); empty when the claim must stay where it was
    /// planned. A provider that launches in one call (EC2 CreateFleet)
    /// passes them as ranked overrides; the instance it reports carries the
    /// offering actually used.
    pub fallbacks: Vec<OfferingKey>,
}

impl From<&crate::api::NodeClaimSpec> for NodeTemplate {
    fn from(spec: &crate::api::NodeClaimSpec) -> NodeTemplate {
        NodeTemplate {
            labels: spec.labels.clone(),
            taints: spec.taints.clone(),
            startup_taints: spec.startup_taints.clone(),
            fallbacks: Vec::new(),
        }
    }
}

/// What a cloud said about one of its instances, before the driver knows
/// which NodeClaim the instance belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceNotice {
    /// Provider instance ID (`i-0123456789abcdef0` on EC2); for a
    /// [`NoticeKind::ReservationEnding`], the capacity reservation's ID
    /// (`cr-...`): that notice is about every instance in it.
    pub instance_id: String,
    /// What happened.
    pub kind: NoticeKind,
    /// When the cloud says it happened (the event's time).
    pub time: Time,
    /// A provider-side identifier of the message, so that a message
    /// delivered twice is acted on once (the EventBridge event ID on AWS).
    pub id: String,
}

/// What the driver made of one [`InstanceNotice`], reported back to the
/// feed that delivered it: the feed lets the message go only once every
/// notice in it is [`NoticeOutcome::Recorded`] or [`NoticeOutcome::Foreign`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeAck {
    /// [`InstanceNotice::id`].
    pub id: String,
    /// [`InstanceNotice::instance_id`].
    pub instance_id: String,
    /// What came of it.
    pub outcome: NoticeOutcome,
}

/// See [`NoticeAck`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NoticeOutcome {
    /// Acted on, and what a restarted controller needs to carry on is
    /// written to the API (or nothing needs to be), or it was acted on
    /// before.
    Recorded,
    /// About an instance no NodeClaim of ours has.
    Foreign,
    /// Not acted on yet (its claim is not known yet, or the record could not
    /// be written): deliver it again later.
    Retry,
}

/// Where the driver reports [`NoticeAck`]s and the notice feed collects
/// them (shared: the feed restarts with each leadership term, the driver
/// does not).
#[derive(Debug, Clone, Default)]
pub struct NoticeAcks(std::sync::Arc<std::sync::Mutex<Vec<NoticeAck>>>);

impl NoticeAcks {
    /// Reports what came of a notice.
    pub fn push(&self, notice: &InstanceNotice, outcome: NoticeOutcome) {
        let ack = NoticeAck {
            id: notice.id.clone(),
            instance_id: notice.instance_id.clone(),
            outcome,
        };
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(ack);
    }

    /// Takes every report so far.
    pub fn take(&self) -> Vec<NoticeAck> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The kinds of [`InstanceNotice`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoticeKind {
    /// The spot instance will be reclaimed at `deadline`.
    SpotInterruption {
        /// When the instance is taken back (two minutes after the warning).
        deadline: Time,
    },
    /// Elevated risk of interruption; no deadline.
    Rebalance,
    /// The instance changed state outside our control.
    StateChange {
        /// The new state.
        state: InstanceState,
    },
    /// A scheduled maintenance event (instance retirement, reboot) from AWS
    /// Health; `start` is when it begins, if the event says.
    ScheduledChange {
        /// When the change starts.
        start: Option<Time>,
    },
    /// The capacity reservation named by [`InstanceNotice::instance_id`]
    /// (a Capacity Block for ML) ends at `end`; every instance in it goes
    /// then (EC2's Capacity Block expiry warning).
    ReservationEnding {
        /// When the reservation ends.
        end: Time,
    },
}

impl InstanceNotice {
    /// The core's [`Notice`] for this event, once the driver knows the
    /// instance's NodeClaim. A state change to stopping/terminated becomes
    /// [`Notice::Terminated`]; pending/running say nothing new. A scheduled
    /// change is [`Notice::ScheduledChange`] with its start (drained ahead
    /// of it, whatever the pool's rebalance action). A reservation's end is
    /// [`Notice::ReservationEnding`] for `claim`, one of the claims in the
    /// reservation (the driver finds them by their reservation label).
    pub fn to_notice(&self, claim: &str) -> Option<Notice> {
        let claim = claim.to_string();
        match &self.kind {
            NoticeKind::SpotInterruption { deadline } => Some(Notice::SpotInterruption {
                claim,
                deadline: *deadline,
            }),
            NoticeKind::Rebalance => Some(Notice::Rebalance { claim }),
            NoticeKind::ScheduledChange { start } => Some(Notice::ScheduledChange {
                claim,
                start: *start,
            }),
            NoticeKind::StateChange { state } => {
                (!state.is_alive()).then_some(Notice::Terminated { claim })
            }
            NoticeKind::ReservationEnding { end } => {
                Some(Notice::ReservationEnding { claim, end: *end })
            }
        }
    }
}

/// The claims garbage collection compares the instances with: each claim's
/// name, with the provider ID its status records, if it records one.
pub type ClaimIndex = std::collections::HashMap<String, Option<String>>;

/// The instances garbage collection must terminate: alive or stopped (a
/// stopped instance still holds its volumes and addresses), launched more
/// than `grace` before `now` (so a launch whose NodeClaim is still being
/// written is spared), and belonging to no claim in `claims`, or a double
/// of a claim's instance: tagged with a claim whose status records another
/// instance (a launch retried after its first answer was lost, which EC2
/// carried out twice). Providers list only instances carrying their
/// ownership tag, so nothing else is ever a candidate.
pub fn orphans<'a>(
    instances: &'a [Instance],
    claims: &ClaimIndex,
    now: Time,
    grace: chrono::TimeDelta,
) -> Vec<&'a Instance> {
    instances
        .iter()
        .filter(|i| {
            (i.state.is_alive() || i.state == InstanceState::Stopped) && now - i.launched_at > grace
        })
        .filter(|i| match claims.get(&i.claim) {
            None => true,
            Some(Some(recorded)) => instance_id_of(recorded) != instance_id_of(&i.provider_id),
            Some(None) => false,
        })
        .collect()
}

/// Terminates every [`orphans`] instance of `cloud` and returns them (a
/// double by its ID, [`CloudProvider::terminate_instance`], so that its
/// claim's own instance stays), then lets the provider delete what no claim
/// uses any more ([`CloudProvider::collect_unused_resources`]); one failed
/// terminate or delete does not stop the others (its error is returned
/// beside).
///
/// # Errors
/// Listing the instances failed.
pub async fn collect_garbage<C: CloudProvider + ?Sized>(
    cloud: &C,
    claims: &ClaimIndex,
    now: Time,
    grace: chrono::TimeDelta,
) -> Result<(Vec<Instance>, Vec<Error>)> {
    let instances = cloud.instances().await?;
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for orphan in orphans(&instances, claims, now, grace) {
        let result = if claims.contains_key(&orphan.claim) {
            cloud
                .terminate_instance(orphan, now)
                .await
                .map(|()| orphan.clone())
        } else {
            cloud.terminate(&orphan.claim, now).await
        };
        match result {
            Ok(i) => done.push(i),
            Err(Error::NotFound { .. }) => {}
            Err(e) => failed.push(e),
        }
    }
    match cloud.collect_unused_resources(now, grace).await {
        Ok((_, errors)) => failed.extend(errors),
        Err(e) => failed.push(e),
    }
    Ok((done, failed))
}

/// Whether a node with these labels is launched into its pool's cluster
/// placement group of its zone: it has EFA interfaces, or it was launched
/// for a gang that must share one network block
/// (`quartermaster.dev/cluster-placement`). Such a launch has no fallbacks
/// in other zones.
pub fn in_placement_group(labels: &std::collections::BTreeMap<String, String>) -> bool {
    let label = |k: &str| labels.get(k).map(String::as_str);
    label(crate::labels::EFA_INTERFACES).is_some_and(|n| n != "0")
        || label(crate::labels::CLUSTER_PLACEMENT) == Some("true")
}

/// The instance ID at the end of a Kubernetes provider ID
/// (`aws:///us-east-1a/i-0123` gives `i-0123`).
pub fn instance_id_of(provider_id: &str) -> &str {
    provider_id.rsplit('/').next().unwrap_or(provider_id)
}

/// The cloud's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Launches and terminates the instances behind NodeClaims. Methods take
/// `&self` so that one provider can serve concurrent reconcilers (the AWS
/// implementation holds a cloneable SDK client; the simulated one is shared
/// as a `Mutex<SimulatedCloud>`), and return `Send` futures so that the
/// controller can run them on a multi-threaded runtime. `now` is the
/// caller's clock: the simulated cloud runs on it, a real cloud may ignore
/// it.
///
/// Every method is idempotent per claim name, so that a restarted controller
/// converges without leaking or doubling instances.
pub trait CloudProvider {
    /// Launches the instance for `claim` (its offering), bootstrapped to
    /// register with `template`'s labels and taints, or returns the instance
    /// already launched for that claim name, whatever its state.
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when the offering has no capacity;
    /// [`Error::NotReady`] when the provider cannot launch yet;
    /// [`Error::Other`] for an offering the provider does not sell, or a
    /// claim name already launched with a different offering.
    fn launch(
        &self,
        claim: &ClaimRequest,
        template: &NodeTemplate,
        now: Time,
    ) -> impl Future<Output = Result<Instance>> + Send;

    /// Terminates the instance of `claim` and returns it, now shutting down
    /// (or already terminated: terminating twice is not an error).
    ///
    /// # Errors
    /// [`Error::NotFound`] when there is no instance for the claim (callers
    /// treat that as done); [`Error::NotReady`] / [`Error::Other`] when the
    /// provider fails.
    fn terminate(&self, claim: &str, now: Time) -> impl Future<Output = Result<Instance>> + Send;

    /// Reboots the instance of `claim` (repair): it keeps its ID, its node
    /// and its pods, which the kubelet restarts once it is back. Rebooting
    /// an instance already rebooting is not an error.
    ///
    /// # Errors
    /// [`Error::NotFound`] when there is no running instance for the claim;
    /// [`Error::NotReady`] / [`Error::Other`] when the provider fails.
    fn reboot(&self, claim: &str, now: Time) -> impl Future<Output = Result<Instance>> + Send;

    /// The instance of `claim`, in any state (terminated included, for as
    /// long as the provider remembers it); `None` if there is none.
    ///
    /// # Errors
    /// [`Error::NotReady`] / [`Error::Other`] when the provider cannot be
    /// asked; not finding the instance is `Ok(None)`.
    fn describe(&self, claim: &str) -> impl Future<Output = Result<Option<Instance>>> + Send;

    /// Terminates one instance, by its provider ID, leaving the claim's
    /// other instances alone: garbage collection's way to end a double of
    /// a claim's instance ([`orphans`]). Providers that cannot launch a
    /// claim twice keep this default, which refuses.
    ///
    /// # Errors
    /// [`Error::NotFound`] when the instance is gone; [`Error::NotReady`] /
    /// [`Error::Other`] when the provider fails or does not support it.
    fn terminate_instance(
        &self,
        instance: &Instance,
        now: Time,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = now;
        let message = format!(
            "cannot terminate {} of {} by ID: this provider launches one instance per claim",
            instance.provider_id, instance.claim
        );
        async move { Err(Error::Other(message)) }
    }

    /// Every instance this provider launched that is not terminated yet
    /// (pending, running, shutting down), by claim name; what garbage
    /// collection compares against the NodeClaims.
    ///
    /// # Errors
    /// [`Error::NotReady`] / [`Error::Other`] when the provider cannot be
    /// asked.
    fn instances(&self) -> impl Future<Output = Result<Vec<Instance>>> + Send;

    /// Where the running instance `instance` (its provider ID) of `claim`
    /// sits in the provider's network: its network nodes, top layer first
    /// (EC2: `DescribeInstanceTopology`'s node set). Empty when the provider
    /// reports none for it (this default; EC2 for types without topology).
    ///
    /// # Errors
    /// [`Error::NotReady`] / [`Error::Other`] when the provider cannot be
    /// asked.
    fn network_nodes(
        &self,
        claim: &str,
        instance: &Instance,
    ) -> impl Future<Output = Result<Vec<String>>> + Send {
        let _ = (claim, instance);
        async { Ok(Vec::new()) }
    }

    /// Requirements the provider adds to a NodePool's own before planning:
    /// what its nodes can be launched as (EC2: only architectures and
    /// accelerators the pool's EC2NodeClass has an image for). Providers
    /// without such limits keep this default, which adds none.
    fn pool_requirements(&self, nodepool: &str) -> Vec<crate::api::Requirement> {
        let _ = nodepool;
        Vec::new()
    }

    /// What a launch of the claim would be made with now, for drift: the
    /// hash of its pool's node class and the image its instance type gets
    /// (EC2: from the resolved EC2NodeClass). `None` when the provider has
    /// no such notion (this default) or the pool has no ready class; such
    /// claims never drift by class or image.
    fn launch_stamp(
        &self,
        claim: &crate::api::NodeClaimSpec,
    ) -> Option<crate::core::drift::ClassStamp> {
        let _ = claim;
        None
    }

    /// Why the provider cannot launch for `nodepool` at all (EC2: its
    /// EC2NodeClass is missing or not Ready), shown in the pool's status;
    /// `None` when it can (this default).
    fn pool_problem(&self, nodepool: &str) -> Option<String> {
        let _ = nodepool;
        None
    }

    /// Deletes provider resources that no claim uses any more and that are
    /// older than `grace` (EC2: launch templates); returns their names and
    /// the errors of deletes that failed. Providers without such resources
    /// keep this default, which deletes nothing.
    ///
    /// # Errors
    /// [`Error::NotReady`] / [`Error::Other`] when the provider cannot be
    /// asked what it holds.
    fn collect_unused_resources(
        &self,
        now: Time,
        grace: chrono::TimeDelta,
    ) -> impl Future<Output = Result<(Vec<String>, Vec<Error>)>> + Send {
        let _ = (now, grace);
        async { Ok((Vec::new(), Vec::new())) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::CapacityType;

    fn key() -> OfferingKey {
        OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "use1-az1".into(),
            capacity_type: CapacityType::Spot,
        }
    }

    fn instance(claim: &str, launched_at: Time, state: InstanceState) -> Instance {
        Instance {
            claim: claim.into(),
            provider_id: format!("aws:///us-east-1a/i-{claim}"),
            offering: key(),
            price_per_hour: 1.0,
            launched_at,
            state,
        }
    }

    #[test]
    fn orphans_are_alive_unclaimed_instances_older_than_the_grace_period() {
        use chrono::TimeZone;
        let t0 = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let now = t0 + chrono::TimeDelta::minutes(10);
        let instances = vec![
            instance("claimed", t0, InstanceState::Running),
            instance("orphan", t0, InstanceState::Running),
            instance(
                "young",
                now - chrono::TimeDelta::seconds(30),
                InstanceState::Pending,
            ),
            instance("gone", t0, InstanceState::ShuttingDown),
            instance("stopped", t0, InstanceState::Stopped),
        ];
        let claims: ClaimIndex = [("claimed".to_string(), None)].into_iter().collect();
        let found: Vec<&str> = orphans(&instances, &claims, now, chrono::TimeDelta::minutes(2))
            .iter()
            .map(|i| i.claim.as_str())
            .collect();
        assert_eq!(found, ["orphan", "stopped"]);
    }

    #[test]
    fn a_double_of_a_claims_recorded_instance_is_an_orphan_and_the_recorded_one_is_not() {
        use chrono::TimeZone;
        let t0 = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let now = t0 + chrono::TimeDelta::minutes(10);
        let mut double = instance("c", t0, InstanceState::Running);
        double.provider_id = "aws:///us-east-1b/i-0double".into();
        let instances = vec![instance("c", t0, InstanceState::Running), double];
        let recorded = instances[0].provider_id.clone();
        let claims: ClaimIndex = [("c".to_string(), Some(recorded))].into_iter().collect();
        let found: Vec<&str> = orphans(&instances, &claims, now, chrono::TimeDelta::minutes(2))
            .iter()
            .map(|i| i.provider_id.as_str())
            .collect();
        assert_eq!(found, ["aws:///us-east-1b/i-0double"]);
        // A claim that records no instance yet keeps both: which one is
        // its own is not known.
        let unrecorded: ClaimIndex = [("c".to_string(), None)].into_iter().collect();
        assert!(orphans(&instances, &unrecorded, now, chrono::TimeDelta::minutes(2)).is_empty());
    }

    #[test]
    fn instance_notices_become_core_notices_once_the_claim_is_known() {
        use chrono::TimeZone;
        let t = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let notice = |kind| InstanceNotice {
            instance_id: "i-1".into(),
            kind,
            time: t,
            id: "e-1".into(),
        };
        assert_eq!(
            notice(NoticeKind::SpotInterruption { deadline: t }).to_notice("c"),
            Some(Notice::SpotInterruption {
                claim: "c".into(),
                deadline: t
            })
        );
        assert_eq!(
            notice(NoticeKind::ScheduledChange { start: Some(t) }).to_notice("c"),
            Some(Notice::ScheduledChange {
                claim: "c".into(),
                start: Some(t)
            })
        );
        assert_eq!(
            notice(NoticeKind::Rebalance).to_notice("c"),
            Some(Notice::Rebalance { claim: "c".into() })
        );
        assert_eq!(
            notice(NoticeKind::StateChange {
                state: InstanceState::Running
            })
            .to_notice("c"),
            None
        );
        assert_eq!(
            notice(NoticeKind::StateChange {
                state: InstanceState::Terminated
            })
            .to_notice("c"),
            Some(Notice::Terminated { claim: "c".into() })
        );
        assert_eq!(
            notice(NoticeKind::ReservationEnding { end: t }).to_notice("c"),
            Some(Notice::ReservationEnding {
                claim: "c".into(),
                end: t
            })
        );
        assert_eq!(instance_id_of("aws:///us-east-1a/i-0abc"), "i-0abc");
    }

    #[test]
    fn capacity_and_not_ready_errors_are_retryable_the_others_are_not() {
        let ice = Error::InsufficientCapacity {
            claim: "c".into(),
            offering: key(),
            code: "InsufficientInstanceCapacity".into(),
        };
        assert!(ice.is_retryable());
        assert!(Error::NotReady {
            claim: "c".into(),
            reason: "throttled".into()
        }
        .is_retryable());
        assert!(!Error::NotFound { claim: "c".into() }.is_retryable());
        assert!(!Error::Other("boom".into()).is_retryable());
    }

    #[test]
    fn capacity_error_names_claim_and_offering_and_becomes_a_notice() {
        let ice = Error::InsufficientCapacity {
            claim: "gpu-1".into(),
            offering: key(),
            code: "InsufficientInstanceCapacity".into(),
        };
        assert_eq!(
            ice.to_string(),
            "insufficient capacity to launch gpu-1 as g5.xlarge spot in use1-az1 (InsufficientInstanceCapacity)"
        );
        assert_eq!(
            ice.notice(),
            Some(Notice::InsufficientCapacity { offering: key() })
        );
        assert_eq!(Error::NotFound { claim: "x".into() }.notice(), None);
    }
}
