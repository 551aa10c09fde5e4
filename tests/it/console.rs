//! The operator console (`hookline console serve`, its own process): in a real browser (headless Chromium
//! driven over WebDriver) and at the HTTP level (authentication, CSRF, escaping of hostile stored data, keyset
//! pagination).
//!
//! The browser test needs Debian's `chromium` and `chromium-driver` packages (`deploy/test.sh` installs them);
//! set `HOOKLINE_CHROMEDRIVER` / `HOOKLINE_CHROMIUM` to use other paths. Screenshots of the main views are
//! saved under `target/console-screenshots/`.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hookline_core::events::OwnedEvent;
use hookline_tests::console::{console_edge, console_toml, hash_password, ConsoleHttp, PASSWORD};
use hookline_tests::*;

const DRAIN: Duration = Duration::from_secs(60);

fn event(provider: &str, id: &str, body: &str, headers: Vec<(String, String)>) -> OwnedEvent {
    OwnedEvent {
        provider: provider.into(),
        provider_event_id: id.into(),
        event_type: Some("payment_intent.succeeded".into()),
        signed_at: None,
        headers,
        query: String::new(),
        body: body.as_bytes().to_vec().into(),
        traceparent: None,
    }
}

async fn scalar(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.expect(sql)
}

#[tokio::test]
async fn login_is_required_and_wrong_passwords_and_missing_csrf_tokens_are_refused() {
    let edge = console_edge().await;
    let console = edge.console.clone().expect("the console listens");
    let mut http = ConsoleHttp::new(&console);

    // Nothing without a session; and the providers' listener never serves the console.
    let res = http.get("/").await;
    assert_eq!((res.status, res.location()), (303, Some("/login")));
    let res = http.get("/events").await;
    assert_eq!((res.status, res.location()), (303, Some("/login")));
    let providers = edge
        .client
        .get(format!("{}/login", edge.base))
        .send()
        .await
        .expect("edge answers");
    assert_eq!(providers.status().as_u16(), 404);

    let form = http.get("/login").await;
    assert_eq!(form.status, 200);
    assert!(form.text.contains("id=\"login\""));
    assert!(form
        .headers
        .get("content-security-policy")
        .is_some_and(|v| v.to_str().unwrap_or("").contains("script-src 'self'")));
    let token = form.csrf();

    // A wrong password: 401, no session.
    let res = http
        .post(
            "/login",
            &[
                ("csrf", &token),
                ("name", "alice"),
                ("password", "not the password"),
            ],
        )
        .await;
    assert_eq!(res.status, 401);
    assert!(res.text.contains("Wrong name or password"));
    assert!(!http.has_cookie(hookline_console::SESSION_COOKIE));
    // An unknown name: the same answer.
    let token = res.csrf();
    let res = http
        .post(
            "/login",
            &[
                ("csrf", &token),
                ("name", "mallory"),
                ("password", PASSWORD),
            ],
        )
        .await;
    assert_eq!(res.status, 401);
    // The right password without the login form's token: refused.
    let res = http
        .post("/login", &[("name", "alice"), ("password", PASSWORD)])
        .await;
    assert_eq!(res.status, 403);
    assert!(!http.has_cookie(hookline_console::SESSION_COOKIE));

    // The right password: a session cookie that scripts cannot read and other sites cannot send.
    let token = http.get("/login").await.csrf();
    let res = http
        .post(
            "/login",
            &[("csrf", &token), ("name", "alice"), ("password", PASSWORD)],
        )
        .await;
    assert_eq!((res.status, res.location()), (303, Some("/")));
    let session_cookie = res
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with(hookline_console::SESSION_COOKIE))
        .expect("a session cookie");
    assert!(session_cookie.contains("HttpOnly"), "{session_cookie}");
    assert!(
        session_cookie.contains("SameSite=Strict"),
        "{session_cookie}"
    );
    assert!(session_cookie.contains("Max-Age="), "{session_cookie}");
    let overview = http.get("/").await;
    assert_eq!(overview.status, 200);
    assert!(overview.text.contains("id=\"overview\""));
    let csrf = overview.csrf();

    // Actions without the session's CSRF token, or with another one, change nothing.
    let stored = hookline_core::events::insert_one(
        &edge.db.pool,
        &event("stripe", "evt_csrf_1", r#"{"id":"evt_csrf_1"}"#, vec![]),
    )
    .await
    .expect("store an event");
    let hookline_core::events::StoreOutcome::Inserted(id) = stored else {
        panic!("not inserted: {stored:?}");
    };
    let path = format!("/events/{id}/replay");
    let res = http.post(&path, &[("reason", "no token")]).await;
    assert_eq!(res.status, 403);
    let res = http
        .post(
            &path,
            &[("reason", "forged token"), ("csrf", &"0".repeat(64))],
        )
        .await;
    assert_eq!(res.status, 403);
    let res = http
        .post("/replay", &[("reason", "no token"), ("selection", "all")])
        .await;
    assert_eq!(res.status, 403);
    let res = http
        .post(
            "/dead-letters/redrive",
            &[("reason", "no token"), ("all", "1")],
        )
        .await;
    assert_eq!(res.status, 403);
    // With the token but no reason: refused too.
    let res = http.post(&path, &[("csrf", &csrf), ("reason", "  ")]).await;
    assert_eq!(res.status, 400);
    assert_eq!(
        scalar(&edge.db.pool, "SELECT count(*) FROM replay_runs").await,
        0
    );

    // The dry run of a set replay counts and changes nothing.
    let res = http
        .post(
            "/replay",
            &[
                ("csrf", &csrf),
                ("reason", "count only"),
                ("selection", "all"),
                ("provider", "stripe"),
            ],
        )
        .await;
    assert_eq!(res.status, 200, "{}", res.text);
    assert!(res.text.contains("data-count=\"1\""), "{}", res.text);
    assert_eq!(
        scalar(&edge.db.pool, "SELECT count(*) FROM replay_runs").await,
        0
    );

    // Logging out ends the session.
    let res = http.post("/logout", &[("csrf", &csrf)]).await;
    assert_eq!(res.status, 303);
    let res = http.get("/").await;
    assert_eq!((res.status, res.location()), (303, Some("/login")));

    // Failed logins are limited: after 5 failures from this address even the right password waits.
    for _ in 0..5 {
        let token = http.get("/login").await.csrf();
        let res = http
            .post(
                "/login",
                &[("csrf", &token), ("name", "alice"), ("password", "guess")],
            )
            .await;
        assert!(matches!(res.status, 401 | 429), "{}", res.status);
    }
    let token = http.get("/login").await.csrf();
    let res = http
        .post(
            "/login",
            &[("csrf", &token), ("name", "alice"), ("password", PASSWORD)],
        )
        .await;
    assert_eq!(res.status, 429);
}

#[tokio::test]
async fn hostile_ids_bodies_headers_and_reasons_render_escaped() {
    let edge = console_edge().await;
    let console = edge.console.clone().expect("the console listens");
    let pool = &edge.db.pool;
    let script = "<script>alert('id')</script>";
    let img = "<img src=x onerror=alert(1)>";
    let body = format!(r#"{{"id":"x","note":"{img}"}}"#);
    let outcome = hookline_core::events::insert_one(
        pool,
        &event(
            "stripe",
            script,
            &body,
            vec![("x-note".into(), "\"><svg onload=alert(2)>".into())],
        ),
    )
    .await
    .expect("store");
    let hookline_core::events::StoreOutcome::Inserted(id) = outcome else {
        panic!("not inserted: {outcome:?}");
    };
    hookline_core::dead_letters::record(
        pool,
        hookline_core::dead_letters::Source::Worker,
        "payments",
        id,
        "boom <b onmouseover=alert(3)>",
    )
    .await
    .expect("dead letter");
    hookline_core::audit::insert_run(
        pool,
        "replay",
        "alice",
        "<iframe src=javascript:alert(4)>",
        &hookline_core::events::Selection {
            state: "all".into(),
            ..Default::default()
        },
        1,
    )
    .await
    .expect("audit row");

    let mut http = ConsoleHttp::new(&console);
    http.login().await;
    for path in [
        "/events".to_string(),
        format!("/events?q={}", urlencode(script)),
        format!("/events/{id}"),
        "/dead-letters".into(),
        "/audit".into(),
    ] {
        let page = http.get(&path).await;
        assert_eq!(page.status, 200, "{path}");
        for raw in [
            "<script>alert",
            "<img src=x",
            "<svg onload",
            "<b onmouseover",
            "<iframe",
        ] {
            assert!(!page.text.contains(raw), "{path} renders {raw} unescaped");
        }
        assert!(
            page.text.contains("&lt;"),
            "{path} shows the hostile text, escaped"
        );
    }
    let detail = http.get(&format!("/events/{id}")).await;
    assert!(
        detail
            .text
            .contains("&lt;script&gt;alert('id')&lt;/script&gt;")
            || detail
                .text
                .contains("&lt;script&gt;alert(&#39;id&#39;)&lt;/script&gt;"),
        "{}",
        detail.text
    );
    // The raw download is the exact bytes, never rendered as a page.
    let raw = http.get(&format!("/events/{id}/body")).await;
    assert_eq!(raw.text, body);
    assert_eq!(
        raw.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/octet-stream")
    );
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The ids of the event rows of a list page, in order.
fn row_ids(html: &str) -> Vec<i64> {
    html.split("class=\"event-row\" data-id=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next()?.parse().ok())
        .collect()
}

/// The "older" link of a list page.
fn older_link(html: &str) -> Option<String> {
    let marker = "id=\"events-older\" href=\"";
    let start = html.find(marker)? + marker.len();
    let end = html[start..].find('"')?;
    Some(html[start..start + end].replace("&amp;", "&"))
}

/// The ids of the stored events matching `condition` (SQL written by the test), newest first: what the list must show.
async fn ids_newest_first(pool: &sqlx::PgPool, condition: &str) -> Vec<i64> {
    sqlx::query_scalar(&format!(
        "SELECT id FROM webhook_events WHERE {condition} ORDER BY id DESC"
    ))
    .fetch_all(pool)
    .await
    .expect("ids")
}

#[tokio::test]
async fn the_event_list_pages_by_keyset_without_gaps_or_repeats_under_filters() {
    let edge = console_edge().await;
    let console = edge.console.clone().expect("the console listens");
    let pool = &edge.db.pool;
    let mut events: Vec<OwnedEvent> = (0..130)
        .map(|i| {
            let provider = if i % 13 == 0 { "github" } else { "stripe" };
            event(provider, &format!("evt_page_{i:03}"), "{}", vec![])
        })
        .collect();
    // One provider event id under two providers: the search asks the UNIQUE key once per provider present.
    events.push(event("github", "evt_page_shared", "{}", vec![]));
    events.push(event("stripe", "evt_page_shared", "{}", vec![]));
    hookline_core::events::insert_events_batch(pool, &events)
        .await
        .expect("store");
    let mut http = ConsoleHttp::new(&console);
    http.login().await;

    async fn walk(http: &mut ConsoleHttp, first: &str) -> Vec<i64> {
        let mut ids = Vec::new();
        let mut next = Some(first.to_string());
        let mut pages = 0;
        while let Some(path) = next {
            let page = http.get(&path).await;
            assert_eq!(page.status, 200, "{path}: {}", page.text);
            let rows = row_ids(&page.text);
            assert!(rows.len() <= 50, "at most a page of rows");
            ids.extend(rows);
            next = older_link(&page.text);
            pages += 1;
            assert!(pages < 20, "pagination does not end");
        }
        ids
    }

    let all = ids_newest_first(pool, "true").await;
    assert_eq!(
        walk(&mut http, "/events").await,
        all,
        "every event once, newest first"
    );

    let github = ids_newest_first(pool, "provider = 'github'").await;
    assert_eq!(github.len(), 11);
    assert_eq!(walk(&mut http, "/events?provider=github").await, github);
    assert_eq!(
        walk(&mut http, "/events?state=unprocessed").await,
        all,
        "nothing is processed yet"
    );
    assert!(walk(&mut http, "/events?state=applied").await.is_empty());
    let one = walk(&mut http, "/events?q=evt_page_042").await;
    assert_eq!(one.len(), 1);
    assert_eq!(walk(&mut http, &format!("/events?q={}", one[0])).await, one);
    // The first provider in the key's order (stripe's was above), and an id both have.
    let found = walk(&mut http, "/events?q=evt_page_039").await;
    assert_eq!(found.len(), 1, "a github event by its provider id");
    let shared = ids_newest_first(pool, "provider_event_id = 'evt_page_shared'").await;
    assert_eq!(shared.len(), 2);
    assert_eq!(walk(&mut http, "/events?q=evt_page_shared").await, shared);
    assert!(walk(&mut http, "/events?q=evt_page_nowhere")
        .await
        .is_empty());
    // A bad state is refused, not ignored.
    assert_eq!(http.get("/events?state=nonsense").await.status, 400);
}

/// A chromedriver process (killed by its pid when dropped) and a WebDriver session on headless Chromium.
pub(crate) struct Browser {
    pub(crate) client: Client,
    driver: std::process::Child,
    _profile: PathBuf,
}

impl Drop for Browser {
    /// Kills chromedriver's whole process group (its own, made at spawn): Chromium and its helpers included, so
    /// a failed test leaves no browser behind (killing the driver alone orphans the browser).
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        std::process::Command::new("kill")
            .args(["-KILL", "--", &group])
            .status()
            .ok();
        self.driver.kill().ok();
        self.driver.wait().ok();
        std::fs::remove_dir_all(&self._profile).ok();
    }
}

impl Browser {
    pub(crate) async fn start() -> Browser {
        let chromium =
            std::env::var("HOOKLINE_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let chromedriver = std::env::var("HOOKLINE_CHROMEDRIVER")
            .unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        assert!(
            std::path::Path::new(&chromedriver).exists() && std::path::Path::new(&chromium).exists(),
            "{chromedriver} or {chromium} is missing: install Debian's chromium and chromium-driver (deploy/test.sh does)"
        );
        let port = free_port();
        let driver = std::process::Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            // Its own process group, which Chromium joins: Drop kills them all at once.
            .process_group(0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        wait_until(Duration::from_secs(20), "chromedriver listening", || {
            let status = format!("{url}/status");
            async move {
                reqwest::get(&status)
                    .await
                    .is_ok_and(|r| r.status().is_success())
            }
        })
        .await;
        let profile =
            std::env::temp_dir().join(format!("hookline-chromium-{}", uuid::Uuid::new_v4()));
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": chromium,
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            }),
        );
        // Plain HTTP: the driver is on loopback.
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&url)
            .await
            .expect("a WebDriver session on headless Chromium");
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    pub(crate) async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("target")
            .join("console-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot directory");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
    }

    pub(crate) async fn fill(&self, id: &str, text: &str) {
        let field = self
            .client
            .wait()
            .for_element(Locator::Id(id))
            .await
            .unwrap_or_else(|e| panic!("#{id}: {e}"));
        field.clear().await.ok();
        field.send_keys(text).await.expect("type");
    }

    pub(crate) async fn click(&self, css: &str) {
        self.client
            .wait()
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    pub(crate) async fn text_of(&self, id: &str) -> String {
        self.client
            .wait()
            .for_element(Locator::Id(id))
            .await
            .unwrap_or_else(|e| panic!("#{id}: {e}"))
            .text()
            .await
            .expect("text")
    }

    pub(crate) async fn path(&self) -> String {
        self.client
            .current_url()
            .await
            .expect("url")
            .path()
            .to_string()
    }
}

/// Ledger balance by account: a replay must not move any of them.
async fn account_sums(pool: &sqlx::PgPool) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT account, sum(amount)::bigint FROM ledger_entries GROUP BY account ORDER BY account",
    )
    .fetch_all(pool)
    .await
    .expect("sums")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_a_browser_an_operator_finds_an_event_replays_it_and_sees_the_audit_row() {
    let hash = hash_password(PASSWORD).await;
    let p = TestPipeline::start_with(&console_toml(&hash)).await;
    let pool = p.pool().clone();
    let console = p.edge.console.clone().expect("the console listens");
    let worker = p.spawn_worker();
    let body = stripe::envelope(
        "evt_console_browser",
        "payment_intent.succeeded",
        now(),
        stripe::payment_intent_object("pi_console_browser", "succeeded", 12_345),
    )
    .to_string();
    assert_eq!(p.edge.post_stripe(body.as_bytes()).await.status(), 200);
    wait_for_count(
        &pool,
        DRAIN,
        "the event applied",
        "SELECT count(*) FROM processed_events WHERE outcome = 'applied'",
        1,
    )
    .await;
    let ledger_before = ledger_checksum(&pool).await;
    let sums_before = account_sums(&pool).await;
    assert!(!sums_before.is_empty(), "the payment was posted");
    let event_id: i64 = sqlx::query_scalar("SELECT id FROM webhook_events")
        .fetch_one(&pool)
        .await
        .expect("event id");

    let b = Browser::start().await;
    // A wrong password is refused: still the login form, no console.
    b.client
        .goto(&format!("{console}/"))
        .await
        .expect("open the console");
    assert_eq!(b.path().await, "/login");
    b.fill("login-name", "alice").await;
    b.fill("login-password", "not the password").await;
    b.click("#login-submit").await;
    // Waits for the refusal itself: the form is on the page before the answer arrives too (waiting for it raced
    // the POST's answer under load).
    b.client
        .wait()
        .for_element(Locator::Css("p.bad"))
        .await
        .expect("the refusal");
    b.client
        .wait()
        .for_element(Locator::Id("login"))
        .await
        .expect("the login form again");
    assert!(b
        .client
        .source()
        .await
        .expect("source")
        .contains("Wrong name or password"));
    assert_eq!(b.path().await, "/login");
    b.screenshot("login-refused").await;

    // The right one opens the overview, with the figures of `hookline status`.
    b.fill("login-name", "alice").await;
    b.fill("login-password", PASSWORD).await;
    b.click("#login-submit").await;
    b.client
        .wait()
        .for_element(Locator::Id("overview"))
        .await
        .expect("the overview");
    let figures = b.text_of("providers").await;
    assert!(figures.contains("stripe"), "{figures}");
    b.screenshot("overview").await;

    // Find the event by its provider id, open it.
    b.client
        .goto(&format!("{console}/events"))
        .await
        .expect("events");
    b.fill("event-search", "evt_console_browser").await;
    b.click("#event-filter-submit").await;
    b.client
        .wait()
        .for_element(Locator::Css("#events a.event-link"))
        .await
        .expect("a row");
    b.screenshot("events").await;
    b.click("#events a.event-link").await;
    let detail = b.text_of("event-detail").await;
    assert!(detail.contains("evt_console_browser"), "{detail}");
    assert!(detail.contains("pi_console_browser"), "{detail}");
    let signature = b.text_of("signature-at-receipt").await;
    assert!(signature.starts_with("valid"), "{signature}");
    assert_eq!(b.path().await, format!("/events/{event_id}"));
    b.screenshot("event-detail").await;

    // Replay it with a reason; the audit log shows the row.
    let reason = "INC-7: console replay of an applied event";
    b.fill("replay-reason", reason).await;
    b.click("#replay-submit").await;
    let audit = b.text_of("audit").await;
    assert!(audit.contains(reason), "{audit}");
    assert!(audit.contains("console:alice"), "{audit}");
    b.screenshot("audit").await;
    b.client
        .goto(&format!("{console}/payments"))
        .await
        .expect("payments");
    b.client
        .wait()
        .for_element(Locator::Id("balances"))
        .await
        .expect("balances");
    b.screenshot("payments").await;
    // End the session (Chromium exits); Drop then kills whatever is left of the driver's group.
    b.client.clone().close().await.ok();

    // Recorded in the same audit table as the CLI, re-delivered once, finished.
    let (kind, operator, published, finished): (String, String, i64, bool) = sqlx::query_as(
        "SELECT kind, operator, published, finished_at IS NOT NULL FROM replay_runs WHERE reason = $1",
    )
    .bind(reason)
    .fetch_one(&pool)
    .await
    .expect("the audit row");
    assert_eq!(
        (kind.as_str(), operator.as_str(), published, finished),
        ("replay", "console:alice", 1, true)
    );
    // A filtered set, through the dry run and its confirmation: audited, run in the background to the end.
    let mut http = ConsoleHttp::new(&console);
    let csrf = http.login().await;
    let set_reason = "INC-7: replay every stripe event";
    let form = [
        ("csrf", csrf.as_str()),
        ("reason", set_reason),
        ("selection", "all"),
        ("provider", "stripe"),
    ];
    let dry = http.post("/replay", &form).await;
    assert_eq!(dry.status, 200, "{}", dry.text);
    assert!(dry.text.contains("data-count=\"1\""), "{}", dry.text);
    // The confirmation carries what the dry run counted (the selection and the count).
    let marker = "name=\"confirmation\" value=\"";
    let start = dry.text.find(marker).expect("a confirmation field") + marker.len();
    let end = dry.text[start..]
        .find('"')
        .expect("end of the confirmation");
    let token = dry.text[start..start + end].to_string();
    let confirmed = [
        ("csrf", csrf.as_str()),
        ("reason", set_reason),
        ("confirmation", token.as_str()),
    ];
    let res = http.post("/replay", &confirmed).await;
    assert_eq!(res.status, 303, "{}", res.text);
    wait_for_count(
        &pool,
        DRAIN,
        "the set replay finished",
        "SELECT count(*) FROM replay_runs WHERE reason = 'INC-7: replay every stripe event'
           AND operator = 'console:alice' AND selected = 1 AND published = 1 AND finished_at IS NOT NULL",
        1,
    )
    .await;
    // The worker consumes the re-delivered messages, and the applied effect is not applied again.
    let payments_queue = p.topology().payments_queue;
    wait_until(DRAIN, "the replayed message consumed", || {
        let p = &p;
        let q = payments_queue.clone();
        async move { p.try_queue_depth(&q).await == Some(0) }
    })
    .await;
    worker.stop().await;
    assert_eq!(p.try_queue_depth(&payments_queue).await, Some(0));
    assert_eq!(
        ledger_checksum(&pool).await,
        ledger_before,
        "no ledger row added or changed"
    );
    assert_eq!(account_sums(&pool).await, sums_before, "no balance moved");
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM processed_events").await,
        1,
        "one marker: the replay was deduplicated"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_letter_is_redriven_from_the_console_with_the_cli_engine_and_audited() {
    let hash = hash_password(PASSWORD).await;
    let p = TestPipeline::start_with(&console_toml(&hash)).await;
    let pool = p.pool().clone();
    let console = p.edge.console.clone().expect("the console listens");
    let worker = p.spawn_worker();
    let bad = stripe::payment_intent("evt_console_bad", "succeeded", "pi_console_bad", -500);
    assert_eq!(p.edge.deliver_stripe(&bad).await, 200);
    wait_for_count(
        &pool,
        DRAIN,
        "the dead letter",
        "SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL AND attempts = 1",
        1,
    )
    .await;
    let event_id: i64 = sqlx::query_scalar("SELECT event_id FROM dead_letters")
        .fetch_one(&pool)
        .await
        .expect("event id");

    let mut http = ConsoleHttp::new(&console);
    let csrf = http.login().await;
    let page = http.get("/dead-letters").await;
    assert_eq!(page.status, 200);
    assert!(page.text.contains("id=\"dead-letters\""));
    assert!(
        page.text.contains(&format!("value=\"{event_id}\"")),
        "{}",
        page.text
    );
    assert!(
        page.text.contains("amount"),
        "the reason is shown: {}",
        page.text
    );
    // Nothing chosen: refused, nothing audited.
    let res = http
        .post(
            "/dead-letters/redrive",
            &[("csrf", &csrf), ("reason", "nothing")],
        )
        .await;
    assert_eq!(res.status, 400);
    let id = event_id.to_string();
    let res = http
        .post(
            "/dead-letters/redrive",
            &[("csrf", &csrf), ("reason", "INC-9: redrive"), ("id", &id)],
        )
        .await;
    assert_eq!(res.status, 303, "{}", res.text);
    // Audited as the CLI's redrive, re-delivered once; the worker processed it again (it still fails: the
    // cause is not fixed) and never applied it.
    wait_for_count(
        &pool,
        DRAIN,
        "the redrive run finished",
        "SELECT count(*) FROM replay_runs WHERE kind = 'dlq_redrive' AND operator = 'console:alice'
           AND reason = 'INC-9: redrive' AND selected = 1 AND published = 1 AND finished_at IS NOT NULL",
        1,
    )
    .await;
    wait_for_count(
        &pool,
        DRAIN,
        "the redriven event failed again",
        "SELECT count(*) FROM dead_letters WHERE resolved_at IS NULL AND attempts = 2",
        1,
    )
    .await;
    worker.stop().await;
    assert_eq!(assert_ledger_balanced(&pool).await, 0, "nothing was posted");
    assert_eq!(
        scalar(&pool, "SELECT count(*) FROM processed_events").await,
        0
    );
    let audit = http.get("/audit").await;
    assert!(audit.text.contains("INC-9: redrive") && audit.text.contains("dlq_redrive"));
}

#[tokio::test]
async fn a_replay_that_cannot_reach_rabbitmq_is_recorded_resumable_and_says_so() {
    let hash = hash_password(PASSWORD).await;
    let db = TestDb::new().await;
    // Nothing listens on port 1: the publisher cannot connect.
    let toml = test_config_toml(
        &db.url,
        "",
        &format!("[relay]\nembedded = false\n{}", console_toml(&hash)),
    )
    .replacen(
        "[amqp]",
        "amqp_url = \"amqp://guest:guest@127.0.0.1:1/%2f\"\n[amqp]",
        1,
    );
    let edge = TestEdge::spawn_on(db, parse_config(&toml)).await;
    let console = edge.console.clone().expect("the console listens");
    let stored = hookline_core::events::insert_one(
        &edge.db.pool,
        &event(
            "stripe",
            "evt_no_broker",
            r#"{"id":"evt_no_broker"}"#,
            vec![],
        ),
    )
    .await
    .expect("store");
    let hookline_core::events::StoreOutcome::Inserted(id) = stored else {
        panic!("not inserted: {stored:?}");
    };
    let mut http = ConsoleHttp::new(&console);
    let csrf = http.login().await;
    let res = http
        .post(
            &format!("/events/{id}/replay"),
            &[("csrf", &csrf), ("reason", "broker down")],
        )
        .await;
    assert_eq!(res.status, 503, "{}", res.text);
    let (run, finished): (i64, bool) = sqlx::query_as(
        "SELECT id, finished_at IS NOT NULL FROM replay_runs WHERE reason = 'broker down'",
    )
    .fetch_one(&edge.db.pool)
    .await
    .expect("the run is recorded");
    assert!(!finished, "not finished: resumable");
    assert!(
        res.text
            .contains(&format!("hookline replay --resume {run}")),
        "{}",
        res.text
    );
    assert!(!res.text.contains("guest:guest"), "no URL in the page");
}

#[tokio::test]
async fn deliveries_show_each_destination_and_redeliver_through_the_cli_code_path() {
    let hash = hash_password(PASSWORD).await;
    let db = TestDb::new().await;
    let toml = test_config_toml(
        &db.url,
        "",
        &format!(
            "[relay]\nembedded = false\n{}\n[[destinations]]\nname = \"erp\"\nurl = \"http://127.0.0.1:9/<script>\"\n\
             secrets = [\"{}\"]\nevents = [\"*\"]\n",
            console_toml(&hash),
            hookline_tests::secrets::STANDARD
        ),
    );
    let config = parse_config(&toml);
    let pool = db.pool.clone();
    hookline_delivery::deliver::sync_destinations(&pool, &hookline_tests::destinations(&config))
        .await
        .expect("sync");
    // A fact, delivered once and dead once: what an operator redelivers.
    let mut tx = pool.begin().await.unwrap();
    let (fact, _) = hookline_core::domain_events::record(
        &mut tx,
        hookline_core::domain_events::EventType::PaymentSucceeded,
        "stripe/pi_console",
        &serde_json::json!({"amount": 1}),
        hookline_core::domain_events::Owner::Nobody,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    sqlx::query("UPDATE domain_deliveries SET status = 'dead', dead_reason = 'window'")
        .execute(&pool)
        .await
        .unwrap();
    let edge = TestEdge::spawn_on(db, config).await;
    let console = edge.console.clone().expect("the console listens");
    let mut http = ConsoleHttp::new(&console);
    let csrf = http.login().await;
    let page = http.get("/deliveries").await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("id=\"destinations\""), "{}", page.text);
    assert!(page.text.contains("erp"));
    assert!(!page.text.contains("<script>"), "the URL is escaped");
    // Without CSRF: refused; with it and a reason: queued and audited as the CLI's redelivery.
    let refused = http
        .post(
            "/deliveries/redeliver",
            &[("destination", "erp"), ("reason", "x")],
        )
        .await;
    assert_eq!(refused.status, 403);
    let done = http
        .post(
            "/deliveries/redeliver",
            &[
                ("csrf", &csrf),
                ("destination", "erp"),
                ("id", &fact),
                ("reason", "ERP restored"),
            ],
        )
        .await;
    assert!(
        done.status == 303 || done.status == 200,
        "{} {}",
        done.status,
        done.text
    );
    let status: String = sqlx::query_scalar("SELECT status FROM domain_deliveries")
        .fetch_one(&edge.db.pool)
        .await
        .unwrap();
    assert_eq!(status, "pending");
    let (operator, published): (String, i64) = sqlx::query_as(
        "SELECT operator, published FROM replay_runs WHERE kind = 'domain_redeliver' AND reason = 'ERP restored'",
    )
    .fetch_one(&edge.db.pool)
    .await
    .unwrap();
    assert_eq!((operator.as_str(), published), ("console:alice", 1));
}

/// Sends SIGTERM to `pid` (the `kill` command: the tests link no signal crate).
fn sigterm(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {pid} failed");
}

/// Waits (up to `timeout`) for a child to exit; panics if it is still running.
async fn exit_status(
    child: &mut std::process::Child,
    timeout: Duration,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the child (pid {}) is still running {timeout:?} after SIGTERM",
            child.id()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The console is its own process: the real `hookline-edge`, configured WITH `[console]`, opens no console
/// listener (the configured port refuses connections) and still acknowledges webhooks (row stored).
#[tokio::test]
async fn the_edge_does_not_serve_the_console_even_when_configured_and_acks_webhooks() {
    let hash = hash_password(PASSWORD).await;
    let db = TestDb::new().await;
    let (edge_port, console_port) = (free_port(), free_port());
    let toml = test_config_toml(
        &db.url,
        "",
        &format!(
            "[relay]\nembedded = false\n[console]\nlisten = \"127.0.0.1:{console_port}\"\n\
             [[console.operators]]\nname = \"alice\"\npassword_hash = \"{hash}\"\n"
        ),
    )
    .replace(
        "listen = \"127.0.0.1:0\"",
        &format!("listen = \"127.0.0.1:{edge_port}\""),
    );
    let file = std::env::temp_dir().join(format!(
        "hookline-test-edge-{}.toml",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::write(&file, &toml).expect("write the config file");
    let path = file.to_str().expect("UTF-8 path").to_string();
    let _edge = Child::spawn("hookline-edge", &["--config", &path], &[]);
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{edge_port}");
    wait_until(Duration::from_secs(20), "the edge answers /healthz", || {
        let (client, url) = (client.clone(), format!("{base}/healthz"));
        async move {
            client
                .get(url)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        }
    })
    .await;

    // The edge is up and listening: the console's port is not, now or a moment later.
    for _ in 0..2 {
        let refused = tokio::net::TcpStream::connect(("127.0.0.1", console_port)).await;
        assert!(
            refused.is_err(),
            "something listens on the console port {console_port}: the edge must not serve the console"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let body = stripe_event("evt_edge_no_console", "pi_edge_no_console", 1_000);
    let mut req = client
        .post(format!("{base}/webhooks/stripe"))
        .body(body.clone());
    for (k, v) in stripe_headers(secrets::STRIPE, now(), &body) {
        req = req.header(k, v);
    }
    let status = req.send().await.expect("the edge answers").status();
    assert_eq!(status.as_u16(), 200);
    assert_eq!(db.event_count().await, 1);
    std::fs::remove_file(&file).ok();
}

/// `hookline console serve` starts on its own, answers `/healthz` with what the database says and the login
/// page, and stops on SIGTERM with exit 0. Without `[console]` it refuses to start (exit 2).
#[tokio::test]
async fn hookline_console_serve_answers_healthz_and_the_login_page_and_stops_on_sigterm() {
    let hash = hash_password(PASSWORD).await;
    let db = TestDb::new().await;
    let toml = test_config_toml(
        &db.url,
        "",
        &format!("[relay]\nembedded = false\n{}", console_toml(&hash)),
    );
    // The edge is not running: the console does not need it (only the overview's ack figures come from it).
    let mut console = ConsoleProcess::start(&toml, 9).await;
    let health = reqwest::get(format!("{}/healthz", console.base))
        .await
        .expect("GET /healthz");
    assert_eq!(health.status().as_u16(), 200);
    let body: serde_json::Value = health.json().await.expect("JSON health");
    assert_eq!(
        (body["status"].as_str(), body["database"].as_str()),
        (Some("ok"), Some("ok")),
        "{body}"
    );
    let login = reqwest::get(format!("{}/login", console.base))
        .await
        .expect("GET /login");
    assert_eq!(login.status().as_u16(), 200);
    let page = login.text().await.expect("login page");
    assert!(page.contains("id=\"login\""), "{page}");

    sigterm(console.child.0.id());
    let status = exit_status(&mut console.child.0, Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(0), "graceful stop: {status}");

    let no_console = std::env::temp_dir().join(format!(
        "hookline-test-no-console-{}.toml",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::write(&no_console, test_config_toml(&db.url, "", "")).expect("write config");
    let out = std::process::Command::new(binary("hookline"))
        .args([
            "--config",
            no_console.to_str().expect("UTF-8 path"),
            "console",
            "serve",
        ])
        .output()
        .expect("run hookline console serve");
    std::fs::remove_file(&no_console).ok();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
