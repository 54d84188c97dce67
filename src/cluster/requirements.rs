//! Label requirements (node selectors and required node affinity) and
//! taints/tolerations, evaluated as the Kubernetes scheduler does.

use std::collections::BTreeMap;
use std::fmt;

/// Node labels.
pub type Labels = BTreeMap<String, String>;

pub use crate::api::TaintEffect as Effect;
pub use crate::api::{Operator, Requirement};

/// Parses an enum the way the API spells it (`In`, `NoSchedule`).
///
/// # Errors
/// Names the unknown value.
pub fn parse_enum<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("unknown value {s:?}"))
}

/// Required node affinity: a node must satisfy every requirement of at least
/// one term (terms are ORed, requirements within a term ANDed). No terms means
/// no constraint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NodeAffinity {
    /// The ORed terms.
    pub terms: Vec<Vec<Requirement>>,
}

impl NodeAffinity {
    /// True when `labels` satisfy some term (or there are no terms).
    pub fn matches<L: crate::labels::LabelLookup + ?Sized>(&self, labels: &L) -> bool {
        self.terms.is_empty()
            || self
                .terms
                .iter()
                .any(|t| t.iter().all(|r| r.matches(labels)))
    }

    /// The values of label `key` the affinity confines a node to, when
    /// every term requires `key` with `In` (a `nodeSelector` is in every
    /// term): the union over the terms of each term's allowed values.
    /// `None` when some term leaves `key` open, or there are no terms.
    pub fn pinned(&self, key: &str) -> Option<std::collections::BTreeSet<&str>> {
        use std::collections::BTreeSet;
        if self.terms.is_empty() {
            return None;
        }
        let mut all = BTreeSet::new();
        for term in &self.terms {
            let allowed = term
                .iter()
                .filter(|r| r.key == key && r.operator == Operator::In)
                .map(|r| r.values.iter().map(String::as_str).collect::<BTreeSet<_>>())
                .reduce(|a, b| a.intersection(&b).copied().collect())?;
            all.extend(allowed);
        }
        Some(all)
    }

    /// The requirement that rules `labels` out: for a single term, the first
    /// failing requirement; for several, the first failing one of the first.
    pub fn first_failure<L: crate::labels::LabelLookup + ?Sized>(
        &self,
        labels: &L,
    ) -> Option<&Requirement> {
        if self.matches(labels) {
            return None;
        }
        self.terms
            .first()
            .and_then(|t| t.iter().find(|r| !r.matches(labels)))
    }
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value (may be empty).
    pub value: String,
    /// Taint effect.
    pub effect: Effect,
}

impl Taint {
    /// A taint `key=value:effect`.
    pub fn new(key: &str, value: &str, effect: Effect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect.as_str())
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect.as_str())
        }
    }
}

/// A pod toleration.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Toleration {
    /// Key tolerated; empty with `exists` tolerates every key.
    pub key: String,
    /// `Exists` (any value) rather than `Equal`.
    pub exists: bool,
    /// Value for `Equal`.
    pub value: String,
    /// Effect tolerated; `None` tolerates every effect.
    pub effect: Option<Effect>,
}

impl Toleration {
    /// Tolerates `key` with any value and effect.
    pub fn exists(key: &str) -> Toleration {
        Toleration {
            key: key.into(),
            exists: true,
            value: String::new(),
            effect: None,
        }
    }

    /// True when this toleration covers `taint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if self.key.is_empty() {
            return self.exists;
        }
        self.key == taint.key && (self.exists || self.value == taint.value)
    }
}

/// The first taint that blocks scheduling (NoSchedule or NoExecute) and that no
/// toleration covers.
pub fn untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints.iter().find(|t| {
        t.effect != Effect::PreferNoSchedule && !tolerations.iter().any(|tol| tol.tolerates(t))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
        Requirement::new(key, op, values)
    }

    #[test]
    fn a_key_is_pinned_only_when_every_term_confines_it() {
        let pool = |vals: &[&str]| req("pool", Operator::In, vals);
        let aff = |terms: Vec<Vec<Requirement>>| NodeAffinity { terms };
        let set = |v: &[&'static str]| Some(v.iter().copied().collect());
        assert_eq!(aff(vec![]).pinned("pool"), None);
        assert_eq!(
            aff(vec![vec![pool(&["a", "b"])]]).pinned("pool"),
            set(&["a", "b"])
        );
        assert_eq!(
            aff(vec![vec![pool(&["a", "b"]), pool(&["b", "c"])]]).pinned("pool"),
            set(&["b"]),
            "requirements in a term are ANDed"
        );
        assert_eq!(
            aff(vec![vec![pool(&["a"])], vec![pool(&["c"])]]).pinned("pool"),
            set(&["a", "c"]),
            "terms are ORed"
        );
        assert_eq!(
            aff(vec![
                vec![pool(&["a"])],
                vec![req("zone", Operator::In, &["z"])]
            ])
            .pinned("pool"),
            None,
            "the second term leaves the pool open"
        );
        assert_eq!(
            aff(vec![vec![req("pool", Operator::NotIn, &["a"])]]).pinned("pool"),
            None
        );
    }

    #[test]
    fn affinity_terms_are_ored_and_requirements_anded() {
        let l = labels(&[("a", "1"), ("b", "2")]);
        let aff = NodeAffinity {
            terms: vec![
                vec![
                    req("a", Operator::In, &["1"]),
                    req("b", Operator::In, &["3"]),
                ],
                vec![req("b", Operator::In, &["2"])],
            ],
        };
        assert!(aff.matches(&l));
        let only_first = NodeAffinity {
            terms: vec![aff.terms[0].clone()],
        };
        assert!(!only_first.matches(&l));
        assert_eq!(only_first.first_failure(&l).unwrap().key, "b");
    }

    #[test]
    fn a_gpu_taint_blocks_pods_without_the_toleration() {
        let taints = [
            Taint::new("nvidia.com/gpu", "", Effect::NoSchedule),
            Taint::new("soft", "", Effect::PreferNoSchedule),
        ];
        assert_eq!(untolerated(&taints, &[]).unwrap().key, "nvidia.com/gpu");
        assert!(untolerated(&taints, &[Toleration::exists("nvidia.com/gpu")]).is_none());
        let wrong_effect = Toleration {
            effect: Some(Effect::NoExecute),
            ..Toleration::exists("nvidia.com/gpu")
        };
        assert!(untolerated(&taints, &[wrong_effect]).is_some());
        let equal = Toleration {
            key: "nvidia.com/gpu".into(),
            exists: false,
            value: "present".into(),
            effect: None,
        };
        assert!(
            untolerated(&taints, &[equal]).is_some(),
            "Equal needs the same value"
        );
        let all = Toleration {
            key: String::new(),
            exists: true,
            value: String::new(),
            effect: None,
        };
        assert!(untolerated(&taints, &[all]).is_none());
    }
}
