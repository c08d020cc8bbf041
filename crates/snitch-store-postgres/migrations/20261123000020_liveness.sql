-- Our own downtime (behaviour.md section 8): each server records when it was last alive
-- (a heartbeat, or its clean stop); a gap longer than the outage threshold is an outage,
-- and the deadlines inside it are deferred instead of announced.
CREATE TABLE snitch.servers (
    id        text        PRIMARY KEY,
    -- The last heartbeat, or the clean stop.
    last_seen timestamptz NOT NULL,
    stopped   boolean     NOT NULL DEFAULT false
);

CREATE TABLE snitch.outages (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at timestamptz NOT NULL,
    ended_at   timestamptz NOT NULL,
    CONSTRAINT outages_span CHECK (started_at < ended_at)
);

CREATE INDEX outages_by_end ON snitch.outages (ended_at);

-- How many snitches of each case an outage deferred (one per snitch and outage).
CREATE TABLE snitch.outage_deferrals (
    outage_id bigint NOT NULL REFERENCES snitch.outages (id) ON DELETE CASCADE,
    case_id   text   NOT NULL,
    snitches  bigint NOT NULL CHECK (snitches > 0),
    PRIMARY KEY (outage_id, case_id)
);

-- Catch-up is one event: how many due points a snitch.missing stands for (0 for others).
ALTER TABLE snitch.events ADD COLUMN missed_periods bigint NOT NULL DEFAULT 0;
