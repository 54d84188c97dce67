//! Replacing expired nodes: a node older than its `expireAfter` (Karpenter's
//! field, copied from the pool's template onto the NodeClaim at creation, so
//! that a change of the pool's applies to new nodes only) is replaced the
//! way a drifted one is (new node first where the pool allows, then cordon,
//! checkpoint requests to opted-in pods, evictions within PDBs, deletion
//! once empty), with Karpenter v1's rules for a forceful disruption:
//!
//! - disruption budgets do not hold it back (it still counts against them
//!   for the voluntary disruptions of its pool while it drains);
//! - `do-not-disrupt` on the node does not hold it back, and a
//!   `do-not-disrupt` pod is not evicted, but only until the node's
//!   `terminationGracePeriod` has passed since it expired: then the claim is
//!   deleted whatever is left on it, and its termination evicts the rest
//!   and, that grace period after the deletion, deletes them. Without
//!   `terminationGracePeriod` such a pod (or a PDB that allows nothing)
//!   holds the node;
//! - a replacement that cannot be planned (a limit, a pool not Ready) does
//!   not hold it back either: the node drains, and its pods are pending
//!   like any others.
//!
//! A node someone cordoned (not our disruption taint), under interruption
//! handling or not ready yet is left until that passes. Rules:
//! `docs/disruption.md`, "Expiration".

use super::{after, Consolidation, Disrupting, Round};
use crate::api::NodePool;
use crate::core::time::sooner;
use crate::core::{Action, DisruptionReason, ManagedNode, Time};

/// When an expired node expired, and when its claim is deleted whatever is
/// left on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Expiry {
    /// Launch plus the node's `expireAfter`.
    pub at: Time,
    /// [`Expiry::at`] plus the node's `terminationGracePeriod`; `None`
    /// without one (the drain then waits for its pods).
    pub force_at: Option<Time>,
}

/// When `n` expires (never without an `expireAfter`).
pub(super) fn expires_at(n: &ManagedNode) -> Option<Time> {
    Some(after(n.launched_at, n.expire_after?))
}

/// `n`'s expiry if it has expired by `now`.
pub(super) fn expiry(n: &ManagedNode, now: Time) -> Option<Expiry> {
    let at = expires_at(n).filter(|at| *at <= now)?;
    Some(Expiry {
        at,
        force_at: n.termination_grace.map(|g| after(at, g)),
    })
}

impl Consolidation {
    /// Starts replacing every expired node that may be taken now (see the
    /// module doc), oldest launch first, whatever the budgets say, and
    /// records when the next node expires.
    pub(super) fn replace_expired(&mut self, r: &Round, out: &mut Vec<Action>) {
        let mut next: Option<Time> = None;
        let mut expired: Vec<(&ManagedNode, &NodePool, Expiry)> = Vec::new();
        for (n, pool) in r.nodes_with_pools() {
            match expiry(n, r.now) {
                Some(e) if self.may_expire(r, n) => expired.push((n, pool, e)),
                Some(_) => {}
                None => {
                    if let Some(at) = expires_at(n) {
                        sooner(&mut next, at);
                    }
                }
            }
        }
        self.next_expiry = next;
        expired.sort_by(|(a, _, _), (b, _, _)| {
            a.launched_at
                .cmp(&b.launched_at)
                .then(a.claim.cmp(&b.claim))
        });
        for (n, pool, e) in expired {
            let launches = self.replacements_for(r, n, pool, false).unwrap_or_default();
            let removal = Disrupting {
                force_at: e.force_at,
                ..Disrupting::new(DisruptionReason::Expired)
            };
            self.replace_with(r, n, launches, removal, out);
        }
    }

    /// Whether an expired node may be taken now: ready, not cordoned, not
    /// under interruption handling, not being removed already.
    fn may_expire(&self, r: &Round, n: &ManagedNode) -> bool {
        n.ready_at.is_some()
            && !n.state.in_flight
            && !n.state.unschedulable
            && !r.ctx.interruptions.is_handling(&n.claim)
            && !self.disrupting.contains_key(&n.claim)
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::interruption::fixtures::*;
    use super::super::tests::{kinds, step};
    use super::*;
    use crate::core::interruption::fixtures::launches;

    /// A GPU pool that never consolidates (so that only expiry acts), with
    /// a budget of `nodes`.
    fn pool(nodes: &str) -> Vec<NodePool> {
        super::super::tests::unconsolidated("gpu", nodes)
    }

    /// `n` launched at `at`, ready a minute later, living an hour, with a
    /// termination grace period of half an hour.
    fn born(n: ManagedNode, at: i64) -> ManagedNode {
        ManagedNode {
            launched_at: t(at),
            ready_at: Some(t(at + 60)),
            expire_after: Some(std::time::Duration::from_secs(3600)),
            termination_grace: Some(std::time::Duration::from_secs(1800)),
            ..n
        }
    }

    /// `n` without a termination grace period.
    fn no_grace(n: ManagedNode) -> ManagedNode {
        ManagedNode {
            termination_grace: None,
            ..n
        }
    }

    /// Two busy GPU nodes launched at 0 (neither's pod fits on the other)
    /// in a pool with a budget of `nodes`, with a g5 to replace them with.
    fn two_busy(nodes: &str) -> Fixture {
        let mut f = Fixture::new([
            born(node("n1").pods([pod("a").gpus(1)]), 0),
            born(node("n2").pods([pod("b").gpus(1)]), 0),
        ]);
        f.pools = pool(nodes);
        f.catalog = super::super::tests::g5_on_demand();
        f
    }

    #[test]
    fn a_node_older_than_expire_after_gets_its_replacement_first_and_is_drained_once_it_is_ready() {
        let mut f = two_busy("100%");
        let mut c = Consolidation::default();
        assert_eq!(step(&mut c, &f, 0), [], "young nodes stay");
        assert_eq!(c.next_deadline(), Some(t(3600)), "the next expiry wakes it");
        let first = step(&mut c, &f, 3600);
        let l = launches(&first);
        assert_eq!(l.len(), 2, "both expired: {first:?}");
        assert_eq!(kinds(&first), ["launch", "launch"], "nothing drained yet");
        let decided: Vec<_> = c
            .decisions()
            .iter()
            .map(|d| (d.reason, d.claims.clone(), d.replacements.len()))
            .collect();
        assert_eq!(
            decided,
            [
                (DisruptionReason::Expired, vec!["n1".to_string()], 1),
                (DisruptionReason::Expired, vec!["n2".to_string()], 1)
            ]
        );
        assert!(c.is_disrupting("n1") && c.is_disrupting("n2"));
        for r in &l {
            f.nodes.push(born(node(&r.claim), 3600));
        }
        let drain = kinds(&step(&mut c, &f, 3660));
        assert_eq!(
            drain,
            [
                "cordon n1 (expired)",
                "evict a",
                "cordon n2 (expired)",
                "evict b"
            ]
        );
        f.node_mut("n1").pods.clear();
        assert_eq!(kinds(&step(&mut c, &f, 3661)), ["delete n1 (expired)"]);
    }

    #[test]
    fn expiry_is_not_held_back_by_a_budget_of_zero_nor_by_do_not_disrupt_on_the_node() {
        let mut f = two_busy("0");
        *f.node_mut("n1") = born(node("n1").do_not_disrupt().pods([pod("a").gpus(1)]), 0);
        let mut c = Consolidation::default();
        assert_eq!(launches(&step(&mut c, &f, 3600)).len(), 2);
        // A drift of the same nodes within that budget would wait.
        let mut drifted = two_busy("0");
        for n in &mut drifted.nodes {
            n.drifted = Some(crate::core::drift::Drift::ImageChanged);
            n.expire_after = None;
        }
        assert_eq!(step(&mut Consolidation::default(), &drifted, 3600), []);
    }

    #[test]
    fn a_node_without_expire_after_lives_on() {
        let mut f = two_busy("100%");
        for n in &mut f.nodes {
            n.expire_after = None;
        }
        let mut c = Consolidation::default();
        for at in [0, 3600, 30 * 24 * 3600] {
            assert_eq!(step(&mut c, &f, at), []);
        }
        assert_eq!(c.next_deadline(), None);
    }

    #[test]
    fn a_do_not_disrupt_pod_holds_an_expired_node_until_the_termination_grace_period_then_the_claim_goes(
    ) {
        let mut f = Fixture::new([
            born(node("n1").pods([pod("a").do_not_disrupt(), pod("b")]), 0),
            born(node("n2"), 3000),
        ]);
        f.pools = pool("100%");
        let mut c = Consolidation::default();
        // Both fit on the younger n2: no launch; a is held, b is evicted.
        assert_eq!(
            kinds(&step(&mut c, &f, 3600)),
            ["cordon n1 (expired)", "evict b"]
        );
        *f.node_mut("n1") = born(node("n1").cordoned().pods([pod("a").do_not_disrupt()]), 0);
        assert_eq!(step(&mut c, &f, 4000), []);
        assert_eq!(c.next_deadline(), Some(t(3600 + 1800)));
        // The grace period is over: the claim is deleted with a on it.
        assert_eq!(kinds(&step(&mut c, &f, 5400)), ["delete n1 (expired)"]);
        assert_eq!(step(&mut c, &f, 5460), [], "once");
    }

    #[test]
    fn without_a_termination_grace_period_a_do_not_disrupt_pod_holds_the_expired_node() {
        let mut f = Fixture::new([
            no_grace(born(node("n1").pods([pod("a").do_not_disrupt()]), 0)),
            born(node("n2"), 3000),
        ]);
        f.pools = pool("100%");
        let mut c = Consolidation::default();
        assert_eq!(kinds(&step(&mut c, &f, 3600)), ["cordon n1 (expired)"]);
        *f.node_mut("n1") = no_grace(born(
            node("n1").cordoned().pods([pod("a").do_not_disrupt()]),
            0,
        ));
        f.nodes.retain(|n| n.claim != "n2");
        for at in [4000, 3600 * 24, 3600 * 24 * 30] {
            assert_eq!(step(&mut c, &f, at), [], "{at}");
        }
    }

    #[test]
    fn an_expired_node_whose_replacement_cannot_be_planned_drains_anyway() {
        let mut f = two_busy("100%");
        // No offering the pool could launch.
        f.catalog = super::super::tests::catalog(&[]);
        let mut c = Consolidation::default();
        let out = kinds(&step(&mut c, &f, 3600));
        assert_eq!(
            out,
            [
                "cordon n1 (expired)",
                "evict a",
                "cordon n2 (expired)",
                "evict b"
            ]
        );
    }

    #[test]
    fn a_cordoned_or_unready_expired_node_is_left_until_that_passes() {
        let mut f = two_busy("100%");
        *f.node_mut("n1") = born(node("n1").cordoned().pods([pod("a").gpus(1)]), 0);
        *f.node_mut("n2") = ManagedNode {
            ready_at: None,
            ..born(node("n2").pods([pod("b").gpus(1)]), 0)
        };
        let mut c = Consolidation::default();
        assert_eq!(step(&mut c, &f, 7200), []);
        assert!(!c.is_disrupting("n1") && !c.is_disrupting("n2"));
    }

    #[test]
    fn an_expired_node_left_cordoned_by_a_restart_is_drained_again_as_expired() {
        let mut f = two_busy("0");
        f.nodes.retain(|n| n.claim != "n2");
        *f.node_mut("n1") = born(
            node("n1")
                .disrupted()
                .do_not_disrupt()
                .pods([pod("a").gpus(1)]),
            0,
        );
        let mut c = Consolidation::default();
        // Within its grace period (expired at 1 h, 30 min): drained again.
        assert_eq!(
            kinds(&step(&mut c, &f, 3900)),
            ["cordon n1 (expired)", "evict a"]
        );
        assert_eq!(c.next_deadline(), Some(t(3600 + 1800)));
        // A restart after its grace period: the claim goes at once.
        let mut c = Consolidation::default();
        assert_eq!(
            kinds(&step(&mut c, &f, 3600 * 5)),
            ["cordon n1 (expired)", "delete n1 (expired)"]
        );
    }
}
