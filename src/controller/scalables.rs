//! The scalable workloads a CapacityBuffer's `spec.scalableRef` may name
//! (apps/v1 Deployments, StatefulSets, ReplicaSets and batch/v1 Jobs):
//! their watches, what the index keeps of each (its pod and its replica
//! count, [`Scalable`]) and the lookup of a reference ([`resolve`]). What a
//! buffer makes of them is [`crate::core::buffers`]'; see `docs/buffers.md`.

use super::podgroups::template_pod;
use super::snapshot::{watch, Indexed, Interners, Kind, Snapshot, Store};
use crate::api::foreign::{buffer_conditions as c, ScalableRef};
use crate::cluster::Pod;
use crate::core::buffers::Problem;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::watcher;
use kube::Api;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What is kept of a scalable workload: the pod its template makes (or why
/// it does not read as one) and the replicas it asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalable {
    /// The pod its template makes.
    pub pod: Result<Pod, String>,
    /// `spec.replicas` (a Job's `spec.parallelism`), 1 when unset as the
    /// API server defaults it.
    pub replicas: i64,
}

/// The scalable workloads watched, by kind, keyed `namespace/name`.
#[derive(Debug, Clone, Default)]
pub struct Scalables {
    /// apps/v1 Deployments.
    pub deployments: BTreeMap<String, Scalable>,
    /// apps/v1 StatefulSets.
    pub stateful_sets: BTreeMap<String, Scalable>,
    /// apps/v1 ReplicaSets.
    pub replica_sets: BTreeMap<String, Scalable>,
    /// batch/v1 Jobs.
    pub jobs: BTreeMap<String, Scalable>,
}

/// The kinds a `scalableRef` may name, as `(apiGroup, kind)`.
pub const SERVED: [(&str, &str); 4] = [
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("apps", "ReplicaSet"),
    ("batch", "Job"),
];

fn scalable(
    meta: &ObjectMeta,
    template: Option<PodTemplateSpec>,
    replicas: Option<i32>,
) -> Scalable {
    Scalable {
        pod: template
            .ok_or_else(|| "it has no pod template".to_string())
            .and_then(|t| template_pod(meta, t)),
        replicas: replicas.map_or(1, i64::from),
    }
}

impl Indexed for Deployment {
    type Item = Scalable;
    const KIND: Kind = Kind::Deployments;
    fn distill(self, _: &mut Interners) -> Option<Scalable> {
        Some(scalable(
            &self.metadata,
            Some(self.spec.template),
            self.spec.replicas,
        ))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, Scalable> {
        &mut s.scalables.deployments
    }
}

impl Indexed for StatefulSet {
    type Item = Scalable;
    const KIND: Kind = Kind::StatefulSets;
    fn distill(self, _: &mut Interners) -> Option<Scalable> {
        Some(scalable(
            &self.metadata,
            Some(self.spec.template),
            self.spec.replicas,
        ))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, Scalable> {
        &mut s.scalables.stateful_sets
    }
}

impl Indexed for ReplicaSet {
    type Item = Scalable;
    const KIND: Kind = Kind::ReplicaSets;
    fn distill(self, _: &mut Interners) -> Option<Scalable> {
        Some(scalable(
            &self.metadata,
            self.spec.template,
            self.spec.replicas,
        ))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, Scalable> {
        &mut s.scalables.replica_sets
    }
}

impl Indexed for Job {
    type Item = Scalable;
    const KIND: Kind = Kind::Jobs;
    fn distill(self, _: &mut Interners) -> Option<Scalable> {
        let (template, parallelism) = self
            .spec
            .map_or((None, None), |s| (Some(s.template), s.parallelism));
        Some(scalable(&self.metadata, template, parallelism))
    }
    fn slot(s: &mut Snapshot) -> &mut BTreeMap<String, Scalable> {
        &mut s.scalables.jobs
    }
}

/// Starts the four watches, telling the store to wait for them.
pub fn spawn_watches(
    client: &kube::Client,
    store: &Arc<Store>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let config = || watcher::Config::default().any_semantic().page_size(500);
    for kind in [
        Kind::Deployments,
        Kind::StatefulSets,
        Kind::ReplicaSets,
        Kind::Jobs,
    ] {
        store.expect(kind);
    }
    vec![
        tokio::spawn(watch(
            Api::<Deployment>::all(client.clone()),
            config(),
            store.clone(),
        )),
        tokio::spawn(watch(
            Api::<StatefulSet>::all(client.clone()),
            config(),
            store.clone(),
        )),
        tokio::spawn(watch(
            Api::<ReplicaSet>::all(client.clone()),
            config(),
            store.clone(),
        )),
        tokio::spawn(watch(
            Api::<Job>::all(client.clone()),
            config(),
            store.clone(),
        )),
    ]
}

/// The workload `r` names in namespace `ns`: its pod and replica count, or
/// why it cannot shape a buffer's chunks (a kind not served here, a
/// missing workload, a template that does not read as a pod).
///
/// # Errors
/// A [`Problem`]: [`c::SCALABLE_REF_NOT_SUPPORTED`],
/// [`c::SCALABLE_REF_NOT_FOUND`], [`c::INVALID_POD_TEMPLATE`] or
/// [`c::INVALID_SPEC`] (no name).
pub fn resolve(s: &Snapshot, ns: &str, r: &ScalableRef) -> Result<(Pod, i64), Problem> {
    let map = match (r.api_group.as_str(), r.kind.as_str()) {
        ("apps", "Deployment") => &s.scalables.deployments,
        ("apps", "StatefulSet") => &s.scalables.stateful_sets,
        ("apps", "ReplicaSet") => &s.scalables.replica_sets,
        ("batch", "Job") => &s.scalables.jobs,
        (group, kind) => {
            let hint = SERVED
                .iter()
                .find(|(_, k)| *k == kind)
                .map(|(g, _)| format!(" ({kind} is in apiGroup {g})"))
                .unwrap_or_default();
            let served: Vec<String> = SERVED.iter().map(|(g, k)| format!("{g}/{k}")).collect();
            return Err(Problem {
                reason: c::SCALABLE_REF_NOT_SUPPORTED,
                message: format!(
                    "scalableRef kind {kind:?} of apiGroup {group:?} is not served{hint}: name one of {}",
                    served.join(", ")
                ),
            });
        }
    };
    if r.name.is_empty() {
        return Err(Problem::spec("spec.scalableRef.name is not set"));
    }
    let what = format!("{} {ns}/{}", r.kind, r.name);
    match map.get(&format!("{ns}/{}", r.name)) {
        None => Err(Problem {
            reason: c::SCALABLE_REF_NOT_FOUND,
            message: format!("scalableRef {what} not found"),
        }),
        Some(Scalable { pod: Err(e), .. }) => Err(Problem {
            reason: c::INVALID_POD_TEMPLATE,
            message: format!("scalableRef {what}: {e}"),
        }),
        Some(Scalable {
            pod: Ok(pod),
            replicas,
        }) => Ok((pod.clone(), *replicas)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn reference(group: &str, kind: &str, name: &str) -> ScalableRef {
        from(json!({"apiGroup": group, "kind": kind, "name": name}))
    }

    fn template() -> serde_json::Value {
        json!({"spec": {"containers": [{"name": "c",
            "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}})
    }

    fn store_with(s: &mut Snapshot) {
        let d: Deployment = from(json!({"metadata": {"name": "web", "namespace": "ml"},
            "spec": {"replicas": 10, "selector": {}, "template": template()}}));
        let st: StatefulSet = from(json!({"metadata": {"name": "db", "namespace": "ml"},
            "spec": {"selector": {}, "serviceName": "db", "template": template()}}));
        let rs: ReplicaSet = from(json!({"metadata": {"name": "bare", "namespace": "ml"},
            "spec": {"replicas": 3, "selector": {}}}));
        let job: Job = from(json!({"metadata": {"name": "train", "namespace": "ml"},
            "spec": {"parallelism": 4, "template": template()}}));
        let bad: Deployment = from(json!({"metadata": {"name": "bad", "namespace": "ml"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c",
                "resources": {"requests": {"cpu": "lots"}}}]}}}}));
        let i = &mut Interners::default();
        let key = |m: &ObjectMeta| {
            format!(
                "{}/{}",
                m.namespace.clone().unwrap(),
                m.name.clone().unwrap()
            )
        };
        for d in [d, bad] {
            s.scalables
                .deployments
                .insert(key(&d.metadata), d.distill(i).unwrap());
        }
        s.scalables
            .stateful_sets
            .insert(key(&st.metadata), st.distill(i).unwrap());
        s.scalables
            .replica_sets
            .insert(key(&rs.metadata), rs.distill(i).unwrap());
        s.scalables
            .jobs
            .insert(key(&job.metadata), job.distill(i).unwrap());
    }

    #[test]
    fn each_served_kind_resolves_to_its_pod_and_replicas() {
        let mut s = Snapshot::default();
        store_with(&mut s);
        let ok = |g, k, n| {
            resolve(&s, "ml", &reference(g, k, n)).map(|(p, r)| (p.requests.get("cpu"), r))
        };
        assert_eq!(ok("apps", "Deployment", "web"), Ok((2000, 10)));
        // Unset replicas read as the API server defaults them.
        assert_eq!(ok("apps", "StatefulSet", "db"), Ok((2000, 1)));
        assert_eq!(ok("batch", "Job", "train"), Ok((2000, 4)));
    }

    #[test]
    fn a_reference_that_cannot_shape_chunks_says_why() {
        let mut s = Snapshot::default();
        store_with(&mut s);
        let why = |g, k, n| resolve(&s, "ml", &reference(g, k, n)).unwrap_err();
        let p = why("apps", "Deployment", "gone");
        assert_eq!(p.reason, c::SCALABLE_REF_NOT_FOUND);
        assert_eq!(p.message, "scalableRef Deployment ml/gone not found");
        // Same name, other namespace: not found either.
        assert_eq!(
            resolve(&s, "other", &reference("apps", "Deployment", "web"))
                .unwrap_err()
                .reason,
            c::SCALABLE_REF_NOT_FOUND
        );
        let p = why("", "Deployment", "web");
        assert_eq!(p.reason, c::SCALABLE_REF_NOT_SUPPORTED);
        assert!(
            p.message.contains("Deployment is in apiGroup apps"),
            "{}",
            p.message
        );
        let p = why("argoproj.io", "Rollout", "web");
        assert_eq!(p.reason, c::SCALABLE_REF_NOT_SUPPORTED);
        assert!(p.message.contains("batch/Job"), "{}", p.message);
        let p = why("apps", "ReplicaSet", "bare");
        assert_eq!(p.reason, c::INVALID_POD_TEMPLATE);
        assert!(p.message.contains("no pod template"), "{}", p.message);
        let p = why("apps", "Deployment", "bad");
        assert_eq!(p.reason, c::INVALID_POD_TEMPLATE);
        assert!(
            p.message.starts_with("scalableRef Deployment ml/bad: "),
            "{}",
            p.message
        );
        assert_eq!(why("apps", "Deployment", "").reason, c::INVALID_SPEC);
    }
}
