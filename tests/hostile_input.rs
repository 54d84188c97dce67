//! Hostile input: property tests over every reader of what tenants and
//! operators write into the cluster, and of what arrives on the
//! interruption queue. Whatever the input: no panic, no allocation past a
//! stated bound (the batch cap), and a clear error, condition or reason
//! instead of a value silently clamped into nonsense.
//!
//! | property | reader | inputs per run |
//! |---|---|---|
//! | [`pod_annotations`] | `Pod::from_k8s_lenient`, `PodInfo::from_k8s`, checkpoint hook and acknowledgement | 256 |
//! | [`the_core_on_any_checkpoint_numbers`] | `Core::decide` with a notice, on pods carrying any numbers | 96 |
//! | [`provisioning_requests`] | `podgroups::provisioning_requests`, `core::provisioning::step` | 128 |
//! | [`pod_group_sizes`] | Volcano and Workload API PodGroups through `world_parts` | 128 |
//! | [`node_pools`] | `validate_node_pool`, `Pool::from_api`, the pool's duration and budget accessors | 256 |
//! | [`node_claims`] | `validate_node_claim`, the kubelet flags of the user data | 256 |
//! | [`node_classes`] | `node_class_problems`, `AmiAlias::parse` | 256 |
//! | [`sqs_messages`] | `notices::parse::parse_message` on real events with fields replaced, and on any text | 384 |
//! | [`durations_and_quantities`] | `parse_duration`, `parse_quantity`, `Resources::parse` | 512 |
//!
//! 2,272 inputs a run ([`INPUTS_PER_RUN`]); the seeds differ per run, so
//! every run tries new ones.

use chrono::TimeZone;
use k8s_openapi::api::core::v1 as core;
use proptest::prelude::*;
use quartermaster::api::foreign::{self, ProvisioningRequest, VolcanoPodGroup};
use quartermaster::api::labels as l;
use quartermaster::api::{NodeClaim, NodeClaimSpec, NodePool, Taint, TaintEffect};
use quartermaster::catalog::{CapacityType, Catalog};
use quartermaster::cluster::{Pod, Resources};
use quartermaster::controller::snapshot::{world_parts, Interners, PodInfo, Snapshot};
use quartermaster::core::{
    BoundPod, ClaimRequest, Config, Core, ManagedNode, Notice, OfferingKey, Time, World,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Inputs tried by one run of this file (the sum of the table above).
const INPUTS_PER_RUN: u32 = 256 + 96 + 128 + 128 + 256 + 256 + 256 + 384 + 512;

/// The count the table, the README and [`INPUTS_PER_RUN`] give is what the
/// properties below are configured to try.
#[test]
fn inputs_per_run_is_the_sum_of_the_properties_cases() {
    let cases: u32 = include_str!("hostile_input.rs")
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("#![proptest_config(config(")?
                .strip_suffix("))]")?
                .parse::<u32>()
                .ok()
        })
        .sum();
    assert_eq!(cases, INPUTS_PER_RUN);
}

/// The batch cap the properties hold allocations to.
const CAP: usize = 50;

fn catalog() -> &'static Catalog {
    static C: OnceLock<Catalog> = OnceLock::new();
    C.get_or_init(|| Catalog::embedded().unwrap())
}

fn t0() -> Time {
    chrono::Utc.with_ymd_and_hms(2026, 1, 5, 0, 0, 0).unwrap()
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// What someone might type into a field: anything printable, a number with
/// any unit (valid or not), a huge number, a time of any year, a float, a
/// boolean.
fn text() -> impl Strategy<Value = String> {
    let units = prop::sample::select(vec![
        "", "ns", "us", "µs", "ms", "s", "m", "h", "d", "Ki", "Mi", "Gi", "Ei", "E", "e9", "e400",
        "m ", "h30m", ".5h",
    ]);
    prop_oneof![
        "\\PC{0,24}",
        (any::<u64>(), units.clone()).prop_map(|(n, u)| format!("{n}{u}")),
        ("[0-9]{1,40}", units).prop_map(|(n, u)| format!("{n}{u}")),
        any::<i64>().prop_map(|n| n.to_string()),
        (-300_000i64..300_000, 1u32..13, 1u32..29)
            .prop_map(|(y, m, d)| format!("{y:+05}-{m:02}-{d:02}T00:00:00Z")),
        any::<f64>().prop_map(|f| f.to_string()),
        prop::sample::select(vec![
            "true",
            "false",
            "",
            " ",
            "-1",
            "0",
            "+5",
            "+262142-12-31T23:59:59Z",
            "-262143-01-01T00:00:00Z",
            "9223372036854775807",
        ])
        .prop_map(str::to_string),
    ]
}

/// Any map of these keys (and a few others) to [`text`].
fn some_of(keys: &'static [&'static str]) -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        prop_oneof![
            4 => prop::sample::select(keys).prop_map(str::to_string),
            1 => "[a-z./-]{1,20}",
        ],
        text(),
        0..keys.len().max(1) + 2,
    )
}

const POD_ANNOTATIONS: &[&str] = &[
    l::CHECKPOINT_INTERVAL,
    l::CHECKPOINT_DURATION,
    l::CHECKPOINT_PAUSE,
    l::EXPECTED_RUNTIME,
    l::DEADLINE,
    l::HOLDS_WORK,
    l::POD_GROUP,
    l::POD_GROUP_SIZE,
    l::KUEUE_GROUP_TOTAL,
    l::VOLCANO_GROUP,
    l::CHECKPOINT_HOOK,
    l::CHECKPOINT_ENABLED,
    l::CHECKPOINT_COMPLETED,
    l::CHECKPOINT_REQUESTED,
    l::DO_NOT_DISRUPT,
    l::KARPENTER_DO_NOT_DISRUPT,
    foreign::CONSUME_ANNOTATION,
];

const RESOURCES: &[&str] = &["cpu", "memory", l::RESOURCE_GPU, l::RESOURCE_NEURON, "pods"];

/// A pending or bound pod with these annotations, labels and requests.
fn pod(
    annotations: &BTreeMap<String, String>,
    labels: &BTreeMap<String, String>,
    requests: &BTreeMap<String, String>,
    node: Option<&str>,
) -> core::Pod {
    let mut v = json!({
        "metadata": {"name": "p", "namespace": "ml", "annotations": annotations, "labels": labels},
        "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 8080}],
                                 "resources": {"requests": requests}}]},
        "status": {"phase": "Pending", "podIP": "10.0.0.7",
                   "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    });
    if let Some(n) = node {
        v["spec"]["nodeName"] = json!(n);
    }
    serde_json::from_value(v).unwrap()
}

proptest! {
    #![proptest_config(config(256))]

    /// Any annotations, labels and quantities: the pod is read (or its
    /// quantities refused with the pod named), its durations are within
    /// the stated bound, its gang size is positive, and the checkpoint
    /// signalling reads the same annotations without panicking.
    #[test]
    fn pod_annotations(
        annotations in some_of(POD_ANNOTATIONS),
        labels in some_of(&[l::KUEUE_GROUP]),
        requests in some_of(RESOURCES),
    ) {
        let p = pod(&annotations, &labels, &requests, None);
        let max = quartermaster::cluster::pod::MAX_ANNOTATED_DURATION.as_secs_f64();
        match Pod::from_k8s_lenient(&p, &BTreeMap::new()) {
            Ok((pod, ignored)) => {
                for s in [
                    pod.checkpoint_interval_s,
                    pod.checkpoint_duration_s,
                    pod.checkpoint_pause_s,
                    pod.expected_runtime_s,
                ]
                .into_iter()
                .flatten()
                {
                    prop_assert!(s.is_finite() && (0.0..=max).contains(&s), "{s}");
                }
                prop_assert!(pod.group.as_ref().is_none_or(|g| g.min_member > 0));
                for i in &ignored {
                    prop_assert!(i.to_string().contains("ml/p"), "{i}");
                }
            }
            Err(e) => prop_assert!(e.to_string().contains("ml/p"), "{e}"),
        }
        let info = PodInfo::from_k8s(&p, t0(), &mut Interners::default());
        prop_assert!(info.is_some(), "a pending pod is kept");
        let policy: quartermaster::api::InterruptionPolicy = serde_json::from_value(
            json!({"checkpointHook": {"port": 8080, "path": "/checkpoint"}}),
        )
        .unwrap();
        let _ = quartermaster::controller::checkpoint::pod_hook_target(&p, Some(&policy));
        let _ = quartermaster::controller::checkpoint::acknowledgement(&annotations, t0(), t0());
    }
}

/// A ready spot g5.xlarge of pool `gpu` since `t0`, running `pod`.
fn node_running(pools: &[NodePool], pod: Pod) -> ManagedNode {
    let zone = catalog()
        .offerings_of("us-east-1", "g5.xlarge")
        .find(|o| o.capacity_type == CapacityType::Spot)
        .unwrap()
        .zone_id
        .clone();
    let req = ClaimRequest {
        cluster_placement: false,
        claim: "gpu-1".into(),
        nodepool: "gpu".into(),
        offering: OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone,
            capacity_type: CapacityType::Spot,
        },
        price_per_hour: 0.5,
        pods: vec![],
        prewarm_window: None,
        reservation: None,
    };
    let world = World {
        nodes_revision: 0,
        catalog: catalog(),
        region: "us-east-1",
        pools,
        pending: &[],
        nodes: &[],
        pdbs: &[],
    };
    let mut node = ManagedNode::launched(&req, &world, t0()).unwrap();
    node.ready_at = Some(t0());
    node.state.in_flight = false;
    node.state.used.add(&pod.requests);
    node.pods.push(BoundPod {
        pod,
        do_not_disrupt: false,
        checkpoint_completed: None,
        started: Some(t0()),
        pdb: None,
        placeholder: false,
    });
    node
}

/// Any time chrono can hold, and its ends.
fn any_time() -> impl Strategy<Value = Time> {
    prop_oneof![
        (-10_000_000_000i64..10_000_000_000).prop_map(|s| t0() + chrono::TimeDelta::seconds(s)),
        Just(chrono::DateTime::<chrono::Utc>::MAX_UTC),
        Just(chrono::DateTime::<chrono::Utc>::MIN_UTC),
    ]
}

proptest! {
    #![proptest_config(config(96))]

    /// Parsing bounds what a pod says; the core must not panic on any
    /// number that reaches it all the same (infinite, NaN, negative, past
    /// the end of time), whatever notice comes.
    #[test]
    fn the_core_on_any_checkpoint_numbers(
        numbers in prop::collection::vec(any::<f64>(), 4),
        deadline in prop::option::of(any_time()),
        notice in 0u8..4,
        when in any_time(),
    ) {
        let pools = [serde_json::from_value::<NodePool>(json!({
            "apiVersion": "quartermaster.dev/v1alpha1", "kind": "NodePool",
            "metadata": {"name": "gpu"},
            "spec": {"capacityTypes": ["spot", "on-demand"],
                     "interruption": {"onRebalanceRecommendation": "Drain"}}
        }))
        .unwrap()];
        let mut pod = Pod::new(
            "ml/a",
            Resources::new().with("cpu", 1000).with(l::RESOURCE_GPU, 1),
        );
        pod.checkpoints = true;
        pod.checkpoint_interval_s = Some(numbers[0]);
        pod.checkpoint_duration_s = Some(numbers[1]);
        pod.checkpoint_pause_s = Some(numbers[2]);
        pod.expected_runtime_s = Some(numbers[3]);
        pod.deadline = deadline;
        let nodes = [node_running(&pools, pod)];
        let world = World {
            nodes_revision: 0,
            catalog: catalog(),
            region: "us-east-1",
            pools: &pools,
            pending: &[],
            nodes: &nodes,
            pdbs: &[],
        };
        let mut core = Core::new(Config::default());
        let claim = "gpu-1".to_string();
        let notice = match notice {
            0 => Notice::SpotInterruption { claim, deadline: when },
            1 => Notice::ScheduledChange { claim, start: Some(when) },
            2 => Notice::Rebalance { claim },
            _ => Notice::Terminated { claim },
        };
        let mut now = t0() + chrono::TimeDelta::seconds(1);
        core.decide(&world, now);
        core.handle_notice(&notice, &world, now);
        for _ in 0..4 {
            core.decide(&world, now);
            match core.next_deadline(&world, now) {
                Some(next) if next > now => now = next,
                _ => {
                    now = now
                        .checked_add_signed(chrono::TimeDelta::seconds(3600))
                        .unwrap_or(now)
                }
            }
        }
    }
}

/// A ProvisioningRequest of `class` asking for pod sets of these counts of
/// template `tpl`, with these parameters, created at `created`.
fn provisioning_request(
    name: &str,
    class: &str,
    counts: &[i32],
    params: &BTreeMap<String, String>,
    created: Time,
) -> ProvisioningRequest {
    let sets: Vec<Value> = counts
        .iter()
        .map(|c| json!({"podTemplateRef": {"name": "tpl"}, "count": c}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": created.to_rfc3339()},
        "spec": {"provisioningClassName": class, "podSets": sets, "parameters": params}
    }))
    .unwrap()
}

proptest! {
    #![proptest_config(config(128))]

    /// Any counts and parameters: the requests made of them hold at most
    /// the batch cap in pods, and the core's step over them does not panic.
    #[test]
    fn provisioning_requests(
        requests in prop::collection::vec(
            (
                prop::collection::vec(any::<i32>(), 0..4),
                some_of(&[foreign::PARAM_VALID_UNTIL_SECONDS, foreign::PARAM_NO_RETRY]),
                -3_000_000_000i64..3_000_000_000,
                any::<bool>(),
            ),
            0..5,
        ),
        now in any_time(),
    ) {
        let mut s = Snapshot::default();
        s.pod_templates.insert(
            "ml/tpl".into(),
            Ok(Pod::new("", Resources::new().with(l::RESOURCE_GPU, 1))),
        );
        for (i, (counts, params, created, atomic)) in requests.iter().enumerate() {
            let class = if *atomic { foreign::CLASS_ATOMIC } else { foreign::CLASS_CHECK_CAPACITY };
            let created = t0() + chrono::TimeDelta::seconds(*created);
            s.provisioning_requests.insert(
                format!("ml/r{i}"),
                provisioning_request(&format!("r{i}"), class, counts, params, created),
            );
        }
        let read = quartermaster::controller::podgroups::provisioning_requests(&s, CAP);
        let pods: usize = read
            .iter()
            .map(|r| r.pods.as_ref().map_or(0, Vec::len))
            .sum();
        prop_assert!(pods <= CAP, "{pods} pods made");
        let step = quartermaster::core::provisioning::step(&read, &[], &|_| None, now);
        prop_assert!(step.pending.len() <= CAP);
        for r in &read {
            if let Err(why) = &r.valid_until {
                prop_assert!(why.contains(foreign::PARAM_VALID_UNTIL_SECONDS), "{why}");
            }
        }
    }
}

proptest! {
    #![proptest_config(config(128))]

    /// Any Volcano `minMember` and `minResources`, any Workload API
    /// `minCount`: the world holds the pending pods and at most the batch
    /// cap in stand-ins altogether, and every gang size is positive.
    #[test]
    fn pod_group_sizes(
        groups in prop::collection::vec(
            (any::<i32>(), prop::option::of(some_of(RESOURCES)), any::<i32>()),
            1..4,
        ),
        members in 0usize..6,
    ) {
        use quartermaster::controller::snapshot::Indexed;
        let mut s = Snapshot::default();
        let mut interners = Interners::default();
        for (i, (min_member, min_resources, min_count)) in groups.iter().enumerate() {
            let pg: VolcanoPodGroup = serde_json::from_value(json!({
                "metadata": {"name": format!("v{i}"), "namespace": "ml"},
                "spec": {"minMember": min_member, "minResources": min_resources}
            }))
            .unwrap();
            s.volcano_groups.insert(
                format!("ml/v{i}"),
                quartermaster::controller::podgroups::volcano_spec(&pg),
            );
            let wl: foreign::SchedulingPodGroup = serde_json::from_value(json!({
                "metadata": {"name": format!("w{i}"), "namespace": "ml"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}
            }))
            .unwrap();
            if let Some(spec) = wl.distill(&mut interners) {
                s.scheduling_groups.insert(format!("ml/w{i}"), spec);
            }
            for k in 0..members {
                let annotations =
                    BTreeMap::from([(l::VOLCANO_GROUP.to_string(), format!("v{i}"))]);
                let requests = BTreeMap::from([(l::RESOURCE_GPU.to_string(), "1".to_string())]);
                let mut p = pod(&annotations, &BTreeMap::new(), &requests, None);
                p.metadata.name = Some(format!("v{i}-{k}"));
                let info = PodInfo::from_k8s(&p, t0(), &mut interners).unwrap();
                s.pods.insert(info.key(), info);
            }
        }
        let real = s.pods.len();
        let parts = world_parts(&s, catalog(), "us-east-1", t0(), CAP);
        prop_assert!(parts.pending.len() <= real.max(CAP), "{} pending", parts.pending.len());
        for p in &parts.pending {
            prop_assert!(p.group.as_ref().is_none_or(|g| g.min_member > 0));
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// A NodePool with any text where durations, schedules, time zones,
    /// limits, budgets and labels go: validated with problems named, never
    /// a panic; an invalid one is refused by the planner's pool.
    #[test]
    fn node_pools(
        durations in prop::collection::vec(text(), 6),
        limits in some_of(&["nodes", "cpu", "memory", "nvidia.com/gpu", "costPerHour"]),
        labels in some_of(&["team", l::ZONE, "node-restriction.kubernetes.io/x"]),
        budget in text(),
        zone in text(),
        weight in any::<i32>(),
    ) {
        let value = json!({
            "apiVersion": "quartermaster.dev/v1alpha1", "kind": "NodePool",
            "metadata": {"name": "gpu"},
            "spec": {
                "weight": weight,
                "limits": limits,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"expireAfter": durations[0], "terminationGracePeriod": durations[1]}
                },
                "disruption": {"consolidateAfter": durations[2],
                               "budgets": [{"nodes": budget, "schedule": durations[3], "duration": durations[4]}]},
                "interruption": {"checkpointGracePeriod": durations[5]},
                "prewarm": [{"name": "w", "schedule": durations[3], "timeZone": zone,
                             "duration": durations[4], "capacity": {"nvidia.com/gpu": budget}}]
            }
        });
        let Ok(pool) = serde_json::from_value::<NodePool>(value) else {
            // A value of the wrong type: the API server's schema refuses it.
            return Ok(());
        };
        let problems = quartermaster::api::validate_node_pool(&pool, catalog());
        let planned = quartermaster::cluster::Pool::from_api(&pool, Resources::new());
        prop_assert!(planned.is_ok() || !problems.is_empty());
        let _ = pool.spec.disruption.consolidate_after_duration();
        let _ = pool.spec.interruption.checkpoint_grace_period_duration();
        let _ = pool.spec.node_limit();
        let _ = pool.spec.resource_limits();
        let _ = quartermaster::core::budgets::allowed_disruptions(&pool, 10, 1, t0());
        let _ = quartermaster::core::prewarm::next_deadline(&pool, t0(), std::time::Duration::from_secs(600));
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// A NodeClaim with any labels and taints: either refused with every
    /// problem named, or safe to hand the kubelet (each flag one argument:
    /// no whitespace to start another).
    #[test]
    fn node_claims(
        labels in some_of(&["team", l::ZONE, l::INSTANCE_TYPE, l::GPU_NAME, "node-restriction.kubernetes.io/x"]),
        taints in prop::collection::vec((text(), text()), 0..3),
    ) {
        let mut claim = NodeClaim::new(
            "gpu-1",
            NodeClaimSpec {
                node_pool: "gpu".into(),
                instance_type: "g5.xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::Spot,
                price_per_hour: 0.5,
                resources: Default::default(),
                labels,
                taints: taints
                    .iter()
                    .map(|(k, v)| Taint::new(k, v, TaintEffect::NoSchedule))
                    .collect(),
                startup_taints: vec![],
                termination_grace_period: None,
                expire_after: None,
            },
        );
        claim.spec.labels.retain(|k, _| !k.is_empty());
        let problems = quartermaster::api::validate_node_claim(&claim, catalog(), "us-east-1");
        let template = quartermaster::controller::lifecycle::template_of(&claim);
        match quartermaster::cloud::aws::ec2::template::kubelet_flags(&template) {
            Ok(flags) => {
                for f in &flags {
                    prop_assert!(!f.contains(char::is_whitespace), "{f}");
                    prop_assert!(
                        f.starts_with("--node-labels=") || f.starts_with("--register-with-taints="),
                        "{f}"
                    );
                }
            }
            Err(why) => prop_assert!(!problems.is_empty(), "{why}"),
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// An EC2NodeClass with any AMI selector text: its problems are named,
    /// never a panic.
    #[test]
    fn node_classes(alias in text(), id in text(), name in text(), both in any::<bool>()) {
        let mut term = json!({"alias": alias});
        if both {
            term = json!({"id": id, "name": name});
        }
        let spec: quartermaster::api::EC2NodeClassSpec = serde_json::from_value(json!({
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [term],
            "subnetSelectorTerms": [{"tags": {"k": "v"}}],
            "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]
        }))
        .unwrap();
        let _ = quartermaster::api::nodeclass::node_class_problems(&spec);
        let _ = quartermaster::api::nodeclass::AmiAlias::parse(&alias);
    }
}

/// The five kinds of events on the queue, as EventBridge delivers them.
fn event(kind: u8) -> Value {
    let envelope = |detail_type: &str, source: &str, detail: Value| {
        json!({"version": "0", "id": "e-1", "detail-type": detail_type, "source": source,
               "account": "1", "time": "2026-01-05T00:00:00Z", "region": "us-east-1",
               "resources": [], "detail": detail})
    };
    match kind {
        0 => envelope(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            json!({"instance-id": "i-1", "instance-action": "terminate"}),
        ),
        1 => envelope(
            "EC2 Instance Rebalance Recommendation",
            "aws.ec2",
            json!({"instance-id": "i-1"}),
        ),
        2 => envelope(
            "EC2 Instance State-change Notification",
            "aws.ec2",
            json!({"instance-id": "i-1", "state": "stopping"}),
        ),
        3 => envelope(
            "AWS Health Event",
            "aws.health",
            json!({"service": "EC2", "eventTypeCategory": "scheduledChange",
                   "startTime": "Thu, 08 Jan 2026 06:00:00 GMT",
                   "affectedEntities": [{"entityValue": "i-1"}, {"entityValue": "i-2"}]}),
        ),
        _ => envelope(
            "Capacity Block Expiration Warning",
            "aws.ec2",
            json!({"capacity-reservation-id": "cr-1", "end-date": "2026-01-05T00:40:00Z"}),
        ),
    }
}

/// Any JSON a field could be replaced with.
fn json_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        Just(Value::Null),
        Just(json!([])),
        Just(json!({})),
        prop::collection::vec(text(), 0..4).prop_map(|v| json!(v)),
    ]
}

const EVENT_FIELDS: &[&str] = &[
    "/id",
    "/time",
    "/source",
    "/detail-type",
    "/detail",
    "/detail/instance-id",
    "/detail/state",
    "/detail/startTime",
    "/detail/service",
    "/detail/eventTypeCategory",
    "/detail/affectedEntities",
    "/detail/affectedEntities/0/entityValue",
    "/detail/capacity-reservation-id",
    "/detail/end-date",
];

proptest! {
    #![proptest_config(config(256))]

    /// Real events with any of their fields replaced (times of any year
    /// included): read, called malformed or unknown, never a panic.
    #[test]
    fn sqs_messages(
        kind in 0u8..5,
        replace in prop::collection::vec((prop::sample::select(EVENT_FIELDS), json_value()), 0..4),
    ) {
        let mut body = event(kind);
        for (path, value) in replace {
            if let Some(field) = body.pointer_mut(path) {
                *field = value;
            }
        }
        let parsed = quartermaster::cloud::aws::notices::parse::parse_message(&body.to_string());
        if let Ok(quartermaster::cloud::aws::notices::parse::Parsed::Notices { notices, .. }) = parsed {
            let prefix = if kind == 4 { "cr-" } else { "i-" };
            for n in notices {
                prop_assert!(n.instance_id.starts_with(prefix), "{:?}", n.instance_id);
            }
        }
    }
}

proptest! {
    #![proptest_config(config(128))]

    /// Any text at all on the queue.
    #[test]
    fn sqs_messages_of_any_text(body in prop_oneof!["\\PC{0,200}", text()]) {
        let _ = quartermaster::cloud::aws::notices::parse::parse_message(&body);
    }
}

proptest! {
    #![proptest_config(config(512))]

    /// Durations and quantities: a value or an error, never a panic; a
    /// quantity in canonical units is a whole number that sums without
    /// overflow.
    #[test]
    fn durations_and_quantities(s in text(), resource in prop::sample::select(RESOURCES)) {
        let _ = quartermaster::api::parse_duration(&s);
        let _ = quartermaster::api::parse_quantity(&s);
        if let Ok(r) = Resources::parse([(resource, s.as_str())]) {
            let mut sum = r.clone();
            for _ in 0..3 {
                sum.add(&r);
            }
            sum.sub(&r.times(1000));
        }
    }
}
