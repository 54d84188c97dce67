//! The provisioning batch window (Karpenter's batcher): pods that become
//! pending close together are planned together, so that one plan packs them
//! onto a few well-chosen nodes instead of one node per pod. Owns only the
//! timing; which pods are pending and what to launch for them are read from
//! the [`World`](super::World) when the batch closes.
//!
//! A batch opens when a new pending pod is seen and closes ([`Batcher::ready`])
//! once no new pending pod has arrived for `idle` (default 1 s), or `max`
//! (default 10 s) after it opened, whichever comes first. See
//! `docs/lifecycle-timing.md`.
//!
//! "New pending pod" is defined by name: [`Batcher::observe_pending`] takes the
//! complete set of pods pending at `now`; a name that was not in the previous
//! call's set is new. A pod that stays pending does not extend the window; a
//! pod that leaves and comes back (a StatefulSet pod recreated under the same
//! name) is new again. Pods still pending after a plan (say, held back by a
//! limit) do not reopen a batch by themselves: call [`Batcher::trigger`] when
//! something else makes a new plan worthwhile (a launch failed, a node left).

use super::time::after;
use super::Time;
use std::collections::BTreeSet;
use std::time::Duration;

/// Default quiet period that closes a batch (Karpenter's `BATCH_IDLE_DURATION`).
pub const DEFAULT_IDLE: Duration = Duration::from_secs(1);
/// Default longest batch (Karpenter's `BATCH_MAX_DURATION`).
pub const DEFAULT_MAX: Duration = Duration::from_secs(10);

/// Collects pending pods into batches; see the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batcher {
    /// The batch closes once no new pending pod has arrived for this long.
    pub idle: Duration,
    /// The batch closes this long after it opened, however busy.
    pub max: Duration,
    /// Pods pending at the last observation, each with the number of the
    /// observation that last saw it: an observation of the same pods as the
    /// last (most of them, on every round) allocates nothing.
    pending: crate::core::FastMap<String, u64>,
    /// Observations so far.
    observed: u64,
    /// The open batch, if any.
    open: Option<OpenBatch>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct OpenBatch {
    opened_at: Time,
    last_activity: Time,
    pods: BTreeSet<String>,
}

/// A closed batch, for logs and events ("planned 12 pods batched over 3.2 s").
/// Decisions read the pending pods from the world, not from here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// When the first new pod (or trigger) opened it.
    pub opened_at: Time,
    /// When it was taken.
    pub closed_at: Time,
    /// Names of the pods that became pending while it was open, sorted.
    pub pods: Vec<String>,
}

impl Default for Batcher {
    fn default() -> Self {
        Batcher::new(DEFAULT_IDLE, DEFAULT_MAX)
    }
}

impl Batcher {
    /// A batcher with these durations and no open batch.
    pub fn new(idle: Duration, max: Duration) -> Batcher {
        Batcher {
            idle,
            max,
            pending: Default::default(),
            observed: 0,
            open: None,
        }
    }

    /// Reports the complete set of pods pending at `now` (by name). Each name
    /// absent from the previous report opens the batch, or keeps it open for
    /// another `idle`.
    pub fn observe_pending<I>(&mut self, pending: I, now: Time)
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.observed += 1;
        let stamp = self.observed;
        // Distinct names seen now (a name may be reported twice).
        let mut seen = 0;
        let mut new = Vec::new();
        for name in pending {
            let name = name.as_ref();
            match self.pending.get_mut(name) {
                Some(s) if *s == stamp => {}
                Some(s) => {
                    *s = stamp;
                    seen += 1;
                }
                None => {
                    self.pending.insert(name.to_string(), stamp);
                    seen += 1;
                    new.push(name.to_string());
                }
            }
        }
        if seen < self.pending.len() {
            self.pending.retain(|_, s| *s == stamp);
        }
        if !new.is_empty() {
            self.open_at(now).pods.extend(new);
        }
    }

    /// Opens a batch (or extends the open one) without a new pod: something
    /// other than a pod arrival makes a new plan worthwhile.
    pub fn trigger(&mut self, now: Time) {
        self.open_at(now);
    }

    fn open_at(&mut self, now: Time) -> &mut OpenBatch {
        let batch = self.open.get_or_insert_with(|| OpenBatch {
            opened_at: now,
            last_activity: now,
            pods: BTreeSet::new(),
        });
        batch.last_activity = batch.last_activity.max(now);
        batch
    }

    /// Whether a batch is open.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// Whether the open batch should be planned now: `idle` has passed since
    /// the last new pod, or `max` since it opened. False with no open batch.
    pub fn ready(&self, now: Time) -> bool {
        self.next_deadline().is_some_and(|d| now >= d)
    }

    /// When the open batch becomes [`ready`](Self::ready) if no new pod
    /// arrives; `None` with no open batch.
    pub fn next_deadline(&self) -> Option<Time> {
        self.open
            .as_ref()
            .map(|b| after(b.last_activity, self.idle).min(after(b.opened_at, self.max)))
    }

    /// Closes the open batch, ready or not, and returns it; `None` when no
    /// batch was open. The next new pending pod opens the next batch.
    pub fn take(&mut self, now: Time) -> Option<Batch> {
        self.open.take().map(|b| Batch {
            opened_at: b.opened_at,
            closed_at: now,
            pods: b.pods.into_iter().collect(),
        })
    }
}

/// Default most pods one plan considers ([`cap_batch`]): enough for any
/// realistic burst, small enough that one plan stays within its time limit.
pub const DEFAULT_MAX_PODS: usize = 2000;

/// A pending pod a plan leaves for a later batch, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deferred {
    /// `namespace/name`.
    pub pod: String,
    /// Why it waits (for its Event).
    pub reason: String,
}

/// Keeps at most `max` of `pending` for this plan, whole pod groups (gangs)
/// at a time and in the given order; the rest wait for a later batch. A
/// group larger than `max` never fits and says so. Unbounded batches (a
/// Job with `parallelism: 100000`) would take the planner past its limits.
/// [`BatchCap`] orders the units first, so that no pod waits for ever.
pub fn cap_batch(
    pending: Vec<crate::cluster::Pod>,
    max: usize,
) -> (Vec<crate::cluster::Pod>, Vec<Deferred>) {
    if pending.len() <= max {
        return (pending, Vec::new());
    }
    fill(units(pending), max)
}

/// The pods in units: a group's pods together, a lone pod alone, in order
/// of first appearance.
fn units(pending: Vec<crate::cluster::Pod>) -> Vec<Vec<crate::cluster::Pod>> {
    let mut units: Vec<Vec<crate::cluster::Pod>> = Vec::new();
    let mut unit_of_group: std::collections::HashMap<String, usize> = Default::default();
    for pod in pending {
        match pod.group.as_ref().map(|g| g.name.clone()) {
            Some(group) => match unit_of_group.get(&group) {
                Some(&i) => units[i].push(pod),
                None => {
                    unit_of_group.insert(group, units.len());
                    units.push(vec![pod]);
                }
            },
            None => units.push(vec![pod]),
        }
    }
    units
}

/// Keeps whole units, in order, while they fit in `max`.
fn fill(
    units: Vec<Vec<crate::cluster::Pod>>,
    max: usize,
) -> (Vec<crate::cluster::Pod>, Vec<Deferred>) {
    let (mut kept, mut deferred) = (Vec::new(), Vec::new());
    for unit in units {
        let reason = if unit.len() > max {
            format!(
                "its group of {} pending pods is larger than the {max} pods one plan considers (--max-batch-pods)",
                unit.len()
            )
        } else if kept.len() + unit.len() > max {
            format!("waits for the next batch: this one holds {max} pods (--max-batch-pods)")
        } else {
            kept.extend(unit);
            continue;
        };
        deferred.extend(unit.into_iter().map(|p| Deferred {
            pod: p.name,
            reason: reason.clone(),
        }));
    }
    (kept, deferred)
}

/// The batch cap, fair: [`cap_batch`] over the pending pods ordered so
/// that the units a plan considered least recently come first (a unit
/// never considered first of all; among equals, the given order). So when
/// more pods are pending than one plan considers, every pod is considered
/// in turn: a pod that no plan can place (thousands of them in namespace
/// `a-...`) does not keep a later one out of every batch.
#[derive(Debug, Default, Clone)]
pub struct BatchCap {
    /// Plans counted so far.
    plans: u64,
    /// Pod → the plan that last considered it (pods still pending only).
    considered: std::collections::HashMap<String, u64>,
}

impl BatchCap {
    /// At most `max` of `pending` for the next plan (see [`BatchCap`]),
    /// and the pods left for a later batch with why.
    pub fn cap(
        &mut self,
        pending: Vec<crate::cluster::Pod>,
        max: usize,
    ) -> (Vec<crate::cluster::Pod>, Vec<Deferred>) {
        if !self.considered.is_empty() {
            let names: std::collections::HashSet<&str> =
                pending.iter().map(|p| p.name.as_str()).collect();
            self.considered
                .retain(|pod, _| names.contains(pod.as_str()));
        }
        if pending.len() <= max {
            return (pending, Vec::new());
        }
        let mut units = units(pending);
        // Stable: among units last considered by the same plan, the given
        // order.
        units.sort_by_key(|unit| {
            unit.iter()
                .map(|p| self.considered.get(&p.name).copied().unwrap_or(0))
                .min()
                .unwrap_or(0)
        });
        fill(units, max)
    }

    /// A plan considered these pods.
    pub fn planned<'a>(&mut self, pods: impl IntoIterator<Item = &'a str>) {
        self.plans += 1;
        for pod in pods {
            self.considered.insert(pod.to_string(), self.plans);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn at(ms: i64) -> Time {
        Utc.with_ymd_and_hms(2026, 3, 2, 9, 0, 0).unwrap() + chrono::TimeDelta::milliseconds(ms)
    }

    #[test]
    fn an_empty_batcher_has_no_deadline_and_is_never_ready() {
        let mut b = Batcher::default();
        assert_eq!(b.next_deadline(), None);
        assert!(!b.ready(at(60_000)));
        b.observe_pending(Vec::<String>::new(), at(0));
        assert_eq!(b.next_deadline(), None);
        assert_eq!(b.take(at(0)), None);
    }

    #[test]
    fn closes_after_one_idle_second_without_new_pods() {
        let mut b = Batcher::default();
        b.observe_pending(["ml/a"], at(0));
        assert_eq!(b.next_deadline(), Some(at(1_000)));
        b.observe_pending(["ml/a", "ml/b"], at(600));
        assert_eq!(b.next_deadline(), Some(at(1_600)));
        // ml/a and ml/b still pending: not new, the window is not extended.
        b.observe_pending(["ml/a", "ml/b"], at(1_200));
        assert!(!b.ready(at(1_599)));
        assert!(b.ready(at(1_600)));
        let batch = b.take(at(1_600)).unwrap();
        assert_eq!(batch.opened_at, at(0));
        assert_eq!(batch.closed_at, at(1_600));
        assert_eq!(batch.pods, ["ml/a", "ml/b"]);
        assert_eq!(b.next_deadline(), None);
    }

    #[test]
    fn closes_at_ten_seconds_under_a_steady_trickle() {
        let mut b = Batcher::default();
        let mut names = Vec::new();
        // A new pod every 500 ms: the idle timer never fires.
        for i in 0..30 {
            names.push(format!("ml/p{i:02}"));
            b.observe_pending(&names, at(i * 500));
            if i * 500 < 10_000 {
                assert!(!b.ready(at(i * 500)), "ready too early at {i}");
            }
        }
        assert_eq!(b.next_deadline(), Some(at(10_000)));
        assert!(b.ready(at(10_000)));
        let batch = b.take(at(14_500)).unwrap();
        assert_eq!(batch.pods.len(), 30);
    }

    #[test]
    fn pods_left_pending_after_a_plan_do_not_open_a_batch_but_newcomers_do() {
        let mut b = Batcher::default();
        b.observe_pending(["ml/a"], at(0));
        b.take(at(1_000)).unwrap();
        b.observe_pending(["ml/a"], at(5_000));
        assert!(!b.is_open());
        b.observe_pending(["ml/a", "ml/b"], at(6_000));
        assert_eq!(b.next_deadline(), Some(at(7_000)));
        assert_eq!(b.take(at(7_000)).unwrap().pods, ["ml/b"]);
    }

    #[test]
    fn a_pod_that_leaves_and_returns_is_new_again() {
        let mut b = Batcher::default();
        b.observe_pending(["ml/s-0"], at(0));
        b.take(at(1_000));
        b.observe_pending(Vec::<&str>::new(), at(2_000));
        b.observe_pending(["ml/s-0"], at(3_000));
        assert_eq!(b.next_deadline(), Some(at(4_000)));
    }

    #[test]
    fn a_name_reported_twice_counts_once_and_is_forgotten_once_gone() {
        let mut b = Batcher::default();
        b.observe_pending(["ml/a", "ml/a", "ml/b"], at(0));
        assert_eq!(b.take(at(1_000)).unwrap().pods, ["ml/a", "ml/b"]);
        // Reported twice, one of the two gone: still a change, not the
        // same pods as before.
        b.observe_pending(["ml/a", "ml/a"], at(2_000));
        assert!(!b.is_open());
        b.observe_pending(["ml/a", "ml/b"], at(3_000));
        assert_eq!(b.take(at(4_000)).unwrap().pods, ["ml/b"]);
    }

    #[test]
    fn a_trigger_opens_a_batch_without_new_pods() {
        let mut b = Batcher::new(Duration::from_secs(2), Duration::from_secs(5));
        b.trigger(at(0));
        assert_eq!(b.next_deadline(), Some(at(2_000)));
        b.trigger(at(1_500));
        assert_eq!(b.next_deadline(), Some(at(3_500)));
        b.trigger(at(4_000));
        assert_eq!(b.next_deadline(), Some(at(5_000)), "max caps idle");
        assert!(b.take(at(5_000)).unwrap().pods.is_empty());
    }

    fn pod(name: &str, group: Option<(&str, u32)>) -> crate::cluster::Pod {
        let mut p = crate::cluster::Pod::new(name, Default::default());
        p.group = group.map(|(g, n)| crate::cluster::GroupRef {
            name: g.into(),
            min_member: n,
        });
        p
    }

    #[test]
    fn a_huge_gang_is_left_out_whole_and_the_rest_fill_the_batch() {
        let mut pending: Vec<_> = (0..5).map(|i| pod(&format!("ml/a-{i}"), None)).collect();
        pending.extend((0..100).map(|i| pod(&format!("ml/huge-{i}"), Some(("ml/huge", 100)))));
        pending.extend((0..4).map(|i| pod(&format!("ml/g-{i}"), Some(("ml/g", 4)))));
        pending.extend((0..3).map(|i| pod(&format!("ml/b-{i}"), None)));
        let (kept, deferred) = cap_batch(pending, 10);
        let names: Vec<&str> = kept.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "ml/a-0", "ml/a-1", "ml/a-2", "ml/a-3", "ml/a-4", "ml/g-0", "ml/g-1", "ml/g-2",
                "ml/g-3", "ml/b-0"
            ]
        );
        assert_eq!(deferred.len(), 100 + 2, "every pod left out is reported");
        let huge = deferred.iter().find(|d| d.pod == "ml/huge-7").unwrap();
        assert!(huge.reason.contains("group of 100"), "{}", huge.reason);
        let later = deferred.iter().find(|d| d.pod == "ml/b-2").unwrap();
        assert!(later.reason.contains("next batch"), "{}", later.reason);
    }

    #[test]
    fn a_batch_within_the_cap_is_kept_whole() {
        let pending: Vec<_> = (0..3).map(|i| pod(&format!("ml/a-{i}"), None)).collect();
        let (kept, deferred) = cap_batch(pending.clone(), 3);
        assert_eq!(kept, pending);
        assert!(deferred.is_empty());
    }

    #[test]
    fn the_fair_cap_considers_the_pods_the_last_plan_left_out_first() {
        let pending = || -> Vec<_> {
            (0..5)
                .map(|i| pod(&format!("a/p-{i}"), None))
                .chain([pod("b/x", None)])
                .collect()
        };
        let names = |pods: &[crate::cluster::Pod]| -> Vec<String> {
            pods.iter().map(|p| p.name.clone()).collect()
        };
        let mut cap = BatchCap::default();
        let (kept, deferred) = cap.cap(pending(), 3);
        assert_eq!(names(&kept), ["a/p-0", "a/p-1", "a/p-2"]);
        assert_eq!(deferred.len(), 3);
        // Until a plan considers them, the same pods are kept (the batch
        // does not churn).
        let (again, _) = cap.cap(pending(), 3);
        assert_eq!(again, kept);
        cap.planned(kept.iter().map(|p| p.name.as_str()));
        let (kept, _) = cap.cap(pending(), 3);
        assert_eq!(names(&kept), ["a/p-3", "a/p-4", "b/x"]);
        cap.planned(kept.iter().map(|p| p.name.as_str()));
        let (kept, _) = cap.cap(pending(), 3);
        assert_eq!(names(&kept), ["a/p-0", "a/p-1", "a/p-2"], "round robin");
    }
}
