//! NodePools as the planner sees them: which offerings they allow, what their
//! nodes look like, and the limits and risk settings that bound them.

use super::requirements::{Labels, Requirement, Taint};
use super::resources::Resources;
use super::shape::GpuSharing;
use crate::catalog::{CapacityType, InterruptionBucket};

/// Limits of a NodePool over all its nodes (existing and new).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Limits {
    /// Resource limits over node capacity (`nvidia.com/gpu`, `cpu`, ...).
    pub resources: Resources,
    /// Most nodes.
    pub nodes: Option<i64>,
    /// Most USD per hour.
    pub cost_per_hour: Option<f64>,
}

/// A NodePool distilled for planning.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// NodePool name.
    pub name: String,
    /// Higher weight is preferred whenever it can take the pod.
    pub weight: i32,
    /// Allowed capacity types.
    pub capacity_types: Vec<CapacityType>,
    /// Requirements on node labels that select instance types and zones.
    pub requirements: Vec<Requirement>,
    /// Labels its nodes carry in addition to the well-known ones.
    pub labels: Labels,
    /// Taints its nodes carry.
    pub taints: Vec<Taint>,
    /// GPU sharing on its nodes.
    pub sharing: GpuSharing,
    /// Limits over all its nodes.
    pub limits: Limits,
    /// Highest spot interruption bucket allowed.
    pub max_interruption_bucket: Option<InterruptionBucket>,
    /// Multiplier of the expected interruption cost (0 ignores risk).
    pub risk_aversion: f64,
    /// Largest share of the pool's new spot nodes in one spot pool
    /// (instance type x zone).
    pub max_spot_pool_share: Option<f64>,
    /// Requests of the daemonsets that run on every node of the pool.
    pub daemonset_overhead: Resources,
    /// The pool launches its EFA types with EFA interfaces whether or not
    /// a pod requests the fabric (`spec.template.spec.efa`): its gangs
    /// then stay on one instance type, as EFA-requesting gangs do.
    pub efa: bool,
    /// The DRA drivers its nodes run (`None`: every driver with device
    /// templates; empty: none). Nodes launched for DRA claims offer these
    /// drivers' devices in place of the device plugin's.
    pub dra_drivers: Option<Vec<String>>,
    /// How DRA `firstAvailable` alternatives are chosen for its nodes.
    pub first_available: crate::api::FirstAvailable,
    /// Shares per GPU when its GPUs are shared by MPS: nodes launched for
    /// DRA claims publish them shareable (consumable capacity, in steps of
    /// one share), as the device plugin offers `replicas` MPS clients.
    pub dra_gpu_shares: Option<u32>,
}

impl Pool {
    /// Whether its nodes run the DRA driver `driver`.
    pub fn runs_dra_driver(&self, driver: &str) -> bool {
        self.dra_drivers
            .as_ref()
            .is_none_or(|d| d.iter().any(|x| x == driver))
    }

    /// How its nodes' GPUs are published to DRA: partitioned into its MIG
    /// profile, shared (MPS), or whole.
    pub fn gpu_layout(&self) -> crate::catalog::GpuLayout<'_> {
        match (&self.sharing, self.dra_gpu_shares) {
            (GpuSharing::Mig { profile }, _) => crate::catalog::GpuLayout::Mig(profile),
            (_, Some(shares)) => crate::catalog::GpuLayout::Shared(shares),
            _ => crate::catalog::GpuLayout::Whole,
        }
    }
}

impl Pool {
    /// A pool allowing everything, with no limits (tests, `bench`).
    pub fn new(name: &str) -> Pool {
        Pool {
            name: name.into(),
            weight: 0,
            capacity_types: vec![CapacityType::Spot, CapacityType::OnDemand],
            requirements: Vec::new(),
            labels: Labels::new(),
            taints: Vec::new(),
            sharing: GpuSharing::None,
            limits: Limits::default(),
            max_interruption_bucket: None,
            risk_aversion: 1.0,
            max_spot_pool_share: None,
            daemonset_overhead: Resources::new(),
            efa: false,
            dra_drivers: None,
            first_available: crate::api::FirstAvailable::InOrder,
            dra_gpu_shares: None,
        }
    }
}

impl Pool {
    /// The planner's view of a NodePool. `daemonset_overhead` is what the
    /// cluster's daemonsets request on each of its nodes.
    ///
    /// # Errors
    /// A pool that fails validation ([`crate::api::validate_node_pool`],
    /// the checks that need no catalog): a restricted label, a limit that is
    /// not a number, ... Such a pool is not planned for; its status
    /// condition names the problem (`controller::status`).
    pub fn from_api(
        pool: &crate::api::NodePool,
        daemonset_overhead: Resources,
    ) -> Result<Pool, String> {
        use super::requirements::{Requirement, Taint};
        let spec = &pool.spec;
        let name = pool.metadata.name.clone().unwrap_or_default();
        let no_catalog = crate::catalog::Catalog::default();
        if let Some(problem) = crate::api::validate_node_pool(pool, &no_catalog).first() {
            return Err(format!("NodePool {name} is invalid: {problem}"));
        }
        let err = |e: crate::api::nodepool::LimitError| format!("NodePool {name}: {e}");
        let mut resources = Resources::new();
        for (k, v) in spec.resource_limits().map_err(err)? {
            let scaled = if k == super::resources::CPU {
                v * 1000.0
            } else {
                v
            };
            resources.set(&k, scaled.floor() as i64);
        }
        let taint = |t: &crate::api::Taint| Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect,
        };
        Ok(Pool {
            weight: spec.weight_or_default(),
            capacity_types: spec.allowed_capacity_types(),
            requirements: spec
                .template
                .spec
                .requirements
                .iter()
                .map(|r| Requirement {
                    key: r.key.clone(),
                    operator: r.operator,
                    values: r.values.clone(),
                })
                .collect(),
            labels: spec.template.metadata.labels.clone(),
            taints: spec.template.spec.taints.iter().map(taint).collect(),
            sharing: match (
                spec.gpu_sharing.shared_replicas(),
                spec.gpu_sharing.mig_profile(),
            ) {
                (Some(replicas), _) => GpuSharing::TimeSlicing { replicas },
                (None, Some(profile)) => GpuSharing::Mig {
                    profile: profile.to_string(),
                },
                _ => GpuSharing::None,
            },
            limits: Limits {
                resources,
                nodes: spec.node_limit().map_err(err)?.map(|n| n as i64),
                cost_per_hour: spec.cost_limit_per_hour().map_err(err)?,
            },
            max_interruption_bucket: spec.risk.max_interruption_bucket.map(InterruptionBucket),
            risk_aversion: spec.risk.risk_aversion,
            max_spot_pool_share: spec.risk.max_spot_pool_share,
            daemonset_overhead,
            efa: spec.template.spec.efa,
            dra_drivers: spec.dra.drivers.clone(),
            first_available: spec.dra.first_available,
            dra_gpu_shares: spec.gpu_sharing.dra_gpu_shares(),
            name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodePool, NodePoolSpec};

    fn api_pool(spec: &str) -> NodePool {
        NodePool::new("p", serde_norway::from_str::<NodePoolSpec>(spec).unwrap())
    }

    #[test]
    fn a_pool_that_fails_validation_is_not_planned_for() {
        for (spec, why) in [
            (
                "template: { metadata: { labels: { topology.kubernetes.io/zone: use1-az1 } } }",
                "well-known label",
            ),
            (
                "template: { metadata: { labels: { node-restriction.kubernetes.io/trusted: 'yes' } } }",
                "restricted",
            ),
            ("limits: { nvidia.com/gpu: '-1e400' }", "out of range"),
        ] {
            let err = Pool::from_api(&api_pool(spec), Resources::new()).unwrap_err();
            assert!(err.contains("NodePool p is invalid") && err.contains(why), "{err}");
        }
        let ok = Pool::from_api(
            &api_pool("template: { metadata: { labels: { team: ml } } }"),
            Resources::new(),
        )
        .unwrap();
        assert_eq!(ok.labels["team"], "ml");
    }

    #[test]
    fn an_mps_pool_offers_its_gpus_as_shares_as_time_slicing_does() {
        for mode in ["Mps", "TimeSlicing"] {
            let spec = format!("gpuSharing: {{ mode: {mode}, replicas: 4 }}");
            let pool = Pool::from_api(&api_pool(&spec), Resources::new()).unwrap();
            assert_eq!(
                pool.sharing,
                GpuSharing::TimeSlicing { replicas: 4 },
                "{mode}"
            );
            // Under DRA only MPS's GPUs are shareable: time slicing
            // isolates no memory, so it has no capacity to consume.
            let layout = (mode == "Mps").then_some(crate::catalog::GpuLayout::Shared(4));
            assert_eq!(
                pool.gpu_layout(),
                layout.unwrap_or(crate::catalog::GpuLayout::Whole),
                "{mode}"
            );
        }
    }
}
