use super::*;
use crate::catalog::{InstanceType, InterruptionBucket, Offering, PriceSource};
use chrono::TimeZone;

const REGION: &str = "us-east-1";
const ZONES: [&str; 2] = ["use1-az1", "use1-az2"];

pub(super) fn t0() -> Time {
    chrono::Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap()
}

fn secs(s: i64) -> TimeDelta {
    TimeDelta::seconds(s)
}

fn instance_type(name: &str, gpus: u32) -> InstanceType {
    let it = InstanceType::bare(name, 8, 32768);
    if gpus > 0 {
        it.with_gpus("A10G", gpus, 24576)
    } else {
        it
    }
}

/// g5.xlarge ($1.00 on demand, $0.40 spot), p5.48xlarge ($55 / $20),
/// m5.large ($0.10 / $0.04), in two zones.
pub(super) fn catalog() -> Arc<Catalog> {
    let types = [
        (instance_type("g5.xlarge", 1), 1.0, 0.4),
        (instance_type("p5.48xlarge", 8), 55.0, 20.0),
        (instance_type("m5.large", 0), 0.1, 0.04),
    ];
    let mut offerings = Vec::new();
    for (it, on_demand, spot) in &types {
        for zone in ZONES {
            let offering = |capacity_type, price_per_hour, price_source, bucket| Offering {
                instance_type: it.name.clone(),
                region: REGION.into(),
                zone_id: zone.into(),
                capacity_type,
                price_per_hour,
                price_source,
                interruption_bucket: bucket,
                market: None,
                reservation: None,
            };
            offerings.push(offering(
                CapacityType::OnDemand,
                *on_demand,
                PriceSource::OnDemand,
                None,
            ));
            offerings.push(offering(
                CapacityType::Spot,
                *spot,
                PriceSource::SpotObserved,
                Some(InterruptionBucket(2)),
            ));
        }
    }
    Arc::new(Catalog::from_parts(types.map(|t| t.0), offerings))
}

fn spot(it: &str, zone: &str) -> OfferingKey {
    OfferingKey {
        instance_type: it.into(),
        zone: zone.into(),
        capacity_type: CapacityType::Spot,
    }
}

pub(super) fn on_demand(it: &str, zone: &str) -> OfferingKey {
    OfferingKey {
        capacity_type: CapacityType::OnDemand,
        ..spot(it, zone)
    }
}

pub(super) fn claim(name: &str, offering: OfferingKey) -> ClaimRequest {
    ClaimRequest {
        cluster_placement: false,
        claim: name.into(),
        nodepool: "gpu".into(),
        offering,
        price_per_hour: 0.0,
        pods: Vec::new(),
        prewarm_window: None,
        reservation: None,
    }
}

/// The advisor market (constant rates per pool), which these tests pin;
/// the calibrated market's tests use [`calibrated`].
fn config(seed: u64) -> SimulatedCloudConfig {
    let mut c = SimulatedCloudConfig::new(seed, REGION, t0());
    c.interruptions.market = Some(crate::catalog::MarketModel::Advisor);
    c
}

fn cloud(config: SimulatedCloudConfig) -> SimulatedCloud {
    SimulatedCloud::new(catalog(), config).unwrap()
}

/// A config whose spot pools are interrupted about `per_hour` times an hour.
fn stormy(seed: u64, per_hour: f64) -> SimulatedCloudConfig {
    let mut c = config(seed);
    c.interruptions.rate_multiplier = per_hour / InterruptionBucket(2).rate_per_hour();
    c
}

/// Every event until nothing is pending (or `until`).
fn run(cloud: &mut SimulatedCloud, until: Time) -> Vec<CloudEvent> {
    let mut events = Vec::new();
    while let Some(t) = cloud.next_event_time().filter(|t| *t <= until) {
        events.extend(cloud.advance(t));
    }
    events
}

fn run_to_end(cloud: &mut SimulatedCloud) -> Vec<CloudEvent> {
    run(cloud, t0() + TimeDelta::days(3650))
}

fn of<'a>(events: &'a [CloudEvent], claim: &str) -> Vec<&'a CloudEvent> {
    events.iter().filter(|e| e.claim() == Some(claim)).collect()
}

fn expect_boot(events: &[CloudEvent], claim: &str) -> (Time, Time, Time) {
    match of(events, claim)[..] {
        [CloudEvent::Running { at: r, .. }, CloudEvent::Registered { at: g, .. }, CloudEvent::Ready { at: d, .. }, ..] => {
            (*r, *g, *d)
        }
        ref other => panic!("{claim}: expected running, registered, ready; got {other:?}"),
    }
}

fn within(d: TimeDelta, lo: i64, hi: i64) -> bool {
    secs(lo) <= d && d <= secs(hi)
}

#[test]
fn launch_reports_running_then_registered_then_ready_at_plausible_times() {
    let mut c = cloud(config(1));
    for (name, it) in [("g", "g5.xlarge"), ("p", "p5.48xlarge"), ("m", "m5.large")] {
        let i = c
            .launch(&claim(name, on_demand(it, ZONES[0])), t0())
            .unwrap();
        assert_eq!(i.state, InstanceState::Pending);
        assert_eq!(i.launched_at, t0());
    }
    let events = run(&mut c, t0() + TimeDelta::hours(1));
    // Phase defaults with +-20% jitter: g5 90/90/60 s, p5 180/240/120 s,
    // m5 45/45/10 s.
    let (r, g, d) = expect_boot(&events, "g");
    assert!(within(r - t0(), 72, 108) && within(g - r, 72, 108) && within(d - g, 48, 72));
    let (r, g, d) = expect_boot(&events, "p");
    assert!(within(r - t0(), 144, 216) && within(g - r, 192, 288) && within(d - g, 96, 144));
    assert!(within(g - t0(), 6 * 60, 8 * 60), "p5 registers in 6-8 min");
    let (r, g, d) = expect_boot(&events, "m");
    assert!(within(r - t0(), 36, 54) && within(g - r, 36, 54) && within(d - g, 8, 12));
    for name in ["g", "p", "m"] {
        assert_eq!(c.describe(name).unwrap().state, InstanceState::Running);
    }
    // Events come out in time order.
    assert!(events.windows(2).all(|w| w[0].at() <= w[1].at()));
}

#[test]
fn a_wake_past_the_boot_milestones_still_reports_each_in_order_at_its_time() {
    // The simulator may skip waking for running and registered (it reads
    // neither); a later advance reports them with their own times.
    let mut c = cloud(config(1));
    c.launch(&claim("p", on_demand("p5.48xlarge", ZONES[0])), t0())
        .unwrap();
    let first = c.next_event_time().unwrap();
    let ready = c.next_notable_event_time().unwrap();
    assert!(first < ready);
    let events = c.advance(ready);
    let (r, g, d) = expect_boot(&events, "p");
    assert_eq!((r, d), (first, ready));
    assert!(r < g && g < d);
    assert_eq!(c.describe("p").unwrap().state, InstanceState::Running);
    // After Ready what comes next is notable (or nothing is pending).
    assert_eq!(c.next_notable_event_time(), c.next_event_time());
}

#[test]
fn launching_the_same_claim_twice_gives_one_instance() {
    let mut c = cloud(config(1));
    let first = c
        .launch(&claim("a", spot("g5.xlarge", ZONES[0])), t0())
        .unwrap();
    let again = c
        .launch(&claim("a", spot("g5.xlarge", ZONES[0])), t0() + secs(30))
        .unwrap();
    assert_eq!(first, again);
    assert_eq!(c.instances().len(), 1);
    let events = run(&mut c, t0() + TimeDelta::minutes(10));
    let running = events
        .iter()
        .filter(|e| matches!(e, CloudEvent::Running { .. }))
        .count();
    assert_eq!(running, 1);
}

#[test]
fn launching_a_claim_name_again_with_another_offering_is_refused() {
    let mut c = cloud(config(1));
    c.launch(&claim("a", spot("g5.xlarge", ZONES[0])), t0())
        .unwrap();
    let err = c
        .launch(&claim("a", spot("g5.xlarge", ZONES[1])), t0())
        .unwrap_err();
    assert!(matches!(err, Error::Other(_)), "{err}");
    assert!(!err.is_retryable());
}

#[test]
fn launching_an_offering_the_region_does_not_sell_is_refused() {
    let mut c = cloud(config(1));
    let err = c
        .launch(&claim("a", spot("g5.xlarge", "usw2-az1")), t0())
        .unwrap_err();
    assert!(matches!(err, Error::Other(_)), "{err}");
}

#[test]
fn an_exhausted_pool_fails_with_insufficient_capacity_and_other_pools_still_launch() {
    let dry = spot("g5.xlarge", ZONES[0]);
    let mut cfg = config(1);
    cfg.capacity.exhausted.insert(dry.clone());
    let mut c = cloud(cfg);
    for attempt in 0..5 {
        let err = c
            .launch(&claim("a", dry.clone()), t0() + secs(attempt))
            .unwrap_err();
        assert_eq!(
            err,
            Error::InsufficientCapacity {
                claim: "a".into(),
                offering: dry.clone(),
                code: "InsufficientInstanceCapacity".into(),
            }
        );
        assert!(err.is_retryable());
    }
    assert!(c.describe("a").is_none());
    // The same claim launches in another zone, and on demand in the same.
    c.launch(&claim("a", spot("g5.xlarge", ZONES[1])), t0())
        .unwrap();
    c.launch(&claim("b", on_demand("g5.xlarge", ZONES[0])), t0())
        .unwrap();
    assert_eq!(c.instances().len(), 2);
}

#[test]
fn a_failure_probability_fails_about_that_share_of_launches_in_that_pool_only() {
    let flaky = spot("g5.xlarge", ZONES[0]);
    let mut cfg = config(3);
    cfg.capacity.failure_probability.insert(flaky.clone(), 0.5);
    let mut c = cloud(cfg);
    let failures = |c: &mut SimulatedCloud, key: &OfferingKey, prefix: &str| {
        (0..400)
            .filter(|i| {
                c.launch(&claim(&format!("{prefix}-{i}"), key.clone()), t0())
                    .is_err()
            })
            .count()
    };
    let n = failures(&mut c, &flaky, "flaky");
    assert!((160..=240).contains(&n), "{n} of 400 failed");
    assert_eq!(failures(&mut c, &spot("g5.xlarge", ZONES[1]), "ok"), 0);
}

/// The interruption checks of one spot instance: a notice while running,
/// reclaim exactly `notice` later, nothing after.
fn expect_interrupted(events: &[CloudEvent], claim: &str) -> (Time, Time) {
    let mine = of(events, claim);
    let running = match mine.first() {
        Some(CloudEvent::Running { at, .. }) => *at,
        other => panic!("{claim}: first event {other:?}"),
    };
    let (notice_at, deadline) = mine
        .iter()
        .find_map(|e| match e {
            CloudEvent::Notice {
                notice: Notice::SpotInterruption { deadline, .. },
                at,
            } => Some((*at, *deadline)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{claim}: no notice in {mine:?}"));
    assert!(notice_at >= running, "{claim}: notice before running");
    assert_eq!(deadline - notice_at, secs(120), "{claim}");
    match mine.last() {
        Some(CloudEvent::Terminated {
            at,
            cause: TerminationCause::SpotReclaimed,
            ..
        }) => assert_eq!(*at, deadline, "{claim}"),
        other => panic!("{claim}: last event {other:?}"),
    }
    (notice_at, deadline)
}

#[test]
fn with_a_high_rate_every_spot_instance_gets_a_notice_120_s_before_it_is_reclaimed() {
    let mut c = cloud(stormy(5, 2.0));
    let names: Vec<String> = (0..12).map(|i| format!("s{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let key = spot(["g5.xlarge", "m5.large"][i % 2], ZONES[i % 3 / 2]);
        c.launch(&claim(name, key), t0() + TimeDelta::minutes(7 * i as i64))
            .unwrap();
    }
    let events = run_to_end(&mut c);
    for name in &names {
        let (_, deadline) = expect_interrupted(&events, name);
        let i = c.describe(name).unwrap();
        assert_eq!(i.state, InstanceState::Terminated);
        // Billed until the reclaim, not after.
        let billed = hours_between(i.launched_at, deadline) * c.price(&i.offering, t0()).unwrap();
        let cost = c.cost_of(name, deadline + TimeDelta::days(1)).unwrap();
        assert!((cost - billed).abs() < 1e-9, "{name}: {cost} vs {billed}");
    }
    assert!(c.instances().is_empty());
}

#[test]
fn with_a_reclaim_share_below_one_instances_of_a_pool_are_reclaimed_at_different_times() {
    let mut cfg = stormy(5, 1.0);
    cfg.interruptions.reclaim_share = 0.5;
    let mut c = cloud(cfg);
    for i in 0..6 {
        c.launch(&claim(&format!("s{i}"), spot("g5.xlarge", ZONES[0])), t0())
            .unwrap();
    }
    let events = run_to_end(&mut c);
    let mut deadlines: Vec<Time> = (0..6)
        .map(|i| expect_interrupted(&events, &format!("s{i}")).1)
        .collect();
    deadlines.sort();
    deadlines.dedup();
    assert!(deadlines.len() > 1, "{deadlines:?}");
}

#[test]
fn on_demand_instances_are_never_interrupted() {
    let mut cfg = stormy(5, 50.0);
    cfg.interruptions
        .storms
        .push(Storm::everywhere(t0(), t0() + TimeDelta::days(1), 100.0));
    let mut c = cloud(cfg);
    c.launch(&claim("od", on_demand("g5.xlarge", ZONES[0])), t0())
        .unwrap();
    c.launch(&claim("sp", spot("g5.xlarge", ZONES[0])), t0())
        .unwrap();
    let events = run(&mut c, t0() + TimeDelta::days(30));
    assert_eq!(of(&events, "od").len(), 3, "{events:?}");
    assert_eq!(c.describe("od").unwrap().state, InstanceState::Running);
    expect_interrupted(&events, "sp");
}

#[test]
fn the_same_seed_replays_the_same_events_and_another_seed_does_not() {
    let simulate = |seed| {
        let mut c = cloud(stormy(seed, 0.5));
        for i in 0..8 {
            let key = spot("g5.xlarge", ZONES[i % 2]);
            c.launch(
                &claim(&format!("c{i}"), key),
                t0() + TimeDelta::minutes(i as i64),
            )
            .unwrap();
        }
        c.terminate("c3", t0() + TimeDelta::hours(1)).unwrap();
        run_to_end(&mut c)
    };
    assert_eq!(simulate(11), simulate(11));
    assert_ne!(simulate(11), simulate(12));
}

#[test]
fn strategies_launching_different_claims_meet_the_same_reclaims_in_a_pool() {
    // Two strategies on the same seed: one launches "a" at t0, the other
    // "strategy-b-node" ten minutes later. Both are running before the
    // pool's first reclaim event after t0 + 10 min (seed 21), so both are
    // taken by it.
    let pool = spot("m5.large", ZONES[0]);
    let notice = |name: &str, at: Time| {
        let mut c = cloud(stormy(21, 0.5));
        c.launch(&claim(name, pool.clone()), at).unwrap();
        expect_interrupted(&run_to_end(&mut c), name).0
    };
    let a = notice("a", t0());
    let b = notice("strategy-b-node", t0() + TimeDelta::minutes(10));
    assert!(a > t0() + TimeDelta::minutes(11), "{a}");
    assert_eq!(a, b);
}

#[test]
fn a_storm_brings_interruptions_into_its_window() {
    let from = t0() + TimeDelta::hours(1);
    let until = t0() + TimeDelta::hours(2);
    let mut cfg = config(8);
    // Catalog rate (~0.0002/h) times 50,000: ~9 reclaims per hour.
    cfg.interruptions
        .storms
        .push(Storm::everywhere(from, until, 50_000.0));
    let mut c = cloud(cfg);
    for it in ["g5.xlarge", "m5.large", "p5.48xlarge"] {
        for zone in ZONES {
            c.launch(&claim(&format!("{it}-{zone}"), spot(it, zone)), t0())
                .unwrap();
        }
    }
    let events = run(&mut c, t0() + TimeDelta::hours(3));
    let notices: Vec<Time> = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                CloudEvent::Notice {
                    notice: Notice::SpotInterruption { .. },
                    ..
                }
            )
        })
        .map(CloudEvent::at)
        .collect();
    assert_eq!(notices.len(), 6, "{events:#?}");
    assert!(notices.iter().all(|t| from <= *t && *t < until));
}

#[test]
fn a_rebalance_recommendation_precedes_the_notice_by_its_lead() {
    let mut cfg = stormy(4, 0.2);
    cfg.interruptions.rebalance_lead = Some(Duration::from_secs(600));
    let mut c = cloud(cfg);
    c.launch(&claim("a", spot("m5.large", ZONES[0])), t0())
        .unwrap();
    let events = run_to_end(&mut c);
    let (notice, _) = expect_interrupted(&events, "a");
    let running = expect_boot(&events, "a").0;
    let rebalance = of(&events, "a")
        .into_iter()
        .find_map(|e| match e {
            CloudEvent::Notice {
                notice: Notice::Rebalance { .. },
                at,
            } => Some(*at),
            _ => None,
        })
        .expect("a rebalance recommendation");
    assert_eq!(rebalance, (notice - secs(600)).max(running));
}

#[test]
fn cost_of_one_instance_for_one_hour_equals_its_price() {
    let mut c = cloud(config(1));
    c.launch(&claim("a", on_demand("p5.48xlarge", ZONES[0])), t0())
        .unwrap();
    let hour = t0() + TimeDelta::hours(1);
    run(&mut c, hour);
    assert!((c.cost_so_far(hour) - 55.0).abs() < 1e-9);
    assert!((c.cost_so_far(t0() + TimeDelta::minutes(30)) - 27.5).abs() < 1e-9);
    assert_eq!(c.cost_so_far(t0()), 0.0);
}

#[test]
fn billing_follows_price_changes_and_stops_when_termination_is_requested() {
    let key = spot("g5.xlarge", ZONES[0]);
    let half = t0() + TimeDelta::minutes(30);
    let hour = t0() + TimeDelta::hours(1);
    let mut cfg = config(1);
    cfg.price_changes.push(PriceChange {
        at: half,
        target: PriceTarget::InstanceType {
            instance_type: "g5.xlarge".into(),
            capacity_type: CapacityType::Spot,
        },
        price_per_hour: 0.8,
    });
    let mut c = cloud(cfg);
    c.launch(&claim("a", key.clone()), t0()).unwrap();
    let events = run(&mut c, hour);
    assert!(events.contains(&CloudEvent::PriceChanged {
        offering: key.clone(),
        price_per_hour: 0.8,
        at: half
    }));
    assert_eq!(c.price(&key, half), Some(0.8));
    assert_eq!(c.price(&key, t0()), Some(0.4));

    let i = c.terminate("a", hour).unwrap();
    assert_eq!(i.state, InstanceState::ShuttingDown);
    let expected = 0.5 * 0.4 + 0.5 * 0.8;
    assert!((c.cost_so_far(hour + TimeDelta::hours(5)) - expected).abs() < 1e-9);
    let events = run_to_end(&mut c);
    assert_eq!(
        events,
        [CloudEvent::Terminated {
            claim: "a".into(),
            at: hour + secs(30),
            cause: TerminationCause::Requested
        }]
    );
    assert!(c.instances().is_empty());
    assert_eq!(c.describe("a").unwrap().state, InstanceState::Terminated);
}

#[test]
fn terminating_a_booting_instance_cancels_its_boot_and_terminating_twice_is_harmless() {
    let mut c = cloud(stormy(2, 10.0));
    c.launch(&claim("a", spot("g5.xlarge", ZONES[0])), t0())
        .unwrap();
    c.terminate("a", t0() + secs(10)).unwrap();
    let again = c.terminate("a", t0() + secs(20)).unwrap();
    assert_eq!(again.state, InstanceState::ShuttingDown);
    let events = run_to_end(&mut c);
    assert_eq!(
        events,
        [CloudEvent::Terminated {
            claim: "a".into(),
            at: t0() + secs(40),
            cause: TerminationCause::Requested
        }]
    );
    assert_eq!(
        c.terminate("nobody", t0()).unwrap_err(),
        Error::NotFound {
            claim: "nobody".into()
        }
    );
}

#[test]
fn the_provider_face_launches_terminates_and_lists_through_block_on_ready() {
    async fn cycle(p: &impl CloudProvider, now: Time) -> Result<Vec<Instance>> {
        let t = NodeTemplate::default();
        let launched = p
            .launch(&claim("a", spot("g5.xlarge", ZONES[0])), &t, now)
            .await?;
        assert_eq!(p.describe("a").await?, Some(launched));
        p.launch(&claim("b", spot("g5.xlarge", ZONES[1])), &t, now)
            .await?;
        p.terminate("a", now + secs(60)).await?;
        p.instances().await
    }
    let shared = Mutex::new(cloud(config(1)));
    let left = block_on_ready(cycle(&shared, t0())).unwrap();
    let claims: Vec<&str> = left
        .iter()
        .filter(|i| i.state.is_alive())
        .map(|i| i.claim.as_str())
        .collect();
    assert_eq!(claims, ["b"]);
    let mut c = shared.into_inner().unwrap();
    assert!(!run_to_end(&mut c).is_empty());
}

#[test]
fn an_invalid_configuration_is_rejected_naming_the_field() {
    let mut cfg = config(1);
    cfg.interruptions.reclaim_share = 0.0;
    let err = SimulatedCloud::new(catalog(), cfg).unwrap_err();
    assert_eq!(err.field, "interruptions.reclaim_share");

    let mut cfg = config(1);
    cfg.price_changes.push(PriceChange {
        at: t0(),
        target: PriceTarget::Offering(spot("g5.xlarge", "usw2-az1")),
        price_per_hour: 1.0,
    });
    let err = SimulatedCloud::new(catalog(), cfg).unwrap_err();
    assert_eq!(err.field, "price_changes");

    let err = SimulatedCloud::new(catalog(), SimulatedCloudConfig::new(1, "eu-west-9", t0()))
        .unwrap_err();
    assert_eq!(err.field, "region");
}

#[test]
fn the_running_cost_total_agrees_with_the_full_sum() {
    let key = on_demand("p5.48xlarge", ZONES[0]);
    let mut c = cloud(config(1));
    c.launch(&claim("a", key.clone()), t0()).unwrap();
    c.launch(&claim("b", key.clone()), t0()).unwrap();
    let hour = t0() + TimeDelta::hours(1);
    run(&mut c, hour);
    c.terminate("a", hour).unwrap();
    let later = hour + TimeDelta::hours(2);
    run(&mut c, later);
    c.launch(&claim("c", key), later).unwrap();
    let end = later + TimeDelta::hours(1);
    run(&mut c, end);
    // a: 1 h, b: 4 h, c: 1 h, at $55/h.
    assert!((c.cost_so_far(end) - 6.0 * 55.0).abs() < 1e-9);
    for t in [end, later, hour, t0()] {
        assert!(
            (c.cost_so_far_running(t) - c.cost_so_far(t)).abs() < 1e-9,
            "at {t}: {} vs {}",
            c.cost_so_far_running(t),
            c.cost_so_far(t)
        );
    }
}

/// The calibrated market with the given reference pool in every spot pool
/// (bucket 2 maps through the stated factors; a one-piece lifetime keeps
/// the arithmetic simple).
fn calibrated(seed: u64, market: crate::catalog::PoolMarket) -> SimulatedCloudConfig {
    use crate::catalog::market::{Mapping, MarketParams};
    let params = MarketParams {
        reference_pool: "test".into(),
        reference: market,
        mapping: Mapping {
            bucket_factors: [1.0; 5],
            family_factors: Default::default(),
            reference_spot_discount: 0.5,
            discount_exponent: 0.0,
        },
        pools: Vec::new(),
        provenance: Default::default(),
        spread: Default::default(),
    };
    let mut c = SimulatedCloudConfig::new(seed, REGION, t0());
    c.interruptions.market = Some(crate::catalog::MarketModel::Calibrated(Arc::new(params)));
    c
}

fn market(hazards: &[f64], q: f64, close: f64, obtain: f64) -> crate::catalog::PoolMarket {
    use crate::catalog::market::{Closure, Lifetime};
    crate::catalog::PoolMarket {
        lifetime: Lifetime {
            edges_hours: (0..hazards.len()).map(|i| i as f64).collect(),
            hazards_per_hour: hazards.to_vec(),
        },
        co_reclaim_probability: q,
        closure: Closure {
            probability: close,
            median_hours: 1.0,
            sigma: 0.0,
        },
        obtainability: obtain,
    }
}

fn notices(events: &[CloudEvent]) -> Vec<(String, Time)> {
    events
        .iter()
        .filter_map(|e| match e {
            CloudEvent::Notice {
                notice: Notice::SpotInterruption { claim, .. },
                at,
            } => Some((claim.clone(), *at)),
            _ => None,
        })
        .collect()
}

#[test]
fn calibrated_market_reclaims_young_instances_more_than_old_ones() {
    // Hazard 2/h in the first hour, 0.02/h after.
    let m = market(&[2.0, 0.02], 0.0, 0.0, 1.0);
    let mut c = cloud(calibrated(3, m));
    let n = 200;
    for i in 0..n {
        c.launch(&claim(&format!("c{i}"), spot("m5.large", ZONES[0])), t0())
            .unwrap();
    }
    let events = run(&mut c, t0() + TimeDelta::hours(11));
    let young = notices(&events)
        .iter()
        .filter(|(_, at)| *at < t0() + TimeDelta::hours(1))
        .count();
    let total = notices(&events).len();
    // About 1 - e^-2 = 86% die in the first hour, about 2% of the rest
    // each hour after.
    assert!((150..=190).contains(&young), "{young}");
    assert!(total - young < 20, "{total} {young}");
}

#[test]
fn calibrated_market_is_deterministic_and_the_same_whatever_the_claim_names() {
    let m = market(&[0.5], 0.0, 0.0, 1.0);
    let times = |prefix: &str, seed: u64| {
        let mut c = cloud(calibrated(seed, m.clone()));
        for i in 0..5 {
            c.launch(
                &claim(&format!("{prefix}{i}"), spot("g5.xlarge", ZONES[0])),
                t0(),
            )
            .unwrap();
        }
        let mut t: Vec<Time> = notices(&run_to_end(&mut c))
            .into_iter()
            .map(|n| n.1)
            .collect();
        t.sort();
        t
    };
    assert_eq!(times("a", 1), times("a", 1));
    // Other names: other boot jitter (seconds), the same lifetimes.
    let close = |x: Vec<Time>, y: Vec<Time>| {
        x.len() == y.len()
            && x.iter()
                .zip(&y)
                .all(|(a, b)| (*a - *b).abs() < TimeDelta::minutes(1))
    };
    assert!(close(times("a", 1), times("b", 1)));
    assert!(!close(times("a", 1), times("a", 2)));
}

#[test]
fn correlated_reclaims_take_several_instances_of_a_pool_at_once() {
    let m = market(&[0.5], 1.0, 0.0, 1.0);
    let mut c = cloud(calibrated(5, m));
    for i in 0..4 {
        c.launch(&claim(&format!("c{i}"), spot("g5.xlarge", ZONES[0])), t0())
            .unwrap();
    }
    let n = notices(&run_to_end(&mut c));
    assert_eq!(n.len(), 4);
    assert!(n.iter().all(|(_, at)| *at == n[0].1), "{n:?}");
}

#[test]
fn a_reclaim_closes_the_pool_and_launches_there_fail_until_it_reopens() {
    let m = market(&[1.0], 0.0, 1.0, 1.0);
    let mut c = cloud(calibrated(7, m));
    c.launch(&claim("a", spot("g5.xlarge", ZONES[0])), t0())
        .unwrap();
    let events = run_to_end(&mut c);
    let (_, at) = notices(&events)[0].clone();
    let err = c
        .launch(
            &claim("b", spot("g5.xlarge", ZONES[0])),
            at + TimeDelta::minutes(30),
        )
        .unwrap_err();
    assert!(matches!(err, Error::InsufficientCapacity { .. }), "{err}");
    // The other zone is open; the closed one reopens after the closure
    // (median 1 h, sigma 0) plus the notice.
    c.launch(
        &claim("c", spot("g5.xlarge", ZONES[1])),
        at + TimeDelta::minutes(30),
    )
    .unwrap();
    c.launch(
        &claim("d", spot("g5.xlarge", ZONES[0])),
        at + TimeDelta::minutes(63),
    )
    .unwrap();
}

#[test]
fn obtainability_fails_about_that_share_of_launches() {
    let m = market(&[0.0001], 0.0, 0.0, 0.3);
    let mut c = cloud(calibrated(9, m));
    let ok = (0..400)
        .filter(|i| {
            c.launch(&claim(&format!("c{i}"), spot("g5.xlarge", ZONES[0])), t0())
                .is_ok()
        })
        .count();
    assert!((90..=150).contains(&ok), "{ok}");
}

#[test]
fn a_replayed_preemption_trace_reclaims_its_pool_at_the_drops_and_closes_it_at_zeros() {
    use crate::catalog::market::trace::{SpotTrace, TraceKind};
    let mut config = calibrated(1, market(&[0.0], 0.0, 0.0, 1.0));
    config.interruptions.replays.push(TraceReplay {
        trace: SpotTrace {
            file: "p.json".into(),
            kind: TraceKind::Preemption,
            gap_seconds: 3600.0,
            data: vec![1, 1, 0, 1, 1],
        },
        pools: vec![spot("g5.xlarge", ZONES[0])],
        offset: Duration::ZERO,
    });
    let mut c = cloud(config);
    c.launch(&claim("a", spot("g5.xlarge", ZONES[0])), t0())
        .unwrap();
    c.launch(&claim("b", spot("g5.xlarge", ZONES[1])), t0())
        .unwrap();
    let events = run(&mut c, t0() + TimeDelta::minutes(150));
    assert_eq!(
        notices(&events),
        [("a".to_string(), t0() + TimeDelta::hours(2))]
    );
    let err = c
        .launch(
            &claim("c", spot("g5.xlarge", ZONES[0])),
            t0() + TimeDelta::minutes(150),
        )
        .unwrap_err();
    assert!(matches!(err, Error::InsufficientCapacity { .. }), "{err}");
    c.launch(
        &claim("d", spot("g5.xlarge", ZONES[0])),
        t0() + TimeDelta::hours(3),
    )
    .unwrap();
}

#[test]
fn a_placement_group_shares_one_block_and_holds_so_many_while_lone_launches_scatter() {
    let mut c = cloud(config(1));
    let mut lone = Vec::new();
    for i in 0..8 {
        let inst = c
            .launch(
                &claim(&format!("p{i}"), on_demand("p5.48xlarge", ZONES[0])),
                t0(),
            )
            .unwrap();
        lone.push(c.network_nodes(&inst.provider_id));
    }
    assert!(
        lone.iter().all(|n| n.len() == 3 && n[0] == lone[0][0]),
        "one zone, one top node"
    );
    let blocks: std::collections::BTreeSet<&String> = lone.iter().map(|n| &n[2]).collect();
    assert!(blocks.len() > 1, "eight lone launches scatter: {blocks:?}");
    let mut placed = Vec::new();
    for i in 0..SIM_BLOCK {
        let inst = c
            .launch_placed(
                &claim(&format!("g{i}"), on_demand("p5.48xlarge", ZONES[0])),
                "train",
                t0(),
            )
            .unwrap();
        placed.push(c.network_nodes(&inst.provider_id));
    }
    assert!(
        placed.iter().all(|n| *n == placed[0]),
        "one block for the group"
    );
    let full = c.launch_placed(
        &claim("g-extra", on_demand("p5.48xlarge", ZONES[0])),
        "train",
        t0(),
    );
    assert!(
        matches!(full, Err(Error::InsufficientCapacity { .. })),
        "a full group has no room: {full:?}"
    );
    let g5 = c
        .launch(&claim("g", on_demand("g5.xlarge", ZONES[0])), t0())
        .unwrap();
    assert!(
        c.network_nodes(&g5.provider_id).is_empty(),
        "no topology for a g5"
    );
    assert!(c.network_nodes("aws:///use1-az1/i-unknown").is_empty());
}
