-- Sweep leases: a server that claims a due snitch holds it until this time (or until the
-- snitch is saved), so sweeps on several servers share the work.
ALTER TABLE snitch.snitches ADD COLUMN sweep_lease_until timestamptz;
