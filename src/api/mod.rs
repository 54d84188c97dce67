//! CRD types (NodePool, NodeClaim) with defaults and validation.
