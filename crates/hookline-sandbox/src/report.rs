//! What the gateways hold, for tests that count charges at the gateway: [`ChargesReport`], one [`ProviderReport`]
//! per provider (`GET /_sandbox/charges`, [`crate::SandboxControl::charges`]). Built from the state; imports no
//! handler.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::settings::Scheme;
use crate::state::{KeyStats, ProviderBook, State};

/// What one provider's gateway holds.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderReport {
    /// The hookline provider name.
    pub name: String,
    /// `stripe`, `mercadopago` or `pagarme-v5`.
    pub scheme: String,
    /// Charges at the gateway: Stripe and Pagar.me `ch_…` objects (failed ones included), Mercado Pago payments.
    pub charges: usize,
    /// Of those, the ones that captured money (Stripe `succeeded` and captured — an authorization of a manual
    /// intent counts once captured; Mercado Pago ever approved; Pagar.me ever paid, under- or overpaid).
    pub captured_charges: usize,
    /// Stripe payment intents (0 for the others).
    pub payment_intents: usize,
    /// Pagar.me orders (0 for the others).
    pub orders: usize,
    /// Refunds created (Pagar.me: cancellations of a paid charge, in full or in part).
    pub refunds: usize,
    /// Sum of refunds, minor units (cents).
    pub refunded_amount: i64,
    /// Stripe events created (Mercado Pago notifications, Pagar.me webhooks: queued, duplicates not counted).
    pub events: usize,
    /// Idempotency keys currently remembered.
    pub idempotency_keys: usize,
    /// Per idempotency key: requests, executions, replays, conflicts and what was created.
    pub keys: BTreeMap<String, KeyStats>,
    /// Per saved payment method (Stripe `pm_…` attached to a customer, Mercado Pago card id, Pagar.me `card_…`):
    /// the charges of it executed at the gateway (Stripe and Pagar.me `ch_…` objects, failed ones included;
    /// Mercado Pago payments made with a token of the card). Methods never charged are absent.
    pub payment_method_charges: BTreeMap<String, u32>,
}

/// Charges and payments at the gateway, per provider and per idempotency key.
#[derive(Debug, Clone, Serialize)]
pub struct ChargesReport {
    /// Sum of every provider's `charges`.
    pub total_charges: usize,
    /// One report per configured provider.
    pub providers: Vec<ProviderReport>,
}

impl ChargesReport {
    /// The report of provider `name`.
    pub fn provider(&self, name: &str) -> Option<&ProviderReport> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// The counters of one idempotency key of one provider.
    pub fn key(&self, provider: &str, key: &str) -> Option<&KeyStats> {
        self.provider(provider)?.keys.get(key)
    }

    /// How many charges of saved payment method `id` (Stripe `pm_…`, Mercado Pago card id, Pagar.me `card_…`) provider
    /// `provider` executed (0 for an unknown provider or method).
    pub fn payment_method_charges(&self, provider: &str, id: &str) -> u32 {
        self.provider(provider)
            .and_then(|p| p.payment_method_charges.get(id))
            .copied()
            .unwrap_or(0)
    }
}

/// The report of provider `p` of `state`.
fn provider(state: &State, p: &ProviderBook) -> ProviderReport {
    let name = p.config.name.clone();
    let events = state
        .deliveries
        .values()
        .filter(|d| d.provider == name && d.copy == 0)
        .count();
    let charged: Vec<&str> = match p.config.scheme {
        Scheme::Stripe => p
            .stripe
            .charges
            .values()
            .map(|c| c.payment_method.as_str())
            .filter(|pm| p.stripe.payment_methods.contains_key(*pm))
            .collect(),
        Scheme::MercadoPago => {
            p.mp.payments
                .values()
                .filter_map(|m| m.card_id.as_deref())
                .collect()
        }
        Scheme::PagarmeV5 => p
            .pagarme
            .charges
            .values()
            .filter_map(|c| c.card_id())
            .collect(),
    };
    let mut payment_method_charges: BTreeMap<String, u32> = BTreeMap::new();
    for method in charged {
        *payment_method_charges.entry(method.to_owned()).or_default() += 1;
    }
    let mut report = ProviderReport {
        name,
        scheme: p.config.scheme.as_str().into(),
        charges: 0,
        captured_charges: 0,
        payment_intents: 0,
        orders: 0,
        refunds: 0,
        refunded_amount: 0,
        events,
        idempotency_keys: p.idempotency.len(),
        keys: p.keys.clone(),
        payment_method_charges,
    };
    match p.config.scheme {
        Scheme::Stripe => {
            report.charges = p.stripe.charges.len();
            report.captured_charges = p
                .stripe
                .charges
                .values()
                .filter(|c| c.succeeded && c.captured)
                .count();
            report.payment_intents = p.stripe.intents.len();
            report.refunds = p.stripe.refunds.len();
            report.refunded_amount = p.stripe.refunds.values().map(|r| r.amount).sum();
            report.events = p.stripe.events.len();
        }
        Scheme::MercadoPago => {
            report.charges = p.mp.payments.len();
            report.captured_charges =
                p.mp.payments
                    .values()
                    .filter(|m| m.date_approved.is_some())
                    .count();
            report.refunds = p.mp.payments.values().map(|m| m.refunds.len()).sum();
            report.refunded_amount = p.mp.payments.values().map(|m| m.refunded).sum();
        }
        Scheme::PagarmeV5 => {
            let charges = &p.pagarme.charges;
            report.charges = charges.len();
            report.captured_charges = charges.values().filter(|c| c.paid_at.is_some()).count();
            report.orders = p.pagarme.orders.len();
            report.refunds = charges.values().map(|c| c.refunds as usize).sum();
            report.refunded_amount = charges.values().map(|c| c.refunded).sum();
        }
    }
    report
}

/// Charges and payments at the gateway, in total, per provider and per idempotency key.
pub(crate) fn charges(state: &State) -> ChargesReport {
    let providers: Vec<ProviderReport> =
        state.providers.iter().map(|p| provider(state, p)).collect();
    ChargesReport {
        total_charges: providers.iter().map(|p| p.charges).sum(),
        providers,
    }
}
