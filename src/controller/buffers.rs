//! CapacityBuffers (`autoscaling.x-k8s.io/v1beta1`) in the live driver:
//! whether the cluster serves them (a resource list of the group version,
//! after the group discovery in [`super::podgroups::discover`]), their
//! watch, their distilling into the core's [`Buffer`]s, the round's step
//! ([`buffers_step`]: placeholders join the pending pods, held room goes
//! onto the nodes) and the status writes ([`write_statuses`]). The
//! decisions are [`crate::core::buffers`]'; see `docs/buffers.md`.

use super::kube_api::KubeApi;
use super::snapshot::{watch, Indexed, Interners, Kind, Snapshot, Store, WorldParts};
use crate::api::foreign::{
    buffer_conditions as c, CapacityBuffer, CAPACITY_BUFFER_VERSION, PROVISIONING_API_GROUP,
    STRATEGY_ACTIVE_CAPACITY,
};
use crate::api::PrewarmWindow;
use crate::cluster::Resources;
use crate::core::buffers::{self, Buffer, Problem, Status};
use crate::core::Time;
use k8s_openapi::api::core::v1::PodTemplate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::watcher;
use kube::Api;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Whether the served `autoscaling.x-k8s.io/v1beta1` holds CapacityBuffers
/// (ProvisioningRequests share the group and once served that version
/// too): one `GET` of its resource list. A failed answer counts as not
/// served (logged), so a missing resource is never watched.
pub async fn serves_capacity_buffers(client: &kube::Client) -> bool {
    let gv = format!("{PROVISIONING_API_GROUP}/{CAPACITY_BUFFER_VERSION}");
    match client.list_api_group_resources(&gv).await {
        Ok(list) => list.resources.iter().any(|r| r.name == "capacitybuffers"),
        Err(error) => {
            tracing::warn!(%error, group_version = %gv, "resource discovery failed: CapacityBuffers are not watched");
            false
        }
    }
}

/// Starts the CapacityBuffer watch where they are served (and the
/// PodTemplate watch, unless ProvisioningRequests started it), telling the
/// store to wait for them.
pub fn spawn_watches(
    client: &kube::Client,
    store: &Arc<Store>,
    served: &super::podgroups::ServedApis,
) -> Vec<tokio::task::JoinHandle<()>> {
    if !served.capacity_buffers {
        return Vec::new();
    }
    let config = || watcher::Config::default().any_semantic().page_size(500);
    store.expect(Kind::CapacityBuffers);
    let mut out = vec![tokio::spawn(watch(
        Api::<CapacityBuffer>::all(client.clone()),
        config(),
        store.clone(),
    ))];
    if !served.provisioning_requests {
        store.expect(Kind::PodTemplates);
        out.push(tokio::spawn(watch(
            Api::<PodTemplate>::all(client.clone()),
            config(),
            store.clone(),
        )));
    }
    out
}

impl Indexed for CapacityBuffer {
    type Item = CapacityBuffer;
    const KIND: Kind = Kind::CapacityBuffers;
    fn distill(mut self, _: &mut Interners) -> Option<CapacityBuffer> {
        self.metadata.managed_fields = None;
        Some(self)
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, CapacityBuffer> {
        &mut s.capacity_buffers
    }
}

/// Annotation on a CapacityBuffer: when it is wanted, a 5-field cron
/// expression or macro, as a pre-warm window's `schedule` (the upstream
/// type has no schedule). Outside its window the buffer makes no chunk.
pub const SCHEDULE_ANNOTATION: &str = "quartermaster.dev/buffer-schedule";
/// Annotation: the IANA time zone of [`SCHEDULE_ANNOTATION`] (default UTC).
pub const TIME_ZONE_ANNOTATION: &str = "quartermaster.dev/buffer-time-zone";
/// Annotation: how long each window stays open (a Go duration, `10h`);
/// required with a schedule.
pub const DURATION_ANNOTATION: &str = "quartermaster.dev/buffer-duration";

/// The buffer's window from its annotations, if it has a schedule, or why
/// it cannot have one.
fn window_of(key: &str, b: &CapacityBuffer) -> Result<Option<PrewarmWindow>, Problem> {
    let ann = |k: &str| {
        b.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .cloned()
    };
    let Some(schedule) = ann(SCHEDULE_ANNOTATION) else {
        return Ok(None);
    };
    let duration = ann(DURATION_ANNOTATION).ok_or_else(|| {
        Problem::spec(format!("{SCHEDULE_ANNOTATION} needs {DURATION_ANNOTATION}"))
    })?;
    Ok(Some(PrewarmWindow {
        name: key.to_string(),
        schedule,
        time_zone: ann(TIME_ZONE_ANNOTATION).unwrap_or_else(|| "UTC".into()),
        duration,
        capacity: Default::default(),
    }))
}

/// Whether the buffer's strategy is served here (the default, set or not).
fn is_served(b: &CapacityBuffer) -> bool {
    matches!(
        b.spec.provisioning_strategy.as_deref(),
        None | Some("") | Some(STRATEGY_ACTIVE_CAPACITY) | Some("active-capacity")
    )
}

/// The buffer `key` (`namespace/name`) as the core reads it: its chunk's
/// pod from its PodTemplate, its replicas and limits, or what keeps it
/// from being served.
pub fn distill(s: &Snapshot, key: &str, b: &CapacityBuffer) -> Buffer {
    let ns = b.metadata.namespace.as_deref().unwrap_or("default");
    let limits = b.spec.limits.as_ref().map(|l| {
        Resources::parse(l.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))
            .map_err(|e| Problem::spec(format!("spec.limits: {e}")))
    });
    let window = window_of(key, b);
    let pod = if b.spec.scalable_ref.is_some() || b.spec.percentage.is_some() {
        Err(Problem::spec(
            "spec.scalableRef and spec.percentage are not served by Quartermaster yet: name a podTemplateRef",
        ))
    } else if let Some(Err(e)) = &limits {
        Err(e.clone())
    } else if let Err(e) = &window {
        Err(e.clone())
    } else {
        match &b.spec.pod_template_ref {
            None => Err(Problem::spec("spec.podTemplateRef is not set")),
            Some(r) => match s.pod_templates.get(&format!("{ns}/{}", r.name)) {
                Some(Ok(pod)) => Ok(pod.clone()),
                Some(Err(e)) => Err(Problem {
                    reason: c::INVALID_POD_TEMPLATE,
                    message: format!("podTemplate {ns}/{}: {e}", r.name),
                }),
                None => Err(Problem {
                    reason: c::POD_TEMPLATE_NOT_FOUND,
                    message: format!("podTemplate {ns}/{} not found", r.name),
                }),
            },
        }
    };
    Buffer {
        name: key.to_string(),
        pod,
        replicas: b.spec.replicas.map(i64::from),
        share: None,
        limits: limits.and_then(Result::ok),
        window: window.ok().flatten(),
    }
}

/// Runs the CapacityBuffer step on the world: its placeholders join the
/// pending pods (after the real ones, which take the nodes' room first),
/// the room it holds is put on the nodes (as do-not-disrupt pods), and
/// every served buffer's status is returned. `unplaceable` says why the
/// last plan found no place for a pod; `max_pods` bounds the placeholders
/// made; `now` opens and closes scheduled buffers' windows, whose chunks
/// are made `lead(pools, chunk)` ahead ([`crate::core::Core::buffer_lead`]).
pub fn buffers_step(
    store: &Store,
    parts: &mut WorldParts,
    unplaceable: &dyn Fn(&str) -> Option<String>,
    max_pods: usize,
    now: Time,
    lead: &dyn Fn(&[crate::api::NodePool], &crate::cluster::Pod) -> std::time::Duration,
) -> Vec<Status> {
    let read: Vec<Buffer> = store.read(|s| {
        s.capacity_buffers
            .iter()
            .filter(|(_, b)| is_served(b))
            .map(|(key, b)| distill(s, key, b))
            .collect()
    });
    if read.is_empty() {
        return Vec::new();
    }
    let step = buffers::step_with_lead(
        &read,
        &parts.nodes,
        &parts.pending,
        unplaceable,
        max_pods,
        now,
        &|pod| lead(&parts.pools, pod),
    );
    parts.pending.extend(step.pending);
    for (n, held) in step.held {
        let node = &mut parts.nodes[n];
        node.state.used.add(&held.pod.requests);
        node.pods.push(held);
    }
    step.statuses
}

/// The buffer's conditions with `status`' set in (replacing those of the
/// same type; the transition time kept where the status did not change),
/// or `None` when the buffer already says all of it.
pub fn with_status(b: &CapacityBuffer, status: &Status, now: Time) -> Option<Vec<Condition>> {
    let old = b.status.as_ref();
    let mut conditions: Vec<Condition> = old.map(|s| s.conditions.clone()).unwrap_or_default();
    let mut changed = old.and_then(|s| s.replicas) != Some(status.replicas as i32);
    for set in &status.conditions {
        let want = if set.status { "True" } else { "False" };
        let c = Condition {
            type_: set.condition.to_string(),
            status: want.into(),
            observed_generation: b.metadata.generation,
            last_transition_time: super::snapshot::to_k8s_time(now),
            reason: set.reason.to_string(),
            message: set.message.clone(),
        };
        match conditions.iter_mut().find(|o| o.type_ == set.condition) {
            Some(o) if o.status == want && o.reason == set.reason && o.message == set.message => {}
            Some(o) => {
                let since = (o.status == want).then(|| o.last_transition_time.clone());
                *o = c;
                if let Some(t) = since {
                    o.last_transition_time = t;
                }
                changed = true;
            }
            None => {
                conditions.push(c);
                changed = true;
            }
        }
    }
    changed.then_some(conditions)
}

/// Writes each buffer's status where it changed (one merge patch of the
/// status subresource: conditions, `replicas`, `podTemplateRef`); a failed
/// write is logged and made again next round (the status still differs
/// then).
pub async fn write_statuses(api: &KubeApi, store: &Store, statuses: &[Status], now: Time) {
    for status in statuses {
        let Some(b) = store.read(|s| s.capacity_buffers.get(&status.buffer).cloned()) else {
            continue;
        };
        let Some(conditions) = with_status(&b, status, now) else {
            continue;
        };
        let (ns, name) = status
            .buffer
            .split_once('/')
            .unwrap_or(("default", &status.buffer));
        let template = b.spec.pod_template_ref.clone();
        match api
            .patch_capacity_buffer_status(ns, name, &conditions, status.replicas, template)
            .await
        {
            Ok(()) => {
                for set in &status.conditions {
                    tracing::debug!(buffer = %status.buffer, condition = set.condition, status = set.status, reason = set.reason, message = %set.message, "CapacityBuffer condition");
                }
            }
            Err(error) => {
                tracing::warn!(buffer = %status.buffer, %error, "failed to write CapacityBuffer status");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Pod;
    use serde_json::json;

    fn buffer(spec: serde_json::Value) -> CapacityBuffer {
        serde_json::from_value(json!({
            "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": "warm", "namespace": "ml", "generation": 2},
            "spec": spec,
        }))
        .unwrap()
    }

    fn read(s: &Snapshot, spec: serde_json::Value) -> Buffer {
        distill(s, "ml/warm", &buffer(spec))
    }

    #[test]
    fn a_buffer_reads_its_template_replicas_and_limits_or_says_what_is_wrong() {
        let mut s = Snapshot::default();
        s.pod_templates
            .insert("ml/tpl".into(), Ok(Pod::new("ml/tpl", Resources::new())));
        s.pod_templates
            .insert("ml/bad".into(), Err("cpu=lots: not a quantity".into()));
        let ok = read(
            &s,
            json!({"podTemplateRef": {"name": "tpl"}, "replicas": 3, "limits": {"cpu": "8"}}),
        );
        assert!(ok.pod.is_ok());
        assert_eq!(ok.replicas, Some(3));
        assert_eq!(ok.limits.unwrap().get("cpu"), 8000);
        let reason = |spec| read(&s, spec).pod.unwrap_err().reason;
        assert_eq!(
            reason(json!({"podTemplateRef": {"name": "gone"}, "replicas": 1})),
            c::POD_TEMPLATE_NOT_FOUND
        );
        assert_eq!(
            reason(json!({"podTemplateRef": {"name": "bad"}, "replicas": 1})),
            c::INVALID_POD_TEMPLATE
        );
        assert_eq!(
            reason(json!({"podTemplateRef": {"name": "tpl"}, "limits": {"cpu": "x"}})),
            c::INVALID_SPEC
        );
        assert_eq!(
            reason(json!({"scalableRef": {"kind": "Deployment", "name": "web"}, "percentage": 10})),
            c::INVALID_SPEC
        );
    }

    #[test]
    fn a_buffer_schedule_is_read_from_its_annotations() {
        let mut s = Snapshot::default();
        s.pod_templates
            .insert("ml/tpl".into(), Ok(Pod::new("ml/tpl", Resources::new())));
        let annotated = |ann: serde_json::Value| {
            let mut b = buffer(json!({"podTemplateRef": {"name": "tpl"}, "replicas": 1}));
            b.metadata.annotations = serde_json::from_value(ann).unwrap();
            distill(&s, "ml/warm", &b)
        };
        let w = annotated(json!({SCHEDULE_ANNOTATION: "0 8 * * 1-5",
            TIME_ZONE_ANNOTATION: "Europe/Berlin", DURATION_ANNOTATION: "10h"}))
        .window
        .unwrap();
        assert_eq!(
            (
                w.schedule.as_str(),
                w.time_zone.as_str(),
                w.duration.as_str()
            ),
            ("0 8 * * 1-5", "Europe/Berlin", "10h")
        );
        let utc = annotated(json!({SCHEDULE_ANNOTATION: "@daily", DURATION_ANNOTATION: "1h"}));
        assert_eq!(utc.window.unwrap().time_zone, "UTC");
        assert_eq!(annotated(json!({})).window, None);
        let why = annotated(json!({SCHEDULE_ANNOTATION: "@daily"}))
            .pod
            .unwrap_err();
        assert!(why.message.contains(DURATION_ANNOTATION), "{why:?}");
    }

    #[test]
    fn only_active_capacity_buffers_are_served() {
        for (strategy, served) in [
            (json!(null), true),
            (json!(""), true),
            (json!(STRATEGY_ACTIVE_CAPACITY), true),
            (json!("example.com/passive"), false),
        ] {
            let b = buffer(json!({"provisioningStrategy": strategy}));
            assert_eq!(is_served(&b), served, "{strategy}");
        }
    }

    #[test]
    fn a_status_already_said_is_not_written_again() {
        let status = Status {
            buffer: "ml/warm".into(),
            replicas: 2,
            conditions: vec![buffers::Set {
                condition: c::READY_FOR_PROVISIONING,
                status: true,
                reason: c::ATTRIBUTES_SET_SUCCESSFULLY,
                message: "2 chunks".into(),
            }],
        };
        let now = chrono::DateTime::from_timestamp(1_767_571_200, 0).unwrap();
        let mut b = buffer(json!({}));
        let conditions = with_status(&b, &status, now).expect("a first write");
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].observed_generation, Some(2));
        b.status = Some(crate::api::foreign::CapacityBufferStatus {
            pod_template_ref: None,
            replicas: Some(2),
            conditions,
        });
        assert_eq!(with_status(&b, &status, now), None);
        let mut more = status.clone();
        more.replicas = 3;
        assert!(with_status(&b, &more, now).is_some());
    }
}
