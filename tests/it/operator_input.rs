//! The CLI's operator commands under attack (issue 25, finding 9), run as the real `hookline` binary:
//! `billing run --cycle 0001-01` is refused unless `--allow-cycle` names it, and `replay --confirm` (the token
//! a dry run prints) refuses a selection that changed since it was counted.

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
