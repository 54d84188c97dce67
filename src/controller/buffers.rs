//! CapacityBuffers (`autoscaling.x-k8s.io/v1beta1`) in the live driver:
//! whether the cluster serves them (a resource list of the group version,
//! after the group discovery in [`super::podgroups::discover`]), their
//! watch, their distilling into the core's [`Buffer`]s, the round's step
//! ([`buffers_step`]: placeholders join the pending pods, held room goes
//! onto the nodes) and the status writes ([`write_statuses`]). The
//! decisions are [`crate::core::buffers`]'; see `docs/buffers.md`.

use super::events::{capacity_buffer_ref, Events};
use super::kube_api::KubeApi;
use super::scalables;
use super::snapshot::{watch, Indexed, Interners, Kind, Snapshot, Store, WorldParts};
use crate::api::foreign::{
    buffer_conditions as c, CapacityBuffer, CAPACITY_BUFFER_VERSION, PROVISIONING_API_GROUP,
    STRATEGY_ACTIVE_CAPACITY,
};
use crate::api::PrewarmWindow;
use crate::cluster::{Pod, Resources};
use crate::core::buffers::{self, Buffer, Consumed, Problem, Refill, Share, Status};
use crate::core::Time;
use crate::metrics::{BufferLabels, Metrics};
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

/// Starts the CapacityBuffer watch where they are served, with those of
/// the workloads a `scalableRef` may name ([`scalables`]) and the
/// PodTemplate watch (unless ProvisioningRequests started it), telling the
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
    out.extend(scalables::spawn_watches(client, store));
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

/// Annotation on a CapacityBuffer: `none` makes it one-shot (consumed
/// chunks are not made again), `recreate` (the default) keeps it whole.
/// Upstream proposes this as `spec.refillStrategy`
/// (kubernetes/autoscaler#10108), which the v1beta1 schema lacks; that
/// field is read instead when a CRD carries it.
pub const REFILL_STRATEGY_ANNOTATION: &str = "quartermaster.dev/buffer-refill-strategy";
/// Annotation Quartermaster keeps on a one-shot buffer: the chunks consumed
/// so far, a count that never drops (upstream proposes
/// `status.consumedReplicas`, which the v1beta1 schema lacks and the API
/// server would prune).
pub const CONSUMED_ANNOTATION: &str = "quartermaster.dev/buffer-consumed-replicas";
/// Annotation Quartermaster keeps beside [`CONSUMED_ANNOTATION`]: the pods
/// (of the buffer's namespace, comma-separated names) counted, so each is
/// counted once.
pub const CONSUMED_BY_ANNOTATION: &str = "quartermaster.dev/buffer-consumed-by";

fn annotation(b: &CapacityBuffer, key: &str) -> Option<String> {
    b.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .cloned()
}

/// Whether the buffer refills (its `spec.refillStrategy`, else
/// [`REFILL_STRATEGY_ANNOTATION`]), with a one-shot buffer's persisted
/// consumed count ([`CONSUMED_ANNOTATION`]), or why it does not read.
fn refill_of(b: &CapacityBuffer) -> Result<Refill, Problem> {
    let strategy = b
        .spec
        .refill_strategy
        .clone()
        .or_else(|| annotation(b, REFILL_STRATEGY_ANNOTATION));
    match strategy.as_deref() {
        None | Some("") | Some("recreate") => Ok(Refill::Recreate),
        Some("none") => {
            let count = match annotation(b, CONSUMED_ANNOTATION) {
                None => 0,
                Some(v) => v.trim().parse::<u64>().map_err(|_| {
                    Problem::spec(format!("{CONSUMED_ANNOTATION} is not a count ({v:?})"))
                })?,
            };
            Ok(Refill::OneShot(Consumed {
                count,
                by: consumed_by(b),
            }))
        }
        Some(other) => Err(Problem::spec(format!(
            "refill strategy {other:?}: expected \"recreate\" or \"none\""
        ))),
    }
}

/// The pods (`namespace/name`) the buffer says consumed it
/// ([`CONSUMED_BY_ANNOTATION`]).
fn consumed_by(b: &CapacityBuffer) -> std::collections::BTreeSet<String> {
    let ns = b.metadata.namespace.as_deref().unwrap_or("default");
    annotation(b, CONSUMED_BY_ANNOTATION)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| format!("{ns}/{n}"))
        .collect()
}

/// The annotations that keep `consumed` on the buffer, where they say
/// other than it does now.
fn consumed_annotations(
    b: &CapacityBuffer,
    consumed: &Consumed,
) -> Option<BTreeMap<String, String>> {
    let count = consumed.count.to_string();
    let by = consumed
        .by
        .iter()
        .map(|p| p.split_once('/').map_or(p.as_str(), |(_, n)| n))
        .collect::<Vec<_>>()
        .join(",");
    let want = [(CONSUMED_ANNOTATION, count), (CONSUMED_BY_ANNOTATION, by)];
    // Nothing consumed is what a buffer without the annotations says.
    let said = |k: &str, none: &str| annotation(b, k).unwrap_or_else(|| none.to_string());
    let same = said(CONSUMED_ANNOTATION, "0") == want[0].1
        && said(CONSUMED_BY_ANNOTATION, "") == want[1].1;
    (!same).then(|| want.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

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
/// pod (from its PodTemplate, or from the workload its `scalableRef`
/// names, whose replicas its `percentage` is a share of), its replicas and
/// limits, or what keeps it from being served.
pub fn distill(s: &Snapshot, key: &str, b: &CapacityBuffer) -> Buffer {
    let ns = b.metadata.namespace.as_deref().unwrap_or("default");
    let limits = b.spec.limits.as_ref().map(|l| {
        Resources::parse(l.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))
            .map_err(|e| Problem::spec(format!("spec.limits: {e}")))
    });
    let window = window_of(key, b);
    let refill = refill_of(b);
    let target = if let Some(Err(e)) = &limits {
        Err(e.clone())
    } else if let Err(e) = &window {
        Err(e.clone())
    } else if let Err(e) = &refill {
        Err(e.clone())
    } else {
        chunk_of(s, ns, b)
    };
    let (pod, share) = match target {
        Ok((pod, of)) => (
            Ok(pod),
            of.zip(b.spec.percentage).map(|(of, p)| Share {
                percentage: i64::from(p),
                of,
            }),
        ),
        Err(e) => (Err(e), None),
    };
    Buffer {
        name: key.to_string(),
        pod,
        replicas: b.spec.replicas.map(i64::from),
        share,
        limits: limits.and_then(Result::ok),
        window: window.ok().flatten(),
        refill: refill.unwrap_or_default(),
    }
}

/// The pod one chunk of the buffer is, and the replicas of the workload it
/// came from (`None` for a PodTemplate), or why there is none.
fn chunk_of(s: &Snapshot, ns: &str, b: &CapacityBuffer) -> Result<(Pod, Option<i64>), Problem> {
    match (&b.spec.pod_template_ref, &b.spec.scalable_ref) {
        (Some(_), Some(_)) => Err(Problem::spec(
            "spec.podTemplateRef and spec.scalableRef are both set: name one",
        )),
        (None, None) => Err(Problem::spec(
            "neither spec.podTemplateRef nor spec.scalableRef is set",
        )),
        (None, Some(r)) => scalables::resolve(s, ns, r).map(|(pod, of)| (pod, Some(of))),
        (Some(_), None) if b.spec.percentage.is_some() => Err(Problem::spec(
            "spec.percentage needs spec.scalableRef (a share of a workload's replicas)",
        )),
        (Some(r), None) => match s.pod_templates.get(&format!("{ns}/{}", r.name)) {
            Some(Ok(pod)) => Ok((pod.clone(), None)),
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
/// status subresource: conditions, `replicas`, `podTemplateRef`), with a
/// Warning Event on a buffer that became `Infeasible` (or whose reason for
/// being so changed); a failed write is logged and made again next round
/// (the status still differs then).
pub async fn write_statuses(
    api: &KubeApi,
    events: Option<&Events>,
    store: &Store,
    statuses: &[Status],
    now: Time,
) {
    for status in statuses {
        let Some(b) = store.read(|s| s.capacity_buffers.get(&status.buffer).cloned()) else {
            continue;
        };
        let (ns, name) = status
            .buffer
            .split_once('/')
            .unwrap_or(("default", &status.buffer));
        // A one-shot buffer's consumed count is persisted before its status
        // says it, so a restarted controller reads it back.
        if let Some(annotations) = status
            .consumed
            .as_ref()
            .and_then(|c| consumed_annotations(&b, c))
        {
            if let Err(error) = api.annotate_capacity_buffer(ns, name, &annotations).await {
                tracing::warn!(buffer = %status.buffer, %error, "failed to persist the CapacityBuffer's consumed count");
                continue;
            }
        }
        let Some(conditions) = with_status(&b, status, now) else {
            continue;
        };
        let template = b.spec.pod_template_ref.clone();
        match api
            .patch_capacity_buffer_status(ns, name, &conditions, status.replicas, template)
            .await
        {
            Ok(()) => {
                for set in &status.conditions {
                    tracing::debug!(buffer = %status.buffer, condition = set.condition, status = set.status, reason = set.reason, message = %set.message, "CapacityBuffer condition");
                }
                if let (Some(ev), Some(set)) = (events, became_infeasible(&b, status)) {
                    let buffer = capacity_buffer_ref(&status.buffer, b.metadata.uid.as_deref());
                    ev.buffer_infeasible(&buffer, set.reason, &set.message)
                        .await;
                }
            }
            Err(error) => {
                tracing::warn!(buffer = %status.buffer, %error, "failed to write CapacityBuffer status");
            }
        }
    }
}

/// The `Infeasible=True` condition `status` sets on the buffer, if the
/// buffer did not say it already (with that reason).
fn became_infeasible<'a>(b: &CapacityBuffer, status: &'a Status) -> Option<&'a buffers::Set> {
    let set = status
        .conditions
        .iter()
        .find(|s| s.condition == c::INFEASIBLE && s.status)?;
    let said = b.status.as_ref().is_some_and(|st| {
        st.conditions
            .iter()
            .any(|o| o.type_ == c::INFEASIBLE && o.status == "True" && o.reason == set.reason)
    });
    (!said).then_some(set)
}

/// Sets the buffer gauges to this round's statuses
/// (`quartermaster_capacity_buffer_replicas{buffer, state}`): per buffer,
/// its chunks `held` on our nodes, `provisioning` (planned or launching)
/// and `infeasible` (no pool can hold them). Buffers gone since the last
/// round leave the family.
pub fn record(metrics: &Metrics, statuses: &[Status]) {
    let family = &metrics.capacity_buffer_replicas;
    family.clear();
    for st in statuses {
        let infeasible = st
            .conditions
            .iter()
            .any(|s| s.condition == c::INFEASIBLE && s.status);
        let rest = i64::from(st.replicas.saturating_sub(st.held));
        let (provisioning, unplaceable) = if infeasible { (0, rest) } else { (rest, 0) };
        for (state, n) in [
            ("held", i64::from(st.held)),
            ("provisioning", provisioning),
            ("infeasible", unplaceable),
        ] {
            family
                .get_or_create(&BufferLabels {
                    buffer: st.buffer.clone(),
                    state: state.into(),
                })
                .set(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            reason(json!({"podTemplateRef": {"name": "tpl"}, "percentage": 10})),
            c::INVALID_SPEC
        );
        assert_eq!(
            reason(json!({"podTemplateRef": {"name": "tpl"},
                "scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}})),
            c::INVALID_SPEC
        );
        assert_eq!(
            reason(
                json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"},
                "percentage": 10})
            ),
            c::SCALABLE_REF_NOT_FOUND
        );
    }

    #[test]
    fn a_scalable_ref_buffer_takes_its_workloads_pod_and_a_share_of_its_replicas() {
        let mut s = Snapshot::default();
        let web = scalables::Scalable {
            pod: Ok(Pod::new("ml/web", Resources::new())),
            replicas: 10,
        };
        s.scalables.deployments.insert("ml/web".into(), web);
        let target = json!({"apiGroup": "apps", "kind": "Deployment", "name": "web"});
        let b = read(&s, json!({"scalableRef": target, "percentage": 25}));
        assert_eq!(b.pod.unwrap().name, "ml/web");
        assert_eq!(
            b.share,
            Some(Share {
                percentage: 25,
                of: 10
            })
        );
        assert_eq!(b.replicas, None);
        // Replicas alone: copies of the workload's pod, no share.
        let b = read(&s, json!({"scalableRef": target, "replicas": 2}));
        assert_eq!((b.share, b.replicas), (None, Some(2)));
        // A bad spec elsewhere is said before the workload is looked up.
        let why = read(
            &s,
            json!({"scalableRef": target, "percentage": 25, "limits": {"cpu": "x"}}),
        )
        .pod
        .unwrap_err();
        assert_eq!(why.reason, c::INVALID_SPEC);
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
    fn a_one_shot_buffer_reads_what_consumed_it_from_its_annotations_or_says_what_is_wrong() {
        let mut s = Snapshot::default();
        s.pod_templates
            .insert("ml/tpl".into(), Ok(Pod::new("ml/tpl", Resources::new())));
        let annotated = |ann: serde_json::Value| {
            let mut b = buffer(json!({"podTemplateRef": {"name": "tpl"}, "replicas": 2}));
            b.metadata.annotations = serde_json::from_value(ann).unwrap();
            distill(&s, "ml/warm", &b)
        };
        assert_eq!(annotated(json!({})).refill, Refill::Recreate);
        let read = annotated(json!({REFILL_STRATEGY_ANNOTATION: "none",
            CONSUMED_ANNOTATION: "2", CONSUMED_BY_ANNOTATION: "a-0, a-1"}));
        let Refill::OneShot(consumed) = read.refill else {
            panic!("{read:?}")
        };
        assert_eq!(consumed.count, 2);
        assert_eq!(consumed.by.iter().collect::<Vec<_>>(), ["ml/a-0", "ml/a-1"]);
        let fresh = annotated(json!({REFILL_STRATEGY_ANNOTATION: "none"}));
        assert_eq!(fresh.refill, Refill::OneShot(Consumed::default()));
        for bad in [
            json!({REFILL_STRATEGY_ANNOTATION: "sometimes"}),
            json!({REFILL_STRATEGY_ANNOTATION: "none", CONSUMED_ANNOTATION: "two"}),
        ] {
            let why = annotated(bad.clone()).pod.unwrap_err();
            assert_eq!(why.reason, c::INVALID_SPEC, "{bad}");
        }
        // What a buffer already says is not written again; more is.
        let mut b = buffer(json!({}));
        assert_eq!(consumed_annotations(&b, &Consumed::default()), None);
        let more = consumed_annotations(&b, &consumed).unwrap();
        assert_eq!(more[CONSUMED_BY_ANNOTATION], "a-0,a-1");
        b.metadata.annotations = Some(more);
        assert_eq!(consumed_annotations(&b, &consumed), None);
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

    fn status(buffer: &str, replicas: u32, held: u32, infeasible: bool) -> Status {
        Status {
            buffer: buffer.into(),
            replicas,
            held,
            consumed: None,
            conditions: vec![buffers::Set {
                condition: c::INFEASIBLE,
                status: infeasible,
                reason: if infeasible {
                    c::NOT_PLACEABLE
                } else {
                    c::PLACEABLE
                },
                message: String::new(),
            }],
        }
    }

    #[test]
    fn the_buffer_gauge_counts_chunks_by_state_and_forgets_deleted_buffers() {
        let metrics = Metrics::unregistered();
        let get = |buffer: &str, state: &str| {
            metrics
                .capacity_buffer_replicas
                .get_or_create(&BufferLabels {
                    buffer: buffer.into(),
                    state: state.into(),
                })
                .get()
        };
        record(
            &metrics,
            &[status("ml/warm", 5, 2, false), status("ml/big", 3, 0, true)],
        );
        assert_eq!(
            [
                get("ml/warm", "held"),
                get("ml/warm", "provisioning"),
                get("ml/warm", "infeasible")
            ],
            [2, 3, 0]
        );
        assert_eq!(
            [
                get("ml/big", "held"),
                get("ml/big", "provisioning"),
                get("ml/big", "infeasible")
            ],
            [0, 0, 3]
        );
        record(&metrics, &[status("ml/warm", 5, 5, false)]);
        let text = {
            let mut r = prometheus_client::registry::Registry::default();
            let m = Metrics::new(&mut r);
            record(&m, &[status("ml/warm", 1, 1, false)]);
            record(&m, &[]);
            crate::metrics::encode(&r)
        };
        assert!(!text.contains("ml/warm"), "{text}");
        assert_eq!(get("ml/warm", "held"), 5);
    }

    #[test]
    fn only_a_new_infeasible_reason_is_news() {
        let mut b = buffer(json!({}));
        let st = status("ml/warm", 1, 0, true);
        assert_eq!(became_infeasible(&b, &st).unwrap().reason, c::NOT_PLACEABLE);
        let now = chrono::DateTime::from_timestamp(1_767_571_200, 0).unwrap();
        b.status = Some(crate::api::foreign::CapacityBufferStatus {
            pod_template_ref: None,
            replicas: Some(1),
            conditions: with_status(&b, &st, now).unwrap(),
        });
        assert_eq!(became_infeasible(&b, &st), None);
        assert_eq!(became_infeasible(&b, &status("ml/warm", 1, 0, false)), None);
        let mut other = st.clone();
        other.conditions[0].reason = c::SCALABLE_REF_NOT_FOUND;
        assert!(became_infeasible(&b, &other).is_some());
    }

    #[test]
    fn a_status_already_said_is_not_written_again() {
        let status = Status {
            buffer: "ml/warm".into(),
            replicas: 2,
            held: 0,
            consumed: None,
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
