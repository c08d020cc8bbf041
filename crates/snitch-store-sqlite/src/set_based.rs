//! Set-based saves of the changes that only move a snitch and append its check-ins (a
//! check-in that keeps the status: most saves): a batch's worth of them in one query, not
//! one each.
//!
//! Per change, a save statement by statement costs the writer's thread more than SQLite's
//! own work: a round trip to the connection's thread, about forty values bound and copied,
//! a savepoint, and a walk of the history's index to trim it. A *round* takes the changes
//! whose snitches it holds once each, as JSON rows (one text bound per statement, read by
//! `json_each`), and is one query of two statements: the check-ins of the snitches whose
//! stored version is the expected one, then the update of those snitches.
//!
//! History is trimmed lazily, as on Postgres: a snitch counts its stored check-ins
//! (`check_ins_stored`) and the length its last change asked for (`check_ins_keep`), and is
//! trimmed back to that once it holds twice as many, at most [`TRIMS_PER_BATCH`] snitches
//! per batch; readers never see more than the newest `check_ins_keep`.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde::Serialize;
use snitch_core::{Change, StorageError};
use snitch_store_sql::records::{CheckInRecord, SnitchFields, SETTINGS_FIELDS, SNITCH_FIELDS};
use snitch_store_sql::{backend, limit, to_integer};
use sqlx::sqlite::SqliteConnection;

use crate::records_lite::Lite;

/// Whether a change only moves its snitch and appends check-ins: no settings, events,
/// deliveries or outage deferrals. Those can be saved in a round.
pub(crate) fn moves_state_only(change: &Change) -> bool {
    change.keeps_settings()
        && change.events().is_empty()
        && change.deliveries().is_empty()
        && change.deferred_by().is_empty()
}

/// The history length a save leaves a snitch with (`check_ins_keep`: what readers may see
/// and what trims cut to), for `keep` asked and `added` check-ins written, over the stored
/// `check_ins_keep`. Asked for a longer history than it kept, it grows only by what this
/// save adds: stored rows beyond the old length (trims are lazy) were already gone for
/// readers and stay gone.
fn keep_after_save(keep: &str, added: &str) -> String {
    format!(
        "CASE WHEN {keep} > check_ins_keep \
           THEN min({keep}, check_ins_keep + {added}) ELSE {keep} END"
    )
}

/// A round: `?` the check-ins (JSON rows of [`CheckInRow`], in order), `?` the snitches
/// (JSON rows of [`StateRow`], each token once). The check-ins go in first, for the
/// snitches whose stored version is the expected one: the update that follows, under the
/// same condition in the same transaction, then applies to exactly those. It answers each
/// updated snitch's token, stored check-in count and history length.
static SAVE_ROUND: LazyLock<String> = LazyLock::new(|| {
    let sets: Vec<String> = SNITCH_FIELDS[SETTINGS_FIELDS..]
        .iter()
        .map(|field| format!("{field} = i.value ->> '$.{field}'"))
        .collect();
    format!(
        "INSERT INTO snitch_check_ins (token, at, exit_status, message, number, details, body) \
         SELECT s.token, c.value ->> '$.at', c.value ->> '$.exit_status', \
           c.value ->> '$.message', c.value ->> '$.number', c.value ->> '$.details', \
           c.value ->> '$.body' \
         FROM json_each(?) AS c JOIN snitch_snitches AS s \
           ON s.token = c.value ->> '$.token' AND s.version = c.value ->> '$.expected' \
         ORDER BY c.key; \
         UPDATE snitch_snitches SET {sets}, sweep_lease_until = NULL, \
           check_ins_stored = check_ins_stored + (i.value ->> '$.added'), \
           check_ins_keep = {keep} \
         FROM json_each(?) AS i \
         WHERE token = i.value ->> '$.token' AND version = i.value ->> '$.expected' \
         RETURNING token, check_ins_stored, check_ins_keep",
        sets = sets.join(", "),
        keep = keep_after_save("(i.value ->> '$.keep')", "(i.value ->> '$.added')"),
    )
});

/// After a save that wrote check-ins one by one (`?1` token, `?2` the length asked, `?3`
/// check-ins written): the history length it leaves ([`keep_after_save`]), the history cut
/// to it, and the count of what is stored.
pub(crate) static SETTLE_HISTORY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "UPDATE snitch_snitches SET check_ins_keep = {keep} WHERE token = ?1; {trim} \
         UPDATE snitch_snitches SET check_ins_stored = \
           (SELECT count(*) FROM snitch_check_ins WHERE token = ?1) WHERE token = ?1",
        keep = keep_after_save("?2", "?3"),
        trim = TRIM_ONE,
    )
});

/// Deletes the check-ins of snitch `?1` older than the newest `check_ins_keep`. Its
/// `changes()` is the rows it deleted.
const TRIM_ONE: &str = "DELETE FROM snitch_check_ins WHERE token = ?1 AND seq <= \
       (SELECT seq FROM snitch_check_ins WHERE token = ?1 ORDER BY seq DESC LIMIT 1 \
        OFFSET (SELECT check_ins_keep FROM snitch_snitches WHERE token = ?1));";

/// [`TRIM_ONE`], and the snitch's count of stored check-ins kept.
static TRIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{TRIM_ONE} UPDATE snitch_snitches SET check_ins_stored = check_ins_stored - changes() \
         WHERE token = ?1"
    )
});

/// The most histories one batch trims. Snitches checked in alike fill up alike: on
/// Postgres, 10,000 created together reached twice their history within seconds, and
/// batches that trimmed every full snitch of theirs held check-ins up (BENCHMARKS.md). A
/// snitch left full is trimmed after a later save (readers never see more than it keeps).
pub(crate) const TRIMS_PER_BATCH: usize = 8;

/// A snitch of a round: its token, the version it must have, the check-ins the change adds
/// and the history length it asks for, then its state ([`SNITCH_FIELDS`] after
/// [`SETTINGS_FIELDS`], under their column names: a round keeps the settings as stored).
#[derive(Debug, Serialize)]
struct StateRow<'a> {
    token: &'a str,
    expected: i64,
    added: i64,
    keep: i64,
    status: &'static str,
    checked_in_at: Option<i64>,
    last_check_in_at: Option<i64>,
    anchor_at: Option<i64>,
    deadline_at: Option<i64>,
    pause_until_kind: Option<&'static str>,
    pause_until_at: Option<i64>,
    pause_resume_status: Option<&'static str>,
    pause_checked_in: Option<bool>,
    /// The column's JSON text, as the statement by statement path binds it.
    smart_offsets_ms: String,
    last_errored_alert_at: Option<i64>,
    error_announced: bool,
    last_recovery_alert_at: Option<i64>,
    consecutive_failures: i64,
    consecutive_misses: i64,
    runs: Option<String>,
    check_in_seq: i64,
    event_seq: i64,
    version: i64,
    wake_at: Option<i64>,
}

impl<'a> StateRow<'a> {
    fn of(change: &'a Change, added: usize) -> Result<Self, StorageError> {
        let snitch = change.snitch();
        let f = SnitchFields::<Lite>::of(snitch)?;
        Ok(StateRow {
            token: snitch.token().as_str(),
            expected: to_integer("version", change.expected_version())?,
            added: limit(added),
            keep: limit(change.keep_check_ins().max(1)),
            status: f.status,
            checked_in_at: f.checked_in_at,
            last_check_in_at: f.last_check_in_at,
            anchor_at: f.anchor_at,
            deadline_at: f.deadline_at,
            pause_until_kind: f.pause_until_kind,
            pause_until_at: f.pause_until_at,
            pause_resume_status: f.pause_resume_status,
            pause_checked_in: f.pause_checked_in,
            smart_offsets_ms: serde_json::to_string(f.smart_offsets_ms)
                .map_err(|e| StorageError::Backend(Box::new(e)))?,
            last_errored_alert_at: f.last_errored_alert_at,
            error_announced: f.error_announced,
            last_recovery_alert_at: f.last_recovery_alert_at,
            consecutive_failures: f.consecutive_failures,
            consecutive_misses: f.consecutive_misses,
            runs: f.runs,
            check_in_seq: f.check_in_seq,
            event_seq: f.event_seq,
            version: f.version,
            wake_at: f.wake_at,
        })
    }
}

/// A check-in of a round, with its snitch's token and expected version.
#[derive(Debug, Serialize)]
struct CheckInRow<'a> {
    token: &'a str,
    expected: i64,
    #[serde(flatten)]
    record: CheckInRecord<Lite>,
}

/// What a round did: each change's result, in the order given, and the snitches whose
/// history is full (twice what they keep, or more), each with how far over it is.
#[derive(Debug)]
pub(crate) struct RoundOutcome {
    pub(crate) results: Vec<Result<(), StorageError>>,
    pub(crate) full: Vec<(String, i64)>,
}

/// Saves `changes` (each [`moves_state_only`], each snitch at most once) in one query.
/// A change that cannot be stored at all (a counter beyond an integer) fails alone; an
/// `Err` is a failed statement, after which part of the round may be written: the caller
/// rolls back to a savepoint set before.
pub(crate) async fn save_round(
    conn: &mut SqliteConnection,
    changes: &[&Change],
) -> Result<RoundOutcome, sqlx::Error> {
    let mut results: Vec<Result<(), StorageError>> = Vec::with_capacity(changes.len());
    let mut snitches = Vec::with_capacity(changes.len());
    let mut check_ins = Vec::with_capacity(changes.len());
    for change in changes {
        // Only the newest `keep` check-ins of a long change can be kept: older ones are not
        // written at all.
        let keep = change.keep_check_ins().max(1);
        let written = &change.check_ins()[change.check_ins().len().saturating_sub(keep)..];
        match StateRow::of(change, written.len()) {
            Ok(row) => {
                for c in written {
                    check_ins.push(CheckInRow {
                        token: row.token,
                        expected: row.expected,
                        record: CheckInRecord::of(c),
                    });
                }
                snitches.push(row);
                results.push(Ok(()));
            }
            Err(e) => results.push(Err(e)),
        }
    }
    let mut outcome = RoundOutcome {
        results,
        full: Vec::new(),
    };
    if snitches.is_empty() {
        return Ok(outcome);
    }
    let check_ins = serde_json::to_string(&check_ins).map_err(|e| sqlx::Error::Encode(e.into()))?;
    let rows = serde_json::to_string(&snitches).map_err(|e| sqlx::Error::Encode(e.into()))?;
    let updated: Vec<(String, i64, i64)> = sqlx::query_as(&SAVE_ROUND)
        .bind(check_ins)
        .bind(rows)
        .fetch_all(&mut *conn)
        .await?;
    let updated: HashMap<&str, (i64, i64)> = updated
        .iter()
        .map(|(token, stored, keep)| (token.as_str(), (*stored, *keep)))
        .collect();
    let mut rows = snitches.iter();
    for result in outcome.results.iter_mut().filter(|r| r.is_ok()) {
        let Some(row) = rows.next() else { break };
        match updated.get(row.token) {
            Some(&(stored, keep)) => {
                if stored >= keep.saturating_mul(2) {
                    outcome.full.push((row.token.to_owned(), stored - keep));
                }
            }
            None => {
                *result = Err(crate::not_applied(conn, row.token)
                    .await
                    .unwrap_or_else(|e| e));
            }
        }
    }
    Ok(outcome)
}

/// Trims the histories of at most [`TRIMS_PER_BATCH`] of the `full` snitches (token, how
/// far over), the furthest over first (so one left out, which grows, is not left out for
/// ever), each once.
pub(crate) async fn trim(
    conn: &mut SqliteConnection,
    mut full: Vec<(String, i64)>,
) -> Result<(), StorageError> {
    full.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    full.dedup_by(|later, first| later.0 == first.0);
    full.sort_by_key(|(_, over)| std::cmp::Reverse(*over));
    for (token, _) in full.iter().take(TRIMS_PER_BATCH) {
        sqlx::query(&TRIM)
            .bind(token)
            .execute(&mut *conn)
            .await
            .map_err(backend)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The round's JSON keys are the columns it sets: a field named in one place and not
    /// the other would silently store NULL.
    #[test]
    fn a_state_row_names_every_state_column() {
        let row = StateRow {
            token: "t",
            expected: 0,
            added: 0,
            keep: 1,
            status: "pending",
            checked_in_at: None,
            last_check_in_at: None,
            anchor_at: None,
            deadline_at: None,
            pause_until_kind: None,
            pause_until_at: None,
            pause_resume_status: None,
            pause_checked_in: None,
            smart_offsets_ms: "[]".to_owned(),
            last_errored_alert_at: None,
            error_announced: false,
            last_recovery_alert_at: None,
            consecutive_failures: 0,
            consecutive_misses: 0,
            runs: None,
            check_in_seq: 0,
            event_seq: 0,
            version: 1,
            wake_at: None,
        };
        let json = serde_json::to_value(&row).expect("plain data serializes");
        let keys: Vec<&str> = json
            .as_object()
            .expect("a row is an object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = vec!["token", "expected", "added", "keep"];
        expected.extend_from_slice(&SNITCH_FIELDS[SETTINGS_FIELDS..]);
        let mut sorted = expected.clone();
        sorted.sort_unstable();
        // serde_json's map is ordered by key unless `preserve_order` is on.
        let mut found = keys.clone();
        found.sort_unstable();
        assert_eq!(found, sorted);
    }
}
