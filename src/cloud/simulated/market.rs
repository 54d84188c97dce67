//! The calibrated spot market in the simulated cloud (see
//! `docs/simulated-cloud.md` and `docs/market.md`): each spot instance's
//! reclaim time drawn from its pool's age-dependent hazard (times the
//! storms that cover it), correlated reclaims, closures after a reclaim,
//! obtainability, and the replay of SkyPilot traces onto pools. Every draw
//! comes from a stream named by the pool and a per-pool counter, so two
//! strategies launching into a pool in the same order meet the same
//! lifetimes whatever they name their claims.

use super::config::Storm;
use super::interruptions::{hours, hours_between};
use crate::catalog::market::trace::{SpotTrace, TraceKind};
use crate::catalog::PoolMarket;
use crate::core::{OfferingKey, Time};
use std::time::Duration;

/// The pool's hazard multiplier over time: `(from, multiplier)` sorted, the
/// first at the epoch (storms multiply; overlapping storms multiply).
pub(super) fn storm_segments(
    storms: &[Storm],
    pool: &OfferingKey,
    epoch: Time,
) -> Vec<(Time, f64)> {
    let storms: Vec<&Storm> = storms.iter().filter(|s| s.covers(pool)).collect();
    let mut cuts: Vec<Time> = storms
        .iter()
        .flat_map(|s| [s.from, s.until])
        .filter(|t| *t > epoch)
        .collect();
    cuts.push(epoch);
    cuts.sort_unstable();
    cuts.dedup();
    cuts.into_iter()
        .map(|t| {
            let m = storms
                .iter()
                .filter(|s| s.from <= t && t < s.until)
                .map(|s| s.multiplier)
                .product::<f64>();
            (t, m)
        })
        .collect()
}

/// When an instance running since `running`, now at `from`, is reclaimed:
/// the time at which its cumulative hazard (times the storm multiplier)
/// since `from` reaches `unit_exp`; `None` if never (within a century).
pub(super) fn reclaim_time(
    market: &PoolMarket,
    segments: &[(Time, f64)],
    running: Time,
    from: Time,
    unit_exp: f64,
) -> Option<Time> {
    let mut need = unit_exp;
    let mut t = from;
    let horizon = from + hours(100.0 * 365.0 * 24.0);
    let mut seg = segments.partition_point(|(s, _)| *s <= t).saturating_sub(1);
    while t < horizon {
        let m = segments.get(seg).map_or(1.0, |s| s.1);
        let end = segments.get(seg + 1).map(|s| s.0).filter(|e| *e > t);
        let age = hours_between(running, t).max(0.0);
        if m > 0.0 {
            let span = end.map(|e| hours_between(t, e));
            let available = span.map(|s| m * market.expected_interruptions(age, s));
            match available {
                Some(a) if a < need => need -= a,
                _ => {
                    let left = market.remaining_life(age, need / m)?;
                    return Some(t + hours(left));
                }
            }
        }
        match end {
            Some(e) => {
                t = e;
                seg += 1;
            }
            None => return None,
        }
    }
    None
}

/// A trace replayed onto pools.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceReplay {
    /// The parsed trace.
    pub trace: SpotTrace,
    /// Pools it drives.
    pub pools: Vec<OfferingKey>,
    /// How much of the trace's beginning to skip: the tick at `offset`
    /// lines up with the simulation's epoch.
    pub offset: Duration,
}

/// One pool's replayed timeline.
#[derive(Debug, Clone, Default)]
pub(super) struct Replayed {
    /// Reclaim events: `(time, share of the running instances taken)`.
    pub reclaims: Vec<(Time, f64)>,
    /// Closed intervals `[from, until)`, sorted.
    pub closed: Vec<(Time, Time)>,
    /// Whether a preemption trace drives the pool (its own hazard is then
    /// off).
    pub preemption: bool,
}

impl Replayed {
    /// Adds a trace's events, shifted so that tick `offset / gap` is at
    /// `epoch`.
    pub(super) fn add(&mut self, replay: &TraceReplay, epoch: Time) {
        let t = &replay.trace;
        let gap = t.gap_hours();
        let skip = replay.offset.as_secs_f64() / 3600.0;
        let at = |tick: usize| epoch + hours(tick as f64 * gap - skip);
        let visible = |tick: usize| tick as f64 * gap >= skip;
        if t.kind == TraceKind::Preemption {
            self.preemption = true;
            for (tick, before, lost) in t.drops() {
                if visible(tick) {
                    self.reclaims
                        .push((at(tick), f64::from(lost) / f64::from(before)));
                }
            }
        }
        for (first, len) in t.zero_runs() {
            let (from, until) = (at(first), at(first + len));
            if until > epoch {
                self.closed.push((from.max(epoch), until));
            }
        }
        self.reclaims.sort_by_key(|a| a.0);
        self.closed.sort();
    }

    /// Whether the pool is closed at `t`.
    pub(super) fn is_closed(&self, t: Time) -> bool {
        let i = self.closed.partition_point(|(from, _)| *from <= t);
        self.closed[..i].iter().rev().any(|(_, until)| t < *until)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::market::{Closure, Lifetime};
    use crate::catalog::CapacityType;
    use chrono::TimeZone;

    fn epoch() -> Time {
        chrono::Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap()
    }

    fn pool() -> OfferingKey {
        OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "use1-az1".into(),
            capacity_type: CapacityType::Spot,
        }
    }

    fn market() -> PoolMarket {
        PoolMarket {
            lifetime: Lifetime {
                edges_hours: vec![0.0, 1.0],
                hazards_per_hour: vec![1.0, 0.1],
            },
            co_reclaim_probability: 0.0,
            closure: Closure::NONE,
            obtainability: 1.0,
        }
    }

    #[test]
    fn reclaim_time_follows_the_instance_age() {
        let segments = storm_segments(&[], &pool(), epoch());
        // From launch, a unit of hazard is used up in the first hour.
        let t = reclaim_time(&market(), &segments, epoch(), epoch(), 1.0).unwrap();
        assert_eq!(t, epoch() + chrono::TimeDelta::hours(1));
        // At age 2 h the hazard is 0.1: the same draw lasts 10 h.
        let later = epoch() + chrono::TimeDelta::hours(2);
        let t = reclaim_time(&market(), &segments, epoch(), later, 1.0).unwrap();
        assert_eq!(t, later + chrono::TimeDelta::hours(10));
    }

    #[test]
    fn a_storm_multiplies_the_hazard_in_its_window() {
        let from = epoch() + chrono::TimeDelta::hours(3);
        let storm = Storm::everywhere(from, from + chrono::TimeDelta::hours(1), 10.0);
        let segments = storm_segments(&[storm], &pool(), epoch());
        // Age 2 h: 0.1 from 2 to 3 h, then 1.0 an hour in the storm.
        let start = epoch() + chrono::TimeDelta::hours(2);
        let t = reclaim_time(&market(), &segments, epoch(), start, 0.6).unwrap();
        assert_eq!(t, from + chrono::TimeDelta::minutes(30));
    }

    #[test]
    fn a_replayed_trace_gives_reclaims_and_closures_at_its_ticks() {
        let trace = SpotTrace {
            file: "x.json".into(),
            kind: TraceKind::Preemption,
            gap_seconds: 600.0,
            data: vec![2, 2, 1, 0, 0, 2, 2],
        };
        let mut r = Replayed::default();
        r.add(
            &TraceReplay {
                trace,
                pools: vec![pool()],
                offset: Duration::from_secs(600),
            },
            epoch(),
        );
        let m = |n: i64| epoch() + chrono::TimeDelta::minutes(n);
        assert_eq!(r.reclaims, [(m(10), 0.5), (m(20), 1.0)]);
        assert_eq!(r.closed, [(m(20), m(40))]);
        assert!(r.is_closed(m(25)) && !r.is_closed(m(40)) && !r.is_closed(m(5)));
        assert!(r.preemption);
    }
}
