//! Collective checkpoints: when one member of a gang (a pod group that must
//! run whole) is about to lose its node, the whole gang checkpoints, is
//! drained together and is re-planned whole. Distributed training cannot go
//! on without a member, so asking only the member on the doomed node would
//! waste the others' work since their last checkpoint.
//!
//! The per-node decisions (spot notices, rebalance recommendations,
//! consolidation) decide which pods to ask and evict, node by node;
//! [`GangDrains::extend`] then widens their actions to whole gangs. It is
//! the one rule both drivers follow: the controller and the simulator both
//! run it through [`super::Core::decide`]. The rules are written up in
//! `docs/disruption.md` ("Gangs").

use super::interruption::{checkpoint_done, checkpoint_grace, pool_of};
use super::time::after;
use super::{Action, DisruptionReason, ManagedNode, Time, World};
use crate::cluster::Pod;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

/// A gang being checkpointed (and, when it is leaving, drained) together.
#[derive(Debug, Clone)]
struct GangDrain {
    /// The deadline every member was given: the earliest of the triggering
    /// nodes' checkpoint deadlines.
    deadline: Time,
    /// When the collective request was made (acknowledgements count from
    /// then on).
    requested_at: Time,
    /// Whether the gang is leaving its nodes (drain), or only checkpoints
    /// (a rebalance recommendation answered with `Checkpoint`).
    drain: bool,
    /// Members asked to checkpoint, with the deadline they were given.
    requested: BTreeMap<String, Time>,
    /// Members evicted, with when.
    evicted: BTreeMap<String, Time>,
    /// Members whose instance is gone, with when it was found gone: not
    /// asked, not waited for.
    gone: BTreeMap<String, Time>,
    /// When the drain evicted the gang (it evicts every member it holds in
    /// one round).
    first_eviction: Option<Time>,
}

impl GangDrain {
    /// A fresh drain (or collective checkpoint) from `now` to `deadline`.
    fn new(now: Time, deadline: Time, drain: bool) -> GangDrain {
        GangDrain {
            deadline,
            requested_at: now,
            drain,
            requested: BTreeMap::new(),
            evicted: BTreeMap::new(),
            gone: BTreeMap::new(),
            first_eviction: None,
        }
    }

    /// Whether `m` is the gang's next run rather than part of this drain:
    /// it started (`status.startTime`) no earlier than its name was evicted
    /// or found gone (a PyTorchJob's `name-worker-N` recreated, the
    /// simulator's job re-bound), or, under another name (a Job's or
    /// JobSet's replacement pod), no earlier than the drain evicted the
    /// gang. Such a pod is neither asked, waited for, evicted nor replaced
    /// here, and a trigger on it starts a drain of its own. A pod whose
    /// start is unknown is taken for part of the drain.
    fn rerun(&self, m: &Member) -> bool {
        let Some(started) = m.pod.started else {
            return false;
        };
        let name = &m.pod.pod.name;
        let left = (self.evicted.get(name))
            .or_else(|| self.gone.get(name))
            .or(self.first_eviction.as_ref());
        left.is_some_and(|t| started >= *t)
    }
}

/// Gangs under collective checkpoint or drain, by group name
/// (`namespace/name`).
#[derive(Debug, Clone, Default)]
pub struct GangDrains {
    gangs: BTreeMap<String, GangDrain>,
    last_now: Option<Time>,
}

/// A running member of a gang: its pod and its node.
struct Member<'a> {
    node: &'a ManagedNode,
    pod: &'a super::BoundPod,
}

/// The running members of every gang of more than one pod whose group name
/// `keep` accepts, by group name. This scans every pod in the cluster on
/// every round, so only the gangs a caller reads are gathered.
fn members<'a>(
    world: &World<'a>,
    keep: impl Fn(&str) -> bool,
) -> BTreeMap<&'a str, Vec<Member<'a>>> {
    let mut out: BTreeMap<&str, Vec<Member>> = BTreeMap::new();
    for node in world.nodes {
        for pod in node.pods.iter().filter(|p| !p.placeholder) {
            if let Some(g) = (pod.pod.group.as_ref()).filter(|g| g.min_member > 1 && keep(&g.name))
            {
                out.entry(g.name.as_str())
                    .or_default()
                    .push(Member { node, pod });
            }
        }
    }
    out
}

/// Whether the member gets checkpoint signals: it opted in, or its pool has
/// a checkpoint hook.
fn signalled(world: &World, m: &Member) -> bool {
    m.pod.pod.checkpoints
        || pool_of(world, m.node).is_some_and(|p| p.spec.interruption.checkpoint_hook.is_some())
}

impl GangDrains {
    /// No gang under way.
    pub fn new() -> GangDrains {
        GangDrains::default()
    }

    /// Widens the round's per-node `actions` to whole gangs.
    ///
    /// A checkpoint request or an eviction of a gang member, or its
    /// instance gone without notice, starts a collective response: every running member, on any node, is asked to
    /// checkpoint with the same deadline (when the gang is leaving, only
    /// members whose checkpoint can be complete by then, as for a lone pod) (the request's; for an eviction
    /// without one, the node's `checkpoint_until` if it has one, else its
    /// pool's checkpoint grace period from now). When the triggering node is
    /// `leaving` (or a member is evicted), the gang is drained whole: no
    /// member is evicted until every asked member acknowledged or the
    /// deadline passed, then all are, and [`GangDrains::pods_needing_replacement`]
    /// hands every member not yet evicted to the provisioner, so that the
    /// gang is re-planned whole (in one zone). A later trigger with an
    /// earlier deadline moves the gang's deadline up and asks again. Per-node
    /// requests and evictions of members that the gang's rule does not allow
    /// yet are held back. A drain is forgotten once every pod of its gang
    /// left in the world is the gang's next run (`GangDrain::rerun`), which a
    /// later trigger drains afresh.
    ///
    /// Returns whether a new gang drain started (its members are new demand).
    pub fn extend(
        &mut self,
        world: &World,
        actions: &mut Vec<Action>,
        now: Time,
        leaving: &dyn Fn(&str) -> bool,
        checkpoint_until: &dyn Fn(&str) -> Option<Time>,
    ) -> bool {
        self.last_now = Some(now);

        // Triggers from the per-node actions: a member asked to checkpoint,
        // evicted, or whose instance is gone already.
        let grace_of = |claim: &str| {
            let policy = world
                .nodes
                .iter()
                .find(|n| n.claim == claim)
                .and_then(|n| pool_of(world, n))
                .map(|p| &p.spec.interruption);
            checkpoint_until(claim)
                .filter(|t| *t > now)
                .unwrap_or_else(|| after(now, checkpoint_grace(policy)))
        };
        let mut triggers: Vec<(&str, Time, bool)> = Vec::new();
        let mut gone: BTreeSet<&str> = BTreeSet::new();
        for a in actions.iter() {
            match a {
                Action::RequestCheckpoint {
                    pod,
                    claim,
                    deadline,
                } => triggers.push((pod, *deadline, leaving(claim))),
                Action::Evict { pod, claim } => triggers.push((pod, grace_of(claim), true)),
                Action::Delete {
                    claim,
                    reason: DisruptionReason::Terminated,
                } => {
                    for p in world
                        .nodes
                        .iter()
                        .filter(|n| &n.claim == claim)
                        .flat_map(|n| &n.pods)
                    {
                        triggers.push((&p.pod.name, grace_of(claim), true));
                        gone.insert(&p.pod.name);
                    }
                }
                _ => {}
            }
        }
        // Nothing under way and nothing new: the members (a scan of every
        // pod in the cluster) are not needed. This runs every round.
        if self.gangs.is_empty() && triggers.is_empty() {
            return false;
        }
        // Without a trigger only the gangs under way are read.
        let members = if triggers.is_empty() {
            members(world, |g| self.gangs.contains_key(g))
        } else {
            members(world, |_| true)
        };
        let group_of = |pod: &str| -> Option<&str> {
            members
                .iter()
                .find(|(_, ms)| ms.iter().any(|m| m.pod.pod.name == pod))
                .map(|(g, _)| *g)
        };
        // Forget gangs none of whose members in the world is part of the
        // drain (they left, or all run again), and checkpoint-only gangs
        // whose deadline passed (a later notice may start them again).
        self.gangs.retain(|g, d| {
            let ms = members.get(g.as_str()).map_or(&[][..], |ms| &ms[..]);
            ms.iter().any(|m| !d.rerun(m)) && (d.drain || now < d.deadline)
        });

        let mut started = false;
        for (pod, deadline, drain) in triggers {
            let Some(group) = group_of(pod) else { continue };
            // A trigger on the gang's next run, while members of a past
            // drain are still in the world, starts a drain of its own.
            let rerun = |d: &GangDrain| {
                (members.get(group).into_iter().flatten())
                    .any(|m| m.pod.pod.name == pod && d.rerun(m))
            };
            if self.gangs.get(group).is_some_and(rerun) {
                self.gangs.remove(group);
            }
            match self.gangs.get_mut(group) {
                Some(d) => {
                    if deadline < d.deadline {
                        d.deadline = deadline;
                    }
                    if drain && !d.drain {
                        d.drain = true;
                        started = true;
                    }
                }
                None => {
                    started |= drain;
                    self.gangs
                        .insert(group.to_string(), GangDrain::new(now, deadline, drain));
                }
            }
            if gone.contains(pod) {
                if let Some(d) = self.gangs.get_mut(group) {
                    d.gone.entry(pod.to_string()).or_insert(now);
                }
            }
        }

        // The per-node actions on members are replaced by the gang's.
        actions.retain(|a| match a {
            Action::RequestCheckpoint { pod, .. } | Action::Evict { pod, .. } => {
                group_of(pod).is_none_or(|g| !self.gangs.contains_key(g))
            }
            _ => true,
        });
        for (group, d) in &mut self.gangs {
            let Some(ms) = members.get(group.as_str()) else {
                continue;
            };
            let ms: Vec<&Member> = ms.iter().filter(|m| !d.rerun(m)).collect();
            for m in ms.iter().filter(|m| signalled(world, m)) {
                let name = &m.pod.pod.name;
                if d.evicted.contains_key(name)
                    || d.gone.contains_key(name)
                    || d.requested.get(name) == Some(&d.deadline)
                {
                    continue;
                }
                // As for a lone pod: a member whose checkpoint cannot be
                // complete before the gang leaves is not asked (it would
                // save nothing) and is not waited for.
                if d.drain && checkpoint_done(&m.pod.pod, now) > d.deadline {
                    continue;
                }
                d.requested.insert(name.clone(), d.deadline);
                actions.push(Action::RequestCheckpoint {
                    pod: name.clone(),
                    claim: m.node.claim.clone(),
                    deadline: d.deadline,
                });
            }
            if !d.drain {
                continue;
            }
            let acked = |m: &Member| {
                !d.requested.contains_key(&m.pod.pod.name)
                    || m.pod
                        .checkpoint_completed
                        .is_some_and(|t| t >= d.requested_at)
            };
            if now < d.deadline && !ms.iter().all(|m| acked(m)) {
                continue;
            }
            for m in ms {
                if let Entry::Vacant(e) = d.evicted.entry(m.pod.pod.name.clone()) {
                    e.insert(now);
                    d.first_eviction.get_or_insert(now);
                    actions.push(Action::Evict {
                        pod: m.pod.pod.name.clone(),
                        claim: m.node.claim.clone(),
                    });
                }
            }
        }
        started
    }

    /// The next time [`GangDrains::extend`] has something to do without any
    /// change in the world: a gang's checkpoint deadline.
    pub fn next_deadline(&self) -> Option<Time> {
        self.gangs
            .values()
            .map(|d| d.deadline)
            .filter(|t| self.last_now.is_none_or(|n| *t > n))
            .min()
    }

    /// The running members of draining gangs that have not been evicted yet
    /// (and are not the gang's next run): demand for the provisioner, so
    /// that the whole gang's replacement capacity launches at once.
    pub fn pods_needing_replacement(&self, world: &World) -> Vec<Pod> {
        self.leaving(world)
            .into_iter()
            .map(|m| m.pod.pod.clone())
            .collect()
    }

    /// The room the running members of draining gangs hold, by claim: once
    /// the gang leaves, it is free again, so the gang's re-plan may use it
    /// (the planner places the gang whole, on the nodes that stay and new
    /// ones, in one zone) rather than launch capacity for every member.
    pub fn room_freed(&self, world: &World) -> BTreeMap<String, crate::cluster::Resources> {
        let mut out: BTreeMap<String, crate::cluster::Resources> = BTreeMap::new();
        for m in self.leaving(world) {
            out.entry(m.node.claim.clone())
                .or_default()
                .add(&m.pod.pod.requests);
        }
        out
    }

    /// The running members of draining gangs not evicted yet (and not the
    /// gang's next run), gang by gang.
    /// Without a draining gang the cluster's pods are not scanned.
    fn leaving<'a>(&self, world: &World<'a>) -> Vec<Member<'a>> {
        if !self.gangs.values().any(|d| d.drain) {
            return Vec::new();
        }
        let mut members = members(world, |g| self.is_draining(g));
        let mut out = Vec::new();
        for (group, d) in self.gangs.iter().filter(|(_, d)| d.drain) {
            for m in members.remove(group.as_str()).into_iter().flatten() {
                if !d.evicted.contains_key(&m.pod.pod.name) && !d.rerun(&m) {
                    out.push(m);
                }
            }
        }
        out
    }

    /// Whether the gang (`namespace/name`) is being drained whole.
    pub fn is_draining(&self, group: &str) -> bool {
        self.gangs.get(group).is_some_and(|d| d.drain)
    }
}

#[cfg(test)]
mod tests {
    use super::super::interruption::fixtures::*;
    use super::super::interruption::Interruptions;
    use super::super::{BoundPod, DisruptionReason, Notice};
    use super::*;
    use crate::cluster::GroupRef;

    fn member(name: &str, group: &str, size: u32) -> BoundPod {
        let mut p = pod(name).checkpoints().gpus(1);
        p.pod.group = Some(GroupRef {
            name: group.into(),
            min_member: size,
        });
        p
    }

    /// A gang `train` of two checkpointing members on two spot nodes, and a
    /// lone pod on a third.
    fn gang_world() -> Fixture {
        Fixture::new([
            node("n1").spot().pods([member("a", "ns/train", 2)]),
            node("n2").spot().pods([member("b", "ns/train", 2)]),
            node("n3").spot().pods([pod("lone").checkpoints()]),
        ])
    }

    /// One round of the per-node interruption decisions widened to gangs.
    fn round(s: &mut Interruptions, g: &mut GangDrains, f: &Fixture, now: Time) -> Vec<Action> {
        let w = f.world();
        let mut actions = s.decide(&w, now);
        let leaving = |c: &str| s.is_handling(c);
        let until = |c: &str| s.checkpoint_until(c);
        g.extend(&w, &mut actions, now, &leaving, &until);
        actions
    }

    /// The decisions after a spot notice on `claim` at 0, due at 120.
    fn spot_notice(f: &Fixture, claim: &str) -> (Interruptions, GangDrains) {
        (notice_at(f, claim, 0), GangDrains::new())
    }

    /// The interruption decisions after a spot notice on `claim` at `at`,
    /// due 120 s later (members are asked by `at` + 90).
    fn notice_at(f: &Fixture, claim: &str, at: i64) -> Interruptions {
        let mut s = Interruptions::default();
        let notice = Notice::SpotInterruption {
            claim: claim.into(),
            deadline: t(at + 120),
        };
        s.handle(&notice, &f.world(), t(at));
        s
    }

    /// The decisions after n1's instance went without notice at 0.
    fn n1_terminated(f: &Fixture) -> (Interruptions, GangDrains) {
        let mut s = Interruptions::default();
        s.handle(&Notice::Terminated { claim: "n1".into() }, &f.world(), t(0));
        (s, GangDrains::new())
    }

    fn requests(actions: &[Action]) -> Vec<(String, String, Time)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::RequestCheckpoint {
                    pod,
                    claim,
                    deadline,
                } => Some((pod.clone(), claim.clone(), *deadline)),
                _ => None,
            })
            .collect()
    }

    fn evictions(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Evict { pod, .. } => Some(pod.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_spot_notice_on_one_member_asks_every_member_to_checkpoint_by_the_same_deadline() {
        let f = gang_world();
        let (mut s, mut g) = spot_notice(&f, "n1");
        let actions = round(&mut s, &mut g, &f, t(0));
        assert_eq!(
            requests(&actions),
            [
                ("a".to_string(), "n1".to_string(), t(90)),
                ("b".to_string(), "n2".to_string(), t(90)),
            ]
        );
        assert!(actions.contains(&Action::Cordon {
            claim: "n1".into(),
            reason: DisruptionReason::Interrupted
        }));
        assert!(evictions(&actions).is_empty(), "{actions:?}");
        assert!(g.is_draining("ns/train"));
        let mut again = round(&mut s, &mut g, &f, t(1));
        again.retain(|a| !matches!(a, Action::Cordon { .. }));
        assert_eq!(again, [], "nothing is asked twice");
    }

    #[test]
    fn the_gang_is_evicted_whole_once_every_member_acknowledged_and_replanned_whole() {
        let mut f = gang_world();
        let (mut s, mut g) = spot_notice(&f, "n1");
        round(&mut s, &mut g, &f, t(0));
        let needing: Vec<String> = g
            .pods_needing_replacement(&f.world())
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(needing, ["a", "b"], "the whole gang is new demand");

        // The member on the doomed node acknowledges first: nobody leaves yet.
        f.node_mut("n1").pods[0].checkpoint_completed = Some(t(10));
        assert_eq!(
            evictions(&round(&mut s, &mut g, &f, t(10))),
            [] as [&str; 0]
        );
        // The other one too: both go together.
        f.node_mut("n2").pods[0].checkpoint_completed = Some(t(20));
        assert_eq!(evictions(&round(&mut s, &mut g, &f, t(20))), ["a", "b"]);
        assert!(g.pods_needing_replacement(&f.world()).is_empty());
    }

    /// The gang `train` drained whole at 20 after a notice on n1 at 0, both
    /// members acknowledged.
    fn drained_at_20() -> (Interruptions, GangDrains) {
        let mut f = gang_world();
        let (mut s, mut g) = spot_notice(&f, "n1");
        round(&mut s, &mut g, &f, t(0));
        f.node_mut("n1").pods[0].checkpoint_completed = Some(t(10));
        f.node_mut("n2").pods[0].checkpoint_completed = Some(t(20));
        assert_eq!(evictions(&round(&mut s, &mut g, &f, t(20))), ["a", "b"]);
        (s, g)
    }

    #[test]
    fn a_gang_that_runs_again_under_the_same_names_is_asked_again_on_its_next_notice() {
        let (_, mut g) = drained_at_20();
        // Its members run again, under the same names, on new nodes, before
        // any round saw the gang without members.
        let mut f = Fixture::new([
            node("n4")
                .spot()
                .pods([member("a", "ns/train", 2).started(t(400))]),
            node("n5")
                .spot()
                .pods([member("b", "ns/train", 2).started(t(400))]),
            node("n3").spot().pods([pod("lone").checkpoints()]),
        ]);
        let mut quiet = Interruptions::default();
        assert_eq!(round(&mut quiet, &mut g, &f, t(500)), []);
        assert!(!g.is_draining("ns/train"), "the past drain is forgotten");
        let mut s = notice_at(&f, "n4", 1000);
        let actions = round(&mut s, &mut g, &f, t(1000));
        assert_eq!(
            requests(&actions),
            [
                ("a".to_string(), "n4".to_string(), t(1090)),
                ("b".to_string(), "n5".to_string(), t(1090)),
            ],
            "{actions:?}"
        );
        assert_eq!(g.pods_needing_replacement(&f.world()).len(), 2);
        f.node_mut("n4").pods[0].checkpoint_completed = Some(t(1010));
        f.node_mut("n5").pods[0].checkpoint_completed = Some(t(1020));
        assert_eq!(evictions(&round(&mut s, &mut g, &f, t(1020))), ["a", "b"]);
    }

    #[test]
    fn a_member_running_again_beside_one_still_leaving_is_neither_replaced_nor_evicted() {
        let (_, mut g) = drained_at_20();
        // `a` still terminates on n1 (its start unknown: taken for the pod
        // that was evicted); `b` already runs again on n5.
        let f = Fixture::new([
            node("n1").spot().pods([member("a", "ns/train", 2)]),
            node("n5")
                .spot()
                .pods([member("b", "ns/train", 2).started(t(400))]),
        ]);
        still_leaving_and_nothing_to_do(&mut g, &f, t(500));
        // A notice on b's new node starts a drain of its own.
        let mut s = notice_at(&f, "n5", 1000);
        let asked: Vec<String> = requests(&round(&mut s, &mut g, &f, t(1000)))
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert!(asked.contains(&"b".to_string()), "{asked:?}");
    }

    #[test]
    fn a_replacement_under_a_new_name_that_binds_while_the_old_run_terminates_is_left_alone() {
        let (_, mut g) = drained_at_20();
        // `a` and `b` still terminate; the Job's replacement `a2` already
        // runs on room that was free.
        let f = Fixture::new([
            node("n1").spot().pods([member("a", "ns/train", 2)]),
            node("n2").spot().pods([member("b", "ns/train", 2)]),
            node("n5")
                .spot()
                .pods([member("a2", "ns/train", 2).started(t(30))]),
        ]);
        still_leaving_and_nothing_to_do(&mut g, &f, t(40));
    }

    /// At `now`, without a notice: the old drain holds (its pods still
    /// terminate), nothing is asked or evicted, and the next run is not
    /// demand for replacement.
    fn still_leaving_and_nothing_to_do(g: &mut GangDrains, f: &Fixture, now: Time) {
        let mut quiet = Interruptions::default();
        assert_eq!(round(&mut quiet, g, f, now), []);
        assert!(g.is_draining("ns/train"), "the old run still leaves");
        assert!(g.pods_needing_replacement(&f.world()).is_empty());
    }

    #[test]
    fn the_next_run_of_a_member_whose_instance_went_is_not_evicted_with_the_rest() {
        let f = gang_world();
        let (mut s, mut g) = n1_terminated(&f);
        round(&mut s, &mut g, &f, t(0));
        // `a` runs again on n4 while `b` still checkpoints.
        let mut f = Fixture::new([
            node("n4")
                .spot()
                .pods([member("a", "ns/train", 2).started(t(30))]),
            node("n2").spot().pods([member("b", "ns/train", 2)]),
        ]);
        let leaving: Vec<String> = (g.pods_needing_replacement(&f.world()).iter())
            .map(|p| p.name.clone())
            .collect();
        assert_eq!(leaving, ["b"]);
        f.node_mut("n2").pods[0].checkpoint_completed = Some(t(40));
        assert_eq!(evictions(&round(&mut s, &mut g, &f, t(40))), ["b"]);
    }

    #[test]
    fn without_acknowledgements_the_whole_gang_is_evicted_at_the_deadline() {
        let f = gang_world();
        let (mut s, mut g) = spot_notice(&f, "n2");
        round(&mut s, &mut g, &f, t(0));
        assert_eq!(g.next_deadline(), Some(t(90)));
        assert_eq!(
            evictions(&round(&mut s, &mut g, &f, t(89))),
            [] as [&str; 0]
        );
        assert_eq!(evictions(&round(&mut s, &mut g, &f, t(90))), ["a", "b"]);
    }

    #[test]
    fn a_member_whose_checkpoint_cannot_finish_in_time_is_not_asked_nor_waited_for() {
        let mut f = gang_world();
        f.nodes[1].pods[0] = member("b", "ns/train", 2).checkpoint_takes(300.0);
        let (mut s, mut g) = spot_notice(&f, "n1");
        let asked: Vec<String> = requests(&round(&mut s, &mut g, &f, t(0)))
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(asked, ["a"]);
        f.node_mut("n1").pods[0].checkpoint_completed = Some(t(10));
        assert_eq!(evictions(&round(&mut s, &mut g, &f, t(10))), ["a", "b"]);
    }

    #[test]
    fn consolidation_evicting_one_member_checkpoints_the_gang_first_then_drains_it_whole() {
        let mut f = gang_world();
        let mut g = GangDrains::new();
        // Consolidation evicts `a` from n1 (it asks no checkpoint itself).
        let mut actions = vec![Action::Evict {
            pod: "a".into(),
            claim: "n1".into(),
        }];
        let leaving = |c: &str| c == "n1";
        let none = |_: &str| None;
        g.extend(&f.world(), &mut actions, t(0), &leaving, &none);
        // Held back; both asked by the pool's checkpoint grace period.
        assert_eq!(
            requests(&actions),
            [
                ("a".to_string(), "n1".to_string(), t(90)),
                ("b".to_string(), "n2".to_string(), t(90)),
            ]
        );
        assert_eq!(evictions(&actions), [] as [&str; 0]);
        f.node_mut("n1").pods[0].checkpoint_completed = Some(t(20));
        f.node_mut("n2").pods[0].checkpoint_completed = Some(t(25));
        let mut later = Vec::new();
        g.extend(&f.world(), &mut later, t(30), &leaving, &none);
        assert_eq!(evictions(&later), ["a", "b"]);
    }

    #[test]
    fn a_member_whose_instance_is_gone_takes_the_rest_of_the_gang_along() {
        let f = gang_world();
        let (mut s, mut g) = n1_terminated(&f);
        let actions = round(&mut s, &mut g, &f, t(0));
        assert!(actions.contains(&Action::Delete {
            claim: "n1".into(),
            reason: DisruptionReason::Terminated
        }));
        let asked: Vec<(String, String, Time)> = requests(&actions);
        assert_eq!(
            asked,
            [("b".to_string(), "n2".to_string(), t(90))],
            "the member whose instance is gone is not asked"
        );
        assert!(g.is_draining("ns/train"));
        // It is not waited for: b's acknowledgement drains the gang.
        let mut f = f;
        f.node_mut("n2").pods[0].checkpoint_completed = Some(t(10));
        assert_eq!(evictions(&round(&mut s, &mut g, &f, t(10))), ["a", "b"]);
    }

    #[test]
    fn a_lone_pod_and_a_one_pod_group_are_left_to_the_per_node_rule() {
        let mut f = gang_world();
        f.nodes[2].pods.push(member("solo", "ns/solo", 1));
        let (mut s, mut g) = spot_notice(&f, "n3");
        let actions = round(&mut s, &mut g, &f, t(0));
        let asked: Vec<String> = requests(&actions).into_iter().map(|r| r.0).collect();
        assert_eq!(asked, ["lone", "solo"]);
        assert!(!g.is_draining("ns/train"));
    }

    #[test]
    fn a_rebalance_checkpoint_asks_the_whole_gang_without_draining_it() {
        let mut f = gang_world();
        f.pools = vec![pool_with("gpu", |s| {
            s.interruption.on_rebalance_recommendation = crate::api::RebalanceAction::Checkpoint
        })];
        let mut s = Interruptions::default();
        let mut g = GangDrains::new();
        s.handle(&Notice::Rebalance { claim: "n1".into() }, &f.world(), t(0));
        let actions = round(&mut s, &mut g, &f, t(0));
        let asked: Vec<String> = requests(&actions).into_iter().map(|r| r.0).collect();
        assert_eq!(asked, ["a", "b"]);
        assert!(!g.is_draining("ns/train"));
        assert!(g.pods_needing_replacement(&f.world()).is_empty());
        assert_eq!(
            evictions(&round(&mut s, &mut g, &f, t(200))),
            [] as [&str; 0]
        );
    }
}
