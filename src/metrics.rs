//! Prometheus metrics of the live controller, in OpenMetrics text
//! (prometheus-client). One [`Metrics`] value is shared (`Arc`) by every task;
//! each field is a metric family that the code updates where the thing it
//! counts happens. Names start with `quartermaster_`; see
//! `deploy/grafana/quartermaster.json` for the dashboard built on them.
//! [`karpenter`] holds the series that port Karpenter's.

pub mod gpu_use;
pub mod health;
pub mod karpenter;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Labels of per-node gauges: pool, instance type and capacity type.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    /// NodePool name.
    pub nodepool: String,
    /// EC2 instance type.
    pub instance_type: String,
    /// `spot` or `on-demand`.
    pub capacity_type: String,
}

/// Labels of per-pool metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    /// NodePool name.
    pub nodepool: String,
}

/// Labels of the interruption counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InterruptionLabels {
    /// NodePool name (empty when the instance is not ours).
    pub nodepool: String,
    /// `spot-interruption`, `rebalance`, `state-change`, `scheduled-change`.
    pub kind: String,
}

/// Labels of the ProvisioningRequest condition counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProvisioningLabels {
    /// Condition set: `Accepted`, `Provisioned`, `Failed`,
    /// `BookingExpired`, `CapacityRevoked`.
    pub condition: String,
    /// `True` or `False`.
    pub status: String,
    /// The condition's reason (`CapacityIsProvisioned`, `CapacityIsNotFound`, ...).
    pub reason: String,
}

/// Labels of the CapacityBuffer gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BufferLabels {
    /// The buffer, `namespace/name`.
    pub buffer: String,
    /// `held`, `provisioning` or `infeasible`.
    pub state: String,
}

/// Labels of the launch failure counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaunchFailureLabels {
    /// NodePool name.
    pub nodepool: String,
    /// The provider's error code (`InsufficientInstanceCapacity`, ...), or
    /// `launch-timeout` / `registration-timeout`.
    pub reason: String,
}

/// Labels of the notice-queue counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MessageLabels {
    /// `accepted`, `duplicate`, `malformed`, `unknown`.
    pub outcome: String,
}

/// Labels of the decision-failure counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    /// The core's step (`provisioning`, `interruptions`, `consolidation`, ...).
    pub step: String,
}

/// Labels of the failed-action counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// `launch`, `cordon`, `uncordon`, `checkpoint`, `evict`, `delete`.
    pub action: String,
}

/// Labels of the pricing-source gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PricingLabels {
    /// `on-demand` or `spot`.
    pub source: String,
}

/// A gauge holding a float (USD per hour).
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// Every metric the controller exports.
#[derive(Debug)]
pub struct Metrics {
    /// Pods waiting for capacity that Quartermaster considers (accelerator
    /// pods that are unschedulable).
    pub pending_pods: Gauge,
    /// Time of one full decision round (snapshot, core, no effects), seconds.
    pub decision_duration_seconds: Histogram,
    /// Time the planner spent solving within a round, seconds.
    pub solve_duration_seconds: Histogram,
    /// Nodes we manage, by pool, instance type and capacity type.
    pub nodes: Family<NodeLabels, Gauge>,
    /// Accelerators (GPUs, Neuron devices) on those nodes.
    pub gpus: Family<NodeLabels, Gauge>,
    /// USD per hour of each pool's nodes at launch price.
    pub cost_per_hour: Family<PoolLabels, FloatGauge>,
    /// Notices about our instances, by kind.
    pub interruptions: Family<InterruptionLabels, Counter>,
    /// Checkpoint requests sent to pods.
    pub checkpoints_requested: Counter,
    /// Checkpoint requests the workload acknowledged in time.
    pub checkpoints_acknowledged: Counter,
    /// Checkpoint requests that reached their deadline unanswered.
    pub checkpoints_timed_out: Counter,
    /// Failed launches and lifecycle timeouts, by pool and reason.
    pub launch_failures: Family<LaunchFailureLabels, Counter>,
    /// Nodes held for pre-warm windows, by pool.
    pub prewarm_nodes: Family<PoolLabels, Gauge>,
    /// Drifted nodes whose removal started (cordoned once their
    /// replacement was ready), by pool.
    pub drift_replacements: Family<PoolLabels, Counter>,
    /// Messages read from the notice queue, by outcome.
    pub notice_messages: Family<MessageLabels, Counter>,
    /// 1 while prices come from the embedded `pricing-data/` because the
    /// live APIs could not be reached, by price source.
    pub pricing_fallback: Family<PricingLabels, Gauge>,
    /// 1 while the device data file (`--device-data`) holds content that
    /// does not read, and the last good data stays in force.
    pub device_data_rejected: Gauge,
    /// Instances terminated by the garbage collector (ours, no NodeClaim).
    pub garbage_collected: Counter,
    /// 1 while this replica holds the leader lease.
    pub leader: Gauge,
    /// Actions the core decided but this replica did not carry out because
    /// it had lost the lease (the new leader decides again).
    pub actions_dropped: Counter,
    /// ProvisioningRequest conditions set, by condition, status and reason.
    pub provisioning_requests: Family<ProvisioningLabels, Counter>,
    /// CapacityBuffer chunks at the last round, by buffer and state
    /// (`held`, `provisioning`, `infeasible`).
    pub capacity_buffer_replicas: Family<BufferLabels, Gauge>,
    /// Decision steps that panicked (contained: the core decided without
    /// them), by step.
    pub decision_failures: Family<StepLabels, Counter>,
    /// Actions that failed and are issued again after a backoff, by kind.
    pub actions_failed: Family<ActionLabels, Counter>,
    /// NodeClaim lifecycle steps (launch, registration, drain) under way.
    pub lifecycle_in_flight: Gauge,
    /// The series that port Karpenter's (`nodeclaims_created`, ...).
    pub karpenter: karpenter::KarpenterMetrics,
    /// Repair of unhealthy nodes.
    pub health: health::HealthMetrics,
    /// GPU use read from DCGM.
    pub gpu_use: gpu_use::GpuUseMetrics,
    /// When the loop last made progress (not exported: `/healthz` reads
    /// it).
    pub progress: Progress,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry` under the
    /// `quartermaster` prefix.
    pub fn new(registry: &mut Registry) -> Metrics {
        let metrics = Metrics {
            pending_pods: Gauge::default(),
            decision_duration_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            solve_duration_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            nodes: Family::default(),
            gpus: Family::default(),
            cost_per_hour: Family::default(),
            interruptions: Family::default(),
            checkpoints_requested: Counter::default(),
            checkpoints_acknowledged: Counter::default(),
            checkpoints_timed_out: Counter::default(),
            launch_failures: Family::default(),
            prewarm_nodes: Family::default(),
            drift_replacements: Family::default(),
            notice_messages: Family::default(),
            pricing_fallback: Family::default(),
            device_data_rejected: Gauge::default(),
            garbage_collected: Counter::default(),
            leader: Gauge::default(),
            actions_dropped: Counter::default(),
            provisioning_requests: Family::default(),
            capacity_buffer_replicas: Family::default(),
            decision_failures: Family::default(),
            actions_failed: Family::default(),
            lifecycle_in_flight: Gauge::default(),
            karpenter: Default::default(),
            health: Default::default(),
            gpu_use: Default::default(),
            progress: Default::default(),
        };
        let r = registry.sub_registry_with_prefix("quartermaster");
        r.register(
            "pending_pods",
            "Accelerator pods waiting for capacity",
            metrics.pending_pods.clone(),
        );
        r.register(
            "decision_duration_seconds",
            "Duration of one decision round",
            metrics.decision_duration_seconds.clone(),
        );
        r.register(
            "solve_duration_seconds",
            "Duration of the planner's solve within a round",
            metrics.solve_duration_seconds.clone(),
        );
        r.register(
            "nodes",
            "Managed nodes by pool, instance type and capacity type",
            metrics.nodes.clone(),
        );
        r.register(
            "gpus",
            "Accelerators on managed nodes by pool, instance type and capacity type",
            metrics.gpus.clone(),
        );
        r.register(
            "cost_per_hour_dollars",
            "USD per hour of each pool's nodes",
            metrics.cost_per_hour.clone(),
        );
        r.register(
            "interruptions",
            "Notices about managed instances by kind",
            metrics.interruptions.clone(),
        );
        r.register(
            "checkpoints_requested",
            "Checkpoint requests sent to pods",
            metrics.checkpoints_requested.clone(),
        );
        r.register(
            "checkpoints_acknowledged",
            "Checkpoint requests acknowledged by the workload",
            metrics.checkpoints_acknowledged.clone(),
        );
        r.register(
            "checkpoints_timed_out",
            "Checkpoint requests unanswered at their deadline",
            metrics.checkpoints_timed_out.clone(),
        );
        r.register(
            "launch_failures",
            "Failed launches and lifecycle timeouts by pool and reason",
            metrics.launch_failures.clone(),
        );
        r.register(
            "prewarm_nodes",
            "Nodes held for pre-warm windows by pool",
            metrics.prewarm_nodes.clone(),
        );
        r.register(
            "drift_replacements",
            "Drifted nodes cordoned for replacement by pool",
            metrics.drift_replacements.clone(),
        );
        r.register(
            "notice_messages",
            "Messages read from the interruption queue by outcome",
            metrics.notice_messages.clone(),
        );
        r.register(
            "pricing_fallback",
            "1 while a source (on-demand or spot prices, zone names) is not live because its API failed",
            metrics.pricing_fallback.clone(),
        );
        r.register(
            "device_data_rejected",
            "1 while the --device-data file does not read and the last good device data stays in force",
            metrics.device_data_rejected.clone(),
        );
        r.register(
            "actions_dropped_not_leader",
            "Actions not carried out because this replica lost the leader lease",
            metrics.actions_dropped.clone(),
        );
        r.register(
            "garbage_collected_instances",
            "Instances with our cluster tag and no NodeClaim that were terminated",
            metrics.garbage_collected.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader lease",
            metrics.leader.clone(),
        );
        r.register(
            "provisioning_request_conditions",
            "ProvisioningRequest conditions set, by condition, status and reason",
            metrics.provisioning_requests.clone(),
        );
        r.register(
            "capacity_buffer_replicas",
            "CapacityBuffer chunks at the last round, by buffer and state (held, provisioning, infeasible)",
            metrics.capacity_buffer_replicas.clone(),
        );
        r.register(
            "decision_failures",
            "Decision steps that panicked; the core decided without them, its state kept",
            metrics.decision_failures.clone(),
        );
        r.register(
            "actions_failed",
            "Actions that failed and are issued again after a backoff, by kind",
            metrics.actions_failed.clone(),
        );
        r.register(
            "lifecycle_steps_in_flight",
            "NodeClaim lifecycle steps (launch, registration, drain) under way",
            metrics.lifecycle_in_flight.clone(),
        );
        metrics.karpenter.register(r);
        metrics.health.register(r);
        metrics.gpu_use.register(r);
        metrics
    }

    /// A registry with the metrics registered, for tests and tools that do
    /// not serve them.
    pub fn unregistered() -> Metrics {
        Metrics::new(&mut Registry::default())
    }
}

/// The registry's metrics as OpenMetrics text, what `/metrics` serves.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_metrics_appear_in_openmetrics_text_with_labels() {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        m.pending_pods.set(3);
        m.cost_per_hour
            .get_or_create(&PoolLabels {
                nodepool: "gpu".into(),
            })
            .set(1.5);
        m.launch_failures
            .get_or_create(&LaunchFailureLabels {
                nodepool: "gpu".into(),
                reason: "InsufficientInstanceCapacity".into(),
            })
            .inc();
        let text = encode(&registry);
        assert!(text.contains("quartermaster_pending_pods 3"), "{text}");
        assert!(
            text.contains("quartermaster_cost_per_hour_dollars{nodepool=\"gpu\"} 1.5"),
            "{text}"
        );
        assert!(
            text.contains(
                "quartermaster_launch_failures_total{nodepool=\"gpu\",reason=\"InsufficientInstanceCapacity\"} 1"
            ),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }
}

/// When the controller's loop last made progress (finished a round, or
/// woke up between rounds), on tokio's monotonic clock. Shared by the loop
/// (which beats it) and `/healthz` (which reads it).
#[derive(Clone, Debug)]
pub struct Progress(Arc<Mutex<tokio::time::Instant>>);

impl Default for Progress {
    fn default() -> Self {
        Progress(Arc::new(Mutex::new(tokio::time::Instant::now())))
    }
}

impl Progress {
    /// The loop made progress now.
    pub fn beat(&self) {
        if let Ok(mut last) = self.0.lock() {
            *last = tokio::time::Instant::now();
        }
    }

    /// How long since the last progress.
    pub fn since(&self) -> Duration {
        self.0.lock().map(|last| last.elapsed()).unwrap_or_default()
    }
}
