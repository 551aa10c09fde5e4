//! A merchant's webhook receiver, as the tests of domain events out need one: a real HTTP server on loopback that
//! verifies every request with the reference Standard Webhooks verifier (`hookline-signature`), deduplicates by
//! `webhook-id` the way docs/domain-events.md tells receivers to, and misbehaves on purpose per destination (fails the first
//! attempts, times out once, answers slowly, answers 410 Gone).

use std::collections::{HashMap, HashSet};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use hookline_signature::{Request, Scheme, Verifier};

/// How one destination's endpoint answers.
#[derive(Debug, Clone)]
pub enum Behaviour {
    /// 200 at once.
    Ok,
    /// For each `webhook-id`: 503 to the first `fail_first` attempts (with `Retry-After: 0` on every other
    /// one), then — once for the whole endpoint — an answer later than `timeout_after` (the sender gives up and
    /// retries, though the receiver acted), then 200 after `slow` each time.
    Flaky {
        /// Attempts of each id that fail with 503.
        fail_first: u32,
        /// The one slow-beyond-the-sender's-timeout answer waits this long.
        timeout_after: Duration,
        /// Every later answer waits this long.
        slow: Duration,
    },
    /// 410 Gone.
    Gone,
    /// 500 (no `Retry-After`) to the first attempt of each `webhook-id`, 200 to every later one.
    FailFirstAttempt,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Which endpoint (`/hooks/{destination}`).
    pub destination: String,
    /// `webhook-id`.
    pub webhook_id: String,
    /// Whether the signature verified with the destination's secrets.
    pub signature_valid: bool,
    /// The body.
    pub body: Vec<u8>,
    /// The status answered.
    pub status: u16,
    /// The W3C `traceparent` header, when the sender set one.
    pub traceparent: Option<String>,
}

#[derive(Default)]
struct State {
    behaviour: HashMap<String, Behaviour>,
    secrets: HashMap<String, Vec<String>>,
    received: Vec<Received>,
    attempts: HashMap<(String, String), u32>,
    /// Per destination, the ids acted on (the receiver's deduplication table).
    acted: HashMap<String, HashSet<String>>,
    /// Per destination, how many times an id was acted on (must stay 1).
    acted_count: HashMap<(String, String), u32>,
    timed_out_once: HashSet<String>,
}

/// The running receiver.
pub struct Receiver {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    state: Arc<Mutex<State>>,
    handle: ServerHandle,
}

impl Receiver {
    /// Starts on a free loopback port.
    pub fn start() -> Receiver {
        let state = Arc::new(Mutex::new(State::default()));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let port = listener.local_addr().expect("address").port();
        let data = web::Data::new(state.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .route("/hooks/{destination}", web::post().to(receive))
        })
        .workers(2)
        .disable_signals()
        .listen(listener)
        .expect("listen")
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Receiver {
            base: format!("http://127.0.0.1:{port}"),
            state,
            handle,
        }
    }

    /// The URL of `destination`'s endpoint.
    pub fn url(&self, destination: &str) -> String {
        format!("{}/hooks/{destination}", self.base)
    }

    /// Sets how `destination` answers and which secrets verify its requests.
    pub fn configure(&self, destination: &str, behaviour: Behaviour, secrets: &[&str]) {
        let mut s = self.state.lock().expect("receiver state");
        s.behaviour.insert(destination.to_owned(), behaviour);
        s.secrets.insert(
            destination.to_owned(),
            secrets.iter().map(|x| x.to_string()).collect(),
        );
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.state.lock().expect("receiver state").received.clone()
    }

    /// The ids `destination` acted on.
    pub fn acted(&self, destination: &str) -> HashSet<String> {
        self.state
            .lock()
            .expect("receiver state")
            .acted
            .get(destination)
            .cloned()
            .unwrap_or_default()
    }

    /// The largest number of times any one id was acted on at any destination (1 = exactly once).
    pub fn max_acted_per_id(&self) -> u32 {
        self.state
            .lock()
            .expect("receiver state")
            .acted_count
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Stops the server (at most 30 s: a stop that hangs fails the test).
    pub async fn stop(self) {
        crate::within(
            Duration::from_secs(30),
            "the receiver's stop",
            self.handle.stop(false),
        )
        .await;
    }
}

async fn receive(
    req: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
    state: web::Data<Arc<Mutex<State>>>,
) -> HttpResponse {
    let destination = path.into_inner();
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let webhook_id = header("webhook-id");
    let (behaviour, secrets) = {
        let s = state.lock().expect("receiver state");
        (
            s.behaviour
                .get(&destination)
                .cloned()
                .unwrap_or(Behaviour::Ok),
            s.secrets.get(&destination).cloned().unwrap_or_default(),
        )
    };
    let headers: Vec<(String, String)> = ["webhook-id", "webhook-timestamp", "webhook-signature"]
        .iter()
        .map(|n| (n.to_string(), header(n)))
        .collect();
    let header_refs: Vec<(&str, &[u8])> = headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_bytes()))
        .collect();
    let secret_refs: Vec<&[u8]> = secrets.iter().map(|s| s.as_bytes()).collect();
    let signature_valid = Verifier {
        scheme: Scheme::StandardWebhooks,
        secrets: &secret_refs,
        tolerance_secs: None,
        now_unix: crate::now(),
    }
    .verify(&Request {
        headers: &header_refs,
        query: "",
        body: &body,
    })
    .is_ok_and(|v| v.event_id == webhook_id);

    let attempt = {
        let mut s = state.lock().expect("receiver state");
        let n = s
            .attempts
            .entry((destination.clone(), webhook_id.clone()))
            .or_default();
        *n += 1;
        *n
    };
    let (status, delay) = if !signature_valid {
        (400, Duration::ZERO)
    } else {
        match &behaviour {
            Behaviour::Ok => (200, Duration::ZERO),
            Behaviour::Gone => (410, Duration::ZERO),
            Behaviour::FailFirstAttempt if attempt == 1 => (500, Duration::ZERO),
            Behaviour::FailFirstAttempt => (200, Duration::ZERO),
            Behaviour::Flaky {
                fail_first,
                timeout_after,
                slow,
            } => {
                if attempt <= *fail_first {
                    (503, Duration::ZERO)
                } else {
                    let first_timeout = state
                        .lock()
                        .expect("receiver state")
                        .timed_out_once
                        .insert(destination.clone());
                    (200, if first_timeout { *timeout_after } else { *slow })
                }
            }
        }
    };
    if status == 200 {
        // Act (deduplicated by webhook-id), then answer — possibly too late for the sender.
        let mut s = state.lock().expect("receiver state");
        let fresh = s
            .acted
            .entry(destination.clone())
            .or_default()
            .insert(webhook_id.clone());
        if fresh {
            *s.acted_count
                .entry((destination.clone(), webhook_id.clone()))
                .or_default() += 1;
        }
    }
    state
        .lock()
        .expect("receiver state")
        .received
        .push(Received {
            destination,
            webhook_id,
            signature_valid,
            body: body.to_vec(),
            status,
            traceparent: Some(header("traceparent")).filter(|t| !t.is_empty()),
        });
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let mut res =
        HttpResponse::build(actix_web::http::StatusCode::from_u16(status).expect("valid status"));
    if status == 503 && attempt % 2 == 1 {
        res.insert_header(("Retry-After", "0"));
    }
    res.body(format!("status {status}"))
}
