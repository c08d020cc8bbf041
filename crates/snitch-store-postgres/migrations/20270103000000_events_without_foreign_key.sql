-- Events, like check-ins, are written only by a save that has just updated (and so
-- locked) their snitch's row, and deleting a snitch now deletes its events itself (after
-- locking the row): the foreign key checked what is already true, one lookup and one
-- row lock per event, about a tenth of a sweep's statement for its missed snitches.
-- Servers of an older version rely on the cascade when they delete a snitch: stop them
-- before this migration runs, or the events of snitches they delete afterwards stay
-- behind (unread while no snitch has their token, but taking room).
ALTER TABLE snitch.events DROP CONSTRAINT events_token_fkey;
