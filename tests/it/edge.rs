//! End-to-end tests of the HTTP edge against the real PostgreSQL.
//!
//! Every test owns a database; the assertions are on status codes, response bodies and rows.

use std::time::{Duration, Instant};

use futures::future::join_all;
use hookline_signature::sign;
use hookline_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Request headers as (name, value) pairs.
type Headers = Vec<(String, String)>;

async fn json(res: reqwest::Response) -> serde_json::Value {
    res.json().await.expect("JSON body")
}

/// Exactly-once storage: 50 concurrent identical deliveries give one row and fifty 200s, one of them new.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_identical_deliveries_store_one_row() {
    let edge = TestEdge::spawn().await;
    let body = stripe_event("evt_concurrent_1", "pi_1", 1000);
    let headers = stripe_headers(secrets::STRIPE, now(), &body);
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(50));
    let edge = std::sync::Arc::new(edge);
    let tasks = (0..50).map(|_| {
        let (edge, barrier, headers, body) =
            (edge.clone(), barrier.clone(), headers.clone(), body.clone());
        tokio::spawn(async move {
            barrier.wait().await;
            let res = edge.post("stripe", "", &headers, body).await;
            (res.status().as_u16(), json(res).await)
        })
    });
    let results: Vec<_> = join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    assert!(results.iter().all(|(s, _)| *s == 200), "{results:?}");
    let new: Vec<_> = results
        .iter()
        .filter(|(_, b)| b["duplicate"] == false)
        .collect();
    assert_eq!(
        new.len(),
        1,
        "exactly one delivery stores the row: {results:?}"
    );
    let id = &new[0].1["id"];
    assert!(
        results
            .iter()
            .all(|(_, b)| b["received"] == true && &b["id"] == id),
        "every answer names the same stored id: {results:?}"
    );
    assert_eq!(edge.db.event_count().await, 1);
}

/// Sequential redelivery: the same event 100 times gives one row, one `duplicate:false` and 99 `duplicate:true`.
#[tokio::test]
async fn hundred_sequential_deliveries_store_one_row() {
    let edge = TestEdge::spawn().await;
    let body = stripe_event("evt_seq_1", "pi_1", 1000);
    let mut duplicates = 0;
    for _ in 0..100 {
        let res = edge.post_stripe(&body).await;
        assert_eq!(res.status(), 200);
        if json(res).await["duplicate"] == true {
            duplicates += 1;
        }
    }
    assert_eq!(duplicates, 99);
    assert_eq!(edge.db.event_count().await, 1);
}

/// A stored event keeps the exact bytes, type, query and headers of the delivery.
#[tokio::test]
async fn new_event_is_stored_byte_exact_with_metadata() {
    let edge = TestEdge::spawn().await;
    // Odd whitespace and key order: re-serialising would change these bytes.
    let body = b"{ \"type\":\"payment_intent.succeeded\",  \"id\" : \"evt_exact\", \"data\":{}}\n"
        .to_vec();
    let res = edge.post_stripe(&body).await;
    assert_eq!(res.status(), 200);
    let v = json(res).await;
    assert_eq!(v["received"], true);
    assert_eq!(v["duplicate"], false);
    let id = v["id"].as_i64().expect("numeric id");
    let row: (
        String,
        String,
        Option<String>,
        Vec<u8>,
        serde_json::Value,
        bool,
    ) = sqlx::query_as(
        "SELECT provider, provider_event_id, event_type, body, headers,
                EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_id = e.id)
         FROM webhook_events e WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&edge.db.pool)
    .await
    .unwrap();
    assert_eq!(row.0, "stripe");
    assert_eq!(row.1, "evt_exact");
    assert_eq!(row.2.as_deref(), Some("payment_intent.succeeded"));
    assert_eq!(row.3, body, "body stored byte for byte");
    let headers = row.4.as_array().unwrap();
    assert!(headers.iter().any(|h| h[0] == "stripe-signature"));
    assert!(
        row.5,
        "the event waits in the outbox until the relay publishes it"
    );
}

/// Two accounts of the same scheme are separate namespaces for event ids.
#[tokio::test]
async fn same_event_id_under_two_providers_is_two_events() {
    let edge = TestEdge::spawn().await;
    let body = stripe_event("evt_shared", "pi_1", 10);
    assert_eq!(edge.post_stripe(&body).await.status(), 200);
    let h = stripe_headers("whsec_second_account", now(), &body);
    let res = edge.post("stripe-eu", "", &h, body.clone()).await;
    assert_eq!(res.status(), 200);
    assert_eq!(json(res).await["duplicate"], false);
    assert_eq!(edge.db.event_count().await, 2);
}

/// Rotation: an event signed with the previous secret is accepted.
#[tokio::test]
async fn rotated_secret_is_accepted() {
    let edge = TestEdge::spawn().await;
    let body = stripe_event("evt_rotated", "pi_1", 10);
    let h = stripe_headers(secrets::STRIPE_OLD, now(), &body);
    assert_eq!(edge.post("stripe", "", &h, body).await.status(), 200);
    assert_eq!(edge.db.event_count().await, 1);
}

/// Bad signatures of every kind: 400 with a JSON code, nothing stored.
#[tokio::test]
async fn bad_signatures_are_rejected_and_store_nothing() {
    let edge = TestEdge::spawn().await;
    let body = stripe_event("evt_bad", "pi_1", 10);
    let mut tampered = body.clone();
    tampered[10] ^= 1;
    let cases: Vec<(&str, Headers, Vec<u8>)> = vec![
        ("missing_signature", vec![], body.clone()),
        (
            "wrong secret",
            stripe_headers("whsec_wrong", now(), &body),
            body.clone(),
        ),
        (
            "tampered body",
            stripe_headers(secrets::STRIPE, now(), &body),
            tampered,
        ),
        (
            "garbage header",
            vec![(
                "Stripe-Signature".into(),
                "i'm not even a real signature header".into(),
            )],
            body.clone(),
        ),
        (
            "stale timestamp",
            stripe_headers(secrets::STRIPE, now() - 301, &body),
            body.clone(),
        ),
        (
            "future timestamp",
            stripe_headers(secrets::STRIPE, now() + 400, &body),
            body.clone(),
        ),
    ];
    for (name, headers, body) in cases {
        let res = edge.post("stripe", "", &headers, body).await;
        assert_eq!(res.status(), 400, "{name}");
        let v = json(res).await;
        assert!(
            v["error"].as_str().is_some_and(|c| !c.is_empty()),
            "{name}: {v}"
        );
        assert!(v["message"].as_str().is_some(), "{name}: {v}");
    }
    assert_eq!(edge.db.event_count().await, 0);
}

/// A captured request replayed after the tolerance is refused, and the provider's fresh re-signature of the
/// same event is accepted and deduplicated.
#[tokio::test]
async fn replayed_capture_refused_fresh_resign_deduplicated() {
    let edge = TestEdge::spawn().await;
    let body = stripe_event("evt_replay", "pi_1", 10);
    assert_eq!(edge.post_stripe(&body).await.status(), 200);
    let old = stripe_headers(secrets::STRIPE, now() - 600, &body);
    assert_eq!(
        edge.post("stripe", "", &old, body.clone()).await.status(),
        400
    );
    let res = edge.post_stripe(&body).await;
    assert_eq!(res.status(), 200);
    assert_eq!(json(res).await["duplicate"], true);
    assert_eq!(edge.db.event_count().await, 1);
}

/// Signed but unusable payloads: 400, nothing stored, process keeps serving.
#[tokio::test]
async fn signed_malformed_payloads_are_rejected() {
    let edge = TestEdge::spawn().await;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty body", vec![]),
        ("not json", b"{".to_vec()),
        ("json array", b"[]".to_vec()),
        ("no id", br#"{"type":"payment_intent.succeeded"}"#.to_vec()),
        ("empty id", br#"{"id":"","type":"x"}"#.to_vec()),
        ("numeric id", br#"{"id":42}"#.to_vec()),
        ("invalid utf-8", b"{\"id\":\"evt_\xff\xfe\"}".to_vec()),
    ];
    for (name, body) in cases {
        let res = edge.post_stripe(&body).await;
        assert_eq!(res.status(), 400, "{name}");
        let v = json(res).await;
        assert_ne!(
            v["error"], "signature_mismatch",
            "{name}: signature was valid: {v}"
        );
    }
    assert_eq!(edge.db.event_count().await, 0);
    let ok = stripe_event("evt_after_bad", "pi_1", 10);
    assert_eq!(edge.post_stripe(&ok).await.status(), 200);
}

/// `\u0000` inside JSON is stored (raw BYTEA, not JSONB) and never turns into a 5xx.
#[tokio::test]
async fn nul_escape_in_json_is_stored_not_500() {
    let edge = TestEdge::spawn().await;
    let body = br#"{"id":"evt_nul","type":"x","note":"a\u0000b"}"#.to_vec();
    let res = edge.post_stripe(&body).await;
    assert_eq!(res.status(), 200);
    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT body FROM webhook_events WHERE provider_event_id = 'evt_nul'")
            .fetch_one(&edge.db.pool)
            .await
            .unwrap();
    assert_eq!(stored, body);
}

/// Unknown provider: 404, nothing stored.
#[tokio::test]
async fn unknown_provider_is_404() {
    let edge = TestEdge::spawn().await;
    let body = stripe_event("evt_x", "pi_1", 10);
    let h = stripe_headers(secrets::STRIPE, now(), &body);
    let res = edge.post("paypal", "", &h, body).await;
    assert_eq!(res.status(), 404);
    assert_eq!(json(res).await["error"], "unknown_provider");
    assert_eq!(edge.db.event_count().await, 0);
}

/// A declared body over the limit gets 413 before being read; so does a 10 MiB chunked body with no length.
#[tokio::test]
async fn oversized_bodies_get_413() {
    let edge = TestEdge::spawn().await;
    let big = vec![b'a'; 10 * 1024 * 1024];
    let h = stripe_headers(secrets::STRIPE, now(), &big);
    let res = edge.post("stripe", "", &h, big.clone()).await;
    assert_eq!(res.status(), 413);

    // Chunked, no Content-Length: the edge must stop reading at the limit.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..160).map(|_| Ok(vec![b'b'; 64 * 1024])).collect();
    let stream = futures::stream::iter(chunks);
    let res = edge
        .client
        .post(format!("{}/webhooks/stripe", edge.base))
        .header("Stripe-Signature", &h[0].1)
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await;
    // The edge may answer 413 and close before the client finished sending; either way nothing is stored.
    if let Ok(res) = res {
        assert_eq!(res.status(), 413);
    }
    assert_eq!(edge.db.event_count().await, 0);
    let ok = stripe_event("evt_after_big", "pi_1", 10);
    assert_eq!(edge.post_stripe(&ok).await.status(), 200);
}

async fn read_status_line(stream: &mut TcpStream) -> Option<String> {
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf[..n]).to_string();
    text.lines().next().map(str::to_string)
}

/// Slow clients (trickled headers, trickled body) are cut off with 408 or a closed connection, and the edge keeps
/// serving others meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_clients_are_cut_off_and_others_are_served() {
    let edge =
        TestEdge::spawn_with("client_request_timeout_ms = 500\nbody_read_timeout_ms = 800").await;

    // Headers trickled: never finished.
    let mut slow_headers = TcpStream::connect(("127.0.0.1", edge.port)).await.unwrap();
    slow_headers
        .write_all(b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // Body trickled: headers complete, body never finished.
    let body = stripe_event("evt_slow_body", "pi_1", 10);
    let sig = &stripe_headers(secrets::STRIPE, now(), &body)[0].1;
    let mut slow_body = TcpStream::connect(("127.0.0.1", edge.port)).await.unwrap();
    slow_body
        .write_all(
            format!(
                "POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nStripe-Signature: {sig}\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    slow_body.write_all(&body[..5]).await.unwrap();

    // Meanwhile a normal client is served promptly.
    let ok = stripe_event("evt_fast", "pi_2", 10);
    let started = Instant::now();
    assert_eq!(edge.post_stripe(&ok).await.status(), 200);
    assert!(started.elapsed() < Duration::from_millis(500));

    for (name, stream) in [("headers", &mut slow_headers), ("body", &mut slow_body)] {
        match read_status_line(stream).await {
            None => {} // closed without an answer: acceptable for a client that never finished
            Some(line) if line.is_empty() => {}
            Some(line) => assert!(line.contains("408"), "slow {name}: {line}"),
        }
    }
    assert_eq!(
        edge.db.event_count().await,
        1,
        "only the fast event is stored"
    );
}

/// Database unreachable: 503 with Retry-After within 2 s, never 200; health still answers, readiness says no.
#[tokio::test]
async fn database_unreachable_gives_503_fast() {
    // A port with nothing listening: connection refused.
    let db = TestDb::new().await;
    let toml = test_config_toml(
        "postgres://postgres@127.0.0.1:1/nowhere",
        "",
        "[relay]\nembedded = false",
    );
    let edge = TestEdge::spawn_on(db, parse_config(&toml)).await;
    let body = stripe_event("evt_down", "pi_1", 10);
    let started = Instant::now();
    let res = edge.post_stripe(&body).await;
    let elapsed = started.elapsed();
    assert_eq!(res.status(), 503);
    assert_eq!(
        res.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("5")
    );
    assert_eq!(json(res).await["error"], "unavailable");
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    let health = edge
        .client
        .get(format!("{}/healthz", edge.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let ready = edge
        .client
        .get(format!("{}/readyz", edge.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
}

/// A locked table (or an exhausted pool) gives 503 within the budget, health keeps answering, and once the lock
/// goes the same delivery is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locked_table_and_exhausted_pool_give_503_within_budget() {
    let edge = TestEdge::spawn_with("db_max_connections = 2\ndb_timeout_ms = 1000").await;
    let mut locker = edge.db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE webhook_events IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *locker)
        .await
        .unwrap();
    let edge = std::sync::Arc::new(edge);
    let tasks = (0..20).map(|i| {
        let edge = edge.clone();
        tokio::spawn(async move {
            let body = stripe_event(&format!("evt_locked_{i}"), "pi_1", 10);
            let started = Instant::now();
            let res = edge.post_stripe(&body).await;
            (res.status().as_u16(), started.elapsed())
        })
    });
    let health = edge
        .client
        .get(format!("{}/healthz", edge.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let results: Vec<_> = join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    for (status, elapsed) in &results {
        assert_eq!(*status, 503, "{results:?}");
        assert!(*elapsed < Duration::from_secs(2), "{results:?}");
    }
    locker.rollback().await.unwrap();
    // The provider retries: stored exactly once. (A 503 only promises nothing was acknowledged; a write that
    // was already under way may still have committed, and then the retry is answered as a duplicate.)
    let body = stripe_event("evt_locked_0", "pi_1", 10);
    let res = edge.post_stripe(&body).await;
    assert_eq!(res.status(), 200);
    assert_eq!(json(res).await["received"], true);
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM webhook_events WHERE provider_event_id = 'evt_locked_0'",
    )
    .fetch_one(&edge.db.pool)
    .await
    .unwrap();
    assert_eq!(stored, 1);
}

/// `sha256:{hex}` of a body: the dedupe key of schemes that sign only the body.
fn body_digest(body: &[u8]) -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(body)))
}

/// Every configured scheme works end to end through HTTP, and its dedupe key (signed material only) is what is
/// stored.
#[tokio::test]
async fn every_scheme_is_accepted_end_to_end() {
    let edge = TestEdge::spawn().await;
    let ts = now();

    let gh_body = br#"{"action":"opened","number":1}"#.to_vec();
    let gh = vec![
        (
            "X-Hub-Signature-256".into(),
            sign::github(secrets::GITHUB.as_bytes(), &gh_body),
        ),
        (
            "X-GitHub-Delivery".into(),
            "72d3162e-cc78-11e3-81ab-4c9367dc0958".into(),
        ),
        ("X-GitHub-Event".into(), "issues".into()),
    ];
    let sw_body = br#"{"type":"invoice.paid","data":{}}"#.to_vec();
    let sw_sig = sign::standard_webhooks(secrets::STANDARD.as_bytes(), "msg_std_1", ts, &sw_body)
        .expect("valid standard-webhooks secret");
    let std_headers = vec![
        ("webhook-id".into(), "msg_std_1".into()),
        ("webhook-timestamp".into(), ts.to_string()),
        ("webhook-signature".into(), sw_sig.clone()),
    ];
    let svix_headers = vec![
        ("svix-id".into(), "msg_std_1".into()),
        ("svix-timestamp".into(), ts.to_string()),
        ("svix-signature".into(), sw_sig),
    ];
    let mp_body = br#"{"id":12345678901,"type":"payment","action":"payment.updated","data":{"id":"123456789"}}"#.to_vec();
    let mp = vec![
        (
            "x-signature".into(),
            sign::mercadopago(
                secrets::MERCADOPAGO.as_bytes(),
                Some("123456789"),
                Some("req-1"),
                ts,
            ),
        ),
        ("x-request-id".into(), "req-1".into()),
    ];
    let shop_body = br#"{"id":1,"total_price":"10.00"}"#.to_vec();
    let shop = vec![
        (
            "X-Shopify-Hmac-SHA256".into(),
            sign::shopify(secrets::SHOPIFY.as_bytes(), &shop_body),
        ),
        (
            "X-Shopify-Webhook-Id".into(),
            "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043".into(),
        ),
        ("X-Shopify-Topic".into(), "orders/create".into()),
    ];
    let pg_body = b"id=1234&event=transaction_status_changed&old_status=processing&current_status=paid&object=transaction".to_vec();
    let pg = vec![
        (
            "X-Hub-Signature".into(),
            sign::pagarme(secrets::PAGARME.as_bytes(), &pg_body),
        ),
        (
            "Content-Type".into(),
            "application/x-www-form-urlencoded".into(),
        ),
    ];

    // GitHub and Shopify sign only the body: the dedupe key is its digest, never the unsigned delivery id.
    // Mercado Pago signs `data.id`, `x-request-id` and `ts`: the key is made of exactly those.
    let gh_key = body_digest(&gh_body);
    let shop_key = body_digest(&shop_body);
    let mp_key = "mp:123456789:req-1".to_string();
    let cases: Vec<(&str, &str, Headers, Vec<u8>, &str)> = vec![
        ("github", "", gh, gh_body, &gh_key),
        ("standard", "", std_headers, sw_body.clone(), "msg_std_1"),
        ("svix", "", svix_headers, sw_body, "msg_std_1"),
        (
            "mercadopago",
            "data.id=123456789&type=payment",
            mp,
            mp_body,
            &mp_key,
        ),
        ("shopify", "", shop, shop_body, &shop_key),
        ("pagarme", "", pg, pg_body, ""),
    ];
    for (provider, query, headers, body, expected_id) in cases {
        let res = edge.post(provider, query, &headers, body).await;
        assert_eq!(res.status(), 200, "{provider}");
        let id = json(res).await["id"].as_i64().expect("id");
        let stored: String =
            sqlx::query_scalar("SELECT provider_event_id FROM webhook_events WHERE id = $1")
                .bind(id)
                .fetch_one(&edge.db.pool)
                .await
                .unwrap();
        if expected_id.is_empty() {
            assert!(!stored.is_empty(), "{provider}");
        } else {
            assert_eq!(stored, expected_id, "{provider}");
        }
    }
    assert_eq!(edge.db.event_count().await, 6);
}

/// `/metrics` exposes request outcomes, duplicates, signature failures and the ack-latency histogram.
#[tokio::test]
async fn metrics_expose_outcomes() {
    let edge = TestEdge::spawn().await;
    let body = stripe_event("evt_metrics", "pi_1", 10);
    edge.post_stripe(&body).await;
    edge.post_stripe(&body).await;
    edge.post("stripe", "", &[], body).await;
    let text = edge
        .client
        .get(format!("{}/metrics", edge.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for needle in [
        "hookline_edge_requests_total{provider=\"stripe\",outcome=\"stored\"}",
        "hookline_edge_duplicates_total{provider=\"stripe\"}",
        "hookline_edge_signature_failures_total{provider=\"stripe\",reason=\"missing_signature\"}",
        "hookline_edge_ack_seconds_bucket",
    ] {
        assert!(text.contains(needle), "missing {needle} in:\n{text}");
    }
}

/// `hookline migrate` semantics: creating and migrating an existing, migrated database again changes nothing
/// and does not fail.
#[tokio::test]
async fn migrate_twice_is_safe() {
    let db = TestDb::new().await;
    let url = secrecy::SecretString::from(db.url.clone());
    hookline_core::db::migrate(&url)
        .await
        .expect("second migrate");
    hookline_core::db::migrate(&url)
        .await
        .expect("third migrate");
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(applied as usize, hookline_core::MIGRATOR.iter().count());
}

/// Credential headers are never stored (issue 25: `X-Signature-Key`, `X-Access-Key`, `X-Jwt` were): a signed
/// Stripe delivery carrying key-, JWT- and token-named headers is stored without any of them (names and
/// values), while the headers that re-verify it (`stripe-signature`) and harmless ones are kept — and the
/// stored event still verifies from what was kept.
#[tokio::test]
async fn credential_headers_are_not_stored_but_signature_headers_are() {
    let edge = TestEdge::spawn().await;
    let body = stripe_event("evt_cred_headers", "pi_cred_headers", 1200);
    let mut headers = stripe_headers(secrets::STRIPE, now(), &body);
    let credentials = [
        ("X-Signature-Key", "CRED-signature-key-1"),
        ("X-Access-Key", "CRED-access-key-2"),
        ("X-Jwt", "CRED-jwt-3"),
        ("X-Jwt-Assertion", "CRED-jwt-assertion-4"),
        ("X-Api-Key", "CRED-api-key-5"),
        ("X-Auth-Token", "CRED-auth-token-6"),
        ("Authorization", "Bearer CRED-bearer-7"),
        ("Proxy-Authorization", "Basic CRED-proxy-8"),
        ("Cookie", "sid=CRED-cookie-9"),
        ("X-Amz-Security-Token", "CRED-amz-10"),
        ("X-Secret", "CRED-secret-11"),
        ("X-Password", "CRED-password-12"),
        ("X-Webhook-Signature-Key-Id", "CRED-sigkey-13"),
    ];
    for (k, v) in credentials {
        headers.push((k.into(), v.into()));
    }
    for (k, v) in [
        ("X-Request-Id", "req-kept-1"),
        ("X-Signature", "ts=1,v1=kept"),
        ("X-Hub-Signature", "sha1=kept"),
    ] {
        headers.push((k.into(), v.into()));
    }
    let res = edge.post("stripe", "", &headers, body.clone()).await;
    assert_eq!(res.status(), 200);
    let id = json(res).await["id"].as_i64().expect("numeric id");
    let stored: serde_json::Value =
        sqlx::query_scalar("SELECT headers FROM webhook_events WHERE id = $1")
            .bind(id)
            .fetch_one(&edge.db.pool)
            .await
            .unwrap();
    let names: Vec<&str> = stored
        .as_array()
        .expect("headers array")
        .iter()
        .filter_map(|h| h[0].as_str())
        .collect();
    let text = stored.to_string();
    for (k, v) in credentials {
        assert!(
            !names.contains(&k.to_ascii_lowercase().as_str()),
            "{k} stored: {names:?}"
        );
        assert!(!text.contains(v), "the value of {k} was stored: {text}");
    }
    for kept in [
        "stripe-signature",
        "content-type",
        "x-request-id",
        "x-signature",
        "x-hub-signature",
    ] {
        assert!(names.contains(&kept), "{kept} was dropped: {names:?}");
    }
    // What the console's "verify now" does: the kept headers still verify the stored body.
    let pairs: Vec<(String, String)> = stored
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| Some((h[0].as_str()?.to_owned(), h[1].as_str()?.to_owned())))
        .collect();
    let header_refs: Vec<(&str, &[u8])> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_bytes()))
        .collect();
    let verified = hookline_signature::Verifier {
        scheme: hookline_signature::Scheme::Stripe,
        secrets: &[secrets::STRIPE.as_bytes()],
        tolerance_secs: Some(300),
        now_unix: now(),
    }
    .verify(&hookline_signature::Request {
        headers: &header_refs,
        query: "",
        body: &body,
    });
    assert!(verified.is_ok(), "{verified:?}");
}
