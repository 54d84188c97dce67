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

use super::{Action, DisruptionReason, ManagedNode, Notice, OfferingKey, Time, World};
use crate::api::{InterruptionPolicy, RebalanceAction};
use crate::catalog::Offering;
use crate::cluster::Pod;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Checkpoint grace period used when the pool is unknown or its
/// `checkpointGracePeriod` does not parse (the CRD's default).
const DEFAULT_CHECKPOINT_GRACE: Duration = Duration::from_secs(90);

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
            unavailable_ttl: Duration::from_secs(10 * 60),
            drain_grace: Duration::from_secs(30),
            reservation_lead: Duration::from_secs(40 * 60),
        }
    }
}

/// `t + d`, saturating at the end of time.
pub(crate) fn after(t: Time, d: Duration) -> Time {
    chrono::TimeDelta::from_std(d)
        .ok()
        .and_then(|d| t.checked_add_signed(d))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

/// `t - d`, saturating at the beginning of time.
fn before(t: Time, d: Duration) -> Time {
    chrono::TimeDelta::from_std(d)
        .ok()
        .and_then(|d| t.checked_sub_signed(d))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC)
}

/// The key of an offering, as capacity errors and interruptions count it.
pub fn offering_key(o: &Offering) -> OfferingKey {
    OfferingKey {
        instance_type: o.instance_type.clone(),
        zone: o.zone_id.clone(),
        capacity_type: o.capacity_type,
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
}

/// The state of one node under interruption handling.
#[derive(Debug, Clone)]
struct Handling {
    response: Response,
    /// When the current response started.
    started: Time,
    /// Interrupt: when EC2 takes the instance. Drain and Checkpoint: the
    /// soft deadline handed to the workloads.
    deadline: Time,
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
                // A pool that just reclaimed is often closed for a while:
                // kept out for the market's expected closure, at least the TTL.
                let closure = world
                    .catalog
                    .market(&node.offering.instance_type, &node.offering.zone)
                    .mean_closure_hours();
                self.mark_unavailable_for(
                    node.offering.clone(),
                    now,
                    self.config.unavailable_ttl.max(Duration::from_secs_f64(
                        (closure * 3600.0).clamp(0.0, 86_400.0),
                    )),
                );
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
            .filter(|(_, h)| h.response == Response::Replace)
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
            if replaced.contains(claim) {
                h.response = Response::Drain;
            }
            h.acted = true;
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
                Response::Interrupt | Response::Drain => {
                    drain(h, node, hook, now, &mut pdb_left, &mut out)
                }
            }
        }
        out
    }

    /// The next time [`Interruptions::decide`] has something to do without
    /// any change in the world: a node just noticed, the end of a checkpoint
    /// wait, a spot deadline, an offering becoming available again.
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
        let ending = offering
            .reservation
            .as_ref()
            .and_then(|r| self.ending.get(&r.id))
            .is_some_and(|end| *end > now);
        ending || self.is_unavailable(&offering_key(offering), now)
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
    /// evicted yet. The provisioner adds them to the pending demand, so that
    /// replacements launch at once; once evicted, their controllers' new pods
    /// are pending on their own (dedupe by name against pending pods).
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
                    // A soft drain leaves do-not-disrupt pods where they are.
                    .filter(|p| {
                        matches!(h.response, Response::Interrupt | Response::Terminated)
                            || !p.do_not_disrupt
                    })
                    .map(|p| p.pod.clone()),
            );
        }
        out
    }

    fn mark_unavailable(&mut self, key: OfferingKey, now: Time) {
        self.mark_unavailable_for(key, now, self.config.unavailable_ttl);
    }

    fn mark_unavailable_for(&mut self, key: OfferingKey, now: Time, ttl: Duration) {
        let until = after(now, ttl);
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
    after(
        now,
        Duration::from_secs_f64(crate::plan::risk::checkpoint_write_s(pod).max(0.0)),
    )
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
    let hard = h.response == Response::Interrupt;
    let reason = if hard {
        DisruptionReason::Interrupted
    } else {
        DisruptionReason::Rebalance
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
pub(crate) mod fixtures {
    use super::super::{BoundPod, ManagedNode, OfferingKey, Pdb, Time, World};
    use crate::api::{NodePool, NodePoolSpec};
    use crate::catalog::{CapacityType, Catalog};
    use crate::cluster::resources::{CPU, PODS};
    use crate::cluster::{NodeState, Pod, Resources};

    /// The region of every fixture.
    pub const REGION: &str = "us-east-1";

    /// `s` seconds after the fixtures' epoch.
    pub fn t(s: i64) -> Time {
        chrono::DateTime::from_timestamp(1_700_000_000 + s, 0).expect("in range")
    }

    /// A ready on-demand `g5.xlarge` in `use1-az1` of pool `gpu`, $1/h, with
    /// 4 CPUs, 1 GPU and no pods.
    pub fn node(claim: &str) -> ManagedNode {
        ManagedNode {
            claim: claim.into(),
            nodepool: "gpu".into(),
            offering: OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::OnDemand,
            },
            price_per_hour: 1.0,
            launched_at: t(-7200),
            ready_at: Some(t(-7000)),
            state: NodeState {
                name: claim.into(),
                nodepool: Some("gpu".into()),
                instance_type: Some("g5.xlarge".into()),
                zone: "use1-az1".into(),
                capacity_type: Some(CapacityType::OnDemand),
                labels: Default::default(),
                taints: Vec::new(),
                allocatable: Resources::new()
                    .with(CPU, 4000)
                    .with(crate::api::labels::RESOURCE_GPU, 1)
                    .with(PODS, 110),
                used: Resources::new(),
                price_per_hour: 1.0,
                in_flight: false,
                unschedulable: false,
            },
            pods: Vec::new(),
            do_not_disrupt: false,
            drifted: None,
            disrupted: false,
            health: Default::default(),
            gpu_idle_since: None,
        }
    }

    /// Builder steps on a [`ManagedNode`].
    pub trait NodeExt: Sized {
        /// Bought on spot.
        fn spot(self) -> Self;
        /// Of that pool.
        fn pool(self, name: &str) -> Self;
        /// That instance type in that zone at that price.
        fn offering(self, instance_type: &str, zone: &str, price: f64) -> Self;
        /// With these pods (what they request is used).
        fn pods(self, pods: impl IntoIterator<Item = BoundPod>) -> Self;
        /// Carrying `quartermaster.dev/do-not-disrupt`.
        fn do_not_disrupt(self) -> Self;
        /// Launched but not ready yet.
        fn not_ready(self) -> Self;
        /// Cordoned (by someone: `kubectl cordon`).
        fn cordoned(self) -> Self;
        /// Cordoned and tainted `quartermaster.dev/disrupted` by us.
        fn disrupted(self) -> Self;
    }

    impl NodeExt for ManagedNode {
        fn spot(mut self) -> Self {
            self.offering.capacity_type = CapacityType::Spot;
            self.state.capacity_type = Some(CapacityType::Spot);
            self
        }
        fn pool(mut self, name: &str) -> Self {
            self.nodepool = name.into();
            self.state.nodepool = Some(name.into());
            self
        }
        fn offering(mut self, instance_type: &str, zone: &str, price: f64) -> Self {
            self.offering.instance_type = instance_type.into();
            self.offering.zone = zone.into();
            self.state.instance_type = Some(instance_type.into());
            self.state.zone = zone.into();
            self.price_per_hour = price;
            self.state.price_per_hour = price;
            self
        }
        fn pods(mut self, pods: impl IntoIterator<Item = BoundPod>) -> Self {
            self.pods = pods.into_iter().collect();
            self.state.used = Resources::new();
            for p in &self.pods {
                self.state.used.add(&p.pod.requests);
            }
            self
        }
        fn do_not_disrupt(mut self) -> Self {
            self.do_not_disrupt = true;
            self
        }
        fn not_ready(mut self) -> Self {
            self.ready_at = None;
            self.state.in_flight = true;
            self
        }
        fn cordoned(mut self) -> Self {
            self.state.unschedulable = true;
            self
        }
        fn disrupted(mut self) -> Self {
            self.disrupted = true;
            self.cordoned()
        }
    }

    /// A pod requesting one CPU, not opted in to checkpoints, without PDB.
    pub fn pod(name: &str) -> BoundPod {
        BoundPod {
            pod: Pod::new(name, Resources::new().with(CPU, 1000)),
            do_not_disrupt: false,
            checkpoint_completed: None,
            started: None,
            pdb: None,
            placeholder: false,
        }
    }

    /// Builder steps on a [`BoundPod`].
    pub trait PodExt: Sized {
        /// Opted in to checkpoint signals.
        fn checkpoints(self) -> Self;
        /// Acknowledged a checkpoint at `at`.
        fn acked(self, at: Time) -> Self;
        /// Covered by `World::pdbs[i]`.
        fn pdb(self, i: usize) -> Self;
        /// A pre-warm placeholder.
        fn placeholder(self) -> Self;
        /// Carrying `quartermaster.dev/do-not-disrupt`.
        fn do_not_disrupt(self) -> Self;
        /// Requesting `milli` millicores.
        fn cpu(self, milli: i64) -> Self;
        /// Requesting `n` GPUs.
        fn gpus(self, n: i64) -> Self;
        /// Its checkpoints take `secs` to write
        /// (`quartermaster.dev/checkpoint-duration`).
        fn checkpoint_takes(self, secs: f64) -> Self;
    }

    impl PodExt for BoundPod {
        fn checkpoints(mut self) -> Self {
            self.pod.checkpoints = true;
            self
        }
        fn acked(mut self, at: Time) -> Self {
            self.checkpoint_completed = Some(at);
            self
        }
        fn pdb(mut self, i: usize) -> Self {
            self.pdb = Some(i);
            self
        }
        fn placeholder(mut self) -> Self {
            self.placeholder = true;
            self
        }
        fn do_not_disrupt(mut self) -> Self {
            self.do_not_disrupt = true;
            self
        }
        fn cpu(mut self, milli: i64) -> Self {
            self.pod.requests.set(CPU, milli);
            self
        }
        fn gpus(mut self, n: i64) -> Self {
            self.pod.requests.set(crate::api::labels::RESOURCE_GPU, n);
            self
        }
        fn checkpoint_takes(mut self, secs: f64) -> Self {
            self.pod.checkpoint_duration_s = Some(secs);
            self
        }
    }

    /// The launches among `actions`.
    pub fn launches(actions: &[crate::core::Action]) -> Vec<&crate::core::ClaimRequest> {
        actions
            .iter()
            .filter_map(|a| match a {
                crate::core::Action::Launch(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// A NodePool with the default spec changed by `edit`.
    pub fn pool_with(name: &str, edit: impl FnOnce(&mut NodePoolSpec)) -> NodePool {
        let mut spec = NodePoolSpec::default();
        edit(&mut spec);
        NodePool::new(name, spec)
    }

    /// A PDB allowing `n` disruptions.
    pub fn pdb(name: &str, n: u32) -> Pdb {
        Pdb {
            name: name.into(),
            disruptions_allowed: n,
        }
    }

    /// Owned parts of a [`World`].
    pub struct Fixture {
        /// Catalog (empty unless a test fills it).
        pub catalog: Catalog,
        /// Pools (`gpu` with the default spec unless replaced).
        pub pools: Vec<NodePool>,
        /// Nodes.
        pub nodes: Vec<ManagedNode>,
        /// PDBs.
        pub pdbs: Vec<Pdb>,
    }

    impl Fixture {
        /// These nodes, pool `gpu` with defaults, an empty catalog, no PDBs.
        pub fn new(nodes: impl IntoIterator<Item = ManagedNode>) -> Fixture {
            Fixture {
                catalog: Catalog::default(),
                pools: vec![pool_with("gpu", |_| {})],
                nodes: nodes.into_iter().collect(),
                pdbs: Vec::new(),
            }
        }

        /// The world the decisions read.
        pub fn world(&self) -> World<'_> {
            World {
                catalog: &self.catalog,
                region: REGION,
                pools: &self.pools,
                pending: &[],
                nodes: &self.nodes,
                pdbs: &self.pdbs,
            }
        }

        /// The node of that claim, to change it between steps.
        pub fn node_mut(&mut self, claim: &str) -> &mut ManagedNode {
            self.nodes
                .iter_mut()
                .find(|n| n.claim == claim)
                .expect("fixture node")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use crate::api::CheckpointHook;

    fn interrupt(claim: &str, at: i64) -> Notice {
        Notice::SpotInterruption {
            claim: claim.into(),
            deadline: t(at + 120),
        }
    }

    fn cordon(claim: &str, reason: DisruptionReason) -> Action {
        Action::Cordon {
            claim: claim.into(),
            reason,
        }
    }

    fn checkpoint(pod: &str, claim: &str, by: i64) -> Action {
        Action::RequestCheckpoint {
            pod: pod.into(),
            claim: claim.into(),
            deadline: t(by),
        }
    }

    fn evict(pod: &str, claim: &str) -> Action {
        Action::Evict {
            pod: pod.into(),
            claim: claim.into(),
        }
    }

    fn delete(claim: &str, reason: DisruptionReason) -> Action {
        Action::Delete {
            claim: claim.into(),
            reason,
        }
    }

    fn rebalance_pool(action: RebalanceAction) -> Vec<crate::api::NodePool> {
        vec![pool_with("gpu", |s| {
            s.interruption.on_rebalance_recommendation = action
        })]
    }

    #[test]
    fn a_notice_cordons_at_once_asks_opted_in_pods_to_checkpoint_and_evicts_the_others() {
        let mut f = Fixture::new([node("n1").spot().pods([pod("a").checkpoints(), pod("b")])]);
        let mut s = Interruptions::default();
        let learned = s.handle(&interrupt("n1", 0), &f.world(), t(0));
        assert_eq!(learned, Some(f.nodes[0].offering.clone()));
        // Checkpoint wait: min(120 s - 30 s drain grace, 0 + 90 s grace) = 90 s.
        assert_eq!(
            s.decide(&f.world(), t(0)),
            [
                cordon("n1", DisruptionReason::Interrupted),
                checkpoint("a", "n1", 90),
                evict("b", "n1"),
            ]
        );
        // `a` acknowledges at 10 s: it is evicted then, not before.
        assert_eq!(s.decide(&f.world(), t(5)), []);
        *f.node_mut("n1") = node("n1")
            .spot()
            .pods([pod("a").checkpoints().acked(t(10))]);
        assert_eq!(s.decide(&f.world(), t(10)), [evict("a", "n1")]);
        // Once the node has no pods left it is deleted, once.
        *f.node_mut("n1") = node("n1").spot();
        assert_eq!(
            s.decide(&f.world(), t(12)),
            [delete("n1", DisruptionReason::Interrupted)]
        );
        assert_eq!(s.decide(&f.world(), t(13)), []);
    }

    #[test]
    fn a_checkpoint_that_cannot_finish_before_the_deadline_is_not_requested_and_its_pod_leaves_at_once(
    ) {
        // `slow` takes 4 minutes, `big` has 8 GPUs (3.6 minutes by default),
        // `quick` 60 s: only `quick` fits the 90 s checkpoint wait.
        let f = Fixture::new([node("n1").spot().pods([
            pod("slow").checkpoints().checkpoint_takes(240.0),
            pod("big").checkpoints().gpus(8),
            pod("quick").checkpoints().checkpoint_takes(60.0),
        ])]);
        let mut s = Interruptions::default();
        s.handle(&interrupt("n1", 0), &f.world(), t(0));
        assert_eq!(
            s.decide(&f.world(), t(0)),
            [
                cordon("n1", DisruptionReason::Interrupted),
                checkpoint("quick", "n1", 90),
                evict("slow", "n1"),
                evict("big", "n1"),
            ]
        );
        // Under a rebalance recommendation the node stays: the slow pod is
        // asked, and given the time its checkpoint takes.
        let mut f = Fixture::new([node("n2")
            .spot()
            .pods([pod("slow").checkpoints().checkpoint_takes(240.0)])]);
        f.pools = rebalance_pool(RebalanceAction::Checkpoint);
        let mut s = Interruptions::default();
        s.handle(&rebalance("n2"), &f.world(), t(0));
        assert_eq!(s.decide(&f.world(), t(0)), [checkpoint("slow", "n2", 240)]);
    }

    #[test]
    fn an_acknowledgement_from_before_the_request_does_not_count() {
        let f = Fixture::new([node("n1")
            .spot()
            .pods([pod("a").checkpoints().acked(t(-50))])]);
        let mut s = Interruptions::default();
        s.handle(&interrupt("n1", 0), &f.world(), t(0));
        assert_eq!(
            s.decide(&f.world(), t(0)),
            [
                cordon("n1", DisruptionReason::Interrupted),
                checkpoint("a", "n1", 90)
            ]
        );
        assert_eq!(s.decide(&f.world(), t(30)), []);
    }

    #[test]
    fn the_pools_checkpoint_hook_opts_every_real_pod_in() {
        let mut f = Fixture::new([node("n1").spot().pods([pod("a"), pod("p").placeholder()])]);
        f.pools = vec![pool_with("gpu", |s| {
            s.interruption.checkpoint_hook = Some(CheckpointHook::on_port(8080))
        })];
        let mut s = Interruptions::default();
        s.handle(&interrupt("n1", 0), &f.world(), t(0));
        assert_eq!(
            s.decide(&f.world(), t(0)),
            [
                cordon("n1", DisruptionReason::Interrupted),
                checkpoint("a", "n1", 90),
                evict("p", "n1"),
            ]
        );
    }

    #[test]
    fn a_pod_that_never_acknowledges_is_evicted_at_the_deadline_less_the_drain_grace() {
        let mut f = Fixture::new([node("n1").spot().pods([pod("a").checkpoints()])]);
        // A grace period of 100 s would run past 120 s - 30 s.
        f.pools = vec![pool_with("gpu", |s| {
            s.interruption.checkpoint_grace_period = "100s".into()
        })];
        let mut s = Interruptions::default();
        s.handle(&interrupt("n1", 0), &f.world(), t(0));
        assert_eq!(s.decide(&f.world(), t(0)).len(), 2);
        assert_eq!(s.next_deadline(), Some(t(90)));
        assert_eq!(s.decide(&f.world(), t(89)), []);
        assert_eq!(s.decide(&f.world(), t(90)), [evict("a", "n1")]);
        assert_eq!(s.next_deadline(), Some(t(120)));
    }

    #[test]
    fn a_short_grace_period_ends_the_checkpoint_wait_before_the_drain_grace_does() {
        let mut f = Fixture::new([node("n1").spot().pods([pod("a").checkpoints()])]);
        f.pools = vec![pool_with("gpu", |s| {
            s.interruption.checkpoint_grace_period = "20s".into()
        })];
        let mut s = Interruptions::default();
        s.handle(&interrupt("n1", 0), &f.world(), t(0));
        assert_eq!(
            s.decide(&f.world(), t(0)),
            [
                cordon("n1", DisruptionReason::Interrupted),
                checkpoint("a", "n1", 20)
            ]
        );
        assert_eq!(s.decide(&f.world(), t(20)), [evict("a", "n1")]);
    }

    #[test]
    fn a_pdb_with_no_disruptions_allowed_blocks_eviction_until_the_deadline_not_after() {
        let mut f = Fixture::new([node("n1").spot().pods([pod("b").pdb(0)])]);
        f.pdbs = vec![pdb("ml/b", 0)];
        let mut s = Interruptions::default();
        s.handle(&interrupt("n1", 0), &f.world(), t(0));
        assert_eq!(
            s.decide(&f.world(), t(0)),
            [cordon("n1", DisruptionReason::Interrupted)]
        );
        assert_eq!(s.decide(&f.world(), t(119)), []);
        assert_eq!(
            s.decide(&f.world(), t(120)),
            [
                evict("b", "n1"),
                delete("n1", DisruptionReason::Interrupted)
            ]
        );
        assert_eq!(s.decide(&f.world(), t(121)), []);
    }

    /// Fixture `n1` as a node in Capacity Block `cr-1` ending at `end`,
    /// with a checkpointing pod, and the catalog knowing the block.
    fn in_block(end: i64) -> Fixture {
        in_reservation(crate::catalog::ReservationKind::CapacityBlock, end)
    }

    /// [`in_block`] for a reservation of `kind`.
    fn in_reservation(kind: crate::catalog::ReservationKind, end: i64) -> Fixture {
        let mut n = node("n1").pods([pod("a").checkpoints()]);
        n.state.labels.insert(
            crate::api::labels::CAPACITY_RESERVATION_ID.into(),
            "cr-1".into(),
        );
        let mut f = Fixture::new([n]);
        let block = crate::catalog::Reservation {
            id: "cr-1".into(),
            kind,
            instance_type: "g5.xlarge".into(),
            region: REGION.into(),
            zone_id: "use1-az1".into(),
            total: 1,
            available: 0,
            start: Some(t(-86_400)),
            end: Some(t(end)),
            price_per_hour: 0.0,
        };
        f.catalog = crate::catalog::Catalog::default().with_reservations(
            &[block],
            t(0),
            chrono::TimeDelta::zero(),
        );
        f
    }

    #[test]
    fn a_node_is_drained_like_an_interrupted_one_once_its_block_is_within_the_lead_of_its_end() {
        let lead = Duration::from_secs(40 * 60);
        let f = in_block(3600);
        // An hour before the end: nothing yet, but the clock knows when.
        assert!(reservation_endings(&f.world(), t(0), lead).is_empty());
        assert_eq!(
            next_reservation_ending(&f.world(), t(0), lead),
            Some(t(3600 - 2400))
        );
        let at = 3600 - 2400;
        let notices = reservation_endings(&f.world(), t(at), lead);
        assert_eq!(
            notices,
            [Notice::ReservationEnding {
                claim: "n1".into(),
                end: t(3600)
            }]
        );
        let mut s = Interruptions::default();
        // Not evidence about any spot pool.
        assert_eq!(s.handle(&notices[0], &f.world(), t(at)), None);
        assert!(s.is_handling("n1"));
        assert_eq!(s.pods_needing_replacement(&f.world()).len(), 1);
        assert_eq!(
            s.decide(&f.world(), t(at)),
            [
                cordon("n1", DisruptionReason::Interrupted),
                checkpoint("a", "n1", at + 90)
            ]
        );
        // EC2's warning arriving as well changes nothing.
        s.handle(&notices[0], &f.world(), t(at + 10));
        assert_eq!(s.decide(&f.world(), t(at + 10)), []);
        assert_eq!(s.decide(&f.world(), t(at + 90)), [evict("a", "n1")]);
        // Deleted at the block's end at the latest.
        assert_eq!(
            s.decide(&f.world(), t(3600)),
            [delete("n1", DisruptionReason::Interrupted)]
        );
    }

    #[test]
    fn a_node_of_an_on_demand_reservation_with_an_end_date_is_left_running_at_its_end() {
        // EC2 keeps such instances running as plain on-demand ones.
        let lead = Duration::from_secs(40 * 60);
        let f = in_reservation(crate::catalog::ReservationKind::OnDemand, 3600);
        assert_eq!(next_reservation_ending(&f.world(), t(0), lead), None);
        for at in [1200, 3600, 7200] {
            assert!(reservation_endings(&f.world(), t(at), lead).is_empty());
        }
    }

    #[test]
    fn a_block_warned_of_before_the_lead_takes_no_launch_until_its_end() {
        // The catalog (lead zero) still offers the block an hour before its
        // end; EC2's warning about it says otherwise.
        let f = in_block(3600);
        let offering = f.catalog.reservation("cr-1").unwrap().offering();
        let mut s = Interruptions::default();
        assert!(!s.blocks(&offering, t(0)));
        let warning = Notice::ReservationEnding {
            claim: "n1".into(),
            end: t(3600),
        };
        s.handle(&warning, &f.world(), t(0));
        assert!(s.blocks(&offering, t(0)));
        assert!(s.blocks(&offering, t(3599)));
        // Another reservation of the same type and zone still takes launches.
        let mut other = offering.clone();
        other.reservation.as_mut().unwrap().id = "cr-2".into();
        assert!(!s.blocks(&other, t(0)));
        // Forgotten once the block has ended.
        s.decide(&f.world(), t(3600));
        assert!(!s.blocks(&offering, t(3600)));
    }

    #[test]
    fn evictions_issued_in_one_call_count_against_the_pdb() {
        let mut f = Fixture::new([node("n1").spot().pods([pod("c").pdb(0), pod("d").pdb(0)])]);
        f.pdbs = vec![pdb("ml/cd", 1)];
        let mut s = Interruptions::default();
        s.handle(&interrupt("n1", 0), &f.world(), t(0));
        assert_eq!(
            s.decide(&f.world(), t(0)),
            [
                cordon("n1", DisruptionReason::Interrupted),
                evict("c", "n1")
            ]
        );
        // The driver refreshed the PDB: it allows one more.
        assert_eq!(s.decide(&f.world(), t(1)), [evict("d", "n1")]);
    }

    #[test]
    fn repeated_decide_calls_and_repeated_notices_do_not_repeat_actions() {
        let f = Fixture::new([node("n1").spot().pods([pod("a").checkpoints(), pod("b")])]);
        let mut s = Interruptions::default();
        assert!(s.handle(&interrupt("n1", 0), &f.world(), t(0)).is_some());
        assert_eq!(s.decide(&f.world(), t(0)).len(), 3);
        assert_eq!(s.decide(&f.world(), t(0)), []);
        assert_eq!(s.handle(&interrupt("n1", 1), &f.world(), t(1)), None);
        assert_eq!(s.handle(&rebalance("n1"), &f.world(), t(1)), None);
        assert_eq!(s.decide(&f.world(), t(1)), []);
    }

    fn rebalance(claim: &str) -> Notice {
        Notice::Rebalance {
            claim: claim.into(),
        }
    }

    #[test]
    fn notices_for_unknown_claims_are_ignored() {
        let f = Fixture::new([node("n1").spot().pods([pod("a")])]);
        let mut s = Interruptions::default();
        assert_eq!(s.handle(&interrupt("ghost", 0), &f.world(), t(0)), None);
        s.handle(&rebalance("ghost"), &f.world(), t(0));
        s.handle(
            &Notice::Terminated {
                claim: "ghost".into(),
            },
            &f.world(),
            t(0),
        );
        assert_eq!(s.decide(&f.world(), t(0)), []);
        assert_eq!(s.next_deadline(), None);
        assert!(s.pods_needing_replacement(&f.world()).is_empty());
    }

    #[test]
    fn a_terminated_instance_is_deleted_at_once_and_once() {
        let f = Fixture::new([node("n1").spot().pods([pod("a")])]);
        let mut s = Interruptions::default();
        let gone = Notice::Terminated { claim: "n1".into() };
        assert_eq!(s.handle(&gone, &f.world(), t(0)), None);
        assert_eq!(s.next_deadline(), Some(t(0)));
        assert_eq!(
            s.decide(&f.world(), t(0)),
            [delete("n1", DisruptionReason::Terminated)]
        );
        s.handle(&gone, &f.world(), t(1));
        assert_eq!(s.decide(&f.world(), t(1)), []);
    }

    #[test]
    fn interrupted_pods_need_replacement_until_they_are_evicted() {
        let f = Fixture::new([
            node("n1")
                .spot()
                .pods([pod("a").checkpoints(), pod("b"), pod("p").placeholder()]),
            node("n2").pods([pod("c")]),
        ]);
        let mut s = Interruptions::default();
        s.handle(&interrupt("n1", 0), &f.world(), t(0));
        let names = |s: &Interruptions| -> Vec<String> {
            s.pods_needing_replacement(&f.world())
                .into_iter()
                .map(|p| p.name)
                .collect()
        };
        assert_eq!(names(&s), ["a", "b"]);
        s.decide(&f.world(), t(0));
        assert_eq!(names(&s), ["a"], "b was evicted, its new pod is pending");
    }

    #[test]
    fn interrupted_and_capacity_starved_offerings_are_unavailable_for_the_ttl() {
        let f = Fixture::new([node("n1").spot()]);
        let mut s = Interruptions::default();
        let key = f.nodes[0].offering.clone();
        s.handle(&interrupt("n1", 0), &f.world(), t(0));
        let other = OfferingKey {
            zone: "use1-az2".into(),
            ..key.clone()
        };
        s.handle(
            &Notice::InsufficientCapacity {
                offering: other.clone(),
            },
            &f.world(),
            t(60),
        );
        // The interrupted pool stays out for the market's expected closure
        // (at least the TTL); the capacity-starved one for the TTL.
        let until = reclaim_until(&f, &key);
        assert!(until > t(660));
        assert!(s.is_unavailable(&key, until - chrono::Duration::seconds(1)));
        assert!(!s.is_unavailable(&key, until));
        assert_eq!(
            s.unavailable(t(659)).cloned().collect::<Vec<_>>(),
            [key.clone(), other.clone()]
        );
        assert_eq!(s.unavailable(t(660)).collect::<Vec<_>>(), [&key]);
        let offering = crate::catalog::Offering {
            instance_type: other.instance_type.clone(),
            region: REGION.into(),
            zone_id: other.zone.clone(),
            capacity_type: other.capacity_type,
            price_per_hour: 0.5,
            price_source: crate::catalog::PriceSource::SpotObserved,
            interruption_bucket: None,
            market: None,
            reservation: None,
        };
        assert!(s.blocks(&offering, t(659)));
        assert!(!s.blocks(&offering, t(660)));
    }

    #[test]
    fn rebalance_with_ignore_does_nothing() {
        let mut f = Fixture::new([node("n1").spot().pods([pod("a").checkpoints()])]);
        f.pools = rebalance_pool(RebalanceAction::Ignore);
        let mut s = Interruptions::default();
        s.handle(&rebalance("n1"), &f.world(), t(0));
        assert_eq!(s.decide(&f.world(), t(0)), []);
        assert!(!s.is_handling("n1"));
    }

    #[test]
    fn rebalance_with_checkpoint_asks_opted_in_pods_once_and_evicts_nothing() {
        let mut f = Fixture::new([node("n1").spot().pods([pod("a").checkpoints(), pod("b")])]);
        f.pools = rebalance_pool(RebalanceAction::Checkpoint);
        let mut s = Interruptions::default();
        s.handle(&rebalance("n1"), &f.world(), t(0));
        assert_eq!(s.decide(&f.world(), t(0)), [checkpoint("a", "n1", 90)]);
        assert_eq!(s.decide(&f.world(), t(500)), []);
        assert!(s.pods_needing_replacement(&f.world()).is_empty());
        // A later interruption notice is a new notice: ask again.
        s.handle(&interrupt("n1", 600), &f.world(), t(600));
        assert_eq!(
            s.decide(&f.world(), t(600)),
            [
                cordon("n1", DisruptionReason::Interrupted),
                checkpoint("a", "n1", 690),
                evict("b", "n1"),
            ]
        );
    }

    #[test]
    fn rebalance_with_replace_launches_replacements_and_drains_once_they_are_ready() {
        let mut f = Fixture::new([node("n1").spot().pods([pod("a")])]);
        f.pools = rebalance_pool(RebalanceAction::Replace);
        let mut s = Interruptions::default();
        s.handle(&rebalance("n1"), &f.world(), t(0));
        assert_eq!(
            s.decide(&f.world(), t(0)),
            [cordon("n1", DisruptionReason::Rebalance)]
        );
        assert_eq!(s.pods_needing_replacement(&f.world())[0].name, "a");
        // The replacement is on its way: keep running.
        f.nodes.push(node("n2").not_ready());
        assert_eq!(s.decide(&f.world(), t(60)), []);
        // It is ready: drain.
        *f.node_mut("n2") = node("n2");
        assert_eq!(s.decide(&f.world(), t(120)), [evict("a", "n1")]);
        *f.node_mut("n1") = node("n1").spot().cordoned();
        assert_eq!(
            s.decide(&f.world(), t(121)),
            [delete("n1", DisruptionReason::Rebalance)]
        );
    }

    #[test]
    fn rebalance_with_drain_checkpoints_then_evicts_and_always_honours_pdbs() {
        let mut f = Fixture::new([node("n1")
            .spot()
            .pods([pod("a").checkpoints(), pod("b").pdb(0)])]);
        f.pools = rebalance_pool(RebalanceAction::Drain);
        f.pdbs = vec![pdb("ml/b", 0)];
        let mut s = Interruptions::default();
        assert_eq!(s.handle(&rebalance("n1"), &f.world(), t(0)), None);
        assert_eq!(
            s.decide(&f.world(), t(0)),
            [
                cordon("n1", DisruptionReason::Rebalance),
                checkpoint("a", "n1", 90)
            ]
        );
        assert_eq!(s.next_deadline(), Some(t(90)));
        assert_eq!(s.decide(&f.world(), t(90)), [evict("a", "n1")]);
        // Long past the soft deadline, the PDB still holds.
        assert_eq!(s.decide(&f.world(), t(3600)), []);
        assert_eq!(s.next_deadline(), None);
        f.pdbs[0].disruptions_allowed = 1;
        assert_eq!(s.decide(&f.world(), t(3601)), [evict("b", "n1")]);
    }

    #[test]
    fn rebalance_drains_start_within_the_pools_disruption_budget() {
        let mut f = Fixture::new([
            node("n1").spot().pods([pod("a")]),
            node("n2").spot().pods([pod("b").checkpoints()]),
        ]);
        f.pools = vec![pool_with("gpu", |s| {
            s.interruption.on_rebalance_recommendation = RebalanceAction::Drain;
            s.disruption.budgets = vec![crate::api::Budget {
                nodes: "1".into(),
                ..Default::default()
            }];
        })];
        let mut s = Interruptions::default();
        s.handle(&rebalance("n1"), &f.world(), t(0));
        s.handle(&rebalance("n2"), &f.world(), t(0));
        assert_eq!(
            s.decide(&f.world(), t(0)),
            [cordon("n1", DisruptionReason::Rebalance), evict("a", "n1")]
        );
        assert_eq!(s.decide(&f.world(), t(100)), []);
        // n1 is gone: n2 starts, and its checkpoint wait starts with it.
        f.nodes.remove(0);
        assert_eq!(
            s.decide(&f.world(), t(200)),
            [
                cordon("n2", DisruptionReason::Rebalance),
                checkpoint("b", "n2", 290)
            ]
        );
    }

    #[test]
    fn rebalance_drain_of_a_do_not_disrupt_node_only_asks_for_checkpoints() {
        let mut f = Fixture::new([node("n1")
            .spot()
            .do_not_disrupt()
            .pods([pod("a").checkpoints()])]);
        f.pools = rebalance_pool(RebalanceAction::Drain);
        let mut s = Interruptions::default();
        s.handle(&rebalance("n1"), &f.world(), t(0));
        assert_eq!(s.decide(&f.world(), t(0)), [checkpoint("a", "n1", 90)]);
        assert_eq!(s.decide(&f.world(), t(600)), []);
    }

    #[test]
    fn nodes_that_left_the_world_are_forgotten() {
        let mut f = Fixture::new([node("n1").spot().pods([pod("a")])]);
        let mut s = Interruptions::default();
        s.handle(&interrupt("n1", 0), &f.world(), t(0));
        s.decide(&f.world(), t(0));
        f.nodes.clear();
        assert_eq!(s.decide(&f.world(), t(1)), []);
        assert!(!s.is_handling("n1"));
        // Only the offering's closure is left.
        let key = node("n1").spot().offering;
        assert_eq!(s.next_deadline(), Some(reclaim_until(&f, &key)));
    }

    /// When a pool interrupted at t(0) is available again: the market's
    /// expected closure of the pool, at least the TTL.
    fn reclaim_until(f: &Fixture, key: &OfferingKey) -> Time {
        let h = f
            .catalog
            .market(&key.instance_type, &key.zone)
            .mean_closure_hours();
        after(
            t(0),
            Config::default()
                .unavailable_ttl
                .max(Duration::from_secs_f64((h * 3600.0).clamp(0.0, 86_400.0))),
        )
    }
}
