//! A cluster at scale for the real controller binary: a GPU NodePool,
//! existing nodes full of running pods (not Quartermaster's: no
//! NodeClaims, as the simulated cloud starts empty), then a burst of
//! pending GPU pods; the binary runs against it over loopback HTTP
//! ([`super::fake_http`]) and is measured: when its NodeClaims cover the
//! burst (each pod's `Nominated` Event names its claim, whose creation the
//! server logged) and its peak RSS. Shared by the
//! `controller_scale` benchmark and the test that keeps its server honest.

#![allow(dead_code)]

use super::fake_api::{FakeApi, State};
use super::fake_http::HttpApi;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Collections of the objects written here.
pub const NODES: &str = "api/v1/nodes";
/// NodePools.
pub const NODEPOOLS: &str = "apis/quartermaster.dev/v1alpha1/nodepools";
/// NodeClaims, as the controller's requests name them.
pub const CLAIMS_PATH: &str = "/apis/quartermaster.dev/v1alpha1/nodeclaims";
/// The namespace of the pending pods.
pub const PENDING_NS: &str = "ml";
/// A controller whose resident set passes this is stopped (a runaway
/// must not take the machine down with it).
pub const RSS_LIMIT: u64 = 3 << 30;
/// Namespaces the running pods are spread over.
const NAMESPACES: usize = 20;
/// GPUs per pending pod, in turn.
const GPU_SHAPES: [u32; 5] = [1, 1, 2, 4, 8];

/// The GPU NodePool the burst is planned on: spot or on-demand g5, g6e,
/// p4d and p5 nodes, tainted for GPU pods.
pub fn pool() -> Value {
    json!({
        "apiVersion": "quartermaster.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "gpu", "uid": "uid-pool-gpu", "generation": 1},
        "spec": {
            "capacityTypes": ["spot", "on-demand"],
            "template": {"spec": {
                "requirements": [{
                    "key": "quartermaster.dev/instance-family",
                    "operator": "In",
                    "values": ["g5", "g6e", "p4d", "p5"]
                }],
                "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
            }}
        }
    })
}

const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

/// Existing node `i`: every tenth an 8-GPU p4d (GPU-tainted), the others
/// m5.24xlarge; Ready, with kubelet-like labels.
pub fn node(i: usize) -> Value {
    let gpu = i.is_multiple_of(10);
    let (instance_type, allocatable) = if gpu {
        (
            "p4d.24xlarge",
            json!({"cpu": "95690m", "memory": "1130Gi", "pods": "737", "nvidia.com/gpu": "8"}),
        )
    } else {
        (
            "m5.24xlarge",
            json!({"cpu": "95690m", "memory": "370Gi", "pods": "737"}),
        )
    };
    let taints = if gpu {
        json!([{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    } else {
        json!([])
    };
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": format!("node-{i:05}"), "uid": format!("uid-node-{i}"),
            "labels": {
                "kubernetes.io/hostname": format!("node-{i:05}"),
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": instance_type,
                "topology.kubernetes.io/region": "us-east-1",
                "topology.kubernetes.io/zone": ZONES[i % 3]
            }
        },
        "spec": {"providerID": format!("aws:///us-east-1a/i-{i:017x}"), "taints": taints},
        "status": {
            "capacity": allocatable.clone(),
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
        }
    })
}

/// Running pod `i` on `node`; on a GPU node the first eight ask for a GPU.
pub fn running_pod(i: usize, node: usize, slot: usize) -> Value {
    let gpu = node.is_multiple_of(10) && slot < 8;
    let mut requests = json!({"cpu": "500m", "memory": "1Gi"});
    let mut tolerations = json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    ]);
    if gpu {
        requests["nvidia.com/gpu"] = json!("1");
        tolerations
            .as_array_mut()
            .expect("an array")
            .push(json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}));
    }
    let app = format!("app-{}", i / 50);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{app}-{i:06}"), "namespace": format!("team-{}", i % NAMESPACES),
            "uid": format!("uid-pod-{i}"),
            "labels": {"app": app, "pod-template-hash": "5d8f7c9b6"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("{app}-5d8f7c9b6"), "uid": format!("uid-rs-{}", i / 50), "controller": true}]
        },
        "spec": {
            "nodeName": format!("node-{node:05}"),
            "schedulerName": "default-scheduler",
            "containers": [{"name": "main", "image": "registry.example/app:1.0",
                "resources": {"requests": requests.clone(), "limits": requests}}],
            "tolerations": tolerations
        },
        "status": {
            "phase": "Running", "podIP": format!("10.{}.{}.{}", i >> 16 & 255, i >> 8 & 255, i & 255),
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"}
            ]
        }
    })
}

/// Pending GPU pod `i` of the burst: 1, 1, 2, 4 or 8 GPUs in turn,
/// tolerating the GPU taint, marked unschedulable by the scheduler.
pub fn pending_pod(i: usize) -> Value {
    let gpus = GPU_SHAPES[i % GPU_SHAPES.len()];
    let requests = json!({
        "cpu": (4 * gpus).to_string(),
        "memory": format!("{}Gi", 16 * gpus),
        "nvidia.com/gpu": gpus.to_string()
    });
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("train-{i:05}"), "namespace": PENDING_NS,
            "uid": format!("uid-train-{i}"), "labels": {"job": format!("train-{}", i / 10)}
        },
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [{"name": "main", "image": "registry.example/trainer:1.0",
                "resources": {"requests": requests.clone(), "limits": {"nvidia.com/gpu": gpus.to_string()}}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/5000 nodes are available: insufficient nvidia.com/gpu"}]
        }
    })
}

/// How big a cluster is.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    /// Existing nodes.
    pub nodes: usize,
    /// Running pods on them (spread evenly).
    pub pods: usize,
    /// Pending GPU pods in the burst.
    pub burst: usize,
}

/// Fills `state` with the pool, `size.nodes` nodes and `size.pods`
/// running pods (the burst comes later, [`burst`]); timestamps from the
/// wall clock, as a live controller expects.
pub fn fill(state: &mut State, size: Size) {
    state.clock = super::fake_api::wall_clock;
    state.put(NODEPOOLS, pool());
    for i in 0..size.nodes {
        state.put(NODES, node(i));
    }
    for i in 0..size.pods {
        let node = i % size.nodes.max(1);
        let slot = i / size.nodes.max(1);
        let pod = running_pod(i, node, slot);
        let collection = format!(
            "api/v1/namespaces/{}/pods",
            pod["metadata"]["namespace"].as_str().unwrap_or_default()
        );
        state.put(&collection, pod);
    }
}

/// Adds the burst's pending pods at once; their names and the version of
/// the last one.
pub fn burst(state: &mut State, count: usize) -> (Vec<String>, u64) {
    let collection = format!("api/v1/namespaces/{PENDING_NS}/pods");
    let mut names = Vec::with_capacity(count);
    for i in 0..count {
        let pod = pending_pod(i);
        names.push(
            pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        state.put(&collection, pod);
    }
    (names, state.version())
}

/// When a pods watch first had delivered everything up to `version`, if
/// one has.
pub fn delivered(state: &State, version: u64) -> Option<Instant> {
    state
        .watch_sent
        .get("api/v1/pods")?
        .iter()
        .find(|(sent, _)| *sent >= version)
        .map(|(_, at)| *at)
}

/// For each pod that has a `Nominated` Event, when the first NodeClaim it
/// was nominated to was created (as the server logged the claim's
/// creation): the pod's first decision. A pod nominated again later (its
/// node interrupted, its claim failed) keeps its first time; see
/// [`nominations`] for how many were.
pub fn covered(state: &State) -> HashMap<String, Instant> {
    let mut first: HashMap<String, Instant> = HashMap::new();
    for (pod, _, at) in nominated(state) {
        first
            .entry(pod)
            .and_modify(|t| *t = (*t).min(at))
            .or_insert(at);
    }
    first
}

/// For each pod with a `Nominated` Event, how many claims it was nominated
/// to (more than one: it was placed again after its first claim or node
/// was lost).
pub fn nominations(state: &State) -> HashMap<String, usize> {
    let mut claims: HashMap<String, std::collections::BTreeSet<String>> = HashMap::new();
    for (pod, claim, _) in nominated(state) {
        claims.entry(pod).or_default().insert(claim);
    }
    claims.into_iter().map(|(p, c)| (p, c.len())).collect()
}

/// Each `Nominated` Event as (pod, claim, creation time of the claim).
fn nominated(state: &State) -> Vec<(String, String, Instant)> {
    let events = format!("/apis/events.k8s.io/v1/namespaces/{PENDING_NS}/events");
    let created: HashMap<&str, Instant> = state
        .requests
        .iter()
        .filter(|r| r.method == http::Method::POST && r.path == CLAIMS_PATH && r.code == 201)
        .filter_map(|r| Some((r.body["metadata"]["name"].as_str()?, r.at)))
        .collect();
    state
        .requests
        .iter()
        .filter(|r| r.method == http::Method::POST && r.path == events)
        .filter(|r| r.body["reason"] == "Nominated")
        .filter_map(|r| {
            let pod = r.body["regarding"]["name"].as_str()?;
            let claim = r.body["related"]["name"].as_str()?;
            Some((pod.to_string(), claim.to_string(), *created.get(claim)?))
        })
        .collect()
}

/// The GPUs the NodeClaims created so far hold, by claim name.
pub fn claimed_gpus(state: &State) -> BTreeMap<String, u64> {
    state
        .list("apis/quartermaster.dev/v1alpha1/nodeclaims")
        .iter()
        .filter_map(|c| {
            let gpus = c["spec"]["resources"]["nvidia.com/gpu"]
                .as_str()?
                .parse()
                .ok()?;
            Some((c["metadata"]["name"].as_str()?.to_string(), gpus))
        })
        .collect()
}

/// The `q`-quantile (0..=1) of sorted durations.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The controller binary as a child process, killed (and reaped) when
/// dropped: on every way out of a test or benchmark, a panic included.
pub struct Controller {
    child: Child,
    /// Where its logs go.
    pub log: PathBuf,
    /// Its `/healthz` and `/readyz` port.
    pub health_port: u16,
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Controller {
    /// Starts `binary controller --cloud simulated` against `server`
    /// (kubeconfig and logs in `dir`), without leader election, metrics
    /// and probes on loopback ports, with `extra` arguments.
    ///
    /// # Panics
    /// When the binary cannot be started.
    pub fn start(binary: &Path, server: &HttpApi, dir: &Path, extra: &[&str]) -> Controller {
        std::fs::create_dir_all(dir).expect("a work directory");
        let kubeconfig = dir.join("kubeconfig");
        server.write_kubeconfig(&kubeconfig);
        let log = dir.join("controller.log");
        let (metrics_port, health_port) = (free_port(), free_port());
        let child = Command::new(binary)
            .args([
                "controller",
                "--cloud",
                "simulated",
                "--cluster-name",
                "scale",
            ])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
            .args(["--health-addr", &format!("127.0.0.1:{health_port}")])
            .args(["--log-format", "text", "--log-level", "info"])
            .args(extra)
            .env_clear()
            .env("KUBECONFIG", &kubeconfig)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("a log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        Controller {
            child,
            log,
            health_port,
        }
    }

    /// The process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Waits until `/readyz` answers 200 (every watch has listed).
    ///
    /// # Panics
    /// When the process exits or `timeout` passes first.
    pub async fn wait_ready(&mut self, timeout: Duration) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            self.check();
            if http_get(self.health_port, "/readyz").await.map(|r| r.0) == Some(200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "the controller was not ready within {timeout:?}:\n{}",
            self.log_tail()
        );
    }

    /// A `VmXXX` line of `/proc/PID/status`, in bytes (`VmRSS`, `VmHWM`:
    /// the peak resident set).
    pub fn memory(&self, field: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status
            .lines()
            .find(|l| l.starts_with(&format!("{field}:")))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }

    /// Checks that it is still running and within [`RSS_LIMIT`].
    ///
    /// # Panics
    /// When it exited or grew past the limit (dropping it then kills it).
    pub fn check(&mut self) {
        if let Some(status) = self.child.try_wait().expect("the child's status") {
            panic!("the controller exited ({status}):\n{}", self.log_tail());
        }
        let rss = self.memory("VmRSS").unwrap_or(0);
        assert!(
            rss <= RSS_LIMIT,
            "the controller's resident set reached {} MB: stopped\n{}",
            rss >> 20,
            self.log_tail()
        );
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status code and whole response of a GET on a loopback port,
/// `None` when nothing answers.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.ok()?;
    let code = raw.split(' ').nth(1)?.parse().ok()?;
    Some((code, raw))
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The cluster.
    pub size: Size,
    /// From start to `/readyz` (every watch listed).
    pub sync: Duration,
    /// Resident set once synced.
    pub rss_synced: u64,
    /// Peak resident set over the whole run (`VmHWM`).
    pub peak_rss: u64,
    /// Per burst pod, from the watch delivering it to the creation of the
    /// NodeClaim that covers it; sorted.
    pub latencies: Vec<Duration>,
    /// Burst pods no claim covered within the wait.
    pub uncovered: usize,
    /// NodeClaims created.
    pub claims: usize,
    /// The GPUs those claims hold.
    pub claimed_gpus: u64,
}

/// Runs `binary` against a cluster of `size`: fills the server, starts
/// the controller with `extra` arguments, waits for it to sync, adds the
/// burst, waits (at most `wait`) until every burst pod is covered, and
/// measures.
///
/// # Panics
/// When the controller does not start, sync or stay up.
pub async fn run(binary: &Path, size: Size, extra: &[&str], wait: Duration) -> Measured {
    let api = FakeApi::new();
    fill(&mut api.state.lock().unwrap(), size);
    let server = HttpApi::start(api.clone()).await;
    let dir = super::TempDir::new(&format!("qm-scale-{}-{}", size.nodes, size.pods));
    let started = Instant::now();
    let mut controller = Controller::start(binary, &server, &dir, extra);
    controller.wait_ready(Duration::from_secs(600)).await;
    let sync = started.elapsed();
    // Let the first rounds after the sync settle before measuring.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_synced = controller.memory("VmRSS").unwrap_or(0);

    let (pods, version) = burst(&mut api.state.lock().unwrap(), size.burst);
    let deadline = Instant::now() + wait;
    let (visible, covered) = loop {
        controller.check();
        let (visible, covered) = {
            let s = api.state.lock().unwrap();
            (delivered(&s, version), covered(&s))
        };
        let all = pods.iter().all(|p| covered.contains_key(p));
        if (visible.is_some() && all) || Instant::now() > deadline {
            break (visible, covered);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let peak_rss = controller.memory("VmHWM").unwrap_or(0);
    let gpus = claimed_gpus(&api.state.lock().unwrap());
    drop(controller);
    drop(server);
    let visible = visible.expect("the pods watch delivered the burst");
    let mut latencies: Vec<Duration> = pods
        .iter()
        .filter_map(|p| covered.get(p))
        .map(|at| at.saturating_duration_since(visible))
        .collect();
    latencies.sort();
    Measured {
        size,
        sync,
        rss_synced,
        peak_rss,
        uncovered: pods.len() - latencies.len(),
        latencies,
        claims: gpus.len(),
        claimed_gpus: gpus.values().sum(),
    }
}
