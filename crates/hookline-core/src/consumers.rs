//! The consumers of stored events, named once.
//!
//! A consumer is one independent effect applied exactly once per event: it has its own processed markers
//! (`processed_events.consumer`) and its own dead letters (`dead_letters.consumer`). Operator commands (`status`,
//! `replay`, `dlq`) iterate over [`ALL`], so a second consumer added here shows up in all of them without
//! touching their queries.

/// The payments consumer: payment state machine and ledger (`hookline-worker`).
pub const PAYMENTS: &str = "payments";

/// Every consumer, in a stable order.
pub const ALL: &[&str] = &[PAYMENTS];
