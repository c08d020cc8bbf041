-- When the run a `snitch.missing` reports was expected, in UTC and in the schedule's zone
-- (docs/rules.md#alerts-and-webhooks); NULL for other events and older ones.
ALTER TABLE snitch.events
    ADD COLUMN expected_at timestamptz,
    ADD COLUMN expected_at_local text;
