//! Which instance types a pod's needs get (a GPU count, a GPU model; CPU
//! types for CPU-only pods whose pool also allows GPU types), and the
//! reason given when no type can take a pod.

use super::*;

#[test]
fn a_four_gpu_pod_never_lands_on_a_one_gpu_type() {
    let pods: Vec<Pod> = (0..3).map(|i| gpu_pod(&format!("p{i}"), 4)).collect();
    for plan in both(&pods, &[gpu_pool("gpu")], &[]) {
        assert_eq!(placed(&plan), 3, "{:?}", plan.unschedulable);
        for n in &plan.nodes {
            assert!(
                gpus_of(&n.instance_type) >= 4,
                "{} has too few GPUs",
                n.instance_type
            );
        }
    }
}

fn cpu_pod(name: &str, cores: i64, memory_gib: i64) -> Pod {
    Pod::new(
        name,
        Resources::new()
            .with(CPU, cores * 1000)
            .with(MEMORY, memory_gib << 30),
    )
}

#[test]
fn cpu_only_pods_get_cpu_types_when_their_pool_also_allows_gpu_types() {
    let pods: Vec<Pod> = (0..6).map(|i| cpu_pod(&format!("c{i}"), 6, 24)).collect();
    // The same pool, untainted, once with every type and once with GPU
    // types only: the CPU types are what makes the plan cheaper.
    let any = Pool::new("any");
    let mut gpu_only = gpu_pool("any");
    gpu_only.taints.clear();
    for strategy in [Strategy::Mip, Strategy::Greedy] {
        let plan = run(&pods, std::slice::from_ref(&any), &[], strategy);
        assert_eq!(placed(&plan), pods.len(), "{:?}", plan.unschedulable);
        for n in &plan.nodes {
            assert!(
                !has_accelerator(&n.instance_type),
                "{strategy:?}: CPU pods {:?} on {}",
                n.pods,
                n.instance_type
            );
        }
        let on_gpus = run(&pods, std::slice::from_ref(&gpu_only), &[], strategy);
        assert_eq!(placed(&on_gpus), pods.len());
        assert!(
            plan.cost_per_hour < on_gpus.cost_per_hour,
            "{strategy:?}: {} on CPU types vs {} on GPU types",
            plan.cost_per_hour,
            on_gpus.cost_per_hour
        );
    }
}

#[test]
fn no_gpu_node_is_launched_for_cpu_only_pods_beside_gpu_pods_in_one_pool() {
    // Big CPU-only pods as a recommendation model's CPU tier asks (48 cores,
    // 320 GiB) beside one-GPU serving pods, all in one untainted pool.
    let mut pods: Vec<Pod> = (0..8).map(|i| gpu_pod(&format!("g{i}"), 1)).collect();
    pods.extend((0..6).map(|i| cpu_pod(&format!("c{i}"), 48, 320)));
    for plan in both(&pods, &[Pool::new("any")], &[]) {
        assert_eq!(placed(&plan), pods.len(), "{:?}", plan.unschedulable);
        for n in &plan.nodes {
            let only_cpu_pods = n.pods.iter().all(|p| p.starts_with('c'));
            assert!(
                !(only_cpu_pods && has_accelerator(&n.instance_type)),
                "{:?}: CPU-only pods {:?} got the GPU type {}",
                plan.strategy,
                n.pods,
                n.instance_type
            );
        }
    }
}

#[test]
fn planning_cpu_pods_beside_gpu_pods_costs_no_more_than_planning_them_apart() {
    // One untainted spot pool whose GPU offerings are often reclaimed (a
    // learned rate of one an hour): moving CPU-only pods into the spare
    // room of a GPU node saves a cheap CPU node but exposes them to those
    // reclaims at a share of a dear node's price.
    let mut pool = Pool::new("any");
    pool.capacity_types = vec![CapacityType::Spot];
    let pools = std::slice::from_ref(&pool);
    let rate =
        |o: &quartermaster::catalog::Offering| has_accelerator(&o.instance_type).then_some(1.0);
    let plan_of = |pods: &[Pod]| {
        let input = input(pods, pools, &[], Some(&rate));
        plan::plan(&input, Strategy::Mip, &Options::default(), &|| 0.0)
    };
    let gpu_pods: Vec<Pod> = (0..2).map(|i| gpu_pod(&format!("g{i}"), 8)).collect();
    let cpu_pods: Vec<Pod> = (0..6)
        .map(|i| {
            let mut p = cpu_pod(&format!("c{i}"), 2, 8);
            p.expected_runtime_s = Some(24.0 * 3600.0);
            p
        })
        .collect();
    let all: Vec<Pod> = gpu_pods.iter().chain(&cpu_pods).cloned().collect();
    let together = plan_of(&all);
    let apart = plan_of(&gpu_pods).risk_adjusted_cost_per_hour
        + plan_of(&cpu_pods).risk_adjusted_cost_per_hour;
    assert_eq!(placed(&together), all.len());
    assert!(
        together.risk_adjusted_cost_per_hour <= apart + 1e-6,
        "together {} > apart {apart}: {:#?}",
        together.risk_adjusted_cost_per_hour,
        together.nodes
    );
}

#[test]
fn a_pod_too_big_for_any_node_names_the_resource_and_the_largest_node() {
    let largest = catalog()
        .offerings_in(REGION)
        .filter_map(|o| catalog().instance_type(&o.instance_type))
        .filter_map(|it| it.accelerator.as_ref())
        .filter(|a| a.manufacturer == "NVIDIA")
        .map(|a| a.count)
        .max()
        .unwrap();
    for plan in both(&[gpu_pod("huge", 100)], &[gpu_pool("gpu")], &[]) {
        let reason = &plan.unschedulable[0].reason;
        assert!(
            reason.contains("needs 100 nvidia.com/gpu")
                && reason.ends_with(&format!("may launch has {largest}")),
            "{reason}"
        );
    }
}

#[test]
fn a_pod_asking_for_h100_gets_p5() {
    let mut pod = gpu_pod("p", 8);
    pod.affinity.terms = vec![vec![Requirement::new(l::GPU_NAME, Operator::In, &["h100"])]];
    for plan in both(&[pod.clone()], &[gpu_pool("gpu")], &[]) {
        assert_eq!(plan.nodes.len(), 1, "{:?}", plan.unschedulable);
        assert!(
            plan.nodes[0].instance_type.starts_with("p5."),
            "{}",
            plan.nodes[0].instance_type
        );
    }
}

#[test]
fn an_unknown_gpu_is_unschedulable_naming_the_requirement() {
    let mut pod = gpu_pod("p", 1);
    pod.affinity.terms = vec![vec![Requirement::new(l::GPU_NAME, Operator::In, &["b300"])]];
    for plan in both(&[pod.clone()], &[gpu_pool("gpu")], &[]) {
        assert!(plan.nodes.is_empty());
        let reason = &plan.unschedulable[0].reason;
        assert!(
            reason.contains(l::GPU_NAME) && reason.contains("b300"),
            "{reason}"
        );
    }
}

#[test]
fn a_pod_whose_needs_the_planner_does_not_understand_is_reported_and_never_placed() {
    let mut dra = Pod::new("ml/dra", Resources::new().with(CPU, 1000));
    dra.tolerations.push(Toleration::exists(l::TAINT_GPU));
    dra.not_placeable
        .push("it asks for devices through DRA resource claims (gpu)".into());
    let pods = [dra, gpu_pod("ml/train", 1)];
    let pools = [gpu_pool("gpu"), Pool::new("general")];
    for p in both(&pods, &pools, &[]) {
        let placed: Vec<&String> = p.nodes.iter().flat_map(|n| n.pods.iter()).collect();
        assert_eq!(placed, ["ml/train"], "{:?}", p.strategy);
        assert_eq!(p.unschedulable.len(), 1, "{:?}", p.unschedulable);
        assert_eq!(p.unschedulable[0].pod, "ml/dra");
        assert!(
            p.unschedulable[0]
                .reason
                .contains("DRA resource claims (gpu)"),
            "{}",
            p.unschedulable[0].reason
        );
    }
}
