//! The greedy baseline keeps every rule Karpenter keeps that the MIP keeps
//! (issue 35): `greedy` and `karpenter` plans pass the oracle's rules as
//! Karpenter has them (`oracle::Rules::karpenter`: compatibility and room
//! per node, hostname anti-affinity, zone spread, NodePool limits; gangs
//! pod by pod), the MIP's plans of the examples pass the same rules and its
//! own (gangs, the spot pool share), and no greedy plan costs less than the
//! true lower bound (`plan::bound`) for the pods it places. On every NodePool file under
//! `deploy/examples/` with the example pods, and on the bench workload.

// The oracle serves other tests too; this one uses its rules only.
use crate::oracle;

use quartermaster::api::read;
use quartermaster::catalog::Catalog;
use quartermaster::cluster::workloads::Manifests;
use quartermaster::cluster::{Pod, Pool, Resources};
use quartermaster::plan::{self, bound, workload, Input, Options, Plan, Strategy};

const REGION: &str = "us-east-1";
const PODS: &str = "deploy/examples/plan/pods.yaml";

fn file(path: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The NodePools of a file, read as `plan --nodepools` reads them.
fn pools(path: &str, catalog: &Catalog, overhead: &Resources) -> Vec<Pool> {
    read::documents(&file(path))
        .unwrap_or_else(|(_, p)| panic!("{path}: {p:?}"))
        .iter()
        .filter(|d| read::Kind::of(d) != read::Kind::EC2NodeClass)
        .map(|d| {
            let api = read::node_pool(d, catalog).unwrap_or_else(|p| panic!("{path}: {p:?}"));
            Pool::from_api(&api, overhead.clone()).unwrap()
        })
        .collect()
}

/// The example pods and their daemonset overhead, read as `plan --pods`
/// reads them.
fn example_pods() -> (Vec<Pod>, Resources) {
    let mut m = Manifests::default();
    m.parse(&file(PODS)).unwrap();
    let overhead = m.daemonset_overhead.clone();
    let (pods, _, _) = m.into_cluster().unwrap();
    (pods, overhead)
}

/// Every NodePool file of `deploy/examples/` (and `plan/`), by path.
fn pool_files() -> Vec<String> {
    let mut out = Vec::new();
    for dir in ["deploy/examples", "deploy/examples/plan"] {
        let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        for e in std::fs::read_dir(full).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            let path = format!("{dir}/{name}");
            if name.ends_with(".yaml") && file(&path).contains("kind: NodePool") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Checks `input`'s greedy and `karpenter` plans against Karpenter's rules
/// and the bound; returns the greedy plan and the MIP's.
fn check(input: &Input, label: &str) -> (Plan, Plan) {
    let opts = Options {
        time_limit: std::time::Duration::from_secs(30),
        lower_bound: true,
        ..Options::default()
    };
    let karpenter = oracle::Rules::karpenter(input, &opts);
    let mip = plan::plan(input, Strategy::Mip, &opts, &|| 0.0);
    let mut greedy_plan = None;
    for strategy in [Strategy::Greedy, Strategy::Karpenter] {
        let p = plan::plan(input, strategy, &opts, &|| 0.0);
        let value = karpenter
            .value_of(&p)
            .unwrap_or_else(|e| panic!("{label} {strategy:?}: breaks a rule Karpenter keeps: {e}"));
        let cost = p.risk_adjusted_cost_per_hour;
        assert!(
            (value.cost - cost).abs() <= 1e-6 * (1.0 + cost),
            "{label} {strategy:?}: the checker prices the plan at {} against its {cost}",
            value.cost
        );
        let placed = plan::launched_pods(input, &p);
        let lb = bound::lower_bound(input, &placed, &opts);
        assert!(
            cost >= lb * (1.0 - 1e-9) - 1e-6,
            "{label} {strategy:?}: ${cost}/h under the true bound ${lb}/h"
        );
        let mut theirs = plan::launched_pods(input, &mip);
        let mut ours = placed;
        theirs.sort_unstable();
        ours.sort_unstable();
        if let (true, Some(mip_lb)) = (ours == theirs, mip.lower_bound_per_hour) {
            assert!(
                cost >= mip_lb * (1.0 - 1e-9) - 1e-6,
                "{label} {strategy:?}: ${cost}/h under the MIP's bound ${mip_lb}/h"
            );
        }
        if strategy == Strategy::Greedy {
            greedy_plan = Some(p);
        }
    }
    (greedy_plan.unwrap(), mip)
}

#[test]
fn greedy_keeps_karpenters_rules_and_the_bound_on_every_example_nodepool_file() {
    let catalog = Catalog::embedded().unwrap();
    let (pods, overhead) = example_pods();
    let files = pool_files();
    assert!(files.len() >= 6, "{files:?}");
    let mut placed_somewhere = 0;
    for path in &files {
        let pools = pools(path, &catalog, &overhead);
        let input = Input::offline(&catalog, REGION, &pools, &pods);
        let (greedy, mip) = check(&input, path);
        let opts = Options::default();
        if let Err(e) = oracle::Rules::new(&input, &opts).value_of(&mip) {
            panic!("{path}: the MIP's plan breaks a rule: {e}");
        }
        placed_somewhere += usize::from(!greedy.nodes.is_empty());
        if path.ends_with("plan/nodepools.yaml") {
            assert!(
                greedy.unschedulable.is_empty(),
                "{:?}",
                greedy.unschedulable
            );
        }
    }
    // The files' pools do take the example pods: the check saw real plans.
    assert!(
        placed_somewhere >= 4,
        "{placed_somewhere} of {}",
        files.len()
    );
}

#[test]
fn greedy_keeps_karpenters_rules_and_the_bound_on_the_bench_workload() {
    let catalog = Catalog::embedded().unwrap();
    let pools = workload::pools();
    for seed in 1..=3 {
        let pods = workload::pods(120, seed);
        let input = Input::offline(&catalog, REGION, &pools, &pods);
        let (greedy, mip) = check(&input, &format!("bench seed {seed}"));
        assert!(!greedy.nodes.is_empty() && !mip.nodes.is_empty());
        let opts = Options::default();
        if let Err(e) = oracle::Rules::new(&input, &opts).value_of(&mip) {
            panic!("bench seed {seed}: the MIP's plan breaks a rule: {e}");
        }
    }
}

/// Limits as Karpenter keeps them: a pool whose limits are spent gives its
/// new nodes to the next pool by weight, rather than leaving pods pending.
#[test]
fn greedy_opens_nodes_in_the_next_pool_when_the_heavier_ones_limits_are_spent() {
    let catalog = Catalog::embedded().unwrap();
    let (_, overhead) = example_pods();
    let mut pools = pools("deploy/examples/plan/nodepools.yaml", &catalog, &overhead);
    let general = pools
        .iter()
        .position(|p| p.name == "general")
        .expect("a pool named general");
    let mut heavy = pools[general].clone();
    heavy.name = "general-first".into();
    heavy.weight = pools[general].weight + 10;
    heavy.limits.nodes = Some(1);
    pools.push(heavy);
    let pods: Vec<Pod> = (0..6)
        .map(|i| {
            let mut p = Pod::new(
                &format!("web/api-{i}"),
                Resources::new()
                    .with(quartermaster::cluster::resources::CPU, 30_000)
                    .with(quartermaster::cluster::resources::MEMORY, 8 << 30),
            );
            // One to a node.
            p.labels.insert("app".into(), "api".into());
            p.per_node_max = Some(1);
            p
        })
        .collect();
    let input = Input::offline(&catalog, REGION, &pools, &pods);
    let (greedy, _) = check(&input, "heavier pool with one node");
    assert!(
        greedy.unschedulable.is_empty(),
        "{:?}",
        greedy.unschedulable
    );
    let in_pool = |name: &str| greedy.nodes.iter().filter(|n| n.nodepool == name).count();
    assert_eq!(in_pool("general-first"), 1, "{:#?}", greedy.nodes);
    assert!(in_pool("general") >= 1, "{:#?}", greedy.nodes);
}
