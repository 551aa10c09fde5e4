//! Reading queue depths from RabbitMQ (passive declares): the one broker inspection shared by `hookline
//! status`, the benchmark and the test harness.

use anyhow::Context;
use hookline_core::config::AmqpEndpoints;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;

/// What a passive declare says about a queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    /// Messages ready for delivery (unacknowledged ones are not counted).
    pub messages: u32,
    /// Consumers attached.
    pub consumers: u32,
}

/// The depth of each of `queues` over one connection named `name`; `None` for a queue that does not exist
/// (yet). A missing queue closes the channel that asked, so each queue gets its own channel.
pub async fn queue_depths(
    amqp_urls: &AmqpEndpoints,
    name: &str,
    queues: &[&str],
) -> anyhow::Result<Vec<Option<QueueDepth>>> {
    let conn = hookline_bus::connect(amqp_urls, name).await?;
    let mut depths = Vec::with_capacity(queues.len());
    for queue in queues {
        let ch = conn.create_channel().await.context("open channel")?;
        let passive = QueueDeclareOptions {
            passive: true,
            ..Default::default()
        };
        let depth = ch
            .queue_declare((*queue).into(), passive, FieldTable::default())
            .await
            .ok()
            .map(|q| QueueDepth {
                messages: q.message_count(),
                consumers: q.consumer_count(),
            });
        if depth.is_some() {
            ch.close(200, "inspected".into()).await.ok();
        }
        depths.push(depth);
    }
    conn.close(200, "inspected".into()).await.ok();
    Ok(depths)
}
