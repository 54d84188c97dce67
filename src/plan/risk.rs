//! The risk model: what a spot interruption costs a pod (work lost since its
//! last complete checkpoint, restart, relaunch), how many interruptions to
//! expect over its run on an offering, and whether a pod with a deadline can
//! still afford spot at all. Pure arithmetic; the formulas are written up in
//! `docs/planner.md` ("Risk model") and `docs/checkpointing.md`.

use super::candidates::Candidate;
use crate::catalog::CapacityType;
use crate::cluster::Pod;

/// Expected run time assumed for a pod that does not say (seconds).
pub const DEFAULT_EXPECTED_RUNTIME_S: f64 = 2.0 * 3600.0;
/// Time to get going again after an interruption (seconds): reschedule,
/// pull, load the last checkpoint.
pub const DEFAULT_RESTART_OVERHEAD_S: f64 = 300.0;
/// Time from losing a node to a replacement being Ready (seconds): a GPU
/// node's launch-to-Ready (4 to 9 minutes in the simulated cloud's boot
/// profiles; the closed pool itself is avoided, see `core::interruption`).
pub const DEFAULT_RELAUNCH_WAIT_S: f64 = 360.0;
/// Seconds of a spot notice a requested checkpoint may use: EC2's 120 s
/// notice less the 30 s the interruption handler keeps for evictions
/// (`core::interruption::Config::drain_grace`).
pub const CHECKPOINT_WINDOW_S: f64 = 90.0;
/// Checkpoint state per GPU assumed when a pod does not give its checkpoint
/// duration (GB): model and optimizer state of a large model sharded over
/// 80 GB GPUs (16 bytes per parameter with Adam, about half of each GPU).
pub const DEFAULT_CHECKPOINT_GB_PER_GPU: f64 = 40.0;
/// Write rate of one pod's checkpoint to shared storage (GB/s) assumed when
/// a pod does not give its checkpoint duration: one node's share of a
/// parallel file system or object store.
pub const DEFAULT_CHECKPOINT_WRITE_GBPS: f64 = 1.5;

/// Seconds one checkpoint of a pod with `gpus` GPUs takes by default:
/// [`DEFAULT_CHECKPOINT_GB_PER_GPU`] per GPU at
/// [`DEFAULT_CHECKPOINT_WRITE_GBPS`] (27 s per GPU: an 8-GPU pod takes 3.6
/// minutes, more than a spot notice leaves).
pub fn default_checkpoint_write_s(gpus: f64) -> f64 {
    gpus.max(0.0) * DEFAULT_CHECKPOINT_GB_PER_GPU / DEFAULT_CHECKPOINT_WRITE_GBPS
}

/// What an interruption puts at stake for one pod.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Exposure {
    /// Hours of the pod's time one interruption costs: the work since its
    /// last complete checkpoint, the restart overhead and the relaunch wait.
    pub lost_hours: f64,
    /// Hours it expects to run (`quartermaster.dev/expected-runtime`).
    pub runtime_hours: f64,
    /// Pods of its gang (1 without one): one member's loss stops them all.
    pub gang: u32,
}

/// Seconds one checkpoint of `pod` takes: its
/// `quartermaster.dev/checkpoint-duration`, else the default for its GPUs.
pub fn checkpoint_write_s(pod: &Pod) -> f64 {
    pod.checkpoint_duration_s
        .unwrap_or_else(|| default_checkpoint_write_s(pod.requests.gpus()))
}

/// Seconds of work an interruption loses on average, besides restarting:
/// - checkpointing pod whose requested checkpoint fits the notice
///   ([`CHECKPOINT_WINDOW_S`]): the write time (work done while it writes);
/// - checkpointing pod whose checkpoint does not fit: half the interval
///   plus the write time (a periodic checkpoint is complete one write time
///   after the progress it saves);
/// - no checkpoints: half its expected run;
/// - a pod that holds no work ([`Pod::holds_work`], a serving replica):
///   none.
pub fn lost_work_s(pod: &Pod) -> f64 {
    if !pod.holds_work {
        return 0.0;
    }
    let runtime = pod.expected_runtime_s.unwrap_or(DEFAULT_EXPECTED_RUNTIME_S);
    match pod.checkpoint_interval_s.filter(|i| *i > 0.0) {
        Some(interval) => {
            let write = checkpoint_write_s(pod);
            if pod.checkpoints && write <= CHECKPOINT_WINDOW_S {
                write
            } else {
                (interval / 2.0 + write).min(runtime)
            }
        }
        None => runtime / 2.0,
    }
}

/// The pod's [`Exposure`].
pub fn exposure(pod: &Pod) -> Exposure {
    let lost = lost_work_s(pod) + DEFAULT_RESTART_OVERHEAD_S + DEFAULT_RELAUNCH_WAIT_S;
    Exposure {
        lost_hours: lost / 3600.0,
        runtime_hours: pod.expected_runtime_s.unwrap_or(DEFAULT_EXPECTED_RUNTIME_S) / 3600.0,
        gang: pod.group.as_ref().map_or(1, |g| g.min_member.max(1)),
    }
}

/// Nodes of `c` a gang of `gang` pods, `per_node` to a node, spans.
fn gang_nodes(gang: u32, per_node: u32) -> f64 {
    f64::from(gang.div_ceil(per_node.max(1)).max(1))
}

/// Interruptions a pod expects per hour of its run on `c`: the offering's
/// expected interruptions over the run divided by the run, times the nodes
/// its gang spans (any of them stops it). 0 on on-demand.
pub fn interruptions_per_hour(e: &Exposure, c: &Candidate, per_node: u32) -> f64 {
    if c.offering.capacity_type != CapacityType::Spot {
        return 0.0;
    }
    let hours = e.runtime_hours.max(1.0 / 60.0);
    c.expected_interruptions(hours) / hours * gang_nodes(e.gang, per_node)
}

/// Expected interruption cost per hour of one pod on a node of `c` that
/// holds `per_node` such pods: interruptions per hour x hours lost each x
/// the pod's share of the node price, scaled by the pool's risk aversion.
pub fn pod_risk_cost(e: &Exposure, c: &Candidate, per_node: u32, risk_aversion: f64) -> f64 {
    if per_node == 0 {
        return 0.0;
    }
    interruptions_per_hour(e, c, per_node) * e.lost_hours * c.price() / f64::from(per_node)
        * risk_aversion
}

/// Hours of delay a pod should expect on spot `c` over its remaining run,
/// plus one more interruption as a cushion: the "Can't Be Late" rule keeps a
/// job on spot only while its slack covers what spot may still cost it.
pub fn spot_delay_hours(e: &Exposure, c: &Candidate, per_node: u32) -> f64 {
    let expected = interruptions_per_hour(e, c, per_node) * e.runtime_hours;
    (expected + 1.0) * e.lost_hours
}

/// Hours of slack a pod with a deadline has at `now`: the time to its
/// deadline less its remaining run (its expected run time, which the
/// workload lowers as it progresses). `None` without a deadline.
pub fn slack_hours(pod: &Pod, now: chrono::DateTime<chrono::Utc>) -> Option<f64> {
    let deadline = pod.deadline?;
    let left = (deadline - now).num_milliseconds() as f64 / 3_600_000.0;
    Some(left - pod.expected_runtime_s.unwrap_or(DEFAULT_EXPECTED_RUNTIME_S) / 3600.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::resources::CPU;
    use crate::cluster::{GroupRef, Resources};

    fn pod(gpus: i64) -> Pod {
        let mut p = Pod::new(
            "ml/p",
            Resources::new()
                .with(CPU, 1000)
                .with(crate::api::labels::RESOURCE_GPU, gpus),
        );
        p.expected_runtime_s = Some(4.0 * 3600.0);
        p.checkpoint_interval_s = Some(1800.0);
        p.checkpoints = true;
        p
    }

    #[test]
    fn a_checkpoint_that_fits_the_notice_loses_its_write_time_one_that_does_not_half_an_interval() {
        let small = pod(1);
        assert!((lost_work_s(&small) - 40.0 / 1.5).abs() < 1e-9);
        let big = pod(8);
        let write = 8.0 * 40.0 / 1.5;
        assert!(write > CHECKPOINT_WINDOW_S);
        assert!((lost_work_s(&big) - (900.0 + write)).abs() < 1e-9);
        let mut told = big.clone();
        told.checkpoint_duration_s = Some(60.0);
        assert_eq!(lost_work_s(&told), 60.0);
        let mut no_signals = pod(1);
        no_signals.checkpoints = false;
        assert!((lost_work_s(&no_signals) - (900.0 + 40.0 / 1.5)).abs() < 1e-9);
        let mut none = pod(1);
        none.checkpoint_interval_s = None;
        assert_eq!(lost_work_s(&none), 2.0 * 3600.0);
    }

    #[test]
    fn a_pod_that_holds_no_work_stakes_only_its_restart_and_relaunch() {
        let mut serving = pod(1);
        serving.checkpoint_interval_s = None;
        assert_eq!(lost_work_s(&serving), 2.0 * 3600.0);
        serving.holds_work = false;
        assert_eq!(lost_work_s(&serving), 0.0);
        let e = exposure(&serving);
        assert!((e.lost_hours - (300.0 + 360.0) / 3600.0).abs() < 1e-12);
        assert_eq!(e.runtime_hours, 4.0);
    }

    #[test]
    fn exposure_adds_restart_and_relaunch_and_counts_the_gang() {
        let mut p = pod(8);
        p.checkpoint_duration_s = Some(30.0);
        p.group = Some(GroupRef {
            name: "ml/g".into(),
            min_member: 4,
        });
        let e = exposure(&p);
        assert!((e.lost_hours - (30.0 + 300.0 + 360.0) / 3600.0).abs() < 1e-12);
        assert_eq!(e.runtime_hours, 4.0);
        assert_eq!(e.gang, 4);
        assert_eq!(gang_nodes(4, 1), 4.0);
        assert_eq!(gang_nodes(4, 2), 2.0);
        assert_eq!(gang_nodes(1, 8), 1.0);
    }

    #[test]
    fn slack_is_the_time_to_the_deadline_less_the_remaining_run() {
        use chrono::TimeZone;
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 5, 0, 0, 0).unwrap();
        let mut p = pod(1);
        assert_eq!(slack_hours(&p, now), None);
        p.deadline = Some(now + chrono::Duration::hours(5));
        assert_eq!(slack_hours(&p, now), Some(1.0));
    }
}
