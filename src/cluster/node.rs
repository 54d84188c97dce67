//! Capacity that exists or is on its way: registered nodes and in-flight
//! NodeClaims, with what is still free on them.

use super::requirements::{Labels, Taint};
use super::resources::Resources;
use crate::api::labels as l;
use crate::catalog::{CapacityType, Catalog};

/// A node, or a NodeClaim whose node has not registered yet.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeState {
    /// Node name (or claim name while in flight).
    pub name: String,
    /// The NodePool that owns it, if it is one of ours.
    pub nodepool: Option<String>,
    /// Instance type, if known.
    pub instance_type: Option<String>,
    /// Zone ID.
    pub zone: String,
    /// Spot or on-demand, if known.
    pub capacity_type: Option<CapacityType>,
    /// Node labels (for in-flight claims: the labels it will carry).
    pub labels: Labels,
    /// Node taints (startup taints excluded: they are lifted at registration).
    pub taints: Vec<Taint>,
    /// Allocatable resources.
    pub allocatable: Resources,
    /// Requests of daemonset pods and pods bound to the node.
    pub used: Resources,
    /// USD per hour, if known.
    pub price_per_hour: f64,
    /// A NodeClaim that has not become a Ready node yet.
    pub in_flight: bool,
    /// Cordoned: takes no new pods.
    pub unschedulable: bool,
    /// Pods bound to it with a per-node cap ([`super::Pod::per_node_max`]),
    /// counted by their set's key (`plan::pack::anti_affinity_key`): a
    /// pending pod of a set whose cap its siblings here already reach does
    /// not fit here, whatever room is left. Filled by the core from the
    /// pods it sees bound; empty elsewhere.
    pub capped: std::collections::BTreeMap<String, u32>,
}

impl NodeState {
    /// Allocatable minus what is used (never negative).
    pub fn free(&self) -> Resources {
        self.allocatable.minus(&self.used).at_least_zero()
    }

    /// Brings a node read from a file to the planner's terms: its
    /// [`NodeState::zone`] becomes the zone ID (a node labelled only with a
    /// zone name, `topology.kubernetes.io/zone: us-east-1a`, gets the ID
    /// `catalog`'s zone names give that name in `region`), and it carries
    /// both zone labels, the name in `topology.kubernetes.io/zone` and the
    /// ID in `topology.k8s.aws/zone-id`, as EKS nodes do. A zone the
    /// catalog does not know is left as it is.
    pub fn resolve_zone(&mut self, catalog: &Catalog, region: &str) {
        let known = catalog.zones(region);
        if !known.contains(&self.zone.as_str()) {
            match catalog.zone_id_of(region, &self.zone) {
                Some(id) => self.zone = id,
                None => return,
            }
        }
        self.labels
            .insert(l::ZONE_ID.to_string(), self.zone.clone());
        let name = catalog.zone_name(region, &self.zone);
        let zone_label = self.labels.entry(l::ZONE.to_string()).or_default();
        if zone_label.is_empty() || *zone_label == self.zone {
            *zone_label = name;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: &[(&str, &str)], zone: &str) -> NodeState {
        NodeState {
            name: "n".into(),
            nodepool: None,
            instance_type: None,
            zone: zone.into(),
            capacity_type: None,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            taints: Vec::new(),
            allocatable: Resources::new(),
            used: Resources::new(),
            price_per_hour: 0.0,
            in_flight: false,
            unschedulable: false,
            capped: Default::default(),
        }
    }

    #[test]
    fn a_node_file_in_either_zone_form_resolves_to_the_id_with_both_labels() {
        let catalog = Catalog::embedded().unwrap();
        let by_name = {
            let mut n = node(&[(l::ZONE, "us-east-1d")], "us-east-1d");
            n.resolve_zone(&catalog, "us-east-1");
            n
        };
        let by_id = {
            let mut n = node(&[(l::ZONE, "use1-az4")], "use1-az4");
            n.resolve_zone(&catalog, "us-east-1");
            n
        };
        for n in [&by_name, &by_id] {
            assert_eq!(n.zone, "use1-az4");
            assert_eq!(n.labels[l::ZONE_ID], "use1-az4");
            assert_eq!(n.labels[l::ZONE], "us-east-1d");
        }
        // The account's own names win over the default rule.
        let catalog = catalog.with_zone_names(crate::catalog::ZoneNames::new().with_region(
            "us-east-1",
            [("us-east-1a".to_string(), "use1-az4".to_string())],
        ));
        let mut n = node(&[(l::ZONE, "us-east-1a")], "us-east-1a");
        n.resolve_zone(&catalog, "us-east-1");
        assert_eq!(n.zone, "use1-az4");
        let mut unknown = node(&[(l::ZONE, "mars-1a")], "mars-1a");
        unknown.resolve_zone(&catalog, "us-east-1");
        assert_eq!(unknown.zone, "mars-1a");
        assert!(!unknown.labels.contains_key(l::ZONE_ID));
    }
}
