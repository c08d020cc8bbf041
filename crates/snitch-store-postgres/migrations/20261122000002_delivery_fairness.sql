-- Fair delivery claims (behaviour.md section 8, "Delivery isolation"): a claim caps what it
-- takes per (case, channel) and per destination, so it needs both as columns.

-- The case of the delivery's event (the same as event->>'case_id').
ALTER TABLE snitch.deliveries ADD COLUMN case_id text;
-- Where a webhook goes, `host:port` (WebhookUrl::destination); NULL for e-mail.
ALTER TABLE snitch.deliveries ADD COLUMN destination text;

UPDATE snitch.deliveries SET case_id = event->>'case_id';
-- Stored URLs are normalized (lowercase scheme and host, no default port).
UPDATE snitch.deliveries d SET destination = m[2] || ':' ||
        coalesce(m[3], CASE m[1] WHEN 'https' THEN '443' ELSE '80' END)
    FROM (SELECT id, regexp_match(url,
            '^([a-z][a-z0-9+.-]*)://(?:[^/?#]*@)?(\[[^]]*\]|[^:/?#]*)(?::([0-9]+))?') AS m
          FROM snitch.deliveries WHERE channel = 'webhook') parsed
    WHERE d.id = parsed.id;

ALTER TABLE snitch.deliveries ALTER COLUMN case_id SET NOT NULL;
ALTER TABLE snitch.deliveries ADD CONSTRAINT deliveries_destination_whole
    CHECK ((channel = 'webhook') = (destination IS NOT NULL));

-- A claim reads every due pending delivery with its keys (then ranks them per key): this
-- index covers it, in due order, and serves next_delivery_at as the old one did.
CREATE INDEX deliveries_due_keys ON snitch.deliveries (next_attempt_at, seq)
    INCLUDE (id, case_id, channel, destination) WHERE state = 'pending';
DROP INDEX snitch.deliveries_due;
