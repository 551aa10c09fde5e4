//! Issue 47: the webhook endpoints a merchant manages through the API. Facts reach them through the same fan-out,
//! outbox and delivery loop as the operator's `[[destinations]]` (which keep working beside them), signed with the
//! secret the API returned — verified here by the official Standard Webhooks library (PyPI `standardwebhooks`, in
//! the SDK venv) — with a rotation's overlap (both secrets verify during it, the old one not after); an endpoint
//! receives only what its client may see; SSRF is refused at creation (literal private addresses, a name resolving
//! to loopback) and at delivery (the address actually connected to; a redirect is not followed); another client's
//! endpoint is 404 on every route; hostile input is a 4xx naming its field.
//!
//! Facts are recorded with `hookline_core::domain_events::record`, the function every effect uses. Until
//! `record_many` writes `domain_events.client` (a parallel change), a fact it records has no client: the tests
//! deliver such facts to an `all_events` client's endpoint (`back`), and give a fact to `shop` by setting its
//! `client` before asking for a resend.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use hookline_core::domain_events::{self, EventType};
use hookline_delivery::address::{Lookup, Lookups};
use hookline_delivery::deliver::Delivery;
use hookline_tests::{parse_config, sdk, test_config_toml, wait_for, wait_until};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::merchant_api::{Answer, Api, KEY_ONE, KEY_TWO};

const WAIT: Duration = Duration::from_secs(60);
/// The client `back`'s key (`all_events = true`: a merchant's back office).
const KEY_BACK: &str = "sk_hl_test_key_back";

/// `shop`, `other` and the back office `back`; webhook URLs may be private (the receivers are on loopback) when
/// `allow_private`.
fn api_section(allow_private: bool) -> String {
    format!(
        "[api]\nlisten = \"127.0.0.1:0\"\nallow_private_webhook_urls = {allow_private}\n\
         [[api.clients]]\nname = \"shop\"\nkeys = [\"{KEY_ONE}\"]\n\
         [[api.clients]]\nname = \"other\"\nkeys = [\"{KEY_TWO}\"]\n\
         [[api.clients]]\nname = \"back\"\nkeys = [\"{KEY_BACK}\"]\nall_events = true\n"
    )
}

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Hook {
    path: String,
    headers: HashMap<String, String>,
    body: String,
}

/// A merchant's receiver on loopback: records every request; `/redirect/…` answers 302 to `redirect_to`,
/// everything else 200.
struct Hooks {
    base: String,
    got: Arc<Mutex<Vec<Hook>>>,
    handle: actix_web::dev::ServerHandle,
}

impl Hooks {
    fn start(redirect_to: Option<String>) -> Hooks {
        let got: Arc<Mutex<Vec<Hook>>> = Arc::default();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let data = web::Data::new((got.clone(), redirect_to));
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .default_service(web::to(receive))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .expect("listen")
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Hooks {
            base: format!("http://127.0.0.1:{port}"),
            got,
            handle,
        }
    }

    fn got(&self, path: &str) -> Vec<Hook> {
        let got = self.got.lock().expect("hooks");
        got.iter().filter(|h| h.path == path).cloned().collect()
    }

    /// Waits until `path` got `n` requests, and returns them.
    async fn wait(&self, path: &str, n: usize) -> Vec<Hook> {
        wait_for(
            WAIT,
            &format!("{n} request(s) at {path}"),
            || async { self.got(path) },
            |got| got.len() >= n,
        )
        .await
    }

    async fn stop(self) {
        self.handle.stop(false).await;
    }
}

type HookState = (Arc<Mutex<Vec<Hook>>>, Option<String>);

async fn receive(req: HttpRequest, body: web::Bytes, state: web::Data<HookState>) -> HttpResponse {
    let headers = req
        .headers()
        .iter()
        .filter(|(n, _)| n.as_str().starts_with("webhook-"))
        .map(|(n, v)| {
            (
                n.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let path = req.path().to_owned();
    state.0.lock().expect("hooks").push(Hook {
        path: path.clone(),
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    match (&state.1, path.starts_with("/redirect/")) {
        (Some(to), true) => HttpResponse::Found()
            .insert_header(("location", to.as_str()))
            .finish(),
        _ => HttpResponse::Ok().finish(),
    }
}

/// The delivery (fast retries) on the API's database, with `[[destinations]]` from `destinations`, running until
/// the token is cancelled.
fn start_delivery(
    api: &Api,
    destinations: &str,
    lookups: Option<Arc<dyn Lookups>>,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let config = parse_config(&test_config_toml(
        &api.db.url,
        "",
        &format!(
            "[delivery]\ntimeout_ms = 2000\nbackoff_base_ms = 100\nbackoff_max_secs = 1\npoll_interval_ms = 50\n\
             breaker_threshold = 1000\n{destinations}"
        ),
    ));
    let mut delivery = Delivery::from_config(api.db.pool.clone(), &config).expect("delivery");
    if let Some(lookups) = lookups {
        delivery = delivery.with_lookups(lookups).expect("resolver");
    }
    let cancel = CancellationToken::new();
    let token = cancel.clone();
    let task = tokio::spawn(async move { delivery.run(token).await.expect("delivery run") });
    (cancel, task)
}

async fn stop_delivery((cancel, task): (CancellationToken, tokio::task::JoinHandle<()>)) {
    cancel.cancel();
    hookline_tests::within(WAIT, "the delivery's stop", task)
        .await
        .expect("delivery task");
}

/// Records one fact (what every effect does, in its transaction) and returns its id.
async fn record(pool: &PgPool, ty: EventType, subject: &str) -> String {
    let mut tx = pool.begin().await.expect("begin");
    let (id, created) = domain_events::record(
        &mut tx,
        ty,
        subject,
        &json!({"subject": subject}),
        domain_events::Owner::Nobody,
    )
    .await
    .expect("record");
    tx.commit().await.expect("commit");
    assert!(created);
    id
}

async fn create(api: &Api, auth: &str, body: Value) -> Answer {
    api.post("/v1/webhook_endpoints", Some(auth), None, &body.to_string())
        .await
}

/// Makes an endpoint and returns (id, secret).
async fn endpoint(api: &Api, auth: &str, url: &str, events: Value) -> (String, String) {
    let a = create(api, auth, json!({"url": url, "enabled_events": events})).await;
    assert_eq!(a.status, 201, "{a:?}");
    let v = a.json();
    (
        v["id"].as_str().expect("id").to_owned(),
        v["secret"].as_str().expect("secret").to_owned(),
    )
}

async fn resend(api: &Api, auth: &str, event: &str, endpoint: &str) -> Answer {
    api.post(
        &format!("/v1/events/{event}/resend"),
        Some(auth),
        None,
        &json!({"endpoint": endpoint}).to_string(),
    )
    .await
}

/// The hooks, each with a secret and whether it must verify, checked by the official library.
async fn verify_with_the_official_library(cases: &[(String, &Hook, &str, bool)]) {
    let cases: Vec<Value> = cases
        .iter()
        .map(|(name, hook, secret, expect)| {
            json!({"name": name, "secret": secret, "headers": hook.headers, "body": hook.body,
                   "expect": expect})
        })
        .collect();
    let file =
        std::env::temp_dir().join(format!("hookline-webhooks-{}.json", uuid::Uuid::new_v4()));
    std::fs::write(&file, serde_json::to_vec(&cases).unwrap()).expect("write the cases");
    let run = sdk::run_script(
        "verify_webhooks.py",
        &[("HOOKLINE_WEBHOOKS", file.display().to_string())],
    )
    .await
    .expect("run the verifier");
    let _ = std::fs::remove_file(&file);
    assert!(run.passed, "{}", run.output);
    assert_eq!(run.passed_checks(), cases.len(), "{}", run.output);
}

/// Waits until the delivery of `fact` to `endpoint` is recorded as delivered (the receiver answers before the loop
/// records it: a resend asked in between would find it still pending and change nothing).
async fn wait_delivered(pool: &PgPool, endpoint: &str, fact: &str) {
    wait_until(WAIT, "the delivery is recorded", || async {
        sqlx::query_scalar::<_, String>(
            "SELECT d.status FROM domain_deliveries d JOIN domain_events e ON e.seq = d.event_seq
              WHERE d.destination = $1 AND e.id = $2",
        )
        .bind(endpoint)
        .bind(fact)
        .fetch_optional(pool)
        .await
        .ok()
        .flatten()
        .is_some_and(|s| s == "delivered")
    })
    .await;
}

fn signatures(hook: &Hook) -> usize {
    hook.headers["webhook-signature"].split(' ').count()
}

/// Creation → a fact delivered and verified by the official library with the returned secret; a rotation: during
/// its overlap both secrets verify (two signatures), after it only the new one; every request carries the fact's
/// id as `webhook-id`; the deliveries listing shows them. A type the endpoint did not subscribe to is not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fact_verifies_with_the_returned_secret_and_a_rotation_overlaps() {
    let api = Api::spawn_with(&api_section(true)).await;
    let hooks = Hooks::start(None);
    let delivery = start_delivery(&api, "", None);
    let url = format!("{}/hooks/a", hooks.base);
    let (id, first) = endpoint(&api, KEY_BACK, &url, json!(["payment.succeeded"])).await;
    assert!(id.starts_with("we_"), "{id}");
    assert!(first.starts_with("whsec_"), "{first}");
    let read = api
        .get(&format!("/v1/webhook_endpoints/{id}"), Some(KEY_BACK))
        .await;
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(read.json()["status"], "enabled");
    assert!(
        read.json().get("secret").is_none(),
        "the secret is shown once: {read:?}"
    );

    let skipped = record(&api.db.pool, EventType::RefundApplied, "st/re_skip").await;
    let fact = record(&api.db.pool, EventType::PaymentSucceeded, "st/pi_1").await;
    let got = hooks.wait("/hooks/a", 1).await;
    assert_eq!(got[0].headers["webhook-id"], fact);
    wait_delivered(&api.db.pool, &id, &fact).await;

    // A short overlap, long enough for one resend to be delivered inside it on a loaded machine (the request is
    // checked to carry two signatures); its end is then waited for, with a deadline.
    let rotated = api
        .post(
            &format!("/v1/webhook_endpoints/{id}/rotate_secret"),
            Some(KEY_BACK),
            None,
            r#"{"expires_in_secs": 8}"#,
        )
        .await;
    assert_eq!(rotated.status, 200, "{rotated:?}");
    let second = rotated.json()["secret"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    assert!(
        rotated.json()["previous_secret_expires_at"].is_i64(),
        "{rotated:?}"
    );
    assert_eq!(resend(&api, KEY_BACK, &fact, &id).await.status, 202);
    let got = hooks.wait("/hooks/a", 2).await;
    assert_eq!(
        got[1].headers["webhook-id"], fact,
        "a resend keeps the webhook-id"
    );
    assert_eq!(signatures(&got[1]), 2, "{:?}", got[1]);
    wait_delivered(&api.db.pool, &id, &fact).await;

    // After the overlap (the database's clock decides), the old secret signs no more.
    wait_until(WAIT, "the rotation's overlap ends", || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT previous_secret_expires_at < now() FROM destinations WHERE name = $1",
        )
        .bind(&id)
        .fetch_one(&api.db.pool)
        .await
        .unwrap_or(false)
    })
    .await;
    assert_eq!(resend(&api, KEY_BACK, &fact, &id).await.status, 202);
    let got = hooks.wait("/hooks/a", 3).await;
    assert_eq!(signatures(&got[2]), 1, "{:?}", got[2]);
    assert_eq!(got[2].headers["webhook-id"], fact);

    verify_with_the_official_library(&[
        (
            "first secret, before the rotation".into(),
            &got[0],
            &first,
            true,
        ),
        ("a secret not yet made".into(), &got[0], &second, false),
        (
            "new secret, during the overlap".into(),
            &got[1],
            &second,
            true,
        ),
        (
            "old secret, during the overlap".into(),
            &got[1],
            &first,
            true,
        ),
        (
            "new secret, after the overlap".into(),
            &got[2],
            &second,
            true,
        ),
        (
            "old secret, after the overlap".into(),
            &got[2],
            &first,
            false,
        ),
    ])
    .await;

    let page = api
        .get(
            &format!("/v1/webhook_endpoints/{id}/deliveries"),
            Some(KEY_BACK),
        )
        .await;
    assert_eq!(page.status, 200, "{page:?}");
    let data = page.json()["data"].as_array().unwrap().clone();
    assert_eq!(data.len(), 1, "only the subscribed fact: {page:?}");
    assert_eq!(data[0]["event"], fact);
    assert_eq!(data[0]["status"], "delivered");
    assert_eq!(data[0]["last_http_status"], 200);
    assert!(hooks
        .got("/hooks/a")
        .iter()
        .all(|h| h.headers["webhook-id"] != skipped));
    stop_delivery(delivery).await;
    hooks.stop().await;
}

/// An endpoint receives only what its client may see: a fact about nothing `shop` owns goes to the back office's
/// endpoint and to the operator's configured destination, not to `shop`'s; once the fact is `shop`'s, `shop` may
/// have it resent and receives it with the same `webhook-id`, while `other` still cannot see it (404). The
/// paging of the list and of the deliveries; a deleted endpoint gets no new fact and keeps its history.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_endpoint_receives_what_its_client_may_see_beside_the_configured_destinations() {
    let api = Api::spawn_with(&api_section(true)).await;
    let hooks = Hooks::start(None);
    let configured = format!(
        "[[destinations]]\nname = \"ops\"\nurl = \"{}/hooks/ops\"\nsecrets = [\"{}\"]\nevents = [\"*\"]\n",
        hooks.base,
        hookline_tests::secrets::STANDARD
    );
    let delivery = start_delivery(&api, &configured, None);
    let (shop, _) = endpoint(
        &api,
        KEY_ONE,
        &format!("{}/hooks/shop", hooks.base),
        json!(["*"]),
    )
    .await;
    let (back, _) = endpoint(
        &api,
        KEY_BACK,
        &format!("{}/hooks/back", hooks.base),
        json!(["*"]),
    )
    .await;
    let (other, _) = endpoint(
        &api,
        KEY_TWO,
        &format!("{}/hooks/other", hooks.base),
        json!(["*"]),
    )
    .await;
    // The configured destination is synced by the delivery at start: wait for it before the fact fans out.
    wait_until(WAIT, "the configured destination is synced", || async {
        hookline_delivery::destinations::get(&api.db.pool, "ops")
            .await
            .is_ok_and(|d| d.is_some())
    })
    .await;

    let fact = record(&api.db.pool, EventType::PaymentSucceeded, "st/pi_seen").await;
    let queued: Vec<String> = sqlx::query_scalar(
        "SELECT destination FROM domain_deliveries d JOIN domain_events e ON e.seq = d.event_seq
          WHERE e.id = $1 ORDER BY destination",
    )
    .bind(&fact)
    .fetch_all(&api.db.pool)
    .await
    .unwrap();
    let mut want = vec![back.clone(), "ops".to_owned()];
    want.sort();
    assert_eq!(queued, want, "the fan-out decides who may see a fact");
    hooks.wait("/hooks/back", 1).await;
    hooks.wait("/hooks/ops", 1).await;

    // Not shop's fact: shop cannot have it resent.
    let refused = resend(&api, KEY_ONE, &fact, &shop).await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (404, "event_not_found")
    );
    sqlx::query("UPDATE domain_events SET client = 'shop' WHERE id = $1")
        .bind(&fact)
        .execute(&api.db.pool)
        .await
        .unwrap();
    let queued = resend(&api, KEY_ONE, &fact, &shop).await;
    assert_eq!(queued.status, 202, "{queued:?}");
    let got = hooks.wait("/hooks/shop", 1).await;
    assert_eq!(got[0].headers["webhook-id"], fact);
    let refused = resend(&api, KEY_TWO, &fact, &other).await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (404, "event_not_found")
    );
    // shop's endpoint, asked by the back office: not its endpoint.
    let refused = resend(&api, KEY_BACK, &fact, &shop).await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (404, "endpoint_not_found")
    );

    // The list pages newest first.
    let (shop2, _) = endpoint(
        &api,
        KEY_ONE,
        &format!("{}/hooks/shop2", hooks.base),
        json!(["*"]),
    )
    .await;
    let page = api
        .get("/v1/webhook_endpoints?limit=1", Some(KEY_ONE))
        .await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(page.json()["data"][0]["id"], shop2.as_str());
    assert_eq!(page.json()["has_more"], true);
    let next = api
        .get(
            &format!("/v1/webhook_endpoints?limit=1&starting_after={shop2}"),
            Some(KEY_ONE),
        )
        .await;
    assert_eq!(next.json()["data"][0]["id"], shop.as_str(), "{next:?}");
    assert_eq!(next.json()["has_more"], false);

    // Deleted: no new facts, 404 from now on, its history kept.
    let deleted = api
        .delete(&format!("/v1/webhook_endpoints/{back}"), Some(KEY_BACK))
        .await;
    assert_eq!(deleted.status, 200, "{deleted:?}");
    assert_eq!(
        deleted.json(),
        json!({"id": back, "object": "webhook_endpoint", "deleted": true})
    );
    let later = record(&api.db.pool, EventType::PaymentFailed, "st/pi_later").await;
    let to_back: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM domain_deliveries d JOIN domain_events e ON e.seq = d.event_seq
          WHERE d.destination = $1 AND e.id = $2",
    )
    .bind(&back)
    .bind(&later)
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(to_back, 0, "a deleted endpoint gets no new fact");
    let history: i64 =
        sqlx::query_scalar("SELECT count(*) FROM domain_deliveries WHERE destination = $1")
            .bind(&back)
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(history, 1);
    let gone = api
        .get(&format!("/v1/webhook_endpoints/{back}"), Some(KEY_BACK))
        .await;
    assert_eq!(
        (gone.status, gone.code().as_str()),
        (404, "endpoint_not_found")
    );
    hooks.wait("/hooks/ops", 2).await;
    stop_delivery(delivery).await;
    hooks.stop().await;
}

/// Without `allow_private_webhook_urls`: literal loopback, private, metadata and mapped addresses and a name
/// resolving to loopback are refused at creation, 422 naming `url`; so are http, credentials and a fragment.
#[tokio::test]
async fn private_addresses_are_refused_at_creation() {
    let api = Api::spawn_with(&api_section(false)).await;
    for url in [
        "https://127.0.0.1/hooks",
        "https://127.0.0.1:8443/hooks",
        "https://10.1.2.3/hooks",
        "https://192.168.0.10/hooks",
        "https://172.20.0.1/hooks",
        "https://169.254.169.254/latest/meta-data",
        "https://100.64.0.1/hooks",
        "https://[::1]/hooks",
        "https://[fd00::1]/hooks",
        "https://[fe80::1]/hooks",
        "https://[::ffff:127.0.0.1]/hooks",
        "https://0.0.0.0/hooks",
        "https://2130706433/hooks",
        "https://localhost/hooks",
        "https://localhost:9/hooks",
    ] {
        let a = create(&api, KEY_ONE, json!({"url": url, "enabled_events": ["*"]})).await;
        assert_eq!(a.status, 422, "{url}: {a:?}");
        assert_eq!(a.code(), "url_not_allowed", "{url}: {a:?}");
        assert_eq!(a.json()["error"]["param"], "url", "{url}: {a:?}");
    }
    for url in [
        "http://8.8.8.8/hooks",
        "https://user:pw@8.8.8.8/hooks",
        "https://8.8.8.8/hooks#frag",
        "ftp://8.8.8.8/hooks",
        "/relative",
        "https://",
    ] {
        let a = create(&api, KEY_ONE, json!({"url": url, "enabled_events": ["*"]})).await;
        assert_eq!(a.status, 422, "{url}: {a:?}");
        assert_eq!(a.code(), "url_invalid", "{url}: {a:?}");
        assert_eq!(a.json()["error"]["param"], "url", "{url}: {a:?}");
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM destinations")
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(n, 0, "nothing was made");
}

/// Lookups standing for a DNS whose answer changed after validation: every name answers `to`.
struct Rebound(SocketAddr);

impl Lookups for Rebound {
    fn lookup(&self, _host: String) -> Lookup {
        let to = self.0;
        Box::pin(async move { Ok(vec![to]) })
    }
}

/// At delivery, the address actually connected to is judged: endpoints made while private addresses were allowed
/// (a literal loopback address, and a name) are refused once the API restarts with the setting off — the name
/// because its DNS answer is now loopback. Nothing reaches the receiver; the attempts say why. The update of an
/// endpoint's URL is checked like a creation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_address_connected_to_is_judged_at_delivery() {
    let api = Api::spawn_with(&api_section(true)).await;
    let hooks = Hooks::start(None);
    let port: u16 = hooks.base.rsplit(':').next().unwrap().parse().unwrap();
    let (literal, _) = endpoint(
        &api,
        KEY_BACK,
        &format!("{}/hooks/literal", hooks.base),
        json!(["*"]),
    )
    .await;
    let (named, _) = endpoint(
        &api,
        KEY_BACK,
        &format!("http://hooks.rebind.test:{port}/hooks/named"),
        json!(["*"]),
    )
    .await;
    let api = api.restart(&api_section(false)).await;
    wait_until(
        WAIT,
        "the endpoints follow the restarted API's setting",
        || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM destinations WHERE client IS NOT NULL AND NOT allow_private",
            )
            .fetch_one(&api.db.pool)
            .await
            .is_ok_and(|n| n == 2)
        },
    )
    .await;
    let rebound: Arc<dyn Lookups> = Arc::new(Rebound(SocketAddr::from(([127, 0, 0, 1], port))));
    let delivery = start_delivery(&api, "", Some(rebound));
    record(&api.db.pool, EventType::PaymentSucceeded, "st/pi_ssrf").await;
    for (endpoint, what) in [(&literal, "literal"), (&named, "named")] {
        let error = wait_for(
            WAIT,
            &format!("a refused attempt to the {what} endpoint"),
            || async {
                sqlx::query_scalar::<_, Option<String>>(
                    "SELECT last_error FROM domain_deliveries WHERE destination = $1",
                )
                .bind(endpoint)
                .fetch_optional(&api.db.pool)
                .await
                .ok()
                .flatten()
                .flatten()
            },
            |e| e.is_some(),
        )
        .await
        .unwrap();
        assert!(error.contains("not public"), "{what}: {error}");
    }
    assert!(
        hooks.got.lock().unwrap().is_empty(),
        "nothing reached the receiver"
    );

    let a = api
        .post(
            &format!("/v1/webhook_endpoints/{literal}"),
            Some(KEY_BACK),
            None,
            r#"{"url": "https://169.254.169.254/latest"}"#,
        )
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (422, "url_not_allowed"),
        "{a:?}"
    );
    stop_delivery(delivery).await;
    hooks.stop().await;
}

/// A redirect is not followed: the endpoint answers 302 to another server, which receives nothing; the attempt is
/// a failure (its 302 recorded) and is retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redirect_is_not_followed() {
    let api = Api::spawn_with(&api_section(true)).await;
    let elsewhere = Hooks::start(None);
    let hooks = Hooks::start(Some(format!("{}/hooks/stolen", elsewhere.base)));
    let delivery = start_delivery(&api, "", None);
    let (id, _) = endpoint(
        &api,
        KEY_BACK,
        &format!("{}/redirect/x", hooks.base),
        json!(["*"]),
    )
    .await;
    record(&api.db.pool, EventType::PaymentSucceeded, "st/pi_redirect").await;
    hooks.wait("/redirect/x", 2).await;
    let page = wait_for(
        WAIT,
        "the 302 recorded",
        || async {
            api.get(
                &format!("/v1/webhook_endpoints/{id}/deliveries"),
                Some(KEY_BACK),
            )
            .await
            .json()
        },
        |p| p["data"][0]["last_http_status"] == 302,
    )
    .await;
    assert_eq!(page["data"][0]["status"], "pending", "{page}");
    assert!(
        elsewhere.got.lock().unwrap().is_empty(),
        "the redirect's target got nothing"
    );
    stop_delivery(delivery).await;
    hooks.stop().await;
    elsewhere.stop().await;
}

/// Another client's endpoint is 404 `endpoint_not_found` on every route, and absent from its list.
#[tokio::test]
async fn another_clients_endpoint_is_not_found_on_every_route() {
    let api = Api::spawn_with(&api_section(true)).await;
    let (id, _) = endpoint(&api, KEY_ONE, "http://127.0.0.1:9/hooks", json!(["*"])).await;
    let path = format!("/v1/webhook_endpoints/{id}");
    let answers = [
        api.get(&path, Some(KEY_TWO)).await,
        api.post(&path, Some(KEY_TWO), None, r#"{"disabled": true}"#)
            .await,
        api.post(&format!("{path}/rotate_secret"), Some(KEY_TWO), None, "")
            .await,
        api.get(&format!("{path}/deliveries"), Some(KEY_TWO)).await,
        api.delete(&path, Some(KEY_TWO)).await,
        resend(&api, KEY_TWO, "evt_00000000000000000000000000000000", &id).await,
    ];
    for a in answers {
        assert_eq!(
            (a.status, a.code().as_str()),
            (404, "endpoint_not_found"),
            "{a:?}"
        );
    }
    let list = api.get("/v1/webhook_endpoints", Some(KEY_TWO)).await;
    assert_eq!(list.json()["data"], json!([]), "{list:?}");
    // Still there, unchanged, for its owner.
    let mine = api.get(&path, Some(KEY_ONE)).await;
    assert_eq!(mine.status, 200);
    assert_eq!(mine.json()["status"], "enabled");
}

/// Hostile input on every route: no key (401), bad JSON, unknown fields, bounds (URL length, 17th endpoint,
/// events), unknown event types, NUL and control characters, bad paging — each a 4xx naming its field, nothing
/// made. A create replayed with its Idempotency-Key answers the same endpoint and secret.
#[tokio::test]
async fn hostile_input_is_refused_on_every_route() {
    let api = Api::spawn_with(&api_section(true)).await;
    let (id, _) = endpoint(&api, KEY_ONE, "http://127.0.0.1:9/hooks", json!(["*"])).await;
    let path = format!("/v1/webhook_endpoints/{id}");
    let evt = "/v1/events/evt_00000000000000000000000000000000/resend";
    for a in [
        api.post("/v1/webhook_endpoints", None, None, "{}").await,
        api.get("/v1/webhook_endpoints", None).await,
        api.get(&path, Some("sk_wrong")).await,
        api.post(&path, None, None, "{}").await,
        api.post(&format!("{path}/rotate_secret"), None, None, "")
            .await,
        api.get(&format!("{path}/deliveries"), None).await,
        api.delete(&path, None).await,
        api.post(evt, None, None, "{}").await,
    ] {
        assert_eq!(
            (a.status, a.code().as_str()),
            (401, "unauthorized"),
            "{a:?}"
        );
    }

    let long_url = format!("http://127.0.0.1:9/{}", "a".repeat(2048));
    let cases: Vec<(&str, String, u16, &str, &str)> = vec![
        ("/v1/webhook_endpoints", "{".into(), 400, "invalid_json", ""),
        ("/v1/webhook_endpoints", "[]".into(), 400, "invalid_json", ""),
        ("/v1/webhook_endpoints", json!({"url": "http://127.0.0.1:9/", "enabled_events": ["*"], "secret": "x"}).to_string(), 422, "unknown_field", "secret"),
        ("/v1/webhook_endpoints", json!({"enabled_events": ["*"]}).to_string(), 400, "parameter_missing", "url"),
        ("/v1/webhook_endpoints", json!({"url": "http://127.0.0.1:9/"}).to_string(), 400, "parameter_missing", "enabled_events"),
        ("/v1/webhook_endpoints", json!({"url": long_url, "enabled_events": ["*"]}).to_string(), 422, "url_invalid", "url"),
        ("/v1/webhook_endpoints", json!({"url": 7, "enabled_events": ["*"]}).to_string(), 422, "url_invalid", "url"),
        ("/v1/webhook_endpoints", json!({"url": "http://127.0.0.1:9/\u{0}", "enabled_events": ["*"]}).to_string(), 400, "invalid_text", "url"),
        ("/v1/webhook_endpoints", json!({"url": "http://127.0.0.1:9/\na", "enabled_events": ["*"]}).to_string(), 400, "control_character", "url"),
        ("/v1/webhook_endpoints", json!({"url": "http://127.0.0.1:9/", "enabled_events": ["payment.paid"]}).to_string(), 422, "enabled_events_invalid", "enabled_events"),
        ("/v1/webhook_endpoints", json!({"url": "http://127.0.0.1:9/", "enabled_events": []}).to_string(), 422, "enabled_events_invalid", "enabled_events"),
        ("/v1/webhook_endpoints", json!({"url": "http://127.0.0.1:9/", "enabled_events": vec!["*"; 33]}).to_string(), 422, "enabled_events_invalid", "enabled_events"),
        ("/v1/webhook_endpoints", json!({"url": "http://127.0.0.1:9/", "enabled_events": ["*"], "description": "a\u{0}b"}).to_string(), 400, "invalid_text", "description"),
        ("/v1/webhook_endpoints", json!({"url": "http://127.0.0.1:9/", "enabled_events": ["*"], "description": "x".repeat(1001)}).to_string(), 422, "description_invalid", "description"),
        (&path, "{".into(), 400, "invalid_json", ""),
        (&path, json!({"disabled": "yes"}).to_string(), 422, "disabled_invalid", "disabled"),
        (&path, json!({"events": ["*"]}).to_string(), 422, "unknown_field", "events"),
        (&path, json!({"enabled_events": ["nope"]}).to_string(), 422, "enabled_events_invalid", "enabled_events"),
        (&path, json!({"description": "line\u{1b}[2J"}).to_string(), 400, "control_character", "description"),
        ("ROTATE", json!({"expires_in_secs": 604801}).to_string(), 422, "expires_in_secs_invalid", "expires_in_secs"),
        ("ROTATE", json!({"expires_in_secs": -1}).to_string(), 422, "expires_in_secs_invalid", "expires_in_secs"),
        ("ROTATE", json!({"overlap": 1}).to_string(), 422, "unknown_field", "overlap"),
        (evt, "{}".into(), 400, "parameter_missing", "endpoint"),
        (evt, json!({"endpoint": 5}).to_string(), 422, "endpoint_invalid", "endpoint"),
        (evt, json!({"endpoint": "we_\u{0}"}).to_string(), 400, "invalid_text", "endpoint"),
    ];
    let rotate = format!("{path}/rotate_secret");
    for (route, body, status, code, param) in cases {
        let route = if route == "ROTATE" {
            rotate.as_str()
        } else {
            route
        };
        let a = api.post(route, Some(KEY_ONE), None, &body).await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (status, code),
            "{route} {body}: {a:?}"
        );
        if !param.is_empty() {
            assert_eq!(a.json()["error"]["param"], param, "{route} {body}: {a:?}");
        }
    }
    for (query, code) in [
        ("?limit=0", "limit_invalid"),
        ("?limit=abc", "limit_invalid"),
        ("?offset=1", "unknown_parameter"),
        ("?starting_after=we_none", "resource_missing"),
        ("?starting_after=a%00b", "invalid_text"),
    ] {
        for base in [
            "/v1/webhook_endpoints".to_owned(),
            format!("{path}/deliveries"),
        ] {
            let a = api.get(&format!("{base}{query}"), Some(KEY_ONE)).await;
            assert!(matches!(a.status, 400 | 422), "{base}{query}: {a:?}");
            assert_eq!(a.code(), code, "{base}{query}: {a:?}");
        }
    }
    let nul = api.get("/v1/webhook_endpoints/we_%00", Some(KEY_ONE)).await;
    assert_eq!(
        (nul.status, nul.code().as_str()),
        (400, "invalid_text"),
        "{nul:?}"
    );
    let long = api
        .get(
            &format!("/v1/webhook_endpoints/we_{}", "x".repeat(100)),
            Some(KEY_ONE),
        )
        .await;
    assert_eq!(
        (long.status, long.code().as_str()),
        (404, "endpoint_not_found")
    );

    // Idempotent create: the same key and body answer the same endpoint, secret included; nothing new is made.
    let body = json!({"url": "http://127.0.0.1:9/idem", "enabled_events": ["*"]}).to_string();
    let first = api
        .post(
            "/v1/webhook_endpoints",
            Some(KEY_ONE),
            Some("we-key-1"),
            &body,
        )
        .await;
    let again = api
        .post(
            "/v1/webhook_endpoints",
            Some(KEY_ONE),
            Some("we-key-1"),
            &body,
        )
        .await;
    assert_eq!(first.status, 201, "{first:?}");
    assert!(again.replayed, "{again:?}");
    assert_eq!(first.json(), again.json());

    // The bound: 16 live endpoints per client; the 17th is 409, a deletion frees a slot.
    for i in 2..16 {
        endpoint(
            &api,
            KEY_ONE,
            &format!("http://127.0.0.1:9/{i}"),
            json!(["*"]),
        )
        .await;
    }
    let over = create(
        &api,
        KEY_ONE,
        json!({"url": "http://127.0.0.1:9/17", "enabled_events": ["*"]}),
    )
    .await;
    assert_eq!(
        (over.status, over.code().as_str()),
        (409, "webhook_endpoint_limit_reached"),
        "{over:?}"
    );
    assert_eq!(over.json()["error"]["limit"], 16);
    // Another client is not affected.
    endpoint(&api, KEY_TWO, "http://127.0.0.1:9/two", json!(["*"])).await;
    assert_eq!(api.delete(&path, Some(KEY_ONE)).await.status, 200);
    endpoint(&api, KEY_ONE, "http://127.0.0.1:9/17", json!(["*"])).await;
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM destinations WHERE client = 'shop' AND removed_at IS NULL",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(live, 16);
}

/// Sixteen creates at once for one client that has 10: exactly 6 succeed, the others are 409 — the bound is
/// decided by the database, not by a count read first.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_never_pass_the_bound() {
    let api = Api::spawn_with(&api_section(true)).await;
    for i in 0..10 {
        endpoint(
            &api,
            KEY_ONE,
            &format!("http://127.0.0.1:9/{i}"),
            json!(["*"]),
        )
        .await;
    }
    let answers = futures::future::join_all((0..16).map(|i| {
        create(
            &api,
            KEY_ONE,
            json!({"url": format!("http://127.0.0.1:9/race{i}"), "enabled_events": ["*"]}),
        )
    }))
    .await;
    let made = answers.iter().filter(|a| a.status == 201).count();
    let refused = answers.iter().filter(|a| a.status == 409).count();
    assert_eq!((made, refused), (6, 10), "{answers:?}");
}

/// Through the whole pipeline: `shop`'s intent succeeds at the sandboxed gateway (the real dispatcher), and the
/// back office's endpoint subscribed to `payment_intent.succeeded` receives that fact, signed with its secret (the
/// reference verifier, `hookline-signature`). A back office sees every fact, whoever owns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_intent_that_succeeds_reaches_its_clients_and_the_back_offices_endpoints_only() {
    let gw = crate::merchant_api::Gatewayed::start_with(&api_section(true)).await;
    let api = &gw.api;
    let hooks = Hooks::start(None);
    let delivery = start_delivery(api, "", None);
    let (_, secret) = endpoint(
        api,
        KEY_BACK,
        &format!("{}/hooks/back", hooks.base),
        json!(["payment_intent.succeeded"]),
    )
    .await;
    // The intent's own client's endpoint gets it too (the fact names its owner); another client's never does.
    let (_, shop_secret) = endpoint(
        api,
        KEY_ONE,
        &format!("{}/hooks/shop", hooks.base),
        json!(["*"]),
    )
    .await;
    let (other, _) = endpoint(
        api,
        KEY_TWO,
        &format!("{}/hooks/other", hooks.base),
        json!(["*"]),
    )
    .await;
    let created = api
        .create("we-intent-1", &crate::merchant_api::order(2000))
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let intent = created.json()["id"].as_str().unwrap().to_owned();
    let mine = hooks.wait("/hooks/shop", 1).await;
    let body: Value = serde_json::from_str(&mine[0].body).unwrap();
    assert_eq!(body["data"]["intent_id"], intent.as_str(), "{body}");
    assert!(!shop_secret.is_empty());
    // The fan-out decided in the fact's own statement: no delivery row was ever made for the other client.
    let others: i64 =
        sqlx::query_scalar("SELECT count(*) FROM domain_deliveries WHERE destination = $1")
            .bind(&other)
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(others, 0, "another client's endpoint got shop's fact");
    let got = hooks.wait("/hooks/back", 1).await;
    let body: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(body["type"], "payment_intent.succeeded", "{body}");
    assert_eq!(body["data"]["intent_id"], intent.as_str(), "{body}");
    let headers: Vec<(&str, &[u8])> = got[0]
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_bytes()))
        .collect();
    let verified = hookline_signature::Verifier {
        scheme: hookline_signature::Scheme::StandardWebhooks,
        secrets: &[secret.as_bytes()],
        tolerance_secs: None,
        now_unix: hookline_tests::now(),
    }
    .verify(&hookline_signature::Request {
        headers: &headers,
        query: "",
        body: got[0].body.as_bytes(),
    });
    assert!(verified.is_ok(), "{verified:?}");
    stop_delivery(delivery).await;
    hooks.stop().await;
    gw.stop().await;
}

/// The operator sees the merchants' endpoints in `hookline destinations status` (with their client), but one its
/// merchant disabled does not make the operator's check fail; an operator's own disabled destination still does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_merchant_endpoints_without_failing_its_check() {
    let api = Api::spawn_with(&api_section(true)).await;
    let (id, _) = endpoint(&api, KEY_ONE, "http://127.0.0.1:9/hooks", json!(["*"])).await;
    let off = api
        .post(
            &format!("/v1/webhook_endpoints/{id}"),
            Some(KEY_ONE),
            None,
            r#"{"disabled": true}"#,
        )
        .await;
    assert_eq!(off.json()["status"], "disabled", "{off:?}");
    let dir = std::env::temp_dir().join(format!("hookline-we-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hookline.toml");
    std::fs::write(&path, test_config_toml(&api.db.url, "", "")).unwrap();
    let status = || {
        hookline_tests::output_within(
            WAIT,
            std::process::Command::new(hookline_tests::binary("hookline"))
                .arg("--config")
                .arg(&path)
                .args(["destinations", "status", "--json"]),
        )
    };
    let out = status();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let row = v["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == id.as_str())
        .cloned()
        .expect("the endpoint is listed");
    assert_eq!(row["client"], "shop");
    assert_eq!(row["state"], "disabled");
    assert_eq!(row["needs_attention"], false);

    hookline_delivery::destinations::sync(
        &api.db.pool,
        &[hookline_delivery::destinations::Declared {
            name: "erp",
            url: "http://127.0.0.1:9/erp",
            events: &["*".to_owned()],
        }],
    )
    .await
    .unwrap();
    hookline_delivery::destinations::set_disabled(&api.db.pool, "erp", Some("maintenance"))
        .await
        .unwrap();
    assert_eq!(
        status().status.code(),
        Some(1),
        "the operator's own destination counts"
    );
    // The sync left the API endpoint alone.
    let still: bool =
        sqlx::query_scalar("SELECT removed_at IS NULL FROM destinations WHERE name = $1")
            .bind(&id)
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert!(still, "sync touches only the operator's rows");
    let _ = std::fs::remove_dir_all(&dir);
}
