//! Capacity Blocks: EC2's expiry warning, or the clock without it,
//! drains a block's node in time.

use super::*;

/// The Capacity Block of the block tests.
const BLOCK: &str = "cr-0b10c000000000001";

/// [`pool`], also allowing reserved capacity (so that a replacement that
/// is not in the ending block shows it was refused, not never offered).
fn reserved_pool() -> NodePool {
    let mut p = pool();
    p.spec
        .capacity_types
        .insert(0, quartermaster::catalog::CapacityType::Reserved);
    p
}

/// The embedded catalog with [`BLOCK`], two g5.xlarge (one taken) in
/// `zone` ending at `end`, as the controller's reservations task hands it
/// over at `now`.
fn block_catalog(zone: &str, end: Time, now: Time) -> Arc<Catalog> {
    let block = quartermaster::catalog::Reservation {
        id: BLOCK.into(),
        kind: quartermaster::catalog::ReservationKind::CapacityBlock,
        instance_type: "g5.xlarge".into(),
        region: REGION.into(),
        zone_id: zone.into(),
        total: 2,
        available: 1,
        start: None,
        end: Some(end),
        price_per_hour: 0.0,
    };
    let lead = chrono::TimeDelta::minutes(40);
    Arc::new((*catalog()).clone().with_reservations(&[block], now, lead))
}

/// A node `ip-10-0-0-1` in [`BLOCK`] (ending at `end`), launched into it at
/// 0, with an opted-in pod `ml/train-0`: the store, the claim's name, its
/// provider ID and the block's zone.
async fn block_node(end: Time) -> (Store, String, String, String) {
    let mut req = spot_request("gpu-block");
    req.offering.capacity_type = quartermaster::catalog::CapacityType::Reserved;
    req.reservation = Some(BLOCK.into());
    req.price_per_hour = 0.0;
    let zone = req.offering.zone.clone();
    let at_launch = block_catalog(&zone, end, t(0));
    let cloud = Mutex::new(
        SimulatedCloud::new(
            at_launch.clone(),
            SimulatedCloudConfig::new(7, REGION, t(0)),
        )
        .unwrap(),
    );
    let claim = claim_in(&req, t(0), &at_launch, &[reserved_pool()]);
    assert_eq!(claim.spec.labels[l::CAPACITY_RESERVATION_ID], BLOCK);
    let (claim, provider_id) = ready(&cloud, &req, claim, "ip-10-0-0-1").await;
    let gpu_taint = json!([{"key": l::TAINT_GPU, "effect": "NoSchedule"}]);
    let s = store_with(
        vec![reserved_pool()],
        vec![gpu_pod(
            "train-0",
            Some("ip-10-0-0-1"),
            json!({l::CHECKPOINT_ENABLED: "true"}),
        )],
        vec![node(
            "ip-10-0-0-1",
            &provider_id,
            gpu_taint,
            true,
            Some("1"),
        )],
        vec![claim.clone()],
    );
    (s, claim.name_any(), provider_id, zone)
}

/// The deadlines of the checkpoint requests among `actions`, by pod.
fn checkpoint_deadlines(actions: &[Action]) -> Vec<(String, Time)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::RequestCheckpoint { pod, deadline, .. } => Some((pod.clone(), *deadline)),
            _ => None,
        })
        .collect()
}

fn cordons(actions: &[Action], claim: &str) -> usize {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Cordon { claim: c, .. } if c == claim))
        .count()
}

#[tokio::test]
async fn ec2s_block_expiry_warning_drains_the_blocks_node_checkpoint_replacement_then_eviction() {
    let end = t(20_000);
    let (s, claim, provider_id, zone) = block_node(end).await;
    // EC2's warning comes a little before the clock's own 40-minute lead.
    let warning_at = end - chrono::TimeDelta::minutes(41);
    let catalog = block_catalog(&zone, end, warning_at);
    let mut core = Core::new(Config::default());
    let before = decide_at(&mut core, &s, &catalog, warning_at);
    assert_eq!(cordons(&before, &claim), 0, "{before:?}");

    // The warning names the block; the controller finds its claim by
    // label, without writing anything.
    let warning = quartermaster::cloud::InstanceNotice {
        instance_id: BLOCK.into(),
        kind: quartermaster::cloud::NoticeKind::ReservationEnding { end },
        time: warning_at,
        id: "e-block".into(),
    };
    let views = s.read(|s| {
        s.claims
            .values()
            .map(|c| s.claim_view(c))
            .collect::<Vec<_>>()
    });
    let (client, verifier) = Scenario::new().run();
    let mut handler = quartermaster::controller::interruptions::NoticeHandler::new();
    let handled = handler
        .handle(&warning, &views, &KubeApi::new(client), true, warning_at)
        .await;
    verifier.finish().await;
    assert_eq!(
        handled.outcome,
        quartermaster::cloud::NoticeOutcome::Recorded
    );
    let expected = Notice::ReservationEnding {
        claim: claim.clone(),
        end,
    };
    assert_eq!(handled.notices, std::slice::from_ref(&expected));
    notify(&mut core, &s, &catalog, &expected, warning_at);

    // Cordon and checkpoint request at once, within the pool's grace
    // (90 s, well before the block's end less the drain grace); no
    // eviction before the acknowledgement.
    let first = decide_at(&mut core, &s, &catalog, warning_at);
    assert_eq!(cordons(&first, &claim), 1, "{first:?}");
    assert_eq!(
        checkpoint_deadlines(&first),
        [(
            "ml/train-0".to_string(),
            warning_at + chrono::TimeDelta::seconds(90)
        )],
        "{first:?}"
    );
    assert!(!first.iter().any(|a| matches!(a, Action::Evict { .. })));
    execute_scripted(&s, &first, "ip-10-0-0-1", warning_at).await;
    s.apply(cordoned("ip-10-0-0-1", &provider_id));
    let deadline = warning_at + chrono::TimeDelta::seconds(90);
    s.apply(checkpointing_pod(l::CHECKPOINT_REQUESTED, deadline));

    // The pod is demand again from the warning on: its replacement is
    // launched while it writes its checkpoint, outside the ending block
    // (which takes no launch this close to its end).
    let mut replacement = None;
    for k in 1..5 {
        let now = warning_at + chrono::TimeDelta::seconds(k);
        let acts = step_without_evictions(&mut core, &s, &catalog, now).await;
        if let Some(r) = launches(&acts).first() {
            replacement = Some((*r).clone());
        }
        if replacement.is_some() {
            break;
        }
    }
    let replacement = replacement.expect("a replacement is launched before the eviction");
    assert_eq!(replacement.pods, ["ml/train-0"]);
    assert_ne!(
        replacement.offering.capacity_type,
        quartermaster::catalog::CapacityType::Reserved,
        "{replacement:?}"
    );
    assert_eq!(replacement.reservation, None);

    // The workload acknowledges: the pod is evicted, well before the end.
    let ack_at = warning_at + chrono::TimeDelta::seconds(30);
    let now = ack_at + chrono::TimeDelta::seconds(1);
    let acts = acknowledged(&mut core, &s, &catalog, ack_at, now);
    execute_scripted(&s, &acts, "ip-10-0-0-1", now).await;
}

#[tokio::test]
async fn without_ec2s_warning_the_clock_drains_a_block_node_and_a_late_look_checkpoints_by_the_blocks_end(
) {
    let end = t(20_000);
    let (s, claim, _, zone) = block_node(end).await;
    let lead = chrono::TimeDelta::minutes(40);
    let catalog = block_catalog(&zone, end, end - lead);
    let mut core = Core::new(Config::default());
    let early = end - lead - chrono::TimeDelta::seconds(1);
    let acts = decide_at(&mut core, &s, &catalog, early);
    assert_eq!(cordons(&acts, &claim), 0, "{acts:?}");
    assert_eq!(
        core.next_deadline(
            &world_parts(&snapshot(&s), &catalog, REGION, early, DEFAULT_MAX_PODS)
                .world(&catalog, REGION),
            early
        ),
        Some(end - lead),
        "the controller wakes up at the lead"
    );
    let at_lead = decide_at(&mut core, &s, &catalog, end - lead);
    assert_eq!(cordons(&at_lead, &claim), 1, "{at_lead:?}");
    assert_eq!(
        checkpoint_deadlines(&at_lead),
        [(
            "ml/train-0".to_string(),
            end - lead + chrono::TimeDelta::seconds(90)
        )]
    );
    execute_scripted(&s, &at_lead, "ip-10-0-0-1", end - lead).await;

    // A controller that first sees the node a minute before the end (a
    // restart, a long outage) asks for the checkpoint by the block's end
    // less the drain grace, not by its usual grace period.
    let late = end - chrono::TimeDelta::seconds(60);
    let catalog = block_catalog(&zone, end, late);
    let mut restarted = Core::new(Config::default());
    let acts = decide_at(&mut restarted, &s, &catalog, late);
    assert_eq!(
        checkpoint_deadlines(&acts),
        [(
            "ml/train-0".to_string(),
            end - chrono::TimeDelta::seconds(30)
        )],
        "{acts:?}"
    );
    execute_scripted(&s, &acts, "ip-10-0-0-1", late).await;
}
