-- One trace per payment (issue 30): where a piece of work is handed on through the database, the W3C
-- `traceparent` of the span that wrote it is stored with it, so that whoever picks it up later — after a
-- restart, a crash, on another machine — continues the same trace.
--
-- * `webhook_events`: the edge's request span, written by the same INSERT whose trigger enqueues the event in
--   `event_outbox`. The relay reads it through the join it already makes (`event_outbox` stays a narrow queue
--   of ids: a second copy there would be one more write per event), so a republish after a crash, and an
--   operator's replay, stay in the event's trace.
-- * `domain_events`: the span that recorded the fact (the worker's apply, the dispatcher's attempt); each
--   delivery attempt to a destination is its child and sends it on as the `traceparent` header.
-- * `outbound_requests`: the span that queued the charge or refund (the merchant API request, a billing run);
--   each attempt the dispatcher makes to the gateway is its child.
--
-- Nullable, no default: adding them rewrites nothing, and rows written before this version simply start a new
-- trace when they are picked up. Bounded like every value from outside (a caller's `traceparent` is parsed and
-- re-written by hookline before it is stored, so this only catches a bug or a hand-written row).
ALTER TABLE webhook_events ADD COLUMN traceparent TEXT
    CONSTRAINT webhook_events_traceparent_check CHECK (octet_length(traceparent) <= 64);
ALTER TABLE domain_events ADD COLUMN traceparent TEXT
    CONSTRAINT domain_events_traceparent_check CHECK (octet_length(traceparent) <= 64);
ALTER TABLE outbound_requests ADD COLUMN traceparent TEXT
    CONSTRAINT outbound_requests_traceparent_check CHECK (octet_length(traceparent) <= 64);
