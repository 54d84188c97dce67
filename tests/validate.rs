//! `quartermaster validate`, run as a user runs it.

use crate::support::TempDir;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Run {
    code: i32,
    stdout: String,
}

fn validate(files: &[&Path]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_quartermaster"))
        .arg("validate")
        .args(files)
        .output()
        .expect("runs quartermaster");
    Run {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// A file with `text` in the test's temporary directory `dir` (removed,
/// with the file, when the test ends).
fn file(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn pool(name: &str, spec: &str) -> String {
    format!("apiVersion: quartermaster.dev/v1alpha1\nkind: NodePool\nmetadata:\n  name: {name}\nspec:\n{spec}")
}

#[test]
fn every_example_is_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let run = validate(&refs);
    assert_eq!(run.code, 0, "{}", run.stdout);
    for f in &files {
        assert!(
            run.stdout
                .contains(&format!("{}: document 1 (", f.display())),
            "{}",
            run.stdout
        );
    }
    // Valid; a family sold only outside us-east-1 (trn2) is only warned of.
    assert!(
        run.stdout
            .lines()
            .all(|l| l.ends_with(": ok") || l.contains(": warning: family ")),
        "{}",
        run.stdout
    );
}

#[test]
fn a_broken_cron_and_an_unknown_time_zone_are_both_named() {
    let dir = TempDir::new("qm-validate");
    let f = file(
        &dir,
        "prewarm.yaml",
        &pool(
            "office",
            r#"  prewarm:
    - name: mornings
      schedule: "0 8 * * 1-5 2026"
      timeZone: Europe/Atlantis
      duration: 10h
      capacity: { nvidia.com/gpu: 16 }
"#,
        ),
    );
    let run = validate(&[&f]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let at = format!("{}: document 1 (office): ", f.display());
    assert!(
        run.stdout
            .contains(&format!("{at}spec.prewarm[0].schedule: ")),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains(&format!("{at}spec.prewarm[0].timeZone: ")),
        "{}",
        run.stdout
    );
}

#[test]
fn a_mig_profile_on_g5_fails() {
    let dir = TempDir::new("qm-validate");
    let f = file(
        &dir,
        "mig-g5.yaml",
        &pool(
            "mig-on-a10g",
            r#"  gpuSharing: { mode: Mig, migProfile: 1g.10gb }
  template:
    spec:
      requirements:
        - { key: quartermaster.dev/instance-family, operator: In, values: [g5] }
"#,
        ),
    );
    let run = validate(&[&f]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains(
            "(mig-on-a10g): spec.gpuSharing.migProfile: none of the pool's GPUs supports MIG"
        ),
        "{}",
        run.stdout
    );
}

#[test]
fn one_bad_document_fails_the_run_but_the_good_ones_are_still_reported() {
    let dir = TempDir::new("qm-validate");
    let f = file(
        &dir,
        "two.yaml",
        &format!(
            "{}---\n{}",
            pool("good", "  capacityTypes: [spot]\n"),
            pool("bad", "  capacityTypes: [spto]\n")
        ),
    );
    let run = validate(&[&f]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout.contains("document 1 (good): ok"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("document 2 (bad): spec.capacityTypes[0]: the string \"spto\" is not one of spot, on-demand, reserved (did you mean spot?) (line 13)"),
        "{}",
        run.stdout
    );
}

#[test]
fn a_missing_file_fails() {
    let run = validate(&[Path::new("/nonexistent/pools.yaml")]);
    assert_eq!(run.code, 1);
    assert!(
        run.stdout.contains("/nonexistent/pools.yaml: cannot read"),
        "{}",
        run.stdout
    );
}

#[test]
fn non_yaml_and_other_kinds_fail() {
    let dir = TempDir::new("qm-validate");
    let text = file(&dir, "notes.txt", "just some notes, not a manifest\n");
    let broken = file(&dir, "broken.yaml", "spec: [unclosed\n");
    let other = file(
        &dir,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {}\n",
    );
    for f in [&text, &broken, &other] {
        let run = validate(&[f]);
        assert_eq!(run.code, 1, "{}: {}", f.display(), run.stdout);
        assert!(
            run.stdout.starts_with(&f.display().to_string()),
            "{}",
            run.stdout
        );
    }
    assert!(validate(&[&broken]).stdout.contains("invalid YAML"));
    assert!(validate(&[&other]).stdout.contains("kind ConfigMap"));
}

#[test]
fn a_termination_grace_period_must_be_a_duration() {
    let dir = TempDir::new("qm-validate");
    let good = file(
        &dir,
        "grace-ok.yaml",
        &pool(
            "graceful",
            "  template:\n    spec:\n      terminationGracePeriod: 2h\n",
        ),
    );
    assert_eq!(validate(&[&good]).code, 0);
    let bad = file(
        &dir,
        "grace-bad.yaml",
        &pool(
            "graceless",
            "  template:\n    spec:\n      terminationGracePeriod: soon\n",
        ),
    );
    let run = validate(&[&bad]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stdout
            .contains("spec.template.spec.terminationGracePeriod"),
        "{}",
        run.stdout
    );
}

#[test]
fn escalating_labels_overflowing_limits_and_a_cron_that_never_fires_are_named() {
    let dir = TempDir::new("qm-validate");
    let f = file(
        &dir,
        "hostile.yaml",
        &pool(
            "hostile",
            r#"  template:
    metadata:
      labels:
        node-restriction.kubernetes.io/trusted: "yes"
        topology.kubernetes.io/zone: use1-az1
  limits: { nvidia.com/gpu: "-1e400" }
  disruption:
    budgets:
      - { nodes: "0", schedule: "0 8 31 2 *", duration: 8h }
"#,
        ),
    );
    let run = validate(&[&f]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    let at = format!("{}: document 1 (hostile): ", f.display());
    for (path, why) in [
        (
            "spec.template.metadata.labels[node-restriction.kubernetes.io/trusted]",
            "is restricted",
        ),
        (
            "spec.template.metadata.labels[topology.kubernetes.io/zone]",
            "well-known label",
        ),
        ("spec.limits[nvidia.com/gpu]", "out of range"),
        ("spec.disruption.budgets[0].schedule", "never fires"),
    ] {
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{at}{path}: ")) && l.contains(why)),
            "{path}: {why}\n{}",
            run.stdout
        );
    }
}

#[test]
fn every_problem_of_a_file_is_named_at_once_with_its_path_line_and_a_suggestion() {
    let dir = TempDir::new("qm-validate");
    let f = file(
        &dir,
        "many.yaml",
        &format!(
            "{}---\napiVersion: quartermaster.dev/v1alpha1\nkind: EC2NodeClass\nmetadata: {{name: gpu}}\nspec:\n  role: nodes\n  subnetSelectorTerms: [{{tags: {{a: b}}}}]\n  securityGroupSelectorTerms: [{{tags: {{a: b}}}}]\n  volumeSize: 500Gi\n",
            pool(
                "typos",
                "  weigth: 3\n  limits: {nodes: lots}\n  risk: {riskAversion: high}\n  template:\n    spec:\n      requirments: []\n",
            )
        ),
    );
    let run = validate(&[&f]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    for expected in [
        "document 1 (typos): spec.weigth: unknown field (did you mean weight?) (line 6)",
        "document 1 (typos): spec.risk.riskAversion: expected a number, found the string \"high\" (line 8)",
        "document 1 (typos): spec.template.spec.requirments: unknown field (did you mean requirements?) (line 11)",
        "document 2 (gpu): spec.volumeSize: unknown field (line 20)",
    ] {
        assert!(run.stdout.contains(expected), "{expected}\n{}", run.stdout);
    }
}
