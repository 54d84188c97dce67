//! CapacityBuffers (`autoscaling.x-k8s.io/v1beta1`) in the live controller,
//! driven through the snapshot, the buffer step, the core and the executor,
//! with the Kubernetes API scripted (every request checked: method, path,
//! body):
//! - a buffer of 2 GPU pods becomes NodeClaims for that capacity, and its
//!   status says it is ready, provisioning and 2 replicas strong; once the
//!   claims exist its room is held on them and nothing more is launched;
//! - a buffer whose pod no pool can hold goes `Infeasible` with the
//!   planner's reason, and launches nothing;
//! - a buffer naming a missing PodTemplate gets conditions saying so, and
//!   is no demand;
//! - a buffer of 20% of a Deployment of 10 GPU replicas is 2 chunks of the
//!   Deployment's pod, launched as NodeClaims, and follows the Deployment
//!   when it is scaled; a buffer naming a missing Deployment, or a kind in
//!   the wrong API group, gets conditions saying so and is no demand, while
//!   a good buffer beside it is served as before;
//! - discovery watches buffers only where `autoscaling.x-k8s.io/v1beta1`
//!   lists `capacitybuffers` (ProvisioningRequests share the group).
//! - a one-shot buffer launches its chunks; a real pod of its template's
//!   labels takes one and it is not refilled (the consumed count is
//!   persisted as an annotation before the status says it); a restarted
//!   controller reads the count back; once all is consumed the buffer says
//!   `Consumed` and holds nothing;
//! - Kueue's buffer-backed admission (KEP-5133): the buffer Kueue makes
//!   for a pod set reports `RequiresNewCapacity` until its nodes are Ready,
//!   then `FitsExistingCapacity`; the workload's pods appear and bind
//!   without a second launch, and once Kueue deletes the buffer nothing is
//!   held; with a buffer that refills, deleted on admission (the KEP's
//!   milestone 1), the pods that follow are planned onto its Ready nodes
//!   and nothing is launched or disrupted.

use crate::support;

use crate::support::{catalog, t};
use http::Method;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1 as core;
use kube::ResourceExt;
use quartermaster::api::foreign::CapacityBuffer;
use quartermaster::api::labels as l;
use quartermaster::api::{NodeClaim, NodePool};
use quartermaster::controller::buffers;
use quartermaster::controller::checkpoint::HookClient;
use quartermaster::controller::events::Events;
use quartermaster::controller::executor::{Executor, HookAcks, Outcome, Targets};
use quartermaster::controller::kube_api::KubeApi;
use quartermaster::controller::podgroups;
use quartermaster::controller::snapshot::{world_parts, Snapshot, Store, WorldParts};
use quartermaster::core::batch::DEFAULT_MAX_PODS;
use quartermaster::core::{Action, ClaimRequest, Config, Core, Time};
use quartermaster::metrics::Metrics;
use serde_json::{json, Value};
use std::sync::Arc;
use support::api_server::{echo, Scenario};
use tokio::sync::watch;

const CLAIMS: &str = "/apis/quartermaster.dev/v1alpha1/nodeclaims";
const REGION: &str = "us-east-1";

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

/// A GPU pool of g5 types, tainted for GPU pods.
fn pool() -> NodePool {
    from(json!({
        "apiVersion": "quartermaster.dev/v1alpha1",
        "kind": "NodePool",
        "metadata": {"name": "gpu"},
        "spec": {
            "capacityTypes": ["spot", "on-demand"],
            "template": {"spec": {
                "requirements": [{"key": l::INSTANCE_FAMILY, "operator": "In", "values": ["g5"]}],
                "taints": [{"key": l::TAINT_GPU, "effect": "NoSchedule"}]
            }}
        }
    }))
}

/// A PodTemplate `ml/<name>` of a pod asking for `gpus` GPUs.
fn pod_template(name: &str, gpus: &str) -> core::PodTemplate {
    from(json!({
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "template": {"spec": {
            "containers": [{"name": "c", "resources": {"requests":
                {"cpu": "2", "memory": "8Gi", l::RESOURCE_GPU: gpus}}}],
            "tolerations": [{"key": l::TAINT_GPU, "operator": "Exists"}]
        }}
    }))
}

/// A CapacityBuffer `ml/<name>` of `replicas` copies of template `tmpl`,
/// with these conditions already set.
fn buffer(name: &str, tmpl: &str, replicas: i32, conditions: Value) -> CapacityBuffer {
    from(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "ml", "generation": 1},
        "spec": {"podTemplateRef": {"name": tmpl}, "replicas": replicas},
        "status": {"conditions": conditions}
    }))
}

/// A Deployment `ml/<name>` of `replicas` pods asking for `gpus` GPUs.
fn deployment(name: &str, replicas: i32, gpus: &str) -> Deployment {
    let template = pod_template(name, gpus).template;
    from(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": template}
    }))
}

/// A CapacityBuffer `ml/<name>` of `percentage` percent of the workload
/// `(apiGroup, kind, name)` in `ml`.
fn share_buffer(name: &str, target: (&str, &str, &str), percentage: i32) -> CapacityBuffer {
    let (group, kind, workload) = target;
    from(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "ml", "generation": 1},
        "spec": {"scalableRef": {"apiGroup": group, "kind": kind, "name": workload},
                 "percentage": percentage},
        "status": {"conditions": []}
    }))
}

/// A synced store holding [`pool`], these templates and buffers.
fn store(templates: Vec<core::PodTemplate>, bufs: Vec<CapacityBuffer>) -> Store {
    let s = Store::new();
    s.reset(vec![pool()]);
    s.reset(Vec::<core::Pod>::new());
    s.reset(Vec::<core::Node>::new());
    s.reset(Vec::<NodeClaim>::new());
    s.reset(Vec::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::new());
    s.reset(templates);
    s.reset(bufs);
    assert!(s.is_synced());
    s
}

/// [`store`] with these Deployments watched too.
fn store_with(
    templates: Vec<core::PodTemplate>,
    deployments: Vec<Deployment>,
    bufs: Vec<CapacityBuffer>,
) -> Store {
    let s = store(templates, bufs);
    s.reset(deployments);
    s
}

/// A condition's `(type, status, reason)`.
type Cond<'a> = (&'a str, &'a str, &'a str);

/// A condition as the API server stores it.
fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2026-01-05T00:00:00Z", "observedGeneration": 1})
}

/// One buffer round over the store at `now`: the world it leaves, with the
/// buffer `name`'s status written through a mock API that expects exactly
/// one merge patch of its status subresource, carrying these conditions
/// and `replicas`; returns the patched status.
async fn buffer_round(
    s: &Store,
    core: &Core,
    now: Time,
    name: &str,
    want: &[Cond<'_>],
    replicas: u32,
) -> (WorldParts, Value) {
    let (parts, mut patched) =
        buffers_round(s, core, now, &[(name, want, replicas, None)], false).await;
    (parts, patched.remove(0))
}

/// One buffer's expected write: `(buffer, conditions, replicas, the reason
/// of the Warning Event that follows the patch, if any)`.
type Write<'a> = (&'a str, &'a [Cond<'a>], u32, Option<&'a str>);

/// [`buffer_round`] over several buffers: one status patch for each of
/// `want` (in name order, as they are written), each followed by its
/// Warning Event where one is expected (when `events` is set: otherwise
/// the round has no recorder), and no other request; returns the patched
/// statuses.
async fn buffers_round(
    s: &Store,
    core: &Core,
    now: Time,
    want: &[Write<'_>],
    events: bool,
) -> (WorldParts, Vec<Value>) {
    let writes: Vec<Expect> = want.iter().map(|&w| Expect::Status(w)).collect();
    round(s, core, now, &writes, events).await
}

/// One request a round's writes are expected to make.
#[derive(Clone, Copy)]
enum Expect<'a> {
    /// A status patch (and its Event): [`Write`].
    Status(Write<'a>),
    /// A merge patch of the buffer's metadata persisting its consumed
    /// count and the pods counted ([`buffers::CONSUMED_ANNOTATION`],
    /// [`buffers::CONSUMED_BY_ANNOTATION`]).
    Consumed(&'a str, u64, &'a str),
}

/// The buffer step over the store at `now`, then its writes through a mock
/// API that expects exactly `want`, in order, and no other request; returns
/// the world the step leaves and the patched statuses.
async fn round(
    s: &Store,
    core: &Core,
    now: Time,
    want: &[Expect<'_>],
    events: bool,
) -> (WorldParts, Vec<Value>) {
    let catalog = catalog();
    let snap = s.read(Snapshot::clone);
    let mut parts = world_parts(&snap, &catalog, REGION, now, DEFAULT_MAX_PODS);
    let unplaceable = |p: &str| {
        core.last_plan()
            .and_then(|r| r.unschedulable.iter().find(|u| u.pod == p))
            .map(|u| u.reason.clone())
    };
    let statuses = buffers::buffers_step(
        s,
        &mut parts,
        &unplaceable,
        DEFAULT_MAX_PODS,
        now,
        &|pools, pod| core.buffer_lead(pools, &catalog, pod),
    );
    let patched = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut sc = Scenario::new();
    for &w in want {
        let (name, conditions, replicas, event) = match w {
            Expect::Consumed(name, n, by) => {
                let by = by.to_string();
                let path = format!(
                    "/apis/autoscaling.x-k8s.io/v1beta1/namespaces/ml/capacitybuffers/{name}"
                );
                sc = sc
                    .expect(Method::PATCH, &path, move |body| {
                        assert_eq!(
                            body,
                            &json!({"metadata": {"annotations": {
                                buffers::CONSUMED_ANNOTATION: n.to_string(),
                                buffers::CONSUMED_BY_ANNOTATION: by}}})
                        );
                    })
                    .content_type("application/merge-patch+json")
                    .respond(
                        200,
                        json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer"}),
                    );
                continue;
            }
            Expect::Status(w) => w,
        };
        let path = format!(
            "/apis/autoscaling.x-k8s.io/v1beta1/namespaces/ml/capacitybuffers/{name}/status"
        );
        let expected = support::api_server::conditions(conditions);
        let keep = patched.clone();
        sc = sc
            .expect(Method::PATCH, &path, move |body| {
                let status = &body["status"];
                assert_eq!(support::api_server::conditions_of(status), expected);
                assert_eq!(status["replicas"], json!(replicas));
                keep.lock().unwrap().push(status.clone());
            })
            .content_type("application/merge-patch+json")
            .respond(
                200,
                json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer"}),
            );
        if let Some(reason) = event {
            let name = name.to_string();
            let reason = reason.to_string();
            sc = sc
                .expect(
                    Method::POST,
                    "/apis/events.k8s.io/v1/namespaces/ml/events",
                    move |body| {
                        assert_eq!(body["type"], "Warning");
                        assert_eq!(body["reason"], reason.as_str());
                        assert_eq!(body["regarding"]["kind"], "CapacityBuffer");
                        assert_eq!(body["regarding"]["name"], name.as_str());
                        assert!(body["note"].as_str().unwrap().starts_with("Infeasible: "));
                    },
                )
                .respond_with(echo);
        }
    }
    let (client, verifier) = sc.run();
    let recorder = events.then(|| Events::new(client.clone(), None));
    buffers::write_statuses(&KubeApi::new(client), recorder.as_ref(), s, &statuses, now).await;
    verifier.finish().await;
    let statuses = patched.lock().unwrap().clone();
    (parts, statuses)
}

/// The launches among `actions`.
fn launches(actions: &[Action]) -> Vec<&ClaimRequest> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// The core's decisions over `parts` at `now` and two seconds later (the
/// batch window between them).
fn decide(core: &mut Core, parts: &WorldParts, now: Time) -> Vec<Action> {
    let catalog = catalog();
    let mut actions = core.decide(&parts.world(&catalog, REGION), now);
    actions.extend(core.decide(
        &parts.world(&catalog, REGION),
        now + chrono::TimeDelta::seconds(2),
    ));
    actions
}

/// Runs the executor over `actions` as the leader, against an API that
/// expects one NodeClaim creation per launch (each checked by `check`).
async fn execute_launches(
    parts: &WorldParts,
    actions: &[Action],
    now: Time,
    check: fn(&Value),
) -> Vec<NodeClaim> {
    let mut sc = Scenario::new();
    for _ in launches(actions) {
        sc = sc.expect(Method::POST, CLAIMS, check).respond_with(echo);
    }
    let (client, verifier) = sc.run();
    let api = KubeApi::new(client);
    let catalog = catalog();
    let world = parts.world(&catalog, REGION);
    let metrics = Arc::new(Metrics::unregistered());
    let (_tx, leader) = watch::channel(true);
    let hooks = HookClient::new();
    let acks = HookAcks::default();
    let targets = Targets {
        nodes: Default::default(),
        pods: Default::default(),
    };
    let ex = Executor {
        api: &api,
        metrics: &metrics,
        leader: &leader,
        events: None,
        hooks: &hooks,
        hook_acks: &acks,
        parallel: 1,
        disruptions: &[],
    };
    let outcomes = ex.execute(actions, &world, &targets, now).await;
    verifier.finish().await;
    outcomes
        .into_iter()
        .map(|o| match o.unwrap() {
            Outcome::Created(c) => {
                let mut c = *c;
                c.metadata.creation_timestamp =
                    Some(quartermaster::controller::snapshot::to_k8s_time(now));
                c
            }
            other => panic!("{other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn a_buffer_of_two_gpu_pods_launches_their_capacity_then_holds_it_and_says_so() {
    let s = store(
        vec![pod_template("tmpl", "1")],
        vec![buffer("warm", "tmpl", 2, json!([]))],
    );
    let mut core = Core::new(Config::default());
    let (parts, status) = buffer_round(
        &s,
        &core,
        t(0),
        "warm",
        &[
            ("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
            ("Provisioning", "False", "RequiresNewCapacity"),
            ("Infeasible", "False", "Placeable"),
        ],
        2,
    )
    .await;
    assert_eq!(status["podTemplateRef"], json!({"name": "tmpl"}));
    let mut pending: Vec<&str> = parts.pending.iter().map(|p| p.name.as_str()).collect();
    pending.sort();
    assert_eq!(
        pending,
        ["ml/warm.buffer.reserved-0", "ml/warm.buffer.reserved-1"]
    );

    // The planner launches capacity for both chunks; the executor creates
    // the claims for them.
    let actions = decide(&mut core, &parts, t(0));
    let reqs = launches(&actions);
    assert!(!reqs.is_empty(), "{actions:?}");
    let mut planned: Vec<String> = reqs.iter().flat_map(|r| r.pods.clone()).collect();
    planned.sort();
    assert_eq!(planned, pending);
    assert!(reqs
        .iter()
        .all(|r| r.offering.instance_type.starts_with("g5.")));
    let claims = execute_launches(&parts, &actions, t(2), |body| {
        assert_eq!(body["kind"], "NodeClaim");
        assert_eq!(body["spec"]["nodePool"], "gpu");
        assert_eq!(body["metadata"]["finalizers"], json!([l::FINALIZER]));
    })
    .await;
    assert_eq!(claims.len(), reqs.len());

    // With the claims in flight, the chunks' room is held on them (as
    // do-not-disrupt pods), the buffer says so, and nothing more launches.
    s.reset(claims);
    s.reset(vec![buffer(
        "warm",
        "tmpl",
        2,
        json!([
            condition(
                "ReadyForProvisioning",
                "True",
                "AttributesSetSuccessfully",
                "2 chunks"
            ),
            condition(
                "Provisioning",
                "False",
                "RequiresNewCapacity",
                "0 chunks have room on Ready nodes, 0 on nodes not Ready yet; capacity for 2 is being planned or launched"
            ),
            condition(
                "Infeasible",
                "False",
                "Placeable",
                "a pool can hold its chunks"
            ),
        ]),
    )]);
    let (parts, _) = buffer_round(
        &s,
        &core,
        t(10),
        "warm",
        &[
            ("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
            ("Provisioning", "False", "RequiresNewCapacity"),
            ("Infeasible", "False", "Placeable"),
        ],
        2,
    )
    .await;
    assert!(parts.pending.is_empty());
    let held: Vec<&str> = parts
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter().filter(|p| p.do_not_disrupt))
        .map(|p| p.pod.name.as_str())
        .collect();
    assert_eq!(held.len(), 2, "{held:?}");
    assert!(launches(&decide(&mut core, &parts, t(10))).is_empty());
}

#[tokio::test]
async fn a_buffer_no_pool_can_hold_goes_infeasible_with_the_planners_reason_and_launches_nothing() {
    let s = store(
        vec![pod_template("huge", "64")],
        vec![buffer("big", "huge", 2, json!([]))],
    );
    let mut core = Core::new(Config::default());
    let (parts, _) = buffer_round(
        &s,
        &core,
        t(0),
        "big",
        &[
            ("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
            ("Provisioning", "False", "RequiresNewCapacity"),
            ("Infeasible", "False", "Placeable"),
        ],
        2,
    )
    .await;
    assert!(launches(&decide(&mut core, &parts, t(0))).is_empty());

    // The plan found no place for its chunks: Infeasible, with why.
    let (parts, status) = buffer_round(
        &s,
        &core,
        t(10),
        "big",
        &[
            ("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
            ("Provisioning", "False", "NotPlaceable"),
            ("Infeasible", "True", "NotPlaceable"),
        ],
        2,
    )
    .await;
    let infeasible = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Infeasible")
        .unwrap();
    let why = infeasible["message"].as_str().unwrap();
    let planner = core
        .last_plan()
        .unwrap()
        .unschedulable
        .iter()
        .find(|u| u.pod == "ml/big.buffer.reserved-0")
        .map(|u| u.reason.clone())
        .unwrap();
    assert_eq!(why, planner);
    assert!(!why.is_empty());
    assert!(launches(&decide(&mut core, &parts, t(10))).is_empty());
}

#[tokio::test]
async fn a_buffer_naming_a_missing_template_gets_conditions_saying_so_and_is_no_demand() {
    let s = store(vec![], vec![buffer("orphan", "gone", 2, json!([]))]);
    let mut core = Core::new(Config::default());
    let (parts, status) = buffer_round(
        &s,
        &core,
        t(0),
        "orphan",
        &[
            ("ReadyForProvisioning", "False", "PodTemplateNotFound"),
            ("Infeasible", "True", "PodTemplateNotFound"),
        ],
        0,
    )
    .await;
    assert_eq!(
        status["conditions"][0]["message"],
        "podTemplate ml/gone not found"
    );
    assert!(parts.pending.is_empty());
    assert!(launches(&decide(&mut core, &parts, t(0))).is_empty());
    assert_eq!(
        s.read(|s| s.capacity_buffers["ml/orphan"].name_any()),
        "orphan"
    );
}

#[tokio::test]
async fn a_share_of_a_deployment_launches_its_chunks_and_follows_the_deployments_replicas() {
    let s = store_with(
        vec![],
        vec![deployment("web", 10, "1")],
        vec![share_buffer("share", ("apps", "Deployment", "web"), 20)],
    );
    let mut core = Core::new(Config::default());
    let want = [
        ("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
        ("Provisioning", "False", "RequiresNewCapacity"),
        ("Infeasible", "False", "Placeable"),
    ];
    let (parts, status) = buffer_round(&s, &core, t(0), "share", &want, 2).await;
    // No PodTemplate is made for a workload's buffer: none is reported.
    assert_eq!(status.get("podTemplateRef"), Some(&Value::Null));
    assert_eq!(status["conditions"][0]["message"], "2 chunks");
    let mut pending: Vec<&str> = parts.pending.iter().map(|p| p.name.as_str()).collect();
    pending.sort();
    assert_eq!(
        pending,
        ["ml/share.buffer.reserved-0", "ml/share.buffer.reserved-1"]
    );
    // Each chunk is the Deployment's pod: its GPU and its toleration.
    for p in &parts.pending {
        assert_eq!(p.requests.get(l::RESOURCE_GPU), 1, "{p:?}");
    }

    // The planner launches GPU capacity for both chunks.
    let actions = decide(&mut core, &parts, t(0));
    let reqs = launches(&actions);
    let mut planned: Vec<String> = reqs.iter().flat_map(|r| r.pods.clone()).collect();
    planned.sort();
    assert_eq!(planned, pending);
    let claims = execute_launches(&parts, &actions, t(2), |body| {
        assert_eq!(body["kind"], "NodeClaim");
        assert_eq!(body["spec"]["nodePool"], "gpu");
    })
    .await;
    assert_eq!(claims.len(), reqs.len());

    // Scaled to 11 replicas, the Deployment's 20% is 3 chunks (rounded up).
    s.reset(vec![deployment("web", 11, "1")]);
    let (parts, status) = buffer_round(&s, &core, t(10), "share", &want, 3).await;
    assert_eq!(status["conditions"][0]["message"], "3 chunks");
    assert_eq!(parts.pending.len(), 3);
}

#[tokio::test]
async fn a_buffer_naming_a_missing_deployment_says_so_and_the_round_serves_the_others() {
    let s = store_with(
        vec![pod_template("tmpl", "1")],
        vec![deployment("web", 10, "1")],
        vec![
            share_buffer("gone", ("apps", "Deployment", "missing"), 50),
            share_buffer("nogroup", ("", "Deployment", "web"), 50),
            buffer("warm", "tmpl", 1, json!([])),
        ],
    );
    let mut core = Core::new(Config::default());
    // Each bad buffer is also a Warning Event saying why; the good one is
    // none.
    let (parts, statuses) = buffers_round(
        &s,
        &core,
        t(0),
        &[
            (
                "gone",
                &[
                    ("ReadyForProvisioning", "False", "ScalableRefNotFound"),
                    ("Infeasible", "True", "ScalableRefNotFound"),
                ],
                0,
                Some("ScalableRefNotFound"),
            ),
            (
                "nogroup",
                &[
                    ("ReadyForProvisioning", "False", "ScalableRefNotSupported"),
                    ("Infeasible", "True", "ScalableRefNotSupported"),
                ],
                0,
                Some("ScalableRefNotSupported"),
            ),
            (
                "warm",
                &[
                    ("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
                    ("Provisioning", "False", "RequiresNewCapacity"),
                    ("Infeasible", "False", "Placeable"),
                ],
                1,
                None,
            ),
        ],
        true,
    )
    .await;
    assert_eq!(
        statuses[0]["conditions"][0]["message"],
        "scalableRef Deployment ml/missing not found"
    );
    let why = statuses[1]["conditions"][0]["message"].as_str().unwrap();
    assert!(why.contains("Deployment is in apiGroup apps"), "{why}");
    // Only the good buffer is demand.
    let pending: Vec<&str> = parts.pending.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(pending, ["ml/warm.buffer.reserved-0"]);
    let planned: Vec<String> = launches(&decide(&mut core, &parts, t(0)))
        .iter()
        .flat_map(|r| r.pods.clone())
        .collect();
    assert_eq!(planned, pending);
}

/// What discovery finds when `GET /apis` lists `autoscaling.x-k8s.io`
/// `v1beta1` and its resource list answers `(status, body)`.
async fn discovered(status: u16, resources: Value) -> podgroups::ServedApis {
    let (client, verifier) = Scenario::new()
        .expect(Method::GET, "/apis", |_| {})
        .respond(
            200,
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": "autoscaling.x-k8s.io", "versions": [
                    {"groupVersion": "autoscaling.x-k8s.io/v1", "version": "v1"},
                    {"groupVersion": "autoscaling.x-k8s.io/v1beta1", "version": "v1beta1"}]}]}),
        )
        .expect(Method::GET, "/apis/autoscaling.x-k8s.io/v1beta1", |_| {})
        .respond(status, resources)
        .run();
    let served = podgroups::discover(&client).await.unwrap();
    verifier.finish().await;
    served
}

fn resource_list(names: &[&str]) -> Value {
    let resources: Vec<Value> = names
        .iter()
        .map(|n| json!({"name": n, "singularName": "", "namespaced": true, "kind": "K", "verbs": ["list"]}))
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1",
           "groupVersion": "autoscaling.x-k8s.io/v1beta1", "resources": resources})
}

#[tokio::test]
async fn buffers_are_watched_only_where_their_group_version_lists_them() {
    let served = discovered(
        200,
        resource_list(&["capacitybuffers", "capacitybuffers/status"]),
    )
    .await;
    assert!(served.capacity_buffers && served.provisioning_requests);
    // ProvisioningRequests' old v1beta1 alone: no buffers.
    let served = discovered(200, resource_list(&["provisioningrequests"])).await;
    assert!(!served.capacity_buffers);
    // An unanswered resource list: not watched (a watch of a missing
    // resource would hold the loop unready forever).
    let served = discovered(
        404,
        support::api_server::not_found("", "autoscaling.x-k8s.io/v1beta1"),
    )
    .await;
    assert!(!served.capacity_buffers);
}

/// A PodTemplate `ml/<name>` of a 1-GPU pod labelled `labels` (as Kueue
/// makes one from a workload's pod set).
fn labelled_template(name: &str, labels: Value) -> core::PodTemplate {
    let mut tmpl = pod_template(name, "1");
    tmpl.template.as_mut().unwrap().metadata = Some(from(json!({ "labels": labels })));
    tmpl
}

/// A one-shot CapacityBuffer `ml/<name>` of `replicas` copies of template
/// `tmpl` ([`buffers::REFILL_STRATEGY_ANNOTATION`] `none`), with these
/// extra annotations, owner references and status.
fn one_shot(
    name: &str,
    tmpl: &str,
    replicas: i32,
    annotations: Value,
    owners: Value,
    status: Value,
) -> CapacityBuffer {
    let mut annotations = annotations;
    annotations[buffers::REFILL_STRATEGY_ANNOTATION] = json!("none");
    from(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "ml", "generation": 1,
                     "annotations": annotations, "ownerReferences": owners},
        "spec": {"provisioningStrategy": "buffer.x-k8s.io/active-capacity",
                 "podTemplateRef": {"name": tmpl}, "replicas": replicas},
        "status": status
    }))
}

/// A 1-GPU pod `ml/<name>` labelled `labels` (the shape of
/// [`pod_template`]'s), running on `node`, or pending (unschedulable so far)
/// without one.
fn real_pod(name: &str, labels: Value, node: Option<&str>) -> core::Pod {
    let spec = pod_template(name, "1").template.unwrap().spec;
    let mut pod = core::Pod {
        metadata: from(json!({"name": name, "namespace": "ml", "labels": labels})),
        spec,
        status: Some(from(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}))),
    };
    if let Some(n) = node {
        pod.spec.as_mut().unwrap().node_name = Some(n.into());
        pod.status = Some(from(json!({"phase": "Running", "podIP": "10.0.0.7"})));
    }
    pod
}

/// `claims` registered and Ready at `at`, each with its Node
/// `ip-10-0-0-<i+1>` (its GPU advertised), as the lifecycle leaves them.
fn ready(claims: &[NodeClaim], at: Time) -> (Vec<NodeClaim>, Vec<core::Node>) {
    use quartermaster::api::nodeclaim::conditions as k;
    claims
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let node = format!("ip-10-0-0-{}", i + 1);
            let pid = format!("aws:///us-east-1a/i-{:017x}", i + 1);
            let mut status = quartermaster::api::NodeClaimStatus {
                provider_id: Some(pid.clone()),
                node_name: Some(node.clone()),
                ..Default::default()
            };
            for k in [k::LAUNCHED, k::REGISTERED, k::INITIALIZED, k::READY] {
                quartermaster::controller::lifecycle::set_condition(
                    &mut status,
                    k,
                    true,
                    k,
                    "",
                    at,
                );
            }
            let mut c = c.clone();
            c.status = Some(status);
            let n: core::Node = from(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node, "resourceVersion": "1"},
                "spec": {"providerID": pid,
                         "taints": [{"key": l::TAINT_GPU, "effect": "NoSchedule"}]},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "58",
                                    l::RESOURCE_GPU: "1"}
                }
            }));
            (c, n)
        })
        .unzip()
}

/// The claims of the nodes where buffer chunks are held (do-not-disrupt
/// placeholders) in `parts`.
fn holding(parts: &WorldParts) -> Vec<String> {
    parts
        .nodes
        .iter()
        .filter(|n| n.pods.iter().any(|p| buffers_chunk(&p.pod.name)))
        .map(|n| n.claim.clone())
        .collect()
}

fn buffers_chunk(pod: &str) -> bool {
    quartermaster::core::buffers::is_chunk(pod)
}

/// The first round of a buffer of two 1-GPU chunks: its status says it
/// needs new capacity, the planner launches one g5 node per chunk, and the
/// executor creates their claims, returned.
async fn launch_two_chunks(s: &Store, core: &mut Core, name: &str) -> (Vec<NodeClaim>, Value) {
    let (parts, mut status) = round(
        s,
        core,
        t(0),
        &[Expect::Status((
            name,
            &[
                ("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
                ("Provisioning", "False", "RequiresNewCapacity"),
                ("Infeasible", "False", "Placeable"),
            ],
            2,
            None,
        ))],
        false,
    )
    .await;
    assert_eq!(parts.pending.len(), 2);
    let actions = decide(core, &parts, t(0));
    let reqs = launches(&actions);
    assert_eq!(reqs.len(), 2, "{actions:?}");
    assert!(reqs.iter().all(|r| r.pods.len() == 1), "{reqs:?}");
    let claims = execute_launches(&parts, &actions, t(2), |body| {
        assert_eq!(body["spec"]["nodePool"], "gpu");
    })
    .await;
    (claims, status.remove(0))
}

/// The conditions of a buffer every chunk of which has room on a Ready
/// node: what Kueue's buffer admission check waits for.
const FITS: &[Cond] = &[
    ("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
    ("Provisioning", "True", "FitsExistingCapacity"),
    ("Infeasible", "False", "Placeable"),
];

/// `b` with the status last patched onto it (as the watch would bring it
/// back).
fn with_patched(mut b: CapacityBuffer, status: &Value) -> CapacityBuffer {
    b.status = Some(from(status.clone()));
    b
}

#[tokio::test]
async fn a_one_shot_buffer_does_not_refill_what_a_pod_consumed_and_reads_its_count_after_a_restart()
{
    let labels = json!({"app": "train"});
    let annotated = |consumed: Option<(u64, &str)>, status: &Value| {
        let ann = match consumed {
            Some((n, by)) => json!({ buffers::CONSUMED_ANNOTATION: n.to_string(),
                                     buffers::CONSUMED_BY_ANNOTATION: by }),
            None => json!({}),
        };
        with_patched(
            one_shot("once", "train", 2, ann, json!([]), json!({})),
            status,
        )
    };
    let s = store(
        vec![labelled_template("train", labels.clone())],
        vec![annotated(None, &json!({}))],
    );
    let mut core = Core::new(Config::default());
    let (claims, status) = launch_two_chunks(&s, &mut core, "once").await;

    // Both nodes Ready: every chunk has room on one.
    let (claims, nodes) = ready(&claims, t(60));
    s.reset(claims.clone());
    s.reset(nodes.clone());
    s.reset(vec![annotated(None, &status)]);
    let (parts, mut patched) = round(
        &s,
        &core,
        t(120),
        &[Expect::Status(("once", FITS, 2, None))],
        false,
    )
    .await;
    assert_eq!(holding(&parts).len(), 2);
    assert!(launches(&decide(&mut core, &parts, t(120))).is_empty());

    // A real pod of the template's labels runs on the first node: the
    // count is persisted first, then the status says one chunk is left,
    // held on the other node; nothing is launched to refill it.
    s.apply(real_pod("llm-0", labels.clone(), Some("ip-10-0-0-1")));
    s.reset(vec![annotated(None, &patched.remove(0))]);
    let (parts, mut patched) = round(
        &s,
        &core,
        t(180),
        &[
            Expect::Consumed("once", 1, "llm-0"),
            Expect::Status(("once", FITS, 1, None)),
        ],
        false,
    )
    .await;
    let ready_message = patched[0]["conditions"][0]["message"].as_str().unwrap();
    assert!(ready_message.contains("1 of 2 consumed"), "{ready_message}");
    assert!(parts.pending.is_empty(), "{:?}", parts.pending);
    assert_eq!(holding(&parts), [claims[1].name_any()]);
    assert!(launches(&decide(&mut core, &parts, t(180))).is_empty());

    // A restarted controller (a new store and core) reads the count back:
    // the consumer has finished and is gone, yet its chunk is not made
    // again, and the status, already right, is not written.
    let status = patched.remove(0);
    let s = store(
        vec![labelled_template("train", labels.clone())],
        vec![annotated(Some((1, "llm-0")), &status)],
    );
    s.reset(claims);
    s.reset(nodes);
    let mut core = Core::new(Config::default());
    let (parts, _) = round(&s, &core, t(240), &[], false).await;
    assert!(parts.pending.is_empty());
    assert_eq!(holding(&parts).len(), 1, "one chunk left to hold");
    assert!(launches(&decide(&mut core, &parts, t(240))).is_empty());

    // The second chunk is consumed too: the buffer is used up, holds
    // nothing and says so.
    s.apply(real_pod("llm-1", labels, Some("ip-10-0-0-2")));
    let (parts, patched) = round(
        &s,
        &core,
        t(300),
        &[
            Expect::Consumed("once", 2, "llm-0,llm-1"),
            Expect::Status((
                "once",
                &[
                    ("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
                    ("Provisioning", "False", "Consumed"),
                    ("Infeasible", "False", "Placeable"),
                ],
                0,
                None,
            )),
        ],
        false,
    )
    .await;
    let provisioning = patched[0]["conditions"][1]["message"].as_str().unwrap();
    assert!(provisioning.contains("2 of 2 consumed"), "{provisioning}");
    assert!(holding(&parts).is_empty());
    assert!(launches(&decide(&mut core, &parts, t(300))).is_empty());
}

#[tokio::test]
async fn a_kueue_buffer_admits_its_workload_once_ready_and_the_pods_take_the_capacity_without_a_second_launch(
) {
    // Kueue (KEP-5133) reserved quota for the Workload `job-llm` and made
    // a PodTemplate from its pod set `main` and a one-shot buffer of it,
    // owned by the Workload.
    let labels = json!({"kueue.x-k8s.io/podset": "main", "job-name": "llm"});
    let owner = json!([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "name": "job-llm", "uid": "5f0c-llm", "controller": true}]);
    let kueue_buffer = |status: &Value| {
        one_shot(
            "job-llm-main",
            "job-llm-main",
            2,
            json!({}),
            owner.clone(),
            status.clone(),
        )
    };
    let s = store(
        vec![labelled_template("job-llm-main", labels.clone())],
        vec![kueue_buffer(&json!({}))],
    );
    let mut core = Core::new(Config::default());
    let (claims, status) = launch_two_chunks(&s, &mut core, "job-llm-main").await;
    let requires_new: &[Cond] = &[
        ("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
        ("Provisioning", "False", "RequiresNewCapacity"),
        ("Infeasible", "False", "Placeable"),
    ];

    // The claims are in flight: room is held on them, but the capacity is
    // not ready, so Provisioning stays False (Kueue keeps the check
    // Pending) and nothing more launches.
    s.reset(claims.clone());
    s.reset(vec![kueue_buffer(&status)]);
    let (parts, patched) = round(
        &s,
        &core,
        t(10),
        &[Expect::Status(("job-llm-main", requires_new, 2, None))],
        false,
    )
    .await;
    let why = patched[0]["conditions"][1]["message"].as_str().unwrap();
    assert!(why.contains("2 on nodes not Ready yet"), "{why}");
    assert_eq!(holding(&parts).len(), 2);
    assert!(launches(&decide(&mut core, &parts, t(10))).is_empty());

    // Ready: Provisioning=True, FitsExistingCapacity, what Kueue's check
    // waits for to admit the Workload.
    let (ready_claims, nodes) = ready(&claims, t(60));
    s.reset(ready_claims);
    s.reset(nodes);
    s.reset(vec![kueue_buffer(&patched[0])]);
    let (_, patched) = round(
        &s,
        &core,
        t(120),
        &[Expect::Status(("job-llm-main", FITS, 2, None))],
        false,
    )
    .await;

    // Admitted, the Job makes its pods (the pod set's labels): pending,
    // they take the held room in thought, the buffer makes no chunk for
    // them to displace, and nothing is launched a second time.
    s.reset(vec![kueue_buffer(&patched[0])]);
    for i in 0..2 {
        s.apply(real_pod(&format!("llm-{i}"), labels.clone(), None));
    }
    let consumed: &[Cond] = &[
        ("ReadyForProvisioning", "True", "AttributesSetSuccessfully"),
        ("Provisioning", "False", "Consumed"),
        ("Infeasible", "False", "Placeable"),
    ];
    let (parts, patched) = round(
        &s,
        &core,
        t(130),
        &[Expect::Status(("job-llm-main", consumed, 0, None))],
        false,
    )
    .await;
    let mut pending: Vec<&str> = parts.pending.iter().map(|p| p.name.as_str()).collect();
    pending.sort();
    assert_eq!(pending, ["ml/llm-0", "ml/llm-1"]);
    assert!(holding(&parts).is_empty());
    assert!(launches(&decide(&mut core, &parts, t(130))).is_empty());

    // The scheduler binds them onto the two nodes: consumed, persisted.
    s.reset(vec![kueue_buffer(&patched[0])]);
    for i in 0..2 {
        let node = format!("ip-10-0-0-{}", i + 1);
        s.apply(real_pod(&format!("llm-{i}"), labels.clone(), Some(&node)));
    }
    let (parts, _) = round(
        &s,
        &core,
        t(140),
        &[
            Expect::Consumed("job-llm-main", 2, "llm-0,llm-1"),
            Expect::Status(("job-llm-main", consumed, 0, None)),
        ],
        false,
    )
    .await;
    assert!(parts.pending.is_empty());
    assert!(launches(&decide(&mut core, &parts, t(140))).is_empty());

    // Kueue deletes its buffer (and template): no status is written, no
    // chunk is held, and the nodes keep only the Workload's pods, for
    // consolidation to let go once they finish.
    s.delete(&kueue_buffer(&json!({})));
    let (parts, _) = round(&s, &core, t(150), &[], false).await;
    assert!(holding(&parts).is_empty() && parts.pending.is_empty());
    let mut running: Vec<&str> = parts
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter().map(|p| p.pod.name.as_str()))
        .collect();
    running.sort();
    assert_eq!(running, ["ml/llm-0", "ml/llm-1"]);
    assert!(parts
        .nodes
        .iter()
        .all(|n| n.pods.iter().all(|p| !p.do_not_disrupt)));
    assert!(launches(&decide(&mut core, &parts, t(150))).is_empty());
}

#[tokio::test]
async fn a_kueue_buffer_deleted_at_admission_leaves_its_nodes_to_the_pods_that_follow() {
    // KEP-5133's milestone 1: the buffer refills, so Kueue deletes it on
    // admission, before the Job's pods exist.
    let labels = json!({"kueue.x-k8s.io/podset": "main", "job-name": "llm"});
    let s = store(
        vec![labelled_template("job-llm-main", labels.clone())],
        vec![buffer("job-llm-main", "job-llm-main", 2, json!([]))],
    );
    let mut core = Core::new(Config::default());
    let (claims, status) = launch_two_chunks(&s, &mut core, "job-llm-main").await;
    let (claims, nodes) = ready(&claims, t(60));
    s.reset(claims.clone());
    s.reset(nodes);
    s.reset(vec![with_patched(
        buffer("job-llm-main", "job-llm-main", 2, json!([])),
        &status,
    )]);
    let (parts, _) = round(
        &s,
        &core,
        t(120),
        &[Expect::Status(("job-llm-main", FITS, 2, None))],
        false,
    )
    .await;
    assert!(launches(&decide(&mut core, &parts, t(120))).is_empty());

    // Admitted: Kueue deletes the buffer, then the Job's pods appear. They
    // are planned onto the two Ready nodes: nothing is launched, and
    // neither node is taken away from under them.
    s.delete(&buffer("job-llm-main", "job-llm-main", 2, json!([])));
    for i in 0..2 {
        s.apply(real_pod(&format!("llm-{i}"), labels.clone(), None));
    }
    for now in [t(125), t(160), t(240)] {
        let (parts, _) = round(&s, &core, now, &[], false).await;
        assert!(holding(&parts).is_empty());
        assert_eq!(parts.pending.len(), 2);
        let actions = decide(&mut core, &parts, now);
        assert!(
            actions.iter().all(|a| !matches!(
                a,
                Action::Launch(_) | Action::Cordon { .. } | Action::Delete { .. }
            )),
            "{actions:?}"
        );
    }
}
