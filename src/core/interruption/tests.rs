//! The interruption response, step by step.

use super::fixtures::*;
use super::*;
use crate::api::CheckpointHook;

fn interrupt(claim: &str, at: i64) -> Notice {
    Notice::SpotInterruption {
        claim: claim.into(),
        deadline: t(at + 120),
    }
}

fn cordon(claim: &str, reason: DisruptionReason) -> Action {
    Action::Cordon {
        claim: claim.into(),
        reason,
    }
}

fn checkpoint(pod: &str, claim: &str, by: i64) -> Action {
    Action::RequestCheckpoint {
        pod: pod.into(),
        claim: claim.into(),
        deadline: t(by),
    }
}

fn evict(pod: &str, claim: &str) -> Action {
    Action::Evict {
        pod: pod.into(),
        claim: claim.into(),
    }
}

fn delete(claim: &str, reason: DisruptionReason) -> Action {
    Action::Delete {
        claim: claim.into(),
        reason,
    }
}

fn rebalance_pool(action: RebalanceAction) -> Vec<crate::api::NodePool> {
    vec![pool_with("gpu", |s| {
        s.interruption.on_rebalance_recommendation = action
    })]
}

#[test]
fn a_pod_whose_checkpoint_takes_past_the_end_of_time_is_evicted_without_waiting_not_a_panic() {
    // No parser lets such a value through; the core must not panic on
    // one either (it would stop every decision of the round).
    let f = Fixture::new([node("n1").spot().pods([
        pod("a").checkpoints().checkpoint_takes(1e300),
        pod("b").checkpoints().checkpoint_takes(f64::INFINITY),
    ])]);
    let mut s = Interruptions::default();
    s.handle(&interrupt("n1", 0), &f.world(), t(0));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [
            cordon("n1", DisruptionReason::Interrupted),
            evict("a", "n1"),
            evict("b", "n1"),
        ]
    );
}

#[test]
fn a_notice_cordons_at_once_asks_opted_in_pods_to_checkpoint_and_evicts_the_others() {
    let mut f = Fixture::new([node("n1").spot().pods([pod("a").checkpoints(), pod("b")])]);
    let mut s = Interruptions::default();
    let learned = s.handle(&interrupt("n1", 0), &f.world(), t(0));
    assert_eq!(learned, Some(f.nodes[0].offering.clone()));
    // Checkpoint wait: min(120 s - 30 s drain grace, 0 + 90 s grace) = 90 s.
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [
            cordon("n1", DisruptionReason::Interrupted),
            checkpoint("a", "n1", 90),
            evict("b", "n1"),
        ]
    );
    // `a` acknowledges at 10 s: it is evicted then, not before.
    assert_eq!(s.decide(&f.world(), t(5)), []);
    *f.node_mut("n1") = node("n1")
        .spot()
        .pods([pod("a").checkpoints().acked(t(10))]);
    assert_eq!(s.decide(&f.world(), t(10)), [evict("a", "n1")]);
    // Once the node has no pods left it is deleted, once.
    *f.node_mut("n1") = node("n1").spot();
    assert_eq!(
        s.decide(&f.world(), t(12)),
        [delete("n1", DisruptionReason::Interrupted)]
    );
    assert_eq!(s.decide(&f.world(), t(13)), []);
}

#[test]
fn a_checkpoint_that_cannot_finish_before_the_deadline_is_not_requested_and_its_pod_leaves_at_once()
{
    // `slow` takes 4 minutes, `big` has 8 GPUs (3.6 minutes by default),
    // `quick` 60 s: only `quick` fits the 90 s checkpoint wait.
    let f = Fixture::new([node("n1").spot().pods([
        pod("slow").checkpoints().checkpoint_takes(240.0),
        pod("big").checkpoints().gpus(8),
        pod("quick").checkpoints().checkpoint_takes(60.0),
    ])]);
    let mut s = Interruptions::default();
    s.handle(&interrupt("n1", 0), &f.world(), t(0));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [
            cordon("n1", DisruptionReason::Interrupted),
            checkpoint("quick", "n1", 90),
            evict("slow", "n1"),
            evict("big", "n1"),
        ]
    );
    // Under a rebalance recommendation the node stays: the slow pod is
    // asked, and given the time its checkpoint takes.
    let mut f = Fixture::new([node("n2")
        .spot()
        .pods([pod("slow").checkpoints().checkpoint_takes(240.0)])]);
    f.pools = rebalance_pool(RebalanceAction::Checkpoint);
    let mut s = Interruptions::default();
    s.handle(&rebalance("n2"), &f.world(), t(0));
    assert_eq!(s.decide(&f.world(), t(0)), [checkpoint("slow", "n2", 240)]);
}

#[test]
fn an_acknowledgement_from_before_the_request_does_not_count() {
    let f = Fixture::new([node("n1")
        .spot()
        .pods([pod("a").checkpoints().acked(t(-50))])]);
    let mut s = Interruptions::default();
    s.handle(&interrupt("n1", 0), &f.world(), t(0));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [
            cordon("n1", DisruptionReason::Interrupted),
            checkpoint("a", "n1", 90)
        ]
    );
    assert_eq!(s.decide(&f.world(), t(30)), []);
}

#[test]
fn the_pools_checkpoint_hook_opts_every_real_pod_in() {
    let mut f = Fixture::new([node("n1").spot().pods([pod("a"), pod("p").placeholder()])]);
    f.pools = vec![pool_with("gpu", |s| {
        s.interruption.checkpoint_hook = Some(CheckpointHook::on_port(8080))
    })];
    let mut s = Interruptions::default();
    s.handle(&interrupt("n1", 0), &f.world(), t(0));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [
            cordon("n1", DisruptionReason::Interrupted),
            checkpoint("a", "n1", 90),
            evict("p", "n1"),
        ]
    );
}

#[test]
fn a_pod_that_never_acknowledges_is_evicted_at_the_deadline_less_the_drain_grace() {
    let mut f = Fixture::new([node("n1").spot().pods([pod("a").checkpoints()])]);
    // A grace period of 100 s would run past 120 s - 30 s.
    f.pools = vec![pool_with("gpu", |s| {
        s.interruption.checkpoint_grace_period = "100s".into()
    })];
    let mut s = Interruptions::default();
    s.handle(&interrupt("n1", 0), &f.world(), t(0));
    assert_eq!(s.decide(&f.world(), t(0)).len(), 2);
    assert_eq!(s.next_deadline(), Some(t(90)));
    assert_eq!(s.decide(&f.world(), t(89)), []);
    assert_eq!(s.decide(&f.world(), t(90)), [evict("a", "n1")]);
    assert_eq!(s.next_deadline(), Some(t(120)));
}

#[test]
fn a_short_grace_period_ends_the_checkpoint_wait_before_the_drain_grace_does() {
    let mut f = Fixture::new([node("n1").spot().pods([pod("a").checkpoints()])]);
    f.pools = vec![pool_with("gpu", |s| {
        s.interruption.checkpoint_grace_period = "20s".into()
    })];
    let mut s = Interruptions::default();
    s.handle(&interrupt("n1", 0), &f.world(), t(0));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [
            cordon("n1", DisruptionReason::Interrupted),
            checkpoint("a", "n1", 20)
        ]
    );
    assert_eq!(s.decide(&f.world(), t(20)), [evict("a", "n1")]);
}

#[test]
fn a_pdb_with_no_disruptions_allowed_blocks_eviction_until_the_deadline_not_after() {
    let mut f = Fixture::new([node("n1").spot().pods([pod("b").pdb(0)])]);
    f.pdbs = vec![pdb("ml/b", 0)];
    let mut s = Interruptions::default();
    s.handle(&interrupt("n1", 0), &f.world(), t(0));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [cordon("n1", DisruptionReason::Interrupted)]
    );
    assert_eq!(s.decide(&f.world(), t(119)), []);
    assert_eq!(
        s.decide(&f.world(), t(120)),
        [
            evict("b", "n1"),
            delete("n1", DisruptionReason::Interrupted)
        ]
    );
    assert_eq!(s.decide(&f.world(), t(121)), []);
}

/// Fixture `n1` as a node in Capacity Block `cr-1` ending at `end`,
/// with a checkpointing pod, and the catalog knowing the block.
fn in_block(end: i64) -> Fixture {
    in_reservation(crate::catalog::ReservationKind::CapacityBlock, end)
}

/// [`in_block`] for a reservation of `kind`.
fn in_reservation(kind: crate::catalog::ReservationKind, end: i64) -> Fixture {
    let mut n = node("n1").pods([pod("a").checkpoints()]);
    n.state.labels.insert(
        crate::api::labels::CAPACITY_RESERVATION_ID.into(),
        "cr-1".into(),
    );
    let mut f = Fixture::new([n]);
    let block = crate::catalog::Reservation {
        id: "cr-1".into(),
        kind,
        instance_type: "g5.xlarge".into(),
        region: REGION.into(),
        zone_id: "use1-az1".into(),
        total: 1,
        available: 0,
        start: Some(t(-86_400)),
        end: Some(t(end)),
        price_per_hour: 0.0,
    };
    f.catalog = crate::catalog::Catalog::default().with_reservations(
        &[block],
        t(0),
        chrono::TimeDelta::zero(),
    );
    f
}

#[test]
fn a_node_is_drained_like_an_interrupted_one_once_its_block_is_within_the_lead_of_its_end() {
    let lead = Duration::from_secs(40 * 60);
    let f = in_block(3600);
    // An hour before the end: nothing yet, but the clock knows when.
    assert!(reservation_endings(&f.world(), t(0), lead).is_empty());
    assert_eq!(
        next_reservation_ending(&f.world(), t(0), lead),
        Some(t(3600 - 2400))
    );
    let at = 3600 - 2400;
    let notices = reservation_endings(&f.world(), t(at), lead);
    assert_eq!(
        notices,
        [Notice::ReservationEnding {
            claim: "n1".into(),
            end: t(3600)
        }]
    );
    let mut s = Interruptions::default();
    // Not evidence about any spot pool.
    assert_eq!(s.handle(&notices[0], &f.world(), t(at)), None);
    assert!(s.is_handling("n1"));
    assert_eq!(s.pods_needing_replacement(&f.world()).len(), 1);
    assert_eq!(
        s.decide(&f.world(), t(at)),
        [
            cordon("n1", DisruptionReason::Interrupted),
            checkpoint("a", "n1", at + 90)
        ]
    );
    // EC2's warning arriving as well changes nothing.
    s.handle(&notices[0], &f.world(), t(at + 10));
    assert_eq!(s.decide(&f.world(), t(at + 10)), []);
    assert_eq!(s.decide(&f.world(), t(at + 90)), [evict("a", "n1")]);
    // Deleted at the block's end at the latest.
    assert_eq!(
        s.decide(&f.world(), t(3600)),
        [delete("n1", DisruptionReason::Interrupted)]
    );
}

#[test]
fn a_node_of_an_on_demand_reservation_with_an_end_date_is_left_running_at_its_end() {
    // EC2 keeps such instances running as plain on-demand ones.
    let lead = Duration::from_secs(40 * 60);
    let f = in_reservation(crate::catalog::ReservationKind::OnDemand, 3600);
    assert_eq!(next_reservation_ending(&f.world(), t(0), lead), None);
    for at in [1200, 3600, 7200] {
        assert!(reservation_endings(&f.world(), t(at), lead).is_empty());
    }
}

#[test]
fn a_block_warned_of_before_the_lead_takes_no_launch_until_its_end() {
    // The catalog (lead zero) still offers the block an hour before its
    // end; EC2's warning about it says otherwise.
    let f = in_block(3600);
    let offering = f.catalog.reservation("cr-1").unwrap().offering();
    let mut s = Interruptions::default();
    assert!(!s.blocks(&offering, t(0)));
    let warning = Notice::ReservationEnding {
        claim: "n1".into(),
        end: t(3600),
    };
    s.handle(&warning, &f.world(), t(0));
    assert!(s.blocks(&offering, t(0)));
    assert!(s.blocks(&offering, t(3599)));
    // Another reservation of the same type and zone still takes launches.
    let mut other = offering.clone();
    other.reservation.as_mut().unwrap().id = "cr-2".into();
    assert!(!s.blocks(&other, t(0)));
    // Forgotten once the block has ended.
    s.decide(&f.world(), t(3600));
    assert!(!s.blocks(&offering, t(3600)));
}

#[test]
fn evictions_issued_in_one_call_count_against_the_pdb() {
    let mut f = Fixture::new([node("n1").spot().pods([pod("c").pdb(0), pod("d").pdb(0)])]);
    f.pdbs = vec![pdb("ml/cd", 1)];
    let mut s = Interruptions::default();
    s.handle(&interrupt("n1", 0), &f.world(), t(0));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [
            cordon("n1", DisruptionReason::Interrupted),
            evict("c", "n1")
        ]
    );
    // The driver refreshed the PDB: it allows one more.
    assert_eq!(s.decide(&f.world(), t(1)), [evict("d", "n1")]);
}

#[test]
fn repeated_decide_calls_and_repeated_notices_do_not_repeat_actions() {
    let f = Fixture::new([node("n1").spot().pods([pod("a").checkpoints(), pod("b")])]);
    let mut s = Interruptions::default();
    assert!(s.handle(&interrupt("n1", 0), &f.world(), t(0)).is_some());
    assert_eq!(s.decide(&f.world(), t(0)).len(), 3);
    assert_eq!(s.decide(&f.world(), t(0)), []);
    assert_eq!(s.handle(&interrupt("n1", 1), &f.world(), t(1)), None);
    assert_eq!(s.handle(&rebalance("n1"), &f.world(), t(1)), None);
    assert_eq!(s.decide(&f.world(), t(1)), []);
}

fn rebalance(claim: &str) -> Notice {
    Notice::Rebalance {
        claim: claim.into(),
    }
}

#[test]
fn notices_for_unknown_claims_are_ignored() {
    let f = Fixture::new([node("n1").spot().pods([pod("a")])]);
    let mut s = Interruptions::default();
    assert_eq!(s.handle(&interrupt("ghost", 0), &f.world(), t(0)), None);
    s.handle(&rebalance("ghost"), &f.world(), t(0));
    s.handle(
        &Notice::Terminated {
            claim: "ghost".into(),
        },
        &f.world(),
        t(0),
    );
    assert_eq!(s.decide(&f.world(), t(0)), []);
    assert_eq!(s.next_deadline(), None);
    assert!(s.pods_needing_replacement(&f.world()).is_empty());
}

#[test]
fn a_terminated_instance_is_deleted_at_once_and_once() {
    let f = Fixture::new([node("n1").spot().pods([pod("a")])]);
    let mut s = Interruptions::default();
    let gone = Notice::Terminated { claim: "n1".into() };
    assert_eq!(s.handle(&gone, &f.world(), t(0)), None);
    assert_eq!(s.next_deadline(), Some(t(0)));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [delete("n1", DisruptionReason::Terminated)]
    );
    s.handle(&gone, &f.world(), t(1));
    assert_eq!(s.decide(&f.world(), t(1)), []);
}

#[test]
fn interrupted_pods_need_replacement_until_they_are_evicted() {
    let f = Fixture::new([
        node("n1")
            .spot()
            .pods([pod("a").checkpoints(), pod("b"), pod("p").placeholder()]),
        node("n2").pods([pod("c")]),
    ]);
    let mut s = Interruptions::default();
    s.handle(&interrupt("n1", 0), &f.world(), t(0));
    let names = |s: &Interruptions| -> Vec<String> {
        s.pods_needing_replacement(&f.world())
            .into_iter()
            .map(|p| p.name)
            .collect()
    };
    assert_eq!(names(&s), ["a", "b"]);
    s.decide(&f.world(), t(0));
    assert_eq!(names(&s), ["a"], "b was evicted, its new pod is pending");
}

#[test]
fn interrupted_and_capacity_starved_offerings_are_unavailable_for_the_ttl() {
    let f = Fixture::new([node("n1").spot()]);
    let mut s = Interruptions::default();
    let key = f.nodes[0].offering.clone();
    s.handle(&interrupt("n1", 0), &f.world(), t(0));
    let other = OfferingKey {
        zone: "use1-az2".into(),
        ..key.clone()
    };
    s.handle(
        &Notice::InsufficientCapacity {
            offering: other.clone(),
        },
        &f.world(),
        t(60),
    );
    // Both stay out for the TTL (Karpenter's 3 minutes), the interrupted
    // pool too, though its market expects it closed for longer: a closed
    // pool refuses the next launch, and that keeps it out again.
    let ttl = Config::default().unavailable_ttl.as_secs() as i64;
    assert_eq!(ttl, 180);
    let closure_s = f
        .catalog
        .market(&key.instance_type, &key.zone)
        .mean_closure_hours()
        * 3600.0;
    assert!(closure_s > ttl as f64, "{closure_s}");
    assert!(s.is_unavailable(&key, t(ttl - 1)));
    assert!(!s.is_unavailable(&key, t(ttl)));
    assert_eq!(
        s.unavailable(t(ttl - 1)).cloned().collect::<Vec<_>>(),
        [key.clone(), other.clone()]
    );
    assert_eq!(s.unavailable(t(ttl)).collect::<Vec<_>>(), [&other]);
    assert_eq!(s.unavailable(t(ttl + 60)).count(), 0);
    let offering = crate::catalog::Offering {
        instance_type: other.instance_type.clone(),
        region: REGION.into(),
        zone_id: other.zone.clone(),
        capacity_type: other.capacity_type,
        price_per_hour: 0.5,
        price_source: crate::catalog::PriceSource::SpotObserved,
        interruption_bucket: None,
        market: None,
        reservation: None,
    };
    assert!(s.blocks(&offering, t(ttl + 59)));
    assert!(!s.blocks(&offering, t(ttl + 60)));
    // The plan's filter, gathered once, says what `blocks` says of the two
    // pools out and of one never out.
    let as_offering = |k: &OfferingKey, zone: &str| crate::catalog::Offering {
        instance_type: k.instance_type.clone(),
        zone_id: zone.into(),
        capacity_type: k.capacity_type,
        ..offering.clone()
    };
    let probes = [
        as_offering(&key, &key.zone),
        as_offering(&other, &other.zone),
        as_offering(&key, "use1-az9"),
    ];
    for at in [0, ttl - 1, ttl, ttl + 59, ttl + 60] {
        let blocker = s.blocker(t(at));
        let said: Vec<bool> = probes.iter().map(&blocker).collect();
        let blocks: Vec<bool> = probes.iter().map(|o| s.blocks(o, t(at))).collect();
        assert_eq!(said, blocks, "at {at}");
        assert_eq!(said, [at < ttl, at < ttl + 60, false], "at {at}");
    }
}

#[test]
fn rebalance_with_ignore_does_nothing() {
    let mut f = Fixture::new([node("n1").spot().pods([pod("a").checkpoints()])]);
    f.pools = rebalance_pool(RebalanceAction::Ignore);
    let mut s = Interruptions::default();
    s.handle(&rebalance("n1"), &f.world(), t(0));
    assert_eq!(s.decide(&f.world(), t(0)), []);
    assert!(!s.is_handling("n1"));
}

#[test]
fn rebalance_with_checkpoint_asks_opted_in_pods_once_and_evicts_nothing() {
    let mut f = Fixture::new([node("n1").spot().pods([pod("a").checkpoints(), pod("b")])]);
    f.pools = rebalance_pool(RebalanceAction::Checkpoint);
    let mut s = Interruptions::default();
    s.handle(&rebalance("n1"), &f.world(), t(0));
    assert_eq!(s.decide(&f.world(), t(0)), [checkpoint("a", "n1", 90)]);
    assert_eq!(s.decide(&f.world(), t(500)), []);
    assert!(s.pods_needing_replacement(&f.world()).is_empty());
    // A later interruption notice is a new notice: ask again.
    s.handle(&interrupt("n1", 600), &f.world(), t(600));
    assert_eq!(
        s.decide(&f.world(), t(600)),
        [
            cordon("n1", DisruptionReason::Interrupted),
            checkpoint("a", "n1", 690),
            evict("b", "n1"),
        ]
    );
}

#[test]
fn rebalance_with_replace_launches_replacements_and_drains_once_they_are_ready() {
    let mut f = Fixture::new([node("n1").spot().pods([pod("a")])]);
    f.pools = rebalance_pool(RebalanceAction::Replace);
    let mut s = Interruptions::default();
    s.handle(&rebalance("n1"), &f.world(), t(0));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [cordon("n1", DisruptionReason::Rebalance)]
    );
    assert_eq!(s.pods_needing_replacement(&f.world())[0].name, "a");
    // A pod with DRA claims is planned once it is pending again.
    let claims = &mut f.nodes[0].pods[0].pod.resource_claims;
    claims.push(crate::cluster::ClaimRef {
        name: "gpu".into(),
        claim: None,
        template: Some("one-gpu".into()),
        generated: None,
        group: None,
    });
    assert!(s.pods_needing_replacement(&f.world()).is_empty());
    f.nodes[0].pods[0].pod.resource_claims.clear();
    // The replacement is on its way: keep running.
    f.nodes.push(node("n2").not_ready());
    assert_eq!(s.decide(&f.world(), t(60)), []);
    // It is ready: drain.
    *f.node_mut("n2") = node("n2");
    assert_eq!(s.decide(&f.world(), t(120)), [evict("a", "n1")]);
    *f.node_mut("n1") = node("n1").spot().cordoned();
    assert_eq!(
        s.decide(&f.world(), t(121)),
        [delete("n1", DisruptionReason::Rebalance)]
    );
}

#[test]
fn rebalance_with_drain_checkpoints_then_evicts_and_always_honours_pdbs() {
    let mut f = Fixture::new([node("n1")
        .spot()
        .pods([pod("a").checkpoints(), pod("b").pdb(0)])]);
    f.pools = rebalance_pool(RebalanceAction::Drain);
    f.pdbs = vec![pdb("ml/b", 0)];
    let mut s = Interruptions::default();
    assert_eq!(s.handle(&rebalance("n1"), &f.world(), t(0)), None);
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [
            cordon("n1", DisruptionReason::Rebalance),
            checkpoint("a", "n1", 90)
        ]
    );
    assert_eq!(s.next_deadline(), Some(t(90)));
    assert_eq!(s.decide(&f.world(), t(90)), [evict("a", "n1")]);
    // Long past the soft deadline, the PDB still holds.
    assert_eq!(s.decide(&f.world(), t(3600)), []);
    assert_eq!(s.next_deadline(), None);
    f.pdbs[0].disruptions_allowed = 1;
    assert_eq!(s.decide(&f.world(), t(3601)), [evict("b", "n1")]);
}

#[test]
fn rebalance_drains_start_within_the_pools_disruption_budget() {
    let mut f = Fixture::new([
        node("n1").spot().pods([pod("a")]),
        node("n2").spot().pods([pod("b").checkpoints()]),
    ]);
    f.pools = vec![pool_with("gpu", |s| {
        s.interruption.on_rebalance_recommendation = RebalanceAction::Drain;
        s.disruption.budgets = vec![crate::api::Budget {
            nodes: "1".into(),
            ..Default::default()
        }];
    })];
    let mut s = Interruptions::default();
    s.handle(&rebalance("n1"), &f.world(), t(0));
    s.handle(&rebalance("n2"), &f.world(), t(0));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [cordon("n1", DisruptionReason::Rebalance), evict("a", "n1")]
    );
    assert_eq!(s.decide(&f.world(), t(100)), []);
    // n1 is gone: n2 starts, and its checkpoint wait starts with it.
    f.nodes.remove(0);
    assert_eq!(
        s.decide(&f.world(), t(200)),
        [
            cordon("n2", DisruptionReason::Rebalance),
            checkpoint("b", "n2", 290)
        ]
    );
}

#[test]
fn rebalance_drain_of_a_do_not_disrupt_node_only_asks_for_checkpoints() {
    let mut f = Fixture::new([node("n1")
        .spot()
        .do_not_disrupt()
        .pods([pod("a").checkpoints()])]);
    f.pools = rebalance_pool(RebalanceAction::Drain);
    let mut s = Interruptions::default();
    s.handle(&rebalance("n1"), &f.world(), t(0));
    assert_eq!(s.decide(&f.world(), t(0)), [checkpoint("a", "n1", 90)]);
    assert_eq!(s.decide(&f.world(), t(600)), []);
}

#[test]
fn nodes_that_left_the_world_are_forgotten() {
    let mut f = Fixture::new([node("n1").spot().pods([pod("a")])]);
    let mut s = Interruptions::default();
    s.handle(&interrupt("n1", 0), &f.world(), t(0));
    s.decide(&f.world(), t(0));
    f.nodes.clear();
    assert_eq!(s.decide(&f.world(), t(1)), []);
    assert!(!s.is_handling("n1"));
    // Only the offering's time out is left.
    assert_eq!(
        s.next_deadline(),
        Some(after(t(0), Config::default().unavailable_ttl))
    );
}

fn scheduled(claim: &str, start: Option<i64>) -> Notice {
    Notice::ScheduledChange {
        claim: claim.into(),
        start: start.map(t),
    }
}

#[test]
fn a_scheduled_change_cordons_at_once_and_drains_once_a_replacement_is_ready() {
    // A retirement in a day, whatever the pool's rebalance action (Ignore
    // by default).
    let mut f = Fixture::new([node("n1").pods([pod("a").checkpoints(), pod("b")])]);
    let mut s = Interruptions::default();
    assert_eq!(
        s.handle(&scheduled("n1", Some(86_400)), &f.world(), t(0)),
        None,
        "no evidence of any spot pool's rate"
    );
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [cordon("n1", DisruptionReason::ScheduledChange)]
    );
    assert!(s.is_handling("n1"));
    let replace: Vec<String> = s
        .pods_needing_replacement(&f.world())
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(replace, ["a", "b"], "replacements launch at once");
    // The replacement is on its way: the pods keep running.
    f.nodes.push(node("n2").not_ready());
    assert_eq!(s.decide(&f.world(), t(60)), []);
    // It is ready: the drain starts, checkpoint first.
    *f.node_mut("n2") = node("n2");
    assert_eq!(
        s.decide(&f.world(), t(300)),
        [checkpoint("a", "n1", 390), evict("b", "n1")]
    );
    assert_eq!(s.checkpoint_until("n1"), Some(t(390)));
    assert_eq!(s.decide(&f.world(), t(390)), [evict("a", "n1")]);
    *f.node_mut("n1") = node("n1").cordoned();
    assert_eq!(
        s.decide(&f.world(), t(391)),
        [delete("n1", DisruptionReason::ScheduledChange)]
    );
}

#[test]
fn a_scheduled_change_without_room_drains_before_its_start_and_evicts_everything_at_it() {
    let mut f = Fixture::new([node("n1").pods([
        pod("a").checkpoints(),
        pod("b").pdb(0),
        pod("c").do_not_disrupt(),
    ])]);
    f.pdbs = vec![pdb("ml/b", 0)];
    let mut s = Interruptions::default();
    s.handle(&scheduled("n1", Some(3600)), &f.world(), t(0));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [cordon("n1", DisruptionReason::ScheduledChange)]
    );
    // The drain starts at the latest when the checkpoint wait (90 s) and
    // the drain grace (30 s) are all that is left before the start.
    assert_eq!(s.next_deadline(), Some(t(3600 - 120)));
    assert_eq!(s.decide(&f.world(), t(1000)), []);
    assert_eq!(
        s.decide(&f.world(), t(3480)),
        [checkpoint("a", "n1", 3570), evict("c", "n1")],
        "not voluntary: do-not-disrupt does not hold it"
    );
    assert_eq!(s.decide(&f.world(), t(3570)), [evict("a", "n1")]);
    assert_eq!(s.next_deadline(), Some(t(3600)));
    // At the start, the PDB no longer holds: the instance is going.
    assert_eq!(
        s.decide(&f.world(), t(3600)),
        [
            evict("b", "n1"),
            delete("n1", DisruptionReason::ScheduledChange)
        ]
    );
}

#[test]
fn a_spot_notice_supersedes_a_scheduled_change_which_supersedes_a_rebalance() {
    let mut f = Fixture::new([
        node("n1").spot().pods([pod("a")]),
        node("n2").spot().pods([pod("b")]),
    ]);
    f.pools = rebalance_pool(RebalanceAction::Checkpoint);
    let mut s = Interruptions::default();
    s.handle(&scheduled("n1", Some(86_400)), &f.world(), t(0));
    s.handle(&rebalance("n1"), &f.world(), t(0));
    s.handle(&rebalance("n2"), &f.world(), t(0));
    s.handle(&scheduled("n2", Some(86_400)), &f.world(), t(0));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [
            cordon("n1", DisruptionReason::ScheduledChange),
            cordon("n2", DisruptionReason::ScheduledChange)
        ]
    );
    // The same change again, later: nothing new. Earlier: it moves up.
    s.handle(&scheduled("n2", Some(90_000)), &f.world(), t(1));
    assert_eq!(s.decide(&f.world(), t(1)), []);
    s.handle(&scheduled("n2", Some(600)), &f.world(), t(2));
    assert_eq!(s.next_deadline(), Some(t(480)));
    s.handle(&interrupt("n1", 10), &f.world(), t(10));
    assert_eq!(s.decide(&f.world(), t(10)), [evict("a", "n1")]);
    assert_eq!(
        s.next_deadline(),
        Some(t(100)),
        "the spot notice's checkpoint wait"
    );
}

#[test]
fn a_scheduled_change_without_a_start_waits_for_its_replacement() {
    let mut f = Fixture::new([node("n1").pods([pod("a")])]);
    let mut s = Interruptions::default();
    s.handle(&scheduled("n1", None), &f.world(), t(0));
    assert_eq!(
        s.decide(&f.world(), t(0)),
        [cordon("n1", DisruptionReason::ScheduledChange)]
    );
    assert_eq!(s.decide(&f.world(), t(86_400 * 365)), []);
    f.nodes.push(node("n2"));
    assert_eq!(s.decide(&f.world(), t(86_400 * 366)), [evict("a", "n1")]);
}
