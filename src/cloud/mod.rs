//! The seam between deciding and launching: the [`CloudProvider`] trait, the
//! [`Instance`] it reports and the [`Error`] it classifies failures into.
//! Implemented by [`simulated`] (virtual time, seeded randomness) and, later,
//! by `aws` (aws-sdk-ec2), where all EC2 error-code mapping will live. What to
//! launch and when is decided in `core`; nothing here decides.

pub mod simulated;

use crate::core::{ClaimRequest, Notice, OfferingKey, Time};
use std::fmt;
use std::future::Future;

/// Lifecycle state of an instance, as EC2 names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InstanceState {
    /// Launched, still booting.
    Pending,
    /// Booted; the node may not have registered yet.
    Running,
    /// Termination requested and under way; no longer billed.
    ShuttingDown,
    /// Gone.
    Terminated,
}

impl InstanceState {
    /// The EC2 name (`pending`, `running`, `shutting-down`, `terminated`).
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Running => "running",
            InstanceState::ShuttingDown => "shutting-down",
            InstanceState::Terminated => "terminated",
        }
    }

    /// Pending or running: the instance exists and is (or will be) usable.
    pub fn is_alive(self) -> bool {
        matches!(self, InstanceState::Pending | InstanceState::Running)
    }
}

impl fmt::Display for InstanceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An instance launched for a NodeClaim, as the provider sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// NodeClaim name (the instance carries it as an ownership tag).
    pub claim: String,
    /// Kubernetes `spec.providerID` of the node, e.g.
    /// `aws:///use1-az4/i-0123456789abcdef0`.
    pub provider_id: String,
    /// What was bought.
    pub offering: OfferingKey,
    /// USD per hour at launch (spot is billed at the pool's price as it
    /// changes; this field is not updated).
    pub price_per_hour: f64,
    /// When the launch was accepted.
    pub launched_at: Time,
    /// Where the instance is in its life.
    pub state: InstanceState,
}

/// What can go wrong at the cloud seam, classified so that callers can react
/// without knowing the provider: [`InsufficientCapacity`](Error::InsufficientCapacity)
/// and [`NotReady`](Error::NotReady) are retryable (see [`Error::is_retryable`]),
/// [`NotFound`](Error::NotFound) and [`Other`](Error::Other) are not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The offering has no capacity right now. Retryable elsewhere: launch
    /// the claim again with another offering (and count this one as
    /// exhausted, see [`Error::notice`]); retrying the same offering at once
    /// usually fails the same way.
    #[error("insufficient capacity to launch {claim} as {offering}")]
    InsufficientCapacity {
        /// NodeClaim being launched.
        claim: String,
        /// The pool that is out of capacity.
        offering: OfferingKey,
    },
    /// No instance exists for the claim (never launched, or forgotten by the
    /// provider). Not retryable: for a terminate this means done; for
    /// anything else the claim must be launched again.
    #[error("no instance for {claim}")]
    NotFound {
        /// NodeClaim asked about.
        claim: String,
    },
    /// The provider cannot act on the claim yet but will (throttled,
    /// eventually consistent state, launch prerequisites not resolved).
    /// Retryable: the same call, later.
    #[error("cannot act on {claim} yet: {reason}")]
    NotReady {
        /// NodeClaim concerned.
        claim: String,
        /// Why not yet.
        reason: String,
    },
    /// Anything else (invalid request, unknown offering, permissions). Not
    /// retryable: the same call fails the same way. The message names the
    /// claim and the step.
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// Whether trying again can succeed: `InsufficientCapacity` (with a
    /// different offering) and `NotReady` (the same call, later).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::InsufficientCapacity { .. } | Error::NotReady { .. }
        )
    }

    /// The [`Notice`] the core should hear about this failure:
    /// `InsufficientCapacity` for a capacity error, nothing otherwise.
    pub fn notice(&self) -> Option<Notice> {
        match self {
            Error::InsufficientCapacity { offering, .. } => Some(Notice::InsufficientCapacity {
                offering: offering.clone(),
            }),
            _ => None,
        }
    }
}

/// The cloud's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Launches and terminates the instances behind NodeClaims. Methods take
/// `&self` so that one provider can serve concurrent reconcilers (the AWS
/// implementation holds a cloneable SDK client; the simulated one is shared
/// as a `Mutex<SimulatedCloud>`), and return `Send` futures so that the
/// controller can run them on a multi-threaded runtime. `now` is the
/// caller's clock: the simulated cloud runs on it, a real cloud may ignore
/// it.
///
/// Every method is idempotent per claim name, so that a restarted controller
/// converges without leaking or doubling instances.
pub trait CloudProvider {
    /// Launches the instance for `claim` (its offering), or returns the
    /// instance already launched for that claim name, whatever its state.
    ///
    /// # Errors
    /// [`Error::InsufficientCapacity`] when the offering has no capacity;
    /// [`Error::NotReady`] when the provider cannot launch yet;
    /// [`Error::Other`] for an offering the provider does not sell, or a
    /// claim name already launched with a different offering.
    fn launch(
        &self,
        claim: &ClaimRequest,
        now: Time,
    ) -> impl Future<Output = Result<Instance>> + Send;

    /// Terminates the instance of `claim` and returns it, now shutting down
    /// (or already terminated: terminating twice is not an error).
    ///
    /// # Errors
    /// [`Error::NotFound`] when there is no instance for the claim (callers
    /// treat that as done); [`Error::NotReady`] / [`Error::Other`] when the
    /// provider fails.
    fn terminate(&self, claim: &str, now: Time) -> impl Future<Output = Result<Instance>> + Send;

    /// The instance of `claim`, in any state (terminated included, for as
    /// long as the provider remembers it); `None` if there is none.
    ///
    /// # Errors
    /// [`Error::NotReady`] / [`Error::Other`] when the provider cannot be
    /// asked; not finding the instance is `Ok(None)`.
    fn describe(&self, claim: &str) -> impl Future<Output = Result<Option<Instance>>> + Send;

    /// Every instance this provider launched that is not terminated yet
    /// (pending, running, shutting down), by claim name; what garbage
    /// collection compares against the NodeClaims.
    ///
    /// # Errors
    /// [`Error::NotReady`] / [`Error::Other`] when the provider cannot be
    /// asked.
    fn instances(&self) -> impl Future<Output = Result<Vec<Instance>>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::CapacityType;

    fn key() -> OfferingKey {
        OfferingKey {
            instance_type: "g5.xlarge".into(),
            zone: "use1-az1".into(),
            capacity_type: CapacityType::Spot,
        }
    }

    #[test]
    fn capacity_and_not_ready_errors_are_retryable_the_others_are_not() {
        let ice = Error::InsufficientCapacity {
            claim: "c".into(),
            offering: key(),
        };
        assert!(ice.is_retryable());
        assert!(Error::NotReady {
            claim: "c".into(),
            reason: "throttled".into()
        }
        .is_retryable());
        assert!(!Error::NotFound { claim: "c".into() }.is_retryable());
        assert!(!Error::Other("boom".into()).is_retryable());
    }

    #[test]
    fn capacity_error_names_claim_and_offering_and_becomes_a_notice() {
        let ice = Error::InsufficientCapacity {
            claim: "gpu-1".into(),
            offering: key(),
        };
        assert_eq!(
            ice.to_string(),
            "insufficient capacity to launch gpu-1 as g5.xlarge spot in use1-az1"
        );
        assert_eq!(
            ice.notice(),
            Some(Notice::InsufficientCapacity { offering: key() })
        );
        assert_eq!(Error::NotFound { claim: "x".into() }.notice(), None);
    }
}
