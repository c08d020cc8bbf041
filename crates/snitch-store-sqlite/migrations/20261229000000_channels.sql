-- Channels (docs/rules.md#channels): each case's vendor channels (Slack, PagerDuty, …)
-- and e-mail channels, with their settings as one JSON object; and deliveries through
-- them. SQLite cannot change a CHECK constraint, so the outbox is copied into a table
-- whose checks admit every kind, with a `settings` column (the channel's settings as
-- JSON, a native channel's only); rows keep their `seq`, so order of storing is kept.
CREATE TABLE snitch_channels (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT    NOT NULL UNIQUE,
    case_id    TEXT    NOT NULL REFERENCES snitch_cases (id),
    kind       TEXT    NOT NULL,
    name       TEXT,
    settings   TEXT    NOT NULL,
    events     TEXT    NOT NULL,
    tags       TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);

CREATE INDEX snitch_channels_by_case ON snitch_channels (case_id, created_at, seq);

CREATE TABLE snitch_deliveries_v2 (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT    NOT NULL UNIQUE,
    event_id        TEXT    NOT NULL,
    event           TEXT    NOT NULL,
    case_id         TEXT    NOT NULL,
    destination     TEXT,
    channel         TEXT    NOT NULL,
    hook_id         TEXT,
    url             TEXT,
    secret          TEXT,
    recipients      TEXT,
    state           TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    next_attempt_at INTEGER,
    attempts        TEXT    NOT NULL DEFAULT '[]',
    settings        TEXT,
    CHECK (
        (channel = 'webhook' AND hook_id IS NOT NULL AND url IS NOT NULL
            AND recipients IS NULL AND settings IS NULL AND destination IS NOT NULL)
        OR (channel = 'email' AND recipients IS NOT NULL AND hook_id IS NULL AND url IS NULL
            AND secret IS NULL AND settings IS NULL AND destination IS NULL)
        OR (channel NOT IN ('webhook', 'email') AND hook_id IS NOT NULL AND url IS NULL
            AND recipients IS NULL AND settings IS NOT NULL AND secret IS NOT NULL)
    )
);

INSERT INTO snitch_deliveries_v2 (seq, id, event_id, event, case_id, destination, channel,
        hook_id, url, secret, recipients, state, next_attempt_at, attempts)
    SELECT seq, id, event_id, event, case_id, destination, channel, hook_id, url, secret,
        recipients, state, next_attempt_at, attempts
    FROM snitch_deliveries;

DROP TABLE snitch_deliveries;
ALTER TABLE snitch_deliveries_v2 RENAME TO snitch_deliveries;
CREATE INDEX snitch_deliveries_by_event ON snitch_deliveries (event_id, seq);
CREATE INDEX snitch_deliveries_due ON snitch_deliveries (next_attempt_at, seq)
    WHERE state = 'pending';
