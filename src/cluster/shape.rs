//! Node shapes: what a node of an instance type offers to pods (allocatable,
//! as EKS computes it, with GPU sharing applied) and the labels it carries.
//!
//! Allocatable follows Karpenter's EKS model:
//! - capacity memory is the EC2 figure less a VM overhead of 7.5%;
//! - max pods is 110 below 30 vCPUs and 250 from 30 vCPUs (EKS's recommended
//!   values with VPC CNI prefix delegation, which lifts the per-ENI IP limit);
//! - kube-reserved CPU: 6% of the first core, 1% of the second, 0.5% of the
//!   third and fourth, 0.25% of every further core;
//! - kube-reserved memory: 11 MiB per pod slot + 255 MiB; ephemeral storage
//!   1 GiB; system-reserved: none (the EKS AMI's default);
//! - eviction thresholds: `memory.available` 100 MiB, `nodefs.available` 10%
//!   of the root volume (200 GiB on accelerated types, sized for GPU images,
//!   80 GiB otherwise).

use super::requirements::Labels;
use super::resources::{Resources, CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
use crate::api::labels as l;
use crate::catalog::{self, mig, AcceleratorKind, InstanceType, Offering, ZoneNames};

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// Share of EC2's memory figure that the hypervisor keeps (Karpenter's
/// `VM_MEMORY_OVERHEAD_PERCENT` default).
pub const VM_MEMORY_OVERHEAD: f64 = 0.075;

/// How the GPUs of a node are shared between pods.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum GpuSharing {
    /// One pod per GPU.
    #[default]
    None,
    /// NVIDIA time-slicing: each GPU is advertised `replicas` times as
    /// `nvidia.com/gpu.shared` (the device plugin's `renameByDefault`), so
    /// whole-GPU pods and shared ones never mix.
    TimeSlicing {
        /// Advertised replicas per GPU.
        replicas: u32,
    },
    /// NVIDIA MIG with one profile on every GPU (`nvidia.com/mig-<profile>`).
    Mig {
        /// e.g. `1g.10gb`.
        profile: String,
    },
}

/// Maximum pods on a node of `it` (see the module doc).
pub fn max_pods(it: &InstanceType) -> i64 {
    if it.vcpu < 30 {
        110
    } else {
        250
    }
}

/// kube-reserved CPU in millicores for `vcpu` cores (GKE/EKS formula).
pub fn kube_reserved_cpu_milli(vcpu: u32) -> i64 {
    let cores = vcpu as f64;
    let mut m = 0.0;
    m += 60.0 * cores.min(1.0);
    m += 10.0 * (cores - 1.0).clamp(0.0, 1.0);
    m += 5.0 * (cores - 2.0).clamp(0.0, 2.0);
    m += 2.5 * (cores - 4.0).max(0.0);
    m.ceil() as i64
}

/// Root volume size in bytes that we launch `it` with.
pub fn root_volume_bytes(it: &InstanceType) -> i64 {
    if it.accelerator.is_some() {
        200 * GIB
    } else {
        80 * GIB
    }
}

/// Capacity of a node of `it` before reservations (what the kubelet reports
/// as `capacity`), with GPU sharing applied to the accelerator resources.
pub fn capacity(it: &InstanceType, sharing: &GpuSharing) -> Resources {
    let mem = (it.memory_mib as f64 * (1.0 - VM_MEMORY_OVERHEAD)) as i64 * MIB;
    let mut r = Resources::new()
        .with(CPU, it.vcpu as i64 * 1000)
        .with(MEMORY, mem)
        .with(EPHEMERAL_STORAGE, root_volume_bytes(it))
        .with(PODS, max_pods(it));
    if let Some(acc) = &it.accelerator {
        let count = acc.count as i64;
        match acc.kind {
            AcceleratorKind::Gpu if acc.manufacturer == "NVIDIA" => match sharing {
                GpuSharing::None => r.set(l::RESOURCE_GPU, count),
                GpuSharing::TimeSlicing { replicas } => {
                    r.set(l::RESOURCE_GPU_SHARED, count * *replicas as i64)
                }
                GpuSharing::Mig { profile } => {
                    match mig::instances_per_gpu(&acc.model, acc.memory_mib_per_device, profile) {
                        Some(n) => r.set(
                            &format!("{}{profile}", l::RESOURCE_MIG_PREFIX),
                            count * n as i64,
                        ),
                        // A GPU without that profile stays whole.
                        None => r.set(l::RESOURCE_GPU, count),
                    }
                }
            },
            AcceleratorKind::Gpu => {}
            AcceleratorKind::Neuron => {
                r.set(l::RESOURCE_NEURON, count);
                if let Some(cores) = acc.neuron_cores_per_device {
                    r.set(l::RESOURCE_NEURONCORE, count * cores as i64);
                }
            }
        }
    }
    if it.efa_supported && it.max_efa_interfaces > 0 {
        r.set(l::RESOURCE_EFA, it.max_efa_interfaces as i64);
    }
    r
}

/// The device plugin's resources for the devices a DRA driver publishes:
/// a node serves them through one or the other, never both.
pub fn plugin_resources_of(driver: &str, resource: &str) -> bool {
    use crate::catalog::devices::{EFA_DRIVER, NEURON_DRIVER, NVIDIA_DRIVER};
    match driver {
        NVIDIA_DRIVER => {
            resource == l::RESOURCE_GPU
                || resource == l::RESOURCE_GPU_SHARED
                || resource.starts_with(l::RESOURCE_MIG_PREFIX)
        }
        NEURON_DRIVER => resource == l::RESOURCE_NEURON || resource == l::RESOURCE_NEURONCORE,
        EFA_DRIVER => resource == l::RESOURCE_EFA,
        _ => false,
    }
}

/// A node's resources when it serves the devices of `templates` through
/// their DRA drivers: the device plugin's resources for those devices
/// removed ([`plugin_resources_of`]), each template's resource added: one
/// unit per device, or per share of a shareable device
/// ([`crate::catalog::DeviceTemplate::units`]).
pub fn with_dra_devices(
    resources: &Resources,
    templates: &[crate::catalog::DeviceTemplate],
) -> Resources {
    let mut r: Resources = resources
        .iter()
        .filter(|(k, _)| !templates.iter().any(|t| plugin_resources_of(&t.driver, k)))
        .fold(Resources::new(), |r, (k, v)| r.with(k, v));
    for t in templates {
        let v = r.get(&t.resource()) + t.units();
        r.set(&t.resource(), v);
    }
    r
}

/// What kubelet and system daemons keep back, plus eviction thresholds.
pub fn reserved(it: &InstanceType) -> Resources {
    Resources::new()
        .with(CPU, kube_reserved_cpu_milli(it.vcpu))
        .with(MEMORY, (11 * max_pods(it) + 255) * MIB + 100 * MIB)
        .with(EPHEMERAL_STORAGE, GIB + root_volume_bytes(it) / 10)
}

/// Allocatable of a fresh node of `it`: capacity minus reservations.
pub fn allocatable(it: &InstanceType, sharing: &GpuSharing) -> Resources {
    capacity(it, sharing).minus(&reserved(it))
}

/// Labels a node launched from `offering` will carry: the instance type's own
/// (see [`catalog::instance_type_labels`]) plus region, zone (its name, as
/// `zones` has it for the account, in `topology.kubernetes.io/zone`, and
/// its ID in `topology.k8s.aws/zone-id`), capacity type and NodePool, ours
/// and Karpenter's; the pool's template labels are added by the caller.
pub fn node_labels(
    it: &InstanceType,
    offering: &Offering,
    zones: &ZoneNames,
    nodepool: &str,
) -> Labels {
    let mut m = catalog::instance_type_labels(it);
    m.extend(offering_labels(
        offering,
        &zones.name_of(&offering.region, &offering.zone_id),
        nodepool,
    ));
    m
}

/// The labels of [`node_labels`] that the offering and pool set (region,
/// zone name and ID, capacity type, NodePool, reservation), for callers
/// that keep the instance type's own apart (`Catalog::type_labels`) and
/// name zones once (`ZoneNames::name_of`).
pub fn offering_labels(offering: &Offering, zone_name: &str, nodepool: &str) -> Labels {
    let mut m = Labels::new();
    let mut put = |k: &str, v: &str| {
        m.insert(k.to_string(), v.to_string());
    };
    put(l::REGION, &offering.region);
    put(l::ZONE_ID, &offering.zone_id);
    put(l::ZONE, zone_name);
    put(l::CAPACITY_TYPE, offering.capacity_type.as_str());
    put(l::KARPENTER_CAPACITY_TYPE, offering.capacity_type.as_str());
    put(l::NODEPOOL, nodepool);
    put(l::KARPENTER_NODEPOOL, nodepool);
    if let Some(r) = &offering.reservation {
        put(l::CAPACITY_RESERVATION_ID, &r.id);
        put(l::CAPACITY_RESERVATION_KIND, r.kind.as_str());
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{CapacityType, PriceSource};

    pub(crate) fn p4d() -> InstanceType {
        InstanceType {
            efa_supported: true,
            max_efa_interfaces: 4,
            max_network_interfaces: 60,
            ..InstanceType::bare("p4d.24xlarge", 96, 1_179_648).with_gpus("A100", 8, 40960)
        }
    }

    #[test]
    fn kube_reserved_cpu_follows_the_eks_formula() {
        assert_eq!(kube_reserved_cpu_milli(1), 60);
        assert_eq!(kube_reserved_cpu_milli(2), 70);
        assert_eq!(kube_reserved_cpu_milli(4), 80);
        // 96 cores: 60 + 10 + 10 + 92 x 2.5 = 310
        assert_eq!(kube_reserved_cpu_milli(96), 310);
    }

    #[test]
    fn allocatable_is_capacity_less_reservations_and_overhead() {
        let it = p4d();
        let a = allocatable(&it, &GpuSharing::None);
        assert_eq!(a.get(CPU), 96_000 - 310);
        let mem_mib = (1_179_648.0 * 0.925) as i64 - (11 * 250 + 255 + 100);
        assert_eq!(a.get(MEMORY), mem_mib * MIB);
        assert_eq!(a.get(PODS), 250);
        assert_eq!(a.get(l::RESOURCE_GPU), 8);
        assert_eq!(a.get(l::RESOURCE_EFA), 4);
    }

    #[test]
    fn time_slicing_advertises_its_replicas_as_shared_gpus_and_no_whole_gpu() {
        let a = allocatable(&p4d(), &GpuSharing::TimeSlicing { replicas: 4 });
        assert_eq!(a.get(l::RESOURCE_GPU_SHARED), 32);
        assert_eq!(a.get(l::RESOURCE_GPU), 0);
    }

    /// A p4d offering in `zone_id` of us-east-1.
    fn offering(zone_id: &str, capacity_type: CapacityType) -> Offering {
        Offering {
            instance_type: p4d().name,
            region: "us-east-1".into(),
            zone_id: zone_id.into(),
            capacity_type,
            price_per_hour: 10.0,
            price_source: PriceSource::SpotObserved,
            interruption_bucket: None,
            market: None,
            reservation: None,
        }
    }

    #[test]
    fn node_labels_name_the_gpu_as_gfd_and_we_do() {
        let it = p4d();
        let o = offering("use1-az4", CapacityType::Spot);
        let labels = node_labels(&it, &o, &ZoneNames::new(), "train");
        assert_eq!(labels[l::GPU_NAME], "a100");
        assert_eq!(labels[l::GPU_MEMORY_GIB], "40");
        assert_eq!(labels[l::GFD_PRODUCT], "NVIDIA-A100-SXM4-40GB");
        assert_eq!(labels[l::CAPACITY_TYPE], "spot");
        assert_eq!(labels[l::NODEPOOL], "train");
        assert_eq!(labels[l::ARCH], "amd64");
    }

    #[test]
    fn a_node_carries_its_zone_name_as_the_account_maps_it_and_the_zone_id_beside_it() {
        let it = p4d();
        let o = offering("use1-az6", CapacityType::OnDemand);
        // The default rule: az6 is the sixth letter.
        let labels = node_labels(&it, &o, &ZoneNames::new(), "train");
        assert_eq!(labels[l::ZONE], "us-east-1f");
        assert_eq!(labels[l::ZONE_ID], "use1-az6");
        // moto's account (and many real ones) calls use1-az6 us-east-1a.
        let account = ZoneNames::new().with_region(
            "us-east-1",
            [("us-east-1a".to_string(), "use1-az6".to_string())],
        );
        let labels = node_labels(&it, &o, &account, "train");
        assert_eq!(labels[l::ZONE], "us-east-1a");
        assert_eq!(labels[l::ZONE_ID], "use1-az6");
        assert_eq!(labels[l::KARPENTER_CAPACITY_TYPE], "on-demand");
        assert_eq!(labels[l::KARPENTER_NODEPOOL], "train");
    }
}
