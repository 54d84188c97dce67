//! The cluster's own facts from EKS: `eks:DescribeCluster` gives the API
//! server endpoint, the CA bundle, the service CIDR and the Kubernetes
//! version that nodes need (nodeadm) and that the EC2 settings
//! ([`super::ec2::Settings`]) may leave out, as Karpenter discovers them.
//! Called once, at startup; the controller keeps the answer for its life
//! (a cluster's endpoint and CA do not change under a running controller).

use super::ec2::settings::{self, Settings, SettingsFile};
use aws_sdk_eks::error::DisplayErrorContext;

/// Why the cluster could not be described.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `DescribeCluster` failed (no such cluster, no permission, network).
    /// Retryable only by starting again; the message says what to allow or
    /// set instead.
    #[error(
        "eks:DescribeCluster of cluster {cluster} failed: {message} (allow eks:DescribeCluster \
         on the cluster, see deploy/aws/iam-policy.json, or set clusterEndpoint, \
         certificateAuthority and serviceCidr in --aws-config)"
    )]
    Describe {
        /// The cluster's name.
        cluster: String,
        /// The SDK's error, with its context.
        message: String,
    },
    /// The settings are incomplete or wrong even with what EKS said.
    #[error(transparent)]
    Settings(#[from] settings::Error),
}

/// The module's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What EKS says about a cluster; a field EKS left out (a cluster still
/// being created has no endpoint yet) is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cluster {
    /// API server endpoint (`https://...`).
    pub endpoint: Option<String>,
    /// CA bundle, base64 as EKS returns it.
    pub certificate_authority: Option<String>,
    /// Service CIDR: the IPv4 one, or the IPv6 one of an IPv6 cluster.
    pub service_cidr: Option<String>,
    /// Kubernetes minor version (`1.33`).
    pub version: Option<String>,
}

/// Describes cluster `name`.
///
/// # Errors
/// [`Error::Describe`] when the call fails.
pub async fn describe_cluster(client: &aws_sdk_eks::Client, name: &str) -> Result<Cluster> {
    let out = client
        .describe_cluster()
        .name(name)
        .send()
        .await
        .map_err(|e| Error::Describe {
            cluster: name.to_string(),
            message: DisplayErrorContext(&e).to_string(),
        })?;
    let Some(c) = out.cluster else {
        return Ok(Cluster::default());
    };
    let network = c.kubernetes_network_config.as_ref();
    Ok(Cluster {
        endpoint: c.endpoint,
        certificate_authority: c.certificate_authority.and_then(|ca| ca.data),
        service_cidr: network
            .and_then(|n| n.service_ipv4_cidr.clone())
            .or_else(|| network.and_then(|n| n.service_ipv6_cidr.clone())),
        version: c.version,
    })
}

/// The complete EC2 settings: `file`'s fields, and what it leaves out from
/// one `DescribeCluster` of its cluster. A file that sets everything makes
/// no call. When the call fails but the file has all that nodes need (it
/// leaves out only the Kubernetes version), the settings are used without
/// the version (AMI aliases then wait for it, as before) and the failure is
/// logged.
///
/// # Errors
/// [`Error::Describe`] when the call fails and nodes could not join
/// without it; [`Error::Settings`] when a field is wrong or still missing.
pub async fn complete_settings(
    client: &aws_sdk_eks::Client,
    file: &SettingsFile,
) -> Result<Settings> {
    if !file.needs_discovery() {
        return Ok(file.complete(None)?);
    }
    match describe_cluster(client, &file.cluster_name).await {
        Ok(cluster) => {
            tracing::info!(
                cluster = %file.cluster_name,
                endpoint = ?cluster.endpoint,
                service_cidr = ?cluster.service_cidr,
                version = ?cluster.version,
                "discovered the cluster's settings from EKS"
            );
            Ok(file.complete(Some(&cluster))?)
        }
        Err(e) => match file.complete(None) {
            Ok(settings) => {
                tracing::warn!(error = %e, "the Kubernetes version is unknown: AMI aliases cannot be resolved until kubernetesVersion is set");
                Ok(settings)
            }
            Err(_) => Err(e),
        },
    }
}
