//! Pod classes: pods with identical requests and scheduling constraints are
//! planned together, so the model grows with the number of distinct shapes,
//! not the number of pods.

use super::risk::{exposure, slack_hours, Exposure};
use crate::cluster::{GroupRef, NodeAffinity, Pod, Resources, Toleration, ZoneSpread};
type Time = chrono::DateTime<chrono::Utc>;
use std::collections::HashMap;

/// Pods that are interchangeable for planning.
#[derive(Debug, Clone)]
pub struct Class {
    /// The first pod of the class: its requests and scheduling constraints
    /// stand for all of them.
    pub pod: Pod,
    /// What an interruption costs a pod of the class (see [`super::risk`]).
    pub exposure: Exposure,
    /// Hours of slack before its deadline at planning time, if it has a
    /// deadline and the planner honours deadlines (the greedy baseline, like
    /// Karpenter, does not).
    pub slack_hours: Option<f64>,
    /// Indices of its pods in the planner's pod list.
    pub pods: Vec<usize>,
}

impl Class {
    /// A class of one pod (`pods[index]`).
    pub fn of(pod: &Pod, index: usize) -> Class {
        Class {
            pod: pod.clone(),
            exposure: exposure(pod),
            slack_hours: None,
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
    per_node_max: Option<u32>,
    group: Option<GroupRef>,
    lost_ms: u64,
    /// Expected run time in steps of 10% (pods within one step share the
    /// first one's risk).
    runtime_step: i64,
    /// Slack in tenths of an hour.
    slack: Option<i64>,
}

/// Groups `pods` (the ones listed in `which`) into classes, in first-seen
/// order; with `now`, pods with deadlines carry their slack.
pub fn classify(pods: &[Pod], which: &[usize], now: Option<Time>) -> Vec<Class> {
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut classes: Vec<Class> = Vec::new();
    for &i in which {
        let p = &pods[i];
        let mut tolerations = p.tolerations.clone();
        tolerations.sort();
        let exposure = exposure(p);
        let slack = now.and_then(|now| slack_hours(p, now));
        let key = Key {
            requests: p.requests.clone(),
            affinity: p.affinity.clone(),
            tolerations,
            zone_spread: p.zone_spread.clone(),
            per_node_max: p.per_node_max,
            group: p.group.clone(),
            lost_ms: (exposure.lost_hours * 3_600_000.0) as u64,
            runtime_step: ((exposure.runtime_hours * 3600.0).max(1.0).ln() * 10.0).round() as i64,
            slack: slack.map(|h| (h * 10.0).floor() as i64),
        };
        let ci = *index.entry(key).or_insert_with(|| {
            classes.push(Class {
                pod: p.clone(),
                exposure,
                slack_hours: slack,
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
        let classes = classify(&pods, &[0, 1, 2, 3], None);
        assert_eq!(classes.len(), 3);
        assert_eq!(classes[0].pods, vec![0, 1]);
        assert_ne!(classes[2].exposure, classes[0].exposure);
    }
}
