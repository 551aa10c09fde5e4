//! Card-use scripts: what the Nth charge of one saved payment method (a Stripe `pm_…` attached to a customer, a
//! Mercado Pago or Pagar.me card saved to a customer) gives, so that a test can make a given card decline on its Nth use —
//! the way a real card starts failing between two billing cycles. Set through the control API
//! ([`crate::SandboxControl::script_payment_method`]); consulted by each provider's charge, which counts a use
//! only when it executes (an idempotent replay is not a use).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::mercadopago::book::rejection;
use crate::pagarme_v5::book::{decline as pagarme_decline, decline_names as pagarme_declines};
use crate::settings::Scheme;
use crate::stripe::book::{decline, decline_codes};

/// Most outcomes in one script.
pub const MAX_SCRIPT_OUTCOMES: usize = 1000;

/// The outcome that lets a scripted charge through (Stripe `succeeded`, Mercado Pago `approved`/`accredited`).
pub const SUCCEED: &str = "succeed";

/// One saved payment method's script as the control API shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentMethodScript {
    /// Charges of the method executed since its script was last set (since it was saved, when never set): the
    /// next one gets `outcomes[uses]`.
    pub uses: u32,
    /// The outcome of each use after the script was set: `succeed` or a decline code of the provider; past the
    /// end, the card's own behaviour.
    pub outcomes: Vec<String>,
}

/// The scripts and use counts of one provider's saved payment methods (an entry per method used or scripted).
#[derive(Debug, Default)]
pub(crate) struct Scripts {
    methods: BTreeMap<String, PaymentMethodScript>,
}

impl Scripts {
    /// Replaces the script of method `id` and starts counting its uses again.
    pub(crate) fn set(&mut self, id: &str, outcomes: Vec<String>) {
        self.methods
            .insert(id.to_owned(), PaymentMethodScript { uses: 0, outcomes });
    }

    /// Method `id`'s script (empty when never set or used).
    pub(crate) fn get(&self, id: &str) -> PaymentMethodScript {
        self.methods.get(id).cloned().unwrap_or_default()
    }

    /// Counts one executed charge of method `id`; the outcome its script sets for it, if any.
    pub(crate) fn next_use(&mut self, id: &str) -> Option<String> {
        let script = self.methods.entry(id.to_owned()).or_default();
        let n = script.uses as usize;
        script.uses = script.uses.saturating_add(1);
        script.outcomes.get(n).cloned()
    }
}

/// Checks a script for a provider of `scheme`: at most [`MAX_SCRIPT_OUTCOMES`] outcomes, each [`SUCCEED`] or a
/// decline the provider reports — Stripe decline codes (`insufficient_funds`, `generic_decline`, `expired_card`,
/// `authentication_required`, …), Mercado Pago rejection details (`cc_rejected_insufficient_amount`,
/// `cc_rejected_other_reason`, `cc_rejected_card_disabled`, …), Pagar.me declines (`not_authorized`,
/// `insufficient_funds`, `expired_card`, `with_error`, …).
pub(crate) fn validate(scheme: Scheme, outcomes: &[String]) -> Result<(), String> {
    if outcomes.len() > MAX_SCRIPT_OUTCOMES {
        return Err(format!(
            "outcomes: at most {MAX_SCRIPT_OUTCOMES}, not {}",
            outcomes.len()
        ));
    }
    for (i, outcome) in outcomes.iter().enumerate() {
        let known = outcome == SUCCEED
            || match scheme {
                Scheme::Stripe => decline(outcome).is_some(),
                Scheme::MercadoPago => rejection(outcome).is_some(),
                Scheme::PagarmeV5 => pagarme_decline(outcome).is_some(),
            };
        if !known {
            let shown: String = outcome.chars().take(64).collect();
            let expected = match scheme {
                Scheme::Stripe => format!(
                    "'{SUCCEED}' or a Stripe decline code ({})",
                    decline_codes().collect::<Vec<_>>().join(", ")
                ),
                Scheme::MercadoPago => format!(
                    "'{SUCCEED}' or a Mercado Pago rejection status_detail ({})",
                    crate::mercadopago::book::REJECTIONS.join(", ")
                ),
                Scheme::PagarmeV5 => format!(
                    "'{SUCCEED}' or a Pagar.me decline ({})",
                    pagarme_declines().collect::<Vec<_>>().join(", ")
                ),
            };
            return Err(format!(
                "outcomes[{i}]: unknown outcome '{shown}': expected {expected}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nth_use_gets_the_nth_outcome_then_none() {
        let mut scripts = Scripts::default();
        assert_eq!(scripts.next_use("pm_1"), None);
        scripts.set("pm_1", vec!["insufficient_funds".into(), "succeed".into()]);
        assert_eq!(scripts.get("pm_1").uses, 0);
        assert_eq!(
            scripts.next_use("pm_1").as_deref(),
            Some("insufficient_funds")
        );
        assert_eq!(scripts.next_use("pm_1").as_deref(), Some("succeed"));
        assert_eq!(scripts.next_use("pm_1"), None);
        assert_eq!(scripts.get("pm_1").uses, 3);
        assert_eq!(scripts.get("pm_2"), PaymentMethodScript::default());
    }

    #[test]
    fn outcomes_are_the_providers_own() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(validate(
            Scheme::Stripe,
            &s(&["succeed", "expired_card", "insufficient_funds"])
        )
        .is_ok());
        assert!(validate(Scheme::Stripe, &s(&["cc_rejected_other_reason"])).is_err());
        assert!(validate(
            Scheme::MercadoPago,
            &s(&["succeed", "cc_rejected_card_disabled"])
        )
        .is_ok());
        assert!(validate(Scheme::MercadoPago, &s(&["insufficient_funds"])).is_err());
        assert!(validate(
            Scheme::PagarmeV5,
            &s(&["succeed", "insufficient_funds", "not_authorized"])
        )
        .is_ok());
        assert!(validate(Scheme::PagarmeV5, &s(&["cc_rejected_other_reason"])).is_err());
        assert!(validate(
            Scheme::Stripe,
            &vec!["succeed".to_owned(); MAX_SCRIPT_OUTCOMES + 1]
        )
        .is_err());
    }
}
