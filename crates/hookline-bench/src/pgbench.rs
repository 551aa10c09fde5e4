//! Baselines A and B driven by `pgbench` (it ships with PostgreSQL), printed beside the Rust-driven ones, so that
//! the ratios do not depend on the client library: if sqlx were slow, the Rust baselines would flatter hookline,
//! and these would not.
//!
//! - **A (pgbench)**: one `webhook_events` row per transaction, the same columns and body size the edge stores,
//!   at the load's concurrency.
//! - **B (pgbench)**: the worker's per-event transaction on hookline's schema, in the shape the worker ran it
//!   before the set-based batches — marker (with the event read), payment insert, status change + transition,
//!   posting + 3 entries: 4 statements and a commit per event, at the worker's concurrency.
//!
//! pgbench reports transactions per second ("tps = … (without initial connection time)"); failed transactions
//! are counted from its summary and reported as errors.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::Context;

/// What one pgbench run measured.
#[derive(Debug, Clone, Copy)]
pub struct PgbenchResult {
    /// Transactions per second, without connection time.
    pub tps: f64,
    /// Transactions completed.
    pub transactions: u64,
    /// Transactions that failed.
    pub failed: u64,
}

const SCRIPT_A: &str = r#"
INSERT INTO webhook_events (provider, provider_event_id, event_type, signed_at, headers, body)
VALUES ('stripe', 'evt_pgbench_a_' || nextval('pgbench_hookline_seq'), 'payment_intent.succeeded', now(),
        '[["host","127.0.0.1"],["content-type","application/json"],["stripe-signature","t=1,v1=00"],["content-length","1500"]]'::jsonb,
        convert_to(repeat('x', 1500), 'UTF8'))
ON CONFLICT ON CONSTRAINT webhook_events_provider_event_id_key DO NOTHING;
"#;

const SCRIPT_B: &str = r#"
BEGIN;
WITH marker AS (
    INSERT INTO processed_events (consumer, event_id) VALUES ('pgbench', nextval('pgbench_hookline_seq'))
    ON CONFLICT ON CONSTRAINT processed_events_pkey DO NOTHING RETURNING event_id)
SELECT marker.event_id AS n, (SELECT octet_length(body) FROM webhook_events WHERE id = marker.event_id) AS len
  FROM marker \gset
INSERT INTO payments (provider, provider_payment_id, status) VALUES ('pgbench', 'pi_pgbench_' || :n, 'created')
RETURNING id AS pay \gset
WITH moved AS (
    UPDATE payments SET status = 'succeeded', amount = 1000, currency = 'brl', version = version + 1,
                        updated_at = now()
     WHERE id = :pay RETURNING id)
INSERT INTO payment_transitions (payment_id, event_id, from_status, to_status)
SELECT id, :n, 'created', 'succeeded' FROM moved;
WITH posting AS (
    INSERT INTO ledger_transactions (provider, kind, reference, payment_id, event_id, currency)
    VALUES ('pgbench', 'payment', 'pi_pgbench_' || :n, :pay, :n, 'brl')
    ON CONFLICT ON CONSTRAINT ledger_transactions_posting_key DO NOTHING RETURNING id)
INSERT INTO ledger_entries (transaction_id, account, amount)
SELECT posting.id, l.account, l.amount
  FROM posting, (VALUES ('provider_receivable', 921), ('provider_fees', 79), ('revenue', -1000)) AS l(account, amount);
END;
"#;

/// Whether `pgbench` can be run.
pub fn available() -> bool {
    Command::new("pgbench")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Baseline A with pgbench: `clients` connections for `duration` on the database at `url`.
pub fn baseline_a(
    url: &str,
    clients: usize,
    duration: Duration,
    dir: &Path,
) -> anyhow::Result<PgbenchResult> {
    run(url, "a", SCRIPT_A, clients, duration, dir)
}

/// Baseline B with pgbench: the per-event worker transaction, `clients` connections.
pub fn baseline_b(
    url: &str,
    clients: usize,
    duration: Duration,
    dir: &Path,
) -> anyhow::Result<PgbenchResult> {
    run(url, "b", SCRIPT_B, clients, duration, dir)
}

fn run(
    url: &str,
    name: &str,
    script: &str,
    clients: usize,
    duration: Duration,
    dir: &Path,
) -> anyhow::Result<PgbenchResult> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let file = dir.join(format!("pgbench-{name}.sql"));
    std::fs::write(&file, script).with_context(|| format!("write {}", file.display()))?;
    // One sequence for both scripts: unique ids across runs on the same database.
    let seq = Command::new("psql")
        .args([
            url,
            "-qAtc",
            "CREATE SEQUENCE IF NOT EXISTS pgbench_hookline_seq START 1000000000000",
        ])
        .output()
        .context("run psql (PostgreSQL client) to prepare pgbench")?;
    anyhow::ensure!(
        seq.status.success(),
        "psql could not create the pgbench sequence: {}",
        String::from_utf8_lossy(&seq.stderr).trim()
    );
    let secs = duration.as_secs().max(1);
    let out = Command::new("pgbench")
        .args([
            "-n",
            "-M",
            "prepared",
            "-c",
            &clients.to_string(),
            "-j",
            "2",
            "-T",
            &secs.to_string(),
            "-f",
        ])
        .arg(&file)
        .arg(url)
        .output()
        .context("run pgbench")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success(),
        "pgbench failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .take(5)
            .collect::<Vec<_>>()
            .join(" | ")
    );
    parse(&stdout).with_context(|| format!("read pgbench's summary: {stdout}"))
}

/// Reads `tps = N (without initial connection time)`, `number of transactions actually processed: N` and
/// `number of failed transactions: N (…)` from pgbench's summary.
fn parse(stdout: &str) -> anyhow::Result<PgbenchResult> {
    let mut tps = None;
    let mut transactions = 0;
    let mut failed = 0;
    for line in stdout.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("tps = ") {
            if line.contains("without initial connection time") {
                tps = rest
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<f64>().ok());
            }
        } else if let Some(rest) = line.strip_prefix("number of transactions actually processed: ")
        {
            transactions = rest
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        } else if let Some(rest) = line.strip_prefix("number of failed transactions: ") {
            failed = rest
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
    }
    Ok(PgbenchResult {
        tps: tps.context("no tps line")?,
        transactions,
        failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pgbench_15_summary() {
        let out = "transaction type: a.sql\nscaling factor: 1\nquery mode: prepared\nnumber of clients: 64\n\
                   number of threads: 2\nmaximum number of tries: 1\nduration: 10 s\n\
                   number of transactions actually processed: 51234\nnumber of failed transactions: 3 (0.006%)\n\
                   latency average = 12.4 ms\ninitial connection time = 80.1 ms\n\
                   tps = 5123.400000 (without initial connection time)\n";
        let r = parse(out).unwrap();
        assert_eq!((r.transactions, r.failed), (51234, 3));
        assert!((r.tps - 5123.4).abs() < 1e-6);
        assert!(parse("nothing").is_err());
    }
}
