-- Where a snitch's history was last cut (the seq of the newest check-in that trim
-- deleted; 0: never): the next trim deletes from there on, instead of walking the index
-- over every check-in deleted before (dead until vacuumed: a snitch checked in
-- thousands of times a second leaves that many behind, and each trim grew slower).
-- Nothing at or below it is left: a snitch's check-ins get their seq only while its row
-- is locked by their save, so they commit in seq order, and a trim deletes every row up
-- to its cut that its snapshot sees.
ALTER TABLE snitch.snitches ADD COLUMN check_ins_trimmed_to bigint NOT NULL DEFAULT 0;
