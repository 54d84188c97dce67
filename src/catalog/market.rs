//! The spot market model: how long a spot instance of a pool (instance type
//! x zone) lives, how many of its pool one reclaim takes, how long the pool
//! stays closed after a reclaim, and how often a launch there succeeds. The
//! one definition shared by the simulated cloud (which draws from it) and
//! the core (whose prior it is). Pure: no I/O, no clock, no randomness of
//! its own (draws take uniforms from the caller). The model, the fit and
//! the mapping to modern pools are described in `docs/market.md`.
//!
//! Two models: [`MarketModel::Calibrated`] (the default: parameters fitted
//! from measured traces, `pricing-data/market.json`, mapped to each pool by
//! a stated [`Mapping`]) and [`MarketModel::Advisor`] (the old model: a
//! constant hazard `-ln(1 - p) / 730` from the Spot Instance Advisor
//! bucket, no correlation, no closures, every launch succeeds).

pub mod advisor;
pub mod fit;
pub mod trace;

use super::InterruptionBucket;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

/// `pricing-data/market.json` as compiled into the binary.
pub const EMBEDDED_MARKET: &str = include_str!("../../pricing-data/market.json");

/// What can go wrong with market parameters.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not the JSON shape of a market file.
    #[error("cannot parse market parameters: {0}")]
    Parse(String),
    /// Well-formed, but a value is out of range.
    #[error("invalid market parameters at {at}: {message}")]
    Invalid {
        /// Where, e.g. `reference.lifetime.hazards_per_hour[2]`.
        at: String,
        /// What is wrong.
        message: String,
    },
}

/// The market's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Lifetime of a spot instance from launch: a piecewise-constant hazard
/// (the maximum-likelihood estimate of a piecewise-exponential model under
/// right-censoring, see `docs/market.md`). `hazards_per_hour[i]` holds from
/// `edges_hours[i]` to `edges_hours[i + 1]`, the last one for ever; the
/// first edge is 0. A decreasing hazard is a heavy tail: many instances die
/// young, the survivors live long.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lifetime {
    /// Start of each piece, hours of age; the first is 0.
    pub edges_hours: Vec<f64>,
    /// Hazard of each piece, reclaims per instance-hour.
    pub hazards_per_hour: Vec<f64>,
}

impl Lifetime {
    /// A constant hazard (exponential lifetimes).
    pub fn constant(rate_per_hour: f64) -> Lifetime {
        Lifetime {
            edges_hours: vec![0.0],
            hazards_per_hour: vec![rate_per_hour],
        }
    }

    /// The hazard at `age_h`, per instance-hour.
    pub fn hazard(&self, age_h: f64) -> f64 {
        let i = self.edges_hours.partition_point(|e| *e <= age_h.max(0.0));
        self.hazards_per_hour[i.saturating_sub(1)]
    }

    /// The first age past `age_h` at which the hazard rises above its value
    /// at `age_h`, if it ever does: what is priced by the hazard now holds
    /// at least until then (a rule that acts on a higher hazard looks
    /// again there).
    pub fn next_rise(&self, age_h: f64) -> Option<f64> {
        let age = age_h.max(0.0);
        let now = self.hazard(age);
        let i = self.edges_hours.partition_point(|e| *e <= age);
        self.edges_hours[i..]
            .iter()
            .zip(&self.hazards_per_hour[i..])
            .find(|(_, h)| **h > now)
            .map(|(e, _)| *e)
    }

    /// The cumulative hazard from age 0 to `age_h`.
    pub fn cumulative(&self, age_h: f64) -> f64 {
        let age = age_h.max(0.0);
        let mut total = 0.0;
        for (i, &from) in self.edges_hours.iter().enumerate() {
            if from >= age {
                break;
            }
            let to = self.edges_hours.get(i + 1).map_or(age, |e| e.min(age));
            total += self.hazards_per_hour[i] * (to - from);
        }
        total
    }

    /// The age at which the cumulative hazard reaches `h`, if it ever does.
    pub fn inverse_cumulative(&self, h: f64) -> Option<f64> {
        let mut left = h.max(0.0);
        for (i, &from) in self.edges_hours.iter().enumerate() {
            let rate = self.hazards_per_hour[i];
            let span = self.edges_hours.get(i + 1).map(|e| e - from);
            match span {
                Some(s) if rate * s < left => left -= rate * s,
                _ if rate > 0.0 => return Some(from + left / rate),
                _ => {}
            }
        }
        None
    }

    /// Mean lifetime, hours (infinite when the last hazard is 0).
    pub fn mean(&self) -> f64 {
        let mut mean = 0.0;
        let mut survival = 1.0;
        for (i, &from) in self.edges_hours.iter().enumerate() {
            let rate = self.hazards_per_hour[i];
            match self.edges_hours.get(i + 1) {
                Some(&to) => {
                    let span = to - from;
                    mean += if rate > 0.0 {
                        survival * (1.0 - (-rate * span).exp()) / rate
                    } else {
                        survival * span
                    };
                    survival *= (-rate * span).exp();
                }
                None if rate > 0.0 => mean += survival / rate,
                None => return f64::INFINITY,
            }
        }
        mean
    }

    /// Every hazard times `factor`.
    pub fn scaled(&self, factor: f64) -> Lifetime {
        Lifetime {
            edges_hours: self.edges_hours.clone(),
            hazards_per_hour: self.hazards_per_hour.iter().map(|h| h * factor).collect(),
        }
    }

    fn check(&self, at: &str) -> Result<()> {
        let bad = |message: &str| {
            Err(Error::Invalid {
                at: format!("{at}.lifetime"),
                message: message.into(),
            })
        };
        if self.edges_hours.is_empty() || self.edges_hours.len() != self.hazards_per_hour.len() {
            return bad("edges_hours and hazards_per_hour need the same, non-zero length");
        }
        if self.edges_hours[0] != 0.0 || self.edges_hours.windows(2).any(|w| w[0] >= w[1]) {
            return bad("edges_hours must start at 0 and increase");
        }
        if self
            .hazards_per_hour
            .iter()
            .any(|h| !(h.is_finite() && *h >= 0.0))
        {
            return bad("hazards must be finite and >= 0");
        }
        Ok(())
    }
}

/// How long a pool stays closed (launches fail with insufficient capacity)
/// after a reclaim: with `probability`, for a lognormal time of median
/// `median_hours` and log-standard-deviation `sigma`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Closure {
    /// Probability that a reclaim closes the pool.
    pub probability: f64,
    /// Median closure, hours.
    pub median_hours: f64,
    /// Standard deviation of the log of the closure time.
    pub sigma: f64,
}

impl Closure {
    /// No closures.
    pub const NONE: Closure = Closure {
        probability: 0.0,
        median_hours: 0.0,
        sigma: 0.0,
    };

    /// Mean closure time of a closure that happens, hours.
    pub fn mean_when_closed_hours(&self) -> f64 {
        self.median_hours * (self.sigma * self.sigma / 2.0).exp()
    }

    /// The closure after one reclaim, hours (0: the pool stays open), from
    /// three uniforms in `[0, 1)`: whether it closes, and two for the
    /// lognormal time (Box-Muller).
    pub fn draw_hours(&self, closes: f64, u1: f64, u2: f64) -> f64 {
        if closes >= self.probability || self.median_hours <= 0.0 {
            return 0.0;
        }
        let z = (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        self.median_hours * (self.sigma * z).exp()
    }
}

/// The market of one spot pool (instance type x zone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolMarket {
    /// Lifetime of one instance from launch.
    pub lifetime: Lifetime,
    /// Correlated reclaim: when a reclaim takes one instance of the pool,
    /// each other running instance of the pool goes in the same event with
    /// this probability (so an event takes `1 + q (n - 1)` of `n` on
    /// average).
    pub co_reclaim_probability: f64,
    /// Closure of the pool after a reclaim.
    pub closure: Closure,
    /// Probability that a launch in the pool succeeds (outside closures).
    pub obtainability: f64,
}

impl PoolMarket {
    /// The advisor model of a bucket: constant hazard
    /// [`InterruptionBucket::rate_per_hour`], independent reclaims, no
    /// closures, every launch succeeds.
    pub fn advisor(bucket: InterruptionBucket) -> PoolMarket {
        PoolMarket {
            lifetime: Lifetime::constant(bucket.rate_per_hour()),
            co_reclaim_probability: 0.0,
            closure: Closure::NONE,
            obtainability: 1.0,
        }
    }

    /// Reclaims per instance-hour at age `age_h` hours.
    pub fn hazard(&self, age_h: f64) -> f64 {
        self.lifetime.hazard(age_h)
    }

    /// The first age past `age_h` at which reclaims become likelier
    /// ([`Lifetime::next_rise`]).
    pub fn next_rise(&self, age_h: f64) -> Option<f64> {
        self.lifetime.next_rise(age_h)
    }

    /// Probability that an instance lives past `age_h` hours.
    pub fn survival(&self, age_h: f64) -> f64 {
        (-self.lifetime.cumulative(age_h)).exp()
    }

    /// Expected reclaims of one instance (relaunched nowhere) from age
    /// `age_h` for `duration_h` hours: the cumulative hazard over
    /// `[age, age + duration]`. For small values, the probability of a
    /// reclaim in that window.
    pub fn expected_interruptions(&self, age_h: f64, duration_h: f64) -> f64 {
        let age = age_h.max(0.0);
        self.lifetime.cumulative(age + duration_h.max(0.0)) - self.lifetime.cumulative(age)
    }

    /// The one-number rate: reclaims per instance-hour of a slot kept
    /// filled (relaunched after each loss, as the measured traces were),
    /// i.e. one over the mean lifetime (the renewal rate). This is how the
    /// traces' "preemptions per instance-hour" are counted; for a constant
    /// hazard it is that hazard. 0 when lifetimes have no finite mean.
    pub fn mean_rate_per_hour(&self) -> f64 {
        1.0 / self.lifetime.mean()
    }

    /// Expected hours a pool stays closed after one reclaim (closure
    /// probability times the mean closure).
    pub fn mean_closure_hours(&self) -> f64 {
        self.closure.probability * self.closure.mean_when_closed_hours()
    }

    /// Probability that a launch succeeds outside closures.
    pub fn obtainability(&self) -> f64 {
        self.obtainability
    }

    /// The hours an instance of age `age_h` still lives, drawn by inverting
    /// the cumulative hazard against a unit exponential `unit_exp`
    /// (`-ln(1 - u)` of a uniform); `None` if it never dies.
    pub fn remaining_life(&self, age_h: f64, unit_exp: f64) -> Option<f64> {
        let age = age_h.max(0.0);
        let target = self.lifetime.cumulative(age) + unit_exp;
        self.lifetime.inverse_cumulative(target).map(|t| t - age)
    }

    /// The same pool with every hazard times `hazard_factor` and the
    /// chance of closure and of a failed launch scaled alike (see
    /// [`Mapping`]); probabilities stay in `[0, 1]`.
    pub fn scaled(&self, hazard_factor: f64) -> PoolMarket {
        let f = hazard_factor.max(0.0);
        PoolMarket {
            lifetime: self.lifetime.scaled(f),
            co_reclaim_probability: self.co_reclaim_probability,
            closure: Closure {
                probability: (self.closure.probability * f).min(1.0),
                ..self.closure
            },
            obtainability: (1.0 - (1.0 - self.obtainability) * f).clamp(0.0, 1.0),
        }
    }

    /// Checks every value is in range.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the field under `at`.
    pub fn check(&self, at: &str) -> Result<()> {
        self.lifetime.check(at)?;
        let probabilities = [
            ("co_reclaim_probability", self.co_reclaim_probability),
            ("closure.probability", self.closure.probability),
            ("obtainability", self.obtainability),
        ];
        for (field, p) in probabilities {
            if !(0.0..=1.0).contains(&p) {
                return Err(Error::Invalid {
                    at: format!("{at}.{field}"),
                    message: format!("{p} is not a probability"),
                });
            }
        }
        let c = &self.closure;
        if !(c.median_hours.is_finite() && c.median_hours >= 0.0 && c.sigma.is_finite()) {
            return Err(Error::Invalid {
                at: format!("{at}.closure"),
                message: "median_hours must be >= 0 and sigma finite".into(),
            });
        }
        Ok(())
    }
}

/// What the mapping reads of a pool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolFacts<'a> {
    /// Instance family, e.g. `g5`.
    pub family: &'a str,
    /// The advisor bucket (`None`: no figure, taken as the worst).
    pub bucket: Option<InterruptionBucket>,
    /// Spot discount, `1 - spot / on-demand` (`None`: unknown, neutral).
    pub spot_discount: Option<f64>,
}

/// The stated, tunable mapping from what we know of a modern pool to its
/// market: the measured reference pool with every hazard (and the chance
/// of closure and of a failed launch) multiplied by
/// `bucket_factors[bucket] x family_factors[family] x
/// ((1 - discount) / (1 - reference_spot_discount)) ^ discount_exponent`.
/// These factors are assumptions, not measurements: see `docs/market.md`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mapping {
    /// Hazard factor per advisor bucket 0..=4, relative to the reference
    /// pool's bucket.
    pub bucket_factors: [f64; 5],
    /// Hazard factor per instance family; families not listed get 1.
    #[serde(default)]
    pub family_factors: BTreeMap<String, f64>,
    /// The reference pool's spot discount.
    pub reference_spot_discount: f64,
    /// How strongly a shallower discount (spot price closer to on-demand,
    /// less spare capacity) raises the hazard; 0 ignores the discount.
    pub discount_exponent: f64,
}

impl Mapping {
    /// The hazard factor of a pool.
    pub fn factor(&self, facts: &PoolFacts) -> f64 {
        let bucket = facts.bucket.unwrap_or(InterruptionBucket::WORST).0.min(4);
        let family = self
            .family_factors
            .get(facts.family)
            .copied()
            .unwrap_or(1.0);
        let discount = match facts.spot_discount {
            Some(d) if self.discount_exponent != 0.0 => {
                let paid = (1.0 - d).clamp(0.01, 1.0);
                let reference = (1.0 - self.reference_spot_discount).clamp(0.01, 1.0);
                (paid / reference).powf(self.discount_exponent)
            }
            _ => 1.0,
        };
        self.bucket_factors[usize::from(bucket)] * family * discount
    }
}

/// A user's fitted values for some pools, replacing the mapping there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolOverride {
    /// Instance type.
    pub instance_type: String,
    /// Zone ID; absent: every zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Its market.
    pub market: PoolMarket,
}

/// The contents of a market file (`pricing-data/market.json`): the
/// measured reference pool, the mapping, per-pool overrides, and the fit's
/// provenance and spread (kept as written, for people).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarketParams {
    /// Which pool the reference was measured on, e.g. `p3.2xlarge`.
    pub reference_pool: String,
    /// The measured market of the reference pool.
    pub reference: PoolMarket,
    /// From the reference to other pools.
    pub mapping: Mapping,
    /// Pools with their own values.
    #[serde(default)]
    pub pools: Vec<PoolOverride>,
    /// Which traces, which fit, what version.
    #[serde(default)]
    pub provenance: serde_json::Value,
    /// The fitted values per trace / per zone.
    #[serde(default)]
    pub spread: serde_json::Value,
}

static EMBEDDED_PARAMS: LazyLock<Arc<MarketParams>> = LazyLock::new(|| {
    Arc::new(MarketParams::parse(EMBEDDED_MARKET).expect("embedded pricing-data/market.json"))
});

impl MarketParams {
    /// The embedded `pricing-data/market.json` (parsed once; the test
    /// suite guarantees it parses).
    pub fn embedded() -> Arc<MarketParams> {
        EMBEDDED_PARAMS.clone()
    }

    /// Parses and checks a market file.
    ///
    /// # Errors
    /// [`Error::Parse`] for malformed JSON, [`Error::Invalid`] for a value
    /// out of range (naming it).
    pub fn parse(text: &str) -> Result<MarketParams> {
        let p: MarketParams =
            serde_json::from_str(text).map_err(|e| Error::Parse(e.to_string()))?;
        p.check()?;
        Ok(p)
    }

    /// Checks every value is in range.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the first value out of range.
    pub fn check(&self) -> Result<()> {
        self.reference.check("reference")?;
        for (i, o) in self.pools.iter().enumerate() {
            o.market.check(&format!("pools[{i}].market"))?;
        }
        let m = &self.mapping;
        let factors = m
            .bucket_factors
            .iter()
            .chain(m.family_factors.values())
            .chain([&m.discount_exponent]);
        if factors.into_iter().any(|f| !(f.is_finite() && *f >= 0.0))
            || !(0.0..1.0).contains(&m.reference_spot_discount)
        {
            return Err(Error::Invalid {
                at: "mapping".into(),
                message: "factors must be finite and >= 0, the discount in [0, 1)".into(),
            });
        }
        Ok(())
    }

    /// The market of pool `(instance_type, zone)`: an override if one
    /// names it (zone-specific first), else the mapped reference.
    pub fn pool(&self, instance_type: &str, zone: &str, facts: &PoolFacts) -> PoolMarket {
        let exact = self
            .pools
            .iter()
            .find(|o| o.instance_type == instance_type && o.zone.as_deref() == Some(zone));
        let any_zone = || {
            self.pools
                .iter()
                .find(|o| o.instance_type == instance_type && o.zone.is_none())
        };
        match exact.or_else(any_zone) {
            Some(o) => o.market.clone(),
            None => self.reference.scaled(self.mapping.factor(facts)),
        }
    }
}

/// Which market a catalog (and the simulated cloud) prices spot risk with.
#[derive(Debug, Clone, PartialEq)]
pub enum MarketModel {
    /// Fitted from measured traces and mapped to each pool (the default).
    Calibrated(Arc<MarketParams>),
    /// The Spot Instance Advisor bucket read as a monthly probability,
    /// `-ln(1 - p) / 730` per hour, constant; no correlation, closures or
    /// failed launches. Known to understate measured reclaims by 120x to
    /// 1,500x (`docs/market.md`).
    Advisor,
}

impl Default for MarketModel {
    fn default() -> MarketModel {
        MarketModel::Calibrated(MarketParams::embedded())
    }
}

impl MarketModel {
    /// `calibrated` or `advisor`.
    pub fn name(&self) -> &'static str {
        match self {
            MarketModel::Calibrated(_) => "calibrated",
            MarketModel::Advisor => "advisor",
        }
    }

    /// The market of one spot pool.
    pub fn pool(&self, instance_type: &str, zone: &str, facts: &PoolFacts) -> PoolMarket {
        match self {
            MarketModel::Calibrated(p) => p.pool(instance_type, zone, facts),
            MarketModel::Advisor => {
                PoolMarket::advisor(facts.bucket.unwrap_or(InterruptionBucket::WORST))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * (1.0 + a.abs().max(b.abs()))
    }

    fn pool() -> PoolMarket {
        PoolMarket {
            lifetime: Lifetime {
                edges_hours: vec![0.0, 1.0, 4.0],
                hazards_per_hour: vec![1.0, 0.25, 0.05],
            },
            co_reclaim_probability: 0.3,
            closure: Closure {
                probability: 0.5,
                median_hours: 0.5,
                sigma: 1.0,
            },
            obtainability: 0.8,
        }
    }

    #[test]
    fn hazard_is_piecewise_and_cumulative_hazard_integrates_it() {
        let p = pool();
        assert_eq!(p.hazard(0.0), 1.0);
        assert_eq!(p.hazard(2.0), 0.25);
        assert_eq!(p.hazard(100.0), 0.05);
        // 1 h at 1.0, 3 h at 0.25, 2 h at 0.05.
        assert!(close(p.lifetime.cumulative(6.0), 1.0 + 0.75 + 0.1));
        assert!(close(p.survival(6.0), (-1.85f64).exp()));
        assert!(close(p.expected_interruptions(0.5, 1.0), 0.5 + 0.125));
    }

    #[test]
    fn the_next_rise_is_the_first_piece_above_the_hazard_now() {
        // Falling pieces never rise; a later piece above the current one
        // does, even past a lower piece in between.
        assert_eq!(pool().next_rise(0.0), None);
        assert_eq!(pool().next_rise(30.0), None);
        let bumpy = Lifetime {
            edges_hours: vec![0.0, 1.0, 2.0, 3.0],
            hazards_per_hour: vec![0.5, 0.1, 0.3, 0.6],
        };
        assert_eq!(bumpy.next_rise(0.5), Some(3.0));
        assert_eq!(bumpy.next_rise(1.0), Some(2.0));
        assert_eq!(bumpy.next_rise(2.5), Some(3.0));
        assert_eq!(bumpy.next_rise(3.0), None);
    }

    #[test]
    fn an_old_instance_is_safer_than_a_new_one() {
        let p = pool();
        assert!(p.expected_interruptions(5.0, 1.0) < p.expected_interruptions(0.0, 1.0) / 10.0);
    }

    #[test]
    fn remaining_life_inverts_the_cumulative_hazard() {
        let p = pool();
        for (age, e) in [(0.0, 0.3), (0.5, 1.2), (3.0, 2.0)] {
            let t = p.remaining_life(age, e).unwrap();
            assert!(close(p.expected_interruptions(age, t), e), "{age} {e}");
        }
        let calm = PoolMarket {
            lifetime: Lifetime::constant(0.0),
            ..pool()
        };
        assert_eq!(calm.remaining_life(0.0, 1.0), None);
        assert_eq!(calm.mean_rate_per_hour(), 0.0);
    }

    #[test]
    fn mean_rate_of_a_constant_hazard_is_that_hazard_and_of_pieces_one_over_the_mean() {
        let p = PoolMarket::advisor(InterruptionBucket(4));
        let r = InterruptionBucket(4).rate_per_hour();
        assert!(close(p.mean_rate_per_hour(), r));
        let fast = PoolMarket {
            lifetime: Lifetime::constant(0.5),
            ..p
        };
        assert!(close(fast.mean_rate_per_hour(), 0.5));
        // Two pieces: rate 1 for 1 h, then 0.5: mean = (1 - e^-1) + e^-1 / 0.5.
        let two = Lifetime {
            edges_hours: vec![0.0, 1.0],
            hazards_per_hour: vec![1.0, 0.5],
        };
        let e1 = (-1.0f64).exp();
        assert!(close(two.mean(), 1.0 - e1 + 2.0 * e1));
    }

    #[test]
    fn closure_draws_follow_the_probability_and_the_median() {
        let c = pool().closure;
        assert_eq!(c.draw_hours(0.6, 0.3, 0.1), 0.0);
        // u2 = 0.25 puts cos at 0: the median.
        assert!(close(c.draw_hours(0.1, 0.3, 0.25), 0.5));
        assert!(close(
            pool().mean_closure_hours(),
            0.5 * 0.5 * (0.5f64).exp()
        ));
    }

    #[test]
    fn scaling_multiplies_hazards_and_failure_chances() {
        let p = pool().scaled(2.0);
        assert_eq!(p.lifetime.hazards_per_hour, [2.0, 0.5, 0.1]);
        assert!(close(p.obtainability, 0.6));
        assert!(close(p.closure.probability, 1.0));
        assert_eq!(pool().scaled(0.0).mean_rate_per_hour(), 0.0);
    }

    fn params() -> MarketParams {
        MarketParams {
            reference_pool: "p3.2xlarge".into(),
            reference: pool(),
            mapping: Mapping {
                bucket_factors: [0.1, 0.25, 0.4, 0.6, 1.0],
                family_factors: [("p5".to_string(), 2.0)].into(),
                reference_spot_discount: 0.8,
                discount_exponent: 1.0,
            },
            pools: vec![PoolOverride {
                instance_type: "g5.xlarge".into(),
                zone: Some("use1-az1".into()),
                market: PoolMarket::advisor(InterruptionBucket(0)),
            }],
            provenance: serde_json::Value::Null,
            spread: serde_json::Value::Null,
        }
    }

    #[test]
    fn mapping_scales_the_reference_by_bucket_family_and_discount() {
        let p = params();
        let facts = |family, bucket, discount| PoolFacts {
            family,
            bucket: Some(InterruptionBucket(bucket)),
            spot_discount: discount,
        };
        let reference = p.pool("p3.2xlarge", "z", &facts("p3", 4, Some(0.8)));
        assert_eq!(reference, pool());
        let calm = p.pool("g6.xlarge", "z", &facts("g6", 0, None));
        assert!(close(calm.hazard(0.0), 0.1));
        let p5 = p.pool("p5.48xlarge", "z", &facts("p5", 4, Some(0.6)));
        // Family x2, paying 40% instead of 20% of on-demand: x2.
        assert!(close(p5.hazard(0.0), 4.0));
        let unknown = p.pool(
            "x",
            "z",
            &PoolFacts {
                family: "x",
                bucket: None,
                spot_discount: None,
            },
        );
        assert_eq!(unknown, pool());
    }

    #[test]
    fn an_override_replaces_the_mapping_for_its_pool_only() {
        let p = params();
        let facts = PoolFacts {
            family: "g5",
            bucket: Some(InterruptionBucket(4)),
            spot_discount: None,
        };
        assert_eq!(
            p.pool("g5.xlarge", "use1-az1", &facts),
            PoolMarket::advisor(InterruptionBucket(0))
        );
        assert_eq!(p.pool("g5.xlarge", "use1-az2", &facts), pool());
    }

    #[test]
    fn advisor_model_keeps_the_old_rate() {
        let facts = PoolFacts {
            family: "g5",
            bucket: Some(InterruptionBucket(2)),
            spot_discount: Some(0.5),
        };
        let m = MarketModel::Advisor.pool("g5.xlarge", "z", &facts);
        assert_eq!(m.hazard(0.0), InterruptionBucket(2).rate_per_hour());
        assert_eq!(m.hazard(500.0), InterruptionBucket(2).rate_per_hour());
        assert_eq!(m.obtainability(), 1.0);
        assert_eq!(m.mean_closure_hours(), 0.0);
    }

    #[test]
    fn a_market_file_round_trips_and_bad_values_are_named() {
        let text = serde_json::to_string(&params()).unwrap();
        assert_eq!(MarketParams::parse(&text).unwrap(), params());
        let mut bad = params();
        bad.reference.obtainability = 1.5;
        let e = MarketParams::parse(&serde_json::to_string(&bad).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("reference.obtainability"), "{e}");
        let e = MarketParams::parse("{").unwrap_err().to_string();
        assert!(e.contains("cannot parse"), "{e}");
    }

    #[test]
    fn embedded_market_file_loads_and_is_calibrated_far_above_the_advisor() {
        let p = MarketParams::embedded();
        let worst = InterruptionBucket::WORST.rate_per_hour();
        assert!(p.reference.mean_rate_per_hour() > 100.0 * worst);
        assert_eq!(MarketModel::default().name(), "calibrated");
    }

    #[test]
    fn catalog_offerings_carry_the_calibrated_market_and_the_advisor_model_on_request() {
        use crate::catalog::{CapacityType, Catalog};
        let catalog = Catalog::embedded().unwrap();
        let spot = catalog
            .offerings_of("us-east-1", "g5.xlarge")
            .find(|o| o.capacity_type == CapacityType::Spot)
            .unwrap()
            .clone();
        let advisor_rate = spot.interruption_bucket.unwrap().rate_per_hour();
        assert!(spot.interruption_rate_per_hour() > 50.0 * advisor_rate);
        let market = catalog.market("g5.xlarge", &spot.zone_id);
        assert_eq!(
            spot.interruption_rate_per_hour(),
            market.mean_rate_per_hour()
        );
        let advisor = catalog.with_market(MarketModel::Advisor);
        let same = advisor
            .offerings()
            .iter()
            .find(|o| {
                o.capacity_type == CapacityType::Spot
                    && o.zone_id == spot.zone_id
                    && o.instance_type == "g5.xlarge"
            })
            .unwrap();
        assert_eq!(same.interruption_rate_per_hour(), advisor_rate);
        assert_eq!(advisor.market_model().name(), "advisor");
    }
}
