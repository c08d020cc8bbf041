//! Rows as SQLite keeps them, and their mapping to and from domain values.
//!
//! Instants are INTEGER milliseconds since the Unix epoch (the service hands whole
//! milliseconds, so nothing is lost, and integers compare and index exactly); lists are
//! JSON arrays in TEXT. Reading re-parses every value with its own `parse`, so a row that
//! no longer holds a valid value is reported as [`StorageError::Corrupt`] instead of being
//! trusted. The JSON shape is this module's; the core knows no JSON.

use std::fmt::Display;

use chrono::DateTime;
use serde::{Deserialize, Serialize};
use snitch_core::calendar::Interval;
use snitch_core::{
    AlertEmails, AlertType, ApiKeyRecord, Attempt, Case, CaseId, Channel, CheckIn, CheckInMessage,
    Delivery, DeliveryState, EmailAddress, Event, EventKind, Notes, Outcome, Pause, PauseUntil,
    Plan, Snitch, SnitchName, SnitchRecord, Status, StorageError, Tag, Tags, Timestamp, Token,
    Validation, Webhook, WebhookSecret, WebhookUrl,
};
use sqlx::types::Json;

pub(crate) fn corrupt(what: &str, problem: impl Display) -> StorageError {
    StorageError::Corrupt(format!("{what}: {problem}"))
}

/// Turns the problem a domain `parse` found in a stored value into a [`StorageError`].
fn invalid(what: &str) -> impl Fn(Validation) -> StorageError + '_ {
    move |v| corrupt(what, format!("{} {}", v.attribute, v.message))
}

/// An instant as stored: milliseconds since the epoch.
pub(crate) fn ms(t: Timestamp) -> i64 {
    t.timestamp_millis()
}

pub(crate) fn opt_ms(t: Option<Timestamp>) -> Option<i64> {
    t.map(ms)
}

/// A stored instant.
pub(crate) fn instant(what: &str, ms: i64) -> Result<Timestamp, StorageError> {
    DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| corrupt(what, format!("{ms} ms is out of range")))
}

fn opt_instant(what: &str, ms: Option<i64>) -> Result<Option<Timestamp>, StorageError> {
    ms.map(|ms| instant(what, ms)).transpose()
}

/// A `u64` counter as an INTEGER; counters never get near `i64::MAX`, so one that does is
/// refused rather than wrapped.
pub(crate) fn to_integer(what: &str, n: u64) -> Result<i64, StorageError> {
    i64::try_from(n)
        .map_err(|_| StorageError::Backend(format!("{what} {n} exceeds an INTEGER").into()))
}

fn from_integer(what: &str, n: i64) -> Result<u64, StorageError> {
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
    members: Json<Vec<String>>,
    max_snitches: i64,
    error_notices: bool,
    on_hold: bool,
}

impl CaseRow {
    pub(crate) fn into_case(self) -> Result<Case, StorageError> {
        Ok(Case {
            id: case_id(&self.id)?,
            members: emails("case members", &self.members.0)?,
            plan: Plan {
                max_snitches: u32::try_from(self.max_snitches)
                    .map_err(|e| corrupt("max_snitches", e))?,
                error_notices: self.error_notices,
            },
            on_hold: self.on_hold,
        })
    }
}

pub(crate) fn members(case: &Case) -> Json<Vec<String>> {
    Json(strings(&case.members, EmailAddress::as_str))
}

// ---------------------------------------------------------------------------------------
// Snitches
// ---------------------------------------------------------------------------------------

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

/// The values of [`SNITCH_FIELDS`] for one snitch, ready to bind.
#[derive(Debug)]
pub(crate) struct SnitchFields {
    name: String,
    tags: Json<Vec<String>>,
    notes: String,
    interval: &'static str,
    alert_type: &'static str,
    alert_email: Json<Vec<String>>,
    status: &'static str,
    checked_in_at: Option<i64>,
    last_check_in_at: Option<i64>,
    anchor_at: Option<i64>,
    deadline_at: Option<i64>,
    pause_until_kind: Option<&'static str>,
    pause_until_at: Option<i64>,
    pause_resume_status: Option<&'static str>,
    pause_checked_in: Option<bool>,
    smart_offsets_ms: Json<Vec<i64>>,
    last_errored_alert_at: Option<i64>,
    error_announced: bool,
    last_recovery_alert_at: Option<i64>,
    event_seq: i64,
    version: i64,
    wake_at: Option<i64>,
}

type SqliteQuery<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>;

impl SnitchFields {
    pub(crate) fn of(s: &Snitch) -> Result<Self, StorageError> {
        let state = s.state();
        let (until_kind, until_at) = match state.pause().map(|p| p.until) {
            None => (None, None),
            Some(PauseUntil::Healthy) => (Some(UNTIL_HEALTHY), None),
            Some(PauseUntil::Unpaused) => (Some(UNTIL_UNPAUSED), None),
            Some(PauseUntil::At(t)) => (Some(UNTIL_AT), Some(ms(t))),
        };
        Ok(SnitchFields {
            name: s.name().as_str().to_owned(),
            tags: Json(strings(s.tags().iter(), Tag::as_str)),
            notes: s.notes().as_str().to_owned(),
            interval: s.interval().as_str(),
            alert_type: s.alert_type().as_str(),
            alert_email: Json(strings(s.alert_email().iter(), EmailAddress::as_str)),
            status: state.status().as_str(),
            checked_in_at: opt_ms(state.checked_in_at()),
            last_check_in_at: opt_ms(state.last_check_in_at()),
            anchor_at: opt_ms(state.anchor_at()),
            deadline_at: opt_ms(state.deadline_at()),
            pause_until_kind: until_kind,
            pause_until_at: until_at,
            pause_resume_status: state.pause().map(|p| p.resume_status.as_str()),
            pause_checked_in: state.pause().map(|p| p.checked_in_while_paused),
            smart_offsets_ms: Json(state.smart_offsets_ms().to_vec()),
            last_errored_alert_at: opt_ms(state.last_errored_alert_at()),
            error_announced: state.error_announced(),
            last_recovery_alert_at: opt_ms(state.last_recovery_alert_at()),
            event_seq: to_integer("event_seq", state.event_seq())?,
            version: to_integer("version", s.version())?,
            wake_at: opt_ms(s.wake_at()),
        })
    }

    /// Binds the values in the order of [`SNITCH_FIELDS`].
    pub(crate) fn bind(self, q: SqliteQuery<'_>) -> SqliteQuery<'_> {
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

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SnitchRow {
    token: String,
    case_id: String,
    created_at: i64,
    name: String,
    tags: Json<Vec<String>>,
    notes: String,
    interval: String,
    alert_type: String,
    alert_email: Json<Vec<String>>,
    status: String,
    checked_in_at: Option<i64>,
    last_check_in_at: Option<i64>,
    anchor_at: Option<i64>,
    deadline_at: Option<i64>,
    pause_until_kind: Option<String>,
    pause_until_at: Option<i64>,
    pause_resume_status: Option<String>,
    pause_checked_in: Option<bool>,
    smart_offsets_ms: Json<Vec<i64>>,
    last_errored_alert_at: Option<i64>,
    error_announced: bool,
    last_recovery_alert_at: Option<i64>,
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
                    (UNTIL_AT, Some(t)) => PauseUntil::At(instant("pause until", t)?),
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
            tags: Tags::parse_stored(&self.tags.0).map_err(invalid("tags"))?,
            notes: Notes::parse(&self.notes).map_err(invalid("notes"))?,
            interval: self
                .interval
                .parse::<Interval>()
                .map_err(|e| corrupt("interval", e))?,
            alert_type: AlertType::parse(&self.alert_type).map_err(invalid("alert type"))?,
            alert_email: AlertEmails::parse(&self.alert_email.0)
                .map_err(invalid("alert emails"))?,
            created_at: instant("created_at", self.created_at)?,
            status: status("status", &self.status)?,
            checked_in_at: opt_instant("checked_in_at", self.checked_in_at)?,
            last_check_in_at: opt_instant("last_check_in_at", self.last_check_in_at)?,
            anchor_at: opt_instant("anchor_at", self.anchor_at)?,
            deadline_at: opt_instant("deadline_at", self.deadline_at)?,
            pause,
            smart_offsets_ms: self.smart_offsets_ms.0,
            last_errored_alert_at: opt_instant(
                "last_errored_alert_at",
                self.last_errored_alert_at,
            )?,
            error_announced: self.error_announced,
            last_recovery_alert_at: opt_instant(
                "last_recovery_alert_at",
                self.last_recovery_alert_at,
            )?,
            event_seq: from_integer("event_seq", self.event_seq)?,
            version: from_integer("version", self.version)?,
        })?)
    }
}

// ---------------------------------------------------------------------------------------
// Check-ins
// ---------------------------------------------------------------------------------------

/// A check-in: `exit_status` is `None` for a success, the job's exit status for an error.
#[derive(Debug, Serialize, Deserialize, sqlx::FromRow)]
pub(crate) struct CheckInRecord {
    pub(crate) at: i64,
    pub(crate) exit_status: Option<String>,
    pub(crate) message: Option<String>,
}

impl CheckInRecord {
    pub(crate) fn of(c: &CheckIn) -> Self {
        CheckInRecord {
            at: ms(c.at),
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
        Ok(CheckIn::new(
            instant("check-in time", self.at)?,
            outcome,
            message,
        ))
    }
}

// ---------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------

/// An event, as the columns of `events` and as the JSON inside a delivery.
#[derive(Debug, Serialize, Deserialize, sqlx::FromRow)]
pub(crate) struct EventRecord {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) at: i64,
    pub(crate) case_id: String,
    pub(crate) token: String,
    pub(crate) name: String,
    pub(crate) notes: String,
    pub(crate) tags: Json<Vec<String>>,
    pub(crate) alert_email: Json<Vec<String>>,
    pub(crate) status: String,
    pub(crate) previous_status: String,
    pub(crate) checked_in_at: Option<i64>,
    pub(crate) check_in_at: Option<i64>,
    pub(crate) check_in_exit_status: Option<String>,
    pub(crate) check_in_message: Option<String>,
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
            at: ms(e.at),
            case_id: e.case_id.as_str().to_owned(),
            token: e.token.as_str().to_owned(),
            name: e.name.as_str().to_owned(),
            notes: e.notes.as_str().to_owned(),
            tags: Json(strings(e.tags.iter(), Tag::as_str)),
            alert_email: Json(strings(e.alert_email.iter(), EmailAddress::as_str)),
            status: e.status.as_str().to_owned(),
            previous_status: e.previous_status.as_str().to_owned(),
            checked_in_at: opt_ms(e.checked_in_at),
            check_in_at: check_in.as_ref().map(|c| c.at),
            check_in_exit_status: check_in.as_ref().and_then(|c| c.exit_status.clone()),
            check_in_message: check_in.and_then(|c| c.message),
            // A count of periods; beyond an INTEGER is beyond any calendar.
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
            at: instant("event time", self.at)?,
            case_id: case_id(&self.case_id)?,
            token: token(&self.token)?,
            name: SnitchName::parse_stored(&self.name).map_err(invalid("event name"))?,
            notes: Notes::parse(&self.notes).map_err(invalid("event notes"))?,
            tags: Tags::parse_stored(&self.tags.0).map_err(invalid("event tags"))?,
            alert_email: AlertEmails::parse(&self.alert_email.0)
                .map_err(invalid("event alert emails"))?,
            status: status("event status", &self.status)?,
            previous_status: status("event previous status", &self.previous_status)?,
            checked_in_at: opt_instant("event checked_in_at", self.checked_in_at)?,
            check_in,
            missed_periods: from_integer("missed_periods", self.missed_periods)?,
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
    created_at: i64,
}

impl WebhookRow {
    pub(crate) fn into_webhook(self) -> Result<Webhook, StorageError> {
        Ok(Webhook {
            id: self.id,
            case_id: case_id(&self.case_id)?,
            url: WebhookUrl::parse(&self.url).map_err(invalid("webhook url"))?,
            secret: secret(self.secret.as_deref())?,
            created_at: instant("webhook created_at", self.created_at)?,
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
    at: i64,
    ok: bool,
    detail: String,
    duration_ms: u64,
}

impl AttemptRecord {
    pub(crate) fn of(a: &Attempt) -> Self {
        AttemptRecord {
            at: ms(a.at),
            ok: a.ok,
            detail: a.detail.clone(),
            duration_ms: a.duration_ms,
        }
    }

    fn into_attempt(self) -> Result<Attempt, StorageError> {
        Ok(Attempt {
            at: instant("attempt time", self.at)?,
            ok: self.ok,
            detail: self.detail,
            duration_ms: self.duration_ms,
        })
    }
}

fn parse_delivery_state(raw: &str) -> Result<DeliveryState, StorageError> {
    [
        DeliveryState::Pending,
        DeliveryState::Delivered,
        DeliveryState::Failed,
    ]
    .into_iter()
    .find(|s| s.as_str() == raw)
    .ok_or_else(|| corrupt("delivery state", format!("unknown {raw:?}")))
}

/// A delivery's columns as written: its channel flattened into nullable columns.
#[derive(Debug)]
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
    pub(crate) recipients: Option<Json<Vec<String>>>,
    pub(crate) state: &'static str,
    pub(crate) next_attempt_at: Option<i64>,
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
            Channel::Email { to } => (
                None,
                None,
                None,
                Some(Json(strings(to, EmailAddress::as_str))),
            ),
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
            next_attempt_at: opt_ms(d.next_attempt_at),
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
    recipients: Option<Json<Vec<String>>>,
    state: String,
    next_attempt_at: Option<i64>,
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
                to: emails("delivery recipients", &to.0)?,
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
            next_attempt_at: opt_instant("next_attempt_at", self.next_attempt_at)?,
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

#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ApiKeyRow {
    id: String,
    case_id: String,
    digest: String,
    prefix: String,
    label: String,
    created_at: i64,
    last_used_at: Option<i64>,
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
            created_at: instant("key created_at", self.created_at)?,
            last_used_at: opt_instant("key last_used_at", self.last_used_at)?,
            revoked: self.revoked,
        })
    }
}
