//! The labels a node carries because of its instance type alone: well-known
//! ones, ours, GPU feature discovery's, Neuron's and Karpenter's (its AWS
//! provider's `karpenter.k8s.aws/instance-*`, in its value formats, so
//! that Karpenter NodePools and pod selectors carry over). Shared by the
//! planner (node shapes) and NodePool validation (which types a pool
//! selects).

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

/// Label keys whose values follow from the instance type alone: the
/// well-known ones, ours, GPU feature discovery's and Karpenter's.
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
    l::KARPENTER_INSTANCE_FAMILY,
    l::KARPENTER_INSTANCE_CATEGORY,
    l::KARPENTER_INSTANCE_GENERATION,
    l::KARPENTER_INSTANCE_SIZE,
    l::KARPENTER_INSTANCE_CPU,
    l::KARPENTER_INSTANCE_CPU_MANUFACTURER,
    l::KARPENTER_INSTANCE_MEMORY,
    l::KARPENTER_INSTANCE_HYPERVISOR,
    l::KARPENTER_INSTANCE_GPU_NAME,
    l::KARPENTER_INSTANCE_GPU_MANUFACTURER,
    l::KARPENTER_INSTANCE_GPU_COUNT,
    l::KARPENTER_INSTANCE_GPU_MEMORY,
    l::KARPENTER_INSTANCE_ACCELERATOR_NAME,
    l::KARPENTER_INSTANCE_ACCELERATOR_MANUFACTURER,
    l::KARPENTER_INSTANCE_ACCELERATOR_COUNT,
    l::KARPENTER_INSTANCE_LOCAL_NVME,
    l::KARPENTER_INSTANCE_NETWORK_BANDWIDTH,
    l::NETWORK_LAYERS,
];

/// Karpenter's spelling of a name: lower case, spaces as dashes (its
/// `lowerKabobCase`): `A10G` is `a10g`, `Gaudi HL-205` is `gaudi-hl-205`.
fn karpenter_case(s: &str) -> String {
    s.to_lowercase().replace(' ', "-")
}

/// Karpenter's instance category and generation of an instance type name:
/// the lower-case letters it starts with and the digits after them (past a
/// `-<n>tb` memory infix): `p4d.24xlarge` is (`p`, `4`), `trn1.2xlarge`
/// (`trn`, `1`), `u-6tb1.metal` (`u`, `1`). `None` for a name of another
/// form (no dot, no letters, no digits).
pub fn category_and_generation(name: &str) -> Option<(&str, &str)> {
    let (prefix, _) = name.split_once('.')?;
    let letters = prefix
        .find(|c: char| !c.is_ascii_lowercase())
        .unwrap_or(prefix.len());
    let (category, mut rest) = prefix.split_at(letters);
    if category.is_empty() {
        return None;
    }
    if let Some(after) = rest.strip_prefix('-') {
        let digits = after
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(after.len());
        if let Some(tail) = after[digits..].strip_prefix("tb").filter(|_| digits > 0) {
            rest = tail;
        }
    }
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    (digits > 0).then(|| (category, &rest[..digits]))
}

/// The labels of [`INSTANCE_TYPE_KEYS`] a node of `it` carries, each as far
/// as the catalog knows it. Karpenter's take the values and formats its AWS
/// provider gives them (memory in MiB, names lower case).
pub fn instance_type_labels(it: &InstanceType) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        m.insert(k.to_string(), v);
    };
    put(l::INSTANCE_TYPE, it.name.clone());
    put(l::INSTANCE_FAMILY, it.family.clone());
    put(l::ARCH, it.architecture.kubernetes_label().into());
    put(l::OS, "linux".into());
    put(l::KARPENTER_INSTANCE_CPU, it.vcpu.to_string());
    put(l::KARPENTER_INSTANCE_MEMORY, it.memory_mib.to_string());
    if let [family, size] = it.name.split('.').collect::<Vec<_>>()[..] {
        put(l::KARPENTER_INSTANCE_FAMILY, family.to_string());
        put(l::KARPENTER_INSTANCE_SIZE, size.to_string());
    }
    if let Some((category, generation)) = category_and_generation(&it.name) {
        put(l::KARPENTER_INSTANCE_CATEGORY, category.to_string());
        put(l::KARPENTER_INSTANCE_GENERATION, generation.to_string());
    }
    if let Some(m) = &it.cpu_manufacturer {
        put(l::KARPENTER_INSTANCE_CPU_MANUFACTURER, karpenter_case(m));
    }
    if let Some(h) = &it.hypervisor {
        put(l::KARPENTER_INSTANCE_HYPERVISOR, h.clone());
    }
    if let Some(gb) = it.local_storage_gb.filter(|_| it.local_storage_nvme) {
        put(l::KARPENTER_INSTANCE_LOCAL_NVME, gb.to_string());
    }
    if let Some(mbps) = it.network_baseline_mbps {
        put(l::KARPENTER_INSTANCE_NETWORK_BANDWIDTH, mbps.to_string());
    }
    if let Some(layers) = super::topology::network_layers(&it.name) {
        put(l::NETWORK_LAYERS, layers.to_string());
    }
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
                put(l::KARPENTER_INSTANCE_GPU_NAME, karpenter_case(&acc.model));
                put(
                    l::KARPENTER_INSTANCE_GPU_MANUFACTURER,
                    karpenter_case(&acc.manufacturer),
                );
                put(l::KARPENTER_INSTANCE_GPU_COUNT, acc.count.to_string());
                put(
                    l::KARPENTER_INSTANCE_GPU_MEMORY,
                    acc.memory_mib_per_device.to_string(),
                );
            }
            AcceleratorKind::Neuron => {
                put(l::NEURON_NAME, acc.model.to_ascii_lowercase());
                put(l::NEURON_COUNT, acc.count.to_string());
                put(
                    l::KARPENTER_INSTANCE_ACCELERATOR_NAME,
                    karpenter_case(&acc.model),
                );
                put(
                    l::KARPENTER_INSTANCE_ACCELERATOR_MANUFACTURER,
                    karpenter_case(&acc.manufacturer),
                );
                put(
                    l::KARPENTER_INSTANCE_ACCELERATOR_COUNT,
                    acc.count.to_string(),
                );
            }
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn labels_of(name: &str) -> BTreeMap<String, String> {
        let c = Catalog::embedded().unwrap();
        instance_type_labels(c.instance_type(name).unwrap())
    }

    #[test]
    fn karpenter_category_and_generation_follow_its_name_pattern() {
        for (name, want) in [
            ("p4d.24xlarge", Some(("p", "4"))),
            ("g6e.xlarge", Some(("g", "6"))),
            ("trn1n.32xlarge", Some(("trn", "1"))),
            ("inf2.xlarge", Some(("inf", "2"))),
            ("p6-b200.48xlarge", Some(("p", "6"))),
            ("u-6tb1.metal", Some(("u", "1"))),
            ("c7i.metal-24xl", Some(("c", "7"))),
            ("nodot", None),
            ("7x.large", None),
            ("x.large", None),
        ] {
            assert_eq!(category_and_generation(name), want, "{name}");
        }
    }

    #[test]
    fn a_gpu_type_carries_karpenters_labels_in_karpenters_formats() {
        let g5 = labels_of("g5.12xlarge");
        let get = |k: &str| g5.get(k).map(String::as_str);
        assert_eq!(get(l::KARPENTER_INSTANCE_FAMILY), Some("g5"));
        assert_eq!(get(l::KARPENTER_INSTANCE_CATEGORY), Some("g"));
        assert_eq!(get(l::KARPENTER_INSTANCE_GENERATION), Some("5"));
        assert_eq!(get(l::KARPENTER_INSTANCE_SIZE), Some("12xlarge"));
        assert_eq!(get(l::KARPENTER_INSTANCE_CPU), Some("48"));
        assert_eq!(get(l::KARPENTER_INSTANCE_MEMORY), Some("196608"));
        assert_eq!(get(l::KARPENTER_INSTANCE_GPU_NAME), Some("a10g"));
        assert_eq!(get(l::KARPENTER_INSTANCE_GPU_MANUFACTURER), Some("nvidia"));
        assert_eq!(get(l::KARPENTER_INSTANCE_GPU_COUNT), Some("4"));
        assert_eq!(get(l::KARPENTER_INSTANCE_GPU_MEMORY), Some("22888"));
        assert_eq!(get(l::KARPENTER_INSTANCE_CPU_MANUFACTURER), Some("amd"));
        assert_eq!(get(l::KARPENTER_INSTANCE_HYPERVISOR), Some("nitro"));
        assert_eq!(get(l::KARPENTER_INSTANCE_LOCAL_NVME), Some("3800"));
        assert_eq!(get(l::KARPENTER_INSTANCE_NETWORK_BANDWIDTH), Some("40000"));
        assert_eq!(get(l::KARPENTER_INSTANCE_ACCELERATOR_NAME), None);
        let p5 = labels_of("p5.48xlarge");
        assert_eq!(p5[l::KARPENTER_INSTANCE_GPU_NAME], "h100");
        assert_eq!(p5[l::KARPENTER_INSTANCE_SIZE], "48xlarge");
    }

    #[test]
    fn a_neuron_type_carries_karpenters_accelerator_labels_and_no_gpu_ones() {
        let trn = labels_of("trn1.32xlarge");
        assert_eq!(trn[l::KARPENTER_INSTANCE_CATEGORY], "trn");
        assert_eq!(trn[l::KARPENTER_INSTANCE_ACCELERATOR_NAME], "trainium");
        assert_eq!(trn[l::KARPENTER_INSTANCE_ACCELERATOR_MANUFACTURER], "aws");
        assert_eq!(trn[l::KARPENTER_INSTANCE_ACCELERATOR_COUNT], "16");
        assert!(!trn.contains_key(l::KARPENTER_INSTANCE_GPU_NAME));
        assert_eq!(trn[l::NETWORK_LAYERS], "3", "EC2 reports trn1's topology");
        // An EBS-only CPU type: no local NVMe label, no GPU labels, no
        // reported network topology.
        let m7i = labels_of("m7i.large");
        assert!(!m7i.contains_key(l::NETWORK_LAYERS));
        assert!(!m7i.contains_key(l::KARPENTER_INSTANCE_LOCAL_NVME));
        assert_eq!(m7i[l::KARPENTER_INSTANCE_CPU_MANUFACTURER], "intel");
        assert!(INSTANCE_TYPE_KEYS
            .iter()
            .all(|k| !k.is_empty() && k.contains('/')));
    }
}
