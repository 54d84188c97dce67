//! The drain of a NodeClaim being deleted (`kubectl delete nodeclaim`, a
//! launch or initialization timeout, a gang released, any of the core's
//! own deletions), pod by pod, as a pure function of what the pods and
//! the claim say and the time: the NodeClaim finalizer carries it out.
//!
//! - A pod that opted in to checkpoints (or whose pool has a checkpoint
//!   hook) is asked to checkpoint, by the end of its pool's
//!   `checkpointGracePeriod` from the start of the deletion, and evicted
//!   once it acknowledged or that time passed. The deadline is derived from
//!   the deletion's start, so a restarted controller asks the same.
//! - A pod with `quartermaster.dev/do-not-disrupt` is not evicted: it holds
//!   the drain until the claim's `terminationGracePeriod` (as in Karpenter).
//! - Once the claim's `terminationGracePeriod` is set, every pod still
//!   there is deleted early enough to finish by the claim's deadline:
//!   at the deadline minus the pod's own `terminationGracePeriodSeconds`,
//!   so that its grace period is honoured. The instance is terminated at
//!   the deadline (or as soon as the node is empty).
//! - Every other pod is evicted (PDBs apply).
//!
//! The rules are written up in `docs/disruption.md` ("Deleting a
//! NodeClaim").

use super::Time;
use std::time::Duration;

/// The deletion of one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deletion {
    /// When the deletion started (the claim's `deletionTimestamp`).
    pub started: Time,
    /// The claim's `terminationGracePeriod`, if any: the longest the drain
    /// may take.
    pub grace: Option<Duration>,
    /// The pool's `checkpointGracePeriod`.
    pub checkpoint_grace: Duration,
}

impl Deletion {
    /// When the instance is terminated whatever is left: the start plus
    /// the claim's grace period.
    pub fn deadline(&self) -> Option<Time> {
        self.grace.map(|g| super::time::after(self.started, g))
    }

    /// The checkpoint deadline of a pod with grace `pod_grace`: the end of
    /// the pool's checkpoint grace period, but early enough that the pod
    /// can still be deleted with its own grace period before the claim's
    /// deadline.
    pub fn checkpoint_deadline(&self, pod_grace: Duration) -> Time {
        let until = super::time::after(self.started, self.checkpoint_grace);
        match self.delete_at(pod_grace) {
            Some(at) => until.min(at),
            None => until,
        }
    }

    /// When a pod with grace `pod_grace` still there is deleted: the
    /// claim's deadline minus the pod's grace period.
    pub fn delete_at(&self, pod_grace: Duration) -> Option<Time> {
        let deadline = self.deadline()?;
        Some(
            chrono::TimeDelta::from_std(pod_grace)
                .ok()
                .and_then(|g| deadline.checked_sub_signed(g))
                .unwrap_or(self.started)
                .max(self.started),
        )
    }
}

/// A pod on the node being drained, as the finalizer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainPod {
    /// `namespace/name`.
    pub name: String,
    /// Carries `quartermaster.dev/do-not-disrupt`.
    pub do_not_disrupt: bool,
    /// Opted in to checkpoint signals (or its pool has a hook).
    pub checkpoints: bool,
    /// The deadline of its last checkpoint request
    /// (`quartermaster.dev/checkpoint-requested`), if any.
    pub requested: Option<Time>,
    /// It acknowledged its last checkpoint request.
    pub acknowledged: bool,
    /// Terminating already (evicted or deleted).
    pub terminating: bool,
    /// Its own `terminationGracePeriodSeconds`.
    pub grace: Duration,
}

/// What to do with one pod now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodStep {
    /// Ask it to checkpoint by `deadline` (it is waited for).
    RequestCheckpoint {
        /// The checkpoint deadline.
        deadline: Time,
    },
    /// Leave it for now (terminating, checkpointing, or do-not-disrupt).
    Wait,
    /// Evict it (PDBs apply).
    Evict,
    /// Delete it (the claim's grace period leaves no time for PDBs).
    Delete,
}

/// The drain's next step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Each pod's step, in the order given.
    pub pods: Vec<(String, PodStep)>,
    /// Terminate the instance now: no pod is left, or the claim's deadline
    /// has come.
    pub terminate: bool,
    /// The next time the plan changes without the pods changing.
    pub next: Option<Time>,
}

/// The drain at `now` (see the module doc). `pods` are the node's pods
/// other than DaemonSet pods.
pub fn plan(deletion: &Deletion, pods: &[DrainPod], now: Time) -> Plan {
    let mut next: Vec<Time> = Vec::new();
    let mut steps = Vec::with_capacity(pods.len());
    for p in pods {
        let step = pod_step(deletion, p, now, &mut next);
        steps.push((p.name.clone(), step));
    }
    let deadline = deletion.deadline();
    next.extend(deadline);
    let terminate = pods.is_empty() || deadline.is_some_and(|d| now >= d);
    Plan {
        pods: steps,
        terminate,
        next: next.into_iter().filter(|t| *t > now).min(),
    }
}

fn pod_step(deletion: &Deletion, p: &DrainPod, now: Time, next: &mut Vec<Time>) -> PodStep {
    if let Some(at) = deletion.delete_at(p.grace) {
        if now >= at {
            return if p.terminating {
                PodStep::Wait
            } else {
                PodStep::Delete
            };
        }
        next.push(at);
    }
    if p.terminating || p.do_not_disrupt {
        return PodStep::Wait;
    }
    if !p.checkpoints {
        return PodStep::Evict;
    }
    match p.requested.filter(|d| *d >= deletion.started) {
        // Asked for this drain (or a request still open when it started).
        Some(deadline) => {
            if p.acknowledged || now >= deadline {
                PodStep::Evict
            } else {
                next.push(deadline);
                PodStep::Wait
            }
        }
        None => {
            let deadline = deletion.checkpoint_deadline(p.grace);
            if now >= deadline {
                PodStep::Evict
            } else {
                next.push(deadline);
                PodStep::RequestCheckpoint { deadline }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::interruption::fixtures::t;

    fn deletion(grace: Option<u64>) -> Deletion {
        Deletion {
            started: t(0),
            grace: grace.map(Duration::from_secs),
            checkpoint_grace: Duration::from_secs(90),
        }
    }

    fn pod(name: &str) -> DrainPod {
        DrainPod {
            name: name.into(),
            do_not_disrupt: false,
            checkpoints: false,
            requested: None,
            acknowledged: false,
            terminating: false,
            grace: Duration::from_secs(30),
        }
    }

    fn steps(plan: &Plan) -> Vec<PodStep> {
        plan.pods.iter().map(|(_, s)| *s).collect()
    }

    #[test]
    fn a_checkpointing_pod_is_asked_first_and_evicted_once_it_acknowledged() {
        let d = deletion(None);
        let mut p = DrainPod {
            checkpoints: true,
            ..pod("ml/train")
        };
        let first = plan(&d, &[p.clone()], t(1));
        assert_eq!(
            steps(&first),
            [PodStep::RequestCheckpoint { deadline: t(90) }]
        );
        assert!(!first.terminate);
        assert_eq!(first.next, Some(t(90)));
        // Asked (a restart asks nothing new): it is waited for.
        p.requested = Some(t(90));
        assert_eq!(steps(&plan(&d, &[p.clone()], t(10))), [PodStep::Wait]);
        p.acknowledged = true;
        assert_eq!(steps(&plan(&d, &[p.clone()], t(20))), [PodStep::Evict]);
        // Without an answer it goes at the deadline.
        p.acknowledged = false;
        assert_eq!(steps(&plan(&d, &[p], t(90))), [PodStep::Evict]);
    }

    #[test]
    fn an_old_request_from_before_the_deletion_does_not_count() {
        let p = DrainPod {
            checkpoints: true,
            requested: Some(t(-600)),
            acknowledged: true,
            ..pod("ml/train")
        };
        assert_eq!(
            steps(&plan(&deletion(None), &[p], t(1))),
            [PodStep::RequestCheckpoint { deadline: t(90) }]
        );
    }

    #[test]
    fn do_not_disrupt_holds_the_drain_until_the_grace_period_then_the_pod_is_deleted() {
        let p = DrainPod {
            do_not_disrupt: true,
            ..pod("ml/serve")
        };
        let forever = plan(&deletion(None), std::slice::from_ref(&p), t(100_000));
        assert_eq!(steps(&forever), [PodStep::Wait]);
        assert!(!forever.terminate);
        let d = deletion(Some(600));
        assert_eq!(
            steps(&plan(&d, std::slice::from_ref(&p), t(500))),
            [PodStep::Wait]
        );
        // Deleted its own 30 s before the claim's deadline.
        let at = plan(&d, std::slice::from_ref(&p), t(570));
        assert_eq!(steps(&at), [PodStep::Delete]);
        assert!(!at.terminate, "the instance waits for the deadline");
        assert!(plan(&d, &[p], t(600)).terminate);
    }

    #[test]
    fn pods_are_deleted_early_enough_to_finish_their_own_grace_period_by_the_deadline() {
        let d = deletion(Some(600));
        let long = DrainPod {
            grace: Duration::from_secs(300),
            ..pod("ml/slow")
        };
        let quick = DrainPod {
            grace: Duration::from_secs(10),
            ..pod("ml/quick")
        };
        // Evicted first (a PDB may keep them); deleted when their time comes.
        let early = plan(&d, &[long.clone(), quick.clone()], t(299));
        assert_eq!(steps(&early), [PodStep::Evict, PodStep::Evict]);
        assert_eq!(early.next, Some(t(300)));
        let mid = plan(&d, &[long.clone(), quick.clone()], t(300));
        assert_eq!(steps(&mid), [PodStep::Delete, PodStep::Evict]);
        let late = plan(&d, &[long, quick], t(590));
        assert_eq!(steps(&late), [PodStep::Delete, PodStep::Delete]);
        assert!(!late.terminate);
    }

    #[test]
    fn the_checkpoint_wait_ends_early_enough_to_delete_the_pod_in_time() {
        let d = Deletion {
            checkpoint_grace: Duration::from_secs(600),
            ..deletion(Some(300))
        };
        let p = DrainPod {
            checkpoints: true,
            ..pod("ml/train")
        };
        assert_eq!(
            steps(&plan(&d, &[p], t(0))),
            [PodStep::RequestCheckpoint { deadline: t(270) }]
        );
    }

    #[test]
    fn an_empty_node_is_terminated_at_once() {
        let p = plan(&deletion(Some(600)), &[], t(0));
        assert!(p.terminate);
        assert!(p.pods.is_empty());
    }
}
