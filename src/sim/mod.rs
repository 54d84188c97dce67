//! The simulation driver: replays workloads through the same decision core as
//! production, on a simulated cloud in virtual time. So far: trace input.

pub mod jobs;
pub mod result;
pub mod scenario;
pub mod trace;
pub mod workload;
