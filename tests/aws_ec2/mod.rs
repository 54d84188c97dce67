//! The EC2 provider against moto server (launch, retry after a crash,
//! terminate, garbage collection), and against replayed EC2 answers for
//! what moto cannot fake (insufficient capacity, throttling).
//!
//! What moto 5.2.5 does differently from EC2, and how the tests adapt (the
//! provider's code is written for EC2):
//! - `CreateFleet` ignores `ClientToken`: the crash-retry test relies on the
//!   provider's describe-before-launch, which is what a crash after EC2
//!   made the instance visible exercises anyway.
//! - `CreateFleet` tags instances but not volumes (`ResourceType=volume` is
//!   dropped), so volume tags are not checked here.
//! - moto refuses parameters under `/aws/`, so the EKS image parameters
//!   are put under a root of the test's own and the resolver is pointed at
//!   it ([`Resolver::with_parameter_root`]); moto keeps any image ID (AMI
//!   validation is off by default), which the tests check.
//! - The launch template's security groups, instance profile and block
//!   devices are not applied to fleet instances; the tests check them in the
//!   launch template moto stores instead.
//!
//! The cases are in modules: [`node_classes`] (images, subnets, security
//! groups, profiles and the reconciler's status), [`instances`] (launch,
//! retry, terminate, reboot, garbage collection, launch templates) and
//! [`replay`] (replayed EC2 answers).

use crate::support;

use aws_sdk_ec2::types::{InstanceAttributeName, InstanceLifecycleType};
use quartermaster::api::labels as l;
use quartermaster::api::nodeclass::EC2NodeClassSpec;
use quartermaster::catalog::CapacityType;
use quartermaster::cloud::aws::ec2::{AwsCloud, ImageVariant, NodeClass, Settings};
use quartermaster::cloud::aws::nodeclass::reasons;
use quartermaster::cloud::{self, CloudProvider, Error, InstanceState, NodeTemplate};
use quartermaster::core::{ClaimRequest, OfferingKey};
use std::collections::HashMap;
use std::sync::Arc;
use support::aws_world::{claim, image_of, template, World, ZONES};
use support::moto::unique;

mod instances;
mod node_classes;
mod replay;

fn tag_of<'a>(i: &'a aws_sdk_ec2::types::Instance, key: &str) -> Option<&'a str> {
    i.tags()
        .iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
}

fn id_of(provider_id: &str) -> String {
    cloud::instance_id_of(provider_id).to_string()
}
