//! The mixed-integer program (good_lp with the pure-Rust microlp solver).
//!
//! Variables: `n[o]`, integer nodes of candidate offering `o`; `y[c,o]`, pods
//! of class `c` on `o` (integer for gang and zone-spread classes, real
//! otherwise; real ones are rounded and packed afterwards); `u[c]`, pods of `c`
//! left unplaced (penalised); `z[g,zone]`, binary zone choice of gang `g`.
//! Minimise `sum n[o] price[o] (1 + idle)` + `sum y[c,o] (risk[c,o] - idle
//! credit)` + penalties, subject to demand, per-resource capacity, pods per
//! node, NodePool limits, gangs all-or-nothing in one zone, zone skew, and the
//! largest share of one spot pool. See `docs/planner.md`.

use super::candidates::{self, Candidate};
use super::classes::{self, Class};
use super::limits::{self, Budget};
use super::pack;
use super::{pod_risk_cost, Input, Options, Plan, SolvedBy, Strategy, Unschedulable};
use crate::cluster::requirements::{NodeAffinity, Toleration};
use crate::cluster::FastMap;
use good_lp::solvers::{WithMipGap, WithTimeLimit};
use good_lp::{
    constraint, microlp, variable, Expression, ProblemVariables, Solution, SolverModel, Variable,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

mod model;
mod solve;
use model::{build, tier_patterns, Model, Tier};
use solve::solve;

/// Penalty per pod left unplaced, USD per hour: far above any price.
const UNPLACED_PENALTY: f64 = 10_000.0;
/// Times a weight tier is solved: pods that packing puts into more nodes of
/// a candidate than the LP filled in aggregate are planned again, once,
/// rather than opening nodes that hold only them. (Planning again the last,
/// partly filled node of every candidate as well, or moving such a node
/// from spot to a smaller on-demand type, brought `bench plan` closer to
/// its bound but made the simulator dearer: in a running cluster the room
/// left on a big node takes the next pods, see `docs/planner.md`.)
const OVERFLOW_ROUNDS: usize = 2;
/// Candidates kept per pool, zone and capacity type for classes whose zone
/// matters (gangs, zone spread): cheapest per pod first.
const KEEP_PER_ZONE_AND_TYPE: usize = 1;
/// Candidates kept for a class whose zone does not matter: the cheapest per
/// pod overall, and always the cheapest of each capacity type.
const KEEP_FREE: usize = 6;
/// Compatible candidates of all classes of a tier up to which the tier
/// keeps them all: pruning per class cannot see that a node it would drop
/// is the best one to share with other classes, and such models stay
/// small. Per class instead, it made large rounded models dearer (`bench
/// plan --pods 20000`, seed 1: $7,992/h against $7,874/h).
const KEEP_ALL: usize = 64;
/// Integer variables up to which every class places whole pods (exact):
/// beyond a few dozen, branching on every placement took microlp past the
/// time limit on `deploy/examples/plan` (12 nodes), where real placements
/// rounded afterwards finish in time.
const ALL_INTEGRAL_MAX: usize = 64;
/// Pods of a class up to which [`prune`] adds the cheapest whole nodes for
/// its demand: for larger classes the rounded LP fills big nodes well, and
/// the small shapes only made it spread pods over more, emptier nodes
/// (`bench plan --pods 2000`, seed 1: $1,312/h with them for every class,
/// $1,301/h with them up to 16 pods, $1,302/h without).
const DEMAND_AWARE_MAX: usize = 16;
/// Pod counts up to which [`prune`] keeps the cheapest whole nodes for every
/// count, not only for the demand and its remainders.
const EXACT_COUNTS: usize = 8;
/// Maximal node patterns (see [`node_patterns`]) a whole tier may have for
/// its model to count nodes by pattern rather than by aggregate capacity.
const PATTERNS_MAX: usize = 160;
/// Steps of the pattern enumeration of one candidate before it gives up
/// (the tier then keeps the aggregate capacity rows alone).
const PATTERN_STEPS_MAX: usize = 20_000;

/// A class's options within one weight tier.
#[derive(Clone)]
struct ClassOptions {
    class: usize,
    pods: Vec<usize>,
    options: Vec<(usize, u32)>,
}

/// Plans with the MIP.
/// `clock` gives seconds on a monotonic clock: `opts.time_limit` bounds the
/// whole plan (every tier's branch and bound gets what is left of it; once
/// it is spent, tiers round their LP instead), not each MIP.
pub fn plan(input: &Input, opts: &Options, clock: &dyn Fn() -> f64) -> Plan {
    let started = clock();
    let pods = input.pods;
    let all: Vec<usize> = (0..pods.len()).collect();
    let (on_existing, left) = pack::place_on_existing(pods, &all, input.nodes);
    let cands = candidates::candidates(input);
    let by_resource = candidates::ByResource::new(&cands);
    let classes = classes::classify(pods, &left, input.now);
    let mut unschedulable = Vec::new();
    let mut budgets = limits::budgets(input);
    let mut reserved = limits::ReservedLeft::of(input);
    // The class of each pod to plan, by pod index (a vector: large plans
    // look it up for every pod more than once).
    let mut class_of = vec![usize::MAX; pods.len()];
    for (ci, c) in classes.iter().enumerate() {
        for &p in &c.pods {
            class_of[p] = ci;
        }
    }

    // Gangs with fewer pending members than they need cannot start.
    let mut pending_members: FastMap<&str, u32> = FastMap::default();
    for c in &classes {
        if let Some(g) = &c.pod.group {
            *pending_members.entry(g.name.as_str()).or_default() += c.pods.len() as u32;
        }
    }

    // Compatible candidates per class, in weight tiers (highest first).
    let mut tiers: Vec<Vec<Vec<(usize, u32)>>> = Vec::new();
    // Whether a candidate takes a class's pods depends on their tolerations
    // and affinity only: asked once per pair and candidate, not once per
    // class (most classes differ in their requests only).
    let mut takes: FastMap<(&NodeAffinity, &[Toleration]), pack::Asked> = FastMap::default();
    for c in &classes {
        if let Some(g) = &c.pod.group {
            let have = pending_members[g.name.as_str()];
            if have < g.min_member {
                for &p in &c.pods {
                    unschedulable.push(Unschedulable {
                        pod: pods[p].name.clone(),
                        reason: format!(
                            "gang {} has {have} of its {} members pending; waiting for the rest",
                            g.name, g.min_member
                        ),
                    });
                }
                tiers.push(Vec::new());
                continue;
            }
        }
        let takes = takes
            .entry((&c.pod.affinity, c.pod.tolerations.as_slice()))
            .or_insert_with(|| pack::Asked::new(cands.len()));
        let compatible: Vec<(usize, u32)> = by_resource
            .may_fit(&c.pod.requests)
            .iter()
            .filter(|&&i| {
                takes.ask(i, || {
                    pack::compatible(&c.pod, &cands[i].labels, &cands[i].taints)
                })
            })
            .map(|&i| (i, candidates::pods_per_taking_node(c, &cands[i])))
            .filter(|(_, k)| *k > 0)
            .collect();
        if compatible.is_empty() {
            let reason = candidates::explain_unschedulable(c, &cands, input.pools);
            for &p in &c.pods {
                unschedulable.push(Unschedulable {
                    pod: pods[p].name.clone(),
                    reason: reason.clone(),
                });
            }
        }
        let mut weights: Vec<i32> = compatible.iter().map(|(i, _)| cands[*i].weight).collect();
        weights.sort_unstable_by(|a, b| b.cmp(a));
        weights.dedup();
        tiers.push(
            weights
                .iter()
                .map(|w| {
                    compatible
                        .iter()
                        .copied()
                        .filter(|(i, _)| cands[*i].weight == *w)
                        .collect()
                })
                .collect(),
        );
    }

    // Solve tier by tier: pods a higher-weight pool cannot take (limits) fall
    // to the next tier.
    let mut remaining: Vec<Vec<usize>> = classes
        .iter()
        .zip(&tiers)
        .map(|(c, t)| {
            if t.is_empty() {
                Vec::new()
            } else {
                c.pods.clone()
            }
        })
        .collect();
    let mut launched: Vec<(usize, Vec<usize>)> = Vec::new();
    let mut solved_by = SolvedBy::BranchAndBound;
    let max_tiers = tiers.iter().map(Vec::len).max().unwrap_or(0);
    let rounds = (0..max_tiers).flat_map(|t| (0..OVERFLOW_ROUNDS).map(move |r| (t, r)));
    // Pods of the tier's first round that rounding packed past what the LP
    // counted, per class: the second round plans them, and only them.
    let mut overflowed: Vec<Vec<usize>> = vec![Vec::new(); classes.len()];
    for (t, round) in rounds {
        let to_plan = if round == 0 { &remaining } else { &overflowed };
        let active = |ci: &usize| !to_plan[*ci].is_empty() && tiers[*ci].len() > t;
        // A small tier keeps every candidate (see `KEEP_ALL`).
        let small = (0..classes.len())
            .filter(active)
            .map(|ci| tiers[ci][t].len())
            .sum::<usize>()
            <= KEEP_ALL;
        let work: Vec<ClassOptions> = classes
            .iter()
            .enumerate()
            .filter(|(ci, _)| active(ci))
            .map(|(ci, c)| ClassOptions {
                class: ci,
                pods: to_plan[ci].clone(),
                options: if small {
                    tiers[ci][t].clone()
                } else {
                    prune(c, &tiers[ci][t], &cands, input, to_plan[ci].len())
                },
            })
            .collect();
        overflowed.iter_mut().for_each(Vec::clear);
        if work.is_empty() {
            continue;
        }
        let mut work = work;
        if !small {
            let compatible: Vec<&[(usize, u32)]> =
                work.iter().map(|w| tiers[w.class][t].as_slice()).collect();
            widen(&mut work, &compatible, &classes, &cands, input);
        }
        let result = solve(Tier {
            work: &work,
            classes: &classes,
            cands: &cands,
            input,
            budgets: &budgets,
            reserved: &reserved,
            opts,
            time_left: opts.time_limit.as_secs_f64() - (clock() - started),
        });
        solved_by = solved_by.max(result.solved_by);
        for w in &work {
            let unplaced = result.unplaced.get(&w.class).cloned().unwrap_or_default();
            if round == 0 {
                remaining[w.class] = unplaced;
            } else {
                remaining[w.class].extend(unplaced);
            }
        }
        // Packing may need a node more than the model counted: a node the
        // pool can no longer afford sends its pods back, whole gangs at once.
        let mut refused_gangs = BTreeSet::new();
        // The offerings the model chose: right-sizing must not move a node
        // into a spot pool the model is still to fill, or the pool's share
        // no longer holds.
        let planned: BTreeSet<usize> = result.assigned.iter().map(|(o, _)| *o).collect();
        let mut packed: Vec<(usize, Vec<usize>)> = Vec::new();
        let overflow = result.solved_by == SolvedBy::LpRounding && round + 1 < OVERFLOW_ROUNDS;
        for (o, assigned) in result.assigned {
            let (mut nodes, misfits) = pack::pack_new(pods, &assigned, &cands[o].allocatable, 0);
            if overflow {
                let limit = aggregate_nodes(pods, &assigned, &cands[o].allocatable);
                let mut at = nodes.len();
                while at > limit {
                    at -= 1;
                    let free = nodes[at].iter().all(|&p| !pods[p].zone_bound());
                    if free {
                        for p in nodes.remove(at) {
                            overflowed[class_of[p]].push(p);
                        }
                    }
                }
            }
            packed.extend(nodes.into_iter().map(|node| (o, node)));
            for p in misfits {
                remaining[class_of[p]].push(p);
            }
        }
        // What the pools can afford for one node while the nodes still to
        // come keep theirs: right-sizing a node into a bigger one must not
        // spend the limit the model left for the others.
        let mut ahead = budgets.clone();
        for (o, _) in &packed {
            ahead[cands[*o].pool].charge(&cands[*o]);
        }
        for (o, node) in packed {
            ahead[cands[o].pool].refund(&cands[o]);
            let taken = Taken {
                launched: &launched,
                planned: &planned,
            };
            let o = right_size(input, &cands, opts, o, &node, taken, &ahead);
            let o = beside_reservation(&cands, o, &reserved, &ahead);
            ahead[cands[o].pool].charge(&cands[o]);
            let budget = &mut budgets[cands[o].pool];
            if budget.affords(&cands[o]) && reserved.affords(&cands[o]) {
                budget.charge(&cands[o]);
                reserved.charge(&cands[o]);
                launched.push((o, node));
            } else {
                for p in node {
                    if let Some(g) = &pods[p].group {
                        refused_gangs.insert(g.name.clone());
                    }
                    remaining[class_of[p]].push(p);
                }
            }
        }
        if !refused_gangs.is_empty() {
            launched.retain(|(_, node)| {
                let refused = node.iter().any(|p| {
                    pods[*p]
                        .group
                        .as_ref()
                        .is_some_and(|g| refused_gangs.contains(&g.name))
                });
                if refused {
                    for p in node {
                        remaining[class_of[*p]].push(*p);
                    }
                }
                !refused
            });
            budgets = limits::budgets(input);
            reserved = limits::ReservedLeft::of(input);
            for (o, _) in &launched {
                budgets[cands[*o].pool].charge(&cands[*o]);
                reserved.charge(&cands[*o]);
            }
        }
    }
    // Whatever left a gang partly unplaced (rounding, packing, a limit
    // met by a later tier), its members cannot start apart: none launches.
    let partial: BTreeSet<&str> = remaining
        .iter()
        .flatten()
        .filter_map(|&p| pods[p].group.as_ref())
        .map(|g| g.name.as_str())
        .collect();
    if !partial.is_empty() {
        for (_, node) in launched.iter_mut() {
            node.retain(|&p| {
                let keep = pods[p]
                    .group
                    .as_ref()
                    .is_none_or(|g| !partial.contains(g.name.as_str()));
                if !keep {
                    remaining[class_of[p]].push(p);
                }
                keep
            });
        }
        launched.retain(|(_, node)| !node.is_empty());
    }
    let launched = merge_nodes(input, &cands, launched);
    for (ci, r) in remaining.iter().enumerate() {
        for &p in r {
            unschedulable.push(Unschedulable {
                pod: pods[p].name.clone(),
                reason: match &classes[ci].pod.group {
                    Some(g) => format!(
                        "gang {} does not fit in one zone within the NodePool limits",
                        g.name
                    ),
                    None => "NodePool limits reached for every compatible pool".into(),
                },
            });
        }
    }

    let mut plan = super::greedy::finish(
        Strategy::Mip,
        input,
        &cands,
        launched,
        on_existing,
        unschedulable,
        opts,
    );
    plan.solved_by = solved_by;
    plan
}

/// Empties launched nodes into the free room of others: rounding the LP per
/// class can split pods that fit one node over two offerings (eleven MIG
/// pods on a p4de and eleven on a p5 where one p4de holds all 22). Dearest
/// nodes first (ties: later first), each dropped when all its pods fit, first
/// fit, on other nodes of the same pool and capacity type (the same zone for
/// gang members, and for zone-spread pods unless [`Spread`] lets them move
/// without breaking their skew); spot nodes of a pool with a share
/// limit stay, and so does a node whose price is no more than what its pods'
/// expected interruptions would cost more where they move (CPU pods on a
/// cheap CPU node beside a spot GPU node that is often reclaimed).
/// Deterministic.
fn merge_nodes(
    input: &Input,
    cands: &[Candidate],
    launched: Vec<(usize, Vec<usize>)>,
) -> Vec<(usize, Vec<usize>)> {
    let pods = input.pods;
    let mut bins: Vec<(usize, pack::Bin)> = launched
        .into_iter()
        .map(|(o, members)| {
            let mut b = pack::Bin::new(cands[o].allocatable.clone());
            for p in members {
                b.put(p, &pods[p]);
            }
            (o, b)
        })
        .collect();
    // Full bins are turned away by number first (`pack::Quick`).
    let launched_pods: Vec<usize> = bins.iter().flat_map(|(_, b)| b.pods.clone()).collect();
    let quick = pack::Quick::over(pods, &launched_pods);
    let need = quick.needs(pods, &launched_pods);
    let mut room: Vec<Vec<i64>> = bins.iter().map(|(_, b)| quick.amounts(&b.free)).collect();
    // Bins by pool and capacity type, in bin order: pods only move within
    // their node's group.
    let mut groups: HashMap<(usize, crate::catalog::CapacityType), Vec<usize>> = HashMap::new();
    for (t, (o, _)) in bins.iter().enumerate() {
        let c = &cands[*o];
        groups
            .entry((c.pool, c.offering.capacity_type))
            .or_default()
            .push(t);
    }
    let mut order: Vec<usize> = (0..bins.len()).collect();
    order.sort_by(|a, b| {
        cands[bins[*b].0]
            .price()
            .total_cmp(&cands[bins[*a].0].price())
            .then(b.cmp(a))
    });
    let zones: Vec<&str> = bins
        .iter()
        .map(|(o, _)| cands[*o].offering.zone_id.as_str())
        .collect();
    let zone_of = |t: usize| zones[t];
    let mut spread = Spread::default();
    for (t, (_, b)) in bins.iter().enumerate() {
        for &p in &b.pods {
            spread.add(&pods[p], zone_of(t), 1);
        }
    }
    let mut gone = vec![false; bins.len()];
    for x in order {
        let from = &cands[bins[x].0];
        let shared = from.offering.capacity_type == crate::catalog::CapacityType::Spot
            && input.pools[from.pool].max_spot_pool_share.is_some();
        if shared {
            continue;
        }
        // Moves are tried in place and undone if any pod finds no room
        // (copying every bin per node made large plans quadratic).
        let moving = std::mem::take(&mut bins[x].1.pods);
        let mut moved: Vec<(usize, usize)> = Vec::new();
        let mut ok = true;
        // What the moved pods' expected interruptions cost more on their
        // new nodes: a merge that saves less than that is not made.
        let mut added_risk = 0.0;
        let group = &groups[&(from.pool, from.offering.capacity_type)];
        for &p in &moving {
            let need = &need[&p];
            let target = group.iter().copied().find(|&t| {
                let to = &cands[bins[t].0];
                t != x
                    && !gone[t]
                    && pack::Quick::may_fit(need, &room[t])
                    && (to.offering.zone_id == from.offering.zone_id
                        || !pods[p].zone_bound()
                        || (pods[p].group.is_none()
                            && spread.may_move(&pods[p], zone_of(x), zone_of(t))))
                    && (pods[p].group.is_none()
                        || !(efa_bound(input, &pods[p], from) || efa_bound(input, &pods[p], to))
                        || to.offering.instance_type == from.offering.instance_type)
                    && bins[t].1.fits(&pods[p])
                    && pack::compatible(&pods[p], &to.labels, &to.taints)
            });
            match target {
                Some(t) => {
                    bins[t].1.put(p, &pods[p]);
                    pack::Quick::take(&mut room[t], need);
                    spread.add(&pods[p], zone_of(x), -1);
                    spread.add(&pods[p], zone_of(t), 1);
                    moved.push((p, t));
                    added_risk += pod_risk(input, &pods[p], &cands[bins[t].0])
                        - pod_risk(input, &pods[p], from);
                }
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok && added_risk < from.price() {
            gone[x] = true;
        } else {
            for &(p, t) in moved.iter().rev() {
                bins[t].1.take_last(&pods[p]);
                pack::Quick::give(&mut room[t], &need[&p]);
                spread.add(&pods[p], zone_of(t), -1);
                spread.add(&pods[p], zone_of(x), 1);
            }
            bins[x].1.pods = moving;
        }
    }
    bins.into_iter()
        .filter(|(_, b)| !b.pods.is_empty())
        .map(|(o, b)| (o, b.pods))
        .collect()
}

/// The plan's zone-spread pods per selector and zone, so that
/// [`merge_nodes`] may move a spread pod to another zone without breaking
/// its skew: a move is allowed when it raises no zone above the selector's
/// highest count and lowers none below its lowest, so the spread between
/// them (over any set of zones) never grows. The rounded LP leaves each
/// zone's share of a spread class a few pods past whole nodes (a seventh
/// 56-slice p5.48xlarge for 3 MIG pods), and those few can often go to
/// another zone's part-filled node. Counted over the plan's new nodes,
/// as the model counts the skew.
#[derive(Default)]
struct Spread<'a>(HashMap<&'a str, BTreeMap<&'a str, i64>>);

impl<'a> Spread<'a> {
    /// Counts `by` more pods like `pod` in `zone` (nothing for a pod that
    /// does not spread).
    fn add(&mut self, pod: &'a crate::cluster::Pod, zone: &'a str, by: i64) {
        if let Some(s) = &pod.zone_spread {
            *self
                .0
                .entry(&s.selector)
                .or_default()
                .entry(zone)
                .or_default() += by;
        }
    }

    /// Whether `pod` may move from zone `from` to zone `to`.
    fn may_move(&self, pod: &crate::cluster::Pod, from: &str, to: &str) -> bool {
        let Some(counts) = pod
            .zone_spread
            .as_ref()
            .and_then(|s| self.0.get(s.selector.as_str()))
        else {
            return false;
        };
        let at = |z: &str| counts.get(z).copied().unwrap_or(0);
        let most = counts.values().copied().max().unwrap_or(0);
        let least = counts.values().copied().min().unwrap_or(0);
        at(to) < most && at(from) > least
    }
}

/// Whether gang member `pod` on a node of `c` must share its instance type
/// with its whole gang: it requests EFA, `c` is an EFA type of a pool that
/// launches EFA types with the fabric (`Pool::efa`), or its gang must share
/// one network block (`Pod::network_block`). Such a node goes into a
/// cluster placement group, and one group holds one type.
pub(crate) fn efa_bound(input: &Input, pod: &crate::cluster::Pod, c: &Candidate) -> bool {
    let efa = crate::api::labels::RESOURCE_EFA;
    pod.requests.get(efa) > 0
        || (input.pools[c.pool].efa && c.allocatable.get(efa) > 0)
        || pod.network_block.is_some()
}

/// The expected interruption cost of pod `p` on a node of `c`, USD per
/// hour, as [`node_cost`] counts it.
fn pod_risk(input: &Input, p: &crate::cluster::Pod, c: &Candidate) -> f64 {
    super::cost::node_cost(input, c, [p], 0.0).interruption
}

/// Price plus the expected interruption cost of `members` plus the idle
/// accelerator charge of one node of `c`, USD per hour: what
/// `greedy::finish` charges for it.
fn node_cost(input: &Input, c: &Candidate, opts: &Options, members: &[usize]) -> f64 {
    super::cost::node_cost(
        input,
        c,
        members.iter().map(|&j| &input.pods[j]),
        opts.idle_accelerator_charge,
    )
    .total()
}

/// The offerings a plan already holds nodes in ([`right_size`]'s view of
/// the spot pool share): nodes launched so far, and the offerings the
/// current model assigned pods to.
#[derive(Clone, Copy)]
struct Taken<'a> {
    launched: &'a [(usize, Vec<usize>)],
    planned: &'a BTreeSet<usize>,
}

/// The cheapest candidate for one packed node of candidate `o`: the LP
/// relaxation buys fractions of big nodes (1/8 of an 8-GPU node for a
/// one-GPU pod), and rounding turns the fraction into a whole big node; the
/// pods on it may fit a smaller, cheaper node of the same pool and capacity
/// type. Same zone when a pod spreads over zones; a node holding part of a
/// gang keeps its offering (the model put the gang in one zone and one spot
/// pool on purpose), one holding whole gangs may change;
/// a spot pool with a share limit is only entered while this plan has no
/// node in it yet and the model puts none there (one node is within the
/// share's slack); the pool's limits must still afford it beside the nodes
/// still to come (`budgets` holds what is left for this one). Deterministic:
/// ties go to the lower index.
fn right_size(
    input: &Input,
    cands: &[Candidate],
    opts: &Options,
    o: usize,
    node: &[usize],
    taken: Taken,
    budgets: &[Budget],
) -> usize {
    let pods = input.pods;
    let mut gangs: BTreeMap<&str, usize> = BTreeMap::new();
    for &p in node {
        if let Some(g) = &pods[p].group {
            *gangs.entry(g.name.as_str()).or_default() += 1;
        }
    }
    let whole = gangs.iter().all(|(name, &here)| {
        here == pods
            .iter()
            .filter(|p| p.group.as_ref().is_some_and(|g| g.name == *name))
            .count()
    });
    if !whole {
        return o;
    }
    let from = &cands[o];
    let same_zone = node.iter().any(|&p| pods[p].zone_spread.is_some());
    let share = input.pools[from.pool].max_spot_pool_share;
    let total = node.iter().fold(crate::cluster::Resources::new(), |t, &p| {
        t.plus(&pods[p].requests)
    });
    let mut best = (node_cost(input, from, opts, node), o);
    for (i, c) in cands.iter().enumerate() {
        // A node costs at least its price: dearer ones need no closer look.
        if i == o
            || c.price() >= best.0 - 1e-9
            || c.pool != from.pool
            || c.offering.capacity_type != from.offering.capacity_type
            || (same_zone && c.offering.zone_id != from.offering.zone_id)
            || !total.fits_in(&c.allocatable)
            || !node
                .iter()
                .all(|&p| pack::compatible(&pods[p], &c.labels, &c.taints))
            || !budgets[c.pool].affords(c)
            // A reservation's count is the model's to spend, not right-sizing's.
            || c.offering.reservation.is_some()
        {
            continue;
        }
        if share.is_some()
            && c.offering.capacity_type == crate::catalog::CapacityType::Spot
            && (taken.planned.contains(&i) || taken.launched.iter().any(|(l, _)| *l == i))
        {
            continue;
        }
        let cost = node_cost(input, c, opts, node);
        if cost < best.0 - 1e-9 {
            best = (cost, i);
        }
    }
    best.1
}

/// Candidate `o`, or, when `o` is reserved capacity its reservation can no
/// longer take (rounding the LP can buy a node more than the count), the
/// same pool's on-demand offering of the same type in the same zone, so the
/// node (and a gang's zone) stays as planned at the on-demand price.
fn beside_reservation(
    cands: &[Candidate],
    o: usize,
    reserved: &limits::ReservedLeft,
    budgets: &[Budget],
) -> usize {
    if reserved.affords(&cands[o]) {
        return o;
    }
    let from = &cands[o];
    cands
        .iter()
        .position(|c| {
            c.pool == from.pool
                && c.offering.capacity_type == crate::catalog::CapacityType::OnDemand
                && c.offering.instance_type == from.offering.instance_type
                && c.offering.zone_id == from.offering.zone_id
                && budgets[c.pool].affords(c)
        })
        .unwrap_or(o)
}

/// The candidates a class's pods are offered in the model: those that can be
/// cheapest for *its* demand. Per pool and capacity type (and zone, for gang
/// and zone-spread classes, whose zone matters), a candidate stays when it is
/// the cheapest way to hold `m` of the class's pods alone (whole nodes:
/// `ceil(m / k)` nodes plus their pods' expected interruption cost) for some
/// `m` that can matter: every count up to [`EXACT_COUNTS`], the whole demand,
/// and what is left of it after filling nodes of any other shape. So a dozen
/// one-slice MIG pods keep the 7-slice node that holds them in two, not only
/// the 56-slice one that is cheapest per pod when full. Besides those, the
/// cheapest per pod on a full node (for sharing nodes with other classes):
/// the [`KEEP_FREE`] best overall and the best of each capacity type, or the
/// [`KEEP_PER_ZONE_AND_TYPE`] best per pool, zone and capacity type for
/// classes whose zone matters.
fn prune(
    class: &Class,
    options: &[(usize, u32)],
    cands: &[Candidate],
    input: &Input,
    demand: usize,
) -> Vec<(usize, u32)> {
    // Each option's expected interruption cost per pod, once: the sort
    // below compares options many times over.
    let risks: Vec<f64> = options
        .iter()
        .map(|&(i, k)| {
            let c = &cands[i];
            pod_risk_cost(&class.exposure, c, k, input.pools[c.pool].risk_aversion)
        })
        .collect();
    let per_pod: Vec<f64> = options
        .iter()
        .zip(&risks)
        .map(|(&(i, k), r)| cands[i].price() / k as f64 + r)
        .collect();
    let zoned = class.pod.zone_bound();
    let group = |i: usize| {
        let c = &cands[i];
        (
            c.pool,
            c.offering.capacity_type,
            if zoned {
                c.offering.zone_id.as_str()
            } else {
                ""
            },
        )
    };
    let mut keep: BTreeSet<usize> = BTreeSet::new();

    // Cheapest per pod on a full node.
    let mut sorted: Vec<usize> = (0..options.len()).collect();
    sorted.sort_by(|a, b| {
        per_pod[*a]
            .total_cmp(&per_pod[*b])
            .then(options[*a].0.cmp(&options[*b].0))
    });
    if zoned {
        let mut kept: HashMap<_, usize> = HashMap::new();
        for &x in &sorted {
            let n = kept.entry(group(options[x].0)).or_default();
            *n += 1;
            if *n <= KEEP_PER_ZONE_AND_TYPE {
                keep.insert(x);
            }
        }
    } else {
        let mut seen_types = Vec::new();
        for (rank, &x) in sorted.iter().enumerate() {
            let ct = cands[options[x].0].offering.capacity_type;
            if rank < KEEP_FREE || !seen_types.contains(&ct) {
                keep.insert(x);
            }
            seen_types.push(ct);
        }
    }

    // Cheapest whole nodes for the counts that can matter (small classes
    // only: see `DEMAND_AWARE_MAX`).
    if demand > DEMAND_AWARE_MAX {
        return keep.into_iter().map(|x| options[x]).collect();
    }
    let mut counts: BTreeSet<usize> = (1..=demand.min(EXACT_COUNTS)).collect();
    counts.insert(demand.max(1));
    for &(_, k) in options {
        let k = k as usize;
        if !demand.is_multiple_of(k) {
            counts.insert(demand % k);
        }
    }
    // The best option per group and count; each option's group looked up
    // once, not once per count (hashing the zone's name per count was
    // most of the planner's time on 2,000 pods).
    let counts: Vec<usize> = counts.into_iter().collect();
    let mut groups: HashMap<_, usize> = HashMap::new();
    let mut best: Vec<Vec<(f64, usize)>> = Vec::new();
    for (x, &(i, k)) in options.iter().enumerate() {
        let g = *groups.entry(group(i)).or_insert_with(|| {
            best.push(vec![(f64::INFINITY, x); counts.len()]);
            best.len() - 1
        });
        let (price, r) = (cands[i].price(), risks[x]);
        for (slot, &m) in best[g].iter_mut().zip(&counts) {
            let cost = m.div_ceil(k as usize) as f64 * price + m as f64 * r;
            if cost < slot.0 - 1e-9 {
                *slot = (cost, x);
            }
        }
    }
    keep.extend(best.into_iter().flatten().map(|(_, x)| x));
    keep.into_iter().map(|x| options[x]).collect()
}

/// The nodes of `alloc` that pods `which` fill in aggregate (the most of any
/// resource), rounded up: what the LP counted for them.
fn aggregate_nodes(
    pods: &[crate::cluster::Pod],
    which: &[usize],
    alloc: &crate::cluster::Resources,
) -> usize {
    let mut total = crate::cluster::Resources::new();
    for &p in which {
        total.add(&pods[p].requests);
    }
    total
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(r, v)| {
            let a = alloc.get(r);
            if a > 0 {
                v as f64 / a as f64
            } else {
                f64::INFINITY
            }
        })
        .fold(0.0, f64::max)
        .min(which.len() as f64)
        .ceil() as usize
}

/// Offers every class of a pruned tier the offerings (instance type, zone
/// and capacity type, in any pool the class may use) that are some class's
/// cheapest per pod. Pruning per class cannot see which nodes are worth
/// sharing: the LP over every candidate fills the spare CPU and memory of a
/// general pool's trn1.32xlarge, bought for one 16-device Neuron pod, with
/// CPU pods, and puts CPU pods beside 8-GPU pods on a general pool's
/// p4de.24xlarge, but CPU classes never kept those nodes, nor Neuron and
/// GPU classes the general pool's copy of their own best. `bench plan --pods
/// 20000` (release, seeds 1, 7 and 42): the LP over the kept candidates falls
/// from 2.7% over the lower bound to within 0.3% of it. (Offering every used
/// offering of a first LP did as well, at the cost of solving twice.)
fn widen(
    work: &mut [ClassOptions],
    compatible: &[&[(usize, u32)]],
    classes: &[Class],
    cands: &[Candidate],
    input: &Input,
) {
    let key = |o: usize| {
        let c = &cands[o].offering;
        (
            c.instance_type.as_str(),
            c.zone_id.as_str(),
            c.capacity_type,
        )
    };
    let best: BTreeSet<_> = work
        .iter()
        .filter_map(|w| {
            let class = &classes[w.class];
            let per_pod = |&(o, k): &(usize, u32)| {
                let c = &cands[o];
                c.price() / f64::from(k)
                    + pod_risk_cost(&class.exposure, c, k, input.pools[c.pool].risk_aversion)
            };
            w.options
                .iter()
                .min_by(|a, b| per_pod(a).total_cmp(&per_pod(b)))
                .map(|(o, _)| key(*o))
        })
        .collect();
    for (w, all) in work.iter_mut().zip(compatible) {
        let have: BTreeSet<usize> = w.options.iter().map(|(o, _)| *o).collect();
        w.options.extend(
            all.iter()
                .filter(|(o, _)| !have.contains(o) && best.contains(&key(*o))),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{CapacityType, Catalog};
    use crate::cluster::resources::{CPU, MEMORY};
    use crate::cluster::{Pod, Pool, Resources, ZoneSpread};

    #[test]
    fn a_spread_pod_moves_to_another_zone_only_where_its_skew_still_holds() {
        // Four 3900m pods to an m6i.4xlarge. `web` spreads with skew 1 over
        // three zones (named here by order): 2, 1 and 2 pods. az3's second
        // `web` pod sits alone on a node; az2 has room and the fewest `web`
        // pods, so the pod may go there (2, 2, 1) and its node is dropped.
        let catalog = Catalog::embedded().unwrap();
        let pools = [Pool::new("cpu")];
        let pod = |name: &str, spread: bool| {
            let mut p = Pod::new(name, Resources::new().with(CPU, 3900).with(MEMORY, 8 << 30));
            if spread {
                p.zone_spread = Some(ZoneSpread {
                    max_skew: 1,
                    selector: "app=web".into(),
                });
            }
            p
        };
        let pods = vec![
            pod("web-0", true), // 0: az1
            pod("web-1", true), // 1: az1
            pod("x-0", false),  // 2: az1
            pod("x-1", false),  // 3: az1
            pod("web-2", true), // 4: az2
            pod("x-2", false),  // 5: az2
            pod("web-3", true), // 6: az3
            pod("x-3", false),  // 7: az3
            pod("x-4", false),  // 8: az3
            pod("x-5", false),  // 9: az3
            pod("web-4", true), // 10: az3, alone
        ];
        let input = Input::offline(&catalog, "us-east-1", &pools, &pods);
        let cands = candidates::candidates(&input);
        // The first three zones offering on-demand m6i.4xlarge.
        let at: Vec<usize> = (0..cands.len())
            .filter(|&i| {
                cands[i].offering.instance_type == "m6i.4xlarge"
                    && cands[i].offering.capacity_type == CapacityType::OnDemand
            })
            .collect();
        assert!(at.len() >= 3, "{} zones", at.len());
        let (az1, az2, az3) = (at[0], at[1], at[2]);
        let launched = vec![
            (az1, vec![0, 1, 2, 3]),
            (az2, vec![4, 5]),
            (az3, vec![6, 7, 8, 9]),
            (az3, vec![10]),
        ];
        let merged = merge_nodes(&input, &cands, launched);
        assert_eq!(
            merged,
            vec![
                (az1, vec![0, 1, 2, 3]),
                (az2, vec![4, 5, 10]),
                (az3, vec![6, 7, 8, 9])
            ]
        );

        // 2, 2 and 1 `web` pods (`x-2` is a `web` pod now): az3's lone pod
        // may not leave the zone with the fewest, nor go to az2, which has
        // the most; az2's two may not both go to az3. Nothing merges.
        let mut more = pods.clone();
        more[5] = pod("web-5", true);
        let input = Input {
            pods: &more,
            ..input
        };
        let launched = vec![(az1, vec![0, 1, 2, 3]), (az2, vec![4, 5]), (az3, vec![10])];
        let merged = merge_nodes(&input, &cands, launched.clone());
        assert_eq!(merged, launched);
    }
}
