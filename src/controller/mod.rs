//! The live driver: kube-rs reflectors fill a snapshot, the core decides,
//! the executor applies its actions through the Kubernetes API and a
//! [`crate::cloud::CloudProvider`]; around it, leader election, metrics,
//! health endpoints and Events. Nothing here decides what to launch or
//! drain: that is `core`.

pub mod backoff;
pub mod buffers;
pub mod checkpoint;
pub mod device_data;
pub mod dra;
pub mod events;
pub mod executor;
pub mod fence;
pub mod gpu_use;
pub mod health;
pub mod intern;
pub mod interruptions;
pub mod kube_api;
pub mod leader;
pub mod lifecycle;
pub mod logging;
pub mod nodeclasses;
pub mod notice_path;
pub mod podgroups;
pub mod prometheus;
pub mod repair;
pub mod run;
pub mod scalables;
pub mod simulated_nodes;
pub mod snapshot;
pub mod status;
pub mod steps;
