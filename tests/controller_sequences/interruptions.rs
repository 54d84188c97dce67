//! Spot notices: a checkpoint request, evictions after the
//! acknowledgement, then deletion; every member of a gang asked by one
//! deadline and drained together; a drain left by a restart taken up
//! again; the executor's counts of created and disrupted claims.

use super::*;

/// `actions` cordon `claim` and ask `ml/train-0` to checkpoint, evicting
/// nothing before its acknowledgement.
fn expect_drain_starts_with_a_checkpoint_request(actions: &[Action], claim: &str) {
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Cordon { claim: c, .. } if c == claim)),
        "{actions:?}"
    );
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::RequestCheckpoint { pod, .. } if pod == "ml/train-0")),
        "{actions:?}"
    );
    assert!(
        !actions.iter().any(|a| matches!(a, Action::Evict { .. })),
        "no eviction before the ack: {actions:?}"
    );
}

#[tokio::test]
async fn an_interruption_leads_to_a_checkpoint_request_then_evictions_after_the_ack_then_deletion()
{
    let cloud = cloud();
    let (claim, provider_id) = ready_claim(&cloud, "ip-10-0-0-1").await;
    let name = claim.name_any();
    let gpu_taint = json!([{"key": l::TAINT_GPU, "effect": "NoSchedule"}]);
    let opted_in = json!({l::CHECKPOINT_ENABLED: "true"});
    let s = store(
        vec![gpu_pod("train-0", Some("ip-10-0-0-1"), opted_in.clone())],
        vec![node(
            "ip-10-0-0-1",
            &provider_id,
            gpu_taint.clone(),
            true,
            Some("1"),
        )],
        vec![claim.clone()],
    );
    let catalog = catalog();
    let mut core = Core::new(Config::default());
    let notice_at = t(1000);
    let deadline = notice_at + chrono::TimeDelta::seconds(120);
    spot_notice(&mut core, &s, &catalog, &name, notice_at);
    let first = decide_at(&mut core, &s, &catalog, notice_at);
    expect_drain_starts_with_a_checkpoint_request(&first, &name);
    execute_scripted(&s, &first, "ip-10-0-0-1", notice_at).await;

    // The cordon and the request are in the cluster now.
    s.apply(cordoned("ip-10-0-0-1", &provider_id));
    s.apply(checkpointing_pod(l::CHECKPOINT_REQUESTED, deadline));
    // While the workload has not answered, the pod stays.
    for k in 1..5 {
        let now = notice_at + chrono::TimeDelta::seconds(k);
        let acts = decide_at(&mut core, &s, &catalog, now);
        assert!(
            !acts
                .iter()
                .any(|a| matches!(a, Action::Evict { .. } | Action::Delete { .. })),
            "{acts:?}"
        );
        execute_scripted(&s, &acts, "ip-10-0-0-1", now).await;
    }

    // The workload acknowledges: the pod is evicted.
    let ack_at = notice_at + chrono::TimeDelta::seconds(10);
    let now = ack_at + chrono::TimeDelta::seconds(1);
    let acts = acknowledged(&mut core, &s, &catalog, ack_at, now);
    assert!(
        !acts.iter().any(|a| matches!(a, Action::Delete { .. })),
        "not before the pod left: {acts:?}"
    );
    execute_scripted(&s, &acts, "ip-10-0-0-1", now).await;

    // The pod is gone: the claim is deleted.
    s.delete(&gpu_pod("train-0", Some("ip-10-0-0-1"), json!({})));
    let mut deleted = false;
    for k in 2..30 {
        let now = ack_at + chrono::TimeDelta::seconds(k);
        let acts = step_without_evictions(&mut core, &s, &catalog, now).await;
        if acts
            .iter()
            .any(|a| matches!(a, Action::Delete { claim, .. } if *claim == name))
        {
            deleted = true;
            break;
        }
    }
    assert!(deleted, "the claim is deleted once its pod left");

    // The finalizer path: the node is cordoned already and empty, so the
    // instance is terminated, the node deleted, the finalizer removed.
    let mut deleting = claim.clone();
    deleting.metadata.deletion_timestamp =
        Some(quartermaster::controller::snapshot::to_k8s_time(now));
    s.apply(deleting.clone());
    let reply = claim_json(&deleting);
    let api = Scenario::new()
        .expect(Method::DELETE, "/api/v1/nodes/ip-10-0-0-1", |_| {})
        .respond(200, status_body(200, "", "deleted"))
        .expect(Method::PATCH, &format!("{CLAIMS}/{name}"), |body| {
            assert_eq!(body[1]["op"], "replace");
            assert_eq!(body[1]["path"], "/metadata/finalizers");
            assert_eq!(body[1]["value"], json!([]));
        })
        .content_type("application/json-patch+json")
        .respond(200, reply)
        .run();
    let metrics = Metrics::unregistered();
    let step = reconcile_scripted(api, &s, &cloud, &metrics, &name, now).await;
    assert_eq!(step, Step::Finalized);
    let instance = cloud.describe(&name).await.unwrap().unwrap();
    assert_eq!(instance.state, InstanceState::ShuttingDown);
    let terminated = TerminatedLabels {
        nodepool: "gpu".into(),
        capacity_type: "spot".into(),
        zone: claim.spec.labels[l::ZONE].clone(),
    };
    assert_eq!(
        metrics
            .karpenter
            .nodeclaims_terminated
            .get_or_create(&terminated)
            .get(),
        1,
        "counted once finalized"
    );
}

#[tokio::test]
async fn the_executor_counts_created_claims_by_reason_and_deleted_ones_as_disrupted() {
    use quartermaster::core::{DisruptionDecision, DisruptionReason};
    use quartermaster::metrics::karpenter::{CreatedLabels, DisruptedLabels};
    let cloud = cloud();
    let (claim, provider_id) = ready_claim(&cloud, "ip-10-0-0-1").await;
    let name = claim.name_any();
    let s = store(
        vec![],
        vec![node(
            "ip-10-0-0-1",
            &provider_id,
            json!([]),
            true,
            Some("1"),
        )],
        vec![claim],
    );
    // The core replaces the drifted node: a launch, and later the delete.
    let replacement = spot_request("gpu-000002");
    let actions = [
        Action::Launch(replacement.clone()),
        Action::Launch(spot_request("gpu-000003")),
        Action::Delete {
            claim: name.clone(),
            reason: DisruptionReason::Drifted,
        },
    ];
    let drift = [DisruptionDecision {
        reason: DisruptionReason::Drifted,
        claims: vec![name.clone()],
        replacements: vec![replacement.claim.clone()],
    }];
    let (client, verifier) = script_for(&actions, "ip-10-0-0-1").run();
    let (_, metrics) = execute_as(
        &KubeApi::new(client),
        &actions,
        &snapshot(&s),
        t(10),
        true,
        &drift,
    )
    .await;
    verifier.finish().await;
    let k = &metrics.karpenter;
    let created = |reason: &str| {
        k.nodeclaims_created
            .get_or_create(&CreatedLabels {
                reason: reason.into(),
                nodepool: "gpu".into(),
                capacity_type: "spot".into(),
            })
            .get()
    };
    assert_eq!(created("drifted"), 1, "the replacement");
    assert_eq!(created("provisioned"), 1, "the other launch");
    let disrupted = k
        .nodeclaims_disrupted
        .get_or_create(&DisruptedLabels {
            reason: "drifted".into(),
            nodepool: "gpu".into(),
            capacity_type: "spot".into(),
        })
        .get();
    assert_eq!(disrupted, 1);
}

#[tokio::test]
async fn a_node_left_with_our_cordon_by_a_restart_is_drained_again_checkpoint_first() {
    let cloud = cloud();
    let (claim, provider_id) = ready_claim(&cloud, "ip-10-0-0-1").await;
    let name = claim.name_any();
    let opted_in = json!({l::CHECKPOINT_ENABLED: "true"});
    let s = store(
        vec![gpu_pod("train-0", Some("ip-10-0-0-1"), opted_in)],
        vec![cordoned("ip-10-0-0-1", &provider_id)],
        vec![claim.clone()],
    );
    let catalog = catalog();
    // A new controller: the drain that cordoned the node was lost with the
    // old one.
    let mut core = Core::new(Config::default());
    let now = t(1000);
    let first = decide_at(&mut core, &s, &catalog, now);
    expect_drain_starts_with_a_checkpoint_request(&first, &name);
    // The node is cordoned already: only the checkpoint request is written.
    let writes: Vec<Action> = first
        .iter()
        .filter(|a| !matches!(a, Action::Cordon { .. }))
        .cloned()
        .collect();
    let (client, verifier) = script_for(&writes, "ip-10-0-0-1").run();
    execute(&KubeApi::new(client), &first, &snapshot(&s), now).await;
    verifier.finish().await;
    s.apply(checkpointing_pod(l::CHECKPOINT_REQUESTED, now));
    step_without_evictions(&mut core, &s, &catalog, now + chrono::TimeDelta::seconds(1)).await;
    let ack_at = now + chrono::TimeDelta::seconds(10);
    let acts = acknowledged(&mut core, &s, &catalog, ack_at, ack_at);
    execute_scripted(&s, &acts, "ip-10-0-0-1", ack_at).await;

    // A node cordoned by someone else (no disrupted taint) is theirs.
    let mut theirs = node(
        "ip-10-0-0-1",
        &provider_id,
        json!([{"key": l::TAINT_GPU, "effect": "NoSchedule"}]),
        true,
        Some("1"),
    );
    theirs.spec.as_mut().unwrap().unschedulable = Some(true);
    s.apply(theirs);
    let mut core = Core::new(Config::default());
    for k in [0, 60, 3600] {
        let now = ack_at + chrono::TimeDelta::seconds(k);
        let acts = decide_at(&mut core, &s, &catalog, now);
        assert!(
            !acts.iter().any(|a| matches!(
                a,
                Action::Cordon { .. }
                    | Action::RequestCheckpoint { .. }
                    | Action::Evict { .. }
                    | Action::Delete { .. }
            )),
            "{acts:?}"
        );
    }
}

/// The requests and evictions among `actions`, as `(kind, pod)` pairs.
fn pod_actions(actions: &[Action]) -> Vec<(&'static str, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::RequestCheckpoint { pod, .. } => Some(("checkpoint", pod.clone())),
            Action::Evict { pod, .. } => Some(("evict", pod.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_notice_on_one_gang_member_asks_every_member_to_checkpoint_by_one_deadline_and_drains_them_together(
) {
    let cloud = cloud();
    let (a, pid_a) = ready_claim_named(&cloud, "gpu-a", "ip-10-0-0-1").await;
    let (b, pid_b) = ready_claim_named(&cloud, "gpu-b", "ip-10-0-0-2").await;
    let gpu_taint = json!([{"key": l::TAINT_GPU, "effect": "NoSchedule"}]);
    let member = |extra: Value| {
        let mut m =
            json!({l::CHECKPOINT_ENABLED: "true", l::POD_GROUP: "train", l::POD_GROUP_SIZE: "2"});
        m.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        m
    };
    let s = store(
        vec![
            gpu_pod("train-0", Some("ip-10-0-0-1"), member(json!({}))),
            gpu_pod("train-1", Some("ip-10-0-0-2"), member(json!({}))),
        ],
        vec![
            node("ip-10-0-0-1", &pid_a, gpu_taint.clone(), true, Some("1")),
            node("ip-10-0-0-2", &pid_b, gpu_taint.clone(), true, Some("1")),
        ],
        vec![a, b],
    );
    let catalog = catalog();
    let mut core = Core::new(Config::default());
    let notice_at = t(1000);
    spot_notice(&mut core, &s, &catalog, "gpu-a", notice_at);
    let first = decide_at(&mut core, &s, &catalog, notice_at);
    let deadlines: Vec<(String, Time)> = first
        .iter()
        .filter_map(|a| match a {
            Action::RequestCheckpoint { pod, deadline, .. } => Some((pod.clone(), *deadline)),
            _ => None,
        })
        .collect();
    let same = notice_at + chrono::TimeDelta::seconds(90);
    assert_eq!(
        deadlines,
        [
            ("ml/train-0".to_string(), same),
            ("ml/train-1".to_string(), same)
        ],
        "{first:?}"
    );
    assert!(
        !first.iter().any(|a| matches!(a, Action::Evict { .. })),
        "{first:?}"
    );
    // Both annotations are written, each on its own pod, with one deadline
    // (the cordon is only the doomed node's).
    execute_scripted(&s, &first, "ip-10-0-0-1", notice_at).await;

    // The doomed member acknowledges: nobody leaves while the other writes.
    let acked = |at: Time| {
        member(json!({l::CHECKPOINT_COMPLETED: quartermaster::controller::checkpoint::rfc3339(at)}))
    };
    s.apply(gpu_pod("train-0", Some("ip-10-0-0-1"), acked(t(1010))));
    let now = t(1011);
    let acts = decide_at(&mut core, &s, &catalog, now);
    assert_eq!(pod_actions(&acts), [], "{acts:?}");

    // The other acknowledges: the gang is evicted whole, through the API.
    s.apply(gpu_pod("train-1", Some("ip-10-0-0-2"), acked(t(1020))));
    let now = t(1021);
    let acts = decide_at(&mut core, &s, &catalog, now);
    assert_eq!(
        pod_actions(&acts),
        [
            ("evict", "ml/train-0".to_string()),
            ("evict", "ml/train-1".to_string())
        ],
        "{acts:?}"
    );
    let evictions: Vec<Action> = acts
        .into_iter()
        .filter(|a| matches!(a, Action::Evict { .. }))
        .collect();
    execute_scripted(&s, &evictions, "ip-10-0-0-1", now).await;

    // The gang runs again under the same names on two new nodes (as a
    // PyTorchJob recreates its workers), started after the eviction; the
    // old pods and nodes are gone. Its next notice asks both again.
    // (A cloud of its own: this one's third spot launch is refused.)
    let later = self::cloud();
    let (c, pid_c) = ready_claim_named(&later, "gpu-c", "ip-10-0-0-3").await;
    let (d, pid_d) = ready_claim_named(&later, "gpu-d", "ip-10-0-0-4").await;
    let rerun = |name: &str, node: &str| {
        let mut p = gpu_pod(name, Some(node), member(json!({})));
        p.status.as_mut().unwrap().start_time =
            Some(quartermaster::controller::snapshot::to_k8s_time(t(1300)));
        p
    };
    s.reset(vec![
        rerun("train-0", "ip-10-0-0-3"),
        rerun("train-1", "ip-10-0-0-4"),
    ]);
    s.reset(vec![
        node("ip-10-0-0-3", &pid_c, gpu_taint.clone(), true, Some("1")),
        node("ip-10-0-0-4", &pid_d, gpu_taint, true, Some("1")),
    ]);
    s.reset(vec![c, d]);
    let quiet = decide_at(&mut core, &s, &catalog, t(1400));
    assert_eq!(pod_actions(&quiet), [], "{quiet:?}");
    let notice_at = t(2000);
    spot_notice(&mut core, &s, &catalog, "gpu-c", notice_at);
    let again = decide_at(&mut core, &s, &catalog, notice_at);
    assert_eq!(
        pod_actions(&again),
        [
            ("checkpoint", "ml/train-0".to_string()),
            ("checkpoint", "ml/train-1".to_string())
        ],
        "{again:?}"
    );
}
