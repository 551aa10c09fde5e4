//! Everything the sandbox remembers, behind one mutex: the providers' objects, idempotency keys, armed faults,
//! the webhook deliveries and their attempts. Never held across an `.await`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use url::Url;

use crate::clock::SandboxClock;
use crate::delivery::{Delivery, DeliveryBehaviour};
use crate::faults::Faults;
use crate::idempotency::IdempotencyStore;
use crate::mercadopago::book::MpBook;
use crate::pagarme_v5::book::PgBook;
use crate::rng::SeededRng;
use crate::scripts::Scripts;
use crate::settings::{SandboxProvider, SandboxSettings, Scheme};
use crate::stripe::book::StripeBook;

/// Most API requests kept in the request log.
const MAX_REQUEST_LOG: usize = 10_000;

/// Timings from the settings, read by handlers and the delivery loop.
#[derive(Debug, Clone)]
pub(crate) struct Timing {
    pub(crate) webhook_timeout: Duration,
    pub(crate) webhook_max_attempts: u32,
    pub(crate) webhook_backoff: Duration,
    pub(crate) webhook_max_backoff: Duration,
    pub(crate) api_latency: Duration,
}

/// State shared by the HTTP workers, the delivery loop and the in-process control handle.
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Wakes the delivery loop when a delivery is queued or its schedule changes.
    pub(crate) wake: Notify,
    pub(crate) timing: Timing,
    pub(crate) edge_url: Url,
    pub(crate) seed: u64,
    pub(crate) client: reqwest::Client,
    /// Passes the delivery loop has made over the deliveries ([`crate::SandboxControl::delivery_rounds`]): a test
    /// waits for the loop to have looked at what it queued, instead of sleeping and hoping it did.
    pub(crate) delivery_rounds: std::sync::atomic::AtomicU64,
}

impl Shared {
    pub(crate) fn new(settings: &SandboxSettings) -> anyhow::Result<Shared> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none()) // as the real senders: a 3xx is a failed delivery
            .timeout(settings.webhook_timeout)
            .pool_max_idle_per_host(16)
            .build()?;
        Ok(Shared {
            state: Mutex::new(State::new(settings)),
            wake: Notify::new(),
            delivery_rounds: std::sync::atomic::AtomicU64::new(0),
            timing: Timing {
                webhook_timeout: settings.webhook_timeout,
                webhook_max_attempts: settings.webhook_max_attempts.max(1),
                webhook_backoff: settings.webhook_backoff,
                webhook_max_backoff: settings.webhook_max_backoff,
                api_latency: settings.api_latency,
            },
            edge_url: settings.edge_url.clone(),
            seed: settings.seed,
            client,
        })
    }

    /// The state; a panic that poisoned the lock leaves the data usable (every mutation is applied whole).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Counters of one idempotency key, for tests that count charges at the gateway.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct KeyStats {
    /// Requests that presented the key.
    pub requests: u32,
    /// Requests that executed (the first, or a retry after an unsaved failure or expiry).
    pub executed: u32,
    /// Requests answered with the saved response.
    pub replays: u32,
    /// Requests refused because the first one was still executing (409) or used other parameters (400).
    pub conflicts: u32,
    /// Charges (Stripe and Pagar.me `ch_…`, failed ones included) or payments (Mercado Pago) created under the
    /// key.
    pub charges: u32,
    /// Ids of every object created under the key, in order.
    pub objects: Vec<String>,
}

/// An outcome forced for the next charge (Stripe: `succeeded`, or `declined` with the decline code as
/// `status_detail`), payment (Mercado Pago: `approved`, `pending`, `in_process`, `rejected`, with an optional
/// `status_detail`) or card charge (Pagar.me: `paid`, `processing`, or `failed` with a decline name such as
/// `insufficient_funds` as `status_detail`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outcome {
    /// The status.
    pub status: String,
    /// Stripe's decline code, Mercado Pago's `status_detail`, or a Pagar.me decline name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_detail: Option<String>,
}

/// One API request as the sandbox saw it (control requests are not logged).
#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord {
    /// When it arrived, unix milliseconds.
    pub at_ms: i64,
    /// `GET`, `POST`, …
    pub method: String,
    /// The path.
    pub path: String,
    /// The raw query string.
    pub query: String,
    /// The status answered (0 when the connection was reset before an answer).
    pub status: u16,
    /// `Idempotency-Key` (Stripe, Pagar.me) or `X-Idempotency-Key` (Mercado Pago), if sent.
    pub idempotency_key: Option<String>,
    /// Whether the answer was a Stripe idempotent replay.
    pub replayed: bool,
    /// The fault injected into it, if any.
    pub fault: Option<String>,
    /// Time to the answer, fault delays included.
    pub latency_ms: u64,
}

pub(crate) struct ProviderBook {
    pub(crate) config: SandboxProvider,
    pub(crate) idempotency: IdempotencyStore,
    pub(crate) keys: BTreeMap<String, KeyStats>,
    /// Outcomes forced by the control API for the next charges/payments.
    pub(crate) outcomes: VecDeque<Outcome>,
    /// Card-use scripts and use counts of the saved payment methods.
    pub(crate) scripts: Scripts,
    pub(crate) stripe: StripeBook,
    pub(crate) mp: MpBook,
    pub(crate) pagarme: PgBook,
}

impl ProviderBook {
    /// Notes an object created under `key` (no-op without a key).
    pub(crate) fn created(&mut self, key: Option<&str>, object: &str, is_charge: bool) {
        if let Some(key) = key {
            let stats = self.keys.entry(key.to_owned()).or_default();
            stats.objects.push(object.to_owned());
            if is_charge {
                stats.charges += 1;
            }
        }
    }

    pub(crate) fn key_stats(&mut self, key: &str) -> &mut KeyStats {
        self.keys.entry(key.to_owned()).or_default()
    }
}

pub(crate) struct State {
    pub(crate) rng: SeededRng,
    pub(crate) providers: Vec<ProviderBook>,
    pub(crate) faults: Faults,
    pub(crate) behaviour: DeliveryBehaviour,
    pub(crate) deliveries: BTreeMap<u64, Delivery>,
    pub(crate) next_delivery_id: u64,
    pub(crate) requests: VecDeque<RequestRecord>,
    /// The sandbox's clock (key expiry, Pagar.me's dates), movable ahead by the control API.
    pub(crate) clock: SandboxClock,
    idempotency_window: Duration,
}

impl State {
    fn new(settings: &SandboxSettings) -> State {
        let mut rng = SeededRng::new(settings.seed);
        let providers = settings
            .providers
            .iter()
            .map(|p| ProviderBook {
                config: p.clone(),
                idempotency: IdempotencyStore::new(settings.idempotency_window),
                keys: BTreeMap::new(),
                outcomes: VecDeque::new(),
                scripts: Scripts::default(),
                stripe: StripeBook::default(),
                mp: MpBook::new(rng.between(100_000_000, 999_999_999)),
                // Drawn for Pagar.me providers only: the other providers' ids stay what a seed gave them before.
                pagarme: PgBook::new(if p.scheme == Scheme::PagarmeV5 {
                    rng.id("acc", 16)
                } else {
                    String::new()
                }),
            })
            .collect();
        State {
            rng,
            providers,
            faults: Faults::default(),
            behaviour: DeliveryBehaviour::default(),
            deliveries: BTreeMap::new(),
            next_delivery_id: 1,
            requests: VecDeque::new(),
            clock: SandboxClock::default(),
            idempotency_window: settings.idempotency_window,
        }
    }

    /// Forgets every object, key, fault, delivery and behaviour, and sets the clock back to the real one. The
    /// generator is NOT re-seeded: ids created after a reset never repeat ids created before it (the edge would
    /// take them for duplicates).
    pub(crate) fn reset(&mut self) {
        for p in &mut self.providers {
            p.idempotency = IdempotencyStore::new(self.idempotency_window);
            p.keys.clear();
            p.outcomes.clear();
            p.scripts = Scripts::default();
            p.stripe = StripeBook::default();
            p.mp = MpBook::new(p.mp.user_id);
            p.pagarme = PgBook::new(p.pagarme.account_id.clone());
        }
        self.clock = SandboxClock::default();
        self.faults = Faults::default();
        self.behaviour = DeliveryBehaviour::default();
        self.deliveries.clear();
        self.requests.clear();
    }

    pub(crate) fn provider_index(&self, name: &str) -> Option<usize> {
        self.providers.iter().position(|p| p.config.name == name)
    }

    pub(crate) fn log_request(&mut self, record: RequestRecord) {
        if self.requests.len() >= MAX_REQUEST_LOG {
            self.requests.pop_front();
        }
        self.requests.push_back(record);
    }
}
