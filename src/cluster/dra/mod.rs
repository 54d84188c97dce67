//! DRA claims as demand (`resource.k8s.io/v1`): a pod's `spec.resourceClaims`
//! resolved against ResourceClaimTemplates (one claim per pod) and
//! ResourceClaims (one allocation shared by every pod that names it, on
//! one node; an allocated claim pins its pods to its node), compiled
//! against their DeviceClasses ([`compile`], CEL selectors compiled once:
//! [`cel`]), and allocated on every node shape the catalog knows (an
//! instance type's device templates, its GPUs whole or partitioned into a
//! MIG profile: [`allocate`]). The result, [`PodDevices`], says for each
//! shape which devices the pod's claims take there, or why they cannot;
//! the planner turns it into demand (`plan::dra`). Pure: objects in,
//! results out. The design is written up in `docs/dra.md`.

pub mod allocate;
pub mod capacity;
pub mod cel;
pub mod check;
pub mod compile;

pub use allocate::Allocation;

use super::pod::{ClaimRef, Pod};
use super::Resources;
use crate::catalog::{mig, AcceleratorKind, Catalog};
use k8s_openapi::api::resource::v1 as dra;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// The DRA objects of a cluster (or of the files `plan` read).
#[derive(Debug, Clone, Default)]
pub struct Objects {
    /// DeviceClasses by name.
    pub classes: BTreeMap<String, dra::DeviceClass>,
    /// ResourceClaims by `namespace/name`.
    pub claims: BTreeMap<String, dra::ResourceClaim>,
    /// ResourceClaimTemplates by `namespace/name`.
    pub templates: BTreeMap<String, dra::ResourceClaimTemplate>,
    /// ResourceSlices by name: the devices the drivers publish on running
    /// nodes.
    pub slices: BTreeMap<String, dra::ResourceSlice>,
}

impl Objects {
    /// Adds a DeviceClass.
    pub fn add_class(&mut self, c: dra::DeviceClass) {
        self.classes
            .insert(c.metadata.name.clone().unwrap_or_default(), c);
    }

    /// Adds a ResourceClaim.
    pub fn add_claim(&mut self, c: dra::ResourceClaim) {
        self.claims.insert(key(&c.metadata), c);
    }

    /// Adds a ResourceClaimTemplate.
    pub fn add_template(&mut self, t: dra::ResourceClaimTemplate) {
        self.templates.insert(key(&t.metadata), t);
    }

    /// Adds a ResourceSlice.
    pub fn add_slice(&mut self, s: dra::ResourceSlice) {
        self.slices
            .insert(s.metadata.name.clone().unwrap_or_default(), s);
    }

    /// Adds every object of `other` (an object of the same name replaced).
    pub fn extend(&mut self, other: Objects) {
        self.classes.extend(other.classes);
        self.claims.extend(other.claims);
        self.templates.extend(other.templates);
        self.slices.extend(other.slices);
    }

    /// Removes the ResourceSlices of `node` (it is gone).
    pub fn remove_slices_of(&mut self, node: &str) {
        self.slices
            .retain(|_, s| s.spec.node_name.as_deref() != Some(node));
    }

    /// The devices the drivers publish on `node` (its ResourceSlices), and
    /// those allocated claims take there, by planner resource
    /// ([`device_resource`]): one unit per device, or per share of a
    /// shareable one ([`device_shares`]; a claim takes the shares that
    /// cover what it consumes, `consumedCapacity`, and free shares the
    /// planner could not use device by device count as taken:
    /// [`capacity::free_for_planning`]).
    pub fn node_devices(&self, node: &str) -> (Resources, Resources) {
        let mut published = Resources::new();
        // (driver, pool, device) -> resource and device, for the node's
        // devices.
        let mut on_node: HashMap<(&str, &str, &str), (String, &dra::Device)> = HashMap::new();
        for s in self
            .slices
            .values()
            .filter(|s| s.spec.node_name.as_deref() == Some(node))
        {
            for d in s.spec.devices.iter().flatten() {
                if let Some(r) = device_resource(&s.spec.driver, d) {
                    published.set(&r, published.get(&r) + i64::from(device_shares(d)));
                    on_node.insert((&s.spec.driver, &s.spec.pool.name, &d.name), (r, d));
                }
            }
        }
        let mut taken = Resources::new();
        let mut seen = BTreeSet::new();
        // Shares allocated claims hold of each shareable device.
        let mut held: HashMap<(&str, &str, &str), u32> = HashMap::new();
        for c in self.claims.values() {
            let results = c
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .and_then(|a| a.devices.as_ref())
                .and_then(|d| d.results.as_ref());
            for r in results.into_iter().flatten() {
                let k = (r.driver.as_str(), r.pool.as_str(), r.device.as_str());
                let Some((res, d)) = on_node.get(&k) else {
                    continue;
                };
                if d.allow_multiple_allocations == Some(true) {
                    *held.entry(k).or_default() += consumed_shares(d, r.consumed_capacity.as_ref());
                } else if seen.insert(k) {
                    taken.set(res, taken.get(res) + 1);
                }
            }
        }
        // Shareable devices: their free shares, by resource and shares per
        // device, counted as the planner may pack them
        // ([`capacity::free_for_planning`]); the rest is taken.
        let mut free: BTreeMap<(&str, u32), Vec<u32>> = BTreeMap::new();
        for (k, (res, d)) in &on_node {
            if d.allow_multiple_allocations == Some(true) {
                let n = device_shares(d);
                let used = held.get(k).copied().unwrap_or(0).min(n);
                free.entry((res.as_str(), n)).or_default().push(n - used);
            }
        }
        for ((res, n), frees) in free {
            let all = n * frees.len() as u32;
            let unusable = all - capacity::free_for_planning(n, &frees);
            taken.set(res, taken.get(res) + i64::from(unusable));
        }
        (published, taken)
    }
}

/// Whether the DRA drivers have published every kind of device a node
/// launched to serve DRA claims is expected to offer: each DRA device
/// resource of `expected` (its allocatable, `<driver>/<kind>` of the
/// NVIDIA, Neuron and EFA drivers) has some device in `published` (its
/// ResourceSlices' devices, [`Objects::node_devices`]). Until then the node
/// is not initialized (`docs/dra.md`).
pub fn drivers_published(expected: &Resources, published: &Resources) -> bool {
    drivers_published_by(expected, published, &DRIVERS)
}

/// The DRA drivers device templates are made for: NVIDIA's, Neuron's and
/// EFA's.
pub const DRIVERS: [&str; 3] = [
    crate::catalog::devices::NVIDIA_DRIVER,
    crate::catalog::devices::NEURON_DRIVER,
    crate::catalog::devices::EFA_DRIVER,
];

/// [`drivers_published`] for the devices of `drivers` only (those the
/// node's pods' claims need).
pub fn drivers_published_by(expected: &Resources, published: &Resources, drivers: &[&str]) -> bool {
    expected
        .iter()
        .filter(|(k, v)| *v > 0 && k.split_once('/').is_some_and(|(d, _)| drivers.contains(&d)))
        .all(|(k, _)| published.get(k) > 0)
}

/// The shares the planner counts a published device in: 1, or for a
/// shareable device (`allowMultipleAllocations`) the steps of its finest
/// request policy (`value / validRange.step`, or `value / min validValues`),
/// as [`crate::catalog::devices::Shared::shares`] of the template it was
/// published from.
pub fn device_shares(d: &dra::Device) -> u32 {
    if d.allow_multiple_allocations != Some(true) {
        return 1;
    }
    let q = |s: &str| crate::api::parse_quantity(s).ok().filter(|v| *v > 0.0);
    d.capacity
        .iter()
        .flatten()
        .filter_map(|(_, c)| {
            let value = q(&c.value.0)?;
            let p = c.request_policy.as_ref()?;
            let step = match (&p.valid_range, &p.valid_values) {
                (Some(r), _) => q(&r.step.as_ref()?.0)?,
                (None, Some(v)) => q(&v.first()?.0)?,
                _ => return None,
            };
            Some((value / step + 1e-9).floor() as u32)
        })
        .max()
        .unwrap_or(1)
        .max(1)
}

/// The shares of shareable device `d` an allocation consuming `consumed`
/// takes: those covering its largest part of any capacity, at least one
/// ([`capacity::shares`]).
fn consumed_shares(
    d: &dra::Device,
    consumed: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> u32 {
    let q = |s: &str| crate::api::parse_quantity(s).ok();
    capacity::charge(
        device_shares(d),
        d.capacity.iter().flatten().filter_map(|(name, c)| {
            let value = q(&c.value.0).filter(|v| *v > 0.0)?;
            Some(q(&consumed?.get(name)?.0)? / value)
        }),
    )
}

/// The planner resource a published device counts in, as its template
/// would name it: `gpu.nvidia.com/gpu` (`gpu.nvidia.com/gpu.shared` when
/// shareable) or `gpu.nvidia.com/mig-<profile>`,
/// `neuron.aws.com/neuron`, `dra.net/efa` (DRANET's other network
/// interfaces are not counted); for another driver `<driver>/<type>` by its
/// `type` attribute, else `<driver>/device`.
pub fn device_resource(driver: &str, d: &dra::Device) -> Option<String> {
    use crate::catalog::devices::{resource_name, EFA_DRIVER, NEURON_DRIVER, NVIDIA_DRIVER};
    let attr = |name: &str| -> Option<&str> {
        let attrs = d.attributes.as_ref()?;
        attrs
            .get(name)
            .or_else(|| attrs.get(&format!("{driver}/{name}")))?
            .string
            .as_deref()
    };
    let shared = d.allow_multiple_allocations == Some(true);
    match driver {
        NVIDIA_DRIVER => match attr("type")? {
            "gpu" if shared => Some(resource_name(driver, "gpu.shared")),
            "gpu" => Some(resource_name(driver, "gpu")),
            "mig" => Some(resource_name(driver, &format!("mig-{}", attr("profile")?))),
            _ => None,
        },
        NEURON_DRIVER => Some(resource_name(driver, "neuron")),
        EFA_DRIVER => (attr("pciDevice")? == "Elastic Fabric Adapter (EFA)")
            .then(|| resource_name(driver, "efa")),
        _ => Some(resource_name(driver, attr("type").unwrap_or("device"))),
    }
}

fn key(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or("default"),
        m.name.as_deref().unwrap_or_default()
    )
}

/// A node shape: an instance type with its GPUs whole (`mig_profile:
/// None`, `shares: None`), partitioned into one MIG profile, or shared in
/// `shares` shares each (an MPS pool's, published with consumable
/// capacity).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShapeKey {
    /// Instance type.
    pub instance_type: String,
    /// MIG profile every GPU is partitioned into, if any.
    pub mig_profile: Option<String>,
    /// Shares of every GPU when they are shared, if they are.
    pub shares: Option<u32>,
}

impl ShapeKey {
    /// A node of `instance_type` whose GPUs are laid out as `layout` says.
    pub fn new(instance_type: &str, layout: crate::catalog::GpuLayout<'_>) -> ShapeKey {
        use crate::catalog::GpuLayout;
        ShapeKey {
            instance_type: instance_type.to_string(),
            mig_profile: match layout {
                GpuLayout::Mig(p) => Some(p.to_string()),
                _ => None,
            },
            shares: match layout {
                GpuLayout::Shared(n) => Some(n),
                _ => None,
            },
        }
    }

    /// How its GPUs are laid out.
    pub fn layout(&self) -> crate::catalog::GpuLayout<'_> {
        use crate::catalog::GpuLayout;
        match (&self.mig_profile, self.shares) {
            (Some(p), _) => GpuLayout::Mig(p),
            (None, Some(n)) => GpuLayout::Shared(n),
            (None, None) => GpuLayout::Whole,
        }
    }
}

impl std::fmt::Display for ShapeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.mig_profile, self.shares) {
            (Some(p), _) => write!(f, "{} (MIG {p})", self.instance_type),
            (None, Some(n)) => write!(f, "{} (shared GPUs, {n} shares)", self.instance_type),
            (None, None) => f.write_str(&self.instance_type),
        }
    }
}

/// For every node shape, the devices a pod's claims take there or why
/// they cannot be allocated there.
pub type Shapes = BTreeMap<ShapeKey, Result<Allocation, String>>;

/// What a pod's DRA claims need, matched against every node shape.
#[derive(Debug, Clone, PartialEq)]
pub struct PodDevices {
    /// How its claims are named in messages.
    pub claims: Vec<String>,
    /// The co-location group: pods that share a ResourceClaim share one
    /// allocation on one node, so they are planned together (the claim's
    /// `namespace/name`; `None` for a pod whose claims are its own).
    pub group: Option<String>,
    /// The node an allocated claim of the pod is on: the pod can run only
    /// there.
    pub pinned: Option<String>,
    /// Its unallocated claims on every shape ([`Shapes`]).
    pub shapes: Arc<Shapes>,
}

impl PodDevices {
    /// Whether some shape can serve the claims.
    pub fn satisfiable(&self) -> bool {
        self.shapes.values().any(Result::is_ok)
    }

    /// `pod` (whose devices these are) as the scheduler binds it to a node
    /// already serving DRA claims: its requests with the devices its claims
    /// take, in the alternative the user put first among those some shape
    /// serves, on the instance types whose devices serve them so. `None`
    /// when no shape serves them or a claim is allocated already (the pod
    /// is bound where its claim is, not placed by its requests).
    pub fn scheduled(&self, pod: &Pod) -> Option<Pod> {
        if self.pinned.is_some() {
            return None;
        }
        let ok = || {
            self.shapes
                .iter()
                .filter_map(|(k, r)| Some((k, r.as_ref().ok()?)))
        };
        let best = ok().map(|(_, a)| (&a.choice, &a.demand)).min()?;
        let mut types: Vec<&str> = ok()
            .filter(|(_, a)| (&a.choice, &a.demand) == best)
            .map(|(k, _)| k.instance_type.as_str())
            .collect();
        types.dedup();
        let mut p = pod.clone();
        p.requests.add(best.1);
        let only = super::Requirement::new(
            crate::api::labels::INSTANCE_TYPE,
            crate::api::Operator::In,
            &types,
        );
        if p.affinity.terms.is_empty() {
            p.affinity.terms.push(vec![only]);
        } else {
            for t in &mut p.affinity.terms {
                t.push(only.clone());
            }
        }
        Some(p)
    }

    /// Why no shape can serve the claims: the distinct reasons, each with
    /// the instance types it rules out, most types first (at most `most`
    /// reasons).
    pub fn why_not(&self, most: usize) -> String {
        why_not(self.shapes.iter().map(|(k, v)| (k, v.as_ref())), most)
    }
}

/// The distinct reasons of `results`, each with the shapes it rules out,
/// most shapes first (at most `most` reasons).
pub fn why_not<'a>(
    results: impl Iterator<Item = (&'a ShapeKey, Result<&'a Allocation, &'a String>)>,
    most: usize,
) -> String {
    reasons(results, most).join("; ")
}

/// [`why_not`] as a list of reasons.
pub fn reasons<'a>(
    results: impl Iterator<Item = (&'a ShapeKey, Result<&'a Allocation, &'a String>)>,
    most: usize,
) -> Vec<String> {
    // The same reason on several types reads once, with the types.
    let mut by_reason: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, r) in results {
        if let Err(e) = r {
            let general = e
                .replace(&format!("{}'s", k.instance_type), "its")
                .replace(&k.instance_type, "it");
            by_reason.entry(general).or_default().push(k.to_string());
        }
    }
    // The nearest misses first: devices that match but too few of them
    // or not together, then a selector, then no device of the class.
    let rank = |r: &str| {
        if r.contains("has no devices of a DRA driver") {
            3
        } else if r.contains("has no device in DeviceClass") {
            2
        } else if r.contains("selects none of") {
            1
        } else {
            0
        }
    };
    let mut reasons: Vec<(String, Vec<String>)> = by_reason.into_iter().collect();
    reasons.sort_by_key(|(r, types)| (rank(r), std::cmp::Reverse(types.len())));
    let n = reasons.len();
    let mut out: Vec<String> = reasons
        .into_iter()
        .take(most)
        .map(|(r, types)| {
            let shown: Vec<&str> = types.iter().take(3).map(String::as_str).collect();
            let more = types.len().saturating_sub(3);
            let on = if more > 0 {
                format!("{} and {more} more", shown.join(", "))
            } else {
                shown.join(", ")
            };
            format!("{r} (on {on})")
        })
        .collect();
    if n > most {
        out.push(format!("and {} more reasons", n - most));
    }
    out
}

/// The node shapes of the catalog: every instance type with its GPUs
/// whole, partitioned into each MIG profile they offer, and shared in each
/// of `shares` (the MPS pools' shares per GPU).
pub fn shapes(catalog: &Catalog, shares: &BTreeSet<u32>) -> Vec<ShapeKey> {
    use crate::catalog::GpuLayout;
    let mut out = Vec::new();
    for it in catalog.instance_types() {
        out.push(ShapeKey::new(&it.name, GpuLayout::Whole));
        if let Some(a) = it
            .accelerator
            .as_ref()
            .filter(|a| a.kind == AcceleratorKind::Gpu)
        {
            for p in mig::profiles_for(&a.model, a.memory_mib_per_device) {
                out.push(ShapeKey::new(&it.name, GpuLayout::Mig(p.name)));
            }
            for n in shares {
                out.push(ShapeKey::new(&it.name, GpuLayout::Shared(*n)));
            }
        }
    }
    out
}

/// Matches pods' claims, keeping what it compiled and evaluated across
/// calls: selectors by expression, outcomes by selector and template, and
/// the shapes of each set of claims (those the last call used: a
/// controller keeps one resolver for its lifetime).
#[derive(Debug, Default)]
pub struct Resolver {
    /// Shares per GPU of the pools that share GPUs (MPS): shapes with GPUs
    /// shared so are matched too.
    gpu_shares: BTreeSet<u32>,
    selectors: cel::Selectors,
    env: cel::Env,
    shapes: HashMap<String, Arc<Shapes>>,
    /// The keys of `shapes` used in this call.
    used: BTreeSet<String>,
}

/// A claim of a pod, found.
struct Found {
    /// How messages name it.
    label: String,
    /// `namespace/name` of a shared ResourceClaim.
    shared: Option<String>,
    /// Where it is allocated, if it is (`Some(None)`: allocated, not to a
    /// node).
    allocated: Option<Option<String>>,
    /// Its spec.
    spec: dra::ResourceClaimSpec,
}

impl Resolver {
    /// A resolver with nothing cached.
    pub fn new() -> Resolver {
        Resolver::default()
    }

    /// Matches claims on shapes with GPUs shared in each of `shares` too:
    /// the shares per GPU of the pools that share GPUs by MPS
    /// ([`crate::api::GpuSharing::dra_gpu_shares`]). Without it only whole
    /// and MIG-partitioned GPUs are matched.
    pub fn share_gpus(&mut self, shares: impl IntoIterator<Item = u32>) -> &mut Resolver {
        self.gpu_shares = shares.into_iter().collect();
        self
    }

    /// Matches the claims of `pods` (those with [`Pod::resource_claims`]):
    /// each gets [`Pod::devices`], or, when its claims cannot be read or no
    /// node shape can serve them, a [`Pod::not_placeable`] reason naming
    /// the claim, request and problem. Pods that name the same
    /// ResourceClaim share one allocation: their claims are matched
    /// together, and they get the same group.
    pub fn attach(&mut self, pods: &mut [Pod], objects: &Objects, catalog: &Catalog) {
        self.used.clear();
        self.attach_pods(pods, objects, catalog);
        let used = std::mem::take(&mut self.used);
        self.shapes.retain(|k, _| used.contains(k));
    }

    fn attach_pods(&mut self, pods: &mut [Pod], objects: &Objects, catalog: &Catalog) {
        let mut found: Vec<Option<Vec<Found>>> = Vec::with_capacity(pods.len());
        for pod in pods.iter_mut() {
            if pod.resource_claims.is_empty() {
                found.push(None);
                continue;
            }
            let ns = pod.name.split('/').next().unwrap_or("default").to_string();
            let mut claims = Vec::new();
            let mut problems = Vec::new();
            for r in &pod.resource_claims {
                match find(&ns, r, objects) {
                    Ok(f) => claims.push(f),
                    Err(p) => problems.push(p),
                }
            }
            if problems.is_empty() {
                found.push(Some(claims));
            } else {
                pod.not_placeable.extend(problems);
                found.push(None);
            }
        }
        // Pods sharing a ResourceClaim: one group, by their first shared
        // claim (union over claims).
        let mut group_of: BTreeMap<String, String> = BTreeMap::new();
        for claims in found.iter().flatten() {
            let shared: Vec<&String> = claims.iter().filter_map(|c| c.shared.as_ref()).collect();
            let Some(first) = shared.first() else {
                continue;
            };
            let root = shared
                .iter()
                .filter_map(|s| group_of.get(*s).cloned())
                .min()
                .unwrap_or_else(|| (*first).clone());
            for s in shared {
                if let Some(old) = group_of.insert(s.clone(), root.clone()) {
                    if old != root {
                        for v in group_of.values_mut().filter(|v| **v == old) {
                            *v = root.clone();
                        }
                    }
                }
            }
        }
        let group = |claims: &[Found]| -> Option<String> {
            claims
                .iter()
                .filter_map(|c| c.shared.as_ref())
                .filter_map(|s| group_of.get(s).cloned())
                .next()
        };
        // The claims of each group, each claim once.
        let mut members: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, claims) in found.iter().enumerate() {
            if let Some(g) = claims.as_deref().and_then(group) {
                members.entry(g).or_default().push(i);
            }
        }
        let mut done: BTreeMap<String, Result<Arc<PodDevices>, Vec<String>>> = BTreeMap::new();
        for i in 0..pods.len() {
            let Some(claims) = &found[i] else { continue };
            let g = group(claims);
            let result = match g.as_ref().and_then(|g| done.get(g)) {
                Some(r) => r.clone(),
                None => {
                    let mut all: Vec<&Found> = Vec::new();
                    let mut seen = BTreeSet::new();
                    let idx = g
                        .as_ref()
                        .and_then(|g| members.get(g).cloned())
                        .unwrap_or_else(|| vec![i]);
                    for j in idx {
                        for c in found[j].iter().flatten() {
                            // A shared claim once, whatever each pod calls it.
                            let id = c.shared.clone().unwrap_or_else(|| c.label.clone());
                            if seen.insert(id) {
                                all.push(c);
                            }
                        }
                    }
                    let r = self.match_claims(&all, g.clone(), objects, catalog);
                    if let Some(g) = &g {
                        done.insert(g.clone(), r.clone());
                    }
                    r
                }
            };
            match result {
                Ok(d) => {
                    if d.pinned.is_none() && !d.satisfiable() {
                        pods[i].not_placeable.push(format!(
                            "no instance type can satisfy its DRA claims: {}",
                            d.why_not(4)
                        ));
                    }
                    pods[i].devices = Some(d);
                }
                Err(problems) => pods[i].not_placeable.extend(problems),
            }
        }
    }

    /// Compiles and allocates one pod's (or group's) claims on every shape.
    fn match_claims(
        &mut self,
        claims: &[&Found],
        group: Option<String>,
        objects: &Objects,
        catalog: &Catalog,
    ) -> Result<Arc<PodDevices>, Vec<String>> {
        let mut pinned = None;
        let mut open: Vec<(String, compile::Claim)> = Vec::new();
        let mut problems = Vec::new();
        let mut identity = vec![
            catalog.revision().to_string(),
            format!("{:?}", self.gpu_shares),
        ];
        for c in claims {
            if let Some(node) = &c.allocated {
                if let Some(n) = node {
                    pinned = Some(n.clone());
                }
                continue;
            }
            match compile::claim(&c.spec, &objects.classes, &mut self.selectors) {
                Ok(compiled) => {
                    identity.push(c.label.clone());
                    identity.push(serde_json::to_string(&c.spec).unwrap_or_default());
                    for alt in compiled.requests.iter().flat_map(|r| &r.alternatives) {
                        if let Some(class) = objects.classes.get(&alt.class) {
                            identity.push(serde_json::to_string(&class.spec).unwrap_or_default());
                        }
                    }
                    open.push((c.label.clone(), compiled));
                }
                Err(ps) => problems.extend(ps.iter().map(|p| format!("{}: {p}", c.label))),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let key = identity.join("\u{0}");
        self.used.insert(key.clone());
        let shapes = match self.shapes.get(&key) {
            Some(s) => s.clone(),
            None => {
                let named: Vec<allocate::Named> = open
                    .iter()
                    .map(|(label, claim)| allocate::Named { label, claim })
                    .collect();
                let mut out = Shapes::new();
                for shape in shapes(catalog, &self.gpu_shares) {
                    let Some(it) = catalog.instance_type(&shape.instance_type) else {
                        continue;
                    };
                    let templates = catalog.device_templates(it, shape.layout());
                    // A MIG shape whose GPUs stay whole is the plain shape;
                    // a shared shape without a shareable device too.
                    if (shape.mig_profile.is_some()
                        && !templates.iter().any(|t| t.kind.starts_with("mig-")))
                        || (shape.shares.is_some() && !templates.iter().any(|t| t.shared.is_some()))
                    {
                        continue;
                    }
                    let r = allocate::allocate(&named, &templates, &it.name, &mut self.env);
                    out.insert(shape, r);
                }
                let s = Arc::new(out);
                self.shapes.insert(key, s.clone());
                s
            }
        };
        Ok(Arc::new(PodDevices {
            claims: claims.iter().map(|c| c.label.clone()).collect(),
            group,
            pinned,
            shapes,
        }))
    }
}

/// Finds the claim a pod's entry names.
fn find(ns: &str, r: &ClaimRef, objects: &Objects) -> Result<Found, String> {
    let of_claim = |name: &str, label: String, shared: bool| -> Result<Found, String> {
        let c = objects
            .claims
            .get(&format!("{ns}/{name}"))
            .ok_or_else(|| format!("{label}: ResourceClaim {ns}/{name} does not exist"))?;
        let allocated = c
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .map(|a| a.node_selector.as_ref().and_then(node_of));
        Ok(Found {
            shared: shared.then(|| format!("{ns}/{name}")),
            allocated,
            spec: c.spec.clone().unwrap_or_default(),
            label,
        })
    };
    match (&r.claim, &r.template) {
        (Some(name), _) => of_claim(
            name,
            format!("claim {} (ResourceClaim {name})", r.name),
            true,
        ),
        (None, Some(t)) => {
            let label = format!("claim {} (template {t})", r.name);
            if let Some(g) = r
                .generated
                .as_deref()
                .filter(|g| objects.claims.contains_key(&format!("{ns}/{g}")))
            {
                return of_claim(g, label, false);
            }
            let tpl = objects
                .templates
                .get(&format!("{ns}/{t}"))
                .ok_or_else(|| format!("{label}: ResourceClaimTemplate {ns}/{t} does not exist"))?;
            Ok(Found {
                // A group's claim: one, made from the template for all of
                // the group's members.
                shared: r.group.as_ref().map(|g| format!("{g}/{}", r.name)),
                label,
                allocated: None,
                spec: tpl
                    .spec
                    .as_ref()
                    .and_then(|s| s.spec.clone())
                    .unwrap_or_default(),
            })
        }
        (None, None) => Err(format!(
            "claim {}: names neither a ResourceClaim nor a ResourceClaimTemplate",
            r.name
        )),
    }
}

/// The node a claim's allocation selects (`metadata.name In [node]`).
fn node_of(s: &k8s_openapi::api::core::v1::NodeSelector) -> Option<String> {
    s.node_selector_terms.iter().find_map(|t| {
        t.match_fields
            .iter()
            .flatten()
            .chain(t.match_expressions.iter().flatten())
            .find(|e| {
                (e.key == "metadata.name" || e.key == crate::api::labels::HOSTNAME)
                    && e.operator == "In"
            })
            .and_then(|e| e.values.as_ref()?.first().cloned())
    })
}

#[cfg(test)]
mod tests {
    use super::compile::tests::classes;
    use super::*;
    use crate::cluster::Resources;

    /// The claims and templates of `yaml`, read as `plan` reads them, with
    /// the compiled test classes.
    fn objects(yaml: &str) -> Objects {
        let mut m = crate::cluster::workloads::Manifests::default();
        m.parse(yaml).unwrap();
        Objects {
            classes: classes(),
            ..m.dra
        }
    }

    fn pod(name: &str, claims: &[(&str, Option<&str>, Option<&str>)]) -> Pod {
        let mut p = Pod::new(name, Resources::new().with("cpu", 1000));
        p.resource_claims = claims
            .iter()
            .map(|(n, c, t)| ClaimRef {
                name: n.to_string(),
                claim: c.map(str::to_string),
                template: t.map(str::to_string),
                generated: None,
                group: None,
            })
            .collect();
        p
    }

    const OBJECTS: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-h100, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors: [{cel: {expression: "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared, namespace: ml}
spec:
  devices:
    requests:
    - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 2}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: taken, namespace: ml}
spec:
  devices:
    requests:
    - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}
status:
  allocation:
    nodeSelector:
      nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [ip-10-0-0-7]}]}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: tpu, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - {name: t, exactly: {deviceClassName: tpu.example.com}}
"#;

    #[test]
    fn a_template_claim_is_the_pods_own_and_is_matched_on_every_shape() {
        let catalog = Catalog::embedded().unwrap();
        let mut pods = vec![pod("ml/a", &[("gpu", None, Some("one-h100"))])];
        Resolver::new().attach(&mut pods, &objects(OBJECTS), &catalog);
        let d = pods[0].devices.as_ref().unwrap();
        assert!(
            pods[0].not_placeable.is_empty(),
            "{:?}",
            pods[0].not_placeable
        );
        assert_eq!(d.group, None);
        let p5 = ShapeKey::new("p5.48xlarge", crate::catalog::GpuLayout::Whole);
        assert_eq!(
            d.shapes[&p5]
                .as_ref()
                .unwrap()
                .demand
                .get("gpu.nvidia.com/gpu"),
            1
        );
        let ok: BTreeSet<&str> = d
            .shapes
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(k, _)| k.instance_type.as_str())
            .collect();
        assert_eq!(ok, BTreeSet::from(["p5.48xlarge", "p5.4xlarge"]));
    }

    #[test]
    fn pods_naming_one_claim_share_it_and_an_allocated_claim_pins_its_pods() {
        let catalog = Catalog::embedded().unwrap();
        let mut pods = vec![
            pod("ml/a", &[("gpu", Some("shared"), None)]),
            pod("ml/b", &[("g", Some("shared"), None)]),
            pod("ml/c", &[("gpu", Some("taken"), None)]),
        ];
        Resolver::new().attach(&mut pods, &objects(OBJECTS), &catalog);
        let (a, b) = (
            pods[0].devices.clone().unwrap(),
            pods[1].devices.clone().unwrap(),
        );
        assert_eq!(a.group.as_deref(), Some("ml/shared"));
        assert!(Arc::ptr_eq(&a, &b), "one allocation for both");
        let p4d = ShapeKey::new("p4d.24xlarge", crate::catalog::GpuLayout::Whole);
        assert_eq!(
            a.shapes[&p4d]
                .as_ref()
                .unwrap()
                .demand
                .get("gpu.nvidia.com/gpu"),
            2
        );
        let c = pods[2].devices.as_ref().unwrap();
        assert_eq!(c.pinned.as_deref(), Some("ip-10-0-0-7"));
        assert!(pods[2].not_placeable.is_empty());
    }

    #[test]
    fn a_pod_groups_template_claim_is_one_allocation_for_all_its_members() {
        let catalog = Catalog::embedded().unwrap();
        let member = |name: &str, group: Option<&str>| {
            let mut p = pod(name, &[("gpu", None, Some("one-h100"))]);
            p.resource_claims[0].group = group.map(str::to_string);
            p
        };
        let mut pods = vec![
            member("ml/a", Some("ml/train")),
            member("ml/b", Some("ml/train")),
            member("ml/c", None),
        ];
        Resolver::new().attach(&mut pods, &objects(OBJECTS), &catalog);
        let [a, b, c] = [0, 1, 2].map(|i| pods[i].devices.clone().unwrap());
        assert!(pods.iter().all(|p| p.not_placeable.is_empty()));
        assert!(Arc::ptr_eq(&a, &b), "one claim for the group's members");
        assert_eq!(a.group.as_deref(), Some("ml/train/gpu"));
        assert_eq!(c.group, None, "a pod outside the group has its own claim");
        let p5 = ShapeKey::new("p5.48xlarge", crate::catalog::GpuLayout::Whole);
        let gpus = |d: &PodDevices| {
            d.shapes[&p5]
                .as_ref()
                .unwrap()
                .demand
                .get("gpu.nvidia.com/gpu")
        };
        assert_eq!(
            (gpus(&a), gpus(&c)),
            (1, 1),
            "the group's claim is counted once"
        );
    }

    #[test]
    fn missing_objects_and_unknown_classes_are_reasons_naming_claim_and_request() {
        let catalog = Catalog::embedded().unwrap();
        let mut pods = vec![
            pod("ml/a", &[("gpu", None, Some("nope"))]),
            pod("ml/b", &[("gpu", Some("gone"), None)]),
            pod("ml/c", &[("x", None, Some("tpu"))]),
        ];
        Resolver::new().attach(&mut pods, &objects(OBJECTS), &catalog);
        assert_eq!(
            pods[0].not_placeable,
            ["claim gpu (template nope): ResourceClaimTemplate ml/nope does not exist"]
        );
        assert_eq!(
            pods[1].not_placeable,
            ["claim gpu (ResourceClaim gone): ResourceClaim ml/gone does not exist"]
        );
        assert_eq!(
            pods[2].not_placeable,
            ["claim x (template tpu): devices.requests[0].exactly.deviceClassName: DeviceClass \"tpu.example.com\" does not exist"]
        );
        assert!(pods.iter().all(|p| p.devices.is_none()));
    }

    /// A one-GPU claim `name` allocated with `result` (a device result).
    fn allocated(name: &str, result: &str) -> String {
        format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}, namespace: ml}}\nspec:\n  devices:\n    requests: [{{name: gpu, exactly: {{deviceClassName: gpu.nvidia.com}}}}]\nstatus:\n  allocation:\n    devices:\n      results: [{result}]\n"
        )
    }

    #[test]
    fn a_nodes_slices_say_what_devices_it_has_and_allocated_claims_what_is_taken() {
        let mut o = objects(&allocated(
            "used",
            "{request: gpu, driver: gpu.nvidia.com, pool: n1, device: gpu-1}",
        ));
        o.add_slice(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n1-gpu"},
                "spec": {
                    "driver": "gpu.nvidia.com", "nodeName": "n1",
                    "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}},
                        {"name": "gpu-1", "attributes": {"type": {"string": "gpu"}}},
                        {"name": "gpu-2-mig-1", "attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.10gb"}}}
                    ]
                }
            }))
            .unwrap(),
        );
        o.add_slice(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n1-net"},
                "spec": {
                    "driver": "dra.net", "nodeName": "n1",
                    "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {"name": "eth0", "attributes": {"dra.net/pciDevice": {"string": "Elastic Network Adapter (ENA)"}}},
                        {"name": "rdmap16s27", "attributes": {"dra.net/pciDevice": {"string": "Elastic Fabric Adapter (EFA)"}}}
                    ]
                }
            }))
            .unwrap(),
        );
        let (published, taken) = o.node_devices("n1");
        assert_eq!(
            published,
            Resources::new()
                .with("gpu.nvidia.com/gpu", 2)
                .with("gpu.nvidia.com/mig-1g.10gb", 1)
                .with("dra.net/efa", 1)
        );
        assert_eq!(taken, Resources::new().with("gpu.nvidia.com/gpu", 1));
        assert!(o.node_devices("n2").0.is_empty());
    }

    #[test]
    fn a_shareable_published_device_counts_in_shares_and_claims_take_what_they_consume() {
        let mut o = objects(&format!(
            "{}---\n{}",
            allocated(
                "quarter",
                "{request: gpu, driver: gpu.nvidia.com, pool: n1, device: gpu-0, shareID: a, consumedCapacity: {memory: 20Gi}}"
            ),
            allocated(
                "half",
                "{request: gpu, driver: gpu.nvidia.com, pool: n1, device: gpu-0, shareID: b, consumedCapacity: {memory: 40Gi}}"
            ),
        ));
        o.add_slice(shared_gpus(&["gpu-0"]));
        let (published, taken) = o.node_devices("n1");
        assert_eq!(
            published,
            Resources::new().with("gpu.nvidia.com/gpu.shared", 4)
        );
        assert_eq!(taken, Resources::new().with("gpu.nvidia.com/gpu.shared", 3));
        // An MPS node is initialized once its shared GPUs are published.
        let expected = Resources::new().with("gpu.nvidia.com/gpu.shared", 4);
        assert!(drivers_published(&expected, &published));
    }

    /// A slice of node `n1` with GPUs of 80Gi named `names`, each shareable
    /// in four shares of 20Gi.
    fn shared_gpus(names: &[&str]) -> dra::ResourceSlice {
        let devices: Vec<serde_json::Value> = names
            .iter()
            .map(|name| {
                serde_json::json!({
                    "name": name,
                    "allowMultipleAllocations": true,
                    "attributes": {"type": {"string": "gpu"}},
                    "capacity": {"memory": {
                        "value": "80Gi",
                        "requestPolicy": {"default": "20Gi", "validRange": {"min": "20Gi", "step": "20Gi"}}
                    }}
                })
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1-gpu"},
            "spec": {
                "driver": "gpu.nvidia.com", "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": devices
            }
        }))
        .unwrap()
    }

    #[test]
    fn free_shares_split_across_gpus_count_only_as_far_as_claims_could_use_them() {
        // Two GPUs of four shares, half of each held: four shares free,
        // but a claim of a whole GPU fits on neither; three count.
        let mut o = objects(&format!(
            "{}---\n{}",
            allocated(
                "a",
                "{request: gpu, driver: gpu.nvidia.com, pool: n1, device: gpu-0, shareID: a, consumedCapacity: {memory: 40Gi}}"
            ),
            allocated(
                "b",
                "{request: gpu, driver: gpu.nvidia.com, pool: n1, device: gpu-1, shareID: b, consumedCapacity: {memory: 40Gi}}"
            ),
        ));
        o.add_slice(shared_gpus(&["gpu-0", "gpu-1"]));
        let (published, taken) = o.node_devices("n1");
        assert_eq!(published.get("gpu.nvidia.com/gpu.shared"), 8);
        assert_eq!(taken.get("gpu.nvidia.com/gpu.shared"), 5);
    }

    #[test]
    fn a_claim_no_type_can_satisfy_is_reported_with_its_reasons() {
        let catalog = Catalog::embedded().unwrap();
        let o = objects(
            r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: huge, namespace: ml}
spec:
  spec:
    devices:
      requests:
      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 16}}
"#,
        );
        let mut pods = vec![pod("ml/a", &[("gpu", None, Some("huge"))])];
        Resolver::new().attach(&mut pods, &o, &catalog);
        let why = &pods[0].not_placeable[0];
        assert!(
            why.starts_with("no instance type can satisfy its DRA claims: claim gpu (template huge) request gpu: asks for 16 devices;"),
            "{why}"
        );
    }

    #[test]
    fn a_pod_binds_with_its_claims_devices_on_the_types_that_serve_them_and_a_pinned_one_does_not()
    {
        let catalog = Catalog::embedded().unwrap();
        let mut pods = vec![
            pod("ml/a", &[("gpu", None, Some("one-h100"))]),
            pod("ml/b", &[("gpu", None, Some("tpu"))]),
            pod("ml/c", &[("gpu", Some("taken"), None)]),
        ];
        Resolver::new().attach(&mut pods, &objects(OBJECTS), &catalog);
        let a = pods[0]
            .devices
            .as_ref()
            .unwrap()
            .scheduled(&pods[0])
            .unwrap();
        assert_eq!(a.requests.get("gpu.nvidia.com/gpu"), 1);
        assert_eq!(a.requests.get("cpu"), 1000);
        let p5 = crate::cluster::requirements::Labels::from_iter([(
            crate::api::labels::INSTANCE_TYPE.to_string(),
            "p5.48xlarge".to_string(),
        )]);
        let p4 = crate::cluster::requirements::Labels::from_iter([(
            crate::api::labels::INSTANCE_TYPE.to_string(),
            "p4d.24xlarge".to_string(),
        )]);
        assert!(a.affinity.matches(&p5));
        assert!(!a.affinity.matches(&p4), "an A100 type is not an H100's");
        // Claims not matched, or allocated already: not bound by requests.
        assert!(pods[1].devices.is_none());
        let c = pods[2].devices.as_ref().unwrap();
        assert!(c.pinned.is_some());
        assert!(c.scheduled(&pods[2]).is_none());
    }

    #[test]
    fn a_node_is_initialized_once_each_driver_it_expects_has_published_devices() {
        let expected = Resources::new()
            .with("cpu", 8000)
            .with("gpu.nvidia.com/gpu", 8)
            .with("dra.net/efa", 32);
        let gpus = Resources::new().with("gpu.nvidia.com/gpu", 8);
        assert!(!drivers_published(&expected, &gpus));
        assert!(drivers_published(
            &expected,
            &gpus.clone().with("dra.net/efa", 32)
        ));
        // A node serving no DRA driver waits for nothing.
        assert!(drivers_published(
            &Resources::new().with("nvidia.com/gpu", 1),
            &Resources::new()
        ));
    }
}
