//! `quartermaster catalog`: list the embedded catalog; `catalog import`:
//! regenerate `pricing-data/` from the reference data; `catalog refresh`:
//! rewrite one region's prices in `pricing-data/` from the AWS APIs.

use anyhow::Context;
use quartermaster::catalog::devices::Attribute;
use quartermaster::catalog::{
    import, CapacityType, Catalog, DeviceData, DeviceTemplate, Hazard, InstanceType, Offering,
    PriceSource, PricingFiles, ReferenceFiles, EMBEDDED,
};
use quartermaster::cloud::aws::load_sdk_config;
use quartermaster::cloud::aws::pricing::apply::provenance_note;
use quartermaster::cloud::aws::pricing::{refresh_pricing_files, PriceClient};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `catalog`: list the embedded catalog of one region,
/// `catalog import` to regenerate `pricing-data/`, or `catalog refresh` to
/// rewrite a region's prices from AWS.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    #[command(flatten)]
    list: ListArgs,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Regenerate the pricing-data files from the reference data.
    Import(ImportArgs),
    /// Rewrite one region's on-demand and spot prices in the pricing-data
    /// files from the AWS Pricing API and spot price history (for
    /// maintainers; uses the standard AWS credential chain).
    Refresh(RefreshArgs),
}

#[derive(Debug, clap::Args)]
struct RefreshArgs {
    /// Region whose prices to fetch, e.g. `us-east-1`.
    #[arg(long)]
    region: String,
    /// The pricing-data directory to rewrite (its files are read first;
    /// where they are missing, the embedded ones are the starting point).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Send every AWS request to this endpoint instead (testing).
    #[arg(long, value_name = "URL")]
    endpoint_url: Option<String>,
}

#[derive(Debug, clap::Args)]
struct ImportArgs {
    /// Directory holding the reference data files.
    #[arg(long, value_name = "DIR")]
    from: PathBuf,
    /// Directory to write the pricing-data files into.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

#[derive(Debug, clap::Args)]
struct ListArgs {
    /// Region to list.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Only these instance families (repeatable or comma-separated), e.g.
    /// `p5,p4d`. Without it only accelerator types are listed; naming a
    /// general-purpose CPU family (`m7i`, `c7g`, ...) lists its types.
    #[arg(long, value_delimiter = ',', value_name = "FAMILY")]
    family: Vec<String>,
    /// Only types whose accelerator model is this, case-insensitive (e.g. `h100`, `A100`).
    #[arg(long, value_name = "MODEL")]
    gpu: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
    /// YAML list of capacity reservations and Capacity Blocks (as `plan
    /// --reservations` reads them): the table then lists them as reserved
    /// offerings, each usable now or not and why.
    #[arg(long, value_name = "FILE")]
    reservations: Option<PathBuf>,
    /// Print the devices the DRA drivers would publish on a node of this
    /// instance type (GPUs, MIG partitions, Neuron devices, EFA
    /// interfaces), with the attributes and capacities known before launch
    /// and their sources, instead of the price table.
    #[arg(long, value_name = "TYPE")]
    devices: Option<String>,
    /// With `--devices`: the GPUs partitioned into this MIG profile (as a
    /// pool with `gpuSharing: {mode: Mig}` has them), e.g. `1g.10gb`.
    #[arg(long, value_name = "PROFILE", requires = "devices")]
    mig_profile: Option<String>,
    /// With `--devices`: the GPUs shared in this many shares (as a pool
    /// with `gpuSharing: {mode: Mps, replicas: N}` publishes them under
    /// DRA: consumable memory and thread share).
    #[arg(
        long,
        value_name = "N",
        requires = "devices",
        conflicts_with = "mig_profile"
    )]
    gpu_shares: Option<u32>,
    /// Device data laid over the embedded data (the form of
    /// `pricing-data/dra-devices.yaml`, as the controller reads it from its
    /// device ConfigMap): templates for types or models the catalog does
    /// not know yet.
    #[arg(long, value_name = "FILE")]
    device_data: Option<PathBuf>,
}

/// How `catalog` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    /// Aligned text columns, cheapest accelerator-hour first.
    Table,
    /// A pretty-printed JSON array: every instance-type field plus its offerings.
    Json,
}

/// Runs `catalog`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.action {
        Some(Action::Import(import_args)) => run_import(&import_args),
        Some(Action::Refresh(refresh_args)) => run_refresh(&refresh_args),
        None if args.list.devices.is_some() => run_devices(&args.list),
        None => run_list(&args.list),
    }
}

/// The catalog with the device data of `--device-data` laid over it.
fn catalog_with_devices(args: &ListArgs) -> anyhow::Result<Catalog> {
    let catalog = Catalog::embedded().context("the embedded catalog does not load")?;
    with_device_file(catalog, args.device_data.as_deref())
}

/// `catalog` with the device data of `path` (a `--device-data` file of
/// `plan`, `catalog` or `controller`) laid over its embedded data; as it
/// was when there is no file.
///
/// # Errors
/// The file cannot be read, or does not parse (every problem with its
/// line).
pub(crate) fn with_device_file(
    catalog: Catalog,
    path: Option<&std::path::Path>,
) -> anyhow::Result<Catalog> {
    let Some(path) = path else {
        return Ok(catalog);
    };
    Ok(catalog.with_devices(&read_device_file(path)?))
}

/// The device data of the file at `path`.
pub(crate) fn read_device_file(path: &std::path::Path) -> anyhow::Result<DeviceData> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(DeviceData::parse(&path.display().to_string(), &text)?)
}

/// Prints the device templates of `--devices TYPE`.
fn run_devices(args: &ListArgs) -> anyhow::Result<ExitCode> {
    let catalog = catalog_with_devices(args)?;
    let name = args.devices.as_deref().unwrap_or_default();
    let Some(it) = catalog.instance_type(name) else {
        let names: Vec<&str> = catalog.instance_types().map(|t| t.name.as_str()).collect();
        let hint =
            quartermaster::api::read::did_you_mean(name, names.into_iter()).unwrap_or_default();
        anyhow::bail!("unknown instance type {name:?}{hint}");
    };
    let layout = match args.gpu_shares {
        Some(n) => quartermaster::catalog::GpuLayout::Shared(n),
        None => args.mig_profile.as_deref().into(),
    };
    let templates = catalog.device_templates(it, layout);
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Json => {
            let json: Vec<serde_json::Value> = templates.iter().map(template_json).collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
        }
        Output::Table => write!(out, "{}", devices_text(&it.name, &templates))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// A template as text: one block per kind of device.
fn devices_text(instance_type: &str, templates: &[DeviceTemplate]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if templates.is_empty() {
        let _ = writeln!(
            s,
            "{instance_type}: no DRA driver Quartermaster knows publishes devices on it"
        );
        return s;
    }
    let _ = writeln!(
        s,
        "{instance_type}: devices the DRA drivers would publish on each node, as known before launch"
    );
    for t in templates {
        let _ = writeln!(
            s,
            "\n{} x{} (driver {}; planned as {})",
            t.kind,
            t.count,
            t.driver,
            t.resource()
        );
        for (name, a) in &t.attributes {
            let _ = match a {
                Attribute::Known(v) => writeln!(s, "  {name} = {v}"),
                Attribute::RunTime { groups: Some(g) } => writeln!(
                    s,
                    "  {name}: set on the node; {g} distinct values, {} devices each",
                    t.count / g.max(&1)
                ),
                Attribute::RunTime { groups: None } => {
                    writeln!(s, "  {name}: set on the node")
                }
            };
        }
        if let Some(shared) = &t.shared {
            let _ = writeln!(
                s,
                "  allowMultipleAllocations: shared by claims, {} shares per device",
                shared.shares
            );
        }
        for (name, q) in &t.capacity {
            let _ = writeln!(s, "  capacity {name} = {q}");
            if let Some(p) = t.shared.as_ref().and_then(|sh| sh.policies.get(name)) {
                let _ = writeln!(
                    s,
                    "    requestPolicy {}",
                    serde_json::to_string(p).unwrap_or_default()
                );
            }
        }
        let _ = writeln!(s, "  source: {}", t.source);
    }
    s
}

fn template_json(t: &DeviceTemplate) -> serde_json::Value {
    let attributes: serde_json::Map<String, serde_json::Value> = t
        .attributes
        .iter()
        .map(|(k, a)| {
            let v = match a {
                Attribute::Known(v) => serde_json::json!({ "value": v }),
                Attribute::RunTime { groups } => {
                    serde_json::json!({ "setOnNode": true, "distinctValues": groups })
                }
            };
            (k.clone(), v)
        })
        .collect();
    serde_json::json!({
        "driver": t.driver,
        "kind": t.kind,
        "count": t.count,
        "resource": t.resource(),
        "attributes": attributes,
        "capacity": t.capacity,
        "allowMultipleAllocations": t.shared.is_some(),
        "shares": t.shared.as_ref().map(|s| s.shares),
        "requestPolicy": t.shared.as_ref().map(|s| &s.policies),
        "source": t.source,
    })
}

/// Reads the reference files, imports them and writes the pricing-data files.
fn run_import(args: &ImportArgs) -> anyhow::Result<ExitCode> {
    let reference = ReferenceFiles::try_from_fn(|name| {
        let path = args.from.join(name);
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
    })?;
    let pricing: PricingFiles<String> = import::import(&reference)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    for (name, text) in pricing.files() {
        let path = args.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        println!("wrote {} ({} lines)", path.display(), text.lines().count());
    }
    Ok(ExitCode::SUCCESS)
}

/// Fetches the region's prices, rewrites its rows in the pricing-data files
/// and records the refresh in the directory's `README.md`.
fn run_refresh(args: &RefreshArgs) -> anyhow::Result<ExitCode> {
    let missing = EMBEDDED
        .files()
        .into_iter()
        .map(|(name, _)| args.out.join(name))
        .find(|path| !path.exists());
    let files: PricingFiles<String> = match missing {
        None => PricingFiles::try_from_fn(|name| {
            let path = args.out.join(name);
            std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))
        })?,
        Some(path) => {
            eprintln!(
                "{} is missing; starting from the embedded pricing data",
                path.display()
            );
            PricingFiles::try_from_fn(|name| {
                Ok::<_, std::convert::Infallible>(
                    EMBEDDED
                        .files()
                        .into_iter()
                        .find(|(n, _)| *n == name)
                        .map_or_else(String::new, |(_, t)| t.to_string()),
                )
            })?
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let now = chrono::Utc::now();
    let (refreshed, counts) = runtime.block_on(async {
        let config = load_sdk_config(Some(&args.region), args.endpoint_url.as_deref()).await;
        let client = PriceClient::new(&config, &args.region);
        refresh_pricing_files(&client, &files, now).await
    })?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    for ((name, text), (_, before)) in refreshed.files().into_iter().zip(files.files()) {
        let path = args.out.join(name);
        if text != before {
            std::fs::write(&path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
            println!("wrote {} ({} lines)", path.display(), text.lines().count());
        } else if !path.exists() {
            std::fs::write(&path, text)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    let readme_path = args.out.join("README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap_or_default();
    let note = provenance_note(
        &readme,
        &args.region,
        now,
        counts.on_demand_rows,
        counts.spot_rows,
    );
    std::fs::write(&readme_path, note)
        .with_context(|| format!("cannot write {}", readme_path.display()))?;
    println!(
        "{}: {} on-demand and {} spot prices; provenance recorded in {}",
        args.region,
        counts.on_demand_rows,
        counts.spot_rows,
        readme_path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// One instance type of the region with its headline prices.
struct Row<'a> {
    instance_type: &'a InstanceType,
    offerings: Vec<&'a Offering>,
    on_demand: Option<&'a Offering>,
    cheapest_spot: Option<&'a Offering>,
    /// The cheaper of spot and on-demand, per instance-hour.
    cheapest: f64,
    /// `cheapest` per accelerator (None without accelerators).
    per_accelerator_hour: Option<f64>,
}

/// Lists the region's instance types after the filters, as a table or JSON.
fn run_list(args: &ListArgs) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::embedded().context("the embedded catalog does not load")?;
    let regions = catalog.regions();
    if !regions.contains(&args.region.as_str()) {
        anyhow::bail!(
            "unknown region {:?}; regions in the catalog: {}",
            args.region,
            regions.join(", ")
        );
    }
    let in_region = catalog.instance_types_in(&args.region);
    // CPU types only when a family names them: the default listing is the
    // accelerator catalog.
    let hidden_cpu_types = if args.family.is_empty() {
        in_region.iter().filter(|t| t.accelerator.is_none()).count()
    } else {
        0
    };
    let mut rows: Vec<Row> = in_region
        .iter()
        .copied()
        .filter(|t| {
            if args.family.is_empty() {
                t.accelerator.is_some()
            } else {
                args.family
                    .iter()
                    .any(|f| f.eq_ignore_ascii_case(&t.family))
            }
        })
        .filter(|t| match (&args.gpu, &t.accelerator) {
            (None, _) => true,
            (Some(model), Some(a)) => a.model.eq_ignore_ascii_case(model),
            (Some(_), None) => false,
        })
        .filter_map(|t| row(&catalog, &args.region, t))
        .collect();
    if rows.is_empty() {
        anyhow::bail!("{}", no_match(args, &in_region));
    }
    rows.sort_by(|a, b| {
        let key = |r: &Row| {
            (
                r.per_accelerator_hour.is_none(),
                r.per_accelerator_hour.unwrap_or(r.cheapest),
            )
        };
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0)
            .then(ka.1.total_cmp(&kb.1))
            .then_with(|| a.instance_type.name.cmp(&b.instance_type.name))
    });
    let mut text = match args.output {
        Output::Table => table(&args.region, &rows, hidden_cpu_types),
        Output::Json => json(&rows)?,
    };
    if let Some(path) = &args.reservations {
        let list = super::plan::read_reservations(path)?;
        if args.output == Output::Table {
            text.push_str(&reserved_table(&args.region, &list, chrono::Utc::now()));
        }
    }
    print(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// The headline prices of one type in a region (None if it has no offering).
fn row<'a>(catalog: &'a Catalog, region: &'a str, t: &'a InstanceType) -> Option<Row<'a>> {
    let offerings: Vec<&Offering> = catalog.offerings_of(region, &t.name).collect();
    let on_demand = catalog.cheapest_offering(region, &t.name, CapacityType::OnDemand);
    let cheapest_spot = catalog.cheapest_spot(region, &t.name);
    let cheapest = [on_demand, cheapest_spot]
        .into_iter()
        .flatten()
        .map(|o| o.price_per_hour)
        .min_by(f64::total_cmp)?;
    let per_accelerator_hour = t
        .accelerator
        .as_ref()
        .filter(|a| a.count > 0)
        .map(|a| cheapest / f64::from(a.count));
    Some(Row {
        instance_type: t,
        offerings,
        on_demand,
        cheapest_spot,
        cheapest,
        per_accelerator_hour,
    })
}

/// Why nothing matched, with what the region does have.
fn no_match(args: &ListArgs, in_region: &[&InstanceType]) -> String {
    let mut families: Vec<&str> = in_region.iter().map(|t| t.family.as_str()).collect();
    families.sort_unstable();
    families.dedup();
    let mut models: Vec<&str> = in_region
        .iter()
        .filter_map(|t| t.accelerator.as_ref().map(|a| a.model.as_str()))
        .collect();
    models.sort_unstable();
    models.dedup();
    format!(
        "no instance type in {} matches{}{}; families there: {}; accelerator models there: {}",
        args.region,
        if args.family.is_empty() {
            String::new()
        } else {
            format!(" --family {}", args.family.join(","))
        },
        args.gpu
            .as_ref()
            .map(|g| format!(" --gpu {g}"))
            .unwrap_or_default(),
        families.join(", "),
        models.join(", "),
    )
}

/// The reserved offerings of `region`: one line per reservation, with
/// whether it can take a launch at `now` and why not (the lead before its
/// end is the core's default drain lead).
fn reserved_table(
    region: &str,
    list: &[quartermaster::catalog::Reservation],
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let lead = quartermaster::core::Config::default()
        .interruption
        .reservation_lead;
    let lead = chrono::TimeDelta::from_std(lead).unwrap_or_default();
    let mut out = format!("\nreserved capacity in {region} (capacity type `reserved`):\n");
    let when = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.map_or("-".to_string(), |t| t.format("%Y-%m-%d %H:%M").to_string())
    };
    for r in list.iter().filter(|r| r.region == region) {
        let state = match r.unusable_at(now, lead) {
            None => "usable".to_string(),
            Some(why) => format!("not usable: {why}"),
        };
        out.push_str(&format!(
            "  {:<22} {:<20} {:<16} {:<9} {:>3}/{:<3} {} .. {}  ${:.4}/h  {state}\n",
            r.id,
            r.kind.as_str(),
            r.instance_type,
            r.zone_id,
            r.available,
            r.total,
            when(r.start),
            when(r.end),
            r.price_per_hour,
        ));
    }
    out
}

/// Marks for prices that were not observed as such, and their footnotes.
fn price_mark(source: PriceSource) -> &'static str {
    match source {
        PriceSource::OnDemand | PriceSource::SpotObserved | PriceSource::Reserved => " ",
        PriceSource::SpotDerived => "*",
        PriceSource::SpotRescaled => "~",
    }
}

/// Footnotes for the price marks, printed when a mark is used.
const FOOTNOTES: [(&str, &str); 2] = [
    (
        "*",
        "derived: on-demand x (1 - Spot Instance Advisor savings); no spot price observed in that zone",
    ),
    (
        "~",
        "observed spot price rescaled to the current on-demand price (the observation predates a price change)",
    ),
];

/// What the columns mean, printed under every table.
const LEGEND: &str = "\
SPOT $/h: the cheapest spot offering and its zone; spot prices are a historical sample (pricing-data/README.md).
INTERRUPTIONS: the Spot Instance Advisor's monthly interruption frequency for that spot offering.
MEAN LIFE, 1ST-HOUR RECLAIM: the hazard the planner prices that spot offering with (the fitted market, docs/market.md): a new node's mean life and its chance of a reclaim within its first hour.
$/ACC-h: the cheaper of spot and on-demand, per accelerator and hour.
";

/// MiB as GiB, without decimals when whole.
fn gib(mib: u64) -> String {
    if mib.is_multiple_of(1024) {
        (mib / 1024).to_string()
    } else {
        format!("{:.1}", mib as f64 / 1024.0)
    }
}

/// The table: a title, aligned columns, footnotes for the marks used, a
/// legend and, when the listing left them out, how to see the region's
/// `hidden_cpu_types` general-purpose CPU types.
fn table(region: &str, rows: &[Row], hidden_cpu_types: usize) -> String {
    let header = [
        "TYPE",
        "ACCELERATOR",
        "ACC GiB",
        "VCPU",
        "MEM GiB",
        "ON-DEMAND $/h",
        "SPOT $/h",
        "SPOT ZONE",
        "INTERRUPTIONS",
        "MEAN LIFE",
        "1ST-HOUR RECLAIM",
        "$/ACC-h",
    ];
    // Left-aligned columns; the others are right-aligned.
    let left = [
        true, true, false, false, false, false, false, true, true, false, false, false,
    ];
    let mut cells: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    let mut marks_used = Vec::new();
    for r in rows {
        let t = r.instance_type;
        let dash = || "-".to_string();
        let spot = r.cheapest_spot.map_or_else(dash, |o| {
            let mark = price_mark(o.price_source);
            if mark != " " && !marks_used.contains(&mark) {
                marks_used.push(mark);
            }
            format!("{:.4}{mark}", o.price_per_hour)
        });
        let hazard = r.cheapest_spot.and_then(Offering::hazard);
        cells.push(vec![
            t.name.clone(),
            t.accelerator
                .as_ref()
                .map_or_else(dash, |a| format!("{}x {}", a.count, a.model)),
            t.accelerator
                .as_ref()
                .map_or_else(dash, |a| gib(a.memory_mib_per_device)),
            t.vcpu.to_string(),
            gib(t.memory_mib),
            r.on_demand
                .map_or_else(dash, |o| format!("{:.4} ", o.price_per_hour)),
            spot,
            r.cheapest_spot.map_or_else(dash, |o| o.zone_id.clone()),
            r.cheapest_spot.map_or_else(dash, |o| {
                o.interruption_bucket
                    .map_or("unknown".to_string(), |b| b.label().to_string())
            }),
            hazard.map_or_else(dash, |h| format!("{:.1}h", h.mean_life_hours)),
            hazard.map_or_else(dash, |h| {
                format!("{:.0}%", h.first_hour_reclaim_probability * 100.0)
            }),
            r.per_accelerator_hour
                .map_or_else(dash, |p| format!("{p:.4}")),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            cells
                .iter()
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = format!(
        "{region}: {} instance type{}, cheapest accelerator-hour first (USD)\n\n",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" }
    );
    for row in &cells {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if left[c] {
                    format!("{cell:<w$}", w = widths[c])
                } else {
                    format!("{cell:>w$}", w = widths[c])
                }
            })
            .collect();
        out += line.join("  ").trim_end();
        out += "\n";
    }
    out += "\n";
    for (mark, note) in FOOTNOTES {
        if marks_used.contains(&mark) {
            out += &format!("{mark} {note}\n");
        }
    }
    out += LEGEND;
    if hidden_cpu_types > 0 {
        out += &format!(
            "Not shown: {hidden_cpu_types} general-purpose CPU types (list them with --family, e.g. --family m7i,c7g).\n"
        );
    }
    out
}

/// One instance type in the JSON output.
#[derive(Serialize)]
struct TypeJson<'a> {
    #[serde(flatten)]
    instance_type: &'a InstanceType,
    offerings: Vec<OfferingJson<'a>>,
}

/// One offering in the JSON output, with its interruption rate and, for
/// spot, the hazard the planner uses (`mean_life_hours`,
/// `first_hour_reclaim_probability`).
#[derive(Serialize)]
struct OfferingJson<'a> {
    #[serde(flatten)]
    offering: &'a Offering,
    interruption_rate_per_hour: f64,
    #[serde(flatten)]
    hazard: Option<Hazard>,
}

/// The rows as a pretty-printed JSON array.
fn json(rows: &[Row]) -> anyhow::Result<String> {
    let types: Vec<TypeJson> = rows
        .iter()
        .map(|r| TypeJson {
            instance_type: r.instance_type,
            offerings: r
                .offerings
                .iter()
                .map(|&o| OfferingJson {
                    offering: o,
                    interruption_rate_per_hour: o.interruption_rate_per_hour(),
                    hazard: o.hazard(),
                })
                .collect(),
        })
        .collect();
    Ok(serde_json::to_string_pretty(&types)? + "\n")
}

/// Writes to stdout; a closed pipe (`| head`) is not an error.
fn print(text: &str) -> anyhow::Result<()> {
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}
