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
//! The same topology is in `deploy/rabbitmq-definitions.json` for operators who provision the broker up front.

use anyhow::Context;
use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, ExchangeKind};

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
    /// Topic exchange the domain events (facts) are published to, routing key = type.
    pub domain_exchange: String,
    /// Alternate exchange and queue of the domain exchange: facts no binding routes.
    pub domain_unrouted: String,
}

impl Topology {
    /// Names derived from `prefix`.
    pub fn new(prefix: &str, delivery_limit: u32) -> Topology {
        Topology {
            exchange: format!("{prefix}.events"),
            payments_queue: format!("{prefix}.payments"),
            dead_letter_exchange: format!("{prefix}.dlx"),
            dead_letter_queue: format!("{prefix}.payments.dlq"),
            delivery_limit,
            domain_exchange: format!("{prefix}.domain"),
            domain_unrouted: format!("{prefix}.domain.unrouted"),
        }
    }

    /// Declares everything; safe to call from every process at every start (declarations are idempotent as
    /// long as the arguments match).
    pub async fn declare(&self, channel: &Channel) -> anyhow::Result<()> {
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        channel
            .exchange_declare(
                self.exchange.as_str().into(),
                ExchangeKind::Topic,
                durable,
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("declare exchange {}", self.exchange))?;
        channel
            .exchange_declare(
                self.dead_letter_exchange.as_str().into(),
                ExchangeKind::Fanout,
                durable,
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("declare exchange {}", self.dead_letter_exchange))?;

        let queue = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        let mut dlq_args = FieldTable::default();
        dlq_args.insert(short("x-queue-type"), long("quorum"));
        channel
            .queue_declare(self.dead_letter_queue.as_str().into(), queue, dlq_args)
            .await
            .with_context(|| format!("declare queue {}", self.dead_letter_queue))?;
        channel
            .queue_bind(
                self.dead_letter_queue.as_str().into(),
                self.dead_letter_exchange.as_str().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .context("bind dead-letter queue")?;

        channel
            .queue_declare(
                self.payments_queue.as_str().into(),
                queue,
                self.payments_queue_arguments(),
            )
            .await
            .with_context(|| format!("declare queue {}", self.payments_queue))?;
        channel
            .queue_bind(
                self.payments_queue.as_str().into(),
                self.exchange.as_str().into(),
                "#".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .context("bind payments queue")?;
        self.declare_domain(channel).await
    }

    /// The domain exchange and its alternate exchange and queue.
    async fn declare_domain(&self, channel: &Channel) -> anyhow::Result<()> {
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        channel
            .exchange_declare(
                self.domain_unrouted.as_str().into(),
                ExchangeKind::Fanout,
                durable,
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("declare exchange {}", self.domain_unrouted))?;
        let mut args = FieldTable::default();
        args.insert(short("x-queue-type"), long("quorum"));
        channel
            .queue_declare(
                self.domain_unrouted.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                args,
            )
            .await
            .with_context(|| format!("declare queue {}", self.domain_unrouted))?;
        channel
            .queue_bind(
                self.domain_unrouted.as_str().into(),
                self.domain_unrouted.as_str().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .context("bind the domain exchange's unrouted queue")?;
        let mut args = FieldTable::default();
        args.insert(short("alternate-exchange"), long(&self.domain_unrouted));
        channel
            .exchange_declare(
                self.domain_exchange.as_str().into(),
                ExchangeKind::Topic,
                durable,
                args,
            )
            .await
            .with_context(|| format!("declare exchange {}", self.domain_exchange))?;
        Ok(())
    }

    /// Arguments of the payments queue.
    ///
    /// Quorum queue (replicated, persistent). RabbitMQ 3.10 has no default delivery limit, so it is explicit.
    /// `at-least-once` dead-lettering keeps a message in the source queue until the DLQ confirms it; it requires
    /// `overflow=reject-publish`.
    pub fn payments_queue_arguments(&self) -> FieldTable {
        let mut args = FieldTable::default();
        args.insert(short("x-queue-type"), long("quorum"));
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

fn short(s: &str) -> ShortString {
    s.into()
}

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(s.into())
}
