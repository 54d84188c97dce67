//! `quartermaster bench plan`: the MIP and the greedy baseline on the same
//! reproducible workload, in the same process, side by side, and the MIP
//! on the same workload's devices asked through DRA claims.
//! `quartermaster bench simulate`: a generated many-job scenario, timed
//! against a tenth of it in the same process, so the ratio tells whether the
//! engine scales linearly whatever else the machine is doing.
//! `quartermaster bench trace`: a scenario replaying a trace, timed against
//! the same scenario replaying the trace's first tenth, in the same process.

use anyhow::{bail, Context};
use quartermaster::catalog::Catalog;
use quartermaster::cluster::dra::Resolver;
use quartermaster::plan::{self, workload, Input, Options, Plan, Strategy};
use quartermaster::sim::scenario::StrategyName;
use serde_json::json;
use std::process::ExitCode;
use std::time::Instant;

/// Arguments of `bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Plan a generated workload with both planners.
    Plan {
        /// Pending pods to generate.
        #[arg(long, default_value_t = 2000)]
        pods: usize,
        /// Seed of the workload generator.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Region whose offerings to plan over.
        #[arg(long, default_value = "us-east-1")]
        region: String,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        output: super::plan::Output,
    },
    /// Simulate a generated training workload with the quartermaster
    /// strategy, and a tenth of it (a tenth of the jobs over a tenth of the
    /// days) as the baseline.
    Simulate {
        /// Jobs to generate.
        #[arg(long, default_value_t = 100_000)]
        jobs: u32,
        /// Simulated days.
        #[arg(long, default_value_t = 30)]
        days: u32,
        /// Seed of the workload and the simulated cloud.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Replay a trace through a scenario, and its first tenth (by rows, in
    /// the file's order of submission) as the baseline.
    Trace {
        /// Scenario file (YAML; see simulations/).
        scenario: std::path::PathBuf,
        /// The trace CSV (format: shared/traces/README.md).
        #[arg(long)]
        trace: std::path::PathBuf,
        /// Strategies to replay, comma-separated (default: the scenario's).
        #[arg(long, value_delimiter = ',')]
        strategies: Vec<StrategyName>,
    },
}

/// A scenario of `jobs` training jobs spread evenly over `days`.
fn bench_scenario(jobs: u32, days: u32, seed: u64) -> String {
    let per_hour = f64::from(jobs) / (f64::from(days.max(1)) * 24.0);
    format!(
        r#"
name: bench-{jobs}-jobs-{days}d
start: 2026-01-05T00:00:00Z
duration: {hours}h
seed: {seed}
strategies: [quartermaster]
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {{name: training}}
  spec:
    capacityTypes: [spot, on-demand]
    template:
      spec:
        taints: [{{key: nvidia.com/gpu, effect: NoSchedule}}]
        requirements:
        - {{key: quartermaster.dev/instance-family, operator: In, values: [g6e, p4d, p5]}}
    disruption: {{consolidationPolicy: WhenEmpty, consolidateAfter: 10m}}
workloads:
- training:
    name: bench
    jobs: {jobs}
    perHour: {per_hour}
    gpus: [1, 2, 4, 8]
    runTime: {{median: 1h, p90: 4h}}
    checkpointInterval: 30m
    gangFraction: 0.1
    gangSize: 2
"#,
        hours = u64::from(days) * 24
    )
}

/// How long one simulation took: wall-clock seconds, and CPU seconds of
/// this process: the work of every strategy's thread together, which does
/// not grow when other work shares the machine (wall time does, and it
/// shrinks with the cores the strategies run on).
#[derive(Debug, Clone, Copy)]
struct Took {
    wall_s: f64,
    cpu_s: f64,
}

/// Times the generated scenario, and returns its report.
fn time_simulation(
    catalog: &std::sync::Arc<Catalog>,
    jobs: u32,
    days: u32,
    seed: u64,
) -> anyhow::Result<(Took, quartermaster::sim::result::SimReport)> {
    use quartermaster::sim::{self, scenario::Scenario};
    let scenario = Scenario::parse(&bench_scenario(jobs, days, seed), catalog)?;
    let generated = sim::load_jobs(&scenario, catalog, std::path::Path::new("."), None)?;
    timed(|| {
        sim::simulate(
            &scenario,
            catalog,
            &generated,
            &scenario.strategies,
            &mut |_, _| {},
        )
    })
}

/// Runs `f`, and how long it took in wall-clock and CPU seconds.
fn timed<T, E: Into<anyhow::Error>>(f: impl FnOnce() -> Result<T, E>) -> anyhow::Result<(Took, T)> {
    let start = Instant::now();
    let cpu = cpu_time::ProcessTime::try_now().ok();
    let out = f().map_err(Into::into)?;
    let wall_s = start.elapsed().as_secs_f64();
    let cpu_s = cpu
        .and_then(|c| c.try_elapsed().ok())
        .map_or(wall_s, |d| d.as_secs_f64());
    Ok((Took { wall_s, cpu_s }, out))
}

fn run_simulate(jobs: u32, days: u32, seed: u64) -> anyhow::Result<ExitCode> {
    if jobs < 10 || days < 1 {
        bail!("--jobs must be at least 10 and --days at least 1");
    }
    let catalog = std::sync::Arc::new(Catalog::embedded().context("loading the embedded catalog")?);
    let small_days = (days / 10).max(1);
    let small_jobs = (u64::from(jobs) * u64::from(small_days) / u64::from(days)).max(1) as u32;
    let (small, _) = time_simulation(&catalog, small_jobs, small_days, seed)?;
    let (full, report) = time_simulation(&catalog, jobs, days, seed)?;
    let r = &report.strategies["quartermaster"];
    println!(
        "baseline: {small_jobs} jobs over {small_days} days in {:.2} s CPU ({:.2} s wall)",
        small.cpu_s, small.wall_s
    );
    println!(
        "full:     {jobs} jobs over {days} days in {:.2} s CPU ({:.2} s wall; {} finished, ${:.0})",
        full.cpu_s, full.wall_s, r.jobs_completed, r.total_cost
    );
    let linear = f64::from(jobs) / f64::from(small_jobs);
    println!(
        "ratio full / baseline {:.1} in CPU time (linear scaling: {linear:.1})",
        full.cpu_s / small.cpu_s.max(1e-9)
    );
    Ok(ExitCode::SUCCESS)
}

/// Replays `trace` through the scenario, whole and its first tenth of rows.
fn run_trace(
    path: &std::path::Path,
    trace: &std::path::Path,
    strategies: &[StrategyName],
) -> anyhow::Result<ExitCode> {
    use quartermaster::sim::{self, scenario::Scenario};
    let catalog = std::sync::Arc::new(Catalog::embedded().context("loading the embedded catalog")?);
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut scenario = Scenario::read(&path.display().to_string(), &text, &catalog)?;
    let base = path
        .parent()
        .map(std::path::PathBuf::from)
        .unwrap_or_default();
    sim::load_spot_traces(&mut scenario, &base)?;
    let strategies = if strategies.is_empty() {
        scenario.strategies.clone()
    } else {
        strategies.to_vec()
    };
    let rows =
        std::fs::read_to_string(trace).with_context(|| format!("reading {}", trace.display()))?;
    let mut lines = rows.lines();
    let header = lines.next().unwrap_or_default();
    let body: Vec<&str> = lines.filter(|l| !l.trim().is_empty()).collect();
    let tenth = (body.len() / 10).max(1);
    let small_path =
        std::env::temp_dir().join(format!("qm-bench-trace-{}.csv", std::process::id()));
    let small_text: String = std::iter::once(header)
        .chain(body[..tenth.min(body.len())].iter().copied())
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&small_path, small_text)
        .with_context(|| format!("writing {}", small_path.display()))?;
    let time = |t: &std::path::Path| -> anyhow::Result<(Took, usize)> {
        let jobs = sim::load_jobs(&scenario, &catalog, &base, Some(t))?;
        let (took, _) =
            timed(|| sim::simulate(&scenario, &catalog, &jobs, &strategies, &mut |_, _| {}))?;
        Ok((took, jobs.jobs.len()))
    };
    let small = time(&small_path);
    let _ = std::fs::remove_file(&small_path);
    let (small, small_jobs) = small?;
    let (full, full_jobs) = time(trace)?;
    println!("strategies: {}", serde_json::to_string(&strategies)?);
    println!(
        "baseline: first {tenth} of {} rows ({small_jobs} jobs in the scenario) in {:.2} s CPU ({:.2} s wall)",
        body.len(),
        small.cpu_s,
        small.wall_s
    );
    println!(
        "full:     {} rows ({full_jobs} jobs) in {:.2} s CPU ({:.2} s wall)",
        body.len(),
        full.cpu_s,
        full.wall_s
    );
    println!(
        "ratio full / baseline {:.1} in CPU time ({:.1} x the jobs)",
        full.cpu_s / small.cpu_s.max(1e-9),
        full_jobs as f64 / small_jobs.max(1) as f64
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs `bench`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (pods, seed, region, output) = match args.what {
        What::Plan {
            pods,
            seed,
            region,
            output,
        } => (pods, seed, region, output),
        What::Simulate { jobs, days, seed } => return run_simulate(jobs, days, seed),
        What::Trace {
            scenario,
            trace,
            strategies,
        } => return run_trace(&scenario, &trace, &strategies),
    };
    let catalog = Catalog::embedded().context("loading the embedded catalog")?;
    if !catalog.regions().contains(&region.as_str()) {
        bail!("no offerings in region {region:?}");
    }
    let pools = workload::pools();
    let pending = workload::pods(pods, seed);
    let input = Input::offline(&catalog, &region, &pools, &pending);
    let options = Options {
        lower_bound: true,
        ..Options::default()
    };
    let run = |s| {
        let start = Instant::now();
        plan::plan(&input, s, &options, &|| start.elapsed().as_secs_f64())
    };
    let mip = run(Strategy::Mip);
    let greedy = run(Strategy::Greedy);
    // The same GPU, MIG and Neuron demand as DRA claims, matched and
    // planned in the same run (`plan::workload::dra_form`).
    let (mut dra_pods, objects) = workload::dra_form(&pending);
    let matching = Instant::now();
    Resolver::new().attach(&mut dra_pods, &objects, &catalog);
    let match_ms = matching.elapsed().as_secs_f64() * 1000.0;
    let dra_input = Input::offline(&catalog, &region, &pools, &dra_pods);
    let start = Instant::now();
    let dra = plan::plan(&dra_input, Strategy::Mip, &options, &|| {
        start.elapsed().as_secs_f64()
    });
    let dra_total_ms = start.elapsed().as_secs_f64() * 1000.0;
    let solve_ratio = dra.solve_ms / mip.solve_ms.max(1e-9);
    let offerings = catalog.offerings_in(&region).count();
    let summary = |p: &Plan| {
        json!({
            "cost_per_hour": p.cost_per_hour,
            "risk_adjusted_cost_per_hour": p.risk_adjusted_cost_per_hour,
            "solve_ms": p.solve_ms,
            "nodes": p.nodes.len(),
            "unschedulable": p.unschedulable.len(),
        })
    };
    match output {
        super::plan::Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "pods": pods,
                "seed": seed,
                "region": region,
                "offerings": offerings,
                "mip": summary(&mip),
                "greedy": summary(&greedy),
                "dra": {
                    "mip": summary(&dra),
                    "match_ms": match_ms,
                    "plan_ms": dra_total_ms,
                    "solve_ratio": solve_ratio,
                },
                "lower_bound_per_hour": mip.lower_bound_per_hour,
                "lower_bound_ms": mip.lower_bound_ms,
                "optimal": mip.optimal,
            }))?
        ),
        super::plan::Output::Table => {
            println!("{pods} pods, seed {seed}, {offerings} offerings in {region}");
            println!(
                "{:<8} {:>12} {:>16} {:>8} {:>10} {:>14}",
                "PLANNER", "$/H", "RISK-ADJ $/H", "NODES", "SOLVE MS", "UNSCHEDULABLE"
            );
            for (name, p) in [("mip", &mip), ("greedy", &greedy), ("mip dra", &dra)] {
                println!(
                    "{:<8} {:>12.2} {:>16.2} {:>8} {:>10.0} {:>14}",
                    name,
                    p.cost_per_hour,
                    p.risk_adjusted_cost_per_hour,
                    p.nodes.len(),
                    p.solve_ms,
                    p.unschedulable.len()
                );
            }
            if let (Some(lb), Some(gap)) = (mip.lower_bound_per_hour, mip.gap()) {
                println!(
                    "lower bound ${lb:.2}/h in {:.0} ms (over every offering; MIP solve {:.0} ms); MIP gap {:.2}%; MIP / greedy {:.3}",
                    mip.lower_bound_ms.unwrap_or(0.0),
                    mip.solve_ms,
                    gap * 100.0,
                    mip.risk_adjusted_cost_per_hour / greedy.risk_adjusted_cost_per_hour
                );
            }
            println!(
                "DRA form (the same devices as claims): MIP solve {:.0} ms = {solve_ratio:.2} x the device-plugin form's; claims matched in {match_ms:.0} ms, planned in {dra_total_ms:.0} ms; risk-adjusted cost {:.2} vs {:.2}",
                dra.solve_ms,
                dra.risk_adjusted_cost_per_hour,
                mip.risk_adjusted_cost_per_hour
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
