//! The snitch record, its check-ins and the events its transitions emit.

use crate::cadence::Cadence;
use crate::calendar::{Interval, Timestamp};
use crate::email::EmailKeywords;
use crate::runs::{AlertReason, CheckInBody, CheckInKind, OpenRun, Run, RunId, OPEN_RUNS_MAX};
use crate::types::{
    AlertEmails, AlertType, CaseId, CheckInMessage, Notes, Outcome, SnitchName, Status, Tags, Token,
};

/// How many check-in offsets smart alerts learn from (docs/rules.md#smart-alerts).
pub const SMART_OFFSETS_KEPT: usize = 10;
/// How many check-ins a store keeps per snitch (docs/rules.md#check-ins).
pub const CHECK_INS_KEPT: usize = 100;
/// How many events a store keeps per snitch, the newest (docs/rules.md#check-ins).
pub const EVENTS_KEPT: usize = 100;

/// A monitor of one job: what the user configured and where the state machine stands.
///
/// Read-only outside this crate: its fields are private and read through accessors, so a
/// snitch changes only through [`crate::machine`] and [`crate::SnitchService`], which keep
/// its invariants (see [`SnitchRecord`]). The service creates snitches, and a store
/// rebuilds one it reads back with [`Snitch::restore`], which checks the invariants. The
/// configured fields with no rule between them (name, tags, notes, alert e-mails) have
/// setters, for code that builds a snitch with [`Snitch::new`] before inserting it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snitch {
    /// The secret identifier, in API paths and the check-in URL.
    pub(crate) token: Token,
    /// The case (account) that owns the snitch.
    pub(crate) case_id: CaseId,
    /// What the user calls it.
    pub(crate) name: SnitchName,
    /// The user's tags, in the order given, without duplicates.
    pub(crate) tags: Tags,
    /// Free text of the user.
    pub(crate) notes: Notes,
    /// When the job is expected to check in: an interval or a cron schedule.
    pub(crate) cadence: Cadence,
    /// How the deadline is set; `smart` only with an interval of an hour or longer.
    pub(crate) alert_type: AlertType,
    /// Who is e-mailed about it (the case's members when empty).
    pub(crate) alert_email: AlertEmails,
    /// How many failed runs in a row are tolerated before the errored alert
    /// (docs/rules.md#tolerances).
    pub(crate) failure_tolerance: u16,
    /// How many missed runs in a row are tolerated before the missing alert.
    pub(crate) missed_tolerance: u16,
    /// How long a run may stay open, in seconds; `None`: the cadence's default
    /// (docs/rules.md#runs).
    pub(crate) max_runtime_seconds: Option<u32>,
    /// The words that decide what a check-in e-mail means; empty: every e-mail is a
    /// success ([`crate::email`]).
    pub(crate) email_keywords: EmailKeywords,
    /// When it was created.
    pub(crate) created_at: Timestamp,
    /// Where the state machine stands.
    pub(crate) state: SnitchState,
    /// Bumped on every saved change; stores refuse a save made from a stale read.
    pub(crate) version: u64,
}

/// Where a snitch stands in the state machine (docs/rules.md#state-machine).
///
/// Read-only outside this crate, like [`Snitch`]: read through accessors, built outside
/// only through [`Snitch::restore`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnitchState {
    /// The status the API shows.
    pub(crate) status: Status,
    /// The last successful check-in (error check-ins do not move it).
    pub(crate) checked_in_at: Option<Timestamp>,
    /// The last check-in of any outcome.
    pub(crate) last_check_in_at: Option<Timestamp>,
    /// The instant deadlines count from: the last check-in, or the last resume from a
    /// pause, whichever is later. `None` while pending.
    pub(crate) anchor_at: Option<Timestamp>,
    /// When the snitch is declared missing if nothing arrives. `None` while pending or
    /// paused. Always inside (or at the end of) the period it is due in.
    pub(crate) deadline_at: Option<Timestamp>,
    /// The pause in force: `Some` exactly while the status is `paused`.
    pub(crate) pause: Option<Pause>,
    /// Offsets in milliseconds of the recent check-ins from the start of their periods,
    /// oldest first, at most [`SMART_OFFSETS_KEPT`].
    pub(crate) smart_offsets_ms: SmartOffsets,
    /// When the last `snitch.errored` was emitted: at most one errored alert per period
    /// (the period of the current interval, so an interval change cannot double it).
    pub(crate) last_errored_alert_at: Option<Timestamp>,
    /// Whether the error the snitch is in (while `errored`) was announced: a recovery is
    /// announced only if its error was (docs/rules.md#alert-economy).
    pub(crate) error_announced: bool,
    /// When the last `snitch.reporting` after an error was emitted: at most one per period.
    pub(crate) last_recovery_alert_at: Option<Timestamp>,
    /// How many events this snitch has emitted; event ids are built from it.
    pub(crate) event_seq: u64,
    /// Failed runs in a row since the last success (docs/rules.md#tolerances).
    pub(crate) consecutive_failures: u32,
    /// Missed runs in a row since the last check-in.
    pub(crate) consecutive_misses: u32,
    /// The runs started and not ended, oldest first, at most [`OPEN_RUNS_MAX`].
    pub(crate) open_runs: Vec<OpenRun>,
    /// The last run that ended or timed out. Boxed: most snitches report no runs, and a
    /// snitch is copied at every step.
    pub(crate) last_run: Option<Box<Run>>,
    /// How many check-ins this snitch has recorded; a check-in's number is built from it.
    pub(crate) check_in_seq: u64,
}

impl SnitchState {
    /// The status the API shows.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The last successful check-in (error check-ins do not move it).
    pub fn checked_in_at(&self) -> Option<Timestamp> {
        self.checked_in_at
    }

    /// The last check-in of any outcome.
    pub fn last_check_in_at(&self) -> Option<Timestamp> {
        self.last_check_in_at
    }

    /// The instant deadlines count from: the last check-in, or the last resume from a
    /// pause, whichever is later. `None` while pending.
    pub fn anchor_at(&self) -> Option<Timestamp> {
        self.anchor_at
    }

    /// When the snitch is declared missing if nothing arrives. `None` while pending or
    /// paused.
    pub fn deadline_at(&self) -> Option<Timestamp> {
        self.deadline_at
    }

    /// The pause in force: `Some` exactly while the status is `paused`.
    pub fn pause(&self) -> Option<&Pause> {
        self.pause.as_ref()
    }

    /// Offsets in milliseconds of the recent check-ins from the start of their periods,
    /// oldest first, at most [`SMART_OFFSETS_KEPT`].
    pub fn smart_offsets_ms(&self) -> &[i64] {
        self.smart_offsets_ms.as_slice()
    }

    /// When the last `snitch.errored` was emitted.
    pub fn last_errored_alert_at(&self) -> Option<Timestamp> {
        self.last_errored_alert_at
    }

    /// Whether the error the snitch is in (while `errored`) was announced.
    pub fn error_announced(&self) -> bool {
        self.error_announced
    }

    /// When the last `snitch.reporting` after an error was emitted.
    pub fn last_recovery_alert_at(&self) -> Option<Timestamp> {
        self.last_recovery_alert_at
    }

    /// How many events this snitch has emitted; event ids are built from it.
    pub fn event_seq(&self) -> u64 {
        self.event_seq
    }

    /// Failed runs in a row since the last success.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// Missed runs in a row since the last check-in.
    pub fn consecutive_misses(&self) -> u32 {
        self.consecutive_misses
    }

    /// The runs started and not ended, oldest first.
    pub fn open_runs(&self) -> &[OpenRun] {
        &self.open_runs
    }

    /// The last run that ended or timed out.
    pub fn last_run(&self) -> Option<&Run> {
        self.last_run.as_deref()
    }

    /// Whether a run is open (started, not ended, not timed out).
    pub fn running(&self) -> bool {
        !self.open_runs.is_empty()
    }

    /// How many check-ins this snitch has recorded.
    pub fn check_in_seq(&self) -> u64 {
        self.check_in_seq
    }
}

/// The learned offsets of a snitch (milliseconds from the start of their periods),
/// oldest first, at most [`SMART_OFFSETS_KEPT`]: inline in the snitch, not on the heap, so
/// copying a snitch's state (every check-in does) neither allocates nor reads another
/// cache line.
#[derive(Clone, Copy, Default)]
pub(crate) struct SmartOffsets {
    values: [i64; SMART_OFFSETS_KEPT],
    len: usize,
}

impl SmartOffsets {
    /// The newest [`SMART_OFFSETS_KEPT`] of `offsets` (oldest first).
    pub(crate) fn from_slice(offsets: &[i64]) -> Self {
        let newest = &offsets[offsets.len().saturating_sub(SMART_OFFSETS_KEPT)..];
        let mut kept = SmartOffsets::default();
        kept.values[..newest.len()].copy_from_slice(newest);
        kept.len = newest.len();
        kept
    }

    pub(crate) fn as_slice(&self) -> &[i64] {
        &self.values[..self.len]
    }

    /// Adds the newest offset; when full, the oldest goes.
    pub(crate) fn push(&mut self, offset: i64) {
        if self.len == SMART_OFFSETS_KEPT {
            self.values.copy_within(1.., 0);
            self.values[SMART_OFFSETS_KEPT - 1] = offset;
        } else {
            self.values[self.len] = offset;
            self.len += 1;
        }
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }
}

impl std::ops::Deref for SmartOffsets {
    type Target = [i64];
    fn deref(&self) -> &[i64] {
        self.as_slice()
    }
}

/// Equal when the offsets kept are: slots past `len` are not compared.
impl PartialEq for SmartOffsets {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SmartOffsets {}

impl std::fmt::Debug for SmartOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// A pause in force.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pause {
    /// When it ends.
    pub until: PauseUntil,
    /// The status to return to on unpause when no successful check-in came meanwhile.
    pub resume_status: Status,
    /// Whether a successful check-in arrived while paused.
    pub checked_in_while_paused: bool,
}

/// When a pause ends (docs/rules.md#pause).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseUntil {
    /// At the next successful check-in.
    Healthy,
    /// Only by an explicit unpause.
    Unpaused,
    /// At this instant.
    At(Timestamp),
}

impl Snitch {
    /// Whether the settings a user gives (name, tags, notes, interval, alert type and
    /// e-mails) are the same as `other`'s.
    pub(crate) fn same_settings(&self, other: &Snitch) -> bool {
        self.name == other.name
            && self.tags == other.tags
            && self.notes == other.notes
            && self.cadence == other.cadence
            && self.alert_type == other.alert_type
            && self.alert_email == other.alert_email
            && self.failure_tolerance == other.failure_tolerance
            && self.missed_tolerance == other.missed_tolerance
            && self.max_runtime_seconds == other.max_runtime_seconds
            && self.email_keywords == other.email_keywords
    }

    /// The instant at which the deadline sweep must look at this snitch: its deadline, or
    /// the end of a timed pause. `None` when nothing can happen without a request.
    pub fn wake_at(&self) -> Option<Timestamp> {
        let timeout = self.next_run_timeout().map(|(_, at)| at);
        match (self.wake_for_deadline(), timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Its deadline, or the end of a timed pause: when a due point or a pause ends.
    pub(crate) fn wake_for_deadline(&self) -> Option<Timestamp> {
        match &self.state.pause {
            Some(Pause {
                until: PauseUntil::At(t),
                ..
            }) => Some(*t),
            Some(_) => None,
            None => self.state.deadline_at,
        }
    }

    /// The open run that times out first, as its index and time.
    pub(crate) fn next_run_timeout(&self) -> Option<(usize, Timestamp)> {
        self.state
            .open_runs
            .iter()
            .enumerate()
            .min_by_key(|(_, r)| r.timeout_at)
            .map(|(i, r)| (i, r.timeout_at))
    }

    /// A new, pending snitch with `basic` alerts, no tags, notes or alert e-mails and
    /// version 1, as the service creates one (e.g. for a benchmark that inserts snitches
    /// directly). Its configured fields without a rule between them (`name`, `tags`,
    /// `notes`, `alert_email`) may be set before it is inserted.
    pub fn new(
        token: Token,
        case_id: CaseId,
        name: SnitchName,
        cadence: impl Into<Cadence>,
        created_at: Timestamp,
    ) -> Snitch {
        Snitch {
            token,
            case_id,
            name,
            tags: Tags::default(),
            notes: Notes::default(),
            cadence: cadence.into(),
            alert_type: AlertType::Basic,
            alert_email: AlertEmails::default(),
            failure_tolerance: 0,
            missed_tolerance: 0,
            max_runtime_seconds: None,
            email_keywords: EmailKeywords::default(),
            created_at,
            state: SnitchState::default(),
            version: 1,
        }
    }

    /// Where the state machine stands: `self.state.status`.
    pub fn status(&self) -> Status {
        self.state.status
    }

    /// The secret identifier, in API paths and the check-in URL.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The case (account) that owns the snitch.
    pub fn case_id(&self) -> &CaseId {
        &self.case_id
    }

    /// What the user calls it.
    pub fn name(&self) -> &SnitchName {
        &self.name
    }

    /// The user's tags, in the order given, without duplicates.
    pub fn tags(&self) -> &Tags {
        &self.tags
    }

    /// Free text of the user.
    pub fn notes(&self) -> &Notes {
        &self.notes
    }

    /// When the job is expected to check in: an interval or a cron schedule.
    pub fn cadence(&self) -> &Cadence {
        &self.cadence
    }

    /// The interval, for an interval snitch (`None` for a cron one).
    pub fn interval(&self) -> Option<Interval> {
        self.cadence.interval()
    }

    /// How the deadline is set; `smart` only with an interval of an hour or longer.
    pub fn alert_type(&self) -> AlertType {
        self.alert_type
    }

    /// Who is e-mailed about it (the case's members when empty).
    pub fn alert_email(&self) -> &AlertEmails {
        &self.alert_email
    }

    /// How many failed runs in a row are tolerated before the errored alert.
    pub fn failure_tolerance(&self) -> u16 {
        self.failure_tolerance
    }

    /// How many missed runs in a row are tolerated before the missing alert.
    pub fn missed_tolerance(&self) -> u16 {
        self.missed_tolerance
    }

    /// How long a run may stay open, in seconds, when set (docs/rules.md#runs).
    pub fn max_runtime_seconds(&self) -> Option<u32> {
        self.max_runtime_seconds
    }

    /// The words that decide what a check-in e-mail means; empty: every e-mail is a
    /// success.
    pub fn email_keywords(&self) -> &EmailKeywords {
        &self.email_keywords
    }

    /// How long a run that starts at `at` may stay open: the setting, or the cadence's
    /// default, never past [`crate::runs::RUN_OPEN_LONGEST`].
    pub fn runtime_allowed(&self, at: Timestamp) -> chrono::Duration {
        let set = self
            .max_runtime_seconds
            .map(|s| chrono::Duration::seconds(i64::from(s)));
        crate::runs::runtime_allowed(&self.cadence, set, at)
    }

    /// When it was created.
    pub fn created_at(&self) -> Timestamp {
        self.created_at
    }

    /// Where the state machine stands.
    pub fn state(&self) -> &SnitchState {
        &self.state
    }

    /// Bumped on every saved change; stores refuse a save made from a stale read.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Renames it (no invariant depends on the name).
    pub fn set_name(&mut self, name: SnitchName) {
        self.name = name;
    }

    /// Replaces its tags (no invariant depends on them).
    pub fn set_tags(&mut self, tags: Tags) {
        self.tags = tags;
    }

    /// Replaces its notes (no invariant depends on them).
    pub fn set_notes(&mut self, notes: Notes) {
        self.notes = notes;
    }

    /// Replaces who is e-mailed about it (no invariant depends on it).
    pub fn set_alert_email(&mut self, alert_email: AlertEmails) {
        self.alert_email = alert_email;
    }

    /// Rebuilds a snitch a store read back, checking what can be checked of its
    /// invariants: the one way to build a [`Snitch`] outside this crate. A store maps the
    /// error to [`crate::StorageError::Corrupt`] (there is a `From`).
    pub fn restore(record: SnitchRecord) -> Result<Snitch, InvalidSnitch> {
        let invalid = |why: &str| Err(InvalidSnitch(format!("snitch {}: {why}", record.token)));
        if record.version == 0 {
            return invalid("version 0 (versions start at 1)");
        }
        if record.cadence.check_alert_type(record.alert_type).is_err() {
            return invalid("smart alerts without an interval of an hour or longer");
        }
        let paused = record.status == Status::Paused;
        match &record.pause {
            Some(_) if !paused => return invalid("a pause while not paused"),
            None if paused => return invalid("paused without a pause"),
            Some(p) if p.resume_status == Status::Paused => {
                return invalid("a pause that resumes to paused")
            }
            _ => {}
        }
        let waiting = paused || record.status == Status::Pending;
        if record.deadline_at.is_some() == waiting {
            return invalid("a deadline must be set exactly when neither pending nor paused");
        }
        if record.failure_tolerance > TOLERANCE_MAX || record.missed_tolerance > TOLERANCE_MAX {
            return invalid("a tolerance over its maximum");
        }
        if record.open_runs.len() > OPEN_RUNS_MAX {
            return invalid("more open runs than are kept");
        }
        if record.smart_offsets_ms.len() > SMART_OFFSETS_KEPT {
            return invalid("more smart offsets than are kept");
        }
        match (record.checked_in_at, record.last_check_in_at) {
            (Some(_), None) => return invalid("a successful check-in but no last check-in"),
            (Some(ok), Some(last)) if ok > last => {
                return invalid("the last successful check-in after the last check-in")
            }
            _ => {}
        }
        Ok(Snitch {
            token: record.token,
            case_id: record.case_id,
            name: record.name,
            tags: record.tags,
            notes: record.notes,
            cadence: record.cadence,
            alert_type: record.alert_type,
            alert_email: record.alert_email,
            failure_tolerance: record.failure_tolerance,
            missed_tolerance: record.missed_tolerance,
            max_runtime_seconds: record.max_runtime_seconds,
            email_keywords: record.email_keywords,
            created_at: record.created_at,
            state: SnitchState {
                status: record.status,
                checked_in_at: record.checked_in_at,
                last_check_in_at: record.last_check_in_at,
                anchor_at: record.anchor_at,
                deadline_at: record.deadline_at,
                pause: record.pause,
                smart_offsets_ms: SmartOffsets::from_slice(&record.smart_offsets_ms),
                last_errored_alert_at: record.last_errored_alert_at,
                error_announced: record.error_announced,
                last_recovery_alert_at: record.last_recovery_alert_at,
                event_seq: record.event_seq,
                consecutive_failures: record.consecutive_failures,
                consecutive_misses: record.consecutive_misses,
                open_runs: record.open_runs,
                last_run: record.last_run.map(Box::new),
                check_in_seq: record.check_in_seq,
            },
            version: record.version,
        })
    }

    /// Every stored field of the snitch, e.g. for a store that keeps it as one record.
    pub fn to_record(&self) -> SnitchRecord {
        let state = &self.state;
        SnitchRecord {
            token: self.token.clone(),
            case_id: self.case_id.clone(),
            name: self.name.clone(),
            tags: self.tags.clone(),
            notes: self.notes.clone(),
            cadence: self.cadence.clone(),
            alert_type: self.alert_type,
            alert_email: self.alert_email.clone(),
            failure_tolerance: self.failure_tolerance,
            missed_tolerance: self.missed_tolerance,
            max_runtime_seconds: self.max_runtime_seconds,
            email_keywords: self.email_keywords.clone(),
            created_at: self.created_at,
            version: self.version,
            status: state.status,
            checked_in_at: state.checked_in_at,
            last_check_in_at: state.last_check_in_at,
            anchor_at: state.anchor_at,
            deadline_at: state.deadline_at,
            pause: state.pause.clone(),
            smart_offsets_ms: state.smart_offsets_ms.as_slice().to_vec(),
            last_errored_alert_at: state.last_errored_alert_at,
            error_announced: state.error_announced,
            last_recovery_alert_at: state.last_recovery_alert_at,
            event_seq: state.event_seq,
            consecutive_failures: state.consecutive_failures,
            consecutive_misses: state.consecutive_misses,
            open_runs: state.open_runs.clone(),
            last_run: state.last_run.as_deref().cloned(),
            check_in_seq: state.check_in_seq,
        }
    }
}

/// Every stored field of a [`Snitch`], flat, as a store reads it back: plain data for
/// storage implementers, turned into a snitch by [`Snitch::restore`], which refuses a
/// record that breaks the snitch's invariants. The fields mean what the fields of the
/// same name of [`Snitch`] and [`SnitchState`] mean.
///
/// Exhaustive on purpose: a new field of a snitch is one more thing every store must keep,
/// so it should break a store's build, not be silently dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct SnitchRecord {
    pub token: Token,
    pub case_id: CaseId,
    pub name: SnitchName,
    pub tags: Tags,
    pub notes: Notes,
    pub cadence: Cadence,
    pub alert_type: AlertType,
    pub alert_email: AlertEmails,
    pub failure_tolerance: u16,
    pub missed_tolerance: u16,
    pub max_runtime_seconds: Option<u32>,
    pub email_keywords: EmailKeywords,
    pub created_at: Timestamp,
    pub version: u64,
    pub status: Status,
    pub checked_in_at: Option<Timestamp>,
    pub last_check_in_at: Option<Timestamp>,
    pub anchor_at: Option<Timestamp>,
    pub deadline_at: Option<Timestamp>,
    pub pause: Option<Pause>,
    pub smart_offsets_ms: Vec<i64>,
    pub last_errored_alert_at: Option<Timestamp>,
    pub error_announced: bool,
    pub last_recovery_alert_at: Option<Timestamp>,
    pub event_seq: u64,
    pub consecutive_failures: u32,
    pub consecutive_misses: u32,
    pub open_runs: Vec<OpenRun>,
    pub last_run: Option<Run>,
    pub check_in_seq: u64,
}

/// The most failed or missed runs in a row a snitch may tolerate (a month of hourly runs).
pub const TOLERANCE_MAX: u16 = 720;

/// A stored snitch that breaks an invariant (see [`Snitch::restore`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid stored snitch: {0}")]
pub struct InvalidSnitch(String);

impl Pause {
    /// A pause until `until` that returns to `resume_status` (never `paused`) on unpause,
    /// unless a successful check-in arrived meanwhile (`checked_in_while_paused`).
    pub fn new(until: PauseUntil, resume_status: Status, checked_in_while_paused: bool) -> Self {
        Pause {
            until,
            resume_status,
            checked_in_while_paused,
        }
    }
}

/// One check-in as recorded in a snitch's history.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CheckIn {
    /// When it arrived (never before the snitch's previous check-in).
    pub at: Timestamp,
    /// Success, or the exit status of a failed run.
    pub outcome: Outcome,
    /// The message the job sent, if any.
    pub message: Option<CheckInMessage>,
    /// A run's end (or a plain check-in), its start, or output only
    /// (docs/rules.md#runs).
    pub kind: CheckInKind,
    /// The client's id of its run (`rid`).
    pub run_id: Option<RunId>,
    /// The duration the client reported (`duration`), in milliseconds.
    pub duration_ms: Option<u64>,
    /// What the job printed, as kept (up to the server's limit).
    pub body: Option<CheckInBody>,
    /// Its number among the snitch's check-ins, from 1 (0: recorded before numbers were
    /// kept, or not saved yet).
    pub number: u64,
}

impl CheckIn {
    /// A plain check-in at `at` (a run's end, without id, duration or body).
    pub fn new(at: Timestamp, outcome: Outcome, message: Option<CheckInMessage>) -> Self {
        CheckIn {
            at,
            outcome,
            message,
            kind: CheckInKind::End,
            run_id: None,
            duration_ms: None,
            body: None,
            number: 0,
        }
    }

    /// This check-in, of `kind`.
    #[must_use]
    pub fn with_kind(mut self, kind: CheckInKind) -> Self {
        self.kind = kind;
        self
    }

    /// This check-in, of the run `run_id`.
    #[must_use]
    pub fn with_run_id(mut self, run_id: Option<RunId>) -> Self {
        self.run_id = run_id;
        self
    }

    /// This check-in, reporting a duration in milliseconds.
    #[must_use]
    pub fn with_duration_ms(mut self, duration_ms: Option<u64>) -> Self {
        self.duration_ms = duration_ms;
        self
    }

    /// This check-in, with what the job printed.
    #[must_use]
    pub fn with_body(mut self, body: Option<CheckInBody>) -> Self {
        self.body = body;
        self
    }

    /// This check-in, numbered `number` among its snitch's (as a store reads it back).
    #[must_use]
    pub fn with_number(mut self, number: u64) -> Self {
        self.number = number;
        self
    }
}

/// What happened to a snitch, as webhooks name it (docs/api.md#webhook-payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventKind {
    /// A check-in after a failure or an error (or the first one).
    Reporting,
    /// A deadline passed without a check-in.
    Missing,
    /// A check-in reported an error.
    Errored,
    /// The snitch was paused.
    Paused,
}

impl EventKind {
    /// The webhook `type`, e.g. `snitch.missing`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Reporting => "snitch.reporting",
            EventKind::Missing => "snitch.missing",
            EventKind::Errored => "snitch.errored",
            EventKind::Paused => "snitch.paused",
        }
    }

    /// The kind named by its webhook `type`, e.g. `snitch.missing`.
    pub fn parse(raw: &str) -> Option<EventKind> {
        [
            EventKind::Reporting,
            EventKind::Missing,
            EventKind::Errored,
            EventKind::Paused,
        ]
        .into_iter()
        .find(|k| k.as_str() == raw)
    }

    /// Whether this event is also sent by e-mail (all but `snitch.paused`).
    pub fn alerts_by_email(self) -> bool {
        self != EventKind::Paused
    }
}

/// A transition worth telling the owners about, with what the snitch looked like then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Unique and stable: `<token>-<n>` for the n-th event of the snitch.
    pub id: String,
    /// What happened.
    pub kind: EventKind,
    /// When it happened; for `snitch.missing` the deadline that passed.
    pub at: Timestamp,
    /// The case of the snitch.
    pub case_id: CaseId,
    /// The snitch's token.
    pub token: Token,
    /// The snitch's name then.
    pub name: SnitchName,
    /// The snitch's notes then.
    pub notes: Notes,
    /// The snitch's tags then.
    pub tags: Tags,
    /// The snitch's alert e-mails then.
    pub alert_email: AlertEmails,
    /// The status after the event.
    pub status: Status,
    /// The status before the event.
    pub previous_status: Status,
    /// The last successful check-in when it happened.
    pub checked_in_at: Option<Timestamp>,
    /// The check-in that caused it, for `snitch.reporting` and `snitch.errored`.
    pub check_in: Option<CheckIn>,
    /// For `snitch.missing`: how many due points passed with no check-in, announced at
    /// once (docs/rules.md#catch-up); 0 for other kinds.
    pub missed_periods: u64,
    /// For `snitch.missing`: when the run it reports was expected (the latest of them):
    /// an interval's due point, a schedule's run time (its deadline less the grace).
    pub expected_at: Option<Timestamp>,
    /// [`Event::expected_at`] in the schedule's time zone, ISO 8601 with its offset
    /// (`2026-03-29T02:30:00.000+03:00`), for a snitch with a schedule.
    pub expected_at_local: Option<String>,
    /// Why it was sent, for `snitch.missing` (`missed`, `timeout`) and `snitch.errored`
    /// (`exit_status`).
    pub reason: Option<AlertReason>,
    /// The run concerned, when the job reports runs (a start, a run id or a duration).
    pub run: Option<Run>,
}

impl Event {
    /// Its number among its snitch's events (the n of its id `<token>-<n>`): a later
    /// event of the snitch has a greater one.
    pub fn number(&self) -> u64 {
        self.id
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine;
    use crate::types::Plan;

    /// The inline offsets keep the newest, oldest first, and compare by what they keep:
    /// a cleared list equals an empty one whatever its slots still hold.
    #[test]
    fn smart_offsets_keep_the_newest_and_compare_by_what_they_keep() {
        let mut offsets = SmartOffsets::default();
        for n in 0..(SMART_OFFSETS_KEPT as i64 + 3) {
            offsets.push(n);
        }
        let newest: Vec<i64> = (3..(SMART_OFFSETS_KEPT as i64 + 3)).collect();
        assert_eq!(offsets.as_slice(), newest.as_slice());
        let all: Vec<i64> = (0..(SMART_OFFSETS_KEPT as i64 + 3)).collect();
        assert_eq!(SmartOffsets::from_slice(&all), offsets);
        assert_eq!(SmartOffsets::from_slice(&[7, 8]).as_slice(), &[7, 8]);
        offsets.clear();
        assert_eq!(offsets, SmartOffsets::default());
        assert!(offsets.is_empty());
        offsets.push(5);
        assert_eq!(offsets, SmartOffsets::from_slice(&[5]));
        assert_eq!(format!("{offsets:?}"), "[5]");
    }
    use chrono::{DateTime, Utc};

    fn at(s: &str) -> Timestamp {
        DateTime::parse_from_rfc3339(s)
            .expect("test timestamps are valid")
            .with_timezone(&Utc)
    }

    fn checked_in() -> Snitch {
        let fresh = Snitch::new(
            Token::parse("tok00000000000000001").expect("valid"),
            CaseId::parse("acme").expect("valid"),
            SnitchName::parse("backup").expect("valid"),
            Interval::Daily,
            at("2026-11-22T03:00:00Z"),
        );
        let check_in = CheckIn::new(at("2026-11-22T03:05:00Z"), Outcome::Success, None);
        machine::check_in(&fresh, &check_in, &Plan::default()).snitch
    }

    #[test]
    fn restore_gives_back_what_the_machine_made() {
        let snitch = checked_in();
        assert_eq!(Snitch::restore(snitch.to_record()), Ok(snitch.clone()));
        let paused = machine::pause(&snitch, PauseUntil::Unpaused, at("2026-11-22T04:00:00Z"))
            .expect("pausable")
            .snitch;
        assert_eq!(Snitch::restore(paused.to_record()), Ok(paused));
    }

    #[test]
    fn restore_refuses_a_record_that_breaks_an_invariant() {
        let good = checked_in().to_record();
        type Breaks = fn(&mut SnitchRecord);
        let broken: Vec<(&str, Breaks)> = vec![
            ("version 0", |r| r.version = 0),
            ("smart and sub-hourly", |r| {
                r.alert_type = AlertType::Smart;
                r.cadence = Interval::Minute10.into();
            }),
            ("paused without a pause", |r| r.status = Status::Paused),
            ("a pause while healthy", |r| {
                r.pause = Some(Pause::new(PauseUntil::Healthy, Status::Healthy, false));
            }),
            ("a pause resuming to paused", |r| {
                r.status = Status::Paused;
                r.deadline_at = None;
                r.pause = Some(Pause::new(PauseUntil::Healthy, Status::Paused, false));
            }),
            ("healthy without a deadline", |r| r.deadline_at = None),
            ("pending with a deadline", |r| r.status = Status::Pending),
            ("too many smart offsets", |r| {
                r.smart_offsets_ms = vec![0; SMART_OFFSETS_KEPT + 1];
            }),
            ("a success after the last check-in", |r| {
                r.last_check_in_at = Some(at("2026-11-22T03:01:00Z"));
            }),
            ("a success without a last check-in", |r| {
                r.last_check_in_at = None
            }),
        ];
        for (what, breaks) in broken {
            let mut record = good.clone();
            breaks(&mut record);
            assert!(Snitch::restore(record).is_err(), "{what} is refused");
        }
    }
}
