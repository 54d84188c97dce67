//! `quartermaster report gpu`: reads the DCGM exporter's series from a
//! Prometheus-compatible API over a window, as the controller does, and
//! prints the under-used GPU pods with their right sizes and what they
//! would save a month, and the nodes whose GPUs are all idle. The report
//! is `plan::rightsize::report`'s; this reads and prints.

use anyhow::Context;
use quartermaster::catalog::Catalog;
use quartermaster::controller::prometheus::{read_usage, Prometheus};
use quartermaster::plan::rightsize::{self, GpuReport};
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Idle and under-used GPU pods and nodes, each with its right size and
    /// its saving in dollars a month.
    Gpu(GpuArgs),
}

#[derive(Debug, clap::Args)]
struct GpuArgs {
    /// The Prometheus-compatible API with the DCGM exporter's series
    /// (`http://host:port`).
    #[arg(long, env = "QM_PROMETHEUS_URL")]
    prometheus_url: String,
    /// The window judged (ending now).
    #[arg(long, value_parser = parse_window, default_value = "1h")]
    window: Duration,
    /// Pods whose GPUs are busy less than this share are listed.
    #[arg(long, default_value_t = quartermaster::plan::rightsize::UNDERUSED_BELOW)]
    underused_below: f64,
    /// Nodes whose every GPU is busy less than this share are idle.
    #[arg(long, default_value_t = quartermaster::plan::rightsize::IDLE_BELOW)]
    idle_below: f64,
    /// Region whose prices are used.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Longest one query may take.
    #[arg(long, value_parser = parse_window, default_value = "30s")]
    timeout: Duration,
    /// `text` or `json`.
    #[arg(long, default_value = "text")]
    output: String,
}

fn parse_window(s: &str) -> Result<Duration, String> {
    quartermaster::api::parse_duration(s).map_err(|e| e.to_string())
}

/// Runs `report`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.what {
        What::Gpu(a) => gpu(&a),
    }
}

fn gpu(a: &GpuArgs) -> anyhow::Result<ExitCode> {
    if !["text", "json"].contains(&a.output.as_str()) {
        anyhow::bail!("--output {}: use text or json", a.output);
    }
    let catalog = Catalog::embedded().context("loading the embedded catalog")?;
    let prom = Prometheus::new(&a.prometheus_url, a.timeout)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let usage = runtime.block_on(read_usage(&prom, a.window, chrono::Utc::now(), 0))?;
    if !usage.problems.examples.is_empty() {
        eprintln!(
            "left out {} series without Hostname or gpu and {} absurd values, e.g. {}",
            usage.problems.missing_labels, usage.problems.absurd, usage.problems.examples[0]
        );
    }
    let report = rightsize::report(&catalog, &a.region, &usage, a.underused_below, a.idle_below);
    if a.output == "json" {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", text(&report, a));
    }
    Ok(ExitCode::SUCCESS)
}

fn money(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("${v:.0}"))
}

fn text(r: &GpuReport, a: &GpuArgs) -> String {
    let mut out = String::new();
    let window = quartermaster::controller::gpu_use::human(a.window);
    out.push_str(&format!(
        "{} GPUs read over the last {window}; pods under {:.0}% busy: {}; idle nodes (every GPU under {:.0}%): {}\n\n",
        r.gpus,
        a.underused_below * 100.0,
        r.pods.len(),
        a.idle_below * 100.0,
        r.idle_nodes.len()
    ));
    if !r.pods.is_empty() {
        out.push_str("POD\tNODE\tGPUS\tBUSY\tPEAK MEMORY\tRIGHT SIZE\tNOW/MONTH\tSAVES/MONTH\n");
        for p in &r.pods {
            out.push_str(&format!(
                "{}\t{}\t{} x {}\t{:.0}%\t{}\t{}\t{}\t{}\n",
                p.pod,
                p.node,
                p.gpus,
                p.instance_type.as_deref().unwrap_or(&p.model),
                p.busy * 100.0,
                p.peak_memory_gib
                    .map_or("-".into(), |g| format!("{g:.1} GiB")),
                p.right_size.as_deref().unwrap_or("-"),
                money(p.monthly_now),
                money(p.monthly_saving),
            ));
        }
        out.push('\n');
    }
    if !r.idle_nodes.is_empty() {
        out.push_str("IDLE NODE\tTYPE\tGPUS\tBUSIEST\tPODS\tCOST/MONTH\n");
        for n in &r.idle_nodes {
            out.push_str(&format!(
                "{}\t{}\t{}\t{:.1}%\t{}\t{}\n",
                n.node,
                n.instance_type.as_deref().unwrap_or("-"),
                n.gpus,
                n.busiest * 100.0,
                n.pods,
                money(n.monthly_cost),
            ));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "right sizes save ${:.0} a month; idle nodes cost ${:.0} a month (on-demand prices, {})\n",
        r.monthly_saving, r.idle_monthly_cost, a.region
    ));
    out
}
