//! Gangs declared by other projects' APIs: which of them the cluster serves
//! (discovered once at start-up: a missing API is logged once and not
//! watched), and the watches feeding their PodGroups into the store. The
//! sizes are applied to pods in [`super::snapshot::world_parts`].

use super::snapshot::{watch, Indexed, Interners, Kind, Snapshot, Store};
use crate::api::foreign::{
    self, ProvisioningRequest, SchedulingPodGroup, VolcanoPodGroup, PROVISIONING_API_GROUP,
    PROVISIONING_VERSION, SCHEDULING_API_GROUP, SCHEDULING_POD_GROUP_VERSIONS, VOLCANO_API_GROUP,
    VOLCANO_VERSION,
};
use crate::cluster::podgroups::PodGroupSpec;
use crate::cluster::Resources;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroupList;
use kube::runtime::watcher;
use kube::Api;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The optional APIs the cluster serves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServedApis {
    /// Volcano's `scheduling.volcano.sh/v1beta1` PodGroups.
    pub volcano: bool,
    /// The version of `scheduling.k8s.io` serving Workload API PodGroups.
    pub scheduling_pod_groups: Option<String>,
    /// cluster-autoscaler's `autoscaling.x-k8s.io/v1` ProvisioningRequests.
    pub provisioning_requests: bool,
}

impl ServedApis {
    /// What a discovery answer (`GET /apis`) says is served.
    pub fn from_groups(groups: &APIGroupList) -> ServedApis {
        let serves = |group: &str, version: &str| {
            groups
                .groups
                .iter()
                .filter(|g| g.name == group)
                .flat_map(|g| &g.versions)
                .any(|v| v.version == version)
        };
        ServedApis {
            volcano: serves(VOLCANO_API_GROUP, VOLCANO_VERSION),
            scheduling_pod_groups: SCHEDULING_POD_GROUP_VERSIONS
                .iter()
                .find(|v| serves(SCHEDULING_API_GROUP, v))
                .map(|v| v.to_string()),
            provisioning_requests: serves(PROVISIONING_API_GROUP, PROVISIONING_VERSION),
        }
    }

    /// Logs, once, what is served and what is not (and so not watched).
    pub fn log(&self) {
        let say = |served: bool, what: &str| {
            if served {
                tracing::info!(api = what, "served: watching it");
            } else {
                tracing::info!(api = what, "not served by this cluster: not watched");
            }
        };
        say(self.volcano, "scheduling.volcano.sh/v1beta1 PodGroup");
        match &self.scheduling_pod_groups {
            Some(v) => say(true, &format!("scheduling.k8s.io/{v} PodGroup")),
            None => say(false, "scheduling.k8s.io PodGroup (Workload API)"),
        }
        say(
            self.provisioning_requests,
            "autoscaling.x-k8s.io/v1 ProvisioningRequest",
        );
    }
}

/// Asks the API server which groups it serves (one `GET /apis`).
///
/// # Errors
/// The discovery request failing (the API server is unreachable).
pub async fn discover(client: &kube::Client) -> Result<ServedApis, kube::Error> {
    let groups = client.list_api_groups().await?;
    let served = ServedApis::from_groups(&groups);
    served.log();
    Ok(served)
}

/// Starts a watch for each served API, telling the store to wait for them.
pub fn spawn_watches(
    client: &kube::Client,
    store: &Arc<Store>,
    served: &ServedApis,
) -> Vec<tokio::task::JoinHandle<()>> {
    let config = || watcher::Config::default().any_semantic().page_size(500);
    let mut out = Vec::new();
    if served.volcano {
        store.expect(Kind::VolcanoPodGroups);
        out.push(tokio::spawn(watch(
            Api::<VolcanoPodGroup>::all(client.clone()),
            config(),
            store.clone(),
        )));
    }
    if let Some(v) = &served.scheduling_pod_groups {
        store.expect(Kind::SchedulingPodGroups);
        out.push(tokio::spawn(watch(
            Api::<SchedulingPodGroup>::all_with(client.clone(), &SchedulingPodGroup::api(v)),
            config(),
            store.clone(),
        )));
    }
    if served.provisioning_requests {
        store.expect(Kind::ProvisioningRequests);
        out.push(tokio::spawn(watch(
            Api::<ProvisioningRequest>::all(client.clone()),
            config(),
            store.clone(),
        )));
    }
    out
}

/// A Volcano PodGroup's size and `minResources` (quantities that do not
/// parse are left out, logged: the group still counts by size).
pub fn volcano_spec(pg: &VolcanoPodGroup) -> PodGroupSpec {
    let min_resources = pg.spec.min_resources.as_ref().and_then(|r| {
        Resources::parse(r.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))
            .map_err(|e| {
                tracing::warn!(podgroup = ?pg.metadata.name, error = %e, "minResources left out");
            })
            .ok()
    });
    PodGroupSpec {
        min_member: pg.spec.min_member.unwrap_or(1).max(1) as u32,
        min_resources,
    }
}

impl Indexed for VolcanoPodGroup {
    type Item = PodGroupSpec;
    const KIND: Kind = Kind::VolcanoPodGroups;
    fn distill(self, _: &mut Interners) -> Option<PodGroupSpec> {
        Some(volcano_spec(&self))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, PodGroupSpec> {
        &mut s.volcano_groups
    }
}

impl Indexed for SchedulingPodGroup {
    type Item = PodGroupSpec;
    const KIND: Kind = Kind::SchedulingPodGroups;
    /// Only gang groups are kept: a `basic` group schedules pod by pod.
    fn distill(self, _: &mut Interners) -> Option<PodGroupSpec> {
        let gang = self.spec.scheduling_policy.gang?;
        Some(PodGroupSpec {
            min_member: gang.min_count.unwrap_or(1).max(1) as u32,
            min_resources: None,
        })
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, PodGroupSpec> {
        &mut s.scheduling_groups
    }
}

impl Indexed for ProvisioningRequest {
    type Item = ProvisioningRequest;
    const KIND: Kind = Kind::ProvisioningRequests;
    fn distill(mut self, _: &mut Interners) -> Option<ProvisioningRequest> {
        self.metadata.managed_fields = None;
        Some(self)
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, ProvisioningRequest> {
        &mut s.provisioning_requests
    }
}

/// The class names this controller serves.
pub fn serves_class(class: &str) -> bool {
    class == foreign::CLASS_ATOMIC || class == foreign::CLASS_CHECK_CAPACITY
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn groups(v: serde_json::Value) -> APIGroupList {
        serde_json::from_value(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": v}))
            .unwrap()
    }

    fn group(name: &str, versions: &[&str]) -> serde_json::Value {
        let vs: Vec<_> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
            .collect();
        json!({"name": name, "versions": vs})
    }

    #[test]
    fn discovery_finds_the_served_versions_and_nothing_else() {
        let all = groups(json!([
            group("scheduling.volcano.sh", &["v1beta1"]),
            group("scheduling.k8s.io", &["v1", "v1alpha2"]),
            group("autoscaling.x-k8s.io", &["v1", "v1beta1"]),
        ]));
        assert_eq!(
            ServedApis::from_groups(&all),
            ServedApis {
                volcano: true,
                scheduling_pod_groups: Some("v1alpha2".into()),
                provisioning_requests: true,
            }
        );
        // PriorityClasses alone (v1) and the 1.35 Workload (v1alpha1) serve
        // no PodGroup; ProvisioningRequest v1beta1 alone is not read.
        let none = groups(json!([
            group("scheduling.k8s.io", &["v1", "v1alpha1"]),
            group("autoscaling.x-k8s.io", &["v1beta1"]),
        ]));
        assert_eq!(ServedApis::from_groups(&none), ServedApis::default());
    }

    #[test]
    fn a_basic_workload_pod_group_is_no_gang() {
        let pg = |policy: serde_json::Value| -> SchedulingPodGroup {
            serde_json::from_value(json!({"metadata": {"name": "w", "namespace": "ml"},
                "spec": {"schedulingPolicy": policy}}))
            .unwrap()
        };
        let mut i = Interners::default();
        assert_eq!(pg(json!({"basic": {}})).distill(&mut i), None);
        let gang = pg(json!({"gang": {"minCount": 4}}))
            .distill(&mut i)
            .unwrap();
        assert_eq!(gang.min_member, 4);
    }
}
