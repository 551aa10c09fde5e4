//! Error types. Messages are written for an operator reading logs: they name the header or field
//! and the check that failed, and never contain secret material or bodies. Values echoed from a
//! request (a timestamp, a digest name) are truncated and escaped, because they are attacker
//! controlled and end up in logs.

use crate::Scheme;

/// A scheme name in configuration that is not one of [`Scheme::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown signature scheme '{0}' (valid: stripe, standard-webhooks, svix, github, mercadopago, shopify, pagarme, adyen, pagarme-v5)"
)]
pub struct UnknownScheme(pub String);

/// Why a request was rejected.
///
/// [`VerifyError::code`] gives a stable machine code for JSON error bodies and metrics;
/// [`VerifyError::is_signature_error`] separates "not authentic" from "authentic but unusable".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The verifier was given no secret at all: a configuration error, not the sender's fault.
    #[error("no secret configured for scheme {scheme}")]
    NoSecret {
        /// The scheme being verified.
        scheme: Scheme,
    },

    /// No configured secret verified the request, and at least one could not be decoded into
    /// key bytes (so the failure may be a configuration error rather than a forgery).
    /// Only reported when nothing matched: a broken fallback secret does not block a working one.
    #[error(
        "secret #{index} configured for {scheme} cannot be used ({reason}) and no other configured secret verified the request"
    )]
    InvalidSecret {
        /// The scheme being verified.
        scheme: Scheme,
        /// Index in [`crate::Verifier::secrets`] of the first undecodable secret.
        index: usize,
        /// Why it cannot be decoded (never contains the secret).
        reason: String,
    },

    /// A header or body field the signature check needs is absent or empty.
    #[error("{location} {detail}")]
    MissingSignature {
        /// Where it was expected, e.g. `header Stripe-Signature`.
        location: String,
        /// What is wrong, e.g. `is missing`, `is empty`.
        detail: String,
    },

    /// The signature material is present but cannot be parsed: wrong layout, a timestamp that is
    /// not an integer, bad hex/base64, a digest that is not allowed, no entry of a usable version.
    #[error("{location}: {detail}")]
    MalformedSignature {
        /// Where, e.g. `header webhook-timestamp`.
        location: String,
        /// What, e.g. `'hello' is not an integer`.
        detail: String,
    },

    /// The signature is authentic but its signed timestamp is too far from the receiver clock:
    /// a replay, or a clock that is off on one side.
    #[error(
        "timestamp {timestamp} is {} (tolerance {tolerance} s)",
        describe_skew(*.timestamp, *.now)
    )]
    TimestampOutOfTolerance {
        /// The signed timestamp, unix seconds.
        timestamp: i64,
        /// The receiver clock used for the check, unix seconds.
        now: i64,
        /// The tolerance in seconds.
        tolerance: u64,
    },

    /// Well-formed signatures, none of which any configured secret produces: a wrong secret, a
    /// tampered request, or a provider-side rotation the receiver has not caught up with.
    #[error("no {what} in {location} matches {}", describe_secrets(*.secrets))]
    SignatureMismatch {
        /// What was compared, e.g. `v1 signature`.
        what: &'static str,
        /// Where it came from, e.g. `header Stripe-Signature`.
        location: String,
        /// How many secrets were tried.
        secrets: usize,
    },

    /// The signature verified, but an unsigned part of the request contradicts the signed part
    /// (Mercado Pago: body `data.id` differs from the signed query `data.id`). Treated as a
    /// forgery attempt, since acting on the unsigned value would defeat the signature.
    #[error("{detail}")]
    SignedFieldMismatch {
        /// Which fields disagree.
        detail: String,
    },

    /// The signature verified but the body cannot be used: not UTF-8, not JSON, not an object.
    #[error("malformed payload: {detail}")]
    MalformedPayload {
        /// What is wrong with it (never the body itself).
        detail: String,
    },

    /// The signature verified but the dedupe key is absent, so the event cannot be stored
    /// idempotently.
    #[error("no event id: {detail}")]
    MissingEventId {
        /// Where it was expected.
        detail: String,
    },
}

impl VerifyError {
    /// Stable snake_case code for JSON error bodies and metric labels. Never changes for a given
    /// variant; the `Display` text may be improved over time, these codes may not.
    pub fn code(&self) -> &'static str {
        match self {
            VerifyError::NoSecret { .. } => "no_secret",
            VerifyError::InvalidSecret { .. } => "invalid_secret",
            VerifyError::MissingSignature { .. } => "missing_signature",
            VerifyError::MalformedSignature { .. } => "malformed_signature",
            VerifyError::TimestampOutOfTolerance { .. } => "timestamp_out_of_tolerance",
            VerifyError::SignatureMismatch { .. } => "signature_mismatch",
            VerifyError::SignedFieldMismatch { .. } => "signed_field_mismatch",
            VerifyError::MalformedPayload { .. } => "malformed_payload",
            VerifyError::MissingEventId { .. } => "missing_event_id",
        }
    }

    /// `true` when the request could not be authenticated (reject as unauthorised), `false` for
    /// payload errors, where the signature was fine but the body is unusable (the sender is
    /// genuine, so the problem is worth alerting on rather than treating as an attack).
    /// Configuration errors (`no_secret`, `invalid_secret`) count as signature errors: the request
    /// was not authenticated.
    pub fn is_signature_error(&self) -> bool {
        !matches!(
            self,
            VerifyError::MalformedPayload { .. } | VerifyError::MissingEventId { .. }
        )
    }
}

/// "301 s in the future" / "301 s old".
fn describe_skew(timestamp: i64, now: i64) -> String {
    let diff = i128::from(now) - i128::from(timestamp);
    if diff < 0 {
        format!("{} s in the future", diff.unsigned_abs())
    } else {
        format!("{diff} s old")
    }
}

/// "the configured secret" / "any of 2 configured secrets".
fn describe_secrets(n: usize) -> String {
    if n == 1 {
        "the configured secret".to_owned()
    } else {
        format!("any of {n} configured secrets")
    }
}
