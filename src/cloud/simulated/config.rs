//! What a simulated cloud is told: boot latencies per instance family,
//! capacity failures, the spot interruption process, price changes. Plain
//! data with documented defaults (see `docs/simulated-cloud.md`) and one
//! validation pass against the catalog.

use super::market::TraceReplay;
use crate::catalog::{CapacityType, Catalog, MarketModel, PoolMarket};
use crate::core::{OfferingKey, Time};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Everything a [`SimulatedCloud`](super::SimulatedCloud) needs besides the
/// catalog. [`SimulatedCloudConfig::new`] gives the documented defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulatedCloudConfig {
    /// Seed of every random draw (boot jitter, capacity failures,
    /// interruptions).
    pub seed: u64,
    /// The region whose offerings the cloud sells.
    pub region: String,
    /// Origin of every pool's interruption process: the start of the
    /// simulation. Strategies compared on the same seed must use the same
    /// epoch to see the same interruptions.
    pub epoch: Time,
    /// Boot latencies.
    pub latency: LatencyModel,
    /// Which launches fail for lack of capacity.
    pub capacity: CapacityModel,
    /// Spot interruptions.
    pub interruptions: InterruptionModel,
    /// Price changes over time, in any order.
    pub price_changes: Vec<PriceChange>,
    /// Node faults (none by default).
    pub faults: FaultModel,
}

impl SimulatedCloudConfig {
    /// Defaults for a region: default latencies, no capacity failures,
    /// catalog interruption rates, no storms, catalog prices throughout.
    pub fn new(seed: u64, region: impl Into<String>, epoch: Time) -> SimulatedCloudConfig {
        SimulatedCloudConfig {
            seed,
            region: region.into(),
            epoch,
            latency: LatencyModel::default(),
            capacity: CapacityModel::default(),
            interruptions: InterruptionModel::default(),
            price_changes: Vec::new(),
            faults: FaultModel::default(),
        }
    }

    /// Checks the configuration against the catalog.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first field that is out of range, or a
    /// price change aimed at something the region does not sell.
    pub fn validate(&self, catalog: &Catalog) -> Result<(), ConfigError> {
        let invalid = |field: &str, message: String| {
            Err(ConfigError {
                field: field.to_string(),
                message,
            })
        };
        if catalog.offerings_in(&self.region).next().is_none() {
            return invalid("region", format!("no offerings in {}", self.region));
        }
        let j = self.latency.jitter;
        if !(0.0..1.0).contains(&j) {
            return invalid("latency.jitter", format!("{j} is not in [0, 1)"));
        }
        let probabilities = std::iter::once(("default", self.capacity.default_failure_probability))
            .chain(
                self.capacity
                    .failure_probability
                    .values()
                    .map(|p| ("pool", *p)),
            );
        for (which, p) in probabilities {
            if !(0.0..=1.0).contains(&p) {
                return invalid(
                    "capacity.failure_probability",
                    format!("{which} probability {p} is not in [0, 1]"),
                );
            }
        }
        let im = &self.interruptions;
        if !(im.rate_multiplier.is_finite() && im.rate_multiplier >= 0.0) {
            return invalid(
                "interruptions.rate_multiplier",
                format!("{} is not a finite non-negative number", im.rate_multiplier),
            );
        }
        if let Some((k, r)) = im
            .rate_overrides
            .iter()
            .find(|(_, r)| !(r.is_finite() && **r >= 0.0))
        {
            return invalid(
                "interruptions.rate_overrides",
                format!("rate {r} for {k} is not a finite non-negative number"),
            );
        }
        if !(im.reclaim_share > 0.0 && im.reclaim_share <= 1.0) {
            return invalid(
                "interruptions.reclaim_share",
                format!("{} is not in (0, 1]", im.reclaim_share),
            );
        }
        let t = &im.tuning;
        let tuned = [
            ("co_reclaim_probability", t.co_reclaim_probability),
            ("closure_probability", t.closure_probability),
            ("obtainability", t.obtainability),
        ];
        for (field, p) in tuned {
            if let Some(p) = p.filter(|p| !(0.0..=1.0).contains(p)) {
                return invalid(
                    &format!("interruptions.tuning.{field}"),
                    format!("{p} is not in [0, 1]"),
                );
            }
        }
        for (i, r) in im.replays.iter().enumerate() {
            for pool in &r.pools {
                let sold = catalog.offerings_in(&self.region).any(|o| {
                    o.capacity_type == CapacityType::Spot
                        && o.instance_type == pool.instance_type
                        && o.zone_id == pool.zone
                });
                if !sold || pool.capacity_type != CapacityType::Spot {
                    return invalid(
                        "interruptions.replays",
                        format!(
                            "replay {i} ({}): {pool} is not a spot pool sold in {}",
                            r.trace.file, self.region
                        ),
                    );
                }
            }
        }
        for (i, s) in im.storms.iter().enumerate() {
            if s.until <= s.from || !(s.multiplier.is_finite() && s.multiplier >= 0.0) {
                return invalid(
                    "interruptions.storms",
                    format!(
                        "storm {i} needs from < until and a finite non-negative multiplier (got {} .. {}, x{})",
                        s.from, s.until, s.multiplier
                    ),
                );
            }
        }
        let f = &self.faults;
        if !(f.rate_per_gpu_hour.is_finite() && f.rate_per_gpu_hour >= 0.0) {
            return invalid(
                "faults.rate_per_gpu_hour",
                format!(
                    "{} is not a finite non-negative number",
                    f.rate_per_gpu_hour
                ),
            );
        }
        if !(0.0..=1.0).contains(&f.reboot_fixes) {
            return invalid(
                "faults.reboot_fixes",
                format!("{} is not in [0, 1]", f.reboot_fixes),
            );
        }
        for (i, c) in self.price_changes.iter().enumerate() {
            if !(c.price_per_hour.is_finite() && c.price_per_hour >= 0.0) {
                return invalid(
                    "price_changes",
                    format!("change {i}: price {} is not valid", c.price_per_hour),
                );
            }
            let sold = catalog.offerings_in(&self.region).any(|o| {
                c.target
                    .matches(&o.instance_type, &o.zone_id, o.capacity_type)
            });
            if !sold {
                return invalid(
                    "price_changes",
                    format!("change {i}: {} is not sold in {}", c.target, self.region),
                );
            }
        }
        Ok(())
    }
}

/// A configuration value out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid simulated cloud configuration: {field}: {message}")]
pub struct ConfigError {
    /// The field, e.g. `interruptions.reclaim_share`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// How long one boot takes, phase by phase; each phase starts when the
/// previous one ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootProfile {
    /// Launch accepted to instance `running`.
    pub running: Duration,
    /// `running` to the node registered with the API server (AMI boot,
    /// kubelet start).
    pub registered: Duration,
    /// Registered to Ready with accelerators advertised (drivers, device
    /// plugin; CNI only for types without accelerators).
    pub ready: Duration,
}

impl BootProfile {
    const fn secs(running: u64, registered: u64, ready: u64) -> BootProfile {
        BootProfile {
            running: Duration::from_secs(running),
            registered: Duration::from_secs(registered),
            ready: Duration::from_secs(ready),
        }
    }

    /// Types without accelerators: registered after 1.5 min, Ready 10 s
    /// later.
    pub const GENERAL: BootProfile = BootProfile::secs(45, 45, 10);
    /// Single-node NVIDIA families (g4dn, g5, g5g, g6, g6e, p3, p3dn):
    /// registered after 3 min, device plugin ready 1 min later.
    pub const GPU: BootProfile = BootProfile::secs(90, 90, 60);
    /// Large training families (p4d, p4de, p5, p5e, p5en, p6-b200, dl1):
    /// registered after 7 min (large AMI, EFA, fabric manager), device
    /// plugin ready 2 min later.
    pub const LARGE_GPU: BootProfile = BootProfile::secs(180, 240, 120);
    /// Neuron families (inf1, inf2, trn1, trn1n, trn2): registered after
    /// 5 min, device plugin ready 1 min later.
    pub const NEURON: BootProfile = BootProfile::secs(120, 180, 60);
}

/// Boot and shutdown latencies, per instance family.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyModel {
    /// Profile per family (`g5`, `p5e`, ...).
    pub families: BTreeMap<String, BootProfile>,
    /// Profile of families not listed.
    pub default: BootProfile,
    /// Every phase is scaled by a factor drawn uniformly from
    /// `[1 - jitter, 1 + jitter]`; in `[0, 1)`. Default 0.2.
    pub jitter: f64,
    /// Termination requested to `terminated`. Default 30 s.
    pub shutdown: Duration,
}

impl LatencyModel {
    /// The profile of an instance family.
    pub fn profile(&self, family: &str) -> BootProfile {
        self.families.get(family).copied().unwrap_or(self.default)
    }
}

impl Default for LatencyModel {
    fn default() -> LatencyModel {
        let mut families = BTreeMap::new();
        let groups: [(&[&str], BootProfile); 3] = [
            (
                &["g4dn", "g5", "g5g", "g6", "g6e", "p3", "p3dn"],
                BootProfile::GPU,
            ),
            (
                &["p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "dl1"],
                BootProfile::LARGE_GPU,
            ),
            (
                &["inf1", "inf2", "trn1", "trn1n", "trn2"],
                BootProfile::NEURON,
            ),
        ];
        for (names, profile) in groups {
            for name in names {
                families.insert(name.to_string(), profile);
            }
        }
        LatencyModel {
            families,
            default: BootProfile::GENERAL,
            jitter: 0.2,
            shutdown: Duration::from_secs(30),
        }
    }
}

/// Faults per GPU-hour in Meta's Llama 3 405B pre-training: 419 unexpected
/// interruptions in 54 days on 16,384 H100 GPUs (Llama 3 paper, table 5),
/// about one a year per 8-GPU node. `docs/simulated-cloud.md` says what was
/// checked and what is assumed.
pub const LLAMA3_FAULTS_PER_GPU_HOUR: f64 = 419.0 / (16_384.0 * 54.0 * 24.0);

/// The share of faults a reboot fixes by default: an assumption between
/// the share of Meta's Llama 3 interruptions with no faulty hardware behind
/// them (software bugs, NCCL watchdog timeouts, dependencies: 15%) and the
/// recoverable GPU faults Crusoe reported for an H200 fleet (19.5%).
pub const DEFAULT_REBOOT_FIXES: f64 = 0.2;

/// Node faults: an instance with GPUs fails after an exponential time of
/// rate `rate_per_gpu_hour` x its GPUs from when it is Ready (and again
/// from when a reboot fixed it); a reboot takes `reboot_duration` and fixes
/// the fault with probability `reboot_fixes` (drawn when the fault
/// happens). Default: no faults.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultModel {
    /// Faults per GPU-hour of a Ready instance; 0 (default): none.
    pub rate_per_gpu_hour: f64,
    /// The share of faults a reboot fixes, in `[0, 1]`.
    pub reboot_fixes: f64,
    /// How long a reboot keeps the instance away; `None` (default): its
    /// family's boot from `running` to Ready (registered and Ready phases
    /// of [`LatencyModel`], without jitter), 6 minutes for the large
    /// training families.
    pub reboot_duration: Option<Duration>,
}

impl Default for FaultModel {
    fn default() -> FaultModel {
        FaultModel {
            rate_per_gpu_hour: 0.0,
            reboot_fixes: DEFAULT_REBOOT_FIXES,
            reboot_duration: None,
        }
    }
}

/// Which launches fail with insufficient capacity. Default: none.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CapacityModel {
    /// Pools where every launch fails.
    pub exhausted: BTreeSet<OfferingKey>,
    /// Probability that one launch in the pool fails, per pool.
    pub failure_probability: BTreeMap<OfferingKey, f64>,
    /// Probability for pools not in `failure_probability`. Default 0.
    pub default_failure_probability: f64,
}

/// The spot interruption process (see `docs/simulated-cloud.md`).
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptionModel {
    /// Scales every pool's hourly rate. Default 1.
    pub rate_multiplier: f64,
    /// Hourly rate per pool, replacing the catalog's
    /// `interruption_rate_per_hour()` (still scaled by `rate_multiplier`
    /// and storms). On-demand pools are never interrupted, whatever this
    /// says.
    pub rate_overrides: BTreeMap<OfferingKey, f64>,
    /// Periods of elevated interruption rates.
    pub storms: Vec<Storm>,
    /// Share of a pool's running spot instances that one reclaim event
    /// takes, in `(0, 1]`. Default 1: every reclaim takes the whole pool,
    /// so that strategies see exactly the same reclaims whatever they name
    /// their claims. Below 1, reclaim events come `1 / reclaim_share` times
    /// as often and each instance is hit independently with this
    /// probability (a draw keyed by the claim name); an instance's rate
    /// stays the same.
    pub reclaim_share: f64,
    /// Notice to reclaim. Default 120 s, as EC2.
    pub notice: Duration,
    /// If set, a rebalance recommendation this long before the interruption
    /// notice (not before the instance is running). Default none.
    pub rebalance_lead: Option<Duration>,
    /// Which market draws the reclaims: `None` (default) the catalog's
    /// model (calibrated unless the catalog was built otherwise);
    /// [`MarketModel::Advisor`] the old constant-rate pool process, where
    /// `reclaim_share` applies.
    pub market: Option<MarketModel>,
    /// Adjustments of the calibrated market in every spot pool.
    pub tuning: MarketTuning,
    /// Traces replayed onto pools (their reclaims and closures replace the
    /// model's in those pools).
    pub replays: Vec<TraceReplay>,
}

/// Scenario adjustments of the calibrated market, applied to every spot
/// pool after the catalog's mapping (the hazard is also scaled by
/// [`InterruptionModel::rate_multiplier`]). `None` keeps the model's value.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MarketTuning {
    /// Probability that a reclaim takes each other running instance of the
    /// pool too.
    pub co_reclaim_probability: Option<f64>,
    /// Probability that a reclaim closes the pool.
    pub closure_probability: Option<f64>,
    /// Median closure.
    pub closure_median: Option<Duration>,
    /// Probability that a launch succeeds outside closures.
    pub obtainability: Option<f64>,
}

impl MarketTuning {
    /// `market` with these adjustments.
    pub fn apply(&self, mut market: PoolMarket) -> PoolMarket {
        if let Some(q) = self.co_reclaim_probability {
            market.co_reclaim_probability = q;
        }
        if let Some(p) = self.closure_probability {
            market.closure.probability = p;
        }
        if let Some(d) = self.closure_median {
            market.closure.median_hours = d.as_secs_f64() / 3600.0;
        }
        if let Some(o) = self.obtainability {
            market.obtainability = o;
        }
        market
    }
}

impl Default for InterruptionModel {
    fn default() -> InterruptionModel {
        InterruptionModel {
            rate_multiplier: 1.0,
            rate_overrides: BTreeMap::new(),
            storms: Vec::new(),
            reclaim_share: 1.0,
            notice: Duration::from_secs(120),
            rebalance_lead: None,
            market: None,
            tuning: MarketTuning::default(),
            replays: Vec::new(),
        }
    }
}

/// A period in which interruption rates are multiplied. Overlapping storms
/// multiply.
#[derive(Debug, Clone, PartialEq)]
pub struct Storm {
    /// Start (inclusive).
    pub from: Time,
    /// End (exclusive).
    pub until: Time,
    /// Factor on the rate of the pools it covers.
    pub multiplier: f64,
    /// Instance types it covers; empty for all.
    pub instance_types: Vec<String>,
    /// Zone IDs it covers; empty for all.
    pub zones: Vec<String>,
}

impl Storm {
    /// A storm over every spot pool.
    pub fn everywhere(from: Time, until: Time, multiplier: f64) -> Storm {
        Storm {
            from,
            until,
            multiplier,
            instance_types: Vec::new(),
            zones: Vec::new(),
        }
    }

    /// Whether the storm covers the pool.
    pub fn covers(&self, pool: &OfferingKey) -> bool {
        (self.instance_types.is_empty() || self.instance_types.contains(&pool.instance_type))
            && (self.zones.is_empty() || self.zones.contains(&pool.zone))
    }
}

/// A new price from a point in time on.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceChange {
    /// When it takes effect.
    pub at: Time,
    /// Which offerings.
    pub target: PriceTarget,
    /// USD per hour from `at` on.
    pub price_per_hour: f64,
}

/// The offerings a [`PriceChange`] applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PriceTarget {
    /// One pool.
    Offering(OfferingKey),
    /// Every zone of an instance type, for one capacity type.
    InstanceType {
        /// Instance type.
        instance_type: String,
        /// Spot or on-demand.
        capacity_type: CapacityType,
    },
}

impl PriceTarget {
    /// Whether the target covers the pool `(instance_type, zone, capacity_type)`.
    pub fn matches(&self, instance_type: &str, zone: &str, capacity_type: CapacityType) -> bool {
        match self {
            PriceTarget::Offering(k) => {
                k.instance_type == instance_type
                    && k.zone == zone
                    && k.capacity_type == capacity_type
            }
            PriceTarget::InstanceType {
                instance_type: t,
                capacity_type: c,
            } => t == instance_type && *c == capacity_type,
        }
    }
}

impl std::fmt::Display for PriceTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PriceTarget::Offering(k) => write!(f, "{k}"),
            PriceTarget::InstanceType {
                instance_type,
                capacity_type,
            } => write!(f, "{instance_type} {capacity_type} in every zone"),
        }
    }
}
