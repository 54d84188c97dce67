//! The optimality oracle: random small planning instances drawn from the
//! real catalog, solved by exhaustive search under the planner's own cost
//! (`plan::cost::node_cost`: price + expected interruption cost + idle
//! charge) and feasibility rules (compatibility and room per node, hostname
//! anti-affinity, gangs whole in one zone, zone spread, NodePool limits, the
//! spot pool share), but not its search.
//!
//! A solution is a list of nodes, each a candidate and how many pods of each
//! class it holds; the best one leaves the fewest pods unplaced, then costs
//! least. The search enumerates the unplaced pods, then every multiset
//! partition of the rest into nodes, then the candidates of each node by
//! branch and bound (a node's cheapest feasible candidate bounds it).

use quartermaster::api::labels as l;
use quartermaster::catalog::{CapacityType, Catalog, InstanceType, Offering};
use quartermaster::cluster::resources::{CPU, MEMORY};
use quartermaster::cluster::{
    Effect, GpuSharing, GroupRef, Operator, Pod, Pool, Requirement, Resources, Taint, Toleration,
    ZoneSpread,
};
use quartermaster::plan::candidates::{self, Candidate};
use quartermaster::plan::classes::{self, Class};
use quartermaster::plan::{cost, dra, limits, pack, Input, Options, Plan};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet, HashMap};

const GIB: i64 = 1 << 30;
/// The region instances are drawn from.
pub const REGION: &str = "us-east-1";

/// One planning problem: a catalog of a few offerings, pools, pods.
#[derive(Debug, Clone)]
pub struct Instance {
    /// The offerings (and their instance types).
    pub catalog: Catalog,
    /// NodePools, all of one weight.
    pub pools: Vec<Pool>,
    /// Pending pods.
    pub pods: Vec<Pod>,
}

impl Instance {
    /// The planner's input for this instance.
    pub fn input(&self) -> Input<'_> {
        Input::offline(&self.catalog, REGION, &self.pools, &self.pods)
    }
}

/// What a solution achieves: pods left unplaced, then the objective.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Value {
    /// Pods with no node (pods sharing a DRA claim count once).
    pub unplaced: usize,
    /// Price + expected interruption cost + idle charge, USD per hour.
    pub cost: f64,
}

impl Value {
    /// Whether `self` is worse than `other` by more than `rel` of the cost.
    pub fn worse_than(&self, other: &Value, rel: f64) -> bool {
        self.unplaced > other.unplaced
            || (self.unplaced == other.unplaced && self.cost > other.cost * (1.0 + rel) + 1e-6)
    }
}

/// The kinds of pool an instance may have.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Gpu,
    Mig,
    TimeSliced,
    Cpu,
}

fn pool_of(kind: Kind, name: &str) -> Pool {
    let mut p = Pool::new(name);
    let exists = |key: &str| Requirement {
        key: key.into(),
        operator: Operator::Exists,
        values: vec![],
    };
    match kind {
        Kind::Gpu | Kind::TimeSliced | Kind::Mig => {
            p.taints
                .push(Taint::new(l::TAINT_GPU, "", Effect::NoSchedule));
            p.requirements.push(exists(l::GPU_COUNT));
        }
        Kind::Cpu => {}
    }
    match kind {
        Kind::Mig => {
            p.sharing = GpuSharing::Mig {
                profile: "1g.10gb".into(),
            }
        }
        Kind::TimeSliced => p.sharing = GpuSharing::TimeSlicing { replicas: 4 },
        _ => {}
    }
    p
}

/// Instance types a pool of `kind` can launch.
fn types_for(catalog: &Catalog, kind: Kind) -> Vec<&InstanceType> {
    catalog
        .instance_types_in(REGION)
        .into_iter()
        .filter(|t| {
            let nvidia = t
                .accelerator
                .as_ref()
                .is_some_and(|a| a.manufacturer == "NVIDIA");
            match kind {
                Kind::Gpu | Kind::TimeSliced => nvidia,
                Kind::Mig => t.accelerator.as_ref().is_some_and(|a| {
                    quartermaster::catalog::mig::instances_per_gpu(
                        &a.model,
                        a.memory_mib_per_device,
                        "1g.10gb",
                    )
                    .is_some()
                }),
                Kind::Cpu => {
                    t.accelerator.is_none()
                        && ["m5", "m6i", "c5", "c6i", "r5", "m7i"].contains(&t.family.as_str())
                        && t.vcpu <= 32
                }
            }
        })
        .collect()
}

/// What instances are drawn from: the catalog's instance types per kind of
/// pool, and their offerings in [`REGION`] (looked up once, not per
/// instance).
pub struct Source {
    types: Vec<(Kind, Vec<InstanceType>)>,
    offerings: HashMap<String, Vec<Offering>>,
}

impl Source {
    /// The source for `full`.
    pub fn new(full: &Catalog) -> Source {
        let mut offerings: HashMap<String, Vec<Offering>> = HashMap::new();
        for o in full.offerings_in(REGION) {
            offerings
                .entry(o.instance_type.clone())
                .or_default()
                .push(o.clone());
        }
        let types = [Kind::Gpu, Kind::Mig, Kind::TimeSliced, Kind::Cpu]
            .into_iter()
            .map(|k| (k, types_for(full, k).into_iter().cloned().collect()))
            .collect();
        Source { types, offerings }
    }
}

/// A random instance from `seed`: one to three pools of one weight, up to
/// twelve offerings of two to four instance types, up to eight pods in up to
/// three classes, with gangs, zone spread, anti-affinity, limits and spot
/// pool shares now and then.
pub fn instance(source: &Source, seed: u64) -> Instance {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let kinds = [Kind::Gpu, Kind::Mig, Kind::TimeSliced, Kind::Cpu];
    let n_pools = rng.random_range(1..=3);
    let mut chosen: Vec<Kind> = Vec::new();
    while chosen.len() < n_pools {
        let k = kinds[rng.random_range(0..kinds.len())];
        if !chosen
            .iter()
            .any(|c| std::mem::discriminant(c) == std::mem::discriminant(&k))
        {
            chosen.push(k);
        }
    }
    let mut pools: Vec<Pool> = chosen
        .iter()
        .enumerate()
        .map(|(i, k)| pool_of(*k, &format!("p{i}-{k:?}").to_lowercase()))
        .collect();
    // Offerings: a few instance types per pool, a random subset of their
    // offerings, twelve at most in all.
    let mut offerings: Vec<Offering> = Vec::new();
    let mut types: BTreeMap<String, InstanceType> = BTreeMap::new();
    for k in &chosen {
        let mut ts: Vec<&InstanceType> = source
            .types
            .iter()
            .find(|(kind, _)| std::mem::discriminant(kind) == std::mem::discriminant(k))
            .map(|(_, ts)| ts.iter().collect())
            .unwrap_or_default();
        ts.shuffle(&mut rng);
        for t in ts.into_iter().take(rng.random_range(1..=3)) {
            let mut os: Vec<&Offering> = source.offerings[&t.name].iter().collect();
            os.shuffle(&mut rng);
            let take = rng.random_range(1..=os.len().clamp(1, 5));
            offerings.extend(os.into_iter().take(take).cloned());
            types.insert(t.name.clone(), t.clone());
        }
    }
    offerings.shuffle(&mut rng);
    offerings.truncate(12);
    // On-demand prices stay in the catalog for spot discounts only when
    // their offering was drawn: both views price alike, which is all the
    // oracle needs.
    let mut catalog = Catalog::from_parts(types.clone().into_values(), offerings.clone());
    // At most twelve candidates (offerings as the pools launch them), so
    // that the exhaustive search stays quick.
    while offerings.len() > 1 {
        let input = Input::offline(&catalog, REGION, &pools, &[]);
        if candidates::candidates(&input).len() <= 12 {
            break;
        }
        offerings.pop();
        catalog = Catalog::from_parts(types.clone().into_values(), offerings.clone());
    }

    for p in &mut pools {
        if rng.random_bool(0.25) {
            p.limits.nodes = Some(rng.random_range(1..=4));
        }
        if rng.random_bool(0.15) {
            p.limits.cost_per_hour = Some(rng.random_range(2..=120) as f64);
        }
        if rng.random_bool(0.15) && !matches!(p.sharing, GpuSharing::Mig { .. }) {
            p.limits
                .resources
                .set(l::RESOURCE_GPU, rng.random_range(1..=16));
        }
        if rng.random_bool(0.2) {
            p.max_spot_pool_share = Some(0.5);
        }
        if rng.random_bool(0.3) {
            p.risk_aversion = [0.0, 0.5, 3.0][rng.random_range(0..3)];
        }
    }

    let mut pods = Vec::new();
    let n_classes = rng.random_range(1..=3);
    let mut left: usize = rng.random_range(1..=8);
    for c in 0..n_classes {
        if left == 0 {
            break;
        }
        let count = if c + 1 == n_classes {
            left
        } else {
            rng.random_range(1..=left)
        };
        left -= count;
        let kind = chosen[rng.random_range(0..chosen.len())];
        let mut p = match kind {
            Kind::Gpu => {
                let g = [1, 1, 2, 4, 8][rng.random_range(0..5)];
                Pod::new(
                    "",
                    Resources::new()
                        .with(CPU, g * rng.random_range(1..=6) * 1000)
                        .with(MEMORY, g * rng.random_range(4..=48) * GIB)
                        .with(l::RESOURCE_GPU, g),
                )
            }
            Kind::TimeSliced => Pod::new(
                "",
                Resources::new()
                    .with(CPU, rng.random_range(1..=4) * 1000)
                    .with(MEMORY, rng.random_range(2..=16) * GIB)
                    .with(l::RESOURCE_GPU, 1),
            ),
            Kind::Mig => Pod::new(
                "",
                Resources::new()
                    .with(CPU, rng.random_range(1..=4) * 1000)
                    .with(MEMORY, rng.random_range(2..=16) * GIB)
                    .with("nvidia.com/mig-1g.10gb", rng.random_range(1..=2)),
            ),
            Kind::Cpu => Pod::new(
                "",
                Resources::new()
                    .with(CPU, rng.random_range(1..=16) * 500)
                    .with(MEMORY, rng.random_range(1..=32) * GIB),
            ),
        };
        if !matches!(kind, Kind::Cpu) {
            p.tolerations.push(Toleration::exists(l::TAINT_GPU));
        }
        if rng.random_bool(0.5) {
            p.checkpoint_interval_s = Some(1800.0);
            p.checkpoints = true;
        }
        p.expected_runtime_s = Some(rng.random_range(1..=12) as f64 * 3600.0);
        let shape = rng.random_range(0..10);
        if shape < 2 && count >= 2 {
            p.group = Some(GroupRef {
                name: format!("t/gang{c}"),
                min_member: count as u32,
            });
        } else if shape < 5 {
            p.zone_spread = Some(ZoneSpread {
                max_skew: 1,
                selector: format!("t/app={c}"),
            });
        } else if shape < 6 {
            // Anti-affinity (one per node) or a hostname spread of skew 2.
            p.per_node_max = Some(if c % 2 == 0 { 1 } else { 2 });
            p.labels.insert("app".into(), format!("a{c}"));
        }
        for i in 0..count {
            let mut q = p.clone();
            q.name = format!("t/c{c}-{i}");
            pods.push(q);
        }
    }
    Instance {
        catalog,
        pools,
        pods,
    }
}

/// One node of a solution: a candidate and pods per class on it.
type Node = (usize, Vec<usize>);

/// The rules and costs of one instance, shared by the search and the check
/// of a plan.
pub struct Rules<'a> {
    input: &'a Input<'a>,
    opts: &'a Options,
    cands: Vec<Candidate>,
    classes: Vec<Class>,
    /// Pods of each class per candidate node (0: not allowed there).
    per_node: Vec<Vec<u32>>,
    /// Class of each pod the planner packs (a pod, or the first of the pods
    /// sharing a DRA claim, which stands for them all).
    class_of: HashMap<String, usize>,
    /// The packed pod each pod sharing a claim with others is part of.
    unit_of: HashMap<String, String>,
    /// How many pods the planner packs (pods sharing a claim count once).
    units: usize,
    /// Whether Quartermaster's own rules hold too (gangs whole in one zone,
    /// the spot pool share), beside those Karpenter keeps.
    own_rules: bool,
}

impl<'a> Rules<'a> {
    /// The rules of `input` under `opts`.
    pub fn new(input: &'a Input<'a>, opts: &'a Options) -> Rules<'a> {
        let cands = candidates::candidates(input);
        // Pods with DRA claims are checked with their claims' devices as
        // demand, as the planner packs them (`plan::dra`).
        // Pods sharing a claim are packed as one, as the planner does, and
        // its plan names each of them.
        let (prepared, unit_of): (Vec<Pod>, HashMap<String, String>) =
            if input.pods.iter().any(|p| p.devices.is_some()) {
                let prepared = dra::prepare(input, &cands);
                let unit_of = prepared
                    .members
                    .iter()
                    .flat_map(|(unit, members)| {
                        members.iter().map(move |m| (m.clone(), unit.clone()))
                    })
                    .collect();
                (prepared.pods, unit_of)
            } else {
                (input.pods.to_vec(), HashMap::new())
            };
        let all: Vec<usize> = (0..prepared.len()).collect();
        let classes = classes::classify(&prepared, &all, input.now);
        let per_node = classes
            .iter()
            .map(|c| {
                cands
                    .iter()
                    .map(|o| candidates::pods_per_node(c, o))
                    .collect()
            })
            .collect();
        let class_of = classes
            .iter()
            .enumerate()
            .flat_map(|(ci, c)| {
                let prepared = &prepared;
                c.pods.iter().map(move |&p| (prepared[p].name.clone(), ci))
            })
            .collect();
        Rules {
            input,
            opts,
            cands,
            classes,
            per_node,
            class_of,
            unit_of,
            units: prepared.len(),
            own_rules: true,
        }
    }

    /// The rules of `input` that Karpenter keeps too, as the greedy
    /// baseline must: every rule of [`Rules::new`] but gangs (Karpenter
    /// places a gang's members pod by pod, in any zone, as many as fit) and
    /// the spot pool share (a Quartermaster setting).
    pub fn karpenter(input: &'a Input<'a>, opts: &'a Options) -> Rules<'a> {
        Rules {
            own_rules: false,
            ..Rules::new(input, opts)
        }
    }

    /// The cost of a node of candidate `o` holding `counts`, if it is
    /// feasible on its own (compatible, room, anti-affinity).
    fn node_cost(&self, o: usize, counts: &[usize]) -> Option<f64> {
        let c = &self.cands[o];
        let mut total = Resources::new();
        // Per anti-affinity key: pods on the node, and the least cap among them.
        let mut anti: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        let mut members: Vec<&Pod> = Vec::new();
        for (ci, &n) in counts.iter().enumerate() {
            if n == 0 {
                continue;
            }
            if self.per_node[ci][o] == 0 {
                return None;
            }
            let pod = &self.classes[ci].pod;
            for _ in 0..n {
                total = total.plus(&pod.requests);
                members.push(pod);
            }
            if let Some(k) = pack::anti_affinity_key(pod) {
                let cap = pod.per_node_max.unwrap_or(u32::MAX) as usize;
                let e = anti.entry(k).or_insert((0, cap));
                *e = (e.0 + n, e.1.min(cap));
            }
        }
        if !total.fits_in(&c.allocatable)
            || anti.values().any(|(n, cap)| n > cap)
            || !self.gpus_split(o, &members)
        {
            return None;
        }
        Some(cost::node_cost(self.input, c, members, self.opts.idle_accelerator_charge).total())
    }

    /// [`gpus_split`] for a node of candidate `o`.
    fn gpus_split(&self, o: usize, members: &[&Pod]) -> bool {
        let c = &self.cands[o];
        gpus_split(&self.input.pools[c.pool], &c.allocatable, members)
    }

    /// Whether a whole solution keeps the rules that span nodes: gangs whole
    /// and in one zone, zone spread, NodePool limits, spot pool shares.
    /// `Err` names the rule broken.
    fn global(&self, nodes: &[Node]) -> Result<(), String> {
        let zone = |o: usize| self.cands[o].offering.zone_id.as_str();
        // Gangs.
        let own = self.own_rules;
        let mut gangs: BTreeMap<&str, (usize, usize, BTreeSet<&str>)> = BTreeMap::new();
        for (ci, c) in self.classes.iter().enumerate() {
            if let Some(g) = c.pod.group.as_ref().filter(|_| own) {
                let e = gangs.entry(g.name.as_str()).or_default();
                e.0 += c.pods.len();
                for (o, counts) in nodes {
                    if counts[ci] > 0 {
                        e.1 += counts[ci];
                        e.2.insert(zone(*o));
                    }
                }
            }
        }
        for (g, (members, placed, zones)) in &gangs {
            if *placed != 0 && placed != members {
                return Err(format!("gang {g} split {placed}/{members}"));
            }
            if zones.len() > 1 {
                return Err(format!("gang {g} in zones {zones:?}"));
            }
        }
        // Zone spread over the zones the class may use.
        for (ci, c) in self.classes.iter().enumerate() {
            let Some(spread) = &c.pod.zone_spread else {
                continue;
            };
            let mut per_zone: BTreeMap<&str, usize> = self
                .cands
                .iter()
                .enumerate()
                .filter(|(o, _)| self.per_node[ci][*o] > 0)
                .map(|(o, _)| (zone(o), 0))
                .collect();
            if per_zone.len() < 2 {
                continue;
            }
            for (o, counts) in nodes.iter().filter(|(_, counts)| counts[ci] > 0) {
                *per_zone.entry(zone(*o)).or_default() += counts[ci];
            }
            let max = per_zone.values().max().copied().unwrap_or(0);
            let min = per_zone.values().min().copied().unwrap_or(0);
            if max - min > spread.max_skew as usize {
                return Err(format!("class {ci} skew {per_zone:?}"));
            }
        }
        // Limits.
        let mut budgets = limits::budgets(self.input);
        for (o, _) in nodes {
            let c = &self.cands[*o];
            if !budgets[c.pool].affords(c) {
                return Err(format!(
                    "pool {} over its limits",
                    self.input.pools[c.pool].name
                ));
            }
            budgets[c.pool].charge(c);
        }
        // Spot pool share, with the model's slack: one node, or the nodes
        // the largest gang needs on that offering.
        for (pi, pool) in self.input.pools.iter().enumerate() {
            let Some(share) = pool.max_spot_pool_share.filter(|_| own) else {
                continue;
            };
            let spot = |o: usize| {
                self.cands[o].pool == pi
                    && self.cands[o].offering.capacity_type == CapacityType::Spot
            };
            let total = nodes.iter().filter(|(o, _)| spot(*o)).count() as f64;
            let mut per: BTreeMap<usize, f64> = BTreeMap::new();
            for (o, _) in nodes.iter().filter(|(o, _)| spot(*o)) {
                *per.entry(*o).or_default() += 1.0;
            }
            for (o, n) in per {
                let mut gang_nodes: BTreeMap<&str, f64> = BTreeMap::new();
                for (ci, c) in self.classes.iter().enumerate() {
                    if let (Some(g), k) = (&c.pod.group, self.per_node[ci][o]) {
                        if k > 0 {
                            *gang_nodes.entry(g.name.as_str()).or_default() +=
                                (c.pods.len() as f64 / f64::from(k)).ceil();
                        }
                    }
                }
                let slack = gang_nodes.into_values().fold(1.0, f64::max);
                if n > total * share + slack + 1e-9 {
                    return Err(format!("spot pool {o} holds {n} of {total} nodes"));
                }
            }
        }
        Ok(())
    }

    /// What `plan` achieves, after checking it keeps every rule (`Err`
    /// names the first it breaks).
    pub fn value_of(&self, plan: &Plan) -> Result<Value, String> {
        let mut nodes: Vec<Node> = Vec::new();
        let mut cost = 0.0;
        let mut placed = 0;
        // The node each packed pod is on: pods sharing a claim go together.
        let mut node_of: HashMap<&str, usize> = HashMap::new();
        for (ni, n) in plan.nodes.iter().enumerate() {
            let o = self
                .cands
                .iter()
                .position(|c| {
                    self.input.pools[c.pool].name == n.nodepool
                        && serves_dra(&c.labels) == serves_dra(&n.labels)
                        && c.offering.instance_type == n.instance_type
                        && c.offering.zone_id == n.zone
                        && c.offering.capacity_type == n.capacity_type
                })
                .ok_or_else(|| format!("node {} {} is no candidate", n.instance_type, n.zone))?;
            let mut counts = vec![0; self.classes.len()];
            for p in &n.pods {
                let unit = self.unit_of.get(p).map_or(p.as_str(), String::as_str);
                match node_of.insert(unit, ni) {
                    Some(other) if other != ni => {
                        return Err(format!("pods sharing {unit}'s claims on two nodes"))
                    }
                    Some(_) => continue,
                    None => {}
                }
                let ci = *self
                    .class_of
                    .get(unit)
                    .ok_or_else(|| format!("pod {p} is not in the input"))?;
                counts[ci] += 1;
                placed += 1;
            }
            cost += self.node_cost(o, &counts).ok_or_else(|| {
                format!(
                    "node {} {} cannot hold {:?}",
                    n.instance_type, n.zone, n.pods
                )
            })?;
            nodes.push((o, counts));
        }
        self.global(&nodes)?;
        Ok(Value {
            unplaced: self.units - placed,
            cost,
        })
    }

    /// The best solution's value, by exhaustive search.
    pub fn optimum(&self) -> Value {
        let demand: Vec<usize> = self.classes.iter().map(|c| c.pods.len()).collect();
        // Unplaced vectors, fewest pods first; gangs all or none.
        let mut unplaced: Vec<Vec<usize>> = vectors_up_to(&demand)
            .into_iter()
            .filter(|u| {
                self.classes
                    .iter()
                    .enumerate()
                    .all(|(ci, c)| c.pod.group.is_none() || u[ci] == 0 || u[ci] == demand[ci])
            })
            .collect();
        unplaced.sort_by_key(|u| u.iter().sum::<usize>());
        let mut search = Search {
            rules: self,
            options: HashMap::new(),
            best: f64::INFINITY,
        };
        let mut level = None;
        for u in unplaced {
            let n: usize = u.iter().sum();
            if level.is_some_and(|l| l < n) {
                break;
            }
            let rest: Vec<usize> = demand.iter().zip(&u).map(|(d, x)| d - x).collect();
            search.partitions(&rest, None, &mut Vec::new());
            if search.best.is_finite() {
                level.get_or_insert(n);
            }
        }
        Value {
            unplaced: level.unwrap_or(self.units),
            cost: if search.best.is_finite() {
                search.best
            } else {
                0.0
            },
        }
    }
}

/// Whether the shared GPUs of a node of `pool` with `allocatable` can hold
/// the shares `members` take, GPU by GPU: each GPU holds the pool's shares
/// per GPU, and what one pod takes of one GPU stays on it. A pod's shares
/// through DRA (`gpu.nvidia.com/gpu.shared`) are one claim's, on one GPU
/// (the instances checked have pods of one claim of one device); through
/// the device plugin (`nvidia.com/gpu.shared`), each share is a replica of
/// its own (under MPS the plugin refuses a container more than one;
/// time-slicing hands out replicas of any GPU).
pub fn gpus_split(pool: &Pool, allocatable: &Resources, members: &[&Pod]) -> bool {
    let per_gpu = [
        ("gpu.nvidia.com/gpu.shared", pool.dra_gpu_shares, false),
        (
            "nvidia.com/gpu.shared",
            match pool.sharing {
                GpuSharing::TimeSlicing { replicas } => Some(replicas),
                _ => None,
            },
            true,
        ),
    ];
    per_gpu.into_iter().all(|(r, shares, replicas)| {
        let Some(n) = shares else {
            return true;
        };
        let n = i64::from(n.max(1));
        let mut gpus = vec![n; (allocatable.get(r) / n) as usize];
        let mut asks: Vec<i64> = members
            .iter()
            .map(|p| p.requests.get(r))
            .filter(|&s| s > 0)
            .flat_map(|s| {
                if replicas {
                    vec![1; s as usize]
                } else {
                    vec![s]
                }
            })
            .collect();
        asks.sort_unstable_by(|a, b| b.cmp(a));
        split(&asks, &mut gpus)
    })
}

/// Whether a node with `labels` is launched to serve DRA claims.
fn serves_dra<L: l::LabelLookup + ?Sized>(labels: &L) -> bool {
    labels.label(l::DRA).is_some_and(|v| v == "true")
}

/// Whether `asks` (largest first) fit in bins with `free` room, each ask in
/// one bin: exhaustive, trying bins of equal room once.
fn split(asks: &[i64], free: &mut [i64]) -> bool {
    let Some((&a, rest)) = asks.split_first() else {
        return true;
    };
    let mut tried = BTreeSet::new();
    (0..free.len()).any(|i| {
        if free[i] < a || !tried.insert(free[i]) {
            return false;
        }
        free[i] -= a;
        let ok = split(rest, free);
        free[i] += a;
        ok
    })
}

/// Every vector `0 <= v <= top`.
fn vectors_up_to(top: &[usize]) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new()];
    for &t in top {
        out = out
            .into_iter()
            .flat_map(|v| {
                (0..=t).map(move |x| {
                    let mut w = v.clone();
                    w.push(x);
                    w
                })
            })
            .collect();
    }
    out
}

struct Search<'r, 'a> {
    rules: &'r Rules<'a>,
    /// Feasible candidates of a node holding a count vector, cheapest first.
    options: HashMap<Vec<usize>, Vec<(f64, usize)>>,
    best: f64,
}

impl Search<'_, '_> {
    fn options(&mut self, block: &[usize]) -> Vec<(f64, usize)> {
        if let Some(o) = self.options.get(block) {
            return o.clone();
        }
        let mut v: Vec<(f64, usize)> = (0..self.rules.cands.len())
            .filter_map(|o| self.rules.node_cost(o, block).map(|c| (c, o)))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        self.options.insert(block.to_vec(), v.clone());
        v
    }

    /// Every multiset partition of `rest` into blocks no larger (in
    /// enumeration order) than `max`, each then assigned candidates.
    fn partitions(&mut self, rest: &[usize], max: Option<&[usize]>, blocks: &mut Vec<Vec<usize>>) {
        if rest.iter().all(|x| *x == 0) {
            self.assign(blocks);
            return;
        }
        // Blocks in decreasing order: the block must be <= max and <= rest.
        for b in vectors_up_to(rest).into_iter().rev() {
            if b.iter().all(|x| *x == 0) || max.is_some_and(|m| b.as_slice() > m) {
                continue;
            }
            if self.options(&b).is_empty() {
                continue;
            }
            let left: Vec<usize> = rest.iter().zip(&b).map(|(r, x)| r - x).collect();
            blocks.push(b.clone());
            self.partitions(&left, Some(&b), blocks);
            blocks.pop();
        }
    }

    fn assign(&mut self, blocks: &[Vec<usize>]) {
        let opts: Vec<Vec<(f64, usize)>> = blocks.iter().map(|b| self.options(b)).collect();
        // Cheapest possible cost of blocks i.. .
        let mut tail = vec![0.0; blocks.len() + 1];
        for i in (0..blocks.len()).rev() {
            tail[i] = tail[i + 1] + opts[i][0].0;
        }
        if tail[0] >= self.best - 1e-12 {
            return;
        }
        let mut chosen: Vec<usize> = Vec::new();
        self.dfs(blocks, &opts, &tail, &mut chosen, 0.0);
    }

    fn dfs(
        &mut self,
        blocks: &[Vec<usize>],
        opts: &[Vec<(f64, usize)>],
        tail: &[f64],
        chosen: &mut Vec<usize>,
        so_far: f64,
    ) {
        let i = chosen.len();
        if i == blocks.len() {
            let nodes: Vec<Node> = (0..i)
                .map(|j| (opts[j][chosen[j]].1, blocks[j].clone()))
                .collect();
            if self.rules.global(&nodes).is_ok() {
                self.best = so_far;
            }
            return;
        }
        // Equal blocks take candidates in order, so that each multiset of
        // choices is tried once.
        let start = if i > 0 && blocks[i] == blocks[i - 1] {
            chosen[i - 1]
        } else {
            0
        };
        for x in start..opts[i].len() {
            let cost = so_far + opts[i][x].0;
            if cost + tail[i + 1] >= self.best - 1e-12 {
                break;
            }
            chosen.push(x);
            if self.partial_ok(blocks, opts, chosen) {
                self.dfs(blocks, opts, tail, chosen, cost);
            }
            chosen.pop();
        }
    }

    /// Rules that can only get worse as nodes are added: limits, a gang's
    /// single zone, and whether the pods of a spread class still to come can
    /// even out the zones so far.
    fn partial_ok(
        &self,
        blocks: &[Vec<usize>],
        opts: &[Vec<(f64, usize)>],
        chosen: &[usize],
    ) -> bool {
        let rules = self.rules;
        for (ci, c) in rules.classes.iter().enumerate() {
            let Some(spread) = &c.pod.zone_spread else {
                continue;
            };
            let mut per_zone: BTreeMap<&str, usize> = rules
                .cands
                .iter()
                .enumerate()
                .filter(|(o, _)| rules.per_node[ci][*o] > 0)
                .map(|(_, c)| (c.offering.zone_id.as_str(), 0))
                .collect();
            if per_zone.len() < 2 {
                continue;
            }
            for (j, &x) in chosen
                .iter()
                .enumerate()
                .filter(|(j, _)| blocks[*j][ci] > 0)
            {
                *per_zone
                    .entry(rules.cands[opts[j][x].1].offering.zone_id.as_str())
                    .or_default() += blocks[j][ci];
            }
            let to_come: usize = blocks[chosen.len()..].iter().map(|b| b[ci]).sum();
            let floor = per_zone.values().max().copied().unwrap_or(0);
            let floor = floor.saturating_sub(spread.max_skew as usize);
            let needed: usize = per_zone.values().map(|n| floor.saturating_sub(*n)).sum();
            if needed > to_come {
                return false;
            }
        }
        let mut budgets = limits::budgets(rules.input);
        let mut gang_zone: BTreeMap<&str, &str> = BTreeMap::new();
        for (j, &x) in chosen.iter().enumerate() {
            let c = &rules.cands[opts[j][x].1];
            if !budgets[c.pool].affords(c) {
                return false;
            }
            budgets[c.pool].charge(c);
            for (ci, &n) in blocks[j].iter().enumerate() {
                if n == 0 {
                    continue;
                }
                if let Some(g) = &rules.classes[ci].pod.group {
                    let z = gang_zone
                        .entry(g.name.as_str())
                        .or_insert(c.offering.zone_id.as_str());
                    if *z != c.offering.zone_id {
                        return false;
                    }
                }
            }
        }
        true
    }
}
