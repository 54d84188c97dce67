//! What the EC2 provider needs to know about the cluster ([`Settings`], the
//! YAML file given with `--aws-config`: cluster-level facts only) and how to
//! launch the nodes of a NodePool ([`NodeClass`]: an `EC2NodeClass` as the
//! controller resolved it). Nothing here talks to AWS.

use crate::api::labels as l;
use crate::api::nodeclass::{
    BlockDevice, BlockDeviceMapping, InstanceStorePolicy, MetadataOptions, ResolvedAmi,
    SelectorTerm,
};
use crate::cloud::aws::eks::Cluster;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Root volume of accelerated instances (GPU, Neuron) when the node class
/// does not say: NVIDIA images and ML container images are large.
pub const DEFAULT_ACCELERATED_ROOT_GIB: i32 = 200;
/// Root volume of other instances when the node class does not say.
pub const DEFAULT_ROOT_GIB: i32 = 50;
/// Root device of the EKS AL2023 AMIs.
pub const ROOT_DEVICE: &str = "/dev/xvda";
pub use crate::api::nodeclass::MAX_EXTRA_TAGS;

/// The provider's cluster-level settings, complete: the `--aws-config`
/// file ([`SettingsFile`]) with what it leaves out discovered from EKS
/// ([`crate::cloud::aws::eks`]). As YAML:
///
/// ```yaml
/// clusterName: prod
/// kubernetesVersion: "1.33"
/// clusterEndpoint: https://ABCD.gr7.us-east-1.eks.amazonaws.com
/// certificateAuthority: LS0tLS1CRUdJTi...
/// serviceCidr: 10.100.0.0/16
/// ```
///
/// How nodes are launched (images, subnets, security groups, instance
/// profile, disks, tags) is not here: it is each NodePool's
/// `EC2NodeClass`, the one source of truth (`docs/aws.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    /// EKS cluster name: the value of the ownership tag, and nodeadm's
    /// `cluster.name`.
    pub cluster_name: String,
    /// Kubernetes minor version (`1.33`): which EKS images an AMI alias
    /// resolves to.
    #[serde(default)]
    pub kubernetes_version: Option<String>,
    /// API server endpoint (`https://...`), for nodeadm.
    pub cluster_endpoint: String,
    /// Cluster CA bundle, base64 as EKS returns it, for nodeadm.
    pub certificate_authority: String,
    /// Service CIDR (`10.100.0.0/16`), for nodeadm (cluster DNS address).
    pub service_cidr: String,
}

/// The `--aws-config` file as written: the cluster's name and whichever of
/// its Kubernetes version, endpoint, CA and service CIDR the operator set.
/// [`SettingsFile::complete`] fills in the rest from EKS; a file that sets
/// them all needs no EKS call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SettingsFile {
    /// EKS cluster name.
    pub cluster_name: String,
    /// Kubernetes minor version (`1.33`).
    #[serde(default)]
    pub kubernetes_version: Option<String>,
    /// API server endpoint (`https://...`).
    #[serde(default)]
    pub cluster_endpoint: Option<String>,
    /// Cluster CA bundle, base64.
    #[serde(default)]
    pub certificate_authority: Option<String>,
    /// Service CIDR.
    #[serde(default)]
    pub service_cidr: Option<String>,
}

/// How to launch the nodes of a NodePool: its `EC2NodeClass` with the
/// images and instance profile the controller resolved (subnets and
/// security groups are looked up at each launch, for fresh free-address
/// counts).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClass {
    /// Name of the EC2NodeClass.
    pub name: String,
    /// The image of each variant ([`NodeClass::image_for`]).
    pub images: Vec<ResolvedAmi>,
    /// Subnets to launch in (terms ORed; per zone ID the subnet with the
    /// most free addresses is used).
    pub subnet_selector_terms: Vec<SelectorTerm>,
    /// Security groups to attach (terms ORed).
    pub security_group_selector_terms: Vec<SelectorTerm>,
    /// IAM instance profile name of the nodes.
    pub instance_profile: String,
    /// EBS volumes; empty: one root volume sized by [`NodeClass::root_volume_gib_for`].
    #[serde(default)]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// What to do with instance-store disks.
    #[serde(default)]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// Instance metadata options.
    #[serde(default)]
    pub metadata_options: MetadataOptions,
    /// User data merged before ours.
    #[serde(default)]
    pub user_data: Option<String>,
    /// Extra tags on instances, volumes and launch templates.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// The on-demand capacity reservations and Capacity Blocks for ML the
    /// class's nodes may launch into (capacity type `reserved`): a
    /// reservation is selected when any term matches it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
}

pub use crate::api::nodeclass::CapacityReservationSelectorTerm;

/// Why settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read EC2 settings {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Parsed, but wrong; every problem, one per line, with its field path.
    #[error("invalid EC2 settings:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
}

impl SettingsFile {
    /// Reads and checks a settings file.
    ///
    /// # Errors
    /// [`Error::Read`] or [`Error::Invalid`].
    pub fn load(path: &Path) -> Result<SettingsFile, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        SettingsFile::from_yaml(&text)
    }

    /// Parses a settings file and checks the fields it sets.
    ///
    /// # Errors
    /// [`Error::Invalid`]: every problem, with its line (and a pointer to
    /// EC2NodeClass for the node-class fields older files had).
    pub fn from_yaml(text: &str) -> Result<SettingsFile, Error> {
        let schema = crate::api::read::schema_of::<SettingsFile>();
        // Through the one strict reader: every unknown field and wrong type
        // with its line, then the fields it sets (what it leaves out is for
        // discovery).
        crate::api::read::single(
            "EC2 settings",
            text,
            &schema,
            |file: &SettingsFile| match file.complete(None) {
                Err(Error::Invalid(problems)) => problems
                    .into_iter()
                    .filter(|p| !p.ends_with(NOT_SET))
                    .collect(),
                _ => Vec::new(),
            },
        )
        .map_err(|e| {
            let old = e
                .problems
                .iter()
                .any(|p| p.path == "defaultNodeClass" || p.path == "nodeClasses");
            let mut lines: Vec<String> = e.problems.iter().map(ToString::to_string).collect();
            if old {
                lines.push(
                    "node classes are EC2NodeClass objects now (the chart creates `default` \
                     from its values); keep only the cluster settings here (docs/aws.md)"
                        .into(),
                );
            }
            Error::Invalid(lines)
        })
    }

    /// Whether the file leaves out anything EKS can tell: the endpoint,
    /// the CA, the service CIDR (nodes cannot join without them) or the
    /// Kubernetes version (AMI aliases need it).
    pub fn needs_discovery(&self) -> bool {
        self.cluster_endpoint.is_none()
            || self.certificate_authority.is_none()
            || self.service_cidr.is_none()
            || self.kubernetes_version.is_none()
    }

    /// The complete settings: each field from the file, else from
    /// `discovered` (EKS); the Kubernetes version may stay unknown.
    ///
    /// # Errors
    /// [`Error::Invalid`] listing every field that is wrong, or missing
    /// from both.
    pub fn complete(&self, discovered: Option<&Cluster>) -> Result<Settings, Error> {
        let pick = |set: &Option<String>, found: fn(&Cluster) -> &Option<String>| {
            set.clone()
                .or_else(|| discovered.and_then(|c| found(c).clone()))
        };
        let mut missing = Vec::new();
        let mut need = |field: &str, value: Option<String>| {
            value.unwrap_or_else(|| {
                missing.push(format!("{field}: {NOT_SET}"));
                String::new()
            })
        };
        let settings = Settings {
            cluster_name: self.cluster_name.clone(),
            kubernetes_version: pick(&self.kubernetes_version, |c| &c.version),
            cluster_endpoint: need(
                "clusterEndpoint",
                pick(&self.cluster_endpoint, |c| &c.endpoint),
            ),
            certificate_authority: need(
                "certificateAuthority",
                pick(&self.certificate_authority, |c| &c.certificate_authority),
            ),
            service_cidr: need("serviceCidr", pick(&self.service_cidr, |c| &c.service_cidr)),
        };
        match settings.validate() {
            Ok(()) if missing.is_empty() => Ok(settings),
            Ok(()) => Err(Error::Invalid(missing)),
            Err(Error::Invalid(problems)) => {
                // A field missing from both is reported once, as missing.
                let wrong = problems.into_iter().filter(|p| {
                    let field = p.split(':').next().unwrap_or_default();
                    !missing.iter().any(|m| m.starts_with(&format!("{field}:")))
                });
                let mut all: Vec<String> = wrong.collect();
                all.extend(missing);
                Err(Error::Invalid(all))
            }
            Err(e) => Err(e),
        }
    }
}

/// How a field neither the file nor EKS gave is reported.
const NOT_SET: &str =
    "not set, and not discovered from EKS (set it, or let the controller call eks:DescribeCluster)";

impl Settings {
    /// Reads and validates complete settings from a YAML file (no EKS
    /// discovery: every field must be set).
    ///
    /// # Errors
    /// [`Error::Read`] or [`Error::Invalid`].
    pub fn load(path: &Path) -> Result<Settings, Error> {
        SettingsFile::load(path)?.complete(None)
    }

    /// Parses and validates complete settings from YAML text (no EKS
    /// discovery: every field must be set).
    ///
    /// # Errors
    /// [`Error::Invalid`].
    pub fn from_yaml(text: &str) -> Result<Settings, Error> {
        SettingsFile::from_yaml(text)?.complete(None)
    }

    /// Checks every field; all problems are reported at once.
    ///
    /// # Errors
    /// [`Error::Invalid`] listing each problem with its field path.
    pub fn validate(&self) -> Result<(), Error> {
        let mut problems = Vec::new();
        let mut bad = |field: &str, why: String| problems.push(format!("{field}: {why}"));
        let name = &self.cluster_name;
        if name.is_empty()
            || name.len() > 100
            || !name.starts_with(|c: char| c.is_ascii_alphanumeric())
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            bad(
                "clusterName",
                format!("{name:?} is not an EKS cluster name (1-100 letters, digits, - and _)"),
            );
        }
        if let Some(v) = &self.kubernetes_version {
            if !is_minor_version(v) {
                bad("kubernetesVersion", format!("{v:?} is not like \"1.33\""));
            }
        }
        if !self.cluster_endpoint.starts_with("https://") || self.cluster_endpoint.len() <= 8 {
            bad(
                "clusterEndpoint",
                format!("{:?} is not an https:// URL", self.cluster_endpoint),
            );
        }
        match aws_smithy_types::base64::decode(self.certificate_authority.trim()) {
            Ok(der) if !der.is_empty() => {}
            _ => bad(
                "certificateAuthority",
                "must be the cluster's CA bundle in base64".into(),
            ),
        }
        if let Err(why) = check_cidr(&self.service_cidr) {
            bad("serviceCidr", why);
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(problems))
        }
    }
}

impl NodeClass {
    /// The AMI ID for `variant`: the image resolved for exactly that
    /// variant, else a custom image of its architecture (which serves
    /// every accelerator); `None` when the class has neither, and then the
    /// planner must not pick such an instance type for the pool.
    pub fn image_for(&self, variant: ImageVariant) -> Option<&str> {
        self.image_of(variant)
    }

    /// The hash of what the class launches nodes with, for drift
    /// (`core::drift`): every field but its name, its images (compared on
    /// their own, per node) and its capacity reservation selector terms (a
    /// new reservation is no reason to replace running nodes).
    pub fn drift_hash(&self) -> String {
        crate::core::drift::hash_of(&NodeClass {
            name: String::new(),
            images: Vec::new(),
            capacity_reservation_selector_terms: Vec::new(),
            ..self.clone()
        })
    }

    fn image_of(&self, variant: ImageVariant) -> Option<&str> {
        let arch = variant.arch.as_str();
        let exact = self
            .images
            .iter()
            .find(|i| i.architecture == arch && i.accelerator == variant.driver.as_str());
        exact
            .or_else(|| {
                self.images
                    .iter()
                    .find(|i| i.architecture == arch && i.accelerator == ANY_ACCELERATOR)
            })
            .map(|i| i.id.as_str())
    }

    /// Node-label requirements that keep the planner to instance types this
    /// class has an image for: `kubernetes.io/arch In [...]` unless both
    /// architectures have one, and `quartermaster.dev/gpu-name` (or
    /// `neuron-name`) `DoesNotExist` when no image carries the NVIDIA (or
    /// Neuron) driver. Pure data the driver adds to the pool's requirements,
    /// so the core stays free of AWS. (An alias has every variant; a custom
    /// image serves every accelerator of its architecture.)
    pub fn image_requirements(&self) -> Vec<crate::api::Requirement> {
        use crate::api::{Operator, Requirement};
        let has = |accelerator: &str| {
            self.images
                .iter()
                .any(|i| i.accelerator == accelerator || i.accelerator == ANY_ACCELERATOR)
        };
        let mut archs: Vec<&str> = self
            .images
            .iter()
            .map(|i| match i.architecture.as_str() {
                "arm64" => "arm64",
                _ => "amd64",
            })
            .collect();
        archs.sort();
        archs.dedup();
        let mut out = Vec::new();
        if archs.len() < 2 {
            out.push(Requirement::new(l::ARCH, Operator::In, &archs));
        }
        if !has(ImageDriver::Nvidia.as_str()) {
            out.push(Requirement::new(l::GPU_NAME, Operator::DoesNotExist, &[]));
        }
        if !has(ImageDriver::Neuron.as_str()) {
            out.push(Requirement::new(
                l::NEURON_NAME,
                Operator::DoesNotExist,
                &[],
            ));
        }
        out
    }

    /// Root volume size for `instance_type` when the class has no block
    /// device mappings: the larger default for GPU and Neuron families.
    pub fn root_volume_gib_for(&self, instance_type: &str) -> i32 {
        if is_accelerated(instance_type) {
            DEFAULT_ACCELERATED_ROOT_GIB
        } else {
            DEFAULT_ROOT_GIB
        }
    }

    /// The volumes of an `instance_type` node: the class's mappings, or an
    /// encrypted gp3 root volume of [`NodeClass::root_volume_gib_for`].
    pub fn block_devices_for(&self, instance_type: &str) -> Vec<BlockDeviceMapping> {
        if !self.block_device_mappings.is_empty() {
            return self.block_device_mappings.clone();
        }
        vec![BlockDeviceMapping {
            device_name: ROOT_DEVICE.into(),
            root_volume: true,
            ebs: BlockDevice {
                volume_size_gib: self.root_volume_gib_for(instance_type),
                volume_type: "gp3".into(),
                iops: None,
                throughput: None,
                encrypted: true,
                kms_key_id: None,
                delete_on_termination: true,
                snapshot_id: None,
            },
        }]
    }
}

/// The accelerator of a custom image (selected by ID, name or tags): it
/// serves every accelerator of its architecture.
pub const ANY_ACCELERATOR: &str = "any";

/// CPU architecture of an EKS image, as its SSM parameter names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ImageArch {
    /// Intel and AMD.
    X86_64,
    /// Graviton.
    Arm64,
}

impl ImageArch {
    /// The name in the image's SSM parameter path.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageArch::X86_64 => "x86_64",
            ImageArch::Arm64 => "arm64",
        }
    }
}

/// The accelerator driver an EKS AL2023 image carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ImageDriver {
    /// NVIDIA driver and container toolkit.
    Nvidia,
    /// AWS Neuron driver (Inferentia, Trainium).
    Neuron,
    /// None (CPU nodes).
    Standard,
}

impl ImageDriver {
    /// The name in the image's SSM parameter path.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageDriver::Nvidia => "nvidia",
            ImageDriver::Neuron => "neuron",
            ImageDriver::Standard => "standard",
        }
    }
}

/// Which EKS AL2023 image a node needs: a Graviton node cannot boot an
/// x86_64 image, and a GPU or Neuron node without its driver never gets
/// its devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ImageVariant {
    /// CPU architecture.
    pub arch: ImageArch,
    /// Accelerator driver.
    pub driver: ImageDriver,
}

impl ImageVariant {
    /// Every variant the EKS AL2023 images come in (there is no arm64
    /// Neuron image: no Graviton instance has Neuron devices).
    pub const ALL: [ImageVariant; 5] = [
        ImageVariant::new(ImageArch::X86_64, ImageDriver::Standard),
        ImageVariant::new(ImageArch::X86_64, ImageDriver::Nvidia),
        ImageVariant::new(ImageArch::X86_64, ImageDriver::Neuron),
        ImageVariant::new(ImageArch::Arm64, ImageDriver::Standard),
        ImageVariant::new(ImageArch::Arm64, ImageDriver::Nvidia),
    ];

    /// The variant of that architecture and driver.
    pub const fn new(arch: ImageArch, driver: ImageDriver) -> ImageVariant {
        ImageVariant { arch, driver }
    }

    /// The variant of a node of `instance_type` with the node `labels` the
    /// planner gave it (`kubernetes.io/arch`, the GPU and Neuron names from
    /// the catalog); without them, read from the family's name: Graviton
    /// families carry a `g` right after their generation (`m7g`, `c6gn`,
    /// `g5g`), `inf` and `trn` are Neuron, other `p`, `g` and `gr` NVIDIA.
    pub fn of(instance_type: &str, labels: &BTreeMap<String, String>) -> ImageVariant {
        let family = instance_type.split('.').next().unwrap_or_default();
        let prefix_len = family
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(family.len());
        let (prefix, rest) = family.split_at(prefix_len);
        let suffix = rest.trim_start_matches(|c: char| c.is_ascii_digit());
        let arch = match labels.get(l::ARCH).map(String::as_str) {
            Some("arm64") => ImageArch::Arm64,
            Some(_) => ImageArch::X86_64,
            None if !rest.is_empty() && suffix.starts_with('g') => ImageArch::Arm64,
            None => ImageArch::X86_64,
        };
        let driver = if labels.contains_key(l::NEURON_NAME) || matches!(prefix, "inf" | "trn") {
            ImageDriver::Neuron
        } else if labels.contains_key(l::GPU_NAME)
            || (!rest.is_empty() && matches!(prefix, "p" | "g" | "gr"))
        {
            ImageDriver::Nvidia
        } else {
            ImageDriver::Standard
        };
        ImageVariant { arch, driver }
    }
}

impl std::fmt::Display for ImageVariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.arch.as_str(), self.driver.as_str())
    }
}

/// Whether an instance type's family carries accelerators (NVIDIA GPU:
/// `p*`, `g*`, `gr*`; Neuron: `inf*`, `trn*`; Gaudi: `dl*`).
pub fn is_accelerated(instance_type: &str) -> bool {
    let family = instance_type.split('.').next().unwrap_or_default();
    let digit_after = |prefix: &str| {
        family
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    };
    ["p", "g", "gr", "inf", "trn", "dl"]
        .iter()
        .any(|p| digit_after(p))
}

fn is_minor_version(v: &str) -> bool {
    let mut parts = v.split('.');
    let number =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    number(parts.next()) && number(parts.next()) && parts.next().is_none()
}

fn check_cidr(cidr: &str) -> Result<(), String> {
    let (addr, len) = cidr
        .split_once('/')
        .ok_or_else(|| format!("{cidr:?} is not a CIDR (address/prefix)"))?;
    let addr: std::net::IpAddr = addr
        .parse()
        .map_err(|_| format!("{cidr:?}: {addr:?} is not an IP address"))?;
    let len: u8 = len
        .parse()
        .map_err(|_| format!("{cidr:?}: {len:?} is not a prefix length"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(format!("{cidr:?}: prefix longer than {max}"));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const GOOD: &str = r#"
clusterName: prod
kubernetesVersion: "1.33"
clusterEndpoint: https://ABCD.gr7.us-east-1.eks.amazonaws.com
certificateAuthority: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t
serviceCidr: 10.100.0.0/16
"#;

    fn ami(id: &str, arch: &str, accelerator: &str) -> ResolvedAmi {
        ResolvedAmi {
            id: id.into(),
            name: None,
            architecture: arch.into(),
            accelerator: accelerator.into(),
        }
    }

    /// A resolved node class with `images` and defaults, for tests.
    pub(crate) fn class(images: Vec<ResolvedAmi>) -> NodeClass {
        NodeClass {
            name: "default".into(),
            images,
            subnet_selector_terms: Vec::new(),
            security_group_selector_terms: Vec::new(),
            instance_profile: "nodes".into(),
            block_device_mappings: Vec::new(),
            instance_store_policy: None,
            metadata_options: MetadataOptions::default(),
            user_data: None,
            tags: BTreeMap::new(),
            capacity_reservation_selector_terms: Vec::new(),
        }
    }

    #[test]
    fn the_drift_hash_follows_what_nodes_are_launched_with_not_images_or_reservations() {
        let base = class(vec![ami("ami-1", "x86_64", "nvidia")]);
        let hash = base.drift_hash();
        let same = [
            class(vec![ami("ami-2", "x86_64", "nvidia")]),
            NodeClass {
                name: "renamed".into(),
                ..base.clone()
            },
            NodeClass {
                capacity_reservation_selector_terms: vec![Default::default()],
                ..base.clone()
            },
        ];
        for c in &same {
            assert_eq!(c.drift_hash(), hash, "{c:?}");
        }
        let changed = [
            NodeClass {
                user_data: Some("echo hi".into()),
                ..base.clone()
            },
            NodeClass {
                instance_profile: "other".into(),
                ..base.clone()
            },
            NodeClass {
                tags: BTreeMap::from([("team".into(), "ml".into())]),
                ..base.clone()
            },
        ];
        for c in &changed {
            assert_ne!(c.drift_hash(), hash, "{c:?}");
        }
    }

    #[test]
    fn each_variant_gets_its_image_and_a_custom_image_serves_its_architecture() {
        let none = BTreeMap::new();
        let v = |it: &str| ImageVariant::of(it, &none);
        let alias = class(vec![
            ami("ami-x86nv", "x86_64", "nvidia"),
            ami("ami-armnv", "arm64", "nvidia"),
            ami("ami-x86ne", "x86_64", "neuron"),
            ami("ami-x86st", "x86_64", "standard"),
        ]);
        assert_eq!(alias.image_for(v("g6.xlarge")), Some("ami-x86nv"));
        assert_eq!(alias.image_for(v("g5g.xlarge")), Some("ami-armnv"));
        assert_eq!(alias.image_for(v("trn1.32xlarge")), Some("ami-x86ne"));
        assert_eq!(alias.image_for(v("m7i.large")), Some("ami-x86st"));
        assert_eq!(alias.image_for(v("c7gn.large")), None);
        let custom = class(vec![ami("ami-mine", "x86_64", ANY_ACCELERATOR)]);
        assert_eq!(custom.image_for(v("p5.48xlarge")), Some("ami-mine"));
        assert_eq!(custom.image_for(v("g5g.xlarge")), None);
    }

    #[test]
    fn the_planner_is_kept_to_the_variants_a_class_has_images_for() {
        let reqs = |images| {
            class(images)
                .image_requirements()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        let all = ImageVariant::ALL
            .iter()
            .map(|v| ami("ami-1", v.arch.as_str(), v.driver.as_str()))
            .collect();
        assert!(reqs(all).is_empty());
        assert_eq!(
            reqs(vec![ami("ami-mine", "x86_64", ANY_ACCELERATOR)]),
            ["kubernetes.io/arch In [amd64]"]
        );
        assert_eq!(
            reqs(vec![
                ami("ami-a", "arm64", "standard"),
                ami("ami-b", "x86_64", "nvidia")
            ]),
            ["quartermaster.dev/neuron-name DoesNotExist"]
        );
        assert_eq!(
            reqs(vec![ami("ami-a", "arm64", "standard")]),
            [
                "kubernetes.io/arch In [arm64]",
                "quartermaster.dev/gpu-name DoesNotExist",
                "quartermaster.dev/neuron-name DoesNotExist"
            ]
        );
    }

    #[test]
    fn gpu_and_neuron_families_get_the_larger_default_root_volume() {
        let class = class(Vec::new());
        for gpu in [
            "p5.48xlarge",
            "g5.xlarge",
            "g6e.2xlarge",
            "gr6.4xlarge",
            "trn1.2xlarge",
            "inf2.xlarge",
        ] {
            let root = &class.block_devices_for(gpu)[0];
            assert_eq!(
                root.ebs.volume_size_gib, DEFAULT_ACCELERATED_ROOT_GIB,
                "{gpu}"
            );
            assert!(root.root_volume && root.ebs.encrypted);
        }
        for cpu in ["m5.large", "c7g.xlarge", "r6i.2xlarge"] {
            assert_eq!(class.root_volume_gib_for(cpu), DEFAULT_ROOT_GIB, "{cpu}");
        }
    }

    #[test]
    fn the_example_in_deploy_is_valid() {
        let example = include_str!("../../../../deploy/aws/ec2-settings.example.yaml");
        let s = Settings::from_yaml(example).unwrap();
        assert!(s.kubernetes_version.is_some());
    }

    #[test]
    fn every_problem_is_reported_with_its_field_path() {
        let bad = GOOD
            .replace("clusterName: prod", "clusterName: \"-bad name\"")
            .replace("https://ABCD", "http://ABCD")
            .replace("10.100.0.0/16", "10.100.0.0/40")
            .replace("\"1.33\"", "\"latest\"");
        let Err(Error::Invalid(problems)) = Settings::from_yaml(&bad) else {
            panic!("invalid settings accepted");
        };
        let fields: Vec<&str> = problems
            .iter()
            .map(|p| p.split(':').next().unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "clusterName",
                "kubernetesVersion",
                "clusterEndpoint",
                "serviceCidr"
            ],
            "{problems:#?}"
        );
    }

    fn eks() -> Cluster {
        Cluster {
            endpoint: Some("https://EKS.gr7.us-east-1.eks.amazonaws.com".into()),
            certificate_authority: Some("RUtTIENB".into()),
            service_cidr: Some("172.20.0.0/16".into()),
            version: Some("1.34".into()),
        }
    }

    #[test]
    fn a_file_with_only_the_cluster_name_is_completed_from_eks() {
        let file = SettingsFile::from_yaml("clusterName: prod\n").unwrap();
        assert!(file.needs_discovery());
        let s = file.complete(Some(&eks())).unwrap();
        assert_eq!(
            s.cluster_endpoint,
            "https://EKS.gr7.us-east-1.eks.amazonaws.com"
        );
        assert_eq!(s.certificate_authority, "RUtTIENB");
        assert_eq!(s.service_cidr, "172.20.0.0/16");
        assert_eq!(s.kubernetes_version.as_deref(), Some("1.34"));
    }

    #[test]
    fn what_the_file_sets_wins_over_eks() {
        let file = SettingsFile::from_yaml(GOOD).unwrap();
        assert!(!file.needs_discovery());
        assert_eq!(
            file.complete(Some(&eks())).unwrap(),
            Settings::from_yaml(GOOD).unwrap()
        );
        let partial =
            SettingsFile::from_yaml("clusterName: prod\nclusterEndpoint: https://MINE.example\n")
                .unwrap();
        let s = partial.complete(Some(&eks())).unwrap();
        assert_eq!(s.cluster_endpoint, "https://MINE.example");
        assert_eq!(s.service_cidr, "172.20.0.0/16");
    }

    #[test]
    fn a_field_neither_the_file_nor_eks_has_is_named() {
        let file = SettingsFile::from_yaml("clusterName: prod\n").unwrap();
        let Err(Error::Invalid(problems)) = file.complete(None) else {
            panic!("incomplete settings accepted");
        };
        let fields: Vec<&str> = problems
            .iter()
            .map(|p| p.split(':').next().unwrap())
            .collect();
        assert_eq!(
            fields,
            ["clusterEndpoint", "certificateAuthority", "serviceCidr"],
            "{problems:#?}"
        );
        assert!(problems[0].contains("eks:DescribeCluster"), "{problems:#?}");
        // Complete settings still need every field in the file.
        assert!(Settings::from_yaml("clusterName: prod\n").is_err());
    }

    #[test]
    fn a_wrong_field_is_refused_whether_it_comes_from_the_file_or_eks() {
        let err = SettingsFile::from_yaml("clusterName: prod\nserviceCidr: 10.0.0.0/99\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("serviceCidr"), "{err}");
        assert!(!err.contains("clusterEndpoint"), "{err}");
        let file = SettingsFile::from_yaml("clusterName: prod\n").unwrap();
        let bad = Cluster {
            endpoint: Some("http://plain".into()),
            ..eks()
        };
        let err = file.complete(Some(&bad)).unwrap_err().to_string();
        assert!(err.contains("clusterEndpoint: \"http://plain\""), "{err}");
    }

    #[test]
    fn node_classes_in_the_file_point_to_ec2nodeclass_and_typos_are_rejected() {
        let old = format!("{GOOD}defaultNodeClass:\n  instanceProfile: nodes\n");
        let err = Settings::from_yaml(&old).unwrap_err().to_string();
        assert!(err.contains("EC2NodeClass"), "{err}");
        let typo = GOOD.replace("serviceCidr", "serviceCIDR");
        let err = Settings::from_yaml(&typo).unwrap_err().to_string();
        assert!(
            err.contains("serviceCIDR: unknown field (did you mean serviceCidr?) (line "),
            "{err}"
        );
        assert!(!err.contains("EC2NodeClass"), "{err}");
    }
}
