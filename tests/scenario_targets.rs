//! The targets, checked by running the scenarios in `simulations/`
//! through every strategy (the same runs as `quartermaster simulate`):
//! - spot training: quartermaster costs at most 40% of on-demand, loses at
//!   most 2% of its GPU-hours, and never costs more than greedy;
//! - pre-warm: the requested capacity is Ready at window start in at least
//!   95% of windows;
//! - every job in every scenario finishes, or the report says why not.
//!
//! (The interruption-storm target is checked in `tests/simulate.rs`.)

use quartermaster::catalog::Catalog;
use quartermaster::sim::result::SimReport;
use quartermaster::sim::{self, scenario::Scenario};
use std::path::Path;
use std::sync::Arc;

fn run(name: &str) -> SimReport {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations");
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    let scenario = Scenario::parse(&text, &catalog).unwrap();
    let jobs = sim::load_jobs(&scenario, &dir, None).unwrap();
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
fn spot_training_costs_at_most_40_percent_of_on_demand_and_never_more_than_greedy() {
    let r = run("spot-training.yaml");
    let s = |n: &str| &r.strategies[n];
    let (qm, greedy, od) = (s("quartermaster"), s("greedy"), s("on-demand"));
    assert!(
        qm.total_cost <= 0.40 * od.total_cost,
        "quartermaster ${:.2} vs on-demand ${:.2}",
        qm.total_cost,
        od.total_cost
    );
    assert!(
        qm.lost_gpu_hours <= 0.02 * qm.gpu_hours,
        "lost {:.1} of {:.1} GPU-hours",
        qm.lost_gpu_hours,
        qm.gpu_hours
    );
    assert!(
        qm.total_cost <= greedy.total_cost,
        "quartermaster ${:.2} vs greedy ${:.2}",
        qm.total_cost,
        greedy.total_cost
    );
}

#[test]
fn pre_warmed_capacity_is_ready_at_window_start_in_95_percent_of_windows() {
    let r = run("inference-prewarm.yaml");
    let (ready, windows) = r.strategies["quartermaster"].prewarm_ready;
    assert!(windows >= 10, "two weeks of weekday windows: {windows}");
    assert!(
        f64::from(ready) >= 0.95 * f64::from(windows),
        "{ready} of {windows} windows ready at start"
    );
}

#[test]
fn every_job_of_every_scenario_finishes_or_is_explained() {
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
        let r = run(&name);
        for (strategy, s) in &r.strategies {
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
