//! One launch as one EC2 `CreateFleet` of type `instant`: the ranked
//! [`Choice`]s (the planned offering first, then the fallbacks) become
//! prioritized overrides, the ownership tags go on the instance, its volumes
//! and the fleet, and a client token derived from the cluster, the claim and
//! the choices makes a retried request return the first one's result instead
//! of launching again. [`outcome`] reads the answer: one instance, or the
//! error of the best-ranked choice, classified by `errors`.

use crate::catalog::CapacityType;
use crate::cloud::aws::errors::Step;
use crate::cloud::Error;
use crate::core::OfferingKey;
use aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder;
use aws_sdk_ec2::operation::create_fleet::CreateFleetOutput;
use aws_sdk_ec2::types::{
    DefaultTargetCapacityType, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetOnDemandAllocationStrategy, FleetType, InstanceType, OnDemandOptionsRequest, ResourceType,
    SpotAllocationStrategy, SpotOptionsRequest, Tag, TagSpecification,
    TargetCapacitySpecificationRequest,
};
use sha2::{Digest, Sha256};

/// A subnet a launch may use, as `DescribeSubnets` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Subnet {
    /// `subnet-...`.
    pub id: String,
    /// Zone ID (`use1-az4`): the catalog's zone.
    pub zone_id: String,
    /// Zone name in this account (`us-east-1d`): the provider ID's.
    pub zone_name: String,
    /// Free IPv4 addresses.
    pub free_addresses: i32,
}

/// One ranked alternative of a launch: an offering, and the subnet that
/// puts the instance in the offering's zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// What to buy.
    pub offering: OfferingKey,
    /// Where.
    pub subnet: Subnet,
}

/// The `CreateFleet` client token of a launch: SHA-256 (64 hex characters,
/// EC2's limit) of the cluster, the claim, the launch template, each ranked
/// offering and the tags. The same launch retried (by the SDK after a
/// timeout, or by a restarted controller before the instance is visible to
/// `DescribeInstances`) gets the first request's fleet back, not a second
/// instance. The subnets are left out on purpose: they are ranked by free
/// addresses, which the first launch itself changes, so a retry may pick
/// another one; with the subnet in the token that retry would launch a
/// second instance under the same claim. A retry whose subnets did change
/// gets `IdempotentParameterMismatch` from EC2 instead, which waits for the
/// first launch's instance to be seen (see `errors::TRANSIENT_CODES`). A
/// launch that differs otherwise (a new template, the claim re-planned onto
/// other offerings) gets a new token.
pub fn client_token(
    cluster: &str,
    claim: &str,
    template_name: &str,
    choices: &[Choice],
    tags: &[(String, String)],
) -> String {
    let mut text = format!("{cluster}\n{claim}\ntemplate {template_name}");
    for c in choices {
        text.push_str(&format!("\n{}", c.offering));
    }
    let mut tags: Vec<&(String, String)> = tags.iter().collect();
    tags.sort();
    for (k, v) in tags {
        text.push_str(&format!("\ntag {k:?}={v:?}"));
    }
    super::template::hex(&Sha256::digest(text.as_bytes()))
}

/// Fills `request` (a `CreateFleet` call): type `instant`, one unit of
/// capacity of the choices' capacity type, one override per choice with
/// priorities in rank order; `prioritized` allocation for on-demand,
/// `capacity-optimized-prioritized` for spot (EC2 still weighs spot pool
/// depth, using the ranks as a tie-breaker); `tags` on the instance, its
/// volumes and the fleet. Reserved capacity is bought as on-demand (the
/// launch template targets the reservation) or, for a Capacity Block, as
/// `capacity-block` (`capacity_block`).
///
/// Every choice must have the capacity type of the first (a fleet buys one
/// market for a single instance); the caller filters.
pub fn request(
    request: CreateFleetFluentBuilder,
    template_name: &str,
    choices: &[Choice],
    tags: &[(String, String)],
    token: String,
    capacity_block: bool,
) -> CreateFleetFluentBuilder {
    let spot = choices
        .first()
        .is_some_and(|c| c.offering.capacity_type == CapacityType::Spot);
    let mut config = FleetLaunchTemplateConfigRequest::builder().launch_template_specification(
        FleetLaunchTemplateSpecificationRequest::builder()
            .launch_template_name(template_name)
            .version("$Latest")
            .build(),
    );
    for (rank, choice) in choices.iter().enumerate() {
        config = config.overrides(
            FleetLaunchTemplateOverridesRequest::builder()
                .instance_type(InstanceType::from(choice.offering.instance_type.as_str()))
                .subnet_id(&choice.subnet.id)
                .priority(rank as f64)
                .build(),
        );
    }
    let tags: Vec<Tag> = tags
        .iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect();
    let mut request = request
        .r#type(FleetType::Instant)
        .client_token(token)
        .launch_template_configs(config.build())
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(if spot {
                    DefaultTargetCapacityType::Spot
                } else if capacity_block {
                    DefaultTargetCapacityType::CapacityBlock
                } else {
                    DefaultTargetCapacityType::OnDemand
                })
                .build(),
        );
    request = if spot {
        request.spot_options(
            SpotOptionsRequest::builder()
                .allocation_strategy(SpotAllocationStrategy::CapacityOptimizedPrioritized)
                .build(),
        )
    } else {
        request.on_demand_options(
            OnDemandOptionsRequest::builder()
                .allocation_strategy(FleetOnDemandAllocationStrategy::Prioritized)
                .build(),
        )
    };
    for resource in [
        ResourceType::Instance,
        ResourceType::Volume,
        ResourceType::Fleet,
    ] {
        request = request.tag_specifications(
            TagSpecification::builder()
                .resource_type(resource)
                .set_tags(Some(tags.clone()))
                .build(),
        );
    }
    request
}

/// The rank of the choice an override (instance type, subnet) stands for;
/// the first choice when the answer names no override.
fn rank_of(instance_type: Option<&str>, subnet: Option<&str>, choices: &[Choice]) -> usize {
    choices
        .iter()
        .position(|c| {
            instance_type.is_none_or(|t| t == c.offering.instance_type)
                && subnet.is_none_or(|s| s == c.subnet.id)
        })
        .unwrap_or(0)
}

/// What a `CreateFleet` answer means for a launch of `claim` over `choices`:
/// the launched instance's ID and the rank of the choice EC2 used; or, when
/// no instance was launched, the error of the best-ranked choice that
/// failed (capacity codes become [`Error::InsufficientCapacity`] for that
/// choice's offering); or, for an answer with neither instances nor errors,
/// [`Error::NotReady`] (never a silent success). Errors beside a launched
/// instance (other overrides that failed) are logged.
///
/// # Errors
/// As above.
pub fn outcome(
    out: &CreateFleetOutput,
    claim: &str,
    choices: &[Choice],
) -> Result<(String, usize), Error> {
    let overrides_of = |lto: Option<&aws_sdk_ec2::types::LaunchTemplateAndOverridesResponse>| {
        let o = lto.and_then(|l| l.overrides());
        (
            o.and_then(|o| o.instance_type())
                .map(|t| t.as_str().to_string()),
            o.and_then(|o| o.subnet_id()).map(str::to_string),
        )
    };
    let launched = out.instances().iter().find_map(|i| {
        let id = i.instance_ids().first()?;
        let (itype, subnet) = overrides_of(i.launch_template_and_overrides());
        let itype = itype.or_else(|| i.instance_type().map(|t| t.as_str().to_string()));
        Some((
            id.clone(),
            rank_of(itype.as_deref(), subnet.as_deref(), choices),
        ))
    });
    let mut failures: Vec<(usize, &str, &str)> = out
        .errors()
        .iter()
        .map(|e| {
            let (itype, subnet) = overrides_of(e.launch_template_and_overrides());
            (
                rank_of(itype.as_deref(), subnet.as_deref(), choices),
                e.error_code().unwrap_or("UnknownError"),
                e.error_message().unwrap_or("(no message)"),
            )
        })
        .collect();
    failures.sort_by_key(|f| f.0);
    if let Some((id, rank)) = launched {
        for (r, code, message) in &failures {
            if let Some(c) = choices.get(*r) {
                tracing::info!(claim, offering = %c.offering, code, message, "fleet skipped an override");
            }
        }
        return Ok((id, rank));
    }
    let fleet = out.fleet_id().unwrap_or("(no fleet id)");
    match failures.first() {
        Some(&(rank, code, message)) => {
            let step = Step {
                action: "CreateFleet",
                claim,
                offering: choices.get(rank).map(|c| &c.offering),
            };
            Err(step.error(code, &format!("{message} (fleet {fleet})")))
        }
        None => Err(Error::NotReady {
            claim: claim.to_string(),
            reason: format!(
                "CreateFleet returned neither an instance nor an error (fleet {fleet})"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::types::{
        CreateFleetError, CreateFleetInstance, FleetLaunchTemplateOverrides,
        LaunchTemplateAndOverridesResponse,
    };

    fn choice(zone: &str, subnet: &str, capacity_type: CapacityType) -> Choice {
        Choice {
            offering: OfferingKey {
                instance_type: "g5.xlarge".into(),
                zone: zone.into(),
                capacity_type,
            },
            subnet: Subnet {
                id: subnet.into(),
                zone_id: zone.into(),
                zone_name: format!("name-{zone}"),
                free_addresses: 10,
            },
        }
    }

    fn choices() -> Vec<Choice> {
        vec![
            choice("use1-az4", "subnet-a", CapacityType::Spot),
            choice("use1-az1", "subnet-b", CapacityType::Spot),
        ]
    }

    fn overrides(subnet: &str) -> LaunchTemplateAndOverridesResponse {
        LaunchTemplateAndOverridesResponse::builder()
            .overrides(
                FleetLaunchTemplateOverrides::builder()
                    .instance_type(InstanceType::G5Xlarge)
                    .subnet_id(subnet)
                    .build(),
            )
            .build()
    }

    fn error(subnet: &str, code: &str) -> CreateFleetError {
        CreateFleetError::builder()
            .launch_template_and_overrides(overrides(subnet))
            .error_code(code)
            .error_message("We currently do not have sufficient capacity")
            .build()
    }

    #[test]
    fn a_fallback_instance_is_a_launch_in_the_fallbacks_zone() {
        let out = CreateFleetOutput::builder()
            .fleet_id("fleet-1")
            .errors(error("subnet-a", "InsufficientInstanceCapacity"))
            .instances(
                CreateFleetInstance::builder()
                    .launch_template_and_overrides(overrides("subnet-b"))
                    .instance_ids("i-1")
                    .build(),
            )
            .build();
        assert_eq!(outcome(&out, "c", &choices()).unwrap(), ("i-1".into(), 1));
    }

    #[test]
    fn no_instance_is_the_best_ranked_choices_error() {
        let out = CreateFleetOutput::builder()
            .fleet_id("fleet-1")
            .errors(error("subnet-b", "Unsupported"))
            .errors(error("subnet-a", "InsufficientInstanceCapacity"))
            .build();
        assert_eq!(
            outcome(&out, "c", &choices()).unwrap_err(),
            Error::InsufficientCapacity {
                claim: "c".into(),
                offering: choices()[0].offering.clone(),
                code: "InsufficientInstanceCapacity".into(),
            }
        );
    }

    #[test]
    fn an_empty_fleet_without_errors_is_not_a_success() {
        let out = CreateFleetOutput::builder().fleet_id("fleet-9").build();
        let err = outcome(&out, "c", &choices()).unwrap_err();
        assert!(matches!(err, Error::NotReady { .. }), "{err:?}");
        assert!(err.to_string().contains("fleet-9"), "{err}");
    }

    fn token(cluster: &str, claim: &str, choices: &[Choice]) -> String {
        let tags = [("quartermaster.dev/cluster".to_string(), cluster.to_string())];
        client_token(cluster, claim, "quartermaster/prod/abc", choices, &tags)
    }

    #[test]
    fn the_token_is_stable_per_claim_and_offerings_and_fits_ec2s_limit() {
        let t = token("prod", "c", &choices());
        assert_eq!(t.len(), 64);
        assert_eq!(t, token("prod", "c", &choices()));
        assert_ne!(t, token("prod", "d", &choices()));
        assert_ne!(t, token("prod", "c", &choices()[..1]));
        assert_ne!(t, token("staging", "c", &choices()));
    }

    #[test]
    fn a_retried_launch_keeps_its_token_when_free_addresses_pick_another_subnet() {
        // The first launch took addresses from its subnet; the retry ranks
        // another subnet of the zone first. Same token: EC2 returns the
        // first launch (or refuses the mismatch), never a second instance.
        let t = token("prod", "c", &choices());
        let mut other_subnet = choices();
        other_subnet[0].subnet.id = "subnet-z".into();
        other_subnet[0].subnet.free_addresses -= 1;
        assert_eq!(t, token("prod", "c", &other_subnet));
    }

    #[test]
    fn the_token_changes_with_anything_else_the_request_carries() {
        let t = token("prod", "c", &choices());
        let tags = [("quartermaster.dev/cluster".to_string(), "prod".to_string())];
        assert_ne!(
            t,
            client_token("prod", "c", "quartermaster/prod/def", &choices(), &tags)
        );
        let more_tags = [tags[0].clone(), ("team".to_string(), "ml".to_string())];
        assert_ne!(
            t,
            client_token(
                "prod",
                "c",
                "quartermaster/prod/abc",
                &choices(),
                &more_tags
            )
        );
    }
}
