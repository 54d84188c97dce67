//! The controller's writes to the Kubernetes API, against a scripted mock
//! API server: method, path, query and body of every request, and what each
//! answer turns into.

use crate::support;

use http::Method;
use k8s_openapi::api::core::v1::Taint as K8sTaint;
use pretty_assertions::assert_eq;
use quartermaster::api::labels::{
    CHECKPOINT_COMPLETED, CHECKPOINT_REQUESTED, FINALIZER, TAINT_DISRUPTED, TAINT_UNREGISTERED,
};
use quartermaster::api::{
    Condition, NodeClaim, NodeClaimSpec, NodeClaimStatus, NodePoolStatus, Taint, TaintEffect,
};
use quartermaster::catalog::CapacityType;
use quartermaster::controller::checkpoint::{
    request_checkpoint, CheckpointRequest, HookClient, HookOutcome, HookTarget,
};
use quartermaster::controller::events::{node_pool_ref, pod_ref, Events};
use quartermaster::controller::kube_api::{
    is_status, Eviction, KubeApi, NodeChange, NODE_PATCH_ATTEMPTS,
};
use quartermaster::controller::snapshot::NodeInfo;
use quartermaster::metrics::Metrics;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use support::api_server::{already_exists, echo, not_found, status_body, Scenario};

const CLAIMS: &str = "/apis/quartermaster.dev/v1alpha1/nodeclaims";
const POOLS: &str = "/apis/quartermaster.dev/v1alpha1/nodepools";
const MERGE: &str = "application/merge-patch+json";

fn claim(name: &str) -> NodeClaim {
    let mut claim = NodeClaim::new(
        name,
        NodeClaimSpec {
            node_pool: "train".into(),
            instance_type: "p5.48xlarge".into(),
            zone: "use1-az4".into(),
            capacity_type: CapacityType::Spot,
            price_per_hour: 31.5,
            resources: BTreeMap::new(),
            labels: BTreeMap::from([("team".to_string(), "ml".to_string())]),
            taints: vec![Taint::new("nvidia.com/gpu", "", TaintEffect::NoSchedule)],
            startup_taints: Vec::new(),
            termination_grace_period: None,
            expire_after: None,
        },
    );
    claim.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
    claim
}

fn claim_json(name: &str) -> Value {
    serde_json::to_value(claim(name)).unwrap()
}

fn pod_json(namespace: &str, name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name, "namespace": namespace } })
}

fn node_json(name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "Node", "metadata": { "name": name } })
}

#[tokio::test]
async fn creating_a_claim_posts_its_spec_with_our_finalizer() {
    let mut without_finalizer = claim("train-abc12");
    without_finalizer.metadata.finalizers = None;
    let (client, verifier) = Scenario::new()
        .expect(
            Method::POST,
            &format!("{CLAIMS}?fieldManager=quartermaster"),
            |body| {
                assert_eq!(body["metadata"]["name"], "train-abc12");
                assert_eq!(body["metadata"]["finalizers"], json!([FINALIZER]));
                assert_eq!(body["spec"], claim_json("train-abc12")["spec"]);
            },
        )
        .respond_with(echo)
        .run();
    let created = KubeApi::new(client)
        .create_node_claim(&without_finalizer)
        .await
        .unwrap();
    verifier.finish().await;
    assert_eq!(created.spec, claim("train-abc12").spec);
    assert_eq!(created.metadata.resource_version.as_deref(), Some("1"));
}

#[tokio::test]
async fn creating_a_claim_that_exists_returns_the_existing_one() {
    let mut existing = claim_json("train-abc12");
    existing["metadata"]["resourceVersion"] = json!("42");
    existing["status"] = json!({ "providerID": "aws:///use1-az4/i-0abc" });
    let (client, verifier) = Scenario::new()
        .expect(Method::POST, CLAIMS, |_| {})
        .respond(409, already_exists("nodeclaims", "train-abc12"))
        .expect(Method::GET, &format!("{CLAIMS}/train-abc12"), |body| {
            assert_eq!(body, &Value::Null)
        })
        .respond(200, existing)
        .run();
    let got = KubeApi::new(client)
        .create_node_claim(&claim("train-abc12"))
        .await
        .unwrap();
    verifier.finish().await;
    assert_eq!(got.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(
        got.status.and_then(|s| s.provider_id).as_deref(),
        Some("aws:///use1-az4/i-0abc")
    );
}

#[tokio::test]
async fn creating_a_claim_surfaces_other_errors() {
    let (client, verifier) = Scenario::new()
        .expect(Method::POST, CLAIMS, |_| {})
        .respond(403, status_body(403, "Forbidden", "no"))
        .run();
    let err = KubeApi::new(client)
        .create_node_claim(&claim("train-abc12"))
        .await
        .unwrap_err();
    verifier.finish().await;
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err}"
    );
}

fn condition(type_: &str, reason: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: "True".into(),
        reason: reason.into(),
        message: String::new(),
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-22T00:00:00Z".parse().unwrap(),
        ),
        observed_generation: None,
    }
}

/// A claim as the cache has it: at `rv`, with these conditions.
fn cached_claim(rv: &str, conditions: Vec<Condition>) -> NodeClaim {
    let mut c = claim("train-abc12");
    c.metadata.resource_version = Some(rv.into());
    c.status = Some(NodeClaimStatus {
        provider_id: Some("aws:///use1-az4/i-0abc".into()),
        conditions,
        ..NodeClaimStatus::default()
    });
    c
}

/// The change registration makes: node name and `Registered`.
fn register(status: &mut NodeClaimStatus) -> bool {
    status.node_name = Some("ip-10-0-0-1".into());
    status
        .conditions
        .push(condition("Registered", "Registered"));
    true
}

fn types(body: &Value) -> Vec<String> {
    body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn claim_status_is_merge_patched_on_the_status_subresource_with_the_cached_version() {
    let cached = cached_claim("7", vec![condition("Launched", "Launched")]);
    let (client, verifier) = Scenario::new()
        .expect(
            Method::PATCH,
            &format!("{CLAIMS}/train-abc12/status?fieldManager=quartermaster"),
            |body| {
                assert_eq!(body["metadata"]["resourceVersion"], "7");
                assert_eq!(body["status"]["providerID"], "aws:///use1-az4/i-0abc");
                assert_eq!(body["status"]["nodeName"], "ip-10-0-0-1");
                assert_eq!(types(body), ["Launched", "Registered"]);
                assert_eq!(
                    body["status"]["conditions"][0]["lastTransitionTime"],
                    "2026-11-22T00:00:00Z"
                );
            },
        )
        .content_type(MERGE)
        .respond(200, claim_json("train-abc12"))
        .run();
    KubeApi::new(client)
        .update_node_claim_status(&cached, register)
        .await
        .unwrap();
    verifier.finish().await;
}

#[tokio::test]
async fn a_status_write_from_a_stale_copy_is_refused_and_made_again_on_the_fresh_claim() {
    // The cache has the claim before a spot interruption was recorded; the
    // server has the `Interrupted` condition. The write from the cache is
    // refused (409), the claim read again, and the condition kept.
    let stale = cached_claim("7", vec![condition("Launched", "Launched")]);
    let fresh = cached_claim(
        "8",
        vec![
            condition("Launched", "Launched"),
            condition("Interrupted", "SpotInterruption"),
        ],
    );
    let path = format!("{CLAIMS}/train-abc12/status?fieldManager=quartermaster");
    let (client, verifier) = Scenario::new()
        .expect(Method::PATCH, &path, |body| {
            assert_eq!(body["metadata"]["resourceVersion"], "7");
        })
        .content_type(MERGE)
        .respond(
            409,
            status_body(409, "Conflict", "the object has been modified"),
        )
        .expect(Method::GET, &format!("{CLAIMS}/train-abc12"), |_| {})
        .respond(200, serde_json::to_value(&fresh).unwrap())
        .expect(Method::PATCH, &path, |body| {
            assert_eq!(body["metadata"]["resourceVersion"], "8");
            assert_eq!(types(body), ["Launched", "Interrupted", "Registered"]);
        })
        .content_type(MERGE)
        .respond(200, claim_json("train-abc12"))
        .run();
    KubeApi::new(client)
        .update_node_claim_status(&stale, register)
        .await
        .unwrap();
    verifier.finish().await;
}

#[tokio::test]
async fn a_status_change_that_changes_nothing_sends_nothing() {
    let cached = cached_claim("7", vec![]);
    let (client, verifier) = Scenario::new().run();
    KubeApi::new(client)
        .update_node_claim_status(&cached, |_| false)
        .await
        .unwrap();
    verifier.finish().await;
}

#[tokio::test]
async fn deleting_a_claim_that_is_gone_is_fine() {
    let (client, verifier) = Scenario::new()
        .expect(Method::DELETE, &format!("{CLAIMS}/train-abc12"), |_| {})
        .respond(404, not_found("nodeclaims", "train-abc12"))
        .run();
    KubeApi::new(client)
        .delete_node_claim("train-abc12")
        .await
        .unwrap();
    verifier.finish().await;
}

#[tokio::test]
async fn removing_the_finalizer_tests_the_list_and_keeps_other_finalizers() {
    let mut held = claim("train-abc12");
    held.metadata.finalizers = Some(vec!["example.com/audit".to_string(), FINALIZER.to_string()]);
    let (client, verifier) = Scenario::new()
        .expect(
            Method::PATCH,
            &format!("{CLAIMS}/train-abc12?fieldManager=quartermaster"),
            |body| {
                assert_eq!(
                    body,
                    &json!([
                        { "op": "test", "path": "/metadata/finalizers",
                          "value": ["example.com/audit", FINALIZER] },
                        { "op": "replace", "path": "/metadata/finalizers",
                          "value": ["example.com/audit"] },
                    ])
                );
            },
        )
        .content_type("application/json-patch+json")
        .respond(200, claim_json("train-abc12"))
        .run();
    KubeApi::new(client).remove_finalizer(&held).await.unwrap();
    verifier.finish().await;
}

#[tokio::test]
async fn removing_the_finalizer_from_a_claim_without_it_sends_nothing() {
    let mut released = claim("train-abc12");
    released.metadata.finalizers = Some(vec!["example.com/audit".to_string()]);
    let (client, verifier) = Scenario::new().run();
    KubeApi::new(client)
        .remove_finalizer(&released)
        .await
        .unwrap();
    verifier.finish().await;
}

#[tokio::test]
async fn a_concurrent_finalizer_change_fails_the_removal() {
    let (client, verifier) = Scenario::new()
        .expect(Method::PATCH, &format!("{CLAIMS}/train-abc12"), |_| {})
        .respond(
            422,
            status_body(422, "Invalid", "testing value /metadata/finalizers failed"),
        )
        .run();
    let err = KubeApi::new(client)
        .remove_finalizer(&claim("train-abc12"))
        .await
        .unwrap_err();
    verifier.finish().await;
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "{err}"
    );
}

const JSON_PATCH: &str = "application/json-patch+json";
const NODE: &str = "/api/v1/nodes/ip-10-0-0-1";

fn taint(key: &str) -> Value {
    json!({ "key": key, "effect": "NoSchedule" })
}

/// A Node as the API server has it, at `version`, with these taints.
fn node_at(version: &str, taints: &[&str], unschedulable: bool) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": "ip-10-0-0-1", "resourceVersion": version,
                      "labels": { "kubernetes.io/hostname": "ip-10-0-0-1" } },
        "spec": { "taints": taints.iter().map(|k| taint(k)).collect::<Vec<_>>(),
                  "unschedulable": unschedulable },
    })
}

fn node_info(node: &Value) -> NodeInfo {
    NodeInfo::from_k8s(&serde_json::from_value(node.clone()).unwrap())
}

/// Registration's change: our pool label and GPU taint, our startup taint off.
fn registration() -> NodeChange {
    NodeChange {
        labels: BTreeMap::from([(
            "quartermaster.dev/nodepool".to_string(),
            "train".to_string(),
        )]),
        add_taints: vec![K8sTaint {
            key: "nvidia.com/gpu".into(),
            effect: "NoSchedule".into(),
            ..K8sTaint::default()
        }],
        remove_taints: vec![TAINT_UNREGISTERED.to_string()],
        unschedulable: None,
    }
}

#[tokio::test]
async fn node_changes_touch_only_our_taints_and_labels_guarded_by_the_resource_version() {
    let cached = node_at("7", &["example.com/theirs", TAINT_UNREGISTERED], false);
    let (client, verifier) = Scenario::new()
        .expect(
            Method::PATCH,
            &format!("{NODE}?fieldManager=quartermaster"),
            |body| {
                assert_eq!(
                    body,
                    &json!([
                        { "op": "test", "path": "/metadata/resourceVersion", "value": "7" },
                        { "op": "add", "path": "/spec/taints",
                          "value": [taint("example.com/theirs"), taint("nvidia.com/gpu")] },
                        { "op": "add", "path": "/metadata/labels/quartermaster.dev~1nodepool",
                          "value": "train" },
                    ])
                );
            },
        )
        .content_type(JSON_PATCH)
        .respond(200, node_json("ip-10-0-0-1"))
        .run();
    KubeApi::new(client)
        .patch_node(&node_info(&cached), &registration())
        .await
        .unwrap();
    verifier.finish().await;
}

#[tokio::test]
async fn a_node_changed_meanwhile_is_read_again_and_a_removed_startup_taint_stays_removed() {
    // The cache still has the driver's startup taint; its owner removed it
    // and someone added theirs since.
    let cached = node_at(
        "7",
        &["nvidia.com/driver-not-ready", TAINT_UNREGISTERED],
        false,
    );
    let fresh = node_at("9", &[TAINT_UNREGISTERED, "example.com/theirs"], false);
    let (client, verifier) = Scenario::new()
        .expect(Method::PATCH, NODE, |body| {
            assert_eq!(body[0]["value"], "7");
        })
        .respond(
            422,
            status_body(
                422,
                "Invalid",
                "the server rejected our request: test failed",
            ),
        )
        .expect(Method::GET, NODE, |_| {})
        .respond(200, fresh)
        .expect(Method::PATCH, NODE, |body| {
            assert_eq!(body[0]["value"], "9");
            assert_eq!(
                body[1]["value"],
                json!([taint("example.com/theirs"), taint("nvidia.com/gpu")])
            );
        })
        .respond(200, node_json("ip-10-0-0-1"))
        .run();
    KubeApi::new(client)
        .patch_node(&node_info(&cached), &registration())
        .await
        .unwrap();
    verifier.finish().await;
}

#[tokio::test]
async fn a_node_that_keeps_changing_is_an_error_after_a_bounded_number_of_tries() {
    let cached = node_at("1", &[], false);
    let mut scenario = Scenario::new();
    for attempt in 1..=NODE_PATCH_ATTEMPTS {
        scenario = scenario.expect(Method::PATCH, NODE, |_| {}).respond(
            409,
            status_body(409, "Conflict", "the object has been modified"),
        );
        if attempt < NODE_PATCH_ATTEMPTS {
            scenario = scenario
                .expect(Method::GET, NODE, |_| {})
                .respond(200, node_at(&format!("{}", attempt + 1), &[], false));
        }
    }
    let (client, verifier) = scenario.run();
    let e = KubeApi::new(client)
        .patch_node(&node_info(&cached), &NodeChange::cordon())
        .await
        .unwrap_err();
    assert!(is_status(&e, 409), "{e}");
    verifier.finish().await;
}

#[tokio::test]
async fn cordoning_adds_our_taint_beside_theirs_and_a_done_cordon_is_not_sent_again() {
    let cached = node_at("3", &["example.com/theirs"], false);
    let (client, verifier) = Scenario::new()
        .expect(Method::PATCH, NODE, |body| {
            assert_eq!(
                body,
                &json!([
                    { "op": "test", "path": "/metadata/resourceVersion", "value": "3" },
                    { "op": "add", "path": "/spec/taints",
                      "value": [taint("example.com/theirs"), taint(TAINT_DISRUPTED)] },
                    { "op": "add", "path": "/spec/unschedulable", "value": true },
                ])
            );
        })
        .respond(200, node_json("ip-10-0-0-1"))
        // Without a cached version the node is read first; already
        // cordoned, nothing is written.
        .expect(Method::GET, NODE, |_| {})
        .respond(
            200,
            node_at("4", &["example.com/theirs", TAINT_DISRUPTED], true),
        )
        .run();
    let api = KubeApi::new(client);
    api.patch_node(&node_info(&cached), &NodeChange::cordon())
        .await
        .unwrap();
    let mut unversioned = node_info(&cached);
    unversioned.resource_version = None;
    api.patch_node(&unversioned, &NodeChange::cordon())
        .await
        .unwrap();
    verifier.finish().await;
}

#[tokio::test]
async fn deleting_a_pod_outright_is_a_plain_delete_and_gone_is_fine() {
    let (client, verifier) = Scenario::new()
        .expect(Method::DELETE, "/api/v1/namespaces/ml/pods/train-0", |_| {})
        .respond(200, pod_json("ml", "train-0"))
        .expect(Method::DELETE, "/api/v1/namespaces/ml/pods/gone", |_| {})
        .respond(404, not_found("pods", "gone"))
        .run();
    let api = KubeApi::new(client);
    api.delete_pod("ml", "train-0").await.unwrap();
    api.delete_pod("ml", "gone").await.unwrap();
    verifier.finish().await;
}

#[tokio::test]
async fn creating_a_node_that_exists_is_fine_and_its_status_is_patched() {
    let node: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(node_json("sim-node-1")).unwrap();
    let (client, verifier) = Scenario::new()
        .expect(
            Method::POST,
            "/api/v1/nodes?fieldManager=quartermaster",
            |body| assert_eq!(body["metadata"]["name"], "sim-node-1"),
        )
        .respond(409, already_exists("nodes", "sim-node-1"))
        .expect(Method::PATCH, "/api/v1/nodes/sim-node-1/status", |body| {
            assert_eq!(
                body,
                &json!({ "status": { "capacity": { "nvidia.com/gpu": "8" } } })
            );
        })
        .content_type(MERGE)
        .respond(200, node_json("sim-node-1"))
        .expect(Method::DELETE, "/api/v1/nodes/sim-node-1", |_| {})
        .respond(404, not_found("nodes", "sim-node-1"))
        .run();
    let api = KubeApi::new(client);
    api.create_node(&node).await.unwrap();
    api.patch_node_status(
        "sim-node-1",
        &json!({ "capacity": { "nvidia.com/gpu": "8" } }),
    )
    .await
    .unwrap();
    api.delete_node("sim-node-1").await.unwrap();
    verifier.finish().await;
}

#[tokio::test]
async fn evicting_posts_a_policy_v1_eviction() {
    let (client, verifier) = Scenario::new()
        .expect(
            Method::POST,
            "/api/v1/namespaces/ml/pods/trainer-0/eviction",
            |body| {
                assert_eq!(
                    body,
                    &json!({
                        "apiVersion": "policy/v1",
                        "kind": "Eviction",
                        "metadata": { "name": "trainer-0", "namespace": "ml" },
                    })
                );
            },
        )
        .respond(201, status_body(201, "", ""))
        .run();
    let outcome = KubeApi::new(client).evict("ml", "trainer-0").await.unwrap();
    verifier.finish().await;
    assert_eq!(outcome, Eviction::Evicted);
}

#[tokio::test]
async fn an_eviction_a_budget_forbids_is_blocked_and_a_gone_pod_is_gone() {
    let (client, verifier) = Scenario::new()
        .expect(
            Method::POST,
            "/api/v1/namespaces/ml/pods/trainer-0/eviction",
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
        .expect(
            Method::POST,
            "/api/v1/namespaces/ml/pods/trainer-1/eviction",
            |_| {},
        )
        .respond(404, not_found("pods", "trainer-1"))
        .expect(
            Method::POST,
            "/api/v1/namespaces/ml/pods/trainer-2/eviction",
            |_| {},
        )
        .respond(500, status_body(500, "InternalError", "boom"))
        .run();
    let api = KubeApi::new(client);
    assert_eq!(
        api.evict("ml", "trainer-0").await.unwrap(),
        Eviction::Blocked
    );
    assert_eq!(api.evict("ml", "trainer-1").await.unwrap(), Eviction::Gone);
    let err = api.evict("ml", "trainer-2").await.unwrap_err();
    verifier.finish().await;
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 500),
        "{err}"
    );
}

#[tokio::test]
async fn annotating_a_pod_merge_patches_one_annotation() {
    let (client, verifier) = Scenario::new()
        .expect(
            Method::PATCH,
            "/api/v1/namespaces/ml/pods/trainer-0?fieldManager=quartermaster",
            |body| {
                assert_eq!(
                    body,
                    &json!({ "metadata": { "annotations": {
                        CHECKPOINT_REQUESTED: "2026-11-22T01:02:03Z"
                    } } })
                );
            },
        )
        .content_type(MERGE)
        .respond(200, pod_json("ml", "trainer-0"))
        .run();
    KubeApi::new(client)
        .annotate_pod(
            "ml",
            "trainer-0",
            CHECKPOINT_REQUESTED,
            "2026-11-22T01:02:03Z",
        )
        .await
        .unwrap();
    verifier.finish().await;
}

#[tokio::test]
async fn node_pool_status_is_merge_patched_on_the_status_subresource() {
    let status = NodePoolStatus {
        conditions: Vec::new(),
        resources: BTreeMap::from([(
            "nvidia.com/gpu".to_string(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("16".into()),
        )]),
        nodes: 2,
        cost_per_hour: 63.0,
    };
    let (client, verifier) = Scenario::new()
        .expect(
            Method::PATCH,
            &format!("{POOLS}/train/status?fieldManager=quartermaster"),
            |body| {
                assert_eq!(
                    body,
                    &json!({ "status": {
                        "resources": { "nvidia.com/gpu": "16" },
                        "nodes": 2,
                        "costPerHour": 63.0,
                    } })
                );
            },
        )
        .content_type(MERGE)
        .respond(
            200,
            json!({
                "apiVersion": "quartermaster.dev/v1alpha1",
                "kind": "NodePool",
                "metadata": { "name": "train" },
                "spec": {},
            }),
        )
        .run();
    KubeApi::new(client)
        .patch_node_pool_status("train", &status)
        .await
        .unwrap();
    verifier.finish().await;
}

fn checkpoint_request() -> CheckpointRequest {
    CheckpointRequest {
        namespace: "ml".into(),
        name: "trainer-0".into(),
        node: "ip-10-0-0-1".into(),
        deadline: "2026-11-22T01:02:03Z".parse().unwrap(),
        reason: "spot-interruption".into(),
    }
}

/// A hook on 127.0.0.1 that answers 200 and sends what it got.
async fn hook() -> (HookTarget, tokio::sync::mpsc::UnboundedReceiver<Value>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/checkpoint",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| async move {
            let _ = tx.send(body);
            "saved"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let target = HookTarget {
        url: format!("http://{addr}/checkpoint"),
        timeout: std::time::Duration::from_secs(5),
    };
    (target, rx)
}

#[tokio::test]
async fn a_checkpoint_request_annotates_the_pod_then_calls_its_hook() {
    let (target, mut calls) = hook().await;
    let (client, verifier) = Scenario::new()
        .expect(
            Method::PATCH,
            "/api/v1/namespaces/ml/pods/trainer-0?fieldManager=quartermaster",
            |body| {
                assert_eq!(
                    body,
                    &json!({ "metadata": { "annotations": {
                        CHECKPOINT_REQUESTED: "2026-11-22T01:02:03Z",
                        CHECKPOINT_COMPLETED: null,
                    } } })
                );
            },
        )
        .content_type(MERGE)
        .respond(200, pod_json("ml", "trainer-0"))
        .run();
    let metrics = Metrics::new(&mut prometheus_client::registry::Registry::default());
    let outcome = request_checkpoint(
        &KubeApi::new(client),
        &HookClient::new(),
        &checkpoint_request(),
        Some(&target),
        &metrics,
    )
    .await
    .unwrap();
    verifier.finish().await;
    assert_eq!(outcome, Some(HookOutcome::Acknowledged { status: 200 }));
    let call = calls.recv().await.unwrap();
    assert_eq!(call["pod"], "trainer-0");
    assert_eq!(call["deadline"], "2026-11-22T01:02:03Z");
    assert_eq!(metrics.checkpoints_requested.get(), 1);
    assert_eq!(metrics.checkpoints_acknowledged.get(), 1);
}

#[tokio::test]
async fn a_checkpoint_request_that_cannot_annotate_fails_without_calling_the_hook() {
    let (target, mut calls) = hook().await;
    let (client, verifier) = Scenario::new()
        .expect(
            Method::PATCH,
            "/api/v1/namespaces/ml/pods/trainer-0",
            |_| {},
        )
        .respond(404, not_found("pods", "trainer-0"))
        .run();
    let metrics = Metrics::new(&mut prometheus_client::registry::Registry::default());
    let err = request_checkpoint(
        &KubeApi::new(client),
        &HookClient::new(),
        &checkpoint_request(),
        Some(&target),
        &metrics,
    )
    .await
    .unwrap_err();
    verifier.finish().await;
    assert!(err.to_string().contains("ml/trainer-0"), "{err}");
    assert!(calls.try_recv().is_err());
    assert_eq!(metrics.checkpoints_requested.get(), 0);
}

#[tokio::test]
async fn a_failed_launch_is_an_events_k8s_io_warning_on_the_node_pool() {
    let (client, verifier) = Scenario::new()
        .expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/default/events",
            |body| {
                assert_eq!(body["type"], "Warning");
                assert_eq!(body["reason"], "LaunchFailed");
                assert_eq!(body["action"], "Launch");
                assert_eq!(
                    body["note"],
                    "launching NodeClaim train-abc12 failed: InsufficientInstanceCapacity: no p5 in use1-az4"
                );
                assert_eq!(body["reportingController"], "quartermaster.dev/controller");
                assert_eq!(body["reportingInstance"], "quartermaster-0");
                assert_eq!(
                    body["regarding"],
                    json!({ "apiVersion": "quartermaster.dev/v1alpha1", "kind": "NodePool",
                            "name": "train", "uid": "pool-uid" })
                );
                assert_eq!(body["related"]["kind"], "NodeClaim");
                assert_eq!(body["related"]["name"], "train-abc12");
                assert!(body["eventTime"].is_string(), "{body}");
            },
        )
        .respond_with(echo)
        .run();
    let events = Events::new(client, Some("quartermaster-0".into()));
    events
        .launch_failed(
            &node_pool_ref("train", Some("pool-uid")),
            "train-abc12",
            "InsufficientInstanceCapacity",
            "no p5 in use1-az4",
        )
        .await;
    verifier.finish().await;
}

#[tokio::test]
async fn repeated_checkpoint_requests_to_a_pod_are_one_event_with_a_series() {
    // A checkpoint cadence asks the same pod every few minutes: the second
    // request patches the first Event's series (kube's recorder keeps the
    // first note), so the note must not carry the first request's deadline.
    fn no_time(note: &str) {
        assert!(
            !note.chars().any(|c| c.is_ascii_digit()),
            "a time in the note goes stale: {note}"
        )
    }
    let (client, verifier) = Scenario::new()
        .expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ml/events",
            |body| {
                assert_eq!(body["reason"], "CheckpointRequested");
                assert_eq!(body["regarding"]["name"], "trainer-0");
                assert_eq!(body["related"]["name"], "train-abc12");
                let note = body["note"].as_str().unwrap_or_default();
                assert!(note.contains("node disruption"), "{note}");
                assert!(
                    note.contains("quartermaster.dev/checkpoint-requested"),
                    "{note}"
                );
                no_time(note);
            },
        )
        .respond_with(echo)
        .expect(
            Method::PATCH,
            "/apis/events.k8s.io/v1/namespaces/ml/events/trainer-0.*",
            move |body| {
                assert_eq!(body["series"]["count"], 2, "{body}");
                no_time(body["note"].as_str().unwrap_or_default());
            },
        )
        .respond_with(echo)
        .run();
    let events = Events::new(client, None);
    let pod = pod_ref("ml/trainer-0", None);
    for _ in 0..2 {
        events
            .checkpoint_requested(&pod, "train-abc12", "node disruption")
            .await;
    }
    verifier.finish().await;
}

#[tokio::test]
async fn a_pods_new_reason_is_a_new_event_and_only_a_repeat_folds_into_a_series() {
    // kube's recorder alone would fold the second reason into the first
    // Event (same object, reason and action) and keep the old message.
    let first = "Quartermaster cannot place the pod: no NodePool tolerates taint x";
    let second = "Quartermaster cannot place the pod: NodePool gpu reached its limit";
    let posted = |note: &'static str| {
        move |body: &Value| {
            assert_eq!(body["reason"], "NotPlaceable");
            assert_eq!(body["note"], note);
            assert_eq!(body["series"], Value::Null, "{body}");
        }
    };
    let (client, verifier) = Scenario::new()
        .expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ml/events",
            posted(first),
        )
        .respond_with(echo)
        .expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ml/events",
            posted(second),
        )
        .respond_with(echo)
        .expect(
            Method::PATCH,
            "/apis/events.k8s.io/v1/namespaces/ml/events/trainer-0.*",
            move |body| {
                assert_eq!(body["note"], first);
                assert_eq!(body["series"]["count"], 2, "{body}");
            },
        )
        .respond_with(echo)
        .run();
    let events = Events::new(client, None);
    let pod = pod_ref("ml/trainer-0", None);
    for why in [
        "no NodePool tolerates taint x",
        "NodePool gpu reached its limit",
        "no NodePool tolerates taint x",
    ] {
        events.not_placeable(&pod, why).await;
    }
    verifier.finish().await;
}

#[tokio::test]
async fn an_unplaceable_pod_gets_a_warning_in_its_namespace() {
    let (client, verifier) = Scenario::new()
        .expect(
            Method::POST,
            "/apis/events.k8s.io/v1/namespaces/ml/events",
            |body| {
                assert_eq!(body["type"], "Warning");
                assert_eq!(body["reason"], "NotPlaceable");
                assert_eq!(body["regarding"]["kind"], "Pod");
                assert_eq!(body["regarding"]["name"], "trainer-0");
                assert_eq!(
                    body["note"],
                    "Quartermaster cannot place the pod: no NodePool tolerates taint x"
                );
            },
        )
        .respond_with(echo)
        .run();
    Events::new(client, None)
        .not_placeable(
            &pod_ref("ml/trainer-0", None),
            "no NodePool tolerates taint x",
        )
        .await;
    verifier.finish().await;
}

// The mock server itself: a wrong request, a missing one and a stray one
// each fail the test.

#[tokio::test]
#[should_panic(expected = "expected DELETE /api/v1/nodes/a, got DELETE /api/v1/nodes/b")]
async fn the_mock_server_fails_a_test_on_a_request_it_did_not_expect() {
    let (client, verifier) = Scenario::new()
        .expect(Method::DELETE, "/api/v1/nodes/a", |_| {})
        .respond(200, node_json("a"))
        .run();
    let err = KubeApi::new(client).delete_node("b").await.unwrap_err();
    assert!(err.to_string().contains("expected DELETE"), "{err}");
    verifier.finish().await;
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "an expected request never came")]
async fn the_mock_server_fails_a_test_when_an_expected_request_never_comes() {
    let (_client, verifier) = Scenario::new()
        .expect(Method::DELETE, "/api/v1/nodes/a", |_| {})
        .respond(200, node_json("a"))
        .run();
    verifier.finish().await;
}

#[tokio::test]
#[should_panic(expected = "unexpected request after the script: DELETE /api/v1/nodes/a")]
async fn the_mock_server_fails_a_test_on_a_request_after_its_script() {
    let (client, verifier) = Scenario::new().run();
    assert!(KubeApi::new(client).delete_node("a").await.is_err());
    verifier.finish().await;
}

#[tokio::test]
#[should_panic(expected = "check failed")]
async fn the_mock_server_fails_a_test_when_a_body_check_fails() {
    let (client, verifier) = Scenario::new()
        .expect(Method::PATCH, "/api/v1/namespaces/ml/pods/p", |body| {
            assert_eq!(body["metadata"]["annotations"]["k"], "other")
        })
        .respond(200, pod_json("ml", "p"))
        .run();
    let _ = KubeApi::new(client).annotate_pod("ml", "p", "k", "v").await;
    verifier.finish().await;
}
