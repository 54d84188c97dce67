//! Consolidation's tests: empty and underutilized nodes, budgets, PDBs,
//! validation, replacements, drains and restarts.

use super::super::interruption::fixtures::*;
use super::*;
use crate::api::Budget;
use crate::catalog::{Catalog, InstanceType, PriceSource};
use crate::core::BoundPod;

/// One round at `at` with nothing protected and no learned rates.
pub(super) fn step(c: &mut Consolidation, f: &Fixture, at: i64) -> Vec<Action> {
    c.decide_in(&f.world(), t(at), &Context::new(&Interruptions::default()))
}

/// Pool `name` that never consolidates (so that only drift or expiry
/// acts), with a budget of `nodes`.
pub(super) fn unconsolidated(name: &str, nodes: &str) -> Vec<NodePool> {
    vec![pool_with(name, |s| {
        s.disruption.consolidate_after = "Never".into();
        s.disruption.budgets = vec![Budget {
            nodes: nodes.into(),
            ..Budget::default()
        }];
    })]
}

/// A catalog selling only an on-demand g5.xlarge in use1-az1 at $1/h.
pub(super) fn g5_on_demand() -> Catalog {
    catalog(&[(
        "g5.xlarge",
        "use1-az1",
        crate::catalog::CapacityType::OnDemand,
        1.0,
        None,
    )])
}

/// Actions as short strings (`cordon n1 (drifted)`, `evict a`, `launch`).
pub(super) fn kinds(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            Action::Launch(_) => "launch".to_string(),
            Action::Cordon { claim, reason } => format!("cordon {claim} ({reason})"),
            Action::Uncordon { claim } => format!("uncordon {claim}"),
            Action::RequestCheckpoint { pod, .. } => format!("checkpoint {pod}"),
            Action::Evict { pod, .. } => format!("evict {pod}"),
            Action::Delete { claim, reason } => format!("delete {claim} ({reason})"),
            Action::Reboot { claim, .. } => format!("reboot {claim}"),
        })
        .collect()
}

fn cordon(claim: &str, reason: DisruptionReason) -> Action {
    Action::Cordon {
        claim: claim.into(),
        reason,
    }
}

fn delete(claim: &str, reason: DisruptionReason) -> Action {
    Action::Delete {
        claim: claim.into(),
        reason,
    }
}

fn evict(pod: &str, claim: &str) -> Action {
    Action::Evict {
        pod: pod.into(),
        claim: claim.into(),
    }
}

/// The actions of the round at 75 s after rounds at 0 and 60 s: a node
/// stable since 0 s under the default `consolidateAfter` (1m) is a
/// candidate at 60 s and carried out after the validation period.
fn validated(c: &mut Consolidation, f: &Fixture) -> Vec<Action> {
    step(c, f, 0);
    step(c, f, 60);
    step(c, f, 75)
}

fn checkpoint(pod: &str, claim: &str, deadline: i64) -> Action {
    Action::RequestCheckpoint {
        pod: pod.into(),
        claim: claim.into(),
        deadline: t(deadline),
    }
}

/// n1 (an opted-in pod `a` and a plain `b`) is underutilized: both fit
/// on n2, which is held by `do-not-disrupt`. Its drain starts at 75 s.
fn checkpointer_on_an_underutilized_node() -> (Fixture, Consolidation) {
    let mut f = Fixture::new([
        node("n1").pods([pod("a").checkpoints(), pod("b")]),
        node("n2").do_not_disrupt().pods([pod("c")]),
    ]);
    f.pools = vec![pool_with("gpu", |s| s.disruption.budgets = budget("1"))];
    let mut c = Consolidation::default();
    assert_eq!(
        validated(&mut c, &f),
        [
            cordon("n1", DisruptionReason::Underutilized),
            checkpoint("a", "n1", 75 + 90),
            evict("b", "n1"),
        ]
    );
    // The driver's fresh world: b is gone, a is still checkpointing.
    *f.node_mut("n1") = node("n1").disrupted().pods([pod("a").checkpoints()]);
    (f, c)
}

#[test]
fn an_underutilized_drain_evicts_a_checkpointing_pod_once_it_acknowledges() {
    let (mut f, mut c) = checkpointer_on_an_underutilized_node();
    assert_eq!(c.next_deadline(), Some(t(165)), "its grace period");
    assert_eq!(step(&mut c, &f, 100), [], "not before it acknowledges");
    *f.node_mut("n1") = node("n1")
        .disrupted()
        .pods([pod("a").checkpoints().acked(t(110))]);
    assert_eq!(step(&mut c, &f, 111), [evict("a", "n1")]);
    f.node_mut("n1").pods.clear();
    assert_eq!(
        step(&mut c, &f, 112),
        [delete("n1", DisruptionReason::Underutilized)]
    );
}

#[test]
fn an_underutilized_drain_evicts_a_checkpointing_pod_that_never_acknowledges_at_its_deadline() {
    let (f, mut c) = checkpointer_on_an_underutilized_node();
    assert_eq!(step(&mut c, &f, 164), []);
    assert_eq!(step(&mut c, &f, 165), [evict("a", "n1")]);
}

#[test]
fn a_node_left_cordoned_by_a_restart_is_drained_again_asking_checkpointers_first() {
    let f = Fixture::new([
        node("n1")
            .disrupted()
            .pods([pod("a").checkpoints(), pod("b")]),
        node("n2").disrupted(),
        node("n3"),
    ]);
    // A new core: nothing remembered of the drains.
    let mut c = Consolidation::default();
    assert_eq!(
        step(&mut c, &f, 0),
        [
            cordon("n1", DisruptionReason::Underutilized),
            checkpoint("a", "n1", 90),
            evict("b", "n1"),
            cordon("n2", DisruptionReason::Empty),
            delete("n2", DisruptionReason::Empty),
        ]
    );
    assert!(c.is_disrupting("n1") && c.is_disrupting("n2"));
    assert_eq!(step(&mut c, &f, 1), [], "nothing twice");
}

#[test]
fn a_node_cordoned_by_someone_else_or_held_by_do_not_disrupt_is_left_as_it_is() {
    let f = Fixture::new([
        node("n1").cordoned().pods([pod("a")]),
        node("n2").disrupted().do_not_disrupt().pods([pod("b")]),
        node("n3").pods([pod("c").do_not_disrupt()]),
    ]);
    let mut c = Consolidation::default();
    for at in [0, 60, 75, 3600] {
        assert_eq!(step(&mut c, &f, at), []);
    }
    assert!(!c.is_disrupting("n1") && !c.is_disrupting("n2"));
}

#[test]
fn a_node_left_cordoned_under_interruption_handling_is_left_to_it() {
    let f = Fixture::new([node("n1").spot().disrupted().pods([pod("a")]), node("n2")]);
    let mut interruptions = Interruptions::default();
    let notice = crate::core::Notice::SpotInterruption {
        claim: "n1".into(),
        deadline: t(120),
    };
    interruptions.handle(&notice, &f.world(), t(0));
    let mut c = Consolidation::default();
    let ctx = Context::new(&interruptions);
    let acted = c.decide_in(&f.world(), t(0), &ctx);
    assert!(
        acted.iter().all(|a| !matches!(a, Action::Cordon { claim, .. } | Action::Evict { claim, .. } if claim == "n1")),
        "{acted:?}"
    );
    assert!(!c.is_disrupting("n1"));
}

fn budget(nodes: &str) -> Vec<Budget> {
    vec![Budget {
        nodes: nodes.into(),
        ..Budget::default()
    }]
}

fn gpu_type(name: &str, vcpu: u32, model: &str) -> InstanceType {
    InstanceType::bare(name, vcpu, u64::from(vcpu) * 4096).with_gpus(model, 1, 23028)
}

/// `(instance type, zone, capacity type, USD/h, advisor bucket)`.
pub(super) type Row = (&'static str, &'static str, CapacityType, f64, Option<u8>);

pub(super) fn catalog(rows: &[Row]) -> Catalog {
    Catalog::from_parts(
        [
            gpu_type("g5.xlarge", 4, "A10G"),
            gpu_type("g5.2xlarge", 8, "A10G"),
            gpu_type("g6.xlarge", 4, "L4"),
        ],
        rows.iter().map(|(it, zone, ct, price, bucket)| Offering {
            instance_type: (*it).into(),
            region: REGION.into(),
            zone_id: (*zone).into(),
            capacity_type: *ct,
            price_per_hour: *price,
            price_source: PriceSource::SpotObserved,
            interruption_bucket: bucket.map(InterruptionBucket),
            market: None,
            reservation: None,
        }),
    )
}

fn launched(actions: &[Action]) -> &ClaimRequest {
    match actions {
        [Action::Launch(c)] => c,
        other => panic!("expected one launch, got {other:?}"),
    }
}

#[test]
fn a_node_empty_longer_than_consolidate_after_is_removed_and_one_empty_for_less_is_not() {
    let mut f = Fixture::new([node("n1"), node("n2").pods([pod("a")]), node("n3")]);
    f.pools = vec![pool_with("gpu", |s| {
        s.disruption.consolidation_policy = ConsolidationPolicy::WhenEmpty;
        s.disruption.budgets = budget("100%");
    })];
    let mut c = Consolidation::default();
    assert_eq!(step(&mut c, &f, 0), []);
    // n2 empties at 30 s; n3 was empty from the start.
    f.node_mut("n2").pods.clear();
    assert_eq!(step(&mut c, &f, 30), []);
    assert_eq!(c.next_deadline(), Some(t(60)));
    // consolidateAfter is 1m: n1 and n3 qualify at 60 s, n2 not before 90 s.
    assert_eq!(step(&mut c, &f, 60), []);
    let empty = Decision::Empty {
        claims: vec!["n1".into(), "n3".into()],
    };
    assert_eq!(c.candidate(), Some((&empty, t(60))));
    assert_eq!(c.next_deadline(), Some(t(75)));
    // Cordoned first; deleted once a world that shows the cordon still
    // shows them empty.
    assert_eq!(
        step(&mut c, &f, 75),
        [
            cordon("n1", DisruptionReason::Empty),
            cordon("n3", DisruptionReason::Empty),
        ]
    );
    assert_eq!(
        c.decisions(),
        [DisruptionDecision {
            reason: DisruptionReason::Empty,
            claims: vec!["n1".into(), "n3".into()],
            replacements: vec![],
        }],
        "one decision for the empty nodes that go together, at their cordon"
    );
    assert_eq!(c.next_deadline(), Some(t(76)));
    assert_eq!(step(&mut c, &f, 76), [], "the cordons are not seen yet");
    f.node_mut("n1").state.unschedulable = true;
    f.node_mut("n3").state.unschedulable = true;
    assert_eq!(
        step(&mut c, &f, 76),
        [
            delete("n1", DisruptionReason::Empty),
            delete("n3", DisruptionReason::Empty),
        ]
    );
    assert_eq!(c.decisions(), []);
    assert_eq!(c.next_deadline(), Some(t(90)));
    assert_eq!(step(&mut c, &f, 77), [], "nothing twice, n2 not yet");
    assert_eq!(c.decisions(), []);
}

#[test]
fn a_node_that_held_only_buffer_chunks_goes_when_the_buffer_lets_it_go_not_consolidate_after_later()
{
    let chunk = || {
        pod(&crate::core::buffers::placeholder_name("ml/warm", 0))
            .gpus(1)
            .do_not_disrupt()
    };
    let mut f = Fixture::new([
        node("n1").pods([chunk()]),
        node("n2").pods([pod("a").do_not_disrupt()]),
    ]);
    f.pools = vec![pool_with("gpu", |s| {
        s.disruption.consolidation_policy = ConsolidationPolicy::WhenEmptyOrUnderutilized;
        s.disruption.consolidate_after = "15m".into();
        s.disruption.budgets = budget("100%");
    })];
    let mut c = Consolidation::default();
    for at in [0, 1800, 3600] {
        assert_eq!(step(&mut c, &f, at), [], "the chunk holds n1, a holds n2");
        assert_eq!(c.candidate(), None);
    }
    // The buffer's window closes at 3600 s (its chunk is gone) and n2's
    // real pod leaves at the same time.
    f.node_mut("n1").pods.clear();
    f.node_mut("n2").pods.clear();
    assert_eq!(step(&mut c, &f, 3600), []);
    let empty = Decision::Empty {
        claims: vec!["n1".into()],
    };
    assert_eq!(
        c.candidate(),
        Some((&empty, t(3600))),
        "n1 held no real pod since it was seen: no consolidateAfter to wait"
    );
    assert_eq!(
        step(&mut c, &f, 3615),
        [cordon("n1", DisruptionReason::Empty)]
    );
    assert_eq!(
        c.next_deadline(),
        Some(t(3616)),
        "n1's recheck; n2 waits its 15 minutes from 3600 s"
    );
    f.node_mut("n1").state.unschedulable = true;
    assert_eq!(
        step(&mut c, &f, 3616),
        [delete("n1", DisruptionReason::Empty)]
    );
    assert_eq!(c.next_deadline(), Some(t(4500)));
}

#[test]
fn an_empty_node_that_got_a_pod_by_the_time_it_was_cordoned_is_uncordoned_not_deleted() {
    let mut f = Fixture::new([node("n1")]);
    f.pools = vec![pool_with("gpu", |s| {
        s.disruption.consolidation_policy = ConsolidationPolicy::WhenEmpty;
    })];
    let mut c = Consolidation::default();
    for at in [0, 60] {
        assert_eq!(step(&mut c, &f, at), []);
    }
    assert_eq!(
        step(&mut c, &f, 75),
        [cordon("n1", DisruptionReason::Empty)]
    );
    // A pod was bound between the world the decision read and the
    // cordon: the world that shows the cordon shows the pod too.
    let n1 = f.node_mut("n1");
    n1.state.unschedulable = true;
    n1.disrupted = true;
    n1.pods = vec![pod("ml/late")];
    assert_eq!(
        step(&mut c, &f, 76),
        [Action::Uncordon { claim: "n1".into() }]
    );
    // Until the world shows the cordon gone, the node is left alone
    // (not drained as a cordoned node nobody owns).
    assert_eq!(step(&mut c, &f, 77), []);
    let n1 = f.node_mut("n1");
    n1.state.unschedulable = false;
    n1.disrupted = false;
    assert_eq!(step(&mut c, &f, 78), []);
    assert!(!c.is_disrupting("n1"));
}

#[test]
fn a_node_that_leaves_the_world_is_forgotten_and_counted_afresh_when_back() {
    let mut f = Fixture::new([node("n1")]);
    f.pools = vec![pool_with("gpu", |s| {
        s.disruption.consolidation_policy = ConsolidationPolicy::WhenEmpty;
    })];
    let mut c = Consolidation::default();
    assert_eq!(step(&mut c, &f, 0), []);
    assert_eq!(c.next_deadline(), Some(t(60)));
    let gone = f.nodes.remove(0);
    assert_eq!(step(&mut c, &f, 30), []);
    assert_eq!(c.next_deadline(), None, "n1 forgotten");
    f.nodes.insert(0, gone);
    assert_eq!(step(&mut c, &f, 40), []);
    assert_eq!(c.next_deadline(), Some(t(100)), "empty since 40 s");
}

#[test]
fn consolidate_after_never_keeps_empty_nodes() {
    let mut f = Fixture::new([node("n1")]);
    f.pools = vec![pool_with("gpu", |s| {
        s.disruption.consolidate_after = "Never".into()
    })];
    let mut c = Consolidation::default();
    for at in [0, 60, 600, 86_400] {
        assert_eq!(step(&mut c, &f, at), []);
    }
    assert_eq!(c.next_deadline(), None);
}

#[test]
fn a_protected_node_is_not_removed() {
    let f = Fixture::new([node("n1"), node("n2")]);
    let mut c = Consolidation::default();
    let keep_n1 = |n: &ManagedNode| n.claim == "n1";
    let none = Interruptions::default();
    let ctx = Context {
        protected: &keep_n1,
        ..Context::new(&none)
    };
    for at in [0, 60] {
        assert_eq!(c.decide_in(&f.world(), t(at), &ctx), []);
    }
    assert_eq!(
        c.decide_in(&f.world(), t(75), &ctx),
        [cordon("n2", DisruptionReason::Empty)]
    );
}

#[test]
fn a_budget_of_zero_blocks_consolidation() {
    let mut f = Fixture::new([node("n1"), node("n2").pods([pod("a")])]);
    f.pools = vec![pool_with("gpu", |s| s.disruption.budgets = budget("0"))];
    let mut c = Consolidation::default();
    for at in [0, 60, 75, 3600] {
        assert_eq!(step(&mut c, &f, at), []);
    }
    assert_eq!(c.candidate(), None);
}

#[test]
fn the_budget_caps_how_many_empty_nodes_go_at_once_most_expensive_first() {
    let mut f = Fixture::new([
        node("n1"),
        node("n2").offering("g5.2xlarge", "use1-az1", 2.0),
        node("n3").pods([pod("a")]),
    ]);
    f.pools = vec![pool_with("gpu", |s| s.disruption.budgets = budget("1"))];
    let mut c = Consolidation::default();
    assert_eq!(
        validated(&mut c, &f),
        [cordon("n2", DisruptionReason::Empty)]
    );
    // n2 is still going away: the budget is used up.
    assert_eq!(step(&mut c, &f, 200), []);
    f.nodes.retain(|n| n.claim != "n2");
    step(&mut c, &f, 300);
    assert_eq!(
        step(&mut c, &f, 315),
        [cordon("n1", DisruptionReason::Empty)]
    );
}

#[test]
fn budgets_are_per_pool() {
    let mut f = Fixture::new([node("n1"), node("n2").pool("cpu")]);
    f.pools = vec![
        pool_with("gpu", |s| s.disruption.budgets = budget("0")),
        pool_with("cpu", |_| {}),
    ];
    let mut c = Consolidation::default();
    assert_eq!(
        validated(&mut c, &f),
        [cordon("n2", DisruptionReason::Empty)]
    );
}

#[test]
fn unready_do_not_disrupt_and_interrupted_nodes_are_kept() {
    let mut f = Fixture::new([
        node("n1").not_ready(),
        node("n2").do_not_disrupt(),
        node("n3").spot(),
    ]);
    f.pools = vec![pool_with("gpu", |s| s.disruption.budgets = budget("100%"))];
    let mut interruptions = Interruptions::default();
    let notice = crate::core::Notice::SpotInterruption {
        claim: "n3".into(),
        deadline: t(120),
    };
    interruptions.handle(&notice, &f.world(), t(0));
    let mut c = Consolidation::default();
    for at in [0, 60, 75, 3600] {
        assert_eq!(c.decide(&f.world(), t(at), &interruptions, &|_| false), []);
    }
}

#[test]
fn a_do_not_disrupt_pod_keeps_its_node_out_of_consolidation() {
    let f = Fixture::new([
        node("n1").pods([pod("a").do_not_disrupt()]),
        node("n2").pods([pod("b")]),
    ]);
    let mut c = Consolidation::default();
    step(&mut c, &f, 0);
    step(&mut c, &f, 60);
    // n1 would sort first; only n2 (whose pod fits on n1) is a candidate.
    let expected = Decision::Delete {
        claim: "n2".into(),
        saving: 1.0,
    };
    assert_eq!(c.candidate(), Some((&expected, t(60))));
}

/// The planner resource of a GPU the NVIDIA DRA driver publishes.
fn dra_gpu() -> String {
    crate::catalog::devices::resource_name(crate::catalog::devices::NVIDIA_DRIVER, "gpu")
}

/// `p` taking one GPU through the claim `gpu` of its own, made from the
/// template `one-gpu` (and allocated where it runs): matched, as a
/// re-created pod's claim would be, on the g5 types and not on a g6.
pub(super) fn own_gpu_claim(mut p: BoundPod) -> BoundPod {
    use crate::cluster::dra::{Allocation, PodDevices, ShapeKey};
    p.pod.resource_claims.push(ClaimRef {
        name: "gpu".into(),
        claim: None,
        template: Some("one-gpu".into()),
        generated: Some(format!("{}-gpu-x7k2p", p.pod.name)),
        group: None,
    });
    let shape = |t: &str| ShapeKey::new(t, crate::catalog::GpuLayout::Whole);
    let one = Allocation {
        demand: Resources::new().with(&dra_gpu(), 1),
        choice: vec![0],
    };
    let shapes = [
        (shape("g5.xlarge"), Ok(one.clone())),
        (shape("g5.2xlarge"), Ok(one)),
        (
            shape("g6.xlarge"),
            Err("its GPU is not an A10G".to_string()),
        ),
    ];
    p.pod.devices = Some(std::sync::Arc::new(PodDevices {
        claims: vec!["claim gpu (template one-gpu)".into()],
        group: None,
        pinned: None,
        shapes: std::sync::Arc::new(shapes.into_iter().collect()),
    }));
    p
}

/// `p` sharing the ResourceClaim `ml/shared-gpu`, allocated on `node`.
pub(super) fn shared_gpu_claim(mut p: BoundPod, node: &str) -> BoundPod {
    use crate::cluster::dra::PodDevices;
    p.pod.resource_claims.push(ClaimRef {
        name: "gpu".into(),
        claim: Some("shared-gpu".into()),
        template: None,
        generated: None,
        group: None,
    });
    p.pod.devices = Some(std::sync::Arc::new(PodDevices {
        claims: vec!["claim gpu (ResourceClaim shared-gpu)".into()],
        group: Some("ml/shared-gpu".into()),
        pinned: Some(node.into()),
        shapes: Default::default(),
    }));
    p
}

/// n1, a $2 g5.2xlarge running `a`; n2, a g5.xlarge held by
/// `do-not-disrupt` with room for `a`'s CPU and a free published GPU; a
/// $1 g5.xlarge for sale.
fn dra_node_with(a: BoundPod) -> Fixture {
    let mut n2 = node("n2").do_not_disrupt().pods([pod("b")]);
    n2.state.allocatable.set(&dra_gpu(), 1);
    let mut f = Fixture::new([
        node("n1").offering("g5.2xlarge", "use1-az1", 2.0).pods([a]),
        n2,
    ]);
    f.catalog = catalog(&[
        ("g5.xlarge", "use1-az1", CapacityType::OnDemand, 1.0, None),
        ("g5.2xlarge", "use1-az1", CapacityType::OnDemand, 2.0, None),
    ]);
    f
}

#[test]
fn a_pod_with_a_claim_of_its_own_moves_onto_a_cheaper_node_launched_to_serve_its_claim() {
    let f = dra_node_with(own_gpu_claim(pod("a")));
    let mut c = Consolidation::default();
    step(&mut c, &f, 0);
    assert_eq!(step(&mut c, &f, 60), []);
    // Not deleted onto n2 (its free device is not matched against the
    // claim): replaced by a g5.xlarge, a shape that serves the claim.
    let launch = step(&mut c, &f, 75);
    let r = launched(&launch);
    assert_eq!(r.offering.instance_type, "g5.xlarge");
    assert_eq!(r.pods, ["a"]);
    assert_eq!(
        c.decisions()[0].reason,
        DisruptionReason::Underutilized,
        "{:?}",
        c.decisions()
    );
    // The launched node serves DRA claims: it offers the driver's GPU.
    let w = f.world();
    let node = crate::core::ManagedNode::launched(r, &w, t(75)).unwrap();
    assert_eq!(node.state.allocatable.get(&dra_gpu()), 1);
}

#[test]
fn a_pod_sharing_an_allocated_claim_keeps_its_node_out_of_consolidation() {
    let f = dra_node_with(shared_gpu_claim(pod("a"), "n1"));
    let mut c = Consolidation::default();
    for at in [0, 60, 75, 3600] {
        assert_eq!(step(&mut c, &f, at), []);
    }
    assert_eq!(c.candidate(), None);
}

#[test]
fn a_pod_whose_claims_were_not_matched_keeps_its_node_out_of_consolidation() {
    let mut a = own_gpu_claim(pod("a"));
    a.pod.devices = None;
    let f = Fixture::new([node("n1").pods([a]), node("n2").pods([pod("b")])]);
    let mut c = Consolidation::default();
    step(&mut c, &f, 0);
    step(&mut c, &f, 60);
    // n1 would sort first; only n2 (whose pod fits on n1) is a candidate.
    let expected = Decision::Delete {
        claim: "n2".into(),
        saving: 1.0,
    };
    assert_eq!(c.candidate(), Some((&expected, t(60))));
}

#[test]
fn a_pod_whose_pdb_allows_no_disruption_keeps_its_node_out_of_consolidation() {
    let mut f = Fixture::new([
        node("n1").pods([pod("a").pdb(0)]),
        node("n2").pods([pod("b").cpu(3000)]),
    ]);
    f.pdbs = vec![pdb("ml/a", 0)];
    let mut c = Consolidation::default();
    step(&mut c, &f, 0);
    step(&mut c, &f, 60);
    // n1 would sort first; only n2 (whose pod fits on n1) is a candidate.
    let expected = Decision::Delete {
        claim: "n2".into(),
        saving: 1.0,
    };
    assert_eq!(c.candidate(), Some((&expected, t(60))));
}

#[test]
fn an_underutilized_node_whose_pods_fit_elsewhere_is_drained_after_the_validation_period() {
    let mut f = Fixture::new([node("n1").pods([pod("a")]), node("n2").pods([pod("b")])]);
    let mut c = Consolidation::default();
    assert_eq!(step(&mut c, &f, 0), []);
    assert_eq!(step(&mut c, &f, 60), []);
    let expected = Decision::Delete {
        claim: "n1".into(),
        saving: 1.0,
    };
    assert_eq!(c.candidate(), Some((&expected, t(60))));
    assert_eq!(step(&mut c, &f, 74), []);
    assert_eq!(
        step(&mut c, &f, 75),
        [
            cordon("n1", DisruptionReason::Underutilized),
            evict("a", "n1")
        ]
    );
    assert_eq!(
        c.decisions(),
        [DisruptionDecision {
            reason: DisruptionReason::Underutilized,
            claims: vec!["n1".into()],
            replacements: vec![],
        }]
    );
    assert_eq!(step(&mut c, &f, 75), [], "nothing twice");
    assert_eq!(c.decisions(), []);
    f.nodes = vec![node("n1").cordoned(), node("n2").pods([pod("b"), pod("a")])];
    assert_eq!(
        step(&mut c, &f, 80),
        [delete("n1", DisruptionReason::Underutilized)]
    );
    assert_eq!(step(&mut c, &f, 81), []);
}

#[test]
fn a_candidate_that_no_longer_holds_after_the_validation_period_is_dropped() {
    let mut f = Fixture::new([node("n1").pods([pod("a")]), node("n2").pods([pod("b")])]);
    let mut c = Consolidation::default();
    step(&mut c, &f, 0);
    step(&mut c, &f, 60);
    assert!(c.candidate().is_some());
    // n2 fills up during validation: a no longer fits there.
    *f.node_mut("n2") = node("n2").pods([pod("b"), pod("c").cpu(3000)]);
    assert_eq!(step(&mut c, &f, 75), []);
    assert_eq!(c.candidate(), None);
}

#[test]
fn an_underutilized_drain_evicts_within_pdbs() {
    let mut f = Fixture::new([
        node("n1").pods([pod("a").pdb(0), pod("b").pdb(0)]),
        node("n2").do_not_disrupt().pods([pod("c")]),
    ]);
    f.pdbs = vec![pdb("ml/ab", 1)];
    f.pools = vec![pool_with("gpu", |s| s.disruption.budgets = budget("1"))];
    let mut c = Consolidation::default();
    assert_eq!(
        validated(&mut c, &f),
        [
            cordon("n1", DisruptionReason::Underutilized),
            evict("a", "n1")
        ]
    );
    // The driver's fresh world: a is gone and the PDB is used up.
    f.pdbs[0].disruptions_allowed = 0;
    *f.node_mut("n1") = node("n1").cordoned().pods([pod("b").pdb(0)]);
    assert_eq!(step(&mut c, &f, 76), []);
    f.pdbs[0].disruptions_allowed = 1;
    assert_eq!(step(&mut c, &f, 77), [evict("b", "n1")]);
}

#[test]
fn an_underutilized_node_is_replaced_by_one_cheaper_node_once_it_is_ready() {
    let mut f = Fixture::new([node("n1")
        .offering("g5.2xlarge", "use1-az1", 2.0)
        .pods([pod("a").gpus(1)])]);
    f.catalog = catalog(&[
        ("g5.xlarge", "use1-az1", CapacityType::OnDemand, 1.0, None),
        ("g5.2xlarge", "use1-az1", CapacityType::OnDemand, 2.0, None),
    ]);
    let mut c = Consolidation::default();
    step(&mut c, &f, 0);
    assert_eq!(step(&mut c, &f, 60), []);
    let launch = step(&mut c, &f, 75);
    let r = launched(&launch).clone();
    assert_eq!(r.offering.instance_type, "g5.xlarge");
    assert_eq!(r.offering.capacity_type, CapacityType::OnDemand);
    assert_eq!(
        (r.price_per_hour, r.pods.as_slice()),
        (1.0, &["a".to_string()][..])
    );
    assert_eq!(
        c.decisions(),
        [DisruptionDecision {
            reason: DisruptionReason::Underutilized,
            claims: vec!["n1".into()],
            replacements: vec![r.claim.clone()],
        }]
    );
    // Not drained while the replacement is on its way.
    f.nodes.push(node(&r.claim).not_ready());
    assert_eq!(step(&mut c, &f, 100), []);
    *f.node_mut(&r.claim) = node(&r.claim);
    assert_eq!(
        step(&mut c, &f, 200),
        [
            cordon("n1", DisruptionReason::Underutilized),
            evict("a", "n1")
        ]
    );
}

#[test]
fn a_replacement_that_never_becomes_ready_is_given_up() {
    let mut f = Fixture::new([node("n1")
        .offering("g5.2xlarge", "use1-az1", 2.0)
        .pods([pod("a").gpus(1)])]);
    f.catalog = catalog(&[("g5.xlarge", "use1-az1", CapacityType::OnDemand, 1.0, None)]);
    let mut c = Consolidation::default();
    step(&mut c, &f, 0);
    step(&mut c, &f, 60);
    assert_eq!(step(&mut c, &f, 75).len(), 1);
    assert!(c.is_disrupting("n1"));
    assert_eq!(c.next_deadline(), Some(t(75 + 900)));
    assert_eq!(step(&mut c, &f, 75 + 899), []);
    step(&mut c, &f, 75 + 900);
    assert!(!c.is_disrupting("n1"));
    assert!(c.candidate().is_some(), "it may be tried again");
}

#[test]
fn the_spot_to_spot_guard_refuses_a_riskier_pool() {
    let mut f = Fixture::new([node("n1")
        .spot()
        .offering("g5.xlarge", "use1-az1", 1.0)
        .pods([pod("a").gpus(1)])]);
    f.pools = vec![pool_with("gpu", |s| {
        s.capacity_types = vec![CapacityType::Spot]
    })];
    let spot = CapacityType::Spot;
    f.catalog = catalog(&[
        ("g5.xlarge", "use1-az1", spot, 1.0, Some(1)),
        // 60% cheaper, but interrupted far more often.
        ("g6.xlarge", "use1-az2", spot, 0.4, Some(3)),
    ]);
    let mut c = Consolidation::default();
    for at in [0, 60, 75, 3600] {
        assert_eq!(step(&mut c, &f, at), []);
    }
    assert_eq!(c.candidate(), None);
    // A cheaper pool that is no riskier is taken.
    f.catalog = catalog(&[
        ("g5.xlarge", "use1-az1", spot, 1.0, Some(1)),
        ("g6.xlarge", "use1-az2", spot, 0.4, Some(3)),
        ("g6.xlarge", "use1-az3", spot, 0.7, Some(1)),
    ]);
    step(&mut c, &f, 3601);
    let r = launched(&step(&mut c, &f, 3616)).clone();
    assert_eq!(
        (r.offering.zone.as_str(), r.price_per_hour),
        ("use1-az3", 0.7)
    );
}

#[test]
fn a_spot_node_in_the_riskiest_pool_moves_only_to_a_less_risky_one() {
    let mut f = Fixture::new([node("n1")
        .spot()
        .offering("g5.xlarge", "use1-az1", 1.0)
        .pods([pod("a").gpus(1)])]);
    f.pools = vec![pool_with("gpu", |s| {
        s.capacity_types = vec![CapacityType::Spot]
    })];
    let spot = CapacityType::Spot;
    f.catalog = catalog(&[
        ("g5.xlarge", "use1-az1", spot, 1.0, Some(3)),
        // As risky as the node's own pool, and the riskiest there is.
        ("g6.xlarge", "use1-az2", spot, 0.4, Some(3)),
        ("g6.xlarge", "use1-az3", spot, 0.8, Some(0)),
    ]);
    let mut c = Consolidation::default();
    step(&mut c, &f, 0);
    step(&mut c, &f, 60);
    let r = launched(&step(&mut c, &f, 75)).clone();
    assert_eq!(
        (r.offering.zone.as_str(), r.price_per_hour),
        ("use1-az3", 0.8)
    );
}

#[test]
fn a_node_listing_its_pods_in_another_order_stays_stable_and_one_with_another_pod_does_not() {
    let mut f = Fixture::new([node("n1").pods([pod("a"), pod("b")])]);
    let mut c = Consolidation::default();
    c.observe(&f.world(), t(0));
    f.node_mut("n1").pods.reverse();
    c.observe(&f.world(), t(30));
    assert_eq!(c.observed["n1"].since, t(0));
    // As many pods, one of them another: the node changed.
    f.node_mut("n1").pods[0] = pod("c");
    c.observe(&f.world(), t(60));
    assert_eq!(c.observed["n1"].since, t(60));
    // A placeholder is not a pod of the node's.
    let mut chunk = pod("buffer");
    chunk.placeholder = true;
    f.node_mut("n1").pods.push(chunk);
    c.observe(&f.world(), t(90));
    assert_eq!(c.observed["n1"].since, t(60));
}

#[test]
fn a_drivers_pods_revision_stands_for_its_pods_and_zero_means_compare() {
    let mut f = Fixture::new([node("n1").pods([pod("a")])]);
    f.node_mut("n1").pods_revision = 7;
    let mut c = Consolidation::default();
    c.observe(&f.world(), t(0));
    // Touched (a checkpoint acknowledged), the same pods: the clock runs on.
    f.node_mut("n1").pods_revision = 8;
    c.observe(&f.world(), t(30));
    assert_eq!(c.observed["n1"].since, t(0));
    // Another pod under a new revision: the clock starts again.
    f.node_mut("n1").pods.push(pod("b"));
    f.node_mut("n1").pods_revision = 9;
    c.observe(&f.world(), t(60));
    assert_eq!(c.observed["n1"].since, t(60));
    assert_eq!(c.observed["n1"].pods, ["a", "b"]);
    // The same revision, another wait in its pool: when it becomes
    // eligible follows the pool.
    let default_wait = c.observed["n1"].eligible_at;
    f.pools = vec![pool_with("gpu", |s| {
        s.disruption.consolidate_after = "1h".into()
    })];
    c.observe(&f.world(), t(70));
    assert_eq!(c.observed["n1"].eligible_at, Some(t(60 + 3600)));
    assert_ne!(c.observed["n1"].eligible_at, default_wait);
    // A driver that keeps no revision (0) is compared every round.
    f.node_mut("n1").pods_revision = 0;
    c.observe(&f.world(), t(90));
    f.node_mut("n1").pods.pop();
    c.observe(&f.world(), t(120));
    assert_eq!(c.observed["n1"].since, t(120));
    c.observe(&f.world(), t(150));
    assert_eq!(c.observed["n1"].since, t(120));
}

#[test]
fn a_worlds_nodes_revision_that_stays_the_same_keeps_every_clock() {
    let mut f = Fixture::new([node("n1").pods([pod("a")]), node("n2")]);
    let mut c = Consolidation::default();
    fn at(f: &Fixture, revision: u64) -> World<'_> {
        World {
            nodes_revision: revision,
            ..f.world()
        }
    }
    c.observe(&at(&f, 3), t(0));
    // A driver that changes a node gives a new revision: read again.
    f.node_mut("n1").pods.push(pod("b"));
    c.observe(&at(&f, 4), t(60));
    assert_eq!(c.observed["n1"].since, t(60));
    assert_eq!(c.observed["n1"].pods, ["a", "b"]);
    // A node gone under a new revision is forgotten.
    f.nodes.retain(|n| n.claim != "n2");
    c.observe(&at(&f, 5), t(90));
    assert!(!c.observed.contains_key("n2"));
    // Under the same revision the nodes are taken to be as they were: the
    // driver promised so, and they are not read (this pod goes unseen).
    f.node_mut("n1").pods.pop();
    c.observe(&at(&f, 5), t(120));
    assert_eq!(c.observed["n1"].pods, ["a", "b"]);
    // Another wait in the pool is read under the same revision, and the
    // nodes with it.
    f.pools = vec![pool_with("gpu", |s| {
        s.disruption.consolidate_after = "1h".into()
    })];
    c.observe(&at(&f, 5), t(150));
    assert_eq!(c.observed["n1"].pods, ["a"]);
    assert_eq!(c.observed["n1"].eligible_at, Some(t(150 + 3600)));
}

#[test]
fn an_underutilized_node_is_not_emptied_onto_a_node_where_its_pods_sibling_fills_the_cap() {
    let capped = |name: &str, cap: Option<u32>| {
        let mut b = pod(name);
        b.pod.labels.insert("app".into(), "serve".into());
        b.pod.per_node_max = cap;
        b
    };
    let cordoned = |cap: Option<u32>| {
        let mut f = Fixture::new([
            node("n1").pods([capped("a", cap)]),
            node("n2").do_not_disrupt().pods([capped("c", cap)]),
        ]);
        f.pools = vec![pool_with("gpu", |s| s.disruption.budgets = budget("1"))];
        let mut c = Consolidation::default();
        validated(&mut c, &f).contains(&cordon("n1", DisruptionReason::Underutilized))
    };
    // n2 has room for a; with anti-affinity its replica c already holds
    // n2's one place for the set.
    assert!(cordoned(None));
    assert!(!cordoned(Some(1)));
}
