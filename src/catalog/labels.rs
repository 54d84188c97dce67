//! The labels a node carries because of its instance type alone: well-known
//! ones, ours, GPU feature discovery's and Neuron's. Shared by the planner
//! (node shapes) and NodePool validation (which types a pool selects).

use super::{AcceleratorKind, InstanceType};
use crate::labels as l;
use std::collections::BTreeMap;

/// The short GPU name used in `quartermaster.dev/gpu-name` (`h100`, `a10g`).
pub fn gpu_short_name(model: &str) -> String {
    model.to_ascii_lowercase().replace(' ', "-")
}

/// The product name NVIDIA GPU feature discovery reports for a GPU model and
/// memory (spaces replaced by dashes, as GFD does).
pub fn gfd_product(model: &str, memory_mib: u64) -> String {
    match model {
        "T4" => "Tesla-T4".into(),
        "V100" => format!("Tesla-V100-SXM2-{}GB", memory_mib / 1024),
        "A100" => format!("NVIDIA-A100-SXM4-{}GB", memory_mib / 1024),
        "H100" => "NVIDIA-H100-80GB-HBM3".into(),
        other => format!("NVIDIA-{other}"),
    }
}

/// Label keys whose values follow from the instance type alone.
pub const INSTANCE_TYPE_KEYS: &[&str] = &[
    l::INSTANCE_TYPE,
    l::INSTANCE_FAMILY,
    l::ARCH,
    l::OS,
    l::GPU_NAME,
    l::GPU_COUNT,
    l::GPU_MEMORY_GIB,
    l::GFD_PRODUCT,
    l::GFD_COUNT,
    l::GFD_MEMORY,
    l::NEURON_NAME,
    l::NEURON_COUNT,
];

/// The labels of [`INSTANCE_TYPE_KEYS`] a node of `it` carries.
pub fn instance_type_labels(it: &InstanceType) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        m.insert(k.to_string(), v);
    };
    put(l::INSTANCE_TYPE, it.name.clone());
    put(l::INSTANCE_FAMILY, it.family.clone());
    put(l::ARCH, it.architecture.kubernetes_label().into());
    put(l::OS, "linux".into());
    if let Some(acc) = &it.accelerator {
        match acc.kind {
            AcceleratorKind::Gpu => {
                put(l::GPU_NAME, gpu_short_name(&acc.model));
                put(l::GPU_COUNT, acc.count.to_string());
                put(
                    l::GPU_MEMORY_GIB,
                    (acc.memory_mib_per_device / 1024).to_string(),
                );
                if acc.manufacturer == "NVIDIA" {
                    put(
                        l::GFD_PRODUCT,
                        gfd_product(&acc.model, acc.memory_mib_per_device),
                    );
                    put(l::GFD_COUNT, acc.count.to_string());
                    put(l::GFD_MEMORY, acc.memory_mib_per_device.to_string());
                }
            }
            AcceleratorKind::Neuron => {
                put(l::NEURON_NAME, acc.model.to_ascii_lowercase());
                put(l::NEURON_COUNT, acc.count.to_string());
            }
        }
    }
    m
}
