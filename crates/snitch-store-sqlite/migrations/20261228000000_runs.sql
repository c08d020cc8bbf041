-- Runs (docs/rules.md#runs): a snitch's maximum runtime, its open runs and last run (one
-- JSON text, NULL for a snitch that reports no runs) and how many check-ins it recorded;
-- each check-in's number, its run details (JSON, NULL for a plain check-in) and the
-- output kept; each event's reason and run.
ALTER TABLE snitch_snitches ADD COLUMN max_runtime_seconds INTEGER;
ALTER TABLE snitch_snitches ADD COLUMN runs TEXT;
ALTER TABLE snitch_snitches ADD COLUMN check_in_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE snitch_check_ins ADD COLUMN number INTEGER;
ALTER TABLE snitch_check_ins ADD COLUMN details TEXT;
ALTER TABLE snitch_check_ins ADD COLUMN body TEXT;
ALTER TABLE snitch_events ADD COLUMN reason TEXT;
ALTER TABLE snitch_events ADD COLUMN run TEXT;
