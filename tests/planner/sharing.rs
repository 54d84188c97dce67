//! GPU sharing: time-sliced pools take shared-GPU pods and never whole-GPU
//! ones, MIG pools take their profile's slices, and DRA claims split GPU by
//! GPU (the plans and the oracle's checks of them).

use super::*;

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
