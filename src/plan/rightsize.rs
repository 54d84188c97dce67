//! Right sizes for GPU pods that under-use what they hold, from their
//! measured use (`cluster::gpu_use`), priced with the catalog: fewer GPUs
//! of the same model, a MIG profile whose memory covers the measured peak,
//! a time-sliced (or MPS) share of a GPU, a cheaper GPU with the memory, or
//! the same on spot. Each recommendation says its saving in dollars a
//! month (730 hours) at on-demand prices. Pure; `quartermaster report gpu`
//! prints them. The rules are in `docs/gpu-use.md`.

use crate::catalog::{mig, AcceleratorKind, CapacityType, Catalog, InstanceType};
use crate::cluster::gpu_use::PodUse;
use std::fmt;

/// A pod whose GPUs are busy less than this on average is under-used
/// (the users' guides' 30%): `report gpu` right-sizes it and the
/// controller puts a `GPUUnderused` Event on it, by default.
pub const UNDERUSED_BELOW: f64 = 0.30;

/// A GPU busy less than this is idle (idle GPU-hours, idle nodes), by
/// default.
pub const IDLE_BELOW: f64 = 0.05;

/// Hours in a month, as cloud bills count them.
pub const HOURS_PER_MONTH: f64 = 730.0;

/// Headroom kept over a measured peak of memory (20%).
pub const MEMORY_HEADROOM: f64 = 1.2;

/// The use a right size is sized for: the measured mean use over this
/// target (a right-sized GPU is at most 70% busy on average).
pub const TARGET_BUSY: f64 = 0.7;

/// What a pod should hold instead.
#[derive(Debug, Clone, PartialEq)]
pub enum Size {
    /// Fewer GPUs of the same model.
    FewerGpus {
        /// GPUs it needs.
        gpus: u32,
    },
    /// One MIG instance of this profile on the same GPU model.
    Mig {
        /// The profile, e.g. `3g.40gb`.
        profile: String,
        /// Its share of a GPU (compute slices of seven).
        share: f64,
    },
    /// A time-sliced (or MPS) share of one GPU of the same model.
    Shared {
        /// Pods per GPU (`gpuSharing.replicas`).
        replicas: u32,
    },
    /// GPUs of a cheaper instance type with the memory it needs.
    Smaller {
        /// The instance type.
        instance_type: String,
        /// GPUs of it.
        gpus: u32,
    },
    /// The same on spot capacity.
    Spot,
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Size::FewerGpus { gpus } => write!(f, "{gpus} GPU(s) of the same model"),
            Size::Mig { profile, .. } => write!(f, "MIG {profile} (nvidia.com/mig-{profile})"),
            Size::Shared { replicas } => {
                write!(
                    f,
                    "1/{replicas} of a GPU (time-slicing or MPS, replicas {replicas})"
                )
            }
            Size::Smaller {
                instance_type,
                gpus,
            } => write!(f, "{gpus} GPU(s) of {instance_type}"),
            Size::Spot => write!(f, "the same on spot"),
        }
    }
}

/// A right size and what it saves.
#[derive(Debug, Clone, PartialEq)]
pub struct Recommendation {
    /// The instance type the pod's GPUs are on (given or inferred).
    pub instance_type: String,
    /// USD a month the pod's GPUs cost now (its share of the node at
    /// on-demand prices).
    pub monthly_now: f64,
    /// The right size.
    pub size: Size,
    /// USD a month it would cost.
    pub monthly_after: f64,
}

impl Recommendation {
    /// USD a month saved.
    pub fn saving(&self) -> f64 {
        (self.monthly_now - self.monthly_after).max(0.0)
    }
}

/// The catalog's GPU model for an exporter's `modelName`
/// (`NVIDIA A100-SXM4-80GB`, `Tesla T4`, `NVIDIA L40S`): the model whose
/// name is one of its words, of the memory closest to `fb_total_mib`.
pub fn gpu_model<'a>(
    catalog: &'a Catalog,
    model_name: &str,
    fb_total_mib: Option<f64>,
) -> Option<&'a InstanceType> {
    let words: Vec<String> = model_name
        .split([' ', '-', '_'])
        .map(str::to_ascii_uppercase)
        .collect();
    catalog
        .instance_types()
        .filter(|it| {
            it.accelerator.as_ref().is_some_and(|a| {
                a.kind == AcceleratorKind::Gpu && words.contains(&a.model.to_ascii_uppercase())
            })
        })
        .min_by(|a, b| {
            let gap = |it: &InstanceType| {
                let mem = it
                    .accelerator
                    .as_ref()
                    .map_or(0, |a| a.memory_mib_per_device) as f64;
                fb_total_mib.map_or(0.0, |t| (mem - t).abs())
            };
            gap(a).total_cmp(&gap(b)).then(a.name.cmp(&b.name))
        })
}

/// The instance type of a node with `gpus` GPUs of that model: the one
/// named, else the cheapest in the region with that model, its memory and
/// that many GPUs.
pub fn node_type<'a>(
    catalog: &'a Catalog,
    region: &str,
    named: Option<&str>,
    model_name: &str,
    fb_total_mib: Option<f64>,
    gpus: u32,
) -> Option<&'a InstanceType> {
    if let Some(it) = named.and_then(|n| catalog.instance_type(n)) {
        return Some(it);
    }
    let like = gpu_model(catalog, model_name, fb_total_mib)?
        .accelerator
        .clone()?;
    catalog
        .instance_types()
        .filter(|it| {
            it.accelerator.as_ref().is_some_and(|a| {
                a.model == like.model
                    && a.memory_mib_per_device == like.memory_mib_per_device
                    && a.count == gpus
            })
        })
        .filter_map(|it| catalog.on_demand_price(region, &it.name).map(|p| (it, p)))
        .min_by(|(a, pa), (b, pb)| pa.total_cmp(pb).then(a.name.cmp(&b.name)))
        .map(|(it, _)| it)
}

/// USD an hour of one GPU of `it` on demand in `region`.
fn gpu_hourly(catalog: &Catalog, region: &str, it: &InstanceType) -> Option<f64> {
    let count = it.accelerator.as_ref()?.count.max(1);
    Some(catalog.on_demand_price(region, &it.name)? / f64::from(count))
}

/// The right size for a pod whose GPUs are on `it`, or `None` when it
/// uses what it holds (or its use is not known). Tried in this order, the
/// first that fits wins: fewer GPUs; a MIG profile (the smallest whose
/// memory covers the peak with headroom and whose compute covers the use);
/// a time-sliced share (the most pods per GPU whose memory and use still
/// fit); a cheaper instance type with the memory (for a pod nearly idle,
/// under a tenth busy, whatever its GPU); spot.
pub fn right_size(
    catalog: &Catalog,
    region: &str,
    pod: &PodUse,
    it: &InstanceType,
) -> Option<Recommendation> {
    let acc = it.accelerator.as_ref()?;
    let busy = pod.busy?;
    let gpu_price = gpu_hourly(catalog, region, it)?;
    let monthly_now = gpu_price * f64::from(pod.gpus) * HOURS_PER_MONTH;
    let need_compute = busy * f64::from(pod.gpus) / TARGET_BUSY;
    let peak = pod.fb_peak_mib.unwrap_or(acc.memory_mib_per_device as f64);
    let need_memory = peak * MEMORY_HEADROOM;
    let rec = |size: Size, monthly_after: f64| Recommendation {
        instance_type: it.name.clone(),
        monthly_now,
        size,
        monthly_after,
    };
    let gpus_needed = need_compute.ceil().max(1.0) as u32;
    if gpus_needed < pod.gpus {
        return Some(rec(
            Size::FewerGpus { gpus: gpus_needed },
            gpu_price * f64::from(gpus_needed) * HOURS_PER_MONTH,
        ));
    }
    if pod.gpus == 1 && need_compute < 1.0 {
        // A MIG profile: compute slices of seven, memory from its name.
        let profiles = mig::profiles_for(&acc.model, acc.memory_mib_per_device);
        let fitting = profiles.iter().filter_map(|p| {
            let (slices, gb) = parse_profile(p.name)?;
            let share = f64::from(slices) / 7.0;
            (share >= need_compute && gb * 1024.0 >= need_memory).then_some((p.name, share))
        });
        if let Some((profile, share)) = fitting.min_by(|a, b| a.1.total_cmp(&b.1)) {
            if share < 1.0 {
                return Some(rec(
                    Size::Mig {
                        profile: profile.to_string(),
                        share,
                    },
                    gpu_price * share * HOURS_PER_MONTH,
                ));
            }
        }
        if profiles.is_empty() {
            let mem = acc.memory_mib_per_device as f64;
            let replicas = [8u32, 4, 2].into_iter().find(|k| {
                need_compute <= 1.0 / f64::from(*k) && need_memory <= mem / f64::from(*k)
            });
            if let Some(k) = replicas {
                return Some(rec(
                    Size::Shared { replicas: k },
                    gpu_price / f64::from(k) * HOURS_PER_MONTH,
                ));
            }
        }
    }
    if busy < 0.1 {
        let cheaper = catalog
            .instance_types()
            .filter(|other| other.name != it.name)
            .filter_map(|other| {
                let a = other.accelerator.as_ref()?;
                let fits = a.kind == AcceleratorKind::Gpu
                    && a.memory_mib_per_device as f64 >= need_memory
                    && a.count >= 1;
                let price = catalog.on_demand_price(region, &other.name)?;
                fits.then_some((other, price))
            })
            .min_by(|(a, pa), (b, pb)| pa.total_cmp(pb).then(a.name.cmp(&b.name)));
        if let Some((other, price)) = cheaper {
            let after = price * HOURS_PER_MONTH;
            if after < monthly_now * 0.9 {
                return Some(rec(
                    Size::Smaller {
                        instance_type: other.name.clone(),
                        gpus: 1,
                    },
                    after,
                ));
            }
        }
    }
    let spot = catalog
        .offerings_of(region, &it.name)
        .filter(|o| o.capacity_type == CapacityType::Spot)
        .map(|o| o.price_per_hour)
        .reduce(f64::min)?;
    let od = catalog.on_demand_price(region, &it.name)?;
    (spot < od * 0.9).then(|| rec(Size::Spot, monthly_now * spot / od))
}

/// An under-used pod in a [`GpuReport`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PodLine {
    /// `namespace/name`.
    pub pod: String,
    /// Its workload.
    pub workload: String,
    /// Its node.
    pub node: String,
    /// GPUs it holds.
    pub gpus: u32,
    /// The GPU model as the exporter names it.
    pub model: String,
    /// Mean use over the window, 0..=1.
    pub busy: f64,
    /// Peak memory used on its busiest GPU, GiB.
    pub peak_memory_gib: Option<f64>,
    /// Its instance type (given or inferred), where one matches.
    pub instance_type: Option<String>,
    /// The right size, where one is cheaper.
    pub right_size: Option<String>,
    /// USD a month its GPUs cost now.
    pub monthly_now: Option<f64>,
    /// USD a month the right size saves.
    pub monthly_saving: Option<f64>,
}

/// A node whose GPUs are all idle, in a [`GpuReport`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct NodeLine {
    /// The node.
    pub node: String,
    /// Its instance type (given or inferred), where one matches.
    pub instance_type: Option<String>,
    /// Its GPUs.
    pub gpus: u32,
    /// Its busiest GPU's use, 0..=1.
    pub busiest: f64,
    /// Pods holding its GPUs.
    pub pods: u32,
    /// USD a month it costs on demand.
    pub monthly_cost: Option<f64>,
}

/// What `quartermaster report gpu` prints: the under-used pods with their
/// right sizes, the idle nodes, and the totals.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct GpuReport {
    /// Pods under the threshold, the largest saving first.
    pub pods: Vec<PodLine>,
    /// Nodes every GPU of which is idle, the most expensive first.
    pub idle_nodes: Vec<NodeLine>,
    /// USD a month the right sizes save together.
    pub monthly_saving: f64,
    /// USD a month the idle nodes cost together.
    pub idle_monthly_cost: f64,
    /// GPUs read.
    pub gpus: usize,
    /// Series left out (no labels, absurd values).
    pub left_out: usize,
}

/// The report of a reading: pods busy less than `underused_below` (with
/// their right sizes) and nodes whose every GPU is busy less than
/// `idle_below`. A pod or node without a measured use is not judged.
pub fn report(
    catalog: &Catalog,
    region: &str,
    usage: &crate::cluster::gpu_use::Usage,
    underused_below: f64,
    idle_below: f64,
) -> GpuReport {
    let nodes = usage.nodes();
    let type_of = |node: &str, named: Option<&str>, model: &str, fb: Option<f64>| {
        let gpus = nodes.iter().find(|n| n.node == node).map_or(1, |n| n.gpus);
        node_type(catalog, region, named, model, fb, gpus)
    };
    let mut pods: Vec<PodLine> = usage
        .pods()
        .into_iter()
        .filter(|p| p.busy.is_some_and(|b| b < underused_below))
        .map(|p| {
            let it = type_of(
                &p.node,
                p.instance_type.as_deref(),
                &p.model,
                p.fb_total_mib,
            );
            let rec = it.and_then(|it| right_size(catalog, region, &p, it));
            let monthly_now = it
                .and_then(|it| gpu_hourly(catalog, region, it))
                .map(|h| h * f64::from(p.gpus) * HOURS_PER_MONTH);
            PodLine {
                pod: p.pod.to_string(),
                workload: p.workload.clone(),
                node: p.node.clone(),
                gpus: p.gpus,
                model: p.model.clone(),
                busy: p.busy.unwrap_or_default(),
                peak_memory_gib: p.fb_peak_mib.map(|m| m / 1024.0),
                instance_type: it.map(|i| i.name.clone()),
                right_size: rec.as_ref().map(|r| r.size.to_string()),
                monthly_now,
                monthly_saving: rec.as_ref().map(Recommendation::saving),
            }
        })
        .collect();
    pods.sort_by(|a, b| {
        b.monthly_saving
            .unwrap_or_default()
            .total_cmp(&a.monthly_saving.unwrap_or_default())
            .then(a.pod.cmp(&b.pod))
    });
    let fb_of = |node: &str| {
        usage
            .gpus
            .iter()
            .find(|g| *g.node == *node)
            .and_then(|g| g.fb_total_mib)
    };
    let mut idle_nodes: Vec<NodeLine> = nodes
        .iter()
        .filter(|n| n.measured == n.gpus && n.busiest.is_some_and(|b| b < idle_below))
        .map(|n| {
            let it = type_of(
                &n.node,
                n.instance_type.as_deref(),
                &n.model,
                fb_of(&n.node),
            );
            NodeLine {
                node: n.node.clone(),
                instance_type: it.map(|i| i.name.clone()),
                gpus: n.gpus,
                busiest: n.busiest.unwrap_or_default(),
                pods: n.pods,
                monthly_cost: it
                    .and_then(|i| catalog.on_demand_price(region, &i.name))
                    .map(|p| p * HOURS_PER_MONTH),
            }
        })
        .collect();
    idle_nodes.sort_by(|a, b| {
        b.monthly_cost
            .unwrap_or_default()
            .total_cmp(&a.monthly_cost.unwrap_or_default())
            .then(a.node.cmp(&b.node))
    });
    GpuReport {
        monthly_saving: pods.iter().filter_map(|p| p.monthly_saving).sum(),
        idle_monthly_cost: idle_nodes.iter().filter_map(|n| n.monthly_cost).sum(),
        pods,
        idle_nodes,
        gpus: usage.gpus.len(),
        left_out: usage.problems.missing_labels + usage.problems.absurd,
    }
}

/// Compute slices and GB of a MIG profile name (`3g.40gb`).
fn parse_profile(name: &str) -> Option<(u32, f64)> {
    let (g, gb) = name.split_once('.')?;
    let slices = g.strip_suffix('g')?.parse().ok()?;
    let gb = gb.strip_suffix("gb")?.parse().ok()?;
    Some((slices, gb))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::gpu_use::PodRef;

    fn catalog() -> &'static Catalog {
        static C: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
        C.get_or_init(|| Catalog::embedded().unwrap())
    }

    fn pod(gpus: u32, busy: f64, peak_gib: f64, model: &str) -> PodUse {
        PodUse {
            pod: PodRef {
                namespace: "ml".into(),
                name: "p".into(),
            },
            workload: "p".into(),
            node: "n".into(),
            model: model.into(),
            instance_type: None,
            gpus,
            busy: Some(busy),
            fb_peak_mib: Some(peak_gib * 1024.0),
            fb_total_mib: None,
        }
    }

    fn it(name: &str) -> &'static InstanceType {
        catalog().instance_type(name).unwrap()
    }

    fn gpu_month(name: &str) -> f64 {
        gpu_hourly(catalog(), "us-east-1", it(name)).unwrap() * HOURS_PER_MONTH
    }

    #[test]
    fn exporter_model_names_find_the_catalogs_gpu_and_its_node_type() {
        let c = catalog();
        let a100 = gpu_model(c, "NVIDIA A100-SXM4-80GB", Some(81920.0)).unwrap();
        assert_eq!(
            a100.accelerator.as_ref().unwrap().memory_mib_per_device,
            81920
        );
        let small = gpu_model(c, "NVIDIA A100-SXM4-40GB", Some(40960.0)).unwrap();
        assert_eq!(
            small.accelerator.as_ref().unwrap().memory_mib_per_device,
            40960
        );
        assert_eq!(
            gpu_model(c, "NVIDIA L40S", None)
                .unwrap()
                .accelerator
                .as_ref()
                .unwrap()
                .model,
            "L40S"
        );
        assert_eq!(
            node_type(c, "us-east-1", None, "NVIDIA A10G", None, 1)
                .unwrap()
                .name,
            "g5.xlarge",
            "the cheapest one-A10G type"
        );
        assert_eq!(
            node_type(c, "us-east-1", Some("g5.4xlarge"), "NVIDIA A10G", None, 1)
                .unwrap()
                .name,
            "g5.4xlarge"
        );
        assert!(gpu_model(c, "Matrox G200", None).is_none());
    }

    #[test]
    fn a_light_pod_on_an_a100_gets_the_smallest_mig_profile_its_peak_fits() {
        // 8% busy, 9 GiB peak on an 80 GB A100: 1g.10gb is too small with
        // headroom (10.8 GiB needed), 1g.20gb fits.
        let r = right_size(
            catalog(),
            "us-east-1",
            &pod(1, 0.08, 9.0, "NVIDIA A100-SXM4-80GB"),
            it("p4de.24xlarge"),
        )
        .unwrap();
        assert_eq!(
            r.size,
            Size::Mig {
                profile: "1g.20gb".into(),
                share: 1.0 / 7.0
            }
        );
        let now = gpu_month("p4de.24xlarge");
        assert!((r.monthly_now - now).abs() < 1e-6);
        assert!((r.saving() - now * 6.0 / 7.0).abs() < 1e-6, "{r:?}");
    }

    #[test]
    fn a_light_pod_on_a_gpu_without_mig_gets_a_time_sliced_share() {
        // 10% busy, 3 GiB of the A10G's 24: a quarter (14% of compute with
        // the target, 3.6 GiB with headroom) fits, an eighth does not.
        let r = right_size(
            catalog(),
            "us-east-1",
            &pod(1, 0.10, 3.0, "NVIDIA A10G"),
            it("g5.xlarge"),
        )
        .unwrap();
        assert_eq!(r.size, Size::Shared { replicas: 4 });
        assert!((r.saving() - gpu_month("g5.xlarge") * 0.75).abs() < 1e-6);
    }

    #[test]
    fn a_pod_using_a_fraction_of_its_gpus_needs_fewer_and_a_busy_one_is_left_or_sent_to_spot() {
        let r = right_size(
            catalog(),
            "us-east-1",
            &pod(8, 0.10, 30.0, "NVIDIA H100 80GB HBM3"),
            it("p5.48xlarge"),
        )
        .unwrap();
        assert_eq!(r.size, Size::FewerGpus { gpus: 2 });
        assert!((r.saving() - gpu_month("p5.48xlarge") * 6.0).abs() < 1e-6);
        // Busy: no smaller size; spot where it is cheaper.
        let busy = right_size(
            catalog(),
            "us-east-1",
            &pod(1, 0.9, 20.0, "NVIDIA A10G"),
            it("g5.xlarge"),
        );
        if let Some(r) = busy {
            assert_eq!(r.size, Size::Spot);
            assert!(r.monthly_after < r.monthly_now);
        }
    }

    #[test]
    fn the_report_lists_underused_pods_by_saving_and_idle_nodes_by_cost() {
        use crate::cluster::gpu_use::{assemble, Field, Sample};
        let g = |node: &str, gpu: &str, pod: &str, model: &str, v: f64| {
            Sample::new(
                &[
                    ("Hostname", node),
                    ("gpu", gpu),
                    ("modelName", model),
                    ("namespace", "ml"),
                    ("pod", pod),
                ],
                v,
            )
        };
        let a10 = "NVIDIA A10G";
        let answers = std::collections::BTreeMap::from([
            (
                Field::Util,
                vec![
                    g("a", "0", "notebook-0", a10, 2.0),
                    g("b", "0", "serve-0", a10, 20.0),
                    g("c", "0", "train-0", a10, 95.0),
                ],
            ),
            (
                Field::FbUsed,
                vec![
                    g("a", "0", "notebook-0", a10, 1024.0),
                    g("b", "0", "serve-0", a10, 2048.0),
                    g("c", "0", "train-0", a10, 20480.0),
                ],
            ),
        ]);
        let at = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let usage = assemble(at, std::time::Duration::from_secs(3600), &answers);
        let r = report(catalog(), "us-east-1", &usage, 0.3, 0.05);
        let pods: Vec<&str> = r.pods.iter().map(|p| p.pod.as_str()).collect();
        assert_eq!(pods.len(), 2, "train-0 is busy: {pods:?}");
        assert!(pods.contains(&"ml/notebook-0") && pods.contains(&"ml/serve-0"));
        assert!(r
            .pods
            .iter()
            .all(|p| p.instance_type.as_deref() == Some("g5.xlarge")));
        assert!(r.pods[0].monthly_saving >= r.pods[1].monthly_saving);
        let idle: Vec<&str> = r.idle_nodes.iter().map(|n| n.node.as_str()).collect();
        assert_eq!(idle, ["a"]);
        let month = catalog().on_demand_price("us-east-1", "g5.xlarge").unwrap() * HOURS_PER_MONTH;
        assert!((r.idle_monthly_cost - month).abs() < 1e-6);
        assert!(r.monthly_saving > 0.0);
    }
}
