-- Channels (docs/rules.md#channels): each case's vendor channels (Slack, PagerDuty, …)
-- and e-mail channels, with their settings as one JSON object; and deliveries through
-- them, whose `settings` column holds the channel's settings as they were (a native
-- channel's only) and whose `secret` its key.
CREATE TABLE snitch.channels (
    id         text        PRIMARY KEY,
    case_id    text        NOT NULL REFERENCES snitch.cases (id),
    seq        bigint      GENERATED ALWAYS AS IDENTITY,
    kind       text        NOT NULL,
    name       text,
    settings   text        NOT NULL,
    events     text        NOT NULL,
    tags       text        NOT NULL,
    key        text        NOT NULL,
    created_at timestamptz NOT NULL
);

CREATE INDEX channels_by_case ON snitch.channels (case_id, created_at, seq);

ALTER TABLE snitch.deliveries ADD COLUMN settings text;
ALTER TABLE snitch.deliveries DROP CONSTRAINT deliveries_channel_check;
ALTER TABLE snitch.deliveries DROP CONSTRAINT deliveries_channel_whole;
ALTER TABLE snitch.deliveries ADD CONSTRAINT deliveries_channel_whole CHECK (
    (channel = 'webhook' AND hook_id IS NOT NULL AND url IS NOT NULL AND recipients IS NULL
        AND settings IS NULL)
    OR (channel = 'email' AND recipients IS NOT NULL AND hook_id IS NULL AND url IS NULL
        AND secret IS NULL AND settings IS NULL)
    OR (channel NOT IN ('webhook', 'email') AND hook_id IS NOT NULL AND url IS NULL
        AND recipients IS NULL AND settings IS NOT NULL AND secret IS NOT NULL)
);
ALTER TABLE snitch.deliveries DROP CONSTRAINT deliveries_destination_whole;
ALTER TABLE snitch.deliveries ADD CONSTRAINT deliveries_destination_whole
    CHECK ((channel = 'email') = (destination IS NULL));
