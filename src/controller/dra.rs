//! DRA objects in the index (`resource.k8s.io/v1`, where the cluster serves
//! it, Kubernetes 1.34 and later): DeviceClasses, ResourceClaims,
//! ResourceClaimTemplates and ResourceSlices, kept whole (less managed
//! fields) in [`Snapshot::dra`], and the watches that feed them. What they
//! mean is `cluster::dra`'s: [`super::snapshot::world_parts`] matches the
//! pending pods' claims and counts the nodes' devices with them.

use super::snapshot::{watch, Indexed, Interners, Kind, Snapshot, Store};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::runtime::watcher;
use kube::Api;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The API group and version of the DRA objects watched.
pub const GROUP: &str = "resource.k8s.io";
/// The version watched.
pub const VERSION: &str = "v1";

macro_rules! indexed {
    ($kind:ty, $which:expr, $slot:ident) => {
        impl Indexed for $kind {
            type Item = $kind;
            const KIND: Kind = $which;
            fn distill(mut self, _: &mut Interners) -> Option<$kind> {
                self.metadata.managed_fields = None;
                Some(self)
            }
            fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, $kind> {
                &mut s.dra.$slot
            }
        }
    };
}

indexed!(DeviceClass, Kind::DeviceClasses, classes);
indexed!(ResourceClaim, Kind::ResourceClaims, claims);
indexed!(
    ResourceClaimTemplate,
    Kind::ResourceClaimTemplates,
    templates
);
indexed!(ResourceSlice, Kind::ResourceSlices, slices);

/// Starts the four DRA watches, telling the store to wait for them (all
/// four before any starts, so the store is never synced without one).
pub fn spawn_watches(
    client: &kube::Client,
    store: &Arc<Store>,
) -> Vec<tokio::task::JoinHandle<()>> {
    for k in [
        Kind::DeviceClasses,
        Kind::ResourceClaims,
        Kind::ResourceClaimTemplates,
        Kind::ResourceSlices,
    ] {
        store.expect(k);
    }
    store.update(|s| s.dra_served = true);
    vec![
        spawn::<DeviceClass>(client, store),
        spawn::<ResourceClaim>(client, store),
        spawn::<ResourceClaimTemplate>(client, store),
        spawn::<ResourceSlice>(client, store),
    ]
}

/// The watch of one DRA kind, cluster-wide.
fn spawn<K: Indexed<Item = K>>(
    client: &kube::Client,
    store: &Arc<Store>,
) -> tokio::task::JoinHandle<()>
where
    K::DynamicType: Default,
{
    let config = watcher::Config::default().any_semantic().page_size(500);
    tokio::spawn(watch(Api::<K>::all(client.clone()), config, store.clone()))
}
