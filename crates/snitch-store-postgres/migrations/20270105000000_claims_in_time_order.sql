-- A claim of deliveries first reads the earliest due ones of each budget (HTTP deliveries,
-- e-mails) in time order, and walks every (case, channel) only when those do not settle
-- it: the walk costs in proportion to the keys with pending deliveries (5 ms a claim at
-- 100 of them, 200 ms at 10,000), and claims are what deliver a mass miss's alerts.
-- E-mails are the deliveries without a destination.
CREATE INDEX deliveries_due_by_class ON snitch.deliveries
    ((destination IS NULL), next_attempt_at, seq) WHERE state = 'pending';
-- Whether any later due delivery goes to a destination with room: a walk over the
-- destinations with pending deliveries.
CREATE INDEX deliveries_pending_by_destination ON snitch.deliveries
    (destination, next_attempt_at, seq) WHERE state = 'pending' AND destination IS NOT NULL;
-- The earliest due time is the earlier of the two classes' first (NEXT_DELIVERY_AT).
DROP INDEX snitch.deliveries_due;
