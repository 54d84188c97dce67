//! Gangs that arrive as ProvisioningRequests, as Kueue's ProvisioningRequest
//! admission check makes them: a gang's pods are held back, a
//! `best-effort-atomic-scale-up` request for them goes to the core
//! ([`crate::core::provisioning`], the rule the controller follows), and the
//! pods are created once it is `Provisioned` (or, when it `Failed`, as plain
//! pods, as Kueue would after its retries). The simulated requests live only
//! here: the controller reads real ones from the API.

use crate::api::foreign::conditions;
use crate::cluster::Pod;
use crate::core::provisioning::{self, Class, Request, Transition};
use crate::core::{ManagedNode, Time};
use std::collections::BTreeMap;

/// Pod label the workload generator sets on the members of gangs that
/// arrive as ProvisioningRequests.
pub const LABEL: &str = "sim.quartermaster.dev/provisioning-request";

/// One open request: the jobs it holds back and its conditions.
#[derive(Debug, Clone, Default)]
struct Open {
    jobs: Vec<usize>,
    pods: Vec<Pod>,
    conditions: Vec<(String, bool, String, Time)>,
}

/// The open requests, by gang name.
#[derive(Debug, Clone, Default)]
pub struct Requests {
    open: BTreeMap<String, Open>,
    /// Requests provisioned so far.
    pub provisioned: u32,
    /// Requests failed so far.
    pub failed: u32,
}

/// What one step hands the engine.
#[derive(Debug, Default)]
pub struct StepOut {
    /// Stand-ins for the open requests' pods, as pending demand.
    pub pending: Vec<Pod>,
    /// Jobs to create now (their request is provisioned or failed).
    pub release: Vec<usize>,
    /// Conditions set.
    pub transitions: Vec<Transition>,
}

impl Requests {
    /// No request is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// A job arrives: when its pod is a gang member carrying [`LABEL`], it is
    /// held back under its gang's request (returns `true`).
    pub fn arrive(&mut self, job: usize, pod: &Pod) -> bool {
        let Some(g) = pod
            .group
            .as_ref()
            .filter(|_| pod.labels.contains_key(LABEL))
        else {
            return false;
        };
        let open = self.open.entry(g.name.clone()).or_default();
        open.jobs.push(job);
        open.pods.push(pod.clone());
        true
    }

    /// One round of the core's ProvisioningRequest step over the open
    /// requests; `unplaceable` says why the last plan found no place for a
    /// pod.
    pub fn step(
        &mut self,
        nodes: &[ManagedNode],
        unplaceable: &dyn Fn(&str) -> Option<String>,
        now: Time,
    ) -> StepOut {
        let requests: Vec<Request> = self
            .open
            .iter()
            .map(|(name, o)| Request {
                name: name.clone(),
                class: Class::Atomic,
                pods: Ok(o.pods.clone()),
                consumed: 0,
                valid_until: Ok(None),
                no_retry: false,
                conditions: o.conditions.clone(),
            })
            .collect();
        let step = provisioning::step(&requests, nodes, unplaceable, now);
        let mut out = StepOut {
            pending: step.pending,
            ..StepOut::default()
        };
        for t in &step.transitions {
            let Some(open) = self.open.get_mut(&t.request) else {
                continue;
            };
            open.conditions.retain(|(k, ..)| k != t.condition);
            open.conditions
                .push((t.condition.into(), t.status, t.reason.into(), now));
            let done = t.status
                && (t.condition == conditions::PROVISIONED || t.condition == conditions::FAILED);
            if done {
                if t.condition == conditions::PROVISIONED {
                    self.provisioned += 1;
                } else {
                    self.failed += 1;
                }
                if let Some(o) = self.open.remove(&t.request) {
                    out.release.extend(o.jobs);
                }
            }
        }
        out.transitions = step.transitions;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{GroupRef, Resources};

    fn member(name: &str, labelled: bool) -> Pod {
        let mut p = Pod::new(name, Resources::new().with("nvidia.com/gpu", 1));
        p.group = Some(GroupRef {
            name: "train/g".into(),
            min_member: 2,
        });
        if labelled {
            p.labels.insert(LABEL.into(), "true".into());
        }
        p
    }

    #[test]
    fn labelled_gang_members_wait_for_their_request_and_others_do_not() {
        let mut r = Requests::default();
        assert!(!r.arrive(0, &member("train/g-0", false)));
        assert!(r.arrive(1, &member("train/g-0", true)));
        assert!(r.arrive(2, &member("train/g-1", true)));
        let t0 = chrono::DateTime::from_timestamp(0, 0).unwrap();
        let out = r.step(&[], &|_| None, t0);
        assert_eq!(out.pending.len(), 2, "the whole gang is demand");
        assert!(out.release.is_empty());
        // The planner finds no place: the request fails and the pods are
        // created as plain pods.
        let out = r.step(&[], &|_| Some("no pool".into()), t0);
        assert_eq!(out.release, [1, 2]);
        assert_eq!((r.provisioned, r.failed), (0, 1));
        assert!(r.is_empty());
    }
}
