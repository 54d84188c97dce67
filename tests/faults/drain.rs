//! The drain of a NodeClaim deleted by hand (`kubectl delete nodeclaim`):
//! a pod that checkpoints is asked to before it is evicted, a
//! do-not-disrupt pod is left where it is, other pods are evicted at once.

use super::harness::{refresh, t, Cloud, CLAIMS, NODES, PODS};
use crate::support::fake_api::FakeApi;
use kube::ResourceExt;
use quartermaster::api::labels as l;
use quartermaster::cloud::CloudProvider;
use quartermaster::controller::checkpoint::{rfc3339, HookAcks, HookClient};
use quartermaster::controller::interruptions::Launches;
use quartermaster::controller::kube_api::KubeApi;
use quartermaster::controller::lifecycle::{Lifecycle, Step};
use quartermaster::controller::snapshot::Store;
use quartermaster::core::{ClaimRequest, OfferingKey};
use quartermaster::metrics::Metrics;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

fn pod(name: &str, node: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.7"}
    })
}

#[tokio::test]
async fn a_deleted_claims_drain_asks_for_checkpoints_first_and_leaves_do_not_disrupt_pods() {
    let api = FakeApi::new();
    let cloud = Cloud::new(&api);
    let req = ClaimRequest {
        cluster_placement: false,
        claim: "gpu-1".into(),
        nodepool: "gpu".into(),
        offering: OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "use1-az4".into(),
            capacity_type: quartermaster::catalog::CapacityType::OnDemand,
        },
        price_per_hour: 1.0,
        pods: vec![],
        prewarm_window: None,
        reservation: None,
    };
    let instance = cloud
        .inner
        .launch(&req, &Default::default(), t(0))
        .await
        .unwrap();
    {
        let mut s = api.state.lock().unwrap();
        s.put(
            CLAIMS,
            json!({
                "apiVersion": "quartermaster.dev/v1alpha1", "kind": "NodeClaim",
                "metadata": {"name": "gpu-1", "finalizers": [l::FINALIZER],
                    "deletionTimestamp": rfc3339(t(100))},
                "spec": {"nodePool": "gpu", "instanceType": "g5.xlarge", "zone": "use1-az4",
                    "capacityType": "on-demand", "pricePerHour": 1.0},
                "status": {"providerID": instance.provider_id, "nodeName": "n1"}
            }),
        );
        s.put(
            NODES,
            json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "n1"},
                "spec": {"providerID": instance.provider_id},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}
            }),
        );
        s.put(
            PODS,
            pod("train", "n1", json!({l::CHECKPOINT_ENABLED: "true"})),
        );
        s.put(PODS, pod("serve", "n1", json!({l::DO_NOT_DISRUPT: "true"})));
        s.put(PODS, pod("web", "n1", json!({})));
    }
    let kube = KubeApi::new(api.controller_client());
    let metrics = Metrics::unregistered();
    let (policies, hooks, acks, launches) = (
        BTreeMap::new(),
        HookClient::new(),
        HookAcks::default(),
        Launches::default(),
    );
    let lifecycle = Lifecycle {
        api: &kube,
        cloud: &cloud,
        metrics: &metrics,
        launch_timeout: Duration::from_secs(300),
        registration_timeout: Duration::from_secs(600),
        policies: &policies,
        hooks: &hooks,
        hook_acks: &acks,
        launches: &launches,
        catalog: super::harness::catalog(),
        region: super::harness::REGION,
    };
    let store = Store::new();
    let reconcile = |at| {
        refresh(&store, &api);
        let view = store.read(|s| s.claim_view(&s.claims["gpu-1"]));
        let lifecycle = &lifecycle;
        async move { lifecycle.reconcile(&view, at).await.unwrap() }
    };
    let first = reconcile(t(101)).await;
    assert!(
        matches!(first, Step::Draining { evicted: 1, .. }),
        "{first:?}"
    );
    {
        let s = api.state.lock().unwrap();
        assert_eq!(
            s.evictions,
            ["ml/web"],
            "only the pod that does not checkpoint"
        );
        let train = s.get(PODS, "train").unwrap();
        // Asked by the end of the default checkpoint grace (90 s) from the
        // deletion.
        assert_eq!(
            train["metadata"]["annotations"][l::CHECKPOINT_REQUESTED],
            json!(rfc3339(t(190)))
        );
    }
    // Asked again after a restart? No: the request stands; it is waited for.
    let again = reconcile(t(110)).await;
    assert!(
        matches!(again, Step::Draining { evicted: 0, .. }),
        "{again:?}"
    );
    // The workload acknowledges: it is evicted; the do-not-disrupt pod stays.
    {
        let mut s = api.state.lock().unwrap();
        let mut train = s.get(PODS, "train").unwrap();
        train["metadata"]["annotations"][l::CHECKPOINT_COMPLETED] = json!(rfc3339(t(120)));
        s.put(PODS, train);
    }
    let then = reconcile(t(121)).await;
    assert!(
        matches!(
            then,
            Step::Draining {
                evicted: 1,
                remaining: 2,
                ..
            }
        ),
        "{then:?}"
    );
    let s = api.state.lock().unwrap();
    assert_eq!(s.evictions, ["ml/web", "ml/train"]);
    assert!(
        s.get(PODS, "serve").is_some(),
        "do-not-disrupt holds the drain"
    );
    for (pod, annotations) in &s.evicted_with {
        if pod == "ml/train" {
            assert!(annotations.contains_key(l::CHECKPOINT_REQUESTED));
        }
    }
    drop(s);
    let _ = store.read(|s| s.claims["gpu-1"].name_any());
}
