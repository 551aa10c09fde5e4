//! The CLI's operator commands under attack (issue 25, finding 9), run as the real `hookline` binary:
//! `billing run --cycle 0001-01` is refused unless `--allow-cycle` names it, and `replay --confirm` (the token
//! a dry run prints) refuses a selection that changed since it was counted. Issue 27: `hookline refund`
//! requires `--idempotency-key`, and the same command run twice (or at once) refunds once.

use hookline_core::events::{OwnedEvent, StoreOutcome};
use hookline_tests::*;

fn config_file(db: &TestDb) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "hookline-operator-input-{}.toml",
        uuid::Uuid::new_v4()
    ));
    std::fs::write(&path, test_config_toml(&db.url, "", "")).expect("write the config");
    path
}

fn cli(config: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(binary("hookline"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("AMQP_URL")
        .output_within(CLI_TIMEOUT)
}

async fn store(pool: &sqlx::PgPool, id: &str) {
    let stored = hookline_core::events::insert_one(
        pool,
        &OwnedEvent {
            provider: "stripe".into(),
            provider_event_id: id.into(),
            event_type: Some("charge.refunded".into()),
            signed_at: None,
            headers: vec![],
            query: String::new(),
            body: format!(r#"{{"id":"{id}"}}"#).into_bytes().into(),
            traceparent: None,
        },
    )
    .await
    .expect("store");
    assert!(matches!(stored, StoreOutcome::Inserted(_)), "{stored:?}");
}

#[tokio::test]
async fn a_billing_cycle_two_thousand_years_ago_is_refused_unless_named_with_allow_cycle() {
    let db = TestDb::new().await;
    let config = config_file(&db);
    let out = cli(
        &config,
        &[
            "billing",
            "run",
            "--cycle",
            "0001-01",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--allow-cycle 0001-01"), "{err}");
    // --allow-cycle must name that very cycle.
    let out = cli(
        &config,
        &[
            "billing",
            "run",
            "--cycle",
            "0001-01",
            "--allow-cycle",
            "0001-02",
            "--dry-run",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    // Named explicitly: accepted (a dry run over no subscription).
    let out = cli(
        &config,
        &[
            "billing",
            "run",
            "--cycle",
            "0001-01",
            "--allow-cycle",
            "0001-01",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The current cycle needs no flag.
    let now = sqlx::types::time::OffsetDateTime::now_utc();
    let current = format!("{:04}-{:02}", now.year(), u8::from(now.month()));
    let out = cli(
        &config,
        &["billing", "run", "--cycle", &current, "--dry-run", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let _ = std::fs::remove_file(config);
}

#[tokio::test]
async fn replay_confirm_refuses_a_selection_that_changed_since_the_dry_run() {
    let db = TestDb::new().await;
    let config = config_file(&db);
    for i in 0..3 {
        store(&db.pool, &format!("evt_cli_{i}")).await;
    }
    let out = cli(
        &config,
        &[
            "replay",
            "--all",
            "--type",
            "charge.refunded",
            "--since",
            "1h",
            "--dry-run",
            "--reason",
            "INC-1",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("3 events would be re-delivered"),
        "{stdout}"
    );
    let token = stdout
        .split_whitespace()
        .skip_while(|w| *w != "--confirm")
        .nth(1)
        .expect("the dry run prints its confirmation")
        .to_string();
    store(&db.pool, "evt_cli_late").await;
    let out = cli(
        &config,
        &["replay", "--confirm", &token, "--reason", "INC-1"],
    );
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("counted 3") && err.contains("now holds 4"),
        "{err}"
    );
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM replay_runs")
        .fetch_one(&db.pool)
        .await
        .expect("runs");
    assert_eq!(runs, 0, "nothing replayed");
    let out = cli(
        &config,
        &["replay", "--confirm", "00.00", "--reason", "INC-1"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "an edited token is a usage error: {out:?}"
    );
    let _ = std::fs::remove_file(config);
}

/// Issue 27: `hookline refund pi_hl_… --amount 1000 --reason …` run twice made two refunds at the gateway and
/// printed a bare number. Now `--idempotency-key` is required (a usage error without it, the reason in
/// `--help`); the same command run twice, then four times at once, prints the same `re_hl_N`: one refund row,
/// one refund request, 1000 reserved. The same key with another amount is refused (exit 1) and changes
/// nothing; another key is another refund.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_refund_command_run_twice_refunds_once() {
    let db = TestDb::new().await;
    let config = config_file(&db);
    let intent = {
        let mut tx = db.pool.begin().await.expect("begin");
        let params = hookline_payments::params::PaymentParams::Stripe(
            hookline_payments::params::StripeParams {
                payment_method: Some("pm_card_visa".into()),
                ..Default::default()
            },
        );
        let intent = hookline_payments::intents::create_intent(
            &mut tx,
            &hookline_payments::intents::NewIntent {
                provider: "st",
                amount: 5000,
                currency: "brl",
                customer: Some("cliente-cli"),
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
        intent
    };
    // Captured, as the dispatcher and the provider's webhook would record it.
    sqlx::query("UPDATE payment_intents SET status = 'succeeded' WHERE id = $1")
        .bind(intent.id)
        .execute(&db.pool)
        .await
        .expect("capture");
    let refund = |amount: &str, key: Option<&str>| {
        let mut args = vec![
            "refund",
            intent.public_id.as_str(),
            "--amount",
            amount,
            "--reason",
            "cliente desistiu",
        ];
        if let Some(key) = key {
            args.extend(["--idempotency-key", key]);
        }
        cli(&config, &args)
    };
    let counts = || async {
        let refunds: i64 = sqlx::query_scalar("SELECT count(*) FROM outbound_refunds")
            .fetch_one(&db.pool)
            .await
            .expect("refunds");
        let requests: i64 =
            sqlx::query_scalar("SELECT count(*) FROM outbound_requests WHERE kind = 'refund'")
                .fetch_one(&db.pool)
                .await
                .expect("requests");
        let refunded: i64 =
            sqlx::query_scalar("SELECT refunded FROM payment_intents WHERE id = $1")
                .bind(intent.id)
                .fetch_one(&db.pool)
                .await
                .expect("refunded");
        (refunds, requests, refunded)
    };

    let out = refund("1000", None);
    assert_eq!(out.status.code(), Some(2), "the key is required: {out:?}");
    assert_eq!(counts().await, (0, 0, 0));
    let help = cli(&config, &["refund", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Why --idempotency-key is required") && help.contains("refunds twice"),
        "{help}"
    );

    let first = refund("1000", Some("INC-7-refund-1"));
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let printed = String::from_utf8_lossy(&first.stdout).trim().to_string();
    let id: i64 = printed
        .strip_prefix("re_hl_")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("prints re_hl_N, not {printed:?}"));
    let second = refund("1000", Some("INC-7-refund-1"));
    assert_eq!(second.status.code(), Some(0), "{second:?}");
    assert_eq!(String::from_utf8_lossy(&second.stdout).trim(), printed);
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("already requested"),
        "{second:?}"
    );
    // Four operators at once: the UNIQUE key decides.
    let at_once: Vec<std::process::Output> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| refund("1000", Some("INC-7-refund-1"))))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("the command ran"))
            .collect()
    });
    for out in &at_once {
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), printed);
    }
    assert_eq!(counts().await, (1, 1, 1000));
    let key: Option<String> =
        sqlx::query_scalar("SELECT request_key FROM outbound_refunds WHERE id = $1")
            .bind(id)
            .fetch_one(&db.pool)
            .await
            .expect("key");
    assert_eq!(key.as_deref(), Some("INC-7-refund-1"));

    // The same key for another amount: refused, nothing changes.
    let reused = refund("2000", Some("INC-7-refund-1"));
    assert_eq!(reused.status.code(), Some(1), "{reused:?}");
    assert!(
        String::from_utf8_lossy(&reused.stderr).contains(&printed),
        "names the key's refund: {reused:?}"
    );
    assert_eq!(counts().await, (1, 1, 1000));
    // Another key is another refund, still never beyond the capture.
    let other = refund("1500", Some("INC-8-refund-1"));
    assert_eq!(other.status.code(), Some(0), "{other:?}");
    assert_ne!(String::from_utf8_lossy(&other.stdout).trim(), printed);
    assert_eq!(counts().await, (2, 2, 2500));
    let beyond = refund("2501", Some("INC-9-refund-1"));
    assert_eq!(beyond.status.code(), Some(1), "{beyond:?}");
    assert_eq!(
        counts().await,
        (2, 2, 2500),
        "a refused refund frees its key"
    );
    let _ = std::fs::remove_file(config);
}
