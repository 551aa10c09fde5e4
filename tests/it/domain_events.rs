//! Domain events out: every committed fact reaches every subscribed destination (HTTP, signed per Standard
//! Webhooks) and the `{prefix}.domain` exchange, despite a receiver that fails, times out and answers slowly, one
//! that answers 410 Gone, a replay of every inbound event and an operator's redelivery — and each fact is acted
//! on once by a receiver that deduplicates by `webhook-id`.

use std::collections::{BTreeMap, HashSet};
use std::process::Command;
use std::time::Duration;

use futures::future::join_all;
use hookline_core::supervisor::{Liveness, RestartPolicy, Supervisor};
use hookline_tests::receiver::{Behaviour, Receiver};
use hookline_tests::{
    binary, output_within, secrets, stripe, wait_for, wait_until, within, TestPipeline,
};
use lapin::options::{BasicGetOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use serde_json::Value;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(60);
/// The destinations' secrets: `orders` signs with both (a rotation in progress), its receiver knows only the
/// old one; `ledger`'s receiver knows only the new one.
const NEW_SECRET: &str = "whsec_aG9va2xpbmUtb3JkZXJzLW5ldy1zZWNyZXQtMjAyNg==";
const OLD_SECRET: &str = secrets::STANDARD;

fn tail(receiver: &Receiver) -> String {
    format!(
        r#"
[delivery]
timeout_ms = 700
backoff_base_ms = 50
backoff_max_secs = 1
poll_interval_ms = 50
breaker_threshold = 100
[[destinations]]
name = "orders"
url = "{orders}"
secrets = ["{NEW_SECRET}", "{OLD_SECRET}"]
events = ["*"]
[[destinations]]
name = "ledger"
url = "{ledger}"
secrets = ["{NEW_SECRET}"]
events = ["payment.succeeded", "refund.applied"]
[[destinations]]
name = "gone"
url = "{gone}"
secrets = ["{OLD_SECRET}"]
events = ["*"]
"#,
        orders = receiver.url("orders"),
        ledger = receiver.url("ledger"),
        gone = receiver.url("gone"),
    )
}

/// The inbound events: nine facts, with a duplicate delivery, a second event about the same success, an early
/// refund (parked until its payment succeeds) and a dispute lost before its payment succeeded.
fn inbound() -> Vec<Vec<u8>> {
    let month = 1_764_547_200; // 2025-12-01T00:00:00Z
    vec![
        stripe::payment_intent("evt_in_1", "succeeded", "pi_1", 2000),
        stripe::payment_intent("evt_in_1", "succeeded", "pi_1", 2000), // the provider's retry
        stripe::charge_succeeded("evt_in_2", "ch_1", "pi_1", 2000),    // same fact, other event
        stripe::refund("evt_in_3", "re_1", "pi_1", 300),
        stripe::payment_intent("evt_in_4", "payment_failed", "pi_2", 1500),
        stripe::dispute("evt_in_5", "created", "du_1", "pi_3", 900, "needs_response"),
        stripe::dispute("evt_in_6", "closed", "du_1", "pi_3", 900, "lost"),
        stripe::payment_intent("evt_in_7", "succeeded", "pi_3", 900),
        stripe::refund("evt_in_8", "re_2", "pi_4", 500), // before its payment succeeded
        stripe::payment_intent("evt_in_9", "succeeded", "pi_4", 1200),
        stripe::invoice_paid("evt_in_10", "in_1", "sub_1", month, 4990),
    ]
}

async fn facts(pool: &PgPool) -> BTreeMap<String, (String, Value)> {
    let rows: Vec<(String, String, Vec<u8>)> =
        sqlx::query_as("SELECT id, type, body FROM domain_events ORDER BY seq")
            .fetch_all(pool)
            .await
            .expect("domain events");
    rows.into_iter()
        .map(|(id, ty, body)| {
            let json: Value = serde_json::from_slice(&body).expect("a fact's body is JSON");
            (id, (ty, json))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_fact_reaches_every_subscribed_destination_once_per_receiver() {
    let receiver = Receiver::start();
    receiver.configure(
        "orders",
        Behaviour::Flaky {
            fail_first: 2,
            timeout_after: Duration::from_millis(1200),
            slow: Duration::from_millis(150),
        },
        &[OLD_SECRET],
    );
    receiver.configure("ledger", Behaviour::Ok, &[NEW_SECRET]);
    receiver.configure("gone", Behaviour::Gone, &[OLD_SECRET]);
    let p = TestPipeline::start_with(&tail(&receiver)).await;
    let pool = p.pool().clone();

    // An internal consumer's queue on the domain exchange, bound before anything is published.
    let amqp = lapin::Connection::connect(&p.amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = amqp.create_channel().await.expect("channel");
    p.topology().declare(&amqp).await.expect("topology");
    let tap = format!("{}.tap", p.config.amqp.prefix);
    channel
        .queue_declare(
            tap.as_str().into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("tap queue");
    channel
        .queue_bind(
            tap.as_str().into(),
            p.topology().domain_exchange.as_str().into(),
            "#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind tap");

    let worker = p.spawn_worker();
    let cancel = CancellationToken::new();
    let supervisor = Supervisor::new(Liveness::new(), RestartPolicy::default());
    let delivery =
        hookline_delivery::spawn(&p.config, pool.clone(), &supervisor, &cancel).expect("delivery");

    let answers = join_all(inbound().iter().map(|body| p.edge.deliver_stripe(body))).await;
    for a in &answers {
        assert_eq!(*a, 200, "the edge stored every event");
    }
    p.drain(WAIT).await;

    // The facts: one per state change, whatever the number of webhooks that reported it.
    let all = facts(&pool).await;
    let mut by_type: BTreeMap<&str, usize> = BTreeMap::new();
    for (ty, _) in all.values() {
        *by_type.entry(ty.as_str()).or_default() += 1;
    }
    assert_eq!(
        by_type,
        BTreeMap::from([
            ("dispute.lost", 1),
            ("dispute.opened", 1),
            ("payment.failed", 1),
            ("payment.succeeded", 3),
            ("refund.applied", 2),
            ("subscription.charged", 1),
        ]),
        "{all:#?}"
    );
    let (_, pi1) = all
        .values()
        .find(|(ty, b)| ty == "payment.succeeded" && b["data"]["provider_payment_id"] == "pi_1")
        .expect("pi_1 succeeded");
    assert_eq!(pi1["data"]["amount"], 2000);
    assert_eq!(pi1["data"]["currency"], "brl");
    assert!(
        pi1["data"]["payment_version"].as_i64().unwrap_or(0) >= 2,
        "{pi1}"
    );
    for (id, (ty, body)) in &all {
        assert_eq!(body["id"], id.as_str());
        assert_eq!(body["type"], ty.as_str());
        assert!(body["created_at"].is_string());
    }

    let everything: HashSet<String> = all.keys().cloned().collect();
    let ledger_types = ["payment.succeeded", "refund.applied"];
    let for_ledger: HashSet<String> = all
        .iter()
        .filter(|(_, (ty, _))| ledger_types.contains(&ty.as_str()))
        .map(|(id, _)| id.clone())
        .collect();
    // Seen on timeout: the ids each receiver acted on (compare with the facts above).
    wait_for(
        WAIT,
        &format!("orders and ledger acting on every subscribed fact ({everything:?})"),
        || {
            let seen = (receiver.acted("orders"), receiver.acted("ledger"));
            async move { seen }
        },
        |(orders, ledger)| *orders == everything && *ledger == for_ledger,
    )
    .await;

    let received = receiver.received();
    assert!(
        received.iter().all(|r| r.signature_valid),
        "every request verified"
    );
    // orders: every fact failed twice, and one answer came too late: retries, all with the fact's own id.
    let orders: Vec<_> = received
        .iter()
        .filter(|r| r.destination == "orders")
        .collect();
    let ids: HashSet<&str> = orders.iter().map(|r| r.webhook_id.as_str()).collect();
    assert_eq!(
        ids.len(),
        everything.len(),
        "no retry minted a new webhook-id"
    );
    for id in &everything {
        let n = orders.iter().filter(|r| &r.webhook_id == id).count();
        assert!(
            n >= 3,
            "{id} was retried with the same webhook-id ({n} attempts)"
        );
        let bodies: HashSet<&Vec<u8>> = orders
            .iter()
            .filter(|r| &r.webhook_id == id)
            .map(|r| &r.body)
            .collect();
        assert_eq!(
            bodies.len(),
            1,
            "every attempt of {id} carried the same bytes"
        );
    }
    assert_eq!(
        receiver.max_acted_per_id(),
        1,
        "each fact acted on once per receiver"
    );
    let late: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM domain_delivery_attempts WHERE destination = 'orders' AND error LIKE 'timed out%'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(late >= 1, "the slow answer was recorded as a timeout");

    // gone: one request, then disabled; its deliveries wait (nothing dropped) until it is enabled again.
    wait_until(WAIT, "the 410 disabled the destination", || {
        let pool = pool.clone();
        async move {
            hookline_delivery::destinations::get(&pool, "gone")
                .await
                .unwrap()
                .is_some_and(|d| d.disabled_at.is_some())
        }
    })
    .await;
    let gone_requests = receiver
        .received()
        .iter()
        .filter(|r| r.destination == "gone")
        .count();
    // The first claim's requests were in flight together (at most `max_in_flight`); after their 410s the
    // destination is disabled and nothing more is sent: every request received is one recorded 'gone' attempt.
    let gone_attempts = || {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM domain_delivery_attempts WHERE destination = 'gone' AND outcome = 'gone'",
            )
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    wait_for(
        WAIT,
        &format!("{gone_requests} recorded 410 attempts"),
        gone_attempts,
        |n| *n == gone_requests as i64,
    )
    .await;
    let gone_attempts = gone_attempts().await;
    assert!(
        (1..=8).contains(&gone_requests) && gone_requests as i64 == gone_attempts,
        "one claim's worth of requests, then nothing: {gone_requests} requests, {gone_attempts} attempts"
    );
    let waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM domain_deliveries WHERE destination = 'gone' AND status = 'pending'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(waiting, everything.len() as i64);
    receiver.configure("gone", Behaviour::Ok, &[OLD_SECRET]);
    assert!(
        hookline_delivery::destinations::set_disabled(&pool, "gone", None)
            .await
            .unwrap()
    );
    wait_for(
        WAIT,
        "the re-enabled destination acting on every fact",
        || {
            let seen = receiver.acted("gone");
            async move { seen }
        },
        |acted| *acted == everything,
    )
    .await;

    // RabbitMQ: every fact on the domain exchange, routed by type, identified by its id.
    let mut on_the_bus = HashSet::new();
    let deadline = std::time::Instant::now() + WAIT;
    while on_the_bus.len() < everything.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "facts missing on the bus: {on_the_bus:?}"
        );
        match channel
            .basic_get(tap.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get")
        {
            Some(m) => {
                let id = m
                    .properties
                    .message_id()
                    .as_ref()
                    .expect("message_id")
                    .to_string();
                let ty = &all.get(&id).expect("a known fact").0;
                assert_eq!(m.routing_key.as_str(), ty.as_str());
                on_the_bus.insert(id);
            }
            None => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert_eq!(on_the_bus, everything);

    // A replay of every inbound event: redelivered to the worker, which changes nothing — no new fact.
    let deliveries_before: i64 = sqlx::query_scalar("SELECT count(*) FROM domain_deliveries")
        .fetch_one(&pool)
        .await
        .unwrap();
    let config_file = p.config_file();
    let out = output_within(
        WAIT,
        Command::new(binary("hookline")).args([
            "--config",
            config_file.to_str().unwrap(),
            "replay",
            "--all",
            "--reason",
            "test: replay everything",
            "--rate",
            "0",
        ]),
    );
    assert!(
        out.status.success(),
        "replay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(
        WAIT,
        "the replayed events consumed (seen: messages in the payments queue)",
        || {
            let p = &p;
            async move { p.queue_depth(&p.topology().payments_queue).await }
        },
        |depth| *depth == 0,
    )
    .await;
    worker.stop().await; // in-flight deliveries finish and ack
    assert_eq!(
        facts(&pool).await.len(),
        all.len(),
        "a replay creates no new fact"
    );
    let deliveries_after: i64 = sqlx::query_scalar("SELECT count(*) FROM domain_deliveries")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(deliveries_after, deliveries_before);

    // An operator's redelivery: audited, same webhook-ids, the receiver deduplicates.
    let before = receiver
        .received()
        .iter()
        .filter(|r| r.destination == "ledger")
        .count();
    let out = output_within(
        WAIT,
        Command::new(binary("hookline")).args([
            "--config",
            config_file.to_str().unwrap(),
            "events",
            "redeliver",
            "--destination",
            "ledger",
            "--type",
            "payment.succeeded",
            "--reason",
            "test: the ERP lost its copy",
            "--operator",
            "ops",
        ]),
    );
    assert!(
        out.status.success(),
        "redeliver: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (operator, reason, published): (String, String, i64) = sqlx::query_as(
        "SELECT operator, reason, published FROM replay_runs WHERE kind = 'domain_redeliver'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((operator.as_str(), published), ("ops", 3));
    assert!(reason.contains("ERP"));
    wait_for(
        WAIT,
        &format!("{} requests at ledger (3 redelivered)", before + 3),
        || {
            let n = receiver
                .received()
                .iter()
                .filter(|r| r.destination == "ledger")
                .count();
            async move { n }
        },
        |n| *n == before + 3,
    )
    .await;
    assert_eq!(
        receiver.acted("ledger"),
        for_ledger,
        "redelivery reuses the ids"
    );
    assert_eq!(receiver.max_acted_per_id(), 1);

    cancel.cancel();
    for t in delivery {
        within(WAIT, "a delivery task's stop", t).await.unwrap();
    }
    receiver.stop().await;
}

#[tokio::test]
async fn a_fact_is_recorded_once_and_fans_out_by_subscription() {
    let db = hookline_tests::TestDb::new().await;
    let pool = db.pool.clone();
    let all = vec!["*".to_string()];
    let some = vec!["refund.applied".to_string()];
    hookline_delivery::destinations::sync(
        &pool,
        &[
            hookline_delivery::destinations::Declared {
                name: "a",
                url: "http://127.0.0.1:9/a",
                events: &all,
            },
            hookline_delivery::destinations::Declared {
                name: "b",
                url: "http://127.0.0.1:9/b",
                events: &some,
            },
        ],
    )
    .await
    .unwrap();
    use hookline_core::domain_events::{record, EventType};
    // Concurrent recorders of the same fact (two workers, a replay): one row, one delivery per destination.
    let results = join_all((0..8).map(|i| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let r = record(
                &mut tx,
                EventType::RefundApplied,
                "stripe/re_1",
                &serde_json::json!({"n": i}),
                hookline_core::domain_events::Owner::Nobody,
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
            r
        }
    }))
    .await;
    let ids: HashSet<&String> = results.iter().map(|(id, _)| id).collect();
    assert_eq!(ids.len(), 1);
    assert_eq!(results.iter().filter(|(_, created)| *created).count(), 1);
    let mut tx = pool.begin().await.unwrap();
    record(
        &mut tx,
        EventType::PaymentFailed,
        "stripe/pi_9",
        &serde_json::json!({}),
        hookline_core::domain_events::Owner::Nobody,
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap(); // the effect rolled back: so did its fact
    let mut tx = pool.begin().await.unwrap();
    record(
        &mut tx,
        EventType::PaymentSucceeded,
        "stripe/pi_1",
        &serde_json::json!({}),
        hookline_core::domain_events::Owner::Nobody,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT d.destination, e.type FROM domain_deliveries d JOIN domain_events e ON e.seq = d.event_seq
          ORDER BY 1, 2",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            ("a".into(), "payment.succeeded".into()),
            ("a".into(), "refund.applied".into()),
            ("b".into(), "refund.applied".into()),
        ]
    );
    // A destination removed from the configuration gets no new facts.
    hookline_delivery::destinations::sync(
        &pool,
        &[hookline_delivery::destinations::Declared {
            name: "a",
            url: "http://127.0.0.1:9/a",
            events: &all,
        }],
    )
    .await
    .unwrap();
    let mut tx = pool.begin().await.unwrap();
    record(
        &mut tx,
        EventType::RefundApplied,
        "stripe/re_2",
        &serde_json::json!({}),
        hookline_core::domain_events::Owner::Nobody,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let b: i64 =
        sqlx::query_scalar("SELECT count(*) FROM domain_deliveries WHERE destination = 'b'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(b, 1);
}

#[tokio::test]
async fn destinations_add_and_rotate_edit_the_configuration_and_print_the_secret_once() {
    let db = hookline_tests::TestDb::new().await;
    let toml = hookline_tests::test_config_toml(&db.url, "", "");
    let dir = std::env::temp_dir().join(format!("hookline-dest-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hookline.toml");
    std::fs::write(&path, format!("# operator's comment, kept\n{toml}")).unwrap();
    let hookline = |args: &[&str]| {
        output_within(
            WAIT,
            Command::new(binary("hookline"))
                .arg("--config")
                .arg(&path)
                .args(args),
        )
    };
    // The destinations the file declares, as the worker reads them (`hookline-delivery` owns the section).
    let load = || {
        let config = hookline_tests::parse_config(&std::fs::read_to_string(&path).unwrap());
        let no_env: [(&str, &str); 0] = [];
        hookline_delivery::destinations_from_config(&config, &no_env)
            .expect("valid [[destinations]]")
    };

    let out = hookline(&[
        "destinations",
        "add",
        "erp",
        "--url",
        "http://127.0.0.1:9/erp",
        "--events",
        "payment.succeeded,refund.applied",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(first.starts_with("whsec_"), "{first}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains(&first),
        "the secret is printed once, on stdout"
    );
    let c = load();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].events, vec!["payment.succeeded", "refund.applied"]);
    assert!(std::fs::read_to_string(&path)
        .unwrap()
        .starts_with("# operator's comment, kept"));

    // A second add of the name and an unknown type are refused, the file untouched.
    let before = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        hookline(&[
            "destinations",
            "add",
            "erp",
            "--url",
            "http://x.example/",
            "--events",
            "*"
        ])
        .status
        .code(),
        Some(2)
    );
    assert_eq!(
        hookline(&[
            "destinations",
            "add",
            "crm",
            "--url",
            "http://x.example/",
            "--events",
            "payment.refunded"
        ])
        .status
        .code(),
        Some(2)
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);

    // Rotation: the new secret first, the old one still signing; then only the new one.
    let out = hookline(&["destinations", "rotate-secret", "erp"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let second = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let secrets: Vec<String> = load()[0]
        .secret_bytes()
        .iter()
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect();
    assert_eq!(secrets, vec![second.clone(), first]);
    assert!(
        hookline(&["destinations", "rotate-secret", "erp", "--drop-old"])
            .status
            .success()
    );
    let secrets: Vec<String> = load()[0]
        .secret_bytes()
        .iter()
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect();
    assert_eq!(secrets, vec![second]);

    // The database learns it; nothing pending, so status is green (exit 0), and a disabled one is not.
    assert!(hookline(&["migrate"]).status.success());
    let out = hookline(&["destinations", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(listed[0]["name"], "erp");
    assert_eq!(hookline(&["destinations", "status"]).status.code(), Some(0));
    assert!(
        hookline(&["destinations", "disable", "erp", "--reason", "maintenance"])
            .status
            .success()
    );
    assert_eq!(hookline(&["destinations", "status"]).status.code(), Some(1));
    std::fs::remove_dir_all(&dir).ok();
}

/// `add --print` with a configuration file reads it (duplicates refused, the result validated), prints only the
/// new block and leaves the file as it was — it does not claim that no file was given.
#[test]
fn destinations_add_print_with_a_config_prints_the_block_and_leaves_the_file() {
    let toml =
        hookline_tests::test_config_toml("postgres://postgres@127.0.0.1:5432/unused", "", "");
    let dir = std::env::temp_dir().join(format!("hookline-dest-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hookline.toml");
    let existing = "[[destinations]]\nname = \"erp\"\nurl = \"http://127.0.0.1:9/erp\"\nsecrets = [\"whsec_aG9va2xpbmUtb3JkZXJzLW5ldy1zZWNyZXQtMjAyNg==\"]\nevents = [\"*\"]\n";
    std::fs::write(&path, format!("{toml}\n{existing}")).unwrap();
    let before = std::fs::read_to_string(&path).unwrap();
    let add = |name: &str| {
        output_within(
            WAIT,
            Command::new(binary("hookline"))
                .arg("--config")
                .arg(&path)
                .args([
                    "destinations",
                    "add",
                    name,
                    "--url",
                    "http://127.0.0.1:9/crm",
                ])
                .args(["--events", "payment.succeeded", "--print"]),
        )
    };
    let out = add("crm");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("no configuration file"), "{stderr}");
    assert!(stderr.contains(&path.display().to_string()), "{stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    // The block names the new destination only, and the secret line follows it.
    let parsed: toml_edit::DocumentMut = stdout
        .lines()
        .take_while(|l| !l.starts_with("whsec_"))
        .collect::<Vec<_>>()
        .join("\n")
        .parse()
        .expect("the printed block is TOML");
    let printed = parsed["destinations"]
        .as_array_of_tables()
        .expect("[[destinations]]");
    assert_eq!(printed.len(), 1, "{stdout}");
    assert_eq!(printed.get(0).and_then(|t| t["name"].as_str()), Some("crm"));
    assert!(
        stdout.lines().last().unwrap().starts_with("whsec_"),
        "{stdout}"
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
    // A name the file already has is refused with --print too.
    assert_eq!(add("erp").status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_past_its_retry_window_is_dead_until_redelivered() {
    let receiver = Receiver::start();
    let never = Behaviour::Flaky {
        fail_first: u32::MAX,
        timeout_after: Duration::ZERO,
        slow: Duration::ZERO,
    };
    receiver.configure("down", never, &[OLD_SECRET]);
    let db = hookline_tests::TestDb::new().await;
    let config = hookline_tests::parse_config(&hookline_tests::test_config_toml(
        &db.url,
        "",
        &format!(
            "[delivery]\nretry_window_secs = 1\nbackoff_base_ms = 100\nbackoff_max_secs = 1\npoll_interval_ms = 50\nbreaker_threshold = 3\nbreaker_cooldown_ms = 300\n\
             [[destinations]]\nname = \"down\"\nurl = \"{}\"\nsecrets = [\"{OLD_SECRET}\"]\nevents = [\"*\"]\n",
            receiver.url("down")
        ),
    ));
    let pool = db.pool.clone();
    let delivery =
        hookline_delivery::deliver::Delivery::from_config(pool.clone(), &config).unwrap();
    delivery.sync().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let (id, _) = hookline_core::domain_events::record(
        &mut tx,
        hookline_core::domain_events::EventType::PaymentSucceeded,
        "stripe/pi_dead",
        &serde_json::json!({"amount": 1}),
        hookline_core::domain_events::Owner::Nobody,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (delivery, cancel) = (delivery.clone(), cancel.clone());
        async move { delivery.run(cancel).await }
    });
    hookline_tests::wait_for_count(
        &pool,
        WAIT,
        "the delivery is dead",
        "SELECT count(*) FROM domain_deliveries WHERE status = 'dead'",
        1,
    )
    .await;
    let (reason, attempts): (String, i32) =
        sqlx::query_as("SELECT dead_reason, attempts FROM domain_deliveries")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        reason.contains("retry window") && reason.contains("HTTP 503"),
        "{reason}"
    );
    assert!(attempts >= 2, "retried before giving up: {attempts}");
    let status = hookline_delivery::destinations::status(&pool)
        .await
        .unwrap();
    assert_eq!(
        (status[0].dead, status[0].last_failure_status),
        (1, Some(503))
    );
    let sent = receiver.received().len();
    assert_eq!(sent, attempts as usize, "one request per recorded attempt");

    // Fixed receiver, an operator's redelivery: delivered with the same id.
    receiver.configure("down", Behaviour::Ok, &[OLD_SECRET]);
    let mut tx = pool.begin().await.unwrap();
    let (_, queued) = hookline_delivery::destinations::redeliver(
        &mut tx,
        &hookline_delivery::destinations::RedeliverFilter {
            destination: Some("down".into()),
            ..Default::default()
        },
        "ops",
        "test: receiver fixed",
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(queued, 1);
    wait_for(
        WAIT,
        &format!("the redelivered fact {id} acted on"),
        || {
            let seen = receiver.acted("down");
            async move { seen }
        },
        |acted| acted.contains(&id),
    )
    .await;
    cancel.cancel();
    within(WAIT, "the delivery's stop", task)
        .await
        .unwrap()
        .unwrap();
    receiver.stop().await;
}

/// The domain relay's cursor under concurrent commits. Transaction A records a fact and stays open; B records a
/// later fact (higher `seq`) and commits. A relay round must not pass A's fact: it sees neither (A, still running,
/// holds the horizon) — with a cursor over `seq` alone it would publish B's fact and move past A's for ever. Once
/// A commits, the next round reads both, A's first (`(xid, seq)` order), and after the cursor moves past them a
/// round finds nothing, and each is reported published.
#[tokio::test]
async fn the_domain_cursor_never_passes_a_fact_whose_transaction_is_still_running() {
    use hookline_core::domain_events::{
        list, lock_cursor, move_cursor, read_after, record, unpublished_backlog, EventType,
    };
    let db = hookline_tests::TestDb::new().await;
    let pool = db.pool.clone();
    let fact = |subject: &'static str| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let (id, created) = record(
                &mut tx,
                EventType::PaymentSucceeded,
                subject,
                &serde_json::json!({}),
                hookline_core::domain_events::Owner::Nobody,
            )
            .await
            .unwrap();
            assert!(created);
            (tx, id)
        }
    };
    let round = || {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let cursor = lock_cursor(&mut tx).await.unwrap().expect("no other relay");
            let facts = read_after(&mut tx, cursor, 100).await.unwrap();
            (tx, facts)
        }
    };
    let (a, a_id) = fact("stripe/pi_a").await;
    let (b, b_id) = fact("stripe/pi_b").await;
    b.commit().await.unwrap();

    let (tx, facts) = round().await;
    assert!(
        facts.is_empty(),
        "nothing past the running transaction's horizon: {:?}",
        facts.iter().map(|f| &f.id).collect::<Vec<_>>()
    );
    drop(tx);
    assert_eq!(
        unpublished_backlog(&pool).await.unwrap().0,
        1,
        "B's fact waits (A's is not visible before A commits)"
    );

    a.commit().await.unwrap();
    // The horizon is the cluster's: a write transaction of another test still running holds it back for a
    // moment (the facts wait, none is skipped), so the round is repeated until it finds them.
    let deadline = std::time::Instant::now() + WAIT;
    let (mut tx, facts) = loop {
        let (tx, facts) = round().await;
        // (A's alone is possible too, when another test's transaction began between A and B.)
        if facts.len() == 2 {
            break (tx, facts);
        }
        drop(tx);
        assert!(
            std::time::Instant::now() < deadline,
            "no round read the facts within {WAIT:?} of A's commit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ids: Vec<&str> = facts.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(
        ids,
        [a_id.as_str(), b_id.as_str()],
        "A's fact first: its transaction began first"
    );
    let last = facts.last().unwrap();
    move_cursor(
        &mut tx,
        hookline_core::domain_events::Cursor {
            xid: last.xid.unwrap(),
            seq: last.seq,
        },
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let (tx, facts) = round().await;
    assert!(facts.is_empty(), "the cursor moved past both");
    drop(tx);
    assert_eq!(unpublished_backlog(&pool).await.unwrap().0, 0);
    let listed = list(&pool, None, 10).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|f| f.published), "{listed:?}");
}
