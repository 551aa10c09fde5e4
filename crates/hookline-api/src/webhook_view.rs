//! A webhook endpoint as its client sees it: the answer of create, get, update and rotate (`WebhookEndpoint`),
//! built from its row. Apart from [`crate::endpoints`] because [`crate::operation`] answers a keyed create with it
//! too, and the operation seam imports no handler module.

use time::OffsetDateTime;

use hookline_delivery::destinations::Endpoint;

/// Unix seconds, as the endpoints' answers show times.
pub(crate) fn unix(t: OffsetDateTime) -> i64 {
    t.unix_timestamp()
}

/// Whether an endpoint receives its facts now.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EndpointStatus {
    /// Facts are delivered.
    Enabled,
    /// Facts wait (the merchant's `disabled: true`, or its URL answered 410 Gone).
    Disabled,
}

/// A webhook endpoint as its client sees it (the OpenAPI schema `WebhookEndpoint`).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = WebhookEndpoint)]
pub(crate) struct EndpointObject {
    /// `we_…`.
    #[schema(example = "we_8c1f0e2d4b6a8c0e2f4a6b8d0c2e4f6a")]
    id: String,
    /// Always `webhook_endpoint`.
    #[schema(value_type = String, example = "webhook_endpoint")]
    object: &'static str,
    /// Where facts are POSTed.
    #[schema(example = "https://shop.example/hooks/hookline")]
    url: String,
    /// The fact types it receives (`*`: all it may see).
    enabled_events: Vec<String>,
    /// The merchant's note.
    description: Option<String>,
    /// `enabled` or `disabled`.
    status: EndpointStatus,
    /// Why it is disabled (`410 Gone`, or the merchant's).
    disabled_reason: Option<String>,
    /// When it was made (Unix seconds).
    created: i64,
    /// Until when the previous secret still signs, after a rotation (Unix seconds), else null.
    previous_secret_expires_at: Option<i64>,
    /// The signing secret (`whsec_…`): in the answers of create and `rotate_secret` only, never again.
    #[serde(skip_serializing_if = "Option::is_none")]
    secret: Option<String>,
}

/// The endpoint as its client sees it (never a secret).
pub(crate) fn object(e: &Endpoint) -> EndpointObject {
    let previous_until = e
        .previous_secret_expires_at
        .filter(|t| *t > OffsetDateTime::now_utc())
        .map(unix);
    EndpointObject {
        id: e.name.clone(),
        object: "webhook_endpoint",
        url: e.url.clone(),
        enabled_events: e.events.clone(),
        description: e.description.clone(),
        status: if e.disabled_at.is_some() {
            EndpointStatus::Disabled
        } else {
            EndpointStatus::Enabled
        },
        disabled_reason: e.disabled_reason.clone(),
        created: unix(e.created_at),
        previous_secret_expires_at: previous_until,
        secret: None,
    }
}

/// [`object`] with its secret: the answers of create and rotate only.
pub(crate) fn with_secret(e: &Endpoint, secret: &str) -> EndpointObject {
    EndpointObject {
        secret: Some(secret.to_owned()),
        ..object(e)
    }
}
