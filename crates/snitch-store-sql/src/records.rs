//! Rows as the SQL stores keep them, and their mapping to and from domain values, generic
//! over the [`Dialect`] (how instants and lists are kept).
//!
//! Writing flattens domain values into plain columns; reading re-parses every value with
//! its own `parse`, so a row that no longer holds a valid value is reported as
//! [`StorageError::Corrupt`] instead of being trusted. The event inside a delivery and a
//! delivery's attempts are JSON with the same fields as the columns (instants as the
//! dialect keeps them); the JSON shape is this module's, the core knows no JSON.
//!
//! The stores bind the values with the macros [`bind_snitch_fields!`](crate::bind_snitch_fields),
//! [`bind_event!`](crate::bind_event) and [`bind_delivery!`](crate::bind_delivery), in the
//! order of the column lists here.

use serde::{Deserialize, Serialize};
use snitch_core::cadence::CRON;
use snitch_core::calendar::Interval;
use snitch_core::runs::{CheckInBody, CheckInKind, OpenRun, Run, RunId};
use snitch_core::{
    AlertEmails, AlertReason, AlertType, ApiKeyRecord, Attempt, Cadence, Case, CaseId, Channel,
    ChannelConfig, ChannelKey, ChannelKind, ChannelSettings, CheckIn, CheckInMessage, CronSchedule,
    Delivery, DeliveryState, EmailAddress, EmailKeywords, Event, EventFilter, EventKind,
    ExpectedRuns, KeywordScope, Notes, Outcome, Pause, PauseUntil, Plan, Snitch, SnitchName,
    SnitchRecord, Status, StorageError, Tag, Tags, Token, Validation, Webhook, WebhookSecret,
    WebhookUrl,
};
use sqlx::types::Json;

use crate::{corrupt, from_integer, opt_instant, opt_time, to_integer, Dialect};

/// Turns the problem a domain `parse` found in a stored value into a [`StorageError`].
fn invalid(what: &str) -> impl Fn(Validation) -> StorageError + '_ {
    move |v| corrupt(what, format!("{} {}", v.attribute, v.message))
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

/// Every column [`CaseRow`] reads, in the order [`sql::UPSERT_CASE`](crate::sql::UPSERT_CASE)
/// writes them.
pub const CASE_COLUMNS: &str = "id, members, max_snitches, error_notices, on_hold";

/// A case as stored.
#[derive(Debug, sqlx::FromRow)]
#[allow(missing_docs)]
pub struct CaseRow<D: Dialect> {
    pub id: String,
    pub members: D::Texts,
    pub max_snitches: i64,
    pub error_notices: bool,
    pub on_hold: bool,
}

impl<D: Dialect> CaseRow<D> {
    /// The case, re-parsed.
    pub fn into_case(self) -> Result<Case, StorageError> {
        Ok(Case {
            id: case_id(&self.id)?,
            members: emails("case members", D::text_items(&self.members))?,
            plan: Plan {
                max_snitches: u32::try_from(self.max_snitches)
                    .map_err(|e| corrupt("max_snitches", e))?,
                error_notices: self.error_notices,
            },
            on_hold: self.on_hold,
        })
    }
}

/// A case's members as stored.
pub fn members<D: Dialect>(case: &Case) -> D::Texts {
    D::texts(strings(&case.members, EmailAddress::as_str))
}

// ---------------------------------------------------------------------------------------
// Snitches
// ---------------------------------------------------------------------------------------

/// How many of [`SNITCH_FIELDS`], at its start, are the settings a user gives; the rest
/// are the snitch's state.
pub const SETTINGS_FIELDS: usize = 11;

/// The columns a save may change, in the order [`bind_snitch_fields!`](crate::bind_snitch_fields)
/// binds them.
pub const SNITCH_FIELDS: [&str; 31] = [
    "name",
    "tags",
    "notes",
    "interval",
    "alert_type",
    "alert_email",
    "schedule",
    "failure_tolerance",
    "missed_tolerance",
    "max_runtime_seconds",
    "email_keywords",
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
    "consecutive_failures",
    "consecutive_misses",
    "runs",
    "check_in_seq",
    "event_seq",
    "version",
    "wake_at",
];

/// Every column [`SnitchRow`] reads.
pub const SNITCH_COLUMNS: &str = "token, case_id, created_at, name, tags, notes, \
    interval, alert_type, alert_email, schedule, failure_tolerance, missed_tolerance, \
    max_runtime_seconds, email_keywords, status, checked_in_at, last_check_in_at, anchor_at, deadline_at, \
    pause_until_kind, pause_until_at, pause_resume_status, pause_checked_in, smart_offsets_ms, \
    last_errored_alert_at, error_announced, last_recovery_alert_at, consecutive_failures, \
    consecutive_misses, runs, check_in_seq, event_seq, version";

/// A cron snitch's schedule as its `schedule` column holds it: one JSON object, so a
/// schedule is one column whatever it grows (its spans in milliseconds).
#[derive(Debug, Serialize, serde::Deserialize)]
struct StoredSchedule {
    expression: String,
    timezone: String,
    grace_ms: i64,
    early_ms: i64,
}

/// The `schedule` column of a cron snitch.
pub fn schedule_text(runs: &ExpectedRuns) -> String {
    let stored = StoredSchedule {
        expression: runs.schedule().expression().to_owned(),
        timezone: runs.schedule().timezone().to_owned(),
        grace_ms: runs.grace().num_milliseconds(),
        early_ms: runs.early().num_milliseconds(),
    };
    serde_json::to_string(&stored).expect("a struct of strings and numbers serializes")
}

/// The cadence of the `interval` and `schedule` columns: an interval's name and no
/// schedule, or `cron` and its schedule.
pub fn cadence(interval: &str, schedule: Option<&str>) -> Result<Cadence, StorageError> {
    match (interval, schedule) {
        (CRON, Some(text)) => Ok(Cadence::from(PARSED_SCHEDULES.expected_runs(text)?)),
        (CRON, None) => Err(corrupt("schedule", "a cron snitch without a schedule")),
        (_, Some(_)) => Err(corrupt("schedule", "an interval snitch with a schedule")),
        (name, None) => Ok(Cadence::Interval(
            name.parse::<Interval>()
                .map_err(|e| corrupt("interval", e))?,
        )),
    }
}

fn parse_schedule_text(text: &str) -> Result<ExpectedRuns, StorageError> {
    let stored: StoredSchedule = serde_json::from_str(text).map_err(|e| corrupt("schedule", e))?;
    let parsed = CronSchedule::parse(&stored.expression, &stored.timezone)
        .map_err(|e| corrupt("schedule", e))?;
    ExpectedRuns::with_spans(
        parsed,
        chrono::Duration::milliseconds(stored.grace_ms),
        chrono::Duration::milliseconds(stored.early_ms),
    )
    .map_err(invalid("schedule"))
}

/// How many distinct `schedule` texts the parsed-schedule memo keeps: a few hundred bytes
/// each (the text and croner's patterns), so at most a few MiB.
pub const PARSED_SCHEDULES_KEPT: usize = 4_096;

/// Schedules parsed from their stored text, by that text. Parsing a cron expression
/// (croner's patterns, the zone's rules) cost a sweep of cron snitches about a quarter of
/// the server's CPU when every row read parsed it again, while a deployment has far fewer
/// distinct schedules than snitches. Parsing is a function of the text, so a kept parse
/// is never stale; when full, the map is emptied and fills again with the schedules in use.
static PARSED_SCHEDULES: std::sync::LazyLock<ParsedSchedules> =
    std::sync::LazyLock::new(|| ParsedSchedules::new(PARSED_SCHEDULES_KEPT));

/// Parses by their text, hashed as the check-in cache hashes tokens.
type ParsesByText = std::collections::HashMap<String, ExpectedRuns, foldhash::fast::RandomState>;

struct ParsedSchedules {
    kept: usize,
    by_text: std::sync::Mutex<ParsesByText>,
}

impl ParsedSchedules {
    fn new(kept: usize) -> Self {
        ParsedSchedules {
            kept,
            by_text: std::sync::Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ParsesByText> {
        // A panic while held leaves a map of whole parses: still sound.
        self.by_text.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn expected_runs(&self, text: &str) -> Result<ExpectedRuns, StorageError> {
        if let Some(runs) = self.lock().get(text) {
            return Ok(runs.clone());
        }
        // Parsed outside the lock; a text that does not parse is not kept.
        let runs = parse_schedule_text(text)?;
        let mut map = self.lock();
        if map.len() >= self.kept {
            map.clear();
        }
        map.insert(text.to_owned(), runs.clone());
        Ok(runs)
    }
}

/// A run as the `runs` column and an event's `run` hold it (instants in milliseconds).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredRun {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    started_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finished_at: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    duration_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exit_status: Option<String>,
    #[serde(default)]
    timed_out: bool,
}

/// An open run in the `runs` column.
#[derive(Debug, Serialize, Deserialize)]
struct StoredOpenRun {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rid: Option<String>,
    started_at: i64,
    timeout_at: i64,
}

/// A snitch's runs as its `runs` column holds them: the open ones and the last one. One
/// JSON column: a snitch that reports no runs (every DMS snitch) stores NULL.
#[derive(Debug, Serialize, Deserialize)]
struct StoredRuns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    open: Vec<StoredOpenRun>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last: Option<StoredRun>,
}

fn millis(t: snitch_core::Timestamp) -> i64 {
    t.timestamp_millis()
}

fn from_millis(what: &str, ms: i64) -> Result<snitch_core::Timestamp, StorageError> {
    chrono::DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| corrupt(what, format!("instant {ms} out of range")))
}

fn run_id(raw: Option<String>) -> Result<Option<RunId>, StorageError> {
    raw.map(|r| RunId::parse(&r).ok_or_else(|| corrupt("run id", format!("invalid {r:?}"))))
        .transpose()
}

impl StoredRun {
    /// The run as stored.
    pub fn of(r: &Run) -> Self {
        StoredRun {
            rid: r.run_id.as_ref().map(|r| r.as_str().to_owned()),
            started_at: r.started_at.map(millis),
            finished_at: r.finished_at.map(millis),
            duration_ms: r.duration_ms,
            exit_status: r.exit_status.clone(),
            timed_out: r.timed_out,
        }
    }

    /// The run, re-parsed.
    pub fn into_run(self) -> Result<Run, StorageError> {
        Ok(Run {
            run_id: run_id(self.rid)?,
            started_at: self
                .started_at
                .map(|t| from_millis("run start", t))
                .transpose()?,
            finished_at: self
                .finished_at
                .map(|t| from_millis("run end", t))
                .transpose()?,
            duration_ms: self.duration_ms,
            exit_status: self.exit_status,
            timed_out: self.timed_out,
        })
    }
}

/// The `runs` column of a snitch: NULL when it has no open run and no last run.
pub fn runs_text(open: &[OpenRun], last: Option<&Run>) -> Option<String> {
    if open.is_empty() && last.is_none() {
        return None;
    }
    let stored = StoredRuns {
        open: open
            .iter()
            .map(|r| StoredOpenRun {
                rid: r.run_id.as_ref().map(|r| r.as_str().to_owned()),
                started_at: millis(r.started_at),
                timeout_at: millis(r.timeout_at),
            })
            .collect(),
        last: last.map(StoredRun::of),
    };
    Some(serde_json::to_string(&stored).expect("plain data serializes"))
}

/// The open runs and the last run of a `runs` column.
pub fn runs(text: Option<&str>) -> Result<(Vec<OpenRun>, Option<Run>), StorageError> {
    let Some(text) = text else {
        return Ok((Vec::new(), None));
    };
    let stored: StoredRuns = serde_json::from_str(text).map_err(|e| corrupt("runs", e))?;
    let open = stored
        .open
        .into_iter()
        .map(|r| {
            Ok(OpenRun {
                run_id: run_id(r.rid)?,
                started_at: from_millis("run start", r.started_at)?,
                timeout_at: from_millis("run timeout", r.timeout_at)?,
            })
        })
        .collect::<Result<_, StorageError>>()?;
    let last = stored.last.map(StoredRun::into_run).transpose()?;
    Ok((open, last))
}

/// A snitch's e-mail keywords as its `email_keywords` column holds them: one JSON
/// object; a snitch without keywords (the default) stores NULL.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredEmailKeywords {
    #[serde(default)]
    failure: Vec<String>,
    #[serde(default)]
    success: Vec<String>,
    #[serde(default)]
    start: Vec<String>,
    search: String,
}

/// The `email_keywords` column of a snitch: NULL when it has none.
pub fn email_keywords_text(keywords: &EmailKeywords) -> Option<String> {
    if *keywords == EmailKeywords::default() {
        return None;
    }
    let stored = StoredEmailKeywords {
        failure: keywords.failure().to_vec(),
        success: keywords.success().to_vec(),
        start: keywords.start().to_vec(),
        search: keywords.scope().name().to_owned(),
    };
    Some(serde_json::to_string(&stored).expect("plain data serializes"))
}

/// The e-mail keywords of an `email_keywords` column, re-parsed.
pub fn email_keywords(text: Option<&str>) -> Result<EmailKeywords, StorageError> {
    let Some(text) = text else {
        return Ok(EmailKeywords::default());
    };
    let stored: StoredEmailKeywords =
        serde_json::from_str(text).map_err(|e| corrupt("email_keywords", e))?;
    let scope = KeywordScope::parse(&stored.search).map_err(invalid("email_keywords"))?;
    EmailKeywords::parse(&stored.failure, &stored.success, &stored.start, scope)
        .map_err(invalid("email_keywords"))
}

const UNTIL_HEALTHY: &str = "healthy";
const UNTIL_UNPAUSED: &str = "unpaused";
const UNTIL_AT: &str = "at";

/// The values of [`SNITCH_FIELDS`] for one snitch, ready to bind (or, as JSON, one row
/// of a set-based save: the keys are the column names). Lists are plain here: a dialect
/// that keeps them as JSON wraps them when it binds.
///
/// Texts are borrowed from the snitch: a check-in's save, which writes the state alone,
/// copies no name or notes.
#[derive(Debug, Serialize)]
#[allow(missing_docs)]
pub struct SnitchFields<'a, D: Dialect> {
    pub name: &'a str,
    pub tags: Vec<&'a str>,
    pub notes: &'a str,
    pub interval: &'static str,
    pub alert_type: &'static str,
    pub alert_email: Vec<&'a str>,
    pub schedule: Option<String>,
    pub failure_tolerance: i32,
    pub missed_tolerance: i32,
    pub max_runtime_seconds: Option<i32>,
    pub email_keywords: Option<String>,
    pub status: &'static str,
    pub checked_in_at: Option<D::Time>,
    pub last_check_in_at: Option<D::Time>,
    pub anchor_at: Option<D::Time>,
    pub deadline_at: Option<D::Time>,
    pub pause_until_kind: Option<&'static str>,
    pub pause_until_at: Option<D::Time>,
    pub pause_resume_status: Option<&'static str>,
    pub pause_checked_in: Option<bool>,
    pub smart_offsets_ms: &'a [i64],
    pub last_errored_alert_at: Option<D::Time>,
    pub error_announced: bool,
    pub last_recovery_alert_at: Option<D::Time>,
    pub consecutive_failures: i64,
    pub consecutive_misses: i64,
    pub runs: Option<String>,
    pub check_in_seq: i64,
    pub event_seq: i64,
    pub version: i64,
    pub wake_at: Option<D::Time>,
}

impl<'a, D: Dialect> SnitchFields<'a, D> {
    /// The snitch's fields.
    pub fn of(s: &'a Snitch) -> Result<Self, StorageError> {
        let state = s.state();
        let (until_kind, until_at) = match state.pause().map(|p| p.until) {
            None => (None, None),
            Some(PauseUntil::Healthy) => (Some(UNTIL_HEALTHY), None),
            Some(PauseUntil::Unpaused) => (Some(UNTIL_UNPAUSED), None),
            Some(PauseUntil::At(t)) => (Some(UNTIL_AT), Some(D::time(t))),
        };
        Ok(SnitchFields {
            name: s.name().as_str(),
            tags: s.tags().iter().map(Tag::as_str).collect(),
            notes: s.notes().as_str(),
            interval: s.cadence().name(),
            alert_type: s.alert_type().as_str(),
            alert_email: s.alert_email().iter().map(EmailAddress::as_str).collect(),
            schedule: s.cadence().expected_runs().map(schedule_text),
            failure_tolerance: i32::from(s.failure_tolerance()),
            missed_tolerance: i32::from(s.missed_tolerance()),
            max_runtime_seconds: s
                .max_runtime_seconds()
                .map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
            email_keywords: email_keywords_text(s.email_keywords()),
            status: state.status().as_str(),
            checked_in_at: opt_time::<D>(state.checked_in_at()),
            last_check_in_at: opt_time::<D>(state.last_check_in_at()),
            anchor_at: opt_time::<D>(state.anchor_at()),
            deadline_at: opt_time::<D>(state.deadline_at()),
            pause_until_kind: until_kind,
            pause_until_at: until_at,
            pause_resume_status: state.pause().map(|p| p.resume_status.as_str()),
            pause_checked_in: state.pause().map(|p| p.checked_in_while_paused),
            smart_offsets_ms: state.smart_offsets_ms(),
            last_errored_alert_at: opt_time::<D>(state.last_errored_alert_at()),
            error_announced: state.error_announced(),
            last_recovery_alert_at: opt_time::<D>(state.last_recovery_alert_at()),
            consecutive_failures: i64::from(state.consecutive_failures()),
            consecutive_misses: i64::from(state.consecutive_misses()),
            runs: runs_text(state.open_runs(), state.last_run()),
            check_in_seq: to_integer("check_in_seq", state.check_in_seq())?,
            event_seq: to_integer("event_seq", state.event_seq())?,
            version: to_integer("version", s.version())?,
            wake_at: opt_time::<D>(s.wake_at()),
        })
    }
}

/// Binds a [`SnitchFields`] in the order of [`SNITCH_FIELDS`]: `$query.$bind(value)` for
/// each, its lists (tags, e-mail addresses, offsets) as `$list(value)` (`Json` where
/// lists are JSON text, `std::convert::identity` where they are arrays).
#[macro_export]
macro_rules! bind_snitch_fields {
    ($query:expr, $fields:expr, $bind:ident, $list:path) => {{
        let f = $fields;
        let settings = $query
            .$bind(f.name)
            .$bind($list(f.tags))
            .$bind(f.notes)
            .$bind(f.interval)
            .$bind(f.alert_type)
            .$bind($list(f.alert_email))
            .$bind(f.schedule)
            .$bind(f.failure_tolerance)
            .$bind(f.missed_tolerance)
            .$bind(f.max_runtime_seconds)
            .$bind(f.email_keywords);
        $crate::bind_snitch_state!(settings, f, $bind, $list)
    }};
}

/// Binds the state of a [`SnitchFields`] `$f` (a variable): [`SNITCH_FIELDS`] after
/// [`SETTINGS_FIELDS`], in their order, as [`bind_snitch_fields!`](crate::bind_snitch_fields)
/// binds them after the settings (a save that keeps the settings writes these alone).
#[macro_export]
macro_rules! bind_snitch_state {
    ($query:expr, $f:ident, $bind:ident, $list:path) => {
        $query
            .$bind($f.status)
            .$bind($f.checked_in_at)
            .$bind($f.last_check_in_at)
            .$bind($f.anchor_at)
            .$bind($f.deadline_at)
            .$bind($f.pause_until_kind)
            .$bind($f.pause_until_at)
            .$bind($f.pause_resume_status)
            .$bind($f.pause_checked_in)
            .$bind($list($f.smart_offsets_ms))
            .$bind($f.last_errored_alert_at)
            .$bind($f.error_announced)
            .$bind($f.last_recovery_alert_at)
            .$bind($f.consecutive_failures)
            .$bind($f.consecutive_misses)
            .$bind($f.runs)
            .$bind($f.check_in_seq)
            .$bind($f.event_seq)
            .$bind($f.version)
            .$bind($f.wake_at)
    };
}

/// A snitch as stored.
#[derive(Debug, sqlx::FromRow)]
#[allow(missing_docs)]
pub struct SnitchRow<D: Dialect> {
    pub token: String,
    pub case_id: String,
    pub created_at: D::Time,
    pub name: String,
    pub tags: D::Texts,
    pub notes: String,
    pub interval: String,
    pub alert_type: String,
    pub alert_email: D::Texts,
    pub schedule: Option<String>,
    pub failure_tolerance: i32,
    pub missed_tolerance: i32,
    pub max_runtime_seconds: Option<i32>,
    pub email_keywords: Option<String>,
    pub status: String,
    pub checked_in_at: Option<D::Time>,
    pub last_check_in_at: Option<D::Time>,
    pub anchor_at: Option<D::Time>,
    pub deadline_at: Option<D::Time>,
    pub pause_until_kind: Option<String>,
    pub pause_until_at: Option<D::Time>,
    pub pause_resume_status: Option<String>,
    pub pause_checked_in: Option<bool>,
    pub smart_offsets_ms: D::Numbers,
    pub last_errored_alert_at: Option<D::Time>,
    pub error_announced: bool,
    pub last_recovery_alert_at: Option<D::Time>,
    pub consecutive_failures: i64,
    pub consecutive_misses: i64,
    pub runs: Option<String>,
    pub check_in_seq: i64,
    pub event_seq: i64,
    pub version: i64,
}

impl<D: Dialect> SnitchRow<D> {
    /// The snitch, re-parsed and restored (which checks its invariants).
    pub fn into_snitch(self) -> Result<Snitch, StorageError> {
        let pause = match self.pause_until_kind.as_deref() {
            None => None,
            Some(kind) => {
                let until = match (kind, self.pause_until_at) {
                    (UNTIL_HEALTHY, None) => PauseUntil::Healthy,
                    (UNTIL_UNPAUSED, None) => PauseUntil::Unpaused,
                    (UNTIL_AT, Some(t)) => PauseUntil::At(D::instant("pause until", t)?),
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
        let (open_runs, last_run) = runs(self.runs.as_deref())?;
        Ok(Snitch::restore(SnitchRecord {
            token: token(&self.token)?,
            case_id: case_id(&self.case_id)?,
            name: SnitchName::parse_stored(&self.name).map_err(invalid("name"))?,
            tags: Tags::parse_stored(D::text_items(&self.tags)).map_err(invalid("tags"))?,
            notes: Notes::parse(&self.notes).map_err(invalid("notes"))?,
            cadence: cadence(&self.interval, self.schedule.as_deref())?,
            alert_type: AlertType::parse(&self.alert_type).map_err(invalid("alert type"))?,
            alert_email: AlertEmails::parse(D::text_items(&self.alert_email))
                .map_err(invalid("alert emails"))?,
            failure_tolerance: u16::try_from(self.failure_tolerance)
                .map_err(|e| corrupt("failure_tolerance", e))?,
            missed_tolerance: u16::try_from(self.missed_tolerance)
                .map_err(|e| corrupt("missed_tolerance", e))?,
            max_runtime_seconds: self
                .max_runtime_seconds
                .map(|n| u32::try_from(n).map_err(|e| corrupt("max_runtime_seconds", e)))
                .transpose()?,
            email_keywords: email_keywords(self.email_keywords.as_deref())?,
            created_at: D::instant("created_at", self.created_at)?,
            status: status("status", &self.status)?,
            checked_in_at: opt_instant::<D>("checked_in_at", self.checked_in_at)?,
            last_check_in_at: opt_instant::<D>("last_check_in_at", self.last_check_in_at)?,
            anchor_at: opt_instant::<D>("anchor_at", self.anchor_at)?,
            deadline_at: opt_instant::<D>("deadline_at", self.deadline_at)?,
            pause,
            smart_offsets_ms: D::numbers(self.smart_offsets_ms),
            last_errored_alert_at: opt_instant::<D>(
                "last_errored_alert_at",
                self.last_errored_alert_at,
            )?,
            error_announced: self.error_announced,
            last_recovery_alert_at: opt_instant::<D>(
                "last_recovery_alert_at",
                self.last_recovery_alert_at,
            )?,
            consecutive_failures: u32::try_from(self.consecutive_failures)
                .map_err(|e| corrupt("consecutive_failures", e))?,
            consecutive_misses: u32::try_from(self.consecutive_misses)
                .map_err(|e| corrupt("consecutive_misses", e))?,
            open_runs,
            last_run,
            check_in_seq: from_integer("check_in_seq", self.check_in_seq)?,
            event_seq: from_integer("event_seq", self.event_seq)?,
            version: from_integer("version", self.version)?,
        })?)
    }
}

// ---------------------------------------------------------------------------------------
// Check-ins
// ---------------------------------------------------------------------------------------

/// A check-in: `exit_status` is `None` for a success, the job's exit status for an error;
/// `details` its run (kind, run id, reported duration) as JSON, NULL for a plain
/// check-in; `body` the output kept.
#[derive(Debug, Serialize, Deserialize, sqlx::FromRow)]
#[allow(missing_docs)]
pub struct CheckInRecord<D: Dialect> {
    pub at: D::Time,
    pub exit_status: Option<String>,
    pub message: Option<String>,
    /// Absent in rows and deliveries stored before runs: a plain check-in.
    #[serde(default)]
    pub number: Option<i64>,
    #[serde(default)]
    pub details: Option<String>,
    #[serde(default)]
    pub body: Option<String>,
}

/// What a check-in says of its run, as its `details` column holds it.
#[derive(Debug, Serialize, Deserialize)]
struct StoredDetails {
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    duration_ms: Option<u64>,
}

/// Every column [`CheckInRecord`] reads, in the order the stores write them.
pub const CHECK_IN_COLUMNS: &str = "at, exit_status, message, number, details, body";

impl<D: Dialect> CheckInRecord<D> {
    /// The check-in's columns.
    pub fn of(c: &CheckIn) -> Self {
        let plain = c.kind == CheckInKind::End && c.run_id.is_none() && c.duration_ms.is_none();
        let details = (!plain).then(|| {
            let stored = StoredDetails {
                kind: c.kind.name(&c.outcome).to_owned(),
                rid: c.run_id.as_ref().map(|r| r.as_str().to_owned()),
                duration_ms: c.duration_ms,
            };
            serde_json::to_string(&stored).expect("plain data serializes")
        });
        CheckInRecord {
            at: D::time(c.at),
            exit_status: c.outcome.exit_status().map(str::to_owned),
            message: c.message.as_ref().map(|m| m.as_str().to_owned()),
            number: (c.number > 0).then(|| i64::try_from(c.number).unwrap_or(i64::MAX)),
            details,
            body: c.body.as_ref().map(|b| b.as_str().to_owned()),
        }
    }

    /// The check-in, re-parsed.
    pub fn into_check_in(self) -> Result<CheckIn, StorageError> {
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
        let mut check_in = CheckIn::new(D::instant("check-in time", self.at)?, outcome, message)
            .with_number(from_integer("check-in number", self.number.unwrap_or(0))?)
            .with_body(self.body.map(CheckInBody::restore));
        if let Some(text) = self.details {
            let stored: StoredDetails =
                serde_json::from_str(&text).map_err(|e| corrupt("check-in details", e))?;
            let kind = CheckInKind::parse(&stored.kind)
                .ok_or_else(|| corrupt("check-in kind", format!("unknown {:?}", stored.kind)))?;
            check_in = check_in
                .with_kind(kind)
                .with_run_id(run_id(stored.rid)?)
                .with_duration_ms(stored.duration_ms);
        }
        Ok(check_in)
    }
}

// ---------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------

/// An event, as the columns of `events` and as the JSON inside a delivery.
#[derive(Debug, Serialize, Deserialize, sqlx::FromRow)]
#[allow(missing_docs)]
pub struct EventRecord<D: Dialect> {
    pub id: String,
    pub kind: String,
    pub at: D::Time,
    pub case_id: String,
    pub token: String,
    pub name: String,
    pub notes: String,
    pub tags: D::Texts,
    pub alert_email: D::Texts,
    pub status: String,
    pub previous_status: String,
    pub checked_in_at: Option<D::Time>,
    pub check_in_at: Option<D::Time>,
    pub check_in_exit_status: Option<String>,
    pub check_in_message: Option<String>,
    /// Absent in deliveries stored before catch-up events existed: 0, as for other kinds.
    #[serde(default)]
    pub missed_periods: i64,
    /// Absent in deliveries stored before expected times were kept.
    #[serde(default)]
    pub expected_at: Option<D::Time>,
    #[serde(default)]
    pub expected_at_local: Option<String>,
    /// Absent in deliveries stored before reasons were kept.
    #[serde(default)]
    pub reason: Option<String>,
    /// The run concerned, as JSON ([`StoredRun`]).
    #[serde(default)]
    pub run: Option<String>,
}

/// Every column [`EventRecord`] reads, in the order [`bind_event!`](crate::bind_event)
/// binds them.
pub const EVENT_COLUMNS: &str = "id, kind, at, case_id, token, name, notes, tags, \
    alert_email, status, previous_status, checked_in_at, check_in_at, check_in_exit_status, \
    check_in_message, missed_periods, expected_at, expected_at_local, reason, run";

impl<D: Dialect> EventRecord<D> {
    /// The event's columns.
    pub fn of(e: &Event) -> Self {
        let check_in = e.check_in.as_ref().map(CheckInRecord::<D>::of);
        EventRecord {
            id: e.id.clone(),
            kind: e.kind.as_str().to_owned(),
            at: D::time(e.at),
            case_id: e.case_id.as_str().to_owned(),
            token: e.token.as_str().to_owned(),
            name: e.name.as_str().to_owned(),
            notes: e.notes.as_str().to_owned(),
            tags: D::texts(strings(e.tags.iter(), Tag::as_str)),
            alert_email: D::texts(strings(e.alert_email.iter(), EmailAddress::as_str)),
            status: e.status.as_str().to_owned(),
            previous_status: e.previous_status.as_str().to_owned(),
            checked_in_at: opt_time::<D>(e.checked_in_at),
            check_in_at: check_in.as_ref().map(|c| c.at),
            check_in_exit_status: check_in.as_ref().and_then(|c| c.exit_status.clone()),
            check_in_message: check_in.and_then(|c| c.message),
            // A count of periods; beyond a 64-bit integer is beyond any calendar.
            missed_periods: i64::try_from(e.missed_periods).unwrap_or(i64::MAX),
            expected_at: opt_time::<D>(e.expected_at),
            expected_at_local: e.expected_at_local.clone(),
            reason: e.reason.map(|r| r.as_str().to_owned()),
            run: e
                .run
                .as_ref()
                .map(|r| serde_json::to_string(&StoredRun::of(r)).expect("plain data serializes")),
        }
    }

    /// The event, re-parsed.
    pub fn into_event(self) -> Result<Event, StorageError> {
        let check_in = match self.check_in_at {
            None if self.check_in_exit_status.is_some() || self.check_in_message.is_some() => {
                return Err(corrupt("event check-in", "fields without an instant"));
            }
            None => None,
            Some(at) => Some(
                CheckInRecord::<D> {
                    at,
                    exit_status: self.check_in_exit_status,
                    message: self.check_in_message,
                    number: None,
                    details: None,
                    body: None,
                }
                .into_check_in()?,
            ),
        };
        Ok(Event {
            kind: EventKind::parse(&self.kind)
                .ok_or_else(|| corrupt("event kind", format!("unknown {:?}", self.kind)))?,
            at: D::instant("event time", self.at)?,
            case_id: case_id(&self.case_id)?,
            token: token(&self.token)?,
            name: SnitchName::parse_stored(&self.name).map_err(invalid("event name"))?,
            notes: Notes::parse(&self.notes).map_err(invalid("event notes"))?,
            tags: Tags::parse_stored(D::text_items(&self.tags)).map_err(invalid("event tags"))?,
            alert_email: AlertEmails::parse(D::text_items(&self.alert_email))
                .map_err(invalid("event alert emails"))?,
            status: status("event status", &self.status)?,
            previous_status: status("event previous status", &self.previous_status)?,
            checked_in_at: opt_instant::<D>("event checked_in_at", self.checked_in_at)?,
            check_in,
            missed_periods: from_integer("missed_periods", self.missed_periods)?,
            expected_at: opt_instant::<D>("event expected_at", self.expected_at)?,
            expected_at_local: self.expected_at_local,
            reason: self
                .reason
                .map(|r| {
                    AlertReason::parse(&r)
                        .ok_or_else(|| corrupt("event reason", format!("unknown {r:?}")))
                })
                .transpose()?,
            run: self
                .run
                .map(|text| {
                    serde_json::from_str::<StoredRun>(&text)
                        .map_err(|e| corrupt("event run", e))?
                        .into_run()
                })
                .transpose()?,
            id: self.id,
        })
    }
}

/// Binds an [`EventRecord`] in the order of [`EVENT_COLUMNS`]: `$query.$bind(value)` for
/// each.
#[macro_export]
macro_rules! bind_event {
    ($query:expr, $event:expr, $bind:ident) => {{
        let e = $event;
        $query
            .$bind(e.id)
            .$bind(e.kind)
            .$bind(e.at)
            .$bind(e.case_id)
            .$bind(e.token)
            .$bind(e.name)
            .$bind(e.notes)
            .$bind(e.tags)
            .$bind(e.alert_email)
            .$bind(e.status)
            .$bind(e.previous_status)
            .$bind(e.checked_in_at)
            .$bind(e.check_in_at)
            .$bind(e.check_in_exit_status)
            .$bind(e.check_in_message)
            .$bind(e.missed_periods)
            .$bind(e.expected_at)
            .$bind(e.expected_at_local)
            .$bind(e.reason)
            .$bind(e.run)
    }};
}

// ---------------------------------------------------------------------------------------
// Webhooks
// ---------------------------------------------------------------------------------------

/// Every column [`WebhookRow`] reads, in the order [`sql::insert_webhook`](crate::sql::insert_webhook)
/// writes them.
pub const WEBHOOK_COLUMNS: &str = "id, case_id, url, secret, created_at";

/// A webhook as stored.
#[derive(Debug, sqlx::FromRow)]
#[allow(missing_docs)]
pub struct WebhookRow<D: Dialect> {
    pub id: String,
    pub case_id: String,
    pub url: String,
    pub secret: Option<String>,
    pub created_at: D::Time,
}

impl<D: Dialect> WebhookRow<D> {
    /// The webhook, re-parsed.
    pub fn into_webhook(self) -> Result<Webhook, StorageError> {
        Ok(Webhook {
            id: self.id,
            case_id: case_id(&self.case_id)?,
            url: WebhookUrl::parse(&self.url).map_err(invalid("webhook url"))?,
            secret: secret(self.secret.as_deref())?,
            created_at: D::instant("webhook created_at", self.created_at)?,
        })
    }
}

fn secret(raw: Option<&str>) -> Result<Option<WebhookSecret>, StorageError> {
    raw.map(|s| WebhookSecret::parse(s).map_err(invalid("webhook secret")))
        .transpose()
}

// ---------------------------------------------------------------------------------------
// Channels
// ---------------------------------------------------------------------------------------

/// Every column [`ChannelRow`] reads, in the order [`sql::insert_channel`](crate::sql::insert_channel)
/// writes them.
pub const CHANNEL_COLUMNS: &str =
    "id, case_id, name, kind, settings, events, tags, key, created_at";

/// A channel as stored: settings as a JSON object of texts, events as their short names
/// joined by commas, tags as a JSON array.
#[derive(Debug, sqlx::FromRow)]
#[allow(missing_docs)]
pub struct ChannelRow<D: Dialect> {
    pub id: String,
    pub case_id: String,
    pub name: Option<String>,
    pub kind: String,
    pub settings: String,
    pub events: String,
    pub tags: String,
    pub key: String,
    pub created_at: D::Time,
}

/// A channel's columns as written, in the order of [`CHANNEL_COLUMNS`].
#[derive(Debug)]
#[allow(missing_docs)]
pub struct ChannelFields<D: Dialect> {
    pub id: String,
    pub case_id: String,
    pub name: Option<String>,
    pub kind: &'static str,
    pub settings: String,
    pub events: String,
    pub tags: String,
    pub key: String,
    pub created_at: D::Time,
}

impl<D: Dialect> ChannelFields<D> {
    /// The channel's columns.
    pub fn of(c: &ChannelConfig) -> Self {
        ChannelFields {
            id: c.id.clone(),
            case_id: c.case_id.as_str().to_owned(),
            name: c.name.clone(),
            kind: c.kind().as_str(),
            settings: settings_json(&c.settings),
            events: c.events.names().join(","),
            tags: serde_json::to_string(&strings(c.tags.iter(), Tag::as_str))
                .unwrap_or_else(|_| "[]".to_owned()),
            key: c.key.expose().to_owned(),
            created_at: D::time(c.created_at),
        }
    }
}

/// A channel's settings as stored: a JSON object of texts.
pub fn settings_json(settings: &ChannelSettings) -> String {
    let map: std::collections::BTreeMap<&str, &str> = settings.iter().collect();
    serde_json::to_string(&map).unwrap_or_else(|_| "{}".to_owned())
}

/// Settings of `kind` as stored, re-parsed.
fn parse_settings(kind: &str, raw: &str) -> Result<ChannelSettings, StorageError> {
    let kind = ChannelKind::parse(kind)
        .ok_or_else(|| corrupt("channel kind", format!("unknown {kind:?}")))?;
    let map: std::collections::BTreeMap<String, String> =
        serde_json::from_str(raw).map_err(|e| corrupt("channel settings", e))?;
    ChannelSettings::parse(kind, map.iter().map(|(k, v)| (k.as_str(), v.as_str()))).map_err(|v| {
        let first = v
            .iter()
            .next()
            .map(|p| format!("{} {}", p.attribute, p.message));
        corrupt("channel settings", first.unwrap_or_default())
    })
}

fn channel_key(raw: &str) -> Result<ChannelKey, StorageError> {
    ChannelKey::parse(raw).map_err(invalid("channel key"))
}

impl<D: Dialect> ChannelRow<D> {
    /// The channel, re-parsed.
    pub fn into_channel(self) -> Result<ChannelConfig, StorageError> {
        let events: Vec<&str> = self.events.split(',').collect();
        let tags: Vec<String> =
            serde_json::from_str(&self.tags).map_err(|e| corrupt("channel tags", e))?;
        Ok(ChannelConfig {
            id: self.id,
            case_id: case_id(&self.case_id)?,
            name: self.name,
            settings: parse_settings(&self.kind, &self.settings)?,
            events: EventFilter::parse(&events).map_err(invalid("channel events"))?,
            tags: Tags::parse_stored(&tags).map_err(invalid("channel tags"))?,
            key: channel_key(&self.key)?,
            created_at: D::instant("channel created_at", self.created_at)?,
        })
    }
}

/// Binds a [`ChannelFields`] in the order of [`CHANNEL_COLUMNS`].
#[macro_export]
macro_rules! bind_channel {
    ($query:expr, $channel:expr) => {{
        let c = $channel;
        $query
            .bind(c.id)
            .bind(c.case_id)
            .bind(c.name)
            .bind(c.kind)
            .bind(c.settings)
            .bind(c.events)
            .bind(c.tags)
            .bind(c.key)
            .bind(c.created_at)
    }};
}

// ---------------------------------------------------------------------------------------
// Deliveries
// ---------------------------------------------------------------------------------------

const CHANNEL_WEBHOOK: &str = "webhook";
const CHANNEL_EMAIL: &str = "email";

/// One attempt at a delivery, as an element of the `attempts` JSON array.
#[derive(Debug, Serialize, Deserialize)]
pub struct AttemptRecord<D: Dialect> {
    at: D::Time,
    ok: bool,
    detail: String,
    duration_ms: u64,
}

impl<D: Dialect> AttemptRecord<D> {
    /// The attempt as stored.
    pub fn of(a: &Attempt) -> Self {
        AttemptRecord {
            at: D::time(a.at),
            ok: a.ok,
            detail: a.detail.clone(),
            duration_ms: a.duration_ms,
        }
    }

    fn into_attempt(self) -> Result<Attempt, StorageError> {
        Ok(Attempt {
            at: D::instant("attempt time", self.at)?,
            ok: self.ok,
            detail: self.detail,
            duration_ms: self.duration_ms,
        })
    }
}

/// A stored delivery state.
pub fn parse_delivery_state(raw: &str) -> Result<DeliveryState, StorageError> {
    [
        DeliveryState::Pending,
        DeliveryState::Delivered,
        DeliveryState::Failed,
    ]
    .into_iter()
    .find(|s| s.as_str() == raw)
    .ok_or_else(|| corrupt("delivery state", format!("unknown {raw:?}")))
}

/// What an attempt's result leaves of its delivery: its state and when it may next be
/// tried.
pub fn after_attempt<D: Dialect>(
    result: snitch_core::AttemptResult,
) -> (DeliveryState, Option<D::Time>) {
    use snitch_core::AttemptResult;
    match result {
        AttemptResult::Delivered => (DeliveryState::Delivered, None),
        AttemptResult::GaveUp => (DeliveryState::Failed, None),
        AttemptResult::RetryAt(at) => (DeliveryState::Pending, Some(D::time(at))),
    }
}

/// Every column [`DeliveryFields`] writes, in the order [`bind_delivery!`](crate::bind_delivery)
/// binds them.
pub const DELIVERY_FIELDS: &str = "id, event_id, event, case_id, destination, channel, \
    hook_id, url, secret, recipients, state, next_attempt_at, attempts, settings";

/// A delivery's columns as written: its channel flattened into nullable columns (as
/// JSON, one row of a set-based save: the keys are the column names).
#[derive(Debug, Serialize)]
#[serde(bound = "")]
#[allow(missing_docs)]
pub struct DeliveryFields<D: Dialect> {
    pub id: String,
    pub event_id: String,
    pub event: Json<EventRecord<D>>,
    /// The case of the event and the webhook's destination: the keys of fair claims.
    pub case_id: String,
    pub destination: Option<String>,
    pub channel: &'static str,
    pub hook_id: Option<String>,
    pub url: Option<String>,
    pub secret: Option<String>,
    pub recipients: Option<D::Texts>,
    pub state: &'static str,
    pub next_attempt_at: Option<D::Time>,
    pub attempts: Json<Vec<AttemptRecord<D>>>,
    /// A native channel's settings ([`settings_json`]); its key goes in `secret`.
    pub settings: Option<String>,
}

impl<D: Dialect> DeliveryFields<D> {
    /// The delivery's columns.
    pub fn of(d: &Delivery) -> Self {
        let mut settings = None;
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
            Channel::Email { to } => (
                None,
                None,
                None,
                Some(D::texts(strings(to, EmailAddress::as_str))),
            ),
            Channel::Native {
                channel_id,
                settings: s,
                key,
            } => {
                settings = Some(settings_json(s));
                (
                    Some(channel_id.clone()),
                    None,
                    Some(key.expose().to_owned()),
                    None,
                )
            }
        };
        DeliveryFields {
            id: d.id.clone(),
            event_id: d.event.id.clone(),
            event: Json(EventRecord::of(&d.event)),
            case_id: d.case_id().as_str().to_owned(),
            destination: d.destination(),
            channel: d.channel.kind(),
            hook_id,
            url,
            secret,
            recipients,
            state: d.state.as_str(),
            next_attempt_at: opt_time::<D>(d.next_attempt_at),
            attempts: Json(d.attempts.iter().map(AttemptRecord::of).collect()),
            settings,
        }
    }
}

/// Binds a [`DeliveryFields`] in the order of [`DELIVERY_FIELDS`]: `$query.$bind(value)`
/// for each.
#[macro_export]
macro_rules! bind_delivery {
    ($query:expr, $delivery:expr, $bind:ident) => {{
        let d = $delivery;
        $query
            .$bind(d.id)
            .$bind(d.event_id)
            .$bind(d.event)
            .$bind(d.case_id)
            .$bind(d.destination)
            .$bind(d.channel)
            .$bind(d.hook_id)
            .$bind(d.url)
            .$bind(d.secret)
            .$bind(d.recipients)
            .$bind(d.state)
            .$bind(d.next_attempt_at)
            .$bind(d.attempts)
            .$bind(d.settings)
    }};
}

/// Every column [`DeliveryRow`] reads.
pub const DELIVERY_COLUMNS: &str = "id, event, channel, hook_id, url, secret, recipients, \
    state, next_attempt_at, attempts, settings";

/// A delivery as stored.
#[derive(Debug, sqlx::FromRow)]
#[allow(missing_docs)]
pub struct DeliveryRow<D: Dialect> {
    pub id: String,
    pub event: Json<EventRecord<D>>,
    pub channel: String,
    pub hook_id: Option<String>,
    pub url: Option<String>,
    pub secret: Option<String>,
    pub recipients: Option<D::Texts>,
    pub state: String,
    pub next_attempt_at: Option<D::Time>,
    pub attempts: Json<Vec<AttemptRecord<D>>>,
    pub settings: Option<String>,
}

impl<D: Dialect> DeliveryRow<D> {
    /// The delivery, re-parsed.
    pub fn into_delivery(self) -> Result<Delivery, StorageError> {
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
                to: emails("delivery recipients", D::text_items(&to))?,
            },
            (kind, Some(channel_id), None, None) if self.settings.is_some() => Channel::Native {
                channel_id,
                settings: parse_settings(kind, self.settings.as_deref().unwrap_or_default())?,
                key: channel_key(self.secret.as_deref().unwrap_or_default())?,
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
            next_attempt_at: opt_instant::<D>("next_attempt_at", self.next_attempt_at)?,
            attempts: self
                .attempts
                .0
                .into_iter()
                .map(AttemptRecord::into_attempt)
                .collect::<Result<_, _>>()?,
        })
    }
}

// ---------------------------------------------------------------------------------------
// API keys
// ---------------------------------------------------------------------------------------

/// Every column [`ApiKeyRow`] reads, in the order [`sql::insert_api_key`](crate::sql::insert_api_key)
/// writes them.
pub const API_KEY_COLUMNS: &str =
    "id, case_id, digest, prefix, label, created_at, last_used_at, revoked";

/// An API key as stored.
#[derive(Debug, sqlx::FromRow)]
#[allow(missing_docs)]
pub struct ApiKeyRow<D: Dialect> {
    pub id: String,
    pub case_id: String,
    pub digest: String,
    pub prefix: String,
    pub label: String,
    pub created_at: D::Time,
    pub last_used_at: Option<D::Time>,
    pub revoked: bool,
}

impl<D: Dialect> ApiKeyRow<D> {
    /// The key's record, re-parsed.
    pub fn into_record(self) -> Result<ApiKeyRecord, StorageError> {
        Ok(ApiKeyRecord {
            id: self.id,
            case_id: case_id(&self.case_id)?,
            digest: self.digest,
            prefix: self.prefix,
            label: self.label,
            created_at: D::instant("key created_at", self.created_at)?,
            last_used_at: opt_instant::<D>("key last_used_at", self.last_used_at)?,
            revoked: self.revoked,
        })
    }
}

#[cfg(test)]
mod parsed_schedule_tests {
    use super::*;

    fn text(expression: &str, timezone: &str) -> String {
        text_with_grace(expression, timezone, 5)
    }

    fn text_with_grace(expression: &str, timezone: &str, grace_minutes: i64) -> String {
        let schedule = CronSchedule::parse(expression, timezone).expect("valid");
        let runs = ExpectedRuns::with_spans(
            schedule,
            chrono::Duration::minutes(grace_minutes),
            chrono::Duration::zero(),
        )
        .expect("valid spans");
        schedule_text(&runs)
    }

    #[test]
    fn a_kept_parse_is_the_parse_of_its_text() {
        let kept = ParsedSchedules::new(8);
        let riga = text("30 2 * * *", "Europe/Riga");
        let first = kept.expected_runs(&riga).expect("parses");
        let again = kept.expected_runs(&riga).expect("kept");
        assert_eq!(first, again);
        assert_eq!(again, parse_schedule_text(&riga).expect("parses"));
        assert_eq!(again.schedule().timezone(), "Europe/Riga");
        assert_eq!(again.grace(), chrono::Duration::minutes(5));
        // Another text is another schedule, not the kept one.
        let utc = kept
            .expected_runs(&text("30 2 * * *", "UTC"))
            .expect("parses");
        assert_eq!(utc.schedule().timezone(), "UTC");
        // The same expression with another grace is another text: its own spans.
        let longer = kept
            .expected_runs(&text_with_grace("30 2 * * *", "UTC", 30))
            .expect("parses");
        assert_eq!(longer.grace(), chrono::Duration::minutes(30));
        assert_eq!(utc.grace(), chrono::Duration::minutes(5));
        assert_eq!(kept.lock().len(), 3);
    }

    #[test]
    fn the_kept_parses_never_exceed_their_bound() {
        let kept = ParsedSchedules::new(3);
        for minute in 0..10 {
            let runs = kept
                .expected_runs(&text(&format!("{minute} * * * *"), "UTC"))
                .expect("parses");
            assert_eq!(runs.schedule().expression(), format!("{minute} * * * *"));
            let held = kept.lock().len();
            assert!((1..=3).contains(&held), "{held} kept");
        }
    }

    #[test]
    fn a_text_that_does_not_parse_is_corrupt_and_not_kept() {
        let kept = ParsedSchedules::new(8);
        let bad = r#"{"expression":"61 * * * *","timezone":"UTC","grace_ms":60000,"early_ms":0}"#;
        for text in [bad, "not json", "\0"] {
            assert!(matches!(
                kept.expected_runs(text),
                Err(StorageError::Corrupt(_))
            ));
        }
        assert_eq!(kept.lock().len(), 0);
    }
}
