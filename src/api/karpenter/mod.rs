//! Karpenter v1 set-ups in Quartermaster's terms: `quartermaster convert`
//! reads Karpenter `NodePool`s (`karpenter.sh/v1`) and `EC2NodeClass`es
//! (`karpenter.k8s.aws/v1`) and gives our `NodePool`s and `EC2NodeClass`es
//! (`quartermaster.dev/v1alpha1`), with a [`Note`] for every field that
//! could not be carried over (and what to do instead) or that was carried
//! with a remark (a Karpenter default written out, a unit converted).
//!
//! Each object is walked as a plain value and every key is accounted for:
//! a field is carried, reported as not carried, or reported as unknown.
//! Nothing is dropped silently. The mapping, field by field, and the
//! choices behind it are in `docs/migrating-from-karpenter.md`.
//!
//! Pure: text or values in, documents and notes out; the CLI
//! (`cli::convert`) reads the files and prints.

mod fields;
mod metadata;
mod nodeclass;
mod nodepool;
mod requirements;

use super::read::{self, Document, Kind};
use crate::catalog::Catalog;
use serde_json::Value;
use std::fmt;

pub use requirements::{gpu_memory_in_gib, KOp, NODEPOOL as NODEPOOL_LABEL};

/// API version of Karpenter's NodePool that is converted.
pub const NODE_POOL_API_VERSION: &str = "karpenter.sh/v1";
/// API version of Karpenter's EC2NodeClass that is converted.
pub const NODE_CLASS_API_VERSION: &str = "karpenter.k8s.aws/v1";
/// Karpenter's core API group.
pub const GROUP: &str = "karpenter.sh";
/// Karpenter's AWS API group (and label domain).
pub const AWS_GROUP: &str = "karpenter.k8s.aws";

/// Whether a note is a remark on something carried or a loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    /// Carried over, with something the user should know (a Karpenter
    /// default written out, a unit converted, server-set metadata left out).
    Info,
    /// Not carried over: the output lacks it or means something else; the
    /// message says what to do instead.
    NotCarried,
}

/// One remark on one field of an input document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Info or loss.
    pub kind: NoteKind,
    /// Path of the field in the input document, e.g.
    /// `spec.template.spec.requirements[2].minValues`.
    pub path: String,
    /// What happened to it and what to do.
    pub message: String,
    /// The line of the input file the field is on (its nearest ancestor's
    /// when it is absent), when known.
    pub line: Option<usize>,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            NoteKind::Info => "note",
            NoteKind::NotCarried => "not carried",
        };
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{what}: {}", self.message)?;
        if let Some(l) = self.line {
            write!(f, " (line {l})")?;
        }
        Ok(())
    }
}

/// One input object and what became of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    /// 1-based position of the YAML document in its file.
    pub document: usize,
    /// 1-based position in a `List` document's `items`, if it came from one.
    pub item: Option<usize>,
    /// The input's kind (`NodePool`, `EC2NodeClass`, or whatever it was).
    pub kind: String,
    /// The input's `metadata.name` (`unnamed` when it has none).
    pub name: String,
    /// Our object, `None` when the input could not be converted at all.
    pub output: Option<Value>,
    /// What the conversion says about the input, in field order.
    pub notes: Vec<Note>,
}

impl Converted {
    /// `document 2 (NodePool gpu)` or `document 1, item 3 (EC2NodeClass default)`.
    pub fn label(&self) -> String {
        let at = match self.item {
            Some(i) => format!("document {}, item {i}", self.document),
            None => format!("document {}", self.document),
        };
        format!("{at} ({} {})", self.kind, self.name)
    }

    /// Whether everything was carried over (notes may still remark on it).
    pub fn carried_everything(&self) -> bool {
        self.output.is_some() && self.notes.iter().all(|n| n.kind == NoteKind::Info)
    }
}

/// Input that is not YAML.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A document is not valid YAML (the parser cannot go on after it),
    /// with its document number and line.
    #[error("{0}")]
    Yaml(read::Problem),
}

/// Converts every document of a multi-document YAML text, read with the
/// strict reader's splitter ([`read::documents`]), so that every note
/// carries the line of its field. Empty documents are skipped.
///
/// # Errors
///
/// [`Error`] when the text is not YAML: nothing is converted then, so that
/// a half-read file never yields half a set-up.
pub fn convert(text: &str) -> Result<Vec<Converted>, Error> {
    let docs = read::documents(text).map_err(|(_, p)| Error::Yaml(p))?;
    Ok(docs.iter().flat_map(convert_document).collect())
}

/// Converts one document: a Karpenter object, or a `List` of them (as
/// `kubectl get -o yaml` prints).
pub fn convert_document(doc: &Document) -> Vec<Converted> {
    let value = &doc.value;
    let items = value.get("items").and_then(Value::as_array);
    let list = str_field(value, "kind").ends_with("List");
    let mut out: Vec<Converted> = match items {
        Some(items) if list => items
            .iter()
            .enumerate()
            .map(|(i, item)| convert_object(item, doc.number, Some(i + 1)))
            .collect(),
        _ => vec![convert_object(value, doc.number, None)],
    };
    for c in &mut out {
        let prefix = c.item.map(|i| format!("items[{}]", i - 1));
        for n in &mut c.notes {
            let path = match &prefix {
                Some(p) => fields::join(p, &n.path),
                None => n.path.clone(),
            };
            n.line = doc.line_of(&path);
        }
    }
    out
}

/// Checks each converted object with the strict reader and the validation
/// `quartermaster validate` and the controller run ([`read::node_pool`],
/// [`read::node_class`]); each problem becomes a note that something was
/// not carried (the object is still printed: the problem is to be fixed
/// in it, or in the Karpenter field it came from). Checks that need the
/// catalog are skipped when it has no instance types.
pub fn check(converted: &mut [Converted], catalog: &Catalog) {
    for c in converted.iter_mut() {
        let Some(output) = &c.output else { continue };
        let Ok(text) = serde_norway::to_string(output) else {
            continue;
        };
        let Ok(docs) = read::documents(&text) else {
            continue;
        };
        let Some(doc) = docs.first() else { continue };
        let problems = match Kind::of(doc) {
            Kind::NodePool => read::node_pool(doc, catalog).err(),
            Kind::EC2NodeClass => read::node_class(doc).err(),
            _ => None,
        };
        for p in problems.into_iter().flatten() {
            let at = if p.path.is_empty() {
                String::new()
            } else {
                format!("{}: ", p.path)
            };
            c.notes.push(Note {
                kind: NoteKind::NotCarried,
                path: String::new(),
                message: format!(
                    "the converted {} does not pass Quartermaster's validation: {at}{}; fix it in the output, or the Karpenter field it came from",
                    c.kind, p.message
                ),
                line: None,
            });
        }
    }
}

fn str_field<'v>(v: &'v Value, key: &str) -> &'v str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn convert_object(value: &Value, document: usize, item: Option<usize>) -> Converted {
    let api_version = str_field(value, "apiVersion");
    let kind = str_field(value, "kind");
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("unnamed");
    let mut notes = fields::Notes::default();
    let output = match (api_version, kind) {
        (NODE_POOL_API_VERSION, "NodePool") => nodepool::convert(value, &mut notes),
        (NODE_CLASS_API_VERSION, "EC2NodeClass") => nodeclass::convert(value, &mut notes),
        (read::API_VERSION, _) => {
            notes.info(
                "",
                "already a Quartermaster object: passed through unchanged (check it with quartermaster validate)",
            );
            Some(value.clone())
        }
        _ => {
            notes.lost("", not_convertible(api_version, kind));
            None
        }
    };
    Converted {
        document,
        item,
        kind: if kind.is_empty() { "object" } else { kind }.to_string(),
        name: name.to_string(),
        output,
        notes: notes.0,
    }
}

/// Why a document is not converted.
fn not_convertible(api_version: &str, kind: &str) -> String {
    let group = api_version.split('/').next().unwrap_or("");
    let karpenter = group == GROUP || group == AWS_GROUP;
    match kind {
        _ if karpenter && api_version != NODE_POOL_API_VERSION && api_version != NODE_CLASS_API_VERSION => format!(
            "{api_version} {kind} is an older Karpenter API: move it to karpenter.sh/v1 NodePool or karpenter.k8s.aws/v1 EC2NodeClass first (Karpenter's v1 upgrade guide; a v1 cluster serves it converted with kubectl get -o yaml), then convert that"
        ),
        "NodeClaim" if karpenter => "NodeClaims record Karpenter's launches and are not converted: Quartermaster creates its own NodeClaims (quartermaster.dev) for the nodes it launches".into(),
        "" => "not a Kubernetes object (no kind): left out".into(),
        _ => format!(
            "{kind} ({api_version}) is not a Karpenter v1 NodePool or EC2NodeClass: left out"
        ),
    }
}

/// The converted objects as one multi-document YAML text, in input order.
///
/// # Errors
///
/// A message if an object cannot be written as YAML (it always can).
pub fn to_yaml(converted: &[Converted]) -> Result<String, String> {
    let mut out = String::new();
    for c in converted {
        let Some(v) = &c.output else { continue };
        out.push_str("---\n");
        out.push_str(&serde_norway::to_string(v).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// Serializes `object` to a value without the fields whose value equals
/// the default's (`fields` at `/spec`), so that the output says what the
/// input said and little of what it did not.
fn without_defaults<T: serde::Serialize>(object: &T, defaults: &Value, keys: &[&str]) -> Value {
    let mut v = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) {
        for k in keys {
            if spec.get(*k).is_some_and(|x| Some(x) == defaults.get(*k)) {
                spec.remove(*k);
            }
        }
    }
    if let Some(o) = v.as_object_mut() {
        if o.get("status").is_some_and(Value::is_null) {
            o.remove("status");
        }
    }
    v
}

/// Helpers the submodules' tests share.
#[cfg(test)]
pub(crate) mod testing {
    use super::{convert, NoteKind};

    /// The one object `yaml` converts to, and its notes as (path, kind).
    pub fn one<T: serde::de::DeserializeOwned>(yaml: &str) -> (T, Vec<(String, NoteKind)>) {
        let mut out = convert(yaml).unwrap();
        assert_eq!(out.len(), 1);
        let c = out.remove(0);
        let object = serde_json::from_value(c.output.unwrap()).unwrap();
        (
            object,
            c.notes.into_iter().map(|n| (n.path, n.kind)).collect(),
        )
    }

    /// The paths of the notes that say something was not carried.
    pub fn lost(notes: &[(String, NoteKind)]) -> Vec<&str> {
        notes
            .iter()
            .filter(|(_, k)| *k == NoteKind::NotCarried)
            .map(|(p, _)| p.as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `kubectl get nodepools.karpenter.sh,ec2nodeclasses.karpenter.k8s.aws
    /// -o yaml` prints: a List, with the API server's defaults, bookkeeping
    /// and status filled in.
    const EXPORT: &str = r#"
apiVersion: v1
kind: List
metadata: {resourceVersion: ""}
items:
- apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata:
    annotations:
      karpenter.sh/nodepool-hash: "6821555240594823858"
      karpenter.sh/nodepool-hash-version: v3
    creationTimestamp: "2025-06-01T10:00:00Z"
    generation: 1
    name: default
    resourceVersion: "1234"
    uid: 5a3b2c1d-0000-4000-8000-000000000000
  spec:
    disruption:
      budgets: [{nodes: 10%}]
      consolidateAfter: 0s
      consolidationPolicy: WhenEmptyOrUnderutilized
    template:
      spec:
        expireAfter: 720h
        nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
        requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [g6]}
  status:
    conditions: [{type: Ready, status: "True"}]
    resources: {cpu: "0", nodes: "0"}
- apiVersion: karpenter.k8s.aws/v1
  kind: EC2NodeClass
  metadata:
    finalizers: [karpenter.k8s.aws/termination]
    name: default
    uid: 6b4c3d2e-0000-4000-8000-000000000000
  spec:
    amiSelectorTerms: [{alias: al2023@latest}]
    metadataOptions: {httpEndpoint: enabled, httpProtocolIPv6: disabled, httpPutResponseHopLimit: 1, httpTokens: required}
    role: KarpenterNodeRole-prod
    securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}]
    subnetSelectorTerms: [{tags: {karpenter.sh/discovery: prod}}]
  status:
    amis: [{id: ami-0123456789abcdef0, name: x}]
    instanceProfile: prod_123
"#;

    #[test]
    fn a_kubectl_export_converts_completely_leaving_out_only_what_the_cluster_wrote() {
        let out = convert(EXPORT).unwrap();
        let labels: Vec<String> = out.iter().map(Converted::label).collect();
        assert_eq!(
            labels,
            [
                "document 1, item 1 (NodePool default)",
                "document 1, item 2 (EC2NodeClass default)"
            ]
        );
        for c in &out {
            assert!(c.carried_everything(), "{}: {:#?}", c.label(), c.notes);
            let metadata = &c.output.as_ref().unwrap()["metadata"];
            assert_eq!(metadata.as_object().unwrap().len(), 1, "{metadata}");
            assert!(c.output.as_ref().unwrap().get("status").is_none());
        }
        let noted: Vec<&str> = out[0].notes.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(
            noted,
            [
                "metadata.annotations[karpenter.sh/nodepool-hash]",
                "metadata.annotations[karpenter.sh/nodepool-hash-version]",
                "metadata.uid",
                "metadata.resourceVersion",
                "metadata.generation",
                "metadata.creationTimestamp",
                "status"
            ]
        );
        let yaml = to_yaml(&out).unwrap();
        assert_eq!(
            yaml.matches("apiVersion: quartermaster.dev/v1alpha1")
                .count(),
            2
        );
    }

    #[test]
    fn other_kinds_and_older_apis_are_named_and_ours_pass_through() {
        let text = "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: old}\n---\napiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: c}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: m}\n---\n---\napiVersion: quartermaster.dev/v1alpha1\nkind: NodePool\nmetadata: {name: q}\nspec: {}\n";
        let out = convert(text).unwrap();
        let seen: Vec<(usize, bool, bool)> = out
            .iter()
            .map(|c| (c.document, c.output.is_some(), c.carried_everything()))
            .collect();
        assert_eq!(
            seen,
            [
                (1, false, false),
                (2, false, false),
                (3, false, false),
                (5, true, true)
            ],
            "the empty fourth document is skipped"
        );
        assert!(out[0].notes[0].message.contains("older Karpenter API"));
        assert!(out[1].notes[0]
            .message
            .contains("Quartermaster creates its own NodeClaims"));
        assert!(out[2].notes[0].message.contains("ConfigMap (v1) is not"));
        assert_eq!(out[3].output.as_ref().unwrap()["metadata"]["name"], "q");
    }

    #[test]
    fn notes_carry_the_line_of_their_field_in_lists_too() {
        let out = convert(EXPORT).unwrap();
        let hash = &out[0].notes[0];
        assert_eq!(
            hash.path,
            "metadata.annotations[karpenter.sh/nodepool-hash]"
        );
        assert_eq!(hash.line, Some(10), "{hash}");
        assert!(hash.to_string().ends_with("(line 10)"));
    }

    #[test]
    fn what_karpenter_accepts_and_our_validation_refuses_is_reported_after_conversion() {
        let text = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: odd}\nspec:\n  template:\n    spec:\n      expireAfter: Never\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n      - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}\n      - {key: karpenter.k8s.aws/instance-family, operator: In, values: [p5, x9z]}\n  disruption: {consolidateAfter: 1m}\n";
        let mut out = convert(text).unwrap();
        assert!(out[0].carried_everything());
        check(&mut out, &Catalog::embedded().unwrap());
        assert!(!out[0].carried_everything());
        let last = out[0].notes.last().unwrap();
        assert!(
            last.message.contains(
                "spec.template.spec.requirements[0].values[1]: unknown instance family \"x9z\""
            ),
            "{last}"
        );
        let mut clean = convert(EXPORT).unwrap();
        check(&mut clean, &Catalog::embedded().unwrap());
        assert!(clean.iter().all(Converted::carried_everything));
    }

    #[test]
    fn text_that_is_not_yaml_converts_nothing() {
        let e = convert("apiVersion: karpenter.sh/v1\n---\nkind: [NodePool\n").unwrap_err();
        assert!(
            matches!(&e, Error::Yaml(p) if p.document == 2 && p.line.is_some()),
            "{e}"
        );
    }
}
