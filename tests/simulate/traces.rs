use super::*;

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
