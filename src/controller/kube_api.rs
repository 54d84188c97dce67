//! Every write the controller makes to the Kubernetes API, one method each,
//! so that the requests (method, path, body) are pinned down in one place and
//! tested against a mock API server. Reads go through reflectors
//! (`snapshot`), never through here.
//!
//! Conventions: creating what exists and deleting what is gone are not
//! errors (the controller converges after a restart); patches are JSON merge
//! patches unless a method says otherwise.

use crate::api::{NodeClaim, NodeClaimStatus, NodePoolStatus};
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Client;
use std::collections::BTreeMap;

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
    /// # Errors
    /// Any API error other than AlreadyExists.
    pub async fn create_node_claim(&self, claim: &NodeClaim) -> kube::Result<NodeClaim> {
        let _ = (&self.client, claim);
        todo!()
    }

    /// Replaces the NodeClaim's status (merge patch on the status subresource).
    ///
    /// # Errors
    /// Any API error.
    pub async fn patch_node_claim_status(
        &self,
        name: &str,
        status: &NodeClaimStatus,
    ) -> kube::Result<()> {
        let _ = (name, status);
        todo!()
    }

    /// Requests deletion of the NodeClaim (our finalizer holds it until the
    /// instance is gone). Gone already is fine.
    ///
    /// # Errors
    /// Any API error other than NotFound.
    pub async fn delete_node_claim(&self, name: &str) -> kube::Result<()> {
        let _ = name;
        todo!()
    }

    /// Removes our finalizer from the NodeClaim, keeping any others. Gone
    /// already is fine.
    ///
    /// # Errors
    /// Any API error other than NotFound.
    pub async fn remove_finalizer(&self, claim: &NodeClaim) -> kube::Result<()> {
        let _ = claim;
        todo!()
    }

    /// Sets labels (merged into the node's) and the full taint list, and the
    /// cordon when `unschedulable` is given.
    ///
    /// # Errors
    /// Any API error.
    pub async fn patch_node(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        taints: &[Taint],
        unschedulable: Option<bool>,
    ) -> kube::Result<()> {
        let _ = (name, labels, taints, unschedulable);
        todo!()
    }

    /// Creates a Node object (the simulated cloud registers its nodes this
    /// way); one of that name existing already is fine.
    ///
    /// # Errors
    /// Any API error other than AlreadyExists.
    pub async fn create_node(&self, node: &Node) -> kube::Result<()> {
        let _ = node;
        todo!()
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
        let _ = (name, status);
        todo!()
    }

    /// Deletes the Node object. Gone already is fine.
    ///
    /// # Errors
    /// Any API error other than NotFound.
    pub async fn delete_node(&self, name: &str) -> kube::Result<()> {
        let _ = name;
        todo!()
    }

    /// Evicts a pod through the Eviction API (policy/v1), so that PDBs and
    /// the pod's grace period apply.
    ///
    /// # Errors
    /// Any API error other than 429 and 404, which are outcomes.
    pub async fn evict(&self, namespace: &str, name: &str) -> kube::Result<Eviction> {
        let _ = (namespace, name);
        todo!()
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
        let _ = (namespace, name, key, value);
        todo!()
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
        let _ = (name, status);
        todo!()
    }
}
