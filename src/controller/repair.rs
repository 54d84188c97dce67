//! Carries out and reports the core's repairs (`core::repair`): a
//! `Reboot` action goes to the cloud (`CloudProvider::reboot`, EC2
//! `RebootInstances`) and, once done, is recorded on the NodeClaim as the
//! `Rebooted` condition (the durable memory of the reboot a restarted
//! controller reads back); each repair started and each new hold gets an
//! Event on the NodeClaim, and the round's report updates the metrics.
//! Replacements need nothing here: they are launches, cordons and
//! evictions the executor carries out.

use super::events::{self, Events};
use super::kube_api::KubeApi;
use super::lifecycle::set_condition;
use super::snapshot::ClaimView;
use crate::api::nodeclaim::conditions;
use crate::cloud::CloudProvider;
use crate::core::repair::{Hold, Repairs};
use crate::core::{Action, Time};
use crate::metrics::health::PoolHealthLabels;
use crate::metrics::Metrics;
use kube::ResourceExt;
use std::collections::HashMap;

/// What was last reported per claim, so that a hold that goes on is one
/// Event, not one per round.
#[derive(Debug, Default)]
pub struct RepairReports {
    held: HashMap<String, Hold>,
}

/// What carrying out the round's repairs reads.
pub struct RepairContext<'a, C> {
    /// Kubernetes writes (the `Rebooted` condition).
    pub api: &'a KubeApi,
    /// The cloud that reboots.
    pub cloud: &'a C,
    /// Metrics.
    pub metrics: &'a Metrics,
    /// Events, when published.
    pub events: Option<&'a Events>,
}

impl RepairReports {
    /// Reboots through the cloud what the round's actions ask, records
    /// each reboot on its claim, reports the round's repairs and holds, and
    /// updates the metrics. `views` are the round's claims (their status,
    /// to add the condition to).
    pub async fn carry_out<C: CloudProvider>(
        &mut self,
        ctx: &RepairContext<'_, C>,
        repairs: &Repairs,
        actions: &[Action],
        views: &[ClaimView],
        now: Time,
    ) {
        ctx.metrics.health.observe(repairs);
        let claim_ref = |name: &str| {
            let uid = views
                .iter()
                .find(|v| v.claim.name_any() == name)
                .and_then(|v| v.claim.uid());
            events::node_claim_ref(name, uid.as_deref())
        };
        for action in actions {
            let Action::Reboot { claim, condition } = action else {
                continue;
            };
            let view = views.iter().find(|v| v.claim.name_any() == *claim);
            match ctx.cloud.reboot(claim, now).await {
                Ok(_) => {
                    tracing::info!(%claim, %condition, "rebooted for repair");
                    if let Some(view) = view {
                        record_reboot(ctx.api, view, condition, now).await;
                    }
                    if let Some(ev) = ctx.events {
                        ev.rebooted(&claim_ref(claim), condition).await;
                    }
                }
                Err(error) => {
                    tracing::warn!(%claim, %error, "reboot for repair failed");
                    let nodepool = view
                        .map(|v| v.claim.spec.node_pool.clone())
                        .unwrap_or_default();
                    ctx.metrics
                        .health
                        .reboot_failures
                        .get_or_create(&PoolHealthLabels { nodepool })
                        .inc();
                    if let Some(ev) = ctx.events {
                        ev.reboot_failed(&claim_ref(claim), &error.to_string())
                            .await;
                    }
                }
            }
        }
        for d in repairs.decisions() {
            self.held.remove(&d.claim);
            if d.action == crate::api::RepairAction::Replace {
                tracing::info!(claim = %d.claim, condition = %d.condition, escalated = d.escalated, "replacing unhealthy node");
                if let Some(ev) = ctx.events {
                    ev.unhealthy(&claim_ref(&d.claim), &d.condition.to_string(), d.escalated)
                        .await;
                }
            }
        }
        let mut still = HashMap::new();
        for h in repairs.held() {
            if self.held.get(&h.claim) != Some(&h.why) {
                tracing::info!(claim = %h.claim, condition = %h.condition, why = %h.why, "repair held");
                if let Some(ev) = ctx.events {
                    ev.repair_held(
                        &claim_ref(&h.claim),
                        &h.condition.to_string(),
                        &h.why.to_string(),
                    )
                    .await;
                }
            }
            still.insert(h.claim.clone(), h.why);
        }
        self.held = still;
    }
}

/// Writes the `Rebooted` condition on the claim (its reason the unhealthy
/// condition's type, its transition time the reboot's); a failed write is
/// logged: the core remembers the reboot until the controller restarts.
async fn record_reboot(api: &KubeApi, view: &ClaimView, condition: &str, now: Time) {
    let name = view.claim.name_any();
    // A condition reason is CamelCase: the type's letters and digits (a
    // type like `example.com/GpuDown` keeps `examplecomGpuDown`).
    let reason: String = condition
        .split('=')
        .next()
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .skip_while(|c| !c.is_ascii_alphabetic())
        .collect();
    let reason = if reason.is_empty() {
        "Unhealthy"
    } else {
        &reason
    };
    let message = format!("rebooted for repair: {condition}");
    // Applied to the claim's current status: another writer's condition is
    // kept.
    let written = api
        .update_node_claim_status(&view.claim, |status| {
            // A new reboot is a new transition, whatever the condition said.
            status
                .conditions
                .retain(|c| c.type_ != conditions::REBOOTED);
            set_condition(status, conditions::REBOOTED, true, reason, &message, now);
            true
        })
        .await;
    if let Err(error) = written {
        tracing::warn!(claim = %name, %error, "failed to record the reboot on the NodeClaim");
    }
}
