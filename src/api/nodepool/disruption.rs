//! Voluntary disruption of a pool's nodes: the consolidation policy and the
//! budgets that bound how many nodes may go at once.

use crate::api::duration::{parse_duration, DurationError, DURATION_PATTERN};
use crate::api::schedule::CRON_PATTERN;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::{BUDGET_NODES_PATTERN, CONSOLIDATE_AFTER_PATTERN};

/// Which nodes consolidation may remove.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConsolidationPolicy {
    /// Only nodes without pods (other than daemons).
    WhenEmpty,
    /// Empty nodes, and nodes whose pods fit on cheaper or fewer nodes.
    #[default]
    WhenEmptyOrUnderutilized,
}

/// When and how fast nodes are removed voluntarily (consolidation).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// Which nodes may be consolidated.
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    /// How long a node must have been consolidatable before it is removed
    /// (Go duration, e.g. `30s`, `10m`), or `Never`.
    #[serde(default = "default_consolidate_after")]
    #[schemars(regex(pattern = CONSOLIDATE_AFTER_PATTERN), length(max = 32))]
    pub consolidate_after: String,
    /// Limits on how many nodes may be disrupted at once; the most
    /// restrictive active budget wins.
    #[serde(default = "default_budgets")]
    #[schemars(length(max = 50))]
    pub budgets: Vec<Budget>,
    /// Consolidate a node whose GPUs have all been idle (as DCGM reports,
    /// read from Prometheus) for this long, even though pods run on it
    /// (Go duration, e.g. `2h`): its pods are asked to checkpoint and
    /// evicted within the budgets (for `Underutilized`) and the node is
    /// removed; pods that come back are planned as usual. Unset: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    pub consolidate_idle_gpus_after: Option<String>,
}

impl Default for Disruption {
    fn default() -> Self {
        Disruption {
            consolidation_policy: ConsolidationPolicy::default(),
            consolidate_after: default_consolidate_after(),
            budgets: default_budgets(),
            consolidate_idle_gpus_after: None,
        }
    }
}

fn default_consolidate_after() -> String {
    "1m".into()
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget::default()]
}

impl Disruption {
    /// `consolidateAfter` parsed: `None` for `Never`.
    ///
    /// # Errors
    ///
    /// [`DurationError`] when it is neither `Never` nor a duration.
    pub fn consolidate_after_duration(&self) -> Result<Option<Duration>, DurationError> {
        if self.consolidate_after == "Never" {
            return Ok(None);
        }
        parse_duration(&self.consolidate_after).map(Some)
    }

    /// `consolidateIdleGpusAfter` parsed: `None` when unset.
    ///
    /// # Errors
    ///
    /// [`DurationError`] when it is not a duration.
    pub fn idle_gpus_after(&self) -> Result<Option<Duration>, DurationError> {
        self.consolidate_idle_gpus_after
            .as_deref()
            .map(parse_duration)
            .transpose()
    }
}

/// A disruption budget: at most `nodes` nodes disrupted at once, always or
/// during the windows opened by `schedule` for `duration`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(
    validation = Rule::new("has(self.schedule) == has(self.duration)")
        .message("schedule and duration must be set together")
)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// Most nodes disrupted at once: a count (`3`) or a percentage of the
    /// pool's nodes (`10%`, rounded up). `0` blocks disruption.
    #[serde(default = "default_budget_nodes")]
    #[schemars(regex(pattern = BUDGET_NODES_PATTERN))]
    pub nodes: String,
    /// When the budget is active: a 5-field cron expression (`0 9 * * 1-5`)
    /// or a macro (`@daily`), in UTC. Unset: always active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = CRON_PATTERN), length(max = 128))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each `schedule` time (Go
    /// duration, e.g. `8h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    pub duration: Option<String>,
    /// The disruptions the budget limits (Karpenter's `reasons`, plus
    /// `Unhealthy` for repair); unset or empty: all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 4))]
    pub reasons: Vec<BudgetReason>,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            nodes: default_budget_nodes(),
            schedule: None,
            duration: None,
            reasons: Vec::new(),
        }
    }
}

impl Budget {
    /// Whether the budget limits disruptions for `reason`.
    pub fn applies_to(&self, reason: BudgetReason) -> bool {
        self.reasons.is_empty() || self.reasons.contains(&reason)
    }
}

/// A voluntary disruption a budget may be limited to.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum BudgetReason {
    /// Removing empty nodes.
    Empty,
    /// Removing or replacing nodes whose pods fit elsewhere or on a
    /// cheaper node.
    Underutilized,
    /// Replacing nodes that no longer match their pool or node class.
    Drifted,
    /// Rebooting or replacing unhealthy nodes (repair).
    Unhealthy,
}

impl BudgetReason {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetReason::Empty => "Empty",
            BudgetReason::Underutilized => "Underutilized",
            BudgetReason::Drifted => "Drifted",
            BudgetReason::Unhealthy => "Unhealthy",
        }
    }
}

fn default_budget_nodes() -> String {
    "10%".into()
}

/// A budget's `nodes`, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetNodes {
    /// A number of nodes.
    Count(u32),
    /// A percentage (0..=100) of the pool's nodes, rounded up.
    Percent(u32),
}

impl BudgetNodes {
    /// Parses `3` or `10%`.
    ///
    /// # Errors
    ///
    /// A message when `s` is neither a count nor a percentage in 0..=100.
    pub fn parse(s: &str) -> Result<BudgetNodes, String> {
        let bad = || format!("{s:?} is neither a node count (\"3\") nor a percentage (\"10%\")");
        match s.strip_suffix('%') {
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                let p: u32 = p.parse().map_err(|_| bad())?;
                if p > 100 {
                    return Err(format!("{s:?}: a percentage must be at most 100%"));
                }
                Ok(BudgetNodes::Percent(p))
            }
            Some(_) => Err(bad()),
            None if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                s.parse().map(BudgetNodes::Count).map_err(|_| bad())
            }
            None => Err(bad()),
        }
    }

    /// How many of `total` nodes may be disrupted at once.
    pub fn allowed(self, total: u32) -> u32 {
        match self {
            BudgetNodes::Count(n) => n,
            BudgetNodes::Percent(p) => (u64::from(total) * u64::from(p)).div_ceil(100) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_nodes_are_counts_or_percentages_rounded_up() {
        assert_eq!(BudgetNodes::parse("3"), Ok(BudgetNodes::Count(3)));
        assert_eq!(BudgetNodes::parse("10%"), Ok(BudgetNodes::Percent(10)));
        assert_eq!(BudgetNodes::Percent(10).allowed(15), 2);
        assert_eq!(BudgetNodes::Percent(0).allowed(15), 0);
        assert_eq!(BudgetNodes::Count(3).allowed(1), 3);
        for bad in ["", "%", "101%", "ten", "-1", "1.5", "10 %"] {
            assert!(BudgetNodes::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn consolidate_after_never_means_no_duration() {
        let mut d = Disruption::default();
        assert_eq!(
            d.consolidate_after_duration(),
            Ok(Some(Duration::from_secs(60)))
        );
        d.consolidate_after = "Never".into();
        assert_eq!(d.consolidate_after_duration(), Ok(None));
    }
}
