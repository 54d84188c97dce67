//! A reproducible mixed workload for benchmarks: GPU training pods of 1, 2, 4
//! and 8 GPUs (some in gangs, some pinned to a GPU model), MIG inference pods
//! spread over zones, Neuron pods and CPU pods, with the NodePools that take
//! them. Seeded: the same seed gives the same pods.

use crate::api::labels as l;
use crate::cluster::resources::{CPU, MEMORY};
use crate::cluster::{
    Effect, GpuSharing, GroupRef, Operator, Pod, Pool, Requirement, Resources, Taint, Toleration,
    ZoneSpread,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const GIB: i64 = 1 << 30;

/// The benchmark's NodePools: a tainted GPU pool, a MIG pool on A100 80GB and
/// H100, a tainted Neuron pool, and an untainted general pool.
pub fn pools() -> Vec<Pool> {
    let exists = |key: &str| Requirement {
        key: key.into(),
        operator: Operator::Exists,
        values: vec![],
    };
    let mut gpu = Pool::new("gpu");
    gpu.taints
        .push(Taint::new(l::TAINT_GPU, "", Effect::NoSchedule));
    gpu.requirements.push(exists(l::GPU_COUNT));
    let mut mig = Pool::new("mig");
    mig.taints
        .push(Taint::new(l::TAINT_GPU, "", Effect::NoSchedule));
    mig.requirements.push(Requirement::new(
        l::INSTANCE_FAMILY,
        Operator::In,
        &["p4de", "p5"],
    ));
    mig.sharing = GpuSharing::Mig {
        profile: "1g.10gb".into(),
    };
    let mut neuron = Pool::new("neuron");
    neuron
        .taints
        .push(Taint::new(l::TAINT_NEURON, "", Effect::NoSchedule));
    neuron.requirements.push(exists(l::NEURON_COUNT));
    vec![gpu, mig, neuron, Pool::new("general")]
}

/// `n` pods from `seed`.
pub fn pods(n: usize, seed: u64) -> Vec<Pod> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut pods = Vec::with_capacity(n);
    let mut w = 0;
    while pods.len() < n {
        w += 1;
        let kind = rng.random_range(0..100);
        let left = n - pods.len();
        let mut make = |replicas: usize, template: Pod, gang: bool| {
            let replicas = replicas.min(left).max(1);
            for i in 0..replicas {
                let mut p = template.clone();
                p.name = format!("bench/w{w}-{i}");
                if gang {
                    p.group = Some(GroupRef {
                        name: format!("bench/w{w}"),
                        min_member: replicas as u32,
                    });
                }
                pods.push(p);
            }
        };
        if kind < 35 {
            let gpus = [1, 1, 2, 4, 8][rng.random_range(0..5)];
            let mut p = Pod::new(
                "",
                Resources::new()
                    .with(CPU, gpus * rng.random_range(4..=10) * 1000)
                    .with(MEMORY, gpus * rng.random_range(24..=80) * GIB)
                    .with(l::RESOURCE_GPU, gpus),
            );
            p.tolerations.push(Toleration::exists(l::TAINT_GPU));
            match rng.random_range(0..10) {
                0..=1 => {
                    p.affinity.terms = vec![vec![Requirement::new(
                        l::GPU_NAME,
                        Operator::In,
                        &["a100", "h100"],
                    )]]
                }
                2 => {
                    p.affinity.terms =
                        vec![vec![Requirement::new(l::GPU_NAME, Operator::In, &["l40s"])]]
                }
                _ => {}
            }
            if rng.random_bool(0.6) {
                p.checkpoint_interval_s = Some(1800.0);
                p.checkpoints = true;
            } else {
                p.expected_runtime_s = Some(rng.random_range(1..=12) as f64 * 3600.0);
            }
            let gang = gpus >= 4 && rng.random_bool(0.4);
            let replicas = if gang {
                rng.random_range(2..=8)
            } else {
                rng.random_range(1..=24)
            };
            make(replicas, p, gang);
        } else if kind < 55 {
            let mut p = Pod::new(
                "",
                Resources::new()
                    .with(CPU, 2000)
                    .with(MEMORY, 8 * GIB)
                    .with("nvidia.com/mig-1g.10gb", 1),
            );
            p.tolerations.push(Toleration::exists(l::TAINT_GPU));
            if rng.random_bool(0.5) {
                p.zone_spread = Some(ZoneSpread {
                    max_skew: 1,
                    selector: format!("bench/app=w{w}"),
                });
            }
            make(rng.random_range(2..=48), p, false);
        } else if kind < 65 {
            let devices = [1, 1, 16][rng.random_range(0..3)];
            let mut p = Pod::new(
                "",
                Resources::new()
                    .with(CPU, 4000 * devices.min(4))
                    .with(MEMORY, 16 * GIB * devices.min(4))
                    .with(l::RESOURCE_NEURON, devices),
            );
            p.tolerations.push(Toleration::exists(l::TAINT_NEURON));
            make(rng.random_range(1..=16), p, false);
        } else {
            let p = Pod::new(
                "",
                Resources::new()
                    .with(CPU, rng.random_range(1..=16) * 500)
                    .with(MEMORY, rng.random_range(1..=32) * GIB),
            );
            make(rng.random_range(1..=64), p, false);
        }
    }
    pods
}

/// The same pods asking for the same devices through DRA claims: each
/// device-plugin request (`nvidia.com/gpu`, `nvidia.com/mig-1g.10gb`,
/// `aws.amazon.com/neuron`) becomes a claim from a ResourceClaimTemplate on
/// the drivers' DeviceClasses, a GPU-model requirement becomes a selector on
/// the product name; with the DeviceClasses and templates it needs. Pods
/// are returned unmatched (the caller runs `cluster::dra::Resolver`).
pub fn dra_form(pods: &[Pod]) -> (Vec<Pod>, crate::cluster::dra::Objects) {
    dra_form_with(pods, "", None)
}

/// [`dra_form`] with template names starting with `prefix` (so that the
/// objects of several calls can be put together) and `selector`, a CEL
/// expression, added to every GPU request (`device.attributes['gpu.nvidia.com'].productName
/// == 'NVIDIA L4'`).
pub fn dra_form_with(
    pods: &[Pod],
    prefix: &str,
    selector: Option<&str>,
) -> (Vec<Pod>, crate::cluster::dra::Objects) {
    use crate::cluster::ClaimRef;
    let mut objects = crate::cluster::dra::Objects::default();
    let class = |name: &str, expr: &str| -> k8s_openapi::api::resource::v1::DeviceClass {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expr}}]}
        }))
        .expect("a DeviceClass")
    };
    objects.add_class(class(
        "gpu.nvidia.com",
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    ));
    objects.add_class(class(
        "mig.nvidia.com",
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
    ));
    objects.add_class(class("neuron.aws.com", "device.driver == 'neuron.aws.com'"));
    let product = |names: &[&str]| -> String {
        names
            .iter()
            .map(|n| format!("device.attributes['gpu.nvidia.com'].productName.contains('{n}')"))
            .collect::<Vec<_>>()
            .join(" || ")
    };
    let mut out = Vec::with_capacity(pods.len());
    // One template per distinct request: (namespace, class, count, selector).
    type Key = (String, String, i64, Option<String>);
    let mut templates: std::collections::BTreeMap<Key, String> = Default::default();
    for pod in pods {
        let mut p = pod.clone();
        let (ns, _) = p.name.split_once('/').unwrap_or(("default", ""));
        let mut request = |class: &str, count: i64, selector: Option<String>| -> String {
            let n = templates.len();
            let key = (ns.to_string(), class.to_string(), count, selector.clone());
            if let Some(name) = templates.get(&key) {
                return name.clone();
            }
            let name = format!(
                "{prefix}{}-{count}-{n}",
                class.split('.').next().unwrap_or(class)
            );
            let selectors: Vec<serde_json::Value> = selector
                .iter()
                .map(|e| serde_json::json!({"cel": {"expression": e}}))
                .collect();
            objects.add_template(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"spec": {"devices": {"requests": [{
                        "name": "devices",
                        "exactly": {"deviceClassName": class, "count": count, "selectors": selectors}
                    }]}}}
                }))
                .expect("a ResourceClaimTemplate"),
            );
            templates.insert(key, name.clone());
            name
        };
        let mut claim = None;
        let gpus = p.requests.get(l::RESOURCE_GPU);
        if gpus > 0 {
            // A GPU-model requirement is a selector on the product name.
            let mut names: Vec<String> = Vec::new();
            p.affinity.terms.retain(|t| {
                let model = t.len() == 1 && t[0].key == l::GPU_NAME;
                if model {
                    names = t[0].values.iter().map(|v| v.to_uppercase()).collect();
                }
                !model
            });
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let by_model = (!refs.is_empty()).then(|| product(&refs));
            let sel = match (by_model, selector) {
                (Some(m), Some(s)) => Some(format!("({m}) && ({s})")),
                (m, s) => m.or_else(|| s.map(str::to_string)),
            };
            claim = Some(request("gpu.nvidia.com", gpus, sel));
            p.requests.set(l::RESOURCE_GPU, 0);
        }
        let mig = p.requests.get("nvidia.com/mig-1g.10gb");
        if mig > 0 {
            let sel = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'".to_string();
            claim = Some(request("mig.nvidia.com", mig, Some(sel)));
            p.requests.set("nvidia.com/mig-1g.10gb", 0);
        }
        let neuron = p.requests.get(l::RESOURCE_NEURON);
        if neuron > 0 {
            claim = Some(request("neuron.aws.com", neuron, None));
            p.requests.set(l::RESOURCE_NEURON, 0);
        }
        if let Some(template) = claim {
            p.resource_claims.push(ClaimRef {
                name: "devices".into(),
                claim: None,
                template: Some(template),
                generated: None,
                group: None,
            });
        }
        out.push(p);
    }
    (out, objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dra_form_asks_for_the_same_devices_through_claims() {
        let plugin = pods(300, 3);
        let (dra, objects) = dra_form(&plugin);
        let catalog = crate::catalog::Catalog::embedded().unwrap();
        let mut dra = dra;
        crate::cluster::dra::Resolver::new().attach(&mut dra, &objects, &catalog);
        for (a, b) in plugin.iter().zip(&dra) {
            assert!(
                b.not_placeable.is_empty(),
                "{}: {:?}",
                b.name,
                b.not_placeable
            );
            let devices = a.requests.get(l::RESOURCE_GPU)
                + a.requests.get("nvidia.com/mig-1g.10gb")
                + a.requests.get(l::RESOURCE_NEURON);
            assert_eq!(
                b.resource_claims.len(),
                usize::from(devices > 0),
                "{}",
                a.name
            );
            assert_eq!(b.requests.get(l::RESOURCE_GPU), 0);
        }
    }

    #[test]
    fn the_dra_form_plans_the_same_nodes_at_the_same_cost() {
        use crate::plan::{plan, Input, Options, Strategy};
        let catalog = crate::catalog::Catalog::embedded().unwrap();
        let pools = pools();
        let plugin = pods(300, 3);
        let (mut dra, objects) = dra_form(&plugin);
        crate::cluster::dra::Resolver::new().attach(&mut dra, &objects, &catalog);
        // No branch and bound: plans that do not depend on the machine's speed.
        let options = Options {
            max_branch_and_bound_integers: 0,
            ..Options::default()
        };
        let run = |pods: &[Pod]| {
            plan(
                &Input::offline(&catalog, "us-east-1", &pools, pods),
                Strategy::Mip,
                &options,
                &|| 0.0,
            )
        };
        let (a, b) = (run(&plugin), run(&dra));
        assert!(b.unschedulable.is_empty(), "{:?}", b.unschedulable);
        assert_eq!(a.nodes.len(), b.nodes.len());
        assert!(
            (a.risk_adjusted_cost_per_hour - b.risk_adjusted_cost_per_hour).abs() < 1e-6,
            "{} vs {}",
            a.risk_adjusted_cost_per_hour,
            b.risk_adjusted_cost_per_hour
        );
        let types = |p: &crate::plan::Plan| {
            let mut t: Vec<String> = p.nodes.iter().map(|n| n.instance_type.clone()).collect();
            t.sort();
            t
        };
        assert_eq!(types(&a), types(&b));
        // The DRA form's GPU nodes are launched to serve DRA.
        assert!(b
            .nodes
            .iter()
            .filter(|n| n.labels.contains_key(l::GPU_COUNT))
            .all(|n| n.labels.get(l::DRA).map(String::as_str) == Some("true")));
    }

    #[test]
    fn the_same_seed_gives_the_same_pods_and_another_seed_others() {
        let a = pods(2000, 7);
        assert_eq!(a.len(), 2000);
        assert_eq!(a, pods(2000, 7));
        assert_ne!(a, pods(2000, 8));
        assert!(a.iter().any(|p| p.group.is_some()));
        assert!(a.iter().any(|p| p.requests.get(l::RESOURCE_NEURON) > 0));
    }
}
