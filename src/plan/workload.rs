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

#[cfg(test)]
mod tests {
    use super::*;

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
