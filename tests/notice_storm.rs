//! The notice storm: 1,000 messages through moto's SQS (each of our spot
//! interruptions ten times, out of order; foreign instances; malformed
//! bodies) into the real consumer and the controller's notice handling,
//! writing to an API server that keeps state, with a crash in the middle:
//! the first controller is dropped (consumer, memory, unsettled reports)
//! and a second one starts against the same queue and API state. Every
//! notice for our instances is recorded once (one condition, one taint
//! write), each controller's core hears of each interruption at most once
//! and the second of every one, and foreign and malformed messages are
//! deleted and counted. Some of our claims are still launching while the
//! first controller runs: their notices are kept and acted on later.

use crate::support;

use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use http::{Method, Request, Response};
use kube::client::Body;
use quartermaster::api::labels::TAINT_DISRUPTED;
use quartermaster::api::nodeclaim::conditions;
use quartermaster::api::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
use quartermaster::catalog::CapacityType;
use quartermaster::cloud::aws::notices::{ConsumerConfig, NoticeConsumer};
use quartermaster::cloud::{InstanceNotice, NoticeAcks};
use quartermaster::controller::interruptions::NoticeHandler;
use quartermaster::controller::kube_api::KubeApi;
use quartermaster::controller::snapshot::{ClaimView, NodeInfo};
use quartermaster::core::Notice;
use quartermaster::metrics::{MessageLabels, Metrics};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::moto::{unique, Moto};
use tokio::sync::mpsc;

const OURS: usize = 40;
const COPIES: usize = 10;
const FOREIGN: usize = 300;
const MALFORMED: usize = 300;
/// Our claims still launching (no instance recorded) while the first
/// controller runs.
const LAUNCHING: usize = 5;

/// The API server's objects and what was written to them.
#[derive(Default)]
struct ApiState {
    nodes: BTreeMap<String, Value>,
    claims: BTreeMap<String, Value>,
    /// Writes that put the disrupted taint on a node, by node.
    taint_writes: HashMap<String, usize>,
    /// Writes that set a claim's `Interrupted` condition, by claim.
    condition_writes: HashMap<String, usize>,
    /// Requests the server could not make sense of.
    problems: Vec<String>,
}

fn has_taint(node: &Value) -> bool {
    node["spec"]["taints"]
        .as_array()
        .is_some_and(|ts| ts.iter().any(|t| t["key"] == TAINT_DISRUPTED))
}

fn interrupted(claim: &Value) -> bool {
    claim["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == conditions::INTERRUPTED))
}

fn status(code: u16, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": "Invalid", "code": code})
}

impl ApiState {
    /// Answers one request (JSON patches of nodes guarded by their
    /// resourceVersion, node reads, merge patches of claim statuses).
    fn answer(&mut self, method: &Method, path: &str, body: &Value) -> (u16, Value) {
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (method, parts.as_slice()) {
            (&Method::GET, ["api", "v1", "nodes", name]) => match self.nodes.get(*name) {
                Some(n) => (200, n.clone()),
                None => (404, status(404, "not found")),
            },
            (&Method::PATCH, ["api", "v1", "nodes", name]) => {
                let Some(node) = self.nodes.get_mut(*name) else {
                    return (404, status(404, "not found"));
                };
                let patch: json_patch::Patch = match serde_json::from_value(body.clone()) {
                    Ok(p) => p,
                    Err(e) => return (400, status(400, &e.to_string())),
                };
                let before = has_taint(node);
                let mut next = node.clone();
                if let Err(e) = json_patch::patch(&mut next, &patch) {
                    return (422, status(422, &e.to_string()));
                }
                let version: u64 = next["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                next["metadata"]["resourceVersion"] = json!((version + 1).to_string());
                if !before && has_taint(&next) {
                    *self.taint_writes.entry(name.to_string()).or_default() += 1;
                }
                *node = next.clone();
                (200, next)
            }
            (
                &Method::PATCH,
                ["apis", "quartermaster.dev", "v1alpha1", "nodeclaims", name, "status"],
            ) => {
                let Some(claim) = self.claims.get_mut(*name) else {
                    return (404, status(404, "not found"));
                };
                let before = interrupted(claim);
                json_patch::merge(claim, body);
                if !before && interrupted(claim) {
                    *self.condition_writes.entry(name.to_string()).or_default() += 1;
                }
                (200, claim.clone())
            }
            _ => {
                let problem = format!("unexpected {method} {path}");
                self.problems.push(problem.clone());
                (500, status(500, &problem))
            }
        }
    }

    /// The claims as the controller's snapshot would show them.
    fn views(&self) -> Vec<ClaimView> {
        self.claims
            .values()
            .map(|c| {
                let claim: NodeClaim = serde_json::from_value(c.clone()).unwrap();
                let node = c["status"]["nodeName"]
                    .as_str()
                    .and_then(|n| self.nodes.get(n))
                    .map(|n| NodeInfo::from_k8s(&serde_json::from_value(n.clone()).unwrap()));
                ClaimView {
                    claim,
                    node,
                    pods: vec![],
                }
            })
            .collect()
    }

    /// Records claim `k`'s instance and node, as the lifecycle does after
    /// a launch and registration.
    fn launch(&mut self, k: usize) {
        let claim = self.claims.get_mut(&claim_name(k)).unwrap();
        claim["status"] = json!({
            "providerID": format!("aws:///use1-az1/{}", instance_id(k)),
            "nodeName": node_name(k),
        });
    }
}

fn claim_name(k: usize) -> String {
    format!("gpu-{k:03}")
}

fn node_name(k: usize) -> String {
    format!("ip-10-0-0-{k}")
}

fn instance_id(k: usize) -> String {
    format!("i-0storm{k:04}")
}

/// An API server over `state`, answering until the client is dropped.
fn api_server(state: Arc<Mutex<ApiState>>) -> KubeApi {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (code, reply) =
                state
                    .lock()
                    .unwrap()
                    .answer(&parts.method, parts.uri.path(), &body);
            send.send_response(
                Response::builder()
                    .status(code)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                    .unwrap(),
            );
        }
    });
    KubeApi::new(kube::Client::new(service, "default"))
}

/// The cluster: our claims (Ready, with their nodes), the last
/// [`LAUNCHING`] of them not launched yet.
fn cluster() -> ApiState {
    let mut state = ApiState::default();
    for k in 0..OURS {
        let mut claim = NodeClaim::new(
            &claim_name(k),
            NodeClaimSpec {
                node_pool: "gpu".into(),
                instance_type: "g5.xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::Spot,
                price_per_hour: 0.4,
                resources: BTreeMap::new(),
                labels: BTreeMap::new(),
                taints: vec![],
                startup_taints: vec![],
                termination_grace_period: None,
                expire_after: None,
            },
        );
        claim.status = Some(NodeClaimStatus::default());
        state
            .claims
            .insert(claim_name(k), serde_json::to_value(&claim).unwrap());
        state.nodes.insert(
            node_name(k),
            json!({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": node_name(k), "resourceVersion": "1"},
                   "spec": {"providerID": format!("aws:///use1-az1/{}", instance_id(k))}}),
        );
        if k < OURS - LAUNCHING {
            state.launch(k);
        }
    }
    state
}

fn spot_event(event_id: &str, instance: &str, minute: usize) -> String {
    json!({
        "version": "0", "id": event_id,
        "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
        "account": "123456789012", "time": format!("2026-01-05T00:{:02}:00Z", minute % 60),
        "region": "us-east-1", "resources": [],
        "detail": {"instance-id": instance, "instance-action": "terminate"}
    })
    .to_string()
}

/// The 1,000 message bodies, shuffled.
fn storm(run: &str) -> Vec<String> {
    let mut bodies = Vec::new();
    for k in 0..OURS {
        let event = format!("{run}-ours-{k}");
        for copy in 0..COPIES {
            bodies.push(spot_event(&event, &instance_id(k), k + copy));
        }
    }
    for k in 0..FOREIGN {
        bodies.push(spot_event(
            &format!("{run}-foreign-{k}"),
            &format!("i-0foreign{k:04}"),
            k,
        ));
    }
    for k in 0..MALFORMED {
        bodies.push(match k % 3 {
            0 => format!("not an event {k}"),
            1 => {
                json!({"detail-type": "EC2 Spot Instance Interruption Warning", "n": k}).to_string()
            }
            _ => json!({"version": "0", "id": format!("{run}-bad-{k}"),
                        "detail-type": "EC2 Spot Instance Interruption Warning",
                        "source": "aws.ec2", "time": "2026-01-05T00:00:00Z",
                        "detail": {"instance-action": "terminate"}})
            .to_string(),
        });
    }
    bodies.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(7));
    bodies
}

/// One controller: its consumer, reports, notice memory and what its core
/// heard.
struct Controller {
    consumer: NoticeConsumer,
    acks: NoticeAcks,
    handler: NoticeHandler,
    tx: mpsc::Sender<InstanceNotice>,
    rx: mpsc::Receiver<InstanceNotice>,
    metrics: Metrics,
    /// Interruptions the core heard, by claim.
    told: HashMap<String, usize>,
    /// Messages received.
    received: usize,
}

impl Controller {
    fn start(moto: &Moto, url: &str, state: &Mutex<ApiState>) -> Controller {
        let acks = NoticeAcks::default();
        let config = ConsumerConfig {
            wait_time: Duration::from_secs(1),
            retry_after: Duration::from_secs(1),
            ..ConsumerConfig::new(url)
        };
        let (tx, rx) = mpsc::channel(64);
        let mut c = Controller {
            consumer: NoticeConsumer::new(
                aws_sdk_sqs::Client::new(&moto.sdk_config()),
                config,
                acks.clone(),
            ),
            acks,
            handler: NoticeHandler::new(),
            tx,
            rx,
            metrics: Metrics::unregistered(),
            told: HashMap::new(),
            received: 0,
        };
        let views = state.lock().unwrap().views();
        let resumed = c.handler.resume(&views);
        c.hear(resumed);
        c
    }

    fn hear(&mut self, notices: impl IntoIterator<Item = Notice>) {
        for n in notices {
            if let Notice::SpotInterruption { claim, .. } = n {
                *self.told.entry(claim).or_default() += 1;
            }
        }
    }

    /// One receive, and every notice handled as the driver's round does
    /// (the reports are settled on the next receive).
    async fn step(&mut self, api: &KubeApi, state: &Mutex<ApiState>) {
        let summary = self
            .consumer
            .poll_once(&self.tx, &self.metrics)
            .await
            .expect("poll_once");
        self.received += summary.messages();
        while let Ok(n) = self.rx.try_recv() {
            let views = state.lock().unwrap().views();
            let handled = self
                .handler
                .handle(&n, &views, api, true, chrono::Utc::now())
                .await;
            self.acks.push(&n, handled.outcome);
            self.hear(handled.notices);
        }
    }
}

/// The `notice_messages{outcome}` count.
fn count(metrics: &Metrics, outcome: &str) -> u64 {
    metrics
        .notice_messages
        .get_or_create(&MessageLabels {
            outcome: outcome.into(),
        })
        .get()
}

async fn messages_left(sqs: &aws_sdk_sqs::Client, url: &str) -> u64 {
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("get_queue_attributes")
        .attributes
        .unwrap_or_default();
    attrs.values().filter_map(|v| v.parse::<u64>().ok()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_notices_with_a_crash_in_the_middle_acts_on_each_of_ours_once() {
    let moto = Moto::start();
    let sqs = aws_sdk_sqs::Client::new(&moto.sdk_config());
    let url = sqs
        .create_queue()
        .queue_name(unique("qm-storm"))
        .attributes(QueueAttributeName::VisibilityTimeout, "2")
        .send()
        .await
        .expect("create_queue")
        .queue_url
        .expect("a queue URL");
    let bodies = storm(&unique("storm"));
    assert_eq!(bodies.len(), 1000);
    for (i, batch) in bodies.chunks(10).enumerate() {
        let entries = batch
            .iter()
            .enumerate()
            .map(|(j, b)| {
                SendMessageBatchRequestEntry::builder()
                    .id(format!("m{i}-{j}"))
                    .message_body(b)
                    .build()
                    .unwrap()
            })
            .collect();
        let sent = sqs
            .send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await
            .expect("send_message_batch");
        assert!(sent.failed.is_empty(), "{:?}", sent.failed);
    }

    let state = Arc::new(Mutex::new(cluster()));
    let api = api_server(state.clone());
    let deadline = Instant::now() + Duration::from_secs(240);

    // The first controller handles about half of the storm, then dies with
    // reports it has not settled.
    let mut first = Controller::start(&moto, &url, &state);
    while first.received < 500 {
        assert!(Instant::now() < deadline, "the first controller stalled");
        first.step(&api, &state).await;
    }
    let first_unsettled = first.consumer.in_flight();
    let Controller {
        consumer,
        told: first_told,
        metrics: first_metrics,
        received: first_received,
        ..
    } = first;
    drop(consumer);
    // The launching claims get their instances while no controller runs.
    for k in OURS - LAUNCHING..OURS {
        state.lock().unwrap().launch(k);
    }

    let mut second = Controller::start(&moto, &url, &state);
    loop {
        assert!(
            Instant::now() < deadline,
            "the storm was not worked off in time"
        );
        second.step(&api, &state).await;
        if second.consumer.in_flight() == 0 && messages_left(&sqs, &url).await == 0 {
            second.consumer.settle(&second.metrics).await;
            break;
        }
    }

    let s = state.lock().unwrap();
    assert!(s.problems.is_empty(), "{:?}", s.problems);
    for k in 0..OURS {
        let (claim, node) = (claim_name(k), node_name(k));
        assert_eq!(s.condition_writes.get(&claim), Some(&1), "{claim}");
        assert_eq!(s.taint_writes.get(&node), Some(&1), "{node}");
        assert!(first_told.get(&claim).copied().unwrap_or(0) <= 1, "{claim}");
        assert_eq!(second.told.get(&claim), Some(&1), "{claim}");
        if k >= OURS - LAUNCHING {
            assert_eq!(first_told.get(&claim), None, "{claim} was launching");
        }
    }
    assert_eq!(
        count(&first_metrics, "foreign") + count(&second.metrics, "foreign"),
        FOREIGN as u64
    );
    assert_eq!(
        count(&first_metrics, "malformed") + count(&second.metrics, "malformed"),
        MALFORMED as u64
    );
    let recorded = count(&first_metrics, "recorded") + count(&second.metrics, "recorded");
    assert!(
        recorded >= OURS as u64,
        "every interruption's message settled: {recorded}"
    );
    assert!(
        count(&first_metrics, "retried") > 0,
        "launching claims were retried"
    );
    println!(
        "storm: first controller received {} messages ({} unsettled at the crash), second {}; \
         retried {}",
        first_received,
        first_unsettled,
        second.received,
        count(&first_metrics, "retried") + count(&second.metrics, "retried")
    );
}
