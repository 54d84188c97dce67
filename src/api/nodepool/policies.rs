//! A pool's interruption, GPU-sharing, pre-warm and risk policies.

use crate::api::common::{resource_list_schema, ResourceList};
use crate::api::duration::{parse_duration, DurationError, DURATION_PATTERN};
use crate::api::schedule::{parse_cron, parse_time_zone, ScheduleError, CRON_PATTERN};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::{MIG_PROFILE_PATTERN, WINDOW_NAME_PATTERN};

/// What to do when EC2 recommends rebalancing a spot node (an elevated risk
/// of interruption, before any notice).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum RebalanceAction {
    /// Nothing until the two-minute interruption notice.
    #[default]
    Ignore,
    /// Ask the node's pods to checkpoint; keep running.
    Checkpoint,
    /// Launch a replacement now; drain the node once the replacement is ready.
    Replace,
    /// Checkpoint, cordon and drain the node now.
    Drain,
}

/// How the pool answers spot interruptions.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(
    validation = Rule::new("!has(self.checkpointGracePeriod) || duration(self.checkpointGracePeriod) <= duration('2m')")
        .message("checkpointGracePeriod cannot exceed the two-minute spot interruption notice"),
    validation = Rule::new("!has(self.checkpointHook) || !has(self.checkpointHook.timeout) || !has(self.checkpointGracePeriod) || duration(self.checkpointHook.timeout) <= duration(self.checkpointGracePeriod)")
        .message("checkpointHook.timeout cannot exceed checkpointGracePeriod")
)]
#[serde(rename_all = "camelCase")]
pub struct InterruptionPolicy {
    /// An HTTP endpoint on each pod that opted in (annotation
    /// `quartermaster.dev/checkpoint: "true"`), POSTed to on a notice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_hook: Option<CheckpointHook>,
    /// Longest wait for a pod's checkpoint to complete before it is evicted
    /// (at most 2m, the notice; Go duration).
    #[serde(default = "default_checkpoint_grace_period")]
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    pub checkpoint_grace_period: String,
    /// What to do on a rebalance recommendation.
    #[serde(default)]
    pub on_rebalance_recommendation: RebalanceAction,
}

impl Default for InterruptionPolicy {
    fn default() -> Self {
        InterruptionPolicy {
            checkpoint_hook: None,
            checkpoint_grace_period: default_checkpoint_grace_period(),
            on_rebalance_recommendation: RebalanceAction::default(),
        }
    }
}

fn default_checkpoint_grace_period() -> String {
    "90s".into()
}

impl InterruptionPolicy {
    /// `checkpointGracePeriod` parsed.
    ///
    /// # Errors
    ///
    /// [`DurationError`] when it is not a duration.
    pub fn checkpoint_grace_period_duration(&self) -> Result<Duration, DurationError> {
        parse_duration(&self.checkpoint_grace_period)
    }
}

/// The HTTP checkpoint hook: `POST http://<pod IP>:<port><path>`; a 2xx answer
/// means the checkpoint is complete.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointHook {
    /// Container port of the hook.
    #[schemars(range(min = 1))]
    pub port: u16,
    /// Path of the hook.
    #[serde(default = "default_hook_path")]
    #[schemars(regex(pattern = "^/"), length(max = 256))]
    pub path: String,
    /// Timeout of one POST (Go duration).
    #[serde(default = "default_hook_timeout")]
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    pub timeout: String,
}

fn default_hook_path() -> String {
    "/checkpoint".into()
}

fn default_hook_timeout() -> String {
    "5s".into()
}

impl CheckpointHook {
    /// A hook on `port` with the default path and timeout.
    pub fn on_port(port: u16) -> CheckpointHook {
        CheckpointHook {
            port,
            path: default_hook_path(),
            timeout: default_hook_timeout(),
        }
    }

    /// `timeout` parsed.
    ///
    /// # Errors
    ///
    /// [`DurationError`] when it is not a duration.
    pub fn timeout_duration(&self) -> Result<Duration, DurationError> {
        parse_duration(&self.timeout)
    }
}

/// How GPUs are shared.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum GpuSharingMode {
    /// One pod per GPU (`nvidia.com/gpu` counts whole GPUs).
    #[default]
    None,
    /// The device plugin advertises each GPU `replicas` times as
    /// `nvidia.com/gpu.shared` (time-slicing with `renameByDefault`); pods
    /// ask for shares and share the GPU in time slices, without memory
    /// isolation; pods asking for whole `nvidia.com/gpu` never land there.
    TimeSlicing,
    /// Each GPU is partitioned into MIG instances of `migProfile`, advertised
    /// as `nvidia.com/mig-<profile>` (MIG strategy `mixed`).
    Mig,
    /// The device plugin's MPS sharing: each GPU is advertised `replicas`
    /// times as `nvidia.com/gpu.shared` (`renameByDefault`), and each pod
    /// holding a share runs as an MPS client limited to `1/replicas` of the
    /// GPU's memory and of its threads; pods asking for whole
    /// `nvidia.com/gpu` never land there.
    Mps,
}

/// GPU sharing of the pool's nodes: `{mode: None}`, `{mode: TimeSlicing,
/// replicas: 4}`, `{mode: Mps, replicas: 4}` or `{mode: Mig, migProfile:
/// 1g.10gb}`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, KubeSchema)]
#[x_kube(
    validation = Rule::new("self.mode == 'TimeSlicing' || self.mode == 'Mps' ? has(self.replicas) : !has(self.replicas)")
        .message("replicas is required with modes TimeSlicing and Mps and not allowed with other modes"),
    validation = Rule::new("self.mode != 'Mps' || !has(self.replicas) || self.replicas <= 48")
        .message("MPS serves at most 48 clients per GPU: replicas must be at most 48 with mode Mps"),
    validation = Rule::new("self.mode == 'Mig' ? has(self.migProfile) : !has(self.migProfile)")
        .message("migProfile is required with mode Mig and not allowed with other modes")
)]
#[serde(rename_all = "camelCase")]
pub struct GpuSharing {
    /// `None`, `TimeSlicing`, `Mps` or `Mig`.
    pub mode: GpuSharingMode,
    /// Time slicing and MPS: shares per GPU (2..=64; MPS at most 48),
    /// advertised as `nvidia.com/gpu.shared` (the device plugin's
    /// `renameByDefault`), so pods asking for whole `nvidia.com/gpu` never
    /// land on a shared GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 64))]
    pub replicas: Option<u32>,
    /// MIG: the profile every GPU is partitioned into, e.g. `1g.10gb`; must
    /// be supported by the pool's GPUs (see `catalog::mig`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = MIG_PROFILE_PATTERN))]
    pub mig_profile: Option<String>,
}

impl GpuSharing {
    /// Time slicing with `replicas` pods per GPU.
    pub fn time_slicing(replicas: u32) -> GpuSharing {
        GpuSharing {
            mode: GpuSharingMode::TimeSlicing,
            replicas: Some(replicas),
            mig_profile: None,
        }
    }

    /// MPS with `replicas` clients per GPU.
    pub fn mps(replicas: u32) -> GpuSharing {
        GpuSharing {
            mode: GpuSharingMode::Mps,
            replicas: Some(replicas),
            mig_profile: None,
        }
    }

    /// MIG with every GPU partitioned into `profile`.
    pub fn mig(profile: &str) -> GpuSharing {
        GpuSharing {
            mode: GpuSharingMode::Mig,
            replicas: None,
            mig_profile: Some(profile.to_string()),
        }
    }

    /// Pods per GPU when time slicing (and `replicas` is set), else `None`.
    pub fn time_slicing_replicas(&self) -> Option<u32> {
        (self.mode == GpuSharingMode::TimeSlicing)
            .then_some(self.replicas)
            .flatten()
    }

    /// Shares per GPU when the GPUs are shared by time slicing or MPS (and
    /// `replicas` is set), else `None`: either way each GPU is advertised
    /// that many times as `nvidia.com/gpu.shared`.
    pub fn shared_replicas(&self) -> Option<u32> {
        matches!(self.mode, GpuSharingMode::TimeSlicing | GpuSharingMode::Mps)
            .then_some(self.replicas)
            .flatten()
    }

    /// Shares per GPU when the GPUs are shared by MPS (and `replicas` is
    /// set), else `None`: under DRA such GPUs are published shareable,
    /// their memory and threads consumable in steps of one share
    /// (`docs/dra.md`). Time slicing isolates neither, so it has no
    /// capacity to consume.
    pub fn dra_gpu_shares(&self) -> Option<u32> {
        (self.mode == GpuSharingMode::Mps)
            .then_some(self.replicas)
            .flatten()
    }

    /// The MIG profile when the mode is MIG (and it is set), else `None`.
    pub fn mig_profile(&self) -> Option<&str> {
        (self.mode == GpuSharingMode::Mig)
            .then_some(self.mig_profile.as_deref())
            .flatten()
    }
}

/// A pre-warm window: from each `schedule` time (in `timeZone`) for
/// `duration`, the pool holds at least `capacity` launched, ahead of demand.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrewarmWindow {
    /// Name of the window, unique in the pool (a DNS label).
    #[schemars(regex(pattern = WINDOW_NAME_PATTERN), length(min = 1, max = 63))]
    pub name: String,
    /// When the window opens: a 5-field cron expression
    /// (`minute hour day-of-month month day-of-week`, e.g. `0 8 * * 1-5`) or a
    /// macro (`@daily`).
    #[schemars(regex(pattern = CRON_PATTERN), length(max = 128))]
    pub schedule: String,
    /// IANA time zone of `schedule`, e.g. `Europe/Berlin`.
    #[serde(default = "default_time_zone")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: String,
    /// How long the window stays open (Go duration, e.g. `10h`).
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    pub duration: String,
    /// Resources to hold during the window, e.g. `nvidia.com/gpu: 16`.
    #[schemars(schema_with = "nonempty_resource_list_schema")]
    pub capacity: ResourceList,
}

fn default_time_zone() -> String {
    "UTC".into()
}

fn nonempty_resource_list_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut s = resource_list_schema(g);
    s.insert("minProperties".into(), 1.into());
    s
}

impl PrewarmWindow {
    /// `schedule` parsed (see [`parse_cron`]).
    ///
    /// # Errors
    ///
    /// [`ScheduleError`] when it is not a valid expression.
    pub fn parse_schedule(&self) -> Result<cron::Schedule, ScheduleError> {
        parse_cron(&self.schedule)
    }

    /// `timeZone` parsed.
    ///
    /// # Errors
    ///
    /// [`ScheduleError::TimeZone`] for an unknown name.
    pub fn parse_time_zone(&self) -> Result<chrono_tz::Tz, ScheduleError> {
        parse_time_zone(&self.time_zone)
    }

    /// `duration` parsed.
    ///
    /// # Errors
    ///
    /// [`DurationError`] when it is not a duration.
    pub fn parse_duration(&self) -> Result<Duration, DurationError> {
        parse_duration(&self.duration)
    }
}

/// How much spot interruption risk the pool accepts.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RiskPolicy {
    /// Highest Spot Instance Advisor interruption bucket allowed for spot
    /// offerings: 0 `<5%`, 1 `5-10%`, 2 `10-15%`, 3 `15-20%`, 4 `>20%`
    /// interrupted per month. Unset: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 4))]
    pub max_interruption_bucket: Option<u8>,
    /// Multiplier of the expected interruption cost in the planner's
    /// risk-adjusted price (0 ignores risk; 1 prices it at expectation; above 1
    /// is risk-averse).
    #[serde(default = "default_risk_aversion")]
    #[schemars(range(min = 0))]
    pub risk_aversion: f64,
    /// Largest share (0 < x <= 1) of the pool's new spot nodes in one spot
    /// pool (one instance type in one zone), to spread interruption risk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0, "exclusiveMinimum" = true, "maximum" = 1))]
    pub max_spot_pool_share: Option<f64>,
}

impl Default for RiskPolicy {
    fn default() -> Self {
        RiskPolicy {
            max_interruption_bucket: None,
            risk_aversion: default_risk_aversion(),
            max_spot_pool_share: None,
        }
    }
}

fn default_risk_aversion() -> f64 {
    1.0
}

/// How a pod's `firstAvailable` DRA alternatives are chosen when nodes
/// are launched for it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum FirstAvailable {
    /// In the order the user wrote them: nodes are launched for the first
    /// alternative some pool can serve, as the scheduler allocates.
    #[default]
    InOrder,
    /// The alternative whose node costs the pod least (price plus expected
    /// interruption cost) among those this pool can serve.
    Cheapest,
}

/// The pool's DRA policy: which drivers its nodes run, and how claims'
/// alternatives are chosen.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DraPolicy {
    /// The DRA drivers the pool's nodes run (`gpu.nvidia.com`,
    /// `neuron.aws.com`, `dra.net`): nodes launched for DRA claims offer
    /// those drivers' devices, in place of the device plugin's, and carry
    /// the label `quartermaster.dev/dra: "true"` (for the drivers'
    /// DaemonSets to select). Unset: every driver Quartermaster has device
    /// templates for; `[]`: none (a device-plugin pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub drivers: Option<Vec<String>>,
    /// How `firstAvailable` alternatives are chosen for this pool's nodes.
    #[serde(default, skip_serializing_if = "is_in_order")]
    pub first_available: FirstAvailable,
}

fn is_in_order(f: &FirstAvailable) -> bool {
    *f == FirstAvailable::InOrder
}

impl DraPolicy {
    /// The default policy (every driver, in order).
    pub fn is_default(&self) -> bool {
        *self == DraPolicy::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sharing_accessors_answer_only_for_their_mode() {
        assert_eq!(GpuSharing::time_slicing(4).time_slicing_replicas(), Some(4));
        assert_eq!(GpuSharing::time_slicing(4).mig_profile(), None);
        assert_eq!(GpuSharing::mps(4).shared_replicas(), Some(4));
        assert_eq!(GpuSharing::mps(4).time_slicing_replicas(), None);
        assert_eq!(GpuSharing::time_slicing(4).shared_replicas(), Some(4));
        assert_eq!(GpuSharing::mig("1g.10gb").shared_replicas(), None);
        assert_eq!(GpuSharing::mig("1g.10gb").mig_profile(), Some("1g.10gb"));
        let odd = GpuSharing {
            mode: GpuSharingMode::None,
            replicas: Some(4),
            mig_profile: None,
        };
        assert_eq!(odd.time_slicing_replicas(), None);
    }
}
