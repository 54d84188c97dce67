//! Bad spot traces through the binary, on small synthetic fixtures of our
//! own (`tests/fixtures/spot/`): `simulate` with a scenario that replays
//! one, and `market fit` on a folder holding one, fail naming the file and
//! the problem, each cause said once.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn qm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quartermaster"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/spot")
        .join(path)
}

/// A one-job scenario of `duration` that replays `trace` as `kind` onto
/// p4d.24xlarge spot in use1-az6.
fn scenario(trace: &Path, kind: &str, duration: &str) -> String {
    format!(
        r#"name: bad-trace
start: 2026-01-05T00:00:00Z
duration: {duration}
seed: 1
strategies: [quartermaster]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {{name: train}}
  spec:
    capacityTypes: [spot, on-demand]
    template:
      spec:
        taints: [{{key: nvidia.com/gpu, effect: NoSchedule}}]
        requirements: [{{key: quartermaster.dev/instance-family, operator: In, values: [p4d]}}]
workloads:
- training: {{name: t, jobs: 1, perHour: 1, gpus: [8], runTime: {{median: 10m, p90: 20m}}}}
cloud:
  spotTraces:
  - path: {}
    kind: {kind}
    pools: [{{instanceType: p4d.24xlarge, zone: use1-az6}}]
"#,
        trace.display()
    )
}

/// `simulate` on the scenario text (written to a fresh folder named by
/// `case`), JSON output.
fn simulate(case: &str, yaml: &str) -> Output {
    let dir = crate::support::TempDir::new(&format!("qm-bad-trace-{case}"));
    let file = dir.join("scenario.yaml");
    std::fs::write(&file, yaml).unwrap();
    qm(&["simulate", file.to_str().unwrap(), "--output", "json"])
}

/// The run failed and its stderr holds every one of `needles`; returns it.
fn failed_saying(out: &Output, needles: &[&str]) -> String {
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "succeeded: {err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} missing from {err}");
    }
    err
}

#[test]
fn simulate_refuses_a_malformed_empty_wrong_kind_missing_or_short_trace_naming_the_file() {
    let cases = [
        (
            "empty",
            "bad/availability/empty_v100_1.json",
            "availability",
            "30m",
            "the file is empty",
        ),
        (
            "malformed",
            "malformed/preemption/1-node/truncated_v100_1.json",
            "preemption",
            "30m",
            "not JSON",
        ),
        (
            "probes-as-preemption",
            "wrong-kind/preemption/1-node/probes_v100_1.json",
            "preemption",
            "30m",
            "no instance ever ran",
        ),
        (
            "availability-folder",
            "good/availability/1-node/za_v100_1.json",
            "preemption",
            "30m",
            "in a folder named availability",
        ),
        (
            "preemption-folder",
            "good/preemption/4-node/za_v100_1.json",
            "availability",
            "30m",
            "in a folder named preemption",
        ),
        (
            "short",
            "good/preemption/4-node/za_v100_1.json",
            "preemption",
            "2h",
            "covers 0.8 h of the scenario's 2.0 h",
        ),
    ];
    for (case, file, kind, duration, problem) in cases {
        let out = simulate(case, &scenario(&fixture(file), kind, duration));
        let name = Path::new(file).file_name().unwrap().to_str().unwrap();
        failed_saying(&out, &[name, problem]);
    }
    // The same fixtures load and run when declared as what they are, over
    // a scenario they cover.
    for (file, kind) in [
        ("good/preemption/4-node/za_v100_1.json", "preemption"),
        ("good/availability/1-node/za_v100_1.json", "availability"),
    ] {
        let out = simulate(kind, &scenario(&fixture(file), kind, "30m"));
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn simulate_names_a_missing_trace_and_says_why_once() {
    let out = simulate(
        "missing",
        &scenario(&fixture("nowhere/gone_v100_1.json"), "preemption", "30m"),
    );
    let err = failed_saying(&out, &["gone_v100_1.json", "No such file"]);
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

#[test]
fn market_fit_refuses_a_malformed_wrong_kind_or_kindless_trace_naming_the_file() {
    let cases = [
        ("malformed", "truncated_v100_1.json", "not JSON"),
        ("wrong-kind", "probes_v100_1.json", "no instance ever ran"),
        ("no-kind", "zb_v100_1.json", "cannot tell its kind"),
    ];
    for (folder, file, problem) in cases {
        let out_file =
            std::env::temp_dir().join(format!("qm-fit-{}-{folder}.json", std::process::id()));
        let out = qm(&[
            "market",
            "fit",
            "--traces",
            fixture(folder).to_str().unwrap(),
            "--out",
            out_file.to_str().unwrap(),
        ]);
        failed_saying(&out, &[file, problem]);
        assert!(!out_file.exists(), "{folder}: nothing is written");
    }
}
