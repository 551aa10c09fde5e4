//! PostgreSQL: pools, database creation and migrations.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool, Postgres, Transaction};

/// The migrations in the top-level `migrations/` folder, embedded at build time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations");

/// How a pool should behave; each process tunes its own.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    /// Shown in `pg_stat_activity.application_name`, so an operator sees who holds what.
    pub application_name: &'static str,
    /// Upper bound on connections.
    pub max_connections: u32,
    /// How long a caller waits for a connection before giving up (sqlx's default of 30 s is far longer than a
    /// provider waits for our answer).
    pub acquire_timeout: Duration,
    /// Server-side cap on any one statement.
    pub statement_timeout: Duration,
    /// Server-side cap on waiting for a lock.
    pub lock_timeout: Duration,
}

impl PoolSettings {
    /// Settings for the HTTP edge: small budgets, because a slow answer is worse than a 503 the provider retries.
    pub fn edge(max_connections: u32, budget: Duration) -> Self {
        PoolSettings {
            application_name: "hookline-edge",
            max_connections,
            acquire_timeout: budget,
            statement_timeout: budget,
            lock_timeout: budget,
        }
    }

    /// Settings for the outbox relay: few connections, since it works in batches.
    pub fn relay() -> Self {
        PoolSettings {
            application_name: "hookline-relay",
            max_connections: 2,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(30),
            lock_timeout: Duration::from_secs(5),
        }
    }

    /// Settings for the worker: transactions hold row locks, so waits are bounded but not as tight as the edge's.
    pub fn worker(max_connections: u32) -> Self {
        PoolSettings {
            application_name: "hookline-worker",
            max_connections,
            acquire_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(30),
            lock_timeout: Duration::from_secs(10),
        }
    }

    /// Settings for command-line tools.
    pub fn cli() -> Self {
        PoolSettings {
            application_name: "hookline-cli",
            max_connections: 4,
            acquire_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(300),
            lock_timeout: Duration::from_secs(30),
        }
    }
}

/// Parses the URL into connect options carrying the session settings.
///
/// The timeouts are sent as startup parameters rather than `SET` statements, so they cost no round trip and hold
/// for every statement on the connection. `idle_in_transaction_session_timeout` makes the server end a session
/// that sits inside a transaction (a client that died mid-transaction) so its locks are released. JIT compilation
/// is off: it only pays for long analytical queries.
pub fn connect_options(
    url: &SecretString,
    settings: &PoolSettings,
) -> anyhow::Result<PgConnectOptions> {
    let ms = |d: Duration| d.as_millis().max(1).to_string();
    let opts = PgConnectOptions::from_str(url.expose_secret())
        .context("database_url is not a valid PostgreSQL URL")?
        .application_name(settings.application_name)
        .options([
            ("statement_timeout", ms(settings.statement_timeout)),
            ("lock_timeout", ms(settings.lock_timeout)),
            ("idle_in_transaction_session_timeout", "60000".to_string()),
            // Every statement here is short: compiling one with LLVM (PostgreSQL's default once a plan's estimated
            // cost passes jit_above_cost) costs ~250 ms for nothing — seen when a batch's plan carried the
            // disabled-seqscan cost (see `begin_without_seqscan`).
            ("jit", "off".to_string()),
        ])
        .log_statements(tracing::log::LevelFilter::Trace)
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1));
    Ok(opts)
}

/// Builds a pool that connects lazily: a process starts (and answers health checks) while the database is down,
/// and connects once it returns.
pub fn lazy_pool(url: &SecretString, settings: &PoolSettings) -> anyhow::Result<PgPool> {
    let opts = connect_options(url, settings)?;
    Ok(PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .min_connections(0)
        .acquire_timeout(settings.acquire_timeout)
        // A pooled connection may have died with a database restart: ping before handing it out.
        .test_before_acquire(true)
        .idle_timeout(Duration::from_secs(300))
        .max_lifetime(Duration::from_secs(1800))
        .connect_lazy_with(opts))
}

/// Begins a transaction in which the planner may not choose a sequential scan where an index serves
/// (`SET LOCAL enable_seqscan = off`, sent with `BEGIN` in one round trip). For the worker's set-based batches,
/// whose statements join arrays of keys with tables that only grow.
///
/// Why: sqlx prepares every statement, and after five executions PostgreSQL may switch it to a *generic* plan,
/// made once without the parameters (an array is assumed to hold 10 elements) and with the table as large as it
/// was then. Made while `payments` was small, that plan was a hash join over a sequential scan, and it stayed
/// while a backlog drain grew the table faster than autovacuum re-analyzed it: the batch's lock took 37 ms at
/// 150 k payments instead of 0.3 ms, its update 16 ms. Forcing custom plans instead (`plan_cache_mode`) fixed
/// the plans but re-planned every statement of the transaction, the foreign-key and ledger-balance triggers'
/// queries included: 0.35 ms of planning per event. Here the plans stay cached and are index plans whatever the
/// table's size when they were made (PROFILING.md has the measurements).
pub async fn begin_without_seqscan(
    pool: &PgPool,
) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    pool.begin_with("BEGIN; SET LOCAL enable_seqscan = off")
        .await
}

/// Creates the database named in `url` when it does not exist yet. Safe to run concurrently and repeatedly.
pub async fn create_database_if_missing(url: &SecretString) -> anyhow::Result<()> {
    let target = PgConnectOptions::from_str(url.expose_secret())
        .context("database_url is not a valid PostgreSQL URL")?;
    let name = target
        .get_database()
        .context("database_url names no database")?
        .to_string();
    // Connect to the maintenance database of the same server to issue CREATE DATABASE.
    let admin = target.clone().database("postgres");
    let mut conn = sqlx::PgConnection::connect_with(&admin)
        .await
        .context("cannot connect to the PostgreSQL server (maintenance database 'postgres')")?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&mut conn)
            .await
            .context("cannot query pg_database")?;
    if !exists {
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        match sqlx::query(&format!("CREATE DATABASE {quoted}"))
            .execute(&mut conn)
            .await
        {
            Ok(_) => tracing::info!(database = %name, "created database"),
            // 42P04 duplicate_database: someone else created it between our check and CREATE: fine.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => {}
            Err(e) => return Err(e).with_context(|| format!("cannot create database {name}")),
        }
    }
    conn.close().await.ok();
    Ok(())
}

/// Creates the database if needed and applies every pending migration. Idempotent.
pub async fn migrate(url: &SecretString) -> anyhow::Result<()> {
    create_database_if_missing(url).await?;
    let opts = connect_options(url, &PoolSettings::cli())?;
    let mut conn = sqlx::PgConnection::connect_with(&opts)
        .await
        .context("cannot connect to the database to migrate it")?;
    MIGRATOR
        .run(&mut conn)
        .await
        .context("applying migrations failed")?;
    conn.close().await.ok();
    Ok(())
}

/// True when the error means "the database is unavailable right now" rather than "this request is wrong".
///
/// Callers answer these with 503/retry; anything else is a bug or a permanent failure.
pub fn is_transient(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(e) => e.code().is_some_and(|c| is_transient_sqlstate(&c)),
        _ => false,
    }
}

/// True when PostgreSQL refused the *data* of a statement: data exceptions (class 22, e.g. 22021 NUL or an
/// invalid byte sequence in text), integrity violations (class 23, e.g. a CHECK), program limits (class 54, e.g.
/// an index row over the btree maximum). Retrying the same row cannot succeed; other rows of the same batch can.
pub fn is_data_error(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(e) => e
            .code()
            .is_some_and(|c| c.starts_with("22") || c.starts_with("23") || c.starts_with("54")),
        _ => false,
    }
}

/// SQLSTATEs that a retry can cure: connection exceptions (08), serialization failure and deadlock (40001,
/// 40P01), insufficient resources (53), operator intervention such as shutdown or statement timeout (57), lock
/// not available (55P03), and a write refused by a read-only server (25006): during a failover a connection can
/// reach a node that is (still) a standby, and the next attempt goes through the proxy to the new primary.
pub fn is_transient_sqlstate(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("57")
        || matches!(code, "40001" | "40P01" | "55P03" | "25006")
}
