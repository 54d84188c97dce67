//! Scale-down (consolidation): removes nodes that stayed empty for the pool's
//! `consolidateAfter`, and nodes whose pods fit on the other nodes or on one
//! cheaper replacement, within the pool's disruption budget. Every decision
//! is first a candidate and is carried out only if it still holds on a fresh
//! world after a validation period. It does not touch nodes under
//! interruption handling ([`super::interruption`]) nor nodes the caller
//! protects (pre-warm windows). Drifted nodes ([`super::drift`]) are
//! replaced through the same removal path (`consolidation::drifted`), and
//! so are nodes older than their pool's `expireAfter`
//! (`consolidation::expired`), the one removal not bound by budgets.
//!
//! The rules are written up in `docs/disruption.md`.

use super::interruption::{
    checkpoint_done, checkpoint_grace, offering_key, opted_in, policy, pool_of, Interruptions,
};
use super::pool_index::{PoolIndex, Repeated};
use super::time::after;
use super::{Action, ClaimRequest, DisruptionDecision, DisruptionReason, ManagedNode, Time, World};
use crate::api::{BudgetReason, ConsolidationPolicy, NodePool};
use crate::catalog::{CapacityType, InterruptionBucket, Offering};
use crate::cluster::{ClaimRef, NodeState, Pod, Pool, Resources};
use crate::plan::{self, Strategy};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

mod drifted;
mod expired;
mod idle;
mod unhealthy;

/// Knobs of consolidation.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// How long a decision must keep holding before it is carried out.
    pub validation_period: Duration,
    /// Smallest saving, as a share of the node's price, for which a node is
    /// replaced by a cheaper one (0.1: at least 10% cheaper).
    pub replace_min_saving: f64,
    /// How long to wait for a replacement to become ready before giving the
    /// replacement up (the old node was never cordoned).
    pub replacement_timeout: Duration,
    /// Planner used to find replacements (greedy: fast and deterministic).
    pub strategy: Strategy,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            validation_period: Duration::from_secs(15),
            replace_min_saving: 0.1,
            replacement_timeout: Duration::from_secs(15 * 60),
            strategy: Strategy::Greedy,
        }
    }
}

/// A consolidation decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Delete these empty nodes.
    Empty {
        /// Their claims.
        claims: Vec<String>,
    },
    /// Drain and delete the node: its pods fit on the other nodes.
    Delete {
        /// Its claim.
        claim: String,
        /// USD per hour saved.
        saving: f64,
    },
    /// Launch one cheaper node, then drain and delete this one.
    Replace {
        /// Its claim.
        claim: String,
        /// The replacement.
        replacement: ClaimRequest,
        /// USD per hour saved.
        saving: f64,
    },
}

/// What the node's real pods have been since when.
#[derive(Debug, Clone)]
struct Observed {
    /// Names of its real pods (neither pre-warm placeholders nor buffer
    /// chunks), in the node's order.
    pods: Vec<String>,
    since: Time,
    /// When it has been stable for the pool's `consolidateAfter`.
    eligible_at: Option<Time>,
    /// The last [`Consolidation::observe`] round that saw it Ready.
    round: u64,
    /// The node's [`ManagedNode::pods_revision`] when `pods` was checked.
    revision: u64,
}

/// A node being removed.
#[derive(Debug, Clone)]
struct Disrupting {
    reason: DisruptionReason,
    /// The replacement claims to wait for, and when they were launched.
    replacement: Option<(Vec<String>, Time)>,
    cordoned: bool,
    /// Checkpoint requests made when the drain started, by pod, with when
    /// they were made.
    requested: BTreeMap<String, Time>,
    /// Until when pods asked to checkpoint are waited for.
    checkpoint_until: Option<Time>,
    evicted: BTreeSet<String>,
    deleted: bool,
    /// The node no longer works (repair of a node that is not `Ready`):
    /// its pods are not running, so none is asked to checkpoint and
    /// `do-not-disrupt` pods are evicted too.
    broken: bool,
    /// When the claim is deleted whatever is still on the node (an expired
    /// node's expiry plus its pool's `terminationGracePeriod`): its
    /// termination then drains the rest.
    force_at: Option<Time>,
    /// An empty node cordoned at this time, to be deleted once a world
    /// that shows the cordon still shows it empty ([`Consolidation::remove_empty`]).
    recheck: Option<Time>,
    /// The empty node was not empty any more once cordoned: its cordon was
    /// taken back, and it is left alone once the world shows that.
    released: bool,
}

/// How soon after cordoning an empty node it is looked at again (a world
/// that shows the cordon, and whether a pod landed just before it).
const EMPTY_RECHECK: Duration = Duration::from_secs(1);

impl Disrupting {
    /// Nothing done yet.
    fn new(reason: DisruptionReason) -> Disrupting {
        Disrupting {
            reason,
            replacement: None,
            cordoned: false,
            requested: BTreeMap::new(),
            checkpoint_until: None,
            evicted: BTreeSet::new(),
            deleted: false,
            broken: false,
            force_at: None,
            recheck: None,
            released: false,
        }
    }

    /// Whether pod `p` was asked to checkpoint and is still given time: it
    /// has not acknowledged since and its wait has not ended.
    fn waits_for(&self, p: &super::BoundPod, now: Time) -> bool {
        let Some(asked) = self.requested.get(&p.pod.name) else {
            return false;
        };
        let acked = p.checkpoint_completed.is_some_and(|done| done >= *asked);
        !acked && self.checkpoint_until.is_some_and(|until| now < until)
    }

    /// Asks the opted-in pods of a node that is starting to drain (whatever
    /// the reason: underutilized, drifted, picked up again after a restart)
    /// to checkpoint by the end of its pool's `checkpointGracePeriod`, each
    /// one whose checkpoint can be complete by then; the others are evicted
    /// without waiting, as on a rebalance drain. Without this a training
    /// pod on a consolidated node would lose its work since its last
    /// checkpoint.
    fn request_checkpoints(
        &mut self,
        world: &World,
        n: &ManagedNode,
        now: Time,
        out: &mut Vec<Action>,
    ) {
        let until = ask_to_checkpoint(world, n, now, &mut self.requested, out);
        self.checkpoint_until = Some(until);
    }
}

/// Asks the node's opted-in pods (not `do-not-disrupt`) to checkpoint by
/// the end of its pool's `checkpointGracePeriod`, each one whose
/// checkpoint can be complete by then, recording when in `requested`;
/// returns the end of the wait. Shared by every drain that starts on a
/// node whose pods still run (consolidation, drift, repair's reboots).
pub(crate) fn ask_to_checkpoint(
    world: &World,
    n: &ManagedNode,
    now: Time,
    requested: &mut BTreeMap<String, Time>,
    out: &mut Vec<Action>,
) -> Time {
    let policy = policy(world, n);
    let hook = policy.is_some_and(|p| p.checkpoint_hook.is_some());
    let until = after(now, checkpoint_grace(policy));
    for p in n
        .pods
        .iter()
        .filter(|p| opted_in(p, hook) && !p.do_not_disrupt)
    {
        if checkpoint_done(&p.pod, now) > until {
            continue;
        }
        requested.insert(p.pod.name.clone(), now);
        out.push(Action::RequestCheckpoint {
            pod: p.pod.name.clone(),
            claim: n.claim.clone(),
            deadline: until,
        });
    }
    until
}

/// Consolidation state: what each node has looked like since when, the
/// decision under validation and the nodes being removed.
#[derive(Debug, Clone, Default)]
pub struct Consolidation {
    config: Config,
    /// By claim; looked up for every node on every round.
    observed: crate::core::FastMap<String, Observed>,
    candidate: Option<(Decision, Time)>,
    disrupting: BTreeMap<String, Disrupting>,
    /// The next time a pool's scheduled budget opens or closes.
    budget_change: Option<Time>,
    last_now: Option<Time>,
    /// Counts [`Consolidation::observe`] calls.
    round: u64,
    /// The [`World::nodes_revision`] `observed` was last brought up to.
    nodes_revision: u64,
    /// Each pool's `consolidateAfter` as the last round read it, by name.
    last_waits: Vec<(String, Option<std::time::Duration>)>,
    /// The pools' budgets `budget_change` was computed for, and when.
    budget_cache: Option<(Vec<Vec<crate::api::Budget>>, Time)>,
    /// When the next node expires (`expireAfter`), as of the last round.
    next_expiry: Option<Time>,
    /// The disruptions the last [`Consolidation::decide_in`] started.
    decided: Vec<DisruptionDecision>,
    /// When the next node's GPUs will have been idle long enough
    /// (`consolidation::idle`).
    idle_due: Option<Time>,
    /// Each node's pool, kept while the nodes and the pools' names stay the
    /// same: the scans of every node on every round read it.
    pools: PoolIndex,
}

/// What consolidation reads besides the world: the other decisions it must
/// not cross, and the interruption rates the planner uses.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// Nodes under interruption handling are left alone; offerings it marks
    /// unavailable are not used for replacements.
    pub interruptions: &'a Interruptions,
    /// Nodes that must stay (pre-warm windows).
    pub protected: &'a dyn Fn(&ManagedNode) -> bool,
    /// Learned interruption rates per hour, where known (as
    /// `plan::Input::learned_rate`); the catalog's advisor rates otherwise.
    pub learned_rate: Option<&'a crate::plan::RateFn<'a>>,
    /// Nodes repair is rebooting: not consolidated, not a destination,
    /// counted against the budgets.
    pub rebooting: &'a dyn Fn(&str) -> bool,
    /// Nodes repair gives up on this round, to replace
    /// (`consolidation::unhealthy`).
    pub repairs: &'a [crate::core::repair::Replacement],
}

impl<'a> Context<'a> {
    /// Nothing protected, no learned rates, nothing rebooting or repaired.
    pub fn new(interruptions: &'a Interruptions) -> Context<'a> {
        Context {
            interruptions,
            protected: &|_| false,
            learned_rate: None,
            rebooting: &|_| false,
            repairs: &[],
        }
    }

    /// The hourly interruption rate of an offering.
    fn rate(&self, o: &Offering) -> f64 {
        self.learned_rate
            .and_then(|f| f(o))
            .unwrap_or_else(|| o.interruption_rate_per_hour())
    }
}

/// What a decision round reads.
struct Round<'a, 'w> {
    world: &'a World<'w>,
    now: Time,
    ctx: Context<'a>,
    /// The states of the nodes holding capped pods, with their counts
    /// ([`NodeState::capped`]), made when a move first needs them.
    capped: std::cell::OnceCell<BTreeMap<&'a str, NodeState>>,
    /// The world's nodes by claim, made when first asked: the removals
    /// under way look theirs up on every round.
    by_claim: std::cell::OnceCell<crate::core::FastMap<&'a str, usize>>,
    /// Each of the world's nodes' pool (index into its pools), as
    /// [`pool_of`] finds it.
    pools: &'a [Option<usize>],
}

impl<'a> Round<'a, '_> {
    /// The world's node of `claim` (the first of the claim, as a search of
    /// the world would find it).
    fn node(&self, claim: &str) -> Option<&'a ManagedNode> {
        let nodes: &'a [ManagedNode] = self.world.nodes;
        let index = self.by_claim.get_or_init(|| {
            let mut index = crate::core::FastMap::default();
            for (i, n) in nodes.iter().enumerate() {
                index.entry(n.claim.as_str()).or_insert(i);
            }
            index
        });
        index.get(claim).map(|&i| &nodes[i])
    }

    /// The world's nodes, each with its pool (those of no pool left out),
    /// as [`pool_of`] would find them.
    fn nodes_with_pools(&self) -> impl Iterator<Item = (&'a ManagedNode, &'a NodePool)> + '_ {
        let (nodes, pools): (&'a [ManagedNode], &'a [NodePool]) =
            (self.world.nodes, self.world.pools);
        nodes
            .iter()
            .zip(self.pools)
            .filter_map(move |(n, p)| p.map(|p| (n, &pools[p])))
    }
}

impl Consolidation {
    /// Nothing observed yet.
    pub fn new(config: Config) -> Consolidation {
        Consolidation {
            config,
            ..Consolidation::default()
        }
    }

    /// Records what each node's real pods are, restarting its clock when they
    /// change (a node counts as empty or stable from the first time it is
    /// seen so; a buffer's chunks are not real pods for this clock).
    /// [`Consolidation::decide`] calls it too.
    pub fn observe(&mut self, world: &World, now: Time) {
        // Runs on every decision: no allocation when nothing changed, and the
        // pools' `consolidateAfter` parsed once per round, not per node.
        self.round = self.round.wrapping_add(1);
        let round = self.round;
        let consolidate_after: Vec<(&str, Option<std::time::Duration>)> = world
            .pools
            .iter()
            .map(|p| {
                let after = p
                    .spec
                    .disruption
                    .consolidate_after_duration()
                    .ok()
                    .flatten();
                (p.metadata.name.as_deref().unwrap_or_default(), after)
            })
            .collect();
        // The pools' waits as last round: a node whose pods did not change
        // keeps its `eligible_at`.
        let same_waits = self.last_waits.len() == consolidate_after.len()
            && self
                .last_waits
                .iter()
                .zip(&consolidate_after)
                .all(|((name, after), (n, a))| name == n && after == a);
        if !same_waits {
            self.last_waits = consolidate_after
                .iter()
                .map(|(n, a)| (n.to_string(), *a))
                .collect();
        }
        // The same nodes and waits as last round: every node's clock and
        // deadline are as they were (the loop below would only confirm it).
        let unchanged = same_waits && world.same_nodes_as(self.nodes_revision);
        self.nodes_revision = world.nodes_revision;
        let nodes: &[ManagedNode] = if unchanged { &[] } else { world.nodes };
        for n in nodes {
            if n.ready_at.is_none() {
                continue;
            }
            // The same pods, most often in the same order: one pass then.
            // A buffer's chunks do not count: the clock runs from the last
            // change of real work, so a node that held only chunks goes as
            // soon as its buffer no longer wants it, as a pre-warm window's
            // node does (`docs/buffers.md`).
            let names = || {
                real_pods(n)
                    .map(|p| p.name.as_str())
                    .filter(|p| !super::buffers::is_chunk(p))
            };
            let same = |o: &Observed| {
                let seen = || o.pods.iter().map(String::as_str);
                if seen().eq(names()) {
                    return true;
                }
                if o.pods.len() != names().count() {
                    return false;
                }
                let (mut a, mut b): (Vec<&str>, Vec<&str>) = (seen().collect(), names().collect());
                a.sort_unstable();
                b.sort_unstable();
                a == b
            };
            let eligible_at = |since: Time| {
                consolidate_after
                    .iter()
                    .find(|(name, _)| *name == n.nodepool)
                    .and_then(|(_, after)| *after)
                    .map(|d| after(since, d))
            };
            // One lookup for a node seen before (the common case).
            if let Some(o) = self.observed.get_mut(&n.claim) {
                // The driver says its pods have not changed since.
                let unchanged = n.pods_revision != 0 && o.revision == n.pods_revision;
                debug_assert!(
                    !unchanged || same(o),
                    "{}: pods changed, revision did not",
                    n.claim
                );
                o.revision = n.pods_revision;
                o.round = round;
                if unchanged && same_waits {
                    continue;
                }
                if !unchanged && !same(o) {
                    o.pods = names().map(str::to_string).collect();
                    o.since = now;
                }
                o.eligible_at = eligible_at(o.since);
                continue;
            }
            self.observed.insert(
                n.claim.clone(),
                Observed {
                    pods: names().map(str::to_string).collect(),
                    since: now,
                    eligible_at: eligible_at(now),
                    round,
                    revision: n.pods_revision,
                },
            );
        }
        // Nodes gone or not Ready (any more) are forgotten.
        if !unchanged {
            self.observed.retain(|_, o| o.round == round);
        }
        // The next budget change stays the same until it passes or the
        // pools' budgets change: no cron parsing on every decision.
        let fresh = self.budget_cache.as_ref().is_some_and(|(b, from)| {
            b.len() == world.pools.len()
                && b.iter()
                    .zip(world.pools)
                    .all(|(b, p)| *b == p.spec.disruption.budgets)
                && *from <= now
                && self.budget_change.is_none_or(|t| now < t)
        });
        if !fresh {
            let budgets = world
                .pools
                .iter()
                .map(|p| p.spec.disruption.budgets.clone())
                .collect();
            self.budget_change = world
                .pools
                .iter()
                .filter_map(|p| super::budgets::next_deadline(p, now).ok().flatten())
                .min();
            self.budget_cache = Some((budgets, now));
        }
        self.last_now = Some(now);
    }

    /// The decision under validation, with when it was made.
    pub fn candidate(&self) -> Option<(&Decision, Time)> {
        self.candidate.as_ref().map(|(d, t)| (d, *t))
    }

    /// One round: carries on the removals under way (evictions within PDBs,
    /// deletion once a node is empty), carries out the candidate if the
    /// validation period is over and it still holds (else drops it), and
    /// records a new candidate when there is none. `protected` says which
    /// nodes must stay (pre-warm windows); nodes under interruption handling
    /// are left to `interruptions`. Spot risk is the catalog's; see
    /// [`Consolidation::decide_in`] for learned rates.
    pub fn decide(
        &mut self,
        world: &World,
        now: Time,
        interruptions: &Interruptions,
        protected: &dyn Fn(&ManagedNode) -> bool,
    ) -> Vec<Action> {
        let ctx = Context {
            protected,
            ..Context::new(interruptions)
        };
        self.decide_in(world, now, &ctx)
    }

    /// [`Consolidation::decide`] with everything it reads besides the world
    /// in one [`Context`], including learned interruption rates.
    pub fn decide_in(&mut self, world: &World, now: Time, ctx: &Context) -> Vec<Action> {
        self.decided.clear();
        self.observe(world, now);
        let timeout = self.config.replacement_timeout;
        let mut pools = std::mem::take(&mut self.pools);
        pools.update(world, Repeated::First);
        let round = Round {
            world,
            now,
            ctx: *ctx,
            capped: std::cell::OnceCell::new(),
            by_claim: std::cell::OnceCell::new(),
            pools: pools.nodes(),
        };
        self.disrupting.retain(|claim, d| {
            round.node(claim).is_some()
                && d.replacement
                    .as_ref()
                    .is_none_or(|(r, at)| all_ready(&round, r) || now < after(*at, timeout))
        });
        self.resume_orphans(&round);
        let mut out = Vec::new();
        if self.candidate.is_none() {
            self.candidate = self.find(&round).map(|d| (d, now));
        }
        if let Some((decision, at)) = self.candidate.take() {
            if now >= after(at, self.config.validation_period) {
                self.carry_out(&round, decision, &mut out);
            } else {
                self.candidate = Some((decision, at));
            }
        }
        self.replace_unhealthy(&round, &mut out);
        self.replace_expired(&round, &mut out);
        self.replace_drifted(&round, &mut out);
        self.remove_idle_gpu_nodes(&round, &mut out);
        self.progress(&round, &mut out);
        self.pools = pools;
        out
    }

    /// The next time [`Consolidation::decide`] may act without any change in
    /// the world: the end of the validation period, a node becoming stable for
    /// `consolidateAfter`, a scheduled disruption budget opening or closing, a
    /// replacement timing out, a node expiring, an expired node's
    /// `terminationGracePeriod` running out.
    pub fn next_deadline(&self) -> Option<Time> {
        let pending = |t: &Time| self.last_now.is_none_or(|n| *t > n);
        let validation = self
            .candidate
            .as_ref()
            .map(|(_, at)| after(*at, self.config.validation_period));
        let eligible = self.observed.values().filter_map(|o| o.eligible_at);
        let timeouts = self
            .disrupting
            .values()
            .filter_map(|d| d.replacement.as_ref())
            .map(|(_, at)| after(*at, self.config.replacement_timeout));
        let checkpoints = self
            .disrupting
            .values()
            .filter(|d| !d.deleted && !d.requested.is_empty())
            .filter_map(|d| d.checkpoint_until);
        let forced = self
            .disrupting
            .values()
            .filter(|d| !d.deleted)
            .filter_map(|d| d.force_at);
        let rechecks = self
            .disrupting
            .values()
            .filter(|d| !d.deleted && !d.released)
            .filter_map(|d| d.recheck.map(|t| after(t, EMPTY_RECHECK)));
        validation
            .into_iter()
            .chain(self.idle_due)
            .chain(self.budget_change)
            .chain(eligible)
            .chain(timeouts)
            .chain(checkpoints)
            .chain(self.next_expiry)
            .chain(forced)
            .chain(rechecks)
            .filter(pending)
            .min()
    }

    /// Takes in that the claim of a replacement could not be created: the
    /// removals waiting for it (none of them started yet: a node is
    /// cordoned only once its replacements are Ready) are given up.
    pub fn launch_failed(&mut self, claim: &str) {
        self.disrupting.retain(|_, d| {
            d.cordoned
                || !d
                    .replacement
                    .as_ref()
                    .is_some_and(|(r, _)| r.iter().any(|c| c == claim))
        });
    }

    /// Whether consolidation is removing the node.
    pub fn is_disrupting(&self, claim: &str) -> bool {
        self.disrupting.contains_key(claim)
    }

    /// The claims [`Consolidation::is_disrupting`] says yes to.
    pub fn disrupting(&self) -> impl Iterator<Item = &str> {
        self.disrupting.keys().map(String::as_str)
    }

    /// The best decision now: every eligible empty node (within budgets),
    /// else the underutilized node that moves the fewest pods (then saves the
    /// most).
    fn find(&self, r: &Round) -> Option<Decision> {
        let mut budgets = BTreeMap::new();
        let mut allowed = |pool: &NodePool, reason: BudgetReason| -> u32 {
            let name = pool.metadata.name.clone().unwrap_or_default();
            *budgets
                .entry((name, reason))
                .or_insert_with(|| self.allowed(r, pool, reason))
        };
        // A node with pods is a candidate only in a pool that consolidates
        // underutilized nodes: elsewhere its eligibility is not asked (this
        // runs on every round over every node).
        let underutilized = |p: &NodePool| {
            p.spec.disruption.consolidation_policy == ConsolidationPolicy::WhenEmptyOrUnderutilized
        };
        let eligible: Vec<(&ManagedNode, &NodePool)> = r
            .nodes_with_pools()
            .filter(|(n, p)| underutilized(p) || real_pods(n).next().is_none())
            .filter(|(n, _)| self.eligible(r, n))
            .collect();
        let (mut empty, busy): (Vec<_>, Vec<_>) = eligible
            .into_iter()
            .partition(|(n, _)| real_pods(n).next().is_none());

        // The most expensive empty nodes first, as many as each pool allows.
        empty.sort_by(|(a, _), (b, _)| {
            b.price_per_hour
                .total_cmp(&a.price_per_hour)
                .then(a.claim.cmp(&b.claim))
        });
        let mut taken: BTreeMap<&str, u32> = BTreeMap::new();
        let mut claims = Vec::new();
        for (n, pool) in empty {
            let used = taken.entry(n.nodepool.as_str()).or_default();
            if *used < allowed(pool, BudgetReason::Empty) {
                *used += 1;
                claims.push(n.claim.clone());
            }
        }
        if !claims.is_empty() {
            return Some(Decision::Empty { claims });
        }

        let mut best: Option<(usize, Decision)> = None;
        for (n, pool) in busy {
            if !underutilized(pool) || allowed(pool, BudgetReason::Underutilized) == 0 {
                continue;
            }
            let Some(d) = self.underutilized(r, n, pool, None) else {
                continue;
            };
            let moved = real_pods(n).count();
            let better = best
                .as_ref()
                .is_none_or(|(m, b)| (moved, -saving(&d)) < (*m, -saving(b)));
            if better {
                best = Some((moved, d));
            }
        }
        best.map(|(_, d)| d)
    }

    /// Carries out a decision that still holds on this world.
    fn carry_out(&mut self, r: &Round, decision: Decision, out: &mut Vec<Action>) {
        let (claim, wanted) = match decision {
            Decision::Empty { claims } => return self.remove_empty(r, claims, out),
            Decision::Delete { claim, .. } => (claim, None),
            Decision::Replace {
                claim, replacement, ..
            } => (claim, Some(replacement.claim)),
        };
        let Some(n) = r.node(&claim) else {
            return;
        };
        let Some(pool) = pool_of(r.world, n) else {
            return;
        };
        if !self.eligible(r, n) || self.allowed(r, pool, BudgetReason::Underutilized) == 0 {
            return;
        }
        // The same kind of decision must hold now.
        let replacement = match self.underutilized(r, n, pool, wanted.as_deref()) {
            Some(Decision::Delete { .. }) if wanted.is_none() => None,
            Some(Decision::Replace { replacement, .. }) if wanted.is_some() => {
                let name = replacement.claim.clone();
                out.push(Action::Launch(replacement));
                Some((vec![name], r.now))
            }
            _ => return,
        };
        self.decided.push(DisruptionDecision {
            reason: DisruptionReason::Underutilized,
            claims: vec![claim.clone()],
            replacements: replacement
                .as_ref()
                .map(|(names, _)| names.clone())
                .unwrap_or_default(),
        });
        self.disrupting.insert(
            claim,
            Disrupting {
                replacement,
                ..Disrupting::new(DisruptionReason::Underutilized)
            },
        );
    }

    /// The disruptions the last [`Consolidation::decide_in`] started.
    pub fn decisions(&self) -> &[DisruptionDecision] {
        &self.decided
    }

    /// Picks up the drains a restarted controller lost: a ready node that
    /// carries our disruption taint ([`ManagedNode::disrupted`]) with no
    /// drain of ours nor interruption handling owning it is drained again
    /// (cordon, checkpoint requests, evictions within PDBs, deletion),
    /// whether consolidation or drift had cordoned it. Without this it
    /// would stay cordoned for good, holding its pool's budget and its
    /// capacity.
    ///
    /// It is drained again rather than un-cordoned (as Karpenter removes
    /// its `disrupted` taint from an abandoned disruption) because here the
    /// cordon is the point of no return: it comes only after the decision
    /// was validated on a fresh world and its replacements were Ready, and
    /// evictions and checkpoint requests may have followed. Un-cordoning
    /// would keep a half-drained node and its already running replacement
    /// both, and a drain that no restart cut short does not re-check
    /// either once cordoned: pods that find no place are pending and get
    /// new capacity like any other. A node held by `do-not-disrupt` stays
    /// as it is, unless it has expired (`expireAfter` is not held back by
    /// it). The reason it was cordoned for is not recorded: expiry when it
    /// has expired, drift when it is drifted, else empty or underutilized by
    /// its pods.
    fn resume_orphans(&mut self, r: &Round) {
        for n in r.world.nodes {
            // Most nodes are not marked: they are turned away before the
            // lookups by claim (this runs on every round, over every node).
            if !n.disrupted || n.ready_at.is_none() {
                continue;
            }
            if self.disrupting.contains_key(&n.claim) || r.ctx.interruptions.is_handling(&n.claim) {
                continue;
            }
            let expiry = expired::expiry(n, r.now);
            if n.do_not_disrupt && expiry.is_none() {
                continue;
            }
            let reason = if expiry.is_some() {
                DisruptionReason::Expired
            } else if n.drifted.is_some() {
                DisruptionReason::Drifted
            } else if real_pods(n).next().is_none() {
                DisruptionReason::Empty
            } else {
                DisruptionReason::Underutilized
            };
            self.disrupting.insert(
                n.claim.clone(),
                Disrupting {
                    force_at: expiry.and_then(|e| e.force_at),
                    ..Disrupting::new(reason)
                },
            );
        }
    }

    /// Cordons the empty nodes that are still empty and eligible, within
    /// their pools' budgets. Each is deleted by [`Consolidation::progress`]
    /// once a world that shows its cordon still shows it empty: a pod bound
    /// between the world this decision read and the cordon would otherwise
    /// be evicted with the node. If one was, the cordon is taken back.
    fn remove_empty(&mut self, r: &Round, claims: Vec<String>, out: &mut Vec<Action>) {
        let mut left: BTreeMap<String, u32> = BTreeMap::new();
        let mut removed = Vec::new();
        for claim in claims {
            let Some(n) = r.node(&claim) else {
                continue;
            };
            let Some(pool) = pool_of(r.world, n) else {
                continue;
            };
            if !self.eligible(r, n) || real_pods(n).next().is_some() {
                continue;
            }
            let budget = left
                .entry(n.nodepool.clone())
                .or_insert_with(|| self.allowed(r, pool, BudgetReason::Empty));
            if *budget == 0 {
                continue;
            }
            *budget -= 1;
            let reason = DisruptionReason::Empty;
            out.push(Action::Cordon {
                claim: claim.clone(),
                reason,
            });
            removed.push(claim.clone());
            self.disrupting.insert(
                claim,
                Disrupting {
                    cordoned: true,
                    recheck: Some(r.now),
                    ..Disrupting::new(reason)
                },
            );
        }
        if !removed.is_empty() {
            self.decided.push(DisruptionDecision {
                reason: DisruptionReason::Empty,
                claims: removed,
                replacements: Vec::new(),
            });
        }
    }

    /// Carries on the removals under way: once every replacement is ready,
    /// cordon and ask opted-in pods to checkpoint; evict
    /// within PDBs (never do-not-disrupt pods, nor pods asked to checkpoint
    /// before they acknowledge or their wait ends); delete once empty, or,
    /// for an expired node, at its `force_at` whatever is left (its
    /// termination drains the rest). A node that gets an interruption
    /// notice meanwhile is left to `interruptions`.
    fn progress(&mut self, r: &Round, out: &mut Vec<Action>) {
        let (world, now) = (r.world, r.now);
        let mut pdb_left: Vec<u32> = world.pdbs.iter().map(|p| p.disruptions_allowed).collect();
        let mut settled = Vec::new();
        for (claim, d) in &mut self.disrupting {
            let Some(n) = r.node(claim) else {
                continue;
            };
            if let (Some(at), false) = (d.recheck, d.deleted) {
                if r.ctx.interruptions.is_handling(claim) {
                    // A notice came meanwhile: its handling deletes the node.
                    continue;
                }
                if d.released {
                    if !n.disrupted {
                        settled.push(claim.clone());
                    }
                } else if n.state.unschedulable && now > at {
                    if real_pods(n).next().is_none() {
                        d.deleted = true;
                        out.push(Action::Delete {
                            claim: claim.clone(),
                            reason: d.reason,
                        });
                    } else {
                        d.released = true;
                        out.push(Action::Uncordon {
                            claim: claim.clone(),
                        });
                    }
                }
                continue;
            }
            if d.deleted || r.ctx.interruptions.is_handling(claim) {
                continue;
            }
            if d.force_at.is_some_and(|t| now >= t) {
                if !d.cordoned {
                    d.cordoned = true;
                    out.push(Action::Cordon {
                        claim: claim.clone(),
                        reason: d.reason,
                    });
                }
                d.deleted = true;
                out.push(Action::Delete {
                    claim: claim.clone(),
                    reason: d.reason,
                });
                continue;
            }
            if d.replacement
                .as_ref()
                .is_some_and(|(claims, _)| !all_ready(r, claims))
            {
                continue;
            }
            if !d.cordoned {
                d.cordoned = true;
                out.push(Action::Cordon {
                    claim: claim.clone(),
                    reason: d.reason,
                });
                if !d.broken {
                    d.request_checkpoints(world, n, now, out);
                }
            }
            for p in &n.pods {
                if (p.do_not_disrupt && !d.broken)
                    || d.evicted.contains(&p.pod.name)
                    || d.waits_for(p, now)
                {
                    continue;
                }
                if let Some(left) = p.pdb.and_then(|i| pdb_left.get_mut(i)) {
                    if *left == 0 {
                        continue;
                    }
                    *left -= 1;
                }
                d.evicted.insert(p.pod.name.clone());
                out.push(Action::Evict {
                    pod: p.pod.name.clone(),
                    claim: claim.clone(),
                });
            }
            if n.pods.is_empty() {
                d.deleted = true;
                out.push(Action::Delete {
                    claim: claim.clone(),
                    reason: d.reason,
                });
            }
        }
        for claim in settled {
            self.disrupting.remove(&claim);
        }
    }

    /// Whether the node may be consolidated at all now: ready, not
    /// do-not-disrupt, not cordoned, not under interruption handling, not
    /// protected, not already being removed, and stable for its pool's
    /// `consolidateAfter`.
    fn eligible(&self, r: &Round, n: &ManagedNode) -> bool {
        // The cheap, most selective test first: `protected` reads cron
        // schedules.
        n.ready_at.is_some()
            && !n.state.in_flight
            && !n.do_not_disrupt
            && !n.state.unschedulable
            && self
                .observed
                .get(&n.claim)
                .and_then(|o| o.eligible_at)
                .is_some_and(|at| at <= r.now)
            && !r.ctx.interruptions.is_handling(&n.claim)
            && !(r.ctx.rebooting)(&n.claim)
            && !self.disrupting.contains_key(&n.claim)
            && !self.is_replacement(&n.claim)
            && !(r.ctx.protected)(n)
    }

    /// Whether the claim was launched to replace a node still being
    /// removed: it waits for that node's pods, empty or not.
    fn is_replacement(&self, claim: &str) -> bool {
        self.disrupting.values().any(|d| {
            d.replacement
                .as_ref()
                .is_some_and(|(r, _)| r.iter().any(|c| c == claim))
        })
    }

    /// How many more of the pool's nodes may be disrupted now for `reason`.
    fn allowed(&self, r: &Round, pool: &NodePool, reason: BudgetReason) -> u32 {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let mine: Vec<&ManagedNode> = r
            .world
            .nodes
            .iter()
            .filter(|n| n.nodepool == name)
            .collect();
        let disrupting = mine
            .iter()
            .filter(|n| {
                n.state.unschedulable
                    || self.disrupting.contains_key(&n.claim)
                    || r.ctx.interruptions.is_handling(&n.claim)
                    || (r.ctx.rebooting)(&n.claim)
            })
            .count();
        super::budgets::allowed_disruptions_for(
            pool,
            reason,
            mine.len() as u32,
            disrupting as u32,
            r.now,
        )
        .unwrap_or(0)
    }

    /// Delete or Replace for a node with pods, if either is possible: no
    /// do-not-disrupt pod, every PDB allows a disruption, and the pods fit on
    /// the other nodes, or on them and one node cheaper by the margin.
    /// `name` is the replacement's claim when it was chosen already.
    fn underutilized(
        &self,
        r: &Round,
        n: &ManagedNode,
        pool: &NodePool,
        name: Option<&str>,
    ) -> Option<Decision> {
        if blocked(r, n) {
            return None;
        }
        let pods: Vec<Pod> = real_pods(n).cloned().collect();
        let others = self.destinations(r, n);
        let all: Vec<usize> = (0..pods.len()).collect();
        if !takes_devices(&pods)
            && plan::pack::place_on_existing(&pods, &all, &others)
                .1
                .is_empty()
        {
            return Some(Decision::Delete {
                claim: n.claim.clone(),
                saving: n.price_per_hour,
            });
        }
        let replacement = self.replacement(r, n, pool, &pods, &others, name)?;
        Some(Decision::Replace {
            claim: n.claim.clone(),
            saving: n.price_per_hour - replacement.price_per_hour,
            replacement,
        })
    }

    /// One node, cheaper by the margin, that takes the pods the other nodes
    /// cannot; for a spot node, from a spot pool no riskier than its own and
    /// not the riskiest available.
    fn replacement(
        &self,
        r: &Round,
        n: &ManagedNode,
        pool: &NodePool,
        pods: &[Pod],
        others: &[&NodeState],
        name: Option<&str>,
    ) -> Option<ClaimRequest> {
        let w = r.world;
        if pool.is_marked_not_ready() {
            return None;
        }
        let owned = without_free_devices(others, pods);
        let refs: Vec<&NodeState>;
        let others = match &owned {
            Some(o) => {
                refs = o.iter().collect();
                &refs[..]
            }
            None => others,
        };
        let planner_pool = Pool::from_api(pool, daemonset_overhead(n)).ok()?;
        let pools = [planner_pool];
        let open = |o: &Offering| r.ctx.interruptions.blocks(o, r.now);
        let riskier = spot_guard(w, n, &pools, &open, &r.ctx);
        let unavailable = |o: &Offering| open(o) || riskier(o);
        let p = self.plan_moves(r, &pools, others, pods, &unavailable);
        let [new] = p.nodes.as_slice() else {
            return None;
        };
        let cheap_enough =
            new.price_per_hour <= n.price_per_hour * (1.0 - self.config.replace_min_saving);
        if !p.unschedulable.is_empty() || !cheap_enough {
            return None;
        }
        let name = name
            .map(str::to_string)
            .unwrap_or_else(|| replacement_name(&n.nodepool, &n.claim, r.now));
        request_for(w, n, new, name)
    }
}

impl Consolidation {
    /// The nodes that may take `n`'s pods: the other ready, schedulable
    /// nodes that stay (not being removed, interrupted or drifted) and are
    /// not waiting for another node's pods as its replacement.
    /// A node holding capped pods is given with their counts, so that a
    /// moved pod is not taken to fit beside its siblings.
    fn destinations<'r>(&self, r: &'r Round<'_, '_>, n: &ManagedNode) -> Vec<&'r NodeState> {
        let capped = r.capped.get_or_init(|| {
            r.world
                .nodes
                .iter()
                .filter_map(|o| Some((o.claim.as_str(), o.state_with_caps()?)))
                .collect()
        });
        r.world
            .nodes
            .iter()
            .filter(|o| {
                o.claim != n.claim
                    && o.drifted.is_none()
                    && o.ready_at.is_some()
                    && !o.state.in_flight
                    && !o.state.unschedulable
                    && !self.disrupting.contains_key(&o.claim)
                    && !self.is_replacement(&o.claim)
                    && !r.ctx.interruptions.is_handling(&o.claim)
                    && !(r.ctx.rebooting)(&o.claim)
            })
            .map(|o| capped.get(o.claim.as_str()).unwrap_or(&o.state))
            .collect()
    }

    /// The planner's new nodes (of `pools`) for `pods` that `others` cannot
    /// take, without the offerings `unavailable` rules out.
    fn plan_moves(
        &self,
        r: &Round,
        pools: &[Pool],
        others: &[&NodeState],
        pods: &[Pod],
        unavailable: &dyn Fn(&Offering) -> bool,
    ) -> plan::Plan {
        let input = plan::Input {
            catalog: r.world.catalog,
            region: r.world.region,
            pools,
            nodes: others,
            pods,
            unavailable,
            learned_rate: r.ctx.learned_rate,
            offerings: None,
            now: None,
        };
        plan::plan(
            &input,
            self.config.strategy,
            &plan::Options::default(),
            &|| 0.0,
        )
    }
}

/// The spot-to-spot guard: for a spot node, the spot offerings a replacement
/// may not use — those riskier than the node's own pool, and the riskiest of
/// the pool's available spot offerings when they are not all equally risky.
/// Nothing is ruled out for an on-demand node.
fn spot_guard<'c>(
    w: &World,
    n: &ManagedNode,
    pools: &[Pool],
    unavailable: &dyn Fn(&Offering) -> bool,
    ctx: &'c Context<'c>,
) -> impl Fn(&Offering) -> bool + 'c {
    let spot = n.offering.capacity_type == CapacityType::Spot;
    let current = w
        .catalog
        .offerings_in(w.region)
        .find(|o| offering_key(o) == n.offering)
        .map(|o| ctx.rate(o))
        .unwrap_or_else(|| InterruptionBucket::WORST.rate_per_hour());
    let input = plan::Input {
        catalog: w.catalog,
        region: w.region,
        pools,
        nodes: &[],
        pods: &[],
        unavailable,
        learned_rate: ctx.learned_rate,
        offerings: None,
        now: None,
    };
    let rates: Vec<f64> = plan::candidates::candidates(&input)
        .iter()
        .filter(|c| c.offering.capacity_type == CapacityType::Spot)
        .map(|c| c.rate)
        .collect();
    let max = rates.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
    move |o: &Offering| {
        if !spot || o.capacity_type != CapacityType::Spot {
            return false;
        }
        let rate = ctx.rate(o);
        rate > current || (rate >= max && max > min)
    }
}

/// Whether one of the node's real pods holds it: `do-not-disrupt`, DRA
/// claims that keep it there ([`held_by_claims`]), or a PDB that allows no
/// disruption now.
fn blocked(r: &Round, n: &ManagedNode) -> bool {
    n.pods.iter().any(|p| {
        !p.placeholder
            && (p.do_not_disrupt
                || held_by_claims(&p.pod)
                || p.pdb
                    .and_then(|i| r.world.pdbs.get(i))
                    .is_some_and(|b| b.disruptions_allowed == 0))
    })
}

/// Whether the pod's DRA claims keep it on its node. A pod whose claims
/// are all its own (made from templates: a re-created pod gets new ones,
/// allocated where it lands) can move wherever some shape serves them
/// ([`Pod::devices`], matched as a re-created pod's would be); one that
/// names a shared ResourceClaim (allocated on this node, its devices
/// pinned here) or a pod group's claim, or whose claims could not be
/// matched, cannot (`docs/dra.md`).
fn held_by_claims(pod: &Pod) -> bool {
    !pod.resource_claims.is_empty() && !claims_follow(pod)
}

/// Whether the pod's claims are all its own and were matched, unpinned,
/// against the shapes, some of which serve them.
fn claims_follow(pod: &Pod) -> bool {
    let matched = pod
        .devices
        .as_ref()
        .is_some_and(|d| d.pinned.is_none() && d.group.is_none() && d.satisfiable());
    matched && pod.resource_claims.iter().all(ClaimRef::is_own)
}

/// Whether some of `pods` take devices through DRA claims: the existing
/// nodes' published devices are not matched against their claims, so such
/// pods move only onto a new node launched to serve them (see
/// [`without_free_devices`]).
fn takes_devices(pods: &[Pod]) -> bool {
    pods.iter().any(|p| p.devices.is_some())
}

/// Copies of `nodes` with no free units of the device resources `pods`' DRA
/// claims would take on any shape: an existing node's published devices are
/// not matched against a claim's selectors, so they are not offered to it.
/// `None` when no pod takes devices: `nodes` are offered as they are.
fn without_free_devices(nodes: &[&NodeState], pods: &[Pod]) -> Option<Vec<NodeState>> {
    if !takes_devices(pods) {
        return None;
    }
    let mut nodes: Vec<NodeState> = nodes.iter().map(|&n| n.clone()).collect();
    let names: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| p.devices.as_ref())
        .flat_map(|d| d.shapes.values().filter_map(|a| a.as_ref().ok()))
        .flat_map(|a| a.demand.iter().map(|(k, _)| k.to_string()))
        .collect();
    for n in &mut nodes {
        for r in &names {
            let used = n.used.get(r);
            if n.allocatable.get(r) > used {
                n.allocatable.set(r, used);
            }
        }
    }
    Some(nodes)
}

/// The launch of a planned node that takes pods of `n` (same pool), named
/// `name`; `None` when the catalog no longer has its offering.
fn request_for(
    w: &World,
    n: &ManagedNode,
    new: &plan::PlannedNode,
    name: String,
) -> Option<ClaimRequest> {
    let offering = w
        .catalog
        .offerings_in(w.region)
        .find(|o| {
            o.instance_type == new.instance_type
                && o.zone_id == new.zone
                && o.capacity_type == new.capacity_type
        })
        .map(offering_key)?;
    Some(ClaimRequest {
        cluster_placement: false,
        claim: name,
        nodepool: n.nodepool.clone(),
        offering,
        price_per_hour: new.price_per_hour,
        pods: new.pods.clone(),
        prewarm_window: None,
        reservation: None,
    })
}

/// The node's pods that are real work (not pre-warm placeholders).
fn real_pods(n: &ManagedNode) -> impl Iterator<Item = &Pod> {
    n.pods.iter().filter(|p| !p.placeholder).map(|p| &p.pod)
}

/// What the node's daemonsets use: its usage less its bound pods' requests.
fn daemonset_overhead(n: &ManagedNode) -> Resources {
    let mut o = n.state.used.clone();
    for p in &n.pods {
        o.sub(&p.pod.requests);
    }
    o.at_least_zero()
}

/// Whether every claim is a ready node in the round's world (looked up in
/// the round's index of claims, not by a scan of the nodes per claim).
fn all_ready(r: &Round, claims: &[String]) -> bool {
    claims.iter().all(|c| {
        r.node(c)
            .is_some_and(|n| n.ready_at.is_some() && !n.state.in_flight)
    })
}

fn saving(d: &Decision) -> f64 {
    match d {
        Decision::Empty { .. } => 0.0,
        Decision::Delete { saving, .. } | Decision::Replace { saving, .. } => *saving,
    }
}

/// A deterministic, practically unique claim name for the replacement of
/// `claim` decided at `at`: `<pool>-<8 hex digits>`.
fn replacement_name(pool: &str, claim: &str, at: Time) -> String {
    // FNV-1a, 32 bits.
    let mut h: u32 = 0x811c_9dc5;
    let stamp = at.timestamp_millis().to_le_bytes();
    for b in claim.bytes().chain(stamp) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{pool}-{h:08x}")
}

#[cfg(test)]
mod tests;
