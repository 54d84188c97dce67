use super::*;

#[test]
fn a_capacity_block_ending_mid_training_is_drained_and_replaced_before_its_end_losing_at_most_a_checkpoint_interval(
) {
    use quartermaster::core::Action;
    use quartermaster::sim::result::LogEvent;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/capacity-block.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = path.parent().unwrap();
    let with = run_text(&text, dir);
    let r = &with.strategies["quartermaster"];
    assert_eq!(r.jobs_completed, r.jobs_total, "{:?}", r.unfinished);
    let start = chrono::DateTime::parse_from_rfc3339("2026-03-02T00:00:00Z").unwrap();
    let end = start + chrono::Duration::hours(10);
    let launches: Vec<(
        quartermaster::core::Time,
        &quartermaster::core::ClaimRequest,
    )> = r
        .log
        .iter()
        .filter_map(|(t, e)| match e {
            LogEvent::Action(Action::Launch(req)) => Some((*t, req)),
            _ => None,
        })
        .collect();
    let (block, elsewhere): (Vec<_>, Vec<_>) = launches
        .iter()
        .partition(|(_, req)| req.reservation.is_some());
    // The gang starts on the block, the whole block and nothing beyond it.
    assert_eq!(block.len(), 4, "{launches:?}");
    assert!(block.iter().all(|(t, _)| *t < end));
    // Its replacement is launched after the drain starts and before the end.
    assert_eq!(elsewhere.len(), 4, "{launches:?}");
    let lead = end - chrono::Duration::minutes(40);
    assert!(
        elsewhere.iter().all(|(t, _)| *t >= lead && *t < end),
        "{elsewhere:?}"
    );
    // No node of the block outlives the block.
    let block_claims: Vec<&str> = block.iter().map(|(_, req)| req.claim.as_str()).collect();
    let gone: Vec<_> = r
        .log
        .iter()
        .filter(|(_, e)| matches!(e, LogEvent::NodeGone(c) if block_claims.contains(&c.as_str())))
        .collect();
    assert_eq!(gone.len(), 4);
    assert!(gone.iter().all(|(t, _)| *t <= end), "{gone:?}");
    // Checkpointed on request: each of the 4 pods (8 GPUs) loses less than
    // one 30-minute checkpoint interval (restart overhead included).
    assert_eq!(r.interruptions, 4);
    assert!(r.lost_gpu_hours <= 4.0 * 8.0 * 0.5, "{}", r.lost_gpu_hours);
    // The block (paid up front at its price) costs less than running the
    // same hours on demand.
    let without = run_changed(&text, dir, |s| s.cloud.reservations.clear());
    let w = &without.strategies["quartermaster"];
    assert_eq!(w.reserved_upfront_cost, 0.0);
    assert_eq!(r.reserved_upfront_cost, 1258.56);
    assert!(
        r.total_cost < w.total_cost,
        "with the block {} vs without {}",
        r.total_cost,
        w.total_cost
    );
    assert!(with.lower_bound_cost <= r.total_cost);
}

/// What a run's log says of its nodes, by claim.
struct NodeLog {
    /// When each was launched.
    launched: std::collections::BTreeMap<String, chrono::DateTime<chrono::Utc>>,
    /// When each was first cordoned, and why.
    cordoned: std::collections::BTreeMap<
        String,
        (
            chrono::DateTime<chrono::Utc>,
            quartermaster::core::DisruptionReason,
        ),
    >,
    /// When each went.
    gone: std::collections::BTreeMap<String, chrono::DateTime<chrono::Utc>>,
}

fn node_log(r: &quartermaster::sim::result::StrategyResult) -> NodeLog {
    use quartermaster::core::Action;
    use quartermaster::sim::result::LogEvent;
    let mut log = NodeLog {
        launched: Default::default(),
        cordoned: Default::default(),
        gone: Default::default(),
    };
    for (at, e) in &r.log {
        match e {
            LogEvent::Action(Action::Launch(c)) => {
                log.launched.insert(c.claim.clone(), *at);
            }
            LogEvent::Action(Action::Cordon { claim, reason }) => {
                log.cordoned.entry(claim.clone()).or_insert((*at, *reason));
            }
            LogEvent::NodeGone(claim) => {
                log.gone.insert(claim.clone(), *at);
            }
            _ => {}
        }
    }
    log
}

#[test]
fn an_image_release_replaces_every_older_node_new_node_first_and_the_replacements_are_paid_for() {
    use quartermaster::core::DisruptionReason;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/image-release.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = path.parent().unwrap();
    let released = run_text(&text, dir);
    let never = run_changed(&text, dir, |s| s.cloud.image_releases.clear());
    let release = chrono::DateTime::parse_from_rfc3339("2026-01-05T04:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    for (name, r) in &released.strategies {
        let n = &never.strategies[name];
        assert_eq!(n.drift_replacements, 0, "{name}: no release, no drift");
        // Nodes launched before the release and still there at it.
        let NodeLog {
            launched,
            cordoned,
            gone,
        } = node_log(r);
        let old: Vec<&String> = launched
            .iter()
            .filter(|(c, at)| **at < release && gone.get(*c).is_none_or(|g| *g > release))
            .map(|(c, _)| c)
            .collect();
        assert!(old.len() >= 2, "{name}: nodes to replace: {old:?}");
        let drifted: Vec<&String> = cordoned
            .iter()
            .filter(|(_, (_, reason))| *reason == DisruptionReason::Drifted)
            .map(|(c, _)| c)
            .collect();
        assert_eq!(r.drift_replacements as usize, drifted.len(), "{name}");
        for c in &old {
            // Each older node is replaced, unless it emptied and left first.
            let left_on_its_own = gone[*c] <= cordoned.get(*c).map_or(gone[*c], |(at, _)| *at);
            assert!(
                drifted.contains(c) || left_on_its_own,
                "{name}: {c} launched before the release was never replaced"
            );
        }
        assert!(!drifted.is_empty(), "{name}");
        for c in &drifted {
            assert!(
                launched[*c] < release,
                "{name}: only older nodes drift: {c}"
            );
            // New node first: a launch after the release and before the
            // cordon made room for its pods.
            let at = cordoned[*c].0;
            assert!(
                launched.values().any(|l| *l >= release && *l <= at),
                "{name}: {c} cordoned at {at} before any replacement was launched"
            );
        }
        assert_every_job_ran(r);
        // Replacements are extra nodes, and they are paid for.
        assert!(r.nodes_launched > n.nodes_launched, "{name}");
        assert!(r.total_cost > n.total_cost, "{name}");
    }
}

#[test]
fn nodes_outliving_expire_after_are_replaced_new_node_first_and_no_node_lives_much_longer() {
    use quartermaster::core::DisruptionReason;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/image-release.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = path.parent().unwrap();
    let lifetime = chrono::TimeDelta::hours(6);
    let no_release = |s: &mut Scenario| s.cloud.image_releases.clear();
    let never = run_changed(&text, dir, no_release);
    let expiring = run_changed(&text, dir, |s| {
        no_release(s);
        for p in &mut s.node_pools {
            p.spec.template.spec.expire_after = Some("6h".into());
        }
    });
    for (name, r) in &expiring.strategies {
        let n = &never.strategies[name];
        assert_eq!(
            n.expired_replacements, 0,
            "{name}: no expireAfter, no expiry"
        );
        let NodeLog {
            launched,
            cordoned,
            gone,
        } = node_log(r);
        let expired: Vec<&String> = cordoned
            .iter()
            .filter(|(_, (_, reason))| *reason == DisruptionReason::Expired)
            .map(|(c, _)| c)
            .collect();
        assert!(
            !expired.is_empty(),
            "{name}: a day of 8-hour jobs on 6-hour nodes"
        );
        assert_eq!(r.expired_replacements as usize, expired.len(), "{name}");
        let end = expiring.duration_s as i64;
        let start = launched.values().min().copied().unwrap();
        for (c, at) in &launched {
            let until = gone
                .get(c)
                .copied()
                .unwrap_or(start + chrono::TimeDelta::seconds(end));
            // Every node that lived past its expiry was cordoned for it,
            // within the round that noticed (the replacement's boot aside).
            if until - *at > lifetime + chrono::TimeDelta::minutes(30) {
                let (when, reason) = cordoned
                    .get(c)
                    .unwrap_or_else(|| panic!("{name}: {c} outlived expireAfter"));
                assert_eq!(*reason, DisruptionReason::Expired, "{name}: {c}");
                assert!(
                    *when >= *at + lifetime,
                    "{name}: {c} cordoned before expiring"
                );
            }
        }
        for c in &expired {
            let (at, _) = cordoned[*c];
            assert!(at >= launched[*c] + lifetime, "{name}: {c} expired early");
            // New node first: a launch at or after its expiry and before the
            // cordon made room for its pods.
            let expiry = launched[*c] + lifetime;
            assert!(
                launched.values().any(|l| *l >= expiry && *l <= at),
                "{name}: {c} cordoned at {at} before any replacement was launched"
            );
        }
        assert_every_job_ran(r);
        assert!(r.nodes_launched > n.nodes_launched, "{name}");
    }
}

#[test]
fn gangs_that_ask_for_one_network_block_start_whole_in_one_block_and_scatter_without() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/one-block-gangs.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let one = run_text(&text, path.parent().unwrap());
    let line = "    gangTopology: topology.k8s.aws/network-node-layer-3\n";
    assert!(text.contains(line));
    let free = run_text(&text.replace(line, ""), path.parent().unwrap());
    let (q1, q0) = (
        &one.strategies["quartermaster"],
        &free.strategies["quartermaster"],
    );
    eprintln!(
        "one block: {:?} gang starts, ${:.2}, {} nodes; without: {:?} gang starts, ${:.2}, {} nodes",
        q1.gang_blocks,
        q1.total_cost,
        q1.nodes_launched,
        q0.gang_blocks,
        q0.total_cost,
        q0.nodes_launched
    );
    let (whole, seen) = q1.gang_blocks;
    assert!(seen > 0, "gangs started on nodes with a topology");
    assert_eq!(whole, seen, "every gang in one block");
    let (whole, seen) = q0.gang_blocks;
    assert!(
        seen > 0 && whole < seen,
        "without the constraint gangs scatter: {whole} of {seen}"
    );
}

#[test]
fn a_scheduled_buffer_holds_every_window_it_is_open_for() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/buffer-schedule.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = path.parent().unwrap();
    let b = &run_text(&text, dir).strategies["quartermaster"];
    // The same sixteen GPUs as the GPU pool's pre-warm window.
    let line = text
        .lines()
        .find(|l| l.starts_with("- {name: office-hours"))
        .unwrap();
    let prewarm = text.replace(&format!("buffers:\n{line}\n"), "").replace(
        "    risk: {maxInterruptionBucket: 2}\n",
        "    risk: {maxInterruptionBucket: 2}\n    prewarm:\n    - {name: office-hours, schedule: \"0 8 * * 1-5\", timeZone: Europe/Berlin, duration: 10h, capacity: {nvidia.com/gpu: \"16\"}}\n",
    );
    assert_ne!(prewarm, text);
    let p = &run_text(&prewarm, dir).strategies["quartermaster"];
    eprintln!(
        "buffer: windows held {:?}, ${:.2}; prewarm: windows ready {:?}, ${:.2}",
        b.buffer_windows, b.total_cost, p.prewarm_ready, p.total_cost
    );
    let (held, windows) = b.buffer_windows;
    assert_eq!(windows, 5, "five weekday windows");
    assert_eq!(held, windows, "every chunk held on a Ready node while open");
    assert_eq!(p.prewarm_ready, (5, 5));
    assert_eq!(
        p.buffer_windows,
        (0, 0),
        "no buffer in the pre-warm variant"
    );
    // Issue 34's target: no dearer than the same capacity pre-warmed (the
    // buffer's nodes go when its window closes, launched with the GPU
    // pool's lead: docs/buffers.md).
    assert!(
        b.total_cost <= p.total_cost + 1e-6,
        "buffer ${:.2} against pre-warm ${:.2}",
        b.total_cost,
        p.total_cost
    );
}
