//! The stateful fake API server ([`super::fake_api`]) over loopback HTTP,
//! for the real controller binary: every request is answered from the same
//! [`FakeApi`] state, and watches (`?watch=true`) stream JSON lines of
//! `{"type": "ADDED" | "MODIFIED" | "DELETED", "object": ...}` from the
//! requested `resourceVersion` (everything current first when it is absent
//! or `0`), `BOOKMARK`s every [`BOOKMARK_EVERY`] when the client allows
//! them, an `ERROR` with `410 Gone` when the history no longer reaches back
//! to the version asked for, and end after `timeoutSeconds`.
//!
//! ```ignore
//! let server = HttpApi::start(FakeApi::new()).await;
//! server.write_kubeconfig(&dir.join("kubeconfig"));
//! ```
//!
//! Label and field selectors are ignored (the controller uses none).

#![allow(dead_code)]

use super::fake_api::{query_value, split, status, FakeApi, Fault, Logged};
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How often an idle watch that allows bookmarks gets one.
pub const BOOKMARK_EVERY: Duration = Duration::from_secs(5);

/// The fake API server listening on a loopback port.
pub struct HttpApi {
    /// The state behind it.
    pub api: FakeApi,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl HttpApi {
    /// Serves `api` on a free loopback port until dropped.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(api: FakeApi) -> HttpApi {
        let app = axum::Router::new().fallback(handle).with_state(api.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        HttpApi { api, addr, task }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig whose current context is this server.
    ///
    /// # Panics
    /// When the file cannot be written.
    pub fn write_kubeconfig(&self, path: &Path) {
        std::fs::write(
            path,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: fake\n\
                 clusters: [{{name: fake, cluster: {{server: '{}'}}}}]\n\
                 users: [{{name: fake, user: {{token: fake}}}}]\n\
                 contexts: [{{name: fake, context: {{cluster: fake, user: fake}}}}]\n",
                self.url()
            ),
        )
        .expect("writing the kubeconfig");
    }
}

impl Drop for HttpApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn json_response(code: u16, body: &Value) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .expect("a valid response")
}

async fn handle(
    axum::extract::State(api): axum::extract::State<FakeApi>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query = uri.query().unwrap_or("");
    let watching = matches!(query_value(query, "watch").as_deref(), Some("true" | "1"));
    if method == Method::GET && watching {
        let fault = api.state.lock().unwrap().fault(&method, uri.path(), true);
        if let Some(code) = fault {
            return json_response(code, &status(code, Fault::reason(code), "injected fault"));
        }
        return watch(api, uri.path(), query);
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let content_type = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let (code, answer) = api.answer(true, &method, uri.path(), query, content_type, body);
    json_response(code, &answer)
}

/// The `kind` of a resource's objects, for bookmarks.
fn kind_of(collection: &str) -> String {
    let resource = collection.rsplit('/').next().unwrap_or_default();
    match resource {
        "poddisruptionbudgets" => "PodDisruptionBudget".into(),
        "nodepools" => "NodePool".into(),
        "nodeclaims" => "NodeClaim".into(),
        other => {
            let singular = other.strip_suffix('s').unwrap_or(other);
            let mut chars = singular.chars();
            chars
                .next()
                .map(|c| c.to_uppercase().chain(chars).collect())
                .unwrap_or_default()
        }
    }
}

/// The `apiVersion` of a collection's objects (`v1`, `group/version`).
fn api_version_of(collection: &str) -> String {
    let segs: Vec<&str> = collection.split('/').collect();
    match segs.as_slice() {
        ["api", version, ..] => version.to_string(),
        ["apis", group, version, ..] => format!("{group}/{version}"),
        _ => "v1".into(),
    }
}

fn line(kind: &str, object: &Value) -> String {
    let mut l = json!({ "type": kind, "object": object }).to_string();
    l.push('\n');
    l
}

/// Starts a watch of `path`: a task feeds the streamed body.
fn watch(api: FakeApi, path: &str, query: &str) -> Response {
    let (collection, _, _) = split(path);
    let since: Option<u64> = query_value(query, "resourceVersion")
        .and_then(|v| v.parse().ok())
        .filter(|v| *v > 0);
    let bookmarks = query_value(query, "allowWatchBookmarks").as_deref() == Some("true");
    let timeout = query_value(query, "timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    {
        let mut s = api.state.lock().unwrap();
        s.requests.push(Logged {
            method: Method::GET,
            path: path.to_string(),
            query: query.to_string(),
            body: Value::Null,
            code: 200,
            applied: false,
            at: Instant::now(),
        });
    }
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tokio::spawn(stream_changes(
        api, collection, since, bookmarks, timeout, tx,
    ));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .expect("a valid response")
}

/// Sends the changes of `collection` after `since` (everything current
/// first when `None`) until the client goes or `timeout` passes.
async fn stream_changes(
    api: FakeApi,
    collection: String,
    since: Option<u64>,
    bookmarks: bool,
    timeout: Duration,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let deadline = tokio::time::Instant::now() + timeout;
    let (mut latest, mut cursor, initial) = {
        let s = api.state.lock().unwrap();
        let latest = s.subscribe();
        match since {
            Some(v) => (latest, v, String::new()),
            None => {
                let (version, items, _) = s.list_page(&collection, None, None);
                let initial: String = items.iter().map(|o| line("ADDED", o)).collect();
                (latest, version, initial)
            }
        }
    };
    if !initial.is_empty() && tx.send(Ok(Bytes::from(initial))).await.is_err() {
        return;
    }
    loop {
        let (chunk, version, gone) = {
            let s = api.state.lock().unwrap();
            let version = s.version();
            match s.changes_since(&collection, cursor) {
                Some(changes) => {
                    let chunk: String = changes.iter().map(|c| line(c.kind, &c.object)).collect();
                    (chunk, version, false)
                }
                None => {
                    let expired = status(410, "Expired", "too old resource version");
                    (line("ERROR", &expired), version, true)
                }
            }
        };
        let sent = !chunk.is_empty();
        if sent && tx.send(Ok(Bytes::from(chunk))).await.is_err() {
            return;
        }
        if gone {
            return;
        }
        if sent {
            let mut s = api.state.lock().unwrap();
            s.watch_sent
                .entry(collection.clone())
                .or_default()
                .push((version, Instant::now()));
        }
        cursor = version;
        tokio::select! {
            changed = latest.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(BOOKMARK_EVERY), if bookmarks => {
                let bookmark = json!({
                    "apiVersion": api_version_of(&collection),
                    "kind": kind_of(&collection),
                    "metadata": { "resourceVersion": cursor.to_string() },
                });
                if tx.send(Ok(Bytes::from(line("BOOKMARK", &bookmark)))).await.is_err() {
                    return;
                }
            }
            _ = tokio::time::sleep_until(deadline) => return,
        }
    }
}
