//! Replacing the nodes repair gives up on ([`crate::core::repair`] decides
//! which, within the pools' budgets and breakers): each gets capacity for
//! the pods the other nodes cannot take, launched first, with the node
//! itself still counted against its pool's limits; once that is ready the
//! node is removed the way consolidation removes any node
//! ([`Consolidation::progress`]). Where no replacement can be staged (the
//! pool's limits or its reserved capacity are used up, the pool is held)
//! the node is drained and terminated first and its pods are planned
//! again, rather than kept broken. A node that no longer works has no
//! running pods to ask for a checkpoint, and its `do-not-disrupt` pods
//! hold nothing.

use super::super::interruption::pool_of;
use super::{Consolidation, Disrupting, Round};
use crate::core::{Action, DisruptionReason};

impl Consolidation {
    /// Starts replacing the nodes repair hands over this round.
    pub(super) fn replace_unhealthy(&mut self, r: &Round, out: &mut Vec<Action>) {
        for order in r.ctx.repairs {
            let Some(n) = r.node(&order.claim) else {
                continue;
            };
            if self.disrupting.contains_key(&n.claim) || r.ctx.interruptions.is_handling(&n.claim) {
                continue;
            }
            let launches = pool_of(r.world, n)
                .and_then(|pool| self.replacements_for(r, n, pool, true))
                .unwrap_or_default();
            let removal = Disrupting {
                broken: !order.works,
                ..Disrupting::new(DisruptionReason::Unhealthy)
            };
            self.replace_with(r, n, launches, removal, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::interruption::fixtures::*;
    use super::super::super::interruption::Interruptions;
    use super::super::Context;
    use super::*;
    use crate::api::NodePool;
    use crate::catalog::CapacityType;
    use crate::core::repair::Replacement;

    fn step(c: &mut Consolidation, f: &Fixture, at: i64, repairs: &[Replacement]) -> Vec<Action> {
        let interruptions = Interruptions::default();
        let ctx = Context {
            repairs,
            ..Context::new(&interruptions)
        };
        c.decide_in(&f.world(), t(at), &ctx)
    }

    fn order(claim: &str, works: bool) -> Vec<Replacement> {
        vec![Replacement {
            claim: claim.into(),
            works,
        }]
    }

    fn kinds(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .map(|a| match a {
                Action::Launch(c) => format!("launch for {:?}", c.pods),
                Action::Cordon { claim, .. } => format!("cordon {claim}"),
                Action::RequestCheckpoint { pod, .. } => format!("checkpoint {pod}"),
                Action::Evict { pod, .. } => format!("evict {pod}"),
                Action::Delete { claim, reason } => format!("delete {claim} ({reason})"),
                Action::Reboot { claim, .. } => format!("reboot {claim}"),
                Action::Uncordon { claim } => format!("uncordon {claim}"),
            })
            .collect()
    }

    /// Two full nodes (a checkpointing GPU pod each), the pool may not be
    /// consolidated, g5.xlarge on-demand at $1/h for sale.
    fn two_busy(pool: NodePool) -> Fixture {
        let mut f = Fixture::new([
            node("n1").pods([pod("a").gpus(1).checkpoints()]),
            node("n2").pods([pod("b").gpus(1)]),
        ]);
        f.pools = vec![pool];
        f.catalog = super::super::tests::catalog(&[(
            "g5.xlarge",
            "use1-az1",
            CapacityType::OnDemand,
            1.0,
            None,
        )]);
        f
    }

    fn never_consolidated(edit: impl FnOnce(&mut crate::api::NodePoolSpec)) -> NodePool {
        pool_with("gpu", |s| {
            s.disruption.consolidate_after = "Never".into();
            edit(s);
        })
    }

    #[test]
    fn an_unhealthy_node_gets_its_replacement_first_then_a_checkpoint_first_drain() {
        let mut f = two_busy(never_consolidated(|_| {}));
        let mut c = Consolidation::default();
        let first = step(&mut c, &f, 0, &order("n1", true));
        assert_eq!(kinds(&first), ["launch for [\"a\"]"]);
        let name = launches(&first)[0].claim.clone();
        assert_eq!(c.decisions()[0].reason, DisruptionReason::Unhealthy);
        f.nodes.push(node(&name).not_ready());
        assert_eq!(step(&mut c, &f, 30, &[]), [], "waits for the replacement");
        *f.node_mut(&name) = node(&name);
        assert_eq!(
            kinds(&step(&mut c, &f, 60, &[])),
            ["cordon n1", "checkpoint a"],
            "a running pod checkpoints before it is evicted"
        );
    }

    #[test]
    fn a_limit_bound_pool_drains_its_broken_node_first_and_plans_the_pods_again() {
        // One node's worth of limit: the broken node holds it.
        let mut f = two_busy(never_consolidated(|s| {
            s.limits.insert(
                "nodes".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()),
            );
        }));
        f.node_mut("n1").pods[0].do_not_disrupt = true;
        let mut c = Consolidation::default();
        let first = step(&mut c, &f, 0, &order("n1", false));
        // No launch: cordoned and evicted at once, do-not-disrupt and all,
        // nothing asked of pods that do not run.
        assert_eq!(kinds(&first), ["cordon n1", "evict a"]);
        assert_eq!(
            c.decisions()[0].replacements,
            Vec::<String>::new(),
            "terminated first"
        );
        f.node_mut("n1").pods.clear();
        assert_eq!(kinds(&step(&mut c, &f, 1, &[])), ["delete n1 (unhealthy)"]);
    }

    #[test]
    fn without_a_limit_the_same_broken_node_is_replaced_first() {
        let f = two_busy(never_consolidated(|_| {}));
        let mut c = Consolidation::default();
        let first = step(&mut c, &f, 0, &order("n1", false));
        assert_eq!(launches(&first).len(), 1, "{first:?}");
    }
}
