//! Gangs from Volcano PodGroups, the Workload API and EFA placement
//! groups: planned whole, capacity reserved before the pods exist, and
//! planned again when a member cannot launch.

use super::*;

/// A Volcano PodGroup `ml/<name>` of `min` members needing `min_resources`
/// (or nothing stated).
fn volcano_pod_group(name: &str, min: i32, min_resources: Value) -> VolcanoPodGroup {
    serde_json::from_value(json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"minMember": min, "minResources": min_resources, "queue": "default"}
    }))
    .unwrap()
}

/// The pods each launch of the core's next plan (decided at 0, then past
/// the batch window) is for, and the zones they launch in.
fn planned(s: &Store) -> (Vec<String>, std::collections::BTreeSet<String>) {
    let catalog = catalog();
    let mut core = Core::new(Config::default());
    let parts = world_parts(&snapshot(s), &catalog, REGION, t(0), DEFAULT_MAX_PODS);
    let mut actions = core.decide(&parts.world(&catalog, REGION), t(0));
    actions.extend(core.decide(&parts.world(&catalog, REGION), t(2)));
    let reqs = launches(&actions);
    let mut pods: Vec<String> = reqs.iter().flat_map(|r| r.pods.clone()).collect();
    pods.sort();
    (pods, reqs.iter().map(|r| r.offering.zone.clone()).collect())
}

#[tokio::test]
async fn a_volcano_gang_is_planned_whole_from_its_pod_group() {
    let member = |i: u32| {
        gpu_pod(
            &format!("train-{i}"),
            None,
            json!({l::VOLCANO_GROUP: "train"}),
        )
    };
    let s = store(vec![member(0), member(1), member(2)], vec![], vec![]);
    s.reset(vec![volcano_pod_group("train", 4, Value::Null)]);
    assert!(s.is_synced());
    let (pods, _) = planned(&s);
    assert_eq!(
        pods,
        [] as [&str; 0],
        "three of four members: the gang waits"
    );

    s.apply(member(3));
    let (pods, zones) = planned(&s);
    assert_eq!(
        pods,
        ["ml/train-0", "ml/train-1", "ml/train-2", "ml/train-3"]
    );
    assert_eq!(zones.len(), 1, "one zone: {zones:?}");
}

#[tokio::test]
async fn a_volcano_pod_group_with_min_resources_reserves_its_capacity_before_its_pods_exist() {
    let s = store(vec![], vec![], vec![]);
    s.reset(vec![volcano_pod_group(
        "train",
        2,
        json!({l::RESOURCE_GPU: "2", "cpu": "4"}),
    )]);
    let (pods, zones) = planned(&s);
    assert_eq!(pods, ["ml/train.reserved-0", "ml/train.reserved-1"]);
    assert_eq!(zones.len(), 1);
    // Without minResources nothing is held for pods that do not exist.
    s.reset(vec![volcano_pod_group("train", 2, Value::Null)]);
    assert_eq!(planned(&s).0, [] as [&str; 0]);
}

/// GPU pod `ml/w-<i>` of the Workload API PodGroup `workers`.
fn workload_member(i: u32) -> core::Pod {
    let mut p = gpu_pod(&format!("w-{i}"), None, json!({}));
    let mut spec = serde_json::to_value(p.spec.take().unwrap()).unwrap();
    spec["schedulingGroup"] = json!({"podGroupName": "workers"});
    p.spec = Some(serde_json::from_value(spec).unwrap());
    p
}

#[tokio::test]
async fn a_workload_api_gang_is_sized_by_its_pod_groups_min_count() {
    let group: quartermaster::api::foreign::SchedulingPodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
        "metadata": {"name": "workers", "namespace": "ml"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}
    }))
    .unwrap();
    let s = store(vec![workload_member(0), workload_member(1)], vec![], vec![]);
    s.reset(vec![group]);
    assert_eq!(
        planned(&s).0,
        [] as [&str; 0],
        "two of three: the gang waits"
    );
    s.apply(workload_member(2));
    let (pods, zones) = planned(&s);
    assert_eq!(pods, ["ml/w-0", "ml/w-1", "ml/w-2"]);
    assert_eq!(zones.len(), 1);
}

#[tokio::test]
async fn a_workload_api_beta_gang_keeps_its_zone_and_network_block_and_says_why_a_rack_cannot_be_kept(
) {
    // As Kubernetes 1.37 serves it: minCount required, one topology key.
    let group = |key: &str| -> quartermaster::api::foreign::SchedulingPodGroup {
        serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "workers", "namespace": "ml"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                     "schedulingConstraints": {"topology": [{"key": key}]}}
        }))
        .unwrap()
    };
    let s = store(vec![workload_member(0), workload_member(1)], vec![], vec![]);
    s.reset(vec![group(l::ZONE)]);
    let (pods, zones) = planned(&s);
    assert_eq!(pods, ["ml/w-0", "ml/w-1"]);
    assert_eq!(zones.len(), 1, "one zone: the constraint holds");

    // One network block: only types EC2 reports a topology for, which the
    // g5-only pool has none of.
    let layer3 = "topology.k8s.aws/network-node-layer-3";
    s.reset(vec![group(layer3)]);
    assert_eq!(planned(&s).0, [] as [&str; 0], "no g5 reports its topology");
    let mut pool = pool();
    pool.spec.template.spec.requirements[0].values = vec!["g5".into(), "g6e".into()];
    s.reset(vec![pool]);
    let catalog = catalog();
    let mut core = Core::new(Config::default());
    let snap = snapshot(&s);
    let parts = world_parts(&snap, &catalog, REGION, t(0), DEFAULT_MAX_PODS);
    core.decide(&parts.world(&catalog, REGION), t(0));
    let actions = core.decide(&parts.world(&catalog, REGION), t(2));
    let reqs = launches(&actions);
    let mut pods: Vec<&String> = reqs.iter().flat_map(|r| &r.pods).collect();
    pods.sort();
    assert_eq!(pods, ["ml/w-0", "ml/w-1"], "{actions:?}");
    for r in &reqs {
        let labels = catalog.type_labels(&r.offering.instance_type).unwrap();
        assert_eq!(
            labels.get(l::NETWORK_LAYERS).map(String::as_str),
            Some("3"),
            "{r:?}"
        );
    }
    // Their claims ask the cloud for one cluster placement group.
    claims_go_into_one_placement_group(&actions, &snap).await;

    // A rack cannot be chosen for new nodes: reported, not scattered.
    s.reset(vec![group("topology.kubernetes.io/rack")]);
    assert_eq!(planned(&s).0, [] as [&str; 0]);
    let parts = world_parts(&snapshot(&s), &catalog, REGION, t(0), DEFAULT_MAX_PODS);
    for p in &parts.pending {
        assert!(
            p.not_placeable
                .iter()
                .any(|r| r.contains("PodGroup ml/workers")
                    && r.contains("topology.kubernetes.io/rack")),
            "{}: {:?}",
            p.name,
            p.not_placeable
        );
    }
}

/// A pending 8-GPU pod `ml/<name>` requesting EFA, member of the gang
/// `ml/allreduce` of two.
fn efa_member(name: &str) -> core::Pod {
    let mut pod = gpu_pod(
        name,
        None,
        json!({l::POD_GROUP: "allreduce", l::POD_GROUP_SIZE: "2"}),
    );
    let requests = &mut pod.spec.as_mut().unwrap().containers[0]
        .resources
        .as_mut()
        .unwrap()
        .requests
        .as_mut()
        .unwrap();
    for (r, q) in [
        (l::RESOURCE_GPU, "8"),
        (l::RESOURCE_EFA, "1"),
        ("cpu", "16"),
    ] {
        requests.insert(
            r.into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(q.into()),
        );
    }
    pod
}

#[tokio::test]
async fn a_gang_member_out_of_capacity_for_its_placement_group_releases_the_other_and_the_gang_is_planned_again(
) {
    let mut efa_pool = pool();
    efa_pool.spec.template.spec.requirements[0].values = vec!["p5".into()];
    efa_pool.spec.capacity_types = vec![quartermaster::catalog::CapacityType::OnDemand];
    let s = store_with(
        vec![efa_pool.clone()],
        vec![efa_member("w-0"), efa_member("w-1")],
        vec![],
        vec![],
    );
    let catalog = catalog();
    let mut core = Core::new(Config::default());
    decide_at(&mut core, &s, &catalog, t(0));
    let first = decide_at(&mut core, &s, &catalog, t(2));
    let reqs: Vec<ClaimRequest> = launches(&first).into_iter().cloned().collect();
    assert_eq!(reqs.len(), 2, "{first:?}");
    for r in &reqs {
        s.apply(claim_in(r, t(2), &catalog, &[efa_pool.clone()]));
    }
    // EC2 had room for the first member's placement, not the second's.
    let mut config = SimulatedCloudConfig::new(7, REGION, t(0));
    config.capacity.exhausted.insert(reqs[1].offering.clone());
    let full = Mutex::new(SimulatedCloud::new(catalog.clone(), config).unwrap());
    let metrics = Metrics::unregistered();
    let step = reconcile_out_of_capacity(&s, &full, &metrics, &reqs[1].claim).await;
    let Step::LaunchFailed {
        notice: Some(notice),
        ..
    } = step
    else {
        panic!("a capacity error: {step:?}");
    };
    let gone = s.read(|s| s.claims[&reqs[1].claim].clone());
    s.delete(&gone);
    notify(&mut core, &s, &catalog, &notice, t(3));
    // The other member's claim, still in flight, is deleted through the API.
    let acts = decide_at(&mut core, &s, &catalog, t(3));
    let deletes: Vec<&Action> = acts
        .iter()
        .filter(|a| matches!(a, Action::Delete { .. }))
        .collect();
    assert_eq!(
        deletes,
        [&Action::Delete {
            claim: reqs[0].claim.clone(),
            reason: quartermaster::core::DisruptionReason::GangLaunchFailed
        }],
        "{acts:?}"
    );
    execute_scripted(&s, &acts, "none", t(3)).await;
    let released = s.read(|s| s.claims[&reqs[0].claim].clone());
    s.delete(&released);
    // Both members are planned again together, away from the offering
    // that had no capacity.
    let mut again: Vec<ClaimRequest> = launches(&acts).into_iter().cloned().collect();
    for k in 4..8 {
        let acts = decide_at(&mut core, &s, &catalog, t(k));
        again.extend(launches(&acts).into_iter().cloned());
        execute_scripted(&s, &acts, "none", t(k)).await;
    }
    let mut pods: Vec<&str> = again
        .iter()
        .flat_map(|r| r.pods.iter().map(String::as_str))
        .collect();
    pods.sort();
    assert_eq!(pods, ["ml/w-0", "ml/w-1"], "{again:?}");
    assert!(
        again.iter().all(|r| r.offering != reqs[1].offering),
        "{again:?}"
    );
}
