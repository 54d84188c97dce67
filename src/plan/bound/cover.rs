//! Cover rows of the bound's LP: valid inequalities that put back what the
//! LP's fractional nodes leave out, the last node of a demand that nothing
//! else can fill.
//!
//! A cover says: the nodes of the candidates a set of classes `S` can use
//! cost, by price, at least `W`, the least whole nodes that hold `S`'s pods
//! alone can cost. Every plan's nodes that hold `S`'s pods are among those
//! candidates and hold them, whatever else they hold, so every integral
//! plan keeps the row, and adding it to the LP keeps the bound a bound.
//! Two kinds (see `docs/planner.md`, "Lower bound"):
//!
//! - per class, `W` from its pods per node (a covering knapsack);
//! - per zone, over the classes whose every candidate is in that zone (zone
//!   spread's floors, zone affinity): `W` is, for the resource that asks
//!   most, the cheapest whole nodes whose capacity of it covers their total
//!   request. This is the last node of a zone's share of a spread class.

use super::super::candidates::Candidate;
use super::super::classes::Class;
use std::collections::BTreeMap;

/// Demands are counted in at most this many units in the knapsack: above
/// it a unit holds several (capacities rounded up, demand down, so the
/// result stays a lower bound).
const UNITS_MAX: i64 = 4000;

/// A cover row: the candidates taking any of `classes` cost at least
/// `price` per hour in every plan.
pub(super) struct Cover {
    /// Indices of the classes the row covers.
    pub classes: Vec<usize>,
    /// The least price per hour of whole nodes that hold them alone.
    pub price: f64,
}

/// The cover rows worth adding for `classes` over `cands`; `usable[c]`
/// lists the candidates (indices into `cands`) that take pods of class `c`,
/// each with how many of them one node holds.
pub(super) fn covers(
    classes: &[Class],
    cands: &[Candidate],
    usable: &[Vec<(usize, u32)>],
) -> Vec<Cover> {
    let mut out = Vec::new();
    // Per class: its pods per node on each candidate.
    for (ci, class) in classes.iter().enumerate() {
        let options: Vec<(i64, f64)> = usable[ci]
            .iter()
            .map(|&(o, k)| (i64::from(k), cands[o].price()))
            .collect();
        let price = cheapest_cover(class.pods.len() as i64, &options);
        if price > 0.0 && price.is_finite() {
            out.push(Cover {
                classes: vec![ci],
                price,
            });
        }
    }
    // Per zone: the classes that can only be there.
    let mut by_zone: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (ci, mine) in usable.iter().enumerate() {
        let mut zones = mine
            .iter()
            .map(|&(o, _)| cands[o].offering.zone_id.as_str());
        if let Some(z) = zones.next() {
            if zones.all(|other| other == z) {
                by_zone.entry(z).or_default().push(ci);
            }
        }
    }
    for group in by_zone.into_values().filter(|g| g.len() > 1) {
        let mut cols: Vec<usize> = group
            .iter()
            .flat_map(|&c| usable[c].iter().map(|&(o, _)| o))
            .collect();
        cols.sort_unstable();
        cols.dedup();
        let mut demand: BTreeMap<&str, i64> = BTreeMap::new();
        for &c in &group {
            for (r, v) in classes[c].pod.requests.iter().filter(|(_, v)| *v > 0) {
                *demand.entry(r).or_default() += v.saturating_mul(classes[c].pods.len() as i64);
            }
        }
        let price = demand
            .iter()
            .map(|(r, &d)| {
                let options: Vec<(i64, f64)> = cols
                    .iter()
                    .map(|&o| (cands[o].allocatable.get(r).max(0), cands[o].price()))
                    .collect();
                cheapest_cover(d, &options)
            })
            .fold(0.0, f64::max);
        if price > 0.0 && price.is_finite() {
            out.push(Cover {
                classes: group,
                price,
            });
        }
    }
    out
}

/// The least total price of whole nodes, each option `(size, price)` as
/// often as wanted, whose sizes add up to at least `demand`; infinite when
/// no option has a size. Counted in at most [`UNITS_MAX`] units (sizes
/// rounded up, the demand down), so never above the exact answer.
fn cheapest_cover(demand: i64, options: &[(i64, f64)]) -> f64 {
    if demand <= 0 {
        return 0.0;
    }
    // Rounded up without overflow (`demand` is positive here).
    let unit = (demand - 1) / UNITS_MAX + 1;
    let need = (demand / unit) as usize;
    // Per size, the cheapest; then drop sizes a larger one beats on price.
    let mut sized: Vec<(usize, f64)> = options
        .iter()
        .filter(|(s, _)| *s > 0)
        .map(|&(s, p)| ((((s - 1) / unit + 1) as usize).min(need), p))
        .collect();
    sized.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.total_cmp(&b.1)));
    let mut front: Vec<(usize, f64)> = Vec::new();
    for o in sized {
        if front.iter().all(|f| f.1 > o.1) {
            front.push(o);
        }
    }
    if front.is_empty() {
        return f64::INFINITY;
    }
    let mut best = vec![0.0; need + 1];
    for j in 1..=need {
        best[j] = front
            .iter()
            .map(|&(s, p)| best[j.saturating_sub(s)] + p)
            .fold(f64::INFINITY, f64::min);
    }
    best[need]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cheapest_cover_mixes_sizes_and_never_exceeds_the_exact_answer() {
        // 9 pods: an 8-pod node at 10 and a 1-pod node at 2 make 12, less
        // than two 8-pod nodes (20) or nine 1-pod nodes (18).
        assert_eq!(cheapest_cover(9, &[(8, 10.0), (1, 2.0)]), 12.0);
        assert_eq!(cheapest_cover(0, &[(8, 10.0)]), 0.0);
        assert!(cheapest_cover(3, &[(0, 1.0)]).is_infinite());
        // A demand past the unit limit is counted coarsely, from below:
        // 10,001 units of 3 (3,334 nodes exactly) is never over that.
        let exact = 3334.0;
        let coarse = cheapest_cover(10_001, &[(3, 1.0)]);
        assert!(coarse <= exact && coarse >= exact - 2.0, "{coarse}");
    }
}
