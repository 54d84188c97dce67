//! The series of GPU use read from DCGM (`docs/gpu-use.md`): each pool's
//! and each workload's utilisation over the read window, idle GPU-hours,
//! and how the reads go (failures, series left out). Set by the controller
//! from each new reading (`controller::gpu_use`).

use super::FloatGauge;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// A counter of fractional amounts (GPU-hours).
pub type FloatCounter = Counter<f64, AtomicU64>;

/// Labels of per-pool GPU series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolGpuLabels {
    /// NodePool name (empty for GPUs on nodes that are not ours).
    pub nodepool: String,
}

/// Labels of per-workload GPU series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkloadGpuLabels {
    /// Namespace.
    pub namespace: String,
    /// The workload (Deployment, Job, StatefulSet, or the bare pod).
    pub workload: String,
}

/// Labels of the read counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadLabels {
    /// `unreachable`, `timeout`, `status`, `answer`, `refused` for failed
    /// reads; `missing_labels`, `absurd` for series left out.
    pub reason: String,
}

/// GPU use metrics.
#[derive(Debug, Default)]
pub struct GpuUseMetrics {
    /// Mean utilisation of the pool's GPUs over the window, 0..=1.
    pub utilization: Family<PoolGpuLabels, FloatGauge>,
    /// GPUs that reported a utilisation, by pool.
    pub measured: Family<PoolGpuLabels, Gauge>,
    /// Mean utilisation of a workload's GPUs over the window, 0..=1.
    pub workload_utilization: Family<WorkloadGpuLabels, FloatGauge>,
    /// GPU-hours spent idle (under the idle threshold), by pool.
    pub idle_hours: Family<PoolGpuLabels, FloatCounter>,
    /// 1 while the last read succeeded.
    pub read_ok: Gauge,
    /// Reads that failed, by reason.
    pub read_failures: Family<ReadLabels, Counter>,
    /// Series left out of reads, by reason.
    pub series_dropped: Family<ReadLabels, Counter>,
}

impl GpuUseMetrics {
    /// Registers the series under `registry` (the `quartermaster` prefix).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "gpu_utilization_ratio",
            "Mean utilisation of the pool's GPUs over the read window (DCGM)",
            self.utilization.clone(),
        );
        r.register(
            "gpus_measured",
            "GPUs whose utilisation DCGM reported, by pool",
            self.measured.clone(),
        );
        r.register(
            "workload_gpu_utilization_ratio",
            "Mean utilisation of a workload's GPUs over the read window (DCGM)",
            self.workload_utilization.clone(),
        );
        r.register(
            "gpu_idle_hours",
            "GPU-hours spent under the idle threshold, by pool",
            self.idle_hours.clone(),
        );
        r.register(
            "gpu_use_read_ok",
            "1 while the last read of GPU use from Prometheus succeeded",
            self.read_ok.clone(),
        );
        r.register(
            "gpu_use_read_failures",
            "Reads of GPU use from Prometheus that failed, by reason",
            self.read_failures.clone(),
        );
        r.register(
            "gpu_use_series_dropped",
            "DCGM series left out of GPU use reads, by reason",
            self.series_dropped.clone(),
        );
    }
}
