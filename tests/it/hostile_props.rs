//! The edge's request handling under random and poisoned input, in process: property tests (random ids, types,
//! header sets and bodies, correctly signed) never get a 5xx and never stall the relay; the group commit
//! answers a row the database refuses alone, while its batch neighbours are stored and answered normally.

use std::time::Duration;

use futures::future::join_all;
use hookline_tests::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config as PropConfig, TestRunner};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(60);

/// One random, correctly signed delivery.
#[derive(Debug, Clone)]
struct Random {
    id: String,
    kind: Option<String>,
    headers: Vec<(String, String)>,
    body_kind: u8,
    junk: Vec<u8>,
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9_.:-]{1,40}",
        any::<String>(),
        "\\PC{0,300}",
        (0usize..3000).prop_map(|n| "x".repeat(n)),
        "[\\x00-\\x1f\\x7f]{1,5}[a-z]{0,10}",
    ]
}

fn random() -> impl Strategy<Value = Random> {
    let header_name = prop_oneof![
        Just("x-api-key".to_string()),
        Just("x-auth-token".to_string()),
        Just("authorization".to_string()),
        Just("cookie".to_string()),
        "x-[a-z]{1,20}",
    ];
    let header_value = "[ -~]{0,2000}";
    (
        text(),
        proptest::option::of(text()),
        proptest::collection::vec((header_name, header_value), 0..12),
        0u8..4,
        proptest::collection::vec(any::<u8>(), 0..256),
    )
        .prop_map(|(id, kind, headers, body_kind, junk)| Random {
            id,
            kind,
            headers,
            body_kind,
            junk,
        })
}

impl Random {
    fn body(&self) -> Vec<u8> {
        match self.body_kind {
            0 => json!({"id": self.id, "type": self.kind, "data": {"object": {"id": "pi_prop"}}})
                .to_string()
                .into_bytes(),
            1 => json!({"id": self.id, "data": {}}).to_string().into_bytes(),
            2 => json!({"type": self.kind}).to_string().into_bytes(),
            _ => self.junk.clone(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_signed_requests_never_get_a_5xx_nor_stall_the_relay() {
    let p = TestPipeline::start().await;
    let worker = p.spawn_worker();
    let mut runner = TestRunner::new(PropConfig {
        cases: 1,
        ..PropConfig::default()
    });
    let cases: Vec<Random> = (0..200)
        .map(|_| random().new_tree(&mut runner).expect("generate").current())
        .collect();
    // Sent concurrently, so that good and bad requests share group-commit batches.
    let results = join_all(cases.iter().map(|case| {
        let edge = &p.edge;
        async move {
            let body = case.body();
            let mut headers = stripe_headers(secrets::STRIPE, now(), &body);
            headers.extend(case.headers.iter().cloned());
            let res = edge.post("stripe", "", &headers, body).await;
            (res.status().as_u16(), case)
        }
    }))
    .await;
    for (status, case) in &results {
        assert!(
            matches!(status, 200 | 400),
            "status {status} for a signed request: {case:?}"
        );
    }
    let accepted = results.iter().filter(|(s, _)| *s == 200).count();
    assert!(accepted > 0, "some random requests are storable");

    // The relay was not stalled by anything that was stored: a normal event still flows to the worker, and
    // nothing is left unpublished.
    let res = p
        .edge
        .post_stripe(&stripe_event("evt_after_props", "pi_after_props", 990))
        .await;
    assert_eq!(res.status(), 200);
    p.drain(WAIT).await;
    let unpublished: i64 = sqlx::query_scalar("SELECT count(*) FROM event_outbox")
        .fetch_one(p.pool())
        .await
        .unwrap();
    assert_eq!(unpublished, 0);
    let processed: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM processed_events p JOIN webhook_events e ON e.id = p.event_id
         WHERE e.provider_event_id = 'evt_after_props')",
    )
    .fetch_one(p.pool())
    .await
    .unwrap();
    assert!(processed);
    // No credential-looking header was stored.
    let leaked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM webhook_events, jsonb_array_elements(headers) h
         WHERE h->>0 IN ('x-api-key', 'x-auth-token', 'authorization', 'cookie')",
    )
    .fetch_one(p.pool())
    .await
    .unwrap();
    assert_eq!(leaked, 0);
    worker.stop().await;
    p.teardown().await;
}

async fn post_json(edge: &TestEdge, id: &str) -> (u16, Value) {
    let res = edge
        .post_stripe(&stripe_event(id, &format!("pi_{id}"), 100))
        .await;
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// 4 requests the database refuses (a CHECK constraint the edge's bounds do not know about) among 40 valid ones,
/// concurrently, 5 rounds: every valid one is stored and answered 200; every refused one gets 400
/// `unstorable_event` — never a 5xx, never its neighbours.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_the_database_refuses_is_answered_alone() {
    let edge = TestEdge::spawn().await;
    sqlx::query(
        "ALTER TABLE webhook_events ADD CONSTRAINT test_refuse
         CHECK (provider_event_id NOT LIKE 'evt_refused%')",
    )
    .execute(&edge.db.pool)
    .await
    .unwrap();
    for round in 0..5 {
        let ids: Vec<String> = (0..44)
            .map(|i| {
                if i % 11 == 0 {
                    format!("evt_refused_{round}_{i}")
                } else {
                    format!("evt_valid_{round}_{i}")
                }
            })
            .collect();
        let results = join_all(ids.iter().map(|id| post_json(&edge, id))).await;
        for (id, (status, body)) in ids.iter().zip(&results) {
            if id.starts_with("evt_refused") {
                assert_eq!(*status, 400, "{id}: {body}");
                assert_eq!(body["error"], "unstorable_event", "{id}: {body}");
            } else {
                assert_eq!(*status, 200, "{id}: {body}");
                assert_eq!(body["duplicate"], false, "{id}: {body}");
            }
        }
    }
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_events")
        .fetch_one(&edge.db.pool)
        .await
        .unwrap();
    assert_eq!(stored, 5 * 40);
}

/// A database error that is neither a data error nor transient (here injected by a trigger) is a 500 for that
/// request — never a 200 — and still does not touch the other requests of its batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_error_is_never_answered_200() {
    let edge = TestEdge::spawn().await;
    sqlx::query(
        "CREATE FUNCTION test_break() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.provider_event_id LIKE 'evt_broken%' THEN
                 RAISE EXCEPTION 'injected failure' USING ERRCODE = 'XX000';
             END IF;
             RETURN NEW;
         END $$",
    )
    .execute(&edge.db.pool)
    .await
    .unwrap();
    sqlx::query(
        "CREATE TRIGGER test_break BEFORE INSERT ON webhook_events
         FOR EACH ROW EXECUTE FUNCTION test_break()",
    )
    .execute(&edge.db.pool)
    .await
    .unwrap();
    let ids: Vec<String> = (0..30)
        .map(|i| {
            if i % 10 == 3 {
                format!("evt_broken_{i}")
            } else {
                format!("evt_fine_{i}")
            }
        })
        .collect();
    let results = join_all(ids.iter().map(|id| post_json(&edge, id))).await;
    for (id, (status, body)) in ids.iter().zip(&results) {
        if id.starts_with("evt_broken") {
            assert_eq!(*status, 500, "{id}: {body}");
            assert_eq!(body["error"], "internal_error", "{id}: {body}");
        } else {
            assert_eq!(*status, 200, "{id}: {body}");
        }
    }
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_events")
        .fetch_one(&edge.db.pool)
        .await
        .unwrap();
    assert_eq!(stored, 27);
}
