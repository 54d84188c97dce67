//! Planner behaviour on the embedded catalog: one small, hand-checkable case
//! per constraint kind, for both the MIP and the greedy baseline.
//!
//! This module holds what the cases share: the catalog, GPU pods and
//! pools, planning with the MIP and greedy, and the shrunk instances the
//! optimality oracle checks. The cases are in its modules, one per topic:
//! [`instance_types`], [`gangs`], [`sharing`] (time slicing, MIG and DRA
//! claims), [`pools`] (taints, limits, weights, spot), [`rounding`],
//! [`packing`] (existing nodes, spreads, the oracle's counterexamples)
//! and [`bound`].

// The oracle's instance generator is the property test's; these modules use
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

mod bound;
mod gangs;
mod instance_types;
mod packing;
mod pools;
mod rounding;
mod sharing;

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

fn has_accelerator(instance_type: &str) -> bool {
    catalog()
        .instance_type(instance_type)
        .is_some_and(|t| t.accelerator.is_some())
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
