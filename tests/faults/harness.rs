//! The controller's real loop driven round by round (5 virtual seconds
//! each) against the stateful fake API server and the simulated cloud,
//! with stand-ins for what surrounds it: the notice queue (a notice stays
//! until the controller reports it recorded, and is delivered again, to a
//! restarted controller too), the kubelets (simulated Node objects), the
//! scheduler (a pending pod goes to a Ready claim's free node), a
//! checkpointing workload (it acknowledges a request one round later) and
//! its Job (an evicted pod comes back pending under a new name).
//!
//! A crash ([`FakeApi::crash_after`]) fails every controller request after
//! its effect; the next round then starts a new controller process: a new
//! `Driver`, core and notice memory, from what the API server and the cloud
//! hold.

use crate::support::fake_api::FakeApi;
pub use crate::support::{catalog, t};
use kube::ResourceExt;
use quartermaster::api::labels as l;
use quartermaster::api::nodeclaim::conditions;
use quartermaster::api::NodeClaim;
use quartermaster::catalog::Catalog;
use quartermaster::cloud::simulated::{SimulatedCloud, SimulatedCloudConfig};
use quartermaster::cloud::{
    self, CloudProvider, Instance, InstanceNotice, NodeTemplate, NoticeAcks, NoticeKind,
    NoticeOutcome,
};
use quartermaster::controller::kube_api::KubeApi;
use quartermaster::controller::run::{Context, Driver, Settings};
use quartermaster::controller::simulated_nodes::{self, Timing};
use quartermaster::controller::snapshot::Store;
use quartermaster::core::{ClaimRequest, Time};
use quartermaster::metrics::Metrics;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch, Semaphore};

pub const REGION: &str = "us-east-1";
pub const CLAIMS: &str = "apis/quartermaster.dev/v1alpha1/nodeclaims";
pub const POOLS: &str = "apis/quartermaster.dev/v1alpha1/nodepools";
pub const NODES: &str = "api/v1/nodes";
pub const PODS: &str = "api/v1/namespaces/ml/pods";

/// Seconds of virtual time per round.
pub const ROUND: i64 = 5;

/// An on-demand GPU pool (on-demand: the simulated cloud never runs out).
pub fn pool() -> Value {
    json!({
        "apiVersion": "quartermaster.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "gpu", "uid": "uid-pool"},
        "spec": {
            "capacityTypes": ["on-demand"],
            "template": {"spec": {
                "requirements": [{"key": "quartermaster.dev/instance-family",
                    "operator": "In", "values": ["g5"]}],
                "taints": [{"key": l::TAINT_GPU, "effect": "NoSchedule"}]
            }}
        }
    })
}

/// A pending one-GPU pod of the training Job, opted in to checkpoints.
pub fn pending_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
            "annotations": {l::CHECKPOINT_ENABLED: "true"}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests":
                {"cpu": "2", "memory": "8Gi", l::RESOURCE_GPU: "1"}}}],
            "tolerations": [{"key": l::TAINT_GPU, "operator": "Exists"}]
        },
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    })
}

/// The simulated cloud as the controller's provider: its launches and
/// terminations are effects (a crash can fall right after one), every call
/// fails once the controller has crashed, launches can be held at a gate,
/// and each claim's instances are recorded.
pub struct Cloud {
    pub inner: Mutex<SimulatedCloud>,
    pub api: FakeApi,
    /// Provider IDs of the instances launched for each claim.
    pub launched: Mutex<BTreeMap<String, BTreeSet<String>>>,
    /// When set, a launch waits for a permit.
    pub gate: Option<Arc<Semaphore>>,
}

impl Cloud {
    pub fn new(api: &FakeApi) -> Cloud {
        let mut config = SimulatedCloudConfig::new(7, REGION, t(0));
        config.interruptions.rate_multiplier = 0.0;
        Cloud {
            inner: Mutex::new(SimulatedCloud::new(catalog(), config).unwrap()),
            api: api.clone(),
            launched: Mutex::default(),
            gate: None,
        }
    }

    fn crashed() -> cloud::Error {
        cloud::Error::NotReady {
            claim: "-".into(),
            reason: "the controller crashed".into(),
        }
    }

    fn alive(&self) -> cloud::Result<()> {
        if self.api.controller_alive() {
            Ok(())
        } else {
            Err(Cloud::crashed())
        }
    }

    fn effect(&self) -> cloud::Result<()> {
        if self.api.state.lock().unwrap().count_effect() {
            Err(Cloud::crashed())
        } else {
            Ok(())
        }
    }

    /// The alive instances, by claim.
    pub fn alive_instances(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for i in self.inner.lock().unwrap().instances() {
            if i.state.is_alive() {
                out.entry(i.claim.clone()).or_default().push(i.provider_id);
            }
        }
        out
    }
}

impl CloudProvider for Cloud {
    async fn launch(
        &self,
        claim: &ClaimRequest,
        template: &NodeTemplate,
        now: Time,
    ) -> cloud::Result<Instance> {
        if let Some(gate) = &self.gate {
            let _permit = gate.acquire().await;
        }
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

    async fn terminate(&self, claim: &str, now: Time) -> cloud::Result<Instance> {
        self.alive()?;
        let i = self.inner.terminate(claim, now).await?;
        self.effect()?;
        Ok(i)
    }

    async fn reboot(&self, claim: &str, now: Time) -> cloud::Result<Instance> {
        self.alive()?;
        let i = self.inner.reboot(claim, now).await?;
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

/// A store as a freshly listed cache of what the API server holds.
pub fn refresh(store: &Store, api: &FakeApi) {
    api.fill(store);
}

/// The loop's settings in these scenarios.
pub fn settings() -> Settings {
    Settings {
        region: REGION.into(),
        cluster_name: "faults".into(),
        core: quartermaster::core::Config::default(),
        tick: Duration::from_secs(10),
        launch_timeout: Duration::from_secs(300),
        registration_timeout: Duration::from_secs(600),
        gc_grace: Duration::from_secs(120),
        gpu_use: None,
    }
}

/// One scenario's world and controller.
pub struct Harness {
    pub api: FakeApi,
    /// The world's own client (kubelets, scheduler, workload): never fails.
    pub world: KubeApi,
    pub cloud: Arc<Cloud>,
    pub store: Arc<Store>,
    /// Shared by every controller process of the run.
    pub metrics: Arc<Metrics>,
    pub driver: Driver<Cloud>,
    tx: mpsc::Sender<InstanceNotice>,
    acks: NoticeAcks,
    _leader: watch::Sender<bool>,
    _catalog: watch::Sender<Arc<Catalog>>,
    /// The notice queue: notices not reported recorded (or foreign) yet.
    pub queue: Vec<InstanceNotice>,
    /// What the controller reported of each notice, in order.
    pub reports: Vec<(String, NoticeOutcome)>,
    /// Controller processes started after the first.
    pub restarts: usize,
    pub round: i64,
    /// Pods the Job made so far.
    pub pods_made: usize,
    evictions_seen: usize,
    /// Wait for the round's lifecycle steps before the world answers (off:
    /// a step may hang).
    pub settle: bool,
}

impl Harness {
    /// A cluster with the GPU pool and one pending pod of the Job, and a
    /// controller.
    pub fn new(api: FakeApi, cloud: Cloud) -> Harness {
        Harness::with_cloud(api, Arc::new(cloud))
    }

    /// [`Harness::new`] with a cloud the test keeps a handle on.
    pub fn with_cloud(api: FakeApi, cloud: Arc<Cloud>) -> Harness {
        {
            let mut s = api.state.lock().unwrap();
            s.put(POOLS, pool());
            s.put(PODS, pending_pod("train-0"));
        }
        let store = Arc::new(Store::new());
        refresh(&store, &api);
        let metrics = Arc::new(Metrics::unregistered());
        let (driver, tx, acks, leader, catalog) =
            Harness::process(&api, &cloud, &store, &metrics, t(0));
        Harness {
            world: KubeApi::new(api.client()),
            api,
            cloud,
            store,
            metrics,
            driver,
            tx,
            acks,
            _leader: leader,
            _catalog: catalog,
            queue: Vec::new(),
            reports: Vec::new(),
            restarts: 0,
            round: 0,
            pods_made: 1,
            evictions_seen: 0,
            settle: true,
        }
    }

    #[allow(clippy::type_complexity)]
    fn process(
        api: &FakeApi,
        cloud: &Arc<Cloud>,
        store: &Arc<Store>,
        metrics: &Arc<Metrics>,
        now: Time,
    ) -> (
        Driver<Cloud>,
        mpsc::Sender<InstanceNotice>,
        NoticeAcks,
        watch::Sender<bool>,
        watch::Sender<Arc<Catalog>>,
    ) {
        let (leader_tx, leader) = watch::channel(true);
        let (catalog_tx, catalog_rx) = watch::channel(catalog());
        let (tx, notices) = mpsc::channel(64);
        let acks = NoticeAcks::default();
        let ctx = Context {
            api: KubeApi::new(api.controller_client()),
            cloud: cloud.clone(),
            metrics: metrics.clone(),
            catalog: catalog_rx,
            leader,
            ready: Arc::new(AtomicBool::new(true)),
            notices,
            notice_acks: acks.clone(),
            simulated_nodes: false,
        };
        let driver = Driver::new(ctx, settings(), store.clone(), now);
        (driver, tx, acks, leader_tx, catalog_tx)
    }

    /// What the cluster holds, for failure messages: claims with their
    /// status, nodes, pods, the queue and the last requests.
    pub fn dump(&self) -> String {
        let s = self.api.state.lock().unwrap();
        let claims: Vec<_> = s
            .list(CLAIMS)
            .iter()
            .map(|c| {
                (
                    c["metadata"]["name"].clone(),
                    c["metadata"]["deletionTimestamp"].clone(),
                    c["status"].clone(),
                )
            })
            .collect();
        let nodes: Vec<_> = s
            .list(NODES)
            .iter()
            .map(|n| (n["metadata"]["name"].clone(), n["spec"].clone()))
            .collect();
        let pods: Vec<_> = s
            .list(PODS)
            .iter()
            .map(|p| {
                (
                    p["metadata"]["name"].clone(),
                    p["spec"]["nodeName"].clone(),
                    p["metadata"]["annotations"].clone(),
                )
            })
            .collect();
        let last: Vec<_> = s
            .requests
            .iter()
            .rev()
            .take(25)
            .map(|r| format!("{} {} {}", r.method, r.path, r.code))
            .collect();
        format!(
            "round {}\nclaims {claims:#?}\nnodes {nodes:#?}\npods {pods:#?}\nqueue {:?}\nreports {:?}\ninstances {:?}\nlast requests {last:#?}",
            self.round, self.queue, self.reports, self.cloud.alive_instances()
        )
    }

    /// The virtual time of the current round.
    pub fn now(&self) -> Time {
        t(self.round * ROUND)
    }

    /// A spot interruption notice for `claim`'s instance, reclaimed two
    /// minutes from now, into the queue.
    pub fn spot_notice(&mut self, claim: &str) {
        let provider = self.claim(claim).and_then(|c| c.status?.provider_id);
        let provider = provider.expect("the claim has an instance");
        self.queue.push(InstanceNotice {
            instance_id: cloud::instance_id_of(&provider).to_string(),
            kind: NoticeKind::SpotInterruption {
                deadline: self.now() + chrono::TimeDelta::seconds(120),
            },
            time: self.now(),
            id: format!("event-{claim}"),
        });
    }

    pub fn claim(&self, name: &str) -> Option<NodeClaim> {
        let v = self.api.state.lock().unwrap().get(CLAIMS, name)?;
        serde_json::from_value(v).ok()
    }

    pub fn claims(&self) -> Vec<NodeClaim> {
        let list = self.api.state.lock().unwrap().list(CLAIMS);
        list.into_iter()
            .map(|v| serde_json::from_value(v).unwrap())
            .collect()
    }

    pub fn pods(&self) -> Vec<Value> {
        self.api.state.lock().unwrap().list(PODS)
    }

    /// The pod running on a Ready claim's node, with the claim.
    pub fn running(&self) -> Vec<(String, String)> {
        let nodes: BTreeMap<String, String> = self
            .claims()
            .into_iter()
            .filter_map(|c| {
                let node = c.status.as_ref()?.node_name.clone()?;
                Some((node, c.name_any()))
            })
            .collect();
        self.pods()
            .iter()
            .filter_map(|p| {
                let node = p["spec"]["nodeName"].as_str()?;
                let claim = nodes.get(node)?;
                Some((p["metadata"]["name"].as_str()?.to_string(), claim.clone()))
            })
            .collect()
    }

    /// One round: a new controller process first if the last one crashed;
    /// the queue's notices delivered; the controller's round with its
    /// lifecycle steps seen through; then the world answers.
    pub async fn step(&mut self) {
        self.round += 1;
        let now = self.now();
        if !self.api.controller_alive() {
            self.api.restart();
            self.restarts += 1;
            let (driver, tx, acks, leader, catalog) =
                Harness::process(&self.api, &self.cloud, &self.store, &self.metrics, now);
            (self.driver, self.tx, self.acks) = (driver, tx, acks);
            (self._leader, self._catalog) = (leader, catalog);
        }
        for n in &self.queue {
            let _ = self.tx.try_send(n.clone());
        }
        refresh(&self.store, &self.api);
        self.driver.round(now).await;
        if self.settle {
            self.driver.settle().await;
        }
        for ack in self.acks.take() {
            self.reports.push((ack.id.clone(), ack.outcome));
            if matches!(
                ack.outcome,
                NoticeOutcome::Recorded | NoticeOutcome::Foreign
            ) {
                self.queue
                    .retain(|n| !(n.id == ack.id && n.instance_id == ack.instance_id));
            }
        }
        self.world_step(now).await;
    }

    /// The kubelets, the scheduler, the workload and its Job.
    async fn world_step(&mut self, now: Time) {
        // Kubelets: nodes come and go with the instances.
        let instances = self.cloud.inner.lock().unwrap().instances();
        refresh(&self.store, &self.api);
        let ops = self.store.read(|s| {
            simulated_nodes::plan(&instances, &s.claims, &s.nodes, Timing::default(), now)
        });
        simulated_nodes::apply(&self.world, ops, now).await;
        let mut s = self.api.state.lock().unwrap();
        // The workload acknowledges a checkpoint request a round later.
        for mut p in s.list(PODS) {
            let a = &p["metadata"]["annotations"];
            if a.get(l::CHECKPOINT_REQUESTED).is_some() && a.get(l::CHECKPOINT_COMPLETED).is_none()
            {
                p["metadata"]["annotations"][l::CHECKPOINT_COMPLETED] =
                    json!(quartermaster::controller::checkpoint::rfc3339(now));
                s.put(PODS, p);
            }
        }
        // The Job: an evicted pod comes back, pending, under a new name.
        while self.evictions_seen < s.evictions.len() {
            self.evictions_seen += 1;
            let name = format!("train-{}", self.pods_made);
            self.pods_made += 1;
            s.put(PODS, pending_pod(&name));
        }
        // The scheduler: a pending pod goes to a free, schedulable node of
        // a Ready claim.
        let ready: Vec<String> = s
            .list(CLAIMS)
            .iter()
            .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|c| {
                let st: quartermaster::api::NodeClaimStatus =
                    serde_json::from_value(c["status"].clone()).ok()?;
                st.is_true(conditions::READY).then_some(st.node_name?)
            })
            .collect();
        let busy: BTreeSet<String> = s
            .list(PODS)
            .iter()
            .filter_map(|p| p["spec"]["nodeName"].as_str().map(str::to_string))
            .collect();
        let free: Vec<String> = ready
            .into_iter()
            .filter(|n| !busy.contains(n))
            .filter(|n| {
                s.get(NODES, n)
                    .is_some_and(|node| node["spec"]["unschedulable"] != json!(true))
            })
            .collect();
        let pending: Vec<Value> = s
            .list(PODS)
            .into_iter()
            .filter(|p| p["spec"]["nodeName"].is_null())
            .collect();
        for (mut p, node) in pending.into_iter().zip(free) {
            p["spec"]["nodeName"] = json!(node);
            p["status"] = json!({"phase": "Running", "podIP": "10.0.0.7",
                "startTime": quartermaster::controller::checkpoint::rfc3339(now)});
            s.put(PODS, p);
        }
    }

    /// Checks what every scenario must hold once the run settled:
    /// `notices` notices for our instances were each recorded once and let
    /// go; no pod was evicted without its checkpoint request; each claim had
    /// at most one instance and every alive instance has its claim; no node
    /// is left cordoned. `at` names the run in messages.
    pub fn check_invariants(&self, notices: usize, at: &str) {
        assert!(
            self.queue.is_empty(),
            "{at}: notices never recorded: {:?}",
            self.queue
        );
        let recorded = self
            .reports
            .iter()
            .filter(|(_, o)| *o == NoticeOutcome::Recorded)
            .count();
        assert!(recorded >= notices, "{at}: {:?}", self.reports);
        let s = self.api.state.lock().unwrap();
        // Acted on once: each interrupted claim's condition written once
        // (one transition time in every status write that carries it).
        let mut times: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for r in s.requests.iter().filter(|r| r.applied) {
            if !(r.path.contains("/nodeclaims/") && r.path.ends_with("/status")) {
                continue;
            }
            let conds = r.body["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for c in conds
                .iter()
                .filter(|c| c["type"] == conditions::INTERRUPTED)
            {
                times
                    .entry(r.path.clone())
                    .or_default()
                    .insert(c["lastTransitionTime"].to_string());
            }
        }
        assert_eq!(times.len(), notices, "{at}: {times:?}");
        for (claim, t) in &times {
            assert_eq!(
                t.len(),
                1,
                "{at}: {claim} interrupted more than once: {t:?}"
            );
        }
        for (pod, annotations) in &s.evicted_with {
            assert!(
                annotations.contains_key(l::CHECKPOINT_REQUESTED),
                "{at}: {pod} evicted without a checkpoint request: {annotations:?}"
            );
        }
        drop(s);
        for (claim, ids) in self.cloud.launched.lock().unwrap().iter() {
            assert_eq!(ids.len(), 1, "{at}: {claim} launched {ids:?}");
        }
        let claims: BTreeSet<String> = self.claims().iter().map(|c| c.name_any()).collect();
        for (claim, ids) in self.cloud.alive_instances() {
            assert!(claims.contains(&claim), "{at}: {claim}'s {ids:?} leaked");
            assert_eq!(ids.len(), 1, "{at}: {claim} runs {ids:?}");
        }
        for n in self.api.state.lock().unwrap().list(NODES) {
            assert_ne!(
                n["spec"]["unschedulable"],
                json!(true),
                "{at}: node {} left cordoned",
                n["metadata"]["name"]
            );
        }
    }
}

/// The life every scenario runs: the Job's pod gets a node; a spot notice
/// comes for that node's instance; the pod checkpoints, is evicted and comes
/// back on a new node; the interrupted claim goes. Returns once that is
/// done (or after `max_rounds`), with whether it was.
pub async fn interrupted_life(h: &mut Harness, max_rounds: usize) -> bool {
    let mut noticed: Option<String> = None;
    for _ in 0..max_rounds {
        h.step().await;
        let running = h.running();
        match &noticed {
            None => {
                if let Some((_, claim)) = running.iter().find(|(p, _)| p == "train-0") {
                    let claim = claim.clone();
                    h.spot_notice(&claim);
                    noticed = Some(claim);
                }
            }
            Some(claim) => {
                let gone = h.claim(claim).is_none();
                let moved = running.iter().any(|(p, c)| p != "train-0" && c != claim);
                if gone && moved && h.queue.is_empty() {
                    // A few more rounds: nothing else may happen.
                    for _ in 0..3 {
                        h.step().await;
                    }
                    return true;
                }
            }
        }
    }
    false
}
