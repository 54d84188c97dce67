//! Pods as the planner sees them: effective requests and scheduling
//! constraints, distilled from `k8s_openapi` Pods at the edge.

use super::requirements::{Effect, NodeAffinity, Operator, Requirement, Toleration};
use super::resources::{QuantityError, Resources, PODS};
use crate::api::labels as l;
use k8s_openapi::api::core::v1 as core;
use std::collections::BTreeMap;

/// Errors turning a Kubernetes Pod into a planner pod.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A resource quantity is malformed.
    #[error("pod {pod}: {source}")]
    Quantity {
        /// `namespace/name`.
        pod: String,
        /// The bad quantity.
        source: QuantityError,
    },
    /// A scheduling field is malformed (operator, effect, annotation).
    #[error("pod {pod}: {message}")]
    Invalid {
        /// `namespace/name`.
        pod: String,
        /// What is wrong.
        message: String,
    },
}

/// A gang: pods that must all start together, or none.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupRef {
    /// `namespace/name` of the group.
    pub name: String,
    /// Pods that must be placed together (Volcano `minMember`, Kueue total
    /// count, or our annotation).
    pub min_member: u32,
}

/// Zone topology spread: pods matching the same selector spread over zones
/// with at most `max_skew` difference.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ZoneSpread {
    /// Most pods one zone may hold above the least-loaded zone.
    pub max_skew: u32,
    /// The spread's identity: its namespace and label selector, rendered.
    pub selector: String,
}

/// A pod that needs a place.
#[derive(Debug, Clone, PartialEq)]
pub struct Pod {
    /// `namespace/name`.
    pub name: String,
    /// Effective requests, with the pod slot (`pods: 1`).
    pub requests: Resources,
    /// Required node labels from `nodeSelector` and required node affinity.
    pub affinity: NodeAffinity,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Zone topology spread constraints (`DoNotSchedule` only).
    pub zone_spread: Option<ZoneSpread>,
    /// At most this many pods of its set share a node: 1 with required pod
    /// anti-affinity on `kubernetes.io/hostname`, `maxSkew` with a
    /// `DoNotSchedule` topology spread on `kubernetes.io/hostname` (a new
    /// node starts empty, so the least-loaded eligible node holds none and
    /// the skew caps every node). The set is its gang, else its labels
    /// ([`crate::plan::pack::anti_affinity_key`]).
    pub per_node_max: Option<u32>,
    /// Gang membership.
    pub group: Option<GroupRef>,
    /// The node label key whose one value all pods of its set must share,
    /// as Kueue's `kueue.x-k8s.io/podset-required-topology` states it on a
    /// pod set's template (read for ProvisioningRequests' pods:
    /// `core::provisioning`).
    pub required_topology: Option<String>,
    /// The network-layer label key (`topology.k8s.aws/network-node-layer-N`)
    /// whose one value all of its gang's nodes must share, when its group
    /// asks for that: its nodes are launched into one cluster placement
    /// group.
    pub network_block: Option<String>,
    /// Seconds between checkpoints, if the workload checkpoints.
    pub checkpoint_interval_s: Option<f64>,
    /// Expected run time in seconds, if known.
    pub expected_runtime_s: Option<f64>,
    /// Seconds one checkpoint takes to write, if the pod says
    /// (`quartermaster.dev/checkpoint-duration`).
    pub checkpoint_duration_s: Option<f64>,
    /// Seconds one requested checkpoint pauses training
    /// (`quartermaster.dev/checkpoint-pause`; see `core::cadence`).
    pub checkpoint_pause_s: Option<f64>,
    /// When its work must be done (`quartermaster.dev/deadline`).
    pub deadline: Option<chrono::DateTime<chrono::Utc>>,
    /// Whether the pod opted in to checkpoint signals.
    pub checkpoints: bool,
    /// Whether an interruption loses the pod's work since its last
    /// checkpoint (`quartermaster.dev/holds-work`, default true). A pod
    /// that holds none (a serving replica) loses only the time it is down,
    /// and the planner prices only that.
    pub holds_work: bool,
    /// Pod labels (for spread and anti-affinity selectors).
    pub labels: BTreeMap<String, String>,
    /// Why the planner cannot honestly place the pod, if it cannot: a need
    /// it does not understand (an annotation that does not read, a DRA
    /// claim no type can satisfy). Such a pod is reported `NotPlaceable`
    /// with these reasons and never placed as though the need were absent.
    pub not_placeable: Vec<String>,
    /// Its DRA resource claims as the pod names them (`spec.resourceClaims`).
    /// A pod with claims is planned only once they are matched against
    /// DeviceClasses, ResourceClaims and the catalog's device templates
    /// ([`Pod::devices`], by [`crate::cluster::dra::Resolver`]); until
    /// then it is not placeable, never placed as a pod without devices.
    pub resource_claims: Vec<ClaimRef>,
    /// What its claims need on each node shape, once matched.
    pub devices: Option<std::sync::Arc<super::dra::PodDevices>>,
}

/// One entry of a pod's `spec.resourceClaims`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimRef {
    /// The entry's name (what its containers' `resources.claims` name).
    pub name: String,
    /// `resourceClaimName`: a ResourceClaim in the pod's namespace, shared
    /// with every pod that names it.
    pub claim: Option<String>,
    /// `resourceClaimTemplateName`: a ResourceClaimTemplate from which the
    /// pod gets a claim of its own.
    pub template: Option<String>,
    /// The claim generated for the pod from its template, once created
    /// (`status.resourceClaimStatuses`).
    pub generated: Option<String>,
    /// The pod group (`namespace/name`) whose one claim made from
    /// `template` this entry names (a Workload API PodGroup's
    /// `resourceClaims`), before that claim is made: every member shares it.
    pub group: Option<String>,
}

impl ClaimRef {
    /// Whether the entry is a claim of the pod's own: made from a template
    /// for this pod alone (not a shared ResourceClaim, not a pod group's
    /// claim). A pod re-created elsewhere gets a new one, allocated there.
    pub fn is_own(&self) -> bool {
        self.claim.is_none() && self.template.is_some() && self.group.is_none()
    }
}

impl Pod {
    /// A pod with these requests and no constraints (tests, generators).
    pub fn new(name: &str, requests: Resources) -> Pod {
        Pod {
            name: name.into(),
            requests: requests.with(PODS, 1),
            affinity: NodeAffinity::default(),
            tolerations: Vec::new(),
            zone_spread: None,
            per_node_max: None,
            group: None,
            required_topology: None,
            network_block: None,
            checkpoint_interval_s: None,
            expected_runtime_s: None,
            checkpoint_duration_s: None,
            checkpoint_pause_s: None,
            deadline: None,
            checkpoints: false,
            holds_work: true,
            labels: BTreeMap::new(),
            not_placeable: Vec::new(),
            resource_claims: Vec::new(),
            devices: None,
        }
    }

    /// Whether its zone is part of its constraints: a gang member (a gang
    /// starts in one zone) or a pod spread over zones. Such pods keep their
    /// zone when the planner moves or re-plans them.
    pub fn zone_bound(&self) -> bool {
        self.group.is_some() || self.zone_spread.is_some()
    }

    /// Converts a Kubernetes Pod. `group_sizes` gives Volcano PodGroup
    /// `minMember` by `namespace/name`.
    ///
    /// # Errors
    /// A malformed quantity, operator, effect or annotation, naming the pod.
    pub fn from_k8s(pod: &core::Pod, group_sizes: &BTreeMap<String, u32>) -> Result<Pod, Error> {
        let (pod, ignored) = Pod::from_k8s_lenient(pod, group_sizes)?;
        match ignored.into_iter().next() {
            Some(i) => Err(Error::Invalid {
                pod: i.pod,
                message: i.problem,
            }),
            None => Ok(pod),
        }
    }

    /// Converts a Kubernetes Pod as [`Pod::from_k8s`] does, but an
    /// annotation or label that does not parse (a gang's size, a checkpoint
    /// interval, an expected run time) is returned beside the pod instead
    /// of failing it: a pod the user annotated badly is still counted (its
    /// requests hold room on its node), but it is not placed as though the
    /// annotation were absent: its [`Pod::not_placeable`] names the
    /// problem (as it names a DRA resource claim), and the driver tells the
    /// user.
    ///
    /// # Errors
    /// A malformed quantity, operator or effect, naming the pod (the API
    /// server rejects those, so a live pod never has one).
    pub fn from_k8s_lenient(
        pod: &core::Pod,
        group_sizes: &BTreeMap<String, u32>,
    ) -> Result<(Pod, Vec<Ignored>), Error> {
        let meta = &pod.metadata;
        let ns = meta.namespace.as_deref().unwrap_or("default");
        let name = format!("{ns}/{}", meta.name.as_deref().unwrap_or(""));
        let invalid = |message: String| Error::Invalid {
            pod: name.clone(),
            message,
        };
        let spec = pod.spec.clone().unwrap_or_default();
        let requests = effective_requests(&spec).map_err(|source| Error::Quantity {
            pod: name.clone(),
            source,
        })?;

        let mut base: Vec<Requirement> = spec
            .node_selector
            .iter()
            .flatten()
            .map(|(k, v)| Requirement::new(k, Operator::In, &[v]))
            .collect();
        base.sort_by(|a, b| a.key.cmp(&b.key));
        let mut terms = Vec::new();
        let required = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        if let Some(sel) = required {
            for term in &sel.node_selector_terms {
                let mut t = base.clone();
                for e in term.match_expressions.iter().flatten() {
                    t.push(Requirement {
                        key: e.key.clone(),
                        operator: super::requirements::parse_enum(&e.operator).map_err(invalid)?,
                        values: e.values.clone().unwrap_or_default(),
                    });
                }
                terms.push(t);
            }
        }
        if terms.is_empty() && !base.is_empty() {
            terms.push(base);
        }

        let tolerations = spec
            .tolerations
            .iter()
            .flatten()
            .map(|t| {
                Ok(Toleration {
                    key: t.key.clone().unwrap_or_default(),
                    exists: t.operator.as_deref() == Some("Exists"),
                    value: t.value.clone().unwrap_or_default(),
                    effect: match t.effect.as_deref() {
                        None | Some("") => None,
                        Some(e) => {
                            Some(super::requirements::parse_enum::<Effect>(e).map_err(&invalid)?)
                        }
                    },
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;

        let (zone_spread, per_node_max, mut unplanned) = inter_pod(&spec, ns);
        let labels: BTreeMap<String, String> = meta.labels.clone().unwrap_or_default();
        let annotations = meta.annotations.clone().unwrap_or_default();
        let mut ignored = Vec::new();
        let mut ignore = |problem: String| {
            ignored.push(Ignored {
                pod: name.clone(),
                problem,
            })
        };
        let scheduling_group = spec
            .scheduling_group
            .as_ref()
            .and_then(|g| g.pod_group_name.as_deref());
        let group = group_of(ns, &labels, &annotations, scheduling_group, group_sizes)
            .unwrap_or_else(|e| {
                ignore(e);
                None
            });
        let mut seconds = |key: &str| -> Option<f64> {
            let v = annotations.get(key)?;
            annotated_duration(v)
                .map(|d| d.as_secs_f64())
                .map_err(|e| ignore(format!("annotation {key}={v:?}: {e}")))
                .ok()
        };
        let checkpoint_interval_s = seconds(l::CHECKPOINT_INTERVAL);
        let expected_runtime_s = seconds(l::EXPECTED_RUNTIME);
        let checkpoint_duration_s = seconds(l::CHECKPOINT_DURATION);
        let checkpoint_pause_s = seconds(l::CHECKPOINT_PAUSE);
        let deadline = annotations.get(l::DEADLINE).and_then(|v| {
            chrono::DateTime::parse_from_rfc3339(v)
                .map(|t| t.with_timezone(&chrono::Utc))
                .map_err(|e| {
                    ignore(format!(
                        "annotation {}={v:?} is not an RFC 3339 time: {e}",
                        l::DEADLINE
                    ))
                })
                .ok()
        });
        let holds_work = match annotations.get(l::HOLDS_WORK).map(String::as_str) {
            None | Some("true") => true,
            Some("false") => false,
            Some(v) => {
                ignore(format!(
                    "annotation {}={v:?} is not \"true\" or \"false\"",
                    l::HOLDS_WORK
                ));
                true
            }
        };
        // Needs the planner cannot meet honestly: the pod is reported, not
        // placed as a pod without them.
        let mut not_placeable: Vec<String> = ignored.iter().map(|i| i.problem.clone()).collect();
        not_placeable.append(&mut unplanned);
        let generated: BTreeMap<&str, &str> = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|s| Some((s.name.as_str(), s.resource_claim_name.as_deref()?)))
            .collect();
        let resource_claims = spec
            .resource_claims
            .iter()
            .flatten()
            .map(|c| ClaimRef {
                name: c.name.clone(),
                claim: c.resource_claim_name.clone(),
                template: c.resource_claim_template_name.clone(),
                generated: generated.get(c.name.as_str()).map(|g| g.to_string()),
                group: None,
            })
            .collect();
        let pod = Pod {
            requests,
            affinity: NodeAffinity { terms },
            tolerations,
            zone_spread,
            per_node_max,
            group,
            required_topology: annotations.get(l::KUEUE_REQUIRED_TOPOLOGY).cloned(),
            network_block: None,
            checkpoint_interval_s,
            expected_runtime_s,
            checkpoint_duration_s,
            checkpoint_pause_s,
            deadline,
            checkpoints: annotations.get(l::CHECKPOINT_ENABLED).map(String::as_str) == Some("true")
                || annotations.contains_key(l::CHECKPOINT_HOOK),
            holds_work,
            labels,
            name,
            not_placeable,
            resource_claims,
            devices: None,
        };
        Ok((pod, ignored))
    }
}

/// A pod's inter-pod constraints as the planner keeps them: its zone
/// spread, its per-node cap, and what it requires that the planner does
/// not plan for. Only `DoNotSchedule` spreads and required terms bind (the
/// scheduler may break preferences and `ScheduleAnyway`). Kept: one zone
/// spread (on `topology.kubernetes.io/zone` or the zone ID), spread and
/// anti-affinity on `kubernetes.io/hostname` (a cap per node). Not kept,
/// and named so that the pod is reported rather than placed as though the
/// need were absent (a node launched for it that the scheduler then
/// refuses strands it and costs money): required pod affinity, required
/// anti-affinity on any other key, a spread on any other key, and a second
/// zone spread.
fn inter_pod(spec: &core::PodSpec, ns: &str) -> (Option<ZoneSpread>, Option<u32>, Vec<String>) {
    let mut unplanned = Vec::new();
    let mut zone_spread: Option<ZoneSpread> = None;
    let mut per_node_max: Option<u32> = None;
    let mut cap = |n: u32| per_node_max = Some(per_node_max.map_or(n, |m| m.min(n)));
    let spreads = spec.topology_spread_constraints.iter().flatten();
    for c in spreads.filter(|c| c.when_unsatisfiable == "DoNotSchedule") {
        let skew = c.max_skew.max(1) as u32;
        match c.topology_key.as_str() {
            l::ZONE | l::ZONE_ID if zone_spread.is_none() => {
                zone_spread = Some(ZoneSpread {
                    max_skew: skew,
                    selector: format!(
                        "{ns}/{}",
                        serde_json::to_string(&c.label_selector).unwrap_or_default()
                    ),
                })
            }
            l::HOSTNAME => cap(skew),
            key => unplanned.push(format!(
                "topology spread on {key} (DoNotSchedule) is not planned for: only one zone spread and hostname spreads are"
            )),
        }
    }
    let affinity = spec.affinity.as_ref();
    let anti = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    for term in anti.into_iter().flatten() {
        match term.topology_key.as_str() {
            l::HOSTNAME => cap(1),
            key => unplanned.push(format!(
                "required pod anti-affinity on {key} is not planned for: only kubernetes.io/hostname is"
            )),
        }
    }
    let with = affinity
        .and_then(|a| a.pod_affinity.as_ref())
        .and_then(|p| {
            p.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    for term in with.into_iter().flatten() {
        unplanned.push(format!(
            "required pod affinity on {} is not planned for: the planner cannot yet place a pod beside others",
            term.topology_key
        ));
    }
    (zone_spread, per_node_max, unplanned)
}

/// The longest duration a pod's annotations may state
/// (`checkpoint-interval`, `checkpoint-duration`, `checkpoint-pause`,
/// `expected-runtime`): a year. A longer one is refused with a reason (the
/// pod is planned without it), so that no decision does arithmetic on a
/// tenant's `6000000000h`.
pub const MAX_ANNOTATED_DURATION: std::time::Duration =
    std::time::Duration::from_secs(365 * 24 * 3600);

/// A duration annotation's value: a Go duration of at most
/// [`MAX_ANNOTATED_DURATION`].
fn annotated_duration(v: &str) -> Result<std::time::Duration, String> {
    let d = crate::api::parse_duration(v).map_err(|e| e.to_string())?;
    if d > MAX_ANNOTATED_DURATION {
        return Err(format!(
            "longer than {} (the most a pod's duration annotations may say)",
            crate::api::format_duration(MAX_ANNOTATED_DURATION)
        ));
    }
    Ok(d)
}

/// An optional annotation or label of a pod that could not be read and was
/// left out (see [`Pod::from_k8s_lenient`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ignored {
    /// `namespace/name`.
    pub pod: String,
    /// What is wrong, naming the annotation or label.
    pub problem: String,
}

impl std::fmt::Display for Ignored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pod {}: {} (not placed until fixed)",
            self.pod, self.problem
        )
    }
}

/// The gang a pod belongs to: ours, Kueue's pod-group label and
/// total-count annotation, Volcano's annotation with its PodGroup's
/// `minMember` from `group_sizes`, or the Workload API's
/// `spec.schedulingGroup` (size 1 here: the controller reads its PodGroup's
/// `minCount`; see [`GangSource`]).
fn group_of(
    ns: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    scheduling_group: Option<&str>,
    volcano_sizes: &BTreeMap<String, u32>,
) -> Result<Option<GroupRef>, String> {
    let count = |key: &str| -> Result<u32, String> {
        let v = annotations
            .get(key)
            .ok_or_else(|| format!("annotation {key} is required with the group name"))?;
        v.parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("annotation {key}={v:?} is not a positive integer"))
    };
    if let Some(g) = annotations.get(l::POD_GROUP) {
        return Ok(Some(GroupRef {
            name: format!("{ns}/{g}"),
            min_member: count(l::POD_GROUP_SIZE)?,
        }));
    }
    if let Some(g) = labels.get(l::KUEUE_GROUP) {
        return Ok(Some(GroupRef {
            name: format!("{ns}/{g}"),
            min_member: count(l::KUEUE_GROUP_TOTAL)?,
        }));
    }
    if let Some(g) = annotations.get(l::VOLCANO_GROUP) {
        let name = format!("{ns}/{g}");
        let min_member = volcano_sizes.get(&name).copied().unwrap_or(1);
        return Ok(Some(GroupRef { name, min_member }));
    }
    if let Some(g) = scheduling_group {
        return Ok(Some(GroupRef {
            name: format!("{ns}/{g}"),
            min_member: 1,
        }));
    }
    Ok(None)
}

/// Where a pod's gang is declared, when its size lives in another object
/// (a Volcano PodGroup's `minMember`, a Workload API PodGroup's gang
/// `minCount`) that the pod's own fields do not carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GangSource {
    /// `scheduling.k8s.io/group-name` names a Volcano PodGroup.
    Volcano,
    /// `spec.schedulingGroup.podGroupName` names a `scheduling.k8s.io`
    /// PodGroup (the Workload API, KEP-4671).
    Workload,
}

impl GangSource {
    /// The object that sizes the pod's gang, if another object does (the
    /// same precedence as the pod's [`GroupRef`]: our annotation and Kueue's
    /// label carry their size themselves).
    pub fn of(pod: &core::Pod) -> Option<GangSource> {
        let meta = &pod.metadata;
        let has_annotation = |k: &str| meta.annotations.as_ref().is_some_and(|a| a.contains_key(k));
        let has_label = |k: &str| meta.labels.as_ref().is_some_and(|l| l.contains_key(k));
        if has_annotation(l::POD_GROUP) || has_label(l::KUEUE_GROUP) {
            None
        } else if has_annotation(l::VOLCANO_GROUP) {
            Some(GangSource::Volcano)
        } else if pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_group.as_ref())
            .is_some_and(|g| g.pod_group_name.is_some())
        {
            Some(GangSource::Workload)
        } else {
            None
        }
    }
}

fn requests_of(c: &core::Container) -> Result<Resources, QuantityError> {
    let req = c.resources.as_ref();
    // Kubernetes defaults requests to limits where only limits are given.
    let mut list: BTreeMap<&str, &str> = req
        .and_then(|r| r.limits.as_ref())
        .map(|m| m.iter().map(|(k, v)| (k.as_str(), v.0.as_str())).collect())
        .unwrap_or_default();
    if let Some(reqs) = req.and_then(|r| r.requests.as_ref()) {
        for (k, v) in reqs {
            list.insert(k, v.0.as_str());
        }
    }
    Resources::parse(list)
}

/// Effective requests as the scheduler computes them: the larger of (sum of
/// app containers + all sidecars) and, for each plain init container, its
/// request plus the sidecars started before it; plus pod overhead; plus one
/// pod slot.
///
/// # Errors
/// A malformed quantity.
pub fn effective_requests(spec: &core::PodSpec) -> Result<Resources, QuantityError> {
    let mut app = Resources::new();
    for c in &spec.containers {
        app.add(&requests_of(c)?);
    }
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for c in spec.init_containers.iter().flatten() {
        let r = requests_of(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            init_peak = init_peak.max_with(&sidecars);
        } else {
            init_peak = init_peak.max_with(&r.plus(&sidecars));
        }
    }
    let mut total = app.plus(&sidecars).max_with(&init_peak);
    if let Some(overhead) = &spec.overhead {
        total.add(&Resources::parse(
            overhead.iter().map(|(k, v)| (k.as_str(), v.0.as_str())),
        )?);
    }
    total.set(PODS, 1);
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::resources::{CPU, MEMORY};

    fn pod_yaml(y: &str) -> core::Pod {
        serde_norway::from_str(y).unwrap()
    }

    #[test]
    fn needs_the_planner_does_not_understand_make_a_pod_not_placeable() {
        let dra = pod_yaml(
            r#"
metadata: {name: p, namespace: ml}
spec:
  resourceClaims: [{name: gpu, resourceClaimTemplateName: one-h100}]
  containers:
  - {name: a, resources: {requests: {cpu: "1"}, claims: [{name: gpu}]}}
"#,
        );
        let (p, ignored) = Pod::from_k8s_lenient(&dra, &BTreeMap::new()).unwrap();
        assert!(ignored.is_empty());
        // Its claims are kept for matching; unmatched, it is not planned.
        assert_eq!(p.resource_claims.len(), 1);
        assert_eq!(p.resource_claims[0].template.as_deref(), Some("one-h100"));
        assert!(p.devices.is_none());
        let annotated = pod_yaml(
            r#"
metadata: {name: p, namespace: ml, annotations: {quartermaster.dev/pod-group: g, quartermaster.dev/pod-group-size: four}}
spec:
  containers: [{name: a, resources: {limits: {nvidia.com/gpu: "1"}}}]
"#,
        );
        let (p, ignored) = Pod::from_k8s_lenient(&annotated, &BTreeMap::new()).unwrap();
        assert_eq!(ignored.len(), 1);
        // Not planned as a single pod without its gang.
        assert_eq!(p.not_placeable, [ignored[0].problem.clone()]);
        assert!(p.group.is_none());
        let plain = pod_yaml("metadata: {name: p}\nspec: {containers: [{name: a}]}\n");
        assert!(Pod::from_k8s_lenient(&plain, &BTreeMap::new())
            .unwrap()
            .0
            .not_placeable
            .is_empty());
    }

    #[test]
    fn hostname_spread_and_anti_affinity_cap_a_node_and_other_inter_pod_rules_are_named() {
        let with = |constraints: &str| {
            let y = format!(
                "metadata: {{name: p, namespace: web, labels: {{app: serve}}}}\nspec:\n{constraints}  containers: [{{name: a}}]\n"
            );
            // Never an error: a rule the planner does not keep is reported
            // on the pod, the rest of the pod is read.
            Pod::from_k8s(&pod_yaml(&y), &BTreeMap::new()).unwrap()
        };
        let sel = "labelSelector: {matchLabels: {app: serve}}";
        let spread = |key: &str, skew: u32, when: &str| {
            format!(
                "  - {{maxSkew: {skew}, topologyKey: {key}, whenUnsatisfiable: {when}, {sel}}}\n"
            )
        };
        let host = with(&format!(
            "  topologySpreadConstraints:\n{}{}",
            spread(l::HOSTNAME, 2, "DoNotSchedule"),
            spread(l::ZONE_ID, 1, "DoNotSchedule")
        ));
        assert_eq!(host.per_node_max, Some(2));
        assert_eq!(host.zone_spread.as_ref().map(|z| z.max_skew), Some(1));
        assert!(host.not_placeable.is_empty(), "{:?}", host.not_placeable);
        // Anti-affinity on the hostname caps at one, whatever the spread says.
        let both = with(&format!(
            "  topologySpreadConstraints:\n{}  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - {{topologyKey: {}, {sel}}}\n",
            spread(l::HOSTNAME, 3, "DoNotSchedule"),
            l::HOSTNAME
        ));
        assert_eq!(both.per_node_max, Some(1));
        assert!(both.not_placeable.is_empty());
        // Preferences bind nothing and are not reported.
        let soft = with(&format!(
            "  topologySpreadConstraints:\n{}  affinity:\n    podAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n      - {{weight: 1, podAffinityTerm: {{topologyKey: {}, {sel}}}}}\n",
            spread("karpenter.sh/capacity-type", 1, "ScheduleAnyway"),
            l::ZONE
        ));
        assert_eq!(
            (soft.per_node_max, soft.zone_spread.is_none()),
            (None, true)
        );
        assert!(soft.not_placeable.is_empty());
        // Rules the planner does not keep make the pod not placeable, each
        // named by its kind and key.
        let hard = with(&format!(
            "  topologySpreadConstraints:\n{}{}{}  affinity:\n    podAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - {{topologyKey: {z}, labelSelector: {{matchLabels: {{app: cache}}}}}}\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - {{topologyKey: {z}, {sel}}}\n",
            spread(l::ZONE, 1, "DoNotSchedule"),
            spread(l::ZONE, 2, "DoNotSchedule"),
            spread("karpenter.sh/capacity-type", 1, "DoNotSchedule"),
            z = l::ZONE
        ));
        assert_eq!(hard.zone_spread.as_ref().map(|z| z.max_skew), Some(1));
        let said = hard.not_placeable.join("\n");
        assert_eq!(hard.not_placeable.len(), 4, "{said}");
        for needle in [
            "topology spread on topology.kubernetes.io/zone",
            "topology spread on karpenter.sh/capacity-type",
            "required pod affinity on topology.kubernetes.io/zone",
            "required pod anti-affinity on topology.kubernetes.io/zone",
        ] {
            assert!(said.contains(needle), "{needle} not in {said}");
        }
    }

    #[test]
    fn init_containers_and_overhead_count_as_kubernetes_counts_them() {
        let p = pod_yaml(
            r#"
metadata: {name: p, namespace: ml}
spec:
  overhead: {cpu: 100m}
  initContainers:
  - name: big-init
    resources: {requests: {cpu: "4", memory: 1Gi}}
  - name: sidecar
    restartPolicy: Always
    resources: {requests: {cpu: 500m}}
  containers:
  - name: a
    resources: {requests: {cpu: "1", memory: 2Gi}, limits: {nvidia.com/gpu: "2"}}
  - name: b
    resources: {requests: {cpu: "1"}}
"#,
        );
        let r = effective_requests(p.spec.as_ref().unwrap()).unwrap();
        // app 2 cpu + sidecar 0.5 = 2.5 < init 4 -> 4 cpu, + 0.1 overhead
        assert_eq!(r.get(CPU), 4100);
        assert_eq!(r.get(MEMORY), 2 << 30);
        assert_eq!(
            r.get(l::RESOURCE_GPU),
            2,
            "limits-only GPUs become requests"
        );
        assert_eq!(r.get(PODS), 1);
    }

    #[test]
    fn selectors_affinity_tolerations_and_gangs_are_read() {
        let p = pod_yaml(
            r#"
metadata:
  name: w0
  namespace: ml
  labels: {kueue.x-k8s.io/pod-group-name: g1}
  annotations: {kueue.x-k8s.io/pod-group-total-count: "4", quartermaster.dev/checkpoint-interval: 30m}
spec:
  nodeSelector: {quartermaster.dev/gpu-name: h100}
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions: [{key: quartermaster.dev/gpu-count, operator: Gt, values: ["4"]}]
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  containers: [{name: a}]
"#,
        );
        let pod = Pod::from_k8s(&p, &BTreeMap::new()).unwrap();
        assert_eq!(pod.affinity.terms.len(), 1);
        assert_eq!(
            pod.affinity.terms[0].len(),
            2,
            "selector ANDed into the term"
        );
        assert_eq!(pod.tolerations[0].effect, Some(Effect::NoSchedule));
        let g = pod.group.unwrap();
        assert_eq!((g.name.as_str(), g.min_member), ("ml/g1", 4));
        assert_eq!(pod.checkpoint_interval_s, Some(1800.0));
    }

    #[test]
    fn bad_optional_annotations_are_left_out_and_named_not_fatal() {
        let p = pod_yaml(
            r#"
metadata:
  name: w0
  namespace: ml
  labels: {kueue.x-k8s.io/pod-group-name: g1}
  annotations: {quartermaster.dev/checkpoint-interval: soon, quartermaster.dev/expected-runtime: 2h}
spec:
  containers: [{name: a, resources: {requests: {cpu: "2"}}}]
"#,
        );
        let (pod, ignored) = Pod::from_k8s_lenient(&p, &BTreeMap::new()).unwrap();
        assert_eq!(pod.requests.get(CPU), 2000);
        assert_eq!(pod.group, None, "a gang without its count is no gang");
        assert_eq!(pod.checkpoint_interval_s, None);
        assert_eq!(pod.expected_runtime_s, Some(7200.0));
        let problems: Vec<String> = ignored.iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("ml/w0") && problems[0].contains(l::KUEUE_GROUP_TOTAL));
        assert!(problems[1].contains(l::CHECKPOINT_INTERVAL) && problems[1].contains("soon"));
        // The strict conversion still refuses it, naming the first problem.
        let e = Pod::from_k8s(&p, &BTreeMap::new()).unwrap_err().to_string();
        assert!(e.contains(l::KUEUE_GROUP_TOTAL), "{e}");
    }

    #[test]
    fn a_bad_operator_or_quantity_is_an_error_naming_the_pod() {
        let p = pod_yaml(
            r#"
metadata: {name: bad, namespace: ml}
spec:
  containers: [{name: a, resources: {requests: {cpu: "lots"}}}]
"#,
        );
        let e = Pod::from_k8s(&p, &BTreeMap::new()).unwrap_err().to_string();
        assert!(e.contains("ml/bad") && e.contains("lots"), "{e}");
    }

    #[test]
    fn a_pod_holds_work_unless_it_says_otherwise_and_a_bad_value_is_named() {
        let read = |meta: &str| {
            let p = pod_yaml(&format!(
                "metadata: {meta}\nspec: {{containers: [{{name: a}}]}}\n"
            ));
            Pod::from_k8s_lenient(&p, &BTreeMap::new()).unwrap()
        };
        let owned = |kind: &str, annotations: &str| {
            format!(
                "{{name: p, namespace: ml, annotations: {{{annotations}}}, ownerReferences: [{{apiVersion: apps/v1, kind: {kind}, name: o, uid: u, controller: true}}]}}"
            )
        };
        assert!(read("{name: p, namespace: ml}").0.holds_work);
        // A Deployment's replica is not assumed to hold no work (some keep
        // state in memory): its owner says so.
        assert!(read(&owned("ReplicaSet", "")).0.holds_work);
        let told = read(&owned(
            "ReplicaSet",
            "quartermaster.dev/holds-work: \"false\"",
        ));
        assert!(!told.0.holds_work);
        let told = read(&owned("Job", "quartermaster.dev/holds-work: \"true\""));
        assert!(told.0.holds_work);
        let (pod, ignored) = read(&owned("ReplicaSet", "quartermaster.dev/holds-work: maybe"));
        assert!(pod.holds_work);
        assert_eq!(ignored.len(), 1);
        assert!(
            ignored[0].problem.contains("quartermaster.dev/holds-work")
                && ignored[0].problem.contains("maybe"),
            "{}",
            ignored[0]
        );
    }

    #[test]
    fn checkpoint_duration_and_deadline_annotations_are_read_and_bad_ones_named() {
        let p = pod_yaml(
            r#"
metadata:
  name: t
  namespace: ml
  annotations: {quartermaster.dev/checkpoint-duration: 4m, quartermaster.dev/checkpoint-pause: 45s, quartermaster.dev/deadline: "2026-01-05T12:00:00+01:00"}
spec:
  containers: [{name: a}]
"#,
        );
        let pod = Pod::from_k8s(&p, &BTreeMap::new()).unwrap();
        assert_eq!(pod.checkpoint_duration_s, Some(240.0));
        assert_eq!(pod.checkpoint_pause_s, Some(45.0));
        assert_eq!(
            pod.deadline.map(|d| d.to_rfc3339()),
            Some("2026-01-05T11:00:00+00:00".to_string())
        );
        let bad = pod_yaml(
            r#"
metadata:
  name: late
  namespace: ml
  annotations: {quartermaster.dev/deadline: tomorrow}
spec:
  containers: [{name: a}]
"#,
        );
        let e = Pod::from_k8s(&bad, &BTreeMap::new())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ml/late") && e.contains("quartermaster.dev/deadline"),
            "{e}"
        );
    }

    #[test]
    fn durations_past_a_year_in_annotations_are_refused_with_a_reason() {
        let p = pod_yaml(
            r#"
metadata:
  name: huge
  namespace: ml
  annotations: {quartermaster.dev/checkpoint-interval: 6000000000h, quartermaster.dev/checkpoint-duration: 3000000000h, quartermaster.dev/expected-runtime: 8760h, quartermaster.dev/checkpoint-pause: 18446744073709551615s}
spec:
  containers: [{name: a}]
"#,
        );
        let (pod, ignored) = Pod::from_k8s_lenient(&p, &BTreeMap::new()).unwrap();
        assert_eq!(pod.checkpoint_interval_s, None);
        assert_eq!(pod.checkpoint_duration_s, None);
        assert_eq!(pod.checkpoint_pause_s, None);
        // A year exactly is within the bound.
        assert_eq!(pod.expected_runtime_s, Some(365.0 * 24.0 * 3600.0));
        let problems: Vec<&str> = ignored.iter().map(|i| i.problem.as_str()).collect();
        assert_eq!(problems.len(), 3, "{problems:?}");
        for (problem, key) in problems.iter().zip([
            l::CHECKPOINT_INTERVAL,
            l::CHECKPOINT_DURATION,
            l::CHECKPOINT_PAUSE,
        ]) {
            assert!(
                problem.contains(key) && problem.contains("longer than 8760h"),
                "{problem}"
            );
        }
    }
}
