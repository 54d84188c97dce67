//! Spot interruption response: one small state machine per node that received
//! a notice (interruption, rebalance recommendation, termination), and the
//! offerings that are out of capacity for a while. It decides cordons,
//! checkpoint requests, evictions and deletions; it does not launch the
//! replacements itself (the provisioner asks [`Interruptions::pods_needing_replacement`]
//! and plans them with the rest of the pending demand) and it does not learn
//! interruption rates (it hands the interrupted offering back from
//! [`Interruptions::handle`] for the estimator).
//!
//! The rules are written up in `docs/disruption.md`.

use super::time::{after, before, secs};
use super::{Action, DisruptionReason, ManagedNode, Notice, OfferingKey, Time, World};
use crate::api::{InterruptionPolicy, RebalanceAction};
use crate::catalog::{CapacityType, Offering};
use crate::cluster::Pod;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Checkpoint grace period used when the pool is unknown or its
/// `checkpointGracePeriod` does not parse (the CRD's default).
const DEFAULT_CHECKPOINT_GRACE: Duration = Duration::from_secs(90);

/// How long an offering that refused a launch or reclaimed a spot node is
/// kept out by default: Karpenter's `UnavailableOfferingsTTL` (3 minutes).
/// A reclaimed pool is not held out for its expected closure: a closed
/// pool refuses the next launch at once, and that refusal keeps it out
/// again. Measured on spot-training over 30 seeds, holding a reclaimed pool
/// out for its expected closure cost 15% more for the same lost work
/// (`docs/results.md`, "Keeping a reclaimed pool out").
pub const DEFAULT_UNAVAILABLE_TTL: Duration = Duration::from_secs(3 * 60);

/// Knobs of the interruption response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// How long an interrupted or capacity-starved offering is kept out of
    /// the planner's candidates.
    pub unavailable_ttl: Duration,
    /// Time kept between the end of the checkpoint wait and the spot
    /// deadline, for evictions and graceful shutdown.
    pub drain_grace: Duration,
    /// How long before a reservation's end its nodes are drained when EC2's
    /// expiry warning has not come (EC2 warns 40 minutes before a Capacity
    /// Block ends); also how close to its end a reservation stops taking
    /// launches (`Catalog::with_reservations`).
    pub reservation_lead: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            unavailable_ttl: DEFAULT_UNAVAILABLE_TTL,
            drain_grace: Duration::from_secs(30),
            reservation_lead: Duration::from_secs(40 * 60),
        }
    }
}

/// The key of an offering, as capacity errors and interruptions count it.
pub fn offering_key(o: &Offering) -> OfferingKey {
    OfferingKey {
        instance_type: o.instance_type.clone(),
        zone: o.zone_id.clone(),
        capacity_type: o.capacity_type,
    }
}

/// An offering's key as borrowed parts (instance type, zone ID, capacity
/// type): looked up in a per-plan map without building an [`OfferingKey`],
/// two strings, for every offering of every plan.
pub(crate) type KeyParts<'a> = (&'a str, &'a str, CapacityType);

/// [`offering_key`] as borrowed [`KeyParts`].
pub(crate) fn key_parts(o: &Offering) -> KeyParts<'_> {
    (&o.instance_type, &o.zone_id, o.capacity_type)
}

impl OfferingKey {
    /// The key as borrowed [`KeyParts`].
    pub(crate) fn parts(&self) -> KeyParts<'_> {
        (&self.instance_type, &self.zone, self.capacity_type)
    }
}

/// The clock's backstop for reservation ends: a
/// [`Notice::ReservationEnding`] for every node whose capacity reservation
/// (its `quartermaster.dev/capacity-reservation-id` label, looked up in the
/// catalog) ends within `lead` of `now`. Notices for nodes already being
/// handled are ignored by [`Interruptions::handle`], so EC2's warning and
/// this backstop never drain a node twice.
pub fn reservation_endings(world: &World, now: Time, lead: Duration) -> Vec<Notice> {
    // Every decision asks: without reservations, no node needs a look.
    if world.catalog.reservations().is_empty() {
        return Vec::new();
    }
    let horizon = after(now, lead);
    world
        .nodes
        .iter()
        .filter_map(|n| {
            let end = reservation_end(world, n)?;
            (end <= horizon).then(|| Notice::ReservationEnding {
                claim: n.claim.clone(),
                end,
            })
        })
        .collect()
}

/// When EC2 takes node `n` back because its reservation ends: the end of
/// the Capacity Block it runs in. An on-demand capacity reservation's end
/// takes nothing back (its instances run on as plain on-demand ones, as
/// Karpenter also leaves them), so its nodes are not drained.
fn reservation_end(world: &World, n: &ManagedNode) -> Option<Time> {
    let id = n
        .state
        .labels
        .get(crate::api::labels::CAPACITY_RESERVATION_ID)?;
    let r = world.catalog.reservation(id)?;
    (r.kind == crate::catalog::ReservationKind::CapacityBlock)
        .then_some(r.end)
        .flatten()
}

/// The next time a reservation of one of the world's nodes comes within
/// `lead` of its end (for the drivers' timers), if any is still ahead.
pub fn next_reservation_ending(world: &World, now: Time, lead: Duration) -> Option<Time> {
    if world.catalog.reservations().is_empty() {
        return None;
    }
    world
        .nodes
        .iter()
        .filter_map(|n| reservation_end(world, n).map(|e| before(e, lead)))
        .filter(|t| *t > now)
        .min()
}

/// The NodePool of a node, if the world has it.
pub(crate) fn pool_of<'a>(
    world: &World<'a>,
    node: &ManagedNode,
) -> Option<&'a crate::api::NodePool> {
    world
        .pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some(node.nodepool.as_str()))
}

/// What the node is going through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Response {
    /// A spot interruption notice: drain by a hard deadline.
    Interrupt,
    /// A rebalance recommendation with `Drain`: drain, honouring PDBs.
    Drain,
    /// A rebalance recommendation with `Checkpoint`: requests only.
    Checkpoint,
    /// A rebalance recommendation with `Replace`: replacements are launched;
    /// the node drains once its pods fit on other ready nodes.
    Replace,
    /// The instance is gone.
    Terminated,
    /// A scheduled change (AWS Health: retirement, stop, reboot,
    /// maintenance) starts at the deadline: cordoned at once and replaced
    /// first; drained once its pods fit on other ready nodes, or at the
    /// latest when only the checkpoint wait and the drain grace are left
    /// before the start; by then everything is evicted.
    Scheduled,
}

/// The state of one node under interruption handling.
#[derive(Debug, Clone)]
struct Handling {
    response: Response,
    /// When the current response started.
    started: Time,
    /// Interrupt: when EC2 takes the instance. Scheduled: when the change
    /// starts. Drain and Checkpoint: the soft deadline handed to the
    /// workloads.
    deadline: Time,
    /// Scheduled: when its drain starts at the latest, replaced or not.
    drain_by: Time,
    /// Opted-in pods are evicted after their acknowledgement or at this time.
    checkpoint_until: Time,
    cordoned: bool,
    /// Draining has started (a `Drain` waits for the pool's disruption
    /// budget before it starts).
    draining: bool,
    /// Checkpoint requests of the current response, with when they were made.
    requested: BTreeMap<String, Time>,
    /// Pods evicted (by any response).
    evicted: BTreeSet<String>,
    deleted: bool,
    /// `decide` has run since the response started.
    acted: bool,
}

impl Handling {
    fn new(response: Response, started: Time, deadline: Time, checkpoint_until: Time) -> Handling {
        Handling {
            response,
            started,
            deadline,
            drain_by: deadline,
            checkpoint_until,
            cordoned: false,
            draining: false,
            requested: BTreeMap::new(),
            evicted: BTreeSet::new(),
            deleted: false,
            acted: false,
        }
    }

    /// Switches to a new response; cordon and evictions carry over, checkpoint
    /// requests do not (one request per pod per notice).
    fn restart(&mut self, response: Response, started: Time, deadline: Time, until: Time) {
        self.response = response;
        self.started = started;
        self.deadline = deadline;
        self.checkpoint_until = until;
        self.requested.clear();
        self.acted = false;
    }

    /// Whether the node is on its way out (its pods need a new home).
    fn leaving(&self) -> bool {
        self.response != Response::Checkpoint
    }
}

/// Interruption handling for every node that received a notice, and the
/// offerings currently out of capacity.
#[derive(Debug, Clone, Default)]
pub struct Interruptions {
    config: Config,
    nodes: BTreeMap<String, Handling>,
    unavailable: BTreeMap<OfferingKey, Time>,
    /// Reservations known to be ending (a [`Notice::ReservationEnding`]),
    /// by ID, with their end: they take no launch, even when EC2's warning
    /// comes before the catalog's own lead says so.
    ending: BTreeMap<String, Time>,
    last_decide: Option<Time>,
}

impl Interruptions {
    /// No node under handling, nothing unavailable.
    pub fn new(config: Config) -> Interruptions {
        Interruptions {
            config,
            ..Interruptions::default()
        }
    }

    /// Takes a notice in. Returns the offering of the node when the notice is
    /// a new spot interruption (for the interruption-rate estimator), else
    /// `None`. Notices for claims the world does not have, and repeated
    /// notices, are ignored.
    pub fn handle(&mut self, notice: &Notice, world: &World, now: Time) -> Option<OfferingKey> {
        let claim_of = |claim: &str| world.nodes.iter().find(|n| n.claim == claim);
        match notice {
            Notice::InsufficientCapacity { offering } => {
                self.mark_unavailable(offering.clone(), now);
                None
            }
            Notice::SpotInterruption { claim, deadline } => {
                let node = claim_of(claim)?;
                let existing = self.nodes.get(claim).map(|h| h.response);
                if matches!(existing, Some(Response::Interrupt | Response::Terminated)) {
                    return None;
                }
                // Kept out for the TTL, as a capacity error is: if the pool
                // stays closed, the launch it refuses next keeps it out.
                self.mark_unavailable(node.offering.clone(), now);
                let grace = checkpoint_grace(policy(world, node));
                let until = before(*deadline, self.config.drain_grace).min(after(now, grace));
                let r = Response::Interrupt;
                match self.nodes.get_mut(claim) {
                    Some(h) => h.restart(r, now, *deadline, until),
                    None => {
                        self.nodes
                            .insert(claim.clone(), Handling::new(r, now, *deadline, until));
                    }
                }
                Some(node.offering.clone())
            }
            Notice::ReservationEnding { claim, end } => {
                let node = claim_of(claim)?;
                if let Some(id) = node
                    .state
                    .labels
                    .get(crate::api::labels::CAPACITY_RESERVATION_ID)
                {
                    self.ending.insert(id.clone(), *end);
                }
                let existing = self.nodes.get(claim).map(|h| h.response);
                if matches!(existing, Some(Response::Interrupt | Response::Terminated)) {
                    return None;
                }
                let grace = checkpoint_grace(policy(world, node));
                let until = before(*end, self.config.drain_grace).min(after(now, grace));
                let r = Response::Interrupt;
                match self.nodes.get_mut(claim) {
                    Some(h) => h.restart(r, now, *end, until),
                    None => {
                        self.nodes
                            .insert(claim.clone(), Handling::new(r, now, *end, until));
                    }
                }
                None
            }
            Notice::Rebalance { claim } => {
                let node = claim_of(claim)?;
                if self.nodes.contains_key(claim) {
                    return None;
                }
                let policy = policy(world, node);
                let grace = checkpoint_grace(policy);
                let soft = after(now, grace);
                let response = match policy.map(|p| p.on_rebalance_recommendation) {
                    None | Some(RebalanceAction::Ignore) => return None,
                    Some(RebalanceAction::Checkpoint) => Response::Checkpoint,
                    // A do-not-disrupt node is not drained voluntarily.
                    Some(RebalanceAction::Replace | RebalanceAction::Drain)
                        if node.do_not_disrupt =>
                    {
                        Response::Checkpoint
                    }
                    Some(RebalanceAction::Replace) => Response::Replace,
                    // Its timers are set when it starts (see `decide`).
                    Some(RebalanceAction::Drain) => Response::Drain,
                };
                self.nodes
                    .insert(claim.clone(), Handling::new(response, now, soft, soft));
                None
            }
            Notice::ScheduledChange { claim, start } => {
                let node = claim_of(claim)?;
                // Without a start, nothing forces the drain: it waits for
                // the replacements.
                let start = start.unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
                let lead =
                    checkpoint_grace(policy(world, node)).saturating_add(self.config.drain_grace);
                let drain_by = before(start, lead);
                match self.nodes.get_mut(claim) {
                    Some(h) if matches!(h.response, Response::Interrupt | Response::Terminated) => {
                    }
                    Some(h) if h.response == Response::Scheduled => {
                        // The same change again, or moved earlier.
                        if start < h.deadline {
                            h.deadline = start;
                            h.drain_by = drain_by;
                            h.checkpoint_until = h
                                .checkpoint_until
                                .min(before(start, self.config.drain_grace));
                        }
                    }
                    Some(h) => {
                        // Supersedes a rebalance response: its drain (if
                        // any) starts over with the change's deadline.
                        h.restart(Response::Scheduled, now, start, start);
                        h.drain_by = drain_by;
                        h.draining = false;
                    }
                    None => {
                        let mut h = Handling::new(Response::Scheduled, now, start, start);
                        h.drain_by = drain_by;
                        self.nodes.insert(claim.clone(), h);
                    }
                }
                None
            }
            Notice::Terminated { claim } => {
                claim_of(claim)?;
                match self.nodes.get_mut(claim) {
                    Some(h) if h.deleted || h.response == Response::Terminated => {}
                    Some(h) => h.restart(Response::Terminated, now, now, now),
                    None => {
                        let h = Handling::new(Response::Terminated, now, now, now);
                        self.nodes.insert(claim.clone(), h);
                    }
                }
                None
            }
        }
    }

    /// What to do now: cordons, checkpoint requests, evictions (within PDBs,
    /// counting the ones issued in this call) and deletions. Each action is
    /// issued once; calling again with the same world issues nothing new.
    /// Nodes that left the world are forgotten.
    pub fn decide(&mut self, world: &World, now: Time) -> Vec<Action> {
        self.unavailable.retain(|_, until| *until > now);
        self.ending.retain(|_, end| *end > now);
        self.nodes
            .retain(|claim, _| world.nodes.iter().any(|n| &n.claim == claim));
        self.last_decide = Some(now);
        let leaving: BTreeSet<&str> = self
            .nodes
            .iter()
            .filter(|(_, h)| h.leaving())
            .map(|(c, _)| c.as_str())
            .collect();
        let replaced: BTreeSet<String> = self
            .nodes
            .iter()
            .filter(|(_, h)| {
                h.response == Response::Replace
                    || (h.response == Response::Scheduled && !h.draining)
            })
            .filter_map(|(c, _)| world.nodes.iter().find(|n| &n.claim == c))
            .filter(|n| pods_fit_elsewhere(world, n, &leaving))
            .map(|n| n.claim.clone())
            .collect();

        // Nodes being disrupted, for the disruption budgets of drains.
        let mut busy: BTreeSet<String> = world
            .nodes
            .iter()
            .filter(|n| n.state.unschedulable)
            .map(|n| n.claim.clone())
            .chain(
                self.nodes
                    .iter()
                    .filter(|(_, h)| h.draining || h.response == Response::Terminated)
                    .map(|(c, _)| c.clone()),
            )
            .collect();
        let mut pdb_left: Vec<u32> = world.pdbs.iter().map(|p| p.disruptions_allowed).collect();
        let mut out = Vec::new();
        for (claim, h) in &mut self.nodes {
            let Some(node) = world.nodes.iter().find(|n| &n.claim == claim) else {
                continue;
            };
            let policy = policy(world, node);
            let hook = policy.is_some_and(|p| p.checkpoint_hook.is_some());
            if replaced.contains(claim) && h.response == Response::Replace {
                h.response = Response::Drain;
            }
            h.acted = true;
            // A scheduled change drains once its pods have a place, or when
            // the time left before it is only what a drain takes; it is not
            // voluntary, so no budget holds it back.
            if h.response == Response::Scheduled
                && !h.draining
                && (replaced.contains(claim) || now >= h.drain_by)
            {
                h.draining = true;
                h.checkpoint_until = after(now, checkpoint_grace(policy))
                    .min(before(h.deadline, self.config.drain_grace));
                busy.insert(claim.clone());
            }
            // A drain is voluntary: it starts within the pool's budget, and
            // its checkpoint wait starts when it does.
            if h.response == Response::Drain && !h.draining {
                if !budget_allows(world, node, &busy, now) {
                    continue;
                }
                busy.insert(claim.clone());
                let soft = after(now, checkpoint_grace(policy));
                h.restart(
                    Response::Drain,
                    now,
                    after(soft, self.config.drain_grace),
                    soft,
                );
                h.acted = true;
            }
            match h.response {
                Response::Terminated => {
                    if !h.deleted {
                        h.deleted = true;
                        out.push(Action::Delete {
                            claim: claim.clone(),
                            reason: DisruptionReason::Terminated,
                        });
                    }
                }
                Response::Checkpoint => request_checkpoints(h, node, hook, now, &mut out),
                Response::Replace => cordon(h, claim, DisruptionReason::Rebalance, &mut out),
                Response::Scheduled if !h.draining => {
                    cordon(h, claim, DisruptionReason::ScheduledChange, &mut out)
                }
                Response::Interrupt | Response::Drain | Response::Scheduled => {
                    drain(h, node, hook, now, &mut pdb_left, &mut out)
                }
            }
        }
        out
    }

    /// The next time [`Interruptions::decide`] has something to do without
    /// any change in the world: a node just noticed, the end of a checkpoint
    /// wait, a spot deadline, the latest start of a scheduled change's
    /// drain, an offering becoming available again.
    pub fn next_deadline(&self) -> Option<Time> {
        let pending = |t: Time| self.last_decide.is_none_or(|d| t > d);
        let mut times = Vec::new();
        for h in self.nodes.values() {
            if !h.acted {
                times.push(h.started);
                continue;
            }
            match h.response {
                Response::Interrupt if !h.deleted => {
                    times.extend([h.checkpoint_until, h.deadline]);
                }
                Response::Drain if h.draining && !h.deleted => times.push(h.checkpoint_until),
                Response::Scheduled if h.draining && !h.deleted => {
                    times.extend([h.checkpoint_until, h.deadline]);
                }
                Response::Scheduled if !h.deleted => times.push(h.drain_by),
                _ => {}
            }
        }
        times.extend(self.unavailable.values().copied());
        times.into_iter().filter(|t| pending(*t)).min()
    }

    /// Whether the offering is out of capacity or was interrupted within the
    /// TTL.
    pub fn is_unavailable(&self, key: &OfferingKey, now: Time) -> bool {
        self.unavailable.get(key).is_some_and(|until| *until > now)
    }

    /// [`Interruptions::is_unavailable`] for a catalog offering, or a
    /// reserved offering whose reservation is ending: the filter to hand the
    /// planner as `Input::unavailable`.
    pub fn blocks(&self, offering: &Offering, now: Time) -> bool {
        self.reservation_ending(offering, now) || self.is_unavailable(&offering_key(offering), now)
    }

    /// Whether the offering's reservation was warned of as ending after `now`.
    fn reservation_ending(&self, offering: &Offering, now: Time) -> bool {
        offering
            .reservation
            .as_ref()
            .and_then(|r| self.ending.get(&r.id))
            .is_some_and(|end| *end > now)
    }

    /// [`Interruptions::blocks`] at `now` as one filter, with the
    /// unavailable offerings gathered once: a plan asks it of every
    /// offering.
    pub fn blocker(&self, now: Time) -> impl Fn(&Offering) -> bool + '_ {
        let unavailable: crate::core::FastSet<KeyParts> =
            self.unavailable(now).map(OfferingKey::parts).collect();
        move |o| self.reservation_ending(o, now) || unavailable.contains(&key_parts(o))
    }

    /// The offerings unavailable at `now`.
    pub fn unavailable(&self, now: Time) -> impl Iterator<Item = &OfferingKey> + '_ {
        self.unavailable
            .iter()
            .filter(move |(_, until)| **until > now)
            .map(|(k, _)| k)
    }

    /// Whether the node is on its way out because of a notice (interrupted,
    /// draining, replaced or terminated), from the notice until it leaves the
    /// world. Consolidation leaves such nodes alone. A node that was only
    /// asked to checkpoint is not.
    pub fn is_handling(&self, claim: &str) -> bool {
        self.nodes.get(claim).is_some_and(Handling::leaving)
    }

    /// The claims [`Interruptions::is_handling`] says yes to, sorted.
    pub fn handling(&self) -> impl Iterator<Item = &str> {
        self.nodes
            .iter()
            .filter(|(_, h)| h.leaving())
            .map(|(c, _)| c.as_str())
    }

    /// When the checkpoint wait of a node on its way out ends (its pods'
    /// checkpoint deadline), if it is leaving and its drain has started.
    pub fn checkpoint_until(&self, claim: &str) -> Option<Time> {
        self.nodes
            .get(claim)
            .filter(|h| h.leaving() && h.draining)
            .map(|h| h.checkpoint_until)
    }

    /// The pods that need a new home now: the real (non-placeholder) pods of
    /// interrupted, draining, replaced and terminated nodes that have not been
    /// evicted yet, less pods with DRA claims. The provisioner adds them to
    /// the pending demand, so that replacements launch at once; once
    /// evicted, their controllers' new pods are pending on their own (dedupe
    /// by name against pending pods).
    pub fn pods_needing_replacement(&self, world: &World) -> Vec<Pod> {
        let mut out = Vec::new();
        for (claim, h) in &self.nodes {
            if !h.leaving() {
                continue;
            }
            let Some(node) = world.nodes.iter().find(|n| &n.claim == claim) else {
                continue;
            };
            out.extend(
                node.pods
                    .iter()
                    .filter(|p| !p.placeholder && !h.evicted.contains(&p.pod.name))
                    // A pod's DRA claims are matched once it is pending
                    // again (its claims re-made or released by then), not
                    // while they hold this node's devices.
                    .filter(|p| p.pod.resource_claims.is_empty())
                    // A soft drain leaves do-not-disrupt pods where they are.
                    .filter(|p| {
                        matches!(
                            h.response,
                            Response::Interrupt | Response::Terminated | Response::Scheduled
                        ) || !p.do_not_disrupt
                    })
                    .map(|p| p.pod.clone()),
            );
        }
        out
    }

    fn mark_unavailable(&mut self, key: OfferingKey, now: Time) {
        let until = after(now, self.config.unavailable_ttl);
        let e = self.unavailable.entry(key).or_insert(until);
        *e = (*e).max(until);
    }
}

pub(crate) fn policy<'a>(world: &World<'a>, node: &ManagedNode) -> Option<&'a InterruptionPolicy> {
    pool_of(world, node).map(|p| &p.spec.interruption)
}

pub(crate) fn checkpoint_grace(policy: Option<&InterruptionPolicy>) -> Duration {
    policy
        .and_then(|p| p.checkpoint_grace_period_duration().ok())
        .unwrap_or(DEFAULT_CHECKPOINT_GRACE)
}

/// Whether the pod gets checkpoint signals: it opted in, or its pool has a
/// checkpoint hook. Placeholders never do.
pub(crate) fn opted_in(p: &super::BoundPod, pool_hook: bool) -> bool {
    !p.placeholder && (p.pod.checkpoints || pool_hook)
}

/// Whether the node's real pods fit on the other ready, schedulable nodes
/// (those not leaving themselves).
fn pods_fit_elsewhere(world: &World, node: &ManagedNode, leaving: &BTreeSet<&str>) -> bool {
    let pods: Vec<Pod> = node
        .pods
        .iter()
        .filter(|p| !p.placeholder)
        .map(|p| p.pod.clone())
        .collect();
    let others: Vec<_> = world
        .nodes
        .iter()
        .filter(|n| n.claim != node.claim && n.ready_at.is_some() && !n.state.in_flight)
        .filter(|n| !leaving.contains(n.claim.as_str()))
        .map(|n| n.state.clone())
        .collect();
    let all: Vec<usize> = (0..pods.len()).collect();
    crate::plan::pack::place_on_existing(&pods, &all, &others)
        .1
        .is_empty()
}

/// Whether the node's pool may disrupt one more node now, counting the
/// pool's `busy` nodes other than this one as being disrupted. A node of an
/// unknown pool has no budget; a budget that cannot be read allows nothing.
fn budget_allows(world: &World, node: &ManagedNode, busy: &BTreeSet<String>, now: Time) -> bool {
    let Some(pool) = pool_of(world, node) else {
        return true;
    };
    let mine = world.nodes.iter().filter(|n| n.nodepool == node.nodepool);
    let total = mine.clone().count() as u32;
    let disrupting = mine
        .filter(|n| n.claim != node.claim && busy.contains(&n.claim))
        .count() as u32;
    super::budgets::allowed_disruptions(pool, total, disrupting, now).unwrap_or(0) > 0
}

/// When a checkpoint of `pod` requested at `now` would be complete: its
/// `quartermaster.dev/checkpoint-duration` (or the planner's default for its
/// GPUs, [`crate::plan::risk::checkpoint_write_s`]) from now.
pub(crate) fn checkpoint_done(pod: &Pod, now: Time) -> Time {
    after(now, secs(crate::plan::risk::checkpoint_write_s(pod)))
}

/// Requests a checkpoint from each opted-in pod not asked yet under the
/// current response. Where the node is leaving, a pod whose checkpoint
/// cannot be complete before the checkpoint wait ends is not asked (it would
/// save nothing; it is evicted without waiting and falls back to its last
/// complete checkpoint). Where the node stays (a rebalance `Checkpoint`),
/// the pod gets the time its checkpoint takes.
fn request_checkpoints(
    h: &mut Handling,
    node: &ManagedNode,
    hook: bool,
    now: Time,
    out: &mut Vec<Action>,
) {
    for p in node.pods.iter().filter(|p| opted_in(p, hook)) {
        if h.requested.contains_key(&p.pod.name) || h.evicted.contains(&p.pod.name) {
            continue;
        }
        let done = checkpoint_done(&p.pod, now);
        let deadline = if h.leaving() {
            if done > h.checkpoint_until {
                continue;
            }
            h.checkpoint_until
        } else {
            h.checkpoint_until.max(done)
        };
        h.requested.insert(p.pod.name.clone(), now);
        out.push(Action::RequestCheckpoint {
            pod: p.pod.name.clone(),
            claim: node.claim.clone(),
            deadline,
        });
    }
}

/// Cordons the node, once.
fn cordon(h: &mut Handling, claim: &str, reason: DisruptionReason, out: &mut Vec<Action>) {
    if !h.cordoned {
        h.cordoned = true;
        out.push(Action::Cordon {
            claim: claim.to_string(),
            reason,
        });
    }
}

/// One step of draining: cordon, checkpoint requests, evictions of pods that
/// acknowledged or ran out of time (within PDBs until a hard deadline), and
/// the deletion once the node is empty or the hard deadline passed.
fn drain(
    h: &mut Handling,
    node: &ManagedNode,
    hook: bool,
    now: Time,
    pdb_left: &mut [u32],
    out: &mut Vec<Action>,
) {
    // A notice with a hard deadline (a spot interruption, a reservation's
    // end, a scheduled change): the instance goes then, so at the deadline
    // PDBs no longer hold evictions back, and do-not-disrupt does not
    // apply (it is not voluntary).
    let hard = matches!(h.response, Response::Interrupt | Response::Scheduled);
    let reason = match h.response {
        Response::Interrupt => DisruptionReason::Interrupted,
        Response::Scheduled => DisruptionReason::ScheduledChange,
        _ => DisruptionReason::Rebalance,
    };
    let claim = &node.claim;
    h.draining = true;
    cordon(h, claim, reason, out);
    request_checkpoints(h, node, hook, now, out);
    let gone = hard && now >= h.deadline;
    for p in &node.pods {
        let name = &p.pod.name;
        if h.evicted.contains(name) {
            continue;
        }
        // Opted-in pods that were not asked (their checkpoint would not be
        // complete in time) have nothing to wait for.
        let waited = !opted_in(p, hook)
            || !h.requested.contains_key(name)
            || now >= h.checkpoint_until
            || h.requested
                .get(name)
                .is_some_and(|asked| p.checkpoint_completed.is_some_and(|done| done >= *asked));
        if !(waited || gone) || (!hard && p.do_not_disrupt) {
            continue;
        }
        if !gone {
            if let Some(left) = p.pdb.and_then(|i| pdb_left.get_mut(i)) {
                if *left == 0 {
                    continue;
                }
                *left -= 1;
            }
        }
        h.evicted.insert(name.clone());
        out.push(Action::Evict {
            pod: name.clone(),
            claim: claim.clone(),
        });
    }
    if !h.deleted && (node.pods.is_empty() || gone) {
        h.deleted = true;
        out.push(Action::Delete {
            claim: claim.clone(),
            reason,
        });
    }
}

/// Fixtures shared by the tests of the decision modules.
#[cfg(test)]
pub(crate) mod fixtures;

#[cfg(test)]
mod tests;
