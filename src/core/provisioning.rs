//! ProvisioningRequests (cluster-autoscaler's `autoscaling.x-k8s.io/v1`
//! API, which Kueue's ProvisioningRequest admission check uses): capacity
//! asked for before the pods exist, all or nothing. One pure step per round
//! ([`step`]) says, for every request of a class served here, which
//! condition to set next, which stand-in pods are demand for the planner,
//! and which hold room on ready nodes.
//!
//! - `best-effort-atomic-scale-up.autoscaling.x-k8s.io`: the request's pods
//!   are one gang of stand-ins, so the planner launches capacity for all of
//!   them or none. `Provisioned=True` (`CapacityIsProvisioned`) once they
//!   all fit on ready nodes; `Failed=True` when the planner finds no place
//!   for them (`CapacityIsNotFound`, with its reason), when their pod
//!   template cannot be read (`FailedToCreatePods`) or when
//!   `ValidUntilSeconds` passes first (`Expired`).
//! - `check-capacity.autoscaling.x-k8s.io`: answered from the ready nodes,
//!   never launching: `Provisioned=True` (`CapacityIsFound`), else
//!   `Provisioned=False` (`CapacityIsNotFound`), or `Failed=True` with
//!   `noRetry: "true"`.
//!
//! Provisioned capacity is held (stand-ins bound to ready nodes as
//! do-not-disrupt pods, so consolidation leaves the nodes alone) for the
//! pods that do not consume it yet, for [`BOOKING`] after provisioning,
//! then `BookingExpired=True` (`CapacityReservationTimeExpired`) releases
//! it. Held capacity that no longer fits (a spot reclaim took a node)
//! is `CapacityRevoked=True`. Conditions `Failed`, `BookingExpired` and
//! `CapacityRevoked` end a request. See `docs/provisioning-requests.md`.

use super::{BoundPod, ManagedNode, Time};
use crate::api::foreign::{conditions as c, reasons as r};
use crate::cluster::{GroupRef, Pod};
use std::time::Duration;

/// How long provisioned capacity is held for its pods (cluster-autoscaler's
/// default reservation time).
pub const BOOKING: Duration = Duration::from_secs(10 * 60);

/// The two classes served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `best-effort-atomic-scale-up.autoscaling.x-k8s.io`.
    Atomic,
    /// `check-capacity.autoscaling.x-k8s.io`.
    CheckCapacity,
}

/// A request as the driver read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `namespace/name`.
    pub name: String,
    /// Its class.
    pub class: Class,
    /// One pod per requested pod, shaped by its PodSet's template, or why
    /// the templates could not be read.
    pub pods: Result<Vec<Pod>, String>,
    /// Pods that exist and consume it
    /// (`autoscaling.x-k8s.io/consume-provisioning-request`).
    pub consumed: usize,
    /// When `ValidUntilSeconds` runs out, if set, or why it cannot be
    /// read (the request then fails with `InvalidParameters`).
    pub valid_until: Result<Option<Time>, String>,
    /// `noRetry: "true"` (check-capacity).
    pub no_retry: bool,
    /// Conditions already set: `(type, status is True, reason, since)`.
    pub conditions: Vec<(String, bool, String, Time)>,
}

/// A condition to set on a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The request (`namespace/name`).
    pub request: String,
    /// Condition type.
    pub condition: &'static str,
    /// `True` or `False`.
    pub status: bool,
    /// Reason, as cluster-autoscaler words it.
    pub reason: &'static str,
    /// For people.
    pub message: String,
}

/// What one step decides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    /// Conditions to set (each differs from what the request has).
    pub transitions: Vec<Transition>,
    /// Stand-ins to plan capacity for (atomic requests not provisioned yet).
    pub pending: Vec<Pod>,
    /// Stand-ins holding provisioned room: `(node index, pod)`.
    pub held: Vec<(usize, BoundPod)>,
}

impl Request {
    fn condition(&self, t: &str) -> Option<&(String, bool, String, Time)> {
        self.conditions.iter().find(|(k, ..)| k == t)
    }

    fn is_true(&self, t: &str) -> bool {
        self.condition(t).is_some_and(|(_, s, ..)| *s)
    }

    /// The stand-ins still needed: the pods not consumed yet, one gang.
    fn stand_ins(&self) -> Vec<Pod> {
        let pods = self.pods.as_ref().map(Vec::as_slice).unwrap_or_default();
        let left = pods.len().saturating_sub(self.consumed);
        pods.iter()
            .take(left)
            .enumerate()
            .map(|(i, p)| {
                let mut p = p.clone();
                p.name = format!("{}.reserved-{i}", self.name);
                p.group = (left > 1).then(|| GroupRef {
                    name: self.name.clone(),
                    min_member: left as u32,
                });
                // Kueue's required topology for the pod set: one zone, one
                // network block, or a reason (as a PodGroup's constraint).
                if let Some(key) = p.required_topology.clone() {
                    let spec = crate::cluster::podgroups::PodGroupSpec {
                        topology: vec![key],
                        ..crate::cluster::podgroups::PodGroupSpec::of_size(left as u32)
                    };
                    crate::cluster::podgroups::apply(&mut p, &self.name, &spec);
                }
                p
            })
            .collect()
    }
}

/// Where `pods` fit whole on the ready, schedulable `nodes` not already
/// used by `taken`: `(node index, pod)` placements, or `None`.
fn fit(pods: &[Pod], nodes: &[ManagedNode], taken: &[(usize, BoundPod)]) -> Option<Vec<usize>> {
    let ready: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].ready_at.is_some() && !nodes[i].state.unschedulable)
        .collect();
    let states: Vec<crate::cluster::NodeState> = ready
        .iter()
        .map(|&i| {
            let mut s = nodes[i].state.clone();
            for (_, b) in taken.iter().filter(|(n, _)| *n == i) {
                s.used.add(&b.pod.requests);
            }
            s
        })
        .collect();
    let all: Vec<usize> = (0..pods.len()).collect();
    let (placed, left) = crate::plan::pack::place_on_existing(pods, &all, &states);
    if !left.is_empty() {
        return None;
    }
    let mut at = vec![0; pods.len()];
    for (p, n) in placed {
        at[p] = ready[n];
    }
    Some(at)
}

/// One round over `requests` (in order: earlier requests take room first)
/// against our `nodes`. `unplaceable` says why the last plan found no place
/// for a stand-in, if it did not.
pub fn step(
    requests: &[Request],
    nodes: &[ManagedNode],
    unplaceable: &dyn Fn(&str) -> Option<String>,
    now: Time,
) -> Step {
    let mut out = Step::default();
    for req in requests {
        let transitions = decide_one(req, nodes, unplaceable, now, &mut out);
        out.transitions.extend(transitions);
    }
    out
}

/// [`step`] for one request: its transitions; its stand-ins go into `out`.
fn decide_one(
    req: &Request,
    nodes: &[ManagedNode],
    unplaceable: &dyn Fn(&str) -> Option<String>,
    now: Time,
    out: &mut Step,
) -> Vec<Transition> {
    let mut ts = Vec::new();
    let mut set = |condition: &'static str, status: bool, reason: &'static str, message: String| {
        let same = req
            .condition(condition)
            .is_some_and(|(_, s, why, _)| *s == status && why == reason);
        if !same {
            ts.push(Transition {
                request: req.name.clone(),
                condition,
                status,
                reason,
                message,
            });
        }
    };
    if [c::FAILED, c::BOOKING_EXPIRED, c::CAPACITY_REVOKED]
        .iter()
        .any(|t| req.is_true(t))
    {
        return ts;
    }
    set(
        c::ACCEPTED,
        true,
        r::ACCEPTED,
        "ProvisioningRequest is accepted by Quartermaster".into(),
    );
    if let Err(e) = &req.valid_until {
        set(c::FAILED, true, r::INVALID_PARAMETERS, e.clone());
        return ts;
    }
    if let Err(e) = &req.pods {
        set(c::FAILED, true, r::FAILED_TO_CREATE_PODS, e.clone());
        return ts;
    }
    let stand_ins = req.stand_ins();
    let placed = fit(&stand_ins, nodes, &out.held);
    let hold = |out: &mut Step, at: Vec<usize>| {
        for (pod, n) in stand_ins.iter().zip(at) {
            // Held room is no running gang: nothing to checkpoint or drain
            // together.
            let mut pod = pod.clone();
            pod.group = None;
            out.held.push((
                n,
                BoundPod {
                    pod,
                    do_not_disrupt: true,
                    checkpoint_completed: None,
                    pdb: None,
                    placeholder: false,
                    started: None,
                },
            ));
        }
    };
    if let Some((_, true, _, since)) = req.condition(c::PROVISIONED) {
        if now >= super::time::after(*since, BOOKING) {
            set(
                c::BOOKING_EXPIRED,
                true,
                r::CAPACITY_RESERVATION_TIME_EXPIRED,
                "Capacity reservation time is expired".into(),
            );
        } else if let Some(at) = placed {
            hold(out, at);
        } else {
            set(
                c::CAPACITY_REVOKED,
                true,
                c::CAPACITY_REVOKED,
                "part of the provisioned capacity is gone (a spot reclaim or a failed node)".into(),
            );
        }
        return ts;
    }
    match (req.class, placed) {
        (Class::Atomic, Some(at)) => {
            set(
                c::PROVISIONED,
                true,
                r::CAPACITY_IS_PROVISIONED,
                "Capacity is provisioned in the cluster".into(),
            );
            hold(out, at);
        }
        (Class::CheckCapacity, Some(at)) => {
            set(
                c::PROVISIONED,
                true,
                r::CAPACITY_IS_FOUND,
                "Capacity is found in the cluster".into(),
            );
            hold(out, at);
        }
        (Class::CheckCapacity, None) if req.no_retry => set(
            c::FAILED,
            true,
            r::CAPACITY_IS_NOT_FOUND,
            "Capacity is not found in the cluster".into(),
        ),
        (Class::CheckCapacity, None) => set(
            c::PROVISIONED,
            false,
            r::CAPACITY_IS_NOT_FOUND,
            "Capacity is not found in the cluster; checking again".into(),
        ),
        (Class::Atomic, None) => {
            if req
                .valid_until
                .as_ref()
                .is_ok_and(|t| t.is_some_and(|t| now >= t))
            {
                set(
                    c::FAILED,
                    true,
                    r::EXPIRED,
                    "ValidUntilSeconds passed before the capacity was provisioned".into(),
                );
            } else if let Some(why) = stand_ins.iter().find_map(|p| unplaceable(&p.name)) {
                set(c::FAILED, true, r::CAPACITY_IS_NOT_FOUND, why);
            } else {
                out.pending.extend(stand_ins);
            }
        }
    }
    ts
}

#[cfg(test)]
mod tests {
    use super::super::interruption::fixtures::{node, t, NodeExt};
    use super::*;
    use crate::api::labels::RESOURCE_GPU;
    use crate::cluster::Resources;

    fn request(class: Class, pods: usize) -> Request {
        Request {
            name: "ml/train".into(),
            class,
            pods: Ok((0..pods)
                .map(|_| Pod::new("", Resources::new().with(RESOURCE_GPU, 1)))
                .collect()),
            consumed: 0,
            valid_until: Ok(None),
            no_retry: false,
            conditions: Vec::new(),
        }
    }

    fn with(mut r: Request, condition: &str, status: bool, reason: &str, since: Time) -> Request {
        r.conditions
            .push((condition.into(), status, reason.into(), since));
        r
    }

    fn conditions(s: &Step) -> Vec<(&str, bool, &str)> {
        s.transitions
            .iter()
            .map(|t| (t.condition, t.status, t.reason))
            .collect()
    }

    fn never(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn an_atomic_request_is_accepted_and_planned_as_one_gang_of_stand_ins() {
        let s = step(&[request(Class::Atomic, 3)], &[], &never, t(0));
        assert_eq!(conditions(&s), [("Accepted", true, "Accepted")]);
        let names: Vec<&str> = s.pending.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "ml/train.reserved-0",
                "ml/train.reserved-1",
                "ml/train.reserved-2"
            ]
        );
        assert!(s
            .pending
            .iter()
            .all(|p| p.group.as_ref().unwrap().min_member == 3));
    }

    #[test]
    fn it_is_provisioned_once_every_stand_in_fits_on_ready_nodes_and_the_room_is_held() {
        let nodes = [node("n1"), node("n2")];
        let req = with(
            request(Class::Atomic, 2),
            "Accepted",
            true,
            "Accepted",
            t(0),
        );
        let s = step(std::slice::from_ref(&req), &nodes, &never, t(60));
        assert_eq!(
            conditions(&s),
            [("Provisioned", true, "CapacityIsProvisioned")]
        );
        assert!(s.pending.is_empty(), "nothing more to launch");
        let on: Vec<usize> = s.held.iter().map(|(n, _)| *n).collect();
        assert_eq!(on, [0, 1]);
        assert!(s
            .held
            .iter()
            .all(|(_, b)| b.do_not_disrupt && b.pod.group.is_none()));

        // One consuming pod exists: one stand-in is held, for the other.
        let mut consumed = with(req, "Provisioned", true, "CapacityIsProvisioned", t(60));
        consumed.consumed = 1;
        let s = step(&[consumed.clone()], &nodes, &never, t(120));
        assert_eq!(conditions(&s), []);
        assert_eq!(s.held.len(), 1);

        // The booking ends.
        let s = step(&[consumed], &nodes, &never, t(60 + 600));
        assert_eq!(
            conditions(&s),
            [("BookingExpired", true, "CapacityReservationTimeExpired")]
        );
        assert!(s.held.is_empty());
    }

    #[test]
    fn a_node_lost_under_held_capacity_revokes_it() {
        let req = with(
            with(
                request(Class::Atomic, 2),
                "Accepted",
                true,
                "Accepted",
                t(0),
            ),
            "Provisioned",
            true,
            "CapacityIsProvisioned",
            t(60),
        );
        let s = step(&[req], &[node("n1")], &never, t(120));
        assert_eq!(
            conditions(&s),
            [("CapacityRevoked", true, "CapacityRevoked")]
        );
        assert!(s.pending.is_empty() && s.held.is_empty());
    }

    #[test]
    fn an_atomic_request_the_planner_cannot_place_fails_and_launches_nothing() {
        let req = with(
            request(Class::Atomic, 2),
            "Accepted",
            true,
            "Accepted",
            t(0),
        );
        let why =
            |p: &str| (p == "ml/train.reserved-1").then(|| "no pool offers 1 GPU".to_string());
        let s = step(std::slice::from_ref(&req), &[], &why, t(10));
        assert_eq!(conditions(&s), [("Failed", true, "CapacityIsNotFound")]);
        assert_eq!(s.transitions[0].message, "no pool offers 1 GPU");
        assert!(s.pending.is_empty());
        // A failed request is over.
        let failed = with(req, "Failed", true, "CapacityIsNotFound", t(10));
        assert_eq!(step(&[failed], &[], &never, t(20)), Step::default());
    }

    #[test]
    fn an_atomic_request_past_valid_until_or_with_a_bad_template_fails() {
        let mut late = request(Class::Atomic, 1);
        late.valid_until = Ok(Some(t(100)));
        let s = step(&[late], &[], &never, t(100));
        assert_eq!(
            conditions(&s),
            [("Accepted", true, "Accepted"), ("Failed", true, "Expired")]
        );
        let mut bad = request(Class::Atomic, 1);
        bad.pods = Err("podTemplate ml/missing not found".into());
        let s = step(&[bad], &[], &never, t(0));
        assert_eq!(s.transitions[1].reason, "FailedToCreatePods");
        let mut unreadable = request(Class::Atomic, 1);
        unreadable.valid_until = Err("ValidUntilSeconds=\"soon\" is not a number".into());
        let s = step(&[unreadable], &[], &never, t(0));
        assert_eq!(
            conditions(&s),
            [
                ("Accepted", true, "Accepted"),
                ("Failed", true, "InvalidParameters")
            ]
        );
        assert!(s.transitions[1].message.contains("soon"));
        assert!(s.pending.is_empty());
    }

    #[test]
    fn check_capacity_is_answered_from_ready_nodes_without_launching() {
        let s = step(
            &[request(Class::CheckCapacity, 1)],
            &[node("n1")],
            &never,
            t(0),
        );
        assert_eq!(
            conditions(&s),
            [
                ("Accepted", true, "Accepted"),
                ("Provisioned", true, "CapacityIsFound")
            ]
        );
        assert!(s.pending.is_empty());

        let in_flight = [node("n1").not_ready()];
        let s = step(
            &[request(Class::CheckCapacity, 1)],
            &in_flight,
            &never,
            t(0),
        );
        assert_eq!(s.transitions[1].reason, "CapacityIsNotFound");
        assert!(!s.transitions[1].status);
        assert!(s.pending.is_empty(), "check-capacity never launches");

        let mut no_retry = request(Class::CheckCapacity, 1);
        no_retry.no_retry = true;
        let s = step(&[no_retry], &[], &never, t(0));
        assert_eq!(s.transitions[1].condition, "Failed");
    }

    #[test]
    fn earlier_requests_take_the_room_first() {
        let mut second = request(Class::CheckCapacity, 1);
        second.name = "ml/second".into();
        let s = step(
            &[request(Class::CheckCapacity, 1), second],
            &[node("n1")],
            &never,
            t(0),
        );
        let provisioned: Vec<(&str, bool)> = s
            .transitions
            .iter()
            .filter(|t| t.condition == "Provisioned")
            .map(|t| (t.request.as_str(), t.status))
            .collect();
        assert_eq!(provisioned, [("ml/train", true), ("ml/second", false)]);
    }
}
