//! Leader election: only the leader writes, and a follower leaves spot
//! notices on the queue.

use super::*;

#[tokio::test]
async fn a_replica_that_lost_the_lease_writes_nothing_and_counts_what_it_dropped() {
    let s = store(vec![gpu_pod("train-0", None, json!({}))], vec![], vec![]);
    let mut core = Core::new(Config::default());
    let parts = world_parts(&snapshot(&s), &catalog(), REGION, t(0), DEFAULT_MAX_PODS);
    let catalog = catalog();
    let mut actions = Vec::new();
    for k in 0..12 {
        actions.extend(core.decide(&parts.world(&catalog, REGION), t(k)));
    }
    assert!(!launches(&actions).is_empty(), "the core decides a launch");
    // No request is scripted: any write fails the verifier.
    let (client, verifier) = Scenario::new().run();
    let api = KubeApi::new(client);
    let (outcomes, metrics) = execute_as(&api, &actions, &snapshot(&s), t(12), false, &[]).await;
    verifier.finish().await;
    assert!(
        outcomes.iter().all(|o| *o == Outcome::NotLeader),
        "{outcomes:?}"
    );
    assert_eq!(metrics.actions_dropped.get(), actions.len() as u64);
}

#[tokio::test]
async fn only_the_leader_writes_and_a_follower_leaves_spot_notices_on_the_queue() {
    use quartermaster::cloud::{InstanceNotice, NoticeKind};
    use quartermaster::controller::run::{Context, Driver};
    use quartermaster::metrics::InterruptionLabels;
    use std::sync::atomic::AtomicBool;
    use tokio::sync::mpsc;

    let s = Arc::new(store(
        vec![gpu_pod("train-0", None, json!({}))],
        vec![],
        vec![],
    ));
    // While leader, each round keeps the pool's status current (the watch
    // would bring the patched status back; here the store keeps the old
    // one, so every round patches), and the batch closing at t(6) creates
    // the one claim. A follower writing anything would break the order.
    let pool_status = |body: &Value| {
        let conds = body["status"]["conditions"].as_array().unwrap();
        assert!(conds
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True"));
    };
    let pool_reply = serde_json::to_value(pool()).unwrap();
    let status_path = "/apis/quartermaster.dev/v1alpha1/nodepools/gpu/status";
    let (client, verifier) = Scenario::new()
        .expect(Method::PATCH, status_path, pool_status)
        .respond(200, pool_reply.clone())
        .expect(Method::POST, CLAIMS, |body| {
            assert_eq!(body["spec"]["nodePool"], "gpu");
        })
        .respond_with(echo)
        .expect(Method::PATCH, status_path, pool_status)
        .respond(200, pool_reply.clone())
        .expect(Method::PATCH, status_path, pool_status)
        .respond(200, pool_reply)
        .run();
    let (leader_tx, leader) = watch::channel(false);
    let (_catalog_tx, catalog_rx) = watch::channel(catalog());
    let (notices_tx, notices) = mpsc::channel(8);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let acks = quartermaster::cloud::NoticeAcks::default();
    let ctx = Context {
        api: KubeApi::new(client),
        cloud: Arc::new(cloud()),
        metrics: metrics.clone(),
        catalog: catalog_rx,
        leader,
        ready: Arc::new(AtomicBool::new(true)),
        notices,
        notice_acks: acks.clone(),
        simulated_nodes: false,
    };
    let settings = loop_settings(Config::default());
    let mut driver = Driver::new(ctx, settings, s.clone(), t(0));
    for k in 0..5 {
        driver.round(t(k)).await;
    }
    assert_eq!(metrics.pending_pods.get(), 1);
    leader_tx.send(true).unwrap();
    for k in 5..8 {
        driver.round(t(k)).await;
    }
    verifier.finish().await;
    let cost = metrics
        .cost_per_hour
        .get_or_create(&quartermaster::metrics::PoolLabels {
            nodepool: "gpu".into(),
        })
        .get();
    assert!(
        cost > 0.0,
        "the created claim counts in the pool's cost: {cost}"
    );
    // Karpenter's series: the claim was created for pending pods, and the
    // pool's usage is there (nothing launched yet).
    let text = quartermaster::metrics::encode(&registry);
    let created = text
        .lines()
        .filter(|l| {
            l.starts_with(
                r#"quartermaster_nodeclaims_created_total{reason="provisioned",nodepool="gpu","#,
            )
        })
        .collect::<Vec<_>>();
    assert_eq!(created.len(), 1, "{text}");
    assert!(created[0].ends_with(" 1"), "{text}");
    assert!(
        text.lines()
            .any(|l| l
                == r#"quartermaster_nodepools_usage{nodepool="gpu",resource_type="nodes"} 0.0"#),
        "{text}"
    );

    // Lease lost; a spot notice about the claim's instance cannot be
    // recorded by a follower: it is neither acted on nor let go, so that
    // the leader gets it again.
    leader_tx.send(false).unwrap();
    let mut claim = claim_for(
        &ClaimRequest {
            cluster_placement: false,
            claim: "gpu-000009".into(),
            nodepool: "gpu".into(),
            offering: quartermaster::core::OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone: catalog()
                    .offerings_of(REGION, "g5.xlarge")
                    .next()
                    .unwrap()
                    .zone_id
                    .clone(),
                capacity_type: catalog()
                    .offerings_of(REGION, "g5.xlarge")
                    .next()
                    .unwrap()
                    .capacity_type,
            },
            price_per_hour: 0.5,
            pods: vec![],
            prewarm_window: None,
            reservation: None,
        },
        t(0),
    );
    claim.status = Some(quartermaster::api::NodeClaimStatus {
        provider_id: Some("aws:///use1-az1/i-0feed".into()),
        ..Default::default()
    });
    s.apply(claim);
    let notice = InstanceNotice {
        instance_id: "i-0feed".into(),
        kind: NoticeKind::SpotInterruption { deadline: t(140) },
        time: t(20),
        id: "event-1".into(),
    };
    notices_tx.send(notice.clone()).await.unwrap();
    notices_tx.send(notice).await.unwrap();
    driver.round(t(20)).await;
    let counted = metrics
        .interruptions
        .get_or_create(&InterruptionLabels {
            nodepool: "gpu".into(),
            kind: "spot-interruption".into(),
        })
        .get();
    assert_eq!(counted, 0);
    let outcomes: Vec<_> = acks.take().into_iter().map(|a| a.outcome).collect();
    assert_eq!(
        outcomes,
        [
            quartermaster::cloud::NoticeOutcome::Retry,
            quartermaster::cloud::NoticeOutcome::Retry
        ]
    );
}
