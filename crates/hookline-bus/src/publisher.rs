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
use lapin::types::{AMQPValue, FieldTable};
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
    headers.insert(TRACEPARENT_HEADER.into(), AMQPValue::LongString(tp.into()));
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

/// How [`Publisher::publish_packed`] packs event references into messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packing {
    /// Most events per message (1: one message per event, the only shape versions before bundles read).
    pub per_message: usize,
    /// Delivery attempts these events already used in a bundle they were split from (the
    /// [`crate::message::PRIOR_DELIVERIES_HEADER`] of every message, when not 0).
    pub prior_deliveries: u32,
}

impl Packing {
    /// One message per event, no prior attempts.
    pub const SINGLE: Packing = Packing {
        per_message: 1,
        prior_deliveries: 0,
    };
}

/// The events of one message: indexes into the published slice, in its order.
struct Group {
    members: Vec<usize>,
}

/// Groups `msgs` by routing key (so a bundle routes exactly as each of its events would), in order, at most
/// `per_message` (at least 1, at most [`crate::message::BUNDLE_MAX`]) per group.
fn pack(msgs: &[EventMessage], per_message: usize) -> Vec<Group> {
    let per_message = per_message.clamp(1, crate::message::BUNDLE_MAX);
    let mut groups: Vec<Group> = Vec::new();
    let mut open: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, m) in msgs.iter().enumerate() {
        let key = m.routing_key();
        match open.get(&key) {
            Some(&g) if groups[g].members.len() < per_message => groups[g].members.push(i),
            _ => {
                open.insert(key, groups.len());
                groups.push(Group { members: vec![i] });
            }
        }
    }
    groups
}

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

    /// Publishes event references to the topology's exchange, one message per event (see
    /// [`Publisher::publish_packed`]).
    pub async fn publish(
        &self,
        topology: &Topology,
        msgs: &[EventMessage],
        timeout: Duration,
    ) -> anyhow::Result<Published> {
        self.publish_packed(topology, msgs, Packing::SINGLE, timeout)
            .await
    }

    /// Publishes event references to the topology's exchange (see [`Publisher::publish_confirmed`]), packed as
    /// `packing` says, and returns the ids RabbitMQ acked without returning them. Events that share a routing key
    /// travel together, up to `packing.per_message` per message, in the order given; a message of one event is the
    /// single-event message of earlier versions. A nack is reported (after the acked ids, see [`Published`]): on a
    /// quorum queue it means the channel's view of the queue's leader is stale (seen after the leader's node died:
    /// every later publish on that channel was nacked), and only a new channel recovers.
    pub async fn publish_packed(
        &self,
        topology: &Topology,
        msgs: &[EventMessage],
        packing: Packing,
        timeout: Duration,
    ) -> anyhow::Result<Published> {
        #[cfg(feature = "failpoints")]
        fail::fail_point!("relay.before_publish");
        // One span per event, in the event's own trace (the span it was received in, stored with it), linked to
        // whatever published it (a relay batch, a replay run, a worker splitting a bundle): the worker's apply
        // becomes its child through the `traceparent` header — or, in a bundle, the event's own entry.
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
        let groups = pack(msgs, packing.per_message);
        let bodies = groups
            .iter()
            .map(|g| {
                let first = &msgs[g.members[0]];
                let mut properties = BasicProperties::default().with_delivery_mode(2); // persistent
                let body = if g.members.len() == 1 {
                    properties = with_traceparent(
                        properties
                            .with_content_type("application/json".into())
                            .with_message_id(first.message_id().into()),
                        &spans[g.members[0]],
                    );
                    serde_json::to_vec(first).context("serialise event message")?
                } else {
                    let events: Vec<EventMessage> = g
                        .members
                        .iter()
                        .map(|&i| EventMessage {
                            traceparent: telemetry::traceparent(&spans[i]),
                            ..msgs[i].clone()
                        })
                        .collect();
                    let mut headers = FieldTable::default();
                    headers.insert(
                        crate::message::EVENTS_HEADER.into(),
                        AMQPValue::LongUInt(g.members.len() as u32),
                    );
                    properties = properties
                        .with_content_type(crate::message::BUNDLE_CONTENT_TYPE.into())
                        .with_message_id(format!("events:{}+{}", first.id, events.len()).into())
                        .with_headers(headers);
                    crate::message::encode_bundle(&events).context("serialise event bundle")?
                };
                if packing.prior_deliveries > 0 {
                    let mut headers = properties.headers().clone().unwrap_or_default();
                    headers.insert(
                        crate::message::PRIOR_DELIVERIES_HEADER.into(),
                        AMQPValue::LongUInt(packing.prior_deliveries),
                    );
                    properties = properties.with_headers(headers);
                }
                anyhow::Ok((first.routing_key(), body, properties))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let outgoing = bodies
            .iter()
            .enumerate()
            .map(|(key, (routing_key, body, properties))| Outgoing {
                key,
                routing_key: routing_key.as_str(),
                body: body.as_slice(),
                properties: properties.clone(),
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
        let mark = |group: usize, outcome: &str| {
            for &i in &groups[group].members {
                spans[i].record("outcome", outcome);
            }
        };
        confirmed.acked.iter().for_each(|&g| mark(g, "confirmed"));
        confirmed
            .returned
            .iter()
            .for_each(|(g, _, _)| mark(*g, "returned"));
        confirmed.nacked.iter().for_each(|&g| mark(g, "nacked"));
        for (g, reply_code, reply_text) in &confirmed.returned {
            let events = groups[*g].members.len();
            metrics::counter!(metric::NOT_CONFIRMED, "reason" => "returned")
                .increment(events as u64);
            tracing::error!(
                event_id = msgs[groups[*g].members[0]].id,
                events,
                reply_code,
                reply_text = %reply_text,
                "RabbitMQ returned the event as unroutable; it stays unpublished (check the bindings)"
            );
        }
        let nacked: usize = confirmed
            .nacked
            .iter()
            .map(|&g| groups[g].members.len())
            .sum();
        if nacked > 0 {
            metrics::counter!(metric::NOT_CONFIRMED, "reason" => "nack").increment(nacked as u64);
            tracing::warn!(
                messaging.system = "rabbitmq",
                nacked,
                acked = confirmed.acked.len(),
                "RabbitMQ nacked events; they stay unpublished"
            );
        }
        let acked = confirmed
            .acked
            .iter()
            .flat_map(|&g| groups[g].members.iter().map(|&i| msgs[i].id))
            .collect();
        Ok(Published { acked, nacked })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: i64, event_type: &str) -> EventMessage {
        EventMessage {
            id,
            provider: "stripe".into(),
            provider_event_id: format!("evt_{id}"),
            event_type: Some(event_type.into()),
            traceparent: None,
        }
    }

    #[test]
    fn events_are_packed_by_routing_key_in_order_and_bounded() {
        let msgs = [
            msg(1, "a"),
            msg(2, "b"),
            msg(3, "a"),
            msg(4, "a"),
            msg(5, "b"),
        ];
        let members =
            |per| -> Vec<Vec<usize>> { pack(&msgs, per).into_iter().map(|g| g.members).collect() };
        assert_eq!(members(2), [vec![0, 2], vec![1, 4], vec![3]]);
        assert_eq!(members(10), [vec![0, 2, 3], vec![1, 4]]);
        assert_eq!(members(1), [vec![0], vec![1], vec![2], vec![3], vec![4]]);
        assert_eq!(members(0), members(1), "0 is read as 1");
    }
}
