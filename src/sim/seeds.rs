//! One scenario over several seeds. A seed draws the workload and the spot
//! market's reclaims, and on the calibrated market strategies trade places
//! from one draw to the next: a single week can make any of them look best.
//! What a comparison can claim is the spread over seeds and how often one
//! strategy beats another, which this module computes from the per-seed
//! [`SimReport`]s and renders as a table and JSON.

use super::report::{ordered, ratio_to_on_demand};
use super::result::{CostBy, ShapeLoss, SimReport, StrategyResult};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Mean, least and greatest of one measure over the seeds where it is
/// defined.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Arithmetic mean.
    pub mean: f64,
    /// Least value.
    pub min: f64,
    /// Greatest value.
    pub max: f64,
    /// Seeds where the measure was defined.
    pub n: usize,
}

impl Spread {
    /// The spread of `values`; `None` when there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        Some(Spread {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            n: v.len(),
        })
    }

    /// `{mean, min, max, seeds}`, or `null` for no spread.
    pub fn json(this: Option<Spread>) -> Value {
        match this {
            Some(s) => json!({ "mean": s.mean, "min": s.min, "max": s.max, "seeds": s.n }),
            None => Value::Null,
        }
    }
}

/// A measure of one strategy's run in one seed's report.
pub type Measure = fn(&SimReport, &StrategyResult) -> Option<f64>;

/// Total cost in dollars.
pub fn cost(_: &SimReport, r: &StrategyResult) -> Option<f64> {
    Some(r.total_cost)
}

/// Cost over the on-demand strategy's in the same seed.
pub fn vs_on_demand(report: &SimReport, r: &StrategyResult) -> Option<f64> {
    ratio_to_on_demand(report, r)
}

/// GPU-hours lost to interruptions and restarts.
pub fn lost_gpu_hours(_: &SimReport, r: &StrategyResult) -> Option<f64> {
    Some(r.lost_gpu_hours)
}

/// Lost GPU-hours as a share of the GPU-hours held by jobs.
pub fn lost_share(_: &SimReport, r: &StrategyResult) -> Option<f64> {
    (r.gpu_hours > 0.0).then(|| r.lost_gpu_hours / r.gpu_hours)
}

/// Interruptions (jobs stopped by a reclaim or an eviction).
pub fn interruptions(_: &SimReport, r: &StrategyResult) -> Option<f64> {
    Some(f64::from(r.interruptions))
}

/// The 95th percentile of the jobs' slowdown (`p95_slowdown`).
pub fn p95_slowdown(_: &SimReport, r: &StrategyResult) -> Option<f64> {
    r.p95_slowdown
}

/// Share of the jobs that finished.
pub fn jobs_done(_: &SimReport, r: &StrategyResult) -> Option<f64> {
    (r.jobs_total > 0).then(|| f64::from(r.jobs_completed) / f64::from(r.jobs_total))
}

/// GPU-hours lost to node faults (`StrategyResult::fault_lost_gpu_hours`).
pub fn fault_lost_gpu_hours(_: &SimReport, r: &StrategyResult) -> Option<f64> {
    Some(r.fault_lost_gpu_hours)
}

/// Idle GPU-hours (`StrategyResult::idle_gpu_hours`).
pub fn idle_gpu_hours(_: &SimReport, r: &StrategyResult) -> Option<f64> {
    Some(r.idle_gpu_hours)
}

/// What right sizes would save, USD (`StrategyResult::right_size_saving`).
pub fn right_size_saving(_: &SimReport, r: &StrategyResult) -> Option<f64> {
    Some(r.right_size_saving)
}

/// The measures the table and the JSON show, by JSON key.
pub const MEASURES: [(&str, Measure); 10] = [
    ("total_cost", cost),
    ("ratio_to_on_demand", vs_on_demand),
    ("lost_gpu_hours", lost_gpu_hours),
    ("lost_share", lost_share),
    ("interruptions", interruptions),
    ("p95_slowdown", p95_slowdown),
    ("jobs_done_share", jobs_done),
    ("fault_lost_gpu_hours", fault_lost_gpu_hours),
    ("idle_gpu_hours", idle_gpu_hours),
    ("right_size_saving", right_size_saving),
];

/// The runs of one scenario, one report per seed (same strategies in each).
#[derive(Debug, Clone, Default)]
pub struct SeedsReport {
    /// One report per seed, in the order the seeds were given.
    pub runs: Vec<SimReport>,
}

impl SeedsReport {
    /// The seeds, in order.
    pub fn seeds(&self) -> Vec<u64> {
        self.runs.iter().map(|r| r.seed).collect()
    }

    /// The strategies of the first run, in presentation order.
    pub fn strategies(&self) -> Vec<String> {
        self.runs
            .first()
            .map(|r| ordered(r).into_iter().map(|(n, _)| n.to_string()).collect())
            .unwrap_or_default()
    }

    /// `measure` of `strategy` over the seeds.
    pub fn spread(&self, strategy: &str, measure: Measure) -> Option<Spread> {
        Spread::of(
            self.runs
                .iter()
                .filter_map(|rep| rep.strategies.get(strategy).and_then(|r| measure(rep, r))),
        )
    }

    /// `strategy`'s lost work by job shape summed over the seeds: a shape's
    /// share of its work over every seed, which one week's few gangs make
    /// noisy.
    pub fn pooled_by_shape(&self, strategy: &str) -> BTreeMap<String, ShapeLoss> {
        let mut pooled: BTreeMap<String, ShapeLoss> = BTreeMap::new();
        for r in self.runs.iter().filter_map(|r| r.strategies.get(strategy)) {
            for (shape, s) in &r.lost_by_shape {
                pooled.entry(shape.clone()).or_default().add(s);
            }
        }
        pooled
    }

    /// `strategy`'s bill by part (`CostBy`), the mean over the seeds it ran
    /// in; `None` if it ran in none.
    pub fn mean_cost_by(&self, strategy: &str) -> Option<CostBy> {
        let bills: Vec<&CostBy> = self
            .runs
            .iter()
            .filter_map(|r| r.strategies.get(strategy))
            .map(|r| &r.cost_by)
            .collect();
        let mut mean = CostBy::default();
        for b in &bills {
            mean.add_scaled(b, 1.0 / bills.len() as f64);
        }
        (!bills.is_empty()).then_some(mean)
    }

    /// In how many seeds `a`'s `measure` is at most `b`'s, out of the seeds
    /// where both are defined.
    pub fn at_most(&self, a: &str, b: &str, measure: Measure) -> (usize, usize) {
        let pairs: Vec<(f64, f64)> = self
            .runs
            .iter()
            .filter_map(|rep| {
                let x = measure(rep, rep.strategies.get(a)?)?;
                let y = measure(rep, rep.strategies.get(b)?)?;
                Some((x, y))
            })
            .collect();
        (pairs.iter().filter(|(x, y)| x <= y).count(), pairs.len())
    }
}

/// The comparisons the table and JSON make: quartermaster against each
/// other strategy on cost, and on lost GPU-hours against those that lost
/// some.
fn comparisons(report: &SeedsReport) -> Vec<(String, &'static str, (usize, usize))> {
    let names = report.strategies();
    let mut out = Vec::new();
    if !names.iter().any(|n| n == "quartermaster") {
        return out;
    }
    for other in names.iter().filter(|n| *n != "quartermaster") {
        out.push((
            other.clone(),
            "total_cost",
            report.at_most("quartermaster", other, cost),
        ));
        // Against a strategy that never loses work (on-demand, static) the
        // count says nothing.
        if report
            .spread(other, lost_gpu_hours)
            .is_some_and(|s| s.max > 0.0)
        {
            out.push((
                other.clone(),
                "lost_gpu_hours",
                report.at_most("quartermaster", other, lost_gpu_hours),
            ));
        }
    }
    out
}

/// The terminal table: per strategy the mean and range of each measure,
/// then in how many seeds quartermaster was no dearer and lost no more
/// work than each other strategy.
pub fn table(report: &SeedsReport) -> String {
    let mut out = String::new();
    let seeds = report.seeds();
    let first = report.runs.first();
    let _ = writeln!(
        out,
        "scenario {} over {} seeds ({}), {:.1}d simulated each: mean [min - max]",
        first.map_or("", |r| r.scenario.as_str()),
        seeds.len(),
        seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(","),
        first.map_or(0.0, |r| r.duration_s / 86_400.0),
    );
    // The warnings of loading, each once (most are the same for every seed).
    let warnings: std::collections::BTreeSet<&String> =
        report.runs.iter().flat_map(|r| &r.warnings).collect();
    for w in warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    let cell = |s: Option<Spread>, f: &dyn Fn(f64) -> String| match s {
        Some(s) => format!("{} [{} - {}]", f(s.mean), f(s.min), f(s.max)),
        None => "-".into(),
    };
    let money = |x: f64| format!("${x:.0}");
    let ratio = |x: f64| format!("{x:.2}");
    let pct = |x: f64| format!("{:.1}%", x * 100.0);
    let count = |x: f64| format!("{x:.0}");
    let header = [
        "strategy",
        "cost",
        "vs on-demand",
        "GPU-h lost",
        "lost share",
        "interrupts",
        "slowdown p95",
        "jobs done",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for name in report.strategies() {
        let s = |m: Measure| report.spread(&name, m);
        rows.push(vec![
            name.clone(),
            cell(s(cost), &money),
            cell(s(vs_on_demand), &ratio),
            cell(s(lost_gpu_hours), &count),
            cell(s(lost_share), &pct),
            cell(s(interruptions), &count),
            cell(s(p95_slowdown), &ratio),
            cell(s(jobs_done), &pct),
        ]);
    }
    out.push_str(&super::report::columns(&rows));
    let mut rows: Vec<Vec<String>> = vec![[
        "strategy",
        "GPU-h lost to faults",
        "idle GPU-h",
        "right-sizing saves",
    ]
    .iter()
    .map(|h| h.to_string())
    .collect()];
    for name in report.strategies() {
        let s = |m: Measure| report.spread(&name, m);
        rows.push(vec![
            name.clone(),
            cell(s(fault_lost_gpu_hours), &count),
            cell(s(idle_gpu_hours), &count),
            cell(s(right_size_saving), &money),
        ]);
    }
    let _ = writeln!(out, "\nGPU health and use:");
    out.push_str(&super::report::columns(&rows));
    let comparisons = comparisons(report);
    if !comparisons.is_empty() {
        let _ = writeln!(out);
    }
    for (other, key, (wins, n)) in comparisons {
        let what = if key == "total_cost" {
            "no dearer than"
        } else {
            "lost no more work than"
        };
        let _ = writeln!(out, "quartermaster {what} {other} in {wins} of {n} seeds");
    }
    let pooled: Vec<(String, BTreeMap<String, ShapeLoss>)> = report
        .strategies()
        .into_iter()
        .map(|name| {
            let shapes = report.pooled_by_shape(&name);
            (name, shapes)
        })
        .collect();
    let pooled: Vec<(&str, &BTreeMap<String, ShapeLoss>)> =
        pooled.iter().map(|(n, s)| (n.as_str(), s)).collect();
    super::report::shape_lines(&mut out, ", summed over the seeds", &pooled);
    let bills: Vec<(String, CostBy)> = report
        .strategies()
        .into_iter()
        .filter_map(|name| {
            let by = report.mean_cost_by(&name)?;
            Some((name, by))
        })
        .collect();
    let bills: Vec<(&str, &CostBy)> = bills.iter().map(|(n, b)| (n.as_str(), b)).collect();
    super::report::bill_lines(&mut out, ", the mean over the seeds", &bills);
    out
}

/// The machine-readable form: the seeds, per strategy and measure its
/// spread (`null` where undefined in every seed), the pairwise counts, and
/// each seed's own summary (the keys of `simulate --output json`).
pub fn summary_json(report: &SeedsReport) -> Value {
    let strategies: serde_json::Map<String, Value> = report
        .strategies()
        .into_iter()
        .map(|name| {
            let mut measures: serde_json::Map<String, Value> = MEASURES
                .iter()
                .map(|(key, m)| (key.to_string(), Spread::json(report.spread(&name, *m))))
                .collect();
            let pooled = super::report::by_shape(&report.pooled_by_shape(&name));
            measures.insert("lost_gpu_hours_by_shape".to_string(), pooled);
            measures.insert("cost_by".to_string(), json!(report.mean_cost_by(&name)));
            (name, Value::Object(measures))
        })
        .collect();
    let comparisons: Vec<Value> = comparisons(report)
        .into_iter()
        .map(|(other, key, (wins, n))| {
            json!({ "against": other, "measure": key, "quartermaster_at_most": wins, "seeds": n })
        })
        .collect();
    json!({
        "scenario": report.runs.first().map(|r| r.scenario.clone()),
        "seeds": report.seeds(),
        "strategies": strategies,
        "comparisons": comparisons,
        "per_seed": report.runs.iter().map(super::report::summary_json).collect::<Vec<_>>(),
    })
}

/// Hand-made reports for tests of what is built on seeds.
#[cfg(test)]
pub(crate) mod fixtures {
    use crate::sim::result::{SimReport, StrategyResult};

    /// One seed's report over a day with each `(strategy, cost, lost
    /// GPU-hours)` of 100 GPU-hours held, 3 of 4 jobs done.
    pub fn run(seed: u64, costs: &[(&str, f64, f64)]) -> SimReport {
        let mut r = SimReport {
            scenario: "s".into(),
            duration_s: 86_400.0,
            seed,
            ..Default::default()
        };
        for (name, cost, lost) in costs {
            r.strategies.insert(
                name.to_string(),
                StrategyResult {
                    total_cost: *cost,
                    lost_gpu_hours: *lost,
                    gpu_hours: 100.0,
                    jobs_total: 4,
                    jobs_completed: 3,
                    ..Default::default()
                },
            );
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::run;
    use super::*;

    #[test]
    fn the_bill_by_part_is_the_mean_over_the_seeds_in_table_and_json() {
        let mut report = two_seeds();
        for (run, (work, idle)) in report.runs.iter_mut().zip([(10.0, 2.0), (30.0, 6.0)]) {
            let qm = run.strategies.get_mut("quartermaster").unwrap();
            qm.cost_by = CostBy {
                work,
                idle,
                ..CostBy::default()
            };
        }
        let mean = report.mean_cost_by("quartermaster").unwrap();
        assert_eq!((mean.work, mean.idle), (20.0, 4.0));
        assert!(report.mean_cost_by("nobody").is_none());
        let t = table(&report);
        assert!(
            t.contains("where the bill went, the mean over the seeds"),
            "{t}"
        );
        assert!(
            t.contains("quartermaster  work $20.00 (83%), idle $4.00 (17%)"),
            "{t}"
        );
        let j = summary_json(&report);
        assert_eq!(j["strategies"]["quartermaster"]["cost_by"]["idle"], 4.0);
    }

    #[test]
    fn lost_work_by_shape_is_summed_over_the_seeds_and_its_share_taken_of_the_sums() {
        let mut report = two_seeds();
        let gang = crate::sim::result::shape_name(8.0, 4);
        for (run, (work, lost, stops)) in report
            .runs
            .iter_mut()
            .zip([(100.0, 30.0, 3), (300.0, 10.0, 1)])
        {
            let qm = run.strategies.get_mut("quartermaster").unwrap();
            qm.lost_by_shape.insert(
                gang.clone(),
                crate::sim::result::ShapeLoss {
                    jobs: 4,
                    work_gpu_hours: work,
                    lost_gpu_hours: lost,
                    interruptions: stops,
                    ..Default::default()
                },
            );
        }
        let pooled = report.pooled_by_shape("quartermaster");
        let g = &pooled[&gang];
        assert_eq!(
            (g.jobs, g.work_gpu_hours, g.lost_gpu_hours, g.interruptions),
            (8, 400.0, 40.0, 4)
        );
        assert!(report.pooled_by_shape("greedy").is_empty());
        let j = summary_json(&report);
        let shape = &j["strategies"]["quartermaster"]["lost_gpu_hours_by_shape"][&gang];
        assert_eq!(
            shape["lost_share"], 0.1,
            "40 of 400, not the mean of 30% and 3.3%"
        );
        assert_eq!(shape["jobs"], 8);
        let t = table(&report);
        assert!(
            t.contains("summed over the seeds")
                && t.contains("  quartermaster  8 GPUs, gang of 4: 40.0 (10.0%)"),
            "{t}"
        );
    }

    fn two_seeds() -> SeedsReport {
        SeedsReport {
            runs: vec![
                run(
                    1,
                    &[
                        ("quartermaster", 10.0, 5.0),
                        ("greedy", 12.0, 4.0),
                        ("on-demand", 40.0, 0.0),
                    ],
                ),
                run(
                    2,
                    &[
                        ("quartermaster", 30.0, 1.0),
                        ("greedy", 20.0, 2.0),
                        ("on-demand", 60.0, 0.0),
                    ],
                ),
            ],
        }
    }

    #[test]
    fn spreads_are_taken_over_the_seeds_where_a_measure_is_defined() {
        let r = two_seeds();
        let c = r.spread("quartermaster", cost).unwrap();
        assert_eq!((c.mean, c.min, c.max, c.n), (20.0, 10.0, 30.0, 2));
        let v = r.spread("quartermaster", vs_on_demand).unwrap();
        assert!((v.mean - (0.25 + 0.5) / 2.0).abs() < 1e-12);
        assert_eq!(r.spread("quartermaster", p95_slowdown), None);
        assert_eq!(r.spread("static", cost), None);
        assert_eq!(Spread::of([f64::NAN]), None);
    }

    #[test]
    fn the_table_shows_each_warning_of_loading_once() {
        let mut r = two_seeds();
        for run in &mut r.runs {
            run.warnings = vec![format!("seed {}", run.seed), "same".into()];
        }
        let t = table(&r);
        let warnings: Vec<&str> = t.lines().filter(|l| l.starts_with("warning: ")).collect();
        assert_eq!(
            warnings,
            ["warning: same", "warning: seed 1", "warning: seed 2"]
        );
    }

    #[test]
    fn quartermaster_is_compared_seed_by_seed_not_on_the_means() {
        let r = two_seeds();
        // Cheaper than greedy in seed 1 only, though dearer on the mean.
        assert_eq!(r.at_most("quartermaster", "greedy", cost), (1, 2));
        assert_eq!(r.at_most("quartermaster", "greedy", lost_gpu_hours), (1, 2));
        assert_eq!(r.at_most("quartermaster", "on-demand", cost), (2, 2));
        let t = table(&r);
        assert!(t.contains("over 2 seeds (1,2)"), "{t}");
        assert!(t.contains("$20 [$10 - $30]"), "{t}");
        assert!(
            t.contains("quartermaster no dearer than greedy in 1 of 2 seeds"),
            "{t}"
        );
        assert!(
            t.contains("no dearer than on-demand in 2 of 2 seeds"),
            "{t}"
        );
        assert!(!t.contains("lost no more work than on-demand"), "{t}");
        let j = summary_json(&r);
        assert_eq!(j["seeds"], json!([1, 2]));
        assert_eq!(j["strategies"]["greedy"]["total_cost"]["mean"], json!(16.0));
        assert_eq!(
            j["strategies"]["quartermaster"]["p95_slowdown"],
            Value::Null
        );
        assert_eq!(
            j["strategies"]["quartermaster"]["jobs_done_share"]["min"],
            json!(0.75)
        );
        assert_eq!(j["per_seed"][1]["seed"], json!(2));
        assert!(j["comparisons"]
            .as_array()
            .unwrap()
            .contains(&json!({"against": "greedy", "measure": "total_cost",
                               "quartermaster_at_most": 1, "seeds": 2})));
    }
}
