//! How Postgres keeps Snitch's values ([`Pg`], the store's [`Dialect`]): instants are
//! `timestamptz`, lists are arrays, tables live in the schema `snitch`; the event inside a
//! delivery and a delivery's attempts are `jsonb`. The rows and their mapping to domain
//! values are `snitch_store_sql::records`; here are only what Postgres alone reads and
//! writes: a batch's snitches as typed arrays ([`SnitchColumns`]) and a snitch with its
//! case ([`SnitchCaseRow`]).

use chrono::{DateTime, Utc};
use snitch_core::{Case, Snitch, StorageError, Timestamp};
use snitch_store_sql::records::{self as shared};
use snitch_store_sql::Dialect;

pub(crate) use snitch_store_sql::records::{
    CaseRow as SharedCaseRow, DELIVERY_COLUMNS, DELIVERY_FIELDS, EVENT_COLUMNS, SETTINGS_FIELDS,
    SNITCH_COLUMNS, SNITCH_FIELDS,
};
pub(crate) use snitch_store_sql::to_integer as to_bigint;

/// Postgres' [`Dialect`].
#[derive(Debug)]
pub(crate) struct Pg;

impl Dialect for Pg {
    type Time = DateTime<Utc>;
    type Texts = Vec<String>;
    type Numbers = Vec<i64>;

    const TABLES: &'static str = "snitch.";
    const PARAMETER: char = '$';
    // Case ids sort by their bytes, whatever the database's collation.
    const BYTE_ORDER: &'static str = " COLLATE \"C\"";

    fn time(t: Timestamp) -> DateTime<Utc> {
        t
    }

    fn instant(_: &str, t: DateTime<Utc>) -> Result<Timestamp, StorageError> {
        Ok(t)
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

pub(crate) type CaseRow = shared::CaseRow<Pg>;
pub(crate) type SnitchRow = shared::SnitchRow<Pg>;
pub(crate) type SnitchFields<'a> = shared::SnitchFields<'a, Pg>;
pub(crate) type CheckInRecord = shared::CheckInRecord<Pg>;
pub(crate) type EventRecord = shared::EventRecord<Pg>;
pub(crate) type DeliveryFields = shared::DeliveryFields<Pg>;
pub(crate) type DeliveryRow = shared::DeliveryRow<Pg>;
pub(crate) type AttemptRecord = shared::AttemptRecord<Pg>;
pub(crate) type WebhookRow = shared::WebhookRow<Pg>;
pub(crate) type ChannelRow = shared::ChannelRow<Pg>;
pub(crate) type ChannelFields = shared::ChannelFields<Pg>;
pub(crate) type ApiKeyRow = shared::ApiKeyRow<Pg>;

/// [`SnitchFields`] of many snitches, one array per field, ready to bind as the typed
/// arrays of an `unnest`: Postgres reads them in binary, with no text to parse per row
/// (the arrays of a row, tags, e-mails and offsets, travel as array literals, since
/// `unnest` cannot take an array of arrays of different lengths).
#[derive(Debug, Default)]
pub(crate) struct SnitchColumns {
    /// Whether the columns hold the settings too.
    settings: bool,
    name: Vec<String>,
    tags: Vec<String>,
    notes: Vec<String>,
    interval: Vec<&'static str>,
    alert_type: Vec<&'static str>,
    alert_email: Vec<String>,
    schedule: Vec<Option<String>>,
    failure_tolerance: Vec<i32>,
    missed_tolerance: Vec<i32>,
    max_runtime_seconds: Vec<Option<i32>>,
    email_keywords: Vec<Option<String>>,
    status: Vec<&'static str>,
    checked_in_at: Vec<Option<DateTime<Utc>>>,
    last_check_in_at: Vec<Option<DateTime<Utc>>>,
    anchor_at: Vec<Option<DateTime<Utc>>>,
    deadline_at: Vec<Option<DateTime<Utc>>>,
    pause_until_kind: Vec<Option<&'static str>>,
    pause_until_at: Vec<Option<DateTime<Utc>>>,
    pause_resume_status: Vec<Option<&'static str>>,
    pause_checked_in: Vec<Option<bool>>,
    smart_offsets_ms: Vec<String>,
    last_errored_alert_at: Vec<Option<DateTime<Utc>>>,
    error_announced: Vec<bool>,
    last_recovery_alert_at: Vec<Option<DateTime<Utc>>>,
    consecutive_failures: Vec<i64>,
    consecutive_misses: Vec<i64>,
    runs: Vec<Option<String>>,
    check_in_seq: Vec<i64>,
    event_seq: Vec<i64>,
    version: Vec<i64>,
    wake_at: Vec<Option<DateTime<Utc>>>,
}

impl SnitchColumns {
    /// Columns for `n` snitches; of their settings too, or only of their state (the
    /// fields after [`SETTINGS_FIELDS`]).
    pub(crate) fn with_capacity(n: usize, settings: bool) -> Self {
        let mut columns = SnitchColumns {
            settings,
            ..SnitchColumns::default()
        };
        // Every column takes `n` values: reserved once, not grown while pushed.
        if settings {
            columns.name.reserve_exact(n);
            columns.tags.reserve_exact(n);
            columns.notes.reserve_exact(n);
            columns.interval.reserve_exact(n);
            columns.alert_type.reserve_exact(n);
            columns.alert_email.reserve_exact(n);
            columns.schedule.reserve_exact(n);
            columns.failure_tolerance.reserve_exact(n);
            columns.missed_tolerance.reserve_exact(n);
            columns.max_runtime_seconds.reserve_exact(n);
            columns.email_keywords.reserve_exact(n);
        }
        columns.status.reserve_exact(n);
        columns.checked_in_at.reserve_exact(n);
        columns.last_check_in_at.reserve_exact(n);
        columns.anchor_at.reserve_exact(n);
        columns.deadline_at.reserve_exact(n);
        columns.pause_until_kind.reserve_exact(n);
        columns.pause_until_at.reserve_exact(n);
        columns.pause_resume_status.reserve_exact(n);
        columns.pause_checked_in.reserve_exact(n);
        columns.smart_offsets_ms.reserve_exact(n);
        columns.last_errored_alert_at.reserve_exact(n);
        columns.error_announced.reserve_exact(n);
        columns.last_recovery_alert_at.reserve_exact(n);
        columns.consecutive_failures.reserve_exact(n);
        columns.consecutive_misses.reserve_exact(n);
        columns.runs.reserve_exact(n);
        columns.check_in_seq.reserve_exact(n);
        columns.event_seq.reserve_exact(n);
        columns.version.reserve_exact(n);
        columns.wake_at.reserve_exact(n);
        columns
    }

    pub(crate) fn push(&mut self, f: &SnitchFields<'_>) {
        if self.settings {
            self.name.push(f.name.to_owned());
            self.tags.push(array_literal(&f.tags));
            self.notes.push(f.notes.to_owned());
            self.interval.push(f.interval);
            self.alert_type.push(f.alert_type);
            self.alert_email.push(array_literal(&f.alert_email));
            self.schedule.push(f.schedule.clone());
            self.failure_tolerance.push(f.failure_tolerance);
            self.missed_tolerance.push(f.missed_tolerance);
            self.max_runtime_seconds.push(f.max_runtime_seconds);
            self.email_keywords.push(f.email_keywords.clone());
        }
        self.status.push(f.status);
        self.checked_in_at.push(f.checked_in_at);
        self.last_check_in_at.push(f.last_check_in_at);
        self.anchor_at.push(f.anchor_at);
        self.deadline_at.push(f.deadline_at);
        self.pause_until_kind.push(f.pause_until_kind);
        self.pause_until_at.push(f.pause_until_at);
        self.pause_resume_status.push(f.pause_resume_status);
        self.pause_checked_in.push(f.pause_checked_in);
        self.smart_offsets_ms
            .push(number_array_literal(f.smart_offsets_ms));
        self.last_errored_alert_at.push(f.last_errored_alert_at);
        self.error_announced.push(f.error_announced);
        self.last_recovery_alert_at.push(f.last_recovery_alert_at);
        self.consecutive_failures.push(f.consecutive_failures);
        self.consecutive_misses.push(f.consecutive_misses);
        self.runs.push(f.runs.clone());
        self.check_in_seq.push(f.check_in_seq);
        self.event_seq.push(f.event_seq);
        self.version.push(f.version);
        self.wake_at.push(f.wake_at);
    }

    /// Binds one array per field, in the order of [`SNITCH_FIELDS`] (from the first after
    /// [`SETTINGS_FIELDS`] when the columns hold no settings).
    pub(crate) fn bind<'q, O>(self, q: PgQueryAs<'q, O>) -> PgQueryAs<'q, O> {
        let q = if self.settings {
            q.bind(self.name)
                .bind(self.tags)
                .bind(self.notes)
                .bind(self.interval)
                .bind(self.alert_type)
                .bind(self.alert_email)
                .bind(self.schedule)
                .bind(self.failure_tolerance)
                .bind(self.missed_tolerance)
                .bind(self.max_runtime_seconds)
                .bind(self.email_keywords)
        } else {
            q
        };
        q.bind(self.status)
            .bind(self.checked_in_at)
            .bind(self.last_check_in_at)
            .bind(self.anchor_at)
            .bind(self.deadline_at)
            .bind(self.pause_until_kind)
            .bind(self.pause_until_at)
            .bind(self.pause_resume_status)
            .bind(self.pause_checked_in)
            .bind(self.smart_offsets_ms)
            .bind(self.last_errored_alert_at)
            .bind(self.error_announced)
            .bind(self.last_recovery_alert_at)
            .bind(self.consecutive_failures)
            .bind(self.consecutive_misses)
            .bind(self.runs)
            .bind(self.check_in_seq)
            .bind(self.event_seq)
            .bind(self.version)
            .bind(self.wake_at)
    }
}

pub(crate) type PgQueryAs<'q, O> =
    sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>;

/// A Postgres array literal of text elements (`{"a","b \"c\""}`): every element
/// quoted, with its backslashes and double quotes escaped, so commas, braces, spaces and
/// the word NULL stay text.
pub(crate) fn array_literal<S: AsRef<str>>(items: &[S]) -> String {
    let mut literal =
        String::with_capacity(2 + items.iter().map(|i| i.as_ref().len() + 3).sum::<usize>());
    literal.push('{');
    for (n, item) in items.iter().enumerate() {
        if n > 0 {
            literal.push(',');
        }
        literal.push('"');
        for c in item.as_ref().chars() {
            if c == '"' || c == '\\' {
                literal.push('\\');
            }
            literal.push(c);
        }
        literal.push('"');
    }
    literal.push('}');
    literal
}

/// A Postgres array literal of numbers (`{1,-2}`).
pub(crate) fn number_array_literal(items: &[i64]) -> String {
    use std::fmt::Write as _;
    // Sized for offsets of up to a day in milliseconds: one allocation per literal.
    let mut literal = String::with_capacity(2 + items.len() * 9);
    literal.push('{');
    for (n, item) in items.iter().enumerate() {
        if n > 0 {
            literal.push(',');
        }
        let _ = write!(literal, "{item}"); // writing to a String cannot fail
    }
    literal.push('}');
    literal
}

/// A snitch of a case's list with its place in the list's order (`created_at`, then
/// `seq`): where the next page starts.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ListedSnitchRow {
    #[sqlx(flatten)]
    pub(crate) snitch: SnitchRow,
    pub(crate) seq: i64,
}

/// A snitch with its case's columns (all `None` when the case is not stored), as the
/// batched reads return them.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SnitchCaseRow {
    #[sqlx(flatten)]
    snitch: SnitchRow,
    case_found: Option<String>,
    case_members: Option<Vec<String>>,
    case_max_snitches: Option<i64>,
    case_error_notices: Option<bool>,
    case_on_hold: Option<bool>,
}

/// What [`SnitchCaseRow`] reads besides [`SNITCH_COLUMNS`] (from `snitch.cases c`).
pub(crate) const CASE_OF_SNITCH_COLUMNS: &str = "c.id AS case_found, \
    c.members AS case_members, c.max_snitches AS case_max_snitches, \
    c.error_notices AS case_error_notices, c.on_hold AS case_on_hold";

impl SnitchCaseRow {
    pub(crate) fn token(&self) -> &str {
        &self.snitch.token
    }

    pub(crate) fn into_pair(self) -> Result<(Snitch, Option<Case>), StorageError> {
        let case = match (
            self.case_found,
            self.case_members,
            self.case_max_snitches,
            self.case_error_notices,
            self.case_on_hold,
        ) {
            (Some(id), Some(members), Some(max_snitches), Some(error_notices), Some(on_hold)) => {
                Some(
                    SharedCaseRow::<Pg> {
                        id,
                        members,
                        max_snitches,
                        error_notices,
                        on_hold,
                    }
                    .into_case()?,
                )
            }
            _ => None,
        };
        Ok((self.snitch.into_snitch()?, case))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The literals bound for a round's arrays of arrays: numbers as Postgres reads them
    /// back, texts quoted with their quotes and backslashes escaped, so commas, braces
    /// and the word NULL stay text.
    #[test]
    fn array_literals_keep_every_element_as_it_is() {
        assert_eq!(number_array_literal(&[]), "{}");
        assert_eq!(
            number_array_literal(&[-5, 0, 86_400_000, i64::MIN]),
            "{-5,0,86400000,-9223372036854775808}"
        );
        assert_eq!(array_literal::<&str>(&[]), "{}");
        assert_eq!(
            array_literal(&["a", "b \"c\"", "d\\e", "NULL", "x,y{}"]),
            r#"{"a","b \"c\"","d\\e","NULL","x,y{}"}"#
        );
        assert_eq!(array_literal(&[String::from("ä ✓")]), "{\"ä ✓\"}");
    }
}
