//! Workload traces in the replay CSV format of `shared/traces/README.md`:
//! `job_id, submit_time_s, duration_s, gpus, gpu_type_hint, cpu_milli,
//! memory_mib`, and where present `queue_s, status, censored` (other
//! columns are ignored). Parsing is pure: the
//! caller reads the file. Bad rows are errors that name the line; nothing is
//! dropped silently.

use crate::api::labels as l;
use crate::catalog::mig;
use crate::cluster::resources::{CPU, MEMORY};
use crate::cluster::{Operator, Pod, Requirement, Resources, Toleration};
use serde::Deserialize;

/// A trace that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The header lacks a required column.
    #[error("trace header lacks column {0:?}")]
    MissingColumn(&'static str),
    /// A row does not parse or holds an impossible value.
    #[error("trace line {line}: {message}")]
    Row {
        /// 1-based line number in the file (the header is line 1).
        line: u64,
        /// What is wrong.
        message: String,
    },
}

/// One job (pod) of a trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceJob {
    /// Job identity.
    pub job_id: String,
    /// Seconds from trace start at which the pod appears.
    pub submit_s: f64,
    /// Seconds the pod runs once placed.
    pub duration_s: f64,
    /// GPUs requested; fractions mean a share of one GPU.
    pub gpus: f64,
    /// Acceptable GPU models (short names such as `a100`), empty for any.
    pub gpu_models: Vec<String>,
    /// CPU request, millicores.
    pub cpu_milli: u64,
    /// Memory request, MiB.
    pub memory_mib: u64,
    /// Seconds from creation to scheduling in the original cluster.
    pub queue_s: Option<f64>,
    /// Final status in the source (`Failed`, `Pending`, ...), if any.
    pub status: String,
    /// Whether its lifetime runs past either end of the trace.
    pub censored: Censored,
}

/// Which ends of the trace a row's lifetime runs past (`censored` column).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Censored {
    /// Fully observed (also an empty or absent column).
    #[default]
    None,
    /// It existed before the trace began.
    Start,
    /// It was still running when the trace ended: its duration is a lower
    /// bound.
    End,
    /// Both.
    Both,
}

impl Censored {
    /// Still running when the trace ended.
    pub fn at_end(self) -> bool {
        matches!(self, Censored::End | Censored::Both)
    }
}

#[derive(Deserialize)]
struct Row {
    job_id: String,
    submit_time_s: f64,
    duration_s: f64,
    gpus: f64,
    #[serde(default)]
    gpu_type_hint: String,
    cpu_milli: f64,
    memory_mib: f64,
    #[serde(default)]
    queue_s: Option<f64>,
    #[serde(default)]
    status: String,
    #[serde(default)]
    censored: String,
}

const REQUIRED: [&str; 7] = [
    "job_id",
    "submit_time_s",
    "duration_s",
    "gpus",
    "gpu_type_hint",
    "cpu_milli",
    "memory_mib",
];

/// Reads a trace, sorted by submit time (then job id).
///
/// # Errors
/// A missing column, or the first bad row with its line number.
pub fn parse(csv_text: &str) -> Result<Vec<TraceJob>, Error> {
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(csv_text.as_bytes());
    let headers = reader.headers().map_err(|e| Error::Row {
        line: 1,
        message: e.to_string(),
    })?;
    for col in REQUIRED {
        if !headers.iter().any(|h| h == col) {
            return Err(Error::MissingColumn(col));
        }
    }
    let mut jobs = Vec::new();
    for result in reader.deserialize::<Row>() {
        let row_err = |line: u64, message: String| Error::Row { line, message };
        let row = result.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            row_err(line, e.to_string())
        })?;
        let line = jobs.len() as u64 + 2;
        let finite_non_negative = |name: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(v)
            } else {
                Err(row_err(
                    line,
                    format!("{name} = {v} is not a non-negative number"),
                ))
            }
        };
        if row.job_id.is_empty() {
            return Err(row_err(line, "empty job_id".into()));
        }
        let censored = match row.censored.trim() {
            "" => Censored::None,
            c => serde_json::from_value(serde_json::Value::String(c.to_ascii_lowercase()))
                .map_err(|_| {
                    row_err(
                        line,
                        format!("censored = {c:?} is not none, start, end or both"),
                    )
                })?,
        };
        let queue_s = match row.queue_s {
            Some(q) => Some(finite_non_negative("queue_s", q)?),
            None => None,
        };
        let job = TraceJob {
            submit_s: finite_non_negative("submit_time_s", row.submit_time_s)?,
            duration_s: finite_non_negative("duration_s", row.duration_s)?,
            gpus: finite_non_negative("gpus", row.gpus)?,
            gpu_models: row
                .gpu_type_hint
                .split('|')
                .map(|m| m.trim().to_ascii_lowercase())
                .filter(|m| !m.is_empty())
                .collect(),
            cpu_milli: finite_non_negative("cpu_milli", row.cpu_milli)?.ceil() as u64,
            memory_mib: finite_non_negative("memory_mib", row.memory_mib)?.ceil() as u64,
            queue_s,
            status: row.status.trim().to_string(),
            censored,
            job_id: row.job_id,
        };
        jobs.push(job);
    }
    jobs.sort_by(|a, b| {
        a.submit_s
            .total_cmp(&b.submit_s)
            .then(a.job_id.cmp(&b.job_id))
    });
    Ok(jobs)
}

/// How a fractional GPU request (`gpus` below 1, e.g. 0.46) becomes a
/// Kubernetes resource: as a share of the size the scenario's pools offer
/// ([`FractionalGpu::for_pools`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum FractionalGpu {
    /// No pool shares its GPUs: a fraction takes a whole GPU.
    #[default]
    Whole,
    /// Time-sliced shares (`nvidia.com/gpu.shared`), `replicas` to a GPU: a
    /// fraction `f` takes `ceil(f x replicas)` of them.
    TimeSliced {
        /// Shares per GPU (the pool's `gpuSharing.replicas`).
        replicas: u32,
    },
    /// MIG instances of these profiles (the pools' `migProfile`s): a
    /// fraction takes one instance of the smallest whose share of GPU memory
    /// covers it ([`mig::memory_share`]).
    Mig(Vec<String>),
}

/// A trace job's GPU request as a resource.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRequest {
    /// `nvidia.com/gpu`, `nvidia.com/gpu.shared` or `nvidia.com/mig-<profile>`.
    pub resource: String,
    /// How many.
    pub count: i64,
    /// GPUs held when the resource alone does not say: the time-sliced
    /// shares' part of a GPU (`count / replicas`).
    pub gpu_share: Option<f64>,
}

impl FractionalGpu {
    /// The sharing the scenario's pools offer a fraction: `mig_profile` if
    /// the trace names one; else the time slicing of the heaviest pool that
    /// slices its GPUs; else the MIG profiles of the pools that partition
    /// them; else whole GPUs.
    pub fn for_pools(pools: &[crate::api::NodePool], mig_profile: Option<&str>) -> FractionalGpu {
        if let Some(p) = mig_profile {
            return FractionalGpu::Mig(vec![p.to_string()]);
        }
        let mut by_weight: Vec<&crate::api::NodePool> = pools.iter().collect();
        by_weight.sort_by_key(|p| std::cmp::Reverse(p.spec.weight_or_default()));
        if let Some(replicas) = by_weight
            .iter()
            .find_map(|p| p.spec.gpu_sharing.shared_replicas())
        {
            return FractionalGpu::TimeSliced { replicas };
        }
        let profiles: Vec<String> = by_weight
            .iter()
            .filter_map(|p| p.spec.gpu_sharing.mig_profile().map(str::to_string))
            .collect();
        if profiles.is_empty() {
            FractionalGpu::Whole
        } else {
            FractionalGpu::Mig(profiles)
        }
    }

    /// The request for `gpus` GPUs: whole GPUs for a whole number (or a
    /// fraction above one, rounded up), a share for a fraction below one,
    /// a whole GPU when no share covers it; `None` for no GPU.
    pub fn request(&self, gpus: f64) -> Option<GpuRequest> {
        let whole = |n: f64| GpuRequest {
            resource: l::RESOURCE_GPU.to_string(),
            count: n.ceil() as i64,
            gpu_share: None,
        };
        if gpus <= 0.0 {
            return None;
        }
        if gpus.fract() == 0.0 || gpus > 1.0 {
            return Some(whole(gpus));
        }
        Some(match self {
            FractionalGpu::Whole => whole(1.0),
            FractionalGpu::TimeSliced { replicas } => {
                let r = f64::from(*replicas);
                // Forgive float noise: 0.25 x 4 is one share, not two.
                let n = (gpus * r - 1e-9).ceil().max(1.0);
                if n >= r {
                    whole(1.0)
                } else {
                    GpuRequest {
                        resource: l::RESOURCE_GPU_SHARED.to_string(),
                        count: n as i64,
                        gpu_share: Some(n / r),
                    }
                }
            }
            FractionalGpu::Mig(profiles) => profiles
                .iter()
                .filter_map(|p| Some((mig::memory_share(p)?, p)))
                .filter(|(share, _)| *share >= gpus - 1e-9)
                .min_by(|a, b| a.0.total_cmp(&b.0))
                .map_or_else(
                    || whole(1.0),
                    |(_, p)| GpuRequest {
                        resource: mig::resource_name(p),
                        count: 1,
                        gpu_share: None,
                    },
                ),
        })
    }
}

impl TraceJob {
    /// The pod that replays this job: its GPUs as `fractional` says
    /// ([`FractionalGpu::request`]); the GPU toleration when it uses GPUs;
    /// its model hint as a `quartermaster.dev/gpu-name In [...]` requirement.
    pub fn to_pod(&self, namespace: &str, fractional: &FractionalGpu) -> Pod {
        let mut requests = Resources::new()
            .with(CPU, self.cpu_milli as i64)
            .with(MEMORY, self.memory_mib as i64 * (1 << 20));
        if let Some(gpu) = fractional.request(self.gpus) {
            requests.set(&gpu.resource, gpu.count);
        }
        let mut pod = Pod::new(&format!("{namespace}/{}", self.job_id), requests);
        pod.expected_runtime_s = Some(self.duration_s);
        if self.gpus > 0.0 {
            pod.tolerations.push(Toleration::exists(l::TAINT_GPU));
        }
        if !self.gpu_models.is_empty() {
            let models: Vec<&str> = self.gpu_models.iter().map(String::as_str).collect();
            pod.affinity.terms = vec![vec![Requirement::new(l::GPU_NAME, Operator::In, &models)]];
        }
        pod
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "job_id,submit_time_s,duration_s,gpus,gpu_type_hint,cpu_milli,memory_mib,queue_s,role\n";

    #[test]
    fn rows_become_jobs_sorted_by_submit_time_with_extra_columns_ignored() {
        let text = format!(
            "{HEADER}b,20,600,1,,8000,40960,3,HN\na,10,3600,8,A100|h100,96000,1048576,,HN\nc,20,60,0,,48000,307200,,CN\n"
        );
        let jobs = parse(&text).unwrap();
        let ids: Vec<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(jobs[0].gpu_models, ["a100", "h100"]);
        assert_eq!(jobs[0].cpu_milli, 96000);
        assert_eq!(jobs[2].gpus, 0.0);
    }

    #[test]
    fn queue_status_and_censoring_are_read_when_present() {
        let text = "job_id,submit_time_s,duration_s,gpus,gpu_type_hint,cpu_milli,memory_mib,queue_s,status,censored\n\
                    a,0,10,1,,1000,1024,,Failed,both\nb,5,10,1,,1000,1024,7.5,,\n";
        let jobs = parse(text).unwrap();
        assert_eq!(
            (jobs[0].queue_s, jobs[0].status.as_str(), jobs[0].censored),
            (None, "Failed", Censored::Both)
        );
        assert_eq!(
            (jobs[1].queue_s, jobs[1].censored),
            (Some(7.5), Censored::None)
        );
        let e = parse(&text.replace("both", "later"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("censored"), "{e}");
    }

    #[test]
    fn a_bad_row_names_its_line_and_a_missing_column_is_named() {
        let text = format!("{HEADER}a,0,10,1,,1000,1024,,\nb,0,-5,1,,1000,1024,,\n");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("duration_s"), "{e}");
        let e = parse(&format!("{HEADER}a,0,ten,1,,1000,1024,,\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
        let e = parse("job_id,submit_time_s\nx,1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("duration_s"), "{e}");
    }

    fn job(gpus: f64) -> TraceJob {
        TraceJob {
            job_id: "j".into(),
            submit_s: 0.0,
            duration_s: 100.0,
            gpus,
            gpu_models: vec![],
            cpu_milli: 1000,
            memory_mib: 1024,
            ..Default::default()
        }
    }

    #[test]
    fn a_quarter_gpu_takes_one_time_sliced_share_not_a_gpu() {
        let sliced = FractionalGpu::TimeSliced { replicas: 4 };
        let p = job(0.25).to_pod("t", &sliced);
        assert_eq!(p.requests.get(l::RESOURCE_GPU_SHARED), 1);
        assert_eq!(p.requests.get(l::RESOURCE_GPU), 0);
        assert_eq!(p.expected_runtime_s, Some(100.0));
        assert_eq!(sliced.request(0.25).unwrap().gpu_share, Some(0.25));
        // 0.46 of a GPU needs two quarters; 0.8 of one is a whole GPU.
        let r = sliced.request(0.46).unwrap();
        assert_eq!((r.resource.as_str(), r.count), (l::RESOURCE_GPU_SHARED, 2));
        assert_eq!(sliced.request(0.8).unwrap().resource, l::RESOURCE_GPU);
        assert_eq!(
            job(4.0).to_pod("t", &sliced).requests.get(l::RESOURCE_GPU),
            4
        );
        assert_eq!(sliced.request(0.0), None);
    }

    #[test]
    fn a_fraction_takes_the_smallest_mig_profile_whose_memory_covers_it() {
        let mig = FractionalGpu::Mig(vec!["3g.40gb".into(), "1g.10gb".into()]);
        let p = job(0.46).to_pod("t", &mig);
        assert_eq!(p.requests.get("nvidia.com/mig-3g.40gb"), 1);
        assert_eq!(p.requests.get(l::RESOURCE_GPU), 0);
        assert_eq!(mig.request(0.1).unwrap().resource, "nvidia.com/mig-1g.10gb");
        // No profile covers 0.7 of a GPU: a whole one.
        assert_eq!(mig.request(0.7).unwrap().resource, l::RESOURCE_GPU);
        assert_eq!(
            FractionalGpu::Whole.request(0.46).unwrap().resource,
            l::RESOURCE_GPU
        );
    }

    #[test]
    fn the_pools_decide_the_share_heaviest_time_slicing_first() {
        use crate::api::{GpuSharing, NodePool, NodePoolSpec};
        let pool = |name: &str, weight: i32, sharing: GpuSharing| {
            NodePool::new(
                name,
                NodePoolSpec {
                    weight: Some(weight),
                    gpu_sharing: sharing,
                    ..NodePoolSpec::default()
                },
            )
        };
        let pools = [
            pool("whole", 90, GpuSharing::default()),
            pool("mig", 50, GpuSharing::mig("1g.10gb")),
            pool("light", 10, GpuSharing::time_slicing(2)),
            pool("shared", 60, GpuSharing::time_slicing(4)),
        ];
        assert_eq!(
            FractionalGpu::for_pools(&pools, None),
            FractionalGpu::TimeSliced { replicas: 4 }
        );
        assert_eq!(
            FractionalGpu::for_pools(&pools[..2], None),
            FractionalGpu::Mig(vec!["1g.10gb".into()])
        );
        assert_eq!(
            FractionalGpu::for_pools(&pools, Some("3g.40gb")),
            FractionalGpu::Mig(vec!["3g.40gb".into()])
        );
        assert_eq!(
            FractionalGpu::for_pools(&pools[..1], None),
            FractionalGpu::Whole
        );
    }
}
