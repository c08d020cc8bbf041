-- The check-in history is found by its snitch's token through a hash index instead of
-- the B-tree primary key (token, seq) (issue 12). Every check-in inserts one entry, at a
-- random place of that index: a B-tree insert compares the 20-character token on every
-- level under the database's collation, and was a sixth of Postgres's time per check-in;
-- a hash index inserts into one bucket, about half the cost, in an index about half the
-- size. Reads want a snitch's newest check-ins: a snitch holds at most twice the history
-- it keeps (the lazy trim), so they read all of its rows and sort them by seq.
-- Nothing needs (token, seq) unique: seq is an identity. Without a primary key, logical
-- replication identifies a row by all of its columns.
ALTER TABLE snitch.check_ins DROP CONSTRAINT check_ins_pkey;
CREATE INDEX check_ins_by_token ON snitch.check_ins USING hash (token);
ALTER TABLE snitch.check_ins REPLICA IDENTITY FULL;
