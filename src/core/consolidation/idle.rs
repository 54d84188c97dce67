//! Consolidating nodes whose GPUs have all been idle for their pool's
//! `disruption.consolidateIdleGpusAfter` (opt-in, never by default), as
//! DCGM reports through the driver ([`ManagedNode::gpu_idle_since`]): a
//! node that pods hold without using its GPUs (a forgotten notebook, a
//! job waiting on something else) is drained checkpoint first and removed
//! within the pool's budgets for `Underutilized`, the longest idle first;
//! its pods that come back are planned as usual. The same holds as for
//! drift: `do-not-disrupt`, a PDB that allows nothing, interruption
//! handling, a reboot under way, a pre-warm window.

use super::super::interruption::pool_of;
use super::{after, Consolidation, Disrupting, Round};
use crate::api::BudgetReason;
use crate::core::time::sooner;
use crate::core::{Action, DisruptionReason, ManagedNode, Time};
use std::collections::BTreeMap;

impl Consolidation {
    /// Starts removing the idle GPU nodes the budgets allow; remembers when
    /// the next one becomes due.
    pub(super) fn remove_idle_gpu_nodes(&mut self, r: &Round, out: &mut Vec<Action>) {
        self.idle_due = None;
        let mut due: Vec<(&ManagedNode, Time)> = Vec::new();
        for (n, pool) in r.nodes_with_pools() {
            let Some(since) = n.gpu_idle_since else {
                continue;
            };
            let Ok(Some(wait)) = pool.spec.disruption.idle_gpus_after() else {
                continue;
            };
            let at = after(since, wait);
            if at > r.now {
                sooner(&mut self.idle_due, at);
                continue;
            }
            if self.may_replace(r, n) {
                due.push((n, since));
            }
        }
        due.sort_by(|(a, sa), (b, sb)| sa.cmp(sb).then(a.claim.cmp(&b.claim)));
        let mut left: BTreeMap<&str, u32> = BTreeMap::new();
        for (n, _) in due {
            let Some(pool) = pool_of(r.world, n) else {
                continue;
            };
            let budget = left
                .entry(n.nodepool.as_str())
                .or_insert_with(|| self.allowed(r, pool, BudgetReason::Underutilized));
            if *budget == 0 {
                continue;
            }
            *budget -= 1;
            let removal = Disrupting::new(DisruptionReason::Underutilized);
            self.replace_with(r, n, Vec::new(), removal, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::interruption::fixtures::*;
    use super::super::super::interruption::Interruptions;
    use super::super::Context;
    use super::*;
    use crate::api::Budget;

    fn step(c: &mut Consolidation, f: &Fixture, at: i64) -> Vec<Action> {
        c.decide_in(&f.world(), t(at), &Context::new(&Interruptions::default()))
    }

    fn idle_since(n: ManagedNode, at: i64) -> ManagedNode {
        ManagedNode {
            gpu_idle_since: Some(t(at)),
            ..n
        }
    }

    fn fixture(after: Option<&str>) -> Fixture {
        let mut f = Fixture::new([
            idle_since(node("n1").pods([pod("a").gpus(1).checkpoints()]), 0),
            node("n2").pods([pod("b").gpus(1)]),
        ]);
        f.pools = vec![pool_with("gpu", |s| {
            s.disruption.consolidate_after = "Never".into();
            s.disruption.consolidate_idle_gpus_after = after.map(str::to_string);
            s.disruption.budgets = vec![Budget {
                nodes: "100%".into(),
                ..Budget::default()
            }];
        })];
        f
    }

    #[test]
    fn a_node_idle_past_its_pools_wait_is_drained_checkpoint_first_and_removed() {
        let mut f = fixture(Some("2h"));
        let mut c = Consolidation::default();
        assert_eq!(step(&mut c, &f, 7199), []);
        assert_eq!(c.next_deadline(), Some(t(7200)));
        let actions = step(&mut c, &f, 7200);
        assert!(
            matches!(actions.as_slice(),
                [Action::Cordon { claim, reason: DisruptionReason::Underutilized }, Action::RequestCheckpoint { pod, .. }]
                if claim == "n1" && pod == "a"),
            "{actions:?}"
        );
        assert!(!c.is_disrupting("n2"), "a busy node stays");
        f.node_mut("n1").pods.clear();
        assert!(step(&mut c, &f, 7201)
            .iter()
            .any(|a| matches!(a, Action::Delete { claim, .. } if claim == "n1")));
    }

    #[test]
    fn never_by_default_and_never_without_a_reading_or_past_do_not_disrupt() {
        let mut c = Consolidation::default();
        assert_eq!(step(&mut c, &fixture(None), 99_999), []);
        let mut f = fixture(Some("1h"));
        f.node_mut("n1").gpu_idle_since = None;
        assert_eq!(step(&mut Consolidation::default(), &f, 99_999), []);
        let mut f = fixture(Some("1h"));
        f.node_mut("n1").pods[0].do_not_disrupt = true;
        assert_eq!(step(&mut Consolidation::default(), &f, 99_999), []);
    }
}
