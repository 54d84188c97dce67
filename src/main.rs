//! The `quartermaster` command line: thin wiring over the library.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", message(&err));
            std::process::ExitCode::from(2)
        }
    }
}

/// The error and its causes, `: `-joined, leaving out a cause whose text
/// the message already holds (many errors name their source themselves).
fn message(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text = format!("{text}: {cause}");
        }
    }
    text
}
