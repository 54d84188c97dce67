//! Cloud notices, from the feed to the core, made durable before they are
//! let go: a spot interruption or a scheduled change (AWS Health) is first
//! written to the API (the claim's `Interrupted` condition, whose reason
//! says which and whose message ends with the deadline or start, and the
//! node's cordon with `quartermaster.dev/disrupted`), then handed to the
//! core, then acknowledged to the feed, which only then deletes the
//! message. A restarted controller (or a new leader) reads the conditions
//! back ([`NoticeHandler::resume`]) and carries on with the response:
//! cordon, replacement, checkpoint request, drain.
//!
//! It decides nothing: what to do about an interruption is the core's.

use super::kube_api::{KubeApi, NodeChange};
use super::lifecycle::set_condition;
use super::snapshot::{ClaimView, Snapshot};
use crate::api::nodeclaim::conditions;
use crate::api::{NodeClaim, NodeClaimStatus};
use crate::cloud::{instance_id_of, Instance, InstanceNotice, NoticeKind, NoticeOutcome};
use crate::core::{Notice, Time};
use kube::ResourceExt;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

/// Reason of the `Interrupted` condition for a spot interruption warning.
pub const REASON: &str = "SpotInterruption";

/// Reason of the `Interrupted` condition for a scheduled change (AWS
/// Health: instance retirement, stop, reboot, maintenance).
pub const SCHEDULED_REASON: &str = "ScheduledChange";

/// Notices remembered (by event and instance) to act on a message delivered
/// twice only once.
const REMEMBERED: usize = 4096;

/// A notice that is written to the API before it is let go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// A spot interruption warning: the instance is reclaimed then.
    Spot {
        /// When EC2 takes the instance back.
        deadline: Time,
    },
    /// A scheduled change: it starts then (if the event says).
    Scheduled {
        /// When the change starts.
        start: Option<Time>,
    },
}

impl Record {
    /// The record a notice needs, if it needs one.
    pub fn of(kind: &NoticeKind) -> Option<Record> {
        match kind {
            NoticeKind::SpotInterruption { deadline } => Some(Record::Spot {
                deadline: *deadline,
            }),
            NoticeKind::ScheduledChange { start } => Some(Record::Scheduled { start: *start }),
            _ => None,
        }
    }

    /// Whether the core must hear of this record although it heard of
    /// `told` for the same claim: a spot interruption after a scheduled
    /// change (the harder deadline), or a scheduled change moved earlier.
    /// Copies of the same interruption (redelivered, or one warning sent
    /// several times) are not told again.
    pub fn supersedes(self, told: Record) -> bool {
        match (self, told) {
            (Record::Spot { .. }, Record::Scheduled { .. }) => true,
            (Record::Scheduled { start: Some(new) }, Record::Scheduled { start }) => {
                start.is_none_or(|old| new < old)
            }
            _ => false,
        }
    }

    /// Whether the core must hear of this record, given what it was told
    /// of the claim (if anything).
    fn is_news(self, told: Option<&Record>) -> bool {
        told.is_none_or(|t| self.supersedes(*t))
    }

    /// The core's notice for `claim`.
    pub fn notice(self, claim: String) -> Notice {
        match self {
            Record::Spot { deadline } => Notice::SpotInterruption { claim, deadline },
            Record::Scheduled { start } => Notice::ScheduledChange { claim, start },
        }
    }

    /// The `Interrupted` condition's reason.
    fn reason(self) -> &'static str {
        match self {
            Record::Spot { .. } => REASON,
            Record::Scheduled { .. } => SCHEDULED_REASON,
        }
    }

    /// The `Interrupted` condition's message: the deadline (or start) is
    /// its last word.
    fn message(self) -> String {
        match self {
            Record::Spot { deadline } => format!(
                "spot interruption warning: the instance is reclaimed at {}",
                super::checkpoint::rfc3339(deadline)
            ),
            Record::Scheduled { start: Some(start) } => format!(
                "scheduled change (retirement, stop, reboot or maintenance): it starts at {}",
                super::checkpoint::rfc3339(start)
            ),
            Record::Scheduled { start: None } => {
                "scheduled change (retirement, stop, reboot or maintenance): no start given".into()
            }
        }
    }
}

/// The claim's status with its `Interrupted` condition set for `record`.
pub fn interrupted_status(view: &ClaimView, record: Record, now: Time) -> NodeClaimStatus {
    let mut status = view.claim.status.clone().unwrap_or_default();
    set_record(&mut status, record, now);
    status
}

/// Sets a status's `Interrupted` condition for `record`.
fn set_record(status: &mut NodeClaimStatus, record: Record, now: Time) {
    set_condition(
        status,
        conditions::INTERRUPTED,
        true,
        record.reason(),
        &record.message(),
        now,
    );
}

/// What the claim's `Interrupted` condition records, if it has one.
pub fn recorded(view: &ClaimView) -> Option<Record> {
    recorded_of(&view.claim)
}

/// [`recorded`] of a claim.
pub fn recorded_of(claim: &NodeClaim) -> Option<Record> {
    record_in(claim.status.as_ref()?)
}

/// What a claim status's `Interrupted` condition records, if it has one.
fn record_in(status: &NodeClaimStatus) -> Option<Record> {
    let c = status.condition(conditions::INTERRUPTED)?;
    if c.status != "True" {
        return None;
    }
    let at = c
        .message
        .rsplit(' ')
        .next()
        .and_then(|last| chrono::DateTime::parse_from_rfc3339(last).ok())
        .map(|t| t.with_timezone(&chrono::Utc));
    if c.reason == SCHEDULED_REASON {
        Some(Record::Scheduled { start: at })
    } else {
        at.map(|deadline| Record::Spot { deadline })
    }
}

/// How long an instance this process launched is remembered by its ID
/// (until the claim's status, which the watch brings, names it).
const RECENT_LAUNCH: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// What this process knows of its launches, shared by the lifecycle
/// (which launches) and the notice path (which must tell our instances from
/// other fleets' at once): the instances launched lately, by ID, with
/// their claims (a notice may come before the claim's status names the
/// instance), and the claims whose launch may have made an instance not
/// seen yet (a call in flight, or one that timed out or was throttled).
#[derive(Debug, Clone, Default)]
pub struct Launches(Arc<Mutex<LaunchState>>);

#[derive(Debug, Default)]
struct LaunchState {
    /// Instance ID to claim and when it was launched.
    recent: HashMap<String, (String, Time)>,
    /// Claims tried in this process.
    attempted: HashSet<String>,
    /// Claims whose launch may have made an unseen instance.
    uncertain: HashSet<String>,
}

impl Launches {
    fn with<T>(&self, f: impl FnOnce(&mut LaunchState) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// A launch of `claim` starts.
    pub fn started(&self, claim: &str) {
        self.with(|s| {
            s.attempted.insert(claim.to_string());
            s.uncertain.insert(claim.to_string());
        });
    }

    /// The launch of `claim` returned: the instance it made, or whether its
    /// error leaves it unknown whether one was made (a timeout, throttling).
    pub fn finished(&self, claim: &str, launched: Option<&Instance>, unknown: bool, now: Time) {
        self.with(|s| {
            if !unknown || launched.is_some() {
                s.uncertain.remove(claim);
            }
            if let Some(i) = launched {
                let id = instance_id_of(&i.provider_id).to_string();
                s.recent.insert(id, (claim.to_string(), now));
            }
            s.recent.retain(|_, (_, at)| *at + RECENT_LAUNCH > now);
        });
    }

    /// The claim this process launched instance `id` for, lately.
    pub fn claim_of(&self, id: &str) -> Option<String> {
        self.with(|s| s.recent.get(id).map(|(c, _)| c.clone()))
    }

    /// Whether the claim (not launched as far as its status says) may have
    /// an instance that is not known: a launch of it is under way or ended
    /// without an answer, or it was not tried in this process (launched by
    /// a predecessor that did not record it).
    pub fn may_have_unseen_instance(&self, claim: &str) -> bool {
        self.with(|s| s.uncertain.contains(claim) || !s.attempted.contains(claim))
    }

    /// Forgets the claims that are gone.
    pub fn retain(&self, present: &HashSet<String>) {
        self.with(|s| {
            s.attempted.retain(|c| present.contains(c));
            s.uncertain.retain(|c| present.contains(c));
        });
    }
}

/// Whether a notice of this kind asks for nothing even about one of our
/// instances (a state change to pending or running): it is settled at
/// once, never delivered again.
fn says_nothing(kind: &NoticeKind) -> bool {
    matches!(kind, NoticeKind::StateChange { state } if state.is_alive())
}

/// The claims a notice may be about, as views: the one whose provider ID
/// (or recent launch) is the notice's instance, those in the reservation
/// a reservation notice names, and those not launched yet as far as their
/// status says (its instance may be theirs). Cheap: no view is built for
/// the other claims.
pub fn notice_views(s: &Snapshot, n: &InstanceNotice, launches: &Launches) -> Vec<ClaimView> {
    let launched_for = launches.claim_of(&n.instance_id);
    s.claims
        .values()
        .filter(|c| {
            let provider = c.status.as_ref().and_then(|st| st.provider_id.as_deref());
            let ours = provider.is_none_or(|p| instance_id_of(p) == n.instance_id);
            ours || launched_for.as_deref() == Some(c.name_any().as_str())
                || c.spec
                    .labels
                    .get(crate::api::labels::CAPACITY_RESERVATION_ID)
                    == Some(&n.instance_id)
        })
        .map(|c| s.claim_view(c))
        .collect()
}

/// What a notice came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Handled {
    /// For the feed.
    pub outcome: NoticeOutcome,
    /// For the core, what it is to hear of now (one per claim in the
    /// reservation for a reservation's end; at most one otherwise).
    pub notices: Vec<Notice>,
    /// The claims' pools and the kind of notice, for the `interruptions`
    /// metric, when the notice was acted on (first time only).
    pub counted: Vec<(String, &'static str)>,
}

impl Handled {
    fn settled(outcome: NoticeOutcome) -> Handled {
        Handled {
            outcome,
            notices: Vec::new(),
            counted: Vec::new(),
        }
    }
}

/// The notice kind's name in metrics.
fn kind_name(kind: &NoticeKind) -> &'static str {
    match kind {
        NoticeKind::SpotInterruption { .. } => "spot-interruption",
        NoticeKind::Rebalance => "rebalance",
        NoticeKind::StateChange { .. } => "state-change",
        NoticeKind::ScheduledChange { .. } => "scheduled-change",
        NoticeKind::ReservationEnding { .. } => "reservation-ending",
    }
}

/// The driver's memory of notices: which were settled, and which claims'
/// recorded notices the core has heard of in this process (forgotten once
/// the claim is gone).
#[derive(Debug, Default)]
pub struct NoticeHandler {
    seen: VecDeque<String>,
    seen_set: HashSet<String>,
    told: HashMap<String, Record>,
}

impl NoticeHandler {
    /// A handler that has seen nothing (a fresh process).
    pub fn new() -> NoticeHandler {
        NoticeHandler::default()
    }

    fn remember(&mut self, key: String) {
        if self.seen_set.insert(key.clone()) {
            self.seen.push_back(key);
        }
        while self.seen.len() > REMEMBERED {
            if let Some(old) = self.seen.pop_front() {
                self.seen_set.remove(&old);
            }
        }
    }

    /// Forgets the claims that are gone (their notices were acted on or
    /// are moot).
    pub fn retain_claims(&mut self, present: &HashSet<String>) {
        self.told.retain(|c, _| present.contains(c));
    }

    /// The notices recorded on claims that the core has not heard of in
    /// this process (all of them after a restart), as the core's notices;
    /// each once. Claims being deleted are left to their finalizer. Claims
    /// that are gone are forgotten.
    pub fn resume(&mut self, views: &[ClaimView]) -> Vec<Notice> {
        let present: HashSet<String> = views.iter().map(|v| v.claim.name_any()).collect();
        self.told.retain(|claim, _| present.contains(claim));
        let mut out = Vec::new();
        for v in views {
            let claim = v.claim.name_any();
            if v.claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(record) = recorded(v) else {
                continue;
            };
            if !record.is_news(self.told.get(&claim)) {
                continue;
            }
            tracing::info!(%claim, ?record, "resuming a recorded notice");
            self.told.insert(claim.clone(), record);
            out.push(record.notice(claim));
        }
        out
    }

    /// How many claims' recorded notices are remembered (for tests).
    pub fn remembered_claims(&self) -> usize {
        self.told.len()
    }

    /// Handles one notice against the claims (`views`, as the snapshot has
    /// them). A notice about no claim's instance is foreign, unless a claim
    /// is still launching (its instance may be this one: retried). A spot
    /// interruption or a scheduled change is recorded first (only by the
    /// leader; `Retry` when not leading or when the write fails); other
    /// notices need no record. A notice settled before is `Recorded` again
    /// without acting.
    pub async fn handle(
        &mut self,
        n: &InstanceNotice,
        views: &[ClaimView],
        api: &KubeApi,
        leader: bool,
        now: Time,
    ) -> Handled {
        self.handle_with(n, views, &Launches::default(), api, leader, now)
            .await
    }

    /// [`NoticeHandler::handle`], knowing this process' `launches`: a
    /// notice about an instance launched lately is its claim's before the
    /// claim's status says so, and one about an unknown instance is retried
    /// only while a claim not launched as far as its status says may have
    /// an unseen instance ([`Launches::may_have_unseen_instance`]). A
    /// notice that asks for nothing even about ours (a state change to
    /// running) is settled at once.
    pub async fn handle_with(
        &mut self,
        n: &InstanceNotice,
        views: &[ClaimView],
        launches: &Launches,
        api: &KubeApi,
        leader: bool,
        now: Time,
    ) -> Handled {
        // One AWS Health event can name several instances: the event ID
        // alone would act on the first of them only.
        let key = format!("{}/{}", n.id, n.instance_id);
        if self.seen_set.contains(&key) {
            return Handled::settled(NoticeOutcome::Recorded);
        }
        if let NoticeKind::ReservationEnding { .. } = n.kind {
            self.remember(key);
            return reservation_ending(n, views);
        }
        let launched_for = launches.claim_of(&n.instance_id);
        let view = views.iter().find(|v| {
            v.claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| instance_id_of(p) == n.instance_id)
                || launched_for.as_deref() == Some(v.claim.name_any().as_str())
        });
        let Some(view) = view else {
            let launching = !says_nothing(&n.kind)
                && views.iter().any(|v| {
                    v.claim.metadata.deletion_timestamp.is_none()
                        && v.claim
                            .status
                            .as_ref()
                            .is_none_or(|s| s.provider_id.is_none())
                        && launches.may_have_unseen_instance(&v.claim.name_any())
                });
            if launching {
                tracing::debug!(instance = %n.instance_id, "notice about an unknown instance while a claim launches; retried");
                return Handled::settled(NoticeOutcome::Retry);
            }
            tracing::debug!(instance = %n.instance_id, "notice about an instance without a claim");
            self.remember(key);
            return Handled::settled(NoticeOutcome::Foreign);
        };
        let claim = view.claim.name_any();
        let counted = vec![(view.claim.spec.node_pool.clone(), kind_name(&n.kind))];
        let Some(what) = Record::of(&n.kind) else {
            self.remember(key);
            return Handled {
                outcome: NoticeOutcome::Recorded,
                notices: n.to_notice(&claim).into_iter().collect(),
                counted,
            };
        };
        if !leader {
            return Handled::settled(NoticeOutcome::Retry);
        }
        if let Err(e) = record(api, view, what, now).await {
            tracing::warn!(%claim, error = %e, "cannot record the notice; it is retried");
            return Handled::settled(NoticeOutcome::Retry);
        }
        self.remember(key);
        if !what.is_news(self.told.get(&claim)) {
            // Recorded before (a notice delivered again after a restart
            // that resumed it, or another copy of the warning): the core
            // knows.
            return Handled::settled(NoticeOutcome::Recorded);
        }
        self.told.insert(claim.clone(), what);
        tracing::info!(%claim, record = ?what, "notice recorded");
        Handled {
            outcome: NoticeOutcome::Recorded,
            notices: vec![what.notice(claim)],
            counted,
        }
    }
}

/// A reservation's end (`n.instance_id` is the reservation's ID) for every
/// claim in it, by the claims' reservation label, launching or not: each
/// is drained like an interrupted one (the core's [`Notice::ReservationEnding`]).
/// Nothing is written first: a restarted controller drains the same nodes
/// from the catalog's end of the reservation (the core's clock backstop),
/// so the notice is `Recorded` at once, or `Foreign` when no claim of ours
/// is in the reservation.
fn reservation_ending(n: &InstanceNotice, views: &[ClaimView]) -> Handled {
    let reservation = crate::api::labels::CAPACITY_RESERVATION_ID;
    let mut handled = Handled::settled(NoticeOutcome::Foreign);
    for v in views {
        let in_it = v.claim.spec.labels.get(reservation) == Some(&n.instance_id);
        if !in_it || v.claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let claim = v.claim.name_any();
        handled.outcome = NoticeOutcome::Recorded;
        handled.notices.extend(n.to_notice(&claim));
        handled
            .counted
            .push((v.claim.spec.node_pool.clone(), kind_name(&n.kind)));
    }
    if handled.notices.is_empty() {
        tracing::debug!(reservation = %n.instance_id, "reservation ending without a claim of ours");
    } else {
        tracing::info!(reservation = %n.instance_id, claims = handled.notices.len(), "capacity reservation ending");
    }
    handled
}

/// Writes the record of a spot interruption or a scheduled change: the
/// claim's `Interrupted` condition (unless one is there; a spot
/// interruption replaces a scheduled change's, being the harder deadline),
/// then the node's cordon and disrupted taint (unless there; a claim
/// without a node yet has only the condition, and the core cordons the
/// node once it registers). Idempotent.
///
/// # Errors
/// The API error of the write that failed.
pub async fn record(api: &KubeApi, view: &ClaimView, what: Record, now: Time) -> kube::Result<()> {
    let write = |recorded: Option<Record>| match recorded {
        None => true,
        Some(Record::Scheduled { .. }) => matches!(what, Record::Spot { .. }),
        Some(Record::Spot { .. }) => false,
    };
    if write(recorded(view)) {
        // Judged again on the status as it is when written (a concurrent
        // write may have recorded the harder one meanwhile).
        api.update_node_claim_status(&view.claim, |status| {
            if !write(record_in(status)) {
                return false;
            }
            set_record(status, what, now);
            true
        })
        .await?;
    }
    if let Some(node) = &view.node {
        api.patch_node(node, &NodeChange::cordon()).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodeClaim, NodeClaimSpec};
    use crate::catalog::CapacityType;
    use chrono::TimeZone;

    fn view(name: &str, status: Option<NodeClaimStatus>) -> ClaimView {
        view_in(name, None, status)
    }

    /// A claim, in capacity reservation `reservation` when given.
    fn view_in(
        name: &str,
        reservation: Option<&str>,
        status: Option<NodeClaimStatus>,
    ) -> ClaimView {
        let labels = reservation
            .map(|r| {
                let key = crate::api::labels::CAPACITY_RESERVATION_ID.to_string();
                [(key, r.to_string())].into()
            })
            .unwrap_or_default();
        let mut claim = NodeClaim::new(
            name,
            NodeClaimSpec {
                node_pool: "gpu".into(),
                instance_type: "g5.xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::Spot,
                price_per_hour: 0.4,
                resources: Default::default(),
                labels,
                taints: vec![],
                startup_taints: vec![],
                termination_grace_period: None,
                expire_after: None,
            },
        );
        claim.status = status;
        ClaimView {
            claim,
            node: None,
            pods: vec![],
        }
    }

    #[test]
    fn a_recorded_interruption_is_resumed_once_with_its_deadline() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let deadline = now + chrono::TimeDelta::seconds(120);
        let plain = view("a", None);
        let spot = Record::Spot { deadline };
        let interrupted = view("b", Some(interrupted_status(&plain, spot, now)));
        assert_eq!(recorded(&interrupted), Some(spot));
        assert_eq!(recorded(&plain), None);
        let mut h = NoticeHandler::new();
        let views = [plain, interrupted];
        assert_eq!(
            h.resume(&views),
            [Notice::SpotInterruption {
                claim: "b".into(),
                deadline
            }]
        );
        assert!(h.resume(&views).is_empty(), "the core hears of it once");
    }

    #[test]
    fn a_recorded_scheduled_change_is_resumed_with_its_start_or_without_one() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let start = now + chrono::TimeDelta::days(3);
        let plain = view("a", None);
        let views: Vec<ClaimView> = [Some(start), None]
            .into_iter()
            .zip(["b", "c"])
            .map(|(start, name)| {
                let status = interrupted_status(&plain, Record::Scheduled { start }, now);
                assert_eq!(status.conditions[0].reason, SCHEDULED_REASON);
                view(name, Some(status))
            })
            .collect();
        let mut h = NoticeHandler::new();
        assert_eq!(
            h.resume(&views),
            [
                Notice::ScheduledChange {
                    claim: "b".into(),
                    start: Some(start)
                },
                Notice::ScheduledChange {
                    claim: "c".into(),
                    start: None
                }
            ]
        );
        // A spot interruption recorded over it later is told too.
        let spot = Record::Spot { deadline: now };
        let harder = view("b", Some(interrupted_status(&views[0], spot, now)));
        assert_eq!(
            h.resume(&[harder, views[1].clone()]),
            [Notice::SpotInterruption {
                claim: "b".into(),
                deadline: now
            }]
        );
    }

    #[test]
    fn only_a_harder_notice_is_told_again_for_a_claim() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let later = now + chrono::TimeDelta::minutes(5);
        let spot = |deadline| Record::Spot { deadline };
        let scheduled = |start| Record::Scheduled { start };
        assert!(spot(now).supersedes(scheduled(Some(later))));
        assert!(!spot(later).supersedes(spot(now)), "another copy");
        assert!(!scheduled(Some(now)).supersedes(spot(later)));
        assert!(scheduled(Some(now)).supersedes(scheduled(Some(later))));
        assert!(scheduled(Some(now)).supersedes(scheduled(None)));
        assert!(!scheduled(Some(later)).supersedes(scheduled(Some(now))));
        assert!(!scheduled(None).supersedes(scheduled(Some(now))));
    }

    #[test]
    fn what_was_told_about_a_claim_is_forgotten_once_the_claim_is_gone() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let spot = Record::Spot { deadline: now };
        let mut h = NoticeHandler::new();
        let views: Vec<ClaimView> = (0..100)
            .map(|i| {
                let plain = view(&format!("c{i}"), None);
                view(
                    &format!("c{i}"),
                    Some(interrupted_status(&plain, spot, now)),
                )
            })
            .collect();
        assert_eq!(h.resume(&views).len(), 100);
        assert_eq!(h.remembered_claims(), 100);
        assert!(h.resume(&views[..1]).is_empty());
        assert_eq!(h.remembered_claims(), 1);
        assert!(h.resume(&[]).is_empty());
        assert_eq!(h.remembered_claims(), 0);
    }

    #[test]
    fn a_reservation_ending_is_a_notice_for_every_claim_in_the_reservation() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let end = now + chrono::TimeDelta::minutes(40);
        let mut leaving = view_in("d", Some("cr-1"), None);
        leaving.claim.metadata.deletion_timestamp = Some(super::super::snapshot::to_k8s_time(now));
        let views = [
            view_in("a", Some("cr-1"), None),
            view_in("b", Some("cr-2"), None),
            view("c", None),
            view_in("e", Some("cr-1"), None),
            leaving,
        ];
        let notice = |reservation: &str| InstanceNotice {
            instance_id: reservation.into(),
            kind: NoticeKind::ReservationEnding { end },
            time: now,
            id: format!("e-{reservation}"),
        };
        let handled = reservation_ending(&notice("cr-1"), &views);
        assert_eq!(handled.outcome, NoticeOutcome::Recorded);
        assert_eq!(
            handled.notices,
            ["a", "e"].map(|claim| Notice::ReservationEnding {
                claim: claim.into(),
                end
            })
        );
        assert_eq!(handled.counted.len(), 2);
        // A reservation none of our claims is in is not ours.
        let foreign = reservation_ending(&notice("cr-9"), &views);
        assert_eq!(foreign, Handled::settled(NoticeOutcome::Foreign));
    }
}
