//! The live driver: kube-rs reflectors fill a snapshot, the core decides,
//! the executor applies its actions through the Kubernetes API and a
//! [`crate::cloud::CloudProvider`]; around it, leader election, metrics,
//! health endpoints and Events. Nothing here decides what to launch or
//! drain: that is `core`.

pub mod kube_api;
pub mod metrics;
pub mod run;
