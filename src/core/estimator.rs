//! Interruption rates learned per spot pool (one instance type in one zone,
//! an [`OfferingKey`]), starting from the Spot Instance Advisor's bucket and
//! moving towards what our own instances experience. Owns the arithmetic and
//! the evidence; it does not decide when a notice counts (the interruption
//! handler does) nor how the planner prices risk (`docs/planner.md`).
//!
//! # The model (`docs/lifecycle-timing.md`)
//!
//! Interruptions of one spot pool arrive as a Poisson process with an
//! unknown rate `λ` per instance-hour. The prior on `λ` is a Gamma
//! distribution with shape `α₀ = r₀ · H` and rate `β₀ = H`, where `r₀` is the
//! advisor bucket's rate ([`InterruptionBucket::rate_per_hour`], the worst
//! bucket when the advisor has none) and `H` is the prior's weight in
//! pseudo instance-hours ([`DEFAULT_PRIOR_HOURS`] = 720, one instance for one
//! month: the advisor's figure counts as much as a month of our own
//! experience). Its mean is `r₀`. After `k` interruptions over `T`
//! instance-hours of exposure, the posterior is Gamma(`α₀ + k`, `β₀ + T`):
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
//!
//! The planner reads learned rates as an override map
//! ([`InterruptionEstimator::rates`]), in place of the advisor-derived
//! [`Offering::interruption_rate_per_hour`](crate::catalog::Offering::interruption_rate_per_hour)
//! for the pools we have evidence on.

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
}

impl Default for InterruptionEstimator {
    fn default() -> Self {
        InterruptionEstimator {
            prior_hours: DEFAULT_PRIOR_HOURS,
            evidence: BTreeMap::new(),
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
        if key.capacity_type != CapacityType::Spot || !hours.is_finite() || hours <= 0.0 {
            return;
        }
        self.update(key, |e| e.exposure_hours += hours);
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
        self.update(key, |e| e.interruptions += 1);
    }

    /// Adds the exposure of our spot nodes over `[from, to)`: for each node,
    /// the part of that interval after its launch. Call it with consecutive,
    /// non-overlapping intervals (each tick, from the previous tick's `to`),
    /// or exposure is counted twice.
    pub fn observe_nodes(&mut self, nodes: &[ManagedNode], from: Time, to: Time) {
        for n in nodes {
            let start = from.max(n.launched_at);
            if start < to {
                let hours = (to - start).num_milliseconds() as f64 / 3_600_000.0;
                self.observe_exposure(&n.offering, hours);
            }
        }
    }

    /// Applies `f` to the pool's evidence, cloning the key only for a pool
    /// seen for the first time (this runs per node per tick).
    fn update(&mut self, key: &OfferingKey, f: impl FnOnce(&mut Evidence)) {
        match self.evidence.get_mut(key) {
            Some(e) => f(e),
            None => f(self.evidence.entry(key.clone()).or_default()),
        }
    }

    /// What was seen of the pool (zeros when nothing).
    pub fn evidence(&self, key: &OfferingKey) -> Evidence {
        self.evidence.get(key).copied().unwrap_or_default()
    }

    /// The posterior of the pool's rate, from the advisor's `prior` bucket
    /// (`None`: the advisor has no figure, the worst bucket is assumed).
    /// On-demand pools get a point mass at 0 (`alpha` 0).
    pub fn posterior(&self, key: &OfferingKey, prior: Option<InterruptionBucket>) -> RatePosterior {
        let r0 = prior.unwrap_or(InterruptionBucket::WORST).rate_per_hour();
        self.posterior_from(key, r0)
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

    /// Expected interruptions per instance-hour of the pool: the posterior
    /// mean `(α₀ + k) / (β₀ + T)`; 0 for on-demand.
    pub fn rate(&self, key: &OfferingKey, prior: Option<InterruptionBucket>) -> f64 {
        self.posterior(key, prior).mean()
    }

    /// The pessimistic rate `mean + 2 sd`; 0 for on-demand.
    pub fn upper_rate(&self, key: &OfferingKey, prior: Option<InterruptionBucket>) -> f64 {
        self.posterior(key, prior).upper_bound()
    }

    /// The pools with evidence.
    pub fn pools(&self) -> impl Iterator<Item = &OfferingKey> {
        self.evidence.keys()
    }

    /// Learned rates of the pools with evidence, priors from the catalog's
    /// offerings in `region` ([`prior_bucket`]). This is the override map the
    /// planner reads in place of the advisor-derived rates; pools absent from
    /// it keep their advisor rate, which equals their posterior mean.
    pub fn rates<'a>(
        &'a self,
        catalog: &'a Catalog,
        region: &'a str,
    ) -> impl Iterator<Item = (&'a OfferingKey, f64)> + 'a {
        self.evidence
            .keys()
            .map(move |k| (k, self.rate(k, prior_bucket(catalog, region, k))))
    }
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

/// The advisor bucket of the pool's offering in the catalog, `None` when the
/// catalog has no such offering or no bucket for it.
pub fn prior_bucket(
    catalog: &Catalog,
    region: &str,
    key: &OfferingKey,
) -> Option<InterruptionBucket> {
    catalog
        .offerings_of(region, &key.instance_type)
        .find(|o| o.zone_id == key.zone && o.capacity_type == key.capacity_type)
        .and_then(|o| o.interruption_bucket)
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
    fn without_observations_the_rate_is_the_advisor_prior() {
        let e = InterruptionEstimator::default();
        let k = spot("g5.xlarge", "use1-az1");
        for b in 0..=4 {
            let b = InterruptionBucket(b);
            assert!(close(e.rate(&k, Some(b)), b.rate_per_hour()), "{b}");
        }
        assert!(close(
            e.rate(&k, None),
            InterruptionBucket::WORST.rate_per_hour()
        ));
    }

    #[test]
    fn posterior_mean_sd_and_upper_bound_match_hand_computed_numbers() {
        // Bucket 2: p = 12.5 %/month, r0 = -ln(0.875)/730 = 1.829197e-4 /h.
        // alpha0 = 720 r0 = 0.1317022; one interruption in 280 h:
        // alpha = 1.1317022, beta = 1000.
        let mut e = InterruptionEstimator::default();
        let k = spot("p4d.24xlarge", "use1-az2");
        e.observe_exposure(&k, 200.0);
        e.observe_exposure(&k, 80.0);
        e.observe_interruption(&k);
        let p = e.posterior(&k, Some(InterruptionBucket(2)));
        assert!((p.alpha - 1.1317022).abs() < 1e-6, "{p:?}");
        assert_eq!(p.beta, 1000.0);
        assert!((p.mean() - 1.1317022e-3).abs() < 1e-9);
        assert!((p.sd() - 1.0638149e-3).abs() < 1e-9);
        assert!((p.upper_bound() - 3.2593320e-3).abs() < 1e-9);
        assert_eq!(
            e.upper_rate(&k, Some(InterruptionBucket(2))),
            p.upper_bound()
        );
    }

    #[test]
    fn many_interruptions_raise_the_rate_above_the_prior() {
        let mut e = InterruptionEstimator::default();
        let k = spot("g5.12xlarge", "use1-az4");
        let prior = Some(InterruptionBucket(0));
        e.observe_exposure(&k, 100.0);
        for _ in 0..5 {
            e.observe_interruption(&k);
        }
        // (0.024971 + 5) / 820 = 6.12801e-3, ~177x the prior's 3.468e-5.
        assert!((e.rate(&k, prior) - 6.12801e-3).abs() < 1e-8);
        assert!(e.rate(&k, prior) > InterruptionBucket::WORST.rate_per_hour());
    }

    #[test]
    fn long_exposure_without_interruptions_lowers_the_rate() {
        let mut e = InterruptionEstimator::default();
        let k = spot("p5.48xlarge", "use1-az6");
        let before = e.rate(&k, None);
        e.observe_exposure(&k, 6_480.0);
        // alpha0 = 720 x 4.885958e-4 = 0.3517890; beta = 7200: a tenth.
        let after = e.rate(&k, None);
        assert!(close(after, before / 10.0), "{before} -> {after}");
        assert!((after - 4.885958e-5).abs() < 1e-10);
    }

    #[test]
    fn a_calibrated_prior_rate_is_the_mean_until_evidence_moves_it() {
        let mut e = InterruptionEstimator::default();
        let k = spot("p5.48xlarge", "use1-az6");
        assert!(close(e.posterior_from(&k, 0.3).mean(), 0.3));
        // 720 quiet instance-hours halve it: (0.3 x 720) / 1440.
        e.observe_exposure(&k, 720.0);
        assert!(close(e.posterior_from(&k, 0.3).mean(), 0.15));
        let od = OfferingKey {
            capacity_type: CapacityType::OnDemand,
            ..k
        };
        assert_eq!(e.posterior_from(&od, 0.3).mean(), 0.0);
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
        let prior = Some(InterruptionBucket(1));
        assert!(light.rate(&k, prior) > heavy.rate(&k, prior));
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
        assert_eq!(e.rate(&od, None), 0.0);
        assert_eq!(e.upper_rate(&od, None), 0.0);
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
            },
            pods: Vec::new(),
            do_not_disrupt: false,
        };
        let k = spot("g5.xlarge", "use1-az1");
        let nodes = [
            node("old", k.clone(), t(8, 0)),
            node("new", k.clone(), t(10, 30)),
            node("future", k.clone(), t(12, 0)),
        ];
        let mut e = InterruptionEstimator::default();
        e.observe_nodes(&nodes, t(10, 0), t(11, 0));
        // 1 h for "old", 0.5 h for "new", nothing for "future".
        assert!((e.evidence(&k).exposure_hours - 1.5).abs() < 1e-12);
    }

    #[test]
    fn rates_lists_pools_with_evidence_using_the_catalog_bucket() {
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
        };
        let catalog = Catalog::from_parts([it], [offering]);
        let known = spot("g5.xlarge", "use1-az1");
        let unknown = spot("g5.xlarge", "use1-az9");
        let mut e = InterruptionEstimator::default();
        e.observe_exposure(&known, 0.0001);
        e.observe_interruption(&unknown);
        let rates: Vec<(&OfferingKey, f64)> = e.rates(&catalog, "us-east-1").collect();
        assert_eq!(rates.len(), 2);
        assert_eq!(rates[0].0, &known);
        // Bucket 1 prior, negligible exposure: about the bucket's rate.
        assert!((rates[0].1 - InterruptionBucket(1).rate_per_hour()).abs() < 1e-9);
        // No offering in the catalog: worst prior, plus one interruption.
        assert!(close(
            rates[1].1,
            (InterruptionBucket::WORST.rate_per_hour() * 720.0 + 1.0) / 720.0
        ));
    }
}
