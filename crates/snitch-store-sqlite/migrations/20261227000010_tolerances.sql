-- Failure and miss tolerances (docs/rules.md#tolerances): the settings, and the runs in a
-- row the state machine counts against them.
ALTER TABLE snitch_snitches ADD COLUMN failure_tolerance INTEGER NOT NULL DEFAULT 0;
ALTER TABLE snitch_snitches ADD COLUMN missed_tolerance INTEGER NOT NULL DEFAULT 0;
ALTER TABLE snitch_snitches ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE snitch_snitches ADD COLUMN consecutive_misses INTEGER NOT NULL DEFAULT 0;
