//! The jobs waiting for a node, with their pods in the same order: the
//! core's world borrows the pods on every round, and the kube-scheduler's
//! bind reads them on most steps.

use crate::cluster::Pod;

/// Waiting jobs by index, ascending, and a copy of each one's pod beside
/// it. A job's pod is copied when it starts waiting and dropped when it
/// stops: rebuilding the whole list on every change cloned some hundred
/// pods a step on a large replay. A waiting job's pod does not change.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    jobs: Vec<usize>,
    pods: Vec<Pod>,
}

impl Waiting {
    /// Job `i` waits, with `pod`; nothing changes if it already does.
    pub(super) fn insert(&mut self, i: usize, pod: &Pod) {
        if let Err(at) = self.jobs.binary_search(&i) {
            self.jobs.insert(at, i);
            self.pods.insert(at, pod.clone());
        }
    }

    /// Job `i` waits no more.
    pub(super) fn remove(&mut self, i: usize) {
        if let Ok(at) = self.jobs.binary_search(&i) {
            self.jobs.remove(at);
            self.pods.remove(at);
        }
    }

    /// The waiting jobs, ascending.
    pub(super) fn jobs(&self) -> &[usize] {
        &self.jobs
    }

    /// Their pods, in the same order.
    pub(super) fn pods(&self) -> &[Pod] {
        &self.pods
    }

    /// How many jobs wait.
    pub(super) fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether no job waits.
    pub(super) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Resources;

    #[test]
    fn jobs_and_their_pods_stay_side_by_side_in_job_order() {
        let pod = |name: &str| Pod::new(name, Resources::new());
        let mut w = Waiting::default();
        w.insert(5, &pod("five"));
        w.insert(2, &pod("two"));
        w.insert(9, &pod("nine"));
        // Waiting again changes nothing, not even the pod kept.
        w.insert(2, &pod("other"));
        w.remove(5);
        w.remove(7);
        let names: Vec<&str> = w.pods().iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            (w.jobs(), names.as_slice()),
            (&[2, 9][..], &["two", "nine"][..])
        );
        assert_eq!(w.len(), 2);
        w.remove(2);
        w.remove(9);
        assert!(w.is_empty());
    }
}
