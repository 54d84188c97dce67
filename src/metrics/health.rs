//! The series of repair (`core::repair`): repairs started by pool,
//! condition and action, repairs held by pool and reason, and each pool's
//! unhealthy nodes (what the breaker counts). Updated by the controller
//! from the core's report of each round (`Core::repairs`).

use crate::api::RepairAction;
use crate::core::repair::{Hold, Repairs};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;

/// Labels of `repairs`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RepairLabels {
    /// NodePool name.
    pub nodepool: String,
    /// The unhealthy condition's type (`AcceleratedHardwareReady`, ...).
    pub condition: String,
    /// `reboot` or `replace`.
    pub action: String,
}

/// Labels of `repairs_held`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HeldLabels {
    /// NodePool name.
    pub nodepool: String,
    /// [`Hold::name`]: `do_not_repair`, `breaker`, `do_not_disrupt`,
    /// `budget`.
    pub reason: String,
}

/// Labels of per-pool health gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolHealthLabels {
    /// NodePool name.
    pub nodepool: String,
}

/// Repair's metrics.
#[derive(Debug, Default)]
pub struct HealthMetrics {
    /// Repairs started, by pool, condition and action.
    pub repairs: Family<RepairLabels, Counter>,
    /// Cloud reboots that failed, by pool.
    pub reboot_failures: Family<PoolHealthLabels, Counter>,
    /// Eligible repairs held at the last round, by pool and reason.
    pub held: Family<HeldLabels, Gauge>,
    /// Ready nodes matching a repair rule at the last round, by pool.
    pub unhealthy_nodes: Family<PoolHealthLabels, Gauge>,
    /// 1 while the breaker holds the pool's repairs.
    pub breaker_open: Family<PoolHealthLabels, Gauge>,
}

impl HealthMetrics {
    /// Registers the series under `registry` (the `quartermaster` prefix).
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "repairs",
            "Repairs of unhealthy nodes started, by pool, condition and action",
            self.repairs.clone(),
        );
        r.register(
            "repair_reboot_failures",
            "Reboots of unhealthy nodes the cloud refused or failed, by pool",
            self.reboot_failures.clone(),
        );
        r.register(
            "repairs_held",
            "Repairs due but held at the last round, by pool and reason",
            self.held.clone(),
        );
        r.register(
            "unhealthy_nodes",
            "Ready nodes matching one of their pool's repair rules, by pool",
            self.unhealthy_nodes.clone(),
        );
        r.register(
            "repair_breaker_open",
            "1 while more of the pool's nodes are unhealthy than maxUnhealthy allows",
            self.breaker_open.clone(),
        );
    }

    /// Counts the round's repairs and sets the gauges from the core's
    /// report; pools and reasons no longer reported read 0.
    pub fn observe(&self, repairs: &Repairs) {
        for d in repairs.decisions() {
            self.repairs
                .get_or_create(&RepairLabels {
                    nodepool: d.nodepool.clone(),
                    condition: d.condition.type_.clone(),
                    action: match d.action {
                        RepairAction::Reboot => "reboot",
                        RepairAction::Replace => "replace",
                    }
                    .into(),
                })
                .inc();
        }
        let mut held: BTreeMap<(String, Hold), i64> = BTreeMap::new();
        for h in repairs.held() {
            *held.entry((h.nodepool.clone(), h.why)).or_default() += 1;
        }
        self.held.clear();
        for ((nodepool, why), n) in held {
            self.held
                .get_or_create(&HeldLabels {
                    nodepool,
                    reason: why.name().into(),
                })
                .set(n);
        }
        self.unhealthy_nodes.clear();
        self.breaker_open.clear();
        for (pool, h) in repairs.pools() {
            let labels = PoolHealthLabels {
                nodepool: pool.clone(),
            };
            self.unhealthy_nodes
                .get_or_create(&labels)
                .set(i64::from(h.unhealthy));
            self.breaker_open
                .get_or_create(&labels)
                .set(i64::from(h.breaker_open()));
        }
    }
}
