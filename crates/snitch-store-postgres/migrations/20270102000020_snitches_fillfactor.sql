-- Room on each page of snitches for a row's next version: a sweep's claim sets
-- `sweep_lease_until`, which no index holds, and with room on the page that update is a
-- heap-only one (no new index entries); on full pages (the default, 100) each claimed
-- snitch wrote an entry into every index of the table. Pages written from now on keep the
-- room; a VACUUM FULL or CLUSTER gives it to the pages already there.
ALTER TABLE snitch.snitches SET (fillfactor = 80);
