//! Set-based saves: a batch of changes applied in a few statements, not several per change.
//!
//! A batch is cut into *rounds* in which every snitch appears at most once: the first
//! change of each token in round 1, its second in round 2, and so on, so two changes to one
//! snitch still apply one after another (the second sees the version the first wrote).
//! Each round is one statement ([`round_statement`]): its snitches and check-ins bind one
//! typed array per column (`unnest`, read in binary), and so do the events and
//! deliveries of a round that emits any (a sweep's missed snitches); its outage
//! deferrals, rare, travel as a JSON array. The snitches whose stored version is the
//! expected one are updated, in token order ([`update_expected`]), and only their
//! check-ins, events, deliveries and outage deferrals are inserted. A change that
//! updated nothing is then a conflict or a missing snitch (one more query, only when some
//! did). History is trimmed lazily: a snitch counts its stored check-ins
//! (`check_ins_stored`) and the length its last change asked for (`check_ins_keep`), and is
//! trimmed back to that once it holds twice as many, so a check-in costs no `DELETE`;
//! readers never see more than the newest `check_ins_keep`. Events, rare, are trimmed in
//! the statement of a round that emitted any.
//!
//! A statement that fails (a constraint a change breaks, say) fails its whole round, so the
//! caller rolls the transaction back and applies the batch again one change at a time, each
//! in a savepoint, where the failing change fails alone.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use serde::Serialize;
use snitch_core::{Change, StorageError};
use sqlx::postgres::PgConnection;
use sqlx::types::Json;

use crate::records::{
    self, CheckInRecord, DeliveryFields, EventRecord, PgQueryAs, SnitchColumns, SnitchFields,
    SETTINGS_FIELDS, SNITCH_FIELDS,
};
use crate::{backend, limit, EVENTS_KEPT};

/// A snitch that keeps `keep` check-ins is trimmed back to them once it holds twice as
/// many, in the save that reached it: one `DELETE` per `keep` check-ins (readers never
/// see more than `keep`).
fn trim_at(keep: i32) -> i32 {
    keep.saturating_mul(2)
}

/// The SQL types of [`SNITCH_FIELDS`], in their order.
pub(crate) const SNITCH_FIELD_TYPES: [&str; 31] = [
    "text",        // name
    "text[]",      // tags
    "text",        // notes
    "text",        // interval
    "text",        // alert_type
    "text[]",      // alert_email
    "text",        // schedule
    "integer",     // failure_tolerance
    "integer",     // missed_tolerance
    "integer",     // max_runtime_seconds
    "text",        // email_keywords
    "text",        // status
    "timestamptz", // checked_in_at
    "timestamptz", // last_check_in_at
    "timestamptz", // anchor_at
    "timestamptz", // deadline_at
    "text",        // pause_until_kind
    "timestamptz", // pause_until_at
    "text",        // pause_resume_status
    "boolean",     // pause_checked_in
    "bigint[]",    // smart_offsets_ms
    "timestamptz", // last_errored_alert_at
    "boolean",     // error_announced
    "timestamptz", // last_recovery_alert_at
    "bigint",      // consecutive_failures
    "bigint",      // consecutive_misses
    "text",        // runs
    "bigint",      // check_in_seq
    "bigint",      // event_seq
    "bigint",      // version
    "timestamptz", // wake_at
];

/// The columns of an event as a round inserts them (those of `EVENT_COLUMNS`, in
/// its order) with their SQL types.
const EVENT_INPUT_COLUMNS: &[(&str, &str)] = &[
    ("id", "text"),
    ("kind", "text"),
    ("at", "timestamptz"),
    ("case_id", "text"),
    ("token", "text"),
    ("name", "text"),
    ("notes", "text"),
    ("tags", "text[]"),
    ("alert_email", "text[]"),
    ("status", "text"),
    ("previous_status", "text"),
    ("checked_in_at", "timestamptz"),
    ("check_in_at", "timestamptz"),
    ("check_in_exit_status", "text"),
    ("check_in_message", "text"),
    ("missed_periods", "bigint"),
    ("expected_at", "timestamptz"),
    ("expected_at_local", "text"),
    ("reason", "text"),
    ("run", "text"),
];

/// The columns of a delivery as a round inserts them, with their SQL types.
const DELIVERY_INPUT_COLUMNS: &[(&str, &str)] = &[
    ("id", "text"),
    ("event_id", "text"),
    ("event", "jsonb"),
    ("case_id", "text"),
    ("destination", "text"),
    ("channel", "text"),
    ("hook_id", "text"),
    ("url", "text"),
    ("secret", "text"),
    ("recipients", "text[]"),
    ("state", "text"),
    ("next_attempt_at", "timestamptz"),
    ("attempts", "jsonb"),
    ("settings", "text"),
];

/// The `updated` part of both round statements, after their `input`: the round's
/// snitches whose stored version is the expected one, updated with `sets` (of
/// `column = i.field`); it answers each updated token and its stored check-in count.
///
/// The rows are updated in the order of the input, which is the batch's, sorted by
/// token, where the plan is a nested loop over the input finding each snitch by its key
/// (the planner counts ten or a hundred rows for a function, far fewer than a table of
/// snitches holds). So batches applying at once take the rows they share in the same
/// order and wait for each other rather than deadlock. Where Postgres takes another
/// order all the same (a hash join over a small table), or a writer outside the batches
/// takes the rows in another, the deadlock it finds rolls one batch back, and that batch
/// is applied again. An explicit `SELECT ... ORDER BY token FOR UPDATE` before the
/// update made sure of the order, but it cost every row a second lookup, a lock record
/// and a sort: about a seventh of Postgres's time per check-in (BENCHMARKS.md).
fn update_expected(sets: &[String]) -> String {
    format!(
        "updated AS ( \
           UPDATE snitch.snitches s SET {sets}, sweep_lease_until = NULL, \
             check_ins_stored = s.check_ins_stored + i.check_ins_added, \
             check_ins_keep = {keep_after_save} \
           FROM input i \
           WHERE s.token = i.token AND s.version = i.expected \
           RETURNING s.token, s.check_ins_stored)",
        sets = sets.join(", "),
        keep_after_save = *KEEP_AFTER_SAVE,
    )
}

/// The history length a save leaves a snitch with (`check_ins_keep`, what readers may
/// see and what trims cut to), for `$keep` asked and `$added` check-ins written. Asked
/// for a longer history than it kept, it grows only by what this save adds: the stored
/// rows beyond the old length (trims are lazy, up to twice the length) were already gone
/// for readers and stay gone, and the length reaches the one asked as check-ins arrive.
fn keep_after_save(keep: &str, added: &str) -> String {
    format!(
        "CASE WHEN {keep} > s.check_ins_keep \
           THEN least({keep}, s.check_ins_keep + {added}) ELSE {keep} END"
    )
}

/// [`keep_after_save`] in the set-based round.
static KEEP_AFTER_SAVE: LazyLock<String> =
    LazyLock::new(|| keep_after_save("i.keep", "i.check_ins_added"));

/// One round's statement: the snitches of the round and their check-ins, each field
/// as a typed array (`unnest`), which Postgres reads without parsing text per row. `$1`
/// tokens, `$2` expected versions, `$3` check-ins added, `$4` history lengths, then
/// [`SNITCH_FIELDS`] from the `from`th on (`$5`–`$35` for all of them), then the
/// check-ins (token, time, exit status, message, number, details, body; in order).
/// Rows are updated in token order ([`update_expected`]).
///
/// A round that `emits` (events, deliveries or outage deferrals: a sweep's missed
/// snitches, a status change) binds after those its events, deliveries and deferrals,
/// each a JSON array of rows (`jsonb_to_recordset`: few per round, of many kinds), then
/// [`EVENTS_KEPT`]. The events the new ones push out of a history go in the same
/// statement, with their finished deliveries (the statement sees the stored events, not
/// the new ones: it keeps the newest `EVENTS_KEPT - new` of those).
///
/// It answers, for each snitch of the round, its token, its stored check-in count if it
/// was updated, and whether it exists (looked up only for those not updated): one
/// statement, so a one-round batch is its own transaction (a second query after it
/// would run after the commit). The snitches not updated are found by a hashed `NOT IN`,
/// where a join of the input with `updated` was planned as a nested loop (the planner
/// counts one row for a data-modifying CTE): 65,000 comparisons for a sweep's round of
/// 256.
fn round_statement(from: usize, emits: bool) -> String {
    // A field of an array type travels as one array literal per row ([`carried_as`]).
    let (fields, types) = (&SNITCH_FIELDS[from..], &SNITCH_FIELD_TYPES[from..]);
    let arrays: Vec<String> = types
        .iter()
        .enumerate()
        .map(|(n, ty)| format!("${}::{}[]", n + 5, carried_as(ty)))
        .collect();
    let sets: Vec<String> = fields
        .iter()
        .zip(types)
        .map(|(field, ty)| format!("{field} = {}", cast_to(&format!("i.{field}"), ty)))
        .collect();
    let check_ins = fields.len() + 5;
    let emitted = if emits {
        emitted_rows(check_ins + 7)
    } else {
        String::new()
    };
    format!(
        "WITH input AS ( \
           SELECT * FROM unnest($1::text[], $2::bigint[], $3::integer[], $4::integer[], \
             {arrays}) AS i(token, expected, check_ins_added, keep, {fields})), \
         {updated}, \
         new_check_ins AS ( \
           INSERT INTO snitch.check_ins (token, at, exit_status, message, number, details, body) \
           SELECT c.token, c.at, c.exit_status, c.message, c.number, c.details, c.body \
           FROM unnest(${c1}::text[], ${c2}::timestamptz[], ${c3}::text[], ${c4}::text[], \
             ${c5}::bigint[], ${c6}::text[], ${c7}::text[]) \
             WITH ORDINALITY AS c(token, at, exit_status, message, number, details, body, ord) \
           WHERE c.token IN (SELECT token FROM updated) ORDER BY c.ord) \
         {emitted} \
         SELECT u.token, u.check_ins_stored, true AS present FROM updated u \
         UNION ALL \
         SELECT i.token, NULL::integer, \
           EXISTS (SELECT 1 FROM snitch.snitches x WHERE x.token = i.token) \
         FROM input i WHERE i.token NOT IN (SELECT token FROM updated)",
        arrays = arrays.join(", "),
        fields = fields.join(", "),
        updated = update_expected(&sets),
        c1 = check_ins,
        c2 = check_ins + 1,
        c3 = check_ins + 2,
        c4 = check_ins + 3,
        c5 = check_ins + 4,
        c6 = check_ins + 5,
        c7 = check_ins + 6,
    )
}

/// The CTEs of [`round_statement`] that write what a round emits, from its parameters
/// `$first` on: the events' columns ([`EventColumns`], the first the snitch of each),
/// then the deliveries' ([`DeliveryColumns`], the first the snitch of each), then the
/// outage deferrals as a JSON array and [`EVENTS_KEPT`]; each begins with a comma.
///
/// The events and deliveries travel as typed arrays, like the snitches: as JSON arrays
/// (`jsonb_to_recordset`), parsing them and finding each column's key in each row took a
/// fifth of Postgres's time in a mass miss (BENCHMARKS.md). A delivery's event and
/// attempts are `jsonb` columns, sent as JSON text each.
fn emitted_rows(first: usize) -> String {
    // Each row's snitch, then its columns.
    let first_delivery = first + 1 + EVENT_INPUT_COLUMNS.len();
    let deferrals = first_delivery + 1 + DELIVERY_INPUT_COLUMNS.len();
    let events = typed_unnest(first, EVENT_INPUT_COLUMNS);
    let deliveries = typed_unnest(first_delivery, DELIVERY_INPUT_COLUMNS);
    let event_selects = select_list("e", EVENT_INPUT_COLUMNS);
    let delivery_selects = select_list("d", DELIVERY_INPUT_COLUMNS);
    let event_names = names(EVENT_INPUT_COLUMNS);
    let delivery_names = names(DELIVERY_INPUT_COLUMNS);
    let kept = deferrals + 1;
    format!(
        ", new_events AS ( \
           INSERT INTO snitch.events ({event_names}) \
           SELECT {event_selects} FROM {events} \
             WITH ORDINALITY AS e(owner, {event_names}, ord) \
           WHERE e.owner IN (SELECT token FROM updated) ORDER BY e.ord), \
         event_counts AS ( \
           SELECT e.owner AS token, count(*) AS n \
           FROM unnest(${first}::text[]) AS e(owner) \
           WHERE e.owner IN (SELECT token FROM updated) GROUP BY e.owner), \
         event_cuts AS ( \
           SELECT c.token, (SELECT x.seq FROM snitch.events x WHERE x.token = c.token \
                            ORDER BY x.seq DESC OFFSET greatest(${kept}::bigint - c.n, 0) \
                            LIMIT 1) \
             AS seq \
           FROM event_counts c), \
         evicted_events AS ( \
           DELETE FROM snitch.events x USING event_cuts c \
           WHERE x.token = c.token AND x.seq <= c.seq RETURNING x.id), \
         evicted_deliveries AS ( \
           DELETE FROM snitch.deliveries \
           WHERE state <> 'pending' AND event_id IN (SELECT id FROM evicted_events)), \
         new_deliveries AS ( \
           INSERT INTO snitch.deliveries ({delivery_names}) \
           SELECT {delivery_selects} FROM {deliveries} \
             WITH ORDINALITY AS d(token, {delivery_names}, ord) \
           WHERE d.token IN (SELECT token FROM updated) ORDER BY d.ord \
           ON CONFLICT (id) DO UPDATE SET seq = EXCLUDED.seq, event_id = EXCLUDED.event_id, \
             event = EXCLUDED.event, case_id = EXCLUDED.case_id, \
             destination = EXCLUDED.destination, channel = EXCLUDED.channel, \
             hook_id = EXCLUDED.hook_id, url = EXCLUDED.url, secret = EXCLUDED.secret, \
             recipients = EXCLUDED.recipients, state = EXCLUDED.state, \
             next_attempt_at = EXCLUDED.next_attempt_at, attempts = EXCLUDED.attempts, \
             settings = EXCLUDED.settings), \
         new_deferrals AS ( \
           INSERT INTO snitch.outage_deferrals (outage_id, case_id, snitches) \
           SELECT o.outage_id, o.case_id, count(*) FROM jsonb_to_recordset(${deferrals}) \
             AS o(token text, outage_id bigint, case_id text) \
           WHERE o.token IN (SELECT token FROM updated) GROUP BY o.outage_id, o.case_id \
           ON CONFLICT (outage_id, case_id) \
           DO UPDATE SET snitches = outage_deferrals.snitches + EXCLUDED.snitches)",
    )
}

/// `unnest` of one typed array per column, the first (the snitch of each row) text, then
/// `columns` (name, type) from parameter `$first + 1` on. A column of an array type
/// travels as an array literal per row (`unnest` cannot take an array of arrays of
/// different lengths), one of type `jsonb` as its JSON text (parsed once either way).
fn typed_unnest(first: usize, columns: &[(&str, &str)]) -> String {
    let arrays: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(n, (_, ty))| format!("${}::{}[]", first + 1 + n, carried_as(ty)))
        .collect();
    format!("unnest(${first}::text[], {})", arrays.join(", "))
}

/// The type a column of type `ty` travels as in [`typed_unnest`].
fn carried_as(ty: &str) -> &str {
    if ty.ends_with("[]") || ty == "jsonb" {
        "text"
    } else {
        ty
    }
}

/// `value` (as [`typed_unnest`] reads a column of type `ty`) in type `ty`: cast where
/// it travels as text.
fn cast_to(value: &str, ty: &str) -> String {
    if carried_as(ty) == ty {
        value.to_owned()
    } else {
        format!("{value}::{ty}")
    }
}

/// The columns of `alias` as the insert takes them ([`cast_to`]).
fn select_list(alias: &str, columns: &[(&str, &str)]) -> String {
    let selects: Vec<String> = columns
        .iter()
        .map(|(name, ty)| cast_to(&format!("{alias}.{name}"), ty))
        .collect();
    selects.join(", ")
}

fn names(columns: &[(&str, &str)]) -> String {
    let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
    names.join(", ")
}

/// The round statements ([`round_statement`]): of all fields or, for rounds whose changes
/// all keep the snitches' settings (every check-in and sweep), of the fields after
/// [`SETTINGS_FIELDS`] only, so the settings (names, notes, tags as array literals) are
/// neither sent nor parsed per row (about a fifteenth of Postgres's time per check-in,
/// BENCHMARKS.md); emitting nothing (most check-ins) or emitting.
static STATE_ROUND: LazyLock<String> = LazyLock::new(|| round_statement(0, false));
static STATE_ROUND_KEEPING_SETTINGS: LazyLock<String> =
    LazyLock::new(|| round_statement(SETTINGS_FIELDS, false));
static SAVE_ROUND: LazyLock<String> = LazyLock::new(|| round_statement(0, true));
static SAVE_ROUND_KEEPING_SETTINGS: LazyLock<String> =
    LazyLock::new(|| round_statement(SETTINGS_FIELDS, true));

/// Trims the check-ins of the snitches `$1` to the newest each keeps (`check_ins_keep`)
/// and sets their counts. It deletes only above where the last trim cut
/// (`check_ins_trimmed_to`, nothing is left below it), so it does not walk the index over
/// the check-ins earlier trims deleted, dead until a vacuum.
const TRIM_CHECK_INS: &str = "WITH cut AS ( \
       SELECT s.token, s.check_ins_trimmed_to AS floor, \
         (SELECT c.seq FROM snitch.check_ins c WHERE c.token = s.token \
          ORDER BY c.seq DESC OFFSET s.check_ins_keep LIMIT 1) AS seq \
       FROM snitch.snitches s WHERE s.token = ANY($1::text[])), \
     gone AS ( \
       DELETE FROM snitch.check_ins c USING cut \
       WHERE c.token = cut.token AND c.seq > cut.floor AND c.seq <= cut.seq \
       RETURNING c.token) \
     UPDATE snitch.snitches s SET check_ins_stored = s.check_ins_stored - g.n, \
       check_ins_trimmed_to = greatest(s.check_ins_trimmed_to, cut.seq) \
     FROM (SELECT token, count(*)::integer AS n FROM gone GROUP BY token) g \
     JOIN cut ON cut.token = g.token \
     WHERE s.token = g.token";

struct SnitchInput<'a> {
    token: &'a str,
    expected: i64,
    check_ins_added: i32,
    /// The change's history length (`Change::keep_check_ins`, at least 1).
    keep: i32,
    fields: SnitchFields<'a>,
}

/// A check-in of the round (bound in the round's order, which is the one they are
/// numbered in).
struct CheckInInput<'a> {
    token: &'a str,
    record: CheckInRecord,
}

/// An event of the round, with the snitch of its change (the event names its own).
struct EventInput<'a> {
    owner: &'a str,
    record: EventRecord,
}

/// A delivery of the round, with the snitch of its change.
struct DeliveryInput<'a> {
    token: &'a str,
    fields: DeliveryFields,
}

/// The round's events as one array per column of [`EVENT_INPUT_COLUMNS`], after the
/// snitch of each.
#[derive(Default)]
struct EventColumns<'a> {
    owner: Vec<&'a str>,
    id: Vec<&'a str>,
    kind: Vec<&'a str>,
    at: Vec<DateTime<Utc>>,
    case_id: Vec<&'a str>,
    token: Vec<&'a str>,
    name: Vec<&'a str>,
    notes: Vec<&'a str>,
    tags: Vec<String>,
    alert_email: Vec<String>,
    status: Vec<&'a str>,
    previous_status: Vec<&'a str>,
    checked_in_at: Vec<Option<DateTime<Utc>>>,
    check_in_at: Vec<Option<DateTime<Utc>>>,
    check_in_exit_status: Vec<Option<&'a str>>,
    check_in_message: Vec<Option<&'a str>>,
    missed_periods: Vec<i64>,
    expected_at: Vec<Option<DateTime<Utc>>>,
    expected_at_local: Vec<Option<&'a str>>,
    reason: Vec<Option<&'a str>>,
    run: Vec<Option<&'a str>>,
}

impl<'a> EventColumns<'a> {
    fn of(events: &'a [EventInput<'a>]) -> Self {
        let mut c = EventColumns::default();
        for EventInput { owner, record: e } in events {
            c.owner.push(owner);
            c.id.push(&e.id);
            c.kind.push(&e.kind);
            c.at.push(e.at);
            c.case_id.push(&e.case_id);
            c.token.push(&e.token);
            c.name.push(&e.name);
            c.notes.push(&e.notes);
            c.tags.push(records::array_literal(&e.tags));
            c.alert_email.push(records::array_literal(&e.alert_email));
            c.status.push(&e.status);
            c.previous_status.push(&e.previous_status);
            c.checked_in_at.push(e.checked_in_at);
            c.check_in_at.push(e.check_in_at);
            c.check_in_exit_status
                .push(e.check_in_exit_status.as_deref());
            c.check_in_message.push(e.check_in_message.as_deref());
            c.missed_periods.push(e.missed_periods);
            c.expected_at.push(e.expected_at);
            c.expected_at_local.push(e.expected_at_local.as_deref());
            c.reason.push(e.reason.as_deref());
            c.run.push(e.run.as_deref());
        }
        c
    }

    /// Binds the snitches, then each column in the order of [`EVENT_INPUT_COLUMNS`].
    fn bind<'q, O>(self, q: PgQueryAs<'q, O>) -> PgQueryAs<'q, O>
    where
        'a: 'q,
    {
        q.bind(self.owner)
            .bind(self.id)
            .bind(self.kind)
            .bind(self.at)
            .bind(self.case_id)
            .bind(self.token)
            .bind(self.name)
            .bind(self.notes)
            .bind(self.tags)
            .bind(self.alert_email)
            .bind(self.status)
            .bind(self.previous_status)
            .bind(self.checked_in_at)
            .bind(self.check_in_at)
            .bind(self.check_in_exit_status)
            .bind(self.check_in_message)
            .bind(self.missed_periods)
            .bind(self.expected_at)
            .bind(self.expected_at_local)
            .bind(self.reason)
            .bind(self.run)
    }
}

/// The round's deliveries as one array per column of [`DELIVERY_INPUT_COLUMNS`], after
/// the snitch of each.
#[derive(Default)]
struct DeliveryColumns<'a> {
    token: Vec<&'a str>,
    id: Vec<&'a str>,
    event_id: Vec<&'a str>,
    event: Vec<String>,
    case_id: Vec<&'a str>,
    destination: Vec<Option<&'a str>>,
    channel: Vec<&'static str>,
    hook_id: Vec<Option<&'a str>>,
    url: Vec<Option<&'a str>>,
    secret: Vec<Option<&'a str>>,
    recipients: Vec<Option<String>>,
    state: Vec<&'static str>,
    next_attempt_at: Vec<Option<DateTime<Utc>>>,
    attempts: Vec<String>,
    settings: Vec<Option<&'a str>>,
}

impl<'a> DeliveryColumns<'a> {
    fn of(deliveries: &'a [DeliveryInput<'a>]) -> Self {
        let mut c = DeliveryColumns::default();
        for DeliveryInput { token, fields: d } in deliveries {
            c.token.push(token);
            c.id.push(&d.id);
            c.event_id.push(&d.event_id);
            c.event.push(json_text(&d.event));
            c.case_id.push(&d.case_id);
            c.destination.push(d.destination.as_deref());
            c.channel.push(d.channel);
            c.hook_id.push(d.hook_id.as_deref());
            c.url.push(d.url.as_deref());
            c.secret.push(d.secret.as_deref());
            c.recipients.push(
                d.recipients
                    .as_deref()
                    .map(records::array_literal::<String>),
            );
            c.state.push(d.state);
            c.next_attempt_at.push(d.next_attempt_at);
            c.attempts.push(json_text(&d.attempts));
            c.settings.push(d.settings.as_deref());
        }
        c
    }

    /// Binds the snitches, then each column in the order of [`DELIVERY_INPUT_COLUMNS`].
    fn bind<'q, O>(self, q: PgQueryAs<'q, O>) -> PgQueryAs<'q, O>
    where
        'a: 'q,
    {
        q.bind(self.token)
            .bind(self.id)
            .bind(self.event_id)
            .bind(self.event)
            .bind(self.case_id)
            .bind(self.destination)
            .bind(self.channel)
            .bind(self.hook_id)
            .bind(self.url)
            .bind(self.secret)
            .bind(self.recipients)
            .bind(self.state)
            .bind(self.next_attempt_at)
            .bind(self.attempts)
            .bind(self.settings)
    }
}

/// A value of a `jsonb` column as the JSON text it travels as.
fn json_text<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("records of plain data serialize")
}

#[derive(Serialize)]
struct DeferralInput<'a> {
    token: &'a str,
    outage_id: i64,
    case_id: &'a str,
}

/// The rows of one round, ready to bind.
#[derive(Default)]
struct Round<'a> {
    /// Index into the batch of each change in this round.
    changes: Vec<usize>,
    snitches: Vec<SnitchInput<'a>>,
    check_ins: Vec<CheckInInput<'a>>,
    events: Vec<EventInput<'a>>,
    deliveries: Vec<DeliveryInput<'a>>,
    deferrals: Vec<DeferralInput<'a>>,
    /// Whether some change of the round alters its snitch's settings.
    changes_settings: bool,
}

impl<'a> Round<'a> {
    /// Whether the round only moves snitches and appends check-ins ([`STATE_ROUND`]).
    fn is_state_only(&self) -> bool {
        self.events.is_empty() && self.deliveries.is_empty() && self.deferrals.is_empty()
    }

    /// Runs the round's statement ([`round_statement`]): for each snitch of the round, its
    /// stored check-in count when it was updated (`None` when it was refused or is
    /// missing), and whether it exists.
    async fn apply(
        &self,
        conn: &mut PgConnection,
    ) -> Result<HashMap<&'a str, (Option<i32>, bool)>, sqlx::Error> {
        let n = self.snitches.len();
        let (mut tokens, mut expected, mut added, mut keep) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        let mut columns = SnitchColumns::with_capacity(n, self.changes_settings);
        for s in &self.snitches {
            tokens.push(s.token);
            expected.push(s.expected);
            added.push(s.check_ins_added);
            keep.push(s.keep);
            columns.push(&s.fields);
        }
        let m = self.check_ins.len();
        let (mut c_tokens, mut c_at, mut c_exit, mut c_message) = (
            Vec::with_capacity(m),
            Vec::with_capacity(m),
            Vec::with_capacity(m),
            Vec::with_capacity(m),
        );
        let (mut c_number, mut c_details, mut c_body) = (
            Vec::with_capacity(m),
            Vec::with_capacity(m),
            Vec::with_capacity(m),
        );
        for c in &self.check_ins {
            c_tokens.push(c.token);
            c_at.push(c.record.at);
            c_exit.push(c.record.exit_status.as_deref());
            c_message.push(c.record.message.as_deref());
            c_number.push(c.record.number);
            c_details.push(c.record.details.as_deref());
            c_body.push(c.record.body.as_deref());
        }
        let emits = !self.is_state_only();
        let statement: &str = match (self.changes_settings, emits) {
            (true, false) => &STATE_ROUND,
            (false, false) => &STATE_ROUND_KEEPING_SETTINGS,
            (true, true) => &SAVE_ROUND,
            (false, true) => &SAVE_ROUND_KEEPING_SETTINGS,
        };
        let query = sqlx::query_as::<_, (String, Option<i32>, bool)>(statement)
            .bind(&tokens)
            .bind(expected)
            .bind(added)
            .bind(keep);
        let mut query = columns
            .bind(query)
            .bind(c_tokens)
            .bind(c_at)
            .bind(c_exit)
            .bind(c_message)
            .bind(c_number)
            .bind(c_details)
            .bind(c_body);
        if emits {
            query = EventColumns::of(&self.events).bind(query);
            query = DeliveryColumns::of(&self.deliveries).bind(query);
            query = query.bind(Json(&self.deferrals)).bind(limit(EVENTS_KEPT));
        }
        let answers = query.fetch_all(&mut *conn).await?;
        let by_token: HashMap<String, (Option<i32>, bool)> = answers
            .into_iter()
            .map(|(token, stored, present)| (token, (stored, present)))
            .collect();
        // Keyed by the round's own tokens, which outlive the answer.
        Ok(tokens
            .iter()
            .map(|&token| (token, by_token.get(token).copied().unwrap_or((None, false))))
            .collect())
    }

    /// Adds a change, or gives back why it cannot be stored at all (a counter beyond a
    /// bigint): that change alone fails.
    fn push(&mut self, index: usize, change: &'a Change) -> Result<(), StorageError> {
        let snitch = change.snitch();
        let token = snitch.token().as_str();
        let expected = records::to_bigint("version", change.expected_version())?;
        let fields = SnitchFields::of(snitch)?;
        let mut deferrals = Vec::with_capacity(change.deferred_by().len());
        for outage in change.deferred_by() {
            deferrals.push(DeferralInput {
                token,
                outage_id: records::to_bigint("outage id", *outage)?,
                case_id: snitch.case_id().as_str(),
            });
        }
        // Only the newest `keep` check-ins and EVENTS_KEPT events of a long change can be
        // kept: older ones are not written at all.
        let keep = change.keep_check_ins().max(1);
        let check_ins = &change.check_ins()[change.check_ins().len().saturating_sub(keep)..];
        let events = &change.events()[change.events().len().saturating_sub(EVENTS_KEPT)..];
        self.changes.push(index);
        self.changes_settings |= !change.keeps_settings();
        self.snitches.push(SnitchInput {
            token,
            expected,
            // At most `keep`.
            check_ins_added: i32::try_from(check_ins.len()).unwrap_or(i32::MAX),
            keep: i32::try_from(keep).unwrap_or(i32::MAX),
            fields,
        });
        for c in check_ins {
            self.check_ins.push(CheckInInput {
                token,
                record: CheckInRecord::of(c),
            });
        }
        for e in events {
            self.events.push(EventInput {
                owner: token,
                record: EventRecord::of(e),
            });
        }
        for d in change.deliveries() {
            self.deliveries.push(DeliveryInput {
                token,
                fields: DeliveryFields::of(d),
            });
        }
        self.deferrals.extend(deferrals);
        Ok(())
    }
}

/// What is left to do after a batch committed: trimming histories. It is not part of
/// any change's guarantee (readers never see more than is kept), so it runs after the
/// replies, in a transaction of its own, and a failure only leaves it for a later save.
#[derive(Debug, Default)]
pub(crate) struct Housekeeping {
    /// Snitches holding twice the check-ins they keep, or more, each with how many it
    /// holds beyond what it keeps.
    full: Vec<(String, i32)>,
}

impl Housekeeping {
    /// Trims the histories that are full, but none that another batch is trimming
    /// (`in_flight`): that trim leaves it short again; and at most [`TRIMS_PER_BATCH`],
    /// the furthest over first: the others stay full until a later save of theirs.
    pub(crate) async fn run(
        self,
        conn: &mut PgConnection,
        in_flight: &TrimsInFlight,
    ) -> Result<(), sqlx::Error> {
        let claimed = in_flight.claim(self.full, TRIMS_PER_BATCH);
        if !claimed.tokens.is_empty() {
            sqlx::query(TRIM_CHECK_INS)
                .bind(&claimed.tokens)
                .execute(conn)
                .await?;
        }
        Ok(())
    }
}

/// The most histories one batch trims after its commit. Snitches checked in alike fill
/// up alike: 10,000 created together and checked in at one rate all reached twice their
/// history within seconds, and batches that each trimmed every full snitch of theirs
/// (3,000 rows) held check-ins up for 160 ms at the 99th percentile (`wrk`, row 2's
/// load). A snitch left full is trimmed after a later save (readers never see more than
/// it keeps).
pub const TRIMS_PER_BATCH: usize = 8;

/// The snitches whose history a batch is trimming right now.
///
/// A snitch that many workers check in (each batch adding its check-ins) stays full
/// while its trim runs, so without this every batch trimmed it again: trims of one
/// snitch piled up, waited for its row lock and for each other, and check-ins on one
/// token fell from about 20,000 to under 1,000 a second (found under `wrk` after 30 s of
/// such load). One trim at a time per snitch is enough: it cuts back to what is kept.
#[derive(Debug, Default)]
pub(crate) struct TrimsInFlight {
    tokens: std::sync::Mutex<HashSet<String>>,
}

impl TrimsInFlight {
    /// Claims at most `most` of the `full` snitches (token, how many it holds beyond
    /// what it keeps) that no batch is trimming, each once, the furthest over first (so
    /// one left out, which grows, is not left out for ever): they are being trimmed
    /// until the returned claim is dropped.
    fn claim(&self, mut full: Vec<(String, i32)>, most: usize) -> TrimClaim<'_> {
        // Each snitch once, with the most it was found over.
        full.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        full.dedup_by(|later, first| later.0 == first.0);
        full.sort_by_key(|(_, over)| std::cmp::Reverse(*over));
        let mut in_flight = self.lock();
        let tokens: Vec<String> = full
            .into_iter()
            .map(|(token, _)| token)
            .filter(|token| !in_flight.contains(token))
            .take(most)
            .collect();
        in_flight.extend(tokens.iter().cloned());
        TrimClaim {
            in_flight: self,
            tokens,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Snitches being trimmed by one batch: released when the trim is over, failed, or
/// dropped.
struct TrimClaim<'a> {
    in_flight: &'a TrimsInFlight,
    tokens: Vec<String>,
}

impl Drop for TrimClaim<'_> {
    fn drop(&mut self) {
        let mut tokens = self.in_flight.lock();
        for token in &self.tokens {
            tokens.remove(token);
        }
    }
}

/// A batch cut into rounds, with the results of the changes that failed before any
/// statement.
pub(crate) struct Plan<'a> {
    rounds: Vec<Round<'a>>,
    results: Vec<Result<(), StorageError>>,
}

impl<'a> Plan<'a> {
    pub(crate) fn of(changes: &[&'a Change]) -> Self {
        let mut results: Vec<Result<(), StorageError>> =
            (0..changes.len()).map(|_| Ok(())).collect();
        let mut rounds: Vec<Round<'a>> = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(changes.len());
        for (index, change) in changes.iter().enumerate() {
            let occurrence = seen.entry(change.snitch().token().as_str()).or_insert(0);
            if rounds.len() <= *occurrence {
                rounds.push(Round::default());
            }
            if let Err(e) = rounds[*occurrence].push(index, change) {
                results[index] = Err(e);
            }
            *occurrence += 1;
        }
        rounds.retain(|r| !r.changes.is_empty());
        Plan { rounds, results }
    }

    /// Whether the batch is one statement, which then needs no transaction around it.
    pub(crate) fn is_one_statement(&self) -> bool {
        self.rounds.len() <= 1
    }

    /// Runs the rounds on `conn` (in a transaction when there are several): each
    /// change's result, in the order of the batch, and what is left to do after the
    /// commit. An `Err` is a failed statement: part of the batch may be written, unless
    /// the transaction is rolled back.
    pub(crate) async fn apply(
        mut self,
        conn: &mut PgConnection,
    ) -> Result<(Vec<Result<(), StorageError>>, Housekeeping), sqlx::Error> {
        let mut housekeeping = Housekeeping::default();
        let rounds = std::mem::take(&mut self.rounds);
        for round in &rounds {
            let answers = round.apply(&mut *conn).await?;
            settle(&mut self.results, round, &answers, &mut housekeeping);
        }
        Ok((self.results, housekeeping))
    }
}

/// Records the result of each change of `round` from what its statement answered for
/// each token: the stored check-in count when it was updated, and whether the snitch
/// exists.
fn settle(
    results: &mut [Result<(), StorageError>],
    round: &Round<'_>,
    answers: &HashMap<&str, (Option<i32>, bool)>,
    housekeeping: &mut Housekeeping,
) {
    for (&index, input) in round.changes.iter().zip(&round.snitches) {
        let result = match answers.get(input.token) {
            Some((Some(stored), _)) => {
                if *stored >= trim_at(input.keep) {
                    housekeeping
                        .full
                        .push((input.token.to_owned(), stored.saturating_sub(input.keep)));
                }
                Ok(())
            }
            Some((None, true)) => Err(StorageError::Conflict),
            _ => Err(StorageError::NotFound),
        };
        results[index] = result;
    }
}

/// Sets a snitch's history length right after a save that wrote `added` check-ins one
/// by one (the fallback path), as [`keep_after_save`] says, and answers it.
pub(crate) async fn set_keep(
    conn: &mut PgConnection,
    token: &str,
    keep: usize,
    added: usize,
) -> Result<i64, StorageError> {
    let kept: Option<i32> = sqlx::query_scalar(&format!(
        "UPDATE snitch.snitches s SET check_ins_keep = {} WHERE token = $1 \
         RETURNING check_ins_keep",
        keep_after_save("$2", "$3")
    ))
    .bind(token)
    .bind(i32::try_from(keep).unwrap_or(i32::MAX))
    .bind(i32::try_from(added).unwrap_or(i32::MAX))
    .fetch_optional(&mut *conn)
    .await
    .map_err(backend)?;
    Ok(kept.map_or(limit(keep), i64::from))
}

/// Keeps a snitch's count of stored check-ins right after a save that wrote them one by
/// one (the fallback path).
pub(crate) async fn recount_check_ins(
    conn: &mut PgConnection,
    token: &str,
) -> Result<(), StorageError> {
    sqlx::query(
        "UPDATE snitch.snitches SET check_ins_stored = \
         (SELECT count(*) FROM snitch.check_ins WHERE token = $1) WHERE token = $1",
    )
    .bind(token)
    .execute(&mut *conn)
    .await
    .map_err(backend)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{names, TrimsInFlight, DELIVERY_INPUT_COLUMNS, EVENT_INPUT_COLUMNS};
    use crate::records::{DELIVERY_FIELDS, EVENT_COLUMNS};

    /// A round writes every column an event or a delivery is read back with, and no
    /// other: what the typed arrays bind is what the readers expect.
    #[test]
    fn a_round_inserts_every_column_of_events_and_deliveries() {
        assert_eq!(names(EVENT_INPUT_COLUMNS), EVENT_COLUMNS);
        assert_eq!(names(DELIVERY_INPUT_COLUMNS), DELIVERY_FIELDS);
    }

    fn tokens(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    /// Snitches found full, each as far over as the others.
    fn full(names: &[&str]) -> Vec<(String, i32)> {
        names.iter().map(|n| ((*n).to_owned(), 1)).collect()
    }

    #[test]
    fn a_snitch_being_trimmed_is_not_trimmed_again_until_that_trim_is_over() {
        let in_flight = TrimsInFlight::default();
        let first = in_flight.claim(full(&["a", "b"]), 10);
        assert_eq!(first.tokens, tokens(&["a", "b"]));

        let second = in_flight.claim(full(&["b", "c"]), 10);
        assert_eq!(
            second.tokens,
            tokens(&["c"]),
            "b is being trimmed by the first"
        );

        drop(first);
        let third = in_flight.claim(full(&["a", "b", "c"]), 10);
        assert_eq!(
            third.tokens,
            tokens(&["a", "b"]),
            "c is still being trimmed"
        );

        drop((second, third));
        let all = in_flight.claim(full(&["a", "b", "c"]), 10);
        assert_eq!(all.tokens, tokens(&["a", "b", "c"]));
    }

    #[test]
    fn a_batch_claims_so_many_trims_each_once_the_furthest_over_first() {
        let in_flight = TrimsInFlight::default();
        let found = vec![
            ("d".to_owned(), 1),
            ("a".to_owned(), 2),
            ("d".to_owned(), 7),
            ("c".to_owned(), 3),
            ("b".to_owned(), 1),
        ];
        let first = in_flight.claim(found, 2);
        assert_eq!(first.tokens, tokens(&["d", "c"]));
        // Those left out are not being trimmed: a later batch may take them.
        let second = in_flight.claim(full(&["a", "b", "c"]), 2);
        assert_eq!(second.tokens, tokens(&["a", "b"]));
    }
}
