//! The shared index the watches feed: which kinds are watched and synced,
//! the snapshot behind its lock, the generic watch loop and what each kind
//! keeps ([`Indexed`]).

use super::{strip, Interners, NodeInfo, PdbInfo, PodInfo, Snapshot};
use crate::api::{NodeClaim, NodePool};
use futures::StreamExt;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::Notify;

/// The kinds watched; the store is ready once every one has listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Pods.
    Pods = 0,
    /// Nodes.
    Nodes = 1,
    /// NodePools.
    NodePools = 2,
    /// NodeClaims.
    NodeClaims = 3,
    /// PodDisruptionBudgets.
    Pdbs = 4,
    /// Volcano PodGroups (watched only where served).
    VolcanoPodGroups = 5,
    /// Workload API PodGroups (watched only where served).
    SchedulingPodGroups = 6,
    /// ProvisioningRequests (watched only where served).
    ProvisioningRequests = 7,
    /// PodTemplates (watched where ProvisioningRequests or CapacityBuffers
    /// are served).
    PodTemplates = 8,
    /// DRA DeviceClasses (watched where `resource.k8s.io/v1` is served).
    DeviceClasses = 9,
    /// DRA ResourceClaims.
    ResourceClaims = 10,
    /// DRA ResourceClaimTemplates.
    ResourceClaimTemplates = 11,
    /// DRA ResourceSlices.
    ResourceSlices = 12,
    /// CapacityBuffers (watched only where served).
    CapacityBuffers = 13,
    /// Deployments (watched where CapacityBuffers are served: a buffer's
    /// `scalableRef`).
    Deployments = 14,
    /// StatefulSets (as Deployments).
    StatefulSets = 15,
    /// ReplicaSets (as Deployments).
    ReplicaSets = 16,
    /// Jobs (as Deployments).
    Jobs = 17,
}

/// Kinds every cluster serves: the store waits for each of them.
const REQUIRED_KINDS: usize = 5;
/// Every kind, required or optional.
const KINDS: usize = 18;

/// The shared index: the snapshot behind a lock, which kinds have synced,
/// and a wake-up for the main loop on every change.
#[derive(Debug, Default)]
pub struct Store {
    snapshot: RwLock<Snapshot>,
    synced: [AtomicBool; KINDS],
    /// Optional kinds being watched (the store waits for those too).
    watched: [AtomicBool; KINDS],
    /// What the pods share (locked only while one pod is distilled).
    interners: Mutex<Interners>,
    /// Notified on every change (one stored permit: changes coalesce).
    pub changed: Notify,
}

impl Store {
    /// An empty, unsynced store.
    pub fn new() -> Store {
        Store::default()
    }

    /// Runs `f` on the current snapshot (a read lock held for its length;
    /// never across an `.await`).
    pub fn read<T>(&self, f: impl FnOnce(&Snapshot) -> T) -> T {
        let guard = self.snapshot.read().unwrap_or_else(|e| e.into_inner());
        f(&guard)
    }

    /// The shared values, for distilling objects (never held across an
    /// `.await`).
    pub fn interners(&self) -> std::sync::MutexGuard<'_, Interners> {
        self.interners.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self, f: impl FnOnce(&mut Snapshot)) {
        {
            let mut guard = self.snapshot.write().unwrap_or_else(|e| e.into_inner());
            f(&mut guard);
        }
        self.changed.notify_one();
    }

    /// Changes the snapshot outside of a watch (what is known about the
    /// cluster when the watches start).
    pub fn update(&self, f: impl FnOnce(&mut Snapshot)) {
        self.write(f);
    }

    /// Whether every kind has completed its first list.
    pub fn is_synced(&self) -> bool {
        self.synced.iter().enumerate().all(|(i, s)| {
            s.load(Ordering::Acquire)
                || (i >= REQUIRED_KINDS && !self.watched[i].load(Ordering::Acquire))
        })
    }

    /// Makes the store wait for an optional kind's first list (its watch is
    /// starting).
    pub fn expect(&self, kind: Kind) {
        self.watched[kind as usize].store(true, Ordering::Release);
    }

    fn mark_synced(&self, kind: Kind) {
        self.synced[kind as usize].store(true, Ordering::Release);
    }

    /// Adds or replaces one object.
    pub fn apply<K: Indexed>(&self, obj: K) {
        let key = K::key(&obj);
        let item = obj.distill(&mut self.interners());
        self.write(|s| match item {
            Some(item) => {
                K::slot(s).insert(key, item);
            }
            None => {
                K::slot(s).remove(&key);
            }
        });
    }

    /// Removes one object.
    pub fn delete<K: Indexed>(&self, obj: &K) {
        let key = K::key(obj);
        self.write(|s| {
            K::slot(s).remove(&key);
        });
    }

    /// Replaces every object of the kind (after a full list) and marks the
    /// kind synced.
    pub fn reset<K: Indexed>(&self, objs: Vec<K>) {
        let mut items = Relist::<K>::default();
        objs.into_iter().for_each(|o| items.push(self, o));
        self.reset_distilled(items);
    }

    /// [`Store::reset`] with objects distilled as they were listed.
    pub fn reset_distilled<K: Indexed>(&self, items: Relist<K>) {
        self.write(|s| *K::slot(s) = items.items);
        // What only the replaced objects held goes now.
        self.interners().sweep();
        self.mark_synced(K::KIND);
    }
}

/// A full list of one kind being received: each object distilled as it
/// comes (a relist of 100,000 pods holds 100,000 [`PodInfo`]s, never
/// 100,000 API objects), swapped into the store whole at its end.
pub struct Relist<K: Indexed> {
    items: BTreeMap<String, K::Item>,
}

impl<K: Indexed> Default for Relist<K> {
    fn default() -> Self {
        Relist {
            items: BTreeMap::new(),
        }
    }
}

impl<K: Indexed> Relist<K> {
    /// Distills and keeps one listed object (a finished pod is left out),
    /// sharing values through `store`'s interners.
    pub fn push(&mut self, store: &Store, obj: K) {
        let key = K::key(&obj);
        if let Some(item) = obj.distill(&mut store.interners()) {
            self.items.insert(key, item);
        }
    }
}

/// A kind the store indexes: how it is keyed, distilled and where it goes.
pub trait Indexed: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static {
    /// What the store keeps.
    type Item;
    /// Which kind it is.
    const KIND: Kind;
    /// `name`, or `namespace/name`.
    fn key(&self) -> String {
        match self.meta().namespace.as_deref() {
            Some(ns) => format!("{ns}/{}", self.meta().name.as_deref().unwrap_or("")),
            None => self.meta().name.clone().unwrap_or_default(),
        }
    }
    /// The item to keep, or `None` to keep nothing (a finished pod);
    /// repeated values are shared through `interners`.
    fn distill(self, interners: &mut Interners) -> Option<Self::Item>;
    /// The snapshot's map for the kind.
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, Self::Item>;
}

impl Indexed for core::Pod {
    type Item = PodInfo;
    const KIND: Kind = Kind::Pods;
    fn distill(self, interners: &mut Interners) -> Option<PodInfo> {
        PodInfo::from_k8s(&self, chrono::Utc::now(), interners)
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, PodInfo> {
        &mut s.pods
    }
}

impl Indexed for core::Node {
    type Item = NodeInfo;
    const KIND: Kind = Kind::Nodes;
    fn distill(self, _: &mut Interners) -> Option<NodeInfo> {
        Some(NodeInfo::from_k8s(&self))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, NodeInfo> {
        &mut s.nodes
    }
}

impl Indexed for NodePool {
    type Item = NodePool;
    const KIND: Kind = Kind::NodePools;
    fn distill(self, _: &mut Interners) -> Option<NodePool> {
        Some(strip(self))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, NodePool> {
        &mut s.pools
    }
}

impl Indexed for NodeClaim {
    type Item = NodeClaim;
    const KIND: Kind = Kind::NodeClaims;
    fn distill(self, _: &mut Interners) -> Option<NodeClaim> {
        Some(strip(self))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, NodeClaim> {
        &mut s.claims
    }
}

impl Indexed for PodDisruptionBudget {
    type Item = PdbInfo;
    const KIND: Kind = Kind::Pdbs;
    fn distill(self, _: &mut Interners) -> Option<PdbInfo> {
        Some(PdbInfo::from_k8s(&self))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, PdbInfo> {
        &mut s.pdbs
    }
}

/// Feeds one kind into the store until the stream ends (it does not: the
/// watcher retries with backoff; errors are logged). A relist is distilled
/// as it comes ([`Relist`]) and swapped in whole at its end, so a
/// half-listed kind is never seen.
pub async fn watch<K: Indexed>(api: Api<K>, config: watcher::Config, store: Arc<Store>) {
    let mut stream = watcher(api, config).default_backoff().boxed();
    let mut relist = Relist::<K>::default();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => relist = Relist::default(),
            Ok(Event::InitApply(k)) => relist.push(&store, k),
            Ok(Event::InitDone) => store.reset_distilled(std::mem::take(&mut relist)),
            Ok(Event::Apply(k)) => store.apply(k),
            Ok(Event::Delete(k)) => store.delete(&k),
            Err(e) => tracing::warn!(kind = ?K::KIND, error = %e, "watch error, retrying"),
        }
    }
}

/// Checks that every watched kind can be listed (CRDs installed, RBAC in
/// place), so that a misconfigured controller fails at start rather than
/// retrying forever.
///
/// # Errors
/// The first kind that cannot be listed.
pub async fn check_access(client: &kube::Client) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let lp = kube::api::ListParams::default().limit(1);
    Api::<core::Pod>::all(client.clone())
        .list_metadata(&lp)
        .await
        .context("listing pods")?;
    Api::<core::Node>::all(client.clone())
        .list_metadata(&lp)
        .await
        .context("listing nodes")?;
    Api::<NodePool>::all(client.clone())
        .list_metadata(&lp)
        .await
        .context("listing NodePools (are the CRDs installed?)")?;
    Api::<NodeClaim>::all(client.clone())
        .list_metadata(&lp)
        .await
        .context("listing NodeClaims (are the CRDs installed?)")?;
    Api::<PodDisruptionBudget>::all(client.clone())
        .list_metadata(&lp)
        .await
        .context("listing PodDisruptionBudgets")?;
    Ok(())
}

/// Starts the five watches on `store`; they run until the returned handles
/// are aborted.
pub fn spawn_watches(
    client: &kube::Client,
    store: &Arc<Store>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let config = || watcher::Config::default().any_semantic().page_size(500);
    vec![
        tokio::spawn(watch(
            Api::<core::Pod>::all(client.clone()),
            config(),
            store.clone(),
        )),
        tokio::spawn(watch(
            Api::<core::Node>::all(client.clone()),
            config(),
            store.clone(),
        )),
        tokio::spawn(watch(
            Api::<NodePool>::all(client.clone()),
            config(),
            store.clone(),
        )),
        tokio::spawn(watch(
            Api::<NodeClaim>::all(client.clone()),
            config(),
            store.clone(),
        )),
        tokio::spawn(watch(
            Api::<PodDisruptionBudget>::all(client.clone()),
            config(),
            store.clone(),
        )),
    ]
}
