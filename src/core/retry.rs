//! Actions that failed, issued again until they succeed or their object is
//! gone. The decisions that issue node actions (interruption response,
//! consolidation, gang drains, checkpoint cadence) count an action as done
//! once issued; the drivers report what became of each one
//! ([`super::Core::observe_outcome`]), and a failed one (a PodDisruptionBudget
//! said not yet, the API server answered 5xx, this replica lost the lease)
//! is kept here and issued again by [`super::Core::decide`] after a backoff.
//!
//! Order is kept on a node whose earlier step failed: nothing is evicted or
//! deleted on a node whose cordon has not been written (except the deletion
//! of a claim whose instance is gone already), and no pod is evicted while
//! its checkpoint request has not been written, until the request's
//! deadline. Such actions wait here ("held") and go out with or after the
//! step they wait for. An action whose object left the world (the claim, or
//! the pod from its node) is dropped: the world says it is moot.
//!
//! Launches are not kept here: a claim whose creation failed does not exist,
//! and its pods are planned again (see [`super::Core::observe_outcome`]).

use super::{Action, DisruptionReason, Time, World};
use std::time::Duration;

/// What became of an action the driver carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Written (or nothing needed writing).
    Done,
    /// Not written: a budget, a conflict, the API or the lease said no.
    /// Issued again after a backoff.
    Failed,
    /// Its object is gone (the pod or node no longer exists): nothing left
    /// to do.
    Gone,
}

/// Backoff of failed actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Wait before the first retry; doubled on every further failure.
    pub base: Duration,
    /// Longest wait between two tries.
    pub cap: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            base: Duration::from_secs(5),
            cap: Duration::from_secs(120),
        }
    }
}

impl Config {
    /// The wait after the `failures`-th failure in a row (1 or more):
    /// `base`, `2 base`, `4 base`, ... up to `cap`.
    pub fn backoff(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(20);
        self.base
            .checked_mul(1u32 << doublings)
            .unwrap_or(self.cap)
            .min(self.cap)
    }
}

/// What an action is about: kind, claim and pod (for the pod actions).
/// A new action with the same key replaces a pending one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    kind: &'static str,
    claim: String,
    pod: Option<String>,
}

fn key(a: &Action) -> Option<Key> {
    let (kind, claim, pod) = match a {
        Action::Launch(_) => return None,
        Action::Cordon { claim, .. } => ("cordon", claim, None),
        Action::Uncordon { claim } => ("uncordon", claim, None),
        Action::RequestCheckpoint { pod, claim, .. } => ("checkpoint", claim, Some(pod)),
        Action::Evict { pod, claim } => ("evict", claim, Some(pod)),
        Action::Delete { claim, .. } => ("delete", claim, None),
    };
    Some(Key {
        kind,
        claim: claim.clone(),
        pod: pod.cloned(),
    })
}

/// One action waiting to be issued (again).
#[derive(Debug, Clone)]
struct Pending {
    key: Key,
    action: Action,
    /// Failures in a row (0: held back behind another step, never tried).
    failures: u32,
    /// Not issued before this time.
    due: Time,
}

/// The failed and held-back actions.
#[derive(Debug, Clone, Default)]
pub struct Retries {
    config: Config,
    pending: Vec<Pending>,
    last_now: Option<Time>,
}

impl Retries {
    /// Nothing pending.
    pub fn new(config: Config) -> Retries {
        Retries {
            config,
            ..Retries::default()
        }
    }

    /// Takes in what became of `action` at `now`: done or gone forgets it,
    /// failed keeps it for another try after the backoff.
    pub fn observe(&mut self, action: &Action, outcome: Outcome, now: Time) {
        let Some(k) = key(action) else { return };
        let at = self.pending.iter().position(|p| p.key == k);
        match (outcome, at) {
            (Outcome::Done | Outcome::Gone, Some(i)) => {
                self.pending.remove(i);
            }
            (Outcome::Done | Outcome::Gone, None) => {}
            (Outcome::Failed, Some(i)) => {
                let p = &mut self.pending[i];
                p.failures += 1;
                p.due = super::time::after(now, self.config.backoff(p.failures));
                p.action = action.clone();
            }
            (Outcome::Failed, None) => self.pending.push(Pending {
                key: k,
                action: action.clone(),
                failures: 1,
                due: super::time::after(now, self.config.backoff(1)),
            }),
        }
    }

    /// Whether an action failed or is held and not done yet.
    pub fn is_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Merges the pending actions into this decision's `actions`: drops
    /// pending actions whose object left the world or that a new action
    /// replaces, adds those due (before the new ones, so that a node's
    /// cordon goes out before its evictions), and holds back actions that
    /// must wait for a step still pending.
    pub fn merge(&mut self, world: &World, now: Time, actions: &mut Vec<Action>) {
        self.last_now = Some(now);
        self.pending
            .retain(|p| !moot(world, &p.key) && !expired(&p.action, now));
        let fresh: Vec<Key> = actions.iter().filter_map(key).collect();
        self.pending.retain(|p| !fresh.contains(&p.key));
        let mut out: Vec<Action> = Vec::new();
        let mut waiting = Vec::new();
        for mut p in std::mem::take(&mut self.pending) {
            if p.due <= now {
                // Issued again; if no outcome comes back, it is due again
                // after the backoff anyway.
                p.due = super::time::after(now, self.config.backoff(p.failures.max(1)));
                out.push(p.action.clone());
            }
            waiting.push(p);
        }
        self.pending = waiting;
        out.append(actions);
        // Hold back what waits for a step that is pending and not going out
        // now (a cordon or checkpoint request in its backoff).
        let blocked = |a: &Action, out: &[Action]| -> bool {
            self.pending.iter().any(|p| {
                let going = out.iter().any(|o| key(o).as_ref() == Some(&p.key));
                !going && blocks(&p.action, a, now)
            })
        };
        let mut issued = Vec::with_capacity(out.len());
        let mut held = Vec::new();
        for a in out {
            if blocked(&a, &issued) {
                held.push(a);
            } else {
                issued.push(a);
            }
        }
        for a in held {
            let Some(k) = key(&a) else { continue };
            if !self.pending.iter().any(|p| p.key == k) {
                self.pending.push(Pending {
                    key: k,
                    action: a,
                    failures: 0,
                    due: now,
                });
            }
        }
        *actions = issued;
    }

    /// The earliest time a pending action is due after the last decision.
    pub fn next_deadline(&self) -> Option<Time> {
        self.pending
            .iter()
            .map(|p| p.due)
            .filter(|t| self.last_now.is_none_or(|n| *t > n))
            .min()
    }
}

/// Whether the pending action's object left the world: its claim, or (for
/// a pod action) the pod from its claim's node.
fn moot(world: &World, k: &Key) -> bool {
    let Some(node) = world.nodes.iter().find(|n| n.claim == k.claim) else {
        return true;
    };
    match &k.pod {
        Some(pod) => !node.pods.iter().any(|b| &b.pod.name == pod),
        None => false,
    }
}

/// Whether the action can no longer do any good: a checkpoint request
/// whose deadline passed.
fn expired(a: &Action, now: Time) -> bool {
    matches!(a, Action::RequestCheckpoint { deadline, .. } if *deadline <= now)
}

/// Whether `step`, pending, must succeed before `a` may go out: a cordon
/// before the node's checkpoint requests, evictions and deletion (a claim
/// whose instance is gone is deleted anyway); a checkpoint request before
/// its pod's eviction, until the request's deadline.
fn blocks(step: &Action, a: &Action, now: Time) -> bool {
    match (step, a) {
        (
            Action::Delete {
                reason: DisruptionReason::Terminated,
                ..
            },
            _,
        ) => false,
        (
            _,
            Action::Delete {
                reason: DisruptionReason::Terminated,
                ..
            },
        ) => false,
        (
            Action::Cordon { claim, .. },
            Action::RequestCheckpoint { claim: c, .. }
            | Action::Evict { claim: c, .. }
            | Action::Delete { claim: c, .. },
        ) => claim == c,
        (Action::RequestCheckpoint { pod, deadline, .. }, Action::Evict { pod: p, .. }) => {
            pod == p && now < *deadline
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::interruption::fixtures::{node, pod, t, Fixture, NodeExt};

    fn cordon(claim: &str) -> Action {
        Action::Cordon {
            claim: claim.into(),
            reason: DisruptionReason::Interrupted,
        }
    }

    fn evict(pod: &str, claim: &str) -> Action {
        Action::Evict {
            pod: pod.into(),
            claim: claim.into(),
        }
    }

    #[test]
    fn the_backoff_doubles_from_the_base_up_to_the_cap() {
        let c = Config::default();
        assert_eq!(c.backoff(1), Duration::from_secs(5));
        assert_eq!(c.backoff(2), Duration::from_secs(10));
        assert_eq!(c.backoff(4), Duration::from_secs(40));
        assert_eq!(c.backoff(9), Duration::from_secs(120));
        assert_eq!(c.backoff(u32::MAX), Duration::from_secs(120));
    }

    #[test]
    fn a_failed_cordon_is_issued_again_after_its_backoff_until_it_succeeds() {
        let f = Fixture::new([node("a").pods([pod("ml/x")])]);
        let w = f.world();
        let mut r = Retries::new(Config::default());
        r.observe(&cordon("a"), Outcome::Failed, t(0));
        let mut actions = Vec::new();
        r.merge(&w, t(1), &mut actions);
        assert!(actions.is_empty(), "not before its backoff");
        assert_eq!(r.next_deadline(), Some(t(5)));
        r.merge(&w, t(5), &mut actions);
        assert_eq!(actions, [cordon("a")]);
        // Failing again doubles the wait.
        r.observe(&cordon("a"), Outcome::Failed, t(5));
        actions.clear();
        r.merge(&w, t(14), &mut actions);
        assert!(actions.is_empty());
        r.merge(&w, t(15), &mut actions);
        assert_eq!(actions, [cordon("a")]);
        r.observe(&cordon("a"), Outcome::Done, t(15));
        assert!(!r.is_pending());
    }

    #[test]
    fn evictions_wait_for_a_failed_cordon_and_go_out_right_after_it() {
        let f = Fixture::new([node("a").pods([pod("ml/x")])]);
        let w = f.world();
        let mut r = Retries::new(Config::default());
        r.observe(&cordon("a"), Outcome::Failed, t(0));
        let mut actions = vec![evict("ml/x", "a")];
        r.merge(&w, t(1), &mut actions);
        assert!(actions.is_empty(), "held behind the cordon: {actions:?}");
        let mut actions = Vec::new();
        r.merge(&w, t(5), &mut actions);
        assert_eq!(actions, [cordon("a"), evict("ml/x", "a")]);
    }

    #[test]
    fn an_eviction_waits_for_its_pods_failed_checkpoint_request_until_its_deadline() {
        let f = Fixture::new([node("a").pods([pod("ml/x")])]);
        let w = f.world();
        let request = Action::RequestCheckpoint {
            pod: "ml/x".into(),
            claim: "a".into(),
            deadline: t(60),
        };
        let mut r = Retries::new(Config::default());
        r.observe(&request, Outcome::Failed, t(0));
        let mut actions = vec![evict("ml/x", "a")];
        r.merge(&w, t(1), &mut actions);
        assert!(actions.is_empty());
        r.observe(&request, Outcome::Failed, t(5));
        let mut actions = Vec::new();
        r.merge(&w, t(61), &mut actions);
        // Past the deadline the eviction goes; the request is moot.
        assert_eq!(actions, [evict("ml/x", "a")]);
    }

    #[test]
    fn an_action_whose_object_left_the_world_is_dropped() {
        let f = Fixture::new([node("a").pods([pod("ml/x")])]);
        let mut r = Retries::new(Config::default());
        r.observe(&evict("ml/gone", "a"), Outcome::Failed, t(0));
        r.observe(&cordon("b"), Outcome::Failed, t(0));
        let mut actions = Vec::new();
        r.merge(&f.world(), t(100), &mut actions);
        assert!(actions.is_empty());
        assert!(!r.is_pending());
    }

    #[test]
    fn a_new_action_on_the_same_object_replaces_the_pending_one() {
        let f = Fixture::new([node("a").pods([pod("ml/x")])]);
        let old = Action::RequestCheckpoint {
            pod: "ml/x".into(),
            claim: "a".into(),
            deadline: t(60),
        };
        let new = Action::RequestCheckpoint {
            pod: "ml/x".into(),
            claim: "a".into(),
            deadline: t(30),
        };
        let mut r = Retries::new(Config::default());
        r.observe(&old, Outcome::Failed, t(0));
        let mut actions = vec![new.clone()];
        r.merge(&f.world(), t(10), &mut actions);
        assert_eq!(actions, [new]);
        assert!(!r.is_pending());
    }
}
