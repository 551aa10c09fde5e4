-- How a dead letter was resolved: 'applied' (a redrive or replay finally applied it) or 'discarded' (an operator
-- gave up on it with `hookline dlq discard`: hostile or corrupt rows that can never apply). NULL while unresolved,
-- and for rows resolved before this column existed.
ALTER TABLE dead_letters
    ADD COLUMN resolution TEXT CHECK (resolution IN ('applied', 'discarded'));

-- Discards are audited with the other operator actions.
ALTER TABLE replay_runs DROP CONSTRAINT replay_runs_kind_check;
ALTER TABLE replay_runs
    ADD CONSTRAINT replay_runs_kind_check CHECK (kind IN ('replay', 'dlq_redrive', 'dlq_discard'));
