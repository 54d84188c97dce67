use super::*;

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
