//! Fault harness (placeholder, being written).
