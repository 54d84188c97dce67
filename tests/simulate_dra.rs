//! DRA in the simulator (`simulations/dra-gpus.yaml`): workloads whose
//! GPU demand is asked through ResourceClaims run through the same core as
//! in the controller; nodes launched for them publish ResourceSlices made
//! from the catalog's device templates, and pods bind only where their
//! claims' devices are. Checked: the DRA form of a workload costs what its
//! device-plugin form costs on the same seed (to the cent where nothing is
//! reclaimed; where the market reclaims, the runs are reclaimed differently
//! and their work agrees within 3%) and is charged the same GPU shares; claims by product name and by memory run only on types whose
//! GPUs match; a selector that cannot match leaves its jobs unfinished
//! with the claim's reason, never run on a GPU they did not ask for.

use quartermaster::catalog::Catalog;
use quartermaster::sim;
use quartermaster::sim::result::{LogEvent, SimReport};
use quartermaster::sim::scenario::{Scenario, WorkloadSource};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

const SCENARIO: &str = "simulations/dra-gpus.yaml";

fn scenario(catalog: &Catalog) -> Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SCENARIO);
    let text = std::fs::read_to_string(path).unwrap();
    Scenario::parse(&text, catalog).unwrap()
}

fn run(scenario: &Scenario, catalog: &Arc<Catalog>) -> SimReport {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations");
    let jobs = sim::load_jobs(scenario, catalog, &dir, None).unwrap();
    sim::simulate(
        scenario,
        catalog,
        &jobs,
        &scenario.strategies,
        &mut |_, _| {},
    )
    .unwrap()
}

/// The source's `dra`, to change.
fn dra_of(w: &mut WorkloadSource) -> &mut Option<sim::dra::DraSpec> {
    match w {
        WorkloadSource::Training(t) => &mut t.dra,
        WorkloadSource::Inference(s) => &mut s.dra,
        WorkloadSource::Burst(b) => &mut b.dra,
        WorkloadSource::Trace(t) => &mut t.dra,
    }
}

/// The instance type of each node launched, by claim.
fn types(r: &quartermaster::sim::result::StrategyResult) -> BTreeMap<String, String> {
    r.log
        .iter()
        .filter_map(|(_, e)| match e {
            LogEvent::Action(quartermaster::core::Action::Launch(c)) => {
                Some((c.claim.clone(), c.offering.instance_type.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The instance types each job started on.
fn ran_on(r: &quartermaster::sim::result::StrategyResult) -> BTreeMap<String, Vec<String>> {
    let types = types(r);
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, e) in &r.log {
        if let LogEvent::JobStarted { job, node } = e {
            out.entry(job.clone())
                .or_default()
                .push(types.get(node).cloned().unwrap_or_default());
        }
    }
    out
}

/// Jobs left at the end are still running, not waiting for a device.
fn assert_only_still_running(name: &str, r: &quartermaster::sim::result::StrategyResult) {
    let waiting: Vec<_> = r
        .unfinished
        .iter()
        .filter(|u| !u.reason.starts_with("still running"))
        .collect();
    assert!(waiting.is_empty(), "{name}: {waiting:?}");
}

#[test]
fn the_dra_form_of_a_workload_costs_what_its_device_plugin_form_costs_on_the_same_seed() {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    // The workload that takes any GPU, as claims and as counts.
    let mut claims = scenario(&catalog);
    claims.workloads.truncate(1);
    assert_eq!(dra_of(&mut claims.workloads[0]), &Some(Default::default()));
    let mut counts = claims.clone();
    *dra_of(&mut counts.workloads[0]) = None;

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations");
    let jobs = sim::load_jobs(&claims, &catalog, &dir, None).unwrap().jobs;
    for j in &jobs {
        assert_eq!(j.pod.requests.get("nvidia.com/gpu"), 0, "{}", j.pod.name);
        assert_eq!(j.pod.resource_claims.len(), 1, "{}", j.pod.name);
        assert!(j.pod.devices.as_ref().is_some_and(|d| d.satisfiable()));
    }

    // With the scenario's market a different node is reclaimed at a
    // different time in the two forms, and a $30 run moves by a few dollars
    // with one reclaim: the work done is compared there. Without reclaims
    // (hazard multiplier 0) nothing but the plans can differ, and the bills
    // are compared.
    let a = run(&claims, &catalog);
    let b = run(&counts, &catalog);
    let calm = |s: &Scenario| {
        let mut s = s.clone();
        s.cloud.market_tuning.hazard_multiplier = Some(0.0);
        s
    };
    let (calm_a, calm_b) = (run(&calm(&claims), &catalog), run(&calm(&counts), &catalog));
    let rel = |x: f64, y: f64| (x - y).abs() / y.abs().max(1e-9);
    for (name, dra) in &a.strategies {
        let plugin = &b.strategies[name];
        assert_eq!(dra.jobs_total, plugin.jobs_total, "{name}");
        assert_only_still_running(name, dra);
        assert_eq!(dra.jobs_completed, plugin.jobs_completed, "{name}");
        eprintln!(
            "{name}: ${:.2} and {:.1} GPU-hours as claims, ${:.2} and {:.1} as counts",
            dra.total_cost, dra.gpu_hours, plugin.total_cost, plugin.gpu_hours
        );
        // Each job is charged its share of its node's devices, as the
        // device-plugin form is charged its GPUs.
        assert!(dra.gpu_hours > 0.0, "{name}");
        let tolerance = if name == "on-demand" { 0.001 } else { 0.03 };
        assert!(
            rel(dra.gpu_hours, plugin.gpu_hours) < tolerance,
            "{name}: {} GPU-hours as claims, {} as counts",
            dra.gpu_hours,
            plugin.gpu_hours
        );
        let (dra, plugin) = (&calm_a.strategies[name], &calm_b.strategies[name]);
        assert_eq!(
            dra.interruptions, 0,
            "{name}: a calm market reclaims nothing"
        );
        eprintln!(
            "{name}, no reclaims: ${:.2} as claims, ${:.2} as counts",
            dra.total_cost, plugin.total_cost
        );
        // The same nodes, charged the same to the cent.
        let tolerance = 0.001;
        assert!(
            rel(dra.total_cost, plugin.total_cost) < tolerance,
            "{name}: ${:.2} as claims, ${:.2} as counts",
            dra.total_cost,
            plugin.total_cost
        );
        assert!(
            rel(dra.cost_by.total(), plugin.cost_by.total()) < tolerance,
            "{name}: the bill's parts"
        );
    }
    // The clairvoyant bound prices the claims' devices as it prices the
    // device plugin's GPUs.
    assert!(
        (a.lower_bound_cost - b.lower_bound_cost).abs() <= 1e-6 * b.lower_bound_cost,
        "bound ${} as claims, ${} as counts",
        a.lower_bound_cost,
        b.lower_bound_cost
    );
    // Same seed, same report.
    assert_eq!(a, run(&claims, &catalog));
}

#[test]
fn claims_by_product_name_and_by_memory_run_only_on_types_whose_gpus_match() {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let r = run(&scenario(&catalog), &catalog);
    let family = |t: &str| t.split('.').next().unwrap_or_default().to_string();
    for (name, s) in &r.strategies {
        assert_only_still_running(name, s);
        let ran = ran_on(s);
        assert_eq!(ran.len() as u32, s.jobs_total, "{name}: every job started");
        let mut families: BTreeMap<&str, std::collections::BTreeSet<String>> = BTreeMap::new();
        for (job, on) in &ran {
            let workload = job.trim_start_matches("train/").split('-').next().unwrap();
            families
                .entry(workload)
                .or_default()
                .extend(on.iter().map(|t| family(t)));
        }
        // An NVIDIA L4: g6 only; at least 40 GiB: g6e's L40S only (g5's
        // A10G and g6's L4 have 24 GiB).
        assert_eq!(families["l4"], ["g6".to_string()].into(), "{name}");
        assert_eq!(families["big"], ["g6e".to_string()].into(), "{name}");
        // Any GPU: whatever is cheapest, but still one of the pool's.
        assert!(families["any"]
            .iter()
            .all(|f| ["g5", "g6", "g6e"].contains(&f.as_str())));
    }
}

#[test]
fn a_claim_no_type_can_serve_leaves_its_jobs_unfinished_with_the_claims_reason() {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let mut s = scenario(&catalog);
    s.workloads.truncate(2);
    s.strategies = vec![sim::scenario::StrategyName::Quartermaster];
    // An H100 in a pool of g5, g6 and g6e.
    dra_of(&mut s.workloads[1]).as_mut().unwrap().product_name =
        Some("NVIDIA H100 80GB HBM3".into());
    let r = run(&s, &catalog);
    let q = &r.strategies["quartermaster"];
    let ran = ran_on(q);
    let unfinished: Vec<_> = q
        .unfinished
        .iter()
        .filter(|u| u.job.starts_with("train/l4-"))
        .collect();
    assert_eq!(unfinished.len(), 8, "{:?}", q.unfinished);
    for u in unfinished {
        assert!(!ran.contains_key(&u.job), "{} ran", u.job);
        assert!(u.reason.contains("DRA claims"), "{}", u.reason);
    }
    // The other workload is not held up by it.
    assert!(ran.keys().filter(|j| j.starts_with("train/any-")).count() == 12);
}

#[test]
fn a_bad_dra_field_is_refused_with_its_path() {
    let catalog = Catalog::embedded().unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SCENARIO);
    let text = std::fs::read_to_string(path)
        .unwrap()
        .replace("minMemory: 40Gi", "minMemory: forty")
        .replace("dra: {}", "dra: {selector: \"device.attributes[\"}");
    let err = Scenario::parse(&text, &catalog).unwrap_err().to_string();
    assert!(err.contains("workloads[2].training.dra.minMemory"), "{err}");
    assert!(err.contains("workloads[0].training.dra.selector"), "{err}");
}
