-- Badge keys (docs/rules.md#badges): each case's one key for its public badges. A case
-- has at most one; a key belongs to one case only.
CREATE TABLE snitch_badge_keys (
    case_id TEXT PRIMARY KEY NOT NULL REFERENCES snitch_cases (id),
    key     TEXT NOT NULL UNIQUE
);
