//! A provable lower bound on what new nodes for a set of pods can cost.
//!
//! The bound is on `risk_adjusted_cost_per_hour` as [`super::greedy::finish`]
//! prices a plan (price + expected interruption cost + idle charge), for any
//! plan that puts the same pods on new nodes, over every offering the pools
//! allow (every candidate, not only the ones the MIP keeps). Pool weights,
//! NodePool limits, gangs' single zone, zone spread and the spot pool share
//! are relaxed (dropping constraints only lowers a minimum, so the bound stays
//! a bound). It is the larger of two bounds:
//!
//! - the LP relaxation over all candidates, solved as its dual with row
//!   generation (the dual view of column generation): the restricted dual over
//!   a few candidates per class is solved, every other candidate is priced
//!   out with the demand rows' duals `pi`, candidates that could improve are
//!   added, until none can. The final duals are feasible for the full LP,
//!   so their objective is a lower bound by weak duality. Beside demand and
//!   capacity, the LP has rows every integral plan keeps: cover rows (the
//!   last node a class or a zone's pinned pods needs whole, `bound::cover`) and
//!   half rows (one pod per node among classes that each take over half of
//!   a resource);
//! - per class, the cheapest whole nodes that hold its pods alone (small
//!   classes only): every plan pays at least that for the nodes holding them.
//!
//! The restricted duals are solved by clarabel's interior point method,
//! with microlp's simplex as the fallback when clarabel gives no answer:
//! an answer of either is only a start, made exactly feasible before it
//! counts, so the solver's tolerance can cost a little bound but never its
//! validity. See `docs/planner.md`.

mod cover;

use super::candidates::{self, Candidate};
use super::classes::{self, Class};
use super::{pod_risk_cost, Input, Options};
use ::clarabel::solver::SolverStatus;
use good_lp::{
    clarabel, constraint, microlp, variable, Expression, ProblemVariables, Solution, SolverModel,
    Variable,
};
use std::collections::BTreeSet;

/// Classes of at most this many pods also get the whole-node bound.
const WHOLE_NODE_MAX_PODS: usize = 256;
/// Candidates each class starts with in the restricted dual.
const START_PER_CLASS: usize = 2;
/// Box on the demand duals (USD per pod-hour, far above any price): keeps
/// the solver's LP bounded; any `pi` that satisfies every row is a bound, so
/// the box costs nothing. (A box per class just past the values the full
/// LP's optimum can take did not make the interior point method faster:
/// measured at 20,000 and 100,000 pods of `bench plan`.)
const DUAL_BOX: f64 = 1e6;
/// Row generation also stops when lowering the duals so that the columns
/// still outside price out loses at most this share of the bound.
const SETTLED: f64 = 1e-7;
/// Row generation stops here; the bound is then only the whole-node one.
const MAX_ROUNDS: usize = 60;

/// One candidate as the bound sees it.
struct Col {
    /// Cost of one node before pods: price, plus the idle charge on all of
    /// its accelerators.
    node: f64,
    /// Its price alone (what the cover rows count).
    price: f64,
    /// The cover rows it counts in (indices into the covers).
    covers: Vec<usize>,
    /// Allocatable per bound resource.
    alloc: Vec<f64>,
    /// `(class, cost per pod)`: expected interruption cost minus the idle
    /// charge the pod's accelerators take off.
    pods: Vec<(usize, f64)>,
    /// Per entry of `pods`, the whole pods of that class one node holds.
    whole: Vec<u32>,
    /// Half rows: sets (indices into `pods`, two or more) of classes whose
    /// pods each take more than half of some resource of the node, so that
    /// one node holds at most one of their pods in all (`sum_{c in set}
    /// y[c,o] <= n[o]`, valid for whole pods). Without them the LP fits a
    /// 70 GiB and a 60 GiB pod "into" a 115 GiB node.
    halves: Vec<Vec<usize>>,
}

/// A lower bound on `risk_adjusted_cost_per_hour` of new nodes holding the
/// pods `placed` (indices into `input.pods`), over every candidate of the
/// input, with `opts.idle_accelerator_charge` as the idle charge.
pub fn lower_bound(input: &Input, placed: &[usize], opts: &Options) -> f64 {
    lower_bound_by(input, placed, opts, &[Lp::Interior, Lp::Simplex])
}

/// The LP solvers the bound can use for its restricted duals.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Lp {
    /// clarabel's interior point method: about three times faster than the
    /// simplex at 20,000 pods and five at 100,000 (`docs/benchmarks.md`).
    Interior,
    /// microlp's dual simplex.
    Simplex,
}

/// [`lower_bound`] with the restricted duals solved by the first of `lps`
/// that answers, round by round.
fn lower_bound_by(input: &Input, placed: &[usize], opts: &Options, lps: &[Lp]) -> f64 {
    if placed.is_empty() {
        return 0.0;
    }
    let cands = candidates::candidates(input);
    let exact = exact_classes(input, placed);
    // The whole-node bound per class, before zone spread splits classes
    // (a part of a class needs fewer whole nodes than all of it).
    let whole = exact
        .iter()
        .filter(|c| c.pods.len() <= WHOLE_NODE_MAX_PODS)
        .map(|c| whole_nodes(input, c, &cands))
        .fold(0.0, f64::max);
    let classes = spread_floors(exact, &cands);
    let resources: Vec<String> = classes
        .iter()
        .flat_map(|c| c.pod.requests.iter())
        .filter(|(_, v)| *v > 0)
        .map(|(r, _)| r.to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    // Each resource in units of its largest request, so that the solver's
    // coefficients are of like size (bytes of memory next to GPUs made its
    // matrix singular).
    let scale: Vec<f64> = resources
        .iter()
        .map(|r| {
            classes
                .iter()
                .map(|c| c.pod.requests.get(r))
                .max()
                .unwrap_or(1)
                .max(1) as f64
        })
        .collect();
    let charge = opts.idle_accelerator_charge;
    let (at, mut cols): (Vec<usize>, Vec<Col>) = cands
        .iter()
        .enumerate()
        .filter_map(|(o, c)| Some((o, column(input, &classes, (&resources, &scale), charge, c)?)))
        .unzip();
    let mut usable = vec![Vec::new(); classes.len()];
    for (&o, col) in at.iter().zip(&cols) {
        for (&(c, _), &k) in col.pods.iter().zip(&col.whole) {
            usable[c].push((o, k));
        }
    }
    let covers = cover::covers(&classes, &cands, &usable);
    let mut of_class = vec![Vec::new(); classes.len()];
    for (k, cover) in covers.iter().enumerate() {
        for &c in &cover.classes {
            of_class[c].push(k);
        }
    }
    for col in &mut cols {
        col.covers = col
            .pods
            .iter()
            .flat_map(|&(c, _)| of_class[c].iter().copied())
            .collect();
        col.covers.sort_unstable();
        col.covers.dedup();
    }
    let cover: Vec<f64> = covers.iter().map(|c| c.price).collect();
    let lp = lp_bound(&classes, (&resources, &scale), &cols, &cover, lps).unwrap_or(0.0);
    lp.max(whole)
}

/// The planner's classes of the pods `placed`, each split by its pods'
/// exact [`super::risk::Exposure`]: the planner prices a class by its first
/// pod, the plan's cost by each pod's own, and the bound must not exceed
/// the latter.
fn exact_classes(input: &Input, placed: &[usize]) -> Vec<Class> {
    let mut out = Vec::new();
    for class in classes::classify(input.pods, placed, input.now) {
        let mut parts: Vec<Class> = Vec::new();
        for &p in &class.pods {
            let e = super::risk::exposure(&input.pods[p]);
            match parts.iter_mut().find(|c| c.exposure == e) {
                Some(c) => c.pods.push(p),
                None => parts.push(Class {
                    exposure: e,
                    pods: vec![p],
                    ..class.clone()
                }),
            }
        }
        out.extend(parts);
    }
    out
}

/// Zone spread's floor per zone, kept in the bound: a class spread with
/// `maxSkew` s over the zones `Z` it can use puts at least
/// `ceil((d - s (|Z| - 1)) / |Z|)` of its `d` pods in every zone (the
/// emptiest zone holds m, each other at most m + s), so that many go to a
/// class of their own pinned to each zone (a node affinity on the zone),
/// and the rest stay free. Any plan that keeps the spread is a plan of the split
/// classes, so the bound stays a bound; relaxing spread entirely left the
/// bound $640/h (9%) under the planner's own LP on `bench plan --pods
/// 20000`, seed 1. Only where every candidate the class can use has one
/// pool weight: the planner spreads within a weight tier.
fn spread_floors(classes: Vec<Class>, cands: &[Candidate]) -> Vec<Class> {
    let mut out = Vec::new();
    for class in classes {
        let Some(skew) = class.pod.zone_spread.as_ref().map(|s| s.max_skew as usize) else {
            out.push(class);
            continue;
        };
        let usable: Vec<&Candidate> = cands
            .iter()
            .filter(|c| candidates::pods_per_node(&class, c) > 0)
            .collect();
        let weights: BTreeSet<i32> = usable.iter().map(|c| c.weight).collect();
        let zones: BTreeSet<&str> = usable.iter().map(|c| c.offering.zone_id.as_str()).collect();
        // The emptiest zone holds m, the others at most m + s each, so
        // d <= |Z| m + s (|Z| - 1): every zone holds at least that m.
        let (d, z) = (class.pods.len(), zones.len().max(1));
        let floor = d.saturating_sub(skew * (z - 1)).div_ceil(z);
        if weights.len() != 1 || zones.len() < 2 || floor == 0 {
            out.push(class);
            continue;
        }
        let mut rest = class.pods.clone();
        for zone in zones {
            let mut pod = class.pod.clone();
            let pin = crate::cluster::Requirement::new(
                crate::api::labels::ZONE_ID,
                crate::cluster::Operator::In,
                &[zone],
            );
            if pod.affinity.terms.is_empty() {
                pod.affinity.terms.push(vec![pin]);
            } else {
                for term in &mut pod.affinity.terms {
                    term.push(pin.clone());
                }
            }
            out.push(Class {
                pod,
                pods: rest.drain(..floor).collect(),
                ..class.clone()
            });
        }
        if !rest.is_empty() {
            out.push(Class {
                pods: rest,
                ..class
            });
        }
    }
    out
}

/// The bound's view of candidate `o`, if any class can use it.
fn column(
    input: &Input,
    classes: &[Class],
    (resources, scale): (&[String], &[f64]),
    charge: f64,
    c: &Candidate,
) -> Option<Col> {
    let aversion = input.pools[c.pool].risk_aversion;
    let idle_on = c.accelerator_units > 0;
    let (pods, whole): (Vec<(usize, f64)>, Vec<u32>) = classes
        .iter()
        .enumerate()
        .filter_map(|(ci, class)| {
            let whole = candidates::pods_per_node(class, c);
            (whole > 0).then_some((ci, class, whole))
        })
        .map(|(ci, class, whole)| {
            // Priced as `cost::node_cost` prices a pod.
            let k = super::cost::pods_like_it(&class.pod, c);
            let risk = pod_risk_cost(&class.exposure, c, k, aversion);
            let credit = match &c.accelerator_resource {
                Some(r) if idle_on => {
                    charge * c.price() * class.pod.requests.get(r) as f64
                        / c.accelerator_units as f64
                }
                _ => 0.0,
            };
            ((ci, risk - credit), whole)
        })
        .unzip();
    if pods.is_empty() {
        return None;
    }
    let mut halves: Vec<Vec<usize>> = Vec::new();
    for r in resources {
        let room = c.allocatable.get(r);
        let big: Vec<usize> = pods
            .iter()
            .enumerate()
            .filter(|(_, (ci, _))| 2 * classes[*ci].pod.requests.get(r) > room)
            .map(|(e, _)| e)
            .collect();
        if big.len() > 1 && !halves.contains(&big) {
            halves.push(big);
        }
    }
    Some(Col {
        halves,
        node: c.price() * (1.0 + if idle_on { charge } else { 0.0 }),
        price: c.price(),
        covers: Vec::new(),
        whole,
        alloc: resources
            .iter()
            .zip(scale)
            .map(|(r, s)| c.allocatable.get(r) as f64 / s)
            .collect(),
        pods,
    })
}

/// The cheapest whole nodes that hold `class`'s pods alone: a node of `o`
/// holding `t` of them costs at least its price plus their interruption cost.
fn whole_nodes(input: &Input, class: &Class, cands: &[Candidate]) -> f64 {
    let d = class.pods.len();
    // (pods per node, price, risk per pod), without dominated options.
    let mut options: Vec<(usize, f64, f64)> = cands
        .iter()
        .filter_map(|c| {
            let k = candidates::pods_per_node(class, c) as usize;
            (k > 0).then(|| {
                let copies = super::cost::pods_like_it(&class.pod, c);
                let risk = pod_risk_cost(
                    &class.exposure,
                    c,
                    copies,
                    input.pools[c.pool].risk_aversion,
                );
                (k.min(d), c.price(), risk)
            })
        })
        .collect();
    if options.is_empty() {
        return 0.0;
    }
    options.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(a.1.total_cmp(&b.1))
            .then(a.2.total_cmp(&b.2))
    });
    let mut front: Vec<(usize, f64, f64)> = Vec::new();
    for o in options {
        if !front.iter().any(|f| f.1 <= o.1 && f.2 <= o.2) {
            front.push(o);
        }
    }
    // best[j]: cheapest nodes for j pods.
    let mut best = vec![f64::INFINITY; d + 1];
    best[0] = 0.0;
    for j in 1..=d {
        for &(k, price, risk) in &front {
            for t in 1..=k.min(j) {
                let v = best[j - t] + price + t as f64 * risk;
                if v < best[j] {
                    best[j] = v;
                }
            }
        }
    }
    best[d]
}

/// The LP relaxation's value over all columns by row generation on its dual,
/// or `None` when the LP could not be solved or did not settle.
///
/// The primal has, beside the demand and capacity rows, the cover rows
/// ([`cover`]): `sum_{o in k} price[o] n[o] >= cover[k]`, valid for every
/// integral plan; they put back what the LP's fractional nodes miss when a
/// demand's last node is not full and nothing else can fill it.
///
/// It also has the half rows of each candidate (see [`Col::halves`]):
/// `sum_{c in h} y[c,o] <= n[o]`.
///
/// Dual (demand rows are equalities: every pod is placed once): maximise
/// `sum d[c] pi[c] + sum cover[k] lambda[k]` over free `pi`, `mu >= 0`,
/// `lambda >= 0` and `rho >= 0` subject to, for every candidate `o`,
/// `sum_r alloc[o,r] mu[o,r] + price[o] sum_{k it counts in} lambda[k] +
/// sum_h rho[o,h] <= node[o]` and, for every class `c` it takes, `pi[c] -
/// sum_r req[c,r] mu[o,r] - sum_{h holding c} rho[o,h] <= cost[c,o]`.
fn lp_bound(
    classes: &[Class],
    (resources, scale): (&[String], &[f64]),
    cols: &[Col],
    cover: &[f64],
    lps: &[Lp],
) -> Option<f64> {
    let req: Vec<Vec<f64>> = classes
        .iter()
        .map(|c| {
            resources
                .iter()
                .zip(scale)
                .map(|(r, s)| c.pod.requests.get(r) as f64 / s)
                .collect()
        })
        .collect();
    let demand: Vec<f64> = classes.iter().map(|c| c.pods.len() as f64).collect();
    // Start with each class's cheapest columns per pod on a full node.
    let mut mine: Vec<Vec<(f64, usize)>> = vec![Vec::new(); classes.len()];
    for (x, col) in cols.iter().enumerate() {
        for &(ci, cost) in &col.pods {
            let share = req[ci]
                .iter()
                .zip(&col.alloc)
                .map(|(q, a)| q / a)
                .fold(0.0, f64::max);
            mine[ci].push((col.node * share + cost, x));
        }
    }
    let mut rows: BTreeSet<usize> = BTreeSet::new();
    for mut mine in mine {
        if mine.is_empty() {
            // A class no candidate takes cannot have been placed.
            return None;
        }
        mine.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        rows.extend(mine.iter().take(START_PER_CLASS).map(|m| m.1));
    }
    for _ in 0..MAX_ROUNDS {
        let dual = Dual {
            req: &req,
            demand: &demand,
            cols,
            rows: &rows,
            cover,
        };
        let (pi, mu, lambda, rho) = lps.iter().find_map(|&lp| dual.solve(lp))?;
        // Tighten lambda, then pi, so that every row in the model holds
        // exactly (the solver's answer is only feasible to its tolerance):
        // lambda shrinks until no row's price share exceeds its node, and
        // each row's mu is scaled into what lambda leaves of the node.
        let shrink = rows
            .iter()
            .map(|&x| {
                let share = lambda_share(&cols[x], &lambda);
                if share > cols[x].node {
                    cols[x].node / share
                } else {
                    1.0
                }
            })
            .fold(1.0, f64::min);
        let lambda: Vec<f64> = lambda.iter().map(|l| l * shrink).collect();
        let mut pi = pi;
        for ((&x, m), h) in rows.iter().zip(&mu).zip(&rho) {
            let col = &cols[x];
            let budget = (col.node - lambda_share(col, &lambda)).max(0.0);
            let used: f64 =
                m.iter().zip(&col.alloc).map(|(u, a)| u * a).sum::<f64>() + h.iter().sum::<f64>();
            let scale = if used > budget && used > 0.0 {
                budget / used
            } else {
                1.0
            };
            for (e, &(c, cost)) in col.pods.iter().enumerate() {
                let halves: f64 = col
                    .halves
                    .iter()
                    .zip(h)
                    .filter(|(set, _)| set.contains(&e))
                    .map(|(_, v)| v)
                    .sum();
                let covered: f64 = m.iter().zip(&req[c]).map(|(u, q)| u * q).sum::<f64>() + halves;
                pi[c] = pi[c].min(cost + covered * scale);
            }
        }
        let violated: Vec<usize> = (0..cols.len())
            .filter(|x| !rows.contains(x) && !priced_out(&cols[*x], &pi, &lambda, &req))
            .collect();
        let cover_part: f64 = lambda.iter().zip(cover).map(|(l, w)| l * w).sum();
        // The dual objective of demand duals `pi` with these cover duals.
        let dual_value = |pi: &[f64]| -> f64 {
            pi.iter().zip(&demand).map(|(p, d)| p * d).sum::<f64>() + cover_part
        };
        let value = dual_value(&pi);
        if violated.is_empty() {
            return Some(value);
        }
        let mut repaired = pi.clone();
        if repair(&violated, cols, (&mut repaired, &demand), &lambda, &req) {
            let within = dual_value(&repaired);
            if value - within <= SETTLED * value.abs().max(1.0) {
                return Some(within);
            }
        }
        rows.extend(violated);
    }
    None
}

/// What the cover duals `lambda` take of column `col`'s node cost: its
/// price times the sum over the cover rows it counts in.
fn lambda_share(col: &Col, lambda: &[f64]) -> f64 {
    col.price * col.covers.iter().map(|&k| lambda[k]).sum::<f64>()
}

/// Whether column `col` cannot improve the LP at duals `pi` and `lambda`:
/// some `mu >= 0` and `rho >= 0` with `alloc . mu + sum rho <= node -
/// price sum lambda` cover every class's `pi - cost` (`req . mu` plus the
/// `rho` of its half rows). Checked with certificates that price one
/// resource at a time, so a `false` may be pessimistic; a `true` is exact.
fn priced_out(col: &Col, pi: &[f64], lambda: &[f64], req: &[Vec<f64>]) -> bool {
    let budget = col.node - lambda_share(col, lambda);
    if budget < 0.0 {
        return false;
    }
    // (entry, class, gain)
    let gains: Vec<(usize, usize, f64)> = col
        .pods
        .iter()
        .enumerate()
        .map(|(e, &(c, cost))| (e, c, pi[c] - cost))
        .filter(|(_, _, g)| *g > 0.0)
        .collect();
    if gains.is_empty() {
        return true;
    }
    // The half row an entry is first in, if any.
    let half_of = |e: usize| col.halves.iter().position(|set| set.contains(&e));
    // Certificates: one resource priced at the most gain per unit over the
    // entries it must cover (every entry, or those in no half row), each
    // half row's dual taking the most gain its entries have left.
    col.alloc.iter().enumerate().any(|(r, &alloc)| {
        [true, false].iter().any(|&all| {
            let priced = |e: usize| all || half_of(e).is_none();
            if gains.iter().any(|&(e, c, _)| priced(e) && req[c][r] <= 0.0) {
                return false;
            }
            let mu = gains
                .iter()
                .filter(|&&(e, _, _)| priced(e))
                .map(|&(_, c, g)| g / req[c][r])
                .fold(0.0, f64::max);
            let mut rho = vec![0.0_f64; col.halves.len()];
            for &(e, c, g) in &gains {
                let left = g - req[c][r] * mu;
                if left > 0.0 {
                    match half_of(e) {
                        Some(h) => rho[h] = rho[h].max(left),
                        None => return false,
                    }
                }
            }
            alloc * mu + rho.iter().sum::<f64>() <= budget
        })
    })
}

/// Lowers `pi` of the classes of each column in `violated` until the column
/// is priced out with `mu` on one resource (its whole budget) and no half
/// rows, choosing per column the resource that lowers `sum d[c] pi[c]` (the
/// bound) least. Lowering `pi` keeps every other row satisfied, so the
/// duals stay feasible for the full LP: a bound a little under the restricted
/// dual's, in place of another round (a round at 100,000 pods of `bench
/// plan` took 8 s to settle a column that was out by a solver tolerance).
/// `false` when some column has no budget left for `mu`.
fn repair(
    violated: &[usize],
    cols: &[Col],
    (pi, demand): (&mut [f64], &[f64]),
    lambda: &[f64],
    req: &[Vec<f64>],
) -> bool {
    for &x in violated {
        let col = &cols[x];
        let budget = col.node - lambda_share(col, lambda);
        if budget < 0.0 {
            return false;
        }
        let capped = |r: usize, c: usize, cost: f64| cost + req[c][r] * budget / col.alloc[r];
        let best = (0..col.alloc.len())
            .filter(|&r| col.alloc[r] > 0.0)
            .map(|r| {
                let loss: f64 = col
                    .pods
                    .iter()
                    .map(|&(c, cost)| demand[c] * (pi[c] - capped(r, c, cost)).max(0.0))
                    .sum();
                (loss, r)
            })
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let Some((_, r)) = best else { return false };
        for &(c, cost) in &col.pods {
            pi[c] = pi[c].min(capped(r, c, cost));
        }
    }
    true
}

/// The restricted dual's answer: `pi` per class, `mu` per row and
/// resource, `lambda` per cover row, `rho` per row and half row.
type Duals = (Vec<f64>, Vec<Vec<f64>>, Vec<f64>, Vec<Vec<f64>>);

/// The restricted dual over `rows`, as [`lp_bound`] states it.
struct Dual<'a> {
    /// Requests per class and resource, scaled.
    req: &'a [Vec<f64>],
    /// Pods per class.
    demand: &'a [f64],
    cols: &'a [Col],
    rows: &'a BTreeSet<usize>,
    /// Per cover row, its price.
    cover: &'a [f64],
}

/// The restricted dual's variables.
struct DualVars {
    pi: Vec<Variable>,
    /// Per row and resource; none where the node has none of it (its `mu`
    /// would be free and unbounded).
    mu: Vec<Vec<Option<Variable>>>,
    /// Per cover row; none where the row's price is zero.
    lambda: Vec<Option<Variable>>,
    /// Per row and half row.
    rho: Vec<Vec<Variable>>,
}

impl Dual<'_> {
    /// Solves the restricted dual with `lp`: `pi` per class, `mu` per row
    /// and resource, `lambda` per cover row and `rho` per row and half row;
    /// `None` when that solver gave no answer.
    fn solve(&self, lp: Lp) -> Option<Duals> {
        let mut vars = ProblemVariables::new();
        let pi: Vec<_> = self
            .demand
            .iter()
            .map(|_| vars.add(variable().min(-DUAL_BOX).max(DUAL_BOX)))
            .collect();
        // A row's price share is at most its node cost, so lambda is at most
        // node / price (1 plus the idle charge); the box keeps the LP bounded
        // before rows reach a class.
        let lambda: Vec<Option<_>> = self
            .cover
            .iter()
            .map(|&w| (w > 0.0).then(|| vars.add(variable().min(0.0).max(2.0))))
            .collect();
        let resources = self.req.first().map_or(0, Vec::len);
        let mu: Vec<Vec<Option<_>>> = self
            .rows
            .iter()
            .map(|&x| {
                (0..resources)
                    .map(|r| (self.cols[x].alloc[r] > 0.0).then(|| vars.add(variable().min(0.0))))
                    .collect()
            })
            .collect();
        let rho: Vec<Vec<_>> = self
            .rows
            .iter()
            .map(|&x| {
                self.cols[x]
                    .halves
                    .iter()
                    .map(|_| vars.add(variable().min(0.0)))
                    .collect()
            })
            .collect();
        let objective: Expression = pi
            .iter()
            .zip(self.demand)
            .map(|(p, d)| *p * *d)
            .sum::<Expression>()
            + lambda
                .iter()
                .zip(self.cover)
                .filter_map(|(l, w)| l.map(|l| l * *w))
                .sum::<Expression>();
        let v = DualVars {
            pi,
            mu,
            lambda,
            rho,
        };
        let problem = vars.maximise(objective);
        match lp {
            Lp::Interior => {
                let mut problem = problem.using(clarabel);
                // Iterative refinement of each step's KKT solve only sharpens an
                // answer that is made exactly feasible anyway (`lp_bound`), and
                // took a fifth of the solver's time (`docs/benchmarks.md`).
                problem.settings().iterative_refinement_enable(false);
                self.constrain(&mut problem, &v);
                let s = problem.solve().ok()?;
                // good_lp also hands back clarabel's "infeasible dual"
                // answers; only a solved one is used, else the simplex's.
                matches!(
                    s.inner().status,
                    SolverStatus::Solved | SolverStatus::AlmostSolved
                )
                .then(|| v.read(&s))
            }
            Lp::Simplex => {
                let mut problem = problem.using(microlp);
                self.constrain(&mut problem, &v);
                Some(v.read(&problem.solve().ok()?))
            }
        }
    }

    /// Adds every row's constraints over the variables `v` to `problem`.
    fn constrain(&self, problem: &mut impl SolverModel, v: &DualVars) {
        for ((&x, m), h) in self.rows.iter().zip(&v.mu).zip(&v.rho) {
            let col = &self.cols[x];
            let used: Expression = m
                .iter()
                .zip(&col.alloc)
                .filter_map(|(u, a)| u.map(|u| u * *a))
                .sum::<Expression>()
                + col
                    .covers
                    .iter()
                    .filter_map(|&k| v.lambda[k].map(|l| l * col.price))
                    .sum::<Expression>()
                + h.iter().copied().sum::<Expression>();
            problem.add_constraint(constraint!(used <= col.node));
            for (e, &(c, cost)) in col.pods.iter().enumerate() {
                let covered: Expression = m
                    .iter()
                    .zip(&self.req[c])
                    .filter_map(|(u, q)| u.map(|u| u * *q))
                    .sum::<Expression>()
                    + col
                        .halves
                        .iter()
                        .zip(h)
                        .filter(|(set, _)| set.contains(&e))
                        .map(|(_, v)| *v)
                        .sum::<Expression>();
                problem.add_constraint(constraint!(v.pi[c] - covered <= cost));
            }
        }
    }
}

impl DualVars {
    /// The solution's values, the signed ones clamped at zero.
    fn read(&self, s: &impl Solution) -> Duals {
        (
            self.pi.iter().map(|p| s.value(*p)).collect(),
            self.mu
                .iter()
                .map(|m| {
                    m.iter()
                        .map(|u| u.map_or(0.0, |u| s.value(u).max(0.0)))
                        .collect()
                })
                .collect(),
            self.lambda
                .iter()
                .map(|l| l.map_or(0.0, |l| s.value(l).max(0.0)))
                .collect(),
            self.rho
                .iter()
                .map(|h| h.iter().map(|v| s.value(*v).max(0.0)).collect())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::cluster::resources::{CPU, MEMORY};
    use crate::cluster::{Pod, Pool, Resources, ZoneSpread};

    #[test]
    fn a_spread_class_of_one_pod_short_of_two_per_zone_pins_one_to_every_zone() {
        let catalog = Catalog::embedded().unwrap();
        let pools = [Pool::new("cpu")];
        let mut pod = Pod::new(
            "web",
            Resources::new().with(CPU, 1000).with(MEMORY, 1 << 30),
        );
        pod.zone_spread = Some(ZoneSpread {
            max_skew: 1,
            selector: "app=web".into(),
        });
        let input = Input::offline(&catalog, "us-east-1", &pools, std::slice::from_ref(&pod));
        let cands = candidates::candidates(&input);
        let zones: BTreeSet<&str> = cands.iter().map(|c| c.offering.zone_id.as_str()).collect();
        assert!(zones.len() > 2);
        // 2|Z| - 1 pods: with skew 1 every zone holds at least one.
        let d = 2 * zones.len() - 1;
        let class = Class {
            pods: (0..d).collect(),
            ..Class::of(&pod, 0)
        };
        let split = spread_floors(vec![class], &cands);
        assert_eq!(split.len(), zones.len() + 1, "{} classes", split.len());
        for part in &split[..zones.len()] {
            assert_eq!(part.pods.len(), 1);
        }
        assert_eq!(split[zones.len()].pods.len(), zones.len() - 1);
    }

    #[test]
    fn the_interior_point_and_the_simplex_give_the_same_bound_under_the_plan() {
        let catalog = Catalog::embedded().unwrap();
        let pods = crate::plan::workload::pods(600, 3);
        let pools = crate::plan::workload::pools();
        let input = Input::offline(&catalog, "us-east-1", &pools, &pods);
        let opts = Options::default();
        let plan = crate::plan::plan(&input, crate::plan::Strategy::Mip, &opts, &|| 0.0);
        assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
        let placed = crate::plan::launched_pods(&input, &plan);
        let interior = lower_bound_by(&input, &placed, &opts, &[Lp::Interior]);
        let simplex = lower_bound_by(&input, &placed, &opts, &[Lp::Simplex]);
        // Both are the LP's optimum, each to its solver's tolerance.
        assert!(
            (interior - simplex).abs() <= 1e-6 * simplex,
            "interior point {interior}, simplex {simplex}"
        );
        // With no solver only the whole-node bound is left: the LP answered.
        let whole = lower_bound_by(&input, &placed, &opts, &[]);
        assert!(simplex > whole, "bound {simplex}, whole nodes {whole}");
        let cost = plan.risk_adjusted_cost_per_hour;
        assert!(simplex <= cost, "bound {simplex}, plan {cost}");
        assert_eq!(lower_bound(&input, &placed, &opts), interior);
    }

    #[test]
    fn a_repaired_column_prices_out_by_the_resource_that_costs_the_bound_least() {
        // One node of cost 10 with one unit of each of two resources. Class
        // 0 takes half of the first and a tenth of the second, class 1 all
        // of the second; their duals (20 and 5 per pod) are more than the
        // node can cover.
        let col = |covers: Vec<usize>| Col {
            node: 10.0,
            price: 10.0,
            covers,
            alloc: vec![1.0, 1.0],
            pods: vec![(0, 1.0), (1, 2.0)],
            whole: vec![2, 1],
            halves: Vec::new(),
        };
        let req = vec![vec![0.5, 0.1], vec![0.0, 1.0]];
        let cols = [col(Vec::new())];
        let (mut pi, demand) = (vec![20.0, 5.0], vec![3.0, 1.0]);
        assert!(!priced_out(&cols[0], &pi, &[], &req));
        assert!(repair(&[0], &cols, (&mut pi, &demand), &[], &req));
        // All of the node on the first resource: class 0 at 1 + 0.5 x 10
        // = 6 (class 1, none of that resource, at its cost 2) loses
        // 3 x 14 + 3 = 45; on the second, 3 x 18 and nothing: 54.
        assert_eq!(pi, [6.0, 2.0]);
        assert!(priced_out(&cols[0], &pi, &[], &req));
        // A column whose cover duals take more than its node cannot be
        // repaired by lowering pi.
        let covered = [col(vec![0])];
        let mut pi = vec![20.0, 5.0];
        assert!(!repair(&[0], &covered, (&mut pi, &demand), &[1.5], &req));
    }
}
