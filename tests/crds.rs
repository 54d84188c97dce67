//! The generated CRDs: the files under `crds/` match the code, the types
//! round-trip through YAML, and the CEL rules compile and say what they mean
//! (evaluated client-side with kube-cel, as the API server would).

use kube::core::cel::{compile_schema, Validator};
use kube::core::CustomResourceExt;
use pretty_assertions::assert_eq;
use quartermaster::api::crds;
use quartermaster::api::{EC2NodeClass, NodeClaim, NodePool};
use serde_json::{json, Value};
use std::path::Path;

/// Where the generated CRD files live: `crds/`, the controller chart's
/// `crds/` (installed by `helm install`, never upgraded) and the CRD
/// chart's templates (installed and upgraded by `helm upgrade`).
const CRD_DIRS: [&str; 3] = [
    "crds",
    "deploy/helm/quartermaster/crds",
    "deploy/helm/quartermaster-crd/templates",
];

#[test]
fn crd_files_match_the_code_in_crds_and_both_charts() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in CRD_DIRS {
        let mut files: Vec<String> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let mut want: Vec<String> = crds::all().iter().map(|(f, _)| f.to_string()).collect();
        want.sort();
        assert_eq!(files, want, "{dir} holds exactly the CRD files");
        for (file, crd) in crds::all() {
            let want = crds::to_yaml(&crd).unwrap();
            let have = std::fs::read_to_string(root.join(dir).join(file)).unwrap_or_default();
            assert!(
                have == want,
                "{dir}/{file} is out of date with src/api; run `quartermaster crds --out {dir}` \
                 (cargo run -- crds --out {dir}) and commit the result"
            );
        }
    }
}

#[test]
fn crds_survive_the_uninstall_of_the_crd_chart() {
    for (file, crd) in crds::all() {
        let annotations = crd.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.get(crds::HELM_KEEP.0).map(String::as_str),
            Some(crds::HELM_KEEP.1),
            "{file}"
        );
    }
}

#[test]
fn the_crd_chart_has_the_controller_chart_s_version_and_the_crate_s() {
    let chart = |dir: &str| -> Value {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(dir)
            .join("Chart.yaml");
        serde_norway::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    };
    let controller = chart("deploy/helm/quartermaster");
    let crd = chart("deploy/helm/quartermaster-crd");
    assert_eq!(crd["name"], "quartermaster-crd");
    assert_eq!(crd["version"], controller["version"]);
    assert_eq!(crd["appVersion"], controller["appVersion"]);
    assert_eq!(controller["appVersion"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn crds_are_cluster_scoped_with_short_names_and_a_category() {
    for (crd, short) in [
        (NodePool::crd(), "qnp"),
        (NodeClaim::crd(), "qnc"),
        (EC2NodeClass::crd(), "qec2nc"),
    ] {
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.group, "quartermaster.dev");
        assert_eq!(crd.spec.versions[0].name, "v1alpha1");
        assert_eq!(crd.spec.names.short_names, Some(vec![short.to_string()]));
        assert_eq!(
            crd.spec.names.categories,
            Some(vec!["quartermaster".to_string()])
        );
        let columns: Vec<String> = crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect();
        assert!(columns.contains(&"Ready".to_string()), "{columns:?}");
        assert!(columns.contains(&"Age".to_string()), "{columns:?}");
    }
}

const FULL_POOL: &str = r#"
apiVersion: quartermaster.dev/v1alpha1
kind: NodePool
metadata:
  name: training
spec:
  template:
    metadata:
      labels: { team: research }
      annotations: { example.com/owner: ml-platform }
    spec:
      taints: [{ key: nvidia.com/gpu, effect: NoSchedule }]
      startupTaints: [{ key: example.com/agent-not-ready, value: "true", effect: NoExecute }]
      requirements:
        - { key: quartermaster.dev/instance-family, operator: In, values: [p4d, p5] }
        - { key: quartermaster.dev/gpu-count, operator: Gt, values: ["3"] }
        - { key: topology.k8s.aws/zone-id, operator: NotIn, values: [use1-az3] }
        - { key: quartermaster.dev/neuron-name, operator: DoesNotExist }
  capacityTypes: [spot, on-demand]
  limits: { nvidia.com/gpu: 64, nodes: 8, costPerHour: "400.5", memory: 4Ti }
  weight: 50
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: Never
    budgets:
      - nodes: "20%"
      - { nodes: "0", schedule: "0 9 * * 1-5", duration: 8h }
  interruption:
    checkpointHook: { port: 8080, path: /ckpt, timeout: 10s }
    checkpointGracePeriod: 100s
    onRebalanceRecommendation: Replace
  gpuSharing: { mode: Mig, migProfile: 1g.10gb }
  prewarm:
    - { name: weekdays, schedule: "0 8 * * 1-5", timeZone: Europe/Berlin, duration: 10h,
        capacity: { nvidia.com/gpu: 16 } }
  risk: { maxInterruptionBucket: 2, riskAversion: 1.5, maxSpotPoolShare: 0.5 }
status:
  nodes: 3
  costPerHour: 123.4
  resources: { nvidia.com/gpu: "24" }
  conditions:
    - { type: Ready, status: "True", reason: Ready, message: "", lastTransitionTime: "2026-01-01T00:00:00Z" }
"#;

#[test]
fn a_full_node_pool_round_trips_through_yaml() {
    let pool: NodePool = serde_norway::from_str(FULL_POOL).unwrap();
    let yaml = serde_norway::to_string(&pool).unwrap();
    let again: NodePool = serde_norway::from_str(&yaml).unwrap();
    assert_eq!(pool, again);
    // Nothing the input said is lost (numbers may come back as strings).
    let input: Value = serde_norway::from_str(FULL_POOL).unwrap();
    let output = serde_json::to_value(&again).unwrap();
    assert_eq!(
        strings(&input["spec"]["template"]),
        strings(&output["spec"]["template"])
    );
    assert_eq!(output["spec"]["limits"]["nvidia.com/gpu"], "64");
    assert_eq!(output["spec"]["gpuSharing"]["migProfile"], "1g.10gb");
    assert_eq!(output["status"]["nodes"], 3);
}

/// Scalars as strings, to compare documents that differ only in number/string typing.
fn strings(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), strings(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().map(strings).collect()),
        Value::Number(n) => Value::String(n.to_string()),
        other => other.clone(),
    }
}

fn schema_of(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Value {
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// Every `x-kubernetes-validations` rule in a schema.
fn rules(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(m) => {
            if let Some(Value::Array(rs)) = m.get("x-kubernetes-validations") {
                out.extend(rs.iter().map(|r| r["rule"].as_str().unwrap().to_string()));
            }
            m.values().for_each(|v| rules(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| rules(v, out)),
        _ => {}
    }
}

#[test]
fn every_cel_rule_compiles_and_stays_within_the_cost_budget() {
    for crd in [NodePool::crd(), NodeClaim::crd(), EC2NodeClass::crd()] {
        let schema = schema_of(&crd);
        let compiled = compile_schema(&schema);
        let mut all = Vec::new();
        rules(&schema, &mut all);
        assert!(!all.is_empty());
        for rule in &all {
            let program = kube::core::cel::cel::Program::compile(rule);
            assert!(program.is_ok(), "rule does not compile: {rule}");
            let warnings: Vec<_> = kube::core::cel::estimate_rule_cost(rule, &compiled)
                .into_iter()
                .filter(|w| w.kind == kube::core::cel::WarningKind::CostExceeded)
                .collect();
            assert!(warnings.is_empty(), "{rule}: {warnings:?}");
        }
    }
}

/// CEL failures for a NodePool spec (defaults applied, as the API server does).
fn cel_errors(spec: Value) -> Vec<String> {
    cel_errors_of("NodePool", spec)
}

/// CEL failures for a spec of `kind` (NodePool or EC2NodeClass).
fn cel_errors_of(kind: &str, spec: Value) -> Vec<String> {
    let crd = match kind {
        "EC2NodeClass" => EC2NodeClass::crd(),
        _ => NodePool::crd(),
    };
    let schema = schema_of(&crd);
    let object = json!({
        "apiVersion": "quartermaster.dev/v1alpha1",
        "kind": kind,
        "metadata": { "name": "p" },
        "spec": spec,
    });
    match Validator::new().validate(&schema, &object, None) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.message.clone()).collect(),
    }
}

#[track_caller]
fn expect_cel_error(spec: Value, fragment: &str) {
    let errs = cel_errors(spec);
    assert!(
        errs.iter().any(|e| e.contains(fragment)),
        "expected a CEL error containing {fragment:?}, got {errs:?}"
    );
}

#[test]
fn valid_pools_pass_every_cel_rule() {
    let full: Value = serde_norway::from_str(FULL_POOL).unwrap();
    assert_eq!(cel_errors(full["spec"].clone()), Vec::<String>::new());
    assert_eq!(cel_errors(json!({})), Vec::<String>::new());
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/examples");
    for entry in std::fs::read_dir(examples).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            for doc in serde_norway::Deserializer::from_str(&text) {
                let v: Value = serde::Deserialize::deserialize(doc).unwrap();
                let kind = v["kind"].as_str().unwrap_or_default();
                assert_eq!(
                    cel_errors_of(kind, v["spec"].clone()),
                    Vec::<String>::new(),
                    "{}",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn cel_rejects_node_classes_a_user_could_get_wrong() {
    let base = json!({
        "subnetSelectorTerms": [{ "tags": { "a": "b" } }],
        "securityGroupSelectorTerms": [{ "id": "sg-0123456789abcdef0" }],
        "role": "nodes",
    });
    assert_eq!(
        cel_errors_of("EC2NodeClass", base.clone()),
        Vec::<String>::new()
    );
    let with = |patch: Value| {
        let mut spec = base.clone();
        for (k, v) in patch.as_object().unwrap() {
            spec[k] = v.clone();
        }
        cel_errors_of("EC2NodeClass", spec)
    };
    let expect = |errs: Vec<String>, fragment: &str| {
        assert!(
            errs.iter().any(|e| e.contains(fragment)),
            "expected {fragment:?} in {errs:?}"
        );
    };
    expect(
        with(json!({ "instanceProfile": "also" })),
        "exactly one of role and instanceProfile",
    );
    expect(
        with(
            json!({ "amiSelectorTerms": [{ "alias": "al2023@latest" }, { "id": "ami-0123456789abcdef0" }] }),
        ),
        "alias must be the only term",
    );
    expect(
        with(json!({ "amiSelectorTerms": [{ "alias": "al2023@latest", "owner": "self" }] })),
        "cannot be combined",
    );
    expect(
        with(
            json!({ "subnetSelectorTerms": [{ "id": "subnet-0123456789abcdef0", "tags": { "a": "b" } }] }),
        ),
        "either an id or tags",
    );
    expect(
        with(json!({ "tags": { "quartermaster.dev/cluster": "x" } })),
        "tags must not use keys",
    );
    expect(
        with(json!({ "blockDeviceMappings": [
            { "deviceName": "/dev/xvda", "rootVolume": true, "ebs": { "volumeSizeGiB": 100 } },
            { "deviceName": "/dev/xvdb", "rootVolume": true, "ebs": { "volumeSizeGiB": 100 } }
        ] })),
        "at most one block device mapping",
    );
    assert_eq!(
        with(json!({ "capacityReservationSelectorTerms": [
            { "id": "cr-0123456789abcdef0" }, { "tags": { "team": "ml" }, "pricePerHour": 2.5 }
        ] })),
        Vec::<String>::new()
    );
    expect(
        with(json!({ "capacityReservationSelectorTerms": [
            { "id": "cr-0123456789abcdef0", "tags": { "team": "ml" } }
        ] })),
        "names either an id or tags",
    );
    let pool_ref = |kind: &str| {
        cel_errors(json!({ "template": { "spec": { "nodeClassRef": {
            "group": "quartermaster.dev", "kind": kind, "name": "gpu" } } } }))
    };
    assert_eq!(pool_ref("EC2NodeClass"), Vec::<String>::new());
    expect(
        pool_ref("AWSNodeClass"),
        "must name a quartermaster.dev EC2NodeClass",
    );
}

#[test]
fn cel_rejects_sharing_fields_that_do_not_match_the_mode() {
    expect_cel_error(
        json!({ "gpuSharing": { "mode": "TimeSlicing" } }),
        "replicas is required",
    );
    expect_cel_error(
        json!({ "gpuSharing": { "mode": "None", "replicas": 4 } }),
        "replicas is required with mode TimeSlicing and not allowed",
    );
    expect_cel_error(
        json!({ "gpuSharing": { "mode": "Mig" } }),
        "migProfile is required",
    );
    expect_cel_error(
        json!({ "gpuSharing": { "mode": "TimeSlicing", "replicas": 4, "migProfile": "1g.10gb" } }),
        "migProfile is required with mode Mig",
    );
    assert!(
        cel_errors(json!({ "gpuSharing": { "mode": "Mig", "migProfile": "1g.10gb" } })).is_empty()
    );
}

#[test]
fn cel_rejects_requirements_whose_values_do_not_fit_the_operator() {
    let req = |r: Value| json!({ "template": { "spec": { "requirements": [r] } } });
    expect_cel_error(
        req(json!({ "key": "a", "operator": "In" })),
        "need at least one value",
    );
    expect_cel_error(
        req(json!({ "key": "a", "operator": "NotIn", "values": [] })),
        "need at least one value",
    );
    expect_cel_error(
        req(json!({ "key": "a", "operator": "Exists", "values": ["x"] })),
        "take no values",
    );
    expect_cel_error(
        req(json!({ "key": "a", "operator": "Gt", "values": ["x"] })),
        "exactly one integer",
    );
    expect_cel_error(
        req(json!({ "key": "a", "operator": "Lt", "values": ["1", "2"] })),
        "exactly one integer",
    );
    expect_cel_error(
        req(json!({ "key": "quartermaster.dev/nodepool", "operator": "Exists" })),
        "set by Quartermaster",
    );
    assert!(cel_errors(req(
        json!({ "key": "a", "operator": "Gt", "values": ["-3"] })
    ))
    .is_empty());
    assert!(cel_errors(req(json!({ "key": "a", "operator": "DoesNotExist" }))).is_empty());
}

#[test]
fn cel_rejects_budgets_with_schedule_but_no_duration() {
    expect_cel_error(
        json!({ "disruption": { "budgets": [{ "nodes": "1", "schedule": "@daily" }] } }),
        "schedule and duration must be set together",
    );
    expect_cel_error(
        json!({ "disruption": { "budgets": [{ "nodes": "1", "duration": "1h" }] } }),
        "schedule and duration must be set together",
    );
}

#[test]
fn cel_bounds_the_checkpoint_grace_period_by_the_notice() {
    expect_cel_error(
        json!({ "interruption": { "checkpointGracePeriod": "3m" } }),
        "two-minute",
    );
    expect_cel_error(
        json!({ "interruption": { "checkpointGracePeriod": "30s",
                                  "checkpointHook": { "port": 80, "timeout": "1m" } } }),
        "cannot exceed checkpointGracePeriod",
    );
    assert!(cel_errors(json!({ "interruption": { "checkpointGracePeriod": "2m" } })).is_empty());
}

#[test]
fn cel_wants_plain_numbers_for_node_and_cost_limits() {
    expect_cel_error(json!({ "limits": { "nodes": "2.5" } }), "whole number");
    expect_cel_error(json!({ "limits": { "costPerHour": "1k" } }), "plain number");
    assert!(
        cel_errors(json!({ "limits": { "nodes": 4, "costPerHour": "99.5", "cpu": "500m" } }))
            .is_empty()
    );
    assert!(cel_errors(json!({ "limits": { "costPerHour": 250 } })).is_empty());
}

#[test]
fn cel_keeps_the_nodepool_label_ours() {
    expect_cel_error(
        json!({ "template": { "metadata": { "labels": { "quartermaster.dev/nodepool": "x" } } } }),
        "set by Quartermaster",
    );
}

#[test]
fn cel_refuses_labels_that_would_overwrite_what_a_node_is() {
    let labels = |k: &str| json!({ "template": { "metadata": { "labels": { k: "x" } } } });
    for k in [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.k8s.aws/zone-id",
        "node.kubernetes.io/instance-type",
        "nvidia.com/gpu.product",
        "quartermaster.dev/capacity-type",
    ] {
        expect_cel_error(labels(k), "well-known labels");
    }
    for k in [
        "node-restriction.kubernetes.io/trusted",
        "kubernetes.io/custom",
        "node-role.kubernetes.io/gpu",
        "sub.k8s.io/x",
        "quartermaster.dev/anything",
    ] {
        expect_cel_error(labels(k), "restricted");
    }
}

#[test]
fn cel_and_validate_agree_on_karpenters_labels_in_requirements() {
    use quartermaster::api::validate::{karpenter_key_unknown, karpenter_labels_set};
    let requirement = |k: &str| {
        json!({ "template": { "spec": { "requirements": [
            { "key": k, "operator": "Exists" }
        ] } } })
    };
    for k in karpenter_labels_set().into_iter().chain([
        "karpenter.k8s.aws/instance-ebs-bandwidth",
        "karpenter.sh/registered",
        "x.karpenter.sh/y",
        "example.com/karpenter.sh",
        "team",
    ]) {
        let cel = cel_errors(requirement(k));
        let refused = cel.iter().any(|e| e.contains("Karpenter"));
        assert_eq!(
            refused,
            karpenter_key_unknown(k).is_some(),
            "{k}: CEL says {cel:?}, validate says {:?}",
            karpenter_key_unknown(k)
        );
    }
    expect_cel_error(requirement("karpenter.sh/nodepool"), "cannot be required");
    assert!(cel_errors(requirement("karpenter.sh/capacity-type")).is_empty());
}

#[test]
fn cel_and_validate_agree_on_every_label_key() {
    use quartermaster::api::validate::{
        karpenter_labels_set, label_restriction, WELL_KNOWN_LABELS,
    };
    let keys = WELL_KNOWN_LABELS
        .iter()
        .copied()
        .chain(karpenter_labels_set())
        .chain([
            "karpenter.sh/anything",
            "karpenter.k8s.aws/ec2nodeclass",
            "x.karpenter.k8s.aws/y",
            "team",
            "example.com/team",
            "node.kubernetes.io/role",
            "a.node.kubernetes.io/x",
            "kops.k8s.io/instancegroup",
            "node-restriction.kubernetes.io/trusted",
            "kubelet.kubernetes.io/x",
            "notkubernetes.io/x",
            "k8s.aws.example.com/x",
            "x.quartermaster.dev/y",
        ]);
    for k in keys {
        let cel = cel_errors(json!({ "template": { "metadata": { "labels": { k: "x" } } } }));
        assert_eq!(
            cel.is_empty(),
            label_restriction(k).is_none(),
            "{k}: CEL says {cel:?}, validate says {:?}",
            label_restriction(k)
        );
    }
}

#[test]
fn a_node_claim_spec_cannot_change() {
    let schema = schema_of(&NodeClaim::crd());
    let claim = |price: f64| {
        json!({
            "apiVersion": "quartermaster.dev/v1alpha1",
            "kind": "NodeClaim",
            "metadata": { "name": "training-abc12" },
            "spec": {
                "nodePool": "training", "instanceType": "p5.48xlarge", "zone": "use1-az4",
                "capacityType": "spot", "pricePerHour": price,
                "resources": { "nvidia.com/gpu": 8 },
                "taints": [{ "key": "nvidia.com/gpu", "effect": "NoSchedule" }]
            }
        })
    };
    let v = Validator::new();
    assert!(v.validate(&schema, &claim(30.5), None).is_ok());
    assert!(v
        .validate(&schema, &claim(30.5), Some(&claim(30.5)))
        .is_ok());
    let err = v
        .validate(&schema, &claim(31.0), Some(&claim(30.5)))
        .unwrap_err();
    assert!(
        err.iter().any(|e| e.message.contains("spec is immutable")),
        "{err:?}"
    );
    let typed: NodeClaim = serde_json::from_value(claim(30.5)).unwrap();
    assert_eq!(
        typed.spec.capacity_type,
        quartermaster::catalog::CapacityType::Spot
    );
    assert!(!typed.is_ready());
}
