//! Controller under a launch storm while EC2 throttles: the controller's
//! real loop (`controller::run::run_watching`, in process) lists and watches
//! a cluster served over loopback HTTP by the fake API server of
//! `tests/support`, with a simulated cloud behind a throttling EC2 stand-in
//! (every call takes 100-400 ms; each attempt is throttled with probability
//! 1/3 and retried as the SDK does: three attempts, jittered backoff from
//! 1 s, then `NotReady`). It gets a 64-node gang (64 pods of 8 GPUs that
//! must start together) and a 300-pod GPU burst at once; a stand-in
//! scheduler binds each pod to its claim's node once Ready; then spot
//! interruption warnings come for our instances, one every 2 s, while the
//! launches go on. Measured:
//! - per notice, from its arrival to its node's cordon and its pods'
//!   checkpoint request (target: within 30 s);
//! - per pending pod, from the pods watch delivering it to the creation of
//!   the first NodeClaim it is nominated to, less the 1 s batch window
//!   ("decision time after the batch", target: p99 at most 2 s); a pod
//!   placed again later (its node got a notice, its claim failed) is
//!   counted in its own column, not as a slow first decision;
//! - claims launched twice (target: none).
//!
//! The same run measures a baseline without throttling and prints the
//! ratios. Not run by `scripts/test`.
//!
//! ```text
//! cargo bench --bench controller_faults
//! cargo bench --bench controller_faults -- --notices 30
//! ```

#[path = "../tests/support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

use quartermaster::catalog::Catalog;
use quartermaster::cloud::simulated::{SimulatedCloud, SimulatedCloudConfig};
use quartermaster::cloud::{
    self, CloudProvider, Instance, InstanceNotice, NodeTemplate, NoticeKind,
};
use quartermaster::controller::kube_api::KubeApi;
use quartermaster::controller::run::{run_watching, Context, Settings};
use quartermaster::core::{ClaimRequest, Time};
use quartermaster::metrics::Metrics;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::fake_api::{FakeApi, State};
use support::fake_http::HttpApi;
use support::scale::{self, Size};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

const GANG: usize = 64;
const BURST: usize = 300;
const BATCH_IDLE: Duration = Duration::from_secs(1);
const NOTICE_TARGET: Duration = Duration::from_secs(30);
const P99_TARGET: Duration = Duration::from_secs(2);
const NS: &str = scale::PENDING_NS;

/// EC2 as the controller sees it through the SDK: each call's attempts take
/// 100-400 ms and are throttled with probability `throttle`; the SDK tries
/// three times with a jittered backoff (1 s doubling) and gives up with
/// `NotReady` (as `RequestLimitExceeded` past the retries reaches the
/// provider).
struct ThrottledEc2 {
    inner: Mutex<SimulatedCloud>,
    throttle: f64,
    rng: Mutex<rand_chacha::ChaCha8Rng>,
    attempts: AtomicU64,
    throttled: AtomicU64,
    /// Provider IDs each claim's launches returned.
    launched: Mutex<BTreeMap<String, BTreeSet<String>>>,
}

impl ThrottledEc2 {
    /// One call: its attempts, as the SDK makes them.
    async fn call(&self, claim: &str) -> cloud::Result<()> {
        for attempt in 0..3u32 {
            let (latency, throttled, backoff) = {
                let mut rng = self.rng.lock().unwrap();
                (
                    Duration::from_millis(rng.random_range(100..400)),
                    rng.random::<f64>() < self.throttle,
                    Duration::from_millis(rng.random_range(0..1000u64 << attempt)),
                )
            };
            self.attempts.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(latency).await;
            if !throttled {
                return Ok(());
            }
            self.throttled.fetch_add(1, Ordering::Relaxed);
            if attempt < 2 {
                tokio::time::sleep(backoff).await;
            }
        }
        Err(cloud::Error::NotReady {
            claim: claim.into(),
            reason: "EC2 failed with RequestLimitExceeded: Request limit exceeded.".into(),
        })
    }
}

impl CloudProvider for ThrottledEc2 {
    async fn launch(
        &self,
        claim: &ClaimRequest,
        template: &NodeTemplate,
        now: Time,
    ) -> cloud::Result<Instance> {
        // DescribeInstances (reused across launches for a while: one call
        // in three), then CreateFleet.
        if self.rng.lock().unwrap().random::<f64>() < 1.0 / 3.0 {
            self.call(&claim.claim).await?;
        }
        self.call(&claim.claim).await?;
        let i = self.inner.launch(claim, template, now).await?;
        self.launched
            .lock()
            .unwrap()
            .entry(claim.claim.clone())
            .or_default()
            .insert(i.provider_id.clone());
        Ok(i)
    }

    async fn terminate(&self, claim: &str, now: Time) -> cloud::Result<Instance> {
        self.call(claim).await?;
        self.inner.terminate(claim, now).await
    }

    async fn reboot(&self, claim: &str, now: Time) -> cloud::Result<Instance> {
        self.call(claim).await?;
        self.inner.reboot(claim, now).await
    }

    async fn describe(&self, claim: &str) -> cloud::Result<Option<Instance>> {
        self.call(claim).await?;
        self.inner.describe(claim).await
    }

    async fn instances(&self) -> cloud::Result<Vec<Instance>> {
        self.call("*").await?;
        self.inner.instances().await
    }
}

fn catalog() -> Arc<Catalog> {
    Arc::new(Catalog::embedded().expect("the embedded catalog"))
}

/// Gang member `i`: 8 GPUs, in gang `allreduce` of [`GANG`].
fn gang_pod(i: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("allreduce-{i:03}"), "namespace": NS, "uid": format!("uid-gang-{i}"),
            "annotations": {
                "quartermaster.dev/pod-group": "allreduce",
                "quartermaster.dev/pod-group-size": GANG.to_string(),
                "quartermaster.dev/checkpoint": "true",
                "quartermaster.dev/checkpoint-duration": "30s"
            }
        },
        "spec": {
            "containers": [{"name": "main", "resources": {"requests":
                {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"}}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable"}]}
    })
}

/// Burst pod `i` (the scale benchmark's shapes), opted in to checkpoints
/// that take 30 s.
fn burst_pod(i: usize) -> Value {
    let mut p = scale::pending_pod(i);
    p["metadata"]["annotations"] = json!({
        "quartermaster.dev/checkpoint": "true",
        "quartermaster.dev/checkpoint-duration": "30s"
    });
    p
}

fn now_rfc3339() -> String {
    quartermaster::controller::checkpoint::rfc3339(chrono::Utc::now())
}

/// The stand-in scheduler: each pod nominated to a Ready claim goes to its
/// node. Returns the claims with bound pods, with their provider IDs and
/// nodes.
fn schedule(s: &mut State) -> Vec<(String, String, String)> {
    let pods_collection = format!("api/v1/namespaces/{NS}/pods");
    let events = format!("/apis/events.k8s.io/v1/namespaces/{NS}/events");
    let nominated: HashMap<String, String> = s
        .requests
        .iter()
        .filter(|r| r.path == events && r.body["reason"] == "Nominated")
        .filter_map(|r| {
            Some((
                r.body["regarding"]["name"].as_str()?.to_string(),
                r.body["related"]["name"].as_str()?.to_string(),
            ))
        })
        .collect();
    let mut ready: HashMap<String, (String, String)> = HashMap::new();
    for c in s.list("apis/quartermaster.dev/v1alpha1/nodeclaims") {
        let conditions = c["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let is_ready = conditions
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        let (Some(node), Some(provider)) = (
            c["status"]["nodeName"].as_str(),
            c["status"]["providerID"].as_str(),
        ) else {
            continue;
        };
        if is_ready && c["metadata"]["deletionTimestamp"].is_null() {
            let name = c["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            ready.insert(name, (provider.to_string(), node.to_string()));
        }
    }
    let mut bound: BTreeMap<String, (String, String)> = BTreeMap::new();
    for mut p in s.list(&pods_collection) {
        let name = p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let Some(claim) = nominated.get(&name) else {
            continue;
        };
        let Some((provider, node)) = ready.get(claim) else {
            continue;
        };
        if p["spec"]["nodeName"].is_null() {
            p["spec"]["nodeName"] = json!(node);
            p["status"] =
                json!({"phase": "Running", "podIP": "10.1.0.1", "startTime": now_rfc3339()});
            s.put(&pods_collection, p);
        }
        bound.insert(claim.clone(), (provider.clone(), node.clone()));
    }
    bound.into_iter().map(|(c, (p, n))| (c, p, n)).collect()
}

/// When the node was first cordoned by us, and when a pod on it first got
/// a checkpoint request, as the server logged them.
fn acted(s: &State, node: &str, pods: &BTreeSet<String>) -> (Option<Instant>, Option<Instant>) {
    let node_path = format!("/api/v1/nodes/{node}");
    let cordon = s
        .requests
        .iter()
        .filter(|r| r.path == node_path && r.code < 400 && r.method == http::Method::PATCH)
        .find(|r| r.body.to_string().contains("quartermaster.dev/disrupted"))
        .map(|r| r.at);
    let request = s
        .requests
        .iter()
        .filter(|r| r.method == http::Method::PATCH && r.code < 400)
        .filter(|r| {
            r.path
                .rsplit('/')
                .next()
                .is_some_and(|name| pods.contains(name))
        })
        .find(|r| {
            r.body
                .to_string()
                .contains("quartermaster.dev/checkpoint-requested")
        })
        .map(|r| r.at);
    (cordon, request)
}

/// What one run measured.
struct Measured {
    throttle: f64,
    attempts: u64,
    throttled: u64,
    /// Per pending pod, delivered to covered, less the batch window; sorted.
    decisions: Vec<Duration>,
    uncovered: usize,
    /// Pods nominated to more than one claim (placed again after a loss).
    replaced: usize,
    /// Per notice, arrival to cordon and checkpoint request; sorted (a
    /// notice never acted on counts as the run's length).
    notices: Vec<Duration>,
    not_acted: usize,
    claims: usize,
    doubled: usize,
}

async fn run(throttle: f64, notices: usize) -> Measured {
    let api = FakeApi::new();
    {
        let mut s = api.state.lock().unwrap();
        scale::fill(
            &mut s,
            Size {
                nodes: 50,
                pods: 500,
                burst: 0,
            },
        );
    }
    let server = HttpApi::start(api.clone()).await;
    let client =
        kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).expect("a client");
    let cloud = Arc::new(ThrottledEc2 {
        inner: Mutex::new(
            SimulatedCloud::new(catalog(), {
                let mut c = SimulatedCloudConfig::new(7, "us-east-1", chrono::Utc::now());
                c.interruptions.rate_multiplier = 0.0;
                c
            })
            .unwrap(),
        ),
        throttle,
        rng: Mutex::new(rand_chacha::ChaCha8Rng::seed_from_u64(11)),
        attempts: AtomicU64::new(0),
        throttled: AtomicU64::new(0),
        launched: Mutex::default(),
    });
    let (_leader_tx, leader) = watch::channel(true);
    let (_catalog_tx, catalog_rx) = watch::channel(catalog());
    let (notices_tx, notices_rx) = mpsc::channel(256);
    let ready = Arc::new(AtomicBool::new(false));
    let ctx = Context {
        api: KubeApi::new(client.clone()),
        cloud: cloud.clone(),
        metrics: Arc::new(Metrics::unregistered()),
        catalog: catalog_rx,
        leader,
        ready: ready.clone(),
        notices: notices_rx,
        notice_acks: Default::default(),
        simulated_nodes: true,
    };
    let settings = Settings {
        region: "us-east-1".into(),
        cluster_name: "bench".into(),
        core: quartermaster::core::Config {
            batch_idle: BATCH_IDLE,
            batch_max: Duration::from_secs(10),
            ..quartermaster::core::Config::default()
        },
        tick: Duration::from_secs(30),
        launch_timeout: Duration::from_secs(300),
        registration_timeout: Duration::from_secs(900),
        gc_grace: Duration::from_secs(600),
        gpu_use: None,
    };
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run_watching(ctx, settings, client, shutdown.clone()));
    let started = Instant::now();
    while !ready.load(Ordering::Acquire) {
        assert!(started.elapsed() < Duration::from_secs(300), "not ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The gang and the burst, at once.
    let (pods, version) = {
        let mut s = api.state.lock().unwrap();
        let collection = format!("api/v1/namespaces/{NS}/pods");
        let mut names = Vec::new();
        for i in 0..GANG {
            let p = gang_pod(i);
            names.push(p["metadata"]["name"].as_str().unwrap().to_string());
            s.put(&collection, p);
        }
        for i in 0..BURST {
            let p = burst_pod(i);
            names.push(p["metadata"]["name"].as_str().unwrap().to_string());
            s.put(&collection, p);
        }
        (names, s.version())
    };
    let load_started = Instant::now();
    // Notices, one every 2 s, for instances with bound pods, while the
    // launches go on; then until every pod is covered and every notice
    // answered (at most 10 minutes).
    let mut sent: Vec<(Instant, String, BTreeSet<String>)> = Vec::new();
    let mut noticed: BTreeSet<String> = BTreeSet::new();
    let mut last_notice = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let (bound, covered, answered) = {
            let mut s = api.state.lock().unwrap();
            let bound = schedule(&mut s);
            let covered = scale::covered(&s);
            let answered = sent
                .iter()
                .filter(|(_, node, pods)| {
                    let (c, r) = acted(&s, node, pods);
                    c.is_some() && r.is_some()
                })
                .count();
            (bound, covered, answered)
        };
        if sent.len() < notices && last_notice.elapsed() >= Duration::from_secs(2) {
            if let Some((claim, provider, node)) =
                bound.iter().find(|(c, _, _)| !noticed.contains(c))
            {
                let on_node: BTreeSet<String> = {
                    let s = api.state.lock().unwrap();
                    s.list(&format!("api/v1/namespaces/{NS}/pods"))
                        .iter()
                        .filter(|p| p["spec"]["nodeName"] == json!(node))
                        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
                        .collect()
                };
                let notice = InstanceNotice {
                    instance_id: cloud::instance_id_of(provider).to_string(),
                    kind: NoticeKind::SpotInterruption {
                        deadline: chrono::Utc::now() + chrono::TimeDelta::seconds(120),
                    },
                    time: chrono::Utc::now(),
                    id: format!("event-{claim}"),
                };
                notices_tx
                    .send(notice)
                    .await
                    .expect("the loop takes notices");
                sent.push((Instant::now(), node.clone(), on_node));
                noticed.insert(claim.clone());
                last_notice = Instant::now();
            }
        }
        let all_covered = pods.iter().all(|p| covered.contains_key(p));
        if (all_covered && sent.len() == notices && answered == notices)
            || Instant::now() > deadline
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = load_started.elapsed();
    let (decisions, uncovered, replaced, notice_latencies, not_acted, claims) = {
        let s = api.state.lock().unwrap();
        let visible = scale::delivered(&s, version).expect("the pods watch delivered the load");
        let covered = scale::covered(&s);
        let mut decisions: Vec<Duration> = pods
            .iter()
            .filter_map(|p| covered.get(p))
            .map(|at| {
                at.saturating_duration_since(visible)
                    .saturating_sub(BATCH_IDLE)
            })
            .collect();
        decisions.sort();
        let replaced = scale::nominations(&s)
            .iter()
            .filter(|(p, n)| **n > 1 && pods.contains(p))
            .count();
        let mut latencies = Vec::new();
        let mut not_acted = 0;
        for (at, node, pods) in &sent {
            match acted(&s, node, pods) {
                (Some(c), Some(r)) => latencies.push(c.max(r).saturating_duration_since(*at)),
                _ => {
                    not_acted += 1;
                    latencies.push(took);
                }
            }
        }
        latencies.sort();
        let claims = s.list("apis/quartermaster.dev/v1alpha1/nodeclaims").len();
        (
            decisions,
            pods.len() - covered.len().min(pods.len()),
            replaced,
            latencies,
            not_acted,
            claims,
        )
    };
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
    let doubled = cloud
        .launched
        .lock()
        .unwrap()
        .values()
        .filter(|ids| ids.len() > 1)
        .count();
    Measured {
        throttle,
        attempts: cloud.attempts.load(Ordering::Relaxed),
        throttled: cloud.throttled.load(Ordering::Relaxed),
        decisions,
        uncovered,
        replaced,
        notices: notice_latencies,
        not_acted,
        claims,
        doubled,
    }
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn row(m: &Measured) -> String {
    let q = scale::quantile;
    format!(
        "| {:.0}% ({} of {} attempts) | {} | {} ({} uncovered) | {} | {} | {} | {} | {} ({} not acted on) | {} |",
        m.throttle * 100.0,
        m.throttled,
        m.attempts,
        m.claims,
        secs(q(&m.decisions, 0.5)),
        m.uncovered,
        secs(q(&m.decisions, 0.99)),
        m.replaced,
        secs(q(&m.notices, 0.5)),
        secs(q(&m.notices, 0.99)),
        secs(m.notices.last().copied().unwrap_or_default()),
        m.not_acted,
        m.doubled,
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut notices = 20;
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--notices") {
        notices = args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .expect("--notices needs a whole number");
    }
    let mut runs = Vec::new();
    for throttle in [0.0, 1.0 / 3.0] {
        eprintln!(
            "running a {GANG}-node gang and a {BURST}-pod burst, EC2 throttling {:.0}% of attempts, {notices} notices ...",
            throttle * 100.0
        );
        runs.push(run(throttle, notices).await);
    }
    println!();
    println!("| EC2 throttled | NodeClaims | decision p50 after batch | decision p99 after batch | pods placed again | notice to cordon+checkpoint p50 | p99 | max | claims launched twice |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for m in &runs {
        println!("{}", row(m));
    }
    let (b, f) = (&runs[0], &runs[1]);
    let q = scale::quantile;
    let ratio = |x: Duration, y: Duration| x.as_secs_f64() / y.as_secs_f64().max(1e-3);
    println!();
    println!(
        "throttled / baseline: decision p99 {:.2}, notice p99 {:.2}",
        ratio(q(&f.decisions, 0.99), q(&b.decisions, 0.99)),
        ratio(q(&f.notices, 0.99), q(&b.notices, 0.99)),
    );
    let notice_max = f.notices.last().copied().unwrap_or_default();
    println!(
        "targets (throttled run): every notice acted on within {} ({}), decision p99 at most {} ({}), no claim launched twice ({})",
        secs(NOTICE_TARGET),
        if f.not_acted == 0 && notice_max <= NOTICE_TARGET { "met" } else { "missed" },
        secs(P99_TARGET),
        if q(&f.decisions, 0.99) <= P99_TARGET { "met" } else { "missed" },
        if f.doubled == 0 { "met" } else { "missed" },
    );
}
