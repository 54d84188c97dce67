//! What the EC2 provider needs to know about the cluster and how to launch
//! its nodes: the [`Settings`] file (YAML, camelCase) the controller reads,
//! with one [`NodeClass`] per NodePool and a default, and their validation.
//! Nothing here talks to AWS.

use crate::api::labels as l;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Root volume of accelerated instances (GPU, Neuron) when the node class
/// does not say: NVIDIA images and ML container images are large.
pub const DEFAULT_ACCELERATED_ROOT_GIB: i32 = 200;
/// Root volume of other instances when the node class does not say.
pub const DEFAULT_ROOT_GIB: i32 = 50;
/// Extra tags a node class may add: EC2 allows 50 per resource and the
/// provider sets up to six of its own.
pub const MAX_EXTRA_TAGS: usize = 40;

/// The provider's settings, loaded from YAML:
///
/// ```yaml
/// clusterName: prod
/// kubernetesVersion: "1.33"
/// clusterEndpoint: https://ABCD.gr7.us-east-1.eks.amazonaws.com
/// certificateAuthority: LS0tLS1CRUdJTi...
/// serviceCidr: 10.100.0.0/16
/// defaultNodeClass:
///   subnetSelector: { karpenter.sh/discovery: prod }
///   securityGroupSelector: { karpenter.sh/discovery: prod }
///   instanceProfile: prod-nodes
/// nodeClasses:
///   train:
///     ami: ami-0123456789abcdef0
///     subnetSelector: { tier: private }
///     securityGroupSelector: { karpenter.sh/discovery: prod }
///     instanceProfile: prod-nodes
///     rootVolumeGiB: 500
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    /// EKS cluster name: the value of the ownership tag, and nodeadm's
    /// `cluster.name`.
    pub cluster_name: String,
    /// Kubernetes minor version (`1.33`), for the default AMI parameter.
    #[serde(default)]
    pub kubernetes_version: Option<String>,
    /// API server endpoint (`https://...`), for nodeadm.
    pub cluster_endpoint: String,
    /// Cluster CA bundle, base64 as EKS returns it, for nodeadm.
    pub certificate_authority: String,
    /// Service CIDR (`10.100.0.0/16`), for nodeadm (cluster DNS address).
    pub service_cidr: String,
    /// Node class of every NodePool not named in `node_classes`.
    pub default_node_class: NodeClass,
    /// Node classes by NodePool name.
    #[serde(default)]
    pub node_classes: BTreeMap<String, NodeClass>,
}

/// How to launch the nodes of a NodePool: image, network, identity, disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClass {
    /// AMI: an ID (`ami-...`) or an SSM parameter (`resolve:ssm:/aws/...`,
    /// resolved by EC2 at launch), used for every instance type of the
    /// class. Default: the EKS AL2023 image of `kubernetesVersion` each
    /// instance type needs ([`ImageVariant`]: x86_64 or arm64; NVIDIA,
    /// Neuron or standard).
    #[serde(default)]
    pub ami: Option<String>,
    /// Subnets to launch in: every tag must match (`*` matches any value).
    /// Per zone ID the subnet with the most free addresses is used.
    pub subnet_selector: BTreeMap<String, String>,
    /// Security groups to attach: every tag must match (`*`: any value).
    pub security_group_selector: BTreeMap<String, String>,
    /// IAM instance profile name of the nodes.
    pub instance_profile: String,
    /// Root volume size in GiB. Default: [`DEFAULT_ACCELERATED_ROOT_GIB`]
    /// for GPU and Neuron families, [`DEFAULT_ROOT_GIB`] otherwise.
    #[serde(default, rename = "rootVolumeGiB")]
    pub root_volume_gib: Option<i32>,
    /// Extra tags on instances, volumes and launch templates.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// The on-demand capacity reservations and Capacity Blocks for ML the
    /// class's nodes may launch into (capacity type `reserved`): a
    /// reservation is selected when any term matches it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
}

/// One way to select capacity reservations: by ID, or by tags (every tag
/// must match; `*` matches any value). Exactly one of the two.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityReservationSelectorTerm {
    /// A capacity reservation ID, `cr-...`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Tags the reservation must carry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// USD per instance-hour the planner charges for the selected
    /// reservations' nodes. Default 0: the capacity is already paid for, so
    /// using it costs nothing more, and the planner uses it before spot and
    /// on-demand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_per_hour: Option<f64>,
}

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
    /// The YAML does not have the settings' shape.
    #[error("cannot parse EC2 settings: {0}")]
    Parse(String),
    /// Parsed, but wrong; every problem, one per line, with its field path.
    #[error("invalid EC2 settings:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
}

impl Settings {
    /// Reads and validates settings from a YAML file.
    ///
    /// # Errors
    /// [`Error::Read`], [`Error::Parse`] or [`Error::Invalid`].
    pub fn load(path: &Path) -> Result<Settings, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        Settings::from_yaml(&text)
    }

    /// Parses and validates settings from YAML text.
    ///
    /// # Errors
    /// [`Error::Parse`] or [`Error::Invalid`].
    pub fn from_yaml(text: &str) -> Result<Settings, Error> {
        let settings: Settings =
            serde_norway::from_str(text).map_err(|e| Error::Parse(e.to_string()))?;
        settings.validate()?;
        Ok(settings)
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
        let classes = std::iter::once(("defaultNodeClass".to_string(), &self.default_node_class))
            .chain(
                self.node_classes
                    .iter()
                    .map(|(pool, c)| (format!("nodeClasses.{pool}"), c)),
            );
        for (path, class) in classes {
            for (field, why) in class.problems(self.kubernetes_version.is_some()) {
                bad(&format!("{path}.{field}"), why);
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(problems))
        }
    }

    /// The node class of `nodepool`: its own, or the default.
    pub fn node_class(&self, nodepool: &str) -> &NodeClass {
        self.node_classes
            .get(nodepool)
            .unwrap_or(&self.default_node_class)
    }
}

impl NodeClass {
    /// The launch template's `ImageId`: the AMI ID, the `resolve:ssm:`
    /// parameter, or the default EKS AL2023 parameter of `variant` for
    /// `kubernetes_version` (`None` only when neither is set, which
    /// validation rejects).
    pub fn image_id(
        &self,
        kubernetes_version: Option<&str>,
        variant: ImageVariant,
    ) -> Option<String> {
        match (&self.ami, kubernetes_version) {
            (Some(ami), _) => Some(ami.clone()),
            (None, Some(v)) => Some(format!(
                "resolve:ssm:/aws/service/eks/optimized-ami/{v}/amazon-linux-2023/{}/{}/recommended/image_id",
                variant.arch.as_str(),
                variant.driver.as_str()
            )),
            (None, None) => None,
        }
    }

    /// Root volume size for `instance_type`: the class's, or the default
    /// for its family.
    pub fn root_volume_gib_for(&self, instance_type: &str) -> i32 {
        self.root_volume_gib
            .unwrap_or(if is_accelerated(instance_type) {
                DEFAULT_ACCELERATED_ROOT_GIB
            } else {
                DEFAULT_ROOT_GIB
            })
    }

    fn problems(&self, has_version: bool) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        match &self.ami {
            Some(ami) if ami.starts_with("ami-") && ami.len() > 4 => {}
            Some(ami) if ami.starts_with("resolve:ssm:") && ami.len() > 12 => {}
            Some(ami) => out.push((
                "ami",
                format!("{ami:?} is neither an AMI ID (ami-...) nor resolve:ssm:<parameter>"),
            )),
            None if !has_version => out.push((
                "ami",
                "required unless kubernetesVersion is set (for the default EKS AL2023 images)"
                    .into(),
            )),
            None => {}
        }
        for (field, selector) in [
            ("subnetSelector", &self.subnet_selector),
            ("securityGroupSelector", &self.security_group_selector),
        ] {
            if selector.is_empty() {
                out.push((field, "must name at least one tag".into()));
            } else if selector.keys().any(|k| k.is_empty()) {
                out.push((field, "tag keys must not be empty".into()));
            }
        }
        if self.instance_profile.trim().is_empty() {
            out.push(("instanceProfile", "must not be empty".into()));
        }
        if let Some(gib) = self.root_volume_gib {
            if !(8..=16384).contains(&gib) {
                out.push(("rootVolumeGiB", format!("{gib} is not within 8..=16384")));
            }
        }
        for term in &self.capacity_reservation_selector_terms {
            let field = "capacityReservationSelectorTerms";
            match (&term.id, term.tags.is_empty()) {
                (Some(_), false) | (None, true) => {
                    out.push((field, "each term names either an id or tags".into()))
                }
                (Some(id), true) if !id.starts_with("cr-") || id.len() <= 3 => out.push((
                    field,
                    format!("{id:?} is not a capacity reservation ID (cr-...)"),
                )),
                _ => {}
            }
            if term.tags.keys().any(|k| k.is_empty()) {
                out.push((field, "tag keys must not be empty".into()));
            }
            if term
                .price_per_hour
                .is_some_and(|p| !(p >= 0.0 && p.is_finite()))
            {
                out.push((field, "pricePerHour must be a number >= 0".into()));
            }
        }
        if self.tags.len() > MAX_EXTRA_TAGS {
            out.push(("tags", format!("at most {MAX_EXTRA_TAGS} tags")));
        }
        for (k, v) in &self.tags {
            let reserved = k.starts_with(l::GROUP)
                || k.to_ascii_lowercase().starts_with("aws:")
                || k == "Name"
                || k.starts_with("kubernetes.io/cluster/");
            if reserved {
                out.push(("tags", format!("{k:?} is set by quartermaster or AWS")));
            } else if k.is_empty() || k.len() > 128 || v.len() > 256 {
                out.push((
                    "tags",
                    format!("{k:?}: keys are 1-128 characters, values at most 256"),
                ));
            }
        }
        out
    }
}

/// CPU architecture of an EKS image, as its SSM parameter names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageVariant {
    /// CPU architecture.
    pub arch: ImageArch,
    /// Accelerator driver.
    pub driver: ImageDriver,
}

impl ImageVariant {
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
mod tests {
    use super::*;

    const GOOD: &str = r#"
clusterName: prod
kubernetesVersion: "1.33"
clusterEndpoint: https://ABCD.gr7.us-east-1.eks.amazonaws.com
certificateAuthority: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t
serviceCidr: 10.100.0.0/16
defaultNodeClass:
  subnetSelector: { karpenter.sh/discovery: prod }
  securityGroupSelector: { karpenter.sh/discovery: prod }
  instanceProfile: prod-nodes
nodeClasses:
  train:
    ami: ami-0123456789abcdef0
    subnetSelector: { tier: "*" }
    securityGroupSelector: { karpenter.sh/discovery: prod }
    instanceProfile: prod-train
    rootVolumeGiB: 500
    tags: { team: ml }
"#;

    #[test]
    fn settings_load_from_yaml_and_pick_the_pool_class_or_the_default() {
        let s = Settings::from_yaml(GOOD).unwrap();
        assert_eq!(s.node_class("train").instance_profile, "prod-train");
        assert_eq!(s.node_class("other").instance_profile, "prod-nodes");
        let none = BTreeMap::new();
        let default_of = |it: &str| {
            s.node_class("other")
                .image_id(s.kubernetes_version.as_deref(), ImageVariant::of(it, &none))
                .unwrap()
        };
        let param = |variant: &str| {
            format!("resolve:ssm:/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/{variant}/recommended/image_id")
        };
        assert_eq!(default_of("g6.xlarge"), param("x86_64/nvidia"));
        assert_eq!(default_of("g5g.xlarge"), param("arm64/nvidia"));
        assert_eq!(default_of("trn1.32xlarge"), param("x86_64/neuron"));
        assert_eq!(default_of("m7i.large"), param("x86_64/standard"));
        assert_eq!(default_of("c7gn.large"), param("arm64/standard"));
        // A class's own AMI serves every type.
        assert_eq!(
            s.node_class("train")
                .image_id(None, ImageVariant::of("g5g.xlarge", &none))
                .unwrap(),
            "ami-0123456789abcdef0"
        );
        assert_eq!(s.node_class("train").root_volume_gib_for("m5.large"), 500);
    }

    #[test]
    fn the_example_in_deploy_is_valid() {
        let example = include_str!("../../../../deploy/aws/ec2-settings.example.yaml");
        let s = Settings::from_yaml(example).unwrap();
        assert_eq!(s.node_class("training").root_volume_gib, Some(500));
    }

    #[test]
    fn gpu_and_neuron_families_get_the_larger_default_root_volume() {
        let s = Settings::from_yaml(GOOD).unwrap();
        let class = s.node_class("default");
        for gpu in [
            "p5.48xlarge",
            "g5.xlarge",
            "g6e.2xlarge",
            "gr6.4xlarge",
            "trn1.2xlarge",
            "inf2.xlarge",
        ] {
            assert_eq!(
                class.root_volume_gib_for(gpu),
                DEFAULT_ACCELERATED_ROOT_GIB,
                "{gpu}"
            );
        }
        for cpu in ["m5.large", "c7g.xlarge", "r6i.2xlarge"] {
            assert_eq!(class.root_volume_gib_for(cpu), DEFAULT_ROOT_GIB, "{cpu}");
        }
    }

    #[test]
    fn every_problem_is_reported_with_its_field_path() {
        let bad = GOOD
            .replace("clusterName: prod", "clusterName: \"-bad name\"")
            .replace("https://ABCD", "http://ABCD")
            .replace("10.100.0.0/16", "10.100.0.0/40")
            .replace("ami: ami-0123456789abcdef0", "ami: ubuntu")
            .replace("rootVolumeGiB: 500", "rootVolumeGiB: 2")
            .replace(
                "tags: { team: ml }",
                "tags: { quartermaster.dev/cluster: x }",
            )
            .replace(
                "subnetSelector: { karpenter.sh/discovery: prod }",
                "subnetSelector: {}",
            );
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
                "clusterEndpoint",
                "serviceCidr",
                "defaultNodeClass.subnetSelector",
                "nodeClasses.train.ami",
                "nodeClasses.train.rootVolumeGiB",
                "nodeClasses.train.tags",
            ],
            "{problems:#?}"
        );
    }

    #[test]
    fn a_missing_ami_needs_a_kubernetes_version_and_unknown_fields_are_rejected() {
        let no_version = GOOD.replace("kubernetesVersion: \"1.33\"\n", "");
        let err = Settings::from_yaml(&no_version).unwrap_err().to_string();
        assert!(
            err.contains("defaultNodeClass.ami: required unless kubernetesVersion"),
            "{err}"
        );
        let typo = GOOD.replace("serviceCidr", "serviceCIDR");
        assert!(matches!(Settings::from_yaml(&typo), Err(Error::Parse(_))));
    }

    #[test]
    fn capacity_reservation_terms_name_an_id_or_tags_and_bad_ones_are_reported() {
        let with = |terms: &str| {
            GOOD.replace(
                "    tags: { team: ml }\n",
                &format!(
                    "    tags: {{ team: ml }}\n    capacityReservationSelectorTerms: {terms}\n"
                ),
            )
        };
        let s = Settings::from_yaml(&with(
            "[{ id: cr-0123456789abcdef0 }, { tags: { team: ml }, pricePerHour: 12.5 }]",
        ))
        .unwrap();
        let terms = &s.node_class("train").capacity_reservation_selector_terms;
        assert_eq!(terms[0].id.as_deref(), Some("cr-0123456789abcdef0"));
        assert_eq!(terms[1].price_per_hour, Some(12.5));
        for (bad, why) in [
            ("[{}]", "either an id or tags"),
            ("[{ id: cr-1, tags: { a: b } }]", "either an id or tags"),
            ("[{ id: i-0123 }]", "not a capacity reservation ID"),
            ("[{ id: cr-1, pricePerHour: -1 }]", "pricePerHour"),
        ] {
            let err = Settings::from_yaml(&with(bad)).unwrap_err().to_string();
            assert!(
                err.contains("nodeClasses.train.capacityReservationSelectorTerms")
                    && err.contains(why),
                "{bad}: {err}"
            );
        }
    }
}
