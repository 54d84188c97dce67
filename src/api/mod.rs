//! CRD types (NodePool, NodeClaim) with defaults and validation, and the
//! well-known keys shared by every part of the system.

pub mod labels;
