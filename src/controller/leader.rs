//! Leader election on a `coordination.k8s.io/v1` Lease: every replica
//! watches, only the holder of the lease writes. [`Leadership`] publishes
//! `true` on a [`watch`] channel while this replica leads and keeps the
//! `leader` gauge in step.
//!
//! Why not a crate: `kube-lease-manager` (the maintained one for kube 5)
//! keeps publishing `true` while renewals fail with API errors and backs off
//! on conflicts instead of stepping down, and it judges expiry by the wall
//! clock. The rules here follow client-go's `leaderelection`:
//! - a lease held by someone else is taken only after it went unrenewed for
//!   its `leaseDurationSeconds` *as observed by this replica's monotonic
//!   clock* (no trust in other nodes' clocks); a lease with no holder, or
//!   one naming us, is taken at once;
//! - every write is a PUT carrying the `resourceVersion` last read or
//!   written (optimistic concurrency): two replicas can never both succeed;
//! - the leader renews every `renew_deadline / 3`; a 409 conflict or another
//!   holder means the lease is lost and the channel flips to `false` before
//!   anything else happens; other errors are retried every `retry_period`,
//!   and leadership is given up once `renew_deadline` has passed since the
//!   last renewal that was sent and succeeded (before any other replica can
//!   consider the lease expired, as `renew_deadline < lease_duration`). Every
//!   request is bounded by the time left to that deadline: at the deadline a
//!   timer turns the flag off whatever the request in flight is doing (the
//!   kube client's own timeouts may be longer, and a half-open connection
//!   never answers);
//! - on [`Leadership::finish`] the channel flips to `false` first, then the
//!   lease is released (no holder, 1 s duration) so a standby takes over at
//!   once.

use crate::metrics::Metrics;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::Client;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The timing settings cannot work together (not retryable: fix the
    /// flags).
    #[error("invalid leader election settings: {0}")]
    InvalidSettings(String),
    /// Reading the lease failed (retried every retry period).
    #[error("failed to read lease {namespace}/{name}: {source}")]
    Read {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// What the API said.
        source: kube::Error,
    },
    /// Writing the lease failed with something other than a conflict
    /// (retried every retry period).
    #[error("failed to write lease {namespace}/{name}: {source}")]
    Write {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// What the API said.
        source: kube::Error,
    },
}

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where the lease lives, who we are, and the timings (client-go's names
/// and defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    /// Lease name.
    pub name: String,
    /// Lease namespace (the controller's own).
    pub namespace: String,
    /// This replica's identity, written as `holderIdentity` (the pod name).
    pub identity: String,
    /// How long a lease stays valid after its last renewal (15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a failed renewal before it gives
    /// up leadership (10 s); renewals happen every third of it.
    pub renew_deadline: Duration,
    /// How often a standby tries to acquire, and a leader retries a failed
    /// renewal (2 s).
    pub retry_period: Duration,
}

impl LeaseSettings {
    /// Checks that the timings can work: a positive retry period, a renew
    /// deadline shorter than the lease duration, a lease of at least one
    /// second, and a non-empty name and identity.
    ///
    /// # Errors
    /// [`Error::InvalidSettings`] naming the first problem.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidSettings(m));
        if self.name.is_empty() || self.namespace.is_empty() {
            return bad("the lease name and namespace must not be empty".into());
        }
        if self.identity.is_empty() {
            return bad("the identity must not be empty".into());
        }
        if self.lease_duration < Duration::from_secs(1) {
            return bad(format!(
                "lease duration {:?} is shorter than 1s",
                self.lease_duration
            ));
        }
        if self.renew_deadline >= self.lease_duration {
            return bad(format!(
                "renew deadline {:?} must be shorter than the lease duration {:?}",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return bad(format!(
                "retry period {:?} must be positive and shorter than the renew deadline {:?}",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }

    fn renew_interval(&self) -> Duration {
        self.renew_deadline / 3
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// This replica's leadership: a channel that is `true` while it leads,
/// and the task (if any) that holds the lease.
pub struct Leadership {
    receiver: watch::Receiver<bool>,
    sender: Option<watch::Sender<bool>>,
    task: Option<(JoinHandle<()>, CancellationToken)>,
    metrics: Arc<Metrics>,
}

impl Leadership {
    /// A replica that always leads (no `--leader-elect`: a single replica).
    pub fn always(metrics: Arc<Metrics>) -> Leadership {
        let (sender, receiver) = watch::channel(true);
        metrics.leader.set(1);
        Leadership {
            receiver,
            sender: Some(sender),
            task: None,
            metrics,
        }
    }

    /// Starts electing on the lease in `settings` with `client`; the
    /// channel starts `false`.
    ///
    /// # Errors
    /// [`Error::InvalidSettings`] when the settings cannot work.
    pub fn elect(
        client: Client,
        settings: LeaseSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Leadership> {
        settings.validate()?;
        let (sender, receiver) = watch::channel(false);
        metrics.leader.set(0);
        let stop = CancellationToken::new();
        let elector = Elector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            sender,
            metrics: metrics.clone(),
            observed: None,
            held: None,
        };
        let task = tokio::spawn(elector.run(stop.clone()));
        Ok(Leadership {
            receiver,
            sender: None,
            task: Some((task, stop)),
            metrics,
        })
    }

    /// A receiver of the leadership flag: `true` while this replica leads.
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.receiver.clone()
    }

    /// Gives leadership up: the flag turns `false`, then the lease (if held)
    /// is released so that a standby takes over without waiting for it to
    /// expire. Call it after the loop has stopped writing.
    pub async fn finish(self) {
        if let Some(sender) = &self.sender {
            sender.send_replace(false);
            self.metrics.leader.set(0);
        }
        if let Some((task, stop)) = self.task {
            stop.cancel();
            if let Err(e) = task.await {
                tracing::error!(error = %e, "the leader election task failed");
            }
        }
    }
}

/// Runs `task` only while `leader` is `true`: starts it when leadership is
/// gained, cancels its token (and waits for it to wind down) when
/// leadership is lost, and starts it afresh on the next term. Returns when
/// `shutdown` fires (after the running task has seen its token, a child of
/// `shutdown`, cancelled), when the leader channel closes, or when a run of
/// the task ends by itself. For work that a standby must not do, such as
/// taking messages off a queue that only the leader acts on.
pub async fn while_leading<F, Fut>(
    mut leader: watch::Receiver<bool>,
    shutdown: CancellationToken,
    mut task: F,
) where
    F: FnMut(CancellationToken) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    loop {
        while !*leader.borrow_and_update() {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = leader.changed() => if changed.is_err() { return },
            }
        }
        let stop = shutdown.child_token();
        let mut running = std::pin::pin!(task(stop.clone()));
        loop {
            tokio::select! {
                () = &mut running => return,
                changed = leader.changed() => {
                    if changed.is_err() || !*leader.borrow_and_update() {
                        stop.cancel();
                        running.as_mut().await;
                        if changed.is_err() {
                            return;
                        }
                        break;
                    }
                }
            }
        }
    }
}

/// What this replica last saw of someone else's lease, and when (on the
/// monotonic clock).
struct Observed {
    record: (Option<String>, Option<MicroTime>, Option<String>),
    at: Instant,
    duration: Duration,
}

/// The task that acquires, renews and releases the lease.
struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
    sender: watch::Sender<bool>,
    metrics: Arc<Metrics>,
    observed: Option<Observed>,
    /// The lease as we last wrote it, while we hold it.
    held: Option<Lease>,
}

/// How a renewal went.
enum Renewal {
    Renewed,
    /// A conflict or another holder: the lease is someone else's now.
    Lost(String),
    /// Anything else: retry until the renew deadline.
    Failed(Error),
}

impl Elector {
    async fn run(mut self, stop: CancellationToken) {
        let s = self.settings.clone();
        loop {
            // Standby: try to acquire every retry period.
            let acquired_at = loop {
                if stop.is_cancelled() {
                    return;
                }
                let sent = Instant::now();
                // Bounded like a renewal: a write that answers only after
                // the renew deadline leaves no time to lead.
                let attempt = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = tokio::time::timeout(s.renew_deadline, self.try_acquire()) => r,
                };
                match attempt {
                    Ok(Ok(true)) if Instant::now() < sent + s.renew_deadline => break sent,
                    Ok(Ok(true)) => {
                        self.held = None;
                        tracing::warn!("acquired the lease too late to lead; retrying");
                    }
                    Ok(Ok(false)) => {}
                    Ok(Err(e)) => tracing::warn!(error = %e, "leader election: acquiring failed"),
                    Err(_) => tracing::warn!("leader election: acquiring timed out"),
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(s.retry_period) => {}
                }
            };
            self.set_leading(true);
            tracing::info!(lease = %s.name, identity = %s.identity, "became the leader");

            // Leader: renew every third of the renew deadline. Leadership
            // ends at `deadline` (the last successful renewal's send time
            // plus the renew deadline) by a timer, whatever a renewal in
            // flight is doing: a request that never returns (a half-open
            // connection) is abandoned there.
            let mut deadline = acquired_at + s.renew_deadline;
            let mut wait = s.renew_interval();
            loop {
                let wake = (Instant::now() + wait).min(deadline);
                tokio::select! {
                    _ = stop.cancelled() => {
                        self.set_leading(false);
                        self.release().await;
                        return;
                    }
                    _ = tokio::time::sleep_until(wake) => {}
                }
                if Instant::now() >= deadline {
                    self.step_down("the renew deadline passed before a renewal");
                    break;
                }
                let sent = Instant::now();
                let renewal = tokio::select! {
                    _ = stop.cancelled() => {
                        self.set_leading(false);
                        self.release().await;
                        return;
                    }
                    r = tokio::time::timeout_at(deadline, self.renew()) => r,
                };
                match renewal {
                    Err(_) => {
                        self.step_down("the renewal did not complete within the renew deadline");
                        break;
                    }
                    Ok(Renewal::Renewed) => {
                        deadline = sent + s.renew_deadline;
                        wait = s.renew_interval();
                    }
                    Ok(Renewal::Lost(why)) => {
                        self.set_leading(false);
                        self.held = None;
                        tracing::warn!(lease = %s.name, reason = %why, "lost the lease; stopped leading");
                        break;
                    }
                    Ok(Renewal::Failed(e)) => {
                        if Instant::now() + s.retry_period >= deadline {
                            tracing::warn!(error = %e, "renewing the lease failed");
                            self.step_down("could not renew the lease within the renew deadline");
                            break;
                        }
                        tracing::warn!(error = %e, "renewing the lease failed; retrying");
                        wait = s.retry_period;
                    }
                }
            }
        }
    }

    /// Stops leading because the renew deadline passed: the flag first,
    /// then the held lease is forgotten (another replica may take it once
    /// it looks expired; we must not write it again as ours).
    fn step_down(&mut self, why: &str) {
        self.set_leading(false);
        self.held = None;
        tracing::warn!(lease = %self.settings.name, reason = why, "stopped leading");
    }

    fn set_leading(&self, leading: bool) {
        // Flip the flag before anything else, so writers stop at once.
        self.sender.send_replace(leading);
        self.metrics.leader.set(i64::from(leading));
    }

    fn read_error(&self, source: kube::Error) -> Error {
        Error::Read {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
            source,
        }
    }

    fn write_error(&self, source: kube::Error) -> Error {
        Error::Write {
            namespace: self.settings.namespace.clone(),
            name: self.settings.name.clone(),
            source,
        }
    }

    /// One acquisition attempt: `Ok(true)` when we hold the lease now.
    async fn try_acquire(&mut self) -> Result<bool> {
        let s = &self.settings;
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let Some(current) = self
            .api
            .get_opt(&s.name)
            .await
            .map_err(|e| self.read_error(e))?
        else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(s.name.clone()),
                    namespace: Some(s.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(s.identity.clone()),
                    lease_duration_seconds: Some(s.lease_seconds()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.held = Some(created);
                    Ok(true)
                }
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(e) => Err(self.write_error(e)),
            };
        };

        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let record = (
            holder.clone(),
            spec.renew_time.clone(),
            current.metadata.resource_version.clone(),
        );
        let seen = Instant::now();
        if self.observed.as_ref().map(|o| &o.record) != Some(&record) {
            let duration = spec
                .lease_duration_seconds
                .and_then(|d| u64::try_from(d).ok())
                .map_or(s.lease_duration, Duration::from_secs);
            self.observed = Some(Observed {
                record,
                at: seen,
                duration,
            });
        }
        let ours = holder.as_deref() == Some(s.identity.as_str());
        let expired = self
            .observed
            .as_ref()
            .is_some_and(|o| seen >= o.at + o.duration);
        if holder.is_some() && !ours && !expired {
            return Ok(false);
        }

        let mut lease = current;
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(s.identity.clone()),
            lease_duration_seconds: Some(s.lease_seconds()),
            acquire_time: if ours {
                spec.acquire_time.clone()
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if ours { transitions } else { transitions + 1 }),
            ..spec
        });
        match self
            .api
            .replace(&s.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.held = Some(written);
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(self.write_error(e)),
        }
    }

    /// Renews the held lease with a PUT on its last resourceVersion.
    async fn renew(&mut self) -> Renewal {
        let Some(mut lease) = self.held.clone() else {
            return Renewal::Lost("no lease held".into());
        };
        let mut spec = lease.spec.take().unwrap_or_default();
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        spec.lease_duration_seconds = Some(self.settings.lease_seconds());
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                let holder = written
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.clone());
                if holder.as_deref() != Some(self.settings.identity.as_str()) {
                    return Renewal::Lost(format!("the lease names {holder:?} as holder"));
                }
                self.held = Some(written);
                Renewal::Renewed
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Renewal::Lost(format!("conflict: {}", status.message))
            }
            Err(e) => Renewal::Failed(self.write_error(e)),
        }
    }

    /// Releases the held lease: no holder, a one-second duration.
    async fn release(&mut self) {
        let Some(mut lease) = self.held.take() else {
            return;
        };
        let mut spec = lease.spec.take().unwrap_or_default();
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
        lease.spec = Some(spec);
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!(lease = %self.settings.name, "released the lease"),
            Err(e) => tracing::warn!(error = %e, "releasing the lease failed; it will expire"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> LeaseSettings {
        LeaseSettings {
            name: "quartermaster".into(),
            namespace: "qm".into(),
            identity: "qm-0".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn work_runs_only_while_leading_and_stops_with_leadership() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (tx, rx) = watch::channel(false);
        let shutdown = CancellationToken::new();
        let (started, stopped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (s, t) = (started.clone(), stopped.clone());
        let runner = tokio::spawn(while_leading(rx, shutdown.clone(), move |stop| {
            let (s, t) = (s.clone(), t.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                stop.cancelled().await;
                t.fetch_add(1, Ordering::SeqCst);
            }
        }));
        let settle = || tokio::time::sleep(Duration::from_millis(1));
        settle().await;
        assert_eq!(
            started.load(Ordering::SeqCst),
            0,
            "a standby does not run it"
        );
        tx.send_replace(true);
        settle().await;
        assert_eq!(
            (
                started.load(Ordering::SeqCst),
                stopped.load(Ordering::SeqCst)
            ),
            (1, 0)
        );
        tx.send_replace(false);
        settle().await;
        assert_eq!(
            (
                started.load(Ordering::SeqCst),
                stopped.load(Ordering::SeqCst)
            ),
            (1, 1)
        );
        tx.send_replace(true);
        settle().await;
        assert_eq!(
            started.load(Ordering::SeqCst),
            2,
            "a new term runs it again"
        );
        shutdown.cancel();
        runner.await.unwrap();
        assert_eq!(
            stopped.load(Ordering::SeqCst),
            2,
            "shutdown cancels the running one"
        );
    }

    #[test]
    fn default_like_timings_are_valid() {
        settings().validate().unwrap();
    }

    #[test]
    fn renew_deadline_not_shorter_than_lease_is_rejected() {
        let s = LeaseSettings {
            renew_deadline: Duration::from_secs(15),
            ..settings()
        };
        let err = s.validate().unwrap_err().to_string();
        assert!(err.contains("renew deadline"), "{err}");
    }

    #[test]
    fn zero_retry_period_and_empty_identity_are_rejected() {
        let s = LeaseSettings {
            retry_period: Duration::ZERO,
            ..settings()
        };
        assert!(s.validate().is_err());
        let s = LeaseSettings {
            identity: String::new(),
            ..settings()
        };
        assert!(s.validate().is_err());
    }
}
