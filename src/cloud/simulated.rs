//! A simulated cloud in virtual time: launches with per-family boot
//! latencies, capacity failures, spot interruptions and price changes, all
//! deterministic given a seed and never reading the clock. The simulator
//! owns a [`SimulatedCloud`] and calls its synchronous methods, jumping its
//! clock to [`SimulatedCloud::next_event_time`] and collecting
//! [`CloudEvent`]s from [`SimulatedCloud::advance`]; code written against
//! [`CloudProvider`] drives a `Mutex<SimulatedCloud>` (see
//! [`block_on_ready`]). Defaults and the interruption process are described
//! in `docs/simulated-cloud.md`.

mod config;
mod events;
mod faults;
mod interruptions;
mod market;
mod slices;
#[cfg(test)]
mod tests;

pub use config::{
    BootProfile, CapacityModel, ConfigError, FaultModel, InterruptionModel, LatencyModel,
    MarketTuning, PriceChange, PriceTarget, SimulatedCloudConfig, Storm, DEFAULT_REBOOT_FIXES,
    LLAMA3_FAULTS_PER_GPU_HOUR,
};
pub use events::{CloudEvent, TerminationCause};
pub use market::TraceReplay;
pub use slices::resource_slices;

use super::{CloudProvider, Error, Instance, InstanceState, NodeTemplate, Result};
use crate::catalog::{CapacityType, Catalog, MarketModel, PoolMarket};
use crate::core::{ClaimRequest, Notice, OfferingKey, Time};
use chrono::TimeDelta;
use interruptions::{hours, hours_between, stream, takes, PoolProcess};
use market::{reclaim_time, storm_segments, Replayed};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// What the cloud knows about one pool it sells.
#[derive(Debug, Clone)]
struct Pool {
    /// Catalog price, USD per hour.
    price: f64,
    /// Hourly interruption rate before storms (0 for on-demand): the
    /// advisor process's rate, or the calibrated market's mean rate.
    rate: f64,
    /// The calibrated market (spot pools, unless the advisor model runs).
    market: Option<Arc<PoolMarket>>,
    /// Its hazard multiplier over time (storms).
    segments: Arc<[(Time, f64)]>,
}

/// A timer: what happens when it fires.
#[derive(Debug, Clone)]
enum Timer {
    Running(usize),
    Registered(usize),
    Ready(usize),
    Rebalance(usize),
    Notice(usize, Time),
    Reclaim(usize),
    ShutDown(usize),
    Price(OfferingKey, f64),
    /// The calibrated market's reclaim time of an instance.
    Trigger(usize),
    /// Reclaim event `.1` of a replayed trace in a pool.
    Replay(OfferingKey, usize),
    /// The instance's node fails (`faults`).
    Fault(usize),
    /// The instance is back from a reboot.
    Rebooted(usize),
}

impl Timer {
    /// A boot milestone short of Ready, or a price move: nothing the
    /// simulator's rounds read ([`SimulatedCloud::next_notable_event_time`]).
    fn is_milestone(&self) -> bool {
        matches!(
            self,
            Timer::Running(_) | Timer::Registered(_) | Timer::Price(..)
        )
    }

    fn instance(&self) -> Option<usize> {
        match self {
            Timer::Running(i)
            | Timer::Registered(i)
            | Timer::Ready(i)
            | Timer::Rebalance(i)
            | Timer::Notice(i, _)
            | Timer::Reclaim(i)
            | Timer::Trigger(i)
            | Timer::Fault(i)
            | Timer::Rebooted(i)
            | Timer::ShutDown(i) => Some(*i),
            Timer::Price(..) | Timer::Replay(..) => None,
        }
    }
}

type TimerKey = (Time, u64);

/// Instances one cluster placement group (one bottom network node) holds
/// in the simulated topology ([`SimulatedCloud::network_nodes`]).
pub const SIM_BLOCK: usize = 16;
/// Bottom network nodes (blocks) per zone in the simulated topology.
pub const SIM_ZONE_BLOCKS: u64 = 8;

#[derive(Debug, Clone)]
struct SimInstance {
    instance: Instance,
    /// End of billing (termination requested or reclaimed).
    billed_until: Option<Time>,
    /// Its timers still in the queue.
    timers: Vec<TimerKey>,
    /// When it runs (the age origin of its hazard).
    running_at: Time,
    /// Its launch's number in its pool (names its lifetime draws).
    ordinal: u64,
    /// Lifetime draws used so far.
    draws: u32,
    /// Whether it got its interruption notice.
    noticed: bool,
    /// The cluster placement group it was launched into (its pool's of its
    /// zone), if any.
    placement_group: Option<String>,
    /// Its faults so far, and the one it has now (`faults`).
    health: faults::InstanceHealth,
}

/// The simulated cloud. Deterministic: the same catalog, configuration and
/// sequence of calls give the same instances, events and costs. Its time
/// never goes backwards: a call with a `now` earlier than one already seen
/// acts at the latest time seen.
#[derive(Debug)]
pub struct SimulatedCloud {
    config: SimulatedCloudConfig,
    catalog: Arc<Catalog>,
    pools: BTreeMap<OfferingKey, Pool>,
    /// Price changes per pool, sorted by time (later-listed wins a tie).
    prices: BTreeMap<OfferingKey, Vec<(Time, f64)>>,
    reclaims: BTreeMap<OfferingKey, PoolProcess>,
    capacity_draws: BTreeMap<OfferingKey, ChaCha8Rng>,
    /// Calibrated market: running spot instances not yet noticed, per pool.
    members: BTreeMap<OfferingKey, BTreeSet<usize>>,
    /// Launches and reclaim events so far, per pool (name the draws).
    launches: BTreeMap<OfferingKey, u64>,
    reclaim_events: BTreeMap<OfferingKey, u64>,
    /// Launch attempts that drew obtainability, per pool.
    attempts: BTreeMap<OfferingKey, u64>,
    /// Pools closed after a reclaim, until then.
    closed_until: BTreeMap<OfferingKey, Time>,
    /// Replayed traces, per pool.
    replayed: BTreeMap<OfferingKey, Replayed>,
    instances: Vec<SimInstance>,
    /// Instances still billed (no end of billing yet).
    billed: BTreeSet<usize>,
    /// What the instances no longer billed cost in all.
    settled_cost: f64,
    by_claim: HashMap<String, usize>,
    /// Reboots per claim.
    reboots: BTreeMap<String, u32>,
    timers: BTreeMap<TimerKey, Timer>,
    next_seq: u64,
    now: Time,
}

impl SimulatedCloud {
    /// A cloud selling the catalog's offerings in `config.region`.
    ///
    /// # Errors
    /// [`ConfigError`] when the configuration is out of range (see
    /// [`SimulatedCloudConfig::validate`]).
    pub fn new(
        catalog: Arc<Catalog>,
        config: SimulatedCloudConfig,
    ) -> std::result::Result<SimulatedCloud, ConfigError> {
        config.validate(&catalog)?;
        let im = &config.interruptions;
        let model = im
            .market
            .clone()
            .unwrap_or_else(|| catalog.market_model().clone());
        // Offerings priced with the configured model (the catalog's own
        // unless the configuration names another).
        let priced = (model != *catalog.market_model())
            .then(|| catalog.as_ref().clone().with_market(model.clone()));
        let source = priced.as_ref().unwrap_or(&catalog);
        let calibrated = matches!(model, MarketModel::Calibrated(_));
        let pools: BTreeMap<OfferingKey, Pool> = source
            .offerings_in(&config.region)
            .map(|o| {
                let key = OfferingKey {
                    instance_type: o.instance_type.clone(),
                    zone: o.zone_id.clone(),
                    capacity_type: o.capacity_type,
                };
                let spot = o.capacity_type == CapacityType::Spot;
                let market = o.market.clone().filter(|_| spot && calibrated).map(|m| {
                    let mut factor = im.rate_multiplier;
                    if let Some(r) = im.rate_overrides.get(&key) {
                        let mean = m.mean_rate_per_hour();
                        factor *= if mean > 0.0 { r / mean } else { 0.0 };
                    }
                    let scaled = PoolMarket {
                        lifetime: m.lifetime.scaled(factor),
                        ..m
                    };
                    Arc::new(im.tuning.apply(scaled))
                });
                let rate = match (&market, spot) {
                    (_, false) => 0.0,
                    (Some(m), true) => m.mean_rate_per_hour(),
                    (None, true) => {
                        let base = im.rate_overrides.get(&key).copied();
                        base.unwrap_or_else(|| o.interruption_rate_per_hour()) * im.rate_multiplier
                    }
                };
                let segments = if market.is_some() {
                    storm_segments(&im.storms, &key, config.epoch).into()
                } else {
                    Arc::from([])
                };
                let pool = Pool {
                    price: o.price_per_hour,
                    rate,
                    market,
                    segments,
                };
                (key, pool)
            })
            .collect();
        let mut replayed: BTreeMap<OfferingKey, Replayed> = BTreeMap::new();
        for r in &im.replays {
            for key in &r.pools {
                replayed
                    .entry(key.clone())
                    .or_default()
                    .add(r, config.epoch);
            }
        }
        let mut cloud = SimulatedCloud {
            catalog,
            pools,
            prices: BTreeMap::new(),
            reclaims: BTreeMap::new(),
            capacity_draws: BTreeMap::new(),
            members: BTreeMap::new(),
            launches: BTreeMap::new(),
            reclaim_events: BTreeMap::new(),
            attempts: BTreeMap::new(),
            closed_until: BTreeMap::new(),
            replayed,
            instances: Vec::new(),
            billed: BTreeSet::new(),
            settled_cost: 0.0,
            by_claim: HashMap::new(),
            reboots: BTreeMap::new(),
            timers: BTreeMap::new(),
            next_seq: 0,
            now: Time::MIN_UTC,
            config,
        };
        let replay_events: Vec<(OfferingKey, Time, usize)> = cloud
            .replayed
            .iter()
            .flat_map(|(k, r)| {
                r.reclaims
                    .iter()
                    .enumerate()
                    .map(move |(i, (at, _))| (k.clone(), *at, i))
            })
            .collect();
        for (key, at, i) in replay_events {
            if at >= cloud.config.epoch {
                cloud.schedule(at, Timer::Replay(key, i));
            }
        }
        let mut changes = cloud.config.price_changes.clone();
        changes.sort_by_key(|c| c.at);
        for c in changes {
            let keys: Vec<OfferingKey> = cloud
                .pools
                .keys()
                .filter(|k| c.target.matches(&k.instance_type, &k.zone, k.capacity_type))
                .cloned()
                .collect();
            for key in keys {
                let timeline = cloud.prices.entry(key.clone()).or_default();
                timeline.push((c.at, c.price_per_hour));
                cloud.schedule(c.at, Timer::Price(key, c.price_per_hour));
            }
        }
        Ok(cloud)
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &SimulatedCloudConfig {
        &self.config
    }

    /// The price of a pool at `at`, USD per hour; `None` if the region does
    /// not sell it.
    pub fn price(&self, offering: &OfferingKey, at: Time) -> Option<f64> {
        let pool = self.pools.get(offering)?;
        let changes = self.prices.get(offering).map(Vec::as_slice).unwrap_or(&[]);
        let applied = changes.partition_point(|(t, _)| *t <= at);
        Some(match applied {
            0 => pool.price,
            n => changes[n - 1].1,
        })
    }

    /// A pool's hourly interruption rate outside storms (catalog rate or
    /// override, times the multiplier; for the calibrated market its mean
    /// rate, [`PoolMarket::mean_rate_per_hour`]; 0 for on-demand); `None`
    /// if the region does not sell it.
    pub fn interruption_rate(&self, offering: &OfferingKey) -> Option<f64> {
        self.pools.get(offering).map(|p| p.rate)
    }

    /// Launches the instance for `claim` at `now`, or returns the one
    /// already launched for that claim name (whatever its state).
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when the pool is configured as
    /// exhausted or its failure draw fails; [`Error::Other`] when the region
    /// does not sell the offering or the claim name was launched with a
    /// different offering.
    pub fn launch(&mut self, claim: &ClaimRequest, now: Time) -> Result<Instance> {
        let now = self.observe(now);
        let key = &claim.offering;
        if let Some(&i) = self.by_claim.get(&claim.claim) {
            let existing = &self.instances[i].instance;
            if existing.offering != *key {
                return Err(Error::Other(format!(
                    "cannot launch {} as {key}: already launched as {}",
                    claim.claim, existing.offering
                )));
            }
            return Ok(existing.clone());
        }
        let Some(pool) = self.pools.get(key).cloned() else {
            return Err(Error::Other(format!(
                "cannot launch {} as {key}: not offered in {}",
                claim.claim, self.config.region
            )));
        };
        if self.capacity_fails(key) || self.market_refuses(key, &pool, now) {
            return Err(Error::InsufficientCapacity {
                claim: claim.claim.clone(),
                offering: key.clone(),
                code: "InsufficientInstanceCapacity".into(),
            });
        }
        let idx = self.instances.len();
        let instance = Instance {
            claim: claim.claim.clone(),
            provider_id: format!("aws:///{}/i-{:017x}", key.zone, idx + 1),
            offering: key.clone(),
            price_per_hour: self.price(key, now).unwrap_or(pool.price),
            launched_at: now,
            state: InstanceState::Pending,
        };
        let (running, registered, ready) = self.boot_times(&claim.claim, &key.instance_type, now);
        let ordinal = if key.capacity_type == CapacityType::Spot {
            let n = self.launches.entry(key.clone()).or_insert(0);
            *n += 1;
            *n - 1
        } else {
            0
        };
        self.instances.push(SimInstance {
            instance: instance.clone(),
            billed_until: None,
            timers: Vec::new(),
            running_at: running,
            ordinal,
            draws: 0,
            noticed: false,
            placement_group: None,
            health: Default::default(),
        });
        self.by_claim.insert(claim.claim.clone(), idx);
        self.billed.insert(idx);

        self.schedule(running, Timer::Running(idx));
        self.schedule(registered, Timer::Registered(idx));
        self.schedule(ready, Timer::Ready(idx));
        let replayed = self.replayed.get(key).is_some_and(|r| r.preemption);
        if let Some(market) = pool.market.as_ref().filter(|_| !replayed) {
            self.schedule_trigger(idx, market, &pool.segments, running);
        } else if pool.rate > 0.0 && !replayed {
            if let Some(notice) = self.notice_time(key, pool.rate, &claim.claim, running) {
                let im = &self.config.interruptions;
                let deadline = notice + delta(im.notice);
                if let Some(lead) = im.rebalance_lead {
                    let at = (notice - delta(lead)).max(running);
                    self.schedule(at, Timer::Rebalance(idx));
                }
                self.schedule(notice, Timer::Notice(idx, deadline));
                self.schedule(deadline, Timer::Reclaim(idx));
            }
        }
        Ok(instance)
    }

    /// Terminates the instance of `claim` at `now`: billing stops now, the
    /// instance shuts down and is terminated after the configured shutdown
    /// time. Terminating an instance already shutting down or terminated
    /// changes nothing.
    ///
    /// # Errors
    /// [`Error::NotFound`] when no instance was launched for the claim.
    pub fn terminate(&mut self, claim: &str, now: Time) -> Result<Instance> {
        let now = self.observe(now);
        let Some(&i) = self.by_claim.get(claim) else {
            return Err(Error::NotFound {
                claim: claim.to_string(),
            });
        };
        if self.instances[i].instance.state.is_alive() {
            self.leave_pool(i);
            self.cancel_timers(i);
            let sim = &mut self.instances[i];
            sim.instance.state = InstanceState::ShuttingDown;
            sim.billed_until = Some(now);
            self.settle(i);
            let at = now + delta(self.config.latency.shutdown);
            self.schedule(at, Timer::ShutDown(i));
        }
        Ok(self.instances[i].instance.clone())
    }

    /// Reboots the instance of `claim`: a running instance stays running
    /// (billing goes on), the reboot is counted ([`SimulatedCloud::reboots`])
    /// and the instance is away for the reboot's duration, after which
    /// [`CloudEvent::Rebooted`] says whether it came back healthy (see
    /// [`FaultModel`]). Rebooting an instance already rebooting changes
    /// nothing.
    ///
    /// # Errors
    /// [`Error::NotFound`] when the claim has no running instance.
    pub fn reboot(&mut self, claim: &str, now: Time) -> Result<Instance> {
        let now = self.observe(now);
        match self.by_claim.get(claim) {
            Some(&i) if self.instances[i].instance.state == InstanceState::Running => {
                if self.start_reboot(i, now) {
                    *self.reboots.entry(claim.to_string()).or_default() += 1;
                }
                Ok(self.instances[i].instance.clone())
            }
            _ => Err(Error::NotFound {
                claim: claim.to_string(),
            }),
        }
    }

    /// How many times each claim's instance was rebooted.
    pub fn reboots(&self) -> &std::collections::BTreeMap<String, u32> {
        &self.reboots
    }

    /// The ResourceSlices the DRA drivers of the instance of `claim`
    /// publish once it is Ready, for the drivers `runs` says its node runs:
    /// its type's device templates in the catalog (its GPUs partitioned
    /// into a MIG profile or shared where its pool does so) as devices
    /// ([`resource_slices`], named by the claim). None for an unknown
    /// claim.
    pub fn resource_slices(
        &self,
        claim: &str,
        layout: crate::catalog::GpuLayout<'_>,
        runs: &dyn Fn(&str) -> bool,
    ) -> Vec<k8s_openapi::api::resource::v1::ResourceSlice> {
        let Some(it) = self
            .describe(claim)
            .and_then(|i| self.catalog.instance_type(&i.offering.instance_type))
        else {
            return Vec::new();
        };
        let templates: Vec<_> = self
            .catalog
            .device_templates(it, layout)
            .into_iter()
            .filter(|t| runs(&t.driver))
            .collect();
        resource_slices(claim, &templates)
    }

    /// The instance of `claim`, in any state.
    pub fn describe(&self, claim: &str) -> Option<Instance> {
        self.by_claim
            .get(claim)
            .map(|&i| self.instances[i].instance.clone())
    }

    /// The network nodes of the instance with that provider ID, top layer
    /// first, for types EC2 reports a topology for
    /// ([`crate::catalog::topology`]); empty for other types and unknown
    /// instances. The model: one top node per zone and [`SIM_ZONE_BLOCKS`]
    /// bottom nodes (blocks) under it, four under each middle node. An
    /// instance launched on its own lands in a block drawn from its number
    /// (launches of one gang scatter); the instances of one cluster
    /// placement group share one block of their own, which holds
    /// [`SIM_BLOCK`] of them ([`SimulatedCloud::launch_placed`]).
    pub fn network_nodes(&self, provider_id: &str) -> Vec<String> {
        let Some((idx, me)) = self
            .instances
            .iter()
            .enumerate()
            .find(|(_, s)| s.instance.provider_id == provider_id)
        else {
            return Vec::new();
        };
        let o = &me.instance.offering;
        let Some(layers) = crate::catalog::topology::network_layers(&o.instance_type) else {
            return Vec::new();
        };
        let (middle, block) = match &me.placement_group {
            Some(group) => (format!("pg-{group}"), format!("pg-{group}")),
            None => {
                // A fixed scatter of instance numbers over the blocks.
                let b = (idx as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61;
                ((b / 4).to_string(), b.to_string())
            }
        };
        let mut nodes = vec![
            format!("nn-{}-l1", o.zone),
            format!("nn-{}-l2-{middle}", o.zone),
            format!("nn-{}-l3-{block}", o.zone),
        ];
        if layers == 4 {
            nodes.push(format!("nn-{}-l4-{idx}", o.zone));
        }
        nodes
    }

    /// [`SimulatedCloud::launch`] into the cluster placement group `group`
    /// (one per pool and zone, as EC2 launches EFA and one-block gangs):
    /// the group's instances share one network block, and a group already
    /// holding [`SIM_BLOCK`] live instances has no room
    /// ([`Error::InsufficientCapacity`], as EC2 answers a full group).
    ///
    /// # Errors
    /// As [`SimulatedCloud::launch`], and a full group.
    pub fn launch_placed(
        &mut self,
        claim: &ClaimRequest,
        group: &str,
        now: Time,
    ) -> Result<Instance> {
        if let Some(&i) = self.by_claim.get(&claim.claim) {
            if self.instances[i].placement_group.as_deref() == Some(group) {
                return self.launch(claim, now);
            }
        }
        let members = self
            .instances
            .iter()
            .filter(|s| s.placement_group.as_deref() == Some(group))
            .filter(|s| s.instance.state.is_alive())
            .count();
        if members >= SIM_BLOCK {
            return Err(Error::InsufficientCapacity {
                claim: claim.claim.clone(),
                offering: claim.offering.clone(),
                code: "InsufficientInstanceCapacity".into(),
            });
        }
        let instance = self.launch(claim, now)?;
        if let Some(&i) = self.by_claim.get(&claim.claim) {
            self.instances[i].placement_group = Some(group.to_string());
        }
        Ok(instance)
    }

    /// Instances not terminated yet, in launch order.
    pub fn instances(&self) -> Vec<Instance> {
        self.instances
            .iter()
            .filter(|s| s.instance.state != InstanceState::Terminated)
            .map(|s| s.instance.clone())
            .collect()
    }

    /// Every instance ever launched, terminated ones included, in launch
    /// order (for reports).
    pub fn all_instances(&self) -> impl Iterator<Item = &Instance> {
        self.instances.iter().map(|s| &s.instance)
    }

    /// When the next event happens, if any is pending; the simulator jumps
    /// its clock there and calls [`SimulatedCloud::advance`].
    pub fn next_event_time(&self) -> Option<Time> {
        self.timers.keys().next().map(|(t, _)| *t)
    }

    /// When the next event happens other than a boot milestone short of
    /// Ready (running, registered) or a price move. The simulator reads
    /// neither (its nodes are in flight until Ready, and the core prices
    /// from the catalog), so it need not wake for them; [`SimulatedCloud::advance`]
    /// still reports them, in order, at the next wake.
    pub fn next_notable_event_time(&self) -> Option<Time> {
        self.timers
            .iter()
            .find(|(_, timer)| !timer.is_milestone())
            .map(|((t, _), _)| *t)
    }

    /// Everything that happens up to and including `now`, in time order,
    /// with the instances' states updated accordingly.
    pub fn advance(&mut self, now: Time) -> Vec<CloudEvent> {
        let now = self.observe(now);
        let mut events = Vec::new();
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let (key, timer) = entry.remove_entry();
            let at = key.0;
            if let Some(i) = timer.instance() {
                self.instances[i].timers.retain(|k| *k != key);
            }
            let claim = |s: &Self, i: usize| s.instances[i].instance.claim.clone();
            match timer {
                Timer::Trigger(i) => {
                    self.triggered(i, at, &mut events);
                    continue;
                }
                Timer::Replay(ref pool, k) => {
                    self.replayed_reclaim(pool, k, at, &mut events);
                    continue;
                }
                Timer::Fault(i) => {
                    events.push(self.fault(i, at));
                    continue;
                }
                Timer::Rebooted(i) => {
                    events.push(self.rebooted(i, at));
                    continue;
                }
                Timer::Ready(i) => self.schedule_fault(i, at),
                _ => {}
            }
            events.push(match timer {
                Timer::Trigger(_) | Timer::Replay(..) | Timer::Fault(_) | Timer::Rebooted(_) => {
                    unreachable!("handled above")
                }
                Timer::Running(i) => {
                    self.instances[i].instance.state = InstanceState::Running;
                    self.join_pool(i);
                    CloudEvent::Running {
                        claim: claim(self, i),
                        at,
                    }
                }
                Timer::Registered(i) => CloudEvent::Registered {
                    claim: claim(self, i),
                    at,
                },
                Timer::Ready(i) => CloudEvent::Ready {
                    claim: claim(self, i),
                    at,
                },
                Timer::Rebalance(i) => CloudEvent::Notice {
                    notice: Notice::Rebalance {
                        claim: claim(self, i),
                    },
                    at,
                },
                Timer::Notice(i, deadline) => CloudEvent::Notice {
                    notice: Notice::SpotInterruption {
                        claim: claim(self, i),
                        deadline,
                    },
                    at,
                },
                Timer::Reclaim(i) => {
                    // Boot milestones still ahead never come.
                    self.leave_pool(i);
                    self.cancel_timers(i);
                    let sim = &mut self.instances[i];
                    sim.instance.state = InstanceState::Terminated;
                    sim.billed_until = Some(at);
                    self.settle(i);
                    CloudEvent::Terminated {
                        claim: claim(self, i),
                        at,
                        cause: TerminationCause::SpotReclaimed,
                    }
                }
                Timer::ShutDown(i) => {
                    self.instances[i].instance.state = InstanceState::Terminated;
                    CloudEvent::Terminated {
                        claim: claim(self, i),
                        at,
                        cause: TerminationCause::Requested,
                    }
                }
                Timer::Price(offering, price_per_hour) => CloudEvent::PriceChanged {
                    offering,
                    price_per_hour,
                    at,
                },
            });
        }
        events
    }

    /// What every instance has cost up to `now`, USD: from launch until
    /// termination was requested or the instance was reclaimed (or `now`),
    /// at its pool's price as it changed.
    pub fn cost_so_far(&self, now: Time) -> f64 {
        self.instances.iter().map(|s| self.cost(s, now)).sum()
    }

    /// The same as [`SimulatedCloud::cost_so_far`] up to the order of the
    /// floating-point additions, in time proportional to the instances still
    /// billed rather than to every instance ever launched (for time series
    /// sampled all along a long run). For a `now` before the latest time the
    /// cloud has seen, it is `cost_so_far(now)`.
    pub fn cost_so_far_running(&self, now: Time) -> f64 {
        if now < self.now {
            return self.cost_so_far(now);
        }
        self.settled_cost
            + self
                .billed
                .iter()
                .map(|&i| self.cost(&self.instances[i], now))
                .sum::<f64>()
    }

    /// Billing of instance `i` has ended: its cost is final.
    fn settle(&mut self, i: usize) {
        if self.billed.remove(&i) {
            let end = self.instances[i].billed_until.unwrap_or(self.now);
            self.settled_cost += self.cost(&self.instances[i], end);
        }
    }

    /// What the instance of `claim` has cost up to `now`, USD.
    pub fn cost_of(&self, claim: &str, now: Time) -> Option<f64> {
        let &i = self.by_claim.get(claim)?;
        Some(self.cost(&self.instances[i], now))
    }

    fn cost(&self, sim: &SimInstance, now: Time) -> f64 {
        let key = &sim.instance.offering;
        let start = sim.instance.launched_at;
        let end = sim.billed_until.map_or(now, |b| b.min(now));
        if end <= start {
            return 0.0;
        }
        let changes = self.prices.get(key).map(Vec::as_slice).unwrap_or(&[]);
        let mut price = self
            .price(key, start)
            .unwrap_or(sim.instance.price_per_hour);
        let mut t = start;
        let mut total = 0.0;
        for &(at, p) in changes.iter().filter(|(at, _)| *at > start && *at < end) {
            total += price * hours_between(t, at);
            t = at;
            price = p;
        }
        total + price * hours_between(t, end)
    }

    /// Time never goes backwards: an earlier `now` is taken as the latest
    /// time seen.
    fn observe(&mut self, now: Time) -> Time {
        self.now = self.now.max(now);
        self.now
    }

    fn schedule(&mut self, at: Time, timer: Timer) {
        let key = (at, self.next_seq);
        self.next_seq += 1;
        if let Some(i) = timer.instance() {
            self.instances[i].timers.push(key);
        }
        self.timers.insert(key, timer);
    }

    fn cancel_timers(&mut self, i: usize) {
        for key in std::mem::take(&mut self.instances[i].timers) {
            self.timers.remove(&key);
        }
    }

    fn capacity_fails(&mut self, key: &OfferingKey) -> bool {
        let cap = &self.config.capacity;
        if cap.exhausted.contains(key) {
            return true;
        }
        let p = cap
            .failure_probability
            .get(key)
            .copied()
            .unwrap_or(cap.default_failure_probability);
        if p <= 0.0 {
            return false;
        }
        let seed = self.config.seed;
        let rng = self
            .capacity_draws
            .entry(key.clone())
            .or_insert_with(|| stream(seed, &["capacity", &interruptions::pool_name(key)]));
        rng.random::<f64>() < p
    }

    /// Running, registered and ready times of a launch at `now`, jittered by
    /// the claim's own stream.
    fn boot_times(&self, claim: &str, instance_type: &str, now: Time) -> (Time, Time, Time) {
        let family = self.family_of(instance_type);
        let latency = &self.config.latency;
        let profile = latency.profile(&family);
        let mut rng = stream(self.config.seed, &["boot", claim]);
        let mut phase = |d: Duration| {
            let factor = 1.0 + latency.jitter * (2.0 * rng.random::<f64>() - 1.0);
            TimeDelta::milliseconds((d.as_secs_f64() * factor * 1000.0).round() as i64)
        };
        let running = now + phase(profile.running);
        let registered = running + phase(profile.registered);
        let ready = registered + phase(profile.ready);
        (running, registered, ready)
    }

    /// The instance family of a type (the catalog's, else its name's
    /// prefix), which names its boot profile.
    fn family_of(&self, instance_type: &str) -> String {
        match self.catalog.instance_type(instance_type) {
            Some(it) => it.family.clone(),
            None => instance_type
                .split('.')
                .next()
                .unwrap_or(instance_type)
                .to_string(),
        }
    }

    /// When `claim`, running in `key` from `running`, gets its interruption
    /// notice: the first of the pool's reclaim events from then on that
    /// takes it.
    fn notice_time(
        &mut self,
        key: &OfferingKey,
        rate: f64,
        claim: &str,
        running: Time,
    ) -> Option<Time> {
        let seed = self.config.seed;
        let im = &self.config.interruptions;
        let share = im.reclaim_share;
        let process = self.reclaims.entry(key.clone()).or_insert_with(|| {
            PoolProcess::new(seed, key, rate / share, &im.storms, self.config.epoch)
        });
        let mut i = process.first_index_at_or_after(running);
        loop {
            let at = process.event(i)?;
            if takes(seed, key, i, claim, share) {
                return Some(at);
            }
            i += 1;
        }
    }
}

/// The calibrated market and trace replay (see `docs/simulated-cloud.md`).
impl SimulatedCloud {
    /// Whether the market refuses a launch in `key` at `now`: the pool is
    /// closed (after a reclaim, or by a replayed trace), or the launch's
    /// obtainability draw fails.
    fn market_refuses(&mut self, key: &OfferingKey, pool: &Pool, now: Time) -> bool {
        if let Some(r) = self.replayed.get(key) {
            return r.is_closed(now);
        }
        if self.closed_until.get(key).is_some_and(|until| now < *until) {
            return true;
        }
        let Some(market) = &pool.market else {
            return false;
        };
        if market.obtainability >= 1.0 {
            return false;
        }
        let attempt = self.attempts.entry(key.clone()).or_insert(0);
        *attempt += 1;
        let n = attempt.to_string();
        let u: f64 = stream(
            self.config.seed,
            &["obtain", &interruptions::pool_name(key), &n],
        )
        .random();
        u >= market.obtainability
    }

    /// A unit exponential named by the instance's pool, launch number and
    /// draw.
    fn unit_exp(&self, i: usize, what: &str) -> f64 {
        let sim = &self.instances[i];
        let pool = interruptions::pool_name(&sim.instance.offering);
        let names = [
            what,
            &pool,
            &sim.ordinal.to_string(),
            &sim.draws.to_string(),
        ];
        let u: f64 = stream(self.config.seed, &names).random();
        -(1.0 - u).ln()
    }

    /// Schedules instance `i`'s next reclaim time from `from` (and the
    /// rebalance recommendation before it).
    fn schedule_trigger(
        &mut self,
        i: usize,
        market: &PoolMarket,
        segments: &[(Time, f64)],
        from: Time,
    ) {
        let e = self.unit_exp(i, "life");
        let running = self.instances[i].running_at;
        if let Some(at) = reclaim_time(market, segments, running, from, e) {
            if let Some(lead) = self.config.interruptions.rebalance_lead {
                let rebalance = (at - delta(lead)).max(from);
                self.schedule(rebalance, Timer::Rebalance(i));
            }
            self.schedule(at, Timer::Trigger(i));
        }
    }

    fn join_pool(&mut self, i: usize) {
        let key = &self.instances[i].instance.offering;
        let joins = self.pools.get(key).is_some_and(|p| p.market.is_some())
            || self.replayed.contains_key(key);
        if joins && !self.instances[i].noticed {
            self.members.entry(key.clone()).or_default().insert(i);
        }
    }

    fn leave_pool(&mut self, i: usize) {
        if let Some(m) = self.members.get_mut(&self.instances[i].instance.offering) {
            m.remove(&i);
        }
    }

    /// Instance `i`'s reclaim time came. With `n` running instances in the
    /// pool and co-reclaim probability `q`, it starts a reclaim event with
    /// probability `1 / (1 + q (n - 1))` (so that each instance's own rate
    /// stays the fitted hazard when others' events can take it too);
    /// otherwise it draws again from its current age.
    fn triggered(&mut self, i: usize, at: Time, events: &mut Vec<CloudEvent>) {
        let key = self.instances[i].instance.offering.clone();
        let Some(pool) = self.pools.get(&key).cloned() else {
            return;
        };
        let Some(market) = pool.market.as_ref() else {
            return;
        };
        let q = market.co_reclaim_probability;
        let n = self.members.get(&key).map_or(1, BTreeSet::len).max(1);
        let accept = 1.0 / (1.0 + q * (n as f64 - 1.0));
        let u = 1.0 - (-self.unit_exp(i, "accept")).exp();
        self.instances[i].draws += 1;
        if u >= accept {
            self.schedule_trigger(i, market, &pool.segments, at);
            return;
        }
        let event = self.next_reclaim_event(&key);
        self.notify(i, at, events);
        let others: Vec<usize> = self
            .members
            .get(&key)
            .map(|m| m.iter().copied().filter(|j| *j != i).collect())
            .unwrap_or_default();
        for j in others {
            if self.draw(&key, "co", event, j) < q {
                self.notify(j, at, events);
            }
        }
        let u = |s: &Self, what: &str| s.draw(&key, what, event, usize::MAX);
        let hours_closed =
            market
                .closure
                .draw_hours(u(self, "close"), u(self, "close-1"), u(self, "close-2"));
        if hours_closed > 0.0 {
            let until = at + delta(self.config.interruptions.notice) + hours(hours_closed);
            let entry = self.closed_until.entry(key).or_insert(until);
            *entry = (*entry).max(until);
        }
    }

    /// Replayed reclaim `k` of `pool`: each running instance goes with the
    /// share of the trace's pool that the drop took.
    fn replayed_reclaim(
        &mut self,
        pool: &OfferingKey,
        k: usize,
        at: Time,
        events: &mut Vec<CloudEvent>,
    ) {
        let Some(share) = self
            .replayed
            .get(pool)
            .and_then(|r| r.reclaims.get(k))
            .map(|r| r.1)
        else {
            return;
        };
        let members: Vec<usize> = self
            .members
            .get(pool)
            .map(|m| m.iter().copied().collect())
            .unwrap_or_default();
        for j in members {
            if share >= 1.0 || self.draw(pool, "replay", k as u64, j) < share {
                self.notify(j, at, events);
            }
        }
    }

    fn next_reclaim_event(&mut self, key: &OfferingKey) -> u64 {
        let n = self.reclaim_events.entry(key.clone()).or_insert(0);
        *n += 1;
        *n - 1
    }

    /// A uniform named by the pool, the event and the instance's claim.
    fn draw(&self, key: &OfferingKey, what: &str, event: u64, i: usize) -> f64 {
        let claim = self
            .instances
            .get(i)
            .map_or("", |s| s.instance.claim.as_str());
        let names = [
            what,
            &interruptions::pool_name(key),
            &event.to_string(),
            claim,
        ];
        stream(self.config.seed, &names).random()
    }

    /// Sends instance `i` its interruption notice at `at`; it is reclaimed
    /// at the deadline.
    fn notify(&mut self, i: usize, at: Time, events: &mut Vec<CloudEvent>) {
        if self.instances[i].noticed || !self.instances[i].instance.state.is_alive() {
            return;
        }
        self.instances[i].noticed = true;
        self.leave_pool(i);
        let pending: Vec<TimerKey> = self.instances[i]
            .timers
            .iter()
            .copied()
            .filter(|k| {
                matches!(
                    self.timers.get(k),
                    Some(Timer::Trigger(_) | Timer::Rebalance(_))
                )
            })
            .collect();
        for k in pending {
            self.timers.remove(&k);
            self.instances[i].timers.retain(|x| *x != k);
        }
        let deadline = at + delta(self.config.interruptions.notice);
        self.schedule(deadline, Timer::Reclaim(i));
        events.push(CloudEvent::Notice {
            notice: Notice::SpotInterruption {
                claim: self.instances[i].instance.claim.clone(),
                deadline,
            },
            at,
        });
    }
}

/// A configuration duration as a time delta (saturating).
fn delta(d: Duration) -> TimeDelta {
    TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX)
}

fn poisoned() -> Error {
    Error::Other("simulated cloud state poisoned by a panic".to_string())
}

/// The provider face of the simulated cloud, for code written against
/// [`CloudProvider`]: every future is ready on its first poll.
impl CloudProvider for Mutex<SimulatedCloud> {
    /// Launches into the pool's cluster placement group of its zone when
    /// the template asks for one (EFA interfaces, or a gang that must
    /// share one network block), as the EC2 provider does.
    async fn launch(
        &self,
        claim: &ClaimRequest,
        template: &NodeTemplate,
        now: Time,
    ) -> Result<Instance> {
        let mut cloud = self.lock().map_err(|_| poisoned())?;
        if crate::cloud::in_placement_group(&template.labels) {
            cloud.launch_placed(claim, &placement_group_of(claim), now)
        } else {
            cloud.launch(claim, now)
        }
    }

    async fn terminate(&self, claim: &str, now: Time) -> Result<Instance> {
        self.lock().map_err(|_| poisoned())?.terminate(claim, now)
    }

    async fn reboot(&self, claim: &str, now: Time) -> Result<Instance> {
        self.lock().map_err(|_| poisoned())?.reboot(claim, now)
    }

    async fn describe(&self, claim: &str) -> Result<Option<Instance>> {
        Ok(self.lock().map_err(|_| poisoned())?.describe(claim))
    }

    async fn instances(&self) -> Result<Vec<Instance>> {
        Ok(self.lock().map_err(|_| poisoned())?.instances())
    }

    async fn network_nodes(&self, _claim: &str, instance: &Instance) -> Result<Vec<String>> {
        Ok(self
            .lock()
            .map_err(|_| poisoned())?
            .network_nodes(&instance.provider_id))
    }
}

/// The simulated cluster placement group of a claim's pool in its zone (as
/// the EC2 provider names one per pool and zone).
pub fn placement_group_of(claim: &ClaimRequest) -> String {
    format!("{}-{}", claim.nodepool, claim.offering.zone)
}

/// Runs a future that completes without waiting, such as any future of the
/// simulated provider, and returns its output. The simulator's executor: no
/// runtime, no threads, no clock.
///
/// # Panics
/// If the future is not ready on its first poll (it waits on something
/// real, which a simulation must not do).
pub fn block_on_ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    match future.as_mut().poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("block_on_ready: the future is waiting on something real"),
    }
}
