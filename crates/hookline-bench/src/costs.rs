//! The physical budget of a phase, per event: the rows PostgreSQL inserted, updated and deleted in each table
//! (`pg_stat_user_tables`), the WAL it wrote (`pg_stat_wal`), and what RabbitMQ carried (its own global message
//! counters and the bytes of its connections, read with `rabbitmqctl eval`).
//!
//! Why counters and not only CPU: CPU per event moves with the machine and with batch sizes, a row written is a
//! row written. Each insert costs its heap tuple and one entry per index, each delete a dead tuple that vacuum
//! visits later, and all of it WAL; the design is judged by how many of them an event really needs (issue 32).
//!
//! A phase's counters are read before it starts and after everything it caused has settled (the relay caught up,
//! the worker done) and every backend has reported it ([`settled`]: about 12 s per phase).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use sqlx::Connection;

/// Cumulative counters at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// Per table of the database read: inserted, updated, HOT-updated, deleted tuples.
    tables: BTreeMap<String, [i64; 4]>,
    /// `pg_stat_wal.wal_bytes` (the whole cluster: the benchmark's database is the only busy one).
    wal_bytes: i64,
    /// `pg_stat_wal.wal_records`.
    wal_records: i64,
    /// RabbitMQ's counters, when `rabbitmqctl` could be asked.
    amqp: Option<AmqpCounters>,
}

/// RabbitMQ's view: messages received from publishers, delivered to consumers, acknowledged, and bytes in and
/// out of its live connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct AmqpCounters {
    received: i64,
    delivered: i64,
    acknowledged: i64,
    bytes_in: i64,
    bytes_out: i64,
}

/// Rows one table gained, changed and lost, per event.
#[derive(Debug, Clone, Serialize)]
pub struct TableWrites {
    /// Table name.
    pub table: String,
    /// Tuples inserted per event.
    pub inserted: f64,
    /// Tuples updated per event (HOT included).
    pub updated: f64,
    /// Of those, HOT updates (no index entry written).
    pub hot_updated: f64,
    /// Tuples deleted per event.
    pub deleted: f64,
}

/// A phase's cost per event.
#[derive(Debug, Clone, Serialize)]
pub struct CostModel {
    /// The events divided by (unique events stored, processed, or baseline transactions).
    pub events: u64,
    /// Tables with any write, most written first.
    pub tables: Vec<TableWrites>,
    /// Inserted + updated + deleted tuples per event, over every table.
    pub tuples: f64,
    /// WAL bytes per event.
    pub wal_bytes: f64,
    /// WAL records per event.
    pub wal_records: f64,
    /// PostgreSQL CPU milliseconds per event (the phase's CPU bracket).
    pub pg_cpu_ms: f64,
    /// RabbitMQ CPU milliseconds per event.
    pub rabbitmq_cpu_ms: f64,
    /// Messages RabbitMQ received from publishers, per event.
    pub amqp_published: Option<f64>,
    /// Messages RabbitMQ delivered to consumers, per event.
    pub amqp_delivered: Option<f64>,
    /// Acknowledgements RabbitMQ received (each message settled by a `multiple` ack counts), per event.
    pub amqp_acknowledged: Option<f64>,
    /// Bytes into RabbitMQ per event (every live connection).
    pub amqp_bytes_in: Option<f64>,
    /// Bytes out of RabbitMQ per event.
    pub amqp_bytes_out: Option<f64>,
}

impl Counters {
    /// Reads `db_url`'s table counters, the cluster's WAL counters and RabbitMQ's counters.
    pub async fn read(db_url: &str) -> anyhow::Result<Counters> {
        let mut conn = sqlx::PgConnection::connect(db_url)
            .await
            .context("connect to read pg_stat counters")?;
        let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables",
        )
        .fetch_all(&mut conn)
        .await
        .context("read pg_stat_user_tables")?;
        let (wal_bytes, wal_records): (i64, i64) =
            sqlx::query_as("SELECT wal_bytes::int8, wal_records FROM pg_stat_wal")
                .fetch_one(&mut conn)
                .await
                .context("read pg_stat_wal")?;
        conn.close().await.ok();
        Ok(Counters {
            tables: rows
                .into_iter()
                .map(|(t, i, u, h, d)| (t, [i, u, h, d]))
                .collect(),
            wal_bytes,
            wal_records,
            amqp: amqp_counters().await,
        })
    }

    /// What happened between `self` (earlier) and `later`, per event, with the phase's CPU.
    pub fn per_event(
        &self,
        later: &Counters,
        events: u64,
        pg_cpu_s: f64,
        rabbitmq_cpu_s: f64,
    ) -> CostModel {
        let n = events.max(1) as f64;
        let mut tables: Vec<TableWrites> = later
            .tables
            .iter()
            .filter_map(|(name, b)| {
                let a = self.tables.get(name).copied().unwrap_or_default();
                let d: Vec<f64> = (0..4).map(|k| (b[k] - a[k]).max(0) as f64 / n).collect();
                (d.iter().any(|x| *x > 0.0)).then(|| TableWrites {
                    table: name.clone(),
                    inserted: d[0],
                    updated: d[1],
                    hot_updated: d[2],
                    deleted: d[3],
                })
            })
            .collect();
        let written = |t: &TableWrites| t.inserted + t.updated + t.deleted;
        tables.sort_by(|x, y| written(y).total_cmp(&written(x)));
        let amqp = match (self.amqp, later.amqp) {
            (Some(a), Some(b)) => Some((a, b)),
            _ => None,
        };
        let per =
            |f: fn(&AmqpCounters) -> i64| amqp.map(|(a, b)| (f(&b) - f(&a)).max(0) as f64 / n);
        CostModel {
            events,
            tuples: tables.iter().map(written).sum(),
            tables,
            wal_bytes: (later.wal_bytes - self.wal_bytes).max(0) as f64 / n,
            wal_records: (later.wal_records - self.wal_records).max(0) as f64 / n,
            pg_cpu_ms: pg_cpu_s * 1000.0 / n,
            rabbitmq_cpu_ms: rabbitmq_cpu_s * 1000.0 / n,
            amqp_published: per(|c| c.received),
            amqp_delivered: per(|c| c.delivered),
            amqp_acknowledged: per(|c| c.acknowledged),
            amqp_bytes_in: per(|c| c.bytes_in),
            amqp_bytes_out: per(|c| c.bytes_out),
        }
    }
}

/// PostgreSQL 15 backends report their table counters when they go idle, but at most once a second: a backend
/// that reported less than a second ago reports again only after `PGSTAT_IDLE_INTERVAL` (10 s). Seen: readings a
/// second apart agreed while the edge's pool still held part of the phase's inserts, which the next phase then
/// counted as its own (2.75 inserts per event at the 10 % sweep point after the max phase).
const IDLE_REPORT: Duration = Duration::from_millis(10_500);

/// Reads once every backend has reported: [`IDLE_REPORT`] after the phase's activity ended (the caller waited for
/// the relay or the worker first), then until two readings a second apart agree on every table (at most 5 s more,
/// for a backend still busy with something else, such as autovacuum's own counters).
pub async fn settled(db_url: &str) -> anyhow::Result<Counters> {
    tokio::time::sleep(IDLE_REPORT).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = Counters::read(db_url).await?;
    loop {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let now = Counters::read(db_url).await?;
        if now.tables == last.tables || Instant::now() >= deadline {
            return Ok(now);
        }
        last = now;
    }
}

/// The Erlang expression `rabbitmqctl eval` runs: RabbitMQ's global message counters summed over protocols and
/// queue types (`rabbit_global_counters`, in the core since 3.9, no plugin needed) and the byte counters of its
/// live connections, as one line of five integers.
const AMQP_EVAL: &str = "O = rabbit_global_counters:overview(), \
    S = fun(K) -> maps:fold(fun(_, M, A) -> A + maps:get(K, M, 0) end, 0, O) end, \
    C = rabbit_networking:connection_info_all([recv_oct, send_oct]), \
    I = lists:sum([proplists:get_value(recv_oct, X, 0) || X <- C]), \
    B = lists:sum([proplists:get_value(send_oct, X, 0) || X <- C]), \
    lists:flatten(io_lib:format(\"~b ~b ~b ~b ~b\", [S(messages_received_total), S(messages_delivered_total), \
    S(messages_acknowledged_total), I, B])).";

/// RabbitMQ's counters, or `None` when `rabbitmqctl` is missing, not allowed, or answers something else (the
/// report then leaves the AMQP columns empty).
async fn amqp_counters() -> Option<AmqpCounters> {
    let out = tokio::time::timeout(
        Duration::from_secs(15),
        tokio::process::Command::new("rabbitmqctl")
            .args(["eval", AMQP_EVAL])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .ok()?
    .ok()?;
    if !out.status.success() {
        return None;
    }
    parse_amqp(&String::from_utf8_lossy(&out.stdout))
}

/// `"1 2 3 4 5"` (quoted, as `eval` prints a string) → the counters.
fn parse_amqp(out: &str) -> Option<AmqpCounters> {
    let nums: Vec<i64> = out
        .trim()
        .trim_matches('"')
        .split_whitespace()
        .map(|s| s.parse().ok())
        .collect::<Option<_>>()?;
    match nums[..] {
        [received, delivered, acknowledged, bytes_in, bytes_out] => Some(AmqpCounters {
            received,
            delivered,
            acknowledged,
            bytes_in,
            bytes_out,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_eval_prints() {
        let c = parse_amqp("\"10 9 8 7000 6000\"\n").expect("parsed");
        assert_eq!(
            c,
            AmqpCounters {
                received: 10,
                delivered: 9,
                acknowledged: 8,
                bytes_in: 7000,
                bytes_out: 6000
            }
        );
        assert!(parse_amqp("Error: unable to perform an operation").is_none());
        assert!(parse_amqp("\"1 2 3\"").is_none());
    }

    #[test]
    fn per_event_divides_the_differences_and_sorts_by_rows_written() {
        let mut a = Counters::default();
        a.tables.insert("event_outbox".into(), [10, 0, 0, 10]);
        a.tables.insert("idle".into(), [5, 5, 5, 5]);
        let mut b = a.clone();
        b.tables.insert("event_outbox".into(), [110, 0, 0, 110]);
        b.tables.insert("webhook_events".into(), [100, 0, 0, 0]);
        b.wal_bytes = 50_000;
        let m = a.per_event(&b, 100, 0.5, 0.1);
        let names: Vec<&str> = m.tables.iter().map(|t| t.table.as_str()).collect();
        assert_eq!(names, ["event_outbox", "webhook_events"]);
        assert_eq!(m.tuples, 3.0);
        assert_eq!(m.wal_bytes, 500.0);
        assert_eq!(m.pg_cpu_ms, 5.0);
        assert!(m.amqp_published.is_none());
    }
}
