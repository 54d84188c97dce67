//! The EC2NodeClass CRD (`quartermaster.dev/v1alpha1`, cluster-scoped): how
//! the nodes of the NodePools that reference it are launched on EC2: images,
//! subnets, security groups, identity, disks, instance metadata, user data
//! and tags. Shaped like Karpenter's `EC2NodeClass` so that its users find
//! the fields they expect. The controller resolves the selector terms
//! (`cloud::aws::ec2::nodeclass`) and writes what it found to the status;
//! a pool whose node class is not `Ready` does not launch. Field meanings
//! are in `docs/crds.md`.

use super::common::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The API group and kind a NodePool's `nodeClassRef` names.
pub const NODE_CLASS_GROUP: &str = "quartermaster.dev";
/// Kind of [`EC2NodeClass`].
pub const NODE_CLASS_KIND: &str = "EC2NodeClass";
/// The node class of a NodePool without `nodeClassRef` (the chart creates it).
pub const DEFAULT_NODE_CLASS: &str = "default";
/// Pattern of an AMI alias: `al2023@latest` or `al2023@vYYYYMMDD`.
pub const AMI_ALIAS_PATTERN: &str = r"^al2023@(latest|v[0-9]{8})$";
/// Pattern of an AMI ID.
pub const AMI_ID_PATTERN: &str = r"^ami-[0-9a-f]{8,17}$";
/// Pattern of a subnet ID.
pub const SUBNET_ID_PATTERN: &str = r"^subnet-[0-9a-f]{8,17}$";
/// Pattern of a security group ID.
pub const SECURITY_GROUP_ID_PATTERN: &str = r"^sg-[0-9a-f]{8,17}$";

/// Condition types of an EC2NodeClass.
pub mod conditions {
    /// Everything below resolved: pools that use the class launch.
    pub const READY: &str = "Ready";
    /// Every AMI selector term found at least one image.
    pub const AMIS_READY: &str = "AMIsReady";
    /// The subnet selector terms found at least one subnet.
    pub const SUBNETS_READY: &str = "SubnetsReady";
    /// The security group selector terms found at least one group.
    pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
    /// The instance profile (or the role's) exists.
    pub const INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
    /// Every `capacityReservationSelectorTerms` term found an active or
    /// scheduled reservation at the last discovery (only on a class with
    /// terms, once it was asked about). Advisory: `False` does not make the
    /// class un-`Ready`; its pools launch spot and on-demand as before.
    pub const CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";
    /// The security groups allow all traffic to and from themselves, as
    /// Elastic Fabric Adapter needs (only on a class a pool with
    /// `template.spec.efa` uses). Advisory, like the one above.
    pub const SECURITY_GROUPS_ALLOW_EFA: &str = "SecurityGroupsAllowEFA";
}

/// How to launch the EC2 instances of the NodePools that reference it.
// kube's `printcolumn(..)` repeats `type_ = ...`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[kube(
    group = "quartermaster.dev",
    version = "v1alpha1",
    kind = "EC2NodeClass",
    plural = "ec2nodeclasses",
    shortname = "qec2nc",
    category = "quartermaster",
    status = "EC2NodeClassStatus",
    derive = "PartialEq",
    doc = "An EC2NodeClass: the images, subnets, security groups, instance profile, disks, instance metadata options, user data and tags of the EC2 instances of the NodePools that reference it.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Role",
        type_ = "string",
        priority = 1,
        json_path = ".spec.role"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        priority = 1,
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    )
)]
#[x_kube(
    validation = Rule::new("has(self.role) != has(self.instanceProfile)")
        .message("set exactly one of role and instanceProfile"),
    validation = Rule::new("!self.amiSelectorTerms.exists(t, has(t.alias)) || size(self.amiSelectorTerms) == 1")
        .message("an amiSelectorTerms alias must be the only term")
)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassSpec {
    /// Which images nodes boot: an `alias` (`al2023@latest` or
    /// `al2023@vYYYYMMDD`: the EKS-optimized Amazon Linux 2023 images, one
    /// per architecture and accelerator, from SSM public parameters), or
    /// terms by `id`, `name`/`owner` or `tags` (ORed; the newest matching
    /// image per architecture is used). Default: `al2023@latest`.
    #[serde(default = "default_ami_terms")]
    #[schemars(length(min = 1, max = 30))]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// Which subnets nodes launch in (terms ORed; within a term every tag
    /// must match, `*` matches any value). Per zone the subnet with the
    /// most free addresses is used.
    #[schemars(length(min = 1, max = 30))]
    pub subnet_selector_terms: Vec<SelectorTerm>,
    /// Which security groups nodes get (terms ORed, as subnets).
    #[schemars(length(min = 1, max = 30))]
    pub security_group_selector_terms: Vec<SelectorTerm>,
    /// IAM role of the nodes: its instance profile (the first IAM lists
    /// for it) is used. Set this or `instanceProfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub role: Option<String>,
    /// IAM instance profile name of the nodes. Set this or `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub instance_profile: Option<String>,
    /// EBS volumes of each node. Default: an encrypted gp3 root volume of
    /// 200 GiB on GPU and Neuron instances, 50 GiB on others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    #[x_kube(
        validation = Rule::new("self.filter(m, has(m.rootVolume) && m.rootVolume).size() <= 1")
            .message("at most one block device mapping may be the root volume")
    )]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// What to do with instance-store NVMe disks: `RAID0` puts them in one
    /// array used for the kubelet and container images. Unset: left alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// Instance metadata service options. Default: IMDSv2 required, hop
    /// limit 2 (pods reach it through one more hop), IPv6 endpoint off.
    #[serde(default)]
    pub metadata_options: MetadataOptions,
    /// User data merged with Quartermaster's: a nodeadm `NodeConfig`, a
    /// shell script or a MIME multi-part document; its parts run before
    /// Quartermaster's `NodeConfig` (which joins the node to the cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16384))]
    pub user_data: Option<String>,
    /// Extra tags on instances, volumes, network interfaces and launch
    /// templates. Keys Quartermaster or AWS set (`quartermaster.dev/...`,
    /// `kubernetes.io/cluster/...`, `Name`, `aws:...`) are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_EXTRA_TAGS))]
    #[x_kube(
        validation = Rule::new("self.all(k, !k.startsWith('quartermaster.dev/') && !k.startsWith('kubernetes.io/cluster/') && k != 'Name' && !k.lowerAscii().startsWith('aws:'))")
            .message("tags must not use keys Quartermaster or AWS set (quartermaster.dev/, kubernetes.io/cluster/, Name, aws:)")
    )]
    pub tags: BTreeMap<String, String>,
    /// The on-demand capacity reservations and Capacity Blocks for ML the
    /// class's nodes may launch into (capacity type `reserved`): a
    /// reservation is selected when any term matches it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 30))]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
}

/// Extra tags a node class may add: EC2 allows 50 per resource and the
/// provider sets up to ten of its own.
pub const MAX_EXTRA_TAGS: usize = 40;

fn default_ami_terms() -> Vec<AmiSelectorTerm> {
    vec![AmiSelectorTerm {
        alias: Some("al2023@latest".into()),
        ..AmiSelectorTerm::default()
    }]
}

/// One way to select images: an alias alone, or any of ID, name (with an
/// owner), tags.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[x_kube(
    validation = Rule::new("has(self.alias) || has(self.id) || has(self.name) || has(self.tags)")
        .message("an AMI selector term needs an alias, an id, a name or tags"),
    validation = Rule::new("!has(self.alias) || !(has(self.id) || has(self.name) || has(self.owner) || has(self.tags))")
        .message("an alias cannot be combined with id, name, owner or tags")
)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    /// `al2023@latest` or `al2023@vYYYYMMDD`: the EKS-optimized AL2023
    /// images for the cluster's Kubernetes version, one per architecture
    /// (x86_64, arm64) and accelerator (NVIDIA, Neuron, none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = AMI_ALIAS_PATTERN), length(max = 32))]
    pub alias: Option<String>,
    /// An AMI ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = AMI_ID_PATTERN))]
    pub id: Option<String>,
    /// An image name (`*` wildcards allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 128))]
    pub name: Option<String>,
    /// Owner of the named images: an account ID or `self`, `amazon`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub owner: Option<String>,
    /// Tags every selected image carries (`*`: any value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 20))]
    pub tags: BTreeMap<String, String>,
}

/// One way to select subnets or security groups: an ID or tags.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[x_kube(
    validation = Rule::new("has(self.id) != has(self.tags)")
        .message("a selector term needs either an id or tags, not both")
)]
#[serde(rename_all = "camelCase")]
pub struct SelectorTerm {
    /// A subnet (`subnet-...`) or security group (`sg-...`) ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub id: Option<String>,
    /// Tags every selected resource carries (`*`: any value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("minProperties" = 1, "maxProperties" = 20))]
    #[x_kube(
        validation = Rule::new("self.all(k, k != '')")
            .message("tag keys must not be empty")
    )]
    pub tags: BTreeMap<String, String>,
}

/// One way to select capacity reservations: by ID, or by tags (every tag
/// must match; `*` matches any value). Exactly one of the two.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[x_kube(
    validation = Rule::new("has(self.id) != has(self.tags)")
        .message("a capacity reservation selector term names either an id or tags")
)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    /// A capacity reservation ID, `cr-...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^cr-[0-9a-zA-Z]+$"))]
    pub id: Option<String>,
    /// Tags the reservation must carry (`*`: any value).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("minProperties" = 1, "maxProperties" = 20))]
    #[x_kube(
        validation = Rule::new("self.all(k, k != '')")
            .message("tag keys must not be empty")
    )]
    pub tags: BTreeMap<String, String>,
    /// USD per instance-hour the planner charges for the selected
    /// reservations' nodes. Default 0: the capacity is already paid for, so
    /// using it costs nothing more, and the planner uses it before spot and
    /// on-demand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub price_per_hour: Option<f64>,
}

/// One EBS volume of a node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// Device name, e.g. `/dev/xvda` (the root device of the AL2023 images).
    #[schemars(length(min = 1, max = 32))]
    pub device_name: String,
    /// Whether this is the root volume (its default size then no longer applies).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub root_volume: bool,
    /// The volume.
    pub ebs: BlockDevice,
}

/// An EBS volume.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    /// Size in GiB (8 to 16384).
    #[serde(rename = "volumeSizeGiB")]
    #[schemars(range(min = 1, max = 16384))]
    pub volume_size_gib: i32,
    /// EBS volume type. Default `gp3`.
    #[serde(default = "default_volume_type")]
    #[schemars(regex(pattern = r"^(gp2|gp3|io1|io2|st1|sc1|standard)$"))]
    pub volume_type: String,
    /// Provisioned IOPS (gp3, io1, io2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 256000))]
    pub iops: Option<i32>,
    /// Provisioned throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 125, max = 2000))]
    pub throughput: Option<i32>,
    /// Whether the volume is encrypted. Default `true`.
    #[serde(default = "yes")]
    pub encrypted: bool,
    /// KMS key of the encryption; the account's default EBS key when unset.
    #[serde(default, rename = "kmsKeyID", skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub kms_key_id: Option<String>,
    /// Whether the volume is deleted with the instance. Default `true`.
    #[serde(default = "yes")]
    pub delete_on_termination: bool,
    /// Snapshot the volume starts from.
    #[serde(
        default,
        rename = "snapshotID",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(regex(pattern = r"^snap-[0-9a-f]{8,17}$"))]
    pub snapshot_id: Option<String>,
}

fn default_volume_type() -> String {
    "gp3".into()
}

fn yes() -> bool {
    true
}

/// What to do with instance-store disks.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum InstanceStorePolicy {
    /// One RAID-0 array of every instance-store disk, used for the kubelet
    /// and container images (nodeadm's `localStorage` strategy).
    #[serde(rename = "RAID0")]
    Raid0,
}

/// Instance metadata service options.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// `enabled` or `disabled`. Default `enabled` (nodeadm needs it).
    #[serde(default = "enabled")]
    #[schemars(regex(pattern = r"^(enabled|disabled)$"))]
    pub http_endpoint: String,
    /// `enabled` or `disabled`: the IPv6 endpoint. Default `disabled`.
    #[serde(default = "disabled", rename = "httpProtocolIPv6")]
    #[schemars(regex(pattern = r"^(enabled|disabled)$"))]
    pub http_protocol_ipv6: String,
    /// Most network hops a metadata response travels. Default 2.
    #[serde(default = "two")]
    #[schemars(range(min = 1, max = 64))]
    pub http_put_response_hop_limit: i32,
    /// `required` (IMDSv2 only) or `optional`. Default `required`.
    #[serde(default = "required")]
    #[schemars(regex(pattern = r"^(required|optional)$"))]
    pub http_tokens: String,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        MetadataOptions {
            http_endpoint: enabled(),
            http_protocol_ipv6: disabled(),
            http_put_response_hop_limit: two(),
            http_tokens: required(),
        }
    }
}

fn enabled() -> String {
    "enabled".into()
}
fn disabled() -> String {
    "disabled".into()
}
fn two() -> i32 {
    2
}
fn required() -> String {
    "required".into()
}

/// A NodePool's reference to its node class (Karpenter's shape).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(
    validation = Rule::new("self.group == 'quartermaster.dev' && self.kind == 'EC2NodeClass'")
        .message("nodeClassRef must name a quartermaster.dev EC2NodeClass")
)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReference {
    /// API group: `quartermaster.dev`.
    pub group: String,
    /// Kind: `EC2NodeClass`.
    pub kind: String,
    /// Name of the EC2NodeClass.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

impl NodeClassReference {
    /// A reference to the EC2NodeClass `name`.
    pub fn to(name: &str) -> NodeClassReference {
        NodeClassReference {
            group: NODE_CLASS_GROUP.into(),
            kind: NODE_CLASS_KIND.into(),
            name: name.into(),
        }
    }
}

/// What the controller resolved from a node class.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    /// Conditions: `Ready`, `AMIsReady`, `SubnetsReady`,
    /// `SecurityGroupsReady`, `InstanceProfileReady`; advisory (not part of
    /// `Ready`): `CapacityReservationsReady` on a class with reservation
    /// selector terms, `SecurityGroupsAllowEFA` on a class a pool asking for
    /// EFA uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The image of each variant (architecture and accelerator) nodes boot.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<ResolvedAmi>,
    /// The subnets found, with their zones and free addresses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<ResolvedSubnet>,
    /// The security groups found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<ResolvedSecurityGroup>,
    /// The instance profile nodes get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
}

/// The image one variant of nodes boots.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedAmi {
    /// AMI ID.
    pub id: String,
    /// Image name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `x86_64` or `arm64`.
    pub architecture: String,
    /// `nvidia`, `neuron`, `standard`, or `any` (a custom image serves
    /// every accelerator of its architecture).
    pub accelerator: String,
}

/// A subnet nodes may launch in.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSubnet {
    /// Subnet ID.
    pub id: String,
    /// Zone name (`us-east-1a`).
    pub zone: String,
    /// Zone ID (`use1-az4`), the same in every account.
    #[serde(rename = "zoneID")]
    pub zone_id: String,
    /// Free IPv4 addresses when resolved.
    pub available_ip_address_count: i32,
}

/// A security group nodes get.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ResolvedSecurityGroup {
    /// Group ID.
    pub id: String,
    /// Group name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl EC2NodeClassStatus {
    /// Whether the class resolved completely (`Ready` is `True`).
    pub fn is_ready(&self) -> bool {
        super::common::is_condition_true(&self.conditions, conditions::READY)
    }
}

/// An AMI alias, parsed: the image family and which release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmiAlias {
    /// Image family; only `al2023` today.
    pub family: String,
    /// `None` for `latest`, else the release (`v20250101`).
    pub version: Option<String>,
}

impl AmiAlias {
    /// Parses `al2023@latest` or `al2023@vYYYYMMDD`.
    ///
    /// # Errors
    /// A message naming the alias and the accepted forms.
    pub fn parse(alias: &str) -> Result<AmiAlias, String> {
        let bad = || {
            format!("AMI alias {alias:?} is not al2023@latest or al2023@vYYYYMMDD (e.g. al2023@v20250715)")
        };
        let (family, version) = alias.split_once('@').ok_or_else(bad)?;
        if family != "al2023" {
            return Err(bad());
        }
        let version = match version {
            "latest" => None,
            v if v.len() == 9
                && v.starts_with('v')
                && v[1..].chars().all(|c| c.is_ascii_digit()) =>
            {
                Some(v.to_string())
            }
            _ => return Err(bad()),
        };
        Ok(AmiAlias {
            family: family.into(),
            version,
        })
    }
}

/// The boundary of a node class's user data when it is a MIME multi-part
/// document (its headers name `Content-Type: multipart/...;
/// boundary=...`), `None` for a plain `NodeConfig` or script.
pub fn user_data_mime_boundary(data: &str) -> Option<String> {
    data.lines()
        .take_while(|l| !l.trim().is_empty())
        .find_map(|l| {
            let l = l.trim();
            l.to_ascii_lowercase()
                .starts_with("content-type: multipart/")
                .then(|| l.split("boundary=").nth(1))
                .flatten()
                .map(|b| b.trim_matches('"').to_string())
        })
}

/// Problems with a node class that the API server's schema may not have
/// caught (a file given to `quartermaster validate`, or a class written
/// before a rule existed), as (field path, message); empty when fine.
pub fn node_class_problems(spec: &EC2NodeClassSpec) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut bad = |field: String, why: String| out.push((field, why));
    if spec.ami_selector_terms.is_empty() {
        bad(
            "amiSelectorTerms".into(),
            "must have at least one term".into(),
        );
    }
    let aliases = spec
        .ami_selector_terms
        .iter()
        .filter(|t| t.alias.is_some())
        .count();
    if aliases > 0 && spec.ami_selector_terms.len() > 1 {
        bad(
            "amiSelectorTerms".into(),
            "an alias must be the only term".into(),
        );
    }
    for (i, t) in spec.ami_selector_terms.iter().enumerate() {
        let path = format!("amiSelectorTerms[{i}]");
        match &t.alias {
            Some(a) => {
                if let Err(why) = AmiAlias::parse(a) {
                    bad(format!("{path}.alias"), why);
                }
                if t.id.is_some() || t.name.is_some() || t.owner.is_some() || !t.tags.is_empty() {
                    bad(
                        path,
                        "an alias cannot be combined with id, name, owner or tags".into(),
                    );
                }
            }
            None if t.id.is_none() && t.name.is_none() && t.tags.is_empty() => {
                bad(path, "needs an alias, an id, a name or tags".into())
            }
            None => {
                if let Some(id) = &t.id {
                    if !id.starts_with("ami-") || id.len() < 12 {
                        bad(format!("{path}.id"), format!("{id:?} is not an AMI ID"));
                    }
                }
            }
        }
    }
    for (field, terms, prefix) in [
        (
            "subnetSelectorTerms",
            &spec.subnet_selector_terms,
            "subnet-",
        ),
        (
            "securityGroupSelectorTerms",
            &spec.security_group_selector_terms,
            "sg-",
        ),
    ] {
        if terms.is_empty() {
            bad(field.into(), "must have at least one term".into());
        }
        for (i, t) in terms.iter().enumerate() {
            let path = format!("{field}[{i}]");
            match (&t.id, t.tags.is_empty()) {
                (Some(_), false) | (None, true) => {
                    bad(path, "needs either an id or tags, not both".into())
                }
                (Some(id), true) if !id.starts_with(prefix) => bad(
                    format!("{path}.id"),
                    format!("{id:?} does not start with {prefix}"),
                ),
                _ if t.tags.keys().any(|k| k.is_empty()) => {
                    bad(format!("{path}.tags"), "tag keys must not be empty".into())
                }
                _ => {}
            }
        }
    }
    for (i, t) in spec.capacity_reservation_selector_terms.iter().enumerate() {
        let path = format!("capacityReservationSelectorTerms[{i}]");
        match (&t.id, t.tags.is_empty()) {
            (Some(_), false) | (None, true) => {
                bad(path.clone(), "each term names either an id or tags".into())
            }
            (Some(id), true) if !id.starts_with("cr-") || id.len() <= 3 => bad(
                format!("{path}.id"),
                format!("{id:?} is not a capacity reservation ID (cr-...)"),
            ),
            _ => {}
        }
        if t.tags.keys().any(|k| k.is_empty()) {
            bad(format!("{path}.tags"), "tag keys must not be empty".into());
        }
        if t.price_per_hour
            .is_some_and(|p| !(p >= 0.0 && p.is_finite()))
        {
            bad(
                format!("{path}.pricePerHour"),
                "pricePerHour must be a number >= 0".into(),
            );
        }
    }
    match (&spec.role, &spec.instance_profile) {
        (Some(_), Some(_)) | (None, None) => bad(
            "role".into(),
            "set exactly one of role and instanceProfile".into(),
        ),
        (Some(r), None) if r.trim().is_empty() => bad("role".into(), "must not be empty".into()),
        (None, Some(p)) if p.trim().is_empty() => {
            bad("instanceProfile".into(), "must not be empty".into())
        }
        _ => {}
    }
    let roots = spec
        .block_device_mappings
        .iter()
        .filter(|m| m.root_volume)
        .count();
    if roots > 1 {
        bad(
            "blockDeviceMappings".into(),
            "at most one mapping may be the root volume".into(),
        );
    }
    for (i, m) in spec.block_device_mappings.iter().enumerate() {
        if !(1..=16384).contains(&m.ebs.volume_size_gib) {
            bad(
                format!("blockDeviceMappings[{i}].ebs.volumeSizeGiB"),
                format!("{} is not within 1..=16384", m.ebs.volume_size_gib),
            );
        }
    }
    if spec.metadata_options.http_endpoint == "disabled" {
        bad(
            "metadataOptions.httpEndpoint".into(),
            "nodeadm needs the instance metadata service: leave it enabled".into(),
        );
    }
    if spec.tags.len() > MAX_EXTRA_TAGS {
        bad("tags".into(), format!("at most {MAX_EXTRA_TAGS} tags"));
    }
    for (k, v) in &spec.tags {
        let reserved = k.starts_with(crate::labels::GROUP)
            || k.to_ascii_lowercase().starts_with("aws:")
            || k == "Name"
            || k.starts_with("kubernetes.io/cluster/");
        if reserved {
            bad(
                "tags".into(),
                format!("{k:?} is set by quartermaster or AWS"),
            );
        } else if k.is_empty() || k.len() > 128 || v.len() > 256 {
            bad(
                "tags".into(),
                format!("{k:?}: keys are 1-128 characters, values at most 256"),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(yaml: &str) -> EC2NodeClass {
        serde_norway::from_str(yaml).unwrap()
    }

    const MINIMAL: &str = r#"
apiVersion: quartermaster.dev/v1alpha1
kind: EC2NodeClass
metadata: { name: default }
spec:
  subnetSelectorTerms: [{ tags: { karpenter.sh/discovery: prod } }]
  securityGroupSelectorTerms: [{ tags: { karpenter.sh/discovery: prod } }]
  role: prod-nodes
"#;

    #[test]
    fn a_minimal_class_gets_the_latest_al2023_images_and_imdsv2() {
        let c = class(MINIMAL);
        assert_eq!(
            c.spec.ami_selector_terms[0].alias.as_deref(),
            Some("al2023@latest")
        );
        assert_eq!(c.spec.metadata_options.http_tokens, "required");
        assert_eq!(c.spec.metadata_options.http_put_response_hop_limit, 2);
        assert!(c.spec.block_device_mappings.is_empty());
        assert!(node_class_problems(&c.spec).is_empty());
    }

    #[test]
    fn aliases_parse_latest_and_dated_releases_only() {
        assert_eq!(AmiAlias::parse("al2023@latest").unwrap().version, None);
        assert_eq!(
            AmiAlias::parse("al2023@v20250715")
                .unwrap()
                .version
                .as_deref(),
            Some("v20250715")
        );
        for bad in ["al2023", "al2@latest", "al2023@2025", "al2023@v2025071", ""] {
            let e = AmiAlias::parse(bad).unwrap_err();
            assert!(e.contains("al2023@latest"), "{bad}: {e}");
        }
    }

    #[test]
    fn problems_name_the_field_of_each_mistake() {
        let mut c = class(MINIMAL).spec;
        c.ami_selector_terms[0].alias = Some("al2023@newest".into());
        c.subnet_selector_terms.push(SelectorTerm::default());
        c.security_group_selector_terms[0].id = Some("subnet-0123456789".into());
        c.security_group_selector_terms[0].tags.clear();
        c.instance_profile = Some("also".into());
        c.tags.insert("quartermaster.dev/x".into(), "y".into());
        let fields: Vec<String> = node_class_problems(&c).into_iter().map(|p| p.0).collect();
        assert_eq!(
            fields,
            [
                "amiSelectorTerms[0].alias",
                "subnetSelectorTerms[1]",
                "securityGroupSelectorTerms[0].id",
                "role",
                "tags"
            ]
        );
    }

    #[test]
    fn capacity_reservation_terms_name_an_id_or_tags_and_bad_ones_are_reported() {
        let with = |terms: &str| {
            class(&format!(
                "{MINIMAL}  capacityReservationSelectorTerms: {terms}\n"
            ))
            .spec
        };
        let c = with("[{ id: cr-0123456789abcdef0 }, { tags: { team: ml }, pricePerHour: 12.5 }]");
        assert!(node_class_problems(&c).is_empty());
        let terms = &c.capacity_reservation_selector_terms;
        assert_eq!(terms[0].id.as_deref(), Some("cr-0123456789abcdef0"));
        assert_eq!(terms[1].price_per_hour, Some(12.5));
        for (bad, field, why) in [
            (
                "[{}]",
                "capacityReservationSelectorTerms[0]",
                "either an id or tags",
            ),
            (
                "[{ id: cr-1, tags: { a: b } }]",
                "capacityReservationSelectorTerms[0]",
                "either an id or tags",
            ),
            (
                "[{ id: cr-1 }, { id: i-0123 }]",
                "capacityReservationSelectorTerms[1].id",
                "not a capacity reservation ID",
            ),
            (
                "[{ id: cr-1, pricePerHour: -1 }]",
                "capacityReservationSelectorTerms[0].pricePerHour",
                "pricePerHour",
            ),
            (
                "[{ tags: { \"\": x } }]",
                "capacityReservationSelectorTerms[0].tags",
                "tag keys",
            ),
        ] {
            let problems = node_class_problems(&with(bad));
            assert!(
                problems.iter().any(|(f, w)| f == field && w.contains(why)),
                "{bad}: {problems:?}"
            );
        }
    }
}
