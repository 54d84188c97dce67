//! A scripted mock Kubernetes API server for tests of the controller's
//! writes (the kube-rs controller-rs `ApiServerVerifier` pattern): a
//! [`kube::Client`] over a `tower_test` mock service, and a task that
//! answers the client's requests from a script, in order.
//!
//! ```ignore
//! let (client, verifier) = Scenario::new()
//!     .expect(Method::POST, "/apis/quartermaster.dev/v1alpha1/nodeclaims?fieldManager=quartermaster",
//!         |body| assert_eq!(body["spec"]["zone"], "use1-az4"))
//!     .respond(201, claim_json)
//!     .run();
//! KubeApi::new(client).create_node_claim(&claim).await.unwrap();
//! verifier.finish().await;
//! ```
//!
//! Each step checks the method, the path (and, when the expected path
//! carries a query, that every expected `key=value` pair is in the request's
//! query), optionally the content type, and hands the body (parsed as JSON;
//! `null` when empty) to the step's check. A request that does not match,
//! a check that panics, or a request after the script ends is answered with
//! a 500 `Status` naming the problem (so the client's error says what went
//! wrong) and recorded; [`Verifier::finish`] panics with every problem, and
//! also when an expected request never came within its timeout.

#![allow(dead_code)]

use http::{Method, Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The mock side of the client's service.
pub type ApiServerHandle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

type Check = Box<dyn FnOnce(&Value) + Send>;
type Responder = Box<dyn FnOnce(&Value) -> (u16, Value) + Send>;

/// How long [`Verifier::finish`] waits for the script's remaining requests.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// One expected request and its answer.
struct Step {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    content_type: Option<String>,
    check: Check,
    respond: Responder,
}

impl Step {
    fn describe(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// A script of expected requests, in order.
#[derive(Default)]
pub struct Scenario {
    steps: VecDeque<Step>,
}

/// A step being written: add checks, then give its response.
pub struct StepBuilder {
    scenario: Scenario,
    step: Step,
}

impl Scenario {
    /// An empty script (a client that must make no request).
    pub fn new() -> Scenario {
        Scenario::default()
    }

    /// Expects a request with this method and path (`path?k=v&...` also
    /// checks those query pairs, ignoring others; a path ending in `*`
    /// matches any path it starts); `check` gets the body as JSON (`null`
    /// when empty) and asserts on it.
    pub fn expect(
        self,
        method: Method,
        path_and_query: &str,
        check: impl FnOnce(&Value) + Send + 'static,
    ) -> StepBuilder {
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p.to_string(), parse_query(q)),
            None => (path_and_query.to_string(), Vec::new()),
        };
        StepBuilder {
            scenario: self,
            step: Step {
                method,
                path,
                query,
                content_type: None,
                check: Box::new(check),
                respond: Box::new(|_| (500, status_body(500, "InternalError", "no response"))),
            },
        }
    }

    /// Starts the mock server: the client to give the code under test and
    /// the verifier to finish the test with. Needs a tokio runtime.
    pub fn run(self) -> (Client, Verifier) {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let (stop, stopped) = oneshot::channel();
        let pending = self.steps.len();
        let task = tokio::spawn(serve(self.steps, handle, stopped));
        (
            client,
            Verifier {
                task,
                stop,
                pending,
            },
        )
    }
}

impl StepBuilder {
    /// Also checks the request's `Content-Type` (e.g.
    /// `application/merge-patch+json`).
    pub fn content_type(mut self, content_type: &str) -> StepBuilder {
        self.step.content_type = Some(content_type.to_string());
        self
    }

    /// Answers with this status and JSON body.
    pub fn respond(self, status: u16, body: Value) -> Scenario {
        self.respond_with(move |_| (status, body))
    }

    /// Answers with what `f` makes of the request body (e.g. echoing a
    /// created object back).
    pub fn respond_with(
        mut self,
        f: impl FnOnce(&Value) -> (u16, Value) + Send + 'static,
    ) -> Scenario {
        self.step.respond = Box::new(f);
        self.scenario.steps.push_back(self.step);
        self.scenario
    }
}

/// The running script.
pub struct Verifier {
    task: JoinHandle<Vec<String>>,
    stop: oneshot::Sender<()>,
    pending: usize,
}

impl Verifier {
    /// Waits (at most [`DEFAULT_TIMEOUT`]) for the rest of the script, then
    /// stops the server.
    ///
    /// # Panics
    /// When a request did not match, a check failed, a request came after
    /// the script ended, or an expected request never came.
    pub async fn finish(self) {
        self.finish_within(DEFAULT_TIMEOUT).await
    }

    /// [`Verifier::finish`] with another timeout.
    ///
    /// # Panics
    /// As [`Verifier::finish`].
    pub async fn finish_within(self, timeout: Duration) {
        let Verifier {
            mut task,
            stop,
            pending,
        } = self;
        // The task stops once the script is done and `stop` fires (or is
        // dropped); before that it keeps answering (and recording) strays.
        let waited = tokio::time::timeout(timeout, async {
            let _ = stop.send(());
            (&mut task).await
        })
        .await;
        match waited {
            Ok(Ok(problems)) if problems.is_empty() => {}
            Ok(Ok(problems)) => panic!("mock API server:\n  {}", problems.join("\n  ")),
            Ok(Err(e)) => panic!("mock API server task failed: {e}"),
            Err(_) => {
                task.abort();
                panic!(
                    "mock API server: the script ({pending} steps) did not finish within {timeout:?}: an expected request never came"
                )
            }
        }
    }
}

/// Answers requests from the script, then strays until told to stop.
async fn serve(
    mut steps: VecDeque<Step>,
    mut handle: ApiServerHandle,
    mut stopped: oneshot::Receiver<()>,
) -> Vec<String> {
    let mut problems = Vec::new();
    while let Some(step) = steps.pop_front() {
        let Some((request, send)) = handle.next_request().await else {
            problems.push(format!(
                "the client went away before {} (and {} more steps)",
                step.describe(),
                steps.len()
            ));
            return problems;
        };
        record(&request);
        let (status, body) = match answer(step, request).await {
            Ok(answer) => answer,
            Err(problem) => {
                problems.push(problem.clone());
                (500, status_body(500, "InternalError", &problem))
            }
        };
        send.send_response(json_response(status, &body));
    }
    loop {
        tokio::select! {
            next = handle.next_request() => match next {
                Some((request, send)) => {
                    record(&request);
                    let problem = format!(
                        "unexpected request after the script: {} {}",
                        request.method(),
                        request.uri()
                    );
                    problems.push(problem.clone());
                    send.send_response(json_response(500, &status_body(500, "InternalError", &problem)));
                }
                None => return problems,
            },
            _ = &mut stopped => return problems,
        }
    }
}

/// Whether `actual` is the step's `expected` path: equal, or, for an
/// expected path ending in `*`, starting with what comes before it (for
/// names the code under test generates, such as an Event's).
fn path_matches(expected: &str, actual: &str) -> bool {
    match expected.strip_suffix('*') {
        Some(prefix) => actual.starts_with(prefix),
        None => actual == expected,
    }
}

/// Checks one request against its step and makes the response.
async fn answer(step: Step, request: Request<Body>) -> Result<(u16, Value), String> {
    let expected = step.describe();
    let (parts, body) = request.into_parts();
    let got = format!("{} {}", parts.method, parts.uri);
    if parts.method != step.method || !path_matches(&step.path, parts.uri.path()) {
        return Err(format!("expected {expected}, got {got}"));
    }
    let query = parse_query(parts.uri.query().unwrap_or(""));
    for pair in &step.query {
        if !query.contains(pair) {
            return Err(format!(
                "{got}: query lacks {}={} (expected {expected}?{})",
                pair.0,
                pair.1,
                step.query
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join("&")
            ));
        }
    }
    if let Some(want) = &step.content_type {
        let have = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if have != want {
            return Err(format!("{got}: content type {have:?}, expected {want:?}"));
        }
    }
    let bytes = body
        .collect_bytes()
        .await
        .map_err(|e| format!("{got}: reading the body: {e}"))?;
    let body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "{got}: body is not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        })?
    };
    let check = step.check;
    catch_unwind(AssertUnwindSafe(|| check(&body)))
        .map_err(|panic| format!("{got}: check failed: {}", panic_message(&panic)))?;
    let respond = step.respond;
    catch_unwind(AssertUnwindSafe(|| respond(&body)))
        .map_err(|panic| format!("{got}: responder failed: {}", panic_message(&panic)))
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(non-string panic)".to_string())
}

fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (p.to_string(), String::new()),
        })
        .collect()
}

fn json_response(status: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            serde_json::to_vec(body).expect("JSON values serialize"),
        ))
        .expect("status codes from scripts are valid")
}

/// A status condition as the mock API's checks compare it: its type,
/// status and reason.
pub type Condition = (String, String, String);

/// `want`, the conditions a test expects, as [`Condition`]s.
pub fn conditions(want: &[(&str, &str, &str)]) -> Vec<Condition> {
    want.iter()
        .map(|(t, st, r)| (t.to_string(), st.to_string(), r.to_string()))
        .collect()
}

/// The [`Condition`]s of a status a request patched.
pub fn conditions_of(status: &Value) -> Vec<Condition> {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let f = |k: &str| c[k].as_str().unwrap().to_string();
            (f("type"), f("status"), f("reason"))
        })
        .collect()
}

/// A Kubernetes `Status` body, as the API server sends with an error
/// (`reason` e.g. `AlreadyExists`, `NotFound`, `TooManyRequests`).
pub fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": if (200..300).contains(&code) { "Success" } else { "Failure" },
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// A `409 AlreadyExists` body for that resource and name.
pub fn already_exists(resource: &str, name: &str) -> Value {
    status_body(
        409,
        "AlreadyExists",
        &format!("{resource} \"{name}\" already exists"),
    )
}

/// A `404 NotFound` body for that resource and name.
pub fn not_found(resource: &str, name: &str) -> Value {
    status_body(404, "NotFound", &format!("{resource} \"{name}\" not found"))
}

/// The body the request carried, answered back as the stored object (with
/// a `resourceVersion` and `uid`), as the API server does on create.
pub fn echo(body: &Value) -> (u16, Value) {
    let mut object = body.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!("1"));
        meta.insert("uid".into(), json!("00000000-0000-0000-0000-000000000001"));
    }
    (201, object)
}

/// One request as a mock API server served it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Served {
    /// HTTP method.
    pub method: String,
    /// Path, without the query.
    pub path: String,
    /// The query string (empty when none).
    pub query: String,
}

/// What RBAC must allow for a request: API group (`""` for core),
/// resource (`pods`, `pods/eviction`, ...) and verb.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Access {
    /// API group.
    pub group: String,
    /// Resource, with `/subresource` when there is one.
    pub resource: String,
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, `update`,
    /// `patch`, `delete`, `deletecollection`).
    pub verb: String,
}

impl Served {
    fn of<B>(request: &Request<B>) -> Served {
        Served {
            method: request.method().to_string(),
            path: request.uri().path().to_string(),
            query: request.uri().query().unwrap_or("").to_string(),
        }
    }

    /// The access RBAC must grant for this request, as the API server
    /// derives it; `None` for a path that is not a resource.
    pub fn access(&self) -> Option<Access> {
        let segments: Vec<&str> = self.path.trim_matches('/').split('/').collect();
        let (group, rest) = match segments.as_slice() {
            ["api", _version, rest @ ..] => ("", rest),
            ["apis", group, _version, rest @ ..] => (*group, rest),
            _ => return None,
        };
        let rest = match rest {
            ["namespaces", _ns, tail @ ..] if !tail.is_empty() => tail,
            other => other,
        };
        let (resource, name, sub) = match rest {
            [resource] => (*resource, None, None),
            [resource, name] => (*resource, Some(*name), None),
            [resource, name, sub] => (*resource, Some(*name), Some(*sub)),
            _ => return None,
        };
        let watch = parse_query(&self.query)
            .iter()
            .any(|(k, v)| k == "watch" && (v == "true" || v == "1"));
        let verb = match (self.method.as_str(), name) {
            ("GET", _) if watch => "watch",
            ("GET", Some(_)) => "get",
            ("GET", None) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", Some(_)) => "delete",
            ("DELETE", None) => "deletecollection",
            _ => return None,
        };
        Some(Access {
            group: group.to_string(),
            resource: match sub {
                Some(sub) => format!("{resource}/{sub}"),
                None => resource.to_string(),
            },
            verb: verb.to_string(),
        })
    }
}

/// Every request the scripted servers of this test binary have served.
static SERVED: Mutex<Vec<Served>> = Mutex::new(Vec::new());

fn record<B>(request: &Request<B>) {
    if let Ok(mut served) = SERVED.lock() {
        served.push(Served::of(request));
    }
}

/// Every request any scripted [`Scenario`] of this test binary has served
/// so far (for checks over all calls, such as RBAC).
pub fn served() -> Vec<Served> {
    SERVED.lock().map(|s| s.clone()).unwrap_or_default()
}

/// A permissive mock server: answers every request with what `answer`
/// makes of it (and its JSON body) and records it.
pub struct Recorder {
    calls: Arc<Mutex<Vec<Served>>>,
    task: JoinHandle<()>,
}

impl Recorder {
    /// Starts the server; the client to give the code under test. Needs a
    /// tokio runtime.
    pub fn start(
        answer: impl Fn(&Served, &Value) -> (u16, Value) + Send + 'static,
    ) -> (Client, Recorder) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "default");
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = calls.clone();
        let task = tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                record(&request);
                let served = Served::of(&request);
                let bytes = request
                    .into_body()
                    .collect_bytes()
                    .await
                    .unwrap_or_default();
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let (status, reply) = answer(&served, &body);
                seen.lock().unwrap().push(served);
                send.send_response(json_response(status, &reply));
            }
        });
        (client, Recorder { calls, task })
    }

    /// The requests served so far, in order.
    pub fn calls(&self) -> Vec<Served> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
