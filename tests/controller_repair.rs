//! Repair through the controller's loop (`docs/repair.md`), with the
//! Kubernetes API served by a recorder that accepts every write and keeps
//! it, and the simulated cloud behind the `CloudProvider` seam:
//! - a node with `AcceleratedHardwareReady=False` past its toleration has
//!   its checkpointing pod asked to checkpoint, then is rebooted (the
//!   reboot recorded on its NodeClaim, an Event); still unhealthy after
//!   the pool's `rebootTimeout`, it is replaced, new node first, then
//!   cordoned and drained checkpoint first;
//! - the breaker holds repairs while more nodes than `maxUnhealthy` are
//!   unhealthy, and lets them go once they are not;
//! - `quartermaster.dev/do-not-repair` holds a node's repair.

use crate::support;

use crate::support::{catalog, t};
use k8s_openapi::api::core::v1 as core;
use kube::ResourceExt;
use quartermaster::api::labels as l;
use quartermaster::api::nodeclaim::conditions;
use quartermaster::api::{NodeClaim, NodePool};
use quartermaster::catalog::CapacityType;
use quartermaster::cloud::simulated::{SimulatedCloud, SimulatedCloudConfig};
use quartermaster::cloud::{CloudProvider, NodeTemplate};
use quartermaster::controller::events::Events;
use quartermaster::controller::kube_api::KubeApi;
use quartermaster::controller::run::{Context, Driver, Settings};
use quartermaster::controller::snapshot::{to_k8s_time, Store};
use quartermaster::core::{ClaimRequest, Config, OfferingKey, Time};
use quartermaster::metrics::health::PoolHealthLabels;
use quartermaster::metrics::Metrics;
use serde_json::{json, Value};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::api_server::{echo, status_body, Recorder};
use tokio::sync::{mpsc, watch};

const CLAIMS: &str = "/apis/quartermaster.dev/v1alpha1/nodeclaims";
const REGION: &str = "us-east-1";
const ACCEL: &str = "AcceleratedHardwareReady";

/// The GPU pool, its repair policy changed by `repair` (merged into the
/// defaults), with a budget that never holds.
fn pool(repair: Value) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "quartermaster.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "capacityTypes": ["on-demand"],
            "template": {"spec": {
                "requirements": [{"key": l::INSTANCE_FAMILY, "operator": "In", "values": ["g5"]}],
                "taints": [{"key": l::TAINT_GPU, "effect": "NoSchedule"}]
            }},
            "disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "100%"}]},
            "repair": repair
        }
    }))
    .unwrap()
}

/// An on-demand g5.xlarge of pool `gpu` named `name`.
fn request(name: &str) -> ClaimRequest {
    let zone = catalog()
        .offerings_of(REGION, "g5.xlarge")
        .find(|o| o.capacity_type == CapacityType::OnDemand)
        .unwrap()
        .zone_id
        .clone();
    ClaimRequest {
        cluster_placement: false,
        claim: name.into(),
        nodepool: "gpu".into(),
        offering: OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone,
            capacity_type: CapacityType::OnDemand,
        },
        price_per_hour: 1.0,
        pods: vec![],
        prewarm_window: None,
        reservation: None,
    }
}

/// The claim the executor builds for [`request`] `name`, created at 0.
fn built(name: &str) -> NodeClaim {
    let pools = [pool(json!({}))];
    let world = quartermaster::core::World {
        nodes_revision: 0,
        catalog: &catalog(),
        region: REGION,
        pools: &pools,
        pending: &[],
        nodes: &[],
        pdbs: &[],
    };
    let mut claim =
        quartermaster::controller::executor::build_claim(&request(name), name, &world, &[], t(0))
            .unwrap();
    claim.metadata.creation_timestamp = Some(to_k8s_time(t(0)));
    claim
}

/// The claim `name` launched in `cloud` and Ready on node `node` since 60 s.
async fn ready_claim(cloud: &Mutex<SimulatedCloud>, name: &str, node: &str) -> (NodeClaim, String) {
    let req = request(name);
    let mut claim = built(name);
    let instance = cloud
        .launch(&req, &NodeTemplate::from(&claim.spec), t(0))
        .await
        .unwrap();
    // Running (the simulated cloud runs its timers when told; a GPU
    // instance takes a few minutes).
    cloud.lock().unwrap().advance(t(590));
    let mut status = quartermaster::api::NodeClaimStatus {
        provider_id: Some(instance.provider_id.clone()),
        node_name: Some(node.into()),
        ..Default::default()
    };
    for c in [
        conditions::LAUNCHED,
        conditions::REGISTERED,
        conditions::INITIALIZED,
        conditions::READY,
    ] {
        quartermaster::controller::lifecycle::set_condition(&mut status, c, true, c, "", t(60));
    }
    claim.status = Some(status);
    (claim, instance.provider_id)
}

/// A Ready one-GPU node with these extra conditions (`[type, status,
/// reason, since]`) and annotations.
fn node(
    name: &str,
    provider_id: &str,
    extra: &[(&str, &str, &str, Time)],
    annotations: Value,
) -> core::Node {
    let mut conditions = vec![
        json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
        "lastTransitionTime": to_k8s_time(t(60))}),
    ];
    for (type_, status, reason, since) in extra {
        conditions.push(json!({"type": type_, "status": status, "reason": reason,
            "lastTransitionTime": to_k8s_time(*since)}));
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "1", "annotations": annotations},
        "spec": {"providerID": provider_id,
                 "taints": [{"key": l::TAINT_GPU, "effect": "NoSchedule"}]},
        "status": {
            "conditions": conditions,
            "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58", l::RESOURCE_GPU: "1"}
        }
    }))
    .unwrap()
}

/// A GPU fault since `at`, as the node monitoring agent reports XID 79.
fn xid79(at: Time) -> (&'static str, &'static str, &'static str, Time) {
    (ACCEL, "False", "NvidiaXID79Error", at)
}

/// The training pod `ml/train-0` on `node`, opted in to checkpoints, with
/// extra annotations.
fn train_pod(node: &str, extra: Value) -> core::Pod {
    let mut annotations = json!({l::CHECKPOINT_ENABLED: "true"});
    for (k, v) in extra.as_object().into_iter().flatten() {
        annotations[k] = v.clone();
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "ml", "annotations": annotations},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests":
                {"cpu": "2", "memory": "8Gi", l::RESOURCE_GPU: "1"}}}],
            "tolerations": [{"key": l::TAINT_GPU, "operator": "Exists"}]
        },
        "status": {"phase": "Running", "podIP": "10.0.0.7"}
    }))
    .unwrap()
}

/// Every write the loop made: method, path and body.
type Writes = Arc<Mutex<Vec<(String, String, Value)>>>;

/// A loop over `store` whose every write is accepted and kept, with
/// Events on, over the simulated `cloud`.
fn driver(
    store: Arc<Store>,
    cloud: Arc<Mutex<SimulatedCloud>>,
) -> (
    Driver<Mutex<SimulatedCloud>>,
    Writes,
    Arc<Metrics>,
    Recorder,
) {
    let writes: Writes = Arc::default();
    let seen = writes.clone();
    let (client, server) = Recorder::start(move |served, body| {
        seen.lock()
            .unwrap()
            .push((served.method.clone(), served.path.clone(), body.clone()));
        match (served.method.as_str(), served.path.as_str()) {
            ("POST", p) if p.ends_with("/eviction") => (201, status_body(201, "", "evicted")),
            ("PATCH", p) if p.starts_with("/api/v1/nodes/") => (
                200,
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}),
            ),
            ("PATCH", p) if p.starts_with("/api/v1/namespaces/") => (
                200,
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}}),
            ),
            ("PATCH", p) if p.starts_with(CLAIMS) => (
                200,
                json!({"apiVersion": "quartermaster.dev/v1alpha1", "kind": "NodeClaim",
                       "metadata": {"name": "c"}, "spec": serde_json::to_value(request_spec()).unwrap()}),
            ),
            ("PATCH", _) => (200, serde_json::to_value(pool(json!({}))).unwrap()),
            _ => echo(body),
        }
    });
    let (leader_tx, leader) = watch::channel(true);
    std::mem::forget(leader_tx);
    let (catalog_tx, catalog_rx) = watch::channel(catalog());
    std::mem::forget(catalog_tx);
    let (notices_tx, notices) = mpsc::channel(8);
    std::mem::forget(notices_tx);
    let metrics = Arc::new(Metrics::unregistered());
    let ctx = Context {
        api: KubeApi::new(client.clone()),
        cloud,
        metrics: metrics.clone(),
        catalog: catalog_rx,
        leader,
        ready: Arc::new(AtomicBool::new(true)),
        notices,
        notice_acks: Default::default(),
        simulated_nodes: false,
    };
    let settings = Settings {
        region: REGION.into(),
        cluster_name: "test".into(),
        core: Config::default(),
        tick: Duration::from_secs(10),
        launch_timeout: Duration::from_secs(300),
        registration_timeout: Duration::from_secs(600),
        gc_grace: Duration::from_secs(300),
        gpu_use: None,
    };
    let mut d = Driver::new(ctx, settings, store, t(0));
    d.events = Some(Events::new(client, None));
    (d, writes, metrics, server)
}

fn request_spec() -> quartermaster::api::NodeClaimSpec {
    built("c").spec
}

fn store(
    pools: Vec<NodePool>,
    pods: Vec<core::Pod>,
    nodes: Vec<core::Node>,
    claims: Vec<NodeClaim>,
) -> Arc<Store> {
    let s = Store::new();
    s.reset(pools);
    s.reset(pods);
    s.reset(nodes);
    s.reset(claims);
    s.reset(Vec::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::new());
    assert!(s.is_synced());
    Arc::new(s)
}

fn taken(w: &Writes) -> Vec<(String, String, Value)> {
    std::mem::take(&mut *w.lock().unwrap())
}

/// The Events of `reason` among `writes`, as (regarding kind/name, note).
fn events(writes: &[(String, String, Value)], reason: &str) -> Vec<(String, String)> {
    writes
        .iter()
        .filter(|(m, p, b)| m == "POST" && p.ends_with("/events") && b["reason"] == reason)
        .map(|(_, _, b)| {
            (
                format!(
                    "{}/{}",
                    b["regarding"]["kind"].as_str().unwrap_or_default(),
                    b["regarding"]["name"].as_str().unwrap_or_default()
                ),
                b["note"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn position(
    writes: &[(String, String, Value)],
    pred: impl Fn(&(String, String, Value)) -> bool,
) -> Option<usize> {
    writes.iter().position(pred)
}

fn reboots(cloud: &Mutex<SimulatedCloud>, claim: &str) -> u32 {
    cloud
        .lock()
        .unwrap()
        .reboots()
        .get(claim)
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_gpu_fault_is_rebooted_checkpoint_first_then_replaced_new_node_first_when_the_reboot_did_not_help(
) {
    let cloud = Arc::new(Mutex::new(
        SimulatedCloud::new(catalog(), SimulatedCloudConfig::new(7, REGION, t(0))).unwrap(),
    ));
    let (claim, provider_id) = ready_claim(&cloud, "gpu-000001", "ip-10-0-0-1").await;
    let sick = node("ip-10-0-0-1", &provider_id, &[xid79(t(0))], json!({}));
    let s = store(
        vec![pool(json!({}))],
        vec![train_pod("ip-10-0-0-1", json!({}))],
        vec![sick.clone()],
        vec![claim.clone()],
    );
    let (mut driver, writes, metrics, _server) = driver(s.clone(), cloud.clone());

    // Within the 10m toleration: nothing.
    driver.round(t(590)).await;
    assert_eq!(reboots(&cloud, "gpu-000001"), 0);
    assert!(events(&taken(&writes), "Rebooted").is_empty());

    // Past it: the running pod is asked to checkpoint first.
    driver.round(t(600)).await;
    let first = taken(&writes);
    let asked = position(&first, |(m, p, b)| {
        m == "PATCH"
            && p == "/api/v1/namespaces/ml/pods/train-0"
            && b["metadata"]["annotations"][l::CHECKPOINT_REQUESTED].is_string()
    });
    assert!(asked.is_some(), "{first:#?}");
    assert_eq!(
        reboots(&cloud, "gpu-000001"),
        0,
        "not before the checkpoint"
    );

    // It acknowledges: the instance is rebooted, the reboot recorded on the
    // claim, an Event says so.
    s.apply(train_pod(
        "ip-10-0-0-1",
        json!({l::CHECKPOINT_COMPLETED: quartermaster::controller::checkpoint::rfc3339(t(650))}),
    ));
    driver.round(t(660)).await;
    assert_eq!(reboots(&cloud, "gpu-000001"), 1);
    let second = taken(&writes);
    let status = second
        .iter()
        .find(|(m, p, _)| m == "PATCH" && *p == format!("{CLAIMS}/gpu-000001/status"))
        .map(|(_, _, b)| b.clone())
        .unwrap_or_else(|| panic!("no status write: {second:#?}"));
    let rebooted = status["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == conditions::REBOOTED)
        .unwrap()
        .clone();
    assert_eq!(rebooted["status"], "True");
    assert_eq!(rebooted["reason"], ACCEL);
    assert!(status["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == conditions::READY));
    let ev = events(&second, "Rebooted");
    assert_eq!(ev.len(), 1, "{second:#?}");
    assert_eq!(ev[0].0, "NodeClaim/gpu-000001");
    assert!(ev[0].1.contains("NvidiaXID79Error"), "{}", ev[0].1);
    let repairs = metrics
        .health
        .repairs
        .get_or_create(&quartermaster::metrics::health::RepairLabels {
            nodepool: "gpu".into(),
            condition: ACCEL.into(),
            action: "reboot".into(),
        })
        .get();
    assert_eq!(repairs, 1);

    // The claim as the watch brings it back; the fault stays. Within the
    // pool's rebootTimeout (15m) nothing more.
    let mut marked = claim.clone();
    marked.status = serde_json::from_value(status["status"].clone()).unwrap();
    s.apply(marked);
    s.apply(train_pod("ip-10-0-0-1", json!({})));
    driver.round(t(660 + 890)).await;
    assert_eq!(reboots(&cloud, "gpu-000001"), 1);
    let quiet = taken(&writes);
    assert!(
        !quiet.iter().any(|(m, p, _)| m == "POST" && p == CLAIMS),
        "{quiet:#?}"
    );

    // Still unhealthy after it: a replacement is launched first, nothing
    // drained before it is ready.
    driver.round(t(660 + 900)).await;
    let third = taken(&writes);
    let created: Vec<&Value> = third
        .iter()
        .filter(|(m, p, _)| m == "POST" && p == CLAIMS)
        .map(|(_, _, b)| b)
        .collect();
    assert_eq!(created.len(), 1, "{third:#?}");
    assert_eq!(reboots(&cloud, "gpu-000001"), 1, "not rebooted again");
    assert!(
        !third
            .iter()
            .any(|(_, p, _)| p.starts_with("/api/v1/nodes/") || p.ends_with("/eviction")),
        "drained before the replacement is ready: {third:#?}"
    );
    let ev = events(&third, "Unhealthy");
    assert_eq!(ev.len(), 1, "{third:#?}");
    assert!(
        ev[0].1.contains("still unhealthy after a reboot"),
        "{}",
        ev[0].1
    );

    // The replacement is Ready: the sick node is cordoned and its pod asked
    // to checkpoint before any eviction.
    let mut replacement: NodeClaim = serde_json::from_value(created[0].clone()).unwrap();
    let (ready, replacement_pid) =
        ready_claim(&cloud, &replacement.name_any(), "ip-10-0-0-2").await;
    replacement.status = ready.status;
    replacement.metadata.creation_timestamp = Some(to_k8s_time(t(1560)));
    s.apply(replacement);
    s.apply(node("ip-10-0-0-2", &replacement_pid, &[], json!({})));
    driver.round(t(1570)).await;
    let fourth = taken(&writes);
    let cordon = position(&fourth, |(m, p, _)| {
        m == "PATCH" && p == "/api/v1/nodes/ip-10-0-0-1"
    })
    .unwrap_or_else(|| panic!("no cordon: {fourth:#?}"));
    let checkpoint = position(&fourth, |(m, p, b)| {
        m == "PATCH"
            && p == "/api/v1/namespaces/ml/pods/train-0"
            && b["metadata"]["annotations"][l::CHECKPOINT_REQUESTED].is_string()
    })
    .unwrap_or_else(|| panic!("no checkpoint request: {fourth:#?}"));
    assert!(cordon < checkpoint, "{fourth:#?}");
    assert!(
        !fourth.iter().any(|(_, p, _)| p.ends_with("/eviction")),
        "evicted before the checkpoint: {fourth:#?}"
    );
}

/// Three Ready nodes (no pods) of the pool, the first `sick` of them with
/// XID 79 since 0.
async fn fleet(
    cloud: &Mutex<SimulatedCloud>,
    sick: usize,
    annotations: Value,
) -> (Vec<NodeClaim>, Vec<core::Node>) {
    let mut claims = Vec::new();
    let mut nodes = Vec::new();
    for i in 0..3 {
        let name = format!("gpu-00000{i}");
        let node_name = format!("ip-10-0-1-{i}");
        let (claim, pid) = ready_claim(cloud, &name, &node_name).await;
        let faults = if i < sick { vec![xid79(t(0))] } else { vec![] };
        nodes.push(node(&node_name, &pid, &faults, annotations.clone()));
        claims.push(claim);
    }
    (claims, nodes)
}

#[tokio::test]
async fn the_breaker_holds_repairs_while_more_nodes_than_max_unhealthy_are_sick() {
    let cloud = Arc::new(Mutex::new(
        SimulatedCloud::new(catalog(), SimulatedCloudConfig::new(7, REGION, t(0))).unwrap(),
    ));
    let (claims, nodes) = fleet(&cloud, 2, json!({})).await;
    let s = store(
        vec![pool(json!({"maxUnhealthy": "1"}))],
        vec![],
        nodes.clone(),
        claims,
    );
    let (mut driver, writes, metrics, _server) = driver(s.clone(), cloud.clone());
    for k in 0..3 {
        driver.round(t(700 + k)).await;
    }
    assert_eq!(
        reboots(&cloud, "gpu-000000") + reboots(&cloud, "gpu-000001"),
        0
    );
    let w = taken(&writes);
    let held = events(&w, "RepairHeld");
    assert_eq!(held.len(), 2, "once per node, not per round: {held:?}");
    assert!(
        held.iter().all(|(_, note)| note.contains("too many")),
        "{held:?}"
    );
    let pool = PoolHealthLabels {
        nodepool: "gpu".into(),
    };
    assert_eq!(metrics.health.breaker_open.get_or_create(&pool).get(), 1);
    assert_eq!(metrics.health.unhealthy_nodes.get_or_create(&pool).get(), 2);

    // One recovers: one sick node of three is within the share, and it is
    // repaired.
    let mut healed = nodes[1].clone();
    healed
        .status
        .as_mut()
        .unwrap()
        .conditions
        .as_mut()
        .unwrap()
        .retain(|c| c.type_ != ACCEL);
    s.apply(healed);
    driver.round(t(710)).await;
    assert_eq!(reboots(&cloud, "gpu-000000"), 1);
    assert_eq!(reboots(&cloud, "gpu-000001"), 0);
    assert_eq!(metrics.health.breaker_open.get_or_create(&pool).get(), 0);
}

#[tokio::test]
async fn do_not_repair_holds_a_sick_node_until_it_is_taken_off() {
    let cloud = Arc::new(Mutex::new(
        SimulatedCloud::new(catalog(), SimulatedCloudConfig::new(7, REGION, t(0))).unwrap(),
    ));
    let (claims, nodes) = fleet(&cloud, 1, json!({l::DO_NOT_REPAIR: "true"})).await;
    let s = store(vec![pool(json!({}))], vec![], nodes.clone(), claims);
    let (mut driver, writes, _metrics, _server) = driver(s.clone(), cloud.clone());
    driver.round(t(3600)).await;
    driver.round(t(3610)).await;
    assert_eq!(reboots(&cloud, "gpu-000000"), 0);
    let held = events(&taken(&writes), "RepairHeld");
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(held[0].1.contains("do-not-repair"), "{held:?}");
    let mut cleared = nodes[0].clone();
    cleared.metadata.annotations = None;
    s.apply(cleared);
    driver.round(t(3620)).await;
    let w = taken(&writes);
    assert_eq!(
        reboots(&cloud, "gpu-000000"),
        1,
        "{:?}",
        events(&w, "RebootFailed")
    );
}
