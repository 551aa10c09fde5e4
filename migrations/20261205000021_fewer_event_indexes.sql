-- Two of webhook_events' seven indexes go: every stored event wrote an entry in each (issue 32, "fewer indexes on
-- hot tables"; numbers in crates/hookline-bench/PROFILING.md).
--
-- (provider, event_type, id) came before the console's indexes: a selection by provider and type is served by
-- (event_type, id) — a type names one provider's events almost always, so few rows are filtered out — or by
-- (provider, id).
DROP INDEX IF EXISTS webhook_events_provider_type_idx;
-- (provider_event_id) served the console's search by the provider's id alone, a random-key insert per event. The
-- search now asks the UNIQUE (provider, provider_event_id) once per provider present, the providers read by a
-- loose scan of the same index (crates/hookline-core/src/events/select.rs, `list_page`).
DROP INDEX IF EXISTS webhook_events_provider_event_id_idx;
