//! An object's `metadata`: the name, labels and annotations are carried;
//! what the API server or Karpenter wrote is left out with a note (the new
//! object gets its own); anything else is reported.

use super::fields::{entry, Fields, Notes};
use super::{AWS_GROUP, GROUP};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// Fields the API server sets on every object; a `kubectl get -o yaml`
/// export carries them, the new object gets its own.
const SERVER_SET: &[&str] = &[
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Annotations of other tools' bookkeeping about the Karpenter object.
const BOOKKEEPING_ANNOTATIONS: &[&str] = &["kubectl.kubernetes.io/last-applied-configuration"];

/// Whether a key is in Karpenter's domains (`karpenter.sh`,
/// `karpenter.k8s.aws` and their subdomains such as
/// `compatibility.karpenter.sh`).
pub(super) fn is_karpenter_key(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    [GROUP, AWS_GROUP]
        .iter()
        .any(|g| domain == *g || domain.ends_with(&format!(".{g}")))
}

/// Walks an object's top level: `apiVersion` and `kind` (already read to
/// dispatch on it), `metadata`, `spec` (through `spec`, or `missing` with
/// `why` reported when absent) and `status` (left out, noted).
pub(super) fn object<S>(
    doc: &Value,
    notes: &mut Notes,
    why: &str,
    missing: impl FnOnce() -> S,
    spec: impl FnOnce(&Value, &str, &mut Notes) -> S,
) -> (ObjectMeta, S) {
    let mut top = Fields::of(doc, "", notes);
    top.take("apiVersion");
    top.take("kind");
    let metadata = convert(&mut top, notes);
    let spec = match top.take("spec") {
        Some(s) => spec(s, &top.at("spec"), notes),
        None => {
            notes.lost("spec", format!("missing: {why}"));
            missing()
        }
    };
    skip_status(&mut top, notes);
    top.finish(notes);
    (metadata, spec)
}

/// The object's metadata in ours. A missing name is reported (the output
/// then has none, and `quartermaster validate` refuses it).
fn convert(object: &mut Fields<'_>, notes: &mut Notes) -> ObjectMeta {
    let path = object.at("metadata");
    let Some(value) = object.take("metadata") else {
        notes.lost(&path, "missing: an object needs metadata.name");
        return ObjectMeta::default();
    };
    let mut m = Fields::of(value, &path, notes);
    let name = m.string("name", notes);
    if name.is_none() {
        notes.lost(&m.at("name"), "missing: the object needs a name");
    }
    let labels = m.string_map("labels", notes);
    let mut annotations = m.string_map("annotations", notes);
    annotations.retain(|k, _| {
        let karpenters = is_karpenter_key(k);
        if karpenters || BOOKKEEPING_ANNOTATIONS.contains(&k.as_str()) {
            let whose = if karpenters {
                "Karpenter's"
            } else {
                "kubectl's"
            };
            notes.info(
                &entry(&m.at("annotations"), k),
                format!("{whose} bookkeeping about the Karpenter object: left out"),
            );
        }
        !karpenters && !BOOKKEEPING_ANNOTATIONS.contains(&k.as_str())
    });
    for key in SERVER_SET {
        if m.take(key).is_some() {
            notes.info(
                &m.at(key),
                "set by the API server: left out (the new object gets its own)",
            );
        }
    }
    if let Some(ns) = m.string("namespace", notes) {
        if !ns.is_empty() {
            notes.info(
                &m.at("namespace"),
                "NodePools and EC2NodeClasses are cluster-scoped: left out",
            );
        }
    }
    if let Some(v) = m.take("finalizers") {
        let all_karpenters = v
            .as_array()
            .is_some_and(|f| f.iter().all(|x| x.as_str().is_some_and(is_karpenter_key)));
        if all_karpenters {
            notes.info(
                &m.at("finalizers"),
                "Karpenter's finalizers: left out (Quartermaster adds its own where it needs them)",
            );
        } else {
            notes.lost(
                &m.at("finalizers"),
                "finalizers of other controllers are not carried: add them to the new object if those controllers should also guard it",
            );
        }
    }
    if m.take("ownerReferences").is_some() {
        notes.lost(
            &m.at("ownerReferences"),
            "owner references name the Karpenter object's owners by UID: set them on the new object by hand if it should be owned",
        );
    }
    m.finish(notes);
    ObjectMeta {
        name,
        labels: (!labels.is_empty()).then_some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        ..ObjectMeta::default()
    }
}

/// Notes the object's `status`, if any: the controller writes its own.
fn skip_status(object: &mut Fields<'_>, notes: &mut Notes) {
    if object.take("status").is_some_and(|s| s != &Value::Null) {
        notes.info(
            &object.at("status"),
            "written by Karpenter's controller: left out (Quartermaster's controller writes its own)",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn exported_metadata_keeps_name_labels_and_annotations_and_says_what_it_left_out() {
        let doc = json!({"metadata": {
            "name": "gpu",
            "labels": {"team": "ml"},
            "annotations": {
                "owner": "ml-platform",
                "karpenter.sh/nodepool-hash": "123",
                "compatibility.karpenter.k8s.aws/cluster-name-tagged": "true",
                "kubectl.kubernetes.io/last-applied-configuration": "{}"
            },
            "uid": "u", "resourceVersion": "1", "generation": 3,
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "finalizers": ["karpenter.sh/termination"],
            "managedFields": []
        }});
        let mut notes = Notes::default();
        let mut f = Fields::of(&doc, "", &mut notes);
        let m = convert(&mut f, &mut notes);
        assert_eq!(m.name.as_deref(), Some("gpu"));
        assert_eq!(m.labels.unwrap()["team"], "ml");
        assert_eq!(
            m.annotations.unwrap().into_keys().collect::<Vec<_>>(),
            ["owner"]
        );
        assert_eq!(notes.0.len(), 9, "{:#?}", notes.0);
        assert!(notes
            .0
            .iter()
            .all(|n| n.kind == super::super::NoteKind::Info));
    }

    #[test]
    fn other_controllers_finalizers_and_owners_are_losses() {
        let doc = json!({"metadata": {"name": "x", "finalizers": ["argocd.io/x"],
            "ownerReferences": [{}], "clusterName": "c"}});
        let mut notes = Notes::default();
        let mut f = Fields::of(&doc, "", &mut notes);
        let _ = convert(&mut f, &mut notes);
        let lost: Vec<&str> = notes.0.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(
            lost,
            [
                "metadata.finalizers",
                "metadata.ownerReferences",
                "metadata.clusterName"
            ]
        );
    }

    #[test]
    fn karpenter_keys_include_subdomains_only() {
        assert!(is_karpenter_key("karpenter.sh/nodepool"));
        assert!(is_karpenter_key("compatibility.karpenter.sh/x"));
        assert!(is_karpenter_key("karpenter.k8s.aws/instance-family"));
        assert!(!is_karpenter_key("notkarpenter.sh/x"));
        assert!(!is_karpenter_key("team"));
    }
}
