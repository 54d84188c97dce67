//! Live prices applied to a catalog ([`apply_prices`]) and to the
//! `pricing-data/` files ([`rewrite_region`], [`provenance_note`]). Pure:
//! prices in, catalog or text out.
//!
//! # Rules of [`apply_prices`] (one region)
//! - An on-demand offering takes the live on-demand price of its type.
//! - A spot offering takes the live spot price of its type and zone
//!   ([`PriceSource::SpotObserved`]). Without one, if its type's on-demand
//!   price changed, it is scaled by `new on-demand / old on-demand`, which
//!   keeps its discount (an observed price becomes
//!   [`PriceSource::SpotRescaled`]; a derived one stays derived).
//! - A live spot price for a zone where the type is sold on demand but had
//!   no spot offering adds one, without an advisor bucket (so it is charged
//!   the worst interruption rate).
//! - A missing source (`None`) changes nothing of its kind: the base
//!   catalog's prices stay.
//!
//! Zones are never invented: a live price for a type or zone without an
//! offering in the base catalog is left out (and counted as unplaced).

use crate::catalog::pricing_data::{
    format_price, parse_csv, parse_json, write_csv, OnDemandRow, SpotPriceRow, ON_DEMAND_HEADER,
    SPOT_PRICES_HEADER,
};
use crate::catalog::{
    self, CapacityType, Catalog, InstanceType, Offering, PriceSource, PricingFiles,
};
use crate::core::Time;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// On-demand USD per hour by instance type, for one region.
pub type OnDemandPrices = BTreeMap<String, f64>;

/// Spot USD per hour by (instance type, zone ID), for one region.
pub type SpotPrices = BTreeMap<(String, String), f64>;

/// The live prices of one region; `None` for a source that could not be
/// fetched.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LivePrices {
    /// On-demand prices (Pricing API `GetProducts`).
    pub on_demand: Option<OnDemandPrices>,
    /// Spot prices (`DescribeSpotPriceHistory`).
    pub spot: Option<SpotPrices>,
}

/// What a refresh fetches: the two price sources and the account's zone
/// names, as the `pricing_fallback{source}` metric names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// The Pricing API.
    OnDemand,
    /// The spot price history.
    Spot,
    /// The account's zone names (`DescribeAvailabilityZones`).
    ZoneNames,
}

impl Source {
    /// `on-demand`, `spot` or `zone-names`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::OnDemand => "on-demand",
            Source::Spot => "spot",
            Source::ZoneNames => "zone-names",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a refresh changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RefreshReport {
    /// The region refreshed.
    pub region: String,
    /// On-demand offerings whose price changed.
    pub on_demand_changed: usize,
    /// Spot offerings whose price changed (observed or rescaled).
    pub spot_changed: usize,
    /// Spot offerings added where a live price appeared.
    pub spot_added: usize,
    /// Live prices for a type or zone without an offering to attach to.
    pub unplaced: usize,
    /// Sources that could not be fetched (their prices were kept), with
    /// the reason.
    pub failed: Vec<(Source, String)>,
}

impl RefreshReport {
    /// Prices changed or added, all kinds.
    pub fn changed(&self) -> usize {
        self.on_demand_changed + self.spot_changed + self.spot_added
    }

    /// Whether `source` failed.
    pub fn failed(&self, source: Source) -> bool {
        self.failed.iter().any(|(s, _)| *s == source)
    }
}

impl std::fmt::Display for RefreshReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} on-demand and {} spot prices changed, {} spot offerings added, {} live prices without an offering",
            self.region, self.on_demand_changed, self.spot_changed, self.spot_added, self.unplaced
        )?;
        for (source, reason) in &self.failed {
            match source {
                Source::ZoneNames => write!(f, "; zone names unavailable ({reason}), kept")?,
                _ => write!(f, "; {source} prices unavailable ({reason}), kept")?,
            }
        }
        Ok(())
    }
}

/// `base` with the live prices of `region` applied by the rules in the
/// [module doc](self), and what changed. Failures are not known here: the
/// caller adds them to [`RefreshReport::failed`].
pub fn apply_prices(base: &Catalog, region: &str, live: &LivePrices) -> (Catalog, RefreshReport) {
    let mut report = RefreshReport {
        region: region.to_string(),
        ..RefreshReport::default()
    };
    let old_on_demand: HashMap<&str, f64> = base
        .offerings_in(region)
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .map(|o| (o.instance_type.as_str(), o.price_per_hour))
        .collect();
    let new_on_demand =
        |name: &str| -> Option<f64> { live.on_demand.as_ref().and_then(|p| p.get(name)).copied() };
    let live_spot = |name: &str, zone: &str| -> Option<f64> {
        live.spot
            .as_ref()
            .and_then(|p| p.get(&(name.to_string(), zone.to_string())))
            .copied()
    };
    let mut placed_spot: BTreeSet<(String, String)> = BTreeSet::new();
    let mut offerings: Vec<Offering> = Vec::with_capacity(base.offerings().len());
    for o in base.offerings() {
        let mut o = o.clone();
        if o.region == region {
            let before = o.price_per_hour;
            match o.capacity_type {
                CapacityType::OnDemand => {
                    if let Some(p) = new_on_demand(&o.instance_type) {
                        o.price_per_hour = p;
                    }
                    if o.price_per_hour != before {
                        report.on_demand_changed += 1;
                    }
                }
                CapacityType::Spot => {
                    placed_spot.insert((o.instance_type.clone(), o.zone_id.clone()));
                    if let Some(p) = live_spot(&o.instance_type, &o.zone_id) {
                        o.price_per_hour = p;
                        o.price_source = PriceSource::SpotObserved;
                    } else if let (Some(&old), Some(new)) = (
                        old_on_demand.get(o.instance_type.as_str()),
                        new_on_demand(&o.instance_type),
                    ) {
                        if old != new {
                            o.price_per_hour *= new / old;
                            if o.price_source == PriceSource::SpotObserved {
                                o.price_source = PriceSource::SpotRescaled;
                            }
                        }
                    }
                    if o.price_per_hour != before {
                        report.spot_changed += 1;
                    }
                }
                // Reserved capacity is priced by its node class, not by AWS.
                CapacityType::Reserved => {}
            }
        }
        offerings.push(o);
    }
    // Live spot prices for zones sold on demand without a spot offering.
    let on_demand_zones: BTreeSet<(&str, &str)> = base
        .offerings_in(region)
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .map(|o| (o.instance_type.as_str(), o.zone_id.as_str()))
        .collect();
    for ((name, zone), &price) in live.spot.iter().flatten() {
        if placed_spot.contains(&(name.clone(), zone.clone())) {
            continue;
        }
        if on_demand_zones.contains(&(name.as_str(), zone.as_str())) {
            offerings.push(Offering {
                instance_type: name.clone(),
                region: region.to_string(),
                zone_id: zone.clone(),
                capacity_type: CapacityType::Spot,
                price_per_hour: price,
                price_source: PriceSource::SpotObserved,
                interruption_bucket: None,
                market: None,
                reservation: None,
            });
            report.spot_added += 1;
        } else {
            report.unplaced += 1;
        }
    }
    let offered: BTreeSet<&str> = on_demand_zones.iter().map(|(t, _)| *t).collect();
    report.unplaced += live
        .on_demand
        .iter()
        .flatten()
        .filter(|(name, _)| !offered.contains(name.as_str()))
        .count();
    if report.spot_added > 0 {
        // The embedded order: region, type, zone, on-demand before spot.
        offerings.sort_by(|a, b| {
            (
                &a.region,
                &a.instance_type,
                &a.zone_id,
                a.capacity_type == CapacityType::Spot,
            )
                .cmp(&(
                    &b.region,
                    &b.instance_type,
                    &b.zone_id,
                    b.capacity_type == CapacityType::Spot,
                ))
        });
    }
    let types: Vec<InstanceType> = base.instance_types().cloned().collect();
    let catalog = Catalog::from_parts(types, offerings)
        .with_zone_names(base.zone_names().clone())
        .with_devices_of(base);
    (catalog, report)
}

type Names = PricingFiles<()>;

/// The `pricing-data/` files with `region`'s rows of `on-demand.csv` and
/// `spot-prices.csv` replaced by live prices, in the layout of
/// `catalog import` (sorted rows, shortest round-trip decimals). Spot rows
/// carry the live on-demand price of their type as
/// `on_demand_usd_at_snapshot`, so the loader reads them as observed. Prices
/// of types not in `instance-types.json` are left out; every other file and
/// every other region's row is kept byte for byte.
///
/// # Errors
/// [`catalog::Error`] when the given files do not parse, or when the result
/// does not load as a catalog.
pub fn rewrite_region<S: AsRef<str>>(
    files: &PricingFiles<S>,
    region: &str,
    on_demand: &OnDemandPrices,
    spot: &SpotPrices,
) -> catalog::Result<PricingFiles<String>> {
    let types: Vec<InstanceType> =
        parse_json(Names::INSTANCE_TYPES, files.instance_types.as_ref())?;
    let known: BTreeSet<&str> = types.iter().map(|t| t.name.as_str()).collect();

    let mut od_rows: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let existing: Vec<(u64, OnDemandRow)> =
        parse_csv(Names::ON_DEMAND, files.on_demand.as_ref(), ON_DEMAND_HEADER)?;
    for (_, r) in existing.into_iter().filter(|(_, r)| r.region != region) {
        let row = vec![
            r.region.clone(),
            r.instance_type.clone(),
            format_price(r.usd_per_hour),
        ];
        od_rows.insert((r.region, r.instance_type), row);
    }
    for (name, &usd) in on_demand.iter().filter(|(n, _)| known.contains(n.as_str())) {
        let row = vec![region.to_string(), name.clone(), format_price(usd)];
        od_rows.insert((region.to_string(), name.clone()), row);
    }

    let mut spot_rows: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    let existing: Vec<(u64, SpotPriceRow)> = parse_csv(
        Names::SPOT_PRICES,
        files.spot_prices.as_ref(),
        SPOT_PRICES_HEADER,
    )?;
    for (_, r) in existing.into_iter().filter(|(_, r)| r.region != region) {
        let row = vec![
            r.region.clone(),
            r.zone_id.clone(),
            r.instance_type.clone(),
            format_price(r.usd_per_hour),
            r.on_demand_usd_at_snapshot
                .map(format_price)
                .unwrap_or_default(),
        ];
        spot_rows.insert((r.region, r.zone_id, r.instance_type), row);
    }
    for ((name, zone), &usd) in spot.iter().filter(|((n, _), _)| known.contains(n.as_str())) {
        let row = vec![
            region.to_string(),
            zone.clone(),
            name.clone(),
            format_price(usd),
            on_demand
                .get(name)
                .copied()
                .map(format_price)
                .unwrap_or_default(),
        ];
        spot_rows.insert((region.to_string(), zone.clone(), name.clone()), row);
    }

    let out = PricingFiles {
        instance_types: files.instance_types.as_ref().to_string(),
        on_demand: write_csv(ON_DEMAND_HEADER, od_rows.into_values()),
        spot_advisor: files.spot_advisor.as_ref().to_string(),
        spot_prices: write_csv(SPOT_PRICES_HEADER, spot_rows.into_values()),
        zones: files.zones.as_ref().to_string(),
    };
    Catalog::from_pricing_files(&out)?;
    Ok(out)
}

/// Marks around the generated refresh table in `pricing-data/README.md`.
pub const PROVENANCE_BEGIN: &str =
    "<!-- catalog refresh: begin (generated by `quartermaster catalog refresh`) -->";
/// End mark of the generated refresh table.
pub const PROVENANCE_END: &str = "<!-- catalog refresh: end -->";

/// `readme` with the provenance of a refresh of `region` recorded: one row
/// per refreshed region (the newest replaces an older one) in a table
/// between [`PROVENANCE_BEGIN`] and [`PROVENANCE_END`], added as a
/// `## Live refreshes` section at the end when the marks are absent. The
/// rest of the text is kept.
pub fn provenance_note(
    readme: &str,
    region: &str,
    fetched_at: Time,
    on_demand_rows: usize,
    spot_rows: usize,
) -> String {
    let header = "| region | fetched (UTC) | on-demand rows (Pricing API `GetProducts`: Linux, Shared tenancy, no pre-installed software, capacity Used, no license) | spot rows (`DescribeSpotPriceHistory`, Linux/UNIX, latest per zone) |\n|---|---|---|---|";
    let row = format!(
        "| {region} | {} | {on_demand_rows} | {spot_rows} |",
        fetched_at.format("%Y-%m-%dT%H:%M:%SZ")
    );
    let (before, rows, after) = match (readme.find(PROVENANCE_BEGIN), readme.find(PROVENANCE_END)) {
        (Some(b), Some(e)) if b < e => {
            let inner = &readme[b + PROVENANCE_BEGIN.len()..e];
            let rows: Vec<String> = inner
                .lines()
                .filter(|l| l.starts_with("| ") && !l.starts_with("| region |"))
                .map(str::to_string)
                .collect();
            (
                readme[..b].to_string(),
                rows,
                readme[e + PROVENANCE_END.len()..].to_string(),
            )
        }
        _ => {
            let mut before = readme.trim_end().to_string();
            before += "\n\n## Live refreshes\n\n\
                Rows of these regions in `on-demand.csv` and `spot-prices.csv` come from the AWS \
                APIs (`quartermaster catalog refresh`), not from the reference data; a spot row's \
                `on_demand_usd_at_snapshot` is the on-demand price fetched with it.\n\n";
            (before, Vec::new(), "\n".to_string())
        }
    };
    let mut rows: Vec<String> = rows
        .into_iter()
        .filter(|l| !l.starts_with(&format!("| {region} |")))
        .collect();
    rows.push(row);
    rows.sort();
    format!(
        "{before}{PROVENANCE_BEGIN}\n{header}\n{}\n{PROVENANCE_END}{after}",
        rows.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offering(t: &str, zone: &str, ct: CapacityType, price: f64, src: PriceSource) -> Offering {
        Offering {
            instance_type: t.into(),
            region: "r1".into(),
            zone_id: zone.into(),
            capacity_type: ct,
            price_per_hour: price,
            price_source: src,
            market: None,
            reservation: None,
            interruption_bucket: None,
        }
    }

    fn base() -> Catalog {
        use CapacityType::*;
        Catalog::from_parts(
            [InstanceType::bare("g9.big", 8, 1024)],
            [
                offering("g9.big", "z1", OnDemand, 10.0, PriceSource::OnDemand),
                offering("g9.big", "z1", Spot, 4.0, PriceSource::SpotObserved),
                offering("g9.big", "z2", OnDemand, 10.0, PriceSource::OnDemand),
                offering("g9.big", "z2", Spot, 3.0, PriceSource::SpotDerived),
                offering("g9.big", "z3", OnDemand, 10.0, PriceSource::OnDemand),
            ],
        )
    }

    fn price(c: &Catalog, zone: &str, ct: CapacityType) -> (f64, PriceSource) {
        let o = c
            .offerings()
            .iter()
            .find(|o| o.zone_id == zone && o.capacity_type == ct)
            .expect("offering exists");
        (o.price_per_hour, o.price_source)
    }

    #[test]
    fn live_prices_replace_base_prices_and_unobserved_spot_keeps_its_discount() {
        let live = LivePrices {
            on_demand: Some([("g9.big".to_string(), 8.0)].into()),
            spot: Some([(("g9.big".to_string(), "z2".to_string()), 2.5)].into()),
        };
        let (c, report) = apply_prices(&base(), "r1", &live);
        assert_eq!(
            price(&c, "z1", CapacityType::OnDemand),
            (8.0, PriceSource::OnDemand)
        );
        // z1 spot was observed at on-demand 10; now rescaled to on-demand 8.
        assert_eq!(
            price(&c, "z1", CapacityType::Spot),
            (4.0 * 8.0 / 10.0, PriceSource::SpotRescaled)
        );
        assert_eq!(
            price(&c, "z2", CapacityType::Spot),
            (2.5, PriceSource::SpotObserved)
        );
        assert_eq!(report.on_demand_changed, 3);
        assert_eq!(report.spot_changed, 2);
        assert_eq!(report.spot_added, 0);
    }

    #[test]
    fn a_refreshed_catalog_keeps_the_clusters_device_templates() {
        let extra = crate::catalog::DeviceData::parse(
            "devices.yaml",
            "instanceTypes:\n  g9.big:\n  - driver: gpu.nvidia.com\n    kind: gpu\n    count: 2\n    \
             attributes: {type: gpu, productName: NVIDIA G9}\n    capacity: {memory: 96Gi}\n",
        )
        .unwrap();
        let overridden = base().with_devices(&extra);
        let it = overridden.instance_type("g9.big").unwrap().clone();
        let before = overridden.device_templates(&it, crate::catalog::GpuLayout::Whole);
        assert_eq!(before.len(), 1, "{before:?}");
        let live = LivePrices {
            on_demand: Some([("g9.big".to_string(), 8.0)].into()),
            spot: None,
        };
        let (refreshed, _) = apply_prices(&overridden, "r1", &live);
        assert_eq!(
            price(&refreshed, "z1", CapacityType::OnDemand).0,
            8.0,
            "repriced"
        );
        assert_eq!(
            refreshed.device_templates(&it, crate::catalog::GpuLayout::Whole),
            before
        );
        // Without the cluster's data the type has no templates: the
        // override is what carried them.
        assert!(apply_prices(&base(), "r1", &live)
            .0
            .device_templates(&it, crate::catalog::GpuLayout::Whole)
            .is_empty());
    }

    #[test]
    fn live_spot_price_in_a_zone_without_spot_adds_an_offering_but_never_a_zone() {
        let live = LivePrices {
            on_demand: None,
            spot: Some(
                [
                    (("g9.big".to_string(), "z3".to_string()), 1.5),
                    (("g9.big".to_string(), "z9".to_string()), 1.0),
                ]
                .into(),
            ),
        };
        let (c, report) = apply_prices(&base(), "r1", &live);
        assert_eq!(
            price(&c, "z3", CapacityType::Spot),
            (1.5, PriceSource::SpotObserved)
        );
        assert!(c.offerings().iter().all(|o| o.zone_id != "z9"));
        assert_eq!((report.spot_added, report.unplaced), (1, 1));
        assert_eq!(c.offerings().len(), 6);
    }

    #[test]
    fn missing_sources_keep_the_base_prices() {
        let (c, report) = apply_prices(&base(), "r1", &LivePrices::default());
        assert_eq!(c.offerings(), base().offerings());
        assert_eq!(report.changed(), 0);
    }

    #[test]
    fn provenance_note_adds_a_section_once_and_replaces_a_regions_row() {
        use chrono::TimeZone;
        let t1 = chrono::Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        let t2 = chrono::Utc.with_ymd_and_hms(2026, 2, 2, 3, 4, 5).unwrap();
        let once = provenance_note("# data\n", "us-east-1", t1, 10, 20);
        assert!(once.starts_with("# data\n\n## Live refreshes\n"), "{once}");
        assert!(
            once.contains("| us-east-1 | 2026-01-02T03:04:05Z | 10 | 20 |"),
            "{once}"
        );
        let twice = provenance_note(&once, "eu-west-1", t1, 1, 2);
        let thrice = provenance_note(&twice, "us-east-1", t2, 11, 21);
        assert_eq!(thrice.matches("## Live refreshes").count(), 1);
        assert!(!thrice.contains("2026-01-02T03:04:05Z | 10 |"), "{thrice}");
        assert!(thrice.contains("| us-east-1 | 2026-02-02T03:04:05Z | 11 | 21 |"));
        assert!(thrice.contains("| eu-west-1 |"));
        assert!(thrice.ends_with(&format!("{PROVENANCE_END}\n")));
    }
}
