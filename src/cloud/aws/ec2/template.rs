//! Launch template content: the EKS AL2023 nodeadm user data that makes a
//! node register with its NodeClaim's labels and taints, and the rest of
//! what a [`LaunchTemplate`] holds (image, instance profile, security
//! groups, volumes, instance metadata options), all from the pool's
//! resolved [`NodeClass`]; the class's own user data is merged before ours. A template's name carries a hash of its
//! content, so equal content shares one template and changed content gets a
//! new one. Building the EC2 request is here; calling EC2 is in `ec2.rs`.

use super::settings::{NodeClass, Settings};
use crate::api::labels as l;
use crate::api::nodeclass::{BlockDeviceMapping, InstanceStorePolicy, MetadataOptions};
use crate::cloud::NodeTemplate;
use aws_sdk_ec2::types::{
    CapacityReservationTarget, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateCapacityReservationSpecificationRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMarketOptionsRequest, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatePlacementRequest,
    LaunchTemplateTagSpecificationRequest, MarketType, RequestLaunchTemplateData, ResourceType,
    Tag, VolumeType,
};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Instance tag: the name of the launch template the instance was
/// launched from; garbage collection keeps a template while an instance
/// carrying its name lives.
pub const TAG_LAUNCH_TEMPLATE: &str = "quartermaster.dev/launch-template";

/// MIME boundary of the user data.
const BOUNDARY: &str = "==QUARTERMASTER==";

/// Everything a launch template holds; serialized to hash its name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaunchTemplate {
    /// `ImageId`: an AMI ID or `resolve:ssm:<parameter>`.
    pub image_id: String,
    /// IAM instance profile name.
    pub instance_profile: String,
    /// Security group IDs, sorted.
    pub security_group_ids: Vec<String>,
    /// EBS volumes (the node class's, or the default root volume).
    pub block_devices: Vec<BlockDeviceMapping>,
    /// Instance metadata service options.
    pub metadata: MetadataOptions,
    /// User data, plain text (EC2 wants it base64; see [`LaunchTemplate::data`]).
    pub user_data: String,
    /// Tags of the template itself (ownership and the node class's extras).
    pub tags: BTreeMap<String, String>,
    /// The capacity reservation (or Capacity Block) a reserved claim
    /// launches into; absent otherwise (and then not hashed, so the names
    /// of other templates do not change).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation: Option<ReservationTarget>,
    /// Elastic Fabric Adapter interfaces, one per network card (the first
    /// `efa`, which also carries ENA; the others `efa-only`); 0: the default
    /// single ENA interface (and then not hashed, so other names stay).
    #[serde(skip_serializing_if = "is_zero")]
    pub efa_interfaces: u32,
    /// The cluster placement group the instance is launched into (EFA
    /// nodes); absent otherwise (and then not hashed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_group: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Where a reserved launch goes: the reservation, and whether it is a
/// Capacity Block (which EC2 launches with market type `capacity-block`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReservationTarget {
    /// `cr-...`.
    pub id: String,
    /// A Capacity Block for ML rather than an on-demand reservation.
    pub capacity_block: bool,
}

impl ReservationTarget {
    /// The target of `claim`: its reservation, a block when its node's
    /// labels say so; `None` for a claim that is not reserved capacity.
    pub fn of(
        claim: &crate::core::ClaimRequest,
        template: &NodeTemplate,
    ) -> Option<ReservationTarget> {
        let id = claim.reservation.clone()?;
        Some(ReservationTarget {
            id,
            capacity_block: template
                .labels
                .get(l::CAPACITY_RESERVATION_KIND)
                .map(String::as_str)
                == Some(crate::catalog::ReservationKind::CapacityBlock.as_str()),
        })
    }
}

impl LaunchTemplate {
    /// The template's name: `quartermaster/<cluster>/<hash of content>`,
    /// or `quartermaster/<hash>` when that would pass EC2's 128 characters.
    pub fn name(&self, cluster: &str) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        let hash = hex(&Sha256::digest(format!("{cluster}\n{json}").as_bytes()));
        let long = format!("quartermaster/{cluster}/{}", &hash[..16]);
        if long.len() <= 128 {
            long
        } else {
            format!("quartermaster/{}", &hash[..24])
        }
    }

    /// The EC2 `LaunchTemplateData`: the node class's instance metadata
    /// options (IMDSv2 required, hop limit 2 by default: pods reach IMDS
    /// through one more hop), the instance profile, the security groups,
    /// the volumes, the user data in base64, and the template's tags on the
    /// network interface (which `CreateFleet` cannot tag itself; the IAM
    /// policy only lets us create tagged resources).
    pub fn data(&self) -> RequestLaunchTemplateData {
        let m = &self.metadata;
        let mut data = RequestLaunchTemplateData::builder();
        if let Some(r) = &self.capacity_reservation {
            data = data.capacity_reservation_specification(
                LaunchTemplateCapacityReservationSpecificationRequest::builder()
                    .capacity_reservation_target(
                        CapacityReservationTarget::builder()
                            .capacity_reservation_id(&r.id)
                            .build(),
                    )
                    .build(),
            );
            if r.capacity_block {
                data = data.instance_market_options(
                    LaunchTemplateInstanceMarketOptionsRequest::builder()
                        .market_type(MarketType::CapacityBlock)
                        .build(),
                );
            }
        }
        // EFA interfaces carry the security groups themselves (EC2 refuses
        // groups both on the instance and on its interfaces); the subnet is
        // the fleet override's.
        if let Some(group) = &self.placement_group {
            data = data.placement(
                LaunchTemplatePlacementRequest::builder()
                    .group_name(group)
                    .build(),
            );
        }
        if self.efa_interfaces > 0 {
            for card in 0..self.efa_interfaces {
                let card = i32::try_from(card).unwrap_or(i32::MAX);
                data = data.network_interfaces(
                    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                        .network_card_index(card)
                        .device_index(if card == 0 { 0 } else { 1 })
                        .interface_type(if card == 0 { "efa" } else { "efa-only" })
                        .set_groups(Some(self.security_group_ids.clone()))
                        .delete_on_termination(true)
                        .build(),
                );
            }
        } else {
            data = data.set_security_group_ids(Some(self.security_group_ids.clone()));
        }
        data.image_id(&self.image_id)
            .iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(&self.instance_profile)
                    .build(),
            )
            .set_block_device_mappings(Some(self.block_devices.iter().map(block_device).collect()))
            .metadata_options(
                LaunchTemplateInstanceMetadataOptionsRequest::builder()
                    .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(
                        m.http_endpoint.as_str(),
                    ))
                    .http_tokens(LaunchTemplateHttpTokensState::from(m.http_tokens.as_str()))
                    .http_put_response_hop_limit(m.http_put_response_hop_limit)
                    .http_protocol_ipv6(LaunchTemplateInstanceMetadataProtocolIpv6::from(
                        m.http_protocol_ipv6.as_str(),
                    ))
                    .build(),
            )
            .user_data(aws_smithy_types::base64::encode(&self.user_data))
            .tag_specifications(
                LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(ResourceType::NetworkInterface)
                    .set_tags(Some(
                        self.tags
                            .iter()
                            .map(|(k, v)| Tag::builder().key(k).value(v).build())
                            .collect(),
                    ))
                    .build(),
            )
            .build()
    }
}

fn block_device(m: &BlockDeviceMapping) -> LaunchTemplateBlockDeviceMappingRequest {
    let e = &m.ebs;
    LaunchTemplateBlockDeviceMappingRequest::builder()
        .device_name(&m.device_name)
        .ebs(
            LaunchTemplateEbsBlockDeviceRequest::builder()
                .volume_size(e.volume_size_gib)
                .volume_type(VolumeType::from(e.volume_type.as_str()))
                .set_iops(e.iops)
                .set_throughput(e.throughput)
                .encrypted(e.encrypted)
                .set_kms_key_id(e.kms_key_id.clone())
                .delete_on_termination(e.delete_on_termination)
                .set_snapshot_id(e.snapshot_id.clone())
                .build(),
        )
        .build()
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Labels whose value depends on the zone, which a fallback override may
/// change after the user data is written (with the instance type's own,
/// [`crate::catalog::INSTANCE_TYPE_KEYS`]): the controller applies them
/// once the node registers.
const OFFERING_LABELS: &[&str] = &[
    l::ZONE,
    l::ZONE_ID,
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/arch",
    "failure-domain.beta.kubernetes.io/zone",
];

/// The labels the kubelet registers the node with: `labels` without the
/// offering-dependent ones and without those the kubelet refuses to set
/// itself (`kubernetes.io` / `k8s.io` keys other than region, OS and the
/// `node.kubernetes.io/` and `kubelet.kubernetes.io/` namespaces; a kubelet
/// given one does not start).
pub fn kubelet_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| {
            !OFFERING_LABELS.contains(&k.as_str())
                && !crate::catalog::INSTANCE_TYPE_KEYS.contains(&k.as_str())
                && kubelet_may_set(k)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn kubelet_may_set(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else {
        return true;
    };
    let restricted = ["kubernetes.io", "k8s.io"]
        .iter()
        .any(|d| domain == *d || domain.ends_with(&format!(".{d}")));
    !restricted
        || key == l::REGION
        || key == l::OS
        || domain == "node.kubernetes.io"
        || domain == "kubelet.kubernetes.io"
}

/// The kubelet flags: `--node-labels` and `--register-with-taints` (the
/// template's taints and startup taints), each left out when empty.
///
/// # Errors
/// A label or taint that is not valid Kubernetes syntax (a qualified name,
/// a label value): anything else could carry whitespace, `,`, `=` or `:`
/// out of its flag (the lifecycle refuses such claims before they get
/// here: `api::validate_node_claim`).
pub fn kubelet_flags(template: &NodeTemplate) -> Result<Vec<String>, String> {
    use crate::api::validate::{check_label_value, check_qualified_name};
    let mut flags = Vec::new();
    let labels = kubelet_labels(&template.labels);
    let mut parts = Vec::new();
    for (k, v) in &labels {
        if let Err(why) = check_qualified_name(k).and_then(|()| check_label_value(v)) {
            return Err(format!(
                "label {k:?}={v:?} cannot be passed to the kubelet: {why}"
            ));
        }
        parts.push(format!("{k}={v}"));
    }
    if !parts.is_empty() {
        flags.push(format!("--node-labels={}", parts.join(",")));
    }
    let mut taints = Vec::new();
    for t in template.taints.iter().chain(&template.startup_taints) {
        let value = t.value.as_deref().unwrap_or_default();
        if let Err(why) = check_qualified_name(&t.key).and_then(|()| check_label_value(value)) {
            return Err(format!(
                "taint {:?}={value:?} cannot be passed to the kubelet: {why}",
                t.key
            ));
        }
        let taint = if value.is_empty() {
            format!("{}:{}", t.key, t.effect.as_str())
        } else {
            format!("{}={value}:{}", t.key, t.effect.as_str())
        };
        if !taints.contains(&taint) {
            taints.push(taint);
        }
    }
    if !taints.is_empty() {
        flags.push(format!("--register-with-taints={}", taints.join(",")));
    }
    Ok(flags)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeConfig<'a> {
    api_version: &'static str,
    kind: &'static str,
    spec: NodeConfigSpec<'a>,
}

#[derive(Serialize)]
struct NodeConfigSpec<'a> {
    cluster: ClusterDetails<'a>,
    kubelet: Kubelet,
    #[serde(skip_serializing_if = "Option::is_none")]
    instance: Option<InstanceOptions>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InstanceOptions {
    local_storage: LocalStorage,
}

#[derive(Serialize)]
struct LocalStorage {
    strategy: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterDetails<'a> {
    name: &'a str,
    api_server_endpoint: &'a str,
    certificate_authority: &'a str,
    cidr: &'a str,
}

#[derive(Serialize)]
struct Kubelet {
    flags: Vec<String>,
}

/// The user data: a MIME multi-part document with the node class's own
/// user data first (its parts if it is MIME multi-part itself, else one
/// part: a nodeadm `NodeConfig` or a shell script) and then one nodeadm
/// `NodeConfig` (`node.eks.aws/v1alpha1`) naming the cluster, setting the
/// kubelet flags of [`kubelet_flags`] and, with `instanceStorePolicy:
/// RAID0`, the local storage strategy. nodeadm merges the `NodeConfig`s,
/// later ones winning, so the cluster details stay ours.
///
/// # Errors
/// As [`kubelet_flags`], or user data that names a MIME boundary but has
/// no parts.
pub fn user_data(
    settings: &Settings,
    class: &NodeClass,
    template: &NodeTemplate,
) -> Result<String, String> {
    let config = NodeConfig {
        api_version: "node.eks.aws/v1alpha1",
        kind: "NodeConfig",
        spec: NodeConfigSpec {
            cluster: ClusterDetails {
                name: &settings.cluster_name,
                api_server_endpoint: &settings.cluster_endpoint,
                certificate_authority: settings.certificate_authority.trim(),
                cidr: &settings.service_cidr,
            },
            kubelet: Kubelet {
                flags: kubelet_flags(template)?,
            },
            instance: class
                .instance_store_policy
                .map(|InstanceStorePolicy::Raid0| InstanceOptions {
                    local_storage: LocalStorage { strategy: "RAID0" },
                }),
        },
    };
    let yaml = serde_norway::to_string(&config).map_err(|e| e.to_string())?;
    let mut parts = match &class.user_data {
        Some(theirs) if !theirs.trim().is_empty() => user_parts(theirs)?,
        _ => Vec::new(),
    };
    parts.push(format!(
        "Content-Type: application/node.eks.aws\r\n\r\n---\n{yaml}"
    ));
    let mut out = format!(
        "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\r\n\r\n"
    );
    for part in parts {
        out.push_str(&format!("--{BOUNDARY}\r\n{part}\r\n"));
    }
    out.push_str(&format!("--{BOUNDARY}--\r\n"));
    Ok(out)
}

/// The MIME parts (headers and body) of a node class's user data.
fn user_parts(data: &str) -> Result<Vec<String>, String> {
    let Some(boundary) = crate::api::nodeclass::user_data_mime_boundary(data) else {
        let kind = if data.contains("node.eks.aws/") {
            "application/node.eks.aws"
        } else {
            "text/x-shellscript; charset=\"us-ascii\""
        };
        return Ok(vec![format!(
            "Content-Type: {kind}\r\n\r\n{}",
            data.trim_end()
        )]);
    };
    let delimiter = format!("--{boundary}");
    let parts: Vec<String> = data
        .split(&delimiter)
        .skip(1)
        .map(|p| p.trim_start_matches(['\r', '\n']).trim_end().to_string())
        .filter(|p| !p.is_empty() && !p.starts_with("--"))
        .collect();
    if parts.is_empty() {
        return Err(format!(
            "the node class's user data names MIME boundary {boundary:?} but has no parts"
        ));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Taint, TaintEffect};

    fn settings() -> Settings {
        Settings::from_yaml(
            r#"
clusterName: prod
kubernetesVersion: "1.33"
clusterEndpoint: https://ABCD.eks.example
certificateAuthority: Q0E=
serviceCidr: 10.100.0.0/16
"#,
        )
        .unwrap()
    }

    fn template() -> NodeTemplate {
        NodeTemplate {
            labels: [
                (l::NODEPOOL, "train"),
                (l::CAPACITY_TYPE, "spot"),
                (l::INSTANCE_TYPE, "g5.xlarge"),
                (l::ZONE, "us-east-1d"),
                (l::ZONE_ID, "use1-az4"),
                (l::GPU_NAME, "a10g"),
                (l::KARPENTER_INSTANCE_GPU_NAME, "a10g"),
                (l::REGION, "us-east-1"),
                ("node-role.kubernetes.io/gpu", ""),
                ("team", "ml"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            taints: vec![Taint::new(l::TAINT_GPU, "present", TaintEffect::NoSchedule)],
            startup_taints: vec![Taint::new(
                l::TAINT_UNREGISTERED,
                "",
                TaintEffect::NoExecute,
            )],
            ..NodeTemplate::default()
        }
    }

    #[test]
    fn kubelet_gets_offering_independent_labels_and_every_taint() {
        let flags = kubelet_flags(&template()).unwrap();
        assert_eq!(
            flags,
            [
                "--node-labels=quartermaster.dev/capacity-type=spot,quartermaster.dev/nodepool=train,team=ml,topology.kubernetes.io/region=us-east-1",
                "--register-with-taints=nvidia.com/gpu=present:NoSchedule,quartermaster.dev/unregistered:NoExecute",
            ]
        );
    }

    fn class() -> NodeClass {
        super::super::settings::tests::class(Vec::new())
    }

    /// The parts of a MIME multi-part user data, headers and body.
    fn parts(data: &str) -> Vec<&str> {
        data.split(&format!("--{BOUNDARY}"))
            .skip(1)
            .map(str::trim)
            .filter(|p| !p.is_empty() && *p != "--")
            .collect()
    }

    #[test]
    fn a_class_user_data_runs_before_ours_and_raid0_reaches_nodeadm() {
        let mut c = class();
        c.user_data = Some("#!/bin/bash\necho hello\n".into());
        c.instance_store_policy = Some(InstanceStorePolicy::Raid0);
        let data = user_data(&settings(), &c, &template()).unwrap();
        let p = parts(&data);
        assert_eq!(p.len(), 2, "{data}");
        assert!(
            p[0].starts_with("Content-Type: text/x-shellscript"),
            "{}",
            p[0]
        );
        assert!(p[0].ends_with("echo hello"));
        assert!(p[1].contains("strategy: RAID0"), "{}", p[1]);
        let mime = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"XX\"\n\n--XX\nContent-Type: application/node.eks.aws\n\nkind: NodeConfig\n--XX\nContent-Type: text/x-shellscript\n\necho two\n--XX--\n";
        c.user_data = Some(mime.into());
        let data = user_data(&settings(), &c, &template()).unwrap();
        let p = parts(&data);
        assert_eq!(p.len(), 3, "{data}");
        assert!(p[0].contains("kind: NodeConfig") && p[1].contains("echo two"));
        c.user_data = Some("Content-Type: multipart/mixed; boundary=\"YY\"\n\nnothing".into());
        assert!(user_data(&settings(), &c, &template())
            .unwrap_err()
            .contains("no parts"));
    }

    #[test]
    fn user_data_is_a_mime_nodeconfig_for_the_cluster() {
        let data = user_data(&settings(), &class(), &template()).unwrap();
        assert!(data.starts_with("MIME-Version: 1.0\r\nContent-Type: multipart/mixed;"));
        assert!(data.contains("Content-Type: application/node.eks.aws"));
        let yaml = data
            .split("application/node.eks.aws\r\n\r\n")
            .nth(1)
            .and_then(|rest| rest.split("\r\n--").next())
            .unwrap();
        let doc: serde_json::Value = serde_norway::from_str(yaml).unwrap();
        assert_eq!(doc["kind"], "NodeConfig");
        assert_eq!(doc["spec"]["cluster"]["name"], "prod");
        assert_eq!(doc["spec"]["cluster"]["cidr"], "10.100.0.0/16");
        assert_eq!(doc["spec"]["kubelet"]["flags"].as_array().unwrap().len(), 2);
    }

    /// A plain template for the class, for tests to vary.
    fn launch_template() -> LaunchTemplate {
        LaunchTemplate {
            image_id: "ami-1".into(),
            instance_profile: "nodes".into(),
            security_group_ids: vec!["sg-1".into()],
            block_devices: class().block_devices_for("g5.xlarge"),
            metadata: MetadataOptions::default(),
            user_data: user_data(&settings(), &class(), &template()).unwrap(),
            tags: BTreeMap::new(),
            capacity_reservation: None,
            efa_interfaces: 0,
            placement_group: None,
        }
    }

    #[test]
    fn equal_content_shares_a_name_and_changed_content_does_not() {
        let lt = launch_template();
        let name = lt.name("prod");
        assert!(
            name.starts_with("quartermaster/prod/") && name.len() == 35,
            "{name}"
        );
        assert_eq!(lt.clone().name("prod"), name);
        let mut bigger = lt.clone();
        bigger.block_devices[0].ebs.volume_size_gib = 500;
        assert_ne!(bigger.name("prod"), name);
        assert_ne!(lt.name("staging"), name);
        let reserved = LaunchTemplate {
            capacity_reservation: Some(ReservationTarget {
                id: "cr-1".into(),
                capacity_block: true,
            }),
            ..lt.clone()
        };
        assert_ne!(reserved.name("prod"), name);
        assert!(lt.name(&"c".repeat(100)).len() <= 128);
    }

    #[test]
    fn a_label_or_taint_that_breaks_the_flag_syntax_is_refused() {
        let mut t = template();
        t.labels.insert("bad".into(), "a,b".into());
        assert!(kubelet_flags(&t).unwrap_err().contains("\"bad\"=\"a,b\""));
        // Whitespace would split the flag: another flag rides in.
        for (k, v) in [
            ("team", "ml --anonymous-auth=true"),
            ("team", "ml\n--anonymous-auth=true"),
            ("a b", "x"),
        ] {
            let mut t = template();
            t.labels.insert(k.into(), v.into());
            let err = kubelet_flags(&t).unwrap_err();
            assert!(err.contains("cannot be passed to the kubelet"), "{err}");
        }
        let mut t = template();
        t.taints
            .push(Taint::new("x", "a b", TaintEffect::NoSchedule));
        assert!(kubelet_flags(&t).is_err());
        let mut t = template();
        t.startup_taints
            .push(Taint::new("x --v=9", "", TaintEffect::NoSchedule));
        assert!(kubelet_flags(&t).is_err());
    }

    #[test]
    fn a_capacity_block_template_targets_the_reservation_with_the_capacity_block_market() {
        let target = |capacity_block| LaunchTemplate {
            capacity_reservation: Some(ReservationTarget {
                id: "cr-0123".into(),
                capacity_block,
            }),
            ..launch_template()
        };
        let data = target(true).data();
        let spec = data.capacity_reservation_specification().unwrap();
        assert_eq!(
            spec.capacity_reservation_target()
                .unwrap()
                .capacity_reservation_id(),
            Some("cr-0123")
        );
        assert_eq!(
            data.instance_market_options().and_then(|m| m.market_type()),
            Some(&MarketType::CapacityBlock)
        );
        // An on-demand reservation is targeted, bought on demand.
        assert!(target(false).data().instance_market_options().is_none());
    }

    #[test]
    fn an_efa_template_has_one_interface_per_network_card_the_first_with_ena() {
        let lt = LaunchTemplate {
            efa_interfaces: 4,
            placement_group: Some("quartermaster-prod-train-use1-az4".into()),
            ..launch_template()
        };
        let data = lt.data();
        let nics = data.network_interfaces();
        let kinds: Vec<(Option<i32>, Option<i32>, Option<&str>)> = nics
            .iter()
            .map(|n| (n.network_card_index(), n.device_index(), n.interface_type()))
            .collect();
        assert_eq!(
            kinds,
            [
                (Some(0), Some(0), Some("efa")),
                (Some(1), Some(1), Some("efa-only")),
                (Some(2), Some(1), Some("efa-only")),
                (Some(3), Some(1), Some("efa-only")),
            ]
        );
        assert!(nics.iter().all(|n| n.groups() == ["sg-1"]));
        assert_eq!(
            data.placement().and_then(|p| p.group_name()),
            Some("quartermaster-prod-train-use1-az4")
        );
        // The groups are on the interfaces, not the instance.
        assert!(data.security_group_ids().is_empty());
        let plain = LaunchTemplate {
            efa_interfaces: 0,
            placement_group: None,
            ..lt.clone()
        };
        assert!(plain.data().network_interfaces().is_empty());
        assert_eq!(plain.data().security_group_ids(), ["sg-1"]);
        assert_ne!(plain.name("prod"), lt.name("prod"));
    }
}
