//! A stateful fake Kubernetes API server: unlike the scripted
//! [`super::api_server`], it keeps objects (as JSON) and answers whatever
//! the controller asks, the way the API server would for the calls the
//! controller makes: create (409 on a duplicate, `generateName` honoured),
//! get, list (all namespaces or one, paged with `limit` and `continue`),
//! replace (PUT, with its `resourceVersion` precondition), merge and JSON
//! patches (a failed JSON-patch `test` is 422, a stale
//! `metadata.resourceVersion` in a merge patch is 409; a patch of the
//! `status` subresource changes only the status), delete (with finalizers:
//! a deletion timestamp, then gone once the finalizers are), and pod
//! evictions (the pod goes at once; every eviction is recorded). Every
//! change gets the next `resourceVersion` and goes into a bounded history
//! that watches read ([`State::changes_since`]); watches themselves need a
//! streaming transport and live in the HTTP front, [`super::fake_http`].
//!
//! Two transports share one state: a `tower_test` pair for in-process
//! clients ([`FakeApi::client`] for the world: kubelets, users;
//! [`FakeApi::controller_client`] for the controller, whose writes count
//! as effects), and loopback HTTP ([`super::fake_http`]) for the real
//! controller binary. [`FakeApi::crash_after`] makes the controller
//! "crash" right after its n-th effect: that write is applied, and from
//! then on every controller request fails with 503 (as does every cloud
//! call made through [`FakeApi::controller_alive`]'s checks) until
//! [`FakeApi::restart`]; so nothing it did after the crash point happens.

#![allow(dead_code)]

use http::{Method, Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// How many changes the history keeps for watches; a watch from an older
/// `resourceVersion` gets `410 Gone` and the client lists again, as with
/// the real API server's watch cache.
pub const HISTORY: usize = 20_000;

/// One change, as a watch reports it.
#[derive(Debug, Clone)]
pub struct Change {
    /// The `resourceVersion` the change made.
    pub rv: u64,
    /// Its collection (`api/v1/namespaces/ml/pods`, ...).
    pub collection: String,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    /// The object after the change (before it, for `DELETED`, with the
    /// new `resourceVersion`).
    pub object: Value,
}

/// One request as the server answered it.
#[derive(Debug, Clone)]
pub struct Logged {
    /// HTTP method.
    pub method: Method,
    /// Path, without the query.
    pub path: String,
    /// The query string (empty when none).
    pub query: String,
    /// The JSON body (`null` when empty).
    pub body: Value,
    /// The status code answered.
    pub code: u16,
    /// A write the server applied (a crash may answer 503 to it all the
    /// same).
    pub applied: bool,
    /// When it was answered.
    pub at: Instant,
}

/// An answer to give instead of the real one, at chosen moments: to the
/// `skip + 1`-th to `skip + times`-th controller request matching `method`
/// (any when `None`) and whose path contains `path` (and, for watches,
/// whose query asks for one). The request is not applied.
#[derive(Debug, Clone)]
pub struct Fault {
    /// The method to match, or any.
    pub method: Option<Method>,
    /// A piece of the path to match.
    pub path: String,
    /// Match watch requests only (`?watch=true`).
    pub watch: bool,
    /// The status code to answer (409, 429, 5xx, 410, ...).
    pub code: u16,
    /// Matching requests let through before the fault applies.
    pub skip: usize,
    /// How many matching requests get the fault.
    pub times: usize,
}

impl Fault {
    /// `code` for the next `times` requests of `method` on paths containing
    /// `path`.
    pub fn new(method: Method, path: &str, code: u16, times: usize) -> Fault {
        Fault {
            method: Some(method),
            path: path.to_string(),
            watch: false,
            code,
            skip: 0,
            times,
        }
    }

    /// The same, after letting `skip` matching requests through.
    pub fn after(mut self, skip: usize) -> Fault {
        self.skip = skip;
        self
    }

    /// The answer's reason, as the API server names it.
    pub fn reason(code: u16) -> &'static str {
        match code {
            409 => "Conflict",
            410 => "Expired",
            429 => "TooManyRequests",
            500 => "InternalError",
            502 | 503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "Failure",
        }
    }
}

/// Objects by collection path (`api/v1/nodes`,
/// `api/v1/namespaces/ml/pods`, `apis/quartermaster.dev/v1alpha1/nodeclaims`)
/// and name.
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
    /// Every request answered, in order (watches when they start).
    pub requests: Vec<Logged>,
    /// Per watched collection (as requested: `api/v1/pods`), each time a
    /// watch sent changes: the version it had sent up to, and when.
    pub watch_sent: BTreeMap<String, Vec<(u64, Instant)>>,
    /// The timestamp written as `creationTimestamp` and
    /// `deletionTimestamp` (a fixed time by default, for tests on a
    /// virtual clock; the wall clock for a live controller).
    pub clock: fn() -> String,
    /// Faults to inject ([`Fault`]).
    pub faults: Vec<Fault>,
    /// Faults injected so far, by status code.
    pub injected: BTreeMap<u16, usize>,
    /// The checkpoint annotations each evicted pod had when it was evicted
    /// (`namespace/name`, annotations), in order.
    pub evicted_with: Vec<(String, BTreeMap<String, String>)>,
    /// The API groups discovery (`GET /apis`) lists beside the built-in
    /// ones, as `(group, version)`: none by default, so the optional APIs
    /// (gangs, DRA) are not watched unless a test serves them
    /// ([`FakeApi::serve_group`]).
    pub api_groups: Vec<(String, String)>,
    /// Recent changes, oldest first, for watches.
    history: VecDeque<Change>,
    /// Changes up to this version have left the history.
    history_floor: u64,
    /// The latest version, for watches to wait on.
    latest: tokio::sync::watch::Sender<u64>,
    next_version: u64,
}

/// The fixed time of [`State::clock`] by default.
fn fixed_clock() -> String {
    "2026-01-05T00:00:00Z".to_string()
}

/// The wall clock, for [`State::clock`].
pub fn wall_clock() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl Default for State {
    fn default() -> State {
        State {
            objects: BTreeMap::new(),
            evictions: Vec::new(),
            effects: 0,
            crash_at: None,
            crashed: false,
            requests: Vec::new(),
            watch_sent: BTreeMap::new(),
            clock: fixed_clock,
            faults: Vec::new(),
            injected: BTreeMap::new(),
            evicted_with: Vec::new(),
            api_groups: Vec::new(),
            history: VecDeque::new(),
            history_floor: 0,
            latest: tokio::sync::watch::Sender::new(0),
            next_version: 0,
        }
    }
}

/// The resource of a collection, namespace left out
/// (`api/v1/namespaces/ml/pods` -> `api/v1/pods`).
fn resource_of(collection: &str) -> String {
    let segs: Vec<&str> = collection.split('/').collect();
    let at = if segs.first() == Some(&"api") { 2 } else { 3 };
    match segs.get(at) {
        Some(&"namespaces") if segs.len() > at + 2 => {
            let mut kept = segs[..at].to_vec();
            kept.extend(&segs[at + 2..]);
            kept.join("/")
        }
        _ => collection.to_string(),
    }
}

/// Whether a list or watch of `asked` (a collection, or a resource over
/// all namespaces) includes objects of `stored`.
pub fn covers(asked: &str, stored: &str) -> bool {
    asked == stored || (resource_of(stored) == asked && resource_of(asked) == asked)
}

impl State {
    /// The fault to answer a controller request with, if one applies now
    /// (counting it).
    pub fn fault(&mut self, method: &Method, path: &str, watch: bool) -> Option<u16> {
        for f in &mut self.faults {
            let matches = f.method.as_ref().is_none_or(|m| m == method)
                && path.contains(&f.path)
                && f.watch == watch;
            if !matches || f.times == 0 {
                continue;
            }
            if f.skip > 0 {
                f.skip -= 1;
                continue;
            }
            f.times -= 1;
            *self.injected.entry(f.code).or_default() += 1;
            return Some(f.code);
        }
        None
    }

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

    /// The latest `resourceVersion`.
    pub fn version(&self) -> u64 {
        self.next_version
    }

    /// Puts an object directly (the world's doing; no effect counted),
    /// creating or replacing it.
    pub fn put(&mut self, collection: &str, mut obj: Value) {
        let rv = self.bump();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let objects = self.objects.entry(collection.to_string()).or_default();
        let kind = if objects.contains_key(&name) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        objects.insert(name, obj.clone());
        self.record(rv, collection, kind, obj);
    }

    /// Removes an object (gone, not just marked deleted).
    pub fn remove(&mut self, collection: &str, name: &str) -> Option<Value> {
        let mut obj = self.objects.get_mut(collection)?.remove(name)?;
        let rv = self.bump();
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.record(rv, collection, "DELETED", obj.clone());
        Some(obj)
    }

    fn bump(&mut self) -> u64 {
        self.next_version += 1;
        self.next_version
    }

    fn record(&mut self, rv: u64, collection: &str, kind: &'static str, object: Value) {
        self.history.push_back(Change {
            rv,
            collection: collection.to_string(),
            kind,
            object,
        });
        while self.history.len() > HISTORY {
            if let Some(old) = self.history.pop_front() {
                self.history_floor = old.rv;
            }
        }
        self.latest.send_replace(rv);
    }

    /// A receiver that sees every new `resourceVersion` (for watches to
    /// wait on).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.latest.subscribe()
    }

    /// The changes to objects of `asked` (see [`covers`]) after version
    /// `since`, oldest first; `None` when the history no longer reaches
    /// back that far (the watch must end with `410 Gone`).
    pub fn changes_since(&self, asked: &str, since: u64) -> Option<Vec<&Change>> {
        if since < self.history_floor {
            return None;
        }
        let start = self.history.partition_point(|c| c.rv <= since);
        Some(
            self.history
                .range(start..)
                .filter(|c| covers(asked, &c.collection))
                .collect(),
        )
    }

    /// One page of a list of `asked` (see [`covers`]): at most `limit`
    /// objects (all when `None`) after the `continue` token `after`, in
    /// (collection, name) order, and the token of the next page when
    /// there is more. The token carries the version of the first page,
    /// which every page reports (the real server lists a consistent
    /// snapshot; here later pages may already show newer objects, which a
    /// watch from that version delivers again, harmlessly).
    pub fn list_page(
        &self,
        asked: &str,
        limit: Option<usize>,
        after: Option<&str>,
    ) -> (u64, Vec<&Value>, Option<String>) {
        let (version, from) = match after.and_then(parse_continue) {
            Some((v, c, n)) => (v, Some((c, n))),
            None => (self.next_version, None),
        };
        let limit = limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut items = Vec::new();
        let mut last = None;
        for (collection, objects) in &self.objects {
            if !covers(asked, collection) {
                continue;
            }
            let names: Box<dyn Iterator<Item = (&String, &Value)>> = match &from {
                Some((c, _)) if collection < c => continue,
                Some((c, n)) if collection == c => Box::new(objects.range::<String, _>((
                    std::ops::Bound::Excluded(n.clone()),
                    std::ops::Bound::Unbounded,
                ))),
                _ => Box::new(objects.iter()),
            };
            for (name, obj) in names {
                if items.len() == limit {
                    let (c, n): (&String, &String) = last.expect("a full page has a last item");
                    return (version, items, Some(format!("{version}|{c}|{n}")));
                }
                items.push(obj);
                last = Some((collection, name));
            }
        }
        (version, items, None)
    }
}

/// `(version, collection, name)` of a `continue` token.
fn parse_continue(token: &str) -> Option<(u64, String, String)> {
    let mut parts = token.splitn(3, '|');
    let version = parts.next()?.parse().ok()?;
    Some((
        version,
        parts.next()?.to_string(),
        parts.next()?.to_string(),
    ))
}

/// The fake server.
#[derive(Clone, Default)]
pub struct FakeApi {
    /// Shared state (tests read and write it directly too).
    pub state: Arc<Mutex<State>>,
}

impl FakeApi {
    /// Fills `store` with what the server holds, as a freshly started
    /// controller's watches list it (pools, pods, nodes, claims, PDBs),
    /// replacing what it held.
    pub fn fill(&self, store: &quartermaster::controller::snapshot::Store) {
        use k8s_openapi::api::core::v1 as core;
        use k8s_openapi::api::policy::v1::PodDisruptionBudget;
        use quartermaster::api::{NodeClaim, NodePool};
        let s = self.state.lock().unwrap();
        let of = |suffix: &str| -> Vec<Value> {
            s.objects
                .iter()
                .filter(|(c, _)| c.ends_with(suffix))
                .flat_map(|(_, objs)| objs.values().cloned())
                .collect()
        };
        fn decoded<K: serde::de::DeserializeOwned>(objs: Vec<Value>) -> Vec<K> {
            objs.into_iter()
                .map(|v| serde_json::from_value(v).unwrap())
                .collect()
        }
        store.reset(decoded::<NodePool>(of("/nodepools")));
        store.reset(decoded::<core::Pod>(of("/pods")));
        store.reset(decoded::<core::Node>(of("api/v1/nodes")));
        store.reset(decoded::<NodeClaim>(of("/nodeclaims")));
        store.reset(decoded::<PodDisruptionBudget>(of("/poddisruptionbudgets")));
    }

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

    /// Makes discovery (`GET /apis`) list `group/version` as served; its
    /// objects are then listed and watched like any other collection
    /// (`apis/{group}/{version}/...`).
    pub fn serve_group(&self, group: &str, version: &str) {
        let mut s = self.state.lock().unwrap();
        s.api_groups.push((group.to_string(), version.to_string()));
    }

    /// Serves DRA's `resource.k8s.io/v1` (DeviceClasses, ResourceClaims,
    /// ResourceClaimTemplates, ResourceSlices), as Kubernetes 1.34 and
    /// later do.
    pub fn serve_dra(&self) {
        self.serve_group("resource.k8s.io", "v1");
    }

    /// A new controller process: requests work again.
    pub fn restart(&self) {
        self.state.lock().unwrap().crashed = false;
    }

    /// Answers one request other than a watch (both transports call
    /// this): the status code and JSON body. A `controller` request fails
    /// once the controller has crashed, and its successful writes count as
    /// effects.
    pub fn answer(
        &self,
        controller: bool,
        method: &Method,
        path: &str,
        query: &str,
        content_type: &str,
        body: Value,
    ) -> (u16, Value) {
        let mut s = self.state.lock().unwrap();
        let crashed = || {
            (
                503,
                status(503, "ServiceUnavailable", "the controller crashed"),
            )
        };
        let fault = if controller {
            s.fault(method, path, false)
        } else {
            None
        };
        let mut applied = false;
        let (code, answer) = if controller && s.crashed {
            crashed()
        } else if let Some(code) = fault {
            (code, status(code, Fault::reason(code), "injected fault"))
        } else {
            let (code, answer) =
                handle_request(&mut s, method, path, query, content_type, body.clone());
            let write = method != Method::GET;
            applied = write && code < 400;
            if controller && write && code < 400 && s.count_effect() {
                crashed()
            } else {
                (code, answer)
            }
        };
        s.requests.push(Logged {
            method: method.clone(),
            path: path.to_string(),
            query: query.to_string(),
            body: if *method == Method::GET {
                Value::Null
            } else {
                body
            },
            code,
            applied,
            at: Instant::now(),
        });
        (code, answer)
    }

    fn serve(&self, controller: bool) -> Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let api = self.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let content_type = parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                let (code, answer) = api.answer(
                    controller,
                    &parts.method,
                    parts.uri.path(),
                    parts.uri.query().unwrap_or(""),
                    content_type,
                    body,
                );
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
pub fn status(code: u16, reason: &str, message: &str) -> Value {
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
pub fn split(path: &str) -> (String, Option<String>, Option<String>) {
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

/// The value of `key` in a query string, percent-decoded.
pub fn query_value(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| percent_decode(v))
}

/// `%XX` escapes (and `+`) of a query value decoded.
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A list object of these items.
fn list_object(version: u64, items: Vec<&Value>, next: Option<String>) -> Value {
    let mut metadata = json!({ "resourceVersion": version.to_string() });
    if let Some(token) = next {
        metadata["continue"] = json!(token);
    }
    json!({ "apiVersion": "v1", "kind": "List", "metadata": metadata, "items": items })
}

/// The discovery answer (`GET /apis`): an `APIGroupList` of `groups`.
fn api_group_list(groups: &[(String, String)]) -> Value {
    let mut by_group: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for (group, version) in groups {
        by_group
            .entry(group)
            .or_default()
            .push(json!({"groupVersion": format!("{group}/{version}"), "version": version}));
    }
    let groups: Vec<Value> = by_group
        .into_iter()
        .map(|(name, versions)| {
            json!({"name": name, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "APIGroupList", "groups": groups})
}

fn handle_request(
    s: &mut State,
    method: &Method,
    path: &str,
    query: &str,
    content_type: &str,
    body: Value,
) -> (u16, Value) {
    if *method == Method::GET && path.trim_end_matches('/') == "/apis" {
        return (200, api_group_list(&s.api_groups));
    }
    let (collection, name, sub) = split(path);
    match (method.clone(), name, sub.as_deref()) {
        (Method::POST, Some(pod), Some("eviction")) => match s.remove(&collection, &pod) {
            Some(removed) => {
                let ns = collection.split('/').nth(3).unwrap_or_default();
                s.evictions.push(format!("{ns}/{pod}"));
                let annotations = removed["metadata"]["annotations"]
                    .as_object()
                    .map(|a| {
                        a.iter()
                            .filter(|(k, _)| k.starts_with("quartermaster.dev/checkpoint"))
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                            .collect()
                    })
                    .unwrap_or_default();
                s.evicted_with.push((format!("{ns}/{pod}"), annotations));
                (201, status(201, "", "evicted"))
            }
            None => (404, status(404, "NotFound", "no such pod")),
        },
        (Method::POST, None, _) => {
            let mut obj = body;
            if obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
            {
                let Some(prefix) = obj["metadata"]["generateName"].as_str() else {
                    return (422, status(422, "Invalid", "metadata.name: Required value"));
                };
                obj["metadata"]["name"] = json!(format!("{prefix}{:05}", s.version() + 1));
            }
            let name = obj["metadata"]["name"].as_str().unwrap().to_string();
            if s.get(&collection, &name).is_some() {
                return (409, status(409, "AlreadyExists", "exists"));
            }
            if obj["metadata"]["creationTimestamp"].is_null() {
                obj["metadata"]["creationTimestamp"] = json!((s.clock)());
            }
            if obj["metadata"]["uid"].is_null() {
                obj["metadata"]["uid"] = json!(format!("uid-{}", s.version() + 1));
            }
            s.put(&collection, obj);
            (201, s.objects[&collection][&name].clone())
        }
        (Method::GET, None, _) => {
            let limit = query_value(query, "limit").and_then(|l| l.parse().ok());
            let after = query_value(query, "continue").filter(|c| !c.is_empty());
            if after
                .as_deref()
                .is_some_and(|c| parse_continue(c).is_none())
            {
                return (400, status(400, "BadRequest", "continue key is not valid"));
            }
            let (version, items, next) = s.list_page(&collection, limit, after.as_deref());
            (200, list_object(version, items, next))
        }
        (Method::GET, Some(name), _) => match s.get(&collection, &name) {
            Some(o) => (200, o),
            None => not_found(),
        },
        (Method::PUT, Some(name), _) => {
            let Some(current) = s.get(&collection, &name) else {
                return not_found();
            };
            let wanted = &body["metadata"]["resourceVersion"];
            if !wanted.is_null() && *wanted != current["metadata"]["resourceVersion"] {
                return (409, status(409, "Conflict", "the object has been modified"));
            }
            finish_write(s, &collection, &name, body)
        }
        (Method::PATCH, Some(name), sub) => {
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
            if sub == Some("status") {
                // The status subresource changes the status and nothing else.
                let status = obj["status"].take();
                obj = current;
                obj["status"] = status;
            }
            finish_write(s, &collection, &name, obj)
        }
        (Method::DELETE, Some(name), _) => {
            let Some(mut obj) = s.get(&collection, &name) else {
                return not_found();
            };
            if obj["metadata"]["deletionTimestamp"].is_null() {
                obj["metadata"]["deletionTimestamp"] = json!((s.clock)());
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
        s.remove(collection, name);
        return (200, status(200, "", "deleted"));
    }
    s.put(collection, obj);
    (200, s.objects[collection][name].clone())
}
