use super::*;

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
