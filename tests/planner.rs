//! Planner behaviour on the embedded catalog: one small, hand-checkable case
//! per constraint kind, for both the MIP and the greedy baseline.

// The oracle's instance generator is the property test's; this file uses
// its exhaustive search on hand-made instances.
use crate::oracle;

use quartermaster::api::labels as l;
use quartermaster::catalog::{CapacityType, Catalog, InterruptionBucket};
use quartermaster::cluster::resources::{CPU, MEMORY};
use quartermaster::cluster::{
    Effect, GroupRef, NodeState, Operator, Pod, Pool, Requirement, Resources, Taint, Toleration,
    ZoneSpread,
};
use quartermaster::plan::{self, Input, Options, Plan, Strategy};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

const REGION: &str = "us-east-1";

fn catalog() -> &'static Catalog {
    static C: OnceLock<Catalog> = OnceLock::new();
    C.get_or_init(|| Catalog::embedded().expect("embedded catalog loads"))
}

fn gpu_pod(name: &str, gpus: i64) -> Pod {
    let mut p = Pod::new(
        name,
        Resources::new()
            .with(CPU, 4000)
            .with(MEMORY, 16 << 30)
            .with(l::RESOURCE_GPU, gpus),
    );
    p.tolerations.push(Toleration::exists(l::TAINT_GPU));
    p
}

fn gpu_pool(name: &str) -> Pool {
    let mut p = Pool::new(name);
    p.taints
        .push(Taint::new(l::TAINT_GPU, "", Effect::NoSchedule));
    p.requirements.push(Requirement {
        key: l::GPU_COUNT.into(),
        operator: Operator::Exists,
        values: vec![],
    });
    p
}

/// The planner's input over the embedded catalog in [`REGION`], every
/// offering available, at no particular time.
fn input<'a>(
    pods: &'a [Pod],
    pools: &'a [Pool],
    nodes: &'a [&'a NodeState],
    learned_rate: Option<&'a plan::RateFn<'a>>,
) -> Input<'a> {
    Input {
        learned_rate,
        ..Input::offline(catalog(), REGION, pools, pods).with_nodes(nodes)
    }
}

fn run(pods: &[Pod], pools: &[Pool], nodes: &[NodeState], strategy: Strategy) -> Plan {
    let nodes: Vec<&NodeState> = nodes.iter().collect();
    let input = input(pods, pools, &nodes, None);
    let start = std::time::Instant::now();
    let opts = Options {
        lower_bound: true,
        ..Options::default()
    };
    plan::plan(&input, strategy, &opts, &|| start.elapsed().as_secs_f64())
}

fn both(pods: &[Pod], pools: &[Pool], nodes: &[NodeState]) -> [Plan; 2] {
    [
        run(pods, pools, nodes, Strategy::Mip),
        run(pods, pools, nodes, Strategy::Greedy),
    ]
}

fn gpus_of(instance_type: &str) -> u32 {
    catalog()
        .instance_type(instance_type)
        .and_then(|t| t.accelerator.as_ref())
        .map_or(0, |a| a.count)
}

fn placed(plan: &Plan) -> usize {
    plan.nodes.iter().map(|n| n.pods.len()).sum::<usize>() + plan.existing.len()
}

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

fn gang(n: usize, size: u32) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut p = gpu_pod(&format!("ml/w{i}"), 1);
            p.group = Some(GroupRef {
                name: "ml/job".into(),
                min_member: size,
            });
            p
        })
        .collect()
}

#[test]
fn a_gang_of_sixteen_gets_capacity_in_one_zone() {
    let plan = run(&gang(16, 16), &[gpu_pool("gpu")], &[], Strategy::Mip);
    assert_eq!(placed(&plan), 16, "{:?}", plan.unschedulable);
    let zones: BTreeSet<&str> = plan.nodes.iter().map(|n| n.zone.as_str()).collect();
    assert_eq!(zones.len(), 1, "gang spread over {zones:?}");
}

#[test]
fn a_gang_that_cannot_fit_whole_gets_nothing() {
    let mut pool = gpu_pool("gpu");
    pool.limits.resources.set(l::RESOURCE_GPU, 8);
    let plan = run(&gang(16, 16), &[pool], &[], Strategy::Mip);
    assert!(plan.nodes.is_empty(), "launched {:?}", plan.nodes);
    assert_eq!(plan.unschedulable.len(), 16);
}

#[test]
fn a_gang_whose_members_need_different_types_starts_in_a_zone_that_offers_both() {
    // One member pinned to g6.2xlarge, one to g5.2xlarge; g5.2xlarge has
    // capacity in one zone only (the others just failed to launch). The
    // gang must go whole to that zone: a zone that offers only g6.2xlarge
    // would place one member and strand the other.
    let pinned = |name: &str, instance_type: &str| {
        let mut p = gpu_pod(name, 1);
        p.group = Some(GroupRef {
            name: "ml/pair".into(),
            min_member: 2,
        });
        p.affinity.terms = vec![vec![Requirement::new(
            l::INSTANCE_TYPE,
            Operator::In,
            &[instance_type],
        )]];
        p
    };
    let pods = [pinned("ml/a", "g6.2xlarge"), pinned("ml/b", "g5.2xlarge")];
    let g6_zones: BTreeSet<&str> = catalog()
        .offerings_of(REGION, "g6.2xlarge")
        .map(|o| o.zone_id.as_str())
        .collect();
    let open = catalog()
        .offerings_of(REGION, "g5.2xlarge")
        .map(|o| o.zone_id.clone())
        .filter(|z| g6_zones.contains(z.as_str()))
        .max()
        .expect("a zone offers both");
    let unavailable =
        |o: &quartermaster::catalog::Offering| o.instance_type == "g5.2xlarge" && o.zone_id != open;
    let input = Input {
        catalog: catalog(),
        region: REGION,
        pools: &[gpu_pool("gpu")],
        nodes: &[],
        pods: &pods,
        unavailable: &unavailable,
        learned_rate: None,
        offerings: None,
        now: None,
    };
    let start = std::time::Instant::now();
    let plan = plan::plan(&input, Strategy::Mip, &Options::default(), &|| {
        start.elapsed().as_secs_f64()
    });
    assert_eq!(placed(&plan), 2, "{:?}", plan.unschedulable);
    for n in &plan.nodes {
        assert_eq!(n.zone, open, "{:?}", plan.nodes);
    }
}

#[test]
fn a_gang_with_members_missing_waits() {
    let plan = run(&gang(3, 4), &[gpu_pool("gpu")], &[], Strategy::Mip);
    assert!(plan.nodes.is_empty());
    assert!(
        plan.unschedulable[0].reason.contains("3 of its 4"),
        "{:?}",
        plan.unschedulable
    );
}

fn full_gpu_node(pool: &str) -> NodeState {
    NodeState {
        name: "existing".into(),
        nodepool: Some(pool.into()),
        instance_type: Some("g5.48xlarge".into()),
        zone: "use1-az1".into(),
        capacity_type: Some(CapacityType::OnDemand),
        labels: BTreeMap::new(),
        taints: vec![],
        allocatable: Resources::new()
            .with(l::RESOURCE_GPU, 8)
            .with(CPU, 190_000)
            .with(MEMORY, 700 << 30)
            .with(quartermaster::cluster::resources::PODS, 110),
        used: Resources::new().with(l::RESOURCE_GPU, 8),
        price_per_hour: 16.0,
        in_flight: false,
        unschedulable: false,
        capped: Default::default(),
    }
}

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

fn has_accelerator(instance_type: &str) -> bool {
    catalog()
        .instance_type(instance_type)
        .is_some_and(|t| t.accelerator.is_some())
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

/// A GPU pool whose GPUs are time-sliced four ways, preferred (weight 80)
/// over the whole-GPU pool as the inference example has it.
fn time_sliced_pool() -> Pool {
    let mut p = gpu_pool("shared");
    p.weight = 80;
    p.sharing = quartermaster::cluster::GpuSharing::TimeSlicing { replicas: 4 };
    p
}

fn whole_gpu_pods() -> Vec<Pod> {
    (0..6)
        .map(|i| gpu_pod(&format!("w{i}"), [1, 4][i % 2]))
        .collect()
}

#[test]
fn a_whole_gpu_pod_never_lands_on_a_time_sliced_pools_node() {
    let pods = whole_gpu_pods();
    for plan in both(&pods, &[time_sliced_pool(), gpu_pool("whole")], &[]) {
        assert_eq!(placed(&plan), pods.len(), "{:?}", plan.unschedulable);
        assert!(
            plan.nodes.iter().all(|n| n.nodepool == "whole"),
            "{:?}: {:#?}",
            plan.strategy,
            plan.nodes
        );
    }
    for plan in both(&pods, &[time_sliced_pool()], &[]) {
        assert!(plan.nodes.is_empty(), "{:#?}", plan.nodes);
        assert_eq!(plan.unschedulable.len(), pods.len());
    }
}

#[test]
fn adding_a_time_slicing_pool_does_not_make_a_whole_gpu_plan_dearer() {
    let pods = whole_gpu_pods();
    let alone = both(&pods, &[gpu_pool("whole")], &[]);
    let beside = both(&pods, &[time_sliced_pool(), gpu_pool("whole")], &[]);
    // Not dearer, and not cheaper either: the whole-GPU pods cannot use
    // the shared pool (a 4-GPU pod once "fit" on one GPU sliced four ways).
    for (a, b) in alone.iter().zip(&beside) {
        assert!(
            (b.risk_adjusted_cost_per_hour - a.risk_adjusted_cost_per_hour).abs() < 1e-9,
            "{:?}: {} with the time-sliced pool, {} without",
            a.strategy,
            b.risk_adjusted_cost_per_hour,
            a.risk_adjusted_cost_per_hour
        );
    }
}

/// A pod asking for one unit of a shared GPU resource (a time-sliced share
/// or a MIG instance), tolerating the GPU taint.
fn shared_gpu_pod(name: &str, resource: &str, cpu_milli: i64, memory_gib: i64) -> Pod {
    let mut p = Pod::new(
        name,
        Resources::new()
            .with(CPU, cpu_milli)
            .with(MEMORY, memory_gib << 30)
            .with(resource, 1),
    );
    p.tolerations.push(Toleration::exists(l::TAINT_GPU));
    p
}

#[test]
fn shared_gpu_pods_take_one_share_each_on_the_time_sliced_pool() {
    let pods: Vec<Pod> = (0..8)
        .map(|i| shared_gpu_pod(&format!("s{i}"), l::RESOURCE_GPU_SHARED, 500, 2))
        .collect();
    for plan in both(&pods, &[time_sliced_pool(), gpu_pool("whole")], &[]) {
        assert_eq!(placed(&plan), pods.len(), "{:?}", plan.unschedulable);
        for n in &plan.nodes {
            assert_eq!(n.nodepool, "shared");
            assert!(
                n.pods.len() as u32 <= 4 * gpus_of(&n.instance_type),
                "{n:?}"
            );
        }
        // Eight quarter-GPU pods need two GPUs, not eight.
        let gpus: u32 = plan.nodes.iter().map(|n| gpus_of(&n.instance_type)).sum();
        assert!(
            gpus <= 2,
            "{:?}: {gpus} GPUs: {:#?}",
            plan.strategy,
            plan.nodes
        );
    }
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
fn a_mig_pod_gets_a_node_whose_profile_provides_its_resource() {
    let mut pool = gpu_pool("mig");
    pool.sharing = quartermaster::cluster::GpuSharing::Mig {
        profile: "1g.10gb".into(),
    };
    let resource = "nvidia.com/mig-1g.10gb";
    let pods: Vec<Pod> = (0..10)
        .map(|i| {
            let mut p = Pod::new(
                &format!("m{i}"),
                Resources::new().with(CPU, 1000).with(resource, 1),
            );
            p.tolerations.push(Toleration::exists(l::TAINT_GPU));
            p
        })
        .collect();
    for plan in both(&pods, &[pool.clone()], &[]) {
        assert_eq!(placed(&plan), 10, "{:?}", plan.unschedulable);
        for n in &plan.nodes {
            let gpu = catalog()
                .instance_type(&n.instance_type)
                .unwrap()
                .accelerator
                .clone()
                .unwrap();
            assert!(
                quartermaster::catalog::mig::instances_per_gpu(
                    &gpu.model,
                    gpu.memory_mib_per_device,
                    "1g.10gb"
                )
                .is_some(),
                "{} cannot provide {resource}",
                n.instance_type
            );
        }
    }
    // A whole-GPU pod on the MIG pool gets nothing rather than a GPU that
    // cannot be split into the pool's profile.
    let plan = run(&[gpu_pod("whole", 1)], &[pool.clone()], &[], Strategy::Mip);
    assert!(plan.nodes.is_empty(), "launched {:?}", plan.nodes);
    // Without MIG on the pool, nothing provides the resource.
    let plan = run(&pods, &[gpu_pool("plain")], &[], Strategy::Mip);
    assert_eq!(plan.unschedulable.len(), 10);
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

// Counterexamples the optimality oracle (`tests/oracle/`) found, shrunk to
// a few offerings of the embedded catalog: the MIP's plan must keep every
// rule and cost the exhaustive optimum.

/// An instance of the offerings `(instance type, zone ID, capacity type)`
/// of the embedded catalog in [`REGION`] alone.
fn shrunk(
    offerings: &[(&str, &str, CapacityType)],
    pools: Vec<Pool>,
    pods: Vec<Pod>,
) -> oracle::Instance {
    let mut types = Vec::new();
    let mut chosen = Vec::new();
    for &(name, zone, capacity_type) in offerings {
        let o = catalog()
            .offerings_of(REGION, name)
            .find(|o| o.capacity_type == capacity_type && o.zone_id == zone)
            .unwrap_or_else(|| panic!("the catalog offers {name} {capacity_type} in {zone}"));
        chosen.push(o.clone());
        types.push(
            catalog()
                .instance_type(name)
                .expect("a catalog type")
                .clone(),
        );
    }
    oracle::Instance {
        catalog: Catalog::from_parts(types, chosen),
        pools,
        pods,
    }
}

/// Plans `inst` with the MIP and checks the plan against the exhaustive
/// optimum: every rule kept, as many pods placed, the same cost.
fn expect_optimal(inst: &oracle::Instance) -> Plan {
    let input = inst.input();
    let opts = Options::default();
    let plan = plan::plan(&input, Strategy::Mip, &opts, &|| 0.0);
    let rules = oracle::Rules::new(&input, &opts);
    let best = rules.optimum();
    let got = rules
        .value_of(&plan)
        .unwrap_or_else(|e| panic!("the plan breaks a rule: {e}: {:?}", plan.nodes));
    assert!(
        !got.worse_than(&best, 1e-9),
        "the plan {got:?} misses the optimum {best:?}: {:?}",
        plan.nodes
    );
    plan
}

/// `n` pods named `{prefix}{i}` of `cpu` millicores and `gib` GiB.
fn cpu_pods(prefix: &str, n: usize, cpu: i64, gib: i64) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            Pod::new(
                &format!("{prefix}{i}"),
                Resources::new().with(CPU, cpu).with(MEMORY, gib << 30),
            )
        })
        .collect()
}

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

/// The DRA objects of `yaml`, read as `plan` reads its files.
fn dra_objects(yaml: &str) -> quartermaster::cluster::dra::Objects {
    let mut manifests = quartermaster::cluster::workloads::Manifests::default();
    manifests.parse(yaml).expect("the fixture's YAML");
    manifests.dra
}

/// Three pods, each with one claim for `shares` quarters of a T4g's 16 GiB
/// (4Gi a share), on a pool that launches only `g5g.16xlarge` (two T4gs)
/// and shares its GPUs by MPS in four shares.
fn quarter_claims(shares: &[i64]) -> (Vec<Pod>, Vec<Pool>) {
    use quartermaster::cluster::dra::Resolver;
    use quartermaster::cluster::{ClaimRef, GpuSharing};
    let mut yaml = String::from(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.nvidia.com}\nspec:\n  selectors:\n  - cel: {expression: \"device.driver == 'gpu.nvidia.com'\"}\n",
    );
    for s in shares.iter().collect::<BTreeSet<_>>() {
        yaml += &format!(
            "---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: q{s}, namespace: ml}}\nspec:\n  spec:\n    devices:\n      requests:\n      - {{name: gpu, exactly: {{deviceClassName: gpu.nvidia.com, capacity: {{requests: {{memory: {}Gi}}}}}}}}\n",
            4 * s
        );
    }
    let objects = dra_objects(&yaml);
    let mut pool = Pool::new("mps");
    pool.sharing = GpuSharing::TimeSlicing { replicas: 4 };
    pool.dra_gpu_shares = Some(4);
    pool.requirements.push(Requirement {
        key: l::INSTANCE_TYPE.into(),
        operator: Operator::In,
        values: vec!["g5g.16xlarge".into()],
    });
    let mut pods: Vec<Pod> = shares
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut p = Pod::new(&format!("ml/p{i}"), Resources::new().with(CPU, 1000));
            p.tolerations.push(Toleration::exists(l::TAINT_GPU));
            p.resource_claims.push(ClaimRef {
                name: "gpu".into(),
                claim: None,
                template: Some(format!("q{s}")),
                generated: None,
                group: None,
            });
            p
        })
        .collect();
    Resolver::new()
        .share_gpus([4])
        .attach(&mut pods, &objects, catalog());
    (pods, vec![pool])
}

#[test]
fn claims_of_three_three_and_two_shares_are_not_planned_onto_two_gpus_of_four() {
    let (pods, pools) = quarter_claims(&[3, 3, 2]);
    let input = Input::offline(catalog(), REGION, &pools, &pods);
    let opts = Options::default();
    let rules = oracle::Rules::new(&input, &opts);
    for strategy in [Strategy::Mip, Strategy::Greedy] {
        let p = plan::plan(&input, strategy, &opts, &|| 0.0);
        assert!(p.unschedulable.is_empty(), "{strategy:?}: {p:#?}");
        // Each node's claims split onto its GPUs (the oracle's checker)...
        if let Err(e) = rules.value_of(&p) {
            panic!("{strategy:?}: the plan breaks a rule: {e}");
        }
        // ...so no GPU holds the two beside a three: two nodes.
        assert_eq!(p.nodes.len(), 2, "{strategy:?}: {p:#?}");
    }
    // Two and two shares fit one GPU, one the other: one node.
    let (pods, pools) = quarter_claims(&[2, 2, 1]);
    let input = Input::offline(catalog(), REGION, &pools, &pods);
    for strategy in [Strategy::Mip, Strategy::Greedy] {
        let p = plan::plan(&input, strategy, &opts, &|| 0.0);
        assert_eq!(p.nodes.len(), 1, "{strategy:?}: {p:#?}");
        oracle::Rules::new(&input, &opts).value_of(&p).unwrap();
    }
}

#[test]
fn the_oracle_checks_shares_gpu_by_gpu_for_dra_claims_and_replica_by_replica_for_the_plugin() {
    use quartermaster::cluster::GpuSharing;
    let mut pool = Pool::new("mps");
    pool.sharing = GpuSharing::TimeSlicing { replicas: 4 };
    pool.dra_gpu_shares = Some(4);
    let pods = |r: &str, shares: &[i64]| -> Vec<Pod> {
        shares
            .iter()
            .enumerate()
            .map(|(i, &s)| Pod::new(&format!("p{i}"), Resources::new().with(r, s)))
            .collect()
    };
    let holds = |r: &str, shares: &[i64]| {
        let pods = pods(r, shares);
        let members: Vec<&Pod> = pods.iter().collect();
        oracle::gpus_split(&pool, &Resources::new().with(r, 8), &members)
    };
    let dra = "gpu.nvidia.com/gpu.shared";
    // Two GPUs of four: 3 + 3 + 2 sums to 8, but no GPU holds the 2.
    assert!(!holds(dra, &[3, 3, 2]));
    assert!(holds(dra, &[3, 1, 2, 2]));
    assert!(holds(dra, &[3, 3, 1, 1]));
    assert!(!holds(dra, &[4, 2, 2, 1]));
    // The plugin's replicas are one each: any eight fit.
    assert!(holds("nvidia.com/gpu.shared", &[3, 3, 2]));
}

/// Two pods naming one ResourceClaim for a whole GPU, and a third with a
/// claim of its own, on a pool that launches only `g6.xlarge` (one L4).
fn one_shared_claim() -> (Vec<Pod>, Vec<Pool>) {
    use quartermaster::cluster::dra::Resolver;
    use quartermaster::cluster::ClaimRef;
    let yaml = "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.nvidia.com}\nspec:\n  selectors:\n  - cel: {expression: \"device.driver == 'gpu.nvidia.com'\"}\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: shared, namespace: ml}\nspec:\n  devices:\n    requests:\n    - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}\n---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: own, namespace: ml}\nspec:\n  spec:\n    devices:\n      requests:\n      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}\n";
    let objects = dra_objects(yaml);
    let mut pool = Pool::new("l4");
    pool.requirements.push(Requirement {
        key: l::INSTANCE_TYPE.into(),
        operator: Operator::In,
        values: vec!["g6.xlarge".into()],
    });
    let claim = |shared: bool| ClaimRef {
        name: "gpu".into(),
        claim: shared.then(|| "shared".to_string()),
        template: (!shared).then(|| "own".to_string()),
        generated: None,
        group: None,
    };
    let mut pods: Vec<Pod> = [("ml/a", true), ("ml/b", true), ("ml/c", false)]
        .into_iter()
        .map(|(name, shared)| {
            let mut p = Pod::new(name, Resources::new().with(CPU, 1000));
            p.tolerations.push(Toleration::exists(l::TAINT_GPU));
            p.resource_claims.push(claim(shared));
            p
        })
        .collect();
    Resolver::new().attach(&mut pods, &objects, catalog());
    (pods, vec![pool])
}

#[test]
fn the_oracle_counts_pods_sharing_a_claim_once_and_keeps_them_on_one_node() {
    let (pods, pools) = one_shared_claim();
    assert!(pods.iter().all(|p| p.devices.is_some()), "{pods:#?}");
    let input = Input::offline(catalog(), REGION, &pools, &pods);
    let opts = Options::default();
    let rules = oracle::Rules::new(&input, &opts);
    for strategy in [Strategy::Mip, Strategy::Greedy] {
        let p = plan::plan(&input, strategy, &opts, &|| 0.0);
        assert!(p.unschedulable.is_empty(), "{strategy:?}: {p:#?}");
        // Two GPUs: one for the shared claim, one for the third pod's.
        assert_eq!(p.nodes.len(), 2, "{strategy:?}: {p:#?}");
        let value = rules
            .value_of(&p)
            .unwrap_or_else(|e| panic!("{strategy:?}: {e}"));
        assert_eq!(value.unplaced, 0, "{strategy:?}");
        // The MIP's plan is within its gap of the oracle's optimum, counted
        // in the same units (greedy, a baseline, need not be).
        if matches!(strategy, Strategy::Mip) {
            let best = rules.optimum();
            assert!(!value.worse_than(&best, 0.02), "{value:?} vs {best:?}");
        }
        // One pod of the shared claim moved to a node of its own (a third
        // node, so that no node holds more than it can) breaks the claim.
        let mut split = p.clone();
        let from = split.nodes.iter().position(|n| n.pods.len() == 2).unwrap();
        let mut alone = split.nodes[from].clone();
        alone.pods = vec![split.nodes[from].pods.pop().unwrap()];
        split.nodes.push(alone);
        let err = rules.value_of(&split).unwrap_err();
        assert!(err.contains("two nodes"), "{strategy:?}: {err}");
    }
}
