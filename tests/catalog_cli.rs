//! `quartermaster catalog` run as a user runs it: the binary, its output and
//! its exit code, checked against the reference data beside the repository.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn quartermaster(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quartermaster"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("the binary runs")
}

/// Runs a command that must succeed and returns its stdout.
fn stdout_of(args: &[&str]) -> String {
    let out = quartermaster(args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

fn json_of(args: &[&str]) -> Vec<Value> {
    serde_json::from_str(&stdout_of(args)).expect("the output is a JSON array")
}

fn reference_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/reference-data")
}

fn reference_on_demand(region: &str, instance_type: &str) -> f64 {
    let text = std::fs::read_to_string(reference_dir().join("on-demand-prices.json")).unwrap();
    let prices: Value = serde_json::from_str(&text).unwrap();
    prices[region][instance_type]
        .as_f64()
        .expect("a reference price")
}

/// The data rows of the table: the lines after the header (which starts
/// with `TYPE`) up to the first blank line, split on whitespace.
fn table_rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .skip_while(|l| !l.starts_with("TYPE "))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn json_lists_p4d_with_eight_accelerators_and_the_reference_on_demand_price() {
    let types = json_of(&["catalog", "--region", "us-east-1", "--output", "json"]);
    let p4d = types
        .iter()
        .find(|t| t["name"] == "p4d.24xlarge")
        .expect("p4d.24xlarge is listed");
    assert_eq!(p4d["accelerator"]["count"], 8);
    let expected = reference_on_demand("us-east-1", "p4d.24xlarge");
    let offerings = p4d["offerings"].as_array().expect("offerings");
    let on_demand: Vec<&Value> = offerings
        .iter()
        .filter(|o| o["capacity_type"] == "on-demand")
        .collect();
    assert!(!on_demand.is_empty());
    for o in on_demand {
        assert_eq!(o["price_per_hour"].as_f64(), Some(expected), "{o}");
        assert_eq!(o["interruption_rate_per_hour"].as_f64(), Some(0.0), "{o}");
    }
    for o in offerings {
        assert_eq!(o["region"], "us-east-1", "{o}");
        assert!(o["interruption_rate_per_hour"].is_f64(), "{o}");
    }
}

#[test]
fn table_is_sorted_by_price_per_accelerator_hour() {
    let table = stdout_of(&["catalog", "--region", "us-east-1"]);
    let rows = table_rows(&table);
    assert!(rows.len() > 10, "{table}");
    // Types without accelerators (`-`) come last.
    let per_accelerator_hour: Vec<f64> = rows
        .iter()
        .map(|r| match r.last().unwrap().as_str() {
            "-" => f64::INFINITY,
            figure => figure.parse().expect("a $/accelerator-hour figure"),
        })
        .collect();
    assert!(
        per_accelerator_hour.windows(2).all(|w| w[0] <= w[1]),
        "{table}"
    );
}

#[test]
fn gpu_filter_shows_only_and_all_h100_types() {
    let all = json_of(&["catalog", "--region", "us-east-1", "--output", "json"]);
    let expected: Vec<&str> = all
        .iter()
        .filter(|t| t["accelerator"]["model"] == "H100")
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(!expected.is_empty());

    let table = stdout_of(&["catalog", "--region", "us-east-1", "--gpu", "h100"]);
    let rows = table_rows(&table);
    let mut shown: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    for r in &rows {
        assert_eq!(r[2], "H100", "{table}");
    }
    let mut expected_sorted = expected.clone();
    shown.sort_unstable();
    expected_sorted.sort_unstable();
    assert_eq!(shown, expected_sorted);
}

#[test]
fn family_filter_accepts_repeats_and_commas() {
    let types = json_of(&[
        "catalog", "--family", "p4d,p5", "--family", "g6e", "--output", "json",
    ]);
    assert!(!types.is_empty());
    for t in &types {
        let family = t["family"].as_str().unwrap();
        assert!(["p4d", "p5", "g6e"].contains(&family), "{family}");
    }
}

#[test]
fn family_filter_lists_general_purpose_cpu_types_at_their_reference_price() {
    let types = json_of(&["catalog", "--family", "m7i", "--output", "json"]);
    assert!(types.len() > 5, "{types:?}");
    for t in &types {
        assert_eq!(t["family"], "m7i");
        assert!(t["accelerator"].is_null(), "{t}");
        let name = t["name"].as_str().unwrap();
        let on_demand = t["offerings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["capacity_type"] == "on-demand")
            .unwrap_or_else(|| panic!("{name} has no on-demand offering"));
        assert_eq!(
            on_demand["price_per_hour"].as_f64(),
            Some(reference_on_demand("us-east-1", name)),
            "{name}"
        );
    }
    let table = stdout_of(&["catalog", "--family", "m7i,c7g"]);
    let rows = table_rows(&table);
    assert!(rows.iter().any(|r| r[0] == "m7i.large"), "{table}");
    assert!(rows.iter().any(|r| r[0] == "c7g.large"), "{table}");
}

#[test]
fn default_listing_shows_accelerator_types_and_says_how_to_list_cpu_types() {
    let types = json_of(&["catalog", "--output", "json"]);
    assert!(!types.is_empty());
    assert!(
        types.iter().all(|t| t["accelerator"].is_object()),
        "{types:?}"
    );
    let table = stdout_of(&["catalog"]);
    assert!(
        table.contains("general-purpose CPU types (list them with --family"),
        "{table}"
    );
}

#[test]
fn unknown_region_exits_non_zero_and_lists_known_regions() {
    let out = quartermaster(&["catalog", "--region", "mars-north-1"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("mars-north-1") && stderr.contains("us-east-1"),
        "{stderr}"
    );
}

#[test]
fn filter_matching_nothing_exits_non_zero() {
    let out = quartermaster(&["catalog", "--gpu", "no-such-gpu"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-gpu"));
}

#[test]
fn import_subcommand_writes_the_committed_pricing_data() {
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("catalog-import");
    let from = reference_dir();
    stdout_of(&[
        "catalog",
        "import",
        "--from",
        from.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let committed = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("pricing-data");
    for name in [
        "instance-types.json",
        "on-demand.csv",
        "spot-advisor.csv",
        "spot-prices.csv",
        "zones.csv",
    ] {
        let written = std::fs::read(out_dir.join(name)).unwrap();
        let expected = std::fs::read(committed.join(name)).unwrap();
        assert!(
            written == expected,
            "{name} differs from pricing-data/{name}"
        );
    }
}

#[test]
fn devices_prints_what_the_dra_drivers_would_publish_with_sources() {
    let text = stdout_of(&["catalog", "--devices", "p5.48xlarge"]);
    assert!(text.contains("gpu x8 (driver gpu.nvidia.com"), "{text}");
    assert!(
        text.contains("gpu.nvidia.com/productName = \"NVIDIA H100 80GB HBM3\""),
        "{text}"
    );
    assert!(
        text.contains("gpu.nvidia.com/driverVersion: set on the node"),
        "{text}"
    );
    assert!(text.contains("efa x32 (driver dra.net"), "{text}");
    assert!(text.contains("source: "), "{text}");
    // MIG partitions where the pool enables MIG; JSON for scripts.
    let json = json_of(&[
        "catalog",
        "--devices",
        "p4d.24xlarge",
        "--mig-profile",
        "3g.20gb",
        "--output",
        "json",
    ]);
    let mig = json
        .iter()
        .find(|t| t["driver"] == "gpu.nvidia.com")
        .unwrap();
    assert_eq!(mig["kind"], "mig-3g.20gb");
    assert_eq!(mig["count"], 16);
    assert_eq!(
        mig["attributes"]["gpu.nvidia.com/profile"]["value"],
        "3g.20gb"
    );
    let out = quartermaster(&["catalog", "--devices", "p5.48xlargee"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("did you mean p5.48xlarge"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn device_data_adds_a_type_the_catalog_does_not_describe() {
    let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("devices-extra.yaml");
    std::fs::write(
        &file,
        "instanceTypes:\n  m7i.xlarge:\n  - {driver: fpga.example.com, kind: fpga, count: 2, attributes: {family: agilex}}\n",
    )
    .unwrap();
    let text = stdout_of(&[
        "catalog",
        "--devices",
        "m7i.xlarge",
        "--device-data",
        file.to_str().unwrap(),
    ]);
    assert!(text.contains("fpga x2 (driver fpga.example.com"), "{text}");
    assert!(
        text.contains("fpga.example.com/family = \"agilex\""),
        "{text}"
    );
}

/// Issue 35: the catalog shows the hazard the planner prices spot with, so
/// that a user reads beside the advisor's bucket what the planner assumes.
/// The JSON's figures are the planner's own: a candidate's expected
/// reclaims over a new node's first hour and its rate.
#[test]
fn catalog_shows_the_hazard_the_planner_prices_beside_the_advisor_bucket() {
    use quartermaster::catalog::{CapacityType, Catalog};
    use quartermaster::cluster::Pool;
    use quartermaster::plan::{candidates, Input};
    let types = json_of(&["catalog", "--family", "p4d,g6", "--output", "json"]);
    let catalog = Catalog::embedded().unwrap();
    let mut pool = Pool::new("any");
    pool.capacity_types = vec![CapacityType::Spot, CapacityType::OnDemand];
    let pools = [pool];
    let cands = candidates::candidates(&Input::offline(&catalog, "us-east-1", &pools, &[]));
    let mut checked = 0;
    for t in &types {
        for o in t["offerings"].as_array().unwrap() {
            let (life, first) = (&o["mean_life_hours"], &o["first_hour_reclaim_probability"]);
            if o["capacity_type"] != "spot" {
                assert!(life.is_null() && first.is_null(), "{o}");
                continue;
            }
            let c = cands
                .iter()
                .find(|c| {
                    c.offering.instance_type == t["name"].as_str().unwrap()
                        && c.offering.zone_id == o["zone_id"].as_str().unwrap()
                        && c.offering.capacity_type == CapacityType::Spot
                })
                .unwrap_or_else(|| panic!("no candidate for {o}"));
            let first = first.as_f64().unwrap();
            let planned = 1.0 - (-c.expected_interruptions(1.0)).exp();
            assert!((first - planned).abs() < 1e-12, "{first} against {planned}");
            assert!(first > 0.0 && first < 1.0, "{o}");
            let life = life.as_f64().unwrap();
            assert!(
                (life * c.rate - 1.0).abs() < 1e-9,
                "{life} h against {}",
                c.rate
            );
            checked += 1;
        }
    }
    assert!(checked > 4, "{checked} spot offerings");

    // The table prints them for the cheapest spot offering, beside its
    // bucket, and says what they are.
    let table = stdout_of(&["catalog", "--family", "p4d"]);
    assert!(
        table.contains("MEAN LIFE") && table.contains("1ST-HOUR RECLAIM"),
        "{table}"
    );
    assert!(table.contains("the hazard the planner prices"), "{table}");
    let p4d = types.iter().find(|t| t["name"] == "p4d.24xlarge").unwrap();
    let cheapest = p4d["offerings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["capacity_type"] == "spot")
        .min_by(|a, b| {
            let price = |o: &Value| o["price_per_hour"].as_f64().unwrap();
            price(a).total_cmp(&price(b))
        })
        .unwrap();
    let row = table
        .lines()
        .find(|l| l.starts_with("p4d.24xlarge "))
        .unwrap();
    let life = format!("{:.1}h", cheapest["mean_life_hours"].as_f64().unwrap());
    let first = format!(
        "{:.0}%",
        cheapest["first_hour_reclaim_probability"].as_f64().unwrap() * 100.0
    );
    assert!(row.contains(&format!(" {life} ")), "{life} not in {row}");
    assert!(row.contains(&format!(" {first} ")), "{first} not in {row}");
}
