//! All EC2 error-code mapping lives here: which codes mean "this offering has
//! no capacity", "try again later" or "no such instance", and how an SDK
//! error or a `CreateFleet` error item becomes a [`cloud::Error`](Error).
//! Every message built here carries the EC2 error code, so that it can go
//! into a NodeClaim condition and an Event as it is.

use crate::cloud::Error;
use crate::core::OfferingKey;
use aws_sdk_ec2::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_types::error::display::DisplayErrorContext;

/// Codes saying that an offering (instance type x zone x capacity type) has
/// no capacity now, or cannot be bought there at all: the core marks the
/// offering unavailable for a while and plans the claim elsewhere. The
/// lower-case ones are spot request status codes, which `CreateFleet`
/// reports as error codes for spot.
pub const CAPACITY_CODES: &[&str] = &[
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InsufficientReservedInstanceCapacity",
    // A targeted capacity reservation (or Capacity Block) is full.
    "ReservationCapacityExceeded",
    "InsufficientFreeAddressesInSubnet",
    "UnfulfillableCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "Unsupported",
    "SpotMaxPriceTooLow",
    "capacity-not-available",
    "capacity-oversubscribed",
    "price-too-low",
];

/// Throttling codes. The SDK's standard retry strategy already retries
/// these with backoff; one that still reaches us is [`Error::NotReady`].
pub const THROTTLING_CODES: &[&str] = &[
    "RequestLimitExceeded",
    "Throttling",
    "ThrottlingException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "EC2ThrottledException",
];

/// Codes of transient failures and of EC2's eventual consistency (a launch
/// template or instance created a moment ago and not visible yet): the same
/// call succeeds later.
pub const TRANSIENT_CODES: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "IncorrectInstanceState",
    "InvalidLaunchTemplateName.NotFoundException",
    "InvalidLaunchTemplateId.NotFound",
    "InvalidLaunchTemplateId.VersionNotFound",
    // A `CreateFleet` with this launch's client token was made before with
    // other subnets (its answer was lost, and free addresses changed the
    // subnets' ranking since): its instance shows in `DescribeInstances`
    // soon, and the next try returns it (see `ec2::fleet::client_token`).
    "IdempotentParameterMismatch",
];

/// Codes saying that the instance asked about does not exist (any more).
pub const NOT_FOUND_CODES: &[&str] = &["InvalidInstanceID.NotFound"];

/// How an EC2 error code is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// [`CAPACITY_CODES`]: [`Error::InsufficientCapacity`] for the offering.
    Capacity,
    /// [`THROTTLING_CODES`]: [`Error::NotReady`].
    Throttled,
    /// [`TRANSIENT_CODES`]: [`Error::NotReady`].
    Transient,
    /// [`NOT_FOUND_CODES`]: [`Error::NotFound`].
    NotFound,
    /// Anything else (permissions, invalid parameters): [`Error::Other`].
    Other,
}

/// The class of an EC2 error code (exact, case-sensitive match).
pub fn class_of(code: &str) -> Class {
    if CAPACITY_CODES.contains(&code) {
        Class::Capacity
    } else if THROTTLING_CODES.contains(&code) {
        Class::Throttled
    } else if TRANSIENT_CODES.contains(&code) {
        Class::Transient
    } else if NOT_FOUND_CODES.contains(&code) {
        Class::NotFound
    } else {
        Class::Other
    }
}

/// What was being done when EC2 failed, for the classification and the
/// message.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The EC2 action (`CreateFleet`, `TerminateInstances`, ...).
    pub action: &'static str,
    /// The NodeClaim concerned (or a description such as `garbage collection`).
    pub claim: &'a str,
    /// The offering being launched, when the step is a launch: a capacity
    /// code is charged to it.
    pub offering: Option<&'a OfferingKey>,
}

impl Step<'_> {
    /// The [`Error`] for EC2 error `code` with `message`. A capacity code
    /// outside a launch (no offering to charge) is [`Error::NotReady`].
    pub fn error(&self, code: &str, message: &str) -> Error {
        let reason = format!("{} failed with {code}: {message}", self.action);
        match (class_of(code), self.offering) {
            (Class::Capacity, Some(offering)) => {
                tracing::warn!(
                    claim = self.claim,
                    %offering,
                    code,
                    message,
                    "{} found no capacity",
                    self.action
                );
                Error::InsufficientCapacity {
                    claim: self.claim.to_string(),
                    offering: offering.clone(),
                    code: code.to_string(),
                }
            }
            (Class::Capacity | Class::Throttled | Class::Transient, _) => Error::NotReady {
                claim: self.claim.to_string(),
                reason,
            },
            (Class::NotFound, _) => Error::NotFound {
                claim: self.claim.to_string(),
            },
            (Class::Other, _) => {
                Error::Other(format!("{} for {}: {reason}", self.action, self.claim))
            }
        }
    }

    /// The [`Error`] for a failed SDK call: by its EC2 error code when the
    /// service answered; [`Error::NotReady`] when it could not be reached or
    /// timed out (transient by nature); [`Error::Other`] when the request
    /// could not even be built.
    pub fn sdk_error<E, R>(&self, err: &SdkError<E, R>) -> Error
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        if let Some(code) = err.code() {
            return self.error(code, err.message().unwrap_or("(no message)"));
        }
        let detail = DisplayErrorContext(err).to_string();
        match err {
            SdkError::DispatchFailure(_)
            | SdkError::TimeoutError(_)
            | SdkError::ResponseError(_) => Error::NotReady {
                claim: self.claim.to_string(),
                reason: format!("{} failed without an EC2 error code: {detail}", self.action),
            },
            _ => Error::Other(format!(
                "{} for {} failed without an EC2 error code: {detail}",
                self.action, self.claim
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::CapacityType;

    fn offering() -> OfferingKey {
        OfferingKey {
            instance_type: "p5.48xlarge".into(),
            zone: "use1-az4".into(),
            capacity_type: CapacityType::Spot,
        }
    }

    fn launch(o: &OfferingKey) -> Step<'_> {
        Step {
            action: "CreateFleet",
            claim: "gpu-1",
            offering: Some(o),
        }
    }

    #[test]
    fn capacity_codes_charge_the_offering_being_launched() {
        let o = offering();
        for code in [
            "InsufficientInstanceCapacity",
            "UnfulfillableCapacity",
            "capacity-not-available",
        ] {
            assert_eq!(
                launch(&o).error(code, "no capacity"),
                Error::InsufficientCapacity {
                    claim: "gpu-1".into(),
                    offering: o.clone(),
                    code: code.to_string(),
                },
                "{code}"
            );
        }
    }

    #[test]
    fn throttling_and_eventual_consistency_are_not_ready_and_name_the_code() {
        let o = offering();
        for code in [
            "RequestLimitExceeded",
            "InvalidLaunchTemplateName.NotFoundException",
        ] {
            let err = launch(&o).error(code, "slow down");
            assert!(matches!(err, Error::NotReady { .. }), "{code}: {err:?}");
            assert!(err.is_retryable());
            assert!(err.to_string().contains(code), "{err}");
        }
    }

    #[test]
    fn unknown_codes_are_other_with_action_claim_and_code_in_the_message() {
        let o = offering();
        let err = launch(&o).error("UnauthorizedOperation", "You are not authorized");
        assert_eq!(
            err.to_string(),
            "CreateFleet for gpu-1: CreateFleet failed with UnauthorizedOperation: You are not authorized"
        );
        assert!(!err.is_retryable());
    }

    #[test]
    fn a_capacity_code_outside_a_launch_is_not_ready_and_a_missing_instance_is_not_found() {
        let step = Step {
            action: "TerminateInstances",
            claim: "c",
            offering: None,
        };
        assert!(matches!(
            step.error("InsufficientInstanceCapacity", "x"),
            Error::NotReady { .. }
        ));
        assert_eq!(
            step.error("InvalidInstanceID.NotFound", "gone"),
            Error::NotFound { claim: "c".into() }
        );
    }
}
