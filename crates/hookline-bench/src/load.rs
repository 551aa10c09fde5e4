//! The load generator: plain HTTP/1.1 connections (hyper, one connection per task, keep-alive), driven either
//! closed-loop (each task sends its next delivery as soon as the previous one is answered: maximum throughput) or
//! open-loop (deliveries scheduled at fixed intervals whatever the answers; latency counted from the *scheduled*
//! send time, so a slow answer cannot hide the queueing it causes — no coordinated omission).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::client::conn::http1;
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::TcpStream;

use crate::gen::{Delivery, Plan};
use crate::stats::micros;

/// Longest a single request may take before it counts as a transport failure. The edge answers 503 after its
/// 1.5 s database budget, so anything near this means something is badly wrong.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the edge answered to one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 200, stored now: `{"duplicate":false,"id":N}`.
    Stored(i64),
    /// 200, already stored: `{"duplicate":true,"id":N}`.
    Duplicate(Option<i64>),
    /// Any other HTTP status (400 = the benchmark's bug, 503 = overload).
    Status(u16),
    /// Connection failure or timeout: no answer.
    Transport,
}

impl Answer {
    /// True for a 200 (the provider would consider the delivery done).
    pub fn acknowledged(&self) -> bool {
        matches!(self, Answer::Stored(_) | Answer::Duplicate(_))
    }
}

/// One request's outcome.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Index of the delivery in its plan.
    pub index: u32,
    /// Latency in µs: from the scheduled send time (open loop) or the actual send (closed loop) to the answer.
    pub latency_us: u32,
    /// Service time in µs: from the actual send to the answer (equals `latency_us` in a closed loop).
    pub service_us: u32,
    /// The answer.
    pub answer: Answer,
}

/// The outcome of one load run.
#[derive(Debug, Default)]
pub struct RunResult {
    /// Every answered (or failed) request.
    pub samples: Vec<Sample>,
    /// From the first scheduled send to the last answer.
    pub elapsed: Duration,
    /// True when the run stopped because the plan ran out before the duration.
    pub exhausted: bool,
    /// When the load started.
    pub started: Option<Instant>,
}

impl RunResult {
    /// Acknowledged (200) requests per second.
    pub fn ack_rate(&self) -> f64 {
        let acked = self
            .samples
            .iter()
            .filter(|s| s.answer.acknowledged())
            .count();
        acked as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Where the edge listens and which provider path is loaded.
#[derive(Debug, Clone)]
pub struct Target {
    /// Edge address.
    pub addr: SocketAddr,
    uri: Uri,
    host: HeaderValue,
}

impl Target {
    /// `POST http://{addr}/webhooks/{provider}`.
    pub fn new(addr: SocketAddr, provider: &str) -> anyhow::Result<Target> {
        Ok(Target {
            addr,
            uri: format!("/webhooks/{provider}")
                .parse()
                .context("webhook path")?,
            host: HeaderValue::from_str(&addr.to_string()).context("host header")?,
        })
    }
}

#[derive(Deserialize)]
struct AckBody {
    duplicate: bool,
    id: Option<i64>,
}

/// One keep-alive HTTP/1.1 connection, reopened when the server closed it (idle keep-alive timeout).
struct Conn {
    addr: SocketAddr,
    sender: Option<http1::SendRequest<Full<Bytes>>>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> anyhow::Result<Conn> {
        let mut c = Conn { addr, sender: None };
        c.connect().await?;
        Ok(c)
    }

    async fn connect(&mut self) -> anyhow::Result<()> {
        let stream = TcpStream::connect(self.addr)
            .await
            .with_context(|| format!("connect to the edge at {}", self.addr))?;
        stream.set_nodelay(true).context("TCP_NODELAY")?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP/1.1 handshake")?;
        tokio::spawn(async move {
            // Ends when the server closes the connection or the sender is dropped; either is normal here.
            let _ = conn.await;
        });
        self.sender = Some(sender);
        Ok(())
    }

    fn request(target: &Target, d: &Delivery) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(d.body.clone()));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = target.uri.clone();
        let h = req.headers_mut();
        h.insert(HOST, target.host.clone());
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert("stripe-signature", d.signature.clone());
        req
    }

    async fn try_send(&mut self, target: &Target, d: &Delivery) -> anyhow::Result<Answer> {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            self.connect().await?;
        }
        let sender = self.sender.as_mut().context("no connection")?;
        sender.ready().await.context("connection not ready")?;
        let resp = sender
            .send_request(Self::request(target, d))
            .await
            .context("send request")?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .context("read response")?
            .to_bytes();
        if status != 200 {
            return Ok(Answer::Status(status));
        }
        let ack: AckBody = serde_json::from_slice(&body).context("parse the edge's answer")?;
        Ok(if ack.duplicate {
            Answer::Duplicate(ack.id)
        } else {
            Answer::Stored(ack.id.context("stored answer without id")?)
        })
    }

    /// Sends `d`; on a connection failure reconnects and tries once more (a delivery repeated after a lost
    /// answer is exactly a provider's retry, which the edge must deduplicate anyway).
    async fn send(&mut self, target: &Target, d: &Delivery) -> Answer {
        for _attempt in 0..2 {
            match tokio::time::timeout(REQUEST_TIMEOUT, self.try_send(target, d)).await {
                Ok(Ok(answer)) => return answer,
                Ok(Err(_)) | Err(_) => self.sender = None,
            }
        }
        Answer::Transport
    }
}

/// Opens `n` connections up front, so connection set-up is not measured.
async fn open_all(addr: SocketAddr, n: usize) -> anyhow::Result<Vec<Conn>> {
    futures::future::try_join_all((0..n).map(|_| Conn::open(addr))).await
}

/// Closed loop: `connections` tasks send back to back until `duration` passes or the plan runs out.
pub async fn closed_loop(
    target: &Target,
    plan: Arc<Plan>,
    connections: usize,
    duration: Duration,
) -> anyhow::Result<RunResult> {
    let conns = open_all(target.addr, connections).await?;
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|mut conn| {
            let (plan, next, target) = (plan.clone(), next.clone(), target.clone());
            tokio::spawn(async move {
                let mut samples = Vec::with_capacity(plan.len() / connections.max(1) + 16);
                let mut exhausted = false;
                loop {
                    if Instant::now() >= deadline {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(d) = plan.deliveries.get(i) else {
                        exhausted = true;
                        break;
                    };
                    let sent = Instant::now();
                    let answer = conn.send(&target, d).await;
                    let us = micros(sent.elapsed());
                    samples.push(Sample {
                        index: i as u32,
                        latency_us: us,
                        service_us: us,
                        answer,
                    });
                }
                (samples, exhausted, Instant::now())
            })
        })
        .collect();
    collect(tasks, started).await
}

/// Open loop: delivery `i` is due at `start + i / rate`; `connections` tasks take the next due delivery, wait
/// for its time and send it. When every connection is busy a delivery goes out late, and its latency still
/// counts from when it was due.
pub async fn open_loop(
    target: &Target,
    plan: Arc<Plan>,
    rate: f64,
    connections: usize,
) -> anyhow::Result<RunResult> {
    anyhow::ensure!(rate > 0.0, "offered rate must be positive");
    let conns = open_all(target.addr, connections).await?;
    let next = Arc::new(AtomicUsize::new(0));
    // A short lead so every task is parked on its first deadline before the schedule starts.
    let started = Instant::now() + Duration::from_millis(20);
    let interval = 1.0 / rate;
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|mut conn| {
            let (plan, next, target) = (plan.clone(), next.clone(), target.clone());
            tokio::spawn(async move {
                let mut samples = Vec::with_capacity(plan.len() / connections.max(1) + 16);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(d) = plan.deliveries.get(i) else {
                        break;
                    };
                    let due = started + Duration::from_secs_f64(interval * i as f64);
                    tokio::time::sleep_until(due.into()).await;
                    let sent = Instant::now();
                    let answer = conn.send(&target, d).await;
                    let done = Instant::now();
                    samples.push(Sample {
                        index: i as u32,
                        latency_us: micros(done.saturating_duration_since(due)),
                        service_us: micros(done - sent),
                        answer,
                    });
                }
                (samples, false, Instant::now())
            })
        })
        .collect();
    collect(tasks, started).await
}

type TaskOutput = (Vec<Sample>, bool, Instant);

async fn collect(
    tasks: Vec<tokio::task::JoinHandle<TaskOutput>>,
    started: Instant,
) -> anyhow::Result<RunResult> {
    let mut result = RunResult {
        started: Some(started),
        ..Default::default()
    };
    let mut last = started;
    for t in tasks {
        let (samples, exhausted, finished) = t.await.context("load task panicked")?;
        result.samples.extend(samples);
        result.exhausted |= exhausted;
        last = last.max(finished);
    }
    result.elapsed = last.saturating_duration_since(started);
    Ok(result)
}

/// `GET {path}` on a fresh connection; the status, or `None` when the edge does not answer.
pub async fn get_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let attempt = async {
        let stream = TcpStream::connect(addr).await.ok()?;
        let (mut sender, conn) = http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
            .ok()?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = Request::builder()
            .uri(path)
            .header(HOST, addr.to_string())
            .body(Empty::new())
            .ok()?;
        let resp = sender.send_request(req).await.ok()?;
        Some(resp.status().as_u16())
    };
    tokio::time::timeout(Duration::from_secs(2), attempt)
        .await
        .ok()
        .flatten()
}
