//! Quartermaster: a spot-aware, GPU-first Kubernetes node provisioner.
//!
//! One pure decision core, two drivers (see `ARCHITECTURE.md`):
//! [`api`] holds the CRD types, [`catalog`] the instance types, offerings and
//! prices, [`cluster`] the snapshot of pods and nodes, [`plan`] the launch
//! planner, [`core`] the lifecycle decisions. [`cloud`], [`controller`] and
//! [`sim`] are the effectful edges that drive the core. [`labels`] (the
//! well-known keys) and [`metrics`] (the Prometheus families) are leaves
//! that any layer may use.

pub mod api;
pub mod catalog;
pub mod cloud;
pub mod cluster;
pub mod controller;
pub mod core;
pub mod labels;
pub mod metrics;
pub mod plan;
pub mod sim;
