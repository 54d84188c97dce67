//! Every write the controller makes to the Kubernetes API, one method each,
//! so that the requests (method, path, body) are pinned down in one place and
//! tested against a mock API server. Reads go through reflectors
//! (`snapshot`), never through here.
//!
//! Conventions: creating what exists and deleting what is gone are not
//! errors (the controller converges after a restart); patches are JSON merge
//! patches unless a method says otherwise.

use super::snapshot::NodeInfo;
use crate::api::labels::FINALIZER;
use crate::api::{
    EC2NodeClass, EC2NodeClassStatus, NodeClaim, NodeClaimStatus, NodePool, NodePoolStatus,
};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use k8s_openapi::api::policy::v1::Eviction as EvictionBody;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use std::collections::BTreeMap;

/// The field manager of every write we make.
pub const FIELD_MANAGER: &str = "quartermaster";

/// How often [`KubeApi::patch_node`] tries before giving up on a node that
/// keeps changing under it.
pub const NODE_PATCH_ATTEMPTS: usize = 4;

/// How often [`KubeApi::update_node_claim_status`] tries before giving up
/// on a claim that keeps changing under it.
pub const STATUS_UPDATE_ATTEMPTS: usize = 4;

/// What we change on a node: labels to set, our taints to add (when no
/// taint of that key and effect is there) and taint keys of ours to remove,
/// and the cordon. Applied against the node's current state, never as a
/// whole list, so that other controllers' taints survive.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeChange {
    /// Labels to set (others are kept).
    pub labels: BTreeMap<String, String>,
    /// Taints to add when absent.
    pub add_taints: Vec<Taint>,
    /// Keys of taints to remove.
    pub remove_taints: Vec<String>,
    /// The cordon to set, if any.
    pub unschedulable: Option<bool>,
}

/// `key` escaped for a JSON pointer (RFC 6901).
fn pointer_escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

impl NodeChange {
    /// Taking back our cordon: `quartermaster.dev/disrupted` off and
    /// `unschedulable` false (only for a node we cordoned ourselves).
    pub fn uncordon() -> NodeChange {
        NodeChange {
            remove_taints: vec![crate::api::labels::TAINT_DISRUPTED.into()],
            unschedulable: Some(false),
            ..NodeChange::default()
        }
    }

    /// The cordon of a node being disrupted: `unschedulable` and
    /// `quartermaster.dev/disrupted:NoSchedule` (the durable record that the
    /// node is going, which a restarted controller reads back).
    pub fn cordon() -> NodeChange {
        NodeChange {
            add_taints: vec![Taint {
                key: crate::api::labels::TAINT_DISRUPTED.into(),
                value: None,
                effect: "NoSchedule".into(),
                time_added: None,
            }],
            unschedulable: Some(true),
            ..NodeChange::default()
        }
    }

    /// The node's taints after the change.
    pub fn taints(&self, node: &NodeInfo) -> Vec<Taint> {
        let mut taints: Vec<Taint> = node
            .taints
            .iter()
            .filter(|t| !self.remove_taints.contains(&t.key))
            .cloned()
            .collect();
        for t in &self.add_taints {
            if !taints
                .iter()
                .any(|k| k.key == t.key && k.effect == t.effect)
            {
                taints.push(t.clone());
            }
        }
        taints
    }

    /// The JSON patch making the change on `node`, guarded by a `test` of
    /// its `resourceVersion`; `None` when nothing would change.
    pub fn json_patch(&self, node: &NodeInfo) -> Option<serde_json::Value> {
        let mut ops = Vec::new();
        let taints = self.taints(node);
        if taints != node.taints {
            // `add` on an object member replaces it, and creates it when
            // the node has no taints yet.
            ops.push(json!({ "op": "add", "path": "/spec/taints", "value": taints }));
        }
        if let Some(u) = self.unschedulable.filter(|u| *u != node.unschedulable) {
            ops.push(json!({ "op": "add", "path": "/spec/unschedulable", "value": u }));
        }
        let missing: BTreeMap<&String, &String> = self
            .labels
            .iter()
            .filter(|(k, v)| node.labels.get(*k) != Some(*v))
            .collect();
        if !missing.is_empty() {
            if node.labels.is_empty() {
                ops.push(json!({ "op": "add", "path": "/metadata/labels", "value": self.labels }));
            } else {
                for (k, v) in missing {
                    ops.push(json!({
                        "op": "add",
                        "path": format!("/metadata/labels/{}", pointer_escape(k)),
                        "value": v,
                    }));
                }
            }
        }
        if ops.is_empty() {
            return None;
        }
        if let Some(rv) = &node.resource_version {
            ops.insert(
                0,
                json!({ "op": "test", "path": "/metadata/resourceVersion", "value": rv }),
            );
        }
        Some(serde_json::Value::Array(ops))
    }
}

/// What an eviction request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// The API server accepted the eviction (the pod is terminating,
    /// honouring its grace period).
    Evicted,
    /// A PodDisruptionBudget forbids it right now (HTTP 429): try later.
    Blocked,
    /// The pod is gone already (HTTP 404).
    Gone,
}

/// The controller's writes, over a kube [`Client`].
#[derive(Clone)]
pub struct KubeApi {
    client: Client,
}

impl KubeApi {
    /// Wraps a client (a real one, or one over a mock service in tests).
    pub fn new(client: Client) -> KubeApi {
        KubeApi { client }
    }

    /// The underlying client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Creates the NodeClaim (with our finalizer already in its metadata);
    /// if one of that name exists, returns the existing one.
    ///
    /// Our finalizer is added if the caller left it out, so that no claim
    /// can lose track of its instance.
    ///
    /// # Errors
    /// Any API error other than AlreadyExists.
    pub async fn create_node_claim(&self, claim: &NodeClaim) -> kube::Result<NodeClaim> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let name = object_name(&claim.metadata, "NodeClaim")?;
        let mut claim = claim.clone();
        let finalizers = claim.metadata.finalizers.get_or_insert_with(Vec::new);
        if !finalizers.iter().any(|f| f == FINALIZER) {
            finalizers.push(FINALIZER.to_string());
        }
        match api.create(&post_params(), &claim).await {
            Err(e) if is_status(&e, 409) => api.get(name).await,
            other => other,
        }
    }

    /// Changes the NodeClaim's status with `change`, applied to the
    /// current status rather than to a copy that may be stale: first to
    /// `cached`'s, sent as a merge patch on the status subresource that
    /// carries `cached`'s `metadata.resourceVersion` (the API server then
    /// refuses it with 409 when the claim changed since); on a conflict the
    /// claim is read again and `change` applied to it, at most
    /// [`STATUS_UPDATE_ATTEMPTS`] times. So one writer's condition (a spot
    /// interruption's `Interrupted`, written a moment ago) is never erased
    /// by another's write from an older copy. `change` returns whether it
    /// changed anything; nothing is sent when it did not.
    ///
    /// # Errors
    /// Any API error, a conflict on the last attempt included.
    pub async fn update_node_claim_status(
        &self,
        cached: &NodeClaim,
        change: impl Fn(&mut NodeClaimStatus) -> bool,
    ) -> kube::Result<()> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let name = object_name(&cached.metadata, "NodeClaim")?;
        let mut current = cached.clone();
        for attempt in 1..=STATUS_UPDATE_ATTEMPTS {
            let mut status = current.status.clone().unwrap_or_default();
            if !change(&mut status) {
                return Ok(());
            }
            // A copy without a version (never from a watch) is written
            // without the precondition.
            let patch = match &current.metadata.resource_version {
                Some(rv) => json!({ "metadata": { "resourceVersion": rv }, "status": status }),
                None => json!({ "status": status }),
            };
            match api
                .patch_status(name, &patch_params(), &Patch::Merge(patch))
                .await
            {
                Err(e) if is_status(&e, 409) && attempt < STATUS_UPDATE_ATTEMPTS => {
                    tracing::debug!(
                        claim = name,
                        attempt,
                        "claim changed meanwhile; reading it again"
                    );
                    current = api.get(name).await?;
                }
                other => return other.map(drop),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Requests deletion of the NodeClaim (our finalizer holds it until the
    /// instance is gone). Gone already is fine.
    ///
    /// # Errors
    /// Any API error other than NotFound.
    pub async fn delete_node_claim(&self, name: &str) -> kube::Result<()> {
        self.delete_if_present::<NodeClaim>(name).await
    }

    /// Removes our finalizer from the NodeClaim, keeping any others. Gone
    /// already is fine.
    ///
    /// A JSON patch that first `test`s the finalizer list against the one in
    /// `claim`, then replaces it: if someone changed the list meanwhile the
    /// API server rejects the patch (422) rather than dropping their change,
    /// and the caller retries from a fresh copy. A claim without our
    /// finalizer needs no request.
    ///
    /// # Errors
    /// Any API error other than NotFound (a failed `test` included).
    pub async fn remove_finalizer(&self, claim: &NodeClaim) -> kube::Result<()> {
        let name = object_name(&claim.metadata, "NodeClaim")?;
        let current = claim.metadata.finalizers.clone().unwrap_or_default();
        if !current.iter().any(|f| f == FINALIZER) {
            return Ok(());
        }
        let kept: Vec<String> = current
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        let patch: json_patch::Patch = serde_json::from_value(json!([
            { "op": "test", "path": "/metadata/finalizers", "value": current },
            { "op": "replace", "path": "/metadata/finalizers", "value": kept },
        ]))
        .map_err(kube::Error::SerdeError)?;
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        ignore_status(
            api.patch(name, &patch_params(), &Patch::Json::<()>(patch))
                .await
                .map(drop),
            404,
        )
    }

    /// Applies `change` to the node: only our taints are added or removed,
    /// everyone else's (and every taint someone else removed) stay as they
    /// are on the server.
    ///
    /// The change is computed against `node` (the cached copy) and sent as a
    /// JSON patch that first `test`s the node's `resourceVersion`: if the
    /// node changed since, the API server refuses the patch (409 or 422), the
    /// node is read fresh and the change computed again, at most
    /// [`NODE_PATCH_ATTEMPTS`] times. A change that is already in place is
    /// not sent. Without a cached `resourceVersion` the node is read first.
    ///
    /// # Errors
    /// Any API error, a conflict on the last attempt included.
    pub async fn patch_node(&self, node: &NodeInfo, change: &NodeChange) -> kube::Result<()> {
        let api: Api<Node> = Api::all(self.client.clone());
        let mut current = match node.resource_version {
            Some(_) => node.clone(),
            None => NodeInfo::from_k8s(&api.get(&node.name).await?),
        };
        for attempt in 1..=NODE_PATCH_ATTEMPTS {
            let Some(ops) = change.json_patch(&current) else {
                return Ok(());
            };
            let patch: json_patch::Patch =
                serde_json::from_value(ops).map_err(kube::Error::SerdeError)?;
            match api
                .patch(&node.name, &patch_params(), &Patch::Json::<()>(patch))
                .await
            {
                Err(e)
                    if (is_status(&e, 409) || is_status(&e, 422))
                        && attempt < NODE_PATCH_ATTEMPTS =>
                {
                    tracing::debug!(node = %node.name, attempt, "node changed meanwhile; reading it again");
                    current = NodeInfo::from_k8s(&api.get(&node.name).await?);
                }
                other => return other.map(drop),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Creates a Node object (the simulated cloud registers its nodes this
    /// way); one of that name existing already is fine.
    ///
    /// # Errors
    /// Any API error other than AlreadyExists.
    pub async fn create_node(&self, node: &Node) -> kube::Result<()> {
        let api: Api<Node> = Api::all(self.client.clone());
        ignore_status(api.create(&post_params(), node).await.map(drop), 409)
    }

    /// Patches a node's status (the simulated cloud marks its nodes Ready
    /// and publishes their GPUs this way).
    ///
    /// # Errors
    /// Any API error.
    pub async fn patch_node_status(
        &self,
        name: &str,
        status: &serde_json::Value,
    ) -> kube::Result<()> {
        self.merge_status::<Node>(name, status).await
    }

    /// Deletes the Node object. Gone already is fine.
    ///
    /// # Errors
    /// Any API error other than NotFound.
    pub async fn delete_node(&self, name: &str) -> kube::Result<()> {
        self.delete_if_present::<Node>(name).await
    }

    /// Evicts a pod through the Eviction API (policy/v1), so that PDBs and
    /// the pod's grace period apply.
    ///
    /// The body is a complete `policy/v1` `Eviction` (apiVersion, kind,
    /// name and namespace), POSTed to the pod's `eviction` subresource.
    ///
    /// # Errors
    /// Any API error other than 429 and 404, which are outcomes.
    pub async fn evict(&self, namespace: &str, name: &str) -> kube::Result<Eviction> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let body = eviction_body(namespace, name);
        let sent: kube::Result<serde_json::Value> = api
            .create_subresource("eviction", name, &post_params(), &body)
            .await;
        match sent {
            Ok(_) => Ok(Eviction::Evicted),
            Err(e) if is_status(&e, 429) => Ok(Eviction::Blocked),
            Err(e) if is_status(&e, 404) => Ok(Eviction::Gone),
            Err(e) => Err(e),
        }
    }

    /// Deletes a pod outright (no Eviction: PDBs do not apply), with its
    /// own grace period; gone already is fine. Only for a drain whose
    /// termination grace period has passed.
    ///
    /// # Errors
    /// Any API error other than NotFound.
    pub async fn delete_pod(&self, namespace: &str, name: &str) -> kube::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        ignore_status(
            api.delete(name, &DeleteParams::default()).await.map(drop),
            404,
        )
    }

    /// Sets one annotation on a pod (merge patch).
    ///
    /// # Errors
    /// Any API error.
    pub async fn annotate_pod(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
        value: &str,
    ) -> kube::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({ "metadata": { "annotations": { key: value } } });
        api.patch(name, &patch_params(), &Patch::Merge(patch))
            .await
            .map(drop)
    }

    /// Sets (`Some`) and removes (`None`) pod annotations in one merge
    /// patch, so that they change together.
    ///
    /// # Errors
    /// Any API error.
    pub async fn patch_pod_annotations(
        &self,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> kube::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = json!({ "metadata": { "annotations": annotations } });
        api.patch(name, &patch_params(), &Patch::Merge(patch))
            .await
            .map(drop)
    }

    /// Replaces a NodePool's status (merge patch on the status subresource).
    ///
    /// # Errors
    /// Any API error.
    pub async fn patch_node_pool_status(
        &self,
        name: &str,
        status: &NodePoolStatus,
    ) -> kube::Result<()> {
        self.merge_status::<NodePool>(name, status).await
    }

    /// Replaces a ProvisioningRequest's conditions (merge patch on the
    /// status subresource; the list is replaced whole, as a merge patch of a
    /// custom resource does).
    ///
    /// # Errors
    /// Any API error.
    pub async fn patch_provisioning_request_conditions(
        &self,
        namespace: &str,
        name: &str,
        conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    ) -> kube::Result<()> {
        let api: Api<crate::api::foreign::ProvisioningRequest> =
            Api::namespaced(self.client.clone(), namespace);
        api.patch_status(
            name,
            &patch_params(),
            &Patch::Merge(json!({ "status": { "conditions": conditions } })),
        )
        .await
        .map(drop)
    }

    /// Sets a CapacityBuffer's status (a merge patch of the status
    /// subresource): its conditions, `replicas` and `podTemplateRef`.
    ///
    /// # Errors
    /// Any API error.
    pub async fn patch_capacity_buffer_status(
        &self,
        namespace: &str,
        name: &str,
        conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
        replicas: u32,
        pod_template_ref: Option<crate::api::foreign::Reference>,
    ) -> kube::Result<()> {
        let api: Api<crate::api::foreign::CapacityBuffer> =
            Api::namespaced(self.client.clone(), namespace);
        let status = json!({
            "conditions": conditions,
            "replicas": replicas,
            "podTemplateRef": pod_template_ref,
        });
        api.patch_status(
            name,
            &patch_params(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map(drop)
    }

    /// Sets annotations on a CapacityBuffer (one merge patch of its
    /// metadata: idempotent, as the values are the whole truth).
    ///
    /// # Errors
    /// Any API error.
    pub async fn annotate_capacity_buffer(
        &self,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, String>,
    ) -> kube::Result<()> {
        let api: Api<crate::api::foreign::CapacityBuffer> =
            Api::namespaced(self.client.clone(), namespace);
        let patch = json!({ "metadata": { "annotations": annotations } });
        api.patch(name, &patch_params(), &Patch::Merge(patch))
            .await
            .map(drop)
    }

    /// Every NodePool (one list call, for the node class reconciler, which
    /// runs beside the loop's watches).
    ///
    /// # Errors
    /// Any API error.
    pub async fn list_node_pools(&self) -> kube::Result<Vec<NodePool>> {
        let api: Api<NodePool> = Api::all(self.client.clone());
        Ok(api.list(&Default::default()).await?.items)
    }

    /// Every EC2NodeClass (one list call; node classes are few and
    /// resolved on a timer, so they are not watched).
    ///
    /// # Errors
    /// Any API error.
    pub async fn list_node_classes(&self) -> kube::Result<Vec<EC2NodeClass>> {
        let api: Api<EC2NodeClass> = Api::all(self.client.clone());
        Ok(api.list(&Default::default()).await?.items)
    }

    /// Replaces an EC2NodeClass's status (merge patch on the status subresource).
    ///
    /// # Errors
    /// Any API error.
    pub async fn patch_node_class_status(
        &self,
        name: &str,
        status: &EC2NodeClassStatus,
    ) -> kube::Result<()> {
        self.merge_status::<EC2NodeClass>(name, status).await
    }

    /// A merge patch of `{"status": status}` on the status subresource of
    /// a cluster-scoped object.
    async fn merge_status<K: ClusterObject>(
        &self,
        name: &str,
        status: &impl serde::Serialize,
    ) -> kube::Result<()> {
        let api: Api<K> = Api::all(self.client.clone());
        api.patch_status(
            name,
            &patch_params(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .map(drop)
    }

    /// Deletes a cluster-scoped object; gone already is fine.
    async fn delete_if_present<K: ClusterObject>(&self, name: &str) -> kube::Result<()> {
        let api: Api<K> = Api::all(self.client.clone());
        ignore_status(
            api.delete(name, &DeleteParams::default()).await.map(drop),
            404,
        )
    }
}

/// A cluster-scoped object with a static type (NodeClaim, NodePool, Node):
/// what the generic writes above need.
trait ClusterObject:
    kube::Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> ClusterObject for K where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// The `policy/v1` Eviction of one pod.
fn eviction_body(namespace: &str, name: &str) -> EvictionBody {
    EvictionBody {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        delete_options: None,
    }
}

fn post_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_string()),
    }
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// The object's name, or a request error naming the kind.
fn object_name<'a>(meta: &'a ObjectMeta, kind: &str) -> kube::Result<&'a str> {
    meta.name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            kube::Error::BuildRequest(kube::core::request::Error::Validation(format!(
                "{kind} has no metadata.name"
            )))
        })
}

/// Whether the error is an API error with that HTTP status code.
pub fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// `Ok(())` when the result is that API status code (an outcome, not a
/// failure), the result otherwise.
fn ignore_status(result: kube::Result<()>, code: u16) -> kube::Result<()> {
    match result {
        Err(e) if is_status(&e, code) => Ok(()),
        other => other,
    }
}
