-- Badge keys (docs/rules.md#badges): each case's one key for its public badges. A case
-- has at most one; a key belongs to one case only.
CREATE TABLE snitch.badge_keys (
    case_id text PRIMARY KEY REFERENCES snitch.cases (id),
    key     text NOT NULL UNIQUE
);
