//! The NodePool CRD (`quartermaster.dev/v1alpha1`, cluster-scoped): which
//! nodes Quartermaster may launch for pending pods, how much, how it shares
//! GPUs, how it answers spot interruptions, when it pre-warms capacity and how
//! much interruption risk it accepts. Field meanings and defaults are in
//! `docs/crds.md`; offline checks in [`super::validate`].

use super::common::{resource_list_schema, Condition, Requirement, ResourceList, Taint};
use super::duration::{parse_duration, DurationError, DURATION_PATTERN};
use super::quantity::{quantity_value, QuantityError};
use crate::catalog::CapacityType;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

mod disruption;
mod policies;

pub use disruption::{Budget, BudgetNodes, ConsolidationPolicy, Disruption};
pub use policies::{
    CheckpointHook, GpuSharing, GpuSharingMode, InterruptionPolicy, PrewarmWindow, RebalanceAction,
    RiskPolicy,
};

/// Key in `spec.limits`: most nodes the pool may have.
pub const LIMIT_NODES: &str = "nodes";
/// Key in `spec.limits`: most USD per hour the pool's nodes may cost together.
pub const LIMIT_COST_PER_HOUR: &str = "costPerHour";

/// Pattern of `consolidateAfter`: a duration or `Never`.
pub const CONSOLIDATE_AFTER_PATTERN: &str = r"^(([0-9]+(\.[0-9]+)?(ms|s|m|h))+|Never)$";
/// Pattern of `expireAfter`: a duration or `Never`.
pub const EXPIRE_AFTER_PATTERN: &str = CONSOLIDATE_AFTER_PATTERN;
/// Pattern of a disruption budget's `nodes`: a count (`3`) or a percentage (`10%`).
pub const BUDGET_NODES_PATTERN: &str = r"^((100|[0-9]{1,2})%|[0-9]+)$";
/// Pattern of a MIG profile name (`1g.10gb`).
pub const MIG_PROFILE_PATTERN: &str = r"^[1-7]g\.[0-9]+gb$";
/// Pattern of a pre-warm window name (a DNS label).
pub const WINDOW_NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// Condition types of a NodePool.
pub mod conditions {
    /// The pool is valid and Quartermaster launches nodes for it.
    pub const READY: &str = "Ready";
    /// The pool passed the controller's validation (the same checks as
    /// `quartermaster validate`); `False` names the first problem.
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
}

/// What a NodePool may launch and how its nodes are managed.
// kube's `printcolumn(..)` repeats `type_ = ...`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[kube(
    group = "quartermaster.dev",
    version = "v1alpha1",
    kind = "NodePool",
    plural = "nodepools",
    shortname = "qnp",
    category = "quartermaster",
    status = "NodePoolStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "A NodePool: a template for the GPU, accelerator and CPU nodes Quartermaster may launch, with limits and disruption, interruption, GPU-sharing, pre-warm and risk policies.",
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".status.nodes"),
    printcolumn(
        name = "GPUs",
        type_ = "string",
        description = "nvidia.com/gpu of the pool's nodes",
        json_path = ".status.resources.nvidia\\.com/gpu"
    ),
    printcolumn(
        name = "Cost/h",
        type_ = "number",
        description = "USD per hour of the pool's nodes",
        json_path = ".status.costPerHour"
    ),
    printcolumn(name = "Weight", type_ = "integer", json_path = ".spec.weight"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Capacity",
        type_ = "string",
        priority = 1,
        json_path = ".spec.capacityTypes"
    ),
    printcolumn(
        name = "Sharing",
        type_ = "string",
        priority = 1,
        json_path = ".spec.gpuSharing.mode"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    /// Labels, annotations, taints and requirements of the nodes the pool launches.
    #[serde(default, skip_serializing_if = "NodeClaimTemplate::is_empty")]
    pub template: NodeClaimTemplate,
    /// How nodes may be bought: `spot`, `on-demand`, `reserved` (the
    /// capacity reservations and Capacity Blocks the node class selects,
    /// used before the others up to their available count), or several (the
    /// planner picks the cheapest risk-adjusted offering among them).
    /// Requirements on the capacity-type label (`quartermaster.dev/` or
    /// `karpenter.sh/capacity-type`) narrow them. Unset (or empty): the
    /// capacity types those requirements allow, and on-demand alone without
    /// one (Karpenter's default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3))]
    pub capacity_types: Vec<CapacityType>,
    /// Upper bounds over all the pool's nodes: any resource (`nvidia.com/gpu`,
    /// `cpu`, `memory`, ...), `nodes` (a count) and `costPerHour` (USD per hour,
    /// a plain number).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    #[x_kube(
        validation = Rule::new("!('nodes' in self) || string(self['nodes']).matches('^[0-9]+$')")
            .message("limits.nodes must be a whole number of nodes"),
        validation = Rule::new("!('costPerHour' in self) || string(self['costPerHour']).matches('^[0-9]+(\\\\.[0-9]+)?$')")
            .message("limits.costPerHour must be a plain number of USD per hour, e.g. 250 or 99.5")
    )]
    pub limits: ResourceList,
    /// Preference among pools that can all serve a pod: higher is tried first
    /// (0..=100; unset is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub weight: Option<i32>,
    /// When and how fast empty or underutilized nodes are removed.
    #[serde(default)]
    pub disruption: Disruption,
    /// What happens on a spot interruption notice or rebalance recommendation.
    #[serde(default)]
    pub interruption: InterruptionPolicy,
    /// How the GPUs of the pool's nodes are shared between pods.
    #[serde(default)]
    pub gpu_sharing: GpuSharing,
    /// Windows in which capacity is launched ahead of demand.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub prewarm: Vec<PrewarmWindow>,
    /// How much spot interruption risk the pool accepts.
    #[serde(default)]
    pub risk: RiskPolicy,
}

/// The capacity-type labels, ours and Karpenter's: a requirement on
/// either narrows a pool's capacity types.
pub const CAPACITY_TYPE_KEYS: [&str; 2] = [
    crate::labels::CAPACITY_TYPE,
    crate::labels::KARPENTER_CAPACITY_TYPE,
];

/// Every capacity type, in the order [`NodePoolSpec::allowed_capacity_types`]
/// lists them.
const ALL_CAPACITY_TYPES: [CapacityType; 3] = [
    CapacityType::Spot,
    CapacityType::OnDemand,
    CapacityType::Reserved,
];

/// A limit in `spec.limits` that cannot be read as a number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("limits[{name}]: {reason}")]
pub struct LimitError {
    /// The limit's key.
    pub name: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The largest resource limit: 2^53, beyond which a float no longer holds
/// every whole number (and a CPU limit in millicores would pass `i64`).
/// Leave a limit out to have none.
pub const MAX_RESOURCE_LIMIT: f64 = 9_007_199_254_740_992.0;

impl NodePool {
    /// Whether the controller marked the pool not `Ready` (invalid, or its
    /// EC2NodeClass is missing or not Ready): nothing is launched for it
    /// (no new nodes, no replacements) until it is Ready again. A pool
    /// without that condition (the simulator's, one not reconciled yet) is
    /// not held.
    pub fn is_marked_not_ready(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == conditions::READY && c.status == "False")
        })
    }
}

impl NodePoolSpec {
    /// The capacity types the pool may buy: those `capacityTypes` lists
    /// (when unset or empty: every capacity type if the pool requires the
    /// capacity-type label, on-demand alone if not, as Karpenter defaults),
    /// less those a requirement on `quartermaster.dev/capacity-type` or
    /// `karpenter.sh/capacity-type` rules out. Empty when they exclude
    /// every listed one (validation refuses such a pool).
    pub fn allowed_capacity_types(&self) -> Vec<CapacityType> {
        let reqs: Vec<&Requirement> = self
            .template
            .spec
            .requirements
            .iter()
            .filter(|r| CAPACITY_TYPE_KEYS.contains(&r.key.as_str()))
            .collect();
        let listed: Vec<CapacityType> = match (&self.capacity_types[..], reqs.is_empty()) {
            ([], true) => vec![CapacityType::OnDemand],
            ([], false) => ALL_CAPACITY_TYPES.to_vec(),
            (listed, _) => listed.to_vec(),
        };
        let mut allowed: Vec<CapacityType> = Vec::new();
        for ct in listed {
            let ok = reqs
                .iter()
                .all(|r| r.matches(&BTreeMap::from([(r.key.clone(), ct.as_str().to_string())])));
            if ok && !allowed.contains(&ct) {
                allowed.push(ct);
            }
        }
        allowed
    }

    /// The limit of that name as a number (`nvidia.com/gpu: 16` is 16.0,
    /// `memory: 1Ti` is bytes, `cpu: 500m` is 0.5), `None` when unset.
    ///
    /// # Errors
    ///
    /// [`LimitError`] when the value is not a quantity, is negative, or is
    /// larger than [`MAX_RESOURCE_LIMIT`] (`-1e400` is an error, not an
    /// unlimited budget).
    pub fn limit(&self, name: &str) -> Result<Option<f64>, LimitError> {
        let err = |reason: String| LimitError {
            name: name.to_string(),
            reason,
        };
        let Some(q) = self.limits.get(name) else {
            return Ok(None);
        };
        match quantity_value(q).map_err(|e: QuantityError| err(e.to_string()))? {
            v if v < 0.0 => Err(err(format!("{:?} is negative", q.0))),
            v if v > MAX_RESOURCE_LIMIT => Err(err(format!(
                "{:?} is larger than the largest limit, 2^53 (leave the limit out for none)",
                q.0
            ))),
            v => Ok(Some(v)),
        }
    }

    /// The resource limits as numbers, without `nodes` and `costPerHour`.
    ///
    /// # Errors
    ///
    /// [`LimitError`] for the first value that is not a quantity.
    pub fn resource_limits(&self) -> Result<BTreeMap<String, f64>, LimitError> {
        self.limits
            .keys()
            .filter(|k| *k != LIMIT_NODES && *k != LIMIT_COST_PER_HOUR)
            .map(|k| Ok((k.clone(), self.limit(k)?.unwrap_or_default())))
            .collect()
    }

    /// `limits.nodes`: most nodes the pool may have, `None` when unset.
    ///
    /// # Errors
    ///
    /// [`LimitError`] when the value is not a whole, non-negative number.
    pub fn node_limit(&self) -> Result<Option<u64>, LimitError> {
        let Some(q) = self.limits.get(LIMIT_NODES) else {
            return Ok(None);
        };
        // i64, not u64: the planner counts nodes in i64, and a u64 above
        // i64::MAX would wrap to a negative count.
        match q.0.parse::<i64>() {
            Ok(n) if n >= 0 && !q.0.starts_with(['+', '-']) => Ok(Some(n as u64)),
            _ => Err(LimitError {
                name: LIMIT_NODES.into(),
                reason: format!(
                    "{:?} is not a whole number of nodes (0 to {})",
                    q.0,
                    i64::MAX
                ),
            }),
        }
    }

    /// `limits.costPerHour`: most USD per hour the pool's nodes may cost
    /// together, `None` when unset.
    ///
    /// # Errors
    ///
    /// [`LimitError`] when the value is not a plain non-negative number.
    pub fn cost_limit_per_hour(&self) -> Result<Option<f64>, LimitError> {
        let Some(q) = self.limits.get(LIMIT_COST_PER_HOUR) else {
            return Ok(None);
        };
        let s = q.0.as_str();
        let plain = !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && s.bytes().filter(|b| *b == b'.').count() <= 1
            && !s.starts_with('.')
            && !s.ends_with('.');
        match s.parse::<f64>() {
            Ok(v) if plain && v.is_finite() => Ok(Some(v)),
            _ => Err(LimitError {
                name: LIMIT_COST_PER_HOUR.into(),
                reason: format!(
                    "{s:?} is not a plain number of USD per hour (e.g. \"250\" or \"99.5\")"
                ),
            }),
        }
    }

    /// The pool's weight, 0 when unset.
    pub fn weight_or_default(&self) -> i32 {
        self.weight.unwrap_or(0)
    }
}

/// Template of the NodeClaims (and so the nodes) a pool launches.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    /// Labels and annotations put on every node.
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,
    /// Taints and requirements of every node.
    #[serde(default, skip_serializing_if = "NodeClaimTemplateSpec::is_empty")]
    pub spec: NodeClaimTemplateSpec,
}

impl NodeClaimTemplate {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.metadata.is_empty() && self.spec.is_empty()
    }
}

/// Labels and annotations of a pool's nodes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateMetadata {
    /// Labels put on every node (in addition to the well-known ones
    /// Quartermaster sets). Well-known labels (zone, instance type,
    /// hostname, ...) and the restricted domains `kubernetes.io`, `k8s.io`
    /// and `quartermaster.dev` (except `node.kubernetes.io/` and
    /// `kops.k8s.io/`) are refused: they would overwrite what the node is.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = super::validate::MAX_LABELS))]
    #[x_kube(
        validation = Rule::new(super::validate::well_known_label_rule())
            .message(super::validate::WELL_KNOWN_LABEL_MESSAGE),
        validation = Rule::new(super::validate::label_domain_rule())
            .message(super::validate::LABEL_DOMAIN_MESSAGE)
    )]
    pub labels: BTreeMap<String, String>,
    /// Annotations put on every node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// Taints and requirements of a pool's nodes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints every node carries; only pods that tolerate them land there
    /// (e.g. `nvidia.com/gpu:NoSchedule`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub taints: Vec<Taint>,
    /// Taints a node carries only until it is initialized (drivers and device
    /// plugins ready); pods need not tolerate them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub startup_taints: Vec<Taint>,
    /// Requirements on node labels (ANDed) that select instance types, zones
    /// and capacity types; `Gt`/`Lt` apply to integer labels such as
    /// `quartermaster.dev/gpu-count` and `quartermaster.dev/gpu-memory-gib`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub requirements: Vec<Requirement>,
    /// Longest a node may take to drain once its deletion starts (Go
    /// duration, e.g. `1h`), as Karpenter's field: after it, pods still on
    /// the node are deleted (not evicted: PodDisruptionBudgets and
    /// do-not-disrupt no longer hold it) and the instance is terminated.
    /// Unset: a drain waits for its pods as long as it takes. Copied onto
    /// each NodeClaim at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN), length(max = 32))]
    pub termination_grace_period: Option<String>,
    /// How long a node may live (Go duration, e.g. `720h`, or `Never`), as
    /// Karpenter's field: a node older than this is replaced through the
    /// checkpoint-first drain (replacement launched first where the pool
    /// allows, checkpoints requested, pods evicted). Unset: nodes never
    /// expire (Karpenter's own default is `720h`; `quartermaster convert`
    /// writes it out when a Karpenter pool leaves it unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = EXPIRE_AFTER_PATTERN), length(max = 32))]
    pub expire_after: Option<String>,
    /// The EC2NodeClass the pool's nodes are launched with
    /// (`group: quartermaster.dev, kind: EC2NodeClass, name: ...`). Unset:
    /// the EC2NodeClass named `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_ref: Option<super::NodeClassReference>,
    /// Launch the pool's Elastic Fabric Adapter types (p4d, p5, trn1, ...)
    /// with every EFA interface they have and in the pool's cluster
    /// placement group, even when no pod requests `vpc.amazonaws.com/efa`
    /// (for workloads that use the fabric without asking the scheduler for
    /// it). A gang in such a pool stays on one instance type. Types without
    /// EFA launch as usual. The pool's EC2NodeClass is then checked for the
    /// security group rule EFA needs (condition `SecurityGroupsAllowEFA`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub efa: bool,
}

impl NodeClaimTemplateSpec {
    /// `expireAfter` parsed: `None` when unset or `Never`.
    ///
    /// # Errors
    ///
    /// [`DurationError`] when it is neither `Never` nor a duration.
    pub fn expire_after_duration(&self) -> Result<Option<Duration>, DurationError> {
        match self.expire_after.as_deref() {
            None | Some("Never") => Ok(None),
            Some(d) => parse_duration(d).map(Some),
        }
    }

    /// `terminationGracePeriod` parsed: `None` when unset.
    ///
    /// # Errors
    ///
    /// [`DurationError`] when it is not a duration.
    pub fn termination_grace_period_duration(&self) -> Result<Option<Duration>, DurationError> {
        self.termination_grace_period
            .as_deref()
            .map(parse_duration)
            .transpose()
    }

    /// The name of the pool's EC2NodeClass: its `nodeClassRef`'s, or
    /// [`super::nodeclass::DEFAULT_NODE_CLASS`].
    pub fn node_class_name(&self) -> &str {
        self.node_class_ref
            .as_ref()
            .map_or(super::nodeclass::DEFAULT_NODE_CLASS, |r| r.name.as_str())
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.node_class_ref.is_none()
            && self.taints.is_empty()
            && self.startup_taints.is_empty()
            && self.requirements.is_empty()
            && self.termination_grace_period.is_none()
            && self.expire_after.is_none()
    }
}

/// What the controller observed about a pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Conditions: `Ready`, `ValidationSucceeded`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Resources of the pool's launched nodes (their capacity, what counts
    /// against `limits`), keyed like `limits`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "resource_list_schema")]
    pub resources: ResourceList,
    /// Nodes (launched NodeClaims) of the pool.
    #[serde(default)]
    pub nodes: i64,
    /// USD per hour of the pool's nodes together, at their launch prices.
    #[serde(default)]
    pub cost_per_hour: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Operator;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn spec_with_limits(pairs: &[(&str, &str)]) -> NodePoolSpec {
        NodePoolSpec {
            limits: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
            ..NodePoolSpec::default()
        }
    }

    #[test]
    fn capacity_types_come_from_the_requirements_when_unset_and_are_narrowed_by_them_when_set() {
        let spec = |capacity_types: &[CapacityType], reqs: &[(&str, Operator, &[&str])]| {
            let mut s = NodePoolSpec {
                capacity_types: capacity_types.to_vec(),
                ..NodePoolSpec::default()
            };
            s.template.spec.requirements = reqs
                .iter()
                .map(|(k, op, v)| Requirement::new(k, *op, v))
                .collect();
            s.allowed_capacity_types()
        };
        use CapacityType::{OnDemand, Reserved, Spot};
        use Operator::{In, NotIn};
        let karpenter = crate::labels::KARPENTER_CAPACITY_TYPE;
        let ours = crate::labels::CAPACITY_TYPE;
        assert_eq!(spec(&[], &[]), [OnDemand]);
        assert_eq!(spec(&[], &[(karpenter, In, &["spot"])]), [Spot]);
        assert_eq!(
            spec(&[], &[(karpenter, In, &["spot", "on-demand"])]),
            [Spot, OnDemand]
        );
        assert_eq!(spec(&[], &[(ours, NotIn, &["spot"])]), [OnDemand, Reserved]);
        assert_eq!(
            spec(&[Spot, OnDemand], &[(karpenter, In, &["spot"])]),
            [Spot]
        );
        assert_eq!(spec(&[OnDemand], &[(karpenter, In, &["spot"])]), []);
        assert_eq!(spec(&[Spot], &[("team", In, &["a"])]), [Spot]);
    }

    #[test]
    fn minimal_pool_gets_karpenter_like_defaults() {
        let pool: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "quartermaster.dev/v1alpha1",
            "kind": "NodePool",
            "metadata": { "name": "default" },
            "spec": {}
        }))
        .unwrap();
        let s = &pool.spec;
        assert!(s.capacity_types.is_empty());
        assert_eq!(s.allowed_capacity_types(), [CapacityType::OnDemand]);
        assert_eq!(
            s.disruption.consolidation_policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
        assert_eq!(s.disruption.consolidate_after, "1m");
        assert_eq!(s.disruption.budgets, [Budget::default()]);
        assert_eq!(s.disruption.budgets[0].nodes, "10%");
        assert_eq!(s.interruption.checkpoint_grace_period, "90s");
        assert_eq!(
            s.interruption.on_rebalance_recommendation,
            RebalanceAction::Ignore
        );
        assert_eq!(s.gpu_sharing.mode, GpuSharingMode::None);
        assert_eq!(s.risk.risk_aversion, 1.0);
        assert_eq!(s, &NodePoolSpec::default());
    }

    #[test]
    fn limits_read_as_numbers() {
        let s = spec_with_limits(&[
            ("nvidia.com/gpu", "64"),
            ("memory", "1Ti"),
            ("cpu", "500m"),
            ("nodes", "10"),
            ("costPerHour", "250.5"),
        ]);
        assert_eq!(s.limit("nvidia.com/gpu"), Ok(Some(64.0)));
        assert_eq!(s.limit("cpu"), Ok(Some(0.5)));
        assert_eq!(s.limit("aws.amazon.com/neuron"), Ok(None));
        assert_eq!(s.node_limit(), Ok(Some(10)));
        assert_eq!(s.cost_limit_per_hour(), Ok(Some(250.5)));
        let r = s.resource_limits().unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r["memory"], 1024f64.powi(4));
    }

    #[test]
    fn cost_and_node_limits_must_be_plain_numbers() {
        assert!(spec_with_limits(&[("costPerHour", "1k")])
            .cost_limit_per_hour()
            .is_err());
        assert!(spec_with_limits(&[("costPerHour", "cheap")])
            .cost_limit_per_hour()
            .is_err());
        assert!(spec_with_limits(&[("nodes", "2.5")]).node_limit().is_err());
        assert!(spec_with_limits(&[("cpu", "lots")]).limit("cpu").is_err());
        assert!(spec_with_limits(&[("nodes", "9223372036854775808")])
            .node_limit()
            .is_err());
    }

    #[test]
    fn overflowing_and_negative_limits_are_errors_not_unlimited_budgets() {
        for (v, why) in [
            ("-1e400", "out of range"),
            ("1e400", "out of range"),
            ("-4", "negative"),
            ("1e17", "largest limit"),
        ] {
            let s = spec_with_limits(&[("nvidia.com/gpu", v)]);
            let e = s.limit("nvidia.com/gpu").unwrap_err();
            assert!(e.to_string().contains(why), "{v}: {e}");
            assert!(s.resource_limits().is_err(), "{v}");
        }
        assert_eq!(
            spec_with_limits(&[("memory", "8Pi")]).limit("memory"),
            Ok(Some(1024f64.powi(5) * 8.0))
        );
    }
}
