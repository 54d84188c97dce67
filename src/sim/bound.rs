//! The clairvoyant lower bound a simulation's costs are compared with: what
//! the workload would cost if every job ran, from its submission, without
//! interruptions or idle capacity, on the cheapest share of a node that its
//! NodePools allow. Every strategy pays at least this, so "vs bound" in the
//! report says how far a strategy is from the impossible best.
//!
//! A pod's share of a node weighs its parts of the node's accelerator units,
//! CPU and memory, with weights that sum to one and are the same for every
//! pod on nodes of that instance type and room (a node *kind*).
//!
//! Why it is a bound: on any node, the pods' parts of each resource add up to
//! at most the whole node, so with weights summing to one their shares add up
//! to at most one and the node's price covers what its pods are charged; the
//! cheapest charge over the offerings a pod may use is at most what it costs
//! wherever it actually ran. That holds for *any* such weights, so the bound
//! picks, kind by kind, the weights that make it highest for this workload: a
//! kind that memory-heavy pods would use is charged by memory. (Charging each
//! pod its own largest share instead would not be a bound: a GPU-heavy and a
//! CPU-heavy pod can share a node.)
//!
//! A share is then rounded up by a *dual feasible function* of bin packing
//! (Fekete and Schepers, 2001): `u_k(x) = floor((k+1) x) / k`, or `x` where
//! `(k+1) x` is whole. Shares that add up to at most one still do after
//! `u_k`, so the bound stays a bound, and a pod of which only two fit on a
//! node (a share just over a third) is charged half of it, not a third.

use super::workload::SimJob;
use crate::api::NodePool;
use crate::catalog::Catalog;
use crate::cluster::resources::{CPU, MEMORY};
use crate::cluster::{NodeAffinity, Pod, Resources, Toleration};
use crate::plan::candidates::{candidates, pods_per_node, Candidate};
use crate::plan::classes::Class;
use crate::plan::Input;
use std::collections::HashMap;

/// The bound of one workload.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bound {
    /// USD: the sum over placeable jobs of their cheapest charge per hour
    /// times the hours they could run in the window.
    pub cost: f64,
    /// Jobs that no pool can place (no offering the pools allow holds and
    /// admits them): left out of `cost`, counted here.
    pub unplaceable: usize,
}

/// Weights of a node kind's charge over its accelerator units, CPU and
/// memory; they sum to one.
type Weights = [f64; 3];

/// The weights the bound tries for each kind: every split of one into
/// quarters over the three resources (the three single resources included).
const WEIGHTS: [Weights; 15] = [
    [1.0, 0.0, 0.0],
    [0.0, 1.0, 0.0],
    [0.0, 0.0, 1.0],
    [0.75, 0.25, 0.0],
    [0.75, 0.0, 0.25],
    [0.5, 0.5, 0.0],
    [0.5, 0.25, 0.25],
    [0.5, 0.0, 0.5],
    [0.25, 0.75, 0.0],
    [0.25, 0.5, 0.25],
    [0.25, 0.25, 0.5],
    [0.25, 0.0, 0.75],
    [0.0, 0.75, 0.25],
    [0.0, 0.5, 0.5],
    [0.0, 0.25, 0.75],
];

/// The parts of a node of `c` that one `pod` takes: of the accelerator
/// resource the node advertises (0 on a node without one), of its CPU and
/// of its memory.
fn shares(pod: &Pod, c: &Candidate) -> [f64; 3] {
    let part = |name: &str| {
        let room = c.allocatable.get(name);
        if room > 0 {
            pod.requests.get(name) as f64 / room as f64
        } else {
            0.0
        }
    };
    let accelerator = match &c.accelerator_resource {
        Some(resource) if c.accelerator_units > 0 => {
            pod.requests.get(resource) as f64 / c.accelerator_units as f64
        }
        _ => 0.0,
    };
    [accelerator, part(CPU), part(MEMORY)]
}

/// How a kind charges a pod: weights over its parts, and the dual feasible
/// function `u_k` applied to the weighted share (`rounding` is `k`; 0 leaves
/// the share as it is).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rule {
    weights: Weights,
    rounding: u32,
}

/// The largest `k` of `u_k` the bound tries.
const MAX_ROUNDING: u32 = 10;

impl Rule {
    /// Where the bound starts on nodes of `c`: the accelerator's share, or
    /// the CPU's on a node without an accelerator.
    fn start(c: &Candidate) -> Rule {
        let accelerated = c.accelerator_resource.is_some() && c.accelerator_units > 0;
        Rule {
            weights: if accelerated { WEIGHTS[0] } else { WEIGHTS[1] },
            rounding: 0,
        }
    }

    /// Every rule the bound may choose.
    fn all() -> impl Iterator<Item = Rule> {
        WEIGHTS
            .iter()
            .flat_map(|&weights| (0..=MAX_ROUNDING).map(move |rounding| Rule { weights, rounding }))
    }

    /// The charged share of a node for `parts` (accelerator, CPU, memory).
    fn share(&self, parts: &[f64; 3]) -> f64 {
        let w = &self.weights;
        let x = w[0] * parts[0] + w[1] * parts[1] + w[2] * parts[2];
        if self.rounding == 0 {
            return x;
        }
        let k = f64::from(self.rounding);
        let y = (k + 1.0) * x;
        // Where `y` is whole, or a rounding error above whole, `u_k(x) = x`;
        // just under whole it is the lower step: either way never more than
        // the exact `u_k`.
        if y.fract() < 1e-9 {
            x
        } else {
            y.floor() / k
        }
    }
}

/// Where pods of one shape may run on one node kind: the cheapest price
/// among the kind's offerings that admit it, and its shares of such a node.
#[derive(Debug, Clone, Copy)]
struct Place {
    kind: usize,
    price: f64,
    shares: [f64; 3],
}

impl Place {
    fn charge(&self, rule: &Rule) -> f64 {
        self.price * rule.share(&self.shares)
    }
}

/// What the bound charges per hour each shape of `shapes` (by its
/// representative pod), with the rules chosen per kind; `None` where no
/// offering holds and admits it.
#[derive(Debug, Clone)]
struct Charges {
    per_shape: Vec<Option<f64>>,
    /// Each kind's rule.
    rules: Vec<Rule>,
    /// Each kind's first candidate (a kind's candidates differ only in
    /// price and zone).
    first: Vec<usize>,
}

/// The charges of `shapes` (a pod and the hours its jobs may run) over
/// `cands`, with each kind's rule raised, one kind at a time, to what makes
/// the bound highest given the others ([`Rule::start`] first).
fn charges(shapes: &[(&Pod, f64)], cands: &[Candidate]) -> Charges {
    // Kinds: candidates of one instance type and the same room share a rule.
    type Kind = (String, Option<String>, i64, i64, i64);
    let mut kinds: HashMap<Kind, usize> = HashMap::new();
    let mut rules: Vec<Rule> = Vec::new();
    let mut first: Vec<usize> = Vec::new();
    let kind_of: Vec<usize> = cands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let key = (
                c.offering.instance_type.clone(),
                c.accelerator_resource.clone(),
                c.accelerator_units,
                c.allocatable.get(CPU),
                c.allocatable.get(MEMORY),
            );
            *kinds.entry(key).or_insert_with(|| {
                rules.push(Rule::start(c));
                first.push(i);
                rules.len() - 1
            })
        })
        .collect();
    // Each shape's options, one per kind that admits it.
    let options: Vec<Vec<Place>> = shapes
        .iter()
        .map(|(pod, _)| {
            let class = Class::of(pod, 0);
            let mut by_kind: Vec<Place> = Vec::new();
            for (c, &kind) in cands.iter().zip(&kind_of) {
                if pods_per_node(&class, c) == 0 {
                    continue;
                }
                match by_kind.iter_mut().find(|o| o.kind == kind) {
                    Some(o) => o.price = o.price.min(c.price()),
                    None => by_kind.push(Place {
                        kind,
                        price: c.price(),
                        shares: shares(pod, c),
                    }),
                }
            }
            by_kind
        })
        .collect();
    // The shapes each kind may hold, as (shape, its option there).
    let mut users: Vec<Vec<(usize, usize)>> = vec![Vec::new(); rules.len()];
    for (s, opts) in options.iter().enumerate() {
        for (i, o) in opts.iter().enumerate() {
            users[o.kind].push((s, i));
        }
    }
    let cheapest_but = |s: usize, kind: usize, rules: &[Rule]| {
        options[s]
            .iter()
            .filter(|o| o.kind != kind)
            .map(|o| o.charge(&rules[o.kind]))
            .fold(f64::INFINITY, f64::min)
    };
    let total_weight: f64 = shapes.iter().map(|(_, h)| h).sum::<f64>().max(1.0);
    for _round in 0..20 {
        let mut changed = false;
        for kind in 0..rules.len() {
            if users[kind].is_empty() {
                continue;
            }
            let others: Vec<f64> = users[kind]
                .iter()
                .map(|&(s, _)| cheapest_but(s, kind, &rules))
                .collect();
            // What the shapes using this kind add to the bound under `w`,
            // and (to break ties towards charges that may bind later) what
            // they would be charged on this kind.
            let score = |rule: &Rule| {
                users[kind].iter().zip(&others).fold(
                    (0.0, 0.0),
                    |(bound, own), (&(s, i), &other)| {
                        let here = options[s][i].charge(rule);
                        let hours = shapes[s].1;
                        (bound + hours * here.min(other), own + hours * here)
                    },
                )
            };
            let mut best = (rules[kind], score(&rules[kind]));
            for rule in Rule::all() {
                let (bound, own) = score(&rule);
                let tolerance = 1e-12 * total_weight * (1.0 + best.1 .0.abs());
                if bound > best.1 .0 + tolerance
                    || (bound >= best.1 .0 - tolerance && own > best.1 .1 + tolerance)
                {
                    best = (rule, (bound, own));
                }
            }
            if best.0 != rules[kind] {
                rules[kind] = best.0;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let per_shape = options
        .iter()
        .map(|opts| {
            opts.iter()
                .map(|o| o.charge(&rules[o.kind]))
                .min_by(f64::total_cmp)
        })
        .collect();
    Charges {
        per_shape,
        rules,
        first,
    }
}

/// Every offering `node_pools` may launch in `region`, as the planner sees
/// it with nothing running (invalid pools offer nothing); launched to
/// serve DRA claims too when `claims` holds a pod with matched claims.
fn pool_candidates(
    catalog: &Catalog,
    region: &str,
    node_pools: &[NodePool],
    claims: &[Pod],
) -> Vec<Candidate> {
    let pools: Vec<crate::cluster::Pool> = node_pools
        .iter()
        .filter_map(|p| crate::cluster::Pool::from_api(p, Resources::new()).ok())
        .collect();
    let input = Input::offline(catalog, region, &pools, claims);
    candidates(&input)
}

/// The bound of `jobs` run in `region` by `node_pools` (invalid pools place
/// nothing), for a window that ends at `end`: each job is charged from its
/// submission for its run time or the rest of the window, whichever is
/// shorter.
pub fn lower_bound(
    jobs: &[SimJob],
    catalog: &Catalog,
    region: &str,
    node_pools: &[NodePool],
    end: crate::core::Time,
) -> Bound {
    // A pod with DRA claims is charged with the devices its claims take,
    // on the nodes that serve them (as the engine binds it); one whose
    // claims no type serves is not placeable.
    let forms: Vec<Option<Pod>> = jobs
        .iter()
        .map(|j| match &j.pod.devices {
            Some(d) if !j.pod.resource_claims.is_empty() => d.scheduled(&j.pod),
            _ => None,
        })
        .collect();
    let probe: Vec<Pod> = jobs
        .iter()
        .find(|j| j.pod.devices.is_some())
        .map(|j| j.pod.clone())
        .into_iter()
        .collect();
    let cands = pool_candidates(catalog, region, node_pools, &probe);
    let mut unservable = 0;
    // Pods of one shape and the same constraints cost the same per hour:
    // long runs have many jobs and few shapes.
    type Shape<'p> = (
        &'p Resources,
        &'p [Toleration],
        &'p NodeAffinity,
        Option<u32>,
    );
    let mut index: HashMap<Shape, usize> = HashMap::new();
    // Each shape's pod, hours and jobs.
    let mut shapes: Vec<(&Pod, f64)> = Vec::new();
    let mut jobs_of: Vec<usize> = Vec::new();
    for (job, form) in jobs.iter().zip(&forms) {
        let pod = match form {
            Some(p) => p,
            None if !job.pod.resource_claims.is_empty() => {
                unservable += 1;
                continue;
            }
            None => &job.pod,
        };
        let shape = (
            &pod.requests,
            pod.tolerations.as_slice(),
            &pod.affinity,
            pod.per_node_max,
        );
        let s = *index.entry(shape).or_insert_with(|| {
            shapes.push((pod, 0.0));
            jobs_of.push(0);
            shapes.len() - 1
        });
        let window_s = (end - job.submit).num_milliseconds().max(0) as f64 / 1000.0;
        shapes[s].1 += job.work_s.min(window_s) / 3600.0;
        jobs_of[s] += 1;
    }
    let charges = charges(&shapes, &cands);
    // Say where a rule moved off the start: why the bound is higher than
    // one resource's shares.
    for (rule, &i) in charges.rules.iter().zip(&charges.first) {
        let c = &cands[i];
        let w = rule.weights;
        if *rule != Rule::start(c) {
            tracing::debug!(
                instance_type = %c.offering.instance_type,
                pool = c.pool,
                accelerator = w[0],
                cpu = w[1],
                memory = w[2],
                rounding = rule.rounding,
                "lower bound: a kind's charge rule"
            );
        }
    }
    let mut bound = Bound {
        unplaceable: unservable,
        ..Bound::default()
    };
    for (s, charge) in charges.per_shape.iter().enumerate() {
        match charge {
            Some(usd_per_hour) => bound.cost += usd_per_hour * shapes[s].1,
            None => bound.unplaceable += jobs_of[s],
        }
    }
    bound
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(h: i64) -> crate::core::Time {
        chrono::Utc.with_ymd_and_hms(2026, 1, 5, 0, 0, 0).unwrap() + chrono::Duration::hours(h)
    }

    fn pool(families: &str) -> NodePool {
        serde_norway::from_str(&format!(
            "apiVersion: quartermaster.dev/v1alpha1
kind: NodePool
metadata: {{name: p}}
spec:
  capacityTypes: [spot, on-demand]
  template:
    spec:
      requirements:
      - {{key: quartermaster.dev/instance-family, operator: In, values: [{families}]}}"
        ))
        .unwrap()
    }

    fn job(gpus: i64, submit_h: i64, work_h: f64) -> SimJob {
        job_of(
            Resources::new()
                .with(CPU, 1000)
                .with(MEMORY, 1 << 30)
                .with(crate::labels::RESOURCE_GPU, gpus),
            submit_h,
            work_h,
        )
    }

    fn job_of(requests: Resources, submit_h: i64, work_h: f64) -> SimJob {
        SimJob {
            pod: Pod::new("ml/j", requests),
            submit: t(submit_h),
            work_s: work_h * 3600.0,
            checkpoint_interval_s: None,
            checkpoint_write_s: 0.0,
            restart_overhead_s: 0.0,
            stateless: false,
            gpu_share: None,
            gpu_use: None,
        }
    }

    /// The cheapest per-GPU price among a family's offerings with at least
    /// `min_gpus` GPUs, by hand.
    fn cheapest_per_gpu(catalog: &Catalog, family: &str, min_gpus: u32) -> f64 {
        catalog
            .offerings_in("us-east-1")
            .filter(|o| o.instance_type.starts_with(&format!("{family}.")))
            .filter_map(|o| {
                let gpus = catalog
                    .instance_type(&o.instance_type)?
                    .accelerator
                    .as_ref()?
                    .count;
                (gpus >= min_gpus).then(|| o.price_per_hour / f64::from(gpus))
            })
            .fold(f64::INFINITY, f64::min)
    }

    #[test]
    fn a_job_is_charged_its_gpu_share_of_the_cheapest_node_its_pool_allows_for_the_window() {
        let catalog = Catalog::embedded().unwrap();
        let p4d = cheapest_per_gpu(&catalog, "p4d", 1);
        let (g5_one, g5_two) = (
            cheapest_per_gpu(&catalog, "g5", 1),
            cheapest_per_gpu(&catalog, "g5", 2),
        );
        assert!(
            g5_one < p4d,
            "the test needs a cheaper family outside the pool"
        );
        let jobs = [job(2, 0, 10.0), job(1, 20, 10.0)];
        // The second job has 4 of its 10 hours left in a 24-hour window.
        let b = lower_bound(&jobs, &catalog, "us-east-1", &[pool("p4d")], t(24));
        assert_eq!(b.unplaceable, 0);
        assert!((b.cost - p4d * (2.0 * 10.0 + 4.0)).abs() < 1e-6, "{b:?}");
        // The same jobs in a pool that also allows g5 cost less: the 2-GPU
        // job on the cheapest node with two GPUs or more, either family.
        let cheaper = lower_bound(&jobs, &catalog, "us-east-1", &[pool("g5, p4d")], t(24));
        let expected = g5_two.min(p4d) * 20.0 + g5_one * 4.0;
        assert!(
            (cheaper.cost - expected).abs() < 1e-6,
            "{cheaper:?} vs {expected}"
        );
        assert!(cheaper.cost < b.cost);
    }

    #[test]
    fn jobs_no_pool_can_place_are_counted_apart() {
        let catalog = Catalog::embedded().unwrap();
        let jobs = [job(1, 0, 1.0), job(100, 0, 1.0)];
        let b = lower_bound(&jobs, &catalog, "us-east-1", &[pool("p4d")], t(24));
        assert_eq!(b.unplaceable, 1, "no node has 100 GPUs");
        assert!(b.cost > 0.0);
        let none = lower_bound(&jobs, &catalog, "us-east-1", &[], t(24));
        assert_eq!((none.cost, none.unplaceable), (0.0, 2));
    }

    const GIB: i64 = 1 << 30;

    #[test]
    fn a_job_that_needs_a_node_for_its_memory_is_charged_the_node_over_how_many_fit() {
        // 16 vCPU and 200 GiB: by CPU a sliver of a big node, but no node
        // of these families holds more such pods than its memory allows
        // (at most 7). With one shape, the best rule of each kind charges
        // exactly the node's price over the pods that fit on it.
        let catalog = Catalog::embedded().unwrap();
        let requests = Resources::new().with(CPU, 16000).with(MEMORY, 200 * GIB);
        let b = lower_bound(
            &[job_of(requests.clone(), 0, 10.0)],
            &catalog,
            "us-east-1",
            &[pool("m7i, r7i")],
            t(24),
        );
        let (mut by_cpu, mut per_pod) = (f64::INFINITY, f64::INFINITY);
        for o in catalog.offerings_in("us-east-1") {
            if !(o.instance_type.starts_with("m7i.") || o.instance_type.starts_with("r7i.")) {
                continue;
            }
            let it = catalog.instance_type(&o.instance_type).unwrap();
            let room = crate::cluster::shape::allocatable(it, &Default::default());
            let fit = requests.copies_in(&room);
            if fit == 0 {
                continue;
            }
            by_cpu = by_cpu.min(o.price_per_hour * 16000.0 / room.get(CPU) as f64);
            per_pod = per_pod.min(o.price_per_hour / f64::from(fit));
        }
        assert!(per_pod.is_finite());
        assert!(
            (b.cost - 10.0 * per_pod).abs() < 1e-6,
            "{b:?} vs {per_pod}/h"
        );
        assert!(
            b.cost > 10.0 * by_cpu * 1.5,
            "memory binds here: {b:?} against {by_cpu}/h by CPU"
        );
    }

    #[test]
    fn no_mix_of_pods_on_a_node_is_charged_more_than_the_node_costs() {
        // A GPU pod, a CPU-heavy and a memory-heavy pod, each with enough
        // hours to pull the rules of the kinds they use towards their
        // resource; then every mix of them that fits any node of the pool
        // must be charged at most that node's price.
        let catalog = Catalog::embedded().unwrap();
        let cands = pool_candidates(&catalog, "us-east-1", &[pool("g5")], &[]);
        let gpu = Pod::new(
            "ml/gpu",
            Resources::new()
                .with(CPU, 2000)
                .with(MEMORY, 8 * GIB)
                .with(crate::labels::RESOURCE_GPU, 1),
        );
        let cpu = Pod::new(
            "ml/cpu",
            Resources::new().with(CPU, 30000).with(MEMORY, 16 * GIB),
        );
        let memory = Pod::new(
            "ml/mem",
            Resources::new().with(CPU, 2000).with(MEMORY, 150 * GIB),
        );
        let shapes = [(&gpu, 100.0), (&cpu, 300.0), (&memory, 300.0)];
        let charges = charges(&shapes, &cands);
        let moved = charges
            .rules
            .iter()
            .filter(|r| r.weights[1] < 1.0 && r.weights[0] < 1.0)
            .count();
        assert!(
            moved > 0,
            "some kind charges by memory: {:?}",
            charges.rules
        );
        // One candidate of each kind (a kind's candidates differ only in
        // price): every mix that fits must be charged at most one node,
        // under the rule chosen and under every rule the bound may choose.
        let mut checked = 0;
        for (chosen, &i) in charges.rules.iter().zip(&charges.first) {
            let c = &cands[i];
            let rules: Vec<Rule> = std::iter::once(*chosen).chain(Rule::all()).collect();
            let most = |pod: &Pod| pod.requests.copies_in(&c.allocatable).min(64);
            for a in 0..=most(&gpu) {
                for b in 0..=most(&cpu) {
                    for m in 0..=most(&memory) {
                        let mut used = Resources::new();
                        for (pod, n) in [(&gpu, a), (&cpu, b), (&memory, m)] {
                            for _ in 0..n {
                                used.add(&pod.requests);
                            }
                        }
                        if used.copies_in(&c.allocatable) == 0 {
                            continue;
                        }
                        for rule in &rules {
                            let one = |pod: &Pod| rule.share(&shares(pod, c));
                            let charged = a as f64 * one(&gpu)
                                + b as f64 * one(&cpu)
                                + m as f64 * one(&memory);
                            assert!(
                                charged <= 1.0 + 1e-9,
                                "{} x{a} gpu, x{b} cpu, x{m} memory under {rule:?}: \
                                 {charged} nodes",
                                c.offering.instance_type,
                            );
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 10_000, "{checked} mixes and rules checked");
    }
}
