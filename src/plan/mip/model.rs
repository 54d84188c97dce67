//! The MIP's model: its variables and rows for one tier of classes
//! ([`Tier`]), the node patterns offered to it, and what a gang needs of an
//! offering. Split from `plan::mip` along the seam between building the
//! model and solving and rounding it.

use super::*;

/// The model's variables, kept so that a solution can be read back.
pub(super) struct Model {
    pub(super) vars: ProblemVariables,
    pub(super) objective: Expression,
    pub(super) constraints: Vec<good_lp::Constraint>,
    pub(super) y: Vec<Vec<(usize, Variable)>>,
    /// The unplaced pods' share of the objective.
    pub(super) penalty: Expression,
    /// Node pattern variables: candidate, pods per class of the tier (by
    /// index into `work`), and how many nodes of that pattern.
    pub(super) patterns: Vec<(usize, Vec<u32>, Variable)>,
    pub(super) integers: usize,
}

/// The maximal node patterns of each candidate of a tier ([`node_patterns`]).
pub(super) type Patterns = BTreeMap<usize, Vec<Vec<u32>>>;

/// The maximal patterns of one node of candidate `o`: how many pods of each
/// class of the tier (by index into `work`; 0 for classes that cannot use
/// `o`) one node holds, by resources and per-node caps, such that
/// no class could take one more (within its pods in the tier). Any set of
/// pods that fits one node is covered by one of them, so counting nodes by
/// these patterns is exact where aggregate capacity rows are optimistic (two
/// pods that each take 60% of a node's CPU fit "1.2 of 2 nodes" in
/// aggregate). `None` past `steps` steps of the enumeration.
fn node_patterns(
    work: &[ClassOptions],
    classes: &[Class],
    o: usize,
    alloc: &crate::cluster::Resources,
    steps: usize,
) -> Option<Vec<Vec<u32>>> {
    struct Walk<'a> {
        /// `(work index, pod, most of the class one node takes)`.
        members: Vec<(usize, &'a crate::cluster::Pod, u32)>,
        alloc: &'a crate::cluster::Resources,
        counts: Vec<u32>,
        out: Vec<Vec<u32>>,
        steps: usize,
    }
    impl Walk<'_> {
        /// Whether one more pod of member `m` fits beside `used`.
        fn room(&self, m: usize, used: &crate::cluster::Resources) -> bool {
            let (wi, pod, most) = self.members[m];
            if self.counts[wi] >= most || !used.plus(&pod.requests).fits_in(self.alloc) {
                return false;
            }
            // A per-node cap (hostname anti-affinity or spread): at most
            // that many pods of one key on a node.
            let Some(key) = pack::anti_affinity_key(pod) else {
                return true;
            };
            let same: u32 = self
                .members
                .iter()
                .filter(|&&(_, q, _)| pack::anti_affinity_key(q).as_ref() == Some(&key))
                .map(|&(wj, _, _)| self.counts[wj])
                .sum();
            same < pod.per_node_max.unwrap_or(u32::MAX)
        }

        fn go(&mut self, m: usize, used: crate::cluster::Resources) -> Option<()> {
            self.steps = self.steps.checked_sub(1)?;
            if m == self.members.len() {
                let maximal = (0..self.members.len()).all(|x| !self.room(x, &used));
                if maximal && self.counts.iter().any(|c| *c > 0) {
                    self.out.push(self.counts.clone());
                }
                return Some(());
            }
            let (wi, pod, _) = self.members[m];
            let mut used_here = used.clone();
            self.go(m + 1, used)?;
            while self.room(m, &used_here) {
                used_here = used_here.plus(&pod.requests);
                self.counts[wi] += 1;
                self.go(m + 1, used_here.clone())?;
            }
            self.counts[wi] = 0;
            Some(())
        }
    }
    let members = work
        .iter()
        .enumerate()
        .filter_map(|(wi, w)| {
            let &(_, k) = w.options.iter().find(|(c, _)| *c == o)?;
            let most = k.min(u32::try_from(w.pods.len()).unwrap_or(u32::MAX));
            Some((wi, &classes[w.class].pod, most))
        })
        .collect();
    let mut walk = Walk {
        members,
        alloc,
        counts: vec![0; work.len()],
        out: Vec::new(),
        steps,
    };
    walk.go(0, crate::cluster::Resources::new())?;
    Some(walk.out)
}

/// Every candidate's maximal node patterns, if there are at most
/// [`PATTERNS_MAX`] in all.
pub(super) fn tier_patterns(tier: &Tier) -> Option<Patterns> {
    let used: BTreeSet<usize> = tier
        .work
        .iter()
        .flat_map(|w| w.options.iter().map(|(o, _)| *o))
        .collect();
    let mut out = Patterns::new();
    let mut total = 0;
    for o in used {
        let alloc = &tier.cands[o].allocatable;
        let found = node_patterns(tier.work, tier.classes, o, alloc, PATTERN_STEPS_MAX)?;
        total += found.len();
        if total > PATTERNS_MAX {
            return None;
        }
        out.insert(o, found);
    }
    Some(out)
}

/// What one weight tier's model is built from.
#[derive(Clone, Copy)]
pub(super) struct Tier<'a> {
    pub(super) work: &'a [ClassOptions],
    pub(super) classes: &'a [Class],
    pub(super) cands: &'a [Candidate],
    pub(super) input: &'a Input<'a>,
    pub(super) budgets: &'a [Budget],
    /// What each capacity reservation can still take.
    pub(super) reserved: &'a limits::ReservedLeft,
    pub(super) opts: &'a Options,
    /// Seconds left of the plan's time limit.
    pub(super) time_left: f64,
}

/// The model of a tier, integral or its LP relaxation; with `patterns`
/// (integral models only), nodes are counted by maximal node pattern.
pub(super) fn build(
    tier: Tier,
    relaxed: bool,
    all_integral: bool,
    patterns: Option<&Patterns>,
) -> Model {
    let Tier {
        work,
        classes,
        cands,
        input,
        budgets,
        reserved,
        opts,
        ..
    } = tier;
    let mut vars = ProblemVariables::new();
    let mut cons = Vec::new();
    let mut objective = Expression::from(0.0);
    let mut penalty = Expression::from(0.0);

    // Node counts: one variable per candidate in use, bounded by the pods
    // that could need it.
    let mut upper: BTreeMap<usize, f64> = BTreeMap::new();
    for w in work {
        for &(o, k) in &w.options {
            *upper.entry(o).or_default() += (w.pods.len() as f64 / k as f64).ceil();
        }
    }
    let mut n: BTreeMap<usize, Variable> = BTreeMap::new();
    let mut pattern_vars: Vec<(usize, Vec<u32>, Variable)> = Vec::new();
    for (&o, &ub) in &upper {
        let def = variable().min(0.0).max(ub);
        // Counted by pattern, nodes are whole when the patterns are.
        let v = vars.add(if relaxed { def } else { def.integer() });
        let c = &cands[o];
        objective += v * (c.price() * (1.0 + opts.idle_accelerator_charge));
        n.insert(o, v);
        if let Some(found) = patterns.and_then(|p| p.get(&o)) {
            let mut nodes = Expression::from(0.0);
            for counts in found {
                let x = vars.add(variable().min(0.0).max(ub).integer());
                nodes += x;
                pattern_vars.push((o, counts.clone(), x));
            }
            cons.push(constraint!(v == nodes));
        }
    }

    // Placement variables and per-candidate loads.
    // Ordered, so that constraints reach the solver in the same order every
    // run: ties between equally cheap plans break the same way.
    let mut load: BTreeMap<(usize, String), Expression> = BTreeMap::new();
    let mut y: Vec<Vec<(usize, Variable)>> = Vec::new();
    let mut gang_zone: BTreeMap<String, BTreeMap<String, Variable>> = BTreeMap::new();
    // The zones each class of a gang can use: a zone some class cannot use
    // is no zone for the gang (else choosing it would place the other
    // classes and leave that one out for free).
    let mut gang_class_zones: BTreeMap<String, Vec<BTreeSet<String>>> = BTreeMap::new();
    // The instance type of each gang whose pods request EFA: one cluster
    // placement group holds one type (`docs/reserved-capacity.md`).
    let mut gang_type: BTreeMap<String, BTreeMap<String, Variable>> = BTreeMap::new();
    for w in work {
        let class = &classes[w.class];
        let d = w.pods.len() as f64;
        let integral = !relaxed && (all_integral || class.pod.zone_bound());
        let mut ys = Vec::new();
        for &(o, k) in &w.options {
            let def = variable().min(0.0).max(d);
            let v = vars.add(if integral { def.integer() } else { def });
            let c = &cands[o];
            let risk = pod_risk_cost(&class.exposure, c, k, input.pools[c.pool].risk_aversion);
            let idle_credit = match &c.accelerator_resource {
                Some(r) if c.accelerator_units > 0 => {
                    opts.idle_accelerator_charge * c.price() * class.pod.requests.get(r) as f64
                        / c.accelerator_units as f64
                }
                _ => 0.0,
            };
            objective += v * (risk - idle_credit);
            // At most k pods of the class per node; implied by the capacity
            // rows unless rounding down to whole pods loses much room.
            let alloc = &cands[o].allocatable;
            let fluid = class
                .pod
                .requests
                .iter()
                .filter(|(_, amount)| *amount > 0)
                .map(|(r, amount)| alloc.get(r) as f64 / amount as f64)
                .fold(f64::INFINITY, f64::min);
            if fluid > k as f64 * 1.1 {
                cons.push(constraint!(v <= n[&o] * k as f64));
            }
            for (r, amount) in class.pod.requests.iter() {
                *load.entry((o, r.to_string())).or_default() += v * amount as f64;
            }
            ys.push((o, v));
        }
        let placed: Expression = ys.iter().map(|(_, v)| *v).sum();
        match &class.pod.group {
            None => {
                let u = vars.add(variable().min(0.0).max(d));
                objective += u * UNPLACED_PENALTY;
                penalty += u * UNPLACED_PENALTY;
                cons.push(constraint!(placed + u == d));
            }
            Some(g) => {
                // All members in one zone, or none at all.
                let zones: BTreeSet<&str> = ys
                    .iter()
                    .map(|(o, _)| cands[*o].offering.zone_id.as_str())
                    .collect();
                gang_class_zones
                    .entry(g.name.clone())
                    .or_default()
                    .push(zones.iter().map(|z| z.to_string()).collect());
                let entry = gang_zone.entry(g.name.clone()).or_default();
                for zone in zones {
                    let z = *entry.entry(zone.to_string()).or_insert_with(|| {
                        let def = variable().min(0.0).max(1.0);
                        vars.add(if relaxed { def } else { def.integer() })
                    });
                    let in_zone: Expression = ys
                        .iter()
                        .filter(|(o, _)| cands[*o].offering.zone_id == zone)
                        .map(|(_, v)| *v)
                        .sum();
                    cons.push(constraint!(in_zone == z * d));
                }
                if ys
                    .iter()
                    .any(|(o, _)| efa_bound(input, &class.pod, &cands[*o]))
                {
                    let types: BTreeSet<&str> = ys
                        .iter()
                        .map(|(o, _)| cands[*o].offering.instance_type.as_str())
                        .collect();
                    let entry = gang_type.entry(g.name.clone()).or_default();
                    for it in types {
                        let t = *entry.entry(it.to_string()).or_insert_with(|| {
                            let def = variable().min(0.0).max(1.0);
                            vars.add(if relaxed { def } else { def.integer() })
                        });
                        let of_type: Expression = ys
                            .iter()
                            .filter(|(o, _)| cands[*o].offering.instance_type == it)
                            .map(|(_, v)| *v)
                            .sum();
                        cons.push(constraint!(of_type <= t * d));
                    }
                }
            }
        }
        if let Some(spread) = &class.pod.zone_spread {
            let zones: BTreeSet<&str> = ys
                .iter()
                .map(|(o, _)| cands[*o].offering.zone_id.as_str())
                .collect();
            if zones.len() > 1 {
                let m = vars.add(variable().min(0.0).max(d));
                for zone in zones {
                    let in_zone: Expression = ys
                        .iter()
                        .filter(|(o, _)| cands[*o].offering.zone_id == zone)
                        .map(|(_, v)| *v)
                        .sum();
                    cons.push(constraint!(m <= in_zone.clone()));
                    cons.push(constraint!(in_zone <= m + spread.max_skew as f64));
                }
            }
        }
        y.push(ys);
    }
    // A gang picks at most one zone that all its classes can use; not
    // picking one costs every member's penalty.
    for (name, zones) in &gang_zone {
        for usable in &gang_class_zones[name] {
            for (zone, z) in zones {
                if !usable.contains(zone) {
                    cons.push(constraint!(*z == 0.0));
                }
            }
        }
        let d: f64 = work
            .iter()
            .filter(|w| {
                classes[w.class]
                    .pod
                    .group
                    .as_ref()
                    .is_some_and(|g| &g.name == name)
            })
            .map(|w| w.pods.len() as f64)
            .sum();
        // `left` is 1 when the gang gets no zone: a variable, not the
        // constant `1 - sum z` in the objective, because a constant of
        // 10,000s of dollars made the solver's relative gap accept plans
        // far dearer than the best.
        let chosen: Expression = zones.values().copied().sum();
        let left = vars.add(variable().min(0.0).max(1.0));
        cons.push(constraint!(chosen + left == 1.0));
        objective += left * (UNPLACED_PENALTY * d);
        penalty += left * (UNPLACED_PENALTY * d);
    }
    for types in gang_type.values() {
        let chosen: Expression = types.values().copied().sum();
        cons.push(constraint!(chosen <= 1.0));
    }
    // Capacity per resource.
    for ((o, r), l) in load {
        let alloc = cands[o].allocatable.get(&r) as f64;
        cons.push(constraint!(l <= n[&o] * alloc));
    }
    // Every node holds a pod: an empty node costs and holds nothing, but
    // could otherwise pad a spot pool's share. (Integral models only: the
    // rounded LP's plans, which the simulator makes, stay as they were.)
    if !relaxed {
        let mut on: BTreeMap<usize, Expression> = BTreeMap::new();
        for ys in &y {
            for (o, v) in ys {
                *on.entry(*o).or_default() += *v;
            }
        }
        for (o, pods_on) in on {
            cons.push(constraint!(n[&o] <= pods_on));
        }
    }
    // By pattern: the pods of a class on a candidate fit the slots its nodes'
    // patterns have for them.
    if !pattern_vars.is_empty() {
        for (wi, ys) in y.iter().enumerate() {
            for (o, v) in ys {
                let slots: Expression = pattern_vars
                    .iter()
                    .filter(|(p, counts, _)| p == o && counts[wi] > 0)
                    .map(|(_, counts, x)| *x * f64::from(counts[wi]))
                    .sum();
                cons.push(constraint!(*v <= slots));
            }
        }
    }
    // Each capacity reservation's available count, over every pool.
    for (id, left) in reserved.iter() {
        let used: Expression = n
            .iter()
            .filter(|(o, _)| {
                cands[**o]
                    .offering
                    .reservation
                    .as_ref()
                    .is_some_and(|r| r.id == id)
            })
            .map(|(_, v)| *v)
            .sum();
        cons.push(constraint!(used <= left));
    }
    // NodePool limits and spot pool share.
    for (pi, budget) in budgets.iter().enumerate() {
        let mine: Vec<(usize, Variable)> = n
            .iter()
            .filter(|(o, _)| cands[**o].pool == pi)
            .map(|(o, v)| (*o, *v))
            .collect();
        if mine.is_empty() {
            continue;
        }
        for (r, left) in &budget.resources {
            let used: Expression = mine
                .iter()
                .map(|(o, v)| *v * cands[*o].capacity.get(r) as f64)
                .sum();
            cons.push(constraint!(used <= *left));
        }
        if let Some(left) = budget.nodes {
            let used: Expression = mine.iter().map(|(_, v)| *v).sum();
            cons.push(constraint!(used <= left));
        }
        if let Some(left) = budget.cost {
            let used: Expression = mine.iter().map(|(o, v)| *v * cands[*o].price()).sum();
            cons.push(constraint!(used <= left));
        }
        if let Some(share) = input.pools[pi].max_spot_pool_share {
            let spot: Vec<&(usize, Variable)> = mine
                .iter()
                .filter(|(o, _)| {
                    cands[*o].offering.capacity_type == crate::catalog::CapacityType::Spot
                })
                .collect();
            let total: Expression = spot.iter().map(|(_, v)| *v).sum();
            // Slack of one node, so that a single small launch stays
            // possible, or of a whole gang's nodes in that pool: a gang stops
            // when any member's node is reclaimed, so spreading one gang over
            // several spot pools adds up their rates instead of spreading
            // the risk.
            for (o, v) in &spot {
                let slack = gang_nodes(work, classes, *o).max(1.0);
                cons.push(constraint!(*v <= total.clone() * share + slack));
            }
        }
    }
    let integers = if relaxed {
        0
    } else {
        n.len()
            + pattern_vars.len()
            + y.iter()
                .zip(work)
                .filter(|(_, w)| {
                    let c = &classes[w.class];
                    all_integral || c.pod.zone_bound()
                })
                .map(|(ys, _)| ys.len())
                .sum::<usize>()
            + gang_zone.values().map(BTreeMap::len).sum::<usize>()
            + gang_type.values().map(BTreeMap::len).sum::<usize>()
    };
    Model {
        vars,
        objective,
        constraints: cons,
        y,
        penalty,
        patterns: pattern_vars,
        integers,
    }
}

/// Nodes of offering `o` the largest gang of the tier needs to sit whole on
/// it (0 when no gang can use it).
fn gang_nodes(work: &[ClassOptions], classes: &[Class], o: usize) -> f64 {
    let mut per_gang: BTreeMap<&str, f64> = BTreeMap::new();
    for w in work {
        let Some(g) = &classes[w.class].pod.group else {
            continue;
        };
        if let Some(&(_, k)) = w.options.iter().find(|(c, _)| *c == o) {
            *per_gang.entry(g.name.as_str()).or_default() +=
                (w.pods.len() as f64 / f64::from(k)).ceil();
        }
    }
    per_gang.into_values().fold(0.0, f64::max)
}
