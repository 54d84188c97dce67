use super::*;

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
