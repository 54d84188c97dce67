//! Checkpoint cadence under spot risk: ask a pod on a spot node to
//! checkpoint more often than its own interval while the node's reclaim
//! hazard is high.
//!
//! A measured spot instance is most likely reclaimed young (the market's
//! hazard falls with age, `catalog::market::Lifetime`), and a pod whose
//! checkpoint takes longer than a spot notice leaves cannot save on the
//! notice: it falls back to its last complete checkpoint, on average half
//! its interval ago. The Young-Daly rule gives the interval that balances
//! what one more checkpoint costs (the pause it puts on training) against
//! the work an interruption loses: `sqrt(2 x pause / hazard)`, where the
//! hazard is the sum over every node the pod's gang runs on (any of them
//! stops it). Where that is clearly shorter than the pod's own interval,
//! the core requests a checkpoint once that long has passed since the
//! pod's last one (or its start). A write takes its full write time, so
//! requests are never closer than that; the pod's own periodic
//! checkpoints go on as before.
//!
//! Only pods that answer checkpoint requests
//! (`quartermaster.dev/checkpoint: "true"` or a hook) and declare an
//! interval are asked. The formulas are in `docs/checkpointing.md`.

use super::time::{after_secs, sooner};
use super::{Action, BoundPod, FastMap, ManagedNode, OfferingKey, Time, World};
use crate::catalog::market::PoolMarket;
use crate::catalog::CapacityType;
use crate::cluster::Pod;
use crate::plan::risk;

/// Seconds a requested checkpoint pauses training when the pod does not
/// say (`quartermaster.dev/checkpoint-pause`): an asynchronous checkpoint
/// (PyTorch DCP `async_save`, Megatron's async checkpointing) blocks only
/// for the copy of its state from GPU to host memory, and writes the rest
/// while training goes on. A pod that checkpoints synchronously gives its
/// whole write time here.
pub const DEFAULT_CHECKPOINT_PAUSE_S: f64 = 10.0;

/// A requested cadence is used only when it is at most this share of the
/// pod's own interval: closer than that, the pod's own checkpoints do
/// nearly as well without extra pauses.
const WORTH_IT: f64 = 0.8;

/// Seconds allowed past a request's write time for its acknowledgement
/// before the request counts as unanswered and may be repeated.
const ACK_SLACK_S: f64 = 60.0;

/// Seconds one requested checkpoint of `pod` pauses it.
pub fn pause_s(pod: &Pod) -> f64 {
    pod.checkpoint_pause_s.unwrap_or(DEFAULT_CHECKPOINT_PAUSE_S)
}

/// The Young-Daly checkpoint interval (seconds) for a checkpoint that
/// pauses work `pause_s` and takes `write_s` to complete, under
/// `hazard_per_hour` interruptions per hour: `sqrt(2 pause / hazard)`,
/// never shorter than one write. Infinite without hazard.
pub fn interval_s(pause_s: f64, hazard_per_hour: f64, write_s: f64) -> f64 {
    if hazard_per_hour <= 0.0 {
        return f64::INFINITY;
    }
    (2.0 * pause_s.max(0.0) * 3600.0 / hazard_per_hour)
        .sqrt()
        .max(write_s)
}

/// Hours since `from`, at least 0.
fn hours(from: Time, now: Time) -> f64 {
    ((now - from).num_milliseconds() as f64 / 3_600_000.0).max(0.0)
}

/// Seconds since `from`, at least 0.
fn seconds(from: Time, now: Time) -> f64 {
    ((now - from).num_milliseconds() as f64 / 1000.0).max(0.0)
}

/// The cadence rule's memory: requests not yet answered, and the next time
/// a pod falls due.
#[derive(Debug, Clone, Default)]
pub struct Cadence {
    /// Pod → when its last cadence request was made, and the last round
    /// that saw the pod still asked for (older entries are dropped).
    requested: FastMap<String, (Time, u64)>,
    /// Rounds of [`Cadence::decide`] so far.
    round: u64,
    /// Spot pool markets, read from the catalog once each, and the
    /// catalog revision they were read from (a refreshed catalog, new
    /// prices or a new model, is read again).
    markets: FastMap<OfferingKey, PoolMarket>,
    markets_revision: u64,
    /// Earliest time a pod falls due after the last decision.
    next: Option<Time>,
}

impl Cadence {
    /// The reclaim hazard of `node` at `now`, per hour: its pool's market at
    /// the node's age (from Ready, or launch); 0 on on-demand. With it, when
    /// the node's hazard next rises above that, if it does: a pod not due
    /// now may fall due there, so the cadence looks again then (the
    /// simulator wakes the core only at the deadlines it announces and at
    /// events).
    fn hazard(&mut self, node: &ManagedNode, world: &World, now: Time) -> (f64, Option<Time>) {
        if node.offering.capacity_type != CapacityType::Spot {
            return (0.0, None);
        }
        let key = &node.offering;
        let born = node.ready_at.unwrap_or(node.launched_at);
        let age = hours(born, now);
        // Past the edge by a millisecond, so that the age read there is
        // surely in the next piece.
        let at = |rise_h: f64| after_secs(born, rise_h * 3600.0 + 0.001);
        // Looked up before inserting: this runs for every spot node on
        // every decision, and an entry would clone the key each time.
        if let Some(market) = self.markets.get(key) {
            return (market.hazard(age), market.next_rise(age).map(at));
        }
        let market = world.catalog.market(&key.instance_type, &key.zone);
        let found = (market.hazard(age), market.next_rise(age).map(at));
        self.markets.insert(key.clone(), market);
        found
    }

    /// Checkpoint requests due at `now` (see the module doc). Nodes the
    /// caller is already draining (`busy`) are left to the interruption
    /// and disruption steps.
    pub fn decide(&mut self, world: &World, now: Time, busy: &dyn Fn(&str) -> bool) -> Vec<Action> {
        if self.markets_revision != world.catalog.revision() {
            self.markets.clear();
            self.markets_revision = world.catalog.revision();
        }
        let eligible = |b: &BoundPod| {
            !b.placeholder
                && b.pod.checkpoints
                && b.pod.checkpoint_interval_s.is_some_and(|i| i > 0.0)
        };
        // Hazard of the spot nodes running a pod that may be asked, and of
        // each gang: the sum over the distinct nodes it runs on.
        let mut node_hazard = vec![0.0; world.nodes.len()];
        let mut node_rise: Vec<Option<Time>> = vec![None; world.nodes.len()];
        let mut gang_nodes: FastMap<&str, Vec<usize>> = FastMap::default();
        for (k, n) in world.nodes.iter().enumerate() {
            if n.offering.capacity_type != CapacityType::Spot || !n.pods.iter().any(eligible) {
                continue;
            }
            (node_hazard[k], node_rise[k]) = self.hazard(n, world, now);
            for b in n.pods.iter().filter(|b| eligible(b)) {
                if let Some(g) = &b.pod.group {
                    let nodes = gang_nodes.entry(g.name.as_str()).or_default();
                    if !nodes.contains(&k) {
                        nodes.push(k);
                    }
                }
            }
        }
        // A gang's hazard, and the first rise of any of its nodes' (the sum
        // may rise there).
        let gang_hazard: FastMap<&str, (f64, Option<Time>)> = gang_nodes
            .iter()
            .map(|(g, nodes)| {
                let hazard = nodes.iter().map(|&k| node_hazard[k]).sum();
                let rise = nodes.iter().filter_map(|&k| node_rise[k]).min();
                (*g, (hazard, rise))
            })
            .collect();

        let mut actions = Vec::new();
        self.round = self.round.wrapping_add(1);
        let round = self.round;
        self.next = None;
        for (k, n) in world.nodes.iter().enumerate() {
            if node_hazard[k] <= 0.0 || n.state.in_flight || n.state.unschedulable || busy(&n.claim)
            {
                continue;
            }
            for b in n.pods.iter().filter(|b| eligible(b)) {
                let pod = &b.pod;
                let own = pod.checkpoint_interval_s.unwrap_or(f64::INFINITY);
                let write = risk::checkpoint_write_s(pod);
                if write <= risk::CHECKPOINT_WINDOW_S {
                    // It saves its work on the notice itself (a gang member
                    // on any member's notice: `core::gang`).
                    continue;
                }
                let (hazard, rise) = match &pod.group {
                    Some(g) => gang_hazard
                        .get(g.name.as_str())
                        .copied()
                        .unwrap_or((0.0, None)),
                    None => (node_hazard[k], node_rise[k]),
                };
                // Until the hazard rises, the interval only lengthens.
                if let Some(rise) = rise {
                    sooner(&mut self.next, rise);
                }
                let every = interval_s(pause_s(pod), hazard, write);
                if every > WORTH_IT * own {
                    continue;
                }
                let start = b.started.or(n.ready_at).unwrap_or(n.launched_at);
                let last = b.checkpoint_completed.map_or(start, |c| c.max(start));
                if let Some((asked, seen)) = self.requested.get_mut(&pod.name) {
                    *seen = round;
                    let asked = *asked;
                    if asked > last && seconds(asked, now) < write + ACK_SLACK_S {
                        // Still writing: look again when it should be done.
                        let again = after_secs(asked, write + ACK_SLACK_S);
                        sooner(&mut self.next, again);
                        continue;
                    }
                }
                let due = after_secs(last, every);
                if due <= now {
                    self.requested.insert(pod.name.clone(), (now, round));
                    actions.push(Action::RequestCheckpoint {
                        pod: pod.name.clone(),
                        claim: n.claim.clone(),
                        deadline: after_secs(now, write),
                    });
                    let again = after_secs(now, write.max(1.0));
                    sooner(&mut self.next, again);
                } else {
                    sooner(&mut self.next, due);
                }
            }
        }
        self.requested.retain(|_, (_, seen)| *seen == round);
        actions
    }

    /// When a pod next falls due, as of the last [`Cadence::decide`].
    pub fn next_deadline(&self) -> Option<Time> {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::cluster::resources::CPU;
    use crate::cluster::{GroupRef, NodeState, Resources};
    use chrono::TimeZone;

    fn t(s: i64) -> Time {
        chrono::Utc.timestamp_opt(1_767_571_200 + s, 0).unwrap()
    }

    fn pod(name: &str, gpus: i64) -> Pod {
        let mut p = Pod::new(
            name,
            Resources::new()
                .with(CPU, 1000)
                .with(crate::labels::RESOURCE_GPU, gpus),
        );
        p.checkpoint_interval_s = Some(1800.0);
        p.checkpoints = true;
        p
    }

    fn node(claim: &str, capacity_type: CapacityType, pods: Vec<Pod>) -> ManagedNode {
        let offering = OfferingKey {
            instance_type: "p4d.24xlarge".into(),
            zone: "use1-az6".into(),
            capacity_type,
        };
        ManagedNode {
            claim: claim.into(),
            nodepool: "gpu".into(),
            offering,
            price_per_hour: 3.4,
            launched_at: t(0),
            ready_at: Some(t(0)),
            state: NodeState {
                name: claim.into(),
                nodepool: Some("gpu".into()),
                instance_type: Some("p4d.24xlarge".into()),
                zone: "use1-az6".into(),
                capacity_type: Some(capacity_type),
                labels: Default::default(),
                taints: Vec::new(),
                allocatable: Resources::new(),
                used: Resources::new(),
                price_per_hour: 3.4,
                in_flight: false,
                unschedulable: false,
                capped: Default::default(),
            },
            pods: pods
                .into_iter()
                .map(|pod| BoundPod {
                    pod,
                    do_not_disrupt: false,
                    checkpoint_completed: None,
                    started: Some(t(0)),
                    pdb: None,
                    placeholder: false,
                })
                .collect(),
            pods_revision: 0,
            do_not_disrupt: false,
            drifted: None,
            disrupted: false,
            health: Default::default(),
            gpu_idle_since: None,
            expire_after: None,
            termination_grace: None,
        }
    }

    fn world<'a>(catalog: &'a Catalog, nodes: &'a [ManagedNode]) -> World<'a> {
        World {
            nodes_revision: 0,
            catalog,
            region: "us-east-1",
            pools: &[],
            pending: &[],
            nodes,
            pdbs: &[],
        }
    }

    fn requests(actions: &[Action]) -> Vec<&str> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::RequestCheckpoint { pod, .. } => Some(pod.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_young_daly_interval_shrinks_with_the_hazard_and_never_undercuts_a_write() {
        assert_eq!(interval_s(10.0, 0.0, 200.0), f64::INFINITY);
        let low = interval_s(10.0, 0.1, 1.0);
        let high = interval_s(10.0, 1.0, 1.0);
        assert!((low - (2.0 * 10.0 * 3600.0 / 0.1f64).sqrt()).abs() < 1e-9);
        assert!(high < low);
        assert_eq!(interval_s(10.0, 1000.0, 213.0), 213.0);
    }

    #[test]
    fn checkpoint_times_past_the_end_of_time_ask_nothing_and_do_not_panic() {
        let catalog = Catalog::embedded().unwrap();
        // What `checkpoint-interval: 6000000000h` and `checkpoint-duration:
        // 3000000000h` would say if a parser let them through.
        let mut huge = pod("ml/a", 8);
        huge.checkpoint_interval_s = Some(6e9 * 3600.0);
        huge.checkpoint_duration_s = Some(3e9 * 3600.0);
        let mut infinite = pod("ml/b", 8);
        infinite.checkpoint_interval_s = Some(f64::MAX);
        infinite.checkpoint_duration_s = Some(f64::MAX / 2.0);
        let nodes = [node("n1", CapacityType::Spot, vec![huge, infinite])];
        let w = world(&catalog, &nodes);
        let mut cadence = Cadence::default();
        for at in [t(1), t(3600), t(86_400 * 365)] {
            assert!(requests(&cadence.decide(&w, at, &|_| false)).is_empty());
        }
    }

    #[test]
    fn a_young_spot_node_asks_its_pods_to_checkpoint_and_waits_for_the_answer() {
        let catalog = Catalog::embedded().unwrap();
        let nodes = [node("n1", CapacityType::Spot, vec![pod("ml/a", 8)])];
        let w = world(&catalog, &nodes);
        let mut cadence = Cadence::default();
        // Just started: nothing to save yet; the next due time is known.
        assert!(requests(&cadence.decide(&w, t(1), &|_| false)).is_empty());
        let due = cadence.next_deadline().expect("a due time");
        assert!(due < t(1800), "due at {due}, before the pod's own interval");
        let actions = cadence.decide(&w, due, &|_| false);
        assert_eq!(requests(&actions), ["ml/a"]);
        match &actions[0] {
            Action::RequestCheckpoint { deadline, .. } => {
                let write = risk::default_checkpoint_write_s(8.0);
                assert_eq!(*deadline, after_secs(due, write));
            }
            a => panic!("{a:?}"),
        }
        // Not asked again while the write runs.
        let later = due + chrono::Duration::seconds(30);
        assert!(requests(&cadence.decide(&w, later, &|_| false)).is_empty());
        // Once it acknowledged, the next request waits a full interval.
        let mut answered = nodes.clone();
        let acked = due + chrono::Duration::seconds(220);
        answered[0].pods[0].checkpoint_completed = Some(acked);
        let w = world(&catalog, &answered);
        assert!(requests(&cadence.decide(&w, acked, &|_| false)).is_empty());
        assert!(cadence.next_deadline().unwrap() > acked);
    }

    #[test]
    fn a_pod_not_due_is_looked_at_again_where_its_nodes_hazard_rises() {
        use crate::catalog::market::{Lifetime, MarketModel, MarketParams, PoolOverride};
        // A pool calm for two hours, then stormy: nothing is due while it is
        // calm, but the rise makes the pod due at once. The simulator wakes
        // the core at announced deadlines, so the rise must be one.
        let embedded = Catalog::embedded().unwrap();
        let mut market = embedded.market("p4d.24xlarge", "use1-az6");
        market.lifetime = Lifetime {
            edges_hours: vec![0.0, 2.0],
            hazards_per_hour: vec![0.0001, 2.0],
        };
        let mut params = (*MarketParams::embedded()).clone();
        params.pools.push(PoolOverride {
            instance_type: "p4d.24xlarge".into(),
            zone: Some("use1-az6".into()),
            market,
        });
        let catalog = embedded.with_market(MarketModel::Calibrated(std::sync::Arc::new(params)));
        let nodes = [node("n1", CapacityType::Spot, vec![pod("ml/a", 8)])];
        let w = world(&catalog, &nodes);
        let mut cadence = Cadence::default();
        assert!(requests(&cadence.decide(&w, t(1), &|_| false)).is_empty());
        let again = cadence.next_deadline().expect("the rise is a deadline");
        assert!(
            t(7200) < again && again <= t(7201),
            "looked at again at {again}"
        );
        assert!(requests(&cadence.decide(&w, t(7199), &|_| false)).is_empty());
        assert_eq!(requests(&cadence.decide(&w, again, &|_| false)), ["ml/a"]);
    }

    #[test]
    fn a_repriced_catalog_is_read_again_not_served_from_the_cache() {
        // On the old advisor model's calm market the Young-Daly interval is
        // far longer than the pod's own: no request.
        let calm = Catalog::embedded()
            .unwrap()
            .with_market(crate::catalog::market::MarketModel::Advisor);
        let nodes = [node("n1", CapacityType::Spot, vec![pod("ml/a", 8)])];
        let mut cadence = Cadence::default();
        assert!(requests(&cadence.decide(&world(&calm, &nodes), t(1700), &|_| false)).is_empty());
        // The catalog is refreshed with the calibrated market: the same
        // cadence now reads the new hazard and asks.
        let calibrated = calm.clone().with_market(Default::default());
        assert_ne!(calibrated.revision(), calm.revision());
        let actions = cadence.decide(&world(&calibrated, &nodes), t(1700), &|_| false);
        assert_eq!(requests(&actions), ["ml/a"]);
        // A clone is the same catalog: its revision, and its markets.
        assert_eq!(calm.clone().revision(), calm.revision());
    }

    #[test]
    fn on_demand_nodes_draining_nodes_pods_that_do_not_answer_and_quick_writers_are_left_alone() {
        let catalog = Catalog::embedded().unwrap();
        let mut silent = pod("ml/b", 8);
        silent.checkpoints = false;
        // One GPU writes in 27 s: it saves on the notice, as its gang does.
        let mut small = pod("ml/d", 1);
        small.group = Some(GroupRef {
            name: "ml/g".into(),
            min_member: 1,
        });
        let nodes = [
            node("od", CapacityType::OnDemand, vec![pod("ml/a", 8)]),
            node("spot", CapacityType::Spot, vec![silent, small]),
            node("draining", CapacityType::Spot, vec![pod("ml/c", 8)]),
        ];
        let w = world(&catalog, &nodes);
        let mut cadence = Cadence::default();
        let at = t(1700);
        assert!(requests(&cadence.decide(&w, at, &|c| c == "draining")).is_empty());
        assert_eq!(
            requests(&cadence.decide(&w, at, &|_| false)),
            ["ml/c"],
            "the same node, not draining, is asked"
        );
    }

    #[test]
    fn a_gang_counts_every_node_it_runs_on() {
        let catalog = Catalog::embedded().unwrap();
        let member = |name: &str| {
            let mut p = pod(name, 8);
            p.group = Some(GroupRef {
                name: "ml/g".into(),
                min_member: 4,
            });
            p
        };
        let one = [node("n1", CapacityType::Spot, vec![pod("ml/solo", 8)])];
        let gang: Vec<ManagedNode> = (0..4)
            .map(|i| {
                node(
                    &format!("n{i}"),
                    CapacityType::Spot,
                    vec![member(&format!("ml/m{i}"))],
                )
            })
            .collect();
        let mut solo = Cadence::default();
        solo.decide(&world(&catalog, &one), t(1), &|_| false);
        let mut whole = Cadence::default();
        whole.decide(&world(&catalog, &gang), t(1), &|_| false);
        assert!(
            whole.next_deadline().unwrap() < solo.next_deadline().unwrap(),
            "four nodes' hazard makes the gang checkpoint sooner"
        );
    }
}
