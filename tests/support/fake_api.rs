//! A stateful fake Kubernetes API server for restart tests: unlike the
//! scripted [`super::api_server`], it keeps objects (as JSON) and answers
//! whatever the controller asks, the way the API server would for the calls
//! the controller makes: create (409 on a duplicate), get, merge and JSON
//! patches (a failed JSON-patch `test` is 422, a stale
//! `metadata.resourceVersion` in a merge patch is 409), delete (with
//! finalizers: a deletion timestamp, then gone once the finalizers are),
//! and pod evictions (the pod goes at once; every eviction is recorded).
//!
//! Two kinds of client share one state: [`FakeApi::client`] for the world
//! (kubelets, users) and [`FakeApi::controller_client`] for the controller,
//! whose writes count as effects. [`FakeApi::crash_after`] makes the
//! controller "crash" right after its n-th effect: that write is applied,
//! and from then on every controller request fails with 503 (as does every
//! cloud call made through [`FakeApi::controller_alive`]'s checks) until
//! [`FakeApi::restart`]; so nothing it did after the crash point happens.

#![allow(dead_code)]

use http::{Method, Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Objects by collection path (`api/v1/nodes`,
/// `api/v1/namespaces/ml/pods`, `apis/quartermaster.dev/v1alpha1/nodeclaims`)
/// and name.
#[derive(Default)]
pub struct State {
    /// The objects.
    pub objects: BTreeMap<String, BTreeMap<String, Value>>,
    /// Pods evicted, as `namespace/name`.
    pub evictions: Vec<String>,
    /// Controller effects (successful writes) so far.
    pub effects: usize,
    /// Crash after this many effects (`None`: never).
    pub crash_at: Option<usize>,
    /// The controller has crashed and not been restarted.
    pub crashed: bool,
    next_version: u64,
}

impl State {
    /// Counts one controller effect; true when it is the crash point.
    pub fn count_effect(&mut self) -> bool {
        self.effects += 1;
        if self.crash_at == Some(self.effects) {
            self.crashed = true;
        }
        self.crashed
    }

    /// The objects of a collection (`api/v1/nodes`, ...).
    pub fn list(&self, collection: &str) -> Vec<Value> {
        self.objects
            .get(collection)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    /// A copy of the object `name` in `collection`, if there is one.
    pub fn get(&self, collection: &str, name: &str) -> Option<Value> {
        self.objects.get(collection)?.get(name).cloned()
    }

    /// Puts an object directly (the world's doing; no effect counted).
    pub fn put(&mut self, collection: &str, mut obj: Value) {
        self.next_version += 1;
        obj["metadata"]["resourceVersion"] = json!(self.next_version.to_string());
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        self.objects
            .entry(collection.to_string())
            .or_default()
            .insert(name, obj);
    }
}

/// The fake server.
#[derive(Clone, Default)]
pub struct FakeApi {
    /// Shared state (tests read and write it directly too).
    pub state: Arc<Mutex<State>>,
}

impl FakeApi {
    /// An empty cluster.
    pub fn new() -> FakeApi {
        FakeApi::default()
    }

    /// A client for the world: never crashes, counts no effects.
    pub fn client(&self) -> Client {
        self.serve(false)
    }

    /// A client for the controller: its writes are effects, and it fails
    /// once the controller has crashed.
    pub fn controller_client(&self) -> Client {
        self.serve(true)
    }

    /// Crash the controller right after its `n`-th effect from now on
    /// (counting from the start of the run).
    pub fn crash_after(&self, n: usize) {
        self.state.lock().unwrap().crash_at = Some(n);
    }

    /// Whether the controller is still alive (cloud wrappers check it).
    pub fn controller_alive(&self) -> bool {
        !self.state.lock().unwrap().crashed
    }

    /// A new controller process: requests work again.
    pub fn restart(&self) {
        self.state.lock().unwrap().crashed = false;
    }

    fn serve(&self, controller: bool) -> Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let state = self.state.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let content_type = parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let (code, answer) = {
                    let mut s = state.lock().unwrap();
                    if controller && s.crashed {
                        (
                            503,
                            status(503, "ServiceUnavailable", "the controller crashed"),
                        )
                    } else {
                        let (code, answer) = handle_request(
                            &mut s,
                            &parts.method,
                            parts.uri.path(),
                            &content_type,
                            body,
                        );
                        let write = parts.method != Method::GET;
                        if controller && write && code < 400 && s.count_effect() {
                            (
                                503,
                                status(503, "ServiceUnavailable", "the controller crashed"),
                            )
                        } else {
                            (code, answer)
                        }
                    }
                };
                let response = Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap();
                send.send_response(response);
            }
        });
        Client::new(service, "default")
    }
}

/// A `Status` object.
fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Status", "metadata": {},
        "status": if code < 400 { "Success" } else { "Failure" },
        "message": message, "reason": reason, "code": code
    })
}

fn not_found() -> (u16, Value) {
    (404, status(404, "NotFound", "not found"))
}

/// `(collection, name, subresource)` of a request path.
fn split(path: &str) -> (String, Option<String>, Option<String>) {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut i = if segs[0] == "api" { 2 } else { 3 };
    if segs.get(i) == Some(&"namespaces") && segs.len() > i + 2 {
        i += 2;
    }
    (
        segs[..=i.min(segs.len() - 1)].join("/"),
        segs.get(i + 1).map(|s| s.to_string()),
        segs.get(i + 2).map(|s| s.to_string()),
    )
}

fn handle_request(
    s: &mut State,
    method: &Method,
    path: &str,
    content_type: &str,
    body: Value,
) -> (u16, Value) {
    let (collection, name, sub) = split(path);
    match (method.clone(), name, sub.as_deref()) {
        (Method::POST, Some(pod), Some("eviction")) => {
            match s.objects.get_mut(&collection).and_then(|m| m.remove(&pod)) {
                Some(_) => {
                    let ns = collection.split('/').nth(3).unwrap_or_default();
                    s.evictions.push(format!("{ns}/{pod}"));
                    (201, status(201, "", "evicted"))
                }
                None => (404, status(404, "NotFound", "no such pod")),
            }
        }
        (Method::POST, None, _) => {
            let name = body["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if s.objects
                .get(&collection)
                .is_some_and(|m| m.contains_key(&name))
            {
                return (409, status(409, "AlreadyExists", "exists"));
            }
            let mut obj = body;
            if obj["metadata"]["creationTimestamp"].is_null() {
                obj["metadata"]["creationTimestamp"] = json!("2026-01-05T00:00:00Z");
            }
            s.put(&collection, obj);
            (201, s.objects[&collection][&name].clone())
        }
        (Method::GET, Some(name), _) => match s.get(&collection, &name) {
            Some(o) => (200, o),
            None => not_found(),
        },
        (Method::PATCH, Some(name), _) => {
            let Some(current) = s.get(&collection, &name) else {
                return not_found();
            };
            let mut obj = current.clone();
            if content_type.starts_with("application/json-patch+json") {
                let Ok(p) = serde_json::from_value::<json_patch::Patch>(body) else {
                    return (400, status(400, "BadRequest", "not a JSON patch"));
                };
                if let Err(e) = json_patch::patch(&mut obj, &p) {
                    return (422, status(422, "Invalid", &e.to_string()));
                }
            } else {
                let wanted = &body["metadata"]["resourceVersion"];
                if !wanted.is_null() && *wanted != current["metadata"]["resourceVersion"] {
                    return (409, status(409, "Conflict", "the object has been modified"));
                }
                json_patch::merge(&mut obj, &body);
            }
            finish_write(s, &collection, &name, obj)
        }
        (Method::DELETE, Some(name), _) => {
            let Some(mut obj) = s.get(&collection, &name) else {
                return not_found();
            };
            if obj["metadata"]["deletionTimestamp"].is_null() {
                obj["metadata"]["deletionTimestamp"] = json!("2026-01-05T00:00:00Z");
            }
            finish_write(s, &collection, &name, obj)
        }
        _ => (405, status(405, "MethodNotAllowed", path)),
    }
}

/// Stores a changed object, or removes it when it is deleted and has no
/// finalizers left.
fn finish_write(s: &mut State, collection: &str, name: &str, obj: Value) -> (u16, Value) {
    let finalizers = obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if !obj["metadata"]["deletionTimestamp"].is_null() && !finalizers {
        s.objects.get_mut(collection).map(|m| m.remove(name));
        return (200, status(200, "", "deleted"));
    }
    s.put(collection, obj);
    (200, s.objects[collection][name].clone())
}
