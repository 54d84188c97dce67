//! Each lifecycle rule as a small scenario through the whole simulator (the
//! same core as production, the simulated cloud, the engine), with jobs
//! written by hand so that the expected outcome can be worked out on paper:
//! empty nodes go after `consolidateAfter` but not inside a pre-warm window,
//! a budget of 0 in a cron window holds consolidation until the window
//! closes, an interrupted checkpointing job loses at most one interval, and
//! the scenario's price changes and rebalance notices reach the run.

use chrono::{Duration, TimeZone};
use quartermaster::catalog::Catalog;
use quartermaster::cluster::{Pod, Resources, Toleration};
use quartermaster::core::{Action, DisruptionReason, Notice, Time};
use quartermaster::sim::result::{LogEvent, StrategyResult};
use quartermaster::sim::scenario::Scenario;
use quartermaster::sim::workload::SimJob;
use quartermaster::sim::{self};
use std::collections::BTreeMap;
use std::sync::Arc;

fn t0() -> Time {
    chrono::Utc.with_ymd_and_hms(2026, 1, 5, 0, 0, 0).unwrap()
}

fn at(hours: f64) -> Time {
    t0() + Duration::milliseconds((hours * 3_600_000.0) as i64)
}

/// A scenario around one on-demand g6.xlarge pool; `disruption` and
/// `extra` (more pool spec fields) vary per test. Its workload line is only
/// there to make the scenario valid: the tests pass their own jobs.
fn scenario(disruption: &str, extra: &str, cloud: &str, capacity: &str) -> Scenario {
    let yaml = format!(
        r#"
name: lifecycle
start: 2026-01-05T00:00:00Z
duration: 12h
seed: 3
strategies: [quartermaster]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {{name: gpu}}
  spec:
    capacityTypes: [{capacity}]
    template:
      spec:
        taints: [{{key: nvidia.com/gpu, effect: NoSchedule}}]
        requirements:
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [g6.xlarge]}}
    disruption: {disruption}
{extra}
workloads:
- training: {{name: unused, jobs: 1, perHour: 1, gpus: [1], runTime: {{median: 1h, p90: 1h}}}}
cloud: {cloud}
"#
    );
    let catalog = Catalog::embedded().unwrap();
    Scenario::parse(&yaml, &catalog).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

/// A one-GPU job submitted at `submit_h` that needs `work_h` hours.
fn job(name: &str, submit_h: f64, work_h: f64, checkpoint_every_h: Option<f64>) -> SimJob {
    let mut pod = Pod::new(
        &format!("jobs/{name}"),
        Resources::new().with("nvidia.com/gpu", 1),
    );
    pod.tolerations.push(Toleration::exists("nvidia.com/gpu"));
    pod.expected_runtime_s = Some(work_h * 3600.0);
    pod.checkpoints = checkpoint_every_h.is_some();
    pod.checkpoint_interval_s = checkpoint_every_h.map(|h| h * 3600.0);
    SimJob {
        pod,
        submit: at(submit_h),
        work_s: work_h * 3600.0,
        checkpoint_interval_s: checkpoint_every_h.map(|h| h * 3600.0),
        checkpoint_write_s: 20.0,
        restart_overhead_s: 60.0,
        stateless: false,
        gpu_share: None,
        gpu_use: None,
    }
}

fn run(s: &Scenario, jobs: &[SimJob]) -> StrategyResult {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let mut report = sim::simulate(
        s,
        &catalog,
        &jobs.to_vec().into(),
        &s.strategies,
        &mut |_, _| {},
    )
    .unwrap();
    report.strategies.remove("quartermaster").unwrap()
}

/// Per claim: when it was launched, whether for a pre-warm window, and when
/// and why it was deleted (if it was).
#[derive(Debug, Default, Clone)]
struct NodeLife {
    launched: Option<Time>,
    prewarm: bool,
    price: f64,
    deleted: Option<(Time, DisruptionReason)>,
}

fn lives(r: &StrategyResult) -> BTreeMap<String, NodeLife> {
    let mut out: BTreeMap<String, NodeLife> = BTreeMap::new();
    for (t, e) in &r.log {
        match e {
            LogEvent::Action(Action::Launch(c)) => {
                let l = out.entry(c.claim.clone()).or_default();
                l.launched = Some(*t);
                l.prewarm = c.prewarm_window.is_some();
                l.price = c.price_per_hour;
            }
            LogEvent::Action(Action::Delete { claim, reason }) => {
                out.entry(claim.clone()).or_default().deleted = Some((*t, *reason));
            }
            _ => {}
        }
    }
    out
}

fn minutes(d: Duration) -> f64 {
    d.num_milliseconds() as f64 / 60_000.0
}

// g6 boots in 4 min (90 s + 90 s + 60 s) with +-20% jitter: Ready 3.2 to
// 4.8 min after launch; a batch closes within 10 s.

#[test]
fn a_node_empty_longer_than_consolidate_after_is_removed_and_not_before() {
    // One job of 1 h: its node is Ready 3.2-4.8 min after launch, the job
    // ends 60 min later, the node is empty from then and goes 10 min after:
    // 73.2 to 74.8 min after launch (plus a step).
    let s = scenario(
        "{consolidationPolicy: WhenEmpty, consolidateAfter: 10m}",
        "",
        "{}",
        "on-demand",
    );
    let r = run(&s, &[job("a", 0.0, 1.0, None)]);
    assert_eq!(r.jobs_completed, 1);
    let l = lives(&r);
    assert_eq!(l.len(), 1, "one node: {l:?}");
    let node = l.values().next().unwrap();
    let (gone, why) = node.deleted.expect("the empty node is deleted");
    assert_eq!(why, DisruptionReason::Empty);
    let after = minutes(gone - node.launched.unwrap());
    assert!(
        (73.0..=75.5).contains(&after),
        "deleted {after:.1} min after launch"
    );

    // Empty from about 01:04 to the end at 12:00, less than
    // consolidateAfter (12 h): still there.
    let s = scenario(
        "{consolidationPolicy: WhenEmpty, consolidateAfter: 12h}",
        "",
        "{}",
        "on-demand",
    );
    let r = run(&s, &[job("a", 0.0, 1.0, None)]);
    let l = lives(&r);
    assert_eq!(l.len(), 1);
    assert!(
        l.values().all(|n| n.deleted.is_none()),
        "empty for less than consolidateAfter at the end, yet deleted: {l:?}"
    );
}

#[test]
fn an_empty_node_inside_a_pre_warm_window_is_kept_until_the_window_ends() {
    // Window 03:00-07:00 UTC holding one GPU. Its node is launched before
    // 03:00 and Ready by 03:00; it is empty all along (a placeholder holds
    // it), yet stays until 07:00, then goes as an empty node. The job's own
    // node (00:00-01:0x) goes 10 min after the job ends, as usual.
    let s = scenario(
        "{consolidationPolicy: WhenEmpty, consolidateAfter: 10m}",
        r#"    prewarm:
    - {name: early, schedule: "0 3 * * *", timeZone: UTC, duration: 4h, capacity: {nvidia.com/gpu: "1"}}"#,
        "{}",
        "on-demand",
    );
    let r = run(&s, &[job("a", 0.0, 1.0, None)]);
    assert_eq!(
        r.prewarm_ready,
        (1, 1),
        "the window's GPU was Ready at 03:00"
    );
    let l = lives(&r);
    let warm: Vec<&NodeLife> = l.values().filter(|n| n.prewarm).collect();
    assert_eq!(warm.len(), 1, "one pre-warm node: {l:?}");
    let launched = warm[0].launched.unwrap();
    assert!(
        launched < at(3.0) && launched > at(2.5),
        "launched {launched}"
    );
    let (gone, why) = warm[0].deleted.expect("deleted after the window");
    assert_eq!(why, DisruptionReason::Empty);
    assert!(
        gone >= at(7.0) && gone <= at(7.0) + Duration::minutes(11),
        "pre-warm node deleted at {gone}, window 03:00-07:00"
    );
    let job_node = l.values().find(|n| !n.prewarm).unwrap();
    let (gone, _) = job_node.deleted.unwrap();
    assert!(gone < at(1.5), "the job's node goes as usual: {gone}");
}

#[test]
fn a_budget_of_zero_in_a_cron_window_holds_consolidation_until_the_window_closes() {
    // The job's node is empty from about 01:04 and would go at about 01:14;
    // the budget allows 0 disruptions 01:00-04:00 UTC, so it goes at 04:00.
    let budget = "{consolidationPolicy: WhenEmpty, consolidateAfter: 10m, \
                  budgets: [{nodes: \"0\", schedule: \"0 1 * * *\", duration: 3h}]}";
    let s = scenario(budget, "", "{}", "on-demand");
    let r = run(&s, &[job("a", 0.0, 1.0, None)]);
    let l = lives(&r);
    assert_eq!(l.len(), 1);
    let (gone, why) = l.values().next().unwrap().deleted.expect("deleted at last");
    assert_eq!(why, DisruptionReason::Empty);
    assert!(
        gone >= at(4.0) && gone <= at(4.0) + Duration::minutes(1),
        "deleted at {gone}, budget window 01:00-04:00"
    );

    // The same budget in a window that does not cover the empty node's time
    // (05:00-08:00) does not hold it.
    let s = scenario(
        &budget.replace("0 1 * * *", "0 5 * * *"),
        "",
        "{}",
        "on-demand",
    );
    let r = run(&s, &[job("a", 0.0, 1.0, None)]);
    let (gone, _) = lives(&r).values().next().unwrap().deleted.unwrap();
    assert!(gone < at(1.5), "deleted at {gone}");
}

#[test]
fn an_interrupted_checkpointing_job_loses_at_most_one_interval_per_interruption() {
    // Spot only, in a storm that reclaims every few minutes: jobs that save
    // every 30 min lose at most 30 min of one GPU each time, whether the core
    // asks them to checkpoint (quartermaster) or not (greedy).
    let mut s = scenario(
        "{consolidationPolicy: WhenEmpty, consolidateAfter: 5m}",
        "",
        "{storms: [{after: 1h, duration: 4h, multiplier: 3000}]}",
        "spot",
    );
    s.strategies = vec![
        sim::scenario::StrategyName::Quartermaster,
        sim::scenario::StrategyName::Greedy,
    ];
    let jobs: Vec<SimJob> = (0..6)
        .map(|k| job(&format!("c{k}"), 0.1 * k as f64, 3.0, Some(0.5)))
        .collect();
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let report = sim::simulate(&s, &catalog, &jobs.into(), &s.strategies, &mut |_, _| {}).unwrap();
    for (name, r) in &report.strategies {
        assert!(r.interruptions > 0, "{name}: the storm interrupts");
        assert!(r.lost_gpu_hours > 0.0 || name == "quartermaster", "{name}");
        assert!(
            r.lost_gpu_hours <= f64::from(r.interruptions) * 0.5 + 1e-9,
            "{name}: {:.2} GPU-h lost over {} interruptions",
            r.lost_gpu_hours,
            r.interruptions
        );
    }
}

#[test]
fn a_gang_stops_whole_when_one_member_loses_its_node() {
    // Two one-GPU members of a gang, one pinned to g6.xlarge and one to
    // g5.xlarge spot nodes (two spot pools, reclaimed independently), in a
    // storm: distributed training cannot go on without a member, so each
    // time one member stops, the other stops at the same instant, and both
    // lose their work (no checkpoints).
    let mut s = scenario(
        "{consolidationPolicy: WhenEmpty, consolidateAfter: 5m}",
        "",
        "{storms: [{after: 1h, duration: 4h, multiplier: 3000}]}",
        "spot",
    );
    s.node_pools[0].spec.template.spec.requirements[0]
        .values
        .push("g5.xlarge".into());
    let gang: Vec<SimJob> = [("m0", "g6.xlarge"), ("m1", "g5.xlarge")]
        .iter()
        .map(|(m, instance_type)| {
            let mut j = job(m, 0.0, 3.0, None);
            j.pod.group = Some(quartermaster::cluster::GroupRef {
                name: "jobs/gang".into(),
                min_member: 2,
            });
            j.pod.affinity.terms = vec![vec![quartermaster::cluster::Requirement::new(
                "node.kubernetes.io/instance-type",
                quartermaster::cluster::Operator::In,
                &[instance_type],
            )]];
            j
        })
        .collect();
    let r = run(&s, &gang);
    let mut stops: BTreeMap<Time, Vec<(String, String)>> = BTreeMap::new();
    for (t, e) in &r.log {
        if let LogEvent::JobStopped { job, node } = e {
            stops
                .entry(*t)
                .or_default()
                .push((job.clone(), node.clone()));
        }
    }
    assert!(!stops.is_empty(), "the storm reaches the gang");
    for (t, stopped) in &stops {
        let mut jobs: Vec<&str> = stopped.iter().map(|(j, _)| j.as_str()).collect();
        jobs.sort();
        assert_eq!(jobs, ["jobs/m0", "jobs/m1"], "at {t}: {stopped:?}");
        assert_ne!(stopped[0].1, stopped[1].1, "one node each");
    }
    assert_eq!(r.interruptions, 2 * stops.len() as u32);
    assert!(
        r.lost_gpu_hours > 0.0,
        "both members lose their work since the start"
    );
}

#[test]
fn a_scenario_price_change_is_billed_from_its_time_on() {
    // One job of 4 h on one on-demand g6.xlarge. From 2 h on the type costs
    // $10/h in every zone: the bill grows by (10 - price) x the node's hours
    // after 2 h, exactly.
    let base = scenario(
        "{consolidationPolicy: WhenEmpty, consolidateAfter: 10m}",
        "",
        "{}",
        "on-demand",
    );
    let changed = scenario(
        "{consolidationPolicy: WhenEmpty, consolidateAfter: 10m}",
        "",
        "{priceChanges: [{after: 2h, instanceType: g6.xlarge, capacityType: on-demand, pricePerHour: 10}]}",
        "on-demand",
    );
    let jobs = [job("a", 0.0, 4.0, None)];
    let (a, b) = (run(&base, &jobs), run(&changed, &jobs));
    let (la, lb) = (lives(&a), lives(&b));
    assert_eq!(la.len(), 1);
    let n = lb.values().next().unwrap();
    let (gone, _) = n.deleted.unwrap();
    assert_eq!(Some(gone), la.values().next().unwrap().deleted.map(|d| d.0));
    let hours_after = (gone - at(2.0)).num_milliseconds() as f64 / 3_600_000.0;
    let expected = a.total_cost + (10.0 - n.price) * hours_after;
    assert!(
        (b.total_cost - expected).abs() < 1e-6,
        "billed {} instead of {expected}",
        b.total_cost
    );
}

#[test]
fn a_scenario_rebalance_lead_sends_a_recommendation_before_each_notice() {
    // Spot only in a storm, rebalance recommendations 10 min ahead, and the
    // pool checkpoints on them: each interrupted node that had been running
    // for 10 min got a recommendation exactly 10 min before its notice, and
    // its checkpointing pods were asked to save at the recommendation.
    let s = scenario(
        "{consolidationPolicy: WhenEmpty, consolidateAfter: 5m}",
        "    interruption: {onRebalanceRecommendation: Checkpoint}",
        "{storms: [{after: 1h, duration: 4h, multiplier: 3000}], rebalanceLead: 10m}",
        "spot",
    );
    let jobs: Vec<SimJob> = (0..4)
        .map(|k| job(&format!("c{k}"), 0.1 * k as f64, 3.0, Some(0.5)))
        .collect();
    let r = run(&s, &jobs);
    let mut rebalance: BTreeMap<String, Time> = BTreeMap::new();
    let mut notices = 0;
    let mut exact = 0;
    let mut asked_at_rebalance = 0;
    for (t, e) in &r.log {
        match e {
            LogEvent::Notice(Notice::Rebalance { claim }) => {
                rebalance.insert(claim.clone(), *t);
            }
            LogEvent::Notice(Notice::SpotInterruption { claim, .. }) => {
                notices += 1;
                if let Some(rb) = rebalance.get(claim) {
                    let lead = *t - *rb;
                    assert!(lead <= Duration::minutes(10), "{claim}: lead {lead}");
                    if lead == Duration::minutes(10) {
                        exact += 1;
                    }
                }
            }
            LogEvent::Action(Action::RequestCheckpoint { claim, .. })
                if rebalance.get(claim) == Some(t) =>
            {
                asked_at_rebalance += 1;
            }
            _ => {}
        }
    }
    assert!(notices > 0, "the storm interrupts");
    assert!(exact > 0, "some recommendation came 10 min ahead");
    assert!(
        asked_at_rebalance > 0,
        "pods were asked to checkpoint on a recommendation"
    );

    // Without the field, no recommendations at all.
    let quiet = scenario(
        "{consolidationPolicy: WhenEmpty, consolidateAfter: 5m}",
        "    interruption: {onRebalanceRecommendation: Checkpoint}",
        "{storms: [{after: 1h, duration: 4h, multiplier: 3000}]}",
        "spot",
    );
    let r = run(&quiet, &jobs);
    assert!(!r
        .log
        .iter()
        .any(|(_, e)| matches!(e, LogEvent::Notice(Notice::Rebalance { .. }))));
}
