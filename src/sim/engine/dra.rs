//! DRA in the engine, as the cluster's other parts play it: the DRA
//! drivers of a node launched to serve claims publish its ResourceSlices
//! once it is Ready (made by the simulated cloud from the catalog's device
//! templates), and the node counts as initialized only when every driver
//! it was launched for has published (`cluster::dra::drivers_published`,
//! what the controller's lifecycle waits for); the kube-scheduler binds a
//! pod with claims where its claims' devices are free, and the node holds
//! those devices while it runs. What a claim needs is the resolver's and
//! the core's; nothing is decided here.

use super::Engine;
use crate::api::labels as l;
use crate::cluster::dra::drivers_published;
use crate::cluster::{Pod, Pool, Resources};
use std::borrow::Cow;

impl Engine<'_> {
    /// The drivers of node `claim` (Ready now) publish its ResourceSlices
    /// when it was launched to serve DRA claims. Returns whether it is
    /// initialized: it serves none, or every device it was launched to
    /// offer has been published.
    pub(super) fn publish_slices(&mut self, claim: &str) -> bool {
        let Some((n, _)) = self.nodes.get_mut(claim) else {
            return true;
        };
        if n.state.labels.get(l::DRA).is_none_or(|v| v != "true") {
            return true;
        }
        let expected = n.state.allocatable.clone();
        let pool = self
            .pools
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(n.nodepool.as_str()))
            .and_then(|p| Pool::from_api(p, Resources::new()).ok());
        let layout = pool.as_ref().map(Pool::gpu_layout).unwrap_or_default();
        let runs = |driver: &str| pool.as_ref().is_some_and(|p| p.runs_dra_driver(driver));
        for s in self.cloud.resource_slices(claim, layout, &runs) {
            self.dra.add_slice(s);
        }
        drivers_published(&expected, &self.dra.node_devices(claim).0)
    }
}

/// `pod` as the kube-scheduler binds it: as it is when it has no DRA
/// claims, else with the devices its claims take
/// ([`crate::cluster::dra::PodDevices::scheduled`]); `None` when its claims
/// were not matched or no node can serve them.
pub(super) fn bound_form(pod: &Pod) -> Option<Cow<'_, Pod>> {
    if pod.resource_claims.is_empty() {
        return Some(Cow::Borrowed(pod));
    }
    pod.devices.as_ref()?.scheduled(pod).map(Cow::Owned)
}

/// What `pod` holds on its node while bound: its requests and its claims'
/// devices.
pub(super) fn held(pod: &Pod) -> Resources {
    bound_form(pod).map_or_else(|| pod.requests.clone(), |p| p.requests.clone())
}
