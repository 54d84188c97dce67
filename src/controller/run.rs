//! The controller's main loop: waits for the reflectors to sync, then on
//! every batch, notice and timer builds the snapshot, runs the core (only
//! while this replica leads) and hands the actions to the executor; also
//! drives the NodeClaim lifecycle and garbage collection.

use super::kube_api::KubeApi;
use super::metrics::Metrics;
use crate::catalog::Catalog;
use crate::cloud::{CloudProvider, InstanceNotice};
use std::sync::atomic::AtomicBool;
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
    /// The cloud is simulated: the loop creates Node objects for its
    /// instances itself (as Karpenter's kwok provider does).
    pub simulated_nodes: bool,
}

/// Runs until `shutdown` is cancelled, then finishes the round in flight
/// and returns.
///
/// # Errors
/// A watch that cannot start (missing CRDs, no permission).
pub async fn run<C: CloudProvider + Send + Sync + 'static>(
    ctx: Context<C>,
    settings: Settings,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let _ = (ctx, settings, shutdown);
    todo!()
}
