//! Controller scale benchmark: the real controller binary
//! (`quartermaster controller --cloud simulated`, no leader election)
//! lists and watches a cluster served over loopback HTTP by the fake API
//! server of `tests/support` (5,000 nodes and 100,000 running pods by
//! default), then gets a burst of 1,000 pending GPU pods. It measures the
//! controller's peak RSS (`VmHWM` of `/proc/PID/status`) and, per burst
//! pod, the time from the pods watch delivering it to the creation of the
//! NodeClaim that covers it (the claim its `Nominated` Event names), with
//! `--batch-idle 1s`: the batch closes 1 s after the burst stops, so
//! "after the batch" subtracts that second. The same run measures a
//! baseline of 10x fewer nodes and pods (same burst) and prints the
//! ratios.
//!
//! ```text
//! cargo bench --bench controller_scale
//! cargo bench --bench controller_scale -- --nodes 500 --pods 10000 --burst 200
//! ```
//!
//! The controller binary is the one cargo builds for the benchmark's
//! profile (`target/release/quartermaster` under `cargo bench`); set
//! `QM_CONTROLLER_BIN` to measure another build. The child process is
//! killed when a run ends, fails or panics. Not run by `scripts/test`.

#[path = "../tests/support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

use std::path::PathBuf;
use std::time::Duration;
use support::scale::{self, Measured, Size};

/// The batch window the controller runs with.
const BATCH_IDLE: Duration = Duration::from_secs(1);

/// The RSS goal of issue 12.
const RSS_GOAL_MB: f64 = 200.0;

/// The latency goal of issue 12, after the batch closes.
const P99_GOAL: Duration = Duration::from_secs(2);

/// `--nodes N --pods N --burst N` (also `QM_SCALE_NODES`, `_PODS`,
/// `_BURST`); cargo's own `--bench` flag is ignored.
fn size() -> Size {
    let mut size = Size {
        nodes: env_or("QM_SCALE_NODES", 5_000),
        pods: env_or("QM_SCALE_PODS", 100_000),
        burst: env_or("QM_SCALE_BURST", 1_000),
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = || {
            args.get(i + 1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{} needs a whole number", args[i]))
        };
        match args[i].as_str() {
            "--nodes" => size.nodes = value(),
            "--pods" => size.pods = value(),
            "--burst" => size.burst = value(),
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    size
}

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn binary() -> PathBuf {
    std::env::var_os("QM_CONTROLLER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_quartermaster")))
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// One row of the table.
fn row(m: &Measured) -> String {
    let p50 = scale::quantile(&m.latencies, 0.5);
    let p99 = scale::quantile(&m.latencies, 0.99);
    format!(
        "| {} nodes, {} pods | {} | {:.0} MB | {:.0} MB | {} ({} uncovered) | {} | {} | {} | {} |",
        m.size.nodes,
        m.size.pods,
        secs(m.sync),
        mb(m.rss_synced),
        mb(m.peak_rss),
        m.claims,
        m.uncovered,
        secs(p50),
        secs(p99),
        secs(p50.saturating_sub(BATCH_IDLE)),
        secs(p99.saturating_sub(BATCH_IDLE)),
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let full = size();
    let baseline = Size {
        nodes: full.nodes / 10,
        pods: full.pods / 10,
        burst: full.burst,
    };
    let binary = binary();
    println!("controller: {}", binary.display());
    let extra = ["--batch-idle", "1s"];
    let wait = Duration::from_secs(120);
    let mut runs = Vec::new();
    for size in [baseline, full] {
        eprintln!(
            "running {} nodes, {} pods, a burst of {} ...",
            size.nodes, size.pods, size.burst
        );
        runs.push(scale::run(&binary, size, &extra, wait).await);
    }
    println!();
    println!(
        "| cluster | sync | RSS synced | peak RSS | NodeClaims | p50 | p99 | p50 after batch | p99 after batch |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for m in &runs {
        println!("{}", row(m));
    }
    let (b, f) = (&runs[0], &runs[1]);
    let ratio = |x: f64, y: f64| if y > 0.0 { x / y } else { f64::NAN };
    let p99 = |m: &Measured| scale::quantile(&m.latencies, 0.99);
    println!();
    println!(
        "full / baseline: peak RSS {:.2}, sync {:.2}, p99 {:.2} (objects {:.1})",
        ratio(mb(f.peak_rss), mb(b.peak_rss)),
        ratio(f.sync.as_secs_f64(), b.sync.as_secs_f64()),
        ratio(p99(f).as_secs_f64(), p99(b).as_secs_f64()),
        ratio(
            (f.size.nodes + f.size.pods) as f64,
            (b.size.nodes + b.size.pods) as f64
        ),
    );
    let after = p99(f).saturating_sub(BATCH_IDLE);
    println!(
        "goals: peak RSS {:.0} MB (<= {RSS_GOAL_MB} MB: {}), p99 after the batch {} (<= {}: {})",
        mb(f.peak_rss),
        if mb(f.peak_rss) <= RSS_GOAL_MB {
            "met"
        } else {
            "missed"
        },
        secs(after),
        secs(P99_GOAL),
        if after <= P99_GOAL && f.uncovered == 0 {
            "met"
        } else {
            "missed"
        },
    );
}
