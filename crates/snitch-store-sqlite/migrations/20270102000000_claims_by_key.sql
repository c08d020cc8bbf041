-- A claim reads, for each (case, channel) with pending deliveries, only the first few due
-- ones (as many as one key may hold in flight), where it ranked every due delivery: with
-- 100,000 alerts waiting that ranking took over a second per claim, and claims are what
-- deliver them. This index serves the walk over the keys and each key's first due rows.
CREATE INDEX snitch_deliveries_due_by_key
    ON snitch_deliveries (case_id, channel, next_attempt_at, seq) WHERE state = 'pending';
