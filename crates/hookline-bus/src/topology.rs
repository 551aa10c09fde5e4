//! Exchanges and queues, named from the configured prefix and declared idempotently at start-up.
//!
//! ```text
//! {p}.events (topic) --#--> {p}.payments (quorum, delivery-limit, DLX {p}.dlx)
//! {p}.dlx (fanout) -------> {p}.payments.dlq (quorum, durable)
//! {p}.domain (topic, routing key = fact type; the merchant's own queues bind here)
//!     └─ alternate-exchange {p}.domain.unrouted (fanout) --> {p}.domain.unrouted (quorum)
//! ```
//! The domain exchange's alternate exchange keeps a fact no queue is bound for (yet) instead of returning it: the
//! domain relay publishes with `mandatory` and marks a fact published only on a clean confirm, so without it one
//! unbound type would hold the domain outbox forever. Facts stay in `domain_events` either way (redeliverable).
//! Both queues declare `x-quorum-initial-group-size` (`amqp.quorum_initial_group_size`, default 3): on a cluster
//! of three nodes or more each queue gets three replicas and keeps working with one node down; on a single node
//! RabbitMQ uses the one node it has.
//! The same topology is in `deploy/rabbitmq-definitions.json` for operators who provision the broker up front.

use anyhow::Context;
use hookline_core::config::{AmqpConfig, DEFAULT_QUORUM_INITIAL_GROUP_SIZE};
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Connection, ExchangeKind};

/// The names of one deployment's (or one test's) RabbitMQ objects.
#[derive(Debug, Clone)]
pub struct Topology {
    /// Exchange every stored event is published to.
    pub exchange: String,
    /// Queue of the payments consumer.
    pub payments_queue: String,
    /// Dead-letter exchange.
    pub dead_letter_exchange: String,
    /// Dead-letter queue of the payments consumer.
    pub dead_letter_queue: String,
    /// Deliveries before a message is dead-lettered.
    pub delivery_limit: u32,
    /// Replicas of each quorum queue when it is first declared (`x-quorum-initial-group-size`).
    pub initial_group_size: u32,
    /// Topic exchange the domain events (facts) are published to, routing key = type.
    pub domain_exchange: String,
    /// Alternate exchange and queue of the domain exchange: facts no binding routes.
    pub domain_unrouted: String,
}

/// One declaration of [`Topology::declare`].
enum Step<'a> {
    /// A durable exchange: name, kind, arguments.
    Exchange(&'a String, ExchangeKind, FieldTable),
    /// A quorum queue with its arguments, bound to `exchange` with routing key `key`.
    Queue {
        queue: &'a String,
        args: FieldTable,
        exchange: &'a String,
        key: &'a str,
    },
}

impl Topology {
    /// Names derived from `prefix`, with the default replication
    /// ([`DEFAULT_QUORUM_INITIAL_GROUP_SIZE`]).
    pub fn new(prefix: &str, delivery_limit: u32) -> Topology {
        Topology {
            exchange: format!("{prefix}.events"),
            payments_queue: format!("{prefix}.payments"),
            dead_letter_exchange: format!("{prefix}.dlx"),
            dead_letter_queue: format!("{prefix}.payments.dlq"),
            delivery_limit,
            initial_group_size: DEFAULT_QUORUM_INITIAL_GROUP_SIZE,
            domain_exchange: format!("{prefix}.domain"),
            domain_unrouted: format!("{prefix}.domain.unrouted"),
        }
    }

    /// The topology the configuration's `[amqp]` section describes (prefix, delivery limit, replication).
    pub fn from_config(amqp: &AmqpConfig) -> Topology {
        Topology {
            initial_group_size: amqp.quorum_initial_group_size,
            ..Topology::new(&amqp.prefix, amqp.delivery_limit)
        }
    }

    /// Declares everything on `connection`; safe to call from every process at every (re)connection
    /// (declarations are idempotent as long as the arguments match). Every step is bounded by
    /// [`crate::SETUP_TIMEOUT`]: a node whose queue has lost its majority may never answer a declare.
    ///
    /// Each queue is declared on a channel of its own, because a refused declaration closes its channel: see
    /// [`Topology::declare_quorum_queue`] for queues created with another replication.
    pub async fn declare(&self, connection: &Connection) -> anyhow::Result<()> {
        let channel =
            crate::within_setup_timeout("open channel", connection.create_channel()).await?;
        let mut domain_args = FieldTable::default();
        domain_args.insert(short("alternate-exchange"), long(&self.domain_unrouted));
        // In dependency order: an exchange before the queues bound to it, and the domain exchange's alternate
        // exchange (the unrouted side) before the domain exchange that names it.
        let steps = [
            Step::Exchange(&self.exchange, ExchangeKind::Topic, FieldTable::default()),
            Step::Exchange(
                &self.dead_letter_exchange,
                ExchangeKind::Fanout,
                FieldTable::default(),
            ),
            Step::Queue {
                queue: &self.dead_letter_queue,
                args: self.dead_letter_queue_arguments(),
                exchange: &self.dead_letter_exchange,
                key: "",
            },
            Step::Queue {
                queue: &self.payments_queue,
                args: self.payments_queue_arguments(),
                exchange: &self.exchange,
                key: "#",
            },
            Step::Exchange(
                &self.domain_unrouted,
                ExchangeKind::Fanout,
                FieldTable::default(),
            ),
            Step::Queue {
                queue: &self.domain_unrouted,
                args: self.dead_letter_queue_arguments(),
                exchange: &self.domain_unrouted,
                key: "",
            },
            Step::Exchange(&self.domain_exchange, ExchangeKind::Topic, domain_args),
        ];
        for step in steps {
            match step {
                Step::Exchange(name, kind, args) => {
                    let durable = ExchangeDeclareOptions {
                        durable: true,
                        ..Default::default()
                    };
                    crate::within_setup_timeout(
                        &format!("declare exchange {name}"),
                        channel.exchange_declare(name.as_str().into(), kind, durable, args),
                    )
                    .await?;
                }
                Step::Queue {
                    queue,
                    args,
                    exchange,
                    key,
                } => {
                    self.declare_quorum_queue(connection, queue, args).await?;
                    crate::within_setup_timeout(
                        &format!("bind queue {queue} to {exchange}"),
                        channel.queue_bind(
                            queue.as_str().into(),
                            exchange.as_str().into(),
                            key.into(),
                            QueueBindOptions::default(),
                            FieldTable::default(),
                        ),
                    )
                    .await?;
                }
            }
        }
        close_setup_channel(channel).await;
        Ok(())
    }

    /// Declares one quorum queue with `args`. RabbitMQ compares `x-quorum-initial-group-size` when a queue is
    /// declared again, and fixes a queue's replicas when it is created: a queue created by a version of hookline
    /// that did not declare the size (or with another `amqp.quorum_initial_group_size`) would refuse every
    /// declaration — and so stop every process at its next start. Such a queue is declared again without the
    /// size (so its other arguments are still checked), or, if it was created with another size, passively; a
    /// warning says how to change the replicas of an existing queue (`rabbitmq-queues grow` / `shrink`).
    async fn declare_quorum_queue(
        &self,
        connection: &Connection,
        name: &str,
        args: FieldTable,
    ) -> anyhow::Result<()> {
        let what = format!("declare queue {name}");
        let declare = |args: FieldTable, passive: bool| {
            let what = what.clone();
            async move {
                let channel =
                    crate::within_setup_timeout("open channel", connection.create_channel())
                        .await?;
                let options = QueueDeclareOptions {
                    durable: true,
                    passive,
                    ..Default::default()
                };
                let declared = tokio::time::timeout(
                    crate::SETUP_TIMEOUT,
                    channel.queue_declare(name.into(), options, args),
                )
                .await
                .map_err(|_| anyhow::anyhow!("{what}: no answer from RabbitMQ in time"))?;
                if declared.is_ok() {
                    close_setup_channel(channel).await;
                }
                anyhow::Ok(declared)
            }
        };
        let group_size_differs = |e: &lapin::Error| {
            e.to_string()
                .contains("inequivalent arg 'x-quorum-initial-group-size'")
        };
        match declare(args.clone(), false).await? {
            Ok(_) => return Ok(()),
            Err(e) if group_size_differs(&e) => {}
            Err(e) => return Err(anyhow::Error::new(e).context(what)),
        }
        let mut without = FieldTable::default();
        for (k, v) in args.inner() {
            if k.as_str() != GROUP_SIZE {
                without.insert(k.clone(), v.clone());
            }
        }
        let outcome = match declare(without, false).await? {
            Ok(_) => "was created without a group size",
            Err(e) if group_size_differs(&e) => {
                declare(FieldTable::default(), true)
                    .await?
                    .with_context(|| format!("{what} (passively)"))?;
                "was created with another group size"
            }
            Err(e) => return Err(anyhow::Error::new(e).context(what)),
        };
        tracing::warn!(
            messaging.system = "rabbitmq",
            queue = name,
            configured = self.initial_group_size,
            "the queue {outcome}: it keeps the replicas it has; change them with rabbitmq-queues grow / shrink"
        );
        Ok(())
    }

    /// Arguments of the payments queue.
    ///
    /// Quorum queue (replicated, persistent). RabbitMQ 3.10 has no default delivery limit, so it is explicit.
    /// `at-least-once` dead-lettering keeps a message in the source queue until the DLQ confirms it; it requires
    /// `overflow=reject-publish`.
    pub fn payments_queue_arguments(&self) -> FieldTable {
        let mut args = self.dead_letter_queue_arguments();
        args.insert(
            short("x-delivery-limit"),
            AMQPValue::LongLongInt(i64::from(self.delivery_limit)),
        );
        args.insert(
            short("x-dead-letter-exchange"),
            long(&self.dead_letter_exchange),
        );
        args.insert(short("x-dead-letter-strategy"), long("at-least-once"));
        args.insert(short("x-overflow"), long("reject-publish"));
        args
    }
}

impl Topology {
    /// Arguments of the dead-letter queue, which the payments queue's start with: a quorum queue with
    /// `x-quorum-initial-group-size` replicas (applied when the queue is created; see
    /// [`Topology::declare_quorum_queue`] for existing queues).
    pub fn dead_letter_queue_arguments(&self) -> FieldTable {
        let mut args = FieldTable::default();
        args.insert(short("x-queue-type"), long("quorum"));
        args.insert(
            short(GROUP_SIZE),
            AMQPValue::LongLongInt(i64::from(self.initial_group_size)),
        );
        args
    }
}

/// The quorum queue argument that sets its replicas at creation.
const GROUP_SIZE: &str = "x-quorum-initial-group-size";

fn short(s: &str) -> ShortString {
    s.into()
}

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(s.into())
}

/// Closes a channel used only to declare, waiting at most [`crate::SETUP_TIMEOUT`] for the broker's close-ok: a
/// busy broker must not hold a process's start-up on a channel nobody needs any more (dropped unanswered, it is
/// closed with its connection).
async fn close_setup_channel(channel: lapin::Channel) {
    tokio::time::timeout(crate::SETUP_TIMEOUT, channel.close(200, "declared".into()))
        .await
        .ok();
}
