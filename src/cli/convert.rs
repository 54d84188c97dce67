//! `quartermaster convert FILE...`: Karpenter v1 NodePools and
//! EC2NodeClasses in, Quartermaster's out (multi-document YAML on stdout),
//! and on stderr every field that could not be carried over, with its path
//! and what to do instead, as `FILE: document N (Kind name): path: not
//! carried: ...` (and `note:` lines for what was carried with a remark).
//! Each converted object is then checked as `quartermaster validate` would
//! check it; a problem there is reported like a field not carried. The
//! conversion itself is `quartermaster::api::karpenter`.
//!
//! Exit status: 0 when everything was carried, [`EXIT_NOT_CARRIED`] when
//! something was not (the output is printed either way), [`EXIT_UNREADABLE`]
//! when a file cannot be read or is not YAML (nothing is printed then).

use anyhow::Context;
use quartermaster::api::karpenter::{self, Converted};
use quartermaster::catalog::Catalog;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `convert`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// YAML files of Karpenter v1 NodePools and EC2NodeClasses (several
    /// documents per file, or `kubectl get -o yaml` lists); `-` reads
    /// standard input.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// Exit status when a file cannot be read or is not YAML.
pub const EXIT_UNREADABLE: u8 = 1;
/// Exit status when some field could not be carried over.
pub const EXIT_NOT_CARRIED: u8 = 3;

/// Runs `convert`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut files = Vec::new();
    let mut unreadable = false;
    for path in &args.files {
        let name = path.display().to_string();
        match read(path).and_then(|text| {
            let converted = karpenter::convert(&text).map_err(|e| e.to_string())?;
            if converted.is_empty() {
                return Err("no YAML documents".into());
            }
            Ok(converted)
        }) {
            Ok(converted) => files.push((name, converted)),
            Err(e) => {
                eprintln!("error: {name}: {e}");
                unreadable = true;
            }
        }
    }
    if unreadable {
        eprintln!("nothing converted: every file must be readable YAML");
        return Ok(ExitCode::from(EXIT_UNREADABLE));
    }
    let catalog = Catalog::embedded().context("loading the embedded catalog")?;
    for (_, converted) in &mut files {
        karpenter::check(converted, &catalog);
    }
    let mut objects = 0;
    let mut lost = 0;
    for (name, converted) in &files {
        for c in converted {
            objects += usize::from(c.output.is_some());
            for note in &c.notes {
                lost += usize::from(note.kind == karpenter::NoteKind::NotCarried);
                eprintln!("{name}: {}: {note}", c.label());
            }
        }
    }
    let all: Vec<Converted> = files.into_iter().flat_map(|(_, c)| c).collect();
    print!("{}", karpenter::to_yaml(&all).map_err(anyhow::Error::msg)?);
    if lost > 0 {
        eprintln!(
            "converted {objects} objects; {lost} fields not carried (see above): exit status {EXIT_NOT_CARRIED}"
        );
        return Ok(ExitCode::from(EXIT_NOT_CARRIED));
    }
    eprintln!("converted {objects} objects; every field carried");
    Ok(ExitCode::SUCCESS)
}

fn read(path: &PathBuf) -> Result<String, String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read standard input: {e}"))?;
        return Ok(text);
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))
}
