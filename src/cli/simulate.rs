//! `quartermaster simulate`: replay a scenario's workload through every
//! strategy on the simulated cloud and compare them.

use anyhow::Context;
use quartermaster::catalog::Catalog;
use quartermaster::sim::{self, report, scenario::Scenario, scenario::StrategyName};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Arguments of `simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Scenario file (YAML; see simulations/).
    scenario: PathBuf,
    /// A trace CSV replayed from the start, in addition to the scenario's
    /// workloads (format: shared/traces/README.md).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Strategies to compare, comma-separated (default: the scenario's).
    #[arg(long, value_delimiter = ',')]
    strategies: Vec<StrategyName>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    output: super::plan::Output,
    /// Also write summary.json, timeseries.csv and PNG charts to this folder.
    #[arg(long)]
    report: Option<PathBuf>,
}

/// Runs `simulate`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let catalog = Arc::new(Catalog::embedded().context("loading the embedded catalog")?);
    let text = std::fs::read_to_string(&args.scenario)
        .with_context(|| format!("reading {}", args.scenario.display()))?;
    let mut scenario = Scenario::parse(&text, &catalog)
        .with_context(|| format!("in {}", args.scenario.display()))?;
    let base = args
        .scenario
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let jobs = sim::load_jobs(&scenario, &base, args.trace.as_deref())?;
    sim::load_spot_traces(&mut scenario, &base)?;
    let strategies = if args.strategies.is_empty() {
        scenario.strategies.clone()
    } else {
        args.strategies.clone()
    };

    let bar = indicatif::ProgressBar::new(1000 * strategies.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:>14} [{bar:40}] {percent:>3}% {elapsed}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    if matches!(args.output, super::plan::Output::Json) {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let index = |s: StrategyName| strategies.iter().position(|x| *x == s).unwrap_or(0) as u64;
    let result = sim::simulate(&scenario, &catalog, &jobs, &strategies, &mut |s, f| {
        bar.set_message(format!("{s:?}").to_lowercase());
        bar.set_position(index(s) * 1000 + (f * 1000.0) as u64);
    })?;
    bar.finish_and_clear();

    match args.output {
        super::plan::Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report::summary_json(&result))?
        ),
        super::plan::Output::Table => print!("{}", report::table(&result)),
    }
    if let Some(dir) = &args.report {
        let written = report::write_report(&result, dir)
            .with_context(|| format!("writing the report to {}", dir.display()))?;
        if matches!(args.output, super::plan::Output::Table) {
            for p in written {
                println!("wrote {}", p.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
