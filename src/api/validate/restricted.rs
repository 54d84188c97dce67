//! Which node labels a NodePool may put on its nodes. Labels that describe
//! the node (zone, instance type, host name, architecture, GPUs, pool) are
//! set by Quartermaster, the kubelet or the cloud; a pool that set them
//! would overwrite the truth on every node it launches, and pods that select
//! on them would land on nodes that lie. The rules follow Karpenter's
//! `RestrictedLabelDomains`, `LabelDomainExceptions` and `WellKnownLabels`,
//! stricter in two ways (see `docs/crds.md`): well-known labels cannot be
//! set at all (Karpenter turns such labels into requirements; our pools say
//! that with requirements), and `node-restriction.kubernetes.io/` is
//! restricted (Karpenter exempts it), because those labels exist so that a
//! workload can trust that an administrator, not a node, put them there.
//!
//! Karpenter's domains, `karpenter.sh` (its core's `RestrictedLabelDomains`)
//! and `karpenter.k8s.aws` (its AWS provider's), are restricted the same
//! way, and the Karpenter labels Quartermaster sets on its nodes
//! ([`karpenter_labels_set`]) are well-known labels. A requirement may name
//! a Karpenter label only if Quartermaster sets it ([`karpenter_key_unknown`]):
//! one on a label no node carries would select nothing (or everything).
//!
//! The same rules run in three places: [`super::validate_node_pool`], the
//! CRD's CEL rules ([`label_domain_rule`], [`well_known_label_rule`],
//! [`karpenter_key_rule`]), and `cluster::Pool::from_api`, which refuses a
//! pool that fails validation.

use crate::api::labels as l;

/// Label domains (and, by suffix, their subdomains) a pool may not use.
pub const RESTRICTED_LABEL_DOMAINS: &[&str] = &[
    "kubernetes.io",
    "k8s.io",
    l::GROUP,
    l::KARPENTER_GROUP,
    l::KARPENTER_AWS_GROUP,
];

/// Karpenter's label domains: a requirement may name a label in them only
/// if it is one of [`karpenter_labels_set`].
const KARPENTER_DOMAINS: &[&str] = &[l::KARPENTER_GROUP, l::KARPENTER_AWS_GROUP];

/// The Karpenter labels Quartermaster sets on its nodes (with the values
/// Karpenter gives them): its NodePool and capacity type, and the instance
/// type's labels of Karpenter's AWS provider that the catalog knows (those
/// of [`crate::catalog::INSTANCE_TYPE_KEYS`] in Karpenter's domains).
pub fn karpenter_labels_set() -> Vec<&'static str> {
    [l::KARPENTER_NODEPOOL, l::KARPENTER_CAPACITY_TYPE]
        .into_iter()
        .chain(
            crate::catalog::INSTANCE_TYPE_KEYS
                .iter()
                .copied()
                .filter(|k| in_karpenter_domain(k)),
        )
        .collect()
}

/// Whether `key`'s domain is one of Karpenter's (or a subdomain).
fn in_karpenter_domain(key: &str) -> bool {
    key.split_once('/')
        .is_some_and(|(domain, _)| KARPENTER_DOMAINS.iter().any(|d| domain.ends_with(d)))
}

/// Why a requirement may not name `key`: a label in a Karpenter domain
/// that Quartermaster does not set; `None` for any other key.
pub fn karpenter_key_unknown(key: &str) -> Option<String> {
    let set = karpenter_labels_set();
    if !in_karpenter_domain(key) || set.contains(&key) {
        return None;
    }
    Some(format!(
        "{key} is not a Karpenter label Quartermaster sets, so no node would carry it; it sets {}",
        set.join(", ")
    ))
}

/// The CEL rule on a requirement that refuses keys in Karpenter's domains
/// other than [`karpenter_labels_set`] (the test of [`karpenter_key_unknown`]).
pub fn karpenter_key_rule() -> String {
    let list: Vec<String> = karpenter_labels_set()
        .iter()
        .map(|k| format!("'{k}'"))
        .collect();
    format!(
        "!self.key.matches('^[^/]*({})/') || self.key in [{}]",
        alternation(KARPENTER_DOMAINS),
        list.join(", ")
    )
}

/// Message of [`karpenter_key_rule`].
pub const KARPENTER_KEY_MESSAGE: &str = "of Karpenter's labels (karpenter.sh/, karpenter.k8s.aws/) only those Quartermaster sets on its nodes may be required: see docs/crds.md, Node labels";

/// Subdomains of restricted domains that a pool may use: the ones kubelets
/// may set on themselves (`node.kubernetes.io`) and kOps's.
pub const LABEL_DOMAIN_EXCEPTIONS: &[&str] = &["node.kubernetes.io", "kops.k8s.io"];

/// Labels that describe the node, set by Quartermaster, the kubelet or the
/// cloud, never by a pool (some are in an exempt or unrestricted domain,
/// hence the list).
pub const WELL_KNOWN_LABELS: &[&str] = &[
    l::NODEPOOL,
    l::CAPACITY_TYPE,
    l::INSTANCE_FAMILY,
    l::GPU_NAME,
    l::GPU_MEMORY_GIB,
    l::GPU_COUNT,
    l::NEURON_NAME,
    l::NEURON_COUNT,
    l::GFD_PRODUCT,
    l::GFD_COUNT,
    l::GFD_MEMORY,
    l::INSTANCE_TYPE,
    l::ZONE,
    l::ZONE_ID,
    l::REGION,
    l::ARCH,
    l::OS,
    l::HOSTNAME,
    "node.kubernetes.io/windows-build",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
];

/// Why a pool may not set the label `key` on its nodes; `None` when it may.
pub fn label_restriction(key: &str) -> Option<String> {
    if WELL_KNOWN_LABELS.contains(&key) || karpenter_labels_set().contains(&key) {
        return Some(format!(
            "{key} is a well-known label, set by Quartermaster, the kubelet or the cloud from what the node is; select it with spec.template.spec.requirements instead"
        ));
    }
    let (domain, _) = key.split_once('/')?;
    let exempt = LABEL_DOMAIN_EXCEPTIONS
        .iter()
        .any(|e| domain == *e || domain.ends_with(&format!(".{e}")));
    let restricted = RESTRICTED_LABEL_DOMAINS
        .iter()
        .find(|d| domain.ends_with(*d))
        .filter(|_| !exempt)?;
    Some(format!(
        "label domain {domain:?} is restricted ({restricted} is reserved; only {} are open); use a domain of your own",
        LABEL_DOMAIN_EXCEPTIONS
            .iter()
            .map(|e| format!("{e}/"))
            .collect::<Vec<_>>()
            .join(" and ")
    ))
}

/// A regex alternation of `names` with dots as `[.]` (no backslashes to
/// escape through Rust, CEL and YAML).
fn alternation(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| n.replace('.', "[.]"))
        .collect::<Vec<_>>()
        .join("|")
}

/// The CEL rule on a labels map that rejects keys in a restricted domain
/// (the same test as [`label_restriction`]'s domain part).
pub fn label_domain_rule() -> String {
    format!(
        "self.all(k, !k.matches('^[^/]*({})/') || k.matches('^([^/]*[.])?({})/'))",
        alternation(RESTRICTED_LABEL_DOMAINS),
        alternation(LABEL_DOMAIN_EXCEPTIONS)
    )
}

/// Message of [`label_domain_rule`].
pub const LABEL_DOMAIN_MESSAGE: &str = "label domains kubernetes.io, k8s.io, quartermaster.dev, karpenter.sh and karpenter.k8s.aws are restricted (node.kubernetes.io/ and kops.k8s.io/ are open); use a domain of your own";

/// The CEL rule on a labels map that rejects [`WELL_KNOWN_LABELS`] and
/// [`karpenter_labels_set`].
pub fn well_known_label_rule() -> String {
    let list: Vec<String> = WELL_KNOWN_LABELS
        .iter()
        .copied()
        .chain(karpenter_labels_set())
        .map(|k| format!("'{k}'"))
        .collect();
    format!("self.all(k, !(k in [{}]))", list.join(", "))
}

/// Message of [`well_known_label_rule`].
pub const WELL_KNOWN_LABEL_MESSAGE: &str = "well-known labels (zone, instance type, hostname, architecture, GPUs, quartermaster.dev/nodepool, Karpenter's karpenter.sh/capacity-type, ...) are set by Quartermaster, the kubelet or the cloud; select them with requirements instead";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escalating_labels_are_refused_and_custom_ones_pass() {
        for key in [
            "node-restriction.kubernetes.io/trusted",
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
            "topology.k8s.aws/zone-id",
            "node.kubernetes.io/instance-type",
            "kubernetes.io/arch",
            "quartermaster.dev/nodepool",
            "quartermaster.dev/gpu-count",
            "quartermaster.dev/anything",
            "nvidia.com/gpu.product",
            "kubelet.kubernetes.io/x",
            "sub.k8s.io/x",
            "kubernetes.io/custom",
            "karpenter.sh/capacity-type",
            "karpenter.sh/nodepool",
            "karpenter.sh/anything",
            "karpenter.k8s.aws/instance-family",
            "karpenter.k8s.aws/ec2nodeclass",
        ] {
            assert!(label_restriction(key).is_some(), "{key} passed");
        }
        for key in [
            "team",
            "example.com/team",
            "node.kubernetes.io/role",
            "a.node.kubernetes.io/x",
            "kops.k8s.io/instancegroup",
            "k8s.aws.example.com/x",
        ] {
            assert_eq!(label_restriction(key), None, "{key}");
        }
    }

    #[test]
    fn the_karpenter_labels_set_are_the_offerings_and_karpenters_instance_type_ones() {
        let set = karpenter_labels_set();
        assert!(set.contains(&l::KARPENTER_NODEPOOL) && set.contains(&l::KARPENTER_CAPACITY_TYPE));
        assert!(set.contains(&l::KARPENTER_INSTANCE_GPU_NAME));
        assert!(!set.contains(&l::INSTANCE_FAMILY));
        assert!(set.iter().all(|k| k.starts_with("karpenter.")));
    }

    #[test]
    fn only_the_karpenter_labels_quartermaster_sets_may_be_required() {
        assert_eq!(karpenter_key_unknown("karpenter.sh/capacity-type"), None);
        assert_eq!(karpenter_key_unknown(l::KARPENTER_INSTANCE_GPU_NAME), None);
        assert_eq!(karpenter_key_unknown("example.com/x"), None);
        for key in [
            "karpenter.k8s.aws/instance-ebs-bandwidth",
            "karpenter.k8s.aws/ec2nodeclass",
            "karpenter.sh/registered",
        ] {
            assert!(
                karpenter_key_unknown(key)
                    .unwrap()
                    .contains("not a Karpenter label"),
                "{key}"
            );
        }
    }

    #[test]
    fn messages_say_what_to_do_instead() {
        assert!(label_restriction(l::ZONE)
            .unwrap()
            .contains("requirements instead"));
        assert!(label_restriction("node-restriction.kubernetes.io/x")
            .unwrap()
            .contains("\"node-restriction.kubernetes.io\" is restricted"));
    }
}
