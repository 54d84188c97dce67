//! `quartermaster crds`: the CustomResourceDefinitions as YAML, printed or
//! written to the files under `crds/` that a test keeps in step with the code.

use anyhow::Context;
use quartermaster::api::crds;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `crds`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write one file per CRD (`nodepools.yaml`, `nodeclaims.yaml`) into DIR
    /// instead of printing them as one multi-document stream.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Runs `crds`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Some(dir) = args.out else {
        print!("{}", crds::all_yaml()?);
        return Ok(ExitCode::SUCCESS);
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (file, crd) in crds::all() {
        let path = dir.join(file);
        std::fs::write(&path, crds::to_yaml(&crd)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
