//! `quartermaster convert` through the binary: what goes to stdout, what to
//! stderr, and the exit status of each outcome; and its output read back by
//! `quartermaster validate`.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn qm(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_quartermaster"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const SETUP: &str = "tests/fixtures/karpenter/gpu-setup.yaml";
const LOSSY: &str = "tests/fixtures/karpenter/lossy.yaml";

fn documents(out: &Output) -> Vec<serde_json::Value> {
    serde_norway::Deserializer::from_str(&text(&out.stdout))
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

#[test]
fn a_complete_conversion_prints_our_objects_notes_on_stderr_and_exits_0() {
    let out = qm(&["convert", SETUP], None);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let docs = documents(&out);
    let kinds: Vec<(&str, &str)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap(),
                d["apiVersion"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("NodePool", "quartermaster.dev/v1alpha1"),
            ("NodePool", "quartermaster.dev/v1alpha1"),
            ("EC2NodeClass", "quartermaster.dev/v1alpha1"),
        ]
    );
    assert_eq!(
        docs[0]["spec"]["capacityTypes"],
        serde_json::json!(["spot", "on-demand"])
    );
    assert!(
        err.contains(&format!(
            "{SETUP}: document 2 (NodePool inference): spec.template.spec.expireAfter: note: unset: Karpenter's default 720h written out"
        )),
        "{err}"
    );
    assert!(!err.contains("not carried"), "{err}");
    assert!(err.contains("every field carried"), "{err}");
}

#[test]
fn fields_that_cannot_be_carried_are_named_with_their_paths_and_exit_3() {
    let out = qm(&["convert", SETUP, LOSSY], None);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    for line in [
        "document 1 (NodePool batch): spec.template.spec.requirements[0].minValues: not carried:",
        "document 2 (EC2NodeClass batch): spec.securityGroupSelectorTerms[0].name: not carried:",
        "document 2 (EC2NodeClass batch): spec.kubelet.maxPods: not carried:",
    ] {
        assert!(err.contains(&format!("{LOSSY}: {line}")), "{line}\n{err}");
    }
    assert!(err.contains("3 fields not carried"), "{err}");
    assert!(
        !err.contains("reasons"),
        "a budget's reasons are carried: {err}"
    );
    let docs = documents(&out);
    assert_eq!(docs.len(), 5, "everything that converts is printed");
    let batch = docs
        .iter()
        .find(|d| d["kind"] == "NodePool" && d["metadata"]["name"] == "batch")
        .expect("the batch pool");
    assert_eq!(
        batch["spec"]["disruption"]["budgets"][0]["reasons"],
        serde_json::json!(["Drifted"])
    );
}

#[test]
fn unreadable_input_prints_nothing_and_exits_1() {
    let missing = qm(
        &["convert", SETUP, "tests/fixtures/karpenter/none.yaml"],
        None,
    );
    assert_eq!(missing.status.code(), Some(1));
    assert!(missing.stdout.is_empty());
    assert!(text(&missing.stderr).contains("none.yaml: cannot read"));
    let broken = qm(&["convert", "-"], Some("kind: NodePool\nspec: [1, 2\n"));
    assert_eq!(broken.status.code(), Some(1));
    assert!(broken.stdout.is_empty());
    assert!(text(&broken.stderr).contains("-: document 1: invalid YAML"));
}

#[test]
fn the_converted_setup_passes_quartermaster_validate() {
    let out = qm(&["convert", SETUP], None);
    assert!(out.status.success());
    let file = std::env::temp_dir().join(format!("qm-convert-{}.yaml", std::process::id()));
    std::fs::write(&file, &out.stdout).unwrap();
    let check = qm(&["validate", file.to_str().unwrap()], None);
    std::fs::remove_file(&file).unwrap();
    let report = text(&check.stdout);
    assert!(check.status.success(), "{report}");
    assert_eq!(
        report.lines().filter(|l| l.ends_with(": ok")).count(),
        3,
        "{report}"
    );
}
