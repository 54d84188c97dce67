//! The simulation driver: replays workloads through the same decision core as
//! production, on a simulated cloud in virtual time, one run per strategy on
//! the same jobs and the same random interruptions.

pub mod bound;
pub mod engine;
pub mod jobs;
pub mod report;
pub mod result;
pub mod scenario;
pub mod seeds;
pub mod trace;
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

/// Every job of the scenario's workload sources (trace paths relative to
/// `base`), plus `extra_trace` if given; seeded by the scenario's seed.
///
/// # Errors
/// A trace that cannot be read or parsed, or a bad generator spec.
pub fn load_jobs(
    scenario: &Scenario,
    base: &Path,
    extra_trace: Option<&Path>,
) -> Result<Vec<SimJob>, LoadError> {
    let mut jobs = Vec::new();
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
    for (i, source) in scenario.workloads.iter().enumerate() {
        let seed = scenario.seed.wrapping_add(i as u64 * 0x9E37_79B9);
        match source {
            WorkloadSource::Training(t) => jobs.extend(t.generate(scenario.start, seed)?),
            WorkloadSource::Inference(s) => {
                jobs.extend(s.generate(scenario.start, scenario.length())?)
            }
            WorkloadSource::Burst(b) => {
                jobs.extend(b.generate(scenario.start, scenario.length(), seed)?)
            }
            WorkloadSource::Trace(t) => {
                let rows = read(&base.join(&t.path))?;
                let fractional =
                    FractionalGpu::for_pools(&scenario.node_pools, t.mig_profile.as_deref());
                jobs.extend(t.jobs(&rows, scenario.start, &fractional));
            }
        }
    }
    if let Some(path) = extra_trace {
        let rows = read(path)?;
        let spec = workload::TraceSpec {
            path: path.display().to_string(),
            limit: None,
            gpu_only: false,
            mig_profile: None,
        };
        let fractional = FractionalGpu::for_pools(&scenario.node_pools, None);
        jobs.extend(spec.jobs(&rows, scenario.start, &fractional));
    }
    Ok(jobs)
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
    jobs: &[SimJob],
    strategies: &[StrategyName],
    progress: &mut dyn FnMut(StrategyName, f64),
) -> Result<SimReport, engine::Error> {
    let mut report = SimReport {
        scenario: scenario.name.clone(),
        duration_s: scenario.length().num_seconds() as f64,
        seed: scenario.seed,
        lower_bound_cost: 0.0,
        lower_bound_unplaceable: 0,
        strategies: Default::default(),
    };
    let bound = bound::lower_bound(
        jobs,
        catalog,
        &scenario.region,
        &scenario.node_pools,
        scenario.start + scenario.length(),
    );
    report.lower_bound_cost = bound.cost;
    report.lower_bound_unplaceable = bound.unplaceable;
    for &s in strategies {
        let run = engine::Engine::new(scenario, catalog, jobs, s)?;
        let result = run.run(&mut |f| progress(s, f));
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
        let jobs = load_jobs(&scenario, base, extra_trace)
            .map_err(|source| SeedsError::Load { seed, source })?;
        let run = simulate(&scenario, catalog, &jobs, strategies, &mut |s, f| {
            progress(i, s, f)
        })?;
        report.runs.push(run);
    }
    Ok(report)
}
