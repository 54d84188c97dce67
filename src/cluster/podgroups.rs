//! Pod groups whose size is declared by another object than the pods (a
//! Volcano PodGroup's `minMember`, a Workload API PodGroup's gang
//! `minCount`): setting the members' gang size, the claims a Workload API
//! group holds once for all its members, its topology constraint, and the
//! capacity a group reserves before all its members exist (Volcano's
//! `minResources`). Pure; the controller reads the objects.

use super::pod::{ClaimRef, GroupRef, Pod};
use super::requirements::{Operator, Requirement, Toleration};
use super::resources::{Resources, PODS};
use crate::api::labels as l;

/// A pod group as the object declaring it states it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodGroupSpec {
    /// Pods that must run together (`minMember`, `minCount`).
    pub min_member: u32,
    /// What the whole group needs before it may start (Volcano
    /// `minResources`), if stated.
    pub min_resources: Option<Resources>,
    /// Node label keys whose value all members' nodes must share (Workload
    /// API `schedulingConstraints.topology`).
    pub topology: Vec<String>,
    /// Claims the group holds once for all its members (Workload API
    /// `resourceClaims`), with the claim made from a template once made.
    pub claims: Vec<ClaimRef>,
}

impl PodGroupSpec {
    /// A group of `min_member` pods with nothing else stated.
    pub fn of_size(min_member: u32) -> PodGroupSpec {
        PodGroupSpec {
            min_member,
            min_resources: None,
            topology: Vec::new(),
            claims: Vec::new(),
        }
    }
}

/// Topology keys a gang always meets: the planner puts a gang's new nodes
/// in one zone of one region.
const MET_BY_ONE_ZONE: [&str; 3] = [l::ZONE, l::ZONE_ID, l::REGION];

/// The network layer (1 = top) a `topology.k8s.aws/network-node-layer-N`
/// key names, if it is one.
pub fn network_layer(key: &str) -> Option<usize> {
    key.strip_prefix(l::NETWORK_NODE_LAYER_PREFIX)?
        .parse()
        .ok()
        .filter(|n| (1..=4).contains(n))
}

/// Applies the group that declares the pod's gang (a pod of another group,
/// or of none, is left alone): its size (`min_member`); its claims, so
/// that a member's claim equal to one of the group's (same name, same
/// ResourceClaim or template) is one allocation for the whole group; and
/// its topology constraint. The zone and region hold for any gang (its
/// nodes share one zone). A network layer
/// (`topology.k8s.aws/network-node-layer-N`) is met by nodes of types EC2
/// reports that many layers for (the pod is limited to them through
/// `quartermaster.dev/network-layers`) launched into one cluster placement
/// group ([`Pod::network_block`]). Any other key (a rack, the hostname)
/// cannot be chosen for new nodes: the pod is not placeable, with the
/// reason, rather than placed apart.
pub fn apply(pod: &mut Pod, group: &str, spec: &PodGroupSpec) {
    let Some(g) = pod.group.as_mut().filter(|g| g.name == group) else {
        return;
    };
    g.min_member = spec.min_member.max(1);
    for c in &mut pod.resource_claims {
        let Some(held) = spec
            .claims
            .iter()
            .find(|h| h.name == c.name && h.claim == c.claim && h.template == c.template)
        else {
            continue;
        };
        if c.claim.is_none() {
            match &held.generated {
                Some(made) => c.claim = Some(made.clone()),
                None => c.group = Some(group.to_string()),
            }
        }
    }
    for key in &spec.topology {
        if MET_BY_ONE_ZONE.contains(&key.as_str()) {
            continue;
        }
        if let Some(layer) = network_layer(key) {
            let layers = Requirement {
                key: l::NETWORK_LAYERS.into(),
                operator: Operator::Gt,
                values: vec![(layer - 1).to_string()],
            };
            if pod.affinity.terms.is_empty() {
                pod.affinity.terms.push(Vec::new());
            }
            for term in &mut pod.affinity.terms {
                term.push(layers.clone());
            }
            pod.network_block = Some(key.clone());
            continue;
        }
        pod.not_placeable.push(format!(
            "PodGroup {group} asks for all its pods in one {key}: Quartermaster keeps a gang in one zone, or under one network node, and cannot choose a {key} for new nodes"
        ));
    }
}

/// Stand-ins for the members of `group` (`namespace/name`) that have not
/// been created yet, so that the group's whole capacity is planned at once
/// rather than pod by pod as members appear: only when the spec says what
/// the whole group needs (`min_resources`). Each stand-in asks for an equal
/// share of `min_resources` (rounded up), joins the gang, and carries the
/// constraints of the first pending member (or, with none, tolerates the
/// accelerator taints of what it asks for). `members` counts the group's
/// pods that exist (pending or bound); `pending` are its pending ones.
/// Stand-ins are named `<group>.reserved-<i>`. At most `room` are made:
/// a group missing more members than that gets none (a group's size comes
/// from a tenant's object; its stand-ins are bounded by the batch cap).
pub fn reservations(
    group: &str,
    spec: &PodGroupSpec,
    pending: &[&Pod],
    members: usize,
    room: usize,
) -> Vec<Pod> {
    let Some(total) = spec.min_resources.as_ref() else {
        return Vec::new();
    };
    let min = spec.min_member.max(1) as usize;
    if members >= min || min - members > room {
        return Vec::new();
    }
    let mut share = Resources::new();
    for (k, v) in total.iter().filter(|(k, _)| *k != PODS) {
        // Rounded up, without the overflow of `(v + min - 1) / min` on a
        // tenant's huge quantity.
        let (q, r) = (v / min as i64, v % min as i64);
        share.set(k, if r > 0 { q + 1 } else { q });
    }
    (members..min)
        .map(|i| {
            let mut p = match pending.first() {
                Some(m) => (*m).clone(),
                None => {
                    let mut p = Pod::new("", Resources::new());
                    for (resource, taint) in [
                        (l::RESOURCE_GPU, l::TAINT_GPU),
                        (l::RESOURCE_NEURON, l::TAINT_NEURON),
                    ] {
                        if share.get(resource) > 0 {
                            p.tolerations.push(Toleration::exists(taint));
                        }
                    }
                    p
                }
            };
            p.name = format!("{group}.reserved-{i}");
            p.requests = share.clone().with(PODS, 1);
            p.group = Some(GroupRef {
                name: group.to_string(),
                min_member: min as u32,
            });
            p
        })
        .collect()
}

/// Whether the pod is a stand-in made by [`reservations`].
pub fn is_reservation(pod: &str) -> bool {
    pod.rsplit_once(".reserved-")
        .is_some_and(|(_, i)| i.parse::<u32>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::resources::CPU;

    fn spec(min: u32, gpus: Option<i64>) -> PodGroupSpec {
        PodGroupSpec {
            min_resources: gpus.map(|g| Resources::new().with(l::RESOURCE_GPU, g).with(CPU, 8000)),
            ..PodGroupSpec::of_size(min)
        }
    }

    #[test]
    fn members_take_the_groups_size() {
        let mut p = Pod::new("ml/w-0", Resources::new());
        p.group = Some(GroupRef {
            name: "ml/train".into(),
            min_member: 1,
        });
        apply(&mut p, "ml/train", &spec(4, None));
        assert_eq!(p.group.as_ref().unwrap().min_member, 4);
        apply(&mut p, "ml/other", &spec(8, None));
        assert_eq!(
            p.group.unwrap().min_member,
            4,
            "another group's size is not taken"
        );
    }

    #[test]
    fn members_share_the_groups_claims_keep_a_network_block_and_a_rack_is_a_reason() {
        let claim = |name: &str, claim: Option<&str>, template: Option<&str>| ClaimRef {
            name: name.into(),
            claim: claim.map(str::to_string),
            template: template.map(str::to_string),
            generated: None,
            group: None,
        };
        let member = || {
            let mut p = Pod::new("ml/w-0", Resources::new());
            p.group = Some(GroupRef {
                name: "ml/train".into(),
                min_member: 1,
            });
            p.resource_claims = vec![
                claim("gpu", None, Some("one-gpu")),
                claim("own", None, Some("one-gpu")),
                claim("nic", None, Some("other")),
            ];
            p
        };
        let mut group = spec(4, None);
        group.claims = vec![
            claim("gpu", None, Some("one-gpu")),
            claim("nic", None, Some("efa")),
        ];
        group.topology = vec![l::ZONE.into()];
        let mut p = member();
        apply(&mut p, "ml/train", &group);
        let groups: Vec<Option<&str>> = p
            .resource_claims
            .iter()
            .map(|c| c.group.as_deref())
            .collect();
        assert_eq!(
            groups,
            [Some("ml/train"), None, None],
            "only an entry equal to the group's (name and template) is the group's"
        );
        assert!(p.not_placeable.is_empty(), "one zone is what a gang gets");

        group.claims[0].generated = Some("train-gpu-x7k2p".into());
        group.topology = vec!["topology.k8s.aws/network-node-layer-3".into()];
        let mut p = member();
        apply(&mut p, "ml/train", &group);
        assert_eq!(
            p.resource_claims[0].claim.as_deref(),
            Some("train-gpu-x7k2p")
        );
        assert_eq!(p.resource_claims[0].group, None, "the made claim is named");
        assert!(p.not_placeable.is_empty(), "{:?}", p.not_placeable);
        assert_eq!(
            p.network_block.as_deref(),
            Some("topology.k8s.aws/network-node-layer-3")
        );
        assert_eq!(
            p.affinity.terms,
            [vec![Requirement {
                key: l::NETWORK_LAYERS.into(),
                operator: Operator::Gt,
                values: vec!["2".into()],
            }]],
            "only types EC2 reports at least three layers for"
        );

        group.topology = vec!["topology.kubernetes.io/rack".into()];
        let mut p = member();
        apply(&mut p, "ml/train", &group);
        assert_eq!(p.network_block, None);
        assert_eq!(p.not_placeable.len(), 1);
        assert!(
            p.not_placeable[0].contains("topology.kubernetes.io/rack"),
            "{:?}",
            p.not_placeable
        );

        let mut other = member();
        apply(&mut other, "ml/other", &group);
        assert_eq!(other, member(), "another group's object changes nothing");
    }

    #[test]
    fn a_group_missing_members_reserves_their_share_of_its_min_resources() {
        let mut first = Pod::new("ml/w-0", Resources::new().with(l::RESOURCE_GPU, 2));
        first.tolerations.push(Toleration::exists("team"));
        let r = reservations("ml/train", &spec(4, Some(8)), &[&first], 1, 3);
        let names: Vec<&str> = r.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "ml/train.reserved-1",
                "ml/train.reserved-2",
                "ml/train.reserved-3"
            ]
        );
        for p in &r {
            assert_eq!(p.requests.get(l::RESOURCE_GPU), 2);
            assert_eq!(p.requests.get(CPU), 2000);
            assert_eq!(p.requests.get(PODS), 1);
            assert_eq!(p.group.as_ref().unwrap().min_member, 4);
            assert_eq!(p.tolerations, first.tolerations, "the member's constraints");
            assert!(is_reservation(&p.name));
        }
        assert!(!is_reservation("ml/w-0"));
    }

    #[test]
    fn no_reservation_without_min_resources_or_once_every_member_exists() {
        assert!(reservations("ml/train", &spec(4, None), &[], 0, 10).is_empty());
        assert!(reservations("ml/train", &spec(4, Some(8)), &[], 4, 10).is_empty());
        let alone = reservations("ml/train", &spec(2, Some(3)), &[], 0, 10);
        assert_eq!(alone.len(), 2);
        assert_eq!(alone[0].requests.get(l::RESOURCE_GPU), 2, "rounded up");
        assert_eq!(alone[0].tolerations, [Toleration::exists(l::TAINT_GPU)]);
    }

    #[test]
    fn a_group_missing_more_members_than_there_is_room_for_gets_no_stand_ins() {
        // minMember 2^31 - 1: nothing is allocated for it.
        let huge = spec(i32::MAX as u32, Some(8));
        assert!(reservations("ml/huge", &huge, &[], 0, 2000).is_empty());
        assert!(reservations("ml/train", &spec(4, Some(8)), &[], 1, 2).is_empty());
        assert_eq!(
            reservations("ml/train", &spec(4, Some(8)), &[], 1, 3).len(),
            3
        );
    }
}
