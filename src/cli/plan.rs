//! `quartermaster plan`: pending pods and NodePools in, the nodes to launch
//! out, from the MIP or the greedy baseline, on the embedded catalog.

use anyhow::{bail, Context};
use quartermaster::api::read;
use quartermaster::catalog::{Catalog, ZoneNames};
use quartermaster::cluster::dra::Resolver;
use quartermaster::cluster::workloads::Manifests;
use quartermaster::cluster::{NodeState, Pool};
use quartermaster::plan::{self, Input, Options, Plan, SolvedBy, Strategy};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of `plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Multi-document YAML of Pods, Deployments, StatefulSets, Jobs,
    /// DaemonSets and Volcano PodGroups; pods with `spec.nodeName` are bound.
    /// DeviceClasses, ResourceClaims and ResourceClaimTemplates
    /// (`resource.k8s.io/v1`) beside them are what the pods' DRA claims
    /// are matched against; ResourceSlices (here or in `--nodes`) say what
    /// devices existing nodes have. Repeatable: every file is read.
    #[arg(long, required = true)]
    pods: Vec<PathBuf>,
    /// Multi-document YAML of NodePools.
    #[arg(long)]
    nodepools: PathBuf,
    /// Multi-document YAML of existing Nodes.
    #[arg(long)]
    nodes: Option<PathBuf>,
    /// Region whose offerings to plan over.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Planner to run.
    #[arg(long, value_enum, default_value = "mip")]
    strategy: Strategy,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    output: Output,
    /// Say why each chosen instance type beat the next best, and why each
    /// reservation was used or not.
    #[arg(long)]
    explain: bool,
    /// YAML list of capacity reservations and Capacity Blocks to plan with
    /// (capacity type `reserved`): `id`, `kind`
    /// (`capacity-reservation` or `capacity-block`), `instanceType`, `region`, `zoneId`, `total`,
    /// `available`, optional `start`, `end` (RFC 3339) and `pricePerHour`.
    #[arg(long)]
    reservations: Option<PathBuf>,
    /// The account's zone names, `NAME=ID` pairs separated by commas
    /// (`us-east-1a=use1-az6,us-east-1b=use1-az1`; `aws ec2
    /// describe-availability-zones` lists them): nodes carry the name in
    /// `topology.kubernetes.io/zone`, and pods may select either. Without
    /// it, zone ID `<short>-azN` is named the region's N-th letter
    /// (`use1-az4` is `us-east-1d`).
    #[arg(long, value_name = "NAME=ID,...")]
    zone_names: Option<String>,
    /// Longest the MIP may search, in milliseconds.
    #[arg(long, default_value_t = 800)]
    time_limit_ms: u64,
    /// Exit with status 3 when any pod has no place (for CI); the plan is
    /// printed either way.
    #[arg(long)]
    fail_on_unschedulable: bool,
    /// Device data laid over the embedded device templates (the form of
    /// `pricing-data/dra-devices.yaml`; see `catalog --devices`).
    #[arg(long, value_name = "FILE")]
    device_data: Option<PathBuf>,
}

/// Exit status of `plan --fail-on-unschedulable` when a pod has no place.
pub const EXIT_UNSCHEDULABLE: u8 = 3;

/// Output formats.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Output {
    /// A readable table.
    Table,
    /// JSON.
    Json,
}

/// Runs `plan`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::embedded().context("loading the embedded catalog")?;
    let catalog = match &args.reservations {
        Some(path) => {
            let lead = quartermaster::core::Config::default()
                .interruption
                .reservation_lead;
            catalog.with_reservations(
                &read_reservations(path)?,
                chrono::Utc::now(),
                chrono::TimeDelta::from_std(lead).unwrap_or_default(),
            )
        }
        None => catalog,
    };
    let catalog = super::catalog::with_device_file(catalog, args.device_data.as_deref())?;
    let catalog = match &args.zone_names {
        Some(text) => {
            let pairs =
                ZoneNames::parse_pairs(text).map_err(|e| anyhow::anyhow!("--zone-names: {e}"))?;
            catalog.with_zone_names(ZoneNames::new().with_region(&args.region, pairs))
        }
        None => catalog,
    };
    if !catalog.regions().contains(&args.region.as_str()) {
        bail!(
            "no offerings in region {:?}; known regions: {}",
            args.region,
            catalog.regions().join(", ")
        );
    }
    let mut manifests = Manifests::default();
    for path in args.pods.iter().chain(args.nodes.as_ref()) {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        manifests
            .parse(&text)
            .with_context(|| format!("in {}", path.display()))?;
    }
    let overhead = manifests.daemonset_overhead.clone();
    let pools = read_pools(&args.nodepools, &catalog, overhead)?;
    let dra = std::mem::take(&mut manifests.dra);
    let (mut pods, mut nodes, ignored) = manifests.into_cluster()?;
    for n in &mut nodes {
        n.resolve_zone(&catalog, &args.region);
    }
    // DRA claims matched against the files' DeviceClasses and claims.
    Resolver::new()
        .share_gpus(pools.iter().filter_map(|p| p.dra_gpu_shares))
        .attach(&mut pods, &dra, &catalog);
    // A badly annotated pod is planned without the annotation, and said so
    // (on stderr, so that JSON output stays parseable).
    for i in &ignored {
        eprintln!("warning: {i}");
    }

    let nodes: Vec<&NodeState> = nodes.iter().collect();
    let input = Input::offline(&catalog, &args.region, &pools, &pods)
        .with_nodes(&nodes)
        .at(chrono::Utc::now());
    let options = Options {
        time_limit: Duration::from_millis(args.time_limit_ms),
        lower_bound: true,
        ..Options::default()
    };
    let start = Instant::now();
    let mut result = plan::plan(&input, args.strategy, &options, &|| {
        start.elapsed().as_secs_f64()
    });
    if args.explain {
        result.explanations = plan::explain(&input, &result);
        result.explanations.extend(plan::dra::explain(&input));
        let reservations = plan::explain_reservations(&input, &result);
        result.explanations.extend(reservations);
    }
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&result)?),
        Output::Table => print_table(&result, options.mip_gap),
    }
    if args.fail_on_unschedulable && !result.unschedulable.is_empty() {
        return Ok(ExitCode::from(EXIT_UNSCHEDULABLE));
    }
    Ok(ExitCode::SUCCESS)
}

/// The reservations listed in a YAML file (see `--reservations`).
pub fn read_reservations(
    path: &PathBuf,
) -> anyhow::Result<Vec<quartermaster::catalog::Reservation>> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {file}"))?;
    let schema = read::schema_of::<Vec<quartermaster::catalog::Reservation>>();
    Ok(read::single(&file, &text, &schema, |_| Vec::new())?)
}

/// The NodePools of a file, through the one strict reader (`api::read`):
/// a misspelt field, a wrong type or an invalid pool stops the plan with
/// every problem of the file, each with its line, rather than planning
/// with the field dropped. EC2NodeClass documents may sit beside the pools
/// (they are checked, not used).
fn read_pools(
    path: &PathBuf,
    catalog: &Catalog,
    overhead: quartermaster::cluster::Resources,
) -> anyhow::Result<Vec<Pool>> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {file}"))?;
    let (docs, mut problems) = match read::documents(&text) {
        Ok(docs) => (docs, Vec::new()),
        Err((docs, p)) => (docs, vec![p]),
    };
    let mut pools = Vec::new();
    for doc in &docs {
        let result = match read::Kind::of(doc) {
            read::Kind::EC2NodeClass => read::node_class(doc).map(|_| None),
            _ => read::node_pool(doc, catalog).map(Some),
        };
        match result {
            Ok(Some(pool)) => {
                pools.push(Pool::from_api(&pool, overhead.clone()).map_err(anyhow::Error::msg)?)
            }
            Ok(None) => {}
            Err(p) => problems.extend(p),
        }
    }
    if !problems.is_empty() {
        let error = read::Error {
            file: file.clone(),
            problems,
        };
        bail!("{file} has problems; nothing was planned:\n{error}");
    }
    if pools.is_empty() {
        bail!("{file} holds no NodePool");
    }
    Ok(pools)
}

fn print_table(p: &Plan, tolerance: f64) {
    println!("strategy: {:?}   solve: {:.0} ms", p.strategy, p.solve_ms);
    if p.nodes.is_empty() {
        println!("no nodes to launch");
    } else {
        println!(
            "{:<14} {:<18} {:<22} {:<10} {:>9} {:>9}  PODS",
            "NODEPOOL", "INSTANCE TYPE", "ZONE (ID)", "CAPACITY", "$/H", "RISK $/H"
        );
        for n in &p.nodes {
            let pods = if n.pods.len() > 4 {
                format!("{} and {} more", n.pods[..3].join(", "), n.pods.len() - 3)
            } else {
                n.pods.join(", ")
            };
            println!(
                "{:<14} {:<18} {:<22} {:<10} {:>9.4} {:>9.4}  {}",
                n.nodepool,
                n.instance_type,
                format!("{} ({})", n.zone_name, n.zone),
                n.capacity_type.as_str(),
                n.price_per_hour,
                n.interruption_cost_per_hour,
                pods
            );
        }
    }
    if !p.existing.is_empty() {
        println!("{} pods fit on existing capacity", p.existing.len());
    }
    println!(
        "nodes: {}   price: ${:.4}/h + expected interruption: ${:.4}/h + idle charge: ${:.4}/h = risk-adjusted: ${:.4}/h",
        p.nodes.len(),
        p.cost_per_hour,
        p.interruption_cost_per_hour,
        p.idle_charge_per_hour,
        p.risk_adjusted_cost_per_hour
    );
    if let Some(lb) = p.lower_bound_per_hour {
        let gap = p
            .gap()
            .map_or("-".to_string(), |g| format!("{:.2}%", g * 100.0));
        println!(
            "lower bound: ${lb:.4}/h ({:.0} ms; no plan placing these pods on new nodes can cost less)   gap: {gap}",
            p.lower_bound_ms.unwrap_or(0.0)
        );
        println!(
            "{}; {}",
            match p.solved_by {
                SolvedBy::BranchAndBound => "solver: branch and bound",
                SolvedBy::TimeLimit => "solver: branch and bound, stopped at the time limit",
                SolvedBy::LpRounding => "solver: LP relaxation rounded and packed",
                SolvedBy::Greedy => "greedy",
            },
            if p.optimal {
                format!("optimal within {:.0}% of the bound", tolerance * 100.0)
            } else {
                "not proven optimal (the gap is to a bound, not to a known better plan)".into()
            }
        );
    }
    if !p.unschedulable.is_empty() {
        println!("unschedulable ({}):", p.unschedulable.len());
        for u in &p.unschedulable {
            println!("  {}: {}", u.pod, u.reason);
        }
    }
    for e in &p.explanations {
        println!("why: {e}");
    }
}
