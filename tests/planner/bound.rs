//! The lower bound: never above a plan, and tight where every plan must
//! pay (zone spread, the last node of a class, pods over half a node);
//! the benchmark plan within its gap of the bound.

use super::*;

#[test]
fn the_mip_is_never_dearer_than_greedy_and_reports_a_bound() {
    let mut pods = Vec::new();
    for i in 0..30 {
        pods.push(gpu_pod(&format!("g{i}"), [1, 2, 4, 8][i % 4]));
    }
    for i in 0..20 {
        pods.push(Pod::new(
            &format!("c{i}"),
            Resources::new().with(CPU, 3000).with(MEMORY, 8 << 30),
        ));
    }
    let pools = [gpu_pool("gpu"), {
        let mut p = Pool::new("cpu");
        p.requirements.push(Requirement {
            key: l::GPU_COUNT.into(),
            operator: Operator::DoesNotExist,
            values: vec![],
        });
        p
    }];
    let [mip, greedy] = both(&pods, &pools, &[]);
    assert_eq!(placed(&mip), pods.len());
    assert_eq!(placed(&greedy), pods.len());
    assert!(
        mip.risk_adjusted_cost_per_hour <= greedy.risk_adjusted_cost_per_hour + 1e-6,
        "mip {} > greedy {}",
        mip.risk_adjusted_cost_per_hour,
        greedy.risk_adjusted_cost_per_hour
    );
    let lb = mip.lower_bound_per_hour.unwrap();
    assert!(
        lb > 0.0 && lb <= mip.risk_adjusted_cost_per_hour + 1e-6,
        "bound {lb}"
    );
}

#[test]
fn the_bound_counts_the_pods_zone_spread_puts_in_a_dear_zone() {
    // Eight spread pods, four to a node, a cheap spot zone and a dear
    // on-demand one: any plan keeps at least three in the dear zone (skew
    // 1), so the bound is above the bound of the same pods free to pick the
    // cheap zone, and still not above the plan.
    let spread = |spread: bool| {
        cpu_pods("web", 8, 3900, 8)
            .into_iter()
            .map(|mut p| {
                if spread {
                    p.zone_spread = Some(ZoneSpread {
                        max_skew: 1,
                        selector: "app=web".into(),
                    });
                }
                p
            })
            .collect::<Vec<_>>()
    };
    let offerings = [
        ("m6i.4xlarge", "use1-az1", CapacityType::OnDemand),
        ("m6i.4xlarge", "use1-az2", CapacityType::Spot),
    ];
    let bound = |inst: &oracle::Instance| {
        let input = inst.input();
        let all: Vec<usize> = (0..inst.pods.len()).collect();
        plan::bound::lower_bound(&input, &all, &Options::default())
    };
    let spread_inst = shrunk(&offerings, vec![Pool::new("cpu")], spread(true));
    let free_inst = shrunk(&offerings, vec![Pool::new("cpu")], spread(false));
    let plan = expect_optimal(&spread_inst);
    let (with_spread, free) = (bound(&spread_inst), bound(&free_inst));
    assert!(
        with_spread > free * 1.05,
        "spread bound {with_spread} vs free {free}"
    );
    assert!(
        with_spread <= plan.risk_adjusted_cost_per_hour + 1e-6,
        "bound {with_spread} above the plan {}",
        plan.risk_adjusted_cost_per_hour
    );
}

/// The benchmark workload's plan stays near its lower bound. Pruning per
/// class kept the LP 2-3% over the bound: it never offered CPU classes the
/// general pool's accelerator nodes whose spare room the LP over every
/// candidate fills, nor accelerator classes the general pool's copy of
/// their best node; and rounding packed the pods past what the LP filled
/// of each offering into nodes of their own. This plan was 5.1% over its
/// bound, 4.1% with widening alone, 3.6% with the second round, 3.0% once
/// the bound's cover rows counted the last nodes the LP left out, and
/// 2.45% once its half rows kept two pods that each take over half of a
/// node apart. That 2.45% plan broke a zone spread (a class at 7 to 9 pods
/// per zone, maxSkew 1: the oracle's finding); rounding spread classes zone
/// by zone keeps it, and the valid plan is 3.11% over the bound. Solving
/// the LP relaxation in its independent parts (the same optimum, a
/// different vertex to round) made it 3.44%: over seeds 1 to 5 that change
/// moved the 2,000-pod plans by -1.0% to +0.3%, and the 20,000-pod ones by
/// -0.1% to +0.5% (`docs/benchmarks.md`).
#[test]
fn the_benchmark_plan_is_within_three_and_a_half_percent_of_its_lower_bound() {
    let pods = plan::workload::pods(2000, 1);
    let pools = plan::workload::pools();
    let input = input(&pods, &pools, &[], None);
    let opts = Options {
        lower_bound: true,
        ..Options::default()
    };
    let p = plan::plan(&input, Strategy::Mip, &opts, &|| 0.0);
    assert!(p.unschedulable.is_empty(), "{:?}", p.unschedulable);
    // A gap is a valid plan's gap only.
    if let Err(e) = oracle::Rules::new(&input, &Options::default()).value_of(&p) {
        panic!("the plan breaks a rule: {e}");
    }
    let bound = p.lower_bound_per_hour.expect("a bound");
    assert!(
        p.risk_adjusted_cost_per_hour <= bound * 1.035,
        "the plan costs ${:.2}/h, {:.1}% over its bound ${bound:.2}/h",
        p.risk_adjusted_cost_per_hour,
        100.0 * (p.risk_adjusted_cost_per_hour / bound - 1.0)
    );
}

#[test]
fn the_bound_counts_each_classs_last_node_when_no_other_class_can_fill_it() {
    // Five pods pinned to each of two zones, four to an m6i.4xlarge: the LP
    // buys 1.25 nodes per zone, but each zone's fifth pod needs a node of
    // its own that nothing else can share, so every plan buys four nodes.
    // The bound's cover rows say so; the LP alone said two and a half.
    let pinned = |prefix: &str, zone: &str| {
        cpu_pods(prefix, 5, 3900, 8)
            .into_iter()
            .map(|mut p| {
                p.affinity
                    .terms
                    .push(vec![Requirement::new(l::ZONE_ID, Operator::In, &[zone])]);
                p
            })
            .collect::<Vec<_>>()
    };
    let mut pods = pinned("a", "use1-az1");
    pods.extend(pinned("b", "use1-az2"));
    let inst = shrunk(
        &[
            ("m6i.4xlarge", "use1-az1", CapacityType::OnDemand),
            ("m6i.4xlarge", "use1-az2", CapacityType::OnDemand),
        ],
        vec![Pool::new("cpu")],
        pods,
    );
    expect_whole_nodes_in_the_bound(&inst, 4);
}

/// The optimal plan of `inst` has `nodes` nodes of one price, and the bound
/// counts all of them without going over the plan.
fn expect_whole_nodes_in_the_bound(inst: &oracle::Instance, nodes: usize) {
    let plan = expect_optimal(inst);
    assert_eq!(plan.nodes.len(), nodes, "{:?}", plan.nodes);
    let node_price = plan.nodes[0].price_per_hour;
    let input = inst.input();
    let all: Vec<usize> = (0..inst.pods.len()).collect();
    let bound = plan::bound::lower_bound(&input, &all, &Options::default());
    assert!(
        bound >= nodes as f64 * node_price - 1e-6,
        "bound {bound} below {nodes} nodes at {node_price}"
    );
    assert!(
        bound <= plan.risk_adjusted_cost_per_hour + 1e-6,
        "bound {bound} above the plan {}",
        plan.risk_adjusted_cost_per_hour
    );
}

#[test]
fn the_bound_never_puts_two_pods_that_each_take_over_half_a_node_on_one_node() {
    // A 9 vCPU pod and an 8.5 vCPU pod, each over half of an m6i.4xlarge:
    // every plan needs two nodes, while the LP's capacity rows fit both in
    // 1.1 nodes. The bound's half row (one such pod per node) says two.
    let mut pods = cpu_pods("a", 1, 9000, 8);
    pods.extend(cpu_pods("b", 1, 8500, 8));
    // Two zones, so that no zone's cover row (which would also say two)
    // pins them.
    let inst = shrunk(
        &[
            ("m6i.4xlarge", "use1-az1", CapacityType::OnDemand),
            ("m6i.4xlarge", "use1-az2", CapacityType::OnDemand),
        ],
        vec![Pool::new("cpu")],
        pods,
    );
    expect_whole_nodes_in_the_bound(&inst, 2);
}
