//! Node pools and their limits: taints, GPU and cost limits, weights, the
//! interruption bucket cap, the spot pool share, and the spot pool
//! karpenter takes against greedy's.

use super::*;

#[test]
fn a_pool_at_its_gpu_limit_launches_nothing_more() {
    let mut pool = gpu_pool("gpu");
    pool.limits.resources.set(l::RESOURCE_GPU, 8);
    let nodes = [full_gpu_node("gpu")];
    for plan in both(&[gpu_pod("p", 1)], &[pool], &nodes) {
        assert!(plan.nodes.is_empty(), "launched {:?}", plan.nodes);
        assert!(plan.unschedulable[0].reason.contains("limits"));
    }
}

#[test]
fn a_pod_without_the_gpu_toleration_never_lands_on_a_tainted_gpu_pool() {
    let mut pod = gpu_pod("p", 1);
    pod.tolerations.clear();
    for plan in both(&[pod.clone()], &[gpu_pool("gpu")], &[]) {
        assert!(plan.nodes.is_empty());
        let reason = &plan.unschedulable[0].reason;
        assert!(
            reason.contains("nvidia.com/gpu:NoSchedule (gpu)") && reason.contains("toleration"),
            "{reason}"
        );
    }
    // With an untainted CPU pool beside it, a CPU pod goes there.
    let mut cpu_pool = Pool::new("cpu");
    cpu_pool.requirements.push(Requirement {
        key: l::GPU_COUNT.into(),
        operator: Operator::DoesNotExist,
        values: vec![],
    });
    let cpu_pod = Pod::new("c", Resources::new().with(CPU, 2000));
    for plan in both(
        std::slice::from_ref(&cpu_pod),
        &[gpu_pool("gpu"), cpu_pool.clone()],
        &[],
    ) {
        assert_eq!(plan.nodes.len(), 1);
        assert_eq!(plan.nodes[0].nodepool, "cpu");
        assert!(!has_accelerator(&plan.nodes[0].instance_type), "{plan:?}");
    }
}

#[test]
fn a_pool_with_max_bucket_one_never_gets_a_riskier_spot_offering() {
    let mut pool = gpu_pool("safe");
    pool.capacity_types = vec![CapacityType::Spot];
    pool.max_interruption_bucket = Some(InterruptionBucket(1));
    let pods: Vec<Pod> = (0..12)
        .map(|i| gpu_pod(&format!("p{i}"), 1 + i % 4))
        .collect();
    for plan in both(&pods, &[pool.clone()], &[]) {
        assert!(!plan.nodes.is_empty());
        for n in &plan.nodes {
            let o = catalog()
                .offerings_in(REGION)
                .find(|o| {
                    o.instance_type == n.instance_type
                        && o.zone_id == n.zone
                        && o.capacity_type == CapacityType::Spot
                })
                .unwrap();
            assert!(
                o.interruption_bucket.is_some_and(|b| b.0 <= 1),
                "{} in {}: {:?}",
                n.instance_type,
                n.zone,
                o.interruption_bucket
            );
        }
    }
}

/// Two spot pools of one type, a cheap one in `cheap_bucket` and a dearer
/// one in `calm_bucket`, and on-demand at `on_demand` USD/h: the
/// offering each of greedy and karpenter launches for one pod, as
/// `(zone, capacity type)`.
fn launched_by_greedy_and_karpenter(
    cheap_bucket: u8,
    calm_bucket: u8,
    on_demand: f64,
) -> [(String, CapacityType); 2] {
    let mut inst = shrunk(
        &[
            ("g4dn.2xlarge", "use1-az1", CapacityType::Spot),
            ("g4dn.2xlarge", "use1-az2", CapacityType::Spot),
            ("g4dn.2xlarge", "use1-az1", CapacityType::OnDemand),
        ],
        vec![gpu_pool("gpu")],
        vec![gpu_pod("p", 1)],
    );
    let mut offerings = inst.catalog.offerings().to_vec();
    for o in &mut offerings {
        o.market = None;
        match (o.capacity_type, o.zone_id.as_str()) {
            (CapacityType::Spot, "use1-az1") => {
                o.price_per_hour = 0.20;
                o.interruption_bucket = Some(InterruptionBucket(cheap_bucket));
            }
            (CapacityType::Spot, _) => {
                o.price_per_hour = 0.25;
                o.interruption_bucket = Some(InterruptionBucket(calm_bucket));
            }
            _ => o.price_per_hour = on_demand,
        }
    }
    let types: Vec<_> = inst.catalog.instance_types().cloned().collect();
    inst.catalog = Catalog::from_parts(types, offerings);
    let input = inst.input();
    [Strategy::Greedy, Strategy::Karpenter].map(|s| {
        let plan = plan::plan(&input, s, &Options::default(), &|| 0.0);
        oracle::Rules::new(&input, &Options::default())
            .value_of(&plan)
            .unwrap_or_else(|e| panic!("{s:?} breaks a rule: {e}"));
        let n = &plan.nodes[0];
        (n.zone.clone(), n.capacity_type)
    })
}

#[test]
fn karpenter_takes_the_calmer_spot_pool_unless_the_cheaper_is_about_as_calm() {
    let spot = |zone: &str| (zone.to_string(), CapacityType::Spot);
    // A >20% pool against a <5% one at a quarter more: greedy takes the
    // cheapest, karpenter (price-capacity-optimized) the calmer.
    assert_eq!(
        launched_by_greedy_and_karpenter(4, 0, 0.526),
        [spot("use1-az1"), spot("use1-az2")]
    );
    // 15-20% against 10-15%: rates within twice each other, so both are
    // among the deepest pools and the cheaper wins for both.
    assert_eq!(
        launched_by_greedy_and_karpenter(3, 2, 0.526),
        [spot("use1-az1"), spot("use1-az1")]
    );
    // Only the calm pool is dearer than on-demand: karpenter drops it, as
    // Karpenter drops spot types dearer than on-demand, and takes the
    // cheap spot pool.
    assert_eq!(
        launched_by_greedy_and_karpenter(4, 0, 0.22),
        [spot("use1-az1"), spot("use1-az1")]
    );
}

#[test]
fn a_heavier_pool_is_preferred_even_when_dearer() {
    let mut od = gpu_pool("on-demand");
    od.capacity_types = vec![CapacityType::OnDemand];
    od.weight = 50;
    let spot = gpu_pool("spot");
    for plan in both(&[gpu_pod("p", 1)], &[spot.clone(), od.clone()], &[]) {
        assert_eq!(plan.nodes[0].nodepool, "on-demand");
    }
}

#[test]
fn the_cost_limit_bounds_new_nodes() {
    let mut pool = gpu_pool("gpu");
    pool.limits.cost_per_hour = Some(5.0);
    let pods: Vec<Pod> = (0..40).map(|i| gpu_pod(&format!("p{i}"), 1)).collect();
    let plan = run(&pods, &[pool], &[], Strategy::Mip);
    assert!(plan.cost_per_hour <= 5.0 + 1e-9, "{}", plan.cost_per_hour);
    assert!(!plan.unschedulable.is_empty());
}

#[test]
fn the_spot_pool_share_spreads_single_pods_but_never_splits_a_gang() {
    let mut pool = gpu_pool("gpu");
    pool.max_spot_pool_share = Some(0.5);
    let pool_of = |n: &plan::PlannedNode| (n.instance_type.clone(), n.zone.clone());
    let most_in_one_pool = |plan: &Plan| {
        let mut count: BTreeMap<(String, String), usize> = BTreeMap::new();
        for n in plan
            .nodes
            .iter()
            .filter(|n| n.capacity_type == CapacityType::Spot)
        {
            *count.entry(pool_of(n)).or_default() += 1;
        }
        count.into_values().max().unwrap_or(0)
    };
    // Four whole-node pods on their own: at most 0.5 x 4 + 1 = 3 in one pool.
    let single: Vec<Pod> = (0..4).map(|i| gpu_pod(&format!("s{i}"), 8)).collect();
    let plan = run(&single, &[pool.clone()], &[], Strategy::Mip);
    assert_eq!(placed(&plan), 4, "{:?}", plan.unschedulable);
    assert_eq!(plan.nodes.len(), 4);
    assert!(
        most_in_one_pool(&plan) <= 3,
        "{:?} {:?}",
        plan.solved_by,
        plan.nodes
    );
    // The same four as one gang: all in the cheapest pool, as without a share.
    let gang: Vec<Pod> = single
        .iter()
        .map(|p| {
            let mut p = p.clone();
            p.group = Some(GroupRef {
                name: "ml/big".into(),
                min_member: 4,
            });
            p
        })
        .collect();
    let plan = run(&gang, &[pool.clone()], &[], Strategy::Mip);
    let mut unshared = pool;
    unshared.max_spot_pool_share = None;
    let free = run(&gang, &[unshared], &[], Strategy::Mip);
    assert_eq!(placed(&plan), 4, "{:?}", plan.unschedulable);
    assert_eq!(most_in_one_pool(&plan), 4, "gang split: {:?}", plan.nodes);
    assert!(
        (plan.cost_per_hour - free.cost_per_hour).abs() < 1e-9,
        "{} vs {}",
        plan.cost_per_hour,
        free.cost_per_hour
    );
}
