//! The console's input handling under attack (issue 25, findings 8 and 9): every value from a path, query or
//! form goes through the console's one `Form` (checked with `hookline_core::input`), so a NUL or an over-long
//! value is a 400 (404 for an id), never a 500; every POST body is read through one bounded reader (413 past
//! 16 KiB); and a set replay's confirmation carries what the dry run counted.

use std::time::Duration;

use hookline_core::events::{OwnedEvent, StoreOutcome};
use hookline_tests::console::{
    console_edge, console_toml, hash_password, ConsoleHttp as Http, PASSWORD,
};
use hookline_tests::*;

const DRAIN: Duration = Duration::from_secs(60);

/// A POST route, the valid rest of its form, and the fields to attack.
type PostCase<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a [&'a str]);

async fn runs(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM replay_runs")
        .fetch_one(pool)
        .await
        .expect("count runs")
}

async fn store(pool: &sqlx::PgPool, id: &str, event_type: &str) -> i64 {
    let stored = hookline_core::events::insert_one(
        pool,
        &OwnedEvent {
            provider: "stripe".into(),
            provider_event_id: id.into(),
            event_type: Some(event_type.into()),
            signed_at: None,
            headers: vec![],
            query: String::new(),
            body: format!(r#"{{"id":"{id}"}}"#).into_bytes().into(),
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

/// Finding 8: every console route × field with a NUL, or an over-long value: 400 (404 for a path id), never
/// 500, and nothing recorded.
#[tokio::test]
async fn every_console_field_with_a_nul_or_an_overlong_value_is_refused_never_500() {
    let edge = console_edge().await;
    let console = edge.console.clone().expect("the console listens");
    let pool = edge.db.pool.clone();
    let event = store(&pool, "evt_input_1", "payment_intent.succeeded").await;
    let mut http = Http::new(&console);
    let csrf = http.login().await;
    let long = "x".repeat(5000);
    let filter_long = "y".repeat(201);
    let mut failures = Vec::new();

    // GET routes: each query field with a NUL, with a 5000-character value and (filters) with 201 characters.
    let gets: &[(&str, &[&str])] = &[
        (
            "/events",
            &["type", "q", "provider", "state", "since", "until", "before"],
        ),
        ("/payments", &["before"]),
        ("/intents", &["before"]),
        ("/audit", &["before", "run"]),
    ];
    for (path, fields) in gets {
        for field in *fields {
            for (what, value) in [("NUL", "a%00b".to_string()), ("long", long.clone())] {
                let res = http.get(&format!("{path}?{field}={value}")).await;
                if res.status != 400 {
                    failures.push(format!("GET {path}?{field}=<{what}>: {}", res.status));
                }
            }
        }
    }
    for field in ["type", "q", "provider"] {
        let res = http.get(&format!("/events?{field}={filter_long}")).await;
        if res.status != 400 {
            failures.push(format!("GET /events?{field}=<201 chars>: {}", res.status));
        }
    }
    // Path ids: 404, as an id that does not exist.
    for path in [
        "/events/%00",
        "/events/1%00",
        &format!("/events/{long}"),
        "/events/%00/body",
    ] {
        let res = http.get(path).await;
        if res.status != 404 {
            failures.push(format!("GET {path}: {}", res.status));
        }
    }
    let res = http
        .post(
            "/events/%00/replay",
            &[("csrf", &csrf), ("reason", "nul id")],
        )
        .await;
    if res.status != 404 {
        failures.push(format!("POST /events/%00/replay: {}", res.status));
    }

    // POST routes: each field with a NUL and with a long value, the rest of the form valid.
    let replay_one = format!("/events/{event}/replay");
    let posts: Vec<PostCase<'_>> = vec![
        (
            "/replay",
            vec![("selection", "all"), ("reason", "r")],
            &[
                "type",
                "provider",
                "since",
                "until",
                "reason",
                "selection",
                "confirmation",
            ],
        ),
        (
            "/deliveries/redeliver",
            vec![("destination", "erp"), ("reason", "r")],
            &["destination", "id", "type", "reason"],
        ),
        (
            "/dead-letters/redrive",
            vec![("all", "1"), ("reason", "r")],
            &["id", "reason"],
        ),
        (replay_one.as_str(), vec![("reason", "r")], &["reason"]),
        ("/logout", vec![], &["csrf"]),
    ];
    for (path, base, fields) in &posts {
        for field in *fields {
            for (what, value) in [("NUL", "a\0b".to_string()), ("long", long.clone())] {
                let mut form: Vec<(&str, &str)> = vec![("csrf", csrf.as_str())];
                form.extend(base.iter().filter(|(k, _)| k != field).cloned());
                form.push((field, value.as_str()));
                let res = http.post(path, &form).await;
                // A wrong CSRF token (the NUL or long one) is refused before anything else: 400 or 403.
                let ok = res.status == 400 || (*field == "csrf" && res.status == 403);
                if !ok {
                    failures.push(format!(
                        "POST {path} {field}=<{what}>: {} {}",
                        res.status, res.text
                    ));
                }
            }
        }
    }
    // A NUL in a field name, and the login form.
    let res = http
        .post_raw(
            "/replay",
            format!("csrf={csrf}&reason=r&selection=all&ty%00pe=x"),
        )
        .await;
    if res.status != 400 {
        failures.push(format!("POST /replay with a NUL key: {}", res.status));
    }
    let mut stranger = Http::new(&console);
    let token = stranger.get("/login").await.hidden("csrf");
    let res = stranger
        .post(
            "/login",
            &[("csrf", &token), ("name", "al\0ice"), ("password", "x")],
        )
        .await;
    if res.status == 500 {
        failures.push("POST /login with a NUL name: 500".into());
    }
    assert!(
        failures.is_empty(),
        "refused wrongly:\n{}",
        failures.join("\n")
    );
    assert_eq!(runs(&pool).await, 0, "nothing was recorded");
    // Still alive and logged in.
    assert_eq!(http.get("/events").await.status, 200);
}

/// Finding 9: a 64 KiB form to each POST route is 413 and not processed.
#[tokio::test]
async fn a_form_past_the_limit_is_413_on_every_post_route_and_not_processed() {
    let edge = console_edge().await;
    let console = edge.console.clone().expect("the console listens");
    let pool = edge.db.pool.clone();
    let event = store(&pool, "evt_big_1", "payment_intent.succeeded").await;
    let mut http = Http::new(&console);
    let csrf = http.login().await;
    let login_token = {
        let mut other = Http::new(&console);
        other.get("/login").await.hidden("csrf")
    };
    let padding = "p".repeat(64 * 1024);
    let routes = [
        format!("/events/{event}/replay"),
        "/replay".to_string(),
        "/dead-letters/redrive".to_string(),
        "/deliveries/redeliver".to_string(),
        "/logout".to_string(),
        "/login".to_string(),
    ];
    for path in &routes {
        let token = if path == "/login" {
            &login_token
        } else {
            &csrf
        };
        let body = format!(
            "csrf={token}&reason=big&selection=all&all=1&destination=erp&name=alice&pad={padding}"
        );
        let res = http.post_raw(path, body).await;
        assert_eq!(res.status, 413, "POST {path}: {}", res.text);
    }
    assert_eq!(runs(&pool).await, 0, "nothing was processed");
    assert_eq!(
        http.get("/events").await.status,
        200,
        "the session survived (logout was not processed)"
    );
    // Just under the limit is read.
    let pads: String = (0..5)
        .map(|i| format!("&pad{i}={}", "p".repeat(3000)))
        .collect();
    let small = format!("csrf={csrf}&reason=small&selection=all{pads}");
    assert_eq!(http.post_raw("/replay", small).await.status, 200);
}

/// Finding 9: a dry run counts N; new matching events arrive; the confirmation is refused (409, nothing
/// replayed); a dry run again and its confirmation replays exactly what it counted. Tokens from outside
/// (edited, the old `confirm=N`) replay nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_confirmation_carries_what_was_counted_and_refuses_a_changed_selection() {
    let hash = hash_password(PASSWORD).await;
    let p = TestPipeline::start_with(&console_toml(&hash)).await;
    let pool = p.pool().clone();
    let console = p.edge.console.clone().expect("the console listens");
    for i in 0..3 {
        store(&pool, &format!("evt_set_{i}"), "charge.refunded").await;
    }
    store(&pool, "evt_other", "payment_intent.succeeded").await;
    let mut http = Http::new(&console);
    let csrf = http.login().await;
    let form = [
        ("csrf", csrf.as_str()),
        ("reason", "INC-93"),
        ("selection", "all"),
        ("type", "charge.refunded"),
        ("since", "1h"),
    ];
    let dry = http.post("/replay", &form).await;
    assert_eq!(dry.status, 200, "{}", dry.text);
    assert!(dry.text.contains("data-count=\"3\""), "{}", dry.text);
    let first = dry.hidden("confirmation");

    // The old confirmation (any number) only counts again.
    let mut old = form.to_vec();
    old.push(("confirm", "3"));
    assert_eq!(http.post("/replay", &old).await.status, 200);
    assert_eq!(runs(&pool).await, 0, "confirm=N starts nothing");
    // An edited token is refused.
    let edited = first.replacen('7', "8", 1);
    let res = http
        .post(
            "/replay",
            &[
                ("csrf", &csrf),
                ("reason", "INC-93"),
                ("confirmation", &edited),
            ],
        )
        .await;
    assert!(
        res.status == 400 || edited == first,
        "edited token: {} {}",
        res.status,
        res.text
    );

    // A new matching event arrives: the confirmation no longer matches.
    store(&pool, "evt_set_late", "charge.refunded").await;
    let res = http
        .post(
            "/replay",
            &[
                ("csrf", &csrf),
                ("reason", "INC-93"),
                ("confirmation", &first),
            ],
        )
        .await;
    assert_eq!(res.status, 409, "{}", res.text);
    assert!(
        res.text.contains("counted 3") && res.text.contains("now holds 4"),
        "{}",
        res.text
    );
    assert_eq!(runs(&pool).await, 0, "nothing replayed");

    // Counted again: the confirmation replays exactly the 4 counted.
    let dry = http.post("/replay", &form).await;
    assert!(dry.text.contains("data-count=\"4\""), "{}", dry.text);
    let second = dry.hidden("confirmation");
    let res = http
        .post(
            "/replay",
            &[
                ("csrf", &csrf),
                ("reason", "INC-93"),
                ("confirmation", &second),
            ],
        )
        .await;
    assert_eq!(res.status, 303, "{}", res.text);
    wait_for_count(
        &pool,
        DRAIN,
        "the confirmed replay finished",
        "SELECT count(*) FROM replay_runs WHERE reason = 'INC-93' AND selected = 4 AND published = 4
           AND finished_at IS NOT NULL",
        1,
    )
    .await;
    assert_eq!(runs(&pool).await, 1);
}

/// Finding 9: a token inside a destination URL is not shown on `/deliveries` (nor in `hookline destinations
/// list`): query values are redacted (the configuration already refuses user names and passwords in a
/// destination URL; `redacted_url`'s unit tests cover them).
#[tokio::test]
async fn destination_urls_are_shown_with_userinfo_and_query_values_redacted() {
    let hash = hash_password(PASSWORD).await;
    let db = TestDb::new().await;
    let toml = test_config_toml(
        &db.url,
        "",
        &format!(
            "[relay]\nembedded = false\n{}\n[[destinations]]\nname = \"erp\"\n\
             url = \"https://127.0.0.1:9/in?token=s3cr3t-token&v=2\"\n\
             secrets = [\"{}\"]\nevents = [\"*\"]\n",
            console_toml(&hash),
            hookline_tests::secrets::STANDARD
        ),
    );
    let config = parse_config(&toml);
    hookline_delivery::deliver::sync_destinations(&db.pool, &hookline_tests::destinations(&config))
        .await
        .expect("sync");
    let dir = std::env::temp_dir().join(format!("hookline-redact-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("hookline.toml");
    std::fs::write(&file, &toml).expect("config");
    let edge = TestEdge::spawn_on(db, config).await;
    let mut http = Http::new(&edge.console.clone().expect("the console listens"));
    http.login().await;
    let page = http.get("/deliveries").await;
    assert_eq!(page.status, 200);
    assert!(
        page.text
            .contains("https://127.0.0.1:9/in?token=***&amp;v=***"),
        "{}",
        page.text
    );
    assert!(
        !page.text.contains("s3cr3t-token"),
        "the token shown on /deliveries"
    );
    for args in [
        &["destinations", "list"][..],
        &["destinations", "list", "--json"],
        &["destinations", "status"],
    ] {
        let out = std::process::Command::new(binary("hookline"))
            .arg("--config")
            .arg(&file)
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("AMQP_URL")
            .output_within(CLI_TIMEOUT);
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(shown.contains("token=***"), "{args:?}: {shown}");
        assert!(
            !shown.contains("s3cr3t-token"),
            "the token shown by {args:?}: {shown}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
