//! The live controller with DRA (`resource.k8s.io/v1`), driven through the
//! snapshot, the core, the executor and the lifecycle reconciler with the
//! Kubernetes API scripted (every request checked):
//! - a pod whose GPU comes only through a ResourceClaimTemplate becomes a
//!   NodeClaim for a node serving DRA claims; the node stays
//!   un-Initialized until the NVIDIA driver publishes its ResourceSlice,
//!   then it is Initialized and the pod (bound by the scheduler) takes its
//!   device;
//! - a pod whose ResourceClaim is allocated on a node can run only there:
//!   nothing is launched for it, whether or not that node has room;
//! - through the whole loop (`run_watching` against the stateful fake API
//!   serving `resource.k8s.io/v1`): a pod whose claim names a missing
//!   template, or an unknown DeviceClass, gets a `NotPlaceable` Event
//!   naming the claim and the problem, and no NodeClaim.

use crate::support;

use crate::support::t;
use http::Method;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use quartermaster::api::labels as l;
use quartermaster::api::nodeclaim::conditions;
use quartermaster::api::{NodeClaim, NodePool};
use quartermaster::catalog::Catalog;
use quartermaster::cloud::simulated::{SimulatedCloud, SimulatedCloudConfig};
use quartermaster::controller::checkpoint::HookClient;
use quartermaster::controller::executor::{Executor, HookAcks, Outcome, Targets};
use quartermaster::controller::kube_api::KubeApi;
use quartermaster::controller::lifecycle::{set_condition, Lifecycle, Step};
use quartermaster::controller::snapshot::{world_parts, Snapshot, Store};
use quartermaster::core::batch::DEFAULT_MAX_PODS;
use quartermaster::core::{Action, ClaimRequest, Config, Core, Time};
use quartermaster::metrics::Metrics;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::api_server::{echo, Scenario};
use tokio::sync::watch;

const CLAIMS: &str = "/apis/quartermaster.dev/v1alpha1/nodeclaims";
const REGION: &str = "us-east-1";
const NODE: &str = "ip-10-0-0-1";
const GPU: &str = "gpu.nvidia.com/gpu";

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// A GPU pool of g5 types; it runs every DRA driver (no `spec.dra`).
fn pool() -> NodePool {
    from(json!({
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
}

/// The NVIDIA DRA driver's DeviceClass for whole GPUs.
fn gpu_class() -> DeviceClass {
    from(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression":
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}
    }))
}

/// A template for one GPU with at least 20 GiB.
fn one_gpu() -> ResourceClaimTemplate {
    from(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [{"cel": {"expression":
                "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('20Gi')) >= 0"}}]
        }}]}}}
    }))
}

/// A pending pod asking for CPU and memory, and for its GPU only through
/// the claim `claims` (a `resourceClaimName` or
/// `resourceClaimTemplateName` entry); on `node` when it is given.
fn claim_pod(name: &str, claim: Value, node: Option<&str>) -> core::Pod {
    let mut v = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "resourceClaims": [claim],
            "containers": [{"name": "c", "resources": {
                "requests": {"cpu": "2", "memory": "8Gi"},
                "claims": [{"name": "gpu"}]}}],
            "tolerations": [{"key": l::TAINT_GPU, "operator": "Exists"}]
        },
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    });
    if let Some(n) = node {
        v["spec"]["nodeName"] = json!(n);
        v["status"] = json!({"phase": "Running", "podIP": "10.0.0.7"});
    }
    from(v)
}

/// A Ready, untainted node with CPU and memory and no device plugin.
fn node(provider_id: &str, cpu: &str, memory: &str) -> core::Node {
    from(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "resourceVersion": "1",
            "labels": {l::HOSTNAME: NODE}},
        "spec": {"providerID": provider_id},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": cpu, "memory": memory, "pods": "58"}
        }
    }))
}

/// The ResourceSlice the NVIDIA DRA driver publishes for one A10G on
/// [`NODE`].
fn gpu_slice() -> ResourceSlice {
    from(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": format!("{NODE}-gpu.nvidia.com")},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0",
                "attributes": {"type": {"string": "gpu"},
                    "productName": {"string": "NVIDIA A10G"}},
                "capacity": {"memory": {"value": "24Gi"}}}]
        }
    }))
}

/// A ResourceClaim `ml/name` for one GPU, allocated `gpu-0` on [`NODE`].
fn allocated_claim(name: &str) -> ResourceClaim {
    from(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "gpu",
            "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com",
                "pool": NODE, "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}
        }}
    }))
}

/// `claim`, created at `created`, launched and registered on [`NODE`],
/// with these conditions true since a minute later.
fn on_node(mut claim: NodeClaim, created: Time, conds: &[&str]) -> NodeClaim {
    claim.metadata.creation_timestamp =
        Some(quartermaster::controller::snapshot::to_k8s_time(created));
    let mut status = quartermaster::api::NodeClaimStatus {
        provider_id: Some("aws:///use1-az1/i-0123".into()),
        node_name: Some(NODE.into()),
        ..Default::default()
    };
    for c in conds {
        set_condition(
            &mut status,
            c,
            true,
            c,
            "",
            created + chrono::Duration::seconds(60),
        );
    }
    claim.status = Some(status);
    claim
}

/// A synced store holding [`pool`], these objects and the DRA objects.
fn store(
    pods: Vec<core::Pod>,
    nodes: Vec<core::Node>,
    claims: Vec<NodeClaim>,
    dra_claims: Vec<ResourceClaim>,
    slices: Vec<ResourceSlice>,
) -> Store {
    let s = Store::new();
    s.reset(vec![pool()]);
    s.reset(pods);
    s.reset(nodes);
    s.reset(claims);
    s.reset(Vec::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::new());
    s.reset(vec![gpu_class()]);
    s.reset(vec![one_gpu()]);
    s.reset(dra_claims);
    s.reset(slices);
    s.update(|s| s.dra_served = true);
    assert!(s.is_synced());
    s
}

fn catalog() -> Arc<Catalog> {
    Arc::new(Catalog::embedded().unwrap())
}

fn snapshot(s: &Store) -> Snapshot {
    s.read(Snapshot::clone)
}

fn decide(core: &mut Core, s: &Store, catalog: &Catalog, now: Time) -> Vec<Action> {
    let parts = world_parts(&snapshot(s), catalog, REGION, now, DEFAULT_MAX_PODS);
    core.decide(&parts.world(catalog, REGION), now)
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

/// The launches over two rounds (the first waits out the batch window).
fn launches_after_batching(s: &Store, catalog: &Catalog) -> Vec<ClaimRequest> {
    let mut core = Core::new(Config::default());
    let first = decide(&mut core, s, catalog, t(0));
    assert!(launches(&first).is_empty(), "{first:?}");
    let actions = decide(&mut core, s, catalog, t(2));
    launches(&actions).into_iter().cloned().collect()
}

/// Runs the executor over `actions` as the leader.
async fn execute(api: &KubeApi, actions: &[Action], s: &Store, now: Time) -> Vec<Outcome> {
    let catalog = catalog();
    let snap = snapshot(s);
    let parts = world_parts(&snap, &catalog, REGION, now, DEFAULT_MAX_PODS);
    let world = parts.world(&catalog, REGION);
    let metrics = Arc::new(Metrics::unregistered());
    let (_tx, leader) = watch::channel(true);
    let (hooks, acks) = (HookClient::new(), HookAcks::default());
    let targets = Targets {
        nodes: Default::default(),
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
        disruptions: &[],
    };
    ex.execute(actions, &world, &targets, now)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

/// Reconciles the claim `name` at `at` against the API `scenario`
/// scripts, checking that every scripted request was made.
async fn reconcile(
    scenario: Scenario,
    s: &Store,
    cloud: &Mutex<SimulatedCloud>,
    name: &str,
    at: Time,
) -> Step {
    let (client, verifier) = scenario.run();
    let api = KubeApi::new(client);
    let metrics = Metrics::unregistered();
    let view = s.read(|s| s.claim_view(&s.claims[name]));
    let policies = std::collections::BTreeMap::new();
    let (hooks, hook_acks) = (HookClient::new(), HookAcks::default());
    let launches = quartermaster::controller::interruptions::Launches::default();
    let step = Lifecycle {
        api: &api,
        cloud,
        metrics: &metrics,
        launch_timeout: Duration::from_secs(300),
        registration_timeout: Duration::from_secs(600),
        catalog: catalog(),
        region: REGION,
        policies: &policies,
        hooks: &hooks,
        hook_acks: &hook_acks,
        launches: &launches,
    }
    .reconcile(&view, at)
    .await
    .unwrap();
    verifier.finish().await;
    step
}

#[tokio::test]
async fn a_claim_only_pod_becomes_a_node_claim_initialized_once_the_driver_publishes_its_gpu() {
    let template_claim = json!({"name": "gpu", "resourceClaimTemplateName": "one-gpu"});
    let pod = claim_pod("infer-0", template_claim.clone(), None);
    let s = store(vec![pod], vec![], vec![], vec![], vec![]);
    let catalog = catalog();

    // The pod is planned (not held back as not placeable) onto a g5 that
    // serves DRA claims.
    let parts = world_parts(&snapshot(&s), &catalog, REGION, t(0), DEFAULT_MAX_PODS);
    assert_eq!(parts.pending.len(), 1);
    assert!(
        parts.pending[0].not_placeable.is_empty(),
        "{:?}",
        parts.pending[0]
    );
    assert!(parts.pending[0].devices.is_some());
    let reqs = launches_after_batching(&s, &catalog);
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert_eq!(reqs[0].pods, ["ml/infer-0"]);
    assert!(
        reqs[0].offering.instance_type.starts_with("g5."),
        "{reqs:?}"
    );

    // The claim: labelled for the drivers' DaemonSets, its GPU expected
    // from the NVIDIA DRA driver (not the device plugin), which it names
    // as the driver to wait for.
    let name = reqs[0].claim.clone();
    let (client, verifier) = Scenario::new()
        .expect(Method::POST, CLAIMS, |body| {
            assert_eq!(body["spec"]["labels"][l::DRA], "true");
            let resources = &body["spec"]["resources"];
            assert_eq!(resources[GPU], "1", "{resources}");
            assert!(resources.get(l::RESOURCE_GPU).is_none(), "{resources}");
            assert_eq!(
                body["metadata"]["annotations"][l::DRA_DRIVERS],
                "gpu.nvidia.com"
            );
        })
        .respond_with(echo)
        .run();
    let actions = [Action::Launch(reqs[0].clone())];
    let outcomes = execute(&KubeApi::new(client), &actions, &s, t(2)).await;
    verifier.finish().await;
    let [Outcome::Created(created)] = &outcomes[..] else {
        panic!("{outcomes:?}")
    };

    // Launched and registered; the node is Ready and untainted, but the
    // driver has published nothing yet: not Initialized, no request.
    let cloud = Mutex::new(
        SimulatedCloud::new(catalog.clone(), SimulatedCloudConfig::new(7, REGION, t(0))).unwrap(),
    );
    let claim = on_node(
        (**created).clone(),
        t(2),
        &[conditions::LAUNCHED, conditions::REGISTERED],
    );
    s.apply(claim.clone());
    s.apply(node("aws:///use1-az1/i-0123", "3920m", "15Gi"));
    let step = reconcile(Scenario::new(), &s, &cloud, &name, t(90)).await;
    assert_eq!(step, Step::Waiting("initialization"));
    // In the world it is still in flight: the pod launches nothing more.
    let mut core = Core::new(Config::default());
    for k in 90..95 {
        assert!(launches(&decide(&mut core, &s, &catalog, t(k))).is_empty());
    }

    // The driver publishes the GPU: Initialized and Ready, the device in
    // its allocatable.
    s.apply(gpu_slice());
    let reply = serde_json::to_value(&claim).unwrap();
    let step = reconcile(
        Scenario::new()
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
                assert_eq!(body["status"]["allocatable"][GPU], "1");
            })
            .respond(200, reply),
        &s,
        &cloud,
        &name,
        t(120),
    )
    .await;
    assert_eq!(step, Step::Initialized { node: NODE.into() });

    // The scheduler binds the pod; the claim made from its template is
    // allocated the GPU: the node's device is used, nothing is launched.
    let mut ready = claim.clone();
    set_condition(
        ready.status.as_mut().unwrap(),
        conditions::READY,
        true,
        "Ready",
        "",
        t(120),
    );
    s.apply(ready);
    s.apply(claim_pod("infer-0", template_claim, Some(NODE)));
    s.apply(allocated_claim("infer-0-gpu-x7k2p"));
    let parts = world_parts(&snapshot(&s), &catalog, REGION, t(130), DEFAULT_MAX_PODS);
    assert!(parts.pending.is_empty());
    let n = &parts.nodes[0];
    assert_eq!(n.state.name, NODE);
    assert_eq!(n.state.allocatable.get(GPU), 1);
    assert_eq!(n.state.used.get(GPU), 1);
    // Running, its claim is its own: matched as a re-created pod's would
    // be (not pinned to the node), so consolidation and drift may move it
    // onto a shape that serves it.
    let devices = n.pods[0].pod.devices.as_ref().expect("its claim matched");
    assert_eq!(devices.pinned, None);
    assert!(devices.satisfiable());
    assert!(launches(&decide(&mut core, &s, &catalog, t(130))).is_empty());
}

#[tokio::test]
async fn a_pod_whose_claim_is_allocated_on_a_node_runs_only_there() {
    let catalog = catalog();
    let shared = json!({"name": "gpu", "resourceClaimName": "shared-gpu"});
    // A ready node of ours serving DRA, its GPU allocated to the shared
    // claim its first pod runs with.
    let req = ClaimRequest {
        cluster_placement: false,
        claim: "gpu-000001".into(),
        nodepool: "gpu".into(),
        offering: quartermaster::core::OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: catalog
                .offerings_of(REGION, "g5.xlarge")
                .next()
                .unwrap()
                .zone_id
                .clone(),
            capacity_type: quartermaster::catalog::CapacityType::OnDemand,
        },
        price_per_hour: 1.0,
        pods: vec![],
        prewarm_window: None,
        reservation: None,
    };
    let pools = [pool()];
    let world = quartermaster::core::World {
        nodes_revision: 0,
        catalog: &catalog,
        region: REGION,
        pools: &pools,
        pending: &[],
        nodes: &[],
        pdbs: &[],
    };
    let mut claim =
        quartermaster::controller::executor::build_claim(&req, &req.claim, &world, &[], t(0))
            .unwrap();
    claim.spec.labels.insert(l::DRA.into(), "true".into());
    let claim = on_node(
        claim,
        t(0),
        &[
            conditions::LAUNCHED,
            conditions::REGISTERED,
            conditions::INITIALIZED,
            conditions::READY,
        ],
    );
    let running = claim_pod("serve-0", shared.clone(), Some(NODE));
    let pending = claim_pod("serve-1", shared, None);
    let s = store(
        vec![running, pending],
        vec![node("aws:///use1-az1/i-0123", "7920m", "31Gi")],
        vec![claim.clone()],
        vec![allocated_claim("shared-gpu")],
        vec![gpu_slice()],
    );

    let parts = world_parts(&snapshot(&s), &catalog, REGION, t(100), DEFAULT_MAX_PODS);
    // The running pod shares the allocated claim: it is not matched for a
    // move (its node stays out of consolidation and drift).
    let running = &parts.nodes[0].pods[0].pod;
    assert_eq!(running.name, "ml/serve-0");
    assert!(running.devices.is_none() && !running.resource_claims.is_empty());
    let pod = &parts.pending[0];
    assert_eq!(
        pod.devices.as_ref().and_then(|d| d.pinned.as_deref()),
        Some(NODE)
    );
    assert!(pod.not_placeable.is_empty(), "{pod:?}");
    // The node has room: the pod is placed there (the scheduler binds
    // it), nothing is launched, nothing reported.
    let mut core = Core::new(Config::default());
    for k in [0, 2, 30] {
        let actions = decide(&mut core, &s, &catalog, t(k));
        assert!(launches(&actions).is_empty(), "{actions:?}");
    }
    let unplaced = |core: &Core| -> Option<String> {
        let report = core.last_plan()?;
        report
            .unschedulable
            .iter()
            .find(|u| u.pod == "ml/serve-1")
            .map(|u| u.reason.clone())
    };
    assert_eq!(unplaced(&core), None);

    // The node is full: still nothing is launched (a new node could not
    // hold the claim's device), and the pod is reported.
    s.apply(node("aws:///use1-az1/i-0123", "3000m", "31Gi"));
    let mut core = Core::new(Config::default());
    for k in [0, 2, 30] {
        let actions = decide(&mut core, &s, &catalog, t(k));
        assert!(launches(&actions).is_empty(), "{actions:?}");
    }
    let why = unplaced(&core).expect("the pod that cannot run is reported");
    assert!(why.contains(NODE), "{why}");
}

#[tokio::test]
async fn claims_naming_a_missing_template_or_an_unknown_class_are_reported_and_get_no_node() {
    let catalog = catalog();
    let missing = claim_pod(
        "missing",
        json!({"name": "gpu", "resourceClaimTemplateName": "nobody-made-it"}),
        None,
    );
    let unknown = claim_pod(
        "unknown",
        json!({"name": "gpu", "resourceClaimName": "tpu"}),
        None,
    );
    let tpu: ResourceClaim = from(json!({
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "tpu", "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "tpu",
            "exactly": {"deviceClassName": "tpu.google.com"}}]}}
    }));
    let s = store(vec![missing, unknown], vec![], vec![], vec![tpu], vec![]);
    assert!(launches_after_batching(&s, &catalog).is_empty());
    let parts = world_parts(&snapshot(&s), &catalog, REGION, t(2), DEFAULT_MAX_PODS);
    let reason = |name: &str| {
        parts
            .pending
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.not_placeable.join("; "))
            .unwrap()
    };
    let r = reason("ml/missing");
    assert!(
        r.contains("claim gpu") && r.contains("ResourceClaimTemplate ml/nobody-made-it"),
        "{r}"
    );
    let r = reason("ml/unknown");
    assert!(
        r.contains("claim gpu") && r.contains("tpu.google.com"),
        "{r}"
    );
}

#[tokio::test]
async fn a_workload_pod_groups_claim_is_one_gpu_for_all_its_members() {
    let catalog = catalog();
    let template_claim = json!({"name": "gpu", "resourceClaimTemplateName": "one-gpu"});
    let member = |i: u32| {
        let mut p = claim_pod(&format!("w-{i}"), template_claim.clone(), None);
        let mut spec = serde_json::to_value(p.spec.take().unwrap()).unwrap();
        spec["schedulingGroup"] = json!({"podGroupName": "workers"});
        p.spec = Some(from(spec));
        p
    };
    let gpus = |reqs: &[ClaimRequest]| -> u32 {
        reqs.iter()
            .map(|r| {
                let it = catalog.instance_type(&r.offering.instance_type).unwrap();
                it.accelerator.as_ref().map_or(0, |a| a.count)
            })
            .sum()
    };
    // Kubernetes 1.37's PodGroup holding one claim made from the template
    // for the whole group; each member names it with an equal entry.
    let group: quartermaster::api::foreign::SchedulingPodGroup = from(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "workers", "namespace": "ml"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                 "resourceClaims": [template_claim.clone()]}
    }));
    let s = store(vec![member(0), member(1)], vec![], vec![], vec![], vec![]);
    s.reset(vec![group]);
    let reqs = launches_after_batching(&s, &catalog);
    assert_eq!(reqs.len(), 1, "one node for the claim both share: {reqs:?}");
    assert_eq!(reqs[0].pods, ["ml/w-0", "ml/w-1"]);
    assert_eq!(gpus(&reqs), 1, "the group's claim counted once: {reqs:?}");

    // Without the group's claim each member's entry is a claim of its own.
    let group: quartermaster::api::foreign::SchedulingPodGroup = from(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "workers", "namespace": "ml"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}
    }));
    s.reset(vec![group]);
    let reqs = launches_after_batching(&s, &catalog);
    assert!(gpus(&reqs) >= 2, "a GPU each: {reqs:?}");
}

/// The run loop against the stateful fake API serving `resource.k8s.io/v1`
/// (discovery, then lists and watches of the four DRA kinds), until `done`
/// holds of the server's state (and two ticks more, for what the same
/// rounds would write after it) or a minute passes; then shutdown.
async fn run_loop_until(
    api: &support::fake_api::FakeApi,
    done: impl Fn(&support::fake_api::State) -> bool,
) {
    use quartermaster::controller::run::{run_watching, Context, Settings};
    use std::sync::atomic::AtomicBool;
    use support::fake_http::HttpApi;
    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    let server = HttpApi::start(api.clone()).await;
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let (_leader_tx, leader) = watch::channel(true);
    let (_catalog_tx, catalog_rx) = watch::channel(catalog());
    let (_notices_tx, notices) = mpsc::channel(8);
    let cloud = SimulatedCloud::new(
        catalog(),
        SimulatedCloudConfig::new(7, REGION, chrono::Utc::now()),
    )
    .unwrap();
    let ctx = Context {
        api: KubeApi::new(client.clone()),
        cloud: Arc::new(Mutex::new(cloud)),
        metrics: Arc::new(Metrics::unregistered()),
        catalog: catalog_rx,
        leader,
        ready: Arc::new(AtomicBool::new(false)),
        notices,
        notice_acks: Default::default(),
        simulated_nodes: false,
    };
    let settings = Settings {
        region: REGION.into(),
        cluster_name: "dra".into(),
        core: Config {
            batch_idle: Duration::from_millis(200),
            ..Config::default()
        },
        tick: Duration::from_secs(1),
        launch_timeout: Duration::from_secs(300),
        registration_timeout: Duration::from_secs(600),
        gc_grace: Duration::from_secs(300),
        gpu_use: None,
    };
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run_watching(ctx, settings, client, shutdown.clone()));
    for _ in 0..600 {
        if done(&api.state.lock().unwrap()) {
            tokio::time::sleep(Duration::from_secs(2)).await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(30), task).await;
    assert!(
        matches!(stopped, Ok(Ok(Ok(())))),
        "the loop stops on shutdown: {stopped:?}"
    );
}

/// The Events the loop posted in namespace `ml`, as posted.
fn posted_events(state: &support::fake_api::State) -> Vec<Value> {
    state
        .requests
        .iter()
        .filter(|r| {
            r.method == Method::POST && r.path == "/apis/events.k8s.io/v1/namespaces/ml/events"
        })
        .map(|r| r.body.clone())
        .collect()
}

#[tokio::test]
async fn the_loop_reports_a_missing_template_and_an_unknown_class_in_not_placeable_events_and_launches_nothing(
) {
    use support::fake_api::{wall_clock, FakeApi};
    const DRA: &str = "apis/resource.k8s.io/v1";
    let api = FakeApi::new();
    api.serve_dra();
    {
        let mut s = api.state.lock().unwrap();
        s.clock = wall_clock;
        fn json<T: serde::Serialize>(v: &T) -> Value {
            serde_json::to_value(v).unwrap()
        }
        s.put("apis/quartermaster.dev/v1alpha1/nodepools", json(&pool()));
        s.put(&format!("{DRA}/deviceclasses"), json(&gpu_class()));
        s.put(
            &format!("{DRA}/namespaces/ml/resourceclaimtemplates"),
            json(&one_gpu()),
        );
        s.put(
            &format!("{DRA}/namespaces/ml/resourceclaims"),
            json(&from::<ResourceClaim>(json!({
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "tpu", "namespace": "ml"},
                "spec": {"devices": {"requests": [{"name": "tpu",
                    "exactly": {"deviceClassName": "tpu.google.com"}}]}}
            }))),
        );
        for pod in [
            claim_pod(
                "missing",
                json!({"name": "gpu", "resourceClaimTemplateName": "nobody-made-it"}),
                None,
            ),
            claim_pod(
                "unknown",
                json!({"name": "gpu", "resourceClaimName": "tpu"}),
                None,
            ),
        ] {
            s.put("api/v1/namespaces/ml/pods", json(&pod));
        }
    }
    let not_placeable = |s: &support::fake_api::State, pod: &str| -> Option<String> {
        posted_events(s)
            .into_iter()
            .find(|e| e["reason"] == "NotPlaceable" && e["regarding"]["name"] == pod)
            .map(|e| e["note"].as_str().unwrap_or_default().to_string())
    };
    run_loop_until(&api, |s| {
        not_placeable(s, "missing").is_some() && not_placeable(s, "unknown").is_some()
    })
    .await;
    let s = api.state.lock().unwrap();
    // The DRA objects were read through discovery, lists and watches.
    for kind in [
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
        "resourceslices",
    ] {
        let path = format!("/{DRA}/{kind}");
        assert!(
            s.requests
                .iter()
                .any(|r| r.method == Method::GET && r.path == path),
            "{path} was not listed"
        );
    }
    let note = not_placeable(&s, "missing").expect("an Event for the missing template");
    assert!(
        note.contains("claim gpu") && note.contains("ResourceClaimTemplate ml/nobody-made-it"),
        "{note}"
    );
    let note = not_placeable(&s, "unknown").expect("an Event for the unknown class");
    assert!(
        note.contains("claim gpu") && note.contains("tpu.google.com"),
        "{note}"
    );
    assert!(
        !s.requests
            .iter()
            .any(|r| r.method == Method::POST && r.path.ends_with("/nodeclaims")),
        "no NodeClaim for pods whose claims cannot be served"
    );
    assert!(s.list(CLAIMS.trim_start_matches('/')).is_empty());
}
