//! Metric names of the event relay and its publisher (fixed: dashboards and alert rules use them).

/// Counter: events confirmed by RabbitMQ and marked published, by `path` (fast | sweep).
pub const PUBLISHED: &str = "hookline_relay_published_total";
/// Counter: publishes not confirmed (nack, returned as unroutable, timeout, connection loss), by `reason`.
pub const NOT_CONFIRMED: &str = "hookline_relay_not_confirmed_total";
/// Counter: fast-path notifications dropped because the relay was busy (the sweeper publishes them).
pub const DROPPED: &str = "hookline_relay_notifications_dropped_total";
/// Gauge: committed events not yet published.
pub const BACKLOG: &str = "hookline_relay_backlog";
/// Gauge: age in seconds of the oldest unpublished event.
pub const OLDEST_SECONDS: &str = "hookline_relay_oldest_unpublished_seconds";
