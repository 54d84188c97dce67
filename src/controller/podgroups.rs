//! Gangs declared by other projects' APIs: which of them the cluster serves
//! (discovered once at start-up: a missing API is logged once and not
//! watched), and the watches feeding their PodGroups into the store. The
//! sizes are applied to pods in [`super::snapshot::world_parts`].

use super::snapshot::{to_chrono, watch, Indexed, Interners, Kind, Snapshot, Store};
use crate::api::foreign::{
    self, ProvisioningRequest, SchedulingPodGroup, VolcanoPodGroup, PROVISIONING_API_GROUP,
    PROVISIONING_VERSION, SCHEDULING_API_GROUP, SCHEDULING_POD_GROUP_VERSIONS, VOLCANO_API_GROUP,
    VOLCANO_VERSION,
};
use crate::cluster::podgroups::PodGroupSpec;
use crate::cluster::Resources;
use crate::cluster::{ClaimRef, Pod};
use crate::core::provisioning::{Class, Request, Transition};
use crate::core::Time;
use k8s_openapi::api::core::v1::{self as core, PodTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroupList;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
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
    /// DRA's `resource.k8s.io/v1` (DeviceClasses, ResourceClaims,
    /// ResourceClaimTemplates, ResourceSlices: `super::dra`).
    pub dra: bool,
    /// cluster-autoscaler's `autoscaling.x-k8s.io/v1beta1` CapacityBuffers
    /// (`super::buffers`).
    pub capacity_buffers: bool,
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
            dra: serves(super::dra::GROUP, super::dra::VERSION),
            capacity_buffers: serves(PROVISIONING_API_GROUP, foreign::CAPACITY_BUFFER_VERSION),
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
        say(
            self.dra,
            "resource.k8s.io/v1 DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice",
        );
        say(
            self.capacity_buffers,
            "autoscaling.x-k8s.io/v1beta1 CapacityBuffer",
        );
    }
}

/// Asks the API server which groups it serves (one `GET /apis`, and the
/// resources of `autoscaling.x-k8s.io/v1beta1` where that is served).
///
/// # Errors
/// The discovery request failing (the API server is unreachable).
pub async fn discover(client: &kube::Client) -> Result<ServedApis, kube::Error> {
    let groups = client.list_api_groups().await?;
    let mut served = ServedApis::from_groups(&groups);
    if served.capacity_buffers {
        served.capacity_buffers = super::buffers::serves_capacity_buffers(client).await;
    }
    served.log();
    Ok(served)
}

/// Starts a watch for each served API (the gang APIs here, DRA's in
/// [`super::dra`]), telling the store to wait for them.
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
        store.expect(Kind::PodTemplates);
        out.push(tokio::spawn(watch(
            Api::<ProvisioningRequest>::all(client.clone()),
            config(),
            store.clone(),
        )));
        out.push(tokio::spawn(watch(
            Api::<PodTemplate>::all(client.clone()),
            config(),
            store.clone(),
        )));
    }
    if served.dra {
        out.extend(super::dra::spawn_watches(client, store));
    }
    out.extend(super::buffers::spawn_watches(client, store, served));
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
        min_resources,
        ..PodGroupSpec::of_size(pg.spec.min_member.unwrap_or(1).max(1) as u32)
    }
}

/// A Workload API gang PodGroup as the planner reads it: `minCount` (at
/// least 1), its topology keys, and its claims (a template claim with the
/// claim made for it, from `status.resourceClaimStatuses`, once made).
/// `None` for a `basic` group.
pub fn scheduling_spec(pg: SchedulingPodGroup) -> Option<PodGroupSpec> {
    let gang = pg.spec.scheduling_policy.gang?;
    let made: BTreeMap<String, String> = pg
        .status
        .into_iter()
        .flat_map(|s| s.resource_claim_statuses)
        .filter_map(|s| Some((s.name, s.resource_claim_name?)))
        .collect();
    Some(PodGroupSpec {
        topology: pg
            .spec
            .scheduling_constraints
            .into_iter()
            .flat_map(|c| c.topology)
            .map(|t| t.key)
            .collect(),
        claims: pg
            .spec
            .resource_claims
            .into_iter()
            .map(|c| ClaimRef {
                generated: made.get(&c.name).cloned(),
                name: c.name,
                claim: c.resource_claim_name,
                template: c.resource_claim_template_name,
                group: None,
            })
            .collect(),
        ..PodGroupSpec::of_size(gang.min_count.unwrap_or(1).max(1) as u32)
    })
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
        scheduling_spec(self)
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

/// The pod a pod template makes, as the planner sees it, named and
/// namespaced as its owner (`owner`: a PodTemplate, a Deployment, ...), or
/// why it does not read as a pod.
pub fn template_pod(owner: &ObjectMeta, template: core::PodTemplateSpec) -> Result<Pod, String> {
    let mut meta = template.metadata.unwrap_or_default();
    meta.namespace = owner.namespace.clone();
    meta.name = owner.name.clone();
    let pod = core::Pod {
        metadata: meta,
        spec: template.spec,
        status: None,
    };
    Pod::from_k8s(&pod, &BTreeMap::new()).map_err(|e| e.to_string())
}

impl Indexed for PodTemplate {
    type Item = Result<Pod, String>;
    const KIND: Kind = Kind::PodTemplates;
    /// The pod the template makes, as the planner sees it.
    fn distill(self, _: &mut Interners) -> Option<Result<Pod, String>> {
        Some(template_pod(
            &self.metadata,
            self.template.unwrap_or_default(),
        ))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, Result<Pod, String>> {
        &mut s.pod_templates
    }
}

/// The class of a request, if it is one served here.
fn class_of(name: &str) -> Option<Class> {
    match name {
        foreign::CLASS_ATOMIC => Some(Class::Atomic),
        foreign::CLASS_CHECK_CAPACITY => Some(Class::CheckCapacity),
        _ => None,
    }
}

/// Whether the request is over (`Failed`, `BookingExpired` or
/// `CapacityRevoked` is True): its pods are not made any more.
fn is_over(pr: &ProvisioningRequest) -> bool {
    use foreign::conditions as c;
    pr.status.iter().flat_map(|s| &s.conditions).any(|k| {
        k.status == "True"
            && [c::FAILED, c::BOOKING_EXPIRED, c::CAPACITY_REVOKED].contains(&k.type_.as_str())
    })
}

/// When a request created at `created` stops being valid, by its
/// `ValidUntilSeconds` parameter (`None`: no such parameter), or why the
/// parameter cannot be used: not a whole number of seconds, negative, or
/// past what a time can hold.
fn valid_until(value: Option<&str>, created: Option<Time>) -> Result<Option<Time>, String> {
    let Some(v) = value else {
        return Ok(None);
    };
    let key = foreign::PARAM_VALID_UNTIL_SECONDS;
    let secs: i64 = v
        .trim()
        .parse()
        .map_err(|_| format!("{key}={v:?} is not a whole number of seconds"))?;
    if secs < 0 {
        return Err(format!("{key}={v:?} is negative"));
    }
    let Some(at) = created else {
        return Ok(None);
    };
    chrono::TimeDelta::try_seconds(secs)
        .and_then(|d| at.checked_add_signed(d))
        .map(Some)
        .ok_or_else(|| format!("{key}={v:?} is out of range"))
}

/// The pods of a request's PodSets, one per requested pod, at most
/// `max_pods` of them (the batch cap: a request is all or nothing, so one
/// with more pods than one plan considers can never be met), or why not.
fn pods_of(
    s: &Snapshot,
    ns: &str,
    sets: &[foreign::PodSet],
    max_pods: usize,
) -> Result<Vec<Pod>, String> {
    let mut total: u64 = 0;
    for set in sets {
        let count = u64::try_from(set.count).map_err(|_| {
            format!(
                "podSet {} has a negative count ({})",
                set.pod_template_ref.name, set.count
            )
        })?;
        total += count;
    }
    if total > max_pods as u64 {
        return Err(format!(
            "its podSets ask for {total} pods, more than the {max_pods} one plan considers (--max-batch-pods): it can never be met whole"
        ));
    }
    let mut pods = Vec::with_capacity(total as usize);
    for set in sets {
        let name = &set.pod_template_ref.name;
        match s.pod_templates.get(&format!("{ns}/{name}")) {
            Some(Ok(pod)) => pods.extend(std::iter::repeat_n(pod, set.count as usize).cloned()),
            Some(Err(e)) => return Err(format!("podTemplate {ns}/{name}: {e}")),
            None => return Err(format!("podTemplate {ns}/{name} not found")),
        }
    }
    Ok(pods)
}

/// The ProvisioningRequests of the classes served here, as the core reads
/// them, oldest first (they take room in that order): their pods from their
/// PodSets' templates, the pods consuming them, `ValidUntilSeconds`,
/// `noRetry` and their conditions. At most `max_pods` pods are made for
/// all of them together, oldest requests first: a request that does not fit
/// in what is left waits for a later round (it is left out until then), and
/// a request over (failed, expired, revoked) gets none.
pub fn provisioning_requests(s: &Snapshot, max_pods: usize) -> Vec<Request> {
    let mut consumed: BTreeMap<String, usize> = BTreeMap::new();
    for p in s.pods.values() {
        if let Some(pr) = &p.consumes {
            *consumed.entry(format!("{}/{pr}", p.namespace)).or_default() += 1;
        }
    }
    let mut served: Vec<(Option<Time>, &String, &ProvisioningRequest, Class)> = s
        .provisioning_requests
        .iter()
        .filter_map(|(key, pr)| {
            let class = class_of(&pr.spec.provisioning_class_name)?;
            let created = pr.metadata.creation_timestamp.as_ref().and_then(to_chrono);
            Some((created, key, pr, class))
        })
        .collect();
    served.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
    let mut left = max_pods;
    let mut out = Vec::new();
    for (created, key, pr, class) in served {
        let ns = pr.metadata.namespace.as_deref().unwrap_or("default");
        let pods = if is_over(pr) {
            Ok(Vec::new())
        } else {
            pods_of(s, ns, &pr.spec.pod_sets, max_pods)
        };
        if let Ok(p) = &pods {
            if p.len() > left {
                tracing::debug!(request = %key, pods = p.len(), "ProvisioningRequest waits: older requests take this round's pods");
                continue;
            }
            left -= p.len();
        }
        let param = |k: &str| pr.spec.parameters.get(k).map(String::as_str);
        let conditions = pr
            .status
            .iter()
            .flat_map(|st| &st.conditions)
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status == "True",
                    c.reason.clone(),
                    to_chrono(&c.last_transition_time).unwrap_or_default(),
                )
            })
            .collect();
        out.push(Request {
            name: key.clone(),
            class,
            pods,
            consumed: consumed.get(key).copied().unwrap_or(0),
            valid_until: valid_until(param(foreign::PARAM_VALID_UNTIL_SECONDS), created),
            no_retry: param(foreign::PARAM_NO_RETRY) == Some("true"),
            conditions,
        });
    }
    out
}

/// The request's conditions with each of `ts` set in turn (replacing the
/// condition of the same type in place, or appended), as
/// cluster-autoscaler updates them.
pub fn with_conditions(pr: &ProvisioningRequest, ts: &[&Transition], now: Time) -> Vec<Condition> {
    let mut conditions: Vec<Condition> = pr
        .status
        .iter()
        .flat_map(|s| s.conditions.clone())
        .collect();
    for t in ts {
        let c = Condition {
            type_: t.condition.to_string(),
            status: if t.status { "True" } else { "False" }.into(),
            observed_generation: pr.metadata.generation,
            last_transition_time: super::snapshot::to_k8s_time(now),
            reason: t.reason.to_string(),
            message: t.message.clone(),
        };
        match conditions.iter_mut().find(|old| old.type_ == t.condition) {
            Some(old) => *old = c,
            None => conditions.push(c),
        }
    }
    conditions
}

/// Runs the ProvisioningRequest step on the world: its stand-ins join the
/// pending pods, the room it holds is put on the nodes (as do-not-disrupt
/// pods), and the conditions to set are returned. `unplaceable` says why
/// the last plan found no place for a pod; `max_pods` bounds the pods made
/// ([`provisioning_requests`]).
pub fn provisioning_step(
    store: &Store,
    parts: &mut super::snapshot::WorldParts,
    unplaceable: &dyn Fn(&str) -> Option<String>,
    max_pods: usize,
    now: Time,
) -> Vec<Transition> {
    let requests = store.read(|s| provisioning_requests(s, max_pods));
    if requests.is_empty() {
        return Vec::new();
    }
    let step = crate::core::provisioning::step(&requests, &parts.nodes, unplaceable, now);
    parts.pending.extend(step.pending);
    for (n, held) in step.held {
        let node = &mut parts.nodes[n];
        node.state.used.add(&held.pod.requests);
        node.pods.push(held);
    }
    step.transitions
}

/// Writes the transitions to their requests' status, one patch per request
/// (with an Event and the condition counter per condition); a failed write
/// is logged and made again next round (the conditions are still missing
/// then).
pub async fn write_transitions(
    api: &super::kube_api::KubeApi,
    events: Option<&super::events::Events>,
    metrics: &crate::metrics::Metrics,
    store: &Store,
    transitions: &[Transition],
    now: Time,
) {
    let mut by_request: BTreeMap<&str, Vec<&Transition>> = BTreeMap::new();
    for t in transitions {
        by_request.entry(t.request.as_str()).or_default().push(t);
    }
    for (request, ts) in by_request {
        let Some(pr) = store.read(|s| s.provisioning_requests.get(request).cloned()) else {
            continue;
        };
        let (ns, name) = request.split_once('/').unwrap_or(("default", request));
        let conditions = with_conditions(&pr, &ts, now);
        if let Err(error) = api
            .patch_provisioning_request_conditions(ns, name, &conditions)
            .await
        {
            tracing::warn!(%request, %error, "failed to set ProvisioningRequest conditions");
            continue;
        }
        for t in ts {
            report(events, metrics, &pr, t).await;
        }
    }
}

/// Logs, counts and publishes (as an Event on the request) one condition set.
async fn report(
    events: Option<&super::events::Events>,
    metrics: &crate::metrics::Metrics,
    pr: &ProvisioningRequest,
    t: &Transition,
) {
    {
        tracing::info!(request = %t.request, condition = t.condition, status = t.status, reason = t.reason, message = %t.message, "ProvisioningRequest condition set");
        metrics
            .provisioning_requests
            .get_or_create(&crate::metrics::ProvisioningLabels {
                condition: t.condition.into(),
                status: if t.status { "True" } else { "False" }.into(),
                reason: t.reason.into(),
            })
            .inc();
        if let Some(ev) = events {
            let uid = pr.metadata.uid.as_deref();
            ev.provisioning_request(
                &super::events::provisioning_request_ref(&t.request, uid),
                t.condition,
                t.status,
                t.reason,
                &t.message,
            )
            .await;
        }
    }
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
            group("resource.k8s.io", &["v1", "v1beta2"]),
        ]));
        assert_eq!(
            ServedApis::from_groups(&all),
            ServedApis {
                volcano: true,
                scheduling_pod_groups: Some("v1alpha2".into()),
                provisioning_requests: true,
                dra: true,
                capacity_buffers: true,
            }
        );
        // Kubernetes 1.37 serves the beta beside an alpha: the beta is read.
        let beta = groups(json!([group(
            "scheduling.k8s.io",
            &["v1", "v1beta1", "v1alpha3"]
        )]));
        assert_eq!(
            ServedApis::from_groups(&beta)
                .scheduling_pod_groups
                .as_deref(),
            Some("v1beta1")
        );
        // PriorityClasses alone (v1) and the 1.35 Workload (v1alpha1) serve
        // no PodGroup; ProvisioningRequest v1beta1 alone is not read (that
        // version may hold CapacityBuffers: its resource list says).
        let none = groups(json!([
            group("scheduling.k8s.io", &["v1", "v1alpha1"]),
            group("autoscaling.x-k8s.io", &["v1beta1"]),
            group("resource.k8s.io", &["v1beta2"]),
        ]));
        assert_eq!(
            ServedApis::from_groups(&none),
            ServedApis {
                capacity_buffers: true,
                ..ServedApis::default()
            }
        );
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

    /// A snapshot with one atomic request `ml/<name>` created at
    /// `created_s` past 2026-01-05, asking for `count` pods of template
    /// `ml/tpl`, with these parameters.
    fn with_request(
        s: &mut Snapshot,
        name: &str,
        created_s: i64,
        count: i32,
        params: serde_json::Value,
    ) {
        let created = chrono::DateTime::from_timestamp(1_767_571_200 + created_s, 0).unwrap();
        let pr: ProvisioningRequest = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ml", "creationTimestamp": created.to_rfc3339()},
            "spec": {
                "provisioningClassName": foreign::CLASS_ATOMIC,
                "podSets": [{"podTemplateRef": {"name": "tpl"}, "count": count}],
                "parameters": params,
            }
        }))
        .unwrap();
        s.provisioning_requests.insert(format!("ml/{name}"), pr);
        s.pod_templates
            .insert("ml/tpl".into(), Ok(Pod::new("", Resources::new())));
    }

    fn only(s: &Snapshot, max_pods: usize) -> Request {
        let mut r = provisioning_requests(s, max_pods);
        assert_eq!(r.len(), 1);
        r.remove(0)
    }

    #[test]
    fn valid_until_seconds_out_of_range_or_unreadable_fails_the_request_with_a_reason_not_a_panic()
    {
        let with = |v: &str| {
            let mut s = Snapshot::default();
            with_request(&mut s, "r", 0, 1, json!({ "ValidUntilSeconds": v }));
            only(&s, 10).valid_until
        };
        let created = chrono::DateTime::from_timestamp(1_767_571_200, 0).unwrap();
        assert_eq!(
            with("3600"),
            Ok(Some(created + chrono::TimeDelta::hours(1)))
        );
        for (v, says) in [
            ("9223372036854775807", "out of range"),
            ("9223372036854775", "out of range"),
            ("-5", "negative"),
            ("soon", "not a whole number"),
            ("1e9", "not a whole number"),
        ] {
            let why = with(v).expect_err(v);
            assert!(
                why.contains("ValidUntilSeconds") && why.contains(says),
                "{v}: {why}"
            );
        }
    }

    #[test]
    fn a_pod_set_count_past_the_batch_cap_fails_the_request_without_making_its_pods() {
        let mut s = Snapshot::default();
        with_request(&mut s, "r", 0, i32::MAX, json!({}));
        let why = only(&s, 2000).pods.expect_err("too many pods");
        assert!(
            why.contains("2147483647 pods") && why.contains("--max-batch-pods"),
            "{why}"
        );
        let mut s = Snapshot::default();
        with_request(&mut s, "r", 0, -3, json!({}));
        let why = only(&s, 2000).pods.expect_err("a negative count");
        assert!(why.contains("negative count"), "{why}");
        let mut s = Snapshot::default();
        with_request(&mut s, "r", 0, 2000, json!({}));
        assert_eq!(only(&s, 2000).pods.map(|p| p.len()), Ok(2000));
    }

    #[test]
    fn requests_read_in_one_round_make_at_most_the_batch_cap_in_pods_oldest_first() {
        let mut s = Snapshot::default();
        with_request(&mut s, "late", 60, 1500, json!({}));
        with_request(&mut s, "early", 0, 1500, json!({}));
        with_request(&mut s, "small", 120, 500, json!({}));
        let names: Vec<String> = provisioning_requests(&s, 2000)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["ml/early", "ml/small"], "ml/late waits");
    }
}
