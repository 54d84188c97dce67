//! Tests of [`super::Core`].

use super::super::interruption::fixtures::launches;
use super::*;
use crate::api::labels as l;
use crate::api::{NodePoolSpec, PrewarmWindow, Taint, TaintEffect};
use crate::catalog::{CapacityType, Catalog};
use crate::cluster::resources::{CPU, MEMORY};
use crate::cluster::Toleration;
use chrono::TimeZone;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::sync::OnceLock;

fn catalog() -> &'static Catalog {
    static C: OnceLock<Catalog> = OnceLock::new();
    C.get_or_init(|| Catalog::embedded().unwrap())
}

fn t(s: i64) -> Time {
    // Monday 2026-01-05 00:00 UTC.
    chrono::Utc.timestamp_opt(1_767_571_200 + s, 0).unwrap()
}

fn gpu_pool(edit: impl FnOnce(&mut NodePoolSpec)) -> NodePool {
    let mut spec = NodePoolSpec {
        capacity_types: vec![CapacityType::Spot, CapacityType::OnDemand],
        ..Default::default()
    };
    spec.template.spec.taints = vec![Taint::new(l::TAINT_GPU, "", TaintEffect::NoSchedule)];
    spec.template.spec.requirements = vec![crate::api::Requirement::new(
        l::INSTANCE_FAMILY,
        crate::api::Operator::In,
        &["g5", "g6"],
    )];
    edit(&mut spec);
    NodePool::new("gpu", spec)
}

fn gpu_pod(name: &str) -> Pod {
    let mut p = Pod::new(
        name,
        Resources::new()
            .with(CPU, 2000)
            .with(MEMORY, 8 << 30)
            .with(l::RESOURCE_GPU, 1),
    );
    p.tolerations.push(Toleration::exists(l::TAINT_GPU));
    p
}

fn world<'a>(pools: &'a [NodePool], pending: &'a [Pod], nodes: &'a [ManagedNode]) -> World<'a> {
    World {
        nodes_revision: 0,
        catalog: catalog(),
        region: "us-east-1",
        pools,
        pending,
        nodes,
        pdbs: &[],
    }
}

#[test]
fn a_pending_pod_is_launched_for_once_the_batch_closes_and_only_once() {
    let pools = [gpu_pool(|_| {})];
    let pending = [gpu_pod("ml/a")];
    let mut core = Core::new(Config::default());
    assert!(launches(&core.decide(&world(&pools, &pending, &[]), t(0))).is_empty());
    assert_eq!(
        core.next_deadline(&world(&pools, &pending, &[]), t(0)),
        Some(t(1))
    );
    let actions = core.decide(&world(&pools, &pending, &[]), t(1));
    let l = launches(&actions);
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].pods, ["ml/a"]);
    // The claim is in flight: the same pending pod launches nothing more.
    let node = ManagedNode::launched(l[0], &world(&pools, &pending, &[]), t(1)).unwrap();
    assert!(node.state.in_flight);
    assert_eq!(node.state.labels[l::NODEPOOL], "gpu");
    let nodes = [node];
    core.batcher.trigger(t(2));
    for s in 2..5 {
        assert!(launches(&core.decide(&world(&pools, &pending, &nodes), t(s))).is_empty());
    }
}

/// A core that launched a node for `pending` at t(1) and saw it in
/// flight at t(2), with that node.
fn launched_for(pools: &[NodePool], pending: &[Pod]) -> (Core, ManagedNode) {
    let mut core = Core::new(Config::default());
    core.decide(&world(pools, pending, &[]), t(0));
    let actions = core.decide(&world(pools, pending, &[]), t(1));
    let node =
        ManagedNode::launched(launches(&actions)[0], &world(pools, pending, &[]), t(1)).unwrap();
    let nodes = [node];
    assert!(launches(&core.decide(&world(pools, pending, &nodes), t(2))).is_empty());
    let [node] = nodes;
    (core, node)
}

/// The pods of the launches over t(3)..t(10) with this world.
fn relaunched(core: &mut Core, w: &World) -> Vec<Vec<String>> {
    (3..10)
        .flat_map(|s| {
            launches(&core.decide(w, t(s)))
                .into_iter()
                .map(|c| c.pods.clone())
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn a_pending_pod_whose_node_is_lost_in_flight_is_launched_for_again() {
    let pools = [gpu_pool(|_| {})];
    let pending = [gpu_pod("ml/a")];
    let (mut core, _) = launched_for(&pools, &pending);
    // The claim is reclaimed before it is Ready: the pod is still pending
    // under the same name, and nothing else changes in the world.
    let again = relaunched(&mut core, &world(&pools, &pending, &[]));
    assert_eq!(again, [["ml/a"]]);
}

#[test]
fn a_pending_pod_whose_node_gets_a_spot_notice_in_flight_is_launched_for_again() {
    let pools = [gpu_pool(|_| {})];
    let pending = [gpu_pod("ml/a")];
    let (mut core, node) = launched_for(&pools, &pending);
    let notice = Notice::SpotInterruption {
        claim: node.claim.clone(),
        deadline: t(122),
    };
    let nodes = [node];
    core.handle_notice(&notice, &world(&pools, &pending, &nodes), t(2));
    let again = relaunched(&mut core, &world(&pools, &pending, &nodes));
    assert_eq!(again, [["ml/a"]]);
}

#[test]
fn a_pool_marked_not_ready_is_not_planned_and_the_pods_reason_says_why() {
    let mut held = gpu_pool(|_| {});
    held.status = Some(crate::api::NodePoolStatus {
        conditions: vec![crate::api::Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: "NodeClassNotReady".into(),
            message: "launches nothing: EC2NodeClass default does not exist".into(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
            observed_generation: None,
        }],
        ..Default::default()
    });
    let pending = [gpu_pod("ml/a")];
    let mut core = Core::new(Config::default());
    for s in 0..3 {
        let pools = [held.clone()];
        assert!(launches(&core.decide(&world(&pools, &pending, &[]), t(s))).is_empty());
    }
    let report = core.last_plan().expect("planned");
    assert_eq!(
        report.unschedulable[0].reason,
        "NodePool gpu launches nothing: EC2NodeClass default does not exist"
    );
    // Ready again: planned.
    held.status = None;
    let pools = [held];
    let launched =
        (3..6).any(|s| !launches(&core.decide(&world(&pools, &pending, &[]), t(s))).is_empty());
    assert!(launched);
}

#[test]
fn a_tagged_core_names_the_claims_it_provisions_with_its_tag() {
    let pools = [gpu_pool(|_| {})];
    let pending = [gpu_pod("ml/a")];
    let name = |mut core: Core| {
        core.decide(&world(&pools, &pending, &[]), t(0));
        let actions = core.decide(&world(&pools, &pending, &[]), t(1));
        launches(&actions)[0].claim.clone()
    };
    assert_eq!(name(Core::new(Config::default())), "gpu-000001");
    assert_eq!(
        name(Core::new(Config::default()).with_claim_tag("t8d6o0")),
        "gpu-000001-t8d6o0"
    );
}

#[test]
fn the_last_plan_reports_unplaceable_pods_and_its_solve_time_by_the_given_clock() {
    fn clock() -> f64 {
        // Each reading 0.25 s after the last: the planner reads the clock
        // for its time limit too, so the solve takes a whole number of
        // ticks, at least one.
        use std::sync::atomic::{AtomicU32, Ordering};
        static TICKS: AtomicU32 = AtomicU32::new(0);
        f64::from(TICKS.fetch_add(1, Ordering::Relaxed)) * 0.25
    }
    let pools = [gpu_pool(|_| {})];
    let mut huge = gpu_pod("ml/huge");
    huge.requests = huge.requests.clone().with(l::RESOURCE_GPU, 1000);
    let pending = [gpu_pod("ml/a"), huge];
    let mut core = Core::new(Config::default()).with_solve_clock(clock);
    assert_eq!(core.last_plan(), None);
    core.decide(&world(&pools, &pending, &[]), t(0));
    let actions = core.decide(&world(&pools, &pending, &[]), t(1));
    assert_eq!(launches(&actions).len(), 1);
    let report = core.last_plan().expect("a plan was made");
    assert_eq!(report.at, t(1));
    let pods: Vec<&str> = report
        .unschedulable
        .iter()
        .map(|u| u.pod.as_str())
        .collect();
    assert_eq!(pods, ["ml/huge"]);
    assert!(!report.unschedulable[0].reason.is_empty());
    let ticks = report.solve_seconds / 0.25;
    assert!(
        ticks >= 1.0 && ticks.fract() == 0.0,
        "{} s is not whole ticks of the given clock",
        report.solve_seconds
    );
}

/// Decides for `pending` every 30 s for ten minutes with `catalog`,
/// checks that nothing is ever launched, and returns why the last plan
/// could not place the first pod.
fn launches_nothing_round_after_round(
    pools: &[NodePool],
    pending: &[Pod],
    catalog: &Catalog,
) -> String {
    let w = World {
        catalog,
        ..world(pools, pending, &[])
    };
    let mut core = Core::new(Config::default());
    for k in 0..20 {
        let acts = core.decide(&w, t(k * 30));
        assert!(launches(&acts).is_empty(), "round {k}: {acts:?}");
        core.batcher.trigger(t(k * 30));
    }
    let report = core.last_plan().expect("the pods were planned");
    assert_eq!(report.unschedulable[0].pod, pending[0].name);
    report.unschedulable[0].reason.clone()
}

#[test]
fn a_block_that_has_ended_or_an_efa_request_no_type_meets_launches_nothing_and_says_why() {
    let block = crate::catalog::Reservation {
        id: "cr-ended".into(),
        kind: crate::catalog::ReservationKind::CapacityBlock,
        instance_type: "g5.xlarge".into(),
        region: "us-east-1".into(),
        zone_id: "use1-az4".into(),
        total: 4,
        available: 4,
        start: Some(t(-86_400)),
        end: Some(t(-60)),
        price_per_hour: 0.0,
    };
    let ended = catalog()
        .clone()
        .with_reservations(&[block], t(0), chrono::TimeDelta::minutes(40));
    let reserved_only = [gpu_pool(|s| {
        s.capacity_types = vec![CapacityType::Reserved]
    })];
    let why = launches_nothing_round_after_round(&reserved_only, &[gpu_pod("ml/a")], &ended);
    assert!(why.contains("capacityReservationSelectorTerms"), "{why}");

    let mut efa = gpu_pod("ml/allreduce");
    efa.requests = efa.requests.clone().with(l::RESOURCE_EFA, 1);
    let small = [gpu_pool(|s| {
        s.template.spec.requirements = vec![crate::api::Requirement::new(
            l::INSTANCE_TYPE,
            crate::api::Operator::In,
            &["g5.xlarge", "g6.xlarge"],
        )]
    })];
    let why = launches_nothing_round_after_round(&small, &[efa], catalog());
    assert!(why.contains("Elastic Fabric Adapter"), "{why}");
}

#[test]
fn an_efa_gang_whose_member_fails_to_launch_releases_the_others_and_is_planned_again_whole() {
    let pools = [gpu_pool(|s| {
        s.capacity_types = vec![CapacityType::OnDemand];
        s.template.spec.requirements = vec![crate::api::Requirement::new(
            l::INSTANCE_FAMILY,
            crate::api::Operator::In,
            &["p4d", "p5"],
        )];
    })];
    let member = |name: &str| {
        let mut p = gpu_pod(name);
        p.requests = p
            .requests
            .clone()
            .with(l::RESOURCE_GPU, 8)
            .with(l::RESOURCE_EFA, 1);
        p.group = Some(crate::cluster::GroupRef {
            name: "ml/allreduce".into(),
            min_member: 2,
        });
        p
    };
    let pending = [member("ml/w-0"), member("ml/w-1")];
    let mut core = Core::new(Config::default());
    core.decide(&world(&pools, &pending, &[]), t(0));
    let first = core.decide(&world(&pools, &pending, &[]), t(1));
    let reqs = launches(&first);
    assert_eq!(reqs.len(), 2, "{first:?}");
    let w = world(&pools, &pending, &[]);
    let nodes: Vec<ManagedNode> = reqs
        .iter()
        .map(|r| ManagedNode::launched(r, &w, t(1)).unwrap())
        .collect();
    // Both in flight: nothing to do.
    let acts = core.decide(&world(&pools, &pending, &nodes), t(2));
    assert!(acts.is_empty(), "{acts:?}");
    // The first member's launch fails for lack of capacity: its claim
    // is deleted and the core told.
    let failed = reqs[0].offering.clone();
    let left = [nodes[1].clone()];
    let w = world(&pools, &pending, &left);
    core.handle_notice(
        &Notice::InsufficientCapacity {
            offering: failed.clone(),
        },
        &w,
        t(3),
    );
    let acts = core.decide(&w, t(3));
    assert!(
        acts.iter().any(|a| matches!(a,
            Action::Delete { claim, reason: crate::core::DisruptionReason::GangLaunchFailed }
                if *claim == nodes[1].claim)),
        "the other member's node is released: {acts:?}"
    );
    // The gang is planned again whole, away from the offering that failed.
    let again: Vec<ClaimRequest> = (3..6)
        .flat_map(|k| {
            let acts = core.decide(&world(&pools, &pending, &left), t(k));
            launches(&acts).into_iter().cloned().collect::<Vec<_>>()
        })
        .collect();
    let pods: BTreeSet<&str> = again
        .iter()
        .flat_map(|r| r.pods.iter().map(String::as_str))
        .collect();
    assert_eq!(pods, BTreeSet::from(["ml/w-0", "ml/w-1"]), "{again:?}");
    assert!(again.iter().all(|r| r.offering != failed), "{again:?}");
    let places: BTreeSet<(&str, &str)> = again
        .iter()
        .map(|r| (r.offering.zone.as_str(), r.offering.instance_type.as_str()))
        .collect();
    assert_eq!(places.len(), 1, "one zone and type: {again:?}");
}

#[test]
fn a_node_in_a_block_ending_soon_stays_in_the_world_and_is_drained_before_the_end() {
    let zone = catalog()
        .offerings_of("us-east-1", "g5.xlarge")
        .next()
        .unwrap()
        .zone_id
        .clone();
    let block = crate::catalog::Reservation {
        id: "cr-1".into(),
        kind: crate::catalog::ReservationKind::CapacityBlock,
        instance_type: "g5.xlarge".into(),
        region: "us-east-1".into(),
        zone_id: zone.clone(),
        total: 1,
        available: 0,
        start: Some(t(-86_400)),
        end: Some(t(3600)),
        price_per_hour: 0.0,
    };
    // Within the lead of its end: no longer offered, still known.
    let lead = chrono::TimeDelta::minutes(40);
    let reserved = catalog()
        .clone()
        .with_reservations(std::slice::from_ref(&block), t(1200), lead);
    assert!(reserved.offerings().iter().all(|o| o.reservation.is_none()));
    let pools = [gpu_pool(|s| {
        s.capacity_types = vec![CapacityType::Reserved, CapacityType::OnDemand]
    })];
    let w = World {
        catalog: &reserved,
        ..world(&pools, &[], &[])
    };
    let req = ClaimRequest {
        cluster_placement: false,
        claim: "gpu-000001".into(),
        nodepool: "gpu".into(),
        offering: OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone,
            capacity_type: CapacityType::Reserved,
        },
        price_per_hour: 0.0,
        pods: vec![],
        prewarm_window: None,
        reservation: Some("cr-1".into()),
    };
    let mut node = ManagedNode::launched(&req, &w, t(0)).expect("still described");
    assert_eq!(node.state.labels[l::CAPACITY_RESERVATION_ID], "cr-1");
    node.ready_at = Some(t(100));
    node.state.in_flight = false;
    let mut train = gpu_pod("ml/train");
    train.checkpoints = true;
    node.pods = vec![crate::core::BoundPod {
        pod: train,
        ..crate::core::interruption::fixtures::pod("train")
    }];
    let nodes = [node];
    let w = World {
        catalog: &reserved,
        ..world(&pools, &[], &nodes)
    };
    let mut core = Core::new(Config::default());
    assert_eq!(core.next_deadline(&w, t(1000)), Some(t(3600 - 2400)));
    let acts = core.decide(&w, t(1200));
    assert!(
        acts.iter()
            .any(|a| matches!(a, Action::Cordon { claim, .. } if claim == "gpu-000001")),
        "{acts:?}"
    );
    // Its pod, asked to checkpoint, is planned again as soon as the
    // batch closes, elsewhere, long before the end.
    let launched = (1..=120).any(|k| {
        core.decide(&w, t(1200 + k)).iter().any(
            |a| matches!(a, Action::Launch(r) if r.reservation.is_none() && r.pods == ["ml/train"]),
        )
    });
    assert!(launched);
}

/// The GPU pool allowing `capacity_types`, with an "office" window of 8
/// GPUs at 08:00 Berlin on weekdays.
fn office_pool(capacity_types: Vec<CapacityType>) -> NodePool {
    gpu_pool(|s| {
        s.capacity_types = capacity_types;
        s.prewarm = vec![PrewarmWindow {
            name: "office".into(),
            schedule: "0 8 * * 1-5".into(),
            time_zone: "Europe/Berlin".into(),
            duration: "10h".into(),
            capacity: [(l::RESOURCE_GPU.to_string(), Quantity("8".into()))].into(),
        }];
    })
}

#[test]
fn a_later_namespace_is_planned_although_earlier_pods_fill_every_batch_and_never_fit() {
    let pools = [gpu_pool(|_| {})];
    // Five pods of namespace `a-team` that no offering can hold (and
    // sort first), one of `b-team` that fits; plans take three pods.
    let mut pending: Vec<Pod> = (0..5)
        .map(|i| {
            let mut p = gpu_pod(&format!("a-team/huge-{i}"));
            p.requests.set(l::RESOURCE_GPU, 1000);
            p
        })
        .collect();
    pending.push(gpu_pod("b-team/train"));
    let mut core = Core::new(Config {
        max_batch_pods: 3,
        ..Config::default()
    });
    let mut planned = None;
    for s in 0..30 {
        // What the driver does each round: cap, then decide.
        let (kept, _) = core.cap_batch(pending.clone());
        let actions = core.decide(&world(&pools, &kept, &[]), t(s));
        if launches(&actions)
            .iter()
            .any(|c| c.pods.iter().any(|p| p == "b-team/train"))
        {
            planned = Some(s);
            break;
        }
    }
    let at = planned.expect("b-team/train is planned");
    assert!(at <= 5, "planned only at {at} s");
}

#[test]
fn a_prewarm_window_launches_its_capacity_before_it_opens_and_not_twice() {
    let pools = [office_pool(vec![
        CapacityType::Spot,
        CapacityType::OnDemand,
    ])];
    let mut core = Core::new(Config::default());
    // Monday 06:00 UTC is 07:00 in Berlin: an hour early, nothing yet.
    let early = t(6 * 3600);
    assert!(launches(&core.decide(&world(&pools, &[], &[]), early)).is_empty());
    // Two minutes before 08:00 Berlin is within any family's lead time.
    let lead = core.latency.lead_for_pool(&pools[0], catalog());
    assert!(lead > std::time::Duration::from_secs(120));
    let warm = t(7 * 3600 - 120);
    core.decide(&world(&pools, &[], &[]), warm);
    let actions = core.decide(
        &world(&pools, &[], &[]),
        warm + chrono::Duration::seconds(1),
    );
    let l = launches(&actions);
    assert!(!l.is_empty());
    assert!(l
        .iter()
        .all(|c| c.prewarm_window.as_deref() == Some("office")));
    let gpus: u32 = l
        .iter()
        .map(|c| {
            catalog()
                .instance_type(&c.offering.instance_type)
                .unwrap()
                .accelerator
                .as_ref()
                .unwrap()
                .count
        })
        .sum();
    assert!(gpus >= 8, "{gpus} GPUs launched");
    // Once launched, the window's capacity is held: nothing more.
    let w = world(&pools, &[], &[]);
    let nodes: Vec<ManagedNode> = l
        .iter()
        .map(|c| ManagedNode::launched(c, &w, warm).unwrap())
        .collect();
    for s in 2..6 {
        let at = warm + chrono::Duration::seconds(s);
        assert!(launches(&core.decide(&world(&pools, &[], &nodes), at)).is_empty());
    }
}

/// The claims the core launches for the "office" window (8 GPUs at
/// 08:00 Berlin) of a pool allowing `capacity_types`, two minutes before
/// it opens, given the pool's `nodes`.
fn window_launches(
    capacity_types: Vec<CapacityType>,
    nodes: &[ManagedNode],
) -> (Vec<ClaimRequest>, Vec<NodePool>) {
    let pools = vec![office_pool(capacity_types)];
    let mut core = Core::new(Config::default());
    let warm = t(7 * 3600 - 120);
    core.decide(&world(&pools, &[], nodes), warm);
    let actions = core.decide(
        &world(&pools, &[], nodes),
        warm + chrono::Duration::seconds(1),
    );
    let claims = launches(&actions).into_iter().cloned().collect();
    (claims, pools)
}

#[test]
fn a_window_is_held_off_spot_when_its_pool_may_launch_on_demand() {
    let both = || vec![CapacityType::Spot, CapacityType::OnDemand];
    let (claims, pools) = window_launches(both(), &[]);
    assert!(!claims.is_empty());
    assert!(
        claims
            .iter()
            .all(|c| c.offering.capacity_type == CapacityType::OnDemand),
        "{:?}",
        claims.iter().map(|c| &c.offering).collect::<Vec<_>>()
    );
    let w = world(&pools, &[], &[]);
    let held: Vec<ManagedNode> = claims
        .iter()
        .map(|c| ManagedNode::launched(c, &w, t(7 * 3600 - 120)).unwrap())
        .collect();
    // Held on on-demand nodes, the window launches nothing more; on
    // spot nodes, which a reclaim can take just before it opens, it
    // launches its capacity again.
    assert!(window_launches(both(), &held).0.is_empty());
    let mut on_spot = held.clone();
    for n in &mut on_spot {
        n.offering.capacity_type = CapacityType::Spot;
        n.state
            .labels
            .insert(l::CAPACITY_TYPE.into(), CapacityType::Spot.as_str().into());
    }
    assert!(!window_launches(both(), &on_spot).0.is_empty());
    // A pool that may not launch on-demand holds its window on spot:
    // once launched, nothing more.
    let (claims, pools) = window_launches(vec![CapacityType::Spot], &[]);
    assert!(!claims.is_empty());
    assert!(claims
        .iter()
        .all(|c| c.offering.capacity_type == CapacityType::Spot));
    let w = world(&pools, &[], &[]);
    let held: Vec<ManagedNode> = claims
        .iter()
        .map(|c| ManagedNode::launched(c, &w, t(7 * 3600 - 120)).unwrap())
        .collect();
    assert!(window_launches(vec![CapacityType::Spot], &held)
        .0
        .is_empty());
    // Nor does a pool of spot and reserved capacity (a reservation can
    // be used up) hold its windows off spot.
    let spot_and_reserved = office_pool(vec![CapacityType::Spot, CapacityType::Reserved]);
    assert!(prewarm::holds_on_spot(&spot_and_reserved));
    assert!(!prewarm::holds_on_spot(&office_pool(both())));
}

/// A spot notice on `gpu-1` at 1000 (due at 1120), and the decisions
/// then.
fn spot_notice_on_gpu_1(core: &mut Core, w: &World) -> Vec<Action> {
    let notice = Notice::SpotInterruption {
        claim: "gpu-1".into(),
        deadline: t(1000 + 120),
    };
    core.handle_notice(&notice, w, t(1000));
    core.decide(w, t(1000))
}

#[test]
fn a_notice_on_one_gang_member_replans_the_gang_whole_reusing_the_node_that_stays() {
    let pools = [gpu_pool(|_| {})];
    let mut core = Core::new(Config::default());
    let w0 = world(&pools, &[], &[]);
    let member = |name: &str| {
        let mut p = gpu_pod(name);
        p.checkpoints = true;
        p.group = Some(crate::cluster::GroupRef {
            name: "ml/train".into(),
            min_member: 2,
        });
        super::super::BoundPod {
            pod: p,
            do_not_disrupt: false,
            checkpoint_completed: None,
            pdb: None,
            placeholder: false,
            started: None,
        }
    };
    let nodes: Vec<ManagedNode> = ["gpu-1", "gpu-2"]
        .iter()
        .zip(["ml/a", "ml/b"])
        .map(|(claim, pod)| {
            let req = ClaimRequest {
                cluster_placement: false,
                claim: claim.to_string(),
                nodepool: "gpu".into(),
                // The member that stays is on a bigger on-demand node,
                // with room for the whole gang once b's counts.
                offering: OfferingKey {
                    instance_type: if *claim == "gpu-1" {
                        "g5.xlarge".into()
                    } else {
                        "g5.12xlarge".into()
                    },
                    zone: "use1-az1".into(),
                    capacity_type: if *claim == "gpu-1" {
                        CapacityType::Spot
                    } else {
                        CapacityType::OnDemand
                    },
                },
                price_per_hour: 0.5,
                pods: vec![],
                prewarm_window: None,
                reservation: None,
            };
            let mut n = ManagedNode::launched(&req, &w0, t(0)).unwrap();
            n.ready_at = Some(t(300));
            n.state.in_flight = false;
            let m = member(pod);
            n.state.used.add(&m.pod.requests);
            n.pods.push(m);
            if *claim == "gpu-2" {
                // Another job's two GPUs: one GPU is free besides b's.
                let mut other = member("ml/other");
                other.pod.group = None;
                other.pod.requests.set(l::RESOURCE_GPU, 2);
                n.state.used.add(&other.pod.requests);
                n.pods.push(other);
            }
            n
        })
        .collect();
    let w = world(&pools, &[], &nodes);
    let first = spot_notice_on_gpu_1(&mut core, &w);
    let asked: Vec<&str> = first
        .iter()
        .filter_map(|a| match a {
            Action::RequestCheckpoint { pod, .. } => Some(pod.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(asked, ["ml/a", "ml/b"]);
    // The gang is demand whole, and the room its member on the node
    // that stays holds counts for it: that node has room for the whole
    // gang, so nothing is launched (without that room, both members
    // would get new nodes).
    let then: Vec<ClaimRequest> = (1..5)
        .flat_map(|s| {
            launches(&core.decide(&w, t(1000 + s)))
                .into_iter()
                .cloned()
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(then, []);
    assert!(core.last_plan().is_some(), "the gang was planned");
}

#[test]
fn learned_rates_start_from_the_prior_of_the_catalog_in_hand_not_the_first_one_seen() {
    let core = {
        let mut c = Core::new(Config::default());
        c.estimator.observe_interruption(&OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "use1-az1".into(),
            capacity_type: CapacityType::Spot,
        });
        c
    };
    let key = core.estimator.pools().next().unwrap().clone();
    let rate_with = |catalog: &Catalog| {
        let w = World {
            catalog,
            ..world(&[], &[], &[])
        };
        core.learned_rates(&w)[&key]
    };
    let calibrated = catalog().clone();
    let _ = rate_with(&calibrated);
    // The catalog is refreshed under another market model: the prior,
    // and so the learned rate, follow it.
    let advisor = calibrated.with_market(crate::catalog::market::MarketModel::Advisor);
    let prior = super::super::estimator::prior_rate(&advisor, "us-east-1", &key);
    let expected = core.estimator.posterior_from(&key, prior).mean();
    assert_eq!(rate_with(&advisor), expected);
    assert_ne!(rate_with(catalog()), expected);
}

/// A spot g5.xlarge `gpu-1` of pool `gpu`, launched at 0 and Ready at
/// 300 s, running `pod` since then.
fn ready_spot_node(pools: &[NodePool], pod: Pod, started: Option<Time>) -> ManagedNode {
    let req = ClaimRequest {
        cluster_placement: false,
        claim: "gpu-1".into(),
        nodepool: "gpu".into(),
        offering: OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "use1-az1".into(),
            capacity_type: CapacityType::Spot,
        },
        price_per_hour: 0.5,
        pods: vec![],
        prewarm_window: None,
        reservation: None,
    };
    let mut node = ManagedNode::launched(&req, &world(pools, &[], &[]), t(0)).unwrap();
    node.ready_at = Some(t(300));
    node.state.in_flight = false;
    node.pods.push(super::super::BoundPod {
        pod,
        do_not_disrupt: false,
        checkpoint_completed: None,
        started,
        pdb: None,
        placeholder: false,
    });
    node
}

#[test]
fn a_big_checkpointing_pod_on_a_young_spot_node_is_asked_to_checkpoint_unless_cadence_is_off() {
    let pools = [gpu_pool(|_| {})];
    let mut pod = gpu_pod("ml/a");
    pod.checkpoints = true;
    pod.checkpoint_interval_s = Some(3600.0);
    // Five minutes to write: more than a spot notice leaves.
    pod.checkpoint_duration_s = Some(300.0);
    let node = ready_spot_node(&pools, pod, Some(t(300)));
    let nodes = [node];
    let w = world(&pools, &[], &nodes);
    let asked = |actions: &[Action]| {
        actions
            .iter()
            .any(|a| matches!(a, Action::RequestCheckpoint { pod, .. } if pod == "ml/a"))
    };
    // Steps from deadline to deadline, as the drivers do, for the
    // pod's own hour: when is it first asked?
    let first_request = |config: Config| {
        let mut core = Core::new(config);
        let mut at = t(301);
        while at < t(300 + 3600) {
            if asked(&core.decide(&w, at)) {
                return Some(at);
            }
            at = core.next_deadline(&w, at)?;
        }
        None
    };
    let at = first_request(Config::default()).expect("asked within its own interval");
    assert!(at > t(301), "not at once: there is nothing to save yet");
    let off = Config {
        checkpoint_cadence: false,
        ..Config::default()
    };
    assert_eq!(first_request(off), None);
}

#[test]
fn an_interruption_cordons_the_node_and_launches_a_replacement_elsewhere() {
    let pools = [gpu_pool(|_| {})];
    let mut core = Core::new(Config::default());
    let node = ready_spot_node(&pools, gpu_pod("ml/a"), None);
    let nodes = [node];
    let w = world(&pools, &[], &nodes);
    let first = spot_notice_on_gpu_1(&mut core, &w);
    assert!(first
        .iter()
        .any(|a| matches!(a, Action::Cordon { claim, .. } if claim == "gpu-1")));
    // The pod did not opt in to checkpoints: evicted at once, it is
    // pending again, and the batch opened for it closes a second later.
    assert!(first
        .iter()
        .any(|a| matches!(a, Action::Evict { pod, .. } if pod == "ml/a")));
    let mut cordoned = nodes[0].clone();
    cordoned.pods.clear();
    cordoned.state.unschedulable = true;
    let pending = [gpu_pod("ml/a")];
    let after = [cordoned];
    let w = world(&pools, &pending, &after);
    let then = core.decide(&w, t(1001));
    let l = launches(&then);
    assert_eq!(l.len(), 1, "{then:?}");
    assert_eq!(l[0].pods, ["ml/a"]);
    assert_ne!(
        l[0].offering, nodes[0].offering,
        "not the interrupted pool again"
    );
}

#[test]
fn a_step_that_panics_is_contained_and_the_core_keeps_what_it_knew() {
    let pools = [gpu_pool(|_| {})];
    let mut core = Core::new(Config::default()).with_claim_tag("boot");
    let nodes = [ready_spot_node(&pools, gpu_pod("ml/a"), None)];
    let pending = [gpu_pod("ml/b")];
    let w = world(&pools, &pending, &nodes);
    // Planning panics: the interruption is answered all the same.
    core.fail_in = Some("provisioning");
    let first = spot_notice_on_gpu_1(&mut core, &w);
    assert!(first
        .iter()
        .any(|a| matches!(a, Action::Cordon { claim, .. } if claim == "gpu-1")));
    assert!(first
        .iter()
        .any(|a| matches!(a, Action::Evict { pod, .. } if pod == "ml/a")));
    assert!(launches(&first).is_empty());
    let failures = core.take_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].step, "provisioning");
    assert!(failures[0].message.contains("injected"), "{failures:?}");
    assert!(core.take_failures().is_empty(), "reported once");
    // Nothing was lost: the interruption is not answered twice, and the
    // planner, once it works, names its claims with the core's tag.
    core.fail_in = None;
    let mut later = Vec::new();
    for s in 1..5 {
        later.extend(core.decide(&w, t(1000 + s)));
    }
    assert!(
        !later.iter().any(|a| matches!(a, Action::Cordon { .. })),
        "{later:?}"
    );
    let l = launches(&later);
    assert!(!l.is_empty(), "{later:?}");
    assert!(l.iter().all(|r| r.claim.ends_with("-boot")), "{l:?}");
}

#[test]
fn a_step_that_panics_every_time_is_left_out_and_the_rest_decide() {
    let pools = [gpu_pool(|_| {})];
    let mut core = Core::new(Config::default());
    let nodes = [ready_spot_node(&pools, gpu_pod("ml/a"), None)];
    let w = world(&pools, &[], &nodes);
    core.fail_in = Some("interruptions");
    let first = spot_notice_on_gpu_1(&mut core, &w);
    assert!(!first.iter().any(|a| matches!(a, Action::Cordon { .. })));
    assert_eq!(core.take_failures()[0].step, "interruptions");
    // Once it works again, the notice the core took in is answered.
    core.fail_in = None;
    let then = core.decide(&w, t(1001));
    assert!(
        then.iter().any(|a| matches!(a, Action::Cordon { .. })),
        "{then:?}"
    );
}

#[test]
#[should_panic(expected = "injected")]
fn without_containment_a_panicking_step_goes_through() {
    let pools = [gpu_pool(|_| {})];
    let mut core = Core::new(Config {
        contain_panics: false,
        ..Config::default()
    });
    let nodes = [ready_spot_node(&pools, gpu_pod("ml/a"), None)];
    let w = world(&pools, &[], &nodes);
    core.fail_in = Some("interruptions");
    spot_notice_on_gpu_1(&mut core, &w);
}

#[test]
fn a_failed_launch_is_forgotten_and_its_pods_planned_again() {
    let pools = [gpu_pool(|_| {})];
    let pending = [gpu_pod("ml/a")];
    let mut core = Core::new(Config::default());
    let w = world(&pools, &pending, &[]);
    assert!(launches(&core.decide(&w, t(0))).is_empty());
    let first = core.decide(&w, t(1));
    let l = launches(&first);
    assert_eq!(l.len(), 1);
    let action = Action::Launch(l[0].clone());
    // The claim could not be created (the API server answered 5xx): the pod
    // is still pending and is planned again, not waited for.
    core.observe_outcome(&action, crate::core::Outcome::Failed, t(1));
    let mut again = Vec::new();
    for s in 2..5 {
        again.extend(core.decide(&w, t(s)));
    }
    let l = launches(&again);
    assert_eq!(l.len(), 1, "{again:?}");
    assert_eq!(l[0].pods, ["ml/a"]);
}

#[test]
fn a_cordon_that_failed_is_issued_again_and_nothing_is_evicted_before_it_succeeds() {
    let pools = [gpu_pool(|_| {})];
    let mut core = Core::new(Config::default());
    let nodes = [ready_spot_node(&pools, gpu_pod("ml/a"), None)];
    let w = world(&pools, &[], &nodes);
    let first = spot_notice_on_gpu_1(&mut core, &w);
    let cordon = first
        .iter()
        .find(|a| matches!(a, Action::Cordon { .. }))
        .cloned()
        .expect("a cordon");
    // The executor did not get to the eviction: the cordon failed (a 5xx).
    core.observe_outcome(&cordon, crate::core::Outcome::Failed, t(1000));
    for a in first.iter().filter(|a| matches!(a, Action::Evict { .. })) {
        core.observe_outcome(a, crate::core::Outcome::Failed, t(1000));
    }
    let soon = core.decide(&w, t(1002));
    assert!(soon.is_empty(), "in its backoff: {soon:?}");
    let retried = core.decide(&w, t(1005));
    assert_eq!(retried.first(), Some(&cordon), "{retried:?}");
    assert!(
        retried
            .iter()
            .any(|a| matches!(a, Action::Evict { pod, .. } if pod == "ml/a")),
        "the eviction goes out behind the cordon: {retried:?}"
    );
    for a in &retried {
        core.observe_outcome(a, crate::core::Outcome::Done, t(1005));
    }
    assert!(core
        .decide(&w, t(1100))
        .iter()
        .all(|a| !matches!(a, Action::Cordon { .. })));
}

#[test]
fn a_scheduled_buffers_lead_is_that_of_the_pools_that_can_hold_its_chunk() {
    let core = Core::new(Config::default());
    let gpu = gpu_pool(|_| {});
    let mut spec = NodePoolSpec::default();
    spec.template.spec.requirements = vec![crate::api::Requirement::new(
        l::INSTANCE_FAMILY,
        crate::api::Operator::In,
        &["m6i", "m7i"],
    )];
    let cpu = NodePool::new("cpu", spec);
    let pools = [gpu.clone(), cpu.clone()];
    let (gpu_lead, cpu_lead) = (core.lead_in(&gpu, catalog()), core.lead_in(&cpu, catalog()));
    assert!(
        gpu_lead < cpu_lead,
        "nothing learned: g5/g6 launch faster than the others' default ({gpu_lead:?}, {cpu_lead:?})"
    );
    // Only the GPU pool can hold a GPU chunk: the CPU pool's slower
    // launches do not make it earlier.
    assert_eq!(core.buffer_lead(&pools, catalog(), &gpu_pod("c")), gpu_lead);
    // A CPU chunk does not tolerate the GPU pool's taint.
    let cpu_chunk = Pod::new("c", Resources::new().with(CPU, 1000));
    assert_eq!(core.buffer_lead(&pools, catalog(), &cpu_chunk), cpu_lead);
    // A chunk no pool can hold: the longest lead of all.
    let mut huge = gpu_pod("c");
    huge.requests.set(l::RESOURCE_GPU, 1000);
    assert_eq!(core.buffer_lead(&pools, catalog(), &huge), cpu_lead);
    assert_eq!(
        core.buffer_lead(&[], catalog(), &huge),
        super::super::buffers::SCHEDULE_LEAD
    );
}

#[test]
fn a_pending_pod_whose_sibling_fills_its_per_node_cap_on_a_node_with_room_gets_a_node_of_its_own() {
    let pools = [gpu_pool(|_| {})];
    let serve = |name: &str, cap: Option<u32>| {
        let mut p = gpu_pod(name);
        p.labels.insert("app".into(), "serve".into());
        p.per_node_max = cap;
        p
    };
    let launched = |cap: Option<u32>| {
        // A ready 4-GPU node holding one replica: room for three more.
        let req = ClaimRequest {
            cluster_placement: false,
            claim: "gpu-1".into(),
            nodepool: "gpu".into(),
            offering: OfferingKey {
                instance_type: "g5.12xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::OnDemand,
            },
            price_per_hour: 5.672,
            pods: vec![],
            prewarm_window: None,
            reservation: None,
        };
        let mut node = ManagedNode::launched(&req, &world(&pools, &[], &[]), t(0)).unwrap();
        node.ready_at = Some(t(300));
        node.state.in_flight = false;
        let running = serve("ml/serve-0", cap);
        node.state.used.add(&running.requests);
        node.pods.push(super::super::BoundPod {
            pod: running,
            do_not_disrupt: false,
            checkpoint_completed: None,
            started: Some(t(300)),
            pdb: None,
            placeholder: false,
        });
        let nodes = [node];
        let pending = [serve("ml/serve-1", cap)];
        let mut core = Core::new(Config::default());
        (400..403)
            .flat_map(|s| {
                launches(&core.decide(&world(&pools, &pending, &nodes), t(s)))
                    .into_iter()
                    .map(|c| c.pods.clone())
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    // Without a cap the node takes it; with anti-affinity (cap 1) the
    // running replica fills the node's share, so it needs a node of its own.
    assert!(launched(None).is_empty());
    assert_eq!(launched(Some(1)), [vec!["ml/serve-1".to_string()]]);
}
