-- A claim reads, for each (case, channel) with pending deliveries, only the first few due
-- ones (as many as one key may hold in flight), where it ranked every due delivery: with
-- 100,000 alerts waiting that ranking took over a second per claim, and claims are what
-- deliver them. This index serves the walk over the keys and each key's first due rows.
CREATE INDEX deliveries_due_by_key ON snitch.deliveries (case_id, channel, next_attempt_at, seq)
    WHERE state = 'pending';
-- next_delivery_at needs the earliest due time alone: the covering columns go.
CREATE INDEX deliveries_due ON snitch.deliveries (next_attempt_at) WHERE state = 'pending';
DROP INDEX snitch.deliveries_due_keys;
