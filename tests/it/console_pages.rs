//! What the console's pages say (issue 31): an old event's signature is "valid, outside today's tolerance" rather
//! than a failure; the ATTENTION banner links to the console's own pages; the outbound page filters by status.

use hookline_core::events::{OwnedEvent, StoreOutcome};
use hookline_tests::console::{console_edge, ConsoleHttp};
use hookline_tests::*;

/// Stores a Stripe event signed by the configured secret `age_secs` ago (as the edge stored it then).
async fn store_signed(pool: &sqlx::PgPool, id: &str, age_secs: i64, secret: &str) -> i64 {
    let body = format!(
        r#"{{"id":"{id}","type":"payment_intent.succeeded","data":{{"object":{{"id":"pi_{id}","object":"payment_intent","amount":1000,"amount_received":1000,"currency":"brl","status":"succeeded"}}}}}}"#
    );
    let signed_at = now() - age_secs;
    let stored = hookline_core::events::insert_one(
        pool,
        &OwnedEvent {
            provider: "stripe".into(),
            provider_event_id: id.into(),
            event_type: Some("payment_intent.succeeded".into()),
            signed_at: None,
            headers: stripe_headers(secret, signed_at, body.as_bytes()),
            query: String::new(),
            body: body.into_bytes().into(),
            traceparent: None,
        },
    )
    .await
    .expect("store");
    let StoreOutcome::Inserted(id) = stored else {
        panic!("not inserted: {stored:?}");
    };
    id
}

/// The text of the `<pre id="signature-now">` of an event page and the class of its cell.
fn signature_now(html: &str) -> (String, String) {
    let pre = html
        .split("id=\"signature-now\">")
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .unwrap_or_else(|| panic!("no signature-now in {html}"))
        .to_string();
    let before = html
        .split("<pre id=\"signature-now\">")
        .next()
        .unwrap_or("");
    let class = before
        .rsplit("class=\"")
        .next()
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("")
        .to_string();
    (pre, class)
}

#[tokio::test]
async fn an_old_event_with_a_valid_signature_is_valid_outside_the_tolerance_not_failed() {
    let edge = console_edge().await;
    let console = edge.console.clone().expect("the console listens");
    let pool = &edge.db.pool;
    let old = store_signed(pool, "evt_old_valid", 3_600, secrets::STRIPE).await;
    let forged = store_signed(
        pool,
        "evt_old_forged",
        3_600,
        "whsec_not_the_configured_one",
    )
    .await;
    let fresh = store_signed(pool, "evt_fresh", 0, secrets::STRIPE).await;
    let mut http = ConsoleHttp::new(&console);
    http.login().await;

    let page = http.get(&format!("/events/{old}")).await;
    assert_eq!(page.status, 200);
    let (text, class) = signature_now(&page.text);
    assert!(
        text.starts_with("valid signature, outside today&#39;s tolerance")
            || text.starts_with("valid signature, outside today's tolerance"),
        "{text}"
    );
    assert!(text.contains("matched secret: #1 of 2"), "{text}");
    assert_eq!(class, "stale", "not shown as a failure");

    // A signature no secret produced still fails, old or not.
    let (text, class) = signature_now(&http.get(&format!("/events/{forged}")).await.text);
    assert!(text.starts_with("invalid"), "{text}");
    assert_eq!(class, "bad");
    // A fresh one is plainly valid.
    let (text, class) = signature_now(&http.get(&format!("/events/{fresh}")).await.text);
    assert!(text.starts_with("valid\n"), "{text}");
    assert_eq!(class, "ok");
}

async fn new_intent(pool: &sqlx::PgPool, customer: &str, status: &str) -> String {
    let mut tx = pool.begin().await.expect("begin");
    let params =
        hookline_payments::params::PaymentParams::Stripe(hookline_payments::params::StripeParams {
            payment_method: Some("pm_card_visa".into()),
            ..Default::default()
        });
    let intent = hookline_payments::intents::create_intent(
        &mut tx,
        &hookline_payments::intents::NewIntent {
            provider: "stripe",
            amount: 5000,
            currency: "brl",
            customer: Some(customer),
            description: None,
            order_reference: None,
            payment_params: Some(&params),
            confirm: true,
            cycle: None,
            capture_method: Default::default(),
        },
    )
    .await
    .expect("intent");
    tx.commit().await.expect("commit");
    // The state the dispatcher and the gateway's webhook would have left.
    sqlx::query("UPDATE payment_intents SET status = $2 WHERE id = $1")
        .bind(intent.id)
        .bind(status)
        .execute(pool)
        .await
        .expect("status");
    intent.public_id
}

/// The intent rows of an `/intents` page, by public id.
fn intent_rows(html: &str) -> Vec<String> {
    html.split("id=\"intent-")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|id| id.starts_with("pi_hl_"))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn the_outbound_page_filters_by_status_and_the_banner_links_console_pages() {
    let edge = console_edge().await;
    let console = edge.console.clone().expect("the console listens");
    let pool = &edge.db.pool;
    let queued = new_intent(pool, "c-queued", "requires_dispatch").await;
    let broken = new_intent(pool, "c-broken", "needs_attention").await;
    let paid = new_intent(pool, "c-paid", "succeeded").await;
    let mut http = ConsoleHttp::new(&console);
    http.login().await;

    let all = http.get("/intents").await;
    assert_eq!(all.status, 200);
    assert_eq!(intent_rows(&all.text).len(), 3, "{}", all.text);
    assert!(all.text.contains("id=\"intent-status\""), "a status filter");
    let one = http.get("/intents?status=needs_attention").await;
    assert_eq!(intent_rows(&one.text), vec![broken.clone()]);
    let two = http.get("/intents?status=succeeded,needs_attention").await;
    let mut rows = intent_rows(&two.text);
    rows.sort();
    let mut want = vec![broken.clone(), paid.clone()];
    want.sort();
    assert_eq!(rows, want);
    assert!(!two.text.contains(&format!("intent-{queued}")));
    assert_eq!(http.get("/intents?status=bogus").await.status, 400);

    // A dead letter: the overview's ATTENTION line links the console's page, not `hookline dlq list`.
    let body = r#"{"id":"evt_dead","type":"payment_intent.succeeded"}"#;
    let stored = hookline_core::events::insert_one(
        pool,
        &OwnedEvent {
            provider: "stripe".into(),
            provider_event_id: "evt_dead".into(),
            event_type: Some("payment_intent.succeeded".into()),
            signed_at: None,
            headers: vec![],
            query: String::new(),
            body: body.as_bytes().to_vec().into(),
            traceparent: None,
        },
    )
    .await
    .expect("store");
    let StoreOutcome::Inserted(id) = stored else {
        panic!("not inserted: {stored:?}");
    };
    hookline_core::dead_letters::record(
        pool,
        hookline_core::dead_letters::Source::Worker,
        "payments",
        id,
        "boom",
    )
    .await
    .expect("dead letter");
    // The overview's figures are read by the console's loop every 5 s: poll them with a deadline.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let overview = loop {
        let page = http.get("/overview/figures").await;
        if page.text.contains("1 dead letter(s)") {
            break page;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the overview never showed the dead letter: {}",
            page.text
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let status = overview
        .text
        .split("id=\"status\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no #status in {}", overview.text));
    assert!(status.contains("href=\"/dead-letters\""), "{status}");
    assert!(!status.contains("hookline dlq"), "{status}");
    assert!(!status.contains("outbound_requests."), "{status}");
}
