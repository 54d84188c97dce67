//! What a simulation run measures: one [`StrategyResult`] per strategy, with
//! totals and a time series, and the clairvoyant lower bound they are
//! compared with. Plain data; rendering lives in `report`.

use serde::Serialize;
use std::collections::BTreeMap;

/// One sample of the time series (taken at a fixed interval).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since the start of the simulation.
    pub t_s: f64,
    /// USD per hour of the nodes alive at that moment.
    pub cost_per_hour: f64,
    /// USD spent so far.
    pub cumulative_cost: f64,
    /// Spot nodes alive.
    pub spot_nodes: u32,
    /// On-demand nodes alive.
    pub on_demand_nodes: u32,
    /// Nodes alive per instance family.
    pub nodes_by_family: BTreeMap<String, u32>,
    /// Pods waiting for a node.
    pub pending_pods: u32,
    /// GPUs on nodes alive.
    pub gpus_provisioned: f64,
    /// GPUs held by running pods.
    pub gpus_used: f64,
    /// Interruptions and evictions of running jobs so far.
    pub interruptions: u32,
    /// GPU-hours of work lost to interruptions and restarts so far.
    pub lost_gpu_hours: f64,
}

/// A job that did not finish, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unfinished {
    /// Job (pod name).
    pub job: String,
    /// Why: still running at the end, never placed (with the planner's
    /// reason), or waiting after an interruption.
    pub reason: String,
}

/// Where a strategy's bill went; the parts sum to its `total_cost`
/// (`sim::bill`). Set beside the lower bound, which prices only `work` at
/// the cheapest shares the pools allow, they say what the gap is made of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CostBy {
    /// Capacity pods held for work they kept, on-demand priced as spot of
    /// the same type and zone: the bound's counterpart.
    pub work: f64,
    /// On on-demand nodes, what that work paid above the spot price.
    pub on_demand_premium: f64,
    /// Capacity pods held for work they later lost (re-done after a stop,
    /// restarts, checkpoint pauses).
    pub lost_work: f64,
    /// Capacity of Ready nodes that no pod held (a pod holds its share of
    /// a node's GPUs, or on a node without GPUs the larger of its parts of
    /// the node's CPU and memory).
    pub idle: f64,
    /// Nodes from launch to Ready (or to their end if never Ready).
    pub booting: f64,
    /// Reservations paid up front, used or not.
    pub reserved_upfront: f64,
}

impl CostBy {
    /// The parts by the names the report gives them, in its order.
    pub fn parts(&self) -> [(&'static str, f64); 6] {
        [
            ("work", self.work),
            ("on-demand premium", self.on_demand_premium),
            ("lost work", self.lost_work),
            ("idle", self.idle),
            ("booting", self.booting),
            ("reserved up front", self.reserved_upfront),
        ]
    }

    /// Adds `other` scaled by `k`, part by part (a mean over runs), as
    /// [`LostBy::add_scaled`](super::jobs::LostBy::add_scaled) does.
    pub fn add_scaled(&mut self, other: &CostBy, k: f64) {
        self.work += other.work * k;
        self.on_demand_premium += other.on_demand_premium * k;
        self.lost_work += other.lost_work * k;
        self.idle += other.idle * k;
        self.booting += other.booting * k;
        self.reserved_upfront += other.reserved_upfront * k;
    }

    /// The sum of the parts: the strategy's `total_cost`.
    pub fn total(&self) -> f64 {
        self.parts().iter().map(|(_, x)| x).sum()
    }
}

/// Lost work of the jobs of one shape (GPUs per pod and gang size), so a
/// user sees which jobs lose it: a reclaim stops a whole gang, and a big
/// pod's checkpoint may not fit the notice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ShapeLoss {
    /// Jobs (pods) of this shape.
    pub jobs: u32,
    /// GPU-hours of work they ask for (their run times, finished or not).
    pub work_gpu_hours: f64,
    /// GPU-hours of their work lost.
    pub lost_gpu_hours: f64,
    /// The same by cause.
    pub lost_gpu_hours_by: super::jobs::LostBy,
    /// Times one of them stopped running (its node went, it was evicted, or
    /// another member of its gang stopped).
    pub interruptions: u32,
}

impl ShapeLoss {
    /// Adds `other`'s jobs, work, losses and interruptions to these.
    pub fn add(&mut self, other: &ShapeLoss) {
        self.jobs += other.jobs;
        self.work_gpu_hours += other.work_gpu_hours;
        self.lost_gpu_hours += other.lost_gpu_hours;
        self.lost_gpu_hours_by
            .add_scaled(&other.lost_gpu_hours_by, 1.0);
        self.interruptions += other.interruptions;
    }

    /// Lost GPU-hours over the work's GPU-hours; `None` without work.
    pub fn lost_share(&self) -> Option<f64> {
        (self.work_gpu_hours > 0.0).then(|| self.lost_gpu_hours / self.work_gpu_hours)
    }
}

/// The name of a job shape: its GPUs per pod (`"no GPU"`, `"0.5 GPU"`,
/// `"1 GPU"`, `"8 GPUs"`), and `", gang of N"` for a gang's members.
///
/// ```
/// use quartermaster::sim::result::shape_name;
/// assert_eq!(shape_name(8.0, 4), "8 GPUs, gang of 4");
/// assert_eq!(shape_name(0.5, 1), "0.5 GPU");
/// assert_eq!(shape_name(0.0, 1), "no GPU");
/// ```
pub fn shape_name(gpus: f64, gang: u32) -> String {
    let gpus = if gpus <= 0.0 {
        "no GPU".to_string()
    } else if gpus <= 1.0 {
        format!("{gpus} GPU")
    } else {
        format!("{gpus} GPUs")
    };
    if gang > 1 {
        format!("{gpus}, gang of {gang}")
    } else {
        gpus
    }
}

/// The outcome of one strategy.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StrategyResult {
    /// USD spent on nodes.
    pub total_cost: f64,
    /// Of `total_cost`, what the scenario's reservations cost up front.
    pub reserved_upfront_cost: f64,
    /// `total_cost` by what it paid for.
    pub cost_by: CostBy,
    /// GPU-hours held by running pods (useful or not).
    pub gpu_hours: f64,
    /// GPU-hours of work lost to interruptions and restarts.
    pub lost_gpu_hours: f64,
    /// `lost_gpu_hours` by cause.
    pub lost_gpu_hours_by: super::jobs::LostBy,
    /// `lost_gpu_hours` by job shape ([`shape_name`]).
    pub lost_by_shape: BTreeMap<String, ShapeLoss>,
    /// GPU-hours of nodes alive (provisioned).
    pub provisioned_gpu_hours: f64,
    /// Mean seconds a job waited for a node (over all its waits).
    pub mean_pending_s: f64,
    /// 95th percentile of the same.
    pub p95_pending_s: f64,
    /// Interruptions and evictions of running jobs.
    pub interruptions: u32,
    /// Checkpoints taken (periodic and requested).
    pub checkpoints: u32,
    /// Jobs finished.
    pub jobs_completed: u32,
    /// Jobs in the workload.
    pub jobs_total: u32,
    /// Nodes launched.
    pub nodes_launched: u32,
    /// Spot notices received.
    pub spot_notices: u32,
    /// Drifted nodes replaced (drained after a new image was released).
    pub drift_replacements: u32,
    /// Nodes replaced because they outlived their pool's `expireAfter`.
    pub expired_replacements: u32,
    /// Node faults (`cloud.faults`).
    pub faults: u32,
    /// Reboots repair asked for.
    pub reboots: u32,
    /// Nodes repair replaced (cordoned as unhealthy).
    pub repair_replacements: u32,
    /// GPU-hours lost to faults: the work since their last checkpoint of
    /// the jobs a fault stopped (also in `lost_gpu_hours`), the GPU-hours
    /// of faulty nodes from the fault until fixed by a reboot or gone, and
    /// the GPU-hours of stopped gang members waiting bound on healthy
    /// nodes.
    pub fault_lost_gpu_hours: f64,
    /// GPU-hours idle as the live side counts them (under
    /// `plan::rightsize::IDLE_BELOW`): GPUs of serving nodes no pod held,
    /// and those of pods whose workload's `gpuUse` is under it.
    pub idle_gpu_hours: f64,
    /// USD that right sizes (`plan::rightsize`, as `report gpu`) of the
    /// pods under `plan::rightsize::UNDERUSED_BELOW` would have saved over
    /// the time they held their GPUs, at on-demand prices.
    pub right_size_saving: f64,
    /// Pre-warm windows whose capacity was Ready at window start, and all
    /// windows seen.
    pub prewarm_ready: (u32, u32),
    /// Gang starts (every member running) whose members all ran under one
    /// bottom network node (one block), and gang starts whose members' nodes
    /// all report a network topology.
    pub gang_blocks: (u32, u32),
    /// Windows of scheduled CapacityBuffers whose every chunk was held on a
    /// Ready node at every step the window was open, and all such windows
    /// seen.
    pub buffer_windows: (u32, u32),
    /// 95th percentile over jobs of (finish - arrival) / (run time +
    /// on-demand startup): how much slower than on uninterrupted on-demand
    /// capacity jobs finish (see `engine::p95_slowdown`).
    pub p95_slowdown: Option<f64>,
    /// Jobs that did not finish, with reasons.
    pub unfinished: Vec<Unfinished>,
    /// The time series.
    #[serde(skip)]
    pub timeseries: Vec<Sample>,
    /// What happened, in order: the core's actions, the cloud's notices and
    /// nodes leaving (for checking invariants; not reported).
    #[serde(skip)]
    pub log: Vec<(crate::core::Time, LogEvent)>,
}

/// One entry of a run's log.
#[derive(Debug, Clone, PartialEq)]
pub enum LogEvent {
    /// The core decided this.
    Action(crate::core::Action),
    /// The cloud sent this.
    Notice(crate::core::Notice),
    /// The node is gone (terminated by us or reclaimed).
    NodeGone(String),
    /// The job stopped running on the node (its node went, it was evicted,
    /// or another member of its gang stopped) and waits again.
    JobStopped {
        /// The job (pod name).
        job: String,
        /// The claim it ran on.
        node: String,
    },
    /// A gang's ProvisioningRequest got a condition.
    Provisioning(crate::core::provisioning::Transition),
    /// The job was created (its pod is pending from now on); a job whose
    /// gang arrives as a ProvisioningRequest is created once it is
    /// provisioned.
    JobCreated(String),
    /// The job finished its work (and left its node).
    JobFinished(String),
    /// The job was bound to the node and started running there.
    JobStarted {
        /// The job (pod name).
        job: String,
        /// The claim it runs on.
        node: String,
    },
}

impl StrategyResult {
    /// USD per GPU-hour held by pods.
    pub fn cost_per_gpu_hour(&self) -> Option<f64> {
        (self.gpu_hours > 0.0).then(|| self.total_cost / self.gpu_hours)
    }

    /// GPU-hours held by pods over GPU-hours provisioned.
    pub fn gpu_utilisation(&self) -> Option<f64> {
        (self.provisioned_gpu_hours > 0.0).then(|| self.gpu_hours / self.provisioned_gpu_hours)
    }
}

/// A whole simulation: every strategy on the same workload and interruptions.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SimReport {
    /// Scenario name.
    pub scenario: String,
    /// Simulated seconds.
    pub duration_s: f64,
    /// Seed.
    pub seed: u64,
    /// Clairvoyant lower bound (`sim::bound`): each placeable job at the
    /// cheapest share of a node its pools allow, from its submission, with
    /// no interruptions and no idle capacity. Every strategy costs more.
    pub lower_bound_cost: f64,
    /// Jobs no pool can place, left out of the bound.
    pub lower_bound_unplaceable: usize,
    /// What the workload's loading warned about (GPU hints no pool
    /// serves, pool families with no offerings in the region).
    pub warnings: Vec<String>,
    /// The replayed trace's own queue times (`queue_s`: creation to
    /// scheduling in the original cluster), beside the strategies' pending
    /// times; None without a trace that has them.
    pub trace_queue: Option<super::trace_window::QueueTime>,
    /// Results by strategy name.
    pub strategies: BTreeMap<String, StrategyResult>,
}
