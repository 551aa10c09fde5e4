//! Supervision of background loops: a loop that panics or fails is restarted with backoff and counted; one
//! that keeps failing is declared dead, liveness turns false and the process shuts down with an error, so that
//! its own supervisor (systemd, Kubernetes, `deploy/up.sh`'s operator) restarts it.
//!
//! Why: a live process with a dead thread is the worst state a pipeline can be in. The relay thread dying on one
//! row once left the edge answering 200 and `/healthz` green while nothing was published any more. Every
//! background loop of every hookline process runs under [`Supervisor::run`]; `/healthz` answers from
//! [`Liveness`], which only the supervisor writes.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

/// Metric names of the supervisor.
pub mod metric {
    /// Counter: restarts of a supervised loop after a panic or an error, by `task`.
    pub const RESTARTS: &str = "hookline_supervisor_restarts_total";
    /// Gauge: 1 while a supervised loop runs (or waits to be restarted), 0 once it is declared dead; by `task`.
    pub const TASK_UP: &str = "hookline_supervisor_task_up";
}

/// How often a loop may fail before it is declared dead.
#[derive(Debug, Clone, Copy)]
pub struct RestartPolicy {
    /// Most restarts within `window`; one more declares the task dead.
    pub max_restarts: usize,
    /// The window `max_restarts` is counted over.
    pub window: Duration,
    /// First delay before a restart; doubled after each failure, up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest delay before a restart.
    pub max_backoff: Duration,
}

impl Default for RestartPolicy {
    /// Five restarts a minute at most, 100 ms to 10 s apart: rides out a broker or database restart, gives up on
    /// a loop that fails on every attempt (a bug) within about half a minute.
    fn default() -> Self {
        RestartPolicy {
            max_restarts: 5,
            window: Duration::from_secs(60),
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// What the process knows about its supervised loops: `/healthz` reads it.
#[derive(Clone, Default)]
pub struct Liveness {
    inner: Arc<LivenessInner>,
}

#[derive(Default)]
struct LivenessInner {
    dead: Mutex<Vec<String>>,
    fatal: CancellationToken,
}

impl std::fmt::Debug for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Liveness")
            .field("dead", &self.dead_tasks())
            .finish()
    }
}

impl Liveness {
    /// A fresh state: nothing dead.
    pub fn new() -> Liveness {
        Liveness::default()
    }

    /// Names of the loops declared dead (empty while the process is healthy).
    pub fn dead_tasks(&self) -> Vec<String> {
        self.inner
            .dead
            .lock()
            .map(|d| d.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    /// What `/healthz` answers: alive or not, and the JSON body (`{"status":"ok"}`, or `"dead"` with the dead
    /// tasks' names).
    pub fn health(&self) -> (bool, serde_json::Value) {
        let dead = self.dead_tasks();
        if dead.is_empty() {
            (true, serde_json::json!({ "status": "ok" }))
        } else {
            (
                false,
                serde_json::json!({ "status": "dead", "dead_tasks": dead }),
            )
        }
    }

    /// True while no supervised loop is dead.
    pub fn is_alive(&self) -> bool {
        self.dead_tasks().is_empty()
    }

    /// Declares `task` dead: liveness fails and [`Liveness::fatal`] resolves, so `main` shuts down with an error.
    pub fn declare_dead(&self, task: &str) {
        match self.inner.dead.lock() {
            Ok(mut d) => d.push(task.to_owned()),
            Err(poisoned) => poisoned.into_inner().push(task.to_owned()),
        }
        metrics::gauge!(metric::TASK_UP, "task" => task.to_owned()).set(0.0);
        self.inner.fatal.cancel();
    }

    /// Resolves once a supervised loop is declared dead.
    pub async fn fatal(&self) {
        self.inner.fatal.cancelled().await
    }
}

/// Runs loops under a [`RestartPolicy`], reporting to one [`Liveness`].
#[derive(Clone, Debug)]
pub struct Supervisor {
    liveness: Liveness,
    policy: RestartPolicy,
}

impl Supervisor {
    /// A supervisor reporting to `liveness`.
    pub fn new(liveness: Liveness, policy: RestartPolicy) -> Supervisor {
        Supervisor { liveness, policy }
    }

    /// The liveness this supervisor reports to.
    pub fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    /// Spawns a supervised loop on the current runtime: each attempt calls `step` with its own clone of `state`
    /// and of `cancel` (a restart starts from the same state, not from what a failed attempt left behind).
    /// Await the handle after cancelling `cancel`. This is the one way a long-running loop is started, so that
    /// no loop of any process can die unnoticed.
    pub fn spawn<S, F, Fut>(
        &self,
        task: &'static str,
        cancel: &CancellationToken,
        state: S,
        step: F,
    ) -> tokio::task::JoinHandle<()>
    where
        S: Clone + Send + Sync + 'static,
        F: Fn(S, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let (supervisor, cancel) = (self.clone(), cancel.clone());
        tokio::spawn(async move {
            supervisor
                .run(task, cancel.clone(), |_| {
                    step(state.clone(), cancel.clone())
                })
                .await
        })
    }

    /// Runs `attempt` until it returns `Ok(())` (a clean stop, normally because `cancel` fired) or `cancel`
    /// fires. A panic or an `Err` is logged with its cause chain, counted in
    /// `hookline_supervisor_restarts_total{task}` and followed, after a backoff, by a new attempt; more than
    /// `max_restarts` failures within `window` declare the task dead (see [`Liveness::declare_dead`]).
    ///
    /// `attempt` gets the number of the attempt (0 first) and builds a fresh future each time, so a loop
    /// restarts from a clean state rather than from whatever its panic left behind.
    pub async fn run<F, Fut>(&self, task: &'static str, cancel: CancellationToken, mut attempt: F)
    where
        F: FnMut(u64) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        let mut failures: VecDeque<Instant> = VecDeque::new();
        let mut backoff = self.policy.initial_backoff;
        let mut n = 0u64;
        metrics::gauge!(metric::TASK_UP, "task" => task).set(1.0);
        loop {
            let outcome = tokio::select! {
                _ = cancel.cancelled() => return,
                outcome = AssertUnwindSafe(attempt(n)).catch_unwind() => outcome,
            };
            n += 1;
            let reason = match outcome {
                Ok(Ok(())) => return,
                Ok(Err(e)) => format!("{e:#}"),
                Err(panic) => format!("panicked: {}", panic_message(panic.as_ref())),
            };
            let now = Instant::now();
            failures.push_back(now);
            while failures
                .front()
                .is_some_and(|t| now.duration_since(*t) > self.policy.window)
            {
                failures.pop_front();
            }
            metrics::counter!(metric::RESTARTS, "task" => task).increment(1);
            if failures.len() > self.policy.max_restarts {
                tracing::error!(
                    task,
                    error.message = %reason,
                    failures = failures.len(),
                    window_secs = self.policy.window.as_secs(),
                    "supervised task keeps failing; declaring it dead and stopping the process"
                );
                self.liveness.declare_dead(task);
                return;
            }
            tracing::error!(
                task,
                error.message = %reason,
                retry_in_ms = backoff.as_millis() as u64,
                "supervised task failed; restarting it"
            );
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(self.policy.max_backoff);
        }
    }
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C): every hookline process stops gracefully on either.
pub async fn wait_for_shutdown_signal() {
    #[cfg(unix)]
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(e) => {
            tracing::warn!(error.message = %e, "cannot install a SIGTERM handler; only SIGINT stops gracefully");
            tokio::signal::ctrl_c().await.ok();
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await.ok();
}

/// A token cancelled by SIGTERM or SIGINT (Ctrl-C). Must be called inside a Tokio runtime.
pub fn shutdown_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        wait_for_shutdown_signal().await;
        tracing::info!("shutdown requested; finishing in-flight work");
        t.cancel();
    });
    token
}

/// The text of a panic payload (`panic!("…")` gives `&str` or `String`).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic payload".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn fast() -> RestartPolicy {
        RestartPolicy {
            max_restarts: 3,
            window: Duration::from_secs(60),
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
        }
    }

    #[tokio::test]
    async fn a_panicking_loop_is_restarted_then_recovers() {
        let liveness = Liveness::new();
        let sup = Supervisor::new(liveness.clone(), fast());
        let calls = AtomicUsize::new(0);
        sup.run("t", CancellationToken::new(), |n| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 2 {
                    panic!("boom {n}");
                }
                Ok(())
            }
        })
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert!(liveness.is_alive());
    }

    #[tokio::test]
    async fn a_loop_that_always_fails_is_declared_dead() {
        let liveness = Liveness::new();
        let sup = Supervisor::new(liveness.clone(), fast());
        let calls = AtomicUsize::new(0);
        sup.run("relay", CancellationToken::new(), |_| {
            calls.fetch_add(1, Ordering::SeqCst);
            async { Err(anyhow::anyhow!("always")) }
        })
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 4, "max_restarts + 1 attempts");
        assert_eq!(liveness.dead_tasks(), vec!["relay".to_string()]);
        // fatal() has resolved.
        tokio::time::timeout(Duration::from_secs(1), liveness.fatal())
            .await
            .expect("fatal resolves once a task is dead");
    }

    #[tokio::test]
    async fn cancellation_stops_without_restart() {
        let liveness = Liveness::new();
        let sup = Supervisor::new(liveness.clone(), fast());
        let cancel = CancellationToken::new();
        cancel.cancel();
        sup.run("t", cancel, |_| async {
            std::future::pending::<()>().await;
            Ok(())
        })
        .await;
        assert!(liveness.is_alive());
    }
}
