//! Rows as Postgres keeps them, and their mapping to and from domain values.
//!
//! Writing flattens domain values into plain columns (text, arrays, timestamps); reading
//! re-parses every value with its own `parse`, so a row that no longer holds a valid value
//! is reported as [`StorageError::Corrupt`] instead of being trusted. The event inside a
//! delivery and a delivery's attempts are JSON (`jsonb`) with the same fields as the
//! columns; the JSON shape is this module's, the core knows no JSON.

use std::fmt::Display;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use snitch_core::calendar::Interval;
use snitch_core::{
    AlertEmails, AlertType, ApiKeyRecord, Attempt, Case, CaseId, Channel, CheckIn, CheckInMessage,
    Delivery, DeliveryState, EmailAddress, Event, EventKind, Notes, Outcome, Pause, PauseUntil,
    Plan, Snitch, SnitchName, SnitchRecord, Status, StorageError, Tag, Tags, Token, Validation,
    Webhook, WebhookSecret, WebhookUrl,
};
use sqlx::types::Json;

fn corrupt(what: &str, problem: impl Display) -> StorageError {
    StorageError::Corrupt(format!("{what}: {problem}"))
}

/// Turns the problem a domain `parse` found in a stored value into a [`StorageError`].
fn invalid(what: &str) -> impl Fn(Validation) -> StorageError + '_ {
    move |v| corrupt(what, format!("{} {}", v.attribute, v.message))
}

/// A `u64` counter as a `bigint`; counters never get near `i64::MAX`, so one that does is
/// refused rather than wrapped.
pub(crate) fn to_bigint(what: &str, n: u64) -> Result<i64, StorageError> {
    i64::try_from(n)
        .map_err(|_| StorageError::Backend(format!("{what} {n} exceeds a bigint").into()))
}

fn from_bigint(what: &str, n: i64) -> Result<u64, StorageError> {
    u64::try_from(n).map_err(|_| corrupt(what, format!("negative value {n}")))
}

fn token(raw: &str) -> Result<Token, StorageError> {
    Token::parse(raw).map_err(|e| corrupt("token", e))
}

fn case_id(raw: &str) -> Result<CaseId, StorageError> {
    CaseId::parse(raw).map_err(invalid("case id"))
}

fn status(what: &str, raw: &str) -> Result<Status, StorageError> {
    Status::parse(raw).ok_or_else(|| corrupt(what, format!("unknown status {raw:?}")))
}

fn emails(what: &str, raw: &[String]) -> Result<Vec<EmailAddress>, StorageError> {
    raw.iter()
        .map(|a| EmailAddress::parse(a).map_err(invalid(what)))
        .collect()
}

fn strings<'a, T: 'a>(items: impl IntoIterator<Item = &'a T>, f: fn(&T) -> &str) -> Vec<String> {
    items.into_iter().map(|i| f(i).to_owned()).collect()
}

// ---------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct CaseRow {
    id: String,
    members: Vec<String>,
    max_snitches: i64,
    error_notices: bool,
    on_hold: bool,
}

impl CaseRow {
    pub(crate) fn into_case(self) -> Result<Case, StorageError> {
        Ok(Case {
            id: case_id(&self.id)?,
            members: emails("case members", &self.members)?,
            plan: Plan {
                max_snitches: u32::try_from(self.max_snitches)
                    .map_err(|e| corrupt("max_snitches", e))?,
                error_notices: self.error_notices,
            },
            on_hold: self.on_hold,
        })
    }
}

pub(crate) fn members(case: &Case) -> Vec<String> {
    strings(&case.members, EmailAddress::as_str)
}

// ---------------------------------------------------------------------------------------
// Snitches
// ---------------------------------------------------------------------------------------

/// How many of [`SNITCH_FIELDS`], at its start, are the settings a user gives; the rest
/// are the snitch's state.
pub(crate) const SETTINGS_FIELDS: usize = 6;

/// The columns a save may change, in the order [`SnitchFields::bind`] binds them.
pub(crate) const SNITCH_FIELDS: [&str; 22] = [
    "name",
    "tags",
    "notes",
    "interval",
    "alert_type",
    "alert_email",
    "status",
    "checked_in_at",
    "last_check_in_at",
    "anchor_at",
    "deadline_at",
    "pause_until_kind",
    "pause_until_at",
    "pause_resume_status",
    "pause_checked_in",
    "smart_offsets_ms",
    "last_errored_alert_at",
    "error_announced",
    "last_recovery_alert_at",
    "event_seq",
    "version",
    "wake_at",
];

/// Every column [`SnitchRow`] reads.
pub(crate) const SNITCH_COLUMNS: &str = "token, case_id, created_at, name, tags, notes, \
    interval, alert_type, alert_email, status, checked_in_at, last_check_in_at, anchor_at, \
    deadline_at, pause_until_kind, pause_until_at, pause_resume_status, pause_checked_in, \
    smart_offsets_ms, last_errored_alert_at, error_announced, last_recovery_alert_at, \
    event_seq, version";

const UNTIL_HEALTHY: &str = "healthy";
const UNTIL_UNPAUSED: &str = "unpaused";
const UNTIL_AT: &str = "at";

/// The values of [`SNITCH_FIELDS`] for one snitch, ready to bind (or, as JSON, one row
/// of a set-based save: the keys are the column names).
///
/// Texts are borrowed from the snitch: a check-in's save, which writes the state alone,
/// copies no name or notes.
#[derive(Debug, Serialize)]
pub(crate) struct SnitchFields<'a> {
    name: &'a str,
    tags: Vec<&'a str>,
    notes: &'a str,
    interval: &'static str,
    alert_type: &'static str,
    alert_email: Vec<&'a str>,
    status: &'static str,
    checked_in_at: Option<DateTime<Utc>>,
    last_check_in_at: Option<DateTime<Utc>>,
    anchor_at: Option<DateTime<Utc>>,
    deadline_at: Option<DateTime<Utc>>,
    pause_until_kind: Option<&'static str>,
    pause_until_at: Option<DateTime<Utc>>,
    pause_resume_status: Option<&'static str>,
    pause_checked_in: Option<bool>,
    smart_offsets_ms: &'a [i64],
    last_errored_alert_at: Option<DateTime<Utc>>,
    error_announced: bool,
    last_recovery_alert_at: Option<DateTime<Utc>>,
    event_seq: i64,
    version: i64,
    wake_at: Option<DateTime<Utc>>,
}

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

impl<'a> SnitchFields<'a> {
    pub(crate) fn of(s: &'a Snitch) -> Result<Self, StorageError> {
        let state = s.state();
        let (until_kind, until_at) = match state.pause().map(|p| p.until) {
            None => (None, None),
            Some(PauseUntil::Healthy) => (Some(UNTIL_HEALTHY), None),
            Some(PauseUntil::Unpaused) => (Some(UNTIL_UNPAUSED), None),
            Some(PauseUntil::At(t)) => (Some(UNTIL_AT), Some(t)),
        };
        Ok(SnitchFields {
            name: s.name().as_str(),
            tags: s.tags().iter().map(Tag::as_str).collect(),
            notes: s.notes().as_str(),
            interval: s.interval().as_str(),
            alert_type: s.alert_type().as_str(),
            alert_email: s.alert_email().iter().map(EmailAddress::as_str).collect(),
            status: state.status().as_str(),
            checked_in_at: state.checked_in_at(),
            last_check_in_at: state.last_check_in_at(),
            anchor_at: state.anchor_at(),
            deadline_at: state.deadline_at(),
            pause_until_kind: until_kind,
            pause_until_at: until_at,
            pause_resume_status: state.pause().map(|p| p.resume_status.as_str()),
            pause_checked_in: state.pause().map(|p| p.checked_in_while_paused),
            smart_offsets_ms: state.smart_offsets_ms(),
            last_errored_alert_at: state.last_errored_alert_at(),
            error_announced: state.error_announced(),
            last_recovery_alert_at: state.last_recovery_alert_at(),
            event_seq: to_bigint("event_seq", state.event_seq())?,
            version: to_bigint("version", s.version())?,
            wake_at: s.wake_at(),
        })
    }

    /// Binds the values in the order of [`SNITCH_FIELDS`].
    pub(crate) fn bind(self, q: PgQuery<'a>) -> PgQuery<'a> {
        q.bind(self.name)
            .bind(self.tags)
            .bind(self.notes)
            .bind(self.interval)
            .bind(self.alert_type)
            .bind(self.alert_email)
            .bind(self.status)
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
            .bind(self.event_seq)
            .bind(self.version)
            .bind(self.wake_at)
    }
}

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

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SnitchRow {
    token: String,
    case_id: String,
    created_at: DateTime<Utc>,
    name: String,
    tags: Vec<String>,
    notes: String,
    interval: String,
    alert_type: String,
    alert_email: Vec<String>,
    status: String,
    checked_in_at: Option<DateTime<Utc>>,
    last_check_in_at: Option<DateTime<Utc>>,
    anchor_at: Option<DateTime<Utc>>,
    deadline_at: Option<DateTime<Utc>>,
    pause_until_kind: Option<String>,
    pause_until_at: Option<DateTime<Utc>>,
    pause_resume_status: Option<String>,
    pause_checked_in: Option<bool>,
    smart_offsets_ms: Vec<i64>,
    last_errored_alert_at: Option<DateTime<Utc>>,
    error_announced: bool,
    last_recovery_alert_at: Option<DateTime<Utc>>,
    event_seq: i64,
    version: i64,
}

impl SnitchRow {
    pub(crate) fn into_snitch(self) -> Result<Snitch, StorageError> {
        let pause = match self.pause_until_kind.as_deref() {
            None => None,
            Some(kind) => {
                let until = match (kind, self.pause_until_at) {
                    (UNTIL_HEALTHY, None) => PauseUntil::Healthy,
                    (UNTIL_UNPAUSED, None) => PauseUntil::Unpaused,
                    (UNTIL_AT, Some(t)) => PauseUntil::At(t),
                    _ => return Err(corrupt("pause", format!("inconsistent kind {kind:?}"))),
                };
                let resume_status = self
                    .pause_resume_status
                    .as_deref()
                    .ok_or_else(|| corrupt("pause", "no resume status"))?;
                Some(Pause::new(
                    until,
                    status("pause resume status", resume_status)?,
                    self.pause_checked_in
                        .ok_or_else(|| corrupt("pause", "no checked-in flag"))?,
                ))
            }
        };
        Ok(Snitch::restore(SnitchRecord {
            token: token(&self.token)?,
            case_id: case_id(&self.case_id)?,
            name: SnitchName::parse_stored(&self.name).map_err(invalid("name"))?,
            tags: Tags::parse_stored(&self.tags).map_err(invalid("tags"))?,
            notes: Notes::parse(&self.notes).map_err(invalid("notes"))?,
            interval: self
                .interval
                .parse::<Interval>()
                .map_err(|e| corrupt("interval", e))?,
            alert_type: AlertType::parse(&self.alert_type).map_err(invalid("alert type"))?,
            alert_email: AlertEmails::parse(&self.alert_email).map_err(invalid("alert emails"))?,
            created_at: self.created_at,
            status: status("status", &self.status)?,
            checked_in_at: self.checked_in_at,
            last_check_in_at: self.last_check_in_at,
            anchor_at: self.anchor_at,
            deadline_at: self.deadline_at,
            pause,
            smart_offsets_ms: self.smart_offsets_ms,
            last_errored_alert_at: self.last_errored_alert_at,
            error_announced: self.error_announced,
            last_recovery_alert_at: self.last_recovery_alert_at,
            event_seq: from_bigint("event_seq", self.event_seq)?,
            version: from_bigint("version", self.version)?,
        })?)
    }
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
                    CaseRow {
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

// ---------------------------------------------------------------------------------------
// Check-ins
// ---------------------------------------------------------------------------------------

/// A check-in: `exit_status` is `None` for a success, the job's exit status for an error.
#[derive(Debug, Serialize, Deserialize, sqlx::FromRow)]
pub(crate) struct CheckInRecord {
    pub(crate) at: DateTime<Utc>,
    pub(crate) exit_status: Option<String>,
    pub(crate) message: Option<String>,
}

impl CheckInRecord {
    pub(crate) fn of(c: &CheckIn) -> Self {
        CheckInRecord {
            at: c.at,
            exit_status: match &c.outcome {
                Outcome::Success => None,
                Outcome::Error { exit_status } => Some(exit_status.clone()),
            },
            message: c.message.as_ref().map(|m| m.as_str().to_owned()),
        }
    }

    pub(crate) fn into_check_in(self) -> Result<CheckIn, StorageError> {
        let message = match self.message {
            None => None,
            Some(raw) => {
                let message = CheckInMessage::truncating(&raw);
                if message.as_ref().map(CheckInMessage::as_str) != Some(raw.as_str()) {
                    return Err(corrupt("check-in message", "empty or too long"));
                }
                message
            }
        };
        let outcome = match self.exit_status {
            None => Outcome::Success,
            Some(exit_status) => Outcome::Error { exit_status },
        };
        Ok(CheckIn::new(self.at, outcome, message))
    }
}

// ---------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------

/// An event, as the columns of `snitch.events` and as the JSON inside a delivery.
#[derive(Debug, Serialize, Deserialize, sqlx::FromRow)]
pub(crate) struct EventRecord {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) at: DateTime<Utc>,
    pub(crate) case_id: String,
    pub(crate) token: String,
    pub(crate) name: String,
    pub(crate) notes: String,
    pub(crate) tags: Vec<String>,
    pub(crate) alert_email: Vec<String>,
    pub(crate) status: String,
    pub(crate) previous_status: String,
    pub(crate) checked_in_at: Option<DateTime<Utc>>,
    pub(crate) check_in_at: Option<DateTime<Utc>>,
    pub(crate) check_in_exit_status: Option<String>,
    pub(crate) check_in_message: Option<String>,
    /// Absent in deliveries stored before catch-up events existed: 0, as for other kinds.
    #[serde(default)]
    pub(crate) missed_periods: i64,
}

/// Every column [`EventRecord`] reads.
pub(crate) const EVENT_COLUMNS: &str = "id, kind, at, case_id, token, name, notes, tags, \
    alert_email, status, previous_status, checked_in_at, check_in_at, check_in_exit_status, \
    check_in_message, missed_periods";

impl EventRecord {
    pub(crate) fn of(e: &Event) -> Self {
        let check_in = e.check_in.as_ref().map(CheckInRecord::of);
        EventRecord {
            id: e.id.clone(),
            kind: e.kind.as_str().to_owned(),
            at: e.at,
            case_id: e.case_id.as_str().to_owned(),
            token: e.token.as_str().to_owned(),
            name: e.name.as_str().to_owned(),
            notes: e.notes.as_str().to_owned(),
            tags: strings(e.tags.iter(), Tag::as_str),
            alert_email: strings(e.alert_email.iter(), EmailAddress::as_str),
            status: e.status.as_str().to_owned(),
            previous_status: e.previous_status.as_str().to_owned(),
            checked_in_at: e.checked_in_at,
            check_in_at: check_in.as_ref().map(|c| c.at),
            check_in_exit_status: check_in.as_ref().and_then(|c| c.exit_status.clone()),
            check_in_message: check_in.and_then(|c| c.message),
            // A count of periods; beyond a bigint is beyond any calendar.
            missed_periods: i64::try_from(e.missed_periods).unwrap_or(i64::MAX),
        }
    }

    pub(crate) fn into_event(self) -> Result<Event, StorageError> {
        let check_in = match self.check_in_at {
            None if self.check_in_exit_status.is_some() || self.check_in_message.is_some() => {
                return Err(corrupt("event check-in", "fields without an instant"));
            }
            None => None,
            Some(at) => Some(
                CheckInRecord {
                    at,
                    exit_status: self.check_in_exit_status,
                    message: self.check_in_message,
                }
                .into_check_in()?,
            ),
        };
        Ok(Event {
            kind: EventKind::parse(&self.kind)
                .ok_or_else(|| corrupt("event kind", format!("unknown {:?}", self.kind)))?,
            at: self.at,
            case_id: case_id(&self.case_id)?,
            token: token(&self.token)?,
            name: SnitchName::parse_stored(&self.name).map_err(invalid("event name"))?,
            notes: Notes::parse(&self.notes).map_err(invalid("event notes"))?,
            tags: Tags::parse_stored(&self.tags).map_err(invalid("event tags"))?,
            alert_email: AlertEmails::parse(&self.alert_email)
                .map_err(invalid("event alert emails"))?,
            status: status("event status", &self.status)?,
            previous_status: status("event previous status", &self.previous_status)?,
            checked_in_at: self.checked_in_at,
            check_in,
            missed_periods: from_bigint("missed_periods", self.missed_periods)?,
            id: self.id,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Webhooks
// ---------------------------------------------------------------------------------------

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct WebhookRow {
    id: String,
    case_id: String,
    url: String,
    secret: Option<String>,
    created_at: DateTime<Utc>,
}

impl WebhookRow {
    pub(crate) fn into_webhook(self) -> Result<Webhook, StorageError> {
        Ok(Webhook {
            id: self.id,
            case_id: case_id(&self.case_id)?,
            url: WebhookUrl::parse(&self.url).map_err(invalid("webhook url"))?,
            secret: secret(self.secret.as_deref())?,
            created_at: self.created_at,
        })
    }
}

fn secret(raw: Option<&str>) -> Result<Option<WebhookSecret>, StorageError> {
    raw.map(|s| WebhookSecret::parse(s).map_err(invalid("webhook secret")))
        .transpose()
}

// ---------------------------------------------------------------------------------------
// Deliveries
// ---------------------------------------------------------------------------------------

const CHANNEL_WEBHOOK: &str = "webhook";
const CHANNEL_EMAIL: &str = "email";

/// One attempt at a delivery, as an element of the `attempts` JSON array.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct AttemptRecord {
    at: DateTime<Utc>,
    ok: bool,
    detail: String,
    duration_ms: u64,
}

impl AttemptRecord {
    pub(crate) fn of(a: &Attempt) -> Self {
        AttemptRecord {
            at: a.at,
            ok: a.ok,
            detail: a.detail.clone(),
            duration_ms: a.duration_ms,
        }
    }

    fn into_attempt(self) -> Attempt {
        Attempt {
            at: self.at,
            ok: self.ok,
            detail: self.detail,
            duration_ms: self.duration_ms,
        }
    }
}

pub(crate) fn parse_delivery_state(raw: &str) -> Result<DeliveryState, StorageError> {
    [
        DeliveryState::Pending,
        DeliveryState::Delivered,
        DeliveryState::Failed,
    ]
    .into_iter()
    .find(|s| s.as_str() == raw)
    .ok_or_else(|| corrupt("delivery state", format!("unknown {raw:?}")))
}

/// A delivery's columns as written: its channel flattened into nullable columns (as
/// JSON, one row of a set-based save: the keys are the column names).
#[derive(Debug, Serialize)]
pub(crate) struct DeliveryFields {
    pub(crate) id: String,
    pub(crate) event_id: String,
    pub(crate) event: Json<EventRecord>,
    /// The case of the event and the webhook's destination: the keys of fair claims.
    pub(crate) case_id: String,
    pub(crate) destination: Option<String>,
    pub(crate) channel: &'static str,
    pub(crate) hook_id: Option<String>,
    pub(crate) url: Option<String>,
    pub(crate) secret: Option<String>,
    pub(crate) recipients: Option<Vec<String>>,
    pub(crate) state: &'static str,
    pub(crate) next_attempt_at: Option<DateTime<Utc>>,
    pub(crate) attempts: Json<Vec<AttemptRecord>>,
}

impl DeliveryFields {
    pub(crate) fn of(d: &Delivery) -> Self {
        let (hook_id, url, secret, recipients) = match &d.channel {
            Channel::Webhook {
                hook_id,
                url,
                secret,
            } => (
                Some(hook_id.clone()),
                Some(url.as_str().to_owned()),
                secret.as_ref().map(|s| s.expose().to_owned()),
                None,
            ),
            Channel::Email { to } => (None, None, None, Some(strings(to, EmailAddress::as_str))),
        };
        DeliveryFields {
            id: d.id.clone(),
            event_id: d.event.id.clone(),
            event: Json(EventRecord::of(&d.event)),
            case_id: d.case_id().as_str().to_owned(),
            destination: d.destination(),
            channel: match d.channel {
                Channel::Webhook { .. } => CHANNEL_WEBHOOK,
                Channel::Email { .. } => CHANNEL_EMAIL,
            },
            hook_id,
            url,
            secret,
            recipients,
            state: d.state.as_str(),
            next_attempt_at: d.next_attempt_at,
            attempts: Json(d.attempts.iter().map(AttemptRecord::of).collect()),
        }
    }
}

/// Every column [`DeliveryRow`] reads.
pub(crate) const DELIVERY_COLUMNS: &str =
    "id, event, channel, hook_id, url, secret, recipients, state, next_attempt_at, attempts";

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct DeliveryRow {
    id: String,
    event: Json<EventRecord>,
    channel: String,
    hook_id: Option<String>,
    url: Option<String>,
    secret: Option<String>,
    recipients: Option<Vec<String>>,
    state: String,
    next_attempt_at: Option<DateTime<Utc>>,
    attempts: Json<Vec<AttemptRecord>>,
}

impl DeliveryRow {
    pub(crate) fn into_delivery(self) -> Result<Delivery, StorageError> {
        let channel = match (
            self.channel.as_str(),
            self.hook_id,
            self.url,
            self.recipients,
        ) {
            (CHANNEL_WEBHOOK, Some(hook_id), Some(url), None) => Channel::Webhook {
                hook_id,
                url: WebhookUrl::parse(&url).map_err(invalid("delivery url"))?,
                secret: secret(self.secret.as_deref())?,
            },
            (CHANNEL_EMAIL, None, None, Some(to)) => Channel::Email {
                to: emails("delivery recipients", &to)?,
            },
            (other, ..) => {
                return Err(corrupt(
                    "delivery channel",
                    format!("inconsistent {other:?}"),
                ))
            }
        };
        Ok(Delivery {
            id: self.id,
            event: self.event.0.into_event()?,
            channel,
            state: parse_delivery_state(&self.state)?,
            next_attempt_at: self.next_attempt_at,
            attempts: self
                .attempts
                .0
                .into_iter()
                .map(AttemptRecord::into_attempt)
                .collect(),
        })
    }
}

// ---------------------------------------------------------------------------------------
// API keys
// ---------------------------------------------------------------------------------------

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ApiKeyRow {
    id: String,
    case_id: String,
    digest: String,
    prefix: String,
    label: String,
    created_at: DateTime<Utc>,
    last_used_at: Option<DateTime<Utc>>,
    revoked: bool,
}

impl ApiKeyRow {
    pub(crate) fn into_record(self) -> Result<ApiKeyRecord, StorageError> {
        Ok(ApiKeyRecord {
            id: self.id,
            case_id: case_id(&self.case_id)?,
            digest: self.digest,
            prefix: self.prefix,
            label: self.label,
            created_at: self.created_at,
            last_used_at: self.last_used_at,
            revoked: self.revoked,
        })
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
