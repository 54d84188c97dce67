//! The simulator end to end: every strategy runs the same jobs; results are
//! reproducible; and the issue's targets, checked by running the scenarios in
//! `simulations/` through every strategy (the same runs as
//! `quartermaster simulate`):
//! - spot training, over five seeds: quartermaster costs at most 40% of
//!   on-demand, and less than greedy on the mean and in most seeds;
//! - spot trace replay: with measured reclaim history on the pools the jobs
//!   run on, quartermaster costs no more than greedy or on-demand and loses
//!   no more GPU-hours than greedy;
//! - pre-warm: the requested capacity is Ready at window start in at least
//!   95% of windows;
//! - every job in every scenario finishes, or the report says why not;
//! - a replayed trace's CPU-only pods run on CPU nodes of the untainted CPU
//!   pool, never on a GPU node, and its fractional GPU pods on time-sliced
//!   shares that whole-GPU pods never use;
//! - interruption storm: every opted-in pod on an interrupted node is
//!   signalled before it is evicted, and no node outlives its deadline.

use quartermaster::catalog::Catalog;
use quartermaster::sim;
use quartermaster::sim::scenario::{Scenario, StrategyName};
use std::path::Path;
use std::sync::Arc;

fn run(file: &str) -> quartermaster::sim::result::SimReport {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    run_text(&text, path.parent().unwrap())
}

/// Runs a scenario given as YAML (trace paths relative to `dir`).
fn run_text(yaml: &str, dir: &Path) -> quartermaster::sim::result::SimReport {
    run_changed(yaml, dir, |_| {})
}

/// Runs a scenario given as YAML (trace paths relative to `dir`) after
/// `change` edits it (its spot traces loaded), with its own strategies.
fn run_changed(
    yaml: &str,
    dir: &Path,
    change: impl FnOnce(&mut Scenario),
) -> quartermaster::sim::result::SimReport {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let mut scenario = Scenario::parse(yaml, &catalog).unwrap();
    let jobs = sim::load_jobs(&scenario, &catalog, dir, None).unwrap();
    sim::load_spot_traces(&mut scenario, dir).unwrap_or_else(|e| {
        panic!("{e} (scenarios read measured spot traces from ../shared/traces/spot beside the checkout)")
    });
    change(&mut scenario);
    sim::simulate(
        &scenario,
        &catalog,
        &jobs,
        &scenario.strategies,
        &mut |_, _| {},
    )
    .unwrap()
}

#[test]
fn the_smoke_scenario_runs_every_strategy_on_the_same_jobs_reproducibly() {
    let a = run("simulations/smoke.yaml");
    assert_eq!(a.strategies.len(), 4);
    for (name, r) in &a.strategies {
        assert_eq!(r.jobs_total, 12, "{name}");
        assert_eq!(
            r.jobs_completed as usize + r.unfinished.len(),
            r.jobs_total as usize,
            "{name}: every job finishes or is explained"
        );
        assert!(
            r.total_cost >= a.lower_bound_cost,
            "{name} beats the clairvoyant bound"
        );
        assert!(r.lost_gpu_hours <= r.gpu_hours, "{name}");
    }
    let s = |n: &str| &a.strategies[n];
    // Every job that could finish (on-demand, never interrupted, finishes
    // it) finishes under every strategy: a storm may slow jobs down, never
    // strand them waiting after their node is lost.
    let could_finish = s("on-demand").jobs_completed;
    assert_eq!(could_finish, 12, "{:?}", s("on-demand").unfinished);
    for (name, r) in &a.strategies {
        assert_eq!(
            r.jobs_completed, could_finish,
            "{name} leaves jobs unfinished: {:?}",
            r.unfinished
        );
    }
    assert_eq!(s("on-demand").spot_notices, 0);
    assert_eq!(s("on-demand").lost_gpu_hours, 0.0);
    assert!(
        s("greedy").spot_notices > 0,
        "the storm reaches the spot nodes"
    );
    assert!(s("quartermaster").lost_gpu_hours <= s("greedy").lost_gpu_hours);
    assert!(s("quartermaster").total_cost < s("on-demand").total_cost);
    assert!(
        s("static").total_cost > s("on-demand").total_cost,
        "sized for the peak all day"
    );
    let b = run("simulations/smoke.yaml");
    assert_eq!(a, b, "same seed, same report");
}

#[test]
fn every_scenario_in_simulations_parses_and_its_workload_loads() {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut scenario =
            Scenario::parse(&text, &catalog).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let jobs = sim::load_jobs(&scenario, &catalog, &dir, None)
            .unwrap()
            .jobs;
        sim::load_spot_traces(&mut scenario, &dir).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (measured spot traces are read from ../shared/traces/spot beside the checkout)",
                path.display()
            )
        });
        assert!(!jobs.is_empty(), "{} has no jobs", path.display());
        seen += 1;
    }
    assert!(seen >= 5, "only {seen} scenarios");
}

/// A spot-only pool in a heavy storm: quartermaster must ride it out.
const STORM: &str = r#"
name: storm-test
start: 2026-01-05T00:00:00Z
duration: 10h
seed: 9
strategies: [quartermaster]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: spot}
  spec:
    capacityTypes: [spot]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [g5, g6]}]
    disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 5m}
workloads:
- training: {name: ckpt, jobs: 16, perHour: 8, gpus: [1], runTime: {median: 2h, p90: 4h}, checkpointInterval: 30m}
- training: {name: plain, jobs: 8, perHour: 4, gpus: [1], runTime: {median: 1h, p90: 2h}}
cloud:
  storms: [{after: 1h, duration: 4h, multiplier: 20000}]
"#;

#[test]
fn in_a_storm_opted_in_pods_are_signalled_before_eviction_and_no_node_outlives_its_deadline() {
    check_storm(STORM, 3, 90.0);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/interruption-storm.yaml");
    check_storm(&std::fs::read_to_string(path).unwrap(), 1, 60.0);
}

/// Runs the scenario and checks, for `quartermaster`: at least
/// `min_notices` spot notices; every opted-in pod whose checkpoint can be
/// written within `window_s` (the checkpoint wait after a notice) and that
/// was evicted from an interrupted node was asked to checkpoint first; no
/// pod whose checkpoint cannot be written in time, and no pod that did not
/// opt in, was asked; no interrupted node outlived its deadline; every job
/// finished or is explained.
fn check_storm(yaml: &str, min_notices: u32, window_s: f64) {
    use quartermaster::core::{Action, Notice};
    use quartermaster::sim::result::LogEvent;
    use std::collections::BTreeMap;

    let catalog = Arc::new(Catalog::embedded().unwrap());
    let scenario = Scenario::parse(yaml, &catalog).unwrap();
    let workload = sim::load_jobs(&scenario, &catalog, Path::new("."), None).unwrap();
    let jobs = &workload.jobs;
    let opted_in: std::collections::BTreeSet<String> = jobs
        .iter()
        .filter(|j| j.pod.checkpoints)
        .map(|j| j.pod.name.clone())
        .collect();
    let too_slow: std::collections::BTreeSet<String> = jobs
        .iter()
        .filter(|j| j.checkpoint_write_s > window_s)
        .map(|j| j.pod.name.clone())
        .collect();
    let quartermaster = [StrategyName::Quartermaster];
    let report = sim::simulate(
        &scenario,
        &catalog,
        &workload,
        &quartermaster,
        &mut |_, _| {},
    )
    .unwrap();
    let r = &report.strategies["quartermaster"];
    assert!(
        r.spot_notices >= min_notices,
        "the storm interrupts: {} notices",
        r.spot_notices
    );

    let mut deadlines: BTreeMap<String, quartermaster::core::Time> = BTreeMap::new();
    let mut signalled: std::collections::BTreeSet<(String, String)> = Default::default();
    let mut asked: std::collections::BTreeSet<String> = Default::default();
    let mut evicted_after_notice = 0;
    for (at, event) in &r.log {
        match event {
            LogEvent::Notice(Notice::SpotInterruption { claim, deadline }) => {
                deadlines.insert(claim.clone(), *deadline);
            }
            // Requests on interrupted nodes, after the notice (the cadence
            // asks spot pods to checkpoint while no notice is out).
            LogEvent::Action(Action::RequestCheckpoint { pod, claim, .. }) => {
                asked.insert(pod.clone());
                if deadlines.contains_key(claim) {
                    signalled.insert((pod.clone(), claim.clone()));
                }
            }
            LogEvent::Action(Action::Evict { pod, claim }) if deadlines.contains_key(claim) => {
                evicted_after_notice += 1;
                if opted_in.contains(pod) && !too_slow.contains(pod) {
                    assert!(
                        signalled.contains(&(pod.clone(), claim.clone())),
                        "{pod} evicted from interrupted {claim} at {at} without a checkpoint request"
                    );
                }
            }
            LogEvent::NodeGone(claim) => {
                if let Some(deadline) = deadlines.get(claim) {
                    assert!(
                        at <= deadline,
                        "{claim} outlived its deadline {deadline}: gone at {at}"
                    );
                }
            }
            _ => {}
        }
    }
    assert!(
        evicted_after_notice > 0,
        "some pods were evicted from interrupted nodes"
    );
    assert!(
        asked.iter().all(|p| opted_in.contains(p)),
        "only opted-in pods are signalled"
    );
    let useless: Vec<_> = signalled
        .iter()
        .filter(|(p, _)| too_slow.contains(p))
        .collect();
    assert!(
        useless.is_empty(),
        "asked for checkpoints that cannot be written before the deadline: {useless:?}"
    );
    assert_eq!(r.jobs_completed as usize + r.unfinished.len(), jobs.len());
}

/// Every job of `r` finished or was running at the end.
fn assert_every_job_ran(r: &quartermaster::sim::result::StrategyResult) {
    let waiting: Vec<_> = r
        .unfinished
        .iter()
        .filter(|u| !u.reason.starts_with("still running"))
        .collect();
    assert!(waiting.is_empty(), "jobs that never ran: {waiting:?}");
}

/// Two pools whose jobs need different nodes: 1-GPU training pods that ask
/// for 32 GiB (more than the cheapest GPU node per GPU, a g6.xlarge, has)
/// and MIG inference slices that only the `mig` pool can serve.
const TWO_POOLS: &str = r#"
name: static-test
start: 2026-01-05T00:00:00Z
duration: 12h
seed: 4
strategies: [static]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: train}
  spec:
    capacityTypes: [spot, on-demand]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [g5, g6]}]
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: mig}
  spec:
    capacityTypes: [on-demand]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [p4de]}]
    gpuSharing: {mode: Mig, migProfile: 1g.10gb}
workloads:
- training: {name: t, jobs: 6, perHour: 3, gpus: [1], runTime: {median: 1h, p90: 2h}}
- inference: {name: embed, migProfile: 1g.10gb, minReplicas: 2, maxReplicas: 4, peakHour: 6, timeZone: UTC}
"#;

#[test]
fn the_static_strategy_sizes_a_group_per_pool_that_holds_every_job() {
    let report = run_text(TWO_POOLS, Path::new("."));
    let r = &report.strategies["static"];
    assert_every_job_ran(r);
    assert!(r.jobs_completed > 0);
    assert!(r.nodes_launched >= 2, "one group per pool");
    assert!(
        r.gpu_hours > 0.0 && r.provisioned_gpu_hours > r.gpu_hours,
        "sized for the peak, idle the rest of the time"
    );
}

/// One pool whose jobs no single instance type holds: 1-GPU jobs that want
/// an A10G (g5) and 8-GPU jobs that want A100s (p4d).
const TWO_SHAPES: &str = r#"
name: static-shapes
start: 2026-01-05T00:00:00Z
duration: 12h
seed: 5
strategies: [static]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: gpu}
  spec:
    capacityTypes: [on-demand]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [g5, p4d]}]
workloads:
- training: {name: small, jobs: 6, perHour: 3, gpus: [1], gpuModels: [a10g], runTime: {median: 1h, p90: 2h}}
- training: {name: large, jobs: 3, perHour: 1, gpus: [8], gpuModels: [a100], runTime: {median: 1h, p90: 2h}}
"#;

#[test]
fn the_static_strategy_sizes_a_group_per_shape_class_when_no_type_holds_a_pools_jobs() {
    let report = run_text(TWO_SHAPES, Path::new("."));
    let r = &report.strategies["static"];
    assert_every_job_ran(r);
    assert!(r.total_cost > 0.0 && r.total_cost >= report.lower_bound_cost);
    assert!(r.jobs_completed > 0, "{r:?}");
    let families: std::collections::BTreeSet<&String> = r
        .timeseries
        .iter()
        .flat_map(|s| s.nodes_by_family.keys())
        .collect();
    assert_eq!(
        families.into_iter().collect::<Vec<_>>(),
        ["g5", "p4d"],
        "one group per shape class"
    );
}

/// One pool, two static groups: 1-GPU pods that a g5.xlarge holds, and
/// 4-GPU pods an hour later that need a g5.12xlarge. The small pods arrive
/// while every node is still booting.
const PINNING: &str = r#"
name: static-pinning
start: 2026-01-05T00:00:00Z
duration: 12h
seed: SEED
strategies: [static]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: gpu}
  spec:
    capacityTypes: [on-demand]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [g5]}]
workloads:
- trace: {path: static-pinning.csv}
"#;

#[test]
fn static_jobs_wait_for_their_own_group_rather_than_take_another_groups_room() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces");
    // Whichever group's node is Ready first, the small pods go to theirs, so
    // the large pods find the room their group was sized for.
    for seed in 1..=6 {
        let report = run_text(&PINNING.replace("SEED", &seed.to_string()), &dir);
        let r = &report.strategies["static"];
        assert_every_job_ran(r);
        assert_eq!(r.nodes_launched, 6, "4 g5.xlarge and 2 g5.12xlarge");
    }
}

#[test]
fn a_static_job_whose_group_never_launched_waits_for_capacity_not_for_a_pool() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces");
    // No g5.xlarge can be had: the small pods' group never comes up.
    let zones = ["use1-az1", "use1-az2", "use1-az4", "use1-az5", "use1-az6"];
    let exhausted: Vec<String> = zones
        .iter()
        .map(|z| format!("g5.xlarge/{z}/on-demand"))
        .collect();
    let yaml = format!(
        "{}cloud: {{insufficientCapacity: [{}]}}\n",
        PINNING.replace("SEED", "1"),
        exhausted.join(", ")
    );
    let r = &run_text(&yaml, &dir).strategies["static"];
    let small: Vec<_> = r
        .unfinished
        .iter()
        .filter(|u| u.job.starts_with("trace/small"))
        .collect();
    assert_eq!(small.len(), 4, "{:?}", r.unfinished);
    // A pool can place them: the pin to the group is not a reason.
    assert!(
        small
            .iter()
            .all(|u| u.reason.starts_with("waiting for capacity")),
        "{small:?}"
    );
}

/// Issue 11's targets for `spot-training.yaml` on the calibrated market
/// (the fitted `pricing-data/market.json`) with realistic checkpoint write
/// times, over seeds 1 to 5 rather than the scenario's own seed: one week is
/// one draw of the workload and of the reclaims, and on this market a single
/// draw can make either strategy look better (`simulate --seeds`). What
/// holds over the draws: quartermaster is interrupted in every seed, costs
/// at most 0.40 x on-demand in every seed, costs less than greedy on the
/// mean and in most seeds, is slowed down no more than greedy on the mean,
/// and every job it leaves unfinished was running at the end (on-demand
/// finishes up to four more: a gang slowed by reclaims). Not reached
/// (`docs/results.md`, "Where the calibrated market leaves us"): lost GPU-hours <= 3%
/// and <= half of greedy's (quartermaster loses about as much as greedy),
/// p95 slowdown <= 1.25.
#[test]
fn spot_training_on_the_calibrated_market_is_interrupted_yet_cheaper_than_greedy_and_fast() {
    use quartermaster::sim::seeds;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/spot-training.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let scenario = Scenario::parse(&text, &catalog).unwrap();
    let strategies = [
        StrategyName::Quartermaster,
        StrategyName::Greedy,
        StrategyName::OnDemand,
    ];
    let report = sim::simulate_seeds(
        &scenario,
        &catalog,
        path.parent().unwrap(),
        None,
        &strategies,
        &[1, 2, 3, 4, 5],
        &mut |_, _, _| {},
    )
    .unwrap();
    for run in &report.runs {
        let s = |n: &str| &run.strategies[n];
        let (qm, od) = (s("quartermaster"), s("on-demand"));
        for r in run.strategies.values() {
            assert_lost_work_by_shape_adds_up(r);
        }
        assert!(
            qm.lost_by_shape["8 GPUs, gang of 4"].interruptions > 0,
            "seed {}: a reclaim stops gangs of 8-GPU pods too: {:?}",
            run.seed,
            qm.lost_by_shape.keys()
        );
        assert!(
            qm.interruptions > 0,
            "seed {}: the market reclaims",
            run.seed
        );
        assert!(
            qm.total_cost <= 0.40 * od.total_cost,
            "seed {}: quartermaster ${:.2} vs on-demand ${:.2}",
            run.seed,
            qm.total_cost,
            od.total_cost
        );
        // A job left unfinished was running at the end, slowed by reclaims
        // (a gang at 96% in seed 1); none starved waiting for capacity.
        for u in &qm.unfinished {
            assert!(
                u.reason.starts_with("still running at the end"),
                "seed {}: {} {}",
                run.seed,
                u.job,
                u.reason
            );
        }
    }
    let mean = |n: &str, m: seeds::Measure| report.spread(n, m).unwrap().mean;
    assert!(
        mean("quartermaster", seeds::cost) <= mean("greedy", seeds::cost),
        "mean cost ${:.2} vs greedy ${:.2}",
        mean("quartermaster", seeds::cost),
        mean("greedy", seeds::cost)
    );
    let (cheaper, n) = report.at_most("quartermaster", "greedy", seeds::cost);
    assert!(
        2 * cheaper > n,
        "no dearer than greedy in {cheaper} of {n} seeds"
    );
    assert!(
        mean("quartermaster", seeds::p95_slowdown) <= mean("greedy", seeds::p95_slowdown),
        "mean p95 slowdown {:.2} vs greedy {:.2}",
        mean("quartermaster", seeds::p95_slowdown),
        mean("greedy", seeds::p95_slowdown)
    );
}

/// The per-shape breakdown of lost work covers every job once: its jobs,
/// lost GPU-hours (and their causes) and interruptions add up to the
/// strategy's totals.
fn assert_lost_work_by_shape_adds_up(r: &quartermaster::sim::result::StrategyResult) {
    let shapes = r.lost_by_shape.values();
    let jobs: u32 = shapes.clone().map(|s| s.jobs).sum();
    let stops: u32 = shapes.clone().map(|s| s.interruptions).sum();
    let lost: f64 = shapes.clone().map(|s| s.lost_gpu_hours).sum();
    let rework: f64 = shapes.clone().map(|s| s.lost_gpu_hours_by.rework).sum();
    assert_eq!(jobs, r.jobs_total);
    assert_eq!(stops, r.interruptions);
    assert!(
        (lost - r.lost_gpu_hours).abs() < 1e-6 * (1.0 + lost),
        "{lost} vs {}",
        r.lost_gpu_hours
    );
    let total_rework = r.lost_gpu_hours_by.rework;
    assert!(
        (rework - total_rework).abs() < 1e-6 * (1.0 + rework),
        "{rework} vs {total_rework}"
    );
    for (name, s) in &r.lost_by_shape {
        assert!(
            s.work_gpu_hours > 0.0 || name.starts_with("no GPU"),
            "{name}: {s:?}"
        );
        assert!(
            s.lost_gpu_hours <= s.work_gpu_hours + 1e-9 || s.interruptions > 0,
            "{name}: {s:?}"
        );
    }
}

/// Issue 11's targets for `spot-trace-replay.yaml`, the spot-training week
/// with the measured reclaim history of `../shared/traces/spot` replayed
/// onto the p4d pools the jobs run on: quartermaster costs no more than
/// greedy and than on-demand, and loses no more GPU-hours than greedy. And
/// the history matters: without the traces the week's numbers differ.
/// The traces are not part of the repository; CI has `../shared` beside
/// the checkout, and without it this test fails saying so.
#[test]
fn replayed_reclaim_history_leaves_quartermaster_cheaper_than_greedy_and_losing_no_more() {
    let traces = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/traces/spot");
    assert!(
        traces.is_dir(),
        "{} is missing: spot-trace-replay.yaml replays the measured traces there \
         (../shared beside the checkout, as in CI)",
        traces.display()
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/spot-trace-replay.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let dir = path.parent().unwrap();
    let r = run_text(&yaml, dir);
    let s = |n: &str| &r.strategies[n];
    let (qm, greedy, od) = (s("quartermaster"), s("greedy"), s("on-demand"));
    assert!(
        qm.total_cost <= greedy.total_cost && qm.total_cost <= od.total_cost,
        "quartermaster ${:.2}, greedy ${:.2}, on-demand ${:.2}",
        qm.total_cost,
        greedy.total_cost,
        od.total_cost
    );
    assert!(
        qm.lost_gpu_hours <= greedy.lost_gpu_hours,
        "lost {:.1} GPU-hours, greedy {:.1}",
        qm.lost_gpu_hours,
        greedy.lost_gpu_hours
    );
    let model_only = run_changed(&yaml, dir, |s| {
        s.cloud.spot_traces.clear();
        s.strategies = vec![quartermaster::sim::scenario::StrategyName::Quartermaster];
    });
    let summary = |x: &quartermaster::sim::result::StrategyResult| {
        (
            x.interruptions,
            x.spot_notices,
            x.lost_gpu_hours,
            x.total_cost,
        )
    };
    assert_ne!(
        summary(qm),
        summary(&model_only.strategies["quartermaster"]),
        "the replayed traces change nothing: they drive pools the jobs do not use"
    );
}

#[test]
fn pre_warmed_capacity_is_ready_at_window_start_in_95_percent_of_windows() {
    let r = run("simulations/inference-prewarm.yaml");
    let (ready, windows) = r.strategies["quartermaster"].prewarm_ready;
    assert!(windows >= 10, "two weeks of weekday windows: {windows}");
    assert!(
        f64::from(ready) >= 0.95 * f64::from(windows),
        "{ready} of {windows} windows ready at start"
    );
}

#[test]
fn every_job_of_every_scenario_finishes_or_is_explained_and_costs_at_least_the_bound() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            name.ends_with(".yaml").then_some(name)
        })
        .collect();
    names.sort();
    for name in names {
        let r = run(&format!("simulations/{name}"));
        assert!(r.lower_bound_cost > 0.0, "{name}: a bound");
        for (strategy, s) in &r.strategies {
            assert_bill_adds_up(&format!("{name} {strategy}"), s);
            // The clairvoyant bound is a bound: nobody pays less.
            assert!(
                s.total_cost >= r.lower_bound_cost,
                "{name} {strategy}: ${:.2} under the bound ${:.2}",
                s.total_cost,
                r.lower_bound_cost
            );
            assert_eq!(
                s.jobs_completed as usize + s.unfinished.len(),
                s.jobs_total as usize,
                "{name} {strategy}"
            );
            for u in &s.unfinished {
                assert!(
                    !u.reason.is_empty(),
                    "{name} {strategy}: {} unexplained",
                    u.job
                );
            }
            // Static groups are sized for every job: none may be left
            // waiting for capacity that never comes.
            if strategy == "static" {
                let stuck: Vec<_> = s
                    .unfinished
                    .iter()
                    .filter(|u| u.reason.starts_with("waiting for capacity"))
                    .collect();
                assert!(stuck.is_empty(), "{name} static: {stuck:?}");
            }
        }
    }
}

/// Where `s`'s bill went: no part is negative, and the parts add up to its
/// cost; on-demand capacity is never interrupted, so loses no work.
fn assert_bill_adds_up(what: &str, s: &quartermaster::sim::result::StrategyResult) {
    let c = &s.cost_by;
    for (part, x) in c.parts() {
        assert!(x >= 0.0, "{what}: {part} {x}");
    }
    assert!(
        (c.total() - s.total_cost).abs() <= 1e-6 * s.total_cost.max(1.0),
        "{what}: parts {:?} sum to {} of {}",
        c,
        c.total(),
        s.total_cost
    );
    assert_eq!(c.reserved_upfront, s.reserved_upfront_cost, "{what}");
    if s.interruptions == 0 && s.checkpoints == 0 {
        assert_eq!(c.lost_work, 0.0, "{what}");
    }
}

/// One-GPU training on g5 whose prices fall to a fraction of the catalog's
/// a minute in.
const CHEAPER_LATER: &str = r#"
name: cheaper-later
start: 2026-01-05T00:00:00Z
duration: 12h
seed: 5
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: train}
  spec:
    capacityTypes: [spot, on-demand]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [g5]}]
    disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 5m}
cloud:
  priceChanges:
  - {after: 1m, instanceType: g5.4xlarge, capacityType: on-demand, pricePerHour: 0.1}
  - {after: 1m, instanceType: g5.4xlarge, capacityType: spot, pricePerHour: 0.05}
workloads:
- training: {name: t, jobs: 8, perHour: 2, gpus: [1], runTime: {median: 2h, p90: 3h}}
"#;

#[test]
fn the_bound_holds_when_a_scenario_lowers_prices_during_the_run() {
    let r = run_text(CHEAPER_LATER, Path::new("."));
    assert!(r.lower_bound_cost > 0.0);
    assert_eq!(r.strategies.len(), 4);
    for (strategy, s) in &r.strategies {
        // Priced at the catalog's prices the bound was seven times what
        // every strategy paid.
        assert!(
            s.total_cost >= r.lower_bound_cost,
            "{strategy}: ${:.2} under the bound ${:.2}",
            s.total_cost,
            r.lower_bound_cost
        );
    }
}

/// One two-hour one-GPU job on one on-demand g5.4xlarge.
const ONE_JOB: &str = r#"
name: bill-test
start: 2026-01-05T00:00:00Z
duration: 6h
seed: 3
strategies: [on-demand]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: train}
  spec:
    capacityTypes: [on-demand]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [g5.4xlarge]}]
    disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 10m}
workloads:
- training: {name: t, jobs: 1, perHour: 1, gpus: [1], runTime: {median: 2h, p90: 2h}}
"#;

#[test]
fn the_bill_splits_into_the_jobs_work_at_spot_prices_the_on_demand_premium_boot_and_idle() {
    let catalog = Catalog::embedded().unwrap();
    let od = catalog.on_demand_price("us-east-1", "g5.4xlarge").unwrap();
    let jobs = jobs_of(ONE_JOB);
    assert_eq!(jobs.len(), 1);
    let work_h = jobs[0].work_s / 3600.0;
    let r = run_text(ONE_JOB, Path::new("."));
    let s = &r.strategies["on-demand"];
    assert_eq!(s.jobs_completed, 1);
    assert_eq!(s.nodes_launched, 1);
    assert_bill_adds_up("one job", s);
    let c = &s.cost_by;
    // The job held the node's only GPU for its run time: that is the work
    // and its premium, at the on-demand price.
    let held = od * work_h;
    assert!(
        (c.work + c.on_demand_premium - held).abs() < 1e-6,
        "{c:?}: held ${held}"
    );
    // Its spot price is what the work costs without the premium: the spot
    // price of g5.4xlarge in the node's zone, one of the region's.
    let spot_share = c.work / held;
    let spot_prices: Vec<f64> = catalog
        .offerings_of("us-east-1", "g5.4xlarge")
        .filter(|o| o.capacity_type == quartermaster::catalog::CapacityType::Spot)
        .map(|o| o.price_per_hour / od)
        .collect();
    assert!(
        spot_prices.iter().any(|p| (p - spot_share).abs() < 1e-9),
        "{spot_share} not among {spot_prices:?}"
    );
    // The node boots, and waits idle for consolidateAfter once empty: both
    // are paid for, and no more than the node's whole life beyond the job.
    assert!(c.booting > 0.0, "{c:?}");
    assert!(c.idle >= od * 10.0 / 60.0 - 1e-9, "{c:?}");
    assert_eq!(c.lost_work, 0.0);
    let beyond = s.total_cost - held;
    assert!((c.booting + c.idle - beyond).abs() < 1e-6, "{c:?}");
}

/// Spot and on-demand on the calibrated market: one-GPU training jobs
/// whose deadlines (when `DEADLINE` replaces the marker) leave a fifth of
/// their run time plus 15 minutes of slack.
const DEADLINES: &str = r#"
name: deadline-test
start: 2026-01-05T00:00:00Z
duration: 16h
seed: 11
strategies: [quartermaster]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: train}
  spec:
    capacityTypes: [spot, on-demand]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [g5, g6]}]
    disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 5m}
workloads:
- training: {name: t, jobs: 24, perHour: 3, gpus: [1], runTime: {median: 2h, p90: 4h}, checkpointInterval: 30m DEADLINE}
"#;

#[test]
fn jobs_with_deadlines_fall_back_to_on_demand_when_spot_reclaims_eat_their_slack() {
    use quartermaster::catalog::CapacityType;
    use quartermaster::core::Action;
    use quartermaster::sim::result::LogEvent;
    let on_demand_launches = |r: &quartermaster::sim::result::StrategyResult| {
        r.log
            .iter()
            .filter(|(_, e)| {
                matches!(e, LogEvent::Action(Action::Launch(c))
                    if c.offering.capacity_type == CapacityType::OnDemand)
            })
            .count()
    };
    let free = run_text(&DEADLINES.replace(" DEADLINE", ""), Path::new("."));
    let due = run_text(
        &DEADLINES.replace(" DEADLINE", ", deadline: {factor: 1.2}"),
        Path::new("."),
    );
    let (free, due) = (
        &free.strategies["quartermaster"],
        &due.strategies["quartermaster"],
    );
    assert!(free.spot_notices > 0, "the storm reclaims");
    assert!(
        on_demand_launches(due) > on_demand_launches(free),
        "jobs whose slack is gone restart on on-demand: {} on-demand launches with deadlines, {} without",
        on_demand_launches(due),
        on_demand_launches(free)
    );
    assert!(
        due.p95_slowdown <= free.p95_slowdown,
        "{:?} vs {:?}",
        due.p95_slowdown,
        free.p95_slowdown
    );
}

/// Runs the built `quartermaster` with `args` in the checkout.
fn cli(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_quartermaster"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

/// [`cli`]'s JSON output, failing with its stderr when it fails.
fn cli_json(args: &[&str]) -> serde_json::Value {
    let out = cli(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `simulate --seeds` runs the scenario once per seed and reports each
/// strategy's spread and the per-seed summaries, each with its own seed.
#[test]
fn simulate_over_several_seeds_reports_the_spread_and_each_seed() {
    let j = cli_json(&[
        "simulate",
        "simulations/smoke.yaml",
        "--seeds",
        "3-4",
        "--strategies",
        "quartermaster,on-demand",
        "--output",
        "json",
    ]);
    assert_eq!(j["seeds"], serde_json::json!([3, 4]));
    let per_seed: Vec<f64> = (0..2)
        .map(|i| {
            assert_eq!(j["per_seed"][i]["seed"], serde_json::json!(3 + i as u64));
            j["per_seed"][i]["strategies"]["quartermaster"]["total_cost"]
                .as_f64()
                .unwrap()
        })
        .collect();
    let cost = &j["strategies"]["quartermaster"]["total_cost"];
    assert!((cost["mean"].as_f64().unwrap() - (per_seed[0] + per_seed[1]) / 2.0).abs() < 1e-6);
    assert_eq!(cost["min"].as_f64().unwrap(), per_seed[0].min(per_seed[1]));
    assert_eq!(cost["seeds"], serde_json::json!(2));
    assert!(j["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["against"] == "on-demand" && c["measure"] == "total_cost"));
    let bad = cli(&["simulate", "simulations/smoke.yaml", "--seeds", "7-1"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("must go upwards"));
}

/// `simulate --sweep` gives, for each value, exactly what `simulate
/// --seeds` gives for the scenario file with that value written in it, and
/// writes sweep.json and a frontier.png; a misspelt path is refused before
/// anything runs.
#[test]
fn a_sweep_point_is_the_seeds_run_of_the_scenario_with_that_value_written_in() {
    let dir = crate::support::TempDir::new("qm-sweep");
    let report = dir.join("report");
    let values = ["0", "8"];
    let sweep = format!("nodePools.train.risk.riskAversion={}", values.join(","));
    let report_arg = report.display().to_string();
    let j = cli_json(&[
        "simulate",
        "simulations/smoke.yaml",
        "--sweep",
        &sweep,
        "--seeds",
        "1-2",
        "--output",
        "json",
        "--report",
        &report_arg,
    ]);
    assert_eq!(j["seeds"], serde_json::json!([1, 2]));
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(written, j, "sweep.json is what --output json printed");
    let png = std::fs::read(report.join("frontier.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "frontier.png is a PNG");

    let smoke = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/smoke.yaml"),
    )
    .unwrap();
    let pools = "    capacityTypes: [spot, on-demand]\n";
    assert!(smoke.contains(pools));
    for (k, v) in values.iter().enumerate() {
        let file = dir.join(format!("smoke-{v}.yaml"));
        let text = smoke.replace(pools, &format!("{pools}    risk: {{riskAversion: {v}}}\n"));
        std::fs::write(&file, text).unwrap();
        let file_arg = file.display().to_string();
        let seeds = cli_json(&[
            "simulate",
            &file_arg,
            "--seeds",
            "1-2",
            "--strategies",
            "quartermaster,greedy,on-demand",
            "--output",
            "json",
        ]);
        let point = &j["points"][k];
        assert_eq!(
            point["settings"]["nodePools.train.risk.riskAversion"],
            v.parse::<u32>().unwrap()
        );
        for strategy in ["quartermaster", "greedy", "on-demand"] {
            for measure in ["total_cost", "lost_share", "p95_slowdown", "interruptions"] {
                assert_eq!(
                    point["strategies"][strategy][measure], seeds["strategies"][strategy][measure],
                    "riskAversion {v}: {strategy}'s {measure}"
                );
            }
        }
    }

    let bad = cli(&[
        "simulate",
        "simulations/smoke.yaml",
        "--sweep",
        "nodePools.train.risk.riskAverson=1,2",
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("did you mean riskAversion?"), "{err}");
}

/// On the smoke scenario (a storm on g5/g6 spot), raising the pool's
/// riskAversion never raises quartermaster's lost work, on the mean over
/// seeds 1-5 (a single seed's draw can go either way: at 2 one seed lost
/// more than at 1), and the highest value loses far less than 0: the knob
/// the frontier sweeps does what it says.
#[test]
fn on_the_smoke_scenario_more_risk_aversion_never_raises_mean_lost_work() {
    use quartermaster::sim::{seeds, sweep};
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/smoke.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let values = "nodePools.train.risk.riskAversion=0,1,2,4,8,15,30";
    let points =
        sweep::scenarios("smoke.yaml", &text, &catalog, &[values.parse().unwrap()]).unwrap();
    let runs = sim::simulate_sweep(
        points,
        &catalog,
        path.parent().unwrap(),
        None,
        &[StrategyName::Quartermaster],
        &[1, 2, 3, 4, 5],
        &mut |_, _, _, _| {},
    )
    .unwrap();
    let lost: Vec<(String, f64)> = runs
        .iter()
        .map(|(p, r)| {
            let mean = r.spread("quartermaster", seeds::lost_share).unwrap().mean;
            (p.values(), mean)
        })
        .collect();
    for pair in lost.windows(2) {
        assert!(
            pair[1].1 <= pair[0].1,
            "riskAversion {} loses {:.2}% against {:.2}% at {}: {lost:?}",
            pair[1].0,
            pair[1].1 * 100.0,
            pair[0].1 * 100.0,
            pair[0].0
        );
    }
    let (first, last) = (lost[0].1, lost[lost.len() - 1].1);
    assert!(last < first / 4.0, "{lost:?}");
}

/// The scenario replaying a fleet with foreign GPU names.
fn foreign_fleet() -> (String, std::path::PathBuf) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations");
    let text = std::fs::read_to_string(dir.join("foreign-fleet.yaml")).unwrap();
    (text, dir)
}

#[test]
fn foreign_gpu_hints_are_mapped_and_those_no_pool_serves_are_reported_at_start() {
    let (text, dir) = foreign_fleet();
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let load = |yaml: &str| {
        let scenario = Scenario::parse(yaml, &catalog).unwrap();
        sim::load_jobs(&scenario, &catalog, &dir, None)
    };
    // The default drops the hints no pool serves, with one warning each.
    let w = load(&text).unwrap();
    let warned = |fragment: &str| w.warnings.iter().any(|m| m.contains(fragment));
    assert!(
        warned("\"g3\" (1 pods) maps to no GPU we know: dropped"),
        "{:?}",
        w.warnings
    );
    assert!(
        warned("\"p100\" (1 pods) maps to v100, which no pool launches"),
        "{:?}",
        w.warnings
    );
    assert!(warned("\"v100m16\" (1 pods)") && warned("\"v100m32\" (1 pods)"));
    assert!(warned(
        "nodePools[0] (gpu): family p3 has no offerings in us-east-1"
    ));
    assert!(!warned("\"g2\"") && !warned("\"a10\""), "{:?}", w.warnings);
    let hint = |id: &str| {
        let pod = &w
            .jobs
            .iter()
            .find(|j| j.pod.name.ends_with(id))
            .unwrap()
            .pod;
        format!("{:?}", pod.affinity.terms)
    };
    assert!(hint("/win-a10").contains("a10g") && hint("/win-g2").contains("t4"));
    assert_eq!(hint("/win-g3"), "[]");
    // Fail names the hints; wait keeps them, and their pods never run.
    let e = load(&text.replace(
        "gpuNames: {G2: t4}",
        "gpuNames: {G2: t4}\n    onUnknownGpu: fail",
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("\"g3\" (1 pods)") && e.contains("\"p100\""),
        "{e}"
    );
    let waiting = text
        .replace(
            "gpuNames: {G2: t4}",
            "gpuNames: {G2: t4}\n    onUnknownGpu: wait",
        )
        .replace(
            "duration: 12h",
            "duration: 12h\nstrategies: [quartermaster]",
        );
    let report = run_text(&waiting, &dir);
    let never: Vec<&str> = report.strategies["quartermaster"]
        .unfinished
        .iter()
        .filter(|u| u.reason.starts_with("never placed"))
        .map(|u| u.job.as_str())
        .collect();
    assert_eq!(never, ["trace/win-v100", "trace/win-p100", "trace/win-g3"]);
    assert!(report.warnings.iter().any(|m| m.contains("they wait")));
}

#[test]
fn a_foreign_fleet_replay_runs_every_pod_when_hints_are_dropped() {
    let (text, dir) = foreign_fleet();
    let report = run_text(&text, &dir);
    assert!(!report.warnings.is_empty());
    for (name, r) in &report.strategies {
        assert_every_job_ran(r);
        assert!(
            r.total_cost >= report.lower_bound_cost && r.total_cost > 0.0,
            "{name}"
        );
    }
}

#[test]
fn a_trace_window_carries_in_live_pods_drops_by_status_and_reports_the_traces_queue_time() {
    let (text, dir) = foreign_fleet();
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let scenario = Scenario::parse(&text, &catalog).unwrap();
    let w = sim::load_jobs(&scenario, &catalog, &dir, None).unwrap();
    let at = |id: &str| {
        w.jobs
            .iter()
            .find(|j| j.pod.name == format!("trace/{id}"))
            .map(|j| ((j.submit - scenario.start).num_seconds(), j.work_s))
    };
    // Alive at trace time 24h: carried in at the start with what was left.
    assert_eq!(at("pre-t4-alive"), Some((0, 10_800.0)));
    assert!(at("pre-a10-both").is_some());
    // Ended before the window, failed, never scheduled, or after it: out.
    for gone in ["pre-a10-gone", "win-failed", "win-pending", "post-a10"] {
        assert_eq!(at(gone), None, "{gone}");
    }
    assert_eq!(at("win-a100-8").unwrap().0, 87_000 - 86_400);
    // A pod still running at the trace's end runs past the simulation's.
    let (submit, work) = at("win-a10-end").unwrap();
    assert!(submit as f64 + work > 12.0 * 3600.0);
    let warned = |fragment: &str| w.warnings.iter().any(|m| m.contains(fragment));
    assert!(
        warned("1 rows with status Failed left out")
            && warned("2 pods alive at the window's start carried in")
    );
    // The trace's queue times of the pods replayed, carried-in ones aside.
    let mut queues = w.trace_queue_s.clone();
    queues.sort_by(f64::total_cmp);
    assert_eq!(
        queues,
        [10.0, 15.0, 20.0, 45.0, 60.0, 90.0, 120.0, 300.0, 600.0]
    );
    let report = run_text(&text, &dir);
    let q = report.trace_queue.unwrap();
    assert_eq!((q.pods, q.p95_s), (9, 600.0));
    for (name, r) in &report.strategies {
        let open = r.unfinished.iter().find(|u| u.job == "trace/win-a10-end");
        assert!(
            open.is_some_and(|u| u.reason.starts_with("still running")),
            "{name}: {open:?}"
        );
    }
    // Without carrying in, the window starts empty.
    let bare = Scenario::parse(&text.replace("carryIn: true", "carryIn: false"), &catalog).unwrap();
    let w = sim::load_jobs(&bare, &catalog, &dir, None).unwrap();
    assert!(w.jobs.iter().all(|j| !j.pod.name.starts_with("trace/pre-")));
}

/// `gpu-cluster-trace.yaml` replays CPU-only pods (front ends, data loaders)
/// and pods asking for part of a GPU beside whole-GPU pods: the CPU pods do
/// not tolerate the GPU pools' taint, so every strategy runs them on CPU
/// types of the untainted CPU pool, and no node is launched for CPU-only
/// pods with GPUs on it; the fractional pods take time-sliced shares of the
/// shared pool, which never gets a node for a whole-GPU pod.
#[test]
fn a_replayed_cluster_trace_puts_cpu_pods_on_cpu_nodes_and_gpu_shares_on_the_shared_pool() {
    use quartermaster::core::Action;
    use quartermaster::sim::result::LogEvent;
    let catalog = Catalog::embedded().unwrap();
    let has_gpus = |instance_type: &str| {
        catalog
            .instance_type(instance_type)
            .is_some_and(|t| t.accelerator.is_some())
    };
    let r = run("simulations/gpu-cluster-trace.yaml");
    for (strategy, s) in &r.strategies {
        assert_eq!(
            s.jobs_completed, s.jobs_total,
            "{strategy}: {:?}",
            s.unfinished
        );
        if strategy == "static" {
            // Its groups are launched at the start, not by the core: the
            // log has no launches to check.
            continue;
        }
        let launches: Vec<_> = s
            .log
            .iter()
            .filter_map(|(_, e)| match e {
                LogEvent::Action(Action::Launch(c)) => Some(c),
                _ => None,
            })
            .collect();
        let cpu: Vec<_> = launches.iter().filter(|c| c.nodepool == "cpu").collect();
        assert!(!cpu.is_empty(), "{strategy}: no CPU node launched");
        for c in cpu {
            assert!(!has_gpus(&c.offering.instance_type), "{strategy}: {c:?}");
        }
        for c in &launches {
            let cpu_pods_only =
                !c.pods.is_empty() && c.pods.iter().all(|p| p.starts_with("trace/cpu-"));
            assert!(
                !(cpu_pods_only && has_gpus(&c.offering.instance_type)),
                "{strategy}: {c:?}"
            );
            // A node of the shared pool holds shares only; no share is
            // launched for elsewhere (pre-warm launches name no pods).
            let shares = c.pods.iter().filter(|p| p.starts_with("trace/gpu-frac-"));
            let n = shares.count();
            assert!(
                c.pods.is_empty() || (c.nodepool == "shared") == (n == c.pods.len()),
                "{strategy}: {c:?}"
            );
        }
        assert!(
            launches.iter().any(|c| c.nodepool == "shared"),
            "{strategy}: no shared node"
        );
    }
}

/// Gangs of two 1-GPU members, one per node, on spot (on-demand when spot
/// pools close) through a storm.
const GANG_STORM: &str = r#"
name: gang-storm-test
start: 2026-01-05T00:00:00Z
duration: 24h
seed: 4
strategies: [quartermaster]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: spot}
  spec:
    capacityTypes: [spot, on-demand]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [g5, g6]},
                       {key: quartermaster.dev/gpu-count, operator: In, values: ["1"]}]
    disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 5m}
workloads:
- training: {name: gang, jobs: 12, perHour: 4, gpus: [1], runTime: {median: 2h, p90: 4h},
             checkpointInterval: 30m, gangFraction: 1.0, gangSize: 2}
cloud:
  storms: [{after: 1h, duration: 4h, multiplier: 20}]
"#;

#[test]
fn a_reclaim_of_one_gang_member_checkpoints_every_member_and_stops_the_gang_whole() {
    let report = run_text(GANG_STORM, Path::new("."));
    let r = &report.strategies["quartermaster"];
    assert!(
        r.spot_notices >= 2,
        "the storm interrupts: {}",
        r.spot_notices
    );
    let jobs = jobs_of(GANG_STORM);
    assert_gangs_checkpoint_and_stop_whole(r, &jobs, 0.5);
    assert_eq!(r.jobs_completed as usize + r.unfinished.len(), jobs.len());
}

/// A gang that was drained whole runs again under the same names (the
/// simulator re-binds the same jobs); its next notice must ask it again.
/// On `spot-training` (seed 7, quartermaster), every checkpointing member of
/// a gang running on a node when its spot notice arrives holds a checkpoint
/// request made by the notice's deadline and still current at the notice.
#[test]
fn every_gang_member_on_an_interrupted_node_is_asked_to_checkpoint_however_often_it_ran() {
    use quartermaster::core::{Action, Notice, Time};
    use quartermaster::sim::result::LogEvent;
    use std::collections::{BTreeMap, BTreeSet};

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/spot-training.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let report = run_changed(&yaml, path.parent().unwrap(), |s| {
        s.strategies = vec![StrategyName::Quartermaster];
    });
    let r = &report.strategies["quartermaster"];
    // Members whose checkpoint fits in the 90 s between the notice and its
    // checkpoint deadline (a slower one is rightly not asked).
    let members: BTreeSet<String> = jobs_of(&yaml)
        .into_iter()
        .filter(|j| j.pod.group.as_ref().is_some_and(|g| g.min_member > 1))
        .filter(|j| j.pod.checkpoints && j.checkpoint_write_s <= 90.0)
        .map(|j| j.pod.name)
        .collect();
    let mut running: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut runs: BTreeMap<String, u32> = BTreeMap::new();
    let mut noticed: Vec<(String, Time, Time)> = Vec::new();
    let mut requests: BTreeMap<String, Vec<(Time, Time)>> = BTreeMap::new();
    for (at, event) in &r.log {
        match event {
            LogEvent::JobStarted { job, node } => {
                running.entry(node.clone()).or_default().insert(job.clone());
                *runs.entry(job.clone()).or_default() += 1;
            }
            LogEvent::JobStopped { job, node } => {
                running.entry(node.clone()).or_default().remove(job);
            }
            LogEvent::JobFinished(job) => {
                for jobs in running.values_mut() {
                    jobs.remove(job);
                }
            }
            LogEvent::Notice(Notice::SpotInterruption { claim, deadline }) => {
                for job in running.get(claim).into_iter().flatten() {
                    if members.contains(job) {
                        noticed.push((job.clone(), *at, *deadline));
                    }
                }
            }
            LogEvent::Action(Action::RequestCheckpoint { pod, deadline, .. }) => {
                requests
                    .entry(pod.clone())
                    .or_default()
                    .push((*at, *deadline));
            }
            _ => {}
        }
    }
    let again = noticed.iter().filter(|(job, ..)| runs[job] > 1).count();
    assert!(
        again >= 5,
        "members that ran before are interrupted again: {again} of {}",
        noticed.len()
    );
    for (job, at, deadline) in &noticed {
        let asked = requests.get(job).into_iter().flatten();
        assert!(
            asked.clone().any(|(t, d)| t <= deadline && d >= at),
            "{job}, on a node noticed at {at}, was not asked (its run {}; its requests {:?})",
            runs[job],
            asked.collect::<Vec<_>>()
        );
    }
}

/// The jobs of a scenario.
fn jobs_of(yaml: &str) -> Vec<quartermaster::sim::workload::SimJob> {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let scenario = Scenario::parse(yaml, &catalog).unwrap();
    sim::load_jobs(&scenario, &catalog, Path::new("."), None)
        .unwrap()
        .jobs
}

/// In `r`'s log, every job being a member of a gang of two one-GPU pods
/// with checkpoints every `interval_h`: whenever a member is asked to
/// checkpoint, every member is, by one deadline; a gang stops whole; each
/// stop loses at most one checkpoint interval of the gang's GPUs. Returns
/// how many collective requests and gang stops there were.
fn assert_gangs_checkpoint_and_stop_whole(
    r: &quartermaster::sim::result::StrategyResult,
    jobs: &[quartermaster::sim::workload::SimJob],
    interval_h: f64,
) -> (usize, usize) {
    use quartermaster::core::Action;
    use quartermaster::sim::result::LogEvent;
    use std::collections::{BTreeMap, BTreeSet};

    let gang_of: BTreeMap<String, String> = jobs
        .iter()
        .map(|j| (j.pod.name.clone(), j.pod.group.clone().unwrap().name))
        .collect();
    // Per (time, gang): the deadlines its members were given, and which
    // members stopped.
    let mut asked: BTreeMap<(String, String), BTreeMap<String, String>> = BTreeMap::new();
    let mut stopped: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (at, event) in &r.log {
        match event {
            LogEvent::Action(Action::RequestCheckpoint { pod, deadline, .. }) => {
                asked
                    .entry((at.to_rfc3339(), gang_of[pod].clone()))
                    .or_default()
                    .insert(pod.clone(), deadline.to_rfc3339());
            }
            LogEvent::JobStopped { job, .. } => {
                stopped
                    .entry((at.to_rfc3339(), gang_of[job].clone()))
                    .or_default()
                    .insert(job.clone());
            }
            _ => {}
        }
    }
    assert!(!asked.is_empty(), "some gang was asked to checkpoint");
    for ((at, gang), members) in &asked {
        assert_eq!(members.len(), 2, "{gang} at {at}: only {members:?} asked");
        let deadlines: BTreeSet<&String> = members.values().collect();
        assert_eq!(
            deadlines.len(),
            1,
            "{gang} at {at}: one deadline, not {deadlines:?}"
        );
    }
    assert!(!stopped.is_empty(), "some gang was stopped");
    for ((at, gang), members) in &stopped {
        assert_eq!(
            members.len(),
            2,
            "{gang} at {at}: a partial gang kept running"
        );
    }
    let per_stop = interval_h * 2.0;
    assert!(
        r.lost_gpu_hours <= stopped.len() as f64 * per_stop,
        "{} GPU-hours lost over {} gang stops",
        r.lost_gpu_hours,
        stopped.len()
    );
    (asked.len(), stopped.len())
}

#[test]
fn gangs_arriving_as_provisioning_requests_start_whole_once_provisioned_and_checkpoint_together() {
    use quartermaster::sim::result::LogEvent;
    use std::collections::BTreeMap;

    let yaml = GANG_STORM.replace("gangSize: 2}", "gangSize: 2, provisioningRequest: true}");
    let report = run_text(&yaml, Path::new("."));
    let r = &report.strategies["quartermaster"];
    let jobs = jobs_of(&yaml);
    // When each gang's request was provisioned (or failed), and when its
    // pods were created.
    let mut provisioned: BTreeMap<String, quartermaster::core::Time> = BTreeMap::new();
    let mut failed = 0;
    let mut created: BTreeMap<String, quartermaster::core::Time> = BTreeMap::new();
    for (at, event) in &r.log {
        match event {
            LogEvent::Provisioning(t) if t.status && t.condition == "Provisioned" => {
                provisioned.insert(t.request.clone(), *at);
            }
            LogEvent::Provisioning(t) if t.status && t.condition == "Failed" => failed += 1,
            LogEvent::JobCreated(job) => {
                created.insert(job.clone(), *at);
            }
            _ => {}
        }
    }
    assert!(!provisioned.is_empty(), "some request was provisioned");
    for j in &jobs {
        let gang = &j.pod.group.as_ref().unwrap().name;
        if let (Some(at), Some(p)) = (created.get(&j.pod.name), provisioned.get(gang)) {
            assert_eq!(
                at, p,
                "{} created when its request was provisioned",
                j.pod.name
            );
        }
    }
    assert_eq!(
        provisioned.len() + failed,
        jobs.len() / 2,
        "every request provisioned or failed"
    );
    assert_gangs_checkpoint_and_stop_whole(r, &jobs, 0.5);
    assert_eq!(r.jobs_completed as usize + r.unfinished.len(), jobs.len());
}

#[test]
fn a_capacity_block_ending_mid_training_is_drained_and_replaced_before_its_end_losing_at_most_a_checkpoint_interval(
) {
    use quartermaster::core::Action;
    use quartermaster::sim::result::LogEvent;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/capacity-block.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = path.parent().unwrap();
    let with = run_text(&text, dir);
    let r = &with.strategies["quartermaster"];
    assert_eq!(r.jobs_completed, r.jobs_total, "{:?}", r.unfinished);
    let start = chrono::DateTime::parse_from_rfc3339("2026-03-02T00:00:00Z").unwrap();
    let end = start + chrono::Duration::hours(10);
    let launches: Vec<(
        quartermaster::core::Time,
        &quartermaster::core::ClaimRequest,
    )> = r
        .log
        .iter()
        .filter_map(|(t, e)| match e {
            LogEvent::Action(Action::Launch(req)) => Some((*t, req)),
            _ => None,
        })
        .collect();
    let (block, elsewhere): (Vec<_>, Vec<_>) = launches
        .iter()
        .partition(|(_, req)| req.reservation.is_some());
    // The gang starts on the block, the whole block and nothing beyond it.
    assert_eq!(block.len(), 4, "{launches:?}");
    assert!(block.iter().all(|(t, _)| *t < end));
    // Its replacement is launched after the drain starts and before the end.
    assert_eq!(elsewhere.len(), 4, "{launches:?}");
    let lead = end - chrono::Duration::minutes(40);
    assert!(
        elsewhere.iter().all(|(t, _)| *t >= lead && *t < end),
        "{elsewhere:?}"
    );
    // No node of the block outlives the block.
    let block_claims: Vec<&str> = block.iter().map(|(_, req)| req.claim.as_str()).collect();
    let gone: Vec<_> = r
        .log
        .iter()
        .filter(|(_, e)| matches!(e, LogEvent::NodeGone(c) if block_claims.contains(&c.as_str())))
        .collect();
    assert_eq!(gone.len(), 4);
    assert!(gone.iter().all(|(t, _)| *t <= end), "{gone:?}");
    // Checkpointed on request: each of the 4 pods (8 GPUs) loses less than
    // one 30-minute checkpoint interval (restart overhead included).
    assert_eq!(r.interruptions, 4);
    assert!(r.lost_gpu_hours <= 4.0 * 8.0 * 0.5, "{}", r.lost_gpu_hours);
    // The block (paid up front at its price) costs less than running the
    // same hours on demand.
    let without = run_changed(&text, dir, |s| s.cloud.reservations.clear());
    let w = &without.strategies["quartermaster"];
    assert_eq!(w.reserved_upfront_cost, 0.0);
    assert_eq!(r.reserved_upfront_cost, 1258.56);
    assert!(
        r.total_cost < w.total_cost,
        "with the block {} vs without {}",
        r.total_cost,
        w.total_cost
    );
    assert!(with.lower_bound_cost <= r.total_cost);
}

/// What a run's log says of its nodes, by claim.
struct NodeLog {
    /// When each was launched.
    launched: std::collections::BTreeMap<String, chrono::DateTime<chrono::Utc>>,
    /// When each was first cordoned, and why.
    cordoned: std::collections::BTreeMap<
        String,
        (
            chrono::DateTime<chrono::Utc>,
            quartermaster::core::DisruptionReason,
        ),
    >,
    /// When each went.
    gone: std::collections::BTreeMap<String, chrono::DateTime<chrono::Utc>>,
}

fn node_log(r: &quartermaster::sim::result::StrategyResult) -> NodeLog {
    use quartermaster::core::Action;
    use quartermaster::sim::result::LogEvent;
    let mut log = NodeLog {
        launched: Default::default(),
        cordoned: Default::default(),
        gone: Default::default(),
    };
    for (at, e) in &r.log {
        match e {
            LogEvent::Action(Action::Launch(c)) => {
                log.launched.insert(c.claim.clone(), *at);
            }
            LogEvent::Action(Action::Cordon { claim, reason }) => {
                log.cordoned.entry(claim.clone()).or_insert((*at, *reason));
            }
            LogEvent::NodeGone(claim) => {
                log.gone.insert(claim.clone(), *at);
            }
            _ => {}
        }
    }
    log
}

#[test]
fn an_image_release_replaces_every_older_node_new_node_first_and_the_replacements_are_paid_for() {
    use quartermaster::core::DisruptionReason;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/image-release.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = path.parent().unwrap();
    let released = run_text(&text, dir);
    let never = run_changed(&text, dir, |s| s.cloud.image_releases.clear());
    let release = chrono::DateTime::parse_from_rfc3339("2026-01-05T04:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    for (name, r) in &released.strategies {
        let n = &never.strategies[name];
        assert_eq!(n.drift_replacements, 0, "{name}: no release, no drift");
        // Nodes launched before the release and still there at it.
        let NodeLog {
            launched,
            cordoned,
            gone,
        } = node_log(r);
        let old: Vec<&String> = launched
            .iter()
            .filter(|(c, at)| **at < release && gone.get(*c).is_none_or(|g| *g > release))
            .map(|(c, _)| c)
            .collect();
        assert!(old.len() >= 2, "{name}: nodes to replace: {old:?}");
        let drifted: Vec<&String> = cordoned
            .iter()
            .filter(|(_, (_, reason))| *reason == DisruptionReason::Drifted)
            .map(|(c, _)| c)
            .collect();
        assert_eq!(r.drift_replacements as usize, drifted.len(), "{name}");
        for c in &old {
            // Each older node is replaced, unless it emptied and left first.
            let left_on_its_own = gone[*c] <= cordoned.get(*c).map_or(gone[*c], |(at, _)| *at);
            assert!(
                drifted.contains(c) || left_on_its_own,
                "{name}: {c} launched before the release was never replaced"
            );
        }
        assert!(!drifted.is_empty(), "{name}");
        for c in &drifted {
            assert!(
                launched[*c] < release,
                "{name}: only older nodes drift: {c}"
            );
            // New node first: a launch after the release and before the
            // cordon made room for its pods.
            let at = cordoned[*c].0;
            assert!(
                launched.values().any(|l| *l >= release && *l <= at),
                "{name}: {c} cordoned at {at} before any replacement was launched"
            );
        }
        assert_every_job_ran(r);
        // Replacements are extra nodes, and they are paid for.
        assert!(r.nodes_launched > n.nodes_launched, "{name}");
        assert!(r.total_cost > n.total_cost, "{name}");
    }
}

#[test]
fn nodes_outliving_expire_after_are_replaced_new_node_first_and_no_node_lives_much_longer() {
    use quartermaster::core::DisruptionReason;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/image-release.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = path.parent().unwrap();
    let lifetime = chrono::TimeDelta::hours(6);
    let no_release = |s: &mut Scenario| s.cloud.image_releases.clear();
    let never = run_changed(&text, dir, no_release);
    let expiring = run_changed(&text, dir, |s| {
        no_release(s);
        for p in &mut s.node_pools {
            p.spec.template.spec.expire_after = Some("6h".into());
        }
    });
    for (name, r) in &expiring.strategies {
        let n = &never.strategies[name];
        assert_eq!(
            n.expired_replacements, 0,
            "{name}: no expireAfter, no expiry"
        );
        let NodeLog {
            launched,
            cordoned,
            gone,
        } = node_log(r);
        let expired: Vec<&String> = cordoned
            .iter()
            .filter(|(_, (_, reason))| *reason == DisruptionReason::Expired)
            .map(|(c, _)| c)
            .collect();
        assert!(
            !expired.is_empty(),
            "{name}: a day of 8-hour jobs on 6-hour nodes"
        );
        assert_eq!(r.expired_replacements as usize, expired.len(), "{name}");
        let end = expiring.duration_s as i64;
        let start = launched.values().min().copied().unwrap();
        for (c, at) in &launched {
            let until = gone
                .get(c)
                .copied()
                .unwrap_or(start + chrono::TimeDelta::seconds(end));
            // Every node that lived past its expiry was cordoned for it,
            // within the round that noticed (the replacement's boot aside).
            if until - *at > lifetime + chrono::TimeDelta::minutes(30) {
                let (when, reason) = cordoned
                    .get(c)
                    .unwrap_or_else(|| panic!("{name}: {c} outlived expireAfter"));
                assert_eq!(*reason, DisruptionReason::Expired, "{name}: {c}");
                assert!(
                    *when >= *at + lifetime,
                    "{name}: {c} cordoned before expiring"
                );
            }
        }
        for c in &expired {
            let (at, _) = cordoned[*c];
            assert!(at >= launched[*c] + lifetime, "{name}: {c} expired early");
            // New node first: a launch at or after its expiry and before the
            // cordon made room for its pods.
            let expiry = launched[*c] + lifetime;
            assert!(
                launched.values().any(|l| *l >= expiry && *l <= at),
                "{name}: {c} cordoned at {at} before any replacement was launched"
            );
        }
        assert_every_job_ran(r);
        assert!(r.nodes_launched > n.nodes_launched, "{name}");
    }
}

#[test]
fn gangs_that_ask_for_one_network_block_start_whole_in_one_block_and_scatter_without() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/one-block-gangs.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let one = run_text(&text, path.parent().unwrap());
    let line = "    gangTopology: topology.k8s.aws/network-node-layer-3\n";
    assert!(text.contains(line));
    let free = run_text(&text.replace(line, ""), path.parent().unwrap());
    let (q1, q0) = (
        &one.strategies["quartermaster"],
        &free.strategies["quartermaster"],
    );
    eprintln!(
        "one block: {:?} gang starts, ${:.2}, {} nodes; without: {:?} gang starts, ${:.2}, {} nodes",
        q1.gang_blocks,
        q1.total_cost,
        q1.nodes_launched,
        q0.gang_blocks,
        q0.total_cost,
        q0.nodes_launched
    );
    let (whole, seen) = q1.gang_blocks;
    assert!(seen > 0, "gangs started on nodes with a topology");
    assert_eq!(whole, seen, "every gang in one block");
    let (whole, seen) = q0.gang_blocks;
    assert!(
        seen > 0 && whole < seen,
        "without the constraint gangs scatter: {whole} of {seen}"
    );
}

#[test]
fn a_scheduled_buffer_holds_every_window_it_is_open_for() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/buffer-schedule.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = path.parent().unwrap();
    let b = &run_text(&text, dir).strategies["quartermaster"];
    // The same sixteen GPUs as the GPU pool's pre-warm window.
    let line = text
        .lines()
        .find(|l| l.starts_with("- {name: office-hours"))
        .unwrap();
    let prewarm = text.replace(&format!("buffers:\n{line}\n"), "").replace(
        "    risk: {maxInterruptionBucket: 2}\n",
        "    risk: {maxInterruptionBucket: 2}\n    prewarm:\n    - {name: office-hours, schedule: \"0 8 * * 1-5\", timeZone: Europe/Berlin, duration: 10h, capacity: {nvidia.com/gpu: \"16\"}}\n",
    );
    assert_ne!(prewarm, text);
    let p = &run_text(&prewarm, dir).strategies["quartermaster"];
    eprintln!(
        "buffer: windows held {:?}, ${:.2}; prewarm: windows ready {:?}, ${:.2}",
        b.buffer_windows, b.total_cost, p.prewarm_ready, p.total_cost
    );
    let (held, windows) = b.buffer_windows;
    assert_eq!(windows, 5, "five weekday windows");
    assert_eq!(held, windows, "every chunk held on a Ready node while open");
    assert_eq!(p.prewarm_ready, (5, 5));
    assert_eq!(
        p.buffer_windows,
        (0, 0),
        "no buffer in the pre-warm variant"
    );
    // Issue 34's target: no dearer than the same capacity pre-warmed (the
    // buffer's nodes go when its window closes, launched with the GPU
    // pool's lead: docs/buffers.md).
    assert!(
        b.total_cost <= p.total_cost + 1e-6,
        "buffer ${:.2} against pre-warm ${:.2}",
        b.total_cost,
        p.total_cost
    );
}

/// `--trace` names a file as the shell sees it, relative to the working
/// directory, not to the scenario's folder; its jobs are replayed beside
/// the scenario's own.
#[test]
fn a_trace_named_on_the_command_line_is_read_from_the_working_directory() {
    let args = |trace: Option<&'static str>| {
        let mut a = vec![
            "simulate",
            "simulations/smoke.yaml",
            "--strategies",
            "on-demand",
            "--output",
            "json",
        ];
        if let Some(t) = trace {
            a.extend(["--trace", t]);
        }
        a
    };
    let own = cli_json(&args(None));
    let with = cli_json(&args(Some("simulations/traces/foreign-fleet.csv")));
    let jobs = |j: &serde_json::Value| j["strategies"]["on-demand"]["jobs_total"].as_u64().unwrap();
    assert!(
        jobs(&with) > jobs(&own),
        "{} vs {}",
        jobs(&with),
        jobs(&own)
    );
}
