//! The two baselines every throughput is compared with, run directly against PostgreSQL (no HTTP, no broker):
//!
//! - **A, one row per commit** — what pgbench would measure with a custom script: `connections` clients, each
//!   running the edge's own statement (`events::insert_one`, the group commit's statement with one row: `INSERT … ON CONFLICT DO NOTHING RETURNING id` into
//!   `webhook_events`, ~1 KB body, same columns, same unique constraint and indexes) as its own transaction.
//! - **B, the worker's transaction** — `hookline_consumer::process_event` with the real `PaymentsHandler` (marker
//!   insert, payment upsert + `SELECT … FOR UPDATE` + update, transition row, one ledger transaction with three
//!   entries, commit) on events stored by A, at the worker's concurrency.
//!
//! Both use a plain pool (no ping before each acquire, unlike the services' pools) so they measure the database
//! work alone; what the services add on top is what the ratios show.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hookline_consumer::{process_event, Processed};
use hookline_core::config::Config;
use hookline_core::db::{connect_options, PoolSettings};
use hookline_core::events::{self, OwnedEvent, StoreOutcome};
use secrecy::SecretString;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::gen::{unix_now, EventFactory, PROVIDER, STRIPE_SECRET};
use crate::procfs::{CpuUsage, Monitor};
use crate::stats::{micros, Latency};

/// What a baseline measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Operations (commits) completed inside the measurement window.
    pub ops: u64,
    /// Length of the window.
    pub elapsed: Duration,
    /// Per-operation latency inside the window.
    pub latency: Option<Latency>,
    /// Failed operations inside the window.
    pub errors: u64,
    /// CPU used during the window.
    pub cpu: CpuUsage,
    /// The window ended early because there was no more input.
    pub exhausted: bool,
    /// Unix time at the start of the window.
    pub started_unix: f64,
}

impl Measured {
    /// Operations per second.
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// A pool of exactly `n` open connections with the services' session settings but no ping per acquire.
pub async fn plain_pool(url: &str, n: u32) -> anyhow::Result<PgPool> {
    let opts = connect_options(
        &SecretString::from(url.to_string()),
        &PoolSettings::worker(n),
    )?;
    let pool = PgPoolOptions::new()
        .max_connections(n)
        .min_connections(n)
        .test_before_acquire(false)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(opts)
        .await
        .context("connect the baseline pool")?;
    // Open every connection now, not during the measurement.
    let mut held = Vec::with_capacity(n as usize);
    for _ in 0..n {
        held.push(pool.acquire().await.context("open baseline connection")?);
    }
    drop(held);
    Ok(pool)
}

/// Shared bookkeeping of a warm-up-then-measure loop: tasks record only while `measuring`.
struct Window {
    measuring: AtomicBool,
    stop: AtomicBool,
    ops: AtomicU64,
    errors: AtomicU64,
    exhausted_at: std::sync::Mutex<Option<Instant>>,
}

impl Window {
    fn new() -> Arc<Window> {
        Arc::new(Window {
            measuring: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            ops: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            exhausted_at: std::sync::Mutex::new(None),
        })
    }

    fn exhausted(&self) {
        let mut at = self.exhausted_at.lock().unwrap_or_else(|e| e.into_inner());
        at.get_or_insert_with(Instant::now);
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Runs `tasks` (already spawned, recording into `window`) through warm-up and measurement.
async fn drive(
    window: &Arc<Window>,
    tasks: Vec<tokio::task::JoinHandle<Vec<u32>>>,
    warmup: Duration,
    duration: Duration,
    monitor: &Monitor,
) -> anyhow::Result<Measured> {
    tokio::time::sleep(warmup).await;
    let cpu0 = monitor.snapshot();
    let started = Instant::now();
    let started_unix = unix_now();
    window.measuring.store(true, Ordering::SeqCst);
    // End at the deadline, or as soon as the input runs out.
    let deadline = started + duration;
    while Instant::now() < deadline && !window.stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    window.measuring.store(false, Ordering::SeqCst);
    let ended = window
        .exhausted_at
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or_else(Instant::now)
        .max(started);
    let cpu1 = monitor.snapshot();
    let ops = window.ops.load(Ordering::SeqCst);
    window.stop.store(true, Ordering::SeqCst);
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.context("baseline task panicked")?);
    }
    let exhausted = window
        .exhausted_at
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .is_some();
    Ok(Measured {
        ops,
        elapsed: ended - started,
        latency: Latency::from_micros(&mut lat),
        errors: window.errors.load(Ordering::SeqCst),
        cpu: monitor.usage(&cpu0, &cpu1),
        exhausted,
        started_unix,
    })
}

/// Baseline A: `connections` clients each committing one `webhook_events` row per transaction. Returns the
/// measurement and the ids of every row stored (warm-up included), which baseline B then processes.
pub async fn one_row_per_commit(
    url: &str,
    connections: u32,
    factory: &EventFactory,
    warmup: Duration,
    duration: Duration,
    monitor: &Monitor,
) -> anyhow::Result<(Measured, Vec<i64>)> {
    let pool = plain_pool(url, connections).await?;
    let window = Window::new();
    let seq = Arc::new(AtomicU64::new(0));
    let ids = Arc::new(std::sync::Mutex::new(Vec::<i64>::new()));
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            let (pool, window, seq, ids, factory) = (
                pool.clone(),
                window.clone(),
                seq.clone(),
                ids.clone(),
                factory.clone(),
            );
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut mine = Vec::new();
                while !window.stop.load(Ordering::Relaxed) {
                    let n = seq.fetch_add(1, Ordering::Relaxed);
                    let now = unix_now() as i64;
                    let body = factory.body("ba", n, now);
                    let event_id = factory.event_id("ba", n);
                    let signature =
                        hookline_signature::sign::stripe(STRIPE_SECRET.as_bytes(), now, &body);
                    // The same header set the edge stores for a delivery from this load generator.
                    let headers = vec![
                        ("host".to_string(), "127.0.0.1".to_string()),
                        ("content-type".to_string(), "application/json".to_string()),
                        ("stripe-signature".to_string(), signature),
                        ("content-length".to_string(), body.len().to_string()),
                    ];
                    let event = OwnedEvent {
                        provider: PROVIDER.to_string(),
                        provider_event_id: event_id.clone(),
                        event_type: Some("payment_intent.succeeded".to_string()),
                        signed_at: Some(now),
                        headers,
                        query: String::new(),
                        body: body.clone().into(),
                        traceparent: None,
                    };
                    let t0 = Instant::now();
                    let result = events::insert_one(&pool, &event).await;
                    let us = micros(t0.elapsed());
                    let measuring = window.measuring.load(Ordering::Relaxed);
                    match result {
                        Ok(StoreOutcome::Inserted(id)) => {
                            mine.push(id);
                            if measuring {
                                window.ops.fetch_add(1, Ordering::Relaxed);
                                lat.push(us);
                            }
                        }
                        Ok(StoreOutcome::Duplicate(_)) | Err(_) => {
                            if measuring {
                                window.errors.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                ids.lock().unwrap_or_else(|e| e.into_inner()).extend(mine);
                lat
            })
        })
        .collect();
    let measured = drive(&window, tasks, warmup, duration, monitor).await?;
    pool.close().await;
    let mut ids = std::mem::take(&mut *ids.lock().unwrap_or_else(|e| e.into_inner()));
    ids.sort_unstable();
    Ok((measured, ids))
}

/// Baseline B: `concurrency` tasks over a pool of `pool_size` connections, each running the worker's
/// transaction on the next stored event, until the duration passes or the events run out.
#[allow(clippy::too_many_arguments)]
pub async fn worker_transaction(
    url: &str,
    config: &Config,
    ids: Vec<i64>,
    concurrency: usize,
    pool_size: u32,
    warmup: Duration,
    duration: Duration,
    monitor: &Monitor,
) -> anyhow::Result<Measured> {
    anyhow::ensure!(!ids.is_empty(), "baseline B needs stored events");
    let pool = plain_pool(url, pool_size).await?;
    let handler = Arc::new(hookline_billing::payments_handler(
        config.providers.values(),
    ));
    let ids = Arc::new(ids);
    let next = Arc::new(AtomicUsize::new(0));
    let window = Window::new();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (pool, handler, ids, next, window) = (
                pool.clone(),
                handler.clone(),
                ids.clone(),
                next.clone(),
                window.clone(),
            );
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while !window.stop.load(Ordering::Relaxed) {
                    let Some(&id) = ids.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        window.exhausted();
                        break;
                    };
                    let t0 = Instant::now();
                    let result = process_event(&pool, handler.as_ref(), id).await;
                    let us = micros(t0.elapsed());
                    if !window.measuring.load(Ordering::Relaxed) {
                        continue;
                    }
                    match result {
                        Ok(Processed::Applied(_)) => {
                            window.ops.fetch_add(1, Ordering::Relaxed);
                            lat.push(us);
                        }
                        Ok(Processed::Duplicate) | Err(_) => {
                            window.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                lat
            })
        })
        .collect();
    let measured = drive(&window, tasks, warmup, duration, monitor).await?;
    pool.close().await;
    Ok(measured)
}
