//! `hookline-gateways`: everything that speaks a provider's API — one client per provider ([`gateway`]), the
//! outbound dispatcher that sends the queued charges and refunds and records the answers ([`dispatch`]), the
//! payments effect's read of the object a notification names ([`fetch`], plugged into
//! [`hookline_payments::apply::ProviderRead`]) and reconciliation against the providers' own records
//! ([`reconcile`]). It owns their settings, `[dispatcher]` and `[reconcile]` ([`config`]).
//!
//! It stands above `hookline-payments` (it records what the gateways answer through the tables that crate owns)
//! and below `hookline-billing`; what a subscription's charge reaching a final status does is passed in
//! ([`hookline_payments::intents::ChargeFinal`]), never called up.
//!
//! It must never: import an HTTP server (actix) or the AMQP transport; write a table another crate owns (it
//! owns only `reconcile_runs`); log a token or a body.

pub mod config;
pub mod dispatch;
pub mod fetch;
pub mod gateway;
pub mod reconcile;
