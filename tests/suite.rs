//! Every integration test, as one test binary (`cargo test --test suite`;
//! one module with `cargo test --test suite planner::`). Each tests/*.rs is
//! a module here rather than a binary of its own, so that kube, the AWS SDKs
//! and tokio are linked once, not 35 times: that kept a clean build's
//! target directory from filling CI's disk and cut the build's time. The
//! shared helpers are [`support`] (mock and fake API servers, moto,
//! Prometheus) and [`oracle`] (an independent checker of plans).
//!
//! Cargo.toml sets `autotests = false`, so a new file under tests/ runs only
//! once it is declared here: [`every_test_file_is_declared`] fails until it is.

mod faults;
mod oracle;
mod support;

mod aws_ec2;
mod aws_eks;
mod aws_iam;
mod aws_moto_harness;
mod aws_notices;
mod aws_pricing;
mod catalog;
mod catalog_cli;
mod chart_rbac;
mod controller_api;
mod controller_buffers;
mod controller_cli;
mod controller_dra;
mod controller_leader;
mod controller_repair;
mod controller_scale;
mod controller_sequences;
mod convert;
mod convert_cli;
mod crash_injection;
mod crds;
mod gpu_use;
mod greedy_rules;
mod hostile_input;
mod lifecycle_scenarios;
mod market_cli;
mod notice_storm;
mod plan_cli;
mod plan_dra;
mod planner;
mod planner_properties;
mod simulate;
mod simulate_dra;
mod simulate_faults;
mod spot_traces_cli;
mod trace;
mod validate;

/// Fails when a file or directory under tests/ holds tests that no module
/// here declares (they would silently never run, as `autotests` is off).
#[test]
fn every_test_file_is_declared() {
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let root = std::fs::read_to_string(tests.join("suite.rs")).expect("tests/suite.rs");
    let declared: std::collections::BTreeSet<String> = root
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .map(str::to_string)
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&tests).expect("tests/") {
        let path = entry.expect("an entry of tests/").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let holds_rust = if path.is_dir() {
            path.join("mod.rs").exists() || path.join("main.rs").exists()
        } else {
            path.extension().is_some_and(|e| e == "rs") && name != "suite"
        };
        if holds_rust && !declared.contains(name) {
            missing.push(path.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "declare these in tests/suite.rs (`mod NAME;`) or they never run: {missing:?}"
    );
}
