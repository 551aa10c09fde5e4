//! Pure webhook signature verifiers for the providers hookline receives from.
//!
//! It must never: do I/O or read a clock (time is passed in), trust a body whose MAC it did not check over the
//! raw bytes (Adyen, signed inside the body, is the documented exception), or reveal a secret through `Debug`
//! or an error.
//!
//! Everything in this crate is a pure function of its inputs: no I/O, no clock, no async. The
//! caller hands over a borrowed view of the HTTP request ([`Request`]), the configured secrets and
//! the current time ([`Verifier`]), and gets back either the facts the rest of the pipeline needs
//! ([`Verified`]: the dedupe key, the event type, the signed timestamp, which secret matched) or a
//! precise [`VerifyError`].
//!
//! Rules every scheme follows (see `shared/docs/signature-schemes.md`):
//! - the MAC is computed over the **raw bytes** exactly as received, before any JSON parsing, so a
//!   re-serialised body can never verify by accident (Adyen is the one exception: its signature is
//!   *inside* the JSON body, so the body has to be parsed to find it);
//! - MACs are compared in constant time, and every configured secret is tried against every
//!   candidate signature (secret rotation on either side) without an early return on content;
//! - signed timestamps are checked in both directions: `|now - ts| > tolerance` is rejected, a skew
//!   of exactly `tolerance` is accepted (project policy, §10 of the scheme notes);
//! - the payload is only looked at after the signature is accepted, to extract the dedupe key.
//!
//! [`sign`] holds the matching signing helpers, used by the CLI's `simulate` command and by
//! end-to-end tests.
//!
//! ```
//! use hookline_signature::{sign, Request, Scheme, Verifier};
//!
//! let body = br#"{"id":"evt_1","type":"invoice.paid"}"#;
//! let header = sign::stripe(b"whsec_test", 1_767_225_600, body);
//! let headers = [("Stripe-Signature", header.as_bytes())];
//! let secrets: [&[u8]; 2] = [b"whsec_old", b"whsec_test"];
//! let verified = Verifier {
//!     scheme: Scheme::Stripe,
//!     secrets: &secrets,
//!     tolerance_secs: None,
//!     now_unix: 1_767_225_610,
//! }
//! .verify(&Request { headers: &headers, query: "", body })?;
//! assert_eq!(verified.event_id, "evt_1");
//! assert_eq!(verified.secret_index, 1);
//! # Ok::<(), hookline_signature::VerifyError>(())
//! ```

#![warn(missing_docs)]

mod error;
mod keys;
mod schemes;
pub mod sign;
mod util;

use std::fmt;
use std::str::FromStr;

pub use error::{UnknownScheme, VerifyError};
pub use schemes::pagarme_v5::dedupe_key as pagarme_v5_dedupe_key;

/// A webhook signature scheme, one per provider family.
///
/// The scheme decides which headers are read, which bytes are signed, how configured secrets are
/// turned into key bytes and where the dedupe key comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    /// Stripe: `Stripe-Signature: t=<unix>,v1=<hex>`, HMAC-SHA256 over `"{t}.{body}"`.
    Stripe,
    /// Standard Webhooks: `webhook-id`/`webhook-timestamp`/`webhook-signature` headers only.
    StandardWebhooks,
    /// Svix: the Standard Webhooks algorithm with `svix-*` headers, falling back to `webhook-*`
    /// (white-labelled Svix deployments send the unbranded names).
    Svix,
    /// GitHub: `X-Hub-Signature-256: sha256=<hex>` over the raw body; no signed timestamp.
    Github,
    /// Mercado Pago: `x-signature: ts=..,v1=..` over a manifest built from the query `data.id`,
    /// `x-request-id` and `ts`. The body is **not** signed.
    MercadoPago,
    /// Shopify: `X-Shopify-Hmac-SHA256: <base64>` over the raw body; no signed timestamp.
    Shopify,
    /// Pagar.me v1/v4 postbacks: `X-Hub-Signature: sha1=<hex>` over the form-urlencoded body.
    Pagarme,
    /// Adyen standard webhooks: HMAC-SHA256 over selected item fields, carried inside the body.
    Adyen,
    /// Pagar.me Core API v5 webhooks (JSON, `hook_…` ids): nothing is signed; the `Authorization: Basic` header
    /// must carry one of the configured `user:password` credentials (the "secrets" of this scheme). The body is
    /// not authenticated by a MAC, so effects are decided from the API, never from it.
    PagarmeV5,
}

/// How a provider encodes its payload, so storage and replay can set the right content type.
///
/// This is the provider's normal format. [`Verifier::verify`] parses the body only where the
/// dedupe key or event type lives in it; GitHub and Shopify take both from headers, so their
/// bodies are not required to be JSON (GitHub can also be configured to send form bodies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadFormat {
    /// `application/json`.
    Json,
    /// `application/x-www-form-urlencoded` (Pagar.me postbacks).
    FormUrlEncoded,
}

impl PayloadFormat {
    /// The MIME type to use when storing or replaying a payload of this format.
    pub fn content_type(&self) -> &'static str {
        match self {
            PayloadFormat::Json => "application/json",
            PayloadFormat::FormUrlEncoded => "application/x-www-form-urlencoded",
        }
    }
}

impl Scheme {
    /// Every scheme, in a stable order (used by CLIs and config validation to list them).
    pub const ALL: [Scheme; 9] = [
        Scheme::Stripe,
        Scheme::StandardWebhooks,
        Scheme::Svix,
        Scheme::Github,
        Scheme::MercadoPago,
        Scheme::Shopify,
        Scheme::Pagarme,
        Scheme::Adyen,
        Scheme::PagarmeV5,
    ];

    /// The configuration name of the scheme; [`FromStr`] accepts exactly these names.
    pub fn as_str(&self) -> &'static str {
        match self {
            Scheme::Stripe => "stripe",
            Scheme::StandardWebhooks => "standard-webhooks",
            Scheme::Svix => "svix",
            Scheme::Github => "github",
            Scheme::MercadoPago => "mercadopago",
            Scheme::Shopify => "shopify",
            Scheme::Pagarme => "pagarme",
            Scheme::Adyen => "adyen",
            Scheme::PagarmeV5 => "pagarme-v5",
        }
    }

    /// Whether the signature covers a timestamp, i.e. whether replay can be bounded by a
    /// tolerance window. Schemes without one rely on dedupe alone against replays.
    pub fn signs_timestamp(&self) -> bool {
        matches!(
            self,
            Scheme::Stripe | Scheme::StandardWebhooks | Scheme::Svix | Scheme::MercadoPago
        )
    }

    /// The tolerance applied when [`Verifier::tolerance_secs`] is `None`: 300 s for timestamped
    /// schemes (the Stripe and Standard Webhooks SDK default; Mercado Pago documents none, 300 s
    /// is project policy), `None` for schemes that sign no timestamp.
    pub fn default_tolerance_secs(&self) -> Option<u64> {
        if self.signs_timestamp() {
            Some(300)
        } else {
            None
        }
    }

    /// The payload format the provider sends.
    pub fn payload_format(&self) -> PayloadFormat {
        match self {
            Scheme::Pagarme => PayloadFormat::FormUrlEncoded,
            _ => PayloadFormat::Json,
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scheme {
    type Err = UnknownScheme;

    /// Parses a configuration name. Matching ignores ASCII case and surrounding whitespace,
    /// because these names come from hand-written config files and environment variables.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim();
        Scheme::ALL
            .into_iter()
            .find(|scheme| scheme.as_str().eq_ignore_ascii_case(wanted))
            .ok_or_else(|| UnknownScheme(s.to_owned()))
    }
}

/// Borrowed view of one HTTP request, as received.
///
/// Header names are matched ASCII-case-insensitively (HTTP semantics; providers and proxies vary
/// the casing). If a header occurs more than once, the **first occurrence wins**: a signature
/// header is never merged or re-joined, so a second copy appended by an intermediary cannot
/// change what is verified. Leading and trailing spaces/tabs of a value are ignored, as HTTP
/// defines them not to be part of the value.
#[derive(Clone, Copy)]
pub struct Request<'a> {
    /// `(name, value)` pairs in the order received.
    pub headers: &'a [(&'a str, &'a [u8])],
    /// The raw URL query string, without the leading `?` (a leading `?` is tolerated).
    /// Only Mercado Pago reads it (its `data.id` is signed from here).
    pub query: &'a str,
    /// The exact raw body bytes.
    pub body: &'a [u8],
}

impl fmt::Debug for Request<'_> {
    /// Prints header names and sizes only: values may carry signatures and bodies may carry
    /// personal data, neither belongs in logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| *name).collect();
        f.debug_struct("Request")
            .field("header_names", &names)
            .field("query_len", &self.query.len())
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// Verification inputs other than the request: the scheme, the secrets and the clock.
#[derive(Clone, Copy)]
pub struct Verifier<'a> {
    /// Which provider's rules to apply.
    pub scheme: Scheme,
    /// The raw secret strings as configured (e.g. the `whsec_...` bytes, an Adyen hex key).
    /// Key derivation per scheme happens inside: UTF-8 bytes as-is for Stripe (including the
    /// `whsec_` prefix), GitHub, Mercado Pago, Shopify and Pagar.me; the `user:password` credentials for Pagar.me v5
    /// (compared, not used as a key); optional `whsec_` stripped then
    /// standard base64 (padded or not) for Standard Webhooks and Svix; hex for Adyen.
    /// Several secrets support rotation: each is tried, and [`Verified::secret_index`] says which
    /// one matched.
    pub secrets: &'a [&'a [u8]],
    /// Maximum allowed `|now - signed timestamp|` in seconds; `None` uses
    /// [`Scheme::default_tolerance_secs`]. Ignored by schemes that sign no timestamp. `Some(0)`
    /// demands an exact match (there is no "disabled" value; pass `u64::MAX` to accept any skew).
    pub tolerance_secs: Option<u64>,
    /// The receiver's clock, unix seconds. Passed in so verification stays a pure function.
    pub now_unix: i64,
}

impl fmt::Debug for Verifier<'_> {
    /// Never prints secret material, only how many secrets are configured.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("scheme", &self.scheme)
            .field(
                "secrets",
                &format_args!("<{} redacted>", self.secrets.len()),
            )
            .field("tolerance_secs", &self.tolerance_secs)
            .field("now_unix", &self.now_unix)
            .finish()
    }
}

/// What a successfully verified request tells the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The provider's own id for the event or delivery, as the provider names it (shown to operators,
    /// matched against the provider's dashboard). Where it comes from depends on the scheme (see
    /// [`Verifier::verify`]); for GitHub, Shopify and Mercado Pago it is **not** covered by the signature.
    pub event_id: String,
    /// The key to deduplicate on: stays the same when the provider retries or redelivers the same event, and is
    /// derived only from signed material, so that an attacker replaying a captured request with unsigned parts
    /// changed can neither create a new event nor make a different genuine one look like a duplicate. Equal to
    /// `event_id` where that is signed (Stripe, Standard Webhooks, Svix, Pagar.me, Adyen) and for Pagar.me v5
    /// (nothing is signed there; its effects are re-read from the API); `sha256:{hex of the body}` for GitHub and Shopify (they sign only the body); `mp:{data.id}:{x-request-id}` (or
    /// `mp:{data.id}:ts:{ts}` without a request id) for Mercado Pago (what its manifest signs).
    pub dedupe_key: String,
    /// The provider's event type (e.g. `invoice.paid`, `push.opened`), when the payload or the
    /// headers carry one. Informational: routing may use it, dedupe does not.
    pub event_type: Option<String>,
    /// The signed timestamp in unix seconds, for schemes that sign one (Mercado Pago millisecond
    /// timestamps are converted to seconds).
    pub signed_at: Option<i64>,
    /// Index into [`Verifier::secrets`] of the secret that verified the request. Operators watch
    /// this during rotation to know when the old secret is no longer used.
    pub secret_index: usize,
}

impl Verifier<'_> {
    /// Verifies one request and extracts its dedupe key.
    ///
    /// The signature is checked first, over the raw bytes; only then is the payload inspected.
    /// For timestamped schemes the tolerance is checked *after* the MAC, so a
    /// [`VerifyError::TimestampOutOfTolerance`] always means "authentic but stale or from the
    /// future" (replay or clock skew), never "forged".
    ///
    /// The provider's event id (`event_id`) and `event_type` per scheme (the stored dedupe key is
    /// [`Verified::dedupe_key`]):
    /// - Stripe: body JSON `id`; type = body `type`.
    /// - Standard Webhooks: the `webhook-id` header; Svix: `svix-id` (or the `webhook-id` it fell
    ///   back to); type = body `type`. The body must be a JSON object.
    /// - GitHub: `X-GitHub-Delivery` (kept on redelivery); type = `X-GitHub-Event`, plus
    ///   `.{action}` when the body is a JSON object with a string `action`.
    /// - Mercado Pago: body JSON `id` (numbers as decimal text); type = body `type`, else
    ///   `action`. The signed query `data.id` is required, the body `data.id` too, and they must
    ///   be equal.
    /// - Shopify: `X-Shopify-Webhook-Id`; type = `X-Shopify-Topic`.
    /// - Pagar.me: synthesised, see *Pagar.me dedupe key* below; type = the form field `event`.
    /// - Adyen: `{pspReference}:{eventCode}:{success}` of the first item; type = `eventCode`.
    /// - Pagar.me v5: body JSON `id` (`hook_…`, at most 128 bytes); type = body `type`. "Verified" means the
    ///   `Authorization: Basic` header carries one of the configured `user:password` credentials (constant-time
    ///   comparison); nothing is signed, so the body is trusted for routing only.
    ///
    /// Stripe, Standard Webhooks, Svix, Mercado Pago and Adyen bodies must be JSON objects (a
    /// signed body that is not is [`VerifyError::MalformedPayload`]). GitHub and Shopify bodies are
    /// not parsed beyond the optional `action`: their ids come from headers, and GitHub can be
    /// configured to send form-encoded payloads. The Mercado Pago `data.id` comparison ignores
    /// case, because the signature itself only covers the lower-cased id.
    ///
    /// # Pagar.me dedupe key
    ///
    /// Pagar.me postbacks carry no event or delivery id. The key is
    /// `pagarme:{id}:{event}:{current_status}` when the form has `id` and `current_status`: a
    /// retry of the same postback repeats these fields, and one transaction reaches each status
    /// once, so distinct status changes stay distinct. Otherwise it is `sha256:{hex of raw body}`,
    /// which still collapses byte-identical retries.
    ///
    /// # Adyen
    ///
    /// Adyen puts `hmacSignature` inside each `NotificationRequestItem`, so the body must be
    /// parsed as JSON to find it; the MAC itself covers the item fields, not the raw bytes. Every
    /// item must verify, with one and the same configured key. The dedupe key follows Adyen's
    /// guidance to treat pspReference + eventCode + success as the identity of a notification.
    pub fn verify(&self, req: &Request<'_>) -> Result<Verified, VerifyError> {
        if self.secrets.is_empty() {
            return Err(VerifyError::NoSecret {
                scheme: self.scheme,
            });
        }
        let keys = keys::Keys::decode(self.scheme, self.secrets);
        let tolerance = self
            .tolerance_secs
            .or(self.scheme.default_tolerance_secs())
            .unwrap_or(u64::MAX);
        let ctx = schemes::Ctx {
            req,
            keys: &keys,
            tolerance,
            now: self.now_unix,
        };
        match self.scheme {
            Scheme::Stripe => schemes::stripe::verify(&ctx),
            Scheme::StandardWebhooks => schemes::standard::verify(&ctx, false),
            Scheme::Svix => schemes::standard::verify(&ctx, true),
            Scheme::Github => schemes::github::verify(&ctx),
            Scheme::MercadoPago => schemes::mercadopago::verify(&ctx),
            Scheme::Shopify => schemes::shopify::verify(&ctx),
            Scheme::Pagarme => schemes::pagarme::verify(&ctx),
            Scheme::Adyen => schemes::adyen::verify(&ctx),
            Scheme::PagarmeV5 => schemes::pagarme_v5::verify(&ctx),
        }
    }
}

/// Checks a configured secret at start-up, so a typo fails config loading instead of every
/// webhook at 3 a.m.
///
/// Rejects: empty secrets; leading/trailing whitespace (usually a newline from a secrets file);
/// non-UTF-8 secrets; for Standard Webhooks/Svix, values that are not base64 after an optional
/// `whsec_` prefix and `whsk_`/`whpk_` (ed25519, `v1a`) keys this crate does not verify; for
/// Adyen, values that are not hex. The error message never contains the secret itself.
pub fn validate_secret(scheme: Scheme, secret: &[u8]) -> Result<(), String> {
    keys::validate(scheme, secret)
}

/// The result of a verification as operators read it, one line each: `valid`, the ids, the type, the signed
/// time relative to `now_unix` (named `now_label`, e.g. `--now`), the matching secret; or `invalid (code):
/// reason`. `hookline verify` prints these lines and the operator console shows them, so both explain a
/// failure in exactly the same words.
pub fn outcome_lines(
    result: &Result<Verified, VerifyError>,
    secrets: usize,
    now_unix: i64,
    now_label: &str,
) -> Vec<String> {
    match result {
        Ok(v) => {
            let mut lines = vec![
                "valid".to_string(),
                format!("event_id: {}", v.event_id),
                format!("dedupe_key: {}", v.dedupe_key),
            ];
            if let Some(t) = &v.event_type {
                lines.push(format!("event_type: {t}"));
            }
            if let Some(ts) = v.signed_at {
                lines.push(format!(
                    "signed_at: {ts} ({} s before {now_label})",
                    now_unix - ts
                ));
            }
            lines.push(format!(
                "matched secret: #{} of {secrets}",
                v.secret_index + 1
            ));
            lines
        }
        Err(e) => vec![format!("invalid ({}): {e}", e.code())],
    }
}
