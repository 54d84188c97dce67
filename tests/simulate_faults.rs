//! Node faults, repair and GPU use in the simulator, end to end: the same
//! core as the controller repairs faulty nodes (reboot first, then
//! replace), and the report counts GPU-hours lost to faults, idle
//! GPU-hours and what right sizes would save (issue 36's simulator).

use quartermaster::catalog::Catalog;
use quartermaster::core::{Action, DisruptionReason};
use quartermaster::sim;
use quartermaster::sim::result::{LogEvent, StrategyResult};
use quartermaster::sim::scenario::Scenario;
use std::path::Path;
use std::sync::Arc;

/// Two days of 4-node gangs of 8-GPU pods on on-demand p5, faults 100
/// times Llama 3's rate so that a small fleet sees several, half of them
/// fixed by a reboot.
const FAULTY: &str = r#"
name: faulty-fleet
start: 2026-01-05T00:00:00Z
duration: 48h
seed: 1
strategies: [quartermaster]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: training}
  spec:
    capacityTypes: [on-demand]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements:
        - {key: quartermaster.dev/instance-family, operator: In, values: [p5]}
    limits: {nvidia.com/gpu: "128"}
    disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 10m}
workloads:
- training:
    name: pretrain
    jobs: 6
    perHour: 1
    gpus: [8]
    runTime: {median: 12h, p90: 20h}
    checkpointInterval: 1h
    restartOverhead: 10m
    gangFraction: 1
    gangSize: 4
    gpuUse: {busy: 0.9}
cloud:
  faults: {ratePerGpuHour: 0.002, rebootFixes: 0.5}
"#;

/// Runs `yaml` with `seed`, `change` applied to the parsed scenario.
fn run(yaml: &str, seed: u64, change: impl FnOnce(&mut Scenario)) -> StrategyResult {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let mut scenario = Scenario::parse(yaml, &catalog).unwrap();
    scenario.seed = seed;
    change(&mut scenario);
    let jobs = sim::load_jobs(&scenario, &catalog, Path::new("."), None).unwrap();
    let report = sim::simulate(
        &scenario,
        &catalog,
        &jobs,
        &scenario.strategies,
        &mut |_, _| {},
    )
    .unwrap();
    report.strategies["quartermaster"].clone()
}

fn without_repair(s: &mut Scenario) {
    for p in &mut s.node_pools {
        p.spec.repair.conditions.clear();
    }
}

#[test]
fn with_faults_repair_loses_fewer_gpu_hours_than_no_repair_over_seeds() {
    let (mut with, mut without) = (0.0, 0.0);
    let (mut faults_with, mut faults_without) = (0, 0);
    for seed in 1..=3 {
        let r = run(FAULTY, seed, |_| {});
        let n = run(FAULTY, seed, without_repair);
        with += r.fault_lost_gpu_hours;
        without += n.fault_lost_gpu_hours;
        faults_with += r.faults;
        faults_without += n.faults;
        assert_eq!(n.reboots + n.repair_replacements, 0, "seed {seed}");
        // Lost to faults includes the work lost at the faults.
        assert!(r.lost_gpu_hours > 0.0 && n.lost_gpu_hours > 0.0);
    }
    assert!(
        faults_with >= 3 && faults_without >= 3,
        "{faults_with} {faults_without}"
    );
    assert!(
        with < without,
        "with repair {with:.1} GPU-h lost to faults, without {without:.1}"
    );
}

#[test]
fn repair_reboots_a_faulty_node_before_it_replaces_it() {
    let mut reboots = 0;
    let mut replaced = 0;
    for seed in 1..=3 {
        let r = run(FAULTY, seed, |_| {});
        let mut rebooted: Vec<String> = Vec::new();
        for (_, e) in &r.log {
            match e {
                LogEvent::Action(Action::Reboot { claim, condition }) => {
                    assert!(
                        condition.contains("AcceleratedHardwareReady=False"),
                        "{condition}"
                    );
                    rebooted.push(claim.clone());
                }
                LogEvent::Action(Action::Cordon {
                    claim,
                    reason: DisruptionReason::Unhealthy,
                }) => {
                    assert!(
                        rebooted.contains(claim),
                        "seed {seed}: {claim} replaced without a reboot first"
                    );
                    replaced += 1;
                }
                _ => {}
            }
        }
        reboots += rebooted.len();
        assert_eq!(r.reboots as usize, rebooted.len());
        assert_eq!(
            r.repair_replacements,
            r.log
                .iter()
                .filter(|(_, e)| matches!(
                    e,
                    LogEvent::Action(Action::Cordon {
                        reason: DisruptionReason::Unhealthy,
                        ..
                    })
                ))
                .count() as u32
        );
    }
    assert!(
        reboots > 0 && replaced > 0,
        "{reboots} reboots, {replaced} replaced"
    );
}

#[test]
fn a_zero_fault_rate_loses_nothing_to_faults_and_idle_pods_show_in_idle_hours_and_savings() {
    let yaml = FAULTY
        .replace("ratePerGpuHour: 0.002", "ratePerGpuHour: 0")
        .replace(
            "gpuUse: {busy: 0.9}",
            "gpuUse: {busy: 0.02, peakMemory: 0.1}",
        );
    let idle = run(&yaml, 1, |_| {});
    assert_eq!(idle.faults, 0);
    assert_eq!(idle.fault_lost_gpu_hours, 0.0);
    assert_eq!(idle.reboots + idle.repair_replacements, 0);
    // Pods 2% busy: every GPU-hour they held is idle, and right sizes save.
    assert!(idle.idle_gpu_hours >= idle.gpu_hours * 0.9, "{idle:?}");
    assert!(idle.right_size_saving > 0.0);
    let busy = run(
        &FAULTY.replace("ratePerGpuHour: 0.002", "ratePerGpuHour: 0"),
        1,
        |_| {},
    );
    assert_eq!(busy.right_size_saving, 0.0);
    assert!(busy.idle_gpu_hours < idle.idle_gpu_hours);
}

#[test]
fn a_negative_fault_rate_or_a_share_over_one_is_refused_with_its_field() {
    let catalog = Catalog::embedded().unwrap();
    let bad = FAULTY
        .replace("ratePerGpuHour: 0.002", "ratePerGpuHour: -0.1")
        .replace("rebootFixes: 0.5", "rebootFixes: 1.5")
        .replace("gpuUse: {busy: 0.9}", "gpuUse: {busy: 2}");
    let e = Scenario::parse(&bad, &catalog).unwrap_err().to_string();
    for field in [
        "cloud.faults.ratePerGpuHour: -0.1 must be a number >= 0",
        "cloud.faults.rebootFixes: 1.5",
        "workloads[0].training.gpuUse.busy: 2 is not in [0, 1]",
    ] {
        assert!(e.contains(field), "{field} missing from: {e}");
    }
    let e = Scenario::parse(
        &FAULTY.replace("{ratePerGpuHour", "{ratePerGPUHour"),
        &catalog,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("ratePerGPUHour"), "{e}");
}
