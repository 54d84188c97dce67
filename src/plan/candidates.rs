//! Candidates: the offerings each NodePool may launch (pool x instance type x
//! zone x capacity type) with the shape, labels and taints their nodes would
//! have, and the explanation of why a pod fits none of them.

use crate::api::labels::{self as l, LabelLookup};
use crate::catalog::{mig, AcceleratorKind, CapacityType, DeviceTemplate, Offering};
use crate::cluster::requirements::untolerated;
use crate::cluster::shape::{self, GpuSharing};
use crate::cluster::{Labels, Pool, Resources, Taint};

use super::classes::Class;
use super::Input;
use std::sync::Arc;

/// The labels [`shape::offering_labels`] sets per offering (the rest come
/// from the instance type).
const OFFERING_LABELS: [&str; 9] = [
    l::REGION,
    l::ZONE_ID,
    l::ZONE,
    l::CAPACITY_TYPE,
    l::KARPENTER_CAPACITY_TYPE,
    l::NODEPOOL,
    l::KARPENTER_NODEPOOL,
    l::CAPACITY_RESERVATION_ID,
    l::CAPACITY_RESERVATION_KIND,
];

/// A candidate node's labels: its instance type's, shared with every
/// offering of the type (`Catalog::type_labels`), and the ones its offering
/// and pool set on top. Kept apart so that a plan over thousands of
/// offerings does not copy each type's labels for every one of them.
#[derive(Debug, Clone)]
pub struct NodeLabels {
    type_labels: Arc<Labels>,
    own: Labels,
}

impl NodeLabels {
    /// Every label, in one map (what the node will carry).
    pub fn to_map(&self) -> Labels {
        let mut m = (*self.type_labels).clone();
        m.extend(self.own.iter().map(|(k, v)| (k.clone(), v.clone())));
        m
    }
}

impl LabelLookup for NodeLabels {
    fn label(&self, key: &str) -> Option<&String> {
        self.own.get(key).or_else(|| self.type_labels.get(key))
    }
}

/// One offering as a given pool would launch it, as far as it is the same
/// in every plan: what [`Offerings`] keeps between plans, and what a
/// [`Candidate`] shares with the plans' other candidates of it.
#[derive(Debug)]
pub struct Offered {
    /// The offering.
    pub offering: Offering,
    /// Node capacity (what NodePool limits count).
    pub capacity: Resources,
    /// What pods can use: allocatable minus the pool's daemonset overhead.
    pub allocatable: Resources,
    /// Labels of the node.
    pub labels: NodeLabels,
    /// Taints of the node.
    pub taints: Vec<Taint>,
    /// The accelerator resource its devices are advertised as, if any.
    pub accelerator_resource: Option<String>,
    /// Units of that resource on one node.
    pub accelerator_units: i64,
}

/// One offering as a given pool would launch it in one plan: the
/// [`Offered`] node (its fields are read through this) and the
/// interruption rate the plan charges for it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Index of the pool in the planner's pool list.
    pub pool: usize,
    /// Pool weight (copied for sorting).
    pub weight: i32,
    /// Hourly interruption rate (0 for on-demand).
    pub rate: f64,
    /// `rate` over the market's mean rate, where the offering has a market
    /// with one: computed once, as the market's mean integrates its hazard
    /// (recomputing it per pod and class dominated pruning).
    market_scale: Option<f64>,
    offered: Arc<Offered>,
}

impl std::ops::Deref for Candidate {
    type Target = Offered;

    fn deref(&self) -> &Offered {
        &self.offered
    }
}

impl Candidate {
    /// USD per hour.
    pub fn price(&self) -> f64 {
        self.offering.price_per_hour
    }

    /// Interruptions a node of this offering expects over its first `hours`
    /// (0 for on-demand).
    /// The pool's calibrated hazard over the node's first `hours` (its
    /// cumulative hazard: heavy-tailed lifetimes make the first hours the
    /// riskiest), scaled by the learned rate over the market's mean rate, so
    /// that what the core learned of the pool moves the level and the
    /// market gives the shape. A constant `rate` without a market.
    pub fn expected_interruptions(&self, hours: f64) -> f64 {
        let hours = hours.max(0.0);
        if self.offering.capacity_type != crate::catalog::CapacityType::Spot {
            return 0.0;
        }
        match (&self.offering.market, self.market_scale) {
            (Some(_), Some(scale)) => self.offering.expected_interruptions(hours) * scale,
            _ => self.rate * hours,
        }
    }
}

/// Every candidate of every pool in the input's region, without offerings
/// known to be out of capacity, with the learned interruption rate where the
/// input has one. The input's [`Offerings`] are used where they were built
/// for its catalog, region and pools; they are built here otherwise.
pub fn candidates(input: &Input) -> Vec<Candidate> {
    match input.offerings.filter(|o| o.serves(input)) {
        Some(offerings) => offerings.candidates(input),
        None => Offerings::new(input.catalog, input.region, input.pools).candidates(input),
    }
}

/// One pool's node of one offering, with its DRA variant where the pool
/// runs a driver for the offering's devices.
#[derive(Debug)]
struct Entry {
    pool: usize,
    plain: Arc<Offered>,
    dra: Option<Arc<Offered>>,
    /// The offering's market's mean rate per hour, where it has one.
    market_mean: Option<f64>,
}

/// What every pool could launch from a catalog in a region, whatever the
/// pods and whatever is out of capacity: built once and kept while the
/// catalog (by revision), the region and the pools stay the same, so that
/// each plan only picks and prices them (building them anew per plan was
/// a third of a long simulation's time).
#[derive(Debug)]
pub struct Offerings {
    catalog: u64,
    region: String,
    pools: Vec<Pool>,
    entries: Vec<Entry>,
}

impl Offerings {
    /// Every pool's nodes of every offering of `catalog` in `region`.
    pub fn new(catalog: &crate::catalog::Catalog, region: &str, pools: &[Pool]) -> Offerings {
        let mut entries = Vec::new();
        // Each zone is named once.
        let mut zone_names: std::collections::HashMap<&str, String> = Default::default();
        let mut templates: std::collections::HashMap<
            (&str, crate::catalog::GpuLayout<'_>),
            Vec<DeviceTemplate>,
        > = Default::default();
        for (pi, pool) in pools.iter().enumerate() {
            // Requirements on labels only the instance type sets are checked
            // once per type, before any offering's labels are built: most
            // offerings of a region fail a pool's family or GPU requirement.
            let type_level: Vec<&crate::api::Requirement> = pool
                .requirements
                .iter()
                .filter(|r| {
                    !OFFERING_LABELS.contains(&r.key.as_str()) && !pool.labels.contains_key(&r.key)
                })
                .collect();
            let mut type_ok: std::collections::HashMap<&str, bool> = Default::default();
            for o in catalog.offerings_in(region) {
                if !pool.capacity_types.contains(&o.capacity_type) {
                    continue;
                }
                if o.capacity_type == CapacityType::Spot {
                    if let Some(max) = pool.max_interruption_bucket {
                        if o.interruption_bucket.is_none_or(|b| b > max) {
                            continue;
                        }
                    }
                }
                let Some(it) = catalog.instance_type(&o.instance_type) else {
                    continue;
                };
                // A MIG pool launches only GPUs that can be split into its profile.
                if let GpuSharing::Mig { profile } = &pool.sharing {
                    let supported = it.accelerator.as_ref().is_some_and(|a| {
                        mig::instances_per_gpu(&a.model, a.memory_mib_per_device, profile).is_some()
                    });
                    if !supported {
                        continue;
                    }
                }
                // Each instance type's labels come from the catalog,
                // computed once.
                let Some(base) = catalog.type_labels(&it.name) else {
                    continue;
                };
                let ok = *type_ok
                    .entry(it.name.as_str())
                    .or_insert_with(|| type_level.iter().all(|r| r.matches(base.as_ref())));
                if !ok {
                    continue;
                }
                let zone_name = zone_names
                    .entry(o.zone_id.as_str())
                    .or_insert_with(|| catalog.zone_name(region, &o.zone_id));
                let mut own = shape::offering_labels(o, zone_name, &pool.name);
                for (k, v) in &pool.labels {
                    own.insert(k.clone(), v.clone());
                }
                let labels = NodeLabels {
                    type_labels: base.clone(),
                    own,
                };
                if !pool.requirements.iter().all(|r| r.matches(&labels)) {
                    continue;
                }
                let capacity = shape::capacity(it, &pool.sharing);
                let allocatable =
                    shape::allocatable(it, &pool.sharing).minus(&pool.daemonset_overhead);
                let accelerator_resource = accelerator_resource(it, &pool.sharing, &capacity);
                let accelerator_units = accelerator_resource
                    .as_deref()
                    .map(|r| capacity.get(r))
                    .unwrap_or(0);
                let plain = Offered {
                    offering: o.clone(),
                    capacity,
                    allocatable,
                    labels,
                    taints: pool.taints.clone(),
                    accelerator_resource,
                    accelerator_units,
                };
                let layout = pool.gpu_layout();
                let served: Vec<DeviceTemplate> = templates
                    .entry((it.name.as_str(), layout))
                    .or_insert_with(|| catalog.device_templates(it, layout))
                    .iter()
                    .filter(|t| pool.runs_dra_driver(&t.driver))
                    .cloned()
                    .collect();
                let dra = (!served.is_empty()).then(|| Arc::new(serving_dra(&plain, &served)));
                entries.push(Entry {
                    pool: pi,
                    market_mean: o
                        .market
                        .as_ref()
                        .map(|m| m.mean_rate_per_hour())
                        .filter(|mean| *mean > 0.0),
                    plain: Arc::new(plain),
                    dra,
                });
            }
        }
        Offerings {
            catalog: catalog.revision(),
            region: region.to_string(),
            pools: pools.to_vec(),
            entries,
        }
    }

    /// Whether these are the offerings of `input`'s catalog, region and
    /// pools.
    pub fn serves(&self, input: &Input) -> bool {
        self.are_of(input.catalog, input.region, input.pools)
    }

    /// Whether these are the offerings of `pools` in `catalog`'s `region`.
    pub fn are_of(&self, catalog: &crate::catalog::Catalog, region: &str, pools: &[Pool]) -> bool {
        self.catalog == catalog.revision() && self.region == region && self.pools == pools
    }

    /// The input's candidates: every entry whose offering is not out of
    /// capacity, priced at the input's learned rate. A node serving DRA
    /// claims is offered only when a pod has some, and the device
    /// plugin's node of the same offering beside it only when a pod asks
    /// for the plugin's devices (for any other pod the two are alike).
    fn candidates(&self, input: &Input) -> Vec<Candidate> {
        let dra = input.pods.iter().any(|p| p.devices.is_some());
        let plugin_devices: std::collections::BTreeSet<&str> = input
            .pods
            .iter()
            .flat_map(|p| p.requests.iter().map(|(k, _)| k))
            .filter(|k| {
                [
                    crate::catalog::devices::NVIDIA_DRIVER,
                    crate::catalog::devices::NEURON_DRIVER,
                    crate::catalog::devices::EFA_DRIVER,
                ]
                .iter()
                .any(|d| shape::plugin_resources_of(d, k))
            })
            .collect();
        let mut out = Vec::new();
        for e in &self.entries {
            let o = &e.plain.offering;
            if (input.unavailable)(o) {
                continue;
            }
            let rate = input
                .learned_rate
                .and_then(|f| f(o))
                .unwrap_or_else(|| o.interruption_rate_per_hour());
            let candidate = |offered: &Arc<Offered>| Candidate {
                pool: e.pool,
                weight: input.pools[e.pool].weight,
                rate,
                market_scale: e.market_mean.map(|mean| rate / mean),
                offered: offered.clone(),
            };
            let variant = e.dra.as_ref().filter(|_| dra);
            // The plain node first: ties go to it.
            let plain_needed = variant.is_none_or(|v| {
                plugin_devices
                    .iter()
                    .any(|r| e.plain.allocatable.get(r) > 0 && v.allocatable.get(r) == 0)
            });
            if plain_needed {
                out.push(candidate(&e.plain));
            }
            out.extend(variant.map(candidate));
        }
        out
    }
}

/// The same offering launched to serve DRA claims: its devices offered
/// through the DRA drivers of `served` instead of the device plugin
/// ([`shape::with_dra_devices`]), labelled `quartermaster.dev/dra`. Its
/// capacity keeps the plugin's counts too, so that pool limits on
/// `nvidia.com/gpu` count its GPUs.
fn serving_dra(c: &Offered, served: &[DeviceTemplate]) -> Offered {
    let mut labels = c.labels.clone();
    labels.own.insert(l::DRA.to_string(), "true".to_string());
    let allocatable = shape::with_dra_devices(&c.allocatable, served);
    let mut capacity = c.capacity.clone();
    for t in served {
        capacity.set(&t.resource(), t.units());
    }
    // The accelerator its idle devices are charged in: the GPU or Neuron
    // devices, not the EFA interfaces.
    let accelerator = served
        .iter()
        .find(|t| t.driver != crate::catalog::devices::EFA_DRIVER);
    Offered {
        offering: c.offering.clone(),
        allocatable,
        capacity,
        labels,
        taints: c.taints.clone(),
        accelerator_resource: accelerator.map(DeviceTemplate::resource),
        accelerator_units: accelerator.map_or(0, DeviceTemplate::units),
    }
}

fn accelerator_resource(
    it: &crate::catalog::InstanceType,
    sharing: &GpuSharing,
    capacity: &Resources,
) -> Option<String> {
    let acc = it.accelerator.as_ref()?;
    match acc.kind {
        AcceleratorKind::Neuron => Some(l::RESOURCE_NEURON.to_string()),
        AcceleratorKind::Gpu => {
            if let GpuSharing::Mig { profile } = sharing {
                let mig = format!("{}{profile}", l::RESOURCE_MIG_PREFIX);
                if capacity.get(&mig) > 0 {
                    return Some(mig);
                }
            }
            [l::RESOURCE_GPU_SHARED, l::RESOURCE_GPU]
                .into_iter()
                .find(|r| capacity.get(r) > 0)
                .map(str::to_string)
        }
    }
}

/// The candidates that offer each resource, so that a class asking for an
/// accelerator only scans the nodes that have one: CPU-only types are most
/// of a region's offerings (2,012 candidates of the benchmark's pools in
/// us-east-1, 872 of them with an accelerator).
#[derive(Debug, Clone)]
pub struct ByResource {
    all: Vec<usize>,
    /// By resource: the most any candidate offers, and the candidates
    /// offering some.
    offering: crate::cluster::FastMap<String, (i64, Vec<usize>)>,
}

impl ByResource {
    /// The index of `cands`. Built on every plan: a resource's name is
    /// copied once, not once per candidate offering it.
    pub fn new(cands: &[Candidate]) -> ByResource {
        let mut offering: crate::cluster::FastMap<String, (i64, Vec<usize>)> = Default::default();
        for (i, c) in cands.iter().enumerate() {
            for (r, amount) in c.allocatable.iter() {
                if amount > 0 {
                    match offering.get_mut(r) {
                        Some((most, list)) => {
                            *most = (*most).max(amount);
                            list.push(i);
                        }
                        None => {
                            offering.insert(r.to_string(), (amount, vec![i]));
                        }
                    }
                }
            }
        }
        ByResource {
            all: (0..cands.len()).collect(),
            offering,
        }
    }

    /// Indices, in order, of the candidates a pod requesting `requests`
    /// may fit: those offering the requested resource fewest candidates
    /// offer, all without requests; none when no candidate offers one, or
    /// none offers as much as asked (a pod too big for any node is not
    /// tried against each).
    pub fn may_fit(&self, requests: &Resources) -> &[usize] {
        let mut best: &[usize] = &self.all;
        for (r, amount) in requests.iter() {
            if amount <= 0 {
                continue;
            }
            match self.offering.get(r) {
                Some((most, _)) if amount > *most => return &[],
                Some((_, list)) if list.len() < best.len() => best = list,
                Some(_) => {}
                None => return &[],
            }
        }
        best
    }
}

/// How many pods of `class` one fresh node of `c` takes (0: incompatible).
pub fn pods_per_node(class: &Class, c: &Candidate) -> u32 {
    if !super::pack::compatible(&class.pod, &c.labels, &c.taints) {
        return 0;
    }
    pods_per_taking_node(class, c)
}

/// [`pods_per_node`] for a candidate whose taints and labels let the
/// class's pods on ([`super::pack::compatible`]): a caller asking that of
/// many classes may keep the answer per tolerations and affinity.
pub fn pods_per_taking_node(class: &Class, c: &Candidate) -> u32 {
    let n = class.pod.requests.copies_in(&c.allocatable);
    let n = n.min(class.pod.per_node_max.unwrap_or(u32::MAX));
    // A pod with a deadline stays off spot once its slack no longer covers
    // what spot may still cost it.
    if n > 0 && c.offering.capacity_type == crate::catalog::CapacityType::Spot {
        if let Some(slack) = class.slack_hours {
            if slack < super::risk::spot_delay_hours(&class.exposure, c, n) {
                return 0;
            }
        }
    }
    n
}

/// Why no candidate takes pods of `class`: the filter that removed the last
/// candidates, in the order tolerations, requirements, size.
pub fn explain_unschedulable(class: &Class, all: &[Candidate], pools: &[Pool]) -> String {
    if all.is_empty() {
        let reserved_only = pools.iter().any(|p| {
            p.capacity_types
                .iter()
                .all(|c| *c == CapacityType::Reserved)
        });
        if reserved_only {
            return "no NodePool offers any instance type in this region: a pool that allows only \
                    `reserved` capacity has no usable capacity reservation (check the node class's \
                    capacityReservationSelectorTerms and the reservations' windows and counts)"
                .into();
        }
        // Name each pool's requirements: they are what left nothing (a
        // pool's own, or those its cloud added, e.g. the architectures and
        // accelerators its EC2NodeClass has images for).
        let required: Vec<String> = pools
            .iter()
            .filter(|p| !p.requirements.is_empty())
            .map(|p| {
                let reqs: Vec<String> = p.requirements.iter().map(ToString::to_string).collect();
                format!("{}: {}", p.name, reqs.join(", "))
            })
            .collect();
        if required.is_empty() {
            return "no NodePool offers any instance type in this region".into();
        }
        return format!(
            "no NodePool offers any instance type in this region that meets its requirements ({})",
            required.join("; ")
        );
    }
    let tolerated: Vec<&Candidate> = all
        .iter()
        .filter(|c| untolerated(&c.taints, &class.pod.tolerations).is_none())
        .collect();
    if tolerated.is_empty() {
        let mut msgs: Vec<String> = all
            .iter()
            .filter_map(|c| {
                untolerated(&c.taints, &class.pod.tolerations)
                    .map(|t| format!("{} ({})", t, pools[c.pool].name))
            })
            .collect();
        msgs.sort();
        msgs.dedup();
        return format!(
            "does not tolerate taint {} (NodePool in parentheses); a toleration for it would let the pod use that pool",
            msgs.join(", ")
        );
    }
    let mut remaining = tolerated;
    if !class.pod.affinity.terms.is_empty() {
        let mut best_term_failure: Option<String> = None;
        let mut any_term_survives: Vec<&Candidate> = Vec::new();
        for term in &class.pod.affinity.terms {
            let mut left = remaining.clone();
            let mut failure = None;
            for req in term {
                let before = left.len();
                left.retain(|c| req.matches(&c.labels));
                if left.is_empty() {
                    failure = Some(format!(
                        "requirement {req} removed the last {before} candidate offerings"
                    ));
                    break;
                }
            }
            match failure {
                Some(f) => {
                    best_term_failure.get_or_insert(f);
                }
                None => any_term_survives.extend(left),
            }
        }
        if any_term_survives.is_empty() {
            return best_term_failure.unwrap_or_else(|| "no node affinity term matches".into());
        }
        remaining = any_term_survives;
    }
    // Nothing is large enough: name a resource no node has enough of, with
    // the most any node has.
    for (r, need) in class.pod.requests.iter() {
        let most = remaining
            .iter()
            .map(|c| c.allocatable.get(r))
            .max()
            .unwrap_or(0);
        if need > most && r == l::RESOURCE_EFA && most == 0 {
            return format!(
                "requests {need} {r} (Elastic Fabric Adapter), but no instance type a compatible \
                 pool may launch supports EFA; allow an EFA type (p4d, p5, trn1, ...) in the pool"
            );
        }
        if need > most {
            return format!(
                "needs {}; the largest node any compatible pool may launch has {}",
                amount(r, need, true),
                amount(r, most, false)
            );
        }
    }
    // Each resource fits somewhere, but not all on one node.
    let mut shortfalls: Vec<String> = remaining
        .iter()
        .filter_map(|c| class.pod.requests.first_shortfall(&c.allocatable))
        .map(str::to_string)
        .collect();
    shortfalls.sort();
    shortfalls.dedup();
    if shortfalls.is_empty() {
        return "no compatible offering has room".into();
    }
    format!(
        "requests ({}) fit no single node: each of the {} compatible offerings is short of one of {}",
        class.pod.requests,
        remaining.len(),
        shortfalls.join(", ")
    )
}

/// `amount` of resource `r` for a message: millicores, MiB or units, with
/// the resource's name when `named`.
fn amount(r: &str, amount: i64, named: bool) -> String {
    use crate::cluster::resources::{CPU, MEMORY};
    let value = match r {
        CPU => format!("{amount}m"),
        MEMORY => format!("{}Mi", amount >> 20),
        _ => amount.to_string(),
    };
    if named {
        format!("{value} {r}")
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Catalog, InstanceType, PriceSource};
    use crate::cluster::resources::CPU;
    use crate::cluster::Pod;

    fn catalog(efa: bool) -> Catalog {
        let it = InstanceType {
            efa_supported: efa,
            max_efa_interfaces: if efa { 4 } else { 0 },
            ..InstanceType::bare("g5.48xlarge", 192, 786_432).with_gpus("A10G", 8, 24_576)
        };
        let o = Offering {
            instance_type: it.name.clone(),
            region: "us-east-1".into(),
            zone_id: "use1-az1".into(),
            capacity_type: CapacityType::OnDemand,
            price_per_hour: 16.0,
            price_source: PriceSource::OnDemand,
            interruption_bucket: None,
            market: None,
            reservation: None,
        };
        Catalog::from_parts([it], [o])
    }

    fn input<'a>(catalog: &'a Catalog, pools: &'a [Pool]) -> Input<'a> {
        Input::offline(catalog, "us-east-1", pools, &[])
    }

    fn cands(catalog: &Catalog, pools: &[Pool], pod: &Pod) -> Vec<Candidate> {
        candidates(&Input {
            pods: std::slice::from_ref(pod),
            ..input(catalog, pools)
        })
    }

    fn reason(catalog: &Catalog, pools: &[Pool], pod: &Pod) -> String {
        let all = cands(catalog, pools, pod);
        explain_unschedulable(&Class::of(pod, 0), &all, pools)
    }

    #[test]
    fn an_efa_request_no_pool_type_can_meet_is_a_clear_reason_and_an_efa_type_meets_it() {
        let pod = Pod::new(
            "ml/allreduce",
            Resources::new().with(CPU, 1000).with(l::RESOURCE_EFA, 1),
        );
        let pools = [Pool::new("gpu")];
        let why = reason(&catalog(false), &pools, &pod);
        assert!(why.contains("Elastic Fabric Adapter"), "{why}");
        let all = cands(&catalog(true), &pools, &pod);
        assert_eq!(pods_per_node(&Class::of(&pod, 0), &all[0]), 4);
    }

    #[test]
    fn a_reserved_only_pool_without_a_usable_reservation_names_the_selector() {
        let pod = Pod::new("ml/p", Resources::new().with(CPU, 1000));
        let mut pool = Pool::new("blocks");
        pool.capacity_types = vec![CapacityType::Reserved];
        let why = reason(&catalog(true), &[pool], &pod);
        assert!(why.contains("capacityReservationSelectorTerms"), "{why}");
    }

    #[test]
    fn a_gpu_pod_scans_only_candidates_with_gpus_and_a_cpu_pod_scans_all() {
        let catalog = Catalog::embedded().unwrap();
        let pools = [Pool::new("general")];
        let cands = candidates(&input(&catalog, &pools));
        let index = ByResource::new(&cands);
        let gpu = Resources::new().with(CPU, 1000).with(l::RESOURCE_GPU, 1);
        let scanned = index.may_fit(&gpu);
        let with_gpus: Vec<usize> = (0..cands.len())
            .filter(|&i| cands[i].allocatable.get(l::RESOURCE_GPU) > 0)
            .collect();
        assert_eq!(scanned, with_gpus.as_slice());
        assert!(with_gpus.len() < cands.len() / 2, "CPU types are most");
        let cpu = Resources::new().with(CPU, 1000);
        assert_eq!(index.may_fit(&cpu).len(), cands.len());
        let unknown = Resources::new().with("example.com/fpga", 1);
        assert!(index.may_fit(&unknown).is_empty());
        // More CPU than the largest candidate has: none is tried; as much
        // as it has: it is among those tried.
        let most = cands.iter().map(|c| c.allocatable.get(CPU)).max().unwrap();
        assert!(index
            .may_fit(&Resources::new().with(CPU, most + 1))
            .is_empty());
        let largest = index.may_fit(&Resources::new().with(CPU, most));
        assert!(largest
            .iter()
            .any(|&i| cands[i].allocatable.get(CPU) == most));
    }

    #[test]
    fn offerings_kept_between_plans_give_what_a_plan_builds_and_serve_only_their_own_pools() {
        let catalog = Catalog::embedded().unwrap();
        let pools = [Pool::new("any")];
        let kept = Offerings::new(&catalog, "us-east-1", &pools);
        let closed = |o: &Offering| o.zone_id == "use1-az1";
        let learned = |o: &Offering| (o.instance_type == "g5.xlarge").then_some(0.5);
        let plan = |pools: &[Pool], offerings| {
            let input = Input {
                unavailable: &closed,
                learned_rate: Some(&learned),
                offerings,
                ..input(&catalog, pools)
            };
            let key = |c: &Candidate| {
                (
                    c.pool,
                    c.weight,
                    c.offering.instance_type.clone(),
                    c.offering.zone_id.clone(),
                    c.offering.capacity_type,
                    c.rate.to_bits(),
                    c.expected_interruptions(2.0).to_bits(),
                    format!("{:?} {:?}", c.allocatable, c.labels.to_map()),
                )
            };
            candidates(&input).iter().map(key).collect::<Vec<_>>()
        };
        let built = plan(&pools, None);
        assert!(built.len() > 100);
        assert!(
            built.iter().all(|k| k.3 != "use1-az1"),
            "closed offerings stay out"
        );
        assert!(built
            .iter()
            .any(|k| k.2 == "g5.xlarge" && k.5 == 0.5f64.to_bits()));
        assert_eq!(plan(&pools, Some(&kept)), built);
        // Another pool set (a family requirement, a weight): the kept
        // offerings are not theirs, and the plan builds its own.
        let mut g5 = Pool::new("g5");
        g5.weight = 7;
        g5.requirements = vec![crate::api::Requirement::new(
            l::INSTANCE_FAMILY,
            crate::api::Operator::In,
            &["g5"],
        )];
        let other = [g5];
        assert!(!kept.are_of(&catalog, "us-east-1", &other));
        let theirs = plan(&other, Some(&kept));
        assert!(!theirs.is_empty());
        assert!(theirs.iter().all(|k| k.1 == 7 && k.2.starts_with("g5.")));
        assert_eq!(theirs, plan(&other, None));
    }
}
