//! Kubernetes YAML at the edge: multi-document manifests of Pods, Deployments,
//! StatefulSets, Jobs, Volcano PodGroups, Nodes and DRA objects
//! (DeviceClasses, ResourceClaims, ResourceClaimTemplates, ResourceSlices)
//! turned into the planner's pods and node states. Pure text processing;
//! the caller reads the files.

use super::node::NodeState;
use super::pod::{self, Ignored, Pod};
use super::requirements::{Effect, Taint};
use super::resources::{QuantityError, Resources};
use crate::api::labels as l;
use crate::catalog::CapacityType;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1 as core;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Errors reading manifests.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A document is not valid YAML or not a valid object of its kind.
    #[error("document {index}: {message}")]
    Document {
        /// 1-based document number.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// A pod's fields are malformed.
    #[error(transparent)]
    Pod(#[from] pod::Error),
    /// A node's quantities are malformed.
    #[error("node {node}: {source}")]
    Node {
        /// Node name.
        node: String,
        /// The bad quantity.
        source: QuantityError,
    },
}

/// Objects read from manifests, still in Kubernetes form.
#[derive(Debug, Default)]
pub struct Manifests {
    /// Pods, including the replicas of workloads.
    pub pods: Vec<core::Pod>,
    /// Volcano PodGroup `minMember` by `namespace/name`.
    pub group_sizes: BTreeMap<String, u32>,
    /// Nodes.
    pub nodes: Vec<core::Node>,
    /// Requests of every DaemonSet's pod: overhead on each new node.
    pub daemonset_overhead: Resources,
    /// DRA objects: DeviceClasses, ResourceClaims, ResourceClaimTemplates
    /// and ResourceSlices (`resource.k8s.io/v1`).
    pub dra: super::dra::Objects,
    /// Documents of other kinds, as `(kind, value)`, for the caller to use.
    pub other: Vec<(String, serde_json::Value)>,
}

#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    kind: String,
}

impl Manifests {
    /// Reads every document of a multi-document YAML text.
    ///
    /// # Errors
    /// The first document that does not parse, by number.
    pub fn parse(&mut self, yaml: &str) -> Result<(), Error> {
        for (i, doc) in serde_norway::Deserializer::from_str(yaml).enumerate() {
            let index = i + 1;
            let err = |message: String| Error::Document { index, message };
            let value = serde_json::Value::deserialize(doc).map_err(|e| err(e.to_string()))?;
            if value.is_null() {
                continue;
            }
            let head: Head =
                serde_json::from_value(value.clone()).map_err(|e| err(e.to_string()))?;
            match head.kind.as_str() {
                "Pod" => self.pods.push(from(value).map_err(err)?),
                "Node" => self.nodes.push(from(value).map_err(err)?),
                "Deployment" => {
                    let d: Deployment = from(value).map_err(err)?;
                    let spec = d.spec;
                    let n = spec.replicas.unwrap_or(1);
                    self.expand(&d.metadata, spec.template, n);
                }
                "StatefulSet" => {
                    let s: StatefulSet = from(value).map_err(err)?;
                    let spec = s.spec;
                    let n = spec.replicas.unwrap_or(1);
                    self.expand(&s.metadata, spec.template, n);
                }
                "Job" => {
                    let j: Job = from(value).map_err(err)?;
                    let spec = j.spec.unwrap_or_default();
                    let parallel = spec.parallelism.unwrap_or(1);
                    let n = spec.completions.map_or(parallel, |c| c.min(parallel));
                    self.expand(&j.metadata, spec.template, n);
                }
                "DaemonSet" => {
                    let d: k8s_openapi::api::apps::v1::DaemonSet = from(value).map_err(err)?;
                    let spec = d.spec.template.spec.unwrap_or_default();
                    let mut r = pod::effective_requests(&spec).map_err(|e| err(e.to_string()))?;
                    r.set(super::resources::PODS, 1);
                    self.daemonset_overhead.add(&r);
                }
                "PodGroup" => {
                    let meta = &value["metadata"];
                    let ns = meta["namespace"].as_str().unwrap_or("default");
                    let name = meta["name"].as_str().unwrap_or_default();
                    let min = value["spec"]["minMember"].as_u64().unwrap_or(1) as u32;
                    self.group_sizes.insert(format!("{ns}/{name}"), min);
                }
                "DeviceClass" => self.dra.add_class(from(value).map_err(err)?),
                "ResourceClaim" => self.dra.add_claim(from(value).map_err(err)?),
                "ResourceClaimTemplate" => self.dra.add_template(from(value).map_err(err)?),
                "ResourceSlice" => self.dra.add_slice(from(value).map_err(err)?),
                "" => return Err(err("document has no kind".into())),
                other => self.other.push((other.to_string(), value)),
            }
        }
        Ok(())
    }

    fn expand(
        &mut self,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        template: core::PodTemplateSpec,
        replicas: i32,
    ) {
        let base = meta.name.clone().unwrap_or_default();
        for i in 0..replicas.max(0) {
            let mut m = template.metadata.clone().unwrap_or_default();
            m.name = Some(format!("{base}-{i}"));
            m.namespace = meta.namespace.clone().or(m.namespace);
            self.pods.push(core::Pod {
                metadata: m,
                spec: template.spec.clone(),
                status: None,
            });
        }
    }

    /// [`Cluster`]: pending pods (no `spec.nodeName`) for the planner, node states with
    /// the requests of pods bound to them counted as used, and the optional
    /// pod annotations that did not parse and were left out (the pods are
    /// planned without them; see [`Pod::from_k8s_lenient`]).
    ///
    /// # Errors
    /// A malformed quantity, operator or effect of a pod, or a malformed node.
    pub fn into_cluster(self) -> Result<Cluster, Error> {
        let mut nodes = self
            .nodes
            .iter()
            .map(node_state)
            .collect::<Result<Vec<_>, _>>()?;
        // Devices the DRA drivers publish on each node, less those
        // allocated claims take.
        for n in &mut nodes {
            let (published, taken) = self.dra.node_devices(&n.name);
            n.allocatable.add(&published);
            n.used.add(&taken);
        }
        let mut pending = Vec::new();
        let mut ignored = Vec::new();
        for p in &self.pods {
            let bound = p.spec.as_ref().and_then(|s| s.node_name.clone());
            match bound {
                Some(name) => {
                    let requests =
                        pod::effective_requests(p.spec.as_ref().expect("bound pod has a spec"))
                            .map_err(|source| Error::Node {
                                node: name.clone(),
                                source,
                            })?;
                    if let Some(n) = nodes.iter_mut().find(|n| n.name == name) {
                        n.used.add(&requests);
                    }
                }
                None => {
                    let (pod, bad) = Pod::from_k8s_lenient(p, &self.group_sizes)?;
                    pending.push(pod);
                    ignored.extend(bad);
                }
            }
        }
        Ok((pending, nodes, ignored))
    }
}

/// What [`Manifests::into_cluster`] makes of the manifests: pending pods,
/// nodes, and the pod annotations left out because they do not parse.
pub type Cluster = (Vec<Pod>, Vec<NodeState>, Vec<Ignored>);

fn from<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// A Kubernetes Node as the planner sees it.
///
/// # Errors
/// A malformed allocatable quantity.
pub fn node_state(n: &core::Node) -> Result<NodeState, Error> {
    let name = n.metadata.name.clone().unwrap_or_default();
    let labels = n.metadata.labels.clone().unwrap_or_default();
    let status = n.status.clone().unwrap_or_default();
    let allocatable = Resources::parse(
        status
            .allocatable
            .iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.0.as_str())),
    )
    .map_err(|source| Error::Node {
        node: name.clone(),
        source,
    })?;
    let spec = n.spec.clone().unwrap_or_default();
    let taints = spec
        .taints
        .iter()
        .flatten()
        .filter_map(|t| {
            Some(Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                effect: super::requirements::parse_enum::<Effect>(&t.effect).ok()?,
            })
        })
        .collect();
    Ok(NodeState {
        nodepool: labels.get(l::NODEPOOL).cloned(),
        instance_type: labels.get(l::INSTANCE_TYPE).cloned(),
        zone: labels
            .get(l::ZONE_ID)
            .or_else(|| labels.get(l::ZONE))
            .cloned()
            .unwrap_or_default(),
        capacity_type: labels
            .get(l::CAPACITY_TYPE)
            .or_else(|| labels.get(l::KARPENTER_CAPACITY_TYPE))
            .and_then(|c| c.parse::<CapacityType>().ok()),
        taints,
        allocatable,
        used: Resources::new(),
        price_per_hour: 0.0,
        in_flight: false,
        unschedulable: spec.unschedulable.unwrap_or(false),
        capped: Default::default(),
        labels,
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::resources::CPU;

    #[test]
    fn workloads_expand_to_their_replicas_and_bound_pods_use_their_node() {
        let mut m = Manifests::default();
        m.parse(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: prod}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  parallelism: 4
  completions: 2
  template:
    spec: {restartPolicy: Never, containers: [{name: c}]}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: g, namespace: ml}
spec: {minMember: 8}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {topology.k8s.aws/zone-id: use1-az1}}
status: {allocatable: {cpu: "4", memory: 16Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: bound}
spec: {nodeName: n1, containers: [{name: c, resources: {requests: {cpu: "3"}}}]}
"#,
        )
        .unwrap();
        assert_eq!(m.group_sizes["ml/g"], 8);
        let (pending, nodes, ignored) = m.into_cluster().unwrap();
        assert!(ignored.is_empty());
        let names: Vec<&str> = pending.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "prod/web-0",
                "prod/web-1",
                "prod/web-2",
                "default/train-0",
                "default/train-1"
            ]
        );
        assert_eq!(nodes[0].free().get(CPU), 1000);
        assert_eq!(nodes[0].zone, "use1-az1");
    }

    #[test]
    fn a_malformed_document_is_reported_by_number() {
        let mut m = Manifests::default();
        let e = m
            .parse("kind: Pod\nmetadata: {name: a}\n---\nkind: Pod\nspec: 5\n")
            .unwrap_err();
        assert!(e.to_string().starts_with("document 2"), "{e}");
    }
}
