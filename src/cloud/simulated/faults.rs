//! Node faults and reboots ([`FaultModel`](super::FaultModel)): an
//! instance with GPUs fails after an exponential time of rate
//! `rate_per_gpu_hour x GPUs` from when it is Ready, drawn from a stream
//! keyed by its claim and its number of faults so far; whether a reboot
//! fixes the fault is drawn when it happens. A reboot keeps the instance
//! away for the reboot's duration; it comes back healthy (its next fault
//! drawn from then on) or still faulty. What the simulator makes of a
//! fault (the node's conditions, its pods) is the driver's.

use super::interruptions::{hours, stream};
use super::{delta, CloudEvent, SimulatedCloud, Timer, TimerKey};
use crate::core::Time;
use rand::Rng;

/// An instance's fault state.
#[derive(Debug, Clone, Default)]
pub(super) struct InstanceHealth {
    /// Faults it had so far (names their draws).
    count: u32,
    /// The fault it has now: whether a reboot fixes it.
    fault: Option<bool>,
    /// Its pending fault timer.
    timer: Option<TimerKey>,
    /// Back from the reboot under way at this time.
    rebooting_until: Option<Time>,
}

impl SimulatedCloud {
    /// Draws instance `i`'s next fault from `from` (when it is Ready, or
    /// back healthy from a reboot), if faults happen and it has GPUs.
    pub(super) fn schedule_fault(&mut self, i: usize, from: Time) {
        let rate = self.config.faults.rate_per_gpu_hour * self.gpus_of(i);
        if rate <= 0.0 {
            return;
        }
        let sim = &self.instances[i];
        let n = sim.health.count.to_string();
        let u: f64 = stream(self.config.seed, &["fault", &sim.instance.claim, &n]).random();
        let after_hours = -(1.0 - u).ln() / rate;
        // Beyond a century it never happens (keeps time arithmetic sane).
        if after_hours > 100.0 * 365.0 * 24.0 {
            return;
        }
        let at = from + hours(after_hours);
        self.schedule(at, Timer::Fault(i));
        let key = *self.instances[i].timers.last().expect("just scheduled");
        self.instances[i].health.timer = Some(key);
    }

    /// Instance `i` fails at `at`.
    pub(super) fn fault(&mut self, i: usize, at: Time) -> CloudEvent {
        let fixes = self.config.faults.reboot_fixes;
        let sim = &mut self.instances[i];
        let n = sim.health.count.to_string();
        let u: f64 = stream(self.config.seed, &["fault-fix", &sim.instance.claim, &n]).random();
        sim.health.count += 1;
        sim.health.timer = None;
        sim.health.fault = Some(u < fixes);
        CloudEvent::Fault {
            claim: sim.instance.claim.clone(),
            at,
        }
    }

    /// Starts a reboot of running instance `i` at `now`; `false` when one
    /// is already under way.
    pub(super) fn start_reboot(&mut self, i: usize, now: Time) -> bool {
        if self.instances[i].health.rebooting_until.is_some() {
            return false;
        }
        // No fault while it reboots: the next is drawn when it is back.
        if let Some(key) = self.instances[i].health.timer.take() {
            self.timers.remove(&key);
            self.instances[i].timers.retain(|k| *k != key);
        }
        let back = now + delta(self.reboot_duration(i));
        self.instances[i].health.rebooting_until = Some(back);
        self.schedule(back, Timer::Rebooted(i));
        true
    }

    /// Instance `i` is back from its reboot at `at`: healthy if it had no
    /// fault or the reboot fixes it.
    pub(super) fn rebooted(&mut self, i: usize, at: Time) -> CloudEvent {
        let health = &mut self.instances[i].health;
        health.rebooting_until = None;
        if health.fault == Some(true) {
            health.fault = None;
        }
        let healthy = health.fault.is_none();
        if healthy {
            self.schedule_fault(i, at);
        }
        CloudEvent::Rebooted {
            claim: self.instances[i].instance.claim.clone(),
            at,
            healthy,
        }
    }

    /// Whether the instance of `claim` has a fault now.
    pub fn is_faulty(&self, claim: &str) -> bool {
        self.by_claim
            .get(claim)
            .is_some_and(|&i| self.instances[i].health.fault.is_some())
    }

    /// How long a reboot of instance `i` takes.
    fn reboot_duration(&self, i: usize) -> std::time::Duration {
        if let Some(d) = self.config.faults.reboot_duration {
            return d;
        }
        let family = self.family_of(&self.instances[i].instance.offering.instance_type);
        let p = self.config.latency.profile(&family);
        p.registered + p.ready
    }

    /// GPUs of instance `i`'s type.
    fn gpus_of(&self, i: usize) -> f64 {
        self.catalog
            .instance_type(&self.instances[i].instance.offering.instance_type)
            .and_then(|t| t.accelerator.as_ref())
            .filter(|a| a.kind == crate::catalog::AcceleratorKind::Gpu)
            .map_or(0.0, |a| f64::from(a.count))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{catalog, claim, on_demand, t0};
    use super::super::{CloudEvent, SimulatedCloud, SimulatedCloudConfig};
    use crate::core::Time;
    use chrono::TimeDelta;

    /// A cloud whose GPU instances fail `per_gpu_hour`, `fixes` of them
    /// fixed by a reboot.
    fn faulty(seed: u64, per_gpu_hour: f64, fixes: f64) -> SimulatedCloud {
        let mut c = SimulatedCloudConfig::new(seed, "us-east-1", t0());
        c.faults.rate_per_gpu_hour = per_gpu_hour;
        c.faults.reboot_fixes = fixes;
        SimulatedCloud::new(catalog(), c).unwrap()
    }

    /// The cloud's events up to `until`.
    fn until(cloud: &mut SimulatedCloud, until: Time) -> Vec<CloudEvent> {
        let mut events = Vec::new();
        while let Some(t) = cloud.next_event_time().filter(|t| *t <= until) {
            events.extend(cloud.advance(t));
        }
        events
    }

    fn fault_times(events: &[CloudEvent]) -> Vec<(String, Time)> {
        events
            .iter()
            .filter_map(|e| match e {
                CloudEvent::Fault { claim, at } => Some((claim.clone(), *at)),
                _ => None,
            })
            .collect()
    }

    /// Launches `n` p5.48xlarge (8 GPUs) on demand and runs `days`.
    fn fleet(cloud: &mut SimulatedCloud, n: usize, days: i64) -> Vec<CloudEvent> {
        for k in 0..n {
            let c = claim(&format!("p5-{k}"), on_demand("p5.48xlarge", "use1-az1"));
            cloud.launch(&c, t0()).unwrap();
        }
        until(cloud, t0() + TimeDelta::days(days))
    }

    #[test]
    fn faults_come_at_the_rate_per_gpu_hour_and_the_same_seed_gives_the_same_faults() {
        // 50 nodes of 8 GPUs, one fault per 1,000 GPU-hours, 10 days: each
        // node fails once at most (nothing reboots it), with probability
        // 1 - exp(-8 x 240 / 1000) = 85%: about 43 of 50.
        let mut a = faulty(7, 1e-3, 0.2);
        let faults = fault_times(&fleet(&mut a, 50, 10));
        assert!((35..=49).contains(&faults.len()), "{}", faults.len());
        let mut b = faulty(7, 1e-3, 0.2);
        assert_eq!(fault_times(&fleet(&mut b, 50, 10)), faults);
        let mut c = faulty(8, 1e-3, 0.2);
        assert_ne!(fault_times(&fleet(&mut c, 50, 10)), faults);
        for (claim, _) in &faults {
            assert!(a.is_faulty(claim));
        }
    }

    #[test]
    fn no_fault_happens_at_a_zero_rate_or_on_an_instance_without_gpus() {
        let mut cloud = faulty(1, 0.0, 0.2);
        assert!(fault_times(&fleet(&mut cloud, 20, 30)).is_empty());
        let mut cloud = faulty(1, 1.0, 0.2);
        let c = claim("cpu", on_demand("m5.large", "use1-az1"));
        cloud.launch(&c, t0()).unwrap();
        assert!(fault_times(&until(&mut cloud, t0() + TimeDelta::days(30))).is_empty());
    }

    #[test]
    fn a_reboot_takes_the_familys_boot_and_fixes_the_stated_share_of_faults() {
        // Every node fails within the day; each is rebooted at once.
        let mut cloud = faulty(3, 0.5, 0.3);
        for k in 0..200 {
            let c = claim(&format!("p5-{k}"), on_demand("p5.48xlarge", "use1-az1"));
            cloud.launch(&c, t0()).unwrap();
        }
        let mut fixed = 0;
        let mut still = 0;
        let mut back_after = Vec::new();
        let mut reboots_at = std::collections::BTreeMap::new();
        let end = t0() + TimeDelta::hours(12);
        while let Some(t) = cloud.next_event_time().filter(|t| *t <= end) {
            for e in cloud.advance(t) {
                match e {
                    CloudEvent::Fault { claim, at } if !reboots_at.contains_key(&claim) => {
                        cloud.reboot(&claim, at).unwrap();
                        // Rebooting again while it reboots changes nothing.
                        cloud.reboot(&claim, at).unwrap();
                        reboots_at.insert(claim, at);
                    }
                    CloudEvent::Rebooted { claim, at, healthy } => {
                        back_after.push(at - reboots_at[&claim]);
                        assert_eq!(cloud.is_faulty(&claim), !healthy);
                        if healthy {
                            fixed += 1;
                        } else {
                            still += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
        assert!(reboots_at.len() >= 190, "{}", reboots_at.len());
        assert!(reboots_at.keys().all(|c| cloud.reboots()[c] == 1));
        // p5: registered 240 s and Ready 120 s after running.
        assert!(back_after.iter().all(|d| *d == TimeDelta::seconds(360)));
        let share = f64::from(fixed) / f64::from(fixed + still);
        assert!((0.2..0.4).contains(&share), "{share}");
    }

    #[test]
    fn a_terminated_instance_has_no_more_faults() {
        let mut cloud = faulty(5, 0.01, 0.2);
        let c = claim("p5-0", on_demand("p5.48xlarge", "use1-az1"));
        cloud.launch(&c, t0()).unwrap();
        let boot = until(&mut cloud, t0() + TimeDelta::minutes(10));
        assert!(boot.iter().any(|e| matches!(e, CloudEvent::Ready { .. })));
        cloud
            .terminate("p5-0", t0() + TimeDelta::minutes(10))
            .unwrap();
        let after = until(&mut cloud, t0() + TimeDelta::days(10));
        assert!(fault_times(&after).is_empty(), "{after:?}");
    }
}
