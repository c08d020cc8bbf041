-- API keys live in the store (issue 11): only their digests, with a prefix to tell them
-- apart, a label, when made and last used, and whether revoked.
CREATE TABLE snitch.api_keys (
    id           text        PRIMARY KEY,
    seq          bigint      GENERATED ALWAYS AS IDENTITY,
    case_id      text        NOT NULL REFERENCES snitch.cases (id),
    digest       text        NOT NULL,
    prefix       text        NOT NULL,
    label        text        NOT NULL,
    created_at   timestamptz NOT NULL,
    last_used_at timestamptz,
    revoked      boolean     NOT NULL DEFAULT false,
    CONSTRAINT api_keys_digest_key UNIQUE (digest)
);

CREATE INDEX api_keys_by_case ON snitch.api_keys (case_id, created_at, seq);
