//! Subcommands of the `quartermaster` binary, one module each.

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
enum Command {}

/// Runs one subcommand; the exit code is the subcommand's verdict.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {}
}
