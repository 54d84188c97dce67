//! Turns the reference data into the `pricing-data/` files: strings in,
//! strings out, no file I/O (`quartermaster catalog import` reads and writes).
//!
//! The import copies facts and derives nothing: it renames fields, converts
//! the JSON maps into sorted CSV rows and checks every value. Prices are
//! written as the shortest decimal that reads back as the same `f64`. Every
//! instance type of the reference data is imported, accelerator and
//! general-purpose CPU families alike (the CPU families serve the CPU-only
//! pods of a GPU cluster). Two filters apply:
//! - spot figures (advisor rows, snapshot prices) of a type whose
//!   `usageClasses` lack `spot` are dropped, so no spot offering can be built
//!   for it;
//! - snapshot rows without a spot price are dropped; the snapshot's own
//!   on-demand column is kept (empty where the source had none) so that the
//!   loader can tell which observations predate a price change.
//!
//! Everything else (which offerings exist, derived spot prices) is decided by
//! the loader in [`embedded`](super::embedded).

use super::pricing_data::{
    check_price, format_price, parse_csv, parse_json, write_csv, ON_DEMAND_HEADER,
    SPOT_ADVISOR_HEADER, SPOT_PRICES_HEADER, ZONES_HEADER,
};
use super::{
    Accelerator, AcceleratorKind, Architecture, Error, InstanceType, InterruptionBucket,
    PricingFiles, ReferenceFiles, Result,
};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

type RefNames = ReferenceFiles<()>;

/// The instance types the import writes: a row naming another is an error.
struct Known<'a>(BTreeSet<&'a str>);

impl Known<'_> {
    /// Checks that `name` is in instance-types.json.
    ///
    /// # Errors
    /// [`Error::Invalid`] when it is not.
    fn check(&self, file: &'static str, entry: String, name: &str) -> Result<()> {
        if self.0.contains(name) {
            Ok(())
        } else {
            Err(unknown_type(file, entry, name))
        }
    }
}

/// Produces the `pricing-data/` files from the reference data.
///
/// # Errors
/// [`Error::Parse`] when a reference file is malformed; [`Error::Invalid`]
/// when an entry names an unknown instance type, repeats a key, or holds a
/// value out of range (non-positive price, savings outside -100..100%, bucket above
/// 4, an advisor bucket label that differs from ours).
pub fn import<S: AsRef<str>>(reference: &ReferenceFiles<S>) -> Result<PricingFiles<String>> {
    let types = instance_types(reference.instance_types.as_ref())?;
    let known = Known(types.iter().map(|(t, _)| t.name.as_str()).collect());
    let spot_ok: BTreeSet<&str> = types
        .iter()
        .filter(|(_, spot)| *spot)
        .map(|(t, _)| t.name.as_str())
        .collect();

    let mut json = String::from("[\n");
    for (i, (t, _)) in types.iter().enumerate() {
        json += &serde_json::to_string(t).expect("an InstanceType always serializes");
        json += if i + 1 < types.len() { ",\n" } else { "\n" };
    }
    json += "]\n";

    Ok(PricingFiles {
        instance_types: json,
        on_demand: on_demand(reference.on_demand_prices.as_ref(), &known)?,
        spot_advisor: spot_advisor(reference.spot_advisor.as_ref(), &known, &spot_ok)?,
        spot_prices: spot_prices(reference.spot_prices_snapshot.as_ref(), &known, &spot_ok)?,
        zones: zones(reference.offerings.as_ref(), &known)?,
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RefInstanceType {
    instance_type: String,
    family: String,
    vcpu: u32,
    #[serde(rename = "memoryMiB")]
    memory_mib: u64,
    architectures: Vec<String>,
    accelerator: Option<RefAccelerator>,
    network: RefNetwork,
    gpu_interconnect: Option<String>,
    local_storage: Option<RefLocalStorage>,
    usage_classes: Vec<String>,
    cpu_manufacturer: Option<String>,
    hypervisor: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RefAccelerator {
    api_field: String,
    manufacturer: String,
    model: String,
    count: u32,
    #[serde(rename = "memoryMiBPerDevice")]
    memory_mib_per_device: u64,
    neuron_cores_per_device: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RefNetwork {
    max_network_interfaces: u32,
    efa_supported: bool,
    max_efa_interfaces: Option<u32>,
    baseline_bandwidth_mbps_karpenter: Option<u64>,
}

#[derive(Deserialize)]
struct RefLocalStorage {
    #[serde(rename = "totalGB")]
    total_gb: u64,
    /// EC2's `NvmeSupport`: `required`, `supported` or `unsupported`.
    nvme: Option<String>,
}

/// The instance types, sorted by name, each with whether it can run as spot.
fn instance_types(text: &str) -> Result<Vec<(InstanceType, bool)>> {
    let file = RefNames::INSTANCE_TYPES;
    let rows: Vec<RefInstanceType> = parse_json(file, text)?;
    let mut out: BTreeMap<String, (InstanceType, bool)> = BTreeMap::new();
    for r in rows {
        let invalid = |message: String| Error::Invalid {
            file,
            entry: r.instance_type.clone(),
            message,
        };
        let architecture = r
            .architectures
            .iter()
            .find_map(|a| match a.as_str() {
                "x86_64" => Some(Architecture::X86_64),
                "arm64" => Some(Architecture::Arm64),
                _ => None,
            })
            .ok_or_else(|| invalid(format!("no x86_64 or arm64 in {:?}", r.architectures)))?;
        let accelerator = match r.accelerator {
            None => None,
            Some(a) => Some(Accelerator {
                kind: match a.api_field.as_str() {
                    "GpuInfo" => AcceleratorKind::Gpu,
                    "NeuronInfo" => AcceleratorKind::Neuron,
                    other => {
                        return Err(invalid(format!("unknown accelerator apiField {other:?}")))
                    }
                },
                manufacturer: a.manufacturer,
                model: a.model,
                count: a.count,
                memory_mib_per_device: a.memory_mib_per_device,
                neuron_cores_per_device: a.neuron_cores_per_device,
            }),
        };
        let spot = r.usage_classes.iter().any(|c| c == "spot");
        let t = InstanceType {
            name: r.instance_type.clone(),
            family: r.family,
            vcpu: r.vcpu,
            memory_mib: r.memory_mib,
            architecture,
            accelerator,
            efa_supported: r.network.efa_supported,
            max_efa_interfaces: r.network.max_efa_interfaces.unwrap_or(0),
            max_network_interfaces: r.network.max_network_interfaces,
            gpu_interconnect: r.gpu_interconnect,
            network_baseline_mbps: r.network.baseline_bandwidth_mbps_karpenter,
            local_storage_gb: r.local_storage.as_ref().map(|s| s.total_gb),
            local_storage_nvme: r
                .local_storage
                .as_ref()
                .and_then(|s| s.nvme.as_deref())
                .is_some_and(|n| n != "unsupported"),
            cpu_manufacturer: r.cpu_manufacturer,
            hypervisor: r.hypervisor.filter(|h| !h.is_empty()),
        };
        if out.insert(r.instance_type.clone(), (t, spot)).is_some() {
            return Err(invalid("listed twice".into()));
        }
    }
    Ok(out.into_values().collect())
}

fn unknown_type(file: &'static str, entry: String, name: &str) -> Error {
    Error::Invalid {
        file,
        entry,
        message: format!("unknown instance type {name:?} (not in instance-types.json)"),
    }
}

fn on_demand(text: &str, known: &Known) -> Result<String> {
    let file = RefNames::ON_DEMAND_PRICES;
    let prices: BTreeMap<String, BTreeMap<String, f64>> = parse_json(file, text)?;
    let mut rows = Vec::new();
    for (region, types) in &prices {
        for (name, &usd) in types {
            let entry = || format!("{region}/{name}");
            known.check(file, entry(), name)?;
            check_price(file, entry, usd)?;
            rows.push(vec![region.clone(), name.clone(), format_price(usd)]);
        }
    }
    Ok(write_csv(ON_DEMAND_HEADER, rows))
}

#[derive(Deserialize)]
struct RefSpotAdvisor {
    ranges: Vec<RefRange>,
    spot_advisor: BTreeMap<String, BTreeMap<String, BTreeMap<String, RefAdvice>>>,
}

#[derive(Deserialize)]
struct RefRange {
    index: u8,
    label: String,
}

#[derive(Deserialize)]
struct RefAdvice {
    s: i16,
    r: u8,
}

/// Savings the import accepts, percent. Negative savings (spot above
/// on-demand) occur in the feed and are kept; 100% would make spot free.
const SAVINGS_PCT: std::ops::Range<i16> = -100..100;

fn spot_advisor(text: &str, known: &Known, spot_ok: &BTreeSet<&str>) -> Result<String> {
    let file = RefNames::SPOT_ADVISOR;
    let feed: RefSpotAdvisor = parse_json(file, text)?;
    for range in &feed.ranges {
        let ours = InterruptionBucket(range.index).label();
        if range.index > InterruptionBucket::WORST.0 || range.label != ours {
            return Err(Error::Invalid {
                file,
                entry: format!("ranges/{}", range.index),
                message: format!(
                    "bucket label {:?} differs from ours ({ours:?}); update InterruptionBucket",
                    range.label
                ),
            });
        }
    }
    let mut rows = Vec::new();
    for (region, systems) in &feed.spot_advisor {
        let Some(linux) = systems.get("Linux") else {
            continue;
        };
        for (name, advice) in linux {
            let entry = || format!("spot_advisor/{region}/Linux/{name}");
            known.check(file, entry(), name)?;
            if !SAVINGS_PCT.contains(&advice.s) || advice.r > InterruptionBucket::WORST.0 {
                return Err(Error::Invalid {
                    file,
                    entry: entry(),
                    message: format!(
                        "savings {}% or bucket {} out of range (-100..100, 0..=4)",
                        advice.s, advice.r
                    ),
                });
            }
            if spot_ok.contains(name.as_str()) {
                rows.push(vec![
                    region.clone(),
                    name.clone(),
                    advice.s.to_string(),
                    advice.r.to_string(),
                ]);
            }
        }
    }
    Ok(write_csv(SPOT_ADVISOR_HEADER, rows))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RefSpotPrice {
    instance_type: String,
    region: String,
    availability_zone_id: String,
    spot_price_usd_per_hour: Option<f64>,
    on_demand_price_usd_per_hour_in_same_snapshot: Option<f64>,
}

const SNAPSHOT_HEADER: &[&str] = &[
    "instanceType",
    "region",
    "availabilityZoneId",
    "spotPriceUsdPerHour",
    "onDemandPriceUsdPerHourInSameSnapshot",
];

fn spot_prices(text: &str, known: &Known, spot_ok: &BTreeSet<&str>) -> Result<String> {
    let file = RefNames::SPOT_PRICES_SNAPSHOT;
    let mut rows: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    for (line, r) in parse_csv::<RefSpotPrice>(file, text, SNAPSHOT_HEADER)? {
        let entry = || format!("line {line}");
        known.check(file, entry(), &r.instance_type)?;
        if let Some(od) = r.on_demand_price_usd_per_hour_in_same_snapshot {
            check_price(file, entry, od)?;
        }
        let Some(spot) = r.spot_price_usd_per_hour else {
            continue;
        };
        check_price(file, entry, spot)?;
        if !spot_ok.contains(r.instance_type.as_str()) {
            continue;
        }
        let key = (
            r.region.clone(),
            r.availability_zone_id.clone(),
            r.instance_type.clone(),
        );
        let row = vec![
            r.region,
            r.availability_zone_id,
            r.instance_type,
            format_price(spot),
            r.on_demand_price_usd_per_hour_in_same_snapshot
                .map(format_price)
                .unwrap_or_default(),
        ];
        if rows.insert(key, row).is_some() {
            return Err(Error::Invalid {
                file,
                entry: entry(),
                message: "a second price for the same region, zone and type".into(),
            });
        }
    }
    Ok(write_csv(SPOT_PRICES_HEADER, rows.into_values()))
}

fn zones(text: &str, known: &Known) -> Result<String> {
    let file = RefNames::OFFERINGS;
    let offerings: BTreeMap<String, BTreeMap<String, Vec<String>>> = parse_json(file, text)?;
    let mut rows = Vec::new();
    for (region, types) in &offerings {
        for (name, zone_ids) in types {
            let entry = || format!("{region}/{name}");
            known.check(file, entry(), name)?;
            let sorted: BTreeSet<&String> = zone_ids.iter().collect();
            if sorted.len() != zone_ids.len() {
                return Err(Error::Invalid {
                    file,
                    entry: entry(),
                    message: "a zone is listed twice".into(),
                });
            }
            for zone in sorted {
                rows.push(vec![region.clone(), name.clone(), zone.clone()]);
            }
        }
    }
    Ok(write_csv(ZONES_HEADER, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPES: &str = r#"[
{"instanceType":"p9.big","family":"p9","vcpu":8,"memoryMiB":65536,"architectures":["i386","x86_64"],"accelerator":{"apiField":"GpuInfo","manufacturer":"NVIDIA","model":"Z1","count":2,"memoryMiBPerDevice":1024},"network":{"maxNetworkInterfaces":4,"efaSupported":false},"localStorage":null,"usageClasses":["on-demand","spot"]},
{"instanceType":"p9.reserved","family":"p9","vcpu":8,"memoryMiB":65536,"architectures":["arm64"],"accelerator":null,"network":{"maxNetworkInterfaces":4,"efaSupported":true,"maxEfaInterfaces":2,"baselineBandwidthMbpsKarpenter":100},"localStorage":{"totalGB":50},"usageClasses":["on-demand"]}
]"#;

    fn reference(snapshot: &str) -> ReferenceFiles<String> {
        ReferenceFiles {
            instance_types: TYPES.into(),
            on_demand_prices: r#"{"r1":{"p9.reserved":2.5,"p9.big":1.0}}"#.into(),
            spot_advisor: r#"{"ranges":[{"index":0,"label":"<5%"}],"spot_advisor":{"r1":{"Linux":{"p9.big":{"s":40,"r":1},"p9.reserved":{"s":10,"r":0}},"Windows":{"p9.big":{"s":1,"r":4}}}}}"#.into(),
            spot_prices_snapshot: format!("{}\n{snapshot}", SNAPSHOT_HEADER.join(",")),
            offerings: r#"{"r1":{"p9.big":["z2","z1"],"p9.reserved":["z1"]}}"#.into(),
        }
    }

    #[test]
    fn copies_facts_into_sorted_rows_and_renames_fields() {
        let out = import(&reference(
            "p9.big,r1,z2,0.500000,1.1\np9.big,r1,z1,,1.1\np9.big,r1,z0,0.4,\n",
        ))
        .unwrap();
        assert_eq!(
            out.instance_types,
            "[\n\
             {\"name\":\"p9.big\",\"family\":\"p9\",\"vcpu\":8,\"memory_mib\":65536,\"architecture\":\"x86_64\",\"accelerator\":{\"kind\":\"gpu\",\"manufacturer\":\"NVIDIA\",\"model\":\"Z1\",\"count\":2,\"memory_mib_per_device\":1024},\"efa_supported\":false,\"max_efa_interfaces\":0,\"max_network_interfaces\":4},\n\
             {\"name\":\"p9.reserved\",\"family\":\"p9\",\"vcpu\":8,\"memory_mib\":65536,\"architecture\":\"arm64\",\"efa_supported\":true,\"max_efa_interfaces\":2,\"max_network_interfaces\":4,\"network_baseline_mbps\":100,\"local_storage_gb\":50}\n\
             ]\n"
        );
        assert_eq!(
            out.on_demand,
            "region,instance_type,usd_per_hour\nr1,p9.big,1\nr1,p9.reserved,2.5\n"
        );
        assert_eq!(
            out.zones,
            "region,instance_type,zone_id\nr1,p9.big,z1\nr1,p9.big,z2\nr1,p9.reserved,z1\n"
        );
        assert_eq!(
            out.spot_prices,
            "region,zone_id,instance_type,usd_per_hour,on_demand_usd_at_snapshot\n\
             r1,z0,p9.big,0.4,\nr1,z2,p9.big,0.5,1.1\n"
        );
    }

    #[test]
    fn drops_spot_figures_of_types_that_cannot_run_as_spot() {
        let out = import(&reference("p9.reserved,r1,z1,0.3,2.5\n")).unwrap();
        assert_eq!(
            out.spot_advisor,
            "region,instance_type,savings_pct,interruption_bucket\nr1,p9.big,40,1\n"
        );
        assert!(!out.spot_prices.contains("p9.reserved"));
    }

    #[test]
    fn imports_general_purpose_cpu_types_with_every_price_and_zone_row() {
        let mut reference = reference("m7i.large,r1,z1,0.05,0.1\n");
        let cpu = r#"{"instanceType":"m7i.large","family":"m7i","vcpu":2,"memoryMiB":8192,"architectures":["x86_64"],"accelerator":null,"network":{"maxNetworkInterfaces":3,"efaSupported":false},"localStorage":null,"usageClasses":["on-demand","spot"]}"#;
        reference.instance_types = TYPES.replacen("[\n", &format!("[\n{cpu},\n"), 1);
        reference.on_demand_prices =
            r#"{"r1":{"p9.reserved":2.5,"p9.big":1.0,"m7i.large":0.1}}"#.into();
        reference.offerings =
            r#"{"r1":{"p9.big":["z2","z1"],"p9.reserved":["z1"],"m7i.large":["z1"]}}"#.into();
        let out = import(&reference).unwrap();
        assert!(out.instance_types.starts_with(
            "[\n{\"name\":\"m7i.large\",\"family\":\"m7i\",\"vcpu\":2,\"memory_mib\":8192,\"architecture\":\"x86_64\",\"efa_supported\":false,"
        ), "{}", out.instance_types);
        assert!(
            out.on_demand.contains("\nr1,m7i.large,0.1\n"),
            "{}",
            out.on_demand
        );
        assert!(out.zones.contains("\nr1,m7i.large,z1\n"), "{}", out.zones);
        assert!(
            out.spot_prices.contains("\nr1,z1,m7i.large,0.05,0.1\n"),
            "{}",
            out.spot_prices
        );
    }

    #[test]
    fn rejects_a_price_for_an_unknown_instance_type() {
        let mut reference = reference("");
        reference.on_demand_prices = r#"{"r1":{"p8.gone":1.0}}"#.into();
        let err = import(&reference).unwrap_err().to_string();
        assert!(
            err.contains("on-demand-prices.json") && err.contains("r1/p8.gone"),
            "{err}"
        );
    }

    #[test]
    fn rejects_a_snapshot_row_with_a_bad_price_naming_its_line() {
        let err = import(&reference("p9.big,r1,z1,0.5,1.0\np9.big,r1,z2,-1,1.0\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("spot-prices-az-snapshot.csv") && err.contains("line 3"),
            "{err}"
        );
    }
}
