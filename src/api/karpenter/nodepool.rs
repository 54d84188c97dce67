//! A Karpenter `NodePool` (`karpenter.sh/v1`) as ours: the template
//! (labels, annotations, taints, startup taints, requirements,
//! `nodeClassRef`, `terminationGracePeriod`, `expireAfter`), limits,
//! weight and disruption. Karpenter's defaults that differ from ours
//! (`expireAfter: 720h`, `consolidateAfter: 0s`, on-demand only) are
//! written out, each with a note.

use super::fields::{as_string, entry, index, join, string_map, Fields, Notes};
use super::requirements::{self, KOp, KRequirement};
use super::{metadata, without_defaults, AWS_GROUP};
use crate::api::common::{Operator, Taint, TaintEffect};
use crate::api::nodeclass::{NodeClassReference, NODE_CLASS_KIND};
use crate::api::nodepool::{
    Budget, BudgetReason, ConsolidationPolicy, Disruption, NodeClaimTemplate,
    NodeClaimTemplateSpec, NodePool, NodePoolSpec, TemplateMetadata,
};
use crate::api::validate::{label_restriction, WELL_KNOWN_LABELS};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;
use std::collections::BTreeMap;

/// Karpenter's `expireAfter` when a pool leaves it unset.
pub const KARPENTER_EXPIRE_AFTER: &str = "720h";
/// Karpenter's `consolidateAfter` when a pool leaves `disruption` unset.
pub const KARPENTER_CONSOLIDATE_AFTER: &str = "0s";
/// Karpenter's disruption reasons a budget may name, and ours for each.
const REASONS: &[(&str, BudgetReason)] = &[
    ("Underutilized", BudgetReason::Underutilized),
    ("Empty", BudgetReason::Empty),
    ("Drifted", BudgetReason::Drifted),
];

/// Our NodePool for a Karpenter one, as a value without the fields
/// Karpenter has no word for left at their defaults.
pub(super) fn convert(doc: &Value, notes: &mut Notes) -> Option<Value> {
    let (metadata, spec) = metadata::object(
        doc,
        notes,
        "the pool gets every default",
        NodePoolSpec::default,
        spec,
    );
    let pool = NodePool {
        metadata,
        spec,
        status: None,
    };
    let defaults = serde_json::to_value(NodePoolSpec::default()).unwrap_or_default();
    Some(without_defaults(
        &pool,
        &defaults,
        &["interruption", "gpuSharing", "risk"],
    ))
}

fn spec(v: &Value, path: &str, notes: &mut Notes) -> NodePoolSpec {
    let mut f = Fields::of(v, path, notes);
    let mut out = NodePoolSpec::default();
    match f.take("template") {
        Some(t) => template(t, &f.at("template"), &mut out, notes),
        None => notes.lost(&f.at("template"), "missing (Karpenter requires it)"),
    }
    out.disruption = disruption(f.take("disruption"), &f.at("disruption"), notes);
    if let Some(limits) = f.take("limits") {
        out.limits = string_map(limits, &f.at("limits"), notes)
            .into_iter()
            .map(|(k, v)| (k, Quantity(v)))
            .collect();
    }
    if let Some(w) = f.integer("weight", notes) {
        match i32::try_from(w) {
            Ok(w) => out.weight = Some(w),
            Err(_) => notes.lost(&f.at("weight"), format!("{w} is out of range 0..=100")),
        }
    }
    if f.take("replicas").is_some() {
        notes.lost(
            &f.at("replicas"),
            "static NodePools (a fixed number of nodes) are not supported: Quartermaster launches for pending pods; hold capacity ahead of demand with spec.prewarm windows instead",
        );
    }
    f.finish(notes);
    out
}

fn template(v: &Value, path: &str, out: &mut NodePoolSpec, notes: &mut Notes) {
    let mut f = Fields::of(v, path, notes);
    let mut labels = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    let mut label_reqs = Vec::new();
    if let Some(m) = f.take("metadata") {
        let mut mf = Fields::of(m, &f.at("metadata"), notes);
        let labels_path = mf.at("labels");
        for (k, v) in mf.string_map("labels", notes) {
            let node_label = WELL_KNOWN_LABELS.contains(&k.as_str())
                || metadata::is_karpenter_key(&k)
                || k.starts_with("eks.amazonaws.com/");
            if node_label {
                // Karpenter turns a well-known label on the template into a
                // requirement; ours refuse it as a label and say it so.
                label_reqs.push((entry(&labels_path, &k), k, v));
            } else if let Some(why) = label_restriction(&k) {
                notes.lost(&entry(&labels_path, &k), format!("{why}: left out"));
            } else {
                labels.insert(k, v);
            }
        }
        annotations = mf.string_map("annotations", notes);
        mf.finish(notes);
    }
    let spec_path = f.at("spec");
    let Some(spec) = f.take("spec") else {
        notes.lost(&spec_path, "missing (Karpenter requires it)");
        f.finish(notes);
        return;
    };
    f.finish(notes);
    let mut sf = Fields::of(spec, &spec_path, notes);
    let mut reqs = requirements::Converted::default();
    for (path, key, value) in label_reqs {
        notes.info(
            &path,
            format!("a well-known label: Karpenter requires it of every node, and so does the converted pool, as the requirement {key} In [{value}]"),
        );
        let r = KRequirement {
            key,
            op: KOp::Ours(Operator::In),
            values: vec![value],
        };
        reqs.add(r, &path, &labels, notes);
    }
    let reqs_path = sf.at("requirements");
    for (i, r) in sf
        .list("requirements", notes)
        .into_iter()
        .flatten()
        .enumerate()
    {
        reqs.add_value(r, &index(&reqs_path, i), &labels, notes);
    }
    if !reqs.capacity_type_required() {
        notes.info(
            &reqs_path,
            "no karpenter.sh/capacity-type requirement: Karpenter launches on-demand nodes only, and so does the converted pool (spec.capacityTypes: [on-demand])",
        );
    }
    out.capacity_types = reqs.capacity_types();
    labels.extend(std::mem::take(&mut reqs.labels));
    let taints = sf
        .list("taints", notes)
        .map(|l| taint_list(l, &sf.at("taints"), notes))
        .unwrap_or_default();
    let startup_taints = sf
        .list("startupTaints", notes)
        .map(|l| taint_list(l, &sf.at("startupTaints"), notes))
        .unwrap_or_default();
    let node_class_ref = node_class_ref(&mut sf, notes);
    let termination_grace_period = sf.string("terminationGracePeriod", notes);
    let expire_after = sf.string("expireAfter", notes).or_else(|| {
        notes.info(
            &sf.at("expireAfter"),
            format!("unset: Karpenter's default {KARPENTER_EXPIRE_AFTER} written out (nodes are replaced after 30 days; unset in Quartermaster means never)"),
        );
        Some(KARPENTER_EXPIRE_AFTER.into())
    });
    sf.finish(notes);
    out.template = NodeClaimTemplate {
        metadata: TemplateMetadata {
            labels,
            annotations,
        },
        spec: NodeClaimTemplateSpec {
            taints,
            startup_taints,
            requirements: reqs.requirements,
            termination_grace_period,
            expire_after,
            node_class_ref,
            efa: false,
        },
    };
}

fn node_class_ref(sf: &mut Fields<'_>, notes: &mut Notes) -> Option<NodeClassReference> {
    let path = sf.at("nodeClassRef");
    let Some(v) = sf.take("nodeClassRef") else {
        notes.lost(
            &path,
            "missing (Karpenter requires it): the pool uses the EC2NodeClass named default",
        );
        return None;
    };
    let mut f = Fields::of(v, &path, notes);
    let group = f.string("group", notes).unwrap_or_default();
    let kind = f.string("kind", notes).unwrap_or_default();
    let name = f.string("name", notes);
    f.finish(notes);
    let Some(name) = name else {
        notes.lost(
            &path,
            "no name: the pool uses the EC2NodeClass named default",
        );
        return None;
    };
    if group != AWS_GROUP || kind != NODE_CLASS_KIND {
        notes.lost(
            &path,
            format!("names a {kind} of {group:?}, which is not converted: the pool now names the quartermaster.dev EC2NodeClass {name:?}; write that class by hand"),
        );
    }
    Some(NodeClassReference::to(&name))
}

fn taint_list(list: &[Value], path: &str, notes: &mut Notes) -> Vec<Taint> {
    list.iter()
        .enumerate()
        .filter_map(|(i, t)| taint(t, &index(path, i), notes))
        .collect()
}

fn taint(v: &Value, path: &str, notes: &mut Notes) -> Option<Taint> {
    let mut f = Fields::of(v, path, notes);
    let key = f.string("key", notes);
    let value = f.string("value", notes);
    let effect = f.string("effect", notes);
    if f.take("timeAdded").is_some() {
        notes.info(
            &f.at("timeAdded"),
            "set by Kubernetes when a NoExecute taint lands on a node: left out",
        );
    }
    f.finish(notes);
    let (Some(key), Some(effect)) = (key, effect) else {
        notes.lost(path, "a taint needs a key and an effect: left out");
        return None;
    };
    match serde_json::from_value::<TaintEffect>(Value::String(effect.clone())) {
        Ok(effect) => Some(Taint::new(&key, value.as_deref().unwrap_or(""), effect)),
        Err(_) => {
            notes.lost(
                &join(path, "effect"),
                format!("unknown effect {effect:?} (NoSchedule, PreferNoSchedule or NoExecute): the taint is left out"),
            );
            None
        }
    }
}

fn disruption(v: Option<&Value>, path: &str, notes: &mut Notes) -> Disruption {
    let mut out = Disruption::default();
    let defaulted = |notes: &mut Notes| {
        notes.info(
            &join(path, "consolidateAfter"),
            format!("unset: Karpenter's default {KARPENTER_CONSOLIDATE_AFTER} written out (Quartermaster's own default is 1m)"),
        );
        KARPENTER_CONSOLIDATE_AFTER.to_string()
    };
    let Some(v) = v else {
        out.consolidate_after = defaulted(notes);
        return out;
    };
    let mut f = Fields::of(v, path, notes);
    if let Some(p) = f.string("consolidationPolicy", notes) {
        match serde_json::from_value::<ConsolidationPolicy>(Value::String(p.clone())) {
            Ok(p) => out.consolidation_policy = p,
            Err(_) => notes.lost(
                &f.at("consolidationPolicy"),
                format!("unknown policy {p:?} (WhenEmpty or WhenEmptyOrUnderutilized): the default WhenEmptyOrUnderutilized applies"),
            ),
        }
    }
    out.consolidate_after = f
        .string("consolidateAfter", notes)
        .unwrap_or_else(|| defaulted(notes));
    let policy = match out.consolidation_policy {
        ConsolidationPolicy::WhenEmpty => "WhenEmpty",
        ConsolidationPolicy::WhenEmptyOrUnderutilized => "WhenEmptyOrUnderutilized",
    };
    let when = f.string("consolidateWhen", notes);
    let cost_based = when.as_deref() == Some("WhenCostJustifiesDisruption");
    match when.as_deref() {
        None => {}
        Some(w) if w == policy => {}
        Some(w) => notes.lost(
            &f.at("consolidateWhen"),
            format!("{w} has no equivalent: Quartermaster consolidates by consolidationPolicy ({policy}) when the move lowers the pool's risk-adjusted cost"),
        ),
    }
    if f.take("decisionRatioThreshold").is_some() {
        if cost_based {
            notes.lost(
                &f.at("decisionRatioThreshold"),
                "Quartermaster has no decision ratio: see consolidateWhen",
            );
        } else {
            notes.info(
                &f.at("decisionRatioThreshold"),
                "Karpenter reads it only with consolidateWhen: WhenCostJustifiesDisruption: nothing to carry",
            );
        }
    }
    if let Some(list) = f.list("budgets", notes) {
        let path = f.at("budgets");
        out.budgets = list
            .iter()
            .enumerate()
            .map(|(i, b)| budget(b, &index(&path, i), notes))
            .collect();
    }
    f.finish(notes);
    out
}

fn budget(v: &Value, path: &str, notes: &mut Notes) -> Budget {
    let mut f = Fields::of(v, path, notes);
    let mut out = Budget::default();
    if let Some(n) = f.string("nodes", notes) {
        out.nodes = n;
    }
    out.schedule = f.string("schedule", notes);
    out.duration = f.string("duration", notes);
    if let Some(reasons) = f.take("reasons") {
        let path = f.at("reasons");
        let named: Vec<(String, String)> = match reasons {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    let at = index(&path, i);
                    as_string(r, &at, notes).map(|s| (s, at))
                })
                .collect(),
            other => as_string(other, &path, notes)
                .map(|s| (s, path.clone()))
                .into_iter()
                .collect(),
        };
        for (name, at) in named {
            match REASONS.iter().find(|(k, _)| *k == name) {
                Some((_, r)) => out.reasons.push(*r),
                None => notes.lost(
                    &at,
                    format!(
                        "{name:?} is not one of Karpenter's budget reasons ({}): left out",
                        REASONS
                            .iter()
                            .map(|(k, _)| *k)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
            }
        }
    }
    f.finish(notes);
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::{lost, one};
    use super::super::NoteKind;
    use super::*;
    use crate::api::validate_node_pool;
    use crate::catalog::{CapacityType, Catalog};

    const MINIMAL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n";

    #[test]
    fn karpenter_defaults_that_differ_from_ours_are_written_out_with_notes() {
        let (pool, notes): (NodePool, _) = one(MINIMAL);
        let t = &pool.spec.template.spec;
        assert_eq!(t.expire_after.as_deref(), Some("720h"));
        assert_eq!(pool.spec.disruption.consolidate_after, "0s");
        assert_eq!(pool.spec.capacity_types, [CapacityType::OnDemand]);
        assert_eq!(t.node_class_ref, Some(NodeClassReference::to("default")));
        assert_eq!(
            notes,
            [
                (
                    "spec.template.spec.requirements".to_string(),
                    NoteKind::Info
                ),
                ("spec.template.spec.expireAfter".to_string(), NoteKind::Info),
                (
                    "spec.disruption.consolidateAfter".to_string(),
                    NoteKind::Info
                ),
            ]
        );
        assert!(validate_node_pool(&pool, &Catalog::embedded().unwrap()).is_empty());
    }

    #[test]
    fn every_template_and_disruption_field_is_carried() {
        let yaml = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: train}
spec:
  weight: 50
  limits: {cpu: 1000, memory: 4000Gi, nvidia.com/gpu: 64}
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 10m
    budgets:
      - nodes: "20%"
      - {nodes: "0", schedule: "0 9 * * 1-5", duration: 8h, reasons: [Drifted]}
      - {nodes: 1, reasons: [Empty, Drifted, Underutilized, Restarted]}
  template:
    metadata:
      labels: {team: ml, karpenter.k8s.aws/instance-family: p5}
      annotations: {a: b}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: gpu}
      expireAfter: Never
      terminationGracePeriod: 2h
      taints: [{key: nvidia.com/gpu, value: "true", effect: NoSchedule}]
      startupTaints: [{key: init, effect: NoExecute}]
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
"#;
        let (pool, notes): (NodePool, _) = one(yaml);
        let s = &pool.spec;
        assert_eq!(s.weight, Some(50));
        assert_eq!(s.limits["cpu"].0, "1000");
        assert_eq!(s.limits["memory"].0, "4000Gi");
        assert_eq!(
            s.disruption.consolidation_policy,
            ConsolidationPolicy::WhenEmpty
        );
        assert_eq!(s.disruption.consolidate_after, "10m");
        let b = &s.disruption.budgets;
        assert_eq!(b.len(), 3);
        assert_eq!(b[1].schedule.as_deref(), Some("0 9 * * 1-5"));
        assert_eq!(b[1].reasons, [BudgetReason::Drifted]);
        assert_eq!(b[2].nodes, "1");
        assert_eq!(
            b[2].reasons,
            [
                BudgetReason::Empty,
                BudgetReason::Drifted,
                BudgetReason::Underutilized
            ]
        );
        let t = &s.template;
        assert_eq!(
            t.metadata.labels,
            BTreeMap::from([("team".into(), "ml".into())])
        );
        assert_eq!(t.metadata.annotations["a"], "b");
        assert_eq!(t.spec.expire_after.as_deref(), Some("Never"));
        assert_eq!(t.spec.termination_grace_period.as_deref(), Some("2h"));
        assert_eq!(
            t.spec.taints[0].to_string(),
            "nvidia.com/gpu=true:NoSchedule"
        );
        assert_eq!(t.spec.startup_taints[0].to_string(), "init:NoExecute");
        assert_eq!(s.capacity_types, [CapacityType::Spot]);
        let reqs: Vec<String> = t
            .spec
            .requirements
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(reqs, ["quartermaster.dev/instance-family In [p5]"]);
        assert_eq!(
            notes,
            [
                (
                    "spec.template.metadata.labels[karpenter.k8s.aws/instance-family]".to_string(),
                    NoteKind::Info
                ),
                (
                    "spec.disruption.budgets[2].reasons[3]".to_string(),
                    NoteKind::NotCarried
                ),
            ]
        );
        assert!(validate_node_pool(&pool, &Catalog::embedded().unwrap()).is_empty());
    }

    #[test]
    fn unknown_and_unsupported_fields_are_reported_never_dropped() {
        let yaml = format!(
            "{MINIMAL}      kubelet: {{maxPods: 110}}\n      expireAfter: 24h\n  replicas: 3\n  disruption: {{consolidateAfter: 1m, consolidateWhen: WhenCostJustifiesDisruption, decisionRatioThreshold: 2}}\n  limit: {{cpu: 1}}\nstatus: {{nodes: 3}}\n"
        );
        let (_, notes) = one::<NodePool>(&yaml);
        assert_eq!(
            lost(&notes),
            [
                "spec.template.spec.kubelet",
                "spec.disruption.consolidateWhen",
                "spec.disruption.decisionRatioThreshold",
                "spec.replicas",
                "spec.limit",
            ]
        );
        assert!(notes.contains(&("status".to_string(), NoteKind::Info)));
    }

    #[test]
    fn a_foreign_node_class_reference_is_named_and_kept_by_name() {
        let yaml = MINIMAL.replace(
            "{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}",
            "{group: eks.amazonaws.com, kind: NodeClass, name: auto}",
        );
        let (pool, notes): (NodePool, _) = one(&yaml);
        assert_eq!(
            pool.spec.template.spec.node_class_ref,
            Some(NodeClassReference::to("auto"))
        );
        assert!(notes.contains(&(
            "spec.template.spec.nodeClassRef".to_string(),
            NoteKind::NotCarried
        )));
    }

    #[test]
    fn bad_taints_are_reported_and_left_out() {
        let yaml =
            format!("{MINIMAL}      taints: [{{key: a, effect: Sometimes}}, {{value: x}}]\n");
        let (pool, notes) = one::<NodePool>(&yaml);
        assert!(pool.spec.template.spec.taints.is_empty());
        assert_eq!(
            lost(&notes),
            [
                "spec.template.spec.taints[0].effect",
                "spec.template.spec.taints[1]"
            ]
        );
    }
}
