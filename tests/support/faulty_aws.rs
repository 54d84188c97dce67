//! A faulting proxy in front of moto, on loopback: every AWS call the SDK
//! makes through it is forwarded to moto, except those a [`Rule`] picks,
//! which are throttled (EC2's `RequestLimitExceeded`, SSM's
//! `ThrottlingException`, IAM's `Throttling`), answered 500
//! (`InternalError`), held past the client's attempt timeout (a timeout:
//! never forwarded), or forwarded and then answered 503 (a lost answer:
//! moto did the work, the client retries it). Calls are told apart by their
//! action (`Action=` of a query-protocol body, or the `X-Amz-Target` of a
//! JSON-protocol one). Every fault injected is counted by kind. An action
//! moto does not implement can be answered by the proxy itself
//! ([`Proxy::answer`]).

#![allow(dead_code)]

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// What a fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// The service's throttling error.
    Throttle,
    /// 500 `InternalError`.
    ServerError,
    /// Held for [`Proxy::hold`] (longer than the client's attempt
    /// timeout), never forwarded.
    Timeout,
    /// Forwarded (moto does the work), then answered 503.
    LostAnswer,
}

impl Kind {
    /// Its name in counts.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Throttle => "throttled",
            Kind::ServerError => "5xx",
            Kind::Timeout => "timeout",
            Kind::LostAnswer => "lost answer",
        }
    }
}

/// Which calls a rule picks.
#[derive(Debug, Clone)]
pub enum Pick {
    /// These calls of the action (1-based, counting every call of it).
    Calls(Vec<usize>),
    /// Every `n`-th call of the action (`n`, `2n`, ...).
    Every(usize),
    /// Every call.
    All,
}

/// A fault for some calls of an action (`*`: any action).
#[derive(Debug, Clone)]
pub struct Rule {
    /// The action (`CreateFleet`, `GetParameters`, ...) or `*`.
    pub action: String,
    /// What to do.
    pub kind: Kind,
    /// Which calls.
    pub pick: Pick,
}

impl Rule {
    /// `kind` on `pick` of `action`.
    pub fn new(action: &str, kind: Kind, pick: Pick) -> Rule {
        Rule {
            action: action.into(),
            kind,
            pick,
        }
    }
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    /// Calls seen per action, and in all.
    calls: BTreeMap<String, usize>,
    all: usize,
    /// Faults injected, by kind and action.
    injected: BTreeMap<(Kind, String), usize>,
    /// Answers given here instead of moto's, by action.
    answers: BTreeMap<String, String>,
}

/// The proxy, serving until dropped.
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

/// How long a [`Kind::Timeout`] holds a call.
pub const HOLD: Duration = Duration::from_secs(3);

impl Proxy {
    /// A proxy to `upstream` (moto's endpoint) on a free loopback port.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(upstream: &str) -> Proxy {
        let state: Arc<Mutex<State>> = Arc::default();
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        let upstream = upstream.trim_end_matches('/').to_string();
        let shared = state.clone();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let (state, client, upstream) = (shared.clone(), client.clone(), upstream.clone());
                async move { handle(state, client, &upstream, method, uri, headers, body).await }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Proxy { addr, state, task }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Adds a rule (rules are tried in order; the first that picks a call
    /// applies).
    pub fn add(&self, rule: Rule) {
        self.state.lock().unwrap().rules.push(rule);
    }

    /// Answers every call of `action` that no rule faults with `xml` (200,
    /// `text/xml`) instead of forwarding it: a stand-in for an action moto
    /// does not implement.
    pub fn answer(&self, action: &str, xml: &str) {
        self.state
            .lock()
            .unwrap()
            .answers
            .insert(action.into(), xml.into());
    }

    /// Drops every rule: calls go through from now on.
    pub fn clear(&self) {
        self.state.lock().unwrap().rules.clear();
    }

    /// Faults injected so far, by kind (all actions).
    pub fn injected(&self) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for ((kind, _), n) in &self.state.lock().unwrap().injected {
            *out.entry(kind.name()).or_default() += n;
        }
        out
    }

    /// Faults injected so far on `action`, by kind.
    pub fn injected_on(&self, action: &str) -> BTreeMap<&'static str, usize> {
        let mut out = BTreeMap::new();
        for ((kind, a), n) in &self.state.lock().unwrap().injected {
            if a == action {
                *out.entry(kind.name()).or_default() += n;
            }
        }
        out
    }

    /// Calls of `action` seen so far.
    pub fn calls(&self, action: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .calls
            .get(action)
            .copied()
            .unwrap_or(0)
    }

    /// Every call seen so far.
    pub fn all_calls(&self) -> usize {
        self.state.lock().unwrap().all
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The action of a call: `X-Amz-Target`'s operation, or the body's
/// `Action=`.
fn action_of(headers: &HeaderMap, body: &[u8]) -> String {
    if let Some(target) = headers.get("x-amz-target").and_then(|v| v.to_str().ok()) {
        return target.rsplit('.').next().unwrap_or(target).to_string();
    }
    let text = String::from_utf8_lossy(body);
    text.split('&')
        .find_map(|p| p.strip_prefix("Action="))
        .unwrap_or("?")
        .to_string()
}

/// The fault for this call, if a rule picks it.
fn pick(state: &Mutex<State>, action: &str) -> Option<Kind> {
    let mut s = state.lock().unwrap();
    s.all += 1;
    let n = {
        let c = s.calls.entry(action.to_string()).or_default();
        *c += 1;
        *c
    };
    let kind = s.rules.iter().find_map(|r| {
        let ours = r.action == "*" || r.action == action;
        let picked = match &r.pick {
            Pick::Calls(calls) => calls.contains(&n),
            Pick::Every(every) => *every > 0 && n.is_multiple_of(*every),
            Pick::All => true,
        };
        (ours && picked).then_some(r.kind)
    })?;
    *s.injected.entry((kind, action.to_string())).or_default() += 1;
    Some(kind)
}

/// The service's error answer: JSON for `X-Amz-Target` calls (SSM), IAM's
/// and EC2's XML otherwise.
fn error(headers: &HeaderMap, body: &[u8], status: u16, code: &str, message: &str) -> Response {
    let (content_type, text) = if headers.contains_key("x-amz-target") {
        (
            "application/x-amz-json-1.1",
            format!(r#"{{"__type":"{code}","message":"{message}"}}"#),
        )
    } else if String::from_utf8_lossy(body).contains("Version=2010-05-08") {
        (
            "text/xml",
            format!(
                r#"<ErrorResponse><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error><RequestId>fault</RequestId></ErrorResponse>"#
            ),
        )
    } else {
        (
            "text/xml",
            format!(
                r#"<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors><RequestID>fault</RequestID></Response>"#
            ),
        )
    };
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", content_type)
        .body(Body::from(text))
        .expect("a valid response")
}

fn throttled(headers: &HeaderMap, body: &[u8]) -> Response {
    if headers.contains_key("x-amz-target") {
        error(headers, body, 400, "ThrottlingException", "Rate exceeded")
    } else if String::from_utf8_lossy(body).contains("Version=2010-05-08") {
        error(headers, body, 400, "Throttling", "Rate exceeded")
    } else {
        error(
            headers,
            body,
            503,
            "RequestLimitExceeded",
            "Request limit exceeded.",
        )
    }
}

async fn handle(
    state: Arc<Mutex<State>>,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    upstream: &str,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let action = action_of(&headers, &body);
    match pick(&state, &action) {
        Some(Kind::Throttle) => return throttled(&headers, &body),
        Some(Kind::ServerError) => {
            return error(
                &headers,
                &body,
                500,
                "InternalError",
                "An internal error has occurred",
            )
        }
        Some(Kind::Timeout) => {
            tokio::time::sleep(HOLD).await;
            return error(&headers, &body, 500, "InternalError", "held too long");
        }
        Some(Kind::LostAnswer) => {
            let _ = forward(&client, upstream, &method, &uri, &headers, body.clone()).await;
            return error(
                &headers,
                &body,
                503,
                "ServiceUnavailable",
                "Service unavailable",
            );
        }
        None => {}
    }
    let canned = state.lock().unwrap().answers.get(&action).cloned();
    if let Some(xml) = canned {
        return Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "text/xml")
            .body(Body::from(xml))
            .expect("a valid response");
    }
    forward(&client, upstream, &method, &uri, &headers, body)
        .await
        .unwrap_or_else(|e| error(&headers, &[], 502, "BadGateway", &e))
}

async fn forward(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    upstream: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, String> {
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut request = http::Request::builder()
        .method(method.clone())
        .uri(format!("{upstream}{path}"));
    for (k, v) in headers {
        if k != http::header::HOST {
            request = request.header(k, v);
        }
    }
    let request = request.body(Full::new(body)).map_err(|e| e.to_string())?;
    let answer = client.request(request).await.map_err(|e| e.to_string())?;
    let (parts, body) = answer.into_parts();
    let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
    let mut response = Response::builder().status(parts.status);
    for (k, v) in &parts.headers {
        if k != http::header::TRANSFER_ENCODING && k != http::header::CONTENT_LENGTH {
            response = response.header(k, v);
        }
    }
    response.body(Body::from(bytes)).map_err(|e| e.to_string())
}
