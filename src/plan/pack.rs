//! First-fit-decreasing packing of pods into nodes: onto existing capacity
//! before anything is launched, and into the nodes of one chosen offering after
//! the MIP has decided how many to launch (opening more if the aggregate model
//! was optimistic, so a plan always holds every pod it claims to place).

use crate::cluster::requirements::untolerated;
use crate::cluster::requirements::{NodeAffinity, Toleration};
use crate::cluster::resources::{CPU, MEMORY};
use crate::cluster::{FastMap, NodeState, Pod, Resources, Taint};
use crate::labels as l;
use std::collections::BTreeMap;

/// The identity of a pod's set for its per-node cap
/// ([`Pod::per_node_max`]): at most that many pods with the same key share
/// a node.
pub fn anti_affinity_key(pod: &Pod) -> Option<String> {
    pod.per_node_max?;
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
    /// Pods per [`anti_affinity_key`] on the node.
    anti: BTreeMap<String, u32>,
}

impl Bin {
    /// An empty node with `free` room.
    pub fn new(free: Resources) -> Bin {
        Bin {
            free,
            pods: Vec::new(),
            anti: BTreeMap::new(),
        }
    }

    /// Whether `pod` fits by resources and its per-node cap.
    pub fn fits(&self, pod: &Pod) -> bool {
        pod.requests.fits_in(&self.free) && under_cap(pod, &self.anti)
    }

    /// The room left on an existing node, with the capped pods already
    /// bound to it ([`NodeState::capped`]).
    pub fn of_node(node: &NodeState) -> Bin {
        Bin {
            anti: node.capped.clone(),
            ..Bin::new(node.free())
        }
    }

    /// Places `pod` (index `i`); the caller checked [`Bin::fits`].
    pub fn put(&mut self, i: usize, pod: &Pod) {
        self.free.sub(&pod.requests);
        self.pods.push(i);
        if let Some(k) = anti_affinity_key(pod) {
            *self.anti.entry(k).or_default() += 1;
        }
    }

    /// Takes back the last pod placed, `pod` (a gang that did not fit whole,
    /// a move that did not complete).
    pub fn take_last(&mut self, pod: &Pod) {
        self.free.add(&pod.requests);
        self.pods.pop();
        if let Some(k) = anti_affinity_key(pod) {
            if let Some(n) = self.anti.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    self.anti.remove(&k);
                }
            }
        }
    }
}

/// Whether `pod` may run on a node with these labels and taints.
pub fn compatible<L: crate::labels::LabelLookup + ?Sized>(
    pod: &Pod,
    labels: &L,
    taints: &[Taint],
) -> bool {
    untolerated(taints, &pod.tolerations).is_none() && pod.affinity.matches(labels)
}

/// Yes-or-no answers by index, each worked out at most once: for a check
/// that many pods of a few kinds ask of the same nodes or candidates.
pub(crate) struct Asked(Vec<Option<bool>>);

impl Asked {
    /// Nothing asked yet of `len` indices.
    pub(crate) fn new(len: usize) -> Asked {
        Asked(vec![None; len])
    }

    /// The answer for `i`: `answer()` the first time, kept after.
    pub(crate) fn ask(&mut self, i: usize, answer: impl FnOnce() -> bool) -> bool {
        *self.0[i].get_or_insert_with(answer)
    }
}

/// Sort order for packing: accelerators, then CPU, then memory, largest first.
pub fn sort_largest_first(pods: &[Pod], idx: &mut [usize]) {
    let key = |p: &Pod| {
        (
            p.requests.accelerator_devices(),
            p.requests.get(CPU),
            p.requests.get(MEMORY),
        )
    };
    // Each key reads several resources by name: compute it once per pod.
    idx.sort_by_cached_key(|&i| (std::cmp::Reverse(key(&pods[i])), i));
}

/// Places as many of `which` as fit onto `nodes` (ready nodes before in-flight
/// claims, first fit, largest pods first). A gang is placed whole or not at
/// all. Returns `(pod index, node index)` placements and the pods left over.
///
/// `nodes` may be owned or borrowed states, so that a driver holding nodes
/// inside larger records need not clone them (the simulator binds pods on
/// most steps).
pub fn place_on_existing<N: std::borrow::Borrow<NodeState>>(
    pods: &[Pod],
    which: &[usize],
    nodes: &[N],
) -> (Vec<(usize, usize)>, Vec<usize>) {
    place_on_existing_where(pods, which, nodes, |_, _| true)
}

/// [`place_on_existing`], told which nodes a pod does not fit:
/// `may_take(pod, node)` is false only where the caller knows the pod does
/// not fit (it fit there no better before, and that node only lost room
/// since). Such nodes are passed over without reading their room, so a
/// driver that binds over a large cluster on most steps reads the nodes
/// that changed, not all of them, for pods that already waited. As with
/// every node a scan passes, later pods of the same requests, affinity and
/// tolerations are taken not to fit there either. A wrong `false` may
/// leave a pod unplaced; nothing is ever placed where it does not fit.
pub fn place_on_existing_where<N: std::borrow::Borrow<NodeState>>(
    pods: &[Pod],
    which: &[usize],
    nodes: &[N],
    may_take: impl Fn(usize, usize) -> bool,
) -> (Vec<(usize, usize)>, Vec<usize>) {
    let node = |n: usize| -> &NodeState { nodes[n].borrow() };
    let mut order: Vec<usize> = (0..nodes.len())
        .filter(|&n| !node(n).unschedulable)
        .collect();
    order.sort_by_key(|&n| node(n).in_flight);
    // A node's bin is opened when the first pod lands on it; until then its
    // room is read from the node itself.
    let mut bins: Vec<Option<Bin>> = vec![None; nodes.len()];
    let fits = |bins: &[Option<Bin>], n: usize, pod: &Pod| match &bins[n] {
        Some(b) => b.fits(pod),
        None => fits_free(pod, node(n)),
    };
    let mut idx = which.to_vec();
    sort_largest_first(pods, &mut idx);
    // Each node's free room and each pod's requests as numbers over the
    // resources these pods ask for: a full node is turned away without
    // looking resources up by name (that was most of a scan, and the
    // simulator binds on most steps over the whole cluster). A node's room
    // is read when a scan first reaches it.
    let quick = Quick::over(pods, &idx);
    let need = quick.needs(pods, &idx);
    let mut room = Rooms::new(&quick, nodes.len());

    let mut placed: Vec<(usize, usize)> = Vec::new();
    let mut left = Vec::new();
    // Where in `order` the first fit of a pod of each shape (requests,
    // affinity, tolerations) starts: room only shrinks as pods land, so a
    // node that did not take a pod of a shape takes no later one of it.
    // Thousands of identical pending pods then cost one scan, not one each.
    // A gang's undo frees room again and forgets it.
    let mut first_fit: FastMap<(&Resources, &NodeAffinity, &[Toleration]), usize> =
        FastMap::default();
    // Whether a node takes a pod depends on the pod's tolerations and
    // affinity alone: worked out once per node for each pair, not once per
    // pod shape. Matching labels was most of a scan's cost where pods
    // differ in their requests only.
    let mut takes: FastMap<(&NodeAffinity, &[Toleration]), Asked> = FastMap::default();
    // Gang members go together: each gang is tried as a unit when its
    // largest member comes up. Its members (largest first) are gathered
    // in one pass beforehand, and taken out when the gang is tried.
    let mut gangs: FastMap<&str, Vec<usize>> = FastMap::default();
    for &j in &idx {
        if let Some(g) = &pods[j].group {
            gangs.entry(g.name.as_str()).or_default().push(j);
        }
    }
    for &i in &idx {
        let members: Vec<usize> = match &pods[i].group {
            Some(g) => match gangs.remove(g.name.as_str()) {
                Some(members) => members,
                None => continue,
            },
            None => vec![i],
        };
        // A gang that must share one network block tries each block the
        // nodes are in, in turn: all its members in one of them.
        let blocks: Vec<Option<String>> = match &pods[members[0]].network_block {
            Some(key) => {
                let mut seen = Vec::new();
                for &n in &order {
                    if let Some(b) = block_of(node(n), key) {
                        if !seen.contains(&Some(b.clone())) {
                            seen.push(Some(b));
                        }
                    }
                }
                seen
            }
            None => vec![None],
        };
        let mut done = false;
        for block in &blocks {
            let in_block = |n: usize| match (block, &pods[members[0]].network_block) {
                (Some(b), Some(key)) => block_of(node(n), key).as_ref() == Some(b),
                _ => true,
            };
            let mut tentative = Vec::new();
            let mut ok = true;
            for &m in &members {
                let pod = &pods[m];
                let shape = (&pod.requests, &pod.affinity, pod.tolerations.as_slice());
                let from = match &pod.group {
                    None => first_fit.get(&shape).copied().unwrap_or(0),
                    Some(_) => 0,
                };
                let takes = takes
                    .entry((&pod.affinity, pod.tolerations.as_slice()))
                    .or_insert_with(|| Asked::new(nodes.len()));
                let mut compatible =
                    |n: usize| takes.ask(n, || compatible(pod, &node(n).labels, &node(n).taints));
                let need = &need[&m];
                let at = order[from..].iter().position(|&n| {
                    may_take(m, n)
                        && Quick::may_fit(need, room.read(&quick, n, node(n)))
                        && in_block(n)
                        && compatible(n)
                        && fits(&bins, n, pod)
                });
                if pod.group.is_none() {
                    first_fit.insert(shape, at.map_or(order.len(), |p| from + p));
                }
                match at.map(|p| order[from + p]) {
                    Some(n) => {
                        bins[n]
                            .get_or_insert_with(|| Bin::of_node(node(n)))
                            .put(m, &pods[m]);
                        if let Some(free) = room.get_mut(n) {
                            Quick::take(free, need);
                        }
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
                done = true;
                break;
            }
            // Undo the members placed so far, last first.
            if !tentative.is_empty() {
                first_fit.clear();
            }
            for &(m, n) in tentative.iter().rev() {
                if let Some(b) = bins[n].as_mut() {
                    b.take_last(&pods[m]);
                }
                if let Some(free) = room.get_mut(n) {
                    Quick::give(free, &need[&m]);
                }
            }
        }
        if !done {
            left.extend(members);
        }
    }
    (placed, left)
}

/// The network block of `node` for a gang that must share one value of
/// `key` (a `topology.k8s.aws/network-node-layer-N` label): the node's
/// value once it registered with it; before (in flight), its pool's
/// cluster placement group of its zone when it was launched into one
/// (`quartermaster.dev/cluster-placement`); `None` for a node in no known
/// block, which such a gang does not use.
pub fn block_of(node: &NodeState, key: &str) -> Option<String> {
    if let Some(v) = node.labels.get(key) {
        return Some(v.clone());
    }
    let label = |k: &str| node.labels.get(k).map(String::as_str);
    (label(l::CLUSTER_PLACEMENT) == Some("true")).then(|| {
        format!(
            "placement group of {}/{}",
            label(l::NODEPOOL).unwrap_or_default(),
            label(l::ZONE_ID).unwrap_or_default()
        )
    })
}

/// Whether `pod` may run on `node` as it is now: its taints and labels
/// allow it, and its free room and per-node caps take it.
pub fn takes_now(pod: &Pod, node: &NodeState) -> bool {
    fits_free(pod, node) && compatible(pod, &node.labels, &node.taints)
}

/// Whether `pod` fits in the free room of `node` ([`NodeState::free`]),
/// without building it.
fn fits_free(pod: &Pod, node: &NodeState) -> bool {
    pod.requests
        .iter()
        .all(|(k, v)| v <= (node.allocatable.get(k) - node.used.get(k)).max(0))
        && (node.capped.is_empty() || under_cap(pod, &node.capped))
}

/// Whether one more `pod` keeps its per-node cap beside `counts`, the pods
/// of each [`anti_affinity_key`] already on the node.
fn under_cap(pod: &Pod, counts: &BTreeMap<String, u32>) -> bool {
    anti_affinity_key(pod)
        .is_none_or(|k| counts.get(&k).copied().unwrap_or(0) < pod.per_node_max.unwrap_or(u32::MAX))
}

/// Amounts as numbers over the resources a set of pods asks for, so that
/// full bins are turned away without looking resources up by name:
/// [`Bin::fits`] does, and trying it on every full bin was half of the
/// planner's time on 20,000 pods. Only a quick "no"; `Bin::fits` decides.
pub struct Quick<'a> {
    names: Vec<&'a str>,
}

impl<'a> Quick<'a> {
    /// Over the resources any of `which` requests.
    pub fn over(pods: &'a [Pod], which: &[usize]) -> Quick<'a> {
        let names = which
            .iter()
            .flat_map(|&i| pods[i].requests.iter().filter(|(_, v)| *v > 0))
            .map(|(r, _)| r)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        Quick { names }
    }

    /// `r`'s amounts, in this set's order.
    pub fn amounts(&self, r: &Resources) -> Vec<i64> {
        self.names.iter().map(|n| r.get(n)).collect()
    }

    /// Each of `which`'s requests ([`Quick::amounts`]), by its index in
    /// `pods`.
    pub fn needs(&self, pods: &[Pod], which: &[usize]) -> FastMap<usize, Vec<i64>> {
        which
            .iter()
            .map(|&i| (i, self.amounts(&pods[i].requests)))
            .collect()
    }

    /// The free room of `node` ([`NodeState::free`]) in this set's order,
    /// written into `out` (as long as this set) without building it.
    fn free_into(&self, node: &NodeState, out: &mut [i64]) {
        for (o, n) in out.iter_mut().zip(&self.names) {
            *o = (node.allocatable.get(n) - node.used.get(n)).max(0);
        }
    }

    /// Whether `need` may fit in `free`: a resource the pod does not ask
    /// for is not compared, as [`Bin::fits`] does not.
    pub fn may_fit(need: &[i64], free: &[i64]) -> bool {
        need.iter().zip(free).all(|(q, f)| *q == 0 || q <= f)
    }

    /// Takes `need` from `free`.
    pub fn take(free: &mut [i64], need: &[i64]) {
        free.iter_mut().zip(need).for_each(|(f, q)| *f -= q);
    }

    /// Gives `need` back to `free`.
    pub fn give(free: &mut [i64], need: &[i64]) {
        free.iter_mut().zip(need).for_each(|(f, q)| *f += q);
    }
}

/// Each node's free room as [`Quick`] amounts, read from the node when
/// first asked, all in one buffer: a vector per node was a fifth of a
/// scan, and the simulator binds over the whole cluster on most steps.
struct Rooms {
    k: usize,
    free: Vec<i64>,
    read: Vec<bool>,
}

impl Rooms {
    /// Nothing read yet, for `nodes` nodes.
    fn new(quick: &Quick, nodes: usize) -> Rooms {
        let k = quick.names.len();
        Rooms {
            k,
            free: vec![0; nodes * k],
            read: vec![false; nodes],
        }
    }

    /// Node `n`'s room, read from `node` the first time.
    fn read(&mut self, quick: &Quick, n: usize, node: &NodeState) -> &[i64] {
        let at = n * self.k..(n + 1) * self.k;
        if !self.read[n] {
            self.read[n] = true;
            quick.free_into(node, &mut self.free[at.clone()]);
        }
        &self.free[at]
    }

    /// Node `n`'s room, if it was read.
    fn get_mut(&mut self, n: usize) -> Option<&mut [i64]> {
        let k = self.k;
        self.read[n].then(|| &mut self.free[n * k..(n + 1) * k])
    }
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
    let quick = Quick::over(pods, &idx);
    let mut room: Vec<Vec<i64>> = bins.iter().map(|b| quick.amounts(&b.free)).collect();
    for i in idx {
        let p = &pods[i];
        let need = quick.amounts(&p.requests);
        let found = bins
            .iter()
            .zip(&room)
            .position(|(b, free)| Quick::may_fit(&need, free) && b.fits(p));
        if let Some(at) = found {
            bins[at].put(i, p);
            Quick::take(&mut room[at], &need);
            continue;
        }
        let mut b = Bin::new(allocatable.clone());
        if b.fits(p) {
            b.put(i, p);
            room.push(quick.amounts(&b.free));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::labels as l;
    use crate::cluster::pod::GroupRef;
    use crate::cluster::Labels;

    #[test]
    fn asked_works_an_answer_out_once_per_index() {
        let mut asked = Asked::new(3);
        let mut calls = 0;
        let mut ask = |asked: &mut Asked, i: usize, yes: bool| {
            asked.ask(i, || {
                calls += 1;
                yes
            })
        };
        assert!(ask(&mut asked, 1, true));
        // Kept: a second answer for the same index is not asked for.
        assert!(ask(&mut asked, 1, false));
        assert!(!ask(&mut asked, 2, false));
        assert!(!ask(&mut asked, 2, true));
        assert_eq!(calls, 2);
    }

    fn node(name: &str, gpus: i64, used: i64) -> NodeState {
        NodeState {
            name: name.into(),
            nodepool: None,
            instance_type: None,
            zone: "use1-az1".into(),
            capacity_type: None,
            labels: Labels::new(),
            taints: Vec::new(),
            allocatable: Resources::new()
                .with(CPU, 8000)
                .with(crate::cluster::resources::PODS, 110)
                .with(l::RESOURCE_GPU, gpus),
            used: Resources::new().with(l::RESOURCE_GPU, used),
            price_per_hour: 1.0,
            in_flight: false,
            unschedulable: false,
            capped: Default::default(),
        }
    }

    fn pod(name: &str, gpus: i64, group: Option<&str>) -> Pod {
        let mut p = Pod::new(
            name,
            Resources::new().with(CPU, 1000).with(l::RESOURCE_GPU, gpus),
        );
        p.group = group.map(|g| GroupRef {
            name: g.into(),
            min_member: 3,
        });
        p
    }

    #[test]
    fn a_gang_that_does_not_fit_whole_gives_its_room_back() {
        // Two free GPUs; a gang of three one-GPU pods cannot fit, so both
        // GPUs must go to the two single pods that come after it.
        let nodes = vec![node("a", 1, 0), node("b", 4, 3)];
        let pods = vec![
            pod("g0", 1, Some("job")),
            pod("g1", 1, Some("job")),
            pod("g2", 1, Some("job")),
            pod("s0", 1, None),
            pod("s1", 1, None),
        ];
        let all: Vec<usize> = (0..pods.len()).collect();
        let (placed, left) = place_on_existing(&pods, &all, &nodes);
        let mut left = left;
        left.sort();
        assert_eq!(left, vec![0, 1, 2]);
        let mut on: Vec<usize> = placed.iter().map(|&(_, n)| n).collect();
        on.sort();
        assert_eq!(on, vec![0, 1], "{placed:?}");
    }

    #[test]
    fn borrowed_and_owned_nodes_place_alike_and_overcommitted_nodes_take_nothing() {
        // Node "c" uses more GPUs than it has (negative free room): nothing
        // goes there, as `NodeState::free` clamps at zero.
        let nodes = vec![node("c", 1, 2), node("d", 2, 0), node("e", 1, 0)];
        let pods = vec![pod("p0", 1, None), pod("p1", 2, None), pod("p2", 1, None)];
        let all: Vec<usize> = (0..pods.len()).collect();
        let owned = place_on_existing(&pods, &all, &nodes);
        let refs: Vec<&NodeState> = nodes.iter().collect();
        let borrowed = place_on_existing(&pods, &all, &refs);
        assert_eq!(owned, borrowed);
        // Largest first: p1 fills "d", p0 takes "e", p2 is left.
        assert_eq!(owned.0, vec![(1, 1), (0, 2)]);
        assert_eq!(owned.1, vec![2]);
    }

    #[test]
    fn a_pod_passes_over_the_nodes_it_is_said_not_to_fit_and_others_place_as_before() {
        // Both nodes have room. p0 is said not to fit "a", so it takes "b";
        // p1 (another shape, said nothing of) still takes "a" first.
        let nodes = vec![node("a", 2, 0), node("b", 2, 0)];
        let pods = vec![pod("p0", 2, None), pod("p1", 1, None)];
        let all = [0, 1];
        let (placed, left) = place_on_existing_where(&pods, &all, &nodes, |p, n| (p, n) != (0, 0));
        assert_eq!((placed, left), (vec![(0, 1), (1, 0)], vec![]));
        // Said to fit everywhere, a pod still goes only where it fits.
        let full = vec![node("c", 1, 1)];
        let (placed, left) = place_on_existing_where(&pods, &all, &full, |_, _| true);
        assert_eq!((placed, left), (vec![], vec![0, 1]));
    }

    #[test]
    fn packing_new_nodes_compares_only_what_each_pod_asks_for() {
        // A node short of GPUs (overhead above what it has) still holds the
        // two CPU pods together; the GPU pod fits no node of this shape.
        let alloc = Resources::new()
            .with(CPU, 4000)
            .with(crate::cluster::resources::PODS, 110)
            .with(l::RESOURCE_GPU, -1);
        let cpu = |name: &str| Pod::new(name, Resources::new().with(CPU, 1000));
        let pods = vec![pod("gpu", 1, None), cpu("a"), cpu("b")];
        let (nodes, misfits) = pack_new(&pods, &[0, 1, 2], &alloc, 0);
        assert_eq!(nodes, vec![vec![1, 2]]);
        assert_eq!(misfits, vec![0]);
    }
}
