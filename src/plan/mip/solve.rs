//! Solving one tier: its LP relaxation (in independent parts), branch and
//! bound where the model is small, and rounding the placements to whole
//! pods per candidate. Split from `plan::mip` along the seam between
//! planning the tiers and solving each.

use super::*;

/// A solved tier: what to pack, what is left for the next tier, and how.
pub(super) struct Solved {
    /// Pods per candidate, to be packed into its nodes; one entry per node
    /// where the model chose node patterns (a candidate may then appear
    /// more than once).
    pub(super) assigned: Vec<(usize, Vec<usize>)>,
    /// Pods left unplaced, per class.
    pub(super) unplaced: HashMap<usize, Vec<usize>>,
    /// Branch and bound, or the LP rounded.
    pub(super) solved_by: SolvedBy,
}

/// Placement variables from which an independent part of the LP
/// relaxation is solved on a thread of its own, when another part is as
/// large: at 100,000 pods (`bench plan`) the GPU classes' part (36,000
/// placements) and the MIG classes' (6,600) take 2.6 s and 1.4 s; below a
/// few thousand a part solves in milliseconds and a thread is not worth it.
const PART_THREAD_MIN: usize = 2_000;

/// The LP relaxation's placements, per class of the tier (by index into
/// `work`; empty if it has no answer). Classes that share no candidate, no
/// limited pool, no reservation and no gang have no row in common, so the LP
/// is solved part by part ([`independent_parts`]): the same optimum, and
/// the simplex's work grows much faster than its size (`bench plan --pods
/// 100000`: one LP of 2,452 classes took 5.7 s, its four parts 4.0 s; see
/// `docs/benchmarks.md`). Large parts are solved side by side
/// ([`PART_THREAD_MIN`]); the answer does not depend on it.
fn solve_relaxation(tier: Tier) -> Placements {
    // The models are built here (they read the planner's input, which
    // stays on this thread); only solving them may move.
    let solve = |model: Model| {
        let Model {
            vars,
            objective,
            constraints,
            y,
            ..
        } = model;
        let mut problem = vars.minimise(objective).using(microlp);
        for c in constraints {
            problem.add_constraint(c);
        }
        problem.solve().ok().map(|s| read_y(&s, &y))
    };
    let parts = independent_parts(&tier);
    if parts.len() < 2 {
        return solve(build(tier, true, false, None)).unwrap_or_default();
    }
    let size =
        |part: &[usize]| -> usize { part.iter().map(|&wi| tier.work[wi].options.len()).sum() };
    let large = parts.iter().filter(|p| size(p) >= PART_THREAD_MIN).count() >= 2;
    let models: Vec<(bool, Model)> = parts
        .iter()
        .map(|part| {
            let work: Vec<ClassOptions> = part.iter().map(|&wi| tier.work[wi].clone()).collect();
            let model = build(
                Tier {
                    work: &work,
                    ..tier
                },
                true,
                false,
                None,
            );
            (large && size(part) >= PART_THREAD_MIN, model)
        })
        .collect();
    let found: Vec<Option<Placements>> = std::thread::scope(|s| {
        let mut running = Vec::new();
        let mut found = Vec::new();
        for (on_thread, model) in models {
            if on_thread {
                running.push((found.len(), s.spawn(move || solve(model))));
                found.push(None);
            } else {
                found.push(solve(model));
            }
        }
        for (at, handle) in running {
            found[at] = handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        }
        found
    });
    let mut ys = vec![Vec::new(); tier.work.len()];
    for (part, found) in parts.into_iter().zip(found) {
        let Some(found) = found else {
            return Vec::new();
        };
        for (wi, y) in part.into_iter().zip(found) {
            ys[wi] = y;
        }
    }
    ys
}

/// The tier's classes (indices into `work`, ascending; parts ordered by
/// their first class) in groups that no row of the model joins: two classes
/// are in one group when they share a candidate or a gang, or use
/// candidates of one NodePool with a limit or a spot share, or of one
/// capacity reservation.
fn independent_parts(tier: &Tier) -> Vec<Vec<usize>> {
    let classes = tier.work.len();
    // Union-find over the classes, then the candidates (offset by `classes`).
    let mut parent: Vec<usize> = (0..classes + tier.cands.len()).collect();
    fn root(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    let mut join = |a: usize, b: usize| {
        let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
        parent[ra.max(rb)] = ra.min(rb);
    };
    // The first class of each gang, and the first candidate of each
    // pool-wide row and of each reservation, that the others join.
    let mut first_of: BTreeMap<(u8, &str), usize> = BTreeMap::new();
    for (wi, w) in tier.work.iter().enumerate() {
        if let Some(g) = &tier.classes[w.class].pod.group {
            join(wi, *first_of.entry((0, g.name.as_str())).or_insert(wi));
        }
        for &(o, _) in &w.options {
            join(wi, classes + o);
            let c = &tier.cands[o];
            let budget = &tier.budgets[c.pool];
            let pool_wide = !budget.resources.is_empty()
                || budget.nodes.is_some()
                || budget.cost.is_some()
                || tier.input.pools[c.pool].max_spot_pool_share.is_some();
            if pool_wide {
                let first = *first_of
                    .entry((1, tier.input.pools[c.pool].name.as_str()))
                    .or_insert(classes + o);
                join(classes + o, first);
            }
            if let Some(r) = &c.offering.reservation {
                let first = *first_of.entry((2, r.id.as_str())).or_insert(classes + o);
                join(classes + o, first);
            }
        }
    }
    let mut parts: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for wi in 0..classes {
        parts.entry(root(&mut parent, wi)).or_default().push(wi);
    }
    parts.into_values().collect()
}

/// Solves a tier: the LP relaxation (the fallback), then branch and bound or
/// rounding.
pub(super) fn solve(tier: Tier) -> Solved {
    let Tier {
        work,
        opts,
        time_left,
        ..
    } = tier;
    // The LP relaxation: the fallback if the MIP finds nothing in time.
    let lp_y = solve_relaxation(tier);
    let rounded = |ys| Found {
        ys,
        nodes: Vec::new(),
        how: SolvedBy::LpRounding,
        penalty: 0.0,
    };

    // Small models place whole pods (exact), and count nodes by pattern
    // when they have few (exact packing too); larger ones place real
    // amounts of pods of classes whose zone does not matter, rounded after.
    let all_integral = build(tier, false, true, None).integers
        <= opts.max_branch_and_bound_integers.min(ALL_INTEGRAL_MAX);
    let patterns = all_integral
        .then(|| tier_patterns(&tier))
        .flatten()
        .filter(|p| {
            build(tier, false, true, Some(p)).integers <= opts.max_branch_and_bound_integers
        });
    let patterns = patterns.as_ref();
    let mip = build(tier, false, all_integral, patterns);
    let found = if mip.integers > opts.max_branch_and_bound_integers || time_left <= 0.0 {
        // Too large to branch within the time limit, or the plan's time is
        // spent: round the LP.
        rounded(lp_y)
    } else {
        match branch_and_bound(mip, None, opts, time_left) {
            // Pods left unplaced (limits) put 10,000s of dollars of
            // penalty in the objective, and the solver's gap is relative:
            // solve again for the cost alone, placing as many pods.
            Some(first) if first.penalty > 0.5 => {
                let again = build(tier, false, all_integral, patterns);
                match branch_and_bound(again, Some(first.penalty), opts, time_left) {
                    Some(better) => Found {
                        how: first.how.max(better.how),
                        ..better
                    },
                    None => first,
                }
            }
            Some(found) => found,
            // No integer solution in time: round the LP's placements.
            None => rounded(lp_y),
        }
    };
    let solved_by = found.how;
    let mut ys = found.ys;
    one_offering_place_per_efa_gang(&tier, &mut ys);

    // Round placements per class (largest remainder) and hand pods out:
    // per candidate, the pods of each class of the tier.
    let mut on: BTreeMap<usize, Vec<Vec<usize>>> = BTreeMap::new();
    let mut unplaced: HashMap<usize, Vec<usize>> = HashMap::new();
    for (wi, w) in work.iter().enumerate() {
        let values: Vec<(usize, f64)> = ys.get(wi).cloned().unwrap_or_default();
        let counts = match &tier.classes[w.class].pod.zone_spread {
            Some(_) => round_spread(&values, w, tier.cands),
            None => round_counts(&values, w.pods.len()),
        };
        let mut next = 0;
        for (o, cnt) in counts {
            let take = &w.pods[next..next + cnt];
            on.entry(o).or_insert_with(|| vec![Vec::new(); work.len()])[wi].extend_from_slice(take);
            next += cnt;
        }
        if next < w.pods.len() {
            unplaced.insert(w.class, w.pods[next..].to_vec());
        }
    }
    // Where the model chose node patterns, each node gets the pods its
    // pattern has room for; the rest of a candidate's pods are packed.
    let mut assigned: Vec<(usize, Vec<usize>)> = Vec::new();
    for (o, mut per_class) in on {
        let slots: Vec<&Vec<u32>> = found
            .nodes
            .iter()
            .filter(|(p, _)| *p == o)
            .map(|(_, counts)| counts)
            .collect();
        for counts in fill(&slots, &per_class.iter().map(Vec::len).collect::<Vec<_>>()) {
            let node: Vec<usize> = counts
                .iter()
                .enumerate()
                .flat_map(|(wi, &k)| per_class[wi].drain(..k).collect::<Vec<_>>())
                .collect();
            if !node.is_empty() {
                assigned.push((o, node));
            }
        }
        let rest: Vec<usize> = per_class.into_iter().flatten().collect();
        if !rest.is_empty() {
            assigned.push((o, rest));
        }
    }
    // A gang the rounding left partly unplaced (the LP may place a
    // fraction of it) is unplaced whole: its members cannot start apart.
    let partial: BTreeSet<&str> = work
        .iter()
        .filter(|w| unplaced.contains_key(&w.class))
        .filter_map(|w| tier.classes[w.class].pod.group.as_ref())
        .map(|g| g.name.as_str())
        .collect();
    if !partial.is_empty() {
        for w in work {
            let in_partial = tier.classes[w.class]
                .pod
                .group
                .as_ref()
                .is_some_and(|g| partial.contains(g.name.as_str()));
            if in_partial {
                let members: BTreeSet<usize> = w.pods.iter().copied().collect();
                for (_, pods) in assigned.iter_mut() {
                    pods.retain(|p| !members.contains(p));
                }
                unplaced.insert(w.class, w.pods.clone());
            }
        }
        assigned.retain(|(_, pods)| !pods.is_empty());
    }
    Solved {
        assigned,
        unplaced,
        solved_by,
    }
}

/// Keeps each EFA gang's placements (classes of a gang some of whose
/// options are [`efa_bound`]) in one zone and one instance type, so that
/// rounding cannot split it over placement groups: the LP relaxation (and
/// the rounded fallback the simulator and large models use) may spread a
/// gang's members over types and zones, which the branched model's gang
/// constraints forbid. The (zone, type) holding most of the gang's
/// placements wins (ties: the first in order); each class keeps its total
/// on that pair's candidates, in proportion to what it had there. A class
/// with nothing there is left unplaced, and the gang with it (the caller
/// unplaces partial gangs whole). A no-op on integral solutions, which
/// already keep a gang on one pair.
fn one_offering_place_per_efa_gang(tier: &Tier, ys: &mut [Vec<(usize, f64)>]) {
    let Tier {
        work,
        classes,
        cands,
        input,
        ..
    } = *tier;
    let place = |o: usize| {
        (
            cands[o].offering.zone_id.as_str(),
            cands[o].offering.instance_type.as_str(),
        )
    };
    let mut gangs: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (wi, w) in work.iter().enumerate() {
        let pod = &classes[w.class].pod;
        if let Some(g) = &pod.group {
            if w.options
                .iter()
                .any(|(o, _)| efa_bound(input, pod, &cands[*o]))
            {
                gangs.entry(g.name.as_str()).or_default().push(wi);
            }
        }
    }
    for members in gangs.values() {
        let mut mass: BTreeMap<(&str, &str), f64> = BTreeMap::new();
        for &wi in members {
            for &(o, v) in ys.get(wi).map(Vec::as_slice).unwrap_or_default() {
                *mass.entry(place(o)).or_default() += v;
            }
        }
        let Some(best) = mass
            .iter()
            .filter(|(_, m)| **m > 1e-9)
            .fold(None::<(&(&str, &str), f64)>, |best, (k, m)| match best {
                Some((_, bm)) if bm >= *m => best,
                _ => Some((k, *m)),
            })
            .map(|(k, _)| *k)
        else {
            continue;
        };
        for &wi in members {
            let Some(values) = ys.get_mut(wi) else {
                continue;
            };
            let total: f64 = values.iter().map(|(_, v)| v).sum();
            let kept: f64 = values
                .iter()
                .filter(|(o, _)| place(*o) == best)
                .map(|(_, v)| v)
                .sum();
            let scale = if kept > 1e-9 { total / kept } else { 0.0 };
            for (o, v) in values.iter_mut() {
                *v = if place(*o) == best { *v * scale } else { 0.0 };
            }
        }
    }
}

/// Pods per class (by index into the tier's work) on each node of one
/// candidate: node `j` takes at most `slots[j]` of each class, `counts`
/// are the class's pods on the candidate. Each node first gets one pod
/// (of the class with the most left that it has room for), then nodes fill
/// in order. Pods beyond every slot are left to the caller.
fn fill(slots: &[&Vec<u32>], counts: &[usize]) -> Vec<Vec<usize>> {
    let mut left = counts.to_vec();
    let mut out: Vec<Vec<usize>> = slots.iter().map(|_| vec![0; counts.len()]).collect();
    for (j, slot) in slots.iter().enumerate() {
        let first = (0..counts.len())
            .filter(|&c| slot[c] > 0 && left[c] > 0)
            .max_by_key(|&c| (left[c], std::cmp::Reverse(c)));
        if let Some(c) = first {
            out[j][c] = 1;
            left[c] -= 1;
        }
    }
    for c in 0..counts.len() {
        for (j, slot) in slots.iter().enumerate() {
            let take = (slot[c] as usize - out[j][c].min(slot[c] as usize)).min(left[c]);
            out[j][c] += take;
            left[c] -= take;
        }
    }
    out
}

/// Pods of each class of a tier per candidate, as the solver left them.
type Placements = Vec<Vec<(usize, f64)>>;

/// What branch and bound found: placements, the nodes by pattern (when the
/// model has patterns: one entry per node), how, and the penalty of the
/// pods left unplaced.
struct Found {
    ys: Placements,
    nodes: Vec<(usize, Vec<u32>)>,
    how: SolvedBy,
    penalty: f64,
}

/// Branch and bound on `model`. With `penalty_cap`, the model minimises
/// cost alone, leaving no more unplaced than that penalty.
fn branch_and_bound(
    model: Model,
    penalty_cap: Option<f64>,
    opts: &Options,
    time_left: f64,
) -> Option<Found> {
    let Model {
        vars,
        objective,
        constraints,
        y,
        penalty,
        patterns,
        ..
    } = model;
    let objective = match penalty_cap {
        Some(_) => objective - penalty.clone(),
        None => objective,
    };
    let mut problem = vars
        .minimise(objective)
        .using(microlp)
        .with_time_limit(time_left)
        .with_mip_gap(opts.mip_gap.clamp(0.0, 1.0) as f32)
        .expect("a gap in [0, 1] is accepted");
    for c in constraints {
        problem.add_constraint(c);
    }
    if let Some(cap) = penalty_cap {
        problem.add_constraint(constraint!(penalty.clone() <= cap + 1e-6));
    }
    let s = problem.solve().ok()?;
    let how = match s.status() {
        good_lp::SolutionStatus::Optimal | good_lp::SolutionStatus::GapLimit => {
            SolvedBy::BranchAndBound
        }
        _ => SolvedBy::TimeLimit,
    };
    let nodes = patterns
        .iter()
        .flat_map(|(o, counts, x)| {
            let k = s.value(*x).round().max(0.0) as usize;
            std::iter::repeat_n((*o, counts.clone()), k)
        })
        .collect();
    Some(Found {
        ys: read_y(&s, &y),
        nodes,
        how,
        penalty: s.eval(&penalty),
    })
}

fn read_y(s: &impl Solution, y: &[Vec<(usize, Variable)>]) -> Placements {
    y.iter()
        .map(|ys| ys.iter().map(|(o, v)| (*o, s.value(*v).max(0.0))).collect())
        .collect()
}

/// Integer counts per candidate from real ones, keeping the rounded total and
/// never exceeding `max`.
fn round_counts(values: &[(usize, f64)], max: usize) -> Vec<(usize, usize)> {
    let total: f64 = values.iter().map(|(_, v)| v).sum();
    round_to(values, (total.round() as usize).min(max))
}

/// [`round_counts`] for a zone-spread class: rounding each option on its
/// own can put the rounded-up pods in one zone (2.3 + 0.3 in one zone and
/// 3.4 in the other round to 2 and 4, past a `maxSkew` of 1 the LP kept).
/// Zones are rounded first, each unit to the zone holding fewest (over
/// every zone the class's options reach, as the model counts the skew),
/// which keeps the skew of the floors (within `maxSkew`, as the LP's
/// totals are) or 1; then each zone's count over its options.
fn round_spread(
    values: &[(usize, f64)],
    w: &ClassOptions,
    cands: &[Candidate],
) -> Vec<(usize, usize)> {
    let zone = |o: usize| cands[o].offering.zone_id.as_str();
    let total: f64 = values.iter().map(|(_, v)| v).sum();
    let target = (total.round() as usize).min(w.pods.len());
    // Per zone: the LP's total and its options' values.
    type Zone = (f64, Vec<(usize, f64)>);
    let mut zones: BTreeMap<&str, Zone> = w
        .options
        .iter()
        .map(|(o, _)| (zone(*o), (0.0, Vec::new())))
        .collect();
    for &(o, v) in values {
        let z = zones.entry(zone(o)).or_default();
        z.0 += v;
        z.1.push((o, v));
    }
    // Floors, nudged up by a hair so 2.9999999 counts as 3.
    let mut count: BTreeMap<&str, usize> = zones
        .iter()
        .map(|(z, (t, _))| (*z, (t + 1e-6).floor() as usize))
        .collect();
    let mut sum: usize = count.values().sum();
    let remainder = |z: &str| zones[z].0 - zones[z].0.floor();
    while sum < target {
        // Fewest first, then the largest remainder, then the zone's order.
        let Some(z) = count
            .iter()
            .filter(|(z, _)| !zones[**z].1.is_empty())
            .min_by(|a, b| a.1.cmp(b.1).then(remainder(b.0).total_cmp(&remainder(a.0))))
            .map(|(z, _)| *z)
        else {
            break;
        };
        if let Some(n) = count.get_mut(z) {
            *n += 1;
        }
        sum += 1;
    }
    while sum > target {
        let Some(z) = count.iter().max_by_key(|(_, n)| **n).map(|(z, _)| *z) else {
            break;
        };
        if let Some(n) = count.get_mut(z) {
            *n -= 1;
        }
        sum -= 1;
    }
    zones
        .iter()
        .flat_map(|(z, (_, options))| round_to(options, count[z]))
        .collect()
}

/// Largest remainder rounding of `values` to exactly `target` whole pods
/// (none when there is no option).
fn round_to(values: &[(usize, f64)], target: usize) -> Vec<(usize, usize)> {
    if values.is_empty() {
        return Vec::new();
    }
    let mut counts: Vec<(usize, usize, f64)> = values
        .iter()
        .map(|(o, v)| (*o, v.floor() as usize, v - v.floor()))
        .collect();
    let mut sum: usize = counts.iter().map(|c| c.1).sum();
    let mut order: Vec<usize> = (0..counts.len()).collect();
    order.sort_by(|a, b| counts[*b].2.total_cmp(&counts[*a].2));
    for i in order.iter().cycle() {
        if sum >= target {
            break;
        }
        counts[*i].1 += 1;
        sum += 1;
    }
    while sum > target {
        if let Some(c) = counts.iter_mut().rev().find(|c| c.1 > 0) {
            c.1 -= 1;
            sum -= 1;
        }
    }
    counts
        .into_iter()
        .filter(|c| c.1 > 0)
        .map(|(o, n, _)| (o, n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{CapacityType, Catalog};
    use crate::cluster::resources::{CPU, MEMORY};
    use crate::cluster::{GroupRef, Operator, Pod, Pool, Requirement, Resources};
    use crate::labels as l;

    /// Runs `f` on one tier of every class of `input`'s pods, each with
    /// its compatible candidates of `types` only (small LPs).
    fn with_tier<R>(input: &Input, types: &[&str], f: impl FnOnce(Tier) -> R) -> R {
        let cands = candidates::candidates(input);
        let all: Vec<usize> = (0..input.pods.len()).collect();
        let classes = classes::classify(input.pods, &all, None);
        let work: Vec<ClassOptions> = classes
            .iter()
            .enumerate()
            .map(|(ci, c)| ClassOptions {
                class: ci,
                pods: c.pods.clone(),
                options: (0..cands.len())
                    .filter(|&o| types.contains(&cands[o].offering.instance_type.as_str()))
                    .filter(|&o| pack::compatible(&c.pod, &cands[o].labels, &cands[o].taints))
                    .map(|o| (o, candidates::pods_per_taking_node(c, &cands[o])))
                    .filter(|(_, k)| *k > 0)
                    .collect(),
            })
            .collect();
        let budgets = limits::budgets(input);
        let reserved = limits::ReservedLeft::of(input);
        f(Tier {
            work: &work,
            classes: &classes,
            cands: &cands,
            input,
            budgets: &budgets,
            reserved: &reserved,
            opts: &Options::default(),
            time_left: 10.0,
        })
    }

    /// The LP relaxation of the tier's classes `part` (indices into
    /// `work`), solved alone on this thread: its optimum and placements.
    fn solve_alone(tier: Tier, part: &[usize]) -> (f64, Placements) {
        let work: Vec<ClassOptions> = part.iter().map(|&w| tier.work[w].clone()).collect();
        let Model {
            vars,
            objective,
            constraints,
            y,
            ..
        } = build(
            Tier {
                work: &work,
                ..tier
            },
            true,
            false,
            None,
        );
        let mut problem = vars.minimise(objective.clone()).using(microlp);
        for c in constraints {
            problem.add_constraint(c);
        }
        let solution = problem.solve().unwrap();
        (solution.eval(&objective), read_y(&solution, &y))
    }

    #[test]
    fn classes_sharing_no_row_are_solved_apart_with_the_whole_lps_optimum() {
        let catalog = Catalog::embedded().unwrap();
        let pinned = |name: &str, cpu: i64, t: &str| {
            let mut p = Pod::new(name, Resources::new().with(CPU, cpu).with(MEMORY, 2 << 30));
            p.affinity.terms = vec![vec![Requirement::new(l::INSTANCE_TYPE, Operator::In, &[t])]];
            p
        };
        // Two classes pinned to two types, one free class that can take
        // either, and a class pinned to a type of its own.
        let pods = vec![
            pinned("a-0", 1500, "m6i.xlarge"),
            pinned("a-1", 1500, "m6i.xlarge"),
            pinned("b-0", 700, "c6i.xlarge"),
            pinned("c-0", 3000, "r6i.xlarge"),
            pinned("c-1", 3000, "r6i.xlarge"),
        ];
        let types = ["m6i.xlarge", "c6i.xlarge", "r6i.xlarge"];
        let mut pools = vec![Pool::new("cpu")];
        let parts_and_optimum = |pools: &[Pool], pods: &[Pod]| {
            let input = Input::offline(&catalog, "us-east-1", pools, pods);
            with_tier(&input, &types, |tier| {
                let parts = independent_parts(&tier);
                let by_parts: f64 = parts.iter().map(|part| solve_alone(tier, part).0).sum();
                let every: Vec<usize> = (0..tier.work.len()).collect();
                let whole = solve_alone(tier, &every).0;
                assert!(
                    (by_parts - whole).abs() <= 1e-6 * whole.abs().max(1.0),
                    "by parts {by_parts}, whole {whole}"
                );
                // The placements the solver hands back cover every class.
                let ys = solve_relaxation(tier);
                assert_eq!(ys.len(), tier.work.len());
                for (w, y) in tier.work.iter().zip(&ys) {
                    let placed: f64 = y.iter().map(|(_, v)| v).sum();
                    assert!((placed - w.pods.len() as f64).abs() < 1e-6, "{placed}");
                }
                parts
                    .into_iter()
                    .map(|part| part.iter().map(|&w| tier.work[w].pods.len()).collect())
                    .collect::<Vec<Vec<usize>>>()
            })
        };
        // Three types, three parts: the classes are in the order of their
        // first pod.
        assert_eq!(
            parts_and_optimum(&pools, &pods),
            vec![vec![2], vec![1], vec![2]]
        );
        // A pod that can take m6i or c6i joins the first two.
        let mut joined = pods.clone();
        let mut either = pinned("d-0", 500, "m6i.xlarge");
        either.affinity.terms = vec![vec![Requirement::new(
            l::INSTANCE_TYPE,
            Operator::In,
            &["m6i.xlarge", "c6i.xlarge"],
        )]];
        joined.push(either);
        assert_eq!(
            parts_and_optimum(&pools, &joined),
            vec![vec![2, 1, 1], vec![2]]
        );
        // A pool limit is one row over all its nodes: one part.
        pools[0].limits.resources = Resources::new().with(CPU, 64_000);
        assert_eq!(parts_and_optimum(&pools, &pods), vec![vec![2, 1, 2]]);
        // So is a spot share.
        pools[0].limits.resources = Resources::new();
        pools[0].max_spot_pool_share = Some(0.5);
        assert_eq!(parts_and_optimum(&pools, &pods), vec![vec![2, 1, 2]]);
        // And a gang: its classes start together.
        pools[0].max_spot_pool_share = None;
        let mut gang = pods.clone();
        for i in [0, 1, 3, 4] {
            gang[i].group = Some(GroupRef {
                name: "g".into(),
                min_member: 4,
            });
        }
        assert_eq!(parts_and_optimum(&pools, &gang), vec![vec![2, 2], vec![1]]);
    }

    #[test]
    fn large_parts_solved_side_by_side_give_each_part_its_own_answer() {
        // Two families, 36 CPU shapes pinned to each: two parts of over
        // `PART_THREAD_MIN` placements each, so both go to threads.
        let catalog = Catalog::embedded().unwrap();
        let sizes = [
            "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge",
        ];
        let types: Vec<String> = ["m6i", "c6i"]
            .iter()
            .flat_map(|f| sizes.iter().map(move |s| format!("{f}.{s}")))
            .collect();
        let types: Vec<&str> = types.iter().map(String::as_str).collect();
        let pods: Vec<Pod> = ["m6i", "c6i"]
            .iter()
            .flat_map(|family| {
                (0..36).map(move |i| {
                    let mut p = Pod::new(
                        &format!("{family}-{i}"),
                        Resources::new()
                            .with(CPU, 300 + 100 * i)
                            .with(MEMORY, 1 << 30),
                    );
                    p.affinity.terms = vec![vec![Requirement::new(
                        l::INSTANCE_FAMILY,
                        Operator::In,
                        &[family],
                    )]];
                    p
                })
            })
            .collect();
        let pools = [Pool::new("cpu")];
        let input = Input::offline(&catalog, "us-east-1", &pools, &pods);
        with_tier(&input, &types, |tier| {
            let parts = independent_parts(&tier);
            assert_eq!(parts.len(), 2);
            for part in &parts {
                let size: usize = part.iter().map(|&w| tier.work[w].options.len()).sum();
                assert!(size >= PART_THREAD_MIN, "a part of {size} placements");
            }
            // Each part solved here, alone, in the same model.
            let mut expected = vec![Vec::new(); tier.work.len()];
            for part in &parts {
                for (&w, ys) in part.iter().zip(solve_alone(tier, part).1) {
                    expected[w] = ys;
                }
            }
            let got = solve_relaxation(tier);
            assert_eq!(got, expected);
            for (w, ys) in tier.work.iter().zip(&got) {
                let family = &tier.classes[w.class].pod.affinity.terms[0][0].values[0];
                assert!(ys.iter().all(|(o, _)| tier.cands[*o]
                    .offering
                    .instance_type
                    .starts_with(family.as_str())));
            }
        })
    }

    #[test]
    fn rounding_a_spread_class_keeps_the_skew_the_lp_kept() {
        // The LP puts 2.3 + 0.3 pods of a class spread with skew 1 on two
        // offerings of one zone and 3.4 on one of another (2.6 and 3.4:
        // within the skew). Per option, the largest remainder rounds to 2,
        // 0 and 4; zone by zone, to 3 and 3.
        let catalog = Catalog::embedded().unwrap();
        let pools = [Pool::new("cpu")];
        let pods: Vec<Pod> = (0..6)
            .map(|i| Pod::new(&format!("web-{i}"), Resources::new().with(CPU, 1000)))
            .collect();
        let input = Input::offline(&catalog, "us-east-1", &pools, &pods);
        let cands = candidates::candidates(&input);
        let on_demand = |t: &str| {
            let mut zones: Vec<usize> = (0..cands.len())
                .filter(|&i| {
                    cands[i].offering.instance_type == t
                        && cands[i].offering.capacity_type == CapacityType::OnDemand
                })
                .collect();
            zones.sort_by(|a, b| cands[*a].offering.zone_id.cmp(&cands[*b].offering.zone_id));
            zones
        };
        let (big, small) = (on_demand("m6i.4xlarge"), on_demand("m6i.xlarge"));
        assert_eq!(
            cands[big[0]].offering.zone_id,
            cands[small[0]].offering.zone_id
        );
        let (a, b, c) = (big[0], small[0], big[1]);
        let values = vec![(a, 2.3), (b, 0.3), (c, 3.4)];
        let zone_of = |counts: &[(usize, usize)], z: usize| -> usize {
            counts
                .iter()
                .filter(|(o, _)| cands[*o].offering.zone_id == cands[z].offering.zone_id)
                .map(|(_, n)| n)
                .sum()
        };
        let naive = round_counts(&values, 6);
        assert_eq!((zone_of(&naive, a), zone_of(&naive, c)), (2, 4));
        let w = ClassOptions {
            class: 0,
            pods: (0..6).collect(),
            options: vec![(a, 1), (b, 1), (c, 1)],
        };
        let rounded = round_spread(&values, &w, &cands);
        assert_eq!((zone_of(&rounded, a), zone_of(&rounded, c)), (3, 3));
        assert_eq!(rounded.iter().map(|(_, n)| n).sum::<usize>(), 6);
    }

    #[test]
    fn rounding_keeps_the_total_and_favours_larger_fractions() {
        let r = round_counts(&[(0, 1.6), (1, 1.4), (2, 0.0)], 10);
        assert_eq!(r, vec![(0, 2), (1, 1)]);
        let capped = round_counts(&[(0, 2.5), (1, 2.5)], 4);
        assert_eq!(capped.iter().map(|c| c.1).sum::<usize>(), 4);
    }
}
