//! Interruption rates learned per spot pool (one instance type in one zone,
//! an [`OfferingKey`]), starting from the calibrated market's mean rate for
//! the pool and moving towards what our own instances experience. Owns the
//! arithmetic and the evidence; it does not decide when a notice counts (the
//! interruption handler does) nor how the planner prices risk
//! (`docs/planner.md`).
//!
//! # The model (`docs/lifecycle-timing.md`)
//!
//! Interruptions of one spot pool arrive at an unknown mean rate `λ` per
//! instance-hour. The prior on `λ` is a Gamma distribution with shape
//! `α₀ = r₀ · H` and rate `β₀ = H`, where `r₀` is the pool's prior mean rate
//! ([`prior_rate`]: the offering's
//! [`Offering::interruption_rate_per_hour`](crate::catalog::Offering::interruption_rate_per_hour),
//! the calibrated market's mean over a lifetime, or the advisor bucket's
//! under the advisor model) and `H` is the prior's weight in pseudo
//! instance-hours ([`DEFAULT_PRIOR_HOURS`] = 720, one instance for one
//! month). After `k` interruptions over `T` instance-hours of exposure, the
//! posterior is Gamma(`α₀ + k`, `β₀ + T`):
//!
//! ```text
//! rate  = (α₀ + k) / (β₀ + T)          posterior mean
//! sd    = √(α₀ + k) / (β₀ + T)
//! upper = rate + 2 · sd                 pessimistic bound (spot-to-spot guard)
//! ```
//!
//! The Gamma prior is conjugate to Poisson counts, so learning is two sums
//! per pool, deterministic and order-independent. On-demand capacity is not
//! interrupted: its rate is always 0 and observations of it are ignored.
//! The core (`decide`) hands the posterior means to the planner, which
//! scales the market's age-dependent hazard by the posterior mean over the
//! market's mean rate (`plan::candidates`). Exposure counts the same at any age, so a fleet
//! whose nodes end young (where the hazard is highest) learns a level above
//! the prior that the age curve already carries: a known bias, noted in
//! `docs/lifecycle-timing.md`.

use super::{ManagedNode, OfferingKey, Time};
use crate::catalog::{CapacityType, Catalog, InterruptionBucket};
use std::collections::BTreeMap;

/// Default weight of the advisor prior, in pseudo instance-hours: one
/// instance for one month (720 h).
pub const DEFAULT_PRIOR_HOURS: f64 = 720.0;

/// Standard deviations above the mean in [`RatePosterior::upper_bound`].
pub const UPPER_BOUND_SDS: f64 = 2.0;

/// Errors of this module.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The prior weight is not a positive, finite number of hours. Not
    /// retryable: a configuration error.
    #[error("interruption estimator: prior weight {0} h must be a positive, finite number of instance-hours")]
    PriorHours(f64),
}

/// This module's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What we saw of one spot pool.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Evidence {
    /// Instance-hours our instances ran in the pool.
    pub exposure_hours: f64,
    /// Spot interruption notices our instances received there.
    pub interruptions: u64,
}

/// A Gamma posterior over an interruption rate (per instance-hour).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RatePosterior {
    /// Shape: prior pseudo-interruptions plus interruptions seen.
    pub alpha: f64,
    /// Rate: prior pseudo-hours plus exposure hours.
    pub beta: f64,
}

impl RatePosterior {
    /// Posterior mean `α / β`: the rate the planner should charge.
    pub fn mean(&self) -> f64 {
        self.alpha / self.beta
    }

    /// Posterior standard deviation `√α / β`.
    pub fn sd(&self) -> f64 {
        self.alpha.sqrt() / self.beta
    }

    /// `mean + 2 sd`: a rate the pool is unlikely to exceed, for decisions
    /// that should not gamble on a pool we know little about (moving work
    /// from one spot pool to another).
    pub fn upper_bound(&self) -> f64 {
        self.mean() + UPPER_BOUND_SDS * self.sd()
    }
}

/// Learns interruption rates per spot pool; see the module documentation.
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptionEstimator {
    prior_hours: f64,
    evidence: BTreeMap<OfferingKey, Evidence>,
    /// The spot nodes as [`InterruptionEstimator::observe_nodes`] last read
    /// them.
    exposed: Exposed,
}

impl Default for InterruptionEstimator {
    fn default() -> Self {
        InterruptionEstimator {
            prior_hours: DEFAULT_PRIOR_HOURS,
            evidence: BTreeMap::new(),
            exposed: Exposed::default(),
        }
    }
}

/// The spot nodes of one [`World::nodes_revision`](super::World::nodes_revision),
/// in the nodes' order: each one's pool (an index into `pools`) and launch.
/// Comparing every node's pool with the last was most of the exposure's
/// cost, on every round over every node.
#[derive(Debug, Clone, Default, PartialEq)]
struct Exposed {
    revision: u64,
    pools: Vec<OfferingKey>,
    nodes: Vec<(usize, Time)>,
}

impl Exposed {
    /// Read from `nodes`. Nodes of one pool often follow each other
    /// (launched together), so the last pool is compared before the pool's
    /// index is looked up.
    fn of(nodes: &[ManagedNode], revision: u64) -> Exposed {
        let mut pools: Vec<OfferingKey> = Vec::new();
        let mut index: super::FastMap<&OfferingKey, usize> = Default::default();
        let mut last = usize::MAX;
        let mut spot = Vec::new();
        for n in nodes {
            let key = &n.offering;
            if key.capacity_type != CapacityType::Spot {
                continue;
            }
            if pools.get(last).is_none_or(|k| k != key) {
                last = *index.entry(key).or_insert_with(|| {
                    pools.push(key.clone());
                    pools.len() - 1
                });
            }
            spot.push((last, n.launched_at));
        }
        Exposed {
            revision,
            pools,
            nodes: spot,
        }
    }
}

impl InterruptionEstimator {
    /// An estimator whose advisor prior weighs `prior_hours` pseudo
    /// instance-hours (see [`DEFAULT_PRIOR_HOURS`]).
    ///
    /// # Errors
    ///
    /// [`Error::PriorHours`] unless `prior_hours` is positive and finite.
    pub fn new(prior_hours: f64) -> Result<InterruptionEstimator> {
        if !(prior_hours.is_finite() && prior_hours > 0.0) {
            return Err(Error::PriorHours(prior_hours));
        }
        Ok(InterruptionEstimator {
            exposed: Exposed::default(),
            prior_hours,
            evidence: BTreeMap::new(),
        })
    }

    /// The prior's weight in pseudo instance-hours.
    pub fn prior_hours(&self) -> f64 {
        self.prior_hours
    }

    /// Adds `hours` instance-hours run in the pool. Negative, non-finite and
    /// on-demand exposure is ignored.
    pub fn observe_exposure(&mut self, key: &OfferingKey, hours: f64) {
        if counts_as_exposure(key, hours) {
            update(&mut self.evidence, key, |e| e.exposure_hours += hours);
        }
    }

    /// Counts one spot interruption in the pool. Call it once per instance
    /// (EC2 may deliver a notice more than once; the interruption handler
    /// knows whether it already handled the claim). Rebalance
    /// recommendations and terminations are not interruptions. Ignored for
    /// on-demand pools.
    pub fn observe_interruption(&mut self, key: &OfferingKey) {
        if key.capacity_type != CapacityType::Spot {
            return;
        }
        update(&mut self.evidence, key, |e| e.interruptions += 1);
    }

    /// Adds the exposure of our spot nodes over `[from, to)`: for each node,
    /// the part of that interval after its launch. Call it with consecutive,
    /// non-overlapping intervals (each tick, from the previous tick's `to`),
    /// or exposure is counted twice. `revision` is the world's
    /// [`World::nodes_revision`](super::World::nodes_revision) for `nodes`
    /// (0: not known): while it stays the same, the spot nodes' pools and
    /// launch times are read from the last call's list, not from the nodes.
    pub fn observe_nodes(&mut self, nodes: &[ManagedNode], revision: u64, from: Time, to: Time) {
        if revision == 0 || self.exposed.revision != revision {
            self.exposed = Exposed::of(nodes, revision);
        }
        // This runs on every round over every node: one lookup per pool,
        // not per node. Each pool's sum still starts from its evidence and
        // adds the nodes in their order, as one call per node would, so the
        // total is the same to the last bit.
        let Exposed { pools, nodes, .. } = &self.exposed;
        let evidence = &mut self.evidence;
        let mut sums: Vec<Option<f64>> = vec![None; pools.len()];
        for &(pool, launched_at) in nodes {
            let start = from.max(launched_at);
            if start >= to {
                continue;
            }
            let hours = (to - start).num_milliseconds() as f64 / 3_600_000.0;
            if !counts_as_exposure(&pools[pool], hours) {
                continue;
            }
            let sum = sums[pool].get_or_insert_with(|| {
                evidence.get(&pools[pool]).map_or(0.0, |e| e.exposure_hours)
            });
            *sum += hours;
        }
        for (key, sum) in pools.iter().zip(sums) {
            if let Some(sum) = sum {
                update(evidence, key, |e| e.exposure_hours = sum);
            }
        }
    }

    /// What was seen of the pool (zeros when nothing).
    pub fn evidence(&self, key: &OfferingKey) -> Evidence {
        self.evidence.get(key).copied().unwrap_or_default()
    }

    /// The posterior of the pool's rate from a prior mean rate `r0` per
    /// instance-hour (the calibrated market's
    /// [`PoolMarket::mean_rate_per_hour`](crate::catalog::PoolMarket::mean_rate_per_hour),
    /// see [`prior_rate`]). On-demand pools get a point mass at 0.
    pub fn posterior_from(&self, key: &OfferingKey, r0: f64) -> RatePosterior {
        let beta = self.prior_hours + self.evidence(key).exposure_hours;
        if key.capacity_type != CapacityType::Spot {
            return RatePosterior { alpha: 0.0, beta };
        }
        let r0 = if r0.is_finite() { r0.max(0.0) } else { 0.0 };
        let e = self.evidence(key);
        RatePosterior {
            alpha: r0 * self.prior_hours + e.interruptions as f64,
            beta,
        }
    }

    /// The pools with evidence.
    pub fn pools(&self) -> impl Iterator<Item = &OfferingKey> {
        self.evidence.keys()
    }
}

/// Applies `f` to the pool's evidence, cloning the key only for a pool seen
/// for the first time (this runs per pool per tick).
fn update(
    evidence: &mut BTreeMap<OfferingKey, Evidence>,
    key: &OfferingKey,
    f: impl FnOnce(&mut Evidence),
) {
    match evidence.get_mut(key) {
        Some(e) => f(e),
        None => f(evidence.entry(key.clone()).or_default()),
    }
}

/// Whether `hours` in the pool are spot exposure to count: positive,
/// finite and spot.
fn counts_as_exposure(key: &OfferingKey, hours: f64) -> bool {
    key.capacity_type == CapacityType::Spot && hours.is_finite() && hours > 0.0
}

/// The prior mean rate of a spot pool: its offering's
/// [`Offering::interruption_rate_per_hour`](crate::catalog::Offering::interruption_rate_per_hour),
/// the calibrated market's mean rate (or the advisor bucket's under the
/// advisor model); the worst advisor bucket's rate when the catalog has no
/// such offering.
pub fn prior_rate(catalog: &Catalog, region: &str, key: &OfferingKey) -> f64 {
    catalog
        .offerings_of(region, &key.instance_type)
        .find(|o| o.zone_id == key.zone && o.capacity_type == key.capacity_type)
        .map(|o| o.interruption_rate_per_hour())
        .unwrap_or_else(|| InterruptionBucket::WORST.rate_per_hour())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Offering, PriceSource};

    fn spot(instance_type: &str, zone: &str) -> OfferingKey {
        OfferingKey {
            instance_type: instance_type.into(),
            zone: zone.into(),
            capacity_type: CapacityType::Spot,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1e-12)
    }

    #[test]
    fn posterior_mean_sd_and_upper_bound_match_hand_computed_numbers() {
        // r0 = 0.2 /h: alpha0 = 720 x 0.2 = 144; one interruption in 280 h:
        // alpha = 145, beta = 1000.
        let mut e = InterruptionEstimator::default();
        let k = spot("p4d.24xlarge", "use1-az2");
        assert!(close(e.posterior_from(&k, 0.2).mean(), 0.2), "the prior");
        e.observe_exposure(&k, 200.0);
        e.observe_exposure(&k, 80.0);
        e.observe_interruption(&k);
        let p = e.posterior_from(&k, 0.2);
        assert!(close(p.alpha, 145.0), "{p:?}");
        assert_eq!(p.beta, 1000.0);
        assert!(close(p.mean(), 0.145));
        assert!((p.sd() - 145f64.sqrt() / 1000.0).abs() < 1e-12);
        assert!((p.upper_bound() - (0.145 + 2.0 * 145f64.sqrt() / 1000.0)).abs() < 1e-12);
    }

    #[test]
    fn many_interruptions_raise_the_rate_above_the_prior() {
        let mut e = InterruptionEstimator::default();
        let k = spot("g5.12xlarge", "use1-az4");
        e.observe_exposure(&k, 100.0);
        for _ in 0..5 {
            e.observe_interruption(&k);
        }
        // (7.2 + 5) / 820.
        assert!(close(e.posterior_from(&k, 0.01).mean(), 12.2 / 820.0));
    }

    #[test]
    fn long_exposure_without_interruptions_lowers_the_rate() {
        let mut e = InterruptionEstimator::default();
        let k = spot("p5.48xlarge", "use1-az6");
        let before = e.posterior_from(&k, 0.2).mean();
        e.observe_exposure(&k, 6_480.0);
        // alpha0 = 144, beta = 7200: a tenth.
        let after = e.posterior_from(&k, 0.2).mean();
        assert!(close(after, before / 10.0), "{before} -> {after}");
    }

    #[test]
    fn a_calibrated_prior_rate_is_the_mean_until_evidence_moves_it() {
        let mut e = InterruptionEstimator::default();
        let k = spot("p5.48xlarge", "use1-az6");
        assert!(close(e.posterior_from(&k, 0.3).mean(), 0.3));
        // 720 quiet instance-hours halve it: (0.3 x 720) / 1440.
        e.observe_exposure(&k, 720.0);
        assert!(close(e.posterior_from(&k, 0.3).mean(), 0.15));
        // A prior that is no number counts as 0, not as a poisoned rate.
        assert_eq!(e.posterior_from(&k, f64::NAN).mean(), 0.0);
    }

    #[test]
    fn the_prior_weight_sets_how_fast_evidence_moves_the_rate() {
        let k = spot("g6.xlarge", "use1-az1");
        let mut light = InterruptionEstimator::new(72.0).unwrap();
        let mut heavy = InterruptionEstimator::default();
        for e in [&mut light, &mut heavy] {
            e.observe_exposure(&k, 72.0);
            e.observe_interruption(&k);
        }
        // (0.72 + 1) / 144 against (7.2 + 1) / 792.
        assert!(close(light.posterior_from(&k, 0.01).mean(), 1.72 / 144.0));
        assert!(close(heavy.posterior_from(&k, 0.01).mean(), 8.2 / 792.0));
        assert!(InterruptionEstimator::new(0.0).is_err());
        assert!(InterruptionEstimator::new(f64::NAN).is_err());
    }

    #[test]
    fn on_demand_pools_are_never_interrupted_and_bad_exposure_is_ignored() {
        let mut e = InterruptionEstimator::default();
        let od = OfferingKey {
            capacity_type: CapacityType::OnDemand,
            ..spot("g5.xlarge", "use1-az1")
        };
        e.observe_interruption(&od);
        e.observe_exposure(&od, 10.0);
        assert_eq!(e.posterior_from(&od, 0.3).mean(), 0.0);
        assert_eq!(e.posterior_from(&od, 0.3).upper_bound(), 0.0);
        assert_eq!(e.evidence(&od), Evidence::default());
        let k = spot("g5.xlarge", "use1-az1");
        e.observe_exposure(&k, -3.0);
        e.observe_exposure(&k, f64::INFINITY);
        assert_eq!(e.evidence(&k), Evidence::default());
    }

    #[test]
    fn node_exposure_counts_only_the_part_of_the_tick_after_launch() {
        use chrono::{TimeZone, Utc};
        let t = |h: u32, m: u32| Utc.with_ymd_and_hms(2026, 3, 23, h, m, 0).unwrap();
        let node = |claim: &str, key: OfferingKey, launched_at: Time| ManagedNode {
            claim: claim.into(),
            nodepool: "train".into(),
            offering: key.clone(),
            price_per_hour: 1.0,
            launched_at,
            ready_at: None,
            state: crate::cluster::NodeState {
                name: claim.into(),
                nodepool: Some("train".into()),
                instance_type: Some(key.instance_type.clone()),
                zone: key.zone.clone(),
                capacity_type: Some(key.capacity_type),
                labels: Default::default(),
                taints: Vec::new(),
                allocatable: Default::default(),
                used: Default::default(),
                price_per_hour: 1.0,
                in_flight: false,
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
        };
        let k = spot("g5.xlarge", "use1-az1");
        let nodes = [
            node("old", k.clone(), t(8, 0)),
            node("new", k.clone(), t(10, 30)),
            node("future", k.clone(), t(12, 0)),
        ];
        let mut e = InterruptionEstimator::default();
        e.observe_nodes(&nodes, 0, t(10, 0), t(11, 0));
        // 1 h for "old", 0.5 h for "new", nothing for "future".
        assert!((e.evidence(&k).exposure_hours - 1.5).abs() < 1e-12);
    }

    #[test]
    fn exposure_read_under_a_revision_is_exposure_read_from_the_nodes() {
        use crate::core::interruption::fixtures::{node, t, NodeExt};
        let at = |claim: &str, pool: &str, launched: i64| {
            let mut n = node(claim).spot().offering(pool, "use1-az1", 1.0);
            n.launched_at = t(launched);
            n
        };
        let (a, b) = (at("a", "g5.xlarge", 0), at("b", "g6.xlarge", 9000));
        let c = at("c", "g5.xlarge", 15000);
        // Rounds an hour apart, with the revision a driver gives them:
        // the same nodes twice under one revision, then a node launched,
        // then one gone.
        let rounds: [(&[ManagedNode], u64); 6] = [
            (std::slice::from_ref(&a), 4),
            (std::slice::from_ref(&a), 4),
            (&[a.clone(), b.clone()], 5),
            (&[a.clone(), b.clone()], 5),
            (&[a.clone(), b.clone(), c.clone()], 9),
            (&[b.clone(), c.clone()], 10),
        ];
        let (mut told, mut blind) = (
            InterruptionEstimator::default(),
            InterruptionEstimator::default(),
        );
        for (i, (nodes, revision)) in rounds.iter().enumerate() {
            let (from, to) = (t(3600 * i as i64), t(3600 * (i as i64 + 1)));
            told.observe_nodes(nodes, *revision, from, to);
            blind.observe_nodes(nodes, 0, from, to);
        }
        for key in [&a.offering, &b.offering] {
            // Exactly, not nearly: the sums add the same hours in the
            // same order.
            assert_eq!(told.evidence(key), blind.evidence(key));
        }
        // a: 5 h (rounds 0 to 4); c, of a's pool, from 15,000 s to the end
        // (21,600 s); b from 9,000 s.
        let g5 = told.evidence(&a.offering).exposure_hours;
        assert!((g5 - (5.0 + 6600.0 / 3600.0)).abs() < 1e-9, "{g5}");
        let g6 = told.evidence(&b.offering).exposure_hours;
        assert!((g6 - 12600.0 / 3600.0).abs() < 1e-9, "{g6}");
    }

    #[test]
    fn the_prior_is_the_offerings_rate_and_the_worst_bucket_without_one() {
        let it = crate::catalog::InstanceType::bare("g5.xlarge", 4, 16_384);
        let offering = Offering {
            instance_type: "g5.xlarge".into(),
            region: "us-east-1".into(),
            zone_id: "use1-az1".into(),
            capacity_type: CapacityType::Spot,
            price_per_hour: 0.4,
            price_source: PriceSource::SpotObserved,
            interruption_bucket: Some(InterruptionBucket(1)),
            market: None,
            reservation: None,
        };
        let catalog = Catalog::from_parts([it], [offering]);
        let expected = catalog
            .offerings_of("us-east-1", "g5.xlarge")
            .next()
            .unwrap()
            .interruption_rate_per_hour();
        let known = spot("g5.xlarge", "use1-az1");
        assert!(close(prior_rate(&catalog, "us-east-1", &known), expected));
        assert!(
            !close(expected, InterruptionBucket::WORST.rate_per_hour()),
            "the pool's own rate, not the fallback"
        );
        let unknown = spot("g5.xlarge", "use1-az9");
        assert!(close(
            prior_rate(&catalog, "us-east-1", &unknown),
            InterruptionBucket::WORST.rate_per_hour()
        ));
    }
}
