//! `api_idempotency_keys`: the merchant API's own idempotency — the first answer for `(client, key)` is stored
//! and replayed; a key still in flight or reused with another request is refused.

use super::*;

/// What [`claim_idempotency_key`] found for `(client, key)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyClaim {
    /// The key is this transaction's: it runs the request and stores the response
    /// ([`complete_idempotency_key`]) before committing.
    Claimed,
    /// An earlier request with this key completed: its request hash and stored response.
    Completed {
        /// sha256 of the earlier request's method, path and body.
        request_hash: String,
        /// The HTTP status it was answered with.
        status: i16,
        /// The body it was answered with.
        body: Vec<u8>,
    },
    /// A committed key row without a response (never written by the API, which stores the response in the
    /// claiming transaction): treated as in flight.
    Incomplete,
}

/// A key row as read back: request hash, response status and body, and whether it is past the window.
type StoredKey = (String, Option<i16>, Option<Vec<u8>>, bool);

/// Claims the merchant API's idempotency key `(client, key)` in the caller's transaction.
///
/// The database decides: the INSERT takes the key's primary-key entry, so a concurrent request with the same
/// key waits here (bounded by the transaction's `lock_timeout`: SQLSTATE 55P03) until the first one commits,
/// then finds its stored response. A key older than `window` (not pruned yet) is taken over as new.
pub async fn claim_idempotency_key(
    tx: &mut PgConnection,
    client: &str,
    key: &str,
    request_hash: &str,
    window: std::time::Duration,
) -> Result<KeyClaim, sqlx::Error> {
    // Twice at most: the second round only follows the removal of an expired key.
    for _ in 0..2 {
        // A constant is never NULL; PostgreSQL's inference cannot tell (`!`).
        let claimed: Option<bool> = sqlx::query_scalar!(
            r#"INSERT INTO api_idempotency_keys (client, key, request_hash) VALUES ($1, $2, $3)
             ON CONFLICT (client, key) DO NOTHING
             RETURNING true AS "claimed!""#,
            client,
            key,
            request_hash,
        )
        .fetch_optional(&mut *tx)
        .await?;
        if claimed.is_some() {
            return Ok(KeyClaim::Claimed);
        }
        // `created_at` is NOT NULL, so the comparison is never NULL (`!`).
        let row: Option<StoredKey> = sqlx::query!(
            r#"SELECT request_hash, response_status, response_body,
                    created_at < now() - make_interval(secs => $3) AS "expired!"
               FROM api_idempotency_keys WHERE client = $1 AND key = $2"#,
            client,
            key,
            window.as_secs_f64(),
        )
        .fetch_optional(&mut *tx)
        .await?
        .map(|r| {
            (
                r.request_hash,
                r.response_status,
                r.response_body,
                r.expired,
            )
        });
        match row {
            Some((_, _, _, true)) => {
                // Expired but not pruned yet: the key is free again.
                sqlx::query!(
                    "DELETE FROM api_idempotency_keys
                      WHERE client = $1 AND key = $2 AND created_at < now() - make_interval(secs => $3)",
                    client,
                    key,
                    window.as_secs_f64(),
                )
                .execute(&mut *tx)
                .await?;
            }
            Some((request_hash, Some(status), Some(body), false)) => {
                return Ok(KeyClaim::Completed {
                    request_hash,
                    status,
                    body,
                })
            }
            // Gone between the INSERT and the SELECT (pruned, or its request rolled back): try again.
            None => {}
            Some(_) => return Ok(KeyClaim::Incomplete),
        }
    }
    Ok(KeyClaim::Incomplete)
}

/// Stores the response of the request that claimed `(client, key)`, in the same transaction.
pub async fn complete_idempotency_key(
    tx: &mut PgConnection,
    client: &str,
    key: &str,
    status: i16,
    body: &[u8],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "UPDATE api_idempotency_keys SET response_status = $3, response_body = $4, completed_at = now()
          WHERE client = $1 AND key = $2",
        client,
        key,
        status,
        body,
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// Deletes idempotency keys older than `window`, `batch` rows per statement (each its own short transaction);
/// returns how many were deleted.
pub async fn prune_idempotency_keys(
    pool: &sqlx::PgPool,
    window: std::time::Duration,
    batch: i64,
) -> Result<u64, sqlx::Error> {
    let mut total = 0;
    loop {
        let n = sqlx::query!(
            "DELETE FROM api_idempotency_keys WHERE ctid = ANY (ARRAY(
                SELECT ctid FROM api_idempotency_keys
                 WHERE created_at < now() - make_interval(secs => $1)
                 LIMIT $2 FOR UPDATE SKIP LOCKED))",
            window.as_secs_f64(),
            batch.max(1),
        )
        .execute(pool)
        .await?
        .rows_affected();
        total += n;
        if n < batch.max(1) as u64 {
            return Ok(total);
        }
    }
}
