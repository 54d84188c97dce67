//! A pool's repair policy: which node conditions make a node unhealthy,
//! how long each may hold before anything is done, and what is done then
//! (reboot first, replace when a reboot did not help, or replace at once),
//! with a breaker that stops repairs when too many of the pool's nodes are
//! unhealthy at once. The decisions are `core::repair`'s; the rules are in
//! `docs/repair.md`.

use crate::api::duration::{parse_duration, DurationError, DURATION_PATTERN};
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::{BudgetNodes, BUDGET_NODES_PATTERN};

/// A node condition's status, as the API spells it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConditionStatus {
    /// `True`.
    True,
    /// `False`.
    False,
    /// `Unknown` (the kubelet stopped reporting).
    Unknown,
}

impl ConditionStatus {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// What repair does with an unhealthy node.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum RepairAction {
    /// Reboot the instance (EC2 `RebootInstances`) after asking its
    /// checkpointing pods to checkpoint; replace it when it is still (or
    /// again) unhealthy `rebootTimeout` after the reboot.
    Reboot,
    /// Replace the node: a new node first where the pool can stage one,
    /// then the checkpoint-first drain; where it cannot (its limits or its
    /// reserved capacity are used up) the node is drained and terminated
    /// first and its pods planned again.
    #[default]
    Replace,
}

impl RepairAction {
    /// The metric label: `reboot` or `replace`.
    pub fn name(self) -> &'static str {
        match self {
            RepairAction::Reboot => "reboot",
            RepairAction::Replace => "replace",
        }
    }
}

/// One rule: a node whose condition `type` has had `status` (and a reason
/// matching `reasonPattern`, when set) for `tolerationDuration` is
/// repaired with `action`. Rules naming a reason pattern take precedence
/// over the rules of the same type and status that do not, as Karpenter's
/// repair policies do.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepairCondition {
    /// The node condition type (`Ready`, `AcceleratedHardwareReady`, a
    /// node-problem-detector or GPU operator condition).
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// The status that is unhealthy.
    pub status: ConditionStatus,
    /// A regular expression the condition's reason must match (e.g.
    /// `^NvidiaXID(48|79)Error$`); unset matches any reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub reason_pattern: Option<String>,
    /// How long the condition must hold (from its last transition) before
    /// the node is repaired (Go duration, e.g. `10m`).
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    pub toleration_duration: String,
    /// `Reboot` (then replace if that did not help) or `Replace`.
    #[serde(default)]
    pub action: RepairAction,
}

impl RepairCondition {
    fn new(type_: &str, status: ConditionStatus, after: &str, action: RepairAction) -> Self {
        RepairCondition {
            type_: type_.into(),
            status,
            reason_pattern: None,
            toleration_duration: after.into(),
            action,
        }
    }

    /// `tolerationDuration` parsed.
    ///
    /// # Errors
    ///
    /// [`DurationError`] when it is not a duration.
    pub fn toleration(&self) -> Result<Duration, DurationError> {
        parse_duration(&self.toleration_duration)
    }
}

/// How the pool's unhealthy nodes are repaired. Without this field the
/// pool gets the defaults: the conditions and waits of Karpenter's AWS
/// provider and the EKS node monitoring agent (`Ready` False or Unknown for
/// 30m, `AcceleratedHardwareReady` False for 10m, `StorageReady`,
/// `NetworkingReady`, `KernelReady` and `ContainerRuntimeReady` False for
/// 30m), accelerator faults rebooted first, faults a reboot does not fix
/// (`NvidiaFabricError`, `NvidiaDeviceCountMismatch`) replaced at once, and
/// at most 20% of the pool unhealthy. `conditions: []` turns repair off.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Repair {
    /// The unhealthy conditions and what to do about each.
    #[serde(default = "default_conditions")]
    #[schemars(length(max = 64))]
    pub conditions: Vec<RepairCondition>,
    /// The breaker: most of the pool's nodes that may be unhealthy at once
    /// (a count, or a percentage of the pool's nodes rounded up) for
    /// repairs to go on. Beyond it the fault is likely not the nodes' own
    /// (a bad image, a driver, the network) and replacing them would not
    /// fix it: repairs in the pool stop until it is back under.
    #[serde(default = "default_max_unhealthy")]
    #[schemars(regex(pattern = BUDGET_NODES_PATTERN))]
    pub max_unhealthy: String,
    /// How long a rebooted node is given to become healthy; still (or
    /// again) unhealthy after it, the node is replaced (Go duration).
    #[serde(default = "default_reboot_timeout")]
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    pub reboot_timeout: String,
}

impl Default for Repair {
    fn default() -> Self {
        Repair {
            conditions: default_conditions(),
            max_unhealthy: default_max_unhealthy(),
            reboot_timeout: default_reboot_timeout(),
        }
    }
}

impl Repair {
    /// Whether the policy is the default one (left out when serializing).
    pub fn is_default(&self) -> bool {
        *self == Repair::default()
    }

    /// `maxUnhealthy` parsed.
    ///
    /// # Errors
    ///
    /// A message when it is neither a count nor a percentage.
    pub fn max_unhealthy_nodes(&self) -> Result<BudgetNodes, String> {
        BudgetNodes::parse(&self.max_unhealthy)
    }

    /// `rebootTimeout` parsed.
    ///
    /// # Errors
    ///
    /// [`DurationError`] when it is not a duration.
    pub fn reboot_timeout_duration(&self) -> Result<Duration, DurationError> {
        parse_duration(&self.reboot_timeout)
    }
}

/// The condition the EKS node monitoring agent sets for GPU and Neuron
/// faults.
pub const ACCELERATED_HARDWARE_READY: &str = "AcceleratedHardwareReady";

/// The reasons of [`ACCELERATED_HARDWARE_READY`] a reboot does not fix:
/// the agent says of `NvidiaFabricError` that it "persists across reboots
/// and requires instance replacement"; `NvidiaDeviceCountMismatch` is a GPU
/// the instance no longer shows.
pub const REPLACE_AT_ONCE_PATTERN: &str = "^(NvidiaFabricError|NvidiaDeviceCountMismatch)$";

fn default_conditions() -> Vec<RepairCondition> {
    use ConditionStatus::{False, Unknown};
    use RepairAction::{Reboot, Replace};
    vec![
        RepairCondition::new("Ready", False, "30m", Replace),
        RepairCondition::new("Ready", Unknown, "30m", Replace),
        RepairCondition::new(ACCELERATED_HARDWARE_READY, False, "10m", Reboot),
        RepairCondition {
            reason_pattern: Some(REPLACE_AT_ONCE_PATTERN.into()),
            ..RepairCondition::new(ACCELERATED_HARDWARE_READY, False, "10m", Replace)
        },
        RepairCondition::new("StorageReady", False, "30m", Replace),
        RepairCondition::new("NetworkingReady", False, "30m", Replace),
        RepairCondition::new("KernelReady", False, "30m", Replace),
        RepairCondition::new("ContainerRuntimeReady", False, "30m", Replace),
    ]
}

fn default_max_unhealthy() -> String {
    "20%".into()
}

fn default_reboot_timeout() -> String {
    "15m".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unset_repair_block_reads_as_the_eks_defaults_and_an_empty_list_turns_repair_off() {
        let r: Repair = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(r.is_default());
        assert_eq!(r.conditions.len(), 8);
        let accel: Vec<&RepairCondition> = r
            .conditions
            .iter()
            .filter(|c| c.type_ == ACCELERATED_HARDWARE_READY)
            .collect();
        assert_eq!(accel[0].action, RepairAction::Reboot);
        assert_eq!(accel[0].toleration(), Ok(Duration::from_secs(600)));
        assert_eq!(accel[1].action, RepairAction::Replace);
        assert_eq!(r.max_unhealthy_nodes(), Ok(BudgetNodes::Percent(20)));
        assert_eq!(r.reboot_timeout_duration(), Ok(Duration::from_secs(900)));
        let off: Repair = serde_json::from_value(serde_json::json!({"conditions": []})).unwrap();
        assert!(off.conditions.is_empty());
        assert!(!off.is_default());
    }

    #[test]
    fn a_rule_reads_from_the_apis_spelling() {
        let c: RepairCondition = serde_json::from_value(serde_json::json!({
            "type": "GpuDown", "status": "True", "reasonPattern": "^Xid",
            "tolerationDuration": "1m"
        }))
        .unwrap();
        assert_eq!(c.status, ConditionStatus::True);
        assert_eq!(c.action, RepairAction::Replace);
        assert_eq!(c.reason_pattern.as_deref(), Some("^Xid"));
        assert_eq!(c.toleration(), Ok(Duration::from_secs(60)));
    }
}
