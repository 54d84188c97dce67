//! `quartermaster crds` (being written).

/// Arguments of `crds`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `crds`.
pub fn run(_args: Args) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("crds is not written yet")
}
