//! Per-claim backoff of the NodeClaim lifecycle: a step that failed or
//! could not go ahead yet (EC2 throttled the launch, the API server
//! answered 5xx) is tried again after an exponential backoff with jitter,
//! claim by claim, so that one throttled claim waits without holding the
//! others, and many throttled claims do not come back in step.
//!
//! It agrees with the SDK's own retries ([`crate::cloud::aws::retry_config`]):
//! each AWS call is already tried up to three times with the SDK's jittered
//! backoff (1 s doubling, at most 20 s); what still fails reaches the
//! lifecycle as not ready, and the claim waits here from [`BASE`] (longer
//! than the SDK's first waits) doubling up to [`CAP`] (shorter than the
//! launch timeout, so that a throttled claim is tried several times before
//! it is given up). "Equal jitter": the wait is half the backoff plus a
//! random part of up to the other half.

use crate::core::Time;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// First wait after a failure.
pub const BASE: Duration = Duration::from_secs(5);

/// Longest wait.
pub const CAP: Duration = Duration::from_secs(120);

/// Failures in a row and when to try again, per key.
#[derive(Debug)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    until: HashMap<String, (u32, Time)>,
    rng: rand_chacha::ChaCha8Rng,
}

impl Backoff {
    /// A backoff from `base` doubling up to `cap`, its jitter drawn from
    /// `seed`.
    pub fn new(base: Duration, cap: Duration, seed: u64) -> Backoff {
        Backoff {
            base,
            cap,
            until: HashMap::new(),
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// Whether `key` may be tried at `now`.
    pub fn ready(&self, key: &str, now: Time) -> bool {
        self.until.get(key).is_none_or(|(_, t)| *t <= now)
    }

    /// `key` failed at `now` (again): it waits its backoff, with jitter.
    /// Returns when it may be tried again.
    pub fn failed(&mut self, key: &str, now: Time) -> Time {
        let failures = self.until.get(key).map_or(0, |(f, _)| *f) + 1;
        let full = self
            .base
            .checked_mul(1u32 << failures.saturating_sub(1).min(20))
            .unwrap_or(self.cap)
            .min(self.cap);
        let half = full / 2;
        let jitter = half.mul_f64(self.rng.random::<f64>());
        let at = crate::core::time::after(now, half + jitter);
        self.until.insert(key.to_string(), (failures, at));
        at
    }

    /// `key` waits until `at` without having failed (a drain waiting for
    /// its pods); its failure count is kept.
    pub fn wait_until(&mut self, key: &str, at: Time) {
        let failures = self.until.get(key).map_or(0, |(f, _)| *f);
        self.until.insert(key.to_string(), (failures, at));
    }

    /// `key` went ahead: no wait, no failures.
    pub fn succeeded(&mut self, key: &str) {
        self.until.remove(key);
    }

    /// Forgets the keys not in `present`.
    pub fn retain(&mut self, present: &HashSet<String>) {
        self.until.retain(|k, _| present.contains(k));
    }

    /// The earliest time a waiting key may be tried again, after `now`.
    pub fn next_due(&self, now: Time) -> Option<Time> {
        self.until
            .values()
            .map(|(_, t)| *t)
            .filter(|t| *t > now)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(s: i64) -> Time {
        chrono::Utc.timestamp_opt(1_767_571_200 + s, 0).unwrap()
    }

    fn wait(b: &mut Backoff, key: &str, now: Time) -> f64 {
        (b.failed(key, now) - now).num_milliseconds() as f64 / 1000.0
    }

    #[test]
    fn each_failure_doubles_the_wait_with_jitter_up_to_the_cap() {
        let mut b = Backoff::new(BASE, CAP, 7);
        for (n, full) in [5.0, 10.0, 20.0, 40.0, 80.0, 120.0, 120.0]
            .into_iter()
            .enumerate()
        {
            let w = wait(&mut b, "c", t(0));
            assert!(
                w >= full / 2.0 && w <= full,
                "failure {}: {w} s not in [{}, {full}]",
                n + 1,
                full / 2.0
            );
        }
        b.succeeded("c");
        assert!(b.ready("c", t(0)));
        assert!(wait(&mut b, "c", t(0)) <= 5.0, "a success starts again");
    }

    #[test]
    fn the_claims_backoff_starts_after_the_sdks_first_retries_and_ends_before_the_launch_timeout() {
        let sdk = crate::cloud::aws::retry_config();
        assert!(BASE > sdk.initial_backoff() * 2, "{sdk:?}");
        assert!(CAP > sdk.max_backoff(), "{sdk:?}");
        assert!(
            CAP < Duration::from_secs(300),
            "the default --launch-timeout"
        );
    }

    #[test]
    fn claims_back_off_apart_and_do_not_come_back_in_step() {
        let mut b = Backoff::new(BASE, CAP, 7);
        let waits: Vec<f64> = (0..20)
            .map(|i| {
                let key = format!("c{i}");
                for _ in 0..3 {
                    wait(&mut b, &key, t(0));
                }
                wait(&mut b, &key, t(0))
            })
            .collect();
        let distinct: HashSet<u64> = waits.iter().map(|w| (w * 1000.0) as u64).collect();
        assert!(distinct.len() > 15, "{waits:?}");
        assert!(!b.ready("c0", t(1)));
        assert!(b.ready("other", t(1)), "one claim's wait holds no other");
        assert!(b.next_due(t(0)).is_some());
    }
}
