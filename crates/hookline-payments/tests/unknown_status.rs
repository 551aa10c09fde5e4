//! A stored status that is not a known value is refused where it is read — by the reconciliation/dispatch read
//! (`payment_state`) and by the worker (the event is dead-lettered as permanent, naming the value) — and never
//! read as the lowest rank of the forward-only state machine.
//!
//! The database's CHECK normally keeps such a value out; the test drops it in its own database to stand for a
//! row written by a newer (or foreign) writer.

use std::time::{SystemTime, UNIX_EPOCH};

use hookline_core::handler::{HandleError, Handler, StoredEvent};
use hookline_core::ProviderConfig;
use hookline_payments::apply::payment_state;
use hookline_payments::intents::{ChargeFinal, FinalCharge};
use hookline_payments::PaymentsHandler;
use hookline_signature::Scheme;
use secrecy::SecretString;
use serde_json::json;
use sqlx::{Connection, PgConnection, PgPool};

/// A fresh migrated database of its own, dropped at the end.
struct Db {
    base: String,
    name: String,
    pool: PgPool,
}

impl Db {
    async fn new() -> Db {
        let base = std::env::var("HOOKLINE_TEST_PG")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into());
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let name = format!("hookline_test_status_{}_{nanos}", std::process::id());
        let url = format!("{base}/{name}");
        hookline_core::db::migrate(&SecretString::from(url.clone()))
            .await
            .expect("create and migrate the test database");
        let pool = PgPool::connect(&url).await.expect("connect");
        Db { base, name, pool }
    }

    async fn drop(self) {
        self.pool.close().await;
        if let Ok(mut c) = PgConnection::connect(&format!("{}/postgres", self.base)).await {
            let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS \"{}\"", self.name))
                .execute(&mut c)
                .await;
        }
    }
}

fn stripe() -> ProviderConfig {
    ProviderConfig {
        name: "stripe".into(),
        scheme: Scheme::Stripe,
        secrets: Vec::new(),
        tolerance_secs: None,
        fee_bps: 0,
        fee_fixed: 0,
        api_base: None,
        api_token: None,
        idempotency_key_ttl: std::time::Duration::from_secs(86400),
        dunning_retry: Vec::new(),
    }
}

/// A stored `payment_intent.succeeded` for `pi_unknown` (the event row exists: the worker's FKs need it).
async fn stored_success(pool: &PgPool) -> StoredEvent {
    let body = json!({
        "id": "evt_unknown_status",
        "object": "event",
        "type": "payment_intent.succeeded",
        "data": {"object": {
            "id": "pi_unknown", "object": "payment_intent", "amount": 1000, "amount_received": 1000,
            "currency": "brl", "status": "succeeded"
        }}
    })
    .to_string()
    .into_bytes();
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO webhook_events (provider, provider_event_id, event_type, headers, body)
         VALUES ('stripe', 'evt_unknown_status', 'payment_intent.succeeded', '[]', $1) RETURNING id",
    )
    .bind(&body)
    .fetch_one(pool)
    .await
    .expect("store the event");
    StoredEvent {
        id,
        provider: "stripe".into(),
        provider_event_id: "evt_unknown_status".into(),
        event_type: Some("payment_intent.succeeded".into()),
        body,
        prepared: None,
        traceparent: None,
    }
}

/// Unknown stored payment status: `payment_state` errs naming it; the worker's per-event and batch paths fail
/// the event permanently naming it; the row is left as it was (nothing moved "forward" from a guessed rank).
#[tokio::test]
async fn an_unknown_stored_payment_status_is_refused_never_defaulted() {
    let db = Db::new().await;
    let pool = &db.pool;
    sqlx::query("ALTER TABLE payments DROP CONSTRAINT payments_status_check")
        .execute(pool)
        .await
        .expect("drop the status CHECK");
    let stored_version: i64 = sqlx::query_scalar(
        "INSERT INTO payments (provider, provider_payment_id, status) VALUES ('stripe', 'pi_unknown', 'refunded')
         RETURNING version",
    )
    .fetch_one(pool)
    .await
    .expect("store an unknown status");

    let read = payment_state(pool, "stripe", "pi_unknown").await;
    let e = read.expect_err("an unknown status must not be read");
    assert!(
        format!("{e}").contains("\"refunded\""),
        "the error names the value: {e}"
    );

    let handler = PaymentsHandler::new([&stripe()], |_| None, std::sync::Arc::new(NoSubscriptions));
    let event = stored_success(pool).await;

    let mut tx = pool.begin().await.expect("begin");
    let single = handler.handle(&mut tx, &event).await;
    tx.rollback().await.expect("rollback");
    match single {
        Err(HandleError::Permanent(e)) => {
            let chain = hookline_core::handler::reason_text(&e);
            assert!(chain.contains("\"refunded\""), "names the value: {chain}");
        }
        other => panic!("expected a permanent error, got {other:?}"),
    }

    let mut tx = pool.begin().await.expect("begin");
    let batch = handler
        .handle_many(&mut tx, std::slice::from_ref(&event))
        .await;
    tx.rollback().await.expect("rollback");
    match batch {
        Some(Err(b)) => match b.error {
            HandleError::Permanent(e) => {
                let chain = hookline_core::handler::reason_text(&e);
                assert!(chain.contains("\"refunded\""), "names the value: {chain}");
            }
            other => panic!("expected a permanent error, got {other:?}"),
        },
        other => panic!("expected the batch to fail, got {other:?}"),
    }

    let (status, version): (String, i64) = sqlx::query_as(
        "SELECT status, version FROM payments WHERE provider = 'stripe' AND provider_payment_id = 'pi_unknown'",
    )
    .fetch_one(pool)
    .await
    .expect("read back");
    assert_eq!((status.as_str(), version), ("refunded", stored_version));
    let transitions: i64 = sqlx::query_scalar("SELECT count(*) FROM payment_transitions")
        .fetch_one(pool)
        .await
        .expect("count transitions");
    assert_eq!(transitions, 0);
    db.drop().await;
}

/// Unknown stored dispute status: a dispute event for it fails permanently naming the value (it was read as
/// `open` before, so a `won` arriving later would have announced a second final word).
#[tokio::test]
async fn an_unknown_stored_dispute_status_is_refused_never_defaulted() {
    let db = Db::new().await;
    let pool = &db.pool;
    sqlx::query("ALTER TABLE disputes DROP CONSTRAINT disputes_status_check")
        .execute(pool)
        .await
        .expect("drop the status CHECK");
    let payment: i64 = sqlx::query_scalar(
        "INSERT INTO payments (provider, provider_payment_id, status) VALUES ('stripe', 'pi_d', 'processing')
         RETURNING id",
    )
    .fetch_one(pool)
    .await
    .expect("store a payment");
    let event = stored_success(pool).await;
    sqlx::query(
        "INSERT INTO disputes (provider, provider_dispute_id, payment_id, amount, currency, status, event_id)
         VALUES ('stripe', 'dp_1', $1, 1000, 'brl', 'under_review', $2)",
    )
    .bind(payment)
    .bind(event.id)
    .execute(pool)
    .await
    .expect("store an unknown dispute status");
    let body = json!({
        "id": "evt_dispute", "object": "event", "type": "charge.dispute.closed",
        "data": {"object": {
            "id": "dp_1", "object": "dispute", "amount": 1000, "currency": "brl",
            "payment_intent": "pi_d", "status": "won"
        }}
    })
    .to_string()
    .into_bytes();
    let dispute_event = StoredEvent {
        provider_event_id: "evt_dispute".into(),
        event_type: Some("charge.dispute.closed".into()),
        body,
        ..event
    };
    let handler = PaymentsHandler::new([&stripe()], |_| None, std::sync::Arc::new(NoSubscriptions));
    let mut tx = pool.begin().await.expect("begin");
    let result = handler.handle(&mut tx, &dispute_event).await;
    tx.rollback().await.expect("rollback");
    match result {
        Err(HandleError::Permanent(e)) => {
            let chain = hookline_core::handler::reason_text(&e);
            assert!(
                chain.contains("\"under_review\""),
                "names the value: {chain}"
            );
        }
        other => panic!("expected a permanent error, got {other:?}"),
    }
    db.drop().await;
}

/// No subscription is billed here (the events are a plain Stripe payment's): billing's dunning, which stands above
/// this crate, is not needed.
#[derive(Debug)]
struct NoSubscriptions;

impl ChargeFinal for NoSubscriptions {
    fn on_charge_final<'a>(
        &'a self,
        _conn: &'a mut sqlx::PgConnection,
        _charge: &'a FinalCharge<'_>,
    ) -> futures::future::BoxFuture<'a, Result<(), hookline_core::domain_events::RecordError>> {
        Box::pin(async { Ok(()) })
    }
}
