//! Bounds on what the control API accepts, shared by the delivery behaviour, armed faults and forced outcomes.
//! A leaf module (it imports nothing of the crate) so that the data types checked against these bounds need not
//! import the control handlers.

/// Most extra copies of each delivery (`duplicates`): enough for any duplicate-delivery scenario, and a bound on
/// the work one control request can queue (4294967295 copies would be a denial of service of the sandbox).
pub const MAX_DUPLICATES: u32 = 100;
/// Longest `delay_ms` or `shuffle_ms` of the delivery behaviour (and `delay_ms` of a fault): 10 minutes.
pub const MAX_DELAY_MS: u64 = 600_000;
/// Most deliveries dropped with `drop_next`, most firings of one fault (`count`) and most forced outcomes
/// queued at once for a provider.
pub const MAX_COUNT: u32 = 100_000;
