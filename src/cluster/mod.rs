//! The cluster snapshot: pods, nodes, claims, pod groups and resource
//! arithmetic. Filled by the planner issue.
