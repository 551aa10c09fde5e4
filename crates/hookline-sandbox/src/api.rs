//! The execution protocol shared by every provider's mutating endpoints: idempotency key check, then the
//! operation in its own task — so a client that disconnects (or times out) cannot cancel an operation half-way,
//! exactly as with a real provider — after the configured API latency, under the state lock.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use serde_json::json;

use crate::idempotency::{Begin, Saved};
use crate::reply::Reply;
use crate::state::{Shared, State};

/// How a mutating request ended.
pub(crate) enum Run {
    /// It executed and this is its answer (saved under the key, if any).
    Executed(Reply),
    /// The key's saved answer.
    Replayed(Saved),
    /// The first request with the key is still executing.
    InFlight,
    /// The key was first used with other parameters.
    Mismatch,
}

impl Run {
    /// The answer of a provider that replays a key's saved answer as it was (no replay headers), answers a key
    /// still executing with `in_flight` and a key first used otherwise with `mismatch` (Mercado Pago, Pagar.me;
    /// Stripe decorates its answers and does its own).
    pub(crate) fn plain_answer(
        self,
        in_flight: fn() -> Reply,
        mismatch: fn() -> Reply,
    ) -> actix_web::HttpResponse {
        match self {
            Run::Executed(reply) => reply,
            Run::Replayed(saved) => Reply {
                status: saved.status,
                body: saved.body,
                headers: Vec::new(),
            },
            Run::InFlight => in_flight(),
            Run::Mismatch => mismatch(),
        }
        .into_response()
    }
}

/// The idempotency key in request header `header`, trimmed; none when absent, empty or not text.
pub(crate) fn idempotency_key(req: &actix_web::HttpRequest, header: &str) -> Option<String> {
    req.headers()
        .get(header)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
}

/// Presents `key` (if any) for provider `p`, then executes `operation` unless the key says otherwise.
pub(crate) async fn run<F>(
    shared: &Arc<Shared>,
    p: usize,
    key: Option<&str>,
    fingerprint: &str,
    request_id: &str,
    operation: F,
) -> Run
where
    F: FnOnce(&mut State) -> Reply + Send + 'static,
{
    if let Some(key) = key {
        let mut state = shared.lock();
        // The sandbox clock: a test that moves it a day ahead sees the key expire.
        let now = state.clock.instant();
        let book = &mut state.providers[p];
        let begin = book.idempotency.begin(key, fingerprint, now);
        let stats = book.key_stats(key);
        stats.requests += 1;
        match begin {
            Begin::Fresh => stats.executed += 1,
            Begin::Replay(saved) => {
                stats.replays += 1;
                return Run::Replayed(saved);
            }
            Begin::InFlight => {
                stats.conflicts += 1;
                return Run::InFlight;
            }
            Begin::Mismatch => {
                stats.conflicts += 1;
                return Run::Mismatch;
            }
        }
    }
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task_shared = shared.clone();
    let key = key.map(str::to_owned);
    let request_id = request_id.to_owned();
    tokio::spawn(async move {
        tokio::time::sleep(task_shared.timing.api_latency).await;
        let mut state = task_shared.lock();
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| operation(&mut state)));
        let reply = match outcome {
            Ok(reply) => {
                if let Some(key) = &key {
                    state.providers[p].idempotency.finish(
                        key,
                        Some(Saved {
                            status: reply.status,
                            body: reply.body.clone(),
                            request_id,
                        }),
                    );
                }
                reply
            }
            Err(_) => {
                if let Some(key) = &key {
                    state.providers[p].idempotency.finish(key, None);
                }
                tracing::error!("a sandbox operation panicked; answered 500");
                Reply::json(
                    500,
                    &json!({"error": {"type": "api_error", "message": "sandbox operation failed"}}),
                )
            }
        };
        drop(state);
        task_shared.wake.notify_one();
        let _ = tx.send(reply);
    });
    match rx.await {
        Ok(reply) => Run::Executed(reply),
        Err(_) => Run::Executed(Reply::json(
            500,
            &json!({"error": {"type": "api_error", "message": "sandbox operation was lost"}}),
        )),
    }
}
