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
//! The same rules run in three places: [`super::validate_node_pool`], the
//! CRD's CEL rules ([`label_domain_rule`], [`well_known_label_rule`]), and
//! `cluster::Pool::from_api`, which refuses a pool that fails validation.

use crate::api::labels as l;

/// Label domains (and, by suffix, their subdomains) a pool may not use.
pub const RESTRICTED_LABEL_DOMAINS: &[&str] = &["kubernetes.io", "k8s.io", l::GROUP];

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
    if WELL_KNOWN_LABELS.contains(&key) {
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
pub const LABEL_DOMAIN_MESSAGE: &str = "label domains kubernetes.io, k8s.io and quartermaster.dev are restricted (node.kubernetes.io/ and kops.k8s.io/ are open); use a domain of your own";

/// The CEL rule on a labels map that rejects [`WELL_KNOWN_LABELS`].
pub fn well_known_label_rule() -> String {
    let list: Vec<String> = WELL_KNOWN_LABELS.iter().map(|k| format!("'{k}'")).collect();
    format!("self.all(k, !(k in [{}]))", list.join(", "))
}

/// Message of [`well_known_label_rule`].
pub const WELL_KNOWN_LABEL_MESSAGE: &str = "well-known labels (zone, instance type, hostname, architecture, GPUs, quartermaster.dev/nodepool, ...) are set by Quartermaster, the kubelet or the cloud; select them with requirements instead";

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
    fn messages_say_what_to_do_instead() {
        assert!(label_restriction(l::ZONE)
            .unwrap()
            .contains("requirements instead"));
        assert!(label_restriction("node-restriction.kubernetes.io/x")
            .unwrap()
            .contains("\"node-restriction.kubernetes.io\" is restricted"));
    }
}
