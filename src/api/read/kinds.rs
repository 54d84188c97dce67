//! Our own kinds read from files: a NodePool or an EC2NodeClass document
//! is checked against its CRD's schema, read, then validated with the same
//! checks the controller runs (`api::validate_node_pool`,
//! `api::nodeclass::node_class_problems`), every problem with its line.

use super::{crd_schema, Document, Problem};
use crate::api::nodeclass::{node_class_problems, NODE_CLASS_KIND};
use crate::api::{validate_node_pool, EC2NodeClass, NodePool};
use crate::catalog::Catalog;
use serde_json::Value;
use std::sync::OnceLock;

/// The API version of our kinds.
pub const API_VERSION: &str = "quartermaster.dev/v1alpha1";

/// What a document is, by its `apiVersion` and `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A `quartermaster.dev/v1alpha1` NodePool.
    NodePool,
    /// A `quartermaster.dev/v1alpha1` EC2NodeClass.
    EC2NodeClass,
    /// A Karpenter `karpenter.sh` NodePool or `karpenter.k8s.aws`
    /// EC2NodeClass (`quartermaster convert` reads those).
    Karpenter,
    /// Anything else.
    Other,
}

impl Kind {
    /// The kind of a document.
    pub fn of(doc: &Document) -> Kind {
        match doc.kind() {
            (API_VERSION, "NodePool") => Kind::NodePool,
            (API_VERSION, k) if k == NODE_CLASS_KIND => Kind::EC2NodeClass,
            (v, "NodePool" | "EC2NodeClass")
                if v.starts_with("karpenter.sh/") || v.starts_with("karpenter.k8s.aws/") =>
            {
                Kind::Karpenter
            }
            _ => Kind::Other,
        }
    }

    /// Why a document is not of the kind a reader wants, in words.
    pub fn refusal(doc: &Document, wanted: &str) -> Problem {
        let (api_version, kind) = doc.kind();
        let message = match Kind::of(doc) {
            _ if !doc.value.is_object() => {
                "not a Kubernetes object (expected a mapping with apiVersion and kind)".to_string()
            }
            Kind::Karpenter => format!(
                "{kind} ({api_version}) is Karpenter's: `quartermaster convert` turns it into Quartermaster's"
            ),
            _ if kind.is_empty() => format!("missing kind (expected {wanted})"),
            _ => format!("kind {kind} ({api_version}) is not a {API_VERSION} {wanted}"),
        };
        doc.problem("", message)
    }
}

/// The schema NodePool documents are checked against (the CRD's).
pub fn node_pool_schema() -> &'static Value {
    static S: OnceLock<Value> = OnceLock::new();
    S.get_or_init(crd_schema::<NodePool>)
}

/// The schema EC2NodeClass documents are checked against (the CRD's).
pub fn node_class_schema() -> &'static Value {
    static S: OnceLock<Value> = OnceLock::new();
    S.get_or_init(crd_schema::<EC2NodeClass>)
}

/// A NodePool document read strictly and validated. Checks that need the
/// catalog are skipped when it has no instance types.
///
/// # Errors
/// Every problem: schema (unknown fields, types) first; when there is none,
/// every validation problem.
pub fn node_pool(doc: &Document, catalog: &Catalog) -> Result<NodePool, Vec<Problem>> {
    if Kind::of(doc) != Kind::NodePool {
        return Err(vec![Kind::refusal(doc, "NodePool")]);
    }
    doc.read_checked(node_pool_schema(), |pool: &NodePool| {
        validate_node_pool(pool, catalog)
            .iter()
            .map(|e| doc.at(e))
            .collect()
    })
}

/// An EC2NodeClass document read strictly and validated.
///
/// # Errors
/// Every problem, as for [`node_pool`].
pub fn node_class(doc: &Document) -> Result<EC2NodeClass, Vec<Problem>> {
    if Kind::of(doc) != Kind::EC2NodeClass {
        return Err(vec![Kind::refusal(doc, NODE_CLASS_KIND)]);
    }
    doc.read_checked(node_class_schema(), |class: &EC2NodeClass| {
        node_class_problems(&class.spec)
            .iter()
            .map(|(field, why)| doc.problem(&format!("spec.{field}"), why))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::super::documents;
    use super::*;

    const CLASS: &str = "\
apiVersion: quartermaster.dev/v1alpha1
kind: EC2NodeClass
metadata: {name: gpu}
spec:
  subnetSelectorTerms: [{tags: {a: b}}]
  securityGroupSelectorTerms: [{tags: {a: b}}]
  role: nodes
";

    fn texts(r: Vec<Problem>) -> Vec<String> {
        r.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn an_ec2_node_class_with_unknown_fields_is_refused_with_their_lines() {
        let docs = documents(CLASS).unwrap();
        assert!(node_class(&docs[0]).is_ok());
        let bad = format!("{CLASS}  volumeSize: 500Gi\n  kubelet: {{maxPods: 110}}\n");
        let docs = documents(&bad).unwrap();
        assert_eq!(
            texts(node_class(&docs[0]).unwrap_err()),
            [
                "document 1 (gpu): spec.volumeSize: unknown field (line 8)",
                "document 1 (gpu): spec.kubelet: unknown field (line 9)",
            ]
        );
    }

    #[test]
    fn validation_problems_come_with_their_lines_once_the_schema_is_met() {
        let text = "apiVersion: quartermaster.dev/v1alpha1\nkind: NodePool\nmetadata: {name: a}\nspec:\n  template:\n    spec:\n      requirements:\n      - {key: quartermaster.dev/gpu-count, operator: Gt, values: [many]}\n";
        let docs = documents(text).unwrap();
        let got = texts(node_pool(&docs[0], &Catalog::default()).unwrap_err());
        assert_eq!(
            got,
            ["document 1 (a): spec.template.spec.requirements[0].values: operator Gt takes exactly one integer value (line 8)"]
        );
    }

    #[test]
    fn karpenter_and_foreign_kinds_are_named_as_such() {
        let docs =
            documents("apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: k}\n---\napiVersion: v1\nkind: ConfigMap\n---\nhello\n")
                .unwrap();
        let c = Catalog::default();
        let p = |i: usize| node_pool(&docs[i], &c).unwrap_err()[0].to_string();
        assert!(p(0).contains("quartermaster convert"), "{}", p(0));
        assert!(p(1).contains("kind ConfigMap (v1) is not a"), "{}", p(1));
        assert!(p(2).contains("not a Kubernetes object"), "{}", p(2));
    }
}
