//! The simulation driver: scenarios, traces, virtual clock, reports. Filled by
//! the simulator issue; nothing here yet.
