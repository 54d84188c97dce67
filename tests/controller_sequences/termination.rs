//! A deleted claim drained within PDBs and grace periods, finalized and
//! garbage-collected; launches that fail (out of capacity, a forbidden
//! label) or are cut by a restart, without doubling or leaking instances.

use super::*;

#[tokio::test]
async fn deleting_a_claim_drains_within_pdbs_and_waits_for_pods_to_go_before_terminating() {
    let cloud = cloud();
    let (claim, provider_id) = ready_claim(&cloud, "ip-10-0-0-1").await;
    let name = claim.name_any();
    let mut deleting = claim.clone();
    deleting.metadata.deletion_timestamp =
        Some(quartermaster::controller::snapshot::to_k8s_time(t(100)));
    let s = store(
        vec![
            gpu_pod("a", Some("ip-10-0-0-1"), json!({})),
            gpu_pod("b", Some("ip-10-0-0-1"), json!({})),
        ],
        vec![node(
            "ip-10-0-0-1",
            &provider_id,
            json!([]),
            true,
            Some("1"),
        )],
        vec![deleting],
    );
    let metrics = Metrics::unregistered();
    let api = Scenario::new()
        .expect(Method::PATCH, "/api/v1/nodes/ip-10-0-0-1", |body| {
            assert_eq!(patched(body, "/spec/unschedulable"), true);
            assert_eq!(patched(body, "/spec/taints")[0]["key"], l::TAINT_DISRUPTED);
        })
        .respond(
            200,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-10-0-0-1"}}),
        )
        .expect(
            Method::POST,
            "/api/v1/namespaces/ml/pods/a/eviction",
            |_| {},
        )
        .respond(201, status_body(201, "", "evicted"))
        .expect(
            Method::POST,
            "/api/v1/namespaces/ml/pods/b/eviction",
            |_| {},
        )
        .respond(
            429,
            status_body(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            ),
        )
        .run();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, t(100)).await;
    assert_eq!(
        step,
        Step::Draining {
            failed: 0,
            evicted: 1,
            blocked: 1,
            remaining: 2,
            until: None
        }
    );
    assert!(
        cloud
            .describe(&name)
            .await
            .unwrap()
            .unwrap()
            .state
            .is_alive(),
        "not terminated while draining"
    );

    // `a` is terminating (its grace period runs): it is waited for, not
    // evicted again; `b` is retried.
    let node_now = node(
        "ip-10-0-0-1",
        &provider_id,
        json!([{"key": l::TAINT_DISRUPTED, "effect": "NoSchedule"}]),
        true,
        Some("1"),
    );
    let mut node_now = node_now;
    node_now.spec.as_mut().unwrap().unschedulable = Some(true);
    s.apply(node_now);
    let mut a = gpu_pod("a", Some("ip-10-0-0-1"), json!({}));
    a.metadata.deletion_timestamp = Some(quartermaster::controller::snapshot::to_k8s_time(t(101)));
    s.apply(a);
    let api = Scenario::new()
        .expect(
            Method::POST,
            "/api/v1/namespaces/ml/pods/b/eviction",
            |_| {},
        )
        .respond(201, status_body(201, "", "evicted"))
        .run();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, t(110)).await;
    assert_eq!(
        step,
        Step::Draining {
            failed: 0,
            evicted: 1,
            blocked: 0,
            remaining: 2,
            until: None
        }
    );

    // Both gone: terminate, delete the node, release the claim.
    s.delete(&gpu_pod("a", Some("ip-10-0-0-1"), json!({})));
    s.delete(&gpu_pod("b", Some("ip-10-0-0-1"), json!({})));
    finalized(&s, &cloud, &metrics, &claim, t(140)).await;
}

/// Reconciles the deleted `claim` at `at` and checks it is finalized: the
/// instance terminated, the node deleted (already gone here), the
/// finalizer removed.
async fn finalized(
    s: &Store,
    cloud: &Mutex<SimulatedCloud>,
    metrics: &Metrics,
    claim: &NodeClaim,
    at: Time,
) {
    let name = claim.name_any();
    let api = Scenario::new()
        .expect(Method::DELETE, "/api/v1/nodes/ip-10-0-0-1", |_| {})
        .respond(404, status_body(404, "NotFound", "gone"))
        .expect(Method::PATCH, &format!("{CLAIMS}/{name}"), |_| {})
        .respond(200, claim_json(claim))
        .run();
    let step = reconcile_scripted(api, s, cloud, metrics, &name, at).await;
    assert_eq!(step, Step::Finalized);
    assert!(!cloud
        .describe(&name)
        .await
        .unwrap()
        .unwrap()
        .state
        .is_alive());
}

#[tokio::test]
async fn a_restart_in_the_middle_of_a_launch_neither_doubles_nor_leaks_the_instance() {
    let cloud = cloud();
    let zone = catalog()
        .offerings_of(REGION, "g5.xlarge")
        .find(|o| o.capacity_type == quartermaster::catalog::CapacityType::OnDemand)
        .unwrap()
        .zone_id
        .clone();
    let req = ClaimRequest {
        cluster_placement: false,
        claim: "gpu-000001-abc".into(),
        nodepool: "gpu".into(),
        offering: quartermaster::core::OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone,
            capacity_type: quartermaster::catalog::CapacityType::OnDemand,
        },
        price_per_hour: 1.0,
        pods: vec![],
        prewarm_window: None,
        reservation: None,
    };
    let claim = claim_for(&req, t(0));
    // The previous process created the claim and launched the instance, then
    // died before recording the provider ID.
    let first = cloud
        .launch(&request_of(&claim), &NodeTemplate::from(&claim.spec), t(1))
        .await
        .unwrap();
    let s = store(vec![], vec![], vec![claim.clone()]);
    let want = first.provider_id.clone();
    let (client, verifier) = Scenario::new()
        .expect(
            Method::PATCH,
            &format!("{CLAIMS}/gpu-000001-abc/status"),
            move |body| {
                assert_eq!(body["status"]["providerID"], json!(want));
            },
        )
        .respond(200, claim_json(&claim))
        .run();
    let api = KubeApi::new(client);
    let metrics = Metrics::unregistered();
    let view = s.read(|s| s.claim_view(&s.claims["gpu-000001-abc"]));
    let step = lifecycle(&api, &cloud, &metrics)
        .reconcile(&view, t(20))
        .await
        .unwrap();
    verifier.finish().await;
    let Step::Launched(again) = step else {
        panic!("{step:?}")
    };
    assert_eq!(
        again.provider_id, first.provider_id,
        "the same instance, not a second one"
    );
    assert_eq!(cloud.instances().await.unwrap().len(), 1);

    // Garbage collection spares it (it has a claim) and takes an instance
    // whose claim never made it, once past the grace period.
    let orphan = ClaimRequest {
        claim: "gpu-000002-abc".into(),
        ..req.clone()
    };
    cloud
        .launch(&orphan, &NodeTemplate::default(), t(2))
        .await
        .unwrap();
    let claims: quartermaster::cloud::ClaimIndex =
        s.read(|s| s.claims.keys().map(|c| (c.clone(), None)).collect());
    let grace = chrono::TimeDelta::minutes(5);
    let (done, failed) = collect_garbage(&cloud, &claims, t(60), grace)
        .await
        .unwrap();
    assert!(
        done.is_empty() && failed.is_empty(),
        "nothing within the grace period"
    );
    let (done, _) = collect_garbage(&cloud, &claims, t(3600), grace)
        .await
        .unwrap();
    let gone: Vec<&str> = done.iter().map(|i| i.claim.as_str()).collect();
    assert_eq!(gone, ["gpu-000002-abc"]);
    let alive: Vec<String> = cloud
        .instances()
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.state.is_alive())
        .map(|i| i.claim)
        .collect();
    assert_eq!(alive, ["gpu-000001-abc"]);
}

#[tokio::test]
async fn a_capacity_error_records_the_code_deletes_the_claim_and_tells_the_core() {
    let catalog = catalog();
    let zone = catalog
        .offerings_of(REGION, "g5.xlarge")
        .find(|o| o.capacity_type == quartermaster::catalog::CapacityType::Spot)
        .unwrap()
        .zone_id
        .clone();
    let req = ClaimRequest {
        cluster_placement: false,
        claim: "gpu-000003".into(),
        nodepool: "gpu".into(),
        offering: quartermaster::core::OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone,
            capacity_type: quartermaster::catalog::CapacityType::Spot,
        },
        price_per_hour: 0.5,
        pods: vec![],
        prewarm_window: None,
        reservation: None,
    };
    let mut config = SimulatedCloudConfig::new(7, REGION, t(0));
    config.capacity.exhausted.insert(req.offering.clone());
    let cloud = Mutex::new(SimulatedCloud::new(catalog.clone(), config).unwrap());
    let claim = claim_for(&req, t(0));
    let s = store(vec![], vec![], vec![claim.clone()]);
    let metrics = Metrics::unregistered();
    let step = reconcile_out_of_capacity(&s, &cloud, &metrics, "gpu-000003").await;
    assert_eq!(
        step,
        Step::LaunchFailed {
            reason: "InsufficientInstanceCapacity".into(),
            notice: Some(Notice::InsufficientCapacity {
                offering: req.offering.clone()
            }),
        }
    );
    assert_eq!(
        metrics
            .launch_failures
            .get_or_create(&LaunchFailureLabels {
                nodepool: "gpu".into(),
                reason: "InsufficientInstanceCapacity".into()
            })
            .get(),
        1
    );
    assert!(cloud.instances().await.unwrap().is_empty());
}

/// A NodeClaim someone else created, carrying a label its pool may not
/// set (or a value that would break out of a kubelet flag): refused
/// before anything is launched or copied onto a node.
#[tokio::test]
async fn a_claim_with_a_label_its_pool_may_not_set_is_refused_and_never_launched() {
    for (key, value) in [
        ("node-restriction.kubernetes.io/trusted", "true"),
        ("team", "ml --anonymous-auth=true"),
    ] {
        let cloud = cloud();
        let mut claim = claim_for(&spot_request("gpu-000001"), t(0));
        claim.spec.labels.insert(key.into(), value.into());
        let s = store(vec![], vec![], vec![claim.clone()]);
        let metrics = Metrics::unregistered();
        let key_owned = key.to_string();
        let api = Scenario::new()
            .expect(
                Method::PATCH,
                &format!("{CLAIMS}/gpu-000001/status"),
                move |b| {
                    let c = &b["status"]["conditions"][0];
                    assert_eq!(c["type"], conditions::LAUNCHED);
                    assert_eq!(c["status"], "False");
                    assert_eq!(c["reason"], "InvalidNodeClaim");
                    let message = c["message"].as_str().unwrap_or_default();
                    assert!(message.contains(&key_owned), "{message}");
                },
            )
            .respond(200, claim_json(&claim))
            .expect(Method::DELETE, &format!("{CLAIMS}/gpu-000001"), |_| {})
            .respond(200, claim_json(&claim))
            .run();
        let step = reconcile_scripted(api, &s, &cloud, &metrics, "gpu-000001", t(1)).await;
        assert_eq!(
            step,
            Step::LaunchFailed {
                reason: "InvalidNodeClaim".into(),
                notice: None
            }
        );
        assert!(cloud.instances().await.unwrap().is_empty(), "{key}");
        let refused = metrics
            .launch_failures
            .get_or_create(&LaunchFailureLabels {
                nodepool: "gpu".into(),
                reason: "InvalidNodeClaim".into(),
            })
            .get();
        assert_eq!(refused, 1);
    }
}

/// The claim of `ready_claim`, being deleted since `since`, with its node
/// cordoned already and these pods on it, in a store.
async fn draining(
    cloud: &Mutex<SimulatedCloud>,
    since: Time,
    grace: Option<&str>,
    pods: &[&str],
) -> (Store, NodeClaim) {
    let (mut claim, provider_id) = ready_claim(cloud, "ip-10-0-0-1").await;
    claim.metadata.deletion_timestamp =
        Some(quartermaster::controller::snapshot::to_k8s_time(since));
    claim.spec.termination_grace_period = grace.map(str::to_string);
    let mut cordoned = node(
        "ip-10-0-0-1",
        &provider_id,
        json!([{"key": l::TAINT_DISRUPTED, "effect": "NoSchedule"}]),
        true,
        Some("1"),
    );
    cordoned.spec.as_mut().unwrap().unschedulable = Some(true);
    let pods = pods
        .iter()
        .map(|p| gpu_pod(p, Some("ip-10-0-0-1"), json!({})))
        .collect();
    (store(pods, vec![cordoned], vec![claim.clone()]), claim)
}

/// Checks that a status patch sets `Drained=False` with this reason and a
/// message naming `pod`.
fn drained_false(reason: &'static str, pod: &'static str) -> impl FnOnce(&Value) + Send {
    move |body| {
        let conds = body["status"]["conditions"].as_array().unwrap();
        let c = conds
            .iter()
            .find(|c| c["type"] == conditions::DRAINED)
            .expect("a Drained condition");
        assert_eq!(c["status"], "False");
        assert_eq!(c["reason"], reason);
        assert!(c["message"].as_str().unwrap().contains(pod), "{c}");
    }
}

#[tokio::test]
async fn a_failed_eviction_is_recorded_on_the_claim_and_the_drain_goes_on_with_the_others() {
    let cloud = cloud();
    let (s, claim) = draining(&cloud, t(100), None, &["a", "b"]).await;
    let name = claim.name_any();
    let metrics = Metrics::unregistered();
    let api = Scenario::new()
        .expect(
            Method::POST,
            "/api/v1/namespaces/ml/pods/a/eviction",
            |_| {},
        )
        .respond(
            500,
            status_body(500, "InternalError", "admission webhook timed out"),
        )
        .expect(
            Method::POST,
            "/api/v1/namespaces/ml/pods/b/eviction",
            |_| {},
        )
        .respond(201, status_body(201, "", "evicted"))
        .expect(
            Method::PATCH,
            &format!("{CLAIMS}/{name}/status"),
            drained_false("EvictionFailed", "ml/a"),
        )
        .respond(200, claim_json(&claim))
        .run();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, t(110)).await;
    assert_eq!(
        step,
        Step::Draining {
            evicted: 1,
            blocked: 0,
            failed: 1,
            remaining: 2,
            until: None
        }
    );
}

#[tokio::test]
async fn pods_are_deleted_in_time_to_finish_their_grace_period_and_the_node_goes_at_the_deadline() {
    let cloud = cloud();
    let (s, claim) = draining(&cloud, t(100), Some("1h"), &["a"]).await;
    let name = claim.name_any();
    let metrics = Metrics::unregistered();
    let pdb_says_no = || {
        status_body(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
        )
    };
    // Within the grace period a PDB holds the drain.
    let api = Scenario::new()
        .expect(
            Method::POST,
            "/api/v1/namespaces/ml/pods/a/eviction",
            |_| {},
        )
        .respond(429, pdb_says_no())
        .run();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, t(100 + 3500)).await;
    assert!(
        matches!(step, Step::Draining { blocked: 1, .. }),
        "{step:?}"
    );
    // The pod's own grace period (30 s) before the claim's deadline, it is
    // deleted (not evicted: no PDB waits now) so that it ends by the
    // deadline; the instance stays until then.
    let api = Scenario::new()
        .expect(Method::DELETE, "/api/v1/namespaces/ml/pods/a", |_| {})
        .respond(
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}),
        )
        .expect(
            Method::PATCH,
            &format!("{CLAIMS}/{name}/status"),
            drained_false("GracePeriodElapsed", "ml/a"),
        )
        .respond(200, claim_json(&claim))
        .run();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, t(100 + 3570)).await;
    assert!(matches!(step, Step::Draining { .. }), "{step:?}");
    assert!(
        cloud
            .describe(&name)
            .await
            .unwrap()
            .unwrap()
            .state
            .is_alive(),
        "the instance runs until the deadline"
    );
    // At the deadline, the node goes whatever is left.
    let api = Scenario::new()
        .expect(Method::DELETE, "/api/v1/namespaces/ml/pods/a", |_| {})
        .respond(
            200,
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}}),
        )
        .expect(
            Method::PATCH,
            &format!("{CLAIMS}/{name}/status"),
            drained_false("GracePeriodElapsed", "ml/a"),
        )
        .respond(200, claim_json(&claim))
        .expect(Method::DELETE, "/api/v1/nodes/ip-10-0-0-1", |_| {})
        .respond(200, status_body(200, "", "deleted"))
        .expect(Method::PATCH, &format!("{CLAIMS}/{name}"), |_| {})
        .respond(200, claim_json(&claim))
        .run();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, t(100 + 3601)).await;
    assert_eq!(step, Step::Finalized);
    assert!(!cloud
        .describe(&name)
        .await
        .unwrap()
        .unwrap()
        .state
        .is_alive());
}

/// A node that stopped answering leaves its evicted pod Terminating for
/// ever: no kubelet confirms the deletion. Without a terminationGracePeriod
/// the drain waited for it for ever; now a pod a minute past the end of its
/// grace period on a node that is not Ready counts as gone (Karpenter's
/// rule), and the node is terminated.
#[tokio::test]
async fn a_pod_stuck_terminating_on_an_unreachable_node_no_longer_holds_the_drain() {
    let cloud = cloud();
    let (mut claim, provider_id) = ready_claim(&cloud, "ip-10-0-0-1").await;
    claim.metadata.deletion_timestamp =
        Some(quartermaster::controller::snapshot::to_k8s_time(t(100)));
    let name = claim.name_any();
    let cordoned_node = |ready: bool| {
        let taints = json!([{"key": l::TAINT_DISRUPTED, "effect": "NoSchedule"}]);
        let mut n = node("ip-10-0-0-1", &provider_id, taints, ready, Some("1"));
        n.spec.as_mut().unwrap().unschedulable = Some(true);
        n
    };
    // Evicted at 100 with 30 s to go: its grace period ends at 130.
    let mut stuck = gpu_pod("a", Some("ip-10-0-0-1"), json!({}));
    stuck.metadata.deletion_timestamp =
        Some(quartermaster::controller::snapshot::to_k8s_time(t(130)));
    stuck.metadata.deletion_grace_period_seconds = Some(30);
    let metrics = Metrics::unregistered();
    let waits = |ready: bool, at: i64| {
        let s = store(
            vec![stuck.clone()],
            vec![cordoned_node(ready)],
            vec![claim.clone()],
        );
        let (cloud, metrics, name) = (&cloud, &metrics, name.clone());
        async move {
            let step =
                reconcile_scripted(Scenario::new().run(), &s, cloud, metrics, &name, t(at)).await;
            assert!(
                matches!(step, Step::Draining { remaining: 1, .. }),
                "ready {ready} at {at}: {step:?}"
            );
        }
    };
    // Within a minute of its grace period's end, or on a node that is
    // Ready (its kubelet is on it), the pod is waited for.
    waits(false, 189).await;
    waits(true, 100_000).await;
    // A minute past it on a node that is not Ready: gone.
    let s = store(
        vec![stuck.clone()],
        vec![cordoned_node(false)],
        vec![claim.clone()],
    );
    finalized(&s, &cloud, &metrics, &claim, t(190)).await;
    // Nor does it hold the core's own drains: it is not on the node in the
    // world.
    let parts = world_parts(&snapshot(&s), &catalog(), REGION, t(190), DEFAULT_MAX_PODS);
    assert!(parts.nodes[0].pods.is_empty());
    let parts = world_parts(&snapshot(&s), &catalog(), REGION, t(189), DEFAULT_MAX_PODS);
    assert_eq!(parts.nodes[0].pods.len(), 1);
}

#[test]
fn a_pool_grace_period_is_copied_onto_its_claims() {
    let mut p = pool();
    p.spec.template.spec.termination_grace_period = Some("45m".into());
    let catalog = catalog();
    let pools = [p];
    let world = quartermaster::core::World {
        nodes_revision: 0,
        catalog: &catalog,
        region: REGION,
        pools: &pools,
        pending: &[],
        nodes: &[],
        pdbs: &[],
    };
    let offering = catalog.offerings_of(REGION, "g5.xlarge").next().unwrap();
    let req = ClaimRequest {
        cluster_placement: false,
        claim: "gpu-000001".into(),
        nodepool: "gpu".into(),
        offering: quartermaster::core::OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: offering.zone_id.clone(),
            capacity_type: offering.capacity_type,
        },
        price_per_hour: 0.5,
        pods: vec![],
        prewarm_window: None,
        reservation: None,
    };
    let c = executor::build_claim(&req, "gpu-000001", &world, &[], t(0)).unwrap();
    assert_eq!(c.spec.termination_grace_period.as_deref(), Some("45m"));
}

#[tokio::test]
async fn a_ready_claim_whose_instance_is_gone_is_deleted_by_garbage_collection() {
    let cloud = cloud();
    let (gone, _) = ready_claim(&cloud, "ip-10-0-0-1").await;
    let name = gone.name_any();
    cloud.terminate(&name, t(200)).await.unwrap();
    let s = store(vec![], vec![], vec![gone.clone()]);
    let metrics = Metrics::unregistered();
    let (client, verifier) = Scenario::new()
        .expect(Method::DELETE, &format!("{CLAIMS}/{name}"), |_| {})
        .respond(200, claim_json(&gone))
        .run();
    let api = KubeApi::new(client);
    let views: Vec<_> = s.read(|s| s.claims.values().map(|c| s.claim_view(c)).collect());
    let lc = lifecycle(&api, &cloud, &metrics);
    // Launched at t(60): within the grace nothing is asked of the cloud.
    let early = lc
        .collect_lost(&views, t(100), Duration::from_secs(300))
        .await
        .unwrap();
    assert!(early.is_empty());
    let lost = lc
        .collect_lost(&views, t(1000), Duration::from_secs(300))
        .await
        .unwrap();
    verifier.finish().await;
    assert_eq!(lost, [name]);
}
