-- Set-based check-in saves: each snitch counts its stored check-ins, so a save trims the
-- history only when it has grown to twice what is kept, not on every check-in (the trim
-- walked the history's index on each one).
ALTER TABLE snitch_snitches ADD COLUMN check_ins_stored INTEGER NOT NULL DEFAULT 0;
-- The history length the snitch's last change asked for (Change::keep_check_ins): reads
-- show at most this many, and the lazy trim cuts back to it.
ALTER TABLE snitch_snitches ADD COLUMN check_ins_keep INTEGER NOT NULL DEFAULT 100;
UPDATE snitch_snitches SET check_ins_stored =
    (SELECT count(*) FROM snitch_check_ins c WHERE c.token = snitch_snitches.token);
