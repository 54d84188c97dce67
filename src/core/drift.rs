//! Drift: whether a node still is what its NodePool and EC2NodeClass would
//! launch now. Each NodeClaim records what it was launched with (a
//! [`Stamp`]: the hash of its pool's template, the hash of its node class
//! and the image); [`detect`] compares that with the current stamp and says
//! which changed ([`Drift`]). Replacing drifted nodes (new node first,
//! within the pool's disruption budget) is consolidation's removal path
//! (`core::consolidation`); this module only says what drifted.
//!
//! Hashes are SHA-256 over a canonical JSON rendering (object keys sorted,
//! unset optional fields left out), so they are the same across runs,
//! processes and releases; [`HASH_VERSION`] changes when what is hashed
//! changes, and a claim stamped under another version is not drifted by
//! its hashes (only its image is compared), so an upgrade does not roll the
//! fleet. Rules: `docs/disruption.md`.

use crate::api::{NodePoolSpec, Requirement};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// Version of what the hashes cover; stamped on every claim next to them.
pub const HASH_VERSION: &str = "v1";

/// What a node was (or would now be) launched with. A field that is unknown
/// (a claim from before drift was recorded, a provider without node
/// classes) is `None` and never drifts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stamp {
    /// [`HASH_VERSION`] the hashes were made with.
    pub version: Option<String>,
    /// [`pool_template_hash`] of the pool.
    pub pool: Option<String>,
    /// Hash of the node class as the provider launches with it
    /// ([`ClassStamp::hash`]).
    pub node_class: Option<String>,
    /// The image (AMI ID) the node boots.
    pub image: Option<String>,
}

/// What the provider would launch a node with now: its node class's hash
/// and the image for the node's instance type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassStamp {
    /// Hash of the node class ([`hash_of`] of its launch settings, images
    /// left out: they are [`ClassStamp::image`]).
    pub hash: String,
    /// The image (AMI ID).
    pub image: String,
}

/// Which part of a node no longer matches its pool or class; the reason of
/// the NodeClaim's `Drifted` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Drift {
    /// The pool's template (labels, annotations, taints, startup taints,
    /// node class reference) changed, or the node's labels no longer meet
    /// its requirements.
    PoolTemplateChanged,
    /// The node class's launch settings changed.
    NodeClassChanged,
    /// The node class now resolves to another image for the node (a new
    /// release behind `al2023@latest`, another alias or AMI).
    ImageChanged,
}

impl Drift {
    /// The condition reason: `PoolTemplateChanged`, `NodeClassChanged`,
    /// `ImageChanged`.
    pub fn reason(self) -> &'static str {
        match self {
            Drift::PoolTemplateChanged => "PoolTemplateChanged",
            Drift::NodeClassChanged => "NodeClassChanged",
            Drift::ImageChanged => "ImageChanged",
        }
    }
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Drift::PoolTemplateChanged => "the NodePool's template changed",
            Drift::NodeClassChanged => "the EC2NodeClass changed",
            Drift::ImageChanged => "the EC2NodeClass resolves to a new image",
        })
    }
}

/// Which part drifted, comparing what the node was launched with to the
/// current stamp, in this order: pool template, node class, image. Hashes
/// made under another [`HASH_VERSION`] are not compared; unknown fields on
/// either side never drift.
pub fn detect(launched: &Stamp, current: &Stamp) -> Option<Drift> {
    let differs =
        |a: &Option<String>, b: &Option<String>| matches!((a, b), (Some(a), Some(b)) if a != b);
    let same_version = launched.version.is_some() && launched.version == current.version;
    if same_version && differs(&launched.pool, &current.pool) {
        return Some(Drift::PoolTemplateChanged);
    }
    if same_version && differs(&launched.node_class, &current.node_class) {
        return Some(Drift::NodeClassChanged);
    }
    differs(&launched.image, &current.image).then_some(Drift::ImageChanged)
}

/// [`detect`], then the pool's requirements against the node's labels: a
/// requirement on a label the node has that its value no longer meets
/// drifts the node too. Requirements are checked rather than hashed (as
/// Karpenter does), so that widening a pool (one more instance family) does
/// not replace every node; a requirement on a label the node does not carry
/// is not held against it.
pub fn detect_for(
    launched: &Stamp,
    current: &Stamp,
    pool: &NodePoolSpec,
    labels: &BTreeMap<String, String>,
) -> Option<Drift> {
    let unmet = |r: &&Requirement| labels.contains_key(&r.key) && !r.matches(labels);
    detect(launched, current).or_else(|| {
        pool.template
            .spec
            .requirements
            .iter()
            .any(|r| unmet(&r))
            .then_some(Drift::PoolTemplateChanged)
    })
}

/// The part of a pool's template that shapes a node, hashed.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PoolTemplate<'a> {
    labels: &'a BTreeMap<String, String>,
    annotations: &'a BTreeMap<String, String>,
    taints: &'a [crate::api::Taint],
    startup_taints: &'a [crate::api::Taint],
    node_class: &'a str,
}

/// The hash of what in a pool's template shapes its nodes: labels,
/// annotations, taints, startup taints and the node class it names
/// (`default` when unset, so naming the default explicitly is no change).
/// Requirements are not in it (see [`detect_for`]), nor are behaviour
/// fields (limits, disruption, interruption, weights, termination grace).
pub fn pool_template_hash(spec: &NodePoolSpec) -> String {
    let t = &spec.template;
    hash_of(&PoolTemplate {
        labels: &t.metadata.labels,
        annotations: &t.metadata.annotations,
        taints: &t.spec.taints,
        startup_taints: &t.spec.startup_taints,
        node_class: t.spec.node_class_name(),
    })
}

/// The first 16 hex digits of the SHA-256 of `value`'s canonical JSON
/// (object keys sorted at every level, whatever order the type declares
/// them in). A value that cannot be rendered as JSON hashes as `null`.
pub fn hash_of<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
    let mut text = String::new();
    canonical(&json, &mut text);
    let digest = Sha256::digest(text.as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// JSON with the keys of every object in sorted order.
fn canonical(v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Operator, Taint, TaintEffect};

    fn spec(edit: impl FnOnce(&mut NodePoolSpec)) -> NodePoolSpec {
        let mut s = NodePoolSpec::default();
        edit(&mut s);
        s
    }

    fn stamp(pool: &str, class: &str, image: &str) -> Stamp {
        Stamp {
            version: Some(HASH_VERSION.into()),
            pool: Some(pool.into()),
            node_class: Some(class.into()),
            image: Some(image.into()),
        }
    }

    #[test]
    fn the_pool_hash_is_a_fixed_value_for_a_fixed_template() {
        // Pinned: a change of this value rolls every fleet on upgrade, so it
        // must come with a new HASH_VERSION.
        assert_eq!(
            pool_template_hash(&NodePoolSpec::default()),
            hash_of(&serde_json::json!({
                "annotations": {}, "labels": {}, "nodeClass": "default",
                "startupTaints": [], "taints": []
            }))
        );
        assert_eq!(
            hash_of(&serde_json::json!({"b": 1, "a": [true, null]})),
            "51705a2c9eb3e7e4"
        );
    }

    #[test]
    fn key_order_does_not_change_a_hash() {
        let a = serde_json::json!({"x": {"b": 1, "a": 2}, "y": "z"});
        let mut map = serde_json::Map::new();
        map.insert("y".into(), "z".into());
        map.insert("x".into(), serde_json::json!({"a": 2, "b": 1}));
        assert_eq!(hash_of(&a), hash_of(&serde_json::Value::Object(map)));
    }

    #[test]
    fn what_shapes_a_node_changes_the_pool_hash_and_behaviour_does_not() {
        let base = pool_template_hash(&NodePoolSpec::default());
        let shaping = [
            spec(|s| {
                s.template
                    .metadata
                    .labels
                    .insert("team".into(), "ml".into());
            }),
            spec(|s| {
                s.template.spec.taints.push(Taint::new(
                    "nvidia.com/gpu",
                    "",
                    TaintEffect::NoSchedule,
                ))
            }),
            spec(|s| {
                s.template.spec.node_class_ref = Some(crate::api::NodeClassReference::to("big"))
            }),
        ];
        for s in &shaping {
            assert_ne!(pool_template_hash(s), base, "{:?}", s.template);
        }
        let behaviour = [
            spec(|s| s.weight = Some(10)),
            spec(|s| s.disruption.consolidate_after = "5m".into()),
            spec(|s| {
                s.template.spec.node_class_ref = Some(crate::api::NodeClassReference::to("default"))
            }),
            spec(|s| {
                s.template.spec.requirements.push(Requirement {
                    key: "karpenter.k8s.aws/instance-family".into(),
                    operator: Operator::In,
                    values: vec!["g6".into()],
                })
            }),
        ];
        for s in &behaviour {
            assert_eq!(pool_template_hash(s), base);
        }
    }

    #[test]
    fn drift_names_the_first_part_that_changed_and_unknowns_never_drift() {
        let launched = stamp("p1", "c1", "ami-1");
        assert_eq!(detect(&launched, &launched), None);
        assert_eq!(
            detect(&launched, &stamp("p2", "c2", "ami-2")),
            Some(Drift::PoolTemplateChanged)
        );
        assert_eq!(
            detect(&launched, &stamp("p1", "c2", "ami-2")),
            Some(Drift::NodeClassChanged)
        );
        assert_eq!(
            detect(&launched, &stamp("p1", "c1", "ami-2")),
            Some(Drift::ImageChanged)
        );
        let unknown = Stamp::default();
        assert_eq!(detect(&unknown, &stamp("p2", "c2", "ami-2")), None);
        assert_eq!(detect(&launched, &unknown), None);
    }

    #[test]
    fn hashes_of_another_version_are_not_compared_but_images_are() {
        let old = Stamp {
            version: Some("v0".into()),
            ..stamp("p0", "c0", "ami-1")
        };
        assert_eq!(detect(&old, &stamp("p1", "c1", "ami-1")), None);
        assert_eq!(
            detect(&old, &stamp("p1", "c1", "ami-2")),
            Some(Drift::ImageChanged)
        );
    }

    #[test]
    fn a_requirement_the_nodes_label_no_longer_meets_drifts_it() {
        let labels = BTreeMap::from([("karpenter.k8s.aws/instance-family".into(), "g5".into())]);
        let same = stamp("p", "c", "ami");
        let family = |v: &str| {
            spec(|s| {
                s.template.spec.requirements.push(Requirement {
                    key: "karpenter.k8s.aws/instance-family".into(),
                    operator: Operator::In,
                    values: vec![v.into()],
                })
            })
        };
        assert_eq!(detect_for(&same, &same, &family("g5"), &labels), None);
        assert_eq!(
            detect_for(&same, &same, &family("g6"), &labels),
            Some(Drift::PoolTemplateChanged)
        );
        // A label the node does not carry is not held against it.
        let other = spec(|s| {
            s.template.spec.requirements.push(Requirement {
                key: "example.com/rack".into(),
                operator: Operator::In,
                values: vec!["a".into()],
            })
        });
        assert_eq!(detect_for(&same, &same, &other, &labels), None);
    }
}
