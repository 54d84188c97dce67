//! The controller's loop: batches, pods it cannot place, invalid pools,
//! readiness and the gang APIs it watches, and plans narrowed to what the
//! cloud can launch.

use super::*;

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
