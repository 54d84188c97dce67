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
use super::interruption::{self, offering_key, Interruptions};
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

/// The decision core. Deterministic: the same calls give the same actions.
#[derive(Debug)]
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
    usable: BTreeSet<String>,
    /// Pools marked not Ready at the last provisioning step: when one is
    /// Ready again, pending pods that could not be planned are planned
    /// again (the batcher sees nothing new).
    held: BTreeSet<String>,
    /// Instance families each pool selects, for its pre-warm lead, kept
    /// with the spec they were computed from (recomputing them builds the
    /// labels of every instance type, on every step).
    families: RefCell<BTreeMap<String, (NodePoolSpec, Vec<String>)>>,
    /// Prior mean rates (the calibrated market's) of the spot pools the
    /// estimator has evidence for, and the catalog revision they were read
    /// from (a refreshed catalog is read again).
    priors: RefCell<(u64, BTreeMap<OfferingKey, f64>)>,
    /// Seconds on a monotonic clock, to time the planner; measuring only.
    solve_clock: Option<fn() -> f64>,
    /// The last provisioning plan's report.
    last_plan: Option<PlanReport>,
    /// Checkpoint requests paced by spot risk.
    cadence: Cadence,
    /// Repair of unhealthy nodes.
    repairs: super::repair::Repairs,
    /// The batch cap, fair across rounds.
    batch_cap: super::batch::BatchCap,
    /// Appended (`-{tag}`) to the names of the claims provisioning makes
    /// ([`Core::with_claim_tag`]).
    claim_tag: String,
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
            usable: BTreeSet::new(),
            held: BTreeSet::new(),
            families: RefCell::new(BTreeMap::new()),
            priors: RefCell::new((0, BTreeMap::new())),
            solve_clock: None,
            last_plan: None,
            cadence: Cadence::default(),
            repairs: super::repair::Repairs::new(),
            batch_cap: Default::default(),
            claim_tag: String::new(),
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

    /// Everything to do now.
    pub fn decide(&mut self, world: &World, now: Time) -> Vec<Action> {
        if let Some(from) = self.last_decide.filter(|f| *f < now) {
            self.estimator.observe_nodes(world.nodes, from, now);
        }
        self.last_decide = Some(now);
        // Nodes whose reservation ends soon are drained like interrupted
        // ones, whether or not EC2's warning came.
        let lead = self.config.interruption.reservation_lead;
        for notice in super::interruption::reservation_endings(world, now, lead) {
            self.interruptions.handle(&notice, world, now);
        }
        // An EFA gang one member of which failed to launch releases the
        // others' in-flight nodes, and is planned again whole.
        let released = self.gang_launches.release(world);
        let gone: BTreeSet<&str> = released
            .iter()
            .filter_map(|a| match a {
                Action::Delete { claim, .. } => Some(claim.as_str()),
                _ => None,
            })
            .collect();
        // Provisioning first: an interrupted node's pods are demand from the
        // notice on, before the interruption step evicts them.
        let mut actions = self.provision(world, now, &gone);
        actions.extend(released);
        actions.extend(self.interruptions.decide(world, now));
        if self.config.checkpoint_cadence {
            let interruptions = &self.interruptions;
            let busy = |claim: &str| interruptions.is_handling(claim);
            actions.extend(self.cadence.decide(world, now, &busy));
        }
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
        let (learn, priors, estimator) = (self.config.learn_rates, &self.priors, &self.estimator);
        let learned = |o: &Offering| {
            rates
                .get_or_init(|| learned_rates(learn, priors, estimator, world))
                .get(&offering_key(o))
                .copied()
        };
        // Repair before consolidation: it hands over the nodes to replace.
        let (repair_actions, repairs) = {
            let (interruptions, consolidation) = (&self.interruptions, &self.consolidation);
            let busy = |c: &str| interruptions.is_handling(c) || consolidation.is_disrupting(c);
            self.repairs
                .decide(world, now, &super::repair::Context { busy: &busy })
        };
        actions.extend(repair_actions);
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
        // One member of a gang losing its node takes the whole gang along.
        let interruptions = &self.interruptions;
        let consolidation = &self.consolidation;
        let leaving = |c: &str| interruptions.is_handling(c) || consolidation.is_disrupting(c);
        let until = |c: &str| interruptions.checkpoint_until(c);
        if self
            .gangs
            .extend(world, &mut actions, now, &leaving, &until)
        {
            // The gang's other members are demand from now on.
            self.batcher.trigger(now);
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
        let usable: BTreeSet<String> = world
            .nodes
            .iter()
            .filter(|n| {
                !self.interruptions.is_handling(&n.claim)
                    && !n.state.unschedulable
                    && !gone.contains(n.claim.as_str())
            })
            .map(|n| n.claim.clone())
            .collect();
        let held: BTreeSet<String> = world
            .pools
            .iter()
            .filter(|p| p.is_marked_not_ready())
            .map(|p| name(p).to_string())
            .collect();
        if !no_demand && (!self.usable.is_subset(&usable) || !self.held.is_subset(&held)) {
            self.batcher.trigger(now);
        }
        self.usable = usable;
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
        let freed = self.gangs.room_freed(world);
        let nodes: Vec<NodeState> = world
            .nodes
            .iter()
            .filter(|n| self.usable.contains(&n.claim))
            .map(|n| {
                let mut state = n.state.clone();
                if let Some(room) = freed.get(&n.claim) {
                    state.used.sub(room);
                }
                state
            })
            .collect();
        let rates = self.learned_rates(world);
        let learned = |o: &Offering| rates.get(&offering_key(o)).copied();
        let unavailable = |o: &Offering| self.interruptions.blocks(o, now);
        let input = plan::Input {
            catalog: world.catalog,
            region: world.region,
            pools: &pools,
            nodes: &nodes,
            pods: &demand,
            unavailable: &unavailable,
            learned_rate: Some(&learned),
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
                pods: n.pods,
                prewarm_window: window,
                reservation: n.reservation,
            }));
        }
        self.gang_launches.record(world, &demand, &actions);
        actions
    }
}

impl Core {
    /// How long before a pre-warm window opens its capacity is launched:
    /// 1.25 x the pool's p90 launch-to-ready time, plus the longest batch,
    /// so that a launch that takes a little longer than usual is still Ready
    /// at the window's start.
    fn lead(&self, pool: &NodePool, world: &World) -> std::time::Duration {
        let mut cache = self.families.borrow_mut();
        let fresh = cache
            .get(name(pool))
            .is_some_and(|(spec, _)| *spec == pool.spec);
        if !fresh {
            let families = crate::api::validate::selected_instance_types(&pool.spec, world.catalog)
                .into_iter()
                .map(|it| it.family.clone())
                .collect();
            cache.insert(name(pool).to_string(), (pool.spec.clone(), families));
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
        Some(ManagedNode {
            expire_after: lifetime.expire_after_duration().ok().flatten(),
            termination_grace: lifetime.termination_grace_period_duration().ok().flatten(),
            ..ManagedNode::in_flight(req, labels, pool.taints, allocatable, now)
        })
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
            },
            pods: Vec::new(),
            do_not_disrupt: false,
            drifted: None,
            disrupted: false,
            health: Default::default(),
            gpu_idle_since: None,
            expire_after: None,
            termination_grace: None,
        }
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
mod tests {
    use super::super::interruption::fixtures::launches;
    use super::*;
    use crate::api::labels as l;
    use crate::api::{NodePoolSpec, PrewarmWindow, Taint, TaintEffect};
    use crate::catalog::{CapacityType, Catalog};
    use crate::cluster::resources::{CPU, MEMORY};
    use crate::cluster::Toleration;
    use chrono::TimeZone;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::sync::OnceLock;

    fn catalog() -> &'static Catalog {
        static C: OnceLock<Catalog> = OnceLock::new();
        C.get_or_init(|| Catalog::embedded().unwrap())
    }

    fn t(s: i64) -> Time {
        // Monday 2026-01-05 00:00 UTC.
        chrono::Utc.timestamp_opt(1_767_571_200 + s, 0).unwrap()
    }

    fn gpu_pool(edit: impl FnOnce(&mut NodePoolSpec)) -> NodePool {
        let mut spec = NodePoolSpec {
            capacity_types: vec![CapacityType::Spot, CapacityType::OnDemand],
            ..Default::default()
        };
        spec.template.spec.taints = vec![Taint::new(l::TAINT_GPU, "", TaintEffect::NoSchedule)];
        spec.template.spec.requirements = vec![crate::api::Requirement::new(
            l::INSTANCE_FAMILY,
            crate::api::Operator::In,
            &["g5", "g6"],
        )];
        edit(&mut spec);
        NodePool::new("gpu", spec)
    }

    fn gpu_pod(name: &str) -> Pod {
        let mut p = Pod::new(
            name,
            Resources::new()
                .with(CPU, 2000)
                .with(MEMORY, 8 << 30)
                .with(l::RESOURCE_GPU, 1),
        );
        p.tolerations.push(Toleration::exists(l::TAINT_GPU));
        p
    }

    fn world<'a>(pools: &'a [NodePool], pending: &'a [Pod], nodes: &'a [ManagedNode]) -> World<'a> {
        World {
            catalog: catalog(),
            region: "us-east-1",
            pools,
            pending,
            nodes,
            pdbs: &[],
        }
    }

    #[test]
    fn a_pending_pod_is_launched_for_once_the_batch_closes_and_only_once() {
        let pools = [gpu_pool(|_| {})];
        let pending = [gpu_pod("ml/a")];
        let mut core = Core::new(Config::default());
        assert!(launches(&core.decide(&world(&pools, &pending, &[]), t(0))).is_empty());
        assert_eq!(
            core.next_deadline(&world(&pools, &pending, &[]), t(0)),
            Some(t(1))
        );
        let actions = core.decide(&world(&pools, &pending, &[]), t(1));
        let l = launches(&actions);
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].pods, ["ml/a"]);
        // The claim is in flight: the same pending pod launches nothing more.
        let node = ManagedNode::launched(l[0], &world(&pools, &pending, &[]), t(1)).unwrap();
        assert!(node.state.in_flight);
        assert_eq!(node.state.labels[l::NODEPOOL], "gpu");
        let nodes = [node];
        core.batcher.trigger(t(2));
        for s in 2..5 {
            assert!(launches(&core.decide(&world(&pools, &pending, &nodes), t(s))).is_empty());
        }
    }

    /// A core that launched a node for `pending` at t(1) and saw it in
    /// flight at t(2), with that node.
    fn launched_for(pools: &[NodePool], pending: &[Pod]) -> (Core, ManagedNode) {
        let mut core = Core::new(Config::default());
        core.decide(&world(pools, pending, &[]), t(0));
        let actions = core.decide(&world(pools, pending, &[]), t(1));
        let node = ManagedNode::launched(launches(&actions)[0], &world(pools, pending, &[]), t(1))
            .unwrap();
        let nodes = [node];
        assert!(launches(&core.decide(&world(pools, pending, &nodes), t(2))).is_empty());
        let [node] = nodes;
        (core, node)
    }

    /// The pods of the launches over t(3)..t(10) with this world.
    fn relaunched(core: &mut Core, w: &World) -> Vec<Vec<String>> {
        (3..10)
            .flat_map(|s| {
                launches(&core.decide(w, t(s)))
                    .into_iter()
                    .map(|c| c.pods.clone())
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn a_pending_pod_whose_node_is_lost_in_flight_is_launched_for_again() {
        let pools = [gpu_pool(|_| {})];
        let pending = [gpu_pod("ml/a")];
        let (mut core, _) = launched_for(&pools, &pending);
        // The claim is reclaimed before it is Ready: the pod is still pending
        // under the same name, and nothing else changes in the world.
        let again = relaunched(&mut core, &world(&pools, &pending, &[]));
        assert_eq!(again, [["ml/a"]]);
    }

    #[test]
    fn a_pending_pod_whose_node_gets_a_spot_notice_in_flight_is_launched_for_again() {
        let pools = [gpu_pool(|_| {})];
        let pending = [gpu_pod("ml/a")];
        let (mut core, node) = launched_for(&pools, &pending);
        let notice = Notice::SpotInterruption {
            claim: node.claim.clone(),
            deadline: t(122),
        };
        let nodes = [node];
        core.handle_notice(&notice, &world(&pools, &pending, &nodes), t(2));
        let again = relaunched(&mut core, &world(&pools, &pending, &nodes));
        assert_eq!(again, [["ml/a"]]);
    }

    #[test]
    fn a_pool_marked_not_ready_is_not_planned_and_the_pods_reason_says_why() {
        let mut held = gpu_pool(|_| {});
        held.status = Some(crate::api::NodePoolStatus {
            conditions: vec![crate::api::Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: "NodeClassNotReady".into(),
                message: "launches nothing: EC2NodeClass default does not exist".into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            }],
            ..Default::default()
        });
        let pending = [gpu_pod("ml/a")];
        let mut core = Core::new(Config::default());
        for s in 0..3 {
            let pools = [held.clone()];
            assert!(launches(&core.decide(&world(&pools, &pending, &[]), t(s))).is_empty());
        }
        let report = core.last_plan().expect("planned");
        assert_eq!(
            report.unschedulable[0].reason,
            "NodePool gpu launches nothing: EC2NodeClass default does not exist"
        );
        // Ready again: planned.
        held.status = None;
        let pools = [held];
        let launched =
            (3..6).any(|s| !launches(&core.decide(&world(&pools, &pending, &[]), t(s))).is_empty());
        assert!(launched);
    }

    #[test]
    fn a_tagged_core_names_the_claims_it_provisions_with_its_tag() {
        let pools = [gpu_pool(|_| {})];
        let pending = [gpu_pod("ml/a")];
        let name = |mut core: Core| {
            core.decide(&world(&pools, &pending, &[]), t(0));
            let actions = core.decide(&world(&pools, &pending, &[]), t(1));
            launches(&actions)[0].claim.clone()
        };
        assert_eq!(name(Core::new(Config::default())), "gpu-000001");
        assert_eq!(
            name(Core::new(Config::default()).with_claim_tag("t8d6o0")),
            "gpu-000001-t8d6o0"
        );
    }

    #[test]
    fn the_last_plan_reports_unplaceable_pods_and_its_solve_time_by_the_given_clock() {
        fn clock() -> f64 {
            // Each reading 0.25 s after the last: the planner reads the clock
            // for its time limit too, so the solve takes a whole number of
            // ticks, at least one.
            use std::sync::atomic::{AtomicU32, Ordering};
            static TICKS: AtomicU32 = AtomicU32::new(0);
            f64::from(TICKS.fetch_add(1, Ordering::Relaxed)) * 0.25
        }
        let pools = [gpu_pool(|_| {})];
        let mut huge = gpu_pod("ml/huge");
        huge.requests = huge.requests.clone().with(l::RESOURCE_GPU, 1000);
        let pending = [gpu_pod("ml/a"), huge];
        let mut core = Core::new(Config::default()).with_solve_clock(clock);
        assert_eq!(core.last_plan(), None);
        core.decide(&world(&pools, &pending, &[]), t(0));
        let actions = core.decide(&world(&pools, &pending, &[]), t(1));
        assert_eq!(launches(&actions).len(), 1);
        let report = core.last_plan().expect("a plan was made");
        assert_eq!(report.at, t(1));
        let pods: Vec<&str> = report
            .unschedulable
            .iter()
            .map(|u| u.pod.as_str())
            .collect();
        assert_eq!(pods, ["ml/huge"]);
        assert!(!report.unschedulable[0].reason.is_empty());
        let ticks = report.solve_seconds / 0.25;
        assert!(
            ticks >= 1.0 && ticks.fract() == 0.0,
            "{} s is not whole ticks of the given clock",
            report.solve_seconds
        );
    }

    /// Decides for `pending` every 30 s for ten minutes with `catalog`,
    /// checks that nothing is ever launched, and returns why the last plan
    /// could not place the first pod.
    fn launches_nothing_round_after_round(
        pools: &[NodePool],
        pending: &[Pod],
        catalog: &Catalog,
    ) -> String {
        let w = World {
            catalog,
            ..world(pools, pending, &[])
        };
        let mut core = Core::new(Config::default());
        for k in 0..20 {
            let acts = core.decide(&w, t(k * 30));
            assert!(launches(&acts).is_empty(), "round {k}: {acts:?}");
            core.batcher.trigger(t(k * 30));
        }
        let report = core.last_plan().expect("the pods were planned");
        assert_eq!(report.unschedulable[0].pod, pending[0].name);
        report.unschedulable[0].reason.clone()
    }

    #[test]
    fn a_block_that_has_ended_or_an_efa_request_no_type_meets_launches_nothing_and_says_why() {
        let block = crate::catalog::Reservation {
            id: "cr-ended".into(),
            kind: crate::catalog::ReservationKind::CapacityBlock,
            instance_type: "g5.xlarge".into(),
            region: "us-east-1".into(),
            zone_id: "use1-az4".into(),
            total: 4,
            available: 4,
            start: Some(t(-86_400)),
            end: Some(t(-60)),
            price_per_hour: 0.0,
        };
        let ended =
            catalog()
                .clone()
                .with_reservations(&[block], t(0), chrono::TimeDelta::minutes(40));
        let reserved_only = [gpu_pool(|s| {
            s.capacity_types = vec![CapacityType::Reserved]
        })];
        let why = launches_nothing_round_after_round(&reserved_only, &[gpu_pod("ml/a")], &ended);
        assert!(why.contains("capacityReservationSelectorTerms"), "{why}");

        let mut efa = gpu_pod("ml/allreduce");
        efa.requests = efa.requests.clone().with(l::RESOURCE_EFA, 1);
        let small = [gpu_pool(|s| {
            s.template.spec.requirements = vec![crate::api::Requirement::new(
                l::INSTANCE_TYPE,
                crate::api::Operator::In,
                &["g5.xlarge", "g6.xlarge"],
            )]
        })];
        let why = launches_nothing_round_after_round(&small, &[efa], catalog());
        assert!(why.contains("Elastic Fabric Adapter"), "{why}");
    }

    #[test]
    fn an_efa_gang_whose_member_fails_to_launch_releases_the_others_and_is_planned_again_whole() {
        let pools = [gpu_pool(|s| {
            s.capacity_types = vec![CapacityType::OnDemand];
            s.template.spec.requirements = vec![crate::api::Requirement::new(
                l::INSTANCE_FAMILY,
                crate::api::Operator::In,
                &["p4d", "p5"],
            )];
        })];
        let member = |name: &str| {
            let mut p = gpu_pod(name);
            p.requests = p
                .requests
                .clone()
                .with(l::RESOURCE_GPU, 8)
                .with(l::RESOURCE_EFA, 1);
            p.group = Some(crate::cluster::GroupRef {
                name: "ml/allreduce".into(),
                min_member: 2,
            });
            p
        };
        let pending = [member("ml/w-0"), member("ml/w-1")];
        let mut core = Core::new(Config::default());
        core.decide(&world(&pools, &pending, &[]), t(0));
        let first = core.decide(&world(&pools, &pending, &[]), t(1));
        let reqs = launches(&first);
        assert_eq!(reqs.len(), 2, "{first:?}");
        let w = world(&pools, &pending, &[]);
        let nodes: Vec<ManagedNode> = reqs
            .iter()
            .map(|r| ManagedNode::launched(r, &w, t(1)).unwrap())
            .collect();
        // Both in flight: nothing to do.
        let acts = core.decide(&world(&pools, &pending, &nodes), t(2));
        assert!(acts.is_empty(), "{acts:?}");
        // The first member's launch fails for lack of capacity: its claim
        // is deleted and the core told.
        let failed = reqs[0].offering.clone();
        let left = [nodes[1].clone()];
        let w = world(&pools, &pending, &left);
        core.handle_notice(
            &Notice::InsufficientCapacity {
                offering: failed.clone(),
            },
            &w,
            t(3),
        );
        let acts = core.decide(&w, t(3));
        assert!(
            acts.iter().any(|a| matches!(a,
                Action::Delete { claim, reason: crate::core::DisruptionReason::GangLaunchFailed }
                    if *claim == nodes[1].claim)),
            "the other member's node is released: {acts:?}"
        );
        // The gang is planned again whole, away from the offering that failed.
        let again: Vec<ClaimRequest> = (3..6)
            .flat_map(|k| {
                let acts = core.decide(&world(&pools, &pending, &left), t(k));
                launches(&acts).into_iter().cloned().collect::<Vec<_>>()
            })
            .collect();
        let pods: BTreeSet<&str> = again
            .iter()
            .flat_map(|r| r.pods.iter().map(String::as_str))
            .collect();
        assert_eq!(pods, BTreeSet::from(["ml/w-0", "ml/w-1"]), "{again:?}");
        assert!(again.iter().all(|r| r.offering != failed), "{again:?}");
        let places: BTreeSet<(&str, &str)> = again
            .iter()
            .map(|r| (r.offering.zone.as_str(), r.offering.instance_type.as_str()))
            .collect();
        assert_eq!(places.len(), 1, "one zone and type: {again:?}");
    }

    #[test]
    fn a_node_in_a_block_ending_soon_stays_in_the_world_and_is_drained_before_the_end() {
        let zone = catalog()
            .offerings_of("us-east-1", "g5.xlarge")
            .next()
            .unwrap()
            .zone_id
            .clone();
        let block = crate::catalog::Reservation {
            id: "cr-1".into(),
            kind: crate::catalog::ReservationKind::CapacityBlock,
            instance_type: "g5.xlarge".into(),
            region: "us-east-1".into(),
            zone_id: zone.clone(),
            total: 1,
            available: 0,
            start: Some(t(-86_400)),
            end: Some(t(3600)),
            price_per_hour: 0.0,
        };
        // Within the lead of its end: no longer offered, still known.
        let lead = chrono::TimeDelta::minutes(40);
        let reserved =
            catalog()
                .clone()
                .with_reservations(std::slice::from_ref(&block), t(1200), lead);
        assert!(reserved.offerings().iter().all(|o| o.reservation.is_none()));
        let pools = [gpu_pool(|s| {
            s.capacity_types = vec![CapacityType::Reserved, CapacityType::OnDemand]
        })];
        let w = World {
            catalog: &reserved,
            ..world(&pools, &[], &[])
        };
        let req = ClaimRequest {
            claim: "gpu-000001".into(),
            nodepool: "gpu".into(),
            offering: OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone,
                capacity_type: CapacityType::Reserved,
            },
            price_per_hour: 0.0,
            pods: vec![],
            prewarm_window: None,
            reservation: Some("cr-1".into()),
        };
        let mut node = ManagedNode::launched(&req, &w, t(0)).expect("still described");
        assert_eq!(node.state.labels[l::CAPACITY_RESERVATION_ID], "cr-1");
        node.ready_at = Some(t(100));
        node.state.in_flight = false;
        let mut train = gpu_pod("ml/train");
        train.checkpoints = true;
        node.pods = vec![crate::core::BoundPod {
            pod: train,
            ..crate::core::interruption::fixtures::pod("train")
        }];
        let nodes = [node];
        let w = World {
            catalog: &reserved,
            ..world(&pools, &[], &nodes)
        };
        let mut core = Core::new(Config::default());
        assert_eq!(core.next_deadline(&w, t(1000)), Some(t(3600 - 2400)));
        let acts = core.decide(&w, t(1200));
        assert!(
            acts.iter()
                .any(|a| matches!(a, Action::Cordon { claim, .. } if claim == "gpu-000001")),
            "{acts:?}"
        );
        // Its pod, asked to checkpoint, is planned again as soon as the
        // batch closes, elsewhere, long before the end.
        let launched = (1..=120).any(|k| {
            core.decide(&w, t(1200 + k)).iter().any(
                |a| matches!(a, Action::Launch(r) if r.reservation.is_none() && r.pods == ["ml/train"]),
            )
        });
        assert!(launched);
    }

    /// The GPU pool allowing `capacity_types`, with an "office" window of 8
    /// GPUs at 08:00 Berlin on weekdays.
    fn office_pool(capacity_types: Vec<CapacityType>) -> NodePool {
        gpu_pool(|s| {
            s.capacity_types = capacity_types;
            s.prewarm = vec![PrewarmWindow {
                name: "office".into(),
                schedule: "0 8 * * 1-5".into(),
                time_zone: "Europe/Berlin".into(),
                duration: "10h".into(),
                capacity: [(l::RESOURCE_GPU.to_string(), Quantity("8".into()))].into(),
            }];
        })
    }

    #[test]
    fn a_later_namespace_is_planned_although_earlier_pods_fill_every_batch_and_never_fit() {
        let pools = [gpu_pool(|_| {})];
        // Five pods of namespace `a-team` that no offering can hold (and
        // sort first), one of `b-team` that fits; plans take three pods.
        let mut pending: Vec<Pod> = (0..5)
            .map(|i| {
                let mut p = gpu_pod(&format!("a-team/huge-{i}"));
                p.requests.set(l::RESOURCE_GPU, 1000);
                p
            })
            .collect();
        pending.push(gpu_pod("b-team/train"));
        let mut core = Core::new(Config {
            max_batch_pods: 3,
            ..Config::default()
        });
        let mut planned = None;
        for s in 0..30 {
            // What the driver does each round: cap, then decide.
            let (kept, _) = core.cap_batch(pending.clone());
            let actions = core.decide(&world(&pools, &kept, &[]), t(s));
            if launches(&actions)
                .iter()
                .any(|c| c.pods.iter().any(|p| p == "b-team/train"))
            {
                planned = Some(s);
                break;
            }
        }
        let at = planned.expect("b-team/train is planned");
        assert!(at <= 5, "planned only at {at} s");
    }

    #[test]
    fn a_prewarm_window_launches_its_capacity_before_it_opens_and_not_twice() {
        let pools = [office_pool(vec![
            CapacityType::Spot,
            CapacityType::OnDemand,
        ])];
        let mut core = Core::new(Config::default());
        // Monday 06:00 UTC is 07:00 in Berlin: an hour early, nothing yet.
        let early = t(6 * 3600);
        assert!(launches(&core.decide(&world(&pools, &[], &[]), early)).is_empty());
        // Two minutes before 08:00 Berlin is within any family's lead time.
        let lead = core.latency.lead_for_pool(&pools[0], catalog());
        assert!(lead > std::time::Duration::from_secs(120));
        let warm = t(7 * 3600 - 120);
        core.decide(&world(&pools, &[], &[]), warm);
        let actions = core.decide(
            &world(&pools, &[], &[]),
            warm + chrono::Duration::seconds(1),
        );
        let l = launches(&actions);
        assert!(!l.is_empty());
        assert!(l
            .iter()
            .all(|c| c.prewarm_window.as_deref() == Some("office")));
        let gpus: u32 = l
            .iter()
            .map(|c| {
                catalog()
                    .instance_type(&c.offering.instance_type)
                    .unwrap()
                    .accelerator
                    .as_ref()
                    .unwrap()
                    .count
            })
            .sum();
        assert!(gpus >= 8, "{gpus} GPUs launched");
        // Once launched, the window's capacity is held: nothing more.
        let w = world(&pools, &[], &[]);
        let nodes: Vec<ManagedNode> = l
            .iter()
            .map(|c| ManagedNode::launched(c, &w, warm).unwrap())
            .collect();
        for s in 2..6 {
            let at = warm + chrono::Duration::seconds(s);
            assert!(launches(&core.decide(&world(&pools, &[], &nodes), at)).is_empty());
        }
    }

    /// The claims the core launches for the "office" window (8 GPUs at
    /// 08:00 Berlin) of a pool allowing `capacity_types`, two minutes before
    /// it opens, given the pool's `nodes`.
    fn window_launches(
        capacity_types: Vec<CapacityType>,
        nodes: &[ManagedNode],
    ) -> (Vec<ClaimRequest>, Vec<NodePool>) {
        let pools = vec![office_pool(capacity_types)];
        let mut core = Core::new(Config::default());
        let warm = t(7 * 3600 - 120);
        core.decide(&world(&pools, &[], nodes), warm);
        let actions = core.decide(
            &world(&pools, &[], nodes),
            warm + chrono::Duration::seconds(1),
        );
        let claims = launches(&actions).into_iter().cloned().collect();
        (claims, pools)
    }

    #[test]
    fn a_window_is_held_off_spot_when_its_pool_may_launch_on_demand() {
        let both = || vec![CapacityType::Spot, CapacityType::OnDemand];
        let (claims, pools) = window_launches(both(), &[]);
        assert!(!claims.is_empty());
        assert!(
            claims
                .iter()
                .all(|c| c.offering.capacity_type == CapacityType::OnDemand),
            "{:?}",
            claims.iter().map(|c| &c.offering).collect::<Vec<_>>()
        );
        let w = world(&pools, &[], &[]);
        let held: Vec<ManagedNode> = claims
            .iter()
            .map(|c| ManagedNode::launched(c, &w, t(7 * 3600 - 120)).unwrap())
            .collect();
        // Held on on-demand nodes, the window launches nothing more; on
        // spot nodes, which a reclaim can take just before it opens, it
        // launches its capacity again.
        assert!(window_launches(both(), &held).0.is_empty());
        let mut on_spot = held.clone();
        for n in &mut on_spot {
            n.offering.capacity_type = CapacityType::Spot;
            n.state
                .labels
                .insert(l::CAPACITY_TYPE.into(), CapacityType::Spot.as_str().into());
        }
        assert!(!window_launches(both(), &on_spot).0.is_empty());
        // A pool that may not launch on-demand holds its window on spot:
        // once launched, nothing more.
        let (claims, pools) = window_launches(vec![CapacityType::Spot], &[]);
        assert!(!claims.is_empty());
        assert!(claims
            .iter()
            .all(|c| c.offering.capacity_type == CapacityType::Spot));
        let w = world(&pools, &[], &[]);
        let held: Vec<ManagedNode> = claims
            .iter()
            .map(|c| ManagedNode::launched(c, &w, t(7 * 3600 - 120)).unwrap())
            .collect();
        assert!(window_launches(vec![CapacityType::Spot], &held)
            .0
            .is_empty());
        // Nor does a pool of spot and reserved capacity (a reservation can
        // be used up) hold its windows off spot.
        let spot_and_reserved = office_pool(vec![CapacityType::Spot, CapacityType::Reserved]);
        assert!(prewarm::holds_on_spot(&spot_and_reserved));
        assert!(!prewarm::holds_on_spot(&office_pool(both())));
    }

    /// A spot notice on `gpu-1` at 1000 (due at 1120), and the decisions
    /// then.
    fn spot_notice_on_gpu_1(core: &mut Core, w: &World) -> Vec<Action> {
        let notice = Notice::SpotInterruption {
            claim: "gpu-1".into(),
            deadline: t(1000 + 120),
        };
        core.handle_notice(&notice, w, t(1000));
        core.decide(w, t(1000))
    }

    #[test]
    fn a_notice_on_one_gang_member_replans_the_gang_whole_reusing_the_node_that_stays() {
        let pools = [gpu_pool(|_| {})];
        let mut core = Core::new(Config::default());
        let w0 = world(&pools, &[], &[]);
        let member = |name: &str| {
            let mut p = gpu_pod(name);
            p.checkpoints = true;
            p.group = Some(crate::cluster::GroupRef {
                name: "ml/train".into(),
                min_member: 2,
            });
            super::super::BoundPod {
                pod: p,
                do_not_disrupt: false,
                checkpoint_completed: None,
                pdb: None,
                placeholder: false,
                started: None,
            }
        };
        let nodes: Vec<ManagedNode> = ["gpu-1", "gpu-2"]
            .iter()
            .zip(["ml/a", "ml/b"])
            .map(|(claim, pod)| {
                let req = ClaimRequest {
                    claim: claim.to_string(),
                    nodepool: "gpu".into(),
                    // The member that stays is on a bigger on-demand node,
                    // with room for the whole gang once b's counts.
                    offering: OfferingKey {
                        instance_type: if *claim == "gpu-1" {
                            "g5.xlarge".into()
                        } else {
                            "g5.12xlarge".into()
                        },
                        zone: "use1-az1".into(),
                        capacity_type: if *claim == "gpu-1" {
                            CapacityType::Spot
                        } else {
                            CapacityType::OnDemand
                        },
                    },
                    price_per_hour: 0.5,
                    pods: vec![],
                    prewarm_window: None,
                    reservation: None,
                };
                let mut n = ManagedNode::launched(&req, &w0, t(0)).unwrap();
                n.ready_at = Some(t(300));
                n.state.in_flight = false;
                let m = member(pod);
                n.state.used.add(&m.pod.requests);
                n.pods.push(m);
                if *claim == "gpu-2" {
                    // Another job's two GPUs: one GPU is free besides b's.
                    let mut other = member("ml/other");
                    other.pod.group = None;
                    other.pod.requests.set(l::RESOURCE_GPU, 2);
                    n.state.used.add(&other.pod.requests);
                    n.pods.push(other);
                }
                n
            })
            .collect();
        let w = world(&pools, &[], &nodes);
        let first = spot_notice_on_gpu_1(&mut core, &w);
        let asked: Vec<&str> = first
            .iter()
            .filter_map(|a| match a {
                Action::RequestCheckpoint { pod, .. } => Some(pod.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(asked, ["ml/a", "ml/b"]);
        // The gang is demand whole, and the room its member on the node
        // that stays holds counts for it: that node has room for the whole
        // gang, so nothing is launched (without that room, both members
        // would get new nodes).
        let then: Vec<ClaimRequest> = (1..5)
            .flat_map(|s| {
                launches(&core.decide(&w, t(1000 + s)))
                    .into_iter()
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(then, []);
        assert!(core.last_plan().is_some(), "the gang was planned");
    }

    #[test]
    fn learned_rates_start_from_the_prior_of_the_catalog_in_hand_not_the_first_one_seen() {
        let core = {
            let mut c = Core::new(Config::default());
            c.estimator.observe_interruption(&OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::Spot,
            });
            c
        };
        let key = core.estimator.pools().next().unwrap().clone();
        let rate_with = |catalog: &Catalog| {
            let w = World {
                catalog,
                ..world(&[], &[], &[])
            };
            core.learned_rates(&w)[&key]
        };
        let calibrated = catalog().clone();
        let _ = rate_with(&calibrated);
        // The catalog is refreshed under another market model: the prior,
        // and so the learned rate, follow it.
        let advisor = calibrated.with_market(crate::catalog::market::MarketModel::Advisor);
        let prior = super::super::estimator::prior_rate(&advisor, "us-east-1", &key);
        let expected = core.estimator.posterior_from(&key, prior).mean();
        assert_eq!(rate_with(&advisor), expected);
        assert_ne!(rate_with(catalog()), expected);
    }

    /// A spot g5.xlarge `gpu-1` of pool `gpu`, launched at 0 and Ready at
    /// 300 s, running `pod` since then.
    fn ready_spot_node(pools: &[NodePool], pod: Pod, started: Option<Time>) -> ManagedNode {
        let req = ClaimRequest {
            claim: "gpu-1".into(),
            nodepool: "gpu".into(),
            offering: OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::Spot,
            },
            price_per_hour: 0.5,
            pods: vec![],
            prewarm_window: None,
            reservation: None,
        };
        let mut node = ManagedNode::launched(&req, &world(pools, &[], &[]), t(0)).unwrap();
        node.ready_at = Some(t(300));
        node.state.in_flight = false;
        node.pods.push(super::super::BoundPod {
            pod,
            do_not_disrupt: false,
            checkpoint_completed: None,
            started,
            pdb: None,
            placeholder: false,
        });
        node
    }

    #[test]
    fn a_big_checkpointing_pod_on_a_young_spot_node_is_asked_to_checkpoint_unless_cadence_is_off() {
        let pools = [gpu_pool(|_| {})];
        let mut pod = gpu_pod("ml/a");
        pod.checkpoints = true;
        pod.checkpoint_interval_s = Some(3600.0);
        // Five minutes to write: more than a spot notice leaves.
        pod.checkpoint_duration_s = Some(300.0);
        let node = ready_spot_node(&pools, pod, Some(t(300)));
        let nodes = [node];
        let w = world(&pools, &[], &nodes);
        let asked = |actions: &[Action]| {
            actions
                .iter()
                .any(|a| matches!(a, Action::RequestCheckpoint { pod, .. } if pod == "ml/a"))
        };
        // Steps from deadline to deadline, as the drivers do, for the
        // pod's own hour: when is it first asked?
        let first_request = |config: Config| {
            let mut core = Core::new(config);
            let mut at = t(301);
            while at < t(300 + 3600) {
                if asked(&core.decide(&w, at)) {
                    return Some(at);
                }
                at = core.next_deadline(&w, at)?;
            }
            None
        };
        let at = first_request(Config::default()).expect("asked within its own interval");
        assert!(at > t(301), "not at once: there is nothing to save yet");
        let off = Config {
            checkpoint_cadence: false,
            ..Config::default()
        };
        assert_eq!(first_request(off), None);
    }

    #[test]
    fn an_interruption_cordons_the_node_and_launches_a_replacement_elsewhere() {
        let pools = [gpu_pool(|_| {})];
        let mut core = Core::new(Config::default());
        let node = ready_spot_node(&pools, gpu_pod("ml/a"), None);
        let nodes = [node];
        let w = world(&pools, &[], &nodes);
        let first = spot_notice_on_gpu_1(&mut core, &w);
        assert!(first
            .iter()
            .any(|a| matches!(a, Action::Cordon { claim, .. } if claim == "gpu-1")));
        // The pod did not opt in to checkpoints: evicted at once, it is
        // pending again, and the batch opened for it closes a second later.
        assert!(first
            .iter()
            .any(|a| matches!(a, Action::Evict { pod, .. } if pod == "ml/a")));
        let mut cordoned = nodes[0].clone();
        cordoned.pods.clear();
        cordoned.state.unschedulable = true;
        let pending = [gpu_pod("ml/a")];
        let after = [cordoned];
        let w = world(&pools, &pending, &after);
        let then = core.decide(&w, t(1001));
        let l = launches(&then);
        assert_eq!(l.len(), 1, "{then:?}");
        assert_eq!(l[0].pods, ["ml/a"]);
        assert_ne!(
            l[0].offering, nodes[0].offering,
            "not the interrupted pool again"
        );
    }
}
