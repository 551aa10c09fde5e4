//! One connection and one confirm-mode channel that publish pipelined batches with `mandatory` and publisher
//! confirms, every step bounded in time. Shared by the webhook relay, the domain relay and the operator engines
//! (replay, dead-letter redrive).
//!
//! Why every await here has a deadline: lapin resolves a publish when its frames have been written. A publish
//! queued while the broker is closing the connection (`CONNECTION_FORCED`, a node shutting down) can be left
//! with neither a write nor an error, and its future never resolves (amqp-rs/lapin#409). The fault suite saw
//! exactly that: after the second `rabbitmqctl close_all_connections` both relays stayed silent for a minute
//! with events waiting, while the consumer (which does not publish) reconnected at once. A publisher that hangs
//! is indistinguishable from a dead thread, so a batch has one deadline for its writes and its confirms, and
//! closing is bounded too.

use std::time::Duration;

use anyhow::Context;
use futures::future::join_all;
use hookline_core::config::AmqpEndpoints;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Channel, Connection};
use tokio::time::Instant;

use crate::metric;
use crate::{EventMessage, Topology};
use hookline_core::telemetry;

/// The AMQP header carrying the W3C trace context of the span that published a message.
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// `properties` with a `traceparent` header naming `span` (when it has a trace): the consumer's span becomes its
/// child. Any headers already set are kept.
pub fn with_traceparent(properties: BasicProperties, span: &tracing::Span) -> BasicProperties {
    let Some(tp) = telemetry::traceparent(span) else {
        return properties;
    };
    let mut headers = properties.headers().clone().unwrap_or_default();
    headers.insert(
        TRACEPARENT_HEADER.into(),
        lapin::types::AMQPValue::LongString(tp.into()),
    );
    properties.with_headers(headers)
}

/// The `traceparent` header of a delivered message, if it has a string one (bounded by
/// [`telemetry::parse_traceparent`] where it is used).
pub fn traceparent_of(properties: &BasicProperties) -> Option<String> {
    let headers = properties.headers().as_ref()?;
    match headers.inner().get(TRACEPARENT_HEADER)? {
        lapin::types::AMQPValue::LongString(s) => {
            let bytes = s.as_bytes();
            (bytes.len() <= telemetry::MAX_TRACEPARENT_BYTES)
                .then(|| String::from_utf8_lossy(bytes).into_owned())
        }
        lapin::types::AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

/// How long closing a publisher may wait for the broker's answers (channel, then connection).
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// What RabbitMQ said about a published batch of event references.
#[derive(Debug, Default)]
pub struct Published {
    /// Ids confirmed and not returned: safe to mark published.
    pub acked: Vec<i64>,
    /// Messages nacked: they stay unpublished, and the channel should be replaced.
    pub nacked: usize,
}

/// One message of a batch given to [`Publisher::publish_confirmed`]; `key` is the caller's name for it.
pub struct Outgoing<'a, K> {
    /// Returned in [`Confirmed`] to say what became of this message.
    pub key: K,
    /// The routing key on the batch's exchange.
    pub routing_key: &'a str,
    /// The message body.
    pub body: &'a [u8],
    /// The message properties.
    pub properties: BasicProperties,
}

/// What RabbitMQ said about each message of a batch, by the caller's keys.
#[derive(Debug)]
pub struct Confirmed<K> {
    /// Acked and not returned: delivered to at least one queue.
    pub acked: Vec<K>,
    /// Acked but returned as unroutable (`mandatory`): no queue is bound for its routing key.
    pub returned: Vec<(K, u16, String)>,
    /// Nacked: RabbitMQ could not take it; on a quorum queue the channel's view of the leader is stale.
    pub nacked: Vec<K>,
}

/// One connection and one confirm-mode channel, publishing with confirms and `mandatory`.
pub struct Publisher {
    pub(crate) connection: Connection,
    pub(crate) channel: Channel,
}

impl Publisher {
    /// Connects as `name` to any node of `urls` (see [`crate::connect`]), declares the topology and enables
    /// publisher confirms. Every step is bounded in time: a node that accepts connections but whose queues have
    /// lost their majority must not hold the caller.
    pub async fn open(
        urls: &AmqpEndpoints,
        topology: &Topology,
        name: &str,
    ) -> anyhow::Result<Publisher> {
        let connection = crate::connect(urls, name).await?;
        let setup = async {
            topology.declare(&connection).await?;
            let channel =
                crate::within_setup_timeout("open channel", connection.create_channel()).await?;
            crate::within_setup_timeout(
                "enable publisher confirms",
                channel.confirm_select(ConfirmSelectOptions::default()),
            )
            .await?;
            anyhow::Ok(channel)
        };
        match setup.await {
            Ok(channel) => Ok(Publisher {
                connection,
                channel,
            }),
            Err(e) => {
                crate::abandon(connection, "publisher set-up failed").await;
                Err(e)
            }
        }
    }

    /// False once the connection or the channel is closed or closing (the broker closed it, a heartbeat was
    /// missed, a channel error): the owner replaces the publisher before its next batch instead of discovering
    /// it by a failed publish.
    pub fn is_open(&self) -> bool {
        self.connection.status().connected() && self.channel.status().connected()
    }

    /// Publishes `msgs` to `exchange` pipelined (every message written before any confirm is awaited) and
    /// sorts them by what RabbitMQ answered. The writes and the confirms share one deadline, `timeout` from
    /// now; past it, or on any channel error, the whole batch is an error and the channel is unusable (nothing
    /// of it may be counted as published).
    pub async fn publish_confirmed<K>(
        &self,
        exchange: &str,
        msgs: Vec<Outgoing<'_, K>>,
        timeout: Duration,
    ) -> anyhow::Result<Confirmed<K>> {
        let deadline = Instant::now() + timeout;
        let mut pending = Vec::with_capacity(msgs.len());
        for m in msgs {
            let write = self.channel.basic_publish(
                exchange.into(),
                m.routing_key.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                m.body,
                m.properties,
            );
            let confirm = tokio::time::timeout_at(deadline, write)
                .await
                .map_err(|_| anyhow::anyhow!("basic.publish: not written within {timeout:?}"))?
                .context("basic.publish")?;
            pending.push((m.key, confirm));
        }
        let confirms = tokio::time::timeout_at(
            deadline,
            join_all(
                pending
                    .into_iter()
                    .map(|(key, c)| async move { (key, c.await) }),
            ),
        )
        .await
        .map_err(|_| anyhow::anyhow!("no publisher confirm within {timeout:?}"))?;
        let mut out = Confirmed {
            acked: Vec::with_capacity(confirms.len()),
            returned: Vec::new(),
            nacked: Vec::new(),
        };
        for (key, confirm) in confirms {
            match confirm.context("publisher confirm failed")? {
                c if c.is_ack() => match c.take_message() {
                    None => out.acked.push(key),
                    Some(r) => out
                        .returned
                        .push((key, r.reply_code, r.reply_text.to_string())),
                },
                _ => out.nacked.push(key),
            }
        }
        Ok(out)
    }

    /// Publishes event references to the topology's exchange (see [`Publisher::publish_confirmed`]) and returns
    /// the ids RabbitMQ acked without returning them. A nack is reported (after the acked ids, see
    /// [`Published`]): on a quorum queue it means the channel's view of the queue's leader is stale (seen after
    /// the leader's node died: every later publish on that channel was nacked), and only a new channel recovers.
    pub async fn publish(
        &self,
        topology: &Topology,
        msgs: &[EventMessage],
        timeout: Duration,
    ) -> anyhow::Result<Published> {
        #[cfg(feature = "failpoints")]
        fail::fail_point!("relay.before_publish");
        let bodies = msgs
            .iter()
            .map(|m| {
                let body = serde_json::to_vec(m).context("serialise event message")?;
                anyhow::Ok((m, m.routing_key(), body))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        // One span per message, in the event's own trace (the span it was received in, stored with it), linked
        // to whatever published it (a relay batch, a replay run): the worker's apply becomes its child through
        // the `traceparent` header, whichever process or restart publishes it.
        let spans: Vec<tracing::Span> = msgs
            .iter()
            .map(|m| {
                let span = tracing::info_span!(
                    "relay.publish",
                    otel.kind = "producer",
                    messaging.system = "rabbitmq",
                    messaging.destination.name = %topology.exchange,
                    event_id = m.id,
                    provider = %m.provider,
                    outcome = tracing::field::Empty,
                );
                telemetry::set_parent(&span, m.traceparent.as_deref());
                telemetry::add_link(&span, telemetry::current_traceparent().as_deref());
                span
            })
            .collect();
        let outgoing = bodies
            .iter()
            .zip(&spans)
            .map(|((m, routing_key, body), span)| Outgoing {
                key: m.id,
                routing_key: routing_key.as_str(),
                body: body.as_slice(),
                properties: with_traceparent(
                    BasicProperties::default()
                        .with_delivery_mode(2) // persistent
                        .with_content_type("application/json".into())
                        .with_message_id(m.message_id().into()),
                    span,
                ),
            })
            .collect();
        let confirmed = self
            .publish_confirmed(topology.exchange.as_str(), outgoing, timeout)
            .await;
        let confirmed = match confirmed {
            Ok(c) => c,
            Err(e) => {
                for span in &spans {
                    span.record("outcome", "failed");
                }
                return Err(e);
            }
        };
        if !spans.is_empty() {
            let by_id: std::collections::HashMap<i64, &tracing::Span> =
                msgs.iter().map(|m| m.id).zip(&spans).collect();
            let mark = |id: &i64, outcome: &str| {
                if let Some(span) = by_id.get(id) {
                    span.record("outcome", outcome);
                }
            };
            confirmed.acked.iter().for_each(|id| mark(id, "confirmed"));
            confirmed
                .returned
                .iter()
                .for_each(|(id, _, _)| mark(id, "returned"));
            confirmed.nacked.iter().for_each(|id| mark(id, "nacked"));
        }
        for (id, reply_code, reply_text) in &confirmed.returned {
            metrics::counter!(metric::NOT_CONFIRMED, "reason" => "returned").increment(1);
            tracing::error!(
                event_id = id,
                reply_code,
                reply_text = %reply_text,
                "RabbitMQ returned the event as unroutable; it stays unpublished (check the bindings)"
            );
        }
        let nacked = confirmed.nacked.len();
        if nacked > 0 {
            metrics::counter!(metric::NOT_CONFIRMED, "reason" => "nack").increment(nacked as u64);
            tracing::warn!(
                messaging.system = "rabbitmq",
                nacked,
                acked = confirmed.acked.len(),
                "RabbitMQ nacked events; they stay unpublished"
            );
        }
        Ok(Published {
            acked: confirmed.acked,
            nacked,
        })
    }

    /// Closes the channel and the connection, waiting at most [`CLOSE_TIMEOUT`] for each: a broker that no
    /// longer answers must not hold the owner (its loop reconnects right after).
    pub async fn close(self) {
        tokio::time::timeout(
            CLOSE_TIMEOUT,
            self.channel.close(200, "publisher closing".into()),
        )
        .await
        .ok();
        crate::abandon(self.connection, "publisher closing").await;
    }
}
