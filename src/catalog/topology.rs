//! Which instance types EC2 reports a network topology for
//! (`DescribeInstanceTopology`), and how many layers: the EC2 User Guide's
//! "Prerequisites for Amazon EC2 topology" (instance types section, as of
//! November 2026). Types not listed get no topology from EC2, so their nodes
//! carry no `topology.k8s.aws/network-node-layer-*` labels and asking for
//! them would be a wasted call.

/// Families EC2 reports three network layers for, every size.
const THREE_LAYER_FAMILIES: [&str; 4] = ["g6e", "g7e", "hpc7g", "hpc7a"];

/// Single types EC2 reports three network layers for.
const THREE_LAYER_TYPES: [&str; 15] = [
    "hpc6a.48xlarge",
    "hpc6id.32xlarge",
    "hpc8a.96xlarge",
    "p3dn.24xlarge",
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6e-gb200.36xlarge",
    "trn1.2xlarge",
    "trn1.32xlarge",
    "trn1n.32xlarge",
    "trn2.48xlarge",
    "trn2u.48xlarge",
];

/// Types EC2 reports four network layers for.
const FOUR_LAYER_TYPES: [&str; 2] = ["p6-b200.48xlarge", "p6-b300.48xlarge"];

/// How many network layers EC2 reports for an instance of this type, or
/// `None` when it reports none.
pub fn network_layers(instance_type: &str) -> Option<usize> {
    let family = instance_type.split('.').next().unwrap_or_default();
    if FOUR_LAYER_TYPES.contains(&instance_type) {
        Some(4)
    } else if THREE_LAYER_TYPES.contains(&instance_type) || THREE_LAYER_FAMILIES.contains(&family) {
        Some(3)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn training_types_have_layers_and_others_none() {
        assert_eq!(network_layers("p5.48xlarge"), Some(3));
        assert_eq!(network_layers("trn2.48xlarge"), Some(3));
        assert_eq!(network_layers("g6e.xlarge"), Some(3), "a whole family");
        assert_eq!(network_layers("p6-b200.48xlarge"), Some(4));
        assert_eq!(network_layers("p5.4xlarge"), None, "only the sizes listed");
        assert_eq!(network_layers("g5.xlarge"), None);
        assert_eq!(network_layers(""), None);
    }
}
