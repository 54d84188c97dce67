//! The live driver: kube-rs watchers into a snapshot, action executor, leader
//! election, metrics. Filled by the controller issue; nothing here yet.
