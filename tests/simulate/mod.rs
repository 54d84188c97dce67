//! The simulator end to end: every strategy runs the same jobs; results are
//! reproducible; and the targets, checked by running the scenarios in
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
//!
//! This module holds what the cases share (running a scenario, the `simulate`
//! command, the checks on every run's bill and jobs); the cases are in its
//! modules, one per topic: [`scenarios`] (every file in `simulations/`),
//! [`market`] (the calibrated market's targets), [`interruptions`] (storms
//! and gangs under reclaims), [`static_groups`], [`bill`] (where the money
//! went, bounds and deadlines), [`sweeps`] (`--seeds` and `--sweep`),
//! [`traces`] (replayed pod traces) and [`lifecycle`] (capacity blocks,
//! image releases, expiry, network blocks and buffers).

use quartermaster::catalog::Catalog;
use quartermaster::sim;
use quartermaster::sim::scenario::{Scenario, StrategyName};
use std::path::Path;
use std::sync::Arc;

mod bill;
mod interruptions;
mod lifecycle;
mod market;
mod scenarios;
mod static_groups;
mod sweeps;
mod traces;

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

/// Every job of `r` finished or was running at the end.
fn assert_every_job_ran(r: &quartermaster::sim::result::StrategyResult) {
    let waiting: Vec<_> = r
        .unfinished
        .iter()
        .filter(|u| !u.reason.starts_with("still running"))
        .collect();
    assert!(waiting.is_empty(), "jobs that never ran: {waiting:?}");
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

/// The jobs of a scenario.
fn jobs_of(yaml: &str) -> Vec<quartermaster::sim::workload::SimJob> {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let scenario = Scenario::parse(yaml, &catalog).unwrap();
    sim::load_jobs(&scenario, &catalog, Path::new("."), None)
        .unwrap()
        .jobs
}
