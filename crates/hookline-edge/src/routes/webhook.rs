//! `POST /webhooks/{provider}`: verify, store once, answer.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use actix_web::{web, HttpRequest, HttpResponse};
use anyhow::Context;
use bytes::BytesMut;
use hookline_bus::EventMessage;
use hookline_core::events::{self, OwnedEvent, StoreOutcome};
use hookline_core::input::log_text;
use hookline_core::telemetry;
use hookline_signature::{Request, Verified, Verifier};
use tracing::Instrument;

use crate::writer::WriteError;
use crate::{AppState, IngestError};
use hookline_web::BodyError;

/// Metric names (fixed, documented in docs/http.md).
pub mod metric {
    /// Counter: requests by `provider` and `outcome`.
    pub const REQUESTS: &str = "hookline_edge_requests_total";
    /// Counter: duplicates answered 200, by `provider`.
    pub const DUPLICATES: &str = "hookline_edge_duplicates_total";
    /// Counter: signature failures by `provider` and `reason` (error code).
    pub const SIGNATURE_FAILURES: &str = "hookline_edge_signature_failures_total";
    /// Histogram: seconds from request start to the answer, by `provider` and `outcome`.
    pub const ACK_SECONDS: &str = "hookline_edge_ack_seconds";
}

/// Handles one webhook delivery and records its metrics.
pub async fn receive(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, IngestError> {
    let started = Instant::now();
    let name = path.into_inner();
    // Unknown names come from the client: do not let them create metric series (or span attributes).
    let provider_label = if state.providers.contains_key(&name) {
        name.clone()
    } else {
        "unknown".to_string()
    };
    // The root of the event's trace. A `traceparent` the sender may have set is not followed: a provider is not
    // part of our trace, and an unauthenticated header must not choose what we record.
    let span = tracing::info_span!(
        "webhook.receive",
        otel.kind = "server",
        provider = %provider_label,
        outcome = tracing::field::Empty,
        event_id = tracing::field::Empty,
        duplicate = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    telemetry::record_trace_id(&span);
    let result = handle(&req, &name, payload, &state)
        .instrument(span.clone())
        .await;
    let _entered = span.enter();
    let outcome = match &result {
        Ok((StoreOutcome::Inserted(_), _)) => "stored",
        Ok((StoreOutcome::Duplicate(_), _)) => "duplicate",
        Err(e) => e.outcome(),
    };
    span.record("outcome", outcome);
    match &result {
        Ok((StoreOutcome::Inserted(id), _)) | Ok((StoreOutcome::Duplicate(Some(id)), _)) => {
            span.record("event_id", id);
        }
        _ => {}
    }
    span.record(
        "http.response.status_code",
        match &result {
            Ok(_) => 200,
            Err(e) => actix_web::ResponseError::status_code(e).as_u16(),
        },
    );
    metrics::counter!(metric::REQUESTS, "provider" => provider_label.clone(), "outcome" => outcome)
        .increment(1);
    metrics::histogram!(metric::ACK_SECONDS, "provider" => provider_label.clone(), "outcome" => outcome)
        .record(started.elapsed().as_secs_f64());
    match result {
        Ok((stored, verified)) => {
            let (id, duplicate) = match stored {
                StoreOutcome::Inserted(id) => (Some(id), false),
                StoreOutcome::Duplicate(id) => {
                    span.record("duplicate", true);
                    metrics::counter!(metric::DUPLICATES, "provider" => provider_label)
                        .increment(1);
                    (id, true)
                }
            };
            tracing::debug!(
                provider = ?log_text(&name),
                provider_event_id = ?log_text(&verified.dedupe_key),
                event_id = ?id,
                duplicate,
                "webhook stored"
            );
            Ok(HttpResponse::Ok().json(serde_json::json!({
                "received": true,
                "duplicate": duplicate,
                "id": id,
            })))
        }
        Err(e) => {
            match &e {
                IngestError::Signature(v) => {
                    metrics::counter!(metric::SIGNATURE_FAILURES, "provider" => provider_label, "reason" => v.code())
                        .increment(1);
                    tracing::warn!(provider = ?log_text(&name), signature_valid = false, error.code = v.code(), error.message = ?log_text(&v.to_string()), "webhook rejected");
                }
                IngestError::Unavailable(_)
                | IngestError::Unexpected(_)
                | IngestError::Refused(_) => {
                    tracing::error!(provider = ?log_text(&name), error.code = e.code(), error.cause_chain = ?log_text(&format!("{e:?}")), "webhook not stored");
                }
                _ => {
                    tracing::info!(provider = ?log_text(&name), error.code = e.code(), error.message = ?log_text(&e.to_string()), "webhook rejected")
                }
            }
            Err(e)
        }
    }
}

async fn handle(
    req: &HttpRequest,
    name: &str,
    payload: web::Payload,
    state: &AppState,
) -> Result<(StoreOutcome, Verified), IngestError> {
    let provider = state
        .providers
        .get(name)
        .ok_or_else(|| IngestError::UnknownProvider(log_text(name).to_string()))?;
    let body = read_body(req, payload, state).await?;

    let headers: Vec<(&str, &[u8])> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_bytes()))
        .collect();
    let query = req.query_string();
    let secrets = provider.secret_bytes();
    let verifier = Verifier {
        scheme: provider.scheme,
        secrets: &secrets,
        tolerance_secs: provider.tolerance_secs,
        now_unix: now_unix(),
    };
    // The signature is checked over the exact bytes received, before anything parses them.
    let verified = verifier
        .verify(&Request {
            headers: &headers,
            query,
            body: &body,
        })
        .map_err(|e| {
            if e.is_signature_error() {
                IngestError::Signature(e)
            } else {
                IngestError::Payload(e)
            }
        })?;

    let event = OwnedEvent {
        provider: name.to_string(),
        // Only signed material decides what is a duplicate (see `Verified::dedupe_key`).
        provider_event_id: verified.dedupe_key.clone(),
        event_type: verified.event_type.clone(),
        signed_at: verified.signed_at,
        headers: events::storable_headers(headers.iter().copied()),
        query: query.to_string(),
        body: body.freeze(),
        // The request's span (current here): the relay's publish and everything after it are its children.
        traceparent: telemetry::current_traceparent(),
    };
    // Bounds every downstream relies on (text columns, index rows, AMQP short strings, log lines), decided here
    // so that no value PostgreSQL or RabbitMQ would refuse is ever stored.
    event.check_storable().map_err(IngestError::Unstorable)?;
    #[cfg(feature = "failpoints")]
    fail::fail_point!("edge.before_commit");
    // One budget for queueing + INSERT: past it the provider gets 503 and retries. Giving up only drops our
    // wait: the batch statement commits on its own (no explicit transaction), so no pooled connection is left
    // inside a transaction, and a row that commits after the 503 is found as a duplicate on the retry.
    let commit_span = tracing::info_span!("edge.group_commit");
    let stored = tokio::time::timeout(state.edge.db_timeout, state.writer.store(event))
        .instrument(commit_span)
        .await
        .map_err(|_| {
            IngestError::Unavailable(anyhow::anyhow!(
                "storing the event took longer than {:?}",
                state.edge.db_timeout
            ))
        })?
        .map_err(|e| match e {
            WriteError::Database(ref db) if hookline_core::db::is_transient(db) => {
                IngestError::Unavailable(anyhow::Error::new(e).context("storing the event failed"))
            }
            WriteError::Closed => {
                IngestError::Unavailable(anyhow::Error::new(e).context("the edge is shutting down"))
            }
            WriteError::Database(ref db) if hookline_core::db::is_data_error(db) => {
                IngestError::Refused(
                    anyhow::Error::new(e).context("the database refused the event"),
                )
            }
            WriteError::Database(_) => {
                IngestError::Unexpected(anyhow::Error::new(e).context("storing the event failed"))
            }
        })?;
    #[cfg(feature = "failpoints")]
    fail::fail_point!("edge.after_commit");
    if let (StoreOutcome::Inserted(id), Some(relay)) = (stored, &state.relay) {
        // Committed: hand it to the relay. Never awaited, so the answer does not wait for RabbitMQ.
        relay.notify(EventMessage {
            id,
            provider: name.to_string(),
            provider_event_id: verified.dedupe_key.clone(),
            event_type: verified.event_type.clone(),
            traceparent: telemetry::current_traceparent(),
        });
    }
    Ok((stored, verified))
}

/// Reads the body, refusing to buffer past `max_body_bytes` and to wait past `body_read_timeout`.
async fn read_body(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
) -> Result<BytesMut, IngestError> {
    hookline_web::read_bounded(
        req,
        payload,
        state.edge.max_body_bytes,
        state.edge.body_read_timeout,
    )
    .await
    .map_err(|e| match e {
        BodyError::TooLarge { limit } => IngestError::PayloadTooLarge { limit },
        BodyError::Timeout(t) => IngestError::BodyTimeout(t),
        BodyError::Read(e) => IngestError::BodyRead(e),
    })
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("system clock is before 1970")
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
