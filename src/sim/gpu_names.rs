//! GPU model names from other fleets, as traces write them in
//! `gpu_type_hint` (`V100M16|V100M32`, `A10`, `P100`), mapped to ours (the
//! `quartermaster.dev/gpu-name` values of the catalog: `v100`, `a10g`), and
//! what to do with a hint no pool of the scenario can serve. Pure: the
//! caller says which of our names exist and which its pools can launch.

use super::trace::TraceJob;
use crate::api::validate::selected_instance_types;
use crate::api::NodePool;
use crate::catalog::{gpu_short_name, AcceleratorKind, Catalog, InstanceType};
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// Foreign GPU model names (compared without case) and the catalog's GPU
/// name each replays on: the same part where AWS sells it, else the
/// nearest part AWS sells with at least its memory and speed. Names seen in
/// public traces: Alibaba PAI (`V100M16`, `V100M32`, `P100`, `T4`, `A10`),
/// Acme, Philly and Helios (`V100`, `A100`, `K80`), and the usual vendor
/// spellings. Vendor-internal names (Alibaba's `G2`, `G3`, `MISC`) mean
/// nothing outside their fleet and are left out: a scenario maps them with
/// `trace.gpuNames`. Each of our names also maps to itself.
pub const FOREIGN_GPU_NAMES: &[(&str, &str)] = &[
    // V100 in its memory sizes and form factors (p3).
    ("v100", "v100"),
    ("v100m16", "v100"),
    ("v100m32", "v100"),
    ("v100-16gb", "v100"),
    ("v100-32gb", "v100"),
    ("v100-sxm2", "v100"),
    ("v100s", "v100"),
    ("tesla-v100", "v100"),
    // Pascal and Kepler parts AWS no longer sells: the V100 is the nearest
    // with the P100's 16 GB; the T4 outruns a K80, P4 or P40 die.
    ("p100", "v100"),
    ("k80", "t4"),
    ("p4", "t4"),
    ("p40", "t4"),
    ("t4", "t4"),
    ("tesla-t4", "t4"),
    // The A10 is sold on AWS as the A10G (g5), its nearest part.
    ("a10", "a10g"),
    ("a10g", "a10g"),
    // A100 in both memory sizes (p4d, p4de); the export variants A800 and
    // H800 are the same chips with slower links.
    ("a100", "a100"),
    ("a100-40gb", "a100"),
    ("a100-80gb", "a100"),
    ("a100m40", "a100"),
    ("a100m80", "a100"),
    ("a800", "a100"),
    ("h100", "h100"),
    ("h800", "h100"),
    ("h200", "h200"),
    ("l4", "l4"),
    ("l40", "l40s"),
    ("l40s", "l40s"),
    ("b200", "b200"),
];

/// What to do with a GPU hint no pool of the scenario can serve (a name
/// that maps to nothing, or to a GPU no pool launches in the region).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum OnUnknownGpu {
    /// Drop that name from the pod's hint (a pod left without names may
    /// run on any GPU), and warn. The default: no pod waits for ever
    /// without a word.
    #[default]
    Drop,
    /// Refuse to run the scenario, naming each hint and its pods.
    Fail,
    /// Keep the name: its pods wait to the end (the report says why).
    Wait,
}

/// A hint name no pool can serve, for [`OnUnknownGpu::Fail`].
#[derive(Debug, thiserror::Error)]
#[error("GPU hints no pool can serve (map them with trace.gpuNames or set trace.onUnknownGpu: drop or wait): {}", .0.join("; "))]
pub struct Error(pub Vec<String>);

/// The `quartermaster.dev/gpu-name` of a GPU instance type.
fn gpu_name(it: &InstanceType) -> Option<String> {
    it.accelerator
        .as_ref()
        .filter(|a| a.kind == AcceleratorKind::Gpu)
        .map(|a| gpu_short_name(&a.model))
}

/// Every GPU name of the catalog.
pub fn catalog_names(catalog: &Catalog) -> BTreeSet<String> {
    catalog.instance_types().filter_map(gpu_name).collect()
}

/// The GPU names some pool can launch in `region` (a type it selects, sold
/// there with a capacity type it allows).
pub fn launchable(pools: &[NodePool], catalog: &Catalog, region: &str) -> BTreeSet<String> {
    pools
        .iter()
        .flat_map(|p| {
            let allowed = p.spec.allowed_capacity_types();
            selected_instance_types(&p.spec, catalog)
                .into_iter()
                .filter(move |it| {
                    catalog
                        .offerings_of(region, &it.name)
                        .any(|o| allowed.contains(&o.capacity_type))
                })
        })
        .filter_map(gpu_name)
        .collect()
}

/// Our name for a foreign GPU name: the scenario's own map first, then
/// [`FOREIGN_GPU_NAMES`], then the name itself if it is one of ours.
pub fn ours(
    name: &str,
    extra: &BTreeMap<String, String>,
    known: &BTreeSet<String>,
) -> Option<String> {
    let lower = name.trim().to_ascii_lowercase();
    let from_scenario = extra
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(&lower))
        .map(|(_, v)| v.to_ascii_lowercase());
    from_scenario
        .or_else(|| {
            FOREIGN_GPU_NAMES
                .iter()
                .find(|(k, _)| *k == lower)
                .map(|(_, v)| v.to_string())
        })
        .or_else(|| known.contains(&lower).then_some(lower))
}

/// Rewrites every row's GPU hint into our names. `known` holds the
/// catalog's GPU names, `launchable` those some pool of the scenario can
/// launch in its region. A name that maps to nothing, or to a GPU no pool
/// launches, is handled as `policy` says. Returns one warning per such name
/// (with how many pods it concerns and what was done).
///
/// # Errors
/// With [`OnUnknownGpu::Fail`], every such name.
pub fn apply(
    rows: &mut [TraceJob],
    extra: &BTreeMap<String, String>,
    known: &BTreeSet<String>,
    launchable: &BTreeSet<String>,
    policy: OnUnknownGpu,
) -> Result<Vec<String>, Error> {
    // Per foreign name: our name (if any) and the pods that ask for it.
    let mut unserved: BTreeMap<String, (Option<String>, usize)> = BTreeMap::new();
    for row in rows.iter_mut() {
        let mut names = Vec::new();
        for hint in &row.gpu_models {
            let mapped = ours(hint, extra, known);
            let keep = match mapped {
                Some(m) if launchable.contains(&m) => Some(m),
                _ => {
                    unserved
                        .entry(hint.clone())
                        .or_insert((mapped.clone(), 0))
                        .1 += 1;
                    (policy == OnUnknownGpu::Wait).then(|| mapped.unwrap_or_else(|| hint.clone()))
                }
            };
            if let Some(name) = keep.filter(|n| !names.contains(n)) {
                names.push(name);
            }
        }
        row.gpu_models = names;
    }
    let problems: Vec<String> = unserved
        .iter()
        .map(|(hint, (mapped, pods))| {
            let why = match mapped {
                Some(m) => format!("maps to {m}, which no pool launches in the region"),
                None => "maps to no GPU we know".to_string(),
            };
            format!("GPU hint {hint:?} ({pods} pods) {why}")
        })
        .collect();
    match policy {
        OnUnknownGpu::Fail if !problems.is_empty() => Err(Error(problems)),
        OnUnknownGpu::Drop => Ok(problems
            .into_iter()
            .map(|p| format!("{p}: dropped from their hints"))
            .collect()),
        _ => Ok(problems
            .into_iter()
            .map(|p| format!("{p}: they wait to the end"))
            .collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, hint: &[&str]) -> TraceJob {
        TraceJob {
            job_id: id.into(),
            gpus: 1.0,
            gpu_models: hint.iter().map(|h| h.to_ascii_lowercase()).collect(),
            ..Default::default()
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn rows() -> Vec<TraceJob> {
        vec![
            row("a", &["V100M16", "V100M32"]),
            row("b", &["A10"]),
            row("c", &["G2"]),
            row("d", &["G2", "T4"]),
            row("e", &[]),
        ]
    }

    fn hints(rows: &[TraceJob]) -> Vec<Vec<String>> {
        rows.iter().map(|r| r.gpu_models.clone()).collect()
    }

    #[test]
    fn foreign_names_become_ours_and_unknown_ones_are_dropped_with_a_count() {
        let known = set(&["v100", "a10g", "t4", "a100"]);
        let mut r = rows();
        let warnings = apply(&mut r, &BTreeMap::new(), &known, &known, OnUnknownGpu::Drop).unwrap();
        assert_eq!(
            hints(&r),
            [vec!["v100"], vec!["a10g"], vec![], vec!["t4"], vec![]]
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("\"g2\" (2 pods)") && warnings[0].contains("dropped"),
            "{warnings:?}"
        );
    }

    #[test]
    fn the_scenario_extends_the_table_and_a_name_no_pool_launches_is_reported() {
        let known = set(&["v100", "a10g", "t4", "l4"]);
        let extra = BTreeMap::from([("G2".to_string(), "l4".to_string())]);
        // No pool launches a V100 (p3 has no offerings in the region).
        let launchable = set(&["a10g", "t4", "l4"]);
        let mut r = rows();
        let warnings = apply(&mut r, &extra, &known, &launchable, OnUnknownGpu::Wait).unwrap();
        assert_eq!(
            hints(&r),
            [
                vec!["v100"],
                vec!["a10g"],
                vec!["l4"],
                vec!["l4", "t4"],
                vec![]
            ]
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("\"v100m16\" (1 pods) maps to v100, which no pool"));
        assert!(warnings.iter().all(|w| w.contains("wait")), "{warnings:?}");
    }

    #[test]
    fn fail_names_every_unserved_hint() {
        let known = set(&["v100", "a10g", "t4"]);
        let e = apply(
            &mut rows(),
            &BTreeMap::new(),
            &known,
            &known,
            OnUnknownGpu::Fail,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("\"g2\" (2 pods) maps to no GPU"), "{e}");
        let mut fine = vec![row("a", &["A10"])];
        assert!(apply(
            &mut fine,
            &BTreeMap::new(),
            &known,
            &known,
            OnUnknownGpu::Fail
        )
        .is_ok());
    }
}
