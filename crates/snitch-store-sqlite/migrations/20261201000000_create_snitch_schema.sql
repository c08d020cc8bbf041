-- Snitch on SQLite. Every instant is an INTEGER of milliseconds since the Unix epoch
-- (UTC); lists (members, tags, e-mail addresses, offsets, attempts) are JSON arrays in
-- TEXT; booleans are 0 or 1. `seq` columns (AUTOINCREMENT, never reused) give the order
-- of insertion.

-- The accounts that own snitches, with their team and plan.
CREATE TABLE cases (
    id            TEXT    PRIMARY KEY NOT NULL,
    members       TEXT    NOT NULL,
    max_snitches  INTEGER NOT NULL CHECK (max_snitches >= 0),
    error_notices INTEGER NOT NULL,
    on_hold       INTEGER NOT NULL
);

-- One row per snitch: its settings and where its state machine stands.
CREATE TABLE snitches (
    seq                   INTEGER PRIMARY KEY AUTOINCREMENT,
    token                 TEXT    NOT NULL UNIQUE,
    case_id               TEXT    NOT NULL REFERENCES cases (id),
    name                  TEXT    NOT NULL,
    tags                  TEXT    NOT NULL,
    notes                 TEXT    NOT NULL,
    interval              TEXT    NOT NULL,
    alert_type            TEXT    NOT NULL,
    alert_email           TEXT    NOT NULL,
    created_at            INTEGER NOT NULL,
    status                TEXT    NOT NULL,
    checked_in_at         INTEGER,
    last_check_in_at      INTEGER,
    anchor_at             INTEGER,
    deadline_at           INTEGER,
    -- The pause in force, if any: all of pause_until_kind, pause_resume_status and
    -- pause_checked_in are set, or none; pause_until_at only for kind 'at'.
    pause_until_kind      TEXT    CHECK (pause_until_kind IN ('healthy', 'unpaused', 'at')),
    pause_until_at        INTEGER,
    pause_resume_status   TEXT,
    pause_checked_in      INTEGER,
    smart_offsets_ms      TEXT    NOT NULL,
    last_errored_alert_at INTEGER,
    error_announced       INTEGER NOT NULL,
    last_recovery_alert_at INTEGER,
    event_seq             INTEGER NOT NULL CHECK (event_seq >= 0),
    version               INTEGER NOT NULL CHECK (version >= 0),
    -- Snitch::wake_at, kept by the store on every write: the deadline sweep's index.
    wake_at               INTEGER,
    -- A sweeper that claimed the snitch holds it until then (or until it is saved).
    sweep_lease_until     INTEGER
);

CREATE INDEX snitches_by_case ON snitches (case_id, created_at, seq);
CREATE INDEX snitches_by_wake_at ON snitches (wake_at, token) WHERE wake_at IS NOT NULL;

-- The most recent check-ins of each snitch (the store keeps the newest 100).
CREATE TABLE check_ins (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    token       TEXT    NOT NULL REFERENCES snitches (token) ON DELETE CASCADE,
    at          INTEGER NOT NULL,
    -- NULL for a success, the exit status the job sent for an error.
    exit_status TEXT,
    message     TEXT
);

CREATE INDEX check_ins_by_token ON check_ins (token, seq);

-- The most recent events of each snitch (the store keeps the newest 100).
CREATE TABLE events (
    seq                  INTEGER PRIMARY KEY AUTOINCREMENT,
    id                   TEXT    NOT NULL UNIQUE,
    token                TEXT    NOT NULL REFERENCES snitches (token) ON DELETE CASCADE,
    kind                 TEXT    NOT NULL,
    at                   INTEGER NOT NULL,
    case_id              TEXT    NOT NULL,
    name                 TEXT    NOT NULL,
    notes                TEXT    NOT NULL,
    tags                 TEXT    NOT NULL,
    alert_email          TEXT    NOT NULL,
    status               TEXT    NOT NULL,
    previous_status      TEXT    NOT NULL,
    checked_in_at        INTEGER,
    check_in_at          INTEGER,
    check_in_exit_status TEXT,
    check_in_message     TEXT,
    missed_periods       INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX events_by_token ON events (token, seq);

-- The webhooks of each case.
CREATE TABLE webhooks (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT    NOT NULL UNIQUE,
    case_id    TEXT    NOT NULL REFERENCES cases (id),
    url        TEXT    NOT NULL,
    secret     TEXT,
    created_at INTEGER NOT NULL
);

CREATE INDEX webhooks_by_case ON webhooks (case_id, created_at, seq);

-- The outbox: one row per event and channel, kept while pending even when its snitch and
-- event are gone, so an alert once emitted still goes out.
CREATE TABLE deliveries (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT    NOT NULL UNIQUE,
    event_id        TEXT    NOT NULL,
    -- The whole event as it was emitted (see EventRecord in src/records.rs).
    event           TEXT    NOT NULL,
    -- The keys of fair claims: the event's case, and `host:port` of a webhook.
    case_id         TEXT    NOT NULL,
    destination     TEXT,
    channel         TEXT    NOT NULL CHECK (channel IN ('webhook', 'email')),
    hook_id         TEXT,
    url             TEXT,
    secret          TEXT,
    recipients      TEXT,
    state           TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    -- While pending: when it may next be tried, or the end of a dispatcher's lease.
    next_attempt_at INTEGER,
    -- The attempts so far, oldest first (see AttemptRecord in src/records.rs).
    attempts        TEXT    NOT NULL DEFAULT '[]',
    CHECK (
        (channel = 'webhook' AND hook_id IS NOT NULL AND url IS NOT NULL
            AND recipients IS NULL AND destination IS NOT NULL)
        OR (channel = 'email' AND recipients IS NOT NULL AND hook_id IS NULL AND url IS NULL
            AND secret IS NULL AND destination IS NULL)
    )
);

CREATE INDEX deliveries_by_event ON deliveries (event_id, seq);
CREATE INDEX deliveries_due ON deliveries (next_attempt_at, seq) WHERE state = 'pending';

-- Our own downtime (behaviour.md section 8): when each server was last alive.
CREATE TABLE servers (
    id        TEXT    PRIMARY KEY NOT NULL,
    last_seen INTEGER NOT NULL,
    stopped   INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE outages (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    started_at INTEGER NOT NULL,
    ended_at   INTEGER NOT NULL,
    CHECK (started_at < ended_at)
);

CREATE INDEX outages_by_end ON outages (ended_at);

-- How many snitches of each case an outage deferred (one per snitch and outage).
CREATE TABLE outage_deferrals (
    outage_id INTEGER NOT NULL REFERENCES outages (id) ON DELETE CASCADE,
    case_id   TEXT    NOT NULL,
    snitches  INTEGER NOT NULL CHECK (snitches > 0),
    PRIMARY KEY (outage_id, case_id)
);
