//! Every integration test of hookline, built as ONE test binary (`--test it`).
//!
//! Each former test target is a module here, its file moved unchanged from `tests/NAME.rs` to `tests/it/NAME.rs`:
//! one binary links the workspace once per change instead of once per target (27 links before). Test names are
//! `MODULE::test`, so `cargo test -p hookline-tests --test it -- edge::` runs what `--test edge` ran.
//!
//! Separate binaries used to give isolation for free (cargo runs test binaries one after another); here is how
//! it is kept:
//! - Tests that stop or disturb the SHARED PostgreSQL or RabbitMQ (the broker app stopped, every broker connection
//!   closed, the cluster restarted) are in [`disruptive`], `#[ignore]`d so that no ordinary run (a plain
//!   `cargo test`, another engineer's run) has them beside other tests, and serialized by one lock.
//!   `deploy/test.sh` runs them in a step of their own, alone:
//!   `cargo test -p hookline-tests --test it -- --ignored --test-threads=1 disruptive::`.
//! - [`cluster`] needs the cluster of `deploy/cluster.sh` and is `#[ignore]`d too; `deploy/test-cluster.sh` runs
//!   it with `-- --ignored cluster::` (its own ports and services; nothing shared is touched).
//! - Process-global state: no test changes this process's environment (`std::env::set_var` would race with every
//!   other test reading it and leak into their children; the child processes get their variables through their
//!   `Command`); fail points are only ever set in child processes (`FAILPOINTS` on the command), never in this
//!   process; every test builds its own tokio runtime (`#[tokio::test]`), databases and RabbitMQ names.

mod billing_checkout;
mod billing_dunning;
mod billing_schedule;
mod cluster;
mod console;
mod console_billing;
mod console_input;
mod console_login;
mod console_pages;
mod console_pictures;
mod contract;
mod disruptive;
mod domain_events;
mod edge;
mod edge_process;
mod events_feed;
mod faults_delivery;
mod faults_dispatch;
mod faults_edge;
mod faults_replay;
mod faults_worker;
mod hostile;
mod hostile_props;
mod intent_lifecycle;
mod key_lifetime;
mod merchant_api;
mod operator;
mod operator_input;
mod operator_simulate;
mod order;
mod outbound;
mod outbound_saved_cards;
mod pagarme_v5_inbound;
mod pagarme_v5_outbound;
mod pipeline;
mod provider_api;
mod purge;
mod redelivery;
mod sdk;
mod subscriptions_api;
mod traces;
mod webhook_endpoints;
mod worker_crash;
