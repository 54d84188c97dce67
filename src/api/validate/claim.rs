//! Validation of NodeClaims. The controller copies a claim's labels and
//! taints onto its Node with its own privileges and passes them to the
//! kubelet through the instance's user data, so a claim may carry only
//! what a NodePool may put on its nodes (the same restricted-label rules,
//! [`super::label_restriction`]) plus the labels Quartermaster itself sets
//! from the claim's offering, with the values that offering gives; and
//! every label and taint must be valid Kubernetes syntax (no whitespace, no
//! `,` or `=` that could break out of a kubelet flag).

use super::syntax::{check_label_value, check_qualified_name};
use super::{check_taints, label_restriction, Errors, FieldError, MAX_LABELS};
use crate::api::labels as l;
use crate::api::NodeClaim;
use crate::catalog::{CapacityType, Catalog, ReservationKind};
use std::collections::BTreeMap;

/// The labels Quartermaster sets on a claim of this spec that a pool may
/// not set, with the value each must have (`None`: any valid value). The
/// instance type's own labels (ours, the well-known ones and Karpenter's)
/// come from `catalog` when it knows the type. The zone's name may be any:
/// the account's names are learnt after start, and the node's zone label is
/// set again from where the instance runs when it registers.
fn offering_labels(
    spec: &crate::api::NodeClaimSpec,
    catalog: &Catalog,
    region: &str,
) -> BTreeMap<String, Option<String>> {
    let mut m: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut put = |k: &str, v: Option<&str>| {
        m.insert(k.to_string(), v.map(str::to_string));
    };
    for k in [l::NODEPOOL, l::KARPENTER_NODEPOOL] {
        put(k, Some(&spec.node_pool));
    }
    for k in [l::CAPACITY_TYPE, l::KARPENTER_CAPACITY_TYPE] {
        put(k, Some(spec.capacity_type.as_str()));
    }
    // What the controller marks its own launches with: served DRA claims,
    // a cluster placement group for a one-block gang.
    for k in [l::DRA, l::CLUSTER_PLACEMENT] {
        put(k, Some("true"));
    }
    put(l::INSTANCE_TYPE, Some(&spec.instance_type));
    put(l::ZONE_ID, Some(&spec.zone));
    put(l::ZONE, None);
    put(l::REGION, Some(region));
    if spec.capacity_type == CapacityType::Reserved {
        put(l::CAPACITY_RESERVATION_ID, None);
        put(l::CAPACITY_RESERVATION_KIND, None);
    }
    if let Some(it) = catalog.instance_type(&spec.instance_type) {
        if it.efa_supported {
            put(l::EFA_INTERFACES, None);
        }
        m.extend(
            crate::catalog::instance_type_labels(it)
                .into_iter()
                .map(|(k, v)| (k, Some(v))),
        );
    }
    m
}

/// Checks a NodeClaim's labels and taints (see the module documentation):
/// every problem, each with its field; empty means valid. `catalog` and
/// `region` say what the claim's offering gives.
pub fn validate_node_claim(claim: &NodeClaim, catalog: &Catalog, region: &str) -> Vec<FieldError> {
    let mut e = Errors::default();
    let spec = &claim.spec;
    let allowed = offering_labels(spec, catalog, region);
    for (k, v) in &spec.labels {
        let path = format!("spec.labels[{k}]");
        if let Err(m) = check_qualified_name(k) {
            e.push(&path, format!("invalid label key: {m}"));
            continue;
        }
        if let Err(m) = check_label_value(v) {
            e.push(&path, format!("invalid label value {v:?}: {m}"));
            continue;
        }
        let Some(why) = label_restriction(k) else {
            continue;
        };
        match allowed.get(k.as_str()) {
            None => e.push(&path, why),
            Some(Some(want)) if want != v => e.push(
                &path,
                format!("{v:?} is not what the claim's offering gives ({want:?})"),
            ),
            Some(_) => {
                if k == l::CAPACITY_RESERVATION_KIND
                    && ![ReservationKind::OnDemand, ReservationKind::CapacityBlock]
                        .iter()
                        .any(|r| r.as_str() == v)
                {
                    e.push(&path, format!("{v:?} is not a reservation kind"));
                }
                if k == l::EFA_INTERFACES && v.parse::<u32>().is_err() {
                    e.push(&path, format!("{v:?} is not a number of interfaces"));
                }
            }
        }
    }
    if spec.labels.len() > MAX_LABELS {
        e.push(
            "spec.labels",
            format!("at most {MAX_LABELS} labels are allowed"),
        );
    }
    check_taints(&mut e, "spec.taints", &spec.taints);
    check_taints(&mut e, "spec.startupTaints", &spec.startup_taints);
    e.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodeClaimSpec, Taint, TaintEffect};
    use std::sync::OnceLock;

    fn catalog() -> &'static Catalog {
        static C: OnceLock<Catalog> = OnceLock::new();
        C.get_or_init(|| Catalog::embedded().unwrap())
    }

    /// A claim as the controller builds it: the labels its offering gives
    /// and a pool's own label.
    fn claim() -> NodeClaim {
        let it = catalog().instance_type("p4d.24xlarge").unwrap();
        let mut labels: BTreeMap<String, String> = crate::catalog::instance_type_labels(it);
        for (k, v) in [
            (l::NODEPOOL, "train"),
            (l::KARPENTER_NODEPOOL, "train"),
            (l::ZONE_ID, "use1-az6"),
            (l::ZONE, "us-east-1f"),
            (l::REGION, "us-east-1"),
            (l::CAPACITY_TYPE, "spot"),
            (l::KARPENTER_CAPACITY_TYPE, "spot"),
            (l::EFA_INTERFACES, "4"),
            ("team", "ml"),
        ] {
            labels.insert(k.into(), v.into());
        }
        NodeClaim::new(
            "train-000001",
            NodeClaimSpec {
                node_pool: "train".into(),
                instance_type: "p4d.24xlarge".into(),
                zone: "use1-az6".into(),
                capacity_type: CapacityType::Spot,
                price_per_hour: 9.0,
                resources: Default::default(),
                labels,
                taints: vec![Taint::new(l::TAINT_GPU, "present", TaintEffect::NoSchedule)],
                startup_taints: vec![Taint::new(
                    l::TAINT_UNREGISTERED,
                    "",
                    TaintEffect::NoExecute,
                )],
                termination_grace_period: None,
                expire_after: None,
            },
        )
    }

    fn problems(c: &NodeClaim) -> Vec<String> {
        validate_node_claim(c, catalog(), "us-east-1")
            .into_iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn a_claim_as_the_controller_builds_it_is_valid() {
        assert_eq!(problems(&claim()), Vec::<String>::new());
        // Launched to serve DRA claims, or for a one-block gang.
        let mut c = claim();
        for k in [l::DRA, l::CLUSTER_PLACEMENT] {
            c.spec.labels.insert(k.into(), "true".into());
        }
        assert_eq!(problems(&c), Vec::<String>::new());
        for k in [l::DRA, l::CLUSTER_PLACEMENT] {
            let mut c = claim();
            c.spec.labels.insert(k.into(), "yes".into());
            assert_eq!(problems(&c).len(), 1, "{k}: only \"true\"");
        }
    }

    #[test]
    fn restricted_labels_a_pool_may_not_set_are_refused_on_a_claim() {
        for (key, value) in [
            ("node-restriction.kubernetes.io/trusted", "true"),
            ("kubernetes.io/hostname", "ip-10-0-0-1"),
            ("node-role.kubernetes.io/control-plane", ""),
            ("quartermaster.dev/anything", "x"),
        ] {
            let mut c = claim();
            c.spec.labels.insert(key.into(), value.into());
            let p = problems(&c);
            assert_eq!(p.len(), 1, "{key}: {p:?}");
            assert!(
                p[0].contains(key) && p[0].contains("restricted") || p[0].contains("well-known"),
                "{p:?}"
            );
        }
    }

    #[test]
    fn offering_labels_must_say_what_the_offering_is() {
        for (key, value) in [
            (l::INSTANCE_TYPE, "p5.48xlarge"),
            (l::GPU_NAME, "h100"),
            (l::CAPACITY_TYPE, "on-demand"),
            (l::KARPENTER_CAPACITY_TYPE, "on-demand"),
            (l::KARPENTER_INSTANCE_FAMILY, "p5"),
            (l::KARPENTER_INSTANCE_GPU_COUNT, "1"),
            (l::NODEPOOL, "other"),
            (l::KARPENTER_NODEPOOL, "other"),
            (l::REGION, "eu-west-1"),
        ] {
            let mut c = claim();
            c.spec.labels.insert(key.into(), value.into());
            let p = problems(&c);
            assert_eq!(p.len(), 1, "{key}: {p:?}");
            assert!(
                p[0].contains("not what the claim's offering gives"),
                "{p:?}"
            );
        }
        // A reservation's labels only on reserved capacity.
        let mut c = claim();
        c.spec
            .labels
            .insert(l::CAPACITY_RESERVATION_ID.into(), "cr-1".into());
        assert_eq!(problems(&c).len(), 1);
        c.spec.capacity_type = CapacityType::Reserved;
        for k in [l::CAPACITY_TYPE, l::KARPENTER_CAPACITY_TYPE] {
            c.spec.labels.insert(k.into(), "reserved".into());
        }
        assert_eq!(problems(&c), Vec::<String>::new());
    }

    #[test]
    fn labels_and_taints_that_would_break_a_kubelet_flag_are_refused() {
        let mut c = claim();
        c.spec
            .labels
            .insert("team".into(), "ml --anonymous-auth=true".into());
        c.spec.labels.insert("a b".into(), "x".into());
        c.spec
            .taints
            .push(Taint::new("x", "a,b", TaintEffect::NoSchedule));
        c.spec
            .startup_taints
            .push(Taint::new("bad key", "", TaintEffect::NoSchedule));
        let p = problems(&c);
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(
            p.iter().any(|m| m.starts_with("spec.labels[team]")),
            "{p:?}"
        );
        assert!(p.iter().any(|m| m.starts_with("spec.labels[a b]")), "{p:?}");
        assert!(
            p.iter().any(|m| m.starts_with("spec.taints[1].value")),
            "{p:?}"
        );
        assert!(
            p.iter().any(|m| m.starts_with("spec.startupTaints[1].key")),
            "{p:?}"
        );
    }
}
