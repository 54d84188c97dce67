//! GPU use at scale: the controller's read of DCGM's series
//! (`controller::prometheus::read_usage`, one instant query per field over
//! a one-minute window) from a real Prometheus (Debian's package, on
//! loopback) holding 5,000 nodes of 8 GPUs by default: 40,000 series for
//! each of the five DCGM fields, three samples each within the window,
//! written with `promtool tsdb create-blocks-from openmetrics` before the
//! server starts (no scraping). It measures the time of a read (the first
//! and the median of four) and the peak RSS the reads add to a process that
//! keeps what it read, as the controller keeps its last reading while it
//! makes the next: each size is read in a child process of its own (this
//! binary again), whose `VmHWM` less its `VmRSS` before the first read is
//! the cost, after one read and after all four. The same run
//! measures a baseline of 10x fewer nodes and prints the ratios.
//!
//! ```text
//! cargo bench --bench gpu_use_scale
//! cargo bench --bench gpu_use_scale -- --nodes 1000
//! ```
//!
//! Not run by `scripts/test`.

#[path = "../tests/support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

use quartermaster::controller::prometheus::{read_usage, Prometheus as Client};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::prometheus::{series, Prometheus};

/// GPUs per node.
const GPUS: u32 = 8;

/// The window read.
const WINDOW: Duration = Duration::from_secs(60);

/// Reads per size; the first also gives the RSS.
const READS: usize = 4;

/// The goals of issue 36.
const READ_GOAL: Duration = Duration::from_secs(2);
const RSS_GOAL_MB: f64 = 30.0;

/// The child's environment: the server's URL, the read's time (Unix
/// milliseconds) and the GPUs expected.
const CHILD_URL: &str = "QM_GPU_SCALE_URL";
const CHILD_AT: &str = "QM_GPU_SCALE_AT";
const CHILD_GPUS: &str = "QM_GPU_SCALE_GPUS";

/// `--nodes N` (also `QM_SCALE_NODES`); cargo's own flags are ignored.
fn nodes() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--nodes")
        .and_then(|i| args.get(i + 1))
        .or(std::env::var("QM_SCALE_NODES").ok().as_ref())
        .map(|v| v.parse().expect("--nodes needs a whole number"))
        .unwrap_or(5_000)
}

/// The OpenMetrics file of `nodes` nodes: every field of every GPU at
/// `at` less 50, 30 and 10 s. Pods hold one GPU each, in 20 namespaces;
/// utilisation spreads over 0..100%.
fn write_series(path: &Path, nodes: usize, at: i64) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("series file"));
    let fields = [
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    ];
    for field in fields {
        writeln!(out, "# TYPE {field} gauge").unwrap();
        for n in 0..nodes {
            let host = format!(
                "ip-10-{}-{}-{}.ec2.internal",
                n / 65536,
                n / 256 % 256,
                n % 256
            );
            for g in 0..GPUS {
                let pod = format!("team-{}/train-{n}-{g}", n % 20);
                let util = ((n * 8 + g as usize) * 37 % 101) as f64;
                let value = match field {
                    "DCGM_FI_DEV_GPU_UTIL" => util,
                    "DCGM_FI_DEV_FB_USED" => 1000.0 + util * 700.0,
                    "DCGM_FI_DEV_FB_FREE" => 80_000.0 - util * 700.0,
                    "DCGM_FI_DEV_XID_ERRORS" => 0.0,
                    _ => util / 100.0,
                };
                let line = series(
                    field,
                    &host,
                    g,
                    "NVIDIA A100-SXM4-80GB",
                    Some(&pod),
                    &[],
                    value,
                );
                let line = line.trim_end();
                for back in [50, 30, 10] {
                    writeln!(out, "{line} {}", at - back).unwrap();
                }
            }
        }
    }
    writeln!(out, "# EOF").unwrap();
    out.flush().unwrap();
}

/// A server holding `nodes` nodes' series at `at` (Unix seconds).
fn server(nodes: usize, at: i64) -> Prometheus {
    let dir =
        std::env::temp_dir().join(format!("qm-gpu-scale-{}", support::prometheus::unique("p")));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("series.om");
    let started = Instant::now();
    write_series(&file, nodes, at);
    let status = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&file)
        .arg(dir.join("tsdb"))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("promtool (Debian's prometheus package: scripts/prometheus-server install)");
    assert!(status.success(), "promtool failed");
    std::fs::remove_file(&file).unwrap();
    eprintln!(
        "{nodes} nodes: series written and blocks made in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Prometheus::start_in(dir)
}

/// One field of `/proc/self/status` in bytes.
fn status_bytes(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// This process's CPU time so far (user and system, all threads), in ms.
fn cpu_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // After the command's name in parentheses: state is field 3, utime 14.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|v| v.parse().unwrap())
        .collect();
    // Clock ticks of 10 ms (USER_HZ is 100 on Linux).
    (f[0] + f[1]) * 10
}

/// The child: reads [`READS`] times, keeping the last reading, and prints
/// `gpus first_rss_added all_rss_added first_ms median_ms median_cpu_ms`
/// (bytes, ms).
fn child(url: &str, at_ms: i64, gpus: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = Client::new(url, Duration::from_secs(60)).unwrap();
    let at = chrono::DateTime::from_timestamp_millis(at_ms).unwrap();
    let before = status_bytes("VmRSS:");
    let mut times = Vec::new();
    let mut cpu = Vec::new();
    let mut kept: Option<quartermaster::cluster::gpu_use::Usage> = None;
    let mut first_added = 0;
    for _ in 0..READS {
        let started = Instant::now();
        let cpu_before = cpu_ms();
        // Sized by the last reading, as the controller's reader does.
        let last = kept.as_ref().map_or(0, |u| u.gpus.len());
        let usage = runtime
            .block_on(read_usage(&client, WINDOW, at, last))
            .expect("a read");
        times.push(started.elapsed());
        cpu.push(cpu_ms() - cpu_before);
        let measured = usage.gpus.iter().filter(|g| g.util.is_some()).count();
        assert_eq!(measured, gpus, "every GPU read");
        assert_eq!(usage.problems.missing_labels + usage.problems.absurd, 0);
        // As the controller keeps its last reading while it makes the
        // next, the previous one is dropped only now.
        kept = Some(usage);
        if times.len() == 1 {
            first_added = status_bytes("VmHWM:").saturating_sub(before);
        }
    }
    let added = status_bytes("VmHWM:").saturating_sub(before);
    drop(kept);
    let first = times[0];
    times.sort();
    cpu.sort();
    println!(
        "{gpus} {first_added} {added} {} {} {}",
        first.as_millis(),
        times[READS / 2].as_millis(),
        cpu[READS / 2]
    );
}

/// One size's measurement.
struct Measured {
    nodes: usize,
    /// Peak RSS added by the first read (keeping it).
    first_rss_added: f64,
    /// Peak RSS added by all reads, each made while the previous one is
    /// kept, as the controller does.
    rss_added: f64,
    first: Duration,
    median: Duration,
    /// This process's CPU time in the median read (the rest of a read is
    /// Prometheus evaluating and the machine's other work).
    median_cpu: Duration,
}

fn measure(nodes: usize) -> Measured {
    let at = chrono::Utc::now().timestamp();
    let prom = server(nodes, at);
    let gpus = nodes * GPUS as usize;
    let out = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_URL, prom.url())
        .env(CHILD_AT, (at * 1000).to_string())
        .env(CHILD_GPUS, gpus.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    Measured {
        nodes,
        first_rss_added: v[1] as f64 / (1024.0 * 1024.0),
        rss_added: v[2] as f64 / (1024.0 * 1024.0),
        first: Duration::from_millis(v[3]),
        median: Duration::from_millis(v[4]),
        median_cpu: Duration::from_millis(v[5]),
    }
}

fn main() {
    if let (Ok(url), Ok(at), Ok(gpus)) = (
        std::env::var(CHILD_URL),
        std::env::var(CHILD_AT),
        std::env::var(CHILD_GPUS),
    ) {
        child(&url, at.parse().unwrap(), gpus.parse().unwrap());
        return;
    }
    let full = nodes();
    let runs: Vec<Measured> = [full / 10, full].into_iter().map(measure).collect();
    println!();
    println!(
        "| nodes | GPUs (series per field) | first read | median read | our CPU in it | RSS added, one read | RSS added, reading while one is kept |"
    );
    println!("|---|---|---|---|---|---|---|");
    for m in &runs {
        println!(
            "| {} | {} | {:.2} s | {:.2} s | {:.2} s | {:.1} MB | {:.1} MB |",
            m.nodes,
            m.nodes * GPUS as usize,
            m.first.as_secs_f64(),
            m.median.as_secs_f64(),
            m.median_cpu.as_secs_f64(),
            m.first_rss_added,
            m.rss_added
        );
    }
    let (b, f) = (&runs[0], &runs[1]);
    println!();
    println!(
        "full / baseline: median read {:.2}, RSS added {:.2} (series {:.1})",
        f.median.as_secs_f64() / b.median.as_secs_f64().max(1e-3),
        f.rss_added / b.rss_added.max(1e-3),
        f.nodes as f64 / b.nodes as f64
    );
    let met = |ok: bool| if ok { "met" } else { "missed" };
    println!(
        "goals: a read {:.2} s (<= {} s: {}), RSS added {:.1} MB (<= {RSS_GOAL_MB} MB: {})",
        f.median.as_secs_f64(),
        READ_GOAL.as_secs(),
        met(f.median <= READ_GOAL),
        f.rss_added,
        met(f.rss_added <= RSS_GOAL_MB)
    );
}
