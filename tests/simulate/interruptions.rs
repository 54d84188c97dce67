use super::*;

/// A spot-only pool in a heavy storm: quartermaster must ride it out.
const STORM: &str = r#"
name: storm-test
start: 2026-01-05T00:00:00Z
duration: 10h
seed: 9
strategies: [quartermaster]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: spot}
  spec:
    capacityTypes: [spot]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [g5, g6]}]
    disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 5m}
workloads:
- training: {name: ckpt, jobs: 16, perHour: 8, gpus: [1], runTime: {median: 2h, p90: 4h}, checkpointInterval: 30m}
- training: {name: plain, jobs: 8, perHour: 4, gpus: [1], runTime: {median: 1h, p90: 2h}}
cloud:
  storms: [{after: 1h, duration: 4h, multiplier: 20000}]
"#;

#[test]
fn in_a_storm_opted_in_pods_are_signalled_before_eviction_and_no_node_outlives_its_deadline() {
    check_storm(STORM, 3, 90.0);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/interruption-storm.yaml");
    check_storm(&std::fs::read_to_string(path).unwrap(), 1, 60.0);
}

/// Runs the scenario and checks, for `quartermaster`: at least
/// `min_notices` spot notices; every opted-in pod whose checkpoint can be
/// written within `window_s` (the checkpoint wait after a notice) and that
/// was evicted from an interrupted node was asked to checkpoint first; no
/// pod whose checkpoint cannot be written in time, and no pod that did not
/// opt in, was asked; no interrupted node outlived its deadline; every job
/// finished or is explained.
fn check_storm(yaml: &str, min_notices: u32, window_s: f64) {
    use quartermaster::core::{Action, Notice};
    use quartermaster::sim::result::LogEvent;
    use std::collections::BTreeMap;

    let catalog = Arc::new(Catalog::embedded().unwrap());
    let scenario = Scenario::parse(yaml, &catalog).unwrap();
    let workload = sim::load_jobs(&scenario, &catalog, Path::new("."), None).unwrap();
    let jobs = &workload.jobs;
    let opted_in: std::collections::BTreeSet<String> = jobs
        .iter()
        .filter(|j| j.pod.checkpoints)
        .map(|j| j.pod.name.clone())
        .collect();
    let too_slow: std::collections::BTreeSet<String> = jobs
        .iter()
        .filter(|j| j.checkpoint_write_s > window_s)
        .map(|j| j.pod.name.clone())
        .collect();
    let quartermaster = [StrategyName::Quartermaster];
    let report = sim::simulate(
        &scenario,
        &catalog,
        &workload,
        &quartermaster,
        &mut |_, _| {},
    )
    .unwrap();
    let r = &report.strategies["quartermaster"];
    assert!(
        r.spot_notices >= min_notices,
        "the storm interrupts: {} notices",
        r.spot_notices
    );

    let mut deadlines: BTreeMap<String, quartermaster::core::Time> = BTreeMap::new();
    let mut signalled: std::collections::BTreeSet<(String, String)> = Default::default();
    let mut asked: std::collections::BTreeSet<String> = Default::default();
    let mut evicted_after_notice = 0;
    for (at, event) in &r.log {
        match event {
            LogEvent::Notice(Notice::SpotInterruption { claim, deadline }) => {
                deadlines.insert(claim.clone(), *deadline);
            }
            // Requests on interrupted nodes, after the notice (the cadence
            // asks spot pods to checkpoint while no notice is out).
            LogEvent::Action(Action::RequestCheckpoint { pod, claim, .. }) => {
                asked.insert(pod.clone());
                if deadlines.contains_key(claim) {
                    signalled.insert((pod.clone(), claim.clone()));
                }
            }
            LogEvent::Action(Action::Evict { pod, claim }) if deadlines.contains_key(claim) => {
                evicted_after_notice += 1;
                if opted_in.contains(pod) && !too_slow.contains(pod) {
                    assert!(
                        signalled.contains(&(pod.clone(), claim.clone())),
                        "{pod} evicted from interrupted {claim} at {at} without a checkpoint request"
                    );
                }
            }
            LogEvent::NodeGone(claim) => {
                if let Some(deadline) = deadlines.get(claim) {
                    assert!(
                        at <= deadline,
                        "{claim} outlived its deadline {deadline}: gone at {at}"
                    );
                }
            }
            _ => {}
        }
    }
    assert!(
        evicted_after_notice > 0,
        "some pods were evicted from interrupted nodes"
    );
    assert!(
        asked.iter().all(|p| opted_in.contains(p)),
        "only opted-in pods are signalled"
    );
    let useless: Vec<_> = signalled
        .iter()
        .filter(|(p, _)| too_slow.contains(p))
        .collect();
    assert!(
        useless.is_empty(),
        "asked for checkpoints that cannot be written before the deadline: {useless:?}"
    );
    assert_eq!(r.jobs_completed as usize + r.unfinished.len(), jobs.len());
}

/// Gangs of two 1-GPU members, one per node, on spot (on-demand when spot
/// pools close) through a storm.
const GANG_STORM: &str = r#"
name: gang-storm-test
start: 2026-01-05T00:00:00Z
duration: 24h
seed: 4
strategies: [quartermaster]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: spot}
  spec:
    capacityTypes: [spot, on-demand]
    template:
      spec:
        taints: [{key: nvidia.com/gpu, effect: NoSchedule}]
        requirements: [{key: quartermaster.dev/instance-family, operator: In, values: [g5, g6]},
                       {key: quartermaster.dev/gpu-count, operator: In, values: ["1"]}]
    disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 5m}
workloads:
- training: {name: gang, jobs: 12, perHour: 4, gpus: [1], runTime: {median: 2h, p90: 4h},
             checkpointInterval: 30m, gangFraction: 1.0, gangSize: 2}
cloud:
  storms: [{after: 1h, duration: 4h, multiplier: 20}]
"#;

#[test]
fn a_reclaim_of_one_gang_member_checkpoints_every_member_and_stops_the_gang_whole() {
    let report = run_text(GANG_STORM, Path::new("."));
    let r = &report.strategies["quartermaster"];
    assert!(
        r.spot_notices >= 2,
        "the storm interrupts: {}",
        r.spot_notices
    );
    let jobs = jobs_of(GANG_STORM);
    assert_gangs_checkpoint_and_stop_whole(r, &jobs, 0.5);
    assert_eq!(r.jobs_completed as usize + r.unfinished.len(), jobs.len());
}

/// A gang that was drained whole runs again under the same names (the
/// simulator re-binds the same jobs); its next notice must ask it again.
/// On `spot-training` (seed 7, quartermaster), every checkpointing member of
/// a gang running on a node when its spot notice arrives holds a checkpoint
/// request made by the notice's deadline and still current at the notice.
#[test]
fn every_gang_member_on_an_interrupted_node_is_asked_to_checkpoint_however_often_it_ran() {
    use quartermaster::core::{Action, Notice, Time};
    use quartermaster::sim::result::LogEvent;
    use std::collections::{BTreeMap, BTreeSet};

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/spot-training.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    let report = run_changed(&yaml, path.parent().unwrap(), |s| {
        s.strategies = vec![StrategyName::Quartermaster];
    });
    let r = &report.strategies["quartermaster"];
    // Members whose checkpoint fits in the 90 s between the notice and its
    // checkpoint deadline (a slower one is rightly not asked).
    let members: BTreeSet<String> = jobs_of(&yaml)
        .into_iter()
        .filter(|j| j.pod.group.as_ref().is_some_and(|g| g.min_member > 1))
        .filter(|j| j.pod.checkpoints && j.checkpoint_write_s <= 90.0)
        .map(|j| j.pod.name)
        .collect();
    let mut running: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut runs: BTreeMap<String, u32> = BTreeMap::new();
    let mut noticed: Vec<(String, Time, Time)> = Vec::new();
    let mut requests: BTreeMap<String, Vec<(Time, Time)>> = BTreeMap::new();
    for (at, event) in &r.log {
        match event {
            LogEvent::JobStarted { job, node } => {
                running.entry(node.clone()).or_default().insert(job.clone());
                *runs.entry(job.clone()).or_default() += 1;
            }
            LogEvent::JobStopped { job, node } => {
                running.entry(node.clone()).or_default().remove(job);
            }
            LogEvent::JobFinished(job) => {
                for jobs in running.values_mut() {
                    jobs.remove(job);
                }
            }
            LogEvent::Notice(Notice::SpotInterruption { claim, deadline }) => {
                for job in running.get(claim).into_iter().flatten() {
                    if members.contains(job) {
                        noticed.push((job.clone(), *at, *deadline));
                    }
                }
            }
            LogEvent::Action(Action::RequestCheckpoint { pod, deadline, .. }) => {
                requests
                    .entry(pod.clone())
                    .or_default()
                    .push((*at, *deadline));
            }
            _ => {}
        }
    }
    let again = noticed.iter().filter(|(job, ..)| runs[job] > 1).count();
    assert!(
        again >= 5,
        "members that ran before are interrupted again: {again} of {}",
        noticed.len()
    );
    for (job, at, deadline) in &noticed {
        let asked = requests.get(job).into_iter().flatten();
        assert!(
            asked.clone().any(|(t, d)| t <= deadline && d >= at),
            "{job}, on a node noticed at {at}, was not asked (its run {}; its requests {:?})",
            runs[job],
            asked.collect::<Vec<_>>()
        );
    }
}

/// In `r`'s log, every job being a member of a gang of two one-GPU pods
/// with checkpoints every `interval_h`: whenever a member is asked to
/// checkpoint, every member is, by one deadline; a gang stops whole; each
/// stop loses at most one checkpoint interval of the gang's GPUs. Returns
/// how many collective requests and gang stops there were.
fn assert_gangs_checkpoint_and_stop_whole(
    r: &quartermaster::sim::result::StrategyResult,
    jobs: &[quartermaster::sim::workload::SimJob],
    interval_h: f64,
) -> (usize, usize) {
    use quartermaster::core::Action;
    use quartermaster::sim::result::LogEvent;
    use std::collections::{BTreeMap, BTreeSet};

    let gang_of: BTreeMap<String, String> = jobs
        .iter()
        .map(|j| (j.pod.name.clone(), j.pod.group.clone().unwrap().name))
        .collect();
    // Per (time, gang): the deadlines its members were given, and which
    // members stopped.
    let mut asked: BTreeMap<(String, String), BTreeMap<String, String>> = BTreeMap::new();
    let mut stopped: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (at, event) in &r.log {
        match event {
            LogEvent::Action(Action::RequestCheckpoint { pod, deadline, .. }) => {
                asked
                    .entry((at.to_rfc3339(), gang_of[pod].clone()))
                    .or_default()
                    .insert(pod.clone(), deadline.to_rfc3339());
            }
            LogEvent::JobStopped { job, .. } => {
                stopped
                    .entry((at.to_rfc3339(), gang_of[job].clone()))
                    .or_default()
                    .insert(job.clone());
            }
            _ => {}
        }
    }
    assert!(!asked.is_empty(), "some gang was asked to checkpoint");
    for ((at, gang), members) in &asked {
        assert_eq!(members.len(), 2, "{gang} at {at}: only {members:?} asked");
        let deadlines: BTreeSet<&String> = members.values().collect();
        assert_eq!(
            deadlines.len(),
            1,
            "{gang} at {at}: one deadline, not {deadlines:?}"
        );
    }
    assert!(!stopped.is_empty(), "some gang was stopped");
    for ((at, gang), members) in &stopped {
        assert_eq!(
            members.len(),
            2,
            "{gang} at {at}: a partial gang kept running"
        );
    }
    let per_stop = interval_h * 2.0;
    assert!(
        r.lost_gpu_hours <= stopped.len() as f64 * per_stop,
        "{} GPU-hours lost over {} gang stops",
        r.lost_gpu_hours,
        stopped.len()
    );
    (asked.len(), stopped.len())
}

#[test]
fn gangs_arriving_as_provisioning_requests_start_whole_once_provisioned_and_checkpoint_together() {
    use quartermaster::sim::result::LogEvent;
    use std::collections::BTreeMap;

    let yaml = GANG_STORM.replace("gangSize: 2}", "gangSize: 2, provisioningRequest: true}");
    let report = run_text(&yaml, Path::new("."));
    let r = &report.strategies["quartermaster"];
    let jobs = jobs_of(&yaml);
    // When each gang's request was provisioned (or failed), and when its
    // pods were created.
    let mut provisioned: BTreeMap<String, quartermaster::core::Time> = BTreeMap::new();
    let mut failed = 0;
    let mut created: BTreeMap<String, quartermaster::core::Time> = BTreeMap::new();
    for (at, event) in &r.log {
        match event {
            LogEvent::Provisioning(t) if t.status && t.condition == "Provisioned" => {
                provisioned.insert(t.request.clone(), *at);
            }
            LogEvent::Provisioning(t) if t.status && t.condition == "Failed" => failed += 1,
            LogEvent::JobCreated(job) => {
                created.insert(job.clone(), *at);
            }
            _ => {}
        }
    }
    assert!(!provisioned.is_empty(), "some request was provisioned");
    for j in &jobs {
        let gang = &j.pod.group.as_ref().unwrap().name;
        if let (Some(at), Some(p)) = (created.get(&j.pod.name), provisioned.get(gang)) {
            assert_eq!(
                at, p,
                "{} created when its request was provisioned",
                j.pod.name
            );
        }
    }
    assert_eq!(
        provisioned.len() + failed,
        jobs.len() / 2,
        "every request provisioned or failed"
    );
    assert_gangs_checkpoint_and_stop_whole(r, &jobs, 0.5);
    assert_eq!(r.jobs_completed as usize + r.unfinished.len(), jobs.len());
}
