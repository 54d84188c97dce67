//! The controller's main loop: waits for the reflectors to sync, then on
//! every batch, notice and timer builds the snapshot, runs the core (only
//! while this replica leads) and hands the actions to the executor; also
//! drives the NodeClaim lifecycle and garbage collection.

use super::checkpoint::{HookClient, Outstanding};
use super::events::Events;
use super::executor::{self, Executor, HookAcks, Outcome, Targets};
use super::interruptions::NoticeHandler;
use super::kube_api::KubeApi;
use super::lifecycle::{Lifecycle, Step};
use super::simulated_nodes;
use super::snapshot::{self, ClaimView, Store, WorldParts};
use super::status;
use crate::api::{NodeClaim, NodePool};
use crate::catalog::Catalog;
use crate::cloud::{self, CloudProvider, InstanceNotice, NoticeAcks};
use crate::core::{Action, Core, ManagedNode, Time, World};
use crate::metrics::{InterruptionLabels, Metrics, NodeLabels, PoolLabels};
use kube::ResourceExt;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Settings of the loop that do not come from the cluster.
#[derive(Debug, Clone)]
pub struct Settings {
    /// AWS region (catalog offerings are per region).
    pub region: String,
    /// Cluster name, for ownership tags and Events.
    pub cluster_name: String,
    /// The core's configuration (batching, interruption, consolidation).
    pub core: crate::core::Config,
    /// Longest sleep between rounds when nothing happens.
    pub tick: Duration,
    /// A claim without a provider ID this long after creation is deleted
    /// and re-planned.
    pub launch_timeout: Duration,
    /// A launched claim whose node has not registered this long after the
    /// launch is deleted and re-planned.
    pub registration_timeout: Duration,
    /// Instances with our tag and no NodeClaim older than this are
    /// terminated.
    pub gc_grace: Duration,
    /// Reading GPU use from Prometheus (DCGM), when configured.
    pub gpu_use: Option<super::gpu_use::GpuUseSettings>,
}

/// What the loop talks to, built by the `controller` command.
pub struct Context<C> {
    /// Writes to the Kubernetes API.
    pub api: KubeApi,
    /// Launches and terminates instances.
    pub cloud: Arc<C>,
    /// Metrics to update.
    pub metrics: Arc<Metrics>,
    /// The catalog, replaced when prices are refreshed.
    pub catalog: watch::Receiver<Arc<Catalog>>,
    /// `true` while this replica holds the lease; only then does it write.
    pub leader: watch::Receiver<bool>,
    /// Set once every reflector has synced; `/readyz` reads it.
    pub ready: Arc<AtomicBool>,
    /// Notices from the cloud (spot interruptions, rebalance, state changes).
    pub notices: mpsc::Receiver<InstanceNotice>,
    /// Where what became of each notice is reported to the feed, which
    /// deletes a message only once its notices are recorded.
    pub notice_acks: NoticeAcks,
    /// The cloud is simulated: the loop creates Node objects for its
    /// instances itself (as Karpenter's kwok provider does).
    pub simulated_nodes: bool,
}

/// How often garbage collection compares the cloud's instances with the
/// NodeClaims.
pub const GC_EVERY: Duration = Duration::from_secs(300);

/// After a watch reports a change, how long to wait for more before a round
/// (a burst of pod events makes one round, not hundreds).
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// How long a draining claim waits before its evictions are retried.
pub const DRAIN_RETRY: Duration = Duration::from_secs(5);

/// How long a claim this process created counts in the world before the
/// watch delivers it.
const UNSEEN_CLAIM_TTL: Duration = Duration::from_secs(60);

/// Runs until `shutdown` is cancelled, then finishes the round in flight
/// and returns.
///
/// The order of one round: read the snapshot; hand new cloud notices to the
/// core; if leader, run the core and execute its actions, reconcile every
/// NodeClaim's lifecycle, keep simulated nodes in step, collect garbage
/// every [`GC_EVERY`]; update metrics; sleep until the core's next deadline,
/// `tick`, a watch change, a notice or a leadership change.
///
/// # Errors
/// A watch that cannot start (missing CRDs, no permission).
pub async fn run<C: CloudProvider + Send + Sync + 'static>(
    ctx: Context<C>,
    settings: Settings,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let client = ctx.api.client().clone();
    run_watching(ctx, settings, client, shutdown).await
}

/// [`run`] with the watches on `watches`, a client whose read timeout
/// outlasts a quiet watch (the API client's is shorter: a request must not
/// hang).
///
/// # Errors
/// As [`run`].
pub async fn run_watching<C: CloudProvider + Send + Sync + 'static>(
    ctx: Context<C>,
    settings: Settings,
    watches: kube::Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let client = ctx.api.client().clone();
    snapshot::check_access(&watches).await?;
    let store = Arc::new(Store::new());
    // Gangs from other projects' APIs: watched only where served.
    let served = super::podgroups::discover(&watches)
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, "API discovery failed: PodGroups and ProvisioningRequests are not watched");
            Default::default()
        });
    let mut watches_of = super::podgroups::spawn_watches(&watches, &store, &served);
    let mut watches = snapshot::spawn_watches(&watches, &store);
    watches.append(&mut watches_of);
    let stop_watches = || watches.iter().for_each(|w| w.abort());
    tracing::info!("waiting for the watches to sync");
    while !store.is_synced() {
        // Waiting for the caches is progress: a slow first list is not a
        // stall.
        ctx.metrics.progress.beat();
        tokio::select! {
            _ = shutdown.cancelled() => {
                stop_watches();
                return Ok(());
            }
            _ = store.changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    ctx.ready.store(true, Ordering::Release);
    tracing::info!("watches synced; deciding");
    let gpu_use = settings.gpu_use.clone();
    let mut driver = Driver::new(ctx, settings, store.clone(), chrono::Utc::now());
    driver.events = Some(Events::new(client.clone(), std::env::var("POD_NAME").ok()));
    if let Some(g) = gpu_use {
        let readings = super::gpu_use::spawn_reader(&g, shutdown.clone())?;
        driver.read_gpu_use(g, readings);
    }
    driver.run(&shutdown).await;
    stop_watches();
    Ok(())
}

/// The loop's state between rounds.
pub struct Driver<C> {
    ctx: Context<C>,
    settings: Settings,
    store: Arc<Store>,
    core: Core,
    last_gc: Option<Time>,
    next_deadline: Option<Time>,
    notices: NoticeHandler,
    inbox: Vec<InstanceNotice>,
    /// Claims created by this process that the watch may not have
    /// delivered yet, so that the next round does not plan their pods again.
    created: Vec<(NodeClaim, Time)>,
    /// Claims being drained, with when their evictions are retried.
    drain_backoff: HashMap<String, Time>,
    /// Kubernetes Events (left out in tests).
    pub events: Option<Events>,
    hooks: HookClient,
    hook_acks: HookAcks,
    outstanding: Outstanding,
    /// Pods with an outstanding checkpoint request (to look them up).
    requested: std::collections::BTreeSet<String>,
    leader_open: bool,
    notices_open: bool,
    /// The reason last published in a not-placeable Event, per pending pod,
    /// so an unchanged reason is not published every round.
    unplaceable: HashMap<String, String>,
    /// Pods whose unreadable annotations were reported in an Event.
    unreadable: snapshot::UnreadableReports,
    /// The actions of this round's decision.
    decided: Vec<Action>,
    /// What repair reported last (holds are reported when they change).
    repair_reports: super::repair::RepairReports,
    /// GPU use read from Prometheus, when configured
    /// ([`Driver::read_gpu_use`]).
    gpu_use: Option<super::gpu_use::GpuUseState>,
}

/// The NodeClaim lifecycle over a driver's API, cloud and timeouts (a free
/// function: it borrows only these, so the driver's other fields stay
/// writable while it works).
fn lifecycle_of<'a, C>(ctx: &'a Context<C>, settings: &'a Settings) -> Lifecycle<'a, C> {
    Lifecycle {
        api: &ctx.api,
        cloud: &*ctx.cloud,
        metrics: &ctx.metrics,
        launch_timeout: settings.launch_timeout,
        registration_timeout: settings.registration_timeout,
        catalog: ctx.catalog.borrow().clone(),
        region: &settings.region,
    }
}

/// Seconds since the first call, on a monotonic clock: the planner's timer
/// ([`Core::with_solve_clock`]).
fn monotonic_seconds() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}

impl<C: CloudProvider + Send + Sync + 'static> Driver<C> {
    /// A driver over a synced store; `now` tags this process' claim names.
    pub fn new(ctx: Context<C>, settings: Settings, store: Arc<Store>, now: Time) -> Driver<C> {
        Driver {
            core: Core::new(settings.core.clone())
                .with_solve_clock(monotonic_seconds)
                .with_claim_tag(&executor::boot_tag(now)),
            ctx,
            settings,
            store,
            last_gc: None,
            next_deadline: None,
            notices: NoticeHandler::new(),
            inbox: Vec::new(),
            created: Vec::new(),
            drain_backoff: HashMap::new(),
            events: None,
            hooks: HookClient::new(),
            hook_acks: HookAcks::default(),
            outstanding: Outstanding::default(),
            requested: Default::default(),
            leader_open: true,
            notices_open: true,
            unplaceable: HashMap::new(),
            unreadable: Default::default(),
            decided: Vec::new(),
            repair_reports: Default::default(),
            gpu_use: None,
        }
    }

    /// Takes GPU use from `readings` (see `gpu_use::spawn_reader`) into
    /// every round from now on.
    pub fn read_gpu_use(
        &mut self,
        settings: super::gpu_use::GpuUseSettings,
        readings: watch::Receiver<Option<Arc<super::gpu_use::Reading>>>,
    ) {
        self.gpu_use = Some(super::gpu_use::GpuUseState::new(settings, readings));
    }

    /// Runs the core on a blocking thread (the planner may take seconds on
    /// a big batch; the async workers keep serving watches, leases and
    /// probes), leaving its actions in `self.decided`; gives `parts` back.
    async fn decide_off_loop(
        &mut self,
        parts: WorldParts,
        catalog: Arc<Catalog>,
        now: Time,
    ) -> Option<WorldParts> {
        let region = self.settings.region.clone();
        let fresh = Core::new(self.settings.core.clone()).with_solve_clock(monotonic_seconds);
        let mut core = std::mem::replace(&mut self.core, fresh);
        let decided = tokio::task::spawn_blocking(move || {
            let actions = core.decide(&parts.world(&catalog, &region), now);
            (core, actions, parts)
        })
        .await;
        match decided {
            Ok((core, actions, parts)) => {
                self.core = core;
                self.decided = actions;
                Some(parts)
            }
            Err(e) => {
                // The core's state went with the panic; a fresh core
                // decides again from the world next round.
                tracing::error!(error = %e, "the decision core failed; starting afresh");
                self.decided = Vec::new();
                None
            }
        }
    }

    /// A Warning Event on each pod the batch cap left for a later batch,
    /// once per reason.
    async fn report_deferred(&mut self, deferred: &[crate::core::batch::Deferred]) {
        for d in deferred {
            if self.unplaceable.get(&d.pod) == Some(&d.reason)
                || crate::cluster::podgroups::is_reservation(&d.pod)
            {
                continue;
            }
            if let Some(events) = &self.events {
                events
                    .batch_deferred(&super::events::pod_ref(&d.pod, None), &d.reason)
                    .await;
            }
            self.unplaceable.insert(d.pod.clone(), d.reason.clone());
        }
    }

    /// Reports the last plan: its solve time, and a Warning Event on each
    /// pod it could not place whose reason is new. Pods no longer pending
    /// are forgotten.
    async fn report_plan(
        &mut self,
        pending: &[crate::cluster::Pod],
        deferred: &[crate::core::batch::Deferred],
        now: Time,
    ) {
        let Some(report) = self.core.last_plan().filter(|r| r.at == now) else {
            return;
        };
        self.ctx
            .metrics
            .solve_duration_seconds
            .observe(report.solve_seconds);
        let fresh: Vec<(String, String)> = report
            .unschedulable
            .iter()
            .filter(|u| !crate::core::prewarm::is_placeholder(&u.pod))
            .filter(|u| !crate::cluster::podgroups::is_reservation(&u.pod))
            .filter(|u| self.unplaceable.get(&u.pod) != Some(&u.reason))
            .map(|u| (u.pod.clone(), u.reason.clone()))
            .collect();
        let still: HashSet<&str> = pending
            .iter()
            .map(|p| p.name.as_str())
            .chain(deferred.iter().map(|d| d.pod.as_str()))
            .collect();
        self.unplaceable
            .retain(|pod, _| still.contains(pod.as_str()));
        for (pod, reason) in fresh {
            tracing::info!(%pod, %reason, "cannot place pod");
            if let Some(events) = &self.events {
                events
                    .not_placeable(&super::events::pod_ref(&pod, None), &reason)
                    .await;
            }
            self.unplaceable.insert(pod, reason);
        }
    }

    /// A Warning Event on each pod whose unreadable annotations are new.
    async fn report_unreadable(&mut self) {
        let fresh = self.store.read(|s| self.unreadable.fresh(s));
        for (pod, problems) in fresh {
            tracing::warn!(%pod, ?problems, "pod annotations unreadable");
            if let Some(events) = &self.events {
                events
                    .annotation_unreadable(&super::events::pod_ref(&pod, None), &problems)
                    .await;
            }
        }
    }

    async fn run(&mut self, shutdown: &CancellationToken) {
        loop {
            let now = chrono::Utc::now();
            self.round(now).await;
            self.ctx.metrics.progress.beat();
            if shutdown.is_cancelled() {
                return;
            }
            let wait = sleep_for(self.next_deadline, chrono::Utc::now(), self.settings.tick);
            let (leader_open, notices_open) = (self.leader_open, self.notices_open);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(wait) => {}
                _ = self.store.changed.notified() => {
                    tokio::time::sleep(DEBOUNCE).await;
                }
                n = self.ctx.notices.recv(), if notices_open => match n {
                    Some(n) => self.inbox.push(n),
                    None => self.notices_open = false,
                },
                r = self.ctx.leader.changed(), if leader_open => {
                    if r.is_err() {
                        self.leader_open = false;
                    }
                }
            }
            self.ctx.metrics.progress.beat();
        }
    }

    fn is_leader(&self) -> bool {
        *self.ctx.leader.borrow()
    }

    /// One round at `now` (see [`run`]).
    pub async fn round(&mut self, now: Time) {
        let started = std::time::Instant::now();
        let catalog = self.ctx.catalog.borrow().clone();
        let region = self.settings.region.clone();
        let created = std::mem::take(&mut self.created);
        let (parts, views, nodes_by_claim) = self.store.read(|s| {
            let mut parts =
                snapshot::world_parts(s, &catalog, &region, now, self.settings.core.max_batch_pods);
            snapshot::mark_drift(s, &mut parts.nodes, &|c| self.ctx.cloud.launch_stamp(c));
            // What the cloud can launch for each pool (EC2: the variants its
            // node class has images for) narrows the pool's requirements.
            for pool in &mut parts.pools {
                let extra = self.ctx.cloud.pool_requirements(&pool.name_any());
                pool.spec.template.spec.requirements.extend(extra);
                // A pool the cloud cannot launch for (its EC2NodeClass is
                // missing or not Ready) is marked not Ready for this
                // round's decisions, so that nothing is planned for it; the
                // status write and the node class reconciler's Event say why.
                if let Some(why) = self.ctx.cloud.pool_problem(&pool.name_any()) {
                    status::hold_not_ready(pool, &why, now);
                }
            }
            for (claim, at) in created {
                let name = claim.name_any();
                let fresh = (now - at).to_std().is_ok_and(|d| d < UNSEEN_CLAIM_TTL);
                if s.claims.contains_key(&name) || !fresh {
                    continue;
                }
                let shape = WorldParts {
                    pools: parts.pools.clone(),
                    ..WorldParts::default()
                };
                let node = ManagedNode::launched(
                    &snapshot::request_of(&claim),
                    &shape.world(&catalog, &region),
                    at,
                );
                parts.nodes.extend(node);
                self.created.push((claim, at));
            }
            let views: Vec<ClaimView> = s.claims.values().map(|c| s.claim_view(c)).collect();
            let mut nodes = HashMap::new();
            for c in s.claims.values() {
                if let Some(n) = s.node_of(c) {
                    nodes.insert(c.name_any(), n.clone());
                }
            }
            (parts, views, nodes)
        });
        let mut parts = parts;
        self.checkpoint_bookkeeping(&mut parts, now);
        if let Some(g) = &mut self.gpu_use {
            let events = self.events.as_ref().filter(|_| *self.ctx.leader.borrow());
            g.round(&mut parts, &self.ctx.metrics, events, now).await;
        }
        // ProvisioningRequests: stand-ins to plan, room to hold.
        let unplaceable: HashMap<String, String> = self
            .core
            .last_plan()
            .map(|r| {
                r.unschedulable
                    .iter()
                    .map(|u| (u.pod.clone(), u.reason.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let provisioning = super::podgroups::provisioning_step(
            &self.store,
            &mut parts,
            &|p| unplaceable.get(p).cloned(),
            self.settings.core.max_batch_pods,
            now,
        );
        self.ctx
            .metrics
            .pending_pods
            .set(parts.pending.len() as i64);
        let (kept, deferred) = self.core.cap_batch(std::mem::take(&mut parts.pending));
        parts.pending = kept;
        {
            let world = parts.world(&catalog, &region);
            self.take_notices(&world, &views, now).await;
        }

        if self.is_leader() {
            let Some(back) = self.decide_off_loop(parts, catalog.clone(), now).await else {
                return;
            };
            parts = back;
            self.ctx
                .metrics
                .decision_duration_seconds
                .observe(started.elapsed().as_secs_f64());
            self.ctx
                .metrics
                .karpenter
                .decided(self.core.disruption_decisions());
            self.report_plan(&parts.pending, &deferred, now).await;
            self.report_deferred(&deferred).await;
            self.report_unreadable().await;
        }
        let world = parts.world(&catalog, &region);
        let mut actions = std::mem::take(&mut self.decided);
        // Stand-ins for pods not created yet have nothing to evict or ask.
        actions.retain(|a| match a {
            Action::Evict { pod, .. } | Action::RequestCheckpoint { pod, .. } => {
                !crate::cluster::podgroups::is_reservation(pod)
            }
            _ => true,
        });
        if self.is_leader() {
            super::podgroups::write_transitions(
                &self.ctx.api,
                self.events.as_ref(),
                &self.ctx.metrics,
                &self.store,
                &provisioning,
                now,
            )
            .await;
            let pods = self.store.read(|s| {
                actions
                    .iter()
                    .filter_map(|a| match a {
                        Action::RequestCheckpoint { pod, .. } => {
                            s.pods.get(pod).map(|p| (pod.clone(), p.clone()))
                        }
                        _ => None,
                    })
                    .collect()
            });
            let targets = Targets {
                nodes: nodes_by_claim,
                pods,
            };
            let executor = Executor {
                api: &self.ctx.api,
                metrics: &self.ctx.metrics,
                leader: &self.ctx.leader,
                events: self.events.as_ref(),
                hooks: &self.hooks,
                hook_acks: &self.hook_acks,
                disruptions: self.core.disruption_decisions(),
            };
            let outcomes = executor.execute(&actions, &world, &targets, now).await;
            let repair = super::repair::RepairContext {
                api: &self.ctx.api,
                cloud: &*self.ctx.cloud,
                metrics: &self.ctx.metrics,
                events: self.events.as_ref(),
            };
            self.repair_reports
                .carry_out(&repair, self.core.repairs(), &actions, &views, now)
                .await;
            for (action, o) in actions.iter().zip(outcomes) {
                match (action, o) {
                    (_, Ok(Outcome::Created(claim))) => self.created.push((*claim, now)),
                    (Action::RequestCheckpoint { pod, deadline, .. }, Ok(Outcome::Done)) => {
                        self.outstanding.requested(pod, now, *deadline);
                        self.requested.insert(pod.clone());
                    }
                    _ => {}
                }
            }
            self.reconcile_claims(&views, &world, now).await;
            self.write_drift(&views, &world, now).await;
            if self.is_leader() {
                self.update_pool_statuses(&catalog, now).await;
            }
            if self.ctx.simulated_nodes && self.is_leader() {
                self.simulated_nodes(now).await;
            }
            if self.is_leader()
                && self
                    .last_gc
                    .is_none_or(|t| (now - t).to_std().is_ok_and(|d| d >= GC_EVERY))
            {
                self.collect_garbage(&views, now).await;
            }
        }
        update_metrics(&self.ctx.metrics, &catalog, &parts, &views);
        self.next_deadline = self.core.next_deadline(&world, now);
    }

    /// Folds hook acknowledgements into the world's pods, and resolves
    /// outstanding checkpoint requests (acknowledged or timed out) for the
    /// metrics.
    fn checkpoint_bookkeeping(&mut self, parts: &mut WorldParts, now: Time) {
        let acks: HashMap<String, Time> = match self.hook_acks.lock() {
            Ok(mut a) => {
                // Forget acknowledgements of pods that are gone.
                let present: HashSet<&str> = parts
                    .nodes
                    .iter()
                    .flat_map(|n| n.pods.iter().map(|b| b.pod.name.as_str()))
                    .collect();
                a.retain(|pod, _| present.contains(pod.as_str()));
                a.clone()
            }
            Err(_) => HashMap::new(),
        };
        for b in parts.nodes.iter_mut().flat_map(|n| n.pods.iter_mut()) {
            if let Some(at) = acks.get(&b.pod.name) {
                self.outstanding.hook_acknowledged(&b.pod.name);
                b.checkpoint_completed = Some(b.checkpoint_completed.map_or(*at, |c| c.max(*at)));
            }
        }
        if self.outstanding.is_empty() {
            return;
        }
        let metrics = self.ctx.metrics.clone();
        let outstanding = &mut self.outstanding;
        self.requested.retain(|p| outstanding.is_waiting(p));
        let requested = &self.requested;
        self.store.read(|s| {
            for name in requested {
                if let Some(p) = s.pods.get(name) {
                    if let Some(r) = outstanding.observe(name, &p.checkpoint_annotations, now) {
                        r.count(&metrics);
                    }
                }
            }
        });
        for _ in self.outstanding.expire(now) {
            metrics.checkpoints_timed_out.inc();
        }
    }

    /// Hands the core the interruptions recorded on claims it has not
    /// heard of (after a restart), then every new cloud notice, each
    /// recorded first where it must be, and reports to the feed what became
    /// of each (see [`super::interruptions`]).
    async fn take_notices(&mut self, world: &World<'_>, views: &[ClaimView], now: Time) {
        for notice in self.notices.resume(views) {
            self.core.handle_notice(&notice, world, now);
        }
        while let Ok(n) = self.ctx.notices.try_recv() {
            self.inbox.push(n);
        }
        let leader = self.is_leader();
        for n in std::mem::take(&mut self.inbox) {
            let handled = self
                .notices
                .handle(&n, views, &self.ctx.api, leader, now)
                .await;
            self.ctx.notice_acks.push(&n, handled.outcome);
            for (pool, kind) in handled.counted {
                self.ctx
                    .metrics
                    .interruptions
                    .get_or_create(&InterruptionLabels {
                        nodepool: pool,
                        kind: kind.into(),
                    })
                    .inc();
            }
            for notice in handled.notices {
                tracing::info!(instance = %n.instance_id, ?notice, "cloud notice");
                self.core.handle_notice(&notice, world, now);
            }
        }
    }

    async fn reconcile_claims(&mut self, views: &[ClaimView], world: &World<'_>, now: Time) {
        let lifecycle = lifecycle_of(&self.ctx, &self.settings);
        let mut to_core = Vec::new();
        let present: HashSet<String> = views.iter().map(|v| v.claim.name_any()).collect();
        self.drain_backoff.retain(|c, _| present.contains(c));
        for view in views {
            if !*self.ctx.leader.borrow() {
                return;
            }
            let name = view.claim.name_any();
            if self.drain_backoff.get(&name).is_some_and(|t| *t > now) {
                continue;
            }
            match lifecycle.reconcile(view, now).await {
                Ok(Step::Draining { .. }) => {
                    // Pods are leaving or a PDB said not yet: evictions are
                    // retried after a pause, not on every watch event.
                    let pause = chrono::TimeDelta::from_std(DRAIN_RETRY).unwrap_or_default();
                    self.drain_backoff.insert(name, now + pause);
                }
                Ok(Step::Initialized { .. }) => to_core.push(Err(name)),
                Ok(Step::LaunchFailed { reason, notice }) => {
                    if let Some(ev) = &self.events {
                        let pool = super::events::node_pool_ref(&view.claim.spec.node_pool, None);
                        ev.launch_failed(
                            &pool,
                            &view.claim.name_any(),
                            &reason,
                            "the claim is re-planned",
                        )
                        .await;
                    }
                    to_core.extend(notice.map(Ok));
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "lifecycle step failed; retrying next round"),
            }
        }
        for item in to_core {
            match item {
                Ok(notice) => self.core.handle_notice(&notice, world, now),
                Err(claim) => {
                    if let Some(mut node) = world.nodes.iter().find(|n| n.claim == claim).cloned() {
                        node.ready_at = Some(now);
                        node.state.in_flight = false;
                        self.core.observe_ready(&node);
                    }
                }
            }
        }
    }

    /// Brings each claim's `Drifted` condition in line with what the world
    /// says drifted (leader only; a failed write is retried next round).
    async fn write_drift(&mut self, views: &[ClaimView], world: &World<'_>, now: Time) {
        for view in views {
            if !self.is_leader() {
                return;
            }
            let name = view.claim.name_any();
            let drifted = world
                .nodes
                .iter()
                .find(|n| n.claim == name)
                .and_then(|n| n.drifted);
            let Some(status) = super::lifecycle::drift_status(&view.claim, drifted, now) else {
                continue;
            };
            match self.ctx.api.patch_node_claim_status(&name, &status).await {
                Ok(()) => {
                    if let Some(d) = drifted {
                        tracing::info!(claim = %name, reason = d.reason(), "NodeClaim drifted: {d}");
                        if let Some(ev) = &self.events {
                            let uid = view.claim.uid();
                            let claim = super::events::node_claim_ref(&name, uid.as_deref());
                            ev.drifted(&claim, &d.to_string()).await;
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(claim = %name, %error, "failed to write the Drifted condition")
                }
            }
        }
    }

    /// Patches each NodePool's status (conditions from validation, nodes,
    /// resources, cost) when it changed.
    async fn update_pool_statuses(&mut self, catalog: &Catalog, now: Time) {
        type Update = (
            String,
            Option<String>,
            crate::api::NodePoolStatus,
            Option<String>,
        );
        let updates: Vec<Update> = self.store.read(|s| {
            let claims: Vec<NodeClaim> = s.claims.values().cloned().collect();
            s.pools
                .values()
                .filter_map(|pool| {
                    // Every problem, as `quartermaster validate` names them.
                    let problems = crate::api::validate::validate_node_pool(pool, catalog);
                    let problem = (!problems.is_empty()).then(|| {
                        problems
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ")
                    });
                    let mut new = status::node_pool_status(
                        pool,
                        &claims,
                        catalog,
                        problem.as_deref(),
                        pool.status.as_ref(),
                        now,
                    );
                    if let Some(why) = self.ctx.cloud.pool_problem(&pool.name_any()) {
                        status::mark_not_ready(
                            &mut new,
                            status::reasons::NODE_CLASS_NOT_READY,
                            &format!("launches nothing: {why}"),
                            pool.status.as_ref(),
                            now,
                        );
                    }
                    if let Some(known) = self.gpu_use.as_ref().and_then(|g| g.condition()) {
                        status::set_gpu_use_known(&mut new, known, pool.status.as_ref(), now);
                    }
                    // The Event is said when the problem is new, not at
                    // every later change of the status.
                    let told = pool.status.as_ref().is_some_and(|old| {
                        old.conditions.iter().any(|c| {
                            c.type_ == crate::api::nodepool::conditions::VALIDATION_SUCCEEDED
                                && c.status == "False"
                                && Some(&c.message) == problem.as_ref()
                        })
                    });
                    let news = problem.filter(|_| !told);
                    status::status_changed(pool.status.as_ref(), &new)
                        .then(|| (pool.name_any(), pool.uid(), new, news))
                })
                .collect()
        });
        for (name, uid, new, problem) in updates {
            match self.ctx.api.patch_node_pool_status(&name, &new).await {
                Err(e) => tracing::warn!(pool = %name, error = %e, "NodePool status update failed"),
                Ok(()) => {
                    if let (Some(problem), Some(ev)) = (problem, &self.events) {
                        tracing::warn!(pool = %name, %problem, "NodePool is invalid and launches nothing");
                        let pool = super::events::node_pool_ref(&name, uid.as_deref());
                        ev.validation_failed(&pool, &problem).await;
                    }
                }
            }
        }
    }

    async fn simulated_nodes(&mut self, now: Time) {
        let instances = match self.ctx.cloud.instances().await {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(error = %e, "listing simulated instances failed");
                return;
            }
        };
        let ops = self.store.read(|s| {
            simulated_nodes::plan(
                &instances,
                &s.claims,
                &s.nodes,
                simulated_nodes::Timing::default(),
                now,
            )
        });
        simulated_nodes::apply(&self.ctx.api, ops, now).await;
    }

    async fn collect_garbage(&mut self, views: &[ClaimView], now: Time) {
        self.last_gc = Some(now);
        let claims: HashSet<String> = views.iter().map(|v| v.claim.name_any()).collect();
        let grace =
            chrono::TimeDelta::from_std(self.settings.gc_grace).unwrap_or(chrono::TimeDelta::MAX);
        match cloud::collect_garbage(&*self.ctx.cloud, &claims, now, grace).await {
            Ok((done, failed)) => {
                for i in &done {
                    tracing::warn!(claim = %i.claim, provider_id = %i.provider_id, "terminated an instance without a NodeClaim");
                }
                self.ctx.metrics.garbage_collected.inc_by(done.len() as u64);
                for e in failed {
                    tracing::warn!(error = %e, "garbage collection could not terminate an instance");
                }
            }
            Err(e) => tracing::warn!(error = %e, "garbage collection could not list instances"),
        }
        // And the other way round: claims whose instance is gone.
        let lifecycle = lifecycle_of(&self.ctx, &self.settings);
        if let Err(e) = lifecycle
            .collect_lost(views, now, self.settings.gc_grace)
            .await
        {
            tracing::warn!(error = %e, "garbage collection could not check the claims' instances");
        }
    }
}

/// How long the loop sleeps: until the core's deadline (a few
/// milliseconds at least, when it is due already), never longer than `tick`.
pub fn sleep_for(deadline: Option<Time>, now: Time, tick: Duration) -> Duration {
    const MIN: Duration = Duration::from_millis(10);
    match deadline {
        Some(d) => (d - now).to_std().unwrap_or(MIN).max(MIN).min(tick),
        None => tick,
    }
}

/// Sets the per-pool gauges from the round's world: nodes and accelerators
/// by pool, instance type and capacity type; cost per hour by pool; nodes
/// held for pre-warm windows by pool; each pool's usage and limits.
pub fn update_metrics(
    metrics: &Metrics,
    catalog: &Catalog,
    parts: &WorldParts,
    views: &[ClaimView],
) {
    metrics.nodes.clear();
    metrics.gpus.clear();
    metrics.cost_per_hour.clear();
    metrics.prewarm_nodes.clear();
    let mut cost: HashMap<String, f64> = HashMap::new();
    for n in &parts.nodes {
        let labels = NodeLabels {
            nodepool: n.nodepool.clone(),
            instance_type: n.offering.instance_type.clone(),
            capacity_type: n.offering.capacity_type.as_str().into(),
        };
        metrics.nodes.get_or_create(&labels).inc();
        let accelerators = catalog
            .instance_type(&n.offering.instance_type)
            .and_then(|t| t.accelerator.as_ref())
            .map_or(0, |a| a.count as i64);
        metrics.gpus.get_or_create(&labels).inc_by(accelerators);
        *cost.entry(n.nodepool.clone()).or_default() += n.price_per_hour;
    }
    for (pool, c) in cost {
        metrics
            .cost_per_hour
            .get_or_create(&PoolLabels { nodepool: pool })
            .set(c);
    }
    let usage: Vec<(&NodePool, status::PoolUsage)> = parts
        .pools
        .iter()
        .map(|p| {
            (
                p,
                status::pool_usage(p, views.iter().map(|v| &v.claim), catalog),
            )
        })
        .collect();
    metrics.karpenter.set_pools(
        usage
            .iter()
            .map(|(p, u)| (*p, &u.resources, u.nodes, u.cost_per_hour)),
    );
    for v in views {
        if v.claim.labels().contains_key(executor::PREWARM_LABEL) {
            metrics
                .prewarm_nodes
                .get_or_create(&PoolLabels {
                    nodepool: v.claim.spec.node_pool.clone(),
                })
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn the_loop_sleeps_until_the_deadline_but_never_past_the_tick() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let tick = Duration::from_secs(10);
        let at = |s: i64| Some(now + chrono::TimeDelta::seconds(s));
        assert_eq!(sleep_for(None, now, tick), tick);
        assert_eq!(sleep_for(at(3), now, tick), Duration::from_secs(3));
        assert_eq!(sleep_for(at(60), now, tick), tick);
        assert_eq!(sleep_for(at(-1), now, tick), Duration::from_millis(10));
    }
}
