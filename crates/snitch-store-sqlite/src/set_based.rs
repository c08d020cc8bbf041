//! Set-based saves of the changes that keep their snitch's settings (every check-in and
//! every sweep's change: most saves): a batch's worth of them in a few statements, not
//! several each.
//!
//! Per change, a save statement by statement costs the writer's thread more than SQLite's
//! own work: a round trip to the connection's thread, about forty values bound and copied,
//! a savepoint, and a walk of the history's index to trim it. A *round* takes the changes
//! whose snitches it holds once each, as rows of `VALUES` lists: the check-ins, events and
//! deliveries of the snitches whose stored version is the expected one, then the update of
//! those snitches. Rows are bound as parameters, as a statement by statement save binds
//! them; a statement holds a power of two of rows (the rest padded with rows that match no
//! snitch), so that a few statements, prepared once per connection, serve every batch.
//! (JSON rows read by `json_each` cost more than the saves they replaced: SQLite renders
//! an element's text again for each of its fields read.)
//!
//! History is trimmed lazily, as on Postgres: a snitch counts its stored check-ins
//! (`check_ins_stored`) and the length its last change asked for (`check_ins_keep`), and is
//! trimmed back to that once it holds twice as many, at most [`TRIMS_PER_BATCH`] snitches
//! per batch; readers never see more than the newest `check_ins_keep`. Events likewise: a
//! snitch's are cut back to [`EVENTS_KEPT`] once every [`EVENT_TRIM_STEP`] of its events
//! (at a point of its own, so that snitches failing together do not all trim together),
//! with their finished deliveries; readers never see more than [`EVENTS_KEPT`].

use std::collections::HashMap;
use std::sync::LazyLock;

use snitch_core::snitch::EVENTS_KEPT;
use snitch_core::{Change, StorageError};
use snitch_store_sql::records::{
    CheckInRecord, DeliveryFields, EventRecord, SnitchFields, DELIVERY_FIELDS, EVENT_COLUMNS,
    SETTINGS_FIELDS, SNITCH_FIELDS,
};
use snitch_store_sql::{backend, bind_delivery, bind_event, bind_snitch_state, limit, to_integer};
use sqlx::sqlite::{SqliteArguments, SqliteConnection};
use sqlx::types::Json;
use sqlx::{Row, Sqlite};

use crate::records_lite::Lite;

/// Whether a change can be saved in a round: it keeps its snitch's settings and defers no
/// outage's alerts (a rare change, saved statement by statement).
pub(crate) fn fits_a_round(change: &Change) -> bool {
    change.keeps_settings() && change.deferred_by().is_empty()
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

/// The most rows in one statement of a round; a round of more is cut into such parts
/// (its snitches are each held once, so the parts are independent).
const MOST_ROWS: usize = 256;

/// The row counts statements are made for: powers of two up to [`MOST_ROWS`].
fn bucket(rows: usize) -> usize {
    rows.next_power_of_two().min(MOST_ROWS)
}

/// Index of a bucket among the statements made.
fn bucket_index(rows: usize) -> usize {
    bucket(rows).trailing_zeros() as usize
}

/// `rows` rows of `columns` positional parameters each: `(?, ?), (?, ?)`.
fn values(rows: usize, columns: usize) -> String {
    let row = format!("({})", vec!["?"; columns].join(", "));
    vec![row; rows].join(", ")
}

/// Columns of a check-in row: token, expected version, order, then the check-in.
const CHECK_IN_COLUMNS: usize = 9;
/// Columns of a snitch row: token, expected version, check-ins added, length asked, then
/// [`SNITCH_FIELDS`] after [`SETTINGS_FIELDS`].
const STATE_COLUMNS: usize = 4 + SNITCH_FIELDS.len() - SETTINGS_FIELDS;

/// The check-ins of a round, for each bucket: those of the snitches whose stored version
/// is the expected one, in order. Rows of a snitch that is not stored at that version (or
/// padding, all NULL) match nothing.
static INSERT_CHECK_INS: LazyLock<Vec<String>> = LazyLock::new(|| {
    (0..=MOST_ROWS.trailing_zeros())
        .map(|power| {
            format!(
                "INSERT INTO snitch_check_ins \
                   (token, at, exit_status, message, number, details, body) \
                 SELECT s.token, c.column4, c.column5, c.column6, c.column7, c.column8, \
                   c.column9 \
                 FROM (VALUES {}) AS c JOIN snitch_snitches AS s \
                   ON s.token = c.column1 AND s.version = c.column2 \
                 ORDER BY c.column3",
                values(1 << power, CHECK_IN_COLUMNS)
            )
        })
        .collect()
});

/// `INSERT {verb} INTO {table} ({columns})` from the rows of a `VALUES` list of `columns`
/// plus three (the snitch's token, its expected version, the row's order), for each
/// bucket: the rows of the snitches stored at their expected version, in order.
fn inserts_of_rows(verb: &str, table: &str, columns: &str) -> Vec<String> {
    let count = columns.split(", ").count();
    let selects: Vec<String> = (4..4 + count).map(|n| format!("r.column{n}")).collect();
    (0..=MOST_ROWS.trailing_zeros())
        .map(|power| {
            format!(
                "INSERT {verb} INTO {table} ({columns}) SELECT {selects} \
                 FROM (VALUES {values}) AS r JOIN snitch_snitches AS s \
                   ON s.token = r.column1 AND s.version = r.column2 \
                 ORDER BY r.column3",
                selects = selects.join(", "),
                values = values(1 << power, count + 3),
            )
        })
        .collect()
}

/// Columns of an event row: token, expected version, order, then [`EVENT_COLUMNS`].
static EVENT_ROW_COLUMNS: LazyLock<usize> = LazyLock::new(|| 3 + EVENT_COLUMNS.split(", ").count());
/// Columns of a delivery row: token, expected version, order, then [`DELIVERY_FIELDS`].
static DELIVERY_ROW_COLUMNS: LazyLock<usize> =
    LazyLock::new(|| 3 + DELIVERY_FIELDS.split(", ").count());

/// A round's events ([`inserts_of_rows`]).
static INSERT_EVENTS: LazyLock<Vec<String>> =
    LazyLock::new(|| inserts_of_rows("", "snitch_events", EVENT_COLUMNS));

/// A round's deliveries ([`inserts_of_rows`]). A delivery id is taken again only when a
/// deleted snitch's token is reused; the new delivery then replaces the old one.
static INSERT_DELIVERIES: LazyLock<Vec<String>> =
    LazyLock::new(|| inserts_of_rows("OR REPLACE", "snitch_deliveries", DELIVERY_FIELDS));

/// How often a snitch's events are cut back to [`EVENTS_KEPT`]: once in so many of its
/// events, so it holds at most this many more.
pub(crate) const EVENT_TRIM_STEP: u64 = 32;

/// Whether a snitch whose event count went from `before` to `after` cuts its events back
/// in this save: it passed its own point of the [`EVENT_TRIM_STEP`] (the point set by its
/// token, so that snitches created and failing together trim in different sweeps).
fn trims_events(token: &str, before: u64, after: u64) -> bool {
    let point = token.bytes().map(u64::from).sum::<u64>();
    (before + point) / EVENT_TRIM_STEP != (after + point) / EVENT_TRIM_STEP
}

/// Cuts snitch `?1`'s events back to the newest `?2`, with the finished deliveries of
/// those cut (pending ones stay until they finish).
const TRIM_EVENTS: &str = "DELETE FROM snitch_deliveries WHERE state <> 'pending' AND event_id IN \
       (SELECT id FROM snitch_events WHERE token = ?1 AND seq <= \
         (SELECT seq FROM snitch_events WHERE token = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)); \
     DELETE FROM snitch_events WHERE token = ?1 AND seq <= \
       (SELECT seq FROM snitch_events WHERE token = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)";

/// The update of a round's snitches, for each bucket: those whose stored version is the
/// expected one. It runs after [`INSERT_CHECK_INS`], under the same condition in the same
/// transaction, so it applies to exactly the snitches whose check-ins went in. It answers
/// each updated snitch's token, stored check-in count and history length.
static UPDATE_STATES: LazyLock<Vec<String>> = LazyLock::new(|| update_states(true));

/// [`UPDATE_STATES`] for snitches whose `wake_at` stays as stored
/// ([`Change::keeps_wake_at`]): it does not assign `wake_at`. SQLite rewrites the entry of
/// every index holding an assigned column, changed or not, so assigning it would write the
/// deadline index's page again for nothing: about a third of the pages a repeated
/// check-in writes (BENCHMARKS.md).
static UPDATE_STATES_KEEPING_WAKE: LazyLock<Vec<String>> = LazyLock::new(|| update_states(false));

/// The update of [`UPDATE_STATES`], with or without `wake_at` among the columns set (the
/// row binds it either way, so both take the same rows).
fn update_states(sets_wake_at: bool) -> Vec<String> {
    let sets: Vec<String> = SNITCH_FIELDS[SETTINGS_FIELDS..]
        .iter()
        .enumerate()
        .filter(|(_, field)| sets_wake_at || **field != "wake_at")
        .map(|(n, field)| format!("{field} = i.column{}", n + 5))
        .collect();
    (0..=MOST_ROWS.trailing_zeros())
        .map(|power| {
            format!(
                "UPDATE snitch_snitches SET {sets}, sweep_lease_until = NULL, \
                   check_ins_stored = check_ins_stored + i.column3, check_ins_keep = {keep} \
                 FROM (VALUES {values}) AS i \
                 WHERE token = i.column1 AND version = i.column2 \
                 RETURNING token, check_ins_stored, check_ins_keep",
                sets = sets.join(", "),
                keep = keep_after_save("i.column4", "i.column3"),
                values = values(1 << power, STATE_COLUMNS),
            )
        })
        .collect()
}

/// [`INSERT_CHECK_INS`] then `updates` of the same bucket, as one query: its positional
/// parameters are the check-ins' rows, then the snitches' (the statements of a query take
/// them in turn), and its rows are the update's answers.
fn check_ins_then(updates: &[String]) -> Vec<String> {
    INSERT_CHECK_INS
        .iter()
        .zip(updates)
        .map(|(insert, update)| format!("{insert}; {update}"))
        .collect()
}

/// [`INSERT_CHECK_INS`] then [`UPDATE_STATES`] ([`check_ins_then`]).
static CHECK_INS_THEN_STATES: LazyLock<Vec<String>> =
    LazyLock::new(|| check_ins_then(&UPDATE_STATES));

/// [`INSERT_CHECK_INS`] then [`UPDATE_STATES_KEEPING_WAKE`] ([`check_ins_then`]).
static CHECK_INS_THEN_STATES_KEEPING_WAKE: LazyLock<Vec<String>> =
    LazyLock::new(|| check_ins_then(&UPDATE_STATES_KEEPING_WAKE));

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
/// [`SETTINGS_FIELDS`], in their order: a round keeps the settings as stored).
#[derive(Debug)]
struct StateRow<'a> {
    /// How many check-ins, events and deliveries of the round are this snitch's.
    check_ins: usize,
    events: usize,
    deliveries: usize,
    /// Whether its save cuts its events back ([`trims_events`]).
    trims_events: bool,
    /// Whether its `wake_at` stays as stored ([`Change::keeps_wake_at`]).
    keeps_wake_at: bool,
    token: &'a str,
    expected: i64,
    added: i64,
    keep: i64,
    /// Its state is bound from these; its settings are not.
    fields: SnitchFields<'a, Lite>,
}

impl<'a> StateRow<'a> {
    fn of(change: &'a Change, added: usize, events: usize) -> Result<Self, StorageError> {
        let snitch = change.snitch();
        let event_seq = snitch.state().event_seq();
        Ok(StateRow {
            check_ins: added,
            events,
            deliveries: change.deliveries().len(),
            trims_events: events > 0
                && trims_events(
                    snitch.token().as_str(),
                    event_seq.saturating_sub(change.events().len() as u64),
                    event_seq,
                ),
            keeps_wake_at: change.keeps_wake_at(),
            token: snitch.token().as_str(),
            expected: to_integer("version", change.expected_version())?,
            added: limit(added),
            keep: limit(change.keep_check_ins().max(1)),
            fields: SnitchFields::<Lite>::of(snitch)?,
        })
    }
}

/// A check-in, event or delivery of a round, with its snitch's token and expected version
/// (the columns its insert joins on).
#[derive(Debug)]
struct OwnedRow<'a, R> {
    token: &'a str,
    expected: i64,
    record: R,
}

pub(crate) type LiteQuery<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments<'q>>;

/// What a row of one of a round's inserts ([`inserts_of_rows`]) holds after its snitch's
/// token, expected version and order.
pub(crate) trait RowRecord<'q> {
    /// Binds the record's columns, in the order of its table's columns as inserted.
    fn bind_to(self, query: LiteQuery<'q>) -> LiteQuery<'q>;
}

impl<'q> RowRecord<'q> for CheckInRecord<Lite> {
    fn bind_to(self, query: LiteQuery<'q>) -> LiteQuery<'q> {
        query
            .bind(self.at)
            .bind(self.exit_status)
            .bind(self.message)
            .bind(self.number)
            .bind(self.details)
            .bind(self.body)
    }
}

impl<'q> RowRecord<'q> for EventRecord<Lite> {
    fn bind_to(self, query: LiteQuery<'q>) -> LiteQuery<'q> {
        bind_event!(query, self, bind)
    }
}

impl<'q> RowRecord<'q> for DeliveryFields<Lite> {
    fn bind_to(self, query: LiteQuery<'q>) -> LiteQuery<'q> {
        bind_delivery!(query, self, bind)
    }
}

/// Inserts `rows` with `statements` (one per bucket, rows of `columns` parameters), in
/// statements of at most [`MOST_ROWS`]; `order` counts the rows of this kind so far.
async fn insert_rows<'a, R: RowRecord<'a>>(
    conn: &mut SqliteConnection,
    statements: &'a [String],
    columns: usize,
    mut rows: Vec<OwnedRow<'a, R>>,
    order: &mut usize,
) -> Result<(), sqlx::Error> {
    while !rows.is_empty() {
        let tail = rows.split_off(rows.len().min(MOST_ROWS));
        let chunk = std::mem::replace(&mut rows, tail);
        let query = sqlx::query(&statements[bucket_index(chunk.len())]);
        bind_rows(query, chunk, columns, order)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Binds `rows` (at most [`MOST_ROWS`]) to `query`, padded to their bucket with rows of
/// `columns` NULLs; `order` counts the rows of this kind so far.
fn bind_rows<'a, R: RowRecord<'a>>(
    mut query: LiteQuery<'a>,
    rows: Vec<OwnedRow<'a, R>>,
    columns: usize,
    order: &mut usize,
) -> LiteQuery<'a> {
    let count = rows.len();
    for row in rows {
        query = row
            .record
            .bind_to(query.bind(row.token).bind(row.expected).bind(limit(*order)));
        *order += 1;
    }
    bind_padding(query, bucket(count) - count, columns)
}

impl<'a> StateRow<'a> {
    /// Binds the row in the order of [`UPDATE_STATES`]' columns.
    fn bind(self, query: LiteQuery<'a>) -> LiteQuery<'a> {
        let query = query
            .bind(self.token)
            .bind(self.expected)
            .bind(self.added)
            .bind(self.keep);
        let f = self.fields;
        bind_snitch_state!(query, f, bind, Json)
    }
}

/// Binds `n` rows of `columns` NULLs: padding that matches no snitch.
fn bind_padding<'q>(mut query: LiteQuery<'q>, n: usize, columns: usize) -> LiteQuery<'q> {
    for _ in 0..n * columns {
        query = query.bind(None::<i64>);
    }
    query
}

/// What a round did: each change's result, in the order given, the snitches whose
/// check-in history is full (twice what they keep, or more), each with how far over it
/// is, and those whose events are to be cut back ([`trims_events`]).
#[derive(Debug)]
pub(crate) struct RoundOutcome {
    pub(crate) results: Vec<Result<(), StorageError>>,
    pub(crate) housekeeping: Housekeeping,
}

/// Trims a round leaves for after its changes: no change's guarantee depends on them
/// (readers never see more than is kept).
#[derive(Debug, Default)]
pub(crate) struct Housekeeping {
    full: Vec<(String, i64)>,
    events: Vec<String>,
}

impl Housekeeping {
    pub(crate) fn is_empty(&self) -> bool {
        self.full.is_empty() && self.events.is_empty()
    }

    /// Trims the check-ins of at most [`TRIMS_PER_BATCH`] of the full snitches, the
    /// furthest over first (so one left out, which grows, is not left out for ever), each
    /// once; and the events of those whose turn it is.
    pub(crate) async fn run(mut self, conn: &mut SqliteConnection) -> Result<(), StorageError> {
        self.full
            .sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        self.full.dedup_by(|later, first| later.0 == first.0);
        self.full.sort_by_key(|(_, over)| std::cmp::Reverse(*over));
        for (token, _) in self.full.iter().take(TRIMS_PER_BATCH) {
            sqlx::query(&TRIM)
                .bind(token)
                .execute(&mut *conn)
                .await
                .map_err(backend)?;
        }
        for token in &self.events {
            sqlx::query(TRIM_EVENTS)
                .bind(token)
                .bind(limit(EVENTS_KEPT))
                .execute(&mut *conn)
                .await
                .map_err(backend)?;
        }
        Ok(())
    }
}

/// Saves `changes` (each [`fits_a_round`], each snitch at most once) in a few statements.
/// A change that cannot be stored at all (a counter beyond an integer) fails alone; an
/// `Err` is a failed statement, after which part of the round may be written: the caller
/// rolls back to a savepoint set before.
///
/// The changes that keep their snitch's `wake_at` go first, in statements that leave the
/// deadline index alone ([`UPDATE_STATES_KEEPING_WAKE`]), then the others: the snitches of
/// a round are each held once, so the order between them is free.
pub(crate) async fn save_round(
    conn: &mut SqliteConnection,
    changes: &[&Change],
) -> Result<RoundOutcome, sqlx::Error> {
    // Each change's result by its place in `changes`: Ok unless its row cannot be made
    // or the update passes it by.
    let mut results: Vec<Result<(), StorageError>> = changes.iter().map(|_| Ok(())).collect();
    let mut snitches = Vec::with_capacity(changes.len());
    let (mut check_ins, mut events, mut deliveries) = (Vec::new(), Vec::new(), Vec::new());
    let (keeping, moving): (Vec<usize>, Vec<usize>) =
        (0..changes.len()).partition(|&i| changes[i].keeps_wake_at());
    // Each snitch row's change, by its place in `changes`.
    let mut placed = Vec::with_capacity(changes.len());
    for i in keeping.into_iter().chain(moving) {
        let change = changes[i];
        // Only the newest `keep` check-ins and EVENTS_KEPT events of a long change can be
        // kept: older ones are not written at all.
        let keep = change.keep_check_ins().max(1);
        let written = &change.check_ins()[change.check_ins().len().saturating_sub(keep)..];
        let emitted = &change.events()[change.events().len().saturating_sub(EVENTS_KEPT)..];
        match StateRow::of(change, written.len(), emitted.len()) {
            Ok(row) => {
                let (token, expected) = (row.token, row.expected);
                check_ins.extend(written.iter().map(|c| OwnedRow {
                    token,
                    expected,
                    record: CheckInRecord::of(c),
                }));
                events.extend(emitted.iter().map(|e| OwnedRow {
                    token,
                    expected,
                    record: EventRecord::of(e),
                }));
                deliveries.extend(change.deliveries().iter().map(|d| OwnedRow {
                    token,
                    expected,
                    record: DeliveryFields::of(d),
                }));
                snitches.push(row);
                placed.push(i);
            }
            Err(e) => results[i] = Err(e),
        }
    }
    let mut outcome = RoundOutcome {
        results,
        housekeeping: Housekeeping::default(),
    };
    if snitches.is_empty() {
        return Ok(outcome);
    }
    let tokens: Vec<(&str, bool)> = snitches
        .iter()
        .map(|row| (row.token, row.trims_events))
        .collect();
    let mut updated: HashMap<String, (i64, i64)> = HashMap::with_capacity(snitches.len());
    // Parts of at most MOST_ROWS snitches that all keep their `wake_at` or all move it,
    // each with its snitches' rows (those of a snitch are next to each other, in the
    // order of the snitches).
    let (mut check_ins, mut events, mut deliveries) = (
        check_ins.into_iter(),
        events.into_iter(),
        deliveries.into_iter(),
    );
    let mut snitches = snitches.into_iter().peekable();
    let mut order = (0, 0, 0);
    while let Some(first) = snitches.peek() {
        let keeps_wake_at = first.keeps_wake_at;
        let mut part: Vec<StateRow<'_>> = Vec::with_capacity(MOST_ROWS);
        while part.len() < MOST_ROWS {
            match snitches.next_if(|row| row.keeps_wake_at == keeps_wake_at) {
                Some(row) => part.push(row),
                None => break,
            }
        }
        let count = |of: fn(&StateRow<'_>) -> usize| part.iter().map(of).sum::<usize>();
        let part_check_ins: Vec<_> = check_ins.by_ref().take(count(|r| r.check_ins)).collect();
        let part_events: Vec<_> = events.by_ref().take(count(|r| r.events)).collect();
        let part_deliveries: Vec<_> = deliveries.by_ref().take(count(|r| r.deliveries)).collect();
        let rows = part.len();
        let (check_ins_then_states, update_states) = if keeps_wake_at {
            (
                &*CHECK_INS_THEN_STATES_KEEPING_WAKE,
                &*UPDATE_STATES_KEEPING_WAKE,
            )
        } else {
            (&*CHECK_INS_THEN_STATES, &*UPDATE_STATES)
        };
        let mut query =
            if part_check_ins.len() == rows && part_events.is_empty() && part_deliveries.is_empty()
            {
                // A check-in each and nothing else (check-ins' steady state): the insert and
                // the update in one round trip to the connection's thread.
                let query = sqlx::query(&check_ins_then_states[bucket_index(rows)]);
                bind_rows(query, part_check_ins, CHECK_IN_COLUMNS, &mut order.0)
            } else {
                insert_rows(
                    conn,
                    &INSERT_CHECK_INS,
                    CHECK_IN_COLUMNS,
                    part_check_ins,
                    &mut order.0,
                )
                .await?;
                insert_rows(
                    conn,
                    &INSERT_EVENTS,
                    *EVENT_ROW_COLUMNS,
                    part_events,
                    &mut order.1,
                )
                .await?;
                insert_rows(
                    conn,
                    &INSERT_DELIVERIES,
                    *DELIVERY_ROW_COLUMNS,
                    part_deliveries,
                    &mut order.2,
                )
                .await?;
                sqlx::query(&update_states[bucket_index(rows)])
            };
        for row in part {
            query = row.bind(query);
        }
        let answers = bind_padding(query, bucket(rows) - rows, STATE_COLUMNS)
            .fetch_all(&mut *conn)
            .await?;
        for answer in answers {
            updated.insert(answer.try_get(0)?, (answer.try_get(1)?, answer.try_get(2)?));
        }
    }
    for ((token, trims_events), i) in tokens.into_iter().zip(placed) {
        match updated.get(token) {
            Some(&(stored, keep)) => {
                if stored >= keep.saturating_mul(2) {
                    outcome
                        .housekeeping
                        .full
                        .push((token.to_owned(), stored - keep));
                }
                if trims_events {
                    outcome.housekeeping.events.push(token.to_owned());
                }
            }
            None => {
                outcome.results[i] =
                    Err(crate::not_applied(conn, token).await.unwrap_or_else(|e| e));
            }
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_made_for_powers_of_two_up_to_the_most_rows() {
        assert_eq!(
            [1, 2, 3, 5, 64, 65, 256, 257, 10_000].map(bucket),
            [1, 2, 4, 8, 64, 128, 256, 256, 256]
        );
        assert_eq!(INSERT_CHECK_INS.len(), bucket_index(MOST_ROWS) + 1);
        assert_eq!(UPDATE_STATES.len(), bucket_index(MOST_ROWS) + 1);
        assert_eq!(CHECK_INS_THEN_STATES.len(), UPDATE_STATES.len());
        assert_eq!(
            CHECK_INS_THEN_STATES_KEEPING_WAKE.len(),
            UPDATE_STATES.len()
        );
        assert!(UPDATE_STATES[0].contains("wake_at = i.column"));
        assert!(!UPDATE_STATES_KEEPING_WAKE[0].contains("wake_at"));
        // The last column a snitch row's statement reads is the last it binds.
        assert!(UPDATE_STATES[0].contains(&format!("i.column{STATE_COLUMNS}")));
        assert!(!UPDATE_STATES[0].contains(&format!("i.column{}", STATE_COLUMNS + 1)));
    }
}
