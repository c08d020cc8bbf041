-- Set-based saves (issue 12): each snitch counts its stored check-ins, so a save trims
-- the history only when it has grown to twice what is kept, not on every check-in.
ALTER TABLE snitch.snitches ADD COLUMN check_ins_stored integer NOT NULL DEFAULT 0;
-- The history length the snitch's last change asked for (Change::keep_check_ins): reads
-- show at most this many, and the lazy trim cuts back to it.
ALTER TABLE snitch.snitches ADD COLUMN check_ins_keep integer NOT NULL DEFAULT 100;
UPDATE snitch.snitches s SET check_ins_stored = c.n
    FROM (SELECT token, count(*)::integer AS n FROM snitch.check_ins GROUP BY token) c
    WHERE c.token = s.token;
-- Room in each page for the next version of a row: a check-in that leaves the indexed
-- columns alone (same period, same deadline) is then a HOT update.
ALTER TABLE snitch.snitches SET (fillfactor = 80);
-- Each case counts its snitches, so creating one checks the plan's limit and inserts in
-- one statement (the count is kept by insert and delete).
ALTER TABLE snitch.cases ADD COLUMN snitches_held bigint NOT NULL DEFAULT 0;
UPDATE snitch.cases c SET snitches_held = s.n
    FROM (SELECT case_id, count(*) AS n FROM snitch.snitches GROUP BY case_id) s
    WHERE s.case_id = c.id;
