//! Statements both SQL stores run, in the canonical form: tables in the `snitch.` schema
//! (Postgres) and numbered parameters `$N`. A store runs them through [`Dialect::sql`],
//! which rewrites both for its database (SQLite: `snitch_` tables, `?N`).
//!
//! Only what is the same in both dialects is here; what differs (claims, trims, upserts
//! that take the greater of two values, list filters) stays in each store.

use crate::records::{
    API_KEY_COLUMNS, CASE_COLUMNS, CHANNEL_COLUMNS, EVENT_COLUMNS, SNITCH_COLUMNS, SNITCH_FIELDS,
    WEBHOOK_COLUMNS,
};
use crate::Dialect;

/// sqlx's record of applied migrations (in the connection's schema, not `snitch`).
pub const APPLIED_MIGRATIONS: &str = "SELECT version FROM _sqlx_migrations WHERE success";

/// `$1` id, then the other [`CASE_COLUMNS`].
pub const UPSERT_CASE: &str = "INSERT INTO snitch.cases \
    (id, members, max_snitches, error_notices, on_hold) VALUES ($1, $2, $3, $4, $5) \
    ON CONFLICT (id) DO UPDATE SET members = excluded.members, \
    max_snitches = excluded.max_snitches, error_notices = excluded.error_notices, \
    on_hold = excluded.on_hold";

/// The case `$1`.
pub fn select_case<D: Dialect>() -> String {
    D::sql(&format!(
        "SELECT {CASE_COLUMNS} FROM snitch.cases WHERE id = $1"
    ))
}

/// Every case, by id (bytewise).
pub fn select_cases<D: Dialect>() -> String {
    D::sql(&format!(
        "SELECT {CASE_COLUMNS} FROM snitch.cases ORDER BY id{}",
        D::BYTE_ORDER
    ))
}

/// Whether case `$1` is stored.
pub const CASE_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM snitch.cases WHERE id = $1)";

/// Whether snitch `$1` (a token) is stored.
pub const SNITCH_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM snitch.snitches WHERE token = $1)";

/// The [`SNITCH_COLUMNS`] of snitches; a filter and order follow.
pub fn select_snitches<D: Dialect>() -> String {
    D::sql(&format!("SELECT {SNITCH_COLUMNS} FROM snitch.snitches"))
}

/// `UPDATE` of [`SNITCH_FIELDS`] by token (`$1`) from an expected version (`$2`), the
/// fields from `$3`. Identity and creation never change; a save ends any sweep lease (the
/// snitch is up to date again).
pub fn update_snitch<D: Dialect>() -> String {
    let sets: Vec<String> = SNITCH_FIELDS
        .iter()
        .enumerate()
        .map(|(i, field)| format!("{field} = ${}", i + 3))
        .collect();
    D::sql(&format!(
        "UPDATE snitch.snitches SET {}, sweep_lease_until = NULL \
         WHERE token = $1 AND version = $2",
        sets.join(", ")
    ))
}

/// Snitches due at `$1`, by wake time and token, at most `$2`.
pub fn due<D: Dialect>() -> String {
    D::sql(&format!(
        "SELECT {SNITCH_COLUMNS} FROM snitch.snitches \
         WHERE wake_at IS NOT NULL AND wake_at <= $1 ORDER BY wake_at, token LIMIT $2"
    ))
}

/// The earliest wake time of any snitch.
pub const NEXT_WAKE_AT: &str = "SELECT min(wake_at) FROM snitch.snitches WHERE wake_at IS NOT NULL";

/// How many deliveries are pending.
pub const PENDING_DELIVERIES: &str =
    "SELECT count(*) FROM snitch.deliveries WHERE state = 'pending'";

/// When the earliest pending delivery may be tried.
pub const NEXT_DELIVERY_AT: &str =
    "SELECT min(next_attempt_at) FROM snitch.deliveries WHERE state = 'pending'";

/// The newest events of snitch `$1`, newest first, at most `$2`.
pub fn events<D: Dialect>() -> String {
    D::sql(&format!(
        "SELECT {EVENT_COLUMNS} FROM snitch.events WHERE token = $1 ORDER BY seq DESC LIMIT $2"
    ))
}

/// The finished deliveries of snitch `$1`'s events (which go with the snitch).
pub const DELETE_FINISHED_DELIVERIES_OF: &str = "DELETE FROM snitch.deliveries \
    WHERE state <> 'pending' AND event_id IN (SELECT id FROM snitch.events WHERE token = $1)";

/// Delivery `$1` once finished, when its event is no longer in its snitch's history: no
/// one is left to read it.
pub const DELETE_ORPHAN_DELIVERY: &str = "DELETE FROM snitch.deliveries \
    WHERE id = $1 AND state <> 'pending' \
    AND NOT EXISTS (SELECT 1 FROM snitch.events e WHERE e.id = snitch.deliveries.event_id)";

/// [`WEBHOOK_COLUMNS`] from `$1`.
pub fn insert_webhook<D: Dialect>() -> String {
    D::sql(&format!(
        "INSERT INTO snitch.webhooks ({WEBHOOK_COLUMNS}) VALUES ($1, $2, $3, $4, $5)"
    ))
}

/// The webhooks of case `$1`, oldest first.
pub fn webhooks<D: Dialect>() -> String {
    D::sql(&format!(
        "SELECT {WEBHOOK_COLUMNS} FROM snitch.webhooks \
         WHERE case_id = $1 ORDER BY created_at, seq"
    ))
}

/// Webhook `$2` of case `$1`.
pub const DELETE_WEBHOOK: &str = "DELETE FROM snitch.webhooks WHERE case_id = $1 AND id = $2";

/// [`CHANNEL_COLUMNS`] from `$1`.
pub fn insert_channel<D: Dialect>() -> String {
    D::sql(&format!(
        "INSERT INTO snitch.channels ({CHANNEL_COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
    ))
}

/// The channels of case `$1`, oldest first.
pub fn channels<D: Dialect>() -> String {
    D::sql(
        &format!(
            "SELECT {CHANNEL_COLUMNS} FROM snitch.channels \
         WHERE case_id = $2 ORDER BY created_at, seq"
        )
        .replace("$2", "$1"),
    )
}

/// Channel `$1` of case `$2` takes the [`CHANNEL_COLUMNS`] from `$3` (name) on.
pub fn update_channel<D: Dialect>() -> String {
    D::sql(
        "UPDATE snitch.channels SET name = $3, kind = $4, settings = $5, events = $6, \
         tags = $7, key = $8, created_at = $9 WHERE id = $1 AND case_id = $2",
    )
}

/// Channel `$2` of case `$1`.
pub const DELETE_CHANNEL: &str = "DELETE FROM snitch.channels WHERE case_id = $1 AND id = $2";

/// Case `$1` takes badge key `$2`, replacing the one it had.
pub const SET_BADGE_KEY: &str = "INSERT INTO snitch.badge_keys (case_id, key) VALUES ($1, $2) \
    ON CONFLICT (case_id) DO UPDATE SET key = excluded.key";

/// Case `$1`'s badge key becomes `$2` unless it has one (the caller reads it back).
pub const INSERT_FIRST_BADGE_KEY: &str =
    "INSERT INTO snitch.badge_keys (case_id, key) VALUES ($1, $2) ON CONFLICT (case_id) DO NOTHING";

/// The badge key of case `$1`.
pub const BADGE_KEY: &str = "SELECT key FROM snitch.badge_keys WHERE case_id = $1";

/// The case whose badge key is `$1`.
pub const CASE_OF_BADGE_KEY: &str = "SELECT case_id FROM snitch.badge_keys WHERE key = $1";

/// [`API_KEY_COLUMNS`] from `$1`.
pub fn insert_api_key<D: Dialect>() -> String {
    D::sql(&format!(
        "INSERT INTO snitch.api_keys ({API_KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
    ))
}

/// The API keys of case `$1`, or of every case when `$1` is NULL; oldest first.
pub fn api_keys<D: Dialect>() -> String {
    D::sql(&format!(
        "SELECT {API_KEY_COLUMNS} FROM snitch.api_keys \
         WHERE CAST($1 AS text) IS NULL OR case_id = $1 ORDER BY created_at, seq"
    ))
}

/// Revokes API key `$1`.
pub const REVOKE_API_KEY: &str = "UPDATE snitch.api_keys SET revoked = true WHERE id = $1";

/// When the last server was alive.
pub const LAST_ALIVE: &str = "SELECT max(last_seen) FROM snitch.servers";

/// An outage from `$1` to `$2`, with its id.
pub const INSERT_OUTAGE: &str =
    "INSERT INTO snitch.outages (started_at, ended_at) VALUES ($1, $2) RETURNING id";

/// Forgets servers not seen since `$1`.
pub const FORGET_SERVERS: &str = "DELETE FROM snitch.servers WHERE last_seen < $1";

/// Outages that ended at `$1` or later, oldest first.
pub const OUTAGES: &str =
    "SELECT id, started_at, ended_at FROM snitch.outages WHERE ended_at >= $1 ORDER BY id";

/// The newest outages, at most `$2`, each with how many snitches of case `$1` it deferred.
pub const CASE_OUTAGES: &str = "SELECT o.id, o.started_at, o.ended_at, \
    coalesce(d.snitches, 0) \
    FROM snitch.outages o LEFT JOIN snitch.outage_deferrals d \
    ON d.outage_id = o.id AND d.case_id = $1 \
    ORDER BY o.id DESC LIMIT $2";

/// One more snitch of case `$2` deferred by outage `$1`.
pub const DEFER: &str = "INSERT INTO snitch.outage_deferrals (outage_id, case_id, snitches) \
    VALUES ($1, $2, 1) ON CONFLICT (outage_id, case_id) \
    DO UPDATE SET snitches = snitch.outage_deferrals.snitches + 1";

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Question;

    impl Dialect for Question {
        type Time = i64;
        type Texts = Vec<String>;
        type Numbers = Vec<i64>;
        const TABLES: &'static str = "snitch_";
        const PARAMETER: char = '?';
        const BYTE_ORDER: &'static str = "";
        fn time(t: snitch_core::Timestamp) -> i64 {
            t.timestamp_millis()
        }
        fn instant(_: &str, t: i64) -> Result<snitch_core::Timestamp, snitch_core::StorageError> {
            Ok(chrono::DateTime::from_timestamp_millis(t).expect("in range"))
        }
        fn texts(items: Vec<String>) -> Vec<String> {
            items
        }
        fn text_items(texts: &Vec<String>) -> &[String] {
            texts
        }
        fn numbers(numbers: Vec<i64>) -> Vec<i64> {
            numbers
        }
    }

    #[test]
    fn a_dialect_renames_tables_and_parameters() {
        assert_eq!(
            Question::sql(DEFER),
            "INSERT INTO snitch_outage_deferrals (outage_id, case_id, snitches) \
             VALUES (?1, ?2, 1) ON CONFLICT (outage_id, case_id) \
             DO UPDATE SET snitches = snitch_outage_deferrals.snitches + 1"
        );
        assert_eq!(Question::parameters(4, 3), "?4, ?5, ?6");
        assert!(update_snitch::<Question>().ends_with(
            "wake_at = ?33, sweep_lease_until = NULL WHERE token = ?1 AND version = ?2"
        ));
    }
}
