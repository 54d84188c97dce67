//! Node objects for the simulated cloud (`--cloud simulated`), as
//! Karpenter's kwok provider makes them: for each instance the cloud
//! reports, a Node appears some seconds after the launch (name, provider ID,
//! the claim's labels, taints and startup taints, capacity without
//! accelerators, not Ready), then turns Ready with its GPUs advertised
//! (the device plugin), and goes away when the instance is terminated. So
//! anyone can try the controller on any cluster without AWS; the nodes run
//! nothing (a kubelet never heartbeats them).
//!
//! [`plan`] is pure (what to create, mark ready, delete); [`apply`] writes.

use super::kube_api::KubeApi;
use super::snapshot::{is_accelerator, NodeInfo};
use crate::api::labels as l;
use crate::api::NodeClaim;
use crate::cloud::{instance_id_of, Instance};
use crate::core::Time;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint as KubeTaint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// Label on every Node this module creates; only such nodes are deleted.
pub const SIMULATED_LABEL: &str = "quartermaster.dev/simulated";

/// How long simulated nodes take.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// From launch to the Node object appearing (boot + kubelet).
    pub register_after: Duration,
    /// From launch to Ready with accelerators advertised.
    pub ready_after: Duration,
}

impl Default for Timing {
    fn default() -> Timing {
        Timing {
            register_after: Duration::from_secs(20),
            ready_after: Duration::from_secs(45),
        }
    }
}

/// One write to make.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Create this Node (not Ready yet).
    Create(Box<Node>),
    /// Mark the node Ready, publishing this status (allocatable with
    /// accelerators).
    Ready {
        /// Node name.
        name: String,
        /// The status to merge.
        status: serde_json::Value,
    },
    /// Delete the node: its instance is gone.
    Delete(String),
}

/// The Node name of an instance.
pub fn node_name(instance: &Instance) -> String {
    format!(
        "sim-{}",
        instance_id_of(&instance.provider_id).to_lowercase()
    )
}

fn quantities(claim: &NodeClaim, accelerators: bool) -> BTreeMap<String, Quantity> {
    claim
        .spec
        .resources
        .iter()
        .filter(|(k, _)| accelerators || !is_accelerator(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn ready_condition(ready: bool, now: Time) -> serde_json::Value {
    json!({
        "type": "Ready",
        "status": if ready { "True" } else { "False" },
        "reason": if ready { "KubeletReady" } else { "KubeletNotReady" },
        "message": if ready { "simulated node is ready" } else { "simulated node is booting" },
        "lastHeartbeatTime": now.to_rfc3339(),
        "lastTransitionTime": now.to_rfc3339(),
    })
}

/// The Node a booted instance registers as.
pub fn node_for(instance: &Instance, claim: &NodeClaim) -> Node {
    let name = node_name(instance);
    let mut labels = claim.spec.labels.clone();
    labels.insert(l::HOSTNAME.into(), name.clone());
    labels.insert(SIMULATED_LABEL.into(), "true".into());
    labels.insert(
        l::INSTANCE_TYPE.into(),
        instance.offering.instance_type.clone(),
    );
    labels.insert(l::ZONE_ID.into(), instance.offering.zone.clone());
    // The simulated account names its zones by the default rule, and its
    // "cloud-controller-manager" labels the node with the name.
    let region = labels.get(l::REGION).cloned().unwrap_or_default();
    labels.insert(
        l::ZONE.into(),
        crate::catalog::ZoneNames::new().name_of(&region, &instance.offering.zone),
    );
    labels.insert(
        l::CAPACITY_TYPE.into(),
        instance.offering.capacity_type.as_str().into(),
    );
    let taints: Vec<KubeTaint> = claim
        .spec
        .taints
        .iter()
        .chain(&claim.spec.startup_taints)
        .map(|t| KubeTaint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.as_str().into(),
            time_added: None,
        })
        .collect();
    let without = quantities(claim, false);
    Node {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(instance.provider_id.clone()),
            taints: Some(taints),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(quantities(claim, true)),
            allocatable: Some(without),
            ..NodeStatus::default()
        }),
    }
}

fn age_over(instance: &Instance, now: Time, d: Duration) -> bool {
    (now - instance.launched_at)
        .to_std()
        .is_ok_and(|age| age >= d)
}

/// What to write so that the simulated nodes match the instances: create
/// the Node of each alive instance with a claim once it has booted, mark it
/// Ready once it is old enough, delete simulated Nodes whose instance is not
/// alive any more.
pub fn plan(
    instances: &[Instance],
    claims: &BTreeMap<String, NodeClaim>,
    nodes: &BTreeMap<String, NodeInfo>,
    timing: Timing,
    now: Time,
) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut alive = HashSet::new();
    for i in instances.iter().filter(|i| i.state.is_alive()) {
        let name = node_name(i);
        alive.insert(name.clone());
        let Some(claim) = claims.get(&i.claim) else {
            continue;
        };
        match nodes.get(&name) {
            None if age_over(i, now, timing.register_after) => {
                ops.push(Op::Create(Box::new(node_for(i, claim))))
            }
            Some(n) if !n.ready && age_over(i, now, timing.ready_after) => ops.push(Op::Ready {
                name,
                status: json!({
                    "capacity": quantities(claim, true),
                    "allocatable": quantities(claim, true),
                    "conditions": [ready_condition(true, now)],
                }),
            }),
            _ => {}
        }
    }
    for n in nodes.values() {
        if n.labels.get(SIMULATED_LABEL).map(String::as_str) == Some("true")
            && !alive.contains(&n.name)
        {
            ops.push(Op::Delete(n.name.clone()));
        }
    }
    ops
}

/// Applies the writes; one failure does not stop the others (each is
/// logged, and the next round plans it again).
pub async fn apply(api: &KubeApi, ops: Vec<Op>, now: Time) {
    for op in ops {
        let result = match &op {
            Op::Create(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                let created = api.create_node(node).await;
                // The API server ignores status on create: set it apart.
                match created {
                    Ok(()) => {
                        let status = json!({
                            "capacity": node.status.as_ref().and_then(|s| s.capacity.clone()),
                            "allocatable": node.status.as_ref().and_then(|s| s.allocatable.clone()),
                            "conditions": [ready_condition(false, now)],
                        });
                        api.patch_node_status(&name, &status).await
                    }
                    Err(e) => Err(e),
                }
            }
            Op::Ready { name, status } => api.patch_node_status(name, status).await,
            Op::Delete(name) => api.delete_node(name).await,
        };
        match result {
            Ok(()) => tracing::info!(?op, "simulated node updated"),
            Err(e) => tracing::warn!(?op, error = %e, "simulated node update failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NodeClaimSpec, Taint, TaintEffect};
    use crate::catalog::CapacityType;
    use crate::cloud::InstanceState;
    use crate::core::OfferingKey;
    use chrono::TimeZone;

    fn t(s: i64) -> Time {
        chrono::Utc.timestamp_opt(1_767_571_200 + s, 0).unwrap()
    }

    fn claim() -> NodeClaim {
        let mut c = NodeClaim::new(
            "gpu-1",
            NodeClaimSpec {
                node_pool: "gpu".into(),
                instance_type: "g5.xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::Spot,
                price_per_hour: 0.4,
                resources: [
                    ("cpu".to_string(), Quantity("3920m".into())),
                    (l::RESOURCE_GPU.to_string(), Quantity("1".into())),
                ]
                .into(),
                labels: [(l::NODEPOOL.to_string(), "gpu".to_string())].into(),
                taints: vec![Taint::new(l::TAINT_GPU, "", TaintEffect::NoSchedule)],
                startup_taints: vec![Taint::new(
                    l::TAINT_UNREGISTERED,
                    "",
                    TaintEffect::NoSchedule,
                )],
                termination_grace_period: None,
                expire_after: None,
            },
        );
        c.metadata.finalizers = Some(vec![l::FINALIZER.into()]);
        c
    }

    fn instance(state: InstanceState) -> Instance {
        Instance {
            claim: "gpu-1".into(),
            provider_id: "aws:///use1-az1/i-00000000000000001".into(),
            offering: OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone: "use1-az1".into(),
                capacity_type: CapacityType::Spot,
            },
            price_per_hour: 0.4,
            launched_at: t(0),
            state,
        }
    }

    #[test]
    fn a_booted_instance_gets_a_tainted_node_then_a_ready_one_with_its_gpu_then_none() {
        let claims = BTreeMap::from([("gpu-1".to_string(), claim())]);
        let running = [instance(InstanceState::Running)];
        let timing = Timing::default();
        // Still booting: nothing.
        assert!(plan(&running, &claims, &BTreeMap::new(), timing, t(5)).is_empty());
        let ops = plan(&running, &claims, &BTreeMap::new(), timing, t(25));
        let [Op::Create(node)] = &ops[..] else {
            panic!("{ops:?}")
        };
        let spec = node.spec.as_ref().unwrap();
        assert_eq!(
            spec.provider_id.as_deref(),
            Some("aws:///use1-az1/i-00000000000000001")
        );
        let taints: Vec<&str> = spec
            .taints
            .iter()
            .flatten()
            .map(|t| t.key.as_str())
            .collect();
        assert_eq!(taints, [l::TAINT_GPU, l::TAINT_UNREGISTERED]);
        let status = node.status.as_ref().unwrap();
        assert!(!status
            .allocatable
            .as_ref()
            .unwrap()
            .contains_key(l::RESOURCE_GPU));
        assert_eq!(status.capacity.as_ref().unwrap()[l::RESOURCE_GPU].0, "1");
        // Registered, not Ready: becomes Ready with the GPU once old enough.
        let info = NodeInfo::from_k8s(node);
        let nodes = BTreeMap::from([(info.name.clone(), info)]);
        assert!(plan(&running, &claims, &nodes, timing, t(30)).is_empty());
        let ops = plan(&running, &claims, &nodes, timing, t(50));
        let [Op::Ready { status, .. }] = &ops[..] else {
            panic!("{ops:?}")
        };
        assert_eq!(status["allocatable"][l::RESOURCE_GPU], "1");
        assert_eq!(status["conditions"][0]["status"], "True");
        // Terminated: the node goes.
        let gone = [instance(InstanceState::ShuttingDown)];
        assert_eq!(
            plan(&gone, &claims, &nodes, timing, t(60)),
            [Op::Delete("sim-i-00000000000000001".into())]
        );
    }

    #[test]
    fn nodes_not_made_here_are_never_deleted() {
        let mut other = NodeInfo::from_k8s(&Node {
            metadata: ObjectMeta {
                name: Some("ip-10-0-0-1".into()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        });
        other.labels.insert(l::NODEPOOL.into(), "gpu".into());
        let nodes = BTreeMap::from([(other.name.clone(), other)]);
        assert!(plan(&[], &BTreeMap::new(), &nodes, Timing::default(), t(0)).is_empty());
    }
}
