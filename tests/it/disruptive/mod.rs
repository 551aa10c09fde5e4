//! Tests that stop or disturb the shared services every other test uses: the RabbitMQ app stopped and started,
//! every broker connection closed, the PostgreSQL cluster restarted or stopped. A test running beside them would
//! fail for no fault of its own, so they must run alone:
//!
//! - each is `#[ignore]`d with the reason, so a plain `cargo test` (which runs everything else in parallel in this
//!   one binary) never starts them;
//! - `deploy/test.sh` runs them in a step of their own, after every other test, one at a time:
//!   `cargo test -p hookline-tests --test it -- --ignored --test-threads=1 disruptive::`;
//! - they take [`SERVICES`] as well, so even a run with more threads never has two outages at once (they used
//!   to be separate binaries, each with its own lock, which cargo never ran together).

mod broker_outage;
mod faults_broker;
mod faults_postgres;

/// Held by every disruptive test for its whole run: one outage of a shared service at a time.
static SERVICES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
