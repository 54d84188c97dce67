//! A Karpenter NodePool's requirements in ours. Karpenter's capacity type
//! is a requirement on `karpenter.sh/capacity-type` (absent: on-demand);
//! ours is the field `capacityTypes`. Karpenter's well-known labels whose
//! meaning ours have exactly (`instance-family`, `instance-gpu-name`,
//! `instance-gpu-count`, the capacity reservation's ID and type, and
//! `instance-gpu-memory` where a bound in whole GiB selects the same MiB)
//! become ours, so that the pool reads as Quartermaster's everywhere; the
//! other Karpenter labels Quartermaster's nodes carry (those among the
//! catalog's instance-type labels, [`crate::catalog::INSTANCE_TYPE_KEYS`])
//! are kept as they are. `Gte`/`Lte` become `Gt`/`Lt` of the neighbouring
//! integer. What has no equivalent (`minValues`, labels no node of ours
//! carries) is reported.

use super::fields::{index, join, string_list, Fields, Notes};
use super::metadata::is_karpenter_key;
use crate::api::common::{Operator, Requirement};
use crate::api::labels as l;
use crate::api::validate::{label_restriction, WELL_KNOWN_LABELS};
use crate::catalog::CapacityType;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Karpenter's capacity type label.
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// Karpenter's pool label.
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
/// Karpenter's instance family label (same values as ours).
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
/// Karpenter's GPU name label (EC2's name, lower case, spaces as dashes:
/// the same values as ours).
pub const GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
/// Karpenter's GPU count label (the same values as ours).
pub const GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
/// Karpenter's GPU memory label: one GPU's memory in MiB (ours is in GiB).
pub const GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
/// Karpenter's capacity reservation ID label (the same values as ours).
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
/// Karpenter's capacity reservation type label: `default` or
/// `capacity-block` (ours, `capacity-reservation-kind`, says
/// `capacity-reservation` or `capacity-block`).
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";

/// Karpenter's keys translated to ours as they are (same values).
const RENAMED: &[(&str, &str)] = &[
    (INSTANCE_FAMILY, l::INSTANCE_FAMILY),
    (GPU_NAME, l::GPU_NAME),
    (GPU_COUNT, l::GPU_COUNT),
    (CAPACITY_RESERVATION_ID, l::CAPACITY_RESERVATION_ID),
];

/// Karpenter's operators: the node-affinity ones and `Gte`, `Lte`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KOp {
    /// A node-affinity operator we share.
    Ours(Operator),
    /// At least the value.
    Gte,
    /// At most the value.
    Lte,
}

impl KOp {
    fn parse(s: &str) -> Option<KOp> {
        Some(match s {
            "In" => KOp::Ours(Operator::In),
            "NotIn" => KOp::Ours(Operator::NotIn),
            "Exists" => KOp::Ours(Operator::Exists),
            "DoesNotExist" => KOp::Ours(Operator::DoesNotExist),
            "Gt" => KOp::Ours(Operator::Gt),
            "Lt" => KOp::Ours(Operator::Lt),
            "Gte" => KOp::Gte,
            "Lte" => KOp::Lte,
            _ => return None,
        })
    }
}

/// A requirement as Karpenter wrote it.
#[derive(Debug, Clone)]
pub(super) struct KRequirement {
    pub key: String,
    pub op: KOp,
    pub values: Vec<String>,
}

/// What a pool's requirements become.
#[derive(Debug)]
pub(super) struct Converted {
    /// The label keys Quartermaster's nodes carry because of their
    /// instance type (the catalog's); a Karpenter key among them is kept.
    native: &'static [&'static str],
    /// Our requirements, in input order.
    pub requirements: Vec<Requirement>,
    /// The capacity types, once a requirement named them; `None`: none did.
    capacity_types: Option<BTreeSet<CapacityType>>,
    /// Labels Karpenter would have put on the nodes from a requirement
    /// (`team In [ml]` on a label no node has: every node gets `team: ml`).
    pub labels: BTreeMap<String, String>,
}

impl Default for Converted {
    fn default() -> Self {
        Converted {
            native: crate::catalog::INSTANCE_TYPE_KEYS,
            requirements: Vec::new(),
            capacity_types: None,
            labels: BTreeMap::new(),
        }
    }
}

impl Converted {
    /// `spec.capacityTypes`: what the requirements allowed, or Karpenter's
    /// default, on-demand.
    pub fn capacity_types(&self) -> Vec<CapacityType> {
        match &self.capacity_types {
            Some(set) => set.iter().copied().collect(),
            None => vec![CapacityType::OnDemand],
        }
    }

    /// Whether a requirement named the capacity type.
    pub fn capacity_type_required(&self) -> bool {
        self.capacity_types.is_some()
    }

    /// Reads one requirement of the input at `path` and converts it.
    /// `labels` are the pool's template labels (a custom requirement only
    /// becomes a label when the template does not set it).
    pub fn add_value(
        &mut self,
        v: &Value,
        path: &str,
        labels: &BTreeMap<String, String>,
        notes: &mut Notes,
    ) {
        let mut f = Fields::of(v, path, notes);
        let key = f.string("key", notes);
        let op = f.string("operator", notes);
        let values = f
            .take("values")
            .map(|v| string_list(v, &join(path, "values"), notes))
            .unwrap_or_default();
        if let Some(n) = f.take("minValues") {
            notes.lost(
                &f.at("minValues"),
                format!(
                    "Quartermaster has no minValues (was {n}): the planner picks the cheapest risk-adjusted offering among every value the requirement allows and falls back across them when capacity runs out; keep the values listed"
                ),
            );
        }
        f.finish(notes);
        let (Some(key), Some(op)) = (key, op) else {
            notes.lost(path, "a requirement needs a key and an operator: left out");
            return;
        };
        let Some(op) = KOp::parse(&op) else {
            notes.lost(
                &join(path, "operator"),
                format!("unknown operator {op:?} (Karpenter's are In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte): the requirement is left out"),
            );
            return;
        };
        self.add(KRequirement { key, op, values }, path, labels, notes);
    }

    /// Converts one requirement.
    pub fn add(
        &mut self,
        r: KRequirement,
        path: &str,
        labels: &BTreeMap<String, String>,
        notes: &mut Notes,
    ) {
        let key = r.key.as_str();
        if key == CAPACITY_TYPE || key == l::CAPACITY_TYPE {
            return self.capacity_type(&r, path, notes);
        }
        let Some((op, values)) = ours(r.op, &r.values, path, notes) else {
            return;
        };
        let push = |this: &mut Self, key: &str, values: Vec<String>| {
            this.requirements.push(Requirement {
                key: key.to_string(),
                operator: op,
                values,
            })
        };
        if let Some((_, to)) = RENAMED.iter().find(|(from, _)| *from == key) {
            return push(self, to, values);
        }
        if key == CAPACITY_RESERVATION_TYPE {
            let values = values
                .into_iter()
                .map(|v| match v.as_str() {
                    "default" => "capacity-reservation".to_string(),
                    _ => v,
                })
                .collect();
            return push(self, l::CAPACITY_RESERVATION_KIND, values);
        }
        let native = self.native.contains(&key);
        if key == GPU_MEMORY {
            let why = format!(
                "{} counts whole GiB rounded down, and no bound on it selects exactly these MiB",
                l::GPU_MEMORY_GIB
            );
            match gpu_memory_in_gib(r.op, &r.values) {
                Some(req) => self.requirements.push(req),
                None if native => {
                    notes.info(
                        path,
                        format!("kept as {GPU_MEMORY} in MiB (Quartermaster's nodes carry it): {why}"),
                    );
                    push(self, key, values);
                }
                None => notes.lost(
                    path,
                    format!("{why}, and Quartermaster's nodes do not carry {GPU_MEMORY}: left out; bound {} by whole GiB (or {} in MiB, on NVIDIA types) instead", l::GPU_MEMORY_GIB, l::GFD_MEMORY),
                ),
            }
            return;
        }
        if native {
            return push(self, key, values);
        }
        if key == NODEPOOL || key == l::NODEPOOL || key == l::HOSTNAME {
            notes.lost(
                path,
                format!("{key} is set by the provisioner and cannot be required: left out (the pool's name is its own)"),
            );
            return;
        }
        if WELL_KNOWN_LABELS.contains(&key) {
            return push(self, key, values);
        }
        if is_karpenter_key(key) || key.starts_with("eks.amazonaws.com/") {
            notes.lost(
                path,
                format!("Quartermaster's nodes do not carry {key}: left out (a requirement on it would match no node, or every one); narrow the pool with {} or {} instead", l::INSTANCE_FAMILY, l::INSTANCE_TYPE),
            );
            return;
        }
        if label_restriction(key).is_some() {
            notes.lost(
                path,
                format!("{key} is in a domain reserved for the node's own labels, and Quartermaster's nodes do not carry it: left out"),
            );
            return;
        }
        self.custom(key, op, values, path, labels, notes);
    }

    /// A requirement on a label of the user's own. Karpenter puts such a
    /// label on the node when a requirement asks for it; ours match only
    /// what the template's labels set.
    fn custom(
        &mut self,
        key: &str,
        op: Operator,
        values: Vec<String>,
        path: &str,
        labels: &BTreeMap<String, String>,
        notes: &mut Notes,
    ) {
        let holds_without_label = matches!(op, Operator::NotIn | Operator::DoesNotExist);
        if labels.contains_key(key) || holds_without_label {
            self.requirements.push(Requirement {
                key: key.into(),
                operator: op,
                values,
            });
            return;
        }
        match (op, values.as_slice()) {
            (Operator::In, [value]) => {
                notes.info(
                    path,
                    format!("Karpenter labels the nodes {key}={value} for this requirement; so does the converted pool's spec.template.metadata.labels"),
                );
                self.labels.insert(key.into(), value.clone());
                self.requirements.push(Requirement {
                    key: key.into(),
                    operator: op,
                    values,
                });
            }
            _ => notes.lost(
                path,
                format!("Karpenter picks a value of {key} for each node from this requirement; Quartermaster's nodes carry only the template's labels: left out. Split the pool, one per value, each labelling its nodes with its value"),
            ),
        }
    }

    fn capacity_type(&mut self, r: &KRequirement, path: &str, notes: &mut Notes) {
        let all: BTreeSet<CapacityType> = [
            CapacityType::Spot,
            CapacityType::OnDemand,
            CapacityType::Reserved,
        ]
        .into();
        let mut named = BTreeSet::new();
        for (i, v) in r.values.iter().enumerate() {
            match v.parse::<CapacityType>() {
                Ok(ct) => {
                    named.insert(ct);
                }
                Err(_) => notes.lost(
                    &index(&join(path, "values"), i),
                    format!("unknown capacity type {v:?} (spot, on-demand or reserved): left out"),
                ),
            }
        }
        let allowed: BTreeSet<CapacityType> = match r.op {
            KOp::Ours(Operator::In) => named,
            KOp::Ours(Operator::NotIn) => all.difference(&named).copied().collect(),
            KOp::Ours(Operator::Exists) => all,
            KOp::Ours(Operator::DoesNotExist) => BTreeSet::new(),
            _ => {
                notes.lost(
                    path,
                    "capacity types are not numbers: a Gt/Lt/Gte/Lte requirement on them is left out",
                );
                return;
            }
        };
        let now = match self.capacity_types.take() {
            Some(before) => before.intersection(&allowed).copied().collect(),
            None => allowed,
        };
        if now.is_empty() {
            notes.lost(
                path,
                "the capacity type requirements allow no capacity type, so the pool launches nothing; spec.capacityTypes is left empty, which Quartermaster refuses: list the capacity types the pool may buy",
            );
        }
        self.capacity_types = Some(now);
    }
}

/// Karpenter's operator and values in ours: `Gte n` is `Gt n-1`, `Lte n`
/// is `Lt n+1` (both on integers, so exact). A non-integer bound is
/// reported and the requirement left out.
fn ours(
    op: KOp,
    values: &[String],
    path: &str,
    notes: &mut Notes,
) -> Option<(Operator, Vec<String>)> {
    let (op, shift) = match op {
        KOp::Ours(op) => return Some((op, values.to_vec())),
        KOp::Gte => (Operator::Gt, -1),
        KOp::Lte => (Operator::Lt, 1),
    };
    match values {
        [v] => match v.trim().parse::<i64>() {
            Ok(n) => Some((op, vec![(n + shift).to_string()])),
            Err(_) => {
                notes.lost(
                    path,
                    format!("{v:?} is not an integer: the requirement is left out"),
                );
                None
            }
        },
        _ => {
            notes.lost(
                path,
                "Gte and Lte take exactly one integer: the requirement is left out",
            );
            None
        }
    }
}

/// Karpenter's `instance-gpu-memory` requirement (one GPU's memory in MiB)
/// as one on `quartermaster.dev/gpu-memory-gib` (whole GiB, rounded down),
/// when the two hold for exactly the same memory sizes, whatever they are;
/// `None` when no GiB bound can say it (`In`/`NotIn` of MiB values, or a
/// bound that falls inside a GiB). A node with `m` MiB carries `m / 1024`
/// GiB, so `m > v` is `m / 1024 > (v + 1) / 1024 - 1` when 1024 divides
/// `v + 1`, and `m < v` is `m / 1024 < v / 1024` when 1024 divides `v`.
pub fn gpu_memory_in_gib(op: KOp, values: &[String]) -> Option<Requirement> {
    let req = |op: Operator, v: Option<i64>| Requirement {
        key: l::GPU_MEMORY_GIB.into(),
        operator: op,
        values: v.map(|v| v.to_string()).into_iter().collect(),
    };
    let bound = || match values {
        [v] => v.trim().parse::<i64>().ok().filter(|v| *v >= 0),
        _ => None,
    };
    const GIB: i64 = 1024;
    match op {
        KOp::Ours(o @ (Operator::Exists | Operator::DoesNotExist)) => Some(req(o, None)),
        KOp::Ours(Operator::Gt) => bound()
            .filter(|v| (v + 1) % GIB == 0)
            .map(|v| req(Operator::Gt, Some((v + 1) / GIB - 1))),
        KOp::Gte => bound()
            .filter(|v| v % GIB == 0)
            .map(|v| req(Operator::Gt, Some(v / GIB - 1))),
        KOp::Ours(Operator::Lt) => bound()
            .filter(|v| v % GIB == 0)
            .map(|v| req(Operator::Lt, Some(v / GIB))),
        KOp::Lte => bound()
            .filter(|v| (v + 1) % GIB == 0)
            .map(|v| req(Operator::Lt, Some((v + 1) / GIB))),
        KOp::Ours(Operator::In | Operator::NotIn) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::karpenter::NoteKind;
    use serde_json::json;

    /// The Karpenter labels the tests take Quartermaster's nodes to carry.
    const NATIVE: &[&str] = &[GPU_MEMORY, "karpenter.k8s.aws/instance-generation"];

    fn convert(reqs: Value, labels: &[(&str, &str)]) -> (Converted, Vec<(String, NoteKind)>) {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut c = Converted {
            native: NATIVE,
            ..Converted::default()
        };
        let mut notes = Notes::default();
        for (i, r) in reqs.as_array().unwrap().iter().enumerate() {
            c.add_value(r, &format!("r[{i}]"), &labels, &mut notes);
        }
        let notes = notes.0.into_iter().map(|n| (n.path, n.kind)).collect();
        (c, notes)
    }

    fn shown(c: &Converted) -> Vec<String> {
        c.requirements.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn capacity_type_requirements_become_the_capacity_types_field() {
        let ct = |reqs: Value| convert(reqs, &[]).0.capacity_types();
        use CapacityType::*;
        assert_eq!(ct(json!([])), [OnDemand], "Karpenter's default");
        assert_eq!(
            ct(json!([{"key": CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}])),
            [Spot, OnDemand]
        );
        assert_eq!(
            ct(json!([{"key": CAPACITY_TYPE, "operator": "NotIn", "values": ["spot"]}])),
            [OnDemand, Reserved]
        );
        assert_eq!(
            ct(json!([{"key": CAPACITY_TYPE, "operator": "Exists"}])),
            [Spot, OnDemand, Reserved]
        );
        assert_eq!(
            ct(json!([
                {"key": CAPACITY_TYPE, "operator": "Exists"},
                {"key": CAPACITY_TYPE, "operator": "NotIn", "values": ["reserved"]},
                {"key": CAPACITY_TYPE, "operator": "In", "values": ["spot", "reserved"]}
            ])),
            [Spot],
            "ANDed requirements intersect"
        );
        let (c, notes) = convert(
            json!([{"key": CAPACITY_TYPE, "operator": "DoesNotExist"}]),
            &[],
        );
        assert!(c.capacity_types().is_empty());
        assert_eq!(notes, [("r[0]".to_string(), NoteKind::NotCarried)]);
        assert!(c.requirements.is_empty(), "never a requirement of ours");
    }

    #[test]
    fn karpenter_instance_and_gpu_labels_become_ours_with_the_same_values() {
        let (c, notes) = convert(
            json!([
                {"key": INSTANCE_FAMILY, "operator": "In", "values": ["p5", "g6e"]},
                {"key": GPU_NAME, "operator": "In", "values": ["h100", "l40s"]},
                {"key": GPU_COUNT, "operator": "Gte", "values": ["4"]},
                {"key": GPU_COUNT, "operator": "Lte", "values": ["8"]},
                {"key": CAPACITY_RESERVATION_TYPE, "operator": "In", "values": ["default"]},
                {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1a"]},
            ]),
            &[],
        );
        assert_eq!(
            shown(&c),
            [
                "quartermaster.dev/instance-family In [p5, g6e]",
                "quartermaster.dev/gpu-name In [h100, l40s]",
                "quartermaster.dev/gpu-count Gt [3]",
                "quartermaster.dev/gpu-count Lt [9]",
                "quartermaster.dev/capacity-reservation-kind In [capacity-reservation]",
                "karpenter.k8s.aws/instance-generation Gt [4]",
                "topology.kubernetes.io/zone In [us-east-1a]",
            ]
        );
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn gpu_memory_in_mib_becomes_gib_only_where_exact() {
        let (c, notes) = convert(
            json!([
                {"key": GPU_MEMORY, "operator": "Gte", "values": ["24576"]},
                {"key": GPU_MEMORY, "operator": "Lt", "values": ["81920"]},
                {"key": GPU_MEMORY, "operator": "Gt", "values": ["20000"]},
                {"key": GPU_MEMORY, "operator": "In", "values": ["16384"]},
            ]),
            &[],
        );
        assert_eq!(
            shown(&c),
            [
                "quartermaster.dev/gpu-memory-gib Gt [23]",
                "quartermaster.dev/gpu-memory-gib Lt [80]",
                "karpenter.k8s.aws/instance-gpu-memory Gt [20000]",
                "karpenter.k8s.aws/instance-gpu-memory In [16384]",
            ]
        );
        assert_eq!(
            notes,
            [
                ("r[2]".to_string(), NoteKind::Info),
                ("r[3]".to_string(), NoteKind::Info)
            ]
        );
    }

    /// Every translation holds for exactly the MiB values Karpenter's
    /// requirement holds for, judged on the labels a node carries: MiB for
    /// Karpenter's, MiB / 1024 (rounded down) for ours.
    #[test]
    fn translated_gpu_memory_bounds_select_exactly_the_same_mib() {
        let karpenter = |op: KOp, v: i64, m: i64| match op {
            KOp::Ours(Operator::Gt) => m > v,
            KOp::Ours(Operator::Lt) => m < v,
            KOp::Gte => m >= v,
            KOp::Lte => m <= v,
            _ => unreachable!(),
        };
        let ops = [
            KOp::Ours(Operator::Gt),
            KOp::Ours(Operator::Lt),
            KOp::Gte,
            KOp::Lte,
        ];
        for op in ops {
            let mut translated = 0;
            for v in (0..40_000)
                .step_by(97)
                .chain([1023, 1024, 16383, 16384, 24575, 24576])
            {
                let Some(r) = gpu_memory_in_gib(op, &[v.to_string()]) else {
                    continue;
                };
                translated += 1;
                for m in (0..50_000).step_by(7).chain((v - 2).max(0)..v + 3) {
                    let labels =
                        BTreeMap::from([(l::GPU_MEMORY_GIB.to_string(), (m / 1024).to_string())]);
                    assert_eq!(
                        r.matches(&labels),
                        karpenter(op, v, m),
                        "{op:?} {v} -> {r} at {m} MiB"
                    );
                }
            }
            assert!(
                translated >= 3,
                "{op:?}: only {translated} bounds translated"
            );
        }
    }

    #[test]
    fn karpenter_keys_our_nodes_lack_are_reported_even_gpu_memory() {
        let mut c = Converted {
            native: &[],
            ..Converted::default()
        };
        let mut notes = Notes::default();
        for (i, r) in [
            json!({"key": GPU_MEMORY, "operator": "Gt", "values": ["20000"]}),
            json!({"key": GPU_MEMORY, "operator": "Gte", "values": ["24576"]}),
            json!({"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]}),
        ]
        .iter()
        .enumerate()
        {
            c.add_value(r, &format!("r[{i}]"), &BTreeMap::new(), &mut notes);
        }
        assert_eq!(shown(&c), ["quartermaster.dev/gpu-memory-gib Gt [23]"]);
        let lost: Vec<&str> = notes.0.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(lost, ["r[0]", "r[2]"]);
        assert!(notes.0.iter().all(|n| n.kind == NoteKind::NotCarried));
    }

    #[test]
    fn custom_labels_follow_karpenter_where_ours_can() {
        let (c, notes) = convert(
            json!([
                {"key": "team", "operator": "In", "values": ["ml"]},
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "owner", "operator": "In", "values": ["x", "y"]},
                {"key": "legacy", "operator": "DoesNotExist"},
            ]),
            &[("owner", "x")],
        );
        assert_eq!(c.labels, BTreeMap::from([("team".into(), "ml".into())]));
        assert_eq!(
            shown(&c),
            ["team In [ml]", "owner In [x, y]", "legacy DoesNotExist"]
        );
        assert_eq!(
            notes,
            [
                ("r[0]".to_string(), NoteKind::Info),
                ("r[1]".to_string(), NoteKind::NotCarried)
            ]
        );
    }

    #[test]
    fn what_has_no_equivalent_is_reported_with_its_path() {
        let (c, notes) = convert(
            json!([
                {"key": INSTANCE_FAMILY, "operator": "In", "values": ["p5"], "minValues": 1},
                {"key": "karpenter.k8s.aws/instance-hypervisor", "operator": "In", "values": ["nitro"]},
                {"key": NODEPOOL, "operator": "In", "values": ["a"]},
                {"key": GPU_COUNT, "operator": "Gte", "values": ["many"]},
                {"key": GPU_COUNT, "operator": "Within", "values": ["1"]},
                {"key": "node-restriction.kubernetes.io/x", "operator": "Exists"},
            ]),
            &[],
        );
        assert_eq!(shown(&c), ["quartermaster.dev/instance-family In [p5]"]);
        let paths: Vec<&str> = notes.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "r[0].minValues",
                "r[1]",
                "r[2]",
                "r[3]",
                "r[4].operator",
                "r[5]"
            ]
        );
        assert!(notes.iter().all(|(_, k)| *k == NoteKind::NotCarried));
    }
}
