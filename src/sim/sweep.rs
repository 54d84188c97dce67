//! `simulate --sweep PATH=V1,V2,...`: one scenario run with a setting
//! changed to each of several values (several sweeps make a grid), every
//! point over the same seeds, so a team sees what each value buys: the
//! mean and spread of cost, lost work, p95 slowdown and interruptions,
//! with the baselines' points beside. A path is written as in the scenario
//! file (`cloud.marketTuning.hazardMultiplier`,
//! `workloads[0].training.checkpointInterval`); `nodePools.NAME` addresses
//! the NodePool of that `metadata.name`, whose `spec.` may be left out
//! (`nodePools.training.risk.riskAversion`). Each value is set in the file's
//! YAML before it is read, and read by the one strict reader as if the
//! file said it: a misspelt field is refused with its did-you-mean.

use super::scenario::{self, Scenario};
use super::seeds::{self, Measure, SeedsReport, Spread};
use crate::api::read::{self, did_you_mean, Document, Path, Segment};
use crate::catalog::Catalog;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// A sweep that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `--sweep` text is not `PATH=V1,V2,...`.
    #[error("--sweep {text:?}: {message}")]
    Syntax {
        /// What was given.
        text: String,
        /// What is wrong.
        message: String,
    },
    /// The path names nothing the scenario has or may have.
    #[error("--sweep {path}: {message}")]
    Path {
        /// The path as given.
        path: String,
        /// What is wrong, with a did-you-mean where one is near.
        message: String,
    },
    /// The scenario with a point's values set does not read.
    #[error("with {point}:\n{source}")]
    Scenario {
        /// The point's values, `PATH=V, ...`.
        point: String,
        /// Every problem the reader found.
        source: read::Error,
    },
    /// The file itself does not read (before any value is set).
    #[error(transparent)]
    File(#[from] read::Error),
}

/// One `--sweep`: a path and the values it takes, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// The path as the user wrote it.
    pub path: String,
    /// The values, as written (each read as YAML: `4` a number, `spot` a
    /// string, `30m` a string).
    pub values: Vec<String>,
}

impl std::str::FromStr for Sweep {
    type Err = Error;

    fn from_str(text: &str) -> Result<Sweep, Error> {
        let fail = |message: &str| Error::Syntax {
            text: text.to_string(),
            message: message.to_string(),
        };
        let (path, values) = text
            .split_once('=')
            .ok_or_else(|| fail("expected PATH=V1,V2,..."))?;
        let path = path.trim();
        if path.is_empty() {
            return Err(fail("the path before = is empty"));
        }
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
        if values.iter().any(String::is_empty) {
            return Err(fail("a value between commas is empty"));
        }
        Ok(Sweep {
            path: path.to_string(),
            values,
        })
    }
}

/// One point of the grid: a value for each sweep, in the sweeps' order.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// `(path as written, value as written)`, one per sweep.
    pub settings: Vec<(String, String)>,
}

impl Point {
    /// Its values alone, as written: `1` or `1, 30m`.
    pub fn values(&self) -> String {
        let v: Vec<&str> = self.settings.iter().map(|(_, v)| v.as_str()).collect();
        v.join(", ")
    }
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .settings
            .iter()
            .map(|(p, v)| format!("{p}={v}"))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

/// Every combination of the sweeps' values, the last sweep varying
/// fastest; one empty point when there are no sweeps.
pub fn grid(sweeps: &[Sweep]) -> Vec<Point> {
    let mut points = vec![Point {
        settings: Vec::new(),
    }];
    for s in sweeps {
        points = points
            .iter()
            .flat_map(|p| {
                s.values.iter().map(move |v| {
                    let mut settings = p.settings.clone();
                    settings.push((s.path.clone(), v.clone()));
                    Point { settings }
                })
            })
            .collect();
    }
    points
}

/// The fields a Kubernetes object has above its `spec`: a path into a
/// NodePool that starts with none of them means its `spec`.
const OBJECT_FIELDS: [&str; 5] = ["apiVersion", "kind", "metadata", "spec", "status"];

/// The document path `text` means in `doc`: `nodePools.NAME` becomes the
/// index of the NodePool named so, and `spec.` is put in front of a field
/// of its spec given without it.
///
/// # Errors
/// A NodePool name the scenario does not have (with the names it has).
pub fn resolve(doc: &Value, text: &str) -> Result<Path, Error> {
    let fail = |message: String| Error::Path {
        path: text.to_string(),
        message,
    };
    let parsed = Path::parse(text);
    let (index, rest) = match parsed.segments() {
        [Segment::Key(first), Segment::Key(name), rest @ ..] if first == "nodePools" => {
            let names: Vec<&str> = doc
                .get("nodePools")
                .and_then(Value::as_array)
                .map(|pools| {
                    pools
                        .iter()
                        .map(|p| {
                            p.pointer("/metadata/name")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                        })
                        .collect()
                })
                .unwrap_or_default();
            let i = names.iter().position(|n| n == name).ok_or_else(|| {
                let hint = did_you_mean(name, names.iter().copied()).unwrap_or_default();
                fail(format!(
                    "the scenario has no NodePool named {name:?}{hint} (its NodePools: {})",
                    names.join(", ")
                ))
            })?;
            (i, rest)
        }
        [Segment::Key(first), Segment::Index(i), rest @ ..] if first == "nodePools" => (*i, rest),
        _ => return Ok(parsed),
    };
    let mut out = Path::default().key("nodePools").index(index);
    if let Some(Segment::Key(k)) = rest.first() {
        if !OBJECT_FIELDS.contains(&k.as_str()) {
            out.push(Segment::Key("spec".into()));
        }
    }
    for s in rest {
        out.push(s.clone());
    }
    Ok(out)
}

/// A value as written on the command line, read as YAML reads it.
fn yaml_value(text: &str) -> Value {
    serde_norway::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// The scenario file `file` (its text `yaml`) once for each point of
/// `sweeps`' grid, each read by the one strict reader with the point's
/// values set. Every path is checked before any value: a path the
/// scenario's schema does not have is refused with its did-you-mean.
///
/// # Errors
/// The first sweep or point that does not read, naming it.
pub fn scenarios(
    file: &str,
    yaml: &str,
    catalog: &Catalog,
    sweeps: &[Sweep],
) -> Result<Vec<(Point, Scenario)>, Error> {
    let doc = read::single_document(file, yaml)?;
    let schema = scenario::schema();
    let mut paths = Vec::with_capacity(sweeps.len());
    for s in sweeps {
        paths.push(resolve(&doc.value, &s.path)?);
    }
    let mut out = Vec::new();
    for point in grid(sweeps) {
        let mut set = doc.clone();
        for ((given, value), path) in point.settings.iter().zip(&paths) {
            let fail = |message: String| Error::Path {
                path: format!("{given}={value}"),
                message,
            };
            set.set(path, yaml_value(value)).map_err(fail)?;
            if let Some(e) = set.problems_at(schema, path).first() {
                return Err(fail(e.to_string()));
            }
        }
        let s = read_point(file, &set, catalog).map_err(|source| Error::Scenario {
            point: point.to_string(),
            source,
        })?;
        out.push((point, s));
    }
    Ok(out)
}

fn read_point(file: &str, doc: &Document, catalog: &Catalog) -> Result<Scenario, read::Error> {
    read::read_single(file, doc, scenario::schema(), |s: &Scenario| {
        s.check(catalog)
    })
}

/// The runs of every point of a sweep.
#[derive(Debug, Clone, Default)]
pub struct SweepReport {
    /// The swept paths as written, in order.
    pub paths: Vec<String>,
    /// Each point and its runs over the seeds.
    pub points: Vec<(Point, SeedsReport)>,
}

/// The strategy the sweep is about; the others are its baselines.
pub const SWEPT: &str = "quartermaster";

/// The baselines a point is compared with, when they ran (karpenter only
/// when `--strategies` asks for it).
pub const BASELINES: [&str; 3] = ["greedy", "karpenter", super::report::ON_DEMAND];

/// One point's figures for one strategy: the measures the table, the JSON
/// and the chart show.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// Total cost (USD).
    pub cost: Option<Spread>,
    /// Lost GPU-hours over the GPU-hours jobs held.
    pub lost_share: Option<Spread>,
    /// The jobs' 95th-percentile slowdown.
    pub p95_slowdown: Option<Spread>,
    /// Jobs stopped by reclaims and evictions.
    pub interruptions: Option<Spread>,
}

impl Figures {
    /// `strategy`'s figures over `runs`; `None` if it did not run.
    pub fn of(runs: &SeedsReport, strategy: &str) -> Option<Figures> {
        let s = |m: Measure| runs.spread(strategy, m);
        s(seeds::cost).map(|cost| Figures {
            cost: Some(cost),
            lost_share: s(seeds::lost_share),
            p95_slowdown: s(seeds::p95_slowdown),
            interruptions: s(seeds::interruptions),
        })
    }

    fn json(&self) -> Value {
        let j = Spread::json;
        json!({
            "total_cost": j(self.cost),
            "lost_share": j(self.lost_share),
            "p95_slowdown": j(self.p95_slowdown),
            "interruptions": j(self.interruptions),
        })
    }
}

/// `a`'s mean over `b`'s, where both are defined and `b`'s is not zero.
fn over(a: Option<Spread>, b: Option<Spread>) -> Option<f64> {
    let (a, b) = (a?, b?);
    (b.mean != 0.0).then(|| a.mean / b.mean)
}

impl SweepReport {
    /// The seeds every point ran over.
    pub fn seeds(&self) -> Vec<u64> {
        self.points
            .first()
            .map(|(_, r)| r.seeds())
            .unwrap_or_default()
    }

    /// `strategy`'s figures at each point, in order.
    pub fn figures(&self, strategy: &str) -> Vec<(&Point, Option<Figures>)> {
        self.points
            .iter()
            .map(|(p, r)| (p, Figures::of(r, strategy)))
            .collect()
    }

    /// A baseline's figures: one entry when every point gave the same (a
    /// swept value the baseline does not read), else one per point.
    pub fn baseline(&self, strategy: &str) -> Vec<(Option<&Point>, Figures)> {
        let all: Vec<(&Point, Figures)> = self
            .figures(strategy)
            .into_iter()
            .filter_map(|(p, f)| Some((p, f?)))
            .collect();
        match all.first() {
            Some((_, first)) if all.iter().all(|(_, f)| f == first) => vec![(None, *first)],
            _ => all.into_iter().map(|(p, f)| (Some(p), f)).collect(),
        }
    }
}

/// A mark on the cost-against-lost-work plane: a strategy's mean cost and
/// mean lost share at one point.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// What it is: a swept point's values (`1` or `1, 30m`), or a
    /// baseline's name (with the point's values when it moved with them).
    pub label: String,
    /// Mean total cost (USD).
    pub cost: f64,
    /// Mean lost share (lost GPU-hours over the GPU-hours jobs held).
    pub lost: f64,
}

impl Mark {
    /// Whether this mark beats `other` on both counts: no dearer and losing
    /// no more, and better on at least one. Equal marks beat neither.
    pub fn dominates(&self, other: &Mark) -> bool {
        self.cost <= other.cost
            && self.lost <= other.lost
            && (self.cost < other.cost || self.lost < other.lost)
    }

    fn of(label: String, f: &Figures) -> Option<Mark> {
        Some(Mark {
            label,
            cost: f.cost?.mean,
            lost: f.lost_share?.mean,
        })
    }
}

/// Where the swept strategy's points stand against each other and the
/// baselines: what a team reads off the frontier.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Frontier {
    /// The swept strategy's mark at each point, in sweep order (`None`
    /// where it has no cost or lost share).
    pub swept: Vec<Option<Mark>>,
    /// The baselines' marks (one each when a baseline gave the same at
    /// every point, else one per point).
    pub baselines: Vec<Mark>,
    /// For each point, the label of the cheapest mark (another point or a
    /// baseline) that is no dearer and loses no more, and is better on one:
    /// a setting nobody should choose. `None` on the frontier.
    pub beaten_by: Vec<Option<String>>,
    /// The points no other point beats, by index, in order of lost work
    /// (then cost): the frontier's line from least lost to most.
    pub line: Vec<usize>,
}

fn cheapest_dominating<'a>(
    mark: &Mark,
    rivals: impl Iterator<Item = &'a Mark>,
) -> Option<&'a Mark> {
    rivals
        .filter(|r| r.dominates(mark))
        .min_by(|a, b| a.cost.total_cmp(&b.cost).then(a.lost.total_cmp(&b.lost)))
}

impl SweepReport {
    /// The swept strategy's marks, the baselines' and who beats whom.
    pub fn frontier(&self) -> Frontier {
        let swept: Vec<Option<Mark>> = self
            .figures(SWEPT)
            .into_iter()
            .map(|(p, f)| Mark::of(p.values(), f.as_ref()?))
            .collect();
        let mut baselines = Vec::new();
        for name in BASELINES {
            for (point, f) in self.baseline(name) {
                let label = point.map_or_else(|| name.to_string(), |p| format!("{name} ({p})"));
                baselines.extend(Mark::of(label, &f));
            }
        }
        let beaten_by = swept
            .iter()
            .map(|m| {
                let m = m.as_ref()?;
                let rivals = swept.iter().flatten().chain(&baselines);
                cheapest_dominating(m, rivals).map(|r| r.label.clone())
            })
            .collect();
        let mut line: Vec<usize> = (0..swept.len())
            .filter(|&i| {
                swept[i]
                    .as_ref()
                    .is_some_and(|m| cheapest_dominating(m, swept.iter().flatten()).is_none())
            })
            .collect();
        let key = |i: &usize| swept[*i].as_ref().map(|m| (m.lost, m.cost));
        line.sort_by(|a, b| {
            let (a, b) = (key(a).unwrap_or_default(), key(b).unwrap_or_default());
            a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1))
        });
        Frontier {
            swept,
            baselines,
            beaten_by,
            line,
        }
    }
}

fn cell(s: Option<Spread>, f: &dyn Fn(f64) -> String) -> String {
    match s {
        Some(s) => format!("{} [{} - {}]", f(s.mean), f(s.min), f(s.max)),
        None => "-".into(),
    }
}

fn mean(s: Option<Spread>, f: &dyn Fn(f64) -> String) -> String {
    s.map_or_else(|| "-".into(), |s| f(s.mean))
}

fn money(x: f64) -> String {
    super::report::usd(x)
}

fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

fn ratio(x: f64) -> String {
    format!("{x:.2}")
}

fn slowdown(x: f64) -> String {
    format!("{x:.3}")
}

fn count(x: f64) -> String {
    format!("{x:.0}")
}

/// The rows of the terminal table, header first: per point its values,
/// quartermaster's mean [min - max] over the seeds, its means over
/// on-demand's and greedy's at the same point, and the mark that beats it
/// on both cost and lost work (`-` on the frontier).
pub fn rows(report: &SweepReport) -> Vec<Vec<String>> {
    let mut header: Vec<String> = report.paths.clone();
    header.extend(
        [
            "cost",
            "/ on-demand",
            "/ greedy",
            "lost share",
            "/ greedy's",
            "slowdown p95",
            "interrupts",
            "beaten by",
        ]
        .map(String::from),
    );
    let beaten_by = report.frontier().beaten_by;
    let mut rows = vec![header];
    for ((point, runs), beaten) in report.points.iter().zip(beaten_by) {
        let f = Figures::of(runs, SWEPT);
        let g = Figures::of(runs, "greedy");
        let d = Figures::of(runs, super::report::ON_DEMAND);
        let get = |f: Option<Figures>, m: fn(&Figures) -> Option<Spread>| f.as_ref().and_then(m);
        let mut row: Vec<String> = point.settings.iter().map(|(_, v)| v.clone()).collect();
        row.extend([
            cell(get(f, |x| x.cost), &money),
            over(get(f, |x| x.cost), get(d, |x| x.cost)).map_or("-".into(), ratio),
            over(get(f, |x| x.cost), get(g, |x| x.cost)).map_or("-".into(), ratio),
            cell(get(f, |x| x.lost_share), &pct),
            over(get(f, |x| x.lost_share), get(g, |x| x.lost_share)).map_or("-".into(), ratio),
            cell(get(f, |x| x.p95_slowdown), &slowdown),
            cell(get(f, |x| x.interruptions), &count),
            beaten.unwrap_or_else(|| "-".into()),
        ]);
        rows.push(row);
    }
    rows
}

/// The terminal table: [`rows`], then the baselines' own figures (once
/// when every point gave them the same).
pub fn table(report: &SweepReport) -> String {
    let mut out = String::new();
    let seeds = report.seeds();
    let scenario = report
        .points
        .first()
        .and_then(|(_, r)| r.runs.first())
        .map_or("", |r| r.scenario.as_str());
    let _ = writeln!(
        out,
        "scenario {scenario}, {} points over {} seeds ({}): mean [min - max]",
        report.points.len(),
        seeds.len(),
        seeds
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    let rows = rows(report);
    let _ = writeln!(out, "{SWEPT}:");
    out.push_str(&super::report::columns(&rows));
    let frontier = report.frontier();
    let line: Vec<String> = frontier
        .line
        .iter()
        .map(|&i| report.points[i].0.values())
        .collect();
    let _ = writeln!(
        out,
        "frontier, least lost work first: {} (a value beaten by another mark, no dearer and losing no more, is not worth choosing)",
        line.join(" -> ")
    );
    for name in BASELINES {
        let entries = report.baseline(name);
        if entries.is_empty() {
            continue;
        }
        let _ = writeln!(out);
        for (point, f) in entries {
            let at = point.map_or_else(|| "at every point".to_string(), |p| format!("at {p}"));
            let _ = writeln!(
                out,
                "{name} {at}: cost {}, lost share {}, slowdown p95 {}, interrupts {}",
                cell(f.cost, &money),
                cell(f.lost_share, &pct),
                cell(f.p95_slowdown, &slowdown),
                mean(f.interruptions, &count),
            );
        }
    }
    out
}

/// The machine-readable form: the paths, the seeds, and per point its
/// values and every strategy's figures (each measure's mean, min, max and
/// seeds) with quartermaster's means over the baselines' and the mark
/// that beats it (`beaten_by`, `null` on the frontier); `frontier` lists
/// the indices of the points no other point beats, least lost work first.
pub fn summary_json(report: &SweepReport) -> Value {
    let frontier = report.frontier();
    let points: Vec<Value> = report
        .points
        .iter()
        .zip(&frontier.beaten_by)
        .map(|((point, runs), beaten_by)| {
            let settings: serde_json::Map<String, Value> = point
                .settings
                .iter()
                .map(|(p, v)| (p.clone(), yaml_value(v)))
                .collect();
            let strategies: serde_json::Map<String, Value> = runs
                .strategies()
                .into_iter()
                .filter_map(|name| {
                    let f = Figures::of(runs, &name)?;
                    Some((name, f.json()))
                })
                .collect();
            let mine = Figures::of(runs, SWEPT);
            let ratios: serde_json::Map<String, Value> = BASELINES
                .iter()
                .filter_map(|b| {
                    let theirs = Figures::of(runs, b)?;
                    let mine = mine?;
                    Some((
                        b.to_string(),
                        json!({
                            "total_cost": over(mine.cost, theirs.cost),
                            "lost_share": over(mine.lost_share, theirs.lost_share),
                        }),
                    ))
                })
                .collect();
            json!({
                "settings": settings,
                "strategies": strategies,
                "quartermaster_over": ratios,
                "beaten_by": beaten_by,
            })
        })
        .collect();
    json!({
        "scenario": report.points.first().and_then(|(_, r)| r.runs.first()).map(|r| r.scenario.clone()),
        "sweeps": report.paths,
        "seeds": report.seeds(),
        "points": points,
        "frontier": frontier.line,
    })
}

/// Hand-made sweeps for the tests of the table and the chart.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::{Point, SweepReport};
    use crate::sim::seeds::{fixtures::run, SeedsReport};

    /// A sweep whose quartermaster marks are `(value, cost, lost GPU-hours
    /// of 100)`, with greedy at $100 losing 8 and on-demand at $200
    /// losing none at every point.
    pub fn sweep_of(marks: &[(&str, f64, f64)]) -> SweepReport {
        SweepReport {
            paths: vec!["x".into()],
            points: marks
                .iter()
                .map(|(v, cost, lost)| {
                    (
                        Point {
                            settings: vec![("x".into(), v.to_string())],
                        },
                        SeedsReport {
                            runs: vec![run(
                                1,
                                &[
                                    ("quartermaster", *cost, *lost),
                                    ("greedy", 100.0, 8.0),
                                    ("on-demand", 200.0, 0.0),
                                ],
                            )],
                        },
                    )
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::sweep_of;
    use super::*;

    const SCENARIO: &str = "\
name: s
start: 2026-01-05T00:00:00Z
duration: 24h
nodePools:
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: training}
  spec:
    capacityTypes: [spot, on-demand]
    template:
      spec:
        requirements:
        - {key: quartermaster.dev/instance-family, operator: In, values: [g6e]}
- apiVersion: quartermaster.dev/v1alpha1
  kind: NodePool
  metadata: {name: serving}
  spec:
    risk: {riskAversion: 2}
    template:
      spec:
        requirements:
        - {key: quartermaster.dev/instance-family, operator: In, values: [g6e]}
workloads:
- training: {name: t, jobs: 2, perHour: 1, gpus: [1], runTime: {median: 1h, p90: 2h}}
";

    fn catalog() -> Catalog {
        Catalog::embedded().unwrap()
    }

    fn sweep(text: &str) -> Sweep {
        text.parse().unwrap()
    }

    #[test]
    fn a_sweep_is_a_path_and_its_values_and_nonsense_is_named() {
        assert_eq!(
            sweep("nodePools.training.risk.riskAversion=0, 1,2.5"),
            Sweep {
                path: "nodePools.training.risk.riskAversion".into(),
                values: vec!["0".into(), "1".into(), "2.5".into()],
            }
        );
        for bad in ["riskAversion", "=1,2", "a=1,,2", "a="] {
            assert!(bad.parse::<Sweep>().is_err(), "{bad}");
        }
    }

    #[test]
    fn several_sweeps_make_a_grid_with_the_last_varying_fastest() {
        let points = grid(&[sweep("a=1,2"), sweep("b=x,y,z")]);
        let shown: Vec<String> = points.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            ["a=1, b=x", "a=1, b=y", "a=1, b=z", "a=2, b=x", "a=2, b=y", "a=2, b=z"]
        );
        assert_eq!(grid(&[]).len(), 1);
    }

    #[test]
    fn a_nodepool_is_addressed_by_its_name_and_its_spec_may_be_left_out() {
        let doc = read::single_document("s.yaml", SCENARIO).unwrap().value;
        let at = |p: &str| resolve(&doc, p).map(|p| p.to_string());
        assert_eq!(
            at("nodePools.serving.risk.riskAversion").unwrap(),
            "nodePools[1].spec.risk.riskAversion"
        );
        assert_eq!(
            at("nodePools.serving.spec.weight").unwrap(),
            "nodePools[1].spec.weight"
        );
        assert_eq!(
            at("nodePools[0].metadata.name").unwrap(),
            "nodePools[0].metadata.name"
        );
        assert_eq!(at("duration").unwrap(), "duration");
        let err = at("nodePools.servng.weight").unwrap_err().to_string();
        assert!(
            err.contains("no NodePool named \"servng\" (did you mean serving?)")
                && err.contains("its NodePools: training, serving"),
            "{err}"
        );
    }

    #[test]
    fn each_point_reads_as_if_the_file_said_its_values() {
        let points = scenarios(
            "s.yaml",
            SCENARIO,
            &catalog(),
            &[
                sweep("nodePools.training.risk.riskAversion=0,4"),
                sweep("nodePools.serving.risk.riskAversion=8"),
                sweep("duration=48h"),
            ],
        )
        .unwrap();
        let aversions: Vec<(f64, f64, &str)> = points
            .iter()
            .map(|(_, s)| {
                (
                    s.node_pools[0].spec.risk.risk_aversion,
                    s.node_pools[1].spec.risk.risk_aversion,
                    s.duration.as_str(),
                )
            })
            .collect();
        assert_eq!(aversions, [(0.0, 8.0, "48h"), (4.0, 8.0, "48h")]);
    }

    #[test]
    fn a_misspelt_path_is_refused_with_its_did_you_mean() {
        let err = |s: &str| {
            scenarios("s.yaml", SCENARIO, &catalog(), &[sweep(s)])
                .unwrap_err()
                .to_string()
        };
        let e = err("nodePools.training.risk.riskAverson=1,2");
        assert!(
            e.contains("--sweep nodePools.training.risk.riskAverson=1")
                && e.contains("unknown field (did you mean riskAversion?)"),
            "{e}"
        );
        let e = err("nodePools.training.rsk.riskAversion=1");
        assert!(e.contains("(did you mean risk?)"), "{e}");
        let e = err("nodePools.training.risk.riskAversion=lots");
        assert!(e.contains("the string \"lots\""), "{e}");
        let e = err("cloud.marketTuning.hazardMultiplier=-1");
        assert!(
            e.contains("with cloud.marketTuning.hazardMultiplier=-1") && e.contains("must be >= 0"),
            "{e}"
        );
        let e = err("workloads[3].training.jobs=1");
        assert!(e.contains("has 1 items, none at [3]"), "{e}");
    }

    fn two_points() -> SweepReport {
        sweep_of(&[("1", 50.0, 4.0), ("2", 120.0, 2.0)])
    }

    #[test]
    fn each_point_is_set_against_the_baselines_of_the_same_point() {
        let r = two_points();
        let rows = rows(&r);
        assert_eq!(rows[0][0], "x");
        assert_eq!(
            rows[1],
            [
                "1",
                "$50.00 [$50.00 - $50.00]",
                "0.25",
                "0.50",
                "4.0% [4.0% - 4.0%]",
                "0.50",
                "-",
                "0 [0 - 0]",
                "-"
            ]
        );
        assert_eq!((rows[2][2].as_str(), rows[2][3].as_str()), ("0.60", "1.20"));
        let t = table(&r);
        assert!(
            t.contains("greedy at every point: cost $100.00"),
            "the same baseline at every point is shown once: {t}"
        );
        let j = summary_json(&r);
        assert_eq!(j["points"][1]["settings"]["x"], json!(2));
        assert_eq!(
            j["points"][1]["quartermaster_over"]["greedy"]["total_cost"],
            json!(1.2)
        );
        assert_eq!(
            j["points"][0]["strategies"]["greedy"]["lost_share"]["mean"],
            json!(0.08)
        );
    }

    #[test]
    fn a_mark_dominates_only_when_no_worse_on_both_counts_and_better_on_one() {
        let m = |cost, lost| Mark {
            label: String::new(),
            cost,
            lost,
        };
        assert!(m(1.0, 1.0).dominates(&m(2.0, 1.0)));
        assert!(m(1.0, 1.0).dominates(&m(1.0, 2.0)));
        assert!(!m(1.0, 1.0).dominates(&m(1.0, 1.0)), "equal marks");
        assert!(!m(1.0, 3.0).dominates(&m(2.0, 2.0)), "a trade, not a win");
        assert!(!m(2.0, 2.0).dominates(&m(1.0, 3.0)));
    }

    #[test]
    fn a_beaten_point_names_the_cheapest_mark_that_beats_it_and_leaves_the_line() {
        // "5" is beaten by "3" and by greedy ($100, 8%): the cheaper,
        // greedy, is named, and "5" leaves the line. "2" is beaten by
        // greedy alone, so it stays on quartermaster's own line.
        let r = sweep_of(&[
            ("1", 60.0, 9.0),
            ("2", 105.0, 8.5),
            ("3", 130.0, 6.0),
            ("4", 150.0, 2.0),
            ("5", 160.0, 8.5),
        ]);
        let f = r.frontier();
        let greedy = Some("greedy".to_string());
        assert_eq!(f.beaten_by, [None, greedy.clone(), None, None, greedy]);
        let line: Vec<String> = f.line.iter().map(|&i| r.points[i].0.values()).collect();
        assert_eq!(line, ["4", "3", "2", "1"], "least lost first, 5 left out");
        let rows = rows(&r);
        assert_eq!(rows[2].last().unwrap(), "greedy");
        assert_eq!(rows[1].last().unwrap(), "-");
        let j = summary_json(&r);
        assert_eq!(j["points"][4]["beaten_by"], json!("greedy"));
        assert_eq!(j["points"][0]["beaten_by"], Value::Null);
        assert_eq!(j["frontier"], json!([3, 2, 1, 0]));
        assert!(table(&r).contains("least lost work first: 4 -> 3 -> 2 -> 1"));
    }

    #[test]
    fn a_dearer_point_losing_as_much_is_beaten_and_equal_points_both_stay() {
        let r = sweep_of(&[
            ("a", 80.0, 3.0),
            ("b", 70.0, 3.0),
            ("c", 70.0, 3.0),
            ("d", 50.0, 6.0),
        ]);
        let f = r.frontier();
        assert_eq!(f.beaten_by, [Some("b".to_string()), None, None, None]);
        assert_eq!(f.line, [1, 2, 3]);
        assert_eq!(f.baselines.len(), 2, "greedy and on-demand, once each");
    }

    #[test]
    fn a_baseline_that_moves_with_the_value_is_shown_at_each_point() {
        let mut r = two_points();
        let g = r.points[1].1.runs[0].strategies.get_mut("greedy").unwrap();
        g.total_cost = 90.0;
        let t = table(&r);
        assert!(
            t.contains("greedy at x=1: cost $100.00") && t.contains("greedy at x=2: cost $90.00"),
            "{t}"
        );
    }
}
