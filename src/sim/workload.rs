//! Simulated jobs and the generators that make them: training jobs with N
//! GPUs, checkpoints and restart overhead (some as gangs), inference
//! deployments whose replicas follow a diurnal curve, and office-hour bursts.
//! Seeded and pure: the same spec and seed give the same jobs.
//!
//! Run times are drawn log-normally from a median and a p90, the shape of
//! published GPU traces (see `shared/traces/README.md`).

use super::trace::{FractionalGpu, TraceJob};
use crate::api::labels as l;
use crate::cluster::resources::{CPU, MEMORY};
use crate::cluster::{GroupRef, Pod, Resources, Toleration, ZoneSpread};
use crate::core::Time;
use chrono::{Datelike, Duration as Span, TimeZone, Timelike};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use schemars::JsonSchema;
use serde::Deserialize;

const GIB: i64 = 1 << 30;

/// One unit of simulated work: a pod that appears at `submit` and needs
/// `work_s` seconds of running to finish.
#[derive(Debug, Clone, PartialEq)]
pub struct SimJob {
    /// The pod (name `namespace/name`, requests, constraints, checkpoints).
    pub pod: Pod,
    /// When it appears.
    pub submit: Time,
    /// Seconds of running it needs.
    pub work_s: f64,
    /// Seconds between its checkpoints (None: it restarts from zero).
    pub checkpoint_interval_s: Option<f64>,
    /// Seconds one checkpoint takes to write (periodic or requested).
    pub checkpoint_write_s: f64,
    /// Seconds lost to every restart (scheduling, loading the checkpoint).
    pub restart_overhead_s: f64,
    /// A serving replica (inference, the serving trace): it holds no work
    /// of its own, so an interruption loses none, only the time it is down,
    /// and it ends when its demand does (`submit + work_s`), however long
    /// it waited. Trace replicas tell the planner so
    /// ([`Pod::holds_work`]); the `inference` workload's do not yet (the
    /// `docs/results.md`, "Where the calibrated market leaves us", says why).
    pub stateless: bool,
    /// GPUs it holds when its pod asks for time-sliced shares
    /// (`nvidia.com/gpu.shared`, whose size the pod does not say): its
    /// shares over the pool's replicas per GPU. `None`: what its requests
    /// say ([`crate::cluster::Resources::gpus`]).
    pub gpu_share: Option<f64>,
    /// How busy its GPUs are, where its workload says ([`GpuUseSpec`]).
    pub gpu_use: Option<JobGpuUse>,
}

/// One job's GPU use, as DCGM would read it over its runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobGpuUse {
    /// Mean share of time its GPUs are busy, 0..=1.
    pub busy: f64,
    /// Peak memory used on its busiest GPU, as a share of one GPU's
    /// memory; `None`: not said (right sizes then keep the whole memory).
    pub peak_memory: Option<f64>,
}

/// `gpuUse:` of a workload source: how busy its pods keep their GPUs (what
/// DCGM's `GPU_UTIL` or engine activity would read), for the report's idle
/// GPU-hours and right-sizing saving. Each job draws its own `busy`
/// uniformly from `busy - spread ..= busy + spread` (clamped to 0..=1; a
/// gang's members share one draw), seeded by the scenario's seed.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuUseSpec {
    /// Mean share of time the GPUs are busy, 0..=1.
    pub busy: f64,
    /// Half-width of the uniform spread of the jobs' `busy` around it,
    /// 0..=1 (default 0: every job at `busy`).
    #[serde(default)]
    pub spread: f64,
    /// Peak memory used, as a share of one GPU's memory, in (0, 1];
    /// absent: the whole memory (no MIG profile or share fits).
    #[serde(default)]
    pub peak_memory: Option<f64>,
}

impl GpuUseSpec {
    /// Everything wrong with it, as texts naming the field under `at`.
    pub fn problems(&self, at: &str) -> Vec<String> {
        let mut out = Vec::new();
        let in_unit = |x: f64| (0.0..=1.0).contains(&x);
        if !in_unit(self.busy) {
            out.push(format!("{at}.busy: {} is not in [0, 1]", self.busy));
        }
        if !in_unit(self.spread) {
            out.push(format!("{at}.spread: {} is not in [0, 1]", self.spread));
        }
        if let Some(m) = self.peak_memory.filter(|m| !(*m > 0.0 && *m <= 1.0)) {
            out.push(format!("{at}.peakMemory: {m} is not in (0, 1]"));
        }
        out
    }

    /// Gives each of `jobs` its use, drawn from `seed` in the jobs' order
    /// (a gang's members share their first member's draw).
    pub fn apply(&self, jobs: &mut [SimJob], seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6770_7555_7365);
        let mut gangs: std::collections::BTreeMap<String, f64> = Default::default();
        for j in jobs {
            let mut draw = || {
                let u: f64 = rng.random_range(-1.0..=1.0);
                (self.busy + u * self.spread).clamp(0.0, 1.0)
            };
            let busy = match &j.pod.group {
                Some(g) => *gangs.entry(g.name.clone()).or_insert_with(draw),
                None => draw(),
            };
            j.gpu_use = Some(JobGpuUse {
                busy,
                peak_memory: self.peak_memory,
            });
        }
    }
}

/// A run-time distribution: log-normal through a median and a p90.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunTime {
    /// Median run time (Go duration, e.g. `2h`).
    pub median: String,
    /// 90th percentile run time.
    pub p90: String,
}

/// Training jobs arriving at a steady rate.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrainingSpec {
    /// Name prefix of the jobs.
    pub name: String,
    /// Jobs to generate.
    pub jobs: u32,
    /// Mean arrivals per hour (Poisson).
    pub per_hour: f64,
    /// GPUs per pod, drawn uniformly from this list.
    pub gpus: Vec<u32>,
    /// Run time of a job.
    pub run_time: RunTime,
    /// Checkpoint interval (Go duration); absent: no checkpoints.
    #[serde(default)]
    pub checkpoint_interval: Option<String>,
    /// Time lost per restart.
    #[serde(default = "default_restart")]
    pub restart_overhead: String,
    /// Share of jobs that are gangs of several pods.
    #[serde(default)]
    pub gang_fraction: f64,
    /// Pods per gang.
    #[serde(default = "default_gang_size")]
    pub gang_size: u32,
    /// Acceptable GPU models (`quartermaster.dev/gpu-name` values); empty: any.
    #[serde(default)]
    pub gpu_models: Vec<String>,
    /// How long a checkpoint takes to write (default: see [`CheckpointSpec`]).
    #[serde(default)]
    pub checkpoint: CheckpointSpec,
    /// Each job's deadline (`quartermaster.dev/deadline`), if set.
    #[serde(default)]
    pub deadline: Option<DeadlineSpec>,
    /// Gangs arrive as ProvisioningRequests (Kueue's way): a gang's pods are
    /// created once its capacity is provisioned ([`super::provisioning`]).
    #[serde(default)]
    pub provisioning_request: bool,
    /// A node label key whose one value all of a gang's nodes must share,
    /// as a Workload API PodGroup's topology constraint or Kueue's
    /// `podset-required-topology` states it (e.g.
    /// `topology.k8s.aws/network-node-layer-3`); see
    /// [`crate::cluster::podgroups::apply`].
    #[serde(default)]
    pub gang_topology: Option<String>,
    /// How busy its pods keep their GPUs (idle GPU-hours, right sizes).
    #[serde(default)]
    pub gpu_use: Option<GpuUseSpec>,
    /// Its GPU demand asked through DRA ResourceClaims instead of
    /// `nvidia.com/gpu` counts (`super::dra`).
    #[serde(default)]
    pub dra: Option<super::dra::DraSpec>,
}

/// How long one checkpoint of a training pod takes to write: the pod's GPUs
/// times `writeSecondsPerGpu`, or times `gbPerGpu / writeGBps`. The default
/// (40 GB per GPU at 1.5 GB/s: 27 s per GPU, 3.6 minutes for 8 GPUs) is
/// the planner's own assumption for pods that do not say
/// ([`crate::plan::risk::default_checkpoint_write_s`]).
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointSpec {
    /// Seconds per GPU; overrides the size and rate.
    #[serde(default)]
    pub write_seconds_per_gpu: Option<f64>,
    /// GB of checkpoint state per GPU.
    #[serde(default = "default_gb_per_gpu")]
    pub gb_per_gpu: f64,
    /// GB/s one pod writes its checkpoint at.
    #[serde(default = "default_write_gbps", rename = "writeGBps")]
    pub write_gbps: f64,
}

impl Default for CheckpointSpec {
    fn default() -> CheckpointSpec {
        CheckpointSpec {
            write_seconds_per_gpu: None,
            gb_per_gpu: default_gb_per_gpu(),
            write_gbps: default_write_gbps(),
        }
    }
}

impl CheckpointSpec {
    /// Seconds one checkpoint of a pod with `gpus` GPUs takes.
    pub fn write_s(&self, gpus: f64) -> f64 {
        let per_gpu = self
            .write_seconds_per_gpu
            .unwrap_or(self.gb_per_gpu / self.write_gbps);
        per_gpu * gpus
    }

    fn check(&self, name: &str) -> Result<(), Error> {
        let ok = |x: f64| x.is_finite() && x >= 0.0;
        if !(ok(self.gb_per_gpu)
            && self.write_gbps.is_finite()
            && self.write_gbps > 0.0
            && self.write_seconds_per_gpu.is_none_or(ok))
        {
            return Err(Error {
                name: name.into(),
                message: format!(
                    "checkpoint: gbPerGpu and writeSecondsPerGpu must be non-negative and writeGBps positive, got {self:?}"
                ),
            });
        }
        Ok(())
    }
}

/// Each job's deadline: `factor` x its run time plus `allowance` after it is
/// submitted.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeadlineSpec {
    /// Multiple of the job's run time (at least 1).
    pub factor: f64,
    /// Time added for scheduling and startup (Go duration).
    #[serde(default = "default_allowance")]
    pub allowance: String,
}

fn default_gb_per_gpu() -> f64 {
    crate::plan::risk::DEFAULT_CHECKPOINT_GB_PER_GPU
}
fn default_write_gbps() -> f64 {
    crate::plan::risk::DEFAULT_CHECKPOINT_WRITE_GBPS
}
fn default_allowance() -> String {
    "15m".into()
}

/// An inference deployment whose replicas follow a daily curve.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InferenceSpec {
    /// Deployment name.
    pub name: String,
    /// GPUs per replica (whole), or use `migProfile`.
    #[serde(default = "one")]
    pub gpus: u32,
    /// MIG profile per replica instead of whole GPUs.
    #[serde(default)]
    pub mig_profile: Option<String>,
    /// Replicas at the quietest hour.
    pub min_replicas: u32,
    /// Replicas at the peak hour.
    pub max_replicas: u32,
    /// Local hour of the peak (0-23).
    pub peak_hour: u32,
    /// IANA time zone of the curve.
    #[serde(default = "utc")]
    pub time_zone: String,
    /// Only on weekdays (weekends stay at `minReplicas`).
    #[serde(default)]
    pub weekdays_only: bool,
    /// Spread replicas over zones (maxSkew 1).
    #[serde(default)]
    pub zone_spread: bool,
    /// How busy its pods keep their GPUs (idle GPU-hours, right sizes).
    #[serde(default)]
    pub gpu_use: Option<GpuUseSpec>,
    /// Its GPU demand asked through DRA ResourceClaims instead of
    /// `nvidia.com/gpu` counts (`super::dra`).
    #[serde(default)]
    pub dra: Option<super::dra::DraSpec>,
}

/// Bursts of short jobs during office hours on weekdays.
#[derive(Debug, Clone, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BurstSpec {
    /// Name prefix.
    pub name: String,
    /// Local start hour (inclusive).
    pub start_hour: u32,
    /// Local end hour (exclusive).
    pub end_hour: u32,
    /// IANA time zone.
    #[serde(default = "utc")]
    pub time_zone: String,
    /// Mean arrivals per office hour.
    pub per_hour: f64,
    /// GPUs per job.
    #[serde(default = "one")]
    pub gpus: u32,
    /// Run time of a job.
    pub run_time: RunTime,
    /// How busy its pods keep their GPUs (idle GPU-hours, right sizes).
    #[serde(default)]
    pub gpu_use: Option<GpuUseSpec>,
    /// Its GPU demand asked through DRA ResourceClaims instead of
    /// `nvidia.com/gpu` counts (`super::dra`).
    #[serde(default)]
    pub dra: Option<super::dra::DraSpec>,
}

/// A trace file replayed from the start of the simulation.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceSpec {
    /// Path of the CSV (relative to the scenario file).
    pub path: String,
    /// Only the first N jobs.
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only jobs that use GPUs.
    #[serde(default)]
    pub gpu_only: bool,
    /// MIG profile for fractional GPUs; absent: the share the scenario's
    /// pools offer ([`FractionalGpu::for_pools`]).
    #[serde(default)]
    pub mig_profile: Option<String>,
    /// GPU names of the trace's fleet mapped to ours (`{G2: t4}`), beside
    /// and before [`super::gpu_names::FOREIGN_GPU_NAMES`].
    #[serde(default)]
    pub gpu_names: std::collections::BTreeMap<String, String>,
    /// What to do with a GPU hint no pool can serve (default: drop it).
    #[serde(default)]
    pub on_unknown_gpu: super::gpu_names::OnUnknownGpu,
    /// Trace time (Go duration from the trace's start) replayed at the
    /// simulation's start; absent: 0.
    #[serde(default)]
    pub from: Option<String>,
    /// Trace time from which on no row is replayed; absent: the end.
    #[serde(default)]
    pub to: Option<String>,
    /// Whether pods alive at `from` are carried in (default true).
    #[serde(default = "yes")]
    pub carry_in: bool,
    /// Final statuses (`status` column) whose rows are left out, e.g.
    /// `[Failed, Pending]` for failed and never-scheduled pods.
    #[serde(default)]
    pub drop_status: Vec<String>,
    /// Rows still running at the trace's end: `as-given` (default),
    /// `run-to-end` or `drop`.
    #[serde(default)]
    pub censored: super::trace_window::CensoredRows,
    /// How busy its pods keep their GPUs (the trace format has no such
    /// column: one profile for every row).
    #[serde(default)]
    pub gpu_use: Option<GpuUseSpec>,
    /// Its GPU demand asked through DRA ResourceClaims instead of
    /// `nvidia.com/gpu` counts (`super::dra`).
    #[serde(default)]
    pub dra: Option<super::dra::DraSpec>,
}

fn default_restart() -> String {
    "5m".into()
}
fn default_gang_size() -> u32 {
    4
}
fn yes() -> bool {
    true
}
fn one() -> u32 {
    1
}
fn utc() -> String {
    "UTC".into()
}

/// A workload generator's errors (bad durations or zones in the spec).
#[derive(Debug, thiserror::Error)]
#[error("workload {name}: {message}")]
pub struct Error {
    /// The workload.
    pub name: String,
    /// What is wrong.
    pub message: String,
}

fn duration_s(name: &str, s: &str) -> Result<f64, Error> {
    crate::api::parse_duration(s)
        .map(|d| d.as_secs_f64())
        .map_err(|e| Error {
            name: name.into(),
            message: e.to_string(),
        })
}

fn zone(name: &str, tz: &str) -> Result<chrono_tz::Tz, Error> {
    crate::api::parse_time_zone(tz).map_err(|e| Error {
        name: name.into(),
        message: e.to_string(),
    })
}

/// Draws from the log-normal through `median` and `p90` (seconds).
fn log_normal(rng: &mut ChaCha8Rng, median: f64, p90: f64) -> f64 {
    let mu = median.max(1.0).ln();
    let sigma = ((p90.max(median) / median.max(1.0)).ln() / 1.281_551_6).max(0.0);
    // Box-Muller.
    let u1: f64 = rng.random_range(f64::EPSILON..1.0);
    let u2: f64 = rng.random();
    let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
    (mu + sigma * z).exp()
}

pub(crate) fn gpu_pod(name: &str, gpus: u32) -> Pod {
    let g = gpus.max(1) as i64;
    let mut p = Pod::new(
        name,
        Resources::new()
            .with(CPU, 4000 * g)
            .with(MEMORY, 32 * GIB * g)
            .with(l::RESOURCE_GPU, gpus as i64),
    );
    if gpus > 0 {
        p.tolerations.push(Toleration::exists(l::TAINT_GPU));
    }
    p
}

impl TrainingSpec {
    /// The jobs, arriving from `start`.
    ///
    /// # Errors
    /// A bad duration in the spec.
    pub fn generate(&self, start: Time, seed: u64) -> Result<Vec<SimJob>, Error> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let median = duration_s(&self.name, &self.run_time.median)?;
        let p90 = duration_s(&self.name, &self.run_time.p90)?;
        let interval = self
            .checkpoint_interval
            .as_deref()
            .map(|c| duration_s(&self.name, c))
            .transpose()?;
        let restart = duration_s(&self.name, &self.restart_overhead)?;
        self.checkpoint.check(&self.name)?;
        let deadline = match &self.deadline {
            Some(d) if d.factor.is_finite() && d.factor >= 1.0 => {
                Some((d.factor, duration_s(&self.name, &d.allowance)?))
            }
            Some(d) => {
                return Err(Error {
                    name: self.name.clone(),
                    message: format!("deadline factor {} must be at least 1", d.factor),
                })
            }
            None => None,
        };
        if self.gpus.is_empty() || self.per_hour <= 0.0 {
            return Err(Error {
                name: self.name.clone(),
                message: "gpus must list at least one count and perHour must be positive".into(),
            });
        }
        let mut t = 0.0;
        let mut jobs = Vec::new();
        for j in 0..self.jobs {
            t += -rng.random_range(f64::EPSILON..1.0f64).ln() / self.per_hour * 3600.0;
            let gpus = self.gpus[rng.random_range(0..self.gpus.len())];
            let work = log_normal(&mut rng, median, p90);
            let gang = rng.random_bool(self.gang_fraction.clamp(0.0, 1.0));
            let members = if gang { self.gang_size.max(1) } else { 1 };
            let submit = start + Span::milliseconds((t * 1000.0) as i64);
            let write = self.checkpoint.write_s(f64::from(gpus));
            for m in 0..members {
                let mut pod = gpu_pod(&format!("train/{}-{j}-{m}", self.name), gpus);
                pod.checkpoint_interval_s = interval;
                pod.checkpoints = interval.is_some();
                pod.expected_runtime_s = Some(work);
                pod.checkpoint_duration_s = interval.map(|_| write);
                pod.deadline = deadline.map(|(factor, allowance)| {
                    submit + Span::milliseconds(((factor * work + allowance) * 1000.0) as i64)
                });
                if !self.gpu_models.is_empty() {
                    let models: Vec<&str> = self.gpu_models.iter().map(String::as_str).collect();
                    pod.affinity.terms = vec![vec![crate::cluster::Requirement::new(
                        l::GPU_NAME,
                        crate::cluster::Operator::In,
                        &models,
                    )]];
                }
                if gang {
                    let group = format!("train/{}-{j}", self.name);
                    pod.group = Some(GroupRef {
                        name: group.clone(),
                        min_member: members,
                    });
                    if let Some(key) = &self.gang_topology {
                        let spec = crate::cluster::podgroups::PodGroupSpec {
                            topology: vec![key.clone()],
                            ..crate::cluster::podgroups::PodGroupSpec::of_size(members)
                        };
                        crate::cluster::podgroups::apply(&mut pod, &group, &spec);
                    }
                    if self.provisioning_request {
                        pod.labels
                            .insert(super::provisioning::LABEL.into(), "true".into());
                    }
                }
                jobs.push(SimJob {
                    pod,
                    submit,
                    work_s: work,
                    checkpoint_interval_s: interval,
                    checkpoint_write_s: write,
                    restart_overhead_s: restart,
                    stateless: false,
                    gpu_share: None,
                    gpu_use: None,
                });
            }
        }
        Ok(jobs)
    }
}

impl InferenceSpec {
    /// Replicas wanted at local hour `hour` on a weekday (or any day).
    pub fn replicas_at(&self, hour: u32, weekend: bool) -> u32 {
        if weekend && self.weekdays_only {
            return self.min_replicas;
        }
        let phase = 2.0 * std::f64::consts::PI * (hour as f64 - self.peak_hour as f64) / 24.0;
        let level = (1.0 + phase.cos()) / 2.0;
        let span = self.max_replicas.saturating_sub(self.min_replicas) as f64;
        self.min_replicas + (span * level).round() as u32
    }

    /// One job per contiguous stretch in which replica `i` is wanted, hour by
    /// hour over `[start, start + length)`.
    ///
    /// # Errors
    /// A bad time zone.
    pub fn generate(&self, start: Time, length: Span) -> Result<Vec<SimJob>, Error> {
        let tz = zone(&self.name, &self.time_zone)?;
        let hours = length.num_hours().max(0);
        let mut jobs = Vec::new();
        let mut open: Vec<Option<Time>> = vec![None; self.max_replicas as usize];
        let mut count = 0;
        let mut close = |i: usize, from: Time, to: Time, jobs: &mut Vec<SimJob>| {
            let mut pod = match &self.mig_profile {
                Some(p) => {
                    let mut pod = Pod::new(
                        "",
                        Resources::new()
                            .with(CPU, 2000)
                            .with(MEMORY, 8 * GIB)
                            .with(&format!("{}{p}", l::RESOURCE_MIG_PREFIX), 1),
                    );
                    pod.tolerations.push(Toleration::exists(l::TAINT_GPU));
                    pod
                }
                None => gpu_pod("", self.gpus),
            };
            pod.name = format!("serve/{}-{i}-{count}", self.name);
            count += 1;
            pod.expected_runtime_s = Some((to - from).num_seconds() as f64);
            if self.zone_spread {
                pod.zone_spread = Some(ZoneSpread {
                    max_skew: 1,
                    selector: format!("serve/app={}", self.name),
                });
            }
            jobs.push(SimJob {
                pod,
                submit: from,
                work_s: (to - from).num_seconds() as f64,
                checkpoint_interval_s: None,
                checkpoint_write_s: 0.0,
                restart_overhead_s: 60.0,
                stateless: true,
                gpu_share: None,
                gpu_use: None,
            });
        };
        for h in 0..=hours {
            let at = start + Span::hours(h);
            let local = tz.from_utc_datetime(&at.naive_utc());
            let weekend = local.weekday().number_from_monday() >= 6;
            let want = if h == hours {
                0
            } else {
                self.replicas_at(local.hour(), weekend)
            };
            for (i, slot) in open.iter_mut().enumerate() {
                let live = (i as u32) < want;
                match (*slot, live) {
                    (None, true) => *slot = Some(at),
                    (Some(from), false) => {
                        close(i, from, at, &mut jobs);
                        *slot = None;
                    }
                    _ => {}
                }
            }
        }
        jobs.sort_by(|a, b| a.submit.cmp(&b.submit).then(a.pod.name.cmp(&b.pod.name)));
        Ok(jobs)
    }
}

impl BurstSpec {
    /// Short jobs arriving during office hours on weekdays.
    ///
    /// # Errors
    /// A bad duration or time zone.
    pub fn generate(&self, start: Time, length: Span, seed: u64) -> Result<Vec<SimJob>, Error> {
        let tz = zone(&self.name, &self.time_zone)?;
        let median = duration_s(&self.name, &self.run_time.median)?;
        let p90 = duration_s(&self.name, &self.run_time.p90)?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut jobs = Vec::new();
        for h in 0..length.num_hours().max(0) {
            let at = start + Span::hours(h);
            let local = tz.from_utc_datetime(&at.naive_utc());
            let office = local.weekday().number_from_monday() <= 5
                && (self.start_hour..self.end_hour).contains(&local.hour());
            if !office {
                continue;
            }
            let mut t = 0.0;
            loop {
                t += -rng.random_range(f64::EPSILON..1.0f64).ln() / self.per_hour.max(1e-9);
                if t >= 1.0 {
                    break;
                }
                let work = log_normal(&mut rng, median, p90);
                let mut pod = gpu_pod(&format!("burst/{}-{}", self.name, jobs.len()), self.gpus);
                pod.expected_runtime_s = Some(work);
                jobs.push(SimJob {
                    pod,
                    submit: at + Span::milliseconds((t * 3_600_000.0) as i64),
                    work_s: work,
                    checkpoint_interval_s: None,
                    checkpoint_write_s: 0.0,
                    restart_overhead_s: 60.0,
                    stateless: false,
                    gpu_share: None,
                    gpu_use: None,
                });
            }
        }
        Ok(jobs)
    }
}

impl TraceSpec {
    /// The rows it replays (`gpuOnly`, `limit`).
    pub fn replayed<'r>(&self, rows: &'r [TraceJob]) -> impl Iterator<Item = &'r TraceJob> + 'r {
        let gpu_only = self.gpu_only;
        rows.iter()
            .filter(move |r| !gpu_only || r.gpus > 0.0)
            .take(self.limit.unwrap_or(usize::MAX))
    }

    /// The window of rows this source replays, over a simulation of
    /// `horizon_s` seconds (its durations were checked with the scenario).
    pub fn window(&self, horizon_s: f64) -> super::trace_window::Window {
        let seconds = |d: &Option<String>| {
            d.as_deref()
                .and_then(|d| crate::api::parse_duration(d).ok())
                .map(|d| d.as_secs_f64())
        };
        super::trace_window::Window {
            from_s: seconds(&self.from).unwrap_or(0.0),
            to_s: seconds(&self.to),
            carry_in: self.carry_in,
            drop_status: self.drop_status.clone(),
            censored: self.censored,
            horizon_s,
        }
    }

    /// Jobs from parsed trace rows, submitted relative to `start`, their
    /// fractional GPUs as `fractional` says (see
    /// [`FractionalGpu::for_pools`]).
    pub fn jobs(&self, rows: &[TraceJob], start: Time, fractional: &FractionalGpu) -> Vec<SimJob> {
        self.replayed(rows)
            .map(|r| SimJob {
                pod: Pod {
                    // The trace's pods are long-running serving instances.
                    holds_work: false,
                    ..r.to_pod("trace", fractional)
                },
                gpu_share: fractional.request(r.gpus).and_then(|g| g.gpu_share),
                gpu_use: None,
                submit: start + Span::milliseconds((r.submit_s * 1000.0) as i64),
                work_s: r.duration_s,
                checkpoint_interval_s: None,
                checkpoint_write_s: 0.0,
                restart_overhead_s: 60.0,
                stateless: true,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn monday() -> Time {
        chrono::Utc.with_ymd_and_hms(2026, 1, 5, 0, 0, 0).unwrap()
    }

    fn training() -> TrainingSpec {
        TrainingSpec {
            name: "t".into(),
            jobs: 200,
            per_hour: 10.0,
            gpus: vec![1, 8],
            run_time: RunTime {
                median: "2h".into(),
                p90: "8h".into(),
            },
            checkpoint_interval: Some("30m".into()),
            restart_overhead: "5m".into(),
            gang_fraction: 0.25,
            gang_size: 4,
            gpu_models: vec![],
            checkpoint: CheckpointSpec::default(),
            deadline: None,
            provisioning_request: false,
            gang_topology: None,
            gpu_use: None,
            dra: None,
        }
    }

    #[test]
    fn training_jobs_are_reproducible_and_follow_the_spec() {
        let a = training().generate(monday(), 1).unwrap();
        assert_eq!(a, training().generate(monday(), 1).unwrap());
        assert_ne!(a, training().generate(monday(), 2).unwrap());
        assert!(a
            .iter()
            .all(|j| j.checkpoint_interval_s == Some(1800.0) && j.pod.checkpoints));
        let gangs = a.iter().filter(|j| j.pod.group.is_some()).count();
        assert!(gangs > 0 && gangs % 4 == 0, "{gangs} gang pods");
        // The median of the drawn run times is near the spec's 2 h.
        let mut w: Vec<f64> = a.iter().map(|j| j.work_s).collect();
        w.sort_by(f64::total_cmp);
        let median = w[w.len() / 2];
        assert!((3600.0..14400.0).contains(&median), "median {median}");
        // Arrivals at 10 per hour: 200 jobs take roughly 20 hours.
        let last = a.iter().map(|j| j.submit).max().unwrap();
        let hours = (last - monday()).num_minutes() as f64 / 60.0;
        assert!((12.0..30.0).contains(&hours), "{hours} h");
    }

    #[test]
    fn checkpoint_write_times_grow_with_gpus_and_deadlines_follow_the_run_time() {
        let mut spec = training();
        spec.deadline = Some(DeadlineSpec {
            factor: 1.5,
            allowance: "10m".into(),
        });
        let jobs = spec.generate(monday(), 1).unwrap();
        for j in &jobs {
            let gpus = j.pod.requests.gpus();
            assert!((j.checkpoint_write_s - gpus * 40.0 / 1.5).abs() < 1e-9);
            assert_eq!(j.pod.checkpoint_duration_s, Some(j.checkpoint_write_s));
            let due = (j.pod.deadline.unwrap() - j.submit).num_milliseconds() as f64 / 1000.0;
            assert!((due - (1.5 * j.work_s + 600.0)).abs() < 1.0, "{due}");
        }
        assert!(
            jobs.iter().any(|j| j.checkpoint_write_s > 180.0),
            "8-GPU pods take minutes"
        );
        spec.checkpoint.write_seconds_per_gpu = Some(10.0);
        let fast = spec.generate(monday(), 1).unwrap();
        assert!(fast
            .iter()
            .all(|j| j.checkpoint_write_s == 10.0 * j.pod.requests.gpus()));
        spec.checkpoint.write_gbps = 0.0;
        assert!(spec.generate(monday(), 1).is_err());
        let mut early = training();
        early.deadline = Some(DeadlineSpec {
            factor: 0.5,
            allowance: "0s".into(),
        });
        assert!(early.generate(monday(), 1).is_err());
    }

    #[test]
    fn inference_replicas_follow_the_daily_curve() {
        let spec = InferenceSpec {
            name: "s".into(),
            gpus: 1,
            mig_profile: None,
            min_replicas: 2,
            max_replicas: 10,
            peak_hour: 14,
            time_zone: "UTC".into(),
            weekdays_only: true,
            zone_spread: true,
            gpu_use: None,
            dra: None,
        };
        assert_eq!(spec.replicas_at(14, false), 10);
        assert_eq!(spec.replicas_at(2, false), 2);
        assert_eq!(
            spec.replicas_at(14, true),
            2,
            "weekends stay at the minimum"
        );
        let jobs = spec.generate(monday(), Span::days(1)).unwrap();
        // At 14:00 exactly `max` replicas are live.
        let at = monday() + Span::hours(14);
        let live = jobs
            .iter()
            .filter(|j| j.submit <= at && at < j.submit + Span::seconds(j.work_s as i64))
            .count();
        assert_eq!(live, 10);
        assert!(jobs.iter().all(|j| j.pod.zone_spread.is_some()));
    }

    #[test]
    fn bursts_happen_only_in_office_hours_on_weekdays() {
        let spec = BurstSpec {
            name: "b".into(),
            start_hour: 9,
            end_hour: 17,
            time_zone: "Europe/Berlin".into(),
            per_hour: 6.0,
            gpus: 1,
            run_time: RunTime {
                median: "10m".into(),
                p90: "30m".into(),
            },
            gpu_use: None,
            dra: None,
        };
        let tz = chrono_tz::Europe::Berlin;
        let jobs = spec.generate(monday(), Span::days(7), 3).unwrap();
        assert!(!jobs.is_empty());
        for j in &jobs {
            let local = tz.from_utc_datetime(&j.submit.naive_utc());
            assert!(local.weekday().number_from_monday() <= 5);
            assert!((9..17).contains(&local.hour()), "{local}");
        }
        assert!(spec.generate(monday(), Span::days(1), 3).is_ok());
        let bad = BurstSpec {
            time_zone: "Mars/Olympus".into(),
            ..spec
        };
        assert!(bad.generate(monday(), Span::days(1), 3).is_err());
    }

    #[test]
    fn a_gpu_use_profile_gives_each_job_a_seeded_draw_within_its_spread_and_a_gang_one() {
        let spec = GpuUseSpec {
            busy: 0.4,
            spread: 0.3,
            peak_memory: Some(0.25),
        };
        let mut a = training().generate(monday(), 1).unwrap();
        spec.apply(&mut a, 9);
        let busy: Vec<f64> = a.iter().map(|j| j.gpu_use.unwrap().busy).collect();
        assert!(busy.iter().all(|b| (0.1..=0.7).contains(b)), "{busy:?}");
        let mean = busy.iter().sum::<f64>() / busy.len() as f64;
        assert!((mean - 0.4).abs() < 0.05, "{mean}");
        assert!(a
            .iter()
            .all(|j| j.gpu_use.unwrap().peak_memory == Some(0.25)));
        for j in &a {
            if let Some(g) = &j.pod.group {
                let first = a.iter().find(|k| k.pod.group.as_ref() == Some(g)).unwrap();
                assert_eq!(j.gpu_use, first.gpu_use);
            }
        }
        let mut b = training().generate(monday(), 1).unwrap();
        spec.apply(&mut b, 9);
        assert_eq!(a, b);
        let bad = GpuUseSpec {
            busy: 1.5,
            spread: -0.1,
            peak_memory: Some(0.0),
        };
        let p = bad.problems("workloads[0].training.gpuUse");
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(
            p[0].starts_with("workloads[0].training.gpuUse.busy: 1.5"),
            "{p:?}"
        );
    }
}
