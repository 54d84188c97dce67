//! The world side of node faults, GPU use and repair in the engine: a
//! faulty node shows the conditions the live side sees
//! (`AcceleratedHardwareReady=False`, reason `NvidiaXID79Error`: the EKS
//! node monitoring agent's condition for a GPU fallen off the bus), its
//! pods lose the work since their last checkpoint and stay bound without
//! progress (crash-looping; a gang's members elsewhere wait for it), its
//! free GPUs are withdrawn (the device plugin reports them unhealthy), and
//! the simulated cloud reboots it when the core says so. Nothing here
//! decides: repair is the core's (`core::repair`). Also the accounting of
//! GPU-hours lost to faults, idle GPU-hours and what right sizes
//! (`plan::rightsize`, as `report gpu`) would save. The model is in
//! `docs/simulated-cloud.md`.

use super::{Engine, Phase};
use crate::api::labels as l;
use crate::api::nodepool::ACCELERATED_HARDWARE_READY;
use crate::core::repair::Signal;
use crate::core::{ManagedNode, Time};
use crate::plan::rightsize;

/// The reason a faulty node's `AcceleratedHardwareReady=False` carries:
/// XID 79, a GPU fallen off the bus, which the node monitoring agent
/// treats as fatal (`core::repair::FATAL_XIDS`).
pub const FAULT_REASON: &str = "NvidiaXID79Error";

/// A job bound to a node but making no progress, since `since`, because a
/// fault stopped it or a member of its gang.
#[derive(Debug, Clone)]
pub(super) struct Stall {
    /// The claim it is bound to.
    pub node: String,
    /// When it stopped.
    pub since: Time,
}

/// Sets the node's condition `type_` to `status` since `at`.
fn set_condition(n: &mut ManagedNode, type_: &str, status: &str, reason: &str, at: Time) {
    n.health.signals.retain(|s| s.type_ != type_);
    n.health
        .signals
        .push(Signal::new(type_, status, reason, at));
}

/// The node is Ready (first boot or back from a reboot): its kubelet
/// reports `Ready=True`.
pub(super) fn mark_ready(n: &mut ManagedNode, at: Time) {
    set_condition(n, "Ready", "True", "KubeletReady", at);
}

impl Engine<'_> {
    /// Node `claim` failed at `at`.
    pub(super) fn on_fault(&mut self, claim: &str, at: Time) {
        let Some((n, extra)) = self.nodes.get_mut(claim) else {
            return;
        };
        self.result.faults += 1;
        set_condition(n, ACCELERATED_HARDWARE_READY, "False", FAULT_REASON, at);
        if extra.broken_since.is_none() {
            extra.broken_since = Some(at);
            // The device plugin withdraws the free GPUs: nothing new lands.
            let used = n.state.used.get(l::RESOURCE_GPU);
            extra.gpu_allocatable = n.state.allocatable.get(l::RESOURCE_GPU);
            n.state.allocatable.set(l::RESOURCE_GPU, used);
        }
        self.stall_node(claim, at);
    }

    /// The core asked to reboot `claim`: the instance goes away for the
    /// reboot (its node not Ready), its pods stay bound.
    pub(super) fn reboot(&mut self, claim: &str) {
        let now = self.now;
        if self.cloud.reboot(claim, now).is_err() {
            return;
        }
        self.result.reboots += 1;
        if let Some((n, extra)) = self.nodes.get_mut(claim) {
            extra.rebooting = true;
            set_condition(n, "Ready", "Unknown", "NodeStatusUnknown", now);
        }
        self.stall_node(claim, now);
    }

    /// `claim` is back from a reboot at `at`, fixed (`healthy`) or not.
    pub(super) fn on_rebooted(&mut self, claim: &str, at: Time, healthy: bool) {
        let Some((n, extra)) = self.nodes.get_mut(claim) else {
            return;
        };
        extra.rebooting = false;
        mark_ready(n, at);
        self.bind_dirty = true;
        if !healthy {
            // The agent finds the fault again once the node is up.
            set_condition(n, ACCELERATED_HARDWARE_READY, "False", FAULT_REASON, at);
            return;
        }
        set_condition(n, ACCELERATED_HARDWARE_READY, "True", "", at);
        if let Some(since) = extra.broken_since.take() {
            n.state
                .allocatable
                .set(l::RESOURCE_GPU, extra.gpu_allocatable);
            self.result.fault_lost_gpu_hours += hours(since, at) * extra.gpus;
        }
        self.resume_on(claim, at);
    }

    /// Whether `claim` runs pods: Ready, not faulty, not rebooting.
    pub(super) fn serves(&self, k: usize) -> bool {
        let (n, extra) = (&self.nodes.managed()[k], &self.nodes.extra()[k]);
        n.ready_at.is_some() && extra.broken_since.is_none() && !extra.rebooting
    }

    /// Stops the jobs running on `claim` at `at` (and their gangs) without
    /// unbinding them: they wait for the node to be fixed or drained.
    fn stall_node(&mut self, claim: &str, at: Time) {
        let Some(k) = self.nodes.find(claim).ok() else {
            return;
        };
        let running: Vec<usize> = self.nodes.extra()[k]
            .jobs
            .iter()
            .copied()
            .filter(|&i| matches!(self.jobs[i].phase, Phase::Running { .. }))
            .collect();
        for i in running {
            let lost = self.stop_jobs(i, at, true);
            self.result.fault_lost_gpu_hours += lost;
        }
    }

    /// Restarts at `at` the stalled gangs bound to `claim` whose every
    /// member's node serves again.
    fn resume_on(&mut self, claim: &str, at: Time) {
        let here: Vec<usize> = self
            .stalled
            .iter()
            .filter(|(_, s)| s.node == claim)
            .map(|(&i, _)| i)
            .collect();
        for i in here {
            let members = self.members(i);
            let ready = members.iter().all(|m| {
                self.stalled
                    .get(m)
                    .is_some_and(|s| self.nodes.find(&s.node).is_ok_and(|k| self.serves(k)))
            });
            if !ready {
                continue;
            }
            for m in members {
                let Some(stall) = self.stalled.remove(&m) else {
                    continue;
                };
                self.settle_stall(m, &stall, at);
                let name = self.jobs[m].job.pod.name.clone();
                if let Some((n, _)) = self.nodes.get_mut(&stall.node) {
                    for b in n.pods.iter_mut().filter(|b| b.pod.name == name) {
                        b.started = Some(at);
                    }
                }
                self.jobs[m].start(&stall.node, at);
                if let Some(f) = self.jobs[m].finish_time() {
                    self.finishes.push(f, m);
                }
            }
        }
    }

    /// Job `i`'s gang (or `i` alone).
    fn members(&self, i: usize) -> Vec<usize> {
        match &self.jobs[i].job.pod.group {
            Some(g) => self.gangs.get(&g.name).cloned().unwrap_or_default(),
            None => vec![i],
        }
    }

    /// Unbinds the stalled gang of job `i` at `at` (its node is drained or
    /// gone): its members wait for a node again.
    pub(super) fn release_stalled(&mut self, i: usize, at: Time) {
        for m in self.members(i) {
            let Some(stall) = self.stalled.remove(&m) else {
                continue;
            };
            self.settle_stall(m, &stall, at);
            if let Some((n, extra)) = self.nodes.get_mut(&stall.node) {
                if extra.jobs.remove(&m) {
                    let name = &self.jobs[m].job.pod.name;
                    n.pods.retain(|b| &b.pod.name != name);
                    n.state.used.sub(&super::dra::held(&self.jobs[m].job.pod));
                }
            }
            self.wait(m);
        }
    }

    /// Counts a stall that ends at `at`: GPU-hours lost to the fault, unless
    /// its node is faulty itself (the node's GPU-hours count then).
    fn settle_stall(&mut self, i: usize, stall: &Stall, at: Time) {
        let broken = self
            .nodes
            .find(&stall.node)
            .is_ok_and(|k| self.nodes.extra()[k].broken_since.is_some());
        if !broken {
            self.result.fault_lost_gpu_hours += hours(stall.since, at) * self.jobs[i].gpus();
        }
    }

    /// A node leaves at `at`: its stalled pods wait again and its faulty
    /// time is counted.
    pub(super) fn node_gone(
        &mut self,
        jobs: &[usize],
        broken_since: Option<Time>,
        gpus: f64,
        at: Time,
    ) {
        if let Some(since) = broken_since {
            self.result.fault_lost_gpu_hours += hours(since, at) * gpus;
        }
        for &i in jobs {
            if self.stalled.contains_key(&i) {
                self.release_stalled(i, at);
            }
        }
    }

    /// Counts the stalls and faulty nodes still open at the end.
    pub(super) fn settle_faults(&mut self, end: Time) {
        let open: Vec<(usize, Stall)> = std::mem::take(&mut self.stalled).into_iter().collect();
        for (i, stall) in &open {
            self.settle_stall(*i, stall, end);
        }
        self.stalled = open.into_iter().collect();
        for extra in self.nodes.extra() {
            if let Some(since) = extra.broken_since {
                self.result.fault_lost_gpu_hours += hours(since, end) * extra.gpus;
            }
        }
    }

    /// Idle GPU-hours over the sample period starting now, as the live
    /// side counts them from DCGM every 5 minutes: the GPUs of serving
    /// nodes no pod holds, and those of pods busy less than
    /// [`rightsize::IDLE_BELOW`]. Faulty and rebooting nodes and stalled
    /// pods count as lost to faults instead.
    pub(super) fn sample_idle(&mut self, period_h: f64) {
        let mut idle = 0.0;
        for k in 0..self.nodes.managed().len() {
            if !self.serves(k) {
                continue;
            }
            let extra = &self.nodes.extra()[k];
            let mut free = extra.gpus;
            for &i in &extra.jobs {
                let gpus = self.jobs[i].gpus();
                free -= gpus;
                let busy = self.jobs[i].job.gpu_use.map(|u| u.busy);
                let idle_pod = busy.is_some_and(|b| b < rightsize::IDLE_BELOW);
                if idle_pod && !self.stalled.contains_key(&i) {
                    idle += gpus;
                }
            }
            idle += free.max(0.0);
        }
        self.result.idle_gpu_hours += idle * period_h;
    }

    /// What right-sizing job `i` would have saved over `held_h` hours on
    /// `claim`, USD: `plan::rightsize::right_size` (as `report gpu`) for a
    /// pod busy less than [`rightsize::UNDERUSED_BELOW`], its monthly
    /// saving pro rata.
    pub(super) fn right_size_saving(&mut self, i: usize, claim: &str, held_h: f64) -> f64 {
        let Some(u) = self.jobs[i].job.gpu_use else {
            return 0.0;
        };
        if u.busy >= rightsize::UNDERUSED_BELOW || held_h <= 0.0 {
            return 0.0;
        }
        let Some(inst) = self.cloud.describe(claim) else {
            return 0.0;
        };
        let key = (i, inst.offering.instance_type.clone());
        if let Some(per_h) = self.right_sizes.get(&key) {
            return per_h * held_h;
        }
        let per_h = self.right_size_per_hour(i, claim, &inst.offering.instance_type, u);
        self.right_sizes.insert(key, per_h);
        per_h * held_h
    }

    fn right_size_per_hour(
        &self,
        i: usize,
        claim: &str,
        instance_type: &str,
        u: crate::sim::workload::JobGpuUse,
    ) -> f64 {
        let Some(it) = self.catalog.instance_type(instance_type) else {
            return 0.0;
        };
        let Some(acc) = it.accelerator.as_ref() else {
            return 0.0;
        };
        let gpus = self.jobs[i].gpus();
        if gpus < 1.0 {
            // A share of a GPU already: nothing smaller to offer.
            return 0.0;
        }
        let name = &self.jobs[i].job.pod.name;
        let (namespace, pod) = name.split_once('/').unwrap_or(("default", name));
        let memory = acc.memory_mib_per_device as f64;
        let pod = crate::cluster::gpu_use::PodUse {
            pod: crate::cluster::gpu_use::PodRef {
                namespace: namespace.into(),
                name: pod.into(),
            },
            workload: crate::cluster::gpu_use::workload_of(pod),
            node: claim.into(),
            model: acc.model.clone(),
            instance_type: Some(it.name.clone()),
            gpus: gpus.round() as u32,
            busy: Some(u.busy),
            fb_peak_mib: u.peak_memory.map(|m| m * memory),
            fb_total_mib: Some(memory),
        };
        rightsize::right_size(self.catalog, self.region, &pod, it)
            .map_or(0.0, |r| r.saving() / rightsize::HOURS_PER_MONTH)
    }
}

/// Hours from `a` to `b`.
fn hours(a: Time, b: Time) -> f64 {
    (b - a).num_milliseconds().max(0) as f64 / 3_600_000.0
}
