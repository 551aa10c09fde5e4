//! Which declines say that a saved payment method cannot be charged again as it is: retrying those on a
//! schedule would only decline again (and card networks penalise merchants that retry hard declines), so the
//! cycle and the subscription become `needs_payment_method` instead. Every other decline (insufficient funds,
//! a generic decline, the issuer unavailable) is retried by dunning.
//!
//! Codes are the gateways' own: Stripe's `decline_code` or error `code`
//! (<https://docs.stripe.com/declines/codes>), Mercado Pago's `status_detail`
//! (<https://www.mercadopago.com.br/developers/en/docs/checkout-api/response-handling/collection-results>), and
//! `payment_method_unusable`, which the dispatcher records when the gateway refuses the saved method itself
//! (a method of another customer, detached, missing).

/// Whether the decline `code` means the payment method itself is unusable (see the module documentation).
pub fn method_unusable(code: &str) -> bool {
    const STRIPE: &[&str] = &[
        "authentication_required",
        "card_not_supported",
        "currency_not_supported",
        "expired_card",
        "incorrect_cvc",
        "incorrect_number",
        "invalid_account",
        "invalid_cvc",
        "invalid_expiry_month",
        "invalid_expiry_year",
        "invalid_number",
        "lost_card",
        "new_account_information_available",
        "pickup_card",
        "restricted_card",
        "revocation_of_all_authorizations",
        "revocation_of_authorization",
        "stolen_card",
        "stop_payment_order",
        "resource_missing",
        "payment_method_unactivated",
        "payment_method_unexpected_state",
    ];
    const MERCADO_PAGO: &[&str] = &[
        "cc_rejected_blacklist",
        "cc_rejected_card_disabled",
        "cc_rejected_card_type_not_allowed",
        "cc_rejected_invalid_installments",
    ];
    code == "payment_method_unusable"
        || STRIPE.contains(&code)
        || MERCADO_PAGO.contains(&code)
        || code.starts_with("cc_rejected_bad_filled_")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hard_declines_need_a_new_method_and_soft_ones_are_retried() {
        for hard in [
            "expired_card",
            "authentication_required",
            "stolen_card",
            "payment_method_unusable",
            "cc_rejected_bad_filled_date",
            "cc_rejected_card_disabled",
        ] {
            assert!(method_unusable(hard), "{hard}");
        }
        for soft in [
            "insufficient_funds",
            "generic_decline",
            "card_declined",
            "try_again_later",
            "processing_error",
            "cc_rejected_insufficient_amount",
            "cc_rejected_other_reason",
            "cc_rejected_call_for_authorize",
            "",
        ] {
            assert!(!method_unusable(soft), "{soft}");
        }
    }
}
