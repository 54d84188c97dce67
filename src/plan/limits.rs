//! NodePool limits as budgets: what each pool may still add given what it
//! already has, charged node by node, so no plan exceeds a limit.

use super::candidates::Candidate;
use super::Input;
use std::collections::BTreeMap;

/// What a pool may still add (its limit minus what exists or was planned).
#[derive(Clone, Debug, Default)]
pub struct Budget {
    /// Resource capacity left per limited resource (a candidate's
    /// capacity keeps the device plugin's counts when it serves DRA, so it
    /// is charged by name; existing nodes by [`crate::cluster::Resources::limited`]).
    pub resources: BTreeMap<String, f64>,
    /// Nodes left.
    pub nodes: Option<f64>,
    /// USD per hour left.
    pub cost: Option<f64>,
}

impl Budget {
    /// Whether one more node of `c` stays within every limit.
    pub fn affords(&self, c: &Candidate) -> bool {
        self.resources
            .iter()
            .all(|(k, left)| c.capacity.get(k) as f64 <= *left + 1e-9)
            && self.nodes.is_none_or(|n| n >= 1.0 - 1e-9)
            && self.cost.is_none_or(|x| c.price() <= x + 1e-9)
    }

    /// Gives one node of `c` back: the inverse of [`Budget::charge`] where
    /// that took the whole node (a budget that ran dry may get back more
    /// than it lost, so check launches against a budget only charged).
    pub fn refund(&mut self, c: &Candidate) {
        for (k, v) in self.resources.iter_mut() {
            *v += c.capacity.get(k) as f64;
        }
        if let Some(n) = self.nodes.as_mut() {
            *n += 1.0;
        }
        if let Some(x) = self.cost.as_mut() {
            *x += c.price();
        }
    }

    /// Takes one node of `c` out of the budget.
    pub fn charge(&mut self, c: &Candidate) {
        for (k, v) in self.resources.iter_mut() {
            *v = (*v - c.capacity.get(k) as f64).max(0.0);
        }
        if let Some(n) = self.nodes.as_mut() {
            *n = (*n - 1.0).max(0.0);
        }
        if let Some(x) = self.cost.as_mut() {
            *x = (*x - c.price()).max(0.0);
        }
    }
}

/// What each pool may still add, in the order of `input.pools`. The
/// arithmetic is checked: a limit that the subtraction would overflow (a
/// negative limit that slipped past validation) leaves nothing, never a
/// wrapped-around, unlimited budget.
pub fn budgets(input: &Input) -> Vec<Budget> {
    input
        .pools
        .iter()
        .map(|p| {
            let mine: Vec<_> = input
                .nodes
                .iter()
                .filter(|n| n.nodepool.as_deref() == Some(p.name.as_str()))
                .collect();
            let left = |limit: i64, used: i64| limit.checked_sub(used).unwrap_or(0).max(0) as f64;
            let mut b = Budget {
                resources: p
                    .limits
                    .resources
                    .iter()
                    .map(|(k, v)| {
                        let used = mine
                            .iter()
                            .fold(0i64, |sum, n| sum.saturating_add(n.allocatable.limited(k)));
                        (k.to_string(), left(v, used))
                    })
                    .collect(),
                nodes: p
                    .limits
                    .nodes
                    .map(|n| left(n, i64::try_from(mine.len()).unwrap_or(i64::MAX))),
                cost: p
                    .limits
                    .cost_per_hour
                    .map(|c| c - mine.iter().map(|n| n.price_per_hour).sum::<f64>()),
            };
            b.cost = b.cost.map(|c| c.max(0.0));
            b
        })
        .collect()
}

/// Instances each capacity reservation can still take in a plan, by
/// reservation ID: its available count less the in-flight nodes already
/// headed for it (a claim whose instance is not launched yet is not in EC2's
/// count; one that is launched is counted twice until it registers, which
/// errs on the side of not over-filling). A reservation is shared by every
/// pool, so this is one budget for all of them.
#[derive(Clone, Debug, Default)]
pub struct ReservedLeft(BTreeMap<String, f64>);

impl ReservedLeft {
    /// What the reservations of the input's region can still take.
    pub fn of(input: &Input) -> ReservedLeft {
        let mut left = BTreeMap::new();
        for o in input.catalog.reserved_offerings_in(input.region) {
            if let Some(r) = &o.reservation {
                let in_flight = input
                    .nodes
                    .iter()
                    .filter(|n| {
                        n.in_flight
                            && n.labels.get(crate::api::labels::CAPACITY_RESERVATION_ID)
                                == Some(&r.id)
                    })
                    .count();
                left.insert(
                    r.id.clone(),
                    (f64::from(r.available) - in_flight as f64).max(0.0),
                );
            }
        }
        ReservedLeft(left)
    }

    /// Whether one more node of `c` fits its reservation (always, for a
    /// candidate that is not reserved capacity).
    pub fn affords(&self, c: &Candidate) -> bool {
        self.left_for(c).is_none_or(|n| n >= 1.0 - 1e-9)
    }

    /// Takes one node of `c` out of its reservation.
    pub fn charge(&mut self, c: &Candidate) {
        if let Some(r) = &c.offering.reservation {
            if let Some(n) = self.0.get_mut(&r.id) {
                *n = (*n - 1.0).max(0.0);
            }
        }
    }

    /// Gives one node of `c` back to its reservation: the inverse of
    /// [`ReservedLeft::charge`] where that took a whole node.
    pub fn refund(&mut self, c: &Candidate) {
        if let Some(r) = &c.offering.reservation {
            if let Some(n) = self.0.get_mut(&r.id) {
                *n += 1.0;
            }
        }
    }

    /// Nodes `c`'s reservation can still take; `None` when `c` is not
    /// reserved capacity.
    pub fn left_for(&self, c: &Candidate) -> Option<f64> {
        let r = c.offering.reservation.as_ref()?;
        Some(self.0.get(&r.id).copied().unwrap_or(0.0))
    }

    /// Every reservation and what it can still take.
    pub fn iter(&self) -> impl Iterator<Item = (&str, f64)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::cluster::resources::Resources;
    use crate::cluster::{NodeState, Pool};

    fn node(pool: &str, gpus: i64) -> NodeState {
        NodeState {
            name: format!("{pool}-node"),
            nodepool: Some(pool.into()),
            instance_type: None,
            zone: "use1-az4".into(),
            capacity_type: None,
            labels: Default::default(),
            taints: Vec::new(),
            allocatable: Resources::new().with("nvidia.com/gpu", gpus),
            used: Resources::new(),
            price_per_hour: 1.0,
            in_flight: false,
            unschedulable: false,
            capped: Default::default(),
        }
    }

    fn budgets_of(pool: Pool, nodes: &[NodeState]) -> Vec<Budget> {
        let catalog = Catalog::default();
        let nodes: Vec<&NodeState> = nodes.iter().collect();
        budgets(&Input::offline(&catalog, "us-east-1", &[pool], &[]).with_nodes(&nodes))
    }

    #[test]
    fn a_gpu_limit_counts_the_gpus_nodes_serve_through_dra() {
        let mut pool = Pool::new("p");
        pool.limits.resources = Resources::new().with("nvidia.com/gpu", 16);
        let mut dra = node("p", 0);
        dra.allocatable = Resources::new().with("gpu.nvidia.com/gpu", 8);
        let b = &budgets_of(pool, &[node("p", 4), dra])[0];
        assert_eq!(b.resources["nvidia.com/gpu"], 4.0);
    }

    #[test]
    fn a_limit_the_subtraction_would_overflow_leaves_no_budget() {
        let mut pool = Pool::new("p");
        pool.limits.resources = Resources::new().with("nvidia.com/gpu", i64::MIN);
        pool.limits.nodes = Some(i64::MIN);
        let b = &budgets_of(pool, &[node("p", 8)])[0];
        assert_eq!(b.resources["nvidia.com/gpu"], 0.0);
        assert_eq!(b.nodes, Some(0.0));
    }

    #[test]
    fn what_is_left_is_the_limit_minus_the_pools_nodes() {
        let mut pool = Pool::new("p");
        pool.limits.resources = Resources::new().with("nvidia.com/gpu", 20);
        pool.limits.nodes = Some(3);
        pool.limits.cost_per_hour = Some(10.0);
        let b = &budgets_of(pool, &[node("p", 8), node("other", 8)])[0];
        assert_eq!(b.resources["nvidia.com/gpu"], 12.0);
        assert_eq!(b.nodes, Some(2.0));
        assert_eq!(b.cost, Some(9.0));
    }

    mod reserved {
        use super::super::ReservedLeft;
        use crate::api::labels as l;
        use crate::catalog::{
            CapacityType, Catalog, InstanceType, Offering, PriceSource, Reservation,
            ReservationKind,
        };
        use crate::cluster::resources::{Resources, CPU};
        use crate::cluster::{NodeState, Pod, Pool};
        use crate::plan::{self, Input, Options, Plan, Strategy};
        use chrono::{TimeDelta, TimeZone, Utc};

        const ZONE: &str = "use1-az1";

        fn now() -> chrono::DateTime<Utc> {
            Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
        }

        fn offering(ct: CapacityType, price: f64) -> Offering {
            Offering {
                instance_type: "p5.48xlarge".into(),
                region: "us-east-1".into(),
                zone_id: ZONE.into(),
                capacity_type: ct,
                price_per_hour: price,
                price_source: PriceSource::OnDemand,
                interruption_bucket: None,
                market: None,
                reservation: None,
            }
        }

        pub(crate) fn block(id: &str, available: u32) -> Reservation {
            Reservation {
                id: id.into(),
                kind: ReservationKind::CapacityBlock,
                instance_type: "p5.48xlarge".into(),
                region: "us-east-1".into(),
                zone_id: ZONE.into(),
                total: available,
                available,
                start: Some(now() - TimeDelta::hours(1)),
                end: Some(now() + TimeDelta::days(2)),
                price_per_hour: 0.0,
            }
        }

        /// One p5 type sold spot (15/h) and on demand (55/h), plus `reserved`.
        fn catalog(reserved: &[Reservation]) -> Catalog {
            let p5 = InstanceType::bare("p5.48xlarge", 192, 2_097_152).with_gpus("H100", 8, 81_920);
            Catalog::from_parts(
                [p5],
                [
                    offering(CapacityType::Spot, 15.0),
                    offering(CapacityType::OnDemand, 55.0),
                ],
            )
            .with_reservations(reserved, now(), TimeDelta::minutes(30))
        }

        fn pool() -> Pool {
            let mut p = Pool::new("train");
            p.capacity_types = vec![
                CapacityType::Reserved,
                CapacityType::Spot,
                CapacityType::OnDemand,
            ];
            p
        }

        fn pods(n: usize) -> Vec<Pod> {
            (0..n)
                .map(|i| {
                    Pod::new(
                        &format!("ns/train-{i}"),
                        Resources::new().with(CPU, 100_000).with(l::RESOURCE_GPU, 8),
                    )
                })
                .collect()
        }

        fn run(
            catalog: &Catalog,
            pools: &[Pool],
            pods: &[Pod],
            nodes: &[NodeState],
            s: Strategy,
        ) -> Plan {
            let nodes: Vec<&NodeState> = nodes.iter().collect();
            let input = Input::offline(catalog, "us-east-1", pools, pods)
                .with_nodes(&nodes)
                .at(now());
            plan::plan(&input, s, &Options::default(), &|| 0.0)
        }

        fn count(p: &Plan, ct: CapacityType) -> usize {
            p.nodes.iter().filter(|n| n.capacity_type == ct).count()
        }

        #[test]
        fn reserved_capacity_is_used_first_and_never_beyond_its_available_count() {
            let catalog = catalog(&[block("cr-1", 2)]);
            for s in [Strategy::Mip, Strategy::Greedy] {
                let p = run(&catalog, &[pool()], &pods(3), &[], s);
                assert_eq!(count(&p, CapacityType::Reserved), 2, "{s:?}: {:?}", p.nodes);
                assert_eq!(p.nodes.len(), 3, "{s:?}: {:?}", p.nodes);
                assert!(p
                    .nodes
                    .iter()
                    .filter(|n| n.capacity_type == CapacityType::Reserved)
                    .all(|n| n.reservation.as_deref() == Some("cr-1") && n.price_per_hour == 0.0));
            }
        }

        #[test]
        fn in_flight_nodes_headed_for_a_reservation_use_up_its_count() {
            let catalog = catalog(&[block("cr-1", 2)]);
            let in_flight = NodeState {
                name: "train-000001".into(),
                nodepool: Some("train".into()),
                instance_type: Some("p5.48xlarge".into()),
                zone: ZONE.into(),
                capacity_type: Some(CapacityType::Reserved),
                labels: [(l::CAPACITY_RESERVATION_ID.to_string(), "cr-1".to_string())].into(),
                taints: Vec::new(),
                allocatable: Resources::new(),
                used: Resources::new(),
                price_per_hour: 0.0,
                in_flight: true,
                unschedulable: false,
                capped: Default::default(),
            };
            for s in [Strategy::Mip, Strategy::Greedy] {
                let p = run(
                    &catalog,
                    &[pool()],
                    &pods(2),
                    std::slice::from_ref(&in_flight),
                    s,
                );
                assert_eq!(count(&p, CapacityType::Reserved), 1, "{s:?}: {:?}", p.nodes);
            }
        }

        #[test]
        fn a_pool_that_does_not_allow_reserved_capacity_never_uses_it() {
            let catalog = catalog(&[block("cr-1", 2)]);
            let mut spot_only = pool();
            spot_only.capacity_types = vec![CapacityType::Spot];
            let p = run(&catalog, &[spot_only], &pods(2), &[], Strategy::Mip);
            assert_eq!(count(&p, CapacityType::Reserved), 0, "{:?}", p.nodes);
        }

        #[test]
        fn blocks_not_started_ended_ending_within_the_lead_or_full_are_not_offered() {
            let mut future = block("cr-future", 2);
            future.start = Some(now() + TimeDelta::hours(1));
            let mut ended = block("cr-ended", 2);
            ended.end = Some(now() - TimeDelta::hours(1));
            let mut ending = block("cr-ending", 2);
            ending.end = Some(now() + TimeDelta::minutes(10));
            let full = block("cr-full", 0);
            let all = [future, ended, ending, full, block("cr-ok", 1)];
            let catalog = catalog(&all);
            let offered: Vec<&str> = catalog
                .offerings()
                .iter()
                .filter_map(|o| o.reservation.as_ref().map(|r| r.id.as_str()))
                .collect();
            assert_eq!(offered, ["cr-ok"]);
            let why: Vec<String> = all[..4]
                .iter()
                .filter_map(|r| r.unusable_at(now(), TimeDelta::minutes(30)))
                .collect();
            assert_eq!(why.len(), 4);
            assert!(why[1].contains("ended"), "{why:?}");
            assert!(why[2].contains("lead"), "{why:?}");
        }

        /// Two reserved p5 (free), p5 on demand at 20, p5e on demand at 11,
        /// both EFA types: for a gang of four, mixing would cost 22 (2 free
        /// p5 + 2 p5e), one type 40.
        fn efa_catalog() -> Catalog {
            let efa = |name: &str| InstanceType {
                efa_supported: true,
                max_efa_interfaces: 4,
                ..InstanceType::bare(name, 192, 2_097_152).with_gpus("H100", 8, 81_920)
            };
            let sold = |it: &str, price: f64| Offering {
                instance_type: it.into(),
                ..offering(CapacityType::OnDemand, price)
            };
            Catalog::from_parts(
                [efa("p5.48xlarge"), efa("p5e.48xlarge")],
                [sold("p5.48xlarge", 20.0), sold("p5e.48xlarge", 11.0)],
            )
            .with_reservations(&[block("cr-1", 2)], now(), TimeDelta::minutes(30))
        }

        /// A gang `ml/allreduce` of four 8-GPU pods requesting EFA.
        fn efa_gang() -> Vec<Pod> {
            pods(4)
                .into_iter()
                .map(|mut p| {
                    p.requests.set(l::RESOURCE_EFA, 1);
                    p.group = Some(crate::cluster::GroupRef {
                        name: "ml/allreduce".into(),
                        min_member: 4,
                    });
                    p
                })
                .collect()
        }

        /// How many instance types a plan's nodes are of.
        fn types(p: &Plan) -> usize {
            p.nodes
                .iter()
                .map(|n| n.instance_type.clone())
                .collect::<std::collections::BTreeSet<String>>()
                .len()
        }

        #[test]
        fn a_rounded_lp_keeps_an_efa_gang_on_one_instance_type() {
            let (catalog, gang) = (efa_catalog(), efa_gang());
            let pools = [pool()];
            let input = Input::offline(&catalog, "us-east-1", &pools, &gang).at(now());
            // No branching: the LP relaxation, rounded, as in the simulator
            // and for large models. Its gang-type choice is fractional.
            let opts = Options {
                max_branch_and_bound_integers: 0,
                ..Options::default()
            };
            let p = plan::plan(&input, Strategy::Mip, &opts, &|| 0.0);
            assert_eq!(p.solved_by, plan::SolvedBy::LpRounding);
            assert_eq!(p.nodes.len(), 4, "{:?}", p.nodes);
            assert_eq!(types(&p), 1, "{:?}", p.nodes);
        }

        #[test]
        fn an_efa_gang_stays_on_one_instance_type_even_when_mixing_with_a_reservation_is_cheaper() {
            let (catalog, gang) = (efa_catalog(), efa_gang());
            let p = run(&catalog, &[pool()], &gang, &[], Strategy::Mip);
            assert_eq!(p.nodes.len(), 4, "{:?}", p.nodes);
            assert_eq!(types(&p), 1, "{:?}", p.nodes);
            assert_eq!(count(&p, CapacityType::Reserved), 2, "{:?}", p.nodes);
            // Without EFA the same gang mixes, as it should.
            let plain: Vec<Pod> = gang
                .iter()
                .cloned()
                .map(|mut p| {
                    p.requests.set(l::RESOURCE_EFA, 0);
                    p
                })
                .collect();
            let p = run(&catalog, &[pool()], &plain, &[], Strategy::Mip);
            assert_eq!(types(&p), 2, "{:?}", p.nodes);
            // In a pool that launches its EFA types with the fabric anyway,
            // the same gang goes into one placement group: one type.
            let mut efa_pool = pool();
            efa_pool.efa = true;
            let p = run(&catalog, &[efa_pool], &plain, &[], Strategy::Mip);
            assert_eq!(p.nodes.len(), 4, "{:?}", p.nodes);
            assert_eq!(types(&p), 1, "{:?}", p.nodes);
            // A gang that must share one network block goes into one
            // placement group too, EFA or not: one type.
            let block: Vec<Pod> = plain
                .iter()
                .cloned()
                .map(|mut p| {
                    p.network_block = Some(l::network_node_layer(3));
                    p
                })
                .collect();
            let p = run(&catalog, &[pool()], &block, &[], Strategy::Mip);
            assert_eq!(p.nodes.len(), 4, "{:?}", p.nodes);
            assert_eq!(types(&p), 1, "{:?}", p.nodes);
        }

        #[test]
        fn what_a_reservation_can_take_is_shared_by_every_pool() {
            let catalog = catalog(&[block("cr-1", 1)]);
            let mut other = pool();
            other.name = "other".into();
            let p = run(&catalog, &[pool(), other], &pods(2), &[], Strategy::Mip);
            assert_eq!(count(&p, CapacityType::Reserved), 1, "{:?}", p.nodes);
            let input = Input::offline(&catalog, "us-east-1", &[], &[]);
            assert_eq!(
                ReservedLeft::of(&input).iter().collect::<Vec<_>>(),
                [("cr-1", 1.0)]
            );
        }
    }
}
