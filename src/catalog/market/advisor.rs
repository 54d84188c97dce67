//! How far the market the planner prices spot with is from the Spot Instance
//! Advisor's interruption band, per instance family: what `market
//! advisor-gap` prints and `docs/market.md` quotes. Pure: reads a catalog's
//! offerings (their [`super::PoolMarket`] and advisor bucket), no I/O.

use super::super::{CapacityType, Catalog, InterruptionBucket, Offering, HOURS_PER_MONTH};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// The least and the most of a value over a family's spot pools.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Span {
    /// The least.
    pub min: f64,
    /// The most.
    pub max: f64,
}

impl Span {
    fn of(values: impl IntoIterator<Item = f64>) -> Option<Span> {
        values.into_iter().fold(None, |s, v| {
            Some(match s {
                None => Span { min: v, max: v },
                Some(s) => Span {
                    min: s.min.min(v),
                    max: s.max.max(v),
                },
            })
        })
    }
}

/// One family's spot pools (instance type x zone) of a region: their
/// advisor buckets, the hazard the planner uses, and how far apart the two
/// are.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FamilyGap {
    /// Instance family, e.g. `p5`.
    pub family: String,
    /// Spot pools of the family in the region.
    pub pools: usize,
    /// The advisor's buckets among them, as labels (`<5%`, ..., `>20%`;
    /// `unknown` where the advisor has no figure, priced as the worst).
    pub buckets: Vec<String>,
    /// The advisor's band over those buckets: the share of instances
    /// interrupted in a month, from and to.
    pub advisor_monthly: Span,
    /// The share of new instances the market reclaims within a month
    /// (`1 - S(730 h)`), the figure comparable with the band.
    pub market_monthly: Span,
    /// Mean life of a new node, hours.
    pub mean_life_hours: Span,
    /// Probability that a new node is reclaimed in its first hour.
    pub first_hour_reclaim_probability: Span,
    /// The market's rate (one over the mean life) over the advisor model's
    /// rate for the pool's bucket (the band's middle read as a monthly
    /// probability, `-ln(1 - p) / 730`: [`InterruptionBucket::rate_per_hour`]),
    /// per pool: 1 under the advisor model.
    pub times_the_advisor_rate: Span,
    /// The market's rate over the rate at the upper edge of the pool's band
    /// (`-ln(1 - top) / 730`), over the pools whose band has one (all but
    /// `>20%`): above 1, the market reclaims more than the band allows.
    pub times_the_band_top: Option<Span>,
}

/// The rate at the upper edge of `bucket`'s band read as a monthly
/// probability; `None` for the open-ended `>20%`.
fn band_top_rate(bucket: InterruptionBucket) -> Option<f64> {
    let (_, top) = bucket.monthly_band();
    (top < 1.0).then(|| -(1.0 - top).ln() / HOURS_PER_MONTH)
}

/// The gap for each family with spot offerings in `region`, by family name;
/// accelerator families only unless `families` names some.
pub fn by_family(catalog: &Catalog, region: &str, families: &[String]) -> Vec<FamilyGap> {
    let mut by: BTreeMap<&str, Vec<&Offering>> = BTreeMap::new();
    for o in catalog.offerings_in(region) {
        if o.capacity_type != CapacityType::Spot {
            continue;
        }
        let Some(t) = catalog.instance_type(&o.instance_type) else {
            continue;
        };
        let wanted = if families.is_empty() {
            t.accelerator.is_some()
        } else {
            families.iter().any(|f| f.eq_ignore_ascii_case(&t.family))
        };
        if wanted {
            by.entry(t.family.as_str()).or_default().push(o);
        }
    }
    by.into_iter()
        .filter_map(|(family, pools)| gap(family, &pools))
        .collect()
}

/// The gap over one family's spot `pools` (`None` when there are none).
fn gap(family: &str, pools: &[&Offering]) -> Option<FamilyGap> {
    let bucket = |o: &Offering| o.interruption_bucket.unwrap_or(InterruptionBucket::WORST);
    let hazards: Vec<_> = pools.iter().filter_map(|o| o.hazard()).collect();
    let labels: BTreeSet<(u8, &str)> = pools
        .iter()
        .map(|o| match o.interruption_bucket {
            Some(b) => (b.0, b.label()),
            None => (u8::MAX, "unknown"),
        })
        .collect();
    let bands: Vec<(f64, f64)> = pools.iter().map(|o| bucket(o).monthly_band()).collect();
    Some(FamilyGap {
        family: family.to_string(),
        pools: pools.len(),
        buckets: labels.into_iter().map(|(_, l)| l.to_string()).collect(),
        advisor_monthly: Span {
            min: Span::of(bands.iter().map(|b| b.0))?.min,
            max: Span::of(bands.iter().map(|b| b.1))?.max,
        },
        market_monthly: Span::of(
            pools
                .iter()
                .map(|o| 1.0 - (-o.expected_interruptions(HOURS_PER_MONTH)).exp()),
        )?,
        mean_life_hours: Span::of(hazards.iter().map(|h| h.mean_life_hours))?,
        first_hour_reclaim_probability: Span::of(
            hazards.iter().map(|h| h.first_hour_reclaim_probability),
        )?,
        times_the_advisor_rate: Span::of(
            pools
                .iter()
                .map(|o| o.interruption_rate_per_hour() / bucket(o).rate_per_hour()),
        )?,
        times_the_band_top: Span::of(pools.iter().filter_map(|o| {
            band_top_rate(bucket(o)).map(|top| o.interruption_rate_per_hour() / top)
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::MarketModel;

    #[test]
    fn under_the_advisor_model_every_pool_sits_inside_its_band() {
        // The advisor model reads each bucket as its band's middle: under
        // the band's upper edge, over its lower one.
        let catalog = Catalog::embedded()
            .unwrap()
            .with_market(MarketModel::Advisor);
        let gaps = by_family(&catalog, "us-east-1", &[]);
        assert!(!gaps.is_empty());
        for g in &gaps {
            let r = g.times_the_advisor_rate;
            assert!(
                (r.min - 1.0).abs() < 1e-9 && (r.max - 1.0).abs() < 1e-9,
                "{g:?}"
            );
            assert!(g.times_the_band_top.is_none_or(|t| t.max < 1.0), "{g:?}");
            assert!(
                g.market_monthly.min >= g.advisor_monthly.min - 1e-9,
                "{g:?}"
            );
            assert!(
                g.market_monthly.max <= g.advisor_monthly.max + 1e-9,
                "{g:?}"
            );
        }
    }

    #[test]
    fn the_fitted_market_reclaims_modern_gpu_families_far_above_the_advisors_band() {
        let catalog = Catalog::embedded().unwrap();
        let gaps = by_family(&catalog, "us-east-1", &[]);
        let families: Vec<&str> = gaps.iter().map(|g| g.family.as_str()).collect();
        for f in ["g5", "g6", "p4d", "p5"] {
            let g = gaps
                .iter()
                .find(|g| g.family == f)
                .unwrap_or_else(|| panic!("{f} not in {families:?}"));
            assert!(g.times_the_advisor_rate.min > 10.0, "{g:?}");
            assert!(g.times_the_band_top.is_none_or(|t| t.min > 10.0), "{g:?}");
            assert!(g.market_monthly.min > 0.99, "{g:?}");
            assert!(
                g.mean_life_hours.min <= g.mean_life_hours.max
                    && g.first_hour_reclaim_probability.max < 1.0,
                "{g:?}"
            );
        }
    }

    #[test]
    fn naming_a_cpu_family_lists_it_and_nothing_else() {
        let catalog = Catalog::embedded().unwrap();
        let gaps = by_family(&catalog, "us-east-1", &["M7I".to_string()]);
        assert_eq!(
            gaps.iter().map(|g| g.family.as_str()).collect::<Vec<_>>(),
            ["m7i"]
        );
    }
}
