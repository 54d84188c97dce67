use super::syntax::distance;
use super::*;
use crate::catalog::Accelerator;

fn instance(name: &str, accelerator: Option<Accelerator>) -> InstanceType {
    InstanceType {
        accelerator,
        max_network_interfaces: 8,
        ..InstanceType::bare(name, 96, 1_000_000)
    }
}

fn gpu(name: &str, model: &str, count: u32, mib: u64) -> InstanceType {
    instance(name, None).with_gpus(model, count, mib)
}

fn neuron(name: &str, model: &str, count: u32) -> InstanceType {
    instance(
        name,
        Some(Accelerator {
            kind: AcceleratorKind::Neuron,
            manufacturer: "AWS".into(),
            model: model.into(),
            count,
            memory_mib_per_device: 32768,
            neuron_cores_per_device: Some(2),
        }),
    )
}

fn catalog() -> Catalog {
    Catalog::from_parts(
        [
            gpu("g5.xlarge", "A10G", 1, 22888),
            gpu("g5.12xlarge", "A10G", 4, 22888),
            gpu("g6.xlarge", "L4", 1, 22888),
            gpu("p4d.24xlarge", "A100", 8, 40960),
            gpu("p4de.24xlarge", "A100", 8, 81920),
            gpu("p5.48xlarge", "H100", 8, 81920),
            gpu("p5e.48xlarge", "H200", 8, 144384),
            neuron("trn1.32xlarge", "Trainium", 16),
        ],
        [],
    )
}

/// A NodePool named `test` with the spec given as YAML.
fn pool(spec: &str) -> NodePool {
    let spec: NodePoolSpec = serde_norway::from_str(spec).expect("spec parses");
    NodePool::new("test", spec)
}

fn errors(spec: &str) -> Vec<String> {
    validate_node_pool(&pool(spec), &catalog())
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[track_caller]
fn expect_valid(spec: &str) {
    let errs = errors(spec);
    assert!(errs.is_empty(), "expected no errors, got {errs:#?}");
}

#[track_caller]
fn expect_error(spec: &str, path: &str, fragment: &str) {
    let errs = errors(spec);
    assert!(
        errs.iter()
            .any(|e| e.starts_with(&format!("{path}: ")) && e.contains(fragment)),
        "expected an error at {path} containing {fragment:?}, got {errs:#?}"
    );
}

const FULL: &str = r#"
template:
  metadata:
    labels: { team: research }
  spec:
    taints: [{ key: nvidia.com/gpu, effect: NoSchedule }]
    startupTaints: [{ key: quartermaster.dev/unregistered, effect: NoSchedule }]
    requirements:
      - { key: quartermaster.dev/instance-family, operator: In, values: [p4d, p5] }
      - { key: quartermaster.dev/gpu-count, operator: Gt, values: ["3"] }
      - { key: topology.k8s.aws/zone-id, operator: In, values: [use1-az4, use1-az6] }
capacityTypes: [spot, on-demand]
limits: { nvidia.com/gpu: 64, nodes: 8, costPerHour: "400.5", memory: 4Ti }
weight: 50
disruption:
  consolidationPolicy: WhenEmpty
  consolidateAfter: 10m
  budgets:
    - nodes: "20%"
    - { nodes: "0", schedule: "0 9 * * 1-5", duration: 8h }
interruption:
  checkpointHook: { port: 8080 }
  checkpointGracePeriod: 100s
  onRebalanceRecommendation: Checkpoint
prewarm:
  - { name: weekdays, schedule: "0 8 * * 1-5", timeZone: Europe/Berlin, duration: 10h,
      capacity: { nvidia.com/gpu: 16 } }
risk: { maxInterruptionBucket: 2, riskAversion: 1.5, maxSpotPoolShare: 0.5 }
"#;

#[test]
fn a_complete_training_pool_is_valid() {
    expect_valid(FULL);
}

#[test]
fn an_empty_spec_is_valid() {
    expect_valid("{}");
}

#[test]
fn a_pool_needs_a_dns_name() {
    let mut p = pool("{}");
    p.metadata.name = Some("Bad_Name".into());
    let errs = validate_node_pool(&p, &catalog());
    assert_eq!(errs[0].path, "metadata.name");
    p.metadata.name = None;
    assert_eq!(
        validate_node_pool(&p, &catalog())[0].to_string(),
        "metadata.name: required"
    );
}

#[test]
fn broken_cron_and_unknown_time_zone_are_both_reported_with_their_paths() {
    let errs = errors(
        r#"prewarm: [{ name: w, schedule: "0 8 * * 1-5 *", timeZone: Europe/Berlín,
                       duration: 10h, capacity: { nvidia.com/gpu: 16 } }]"#,
    );
    assert_eq!(errs.len(), 2, "{errs:#?}");
    assert!(errs[0].starts_with("spec.prewarm[0].schedule: invalid cron expression"));
    assert!(errs[1].starts_with("spec.prewarm[0].timeZone: unknown time zone"));
    assert!(
        errs[1].ends_with("did you mean Europe/Berlin?"),
        "{}",
        errs[1]
    );
}

#[test]
fn edit_distance_counts_insertions_deletions_and_substitutions() {
    assert_eq!(distance("timezone", "timezone"), 0);
    assert_eq!(distance("kitten", "sitting"), 3);
    assert_eq!(distance("", "abc"), 3);
}

#[test]
fn prewarm_windows_need_unique_names_positive_durations_and_capacity_within_limits() {
    let spec = r#"
limits: { nvidia.com/gpu: 8 }
prewarm:
  - { name: w, schedule: "@daily", duration: 0s, capacity: { nvidia.com/gpu: 16 } }
  - { name: w, schedule: "@daily", duration: 1d, capacity: {} }
"#;
    expect_error(spec, "spec.prewarm[0].duration", "longer than zero");
    expect_error(
        spec,
        "spec.prewarm[0].capacity[nvidia.com/gpu]",
        "exceeds spec.limits",
    );
    expect_error(spec, "spec.prewarm[1].name", "duplicate");
    expect_error(spec, "spec.prewarm[1].duration", "unknown unit");
    expect_error(spec, "spec.prewarm[1].capacity", "at least one resource");
}

#[test]
fn unknown_instance_families_and_types_are_named() {
    let spec = r#"
template: { spec: { requirements: [
  { key: quartermaster.dev/instance-family, operator: In, values: [p5, p9] },
  { key: node.kubernetes.io/instance-type, operator: NotIn, values: [p5.49xlarge] } ] } }
"#;
    expect_error(
        spec,
        "spec.template.spec.requirements[0].values[1]",
        "unknown instance family \"p9\"",
    );
    expect_error(
        spec,
        "spec.template.spec.requirements[1].values[0]",
        "unknown instance type \"p5.49xlarge\" (p5 has p5.48xlarge)",
    );
}

#[test]
fn requirements_that_select_no_instance_type_are_an_error() {
    expect_error(
        r#"template: { spec: { requirements: [
  { key: quartermaster.dev/instance-family, operator: In, values: [g5] },
  { key: quartermaster.dev/gpu-name, operator: In, values: [h100] } ] } }"#,
        "spec.template.spec.requirements",
        "no instance type",
    );
}

#[test]
fn operators_and_values_must_agree() {
    let spec = r#"
template: { spec: { requirements: [
  { key: a, operator: In },
  { key: b, operator: Exists, values: [x] },
  { key: quartermaster.dev/gpu-count, operator: Gt, values: ["1", "2"] },
  { key: quartermaster.dev/gpu-memory-gib, operator: Lt, values: [lots] },
  { key: quartermaster.dev/gpu-count, operator: In, values: [eight] },
  { key: quartermaster.dev/nodepool, operator: Exists } ] } }
"#;
    let base = "spec.template.spec.requirements";
    expect_error(
        spec,
        &format!("{base}[0].values"),
        "needs at least one value",
    );
    expect_error(spec, &format!("{base}[1].values"), "takes no values");
    expect_error(spec, &format!("{base}[2].values"), "exactly one integer");
    expect_error(spec, &format!("{base}[3].values"), "exactly one integer");
    expect_error(spec, &format!("{base}[4].values[0]"), "not an integer");
    expect_error(spec, &format!("{base}[5].key"), "set by Quartermaster");
}

#[test]
fn unknown_capacity_types_in_requirements_and_contradictions_are_reported() {
    expect_error(
        r#"template: { spec: { requirements: [
  { key: quartermaster.dev/capacity-type, operator: In, values: [spto] } ] } }"#,
        "spec.template.spec.requirements[0].values[0]",
        "unknown capacity type",
    );
    expect_error(
        r#"capacityTypes: [on-demand]
template: { spec: { requirements: [
  { key: quartermaster.dev/capacity-type, operator: In, values: [spot] } ] } }"#,
        "spec.capacityTypes",
        "exclude every capacity type",
    );
    expect_error(
        r#"template: { spec: { requirements: [
  { key: karpenter.sh/capacity-type, operator: NotIn, values: [spot, on-demand, reserved] } ] } }"#,
        "spec.capacityTypes",
        "allow no capacity type",
    );
    expect_error(
        r#"template: { spec: { requirements: [
  { key: karpenter.sh/capacity-type, operator: In, values: [sport] } ] } }"#,
        "spec.template.spec.requirements[0].values[0]",
        "unknown capacity type",
    );
    // Unset or empty: the requirements decide, on-demand without one.
    expect_valid("capacityTypes: []");
    expect_error(
        "capacityTypes: [spot, spot]",
        "spec.capacityTypes",
        "unique",
    );
}

#[test]
fn karpenters_labels_are_understood_in_requirements_and_refused_where_ours_are() {
    let spec = r#"
template: { spec: { requirements: [
  { key: karpenter.k8s.aws/instance-gpu-count, operator: Gt, values: [many] },
  { key: karpenter.k8s.aws/instance-gpu-memory, operator: In, values: [lots] },
  { key: karpenter.sh/nodepool, operator: Exists },
  { key: karpenter.k8s.aws/instance-ebs-bandwidth, operator: Gt, values: ["1000"] },
  { key: karpenter.k8s.aws/instance-family, operator: In, values: [p9] } ] } }
"#;
    let base = "spec.template.spec.requirements";
    expect_error(spec, &format!("{base}[0].values"), "exactly one integer");
    expect_error(spec, &format!("{base}[1].values[0]"), "not an integer");
    expect_error(spec, &format!("{base}[2].key"), "set by Quartermaster");
    expect_error(spec, &format!("{base}[3].key"), "not a Karpenter label");
    expect_error(
        spec,
        &format!("{base}[4].values[0]"),
        "unknown instance family",
    );
    // Karpenter's labels select the same types ours do.
    let karpenter = pool(
        r#"template: { spec: { requirements: [
  { key: karpenter.k8s.aws/instance-gpu-name, operator: In, values: [a100, h100] },
  { key: karpenter.k8s.aws/instance-gpu-count, operator: Gt, values: ["4"] } ] } }"#,
    );
    let ours = pool(
        r#"template: { spec: { requirements: [
  { key: quartermaster.dev/gpu-name, operator: In, values: [a100, h100] },
  { key: quartermaster.dev/gpu-count, operator: Gt, values: ["4"] } ] } }"#,
    );
    let c = catalog();
    let names = |p: &NodePool| -> Vec<String> {
        selected_instance_types(&p.spec, &c)
            .iter()
            .map(|t| t.name.clone())
            .collect()
    };
    assert_eq!(
        names(&karpenter),
        ["p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge"]
    );
    assert_eq!(names(&karpenter), names(&ours));
    expect_error(
        r#"template: { metadata: { labels: { karpenter.sh/capacity-type: spot, karpenter.k8s.aws/team: x } } }"#,
        "spec.template.metadata.labels[karpenter.sh/capacity-type]",
        "requirements instead",
    );
    expect_error(
        r#"template: { metadata: { labels: { karpenter.k8s.aws/team: x } } }"#,
        "spec.template.metadata.labels[karpenter.k8s.aws/team]",
        "restricted",
    );
}

#[test]
fn labels_and_taints_must_be_well_formed() {
    let spec = r#"
template:
  metadata: { labels: { "bad key!": x, ok: "not ok!", quartermaster.dev/nodepool: x } }
  spec:
    taints: [{ key: a, effect: NoSchedule }, { key: a, value: b, effect: NoSchedule }]
"#;
    expect_error(
        spec,
        "spec.template.metadata.labels[bad key!]",
        "invalid label key",
    );
    expect_error(
        spec,
        "spec.template.metadata.labels[ok]",
        "invalid label value",
    );
    expect_error(
        spec,
        "spec.template.metadata.labels[quartermaster.dev/nodepool]",
        "set by Quartermaster",
    );
    expect_error(
        spec,
        "spec.template.spec.taints[1]",
        "duplicate taint a:NoSchedule",
    );
}

#[test]
fn limits_must_be_quantities_and_cost_a_plain_number() {
    let spec = r#"limits: { nvidia.com/gpu: lots, cpu: "-4", nodes: "2.5", costPerHour: 1k }"#;
    expect_error(spec, "spec.limits[nvidia.com/gpu]", "invalid quantity");
    expect_error(spec, "spec.limits[cpu]", "negative");
    expect_error(spec, "spec.limits[nodes]", "whole number");
    expect_error(spec, "spec.limits[costPerHour]", "plain number");
}

#[test]
fn labels_that_would_overwrite_what_a_node_is_are_refused() {
    let spec = r#"
template:
  metadata:
    labels:
      node-restriction.kubernetes.io/trusted: "yes"
      kubernetes.io/hostname: other-node
      topology.kubernetes.io/zone: use1-az1
      quartermaster.dev/gpu-count: "8"
      example.com/team: ml
      node.kubernetes.io/role: gpu
"#;
    let base = "spec.template.metadata.labels";
    expect_error(
        spec,
        &format!("{base}[node-restriction.kubernetes.io/trusted]"),
        "restricted",
    );
    for k in [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "quartermaster.dev/gpu-count",
    ] {
        expect_error(spec, &format!("{base}[{k}]"), "well-known label");
    }
    assert_eq!(errors(spec).len(), 4, "{:#?}", errors(spec));
}

#[test]
fn limits_that_overflow_are_out_of_range_not_unlimited() {
    let spec = r#"limits: { nvidia.com/gpu: "-1e400", memory: "1e400", cpu: "1e17", nodes: "99999999999999999999" }"#;
    expect_error(spec, "spec.limits[nvidia.com/gpu]", "out of range");
    expect_error(spec, "spec.limits[memory]", "out of range");
    expect_error(spec, "spec.limits[cpu]", "largest limit");
    expect_error(spec, "spec.limits[nodes]", "whole number");
}

#[test]
fn weight_bucket_share_and_aversion_are_range_checked() {
    let spec =
        "weight: 101\nrisk: { maxInterruptionBucket: 5, riskAversion: -1, maxSpotPoolShare: 0 }";
    expect_error(spec, "spec.weight", "0..=100");
    expect_error(spec, "spec.risk.maxInterruptionBucket", "0..=4");
    expect_error(spec, "spec.risk.riskAversion", ">= 0");
    expect_error(spec, "spec.risk.maxSpotPoolShare", "(0, 1]");
    expect_valid("risk: { maxSpotPoolShare: 1 }");
}

#[test]
fn budgets_need_counts_or_percentages_and_schedule_with_duration() {
    let spec = r#"
disruption:
  consolidateAfter: soon
  budgets:
    - { nodes: "110%" }
    - { nodes: "1", schedule: "0 9 * * 1-5" }
    - { nodes: "1", duration: 1h }
    - { nodes: "1", schedule: "0 9 * *", duration: 1h }
"#;
    expect_error(spec, "spec.disruption.consolidateAfter", "or Never");
    expect_error(spec, "spec.disruption.budgets[0].nodes", "at most 100%");
    expect_error(spec, "spec.disruption.budgets[1]", "set together");
    expect_error(spec, "spec.disruption.budgets[2]", "set together");
    expect_error(
        spec,
        "spec.disruption.budgets[3].schedule",
        "expected 5 fields",
    );
    expect_valid("disruption: { consolidateAfter: Never }");
}

#[test]
fn durations_follow_the_crd_pattern() {
    expect_error(
        "disruption: { consolidateAfter: 500us }",
        "spec.disruption.consolidateAfter",
        "h, m, s or ms",
    );
    expect_error(
        "interruption: { checkpointGracePeriod: 90 }",
        "spec.interruption.checkpointGracePeriod",
        "missing unit",
    );
}

#[test]
fn the_checkpoint_grace_period_fits_in_the_two_minute_notice() {
    expect_error(
        "interruption: { checkpointGracePeriod: 3m }",
        "spec.interruption.checkpointGracePeriod",
        "two-minute",
    );
    expect_error(
        "interruption: { checkpointGracePeriod: 30s, checkpointHook: { port: 80, timeout: 1m } }",
        "spec.interruption.checkpointHook.timeout",
        "exceeds checkpointGracePeriod",
    );
    expect_error(
        "interruption: { checkpointHook: { port: 0, path: checkpoint } }",
        "spec.interruption.checkpointHook.port",
        "1..=65535",
    );
    expect_error(
        "interruption: { checkpointHook: { port: 80, path: checkpoint } }",
        "spec.interruption.checkpointHook.path",
        "start with /",
    );
}

#[test]
fn gpu_sharing_fields_must_match_the_mode() {
    expect_error(
        "gpuSharing: { mode: TimeSlicing }",
        "spec.gpuSharing.replicas",
        "required",
    );
    expect_error(
        "gpuSharing: { mode: TimeSlicing, replicas: 65 }",
        "spec.gpuSharing.replicas",
        "2..=64",
    );
    expect_error(
        "gpuSharing: { mode: Mig }",
        "spec.gpuSharing.migProfile",
        "required",
    );
    expect_error(
        "gpuSharing: { mode: None, replicas: 4, migProfile: 1g.10gb }",
        "spec.gpuSharing.replicas",
        "only allowed with mode TimeSlicing",
    );
    expect_error(
        "gpuSharing: { mode: Mig, migProfile: big }",
        "spec.gpuSharing.migProfile",
        "not a MIG profile name",
    );
    expect_valid("gpuSharing: { mode: TimeSlicing, replicas: 4 }");
}

#[test]
fn a_time_sliced_pool_counts_its_gpus_as_shares() {
    let sliced = "gpuSharing: { mode: TimeSlicing, replicas: 4 }";
    expect_error(
        &format!("{sliced}\nlimits: {{ nvidia.com/gpu: '8' }}"),
        "spec.limits[nvidia.com/gpu]",
        "nvidia.com/gpu.shared",
    );
    expect_error(
        &format!("{sliced}\nprewarm: [{{ name: w, schedule: '0 8 * * *', duration: 1h, capacity: {{ nvidia.com/gpu: '2' }} }}]"),
        "spec.prewarm[0].capacity[nvidia.com/gpu]",
        "nvidia.com/gpu.shared",
    );
    expect_valid(&format!(
        "{sliced}\nlimits: {{ nvidia.com/gpu.shared: '32' }}"
    ));
    expect_valid("limits: { nvidia.com/gpu: '8' }");
}

#[test]
fn a_mig_profile_on_g5_fails_because_a10g_has_no_mig() {
    expect_error(
        r#"gpuSharing: { mode: Mig, migProfile: 1g.10gb }
template: { spec: { requirements: [
  { key: quartermaster.dev/instance-family, operator: In, values: [g5, g6] } ] } }"#,
        "spec.gpuSharing.migProfile",
        "none of the pool's GPUs supports MIG (A10G 22GB on g5, L4 22GB on g6)",
    );
}

#[test]
fn a_mig_profile_must_exist_on_at_least_one_selected_gpu() {
    let on = |families: &str, profile: &str| {
        format!(
            "gpuSharing: {{ mode: Mig, migProfile: {profile} }}
template: {{ spec: {{ requirements: [
  {{ key: quartermaster.dev/instance-family, operator: In, values: [{families}] }} ] }} }}"
        )
    };
    expect_error(
        &on("p4d", "3g.40gb"),
        "spec.gpuSharing.migProfile",
        "A100 40GB offers 1g.5gb, 1g.10gb",
    );
    expect_valid(&on("p4d", "3g.20gb"));
    // One of the selected GPUs offering it is enough: the planner keeps to those.
    expect_valid(&on("p4d, p4de", "3g.40gb"));
    expect_valid(&on("p5", "1g.10gb"));
    expect_valid(&on("p5e", "1g.18gb"));
    expect_valid(&on("g5, p5", "1g.10gb"));
}

#[test]
fn sharing_needs_nvidia_gpus_in_the_pool() {
    expect_error(
        r#"gpuSharing: { mode: TimeSlicing, replicas: 4 }
template: { spec: { requirements: [
  { key: quartermaster.dev/neuron-name, operator: In, values: [trainium] } ] } }"#,
        "spec.gpuSharing.mode",
        "no NVIDIA GPU",
    );
}

#[test]
fn catalog_checks_are_skipped_without_a_catalog() {
    let p = pool(
        r#"gpuSharing: { mode: Mig, migProfile: 1g.10gb }
template: { spec: { requirements: [
  { key: quartermaster.dev/instance-family, operator: In, values: [zz9] } ] } }"#,
    );
    assert_eq!(validate_node_pool(&p, &Catalog::default()), []);
}

#[test]
fn selection_follows_instance_labels() {
    let p = pool(
        r#"template: { spec: { requirements: [
  { key: quartermaster.dev/gpu-memory-gib, operator: Gt, values: ["60"] },
  { key: quartermaster.dev/gpu-name, operator: NotIn, values: [h200] },
  { key: topology.k8s.aws/zone-id, operator: In, values: [use1-az4] } ] } }"#,
    );
    let c = catalog();
    let names: Vec<&str> = selected_instance_types(&p.spec, &c)
        .iter()
        .map(|it| it.name.as_str())
        .collect();
    assert_eq!(names, ["p4de.24xlarge", "p5.48xlarge"]);
}

#[test]
fn families_a_pool_cannot_launch_in_a_region_are_named() {
    let catalog = Catalog::embedded().unwrap();
    let p = pool(
        "template: {spec: {requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [p3, g5]}]}}",
    );
    assert_eq!(
        families_without_offerings(&p.spec, &catalog, "us-east-1"),
        ["p3"]
    );
    let g5 = pool(
        "template: {spec: {requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [g5]}]}}",
    );
    assert!(families_without_offerings(&g5.spec, &catalog, "us-east-1").is_empty());
}

#[test]
fn expire_after_takes_a_duration_or_never() {
    expect_valid("template: { spec: { expireAfter: 720h } }");
    expect_valid("template: { spec: { expireAfter: Never } }");
    expect_error(
        "template: { spec: { expireAfter: 30d } }",
        "spec.template.spec.expireAfter",
        "or Never",
    );
}
