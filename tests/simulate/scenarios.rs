use super::*;

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
