//! The embedded catalog: the `pricing-data/` files compiled into the binary,
//! and the rules that turn their facts into [`Offering`]s. `pricing-data/`
//! holds facts only; every derived figure is made here, at load time.
//!
//! # Offering rules
//!
//! For every row `(region, type, zone)` of `zones.csv` (the only source of
//! zones):
//! 1. **On-demand.** If `on-demand.csv` has a price for `(region, type)`, one
//!    on-demand offering at that price ([`PriceSource::OnDemand`]). If it has
//!    none, the type gets no offering at all in that region, neither
//!    on-demand nor spot: nothing is invented.
//! 2. **Spot**, priced by the first rule that applies:
//!    - `spot-prices.csv` has a price for the zone and its
//!      `on_demand_usd_at_snapshot` equals the current on-demand price: that
//!      price ([`PriceSource::SpotObserved`]);
//!    - it has a price but the snapshot's on-demand price differs (the
//!      snapshot predates the June 2025 p4d/p4de/p5/p5en on-demand cut):
//!      `spot x current_on_demand / snapshot_on_demand`, which keeps the
//!      observed per-zone discount ([`PriceSource::SpotRescaled`]);
//!    - otherwise (no observation in the zone, or one whose snapshot
//!      on-demand price is unknown so it cannot be checked), if
//!      `spot-advisor.csv` has savings `s` for `(region, type)`:
//!      `on_demand x (1 - s / 100)` ([`PriceSource::SpotDerived`]);
//!    - otherwise no spot offering.
//!
//!    The interruption bucket comes from the advisor where it has an entry
//!    (`None` otherwise). Types whose reference `usageClasses` lack `spot`
//!    have no spot figures in `pricing-data/` (the import drops them), so
//!    they get no spot offering.
//!
//! Spot-price rows for a zone that `zones.csv` does not list are ignored, as
//! are prices for regions without zones. Offerings come out sorted by region,
//! type and zone, on-demand before spot.

use super::pricing_data::{
    check_price, parse_csv, parse_json, OnDemandRow, SpotAdvisorRow, SpotPriceRow, ZoneRow,
    ON_DEMAND_HEADER, SPOT_ADVISOR_HEADER, SPOT_PRICES_HEADER, ZONES_HEADER,
};
use super::{
    CapacityType, Catalog, Error, InstanceType, InterruptionBucket, Offering, PriceSource,
    PricingFiles, Result,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

type Names = PricingFiles<()>;

/// The `pricing-data/` files as compiled into the binary.
pub const EMBEDDED: PricingFiles<&'static str> = PricingFiles {
    instance_types: include_str!("../../pricing-data/instance-types.json"),
    on_demand: include_str!("../../pricing-data/on-demand.csv"),
    spot_advisor: include_str!("../../pricing-data/spot-advisor.csv"),
    spot_prices: include_str!("../../pricing-data/spot-prices.csv"),
    zones: include_str!("../../pricing-data/zones.csv"),
};

/// The Spot Instance Advisor's figures for one type in one region.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Advice {
    savings_pct: i16,
    bucket: InterruptionBucket,
}

/// One per-zone spot price from the snapshot.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Observation {
    usd_per_hour: f64,
    on_demand_at_snapshot: Option<f64>,
}

/// The spot price of one zone by the rules in the module doc, or `None`
/// when there is nothing to base it on.
fn spot_price(
    on_demand: f64,
    observed: Option<Observation>,
    advice: Option<Advice>,
) -> Option<(f64, PriceSource)> {
    match (observed, advice) {
        (
            Some(Observation {
                usd_per_hour,
                on_demand_at_snapshot: Some(then),
            }),
            _,
        ) => Some(if then == on_demand {
            (usd_per_hour, PriceSource::SpotObserved)
        } else {
            (usd_per_hour * on_demand / then, PriceSource::SpotRescaled)
        }),
        (_, Some(a)) => Some((
            on_demand * (1.0 - f64::from(a.savings_pct) / 100.0),
            PriceSource::SpotDerived,
        )),
        _ => None,
    }
}

impl Catalog {
    /// The catalog compiled into the binary ([`EMBEDDED`]). Parses the files
    /// each time (a few milliseconds).
    ///
    /// # Errors
    /// As [`Catalog::from_pricing_files`]; the test suite guarantees the
    /// embedded files load.
    pub fn embedded() -> Result<Catalog> {
        Catalog::from_pricing_files(&EMBEDDED)
    }

    /// A catalog from `pricing-data/` texts, by the rules in the
    /// [module doc](self).
    ///
    /// # Errors
    /// [`Error::Parse`] when a file is malformed (with its name and line);
    /// [`Error::Invalid`] when a row names an unknown instance type, repeats a
    /// key, or holds a value out of range.
    pub fn from_pricing_files<S: AsRef<str>>(files: &PricingFiles<S>) -> Result<Catalog> {
        let types = instance_types(files.instance_types.as_ref())?;
        let known: BTreeSet<&str> = types.iter().map(|t| t.name.as_str()).collect();
        let on_demand_rows =
            parse_csv(Names::ON_DEMAND, files.on_demand.as_ref(), ON_DEMAND_HEADER)?;
        let advisor_rows = parse_csv(
            Names::SPOT_ADVISOR,
            files.spot_advisor.as_ref(),
            SPOT_ADVISOR_HEADER,
        )?;
        let spot_rows = parse_csv(
            Names::SPOT_PRICES,
            files.spot_prices.as_ref(),
            SPOT_PRICES_HEADER,
        )?;
        let zone_rows = parse_csv(Names::ZONES, files.zones.as_ref(), ZONES_HEADER)?;
        let prices = Prices {
            on_demand: on_demand_by_type(&on_demand_rows, &known)?,
            advisor: advice_by_type(&advisor_rows, &known)?,
            observed: observations_by_zone(&spot_rows, &known)?,
        };
        let offerings = offerings(zone_rows, &known, &prices)?;
        Ok(Catalog::from_parts(types, offerings))
    }
}

/// The price files indexed for the rules: by (region, type) and, for
/// observations, (region, type, zone).
struct Prices<'a> {
    on_demand: HashMap<(&'a str, &'a str), f64>,
    advisor: HashMap<(&'a str, &'a str), Advice>,
    observed: HashMap<(&'a str, &'a str, &'a str), Observation>,
}

/// The offerings of every row of `zones.csv`, sorted by region, type and
/// zone, on-demand before spot.
fn offerings(
    mut zone_rows: Vec<(u64, ZoneRow)>,
    known: &BTreeSet<&str>,
    prices: &Prices,
) -> Result<Vec<Offering>> {
    let file = Names::ZONES;
    zone_rows.sort_by(|(_, a), (_, b)| {
        (&a.region, &a.instance_type, &a.zone_id).cmp(&(&b.region, &b.instance_type, &b.zone_id))
    });
    let mut offerings = Vec::with_capacity(zone_rows.len() * 2);
    let mut previous: Option<&ZoneRow> = None;
    for (line, z) in &zone_rows {
        check_type(known, file, *line, &z.instance_type)?;
        if previous == Some(z) {
            return Err(duplicate(file, *line));
        }
        previous = Some(z);
        let (region, name, zone) = (
            z.region.as_str(),
            z.instance_type.as_str(),
            z.zone_id.as_str(),
        );
        let Some(&od) = prices.on_demand.get(&(region, name)) else {
            continue;
        };
        let offering =
            |capacity_type, price_per_hour, price_source, interruption_bucket| Offering {
                instance_type: name.to_owned(),
                region: region.to_owned(),
                zone_id: zone.to_owned(),
                capacity_type,
                price_per_hour,
                price_source,
                interruption_bucket,
                market: None,
                reservation: None,
            };
        offerings.push(offering(
            CapacityType::OnDemand,
            od,
            PriceSource::OnDemand,
            None,
        ));
        let advice = prices.advisor.get(&(region, name)).copied();
        let observation = prices.observed.get(&(region, name, zone)).copied();
        if let Some((price, source)) = spot_price(od, observation, advice) {
            offerings.push(offering(
                CapacityType::Spot,
                price,
                source,
                advice.map(|a| a.bucket),
            ));
        }
    }
    Ok(offerings)
}

fn invalid(file: &'static str, line: u64, message: String) -> Error {
    Error::Invalid {
        file,
        entry: format!("line {line}"),
        message,
    }
}

fn duplicate(file: &'static str, line: u64) -> Error {
    invalid(file, line, "duplicate key".into())
}

fn check_type(known: &BTreeSet<&str>, file: &'static str, line: u64, name: &str) -> Result<()> {
    if known.contains(name) {
        Ok(())
    } else {
        Err(invalid(
            file,
            line,
            format!("unknown instance type {name:?}"),
        ))
    }
}

/// `on-demand.csv` by (region, type).
fn on_demand_by_type<'a>(
    rows: &'a [(u64, OnDemandRow)],
    known: &BTreeSet<&str>,
) -> Result<HashMap<(&'a str, &'a str), f64>> {
    let file = Names::ON_DEMAND;
    let mut by_type = HashMap::with_capacity(rows.len());
    for (line, r) in rows {
        check_type(known, file, *line, &r.instance_type)?;
        check_price(file, || format!("line {line}"), r.usd_per_hour)?;
        let key = (r.region.as_str(), r.instance_type.as_str());
        if by_type.insert(key, r.usd_per_hour).is_some() {
            return Err(duplicate(file, *line));
        }
    }
    Ok(by_type)
}

/// `spot-advisor.csv` by (region, type).
fn advice_by_type<'a>(
    rows: &'a [(u64, SpotAdvisorRow)],
    known: &BTreeSet<&str>,
) -> Result<HashMap<(&'a str, &'a str), Advice>> {
    let file = Names::SPOT_ADVISOR;
    let mut by_type = HashMap::with_capacity(rows.len());
    for (line, r) in rows {
        check_type(known, file, *line, &r.instance_type)?;
        if !(-100..100).contains(&r.savings_pct)
            || r.interruption_bucket > InterruptionBucket::WORST.0
        {
            let message = format!(
                "savings {}% or bucket {} out of range (-100..100, 0..=4)",
                r.savings_pct, r.interruption_bucket
            );
            return Err(invalid(file, *line, message));
        }
        let advice = Advice {
            savings_pct: r.savings_pct,
            bucket: InterruptionBucket(r.interruption_bucket),
        };
        let key = (r.region.as_str(), r.instance_type.as_str());
        if by_type.insert(key, advice).is_some() {
            return Err(duplicate(file, *line));
        }
    }
    Ok(by_type)
}

/// `spot-prices.csv` by (region, type, zone).
fn observations_by_zone<'a>(
    rows: &'a [(u64, SpotPriceRow)],
    known: &BTreeSet<&str>,
) -> Result<HashMap<(&'a str, &'a str, &'a str), Observation>> {
    let file = Names::SPOT_PRICES;
    let mut by_zone = HashMap::with_capacity(rows.len());
    for (line, r) in rows {
        check_type(known, file, *line, &r.instance_type)?;
        check_price(file, || format!("line {line}"), r.usd_per_hour)?;
        if let Some(then) = r.on_demand_usd_at_snapshot {
            check_price(file, || format!("line {line}"), then)?;
        }
        let key = (
            r.region.as_str(),
            r.instance_type.as_str(),
            r.zone_id.as_str(),
        );
        let observation = Observation {
            usd_per_hour: r.usd_per_hour,
            on_demand_at_snapshot: r.on_demand_usd_at_snapshot,
        };
        if by_zone.insert(key, observation).is_some() {
            return Err(duplicate(file, *line));
        }
    }
    Ok(by_zone)
}

/// Parses `instance-types.json`, rejecting a name listed twice.
fn instance_types(text: &str) -> Result<Vec<InstanceType>> {
    let file = Names::INSTANCE_TYPES;
    let types: Vec<InstanceType> = parse_json(file, text)?;
    let mut seen = BTreeMap::new();
    for t in &types {
        if seen.insert(t.name.as_str(), ()).is_some() {
            return Err(Error::Invalid {
                file,
                entry: t.name.clone(),
                message: "listed twice".into(),
            });
        }
    }
    Ok(types)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPES: &str = r#"[
{"name":"p9.big","family":"p9","vcpu":8,"memory_mib":65536,"architecture":"x86_64","accelerator":{"kind":"gpu","manufacturer":"NVIDIA","model":"Z1","count":2,"memory_mib_per_device":1024},"efa_supported":false,"max_efa_interfaces":0,"max_network_interfaces":4}
]
"#;

    /// A one-type catalog: `zones` rows for `p9.big` in region `r1`, plus the
    /// given bodies (without headers) of the price files.
    struct Fixture {
        on_demand: &'static str,
        advisor: &'static str,
        spot: &'static str,
        zones: &'static str,
    }

    fn fixture() -> Fixture {
        Fixture {
            on_demand: "r1,p9.big,10\n",
            advisor: "",
            spot: "",
            zones: "r1,p9.big,z1\n",
        }
    }

    impl Fixture {
        fn files(&self) -> PricingFiles<String> {
            let with_header = |h: &[&str], body: &str| format!("{}\n{body}", h.join(","));
            PricingFiles {
                instance_types: TYPES.into(),
                on_demand: with_header(ON_DEMAND_HEADER, self.on_demand),
                spot_advisor: with_header(SPOT_ADVISOR_HEADER, self.advisor),
                spot_prices: with_header(SPOT_PRICES_HEADER, self.spot),
                zones: with_header(ZONES_HEADER, self.zones),
            }
        }

        fn load(&self) -> Catalog {
            Catalog::from_pricing_files(&self.files()).expect("fixture loads")
        }

        fn load_err(&self) -> String {
            Catalog::from_pricing_files(&self.files())
                .expect_err("fixture is corrupt")
                .to_string()
        }
    }

    fn only_spot(c: &Catalog) -> &Offering {
        let spot: Vec<&Offering> = c
            .offerings()
            .iter()
            .filter(|o| o.capacity_type == CapacityType::Spot)
            .collect();
        assert_eq!(spot.len(), 1, "{spot:?}");
        spot[0]
    }

    #[test]
    fn derived_spot_price_is_on_demand_times_one_minus_savings() {
        let c = Fixture {
            advisor: "r1,p9.big,70,2\n",
            ..fixture()
        }
        .load();
        let spot = only_spot(&c);
        assert_eq!(spot.price_per_hour, 10.0 * (1.0 - 70.0 / 100.0));
        assert_eq!(spot.price_source, PriceSource::SpotDerived);
        assert_eq!(spot.interruption_bucket, Some(InterruptionBucket(2)));
        assert_eq!(c.on_demand_price("r1", "p9.big"), Some(10.0));
    }

    #[test]
    fn snapshot_price_taken_at_the_current_on_demand_price_is_used_as_observed() {
        let c = Fixture {
            advisor: "r1,p9.big,70,2\n",
            spot: "r1,z1,p9.big,4.5,10\n",
            ..fixture()
        }
        .load();
        let spot = only_spot(&c);
        assert_eq!(spot.price_per_hour, 4.5);
        assert_eq!(spot.price_source, PriceSource::SpotObserved);
    }

    #[test]
    fn snapshot_price_taken_before_an_on_demand_change_is_rescaled() {
        let c = Fixture {
            spot: "r1,z1,p9.big,4,16\n",
            ..fixture()
        }
        .load();
        let spot = only_spot(&c);
        assert_eq!(spot.price_per_hour, 4.0 * 10.0 / 16.0);
        assert_eq!(spot.price_source, PriceSource::SpotRescaled);
        assert_eq!(spot.interruption_bucket, None);
    }

    #[test]
    fn snapshot_price_without_its_on_demand_price_falls_back_to_the_advisor() {
        let c = Fixture {
            advisor: "r1,p9.big,50,0\n",
            spot: "r1,z1,p9.big,1,\n",
            ..fixture()
        }
        .load();
        assert_eq!(only_spot(&c).price_source, PriceSource::SpotDerived);
        assert_eq!(only_spot(&c).price_per_hour, 5.0);
    }

    #[test]
    fn no_offering_at_all_without_an_on_demand_price() {
        let c = Fixture {
            on_demand: "r2,p9.big,10\n",
            advisor: "r1,p9.big,70,2\n",
            spot: "r1,z1,p9.big,4,10\n",
            ..fixture()
        }
        .load();
        assert!(c.offerings().is_empty(), "{:?}", c.offerings());
    }

    #[test]
    fn no_spot_offering_without_observation_or_advice() {
        let c = Fixture {
            zones: "r1,p9.big,z1\nr1,p9.big,z2\n",
            spot: "r1,z1,p9.big,4,10\n",
            ..fixture()
        }
        .load();
        let z2: Vec<_> = c.offerings().iter().filter(|o| o.zone_id == "z2").collect();
        assert_eq!(z2.len(), 1);
        assert_eq!(z2[0].capacity_type, CapacityType::OnDemand);
    }

    #[test]
    fn snapshot_row_for_a_zone_without_offerings_is_ignored() {
        let c = Fixture {
            spot: "r1,z9,p9.big,4,10\n",
            ..fixture()
        }
        .load();
        assert!(c.offerings().iter().all(|o| o.zone_id == "z1"));
        assert_eq!(c.zones("r1"), ["z1"]);
    }

    #[test]
    fn corrupt_price_row_names_file_line_and_column() {
        let err = Fixture {
            on_demand: "r1,p9.big,10\nr2,p9.big,ten\n",
            ..fixture()
        }
        .load_err();
        assert!(err.contains("on-demand.csv"), "{err}");
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("usd_per_hour"), "{err}");
    }

    #[test]
    fn row_with_a_missing_column_names_file_and_line() {
        let err = Fixture {
            zones: "r1,p9.big,z1\nr1,p9.big\n",
            ..fixture()
        }
        .load_err();
        assert!(err.contains("zones.csv") && err.contains("line 3"), "{err}");
    }

    #[test]
    fn row_naming_an_unknown_instance_type_is_rejected() {
        let err = Fixture {
            advisor: "r1,p8.gone,10,0\n",
            ..fixture()
        }
        .load_err();
        assert!(
            err.contains("spot-advisor.csv") && err.contains("line 2"),
            "{err}"
        );
        assert!(err.contains("p8.gone"), "{err}");
    }

    #[test]
    fn embedded_data_loads() {
        let c = Catalog::embedded().expect("embedded pricing-data loads");
        assert!(c.instance_types().count() > 0);
        assert!(!c.offerings().is_empty());
    }
}
