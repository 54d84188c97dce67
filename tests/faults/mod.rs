//! Fault injection: the controller against a Kubernetes API that answers
//! 409, 429, 5xx and 410 at chosen moments, an EC2 (moto) that throttles,
//! times out, answers 5xx and loses answers at chosen calls, and a crash
//! after every effect of a claim's launch, drain, checkpoint request and
//! spot notice handling. What every scenario asserts: every notice for our
//! instances acted on once, no pod evicted without its checkpoint request,
//! no instance leaked or doubled, no node left cordoned. Each scenario
//! prints the faults it injected, by kind (`cargo test --test suite
//! faults:: -- --nocapture`).
//!
//! - [`harness`]: the real loop (`controller::run::Driver`) driven round by
//!   round on a virtual clock against the stateful fake API server, the
//!   simulated cloud, a stand-in for the notice queue and for the world
//!   (kubelets, the scheduler, a checkpointing workload, its Job).
//! - [`kube`]: API faults through a claim's whole life with a notice.
//! - [`crash`]: a crash after each effect of that life.
//! - [`ec2`]: EC2 faults through moto.
//! - [`notices`]: notices while a launch hangs; notices about other
//!   fleets' instances.
//! - [`drain`]: the finalizer's drain (checkpoints, do-not-disrupt).

mod crash;
mod drain;
mod ec2;
mod harness;
mod kube;
mod notices;
