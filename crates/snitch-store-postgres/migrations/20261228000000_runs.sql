-- Runs (docs/rules.md#runs): a snitch's maximum runtime, its open runs and last run (one
-- JSON text, NULL for a snitch that reports no runs) and how many check-ins it recorded;
-- each check-in's number, its run details (JSON, NULL for a plain check-in) and the
-- output kept; each event's reason and run.
ALTER TABLE snitch.snitches
    ADD COLUMN max_runtime_seconds integer,
    ADD COLUMN runs text,
    ADD COLUMN check_in_seq bigint NOT NULL DEFAULT 0;
ALTER TABLE snitch.check_ins
    ADD COLUMN number bigint,
    ADD COLUMN details text,
    ADD COLUMN body text;
ALTER TABLE snitch.events
    ADD COLUMN reason text,
    ADD COLUMN run text;
