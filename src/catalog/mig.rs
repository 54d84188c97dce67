//! MIG (Multi-Instance GPU) profiles per GPU model and memory size: which
//! partitions a GPU supports and how many instances of each fit on one GPU.
//! Pure data; the Kubernetes resource of a profile is `nvidia.com/mig-<name>`
//! (NVIDIA device plugin, MIG strategy `mixed`).
//!
//! Source: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
//! (<https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html>;
//! A100-SXM4-40GB table, and the note that the 80GB parts rename the same
//! slices by memory), cross-checked with the per-GPU configurations NVIDIA's
//! MIG manager ships (`NVIDIA/mig-parted`, `deployments/systemd/config-default.yaml`:
//! `all-1g.10gb` is 7 per GPU on 80GB parts and 4 on A100-40GB, H200 141GB
//! `1g.18gb` x7 ... `7g.141gb` x1, B200 `1g.23gb` x7 ... `7g.180gb` x1).
//! Media-extension variants (`+me`) are left out: the planner never asks
//! for them.
//!
//! GPUs on EC2 with MIG: A100 40GB (p4d), A100 80GB (p4de), H100 80GB (p5),
//! H200 141GB (p5e, p5en), B200 (p6-b200). T4, A10G, L4, L40S and V100 (g4dn,
//! g5, g6, g6e, p3) do not support MIG.

use crate::labels::RESOURCE_MIG_PREFIX;

/// One MIG profile of a GPU: `name` (e.g. `1g.10gb`: one compute slice of
/// seven, 10 GB) and how many instances of it one GPU holds when partitioned
/// into that profile only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MigProfile {
    /// Profile name as NVIDIA writes it, e.g. `3g.40gb`.
    pub name: &'static str,
    /// Instances of this profile on one GPU.
    pub per_gpu: u32,
}

impl MigProfile {
    /// The extended resource of the profile, e.g. `nvidia.com/mig-3g.40gb`.
    pub fn resource_name(&self) -> String {
        resource_name(self.name)
    }
}

/// The extended resource of a MIG profile: `nvidia.com/mig-<profile>`.
pub fn resource_name(profile: &str) -> String {
    format!("{RESOURCE_MIG_PREFIX}{profile}")
}

const fn p(name: &'static str, per_gpu: u32) -> MigProfile {
    MigProfile { name, per_gpu }
}

/// A GPU product: model as EC2 names it, device memory range in MiB
/// (inclusive; EC2 and nvidia-smi report slightly different sizes), profiles.
struct MigGpu {
    model: &'static str,
    min_mib: u64,
    max_mib: u64,
    profiles: &'static [MigProfile],
}

const GIB: u64 = 1024;

/// The table. Memory ranges are wide enough for both EC2's figures (A100
/// 40GB: 40960 MiB, A100 80GB: 81920, H100: 81920, H200: 144384, B200:
/// 183359) and nvidia-smi's (A100 40GB: 40536, H100 80GB: 81559).
const GPUS: &[MigGpu] = &[
    MigGpu {
        model: "A30",
        min_mib: 20 * GIB,
        max_mib: 28 * GIB,
        profiles: &[p("1g.6gb", 4), p("2g.12gb", 2), p("4g.24gb", 1)],
    },
    MigGpu {
        model: "A100",
        min_mib: 36 * GIB,
        max_mib: 48 * GIB,
        profiles: &[
            p("1g.5gb", 7),
            p("1g.10gb", 4),
            p("2g.10gb", 3),
            p("3g.20gb", 2),
            p("4g.20gb", 1),
            p("7g.40gb", 1),
        ],
    },
    MigGpu {
        model: "A100",
        min_mib: 72 * GIB,
        max_mib: 88 * GIB,
        profiles: PROFILES_80GB,
    },
    MigGpu {
        model: "H100",
        min_mib: 72 * GIB,
        max_mib: 88 * GIB,
        profiles: PROFILES_80GB,
    },
    MigGpu {
        // H100 NVL (94 GB).
        model: "H100",
        min_mib: 89 * GIB,
        max_mib: 95 * GIB,
        profiles: &[
            p("1g.12gb", 7),
            p("1g.24gb", 4),
            p("2g.24gb", 3),
            p("3g.47gb", 2),
            p("4g.47gb", 1),
            p("7g.94gb", 1),
        ],
    },
    MigGpu {
        model: "H200",
        min_mib: 130 * GIB,
        max_mib: 150 * GIB,
        profiles: &[
            p("1g.18gb", 7),
            p("1g.35gb", 4),
            p("2g.35gb", 3),
            p("3g.71gb", 2),
            p("4g.71gb", 1),
            p("7g.141gb", 1),
        ],
    },
    MigGpu {
        model: "B200",
        min_mib: 170 * GIB,
        max_mib: 195 * GIB,
        profiles: &[
            p("1g.23gb", 7),
            p("1g.45gb", 4),
            p("2g.45gb", 3),
            p("3g.90gb", 2),
            p("4g.90gb", 1),
            p("7g.180gb", 1),
        ],
    },
];

/// A100 80GB and H100 80GB share their profiles.
const PROFILES_80GB: &[MigProfile] = &[
    p("1g.10gb", 7),
    p("1g.20gb", 4),
    p("2g.20gb", 3),
    p("3g.40gb", 2),
    p("4g.40gb", 1),
    p("7g.80gb", 1),
];

/// The MIG profiles of a GPU, smallest first; empty when the GPU does not
/// support MIG. `gpu_model` is the model as EC2 reports it (`A100`, `H100`,
/// compared case-insensitively); `memory_mib_per_device` tells the 40GB and
/// 80GB parts apart.
pub fn profiles_for(gpu_model: &str, memory_mib_per_device: u64) -> &'static [MigProfile] {
    GPUS.iter()
        .find(|g| {
            g.model.eq_ignore_ascii_case(gpu_model.trim())
                && (g.min_mib..=g.max_mib).contains(&memory_mib_per_device)
        })
        .map_or(&[], |g| g.profiles)
}

/// Whether the GPU supports MIG at all.
pub fn supports_mig(gpu_model: &str, memory_mib_per_device: u64) -> bool {
    !profiles_for(gpu_model, memory_mib_per_device).is_empty()
}

/// Instances of `profile` one GPU holds, `None` when the GPU does not offer
/// that profile (or no MIG at all).
pub fn instances_per_gpu(
    gpu_model: &str,
    memory_mib_per_device: u64,
    profile: &str,
) -> Option<u32> {
    profiles_for(gpu_model, memory_mib_per_device)
        .iter()
        .find(|p| p.name == profile)
        .map(|p| p.per_gpu)
}

/// The share of a GPU's memory one instance of `profile` has (`3g.40gb`
/// on an 80 GB GPU: 0.5), the smallest over the GPUs that offer it (a
/// `1g.10gb` is a quarter of an A100 40GB, an eighth of an 80 GB part);
/// `None` for a profile no GPU in the table offers.
pub fn memory_share(profile: &str) -> Option<f64> {
    let gb =
        |name: &str| -> Option<f64> { name.split('.').nth(1)?.strip_suffix("gb")?.parse().ok() };
    GPUS.iter()
        .filter(|g| g.profiles.iter().any(|p| p.name == profile))
        .filter_map(|g| {
            let whole = g
                .profiles
                .iter()
                .filter_map(|p| gb(p.name))
                .fold(0.0, f64::max);
            Some(gb(profile)? / whole)
        })
        .min_by(f64::total_cmp)
}

/// Whether `profile` is a profile of any GPU in the table.
pub fn is_known_profile(profile: &str) -> bool {
    GPUS.iter()
        .any(|g| g.profiles.iter().any(|p| p.name == profile))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profiles_memory_share_is_the_smallest_over_the_gpus_offering_it() {
        assert_eq!(memory_share("3g.40gb"), Some(0.5));
        // A quarter of an A100 40GB, an eighth of an 80 GB part.
        assert_eq!(memory_share("1g.10gb"), Some(0.125));
        assert_eq!(memory_share("7g.141gb"), Some(1.0));
        assert_eq!(memory_share("9g.1gb"), None);
    }

    #[test]
    fn a100_40gb_on_p4d_offers_the_nvidia_guide_profiles() {
        let names: Vec<(&str, u32)> = profiles_for("A100", 40960)
            .iter()
            .map(|p| (p.name, p.per_gpu))
            .collect();
        assert_eq!(
            names,
            [
                ("1g.5gb", 7),
                ("1g.10gb", 4),
                ("2g.10gb", 3),
                ("3g.20gb", 2),
                ("4g.20gb", 1),
                ("7g.40gb", 1)
            ]
        );
    }

    #[test]
    fn memory_tells_the_40gb_and_80gb_a100_apart() {
        assert_eq!(instances_per_gpu("A100", 40960, "1g.10gb"), Some(4));
        assert_eq!(instances_per_gpu("A100", 81920, "1g.10gb"), Some(7));
        assert_eq!(instances_per_gpu("A100", 40960, "3g.40gb"), None);
        assert_eq!(instances_per_gpu("A100", 81920, "3g.40gb"), Some(2));
        // nvidia-smi's figure for the 40GB part.
        assert_eq!(instances_per_gpu("A100", 40536, "1g.5gb"), Some(7));
    }

    #[test]
    fn h100_h200_and_b200_as_ec2_reports_them() {
        assert_eq!(instances_per_gpu("H100", 81920, "1g.10gb"), Some(7));
        assert_eq!(instances_per_gpu("H100", 81559, "7g.80gb"), Some(1));
        assert_eq!(instances_per_gpu("h100", 81920, "2g.20gb"), Some(3));
        assert_eq!(instances_per_gpu("H200", 144384, "1g.18gb"), Some(7));
        assert_eq!(instances_per_gpu("H200", 144384, "3g.71gb"), Some(2));
        assert_eq!(instances_per_gpu("B200", 183359, "1g.23gb"), Some(7));
    }

    #[test]
    fn gpus_without_mig_have_no_profiles() {
        for (model, mib) in [
            ("A10G", 22888),
            ("L4", 22888),
            ("L40S", 45776),
            ("T4", 16384),
            ("V100", 32768),
            ("Trainium", 32768),
        ] {
            assert!(!supports_mig(model, mib), "{model}");
            assert_eq!(instances_per_gpu(model, mib, "1g.10gb"), None);
        }
        // A known model outside the table's memory sizes.
        assert!(!supports_mig("A100", 16 * 1024));
    }

    #[test]
    fn profiles_name_their_kubernetes_resource() {
        assert_eq!(resource_name("1g.10gb"), "nvidia.com/mig-1g.10gb");
        assert_eq!(
            profiles_for("H100", 81920)[0].resource_name(),
            "nvidia.com/mig-1g.10gb"
        );
        assert!(is_known_profile("3g.71gb"));
        assert!(!is_known_profile("3g.72gb"));
    }

    #[test]
    fn every_table_entry_fits_seven_compute_slices() {
        for g in GPUS {
            for p in g.profiles {
                let slices: u32 = p.name.split('g').next().unwrap().parse().unwrap();
                assert!(slices * p.per_gpu <= 7, "{}", p.name);
            }
        }
    }
}
