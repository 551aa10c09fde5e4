//! The API's idempotency, decided by the database (in the style of the edge's group commit: the answer is sent
//! only after what it reports is committed).
//!
//! One transaction per request: claim `(client name, Idempotency-Key)` in `api_idempotency_keys`, run the operation
//! (which writes the intent or refund and its outbox row), store the response on the key row, commit. A
//! concurrent request with the same key waits on the key's primary-key entry until the first commits, then
//! replays the stored response (`Idempotent-Replayed: true`): a double click creates one intent and both clicks
//! get the same answer. The wait is bounded by `SET LOCAL lock_timeout`; past it: 409
//! `idempotency_key_in_flight`. Only successful responses are stored: a request that fails rolls back, key
//! included, so its retry runs again.

use std::time::Duration;

use actix_web::http::StatusCode;
use hookline_payments::intents::{self, KeyClaim};
use sha2::{Digest, Sha256};

use super::error::ApiError;
use super::operation::Operation;
use super::{ApiState, Reply};

/// Longest wait for a key held by an in-flight request before answering 409.
pub const KEY_LOCK_TIMEOUT: Duration = Duration::from_millis(1000);

/// The `Idempotency-Key` header: required, 1..=255 printable ASCII characters.
pub fn key_of(req: &actix_web::HttpRequest) -> Result<String, ApiError> {
    optional_key_of(req)?.ok_or(ApiError::IdempotencyKeyMissing)
}

/// The `Idempotency-Key` header where it is optional (a confirm): absent is `None`, present is checked as
/// [`key_of`] checks it.
pub fn optional_key_of(req: &actix_web::HttpRequest) -> Result<Option<String>, ApiError> {
    let Some(value) = req.headers().get("idempotency-key") else {
        return Ok(None);
    };
    let bytes = value.as_bytes();
    if bytes.is_empty() || bytes.len() > 255 || !bytes.iter().all(|b| (0x20..0x7f).contains(b)) {
        return Err(ApiError::IdempotencyKeyInvalid);
    }
    // Printable ASCII, checked above: always valid UTF-8 and storable; still through the one input check.
    let key = String::from_utf8_lossy(bytes);
    hookline_core::input::line("Idempotency-Key", &key, 255).map_err(ApiError::from)?;
    Ok(Some(key.into_owned()))
}

/// sha256 (hex) of what makes two requests "the same": method, path and body.
pub fn request_hash(method: &str, path: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update(b"\n");
    h.update(path.as_bytes());
    h.update(b"\n");
    h.update(body);
    hex::encode(h.finalize())
}

/// Runs `op` without a key (a confirm without `Idempotency-Key`: the operation is idempotent by itself) in one
/// transaction, its lock waits bounded like a keyed request's.
pub async fn run_unkeyed(state: &ApiState, client: &str, op: Operation) -> Result<Reply, ApiError> {
    let mut tx = state
        .pool
        .begin()
        .await
        .map_err(|e| ApiError::database(e, "begin the request's transaction"))?;
    let lock_ms = state.db_timeout.as_millis().max(1);
    sqlx::query(&format!("SET LOCAL lock_timeout = '{lock_ms}ms'"))
        .execute(&mut *tx)
        .await
        .map_err(|e| ApiError::database(e, "set the lock timeout"))?;
    let reply = op.execute(&mut tx, client, &state.providers).await?;
    tx.commit()
        .await
        .map_err(|e| ApiError::database(e, "commit the request"))?;
    Ok(reply)
}

/// Runs `op` once per `(client, key)`: the first request executes it, the others replay its response.
pub async fn run(
    state: &ApiState,
    client: &str,
    key: &str,
    request_hash: &str,
    op: Operation,
) -> Result<Reply, ApiError> {
    let mut tx = state
        .pool
        .begin()
        .await
        .map_err(|e| ApiError::database(e, "begin the request's transaction"))?;
    let lock_ms = KEY_LOCK_TIMEOUT.min(state.db_timeout).as_millis().max(1);
    sqlx::query(&format!("SET LOCAL lock_timeout = '{lock_ms}ms'"))
        .execute(&mut *tx)
        .await
        .map_err(|e| ApiError::database(e, "set the key's lock timeout"))?;
    let claim = intents::claim_idempotency_key(&mut tx, client, key, request_hash, state.window)
        .await
        .map_err(|e| match &e {
            // 55P03 lock_not_available: the first request with this key holds it past the timeout.
            sqlx::Error::Database(d) if d.code().as_deref() == Some("55P03") => {
                ApiError::IdempotencyKeyInFlight
            }
            _ => ApiError::database(e, "claim the idempotency key"),
        })?;
    match claim {
        KeyClaim::Completed {
            request_hash: stored,
            status,
            body,
        } => {
            // Nothing was written: the transaction ends without a commit.
            if stored != request_hash {
                return Err(ApiError::IdempotencyKeyReused);
            }
            let status = u16::try_from(status)
                .ok()
                .and_then(|s| StatusCode::from_u16(s).ok())
                .ok_or_else(|| anyhow::anyhow!("stored response status {status} is not HTTP"))?;
            Ok(Reply {
                status,
                body,
                replayed: true,
            })
        }
        KeyClaim::Incomplete => Err(ApiError::IdempotencyKeyInFlight),
        KeyClaim::Claimed => {
            let reply = op.execute(&mut tx, client, &state.providers).await?;
            let status = i16::try_from(reply.status.as_u16()).unwrap_or(500);
            intents::complete_idempotency_key(&mut tx, client, key, status, &reply.body)
                .await
                .map_err(|e| ApiError::database(e, "store the response on the idempotency key"))?;
            tx.commit()
                .await
                .map_err(|e| ApiError::database(e, "commit the request"))?;
            Ok(reply)
        }
    }
}
