-- The host application's own table: its teams. Snitch's tables live beside it, created by
-- snitch::store::sqlite::MIGRATOR; versions here must not be Snitch's (dates: 2026…).
CREATE TABLE teams (
    name TEXT PRIMARY KEY,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
