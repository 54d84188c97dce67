//! The chart's RBAC against the calls the code makes: drives every way the
//! controller talks to the API server (the startup access check, the
//! watches, leader election, Events, every `KubeApi` write) against a
//! recording mock API server, derives each request's (group, resource,
//! verb) as the API server does, and checks the ClusterRole and Role that
//! `deploy/helm/quartermaster/templates/rbac.yaml` renders for each cloud:
//! every call of that mode is allowed, and every granted verb is used by
//! some call of that mode.
//!
//! Which `KubeApi` methods run only with the simulated cloud is read from
//! the source: a method called from `src/controller/simulated_nodes.rs`
//! alone is simulated-only; any other caller makes it a call of every mode.

use crate::support;

use k8s_openapi::api::core::v1::Node;
use quartermaster::api::{NodeClaim, NodePoolStatus};
use quartermaster::controller::events::{pod_ref, Events};
use quartermaster::controller::kube_api::{KubeApi, NodeChange};
use quartermaster::controller::leader::{Leadership, LeaseSettings};
use quartermaster::controller::podgroups;
use quartermaster::controller::snapshot::{self, Store};
use quartermaster::metrics::Metrics;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::api_server::{Access, Recorder, Served};

const CHART: &str = "deploy/helm/quartermaster/templates/rbac.yaml";

/// A `resourceVersion` the mock refuses as stale (409).
const STALE: &str = "stale";

/// The clouds the chart supports.
const MODES: [&str; 2] = ["aws", "simulated"];

/// How the mock answers: reads of one object are 404 (so the elector
/// creates its Lease), lists are empty, writes echo the body back.
fn answer(served: &Served, body: &Value) -> (u16, Value) {
    let access = served.access().expect("a resource path");
    if body["metadata"]["resourceVersion"] == STALE {
        return (
            409,
            support::api_server::status_body(409, "Conflict", "stale"),
        );
    }
    let stored = |code: u16| {
        let mut object = body.clone();
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!("2"));
        }
        (code, object)
    };
    match access.verb.as_str() {
        "get" => (
            404,
            support::api_server::not_found(&access.resource, "object"),
        ),
        "list" => (
            200,
            json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []}),
        ),
        "watch" => (200, Value::Null),
        "create" => stored(201),
        "update" | "patch" => stored(200),
        _ => (
            200,
            support::api_server::status_body(200, "Success", "deleted"),
        ),
    }
}

/// The accesses of the calls made since `from`.
fn accesses(recorder: &Recorder, from: usize) -> BTreeSet<Access> {
    recorder.calls()[from..]
        .iter()
        .map(|c| {
            c.access()
                .unwrap_or_else(|| panic!("not a resource: {c:?}"))
        })
        .collect()
}

fn claim() -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "quartermaster.dev/v1alpha1",
        "kind": "NodeClaim",
        "metadata": {"name": "gpu-abc", "finalizers": [quartermaster::api::labels::FINALIZER]},
        "spec": {
            "nodePool": "gpu", "instanceType": "g5.xlarge", "zone": "use1-az1",
            "capacityType": "spot", "pricePerHour": 0.4
        }
    }))
    .expect("a NodeClaim")
}

/// Runs every `KubeApi` method once; each method's accesses.
async fn kube_api_calls(
    recorder: &Recorder,
    api: &KubeApi,
) -> BTreeMap<&'static str, BTreeSet<Access>> {
    let mut calls = BTreeMap::new();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap();
    let claim = claim();
    macro_rules! call {
        ($name:literal, $e:expr) => {{
            let from = recorder.calls().len();
            let _ = $e.await;
            calls.insert($name, accesses(recorder, from));
        }};
    }
    call!("create_node_claim", api.create_node_claim(&claim));
    // A status write from a stale copy is refused (409) and the claim read
    // again: both are ways the write talks to the server.
    let mut stale = claim.clone();
    stale.metadata.resource_version = Some(STALE.into());
    call!(
        "update_node_claim_status",
        api.update_node_claim_status(&stale, |_| true)
    );
    call!("delete_node_claim", api.delete_node_claim("gpu-abc"));
    call!("remove_finalizer", api.remove_finalizer(&claim));
    // A cached node with a resourceVersion is patched at once; one without
    // is read first (both are ways `patch_node` talks to the server).
    let cached: Node =
        serde_json::from_value(json!({"metadata": {"name": "n1", "resourceVersion": "1"}}))
            .unwrap();
    call!(
        "patch_node",
        api.patch_node(
            &snapshot::NodeInfo::from_k8s(&cached),
            &NodeChange::cordon()
        )
    );
    let read_first = {
        let from = recorder.calls().len();
        let _ = api
            .patch_node(&snapshot::NodeInfo::from_k8s(&node), &NodeChange::cordon())
            .await;
        accesses(recorder, from)
    };
    calls.entry("patch_node").or_default().extend(read_first);
    call!("create_node", api.create_node(&node));
    call!("patch_node_status", api.patch_node_status("n1", &json!({})));
    call!("delete_node", api.delete_node("n1"));
    call!("evict", api.evict("ml", "trainer-0"));
    call!("delete_pod", api.delete_pod("ml", "trainer-0"));
    call!(
        "annotate_pod",
        api.annotate_pod("ml", "trainer-0", "k", "v")
    );
    call!(
        "patch_pod_annotations",
        api.patch_pod_annotations("ml", "trainer-0", &BTreeMap::new())
    );
    call!(
        "patch_node_pool_status",
        api.patch_node_pool_status("gpu", &NodePoolStatus::default())
    );
    call!(
        "patch_provisioning_request_conditions",
        api.patch_provisioning_request_conditions("ml", "train", &[])
    );
    call!(
        "patch_capacity_buffer_status",
        api.patch_capacity_buffer_status("ml", "warm", &[], 0, None)
    );
    call!(
        "annotate_capacity_buffer",
        api.annotate_capacity_buffer("ml", "warm", &BTreeMap::new())
    );
    call!("list_node_pools", api.list_node_pools());
    call!("list_node_classes", api.list_node_classes());
    call!(
        "patch_node_class_status",
        api.patch_node_class_status("gpu", &Default::default())
    );
    calls
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((path.display().to_string(), text));
        }
    }
}

/// The files (other than `kube_api.rs`) that call `.method(`.
fn callers<'a>(method: &str, files: &'a [(String, String)]) -> Vec<&'a str> {
    let needle = format!(".{method}(");
    files
        .iter()
        .filter(|(path, text)| !path.ends_with("kube_api.rs") && text.contains(&needle))
        .map(|(path, _)| path.as_str())
        .collect()
}

/// The chart's rbac.yaml with its template actions evaluated for `cloud`
/// (leader election on), as YAML documents.
fn render(cloud: &str) -> Vec<Value> {
    let template = std::fs::read_to_string(CHART).unwrap();
    let mut keep = vec![true];
    let mut out = String::new();
    for line in template.lines() {
        let action = line.trim();
        if let Some(cond) = action
            .strip_prefix("{{- if ")
            .and_then(|c| c.strip_suffix("}}"))
        {
            let value = match cond.trim() {
                c if c.starts_with("eq .Values.cloud ") => c.ends_with(&format!("\"{cloud}\"")),
                ".Values.leaderElection.enabled" => true,
                other => panic!("{CHART}: an unknown condition {other:?}: teach this test"),
            };
            keep.push(value && *keep.last().unwrap());
            continue;
        }
        if action.starts_with("{{- end") {
            keep.pop();
            continue;
        }
        if !*keep.last().unwrap() || action.starts_with("{{-") || action.starts_with("#") {
            continue;
        }
        // Names and labels do not matter here: any value will do.
        let mut line = line.to_string();
        while let (Some(a), Some(b)) = (line.find("{{"), line.find("}}")) {
            line.replace_range(a..b + 2, "templated");
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.split("\n---")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_norway::from_str(d).unwrap_or_else(|e| panic!("{CHART}: {e}\n{d}")))
        .collect()
}

/// The (group, resource, verb) triples the rendered Roles grant.
fn granted(documents: &[Value]) -> BTreeSet<Access> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().expect("a string").to_string())
            .collect()
    };
    let mut out = BTreeSet::new();
    for doc in documents {
        if !matches!(doc["kind"].as_str(), Some("ClusterRole" | "Role")) {
            continue;
        }
        for rule in doc["rules"].as_array().expect("rules") {
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        assert!(
                            group != "*" && resource != "*" && verb != "*",
                            "no wildcards"
                        );
                        out.insert(Access {
                            group: group.clone(),
                            resource: resource.clone(),
                            verb,
                        });
                    }
                }
            }
        }
    }
    out
}

fn show(set: &BTreeSet<Access>) -> String {
    set.iter()
        .map(|a| format!("{}/{} {}", a.group, a.resource, a.verb))
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::test]
async fn the_charts_rbac_allows_every_call_the_controller_makes_and_nothing_more() {
    let (client, recorder) = Recorder::start(answer);
    let mut every_mode: BTreeSet<Access> = BTreeSet::new();

    // Start-up access check, then the watches (a list and a watch per kind).
    snapshot::check_access(&client).await.expect("access check");
    let store = Arc::new(Store::new());
    let mut watches = snapshot::spawn_watches(&client, &store);
    // The gang APIs' and DRA's watches, as on a cluster serving all of them.
    let served = podgroups::ServedApis {
        volcano: true,
        scheduling_pod_groups: Some("v1alpha2".into()),
        provisioning_requests: true,
        dra: true,
        capacity_buffers: true,
    };
    watches.extend(podgroups::spawn_watches(&client, &store, &served));
    let kinds = watches.len();
    for _ in 0..500 {
        let seen = accesses(&recorder, 0);
        if seen.iter().filter(|a| a.verb == "watch").count() >= kinds {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    watches.iter().for_each(|w| w.abort());
    let reads = accesses(&recorder, 0);
    assert!(
        reads.iter().filter(|a| a.verb == "watch").count() >= kinds,
        "{}",
        show(&reads)
    );
    every_mode.extend(reads);

    // Leader election: read, create, and release (update) the Lease.
    let from = recorder.calls().len();
    let settings = LeaseSettings {
        name: "quartermaster".into(),
        namespace: "qm".into(),
        identity: "qm-0".into(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    };
    let leadership =
        Leadership::elect(client.clone(), settings, Arc::new(Metrics::unregistered())).unwrap();
    let mut leader = leadership.receiver();
    tokio::time::timeout(Duration::from_secs(5), leader.wait_for(|l| *l))
        .await
        .expect("leading")
        .unwrap();
    leadership.finish().await;
    every_mode.extend(accesses(&recorder, from));

    // Events, twice the same (a repeat is a patch of the series).
    let from = recorder.calls().len();
    let events = Events::new(client.clone(), Some("qm-0".into()));
    for _ in 0..2 {
        events
            .not_placeable(&pod_ref("ml/trainer-0", None), "no pool fits")
            .await;
    }
    every_mode.extend(accesses(&recorder, from));

    // Every KubeApi write, by the modes whose code calls it.
    let mut files = Vec::new();
    sources(Path::new("src"), &mut files);
    let mut simulated_only = BTreeSet::new();
    let driven = kube_api_calls(&recorder, &KubeApi::new(client.clone())).await;
    let kube_api = std::fs::read_to_string("src/controller/kube_api.rs").unwrap();
    for method in kube_api
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub async fn "))
        .filter_map(|l| l.split(['(', '<']).next())
    {
        assert!(
            driven.contains_key(method),
            "KubeApi::{method} is not driven by kube_api_calls: add it so its RBAC is checked"
        );
    }
    for (method, used) in driven {
        let by = callers(method, &files);
        assert!(!used.is_empty(), "KubeApi::{method} made no request");
        if by.is_empty() {
            // Not called by the controller (tests only): no grant needed.
            continue;
        }
        if by.iter().all(|f| f.ends_with("simulated_nodes.rs")) {
            simulated_only.extend(used);
        } else {
            every_mode.extend(used);
        }
    }

    let mut problems = Vec::new();
    for mode in MODES {
        let allowed = granted(&render(mode));
        let mut used = every_mode.clone();
        if mode == "simulated" {
            used.extend(simulated_only.iter().cloned());
        }
        let missing: BTreeSet<Access> = used.difference(&allowed).cloned().collect();
        let unused: BTreeSet<Access> = allowed.difference(&used).cloned().collect();
        if !missing.is_empty() {
            problems.push(format!(
                "cloud {mode}: the chart forbids {}",
                show(&missing)
            ));
        }
        if !unused.is_empty() {
            problems.push(format!(
                "cloud {mode}: the chart grants, and no call uses, {}",
                show(&unused)
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
