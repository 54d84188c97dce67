//! The embedded catalog checked against the reference data it is made from
//! (`../shared/reference-data`, beside the repository): the reference files
//! are the oracle, so these tests compare with them rather than with copied
//! numbers.

use quartermaster::catalog::{
    import::import, CapacityType, Catalog, PriceSource, PricingFiles, ReferenceFiles,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn reference_text(name: &str) -> String {
    read(repo_path("../shared/reference-data").join(name))
}

fn reference_json(name: &str) -> Value {
    serde_json::from_str(&reference_text(name)).expect("reference JSON parses")
}

/// `{region: {type: usd}}` from `on-demand-prices.json`.
fn reference_on_demand() -> BTreeMap<String, BTreeMap<String, f64>> {
    serde_json::from_value(reference_json(ReferenceFiles::ON_DEMAND_PRICES)).unwrap()
}

/// `{region: {type: [zone_id]}}` from `instance-type-offerings-az-id.json`.
fn reference_zones() -> BTreeMap<String, BTreeMap<String, Vec<String>>> {
    serde_json::from_value(reference_json(ReferenceFiles::OFFERINGS)).unwrap()
}

fn catalog() -> Catalog {
    Catalog::embedded().expect("the embedded catalog loads")
}

#[test]
fn import_of_the_reference_data_reproduces_pricing_data_byte_for_byte() {
    let reference = ReferenceFiles::try_from_fn(|name| Ok::<_, ()>(reference_text(name))).unwrap();
    let imported = import(&reference).expect("the reference data imports");
    let committed =
        PricingFiles::try_from_fn(|name| Ok::<_, ()>(read(repo_path("pricing-data").join(name))))
            .unwrap();
    for ((name, fresh), (_, on_disk)) in imported.files().into_iter().zip(committed.files()) {
        assert!(
            fresh == on_disk,
            "pricing-data/{name} differs from what the import makes; run \
             `quartermaster catalog import --from ../shared/reference-data --out pricing-data`"
        );
    }
}

#[test]
fn p4d_24xlarge_has_eight_nvidia_a100_with_40_gib_each() {
    let catalog = catalog();
    let p4d = catalog.instance_type("p4d.24xlarge").expect("p4d.24xlarge");
    let accelerator = p4d.accelerator.as_ref().expect("an accelerator");
    assert_eq!(accelerator.manufacturer, "NVIDIA");
    assert_eq!(accelerator.model, "A100");
    assert_eq!(accelerator.count, 8);
    assert_eq!(accelerator.memory_mib_per_device, 40 * 1024);
}

#[test]
fn us_east_1_p4d_on_demand_price_equals_the_reference_price() {
    let expected = reference_on_demand()["us-east-1"]["p4d.24xlarge"];
    let catalog = catalog();
    let on_demand: Vec<_> = catalog
        .offerings_of("us-east-1", "p4d.24xlarge")
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .collect();
    assert!(!on_demand.is_empty());
    for o in on_demand {
        assert_eq!(o.price_per_hour, expected, "{o:?}");
        assert_eq!(o.price_source, PriceSource::OnDemand);
    }
    assert_eq!(
        catalog.on_demand_price("us-east-1", "p4d.24xlarge"),
        Some(expected)
    );
}

#[test]
fn every_offering_zone_is_listed_for_its_type_in_the_reference_offerings() {
    let zones = reference_zones();
    for o in catalog().offerings() {
        let listed = zones
            .get(&o.region)
            .and_then(|types| types.get(&o.instance_type))
            .is_some_and(|z| z.contains(&o.zone_id));
        assert!(listed, "{o:?} is in a zone the reference does not list");
    }
}

#[test]
fn regions_with_p5_zones_but_no_p5_price_have_no_p5_offering() {
    let prices = reference_on_demand();
    let zones = reference_zones();
    let unpriced: Vec<(&String, &String)> = zones
        .iter()
        .flat_map(|(region, types)| types.keys().map(move |t| (region, t)))
        .filter(|(_, t)| t.starts_with("p5"))
        .filter(|(region, t)| !prices.get(*region).is_some_and(|p| p.contains_key(*t)))
        .collect();
    assert!(
        !unpriced.is_empty(),
        "the reference data should have a p5 type with zones but no price"
    );
    let catalog = catalog();
    for (region, t) in unpriced {
        let offerings: Vec<_> = catalog.offerings_of(region, t).collect();
        assert!(offerings.is_empty(), "{t} in {region}: {offerings:?}");
    }
}

#[test]
fn every_priced_type_is_offered_on_demand_in_each_of_its_zones_and_nowhere_else() {
    let prices = reference_on_demand();
    let mut expected = BTreeSet::new();
    for (region, types) in reference_zones() {
        for (t, zone_ids) in types {
            if prices.get(&region).is_some_and(|p| p.contains_key(&t)) {
                for zone in zone_ids {
                    expected.insert((region.clone(), t.clone(), zone));
                }
            }
        }
    }
    let actual: BTreeSet<_> = catalog()
        .offerings()
        .iter()
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .map(|o| (o.region.clone(), o.instance_type.clone(), o.zone_id.clone()))
        .collect();
    assert_eq!(actual, expected);
}

#[test]
fn snapshot_spot_prices_are_kept_or_rescaled_to_the_current_on_demand_price() {
    let prices = reference_on_demand();
    let catalog = catalog();
    let snapshot = reference_text(ReferenceFiles::SPOT_PRICES_SNAPSHOT);
    let mut reader = csv::Reader::from_reader(snapshot.as_bytes());
    let mut seen = BTreeMap::new();
    for record in reader.records() {
        let record = record.unwrap();
        let (t, region, zone, spot, then) =
            (&record[0], &record[1], &record[2], &record[3], &record[4]);
        let (Ok(spot), Ok(then)) = (spot.parse::<f64>(), then.parse::<f64>()) else {
            continue;
        };
        let Some(offering) = catalog
            .offerings_of(region, t)
            .find(|o| o.zone_id == zone && o.capacity_type == CapacityType::Spot)
        else {
            continue;
        };
        let now = prices[region][t];
        if now == then {
            assert_eq!(
                offering.price_source,
                PriceSource::SpotObserved,
                "{offering:?}"
            );
            assert_eq!(offering.price_per_hour, spot);
        } else {
            assert_eq!(
                offering.price_source,
                PriceSource::SpotRescaled,
                "{offering:?}"
            );
            let discount_then = spot / then;
            let discount_now = offering.price_per_hour / now;
            assert!((discount_then - discount_now).abs() < 1e-12, "{offering:?}");
        }
        *seen
            .entry(format!("{:?}", offering.price_source))
            .or_insert(0) += 1;
    }
    assert!(
        seen.len() == 2,
        "expected both observed and rescaled prices: {seen:?}"
    );
}

#[test]
fn derived_spot_prices_apply_the_advisor_savings_to_the_on_demand_price() {
    let advisor = reference_json(ReferenceFiles::SPOT_ADVISOR);
    let catalog = catalog();
    let derived: Vec<_> = catalog
        .offerings()
        .iter()
        .filter(|o| o.price_source == PriceSource::SpotDerived)
        .collect();
    assert!(!derived.is_empty());
    for o in derived {
        let advice = &advisor["spot_advisor"][&o.region]["Linux"][&o.instance_type];
        let savings = advice["s"].as_f64().expect("advisor savings");
        let on_demand = catalog
            .on_demand_price(&o.region, &o.instance_type)
            .unwrap();
        let expected = on_demand * (1.0 - savings / 100.0);
        assert!((o.price_per_hour - expected).abs() < 1e-9, "{o:?}");
    }
}

#[test]
fn spot_offerings_carry_the_advisor_interruption_bucket_where_it_has_one() {
    let advisor = reference_json(ReferenceFiles::SPOT_ADVISOR);
    for o in catalog()
        .offerings()
        .iter()
        .filter(|o| o.capacity_type == CapacityType::Spot)
    {
        let bucket = advisor["spot_advisor"][&o.region]["Linux"][&o.instance_type]["r"].as_u64();
        assert_eq!(
            o.interruption_bucket.map(|b| u64::from(b.0)),
            bucket,
            "{o:?}"
        );
    }
}
