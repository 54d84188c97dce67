//! Demand to launch plan: pod classes, packing, the MIP and the greedy
//! baseline. Filled by the planner issue.
