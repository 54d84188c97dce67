//! Checked time arithmetic for the decisions. Durations reach the core from
//! cluster objects (a pod's checkpoint annotations, a pool's grace periods,
//! a ProvisioningRequest's parameters) and from the catalog; parsing bounds
//! them at the edge (`cluster::pod`, `controller::podgroups`), and these
//! helpers are the floor under every sum: a time plus any duration is a
//! time, saturating at the ends of what `chrono` can represent, never a
//! panic. Every `Time + duration` in `core` goes through here; a plain `+`
//! on a [`Time`] panics on overflow.

use super::Time;
use std::time::Duration;

/// `t + d`, saturating at the end of time.
pub fn after(t: Time, d: Duration) -> Time {
    chrono::TimeDelta::from_std(d)
        .ok()
        .and_then(|d| t.checked_add_signed(d))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC)
}

/// `t - d`, saturating at the beginning of time.
pub fn before(t: Time, d: Duration) -> Time {
    chrono::TimeDelta::from_std(d)
        .ok()
        .and_then(|d| t.checked_sub_signed(d))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC)
}

/// `s` seconds as a duration: negative and NaN are zero, past the largest
/// duration (infinity included) is the largest duration. Where
/// `Duration::from_secs_f64` panics, this saturates.
pub fn secs(s: f64) -> Duration {
    if s.is_nan() || s <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
}

/// Makes `next` the earlier of itself and `at`: the rules gather their next
/// deadline this way.
pub fn sooner(next: &mut Option<Time>, at: Time) {
    *next = Some(next.map_or(at, |t| t.min(at)));
}

/// `t + s` seconds, rounded up to the millisecond (a negative `s` moves
/// back), saturating at the ends of time.
pub fn after_secs(t: Time, s: f64) -> Time {
    if s < 0.0 {
        return before(t, secs(-s));
    }
    after(t, secs((s * 1000.0).ceil() / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> Time {
        chrono::Utc.with_ymd_and_hms(2026, 1, 5, 0, 0, 0).unwrap()
    }

    #[test]
    fn sums_within_range_are_exact() {
        let t = t0();
        assert_eq!(
            after(t, Duration::from_secs(90)),
            t + chrono::TimeDelta::seconds(90)
        );
        assert_eq!(
            before(t, Duration::from_secs(90)),
            t - chrono::TimeDelta::seconds(90)
        );
        assert_eq!(
            after_secs(t, 1.0001),
            t + chrono::TimeDelta::milliseconds(1001)
        );
        assert_eq!(after_secs(t, -2.0), t - chrono::TimeDelta::seconds(2));
        assert_eq!(secs(1.5), Duration::from_millis(1500));
    }

    #[test]
    fn sums_past_the_ends_of_time_saturate_instead_of_panicking() {
        let t = t0();
        let end = chrono::DateTime::<chrono::Utc>::MAX_UTC;
        let start = chrono::DateTime::<chrono::Utc>::MIN_UTC;
        // 6,000,000,000 hours: the annotation value that used to panic.
        assert_eq!(after_secs(t, 6e9 * 3600.0), end);
        assert_eq!(after(t, Duration::MAX), end);
        assert_eq!(after(end, Duration::from_secs(1)), end);
        assert_eq!(before(t, Duration::MAX), start);
        assert_eq!(after_secs(t, f64::INFINITY), end);
        assert_eq!(after_secs(t, f64::NEG_INFINITY), start);
        assert_eq!(after_secs(t, f64::NAN), t);
        assert_eq!(secs(f64::MAX), Duration::MAX);
        assert_eq!(secs(1e300), Duration::MAX);
        assert_eq!(secs(-5.0), Duration::ZERO);
        assert_eq!(secs(f64::NAN), Duration::ZERO);
    }
}
