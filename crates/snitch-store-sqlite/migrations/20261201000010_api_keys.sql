-- API keys live in the store (issue 11): only their digests, with a prefix to tell them
-- apart, a label, when made and last used, and whether revoked.
CREATE TABLE api_keys (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    id           TEXT    NOT NULL UNIQUE,
    case_id      TEXT    NOT NULL REFERENCES cases (id),
    digest       TEXT    NOT NULL UNIQUE,
    prefix       TEXT    NOT NULL,
    label        TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked      INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX api_keys_by_case ON api_keys (case_id, created_at, seq);
