//! Fault-injection harness: the REAL binaries as child processes, a provider-like load driver, and the
//! total-queue checker of `shared/docs/reliability-scenarios.md` (goals G1–G4).
//!
//! - [`Cluster`]: `hookline-edge --config FILE` (embedded relay, fast sweeps) on a fixed free port and any number
//!   of `hookline-worker --config FILE`, on a private database ([`TestDb`]) and a private RabbitMQ prefix. Each
//!   process is started, SIGKILLed (by its own pid) and restarted individually, optionally with `FAILPOINTS`.
//!   Their logs (JSON lines) go to files under the cluster's log directory, which tests read as evidence that a
//!   fault window was really hit.
//! - [`Load`]: N unique Stripe `payment_intent.succeeded` events (distinct payments, known amounts), some resent
//!   after their 2xx and some sent twice at once, with bounded concurrency and optional pacing. Each delivery is
//!   retried like a provider would (non-2xx or transport error → backoff, bounded attempts and time). Every HTTP
//!   attempt is recorded ([`Attempt`]), and whether each event was ever acknowledged.
//! - [`Cluster::check`]: drains, then asserts `lost = acked − processed = ∅`, `unexpected = processed − sent = ∅`,
//!   one row / marker / payment posting / transition per event, every 2xx backed by a stored row, a balanced
//!   ledger equal to the model computed from the events, and dead letters exactly the expected poison.
//!
//! Service faults (PostgreSQL and RabbitMQ stop/restart) go through [`PostgresGuard`] and [`BrokerGuard`], which
//! restore the service when dropped, panics included.
//!
//! The harness is split by what it owns: [`services`] (service control and guards), [`cluster`] (the processes),
//! [`load`] (the provider-like driver) and [`check`] (the checker and the reads behind it). Everything is
//! re-exported here, so `use hookline_tests::faults::*;` brings all of it.

use std::io::Write;
use std::time::Duration;

pub mod check;
pub mod cluster;
pub mod dispatch;
pub mod load;
pub mod services;

pub use check::*;
pub use cluster::*;
pub use dispatch::*;
pub use load::*;
pub use services::*;

/// How long a drain may take after the faults are over.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a process may take to start (debug build, loaded machine). A worker's start declares the topology —
/// three quorum queues among it, each step bounded by `hookline_bus::SETUP_TIMEOUT` (15 s) and the session
/// retried after one fails — and a clean-clone CI run once took more than 30 s for it under load.
pub const START_TIMEOUT: Duration = Duration::from_secs(90);
/// Stripe fee in the test configuration (`providers.stripe.fee_bps`, `fee_fixed`).
pub const STRIPE_FEE_BPS: i64 = 399;
/// Fixed part of the Stripe fee in the test configuration.
pub const STRIPE_FEE_FIXED: i64 = 39;
/// Consumer name of the payments worker (processed markers, dead letters).
pub const CONSUMER: &str = "payments";

/// The model's fee: `round_half_up(amount × 399 / 10000) + 39`, never more than the amount. Written here
/// independently of `hookline_payments::fee` so the checker does not trust the code it checks.
pub fn model_fee(amount: i64) -> i64 {
    ((amount * STRIPE_FEE_BPS + 5_000) / 10_000 + STRIPE_FEE_FIXED).min(amount)
}

/// Writes one line to the real stderr, bypassing libtest's capture, so per-test summaries show in normal runs.
pub fn report_line(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}
