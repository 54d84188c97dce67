//! The simulator end to end on a small scenario: every strategy runs the same
//! jobs; results are reproducible.

use quartermaster::catalog::Catalog;
use quartermaster::sim::{self, scenario::Scenario};
use std::path::Path;
use std::sync::Arc;

fn run(file: &str) -> quartermaster::sim::result::SimReport {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let scenario = Scenario::parse(&text, &catalog).unwrap();
    let jobs = sim::load_jobs(&scenario, path.parent().unwrap(), None).unwrap();
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
        let scenario =
            Scenario::parse(&text, &catalog).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let jobs = sim::load_jobs(&scenario, &dir, None).unwrap();
        assert!(!jobs.is_empty(), "{} has no jobs", path.display());
        seen += 1;
    }
    assert!(seen >= 5, "only {seen} scenarios");
}
