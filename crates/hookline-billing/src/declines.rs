//! Which declines say that a saved payment method cannot be charged again as it is: retrying those on a
//! schedule would only decline again (and card networks penalise merchants that retry hard declines), so the
//! cycle and the subscription become `needs_payment_method` instead. Every other decline (insufficient funds,
//! a generic decline, the issuer unavailable) is retried by dunning.
//!
//! Codes are the gateways' own: Stripe's `decline_code` or error `code`
//! (<https://docs.stripe.com/declines/codes>), Mercado Pago's `status_detail`
//! (<https://www.mercadopago.com.br/developers/en/docs/checkout-api/response-handling/collection-results>),
//! Pagar.me v5's `acquirer_return_code` (the failed charge's last transaction, see
//! [`hookline_gateways::gateway::pagarme_v5::read_charge`]), and `payment_method_unusable`, which the dispatcher records
//! when the gateway refuses the saved method itself (a method of another customer, detached, missing).
//!
//! Pagar.me's field carries two vocabularies. The acquirer's own four-digit return codes (Stone's authorizer
//! table, which Pagar.me v5 returned until 2026-08-28: "Códigos de retorno do autorizador",
//! <https://sdkandroid.stone.com.br/docs/codigos-retorno-autorizador>): 1xxx declines, 2xxx the same reasons with
//! "retain the card" (the issuer wants the card withdrawn: lost, stolen, restricted), 9xxx processing errors.
//! And, for Core API v5 from 2026-08-28 on, the ABECS standard codes of the card's brand ("Códigos de retorno
//! padrão ABECS", <https://docs.pagar.me/docs/c%C3%B3digos-de-retorno-padr%C3%A3o-abecs>), whose table marks each
//! code "reversível" (may be retried) or "irreversível" (never retry the same card). Both are classified; a code
//! neither list names is a decline dunning retries.

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
    // The acquirer's codes that name the card, not the moment: expired (1001), restricted (1004), invalid
    // number (1011), no account of the type requested (1014), invalid security code (1045); and every
    // "retain the card" code (2000–2010: lost, stolen, restricted, expired, suspected fraud).
    const PAGARME: &[&str] = &[
        "1001", "1004", "1011", "1014", "1045", "2000", "2001", "2002", "2003", "2004", "2005",
        "2006", "2007", "2008", "2009", "2010",
    ];
    // The ABECS codes the table marks irreversible for the card: invalid card number (14), lost (41), stolen
    // (43), account closed (46), expired (54), transaction not allowed for the card (57).
    const ABECS_IRREVERSIBLE: &[&str] = &["14", "41", "43", "46", "54", "57"];
    code == "payment_method_unusable"
        || STRIPE.contains(&code)
        || MERCADO_PAGO.contains(&code)
        || code.starts_with("cc_rejected_bad_filled_")
        || PAGARME.contains(&code)
        || ABECS_IRREVERSIBLE.contains(&code)
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
            // Pagar.me: expired, invalid, blocked, restricted, a "retenha o cartão", the ABECS expired and
            // invalid-card codes.
            "1001",
            "1011",
            "1004",
            "2008",
            "54",
            "14",
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
            // Pagar.me: not authorised, insufficient funds, suspected fraud, a processing error; ABECS
            // generic (05) and insufficient funds (51), both reversible.
            "1000",
            "1016",
            "1019",
            "9999",
            "not_authorized",
            "05",
            "51",
            "",
        ] {
            assert!(!method_unusable(soft), "{soft}");
        }
    }
}
