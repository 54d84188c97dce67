//! Controller-level sequences, driven through the snapshot, the core, the
//! executor and the lifecycle reconciler, with the Kubernetes API scripted
//! (every request checked: method, path, body) and the simulated cloud
//! behind the `CloudProvider` seam. This module holds the shared fixtures
//! and scripts; the sequences are in its modules, one per part of a node's
//! life: [`launch`], [`interruptions`], [`termination`], [`disruption`],
//! [`blocks`], [`gangs`], [`provisioning`], [`run_loop`] and [`leader`].

use crate::support;

use crate::support::{catalog, t};
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

mod blocks;
mod disruption;
mod gangs;
mod interruptions;
mod launch;
mod leader;
mod provisioning;
mod run_loop;
mod termination;

const CLAIMS: &str = "/apis/quartermaster.dev/v1alpha1/nodeclaims";
const REGION: &str = "us-east-1";

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
        nodes_revision: 0,
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
