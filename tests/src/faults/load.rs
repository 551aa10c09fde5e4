//! The load driver: N unique Stripe `payment_intent.succeeded` events (distinct payments, known amounts), some
//! resent after their 2xx and some sent twice at once, with bounded concurrency and optional pacing. Each delivery
//! is retried like a provider would (non-2xx or transport error → backoff, bounded attempts and time). Every HTTP
//! attempt is recorded ([`Attempt`]), and whether each event was ever acknowledged. The payloads come from
//! `hookline_fake::stripe`, their signatures from [`crate::stripe_headers`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{now, secrets, stripe, stripe_headers};

/// Which copy of an event a request carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// The first delivery.
    First,
    /// An exact resend after the first one was acknowledged.
    Resend,
    /// The twin sent at the same moment as the first delivery.
    Concurrent,
}

/// One HTTP attempt of the load driver.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// Index of the event in its load.
    pub event: usize,
    /// Its provider event id.
    pub provider_event_id: String,
    /// Which delivery this attempt belongs to.
    pub delivery: Delivery,
    /// Attempt number within the delivery (1 = first try).
    pub number: u32,
    /// When the request was sent.
    pub sent_at: Instant,
    /// Until the answer's head (or the transport error).
    pub latency: Duration,
    /// HTTP status, `None` on a transport error or timeout.
    pub status: Option<u16>,
    /// `duplicate` of a 2xx JSON answer.
    pub duplicate: Option<bool>,
    /// The answer's `Retry-After` header, when it had one.
    pub retry_after: Option<String>,
    /// The transport error.
    pub error: Option<String>,
}

impl Attempt {
    /// Answered 2xx.
    pub fn is_2xx(&self) -> bool {
        self.status.is_some_and(|s| (200..300).contains(&s))
    }

    /// When the answer (or the error) arrived.
    pub fn ended_at(&self) -> Instant {
        self.sent_at + self.latency
    }

    /// Sent at or after `from` and answered at or before `to`.
    pub fn within(&self, from: Instant, to: Instant) -> bool {
        self.sent_at >= from && self.ended_at() <= to
    }
}

/// One event of a load run.
#[derive(Debug, Clone)]
pub struct SentEvent {
    /// Index in its load.
    pub index: usize,
    /// `evt_…`.
    pub provider_event_id: String,
    /// `pi_…`.
    pub payment_id: String,
    /// Amount in centavos (`amount_received` is its negation for poison).
    pub amount: i64,
    /// Sent with a negative `amount_received`: must be dead-lettered.
    pub poison: bool,
    /// Resent once after its first 2xx.
    pub resent: bool,
    /// Sent twice at the same moment.
    pub concurrent: bool,
    /// Ever answered 2xx.
    pub acked: bool,
    body: Arc<Vec<u8>>,
}

/// Live counters of a running load, for deciding when to inject a fault.
#[derive(Debug, Default)]
pub struct Progress {
    /// Events whose first delivery has begun.
    pub started: AtomicUsize,
    /// Events with a 2xx.
    pub acked: AtomicUsize,
    /// Requests awaiting an answer.
    pub in_flight: AtomicUsize,
    /// Requests finished (answer or transport error).
    pub responses: AtomicUsize,
    /// Non-2xx answers and transport errors so far.
    pub failures: AtomicUsize,
    /// HTTP answers so far, any status (resends and twins included).
    pub answered: AtomicUsize,
    /// Set by [`Progress::stop_starting`]: no further event starts.
    stop: std::sync::atomic::AtomicBool,
    attempts: Mutex<Vec<Attempt>>,
    acked_ids: Mutex<HashSet<String>>,
    in_flight_ids: Mutex<HashMap<String, usize>>,
}

impl Progress {
    /// Starts no further event: the run ends once the events already started are delivered, and its report
    /// holds only those (a load that lasts as long as a scenario rather than a fixed count).
    pub fn stop_starting(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Events acknowledged so far.
    pub fn acked(&self) -> usize {
        self.acked.load(Ordering::SeqCst)
    }

    /// Ids of the events acknowledged so far.
    pub fn acked_ids(&self) -> HashSet<String> {
        self.acked_ids.lock().expect("acked ids").clone()
    }

    /// Ids of the events with a request awaiting its answer right now.
    pub fn in_flight_ids(&self) -> HashSet<String> {
        self.in_flight_ids
            .lock()
            .expect("in-flight ids")
            .keys()
            .cloned()
            .collect()
    }

    /// The attempts recorded so far.
    pub fn attempts(&self) -> Vec<Attempt> {
        self.attempts.lock().expect("attempts").clone()
    }

    /// Waits until at least `n` events are acknowledged.
    pub async fn wait_acked(&self, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.acked() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} events acknowledged after {timeout:?}",
                self.acked()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the edge is stuck behind a fail point: at least `min_answered` HTTP answers so far,
    /// requests outstanding, and no answer at all during `quiet`. Returns the ids in flight.
    ///
    /// fail-rs's `sleep` blocks the thread, and an actix worker thread serves many connections: besides the
    /// requests held at the fail point, others on the same thread are stuck wherever they were (possibly after
    /// their commit). Tests must not assume every request in flight is at the fail point.
    pub async fn wait_stalled(
        &self,
        min_answered: usize,
        quiet: Duration,
        timeout: Duration,
    ) -> HashSet<String> {
        let deadline = Instant::now() + timeout;
        let mut seen = (usize::MAX, Instant::now());
        loop {
            let responses = self.responses.load(Ordering::SeqCst);
            if responses != seen.0 {
                seen = (responses, Instant::now());
            } else if seen.1.elapsed() >= quiet
                && self.answered.load(Ordering::SeqCst) >= min_answered
                && self.in_flight.load(Ordering::SeqCst) > 0
            {
                return self.in_flight_ids();
            }
            assert!(
                Instant::now() < deadline,
                "the edge never stalled ({} answered, {} in flight)",
                self.answered.load(Ordering::SeqCst),
                self.in_flight.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn record(&self, a: Attempt) {
        self.responses.fetch_add(1, Ordering::SeqCst);
        if a.status.is_some() {
            self.answered.fetch_add(1, Ordering::SeqCst);
        }
        if !a.is_2xx() {
            self.failures.fetch_add(1, Ordering::SeqCst);
        }
        self.attempts.lock().expect("attempts").push(a);
    }
}

/// Everything a load run did.
#[derive(Debug, Clone)]
pub struct LoadReport {
    /// The load's tag (event id prefix).
    pub tag: String,
    /// Every event, with whether it was acknowledged.
    pub events: Vec<SentEvent>,
    /// Every HTTP attempt, in completion order.
    pub attempts: Vec<Attempt>,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl LoadReport {
    /// Ids of the acknowledged events.
    pub fn acked_ids(&self) -> HashSet<String> {
        self.events
            .iter()
            .filter(|e| e.acked)
            .map(|e| e.provider_event_id.clone())
            .collect()
    }

    /// Events never acknowledged.
    pub fn unacked(&self) -> Vec<&SentEvent> {
        self.events.iter().filter(|e| !e.acked).collect()
    }

    /// Attempts after the first of their delivery.
    pub fn retries(&self) -> usize {
        self.attempts.iter().filter(|a| a.number > 1).count()
    }

    /// Deliveries beyond the first of each event (resends and concurrent twins).
    pub fn duplicate_deliveries(&self) -> usize {
        self.events
            .iter()
            .map(|e| usize::from(e.resent) + usize::from(e.concurrent))
            .sum()
    }

    /// Answers other than 2xx.
    pub fn non_2xx(&self) -> usize {
        self.attempts
            .iter()
            .filter(|a| a.status.is_some() && !a.is_2xx())
            .count()
    }

    /// Attempts that got no HTTP answer.
    pub fn transport_errors(&self) -> usize {
        self.attempts.iter().filter(|a| a.status.is_none()).count()
    }

    /// Number of answers per status (`0` = transport error).
    pub fn statuses(&self) -> BTreeMap<u16, usize> {
        self.attempts.iter().fold(BTreeMap::new(), |mut m, a| {
            *m.entry(a.status.unwrap_or(0)).or_default() += 1;
            m
        })
    }

    /// The attempts of one event, in completion order.
    pub fn attempts_of(&self, provider_event_id: &str) -> Vec<&Attempt> {
        self.attempts
            .iter()
            .filter(|a| a.provider_event_id == provider_event_id)
            .collect()
    }
}

/// A load: N unique Stripe `payment_intent.succeeded` events sent like a provider would.
#[derive(Debug, Clone)]
pub struct Load {
    /// Event id prefix (unique per run): `evt_{tag}_{i}`, `pi_{tag}_{i}`.
    pub tag: String,
    /// Number of unique events.
    pub events: usize,
    /// Events in progress at once.
    pub concurrency: usize,
    /// Every k-th event is resent (exactly) after its 2xx; 0 = never.
    pub resend_every: usize,
    /// Every k-th event is sent twice at the same moment; 0 = never.
    pub concurrent_every: usize,
    /// Start at most this many events per second (None = as fast as the concurrency allows).
    pub rate_per_sec: Option<f64>,
    /// Indices of events sent with a negative `amount_received` (must be dead-lettered).
    pub poison: Vec<usize>,
    /// Attempts per delivery.
    pub max_attempts: u32,
    /// Time per delivery across its attempts.
    pub retry_budget: Duration,
    /// Per-request timeout (a provider gives up waiting and retries).
    pub request_timeout: Duration,
}

impl Load {
    /// `events` unique events, 8 at a time, 20 % resent, 10 % sent twice at once, retried up to 60 times
    /// within 60 s.
    pub fn new(tag: &str, events: usize) -> Load {
        Load {
            tag: tag.to_string(),
            events,
            concurrency: 8,
            resend_every: 5,
            concurrent_every: 10,
            rate_per_sec: None,
            poison: Vec::new(),
            max_attempts: 60,
            retry_budget: Duration::from_secs(60),
            request_timeout: Duration::from_secs(10),
        }
    }

    /// Paces event starts at `per_sec`.
    pub fn rate(mut self, per_sec: f64) -> Load {
        self.rate_per_sec = Some(per_sec);
        self
    }

    /// Sends event `index` as poison.
    pub fn poison(mut self, index: usize) -> Load {
        self.poison.push(index);
        self
    }

    /// No resends and no concurrent twins: exactly one delivery per event.
    pub fn unique_only(mut self) -> Load {
        self.resend_every = 0;
        self.concurrent_every = 0;
        self
    }

    /// The amount of event `i`: varied, with every 7th a multiple of 5000 (its fee has an exact half to round).
    pub fn amount(i: usize) -> i64 {
        let i = i as i64;
        if i % 7 == 0 {
            5_000 * (1 + i % 9)
        } else {
            1_000 + (i * 7_919) % 90_000
        }
    }

    fn build_events(&self) -> Vec<SentEvent> {
        (0..self.events)
            .map(|i| {
                let provider_event_id = format!("evt_{}_{i}", self.tag);
                let payment_id = format!("pi_{}_{i}", self.tag);
                let amount = Self::amount(i);
                let poison = self.poison.contains(&i);
                let body = if poison {
                    let mut object =
                        stripe::payment_intent_object(&payment_id, "succeeded", amount);
                    object["amount_received"] = (-amount).into();
                    stripe::fixed_event(&provider_event_id, "payment_intent.succeeded", object)
                } else {
                    stripe::payment_intent(&provider_event_id, "succeeded", &payment_id, amount)
                };
                SentEvent {
                    index: i,
                    provider_event_id,
                    payment_id,
                    amount,
                    poison,
                    resent: self.resend_every > 0 && i % self.resend_every == 1,
                    concurrent: self.concurrent_every > 0 && i % self.concurrent_every == 3,
                    acked: false,
                    body: Arc::new(body),
                }
            })
            .collect()
    }

    /// Starts the load against `base` (`http://127.0.0.1:PORT`) in the background.
    pub fn start(&self, base: &str) -> LoadRun {
        let progress = Arc::new(Progress::default());
        let load = self.clone();
        let url = format!("{base}/webhooks/stripe");
        let p = progress.clone();
        let handle = tokio::spawn(async move { load.run(url, p).await });
        LoadRun { progress, handle }
    }

    async fn run(self, url: String, progress: Arc<Progress>) -> LoadReport {
        let started = Instant::now();
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(self.concurrency * 2)
            .build()
            .expect("http client");
        let events = self.build_events();
        let permits = Arc::new(tokio::sync::Semaphore::new(self.concurrency.max(1)));
        let load = Arc::new(self);
        let mut tasks = Vec::with_capacity(events.len());
        for (i, event) in events.into_iter().enumerate() {
            if let Some(rate) = load.rate_per_sec {
                let at = started + Duration::from_secs_f64(i as f64 / rate);
                tokio::time::sleep_until(at.into()).await;
            }
            if progress.stop.load(Ordering::SeqCst) {
                break;
            }
            let permit = permits.clone().acquire_owned().await.expect("semaphore");
            progress.started.fetch_add(1, Ordering::SeqCst);
            let (client, url, progress, load) =
                (client.clone(), url.clone(), progress.clone(), load.clone());
            tasks.push(tokio::spawn(async move {
                let mut event = event;
                let first = deliver(&client, &url, &progress, &load, &event, Delivery::First);
                event.acked = if event.concurrent {
                    let twin = deliver(
                        &client,
                        &url,
                        &progress,
                        &load,
                        &event,
                        Delivery::Concurrent,
                    );
                    let (a, b) = tokio::join!(first, twin);
                    a || b
                } else {
                    first.await
                };
                if event.acked && event.resent {
                    deliver(&client, &url, &progress, &load, &event, Delivery::Resend).await;
                }
                drop(permit);
                event
            }));
        }
        let mut events = Vec::with_capacity(tasks.len());
        for t in tasks {
            events.push(t.await.expect("load task"));
        }
        events.sort_by_key(|e| e.index);
        LoadReport {
            tag: load.tag.clone(),
            events,
            attempts: progress.attempts(),
            elapsed: started.elapsed(),
        }
    }
}

/// Sends one delivery of `event`, retrying like a provider on non-2xx answers and transport errors. Returns
/// whether it was acknowledged.
async fn deliver(
    client: &reqwest::Client,
    url: &str,
    progress: &Progress,
    load: &Load,
    event: &SentEvent,
    delivery: Delivery,
) -> bool {
    let deadline = Instant::now() + load.retry_budget;
    let mut backoff = Duration::from_millis(50);
    for number in 1..=load.max_attempts {
        // Each attempt is signed anew (a provider signs every delivery attempt); the body is byte-identical.
        let headers = stripe_headers(secrets::STRIPE, now(), &event.body);
        let mut req = client
            .post(url)
            .timeout(load.request_timeout)
            .body(event.body.as_ref().clone());
        for (k, v) in &headers {
            req = req.header(k.as_str(), v.as_str());
        }
        progress.in_flight.fetch_add(1, Ordering::SeqCst);
        *progress
            .in_flight_ids
            .lock()
            .expect("in-flight ids")
            .entry(event.provider_event_id.clone())
            .or_default() += 1;
        let sent_at = Instant::now();
        let result = req.send().await;
        let latency = sent_at.elapsed();
        let (status, duplicate, retry_after, error) = match result {
            Ok(res) => {
                let status = res.status().as_u16();
                let retry_after = res
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                let duplicate = res
                    .bytes()
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .and_then(|v| v.get("duplicate").and_then(Value::as_bool));
                (Some(status), duplicate, retry_after, None)
            }
            Err(e) => (None, None, None, Some(format!("{e:?}"))),
        };
        {
            let mut ids = progress.in_flight_ids.lock().expect("in-flight ids");
            if let Some(n) = ids.get_mut(&event.provider_event_id) {
                *n -= 1;
                if *n == 0 {
                    ids.remove(&event.provider_event_id);
                }
            }
        }
        progress.in_flight.fetch_sub(1, Ordering::SeqCst);
        let attempt = Attempt {
            event: event.index,
            provider_event_id: event.provider_event_id.clone(),
            delivery,
            number,
            sent_at,
            latency,
            status,
            duplicate,
            retry_after,
            error,
        };
        let ok = attempt.is_2xx();
        if ok {
            // Mark acknowledged before recording, so a test reading both never sees a 2xx of an unacked event.
            let new = progress
                .acked_ids
                .lock()
                .expect("acked ids")
                .insert(event.provider_event_id.clone());
            if new {
                progress.acked.fetch_add(1, Ordering::SeqCst);
            }
        }
        progress.record(attempt);
        if ok {
            return true;
        }
        if Instant::now() + backoff > deadline {
            break;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
    false
}

/// A load running in the background.
pub struct LoadRun {
    /// Live counters.
    pub progress: Arc<Progress>,
    handle: tokio::task::JoinHandle<LoadReport>,
}

impl LoadRun {
    /// Waits for every event's deliveries to finish.
    pub async fn finish(self) -> LoadReport {
        self.handle.await.expect("load driver")
    }
}

/// Runs a load to completion.
pub async fn send_all(load: &Load, base: &str) -> LoadReport {
    load.start(base).finish().await
}
