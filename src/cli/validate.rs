//! `quartermaster validate` (being written).

/// Arguments of `validate`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `validate`.
pub fn run(_args: Args) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("validate is not written yet")
}
