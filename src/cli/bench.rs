//! `quartermaster bench plan`: the MIP and the greedy baseline on the same
//! reproducible workload, in the same process, side by side.

use anyhow::{bail, Context};
use quartermaster::catalog::Catalog;
use quartermaster::plan::{self, workload, Input, Options, Plan, Strategy};
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
}

/// Runs `bench`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let What::Plan {
        pods,
        seed,
        region,
        output,
    } = args.what;
    let catalog = Catalog::embedded().context("loading the embedded catalog")?;
    if !catalog.regions().contains(&region.as_str()) {
        bail!("no offerings in region {region:?}");
    }
    let pools = workload::pools();
    let pending = workload::pods(pods, seed);
    let input = Input {
        catalog: &catalog,
        region: &region,
        pools: &pools,
        nodes: &[],
        pods: &pending,
        unavailable: &|_| false,
        learned_rate: None,
    };
    let options = Options::default();
    let run = |s| {
        let start = Instant::now();
        plan::plan(&input, s, &options, &|| start.elapsed().as_secs_f64())
    };
    let mip = run(Strategy::Mip);
    let greedy = run(Strategy::Greedy);
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
                "lower_bound_per_hour": mip.lower_bound_per_hour,
            }))?
        ),
        super::plan::Output::Table => {
            println!("{pods} pods, seed {seed}, {offerings} offerings in {region}");
            println!(
                "{:<8} {:>12} {:>16} {:>8} {:>10} {:>14}",
                "PLANNER", "$/H", "RISK-ADJ $/H", "NODES", "SOLVE MS", "UNSCHEDULABLE"
            );
            for p in [&mip, &greedy] {
                println!(
                    "{:<8} {:>12.2} {:>16.2} {:>8} {:>10.0} {:>14}",
                    format!("{:?}", p.strategy).to_lowercase(),
                    p.cost_per_hour,
                    p.risk_adjusted_cost_per_hour,
                    p.nodes.len(),
                    p.solve_ms,
                    p.unschedulable.len()
                );
            }
            if let (Some(lb), Some(gap)) = (mip.lower_bound_per_hour, mip.gap()) {
                println!(
                    "lower bound ${lb:.2}/h; MIP gap {:.2}%; MIP / greedy {:.3}",
                    gap * 100.0,
                    mip.risk_adjusted_cost_per_hour / greedy.risk_adjusted_cost_per_hour
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
