//! First-fit-decreasing packing of pods into nodes: onto existing capacity
//! before anything is launched, and into the nodes of one chosen offering after
//! the MIP has decided how many to launch (opening more if the aggregate model
//! was optimistic, so a plan always holds every pod it claims to place).

use crate::api::labels as l;
use crate::cluster::requirements::untolerated;
use crate::cluster::resources::{CPU, MEMORY};
use crate::cluster::{Labels, NodeState, Pod, Resources, Taint};
use std::collections::BTreeSet;

/// The identity of a pod for hostname anti-affinity: pods with the same key
/// never share a node.
pub fn anti_affinity_key(pod: &Pod) -> Option<String> {
    if !pod.hostname_anti_affinity {
        return None;
    }
    Some(match &pod.group {
        Some(g) => g.name.clone(),
        None => format!("{:?}", pod.labels),
    })
}

/// An open node during packing.
#[derive(Debug, Clone)]
pub struct Bin {
    /// What is still free.
    pub free: Resources,
    /// Pods placed, by index.
    pub pods: Vec<usize>,
    anti: BTreeSet<String>,
}

impl Bin {
    /// An empty node with `free` room.
    pub fn new(free: Resources) -> Bin {
        Bin {
            free,
            pods: Vec::new(),
            anti: BTreeSet::new(),
        }
    }

    /// Whether `pod` fits by resources and anti-affinity.
    pub fn fits(&self, pod: &Pod) -> bool {
        pod.requests.fits_in(&self.free)
            && anti_affinity_key(pod).is_none_or(|k| !self.anti.contains(&k))
    }

    /// Places `pod` (index `i`); the caller checked [`Bin::fits`].
    pub fn put(&mut self, i: usize, pod: &Pod) {
        self.free.sub(&pod.requests);
        self.pods.push(i);
        if let Some(k) = anti_affinity_key(pod) {
            self.anti.insert(k);
        }
    }
}

/// Whether `pod` may run on a node with these labels and taints.
pub fn compatible(pod: &Pod, labels: &Labels, taints: &[Taint]) -> bool {
    untolerated(taints, &pod.tolerations).is_none() && pod.affinity.matches(labels)
}

/// Sort order for packing: accelerators, then CPU, then memory, largest first.
pub fn sort_largest_first(pods: &[Pod], idx: &mut [usize]) {
    let key = |p: &Pod| {
        let acc = p.requests.get(l::RESOURCE_GPU)
            + p.requests.get(l::RESOURCE_NEURON)
            + p.requests
                .iter()
                .filter(|(k, _)| k.starts_with(l::RESOURCE_MIG_PREFIX))
                .map(|(_, v)| v)
                .sum::<i64>();
        (acc, p.requests.get(CPU), p.requests.get(MEMORY))
    };
    idx.sort_by(|a, b| key(&pods[*b]).cmp(&key(&pods[*a])).then(a.cmp(b)));
}

/// Places as many of `which` as fit onto `nodes` (ready nodes before in-flight
/// claims, first fit, largest pods first). A gang is placed whole or not at
/// all. Returns `(pod index, node index)` placements and the pods left over.
pub fn place_on_existing(
    pods: &[Pod],
    which: &[usize],
    nodes: &[NodeState],
) -> (Vec<(usize, usize)>, Vec<usize>) {
    let mut order: Vec<usize> = (0..nodes.len())
        .filter(|&n| !nodes[n].unschedulable)
        .collect();
    order.sort_by_key(|&n| nodes[n].in_flight);
    let mut bins: Vec<Bin> = nodes.iter().map(|n| Bin::new(n.free())).collect();
    let mut idx = which.to_vec();
    sort_largest_first(pods, &mut idx);

    let mut placed: Vec<(usize, usize)> = Vec::new();
    let mut left = Vec::new();
    // Gang members go together: try each gang as a unit, in the order of its
    // largest member.
    let mut gangs_done = BTreeSet::new();
    for &i in &idx {
        let members: Vec<usize> = match &pods[i].group {
            Some(g) => {
                if !gangs_done.insert(g.name.clone()) {
                    continue;
                }
                idx.iter()
                    .copied()
                    .filter(|&j| pods[j].group.as_ref().is_some_and(|h| h.name == g.name))
                    .collect()
            }
            None => vec![i],
        };
        let saved = bins.clone();
        let mut tentative = Vec::new();
        let mut ok = true;
        for &m in &members {
            let spot = order.iter().copied().find(|&n| {
                compatible(&pods[m], &nodes[n].labels, &nodes[n].taints) && bins[n].fits(&pods[m])
            });
            match spot {
                Some(n) => {
                    bins[n].put(m, &pods[m]);
                    tentative.push((m, n));
                }
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            placed.extend(tentative);
        } else {
            bins = saved;
            left.extend(members);
        }
    }
    (placed, left)
}

/// Packs `which` into nodes that each offer `allocatable`, first fit
/// decreasing, opening as many nodes as needed (at least `min_nodes`, of
/// which empty ones are dropped). Pods that fit no empty node are returned
/// separately.
pub fn pack_new(
    pods: &[Pod],
    which: &[usize],
    allocatable: &Resources,
    min_nodes: usize,
) -> (Vec<Vec<usize>>, Vec<usize>) {
    let mut idx = which.to_vec();
    sort_largest_first(pods, &mut idx);
    let mut bins: Vec<Bin> = (0..min_nodes)
        .map(|_| Bin::new(allocatable.clone()))
        .collect();
    let mut misfits = Vec::new();
    for i in idx {
        let p = &pods[i];
        if let Some(b) = bins.iter_mut().find(|b| b.fits(p)) {
            b.put(i, p);
            continue;
        }
        let mut b = Bin::new(allocatable.clone());
        if b.fits(p) {
            b.put(i, p);
            bins.push(b);
        } else {
            misfits.push(i);
        }
    }
    (
        bins.into_iter()
            .filter(|b| !b.pods.is_empty())
            .map(|b| b.pods)
            .collect(),
        misfits,
    )
}
