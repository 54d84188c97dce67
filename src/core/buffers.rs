//! CapacityBuffers (`autoscaling.x-k8s.io/v1beta1`, as cluster-autoscaler
//! 1.37 and Karpenter serve them): spare capacity for `replicas` copies
//! ("chunks") of a PodTemplate's pod, within `limits`. One pure step per
//! round ([`step`]) turns each buffer into placeholder pods and says where
//! they stand:
//!
//! - placeholders that fit in the room our nodes (ready or in flight) have
//!   left once the real pending pods are placed are *held* there: bound to
//!   the node as do-not-disrupt pods, so consolidation keeps off it while
//!   the buffer wants it. Real pods come first: a real pod may take a
//!   placeholder's room, and the placeholder it displaced is planned anew
//!   (the buffer refills), unless the buffer is one-shot ([`Refill`]):
//!   then the real pods that match its chunk consume it, and consumed
//!   chunks are not made again;
//! - the others are demand for the planner, priced and placed by the MIP
//!   like any pod and counted in NodePool limits;
//! - the buffer's conditions: `ReadyForProvisioning` once its chunks are
//!   resolved, `Provisioning` (`True` once every chunk has room on a Ready
//!   node, `False` while capacity is launching or all was consumed), and
//!   `Infeasible` (proposed upstream) with the planner's reason when no
//!   pool can hold a chunk, or with what is wrong when the buffer cannot be
//!   read. A buffer that cannot be read gets conditions, never a panic.
//!
//! Placeholders are named `<namespace>/<buffer>.buffer.reserved-<i>`: like
//! every stand-in ([`crate::cluster::podgroups::is_reservation`]) they get
//! no pod Events and are never evicted. See `docs/buffers.md`.

use super::{BoundPod, ManagedNode, Time};
use crate::api::foreign::buffer_conditions as c;
use crate::api::PrewarmWindow;
use crate::cluster::podgroups::is_reservation;
use crate::cluster::resources::PODS;
use crate::cluster::{NodeState, Pod, Resources};
use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

/// Why a buffer cannot be served: a condition reason and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Condition reason ([`c::POD_TEMPLATE_NOT_FOUND`], ...).
    pub reason: &'static str,
    /// For people.
    pub message: String,
}

impl Problem {
    /// A problem with the buffer's spec ([`c::INVALID_SPEC`]).
    pub fn spec(message: impl Into<String>) -> Problem {
        Problem {
            reason: c::INVALID_SPEC,
            message: message.into(),
        }
    }
}

/// A buffer as the driver read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Buffer {
    /// `namespace/name`.
    pub name: String,
    /// The pod one chunk is, from its PodTemplate, or why there is none.
    pub pod: Result<Pod, Problem>,
    /// `spec.replicas`, if set.
    pub replicas: Option<i64>,
    /// `spec.percentage` of the `spec.scalableRef`'s current replicas, once
    /// the driver resolved the workload ([`Share`]).
    pub share: Option<Share>,
    /// `spec.limits`, if set.
    pub limits: Option<Resources>,
    /// When the buffer is wanted, if only at times (its schedule,
    /// time zone and duration; `capacity` is not read): outside it, the
    /// buffer makes no chunk.
    pub window: Option<PrewarmWindow>,
    /// Whether consumed chunks are made again.
    pub refill: Refill,
}

/// Whether a buffer makes its consumed chunks again (`refillStrategy`, as
/// proposed upstream in kubernetes/autoscaler#10108 and
/// kubernetes-sigs/karpenter#3257; `docs/buffers.md`, "One-shot buffers").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Refill {
    /// `recreate`: the buffer keeps its chunks, whoever takes their room.
    #[default]
    Recreate,
    /// `none`: a chunk taken by a matching real pod ([`consumes`]) is
    /// consumed and not made again; what was consumed in earlier rounds
    /// is what the driver kept on the buffer.
    OneShot(Consumed),
}

/// What consumed a one-shot buffer's chunks so far: it only grows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Consumed {
    /// Chunks consumed.
    pub count: u64,
    /// The pods (`namespace/name`) counted: each counts once however many
    /// rounds it runs, and a pod that binds after another finished counts
    /// anew.
    pub by: BTreeSet<String>,
}

/// A buffer sized as a share of a scalable workload: `percentage` of its
/// `of` current replicas (`spec.percentage` of the `spec.scalableRef`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// `spec.percentage`.
    pub percentage: i64,
    /// The workload's current replicas.
    pub of: i64,
}

impl Share {
    /// The chunks the share asks for: `percentage` of `of`, rounded up and
    /// at least one when the percentage is not zero (as the v1beta1 API
    /// defines it: 20% of 10 replicas is 2 chunks, 20% of 1 is 1).
    ///
    /// # Errors
    /// A [`Problem`] when the percentage or the replica count is negative.
    pub fn chunks(&self) -> Result<u64, Problem> {
        let percentage = u64::try_from(self.percentage).map_err(|_| {
            Problem::spec(format!("spec.percentage is negative ({})", self.percentage))
        })?;
        let of = u64::try_from(self.of).map_err(|_| {
            Problem::spec(format!(
                "the scalableRef's replicas are negative ({})",
                self.of
            ))
        })?;
        if percentage == 0 {
            return Ok(0);
        }
        Ok(of.saturating_mul(percentage).div_ceil(100).max(1))
    }
}

/// How long before a scheduled buffer's window opens its chunks are made
/// when the driver has no learned lead ([`step_with_lead`]): 1.25 x the
/// slowest default launch-to-ready time (10 min, p5), so its capacity is
/// Ready when the window opens.
pub const SCHEDULE_LEAD: Duration = Duration::from_secs(750);

/// Whether a scheduled buffer wants its chunks at `now` (its window is
/// warming or open, [`SCHEDULE_LEAD`] ahead), or why its window does not
/// read.
fn in_window(b: &Buffer, now: Time, lead: Duration) -> Result<bool, Problem> {
    let Some(w) = &b.window else {
        return Ok(true);
    };
    match super::prewarm::current_start(&b.name, w, now, lead) {
        Ok(start) => Ok(start.is_some()),
        Err(super::prewarm::Error::Schedule { source, .. }) => {
            Err(Problem::spec(format!("schedule: {source}")))
        }
        Err(super::prewarm::Error::Duration { source, .. }) => {
            Err(Problem::spec(format!("duration: {source}")))
        }
        Err(e) => Err(Problem::spec(e.to_string())),
    }
}

/// The next instant after `now` a scheduled buffer's window starts warming
/// (`lead` of its chunk ahead), opens or closes: when a driver should run
/// [`step`] again; `None` without such a window (or one that does not
/// read, or a buffer without a pod).
pub fn next_deadline(
    buffers: &[Buffer],
    now: Time,
    lead: &dyn Fn(&Pod) -> Duration,
) -> Option<Time> {
    buffers
        .iter()
        .filter_map(|b| {
            let w = b.window.as_ref()?;
            let pod = b.pod.as_ref().ok()?;
            super::prewarm::window_deadline(&b.name, w, now, lead(pod))
                .ok()
                .flatten()
        })
        .min()
}

/// A condition to have on a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    /// Condition type.
    pub condition: &'static str,
    /// `True` or `False`.
    pub status: bool,
    /// Reason.
    pub reason: &'static str,
    /// For people.
    pub message: String,
}

/// What a buffer's status should say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The buffer (`namespace/name`).
    pub buffer: String,
    /// Placeholder pods made for it (`status.replicas`).
    pub replicas: u32,
    /// Of those, the ones with room held on our nodes (the others are
    /// demand for the planner).
    pub held: u32,
    /// Its conditions, each type once.
    pub conditions: Vec<Set>,
    /// For a one-shot buffer, what consumed its chunks so far (never less
    /// than what it was read with): what the driver persists.
    pub consumed: Option<Consumed>,
}

/// What one step decides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    /// Every buffer's status.
    pub statuses: Vec<Status>,
    /// Placeholders to plan capacity for.
    pub pending: Vec<Pod>,
    /// Placeholders holding room: `(node index, pod)`.
    pub held: Vec<(usize, BoundPod)>,
}

/// The name of a buffer's `i`-th placeholder.
pub fn placeholder_name(buffer: &str, i: usize) -> String {
    format!("{buffer}.buffer.reserved-{i}")
}

/// Whether the pod is a buffer's chunk ([`placeholder_name`]), not real
/// work: consolidation does not restart a node's `consolidateAfter` clock
/// for it (`docs/buffers.md`, "When a window closes").
pub fn is_chunk(pod: &str) -> bool {
    // From the end: every round asks this of every pod on every node, and
    // searching the name for the marker was a tenth of a long simulation.
    let head = pod.trim_end_matches(|c: char| c.is_ascii_digit());
    let head = head.strip_suffix('+').unwrap_or(head);
    head.ends_with(".buffer.reserved-") && pod[head.len()..].parse::<u32>().is_ok()
}

/// How many chunks of `pod` the buffer asks for: `replicas` (or the
/// larger of `replicas` and its [`Share`], as the v1beta1 API defines both
/// set), at most as many as fit in `limits` (the resources the pod asks
/// for, each counted over all chunks; the pod slot aside); with `limits`
/// alone, as many as fit in them.
///
/// # Errors
/// A [`Problem`] when `replicas` is negative or past what can be counted,
/// when neither `replicas` nor `limits` is set, or when only `limits` is
/// set and they bound none of the resources the pod asks for.
pub fn chunks(b: &Buffer, pod: &Pod) -> Result<u64, Problem> {
    let replicas = match b.replicas {
        Some(r) => Some(
            u64::try_from(r)
                .map_err(|_| Problem::spec(format!("spec.replicas is negative ({r})")))?,
        ),
        None => None,
    };
    let replicas = match (replicas, b.share.as_ref().map(Share::chunks).transpose()?) {
        (Some(r), Some(s)) => Some(r.max(s)),
        (r, s) => r.or(s),
    };
    let fit = b.limits.as_ref().and_then(|limits| {
        limits
            .iter()
            .filter(|(r, _)| *r != PODS)
            .filter_map(|(r, most)| {
                let each = pod.requests.get(r);
                (each > 0).then(|| (most.max(0) / each) as u64)
            })
            .min()
    });
    match (replicas, fit, &b.limits) {
        (Some(r), Some(f), _) => Ok(r.min(f)),
        (Some(r), None, _) => Ok(r),
        (None, Some(f), _) => Ok(f),
        (None, None, Some(_)) => Err(Problem::spec(
            "spec.limits bound none of the resources the pod template asks for, and spec.replicas is not set",
        )),
        (None, None, None) => Err(Problem::spec(
            "neither spec.replicas, spec.percentage nor spec.limits is set",
        )),
    }
}

/// Whether the real pod `real` consumes a chunk `chunk` of the buffer
/// `buffer` (`namespace/name`): it runs in the buffer's namespace, carries
/// every label of the chunk's pod, and asks for no more of any resource
/// than the chunk holds (so it fits in the chunk's room). Stand-ins
/// ([`is_reservation`]) consume nothing. Like the Karpenter proposal
/// (kubernetes-sigs/karpenter#3257), a pod bound to a node counts; a pod
/// the scheduler has not bound yet only keeps its chunk from being made
/// again ([`step`]).
pub fn consumes(buffer: &str, chunk: &Pod, real: &Pod) -> bool {
    let ns = |n: &str| n.split_once('/').map(|(ns, _)| ns.to_owned());
    !is_reservation(&real.name)
        && ns(buffer) == ns(&real.name)
        && chunk
            .labels
            .iter()
            .all(|(k, v)| real.labels.get(k) == Some(v))
        && real
            .requests
            .iter()
            .filter(|(r, _)| *r != PODS)
            .all(|(r, q)| q <= chunk.requests.get(r))
}

/// What consumed a one-shot buffer's chunks by this round: `before`, and
/// the real pods bound to our nodes that consume a chunk ([`consumes`]) and
/// were not counted yet, while fewer than `wanted` are; with the count of
/// matching pods not bound yet (taking chunks, not counted). Each real pod
/// consumes at most one chunk of all buffers (`taken`, in buffer order).
fn consume(
    buffer: &str,
    chunk: &Pod,
    wanted: u64,
    before: &Consumed,
    nodes: &[ManagedNode],
    pending: &[Pod],
    taken: &mut HashSet<String>,
) -> (Consumed, u64) {
    let mut now = before.clone();
    now.count = now.count.max(now.by.len() as u64);
    let bound = nodes
        .iter()
        .flat_map(|n| &n.pods)
        .filter(|b| !b.placeholder)
        .map(|b| &b.pod);
    for p in bound {
        if now.by.contains(&p.name) {
            taken.insert(p.name.clone());
        } else if now.count < wanted && consumes(buffer, chunk, p) && taken.insert(p.name.clone()) {
            now.by.insert(p.name.clone());
            now.count += 1;
        }
    }
    let waiting = pending
        .iter()
        .filter(|p| {
            !now.by.contains(&p.name) && consumes(buffer, chunk, p) && taken.insert(p.name.clone())
        })
        .count() as u64;
    (now, waiting)
}

/// The placeholders of buffer `name`: `n` copies of `pod`.
fn placeholders(name: &str, pod: &Pod, n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = pod.clone();
            p.name = placeholder_name(name, i);
            p.group = None;
            p
        })
        .collect()
}

/// Places `pods` on `states` (first fit, as the planner places pods on
/// existing nodes), taking their room: `(pod index, node index)` pairs and
/// the indices of the pods left over.
fn take_room(pods: &[Pod], states: &mut [NodeState]) -> (Vec<(usize, usize)>, Vec<usize>) {
    let all: Vec<usize> = (0..pods.len()).collect();
    let (placed, left) = crate::plan::pack::place_on_existing(pods, &all, states);
    for &(p, n) in &placed {
        states[n].used.add(&pods[p].requests);
    }
    (placed, left)
}

fn set(condition: &'static str, status: bool, reason: &'static str, message: String) -> Set {
    Set {
        condition,
        status,
        reason,
        message,
    }
}

/// One round over `buffers` (in order: earlier buffers take room and the
/// batch cap first) against our `nodes`, after the real `pending` pods
/// (which take the nodes' room first). At most `max_pods` placeholders are
/// made for all buffers together (`--max-batch-pods`); `unplaceable` says
/// why the last plan found no place for a placeholder, if it did not. A
/// scheduled buffer makes chunks only while its window is warming or open
/// at `now`.
pub fn step(
    buffers: &[Buffer],
    nodes: &[ManagedNode],
    pending: &[Pod],
    unplaceable: &dyn Fn(&str) -> Option<String>,
    max_pods: usize,
    now: Time,
) -> Step {
    step_with_lead(buffers, nodes, pending, unplaceable, max_pods, now, &|_| {
        SCHEDULE_LEAD
    })
}

/// [`step`] with a scheduled buffer's chunks made `lead(chunk)` before its
/// windows open (the core's learned launch lead of the pools that could
/// hold the chunk: [`super::Core::buffer_lead`]).
pub fn step_with_lead(
    buffers: &[Buffer],
    nodes: &[ManagedNode],
    pending: &[Pod],
    unplaceable: &dyn Fn(&str) -> Option<String>,
    max_pods: usize,
    now: Time,
    lead: &dyn Fn(&Pod) -> Duration,
) -> Step {
    let mut states: Vec<NodeState> = nodes.iter().map(|n| n.state.clone()).collect();
    take_room(pending, &mut states);
    let mut left = max_pods as u64;
    let mut out = Step::default();
    let mut taken = HashSet::new();
    for b in buffers {
        let resolved = b
            .pod
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|pod| Ok((pod, chunks(b, pod)?, in_window(b, now, lead(pod))?)));
        let resolved = match resolved {
            Ok((_, wanted, false)) => {
                out.statuses.push(idle(
                    b,
                    c::OUTSIDE_SCHEDULE,
                    format!("{wanted} chunks, outside its schedule"),
                    "nothing to place outside its schedule",
                    persisted(b),
                ));
                continue;
            }
            Ok((pod, wanted, true)) => Ok((pod, wanted)),
            Err(p) => Err(p),
        };
        let (pod, wanted) = match resolved {
            Ok(r) => r,
            Err(p) => {
                out.statuses.push(Status {
                    buffer: b.name.clone(),
                    replicas: 0,
                    held: 0,
                    consumed: persisted(b),
                    conditions: vec![
                        set(
                            c::READY_FOR_PROVISIONING,
                            false,
                            p.reason,
                            p.message.clone(),
                        ),
                        set(c::INFEASIBLE, true, p.reason, p.message),
                    ],
                });
                continue;
            }
        };
        // A one-shot buffer makes only the chunks no real pod consumed or
        // is about to (a pending pod that matches takes its chunk's room
        // first, so that room is not launched again before the pod binds).
        let (wanted, consumed, one_shot) = match &b.refill {
            Refill::Recreate => (wanted, None, String::new()),
            Refill::OneShot(before) => {
                let (consumed, waiting) =
                    consume(&b.name, pod, wanted, before, nodes, pending, &mut taken);
                let taking = (consumed.count + waiting).min(wanted).max(consumed.count);
                let note = format!(
                    "; one-shot: {} of {wanted} consumed, {} taken by pending pods",
                    consumed.count,
                    taking - consumed.count
                );
                if taking >= wanted && wanted > 0 {
                    // Nothing left: it makes, holds and launches nothing.
                    out.statuses.push(idle(
                        b,
                        c::CONSUMED,
                        format!("{wanted} chunks{note}; consumed capacity is not refilled"),
                        "nothing left to place",
                        Some(consumed),
                    ));
                    continue;
                }
                (wanted - taking, Some(consumed), note)
            }
        };
        let n = wanted.min(left);
        left -= n;
        let mut ready = format!("{n} chunks");
        if n < wanted {
            ready += &format!(
                " of the {wanted} asked for: one plan considers at most {max_pods} pods (--max-batch-pods)"
            );
        }
        ready += &one_shot;
        let pods = placeholders(&b.name, pod, n as usize);
        let (placed, unplaced) = take_room(&pods, &mut states);
        for &(p, node) in &placed {
            out.held.push((
                node,
                BoundPod {
                    pod: pods[p].clone(),
                    do_not_disrupt: true,
                    checkpoint_completed: None,
                    pdb: None,
                    placeholder: false,
                    started: None,
                },
            ));
        }
        let why = unplaced.iter().find_map(|&i| unplaceable(&pods[i].name));
        let mut conditions = vec![set(
            c::READY_FOR_PROVISIONING,
            true,
            c::ATTRIBUTES_SET_SUCCESSFULLY,
            ready,
        )];
        match why {
            Some(why) => {
                conditions.push(set(c::PROVISIONING, false, c::NOT_PLACEABLE, why.clone()));
                conditions.push(set(c::INFEASIBLE, true, c::NOT_PLACEABLE, why));
            }
            None => {
                let ready = placed
                    .iter()
                    .filter(|&&(_, node)| nodes[node].ready_at.is_some())
                    .count();
                let set_ = if ready == placed.len() && unplaced.is_empty() {
                    set(
                        c::PROVISIONING,
                        true,
                        c::FITS_EXISTING_CAPACITY,
                        format!("{ready} chunks have room on Ready nodes"),
                    )
                } else {
                    set(
                        c::PROVISIONING,
                        false,
                        c::REQUIRES_NEW_CAPACITY,
                        format!(
                            "{ready} chunks have room on Ready nodes, {} on nodes not Ready yet; capacity for {} is being planned or launched",
                            placed.len() - ready,
                            unplaced.len()
                        ),
                    )
                };
                conditions.push(set_);
                conditions.push(set(
                    c::INFEASIBLE,
                    false,
                    c::PLACEABLE,
                    "a pool can hold its chunks".into(),
                ));
            }
        }
        // Unplaceable placeholders stay demand: the next plan says again
        // whether a pool can hold them (a pool may have changed).
        out.pending
            .extend(unplaced.into_iter().map(|i| pods[i].clone()));
        out.statuses.push(Status {
            buffer: b.name.clone(),
            replicas: n as u32,
            held: placed.len() as u32,
            conditions,
            consumed,
        });
    }
    out
}

/// The consumed count a one-shot buffer was read with (kept as it is when
/// the buffer makes no chunk this round).
fn persisted(b: &Buffer) -> Option<Consumed> {
    match &b.refill {
        Refill::Recreate => None,
        Refill::OneShot(consumed) => Some(consumed.clone()),
    }
}

/// The status of a buffer that makes no chunk this round, for `reason`
/// (`Provisioning=False`): outside its schedule, or a one-shot buffer all
/// of whose chunks real pods consumed (or are taking).
fn idle(
    b: &Buffer,
    reason: &'static str,
    message: String,
    placeable: &str,
    consumed: Option<Consumed>,
) -> Status {
    Status {
        buffer: b.name.clone(),
        replicas: 0,
        held: 0,
        consumed,
        conditions: vec![
            set(
                c::READY_FOR_PROVISIONING,
                true,
                c::ATTRIBUTES_SET_SUCCESSFULLY,
                message.clone(),
            ),
            set(c::PROVISIONING, false, reason, message),
            set(c::INFEASIBLE, false, c::PLACEABLE, placeable.into()),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::super::interruption::fixtures::{node, t};
    use super::*;
    use crate::api::labels::RESOURCE_GPU;
    use crate::cluster::resources::CPU;

    fn gpu_pod() -> Pod {
        Pod::new(
            "",
            Resources::new()
                .with(RESOURCE_GPU, 1)
                .with(CPU, 4000)
                .with(PODS, 1),
        )
    }

    fn buffer(replicas: Option<i64>, limits: Option<Resources>) -> Buffer {
        Buffer {
            name: "ml/warm".into(),
            pod: Ok(gpu_pod()),
            replicas,
            share: None,
            limits,
            window: None,
            refill: Refill::Recreate,
        }
    }

    fn never(_: &str) -> Option<String> {
        None
    }

    fn condition<'a>(s: &'a Status, t: &str) -> &'a Set {
        s.conditions.iter().find(|k| k.condition == t).unwrap()
    }

    #[test]
    fn limits_cap_the_replicas_and_alone_set_the_count() {
        let gpus = |n| Some(Resources::new().with(RESOURCE_GPU, n));
        let b = buffer(Some(5), gpus(3));
        assert_eq!(chunks(&b, &gpu_pod()), Ok(3));
        let b = buffer(Some(2), gpus(3));
        assert_eq!(chunks(&b, &gpu_pod()), Ok(2));
        let b = buffer(None, Some(Resources::new().with(CPU, 10_000).with(PODS, 1)));
        assert_eq!(chunks(&b, &gpu_pod()), Ok(2), "10 CPUs hold two 4-CPU pods");
        let b = buffer(None, Some(Resources::new().with("memory", 1 << 30)));
        let why = chunks(&b, &gpu_pod()).unwrap_err();
        assert!(why.message.contains("bound none"), "{why:?}");
    }

    #[test]
    fn zero_replicas_make_no_placeholder_and_negative_replicas_are_refused_with_a_reason() {
        let s = step(&[buffer(Some(0), None)], &[], &[], &never, 100, t(0));
        assert!(s.pending.is_empty() && s.held.is_empty());
        assert_eq!(s.statuses[0].replicas, 0);
        assert!(condition(&s.statuses[0], c::READY_FOR_PROVISIONING).status);

        let s = step(&[buffer(Some(-2), None)], &[], &[], &never, 100, t(0));
        assert!(s.pending.is_empty());
        let st = &s.statuses[0];
        let ready = condition(st, c::READY_FOR_PROVISIONING);
        assert!(!ready.status);
        assert_eq!(ready.reason, c::INVALID_SPEC);
        assert!(ready.message.contains("negative (-2)"), "{ready:?}");
        assert!(condition(st, c::INFEASIBLE).status);
        let none = step(&[buffer(None, None)], &[], &[], &never, 100, t(0));
        assert!(!condition(&none.statuses[0], c::READY_FOR_PROVISIONING).status);
    }

    #[test]
    fn a_buffer_without_room_becomes_named_placeholders_for_the_planner() {
        let s = step(&[buffer(Some(2), None)], &[], &[], &never, 100, t(0));
        let names: Vec<&str> = s.pending.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["ml/warm.buffer.reserved-0", "ml/warm.buffer.reserved-1"]
        );
        assert!(names
            .iter()
            .all(|n| crate::cluster::podgroups::is_reservation(n)));
        let st = &s.statuses[0];
        assert_eq!((st.replicas, st.held), (2, 0));
        assert_eq!(
            condition(st, c::PROVISIONING).reason,
            c::REQUIRES_NEW_CAPACITY
        );
        assert!(!condition(st, c::INFEASIBLE).status);
    }

    #[test]
    fn the_batch_cap_is_shared_by_buffers_in_order_and_said_in_the_status() {
        let mut second = buffer(Some(3), None);
        second.name = "ml/zz".into();
        let s = step(&[buffer(Some(3), None), second], &[], &[], &never, 4, t(0));
        assert_eq!(s.pending.len(), 4);
        assert_eq!(s.statuses[0].replicas, 3);
        assert_eq!(s.statuses[1].replicas, 1);
        let ready = condition(&s.statuses[1], c::READY_FOR_PROVISIONING);
        assert!(ready.message.contains("--max-batch-pods"), "{ready:?}");
    }

    #[test]
    fn placeholders_hold_room_left_after_real_pods_and_a_real_pod_displaces_one() {
        // One ready node with room for one chunk (a GPU and 4 CPUs).
        let nodes = vec![node("n1")];
        let want = 1;
        let s = step(&[buffer(Some(want), None)], &nodes, &[], &never, 100, t(0));
        assert_eq!(s.held.len() as i64, want, "every chunk has room");
        assert_eq!(s.statuses[0].held as i64, want);
        assert!(s.held.iter().all(|(_, b)| b.do_not_disrupt));
        assert!(s.pending.is_empty());
        assert_eq!(
            condition(&s.statuses[0], c::PROVISIONING).reason,
            c::FITS_EXISTING_CAPACITY
        );

        let mut real = gpu_pod();
        real.name = "ml/real-0".into();
        let s = step(
            &[buffer(Some(want), None)],
            &nodes,
            &[real],
            &never,
            100,
            t(0),
        );
        assert_eq!(s.held.len() as i64, want - 1, "the real pod came first");
        assert_eq!(s.pending.len(), 1, "the displaced chunk is planned anew");
    }

    #[test]
    fn a_chunk_is_named_by_the_last_marker_and_a_number_after_it() {
        // The definition the fast check must keep.
        let by_search = |pod: &str| {
            pod.rsplit_once(".buffer.reserved-")
                .is_some_and(|(_, i)| i.parse::<u32>().is_ok())
        };
        for pod in [
            "ml/warm.buffer.reserved-0",
            "ml/warm.buffer.reserved-17",
            "ml/warm.buffer.reserved-+3",
            "ml/warm.buffer.reserved-",
            "ml/warm.buffer.reserved-3x",
            "ml/warm.buffer.reserved-99999999999",
            "ml/a.buffer.reserved-1.buffer.reserved-2",
            "ml/a.buffer.reserved-1.other",
            "trace/instance_1234",
            "buffer.reserved-4",
            "",
        ] {
            assert_eq!(is_chunk(pod), by_search(pod), "{pod}");
        }
        assert!(is_chunk("ml/warm.buffer.reserved-17"));
        assert!(!is_chunk("trace/instance_1234"));
    }

    #[test]
    fn a_chunk_no_pool_can_hold_makes_the_buffer_infeasible_with_the_planners_reason() {
        let why = |p: &str| {
            p.ends_with("-0")
                .then(|| "no pool offers 64 GPUs".to_string())
        };
        let s = step(&[buffer(Some(1), None)], &[], &[], &why, 100, t(0));
        let st = &s.statuses[0];
        let inf = condition(st, c::INFEASIBLE);
        assert!(inf.status);
        assert_eq!(inf.reason, c::NOT_PLACEABLE);
        assert_eq!(inf.message, "no pool offers 64 GPUs");
        assert!(!condition(st, c::PROVISIONING).status);
    }

    #[test]
    fn a_missing_template_is_a_condition_not_demand() {
        let mut b = buffer(Some(2), None);
        b.pod = Err(Problem {
            reason: c::POD_TEMPLATE_NOT_FOUND,
            message: "podTemplate ml/gone not found".into(),
        });
        let s = step(&[b], &[], &[], &never, 100, t(0));
        assert!(s.pending.is_empty());
        let inf = condition(&s.statuses[0], c::INFEASIBLE);
        assert_eq!(inf.reason, c::POD_TEMPLATE_NOT_FOUND);
        assert!(inf.status);
    }

    #[test]
    fn a_scheduled_buffer_makes_chunks_from_its_lead_through_its_window_and_none_outside() {
        let mut b = buffer(Some(2), None);
        b.window = Some(PrewarmWindow {
            name: "ml/warm".into(),
            schedule: "0 8 * * *".into(),
            time_zone: "Europe/Berlin".into(),
            duration: "1h".into(),
            capacity: Default::default(),
        });
        // On 2026-01-05 (Berlin is UTC+1) the window opens at 07:00 UTC
        // and warms from 06:47:30.
        let at = |h: i64, m: i64| {
            chrono::DateTime::from_timestamp(1_767_571_200 + h * 3600 + m * 60, 0).unwrap()
        };
        let made = |b: &Buffer, now| step(std::slice::from_ref(b), &[], &[], &never, 100, now);
        for (now, chunks) in [
            (at(6, 40), 0),
            (at(6, 50), 2),
            (at(7, 30), 2),
            (at(8, 1), 0),
        ] {
            let s = made(&b, now);
            assert_eq!(s.pending.len(), chunks, "{now}");
            assert_eq!(s.statuses[0].replicas as usize, chunks, "{now}");
        }
        let outside = made(&b, at(12, 0));
        let p = condition(&outside.statuses[0], c::PROVISIONING);
        assert_eq!((p.status, p.reason), (false, c::OUTSIDE_SCHEDULE));

        b.window.as_mut().unwrap().schedule = "at eight".into();
        let bad = made(&b, at(7, 30));
        assert!(bad.pending.is_empty());
        let ready = condition(&bad.statuses[0], c::READY_FOR_PROVISIONING);
        assert_eq!((ready.status, ready.reason), (false, c::INVALID_SPEC));
        assert!(ready.message.starts_with("schedule:"), "{ready:?}");
    }

    #[test]
    fn a_share_of_a_workload_rounds_up_to_at_least_one_chunk_and_the_larger_of_replicas_wins() {
        let share = |percentage, of| Share { percentage, of };
        assert_eq!(share(20, 10).chunks(), Ok(2));
        assert_eq!(share(25, 10).chunks(), Ok(3), "2.5 chunks round up");
        assert_eq!(share(20, 1).chunks(), Ok(1));
        assert_eq!(share(20, 0).chunks(), Ok(1), "at least one chunk");
        assert_eq!(share(0, 10).chunks(), Ok(0), "no share, no chunk");
        assert_eq!(share(-5, 10).chunks().unwrap_err().reason, c::INVALID_SPEC);
        let pod = gpu_pod();
        let with = |replicas, limits| Buffer {
            share: Some(share(50, 10)),
            ..buffer(replicas, limits)
        };
        assert_eq!(chunks(&with(None, None), &pod), Ok(5));
        assert_eq!(chunks(&with(Some(3), None), &pod), Ok(5));
        assert_eq!(chunks(&with(Some(7), None), &pod), Ok(7));
        // Limits cap the share as they cap replicas: 2 GPUs hold 2 chunks.
        let two = Resources::new().with(RESOURCE_GPU, 2);
        assert_eq!(chunks(&with(None, Some(two)), &pod), Ok(2));
    }

    /// A one-shot buffer `ml/warm` of `replicas` chunks of a pod labelled
    /// `app: train`, read with `consumed` chunks consumed before (by pods
    /// since gone).
    fn one_shot(replicas: i64, consumed: u64) -> Buffer {
        let mut pod = gpu_pod();
        pod.labels.insert("app".into(), "train".into());
        Buffer {
            pod: Ok(pod),
            refill: Refill::OneShot(Consumed {
                count: consumed,
                by: (0..consumed).map(|i| format!("ml/gone-{i}")).collect(),
            }),
            ..buffer(Some(replicas), None)
        }
    }

    /// A real pod `ml/<name>` of the buffer's shape, labelled `app: train`.
    fn trainer(name: &str) -> Pod {
        let mut p = gpu_pod();
        p.name = format!("ml/{name}");
        p.labels.insert("app".into(), "train".into());
        p.labels.insert("job".into(), "llm".into());
        p
    }

    /// `pod` bound to `node` (its room taken).
    fn bind(node: &mut ManagedNode, pod: Pod) {
        node.state.used.add(&pod.requests);
        node.pods.push(BoundPod {
            pod,
            do_not_disrupt: false,
            checkpoint_completed: None,
            pdb: None,
            placeholder: false,
            started: None,
        });
    }

    #[test]
    fn a_one_shot_buffer_does_not_refill_the_chunk_a_matching_pod_took() {
        let mut nodes = vec![node("n1"), node("n2")];
        let s = step(&[one_shot(2, 0)], &nodes, &[], &never, 100, t(0));
        assert_eq!(s.held.len(), 2);
        assert_eq!(s.statuses[0].consumed.as_ref().map(|c| c.count), Some(0));
        let p = condition(&s.statuses[0], c::PROVISIONING);
        assert_eq!((p.status, p.reason), (true, c::FITS_EXISTING_CAPACITY));

        bind(&mut nodes[0], trainer("llm-0"));
        let s = step(&[one_shot(2, 0)], &nodes, &[], &never, 100, t(10));
        assert!(
            s.pending.is_empty(),
            "the consumed chunk is not planned anew"
        );
        assert_eq!(s.held.len(), 1);
        assert_eq!(s.held[0].0, 1, "the other chunk keeps its node");
        let st = &s.statuses[0];
        let consumed = st.consumed.as_ref().unwrap();
        assert_eq!((st.replicas, consumed.count), (1, 1));
        assert!(consumed.by.contains("ml/llm-0"), "{consumed:?}");
        assert!(
            condition(st, c::READY_FOR_PROVISIONING)
                .message
                .contains("1 of 2 consumed"),
            "{st:?}"
        );

        // A buffer that refills plans the displaced chunk again.
        let refills = Buffer {
            refill: Refill::Recreate,
            ..one_shot(2, 0)
        };
        let s = step(&[refills], &nodes, &[], &never, 100, t(10));
        assert_eq!(s.pending.len(), 1);
        assert_eq!(s.statuses[0].consumed, None);
    }

    #[test]
    fn a_pending_matching_pod_keeps_its_chunk_from_being_launched_but_is_not_yet_consumed() {
        let nodes = vec![node("n1")];
        let s = step(
            &[one_shot(1, 0)],
            &nodes,
            &[trainer("llm-0")],
            &never,
            100,
            t(0),
        );
        assert!(s.pending.is_empty() && s.held.is_empty());
        let st = &s.statuses[0];
        assert_eq!(
            st.consumed.as_ref().map(|c| c.count),
            Some(0),
            "only a bound pod is counted"
        );
        let p = condition(st, c::PROVISIONING);
        assert_eq!((p.status, p.reason), (false, c::CONSUMED));
        assert!(p.message.contains("1 taken by pending pods"), "{p:?}");
    }

    #[test]
    fn a_fully_consumed_buffer_holds_nothing_and_its_count_never_drops() {
        // Read back after a restart: both chunks were consumed and their
        // pods are gone since.
        let nodes = vec![node("n1"), node("n2")];
        let s = step(&[one_shot(2, 2)], &nodes, &[], &never, 100, t(0));
        assert!(s.pending.is_empty() && s.held.is_empty());
        let st = &s.statuses[0];
        assert_eq!((st.replicas, st.consumed.as_ref().unwrap().count), (0, 2));
        let p = condition(st, c::PROVISIONING);
        assert_eq!((p.status, p.reason), (false, c::CONSUMED));
        assert!(!condition(st, c::INFEASIBLE).status);

        // One of three consumed before; no pod bound now: two chunks, and
        // the count stays.
        let s = step(&[one_shot(3, 1)], &nodes, &[], &never, 100, t(0));
        assert_eq!(s.held.len(), 2);
        assert_eq!(s.statuses[0].consumed.as_ref().map(|c| c.count), Some(1));
    }

    #[test]
    fn only_a_real_pod_of_the_buffers_namespace_labels_and_size_consumes_a_chunk() {
        let chunk = one_shot(1, 0).pod.unwrap();
        assert!(consumes("ml/warm", &chunk, &trainer("llm-0")));
        let mut other_ns = trainer("x");
        other_ns.name = "web/x".into();
        assert!(!consumes("ml/warm", &chunk, &other_ns));
        let mut unlabelled = trainer("x");
        unlabelled.labels.remove("app");
        assert!(!consumes("ml/warm", &chunk, &unlabelled));
        let mut bigger = trainer("x");
        bigger.requests.set(RESOURCE_GPU, 2);
        assert!(!consumes("ml/warm", &chunk, &bigger));
        let stand_in = trainer(&placeholder_name("other", 0));
        assert!(!consumes("ml/warm", &chunk, &stand_in));

        // One pod consumes one chunk of all buffers.
        let mut nodes = vec![node("n1"), node("n2")];
        bind(&mut nodes[0], trainer("llm-0"));
        let second = Buffer {
            name: "ml/zz".into(),
            ..one_shot(1, 0)
        };
        let s = step(&[one_shot(1, 0), second], &nodes, &[], &never, 100, t(0));
        assert_eq!(s.statuses[0].consumed.as_ref().map(|c| c.count), Some(1));
        assert_eq!(s.statuses[1].consumed.as_ref().map(|c| c.count), Some(0));
        assert_eq!(s.held.len(), 1, "the second buffer's chunk holds n2");
    }

    #[test]
    fn each_pod_counts_once_and_one_that_follows_a_finished_one_counts_anew() {
        let mut nodes = vec![node("n1"), node("n2")];
        bind(&mut nodes[0], trainer("llm-0"));
        let s = step(&[one_shot(2, 0)], &nodes, &[], &never, 100, t(0));
        let after_first = s.statuses[0].consumed.clone().unwrap();
        // Read back with what was kept: the same pod still running is not
        // counted twice.
        let again = Buffer {
            refill: Refill::OneShot(after_first.clone()),
            ..one_shot(2, 0)
        };
        let s = step(
            std::slice::from_ref(&again),
            &nodes,
            &[],
            &never,
            100,
            t(10),
        );
        assert_eq!(s.statuses[0].consumed.as_ref(), Some(&after_first));
        assert_eq!(s.held.len(), 1);
        // llm-0 finished; llm-1 runs on the other node: two consumed, the
        // buffer is used up though only one pod runs.
        let mut nodes = vec![node("n1"), node("n2")];
        bind(&mut nodes[1], trainer("llm-1"));
        let s = step(&[again], &nodes, &[], &never, 100, t(20));
        let st = &s.statuses[0];
        assert_eq!(st.consumed.as_ref().unwrap().count, 2);
        assert!(s.held.is_empty() && s.pending.is_empty());
        assert_eq!(condition(st, c::PROVISIONING).reason, c::CONSUMED);
    }
}
