//! Replacing drifted nodes ([`crate::core::drift`] says which): each one,
//! oldest first and within its pool's disruption budget, gets capacity for
//! the pods the other nodes cannot take, launched first; once that is
//! ready the node is removed the way consolidation removes any node
//! ([`Consolidation::progress`]): cordon, checkpoint requests to opted-in
//! pods, evictions within PDBs, deletion once empty. A node held by
//! `do-not-disrupt` (its own or a pod's), by a PDB that allows nothing, by
//! interruption handling or by a pre-warm window waits.

use super::super::interruption::pool_of;
use super::{
    blocked, daemonset_overhead, real_pods, replacement_name, request_for, takes_devices,
    without_free_devices, Consolidation, Disrupting, Round,
};
use crate::api::{BudgetReason, NodePool};
use crate::cluster::{Pod, Pool};
use crate::core::{Action, ClaimRequest, DisruptionDecision, DisruptionReason, ManagedNode};
use crate::plan;
use std::collections::BTreeMap;

impl Consolidation {
    /// Starts replacing the drifted nodes the budgets allow: launches their
    /// replacements (none when their pods fit on the other nodes) and hands
    /// them to [`Consolidation::progress`].
    pub(super) fn replace_drifted(&mut self, r: &Round, out: &mut Vec<Action>) {
        let mut drifted: Vec<&ManagedNode> = r
            .world
            .nodes
            .iter()
            .filter(|n| n.drifted.is_some() && self.may_replace(r, n))
            .collect();
        drifted.sort_by(|a, b| {
            a.launched_at
                .cmp(&b.launched_at)
                .then(a.claim.cmp(&b.claim))
        });
        let mut left: BTreeMap<&str, u32> = BTreeMap::new();
        for n in drifted {
            let Some(pool) = pool_of(r.world, n) else {
                continue;
            };
            let budget = left
                .entry(n.nodepool.as_str())
                .or_insert_with(|| self.allowed(r, pool, BudgetReason::Drifted));
            if *budget == 0 {
                continue;
            }
            let Some(launches) = self.replacements_for(r, n, pool, false) else {
                continue;
            };
            *budget -= 1;
            let removal = Disrupting::new(DisruptionReason::Drifted);
            self.replace_with(r, n, launches, removal, out);
        }
    }

    /// Launches `launches` for `n` and records its removal: `removal` with
    /// the launches as the replacement to wait for (none: the drain starts
    /// at once).
    pub(super) fn replace_with(
        &mut self,
        r: &Round,
        n: &ManagedNode,
        launches: Vec<ClaimRequest>,
        removal: Disrupting,
        out: &mut Vec<Action>,
    ) {
        let names: Vec<String> = launches.iter().map(|c| c.claim.clone()).collect();
        out.extend(launches.into_iter().map(Action::Launch));
        self.decided.push(DisruptionDecision {
            reason: removal.reason,
            claims: vec![n.claim.clone()],
            replacements: names.clone(),
        });
        self.disrupting.insert(
            n.claim.clone(),
            Disrupting {
                replacement: (!names.is_empty()).then_some((names, r.now)),
                ..removal
            },
        );
    }

    /// Whether a drifted (or idle) node may be removed now: ready, not held
    /// by `do-not-disrupt` or a PDB, not cordoned, not under interruption
    /// handling or a reboot, not protected, not being removed already.
    pub(super) fn may_replace(&self, r: &Round, n: &ManagedNode) -> bool {
        n.ready_at.is_some()
            && !n.state.in_flight
            && !n.do_not_disrupt
            && !n.state.unschedulable
            && !r.ctx.interruptions.is_handling(&n.claim)
            && !(r.ctx.rebooting)(&n.claim)
            && !self.disrupting.contains_key(&n.claim)
            && !blocked(r, n)
            && !(r.ctx.protected)(n)
    }

    /// The launches that make room for the node's real pods: none when they
    /// fit on the other ready, undrifted nodes that stay; else the planner's
    /// new nodes from the node's pool. `None` when some pod would have no
    /// place (the node then stays until it has). With `counted`, the node
    /// itself still counts against its pool's limits while its
    /// replacements are planned (it runs until they are ready).
    pub(super) fn replacements_for(
        &self,
        r: &Round,
        n: &ManagedNode,
        pool: &NodePool,
        counted: bool,
    ) -> Option<Vec<ClaimRequest>> {
        let pods: Vec<Pod> = real_pods(n).cloned().collect();
        let others = self.destinations(r, n);
        let all: Vec<usize> = (0..pods.len()).collect();
        if !takes_devices(&pods)
            && plan::pack::place_on_existing(&pods, &all, &others)
                .1
                .is_empty()
        {
            return Some(Vec::new());
        }
        if pool.is_marked_not_ready() {
            return None;
        }
        let pools = [Pool::from_api(pool, daemonset_overhead(n)).ok()?];
        let unavailable = |o: &crate::catalog::Offering| r.ctx.interruptions.blocks(o, r.now);
        let owned = without_free_devices(&others, &pods);
        let me: crate::cluster::NodeState;
        let mut nodes: Vec<&crate::cluster::NodeState> =
            owned.as_ref().map_or(others, |o| o.iter().collect());
        if counted {
            me = crate::cluster::NodeState {
                unschedulable: true,
                ..n.state.clone()
            };
            nodes.push(&me);
        }
        let p = self.plan_moves(r, &pools, &nodes, &pods, &unavailable);
        if !p.unschedulable.is_empty() {
            return None;
        }
        p.nodes
            .iter()
            .enumerate()
            .map(|(i, new)| {
                let key = if i == 0 {
                    n.claim.clone()
                } else {
                    format!("{}/{i}", n.claim)
                };
                request_for(r.world, n, new, replacement_name(&n.nodepool, &key, r.now))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::interruption::fixtures::*;
    use super::super::tests::{kinds, step};
    use super::*;
    use crate::api::Budget;
    use crate::core::drift::Drift;
    use crate::core::interruption::fixtures::launches;
    use crate::core::DisruptionDecision;

    fn drifted(n: ManagedNode) -> ManagedNode {
        ManagedNode {
            drifted: Some(Drift::ImageChanged),
            ..n
        }
    }

    /// A pool whose nodes may not be consolidated (so that only drift acts)
    /// with a budget of `nodes`.
    fn pool(nodes: &str) -> Vec<NodePool> {
        super::super::tests::unconsolidated("gpu", nodes)
    }

    /// Two full nodes (a GPU pod each: neither fits on the other).
    fn two_busy(drift_both: bool) -> Fixture {
        let n1 = drifted(node("n1").pods([pod("a").gpus(1)]));
        let n2 = node("n2").pods([pod("b").gpus(1)]);
        let mut f = Fixture::new([n1, if drift_both { drifted(n2) } else { n2 }]);
        f.pools = pool("1");
        f.catalog = super::super::tests::g5_on_demand();
        f
    }

    #[test]
    fn a_drifted_node_gets_its_replacement_first_and_is_drained_once_that_is_ready() {
        let mut f = two_busy(false);
        let mut c = Consolidation::default();
        let first = step(&mut c, &f, 0);
        let l = launches(&first);
        assert_eq!(l.len(), 1, "{first:?}");
        assert_eq!(l[0].pods, ["a"]);
        assert_eq!(
            kinds(&first),
            ["launch"],
            "nothing drained before it is ready"
        );
        assert!(c.is_disrupting("n1") && !c.is_disrupting("n2"));
        let name = l[0].claim.clone();
        assert_eq!(
            c.decisions(),
            [DisruptionDecision {
                reason: DisruptionReason::Drifted,
                claims: vec!["n1".into()],
                replacements: vec![name.clone()],
            }]
        );
        f.nodes.push(node(&name).not_ready());
        assert_eq!(
            step(&mut c, &f, 30),
            [],
            "still waiting for the replacement"
        );
        assert_eq!(c.decisions(), [], "decided once");
        *f.node_mut(&name) = node(&name);
        assert_eq!(
            kinds(&step(&mut c, &f, 60)),
            ["cordon n1 (drifted)", "evict a"]
        );
        f.nodes.retain(|n| n.claim != "n1");
        f.node_mut(&name).pods.push(pod("a").gpus(1));
        assert_eq!(step(&mut c, &f, 61), [], "nothing twice");
    }

    #[test]
    fn drifted_nodes_are_replaced_within_the_budget_not_beyond_it() {
        let mut f = two_busy(true);
        let mut c = Consolidation::default();
        let first = step(&mut c, &f, 0);
        assert_eq!(launches(&first).len(), 1, "a budget of 1: {first:?}");
        assert_eq!(step(&mut c, &f, 10), []);
        // n1 is gone: the budget has room for n2.
        let name = launches(&first)[0].claim.clone();
        f.nodes.retain(|n| n.claim != "n1");
        f.nodes.push(node(&name).pods([pod("a").gpus(1)]));
        let next = step(&mut c, &f, 20);
        assert_eq!(launches(&next).len(), 1, "{next:?}");
        assert_eq!(launches(&next)[0].pods, ["b"]);
        // A budget of 0 holds every drifted node.
        let mut f = two_busy(true);
        f.pools = pool("0");
        let mut c = Consolidation::default();
        assert_eq!(step(&mut c, &f, 0), []);
        assert!(!c.is_disrupting("n1") && !c.is_disrupting("n2"));
    }

    #[test]
    fn a_drifted_node_of_a_pool_marked_not_ready_waits_for_it() {
        let mut f = two_busy(false);
        let status: crate::api::NodePoolStatus = serde_json::from_value(serde_json::json!({
            "conditions": [{"type": "Ready", "status": "False", "reason": "NodeClassNotReady",
                            "message": "", "lastTransitionTime": "2026-01-05T00:00:00Z"}]
        }))
        .unwrap();
        f.pools[0].status = Some(status);
        let mut c = Consolidation::default();
        assert_eq!(step(&mut c, &f, 0), []);
        f.pools[0].status = None;
        assert_eq!(launches(&step(&mut c, &f, 1)).len(), 1);
    }

    #[test]
    fn a_drifted_node_left_cordoned_by_a_restart_is_drained_again() {
        let mut f = two_busy(false);
        *f.node_mut("n1") = drifted(node("n1").disrupted().pods([pod("a").gpus(1)]));
        // A new core: nothing remembered of the drain.
        let mut c = Consolidation::default();
        assert_eq!(
            kinds(&step(&mut c, &f, 0)),
            ["cordon n1 (drifted)", "evict a"]
        );
        assert!(c.is_disrupting("n1"));
    }

    #[test]
    fn do_not_disrupt_holds_a_drifted_node() {
        for f in [
            Fixture::new([drifted(
                node("n1").do_not_disrupt().pods([pod("a").gpus(1)]),
            )]),
            Fixture::new([drifted(
                node("n1").pods([pod("a").gpus(1).do_not_disrupt()]),
            )]),
        ] {
            let mut f = f;
            f.pools = pool("100%");
            let mut c = Consolidation::default();
            for at in [0, 60, 3600] {
                assert_eq!(step(&mut c, &f, at), []);
            }
            assert!(!c.is_disrupting("n1"));
        }
    }

    #[test]
    fn a_drifted_node_whose_pod_has_a_claim_of_its_own_gets_a_node_serving_the_claim() {
        use super::super::tests::own_gpu_claim;
        let mut f = two_busy(false);
        *f.node_mut("n1") = drifted(node("n1").pods([own_gpu_claim(pod("a"))]));
        // n2's free published GPU is not matched against the claim.
        let gpu = crate::catalog::devices::resource_name("gpu.nvidia.com", "gpu");
        f.node_mut("n2").state.allocatable.set(&gpu, 1);
        let mut c = Consolidation::default();
        let first = step(&mut c, &f, 0);
        assert_eq!(kinds(&first), ["launch"]);
        let l = launches(&first);
        assert_eq!(l[0].pods, ["a"]);
        let w = f.world();
        let replacement = crate::core::ManagedNode::launched(l[0], &w, t(0)).unwrap();
        assert_eq!(replacement.state.allocatable.get(&gpu), 1);
    }

    #[test]
    fn a_drifted_node_whose_pod_shares_an_allocated_claim_waits() {
        use super::super::tests::shared_gpu_claim;
        let mut f = two_busy(false);
        *f.node_mut("n1") = drifted(node("n1").pods([shared_gpu_claim(pod("a"), "n1")]));
        let mut c = Consolidation::default();
        for at in [0, 60, 3600] {
            assert_eq!(step(&mut c, &f, at), []);
        }
        assert!(!c.is_disrupting("n1"));
    }

    #[test]
    fn an_undrifted_node_is_left_alone() {
        let mut f = Fixture::new([node("n1").pods([pod("a").gpus(1)]), node("n2")]);
        f.pools = pool("100%");
        let mut c = Consolidation::default();
        for at in [0, 60, 3600] {
            assert_eq!(step(&mut c, &f, at), []);
        }
    }

    #[test]
    fn a_drifted_node_whose_pods_fit_elsewhere_drains_at_once_asking_checkpointers_first() {
        let mut f = Fixture::new([
            drifted(node("n1").pods([pod("a").checkpoints(), pod("b")])),
            node("n2"),
        ]);
        f.pools = pool("1");
        let mut c = Consolidation::default();
        assert_eq!(
            kinds(&step(&mut c, &f, 0)),
            ["cordon n1 (drifted)", "checkpoint a", "evict b"]
        );
        // a is given its grace period (90 s) unless it acknowledges.
        assert_eq!(c.next_deadline(), Some(t(90)));
        assert_eq!(step(&mut c, &f, 30), []);
        *f.node_mut("n1") = drifted(
            node("n1")
                .cordoned()
                .pods([pod("a").checkpoints().acked(t(40))]),
        );
        assert_eq!(kinds(&step(&mut c, &f, 41)), ["evict a"]);
        f.node_mut("n1").pods.clear();
        assert_eq!(kinds(&step(&mut c, &f, 42)), ["delete n1 (drifted)"]);
    }

    #[test]
    fn a_replacement_waiting_for_its_pods_is_not_consolidated_away() {
        let mut f = two_busy(false);
        f.pools = vec![pool_with("gpu", |s| {
            s.disruption.budgets = vec![Budget {
                nodes: "100%".into(),
                ..Budget::default()
            }];
        })];
        f.node_mut("n1").pods[0] = pod("a").gpus(1).checkpoints();
        let mut c = Consolidation::default();
        let name = launches(&step(&mut c, &f, 0))[0].claim.clone();
        f.nodes.push(node(&name));
        let drain = step(&mut c, &f, 10);
        assert!(kinds(&drain).contains(&"checkpoint a".to_string()));
        // The replacement stays empty while a checkpoints: well past
        // consolidateAfter and the validation period, it is not removed.
        // Nor is n2's pod moved onto it.
        for at in [11, 71, 86, 95] {
            assert_eq!(step(&mut c, &f, at), [], "{at}");
        }
    }
}
