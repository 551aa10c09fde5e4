//! Sending: the order of the requests (every event once, plus re-sends) and one signed HTTP request per event,
//! signed anew at each send as a provider signs each delivery attempt.

use std::time::{Duration, Instant};

use hookline_fake::{headers_for, unix_now, Event, Rng, Signed};
use hookline_signature::Scheme;
use serde_json::Value;

/// The order of requests: every event once, plus `round(duplicates × events)` re-sends of distinct events
/// chosen at random; re-sends go last (a provider's retry comes later) unless everything is shuffled.
pub(super) fn plan(rng: &mut Rng, events: usize, duplicates: f64, shuffle: bool) -> Vec<usize> {
    let extra = ((events as f64) * duplicates).round() as usize;
    let mut picks: Vec<usize> = (0..events).collect();
    rng.shuffle(&mut picks);
    picks.truncate(extra.min(events));
    picks.sort_unstable();
    let mut plan: Vec<usize> = (0..events).chain(picks).collect();
    if shuffle {
        rng.shuffle(&mut plan);
    }
    plan
}

/// The signed request of `event` at the current time: the query string and the headers.
pub(super) fn signed_request(
    scheme: Scheme,
    secret: &[u8],
    event: &Event,
) -> anyhow::Result<Signed> {
    headers_for(scheme, secret, event, unix_now()).map_err(anyhow::Error::msg)
}

/// What one request got.
pub(super) enum Reply {
    /// An HTTP answer: status, whether the edge called it a duplicate, latency, a body excerpt for errors.
    Http {
        status: u16,
        duplicate: bool,
        latency: Duration,
        detail: String,
    },
    /// The request did not complete (connection refused, reset, timeout).
    Transport(String),
}

/// Signs and sends `event` to `endpoint`.
pub(super) async fn send(
    client: &reqwest::Client,
    endpoint: &str,
    scheme: Scheme,
    secret: &[u8],
    event: &Event,
) -> Reply {
    let Signed { query, headers } = match signed_request(scheme, secret, event) {
        Ok(parts) => parts,
        Err(e) => return Reply::Transport(format!("cannot sign {}: {e:#}", event.kind)),
    };
    let url = if query.is_empty() {
        endpoint.to_string()
    } else {
        format!("{endpoint}?{query}")
    };
    let mut request = client.post(url).body(event.body.clone());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let started = Instant::now();
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => return Reply::Transport(format!("{:#}", anyhow::Error::new(e))),
    };
    let status = response.status().as_u16();
    let text = match response.text().await {
        Ok(text) => text,
        Err(e) => return Reply::Transport(format!("{:#}", anyhow::Error::new(e))),
    };
    let latency = started.elapsed();
    let duplicate = status == 200
        && serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v.get("duplicate").and_then(Value::as_bool))
            .unwrap_or(false);
    Reply::Http {
        status,
        duplicate,
        latency,
        detail: format!("{} -> {status} {}", event.kind, excerpt(&text, 200)),
    }
}

fn excerpt(text: &str, max: usize) -> String {
    let text = text.trim();
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_adds_distinct_resends() {
        let mut rng = Rng::new(7);
        let plan = plan(&mut rng, 30, 0.3, true);
        assert_eq!(plan.len(), 39);
        let mut sorted = plan.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 30, "every event at least once");
        let plan_full = super::plan(&mut rng, 4, 1.0, false);
        assert_eq!(plan_full, vec![0, 1, 2, 3, 0, 1, 2, 3]);
    }

    #[test]
    fn excerpt_cuts_on_characters() {
        assert_eq!(excerpt("  ãbc  ", 2), "ãb…");
        assert_eq!(excerpt("ok", 5), "ok");
    }
}
