//! Billing's metric names: the scheduler's counters and gauges ([`crate::schedule`]; the gauges are
//! [`crate::status::ScheduleGauges`], read at scrape time) and the dunning's declines ([`crate::claims`]).

/// Charges a round created: `kind` = `period` (a new cycle) or `retry` (a due dunning retry).
pub const CHARGES: &str = "hookline_billing_scheduled_charges_total";
/// Subscriptions a round could not charge (provider not configured, currency not accepted, an error).
pub const NOT_CHARGED: &str = "hookline_billing_not_charged_total";
/// Rounds finished.
pub const ROUNDS: &str = "hookline_billing_rounds_total";
/// How long the last round took.
pub const ROUND_SECONDS: &str = "hookline_billing_round_seconds";
/// The configured `billing.schedule_secs` of a running scheduler (the alert's unit of lateness).
pub const SCHEDULE_SECONDS: &str = "hookline_billing_schedule_seconds";
/// When the last round finished (Unix seconds).
pub const LAST_ROUND: &str = "hookline_billing_last_round_timestamp_seconds";
/// Declined cycle charges, by what dunning decided: `retry`, `past_due`, `needs_payment_method`.
pub const DECLINES: &str = "hookline_billing_declines_total";
/// Active subscriptions whose next period has started and is not charged yet.
pub const DUE_PERIODS: &str = "hookline_billing_due_periods";
/// Declined cycles whose retry is due.
pub const DUE_RETRIES: &str = "hookline_billing_due_retries";
/// Age of the oldest due period or due retry (0 when none): grows when nothing bills.
pub const OLDEST_DUE_SECONDS: &str = "hookline_billing_oldest_due_seconds";
/// Declined cycles waiting for their scheduled retry.
pub const IN_RETRY: &str = "hookline_billing_in_retry";
/// Subscriptions past due.
pub const PAST_DUE: &str = "hookline_billing_past_due";
/// Subscriptions waiting for a new payment method.
pub const NEEDS_PAYMENT_METHOD: &str = "hookline_billing_needs_payment_method";
