//! Resolving an `EC2NodeClass` against AWS: AMI aliases through the EKS
//! SSM public parameters (one image per architecture and accelerator),
//! other AMI terms through `DescribeImages`, subnets, security groups, and
//! the instance profile (or the role's) through IAM. What each part found,
//! or why it found nothing, is a [`Resolved`]; the controller turns it into
//! the class's status and, when everything resolved, into the
//! [`NodeClass`] launches use ([`Resolved::node_class`]). Nothing here
//! decides or writes to Kubernetes.

use super::ec2::settings::ANY_ACCELERATOR;
use super::ec2::{describe_terms, find_security_groups, find_subnets, ImageVariant, NodeClass};
use crate::api::nodeclass::{
    node_class_problems, AmiAlias, AmiSelectorTerm, EC2NodeClassSpec, ResolvedAmi,
    ResolvedSecurityGroup, ResolvedSubnet,
};
use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::Filter;
use std::collections::BTreeMap;

/// Where the EKS-optimized AMI parameters live.
pub const EKS_PARAMETER_ROOT: &str = "/aws/service/eks/optimized-ami";

/// Reasons of a node class's conditions when a part does not resolve.
pub mod reasons {
    /// The spec breaks a rule the schema may not have caught.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// An alias needs the cluster's Kubernetes version (`--aws-config`).
    pub const KUBERNETES_VERSION_UNKNOWN: &str = "KubernetesVersionUnknown";
    /// No AMI selector term found an image.
    pub const AMIS_NOT_FOUND: &str = "AMIsNotFound";
    /// No subnet matches the terms.
    pub const SUBNETS_NOT_FOUND: &str = "SubnetsNotFound";
    /// No security group matches the terms.
    pub const SECURITY_GROUPS_NOT_FOUND: &str = "SecurityGroupsNotFound";
    /// The instance profile does not exist.
    pub const INSTANCE_PROFILE_NOT_FOUND: &str = "InstanceProfileNotFound";
    /// The role does not exist, or has no instance profile.
    pub const ROLE_NOT_FOUND: &str = "RoleNotFound";
    /// The security groups do not allow all traffic to and from themselves,
    /// which Elastic Fabric Adapter needs.
    pub const EFA_RULE_MISSING: &str = "EFASecurityGroupRuleMissing";
    /// An AWS call failed (permissions, throttling): retried next round.
    pub const AWS_ERROR: &str = "AWSError";
}

/// Why one part of a node class did not resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// A CamelCase reason ([`reasons`]).
    pub reason: &'static str,
    /// What is wrong, naming the term or resource.
    pub message: String,
}

impl Problem {
    fn new(reason: &'static str, message: impl Into<String>) -> Problem {
        Problem {
            reason,
            message: message.into(),
        }
    }

    fn aws(action: &str, e: &impl ProvideErrorMetadata, fallback: &dyn std::fmt::Display) -> Self {
        let code = e.code().unwrap_or("unknown");
        let message = e
            .message()
            .map(str::to_string)
            .unwrap_or(fallback.to_string());
        Problem::new(reasons::AWS_ERROR, format!("{action}: {code}: {message}"))
    }
}

/// What resolving a node class found, part by part.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The image of each variant.
    pub amis: Result<Vec<ResolvedAmi>, Problem>,
    /// The subnets, sorted by ID.
    pub subnets: Result<Vec<ResolvedSubnet>, Problem>,
    /// The security groups, sorted by ID.
    pub security_groups: Result<Vec<ResolvedSecurityGroup>, Problem>,
    /// The instance profile name.
    pub instance_profile: Result<String, Problem>,
    /// Whether the security groups allow all traffic to and from
    /// themselves, as EFA needs ([`efa_rule_problem`]); advisory, reported
    /// only for classes of pools that ask for EFA.
    pub efa_rule: Result<(), Problem>,
}

impl Resolved {
    /// Every part failing with the same problem (an invalid spec is not
    /// looked up at all).
    pub fn failed(problem: Problem) -> Resolved {
        Resolved {
            amis: Err(problem.clone()),
            subnets: Err(problem.clone()),
            security_groups: Err(problem.clone()),
            instance_profile: Err(problem.clone()),
            efa_rule: Err(problem),
        }
    }

    /// The first problem, if any part did not resolve.
    pub fn first_problem(&self) -> Option<&Problem> {
        self.amis
            .as_ref()
            .err()
            .or(self.subnets.as_ref().err())
            .or(self.security_groups.as_ref().err())
            .or(self.instance_profile.as_ref().err())
    }

    /// The node class launches use, when every part resolved: the spec
    /// with the images and the instance profile found.
    pub fn node_class(&self, name: &str, spec: &EC2NodeClassSpec) -> Option<NodeClass> {
        let (Ok(images), Ok(_), Ok(_), Ok(profile)) = (
            &self.amis,
            &self.subnets,
            &self.security_groups,
            &self.instance_profile,
        ) else {
            return None;
        };
        Some(NodeClass {
            name: name.to_string(),
            images: images.clone(),
            subnet_selector_terms: spec.subnet_selector_terms.clone(),
            security_group_selector_terms: spec.security_group_selector_terms.clone(),
            instance_profile: profile.clone(),
            block_device_mappings: spec.block_device_mappings.clone(),
            instance_store_policy: spec.instance_store_policy,
            metadata_options: spec.metadata_options.clone(),
            user_data: spec.user_data.clone(),
            tags: spec.tags.clone(),
            capacity_reservation_selector_terms: spec.capacity_reservation_selector_terms.clone(),
        })
    }
}

/// Resolves node classes with EC2, SSM and IAM clients.
#[derive(Debug, Clone)]
pub struct Resolver {
    ec2: aws_sdk_ec2::Client,
    ssm: aws_sdk_ssm::Client,
    iam: aws_sdk_iam::Client,
    kubernetes_version: Option<String>,
    parameter_root: String,
}

impl Resolver {
    /// A resolver with clients built from `sdk`; aliases resolve to the
    /// images of `kubernetes_version` (`1.33`).
    pub fn new(sdk: &aws_config::SdkConfig, kubernetes_version: Option<String>) -> Resolver {
        Resolver {
            ec2: aws_sdk_ec2::Client::new(sdk),
            ssm: aws_sdk_ssm::Client::new(sdk),
            iam: aws_sdk_iam::Client::new(sdk),
            kubernetes_version,
            parameter_root: EKS_PARAMETER_ROOT.into(),
        }
    }

    /// The same resolver reading the image parameters under `root` instead
    /// of [`EKS_PARAMETER_ROOT`] (tests: moto reserves `/aws/...` names).
    pub fn with_parameter_root(mut self, root: &str) -> Resolver {
        self.parameter_root = root.trim_end_matches('/').to_string();
        self
    }

    /// The SSM parameter of `variant`'s image for `alias`.
    pub fn parameter(&self, version: &str, alias: &AmiAlias, variant: ImageVariant) -> String {
        let (arch, driver) = (variant.arch.as_str(), variant.driver.as_str());
        let release = match &alias.version {
            None => "recommended".to_string(),
            Some(v) => format!("amazon-eks-node-al2023-{arch}-{driver}-{version}-{v}"),
        };
        format!(
            "{}/{version}/amazon-linux-2023/{arch}/{driver}/{release}/image_id",
            self.parameter_root
        )
    }

    /// Resolves every part of `spec` (none when the spec itself is invalid).
    pub async fn resolve(&self, spec: &EC2NodeClassSpec) -> Resolved {
        let problems = node_class_problems(spec);
        if let Some((field, why)) = problems.first() {
            return Resolved::failed(Problem::new(
                reasons::INVALID_SPEC,
                format!("{field}: {why}"),
            ));
        }
        let (security_groups, efa_rule) = self.security_groups(spec).await;
        Resolved {
            amis: self.amis(&spec.ami_selector_terms).await,
            subnets: self.subnets(spec).await,
            security_groups,
            instance_profile: self.instance_profile(spec).await,
            efa_rule,
        }
    }

    async fn amis(&self, terms: &[AmiSelectorTerm]) -> Result<Vec<ResolvedAmi>, Problem> {
        let found = match terms.iter().find_map(|t| t.alias.as_deref()) {
            Some(alias) => self.alias(alias).await?,
            None => self.images(terms).await?,
        };
        if found.is_empty() {
            let what = terms
                .iter()
                .map(|t| format!("{t:?}"))
                .collect::<Vec<_>>()
                .join(" | ");
            return Err(Problem::new(
                reasons::AMIS_NOT_FOUND,
                format!("no image matches amiSelectorTerms {what}"),
            ));
        }
        Ok(found)
    }

    /// The images of an alias: one `GetParameters` for every variant; a
    /// variant without a parameter has no image (the planner then avoids
    /// its instance types).
    async fn alias(&self, alias: &str) -> Result<Vec<ResolvedAmi>, Problem> {
        let parsed = AmiAlias::parse(alias).map_err(|e| Problem::new(reasons::INVALID_SPEC, e))?;
        let Some(version) = &self.kubernetes_version else {
            return Err(Problem::new(
                reasons::KUBERNETES_VERSION_UNKNOWN,
                format!(
                    "alias {alias} needs the cluster's Kubernetes version: set kubernetesVersion in --aws-config"
                ),
            ));
        };
        let names: BTreeMap<String, ImageVariant> = ImageVariant::ALL
            .iter()
            .map(|v| (self.parameter(version, &parsed, *v), *v))
            .collect();
        let out = self
            .ssm
            .get_parameters()
            .set_names(Some(names.keys().cloned().collect()))
            .send()
            .await
            .map_err(|e| Problem::aws("ssm:GetParameters", &e, &e))?;
        let mut found: Vec<ResolvedAmi> = out
            .parameters()
            .iter()
            .filter_map(|p| {
                let variant = names.get(p.name()?)?;
                Some(ResolvedAmi {
                    id: p.value()?.to_string(),
                    name: None,
                    architecture: variant.arch.as_str().into(),
                    accelerator: variant.driver.as_str().into(),
                })
            })
            .collect();
        found.sort_by(|a, b| {
            (&a.architecture, &a.accelerator).cmp(&(&b.architecture, &b.accelerator))
        });
        if found.is_empty() {
            return Err(Problem::new(
                reasons::AMIS_NOT_FOUND,
                format!(
                    "alias {alias}: no EKS AL2023 image for Kubernetes {version} (no parameter under {}/{version}/amazon-linux-2023)",
                    self.parameter_root
                ),
            ));
        }
        Ok(found)
    }

    /// Images of ID, name or tag terms: the newest per architecture, each
    /// serving every accelerator of its architecture.
    async fn images(&self, terms: &[AmiSelectorTerm]) -> Result<Vec<ResolvedAmi>, Problem> {
        let mut newest: BTreeMap<String, (String, ResolvedAmi)> = BTreeMap::new();
        for term in terms {
            let mut filters = super::ec2::selector_filters(&term.tags);
            if let Some(name) = &term.name {
                filters.push(Filter::builder().name("name").values(name).build());
            }
            let mut req = self.ec2.describe_images().set_filters(Some(filters));
            if let Some(id) = &term.id {
                req = req.image_ids(id);
            }
            if let Some(owner) = &term.owner {
                req = req.owners(owner);
            }
            let out = match req.send().await {
                Ok(out) => out,
                Err(e) if e.code() == Some("InvalidAMIID.NotFound") => continue,
                Err(e) => return Err(Problem::aws("ec2:DescribeImages", &e, &e)),
            };
            for image in out.images() {
                let (Some(id), Some(arch)) = (image.image_id(), image.architecture()) else {
                    continue;
                };
                let arch = match arch.as_str() {
                    "arm64" => "arm64",
                    "x86_64" => "x86_64",
                    _ => continue,
                };
                let created = image.creation_date().unwrap_or_default().to_string();
                let candidate = ResolvedAmi {
                    id: id.to_string(),
                    name: image.name().map(str::to_string),
                    architecture: arch.into(),
                    accelerator: ANY_ACCELERATOR.into(),
                };
                let better = newest
                    .get(arch)
                    .is_none_or(|(c, old)| (&created, &candidate.id) > (c, &old.id));
                if better {
                    newest.insert(arch.to_string(), (created, candidate));
                }
            }
        }
        Ok(newest.into_values().map(|(_, ami)| ami).collect())
    }

    async fn subnets(&self, spec: &EC2NodeClassSpec) -> Result<Vec<ResolvedSubnet>, Problem> {
        let terms = &spec.subnet_selector_terms;
        let found = find_subnets(&self.ec2, terms)
            .await
            .map_err(|e| Problem::aws("ec2:DescribeSubnets", &e, &e))?;
        if found.is_empty() {
            return Err(Problem::new(
                reasons::SUBNETS_NOT_FOUND,
                format!(
                    "no subnet matches subnetSelectorTerms {}",
                    describe_terms(terms)
                ),
            ));
        }
        let mut zone_ids: BTreeMap<String, String> = BTreeMap::new();
        if found.iter().any(|s| s.zone_id.is_empty()) {
            let zones = self
                .ec2
                .describe_availability_zones()
                .send()
                .await
                .map_err(|e| Problem::aws("ec2:DescribeAvailabilityZones", &e, &e))?;
            for z in zones.availability_zones() {
                if let (Some(name), Some(id)) = (z.zone_name(), z.zone_id()) {
                    zone_ids.insert(name.into(), id.into());
                }
            }
        }
        let mut out: Vec<ResolvedSubnet> = found
            .into_iter()
            .map(|s| ResolvedSubnet {
                zone_id: if s.zone_id.is_empty() {
                    zone_ids.get(&s.zone_name).cloned().unwrap_or_default()
                } else {
                    s.zone_id
                },
                id: s.id,
                zone: s.zone_name,
                available_ip_address_count: s.free_addresses,
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// The security groups, and whether they allow EFA's traffic.
    async fn security_groups(
        &self,
        spec: &EC2NodeClassSpec,
    ) -> (
        Result<Vec<ResolvedSecurityGroup>, Problem>,
        Result<(), Problem>,
    ) {
        let terms = &spec.security_group_selector_terms;
        let found = match find_security_groups(&self.ec2, terms).await {
            Ok(found) => found,
            Err(e) => {
                let p = Problem::aws("ec2:DescribeSecurityGroups", &e, &e);
                return (Err(p.clone()), Err(p));
            }
        };
        if found.is_empty() {
            let p = Problem::new(
                reasons::SECURITY_GROUPS_NOT_FOUND,
                format!(
                    "no security group matches securityGroupSelectorTerms {}",
                    describe_terms(terms)
                ),
            );
            return (Err(p.clone()), Err(p));
        }
        let efa = match efa_rule_problem(&found) {
            None => Ok(()),
            Some(why) => Err(Problem::new(reasons::EFA_RULE_MISSING, why)),
        };
        let groups = found
            .into_iter()
            .filter_map(|g| {
                Some(ResolvedSecurityGroup {
                    id: g.group_id?,
                    name: g.group_name,
                })
            })
            .collect();
        (Ok(groups), efa)
    }

    /// The instance profile: the named one if it exists, else the first
    /// (by name) of the role's.
    async fn instance_profile(&self, spec: &EC2NodeClassSpec) -> Result<String, Problem> {
        let not_found = |e: &dyn ProvideErrorMetadata| e.code() == Some("NoSuchEntity");
        if let Some(name) = &spec.instance_profile {
            return match self
                .iam
                .get_instance_profile()
                .instance_profile_name(name)
                .send()
                .await
            {
                Ok(_) => Ok(name.clone()),
                Err(e) if not_found(&e) => Err(Problem::new(
                    reasons::INSTANCE_PROFILE_NOT_FOUND,
                    format!("instance profile {name:?} does not exist"),
                )),
                Err(e) => Err(Problem::aws("iam:GetInstanceProfile", &e, &e)),
            };
        }
        let role = spec.role.as_deref().unwrap_or_default();
        let out = match self
            .iam
            .list_instance_profiles_for_role()
            .role_name(role)
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) if not_found(&e) => {
                return Err(Problem::new(
                    reasons::ROLE_NOT_FOUND,
                    format!("role {role:?} does not exist"),
                ))
            }
            Err(e) => return Err(Problem::aws("iam:ListInstanceProfilesForRole", &e, &e)),
        };
        let mut names: Vec<&str> = out
            .instance_profiles()
            .iter()
            .map(|p| p.instance_profile_name())
            .collect();
        names.sort();
        names.first().map(|n| n.to_string()).ok_or_else(|| {
            Problem::new(
                reasons::ROLE_NOT_FOUND,
                format!(
                    "role {role:?} has no instance profile: create one for it (aws iam create-instance-profile, add-role-to-instance-profile) or set instanceProfile"
                ),
            )
        })
    }
}

/// Why `groups` (a node class's security groups, all on each interface)
/// lack what Elastic Fabric Adapter needs, if they do: an inbound rule
/// allowing all traffic (protocol `-1`) from one of the groups themselves,
/// and an outbound one to one of them (or to `0.0.0.0/0`, the default
/// egress rule). EFA's OS-bypass traffic is not IP: a CIDR rule does not
/// let it in.
pub fn efa_rule_problem(groups: &[aws_sdk_ec2::types::SecurityGroup]) -> Option<String> {
    use aws_sdk_ec2::types::IpPermission;
    let ids: Vec<&str> = groups.iter().filter_map(|g| g.group_id()).collect();
    let all = |p: &IpPermission| p.ip_protocol() == Some("-1");
    let from_ours = |p: &IpPermission| {
        all(p)
            && p.user_id_group_pairs()
                .iter()
                .any(|pair| pair.group_id().is_some_and(|id| ids.contains(&id)))
    };
    let anywhere = |p: &IpPermission| {
        all(p)
            && p.ip_ranges()
                .iter()
                .any(|r| r.cidr_ip() == Some("0.0.0.0/0"))
    };
    let inbound = groups
        .iter()
        .flat_map(|g| g.ip_permissions())
        .any(from_ours);
    let outbound = groups
        .iter()
        .flat_map(|g| g.ip_permissions_egress())
        .any(|p| from_ours(p) || anywhere(p));
    let missing: Vec<&str> = [
        (!inbound).then_some("inbound from"),
        (!outbound).then_some("outbound to"),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "security groups {} have no rule allowing all traffic (protocol -1) {} themselves, \
             as EFA needs all traffic allowed both ways between the groups' members",
            ids.join(", "),
            missing.join(" nor ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{IpPermission, IpRange, SecurityGroup, UserIdGroupPair};

    fn all_traffic(group: Option<&str>, cidr: Option<&str>) -> IpPermission {
        IpPermission::builder()
            .ip_protocol("-1")
            .set_user_id_group_pairs(
                group.map(|g| vec![UserIdGroupPair::builder().group_id(g).build()]),
            )
            .set_ip_ranges(cidr.map(|c| vec![IpRange::builder().cidr_ip(c).build()]))
            .build()
    }

    fn group(id: &str, inbound: Vec<IpPermission>, outbound: Vec<IpPermission>) -> SecurityGroup {
        SecurityGroup::builder()
            .group_id(id)
            .set_ip_permissions(Some(inbound))
            .set_ip_permissions_egress(Some(outbound))
            .build()
    }

    #[test]
    fn efa_needs_all_traffic_in_from_and_out_to_the_groups_themselves() {
        let default_egress = || all_traffic(None, Some("0.0.0.0/0"));
        // Self-referencing inbound, default egress: fine.
        let ok = group(
            "sg-1",
            vec![all_traffic(Some("sg-1"), None)],
            vec![default_egress()],
        );
        assert_eq!(efa_rule_problem(&[ok]), None);
        // Another of the class's groups may carry the rule.
        let nodes = group("sg-1", vec![], vec![default_egress()]);
        let efa = group("sg-2", vec![all_traffic(Some("sg-1"), None)], vec![]);
        assert_eq!(efa_rule_problem(&[nodes.clone(), efa]), None);
        // A CIDR rule, or a group outside the class, is not enough.
        let cidr = group(
            "sg-1",
            vec![all_traffic(None, Some("10.0.0.0/8"))],
            vec![default_egress()],
        );
        let why = efa_rule_problem(&[cidr]).unwrap();
        assert!(
            why.contains("sg-1") && why.contains("inbound from"),
            "{why}"
        );
        assert!(!why.contains("outbound"), "{why}");
        let elsewhere = group("sg-1", vec![all_traffic(Some("sg-9"), None)], vec![]);
        let why = efa_rule_problem(&[elsewhere]).unwrap();
        assert!(why.contains("inbound from nor outbound to"), "{why}");
        // Only TCP from itself is not all traffic.
        let tcp = IpPermission::builder()
            .ip_protocol("tcp")
            .user_id_group_pairs(UserIdGroupPair::builder().group_id("sg-1").build())
            .build();
        assert!(efa_rule_problem(&[group("sg-1", vec![tcp], vec![default_egress()])]).is_some());
    }
}
