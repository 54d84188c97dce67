//! The NodeClaim lifecycle ([`super::lifecycle`]) run concurrently: each
//! claim that has a step to take (launch, registration, initialization,
//! drain and termination) gets a task of its own, at most one per claim
//! and at most [`PARALLEL`] at once, so that a launch EC2 makes wait
//! (throttled, or slow: each call may take up to 90 s) holds that claim
//! only, never the loop or the other claims. What each step came to goes
//! back to the loop ([`Finished`]), which hands it on to the core; a step
//! that failed or could not go ahead waits its claim's [`Backoff`].

use super::backoff::Backoff;
use super::checkpoint::{HookAcks, HookClient};
use super::interruptions::Launches;
use super::kube_api::KubeApi;
use super::lifecycle::{Lifecycle, Step};
use super::snapshot::ClaimView;
use crate::api::InterruptionPolicy;
use crate::cloud::CloudProvider;
use crate::core::Time;
use crate::metrics::Metrics;
use kube::ResourceExt;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch, Semaphore};

/// Most lifecycle steps under way at once.
pub const PARALLEL: usize = 16;

/// Longest one step may take before it is given up (and tried again after
/// the claim's backoff): longer than a launch's AWS calls with their
/// retries, so it only ends a step that hangs.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(300);

/// How long a draining claim waits before its drain goes on (evictions
/// retried, pods looked at again), unless its plan is due earlier.
pub const DRAIN_RETRY: Duration = Duration::from_secs(5);

/// What one step of one claim came to.
#[derive(Debug)]
pub struct Finished {
    /// The claim.
    pub claim: String,
    /// Its NodePool.
    pub pool: String,
    /// The step, or why it failed.
    pub result: Result<Step, String>,
}

/// What a step needs, shared by every task.
pub struct Handles<C> {
    /// Kubernetes writes.
    pub api: KubeApi,
    /// The cloud.
    pub cloud: Arc<C>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Leadership: a step starts only while leading.
    pub leader: watch::Receiver<bool>,
    /// A claim not launched this long after creation is deleted.
    pub launch_timeout: Duration,
    /// A launched claim not registered this long after launch is deleted.
    pub registration_timeout: Duration,
    /// Each pool's interruption policy.
    pub policies: Arc<BTreeMap<String, InterruptionPolicy>>,
    /// Checkpoint hooks.
    pub hooks: HookClient,
    /// Hook acknowledgements.
    pub hook_acks: HookAcks,
    /// The catalog claims are checked against before launch.
    pub catalog: Arc<crate::catalog::Catalog>,
    /// The region the claims are launched in.
    pub region: Arc<str>,
}

/// The steps under way, what came of those that ended, and each claim's
/// backoff.
pub struct Steps {
    in_flight: HashSet<String>,
    tx: mpsc::UnboundedSender<Finished>,
    rx: mpsc::UnboundedReceiver<Finished>,
    slots: Arc<Semaphore>,
    backoff: Backoff,
    /// This process' launches (read by the notice path).
    pub launches: Launches,
}

impl Steps {
    /// No step under way; backoff jitter drawn from `seed`.
    pub fn new(seed: u64) -> Steps {
        let (tx, rx) = mpsc::unbounded_channel();
        Steps {
            in_flight: HashSet::new(),
            tx,
            rx,
            slots: Arc::new(Semaphore::new(PARALLEL)),
            backoff: Backoff::new(super::backoff::BASE, super::backoff::CAP, seed),
            launches: Launches::default(),
        }
    }

    /// Whether the claim has a step under way.
    pub fn is_busy(&self, claim: &str) -> bool {
        self.in_flight.contains(claim)
    }

    /// Steps under way.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether the claim may start a step at `now`: none under way and its
    /// backoff over.
    pub fn may_start(&self, claim: &str, now: Time) -> bool {
        !self.in_flight.contains(claim) && self.backoff.ready(claim, now)
    }

    /// Starts a step for each view (callers pick claims that
    /// [`Steps::may_start`] and have work, [`super::lifecycle::needs_work`]).
    pub fn start<C: CloudProvider + Send + Sync + 'static>(
        &mut self,
        views: Vec<ClaimView>,
        h: &Handles<C>,
        now: Time,
    ) {
        for view in views {
            let claim = view.claim.name_any();
            if !self.in_flight.insert(claim.clone()) {
                continue;
            }
            let pool = view.claim.spec.node_pool.clone();
            let (api, cloud, metrics, leader) = (
                h.api.clone(),
                h.cloud.clone(),
                h.metrics.clone(),
                h.leader.clone(),
            );
            let (policies, hooks, acks) =
                (h.policies.clone(), h.hooks.clone(), h.hook_acks.clone());
            let (launch_timeout, registration_timeout) = (h.launch_timeout, h.registration_timeout);
            let (catalog, region) = (h.catalog.clone(), h.region.clone());
            let (slots, tx, launches) =
                (self.slots.clone(), self.tx.clone(), self.launches.clone());
            metrics.lifecycle_in_flight.inc();
            tokio::spawn(async move {
                let permit = slots.acquire_owned().await;
                let result = if permit.is_err() || !*leader.borrow() {
                    Ok(Step::Idle)
                } else {
                    let lifecycle = Lifecycle {
                        api: &api,
                        cloud: &*cloud,
                        metrics: &metrics,
                        launch_timeout,
                        registration_timeout,
                        policies: &policies,
                        hooks: &hooks,
                        hook_acks: &acks,
                        launches: &launches,
                        catalog,
                        region: &region,
                    };
                    match tokio::time::timeout(STEP_TIMEOUT, lifecycle.reconcile(&view, now)).await
                    {
                        Ok(r) => r.map_err(|e| e.to_string()),
                        Err(_) => Err(format!(
                            "lifecycle step for {claim} gave no answer within {STEP_TIMEOUT:?}"
                        )),
                    }
                };
                metrics.lifecycle_in_flight.dec();
                metrics.progress.beat();
                let _ = tx.send(Finished {
                    claim,
                    pool,
                    result,
                });
            });
        }
    }

    /// The steps that ended since the last call (without waiting), each
    /// settled: the claim is free again and its backoff updated.
    pub fn take_finished(&mut self, now: Time) -> Vec<Finished> {
        let mut out = Vec::new();
        while let Ok(f) = self.rx.try_recv() {
            out.push(f);
        }
        for f in &out {
            self.settle(f, now);
        }
        out
    }

    /// Waits for the next step to end (pending for ever while none is
    /// under way); the loop then takes it with [`Steps::take_finished`].
    pub async fn wait_finished(&mut self) -> Option<Finished> {
        if self.in_flight.is_empty() {
            return std::future::pending().await;
        }
        self.rx.recv().await
    }

    /// Puts back a step that [`Steps::wait_finished`] returned, for the
    /// next [`Steps::take_finished`].
    pub fn put_back(&mut self, f: Finished) {
        let _ = self.tx.send(f);
    }

    /// Waits until no step is under way (tests; a shutdown), returning what
    /// the steps came to, settled.
    pub async fn idle(&mut self, now: Time) -> Vec<Finished> {
        let mut out = Vec::new();
        while !self.in_flight.is_empty() {
            match self.rx.recv().await {
                Some(f) => {
                    self.settle(&f, now);
                    out.push(f);
                }
                None => break,
            }
        }
        out.extend(self.take_finished(now));
        out
    }

    /// Forgets the backoff of claims that are gone.
    pub fn retain(&mut self, present: &HashSet<String>) {
        self.backoff.retain(present);
        self.launches.retain(present);
    }

    /// The earliest time a waiting claim may start again.
    pub fn next_due(&self, now: Time) -> Option<Time> {
        self.backoff.next_due(now)
    }

    /// Frees the claim and updates its backoff: a drain waits
    /// [`DRAIN_RETRY`] (or until its plan is due, if sooner); a launch that
    /// could not go ahead yet and a failed step back off with jitter;
    /// anything else clears the backoff.
    fn settle(&mut self, f: &Finished, now: Time) {
        self.in_flight.remove(&f.claim);
        match &f.result {
            Ok(Step::Draining { until, .. }) => {
                let retry = crate::core::time::after(now, DRAIN_RETRY);
                let at = until.map_or(retry, |u| u.min(retry)).max(now);
                self.backoff.wait_until(&f.claim, at);
            }
            Ok(Step::Waiting("launch")) | Err(_) => {
                self.backoff.failed(&f.claim, now);
            }
            Ok(_) => self.backoff.succeeded(&f.claim),
        }
    }
}

/// The interruption policy of each pool, by name.
pub fn policies(pools: &[crate::api::NodePool]) -> BTreeMap<String, InterruptionPolicy> {
    pools
        .iter()
        .map(|p| (p.name_any(), p.spec.interruption.clone()))
        .collect()
}

/// Claims by name, for [`Steps::retain`].
pub fn names<'a>(claims: impl IntoIterator<Item = &'a crate::api::NodeClaim>) -> HashSet<String> {
    claims.into_iter().map(|c| c.name_any()).collect()
}
