//! The controller's main loop: waits for the reflectors to sync, then on
//! every batch, notice and timer builds the snapshot, runs the core (only
//! while this replica leads) and hands the actions to the executor; also
//! drives the NodeClaim lifecycle and garbage collection.

use super::checkpoint::{HookAcks, HookClient, Outstanding};
use super::events::Events;
use super::executor::{self, Executor, Outcome, Targets};
use super::kube_api::KubeApi;
use super::lifecycle::{self, Lifecycle, Step};
use super::notice_path::NoticePath;
use super::simulated_nodes;
use super::snapshot::{self, ClaimView, Store, WorldParts};
use super::status;
use super::steps::{self, Finished, Steps};
use crate::api::NodeClaim;
use crate::catalog::Catalog;
use crate::cloud::{self, CloudProvider, InstanceNotice, NoticeAcks};
use crate::core::{Action, Core, Notice, Time, World};
use crate::metrics::{ActionLabels, Metrics, NodeLabels, PoolLabels, StepLabels};
use kube::ResourceExt;
use std::collections::{BTreeMap, HashMap, HashSet};
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

pub use super::steps::DRAIN_RETRY;

/// How long a shutdown waits for the lifecycle steps under way.
const SHUTDOWN_STEPS: Duration = Duration::from_secs(15);

/// How long a claim this process created counts in the world before the
/// watch delivers it.
const UNSEEN_CLAIM_TTL: Duration = Duration::from_secs(60);

/// Runs until `shutdown` is cancelled, then finishes the round in flight
/// (and the lifecycle steps under way) and returns.
///
/// Beside the loop, cloud notices have a task of their own
/// ([`super::notice_path`]): each is made durable (an interruption's
/// condition and cordon) as it comes, however long a round takes, and what
/// the core must hear wakes the loop. NodeClaim lifecycle steps (launch,
/// registration, drain) run as tasks too ([`super::steps`]), so that a
/// round never waits for EC2.
///
/// The order of one round: read the snapshot; hand the core what the
/// notice path and the lifecycle steps that ended came to; if leader, run
/// the core (a step that panics is contained: see [`Core::decide`]) and
/// carry out its actions, concurrently across claims, telling the core what
/// came of each (a failed one is issued again after a backoff); start the
/// lifecycle steps that are due, write drift and pool statuses, keep
/// simulated nodes in step, start garbage collection every [`GC_EVERY`];
/// update metrics; sleep until the core's next deadline or a claim's
/// backoff ends (at most `tick`), a watch change, a notice for the core, a
/// lifecycle step's end or a leadership change. Liveness counts progress
/// (a round, a step, a notice, an action), not rounds.
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
    /// Garbage collection under way (it runs beside the loop).
    gc: Option<tokio::task::JoinHandle<()>>,
    next_deadline: Option<Time>,
    /// The notice path, when the loop runs it inline (rounds driven by
    /// hand); [`Driver::run`] moves it into a task of its own.
    notice_path: Option<NoticePath>,
    /// What the notice path tells the core.
    heard: mpsc::UnboundedReceiver<Notice>,
    /// Notices taken off `heard` while the loop waited.
    early: Vec<Notice>,
    /// Lifecycle steps that ended and were taken while waiting.
    finished: Vec<Finished>,
    /// The time of the last round.
    last_round: Option<Time>,
    /// Claims created by this process that the watch may not have
    /// delivered yet, so that the next round does not plan their pods again.
    created: Vec<(NodeClaim, Time)>,
    /// The NodeClaim lifecycle steps under way, and each claim's backoff.
    steps: Steps,
    /// Kubernetes Events (left out in tests).
    pub events: Option<Events>,
    hooks: HookClient,
    hook_acks: HookAcks,
    outstanding: Outstanding,
    /// Pods with an outstanding checkpoint request (to look them up).
    requested: std::collections::BTreeSet<String>,
    leader_open: bool,
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

/// Seconds since the first call, on a monotonic clock: the planner's timer
/// ([`Core::with_solve_clock`]).
fn monotonic_seconds() -> f64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}

/// The kind of an action, for the `actions_failed` metric.
fn action_kind(a: &Action) -> &'static str {
    match a {
        Action::Launch(_) => "launch",
        Action::Cordon { .. } => "cordon",
        Action::Uncordon { .. } => "uncordon",
        Action::RequestCheckpoint { .. } => "checkpoint",
        Action::Evict { .. } => "evict",
        Action::Delete { .. } => "delete",
        Action::Reboot { .. } => "reboot",
    }
}

impl<C: CloudProvider + Send + Sync + 'static> Driver<C> {
    /// A driver over a synced store; `now` tags this process' claim names.
    pub fn new(ctx: Context<C>, settings: Settings, store: Arc<Store>, now: Time) -> Driver<C> {
        let steps = Steps::new(now.timestamp().unsigned_abs());
        let (to_core, heard) = mpsc::unbounded_channel();
        let notice_path = NoticePath::new(
            store.clone(),
            ctx.api.clone(),
            ctx.leader.clone(),
            ctx.notice_acks.clone(),
            ctx.metrics.clone(),
            steps.launches.clone(),
            to_core,
        );
        Driver {
            core: Core::new(settings.core.clone())
                .with_solve_clock(monotonic_seconds)
                .with_claim_tag(&executor::boot_tag(now)),
            ctx,
            settings,
            store,
            last_gc: None,
            gc: None,
            next_deadline: None,
            notice_path: Some(notice_path),
            heard,
            early: Vec::new(),
            finished: Vec::new(),
            last_round: None,
            created: Vec::new(),
            steps,
            events: None,
            hooks: HookClient::new(),
            hook_acks: HookAcks::default(),
            outstanding: Outstanding::default(),
            requested: Default::default(),
            leader_open: true,
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
    /// a big batch; the async workers keep serving watches, leases, probes
    /// and notices), leaving its actions in `self.decided`; gives `parts`
    /// back. The core decides on a copy: should the blocking thread fail
    /// even so (a step's panic is contained in the core itself), the core
    /// as it was is kept, with everything in flight and its claim tag.
    async fn decide_off_loop(
        &mut self,
        parts: WorldParts,
        catalog: Arc<Catalog>,
        now: Time,
    ) -> WorldParts {
        let region = self.settings.region.clone();
        let mut core = self.core.clone();
        let world_parts = Arc::new(parts);
        let shared = world_parts.clone();
        let decided = tokio::task::spawn_blocking(move || {
            let actions = core.decide(&shared.world(&catalog, &region), now);
            (core, actions)
        })
        .await;
        match decided {
            Ok((core, actions)) => {
                self.core = core;
                self.decided = actions;
            }
            Err(e) => {
                tracing::error!(error = %e, "the decision core failed; its state is kept and it decides again next round");
                self.ctx
                    .metrics
                    .decision_failures
                    .get_or_create(&StepLabels {
                        step: "decide".into(),
                    })
                    .inc();
                self.decided = Vec::new();
            }
        }
        for f in self.core.take_failures() {
            tracing::error!(step = f.step, message = %f.message, "a decision step failed; the core decided without it");
            self.ctx
                .metrics
                .decision_failures
                .get_or_create(&StepLabels {
                    step: f.step.into(),
                })
                .inc();
        }
        Arc::try_unwrap(world_parts).unwrap_or_else(|a| (*a).clone())
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
        // Notices get a task of their own: they are handled as they come,
        // however long a round takes.
        let path_stop = shutdown.child_token();
        if let Some(path) = self.notice_path.take() {
            let (_, closed) = mpsc::channel(1);
            let notices = std::mem::replace(&mut self.ctx.notices, closed);
            tokio::spawn(path.serve(notices, path_stop.clone()));
        }
        loop {
            let now = chrono::Utc::now();
            self.round(now).await;
            self.ctx.metrics.progress.beat();
            if shutdown.is_cancelled() {
                break;
            }
            let wait = sleep_for(self.next_deadline, chrono::Utc::now(), self.settings.tick);
            let leader_open = self.leader_open;
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
                _ = self.store.changed.notified() => {
                    tokio::time::sleep(DEBOUNCE).await;
                }
                // A notice for the core: a round at once.
                n = self.heard.recv() => {
                    if let Some(n) = n {
                        self.early.push(n);
                    }
                }
                // A lifecycle step ended: its outcome goes to the core.
                f = self.steps.wait_finished() => {
                    if let Some(f) = f {
                        self.steps.put_back(f);
                    }
                    tokio::time::sleep(DEBOUNCE).await;
                }
                r = self.ctx.leader.changed(), if leader_open => {
                    if r.is_err() {
                        self.leader_open = false;
                    }
                }
            }
            self.ctx.metrics.progress.beat();
        }
        path_stop.cancel();
        // Let the steps under way finish, within the default shutdown
        // timeout (one cut short is taken up again by the next leader: every
        // step is idempotent).
        let _ = tokio::time::timeout(SHUTDOWN_STEPS, self.steps.idle(chrono::Utc::now())).await;
    }

    fn is_leader(&self) -> bool {
        *self.ctx.leader.borrow()
    }

    /// Waits until no lifecycle step is under way and folds what they came
    /// to into the driver, as the next round would (tests driving rounds by
    /// hand use it to see a round's steps through).
    pub async fn settle(&mut self) {
        let now = self.last_round.unwrap_or_else(chrono::Utc::now);
        let finished = self.steps.idle(now).await;
        self.finished.extend(finished);
    }

    /// One round at `now` (see [`run`]).
    pub async fn round(&mut self, now: Time) {
        let started = std::time::Instant::now();
        self.last_round = Some(now);
        let catalog = self.ctx.catalog.borrow().clone();
        let region = self.settings.region.clone();
        let created = std::mem::take(&mut self.created);
        if let Some(path) = self.notice_path.as_mut() {
            path.take(&mut self.ctx.notices, now).await;
        }
        let mut finished = std::mem::take(&mut self.finished);
        finished.extend(self.steps.take_finished(now));
        let (parts, pending_work, nodes_by_claim, present, (prewarm, usage)) =
            self.store.read(|s| {
                let mut parts = snapshot::world_parts(
                    s,
                    &catalog,
                    &region,
                    now,
                    self.settings.core.max_batch_pods,
                );
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
                    let node = snapshot::managed_node(&claim, &shape.world(&catalog, &region), at);
                    parts.nodes.extend(node);
                    self.created.push((claim, at));
                }
                // Views only of the claims whose lifecycle has a step to take
                // now (building one clones the claim and its pods).
                let pending_work: Vec<ClaimView> = s
                    .claims
                    .values()
                    .filter(|c| lifecycle::needs_work(c))
                    .filter(|c| self.steps.may_start(&c.name_any(), now))
                    .map(|c| s.claim_view(c))
                    .collect();
                let mut nodes = HashMap::new();
                for c in s.claims.values() {
                    if let Some(n) = s.node_of(c) {
                        nodes.insert(c.name_any(), n.clone());
                    }
                }
                let present = steps::names(s.claims.values());
                let prewarm: Vec<String> = s
                    .claims
                    .values()
                    .filter(|c| c.labels().contains_key(executor::PREWARM_LABEL))
                    .map(|c| c.spec.node_pool.clone())
                    .collect();
                let usage: Vec<status::PoolUsage> = parts
                    .pools
                    .iter()
                    .map(|p| status::pool_usage(p, s.claims.values(), &catalog))
                    .collect();
                (parts, pending_work, nodes, present, (prewarm, usage))
            });
        self.steps.retain(&present);
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
        // CapacityBuffers: placeholders to plan after the real pods, room
        // to hold.
        let buffers = super::buffers::buffers_step(
            &self.store,
            &mut parts,
            &|p| unplaceable.get(p).cloned(),
            self.settings.core.max_batch_pods,
            now,
            &|pools, pod| self.core.buffer_lead(pools, &catalog, pod),
        );
        super::buffers::record(&self.ctx.metrics, &buffers);
        self.ctx
            .metrics
            .pending_pods
            .set(parts.pending.len() as i64);
        let (kept, deferred) = self.core.cap_batch(std::mem::take(&mut parts.pending));
        parts.pending = kept;
        {
            let world = parts.world(&catalog, &region);
            self.hear(&world, finished, now).await;
        }

        if self.is_leader() {
            parts = self.decide_off_loop(parts, catalog.clone(), now).await;
            self.ctx
                .metrics
                .decision_duration_seconds
                .observe(started.elapsed().as_secs_f64());
            self.ctx
                .metrics
                .karpenter
                .decided(self.core.disruption_decisions());
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
            super::buffers::write_statuses(
                &self.ctx.api,
                self.events.as_ref(),
                &self.store,
                &buffers,
                now,
            )
            .await;
            self.execute(&actions, &world, nodes_by_claim, now).await;
            self.carry_out_repairs(&actions, now).await;
            self.start_steps(pending_work, &parts, now);
            self.write_drift(&world, now).await;
            self.update_pool_statuses(&catalog, now).await;
            if self.ctx.simulated_nodes {
                self.simulated_nodes(now).await;
            }
            let due = self
                .last_gc
                .is_none_or(|t| (now - t).to_std().is_ok_and(|d| d >= GC_EVERY));
            if due && self.gc.as_ref().is_none_or(|g| g.is_finished()) {
                self.collect_garbage(now);
            }
        }
        update_metrics(&self.ctx.metrics, &catalog, &parts, &prewarm, &usage);
        let core = self.core.next_deadline(&world, now);
        let steps = self.steps.next_due(now);
        self.next_deadline = [core, steps].into_iter().flatten().min();
    }

    /// Carries out the round's actions (concurrently across claims: see
    /// [`Executor::execute`]) and tells the core what came of each: a
    /// failed one is issued again after a backoff.
    async fn execute(
        &mut self,
        actions: &[Action],
        world: &World<'_>,
        nodes: HashMap<String, snapshot::NodeInfo>,
        now: Time,
    ) {
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
        let targets = Targets { nodes, pods };
        let executor = Executor {
            api: &self.ctx.api,
            metrics: &self.ctx.metrics,
            leader: &self.ctx.leader,
            events: self.events.as_ref(),
            hooks: &self.hooks,
            hook_acks: &self.hook_acks,
            parallel: executor::PARALLEL,
            disruptions: self.core.disruption_decisions(),
        };
        let outcomes = executor.execute(actions, world, &targets, now).await;
        for (action, o) in actions.iter().zip(outcomes) {
            let outcome = executor::core_outcome(&o);
            if outcome == crate::core::Outcome::Failed {
                self.ctx
                    .metrics
                    .actions_failed
                    .get_or_create(&ActionLabels {
                        action: action_kind(action).into(),
                    })
                    .inc();
            }
            self.core.observe_outcome(action, outcome, now);
            match (action, o) {
                (_, Ok(Outcome::Created(claim))) => self.created.push((*claim, now)),
                (Action::RequestCheckpoint { pod, deadline, .. }, Ok(Outcome::Done)) => {
                    self.outstanding.requested(pod, now, *deadline);
                    self.requested.insert(pod.clone());
                }
                _ => {}
            }
        }
    }

    /// Reboots through the cloud what repair asks and reports the round's
    /// repairs and holds ([`super::repair::RepairReports::carry_out`]),
    /// with the views of the claims repair names.
    async fn carry_out_repairs(&mut self, actions: &[Action], now: Time) {
        let repairs = self.core.repairs();
        let mut named: std::collections::BTreeSet<&str> = repairs
            .decisions()
            .iter()
            .map(|d| d.claim.as_str())
            .collect();
        named.extend(repairs.held().iter().map(|h| h.claim.as_str()));
        named.extend(actions.iter().filter_map(|a| match a {
            Action::Reboot { claim, .. } => Some(claim.as_str()),
            _ => None,
        }));
        let views: Vec<ClaimView> = self.store.read(|s| {
            named
                .iter()
                .filter_map(|n| s.claims.get(*n))
                .map(|c| s.claim_view(c))
                .collect()
        });
        let repair = super::repair::RepairContext {
            api: &self.ctx.api,
            cloud: &*self.ctx.cloud,
            metrics: &self.ctx.metrics,
            events: self.events.as_ref(),
        };
        self.repair_reports
            .carry_out(&repair, repairs, actions, &views, now)
            .await;
    }

    /// Starts a lifecycle step for each claim that has one to take and no
    /// step under way, its backoff over ([`Steps`]).
    fn start_steps(&mut self, views: Vec<ClaimView>, parts: &WorldParts, now: Time) {
        if views.is_empty() {
            return;
        }
        let handles = steps::Handles {
            api: self.ctx.api.clone(),
            cloud: self.ctx.cloud.clone(),
            metrics: self.ctx.metrics.clone(),
            leader: self.ctx.leader.clone(),
            launch_timeout: self.settings.launch_timeout,
            registration_timeout: self.settings.registration_timeout,
            policies: Arc::new(steps::policies(&parts.pools)),
            hooks: self.hooks.clone(),
            hook_acks: self.hook_acks.clone(),
            catalog: self.ctx.catalog.borrow().clone(),
            region: self.settings.region.as_str().into(),
        };
        self.steps.start(views, &handles, now);
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

    /// Hands the core what it must hear before deciding: the notices the
    /// notice path passed on (each made durable first where it must be:
    /// see [`super::interruptions`]), and what the lifecycle steps that
    /// ended came to (a capacity error, a node Ready), with an Event on a
    /// pool whose launch failed.
    async fn hear(&mut self, world: &World<'_>, finished: Vec<Finished>, now: Time) {
        for n in std::mem::take(&mut self.early) {
            self.core.handle_notice(&n, world, now);
        }
        while let Ok(n) = self.heard.try_recv() {
            self.core.handle_notice(&n, world, now);
        }
        for f in finished {
            match f.result {
                Ok(Step::Initialized { .. }) => {
                    if let Some(mut node) = world.nodes.iter().find(|n| n.claim == f.claim).cloned()
                    {
                        node.ready_at = Some(now);
                        node.state.in_flight = false;
                        self.core.observe_ready(&node);
                    }
                }
                Ok(Step::LaunchFailed { reason, notice }) => {
                    if let Some(ev) = &self.events {
                        let pool = super::events::node_pool_ref(&f.pool, None);
                        ev.launch_failed(&pool, &f.claim, &reason, "the claim is re-planned")
                            .await;
                    }
                    if let Some(notice) = notice {
                        self.core.handle_notice(&notice, world, now);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(claim = %f.claim, error = %e, "lifecycle step failed; retried after a backoff")
                }
            }
        }
    }

    /// Brings each claim's `Drifted` condition in line with what the world
    /// says drifted (leader only; written against the claim's current
    /// status; a failed write is retried next round).
    async fn write_drift(&mut self, world: &World<'_>, now: Time) {
        let changes: Vec<(NodeClaim, Option<crate::core::drift::Drift>)> = self.store.read(|s| {
            s.claims
                .values()
                .filter_map(|c| {
                    let name = c.name_any();
                    let drifted = world
                        .nodes
                        .iter()
                        .find(|n| n.claim == name)
                        .and_then(|n| n.drifted);
                    super::lifecycle::drift_status(c, drifted, now).map(|_| (c.clone(), drifted))
                })
                .collect()
        });
        for (claim, drifted) in changes {
            if !self.is_leader() {
                return;
            }
            let name = claim.name_any();
            let written = self
                .ctx
                .api
                .update_node_claim_status(&claim, |status| {
                    super::lifecycle::apply_drift(status, drifted, now)
                })
                .await;
            match written {
                Ok(()) => {
                    if let Some(d) = drifted {
                        tracing::info!(claim = %name, reason = d.reason(), "NodeClaim drifted: {d}");
                        if let Some(ev) = &self.events {
                            let uid = claim.uid();
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

    /// Waits for the garbage collection under way, if any, to end.
    pub async fn wait_for_gc(&mut self) {
        if let Some(gc) = self.gc.take() {
            let _ = gc.await;
        }
    }

    /// Starts garbage collection beside the loop (it lists every instance,
    /// which EC2 may throttle): instances of ours without a claim, or
    /// doubles of a claim's instance, are terminated; claims whose instance
    /// is gone are deleted.
    fn collect_garbage(&mut self, now: Time) {
        self.last_gc = Some(now);
        let (claims, views) = self.store.read(|s| {
            let claims: HashMap<String, Option<String>> = s
                .claims
                .values()
                .map(|c| {
                    let provider = c.status.as_ref().and_then(|st| st.provider_id.clone());
                    (c.name_any(), provider)
                })
                .collect();
            let views: Vec<ClaimView> = s.claims.values().map(|c| s.claim_view(c)).collect();
            (claims, views)
        });
        let (cloud, api, metrics) = (
            self.ctx.cloud.clone(),
            self.ctx.api.clone(),
            self.ctx.metrics.clone(),
        );
        let settings = self.settings.clone();
        let catalog = self.ctx.catalog.borrow().clone();
        let (hooks, acks, launches) = (
            self.hooks.clone(),
            self.hook_acks.clone(),
            self.steps.launches.clone(),
        );
        self.gc = Some(tokio::spawn(async move {
            let grace =
                chrono::TimeDelta::from_std(settings.gc_grace).unwrap_or(chrono::TimeDelta::MAX);
            match cloud::collect_garbage(&*cloud, &claims, now, grace).await {
                Ok((done, failed)) => {
                    for i in &done {
                        tracing::warn!(claim = %i.claim, provider_id = %i.provider_id, "terminated an instance without a NodeClaim (or a double of one)");
                    }
                    metrics.garbage_collected.inc_by(done.len() as u64);
                    for e in failed {
                        tracing::warn!(error = %e, "garbage collection could not terminate an instance");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "garbage collection could not list instances"),
            }
            // And the other way round: claims whose instance is gone.
            let policies = BTreeMap::new();
            let lifecycle = Lifecycle {
                api: &api,
                cloud: &*cloud,
                metrics: &metrics,
                launch_timeout: settings.launch_timeout,
                registration_timeout: settings.registration_timeout,
                policies: &policies,
                hooks: &hooks,
                hook_acks: &acks,
                launches: &launches,
                catalog,
                region: &settings.region,
            };
            if let Err(e) = lifecycle.collect_lost(&views, now, settings.gc_grace).await {
                tracing::warn!(error = %e, "garbage collection could not check the claims' instances");
            }
            metrics.progress.beat();
        }));
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
/// held for pre-warm windows by pool (`prewarm`: the pool of each claim
/// launched for a window); each pool's usage and limits (`usage`, one per
/// pool of `parts`, in order).
pub fn update_metrics(
    metrics: &Metrics,
    catalog: &Catalog,
    parts: &WorldParts,
    prewarm: &[String],
    usage: &[status::PoolUsage],
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
    metrics.karpenter.set_pools(
        parts
            .pools
            .iter()
            .zip(usage)
            .map(|(p, u)| (p, &u.resources, u.nodes, u.cost_per_hour)),
    );
    for pool in prewarm {
        metrics
            .prewarm_nodes
            .get_or_create(&PoolLabels {
                nodepool: pool.clone(),
            })
            .inc();
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
