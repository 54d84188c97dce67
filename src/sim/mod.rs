//! The simulation driver: replays workloads through the same decision core as
//! production, on a simulated cloud in virtual time, one run per strategy on
//! the same jobs and the same random interruptions.

pub mod bill;
pub mod bound;
pub mod dra;
pub mod engine;
pub mod gpu_names;
pub mod jobs;
pub mod provisioning;
pub mod report;
pub mod reservations;
pub mod result;
pub mod scenario;
pub mod seeds;
pub mod static_groups;
pub mod sweep;
pub mod trace;
pub mod trace_window;
pub mod workload;

use crate::catalog::Catalog;
use result::SimReport;
use scenario::{Scenario, StrategyName, WorkloadSource};
use std::path::Path;
use std::sync::Arc;
use trace::FractionalGpu;
use workload::SimJob;

/// Jobs of a scenario could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A trace file could not be read.
    #[error("reading trace {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A trace file is malformed.
    #[error("trace {path}: {source}")]
    Trace {
        /// The file.
        path: String,
        /// What is wrong.
        source: trace::Error,
    },
    /// GPU hints no pool serves, and the trace says to fail.
    #[error("trace {path}: {source}")]
    GpuNames {
        /// The file.
        path: String,
        /// The hints.
        source: gpu_names::Error,
    },
    /// A generator's spec is wrong.
    #[error(transparent)]
    Workload(#[from] workload::Error),
    /// A spot trace (`cloud.spotTraces`) is malformed, empty or of the
    /// wrong kind.
    #[error(transparent)]
    SpotTrace(#[from] crate::catalog::market::trace::Error),
}

/// A run over several seeds stopped.
#[derive(Debug, thiserror::Error)]
pub enum SeedsError {
    /// A seed's workload could not be made.
    #[error("seed {seed}: {source}")]
    Load {
        /// The seed.
        seed: u64,
        /// Why.
        source: LoadError,
    },
    /// The simulated cloud refused the scenario's settings.
    #[error(transparent)]
    Engine(#[from] engine::Error),
}

/// A scenario's workload: its jobs, and what its traces made us change or
/// warn about before the run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Workload {
    /// Every job, of every source.
    pub jobs: Vec<SimJob>,
    /// Warnings for the report (GPU hints no pool serves, pool families
    /// with no offerings in the region, trace rows left out), each naming
    /// what it is about.
    pub warnings: Vec<String>,
    /// The original cluster's queue times (`queue_s`) of the trace pods
    /// replayed, carried-in pods excepted.
    pub trace_queue_s: Vec<f64>,
}

impl From<Vec<SimJob>> for Workload {
    fn from(jobs: Vec<SimJob>) -> Workload {
        Workload {
            jobs,
            ..Default::default()
        }
    }
}

/// Every job of the scenario's workload sources (trace paths relative to
/// `base`), plus `extra_trace` if given (relative to the working
/// directory); seeded by the scenario's seed.
/// Trace GPU hints are mapped to the catalog's names
/// ([`gpu_names::apply`]); the warnings name the hints no pool serves and
/// the pools' families that have no offerings in the region.
///
/// # Errors
/// A trace that cannot be read or parsed, a bad generator spec, or GPU
/// hints no pool serves where the trace says `onUnknownGpu: fail`.
pub fn load_jobs(
    scenario: &Scenario,
    catalog: &Catalog,
    base: &Path,
    extra_trace: Option<&Path>,
) -> Result<Workload, LoadError> {
    let mut w = Workload {
        warnings: pool_warnings(scenario, catalog),
        ..Default::default()
    };
    let known = gpu_names::catalog_names(catalog);
    let launchable = gpu_names::launchable(&scenario.node_pools, catalog, &scenario.region);
    let read = |path: &Path| -> Result<Vec<trace::TraceJob>, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        trace::parse(&text).map_err(|source| LoadError::Trace {
            path: path.display().to_string(),
            source,
        })
    };
    let replay = |spec: &workload::TraceSpec, w: &mut Workload| -> Result<(), LoadError> {
        let window = spec.window(scenario.length().num_seconds() as f64);
        let mut rows = read(&base.join(&spec.path))?;
        if spec.gpu_only {
            // Before the window, so that its counts are of GPU pods.
            rows.retain(|r| r.gpus > 0.0);
        }
        let selected = window.select(rows);
        let mut rows = selected.rows;
        let notes = selected.notes.into_iter();
        w.warnings
            .extend(notes.map(|m| format!("trace {}: {m}", spec.path)));
        let warnings = gpu_names::apply(
            &mut rows,
            &spec.gpu_names,
            &known,
            &launchable,
            spec.on_unknown_gpu,
        )
        .map_err(|source| LoadError::GpuNames {
            path: spec.path.clone(),
            source,
        })?;
        w.warnings.extend(
            warnings
                .into_iter()
                .map(|m| format!("trace {}: {m}", spec.path)),
        );
        let fractional =
            FractionalGpu::for_pools(&scenario.node_pools, spec.mig_profile.as_deref());
        w.jobs.extend(spec.jobs(&rows, scenario.start, &fractional));
        w.trace_queue_s
            .extend(spec.replayed(&rows).filter_map(|r| r.queue_s));
        Ok(())
    };
    // The DRA objects the sources' claims name (`dra`).
    let mut objects = crate::cluster::dra::Objects::default();
    for (i, source) in scenario.workloads.iter().enumerate() {
        let seed = scenario.seed.wrapping_add(i as u64 * 0x9E37_79B9);
        let first = w.jobs.len();
        match source {
            WorkloadSource::Training(t) => w.jobs.extend(t.generate(scenario.start, seed)?),
            WorkloadSource::Inference(s) => w
                .jobs
                .extend(s.generate(scenario.start, scenario.length())?),
            WorkloadSource::Burst(b) => {
                w.jobs
                    .extend(b.generate(scenario.start, scenario.length(), seed)?)
            }
            WorkloadSource::Trace(t) => replay(t, &mut w)?,
        }
        if let Some(u) = source.gpu_use() {
            u.apply(&mut w.jobs[first..], seed);
        }
        if let Some(d) = source.dra() {
            objects.extend(d.apply(&mut w.jobs[first..], i));
        }
    }
    dra::resolve(&mut w.jobs, &objects, catalog, &scenario.node_pools);
    if let Some(path) = extra_trace {
        // Named on the command line: relative to the working directory,
        // not to the scenario's folder.
        let path = std::path::absolute(path).map_err(|source| LoadError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let spec = workload::TraceSpec {
            path: path.display().to_string(),
            ..Default::default()
        };
        replay(&spec, &mut w)?;
    }
    Ok(w)
}

/// One warning per pool family that has no offerings in the region.
fn pool_warnings(scenario: &Scenario, catalog: &Catalog) -> Vec<String> {
    scenario
        .node_pools
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            let name = p.metadata.name.clone().unwrap_or_default();
            crate::api::validate::families_without_offerings(&p.spec, catalog, &scenario.region)
                .into_iter()
                .map(move |f| {
                    format!(
                        "nodePools[{i}] ({name}): family {f} has no offerings in {}: the pool \
                         launches none of its types there",
                        scenario.region
                    )
                })
        })
        .collect()
}

/// Reads and parses the scenario's spot traces (`cloud.spotTraces`, paths
/// relative to `base`) into the scenario.
///
/// # Errors
/// A trace file that cannot be read, whose text is not a trace of its kind,
/// or that ends before the scenario does once its `offset` is skipped (the
/// pool would then replay nothing for the rest of the run); the error names
/// the file and the problem.
pub fn load_spot_traces(scenario: &mut Scenario, base: &Path) -> Result<(), LoadError> {
    use crate::catalog::market::trace::{Error, SpotTrace};
    let needed_hours = scenario.length().num_seconds() as f64 / 3600.0;
    for spec in &mut scenario.cloud.spot_traces {
        let path = base.join(&spec.path);
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Read {
            path: shown.clone(),
            source,
        })?;
        let trace = SpotTrace::parse(&shown, spec.kind, &text)?;
        let offset = spec.offset.as_deref().unwrap_or("0s");
        let skipped_hours = crate::api::parse_duration(offset)
            .unwrap_or_default()
            .as_secs_f64()
            / 3600.0;
        let covered_hours = trace.hours() - skipped_hours;
        if covered_hours < needed_hours {
            return Err(Error {
                file: shown,
                problem: format!(
                    "{:.1} h long, so from its offset {offset} it covers {:.1} h of the \
                     scenario's {needed_hours:.1} h: lower the offset or shorten the scenario",
                    trace.hours(),
                    covered_hours.max(0.0)
                ),
            }
            .into());
        }
        spec.loaded = Some(trace);
    }
    Ok(())
}

/// Runs every strategy on the same jobs and the same simulated cloud seed.
/// `progress` gets each strategy and the share of its run done.
///
/// # Errors
/// Cloud settings the simulated cloud refuses.
pub fn simulate(
    scenario: &Scenario,
    catalog: &Arc<Catalog>,
    workload: &Workload,
    strategies: &[StrategyName],
    progress: &mut dyn FnMut(StrategyName, f64),
) -> Result<SimReport, engine::Error> {
    let mut report = SimReport {
        scenario: scenario.name.clone(),
        duration_s: scenario.length().num_seconds() as f64,
        seed: scenario.seed,
        lower_bound_cost: 0.0,
        lower_bound_unplaceable: 0,
        warnings: workload.warnings.clone(),
        trace_queue: trace_window::QueueTime::of(&workload.trace_queue_s),
        strategies: Default::default(),
    };
    let jobs = &workload.jobs;
    let catalog = &scenario.catalog_with_zone_names(catalog);
    // With reservations, the bound may use them free at any time and any
    // count (a relaxation), and adds what they cost up front.
    let specs = &scenario.cloud.reservations;
    let reserved = reservations::reservations(specs, &scenario.region, scenario.start);
    let mut bound_catalog =
        (!reserved.is_empty()).then(|| reservations::cloud_catalog(catalog, &reserved));
    // With price changes, the bound prices each offering at the lowest of
    // its prices over the run: a job may run whenever its pool is cheapest.
    let changes = scenario
        .cloud_config()
        .map(|c| c.price_changes)
        .unwrap_or_default();
    if !changes.is_empty() {
        let base = bound_catalog.take().unwrap_or_else(|| (**catalog).clone());
        bound_catalog = Some(base.repriced(|o| {
            changes
                .iter()
                .filter(|c| {
                    c.target
                        .matches(&o.instance_type, &o.zone_id, o.capacity_type)
                })
                .map(|c| c.price_per_hour)
                .fold(o.price_per_hour, f64::min)
        }));
    }
    let bound = bound::lower_bound(
        jobs,
        bound_catalog.as_ref().unwrap_or(catalog),
        &scenario.region,
        &scenario.node_pools,
        scenario.start + scenario.length(),
    );
    report.lower_bound_cost = bound.cost + reservations::upfront_cost(specs);
    report.lower_bound_unplaceable = bound.unplaceable;
    // The strategies replay side by side, each on its own thread: their
    // engines share nothing but the read-only scenario, catalog and jobs,
    // so each result is what a run alone gives, and the replay takes as
    // long as its slowest strategy where there are cores for all.
    let (tx, rx) = std::sync::mpsc::channel::<(StrategyName, f64)>();
    let results = std::thread::scope(|scope| {
        let runs: Vec<_> = strategies
            .iter()
            .map(|&s| {
                let tx = tx.clone();
                scope.spawn(move || {
                    let run = engine::Engine::new(scenario, catalog, jobs, s)?;
                    Ok::<_, engine::Error>((
                        s,
                        run.run(&mut |f| {
                            // The receiver outlives every run.
                            let _ = tx.send((s, f));
                        }),
                    ))
                })
            })
            .collect();
        drop(tx);
        for (s, f) in rx {
            progress(s, f);
        }
        runs.into_iter()
            .map(|r| {
                r.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect::<Vec<_>>()
    });
    for r in results {
        let (s, result) = r?;
        let name = serde_json::to_value(s)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        report.strategies.insert(name, result);
    }
    Ok(report)
}

/// Runs every strategy once per seed (the scenario's own seed replaced by
/// each in turn; the workload is drawn anew for each), for
/// `simulate --seeds`. `progress` gets the seed's index, the strategy and
/// the share of its run done.
///
/// # Errors
/// A seed's workload that cannot be loaded (naming the seed), or cloud
/// settings the simulated cloud refuses.
pub fn simulate_seeds(
    scenario: &Scenario,
    catalog: &Arc<Catalog>,
    base: &Path,
    extra_trace: Option<&Path>,
    strategies: &[StrategyName],
    seeds: &[u64],
    progress: &mut dyn FnMut(usize, StrategyName, f64),
) -> Result<seeds::SeedsReport, SeedsError> {
    let mut scenario = scenario.clone();
    let mut report = seeds::SeedsReport::default();
    for (i, &seed) in seeds.iter().enumerate() {
        scenario.seed = seed;
        let jobs = load_jobs(&scenario, catalog, base, extra_trace)
            .map_err(|source| SeedsError::Load { seed, source })?;
        let run = simulate(&scenario, catalog, &jobs, strategies, &mut |s, f| {
            progress(i, s, f)
        })?;
        report.runs.push(run);
    }
    Ok(report)
}

/// Runs each point's scenario (its spot traces loaded) over `seeds`
/// ([`simulate_seeds`]), for `simulate --sweep`. `progress` gets the
/// point's index, the seed's index, the strategy and the share of its run
/// done.
///
/// # Errors
/// The first point whose workload cannot be loaded, or whose cloud
/// settings the simulated cloud refuses.
pub fn simulate_sweep(
    points: Vec<(sweep::Point, Scenario)>,
    catalog: &Arc<Catalog>,
    base: &Path,
    extra_trace: Option<&Path>,
    strategies: &[StrategyName],
    seeds: &[u64],
    progress: &mut dyn FnMut(usize, usize, StrategyName, f64),
) -> Result<Vec<(sweep::Point, seeds::SeedsReport)>, SeedsError> {
    let mut out = Vec::with_capacity(points.len());
    for (k, (point, scenario)) in points.into_iter().enumerate() {
        let runs = simulate_seeds(
            &scenario,
            catalog,
            base,
            extra_trace,
            strategies,
            seeds,
            &mut |i, s, f| progress(k, i, s, f),
        )?;
        out.push((point, runs));
    }
    Ok(out)
}
