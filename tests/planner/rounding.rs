//! Rounding the LP into nodes: the cheapest node that holds a rounded
//! fraction, MIG slices, gangs, and rounding once the time limit is spent.

use super::*;

/// The simulator's planner options: never branch, round the LP and pack.
fn rounded(pods: &[Pod], pools: &[Pool], strategy: Strategy) -> Plan {
    let input = input(pods, pools, &[], None);
    let opts = Options {
        max_branch_and_bound_integers: 0,
        lower_bound: true,
        ..Options::default()
    };
    plan::plan(&input, strategy, &opts, &|| 0.0)
}

fn family_pool(name: &str, families: &[&str], capacity_types: Vec<CapacityType>) -> Pool {
    let mut p = gpu_pool(name);
    p.capacity_types = capacity_types;
    p.requirements.push(Requirement {
        key: l::INSTANCE_FAMILY.into(),
        operator: Operator::In,
        values: families.iter().map(|f| f.to_string()).collect(),
    });
    p
}

#[test]
fn a_rounded_fraction_of_a_big_node_becomes_the_cheapest_node_that_holds_the_pod() {
    // The LP takes an eighth of an 8-GPU p4d for one one-GPU pod (the
    // cheapest GPU-hour); rounding alone bought the whole p4d.
    let pool = family_pool(
        "train",
        &["g6e", "p4d", "p5"],
        vec![CapacityType::Spot, CapacityType::OnDemand],
    );
    let pods = [gpu_pod("one", 1)];
    let mip = rounded(&pods, std::slice::from_ref(&pool), Strategy::Mip);
    let greedy = rounded(&pods, &[pool], Strategy::Greedy);
    assert_eq!(mip.nodes.len(), 1, "{:?}", mip.unschedulable);
    assert!(
        gpus_of(&mip.nodes[0].instance_type) < 8,
        "one GPU pod on {}",
        mip.nodes[0].instance_type
    );
    assert!(
        mip.risk_adjusted_cost_per_hour <= greedy.risk_adjusted_cost_per_hour + 1e-9,
        "mip {} > greedy {}",
        mip.risk_adjusted_cost_per_hour,
        greedy.risk_adjusted_cost_per_hour
    );
}

/// An on-demand pool of p4de and p5 split into 1g.10gb MIG slices.
fn on_demand_mig_pool() -> Pool {
    let mut pool = family_pool("mig", &["p4de", "p5"], vec![CapacityType::OnDemand]);
    pool.sharing = quartermaster::cluster::GpuSharing::Mig {
        profile: "1g.10gb".into(),
    };
    pool
}

/// `n` pods of one 1g.10gb MIG slice each.
fn mig_pods(n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| shared_gpu_pod(&format!("embed{i}"), "nvidia.com/mig-1g.10gb", 1000, 4))
        .collect()
}

/// The cheapest price of nodes of one on-demand p4de or p5 type holding
/// `pods` one-slice MIG pods, from the catalog: `(price, type)`.
fn cheapest_single_type_for_mig_pods(pods: usize) -> (f64, String) {
    catalog()
        .offerings_in(REGION)
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .filter_map(|o| {
            let it = catalog().instance_type(&o.instance_type)?;
            if !(it.name.starts_with("p4de.") || it.name.starts_with("p5.")) {
                return None;
            }
            let gpu = it.accelerator.as_ref()?;
            let per_gpu = quartermaster::catalog::mig::instances_per_gpu(
                &gpu.model,
                gpu.memory_mib_per_device,
                "1g.10gb",
            )?;
            let slices = per_gpu as usize * gpu.count as usize;
            Some((
                pods.div_ceil(slices) as f64 * o.price_per_hour,
                it.name.clone(),
            ))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .expect("the catalog has MIG-capable on-demand offerings")
}

#[test]
fn a_dozen_one_slice_mig_pods_get_the_small_nodes_that_hold_them_not_one_big_node() {
    let pool = on_demand_mig_pool();
    let pods = mig_pods(12);
    let (cheapest, shape) = cheapest_single_type_for_mig_pods(12);
    let big = cheapest_single_type_for_mig_pods(56).0;
    assert!(cheapest < big, "the example needs a smaller shape to win");
    // The MIP only: greedy, like Karpenter, fills the first node that
    // still fits and takes its cheapest type.
    {
        let plan = run(&pods, std::slice::from_ref(&pool), &[], Strategy::Mip);
        assert_eq!(placed(&plan), 12, "{:?}", plan.unschedulable);
        assert!(
            plan.cost_per_hour <= cheapest + 1e-6,
            "{:?} pays ${}/h for {:?}; {shape} nodes cost ${cheapest}/h",
            plan.strategy,
            plan.cost_per_hour,
            plan.nodes
                .iter()
                .map(|n| n.instance_type.as_str())
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn pods_that_fit_one_node_are_not_split_over_two_offerings_by_rounding() {
    let pool = on_demand_mig_pool();
    let pods = mig_pods(22);
    let mip = rounded(&pods, std::slice::from_ref(&pool), Strategy::Mip);
    let greedy = rounded(&pods, &[pool], Strategy::Greedy);
    assert_eq!(placed(&mip), 22, "{:?}", mip.unschedulable);
    assert_eq!(mip.nodes.len(), 1, "one node holds them: {:?}", mip.nodes);
    assert!(
        mip.cost_per_hour <= greedy.cost_per_hour + 1e-9,
        "mip {} > greedy {}",
        mip.cost_per_hour,
        greedy.cost_per_hour
    );
}

#[test]
fn a_rounded_gang_stays_in_one_zone_on_the_cheapest_node_that_holds_it() {
    let pool = family_pool(
        "train",
        &["g5", "g6", "g6e", "p4d"],
        vec![CapacityType::Spot, CapacityType::OnDemand],
    );
    let gang: Vec<Pod> = gang(2, 2);
    let mip = rounded(&gang, std::slice::from_ref(&pool), Strategy::Mip);
    let greedy = rounded(&gang, &[pool], Strategy::Greedy);
    assert_eq!(placed(&mip), 2, "{:?}", mip.unschedulable);
    let zones: BTreeSet<&str> = mip.nodes.iter().map(|n| n.zone.as_str()).collect();
    assert_eq!(zones.len(), 1, "gang spread over {zones:?}");
    assert!(
        mip.risk_adjusted_cost_per_hour <= greedy.risk_adjusted_cost_per_hour + 1e-9,
        "mip {} > greedy {}",
        mip.risk_adjusted_cost_per_hour,
        greedy.risk_adjusted_cost_per_hour
    );
    let lb = mip.lower_bound_per_hour.expect("the MIP reports a bound");
    assert!(lb <= mip.risk_adjusted_cost_per_hour + 1e-6, "bound {lb}");
}

#[test]
fn the_time_limit_bounds_the_whole_plan_not_each_mip() {
    let pods: Vec<Pod> = (0..4).map(|i| gpu_pod(&format!("ml/p-{i}"), 1)).collect();
    let pools = [gpu_pool("gpu")];
    let input = input(&pods, &pools, &[], None);
    let options = Options {
        time_limit: std::time::Duration::from_millis(800),
        ..Options::default()
    };
    // A clock that stands still: the limit is never spent, branch and bound
    // runs.
    let fresh = plan::plan(&input, Strategy::Mip, &options, &|| 0.0);
    assert_eq!(fresh.solved_by, plan::SolvedBy::BranchAndBound);
    // A clock on which every reading is a second later: the limit is spent
    // before the first MIP starts, so the plan rounds its LP instead of
    // branching (and still places every pod).
    let t = std::cell::Cell::new(0.0);
    let late = plan::plan(&input, Strategy::Mip, &options, &|| {
        t.set(t.get() + 1.0);
        t.get()
    });
    assert_eq!(late.solved_by, plan::SolvedBy::LpRounding);
    assert_eq!(placed(&late), 4);
}
