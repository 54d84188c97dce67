//! Log output of the controller (tracing-subscriber): human-readable text
//! or one JSON object per line, filtered by `RUST_LOG` when it is set and by
//! the `--log-level` directive otherwise.

use std::str::FromStr;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line (for log pipelines).
    Json,
}

/// Errors of logging setup.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The filter directive does not parse (not retryable: fix the flag or
    /// `RUST_LOG`).
    #[error("invalid log filter {directive:?}: {source}")]
    Filter {
        /// The directive given.
        directive: String,
        /// The parser's complaint.
        source: tracing_subscriber::filter::ParseError,
    },
    /// A global subscriber is installed already.
    #[error("logging is initialised already: {0}")]
    AlreadySet(String),
}

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The filter in force: `rust_log` (the `RUST_LOG` variable) when it is set
/// and non-empty, else `level` (`info`, `debug`, or any directive such as
/// `quartermaster=debug,kube=warn`).
///
/// # Errors
/// [`Error::Filter`] naming the directive that does not parse.
pub fn filter(level: &str, rust_log: Option<&str>) -> Result<EnvFilter> {
    let directive = match rust_log {
        Some(v) if !v.trim().is_empty() => v,
        _ => level,
    };
    EnvFilter::from_str(directive).map_err(|source| Error::Filter {
        directive: directive.to_string(),
        source,
    })
}

/// Installs the global subscriber writing to stderr.
///
/// # Errors
/// [`Error::Filter`] for a bad directive; [`Error::AlreadySet`] when called
/// twice.
pub fn init(format: LogFormat, level: &str) -> Result<()> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = filter(level, rust_log.as_deref())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    result.map_err(|e| Error::AlreadySet(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_wins_over_the_level_flag() {
        let f = filter("info", Some("quartermaster=debug")).unwrap();
        assert_eq!(f.to_string(), "quartermaster=debug");
    }

    #[test]
    fn an_empty_rust_log_falls_back_to_the_level_flag() {
        let f = filter("warn", Some("  ")).unwrap();
        assert_eq!(f.to_string(), "warn");
    }

    #[test]
    fn a_bad_directive_is_a_clear_error() {
        let err = filter("quartermaster=loud", None).unwrap_err().to_string();
        assert!(err.contains("quartermaster=loud"), "{err}");
    }
}
