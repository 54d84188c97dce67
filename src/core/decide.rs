//! [`Core`]: the one entry point both drivers call. It owns the decisions'
//! state (batching, interruption handling, consolidation candidates, learned
//! interruption rates, launch latencies) and turns the world at `now` into
//! actions, in this order: provisioning (pending pods, replacements for
//! interrupted nodes, pre-warm shortfall), interruption response,
//! consolidation.

use super::batch::Batcher;
use super::cadence::Cadence;
use super::consolidation::{self, Consolidation};
use super::estimator::InterruptionEstimator;
use super::gang::GangDrains;
use super::interruption::{self, key_parts, offering_key, Interruptions, KeyParts};
use super::prewarm::{self, LaunchLatency};
use super::{
    Action, ClaimRequest, DisruptionDecision, ManagedNode, Notice, OfferingKey, Time, World,
};
use crate::api::{NodePool, NodePoolSpec};
use crate::catalog::Offering;
use crate::cluster::{NodeState, Pod, Pool, Resources};
use crate::plan::{self, Strategy};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

/// Knobs of the whole core.
#[derive(Debug, Clone)]
pub struct Config {
    /// Provisioning batch: quiet time that closes a batch.
    pub batch_idle: std::time::Duration,
    /// Provisioning batch: longest a batch stays open.
    pub batch_max: std::time::Duration,
    /// Interruption response.
    pub interruption: interruption::Config,
    /// Consolidation.
    pub consolidation: consolidation::Config,
    /// Planner used for provisioning.
    pub strategy: Strategy,
    /// Planner knobs.
    pub planner: plan::Options,
    /// Feed learned interruption rates to the planner.
    pub learn_rates: bool,
    /// Ask pods on risky spot nodes to checkpoint more often than their
    /// own interval ([`super::cadence`]).
    pub checkpoint_cadence: bool,
    /// Most pending pods one plan considers (see [`super::batch::BatchCap`]);
    /// the driver applies it before deciding ([`Core::cap_batch`]).
    pub max_batch_pods: usize,
    /// Backoff of actions that failed ([`super::retry`]).
    pub retry: super::retry::Config,
    /// Contain a step that panics ([`Core::decide`]): the core copies its
    /// state before every decision to go back to it. The live controller
    /// wants it (one bad object must not stop every decision); the
    /// simulator turns it off, since a panic there is a bug to surface and
    /// the copy costs it a whole core per decision.
    pub contain_panics: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            batch_idle: super::batch::DEFAULT_IDLE,
            batch_max: super::batch::DEFAULT_MAX,
            interruption: interruption::Config::default(),
            consolidation: consolidation::Config::default(),
            strategy: Strategy::Mip,
            planner: plan::Options::default(),
            learn_rates: true,
            checkpoint_cadence: true,
            max_batch_pods: super::batch::DEFAULT_MAX_PODS,
            retry: super::retry::Config::default(),
            contain_panics: true,
        }
    }
}

/// What the last provisioning plan could not place and how long it took to
/// solve, kept for the drivers to report (pod Events, the solve-duration
/// metric); no decision reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanReport {
    /// When the plan was made.
    pub at: Time,
    /// Pods the plan found no place for, each with the reason.
    pub unschedulable: Vec<plan::Unschedulable>,
    /// Seconds the planner took, by the clock given to
    /// [`Core::with_solve_clock`] (0 without one).
    pub solve_seconds: f64,
}

/// A decision step that panicked: [`Core::decide`] dropped what it did in
/// that call and decided without it (see [`Core::take_failures`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFailure {
    /// The step (`provisioning`, `interruptions`, `cadence`,
    /// `consolidation`, `gangs`, `observe`).
    pub step: &'static str,
    /// The panic's message.
    pub message: String,
}

/// The decision core. Deterministic: the same calls give the same actions.
#[derive(Debug, Clone)]
pub struct Core {
    config: Config,
    batcher: Batcher,
    interruptions: Interruptions,
    consolidation: Consolidation,
    /// Gangs checkpointing and draining together.
    gangs: GangDrains,
    /// EFA gangs' launches not Ready whole yet.
    gang_launches: super::gang_launch::GangLaunches,
    estimator: InterruptionEstimator,
    latency: LaunchLatency,
    next_claim: u64,
    last_decide: Option<Time>,
    /// Claims of the nodes the last provisioning step could place pods on.
    /// When one of them stops being usable (reclaimed, failed, cordoned,
    /// being interrupted) the pods that counted on it are pending under the
    /// same names as before, so the batcher sees nothing new: the step
    /// re-opens a batch itself, or such pods would wait forever.
    /// Looked up for every node on every round (claims are unique).
    usable: super::FastSet<String>,
    /// What `usable` was last worked out from: the world's
    /// [`World::nodes_revision`] and the claims left out whatever their
    /// nodes (under interruption handling, or released), sorted.
    usable_from: (u64, Vec<String>),
    /// Pools marked not Ready at the last provisioning step: when one is
    /// Ready again, pending pods that could not be planned are planned
    /// again (the batcher sees nothing new).
    held: BTreeSet<String>,
    /// Instance families each pool selects, for its pre-warm lead, kept
    /// with the spec they were computed from (recomputing them builds the
    /// labels of every instance type, on every step).
    /// Also the pool's shapes, for a buffer's lead ([`Core::buffer_lead`]).
    families: RefCell<BTreeMap<String, PoolLeadCache>>,
    /// Prior mean rates (the calibrated market's) of the spot pools the
    /// estimator has evidence for, and the catalog revision they were read
    /// from (a refreshed catalog is read again).
    priors: RefCell<(u64, BTreeMap<OfferingKey, f64>)>,
    /// Seconds on a monotonic clock, to time the planner; measuring only.
    solve_clock: Option<fn() -> f64>,
    /// The last provisioning plan's report.
    last_plan: Option<PlanReport>,
    /// The pools' offerings as the last plan saw them, kept for the next
    /// while the catalog and pools stay the same.
    offerings: Option<std::sync::Arc<plan::candidates::Offerings>>,
    /// Checkpoint requests paced by spot risk.
    cadence: Cadence,
    /// Repair of unhealthy nodes.
    repairs: super::repair::Repairs,
    /// The batch cap, fair across rounds.
    batch_cap: super::batch::BatchCap,
    /// Appended (`-{tag}`) to the names of the claims provisioning makes
    /// ([`Core::with_claim_tag`]).
    claim_tag: String,
    /// Actions that failed, to issue again ([`Core::observe_outcome`]).
    retries: super::retry::Retries,
    /// The step [`Core::decide`] is in (named in a [`StepFailure`]).
    step: std::cell::Cell<&'static str>,
    /// Steps that panicked since the driver last asked.
    failures: Vec<StepFailure>,
    /// Tests: the step to make panic.
    #[cfg(test)]
    fail_in: Option<&'static str>,
}

impl Core {
    /// A core with no history.
    pub fn new(config: Config) -> Core {
        Core {
            batcher: Batcher::new(config.batch_idle, config.batch_max),
            interruptions: Interruptions::new(config.interruption.clone()),
            consolidation: Consolidation::new(config.consolidation.clone()),
            gangs: GangDrains::new(),
            gang_launches: Default::default(),
            estimator: InterruptionEstimator::default(),
            latency: LaunchLatency::new(),
            next_claim: 0,
            last_decide: None,
            usable: Default::default(),
            usable_from: Default::default(),
            held: BTreeSet::new(),
            families: RefCell::new(BTreeMap::new()),
            priors: RefCell::new((0, BTreeMap::new())),
            solve_clock: None,
            last_plan: None,
            offerings: None,
            cadence: Cadence::default(),
            repairs: super::repair::Repairs::new(),
            batch_cap: Default::default(),
            claim_tag: String::new(),
            retries: super::retry::Retries::new(config.retry.clone()),
            step: std::cell::Cell::new("observe"),
            failures: Vec::new(),
            #[cfg(test)]
            fail_in: None,
            config,
        }
    }

    /// Tags the names of the claims provisioning makes (`{pool}-{n}-{tag}`),
    /// so that a restarted controller, whose count starts again, never
    /// reuses a name (providers key idempotent launches on it). The names
    /// of replacements are unique without it (they hash the node and the
    /// time). The name a `Launch` carries is the claim's name: decisions
    /// that wait for a claim (a replacement to be ready) find it by it.
    pub fn with_claim_tag(mut self, tag: &str) -> Core {
        self.claim_tag = if tag.is_empty() {
            String::new()
        } else {
            format!("-{tag}")
        };
        self
    }

    /// Times each provisioning plan with `clock` (seconds on a monotonic
    /// clock), reported in [`Core::last_plan`]. Only the report uses it, so
    /// decisions stay a function of their inputs; the simulator passes none.
    pub fn with_solve_clock(mut self, clock: fn() -> f64) -> Core {
        self.solve_clock = Some(clock);
        self
    }

    /// At most `max_batch_pods` of the pending pods for the next plan, and
    /// the ones left for a later batch with why: the pods the last plans
    /// considered least recently first ([`super::batch::BatchCap`]), so
    /// that every pending pod is considered in turn. The driver calls it
    /// before [`Core::decide`] and puts the pods kept in the world.
    pub fn cap_batch(&mut self, pending: Vec<Pod>) -> (Vec<Pod>, Vec<super::batch::Deferred>) {
        self.batch_cap.cap(pending, self.config.max_batch_pods)
    }

    /// The last provisioning plan's report, if any plan was made.
    pub fn last_plan(&self) -> Option<&PlanReport> {
        self.last_plan.as_ref()
    }

    /// The voluntary disruptions (consolidation, drift replacement, repair
    /// replacement) the last [`Core::decide`] started, for the drivers'
    /// metrics.
    pub fn disruption_decisions(&self) -> &[DisruptionDecision] {
        self.consolidation.decisions()
    }

    /// Repair's state after the last [`Core::decide`]: the repairs it
    /// started and held, and each pool's health, for the drivers' Events,
    /// conditions and metrics.
    pub fn repairs(&self) -> &super::repair::Repairs {
        &self.repairs
    }

    /// A notice from the cloud. An interruption is also evidence for that
    /// pool's rate; a capacity error re-opens provisioning so that the pods
    /// are planned again without the exhausted offering.
    pub fn handle_notice(&mut self, notice: &Notice, world: &World, now: Time) {
        if let Notice::InsufficientCapacity { offering } = notice {
            self.gang_launches.out_of_capacity(offering);
        }
        if let Some(key) = self.interruptions.handle(notice, world, now) {
            if matches!(notice, Notice::SpotInterruption { .. }) {
                self.estimator.observe_interruption(&key);
            }
        }
        if matches!(notice, Notice::InsufficientCapacity { .. }) {
            self.batcher.trigger(now);
        }
    }

    /// A node became Ready: its launch-to-ready time feeds pre-warm leads.
    pub fn observe_ready(&mut self, node: &ManagedNode) {
        self.latency.observe_node(node);
    }

    /// The learned interruption rate of a spot pool (posterior mean).
    pub fn interruption_rate(&self, key: &OfferingKey, world: &World) -> f64 {
        let prior = super::estimator::prior_rate(world.catalog, world.region, key);
        self.estimator.posterior_from(key, prior).mean()
    }

    /// Everything to do now, with the actions that failed before and are
    /// due again ([`Core::observe_outcome`]).
    ///
    /// A step that panics is contained: the core goes back to its state
    /// before this call and decides again without that step, so that one
    /// bad input stops one kind of decision, not all of them (an
    /// interruption is still answered when planning fails), and nothing the
    /// core knows is lost. The failure is kept for
    /// [`Core::take_failures`]. Without [`Config::contain_panics`] a panic
    /// goes through.
    pub fn decide(&mut self, world: &World, now: Time) -> Vec<Action> {
        if !self.config.contain_panics {
            return self.decide_steps(world, now, &[]);
        }
        let before = self.clone();
        let mut skipped: Vec<&'static str> = Vec::new();
        let mut failures = Vec::new();
        loop {
            let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.decide_steps(world, now, &skipped)
            }));
            match attempt {
                Ok(actions) => {
                    self.failures.extend(failures);
                    return actions;
                }
                Err(payload) => {
                    let step = self.step.get();
                    *self = before.clone();
                    failures.push(StepFailure {
                        step,
                        message: panic_message(payload.as_ref()),
                    });
                    if skipped.contains(&step) {
                        self.failures.extend(failures);
                        return Vec::new();
                    }
                    skipped.push(step);
                }
            }
        }
    }

    /// The steps that panicked in [`Core::decide`] since the last call.
    pub fn take_failures(&mut self) -> Vec<StepFailure> {
        std::mem::take(&mut self.failures)
    }

    /// What became of an action of [`Core::decide`]: a node action that
    /// failed is issued again after a backoff until it succeeds or its
    /// object leaves the world ([`super::retry`]); a launch whose claim
    /// could not be created is forgotten and its pods planned again.
    pub fn observe_outcome(&mut self, action: &Action, outcome: super::Outcome, now: Time) {
        if let (Action::Launch(req), super::Outcome::Failed) = (action, outcome) {
            self.gang_launches.launch_failed(&req.claim);
            self.consolidation.launch_failed(&req.claim);
            self.batcher.trigger(now);
            return;
        }
        self.retries.observe(action, outcome, now);
    }

    /// Enters a step of [`Core::decide`] (named in a failure).
    fn enter(&self, step: &'static str) {
        self.step.set(step);
        #[cfg(test)]
        if self.fail_in == Some(step) {
            panic!("a failure injected in {step}");
        }
    }

    fn decide_steps(&mut self, world: &World, now: Time, skipped: &[&'static str]) -> Vec<Action> {
        let run = |step: &'static str| !skipped.contains(&step);
        if run("observe") {
            self.enter("observe");
            if let Some(from) = self.last_decide.filter(|f| *f < now) {
                self.estimator
                    .observe_nodes(world.nodes, world.nodes_revision, from, now);
            }
            // Nodes whose reservation ends soon are drained like interrupted
            // ones, whether or not EC2's warning came.
            let lead = self.config.interruption.reservation_lead;
            for notice in super::interruption::reservation_endings(world, now, lead) {
                self.interruptions.handle(&notice, world, now);
            }
        }
        self.last_decide = Some(now);
        // An EFA gang one member of which failed to launch releases the
        // others' in-flight nodes, and is planned again whole.
        let released = if run("gangs") {
            self.enter("gangs");
            self.gang_launches.release(world)
        } else {
            Vec::new()
        };
        let gone: BTreeSet<&str> = released
            .iter()
            .filter_map(|a| match a {
                Action::Delete { claim, .. } => Some(claim.as_str()),
                _ => None,
            })
            .collect();
        // Provisioning first: an interrupted node's pods are demand from the
        // notice on, before the interruption step evicts them.
        let mut actions = Vec::new();
        if run("provisioning") {
            self.enter("provisioning");
            actions = self.provision(world, now, &gone);
        }
        actions.extend(released);
        if run("interruptions") {
            self.enter("interruptions");
            actions.extend(self.interruptions.decide(world, now));
        }
        if self.config.checkpoint_cadence && run("cadence") {
            self.enter("cadence");
            let interruptions = &self.interruptions;
            let busy = |claim: &str| interruptions.is_handling(claim);
            actions.extend(self.cadence.decide(world, now, &busy));
        }
        // Repair before consolidation: it hands over the nodes to replace.
        let mut repairs = Vec::new();
        if run("repair") {
            self.enter("repair");
            // Asked of every node: one hashed set, not two searches of
            // sorted maps.
            let busy: super::FastSet<&str> = self
                .interruptions
                .handling()
                .chain(self.consolidation.disrupting())
                .collect();
            let busy = |c: &str| busy.contains(c);
            let (repair_actions, orders) =
                self.repairs
                    .decide(world, now, &super::repair::Context { busy: &busy });
            actions.extend(repair_actions);
            repairs = orders;
        }
        if run("consolidation") {
            self.enter("consolidation");
            let leads: BTreeMap<&str, std::time::Duration> = world
                .pools
                .iter()
                .map(|p| (name(p), self.lead(p, world)))
                .collect();
            let protected = |n: &ManagedNode| {
                world
                    .pools
                    .iter()
                    .find(|p| name(p) == n.nodepool)
                    .is_some_and(|p| prewarm::protects(p, now, leads[name(p)]).unwrap_or(false))
            };
            // Worked out only if consolidation prices a spot node: most rounds
            // do not, and the posterior of every pool is not free.
            let rates = std::cell::OnceCell::new();
            let (learn, priors, estimator) =
                (self.config.learn_rates, &self.priors, &self.estimator);
            let learned = |o: &Offering| {
                rates
                    .get_or_init(|| learned_rates(learn, priors, estimator, world))
                    .get(&offering_key(o))
                    .copied()
            };
            let repairing = &self.repairs;
            let rebooting = |c: &str| repairing.is_rebooting(c);
            let ctx = consolidation::Context {
                interruptions: &self.interruptions,
                protected: &protected,
                learned_rate: Some(&learned),
                rebooting: &rebooting,
                repairs: &repairs,
            };
            actions.extend(self.consolidation.decide_in(world, now, &ctx));
        }
        // One member of a gang losing its node takes the whole gang along.
        let interruptions = &self.interruptions;
        let consolidation = &self.consolidation;
        let leaving = |c: &str| interruptions.is_handling(c) || consolidation.is_disrupting(c);
        let until = |c: &str| interruptions.checkpoint_until(c);
        if run("gangs") {
            self.enter("gangs");
            if self
                .gangs
                .extend(world, &mut actions, now, &leaving, &until)
            {
                // The gang's other members are demand from now on.
                self.batcher.trigger(now);
            }
        }
        if run("retries") {
            self.enter("retries");
            self.retries.merge(world, now, &mut actions);
        }
        actions
    }

    /// The next time [`Core::decide`] may act without any change in the
    /// world: a batch closing, an interruption step, a consolidation step, a
    /// pre-warm window warming up or ending.
    pub fn next_deadline(&self, world: &World, now: Time) -> Option<Time> {
        let windows = world.pools.iter().filter_map(|p| {
            prewarm::next_deadline(p, now, self.lead(p, world))
                .ok()
                .flatten()
        });
        let lead = self.config.interruption.reservation_lead;
        [
            self.batcher.next_deadline(),
            self.interruptions.next_deadline(),
            self.consolidation.next_deadline(),
            self.gangs.next_deadline(),
            self.cadence.next_deadline(),
            self.repairs.next_deadline(),
            self.retries.next_deadline(),
            super::interruption::next_reservation_ending(world, now, lead),
        ]
        .into_iter()
        .flatten()
        .chain(windows)
        .filter(|t| *t > now)
        .min()
    }

    /// Plans the pending pods (and replacements) once a batch closes, on
    /// usable nodes other than `gone` (claims being released this round)
    /// and new ones.
    fn provision(&mut self, world: &World, now: Time, gone: &BTreeSet<&str>) -> Vec<Action> {
        // The pending pods are only copied once a batch closes: most rounds
        // only watch them.
        let mut extra: Vec<Pod> = self.interruptions.pods_needing_replacement(world);
        for p in self.gangs.pods_needing_replacement(world) {
            let known = |d: &Pod| d.name == p.name;
            if !world.pending.iter().any(known) && !extra.iter().any(known) {
                extra.push(p);
            }
        }
        for pool in world.pools {
            if let Ok(pods) = prewarm::demand(pool, now, self.lead(pool, world)) {
                extra.extend(shortfall(pool, pods, world.nodes));
            }
        }
        let no_demand = world.pending.is_empty() && extra.is_empty();
        self.batcher.observe_pending(
            world.pending.iter().chain(&extra).map(|p| p.name.as_str()),
            now,
        );
        // The usable nodes: the set is rebuilt only when it changed (this
        // runs on every round, over every node). A node usable before is
        // lost when fewer of the usable nodes were usable before than there
        // were then (a world holds each claim once).
        let usable = |n: &&ManagedNode| {
            !self.interruptions.is_handling(&n.claim)
                && !n.state.unschedulable
                && !gone.contains(n.claim.as_str())
        };
        // The same nodes and the same claims left out as last round: the
        // same usable nodes, which `usable` holds (rebuilt then or found
        // the same), so none was lost or added.
        let mut out: Vec<&str> = self.interruptions.handling().collect();
        out.extend(gone.iter().copied());
        out.sort_unstable();
        out.dedup();
        let (mut kept, mut added) = (self.usable.len(), false);
        if !(world.same_nodes_as(self.usable_from.0) && self.usable_from.1 == out) {
            kept = 0;
            for n in world.nodes.iter().filter(usable) {
                if self.usable.contains(&n.claim) {
                    kept += 1;
                } else {
                    added = true;
                }
            }
            self.usable_from = (
                world.nodes_revision,
                out.iter().map(|c| c.to_string()).collect(),
            );
        }
        let lost = kept < self.usable.len();
        let held: BTreeSet<String> = world
            .pools
            .iter()
            .filter(|p| p.is_marked_not_ready())
            .map(|p| name(p).to_string())
            .collect();
        if !no_demand && (lost || !self.held.is_subset(&held)) {
            self.batcher.trigger(now);
        }
        if lost || added {
            self.usable = world
                .nodes
                .iter()
                .filter(usable)
                .map(|n| n.claim.clone())
                .collect();
        }
        self.held = held;
        if no_demand || !self.batcher.ready(now) {
            return Vec::new();
        }
        let mut demand: Vec<Pod> = world.pending.to_vec();
        demand.extend(extra);
        self.batcher.take(now);
        self.batch_cap
            .planned(world.pending.iter().map(|p| p.name.as_str()));

        // A pool marked not Ready launches nothing; its pods' reasons say
        // no pool could take them, and its status and Events say why.
        let pools: Vec<Pool> = world
            .pools
            .iter()
            .filter(|p| !p.is_marked_not_ready())
            .filter_map(|p| Pool::from_api(p, Resources::new()).ok())
            .collect();
        // A draining gang's members on nodes that stay free their room for
        // the gang's own re-plan: it is placed whole, reusing it.
        // Only those nodes are copied; the others are borrowed.
        let freed = self.gangs.room_freed(world);
        let usable = world
            .nodes
            .iter()
            .filter(|n| self.usable.contains(&n.claim));
        // Nodes holding pods with a per-node cap carry their count, so
        // that a pending sibling is not taken to fit beside them.
        let with_room: BTreeMap<&str, NodeState> = usable
            .clone()
            .filter_map(|n| {
                let room = freed.get(&n.claim);
                let capped = n.capped();
                if room.is_none() && capped.is_empty() {
                    return None;
                }
                let mut state = n.state.clone();
                if let Some(room) = room {
                    state.used.sub(room);
                }
                state.capped = capped;
                Some((n.claim.as_str(), state))
            })
            .collect();
        let nodes: Vec<&NodeState> = usable
            .map(|n| with_room.get(n.claim.as_str()).unwrap_or(&n.state))
            .collect();
        // Both asked of every offering: looked up by borrowed parts.
        let rates = self.learned_rates(world);
        let rates: super::FastMap<KeyParts, f64> =
            rates.iter().map(|(k, r)| (k.parts(), *r)).collect();
        let learned = |o: &Offering| rates.get(&key_parts(o)).copied();
        let unavailable = self.interruptions.blocker(now);
        if !self
            .offerings
            .as_ref()
            .is_some_and(|o| o.are_of(world.catalog, world.region, &pools))
        {
            self.offerings = Some(std::sync::Arc::new(plan::candidates::Offerings::new(
                world.catalog,
                world.region,
                &pools,
            )));
        }
        let input = plan::Input {
            catalog: world.catalog,
            region: world.region,
            pools: &pools,
            nodes: &nodes,
            pods: &demand,
            unavailable: &unavailable,
            learned_rate: Some(&learned),
            offerings: self.offerings.as_deref(),
            now: Some(now),
        };
        let clock = self.solve_clock;
        let result = plan::plan(
            &input,
            self.config.strategy,
            &self.config.planner,
            &move || clock.map_or(0.0, |c| c()),
        );
        self.last_plan = Some(PlanReport {
            at: now,
            unschedulable: with_held_pools(&result.unschedulable, world.pools, pools.is_empty()),
            solve_seconds: result.solve_ms / 1000.0,
        });
        // The pods whose gang must share one network block (usually none).
        let one_block: std::collections::HashSet<&str> = demand
            .iter()
            .filter(|p| p.network_block.is_some())
            .map(|p| p.name.as_str())
            .collect();
        let mut actions = Vec::new();
        for n in result.nodes {
            self.next_claim += 1;
            let window = n
                .pods
                .iter()
                .all(|p| prewarm::is_placeholder(p))
                .then(|| {
                    n.pods
                        .first()
                        .and_then(|p| p.split('/').nth(2))
                        .map(str::to_string)
                })
                .flatten();
            actions.push(Action::Launch(ClaimRequest {
                claim: format!("{}-{:06}{}", n.nodepool, self.next_claim, self.claim_tag),
                nodepool: n.nodepool.clone(),
                offering: OfferingKey {
                    instance_type: n.instance_type.clone(),
                    zone: n.zone.clone(),
                    capacity_type: n.capacity_type,
                },
                price_per_hour: n.price_per_hour,
                cluster_placement: n.pods.iter().any(|name| one_block.contains(name.as_str())),
                pods: n.pods,
                prewarm_window: window,
                reservation: n.reservation,
            }));
        }
        self.gang_launches.record(world, &demand, &actions);
        actions
    }
}

/// A pool's taints and the allocatable of each instance type it selects.
type PoolShapes = (Vec<crate::cluster::requirements::Taint>, Vec<Resources>);

/// What [`Core::lead`] keeps per pool: the spec it was read from, the
/// families it selects and its shapes (`None` for a pool that does not read).
type PoolLeadCache = (NodePoolSpec, Vec<String>, Option<PoolShapes>);

impl Core {
    /// How long before a scheduled CapacityBuffer's window its chunks are
    /// made: the longest pre-warm lead ([`Core::lead`], from the
    /// launch-to-ready times learned so far) of the pools that could hold
    /// one `chunk` (its taints tolerated, one of the instance types it
    /// selects big enough); of all pools when none could, or
    /// [`super::buffers::SCHEDULE_LEAD`] without pools. A pool that cannot
    /// hold the chunk launches none of its capacity, so its slower launches
    /// do not make the buffer's capacity earlier (and dearer) than the same
    /// capacity as the GPU pool's `spec.prewarm`.
    pub fn buffer_lead(
        &self,
        pools: &[NodePool],
        catalog: &crate::catalog::Catalog,
        chunk: &Pod,
    ) -> std::time::Duration {
        let leads = || pools.iter().map(|p| (p, self.lead_in(p, catalog)));
        let holds = |p: &NodePool| {
            let cache = self.families.borrow();
            cache[name(p)].2.iter().any(|(taints, shapes)| {
                crate::cluster::requirements::untolerated(taints, &chunk.tolerations).is_none()
                    && shapes.iter().any(|s| chunk.requests.fits_in(s))
            })
        };
        leads()
            .filter(|(p, _)| holds(p))
            .map(|(_, l)| l)
            .max()
            .or_else(|| leads().map(|(_, l)| l).max())
            .unwrap_or(super::buffers::SCHEDULE_LEAD)
    }

    /// How long before a pre-warm window opens its capacity is launched:
    /// 1.25 x the pool's p90 launch-to-ready time, plus the longest batch,
    /// so that a launch that takes a little longer than usual is still Ready
    /// at the window's start.
    fn lead(&self, pool: &NodePool, world: &World) -> std::time::Duration {
        self.lead_in(pool, world.catalog)
    }

    /// [`Core::lead`] from the catalog alone; refreshes the pool's cached
    /// families and shapes when its spec changed.
    fn lead_in(&self, pool: &NodePool, catalog: &crate::catalog::Catalog) -> std::time::Duration {
        let mut cache = self.families.borrow_mut();
        let fresh = cache
            .get(name(pool))
            .is_some_and(|(spec, _, _)| *spec == pool.spec);
        if !fresh {
            let types = crate::api::validate::selected_instance_types(&pool.spec, catalog);
            let families = types.iter().map(|it| it.family.clone()).collect();
            // What a chunk of a scheduled buffer is checked against: the
            // pool's taints and the allocatable of each type it selects.
            let shapes = Pool::from_api(pool, Resources::new()).ok().map(|p| {
                let shapes = types
                    .iter()
                    .map(|it| crate::cluster::shape::allocatable(it, &p.sharing))
                    .collect();
                (p.taints, shapes)
            });
            cache.insert(
                name(pool).to_string(),
                (pool.spec.clone(), families, shapes),
            );
        }
        let families = &cache[name(pool)].1;
        super::time::secs(self.latency.lead(families).as_secs_f64() * 1.25)
            .saturating_add(self.config.batch_max)
    }

    /// Learned rates of the spot pools with evidence (empty when learning is
    /// off): the planner's and consolidation's override of advisor rates.
    fn learned_rates(&self, world: &World) -> BTreeMap<OfferingKey, f64> {
        learned_rates(
            self.config.learn_rates,
            &self.priors,
            &self.estimator,
            world,
        )
    }
}

/// [`Core::learned_rates`] from the parts of the core it reads, so that a
/// round can borrow them beside consolidation's own state.
fn learned_rates(
    learn: bool,
    priors: &RefCell<(u64, BTreeMap<OfferingKey, f64>)>,
    estimator: &super::estimator::InterruptionEstimator,
    world: &World,
) -> BTreeMap<OfferingKey, f64> {
    if !learn {
        return BTreeMap::new();
    }
    let mut cache = priors.borrow_mut();
    if cache.0 != world.catalog.revision() {
        *cache = (world.catalog.revision(), BTreeMap::new());
    }
    let priors = &mut cache.1;
    estimator
        .pools()
        .map(|k| {
            let prior = *priors
                .entry(k.clone())
                .or_insert_with(|| super::estimator::prior_rate(world.catalog, world.region, k));
            (k.clone(), estimator.posterior_from(k, prior).mean())
        })
        .collect()
}

impl ManagedNode {
    /// The in-flight node a [`Action::Launch`] creates: the shape, labels and
    /// taints its instance type and pool give it, not ready yet. `None` when
    /// the pool is unknown or invalid, or the instance type or offering is
    /// not in the catalog (see [`ManagedNode::recorded`] for a claim that
    /// exists).
    pub fn launched(req: &ClaimRequest, world: &World, now: Time) -> Option<ManagedNode> {
        let api_pool = world.pools.iter().find(|p| name(p) == req.nodepool)?;
        let pool = Pool::from_api(api_pool, Resources::new()).ok()?;
        let it = world.catalog.instance_type(&req.offering.instance_type)?;
        // A reservation that no longer takes launches (its end is near)
        // still describes the nodes running in it.
        let offering = world
            .catalog
            .offerings_of(world.region, &it.name)
            .find(|o| {
                offering_key(o) == req.offering
                    && o.reservation.as_ref().map(|r| &r.id) == req.reservation.as_ref()
            })
            .cloned()
            .or_else(|| {
                let r = world.catalog.reservation(req.reservation.as_deref()?)?;
                Some(r.offering()).filter(|o| offering_key(o) == req.offering)
            })?;
        let mut labels = crate::cluster::shape::node_labels(
            it,
            &offering,
            world.catalog.zone_names(),
            &pool.name,
        );
        labels.extend(pool.labels.clone());
        let allocatable = crate::cluster::shape::allocatable(it, &pool.sharing);
        let lifetime = &api_pool.spec.template.spec;
        let mut node = ManagedNode {
            expire_after: lifetime.expire_after_duration().ok().flatten(),
            termination_grace: lifetime.termination_grace_period_duration().ok().flatten(),
            ..ManagedNode::in_flight(req, labels, pool.taints, allocatable, now)
        };
        // The pods it is launched for: pending ones, or running ones it
        // replaces the node of.
        // One pass over the world's pods (not one per pod launched for).
        let names: super::FastSet<&str> = req.pods.iter().map(String::as_str).collect();
        let (mut dra, mut one_block) = (false, false);
        let bound = world
            .nodes
            .iter()
            .flat_map(|n| n.pods.iter().map(|b| &b.pod));
        // Only pods that would change the answer are looked up: most pods
        // have neither claims nor a block.
        for p in world.pending.iter().chain(bound) {
            if (p.devices.is_some() || p.network_block.is_some()) && names.contains(p.name.as_str())
            {
                dra |= p.devices.is_some();
                one_block |= p.network_block.is_some();
            }
        }
        // Launched for pods with DRA claims: it serves them through the
        // drivers its pool runs.
        if dra {
            node.serve_dra(world);
        }
        // Launched for a gang that must share one network block: into the
        // pool's cluster placement group of its zone.
        if req.cluster_placement || one_block {
            node.state.labels.insert(
                crate::labels::CLUSTER_PLACEMENT.to_string(),
                "true".to_string(),
            );
        }
        Some(node)
    }

    /// The node of a claim that exists, as far as the world can say: what
    /// [`ManagedNode::launched`] makes of it, or, where that cannot be made
    /// (its pool was deleted or is invalid after an upgrade, its instance
    /// type or reservation left the catalog), what the claim itself recorded
    /// at creation: its `labels`, `taints` and expected `allocatable`. Such
    /// a node stays in the world: the notices about it are acted on, it
    /// counts against its pool's limits, and it can be drained and deleted.
    pub fn recorded(
        req: &ClaimRequest,
        labels: &crate::cluster::requirements::Labels,
        taints: &[crate::api::Taint],
        allocatable: Resources,
        world: &World,
        now: Time,
    ) -> ManagedNode {
        ManagedNode::launched(req, world, now).unwrap_or_else(|| {
            let taints = taints
                .iter()
                .map(|t| crate::cluster::Taint {
                    key: t.key.clone(),
                    value: t.value.clone().unwrap_or_default(),
                    effect: t.effect,
                })
                .collect();
            ManagedNode::in_flight(req, labels.clone(), taints, allocatable, now)
        })
    }

    /// An in-flight node of `req` with this shape.
    fn in_flight(
        req: &ClaimRequest,
        labels: crate::cluster::requirements::Labels,
        taints: Vec<crate::cluster::Taint>,
        allocatable: Resources,
        now: Time,
    ) -> ManagedNode {
        ManagedNode {
            claim: req.claim.clone(),
            nodepool: req.nodepool.clone(),
            offering: req.offering.clone(),
            price_per_hour: req.price_per_hour,
            launched_at: now,
            ready_at: None,
            state: NodeState {
                name: req.claim.clone(),
                nodepool: Some(req.nodepool.clone()),
                instance_type: Some(req.offering.instance_type.clone()),
                zone: req.offering.zone.clone(),
                capacity_type: Some(req.offering.capacity_type),
                labels,
                taints,
                allocatable,
                used: Resources::new(),
                price_per_hour: req.price_per_hour,
                in_flight: true,
                unschedulable: false,
                capped: Default::default(),
            },
            pods: Vec::new(),
            pods_revision: 0,
            do_not_disrupt: false,
            drifted: None,
            disrupted: false,
            health: Default::default(),
            gpu_idle_since: None,
            expire_after: None,
            termination_grace: None,
        }
    }

    /// The node as launched to serve DRA claims: its devices offered
    /// through the DRA drivers its pool runs instead of the device plugin
    /// (`cluster::shape::with_dra_devices`), and the label
    /// `quartermaster.dev/dra` the drivers' DaemonSets select. Nothing
    /// changes when the pool runs none of its devices' drivers.
    pub fn serve_dra(&mut self, world: &World) {
        let Some(api_pool) = world.pools.iter().find(|p| name(p) == self.nodepool) else {
            return;
        };
        let Ok(pool) = Pool::from_api(api_pool, Resources::new()) else {
            return;
        };
        let Some(it) = world.catalog.instance_type(&self.offering.instance_type) else {
            return;
        };
        let templates: Vec<_> = world
            .catalog
            .device_templates(it, pool.gpu_layout())
            .into_iter()
            .filter(|t| pool.runs_dra_driver(&t.driver))
            .collect();
        if templates.is_empty() || self.state.labels.contains_key(crate::api::labels::DRA) {
            return;
        }
        self.state.allocatable =
            crate::cluster::shape::with_dra_devices(&self.state.allocatable, &templates);
        self.state
            .labels
            .insert(crate::api::labels::DRA.to_string(), "true".to_string());
    }

    /// The same node with the lifetime its claim recorded at creation
    /// (`expireAfter`, `terminationGracePeriod`) in place of its pool's
    /// current one; an unreadable value counts as unset.
    pub fn with_claim_lifetime(
        self,
        expire_after: Option<&str>,
        termination_grace_period: Option<&str>,
    ) -> ManagedNode {
        let parse = |d: Option<&str>| {
            d.filter(|d| *d != "Never")
                .and_then(|d| crate::api::parse_duration(d).ok())
        };
        ManagedNode {
            expire_after: parse(expire_after),
            termination_grace: parse(termination_grace_period),
            ..self
        }
    }
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

fn name(p: &NodePool) -> &str {
    p.metadata.name.as_deref().unwrap_or_default()
}

/// The unplaced pods' reasons, with why the pools marked not Ready were not
/// planned (their `Ready` condition's message): instead of the planner's
/// reason when no pool was left to plan with, after it otherwise.
fn with_held_pools(
    unplaced: &[plan::Unschedulable],
    pools: &[NodePool],
    none_left: bool,
) -> Vec<plan::Unschedulable> {
    let held: Vec<String> = pools
        .iter()
        .filter(|p| p.is_marked_not_ready())
        .map(|p| {
            let why = p
                .status
                .as_ref()
                .and_then(|s| {
                    s.conditions
                        .iter()
                        .find(|c| c.type_ == crate::api::nodepool::conditions::READY)
                })
                .map_or("is not Ready", |c| c.message.as_str());
            format!("NodePool {} {why}", name(p))
        })
        .collect();
    unplaced
        .iter()
        .map(|u| plan::Unschedulable {
            pod: u.pod.clone(),
            reason: match (held.is_empty(), none_left) {
                (true, _) => u.reason.clone(),
                (false, true) => held.join("; "),
                (false, false) => format!("{}; {}", u.reason, held.join("; ")),
            },
        })
        .collect()
}

/// The placeholder pods a pool still needs: a window holds capacity, so what
/// the pool's nodes (ready or in flight, not leaving) already have counts
/// against it, whether or not real pods use it; spot nodes only where the
/// pool holds its windows on spot ([`prewarm::holds_on_spot`]: a reclaim
/// just before the window opens must not leave it short).
fn shortfall(pool: &NodePool, placeholders: Vec<Pod>, nodes: &[ManagedNode]) -> Vec<Pod> {
    if placeholders.is_empty() {
        return placeholders;
    }
    let on_spot = prewarm::holds_on_spot(pool);
    let mut held = Resources::new();
    for n in nodes.iter().filter(|n| {
        n.nodepool == name(pool)
            && !n.state.unschedulable
            && (on_spot || n.offering.capacity_type != crate::catalog::CapacityType::Spot)
    }) {
        held.add(&n.state.allocatable);
    }
    placeholders
        .into_iter()
        .filter(|p| {
            let need: Resources = p
                .requests
                .iter()
                .filter(|(k, _)| *k != crate::cluster::resources::PODS)
                .fold(Resources::new(), |r, (k, v)| r.with(k, v));
            if need.fits_in(&held) {
                held.sub(&need);
                false
            } else {
                true
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
