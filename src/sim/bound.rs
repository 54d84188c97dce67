//! The clairvoyant lower bound a simulation's costs are compared with: what
//! the workload would cost if every job ran, from its submission, without
//! interruptions or idle capacity, on the cheapest share of a node that its
//! NodePools allow. Every strategy pays at least this, so "vs bound" in the
//! report says how far a strategy is from the impossible best.
//!
//! Why it is a bound: each offering charges a pod one fixed resource's share
//! of the node (the accelerator's for accelerated types, the CPU's for the
//! others), and on any node the shares of one resource add up to at most the
//! whole node; so a node's price covers what its pods are charged, and the
//! cheapest charge over the offerings a pod may use is at most what it costs
//! wherever it actually ran. (Charging each pod its largest share instead
//! would not be a bound: a GPU-heavy and a CPU-heavy pod can share a node.)

use super::workload::SimJob;
use crate::api::NodePool;
use crate::catalog::Catalog;
use crate::cluster::resources::CPU;
use crate::cluster::{NodeAffinity, Pod, Resources, Toleration};
use crate::plan::candidates::{candidates, pods_per_node, Candidate};
use crate::plan::classes::Class;
use crate::plan::Input;
use std::collections::HashMap;

/// The bound of one workload.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bound {
    /// USD: the sum over placeable jobs of their cheapest charge per hour
    /// times the hours they could run in the window.
    pub cost: f64,
    /// Jobs that no pool can place (no offering the pools allow holds and
    /// admits them): left out of `cost`, counted here.
    pub unplaceable: usize,
}

/// The share of a node of `c` that `pod` is charged: its part of the
/// accelerator resource the node advertises, or of its CPU when the node has
/// no accelerator.
fn share(pod: &Pod, c: &Candidate) -> f64 {
    match &c.accelerator_resource {
        Some(resource) if c.accelerator_units > 0 => {
            pod.requests.get(resource) as f64 / c.accelerator_units as f64
        }
        _ => {
            let cpu = c.allocatable.get(CPU);
            if cpu > 0 {
                pod.requests.get(CPU) as f64 / cpu as f64
            } else {
                0.0
            }
        }
    }
}

/// The bound of `jobs` run in `region` by `node_pools` (invalid pools place
/// nothing), for a window that ends at `end`: each job is charged from its
/// submission for its run time or the rest of the window, whichever is
/// shorter.
pub fn lower_bound(
    jobs: &[SimJob],
    catalog: &Catalog,
    region: &str,
    node_pools: &[NodePool],
    end: crate::core::Time,
) -> Bound {
    let pools: Vec<crate::cluster::Pool> = node_pools
        .iter()
        .filter_map(|p| crate::cluster::Pool::from_api(p, Resources::new()).ok())
        .collect();
    let input = Input {
        catalog,
        region,
        pools: &pools,
        nodes: &[],
        pods: &[],
        unavailable: &|_| false,
        learned_rate: None,
        now: None,
    };
    let cands = candidates(&input);
    // Pods of one shape and the same constraints cost the same per hour:
    // long runs have many jobs and few shapes.
    type Shape<'p> = (&'p Resources, &'p [Toleration], &'p NodeAffinity, bool);
    let mut per_hour: HashMap<Shape, Option<f64>> = HashMap::new();
    let mut bound = Bound::default();
    for job in jobs {
        let pod = &job.pod;
        let shape = (
            &pod.requests,
            pod.tolerations.as_slice(),
            &pod.affinity,
            pod.hostname_anti_affinity,
        );
        let charge = *per_hour.entry(shape).or_insert_with(|| {
            let class = Class::of(pod, 0);
            cands
                .iter()
                .filter(|c| pods_per_node(&class, c) > 0)
                .map(|c| c.price() * share(pod, c))
                .min_by(f64::total_cmp)
        });
        match charge {
            Some(usd_per_hour) => {
                let window_s = (end - job.submit).num_milliseconds().max(0) as f64 / 1000.0;
                bound.cost += usd_per_hour * job.work_s.min(window_s) / 3600.0;
            }
            None => bound.unplaceable += 1,
        }
    }
    bound
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::resources::MEMORY;
    use chrono::TimeZone;

    fn t(h: i64) -> crate::core::Time {
        chrono::Utc.with_ymd_and_hms(2026, 1, 5, 0, 0, 0).unwrap() + chrono::Duration::hours(h)
    }

    fn pool(families: &str) -> NodePool {
        serde_norway::from_str(&format!(
            "apiVersion: quartermaster.dev/v1alpha1
kind: NodePool
metadata: {{name: p}}
spec:
  capacityTypes: [spot, on-demand]
  template:
    spec:
      requirements:
      - {{key: quartermaster.dev/instance-family, operator: In, values: [{families}]}}"
        ))
        .unwrap()
    }

    fn job(gpus: i64, submit_h: i64, work_h: f64) -> SimJob {
        SimJob {
            pod: Pod::new(
                "ml/j",
                Resources::new()
                    .with(CPU, 1000)
                    .with(MEMORY, 1 << 30)
                    .with(crate::labels::RESOURCE_GPU, gpus),
            ),
            submit: t(submit_h),
            work_s: work_h * 3600.0,
            checkpoint_interval_s: None,
            checkpoint_write_s: 0.0,
            restart_overhead_s: 0.0,
            stateless: false,
            gpu_share: None,
        }
    }

    /// The cheapest per-GPU price among a family's offerings with at least
    /// `min_gpus` GPUs, by hand.
    fn cheapest_per_gpu(catalog: &Catalog, family: &str, min_gpus: u32) -> f64 {
        catalog
            .offerings_in("us-east-1")
            .filter(|o| o.instance_type.starts_with(&format!("{family}.")))
            .filter_map(|o| {
                let gpus = catalog
                    .instance_type(&o.instance_type)?
                    .accelerator
                    .as_ref()?
                    .count;
                (gpus >= min_gpus).then(|| o.price_per_hour / f64::from(gpus))
            })
            .fold(f64::INFINITY, f64::min)
    }

    #[test]
    fn a_job_is_charged_its_gpu_share_of_the_cheapest_node_its_pool_allows_for_the_window() {
        let catalog = Catalog::embedded().unwrap();
        let p4d = cheapest_per_gpu(&catalog, "p4d", 1);
        let (g5_one, g5_two) = (
            cheapest_per_gpu(&catalog, "g5", 1),
            cheapest_per_gpu(&catalog, "g5", 2),
        );
        assert!(
            g5_one < p4d,
            "the test needs a cheaper family outside the pool"
        );
        let jobs = [job(2, 0, 10.0), job(1, 20, 10.0)];
        // The second job has 4 of its 10 hours left in a 24-hour window.
        let b = lower_bound(&jobs, &catalog, "us-east-1", &[pool("p4d")], t(24));
        assert_eq!(b.unplaceable, 0);
        assert!((b.cost - p4d * (2.0 * 10.0 + 4.0)).abs() < 1e-6, "{b:?}");
        // The same jobs in a pool that also allows g5 cost less: the 2-GPU
        // job on the cheapest node with two GPUs or more, either family.
        let cheaper = lower_bound(&jobs, &catalog, "us-east-1", &[pool("g5, p4d")], t(24));
        let expected = g5_two.min(p4d) * 20.0 + g5_one * 4.0;
        assert!(
            (cheaper.cost - expected).abs() < 1e-6,
            "{cheaper:?} vs {expected}"
        );
        assert!(cheaper.cost < b.cost);
    }

    #[test]
    fn jobs_no_pool_can_place_are_counted_apart() {
        let catalog = Catalog::embedded().unwrap();
        let jobs = [job(1, 0, 1.0), job(100, 0, 1.0)];
        let b = lower_bound(&jobs, &catalog, "us-east-1", &[pool("p4d")], t(24));
        assert_eq!(b.unplaceable, 1, "no node has 100 GPUs");
        assert!(b.cost > 0.0);
        let none = lower_bound(&jobs, &catalog, "us-east-1", &[], t(24));
        assert_eq!((none.cost, none.unplaceable), (0.0, 2));
    }
}
