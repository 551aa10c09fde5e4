//! The bounds a stored event keeps: ids, types and provider names that fit every downstream key, the headers
//! worth storing (never a credential), and the check the edge runs before storing and the worker again after
//! reading.

/// Longest event id (dedupe key) stored, in bytes. Every real provider's id fits with room to spare (Stripe
/// `evt_` + 24, Svix `msg_` + 27, GitHub and Shopify UUIDs, Adyen's and Pagar.me's composite keys, the Mercado
/// Pago key built from signed fields); and every downstream can carry it: the AMQP `message_id` short string
/// (`{provider}:{id}` ≤ 255 bytes with a provider name of at most [`MAX_PROVIDER_NAME_BYTES`]), the btree
/// index row of the UNIQUE constraint (limit ~2.7 KB), a log line.
pub const MAX_EVENT_ID_BYTES: usize = 200;

/// Longest event type stored, in bytes (Stripe's longest types are ~50). Bounded so that the routing key
/// `{provider}.{type}` stays an AMQP short string.
pub const MAX_EVENT_TYPE_BYTES: usize = 128;

/// Longest configured provider name (it is part of the dedupe key, the routing key and the message id).
pub const MAX_PROVIDER_NAME_BYTES: usize = 48;

/// Most header and query bytes stored with one event (names + values + query), outside `max_body_bytes`. Real
/// providers send 1–3 KB; a request above this is refused rather than stored.
pub const MAX_STORED_HEADER_BYTES: usize = 16 * 1024;

/// Header names that are credentials of the sender's HTTP client (or of a proxy in front of us), never
/// stored: matched exactly, after lower-casing.
const UNSTORED_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-csrf-token",
    "x-xsrf-token",
];

/// Fragments that make any header name look like a credential wherever they occur (`x-api-key`,
/// `x-auth-token`, `x-amz-security-token`, `x-client-secret`, `x-session-id`, `x-jwt-assertion`, …).
const CREDENTIAL_FRAGMENTS: &[&str] = &[
    "auth",
    "token",
    "secret",
    "password",
    "passwd",
    "api-key",
    "apikey",
    "api_key",
    "session",
    "credential",
    "cookie",
    "private",
    "jwt",
    "bearer",
];

/// True when a header of this name must never be stored (nor logged, nor shown): it may carry a credential.
///
/// The rule, on the lower-cased name: an exact [`UNSTORED_HEADERS`] name, or a [`CREDENTIAL_FRAGMENTS`]
/// fragment anywhere, or a *word* (split on `-` and `_`) that is or ends with `key` (`x-access-key`,
/// `x-signature-key`, `x-signature-key-id`, `x-hookkey`, `idempotency-key` too: a header named for a key is too
/// often a credential to tell apart, and no provider signs one). Signature headers are KEPT: `stripe-signature`,
/// `x-hub-signature(-256)`, `x-signature` and `x-request-id` (Mercado Pago), `webhook-*`/`svix-*`,
/// `x-shopify-hmac-sha256` carry no secret (an HMAC of the body) and the console's "verify now" and
/// `hookline verify` re-check the stored event with them; none of their words is a key.
pub fn is_credential_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    UNSTORED_HEADERS.contains(&name.as_str())
        || CREDENTIAL_FRAGMENTS.iter().any(|f| name.contains(f))
        || name.split(['-', '_']).any(|word| word.ends_with("key"))
}

#[cfg(test)]
mod credential_header_tests {
    use super::is_credential_header;

    /// Names that must never be stored.
    const DROPPED: &[&str] = &[
        "authorization",
        "Authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "X-Api-Key",
        "x-apikey",
        "api_key",
        "x-signature-key",
        "X-Signature-Key",
        "x-signature-key-id",
        "x-webhook-signature-key",
        "x-access-key",
        "X-Access-Key",
        "x-secret-key",
        "x-private-key",
        "x-hookkey",
        "key",
        "x-jwt",
        "X-Jwt",
        "x-jwt-assertion",
        "jwt",
        "x-auth-token",
        "x-amz-security-token",
        "x-secret",
        "x-client-secret",
        "x-password",
        "x-passwd",
        "x-session-id",
        "x-credentials",
        "x-bearer",
        "x-csrf-token",
        "idempotency-key",
    ];

    /// Names that must be kept (signature verification and operators need them).
    const KEPT: &[&str] = &[
        "stripe-signature",
        "Stripe-Signature",
        "x-hub-signature",
        "x-hub-signature-256",
        "x-signature",
        "x-request-id",
        "content-type",
        "content-length",
        "user-agent",
        "x-github-event",
        "x-github-delivery",
        "x-shopify-hmac-sha256",
        "x-shopify-topic",
        "x-shopify-webhook-id",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "svix-id",
        "svix-timestamp",
        "svix-signature",
        "x-forwarded-for",
        "keep-alive",
        "accept",
    ];

    #[test]
    fn credential_headers_are_dropped_and_signature_headers_kept() {
        let wrongly_kept: Vec<_> = DROPPED
            .iter()
            .filter(|n| !is_credential_header(n))
            .collect();
        let wrongly_dropped: Vec<_> = KEPT.iter().filter(|n| is_credential_header(n)).collect();
        assert!(
            wrongly_kept.is_empty() && wrongly_dropped.is_empty(),
            "kept but credentials: {wrongly_kept:?}; dropped but needed: {wrongly_dropped:?}"
        );
    }

    /// Every header a signature scheme reads is kept, or the console could not re-verify a stored event.
    #[test]
    fn every_scheme_header_is_kept() {
        for name in [
            "Stripe-Signature",
            "X-Hub-Signature",
            "X-Hub-Signature-256",
            "X-GitHub-Delivery",
            "X-GitHub-Event",
            "X-Shopify-Hmac-SHA256",
            "X-Shopify-Topic",
            "X-Shopify-Webhook-Id",
            "svix-id",
            "svix-signature",
            "svix-timestamp",
            "webhook-id",
            "webhook-signature",
            "webhook-timestamp",
            "x-request-id",
            "x-signature",
        ] {
            assert!(!is_credential_header(name), "{name}");
        }
    }
}

/// Why a verified event cannot be stored as it is. Decided before the INSERT, so that no data error can reach
/// the database and fail a whole group-commit batch; each is answered 400 (retrying will not fix it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unstorable {
    /// The event id is empty.
    #[error("the event id is empty")]
    EmptyEventId,
    /// The event id is longer than [`MAX_EVENT_ID_BYTES`].
    #[error("the event id is {0} bytes long; at most {MAX_EVENT_ID_BYTES} are accepted")]
    EventIdTooLong(usize),
    /// The event id holds a control character (NUL cannot be stored in PostgreSQL text at all).
    #[error("the event id contains a control character")]
    EventIdControlChar,
    /// The event type is longer than [`MAX_EVENT_TYPE_BYTES`].
    #[error("the event type is {0} bytes long; at most {MAX_EVENT_TYPE_BYTES} are accepted")]
    EventTypeTooLong(usize),
    /// The event type holds a control character.
    #[error("the event type contains a control character")]
    EventTypeControlChar,
    /// Stored headers and query together exceed [`MAX_STORED_HEADER_BYTES`].
    #[error("headers and query take {0} bytes; at most {MAX_STORED_HEADER_BYTES} are stored")]
    HeadersTooLarge(usize),
    /// The query string holds a NUL or control character.
    #[error("the query string contains a control character")]
    QueryControlChar,
}

impl Unstorable {
    /// Stable machine-readable code (JSON error bodies, logs, metrics labels).
    pub fn code(&self) -> &'static str {
        match self {
            Unstorable::EmptyEventId => "missing_event_id",
            Unstorable::EventIdTooLong(_) => "event_id_too_long",
            Unstorable::EventIdControlChar => "invalid_event_id",
            Unstorable::EventTypeTooLong(_) => "event_type_too_long",
            Unstorable::EventTypeControlChar => "invalid_event_type",
            Unstorable::HeadersTooLarge(_) => "headers_too_large",
            Unstorable::QueryControlChar => "invalid_query",
        }
    }
}

/// Checks the parts of an event that become text columns, keys and AMQP fields. The edge runs it before
/// storing; the worker runs it again on what it reads (rows written by an older version or by hand), so a row
/// that slipped in is dead-lettered with this reason instead of travelling further.
pub fn check_event_fields(
    provider_event_id: &str,
    event_type: Option<&str>,
) -> Result<(), Unstorable> {
    if provider_event_id.is_empty() {
        return Err(Unstorable::EmptyEventId);
    }
    if provider_event_id.len() > MAX_EVENT_ID_BYTES {
        return Err(Unstorable::EventIdTooLong(provider_event_id.len()));
    }
    if provider_event_id.chars().any(char::is_control) {
        return Err(Unstorable::EventIdControlChar);
    }
    if let Some(t) = event_type {
        if t.len() > MAX_EVENT_TYPE_BYTES {
            return Err(Unstorable::EventTypeTooLong(t.len()));
        }
        if t.chars().any(char::is_control) {
            return Err(Unstorable::EventTypeControlChar);
        }
    }
    Ok(())
}

/// Keeps the headers worth storing (drops every [credential header](is_credential_header)), with values made UTF-8 (lossily: non-UTF-8 header bytes are rare and the
/// headers are kept for operators, not for re-verification of the body).
pub fn storable_headers<'h>(
    headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
) -> Vec<(String, String)> {
    headers
        .into_iter()
        .filter(|(name, _)| !is_credential_header(name))
        .map(|(name, value)| {
            (
                name.to_ascii_lowercase(),
                String::from_utf8_lossy(value).replace('\0', ""),
            )
        })
        .collect()
}
