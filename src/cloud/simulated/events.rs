//! What the simulated cloud reports to the simulator, in time order.

use crate::core::{Notice, OfferingKey, Time};
use std::fmt;

/// Why an instance went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TerminationCause {
    /// [`SimulatedCloud::terminate`](super::SimulatedCloud::terminate) was
    /// called.
    Requested,
    /// The spot market took it back at the notice's deadline.
    SpotReclaimed,
}

/// Something that happened in the simulated cloud.
/// [`SimulatedCloud::advance`](super::SimulatedCloud::advance) returns them
/// in time order (ties in the order they were scheduled).
#[derive(Debug, Clone, PartialEq)]
pub enum CloudEvent {
    /// The instance is running.
    Running {
        /// NodeClaim.
        claim: String,
        /// When.
        at: Time,
    },
    /// Its node registered with the API server.
    Registered {
        /// NodeClaim.
        claim: String,
        /// When.
        at: Time,
    },
    /// Its node is Ready with its accelerators advertised (device plugin
    /// up).
    Ready {
        /// NodeClaim.
        claim: String,
        /// When.
        at: Time,
    },
    /// A spot interruption notice or a rebalance recommendation.
    Notice {
        /// What EC2 would send.
        notice: Notice,
        /// When it was sent.
        at: Time,
    },
    /// The instance is gone.
    Terminated {
        /// NodeClaim.
        claim: String,
        /// When.
        at: Time,
        /// Whether we asked for it.
        cause: TerminationCause,
    },
    /// The instance's node failed (a GPU or host fault, `FaultModel`):
    /// its pods stop making progress until it is fixed or replaced.
    Fault {
        /// NodeClaim.
        claim: String,
        /// When.
        at: Time,
    },
    /// The instance is back from a reboot.
    Rebooted {
        /// NodeClaim.
        claim: String,
        /// When.
        at: Time,
        /// Whether it came back without a fault (the reboot fixed it, or
        /// it had none).
        healthy: bool,
    },
    /// A pool's price changed.
    PriceChanged {
        /// The pool.
        offering: OfferingKey,
        /// USD per hour from `at` on.
        price_per_hour: f64,
        /// When.
        at: Time,
    },
}

impl CloudEvent {
    /// When it happened.
    pub fn at(&self) -> Time {
        match self {
            CloudEvent::Running { at, .. }
            | CloudEvent::Registered { at, .. }
            | CloudEvent::Ready { at, .. }
            | CloudEvent::Notice { at, .. }
            | CloudEvent::Terminated { at, .. }
            | CloudEvent::Fault { at, .. }
            | CloudEvent::Rebooted { at, .. }
            | CloudEvent::PriceChanged { at, .. } => *at,
        }
    }

    /// The NodeClaim it is about, if any.
    pub fn claim(&self) -> Option<&str> {
        match self {
            CloudEvent::Running { claim, .. }
            | CloudEvent::Registered { claim, .. }
            | CloudEvent::Ready { claim, .. }
            | CloudEvent::Terminated { claim, .. }
            | CloudEvent::Fault { claim, .. }
            | CloudEvent::Rebooted { claim, .. } => Some(claim),
            CloudEvent::Notice { notice, .. } => match notice {
                Notice::SpotInterruption { claim, .. }
                | Notice::ReservationEnding { claim, .. }
                | Notice::Rebalance { claim }
                | Notice::ScheduledChange { claim, .. }
                | Notice::Terminated { claim } => Some(claim),
                Notice::InsufficientCapacity { .. } => None,
            },
            CloudEvent::PriceChanged { .. } => None,
        }
    }
}

impl fmt::Display for CloudEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.at().to_rfc3339())?;
        match self {
            CloudEvent::Running { claim, .. } => write!(f, "{claim} running"),
            CloudEvent::Registered { claim, .. } => write!(f, "{claim} registered"),
            CloudEvent::Ready { claim, .. } => write!(f, "{claim} ready"),
            CloudEvent::Notice { notice, .. } => match notice {
                Notice::SpotInterruption { claim, deadline } => write!(
                    f,
                    "{claim} spot interruption notice, reclaimed at {}",
                    deadline.to_rfc3339()
                ),
                Notice::ReservationEnding { claim, end } => write!(
                    f,
                    "{claim} capacity reservation ends at {}",
                    end.to_rfc3339()
                ),
                Notice::Rebalance { claim } => write!(f, "{claim} rebalance recommendation"),
                Notice::ScheduledChange { claim, start } => match start {
                    Some(start) => write!(f, "{claim} scheduled change at {}", start.to_rfc3339()),
                    None => write!(f, "{claim} scheduled change"),
                },
                Notice::Terminated { claim } => write!(f, "{claim} terminated"),
                Notice::InsufficientCapacity { offering } => {
                    write!(f, "insufficient capacity for {offering}")
                }
            },
            CloudEvent::Terminated { claim, cause, .. } => match cause {
                TerminationCause::Requested => write!(f, "{claim} terminated"),
                TerminationCause::SpotReclaimed => write!(f, "{claim} reclaimed"),
            },
            CloudEvent::Fault { claim, .. } => write!(f, "{claim} faulty"),
            CloudEvent::Rebooted { claim, healthy, .. } => {
                let how = if *healthy { "healthy" } else { "still faulty" };
                write!(f, "{claim} back from a reboot, {how}")
            }
            CloudEvent::PriceChanged {
                offering,
                price_per_hour,
                ..
            } => write!(f, "{offering} now ${price_per_hour:.4}/h"),
        }
    }
}
