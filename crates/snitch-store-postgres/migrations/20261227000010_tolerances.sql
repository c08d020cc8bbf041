-- Failure and miss tolerances (docs/rules.md#tolerances): the settings, and the runs in a
-- row the state machine counts against them.
ALTER TABLE snitch.snitches
    ADD COLUMN failure_tolerance integer NOT NULL DEFAULT 0,
    ADD COLUMN missed_tolerance integer NOT NULL DEFAULT 0,
    ADD COLUMN consecutive_failures bigint NOT NULL DEFAULT 0,
    ADD COLUMN consecutive_misses bigint NOT NULL DEFAULT 0;
