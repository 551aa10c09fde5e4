//! The merchant's list of its payment intents (`GET /v1/payment_intents`): newest first, one page at a time,
//! paged by a cursor intent (`starting_after` / `ending_before`, as Stripe's lists), only the client's own.
//!
//! Pages are keyed by the intents' internal id (creation order), never by an offset: an intent created while a
//! merchant pages through the list does not shift the pages, and every page is one backward (or forward) scan of
//! the index `payment_intents_client_list_idx` that stops at the page's size plus one (which tells `has_more`).

use sqlx::types::Json;
use sqlx::PgConnection;
use time::OffsetDateTime;

use super::Intent;
use crate::model::IntentStatus;
use crate::params::PaymentParams;

/// Largest page (`limit`).
pub const MAX_LIST_LIMIT: i64 = 100;

/// What a page selects besides its client (each filter optional; all of them must hold).
#[derive(Debug, Clone, Default)]
pub struct ListFilter<'a> {
    /// Only intents in this status.
    pub status: Option<IntentStatus>,
    /// Only the intents of this order (the merchant's `order_reference`).
    pub order_reference: Option<&'a str>,
    /// Only intents created at or after this instant.
    pub created_from: Option<OffsetDateTime>,
    /// Only intents created before this instant.
    pub created_until: Option<OffsetDateTime>,
}

/// Where a page starts.
#[derive(Debug, Clone, Copy)]
pub enum ListCursor<'a> {
    /// The newest intents.
    Newest,
    /// The intents older than this one (its public id): the next page.
    After(&'a str),
    /// The intents newer than this one (its public id): the previous page.
    Before(&'a str),
}

/// One page of a client's intents, newest first.
#[derive(Debug)]
pub struct IntentPage {
    /// At most the page's size.
    pub intents: Vec<Intent>,
    /// More intents lie beyond the page in its direction (older for [`ListCursor::Newest`] and
    /// [`ListCursor::After`], newer for [`ListCursor::Before`]).
    pub has_more: bool,
}

/// Why a page could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// The cursor intent is not one of the client's (another client's is the same as none).
    #[error("the cursor is not a payment intent of this client")]
    UnknownCursor,
    /// The database failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// The page of `client`'s intents at `cursor` that `filter` selects, `limit` of them at most (the caller bounds it
/// to 1..=[`MAX_LIST_LIMIT`]).
pub async fn list_for_client(
    conn: &mut PgConnection,
    client: &str,
    filter: &ListFilter<'_>,
    cursor: ListCursor<'_>,
    limit: i64,
) -> Result<IntentPage, ListError> {
    let limit = limit.clamp(1, MAX_LIST_LIMIT);
    let cursor_id = match cursor {
        ListCursor::Newest => None,
        ListCursor::After(public_id) | ListCursor::Before(public_id) => Some(
            sqlx::query_scalar!(
                "SELECT id FROM payment_intents WHERE public_id = $1 AND client = $2",
                public_id,
                client,
            )
            .fetch_optional(&mut *conn)
            .await?
            .ok_or(ListError::UnknownCursor)?,
        ),
    };
    let status = filter.status.map(|s| s.as_str());
    // One more than the page: whether it exists is `has_more`.
    let fetch = limit + 1;
    let mut intents = match cursor {
        ListCursor::Newest | ListCursor::After(_) => {
            // The cursor as a bound on `id` (the largest bigint when there is none), never `$2 IS NULL OR id < $2`:
            // a prepared statement's generic plan then starts its backward scan at the cursor (an index condition)
            // instead of walking from the newest row and filtering — 21 ms → 0.01 ms for a page deep in 100,000
            // intents (EXPLAIN ANALYZE, plan_cache_mode = force_generic_plan).
            intent_query!(
                r#"SELECT "#,
                r#" FROM payment_intents
                 WHERE client = $1 AND id < coalesce($2::bigint, 9223372036854775807)
                   AND ($3::text IS NULL OR status = $3)
                   AND ($4::text IS NULL OR order_reference = $4)
                   AND ($5::timestamptz IS NULL OR created_at >= $5)
                   AND ($6::timestamptz IS NULL OR created_at < $6)
                 ORDER BY id DESC LIMIT $7"#,
                client,
                cursor_id,
                status,
                filter.order_reference,
                filter.created_from,
                filter.created_until,
                fetch,
            )
            .fetch_all(&mut *conn)
            .await?
        }
        ListCursor::Before(_) => {
            let mut newer = intent_query!(
                r#"SELECT "#,
                r#" FROM payment_intents
                 WHERE client = $1 AND id > $2
                   AND ($3::text IS NULL OR status = $3)
                   AND ($4::text IS NULL OR order_reference = $4)
                   AND ($5::timestamptz IS NULL OR created_at >= $5)
                   AND ($6::timestamptz IS NULL OR created_at < $6)
                 ORDER BY id ASC LIMIT $7"#,
                client,
                cursor_id,
                status,
                filter.order_reference,
                filter.created_from,
                filter.created_until,
                fetch,
            )
            .fetch_all(&mut *conn)
            .await?;
            // The `limit` nearest the cursor, then newest first like every page.
            let has_more = newer.len() as i64 > limit;
            newer.truncate(limit as usize);
            newer.reverse();
            return Ok(IntentPage {
                intents: newer,
                has_more,
            });
        }
    };
    let has_more = intents.len() as i64 > limit;
    intents.truncate(limit as usize);
    Ok(IntentPage { intents, has_more })
}
