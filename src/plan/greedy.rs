//! The Karpenter-style greedy baseline, as Karpenter's scheduler works: pods
//! sorted by CPU then memory, largest first; each goes to the first existing
//! node that takes it, else to the first new node under construction that can
//! still hold it (a new node keeps every instance type that fits all its pods),
//! else opens a new node of the highest-weight pool that can take it. At the
//! end every new node becomes the cheapest offering (spot when cheaper) among
//! its remaining options (pods of a node no option fits are reported).
//!
//! It keeps every rule Karpenter keeps that the MIP keeps too, as Karpenter
//! keeps it, so that "x greedy" compares with a baseline that breaks no
//! rule (`tests/greedy_rules.rs` checks its plans against the oracle's
//! rules):
//! - node selectors and required node affinity, taints and tolerations
//!   (`pack::compatible`), on existing and new nodes;
//! - required pod anti-affinity and `DoNotSchedule` topology spread on the
//!   hostname: at most [`Pod::per_node_max`] pods of one anti-affinity key
//!   share a node (Karpenter counts hostname spread over new nodes the
//!   same way: each starts empty);
//! - zone topology spread (`DoNotSchedule`; `ScheduleAnyway` is a preference
//!   and is read as none, as by the MIP): a pod that spreads goes only to a
//!   zone where it keeps the skew within `maxSkew` (over the zones it could
//!   use, counted over the new nodes, as the MIP counts it), its node then
//!   kept to the least-loaded such zone;
//! - NodePool limits, with Karpenter's fallback: a new node is of the first
//!   pool (by weight, then name) whose limits still afford one of its
//!   options, and a pod no pool has room for is reported. Each new node is
//!   charged its current pick (what it would become now), recharged as its
//!   options narrow, and a pod joins a node only where the node's new pick
//!   still fits; so the picks together always fit, with no worst-case
//!   reservation (Karpenter charges each NodeClaim the largest of its
//!   instance types, which would leave pods pending that fit);
//! - gangs pod by pod: Karpenter has no gang semantics, so it launches what
//!   it can of a gang, each member on its own merits, in any zone. Nor does
//!   it keep Quartermaster's own rules (the spot pool share, network blocks
//!   for placement groups).

use super::candidates::{self, Candidate};
use super::classes::Class;
use super::limits;
use super::pack::{self, Bin};
use super::{
    ExistingPlacement, Input, Options, Plan, PlannedNode, SolvedBy, Strategy, Unschedulable,
};
use crate::catalog::CapacityType;
use crate::cluster::requirements::{NodeAffinity, Toleration};
use crate::cluster::resources::{CPU, MEMORY};
use crate::cluster::{Pod, Resources};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A new node under construction: the pods on it and the candidates that can
/// still hold them all.
struct Building {
    options: Vec<usize>,
    pods: Vec<usize>,
    total: Resources,
    /// Element-wise largest allocatable of the options: a quick reject.
    room: Resources,
    /// The option it would become now, charged to the limits.
    pick: usize,
}

/// The limits of every pool and the reservations, charged with each new
/// node's current pick as nodes are opened and their options narrow, so
/// that the picks together always fit.
struct Limits {
    pools: Vec<limits::Budget>,
    reserved: limits::ReservedLeft,
}

impl Limits {
    fn affords(&self, c: &Candidate) -> bool {
        self.pools[c.pool].affords(c) && self.reserved.affords(c)
    }

    fn charge(&mut self, c: &Candidate) {
        self.pools[c.pool].charge(c);
        self.reserved.charge(c);
    }

    fn refund(&mut self, c: &Candidate) {
        self.pools[c.pool].refund(c);
        self.reserved.refund(c);
    }
}

/// How a new node's offering is chosen among the options left to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocation {
    /// The cheapest option (spot when cheaper).
    LowestPrice,
    /// As Karpenter chooses: a reservation first; else spot whenever an
    /// option is cheaper than the cheapest on-demand one (Karpenter drops
    /// dearer spot types and then always prefers spot), and among those EC2
    /// Fleet's `price-capacity-optimized`: the pools with the most capacity
    /// (an interruption rate at most [`DEEP_POOL_RATE_BAND`] times the
    /// lowest of them), then the cheapest; else the cheapest on-demand.
    PriceCapacity,
}

/// How far above the calmest spot pool's interruption rate a pool still
/// counts as one of those with the most capacity, for
/// [`Allocation::PriceCapacity`]: EC2 does not publish its capacity ranking,
/// so the simulator takes the pools' reclaim rates for it, and a factor of
/// two for "among the deepest".
pub const DEEP_POOL_RATE_BAND: f64 = 2.0;

/// The option `allocation` picks among `options` (those the limits
/// allow), `None` when there are none.
fn pick(options: &[usize], cands: &[Candidate], allocation: Allocation) -> Option<usize> {
    let cheapest = |it: &mut dyn Iterator<Item = usize>| {
        it.min_by(|a, c| {
            cands[*a]
                .price()
                .total_cmp(&cands[*c].price())
                .then(a.cmp(c))
        })
    };
    if allocation == Allocation::LowestPrice {
        return cheapest(&mut options.iter().copied());
    }
    let of = |t: CapacityType| {
        options
            .iter()
            .copied()
            .filter(move |&o| cands[o].offering.capacity_type == t)
    };
    if let Some(r) = cheapest(&mut of(CapacityType::Reserved)) {
        return Some(r);
    }
    let on_demand = cheapest(&mut of(CapacityType::OnDemand));
    let ceiling = on_demand.map_or(f64::INFINITY, |o| cands[o].price());
    let spot: Vec<usize> = of(CapacityType::Spot)
        .filter(|&o| cands[o].price() < ceiling)
        .collect();
    let calmest = spot
        .iter()
        .map(|&o| cands[o].rate)
        .fold(f64::INFINITY, f64::min);
    cheapest(
        &mut spot
            .iter()
            .copied()
            .filter(|&o| cands[o].rate <= calmest * DEEP_POOL_RATE_BAND),
    )
    .or(on_demand)
}

/// Plans with the greedy baseline, each node's offering chosen by
/// `allocation`.
pub fn plan(input: &Input, allocation: Allocation) -> Plan {
    let pods = input.pods;
    let cands = candidates::candidates(input);
    let mut order: Vec<usize> = (0..pods.len()).collect();
    order.sort_by(|a, b| {
        let key = |p: &Pod| (p.requests.get(CPU), p.requests.get(MEMORY));
        key(&pods[*b]).cmp(&key(&pods[*a])).then(a.cmp(b))
    });

    let mut existing: Vec<Bin> = input.nodes.iter().map(|n| Bin::of_node(n)).collect();
    let mut on_existing = Vec::new();
    let mut building: Vec<Building> = Vec::new();
    let mut unschedulable = Vec::new();
    let mut spread = Spread::default();
    let mut open = Limits {
        pools: limits::budgets(input),
        reserved: limits::ReservedLeft::of(input),
    };

    // Where the first existing node that may take a pod of each shape
    // (requests, affinity, tolerations) is: room only shrinks as pods land,
    // so a node that did not take a pod of a shape takes no later one of it,
    // and thousands of like pods cost one scan of the nodes, not one each.
    // Pods with a per-node cap scan from the first node.
    let mut first_fit: crate::cluster::FastMap<(&Resources, &NodeAffinity, &[Toleration]), usize> =
        Default::default();
    'pods: for i in order {
        let p = &pods[i];
        let shape = (&p.requests, &p.affinity, p.tolerations.as_slice());
        let from = match p.per_node_max {
            None => first_fit.get(&shape).copied().unwrap_or(0),
            Some(_) => 0,
        };
        let at = (from..input.nodes.len()).find(|&n| {
            let node = input.nodes[n];
            !node.unschedulable
                && pack::compatible(p, &node.labels, &node.taints)
                && existing[n].fits(p)
        });
        if p.per_node_max.is_none() {
            first_fit.insert(shape, at.unwrap_or(input.nodes.len()));
        }
        if let Some(n) = at {
            existing[n].put(i, p);
            on_existing.push((i, n));
            continue 'pods;
        }
        let fits: Vec<bool> = cands
            .iter()
            .map(|c| {
                pack::compatible(p, &c.labels, &c.taints) && p.requests.fits_in(&c.allocatable)
            })
            .collect();
        let compatible: Vec<usize> = (0..cands.len()).filter(|&o| fits[o]).collect();
        if compatible.is_empty() {
            let class = Class::of(p, i);
            unschedulable.push(Unschedulable {
                pod: p.name.clone(),
                reason: candidates::explain_unschedulable(&class, &cands, input.pools),
            });
            continue;
        }
        // The zones a pod that spreads may go to without raising its skew
        // past maxSkew, over the zones it could use.
        let allowed: Option<Vec<bool>> = p.zone_spread.as_ref().map(|_| {
            let eligible: BTreeSet<&str> = compatible
                .iter()
                .map(|&o| cands[o].offering.zone_id.as_str())
                .collect();
            let zones = spread.allowed_zones(p, &eligible).unwrap_or_default();
            cands
                .iter()
                .map(|c| zones.contains(c.offering.zone_id.as_str()))
                .collect()
        });
        let allowed = |o: usize| allowed.as_ref().is_none_or(|a| a[o]);
        for b in building.iter_mut() {
            if !anti_ok(b, p, pods) {
                continue;
            }
            let total = b.total.plus(&p.requests);
            if !total.fits_in(&b.room) {
                continue;
            }
            let still: Vec<usize> = b
                .options
                .iter()
                .copied()
                .filter(|&o| fits[o] && allowed(o) && total.fits_in(&cands[o].allocatable))
                .collect();
            // The node's pick may change as its options narrow: it must
            // still fit the limits with every other node's.
            open.refund(&cands[b.pick]);
            let still: Vec<usize> = still
                .into_iter()
                .filter(|&o| open.affords(&cands[o]))
                .collect();
            if still.is_empty() {
                open.charge(&cands[b.pick]);
                continue;
            }
            let still = spread.place(p, still, &cands);
            b.pick = pick(&still, &cands, allocation).unwrap_or(b.pick);
            open.charge(&cands[b.pick]);
            b.room = room(&still, &cands);
            b.options = still;
            b.pods.push(i);
            b.total = total;
            continue 'pods;
        }
        // A new node of the first pool (by weight, then name) with a
        // compatible option in a zone the spread allows that the limits
        // still afford, in the least-loaded such zone when the pod spreads
        // over zones; its pick is charged to the limits.
        let options: Vec<usize> = compatible.into_iter().filter(|&o| allowed(o)).collect();
        let opened = first_pool_within_limits(options, &cands, input, &open).and_then(|o| {
            let o = spread.place(p, o, &cands);
            Some((pick(&o, &cands, allocation)?, o))
        });
        let Some((first, options)) = opened else {
            unschedulable.push(Unschedulable {
                pod: p.name.clone(),
                reason: LIMITS_REACHED.into(),
            });
            continue;
        };
        open.charge(&cands[first]);
        building.push(Building {
            pick: first,
            room: room(&options, &cands),
            options,
            pods: vec![i],
            total: p.requests.clone(),
        });
    }

    // Each node becomes its cheapest option that its pool's limits still
    // allow, in the order the nodes were opened.
    let mut budgets = limits::budgets(input);
    let mut reserved = limits::ReservedLeft::of(input);
    let mut launched = Vec::new();
    for b in building {
        let affordable: Vec<usize> = b
            .options
            .iter()
            .copied()
            .filter(|&o| budgets[cands[o].pool].affords(&cands[o]) && reserved.affords(&cands[o]))
            .collect();
        let cheapest = pick(&affordable, &cands, allocation);
        match cheapest {
            Some(o) => {
                budgets[cands[o].pool].charge(&cands[o]);
                reserved.charge(&cands[o]);
                launched.push((o, b.pods));
            }
            None => unschedulable.extend(b.pods.iter().map(|&j| Unschedulable {
                pod: pods[j].name.clone(),
                reason: LIMITS_REACHED.into(),
            })),
        }
    }
    finish(
        match allocation {
            Allocation::LowestPrice => Strategy::Greedy,
            Allocation::PriceCapacity => Strategy::Karpenter,
        },
        input,
        &cands,
        launched,
        on_existing,
        unschedulable,
        &Options::default(),
    )
}

/// Why a pod no pool's limits leave room for is not placed.
const LIMITS_REACHED: &str = "NodePool limits reached for every compatible pool";

/// The `options` of the first pool, by weight (highest first) and then by
/// name, that the limits in `open` still afford, as Karpenter tries its
/// NodePools in turn for a new NodeClaim; `None` when no pool's limits
/// leave room.
fn first_pool_within_limits(
    options: Vec<usize>,
    cands: &[Candidate],
    input: &Input,
    open: &Limits,
) -> Option<Vec<usize>> {
    let affordable: Vec<usize> = options
        .into_iter()
        .filter(|&o| open.affords(&cands[o]))
        .collect();
    let order = |o: usize| {
        let c = &cands[o];
        (
            std::cmp::Reverse(c.weight),
            input.pools[c.pool].name.as_str(),
            c.pool,
        )
    };
    let first = affordable.iter().map(|&o| order(o)).min()?;
    Some(
        affordable
            .into_iter()
            .filter(|&o| order(o) == first)
            .collect(),
    )
}

/// Pods that spread over zones, counted by spread and zone as they are
/// placed on new nodes (as the MIP counts the skew: over the plan's new
/// nodes).
#[derive(Default)]
struct Spread(HashMap<String, BTreeMap<String, u32>>);

impl Spread {
    fn count(&self, selector: &str, zone: &str) -> u32 {
        self.0
            .get(selector)
            .and_then(|z| z.get(zone))
            .copied()
            .unwrap_or(0)
    }

    /// The `eligible` zones where one more of `p`'s pods keeps the skew
    /// within `maxSkew`: those holding fewer than `maxSkew` more than the
    /// emptiest eligible zone. `None` for a pod that does not spread.
    fn allowed_zones<'z>(
        &self,
        p: &Pod,
        eligible: &BTreeSet<&'z str>,
    ) -> Option<BTreeSet<&'z str>> {
        let s = p.zone_spread.as_ref()?;
        let count = |z: &str| self.count(&s.selector, z);
        let least = eligible.iter().map(|z| count(z)).min().unwrap_or(0);
        Some(
            eligible
                .iter()
                .copied()
                .filter(|z| count(z) < least + s.max_skew)
                .collect(),
        )
    }

    /// For a pod that spreads, keeps the `options` of its node in the
    /// least-loaded of their zones (then the first by name) and counts the
    /// pod there; a pod that does not spread leaves them as they are.
    fn place(&mut self, p: &Pod, mut options: Vec<usize>, cands: &[Candidate]) -> Vec<usize> {
        let Some(s) = &p.zone_spread else {
            return options;
        };
        let zone_of = |o: &usize| cands[*o].offering.zone_id.as_str();
        let Some(best) = options
            .iter()
            .map(zone_of)
            .min_by_key(|z| (self.count(&s.selector, z), *z))
            .map(str::to_string)
        else {
            return options;
        };
        options.retain(|o| zone_of(o) == best);
        *self
            .0
            .entry(s.selector.clone())
            .or_default()
            .entry(best)
            .or_default() += 1;
        options
    }
}

/// Whether `p` keeps its per-node cap on the node `b`.
fn anti_ok(b: &Building, p: &Pod, pods: &[Pod]) -> bool {
    let Some(key) = pack::anti_affinity_key(p) else {
        return true;
    };
    let cap = p.per_node_max.unwrap_or(u32::MAX) as usize;
    b.pods
        .iter()
        .filter(|j| pack::anti_affinity_key(&pods[**j]).as_ref() == Some(&key))
        .count()
        < cap
}

fn room(options: &[usize], cands: &[Candidate]) -> Resources {
    options
        .iter()
        .fold(Resources::new(), |r, &o| r.max_with(&cands[o].allocatable))
}

/// Turns launched nodes `(candidate, pods)` into a [`Plan`], pricing every
/// strategy's nodes the same way: price, plus each pod's expected
/// interruption cost, plus the idle-accelerator charge.
pub fn finish(
    strategy: Strategy,
    input: &Input,
    cands: &[Candidate],
    launched: Vec<(usize, Vec<usize>)>,
    on_existing: Vec<(usize, usize)>,
    unschedulable: Vec<Unschedulable>,
    opts: &Options,
) -> Plan {
    let pods = input.pods;
    let mut nodes = Vec::new();
    let mut cost = 0.0;
    let mut risk_adjusted = 0.0;
    let (mut interruption, mut idle_total) = (0.0, 0.0);
    for (o, members) in launched {
        let c = &cands[o];
        let terms = super::cost::node_cost(
            input,
            c,
            members.iter().map(|&j| &pods[j]),
            opts.idle_accelerator_charge,
        );
        let risk = terms.interruption;
        let idle = terms.idle;
        cost += c.price();
        interruption += risk;
        idle_total += idle;
        risk_adjusted += c.price() + risk + idle;
        nodes.push(PlannedNode {
            nodepool: input.pools[c.pool].name.clone(),
            instance_type: c.offering.instance_type.clone(),
            zone: c.offering.zone_id.clone(),
            zone_name: input
                .catalog
                .zone_name(&c.offering.region, &c.offering.zone_id),
            capacity_type: c.offering.capacity_type,
            reservation: c.offering.reservation.as_ref().map(|r| r.id.clone()),
            price_per_hour: c.price(),
            interruption_cost_per_hour: risk,
            idle_charge_per_hour: idle,
            pods: members.iter().map(|&j| pods[j].name.clone()).collect(),
            labels: c.labels.to_map(),
            taints: c
                .taints
                .iter()
                .map(|t| crate::api::Taint::new(&t.key, &t.value, t.effect))
                .collect(),
        });
    }
    nodes.sort_by(|a, b| {
        (&a.nodepool, &a.instance_type, &a.zone).cmp(&(&b.nodepool, &b.instance_type, &b.zone))
    });
    Plan {
        strategy,
        nodes,
        existing: on_existing
            .into_iter()
            .map(|(p, n)| ExistingPlacement {
                pod: pods[p].name.clone(),
                node: input.nodes[n].name.clone(),
            })
            .collect(),
        unschedulable,
        cost_per_hour: cost,
        interruption_cost_per_hour: interruption,
        idle_charge_per_hour: idle_total,
        risk_adjusted_cost_per_hour: risk_adjusted,
        lower_bound_per_hour: None,
        lower_bound_ms: None,
        optimal: false,
        solved_by: SolvedBy::Greedy,
        solve_ms: 0.0,
        explanations: Vec::new(),
    }
}
