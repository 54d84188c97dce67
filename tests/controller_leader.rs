//! Leader election against a tower-test mock API server, in paused time:
//! every request the elector makes is asserted (method, path, body) and
//! answered by the test.

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::Client;
use quartermaster::controller::leader::{Leadership, LeaseSettings};
use quartermaster::metrics::Metrics;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

const PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/qm/leases/quartermaster";

fn settings() -> LeaseSettings {
    LeaseSettings {
        name: "quartermaster".into(),
        namespace: "qm".into(),
        identity: "qm-0".into(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(9),
        retry_period: Duration::from_secs(2),
    }
}

fn start() -> (Leadership, Handle, Arc<Metrics>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "qm");
    let metrics = Arc::new(Metrics::unregistered());
    let leadership = Leadership::elect(client, settings(), metrics.clone()).unwrap();
    (leadership, handle, metrics)
}

fn lease(holder: Option<&str>, renew: &str, rv: &str, transitions: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "quartermaster", "namespace": "qm", "resourceVersion": rv},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": renew,
            "renewTime": renew,
            "leaseTransitions": transitions,
        }
    })
}

fn status(code: u16, reason: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{reason} from the test"), "reason": reason, "code": code,
    })
}

/// The next request: its method, path and JSON body (Null when empty).
async fn next(
    handle: &mut Handle,
) -> (
    Method,
    String,
    Value,
    tower_test::mock::SendResponse<Response<Body>>,
) {
    let (request, send) = handle.next_request().await.expect("a request");
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (method, path, body, send)
}

fn reply(send: tower_test::mock::SendResponse<Response<Body>>, code: StatusCode, body: &Value) {
    send.send_response(
        Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap(),
    );
}

/// The body written back as the server would: same object, a new
/// resourceVersion.
fn stored(mut body: Value, rv: &str) -> Value {
    body["metadata"]["resourceVersion"] = json!(rv);
    body
}

fn renew_time(body: &Value) -> k8s_openapi::jiff::Timestamp {
    body["spec"]["renewTime"]
        .as_str()
        .expect("a renewTime")
        .parse()
        .expect("an RFC 3339 renewTime")
}

/// Answers GETs with `current` until the elector writes; returns the write.
async fn until_write(
    handle: &mut Handle,
    current: &Value,
) -> (
    Method,
    Value,
    tower_test::mock::SendResponse<Response<Body>>,
    usize,
) {
    let mut gets = 0;
    loop {
        let (method, path, body, send) = next(handle).await;
        assert_eq!(path, PATH);
        if method == Method::GET {
            gets += 1;
            reply(send, StatusCode::OK, current);
        } else {
            return (method, body, send, gets);
        }
    }
}

/// Drives the elector through acquiring an expired lease held by `old`;
/// returns the lease as stored after the takeover and when it happened.
async fn acquire_expired(
    handle: &mut Handle,
    leader: &mut tokio::sync::watch::Receiver<bool>,
) -> (Value, Instant) {
    let expired = lease(Some("old-replica"), "2026-11-21T00:00:00.000000Z", "41", 3);
    let start = Instant::now();
    let (method, body, send, gets) = until_write(handle, &expired).await;
    let waited = start.elapsed();
    // The holder's clock is not trusted: the lease is taken only after it
    // went unrenewed for leaseDurationSeconds on this replica's clock.
    assert!(
        waited >= Duration::from_secs(15),
        "took over after {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(15 + 2 + 1),
        "took over after {waited:?}"
    );
    assert!(gets >= 2, "{gets} reads");
    assert_eq!(method, Method::PUT);
    assert_eq!(
        body["metadata"]["resourceVersion"], "41",
        "optimistic concurrency"
    );
    assert_eq!(body["spec"]["holderIdentity"], "qm-0");
    assert_eq!(body["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(body["spec"]["leaseTransitions"], 4);
    assert!(renew_time(&body) > "2026-11-21T00:00:00Z".parse().unwrap());
    assert!(!*leader.borrow(), "not leading before the write succeeded");
    let written = stored(body, "42");
    reply(send, StatusCode::OK, &written);
    leader.changed().await.unwrap();
    assert!(*leader.borrow());
    (written, Instant::now())
}

#[tokio::test(start_paused = true)]
async fn acquires_an_expired_lease_renews_it_and_steps_down_at_once_on_conflict() {
    let (leadership, mut handle, metrics) = start();
    let mut leader = leadership.receiver();
    assert_eq!(metrics.leader.get(), 0);
    let (acquired, acquired_at) = acquire_expired(&mut handle, &mut leader).await;
    assert_eq!(metrics.leader.get(), 1);

    // Renewal: a PUT on the resourceVersion just written, every third of
    // the renew deadline.
    let (method, path, body, send) = next(&mut handle).await;
    assert_eq!((method, path.as_str()), (Method::PUT, PATH));
    assert_eq!(acquired_at.elapsed(), Duration::from_secs(3));
    assert_eq!(body["metadata"]["resourceVersion"], "42");
    assert_eq!(body["spec"]["holderIdentity"], "qm-0");
    assert_eq!(body["spec"]["leaseDurationSeconds"], 15);
    assert!(renew_time(&body) >= renew_time(&acquired));
    reply(send, StatusCode::OK, &stored(body, "43"));

    let (method, _, body, send) = next(&mut handle).await;
    assert_eq!(method, Method::PUT);
    assert_eq!(body["metadata"]["resourceVersion"], "43");
    assert!(*leader.borrow());

    // Someone else wrote the lease: 409. The flag flips before the elector
    // does anything else (no time passes).
    let lost_at = Instant::now();
    reply(send, StatusCode::CONFLICT, &status(409, "Conflict"));
    leader.changed().await.unwrap();
    assert!(!*leader.borrow());
    assert_eq!(lost_at.elapsed(), Duration::ZERO);
    assert_eq!(metrics.leader.get(), 0);

    // Back to standby: it reads the lease, sees a live holder and does not
    // write while that holder renews.
    let mut rv = 50;
    let deadline = Instant::now() + Duration::from_secs(40);
    while Instant::now() < deadline {
        let (method, path, _, send) = next(&mut handle).await;
        assert_eq!(
            (method, path.as_str()),
            (Method::GET, PATH),
            "no write to a live lease"
        );
        rv += 1;
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        reply(
            send,
            StatusCode::OK,
            &lease(Some("qm-1"), &now, &rv.to_string(), 5),
        );
    }
    assert!(!*leader.borrow());
    drop(handle);
}

#[tokio::test(start_paused = true)]
async fn a_failing_renewal_is_retried_and_leadership_ends_at_the_renew_deadline() {
    let (leadership, mut handle, metrics) = start();
    let mut leader = leadership.receiver();
    let (_, acquired_at) = acquire_expired(&mut handle, &mut leader).await;

    // The API server answers 500 to every renewal: retries every retry
    // period while leading.
    let mut attempts = Vec::new();
    loop {
        let (method, _, _, send) = next(&mut handle).await;
        assert_eq!(method, Method::PUT);
        attempts.push(acquired_at.elapsed());
        reply(
            send,
            StatusCode::INTERNAL_SERVER_ERROR,
            &status(500, "InternalError"),
        );
        // Let the elector take the answer in (paused time: this sleep
        // ends only once every other task is idle).
        tokio::time::sleep(Duration::from_millis(1)).await;
        if !*leader.borrow() {
            break;
        }
        assert_eq!(metrics.leader.get(), 1);
    }
    assert_eq!(
        attempts,
        [3, 5, 7].map(Duration::from_secs).to_vec(),
        "renew at 1/3 of the deadline, then retry every 2s"
    );
    // Gave up before the 9 s renew deadline, well before the 15 s lease
    // could look expired to another replica.
    assert_eq!(metrics.leader.get(), 0);
    drop(handle);
}

#[tokio::test(start_paused = true)]
async fn creates_the_missing_lease_and_releases_it_on_shutdown() {
    let (leadership, mut handle, metrics) = start();
    let mut leader = leadership.receiver();

    let (method, path, _, send) = next(&mut handle).await;
    assert_eq!((method, path.as_str()), (Method::GET, PATH));
    reply(send, StatusCode::NOT_FOUND, &status(404, "NotFound"));

    let (method, path, body, send) = next(&mut handle).await;
    assert_eq!(
        (method, path.as_str()),
        (
            Method::POST,
            "/apis/coordination.k8s.io/v1/namespaces/qm/leases"
        )
    );
    assert_eq!(body["metadata"]["name"], "quartermaster");
    assert_eq!(body["spec"]["holderIdentity"], "qm-0");
    assert_eq!(body["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(body["spec"]["leaseTransitions"], 0);
    reply(send, StatusCode::CREATED, &stored(body, "7"));
    leader.changed().await.unwrap();
    assert!(*leader.borrow());
    assert_eq!(metrics.leader.get(), 1);

    // Shutdown: the flag drops first, then the lease is handed back.
    let finish = tokio::spawn(leadership.finish());
    let (method, path, body, send) = next(&mut handle).await;
    assert!(!*leader.borrow(), "stopped leading before releasing");
    assert_eq!((method, path.as_str()), (Method::PUT, PATH));
    assert_eq!(body["metadata"]["resourceVersion"], "7");
    assert!(body["spec"]["holderIdentity"].is_null(), "{body}");
    assert_eq!(body["spec"]["leaseDurationSeconds"], 1);
    reply(send, StatusCode::OK, &stored(body, "8"));
    finish.await.unwrap();
    assert_eq!(metrics.leader.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_lease_without_holder_is_taken_at_once() {
    let (leadership, mut handle, _) = start();
    let mut leader = leadership.receiver();
    let free = lease(None, "2026-11-21T00:00:00.000000Z", "9", 2);
    let start = Instant::now();
    let (method, body, send, gets) = until_write(&mut handle, &free).await;
    assert_eq!((method, gets), (Method::PUT, 1));
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(body["spec"]["holderIdentity"], "qm-0");
    assert_eq!(body["spec"]["leaseTransitions"], 3);
    reply(send, StatusCode::OK, &stored(body, "10"));
    leader.changed().await.unwrap();
    assert!(*leader.borrow());
}

#[tokio::test]
async fn elect_rejects_settings_that_cannot_work() {
    let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "qm");
    let bad = LeaseSettings {
        renew_deadline: Duration::from_secs(20),
        ..settings()
    };
    let err = Leadership::elect(client, bad, Arc::new(Metrics::unregistered()))
        .err()
        .expect("an error")
        .to_string();
    assert!(err.contains("renew deadline"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_renewal_that_never_answers_ends_leadership_at_the_deadline_and_fences_later_writes() {
    use quartermaster::controller::fence;
    use quartermaster::controller::kube_api::KubeApi;

    let (leadership, mut handle, metrics) = start();
    let mut leader = leadership.receiver();
    let (_, acquired_at) = acquire_expired(&mut handle, &mut leader).await;

    // The renewal goes out and is never answered (a half-open connection):
    // keep its responder so the request stays in flight.
    let (method, path, _, _in_flight) = next(&mut handle).await;
    assert_eq!((method, path.as_str()), (Method::PUT, PATH));
    let ended = tokio::time::timeout(Duration::from_secs(60), leader.changed()).await;
    assert!(
        ended.is_ok(),
        "leadership never ended while the renewal hung"
    );
    assert!(!*leader.borrow());
    assert_eq!(
        acquired_at.elapsed(),
        Duration::from_secs(9),
        "leadership ends at the renew deadline, not when the call returns"
    );
    assert_eq!(metrics.leader.get(), 0);

    // A write that starts after the deadline is refused at the client and
    // never reaches the API server.
    let (service, mut server) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::client::ClientBuilder::new(service, "qm")
        .with_layer(&fence::layer(leadership.receiver(), metrics.clone()))
        .build();
    let dropped = metrics.actions_dropped.get();
    let err = KubeApi::new(client.clone())
        .delete_node("gpu-node-1")
        .await
        .expect_err("a write after leadership ended");
    assert!(err.to_string().contains("not the leader"), "{err}");
    assert_eq!(metrics.actions_dropped.get(), dropped + 1);
    // Reads still pass (a standby keeps its caches warm).
    let read = tokio::spawn(async move {
        kube::Api::<k8s_openapi::api::core::v1::Node>::all(client)
            .get_opt("gpu-node-1")
            .await
    });
    let (request, send) = server.next_request().await.expect("the read");
    assert_eq!(
        request.method(),
        Method::GET,
        "the refused write never came"
    );
    reply(send, StatusCode::NOT_FOUND, &status(404, "NotFound"));
    assert!(read.await.unwrap().unwrap().is_none());
    drop(handle);
}
