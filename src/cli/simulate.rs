//! `quartermaster simulate`: replay a scenario's workload through every
//! strategy on the simulated cloud and compare them.

use anyhow::Context;
use quartermaster::catalog::Catalog;
use quartermaster::sim::sweep::{self, Sweep};
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
    /// Also write summary.json, timeseries.csv and PNG charts to this folder
    /// (with `--seeds`: `seeds.json`, and each seed's report in `seed-N/`).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Run the scenario once per seed instead of with its own seed, and
    /// report each strategy's mean and range over them and how often
    /// quartermaster beat the others (comma-separated seeds or ranges:
    /// `1-10`, `1,7,42`). One seed's week is one draw of the workload and
    /// of the spot market's reclaims.
    #[arg(long, value_parser = parse_seeds)]
    seeds: Option<Seeds>,
    /// Run the scenario once for each value of a setting,
    /// `PATH=V1,V2,...`, over `--seeds` (or its own seed), and show what
    /// each value costs and loses beside greedy and on-demand (a table,
    /// JSON; with `--report`, sweep.json and frontier.png). PATH is a
    /// field of the scenario file (`cloud.marketTuning.hazardMultiplier`);
    /// `nodePools.NAME.` addresses a NodePool by name and may leave out
    /// `spec.` (`nodePools.training.risk.riskAversion=0,1,2,4,8,15`). More
    /// than one `--sweep` makes a grid. Default strategies:
    /// quartermaster,greedy,on-demand.
    #[arg(long)]
    sweep: Vec<Sweep>,
}

/// The seeds of `--seeds`, in the order given.
#[derive(Debug, Clone)]
struct Seeds(Vec<u64>);

/// Parses `1-10`, `1,7,42` or a mix; ranges are inclusive.
fn parse_seeds(text: &str) -> Result<Seeds, String> {
    let mut seeds = Vec::new();
    for part in text.split(',').map(str::trim) {
        let number = |t: &str| {
            t.trim()
                .parse::<u64>()
                .map_err(|_| format!("{t:?} is not a seed (a whole number)"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (number(a)?, number(b)?);
                if b < a || b - a >= 1000 {
                    return Err(format!(
                        "seed range {part:?} must go upwards and hold at most 1000 seeds"
                    ));
                }
                seeds.extend(a..=b);
            }
            None => seeds.push(number(part)?),
        }
    }
    Ok(Seeds(seeds))
}

/// Runs `simulate`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let catalog = Arc::new(Catalog::embedded().context("loading the embedded catalog")?);
    let text = std::fs::read_to_string(&args.scenario)
        .with_context(|| format!("reading {}", args.scenario.display()))?;
    if !args.sweep.is_empty() {
        return run_sweep(&args, &text, &catalog);
    }
    let mut scenario = Scenario::read(&args.scenario.display().to_string(), &text, &catalog)?;
    let base = args
        .scenario
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    sim::load_spot_traces(&mut scenario, &base)?;
    let strategies = if args.strategies.is_empty() {
        scenario.strategies.clone()
    } else {
        args.strategies.clone()
    };
    if let Some(Seeds(seeds)) = &args.seeds {
        return run_seeds(&args, &scenario, &base, &catalog, &strategies, seeds);
    }
    let jobs = sim::load_jobs(&scenario, &catalog, &base, args.trace.as_deref())?;
    for w in &jobs.warnings {
        eprintln!("warning: {w}");
    }

    let bar = progress_bar(
        &args,
        1000 * strategies.len() as u64,
        "{msg:>14} [{bar:40}] {percent:>3}% {elapsed}",
    );
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

/// A progress bar on stderr of `len` steps drawn with `template`, hidden
/// when the output is JSON (a tool reads it).
fn progress_bar(args: &Args, len: u64, template: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(template)
            .expect("a valid template")
            .progress_chars("=> "),
    );
    if matches!(args.output, super::plan::Output::Json) {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar
}

/// `simulate --seeds`: the scenario once per seed, then the spread.
fn run_seeds(
    args: &Args,
    scenario: &Scenario,
    base: &std::path::Path,
    catalog: &Arc<Catalog>,
    strategies: &[StrategyName],
    seeds: &[u64],
) -> anyhow::Result<ExitCode> {
    let bar = progress_bar(
        args,
        (seeds.len() * strategies.len()) as u64,
        "{msg:>24} [{bar:40}] {pos}/{len} {elapsed}",
    );
    let index = |s: StrategyName| strategies.iter().position(|x| *x == s).unwrap_or(0);
    let report = sim::simulate_seeds(
        scenario,
        catalog,
        base,
        args.trace.as_deref(),
        strategies,
        seeds,
        &mut |i, s, f| {
            bar.set_message(format!("seed {} {s:?}", seeds[i]).to_lowercase());
            bar.set_position((i * strategies.len() + index(s)) as u64 + u64::from(f >= 1.0));
        },
    )?;
    bar.finish_and_clear();
    let summary = serde_json::to_string_pretty(&sim::seeds::summary_json(&report))?;
    match args.output {
        super::plan::Output::Json => println!("{summary}"),
        super::plan::Output::Table => print!("{}", sim::seeds::table(&report)),
    }
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the report folder {}", dir.display()))?;
        let path = dir.join("seeds.json");
        std::fs::write(&path, summary).with_context(|| format!("writing {}", path.display()))?;
        let mut written = vec![path];
        for run in &report.runs {
            let sub = dir.join(format!("seed-{}", run.seed));
            written.extend(
                report::write_report(run, &sub)
                    .with_context(|| format!("writing the report to {}", sub.display()))?,
            );
        }
        if matches!(args.output, super::plan::Output::Table) {
            for p in written {
                println!("wrote {}", p.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `simulate --sweep`: every point of the grid over the seeds, then what
/// each point cost and lost beside the baselines.
fn run_sweep(args: &Args, text: &str, catalog: &Arc<Catalog>) -> anyhow::Result<ExitCode> {
    let file = args.scenario.display().to_string();
    let mut points = sweep::scenarios(&file, text, catalog, &args.sweep)?;
    let base = args
        .scenario
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    for (_, scenario) in &mut points {
        sim::load_spot_traces(scenario, &base)?;
    }
    let strategies = if args.strategies.is_empty() {
        vec![
            StrategyName::Quartermaster,
            StrategyName::Greedy,
            StrategyName::OnDemand,
        ]
    } else {
        args.strategies.clone()
    };
    let seeds = match &args.seeds {
        Some(Seeds(seeds)) => seeds.clone(),
        None => vec![points.first().map_or(0, |(_, s)| s.seed)],
    };
    let per_point = seeds.len() * strategies.len();
    let bar = progress_bar(
        args,
        (points.len() * per_point) as u64,
        "{msg:>40} [{bar:40}] {pos}/{len} {elapsed}",
    );
    let labels: Vec<String> = points.iter().map(|(p, _)| p.to_string()).collect();
    let index = |s: StrategyName| strategies.iter().position(|x| *x == s).unwrap_or(0);
    let runs = sim::simulate_sweep(
        points,
        catalog,
        &base,
        args.trace.as_deref(),
        &strategies,
        &seeds,
        &mut |k, i, s, f| {
            bar.set_message(format!("{} seed {} {s:?}", labels[k], seeds[i]).to_lowercase());
            let done = k * per_point + i * strategies.len() + index(s);
            bar.set_position(done as u64 + u64::from(f >= 1.0));
        },
    )?;
    bar.finish_and_clear();
    let report = sweep::SweepReport {
        paths: args.sweep.iter().map(|s| s.path.clone()).collect(),
        points: runs,
    };
    let summary = serde_json::to_string_pretty(&sweep::summary_json(&report))?;
    match args.output {
        super::plan::Output::Json => println!("{summary}"),
        super::plan::Output::Table => print!("{}", sweep::table(&report)),
    }
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the report folder {}", dir.display()))?;
        let path = dir.join("sweep.json");
        std::fs::write(&path, summary + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        let chart = report::write_frontier(&report, dir)?;
        if matches!(args.output, super::plan::Output::Table) {
            for p in [path, chart] {
                println!("wrote {}", p.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_seeds;

    #[test]
    fn seeds_are_lists_and_inclusive_ranges_and_nonsense_is_named() {
        assert_eq!(parse_seeds("1-3,7, 42").unwrap().0, vec![1, 2, 3, 7, 42]);
        assert_eq!(parse_seeds("5").unwrap().0, vec![5]);
        let err = parse_seeds("1,x").unwrap_err();
        assert!(err.contains("\"x\" is not a seed"), "{err}");
        assert!(parse_seeds("9-2").unwrap_err().contains("upwards"));
        assert!(parse_seeds("0-5000").unwrap_err().contains("at most 1000"));
        assert!(parse_seeds("-3").is_err());
    }
}
