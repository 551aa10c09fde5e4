//! Billing through hookline (issue 28): subscriptions charged off-session every cycle with the payment method
//! saved at their provider, **one charge per (subscription, cycle)** however often the run runs, and dunning for
//! the cycles that decline.
//!
//! - [`subscriptions`]: the `subscriptions` table (what is billed, with what, how often, its status);
//! - [`period`]: which cycle a subscription is billed for, when its period starts (pure);
//! - [`run`]: the billing run — one transaction per subscription and cycle;
//! - [`claims`]: the `billing_claims` table — the business key and the cycle's dunning, decided when its charge
//!   completes;
//! - [`declines`]: which declines mean the payment method is unusable (pure);
//! - [`manage`]: create a subscription, change its payment method or amount, cancel it (both tables, with the
//!   facts): the one implementation of the merchant API and the CLI;
//! - [`schedule`]: the workers' scheduler — due periods and due retries every `[billing] schedule_secs`
//!   ([`config`]), with no command;
//! - [`status`]: what is behind and what is due (`hookline billing status`, the console, the metrics).
//!
//! Three defences, each in the database: `billing_claims_cycle_key` (one claim per cycle: fifteen runs charge
//! once), `payment_intents_live_cycle` (at most one live charge per cycle whichever channel — billing run or
//! merchant API — creates it, so a cycle paid through a checkout is never charged again and a retry never runs
//! beside its predecessor), and the intent's idempotency key at the gateway (a resend after a crash replays).

//! This crate stands on top of the money crates (`hookline-billing` → `hookline-gateways` → `hookline-payments`):
//! a cycle's charge is a payment intent like any other, and when it reaches a final status the intent's
//! transaction hands it to [`Dunning`] through the payments side's seam
//! ([`hookline_payments::intents::ChargeFinal`]). Every process composes the payments effect and the dispatcher
//! with it here ([`payments_handler`], [`dispatcher`]), so none can run without dunning.

use std::sync::Arc;

use futures::future::BoxFuture;
use hookline_core::domain_events::RecordError;
use hookline_core::{Config, ProviderConfig};
use hookline_gateways::dispatch::{DispatchSettings, Dispatcher};
use hookline_payments::intents::{ChargeFinal, FinalCharge};
use hookline_payments::PaymentsHandler;
use sqlx::{PgConnection, PgPool};

pub mod claims;
pub mod config;
pub mod declines;
pub mod manage;
pub mod metric;
pub mod period;
pub mod run;
pub mod schedule;
pub mod status;
pub mod subscriptions;

pub use config::BillingConfig;
pub use manage::{cancel, cancel_subscription, update_payment_method, Change, ManageError};
pub use period::{valid_cycle, Cycle, Interval};
pub use run::{bill, bill_locked, run, would_bill, Billed, ProviderBilling, RunSummary};
pub use status::{schedule_gauges, status, totals, BillingStatus, ScheduleGauges, Totals};
pub use subscriptions::{
    add, charge_params, get, list, valid_saved_method, NewSubscription, Subscription,
    SubscriptionStatus,
};

/// Billing's dunning as the payments side's [`ChargeFinal`] seam: [`claims::on_charge_final`] in the transaction
/// that moved the intent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dunning;

impl ChargeFinal for Dunning {
    fn on_charge_final<'a>(
        &'a self,
        conn: &'a mut PgConnection,
        charge: &'a FinalCharge<'_>,
    ) -> BoxFuture<'a, Result<(), RecordError>> {
        Box::pin(claims::on_charge_final(conn, charge))
    }
}

/// The payments effect every worker runs: the configured providers, each read through its gateway client
/// ([`hookline_gateways::fetch::reader`]), with [`Dunning`].
pub fn payments_handler<'a>(
    providers: impl IntoIterator<Item = &'a ProviderConfig>,
) -> PaymentsHandler {
    PaymentsHandler::new(
        providers,
        hookline_gateways::fetch::reader,
        Arc::new(Dunning),
    )
}

/// What billing needs of each configured provider that can be charged (a stripe, mercadopago or pagarme-v5
/// scheme with an `api_base`): the scheduler's and `billing run`'s view of the configuration.
pub fn providers(config: &Config) -> std::collections::HashMap<String, ProviderBilling> {
    config
        .providers
        .iter()
        .filter(|(_, p)| {
            hookline_gateways::gateway::Api::of(p.scheme).is_some() && p.api_base.is_some()
        })
        .map(|(name, p)| (name.clone(), ProviderBilling::from_config(p)))
        .collect()
}

/// The outbound dispatcher on `pool` for the configured providers, with [`Dunning`].
pub fn dispatcher(pool: PgPool, config: &Config, settings: DispatchSettings) -> Dispatcher {
    Dispatcher::from_config(pool, config, settings, Arc::new(Dunning))
}
