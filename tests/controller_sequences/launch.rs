//! A pending GPU pod leads to a NodeClaim and a launch; the registered
//! node gets the claim's labels and taints, its place in the EC2 network,
//! and is Initialized only once its GPU is advertised.

use super::*;

#[tokio::test]
async fn a_pending_gpu_pod_leads_to_a_node_claim_and_then_a_launch() {
    let s = store(vec![gpu_pod("train-0", None, json!({}))], vec![], vec![]);
    let catalog = catalog();
    let mut core = Core::new(Config::default());
    let snap = snapshot(&s);
    let parts = world_parts(&snap, &catalog, REGION, t(0), DEFAULT_MAX_PODS);
    assert_eq!(parts.pending.len(), 1);
    assert!(launches(&core.decide(&parts.world(&catalog, REGION), t(0))).is_empty());
    let actions = core.decide(&parts.world(&catalog, REGION), t(2));
    let reqs = launches(&actions);
    assert_eq!(reqs.len(), 1, "{actions:?}");
    assert_eq!(reqs[0].pods, ["ml/train-0"]);
    let want_type = reqs[0].offering.instance_type.clone();
    assert!(want_type.starts_with("g5."), "{want_type}");

    // The claim is created, with our finalizer, before anything launches.
    let name = reqs[0].claim.clone();
    let expected_name = name.clone();
    let (client, verifier) = Scenario::new()
        .expect(Method::POST, CLAIMS, move |body| {
            assert_eq!(body["metadata"]["name"], json!(expected_name));
            assert_eq!(body["metadata"]["finalizers"], json!([l::FINALIZER]));
            assert_eq!(body["spec"]["instanceType"], json!(want_type));
            assert_eq!(body["spec"]["nodePool"], "gpu");
            assert_eq!(body["spec"]["labels"][l::NODEPOOL], "gpu");
            assert_eq!(body["spec"]["taints"][0]["key"], l::TAINT_GPU);
            let startup: Vec<&str> = body["spec"]["startupTaints"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["key"].as_str().unwrap())
                .collect();
            assert!(startup.contains(&l::TAINT_UNREGISTERED), "{startup:?}");
            assert_eq!(body["spec"]["resources"][l::RESOURCE_GPU], "1");
        })
        .respond_with(echo)
        .run();
    let api = KubeApi::new(client);
    let cloud = cloud();
    let outcomes = execute(&api, &actions, &snap, t(2)).await;
    verifier.finish().await;
    let [Outcome::Created(created)] = &outcomes[..] else {
        panic!("{outcomes:?}")
    };
    assert!(
        cloud.instances().await.unwrap().is_empty(),
        "no launch before the claim is seen"
    );

    // The lifecycle launches it and records the provider ID.
    let mut claim = (**created).clone();
    claim.metadata.creation_timestamp =
        Some(quartermaster::controller::snapshot::to_k8s_time(t(2)));
    s.apply(claim.clone());
    let reply = claim_json(&claim);
    let api = Scenario::new()
        .expect(Method::PATCH, &format!("{CLAIMS}/{name}/status"), |body| {
            let status = &body["status"];
            assert!(status["providerID"]
                .as_str()
                .unwrap()
                .starts_with("aws:///"));
            assert_eq!(status["conditions"][0]["type"], conditions::LAUNCHED);
            assert_eq!(status["conditions"][0]["status"], "True");
        })
        .respond(200, reply)
        .run();
    let metrics = Metrics::unregistered();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, t(3)).await;
    let Step::Launched(instance) = step else {
        panic!("{step:?}")
    };
    assert_eq!(instance.claim, name);
    assert_eq!(instance.offering, reqs[0].offering);
    assert_eq!(cloud.instances().await.unwrap().len(), 1);

    // Launched, no node yet: waiting, and no request.
    let mut launched = claim.clone();
    let mut status = quartermaster::api::NodeClaimStatus {
        provider_id: Some(instance.provider_id.clone()),
        ..Default::default()
    };
    quartermaster::controller::lifecycle::set_condition(
        &mut status,
        conditions::LAUNCHED,
        true,
        "Launched",
        "",
        t(3),
    );
    launched.status = Some(status);
    s.apply(launched.clone());
    let api = Scenario::new().run();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, t(30)).await;
    assert_eq!(step, Step::Waiting("registration"));

    // In the world, the claim is capacity in flight: the pod launches
    // nothing more.
    let parts = world_parts(&snapshot(&s), &catalog, REGION, t(31), DEFAULT_MAX_PODS);
    assert!(parts.nodes[0].state.in_flight);
    for k in 31..40 {
        assert!(launches(&core.decide(&parts.world(&catalog, REGION), t(k))).is_empty());
    }
}

/// The claim as it was once launched, before its node registered.
fn unregister(claim: &mut NodeClaim) {
    let status = claim.status.as_mut().unwrap();
    status.node_name = None;
    status
        .conditions
        .retain(|c| c.type_ == conditions::LAUNCHED);
}

/// Launches an on-demand p5.48xlarge claim `name` in `cloud` (into its
/// pool's placement group when `one_block`), registers its node `node`
/// through the lifecycle, and returns the labels registration wrote on the
/// node, with the network nodes the cloud reports for the instance.
async fn register_p5(
    cloud: &Mutex<SimulatedCloud>,
    name: &str,
    node_name: &str,
    one_block: bool,
) -> (serde_json::Map<String, Value>, Vec<String>) {
    let mut req = spot_request(name);
    req.offering.instance_type = "p5.48xlarge".into();
    req.offering.capacity_type = quartermaster::catalog::CapacityType::OnDemand;
    req.offering.zone = catalog()
        .offerings_of(REGION, "p5.48xlarge")
        .find(|o| o.capacity_type == quartermaster::catalog::CapacityType::OnDemand)
        .unwrap()
        .zone_id
        .clone();
    req.cluster_placement = one_block;
    let mut claim = claim_for(&req, t(0));
    if one_block {
        claim
            .spec
            .labels
            .insert(l::CLUSTER_PLACEMENT.into(), "true".into());
    }
    let (mut claim, provider_id) = ready(cloud, &req, claim, node_name).await;
    unregister(&mut claim);
    let network = cloud.lock().unwrap().network_nodes(&provider_id);
    let booting = node(
        node_name,
        &provider_id,
        json!([{"key": l::TAINT_UNREGISTERED, "effect": "NoSchedule"}]),
        false,
        None,
    );
    let s = store(vec![], vec![booting], vec![claim.clone()]);
    let metrics = Metrics::unregistered();
    let node_reply =
        serde_json::to_value(node(node_name, &provider_id, json!([]), false, None)).unwrap();
    let written: Arc<Mutex<serde_json::Map<String, Value>>> = Arc::default();
    let keep = written.clone();
    let api = Scenario::new()
        .expect(
            Method::PATCH,
            &format!("/api/v1/nodes/{node_name}"),
            move |body| {
                let labels = patched(body, "/metadata/labels");
                *keep.lock().unwrap() = labels.as_object().cloned().unwrap_or_default();
            },
        )
        .respond(200, node_reply)
        .expect(Method::PATCH, &format!("{CLAIMS}/{name}/status"), |_| {})
        .respond(200, claim_json(&claim))
        .run();
    let step = reconcile_scripted(api, &s, cloud, &metrics, name, t(60)).await;
    assert_eq!(
        step,
        Step::Registered {
            node: node_name.into()
        }
    );
    let labels = written.lock().unwrap().clone();
    (labels, network)
}

#[tokio::test]
async fn a_training_node_is_labelled_with_its_place_in_the_ec2_network() {
    let cloud = cloud();
    let (labels, want) = register_p5(&cloud, "train-000001", "ip-10-0-0-9", false).await;
    assert_eq!(want.len(), 3, "EC2 reports three layers for a p5.48xlarge");
    for (i, nn) in want.iter().enumerate() {
        let key = format!("topology.k8s.aws/network-node-layer-{}", i + 1);
        assert_eq!(labels[&key], json!(nn), "{key}");
    }
    assert!(labels
        .get("topology.k8s.aws/network-node-layer-4")
        .is_none());
}

#[tokio::test]
async fn nodes_of_a_one_block_gang_register_under_one_network_node_where_lone_ones_scatter() {
    // What Kueue's second pass reads: the bottom layer of each new node.
    let layer3 = "topology.k8s.aws/network-node-layer-3";
    let blocks = |one_block: bool| async move {
        let cloud = cloud();
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..4 {
            let (labels, _) = register_p5(
                &cloud,
                &format!("train-{i:06}"),
                &format!("ip-10-0-0-{}", i + 10),
                one_block,
            )
            .await;
            seen.insert(labels[layer3].as_str().unwrap().to_string());
        }
        seen
    };
    assert_eq!(
        blocks(true).await.len(),
        1,
        "one placement group, one block"
    );
    assert!(blocks(false).await.len() > 1, "lone launches scatter");
}

#[tokio::test]
async fn a_registered_node_gets_labels_and_taints_and_is_initialized_only_once_its_gpu_appears() {
    let cloud = cloud();
    let (ready, provider_id) = ready_claim(&cloud, "ip-10-0-0-1").await;
    let name = ready.name_any();
    // The same claim, launched but not registered yet.
    let mut claim = ready.clone();
    unregister(&mut claim);
    let booting = node(
        "ip-10-0-0-1",
        &provider_id,
        json!([{"key": l::TAINT_GPU, "effect": "NoSchedule"},
               {"key": l::TAINT_UNREGISTERED, "effect": "NoSchedule"}]),
        false,
        None,
    );
    let s = store(vec![], vec![booting], vec![claim.clone()]);
    let metrics = Metrics::unregistered();
    let want_labels = claim.spec.labels.clone();
    let node_reply =
        serde_json::to_value(node("ip-10-0-0-1", &provider_id, json!([]), false, None)).unwrap();
    let api = Scenario::new()
        .expect(Method::PATCH, "/api/v1/nodes/ip-10-0-0-1", move |body| {
            for (k, v) in &want_labels {
                assert_eq!(patched(body, "/metadata/labels")[k], json!(v), "label {k}");
            }
            assert_eq!(
                patched(body, "/spec/taints"),
                &json!([{"key": l::TAINT_GPU, "effect": "NoSchedule"}]),
                "the startup taint is lifted, the GPU taint stays"
            );
        })
        .respond(200, node_reply)
        .expect(Method::PATCH, &format!("{CLAIMS}/{name}/status"), |body| {
            assert_eq!(body["status"]["nodeName"], "ip-10-0-0-1");
            let conds = body["status"]["conditions"].as_array().unwrap();
            assert!(conds
                .iter()
                .any(|c| c["type"] == conditions::REGISTERED && c["status"] == "True"));
            assert!(!conds.iter().any(|c| c["type"] == conditions::INITIALIZED));
        })
        .respond(200, claim_json(&claim))
        .run();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, t(60)).await;
    assert_eq!(
        step,
        Step::Registered {
            node: "ip-10-0-0-1".into()
        }
    );

    // Registered; the node is Ready and untainted but its GPU is not
    // advertised yet: no Initialized, no request.
    let mut registered = claim.clone();
    let st = registered.status.as_mut().unwrap();
    st.node_name = Some("ip-10-0-0-1".into());
    quartermaster::controller::lifecycle::set_condition(
        st,
        conditions::REGISTERED,
        true,
        "Registered",
        "",
        t(60),
    );
    s.apply(registered.clone());
    let gpu_taint = json!([{"key": l::TAINT_GPU, "effect": "NoSchedule"}]);
    s.apply(node(
        "ip-10-0-0-1",
        &provider_id,
        gpu_taint.clone(),
        true,
        None,
    ));
    let api = Scenario::new().run();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, t(90)).await;
    assert_eq!(step, Step::Waiting("initialization"));
    // A zero count is not advertised either.
    s.apply(node(
        "ip-10-0-0-1",
        &provider_id,
        gpu_taint.clone(),
        true,
        Some("0"),
    ));
    let api = Scenario::new().run();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, t(95)).await;
    assert_eq!(step, Step::Waiting("initialization"));

    // The device plugin publishes the GPU: Initialized and Ready.
    s.apply(node(
        "ip-10-0-0-1",
        &provider_id,
        gpu_taint,
        true,
        Some("1"),
    ));
    let api = Scenario::new()
        .expect(Method::PATCH, &format!("{CLAIMS}/{name}/status"), |body| {
            let conds = body["status"]["conditions"].as_array().unwrap();
            for c in [conditions::INITIALIZED, conditions::READY] {
                assert!(
                    conds
                        .iter()
                        .any(|x| x["type"] == c && x["status"] == "True"),
                    "{c}"
                );
            }
            assert_eq!(body["status"]["allocatable"][l::RESOURCE_GPU], "1");
        })
        .respond(200, claim_json(&registered))
        .run();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, t(120)).await;
    assert_eq!(
        step,
        Step::Initialized {
            node: "ip-10-0-0-1".into()
        }
    );
}
