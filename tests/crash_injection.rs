//! Crash injection over the NodeClaim lifecycle: the controller's lifecycle
//! reconciler, against a stateful fake API server and the simulated cloud,
//! is stopped right after each of its effects in turn (every API write and
//! every cloud launch or terminate: after the claim is written, after the
//! launch before the status, after the status, after registration, after
//! the cordon, after each eviction, after the terminate before the node
//! and finalizer go, ...), then restarted from what the API server and the
//! cloud hold, and must converge. For every crash point: no instance is
//! launched twice for the claim, none is left running after garbage
//! collection, the claim does not get stuck, and its pod is evicted before
//! its instance is terminated.
//!
//! What it covers: one on-demand claim's whole life (create, launch,
//! register, initialize, a pod placed, deletion, drain, terminate,
//! finalizer), with the simulated cloud behind the `CloudProvider` seam and
//! simulated Node objects (`controller::simulated_nodes`) standing in for
//! the kubelet. Not covered yet: the core and executor deciding (the claim
//! is created as the executor would), moto's EC2, spot notices.

use crate::support;

use crate::support::{catalog, t};
use kube::ResourceExt;
use quartermaster::api::labels as l;
use quartermaster::api::nodeclaim::conditions;
use quartermaster::api::{NodeClaim, NodePool};
use quartermaster::catalog::CapacityType;
use quartermaster::cloud::simulated::{SimulatedCloud, SimulatedCloudConfig};
use quartermaster::cloud::{self, CloudProvider, Instance, NodeTemplate};
use quartermaster::controller::executor;
use quartermaster::controller::kube_api::KubeApi;
use quartermaster::controller::lifecycle::Lifecycle;
use quartermaster::controller::simulated_nodes::{self, node_name, Timing};
use quartermaster::controller::snapshot::{to_k8s_time, Store};
use quartermaster::core::{ClaimRequest, OfferingKey, Time};
use quartermaster::metrics::Metrics;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;
use support::fake_api::FakeApi;

const REGION: &str = "us-east-1";
const CLAIMS: &str = "apis/quartermaster.dev/v1alpha1/nodeclaims";
const NODES: &str = "api/v1/nodes";
const POOLS: &str = "apis/quartermaster.dev/v1alpha1/nodepools";
const PODS: &str = "api/v1/namespaces/ml/pods";
const CLAIM: &str = "gpu-000001";

fn pool() -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "quartermaster.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {"template": {"spec": {
            "taints": [{"key": l::TAINT_GPU, "effect": "NoSchedule"}]
        }}}
    }))
    .unwrap()
}

/// The claim the executor would write for one on-demand g5.xlarge.
fn claim() -> NodeClaim {
    let catalog = catalog();
    let zone = catalog
        .offerings_of(REGION, "g5.xlarge")
        .find(|o| o.capacity_type == CapacityType::OnDemand)
        .unwrap()
        .zone_id
        .clone();
    let req = ClaimRequest {
        cluster_placement: false,
        claim: CLAIM.into(),
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
    let mut c = executor::build_claim(&req, CLAIM, &world, &[], t(0)).unwrap();
    c.metadata.creation_timestamp = Some(to_k8s_time(t(0)));
    c
}

/// The pod a user runs on the claim's node once it is ready.
fn pod(node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {l::RESOURCE_GPU: "1"}}}],
            "tolerations": [{"key": l::TAINT_GPU, "operator": "Exists"}]
        },
        "status": {"phase": "Running", "podIP": "10.0.0.7"}
    })
}

/// The simulated cloud, with the controller's effects on it counted by the
/// fake API (so that a crash can fall between a launch and its status
/// write) and with what the test checks recorded.
struct Cloud {
    inner: Mutex<SimulatedCloud>,
    api: FakeApi,
    /// Provider IDs each claim's launches returned.
    launched: Mutex<BTreeMap<String, BTreeSet<String>>>,
    /// Pods still bound to a node when its instance was terminated.
    unevicted: Mutex<Vec<String>>,
}

impl Cloud {
    fn crashed() -> cloud::Error {
        cloud::Error::NotReady {
            claim: "-".into(),
            reason: "the controller crashed".into(),
        }
    }

    /// Counts an effect; the error to return when it was the crash point.
    fn effect(&self) -> Result<(), cloud::Error> {
        if self.api.state.lock().unwrap().count_effect() {
            Err(Cloud::crashed())
        } else {
            Ok(())
        }
    }

    fn alive(&self) -> Result<(), cloud::Error> {
        if self.api.controller_alive() {
            Ok(())
        } else {
            Err(Cloud::crashed())
        }
    }
}

impl CloudProvider for Cloud {
    async fn launch(
        &self,
        claim: &ClaimRequest,
        template: &NodeTemplate,
        now: Time,
    ) -> cloud::Result<Instance> {
        self.alive()?;
        let i = self.inner.launch(claim, template, now).await?;
        self.launched
            .lock()
            .unwrap()
            .entry(claim.claim.clone())
            .or_default()
            .insert(i.provider_id.clone());
        self.effect()?;
        Ok(i)
    }

    async fn reboot(&self, claim: &str, now: Time) -> cloud::Result<Instance> {
        self.alive()?;
        self.inner.reboot(claim, now).await
    }

    async fn terminate(&self, claim: &str, now: Time) -> cloud::Result<Instance> {
        self.alive()?;
        let i = self.inner.terminate(claim, now).await?;
        let node = node_name(&i);
        let state = self.api.state.lock().unwrap();
        self.unevicted.lock().unwrap().extend(
            state
                .list(PODS)
                .iter()
                .filter(|p| p["spec"]["nodeName"] == node)
                .map(|p| p["metadata"]["name"].to_string()),
        );
        drop(state);
        self.effect()?;
        Ok(i)
    }

    async fn describe(&self, claim: &str) -> cloud::Result<Option<Instance>> {
        self.alive()?;
        self.inner.describe(claim).await
    }

    async fn instances(&self) -> cloud::Result<Vec<Instance>> {
        self.alive()?;
        self.inner.instances().await
    }
}

/// A store as a freshly started controller lists it from the API server.
fn store(api: &FakeApi) -> Store {
    let store = Store::new();
    api.fill(&store);
    store
}

/// What one run did.
#[derive(Debug)]
struct Run {
    /// Controller effects in the run.
    effects: usize,
    /// Restarts (0 or 1).
    restarts: usize,
    /// Rounds until the claim was gone.
    rounds: usize,
}

/// One claim's life with the controller crashing after effect `crash_at`
/// (never, when `None`); panics naming the crash point when an invariant
/// breaks.
async fn life(crash_at: Option<usize>) -> Run {
    let api = FakeApi::new();
    api.state
        .lock()
        .unwrap()
        .put(POOLS, serde_json::to_value(pool()).unwrap());
    if let Some(n) = crash_at {
        api.crash_after(n);
    }
    let cloud = Cloud {
        inner: Mutex::new(
            SimulatedCloud::new(catalog(), SimulatedCloudConfig::new(7, REGION, t(0))).unwrap(),
        ),
        api: api.clone(),
        launched: Mutex::default(),
        unevicted: Mutex::default(),
    };
    let world = KubeApi::new(api.client());
    let metrics = Metrics::unregistered();
    let at = format!("crash after effect {crash_at:?}");
    let (mut created, mut placed, mut deleted) = (false, false, false);
    let mut restarts = 0;
    let mut rounds = 0;
    for round in 0..120 {
        rounds = round;
        let now = t(15 * round as i64);
        if !api.controller_alive() {
            restarts += 1;
            api.restart();
        }
        // A new process would build these anew; building them every round
        // is the same thing and makes every round a possible restart.
        let controller = KubeApi::new(api.controller_client());
        let s = store(&api);
        let (policies, hooks, hook_acks) = Default::default();
        let launches = Default::default();
        let lifecycle = Lifecycle {
            api: &controller,
            cloud: &cloud,
            metrics: &metrics,
            launch_timeout: Duration::from_secs(300),
            registration_timeout: Duration::from_secs(600),
            catalog: catalog(),
            region: REGION,
            policies: &policies,
            hooks: &hooks,
            hook_acks: &hook_acks,
            launches: &launches,
        };
        // The executor writes the claim (once it is written, the core sees
        // it and does not plan the pod again).
        if !created {
            created = s.read(|s| s.claims.contains_key(CLAIM))
                || controller.create_node_claim(&claim()).await.is_ok();
            if !created || !api.controller_alive() {
                continue;
            }
        }
        let claims: Vec<NodeClaim> = s.read(|s| s.claims.values().cloned().collect());
        for c in &claims {
            let view = s.read(|s| s.claim_view(c));
            let _ = lifecycle.reconcile(&view, now).await;
        }
        // Garbage collection, as the controller runs it.
        let names: cloud::ClaimIndex = claims
            .iter()
            .map(|c| {
                let provider = c.status.as_ref().and_then(|s| s.provider_id.clone());
                (c.name_any(), provider)
            })
            .collect();
        let _ = cloud::collect_garbage(&cloud, &names, now, chrono::TimeDelta::minutes(5)).await;
        // The world: nodes come and go with instances; a pod lands on the
        // Ready node; then the claim is deleted.
        let instances = cloud.inner.instances().await.unwrap();
        let s = store(&api);
        let ops = s.read(|s| {
            simulated_nodes::plan(&instances, &s.claims, &s.nodes, Timing::default(), now)
        });
        simulated_nodes::apply(&world, ops, now).await;
        let ready_node = s.read(|s| {
            s.claims
                .get(CLAIM)
                .filter(|c| {
                    c.status
                        .as_ref()
                        .is_some_and(|st| st.is_true(conditions::READY))
                })
                .and_then(|c| c.status.as_ref().and_then(|st| st.node_name.clone()))
        });
        if let (false, Some(node)) = (placed, ready_node) {
            api.state.lock().unwrap().put(PODS, pod(&node));
            placed = true;
        } else if placed && !deleted {
            world.delete_node_claim(CLAIM).await.unwrap();
            deleted = true;
        }
        let gone = deleted && api.state.lock().unwrap().list(CLAIMS).is_empty();
        if gone && api.state.lock().unwrap().list(NODES).is_empty() {
            break;
        }
    }
    // A crash after the very last effect ends the run before a restart.
    restarts += usize::from(!api.controller_alive());
    let effects = {
        let state = api.state.lock().unwrap();
        assert!(placed && deleted, "{at}: the claim never became Ready");
        assert_eq!(
            state.list(CLAIMS),
            Vec::<Value>::new(),
            "{at}: the claim is stuck"
        );
        assert_eq!(
            state.list(NODES),
            Vec::<Value>::new(),
            "{at}: a node is left"
        );
        assert_eq!(state.evictions, ["ml/train"], "{at}: evictions");
        state.effects
    };
    let launched = cloud.launched.lock().unwrap().clone();
    assert_eq!(
        launched.get(CLAIM).map(BTreeSet::len),
        Some(1),
        "{at}: instances launched for the claim: {launched:?}"
    );
    assert_eq!(
        *cloud.unevicted.lock().unwrap(),
        Vec::<String>::new(),
        "{at}: pods on a node whose instance was terminated"
    );
    // Garbage collection long after finds nothing alive.
    api.restart();
    let later = t(15 * rounds as i64 + 3600);
    cloud::collect_garbage(
        &cloud,
        &cloud::ClaimIndex::new(),
        later,
        chrono::TimeDelta::minutes(5),
    )
    .await
    .unwrap();
    let alive: Vec<Instance> = cloud
        .inner
        .instances()
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.state.is_alive())
        .collect();
    assert!(alive.is_empty(), "{at}: left running: {alive:?}");
    Run {
        effects,
        restarts,
        rounds,
    }
}

#[tokio::test]
async fn a_controller_crashing_after_any_effect_of_a_claims_life_converges_without_harm() {
    let clean = life(None).await;
    assert_eq!(clean.restarts, 0);
    // create, launch, launched status, node labels and taints, registered
    // status, initialized status, cordon, eviction, terminate, node delete,
    // finalizer: at least these.
    assert!(clean.effects >= 11, "{clean:?}");
    for k in 1..=clean.effects {
        let run = life(Some(k)).await;
        assert_eq!(run.restarts, 1, "crash after effect {k}: {run:?}");
    }
    println!(
        "crash injection: {} crash points, all converged (a clean run takes {} effects and {} rounds)",
        clean.effects, clean.effects, clean.rounds
    );
}
