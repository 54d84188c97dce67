//! The spot market's reclaim events: one seeded Poisson process per pool,
//! running from the configuration's epoch whatever is launched, so that two
//! strategies simulated with the same seed meet the same reclaims. Also the
//! stream derivation every seeded draw of the simulated cloud uses.

use super::config::Storm;
use crate::core::{OfferingKey, Time};
use chrono::TimeDelta;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Events further than this from the epoch never happen (keeps time
/// arithmetic far from overflow for pools with tiny rates).
const HORIZON_HOURS: f64 = 100.0 * 365.0 * 24.0;

/// 64-bit FNV-1a: a stable hash (unlike `std`'s, which may change between
/// Rust releases) to name random streams.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// The random stream named `parts` under `seed`: ChaCha8 seeded from the
/// seed, on the stream numbered by the FNV-1a hash of the name. Streams of
/// different names are independent; a stream's draws do not depend on any
/// other stream's use.
pub(super) fn stream(seed: u64, parts: &[&str]) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(fnv1a(parts));
    rng
}

/// A pool's name in stream names.
pub(super) fn pool_name(pool: &OfferingKey) -> String {
    format!(
        "{}/{}/{}",
        pool.instance_type, pool.zone, pool.capacity_type
    )
}

/// Hours as a time delta, to the millisecond.
pub(super) fn hours(h: f64) -> TimeDelta {
    TimeDelta::milliseconds((h * 3_600_000.0).round() as i64)
}

/// Hours from `a` to `b`.
pub(super) fn hours_between(a: Time, b: Time) -> f64 {
    (b - a).num_milliseconds() as f64 / 3_600_000.0
}

/// One pool's reclaim events: a Poisson process of intensity
/// `rate x storm multiplier(t)` per hour from the epoch, drawn by inverting
/// the integrated intensity against unit exponentials from the pool's own
/// stream. Storms therefore move events without consuming different
/// randomness: with and without a storm the same draws are used.
#[derive(Debug, Clone)]
pub(super) struct PoolProcess {
    rng: ChaCha8Rng,
    rate: f64,
    /// `(from, multiplier)`, sorted: the multiplier holds from `from` to the
    /// next entry; the first entry is the epoch.
    segments: Vec<(Time, f64)>,
    cursor: Time,
    horizon: Time,
    events: Vec<Time>,
    exhausted: bool,
}

impl PoolProcess {
    /// The process of `pool` at hourly `rate`, with the storms that cover it.
    pub(super) fn new(
        seed: u64,
        pool: &OfferingKey,
        rate: f64,
        storms: &[Storm],
        epoch: Time,
    ) -> PoolProcess {
        let segments = super::market::storm_segments(storms, pool, epoch);
        PoolProcess {
            rng: stream(seed, &["reclaim", &pool_name(pool)]),
            rate,
            segments,
            cursor: epoch,
            horizon: epoch + hours(HORIZON_HOURS),
            events: Vec::new(),
            exhausted: rate.is_nan() || rate <= 0.0,
        }
    }

    /// The `i`-th reclaim event (0-based), if the pool ever has that many.
    pub(super) fn event(&mut self, i: usize) -> Option<Time> {
        while self.events.len() <= i && !self.exhausted {
            self.generate();
        }
        self.events.get(i).copied()
    }

    /// The index of the first event at or after `t` (possibly one that does
    /// not exist: then [`PoolProcess::event`] returns `None` for it).
    pub(super) fn first_index_at_or_after(&mut self, t: Time) -> usize {
        while !self.exhausted && self.events.last().is_none_or(|e| *e < t) {
            self.generate();
        }
        self.events.partition_point(|e| *e < t)
    }

    fn generate(&mut self) {
        // A unit exponential: the integrated intensity to the next event.
        let u: f64 = self.rng.random();
        let mut need = -(1.0 - u).ln();
        let mut t = self.cursor;
        let mut seg = self.segments.partition_point(|(from, _)| *from <= t) - 1;
        loop {
            let rate = self.rate * self.segments[seg].1;
            let end = self.segments.get(seg + 1).map(|(from, _)| *from);
            if rate > 0.0 {
                let span = end.map(|e| hours_between(t, e));
                if span.is_none_or(|s| need <= rate * s) {
                    let h = need / rate;
                    if hours_between(t, self.horizon) < h {
                        self.exhausted = true;
                        return;
                    }
                    let at = (t + hours(h)).max(self.cursor);
                    self.cursor = at;
                    self.events.push(at);
                    return;
                }
                need -= rate * span.unwrap_or(0.0);
            }
            match end {
                Some(e) => {
                    t = e;
                    seg += 1;
                }
                None => {
                    self.exhausted = true;
                    return;
                }
            }
        }
    }
}

/// Whether reclaim event `index` of `pool` takes `claim`, when each event
/// takes a share `share` of the pool: an independent draw keyed by all four.
pub(super) fn takes(seed: u64, pool: &OfferingKey, index: usize, claim: &str, share: f64) -> bool {
    if share >= 1.0 {
        return true;
    }
    let index = index.to_string();
    let u: f64 = stream(seed, &["take", &pool_name(pool), &index, claim]).random();
    u < share
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::CapacityType;
    use chrono::TimeZone;

    fn pool() -> OfferingKey {
        OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "use1-az1".into(),
            capacity_type: CapacityType::Spot,
        }
    }

    fn epoch() -> Time {
        chrono::Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap()
    }

    #[test]
    fn mean_gap_between_reclaim_events_is_one_over_the_rate() {
        let mut p = PoolProcess::new(1, &pool(), 2.0, &[], epoch());
        let n = 4000;
        let last = p.event(n - 1).unwrap();
        let mean = hours_between(epoch(), last) / n as f64;
        assert!((mean - 0.5).abs() < 0.03, "mean gap {mean} h");
    }

    #[test]
    fn a_storm_packs_events_into_its_window_using_the_same_draws() {
        let calm = PoolProcess::new(7, &pool(), 0.01, &[], epoch()).event(0);
        let from = epoch() + TimeDelta::hours(1);
        let until = epoch() + TimeDelta::hours(2);
        let storm = Storm::everywhere(from, until, 10_000.0);
        let mut stormy = PoolProcess::new(7, &pool(), 0.01, &[storm], epoch());
        let first = stormy.event(0).unwrap();
        assert!(from <= first && first < until, "{first}");
        // Calm draws its first event long after the window; the storm
        // version consumed the same first draw.
        assert!(calm.unwrap() > until);
    }

    #[test]
    fn a_pool_with_rate_zero_never_reclaims() {
        let mut p = PoolProcess::new(1, &pool(), 0.0, &[], epoch());
        assert_eq!(p.event(0), None);
        assert_eq!(p.first_index_at_or_after(epoch()), 0);
    }

    #[test]
    fn stream_names_separate_draws() {
        let a: u64 = stream(1, &["a", "b"]).random();
        let b: u64 = stream(1, &["ab"]).random();
        let c: u64 = stream(2, &["a", "b"]).random();
        let a2: u64 = stream(1, &["a", "b"]).random();
        assert_eq!(a, a2);
        assert_ne!(a, b);
        assert_ne!(a, c);
    }
}
