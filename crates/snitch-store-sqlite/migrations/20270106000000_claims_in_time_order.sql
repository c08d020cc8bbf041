-- A claim of deliveries reads the earliest due ones of each budget first (HTTP: every
-- delivery with a destination; e-mail: those without), in time order, and asks each
-- destination whether it has more due: walking every (case, channel) with pending
-- deliveries took 335 ms a claim at 100,000 pending over 10,000 cases, inside the write
-- transaction that check-ins wait for. The class index also serves the next delivery's
-- time, which the narrow index held.
CREATE INDEX snitch_deliveries_due_by_class
    ON snitch_deliveries ((destination IS NULL), next_attempt_at, seq) WHERE state = 'pending';
CREATE INDEX snitch_deliveries_pending_by_destination
    ON snitch_deliveries (destination, next_attempt_at, seq)
    WHERE state = 'pending' AND destination IS NOT NULL;
DROP INDEX snitch_deliveries_due;
