//! MIG profiles per GPU model (being written).
