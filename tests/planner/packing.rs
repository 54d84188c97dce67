//! Packing pods onto nodes: existing nodes first, zone and hostname
//! spreads, and the optimality oracle's counterexamples for packing and
//! right-sizing, each checked against the exhaustive optimum.

use super::*;

#[test]
fn free_room_on_existing_nodes_is_used_before_launching() {
    let mut node = full_gpu_node("gpu");
    node.used = Resources::new().with(l::RESOURCE_GPU, 6);
    for plan in both(
        &[gpu_pod("a", 1), gpu_pod("b", 1)],
        &[gpu_pool("gpu")],
        &[node.clone()],
    ) {
        assert!(plan.nodes.is_empty());
        assert_eq!(plan.existing.len(), 2);
    }
}

/// Like pods fill the existing nodes first fit, in the nodes' order; a pod
/// of another shape still finds room on a node the first shape skipped.
#[test]
fn existing_nodes_take_like_pods_first_fit_and_other_shapes_see_every_node() {
    let mut small = full_gpu_node("gpu");
    small.name = "small".into();
    small.used = Resources::new().with(l::RESOURCE_GPU, 7);
    let mut big = full_gpu_node("gpu");
    big.name = "big".into();
    big.used = Resources::new().with(l::RESOURCE_GPU, 4);
    let pods = [
        gpu_pod("two-a", 2),
        gpu_pod("two-b", 2),
        gpu_pod("two-c", 2),
        gpu_pod("one", 1),
    ];
    for strategy in [Strategy::Greedy, Strategy::Karpenter] {
        let plan = run(
            &pods,
            &[gpu_pool("gpu")],
            &[small.clone(), big.clone()],
            strategy,
        );
        let on = |pod: &str| {
            plan.existing
                .iter()
                .find(|e| e.pod == pod)
                .map(|e| e.node.as_str())
        };
        assert_eq!(on("two-a"), Some("big"), "{strategy:?}");
        assert_eq!(on("two-b"), Some("big"), "{strategy:?}");
        assert_eq!(on("two-c"), None, "{strategy:?}");
        assert_eq!(on("one"), Some("small"), "{strategy:?}");
        assert_eq!(plan.nodes.len(), 1, "{strategy:?}");
    }
}

#[test]
fn zone_spread_keeps_the_skew_within_max_skew() {
    let pods: Vec<Pod> = (0..7)
        .map(|i| {
            let mut p = gpu_pod(&format!("s{i}"), 1);
            p.zone_spread = Some(ZoneSpread {
                max_skew: 1,
                selector: "app=serve".into(),
            });
            p
        })
        .collect();
    // Seven 1-GPU pods fit one 8-GPU node: greedy, like Karpenter, must
    // still spread them rather than fill the first node.
    let [mip, greedy] = both(&pods, &[gpu_pool("gpu")], &[]);
    let mut zones: BTreeSet<&str> = BTreeSet::new();
    for plan in [&mip, &greedy] {
        assert_eq!(placed(plan), 7, "{:?}", plan.strategy);
        zones.extend(plan.nodes.iter().map(|n| n.zone.as_str()));
    }
    for plan in [&mip, &greedy] {
        // Over every zone either plan used: a zone one plan left empty
        // counts as empty in the other.
        let mut per_zone: BTreeMap<&str, usize> = zones.iter().map(|z| (*z, 0)).collect();
        for n in &plan.nodes {
            *per_zone.get_mut(n.zone.as_str()).unwrap() += n.pods.len();
        }
        let max = *per_zone.values().max().unwrap();
        let min = *per_zone.values().min().unwrap();
        assert!(
            per_zone.len() >= 2 && max - min <= 1,
            "{:?}: skew too large: {per_zone:?}",
            plan.strategy
        );
    }
    let bound = mip.lower_bound_per_hour.unwrap();
    assert!(
        greedy.risk_adjusted_cost_per_hour >= bound - 1e-6,
        "greedy ${} under the bound ${bound}",
        greedy.risk_adjusted_cost_per_hour
    );
}

// Counterexamples the optimality oracle (`tests/oracle/`) found, shrunk to
// a few offerings of the embedded catalog: the MIP's plan must keep every
// rule and cost the exhaustive optimum.

#[test]
fn pods_of_three_shapes_that_fill_two_nodes_get_two_nodes_not_three() {
    // Two of each shape fit two m6i.4xlarge (7000m + 4000m + 2500m of CPU
    // each); first fit decreasing put the two 7000m pods together and
    // needed a third node.
    let mut pods = cpu_pods("a", 2, 2500, 7);
    pods.extend(cpu_pods("b", 2, 7000, 5));
    pods.extend(cpu_pods("c", 2, 4000, 31));
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
    let plan = expect_optimal(&inst);
    assert_eq!(plan.nodes.len(), 2, "{:?}", plan.nodes);
}

#[test]
fn pods_that_strand_a_small_nodes_room_go_to_the_type_that_holds_them() {
    // A 32 GiB pod leaves less than 28 GiB of a c6i.8xlarge, so no 28 GiB
    // pod fits beside it: in aggregate four c6i.8xlarge "hold" four of each
    // size, in fact they hold four of one and need three more for the rest.
    let mut pods = cpu_pods("big", 4, 5500, 32);
    pods.extend(cpu_pods("mid", 3, 2500, 28));
    let inst = shrunk(
        &[
            ("c6i.8xlarge", "use1-az1", CapacityType::Spot),
            ("m6i.8xlarge", "use1-az1", CapacityType::Spot),
        ],
        vec![Pool::new("cpu")],
        pods,
    );
    expect_optimal(&inst);
}

#[test]
fn packing_never_opens_a_node_the_spot_pool_share_has_no_room_for() {
    // The 7500m pod leaves no CPU of an m7i.2xlarge beside it; in aggregate
    // it and two anti-affine pods took two nodes, packed they took three,
    // all in one spot pool, past its share (at most half of the pool's spot
    // nodes, plus one).
    let mut pool = Pool::new("cpu");
    pool.max_spot_pool_share = Some(0.5);
    let mut pods = cpu_pods("solo", 1, 7500, 24);
    for mut p in cpu_pods("apart", 2, 2000, 16) {
        p.per_node_max = Some(1);
        p.labels.insert("app".into(), "apart".into());
        pods.push(p);
    }
    let inst = shrunk(
        &[
            ("m7i.2xlarge", "use1-az1", CapacityType::Spot),
            ("g6e.8xlarge", "use1-az6", CapacityType::Spot),
        ],
        vec![pool],
        pods,
    );
    expect_optimal(&inst);
}

#[test]
fn a_hostname_spread_puts_at_most_max_skew_of_its_pods_on_a_node() {
    // Six small pods that one node holds all of, spread over hostnames with
    // maxSkew 2 (every new node starts empty, so two is the most one holds),
    // beside two pods of another app without a cap.
    let mut pods: Vec<Pod> = cpu_pods("web", 6, 500, 1)
        .into_iter()
        .map(|mut p| {
            p.per_node_max = Some(2);
            p.labels.insert("app".into(), "web".into());
            p
        })
        .collect();
    pods.extend(cpu_pods("free", 2, 500, 1));
    for plan in both(&pods, &[Pool::new("cpu")], &[]) {
        assert_eq!(placed(&plan), 8, "{:?}", plan.unschedulable);
        assert!(plan.nodes.len() >= 3, "{:?}", plan.nodes);
        for n in &plan.nodes {
            let web = n.pods.iter().filter(|p| p.starts_with("web")).count();
            assert!(web <= 2, "{web} web pods on one {}", n.instance_type);
        }
    }
    // And the MIP's plan is the cheapest the rules allow.
    let inst = shrunk(
        &[
            ("m7i.2xlarge", "use1-az1", CapacityType::Spot),
            ("m7i.large", "use1-az1", CapacityType::Spot),
        ],
        vec![Pool::new("cpu")],
        pods,
    );
    expect_optimal(&inst);
}

#[test]
fn right_sizing_one_node_never_spends_the_limit_the_others_need() {
    // Three anti-affine two-GPU pods, three nodes and 12 GPUs allowed: the
    // model buys three 4-GPU g5.24xlarge. Right-sizing the first into the
    // cheaper 8-GPU p4d.24xlarge left the third node without GPUs to spend.
    let mut pool = gpu_pool("gpu");
    pool.limits.nodes = Some(3);
    pool.limits.resources.set(l::RESOURCE_GPU, 12);
    let pods: Vec<Pod> = (0..3)
        .map(|i| {
            let mut p = gpu_pod(&format!("apart{i}"), 2);
            p.per_node_max = Some(1);
            p.labels.insert("app".into(), "apart".into());
            p
        })
        .collect();
    let inst = shrunk(
        &[
            ("g5.24xlarge", "use1-az2", CapacityType::Spot),
            ("p4d.24xlarge", "use1-az6", CapacityType::Spot),
        ],
        vec![pool],
        pods,
    );
    let plan = expect_optimal(&inst);
    assert_eq!(placed(&plan), 3, "{:?}", plan.unschedulable);
}
