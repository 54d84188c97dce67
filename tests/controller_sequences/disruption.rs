//! Drift and scheduled changes, through the leader fence: the replacement
//! first, then the cordon and the drain.

use super::*;

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
