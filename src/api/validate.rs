//! Validation of NodePools, shared by the controller (before it acts on a
//! pool) and `quartermaster validate` (before anyone applies one), and of
//! NodeClaims' labels and taints ([`validate_node_claim`]). It checks
//! everything the CRD's schema and CEL rules check, so that offline validation
//! catches the same mistakes, and what a schema cannot: cron expressions, time
//! zones, instance families and types against the catalog, MIG profiles
//! against the GPUs the pool selects, limits and pre-warm capacity.

use super::common::{Operator, Requirement, ResourceList, Taint};
use super::duration::{matches_duration_pattern, parse_duration};
use super::labels as l;
use super::nodepool::{
    BudgetNodes, GpuSharingMode, NodePool, NodePoolSpec, CAPACITY_TYPE_KEYS, LIMIT_COST_PER_HOUR,
    LIMIT_NODES, MAX_RESOURCE_LIMIT,
};
use super::quantity::parse_quantity;
use super::schedule::{parse_cron, parse_time_zone};
use crate::catalog::{self, mig, AcceleratorKind, CapacityType, Catalog, InstanceType};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

mod claim;
mod restricted;
mod syntax;

pub use claim::validate_node_claim;

pub use restricted::{
    karpenter_key_rule, karpenter_key_unknown, karpenter_labels_set, label_domain_rule,
    label_restriction, well_known_label_rule, KARPENTER_KEY_MESSAGE, LABEL_DOMAIN_EXCEPTIONS,
    LABEL_DOMAIN_MESSAGE, RESTRICTED_LABEL_DOMAINS, WELL_KNOWN_LABELS, WELL_KNOWN_LABEL_MESSAGE,
};
use syntax::{
    check_dns_label, check_dns_subdomain, closest_time_zone, is_mig_profile_name, is_plain_number,
};
pub(crate) use syntax::{check_label_value, check_qualified_name, distance};

/// One problem found in an object, with the JSON path of the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// JSON path in the object, e.g. `spec.prewarm[0].schedule`; map keys in
    /// brackets (`spec.limits[nvidia.com/gpu]`).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    /// An error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl std::error::Error for FieldError {}

/// The longest checkpoint grace period: the spot interruption notice.
pub const MAX_CHECKPOINT_GRACE_PERIOD: Duration = Duration::from_secs(120);

/// Checks a NodePool completely: what the CRD's schema and CEL rules enforce,
/// and what they cannot (cron expressions, time zones, catalog instance
/// families and types, MIG profiles against the selected GPUs, quantities).
/// Returns every problem found, in field order; empty means valid. Checks
/// that need the catalog are skipped when it has no instance types.
pub fn validate_node_pool(pool: &NodePool, catalog: &Catalog) -> Vec<FieldError> {
    let mut e = Errors::default();
    match pool.metadata.name.as_deref() {
        None | Some("") => e.push("metadata.name", "required"),
        Some(name) => {
            if let Err(m) = check_dns_subdomain(name) {
                e.push("metadata.name", m);
            }
        }
    }
    let spec = &pool.spec;
    let catalog = (catalog.instance_types().next().is_some()).then_some(catalog);
    check_template(&mut e, spec, catalog);
    if let Some(d) = &spec.template.spec.termination_grace_period {
        check_duration(&mut e, "spec.template.spec.terminationGracePeriod", d, "");
    }
    if let Some(d) = spec.template.spec.expire_after.as_deref() {
        if d != "Never" {
            check_duration(&mut e, "spec.template.spec.expireAfter", d, " or Never");
        }
    }
    check_capacity_types(&mut e, spec);
    check_limits(&mut e, &spec.limits);
    if let Some(w) = spec.weight {
        if !(0..=100).contains(&w) {
            e.push("spec.weight", format!("{w} is out of range 0..=100"));
        }
    }
    check_disruption(&mut e, spec);
    check_interruption(&mut e, spec);
    check_gpu_sharing(&mut e, spec, catalog);
    check_prewarm(&mut e, spec);
    check_risk(&mut e, spec);
    check_repair(&mut e, spec);
    e.0
}

/// The catalog's instance types that the pool's requirements select, judged
/// by the labels an instance type determines (instance type and family,
/// architecture, OS, GPU and Neuron name, count and memory). Requirements on
/// other labels (zone, capacity type, custom labels) do not narrow the result.
pub fn selected_instance_types<'a>(
    spec: &NodePoolSpec,
    catalog: &'a Catalog,
) -> Vec<&'a InstanceType> {
    let reqs: Vec<&Requirement> = spec
        .template
        .spec
        .requirements
        .iter()
        .filter(|r| catalog::INSTANCE_TYPE_KEYS.contains(&r.key.as_str()))
        .collect();
    catalog
        .instance_types()
        .filter(|it| {
            catalog
                .type_labels(&it.name)
                .is_some_and(|labels| reqs.iter().all(|r| r.matches(labels.as_ref())))
        })
        .collect()
}

/// The instance families a pool selects of which no type is sold in
/// `region` with a capacity type the pool allows (p3 in us-east-1): the
/// pool is valid, but launches none of them there. A warning rather than an
/// error, since the same pool may serve another region.
pub fn families_without_offerings(
    spec: &NodePoolSpec,
    catalog: &Catalog,
    region: &str,
) -> Vec<String> {
    let mut families: BTreeMap<&str, bool> = BTreeMap::new();
    let allowed = spec.allowed_capacity_types();
    for it in selected_instance_types(spec, catalog) {
        let sold = catalog
            .offerings_of(region, &it.name)
            .any(|o| allowed.contains(&o.capacity_type));
        *families.entry(it.family.as_str()).or_default() |= sold;
    }
    families
        .into_iter()
        .filter(|(_, sold)| !sold)
        .map(|(f, _)| f.to_string())
        .collect()
}

/// Labels whose values are integers (`Gt`/`Lt` apply; `In` values must be integers).
const INTEGER_KEYS: &[&str] = &[
    l::GPU_COUNT,
    l::GPU_MEMORY_GIB,
    l::NEURON_COUNT,
    l::GFD_COUNT,
    l::GFD_MEMORY,
    l::KARPENTER_INSTANCE_GENERATION,
    l::KARPENTER_INSTANCE_CPU,
    l::KARPENTER_INSTANCE_MEMORY,
    l::KARPENTER_INSTANCE_GPU_COUNT,
    l::KARPENTER_INSTANCE_GPU_MEMORY,
    l::KARPENTER_INSTANCE_ACCELERATOR_COUNT,
    l::KARPENTER_INSTANCE_LOCAL_NVME,
    l::KARPENTER_INSTANCE_NETWORK_BANDWIDTH,
];

/// Most labels a pool's template may set (the CRD's `maxProperties`).
pub const MAX_LABELS: usize = 100;

/// Labels Quartermaster sets itself; pools may not require them.
pub const RESTRICTED_KEYS: &[&str] = &[l::NODEPOOL, l::KARPENTER_NODEPOOL, l::HOSTNAME];

/// The CEL rule on a requirement that refuses [`RESTRICTED_KEYS`].
pub fn restricted_keys_rule() -> String {
    let list: Vec<String> = RESTRICTED_KEYS.iter().map(|k| format!("'{k}'")).collect();
    format!("!(self.key in [{}])", list.join(", "))
}

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError::new(path, message));
    }
}

fn check_template(e: &mut Errors, spec: &NodePoolSpec, catalog: Option<&Catalog>) {
    let t = &spec.template;
    for (k, v) in &t.metadata.labels {
        let path = format!("spec.template.metadata.labels[{k}]");
        if let Err(m) = check_qualified_name(k) {
            e.push(&path, format!("invalid label key: {m}"));
        }
        if let Err(m) = check_label_value(v) {
            e.push(&path, format!("invalid label value {v:?}: {m}"));
        }
        if let Some(why) = label_restriction(k) {
            e.push(&path, why);
        }
    }
    if t.metadata.labels.len() > MAX_LABELS {
        e.push(
            "spec.template.metadata.labels",
            format!("at most {MAX_LABELS} labels are allowed"),
        );
    }
    for k in t.metadata.annotations.keys() {
        if let Err(m) = check_qualified_name(k) {
            e.push(
                format!("spec.template.metadata.annotations[{k}]"),
                format!("invalid annotation key: {m}"),
            );
        }
    }
    check_taints(e, "spec.template.spec.taints", &t.spec.taints);
    check_taints(
        e,
        "spec.template.spec.startupTaints",
        &t.spec.startup_taints,
    );
    if t.spec.requirements.len() > 100 {
        e.push(
            "spec.template.spec.requirements",
            "at most 100 requirements are allowed",
        );
    }
    for (i, r) in t.spec.requirements.iter().enumerate() {
        check_requirement(
            e,
            &format!("spec.template.spec.requirements[{i}]"),
            r,
            catalog,
        );
    }
    if let Some(catalog) = catalog {
        if selected_instance_types(spec, catalog).is_empty() {
            e.push(
                "spec.template.spec.requirements",
                "no instance type in the catalog satisfies all the requirements",
            );
        }
    }
}

fn check_taints(e: &mut Errors, base: &str, taints: &[Taint]) {
    let mut seen = BTreeSet::new();
    for (i, t) in taints.iter().enumerate() {
        let path = format!("{base}[{i}]");
        if let Err(m) = check_qualified_name(&t.key) {
            e.push(format!("{path}.key"), format!("invalid taint key: {m}"));
        }
        if let Some(v) = &t.value {
            if let Err(m) = check_label_value(v) {
                e.push(format!("{path}.value"), format!("invalid taint value: {m}"));
            }
        }
        if !seen.insert((t.key.as_str(), t.effect)) {
            e.push(
                path,
                format!("duplicate taint {}:{}", t.key, t.effect.as_str()),
            );
        }
    }
}

fn check_requirement(e: &mut Errors, path: &str, r: &Requirement, catalog: Option<&Catalog>) {
    if let Err(m) = check_qualified_name(&r.key) {
        e.push(format!("{path}.key"), format!("invalid label key: {m}"));
    }
    if RESTRICTED_KEYS.contains(&r.key.as_str()) {
        e.push(
            format!("{path}.key"),
            format!("{} is set by Quartermaster and cannot be required", r.key),
        );
    }
    if let Some(why) = karpenter_key_unknown(&r.key) {
        e.push(format!("{path}.key"), why);
    }
    let values = format!("{path}.values");
    match r.operator {
        Operator::In | Operator::NotIn if r.values.is_empty() => {
            e.push(
                &values,
                format!("operator {} needs at least one value", r.operator),
            );
        }
        Operator::Exists | Operator::DoesNotExist if !r.values.is_empty() => {
            e.push(&values, format!("operator {} takes no values", r.operator));
        }
        Operator::Gt | Operator::Lt
            if r.values.len() != 1 || r.values[0].parse::<i64>().is_err() =>
        {
            e.push(
                &values,
                format!("operator {} takes exactly one integer value", r.operator),
            );
        }
        _ => {}
    }
    if r.values.len() > 100 {
        e.push(&values, "at most 100 values are allowed");
    }
    let listed = matches!(r.operator, Operator::In | Operator::NotIn);
    for (j, v) in r.values.iter().enumerate() {
        let vpath = format!("{values}[{j}]");
        if let Err(m) = check_label_value(v) {
            e.push(&vpath, format!("invalid label value {v:?}: {m}"));
            continue;
        }
        if !listed {
            continue;
        }
        match r.key.as_str() {
            k if INTEGER_KEYS.contains(&k) && v.parse::<i64>().is_err() => {
                e.push(
                    &vpath,
                    format!("{k} is an integer label; {v:?} is not an integer"),
                );
            }
            k if CAPACITY_TYPE_KEYS.contains(&k) && v.parse::<CapacityType>().is_err() => {
                e.push(
                    &vpath,
                    format!("unknown capacity type {v:?} (expected spot, on-demand or reserved)"),
                );
            }
            l::ARCH if v != "amd64" && v != "arm64" => {
                e.push(
                    &vpath,
                    format!("unknown architecture {v:?} (expected amd64 or arm64)"),
                );
            }
            l::INSTANCE_FAMILY | l::KARPENTER_INSTANCE_FAMILY => {
                if let Some(c) = catalog {
                    if !c.instance_types().any(|it| &it.family == v) {
                        let families: BTreeSet<&str> =
                            c.instance_types().map(|it| it.family.as_str()).collect();
                        e.push(
                            &vpath,
                            format!(
                                "unknown instance family {v:?} (the catalog has {})",
                                families.into_iter().collect::<Vec<_>>().join(", ")
                            ),
                        );
                    }
                }
            }
            l::INSTANCE_TYPE => {
                if let Some(c) = catalog {
                    if c.instance_type(v).is_none() {
                        let family = v.split('.').next().unwrap_or_default();
                        let siblings: Vec<&str> = c
                            .instance_types()
                            .filter(|it| it.family == family)
                            .map(|it| it.name.as_str())
                            .collect();
                        let hint = if siblings.is_empty() {
                            String::new()
                        } else {
                            format!(" ({family} has {})", siblings.join(", "))
                        };
                        e.push(&vpath, format!("unknown instance type {v:?}{hint}"));
                    }
                }
            }
            _ => {}
        }
    }
}

fn check_capacity_types(e: &mut Errors, spec: &NodePoolSpec) {
    let path = "spec.capacityTypes";
    let unique: BTreeSet<CapacityType> = spec.capacity_types.iter().copied().collect();
    if unique.len() != spec.capacity_types.len() {
        e.push(path, "capacity types must be unique");
    }
    if spec.allowed_capacity_types().is_empty() {
        let keys = format!("{} and {}", CAPACITY_TYPE_KEYS[0], CAPACITY_TYPE_KEYS[1]);
        e.push(
            path,
            if spec.capacity_types.is_empty() {
                format!("requirements on {keys} allow no capacity type (spot, on-demand, reserved)")
            } else {
                format!("requirements on {keys} exclude every capacity type listed here")
            },
        );
    }
}

fn check_limits(e: &mut Errors, limits: &ResourceList) {
    for (k, q) in limits {
        let path = format!("spec.limits[{k}]");
        let v = q.0.as_str();
        match k.as_str() {
            LIMIT_NODES => {
                if !(v.bytes().all(|b| b.is_ascii_digit()) && v.parse::<i64>().is_ok()) {
                    e.push(
                        &path,
                        format!("{v:?} is not a whole number of nodes (0 to {})", i64::MAX),
                    );
                }
            }
            LIMIT_COST_PER_HOUR => {
                if !is_plain_number(v) {
                    e.push(
                        &path,
                        format!("{v:?} is not a plain number of USD per hour (e.g. 250 or 99.5)"),
                    );
                }
            }
            _ => {
                if let Err(m) = check_qualified_name(k) {
                    e.push(&path, format!("invalid resource name: {m}"));
                }
                match parse_quantity(v) {
                    Err(err) => e.push(&path, err.to_string()),
                    Ok(x) if x < 0.0 => e.push(&path, format!("{v:?} is negative")),
                    Ok(x) if x > MAX_RESOURCE_LIMIT => e.push(
                        &path,
                        format!("{v:?} is larger than the largest limit, 2^53 (leave the limit out for none)"),
                    ),
                    Ok(_) => {}
                }
            }
        }
    }
}

fn check_disruption(e: &mut Errors, spec: &NodePoolSpec) {
    let d = &spec.disruption;
    if d.consolidate_after != "Never" {
        check_duration(
            e,
            "spec.disruption.consolidateAfter",
            &d.consolidate_after,
            " or Never",
        );
    }
    if let Some(idle) = &d.consolidate_idle_gpus_after {
        check_duration(e, "spec.disruption.consolidateIdleGpusAfter", idle, "");
    }
    if d.budgets.len() > 50 {
        e.push("spec.disruption.budgets", "at most 50 budgets are allowed");
    }
    for (i, b) in d.budgets.iter().enumerate() {
        let path = format!("spec.disruption.budgets[{i}]");
        if let Err(m) = BudgetNodes::parse(&b.nodes) {
            e.push(format!("{path}.nodes"), m);
        }
        if let Some(s) = &b.schedule {
            if let Err(err) = parse_cron(s) {
                e.push(format!("{path}.schedule"), err.to_string());
            }
        }
        if let Some(dur) = &b.duration {
            check_duration(e, &format!("{path}.duration"), dur, "");
        }
        if b.schedule.is_some() != b.duration.is_some() {
            e.push(&path, "schedule and duration must be set together");
        }
    }
}

fn check_interruption(e: &mut Errors, spec: &NodePoolSpec) {
    let i = &spec.interruption;
    let grace = check_duration(
        e,
        "spec.interruption.checkpointGracePeriod",
        &i.checkpoint_grace_period,
        "",
    );
    if let Some(g) = grace {
        if g > MAX_CHECKPOINT_GRACE_PERIOD {
            e.push(
                "spec.interruption.checkpointGracePeriod",
                format!(
                    "{} exceeds the two-minute spot interruption notice",
                    i.checkpoint_grace_period
                ),
            );
        }
    }
    if let Some(h) = &i.checkpoint_hook {
        let base = "spec.interruption.checkpointHook";
        if h.port == 0 {
            e.push(format!("{base}.port"), "must be in 1..=65535");
        }
        if !h.path.starts_with('/') {
            e.push(
                format!("{base}.path"),
                format!("{:?} must start with /", h.path),
            );
        }
        let timeout = check_duration(e, &format!("{base}.timeout"), &h.timeout, "");
        if let (Some(t), Some(g)) = (timeout, grace) {
            if t > g {
                e.push(
                    format!("{base}.timeout"),
                    format!(
                        "{} exceeds checkpointGracePeriod ({})",
                        h.timeout, i.checkpoint_grace_period
                    ),
                );
            }
        }
    }
}

/// A time-sliced or MPS pool's nodes advertise `nvidia.com/gpu.shared`, not
/// `nvidia.com/gpu`: a limit or pre-warm capacity in whole GPUs would never
/// bind or never be placed.
fn check_time_sliced_resources(e: &mut Errors, spec: &NodePoolSpec) {
    use crate::labels::{RESOURCE_GPU, RESOURCE_GPU_SHARED};
    let mode = spec.gpu_sharing.mode;
    if !matches!(mode, GpuSharingMode::TimeSlicing | GpuSharingMode::Mps) {
        return;
    }
    let why = || {
        format!(
            "a {mode:?} pool's nodes advertise {RESOURCE_GPU_SHARED}, not {RESOURCE_GPU}: \
             count its shares as {RESOURCE_GPU_SHARED} (replicas per GPU)"
        )
    };
    if spec.limits.contains_key(RESOURCE_GPU) {
        e.push(format!("spec.limits[{RESOURCE_GPU}]"), why());
    }
    for (i, w) in spec.prewarm.iter().enumerate() {
        if w.capacity.contains_key(RESOURCE_GPU) {
            e.push(format!("spec.prewarm[{i}].capacity[{RESOURCE_GPU}]"), why());
        }
    }
}

fn check_gpu_sharing(e: &mut Errors, spec: &NodePoolSpec, catalog: Option<&Catalog>) {
    let g = &spec.gpu_sharing;
    let base = "spec.gpuSharing";
    match g.mode {
        GpuSharingMode::TimeSlicing | GpuSharingMode::Mps => {
            // MPS serves at most 48 clients per GPU.
            let most = if g.mode == GpuSharingMode::Mps {
                48
            } else {
                64
            };
            match g.replicas {
                None => e.push(
                    format!("{base}.replicas"),
                    format!("required with mode {:?}", g.mode),
                ),
                Some(r) if !(2..=most).contains(&r) => e.push(
                    format!("{base}.replicas"),
                    format!("{r} is out of range 2..={most} for mode {:?}", g.mode),
                ),
                Some(_) => {}
            }
        }
        _ if g.replicas.is_some() => e.push(
            format!("{base}.replicas"),
            "only allowed with modes TimeSlicing and Mps",
        ),
        _ => {}
    }
    match (g.mode, &g.mig_profile) {
        (GpuSharingMode::Mig, None) => {
            e.push(format!("{base}.migProfile"), "required with mode Mig")
        }
        (GpuSharingMode::Mig, Some(p)) if !is_mig_profile_name(p) => e.push(
            format!("{base}.migProfile"),
            format!("{p:?} is not a MIG profile name (e.g. 1g.10gb)"),
        ),
        (GpuSharingMode::Mig, Some(_)) => {}
        (_, Some(_)) => e.push(format!("{base}.migProfile"), "only allowed with mode Mig"),
        (_, None) => {}
    }
    check_time_sliced_resources(e, spec);
    let Some(catalog) = catalog else { return };
    if g.mode == GpuSharingMode::None {
        return;
    }
    let selected = selected_instance_types(spec, catalog);
    if selected.is_empty() {
        return; // reported with the requirements
    }
    // (model, memory MiB) -> families, for the pool's NVIDIA GPUs.
    let mut gpus: BTreeMap<(&str, u64), BTreeSet<&str>> = BTreeMap::new();
    for it in &selected {
        if let Some(a) = &it.accelerator {
            if a.kind == AcceleratorKind::Gpu && a.manufacturer == "NVIDIA" {
                gpus.entry((a.model.as_str(), a.memory_mib_per_device))
                    .or_default()
                    .insert(it.family.as_str());
            }
        }
    }
    let describe = |gpus: &BTreeMap<(&str, u64), BTreeSet<&str>>| {
        gpus.iter()
            .map(|((model, mib), fams)| {
                let fams: Vec<&str> = fams.iter().copied().collect();
                format!("{model} {}GB on {}", mib / 1024, fams.join("/"))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if gpus.is_empty() {
        e.push(
            format!("{base}.mode"),
            "the pool selects no NVIDIA GPU instance types to share",
        );
        return;
    }
    let Some(profile) = g.mig_profile().filter(|p| is_mig_profile_name(p)) else {
        return;
    };
    let capable: BTreeMap<(&str, u64), BTreeSet<&str>> = gpus
        .iter()
        .filter(|((m, mib), _)| mig::supports_mig(m, *mib))
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    let path = format!("{base}.migProfile");
    if capable.is_empty() {
        e.push(
            path,
            format!(
                "none of the pool's GPUs supports MIG ({}); MIG needs A100, H100, H200 or B200 (p4d, p4de, p5, p5e, p5en, p6-b200)",
                describe(&gpus)
            ),
        );
        return;
    }
    let offering: Vec<_> = capable
        .keys()
        .filter(|(m, mib)| mig::instances_per_gpu(m, *mib, profile).is_some())
        .collect();
    if offering.is_empty() {
        let offered: Vec<String> = capable
            .keys()
            .map(|(m, mib)| {
                let names: Vec<&str> = mig::profiles_for(m, *mib).iter().map(|p| p.name).collect();
                format!("{m} {}GB offers {}", mib / 1024, names.join(", "))
            })
            .collect();
        e.push(
            path,
            format!(
                "no GPU the pool selects offers MIG profile {profile} ({})",
                offered.join("; ")
            ),
        );
    }
}

fn check_prewarm(e: &mut Errors, spec: &NodePoolSpec) {
    if spec.prewarm.len() > 32 {
        e.push("spec.prewarm", "at most 32 windows are allowed");
    }
    let mut names = BTreeSet::new();
    for (i, w) in spec.prewarm.iter().enumerate() {
        let path = format!("spec.prewarm[{i}]");
        if let Err(m) = check_dns_label(&w.name) {
            e.push(format!("{path}.name"), m);
        } else if !names.insert(w.name.as_str()) {
            e.push(
                format!("{path}.name"),
                format!("duplicate window name {:?}", w.name),
            );
        }
        if let Err(err) = parse_cron(&w.schedule) {
            e.push(format!("{path}.schedule"), err.to_string());
        }
        if let Err(err) = parse_time_zone(&w.time_zone) {
            let hint = closest_time_zone(&w.time_zone)
                .map(|tz| format!("; did you mean {tz}?"))
                .unwrap_or_default();
            e.push(format!("{path}.timeZone"), format!("{err}{hint}"));
        }
        if let Some(d) = check_duration(e, &format!("{path}.duration"), &w.duration, "") {
            if d.is_zero() {
                e.push(format!("{path}.duration"), "must be longer than zero");
            }
        }
        if w.capacity.is_empty() {
            e.push(
                format!("{path}.capacity"),
                "name at least one resource to hold, e.g. nvidia.com/gpu: 16",
            );
        }
        for (k, q) in &w.capacity {
            let cpath = format!("{path}.capacity[{k}]");
            if k == LIMIT_NODES || k == LIMIT_COST_PER_HOUR {
                e.push(&cpath, format!("{k} is a limit, not a resource to hold"));
                continue;
            }
            if let Err(m) = check_qualified_name(k) {
                e.push(&cpath, format!("invalid resource name: {m}"));
            }
            match parse_quantity(&q.0) {
                Err(err) => e.push(&cpath, err.to_string()),
                Ok(x) if x <= 0.0 => e.push(&cpath, format!("{:?} must be positive", q.0)),
                Ok(x) => {
                    if let Some(Ok(limit)) = spec.limits.get(k).map(|l| parse_quantity(&l.0)) {
                        if x > limit {
                            e.push(
                                &cpath,
                                format!("{} exceeds spec.limits[{k}] ({})", q.0, spec.limits[k].0),
                            );
                        }
                    }
                }
            }
        }
    }
}

fn check_risk(e: &mut Errors, spec: &NodePoolSpec) {
    let r = &spec.risk;
    if let Some(b) = r.max_interruption_bucket {
        if b > 4 {
            e.push(
                "spec.risk.maxInterruptionBucket",
                format!("{b} is out of range 0..=4"),
            );
        }
    }
    if !(r.risk_aversion.is_finite() && r.risk_aversion >= 0.0) {
        e.push(
            "spec.risk.riskAversion",
            format!("{} must be a number >= 0", r.risk_aversion),
        );
    }
    if let Some(s) = r.max_spot_pool_share {
        if !(s > 0.0 && s <= 1.0) {
            e.push(
                "spec.risk.maxSpotPoolShare",
                format!("{s} is out of range (0, 1]"),
            );
        }
    }
}

/// Whether `pattern` compiles as a regular expression, and if not why.
/// Pools are validated wherever they are read, by the core on every launch
/// too, and compiling a pattern costs far more than the rest of a pool's
/// checks: each pattern's answer is kept (a bounded number of them).
fn check_pattern(pattern: &str) -> Result<(), String> {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    static CHECKED: LazyLock<Mutex<HashMap<String, Result<(), String>>>> =
        LazyLock::new(Default::default);
    const KEPT: usize = 1024;
    // A poisoned lock only lost a cache entry: go on with its map.
    let mut checked = CHECKED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(answer) = checked.get(pattern) {
        return answer.clone();
    }
    let answer = regex::Regex::new(pattern)
        .map(drop)
        .map_err(|e| e.to_string());
    if checked.len() >= KEPT {
        checked.clear();
    }
    checked.insert(pattern.to_string(), answer.clone());
    answer
}

fn check_repair(e: &mut Errors, spec: &NodePoolSpec) {
    let r = &spec.repair;
    if r.conditions.len() > 64 {
        e.push(
            "spec.repair.conditions",
            "at most 64 conditions are allowed",
        );
    }
    for (i, c) in r.conditions.iter().enumerate() {
        let path = format!("spec.repair.conditions[{i}]");
        if c.type_.is_empty() {
            e.push(format!("{path}.type"), "required");
        }
        if let Some(p) = &c.reason_pattern {
            if let Err(err) = check_pattern(p) {
                e.push(
                    format!("{path}.reasonPattern"),
                    format!("not a regular expression: {err}"),
                );
            }
        }
        check_duration(
            e,
            &format!("{path}.tolerationDuration"),
            &c.toleration_duration,
            "",
        );
    }
    if let Err(m) = r.max_unhealthy_nodes() {
        e.push("spec.repair.maxUnhealthy", m);
    }
    check_duration(e, "spec.repair.rebootTimeout", &r.reboot_timeout, "");
}

/// Checks a duration field against the CRD pattern and parses it.
fn check_duration(e: &mut Errors, path: &str, s: &str, alternatives: &str) -> Option<Duration> {
    match parse_duration(s) {
        Ok(d) if matches_duration_pattern(s) => Some(d),
        Ok(_) => {
            e.push(
                path,
                format!(
                    "invalid duration {s:?}: use whole or decimal numbers with h, m, s or ms (e.g. \"90s\", \"1h30m\"){alternatives}"
                ),
            );
            None
        }
        Err(err) => {
            e.push(path, format!("{err}{alternatives}"));
            None
        }
    }
}

#[cfg(test)]
mod tests;
