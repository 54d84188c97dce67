//! `quartermaster catalog` (being written).

/// Arguments of `catalog`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `catalog`.
pub fn run(_args: Args) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("catalog is not written yet")
}
