//! A Karpenter v1 GPU set-up converted with `api::karpenter`: the output
//! passes the validation `quartermaster validate` runs, selects exactly the
//! instance types Karpenter's requirements select (judged on Karpenter's
//! own labels), and plans pods onto the same families and capacity types.

use quartermaster::api::karpenter::{self, Converted, NoteKind};
use quartermaster::api::nodeclass::node_class_problems;
use quartermaster::api::{selected_instance_types, validate_node_pool, EC2NodeClass, NodePool};
use quartermaster::catalog::{AcceleratorKind, CapacityType, Catalog, InstanceType};
use quartermaster::cluster::resources::{CPU, MEMORY};
use quartermaster::cluster::{
    NodeAffinity, Operator, Pod, Pool, Requirement, Resources, Toleration,
};
use quartermaster::labels as l;
use quartermaster::plan::{self, Input, Options, Strategy};
use std::collections::{BTreeMap, BTreeSet};

const SETUP: &str = include_str!("fixtures/karpenter/gpu-setup.yaml");

fn converted() -> Vec<Converted> {
    karpenter::convert(SETUP).expect("the fixture is YAML")
}

fn pools() -> Vec<NodePool> {
    converted()
        .into_iter()
        .filter(|c| c.kind == "NodePool")
        .map(|c| serde_json::from_value(c.output.unwrap()).unwrap())
        .collect()
}

/// The Karpenter labels of an instance type that the fixture's
/// requirements read, computed the way Karpenter's AWS provider does:
/// the family, EC2's GPU name in lower case with dashes, the GPU count.
fn karpenter_labels(it: &InstanceType) -> BTreeMap<String, String> {
    let mut m = BTreeMap::from([(
        "karpenter.k8s.aws/instance-family".to_string(),
        it.family.clone(),
    )]);
    if let Some(a) = it
        .accelerator
        .as_ref()
        .filter(|a| a.kind == AcceleratorKind::Gpu)
    {
        m.insert(
            "karpenter.k8s.aws/instance-gpu-name".into(),
            a.model.to_lowercase().replace(' ', "-"),
        );
        m.insert(
            "karpenter.k8s.aws/instance-gpu-count".into(),
            a.count.to_string(),
        );
    }
    m
}

/// Whether Karpenter's requirement (as written in the fixture, `Lte`
/// included) holds for these labels.
fn karpenter_holds(req: &serde_json::Value, labels: &BTreeMap<String, String>) -> bool {
    let key = req["key"].as_str().unwrap();
    let values: Vec<&str> = req["values"]
        .as_array()
        .map(|v| v.iter().map(|x| x.as_str().unwrap()).collect())
        .unwrap_or_default();
    let Some(label) = labels.get(key) else {
        return false;
    };
    let n = || label.parse::<i64>().unwrap();
    let bound = || values[0].parse::<i64>().unwrap();
    match req["operator"].as_str().unwrap() {
        "In" => values.contains(&label.as_str()),
        "Gt" => n() > bound(),
        "Lte" => n() <= bound(),
        op => panic!("the fixture uses no {op}"),
    }
}

/// Per Karpenter pool of the fixture: the instance types its requirements
/// select and the capacity types it allows.
fn karpenter_view(catalog: &Catalog) -> BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> {
    let mut out = BTreeMap::new();
    for doc in serde_norway::Deserializer::from_str(SETUP) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        if v["kind"] != "NodePool" {
            continue;
        }
        let reqs = v["spec"]["template"]["spec"]["requirements"]
            .as_array()
            .unwrap();
        let (capacity, instance): (Vec<_>, Vec<_>) = reqs
            .iter()
            .partition(|r| r["key"] == "karpenter.sh/capacity-type");
        let types = catalog
            .instance_types()
            .filter(|it| {
                let labels = karpenter_labels(it);
                instance.iter().all(|r| karpenter_holds(r, &labels))
            })
            .map(|it| it.name.clone())
            .collect();
        let capacity = capacity[0]["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        let name = v["metadata"]["name"].as_str().unwrap().to_string();
        out.insert(name, (types, capacity));
    }
    out
}

#[test]
fn a_karpenter_gpu_setup_converts_completely_and_validates() {
    let catalog = Catalog::embedded().unwrap();
    let mut all = converted();
    assert_eq!(all.len(), 3);
    // The strict reader and validation `quartermaster validate` runs.
    karpenter::check(&mut all, &catalog);
    for c in &all {
        assert!(c.carried_everything(), "{}: {:#?}", c.label(), c.notes);
    }
    for pool in pools() {
        let problems = validate_node_pool(&pool, &catalog);
        assert!(problems.is_empty(), "{problems:?}");
    }
    let class: EC2NodeClass = serde_json::from_value(all[2].output.clone().unwrap()).unwrap();
    assert!(node_class_problems(&class.spec).is_empty());
    let root = &class.spec.block_device_mappings[0];
    assert_eq!(root.ebs.volume_size_gib, 500, "volumeSize: 500Gi");
    // What the fixture leaves unset comes out as Karpenter's default, said.
    let inference = &all[1];
    assert!(inference
        .notes
        .iter()
        .any(|n| n.path == "spec.template.spec.expireAfter" && n.kind == NoteKind::Info));
    let pools = pools();
    assert_eq!(
        pools[1].spec.template.spec.expire_after.as_deref(),
        Some("720h")
    );
    assert_eq!(
        pools[0].spec.template.spec.expire_after.as_deref(),
        Some("336h")
    );
    assert_eq!(pools[0].spec.disruption.budgets.len(), 2);
}

#[test]
fn converted_pools_select_exactly_what_karpenter_selects() {
    let catalog = Catalog::embedded().unwrap();
    let karpenter = karpenter_view(&catalog);
    for pool in pools() {
        let name = pool.metadata.name.clone().unwrap();
        let (types, capacity) = &karpenter[&name];
        let ours: BTreeSet<String> = selected_instance_types(&pool.spec, &catalog)
            .into_iter()
            .map(|it| it.name.clone())
            .collect();
        assert!(!types.is_empty(), "{name}: the fixture selects something");
        assert_eq!(&ours, types, "{name}");
        let ours: BTreeSet<String> = pool
            .spec
            .capacity_types
            .iter()
            .map(|c| c.to_string())
            .collect();
        assert_eq!(&ours, capacity, "{name}");
    }
}

fn gpu_pod(name: &str, gpus: i64, selector: &[(&str, &str)]) -> Pod {
    let mut p = Pod::new(
        name,
        Resources::new()
            .with(CPU, 4000)
            .with(MEMORY, 16 << 30)
            .with(l::RESOURCE_GPU, gpus),
    );
    p.tolerations.push(Toleration::exists(l::TAINT_GPU));
    p.affinity = NodeAffinity {
        terms: vec![selector
            .iter()
            .map(|(k, v)| Requirement {
                key: k.to_string(),
                operator: Operator::In,
                values: vec![v.to_string()],
            })
            .collect()],
    };
    p
}

#[test]
fn converted_pools_plan_the_families_and_capacity_types_karpenter_allowed() {
    let catalog = Catalog::embedded().unwrap();
    let pools: Vec<Pool> = pools()
        .iter()
        .map(|p| Pool::from_api(p, Resources::new()).unwrap())
        .collect();
    let family = l::INSTANCE_FAMILY;
    let capacity = l::CAPACITY_TYPE;
    let pods = vec![
        gpu_pod("train-p4d", 8, &[(family, "p4d")]),
        gpu_pod("train-p5-spot", 8, &[(family, "p5"), (capacity, "spot")]),
        gpu_pod("train-p5-od", 8, &[(family, "p5"), (capacity, "on-demand")]),
        gpu_pod("serve-g5", 1, &[(family, "g5")]),
        gpu_pod("serve-g6", 1, &[(family, "g6")]),
        gpu_pod("serve-spot", 1, &[(family, "g6"), (capacity, "spot")]),
        gpu_pod("serve-g6e", 1, &[(family, "g6e")]),
        gpu_pod("train-p5e", 8, &[(family, "p5e")]),
    ];
    let input = Input::offline(&catalog, "us-east-1", &pools, &pods);
    let start = std::time::Instant::now();
    for strategy in [Strategy::Greedy, Strategy::Mip] {
        let plan = plan::plan(&input, strategy, &Options::default(), &|| {
            start.elapsed().as_secs_f64()
        });
        let placed: BTreeMap<&str, (&str, &str, CapacityType)> = plan
            .nodes
            .iter()
            .flat_map(|n| {
                let fam = catalog
                    .instance_type(&n.instance_type)
                    .unwrap()
                    .family
                    .as_str();
                n.pods
                    .iter()
                    .map(move |p| (p.as_str(), (n.nodepool.as_str(), fam, n.capacity_type)))
            })
            .collect();
        use CapacityType::*;
        let on = |pod: &str| placed.get(pod).copied();
        assert_eq!(
            on("train-p4d").map(|p| (p.0, p.1)),
            Some(("training", "p4d"))
        );
        assert_eq!(on("train-p5-spot"), Some(("training", "p5", Spot)));
        assert_eq!(on("train-p5-od"), Some(("training", "p5", OnDemand)));
        assert_eq!(on("serve-g5"), Some(("inference", "g5", OnDemand)));
        assert_eq!(on("serve-g6"), Some(("inference", "g6", OnDemand)));
        let unplaced: BTreeSet<&str> = plan.unschedulable.iter().map(|u| u.pod.as_str()).collect();
        assert_eq!(
            unplaced,
            BTreeSet::from(["serve-spot", "serve-g6e", "train-p5e"]),
            "{strategy:?}: Karpenter's pools allowed none of these"
        );
    }
}

/// Karpenter's node-only kubelet settings reach the node: the converted
/// class's user data, merged by the launch code the controller uses, holds
/// the user's script, then a NodeConfig with the settings, then ours.
#[test]
fn carried_kubelet_settings_reach_the_launched_user_data_before_ours() {
    use quartermaster::cloud::aws::ec2::settings::{NodeClass, Settings};
    use quartermaster::cloud::aws::ec2::template::user_data;
    let karpenter_class = "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: c}\nspec:\n  amiSelectorTerms: [{alias: al2023@latest}]\n  role: nodes\n  subnetSelectorTerms: [{tags: {a: b}}]\n  securityGroupSelectorTerms: [{tags: {a: b}}]\n  userData: |\n    #!/bin/bash\n    echo before-join\n  kubelet:\n    clusterDNS: [169.254.20.10]\n    imageGCHighThresholdPercent: 85\n";
    let c = karpenter::convert(karpenter_class).unwrap().remove(0);
    assert!(c.carried_everything(), "{:#?}", c.notes);
    let ours: EC2NodeClass = serde_json::from_value(c.output.unwrap()).unwrap();
    let class: NodeClass = serde_json::from_value(serde_json::json!({
        "name": "c",
        "images": [],
        "subnetSelectorTerms": [],
        "securityGroupSelectorTerms": [],
        "instanceProfile": "nodes",
        "userData": ours.spec.user_data,
    }))
    .unwrap();
    let settings = Settings::from_yaml(
        "clusterName: prod\nclusterEndpoint: https://x.eks.example\ncertificateAuthority: Q0E=\nserviceCidr: 10.100.0.0/16\n",
    )
    .unwrap();
    let data = user_data(&settings, &class, &Default::default()).unwrap();
    let script = data.find("echo before-join").expect("the user's script");
    let kubelet = data.find("- 169.254.20.10").expect("the kubelet settings");
    let cluster = data.find("apiServerEndpoint").expect("our NodeConfig");
    assert!(script < kubelet && kubelet < cluster, "{data}");
    assert!(data.contains("imageGCHighThresholdPercent: 85"), "{data}");
}
