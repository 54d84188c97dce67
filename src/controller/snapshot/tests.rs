//! The index and the world it makes.

use super::*;
use crate::core::batch::DEFAULT_MAX_PODS;
use chrono::TimeZone;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::json;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

fn catalog() -> &'static Catalog {
    static C: OnceLock<Catalog> = OnceLock::new();
    C.get_or_init(|| Catalog::embedded().unwrap())
}

fn t(s: i64) -> Time {
    chrono::Utc.timestamp_opt(1_767_571_200 + s, 0).unwrap()
}

fn zone() -> String {
    catalog()
        .offerings_of("us-east-1", "g5.xlarge")
        .find(|o| o.capacity_type == crate::catalog::CapacityType::Spot)
        .unwrap()
        .zone_id
        .clone()
}

fn pod(name: &str, gpus: u32, node: Option<&str>, extra: serde_json::Value) -> core::Pod {
    let mut resources = json!({"cpu": "1", "memory": "1Gi"});
    if gpus > 0 {
        resources["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    let mut v = json!({
        "metadata": {"name": name, "namespace": "ml", "labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": resources}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]}
    });
    if let Some(n) = node {
        v["spec"]["nodeName"] = json!(n);
        v["status"] = json!({"phase": "Running"});
    }
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn claim(name: &str, extra: serde_json::Value) -> NodeClaim {
    let mut v = json!({
        "apiVersion": "quartermaster.dev/v1alpha1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "creationTimestamp": "2026-01-05T00:00:00Z",
                     "finalizers": [l::FINALIZER]},
        "spec": {"nodePool": "gpu", "instanceType": "g5.xlarge", "zone": zone(),
                 "capacityType": "spot", "pricePerHour": 0.5},
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn node(name: &str, provider_id: &str, extra: serde_json::Value) -> core::Node {
    let mut v = json!({
        "metadata": {"name": name},
        "spec": {"providerID": provider_id},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "allocatable": {"cpu": "3920m", "memory": "15Gi", "nvidia.com/gpu": "1", "pods": "58"}}
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn pdb(name: &str, app: &str, allowed: i32) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
                   "expectedPods": 1}
    }))
    .unwrap()
}

fn pool() -> NodePool {
    NodePool::new(
        "gpu",
        crate::api::NodePoolSpec {
            capacity_types: vec![crate::catalog::CapacityType::Spot],
            ..Default::default()
        },
    )
}

#[test]
fn a_claim_drifts_by_what_it_recorded_against_the_pool_and_the_clouds_stamp_now() {
    let pool_hash = drift::pool_template_hash(&pool().spec);
    let stamped = |name: &str, pool_hash: &str, image: &str, extra: serde_json::Value| {
        let mut v = json!({
            "metadata": {"annotations": {
                l::NODEPOOL_HASH: pool_hash,
                l::DRIFT_HASH_VERSION: drift::HASH_VERSION,
            }},
            "status": {"imageID": image, "nodeClassHash": "c1"}
        });
        merge(&mut v, extra);
        claim(name, v)
    };
    let claims = vec![
        stamped("same", &pool_hash, "ami-new", json!({})),
        stamped("old-image", &pool_hash, "ami-old", json!({})),
        stamped("old-template", "0123456789abcdef", "ami-new", json!({})),
        // Being deleted: it is going anyway.
        stamped(
            "leaving",
            "0123456789abcdef",
            "ami-old",
            json!({"metadata": {"deletionTimestamp": "2026-01-05T00:10:00Z"}}),
        ),
        // From before drift was recorded: nothing to compare.
        claim("unstamped", json!({})),
    ];
    let s = snapshot(vec![], vec![], claims, vec![]);
    let mut parts = world_parts(&s, catalog(), "us-east-1", t(0), DEFAULT_MAX_PODS);
    let now = ClassStamp {
        hash: "c1".into(),
        image: "ami-new".into(),
    };
    mark_drift(&s, &mut parts.nodes, &|_| Some(now.clone()));
    let drifted: BTreeMap<&str, Option<drift::Drift>> = parts
        .nodes
        .iter()
        .map(|n| (n.claim.as_str(), n.drifted))
        .collect();
    assert_eq!(
        drifted,
        BTreeMap::from([
            ("leaving", None),
            ("old-image", Some(drift::Drift::ImageChanged)),
            ("old-template", Some(drift::Drift::PoolTemplateChanged)),
            ("same", None),
            ("unstamped", None),
        ])
    );
    // A provider without node classes: only the template is compared.
    mark_drift(&s, &mut parts.nodes, &|_| None);
    let drifted: Vec<&str> = parts
        .nodes
        .iter()
        .filter(|n| n.drifted.is_some())
        .map(|n| n.claim.as_str())
        .collect();
    assert_eq!(drifted, ["old-template"]);
}

fn snapshot(
    pods: Vec<core::Pod>,
    nodes: Vec<core::Node>,
    claims: Vec<NodeClaim>,
    pdbs: Vec<PodDisruptionBudget>,
) -> Snapshot {
    let store = Store::new();
    store.reset(pods);
    store.reset(nodes);
    store.reset(claims);
    store.reset(pdbs);
    assert!(!store.is_synced(), "pools have not listed yet");
    store.reset(vec![pool()]);
    assert!(store.is_synced());
    store.read(Snapshot::clone)
}

/// The claims of the lost-claim tests: `ok` of pool `gpu`; `orphan`
/// of a deleted pool, on node `n-orphan` running `ml/train`; `invalid`
/// of a pool an upgrade made invalid (its template carries a label now
/// refused); `reserved` in a reservation the catalog does not list (the
/// first refresh after a start has not come, or it left).
fn lost_claims() -> Snapshot {
    let labels = json!({"spec": {
        "labels": {"team": "ml", l::NODEPOOL: "gone"},
        "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
        "resources": {"cpu": "3920m", "nvidia.com/gpu": "1", "pods": "58"},
    }});
    let mut orphan = claim("orphan", labels.clone());
    orphan.spec.node_pool = "gone".into();
    orphan.status = Some(crate::api::NodeClaimStatus {
        provider_id: Some("aws:///use1-az1/i-orphan".into()),
        node_name: Some("n-orphan".into()),
        ..Default::default()
    });
    let mut invalid = claim("invalid", labels.clone());
    invalid.spec.node_pool = "bad".into();
    let reserved = claim(
        "reserved",
        json!({"spec": {"capacityType": "reserved",
                        "labels": {l::CAPACITY_RESERVATION_ID: "cr-0gone"}}}),
    );
    let mut s = snapshot(
        vec![pod("train", 1, Some("n-orphan"), json!({}))],
        vec![node("n-orphan", "aws:///use1-az1/i-orphan", json!({}))],
        vec![claim("ok", json!({})), orphan, invalid, reserved],
        vec![],
    );
    let mut bad = pool();
    bad.metadata.name = Some("bad".into());
    bad.spec
        .template
        .metadata
        .labels
        .insert(l::INSTANCE_TYPE.into(), "p5.48xlarge".into());
    assert!(crate::cluster::Pool::from_api(&bad, Resources::new()).is_err());
    s.pools.insert("bad".into(), bad);
    s
}

#[test]
fn a_claim_whose_pool_or_offering_is_gone_stays_in_the_world_as_it_recorded_itself() {
    let s = lost_claims();
    let parts = world_parts(&s, catalog(), "us-east-1", t(0), DEFAULT_MAX_PODS);
    let mut claims: Vec<&str> = parts.nodes.iter().map(|n| n.claim.as_str()).collect();
    claims.sort();
    assert_eq!(claims, ["invalid", "ok", "orphan", "reserved"]);
    let orphan = parts.nodes.iter().find(|n| n.claim == "orphan").unwrap();
    assert_eq!(orphan.nodepool, "gone");
    assert_eq!(orphan.state.labels["team"], "ml");
    assert_eq!(orphan.state.taints.len(), 1);
    assert_eq!(orphan.state.allocatable.get(l::RESOURCE_GPU), 1);
    assert_eq!(orphan.pods.len(), 1, "its pods are joined as any node's");
    let reserved = parts.nodes.iter().find(|n| n.claim == "reserved").unwrap();
    assert!(
        reserved.state.allocatable.get(l::RESOURCE_GPU) > 0,
        "without a record, the instance type's shape"
    );
}

#[test]
fn a_spot_notice_on_a_claim_of_a_deleted_pool_is_acted_on() {
    let s = lost_claims();
    let parts = world_parts(&s, catalog(), "us-east-1", t(0), DEFAULT_MAX_PODS);
    let world = parts.world(catalog(), "us-east-1");
    let mut core = crate::core::Core::new(Default::default());
    for claim in ["orphan", "invalid", "reserved"] {
        let notice = crate::core::Notice::SpotInterruption {
            claim: claim.into(),
            deadline: t(120),
        };
        core.handle_notice(&notice, &world, t(0));
    }
    let actions = core.decide(&world, t(0));
    for claim in ["orphan", "invalid", "reserved"] {
        assert!(
            actions.iter().any(|a| matches!(a,
                crate::core::Action::Cordon { claim: c, .. } if c == claim)),
            "{claim} not cordoned: {actions:?}"
        );
    }
    assert!(actions.iter().any(|a| matches!(a,
        crate::core::Action::Evict { pod, .. } if pod == "ml/train")));
}

#[test]
fn a_claim_whose_reservation_left_the_catalog_still_counts_against_its_pools_limits() {
    // A pool of at most one node that has one, in a reservation the
    // catalog does not list: a pending pod gets no second node.
    let mut s = lost_claims();
    s.claims.retain(|name, _| name == "reserved");
    s.pools.get_mut("gpu").unwrap().spec.limits.insert(
        crate::api::nodepool::LIMIT_NODES.into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
    );
    // Two GPUs: more than the reserved g5.xlarge holds.
    let pending = PodInfo::from_k8s(
        &pod("wait", 2, None, json!({})),
        t(0),
        &mut Interners::default(),
    )
    .unwrap();
    s.pods.insert("ml/wait".into(), pending);
    let parts = world_parts(&s, catalog(), "us-east-1", t(0), DEFAULT_MAX_PODS);
    assert_eq!(parts.pending.len(), 1);
    let world = parts.world(catalog(), "us-east-1");
    let mut core = crate::core::Core::new(Default::default());
    let launched: usize = (0..5)
        .map(|k| {
            core.decide(&world, t(k))
                .iter()
                .filter(|a| matches!(a, crate::core::Action::Launch(_)))
                .count()
        })
        .sum();
    assert_eq!(launched, 0, "the pool's one node is the reserved claim's");
    let report = core.last_plan().expect("the pod was planned");
    assert_eq!(report.unschedulable.len(), 1);
    assert!(
        report.unschedulable[0].reason.contains("limit"),
        "{}",
        report.unschedulable[0].reason
    );
}

#[test]
fn only_unschedulable_accelerator_pods_are_pending_and_finished_pods_are_dropped() {
    let finished = pod("done", 1, None, json!({"status": {"phase": "Succeeded"}}));
    let s = snapshot(
        vec![
            pod("gpu", 1, None, json!({})),
            pod("cpu", 0, None, json!({})),
            pod(
                "mig",
                0,
                None,
                json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}]}}),
            ),
            pod("bound", 1, Some("n1"), json!({})),
            pod(
                "leaving",
                1,
                None,
                json!({"metadata": {"deletionTimestamp": "2026-01-05T00:00:00Z"}}),
            ),
            finished,
        ],
        vec![],
        vec![],
        vec![],
    );
    assert!(!s.pods.contains_key("ml/done"));
    let parts = world_parts(&s, catalog(), "us-east-1", t(0), DEFAULT_MAX_PODS);
    let names: Vec<&str> = parts.pending.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["ml/gpu", "ml/mig"]);
    assert!(parts.nodes.is_empty());
}

#[test]
fn pods_pinned_to_karpenter_pools_we_lack_are_left_to_karpenter() {
    let pinned = |name: &str, pool: &str| {
        pod(
            name,
            1,
            None,
            json!({"spec": {"nodeSelector": {"karpenter.sh/nodepool": pool}}}),
        )
    };
    let either = pod(
        "either",
        1,
        None,
        json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["karp"]}]},
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["ml"]}]}
        ]}}}}}),
    );
    let s = snapshot(
        vec![pinned("theirs", "karp"), pinned("ours", "gpu"), either],
        vec![],
        vec![],
        vec![],
    );
    let parts = world_parts(&s, catalog(), "us-east-1", t(0), DEFAULT_MAX_PODS);
    let names: Vec<&str> = parts.pending.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["ml/either", "ml/ours"]);
}

#[test]
fn a_claim_joins_its_node_and_bound_pods_with_pdbs_annotations_and_readiness() {
    let pid = format!("aws:///{}/i-0abc", zone());
    let ready_claim = claim(
        "gpu-1",
        json!({"status": {"providerID": pid, "conditions": [
            {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
             "lastTransitionTime": "2026-01-05T00:05:00Z"}]}}),
    );
    let in_flight = claim(
        "gpu-2",
        json!({"spec": {"expireAfter": "24h", "terminationGracePeriod": "1h"}}),
    );
    let leaving = claim(
        "gpu-3",
        json!({"metadata": {"deletionTimestamp": "2026-01-05T00:00:00Z"}}),
    );
    let s = snapshot(
        vec![
            pod(
                "train",
                1,
                Some("ip-1"),
                json!({"metadata": {"annotations": {
                    l::CHECKPOINT_COMPLETED: "2026-01-05T00:10:00Z",
                    l::DO_NOT_DISRUPT: "true"}},
                    "status": {"startTime": "2026-01-05T00:06:00Z"}}),
            ),
            pod("other", 0, Some("ip-1"), json!({})),
            pod(
                "karpenter",
                0,
                Some("ip-1"),
                json!({"metadata": {"annotations": {l::KARPENTER_DO_NOT_DISRUPT: "true"}}}),
            ),
            pod(
                "logs",
                0,
                Some("ip-1"),
                json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "logs", "uid": "u"}]}}),
            ),
            pod("elsewhere", 1, Some("ip-9"), json!({})),
        ],
        vec![node(
            "ip-1",
            &pid,
            json!({"metadata": {"annotations": {l::DO_NOT_DISRUPT: "true"}}}),
        )],
        vec![ready_claim, in_flight, leaving],
        vec![pdb("a", "nothing", 3), pdb("b", "other", 0)],
    );
    let parts = world_parts(&s, catalog(), "us-east-1", t(0), DEFAULT_MAX_PODS);
    assert_eq!(parts.nodes.len(), 3);
    let n = &parts.nodes[0];
    assert_eq!(n.claim, "gpu-1");
    assert_eq!(n.state.name, "ip-1");
    assert_eq!(n.ready_at, Some(t(300)));
    assert!(!n.state.in_flight && !n.state.unschedulable && n.do_not_disrupt);
    let pods: Vec<&str> = n.pods.iter().map(|b| b.pod.name.as_str()).collect();
    assert_eq!(
        pods,
        ["ml/karpenter", "ml/other", "ml/train"],
        "the daemonset pod is not a bound pod"
    );
    let train = &n.pods[2];
    assert!(train.do_not_disrupt);
    assert!(n.pods[0].do_not_disrupt, "Karpenter's annotation holds too");
    assert!(!n.pods[1].do_not_disrupt);
    let n = &parts.nodes[0];
    assert_eq!(train.checkpoint_completed, Some(t(600)));
    assert_eq!(train.started, Some(t(360)), "status.startTime");
    assert_eq!(n.pods[0].started, None, "not started yet");
    assert_eq!(train.pdb, None);
    assert_eq!(n.pods[1].pdb, Some(1));
    assert_eq!(parts.pdbs[1].name, "ml/b");
    assert_eq!(parts.pdbs[1].disruptions_allowed, 0);
    // Used counts every pod on the node, the daemonset's included.
    assert_eq!(n.state.used.get("cpu"), 4000);
    assert_eq!(n.state.used.get(l::RESOURCE_GPU), 1);
    let flight = &parts.nodes[1];
    assert!(flight.state.in_flight && flight.ready_at.is_none() && flight.pods.is_empty());
    assert_eq!(flight.launched_at, t(0));
    // Its lifetime is what its claim recorded, not the pool's (none).
    assert_eq!(flight.expire_after, Some(Duration::from_secs(24 * 3600)));
    assert_eq!(flight.termination_grace, Some(Duration::from_secs(3600)));
    assert_eq!(n.expire_after, None);
    assert!(
        parts.nodes[2].state.unschedulable,
        "a deleting claim takes no pods"
    );
    // The lifecycle's view of the deleting claim has no node, so no pods.
    let view = s.claim_view(&s.claims["gpu-3"]);
    assert!(view.node.is_none() && view.pods.is_empty());
}

#[test]
fn a_relist_replaces_the_kind_and_deletes_apply_one_by_one() {
    let store = Store::new();
    store.reset(vec![
        pod("a", 1, None, json!({})),
        pod("b", 1, None, json!({})),
    ]);
    store.apply(pod("c", 1, None, json!({})));
    store.delete(&pod("a", 1, None, json!({})));
    // A pod that finishes leaves the index on its update.
    store.apply(pod("b", 1, None, json!({"status": {"phase": "Failed"}})));
    assert_eq!(
        store.read(|s| s.pods.keys().cloned().collect::<Vec<_>>()),
        ["ml/c"]
    );
    store.reset(vec![pod("d", 1, None, json!({}))]);
    assert_eq!(
        store.read(|s| s.pods.keys().cloned().collect::<Vec<_>>()),
        ["ml/d"]
    );
}

#[test]
fn a_pod_with_unreadable_annotations_is_kept_protected_and_reported_once() {
    let pid = format!("aws:///{}/i-0abc", zone());
    let ready = claim(
        "gpu-1",
        json!({"status": {"providerID": pid, "conditions": [
            {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
             "lastTransitionTime": "2026-01-05T00:05:00Z"}]}}),
    );
    let bad_gang = json!({"metadata": {"annotations": {
        l::POD_GROUP: "g", l::POD_GROUP_SIZE: "four"}}});
    let kueue_without_count = json!({"metadata": {"labels": {l::KUEUE_GROUP: "g2"},
                            "annotations": {l::CHECKPOINT_INTERVAL: "soon"}}});
    let store = Store::new();
    store.reset(vec![
        pod("bound", 1, Some("ip-1"), bad_gang),
        pod("waiting", 1, None, kueue_without_count),
    ]);
    store.reset(vec![node("ip-1", &pid, json!({}))]);
    store.reset(vec![ready]);
    store.reset(Vec::<PodDisruptionBudget>::new());
    store.reset(vec![pool()]);
    let s = store.read(Snapshot::clone);
    assert!(s.pods["ml/bound"].unreadable[0].contains(l::POD_GROUP_SIZE));
    let parts = world_parts(&s, catalog(), "us-east-1", t(0), DEFAULT_MAX_PODS);
    // The bound pod still holds its node, which consolidation must keep.
    let bound = &parts.nodes[0].pods;
    assert_eq!(bound.len(), 1);
    assert_eq!(bound[0].pod.name, "ml/bound");
    assert!(bound[0].do_not_disrupt && bound[0].pod.group.is_none());
    assert_eq!(parts.nodes[0].state.used.get(l::RESOURCE_GPU), 1);
    // The pending one is not planned as though what cannot be read
    // were absent: it carries the problems, and the planner reports it.
    assert_eq!(parts.pending.len(), 1);
    assert_eq!(parts.pending[0].name, "ml/waiting");
    assert_eq!(parts.pending[0].not_placeable.len(), 2);
    // Each problem is reported once, and again only when it changes.
    let mut reports = UnreadableReports::default();
    let first = reports.fresh(&s);
    assert_eq!(
        first.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        ["ml/bound", "ml/waiting"]
    );
    assert_eq!(first[1].1.len(), 2, "{:?}", first[1].1);
    assert!(reports.fresh(&s).is_empty());
    store.apply(pod("bound", 1, Some("ip-1"), json!({})));
    assert!(reports.fresh(&store.read(Snapshot::clone)).is_empty());
    store.apply(pod(
        "bound",
        1,
        Some("ip-1"),
        json!({"metadata": {"annotations": {l::CHECKPOINT_INTERVAL: "soon"}}}),
    ));
    let again = reports.fresh(&store.read(Snapshot::clone));
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].0, "ml/bound");
}

#[test]
fn pods_of_one_workload_share_one_shape_and_plan_as_they_read() {
    let labelled = |extra: serde_json::Value| {
        let mut v = json!({"metadata": {"labels": {"app": "x"}}});
        merge(&mut v, extra);
        v
    };
    let a = pod("a", 1, Some("n1"), labelled(json!({})));
    // A StatefulSet's pods differ in a label, not in their shape.
    let own = json!({"metadata": {"labels": {"statefulset.kubernetes.io/pod-name": "b"}}});
    let b = pod("b", 1, Some("n1"), labelled(own));
    let bigger = pod("c", 2, None, labelled(json!({})));
    let every = json!({"metadata": {"annotations": {l::CHECKPOINT_INTERVAL: "30m"}}});
    let checkpointed = pod("d", 1, Some("n2"), labelled(every));
    let store = Store::new();
    store.reset(vec![
        a.clone(),
        b.clone(),
        bigger.clone(),
        checkpointed.clone(),
    ]);
    let s = store.read(Snapshot::clone);
    let [pa, pb, pc, pd] = ["a", "b", "c", "d"].map(|n| &s.pods[&format!("ml/{n}")]);
    assert!(Arc::ptr_eq(&pa.shape, &pb.shape));
    assert!(!Arc::ptr_eq(&pa.shape, &pc.shape), "other requests");
    assert!(!Arc::ptr_eq(&pa.shape, &pd.shape), "other annotations");
    assert!(Arc::ptr_eq(&pa.namespace, &pc.namespace));
    assert_eq!((pa.labels.len(), pb.labels.len()), (1, 2));
    assert!(Arc::ptr_eq(&pa.labels[0].1, &pb.labels[0].1), "app=x, once");
    let node = |p: &PodInfo| p.node_name.clone().unwrap();
    assert!(Arc::ptr_eq(&node(pa), &node(pb)));
    assert_eq!(&*node(pd), "n2");
    // The planner reads each pod as the direct conversion does.
    for (info, k8s) in [(pa, &a), (pb, &b), (pc, &bigger), (pd, &checkpointed)] {
        assert_eq!(
            info.planner_pod(),
            Pod::from_k8s(k8s, &BTreeMap::new()).unwrap()
        );
    }
    assert_eq!(store.interners().shapes(), 3);
    // Shapes no pod holds go with the next relist.
    drop(s);
    store.reset(vec![a]);
    assert_eq!(store.interners().shapes(), 1);
}

#[test]
fn stored_claims_carry_no_managed_fields() {
    let mut c = claim("gpu-1", json!({}));
    c.metadata.managed_fields = Some(vec![Default::default()]);
    let store = Store::new();
    store.apply(c);
    assert!(store.read(|s| s.claims["gpu-1"].metadata.managed_fields.is_none()));
}
