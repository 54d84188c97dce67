//! Types both CRDs share: node-label requirements, taints, conditions and the
//! schema of resource maps.

use crate::labels;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// Resource name to quantity: `nvidia.com/gpu: 16`, `cpu: "64"`, `memory: 512Gi`.
pub type ResourceList = BTreeMap<String, Quantity>;

/// How a [`Requirement`] compares a node label with its values (the
/// operators of Kubernetes node affinity).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum Operator {
    /// The label's value is one of the values.
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label is an integer greater than the single value.
    Gt,
    /// The label is an integer less than the single value.
    Lt,
}

impl Operator {
    /// The operator as written in YAML (`In`, `NotIn`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A requirement on a node label, e.g. `quartermaster.dev/instance-family In
/// [p5, p4d]` or `quartermaster.dev/gpu-count Gt 3`. A pool's requirements
/// are ANDed; they select the instance types, zones and capacity types it may
/// launch.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, KubeSchema)]
#[x_kube(
    validation = Rule::new("(self.operator == 'In' || self.operator == 'NotIn') ? (has(self.values) && size(self.values) > 0) : true")
        .message("operators In and NotIn need at least one value"),
    validation = Rule::new("(self.operator == 'Exists' || self.operator == 'DoesNotExist') ? (!has(self.values) || size(self.values) == 0) : true")
        .message("operators Exists and DoesNotExist take no values"),
    validation = Rule::new("(self.operator == 'Gt' || self.operator == 'Lt') ? (has(self.values) && size(self.values) == 1 && self.values[0].matches('^-?[0-9]+$')) : true")
        .message("operators Gt and Lt take exactly one integer value"),
    validation = Rule::new(crate::api::validate::restricted_keys_rule())
        .message("this label is set by Quartermaster and cannot be required"),
    validation = Rule::new(crate::api::validate::karpenter_key_rule())
        .message(crate::api::validate::KARPENTER_KEY_MESSAGE)
)]
#[serde(rename_all = "camelCase")]
pub struct Requirement {
    /// The label key.
    #[schemars(length(min = 1, max = 316))]
    pub key: String,
    /// How the label is compared with the values.
    pub operator: Operator,
    /// Values: at least one for `In`/`NotIn`, none for
    /// `Exists`/`DoesNotExist`, one integer for `Gt`/`Lt`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(max = 63)))]
    pub values: Vec<String>,
}

impl Requirement {
    /// A requirement from its parts.
    pub fn new(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.to_string(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    /// Whether a node with `labels` satisfies the requirement (Kubernetes
    /// node-affinity semantics: `NotIn` and `DoesNotExist` hold for an absent
    /// label; `Gt`/`Lt` need the label and the value to be integers).
    ///
    /// A requirement on `topology.kubernetes.io/zone` takes the zone in
    /// either form: its values may be zone names (`us-east-1a`, what the
    /// node's zone label carries) or zone IDs (`use1-az4`, its
    /// `topology.k8s.aws/zone-id`). `In`/`Exists` hold when either label
    /// meets it, `NotIn`/`DoesNotExist` when both do.
    pub fn matches<L: labels::LabelLookup + ?Sized>(&self, labels: &L) -> bool {
        if self.key != labels::ZONE {
            return self.matches_value(labels.label(&self.key));
        }
        let (name, id) = (labels.label(labels::ZONE), labels.label(labels::ZONE_ID));
        match self.operator {
            Operator::In | Operator::Exists => self.matches_value(name) || self.matches_value(id),
            Operator::NotIn | Operator::DoesNotExist => {
                self.matches_value(name) && self.matches_value(id)
            }
            Operator::Gt | Operator::Lt => self.matches_value(name),
        }
    }

    /// Whether a label with this value (`None`: absent) satisfies the
    /// requirement.
    fn matches_value(&self, value: Option<&String>) -> bool {
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt | Operator::Lt => {
                let bound = self.values.first().and_then(|b| b.parse::<i64>().ok());
                let value = value.and_then(|v| v.parse::<i64>().ok());
                match (value, bound) {
                    (Some(v), Some(b)) if self.operator == Operator::Gt => v > b,
                    (Some(v), Some(b)) => v < b,
                    _ => false,
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.key, self.operator)?;
        if !self.values.is_empty() {
            write!(f, " [{}]", self.values.join(", "))?;
        }
        Ok(())
    }
}

/// What a taint does to pods that do not tolerate it.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum TaintEffect {
    /// New pods are not scheduled.
    NoSchedule,
    /// The scheduler avoids the node.
    PreferNoSchedule,
    /// Running pods are evicted too.
    NoExecute,
}

impl TaintEffect {
    /// The effect as written in YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// A node taint, e.g. `nvidia.com/gpu=present:NoSchedule`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    /// The taint key.
    #[schemars(length(min = 1, max = 316))]
    pub key: String,
    /// The taint value (may be omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub value: Option<String>,
    /// The taint effect.
    pub effect: TaintEffect,
}

impl Taint {
    /// A taint from its parts; an empty value is omitted.
    pub fn new(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.to_string(),
            value: (!value.is_empty()).then(|| value.to_string()),
            effect,
        }
    }
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(v) => write!(f, "{}={}:{}", self.key, v, self.effect.as_str()),
            None => write!(f, "{}:{}", self.key, self.effect.as_str()),
        }
    }
}

/// The condition of that type, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of that type is present with status `True`.
pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Schema of a [`ResourceList`]: an object of int-or-string quantities with
/// the API server's quantity pattern (instead of k8s-openapi's long
/// `Quantity` description repeated at every use).
pub(crate) fn resource_list_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": {
            "pattern": super::quantity::QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": true
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operator::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn requirements_follow_node_affinity_semantics() {
        let l = labels(&[("family", "p5"), ("gpus", "8")]);
        assert!(Requirement::new("family", In, &["p4d", "p5"]).matches(&l));
        assert!(!Requirement::new("family", NotIn, &["p5"]).matches(&l));
        assert!(Requirement::new("zone", NotIn, &["a"]).matches(&l));
        assert!(Requirement::new("gpus", Exists, &[]).matches(&l));
        assert!(Requirement::new("zone", DoesNotExist, &[]).matches(&l));
        assert!(Requirement::new("gpus", Gt, &["7"]).matches(&l));
        assert!(!Requirement::new("gpus", Lt, &["8"]).matches(&l));
        assert!(!Requirement::new("zone", Gt, &["1"]).matches(&l));
    }

    #[test]
    fn a_zone_requirement_matches_the_zone_by_name_or_by_id() {
        let node = labels(&[(labels::ZONE, "us-east-1a"), (labels::ZONE_ID, "use1-az6")]);
        for zone in ["us-east-1a", "use1-az6"] {
            assert!(Requirement::new(labels::ZONE, In, &[zone]).matches(&node));
            assert!(!Requirement::new(labels::ZONE, NotIn, &[zone]).matches(&node));
        }
        for zone in ["us-east-1b", "use1-az1"] {
            assert!(!Requirement::new(labels::ZONE, In, &[zone]).matches(&node));
            assert!(Requirement::new(labels::ZONE, NotIn, &[zone]).matches(&node));
        }
        assert!(Requirement::new(labels::ZONE, Exists, &[]).matches(&node));
        assert!(!Requirement::new(labels::ZONE, DoesNotExist, &[]).matches(&node));
        let id_only = labels(&[(labels::ZONE_ID, "use1-az6")]);
        assert!(Requirement::new(labels::ZONE, Exists, &[]).matches(&id_only));
        assert!(Requirement::new(labels::ZONE, DoesNotExist, &[]).matches(&labels(&[])));
        // The zone-ID key takes IDs only.
        assert!(!Requirement::new(labels::ZONE_ID, In, &["us-east-1a"]).matches(&node));
    }

    #[test]
    fn taints_and_requirements_display_like_kubectl() {
        assert_eq!(
            Taint::new("nvidia.com/gpu", "", TaintEffect::NoSchedule).to_string(),
            "nvidia.com/gpu:NoSchedule"
        );
        assert_eq!(
            Taint::new("a", "b", TaintEffect::NoExecute).to_string(),
            "a=b:NoExecute"
        );
        assert_eq!(
            Requirement::new("k", In, &["a", "b"]).to_string(),
            "k In [a, b]"
        );
    }
}
