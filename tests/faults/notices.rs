//! Notices on their own path: one is recorded and answered (cordon,
//! checkpoint request) while a launch hangs; notices about other fleets'
//! instances are let go at once; one about an instance launched a moment
//! ago is acted on before its claim's status names the instance.

use super::harness::{refresh, t, Cloud, Harness, CLAIMS, NODES, PODS};
use crate::support::fake_api::FakeApi;
use quartermaster::api::labels as l;
use quartermaster::api::nodeclaim::conditions;
use quartermaster::cloud::{Instance, InstanceNotice, InstanceState, NoticeKind, NoticeOutcome};
use quartermaster::controller::interruptions::{notice_views, Launches, NoticeHandler};
use quartermaster::controller::kube_api::KubeApi;
use quartermaster::controller::snapshot::Store;
use quartermaster::core::{Notice, OfferingKey};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

#[tokio::test]
async fn a_notice_is_recorded_and_answered_while_a_launch_hangs() {
    let api = FakeApi::new();
    let gate = Arc::new(Semaphore::new(1_000));
    let mut cloud = Cloud::new(&api);
    cloud.gate = Some(gate.clone());
    let cloud = Arc::new(cloud);
    let mut h = Harness::with_cloud(api, cloud.clone());
    let mut claim = None;
    for _ in 0..60 {
        h.step().await;
        if let Some((_, c)) = h.running().into_iter().find(|(p, _)| p == "train-0") {
            claim = Some(c);
            break;
        }
    }
    let claim = claim.expect("train-0 runs");
    // From now on every launch hangs (EC2 answers nothing).
    gate.forget_permits(1_000);
    h.settle = false;
    h.api
        .state
        .lock()
        .unwrap()
        .put(PODS, super::harness::pending_pod("other-0"));
    let launched_before = cloud.launched.lock().unwrap().len();
    // A few rounds: the other pod's claim is written and its launch hangs.
    for _ in 0..3 {
        tokio::time::timeout(Duration::from_secs(60), h.step())
            .await
            .expect("a round does not wait for a launch");
    }
    assert!(h.claims().len() >= 2, "the new claim is written");
    h.spot_notice(&claim);
    let mut answered = false;
    for _ in 0..3 {
        tokio::time::timeout(Duration::from_secs(60), h.step())
            .await
            .expect("a round does not wait for a launch");
        let node_name = h.claim(&claim).and_then(|c| c.status?.node_name);
        let s = h.api.state.lock().unwrap();
        let node = node_name.and_then(|n| s.get(NODES, &n));
        let cordoned = node.is_some_and(|n| n["spec"]["unschedulable"] == json!(true));
        let asked = s.get(PODS, "train-0").is_some_and(|p| {
            p["metadata"]["annotations"]
                .get(l::CHECKPOINT_REQUESTED)
                .is_some()
        });
        drop(s);
        let recorded = h
            .claim(&claim)
            .and_then(|c| c.status)
            .is_some_and(|st| st.is_true(conditions::INTERRUPTED));
        if cordoned && asked && recorded {
            answered = true;
            break;
        }
    }
    assert!(answered, "the notice was answered while the launch hangs");
    assert_eq!(
        cloud.launched.lock().unwrap().len(),
        launched_before,
        "the launch was still hanging"
    );
    gate.add_permits(1_000);
    h.settle = true;
    for _ in 0..3 {
        h.step().await;
    }
    assert!(h.queue.is_empty(), "{:?}", h.queue);
}

fn claim_json(name: &str, provider: Option<&str>) -> serde_json::Value {
    let mut c = json!({
        "apiVersion": "quartermaster.dev/v1alpha1", "kind": "NodeClaim",
        "metadata": {"name": name, "finalizers": [l::FINALIZER]},
        "spec": {"nodePool": "gpu", "instanceType": "g5.xlarge", "zone": "use1-az4",
            "capacityType": "on-demand", "pricePerHour": 1.0}
    });
    if let Some(p) = provider {
        c["status"] = json!({"providerID": p});
    }
    c
}

fn notice(instance: &str, kind: NoticeKind) -> InstanceNotice {
    InstanceNotice {
        instance_id: instance.into(),
        kind,
        time: t(0),
        id: format!("e-{instance}"),
    }
}

/// The notice handled against the claims the API server holds.
async fn handle(
    api: &FakeApi,
    handler: &mut NoticeHandler,
    launches: &Launches,
    n: &InstanceNotice,
) -> (NoticeOutcome, Vec<Notice>) {
    let store = Store::new();
    refresh(&store, api);
    let views = store.read(|s| notice_views(s, n, launches));
    let kube = KubeApi::new(api.controller_client());
    let h = handler
        .handle_with(n, &views, launches, &kube, true, t(0))
        .await;
    (h.outcome, h.notices)
}

#[tokio::test]
async fn notices_about_other_fleets_instances_are_let_go_at_once() {
    let api = FakeApi::new();
    api.state
        .lock()
        .unwrap()
        .put(CLAIMS, claim_json("gpu-ours", None));
    let launches = Launches::default();
    let mut handler = NoticeHandler::new();
    // Our claim is launching: its instance may be any unknown one.
    launches.started("gpu-ours");
    // A state change to running says nothing even about ours: let go.
    let running = NoticeKind::StateChange {
        state: InstanceState::Running,
    };
    let (outcome, heard) =
        handle(&api, &mut handler, &launches, &notice("i-other1", running)).await;
    assert_eq!(outcome, NoticeOutcome::Foreign);
    assert!(heard.is_empty());
    // A spot warning about an unknown instance waits while the launch may
    // have made it...
    let warning = NoticeKind::SpotInterruption { deadline: t(120) };
    let (outcome, _) = handle(
        &api,
        &mut handler,
        &launches,
        &notice("i-other2", warning.clone()),
    )
    .await;
    assert_eq!(outcome, NoticeOutcome::Retry);
    // ...and is foreign once the launch answered with another instance.
    launches.finished(
        "gpu-ours",
        Some(&instance("gpu-ours", "i-ours")),
        false,
        t(0),
    );
    let (outcome, _) = handle(&api, &mut handler, &launches, &notice("i-other2", warning)).await;
    assert_eq!(outcome, NoticeOutcome::Foreign);
    assert_eq!(api.state.lock().unwrap().effects, 0, "nothing written");
}

fn instance(claim: &str, id: &str) -> Instance {
    Instance {
        claim: claim.into(),
        provider_id: format!("aws:///us-east-1d/{id}"),
        offering: OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "use1-az4".into(),
            capacity_type: quartermaster::catalog::CapacityType::OnDemand,
        },
        price_per_hour: 1.0,
        launched_at: t(0),
        state: InstanceState::Pending,
    }
}

#[tokio::test]
async fn a_notice_about_an_instance_just_launched_is_acted_on_before_the_claim_names_it() {
    let api = FakeApi::new();
    api.state
        .lock()
        .unwrap()
        .put(CLAIMS, claim_json("gpu-new", None));
    let launches = Launches::default();
    launches.started("gpu-new");
    launches.finished("gpu-new", Some(&instance("gpu-new", "i-new")), false, t(0));
    let mut handler = NoticeHandler::new();
    let deadline = t(120);
    let (outcome, heard) = handle(
        &api,
        &mut handler,
        &launches,
        &notice("i-new", NoticeKind::SpotInterruption { deadline }),
    )
    .await;
    assert_eq!(outcome, NoticeOutcome::Recorded);
    assert_eq!(
        heard,
        [Notice::SpotInterruption {
            claim: "gpu-new".into(),
            deadline
        }]
    );
    let claim: quartermaster::api::NodeClaim =
        serde_json::from_value(api.state.lock().unwrap().get(CLAIMS, "gpu-new").unwrap()).unwrap();
    assert!(claim.status.unwrap().is_true(conditions::INTERRUPTED));
}
