//! Demand to launch plan. Pending pods are grouped into classes, placed on
//! existing capacity first, and the rest get new nodes chosen by a
//! mixed-integer program over offerings ([`mip`]) or by the Karpenter-style
//! greedy baseline ([`greedy`]). Pure: no I/O, no clock (solve time is
//! measured by the caller-supplied timer only for reporting).
//!
//! The formulation and the risk model are written up in `docs/planner.md`.

pub mod bound;
pub mod candidates;
pub mod classes;
pub mod cost;
pub mod dra;
pub mod greedy;
pub mod limits;
pub mod mip;
pub mod pack;
pub mod rightsize;
pub mod risk;
pub mod workload;

pub use risk::pod_risk_cost;

use crate::catalog::{CapacityType, Catalog, Offering};
use crate::cluster::{NodeState, Pod, Pool};
use candidates::Candidate;
use serde::Serialize;
use std::time::Duration;

/// Which planner to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// The mixed-integer program.
    Mip,
    /// The Karpenter-style greedy baseline, each node its cheapest
    /// offering (spot when cheaper).
    Greedy,
    /// The greedy baseline with Karpenter's own choice of offering:
    /// reserved capacity first, then spot whenever an offering is cheaper
    /// than the cheapest on-demand one, among those the pools with the most
    /// capacity (price-capacity-optimized), then on-demand.
    Karpenter,
}

/// How a plan's placements were found, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SolvedBy {
    /// Branch and bound finished within its MIP gap.
    BranchAndBound,
    /// Branch and bound stopped at the time limit with an integer solution.
    TimeLimit,
    /// The LP relaxation, rounded and packed (large models, or no integer
    /// solution in time).
    LpRounding,
    /// The greedy baseline.
    Greedy,
}

/// Knobs of a planning run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Longest the whole plan may spend in branch and bound, over all its
    /// tiers, before returning the best plan found (rounding the LP once
    /// the time is spent).
    pub time_limit: Duration,
    /// Relative gap at which the MIP stops searching.
    pub mip_gap: f64,
    /// Charge per idle accelerator-hour, as a share of the node's price per
    /// accelerator: nudges ties toward fuller nodes.
    pub idle_accelerator_charge: f64,
    /// Integer variables above which branch and bound is not attempted and
    /// the LP is rounded instead: on larger models microlp rarely finds an
    /// integer point within the time limit, and the rounded LP, packed, is
    /// within a few percent of the bound (see `docs/planner.md`). 0 never
    /// branches, which makes plans independent of machine speed (the
    /// simulator's choice).
    pub max_branch_and_bound_integers: usize,
    /// Whether to compute the lower bound of a MIP plan ([`bound`]): it
    /// costs about as much as the plan, and only reports need it (the
    /// `plan` and `bench` commands turn it on; the controller does not).
    pub lower_bound: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            time_limit: Duration::from_millis(800),
            mip_gap: 0.01,
            idle_accelerator_charge: 0.01,
            max_branch_and_bound_integers: 200,
            lower_bound: false,
        }
    }
}

/// A learned hourly interruption rate for an offering, if there is one.
pub type RateFn<'a> = dyn Fn(&Offering) -> Option<f64> + 'a;

/// What the planner reads.
pub struct Input<'a> {
    /// Instance types and offerings.
    pub catalog: &'a Catalog,
    /// Region to launch in.
    pub region: &'a str,
    /// NodePools.
    pub pools: &'a [Pool],
    /// Existing nodes and in-flight claims, borrowed: callers hold them in
    /// their own structures, and copying every node's labels for each plan
    /// dominated long simulations.
    pub nodes: &'a [&'a NodeState],
    /// Pending pods.
    pub pods: &'a [Pod],
    /// Offerings known to be out of capacity.
    pub unavailable: &'a dyn Fn(&Offering) -> bool,
    /// Learned interruption rates per hour, where known; the advisor-derived
    /// rate of the catalog otherwise.
    pub learned_rate: Option<&'a RateFn<'a>>,
    /// The pools' offerings, where the caller keeps them between plans
    /// ([`candidates::Offerings`]); built per plan otherwise.
    pub offerings: Option<&'a candidates::Offerings>,
    /// The time of planning: with it, pods with a deadline
    /// (`quartermaster.dev/deadline`) leave spot once their slack no longer
    /// covers spot's expected delays (see [`risk::spot_delay_hours`]).
    pub now: Option<chrono::DateTime<chrono::Utc>>,
}

/// Every offering available: the default of [`Input::offline`].
fn never_unavailable(_: &Offering) -> bool {
    false
}

impl<'a> Input<'a> {
    /// An input that plans `pods` from scratch, as `plan`, `bench` and the
    /// simulator's bound do: no existing nodes, every offering available,
    /// the catalog's interruption rates, and no clock (deadlines are not
    /// read). [`Input::with_nodes`] and [`Input::at`] add the rest.
    pub fn offline(
        catalog: &'a Catalog,
        region: &'a str,
        pools: &'a [Pool],
        pods: &'a [Pod],
    ) -> Input<'a> {
        Input {
            catalog,
            region,
            pools,
            nodes: &[],
            pods,
            unavailable: &never_unavailable,
            learned_rate: None,
            offerings: None,
            now: None,
        }
    }

    /// The same input with existing nodes and in-flight claims, whose room
    /// is used before anything is launched.
    pub fn with_nodes(self, nodes: &'a [&'a NodeState]) -> Input<'a> {
        Input { nodes, ..self }
    }

    /// The same input planned at `now`, so that pods with a deadline leave
    /// spot when their slack runs out.
    pub fn at(self, now: chrono::DateTime<chrono::Utc>) -> Input<'a> {
        Input {
            now: Some(now),
            ..self
        }
    }
}

/// A node to launch.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedNode {
    /// NodePool.
    pub nodepool: String,
    /// Instance type.
    pub instance_type: String,
    /// Zone ID.
    pub zone: String,
    /// Zone name, as the catalog's zone names have it for the account
    /// (the node's `topology.kubernetes.io/zone`).
    pub zone_name: String,
    /// Spot, on-demand or reserved.
    pub capacity_type: CapacityType,
    /// The capacity reservation it launches into (reserved only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// USD per hour.
    pub price_per_hour: f64,
    /// Expected interruption cost of its pods, USD per hour.
    pub interruption_cost_per_hour: f64,
    /// Idle-accelerator charge of the node, USD per hour: a share
    /// (`Options::idle_accelerator_charge`) of its price per accelerator its
    /// pods leave idle. Not money spent: a tie-breaker toward fuller nodes.
    pub idle_charge_per_hour: f64,
    /// Pods it is launched for (`namespace/name`).
    pub pods: Vec<String>,
    /// The labels the node will carry: its instance type's, offering's and
    /// pool's, as the NodeClaim will give them (which adds
    /// `quartermaster.dev/efa-interfaces` when its pods request EFA).
    pub labels: crate::cluster::Labels,
    /// The taints the node will carry once initialized (its pool's).
    pub taints: Vec<crate::api::Taint>,
}

/// A pod placed on capacity that already exists.
#[derive(Debug, Clone, Serialize)]
pub struct ExistingPlacement {
    /// Pod.
    pub pod: String,
    /// Node or in-flight claim.
    pub node: String,
}

/// A pod the plan cannot place, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unschedulable {
    /// Pod.
    pub pod: String,
    /// The reason, naming what removed the last candidates.
    pub reason: String,
}

/// The result of planning.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Which planner made it.
    pub strategy: Strategy,
    /// Nodes to launch.
    pub nodes: Vec<PlannedNode>,
    /// Pods that fit on existing capacity.
    pub existing: Vec<ExistingPlacement>,
    /// Pods with no place.
    pub unschedulable: Vec<Unschedulable>,
    /// USD per hour of the new nodes.
    pub cost_per_hour: f64,
    /// Expected interruption cost of the new nodes' pods, USD per hour.
    pub interruption_cost_per_hour: f64,
    /// Idle-accelerator charge of the new nodes, USD per hour (see
    /// [`PlannedNode::idle_charge_per_hour`]).
    pub idle_charge_per_hour: f64,
    /// The objective every planner minimises and reports:
    /// `cost_per_hour` + `interruption_cost_per_hour` +
    /// `idle_charge_per_hour`, USD per hour ([`cost::node_cost`]).
    pub risk_adjusted_cost_per_hour: f64,
    /// A lower bound on `risk_adjusted_cost_per_hour` of any plan that puts
    /// the same pods on new nodes, over every offering the pools allow
    /// (MIP with `Options::lower_bound` only; [`bound`] says how).
    pub lower_bound_per_hour: Option<f64>,
    /// Time spent computing the bound, ms (not part of `solve_ms`).
    pub lower_bound_ms: Option<f64>,
    /// Whether the plan is proven optimal: its risk-adjusted cost is within
    /// the MIP gap (`Options::mip_gap`) of the lower bound.
    pub optimal: bool,
    /// How the placements were found.
    pub solved_by: SolvedBy,
    /// Time spent planning, ms.
    pub solve_ms: f64,
    /// Why each chosen type beat the next best (filled on request).
    pub explanations: Vec<String>,
}

impl Plan {
    /// Relative distance between the risk-adjusted cost and the lower bound.
    pub fn gap(&self) -> Option<f64> {
        let lb = self.lower_bound_per_hour?;
        (lb > 0.0).then(|| self.risk_adjusted_cost_per_hour / lb - 1.0)
    }
}

/// Plans with the chosen strategy; `now` (seconds on a monotonic clock)
/// measures solve time for reporting and bounds the MIP's whole plan by
/// `options.time_limit`.
pub fn plan(input: &Input, strategy: Strategy, options: &Options, now: &dyn Fn() -> f64) -> Plan {
    if input.pods.iter().any(|p| held_reason(p).is_some()) {
        // Pods whose needs the planner does not understand are reported,
        // never placed as though those needs were absent.
        let (held, placeable): (Vec<&Pod>, Vec<&Pod>) =
            input.pods.iter().partition(|p| held_reason(p).is_some());
        let pods: Vec<Pod> = placeable.into_iter().cloned().collect();
        let mut p = plan(
            &Input {
                pods: &pods,
                ..*input
            },
            strategy,
            options,
            now,
        );
        p.unschedulable
            .extend(held.into_iter().map(|pod| Unschedulable {
                pod: pod.name.clone(),
                reason: format!("not placeable: {}", held_reason(pod).unwrap_or_default()),
            }));
        return p;
    }
    if input.pods.iter().any(|p| p.devices.is_some()) {
        // DRA claims become demand first (`dra`).
        let cands = candidates::candidates(input);
        let prepared = dra::prepare(input, &cands);
        let mut p = solve(
            &Input {
                pods: &prepared.pods,
                ..*input
            },
            strategy,
            options,
            now,
        );
        p.unschedulable.extend(prepared.held);
        dra::expand(&mut p, &prepared.members);
        return p;
    }
    solve(input, strategy, options, now)
}

/// [`plan`] of pods whose DRA claims are demand already.
fn solve(input: &Input, strategy: Strategy, options: &Options, now: &dyn Fn() -> f64) -> Plan {
    let start = now();
    let mut p = match strategy {
        Strategy::Mip => mip::plan(input, options, now),
        Strategy::Greedy => greedy::plan(input, greedy::Allocation::LowestPrice),
        Strategy::Karpenter => greedy::plan(input, greedy::Allocation::PriceCapacity),
    };
    let planned = now();
    p.solve_ms = (planned - start) * 1000.0;
    if strategy == Strategy::Mip && options.lower_bound {
        let lb = bound::lower_bound(input, &launched_pods(input, &p), options);
        p.lower_bound_per_hour = Some(lb);
        p.lower_bound_ms = Some((now() - planned) * 1000.0);
        p.optimal = p.risk_adjusted_cost_per_hour <= lb * (1.0 + options.mip_gap) + 1e-9;
    }
    p
}

/// Why a pod is held back from planning, if it is: needs the planner does
/// not understand ([`Pod::not_placeable`]), or DRA claims that were not
/// matched against the cluster's DRA objects (a caller that read none).
fn held_reason(p: &Pod) -> Option<String> {
    if !p.not_placeable.is_empty() {
        return Some(p.not_placeable.join("; "));
    }
    (!p.resource_claims.is_empty() && p.devices.is_none()).then(|| {
        let names: Vec<&str> = p.resource_claims.iter().map(|c| c.name.as_str()).collect();
        format!(
            "it asks for devices through DRA resource claims ({}), which were not matched against DeviceClasses and ResourceClaims",
            names.join(", ")
        )
    })
}

/// Indices (into `input.pods`) of the pods `plan` launches new nodes for.
pub fn launched_pods(input: &Input, plan: &Plan) -> Vec<usize> {
    let index: std::collections::HashMap<&str, usize> = input
        .pods
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.as_str(), i))
        .collect();
    plan.nodes
        .iter()
        .flat_map(|n| n.pods.iter())
        .filter_map(|name| index.get(name.as_str()).copied())
        .collect()
}

/// One sentence per chosen offering: why it was chosen for the pods it was
/// launched for, priced per pod (price share plus expected interruption
/// cost). When it is the cheapest such option, the sentence says what it
/// beats; when a cheaper one exists, the sentence names the constraint that
/// ruled the cheaper one out (the pool's limits or spot pool share, zone
/// spread, the gang's zone, sharing the node with other pods), and never
/// that the dearer option "beats" it.
pub fn explain(input: &Input, plan: &Plan) -> Vec<String> {
    if input.pods.iter().any(|p| p.devices.is_some()) {
        // As planned: DRA claims as demand, pods sharing a claim as one.
        let prepared = dra::prepare(input, &candidates::candidates(input));
        let mut named = plan.clone();
        for n in &mut named.nodes {
            n.pods
                .retain(|p| prepared.pods.iter().any(|q| q.name == *p));
        }
        return explain_prepared(
            &Input {
                pods: &prepared.pods,
                ..*input
            },
            &named,
        );
    }
    explain_prepared(input, plan)
}

fn explain_prepared(input: &Input, plan: &Plan) -> Vec<String> {
    let cands = candidates::candidates(input);
    let by_name: std::collections::HashMap<&str, &Pod> =
        input.pods.iter().map(|p| (p.name.as_str(), p)).collect();
    // What the pools could still afford after this plan.
    let mut budgets = limits::budgets(input);
    let index = |n: &PlannedNode| {
        cands.iter().position(|c| {
            c.offering.instance_type == n.instance_type
                && c.offering.zone_id == n.zone
                && c.offering.capacity_type == n.capacity_type
                && c.offering.reservation.as_ref().map(|r| &r.id) == n.reservation.as_ref()
                && input.pools[c.pool].name == n.nodepool
        })
    };
    for n in &plan.nodes {
        if let Some(o) = index(n) {
            budgets[cands[o].pool].charge(&cands[o]);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for n in &plan.nodes {
        let Some(pod) = n.pods.first().and_then(|p| by_name.get(p.as_str())) else {
            continue;
        };
        if !seen.insert((
            n.nodepool.clone(),
            n.instance_type.clone(),
            n.capacity_type,
            pod.requests.clone(),
        )) {
            continue;
        }
        let class = classes::classify(std::slice::from_ref(*pod), &[0], input.now).remove(0);
        // What the pods on this node would cost per pod on a candidate: the
        // nodes they need there, plus their expected interruption cost.
        let m = n.pods.len().max(1) as f64;
        let per_pod = |c: &Candidate| {
            let k = candidates::pods_per_node(&class, c);
            (k > 0).then(|| {
                let aversion = input.pools[c.pool].risk_aversion;
                c.price() * (m / k as f64).ceil() / m
                    + pod_risk_cost(&class.exposure, c, k, aversion)
            })
        };
        let chosen = index(n).map(|o| &cands[o]);
        let Some(chosen_cost) = chosen.and_then(per_pod) else {
            continue;
        };
        let what = |c: &Candidate| {
            format!(
                "{} {} in {}",
                c.offering.instance_type, c.offering.capacity_type, c.offering.zone_id
            )
        };
        let me = format!("{} {} in {}", n.instance_type, n.capacity_type, n.zone);
        let next = cands
            .iter()
            .filter(|c| c.offering.instance_type != n.instance_type)
            .filter_map(|c| per_pod(c).map(|v| (v, c)))
            .min_by(|a, b| a.0.total_cmp(&b.0));
        out.push(match next {
            None => format!(
                "{me} is the only instance type that takes pods like {}",
                pod.name
            ),
            Some((v, c)) if v >= chosen_cost - 1e-9 => format!(
                "{me} at ${chosen_cost:.4}/h per pod for pods like {} beats {} at ${v:.4}/h per pod (price + expected interruption cost)",
                pod.name,
                what(c)
            ),
            Some((v, c)) => {
                let why = binding(input, &cands, plan, n, pod, c, &budgets);
                format!(
                    "{me} at ${chosen_cost:.4}/h per pod for pods like {}, although {} costs ${v:.4}/h per pod: {why}",
                    pod.name,
                    what(c)
                )
            }
        });
        if let Some(c) = chosen {
            out.extend(risk_decided(input, &cands, &class, c, m));
        }
    }
    out
}

/// One sentence per reservation the catalog knows in the input's region:
/// how much of it the plan uses, or why it uses none (not usable at the
/// planning time, no pool allowing reserved capacity may launch it, its
/// count already taken by in-flight nodes, or no pending pod needs it).
pub fn explain_reservations(input: &Input, plan: &Plan) -> Vec<String> {
    let cands = candidates::candidates(input);
    let left = limits::ReservedLeft::of(input);
    let mut out = Vec::new();
    for r in input.catalog.reservations() {
        if r.region != input.region {
            continue;
        }
        let what = format!(
            "{} ({} of {} in {})",
            r.id,
            r.kind.as_str(),
            r.instance_type,
            r.zone_id
        );
        let used = plan
            .nodes
            .iter()
            .filter(|n| n.reservation.as_deref() == Some(r.id.as_str()))
            .count();
        if used > 0 {
            out.push(format!(
                "reservation {what}: the plan uses {used} of its {} available (already paid: ${:.4}/h per node), before any spot or on-demand offering",
                r.available, r.price_per_hour
            ));
            continue;
        }
        let why = if let Some(why) = input
            .now
            .and_then(|now| r.unusable_at(now, chrono::TimeDelta::zero()))
        {
            why
        } else if !input
            .pools
            .iter()
            .any(|p| p.capacity_types.contains(&CapacityType::Reserved))
        {
            "no NodePool allows capacity type reserved".to_string()
        } else if !cands.iter().any(|c| {
            c.offering
                .reservation
                .as_ref()
                .is_some_and(|o| o.id == r.id)
        }) {
            format!(
                "no NodePool that allows reserved capacity may launch {} in {} (or it ends within the drain lead time)",
                r.instance_type, r.zone_id
            )
        } else if left.iter().any(|(id, n)| id == r.id && n < 1.0) {
            "its available instances are taken by nodes already launching".to_string()
        } else {
            format!(
                "no pending pod needs a {} that the plan could put there",
                r.instance_type
            )
        };
        out.push(format!("reservation {what} is not used: {why}"));
    }
    out
}

/// Why the plan put `pod` on node `n` rather than on cheaper candidate
/// `cheaper`: the first constraint that rules `cheaper` out.
fn binding(
    input: &Input,
    cands: &[Candidate],
    plan: &Plan,
    n: &PlannedNode,
    pod: &Pod,
    cheaper: &Candidate,
    budgets: &[limits::Budget],
) -> String {
    let pool = &input.pools[cheaper.pool];
    let other_zone = cheaper.offering.zone_id != n.zone;
    if !budgets[cheaper.pool].affords(cheaper) {
        return format!("NodePool {} has reached its limits", pool.name);
    }
    if let Some(g) = pod.group.as_ref().filter(|_| other_zone) {
        return format!(
            "gang {} needs all its members in one zone ({}), and {} is in {}",
            g.name, n.zone, cheaper.offering.instance_type, cheaper.offering.zone_id
        );
    }
    if pod.zone_spread.is_some() && other_zone {
        let offered_here = cands.iter().any(|c| {
            c.offering.instance_type == cheaper.offering.instance_type
                && c.offering.zone_id == n.zone
                && pack::compatible(pod, &c.labels, &c.taints)
        });
        return if offered_here {
            format!(
                "zone spread needs pods in zone {}, and {} is dearer there",
                n.zone, cheaper.offering.instance_type
            )
        } else {
            format!(
                "zone spread needs pods in zone {}, where {} is not offered to it",
                n.zone, cheaper.offering.instance_type
            )
        };
    }
    if cheaper.offering.capacity_type == CapacityType::Spot
        && pool.max_spot_pool_share.is_some()
        && plan.nodes.iter().any(|o| {
            o.nodepool == pool.name
                && o.instance_type == cheaper.offering.instance_type
                && o.zone == cheaper.offering.zone_id
                && o.capacity_type == CapacityType::Spot
        })
    {
        return format!(
            "NodePool {}'s spot pool share keeps more of its spot nodes out of that spot pool",
            pool.name
        );
    }
    if n.pods.iter().any(|p| {
        input
            .pods
            .iter()
            .find(|q| &q.name == p)
            .is_some_and(|q| q.requests != pod.requests)
    }) {
        return "the node also holds other pods, and the plan as a whole costs less that way"
            .into();
    }
    "the whole plan is what is minimised, and this node alone is not; see the plan's gap to its lower bound".into()
}

/// When risk, not price, decided a node: a candidate cheaper per pod by
/// price alone lost on price plus expected interruption cost, or was ruled
/// out by the pods' deadline. One sentence naming the numbers, or none.
fn risk_decided(
    input: &Input,
    cands: &[Candidate],
    class: &classes::Class,
    chosen: &Candidate,
    m: f64,
) -> Option<String> {
    // Per pod: (price share, expected interruption cost), ignoring deadlines.
    let free = classes::Class {
        slack_hours: None,
        ..class.clone()
    };
    let costs = |c: &Candidate| {
        let k = candidates::pods_per_node(&free, c);
        (k > 0).then(|| {
            let aversion = input.pools[c.pool].risk_aversion;
            (
                c.price() * (m / k as f64).ceil() / m,
                pod_risk_cost(&class.exposure, c, k, aversion),
                k,
            )
        })
    };
    let (price, risk, _) = costs(chosen)?;
    let (cheapest, (p, r, k)) = cands
        .iter()
        .filter_map(|c| costs(c).map(|v| (c, v)))
        .filter(|(_, (p, _, _))| *p < price - 1e-9)
        .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0))?;
    let what = format!(
        "{} {} in {}",
        cheapest.offering.instance_type, cheapest.offering.capacity_type, cheapest.offering.zone_id
    );
    let chosen_what = match chosen.offering.capacity_type {
        CapacityType::OnDemand => "on-demand".to_string(),
        CapacityType::Reserved => "reserved".to_string(),
        CapacityType::Spot => format!("{} spot", chosen.offering.instance_type),
    };
    if let Some(slack) = class.slack_hours {
        let delay = risk::spot_delay_hours(&class.exposure, cheapest, k);
        if cheapest.offering.capacity_type == CapacityType::Spot && slack < delay {
            return Some(format!(
                "{chosen_what} chosen for pods like {}: its deadline leaves {slack:.2} h of slack, less than the {delay:.2} h of delay {what} may cost it",
                class.pod.name
            ));
        }
    }
    (p + r > price + risk).then(|| {
        format!(
            "{chosen_what} chosen for pods like {}: {what}'s expected interruption cost ${:.4}/h outweighs its discount ${:.4}/h (risk, not price, decided)",
            class.pod.name,
            r - risk,
            price - p
        )
    })
}
