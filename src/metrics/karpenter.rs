//! The series that port Karpenter's: the same suffixes and labels under our
//! prefix (`quartermaster_nodeclaims_created_total` for
//! `karpenter_nodeclaims_created_total`, ...), so that a Karpenter dashboard
//! or alert carries over by renaming the prefix, and both controllers can
//! run in one cluster without their series colliding. The table of what
//! maps to what, and where the labels differ, is in docs/operating.md
//! ("Karpenter's metrics").

use super::FloatGauge;
use crate::api::nodepool::LIMIT_COST_PER_HOUR;
use crate::api::{NodeClaim, NodePool};
use crate::catalog::CapacityType;
use crate::cluster::resources::{Resources, CPU};
use crate::core::{ClaimRequest, DisruptionDecision, DisruptionReason};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of `nodeclaims_created`: Karpenter's `reason` and `nodepool`,
/// and the capacity type.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreatedLabels {
    /// `provisioned` (pending pods), `prewarm` (a pre-warm window), or the
    /// reason of the disruption the claim replaces a node for (`drifted`,
    /// `underutilized`), as Karpenter labels its replacements.
    pub reason: String,
    /// NodePool name.
    pub nodepool: String,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: String,
}

/// Labels of `nodeclaims_terminated`: Karpenter's.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TerminatedLabels {
    /// NodePool name.
    pub nodepool: String,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: String,
    /// The node's `topology.kubernetes.io/zone`.
    pub zone: String,
}

/// Labels of `nodeclaims_disrupted`: Karpenter's.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisruptedLabels {
    /// [`DisruptionReason::name`]: `empty`, `underutilized`, `drifted`,
    /// `spot_interrupted`, `rebalance_recommendation`,
    /// `instance_terminated`, `gang_launch_failed`.
    pub reason: String,
    /// NodePool name.
    pub nodepool: String,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: String,
}

/// Labels of `nodepools_usage` and `nodepools_limit`: Karpenter's.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// NodePool name.
    pub nodepool: String,
    /// The resource, lowercase with `_` for `-` as Karpenter writes it
    /// (`cpu`, `memory`, `nvidia.com/gpu`, `ephemeral_storage`, `nodes`),
    /// and `cost_per_hour` for our `costPerHour` limit.
    pub resource_type: String,
}

/// Labels of `voluntary_disruption_decisions`: Karpenter's.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `delete` (no replacement) or `replace`.
    pub decision: String,
    /// `empty`, `underutilized` or `drifted`.
    pub reason: String,
    /// `empty`, `single` (one node at a time, as every underutilized
    /// decision here is), or empty for drift, as Karpenter has them.
    pub consolidation_type: String,
}

/// The ported series.
#[derive(Debug, Default)]
pub struct KarpenterMetrics {
    /// NodeClaims created, by reason, pool and capacity type.
    pub nodeclaims_created: Family<CreatedLabels, Counter>,
    /// NodeClaims whose instance was terminated and finalizer removed.
    pub nodeclaims_terminated: Family<TerminatedLabels, Counter>,
    /// NodeClaims the core deleted, by why.
    pub nodeclaims_disrupted: Family<DisruptedLabels, Counter>,
    /// What each pool's launched nodes hold (what counts against its
    /// limits), cpu in cores, memory in bytes.
    pub nodepools_usage: Family<ResourceLabels, FloatGauge>,
    /// Each pool's `spec.limits`, in the same units.
    pub nodepools_limit: Family<ResourceLabels, FloatGauge>,
    /// Voluntary disruptions started (consolidation, drift).
    pub disruption_decisions: Family<DecisionLabels, Counter>,
}

impl KarpenterMetrics {
    /// Registers the families in `r` (the registry under our prefix).
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "nodeclaims_created",
            "NodeClaims created, by reason, pool and capacity type (Karpenter's nodeclaims_created_total)",
            self.nodeclaims_created.clone(),
        );
        r.register(
            "nodeclaims_terminated",
            "NodeClaims terminated, by pool, capacity type and zone (Karpenter's nodeclaims_terminated_total)",
            self.nodeclaims_terminated.clone(),
        );
        r.register(
            "nodeclaims_disrupted",
            "NodeClaims deleted by a disruption decision, by reason, pool and capacity type (Karpenter's nodeclaims_disrupted_total)",
            self.nodeclaims_disrupted.clone(),
        );
        r.register(
            "nodepools_usage",
            "Resources of each pool's launched nodes, by resource type (Karpenter's nodepools_usage)",
            self.nodepools_usage.clone(),
        );
        r.register(
            "nodepools_limit",
            "Each pool's limits, by resource type (Karpenter's nodepools_limit)",
            self.nodepools_limit.clone(),
        );
        r.register(
            "voluntary_disruption_decisions",
            "Voluntary disruptions started, by decision, reason and consolidation type (Karpenter's voluntary_disruption_decisions_total)",
            self.disruption_decisions.clone(),
        );
    }

    /// Counts a created claim: its reason is the disruption it replaces a
    /// node for, when one of `disruptions` (this round's) lists it.
    pub fn created(&self, req: &ClaimRequest, disruptions: &[DisruptionDecision]) {
        self.nodeclaims_created
            .get_or_create(&CreatedLabels {
                reason: launch_reason(req, disruptions).to_string(),
                nodepool: req.nodepool.clone(),
                capacity_type: req.offering.capacity_type.as_str().to_string(),
            })
            .inc();
    }

    /// Counts a claim whose instance is gone and finalizer removed.
    pub fn terminated(&self, claim: &NodeClaim) {
        let zone = claim
            .spec
            .labels
            .get(crate::api::labels::ZONE)
            .unwrap_or(&claim.spec.zone);
        self.nodeclaims_terminated
            .get_or_create(&TerminatedLabels {
                nodepool: claim.spec.node_pool.clone(),
                capacity_type: claim.spec.capacity_type.as_str().to_string(),
                zone: zone.clone(),
            })
            .inc();
    }

    /// Counts a claim the core deleted for `reason`.
    pub fn disrupted(&self, nodepool: &str, capacity_type: CapacityType, reason: DisruptionReason) {
        self.nodeclaims_disrupted
            .get_or_create(&DisruptedLabels {
                reason: reason.name().to_string(),
                nodepool: nodepool.to_string(),
                capacity_type: capacity_type.as_str().to_string(),
            })
            .inc();
    }

    /// Counts the voluntary disruptions the core started (an expiry is
    /// forceful, as in Karpenter, and not counted here; its replacements
    /// are created with reason `expired`).
    pub fn decided(&self, disruptions: &[DisruptionDecision]) {
        for d in disruptions
            .iter()
            .filter(|d| d.reason != DisruptionReason::Expired)
        {
            let consolidation_type = match d.reason {
                DisruptionReason::Empty => "empty",
                DisruptionReason::Underutilized => "single",
                _ => "",
            };
            let decision = if d.replacements.is_empty() {
                "delete"
            } else {
                "replace"
            };
            self.disruption_decisions
                .get_or_create(&DecisionLabels {
                    decision: decision.to_string(),
                    reason: d.reason.name().to_string(),
                    consolidation_type: consolidation_type.to_string(),
                })
                .inc();
        }
    }

    /// Sets each pool's usage and limits; pools no longer there lose
    /// their series. `usage` is each pool with its nodes' resources (in
    /// canonical units), node count and USD per hour.
    pub fn set_pools<'a>(&self, usage: impl IntoIterator<Item = PoolUsageOf<'a>>) {
        self.nodepools_usage.clear();
        self.nodepools_limit.clear();
        for (pool, resources, nodes, cost_per_hour) in usage {
            let nodepool = pool.metadata.name.clone().unwrap_or_default();
            let set = |family: &Family<ResourceLabels, FloatGauge>, key: &str, value: f64| {
                family
                    .get_or_create(&ResourceLabels {
                        nodepool: nodepool.clone(),
                        resource_type: resource_type(key),
                    })
                    .set(value);
            };
            for (key, amount) in resources.iter() {
                let value = if key == CPU {
                    amount as f64 / 1000.0
                } else {
                    amount as f64
                };
                set(&self.nodepools_usage, key, value);
            }
            set(&self.nodepools_usage, "nodes", nodes as f64);
            set(&self.nodepools_usage, LIMIT_COST_PER_HOUR, cost_per_hour);
            for key in pool.spec.limits.keys() {
                // A limit that is not a number is the pool's status's to
                // report; it has no value here.
                if let Ok(Some(value)) = pool.spec.limit(key) {
                    set(&self.nodepools_limit, key, value);
                }
            }
        }
    }
}

/// A pool with what its launched nodes add up to: resources (canonical
/// units), node count, USD per hour.
pub type PoolUsageOf<'a> = (&'a NodePool, &'a Resources, usize, f64);

/// Why a claim was created, in Karpenter's words where it has them.
pub fn launch_reason(req: &ClaimRequest, disruptions: &[DisruptionDecision]) -> &'static str {
    if let Some(d) = disruptions
        .iter()
        .find(|d| d.replacements.contains(&req.claim))
    {
        return d.reason.name();
    }
    if req.prewarm_window.is_some() {
        "prewarm"
    } else {
        "provisioned"
    }
}

/// A resource name as Karpenter labels it (lowercase, `_` for `-`), and
/// our `costPerHour` limit as `cost_per_hour`.
fn resource_type(key: &str) -> String {
    if key == LIMIT_COST_PER_HOUR {
        return "cost_per_hour".into();
    }
    key.to_lowercase().replace('-', "_")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::OfferingKey;
    use crate::metrics::{encode, Metrics};
    use serde_json::json;

    fn scrape(f: impl FnOnce(&KarpenterMetrics)) -> String {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        f(&m.karpenter);
        encode(&registry)
    }

    fn has(text: &str, line: &str) {
        assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
    }

    fn request(claim: &str, capacity_type: CapacityType) -> ClaimRequest {
        ClaimRequest {
            cluster_placement: false,
            claim: claim.into(),
            nodepool: "gpu".into(),
            offering: OfferingKey {
                instance_type: "g6.xlarge".into(),
                zone: "use1-az4".into(),
                capacity_type,
            },
            price_per_hour: 0.5,
            pods: vec!["ml/train-0".into()],
            prewarm_window: None,
            reservation: None,
        }
    }

    fn decision(
        reason: DisruptionReason,
        claim: &str,
        replacements: &[&str],
    ) -> DisruptionDecision {
        DisruptionDecision {
            reason,
            claims: vec![claim.into()],
            replacements: replacements.iter().map(|r| r.to_string()).collect(),
        }
    }

    #[test]
    fn a_claim_is_counted_as_created_for_pods_a_prewarm_window_or_the_disruption_it_replaces_a_node_for(
    ) {
        let drift = [decision(DisruptionReason::Drifted, "old", &["new"])];
        let text = scrape(|m| {
            m.created(&request("a", CapacityType::Spot), &drift);
            m.created(
                &ClaimRequest {
                    prewarm_window: Some("mornings".into()),
                    pods: vec![],
                    ..request("b", CapacityType::OnDemand)
                },
                &drift,
            );
            m.created(&request("new", CapacityType::Spot), &drift);
        });
        for line in [
            r#"quartermaster_nodeclaims_created_total{reason="provisioned",nodepool="gpu",capacity_type="spot"} 1"#,
            r#"quartermaster_nodeclaims_created_total{reason="prewarm",nodepool="gpu",capacity_type="on-demand"} 1"#,
            r#"quartermaster_nodeclaims_created_total{reason="drifted",nodepool="gpu",capacity_type="spot"} 1"#,
        ] {
            has(&text, line);
        }
    }

    #[test]
    fn decisions_are_counted_in_karpenter_s_words() {
        let text = scrape(|m| {
            m.decided(&[
                DisruptionDecision {
                    reason: DisruptionReason::Empty,
                    claims: vec!["a".into(), "b".into()],
                    replacements: vec![],
                },
                decision(DisruptionReason::Underutilized, "c", &["c2"]),
                decision(DisruptionReason::Underutilized, "d", &[]),
                decision(DisruptionReason::Drifted, "e", &["e2"]),
            ]);
        });
        for line in [
            r#"quartermaster_voluntary_disruption_decisions_total{decision="delete",reason="empty",consolidation_type="empty"} 1"#,
            r#"quartermaster_voluntary_disruption_decisions_total{decision="replace",reason="underutilized",consolidation_type="single"} 1"#,
            r#"quartermaster_voluntary_disruption_decisions_total{decision="delete",reason="underutilized",consolidation_type="single"} 1"#,
            r#"quartermaster_voluntary_disruption_decisions_total{decision="replace",reason="drifted",consolidation_type=""} 1"#,
        ] {
            has(&text, line);
        }
    }

    #[test]
    fn disrupted_and_terminated_claims_are_counted_by_pool_capacity_type_and_reason_or_zone() {
        let claim = |labels: serde_json::Value| -> NodeClaim {
            serde_json::from_value(json!({
                "apiVersion": "quartermaster.dev/v1alpha1",
                "kind": "NodeClaim",
                "metadata": {"name": "gpu-abc"},
                "spec": {
                    "nodePool": "gpu", "instanceType": "g6.xlarge", "zone": "use1-az4",
                    "capacityType": "spot", "pricePerHour": 0.4, "labels": labels
                }
            }))
            .unwrap()
        };
        let text = scrape(|m| {
            m.disrupted("gpu", CapacityType::Spot, DisruptionReason::Interrupted);
            m.disrupted("gpu", CapacityType::Spot, DisruptionReason::Interrupted);
            m.terminated(&claim(json!({"topology.kubernetes.io/zone": "us-east-1a"})));
            m.terminated(&claim(json!({})));
        });
        has(
            &text,
            r#"quartermaster_nodeclaims_disrupted_total{reason="spot_interrupted",nodepool="gpu",capacity_type="spot"} 2"#,
        );
        has(
            &text,
            r#"quartermaster_nodeclaims_terminated_total{nodepool="gpu",capacity_type="spot",zone="us-east-1a"} 1"#,
        );
        has(
            &text,
            r#"quartermaster_nodeclaims_terminated_total{nodepool="gpu",capacity_type="spot",zone="use1-az4"} 1"#,
        );
    }

    #[test]
    fn pool_usage_and_limits_are_in_karpenter_s_units_and_a_gone_pool_loses_its_series() {
        let pool: NodePool = serde_json::from_value(json!({
            "apiVersion": "quartermaster.dev/v1alpha1",
            "kind": "NodePool",
            "metadata": {"name": "gpu"},
            "spec": {"limits": {
                "cpu": "1500m", "memory": "1Ti", "nvidia.com/gpu": 16,
                "nodes": 8, "costPerHour": "400.5"
            }}
        }))
        .unwrap();
        let used = Resources::parse([
            ("cpu", "7500m"),
            ("memory", "32Gi"),
            ("nvidia.com/gpu", "2"),
            ("ephemeral-storage", "1Ki"),
        ])
        .unwrap();
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        m.karpenter.set_pools([(&pool, &used, 2, 1.25)]);
        let text = encode(&registry);
        for line in [
            r#"quartermaster_nodepools_usage{nodepool="gpu",resource_type="cpu"} 7.5"#,
            r#"quartermaster_nodepools_usage{nodepool="gpu",resource_type="memory"} 34359738368.0"#,
            r#"quartermaster_nodepools_usage{nodepool="gpu",resource_type="nvidia.com/gpu"} 2.0"#,
            r#"quartermaster_nodepools_usage{nodepool="gpu",resource_type="ephemeral_storage"} 1024.0"#,
            r#"quartermaster_nodepools_usage{nodepool="gpu",resource_type="nodes"} 2.0"#,
            r#"quartermaster_nodepools_usage{nodepool="gpu",resource_type="cost_per_hour"} 1.25"#,
            r#"quartermaster_nodepools_limit{nodepool="gpu",resource_type="cpu"} 1.5"#,
            r#"quartermaster_nodepools_limit{nodepool="gpu",resource_type="memory"} 1099511627776.0"#,
            r#"quartermaster_nodepools_limit{nodepool="gpu",resource_type="nvidia.com/gpu"} 16.0"#,
            r#"quartermaster_nodepools_limit{nodepool="gpu",resource_type="nodes"} 8.0"#,
            r#"quartermaster_nodepools_limit{nodepool="gpu",resource_type="cost_per_hour"} 400.5"#,
        ] {
            has(&text, line);
        }
        m.karpenter.set_pools([]);
        let text = encode(&registry);
        assert!(!text.contains(r#"nodepool="gpu""#), "{text}");
    }
}
