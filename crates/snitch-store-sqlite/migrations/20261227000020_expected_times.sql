-- When the run a `snitch.missing` reports was expected, in UTC and in the schedule's zone
-- (docs/rules.md#alerts-and-webhooks); NULL for other events and older ones.
ALTER TABLE snitch_events ADD COLUMN expected_at INTEGER;
ALTER TABLE snitch_events ADD COLUMN expected_at_local TEXT;
