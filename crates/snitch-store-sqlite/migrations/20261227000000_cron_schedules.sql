-- A cron snitch's schedule (docs/rules.md#expected-runs): one JSON object (expression,
-- timezone, grace_ms, early_ms) beside `interval` = 'cron'; NULL for an interval snitch.
ALTER TABLE snitch_snitches ADD COLUMN schedule TEXT;
