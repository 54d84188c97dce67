//! Cloud notices, from the feed to the core, made durable before they are
//! let go: a spot interruption is first written to the API (the claim's
//! `Interrupted` condition, which carries the deadline, and the node's
//! cordon with `quartermaster.dev/disrupted`), then handed to the core,
//! then acknowledged to the feed, which only then deletes the message. A
//! restarted controller (or a new leader) reads the conditions back
//! ([`NoticeHandler::resume`]) and carries on with the response: cordon,
//! checkpoint request, drain.
//!
//! It decides nothing: what to do about an interruption is the core's.

use super::kube_api::{KubeApi, NodeChange};
use super::lifecycle::set_condition;
use super::snapshot::ClaimView;
use crate::api::nodeclaim::conditions;
use crate::api::NodeClaimStatus;
use crate::cloud::{instance_id_of, InstanceNotice, NoticeKind, NoticeOutcome};
use crate::core::{Notice, Time};
use kube::ResourceExt;
use std::collections::{HashSet, VecDeque};

/// Reason of the `Interrupted` condition.
pub const REASON: &str = "SpotInterruption";

/// Notices remembered (by event and instance) to act on a message delivered
/// twice only once.
const REMEMBERED: usize = 4096;

/// The text of the `Interrupted` condition's message; the deadline is its
/// last word.
fn message(deadline: Time) -> String {
    format!(
        "spot interruption warning: the instance is reclaimed at {}",
        super::checkpoint::rfc3339(deadline)
    )
}

/// The claim's status with its `Interrupted` condition set for a warning
/// that the instance is reclaimed at `deadline`.
pub fn interrupted_status(view: &ClaimView, deadline: Time, now: Time) -> NodeClaimStatus {
    let mut status = view.claim.status.clone().unwrap_or_default();
    set_condition(
        &mut status,
        conditions::INTERRUPTED,
        true,
        REASON,
        &message(deadline),
        now,
    );
    status
}

/// The deadline the claim's `Interrupted` condition records, if it has one.
pub fn recorded_deadline(view: &ClaimView) -> Option<Time> {
    let c = view
        .claim
        .status
        .as_ref()?
        .condition(conditions::INTERRUPTED)?;
    if c.status != "True" {
        return None;
    }
    let last = c.message.rsplit(' ').next()?;
    chrono::DateTime::parse_from_rfc3339(last)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
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
/// interruptions the core has heard of in this process.
#[derive(Debug, Default)]
pub struct NoticeHandler {
    seen: VecDeque<String>,
    seen_set: HashSet<String>,
    told: HashSet<String>,
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

    /// The interruptions recorded on claims that the core has not heard of
    /// in this process (all of them after a restart), as the core's
    /// notices; each claim once. Claims being deleted are left to their
    /// finalizer.
    pub fn resume(&mut self, views: &[ClaimView]) -> Vec<Notice> {
        let mut out = Vec::new();
        for v in views {
            let claim = v.claim.name_any();
            if v.claim.metadata.deletion_timestamp.is_some() || self.told.contains(&claim) {
                continue;
            }
            if let Some(deadline) = recorded_deadline(v) {
                tracing::info!(%claim, %deadline, "resuming a recorded spot interruption");
                self.told.insert(claim.clone());
                out.push(Notice::SpotInterruption { claim, deadline });
            }
        }
        out
    }

    /// Handles one notice against the claims (`views`, as the snapshot has
    /// them). A notice about no claim's instance is foreign, unless a claim
    /// is still launching (its instance may be this one: retried). A spot
    /// interruption is recorded first (only by the leader; `Retry` when not
    /// leading or when the write fails); other notices need no record. A
    /// notice settled before is `Recorded` again without acting.
    pub async fn handle(
        &mut self,
        n: &InstanceNotice,
        views: &[ClaimView],
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
        let view = views.iter().find(|v| {
            v.claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| instance_id_of(p) == n.instance_id)
        });
        let Some(view) = view else {
            let launching = views.iter().any(|v| {
                v.claim.metadata.deletion_timestamp.is_none()
                    && v.claim
                        .status
                        .as_ref()
                        .is_none_or(|s| s.provider_id.is_none())
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
        let NoticeKind::SpotInterruption { deadline } = n.kind else {
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
        if let Err(e) = record(api, view, deadline, now).await {
            tracing::warn!(%claim, error = %e, "cannot record the spot interruption; the notice is retried");
            return Handled::settled(NoticeOutcome::Retry);
        }
        self.remember(key);
        if !self.told.insert(claim.clone()) {
            // Recorded before (a notice delivered again after a restart
            // that resumed it): the core knows.
            return Handled::settled(NoticeOutcome::Recorded);
        }
        tracing::info!(%claim, %deadline, "spot interruption recorded");
        Handled {
            outcome: NoticeOutcome::Recorded,
            notices: vec![Notice::SpotInterruption { claim, deadline }],
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

/// Writes the record of a spot interruption: the claim's `Interrupted`
/// condition (unless there), then the node's cordon and disrupted taint
/// (unless there; a claim without a node yet has only the condition, and
/// the core cordons the node once it registers). Idempotent.
///
/// # Errors
/// The API error of the write that failed.
pub async fn record(
    api: &KubeApi,
    view: &ClaimView,
    deadline: Time,
    now: Time,
) -> kube::Result<()> {
    let claim = view.claim.name_any();
    if recorded_deadline(view).is_none() {
        api.patch_node_claim_status(&claim, &interrupted_status(view, deadline, now))
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
        let recorded = view("b", Some(interrupted_status(&plain, deadline, now)));
        assert_eq!(recorded_deadline(&recorded), Some(deadline));
        assert_eq!(recorded_deadline(&plain), None);
        let mut h = NoticeHandler::new();
        let views = [plain, recorded];
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
