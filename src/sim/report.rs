//! Renders a [`SimReport`] for people and tools: a terminal table, a JSON
//! summary, a long-format time-series CSV and PNG charts, and writes them to
//! a directory. Pure functions of the report, except [`write_report`] and
//! [`write_charts`]; what the numbers mean is `result`'s business.

mod charts;
mod terminal;

pub use charts::{write_charts, write_frontier};
pub(crate) use terminal::bill_lines;
pub(crate) use terminal::columns;
pub(crate) use terminal::shape_lines;
pub use terminal::table;
pub(crate) use terminal::usd;

use super::result::{ShapeLoss, SimReport, StrategyResult};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The baseline that [`ratio_to_on_demand`] divides by.
pub const ON_DEMAND: &str = "on-demand";

/// Strategies in the order reports show them; others follow alphabetically.
const ORDER: [&str; 5] = ["quartermaster", "greedy", "karpenter", ON_DEMAND, "static"];

/// How many unfinished jobs the JSON summary lists per strategy; the report
/// folder's `unfinished.csv` lists them all.
const UNFINISHED_IN_JSON: usize = 100;

/// What went wrong while writing a report. Every variant names the file or
/// directory; all are I/O or drawing failures of that one file, retryable
/// once the cause (permissions, disk space) is fixed, except
/// [`Error::LoadFont`], which is a build defect.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The output directory could not be created.
    #[error("failed to create report directory {path}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("failed to write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The JSON summary could not be serialised.
    #[error("failed to serialise {path}")]
    Serialize {
        /// The file it was meant for.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// Plotters failed to draw a chart.
    #[error("failed to draw {path}: {message}")]
    Draw {
        /// The chart file.
        path: PathBuf,
        /// Plotters' description of the failure.
        message: String,
    },
    /// A drawn chart could not be encoded as PNG.
    #[error("failed to encode {path} as PNG")]
    EncodePng {
        /// The chart file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: png::EncodingError,
    },
    /// The embedded chart font was rejected (a broken build, not retryable).
    #[error("failed to load the embedded chart font for {path}")]
    LoadFont {
        /// The chart that needed it.
        path: PathBuf,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The strategies of `report` in presentation order: quartermaster, greedy,
/// on-demand, static, then any others by name.
pub fn ordered(report: &SimReport) -> Vec<(&str, &StrategyResult)> {
    let mut out: Vec<(&str, &StrategyResult)> = ORDER
        .iter()
        .filter_map(|name| report.strategies.get_key_value(*name))
        .map(|(name, result)| (name.as_str(), result))
        .collect();
    out.extend(
        report
            .strategies
            .iter()
            .filter(|(name, _)| !ORDER.contains(&name.as_str()))
            .map(|(name, result)| (name.as_str(), result)),
    );
    out
}

/// `result`'s cost over the `on-demand` strategy's, when that strategy is in
/// the report and spent something.
pub fn ratio_to_on_demand(report: &SimReport, result: &StrategyResult) -> Option<f64> {
    let base = report.strategies.get(ON_DEMAND)?.total_cost;
    (base > 0.0).then(|| result.total_cost / base)
}

/// `result`'s cost over the clairvoyant lower bound, when that is positive.
pub fn ratio_to_lower_bound(report: &SimReport, result: &StrategyResult) -> Option<f64> {
    (report.lower_bound_cost > 0.0).then(|| result.total_cost / report.lower_bound_cost)
}

/// The machine-readable summary: scenario, duration, seed, lower bound, and
/// per strategy its totals, derived ratios (`null` where undefined) and up to
/// 100 unfinished jobs (with `unfinished_count` giving them all).
pub fn summary_json(report: &SimReport) -> Value {
    let strategies: serde_json::Map<String, Value> = report
        .strategies
        .iter()
        .map(|(name, r)| (name.clone(), strategy_json(report, r)))
        .collect();
    json!({
        "scenario": report.scenario,
        "duration_s": report.duration_s,
        "seed": report.seed,
        "lower_bound_cost": report.lower_bound_cost,
        "lower_bound_unplaceable_jobs": report.lower_bound_unplaceable,
        "warnings": report.warnings,
        "trace_queue": report.trace_queue,
        "strategies": strategies,
    })
}

fn strategy_json(report: &SimReport, r: &StrategyResult) -> Value {
    let unfinished: Vec<Value> = r
        .unfinished
        .iter()
        .take(UNFINISHED_IN_JSON)
        .map(|u| json!({ "job": u.job, "reason": u.reason }))
        .collect();
    json!({
        "total_cost": r.total_cost,
        "gpu_hours": r.gpu_hours,
        "lost_gpu_hours": r.lost_gpu_hours,
        "lost_gpu_hours_by": r.lost_gpu_hours_by,
        "lost_gpu_hours_by_shape": by_shape(&r.lost_by_shape),
        "provisioned_gpu_hours": r.provisioned_gpu_hours,
        "mean_pending_s": r.mean_pending_s,
        "p95_pending_s": r.p95_pending_s,
        "interruptions": r.interruptions,
        "checkpoints": r.checkpoints,
        "jobs_completed": r.jobs_completed,
        "jobs_total": r.jobs_total,
        "cost_per_gpu_hour": r.cost_per_gpu_hour(),
        "gpu_utilisation": r.gpu_utilisation(),
        "ratio_to_on_demand": ratio_to_on_demand(report, r),
        "ratio_to_lower_bound": ratio_to_lower_bound(report, r),
        "nodes_launched": r.nodes_launched,
        "reserved_upfront_cost": r.reserved_upfront_cost,
        "cost_by": r.cost_by,
        "spot_notices": r.spot_notices,
        "drift_replacements": r.drift_replacements,
        "expired_replacements": r.expired_replacements,
        "faults": r.faults,
        "reboots": r.reboots,
        "repair_replacements": r.repair_replacements,
        "fault_lost_gpu_hours": r.fault_lost_gpu_hours,
        "idle_gpu_hours": r.idle_gpu_hours,
        "right_size_saving": r.right_size_saving,
        "prewarm_ready": r.prewarm_ready.0,
        "prewarm_windows": r.prewarm_ready.1,
        "gang_starts_in_one_block": r.gang_blocks.0,
        "gang_starts_with_network_topology": r.gang_blocks.1,
        "buffer_windows_held": r.buffer_windows.0,
        "buffer_windows": r.buffer_windows.1,
        "p95_slowdown": r.p95_slowdown,
        "unfinished": unfinished,
        "unfinished_count": r.unfinished.len(),
    })
}

/// `lost_gpu_hours_by_shape`: per job shape its jobs, work, lost GPU-hours
/// (with causes), interruptions and lost share of its work (`null` without
/// work).
pub(crate) fn by_shape(shapes: &BTreeMap<String, ShapeLoss>) -> Value {
    let shapes: serde_json::Map<String, Value> = shapes
        .iter()
        .map(|(name, s)| {
            let v = json!({
                "jobs": s.jobs,
                "work_gpu_hours": s.work_gpu_hours,
                "lost_gpu_hours": s.lost_gpu_hours,
                "lost_gpu_hours_by": s.lost_gpu_hours_by,
                "lost_share": s.lost_share(),
                "interruptions": s.interruptions,
            });
            (name.clone(), v)
        })
        .collect();
    Value::Object(shapes)
}

/// Every unfinished job of every strategy, one row each:
/// `strategy,job,reason` (CSV-quoted where needed), sorted by strategy then
/// as the run listed them.
pub fn unfinished_csv(report: &SimReport) -> String {
    let mut out = String::from("strategy,job,reason\n");
    for (name, r) in &report.strategies {
        for u in &r.unfinished {
            let row = [name.as_str(), u.job.as_str(), u.reason.as_str()].map(csv_field);
            let _ = writeln!(out, "{}", row.join(","));
        }
    }
    out
}

/// Every instance family seen in any sample of any strategy, sorted.
fn families(report: &SimReport) -> BTreeSet<&str> {
    report
        .strategies
        .values()
        .flat_map(|r| &r.timeseries)
        .flat_map(|s| s.nodes_by_family.keys().map(String::as_str))
        .collect()
}

/// The time series of every strategy in long format, one row per sample:
/// `strategy,t_s,cost_per_hour,cumulative_cost,spot_nodes,on_demand_nodes,
/// pending_pods,gpus_provisioned,gpus_used,interruptions,lost_gpu_hours`
/// (the last two cumulative) then `nodes_<family>` for every
/// family seen anywhere (0 where a sample has none). Rows are sorted by
/// strategy name, then time; numbers carry at most six decimals.
pub fn timeseries_csv(report: &SimReport) -> String {
    let families = families(report);
    let mut out = String::from(
        "strategy,t_s,cost_per_hour,cumulative_cost,spot_nodes,on_demand_nodes,\
         pending_pods,gpus_provisioned,gpus_used,interruptions,lost_gpu_hours",
    );
    for family in &families {
        out.push_str(",nodes_");
        out.push_str(&csv_field(family));
    }
    out.push('\n');
    for (name, result) in &report.strategies {
        let mut samples: Vec<_> = result.timeseries.iter().collect();
        samples.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
        for s in samples {
            // Writing to a String cannot fail.
            let _ = write!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{}",
                csv_field(name),
                num(s.t_s),
                num(s.cost_per_hour),
                num(s.cumulative_cost),
                s.spot_nodes,
                s.on_demand_nodes,
                s.pending_pods,
                num(s.gpus_provisioned),
                num(s.gpus_used),
                s.interruptions,
                num(s.lost_gpu_hours),
            );
            for family in &families {
                let n = s.nodes_by_family.get(*family).copied().unwrap_or(0);
                let _ = write!(out, ",{n}");
            }
            out.push('\n');
        }
    }
    out
}

/// A number with at most six decimals and no trailing zeros.
fn num(x: f64) -> String {
    let s = format!("{x:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// A CSV field, quoted when it holds a comma, quote or line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Creates `dir` (and its parents) and writes `summary.json`,
/// `timeseries.csv`, `unfinished.csv`, `cost.png`, `nodes.png` and
/// `pending.png` into it, replacing files of those names. Returns the
/// paths written, in that order.
///
/// # Errors
/// [`Error::CreateDir`] if `dir` cannot be created; otherwise the error of
/// the first file that could not be produced (files before it stay written).
pub fn write_report(report: &SimReport, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|source| Error::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let summary = dir.join("summary.json");
    let mut json =
        serde_json::to_string_pretty(&summary_json(report)).map_err(|source| Error::Serialize {
            path: summary.clone(),
            source,
        })?;
    json.push('\n');
    write_file(&summary, json.as_bytes())?;
    let csv = dir.join("timeseries.csv");
    write_file(&csv, timeseries_csv(report).as_bytes())?;
    let unfinished = dir.join("unfinished.csv");
    write_file(&unfinished, unfinished_csv(report).as_bytes())?;
    let mut paths = vec![summary, csv, unfinished];
    paths.extend(write_charts(report, dir)?);
    Ok(paths)
}

/// Writes `bytes` to `path`, naming the file on failure.
fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|source| Error::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Hand-made reports for the rendering tests.

    use crate::sim::result::{CostBy, Sample, SimReport, StrategyResult, Unfinished};
    use std::collections::BTreeMap;

    /// A strategy result with the given cost and simple, checkable totals:
    /// 10 GPU-hours held of 20 provisioned, 1 lost, 4 of 5 jobs done.
    pub fn result(total_cost: f64) -> StrategyResult {
        StrategyResult {
            total_cost,
            reserved_upfront_cost: 0.0,
            cost_by: CostBy {
                work: total_cost * 0.5,
                idle: total_cost * 0.25,
                booting: total_cost * 0.25,
                ..CostBy::default()
            },
            gpu_hours: 10.0,
            lost_gpu_hours: 1.0,
            lost_gpu_hours_by: crate::sim::jobs::LostBy {
                rework: 0.5,
                restarts: 0.25,
                checkpoint_pauses: 0.25,
            },
            lost_by_shape: [(
                crate::sim::result::shape_name(8.0, 4),
                crate::sim::result::ShapeLoss {
                    jobs: 4,
                    work_gpu_hours: 8.0,
                    lost_gpu_hours: 1.0,
                    lost_gpu_hours_by: crate::sim::jobs::LostBy {
                        rework: 0.5,
                        restarts: 0.25,
                        checkpoint_pauses: 0.25,
                    },
                    interruptions: 3,
                },
            )]
            .into_iter()
            .collect(),
            provisioned_gpu_hours: 20.0,
            mean_pending_s: 90.0,
            p95_pending_s: 7200.0,
            interruptions: 3,
            checkpoints: 7,
            jobs_completed: 4,
            jobs_total: 5,
            nodes_launched: 6,
            spot_notices: 2,
            drift_replacements: 0,
            expired_replacements: 0,
            faults: 2,
            reboots: 2,
            repair_replacements: 1,
            fault_lost_gpu_hours: 3.5,
            idle_gpu_hours: 4.0,
            right_size_saving: 12.5,
            prewarm_ready: (0, 0),
            gang_blocks: (0, 0),
            buffer_windows: (0, 0),
            p95_slowdown: Some(1.1),
            unfinished: Vec::new(),
            log: Vec::new(),
            timeseries: Vec::new(),
        }
    }

    /// A sample at `t_s` with `families` as (family, nodes).
    pub fn sample(t_s: f64, cumulative_cost: f64, families: &[(&str, u32)]) -> Sample {
        let nodes_by_family: BTreeMap<String, u32> =
            families.iter().map(|(f, n)| (f.to_string(), *n)).collect();
        let total: u32 = nodes_by_family.values().sum();
        Sample {
            t_s,
            cost_per_hour: 12.5,
            cumulative_cost,
            spot_nodes: total.saturating_sub(1),
            on_demand_nodes: total.min(1),
            nodes_by_family,
            pending_pods: (t_s / 3600.0) as u32 % 3,
            gpus_provisioned: f64::from(total) * 8.0,
            gpus_used: f64::from(total) * 6.0,
            interruptions: (t_s / 3600.0) as u32,
            lost_gpu_hours: t_s / 7200.0,
        }
    }

    /// Four strategies over three hours: on-demand spends 100, quartermaster
    /// 35, greedy 50, static 120; lower bound 25. Quartermaster has two
    /// samples with p5 and g6e nodes, greedy one with p4d, on-demand and
    /// static none. Greedy left seven jobs unfinished; quartermaster saw
    /// four pre-warm windows, three ready.
    pub fn report() -> SimReport {
        let mut qm = result(35.0);
        qm.prewarm_ready = (3, 4);
        // Out of order on purpose: the CSV sorts by time.
        qm.timeseries = vec![
            sample(3600.0, 20.0, &[("p5", 2), ("g6e", 1)]),
            sample(0.0, 0.0, &[("p5", 1)]),
        ];
        let mut greedy = result(50.0);
        greedy.timeseries = vec![sample(1800.0, 10.0, &[("p4d", 3)])];
        greedy.unfinished = (0..7)
            .map(|i| Unfinished {
                job: format!("train-{i}"),
                reason: "still running at the end".to_string(),
            })
            .collect();
        SimReport {
            scenario: "unit".to_string(),
            duration_s: 3.0 * 3600.0,
            seed: 42,
            lower_bound_cost: 25.0,
            lower_bound_unplaceable: 0,
            warnings: vec!["GPU hint \"g2\" (3 pods) maps to no GPU we know".into()],
            trace_queue: None,
            strategies: [
                ("quartermaster", qm),
                ("greedy", greedy),
                ("on-demand", result(100.0)),
                ("static", result(120.0)),
            ]
            .into_iter()
            .map(|(name, r)| (name.to_string(), r))
            .collect(),
        }
    }

    /// A fresh, empty directory under the system temp dir.
    pub fn temp_dir(name: &str) -> std::path::PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "quartermaster-report-{name}-{}-{nanos}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{report, result, temp_dir};
    use super::*;
    use crate::sim::result::Unfinished;

    const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

    #[test]
    fn orders_known_strategies_first_then_others_by_name() {
        let mut r = report();
        r.strategies.insert("aaa".into(), result(1.0));
        r.strategies.insert("zzz".into(), result(1.0));
        let names: Vec<&str> = ordered(&r).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "quartermaster",
                "greedy",
                "on-demand",
                "static",
                "aaa",
                "zzz"
            ]
        );
    }

    #[test]
    fn summary_json_has_the_required_keys_and_hand_checked_values() {
        let v = summary_json(&report());
        assert_eq!(v["scenario"], "unit");
        assert_eq!(v["duration_s"], 10800.0);
        assert_eq!(v["seed"], 42);
        assert_eq!(v["lower_bound_cost"], 25.0);
        assert_eq!(
            v["warnings"][0],
            "GPU hint \"g2\" (3 pods) maps to no GPU we know"
        );
        assert_eq!(v["trace_queue"], Value::Null);
        let qm = &v["strategies"]["quartermaster"];
        for key in [
            "total_cost",
            "gpu_hours",
            "lost_gpu_hours",
            "mean_pending_s",
            "p95_pending_s",
            "interruptions",
            "checkpoints",
            "jobs_completed",
            "jobs_total",
            "cost_per_gpu_hour",
            "gpu_utilisation",
            "ratio_to_on_demand",
            "ratio_to_lower_bound",
            "nodes_launched",
            "faults",
            "reboots",
            "repair_replacements",
            "fault_lost_gpu_hours",
            "idle_gpu_hours",
            "right_size_saving",
            "spot_notices",
            "drift_replacements",
            "expired_replacements",
            "prewarm_ready",
            "prewarm_windows",
            "gang_starts_in_one_block",
            "gang_starts_with_network_topology",
            "buffer_windows_held",
            "buffer_windows",
            "p95_slowdown",
            "unfinished",
            "unfinished_count",
        ] {
            assert!(qm.get(key).is_some(), "missing {key}");
        }
        assert_eq!(qm["total_cost"], 35.0);
        // 35 USD over 10 GPU-hours; 10 held of 20 provisioned.
        assert_eq!(qm["cost_per_gpu_hour"], 3.5);
        assert_eq!(qm["gpu_utilisation"], 0.5);
        assert_eq!(qm["ratio_to_on_demand"], 0.35);
        assert_eq!(qm["ratio_to_lower_bound"], 1.4);
        assert_eq!(qm["cost_by"]["work"], 17.5);
        assert_eq!(qm["cost_by"]["booting"], 8.75);
        assert_eq!(qm["prewarm_ready"], 3);
        assert_eq!(qm["prewarm_windows"], 4);
        assert_eq!(qm["jobs_completed"], 4);
        assert_eq!(qm["unfinished_count"], 0);
        assert_eq!(qm["p95_slowdown"], 1.1);
        assert_eq!(qm["lost_gpu_hours_by"]["rework"], 0.5);
        assert_eq!(qm["lost_gpu_hours_by"]["restarts"], 0.25);
        assert_eq!(qm["lost_gpu_hours_by"]["checkpoint_pauses"], 0.25);
        let gang = &qm["lost_gpu_hours_by_shape"]["8 GPUs, gang of 4"];
        assert_eq!(gang["jobs"], 4);
        assert_eq!(gang["lost_gpu_hours"], 1.0);
        assert_eq!(gang["lost_share"], 0.125);
        assert_eq!(gang["lost_gpu_hours_by"]["rework"], 0.5);
        assert_eq!(gang["interruptions"], 3);
        let greedy = &v["strategies"]["greedy"];
        assert_eq!(greedy["unfinished_count"], 7);
        assert_eq!(greedy["unfinished"][6]["job"], "train-6");
        assert_eq!(
            greedy["unfinished"][6]["reason"],
            "still running at the end"
        );
    }

    #[test]
    fn summary_json_caps_unfinished_at_one_hundred_but_counts_all() {
        let mut r = report();
        let greedy = r.strategies.get_mut("greedy").unwrap();
        greedy.unfinished = (0..150)
            .map(|i| crate::sim::result::Unfinished {
                job: format!("j{i}"),
                reason: "never placed".into(),
            })
            .collect();
        let v = summary_json(&r);
        assert_eq!(
            v["strategies"]["greedy"]["unfinished"]
                .as_array()
                .unwrap()
                .len(),
            100
        );
        assert_eq!(v["strategies"]["greedy"]["unfinished_count"], 150);
    }

    #[test]
    fn summary_json_has_null_ratios_without_on_demand_or_lower_bound() {
        let mut r = report();
        r.strategies.remove(ON_DEMAND);
        r.lower_bound_cost = 0.0;
        let qm = &summary_json(&r)["strategies"]["quartermaster"];
        assert!(qm["ratio_to_on_demand"].is_null());
        assert!(qm["ratio_to_lower_bound"].is_null());
    }

    #[test]
    fn timeseries_csv_has_family_columns_and_one_row_per_sample() {
        let csv = timeseries_csv(&report());
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "strategy,t_s,cost_per_hour,cumulative_cost,spot_nodes,on_demand_nodes,\
             pending_pods,gpus_provisioned,gpus_used,interruptions,lost_gpu_hours,\
             nodes_g6e,nodes_p4d,nodes_p5"
        );
        // Two quartermaster samples and one greedy; the others have none.
        assert_eq!(lines.len(), 1 + 3);
        // Sorted by strategy name (greedy before quartermaster), then time.
        assert_eq!(lines[1], "greedy,1800,12.5,10,2,1,0,24,18,0,0.25,0,3,0");
        assert_eq!(lines[2], "quartermaster,0,12.5,0,0,1,0,8,6,0,0,0,0,1");
        assert_eq!(
            lines[3],
            "quartermaster,3600,12.5,20,2,1,1,24,18,1,0.5,1,0,2"
        );
    }

    #[test]
    fn timeseries_csv_quotes_names_with_commas() {
        let mut r = report();
        let mut odd = result(1.0);
        odd.timeseries = vec![super::fixtures::sample(0.0, 0.0, &[])];
        r.strategies.insert("a,b".into(), odd);
        assert!(timeseries_csv(&r).contains("\n\"a,b\",0,"));
    }

    #[test]
    fn write_report_writes_summary_csv_and_png_charts_into_a_new_directory() {
        let dir = temp_dir("write").join("nested");
        let paths = write_report(&report(), &dir).unwrap();
        let names: Vec<String> = paths
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "summary.json",
                "timeseries.csv",
                "unfinished.csv",
                "cost.png",
                "nodes.png",
                "pending.png",
                "interruptions.png"
            ]
        );
        for path in &paths {
            let bytes = std::fs::read(path).unwrap();
            assert!(!bytes.is_empty(), "{} is empty", path.display());
            if path.extension().is_some_and(|e| e == "png") {
                assert_eq!(bytes[..8], PNG_SIGNATURE, "{}", path.display());
            }
        }
        let summary: Value = serde_json::from_slice(&std::fs::read(&paths[0]).unwrap()).unwrap();
        assert_eq!(summary, summary_json(&report()));
        // Every unfinished job, past the JSON's hundred too.
        let unfinished = std::fs::read_to_string(&paths[2]).unwrap();
        let rows: usize = report()
            .strategies
            .values()
            .map(|r| r.unfinished.len())
            .sum();
        assert!(rows > 0);
        assert_eq!(unfinished.lines().count(), rows + 1, "{unfinished}");
        assert!(unfinished.starts_with("strategy,job,reason\n"));
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    #[test]
    fn unfinished_csv_lists_every_job_beyond_the_jsons_hundred_and_quotes_commas() {
        let mut r = report();
        let many = r.strategies.get_mut("greedy").unwrap();
        many.unfinished = (0..150)
            .map(|i| Unfinished {
                job: format!("train/j-{i}"),
                reason: "waiting for capacity, 3 pools closed".into(),
            })
            .collect();
        let csv = unfinished_csv(&r);
        assert_eq!(
            csv.lines().filter(|l| l.starts_with("greedy,")).count(),
            150
        );
        assert!(csv.contains("greedy,train/j-149,\"waiting for capacity, 3 pools closed\""));
        assert_eq!(
            summary_json(&r)["strategies"]["greedy"]["unfinished"]
                .as_array()
                .unwrap()
                .len(),
            100
        );
    }

    #[test]
    fn write_report_names_the_directory_it_could_not_create() {
        let base = temp_dir("blocked");
        std::fs::create_dir_all(&base).unwrap();
        let file = base.join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let err = write_report(&report(), &file.join("sub")).unwrap_err();
        assert!(matches!(err, Error::CreateDir { .. }), "{err:?}");
        assert!(err.to_string().contains("a-file"), "{err}");
        let _ = std::fs::remove_dir_all(base);
    }
}
