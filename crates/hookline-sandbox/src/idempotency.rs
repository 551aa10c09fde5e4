//! Idempotency keys, per API key (i.e. per configured provider), as Stripe documents them: the status and body of
//! the first request that began executing are saved and replayed for later requests with the same key; requests
//! that failed validation, conflicted with a concurrent one, or were refused before execution (injected faults)
//! save nothing. Keys expire after the configured window (24 h by default).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What was answered the first time.
#[derive(Debug, Clone)]
pub(crate) struct Saved {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    /// The `Request-Id` of the original request (Stripe replays it as `Original-Request`).
    pub(crate) request_id: String,
}

#[derive(Debug)]
enum Slot {
    InFlight,
    Done(Saved),
}

#[derive(Debug)]
struct Entry {
    fingerprint: String,
    slot: Slot,
    created: Instant,
}

/// The outcome of presenting a key.
#[derive(Debug)]
pub(crate) enum Begin {
    /// First use (or the earlier one expired): execute, then [`IdempotencyStore::finish`].
    Fresh,
    /// A finished request with this key: answer with its response.
    Replay(Saved),
    /// The first request with this key is still executing.
    InFlight,
    /// The key was first used with other parameters.
    Mismatch,
}

#[derive(Debug)]
pub(crate) struct IdempotencyStore {
    entries: HashMap<String, Entry>,
    window: Duration,
}

impl IdempotencyStore {
    pub(crate) fn new(window: Duration) -> IdempotencyStore {
        IdempotencyStore {
            entries: HashMap::new(),
            window,
        }
    }

    /// Presents `key` with the request's `fingerprint`: what must be equal for a replay (Stripe: method, path and
    /// canonical parameters; Mercado Pago: method and path only, its retries are replayed whatever the body).
    pub(crate) fn begin(&mut self, key: &str, fingerprint: &str, now: Instant) -> Begin {
        self.expire(now);
        match self.entries.get(key) {
            None => {
                self.entries.insert(
                    key.to_owned(),
                    Entry {
                        fingerprint: fingerprint.to_owned(),
                        slot: Slot::InFlight,
                        created: now,
                    },
                );
                Begin::Fresh
            }
            Some(entry) if entry.fingerprint != fingerprint => Begin::Mismatch,
            Some(Entry {
                slot: Slot::InFlight,
                ..
            }) => Begin::InFlight,
            Some(Entry {
                slot: Slot::Done(saved),
                ..
            }) => Begin::Replay(saved.clone()),
        }
    }

    /// Ends the execution that [`Begin::Fresh`] started: `Some` saves the response, `None` forgets the key (the
    /// request never began executing, so a retry executes anew).
    pub(crate) fn finish(&mut self, key: &str, saved: Option<Saved>) {
        match saved {
            Some(saved) => {
                if let Some(entry) = self.entries.get_mut(key) {
                    entry.slot = Slot::Done(saved);
                }
            }
            None => {
                self.entries.remove(key);
            }
        }
    }

    /// Keys currently remembered (finished or in flight).
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    fn expire(&mut self, now: Instant) {
        let window = self.window;
        // Finished keys expire; an in-flight one is kept until its request finishes.
        self.entries.retain(|_, e| {
            matches!(e.slot, Slot::InFlight) || now.saturating_duration_since(e.created) < window
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(status: u16) -> Saved {
        Saved {
            status,
            body: b"{}".to_vec(),
            request_id: "req_1".into(),
        }
    }

    #[test]
    fn first_use_executes_then_replays_and_mismatches() {
        let mut store = IdempotencyStore::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert!(matches!(store.begin("k", "a", t0), Begin::Fresh));
        assert!(matches!(store.begin("k", "a", t0), Begin::InFlight));
        assert!(matches!(store.begin("k", "b", t0), Begin::Mismatch));
        store.finish("k", Some(saved(402)));
        assert!(matches!(store.begin("k", "a", t0), Begin::Replay(s) if s.status == 402));
        assert!(matches!(store.begin("k", "b", t0), Begin::Mismatch));
    }

    #[test]
    fn unsaved_requests_and_expired_keys_execute_again() {
        let mut store = IdempotencyStore::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert!(matches!(store.begin("k", "a", t0), Begin::Fresh));
        store.finish("k", None);
        assert!(matches!(store.begin("k", "a", t0), Begin::Fresh));
        store.finish("k", Some(saved(200)));
        let later = t0 + Duration::from_secs(61);
        assert!(matches!(store.begin("k", "b", later), Begin::Fresh));
        assert_eq!(store.len(), 1);
    }
}
