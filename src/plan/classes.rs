//! Pod classes: pods with identical requests and scheduling constraints are
//! planned together, so the model grows with the number of distinct shapes,
//! not the number of pods.

use crate::cluster::{GroupRef, NodeAffinity, Pod, Resources, Toleration, ZoneSpread};
use std::collections::HashMap;

/// Expected run time assumed for a pod that does not say (seconds).
pub const DEFAULT_EXPECTED_RUNTIME_S: f64 = 2.0 * 3600.0;
/// Time to get going again after an interruption (seconds): reschedule,
/// pull, load the last checkpoint.
pub const DEFAULT_RESTART_OVERHEAD_S: f64 = 300.0;

/// Pods that are interchangeable for planning.
#[derive(Debug, Clone)]
pub struct Class {
    /// The first pod of the class: its requests and scheduling constraints
    /// stand for all of them.
    pub pod: Pod,
    /// Hours of work lost when a pod of the class is interrupted: half the
    /// checkpoint interval if it checkpoints, otherwise its whole expected
    /// run, plus the restart overhead.
    pub lost_hours_per_interruption: f64,
    /// Indices of its pods in the planner's pod list.
    pub pods: Vec<usize>,
}

impl Class {
    /// A class of one pod (`pods[index]`).
    pub fn of(pod: &Pod, index: usize) -> Class {
        Class {
            pod: pod.clone(),
            lost_hours_per_interruption: lost_hours(pod),
            pods: vec![index],
        }
    }
}

#[derive(PartialEq, Eq, Hash)]
struct Key {
    requests: Resources,
    affinity: NodeAffinity,
    tolerations: Vec<Toleration>,
    zone_spread: Option<ZoneSpread>,
    anti: bool,
    group: Option<GroupRef>,
    lost_ms: u64,
}

/// Hours lost per interruption for `pod` (see [`Class::lost_hours_per_interruption`]).
pub fn lost_hours(pod: &Pod) -> f64 {
    let lost_s = match pod.checkpoint_interval_s {
        Some(i) => i / 2.0,
        None => pod.expected_runtime_s.unwrap_or(DEFAULT_EXPECTED_RUNTIME_S),
    };
    (lost_s + DEFAULT_RESTART_OVERHEAD_S) / 3600.0
}

/// Groups `pods` (the ones listed in `which`) into classes, in first-seen order.
pub fn classify(pods: &[Pod], which: &[usize]) -> Vec<Class> {
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut classes: Vec<Class> = Vec::new();
    for &i in which {
        let p = &pods[i];
        let mut tolerations = p.tolerations.clone();
        tolerations.sort();
        let lost = lost_hours(p);
        let key = Key {
            requests: p.requests.clone(),
            affinity: p.affinity.clone(),
            tolerations,
            zone_spread: p.zone_spread.clone(),
            anti: p.hostname_anti_affinity,
            group: p.group.clone(),
            lost_ms: (lost * 3_600_000.0) as u64,
        };
        let ci = *index.entry(key).or_insert_with(|| {
            classes.push(Class {
                pod: p.clone(),
                lost_hours_per_interruption: lost,
                pods: Vec::new(),
            });
            classes.len() - 1
        });
        classes[ci].pods.push(i);
    }
    classes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::resources::CPU;

    #[test]
    fn identical_pods_share_a_class_and_different_ones_do_not() {
        let a = Pod::new("a", Resources::new().with(CPU, 1000));
        let b = Pod::new("b", Resources::new().with(CPU, 1000));
        let c = Pod::new("c", Resources::new().with(CPU, 2000));
        let mut d = a.clone();
        d.checkpoint_interval_s = Some(600.0);
        let pods = vec![a, b, c, d];
        let classes = classify(&pods, &[0, 1, 2, 3]);
        assert_eq!(classes.len(), 3);
        assert_eq!(classes[0].pods, vec![0, 1]);
        assert!((classes[2].lost_hours_per_interruption - (300.0 + 300.0) / 3600.0).abs() < 1e-9);
    }
}
