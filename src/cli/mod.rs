//! Subcommands of the `quartermaster` binary, one module each.

mod bench;
mod catalog;
mod controller;
mod convert;
mod crds;
mod market;
mod plan;
mod report;
mod simulate;
mod validate;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Quartermaster: spot-aware, GPU-first node provisioning for Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "quartermaster", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show instance types, offerings and prices from the embedded catalog.
    Catalog(catalog::Args),
    /// Print the CustomResourceDefinitions as YAML.
    Crds(crds::Args),
    /// Check NodePool YAML files and print every problem with its field path.
    Validate(validate::Args),
    /// Convert Karpenter v1 NodePools and EC2NodeClasses to Quartermaster's.
    Convert(convert::Args),
    /// Plan the nodes to launch for pending pods.
    Plan(plan::Args),
    /// Benchmarks run from the command line.
    Bench(bench::Args),
    /// Replay a scenario through every strategy on a simulated cloud.
    Simulate(simulate::Args),
    /// Fit the spot market model from traces.
    Market(market::Args),
    /// Reports from the cluster's telemetry (GPU use from DCGM).
    Report(report::Args),
    /// Run the live controller in a cluster.
    Controller(Box<controller::Args>),
}

/// Runs one subcommand; the exit code is the subcommand's verdict.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Catalog(args) => catalog::run(args),
        Command::Crds(args) => crds::run(args),
        Command::Validate(args) => validate::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Market(args) => market::run(args),
        Command::Report(args) => report::run(args),
        Command::Controller(args) => controller::run(*args),
    }
}
