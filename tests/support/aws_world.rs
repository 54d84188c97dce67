//! One test's world in moto for the EC2 provider: a cluster name, a VPC
//! with one tagged subnet per zone, a tagged security group, the EKS image
//! parameters under a root of its own, the nodes' instance profile; and
//! the provider built on it as a controller would.

#![allow(dead_code)]

use super::moto::{unique, Moto};
use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use quartermaster::api::labels as l;
use quartermaster::api::nodeclass::EC2NodeClassSpec;
use quartermaster::api::{Taint, TaintEffect};
use quartermaster::catalog::CapacityType;
use quartermaster::cloud::aws::ec2::{AwsCloud, ImageVariant, Settings};
use quartermaster::cloud::aws::nodeclass::{Resolved, Resolver};
use quartermaster::cloud::NodeTemplate;
use quartermaster::core::{ClaimRequest, OfferingKey};
use std::collections::HashMap;
use std::sync::Arc;

/// moto's us-east-1: `us-east-1a` is `use1-az6`, `us-east-1d` is `use1-az4`
/// (`shared/reference-data/moto-az-name-to-id.json`).
pub const ZONES: [(&str, &str); 2] = [("us-east-1a", "use1-az6"), ("us-east-1d", "use1-az4")];

/// One test's world on the shared server: its cluster name and a VPC with
/// one tagged subnet per zone of [`ZONES`] and a tagged security group.
pub struct World {
    pub ec2: aws_sdk_ec2::Client,
    pub sdk: aws_config::SdkConfig,
    pub cluster: String,
    /// Where this world's EKS image parameters live (see the module note).
    pub parameter_root: String,
    /// The nodes' instance profile, in IAM.
    pub instance_profile: String,
    pub subnets: Vec<String>,
    pub security_group: String,
    pub moto: Moto,
}

pub fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build()
}

pub fn tagged(resource: ResourceType, k: &str, v: &str) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .tags(tag(k, v))
        .build()
}

impl World {
    pub async fn new() -> World {
        let moto = Moto::start();
        let sdk = moto.sdk_config();
        let ec2 = aws_sdk_ec2::Client::new(&sdk);
        let cluster = unique("qm");
        let parameter_root = format!("/test/{cluster}/eks");
        let ssm = aws_sdk_ssm::Client::new(&sdk);
        for variant in ImageVariant::ALL {
            ssm.put_parameter()
                .name(format!(
                    "{parameter_root}/1.33/amazon-linux-2023/{variant}/recommended/image_id"
                ))
                .value(image_of(variant))
                .r#type(aws_sdk_ssm::types::ParameterType::String)
                .send()
                .await
                .unwrap();
        }
        let instance_profile = format!("{cluster}-nodes");
        let iam = aws_sdk_iam::Client::new(&sdk);
        iam.create_role()
            .role_name(&instance_profile)
            .assume_role_policy_document("{}")
            .send()
            .await
            .unwrap();
        iam.create_instance_profile()
            .instance_profile_name(&instance_profile)
            .send()
            .await
            .unwrap();
        iam.add_role_to_instance_profile()
            .instance_profile_name(&instance_profile)
            .role_name(&instance_profile)
            .send()
            .await
            .unwrap();
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.0.0.0/16")
            .send()
            .await
            .unwrap();
        let vpc = vpc.vpc().unwrap().vpc_id().unwrap().to_string();
        let mut subnets = Vec::new();
        for (i, (zone, _)) in ZONES.iter().enumerate() {
            let s = ec2
                .create_subnet()
                .vpc_id(&vpc)
                .cidr_block(format!("10.0.{i}.0/24"))
                .availability_zone(*zone)
                .tag_specifications(tagged(ResourceType::Subnet, "test/discovery", &cluster))
                .send()
                .await
                .unwrap();
            subnets.push(s.subnet().unwrap().subnet_id().unwrap().to_string());
        }
        let sg = ec2
            .create_security_group()
            .group_name(format!("{cluster}-nodes"))
            .description("nodes")
            .vpc_id(&vpc)
            .tag_specifications(tagged(
                ResourceType::SecurityGroup,
                "test/discovery",
                &cluster,
            ))
            .send()
            .await
            .unwrap();
        World {
            ec2,
            sdk,
            cluster,
            parameter_root,
            instance_profile,
            subnets,
            security_group: sg.group_id().unwrap().to_string(),
            moto,
        }
    }

    pub fn settings(&self, cluster: &str) -> Settings {
        Settings::from_yaml(&format!(
            r#"
clusterName: {cluster}
kubernetesVersion: "1.33"
clusterEndpoint: https://example.eks.amazonaws.com
certificateAuthority: Q0EgYnVuZGxl
serviceCidr: 10.100.0.0/16
"#
        ))
        .unwrap()
    }

    /// This world's node class: the latest EKS images, its subnets and
    /// security group by tag, its role (and so its instance profile).
    pub fn node_class_spec(&self) -> EC2NodeClassSpec {
        serde_norway::from_str(&format!(
            r#"
subnetSelectorTerms: [{{ tags: {{ test/discovery: {own} }} }}]
securityGroupSelectorTerms: [{{ tags: {{ test/discovery: {own} }} }}]
role: {own}-nodes
tags: {{ team: ml }}
"#,
            own = self.cluster
        ))
        .unwrap()
    }

    pub fn resolver(&self) -> Resolver {
        Resolver::new(&self.sdk, Some("1.33".into())).with_parameter_root(&self.parameter_root)
    }

    pub async fn resolve(&self, spec: &EC2NodeClassSpec) -> Resolved {
        self.resolver().resolve(spec).await
    }

    /// A provider for this world's cluster, as a freshly started controller
    /// would build it, with pool `train`'s node class resolved.
    pub async fn cloud(&self) -> AwsCloud {
        self.cloud_of(&self.cluster).await
    }

    /// As [`World::cloud`], for the cluster `cluster` on this world's network.
    pub async fn cloud_of(&self, cluster: &str) -> AwsCloud {
        let aws = AwsCloud::new(self.ec2.clone(), self.settings(cluster)).unwrap();
        let spec = self.node_class_spec();
        let class = self.resolve(&spec).await.node_class("gpu", &spec).unwrap();
        aws.set_node_classes(HashMap::from([("train".to_string(), Arc::new(class))]));
        aws
    }

    /// Every instance moto holds carrying this world's cluster tag and the
    /// claim tag `claim`.
    pub async fn instances_of(&self, claim: &str) -> Vec<aws_sdk_ec2::types::Instance> {
        let out = self
            .ec2
            .describe_instances()
            .filters(
                Filter::builder()
                    .name(format!("tag:{}", l::TAG_CLUSTER))
                    .values(&self.cluster)
                    .build(),
            )
            .filters(
                Filter::builder()
                    .name(format!("tag:{}", l::TAG_NODECLAIM))
                    .values(claim)
                    .build(),
            )
            .send()
            .await
            .unwrap();
        out.reservations()
            .iter()
            .flat_map(|r| r.instances().iter().cloned())
            .collect()
    }

    /// The launch templates tagged with this world's cluster.
    pub async fn launch_templates(&self) -> Vec<aws_sdk_ec2::types::LaunchTemplate> {
        let out = self
            .ec2
            .describe_launch_templates()
            .filters(
                Filter::builder()
                    .name(format!("tag:{}", l::TAG_CLUSTER))
                    .values(&self.cluster)
                    .build(),
            )
            .send()
            .await
            .unwrap();
        out.launch_templates().to_vec()
    }

    pub async fn state_of(&self, id: &str) -> String {
        let out = self
            .ec2
            .describe_instances()
            .instance_ids(id)
            .send()
            .await
            .unwrap();
        out.reservations()[0].instances()[0]
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_string())
            .unwrap()
    }
}

/// The image ID this world's parameter of `variant` holds.
pub fn image_of(variant: ImageVariant) -> String {
    format!("ami-{}", variant.to_string().replace('/', "-"))
}

/// A launch of `name` in pool `train`.
pub fn claim(
    name: &str,
    instance_type: &str,
    zone: &str,
    capacity_type: CapacityType,
) -> ClaimRequest {
    ClaimRequest {
        cluster_placement: false,
        claim: name.into(),
        nodepool: "train".into(),
        offering: OfferingKey {
            instance_type: instance_type.into(),
            zone: zone.into(),
            capacity_type,
        },
        price_per_hour: 0.42,
        pods: vec![],
        prewarm_window: None,
        reservation: None,
    }
}

/// The template of a launch in pool `train`.
pub fn template() -> NodeTemplate {
    NodeTemplate {
        labels: [
            (l::NODEPOOL, "train"),
            (l::CAPACITY_TYPE, "spot"),
            (l::INSTANCE_TYPE, "g5.xlarge"),
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
