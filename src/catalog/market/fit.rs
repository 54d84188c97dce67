//! Fitting a [`MarketParams`] from spot traces (pure: the caller reads the
//! files and hands in their text and checksums). What is fitted from what
//! (see `docs/market.md`):
//! - lifetime: a piecewise-constant hazard, the maximum-likelihood estimate
//!   under right-censoring (deaths in a piece over instance-hours lived in
//!   it; the instance still running at the end of a trace is censored
//!   there), from the preemption traces of one-instance pools of the
//!   reference type, where every drop is one instance's death;
//! - correlated reclaim: the probability that a reclaim taking one instance
//!   also takes each other running one, from multi-instance preemption
//!   traces: `sum(lost - 1) / sum(running before - 1)` over drops;
//! - closure: after a drop in a one-instance pool, how long until the
//!   relaunch shows up; a wait over [`CLOSED_AFTER_HOURS`] counts as a
//!   closure; its probability and a lognormal (mean and standard deviation
//!   of the log) of those waits;
//! - obtainability: the share of launch probes that succeeded, averaged
//!   over the zones of the reference type's availability traces.
//!
//! The spread (per-trace values) and provenance go into the output as they
//! are, so a reader can judge the pooled figures.

use super::trace::{SpotTrace, TraceKind};
use super::{Closure, Lifetime, Mapping, MarketParams, PoolMarket};
use serde::Serialize;
use std::collections::BTreeMap;

/// Piece edges of the fitted hazard, hours of age.
pub const EDGES_HOURS: [f64; 7] = [0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0];

/// A relaunch that takes longer than this (10 min, well over a p3 boot)
/// means the pool was closed.
pub const CLOSED_AFTER_HOURS: f64 = 10.0 / 60.0;

/// The SkyPilot accelerator token of the reference pool: `v100_1` is
/// p3.2xlarge.
pub const REFERENCE_TOKEN: &str = "v100_1";

/// What the fit cannot do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The traces lack what a parameter is fitted from.
    #[error("cannot fit {parameter}: {message}")]
    Missing {
        /// The parameter, e.g. `lifetime`.
        parameter: &'static str,
        /// What is missing.
        message: String,
    },
}

/// One input file as the provenance lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceFile {
    /// Path relative to the traces folder.
    pub path: String,
    /// SHA-256 of the file, hex.
    pub sha256: String,
}

/// The SkyPilot file name's pool token: `us-east-1a_v100_1.json` ->
/// (`us-east-1a`, `v100_1`).
pub fn zone_and_token(file: &str) -> (String, String) {
    let name = file.rsplit(['/', '\\']).next().unwrap_or(file);
    let stem = name.strip_suffix(".json").unwrap_or(name);
    match stem.split_once('_') {
        Some((zone, token)) => (zone.to_string(), token.to_string()),
        None => (stem.to_string(), String::new()),
    }
}

/// Deaths and instance-hours per hazard piece.
#[derive(Debug, Clone, Default)]
struct Exposure {
    deaths: Vec<f64>,
    hours: Vec<f64>,
}

impl Exposure {
    fn new() -> Exposure {
        Exposure {
            deaths: vec![0.0; EDGES_HOURS.len()],
            hours: vec![0.0; EDGES_HOURS.len()],
        }
    }

    fn add(&mut self, life_h: f64, died: bool) {
        for (i, &from) in EDGES_HOURS.iter().enumerate() {
            if life_h <= from {
                break;
            }
            let to = EDGES_HOURS.get(i + 1).copied().unwrap_or(f64::INFINITY);
            self.hours[i] += life_h.min(to) - from;
            if died && life_h <= to {
                self.deaths[i] += 1.0;
            }
        }
    }

    fn total_deaths(&self) -> f64 {
        self.deaths.iter().sum()
    }

    /// The MLE, merging a piece without deaths into the one before so that
    /// every hazard is positive.
    fn lifetime(&self) -> Option<Lifetime> {
        let mut edges: Vec<f64> = Vec::new();
        let mut pieces: Vec<(f64, f64)> = Vec::new();
        for (i, &from) in EDGES_HOURS.iter().enumerate() {
            let (d, h) = (self.deaths[i], self.hours[i]);
            match pieces.last_mut() {
                Some(last) if d == 0.0 || h == 0.0 => {
                    last.0 += d;
                    last.1 += h;
                }
                _ => {
                    edges.push(from);
                    pieces.push((d, h));
                }
            }
        }
        // A first piece without deaths took nothing: merge forward.
        while pieces.len() > 1 && pieces[0].0 == 0.0 {
            let (d, h) = pieces.remove(0);
            pieces[0].0 += d;
            pieces[0].1 += h;
            edges.remove(1);
        }
        if pieces.iter().all(|(d, _)| *d == 0.0) {
            return None;
        }
        Some(Lifetime {
            edges_hours: edges,
            hazards_per_hour: pieces.iter().map(|(d, h)| d / h).collect(),
        })
    }
}

/// Lifetimes (and whether each ended in a drop) and relaunch waits of a
/// one-instance preemption trace.
fn lives(t: &SpotTrace) -> (Vec<(f64, bool)>, Vec<f64>) {
    let g = t.gap_hours();
    let mut lives = Vec::new();
    let mut waits = Vec::new();
    let mut up: Option<usize> = None;
    let mut down: Option<usize> = None;
    for (i, &n) in t.data.iter().enumerate() {
        if n > 0 {
            if let Some(d) = down.take() {
                waits.push((i - d) as f64 * g);
            }
            up.get_or_insert(i);
        } else if let Some(u) = up.take() {
            lives.push(((i - u) as f64 * g, true));
            down = Some(i);
        }
    }
    if let Some(u) = up {
        lives.push(((t.data.len() - u) as f64 * g, false));
    }
    (lives, waits)
}

/// Per-trace figures of a preemption trace.
#[derive(Debug, Clone, Serialize)]
pub struct PreemptionSpread {
    /// File.
    pub file: String,
    /// Zone from the file name.
    pub zone: String,
    /// Pool token (`v100_1` = p3.2xlarge).
    pub pool: String,
    /// Instances kept running.
    pub pool_size: u32,
    /// Trace length, hours.
    pub hours: f64,
    /// Instance-hours run.
    pub instance_hours: f64,
    /// Instances lost.
    pub lost: u32,
    /// Lost per instance-hour.
    pub rate_per_instance_hour: f64,
    /// Drops (reclaim events) by how many instances went.
    pub drops_by_size: BTreeMap<u32, u32>,
    /// Fitted piecewise hazard (one-instance pools only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<Lifetime>,
    /// Median observed lifetime, hours (one-instance pools only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_lifetime_hours: Option<f64>,
}

/// Per-trace figures of an availability trace.
#[derive(Debug, Clone, Serialize)]
pub struct AvailabilitySpread {
    /// File.
    pub file: String,
    /// Zone from the file name.
    pub zone: String,
    /// Pool token.
    pub pool: String,
    /// Launches probed per tick.
    pub probes_per_tick: u32,
    /// Share of probed launches that succeeded.
    pub obtainability: f64,
    /// Median length of a run of ticks where nothing launched, hours.
    pub median_closed_hours: Option<f64>,
}

/// The fit's spread: every trace's own figures.
#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    /// Preemption traces.
    pub preemption: Vec<PreemptionSpread>,
    /// Availability traces.
    pub availability: Vec<AvailabilitySpread>,
    /// Co-reclaim probability per multi-instance trace.
    pub co_reclaim_by_trace: BTreeMap<String, f64>,
    /// Pooled figures of the reference: reclaims per instance-hour
    /// (lost / instance-hours over its one-instance traces), and the same
    /// from the fitted model.
    pub reference_measured_rate_per_hour: f64,
    /// The fitted model's [`PoolMarket::mean_rate_per_hour`].
    pub reference_model_rate_per_hour: f64,
    /// How many reclaims and relaunch waits the lifetime and closure fits
    /// rest on.
    pub reference_lifetimes: u32,
    /// Relaunch waits after a reclaim.
    pub reference_relaunch_waits: u32,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

/// The stated default mapping (see `docs/market.md`): bucket factors are
/// the advisor buckets' own rates `-ln(1 - p)` relative to the worst
/// bucket (the reference p3.2xlarge is in the worst bucket in every
/// region); no family factor; a pool paying a larger share of on-demand
/// than p3.2xlarge (79 % discount) gets a hazard higher by the square root
/// of the ratio.
pub fn stated_mapping() -> Mapping {
    use super::super::InterruptionBucket;
    let worst = InterruptionBucket::WORST.rate_per_hour();
    let factor = |b: u8| {
        let f = InterruptionBucket(b).rate_per_hour() / worst;
        (f * 1000.0).round() / 1000.0
    };
    Mapping {
        bucket_factors: [factor(0), factor(1), factor(2), factor(3), 1.0],
        family_factors: BTreeMap::new(),
        reference_spot_discount: 0.79,
        discount_exponent: 0.5,
    }
}

/// Fits the reference pool's market from `traces` (see the module doc),
/// with the [`stated_mapping`].
///
/// # Errors
/// [`Error::Missing`] when the traces hold no one-instance preemption
/// trace of the reference pool with a reclaim, or no availability trace
/// of it.
pub fn fit(
    traces: &[SpotTrace],
    files: Vec<SourceFile>,
    command: &str,
) -> Result<MarketParams, Error> {
    let mut exposure = Exposure::new();
    let mut waits = Vec::new();
    let mut preemption = Vec::new();
    let mut co_reclaim_by_trace = BTreeMap::new();
    let (mut co_num, mut co_den) = (0.0, 0.0);
    let (mut ref_lost, mut ref_hours) = (0.0, 0.0);
    for t in traces.iter().filter(|t| t.kind == TraceKind::Preemption) {
        let (zone, pool) = zone_and_token(&t.file);
        let size = t.size();
        let instance_hours: f64 = t.data.iter().map(|&n| f64::from(n)).sum::<f64>() * t.gap_hours();
        let mut drops_by_size = BTreeMap::new();
        let (mut num, mut den, mut lost) = (0.0, 0.0, 0);
        for (_, before, gone) in t.drops() {
            *drops_by_size.entry(gone).or_insert(0) += 1;
            lost += gone;
            if before > 1 {
                num += f64::from(gone - 1);
                den += f64::from(before - 1);
            }
        }
        let (mut lifetime, mut median_lifetime_hours) = (None, None);
        if size == 1 {
            let (l, w) = lives(t);
            let mut own = Exposure::new();
            for &(h, died) in &l {
                own.add(h, died);
            }
            lifetime = own.lifetime();
            median_lifetime_hours = median(l.iter().filter(|x| x.1).map(|x| x.0).collect());
            if pool == REFERENCE_TOKEN {
                for &(h, died) in &l {
                    exposure.add(h, died);
                }
                waits.extend(w);
                ref_lost += f64::from(lost);
                ref_hours += instance_hours;
            }
        } else if den > 0.0 {
            co_reclaim_by_trace.insert(t.file.clone(), num / den);
            if pool == REFERENCE_TOKEN {
                co_num += num;
                co_den += den;
            }
        }
        preemption.push(PreemptionSpread {
            file: t.file.clone(),
            zone,
            pool,
            pool_size: size,
            hours: t.hours(),
            instance_hours,
            lost,
            rate_per_instance_hour: if instance_hours > 0.0 {
                f64::from(lost) / instance_hours
            } else {
                0.0
            },
            drops_by_size,
            lifetime,
            median_lifetime_hours,
        });
    }
    let lifetime = exposure.lifetime().ok_or_else(|| Error::Missing {
        parameter: "lifetime",
        message: format!(
            "no reclaim in a one-instance preemption trace of {REFERENCE_TOKEN} (p3.2xlarge)"
        ),
    })?;
    let mut availability = Vec::new();
    let mut reference_obtainability = Vec::new();
    for t in traces.iter().filter(|t| t.kind == TraceKind::Availability) {
        let (zone, pool) = zone_and_token(&t.file);
        let probes = t.size().max(1);
        let share = t
            .data
            .iter()
            .map(|&n| f64::from(n.min(probes)))
            .sum::<f64>()
            / (f64::from(probes) * t.data.len() as f64);
        if pool == REFERENCE_TOKEN && probes == 1 {
            reference_obtainability.push(share);
        }
        let closed = t
            .zero_runs()
            .into_iter()
            .map(|(_, n)| n as f64 * t.gap_hours())
            .collect();
        availability.push(AvailabilitySpread {
            file: t.file.clone(),
            zone,
            pool,
            probes_per_tick: probes,
            obtainability: share,
            median_closed_hours: median(closed),
        });
    }
    if reference_obtainability.is_empty() {
        return Err(Error::Missing {
            parameter: "obtainability",
            message: format!("no one-probe availability trace of {REFERENCE_TOKEN} (p3.2xlarge)"),
        });
    }
    let obtainability =
        reference_obtainability.iter().sum::<f64>() / reference_obtainability.len() as f64;
    let relaunch_waits = waits.len() as u32;
    let closed: Vec<f64> = waits
        .into_iter()
        .filter(|w| *w > CLOSED_AFTER_HOURS)
        .collect();
    let closure = if closed.is_empty() {
        Closure::NONE
    } else {
        let logs: Vec<f64> = closed.iter().map(|w| w.ln()).collect();
        let mu = logs.iter().sum::<f64>() / logs.len() as f64;
        let var = logs.iter().map(|l| (l - mu).powi(2)).sum::<f64>() / logs.len() as f64;
        Closure {
            probability: closed.len() as f64 / f64::from(relaunch_waits.max(1)),
            median_hours: mu.exp(),
            sigma: var.sqrt(),
        }
    };
    let reference = PoolMarket {
        lifetime,
        co_reclaim_probability: if co_den > 0.0 { co_num / co_den } else { 0.0 },
        closure,
        obtainability,
    };
    let spread = Spread {
        preemption,
        availability,
        co_reclaim_by_trace,
        reference_measured_rate_per_hour: if ref_hours > 0.0 {
            ref_lost / ref_hours
        } else {
            0.0
        },
        reference_model_rate_per_hour: reference.mean_rate_per_hour(),
        reference_lifetimes: exposure.total_deaths() as u32,
        reference_relaunch_waits: relaunch_waits,
    };
    let provenance = serde_json::json!({
        "command": command,
        "generator": format!("quartermaster {}", env!("CARGO_PKG_VERSION")),
        "fit": {
            "lifetime": format!("piecewise-constant hazard, MLE with right-censoring at trace end (deaths / instance-hours per piece; pieces without deaths merged into the previous), edges {EDGES_HOURS:?} h, one-instance {REFERENCE_TOKEN} preemption traces"),
            "co_reclaim_probability": format!("sum(lost - 1) / sum(running before - 1) over drops of multi-instance {REFERENCE_TOKEN} preemption traces"),
            "closure": format!("relaunch waits after a drop in one-instance {REFERENCE_TOKEN} traces; waits over {CLOSED_AFTER_HOURS:.4} h are closures: probability = share, lognormal by the mean and standard deviation of the log"),
            "obtainability": format!("share of successful probes, mean over the zones of one-probe {REFERENCE_TOKEN} availability traces"),
            "mapping": "not fitted: the stated assumption of docs/market.md",
        },
        "reference_pool": "p3.2xlarge (SkyPilot token v100_1)",
        "files": files,
    });
    Ok(MarketParams {
        reference_pool: "p3.2xlarge".into(),
        reference,
        mapping: stated_mapping(),
        pools: Vec::new(),
        provenance,
        spread: serde_json::to_value(spread).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// A one-instance preemption trace drawn from `truth`: each life drawn
    /// by inverting the cumulative hazard, then a relaunch wait (closed
    /// with probability 1/2 for 1 h, else one tick).
    fn synthetic(truth: &PoolMarket, ticks: usize, gap_s: f64, seed: u64) -> SpotTrace {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let g = gap_s / 3600.0;
        let mut data = Vec::with_capacity(ticks);
        while data.len() < ticks {
            let e = -(1.0 - rng.random::<f64>()).ln();
            let life = truth.remaining_life(0.0, e).unwrap();
            let n = ((life / g).round() as usize).max(1);
            data.extend(std::iter::repeat_n(1, n));
            let wait = if rng.random::<f64>() < 0.5 {
                1.0 / g
            } else {
                1.0
            };
            data.extend(std::iter::repeat_n(0, wait.round() as usize));
        }
        data.truncate(ticks);
        SpotTrace {
            file: format!("preemption/1-node/z{seed}_v100_1.json"),
            kind: TraceKind::Preemption,
            gap_seconds: gap_s,
            data,
        }
    }

    fn availability(share_up: f64) -> SpotTrace {
        let up = (share_up * 100.0) as usize;
        SpotTrace {
            file: "availability/1-node/za_v100_1.json".into(),
            kind: TraceKind::Availability,
            gap_seconds: 600.0,
            data: (0..100).map(|i| u32::from(i < up)).collect(),
        }
    }

    #[test]
    fn fitting_traces_drawn_from_known_parameters_recovers_them() {
        let truth = PoolMarket {
            lifetime: Lifetime {
                edges_hours: EDGES_HOURS.to_vec(),
                hazards_per_hour: vec![1.6, 0.8, 0.6, 0.4, 0.25, 0.2, 0.15],
            },
            co_reclaim_probability: 0.0,
            closure: Closure::NONE,
            obtainability: 0.7,
        };
        let traces: Vec<SpotTrace> = (0..4)
            .map(|s| synthetic(&truth, 200_000, 30.0, s))
            .chain([availability(0.7)])
            .collect();
        let fitted = fit(&traces, Vec::new(), "test").unwrap();
        let got = &fitted.reference.lifetime;
        assert_eq!(got.edges_hours, EDGES_HOURS);
        for (i, (g, t)) in got
            .hazards_per_hour
            .iter()
            .zip(&truth.lifetime.hazards_per_hour)
            .enumerate()
        {
            assert!((g / t - 1.0).abs() < 0.2, "piece {i}: fitted {g}, true {t}");
        }
        assert!((fitted.reference.obtainability - 0.7).abs() < 1e-9);
        // Half of the relaunch waits were one hour: closures of median 1 h.
        let c = fitted.reference.closure;
        assert!((c.probability - 0.5).abs() < 0.05, "{c:?}");
        assert!((c.median_hours - 1.0).abs() < 0.01, "{c:?}");
        let r = fitted.reference.mean_rate_per_hour();
        let truth_r = truth.mean_rate_per_hour();
        assert!((r / truth_r - 1.0).abs() < 0.1, "{r} vs {truth_r}");
    }

    #[test]
    fn co_reclaim_is_the_share_of_other_instances_a_drop_takes() {
        let four = SpotTrace {
            file: "preemption/4-node/z_v100_1.json".into(),
            kind: TraceKind::Preemption,
            gap_seconds: 300.0,
            // 4 -> 2: one plus one of three others; 4 -> 3: none of three.
            data: vec![4, 2, 4, 3, 4],
        };
        let one = SpotTrace {
            file: "preemption/1-node/z_v100_1.json".into(),
            kind: TraceKind::Preemption,
            gap_seconds: 300.0,
            data: vec![1, 1, 0, 1],
        };
        let fitted = fit(&[four, one, availability(0.5)], Vec::new(), "test").unwrap();
        assert!((fitted.reference.co_reclaim_probability - 1.0 / 6.0).abs() < 1e-12);
    }

    #[test]
    fn fitting_without_the_traces_a_parameter_needs_says_which() {
        let e = fit(&[availability(0.5)], Vec::new(), "test").unwrap_err();
        assert!(e.to_string().contains("lifetime"), "{e}");
        let one = SpotTrace {
            file: "preemption/1-node/z_v100_1.json".into(),
            kind: TraceKind::Preemption,
            gap_seconds: 300.0,
            data: vec![1, 1, 0, 1],
        };
        let e = fit(&[one], Vec::new(), "test").unwrap_err();
        assert!(e.to_string().contains("obtainability"), "{e}");
    }

    #[test]
    fn file_names_give_zone_and_pool() {
        assert_eq!(
            zone_and_token("a/b/us-east-1a_v100_1.json"),
            ("us-east-1a".to_string(), "v100_1".to_string())
        );
    }
}
