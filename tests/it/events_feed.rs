//! The events feed (issue 47): `GET /v1/events` and `GET /v1/events/{id}` on the merchant API. Each client reads
//! only the facts it owns (its intents' facts, the payments of its intents), a back office (`all_events = true`)
//! every fact — a payment that arrived only by webhook included; another client's event is 404
//! `event_not_found`. Pages are newest first, without gaps or duplicates, and every event is the body that was
//! pushed, byte for byte. Hostile parameters are 4xx naming the parameter, never a 5xx.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use hookline_core::domain_events::{self, record, EventType, Owner};
use hookline_tests::*;
use serde_json::{json, Value};
use sqlx::PgPool;

/// The client `shop`'s key.
const SHOP: &str = "sk_hl_feed_shop";
/// The client `other`'s key.
const OTHER: &str = "sk_hl_feed_other";
/// The back office's key (`all_events = true`).
const OFFICE: &str = "sk_hl_feed_office";
/// The secret of the `st` provider's webhooks.
const ST_SECRET: &str = "whsec_feed";
const WAIT: Duration = Duration::from_secs(60);

/// An `st` Stripe provider that can be charged through the API (it has an `api_base`; nothing is sent there:
/// the intents of these tests are never confirmed) and the API with `shop`, `other` and the back office `office`
/// on a port chosen here (the edge does not tell which port `127.0.0.1:0` became).
fn tail(api_port: u16) -> String {
    format!(
        "[providers.st]\nscheme = \"stripe\"\nsecrets = [\"{ST_SECRET}\"]\napi_base = \"http://127.0.0.1:9\"\n\
         [api]\nlisten = \"127.0.0.1:{api_port}\"\n\
         [[api.clients]]\nname = \"shop\"\nkeys = [\"{SHOP}\"]\n\
         [[api.clients]]\nname = \"other\"\nkeys = [\"{OTHER}\"]\n\
         [[api.clients]]\nname = \"office\"\nkeys = [\"{OFFICE}\"]\nall_events = true\n"
    )
}

/// The API of a running edge.
struct Feed {
    base: String,
    http: reqwest::Client,
}

/// An answer: status and body text.
#[derive(Debug)]
struct Got {
    status: u16,
    text: String,
}

impl Got {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }

    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .into()
    }

    fn param(&self) -> String {
        self.json()["error"]["param"]
            .as_str()
            .unwrap_or_default()
            .into()
    }

    /// The ids of a list's events, in its order.
    fn ids(&self) -> Vec<String> {
        let v = self.json();
        assert_eq!(v["object"], "list", "{self:?}");
        assert_eq!(v["url"], "/v1/events", "{self:?}");
        v["data"]
            .as_array()
            .unwrap_or_else(|| panic!("data: {self:?}"))
            .iter()
            .map(|e| e["id"].as_str().expect("an event's id").to_owned())
            .collect()
    }

    fn has_more(&self) -> bool {
        self.json()["has_more"]
            .as_bool()
            .unwrap_or_else(|| panic!("has_more: {self:?}"))
    }
}

impl Feed {
    fn on(api_port: u16) -> Feed {
        Feed {
            base: format!("http://127.0.0.1:{api_port}"),
            http: reqwest::Client::new(),
        }
    }

    async fn get(&self, path: &str, key: Option<&str>) -> Got {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(key) = key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        let res = req.send().await.expect("the API answers");
        let status = res.status().as_u16();
        Got {
            status,
            text: res.text().await.expect("body"),
        }
    }

    async fn post(&self, path: &str, key: &str, idempotency_key: &str, body: &Value) -> Got {
        let res = self
            .http
            .post(format!("{}{path}", self.base))
            .header("authorization", format!("Bearer {key}"))
            .header("idempotency-key", idempotency_key)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("the API answers");
        let status = res.status().as_u16();
        Got {
            status,
            text: res.text().await.expect("body"),
        }
    }

    /// An intent of the client of `key`, waiting for its confirm (nothing is sent to the gateway).
    async fn unconfirmed_intent(&self, key: &str, idempotency_key: &str) -> String {
        let created = self
            .post(
                "/v1/payment_intents",
                key,
                idempotency_key,
                &json!({"provider": "st", "amount": 2000, "currency": "BRL", "confirm": false,
                        "stripe": {"payment_method": "pm_card_visa"}}),
            )
            .await;
        assert_eq!(created.status, 201, "{created:?}");
        created.json()["id"].as_str().expect("id").to_owned()
    }

    /// Every event the client of `key` lists, page by page (`limit` each, `query` added), checking each page's
    /// size and `has_more`.
    async fn walk(&self, key: &str, limit: usize, query: &str) -> Vec<String> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        for _ in 0..1000 {
            let cursor = after
                .as_ref()
                .map(|a| format!("&starting_after={a}"))
                .unwrap_or_default();
            let page = self
                .get(
                    &format!("/v1/events?limit={limit}{cursor}{query}"),
                    Some(key),
                )
                .await;
            assert_eq!(page.status, 200, "{page:?}");
            let ids = page.ids();
            assert!(ids.len() <= limit, "{page:?}");
            all.extend(ids.iter().cloned());
            if !page.has_more() {
                return all;
            }
            assert_eq!(ids.len(), limit, "a page before the last is full: {page:?}");
            after = ids.last().cloned();
        }
        panic!("the feed never ended")
    }
}

/// Every fact: id → (owner, exact body), and the ids newest first.
async fn stored(pool: &PgPool) -> (BTreeMap<String, (Option<String>, Vec<u8>)>, Vec<String>) {
    let rows: Vec<(String, Option<String>, Vec<u8>)> =
        sqlx::query_as("SELECT id, client, body FROM domain_events ORDER BY seq DESC")
            .fetch_all(pool)
            .await
            .expect("facts");
    let order = rows.iter().map(|r| r.0.clone()).collect();
    (
        rows.into_iter().map(|(id, c, b)| (id, (c, b))).collect(),
        order,
    )
}

/// The ids of the facts (newest first) whose owner is `client` (`None`: every fact).
fn owned_by(
    facts: &BTreeMap<String, (Option<String>, Vec<u8>)>,
    order: &[String],
    client: Option<&str>,
) -> Vec<String> {
    order
        .iter()
        .filter(|id| client.is_none() || facts[*id].0.as_deref() == client)
        .cloned()
        .collect()
}

/// An edge (no relay: nothing here goes through RabbitMQ) with the API of [`tail`] on its own database.
async fn api_only() -> (TestEdge, Feed) {
    let port = free_port();
    let db = TestDb::new().await;
    let config = parse_config(&test_config_toml(
        &db.url,
        "",
        &format!("[relay]\nembedded = false\n{}", tail(port)),
    ));
    let edge = TestEdge::spawn_on(db, config).await;
    (edge, Feed::on(port))
}

/// Records `ty` about `subject` owned by `owner`, committed.
async fn fact(pool: &PgPool, ty: EventType, subject: &str, owner: Owner<'_>) -> String {
    let mut tx = pool.begin().await.unwrap();
    let (id, created) = record(&mut tx, ty, subject, &json!({"subject": subject}), owner)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(created, "{subject}");
    id
}

/// The whole way in: intents through the API, payments through signed webhooks and the worker. Each client lists
/// (and reads) only its own intents' facts and the payment of its intent — derived from the intent by the worker's
/// set-based write — and gets 404 `event_not_found` for the other's; the back office lists every fact, the
/// payment that arrived only by webhook (no intent, no owner) included; every event is the stored body.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_client_reads_its_own_facts_and_the_back_office_every_fact() {
    let api_port = free_port();
    let p = TestPipeline::start_with(&tail(api_port)).await;
    let feed = Feed::on(api_port);
    let worker = p.spawn_worker();
    let pool = p.pool().clone();

    // shop: an intent canceled before its charge, and one whose gateway payment the webhook reports.
    let canceled = feed.unconfirmed_intent(SHOP, "shop-1").await;
    let c = feed
        .post(
            &format!("/v1/payment_intents/{canceled}/cancel"),
            SHOP,
            "shop-cancel",
            &json!({}),
        )
        .await;
    assert_eq!(c.status, 200, "{c:?}");
    let paid = feed.unconfirmed_intent(SHOP, "shop-2").await;
    // The gateway's payment id, as the dispatcher stores it when the gateway answers a charge.
    sqlx::query(
        "UPDATE payment_intents SET provider_payment_id = 'pi_feed_shop' WHERE public_id = $1",
    )
    .bind(&paid)
    .execute(&pool)
    .await
    .unwrap();
    // other: an intent canceled.
    let theirs = feed.unconfirmed_intent(OTHER, "other-1").await;
    let c = feed
        .post(
            &format!("/v1/payment_intents/{theirs}/cancel"),
            OTHER,
            "other-cancel",
            &json!({}),
        )
        .await;
    assert_eq!(c.status, 200, "{c:?}");
    // The gateway reports shop's payment, and one no intent of hookline's made.
    for (event, payment) in [
        ("evt_feed_1", "pi_feed_shop"),
        ("evt_feed_2", "pi_feed_orphan"),
    ] {
        let body = stripe_event(event, payment, 2000);
        let headers = stripe_headers(ST_SECRET, now(), &body);
        let res = p.edge.post("st", "", &headers, body).await;
        assert_eq!(res.status().as_u16(), 200);
    }
    wait_for_count(
        &pool,
        WAIT,
        "both payments' facts and the paid intent's",
        "SELECT count(*) FROM domain_events WHERE type IN ('payment.succeeded', 'payment_intent.succeeded')",
        3,
    )
    .await;
    worker.stop().await;

    let (facts, order) = stored(&pool).await;
    assert_eq!(facts.len(), 5, "{order:?}");
    let of = |ty: EventType, subject: &str| domain_events::fact_id(ty, subject);
    let shop_payment = of(EventType::PaymentSucceeded, "st/pi_feed_shop");
    let orphan_payment = of(EventType::PaymentSucceeded, "st/pi_feed_orphan");
    let other_canceled = of(EventType::PaymentIntentCanceled, &theirs);
    // The owners hookline wrote.
    let owner = |id: &str| facts[id].0.clone();
    assert_eq!(owner(&shop_payment).as_deref(), Some("shop"));
    assert_eq!(
        owner(&of(EventType::PaymentIntentSucceeded, &paid)).as_deref(),
        Some("shop")
    );
    assert_eq!(
        owner(&of(EventType::PaymentIntentCanceled, &canceled)).as_deref(),
        Some("shop")
    );
    assert_eq!(owner(&other_canceled).as_deref(), Some("other"));
    assert_eq!(owner(&orphan_payment), None);

    for (key, client) in [(SHOP, Some("shop")), (OTHER, Some("other")), (OFFICE, None)] {
        let list = feed.get("/v1/events?limit=100", Some(key)).await;
        assert_eq!(list.status, 200, "{list:?}");
        // Exactly its facts, newest first.
        assert_eq!(list.ids(), owned_by(&facts, &order, client), "{client:?}");
        assert!(!list.has_more());
        // Each event is the pushed body.
        for event in list.json()["data"].as_array().unwrap() {
            let stored: Value =
                serde_json::from_slice(&facts[event["id"].as_str().unwrap()].1).unwrap();
            assert_eq!(event, &stored);
        }
    }
    assert_eq!(feed.get("/v1/events", Some(SHOP)).await.ids().len(), 3);
    assert_eq!(feed.get("/v1/events", Some(OFFICE)).await.ids().len(), 5);

    // One event: the stored bytes themselves, to its owner and to the back office; 404 to anyone else.
    for (id, readers, strangers) in [
        (&shop_payment, vec![SHOP, OFFICE], vec![OTHER]),
        (&other_canceled, vec![OTHER, OFFICE], vec![SHOP]),
        (&orphan_payment, vec![OFFICE], vec![SHOP, OTHER]),
    ] {
        for key in readers {
            let got = feed.get(&format!("/v1/events/{id}"), Some(key)).await;
            assert_eq!(got.status, 200, "{got:?}");
            assert_eq!(got.text.as_bytes(), facts[id].1.as_slice());
        }
        for key in strangers {
            let got = feed.get(&format!("/v1/events/{id}"), Some(key)).await;
            assert_eq!(
                (got.status, got.code().as_str()),
                (404, "event_not_found"),
                "{got:?}"
            );
            assert!(!got.text.contains("pi_feed"), "{got:?}");
            // Nor as a cursor: the same answer as an id of nobody's.
            let page = feed
                .get(&format!("/v1/events?starting_after={id}"), Some(key))
                .await;
            assert_eq!(
                (page.status, page.code().as_str(), page.param().as_str()),
                (422, "resource_missing", "starting_after"),
                "{page:?}"
            );
        }
    }
}

/// `record` writes the owner it is given; a payment's owner is the client of the intent whose payment it is,
/// and nobody when no intent has it (several facts of mixed owners in one statement, as the worker writes them).
#[tokio::test]
async fn a_fact_is_written_with_its_owner() {
    let db = TestDb::new().await;
    let pool = db.pool.clone();
    let mut tx = pool.begin().await.unwrap();
    let intent = hookline_payments::intents::create_intent_for_client(
        &mut tx,
        "shop",
        &hookline_payments::intents::NewIntent {
            provider: "st",
            amount: 900,
            currency: "brl",
            customer: None,
            description: None,
            order_reference: None,
            payment_params: None,
            confirm: false,
            cycle: None,
            capture_method: Default::default(),
        },
    )
    .await
    .unwrap();
    sqlx::query("UPDATE payment_intents SET provider_payment_id = 'pi_owned' WHERE id = $1")
        .bind(intent.id)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let named = fact(
        &pool,
        EventType::PaymentIntentCanceled,
        "pi_a",
        Owner::Client("other"),
    )
    .await;
    let nobody = fact(
        &pool,
        EventType::SubscriptionPastDue,
        "sub/1",
        Owner::Nobody,
    )
    .await;
    let payment_of = |payment_ref| Owner::PaymentOf {
        provider: "st",
        payment_ref,
    };
    let mut tx = pool.begin().await.unwrap();
    let facts = [
        (
            EventType::PaymentSucceeded,
            "st/pi_owned".to_owned(),
            json!({}),
            None,
            payment_of("pi_owned"),
        ),
        (
            EventType::PaymentSucceeded,
            "st/pi_stray".to_owned(),
            json!({}),
            None,
            payment_of("pi_stray"),
        ),
        // The same payment id at another provider is another payment.
        (
            EventType::PaymentFailed,
            "mp/pi_owned".to_owned(),
            json!({}),
            None,
            Owner::PaymentOf {
                provider: "mp",
                payment_ref: "pi_owned",
            },
        ),
        (
            EventType::RefundApplied,
            "st/re_1".to_owned(),
            json!({}),
            None,
            Owner::Client("shop"),
        ),
    ];
    assert_eq!(
        domain_events::record_many(&mut tx, &facts).await.unwrap(),
        4
    );
    tx.commit().await.unwrap();

    let (stored, _) = stored(&pool).await;
    let owner = |ty, subject: &str| stored[&domain_events::fact_id(ty, subject)].0.clone();
    assert_eq!(stored[&named].0.as_deref(), Some("other"));
    assert_eq!(stored[&nobody].0, None);
    assert_eq!(
        owner(EventType::PaymentSucceeded, "st/pi_owned").as_deref(),
        Some("shop")
    );
    assert_eq!(owner(EventType::PaymentSucceeded, "st/pi_stray"), None);
    assert_eq!(owner(EventType::PaymentFailed, "mp/pi_owned"), None);
    assert_eq!(
        owner(EventType::RefundApplied, "st/re_1").as_deref(),
        Some("shop")
    );
}

/// Paging: every page newest first, `limit` at most, `has_more` true exactly when more follow, and the pages
/// together are the client's facts once each, in order — with and without the `type` filter, as a client and
/// as the back office; `created[gte]` keeps the facts recorded at or after it.
#[tokio::test]
async fn pages_are_newest_first_without_gaps_or_duplicates_and_filters_hold() {
    let (edge, feed) = api_only().await;
    let pool = edge.db.pool.clone();
    // Interleaved owners and types, so a page that let another's fact or another type through would show it.
    for i in 0..25 {
        let ty = if i % 3 == 0 {
            EventType::PaymentIntentSucceeded
        } else {
            EventType::PaymentIntentCanceled
        };
        fact(&pool, ty, &format!("shop_{i}"), Owner::Client("shop")).await;
        if i % 5 == 0 {
            fact(&pool, ty, &format!("other_{i}"), Owner::Client("other")).await;
            fact(
                &pool,
                EventType::PaymentSucceeded,
                &format!("st/pi_{i}"),
                Owner::Nobody,
            )
            .await;
        }
    }
    let (facts, order) = stored(&pool).await;
    let shops = owned_by(&facts, &order, Some("shop"));
    assert_eq!(shops.len(), 25);

    for limit in [1, 7, 10, 24, 25, 100] {
        let walked = feed.walk(SHOP, limit, "").await;
        assert_eq!(walked, shops, "limit {limit}");
    }
    let everything = feed.walk(OFFICE, 8, "").await;
    assert_eq!(everything, order);
    assert_eq!(everything.len(), 35);
    assert_eq!(
        everything.iter().collect::<HashSet<_>>().len(),
        35,
        "no duplicates"
    );
    // The default page is 10.
    let first = feed.get("/v1/events", Some(SHOP)).await;
    assert_eq!(first.ids(), shops[..10].to_vec());
    assert!(first.has_more());
    // A full last page says nothing more follows.
    let exact = feed.get("/v1/events?limit=25", Some(SHOP)).await;
    assert!(!exact.has_more(), "{exact:?}");
    let short = feed.get("/v1/events?limit=24", Some(SHOP)).await;
    assert!(short.has_more(), "{short:?}");
    // Past the oldest: an empty page.
    let oldest = shops.last().unwrap();
    let past = feed
        .get(&format!("/v1/events?starting_after={oldest}"), Some(SHOP))
        .await;
    assert_eq!((past.ids().len(), past.has_more()), (0, false), "{past:?}");

    // `type`: only that type, paged the same way.
    let succeeded: Vec<String> = shops
        .iter()
        .filter(|id| {
            let body: Value = serde_json::from_slice(&facts[*id].1).unwrap();
            body["type"] == "payment_intent.succeeded"
        })
        .cloned()
        .collect();
    assert_eq!(succeeded.len(), 9);
    assert_eq!(
        feed.walk(SHOP, 4, "&type=payment_intent.succeeded").await,
        succeeded
    );
    let payments = feed.walk(OFFICE, 2, "&type=payment.succeeded").await;
    assert_eq!(payments.len(), 5);
    assert!(feed
        .walk(SHOP, 10, "&type=payment.succeeded")
        .await
        .is_empty());

    // `created[gte]`: the older half recorded two days ago; a bound one day ago keeps the newer half.
    let older: Vec<String> = shops[12..].to_vec();
    sqlx::query(
        "UPDATE domain_events SET created_at = now() - interval '2 days' WHERE id = ANY ($1)",
    )
    .bind(&older)
    .execute(&pool)
    .await
    .unwrap();
    let day_ago = now() - 86_400;
    assert_eq!(
        feed.walk(SHOP, 5, &format!("&created%5Bgte%5D={day_ago}"))
            .await,
        shops[..12].to_vec()
    );
    assert_eq!(
        feed.walk(SHOP, 5, &format!("&created[gte]={}", day_ago - 86_400 * 2))
            .await,
        shops
    );
    assert!(feed
        .walk(SHOP, 5, &format!("&created[gte]={}", now() + 3600))
        .await
        .is_empty());
}

/// Hostile input on both routes: 4xx naming the parameter (or `id`), never a 5xx, never another client's data;
/// no key (or a wrong one) is 401 before anything else.
#[tokio::test]
async fn hostile_input_is_refused_by_name_on_both_routes() {
    let (edge, feed) = api_only().await;
    let pool = edge.db.pool.clone();
    let id = fact(
        &pool,
        EventType::PaymentIntentCanceled,
        "pi_x",
        Owner::Client("shop"),
    )
    .await;

    for path in [
        "/v1/events".to_owned(),
        "/v1/events?limit=abc".to_owned(),
        format!("/v1/events/{id}"),
        "/v1/events/evt_nope".to_owned(),
    ] {
        for key in [None, Some("sk_hl_wrong"), Some("")] {
            let got = feed.get(&path, key).await;
            assert_eq!(
                (got.status, got.code().as_str()),
                (401, "unauthorized"),
                "{path} {key:?}: {got:?}"
            );
        }
    }

    let huge = "x".repeat(10_000);
    for (query, status, code, param) in [
        ("limit=0", 422, "limit_invalid", "limit"),
        ("limit=101", 422, "limit_invalid", "limit"),
        ("limit=-1", 422, "limit_invalid", "limit"),
        ("limit=abc", 422, "limit_invalid", "limit"),
        ("limit=1.5", 422, "limit_invalid", "limit"),
        ("limit=%00", 422, "limit_invalid", "limit"),
        ("limit=1&limit=2", 422, "duplicate_parameter", "limit"),
        ("offset=2", 422, "unknown_parameter", "offset"),
        (
            "ending_before=evt_x",
            422,
            "unknown_parameter",
            "ending_before",
        ),
        ("type=payment.refunded", 422, "type_invalid", "type"),
        ("type=payment.succeeded%00", 422, "type_invalid", "type"),
        ("type=%0A", 422, "type_invalid", "type"),
        (
            "type=payment.failed&type=payment.succeeded",
            422,
            "duplicate_parameter",
            "type",
        ),
        ("created[gte]=-1", 422, "created_invalid", "created[gte]"),
        (
            "created[gte]=tomorrow",
            422,
            "created_invalid",
            "created[gte]",
        ),
        (
            "created[gte]=99999999999999",
            422,
            "created_invalid",
            "created[gte]",
        ),
        ("created[lt]=1", 422, "unknown_parameter", "created[lt]"),
        (
            "starting_after=evt_%00",
            400,
            "invalid_text",
            "starting_after",
        ),
        (
            "starting_after=evt_%0Ax",
            400,
            "control_character",
            "starting_after",
        ),
        ("starting_after=", 422, "resource_missing", "starting_after"),
        (
            "starting_after=pi_hl_1",
            422,
            "resource_missing",
            "starting_after",
        ),
        (
            "starting_after=evt_0123456789abcdef0123456789abcdef",
            422,
            "resource_missing",
            "starting_after",
        ),
    ] {
        let got = feed.get(&format!("/v1/events?{query}"), Some(SHOP)).await;
        assert_eq!(
            (got.status, got.code().as_str(), got.param().as_str()),
            (status, code, param),
            "{query}: {got:?}"
        );
    }
    let got = feed
        .get(&format!("/v1/events?starting_after={huge}"), Some(SHOP))
        .await;
    assert_eq!(
        (got.status, got.code().as_str(), got.param().as_str()),
        (422, "resource_missing", "starting_after"),
        "{got:?}"
    );
    // A huge unknown name is echoed bounded.
    let got = feed.get(&format!("/v1/events?{huge}=1"), Some(SHOP)).await;
    assert_eq!(
        (got.status, got.code().as_str()),
        (422, "unknown_parameter")
    );
    assert!(got.param().len() <= 64, "{got:?}");

    for (path, status, code) in [
        ("/v1/events/evt_%00", 400, "invalid_text"),
        ("/v1/events/evt_%0A", 400, "control_character"),
        ("/v1/events/pi_hl_1", 404, "event_not_found"),
        (
            "/v1/events/evt_0123456789ABCDEF0123456789ABCDEF",
            404,
            "event_not_found",
        ),
        (
            "/v1/events/evt_0123456789abcdef0123456789abcdef",
            404,
            "event_not_found",
        ),
        ("/v1/events/%20", 404, "event_not_found"),
    ] {
        let got = feed.get(path, Some(SHOP)).await;
        assert_eq!(
            (got.status, got.code().as_str()),
            (status, code),
            "{path}: {got:?}"
        );
    }
    let got = feed
        .get(&format!("/v1/events/evt_{huge}"), Some(SHOP))
        .await;
    assert_eq!(
        (got.status, got.code().as_str()),
        (404, "event_not_found"),
        "{got:?}"
    );
    // The well-formed id of the client's own fact still answers.
    let own = feed.get(&format!("/v1/events/{id}"), Some(SHOP)).await;
    assert_eq!(own.status, 200, "{own:?}");
}
