//! The terminal table: one row per strategy, then the lower bound, unfinished
//! jobs and pre-warm readiness.

use super::{ordered, ratio_to_lower_bound, ratio_to_on_demand};
use crate::sim::result::{CostBy, ShapeLoss, SimReport, StrategyResult};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// How many unfinished jobs the table shows per strategy.
const UNFINISHED_EXAMPLES: usize = 5;

/// Column headers; the first column is left-aligned, the rest right-aligned.
const HEADERS: [&str; 13] = [
    "strategy",
    "cost",
    "$/GPU-h",
    "vs on-demand",
    "vs bound",
    "GPU util",
    "pending mean",
    "pending p95",
    "interrupts",
    "checkpoints",
    "GPU-h lost",
    "slowdown p95",
    "jobs done",
];

/// A readable table of `report` for a terminal: a title line, one row per
/// strategy (quartermaster, greedy, on-demand, static, then others) with
/// cost, USD per GPU-hour, ratios to `on-demand` and to the lower bound, GPU
/// utilisation, mean and p95 pending time, interruptions, checkpoints,
/// GPU-hours lost (and their share of GPU-hours held), the p95 slowdown
/// against on-demand (`result::StrategyResult::p95_slowdown`) and jobs
/// finished; then
/// the lower bound, up to five unfinished jobs per strategy with a count, and
/// pre-warm readiness where a strategy saw windows. `-` marks a value that is
/// undefined (no on-demand run, nothing provisioned).
pub fn table(report: &SimReport) -> String {
    let mut rows: Vec<Vec<String>> = vec![HEADERS.iter().map(|h| h.to_string()).collect()];
    rows.extend(
        ordered(report)
            .into_iter()
            .map(|(name, r)| row(report, name, r)),
    );

    let mut out = String::new();
    // Writing to a String cannot fail: the results of write! are ignored.
    let _ = writeln!(
        out,
        "scenario {} (seed {}, {} simulated)",
        report.scenario,
        report.seed,
        duration(report.duration_s)
    );
    for w in &report.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out.push_str(&columns(&rows));
    let _ = writeln!(
        out,
        "\nlower bound: {} (each job on the cheapest share of a node its pools allow, \
         from submission, no interruptions, no idle capacity{})",
        usd(report.lower_bound_cost),
        match report.lower_bound_unplaceable {
            0 => String::new(),
            n => format!("; {n} jobs no pool can place left out"),
        }
    );
    if let Some(q) = &report.trace_queue {
        let _ = writeln!(
            out,
            "trace queue time in the original cluster: mean {}, p95 {} over {} pods \
             (beside the pending columns above)",
            duration(q.mean_s),
            duration(q.p95_s),
            q.pods
        );
    }
    health(&mut out, report);
    bill(&mut out, report);
    lost_by_shape(&mut out, report);
    unfinished(&mut out, report);
    prewarm(&mut out, report);
    drift(&mut out, report);
    out
}

/// Per strategy, node faults and what repair did about them, GPU-hours lost
/// to faults, idle GPU-hours and what right sizes would save; the fault
/// columns only when a strategy saw a fault.
fn health(out: &mut String, report: &SimReport) {
    let strategies = ordered(report);
    let faults = strategies.iter().any(|(_, r)| r.faults > 0);
    let mut header = vec!["strategy"];
    if faults {
        header.extend(["faults", "reboots", "replaced", "GPU-h lost to faults"]);
    }
    header.extend(["idle GPU-h", "right-sizing saves"]);
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for (name, r) in strategies {
        let mut row = vec![name.to_string()];
        if faults {
            row.extend([
                r.faults.to_string(),
                r.reboots.to_string(),
                r.repair_replacements.to_string(),
                format!("{:.1}", r.fault_lost_gpu_hours),
            ]);
        }
        row.extend([format!("{:.1}", r.idle_gpu_hours), usd(r.right_size_saving)]);
        rows.push(row);
    }
    let _ = writeln!(
        out,
        "
GPU health and use (docs/simulated-cloud.md):"
    );
    out.push_str(&columns(&rows));
}

/// The cells of one strategy's row, in [`HEADERS`] order.
fn row(report: &SimReport, name: &str, r: &StrategyResult) -> Vec<String> {
    let lost = if r.gpu_hours > 0.0 {
        format!(
            "{:.1} ({:.1}%)",
            r.lost_gpu_hours,
            100.0 * r.lost_gpu_hours / r.gpu_hours
        )
    } else {
        format!("{:.1}", r.lost_gpu_hours)
    };
    vec![
        name.to_string(),
        usd(r.total_cost),
        opt(r.cost_per_gpu_hour(), usd),
        opt(ratio_to_on_demand(report, r), ratio),
        opt(ratio_to_lower_bound(report, r), ratio),
        opt(r.gpu_utilisation(), |u| format!("{:.1}%", 100.0 * u)),
        duration(r.mean_pending_s),
        duration(r.p95_pending_s),
        r.interruptions.to_string(),
        r.checkpoints.to_string(),
        lost,
        opt(r.p95_slowdown, |x| format!("{x:.2}")),
        format!("{}/{}", r.jobs_completed, r.jobs_total),
    ]
}

/// Per strategy, what its bill paid for (`CostBy`), each part with its
/// share of the bill; parts under a cent are left out. `work` is what the
/// lower bound prices, so the other parts and `work` above the bound are
/// the gap.
fn bill(out: &mut String, report: &SimReport) {
    let bills: Vec<_> = ordered(report)
        .into_iter()
        .map(|(name, r)| (name, &r.cost_by))
        .collect();
    bill_lines(out, "", &bills);
}

/// The lines of [`bill`] for each strategy's parts in `bills` (in that
/// order), under a heading that says `over` after "where the bill went";
/// nothing without strategies. `simulate --seeds` uses it for the means
/// over seeds.
pub(crate) fn bill_lines(out: &mut String, over: &str, bills: &[(&str, &CostBy)]) {
    if bills.is_empty() {
        return;
    }
    let width = bills.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "\nwhere the bill went{over} (work is kept work at spot prices, what the bound prices at the cheapest shares):"
    );
    for (name, by) in bills {
        let total = by.total();
        let shown: Vec<String> = by
            .parts()
            .iter()
            .filter(|(part, x)| *part == "work" || *x >= 0.005)
            .map(|(part, x)| {
                let share = if total > 0.0 {
                    format!(" ({:.0}%)", 100.0 * x / total)
                } else {
                    String::new()
                };
                format!("{part} {}{share}", usd(*x))
            })
            .collect();
        let _ = writeln!(out, "  {name:<width$}  {}", shown.join(", "));
    }
}

/// How many job shapes the table names per strategy that lost work.
const SHAPES_SHOWN: usize = 3;

/// Per strategy that lost work: the job shapes that lost the most, each
/// with its lost GPU-hours and their share of the shape's work (the JSON's
/// `lost_gpu_hours_by_shape` has them all).
fn lost_by_shape(out: &mut String, report: &SimReport) {
    let shapes: Vec<_> = ordered(report)
        .into_iter()
        .map(|(name, r)| (name, &r.lost_by_shape))
        .collect();
    shape_lines(out, "", &shapes);
}

/// The lines of [`lost_by_shape`] for each strategy's shapes in `results`
/// (in that order), under a heading that says `over` after "GPU-hours lost
/// by job shape"; nothing when none lost work. `simulate --seeds` uses it
/// for sums over seeds.
pub(crate) fn shape_lines(
    out: &mut String,
    over: &str,
    results: &[(&str, &BTreeMap<String, ShapeLoss>)],
) {
    let mut lines = Vec::new();
    for (name, by_shape) in results {
        let mut shapes: Vec<_> = by_shape
            .iter()
            .filter(|(_, s)| s.lost_gpu_hours >= 0.05)
            .collect();
        if shapes.is_empty() {
            continue;
        }
        shapes.sort_by(|a, b| b.1.lost_gpu_hours.total_cmp(&a.1.lost_gpu_hours));
        let parts: Vec<String> = shapes
            .iter()
            .take(SHAPES_SHOWN)
            .map(|(shape, s)| {
                let share = s
                    .lost_share()
                    .map_or(String::new(), |x| format!(" ({:.1}%)", 100.0 * x));
                format!("{shape}: {:.1}{share}", s.lost_gpu_hours)
            })
            .collect();
        lines.push((*name, parts.join("; ")));
    }
    let width = lines.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    if !lines.is_empty() {
        let _ = writeln!(
            out,
            "\nGPU-hours lost by job shape{over} (share of that shape's work), the {SHAPES_SHOWN} largest:"
        );
        for (name, shapes) in lines {
            let _ = writeln!(out, "  {name:<width$}  {shapes}");
        }
    }
}

/// Per strategy with unfinished jobs: a count and up to five examples.
fn unfinished(out: &mut String, report: &SimReport) {
    for (name, r) in ordered(report) {
        if r.unfinished.is_empty() {
            continue;
        }
        let n = r.unfinished.len();
        let _ = writeln!(
            out,
            "\n{name}: {n} unfinished job{}",
            if n == 1 { "" } else { "s" }
        );
        for u in r.unfinished.iter().take(UNFINISHED_EXAMPLES) {
            let _ = writeln!(out, "  {}: {}", u.job, u.reason);
        }
        if n > UNFINISHED_EXAMPLES {
            let _ = writeln!(out, "  ... and {} more", n - UNFINISHED_EXAMPLES);
        }
    }
}

/// Pre-warm windows whose capacity was Ready at window start, and gang
/// starts in one network block, per strategy that saw any.
fn prewarm(out: &mut String, report: &SimReport) {
    fraction(out, report, "pre-warm windows ready at start:", |r| {
        r.prewarm_ready
    });
    fraction(
        out,
        report,
        "gang starts in one network block (of those on nodes with a network topology):",
        |r| r.gang_blocks,
    );
    fraction(out, report, "buffer windows held whole while open:", |r| {
        r.buffer_windows
    });
}

/// A section of `part/whole` per strategy whose `whole` is not 0.
fn fraction(
    out: &mut String,
    report: &SimReport,
    title: &str,
    get: impl Fn(&StrategyResult) -> (u32, u32),
) {
    let seen: Vec<_> = ordered(report)
        .into_iter()
        .filter(|(_, r)| get(r).1 > 0)
        .collect();
    if seen.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{title}");
    let width = seen.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, r) in seen {
        let (part, whole) = get(r);
        let _ = writeln!(out, "  {name:<width$}  {part}/{whole}");
    }
}

/// The drifted nodes each strategy replaced, when a scenario released new
/// images, and the nodes it replaced for outliving `expireAfter` (the
/// replacements' cost is in the cost column).
fn drift(out: &mut String, report: &SimReport) {
    replacements(out, report, "drifted nodes replaced (new images):", |r| {
        r.drift_replacements
    });
    replacements(out, report, "expired nodes replaced (expireAfter):", |r| {
        r.expired_replacements
    });
}

/// One line per strategy with `count` above 0 under `title`, nothing when
/// none has any.
fn replacements(
    out: &mut String,
    report: &SimReport,
    title: &str,
    count: impl Fn(&crate::sim::result::StrategyResult) -> u32,
) {
    let seen: Vec<_> = ordered(report)
        .into_iter()
        .filter(|(_, r)| count(r) > 0)
        .collect();
    if seen.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n{title}");
    let width = seen.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, r) in seen {
        let _ = writeln!(out, "  {name:<width$}  {}", count(r));
    }
}

fn opt(value: Option<f64>, render: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "-".to_string(), render)
}

/// `$1,234.56`: two decimals, thousands separated.
pub(crate) fn usd(x: f64) -> String {
    let cents = format!("{:.2}", x.abs());
    let (whole, frac) = cents.split_once('.').unwrap_or((&cents, "00"));
    let mut grouped = String::new();
    for (i, c) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let sign = if x < 0.0 && cents != "0.00" { "-" } else { "" };
    format!("{sign}${grouped}.{frac}")
}

fn ratio(x: f64) -> String {
    format!("{x:.2}")
}

/// Seconds in the largest unit that keeps the number readable: `45s`,
/// `2.5m`, `3.0h`, `2.1d`.
fn duration(s: f64) -> String {
    if !s.is_finite() {
        return "-".to_string();
    }
    if s < 60.0 {
        format!("{s:.0}s")
    } else if s < 3600.0 {
        format!("{:.1}m", s / 60.0)
    } else if s < 2.0 * 86_400.0 {
        format!("{:.1}h", s / 3600.0)
    } else {
        format!("{:.1}d", s / 86_400.0)
    }
}

/// Rows laid out in columns: the first left-aligned, the others
/// right-aligned, two spaces apart, with a rule under the first row (the
/// header).
pub(crate) fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, &w))| {
                if c == 0 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
            let _ = writeln!(out, "{}", rule.join("  "));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{report, result};
    use super::*;

    /// The table's row for `strategy`, split on runs of two or more spaces.
    fn cells(table: &str, strategy: &str) -> Vec<String> {
        let line = table
            .lines()
            .find(|l| l.split("  ").next() == Some(strategy))
            .unwrap_or_else(|| panic!("no row for {strategy} in\n{table}"));
        line.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn table_shows_cost_ratio_to_on_demand_and_to_the_lower_bound() {
        let t = table(&report());
        // quartermaster 35 against on-demand 100 and a bound of 25.
        let qm = cells(&t, "quartermaster");
        assert_eq!(qm[1], "$35.00");
        assert_eq!(qm[2], "$3.50", "35 USD over 10 GPU-hours");
        assert_eq!(qm[3], "0.35");
        assert_eq!(qm[4], "1.40");
        assert_eq!(cells(&t, "on-demand")[3], "1.00");
        assert_eq!(cells(&t, "static")[3], "1.20");
    }

    #[test]
    fn table_shows_utilisation_pending_times_losses_and_jobs_in_human_units() {
        let qm = cells(&table(&report()), "quartermaster");
        assert_eq!(
            qm[5..],
            [
                "50.0%",
                "1.5m",
                "2.0h",
                "3",
                "7",
                "1.0 (10.0%)",
                "1.10",
                "4/5"
            ]
        );
    }

    #[test]
    fn table_lists_strategies_in_fixed_order_and_ends_with_the_lower_bound() {
        let t = table(&report());
        let pos = |s: &str| t.find(&format!("\n{s} ")).unwrap();
        assert!(pos("quartermaster") < pos("greedy"));
        assert!(pos("greedy") < pos("on-demand"));
        assert!(pos("on-demand") < pos("static"));
        assert!(t.contains("lower bound: $25.00"), "{t}");
    }

    #[test]
    fn table_says_where_each_strategys_bill_went_leaving_out_parts_under_a_cent() {
        let mut r = report();
        r.strategies.get_mut("greedy").unwrap().cost_by.lost_work = 0.004;
        let t = table(&r);
        let head = t.find("where the bill went").expect("a bill section");
        let line = t[head..]
            .lines()
            .find(|l| l.trim_start().starts_with("quartermaster"))
            .unwrap();
        assert!(
            line.ends_with("work $17.50 (50%), idle $8.75 (25%), booting $8.75 (25%)"),
            "{line}"
        );
        let greedy = t[head..]
            .lines()
            .find(|l| l.trim_start().starts_with("greedy"))
            .unwrap();
        assert!(!greedy.contains("lost work"), "{greedy}");
    }

    #[test]
    fn table_shows_the_trace_queue_time_beside_ours() {
        let mut r = report();
        assert!(!table(&r).contains("trace queue"));
        r.trace_queue = crate::sim::trace_window::QueueTime::of(&[60.0, 120.0, 7200.0]);
        let t = table(&r);
        assert!(
            t.contains(
                "trace queue time in the original cluster: mean 41.0m, p95 2.0h over 3 pods"
            ),
            "{t}"
        );
    }

    #[test]
    fn table_opens_with_the_warnings_of_loading() {
        let t = table(&report());
        let second = t.lines().nth(1).unwrap();
        assert_eq!(
            second,
            "warning: GPU hint \"g2\" (3 pods) maps to no GPU we know"
        );
    }

    #[test]
    fn table_names_the_job_shapes_that_lost_the_most_work_for_strategies_that_lost_any() {
        let mut r = report();
        let t = table(&r);
        assert!(
            t.contains("\n  quartermaster  8 GPUs, gang of 4: 1.0 (12.5%)\n"),
            "{t}"
        );
        let od = r.strategies.get_mut("on-demand").unwrap();
        od.lost_by_shape.clear();
        let qm = r.strategies.get_mut("quartermaster").unwrap();
        for (i, lost) in [0.5, 3.0, 2.0, 0.0].into_iter().enumerate() {
            let shape = crate::sim::result::ShapeLoss {
                jobs: 1,
                work_gpu_hours: 10.0,
                lost_gpu_hours: lost,
                ..Default::default()
            };
            qm.lost_by_shape.insert(
                crate::sim::result::shape_name(f64::from(i as u8 + 1), 1),
                shape,
            );
        }
        let t = table(&r);
        assert!(
            t.contains("\n  quartermaster  2 GPUs: 3.0 (30.0%); 3 GPUs: 2.0 (20.0%); 8 GPUs, gang of 4: 1.0 (12.5%)\n"),
            "the three largest, largest first: {t}"
        );
        let shapes = &t[t.find("GPU-hours lost by job shape").unwrap()..];
        assert!(
            !shapes.contains("  on-demand  "),
            "on-demand lost nothing: {t}"
        );
        assert!(
            t.contains("\n  greedy         8 GPUs, gang of 4: 1.0"),
            "names padded to the longest: {t}"
        );
    }

    #[test]
    fn table_shows_five_unfinished_examples_and_the_count() {
        let t = table(&report());
        assert!(t.contains("greedy: 7 unfinished jobs"), "{t}");
        assert!(t.contains("  train-4: still running at the end"), "{t}");
        assert!(!t.contains("train-5"), "{t}");
        assert!(t.contains("... and 2 more"), "{t}");
        assert!(!t.contains("quartermaster: "), "{t}");
    }

    #[test]
    fn table_shows_prewarm_readiness_only_for_strategies_with_windows() {
        let t = table(&report());
        let section = t.split("pre-warm windows ready at start:").nth(1).unwrap();
        assert_eq!(section.trim(), "quartermaster  3/4");
    }

    #[test]
    fn table_shows_gang_starts_in_one_block_only_for_strategies_that_saw_topology() {
        let mut r = report();
        let title = "gang starts in one network block";
        assert!(!table(&r).contains(title));
        r.strategies.get_mut("greedy").unwrap().gang_blocks = (1, 3);
        let t = table(&r);
        let section = t.split(title).nth(1).unwrap();
        assert!(section.contains("greedy  1/3"), "{section}");
        assert!(!section.contains("quartermaster"), "{section}");
    }

    #[test]
    fn table_shows_drift_replacements_only_for_strategies_that_had_some() {
        let mut r = report();
        assert!(!table(&r).contains("drifted nodes"));
        r.strategies.get_mut("greedy").unwrap().drift_replacements = 4;
        let t = table(&r);
        let section = t
            .split("drifted nodes replaced (new images):")
            .nth(1)
            .unwrap();
        assert_eq!(section.trim(), "greedy  4");
        assert!(!t.contains("expired nodes"));
        r.strategies
            .get_mut("quartermaster")
            .unwrap()
            .expired_replacements = 2;
        let t = table(&r);
        let section = t
            .split("expired nodes replaced (expireAfter):")
            .nth(1)
            .unwrap();
        assert_eq!(section.trim(), "quartermaster  2");
    }

    #[test]
    fn table_shows_faults_repairs_idle_gpu_hours_and_the_right_sizing_saving() {
        let mut r = report();
        let health = |r: &SimReport| {
            table(r)
                .split("GPU health and use")
                .nth(1)
                .unwrap()
                .to_string()
        };
        let line = health(&r);
        let row = line
            .lines()
            .find(|l| l.starts_with("quartermaster"))
            .unwrap();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells[1..],
            ["2", "2", "1", "3.5", "4.0", "$12.50"],
            "{line}"
        );
        for s in r.strategies.values_mut() {
            s.faults = 0;
        }
        let line = health(&r);
        assert!(!line.contains("faults"), "{line}");
        assert!(line.contains("idle GPU-h"), "{line}");
    }

    #[test]
    fn table_marks_ratios_as_undefined_without_on_demand_or_bound() {
        let mut r = report();
        r.strategies.remove("on-demand");
        r.lower_bound_cost = 0.0;
        r.strategies.insert("idle".into(), {
            let mut idle = result(0.0);
            idle.gpu_hours = 0.0;
            idle.provisioned_gpu_hours = 0.0;
            idle
        });
        let t = table(&r);
        assert_eq!(cells(&t, "quartermaster")[3..5], ["-", "-"]);
        let idle = cells(&t, "idle");
        assert_eq!(idle[2], "-", "no GPU-hours, no cost per GPU-hour");
        assert_eq!(idle[5], "-", "nothing provisioned, no utilisation");
        assert_eq!(idle[10], "1.0");
    }

    #[test]
    fn usd_groups_thousands_and_durations_pick_readable_units() {
        assert_eq!(usd(1_234_567.891), "$1,234,567.89");
        assert_eq!(usd(999.999), "$1,000.00");
        assert_eq!(usd(-12.5), "-$12.50");
        assert_eq!(usd(0.0), "$0.00");
        assert_eq!(duration(0.0), "0s");
        assert_eq!(duration(59.4), "59s");
        assert_eq!(duration(90.0), "1.5m");
        assert_eq!(duration(5400.0), "1.5h");
        assert_eq!(duration(7.0 * 86_400.0), "7.0d");
    }
}
