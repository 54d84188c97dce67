//! Cloud notices on a path of their own: a task that takes each notice as
//! it comes, however long the loop's round takes (a big plan, many
//! launches), looks its instance up among our claims and this process'
//! recent launches (no round, no list of every claim), makes it durable
//! (a spot interruption: the claim's `Interrupted` condition and the node's
//! cordon, [`super::interruptions::record`]), reports it to the feed, and
//! passes what the core must hear to the loop, which wakes for it. A notice
//! about an instance that is not ours is settled there and then, waking
//! nothing. Every [`RESUME_EVERY`] it also hands the core the
//! interruptions recorded on claims it has not heard of (a restart, or a
//! claim recorded by the previous leader).
//!
//! In tests that drive rounds by hand the loop runs the same path inline at
//! the start of each round ([`NoticePath::take`]).

use super::interruptions::{notice_views, recorded_of, Launches, NoticeHandler};
use super::kube_api::KubeApi;
use super::snapshot::Store;
use crate::cloud::{InstanceNotice, NoticeAcks};
use crate::core::Notice;
use crate::metrics::{InterruptionLabels, Metrics};
use kube::ResourceExt;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// How often recorded interruptions the core has not heard of are looked
/// for.
pub const RESUME_EVERY: Duration = Duration::from_secs(5);

/// The notice path's state and handles.
pub struct NoticePath {
    handler: NoticeHandler,
    store: Arc<Store>,
    api: KubeApi,
    leader: watch::Receiver<bool>,
    acks: NoticeAcks,
    metrics: Arc<Metrics>,
    launches: Launches,
    to_core: mpsc::UnboundedSender<Notice>,
}

impl NoticePath {
    /// A path over the claims in `store`, writing through `api` (only while
    /// `leader`), reporting to `acks`, passing the core's notices to
    /// `to_core`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<Store>,
        api: KubeApi,
        leader: watch::Receiver<bool>,
        acks: NoticeAcks,
        metrics: Arc<Metrics>,
        launches: Launches,
        to_core: mpsc::UnboundedSender<Notice>,
    ) -> NoticePath {
        NoticePath {
            handler: NoticeHandler::new(),
            store,
            api,
            leader,
            acks,
            metrics,
            launches,
            to_core,
        }
    }

    /// Handles one notice at `now` (see the module doc).
    pub async fn handle(&mut self, n: &InstanceNotice, now: crate::core::Time) {
        let views = self.store.read(|s| notice_views(s, n, &self.launches));
        let leader = *self.leader.borrow();
        let handled = self
            .handler
            .handle_with(n, &views, &self.launches, &self.api, leader, now)
            .await;
        self.acks.push(n, handled.outcome);
        for (pool, kind) in handled.counted {
            self.metrics
                .interruptions
                .get_or_create(&InterruptionLabels {
                    nodepool: pool,
                    kind: kind.into(),
                })
                .inc();
        }
        for notice in handled.notices {
            tracing::info!(instance = %n.instance_id, ?notice, "cloud notice");
            let _ = self.to_core.send(notice);
        }
        self.metrics.progress.beat();
    }

    /// Hands the core the interruptions recorded on claims it has not heard
    /// of; forgets claims that are gone.
    pub fn resume(&mut self) {
        let (views, present): (Vec<_>, HashSet<String>) = self.store.read(|s| {
            let views = s
                .claims
                .values()
                .filter(|c| recorded_of(c).is_some())
                .map(|c| s.claim_view(c))
                .collect();
            (views, s.claims.values().map(|c| c.name_any()).collect())
        });
        self.handler.retain_claims(&present);
        for notice in self.handler.resume(&views) {
            let _ = self.to_core.send(notice);
        }
    }

    /// Handles every notice waiting in `notices` now (the inline path).
    pub async fn take(
        &mut self,
        notices: &mut mpsc::Receiver<InstanceNotice>,
        now: crate::core::Time,
    ) {
        self.resume();
        while let Ok(n) = notices.try_recv() {
            self.handle(&n, now).await;
        }
    }

    /// Serves `notices` until `stop` (or the feed closes and `stop` comes).
    pub async fn serve(
        mut self,
        mut notices: mpsc::Receiver<InstanceNotice>,
        stop: CancellationToken,
    ) {
        let mut every = tokio::time::interval(RESUME_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut open = true;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                n = notices.recv(), if open => match n {
                    Some(n) => self.handle(&n, chrono::Utc::now()).await,
                    None => open = false,
                },
                _ = every.tick() => self.resume(),
            }
        }
    }
}
