//! Device templates: for each instance type, the devices its DRA drivers
//! would publish in ResourceSlices (NVIDIA GPUs and MIG partitions, Neuron
//! devices, EFA interfaces), with the attributes and capacities known
//! before launch and, for each, where it comes from. Built from the
//! catalog's accelerator facts and `pricing-data/dra-devices.yaml`
//! ([`EMBEDDED_DEVICES`]: per accelerator model and per family, never per
//! instance type), plus what a cluster adds in the same form without a
//! release ([`DeviceData::merged`]). Matching claims against templates is
//! `cluster::dra`'s; the design is written up in `docs/dra.md`.

use super::{mig, AcceleratorKind, InstanceType};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

/// `pricing-data/dra-devices.yaml` as compiled into the binary.
pub const EMBEDDED_DEVICES: &str = include_str!("../../pricing-data/dra-devices.yaml");

/// The NVIDIA DRA driver for GPUs' driver name.
pub const NVIDIA_DRIVER: &str = "gpu.nvidia.com";
/// The AWS Neuron DRA driver's driver name.
pub const NEURON_DRIVER: &str = "neuron.aws.com";
/// The EFA DRA driver's (DRANET's) driver name.
pub const EFA_DRIVER: &str = "dra.net";
/// The attribute naming a device's PCIe root (standard, published by the
/// NVIDIA and EFA drivers).
pub const PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";

/// The value of a device attribute, as a ResourceSlice carries it.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(untagged)]
pub enum AttributeValue {
    /// `bool`.
    Bool(bool),
    /// `int`.
    Int(i64),
    /// `string`.
    String(String),
    /// `version`: a semantic version, written `{version: "9.0.0"}`.
    Version {
        /// The version, e.g. `9.0.0`.
        version: String,
    },
}

impl fmt::Display for AttributeValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttributeValue::Bool(b) => write!(f, "{b}"),
            AttributeValue::Int(i) => write!(f, "{i}"),
            AttributeValue::String(s) => write!(f, "{s:?}"),
            AttributeValue::Version { version } => write!(f, "version {version}"),
        }
    }
}

/// A device attribute of a template.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Attribute {
    /// Known before launch.
    Known(AttributeValue),
    /// Set by the driver on the running node (a UUID, a driver version, a
    /// PCIe root). `groups` is how many distinct values the template's
    /// devices take on one node, when the type's topology is known: device
    /// `i` of `count` has the value of group `i * groups / count`, and two
    /// templates' devices in the same group have the same value (a GPU and
    /// the EFA interfaces on its PCIe root).
    RunTime {
        /// Distinct values on one node, if known.
        groups: Option<u32>,
    },
}

/// Devices of one kind that a DRA driver publishes on every node of an
/// instance type: identical but for their names and run-time attributes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeviceTemplate {
    /// The driver, e.g. `gpu.nvidia.com`.
    pub driver: String,
    /// The kind of device within the driver, e.g. `gpu`, `mig-1g.10gb`,
    /// `neuron`, `efa`.
    pub kind: String,
    /// Devices of this kind on one node.
    pub count: u32,
    /// Attributes by fully qualified name (`gpu.nvidia.com/productName`).
    pub attributes: BTreeMap<String, Attribute>,
    /// Capacities by fully qualified name, as Kubernetes quantities
    /// (`gpu.nvidia.com/memory: 81920Mi`).
    pub capacity: BTreeMap<String, String>,
    /// Where the template's facts come from.
    pub source: String,
    /// Set when the devices are shareable (`allowMultipleAllocations`).
    pub shared: Option<Shared>,
}

impl DeviceTemplate {
    /// The resource the planner counts these devices in: `<driver>/<kind>`
    /// (`gpu.nvidia.com/gpu`), one unit per device; for shareable devices
    /// `<driver>/<kind>.shared`, one unit per share (as the device
    /// plugin's shared GPUs are `nvidia.com/gpu.shared`).
    pub fn resource(&self) -> String {
        match &self.shared {
            None => resource_name(&self.driver, &self.kind),
            Some(_) => resource_name(&self.driver, &format!("{}.shared", self.kind)),
        }
    }

    /// Units of [`DeviceTemplate::resource`] on one node: its devices, or
    /// their shares.
    pub fn units(&self) -> i64 {
        i64::from(self.count) * self.shared.as_ref().map_or(1, |s| i64::from(s.shares))
    }

    /// The attribute of that qualified name, looking an unqualified name up
    /// in the driver's domain.
    pub fn attribute(&self, name: &str) -> Option<&Attribute> {
        self.attributes
            .get(name)
            .or_else(|| self.attributes.get(&qualified(&self.driver, name)))
    }
}

/// The planner resource of devices of `kind` published by `driver`.
pub fn resource_name(driver: &str, kind: &str) -> String {
    format!("{driver}/{kind}")
}

/// `name` qualified with `domain` unless it has a domain already.
pub fn qualified(domain: &str, name: &str) -> String {
    if name.contains('/') {
        name.to_string()
    } else {
        format!("{domain}/{name}")
    }
}

/// How a node's NVIDIA GPUs are published: whole, partitioned into one
/// MIG profile, or whole and shareable by several claims (consumable
/// capacity, KEP-5075), each device counted in `shares` shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GpuLayout<'a> {
    /// One claim per GPU.
    #[default]
    Whole,
    /// Every GPU partitioned into this MIG profile (`1g.10gb`).
    Mig(&'a str),
    /// Every GPU shared (MPS): published with `allowMultipleAllocations`
    /// and its memory and thread share consumable, in steps of
    /// 1/`shares` of the GPU.
    Shared(u32),
}

impl<'a> From<Option<&'a str>> for GpuLayout<'a> {
    fn from(mig_profile: Option<&'a str>) -> Self {
        mig_profile.map_or(GpuLayout::Whole, GpuLayout::Mig)
    }
}

/// `validRange` of a capacity's request policy (`resource.k8s.io/v1`
/// `CapacityRequestPolicyRange`), quantities as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValidRange {
    /// The least a request consumes (smaller requests are rounded up to it).
    pub min: String,
    /// The most a request may consume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<String>,
    /// Requests are rounded up to `min + n * step`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// How requests consume a capacity of a shareable device
/// (`resource.k8s.io/v1` `CapacityRequestPolicy`), quantities as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestPolicy {
    /// What a request that names no amount of the capacity consumes (the
    /// whole capacity when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// The range requests are rounded into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_range: Option<ValidRange>,
    /// The amounts a request may consume, ascending: a request is rounded
    /// up to the least that covers it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub valid_values: Vec<String>,
}

/// A shareable device (`allowMultipleAllocations: true`): several
/// requests, of several claims and pods, each consume part of its
/// capacities (KEP-5075 consumable capacity).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Shared {
    /// The shares the planner counts one device in: a request is charged
    /// the shares that cover what it consumes of the device's most
    /// consumed capacity, rounded up.
    pub shares: u32,
    /// Request policies by qualified capacity name.
    pub policies: BTreeMap<String, RequestPolicy>,
}

/// One NVIDIA GPU model as the driver describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuFacts {
    /// The model as EC2 names it (`H100`), compared case-insensitively.
    pub model: String,
    /// Lowest EC2 memory figure (MiB per GPU) of this part, when a model
    /// comes in several sizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_memory_mi_b: Option<u64>,
    /// Highest EC2 memory figure (MiB per GPU) of this part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mi_b: Option<u64>,
    /// `productName` (NVML's device name).
    pub product_name: String,
    /// `brand`, where known (NVML's brand string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brand: Option<String>,
    /// `architecture` (NVML's architecture string, e.g. `Hopper`).
    pub architecture: String,
    /// `cudaComputeCapability`, e.g. `9.0`.
    pub cuda_compute_capability: String,
    /// `memory` capacity as NVML reports it, when it differs from EC2's
    /// figure (a Kubernetes quantity); EC2's figure otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
}

/// The NVIDIA DRA driver's facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NvidiaFacts {
    /// Driver name.
    pub driver: String,
    /// Where the attribute names and values come from.
    pub source: String,
    /// Attributes whose values exist only on the running node.
    #[serde(default)]
    pub run_time_attributes: Vec<String>,
    /// GPU models, first match wins.
    #[serde(default)]
    pub gpus: Vec<GpuFacts>,
}

/// One Neuron device model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NeuronModel {
    /// The model as EC2 names it (`Trainium2`).
    pub model: String,
    /// Sizes N of the connected groups whose `resource.aws.com/devicegroupN_id`
    /// the driver publishes, where the topology is known.
    #[serde(default)]
    pub device_groups: Vec<u32>,
}

/// The Neuron DRA driver's facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NeuronFacts {
    /// Driver name.
    pub driver: String,
    /// Where the facts come from.
    pub source: String,
    /// Models it serves.
    #[serde(default)]
    pub models: Vec<NeuronModel>,
}

/// The EFA DRA driver's facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EfaFacts {
    /// Driver name.
    pub driver: String,
    /// Where the facts come from.
    pub source: String,
    /// `pciDevice` of an EFA interface.
    pub pci_device: String,
    /// `pciVendor` of an EFA interface.
    pub pci_vendor: String,
    /// Attributes whose values exist only on the running node.
    #[serde(default)]
    pub run_time_attributes: Vec<String>,
}

/// Which GPUs and EFA interfaces share a PCIe root, per family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PcieRoots {
    /// Instance families.
    pub families: Vec<String>,
    /// GPUs on one PCIe root (the EFA interfaces are spread evenly over
    /// the roots).
    pub gpus_per_root: u32,
    /// Where it comes from.
    pub source: String,
}

/// A device template written out in full, for an instance type the
/// catalog's rules do not cover (or cover wrongly).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateSpec {
    /// Driver name.
    pub driver: String,
    /// Kind of device within the driver (`gpu`, `efa`, ...): replaces the
    /// generated template of the same driver and kind.
    pub kind: String,
    /// Devices on one node.
    pub count: u32,
    /// Attributes known before launch (unqualified names are in the
    /// driver's domain); `{version: "9.0.0"}` for a version.
    #[serde(default)]
    pub attributes: BTreeMap<String, AttributeValue>,
    /// Attributes set on the node.
    #[serde(default)]
    pub run_time_attributes: Vec<String>,
    /// Capacities, as Kubernetes quantities.
    #[serde(default)]
    pub capacity: BTreeMap<String, String>,
    /// The devices are shareable (`allowMultipleAllocations`): several
    /// requests consume parts of their capacities.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_multiple_allocations: bool,
    /// Shareable devices: how a request consumes each capacity (by
    /// capacity name; a capacity without one is consumed whole unless a
    /// request names an amount).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub request_policy: BTreeMap<String, RequestPolicy>,
    /// Shareable devices: the shares the planner counts one device in
    /// (default 1: each request charged a whole device, which never
    /// overcommits and never packs two on one device).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<u32>,
    /// Where the facts come from.
    #[serde(default)]
    pub source: Option<String>,
}

/// The facts device templates are made of: `pricing-data/dra-devices.yaml`,
/// or a cluster's additions in the same form.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceData {
    /// NVIDIA GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia: Option<NvidiaFacts>,
    /// Neuron devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neuron: Option<NeuronFacts>,
    /// EFA interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efa: Option<EfaFacts>,
    /// PCIe topology per family.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pcie_roots: Vec<PcieRoots>,
    /// Templates written out per instance type: they replace the generated
    /// ones of the same driver and kind, and add the others.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub instance_types: BTreeMap<String, Vec<TemplateSpec>>,
}

/// Why device data could not be read.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Error(#[from] crate::api::read::Error);

impl DeviceData {
    /// Reads device data from YAML (`file` names it in problems).
    ///
    /// # Errors
    /// Every problem of the file: unknown fields, wrong types, a quantity
    /// that does not parse, a template with no devices.
    pub fn parse(file: &str, text: &str) -> Result<DeviceData, Error> {
        static SCHEMA: OnceLock<serde_json::Value> = OnceLock::new();
        let schema = SCHEMA.get_or_init(crate::api::read::schema_of::<DeviceData>);
        Ok(crate::api::read::single(
            file,
            text,
            schema,
            DeviceData::problems,
        )?)
    }

    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let quantity = |path: String, q: &str, out: &mut Vec<String>| {
            if crate::api::parse_quantity(q).is_err() {
                out.push(format!("{path}: {q:?} is not a Kubernetes quantity"));
            }
        };
        if let Some(n) = &self.nvidia {
            for (i, g) in n.gpus.iter().enumerate() {
                if let Some(m) = &g.memory {
                    quantity(format!("nvidia.gpus[{i}].memory"), m, &mut out);
                }
                if semver_of(&g.cuda_compute_capability).is_none() {
                    out.push(format!(
                        "nvidia.gpus[{i}].cudaComputeCapability: {:?} is not a version",
                        g.cuda_compute_capability
                    ));
                }
            }
        }
        for (i, r) in self.pcie_roots.iter().enumerate() {
            if r.gpus_per_root == 0 {
                out.push(format!("pcieRoots[{i}].gpusPerRoot: must be at least 1"));
            }
        }
        for (ty, specs) in &self.instance_types {
            for (i, t) in specs.iter().enumerate() {
                let at = format!("instanceTypes[{ty}][{i}]");
                if t.count == 0 {
                    out.push(format!("{at}.count: must be at least 1"));
                }
                for (k, q) in &t.capacity {
                    quantity(format!("{at}.capacity[{k}]"), q, &mut out);
                }
                for (k, p) in &t.request_policy {
                    let at = format!("{at}.requestPolicy[{k}]");
                    if !t.allow_multiple_allocations {
                        out.push(format!("{at}: only shareable devices (allowMultipleAllocations) have request policies"));
                    }
                    if !t.capacity.contains_key(k) {
                        out.push(format!("{at}: names no capacity of the template"));
                    }
                    for (i, v) in p.valid_values.iter().enumerate() {
                        quantity(format!("{at}.validValues[{i}]"), v, &mut out);
                    }
                    if let Some(d) = &p.default {
                        quantity(format!("{at}.default"), d, &mut out);
                    }
                    if let Some(r) = &p.valid_range {
                        quantity(format!("{at}.validRange.min"), &r.min, &mut out);
                        for (f, v) in [("max", &r.max), ("step", &r.step)] {
                            if let Some(v) = v {
                                quantity(format!("{at}.validRange.{f}"), v, &mut out);
                            }
                        }
                    }
                }
                for (k, v) in &t.attributes {
                    if let AttributeValue::Version { version } = v {
                        if semver_of(version).is_none() {
                            out.push(format!(
                                "{at}.attributes[{k}]: {version:?} is not a version"
                            ));
                        }
                    }
                }
            }
        }
        out
    }

    /// The embedded data (parsed once).
    ///
    /// # Panics
    /// If the embedded file does not read, which a test rules out.
    pub fn embedded() -> Arc<DeviceData> {
        static DATA: OnceLock<Arc<DeviceData>> = OnceLock::new();
        DATA.get_or_init(|| {
            Arc::new(
                DeviceData::parse("pricing-data/dra-devices.yaml", EMBEDDED_DEVICES)
                    .expect("embedded pricing-data/dra-devices.yaml reads"),
            )
        })
        .clone()
    }

    /// This data with `extra` laid over it: its GPU and Neuron models and
    /// PCIe topologies come first (the first match wins), its driver facts
    /// replace these, its per-type templates replace these.
    pub fn merged(&self, extra: &DeviceData) -> DeviceData {
        let mut out = self.clone();
        match (&mut out.nvidia, &extra.nvidia) {
            (Some(base), Some(e)) => {
                let mut gpus = e.gpus.clone();
                gpus.append(&mut base.gpus);
                *base = NvidiaFacts { gpus, ..e.clone() };
            }
            (None, Some(e)) => out.nvidia = Some(e.clone()),
            _ => {}
        }
        match (&mut out.neuron, &extra.neuron) {
            (Some(base), Some(e)) => {
                let mut models = e.models.clone();
                models.append(&mut base.models);
                *base = NeuronFacts {
                    models,
                    ..e.clone()
                };
            }
            (None, Some(e)) => out.neuron = Some(e.clone()),
            _ => {}
        }
        if extra.efa.is_some() {
            out.efa = extra.efa.clone();
        }
        let mut roots = extra.pcie_roots.clone();
        roots.append(&mut out.pcie_roots);
        out.pcie_roots = roots;
        for (k, v) in &extra.instance_types {
            out.instance_types.insert(k.clone(), v.clone());
        }
        out
    }

    /// The device templates of a node of `it`, its GPUs laid out as
    /// `layout` says (partitioned into a MIG profile the GPU supports, or
    /// shared): NVIDIA GPUs (or their MIG partitions), Neuron devices, EFA
    /// interfaces, then the type's templates written out in full, each
    /// replacing the generated one of its driver and kind.
    pub fn templates(&self, it: &InstanceType, layout: GpuLayout<'_>) -> Vec<DeviceTemplate> {
        let mut out = Vec::new();
        let roots = self.pcie_roots(it);
        if let (Some(acc), Some(nv)) = (&it.accelerator, &self.nvidia) {
            if acc.kind == AcceleratorKind::Gpu && acc.manufacturer == "NVIDIA" {
                if let Some(g) = nv.gpus.iter().find(|g| g.matches(acc)) {
                    let mig = match layout {
                        GpuLayout::Mig(p) => Some(p),
                        _ => None,
                    };
                    let mut t = nvidia_template(nv, g, acc, roots, mig);
                    if let GpuLayout::Shared(shares) = layout {
                        share(&mut t, shares);
                    }
                    out.push(t);
                }
            }
        }
        if let (Some(acc), Some(n)) = (&it.accelerator, &self.neuron) {
            if acc.kind == AcceleratorKind::Neuron {
                if let Some(m) = n
                    .models
                    .iter()
                    .find(|m| m.model.eq_ignore_ascii_case(&acc.model))
                {
                    out.push(neuron_template(n, m, it, acc.count));
                }
            }
        }
        if let Some(e) = &self.efa {
            if it.efa_supported && it.max_efa_interfaces > 0 {
                out.push(efa_template(e, it.max_efa_interfaces, roots));
            }
        }
        for spec in self.instance_types.get(&it.name).into_iter().flatten() {
            let t = spec.template(&it.name);
            out.retain(|o| !(o.driver == t.driver && o.kind == t.kind));
            out.push(t);
        }
        out
    }

    /// The PCIe roots of a node of `it` and their source, where known.
    fn pcie_roots(&self, it: &InstanceType) -> Option<(u32, &str)> {
        let gpus = it
            .accelerator
            .as_ref()
            .filter(|a| a.kind == AcceleratorKind::Gpu)?
            .count;
        let r = self
            .pcie_roots
            .iter()
            .find(|r| r.families.contains(&it.family))?;
        (r.gpus_per_root > 0 && gpus % r.gpus_per_root == 0)
            .then(|| (gpus / r.gpus_per_root, r.source.as_str()))
    }
}

impl GpuFacts {
    fn matches(&self, acc: &super::Accelerator) -> bool {
        self.model.eq_ignore_ascii_case(acc.model.trim())
            && self
                .min_memory_mi_b
                .is_none_or(|m| acc.memory_mib_per_device >= m)
            && self
                .max_memory_mi_b
                .is_none_or(|m| acc.memory_mib_per_device <= m)
    }
}

impl TemplateSpec {
    fn template(&self, instance_type: &str) -> DeviceTemplate {
        let mut attributes: BTreeMap<String, Attribute> = self
            .attributes
            .iter()
            .map(|(k, v)| (qualified(&self.driver, k), Attribute::Known(v.clone())))
            .collect();
        for k in &self.run_time_attributes {
            attributes.insert(
                qualified(&self.driver, k),
                Attribute::RunTime { groups: None },
            );
        }
        DeviceTemplate {
            driver: self.driver.clone(),
            kind: self.kind.clone(),
            count: self.count,
            attributes,
            capacity: self
                .capacity
                .iter()
                .map(|(k, v)| (qualified(&self.driver, k), v.clone()))
                .collect(),
            source: self
                .source
                .clone()
                .unwrap_or_else(|| format!("written out for {instance_type} in the device data")),
            shared: self.allow_multiple_allocations.then(|| Shared {
                shares: self.shares.unwrap_or(1).max(1),
                policies: self
                    .request_policy
                    .iter()
                    .map(|(k, v)| (qualified(&self.driver, k), v.clone()))
                    .collect(),
            }),
        }
    }
}

/// A version as DRA publishes it (`9.0` becomes `9.0.0`), or `None`.
pub fn semver_of(v: &str) -> Option<String> {
    let parts: Vec<&str> = v.trim().split('.').collect();
    if parts.is_empty()
        || parts.len() > 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let n = |i: usize| parts.get(i).map_or(Ok(0), |p| p.parse::<u64>());
    Some(format!("{}.{}.{}", n(0).ok()?, n(1).ok()?, n(2).ok()?))
}

fn known(v: AttributeValue) -> Attribute {
    Attribute::Known(v)
}

fn string(s: &str) -> Attribute {
    known(AttributeValue::String(s.to_string()))
}

fn nvidia_template(
    nv: &NvidiaFacts,
    g: &GpuFacts,
    acc: &super::Accelerator,
    roots: Option<(u32, &str)>,
    mig_profile: Option<&str>,
) -> DeviceTemplate {
    let d = nv.driver.as_str();
    let mig = mig_profile.and_then(|p| {
        mig::instances_per_gpu(&acc.model, acc.memory_mib_per_device, p).map(|n| (p, n))
    });
    let mut attributes = BTreeMap::new();
    let mut put = |name: &str, a: Attribute| {
        attributes.insert(qualified(d, name), a);
    };
    put("type", string(if mig.is_some() { "mig" } else { "gpu" }));
    put("productName", string(&g.product_name));
    put("architecture", string(&g.architecture));
    put(
        "cudaComputeCapability",
        known(AttributeValue::Version {
            version: semver_of(&g.cuda_compute_capability)
                .unwrap_or_else(|| g.cuda_compute_capability.clone()),
        }),
    );
    match &g.brand {
        Some(b) => put("brand", string(b)),
        None => put("brand", Attribute::RunTime { groups: None }),
    }
    for a in &nv.run_time_attributes {
        if a != "parentUUID" || mig.is_some() {
            put(a, Attribute::RunTime { groups: None });
        }
    }
    put(
        PCIE_ROOT,
        Attribute::RunTime {
            groups: roots.map(|(n, _)| n),
        },
    );
    let mut capacity = BTreeMap::new();
    let (kind, count, source) = match mig {
        Some((profile, per_gpu)) => {
            put("profile", string(profile));
            // The profile's nominal memory (`1g.10gb`: 10 GB); NVML's
            // figure is within a few percent of it.
            let gb = profile
                .split('.')
                .nth(1)
                .and_then(|m| m.strip_suffix("gb"))
                .unwrap_or("0");
            capacity.insert(qualified(d, "memory"), format!("{gb}G"));
            (
                format!("mig-{profile}"),
                acc.count * per_gpu,
                format!(
                    "{}; MIG profile {profile}: {per_gpu} per GPU (catalog::mig), memory its nominal size",
                    nv.source
                ),
            )
        }
        None => {
            let memory = g
                .memory
                .clone()
                .unwrap_or_else(|| format!("{}Mi", acc.memory_mib_per_device));
            capacity.insert(qualified(d, "memory"), memory);
            let memory_source = if g.memory.is_some() {
                "memory as NVML reports it"
            } else {
                "memory from EC2's GpuInfo"
            };
            (
                "gpu".to_string(),
                acc.count,
                format!("{}; {memory_source}", nv.source),
            )
        }
    };
    let source = match roots {
        Some((_, why)) => format!("{source}; PCIe roots: {why}"),
        None => source,
    };
    DeviceTemplate {
        driver: d.to_string(),
        kind,
        count,
        attributes,
        capacity,
        source,
        shared: None,
    }
}

/// The capacity of a shared GPU that MPS's active thread percentage
/// limits (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`): 100 per GPU.
pub const THREAD_SHARE: &str = "activeThreadPercentage";

/// A whole GPU made shareable, as an MPS pool's GPUs are published under
/// DRA: `allowMultipleAllocations`, and two consumable capacities, its
/// `memory` and its [`THREAD_SHARE`] (100), each consumed in steps of
/// 1/`shares` of the GPU; a request that names no amount of one takes
/// one step of it, as each MPS client of the device plugin gets 1/replicas
/// of the memory and threads. Source: Kubernetes `resource.k8s.io/v1`
/// consumable capacity (KEP-5075: `Device.allowMultipleAllocations`,
/// `DeviceCapacity.requestPolicy`); the NVIDIA DRA driver publishes
/// `memory` for every GPU, while the name of a thread-share capacity is
/// ours (the driver's shared-GPU capacities are not documented yet; see
/// `docs/dra.md`).
fn share(t: &mut DeviceTemplate, shares: u32) {
    let shares = shares.max(1);
    let d = t.driver.clone();
    t.capacity.insert(qualified(&d, THREAD_SHARE), "100".into());
    let mut policies = BTreeMap::new();
    for (name, value) in &t.capacity {
        let Ok(v) = crate::api::parse_quantity(value) else {
            continue;
        };
        // One share, in the capacity's unit, rounded down so that `shares`
        // steps fit in the device.
        let step = if name.ends_with("/memory") {
            format!(
                "{}Mi",
                (v / f64::from(shares) / f64::from(1u32 << 20)).floor()
            )
        } else {
            let milli = (v * 1000.0 / f64::from(shares)).floor();
            if milli % 1000.0 == 0.0 {
                format!("{}", milli / 1000.0)
            } else {
                format!("{milli}m")
            }
        };
        policies.insert(
            name.clone(),
            RequestPolicy {
                default: Some(step.clone()),
                valid_range: Some(ValidRange {
                    min: step.clone(),
                    max: Some(value.clone()),
                    step: Some(step),
                }),
                valid_values: Vec::new(),
            },
        );
    }
    t.shared = Some(Shared { shares, policies });
    t.source = format!(
        "{}; shared (MPS, {shares} shares per GPU): allowMultipleAllocations with consumable memory and {THREAD_SHARE} (Kubernetes KEP-5075; the {THREAD_SHARE} name is Quartermaster's)",
        t.source
    );
}

fn neuron_template(
    n: &NeuronFacts,
    m: &NeuronModel,
    it: &InstanceType,
    count: u32,
) -> DeviceTemplate {
    let d = n.driver.as_str();
    let mut attributes = BTreeMap::new();
    attributes.insert(qualified(d, "instanceType"), string(&it.name));
    for size in &m.device_groups {
        if *size > 0 && *size <= count && count.is_multiple_of(*size) {
            attributes.insert(
                format!("resource.aws.com/devicegroup{size}_id"),
                Attribute::RunTime {
                    groups: Some(count / size),
                },
            );
        }
    }
    DeviceTemplate {
        driver: d.to_string(),
        kind: "neuron".into(),
        count,
        attributes,
        capacity: BTreeMap::new(),
        source: n.source.clone(),
        shared: None,
    }
}

fn efa_template(e: &EfaFacts, count: u32, roots: Option<(u32, &str)>) -> DeviceTemplate {
    let d = e.driver.as_str();
    let mut attributes = BTreeMap::new();
    attributes.insert(qualified(d, "pciDevice"), string(&e.pci_device));
    attributes.insert(qualified(d, "pciVendor"), string(&e.pci_vendor));
    attributes.insert(qualified(d, "rdma"), known(AttributeValue::Bool(true)));
    for a in &e.run_time_attributes {
        attributes.insert(qualified(d, a), Attribute::RunTime { groups: None });
    }
    // The EFA interfaces are spread evenly over the GPUs' roots.
    let groups = roots
        .map(|(n, _)| n)
        .filter(|n| *n <= count && count.is_multiple_of(*n));
    attributes.insert(PCIE_ROOT.to_string(), Attribute::RunTime { groups });
    let source = match roots.filter(|_| groups.is_some()) {
        Some((_, why)) => format!("{}; PCIe roots: {why}", e.source),
        None => e.source.clone(),
    };
    DeviceTemplate {
        driver: d.to_string(),
        kind: "efa".into(),
        count,
        attributes,
        capacity: BTreeMap::new(),
        source,
        shared: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn templates(name: &str, mig: Option<&str>) -> Vec<DeviceTemplate> {
        let catalog = Catalog::embedded().unwrap();
        let it = catalog.instance_type(name).unwrap();
        DeviceData::embedded().templates(it, mig.into())
    }

    fn known_string(t: &DeviceTemplate, name: &str) -> String {
        match t.attribute(name) {
            Some(Attribute::Known(AttributeValue::String(s))) => s.clone(),
            other => panic!("{name}: {other:?}"),
        }
    }

    #[test]
    fn a_p5_publishes_eight_h100s_and_thirty_two_efas_four_on_each_gpus_pcie_root() {
        let ts = templates("p5.48xlarge", None);
        let gpu = ts.iter().find(|t| t.driver == NVIDIA_DRIVER).unwrap();
        assert_eq!((gpu.kind.as_str(), gpu.count), ("gpu", 8));
        assert_eq!(known_string(gpu, "productName"), "NVIDIA H100 80GB HBM3");
        assert_eq!(known_string(gpu, "architecture"), "Hopper");
        assert_eq!(
            gpu.attribute("cudaComputeCapability"),
            Some(&Attribute::Known(AttributeValue::Version {
                version: "9.0.0".into()
            }))
        );
        assert_eq!(
            gpu.attribute("driverVersion"),
            Some(&Attribute::RunTime { groups: None }),
            "the driver version is the node's"
        );
        assert_eq!(gpu.capacity["gpu.nvidia.com/memory"], "81920Mi");
        assert_eq!(gpu.resource(), "gpu.nvidia.com/gpu");
        let efa = ts.iter().find(|t| t.driver == EFA_DRIVER).unwrap();
        assert_eq!(efa.count, 32);
        assert_eq!(
            efa.attribute(PCIE_ROOT),
            Some(&Attribute::RunTime { groups: Some(8) })
        );
        assert_eq!(
            gpu.attribute(PCIE_ROOT),
            Some(&Attribute::RunTime { groups: Some(8) })
        );
        assert!(gpu.source.contains("k8s-dra-driver-gpu"), "{}", gpu.source);
    }

    #[test]
    fn a_mig_pool_publishes_partitions_with_their_parents_attributes() {
        let ts = templates("p4de.24xlarge", Some("1g.10gb"));
        let mig = ts.iter().find(|t| t.driver == NVIDIA_DRIVER).unwrap();
        assert_eq!((mig.kind.as_str(), mig.count), ("mig-1g.10gb", 56));
        assert_eq!(known_string(mig, "type"), "mig");
        assert_eq!(known_string(mig, "profile"), "1g.10gb");
        assert_eq!(known_string(mig, "productName"), "NVIDIA A100-SXM4-80GB");
        assert_eq!(mig.capacity["gpu.nvidia.com/memory"], "10G");
        // A profile the GPU does not offer leaves the GPUs whole.
        let whole = templates("p4de.24xlarge", Some("1g.18gb"));
        assert_eq!(whole[0].kind, "gpu");
    }

    #[test]
    fn neuron_and_unknown_topologies_are_published_as_far_as_known() {
        let ts = templates("trn2.48xlarge", None);
        let n = ts.iter().find(|t| t.driver == NEURON_DRIVER).unwrap();
        assert_eq!(n.count, 16);
        assert_eq!(known_string(n, "instanceType"), "trn2.48xlarge");
        assert_eq!(
            n.attribute("resource.aws.com/devicegroup4_id"),
            Some(&Attribute::RunTime { groups: Some(4) })
        );
        // g6e.48xlarge: 8 GPUs and 4 EFAs, but no known PCIe topology.
        let ts = templates("g6e.48xlarge", None);
        assert!(ts
            .iter()
            .all(|t| t.attribute(PCIE_ROOT) == Some(&Attribute::RunTime { groups: None })));
        // A CPU type has no devices; a T4's brand is not claimed.
        assert!(templates("m7i.xlarge", None).is_empty());
        let t4 = templates("g4dn.xlarge", None);
        assert_eq!(
            t4[0].attribute("brand"),
            Some(&Attribute::RunTime { groups: None })
        );
    }

    #[test]
    fn a_cluster_adds_a_new_type_and_corrects_a_known_one_without_a_release() {
        let extra = DeviceData::parse(
            "devices.yaml",
            r#"
nvidia:
  driver: gpu.nvidia.com
  source: ours
  gpus:
  - {model: H100, productName: NVIDIA H100 80GB HBM3, brand: Nvidia, architecture: Hopper, cudaComputeCapability: "9.0", memory: 81559Mi}
instanceTypes:
  p5.48xlarge:
  - driver: dra.net
    kind: efa
    count: 16
    attributes: {pciDevice: Elastic Fabric Adapter (EFA), rdma: true}
"#,
        )
        .unwrap();
        let data = DeviceData::embedded().merged(&extra);
        let catalog = Catalog::embedded().unwrap();
        let ts = data.templates(
            catalog.instance_type("p5.48xlarge").unwrap(),
            GpuLayout::Whole,
        );
        let gpu = ts.iter().find(|t| t.driver == NVIDIA_DRIVER).unwrap();
        assert_eq!(gpu.capacity["gpu.nvidia.com/memory"], "81559Mi");
        let efa: Vec<&DeviceTemplate> = ts.iter().filter(|t| t.driver == EFA_DRIVER).collect();
        assert_eq!(efa.len(), 1);
        assert_eq!(efa[0].count, 16);
        assert!(efa[0].source.contains("written out for p5.48xlarge"));
    }

    #[test]
    fn bad_device_data_is_refused_with_every_problem_and_its_line() {
        let e = DeviceData::parse(
            "devices.yaml",
            "instanceTypes:\n  x.large:\n  - {driver: d, kind: k, count: 0, capacity: {memory: lots}, colour: red}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("colour"), "{e}");
        let e = DeviceData::parse(
            "devices.yaml",
            "instanceTypes:\n  x.large:\n  - {driver: d, kind: k, count: 0, capacity: {memory: lots}}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("count: must be at least 1"), "{e}");
        assert!(e.contains("\"lots\" is not a Kubernetes quantity"), "{e}");
        assert!(e.contains("line 3"), "{e}");
    }

    #[test]
    fn an_mps_pools_gpus_are_published_shareable_in_its_shares() {
        let catalog = Catalog::embedded().unwrap();
        let it = catalog.instance_type("p5.4xlarge").unwrap();
        let ts = DeviceData::embedded().templates(it, GpuLayout::Shared(4));
        let gpu = ts.iter().find(|t| t.driver == NVIDIA_DRIVER).unwrap();
        let shared = gpu.shared.as_ref().unwrap();
        assert_eq!((gpu.kind.as_str(), gpu.count, shared.shares), ("gpu", 1, 4));
        assert_eq!(gpu.resource(), "gpu.nvidia.com/gpu.shared");
        assert_eq!(gpu.units(), 4);
        assert_eq!(gpu.capacity["gpu.nvidia.com/activeThreadPercentage"], "100");
        let memory = &shared.policies["gpu.nvidia.com/memory"];
        assert_eq!(
            memory.default.as_deref(),
            Some("20480Mi"),
            "a quarter of 80 GiB"
        );
        let range = memory.valid_range.as_ref().unwrap();
        assert_eq!(
            (range.min.as_str(), range.step.as_deref()),
            ("20480Mi", Some("20480Mi"))
        );
        let threads = &shared.policies["gpu.nvidia.com/activeThreadPercentage"];
        assert_eq!(threads.default.as_deref(), Some("25"));
        assert!(gpu.source.contains("KEP-5075"), "{}", gpu.source);
        // Whole GPUs are not shareable.
        let whole = DeviceData::embedded().templates(it, GpuLayout::Whole);
        assert!(whole.iter().all(|t| t.shared.is_none()));
    }

    #[test]
    fn a_written_out_template_may_be_shareable_with_its_own_policies() {
        let data = DeviceData::parse(
            "devices.yaml",
            r#"
instanceTypes:
  x.large:
  - driver: gpu.example.com
    kind: gpu
    count: 2
    capacity: {memory: 40Gi}
    allowMultipleAllocations: true
    shares: 2
    requestPolicy:
      memory: {default: 20Gi, validValues: [20Gi, 40Gi]}
"#,
        )
        .unwrap();
        let t = data.instance_types["x.large"][0].template("x.large");
        let shared = t.shared.unwrap();
        assert_eq!(shared.shares, 2);
        assert_eq!(
            shared.policies["gpu.example.com/memory"].valid_values,
            ["20Gi", "40Gi"]
        );
        let e = DeviceData::parse(
            "devices.yaml",
            "instanceTypes:\n  x.large:\n  - {driver: d, kind: k, count: 1, capacity: {memory: 1Gi}, requestPolicy: {cores: {default: lots}}}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("only shareable devices"), "{e}");
        assert!(e.contains("names no capacity of the template"), "{e}");
        assert!(e.contains("\"lots\" is not a Kubernetes quantity"), "{e}");
    }

    #[test]
    fn versions_read_as_dra_publishes_them() {
        assert_eq!(semver_of("9.0").as_deref(), Some("9.0.0"));
        assert_eq!(semver_of("10").as_deref(), Some("10.0.0"));
        assert_eq!(semver_of("v1"), None);
        assert_eq!(semver_of("1.2.3.4"), None);
    }
}
