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
