-- Snitch's tables take the prefix `snitch_` (as on Postgres they live in the schema
-- `snitch`): hosts run these migrations in their own database, where `cases` or `events`
-- may well be a table of theirs. Renamed, not recreated, so stored data is kept; SQLite
-- rewrites the references of other tables to a renamed one. Indexes keep their table but
-- not their names, which share the database's one namespace: they are made again under
-- prefixed names.

ALTER TABLE cases RENAME TO snitch_cases;
ALTER TABLE snitches RENAME TO snitch_snitches;
ALTER TABLE check_ins RENAME TO snitch_check_ins;
ALTER TABLE events RENAME TO snitch_events;
ALTER TABLE webhooks RENAME TO snitch_webhooks;
ALTER TABLE deliveries RENAME TO snitch_deliveries;
ALTER TABLE servers RENAME TO snitch_servers;
ALTER TABLE outages RENAME TO snitch_outages;
ALTER TABLE outage_deferrals RENAME TO snitch_outage_deferrals;
ALTER TABLE api_keys RENAME TO snitch_api_keys;

DROP INDEX snitches_by_case;
DROP INDEX snitches_by_wake_at;
DROP INDEX check_ins_by_token;
DROP INDEX events_by_token;
DROP INDEX webhooks_by_case;
DROP INDEX deliveries_by_event;
DROP INDEX deliveries_due;
DROP INDEX outages_by_end;
DROP INDEX api_keys_by_case;

CREATE INDEX snitch_snitches_by_case ON snitch_snitches (case_id, created_at, seq);
CREATE INDEX snitch_snitches_by_wake_at ON snitch_snitches (wake_at, token)
    WHERE wake_at IS NOT NULL;
CREATE INDEX snitch_check_ins_by_token ON snitch_check_ins (token, seq);
CREATE INDEX snitch_events_by_token ON snitch_events (token, seq);
CREATE INDEX snitch_webhooks_by_case ON snitch_webhooks (case_id, created_at, seq);
CREATE INDEX snitch_deliveries_by_event ON snitch_deliveries (event_id, seq);
CREATE INDEX snitch_deliveries_due ON snitch_deliveries (next_attempt_at, seq)
    WHERE state = 'pending';
CREATE INDEX snitch_outages_by_end ON snitch_outages (ended_at);
CREATE INDEX snitch_api_keys_by_case ON snitch_api_keys (case_id, created_at, seq);
