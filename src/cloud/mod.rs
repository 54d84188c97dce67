//! The `CloudProvider` seam and its implementations (AWS, simulated). Filled by
//! the simulator and AWS issues; nothing here yet.
