//! Controller-level sequences, driven through the snapshot, the core, the
//! executor and the lifecycle reconciler, with the Kubernetes API scripted
//! (every request checked: method, path, body) and the simulated cloud
//! behind the `CloudProvider` seam:
//! - a pending GPU pod leads to a NodeClaim, then to a launch;
//! - the registered node gets the claim's labels and taints, and becomes
//!   Initialized only once its GPU is advertised;
//! - a spot interruption leads to a checkpoint request, evictions only after
//!   the acknowledgement, then the claim's deletion, and the finalizer
//!   drains, terminates and lets the claim go;
//! - a restart in the middle of a launch neither doubles nor leaks the
//!   instance.

use crate::support;

use chrono::TimeZone;
use http::Method;
use k8s_openapi::api::core::v1 as core;
use kube::ResourceExt;
use quartermaster::api::foreign::VolcanoPodGroup;
use quartermaster::api::labels as l;
use quartermaster::api::nodeclaim::conditions;
use quartermaster::api::{NodeClaim, NodePool};
use quartermaster::catalog::Catalog;
use quartermaster::cloud::simulated::{SimulatedCloud, SimulatedCloudConfig};
use quartermaster::cloud::{collect_garbage, CloudProvider, InstanceState, NodeTemplate};
use quartermaster::controller::checkpoint::HookClient;
use quartermaster::controller::executor::{self, Executor, HookAcks, Outcome, Targets};
use quartermaster::controller::kube_api::KubeApi;
use quartermaster::controller::lifecycle::{Lifecycle, Step};
use quartermaster::controller::podgroups;
use quartermaster::controller::snapshot::{request_of, world_parts, Snapshot, Store};
use quartermaster::core::batch::DEFAULT_MAX_PODS;
use quartermaster::core::{Action, ClaimRequest, Config, Core, Notice, Time};
use quartermaster::metrics::karpenter::TerminatedLabels;
use quartermaster::metrics::{LaunchFailureLabels, Metrics};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use support::api_server::{echo, status_body, Scenario, Verifier};
use tokio::sync::watch;

const CLAIMS: &str = "/apis/quartermaster.dev/v1alpha1/nodeclaims";
const REGION: &str = "us-east-1";

fn catalog() -> Arc<Catalog> {
    static C: OnceLock<Arc<Catalog>> = OnceLock::new();
    C.get_or_init(|| Arc::new(Catalog::embedded().unwrap()))
        .clone()
}

fn t(s: i64) -> Time {
    chrono::Utc.timestamp_opt(1_767_571_200 + s, 0).unwrap()
}

fn cloud() -> Mutex<SimulatedCloud> {
    Mutex::new(SimulatedCloud::new(catalog(), SimulatedCloudConfig::new(7, REGION, t(0))).unwrap())
}

fn pool() -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "quartermaster.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "capacityTypes": ["spot", "on-demand"],
            "template": {"spec": {
                "requirements": [{"key": l::INSTANCE_FAMILY, "operator": "In", "values": ["g5"]}],
                "taints": [{"key": l::TAINT_GPU, "effect": "NoSchedule"}]
            }}
        }
    }))
    .unwrap()
}

fn gpu_pod(name: &str, node: Option<&str>, annotations: Value) -> core::Pod {
    let mut v = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": annotations},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests":
                {"cpu": "2", "memory": "8Gi", l::RESOURCE_GPU: "1"}}}],
            "tolerations": [{"key": l::TAINT_GPU, "operator": "Exists"}]
        },
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    });
    if let Some(n) = node {
        v["spec"]["nodeName"] = json!(n);
        v["status"] = json!({"phase": "Running", "podIP": "10.0.0.7"});
    }
    serde_json::from_value(v).unwrap()
}

fn node(
    name: &str,
    provider_id: &str,
    taints: Value,
    ready: bool,
    gpus: Option<&str>,
) -> core::Node {
    let mut allocatable = json!({"cpu": "3920m", "memory": "15Gi", "pods": "58"});
    if let Some(g) = gpus {
        allocatable[l::RESOURCE_GPU] = json!(g);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"providerID": provider_id, "taints": taints},
        "status": {
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
            "allocatable": allocatable
        }
    }))
    .unwrap()
}

/// The opted-in pod `ml/train-0` on `ip-10-0-0-1`, with the checkpoint
/// annotation `key` (requested or completed) at `at`.
fn checkpointing_pod(key: &str, at: Time) -> core::Pod {
    let mut annotations = json!({l::CHECKPOINT_ENABLED: "true"});
    annotations[key] = json!(quartermaster::controller::checkpoint::rfc3339(at));
    gpu_pod("train-0", Some("ip-10-0-0-1"), annotations)
}

/// A Ready one-GPU node as it is once cordoned for a disruption.
fn cordoned(name: &str, provider_id: &str) -> core::Node {
    let taints = json!([{"key": l::TAINT_GPU, "effect": "NoSchedule"},
        {"key": l::TAINT_DISRUPTED, "effect": "NoSchedule"}]);
    let mut n = node(name, provider_id, taints, true, Some("1"));
    n.spec.as_mut().unwrap().unschedulable = Some(true);
    n
}

/// The value a JSON patch sets at `path` (`null` when it does not).
fn patched<'a>(body: &'a Value, path: &str) -> &'a Value {
    body.as_array()
        .expect("a JSON patch")
        .iter()
        .find(|op| op["path"] == path && op["op"] != "test")
        .map_or(&Value::Null, |op| &op["value"])
}

/// A store holding these objects and [`pool`], synced.
fn store(pods: Vec<core::Pod>, nodes: Vec<core::Node>, claims: Vec<NodeClaim>) -> Store {
    store_with(vec![pool()], pods, nodes, claims)
}

/// A store holding these pools and objects, synced.
fn store_with(
    pools: Vec<NodePool>,
    pods: Vec<core::Pod>,
    nodes: Vec<core::Node>,
    claims: Vec<NodeClaim>,
) -> Store {
    let s = Store::new();
    s.reset(pools);
    s.reset(pods);
    s.reset(nodes);
    s.reset(claims);
    s.reset(Vec::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::new());
    assert!(s.is_synced());
    s
}

fn snapshot(s: &Store) -> Snapshot {
    s.read(Snapshot::clone)
}

fn lifecycle<'a>(
    api: &'a KubeApi,
    cloud: &'a Mutex<SimulatedCloud>,
    metrics: &'a Metrics,
) -> Lifecycle<'a, Mutex<SimulatedCloud>> {
    Lifecycle {
        api,
        cloud,
        metrics,
        launch_timeout: Duration::from_secs(300),
        registration_timeout: Duration::from_secs(600),
        catalog: catalog(),
        region: REGION,
        policies: no_policies(),
        hooks: hooks(),
        hook_acks: hook_acks(),
        launches: no_launches(),
    }
}

/// No pool policies (the default checkpoint grace).
fn no_policies() -> &'static BTreeMap<String, quartermaster::api::InterruptionPolicy> {
    static P: OnceLock<BTreeMap<String, quartermaster::api::InterruptionPolicy>> = OnceLock::new();
    P.get_or_init(BTreeMap::new)
}

fn hooks() -> &'static quartermaster::controller::checkpoint::HookClient {
    static H: OnceLock<quartermaster::controller::checkpoint::HookClient> = OnceLock::new();
    H.get_or_init(quartermaster::controller::checkpoint::HookClient::new)
}

fn hook_acks() -> &'static HookAcks {
    static A: OnceLock<HookAcks> = OnceLock::new();
    A.get_or_init(HookAcks::default)
}

fn no_launches() -> &'static quartermaster::controller::interruptions::Launches {
    static L: OnceLock<quartermaster::controller::interruptions::Launches> = OnceLock::new();
    L.get_or_init(Default::default)
}

/// Runs the executor over `actions` against `api`, as the leader.
async fn execute(api: &KubeApi, actions: &[Action], snap: &Snapshot, now: Time) -> Vec<Outcome> {
    execute_as(api, actions, snap, now, true, &[]).await.0
}

/// Runs the executor over `actions` against `api`, leading or not, with
/// the disruptions the core started, and returns the outcomes with the
/// metrics it kept.
async fn execute_as(
    api: &KubeApi,
    actions: &[Action],
    snap: &Snapshot,
    now: Time,
    leading: bool,
    disruptions: &[quartermaster::core::DisruptionDecision],
) -> (Vec<Outcome>, Arc<Metrics>) {
    let catalog = catalog();
    let parts = world_parts(snap, &catalog, REGION, now, DEFAULT_MAX_PODS);
    let world = parts.world(&catalog, REGION);
    let metrics = Arc::new(Metrics::unregistered());
    let (_tx, leader) = watch::channel(leading);
    let hooks = HookClient::new();
    let acks = HookAcks::default();
    let targets = Targets {
        nodes: snap
            .claims
            .values()
            .filter_map(|c| snap.node_of(c).map(|n| (c.name_any(), n.clone())))
            .collect(),
        pods: snap.pods.clone().into_iter().collect(),
    };
    let ex = Executor {
        api,
        metrics: &metrics,
        leader: &leader,
        events: None,
        hooks: &hooks,
        hook_acks: &acks,
        parallel: 1,
        disruptions,
    };
    let outcomes = ex
        .execute(actions, &world, &targets, now)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    (outcomes, metrics)
}

/// The claim the executor builds for a launch (as the API server stores it).
fn claim_for(req: &ClaimRequest, at: Time) -> NodeClaim {
    claim_in(req, at, &catalog(), &[pool()])
}

/// [`claim_for`], with this catalog and these pools.
fn claim_in(req: &ClaimRequest, at: Time, catalog: &Catalog, pools: &[NodePool]) -> NodeClaim {
    let world = quartermaster::core::World {
        catalog,
        region: REGION,
        pools,
        pending: &[],
        nodes: &[],
        pdbs: &[],
    };
    let mut c = executor::build_claim(req, &req.claim, &world, &[], at).unwrap();
    c.metadata.creation_timestamp = Some(quartermaster::controller::snapshot::to_k8s_time(at));
    c
}

/// Reconciles the claim `name` from the store at `at` against the API
/// scripted by `api` (what `Scenario::run` returns), and checks that every
/// scripted request was made.
async fn reconcile_scripted(
    api: (kube::Client, Verifier),
    s: &Store,
    cloud: &Mutex<SimulatedCloud>,
    metrics: &Metrics,
    name: &str,
    at: Time,
) -> Step {
    let (client, verifier) = api;
    let api = KubeApi::new(client);
    let view = s.read(|s| s.claim_view(&s.claims[name]));
    let step = lifecycle(&api, cloud, metrics)
        .reconcile(&view, at)
        .await
        .unwrap();
    verifier.finish().await;
    step
}

/// The core's decisions at `now` over what the store holds, with `catalog`.
fn decide_at(core: &mut Core, s: &Store, catalog: &Catalog, now: Time) -> Vec<Action> {
    let parts = world_parts(&snapshot(s), catalog, REGION, now, DEFAULT_MAX_PODS);
    core.decide(&parts.world(catalog, REGION), now)
}

/// Hands the core `notice` at `now`, over what the store holds.
fn notify(core: &mut Core, s: &Store, catalog: &Catalog, notice: &Notice, now: Time) {
    let parts = world_parts(&snapshot(s), catalog, REGION, now, DEFAULT_MAX_PODS);
    core.handle_notice(notice, &parts.world(catalog, REGION), now);
}

/// Hands the core EC2's spot interruption notice for `claim` at `at` (two
/// minutes before the instance goes), over what the store holds.
fn spot_notice(core: &mut Core, s: &Store, catalog: &Catalog, claim: &str, at: Time) {
    let notice = Notice::SpotInterruption {
        claim: claim.into(),
        deadline: at + chrono::TimeDelta::seconds(120),
    };
    notify(core, s, catalog, &notice, at);
}

/// Executes `actions` at `now` against an API scripted for exactly them
/// ([`script_for`], `node` the one cordoned) and checks that every scripted
/// request was made.
async fn execute_scripted(s: &Store, actions: &[Action], node: &str, now: Time) {
    let (client, verifier) = script_for(actions, node).run();
    execute(&KubeApi::new(client), actions, &snapshot(s), now).await;
    verifier.finish().await;
}

/// The decisions at `now` once `ml/train-0` acknowledged its checkpoint at
/// `ack_at`: they evict it.
fn acknowledged(
    core: &mut Core,
    s: &Store,
    catalog: &Catalog,
    ack_at: Time,
    now: Time,
) -> Vec<Action> {
    s.apply(checkpointing_pod(l::CHECKPOINT_COMPLETED, ack_at));
    let acts = decide_at(core, s, catalog, now);
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::Evict { pod, .. } if pod == "ml/train-0")),
        "{acts:?}"
    );
    acts
}

/// One round at `now` on node `ip-10-0-0-1` that must evict nothing: the
/// core decides, the executor writes through an API scripted for it.
async fn step_without_evictions(
    core: &mut Core,
    s: &Store,
    catalog: &Catalog,
    now: Time,
) -> Vec<Action> {
    let acts = decide_at(core, s, catalog, now);
    assert!(
        !acts.iter().any(|a| matches!(a, Action::Evict { .. })),
        "{acts:?}"
    );
    execute_scripted(s, &acts, "ip-10-0-0-1", now).await;
    acts
}

fn launches(actions: &[Action]) -> Vec<&ClaimRequest> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// A claim launched and registered on `node`, Ready (its instance launched
/// in `cloud`).
async fn ready_claim(cloud: &Mutex<SimulatedCloud>, node: &str) -> (NodeClaim, String) {
    ready_claim_named(cloud, "gpu-000001", node).await
}

/// [`ready_claim`] under the claim name `name`.
async fn ready_claim_named(
    cloud: &Mutex<SimulatedCloud>,
    name: &str,
    node: &str,
) -> (NodeClaim, String) {
    let claim = claim_for(&spot_request(name), t(0));
    ready(cloud, &spot_request(name), claim, node).await
}

/// The request for a spot g5.xlarge of pool `gpu` named `name`.
fn spot_request(name: &str) -> ClaimRequest {
    ClaimRequest {
        cluster_placement: false,
        claim: name.into(),
        nodepool: "gpu".into(),
        offering: quartermaster::core::OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: catalog()
                .offerings_of(REGION, "g5.xlarge")
                .find(|o| o.capacity_type == quartermaster::catalog::CapacityType::Spot)
                .unwrap()
                .zone_id
                .clone(),
            capacity_type: quartermaster::catalog::CapacityType::Spot,
        },
        price_per_hour: 0.5,
        pods: vec![],
        prewarm_window: None,
        reservation: None,
    }
}

/// `claim` (built for `req`) launched in `cloud` at 0 and registered on
/// `node`, Ready; with its provider ID.
async fn ready(
    cloud: &Mutex<SimulatedCloud>,
    req: &ClaimRequest,
    mut claim: NodeClaim,
    node: &str,
) -> (NodeClaim, String) {
    let instance = cloud
        .launch(req, &NodeTemplate::from(&claim.spec), t(0))
        .await
        .unwrap();
    claim.status = Some(ready_status(&instance.provider_id, node, t(60)));
    (claim, instance.provider_id)
}

/// The status of a claim whose instance `provider_id` registered as
/// `node` and went through every condition to Ready at `at`.
fn ready_status(provider_id: &str, node: &str, at: Time) -> quartermaster::api::NodeClaimStatus {
    let mut status = quartermaster::api::NodeClaimStatus {
        provider_id: Some(provider_id.into()),
        node_name: Some(node.into()),
        ..Default::default()
    };
    for c in [
        conditions::LAUNCHED,
        conditions::REGISTERED,
        conditions::INITIALIZED,
        conditions::READY,
    ] {
        quartermaster::controller::lifecycle::set_condition(&mut status, c, true, c, "", at);
    }
    status
}

fn claim_json(c: &NodeClaim) -> Value {
    serde_json::to_value(c).unwrap()
}

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

/// Scripts the API for `actions` in order, checking each request's body
/// against its action.
fn script_for(actions: &[Action], node: &str) -> Scenario {
    let mut sc = Scenario::new();
    for a in actions {
        sc = match a.clone() {
            Action::Launch(_) => sc.expect(Method::POST, CLAIMS, |_| {}).respond_with(echo),
            Action::Cordon { .. } => sc
                .expect(Method::PATCH, &format!("/api/v1/nodes/{node}"), |body| {
                    assert_eq!(patched(body, "/spec/unschedulable"), true);
                    let keys: Vec<&str> = patched(body, "/spec/taints")
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t["key"].as_str().unwrap())
                        .collect();
                    assert!(keys.contains(&l::TAINT_DISRUPTED), "{keys:?}");
                })
                .respond(
                    200,
                    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
                ),
            Action::RequestCheckpoint { pod, deadline, .. } => {
                let (ns, name) = pod.split_once('/').unwrap();
                let want = quartermaster::controller::checkpoint::rfc3339(deadline);
                sc.expect(Method::PATCH, &format!("/api/v1/namespaces/{ns}/pods/{name}"), move |body| {
                    assert_eq!(body["metadata"]["annotations"][l::CHECKPOINT_REQUESTED], json!(want));
                })
                .respond(200, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}}))
            }
            Action::Evict { pod, .. } => {
                let (ns, name) = pod.split_once('/').unwrap();
                let (ns2, name2) = (ns.to_string(), name.to_string());
                sc.expect(
                    Method::POST,
                    &format!("/api/v1/namespaces/{ns}/pods/{name}/eviction"),
                    move |body| {
                        assert_eq!(body["kind"], "Eviction");
                        assert_eq!(body["metadata"]["name"], json!(name2));
                        assert_eq!(body["metadata"]["namespace"], json!(ns2));
                    },
                )
                .respond(201, status_body(201, "", "evicted"))
            }
            Action::Delete { claim, .. } => sc
                .expect(Method::DELETE, &format!("{CLAIMS}/{claim}"), |_| {})
                .respond(200, status_body(200, "", "deleting")),
            // The cloud reboots; the executor writes nothing.
            Action::Reboot { .. } => sc,
            Action::Uncordon { .. } => sc
                .expect(Method::PATCH, &format!("/api/v1/nodes/{node}"), |body| {
                    assert_eq!(patched(body, "/spec/unschedulable"), false);
                })
                .respond(
                    200,
                    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
                ),
        };
    }
    sc
}

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

/// Executes `actions` (launches on types EC2 reports three network layers
/// for) and checks that each NodeClaim asks for the cluster placement
/// group.
async fn claims_go_into_one_placement_group(actions: &[Action], snap: &Snapshot) {
    let catalog = catalog();
    let reqs = launches(actions);
    let mut sc = Scenario::new();
    for r in &reqs {
        let labels = catalog.type_labels(&r.offering.instance_type).unwrap();
        assert_eq!(
            labels.get(l::NETWORK_LAYERS).map(String::as_str),
            Some("3"),
            "{r:?}"
        );
        sc = sc
            .expect(Method::POST, CLAIMS, |body| {
                assert_eq!(body["spec"]["labels"][l::CLUSTER_PLACEMENT], "true");
            })
            .respond_with(echo);
    }
    let (client, verifier) = sc.run();
    execute(&KubeApi::new(client), actions, snap, t(2)).await;
    verifier.finish().await;
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

/// Reconciles claim `name` of the store at 1 against `cloud`, which has no
/// capacity for it: the API is scripted for the claim's `Launched=False`
/// (InsufficientInstanceCapacity) status and its deletion.
async fn reconcile_out_of_capacity(
    s: &Store,
    cloud: &Mutex<SimulatedCloud>,
    metrics: &Metrics,
    name: &str,
) -> Step {
    let claim = s.read(|s| s.claims[name].clone());
    let api = Scenario::new()
        .expect(Method::PATCH, &format!("{CLAIMS}/{name}/status"), |body| {
            let c = &body["status"]["conditions"][0];
            assert_eq!(c["type"], conditions::LAUNCHED);
            assert_eq!(c["status"], "False");
            assert_eq!(c["reason"], "InsufficientInstanceCapacity");
        })
        .respond(200, claim_json(&claim))
        .expect(Method::DELETE, &format!("{CLAIMS}/{name}"), |_| {})
        .respond(200, status_body(200, "", "deleting"))
        .run();
    reconcile_scripted(api, s, cloud, metrics, name, t(1)).await
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

/// The loop's settings in these tests, with this core configuration.
fn loop_settings(core: Config) -> quartermaster::controller::run::Settings {
    quartermaster::controller::run::Settings {
        region: REGION.into(),
        cluster_name: "test".into(),
        core,
        tick: Duration::from_secs(10),
        launch_timeout: Duration::from_secs(300),
        registration_timeout: Duration::from_secs(600),
        gc_grace: Duration::from_secs(300),
        gpu_use: None,
    }
}

/// Every write the loop made: method, path and body.
type Writes = Arc<Mutex<Vec<(String, String, Value)>>>;

/// A loop over `pods` whose every write is accepted (objects echoed back)
/// and kept, with Events on, run for `rounds` rounds of ten seconds.
async fn run_loop(pods: Vec<core::Pod>, core: Config, rounds: i64) -> Writes {
    run_loop_with(vec![pool()], pods, core, rounds).await
}

/// [`run_loop`] with these pools.
async fn run_loop_with(
    pools: Vec<NodePool>,
    pods: Vec<core::Pod>,
    core: Config,
    rounds: i64,
) -> Writes {
    use quartermaster::controller::events::Events;
    use quartermaster::controller::run::{Context, Driver};
    use std::sync::atomic::AtomicBool;
    use support::api_server::Recorder;
    use tokio::sync::mpsc;

    let s = Arc::new(store_with(pools, pods, vec![], vec![]));
    let writes: Writes = Arc::default();
    let seen = writes.clone();
    let (client, _server) = Recorder::start(move |served, body| {
        seen.lock()
            .unwrap()
            .push((served.method.clone(), served.path.clone(), body.clone()));
        // A status patch answers with the whole pool, as the API server does.
        match served
            .path
            .strip_suffix("/status")
            .and_then(|p| p.split_once("/nodepools/"))
        {
            Some((_, name)) => (
                200,
                json!({"apiVersion": "quartermaster.dev/v1alpha1", "kind": "NodePool",
                       "metadata": {"name": name}, "spec": {}, "status": body["status"]}),
            ),
            None => echo(body),
        }
    });
    let (_leader_tx, leader) = watch::channel(true);
    let (_catalog_tx, catalog_rx) = watch::channel(catalog());
    let (_notices_tx, notices) = mpsc::channel(8);
    let ctx = Context {
        api: KubeApi::new(client.clone()),
        cloud: Arc::new(cloud()),
        metrics: Arc::new(Metrics::unregistered()),
        catalog: catalog_rx,
        leader,
        ready: Arc::new(AtomicBool::new(true)),
        notices,
        notice_acks: Default::default(),
        simulated_nodes: false,
    };
    let mut driver = Driver::new(ctx, loop_settings(core), s, t(0));
    driver.events = Some(Events::new(client, None));
    for k in 0..rounds {
        driver.round(t(k * 10)).await;
    }
    writes
}

/// The Events of `reason` the loop posted in namespace `ml`.
fn posted_events(writes: &Writes, reason: &str) -> Vec<Value> {
    posted_events_in(writes, "ml", reason)
}

/// The Events of `reason` the loop posted in `namespace`.
fn posted_events_in(writes: &Writes, namespace: &str, reason: &str) -> Vec<Value> {
    let path = format!("/apis/events.k8s.io/v1/namespaces/{namespace}/events");
    writes
        .lock()
        .unwrap()
        .iter()
        .filter(|(method, p, body)| method == "POST" && *p == path && body["reason"] == reason)
        .map(|(_, _, body)| body.clone())
        .collect()
}

/// The pods named by the Events of `reason`, sorted.
fn regarding(events: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = events
        .iter()
        .filter_map(|e| e["regarding"]["name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn pods_past_the_batch_cap_wait_for_the_next_batch_with_an_event_and_take_turns() {
    use quartermaster::controller::events::reasons;
    // Three pending pods, a cap of two per plan: the last (in the store's
    // order) waits for the next plan.
    let pods = (0..3)
        .map(|i| gpu_pod(&format!("train-{i}"), None, json!({})))
        .collect();
    let core = Config {
        max_batch_pods: 2,
        ..Config::default()
    };
    // Six rounds of ten seconds: within the minute a claim the watch has
    // not brought back counts in the world.
    let writes = run_loop(pods, core, 6).await;
    // The first plan keeps the first two (in the store's order) and the
    // last waits, with an Event saying why.
    let deferred = posted_events(&writes, reasons::BATCH_DEFERRED);
    let event = deferred.first().unwrap_or_else(|| panic!("{writes:#?}"));
    assert_eq!(event["regarding"]["kind"], "Pod");
    assert_eq!(event["regarding"]["namespace"], "ml");
    assert_eq!(event["regarding"]["name"], "train-2");
    assert_eq!(event["type"], "Warning");
    let note = event["note"].as_str().unwrap_or_default();
    assert!(note.contains("--max-batch-pods"), "{note}");
    // Each pod left out is told once, not once per round; the next plan
    // takes the pod the first one left out (another waits then): none
    // waits for ever.
    let told: Vec<String> = deferred
        .iter()
        .filter_map(|e| e["regarding"]["name"].as_str().map(str::to_string))
        .collect();
    let mut distinct = regarding(&deferred);
    distinct.dedup();
    assert_eq!(distinct.len(), told.len(), "{told:?}");
    assert!(told.len() >= 2, "train-2 was never taken in: {told:?}");
    // The first plan launched for the two pods it kept; later plans place
    // the pods they take in on those in-flight claims: nothing more.
    assert_eq!(
        regarding(&posted_events(&writes, reasons::NOMINATED)),
        ["train-0", "train-1"],
        "{writes:#?}"
    );
}

#[tokio::test]
async fn a_pod_asking_for_a_gpu_only_through_a_dra_claim_is_reported_not_placeable_and_gets_no_node(
) {
    use quartermaster::controller::events::reasons;
    let mut dra: core::Pod = serde_json::from_value(json!({
        "metadata": {"name": "dra", "namespace": "ml"},
        "spec": {
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-h100"}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]}}]
        },
        "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .unwrap();
    dra.metadata.uid = Some("uid-dra".into());
    let pods = vec![dra, gpu_pod("train-0", None, json!({}))];
    let writes = run_loop(pods, Config::default(), 3).await;
    let refused = posted_events(&writes, reasons::NOT_PLACEABLE);
    assert_eq!(regarding(&refused), ["dra"], "{writes:#?}");
    let note = refused[0]["note"].as_str().unwrap_or_default();
    assert!(note.contains("DRA resource claims (gpu)"), "{note}");
    // The GPU pod got its node; the DRA pod was not placed as a CPU pod.
    assert_eq!(
        regarding(&posted_events(&writes, reasons::NOMINATED)),
        ["train-0"]
    );
    let claims: Vec<Value> = writes
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, p, _)| m == "POST" && p.ends_with("/nodeclaims"))
        .map(|(_, _, b)| b.clone())
        .collect();
    assert_eq!(claims.len(), 1, "{claims:#?}");
}

#[tokio::test]
async fn a_gpu_pod_with_required_pod_affinity_is_reported_not_placeable_and_gets_no_node() {
    use quartermaster::controller::events::reasons;
    let mut near = gpu_pod("near-cache", None, json!({}));
    near.metadata.uid = Some("uid-near".into());
    near.spec.as_mut().unwrap().affinity = Some(
        serde_json::from_value(json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "cache"}}}
        ]}}))
        .unwrap(),
    );
    let pods = vec![near, gpu_pod("train-0", None, json!({}))];
    let writes = run_loop(pods, Config::default(), 3).await;
    let refused = posted_events(&writes, reasons::NOT_PLACEABLE);
    assert_eq!(regarding(&refused), ["near-cache"], "{writes:#?}");
    let note = refused[0]["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("required pod affinity on topology.kubernetes.io/zone"),
        "{note}"
    );
    // The other pod got its node; the one with the affinity got none.
    assert_eq!(
        regarding(&posted_events(&writes, reasons::NOMINATED)),
        ["train-0"]
    );
    let claims = writes
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, p, _)| m == "POST" && p.ends_with("/nodeclaims"))
        .count();
    assert_eq!(claims, 1, "{writes:#?}");
}

#[tokio::test]
async fn an_invalid_pool_gets_its_condition_and_one_event_naming_every_problem_and_launches_nothing(
) {
    use quartermaster::controller::events::reasons;
    let mut bad = pool();
    bad.spec.limits.insert(
        "nodes".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into()),
    );
    bad.spec.weight = Some(500);
    let pods = vec![gpu_pod("train-0", None, json!({}))];
    let writes = run_loop_with(vec![bad], pods, Config::default(), 4).await;
    let status: Vec<Value> = writes
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, p, _)| m == "PATCH" && p.ends_with("/nodepools/gpu/status"))
        .map(|(_, _, b)| b.clone())
        .collect();
    assert!(!status.is_empty(), "{writes:#?}");
    let conditions = status[0]["status"]["conditions"]
        .as_array()
        .unwrap()
        .clone();
    let valid = conditions
        .iter()
        .find(|c| c["type"] == "ValidationSucceeded")
        .unwrap();
    assert_eq!(valid["status"], "False");
    let message = valid["message"].as_str().unwrap();
    assert!(
        message.contains("spec.limits[nodes]") && message.contains("spec.weight"),
        "{message}"
    );
    // One Event (the events of a cluster-scoped object go to `default`),
    // naming both problems, however many rounds see the pool.
    let events = posted_events_in(&writes, "default", reasons::VALIDATION_FAILED);
    assert_eq!(events.len(), 1, "{writes:#?}");
    assert_eq!(events[0]["regarding"]["kind"], "NodePool");
    let note = events[0]["note"].as_str().unwrap();
    assert!(
        note.contains("spec.limits[nodes]") && note.contains("spec.weight"),
        "{note}"
    );
    // The pool is not widened into launching anything.
    assert!(posted_events(&writes, reasons::NOMINATED).is_empty());
    assert!(!writes
        .lock()
        .unwrap()
        .iter()
        .any(|(m, p, _)| m == "POST" && p.ends_with("/nodeclaims")));
}

/// An API server with no objects: every list is empty, watches stay open,
/// writes fail (and are counted), and discovery (`GET /apis`) names these
/// API `groups`. It records the path of every read.
fn empty_api_server(
    groups: Value,
) -> (
    kube::Client,
    Arc<std::sync::atomic::AtomicUsize>,
    Arc<Mutex<Vec<String>>>,
) {
    use http::{Request, Response};
    use kube::client::Body;
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = writes.clone();
    let paths = Arc::new(Mutex::new(Vec::new()));
    let read = paths.clone();
    tokio::spawn(async move {
        let mut open_watches = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let query = request.uri().query().unwrap_or("").to_string();
            let respond = |status: u16, body: Value| {
                Response::builder()
                    .status(status)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap()
            };
            if request.method() != Method::GET {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                send.send_response(respond(
                    500,
                    status_body(500, "InternalError", "no writes expected"),
                ));
                continue;
            }
            read.lock().unwrap().push(request.uri().path().to_string());
            if request.uri().path() == "/apis" {
                let list = json!({"apiVersion": "v1", "kind": "APIGroupList", "groups": groups});
                send.send_response(respond(200, list));
            } else if query.contains("watch=true") {
                open_watches.push(send);
            } else {
                let list = json!({"apiVersion": "v1", "kind": "List",
                                  "metadata": {"resourceVersion": "1"}, "items": []});
                send.send_response(respond(200, list));
            }
        }
    });
    (kube::Client::new(service, "default"), writes, paths)
}

/// Runs the controller loop against [`empty_api_server`] serving `groups`
/// until it turns ready, a few ticks more, and shutdown; returns the paths
/// it read.
async fn loop_until_ready(groups: Value) -> Vec<String> {
    use quartermaster::controller::run::{run, Context};
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    tokio::time::pause();
    let (client, writes, paths) = empty_api_server(groups);
    let (_leader_tx, leader) = watch::channel(true);
    let (_catalog_tx, catalog_rx) = watch::channel(catalog());
    let (_notices_tx, notices) = mpsc::channel(8);
    let ready = Arc::new(AtomicBool::new(false));
    let ctx = Context {
        api: KubeApi::new(client),
        cloud: Arc::new(cloud()),
        metrics: Arc::new(Metrics::unregistered()),
        catalog: catalog_rx,
        leader,
        ready: ready.clone(),
        notices,
        notice_acks: Default::default(),
        simulated_nodes: true,
    };
    let settings = loop_settings(Config::default());
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run(ctx, settings, shutdown.clone()));
    for _ in 0..100 {
        if ready.load(Ordering::Acquire) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        ready.load(Ordering::Acquire),
        "ready after every kind listed"
    );
    // A few ticks of an empty cluster: no writes.
    tokio::time::sleep(Duration::from_secs(35)).await;
    assert_eq!(writes.load(Ordering::SeqCst), 0);
    shutdown.cancel();
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the loop stops on shutdown")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
    let paths = paths.lock().unwrap().clone();
    paths
}

#[tokio::test]
async fn the_loop_turns_ready_once_every_watch_has_listed_and_stops_on_shutdown() {
    loop_until_ready(json!([])).await;
}

/// The paths read that name one of the optional gang APIs.
fn gang_api_reads(paths: &[String]) -> Vec<&str> {
    paths
        .iter()
        .map(String::as_str)
        .filter(|p| {
            [
                "scheduling.volcano.sh",
                "scheduling.k8s.io",
                "autoscaling.x-k8s.io",
            ]
            .iter()
            .any(|g| p.contains(g))
        })
        .collect()
}

#[tokio::test]
async fn a_cluster_without_the_gang_apis_is_asked_once_and_never_watched_for_them() {
    let paths = loop_until_ready(json!([
        {"name": "scheduling.k8s.io", "versions": [{"groupVersion": "scheduling.k8s.io/v1", "version": "v1"}]}
    ]))
    .await;
    assert_eq!(
        paths.iter().filter(|p| *p == "/apis").count(),
        1,
        "{paths:?}"
    );
    assert_eq!(gang_api_reads(&paths), [] as [&str; 0]);
}

#[tokio::test]
async fn served_gang_apis_are_listed_before_the_loop_turns_ready() {
    let group = |name: &str, version: &str| json!({"name": name, "versions": [{"groupVersion": format!("{name}/{version}"), "version": version}]});
    let paths = loop_until_ready(json!([
        group("scheduling.volcano.sh", "v1beta1"),
        // Kubernetes 1.37: the Workload API's beta beside its alpha.
        json!({"name": "scheduling.k8s.io", "versions": [
            {"groupVersion": "scheduling.k8s.io/v1beta1", "version": "v1beta1"},
            {"groupVersion": "scheduling.k8s.io/v1alpha3", "version": "v1alpha3"}]}),
        group("autoscaling.x-k8s.io", "v1"),
    ]))
    .await;
    let reads = gang_api_reads(&paths);
    assert!(
        !reads.iter().any(|p| p.contains("v1alpha3")),
        "the beta only: {reads:?}"
    );
    for want in [
        "/apis/scheduling.volcano.sh/v1beta1/podgroups",
        "/apis/scheduling.k8s.io/v1beta1/podgroups",
        "/apis/autoscaling.x-k8s.io/v1/provisioningrequests",
    ] {
        assert!(reads.contains(&want), "{want} not in {reads:?}");
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

/// The simulated cloud, with requirements of its own on every pool's nodes
/// (as EC2 adds those of a pool's node class: only what it has images for).
struct Narrowed {
    inner: Mutex<SimulatedCloud>,
    requirements: Vec<quartermaster::api::Requirement>,
    problem: Option<String>,
    /// What a launch would be made with now (node class hash, image).
    stamp: Option<quartermaster::core::drift::ClassStamp>,
    /// Calls of `collect_unused_resources`.
    collected: std::sync::atomic::AtomicUsize,
}

impl Narrowed {
    fn new(requirements: Vec<quartermaster::api::Requirement>, problem: Option<String>) -> Self {
        Narrowed {
            inner: cloud(),
            requirements,
            problem,
            stamp: None,
            collected: Default::default(),
        }
    }
}

impl CloudProvider for Narrowed {
    async fn launch(
        &self,
        claim: &ClaimRequest,
        template: &NodeTemplate,
        now: Time,
    ) -> quartermaster::cloud::Result<quartermaster::cloud::Instance> {
        self.inner.launch(claim, template, now).await
    }
    async fn terminate(
        &self,
        claim: &str,
        now: Time,
    ) -> quartermaster::cloud::Result<quartermaster::cloud::Instance> {
        self.inner.terminate(claim, now).await
    }
    async fn reboot(
        &self,
        claim: &str,
        now: Time,
    ) -> quartermaster::cloud::Result<quartermaster::cloud::Instance> {
        self.inner.reboot(claim, now).await
    }
    async fn describe(
        &self,
        claim: &str,
    ) -> quartermaster::cloud::Result<Option<quartermaster::cloud::Instance>> {
        self.inner.describe(claim).await
    }
    async fn instances(&self) -> quartermaster::cloud::Result<Vec<quartermaster::cloud::Instance>> {
        self.inner.instances().await
    }
    fn pool_requirements(&self, _: &str) -> Vec<quartermaster::api::Requirement> {
        self.requirements.clone()
    }
    fn pool_problem(&self, _: &str) -> Option<String> {
        self.problem.clone()
    }
    fn launch_stamp(
        &self,
        _: &quartermaster::api::NodeClaimSpec,
    ) -> Option<quartermaster::core::drift::ClassStamp> {
        self.stamp.clone()
    }
    async fn collect_unused_resources(
        &self,
        _: Time,
        _: chrono::TimeDelta,
    ) -> quartermaster::cloud::Result<(Vec<String>, Vec<quartermaster::cloud::Error>)> {
        self.collected
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok((vec!["lt-unused".into()], Vec::new()))
    }
}

#[tokio::test]
async fn the_loop_plans_only_what_the_cloud_can_launch_for_the_pool() {
    use quartermaster::api::{Operator, Requirement};
    use quartermaster::controller::events::{reasons, Events};
    use quartermaster::controller::run::{Context, Driver};
    use std::sync::atomic::AtomicBool;
    use support::api_server::Recorder;
    use tokio::sync::mpsc;

    // One pending GPU pod; the pool's node class has no NVIDIA image (the
    // cloud adds gpu-name DoesNotExist), or has every image (no addition).
    async fn claims_and_unplaced(
        requirements: Vec<Requirement>,
        problem: Option<String>,
    ) -> (usize, Vec<String>, Vec<Value>) {
        let s = Arc::new(store(
            vec![gpu_pod("train-0", None, json!({}))],
            vec![],
            vec![],
        ));
        let writes: Arc<Mutex<Vec<(String, String, Value)>>> = Arc::default();
        let seen = writes.clone();
        let (client, _server) = Recorder::start(move |served, body| {
            seen.lock()
                .unwrap()
                .push((served.method.clone(), served.path.clone(), body.clone()));
            echo(body)
        });
        let (_leader_tx, leader) = watch::channel(true);
        let (_catalog_tx, catalog_rx) = watch::channel(catalog());
        let (_notices_tx, notices) = mpsc::channel(8);
        let ctx = Context {
            api: KubeApi::new(client.clone()),
            cloud: Arc::new(Narrowed::new(requirements, problem)),
            metrics: Arc::new(Metrics::unregistered()),
            catalog: catalog_rx,
            leader,
            ready: Arc::new(AtomicBool::new(true)),
            notices,
            notice_acks: Default::default(),
            simulated_nodes: false,
        };
        let mut driver = Driver::new(ctx, loop_settings(Config::default()), s.clone(), t(0));
        driver.events = Some(Events::new(client, None));
        for k in 0..8 {
            driver.round(t(k)).await;
        }
        let writes = writes.lock().unwrap().clone();
        let count = |f: &dyn Fn(&str, &str, &Value) -> bool| {
            writes.iter().filter(|(m, p, b)| f(m, p, b)).count()
        };
        let notes: Vec<String> = writes
            .iter()
            .filter(|(m, _, b)| m == "POST" && b["reason"] == reasons::NOT_PLACEABLE)
            .map(|(_, _, b)| b["note"].as_str().unwrap_or_default().to_string())
            .collect();
        let pool_readiness: Vec<Value> = writes
            .iter()
            .filter(|(m, p, _)| m == "PATCH" && p.ends_with("/nodepools/gpu/status"))
            .flat_map(|(_, _, b)| {
                b["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|c| c["type"] == "Ready")
            .collect();
        (
            count(&|m, p, _| m == "POST" && p == CLAIMS),
            notes,
            pool_readiness,
        )
    }
    let (claims, unplaced, ready) = claims_and_unplaced(Vec::new(), None).await;
    assert_eq!((claims, unplaced), (1, Vec::new()));
    assert!(ready.iter().all(|c| c["status"] == "True"), "{ready:?}");
    let (claims, unplaced, _) = claims_and_unplaced(
        vec![Requirement::new(l::GPU_NAME, Operator::DoesNotExist, &[])],
        None,
    )
    .await;
    assert_eq!(claims, 0);
    // The pod's reason names the requirement that left nothing.
    assert!(!unplaced.is_empty());
    assert!(
        unplaced
            .iter()
            .all(|n| n.contains("gpu: ") && n.contains("quartermaster.dev/gpu-name DoesNotExist")),
        "{unplaced:?}"
    );
    // A pool the cloud cannot launch for at all is not planned (no claim
    // waits for a launch that cannot happen; the pod is reported), and says
    // why in its status.
    let why = "EC2NodeClass gpu is not Ready: SubnetsNotFound: no subnet matches".to_string();
    let (claims, unplaced, ready) = claims_and_unplaced(Vec::new(), Some(why)).await;
    assert_eq!(claims, 0);
    assert!(!unplaced.is_empty());
    assert!(
        unplaced.iter().all(|n| n.contains(
            "NodePool gpu launches nothing: EC2NodeClass gpu is not Ready: SubnetsNotFound"
        )),
        "{unplaced:?}"
    );
    assert!(!ready.is_empty());
    assert!(
        ready.iter().all(|c| c["status"] == "False"
            && c["reason"] == "NodeClassNotReady"
            && c["message"]
                .as_str()
                .is_some_and(|m| m.contains("SubnetsNotFound"))),
        "{ready:?}"
    );
}

/// The loop, leading, over a store and a cloud, against a permissive API
/// server that answers with `answer` and keeps every request; Events on.
struct RecordedLoop<C> {
    driver: quartermaster::controller::run::Driver<C>,
    writes: Writes,
    /// The feed of cloud notices into the loop.
    notices: tokio::sync::mpsc::Sender<quartermaster::cloud::InstanceNotice>,
    /// What the loop reported of each notice.
    acks: quartermaster::cloud::NoticeAcks,
    _server: support::api_server::Recorder,
}

impl<C: CloudProvider + Send + Sync + 'static> RecordedLoop<C> {
    fn start(
        s: &Arc<Store>,
        cloud: Arc<C>,
        metrics: Arc<Metrics>,
        core: Config,
        answer: impl Fn(&support::api_server::Served, &Value) -> (u16, Value) + Send + 'static,
    ) -> RecordedLoop<C> {
        use quartermaster::controller::run::{Context, Driver};
        let writes: Writes = Arc::default();
        let seen = writes.clone();
        let (client, server) = support::api_server::Recorder::start(move |served, body| {
            seen.lock()
                .unwrap()
                .push((served.method.clone(), served.path.clone(), body.clone()));
            answer(served, body)
        });
        let (_leader_tx, leader) = watch::channel(true);
        let (_catalog_tx, catalog_rx) = watch::channel(catalog());
        let (notices_tx, notices) = tokio::sync::mpsc::channel(8);
        let acks = quartermaster::cloud::NoticeAcks::default();
        let ctx = Context {
            api: KubeApi::new(client.clone()),
            cloud,
            metrics,
            catalog: catalog_rx,
            leader,
            ready: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            notices,
            notice_acks: acks.clone(),
            simulated_nodes: false,
        };
        let mut driver = Driver::new(ctx, loop_settings(core), s.clone(), t(0));
        driver.events = Some(quartermaster::controller::events::Events::new(client, None));
        RecordedLoop {
            driver,
            writes,
            notices: notices_tx,
            acks,
            _server: server,
        }
    }

    /// The requests so far, forgotten here.
    fn take(&self) -> Vec<(String, String, Value)> {
        std::mem::take(&mut *self.writes.lock().unwrap())
    }
}

/// A store holding `claim` Ready on node `ip-10-0-0-1` (its instance
/// `provider_id`) with these pods, and [`pool`].
fn on_one_node(pods: Vec<core::Pod>, claim: &NodeClaim, provider_id: &str) -> Arc<Store> {
    let node = node("ip-10-0-0-1", provider_id, json!([]), true, Some("1"));
    Arc::new(store(pods, vec![node], vec![claim.clone()]))
}

/// An API server's answers that accept every write: claim patches answer
/// `claim`, node patches a node, evictions are granted, pool patches
/// answer [`pool`], the rest is echoed.
fn accepting(
    claim: &NodeClaim,
) -> impl Fn(&support::api_server::Served, &Value) -> (u16, Value) + Send + 'static {
    let claim = claim_json(claim);
    move |served, body| match (served.method.as_str(), served.path.as_str()) {
        ("PATCH", p) if p.starts_with(CLAIMS) => (200, claim.clone()),
        ("PATCH", p) if p.starts_with("/api/v1/nodes/") => (
            200,
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-10-0-0-1"}}),
        ),
        ("POST", p) if p.ends_with("/eviction") => (201, status_body(201, "", "evicted")),
        ("PATCH", _) => (200, serde_json::to_value(pool()).unwrap()),
        _ => echo(body),
    }
}

/// The claim `created` (as the loop posted it) Ready on node
/// `ip-10-0-0-2`, as the watches would bring it and its node back; its
/// name.
fn replacement_ready(s: &Store, created: &Value) -> String {
    let mut ready: NodeClaim = serde_json::from_value(created.clone()).unwrap();
    let name = ready.name_any();
    let provider = "aws:///use1-az1/i-0replacement";
    ready.status = Some(ready_status(provider, "ip-10-0-0-2", t(150)));
    ready.metadata.creation_timestamp =
        Some(quartermaster::controller::snapshot::to_k8s_time(t(100)));
    s.apply(ready);
    s.apply(node("ip-10-0-0-2", provider, json!([]), true, Some("1")));
    name
}

/// The loop as production builds it, behind the leader fence: a claim
/// launched with an image the node class no longer gives is marked
/// `Drifted` (`ImageChanged`), and garbage collection asks the cloud to
/// delete unused resources (EC2: launch templates), both through `Fenced`.
#[tokio::test]
async fn drift_and_unused_resource_collection_run_through_the_leader_fence() {
    use quartermaster::controller::fence::Fenced;
    use quartermaster::core::drift::ClassStamp;
    use std::sync::atomic::Ordering;

    let mut narrowed = Narrowed::new(Vec::new(), None);
    let (mut old, provider_id) = ready_claim(&narrowed.inner, "ip-10-0-0-1").await;
    let status = old.status.as_mut().unwrap();
    status.node_class_hash = Some("class-1".into());
    status.image_id = Some("ami-old".into());
    narrowed.stamp = Some(ClassStamp {
        hash: "class-1".into(),
        image: "ami-new".into(),
    });
    let s = on_one_node(vec![], &old, &provider_id);
    let metrics = Arc::new(Metrics::unregistered());
    let (_leader_tx, leader) = watch::channel(true);
    let fenced = Arc::new(Fenced::new(narrowed, leader, metrics.clone()));
    let answer = accepting(&old);
    let mut run = RecordedLoop::start(&s, fenced.clone(), metrics, Config::default(), answer);
    run.driver.round(t(100)).await;
    let writes = run.take();
    let drifted = writes
        .iter()
        .filter(|(m, p, _)| m == "PATCH" && *p == format!("{CLAIMS}/gpu-000001/status"))
        .flat_map(|(_, _, b)| {
            b["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .find(|c| c["type"] == conditions::DRIFTED)
        .unwrap_or_else(|| panic!("no Drifted condition written: {writes:#?}"));
    assert_eq!(drifted["status"], "True");
    assert_eq!(drifted["reason"], "ImageChanged");
    // Garbage collection runs beside the loop.
    run.driver.wait_for_gc().await;
    assert_eq!(fenced.inner().collected.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_drifted_claim_is_marked_and_replaced_new_node_first_then_cordoned_and_drained() {
    let cloud = cloud();
    let (mut old, provider_id) = ready_claim(&cloud, "ip-10-0-0-1").await;
    // Launched from a template the pool no longer has (its labels changed
    // since): the hash the claim carries is not the pool's.
    old.metadata
        .annotations
        .get_or_insert_default()
        .insert(l::NODEPOOL_HASH.into(), "0123456789abcdef".into());
    let s = on_one_node(
        vec![gpu_pod("train-0", Some("ip-10-0-0-1"), json!({}))],
        &old,
        &provider_id,
    );
    // Every write is accepted and kept, in order.
    let metrics = Arc::new(Metrics::unregistered());
    let answer = accepting(&old);
    let mut run = RecordedLoop::start(
        &s,
        Arc::new(cloud),
        metrics.clone(),
        Config::default(),
        answer,
    );
    for k in 100..103 {
        run.driver.round(t(k)).await;
    }
    let first = run.take();
    let claim_status = format!("{CLAIMS}/gpu-000001/status");
    let drifted: Vec<&Value> = first
        .iter()
        .filter(|(m, p, _)| m == "PATCH" && *p == claim_status)
        .map(|(_, _, b)| b)
        .collect();
    let cond = drifted
        .first()
        .and_then(|b| b["status"]["conditions"].as_array())
        .and_then(|c| c.iter().find(|c| c["type"] == conditions::DRIFTED))
        .unwrap_or_else(|| panic!("no Drifted condition written: {first:#?}"));
    assert_eq!(cond["status"], "True");
    assert_eq!(cond["reason"], "PoolTemplateChanged");
    // The condition keeps the claim's other conditions.
    assert!(drifted[0]["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == conditions::READY));
    // An Event on the claim says so, once.
    let events: Vec<&Value> = first
        .iter()
        .filter(|(m, p, b)| m == "POST" && p.ends_with("/events") && b["reason"] == "Drifted")
        .map(|(_, _, b)| b)
        .collect();
    assert_eq!(events.len(), 1, "{first:#?}");
    assert_eq!(events[0]["regarding"]["kind"], "NodeClaim");
    assert_eq!(events[0]["regarding"]["name"], "gpu-000001");
    assert!(events[0]["note"]
        .as_str()
        .is_some_and(|n| n.contains("template changed")));
    // One replacement, for the drifted node's pod; nothing drained yet.
    let created: Vec<&Value> = first
        .iter()
        .filter(|(m, p, _)| m == "POST" && p == CLAIMS)
        .map(|(_, _, b)| b)
        .collect();
    assert_eq!(created.len(), 1, "{first:#?}");
    assert_eq!(created[0]["spec"]["nodePool"], "gpu");
    assert!(
        !first
            .iter()
            .any(|(_, p, _)| p.starts_with("/api/v1/nodes/") || p.ends_with("/eviction")),
        "drained before the replacement is ready: {first:#?}"
    );

    // The replacement is Ready (with the condition written, the old claim
    // is as the watch would bring it back): the old node is cordoned, then
    // its pod evicted.
    let mut marked = old.clone();
    let status = marked.status.as_mut().unwrap();
    status
        .conditions
        .push(serde_json::from_value(cond.clone()).unwrap());
    s.apply(marked);
    let name = replacement_ready(&s, created[0]);
    for k in 200..203 {
        run.driver.round(t(k)).await;
    }
    let then = run.take();
    let at = |pred: &dyn Fn(&(String, String, Value)) -> bool| then.iter().position(pred);
    let cordon = at(&|(m, p, _)| m == "PATCH" && p == "/api/v1/nodes/ip-10-0-0-1")
        .unwrap_or_else(|| panic!("no cordon: {then:#?}"));
    let evict = at(&|(m, p, _)| m == "POST" && p == "/api/v1/namespaces/ml/pods/train-0/eviction")
        .unwrap_or_else(|| panic!("no eviction: {then:#?}"));
    assert!(cordon < evict, "{then:#?}");
    let replaced = metrics
        .drift_replacements
        .get_or_create(&quartermaster::metrics::PoolLabels {
            nodepool: "gpu".into(),
        })
        .get();
    assert_eq!(replaced, 1);
    assert_eq!(
        patched(&then[cordon].2, "/spec/taints")[0]["key"],
        l::TAINT_DISRUPTED
    );
    // The replacement is neither drifted nor touched; the condition is not
    // written again.
    assert!(
        !then
            .iter()
            .any(|(_, p, _)| p.contains(&name) || *p == claim_status),
        "{then:#?}"
    );
}

/// AWS Health schedules the retirement of a node's instance in three
/// days: the loop records it on the claim (`Interrupted`, reason
/// `ScheduledChange`, with the start) and cordons the node before it lets
/// the message go, launches a replacement first, and evicts the node's pod
/// only once the replacement is Ready.
#[tokio::test]
async fn a_scheduled_retirement_is_recorded_cordoned_and_replaced_before_the_pod_moves() {
    use quartermaster::cloud::{instance_id_of, InstanceNotice, NoticeKind, NoticeOutcome};

    let cloud = cloud();
    let (claim, provider_id) = ready_claim(&cloud, "ip-10-0-0-1").await;
    let s = on_one_node(
        vec![gpu_pod("train-0", Some("ip-10-0-0-1"), json!({}))],
        &claim,
        &provider_id,
    );
    let answer = accepting(&claim);
    let metrics = Arc::new(Metrics::unregistered());
    let mut run = RecordedLoop::start(&s, Arc::new(cloud), metrics, Config::default(), answer);
    let start = t(100) + chrono::TimeDelta::days(3);
    let notice = InstanceNotice {
        instance_id: instance_id_of(&provider_id).to_string(),
        kind: NoticeKind::ScheduledChange { start: Some(start) },
        time: t(100),
        id: "e-retire".into(),
    };
    run.notices.send(notice.clone()).await.unwrap();
    for k in 100..104 {
        run.driver.round(t(k)).await;
    }
    let first = run.take();
    let claim_status = format!("{CLAIMS}/gpu-000001/status");
    let record = first
        .iter()
        .position(|(m, p, _)| m == "PATCH" && *p == claim_status)
        .unwrap_or_else(|| panic!("no record on the claim: {first:#?}"));
    let cond = first[record].2["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == conditions::INTERRUPTED))
        .cloned()
        .unwrap();
    assert_eq!(cond["reason"], "ScheduledChange");
    assert!(
        cond["message"]
            .as_str()
            .is_some_and(|m| m.ends_with(&start.format("%Y-%m-%dT%H:%M:%SZ").to_string())),
        "{cond}"
    );
    let cordon = first
        .iter()
        .position(|(m, p, _)| m == "PATCH" && p == "/api/v1/nodes/ip-10-0-0-1")
        .unwrap_or_else(|| panic!("no cordon: {first:#?}"));
    assert!(record < cordon);
    assert_eq!(
        patched(&first[cordon].2, "/spec/taints")[0]["key"],
        l::TAINT_DISRUPTED
    );
    // Let go only once recorded.
    let acks: Vec<_> = run.acks.take().into_iter().map(|a| a.outcome).collect();
    assert_eq!(acks, [NoticeOutcome::Recorded]);
    // A replacement is launched for the pod, which stays where it is.
    let created: Vec<&Value> = first
        .iter()
        .filter(|(m, p, _)| m == "POST" && p == CLAIMS)
        .map(|(_, _, b)| b)
        .collect();
    assert_eq!(created.len(), 1, "{first:#?}");
    assert!(
        !first.iter().any(|(_, p, _)| p.ends_with("/eviction")),
        "evicted before the replacement is ready: {first:#?}"
    );

    // The replacement is Ready: the pod is evicted, the claim deleted
    // once its node is empty.
    replacement_ready(&s, created[0]);
    for k in 200..203 {
        run.driver.round(t(k)).await;
    }
    let then = run.take();
    assert!(
        then.iter()
            .any(|(m, p, _)| m == "POST" && p == "/api/v1/namespaces/ml/pods/train-0/eviction"),
        "no eviction: {then:#?}"
    );
}

/// The Capacity Block of the block tests.
const BLOCK: &str = "cr-0b10c000000000001";

/// [`pool`], also allowing reserved capacity (so that a replacement that
/// is not in the ending block shows it was refused, not never offered).
fn reserved_pool() -> NodePool {
    let mut p = pool();
    p.spec
        .capacity_types
        .insert(0, quartermaster::catalog::CapacityType::Reserved);
    p
}

/// The embedded catalog with [`BLOCK`], two g5.xlarge (one taken) in
/// `zone` ending at `end`, as the controller's reservations task hands it
/// over at `now`.
fn block_catalog(zone: &str, end: Time, now: Time) -> Arc<Catalog> {
    let block = quartermaster::catalog::Reservation {
        id: BLOCK.into(),
        kind: quartermaster::catalog::ReservationKind::CapacityBlock,
        instance_type: "g5.xlarge".into(),
        region: REGION.into(),
        zone_id: zone.into(),
        total: 2,
        available: 1,
        start: None,
        end: Some(end),
        price_per_hour: 0.0,
    };
    let lead = chrono::TimeDelta::minutes(40);
    Arc::new((*catalog()).clone().with_reservations(&[block], now, lead))
}

/// A node `ip-10-0-0-1` in [`BLOCK`] (ending at `end`), launched into it at
/// 0, with an opted-in pod `ml/train-0`: the store, the claim's name, its
/// provider ID and the block's zone.
async fn block_node(end: Time) -> (Store, String, String, String) {
    let mut req = spot_request("gpu-block");
    req.offering.capacity_type = quartermaster::catalog::CapacityType::Reserved;
    req.reservation = Some(BLOCK.into());
    req.price_per_hour = 0.0;
    let zone = req.offering.zone.clone();
    let at_launch = block_catalog(&zone, end, t(0));
    let cloud = Mutex::new(
        SimulatedCloud::new(
            at_launch.clone(),
            SimulatedCloudConfig::new(7, REGION, t(0)),
        )
        .unwrap(),
    );
    let claim = claim_in(&req, t(0), &at_launch, &[reserved_pool()]);
    assert_eq!(claim.spec.labels[l::CAPACITY_RESERVATION_ID], BLOCK);
    let (claim, provider_id) = ready(&cloud, &req, claim, "ip-10-0-0-1").await;
    let gpu_taint = json!([{"key": l::TAINT_GPU, "effect": "NoSchedule"}]);
    let s = store_with(
        vec![reserved_pool()],
        vec![gpu_pod(
            "train-0",
            Some("ip-10-0-0-1"),
            json!({l::CHECKPOINT_ENABLED: "true"}),
        )],
        vec![node(
            "ip-10-0-0-1",
            &provider_id,
            gpu_taint,
            true,
            Some("1"),
        )],
        vec![claim.clone()],
    );
    (s, claim.name_any(), provider_id, zone)
}

/// The deadlines of the checkpoint requests among `actions`, by pod.
fn checkpoint_deadlines(actions: &[Action]) -> Vec<(String, Time)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::RequestCheckpoint { pod, deadline, .. } => Some((pod.clone(), *deadline)),
            _ => None,
        })
        .collect()
}

fn cordons(actions: &[Action], claim: &str) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Cordon { claim: c, .. } if c == claim))
        .count()
}

#[tokio::test]
async fn ec2s_block_expiry_warning_drains_the_blocks_node_checkpoint_replacement_then_eviction() {
    let end = t(20_000);
    let (s, claim, provider_id, zone) = block_node(end).await;
    // EC2's warning comes a little before the clock's own 40-minute lead.
    let warning_at = end - chrono::TimeDelta::minutes(41);
    let catalog = block_catalog(&zone, end, warning_at);
    let mut core = Core::new(Config::default());
    let before = decide_at(&mut core, &s, &catalog, warning_at);
    assert_eq!(cordons(&before, &claim), 0, "{before:?}");

    // The warning names the block; the controller finds its claim by
    // label, without writing anything.
    let warning = quartermaster::cloud::InstanceNotice {
        instance_id: BLOCK.into(),
        kind: quartermaster::cloud::NoticeKind::ReservationEnding { end },
        time: warning_at,
        id: "e-block".into(),
    };
    let views = s.read(|s| {
        s.claims
            .values()
            .map(|c| s.claim_view(c))
            .collect::<Vec<_>>()
    });
    let (client, verifier) = Scenario::new().run();
    let mut handler = quartermaster::controller::interruptions::NoticeHandler::new();
    let handled = handler
        .handle(&warning, &views, &KubeApi::new(client), true, warning_at)
        .await;
    verifier.finish().await;
    assert_eq!(
        handled.outcome,
        quartermaster::cloud::NoticeOutcome::Recorded
    );
    let expected = Notice::ReservationEnding {
        claim: claim.clone(),
        end,
    };
    assert_eq!(handled.notices, std::slice::from_ref(&expected));
    notify(&mut core, &s, &catalog, &expected, warning_at);

    // Cordon and checkpoint request at once, within the pool's grace
    // (90 s, well before the block's end less the drain grace); no
    // eviction before the acknowledgement.
    let first = decide_at(&mut core, &s, &catalog, warning_at);
    assert_eq!(cordons(&first, &claim), 1, "{first:?}");
    assert_eq!(
        checkpoint_deadlines(&first),
        [(
            "ml/train-0".to_string(),
            warning_at + chrono::TimeDelta::seconds(90)
        )],
        "{first:?}"
    );
    assert!(!first.iter().any(|a| matches!(a, Action::Evict { .. })));
    execute_scripted(&s, &first, "ip-10-0-0-1", warning_at).await;
    s.apply(cordoned("ip-10-0-0-1", &provider_id));
    let deadline = warning_at + chrono::TimeDelta::seconds(90);
    s.apply(checkpointing_pod(l::CHECKPOINT_REQUESTED, deadline));

    // The pod is demand again from the warning on: its replacement is
    // launched while it writes its checkpoint, outside the ending block
    // (which takes no launch this close to its end).
    let mut replacement = None;
    for k in 1..5 {
        let now = warning_at + chrono::TimeDelta::seconds(k);
        let acts = step_without_evictions(&mut core, &s, &catalog, now).await;
        if let Some(r) = launches(&acts).first() {
            replacement = Some((*r).clone());
        }
        if replacement.is_some() {
            break;
        }
    }
    let replacement = replacement.expect("a replacement is launched before the eviction");
    assert_eq!(replacement.pods, ["ml/train-0"]);
    assert_ne!(
        replacement.offering.capacity_type,
        quartermaster::catalog::CapacityType::Reserved,
        "{replacement:?}"
    );
    assert_eq!(replacement.reservation, None);

    // The workload acknowledges: the pod is evicted, well before the end.
    let ack_at = warning_at + chrono::TimeDelta::seconds(30);
    let now = ack_at + chrono::TimeDelta::seconds(1);
    let acts = acknowledged(&mut core, &s, &catalog, ack_at, now);
    execute_scripted(&s, &acts, "ip-10-0-0-1", now).await;
}

#[tokio::test]
async fn without_ec2s_warning_the_clock_drains_a_block_node_and_a_late_look_checkpoints_by_the_blocks_end(
) {
    let end = t(20_000);
    let (s, claim, _, zone) = block_node(end).await;
    let lead = chrono::TimeDelta::minutes(40);
    let catalog = block_catalog(&zone, end, end - lead);
    let mut core = Core::new(Config::default());
    let early = end - lead - chrono::TimeDelta::seconds(1);
    let acts = decide_at(&mut core, &s, &catalog, early);
    assert_eq!(cordons(&acts, &claim), 0, "{acts:?}");
    assert_eq!(
        core.next_deadline(
            &world_parts(&snapshot(&s), &catalog, REGION, early, DEFAULT_MAX_PODS)
                .world(&catalog, REGION),
            early
        ),
        Some(end - lead),
        "the controller wakes up at the lead"
    );
    let at_lead = decide_at(&mut core, &s, &catalog, end - lead);
    assert_eq!(cordons(&at_lead, &claim), 1, "{at_lead:?}");
    assert_eq!(
        checkpoint_deadlines(&at_lead),
        [(
            "ml/train-0".to_string(),
            end - lead + chrono::TimeDelta::seconds(90)
        )]
    );
    execute_scripted(&s, &at_lead, "ip-10-0-0-1", end - lead).await;

    // A controller that first sees the node a minute before the end (a
    // restart, a long outage) asks for the checkpoint by the block's end
    // less the drain grace, not by its usual grace period.
    let late = end - chrono::TimeDelta::seconds(60);
    let catalog = block_catalog(&zone, end, late);
    let mut restarted = Core::new(Config::default());
    let acts = decide_at(&mut restarted, &s, &catalog, late);
    assert_eq!(
        checkpoint_deadlines(&acts),
        [(
            "ml/train-0".to_string(),
            end - chrono::TimeDelta::seconds(30)
        )],
        "{acts:?}"
    );
    execute_scripted(&s, &acts, "ip-10-0-0-1", late).await;
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
