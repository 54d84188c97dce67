//! DRA claims planned end to end through `quartermaster plan`: the pods'
//! ResourceClaimTemplates and ResourceClaims beside them, the DeviceClasses
//! the drivers' charts install, the embedded catalog's device templates.

use serde_json::Value;
use std::process::Command;

const CLASSES: &str = "tests/fixtures/dra/classes.yaml";
const POOLS: &str = "tests/fixtures/dra/nodepools.yaml";

fn plan(pods: &str, pools: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "plan",
        "--pods",
        CLASSES,
        "--pods",
        pods,
        "--nodepools",
        pools,
        "--output",
        "json",
        "--time-limit-ms",
        "20000",
    ];
    args.extend(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_quartermaster"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(&args)
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON output")
}

/// The instance type of the one node planned, with the pods on it.
fn one_node(v: &Value) -> (String, Vec<String>) {
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{v:#}");
    assert!(v["unschedulable"].as_array().unwrap().is_empty(), "{v:#}");
    let pods = nodes[0]["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    (
        nodes[0]["instance_type"].as_str().unwrap().to_string(),
        pods,
    )
}

#[test]
fn a_claim_for_eight_h100s_by_product_name_plans_a_p5() {
    let v = plan("tests/fixtures/dra/eight-h100.yaml", POOLS, &[]);
    let (ty, pods) = one_node(&v);
    assert_eq!(ty, "p5.48xlarge");
    assert_eq!(pods, ["ml/pretrain"]);
    // Launched to serve DRA: the drivers' DaemonSets select the label.
    assert_eq!(v["nodes"][0]["labels"]["quartermaster.dev/dra"], "true");
}

#[test]
fn a_pool_limited_to_eight_gpus_serves_a_claim_for_eight_h100s() {
    let v = plan(
        "tests/fixtures/dra/eight-h100.yaml",
        "tests/fixtures/dra/nodepools-limited.yaml",
        &[],
    );
    let (ty, _) = one_node(&v);
    assert_eq!(ty, "p5.48xlarge");
}

#[test]
fn a_claim_for_one_gpu_with_40_gib_plans_a_type_whose_gpu_has_that_much() {
    let v = plan("tests/fixtures/dra/forty-gib.yaml", POOLS, &[]);
    let (_, pods) = one_node(&v);
    assert_eq!(pods, ["ml/infer"]);
    let gib: u64 = v["nodes"][0]["labels"]["quartermaster.dev/gpu-memory-gib"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(gib >= 40, "{v:#}");
}

#[test]
fn first_available_is_tried_in_the_users_order_and_falls_through_to_the_second() {
    let v = plan("tests/fixtures/dra/h100-else-l40s.yaml", POOLS, &[]);
    let (ty, _) = one_node(&v);
    assert!(ty.starts_with("p5."), "the H100 first: {ty}");
    // No pool offers an H100: the L40S.
    let v = plan(
        "tests/fixtures/dra/h100-else-l40s.yaml",
        "tests/fixtures/dra/nodepools-l40s.yaml",
        &[],
    );
    let (ty, _) = one_node(&v);
    assert!(ty.starts_with("g6e."), "{ty}");
}

#[test]
fn a_claim_shared_by_two_pods_lands_both_on_one_node() {
    let v = plan("tests/fixtures/dra/shared.yaml", POOLS, &[]);
    let (ty, pods) = one_node(&v);
    assert_eq!(pods, ["ml/actor", "ml/learner"]);
    assert!(
        v["nodes"][0]["labels"]["quartermaster.dev/gpu-count"]
            .as_str()
            .unwrap()
            .parse::<u32>()
            .unwrap()
            >= 2,
        "{ty}"
    );
}

#[test]
fn an_unsatisfiable_claim_and_an_unknown_class_are_reported_not_placed() {
    let v = plan("tests/fixtures/dra/unplaceable.yaml", POOLS, &[]);
    assert!(v["nodes"].as_array().unwrap().is_empty(), "{v:#}");
    let why = |pod: &str| -> String {
        v["unschedulable"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["pod"] == pod)
            .unwrap_or_else(|| panic!("{pod} not reported: {v:#}"))["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let big = why("ml/too-big");
    assert!(
        big.contains("claim gpus (template sixteen-h100) request gpus: asks for 16 devices"),
        "{big}"
    );
    let class = why("ml/wrong-class");
    assert!(
        class.contains(
            "claim tpu (template tpu): devices.requests[0].exactly.deviceClassName: DeviceClass \"tpu.example.com\" does not exist"
        ),
        "{class}"
    );
}

#[test]
fn explain_names_what_ruled_each_type_out() {
    let v = plan("tests/fixtures/dra/eight-h100.yaml", POOLS, &["--explain"]);
    let lines: Vec<&str> = v["explanations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        lines.iter().any(|l| l.starts_with("pods like ml/pretrain: claim gpus (template eight-h100) take 8 gpu.nvidia.com/gpu on p5.48xlarge")),
        "{lines:#?}"
    );
    // The selector that ruled out the A100s, the count that ruled out the
    // one-GPU H100.
    assert!(
        lines.iter().any(|l| l.contains("ruled out:") && l.contains("selector 0 (`device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'`) selects none of its devices") || l.contains("ruled out:") && l.contains("p4de.24xlarge")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("ruled out:")
            && l.contains("asks for 8 devices; it has 1 that match (on p5.4xlarge)")),
        "{lines:#?}"
    );
}
