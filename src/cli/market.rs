//! `quartermaster market fit`: fit the spot market model from SkyPilot
//! traces and write `pricing-data/market.json`. The fitting is pure
//! (`catalog::market::fit`); this reads the files and writes the result.
//! `market advisor-gap`: how far the market the planner prices spot with is
//! from the Spot Instance Advisor's band, per family
//! (`catalog::market::advisor`).

use anyhow::Context;
use quartermaster::catalog::market::advisor;
use quartermaster::catalog::market::fit::{fit, SourceFile};
use quartermaster::catalog::market::trace::{SpotTrace, TraceKind};
use quartermaster::catalog::Catalog;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `market`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Fit lifetimes, correlated reclaims, closures and obtainability from
    /// a folder of SkyPilot traces (`.json` files under `preemption/` or
    /// `availability/` folders) and write the market file.
    Fit(FitArgs),
    /// Per instance family of a region, how far the market the planner
    /// prices spot with (the embedded fit) is from the Spot Instance
    /// Advisor's interruption band: mean life, first-hour reclaim, the
    /// share reclaimed in a month against the band, and the rate over the
    /// advisor's.
    AdvisorGap(GapArgs),
}

#[derive(Debug, clap::Args)]
struct GapArgs {
    /// Region whose spot pools to compare.
    #[arg(long, default_value = "us-east-1")]
    region: String,
    /// Only these families (comma-separated); without it, every
    /// accelerator family.
    #[arg(long, value_delimiter = ',', value_name = "FAMILY")]
    family: Vec<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct FitArgs {
    /// Folder of traces, searched recursively (e.g. ../shared/traces/spot).
    #[arg(long, value_name = "DIR")]
    traces: PathBuf,
    /// The market file to write (e.g. pricing-data/market.json).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// Runs `market`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::Fit(a) => run_fit(&a),
        Action::AdvisorGap(a) => run_gap(&a),
    }
}

/// Every `.json` file under `dir`, sorted.
fn json_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries =
            std::fs::read_dir(&d).with_context(|| format!("cannot read folder {}", d.display()))?;
        for e in entries {
            let path = e?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "json") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn run_fit(args: &FitArgs) -> anyhow::Result<ExitCode> {
    let files = json_files(&args.traces)?;
    anyhow::ensure!(
        !files.is_empty(),
        "no .json trace files under {}",
        args.traces.display()
    );
    let mut traces = Vec::new();
    let mut sources = Vec::new();
    for path in files {
        let rel = path
            .strip_prefix(&args.traces)
            .unwrap_or(&path)
            .to_string_lossy()
            .replace('\\', "/");
        let Some(kind) = TraceKind::from_path(&rel) else {
            anyhow::bail!(
                "spot trace {}: cannot tell its kind: it is under neither a preemption/ nor an \
                 availability/ folder",
                path.display()
            );
        };
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let text = String::from_utf8_lossy(&bytes);
        traces.push(SpotTrace::parse(&rel, kind, &text)?);
        sources.push(SourceFile {
            path: rel,
            sha256: Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        });
    }
    let command = format!(
        "quartermaster market fit --traces {} --out {}",
        args.traces.display(),
        args.out.display()
    );
    let params = fit(&traces, sources, &command)?;
    let text = serde_json::to_string_pretty(&params)? + "\n";
    std::fs::write(&args.out, text)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    let r = &params.reference;
    println!(
        "wrote {} from {} traces: {:.3} reclaims per instance-hour (mean lifetime {:.2} h), \
         co-reclaim {:.3}, closure {:.0}% for a median {:.2} h, obtainability {:.3}",
        args.out.display(),
        traces.len(),
        r.mean_rate_per_hour(),
        r.lifetime.mean(),
        r.co_reclaim_probability,
        r.closure.probability * 100.0,
        r.closure.median_hours,
        r.obtainability
    );
    Ok(ExitCode::SUCCESS)
}

fn run_gap(args: &GapArgs) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::embedded().context("the embedded catalog does not load")?;
    let gaps = advisor::by_family(&catalog, &args.region, &args.family);
    anyhow::ensure!(
        !gaps.is_empty(),
        "no spot offering of {} in {}",
        if args.family.is_empty() {
            "an accelerator family".to_string()
        } else {
            args.family.join(",")
        },
        args.region
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&gaps)?);
    } else {
        print!(
            "{}",
            gap_table(&args.region, catalog.market_model().name(), &gaps)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The gaps as a Markdown table (as `docs/market.md` quotes it).
fn gap_table(region: &str, model: &str, gaps: &[advisor::FamilyGap]) -> String {
    let pct = |s: advisor::Span| span(s, |v| format!("{:.0}%", v * 100.0));
    let mut out = format!(
        "spot pools of {region}, {model} market against the Spot Instance Advisor's band\n\n\
         | family | pools | advisor bucket | advisor: share interrupted a month | market: share of new nodes reclaimed in a month | mean life | reclaimed in the first hour | rate / advisor's | rate / band top |\n\
         |---|---|---|---|---|---|---|---|---|\n"
    );
    for g in gaps {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            g.family,
            g.pools,
            g.buckets.join(", "),
            pct(g.advisor_monthly),
            pct(g.market_monthly),
            span(g.mean_life_hours, |v| format!("{v:.1} h")),
            pct(g.first_hour_reclaim_probability),
            span(g.times_the_advisor_rate, |v| format!("{v:.0}x")),
            g.times_the_band_top
                .map_or("-".to_string(), |s| span(s, |v| format!("{v:.0}x"))),
        );
    }
    out
}

/// `min - max`, or one value when they print alike.
fn span(s: advisor::Span, show: impl Fn(f64) -> String) -> String {
    let (a, b) = (show(s.min), show(s.max));
    if a == b {
        a
    } else {
        format!("{a} - {b}")
    }
}
