//! Lifecycle decisions (provisioning batches, interruption response, pre-warm
//! windows, consolidation) as pure functions of a snapshot, the catalog and
//! `now`. Filled by the simulator issue; nothing here yet.
