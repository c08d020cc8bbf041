-- A sweep's lease on a due snitch moves out of the snitch's row into a narrow table of its
-- own. Setting `sweep_lease_until` rewrote the wide row: on a page without room for the
-- new version (a page of snitches due together fills after two or three), a new entry in
-- each of the four indexes of snitches, then the save rewrote it again. In a sweep of
-- 10,000 due, three claims in four were such updates, about a sixth of the sweep's
-- database time (BENCHMARKS.md).
--
-- A lease holds the snitch's version when claimed: any save changes the version, so a
-- save ends the lease without touching this table, and a lease row left behind by a save
-- is void. Unlogged: a lease only spares two servers the same work (their saves are
-- checked against the version, so the second is refused), and a crash that empties the
-- table loses no state.
--
-- Servers of an older version still lease through `sweep_lease_until`: while both run,
-- one snitch may be swept by two of them, and the second save is refused.
CREATE UNLOGGED TABLE snitch.sweep_leases (
    token   text        PRIMARY KEY,
    version bigint      NOT NULL,
    until   timestamptz NOT NULL
);
