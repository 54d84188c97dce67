//! ProvisioningRequests (queued provisioning and check-capacity):
//! accepted, provisioned, held and consumed, or failed without a launch.

use super::*;

/// A PodTemplate `ml/<name>` of a pod asking for `gpus` GPUs.
fn pod_template(name: &str, gpus: &str) -> core::PodTemplate {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "template": {"spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", l::RESOURCE_GPU: gpus}}}],
            "tolerations": [{"key": l::TAINT_GPU, "operator": "Exists"}]
        }}
    }))
    .unwrap()
}

/// A ProvisioningRequest `ml/<name>` of `class` for `count` pods of the
/// template `tmpl`, with these conditions already set.
fn provisioning_request(
    name: &str,
    class: &str,
    count: i32,
    conditions: Value,
) -> quartermaster::api::foreign::ProvisioningRequest {
    serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": "ml", "generation": 1,
                     "creationTimestamp": "2026-01-05T00:00:00Z"},
        "spec": {"provisioningClassName": class,
                 "podSets": [{"podTemplateRef": {"name": "tmpl"}, "count": count}]},
        "status": {"conditions": conditions}
    }))
    .unwrap()
}

/// A condition as the API server stores it.
fn condition(type_: &str, status: &str, reason: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": "",
           "lastTransitionTime": "2026-01-05T00:00:00Z", "observedGeneration": 1})
}

/// A condition's `(type, status, reason)`.
type Cond<'a> = (&'a str, &'a str, &'a str);

const ATOMIC: &str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";
const CHECK_CAPACITY: &str = "check-capacity.autoscaling.x-k8s.io";

/// One ProvisioningRequest step over the store at `now`: the world it
/// leaves, and its conditions written through a mock API that expects, in
/// order, one status patch per `(request, [(type, status, reason)])`, each
/// carrying the request's full condition list.
async fn provisioning_round(
    s: &Store,
    core: &Core,
    now: Time,
    want: &[(&str, &[Cond<'_>])],
) -> quartermaster::controller::snapshot::WorldParts {
    let catalog = catalog();
    let mut parts = world_parts(&snapshot(s), &catalog, REGION, now, DEFAULT_MAX_PODS);
    let unplaceable = |p: &str| {
        core.last_plan()
            .and_then(|r| r.unschedulable.iter().find(|u| u.pod == p))
            .map(|u| u.reason.clone())
    };
    let transitions =
        podgroups::provisioning_step(s, &mut parts, &unplaceable, DEFAULT_MAX_PODS, now);
    let mut sc = Scenario::new();
    for (request, conditions) in want {
        let path = format!(
            "/apis/autoscaling.x-k8s.io/v1/namespaces/ml/provisioningrequests/{request}/status"
        );
        let expected = support::api_server::conditions(conditions);
        sc = sc
            .expect(Method::PATCH, &path, move |body| {
                assert_eq!(
                    support::api_server::conditions_of(&body["status"]),
                    expected
                );
            })
            .respond(
                200,
                json!({"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest"}),
            );
    }
    let (client, verifier) = sc.run();
    let metrics = Metrics::unregistered();
    podgroups::write_transitions(&KubeApi::new(client), None, &metrics, s, &transitions, now).await;
    verifier.finish().await;
    parts
}

/// The pods the core launches for over two rounds at `now` (the batch
/// window between them).
fn launched_for(
    core: &mut Core,
    parts: &quartermaster::controller::snapshot::WorldParts,
    now: Time,
) -> Vec<String> {
    let catalog = catalog();
    let mut actions = core.decide(&parts.world(&catalog, REGION), now);
    actions.extend(core.decide(
        &parts.world(&catalog, REGION),
        now + chrono::TimeDelta::seconds(2),
    ));
    let mut pods: Vec<String> = launches(&actions)
        .iter()
        .flat_map(|r| r.pods.clone())
        .collect();
    pods.sort();
    pods
}

#[tokio::test]
async fn a_provisioning_request_goes_accepted_then_provisioned_and_its_capacity_is_held_then_consumed(
) {
    let s = store(vec![], vec![], vec![]);
    s.reset(vec![pod_template("tmpl", "1")]);
    s.reset(vec![provisioning_request("train", ATOMIC, 2, json!([]))]);
    let mut core = Core::new(Config::default());
    let parts = provisioning_round(
        &s,
        &core,
        t(0),
        &[("train", &[("Accepted", "True", "Accepted")])],
    )
    .await;
    assert_eq!(
        launched_for(&mut core, &parts, t(0)),
        ["ml/train.reserved-0", "ml/train.reserved-1"],
        "the whole request at once"
    );

    // Its two nodes are ready: Provisioned, and the room is held (nothing
    // more is launched, consolidation keeps off the nodes).
    let cloud = cloud();
    let (a, pid_a) = ready_claim_named(&cloud, "gpu-a", "ip-10-0-0-1").await;
    let (b, pid_b) = ready_claim_named(&cloud, "gpu-b", "ip-10-0-0-2").await;
    let taint = json!([{"key": l::TAINT_GPU, "effect": "NoSchedule"}]);
    s.reset(vec![
        node("ip-10-0-0-1", &pid_a, taint.clone(), true, Some("1")),
        node("ip-10-0-0-2", &pid_b, taint.clone(), true, Some("1")),
    ]);
    let b_claim = b.clone();
    s.reset(vec![a, b]);
    s.reset(vec![provisioning_request(
        "train",
        ATOMIC,
        2,
        json!([condition("Accepted", "True", "Accepted")]),
    )]);
    let parts = provisioning_round(
        &s,
        &core,
        t(120),
        &[(
            "train",
            &[
                ("Accepted", "True", "Accepted"),
                ("Provisioned", "True", "CapacityIsProvisioned"),
            ],
        )],
    )
    .await;
    let held: Vec<&str> = parts
        .nodes
        .iter()
        .flat_map(|n| {
            n.pods
                .iter()
                .filter(|p| p.do_not_disrupt)
                .map(|p| p.pod.name.as_str())
        })
        .collect();
    assert_eq!(held.len(), 2, "{held:?}");
    assert_eq!(launched_for(&mut core, &parts, t(120)), [] as [&str; 0]);

    // A pod consuming it arrives: it takes the held room, nothing launches.
    s.reset(vec![provisioning_request(
        "train",
        ATOMIC,
        2,
        json!([
            condition("Accepted", "True", "Accepted"),
            condition("Provisioned", "True", "CapacityIsProvisioned"),
        ]),
    )]);
    s.apply(gpu_pod(
        "w-0",
        None,
        json!({"autoscaling.x-k8s.io/consume-provisioning-request": "train"}),
    ));
    let parts = provisioning_round(&s, &core, t(180), &[]).await;
    assert_eq!(
        parts
            .pending
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["ml/w-0"]
    );
    let held = parts
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter())
        .filter(|p| p.do_not_disrupt)
        .count();
    assert_eq!(held, 1, "one stand-in for the pod not created yet");
    assert_eq!(launched_for(&mut core, &parts, t(180)), [] as [&str; 0]);

    // A reclaim takes one node and its claim: the capacity is revoked.
    s.delete(&node("ip-10-0-0-2", &pid_b, taint, true, Some("1")));
    s.delete(&b_claim);
    s.delete(&gpu_pod("w-0", None, json!({})));
    provisioning_round(
        &s,
        &core,
        t(240),
        &[(
            "train",
            &[
                ("Accepted", "True", "Accepted"),
                ("Provisioned", "True", "CapacityIsProvisioned"),
                ("CapacityRevoked", "True", "CapacityRevoked"),
            ],
        )],
    )
    .await;
}

#[tokio::test]
async fn a_kueue_request_whose_pod_set_requires_one_network_block_launches_into_one_placement_group(
) {
    let s = store(vec![], vec![], vec![]);
    let mut pool = pool();
    pool.spec.template.spec.requirements[0].values = vec!["g5".into(), "g6e".into()];
    s.reset(vec![pool]);
    // Kueue's topology-aware scheduling puts the requirement on the pod
    // set's template, which its ProvisioningRequest admission check copies.
    let mut template = pod_template("tmpl", "1");
    template.template.as_mut().unwrap().metadata = Some(
        serde_json::from_value(json!({"annotations": {
            l::KUEUE_REQUIRED_TOPOLOGY: "topology.k8s.aws/network-node-layer-3"}}))
        .unwrap(),
    );
    s.reset(vec![template]);
    s.reset(vec![provisioning_request("train", ATOMIC, 2, json!([]))]);
    let mut core = Core::new(Config::default());
    let parts = provisioning_round(
        &s,
        &core,
        t(0),
        &[("train", &[("Accepted", "True", "Accepted")])],
    )
    .await;
    let catalog = catalog();
    let mut actions = core.decide(&parts.world(&catalog, REGION), t(0));
    actions.extend(core.decide(&parts.world(&catalog, REGION), t(2)));
    let reqs = launches(&actions);
    let mut pods: Vec<&String> = reqs.iter().flat_map(|r| &r.pods).collect();
    pods.sort();
    assert_eq!(
        pods,
        ["ml/train.reserved-0", "ml/train.reserved-1"],
        "{actions:?}"
    );
    for r in &reqs {
        let labels = catalog.type_labels(&r.offering.instance_type).unwrap();
        assert_eq!(
            labels.get(l::NETWORK_LAYERS).map(String::as_str),
            Some("3"),
            "{r:?}"
        );
    }
    claims_go_into_one_placement_group(&actions, &snapshot(&s)).await;
}

#[tokio::test]
async fn a_provisioning_request_that_cannot_be_met_goes_failed_without_any_launch() {
    let s = store(vec![], vec![], vec![]);
    s.reset(vec![pod_template("tmpl", "64")]);
    s.reset(vec![provisioning_request("huge", ATOMIC, 2, json!([]))]);
    let mut core = Core::new(Config::default());
    let parts = provisioning_round(
        &s,
        &core,
        t(0),
        &[("huge", &[("Accepted", "True", "Accepted")])],
    )
    .await;
    assert_eq!(launched_for(&mut core, &parts, t(0)), [] as [&str; 0]);
    s.reset(vec![provisioning_request(
        "huge",
        ATOMIC,
        2,
        json!([condition("Accepted", "True", "Accepted")]),
    )]);
    let parts = provisioning_round(
        &s,
        &core,
        t(10),
        &[(
            "huge",
            &[
                ("Accepted", "True", "Accepted"),
                ("Failed", "True", "CapacityIsNotFound"),
            ],
        )],
    )
    .await;
    assert!(parts.pending.is_empty(), "a failed request is no demand");
    assert_eq!(launched_for(&mut core, &parts, t(10)), [] as [&str; 0]);
}

#[tokio::test]
async fn check_capacity_is_answered_from_existing_capacity_without_a_launch() {
    let cloud = cloud();
    let (a, pid_a) = ready_claim_named(&cloud, "gpu-a", "ip-10-0-0-1").await;
    let taint = json!([{"key": l::TAINT_GPU, "effect": "NoSchedule"}]);
    let s = store(
        vec![],
        vec![node("ip-10-0-0-1", &pid_a, taint, true, Some("1"))],
        vec![a],
    );
    s.reset(vec![pod_template("tmpl", "1")]);
    s.reset(vec![
        provisioning_request("fits", CHECK_CAPACITY, 1, json!([])),
        provisioning_request("too-big", CHECK_CAPACITY, 2, json!([])),
    ]);
    let mut core = Core::new(Config::default());
    let parts = provisioning_round(
        &s,
        &core,
        t(0),
        &[
            (
                "fits",
                &[
                    ("Accepted", "True", "Accepted"),
                    ("Provisioned", "True", "CapacityIsFound"),
                ],
            ),
            (
                "too-big",
                &[
                    ("Accepted", "True", "Accepted"),
                    ("Provisioned", "False", "CapacityIsNotFound"),
                ],
            ),
        ],
    )
    .await;
    assert!(parts.pending.is_empty());
    assert_eq!(launched_for(&mut core, &parts, t(0)), [] as [&str; 0]);
}
