//! The service every adapter calls: the API operations, check-ins and the deadline sweep.
//!
//! Each operation reads the clock once, loads the snitch, brings it up to `now`
//! ([`machine::advance`]), applies its step and saves the result with the events in one
//! [`Change`]. A save refused for a stale version is retried from a fresh read.

use std::fmt;
use std::sync::Arc;

use chrono::DateTime;

use crate::cadence::Cadence;
use crate::calendar::Timestamp;
use crate::check_in_queue::{answer, CheckInQueues, Entry, Leadership, SharedError, Turn};
use crate::check_in_step::{prepare, PendingCheckIns};
use crate::clock::{to_millis, Clock};
use crate::email::{EmailKeywords, KeywordScope};
use crate::error::ServiceError;
use crate::liveness::{heartbeat_interval, CaseOutage, Outage, DEFAULT_OUTAGE_THRESHOLD};
use crate::machine::{self, Step};
use crate::outbox::{Delivery, Targets};
use crate::schedule::{CronSchedule, ExpectedRuns, DEFAULT_TIMEZONE};
use crate::snitch::{CheckIn, Event, PauseUntil, Snitch, TOLERANCE_MAX};
use crate::storage::{Change, Storage, StorageError};
use crate::tokens::{RandomTokens, TokenSource};
use crate::types::{
    parse_interval, AlertEmails, AlertType, Case, CaseId, CheckInMessage, Notes, Outcome,
    SnitchName, Tag, Tags, Token, BLANK,
};
use crate::validation::{Validation, Validations};
use crate::webhook::{Webhook, WebhookSecret, WebhookUrl};

mod badges;
mod channels;
mod check_in;
mod email;
mod sweep;

pub use channels::{ChannelInput, ListedChannel};

use sweep::Liveness;
pub use sweep::SweepReport;

/// How often an operation re-reads and retries after a concurrent change.
const MAX_ATTEMPTS: usize = 32;
/// How many due snitches the sweep loads at a time.
pub const SWEEP_BATCH: usize = 1_000;
/// How long a sweeper holds the snitches it claimed; a dead one's come back after it.
pub const SWEEP_LEASE: chrono::Duration = chrono::Duration::seconds(30);
/// How many times create draws a new token when one is taken.
const TOKEN_ATTEMPTS: usize = 8;

/// The attributes of a create or update request, as the client sent them. `None` means
/// "not given" (on update: unchanged). Adapters map JSON `null` to the value it means:
/// `Some(vec![])` for `tags` and `alert_email`, `Some("")` for the others.
///
/// Build it with `..Default::default()`, so a new attribute does not break the build.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnitchFields {
    /// The snitch's name.
    pub name: Option<String>,
    /// The interval's name, e.g. `hourly`.
    pub interval: Option<String>,
    /// `basic` or `smart`.
    pub alert_type: Option<String>,
    /// A list of addresses; the comma-separated string form is split by the adapter.
    pub alert_email: Option<Vec<String>>,
    /// Free text.
    pub notes: Option<String>,
    /// The tags.
    pub tags: Option<Vec<String>>,
    /// A cron expression, instead of an interval (docs/rules.md#expected-runs).
    pub schedule: Option<String>,
    /// The schedule's IANA time zone (default `UTC`).
    pub timezone: Option<String>,
    /// How many seconds after an expected time a check-in still counts.
    pub grace_seconds: Option<i64>,
    /// How many seconds before an expected time a check-in already counts.
    pub early_seconds: Option<i64>,
    /// How many failed runs in a row are tolerated before the errored alert (0 to 720).
    pub failure_tolerance: Option<i64>,
    /// How many missed runs in a row are tolerated before the missing alert (0 to 720).
    pub missed_tolerance: Option<i64>,
    /// How long a run may stay open before it times out, in seconds (60 to 2,419,200).
    pub max_runtime_seconds: Option<i64>,
    /// The words that decide what a check-in e-mail means; all lists empty: none (every
    /// e-mail is a success).
    pub email_keywords: Option<EmailKeywordsInput>,
}

/// The e-mail keywords of a create or update request, as the client sent them: three
/// lists and where to look (`both`, the default, `subject` or `body`). Problems are
/// reported under `email_keywords`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmailKeywordsInput {
    /// Words that make an e-mail a failed run.
    pub failure: Vec<String>,
    /// Words that make an e-mail a successful run.
    pub success: Vec<String>,
    /// Words that make an e-mail a run's start.
    pub start: Vec<String>,
    /// Where keywords are looked for; `None`: `both`.
    pub search: Option<String>,
}

impl EmailKeywordsInput {
    /// The keywords these lists make: none (the default) when every list is empty,
    /// whatever `search` says, once it is valid.
    fn parse(&self) -> Result<EmailKeywords, Validation> {
        let scope = match self.search.as_deref() {
            None => KeywordScope::default(),
            Some(raw) => KeywordScope::parse(raw)?,
        };
        let keywords = EmailKeywords::parse(&self.failure, &self.success, &self.start, scope)?;
        Ok(if keywords.is_empty() {
            EmailKeywords::default()
        } else {
            keywords
        })
    }
}

/// The fields of [`SnitchFields`] that passed validation.
struct ParsedFields {
    name: Option<SnitchName>,
    /// The cadence the fields ask for (see [`SnitchFields::cadence`]).
    cadence: Option<Cadence>,
    alert_type: Option<AlertType>,
    alert_email: Option<AlertEmails>,
    notes: Option<Notes>,
    tags: Option<Tags>,
    failure_tolerance: Option<u16>,
    missed_tolerance: Option<u16>,
    max_runtime_seconds: Option<u32>,
    email_keywords: Option<EmailKeywords>,
}

impl SnitchFields {
    /// Parses every given attribute, collecting every problem in the order of the
    /// attributes (the cadence's where the interval stands).
    fn parse(&self, problems: &mut Validations, current: Current<'_>) -> ParsedFields {
        ParsedFields {
            name: self
                .name
                .as_deref()
                .and_then(|n| problems.check(SnitchName::parse(n))),
            cadence: self.cadence(current, problems),
            alert_type: self
                .alert_type
                .as_deref()
                .and_then(|a| problems.check(AlertType::parse(a))),
            alert_email: self
                .alert_email
                .as_deref()
                .and_then(|e| problems.check(AlertEmails::parse(e))),
            notes: self
                .notes
                .as_deref()
                .and_then(|n| problems.check(Notes::parse(n))),
            tags: self
                .tags
                .as_deref()
                .and_then(|t| problems.check(Tags::parse(t))),
            failure_tolerance: self
                .failure_tolerance
                .and_then(|n| problems.check(tolerance("failure_tolerance", n))),
            missed_tolerance: self
                .missed_tolerance
                .and_then(|n| problems.check(tolerance("missed_tolerance", n))),
            max_runtime_seconds: self.max_runtime_seconds.and_then(|n| {
                let seconds = u32::try_from(n).unwrap_or(u32::MAX);
                problems
                    .check(crate::runs::check_max_runtime(seconds))
                    .map(|_| seconds)
            }),
            email_keywords: self
                .email_keywords
                .as_ref()
                .and_then(|k| problems.check(k.parse())),
        }
    }

    /// The cadence these fields ask for, given the snitch's `current` one, or `None` when
    /// they leave it as it is (or the snitch is not read yet: then only what can be
    /// checked without it is). An interval and a schedule exclude each other; a time
    /// zone, grace or early span goes with a schedule, given now or already the snitch's.
    /// A schedule's grace and early span, when not given, stay what they were, or take
    /// their defaults (which depend on the schedule's runs after the current instant).
    fn cadence(&self, current: Current<'_>, problems: &mut Validations) -> Option<Cadence> {
        let spans_given = [
            ("timezone", self.timezone.is_some()),
            ("grace_seconds", self.grace_seconds.is_some()),
            ("early_seconds", self.early_seconds.is_some()),
        ];
        let refuse_spans = |problems: &mut Validations| {
            for (attribute, given) in spans_given {
                if given {
                    problems.push(attribute, "can only be set with a schedule");
                }
            }
        };
        if let Some(interval) = &self.interval {
            if self.schedule.is_some() {
                problems.push("schedule", "can't be set together with an interval");
                return None;
            }
            refuse_spans(problems);
            return problems.check(parse_interval(interval)).map(Cadence::from);
        }
        let (current, now) = match current {
            // Judged once the snitch is read: spans alone may go with its schedule.
            Current::Unknown if self.schedule.is_none() => return None,
            Current::Unknown => (None, None),
            Current::Creating(now) => (None, Some(now)),
            Current::Is(cadence, now) => (cadence.expected_runs(), Some(now)),
        };
        let touches_spans = spans_given.iter().any(|(_, given)| *given);
        let expression = match (&self.schedule, current) {
            (Some(expression), _) => expression.as_str(),
            (None, Some(runs)) if touches_spans => runs.schedule().expression(),
            (None, _) => {
                refuse_spans(problems);
                return None;
            }
        };
        let timezone = match (&self.timezone, current) {
            (Some(timezone), _) => timezone.as_str(),
            (None, Some(runs)) => runs.schedule().timezone(),
            (None, None) => DEFAULT_TIMEZONE,
        };
        let schedule =
            problems.check(CronSchedule::parse(expression, timezone).map_err(Validation::from))?;
        // Beyond what a duration holds is beyond every range: refused below, never a panic.
        let seconds = |given: Option<i64>| {
            given.map(|n| {
                chrono::Duration::try_seconds(n).unwrap_or(if n < 0 {
                    chrono::Duration::MIN
                } else {
                    chrono::Duration::MAX
                })
            })
        };
        let grace = seconds(self.grace_seconds).or(current.map(ExpectedRuns::grace));
        let early = seconds(self.early_seconds).or(current.map(ExpectedRuns::early));
        let Some(now) = now else {
            // Not read yet: the ranges now; the defaults, which cost a search of the
            // schedule, once the snitch is read.
            problems.check(ExpectedRuns::check_spans(grace, early));
            return None;
        };
        problems
            .check(ExpectedRuns::new(schedule, grace, early, now))
            .map(Cadence::from)
    }
}

/// A tolerance as given: 0 to [`TOLERANCE_MAX`].
fn tolerance(attribute: &str, n: i64) -> Result<u16, Validation> {
    u16::try_from(n)
        .ok()
        .filter(|n| *n <= TOLERANCE_MAX)
        .ok_or_else(|| Validation::new(attribute, format!("must be between 0 and {TOLERANCE_MAX}")))
}

/// What a snitch's cadence is while its fields are parsed.
#[derive(Debug, Clone, Copy)]
enum Current<'a> {
    /// None: the snitch is being created, at this instant.
    Creating(Timestamp),
    /// Not read yet (an update's first check, before the snitch is read).
    Unknown,
    /// The snitch's, as read at this instant.
    Is(&'a Cadence, Timestamp),
}

/// When a pause ends, as the client wrote it: `healthy`, `unpaused` or a future time.
pub fn parse_pause_until(raw: Option<&str>, now: Timestamp) -> Result<PauseUntil, Validation> {
    let invalid = || {
        Validation::new(
            "until",
            "must be healthy, unpaused or an ISO 8601 time in the future",
        )
    };
    match raw.map(str::trim) {
        None | Some("") | Some("healthy") => Ok(PauseUntil::Healthy),
        Some("unpaused") => Ok(PauseUntil::Unpaused),
        Some(text) => {
            let at = DateTime::parse_from_rfc3339(text).map_err(|_| invalid())?;
            let at = to_millis(at.to_utc());
            if at <= now {
                return Err(Validation::new("until", "must be in the future"));
            }
            Ok(PauseUntil::At(at))
        }
    }
}

/// Called after events were stored, e.g. to wake a dispatcher.
pub type EventsHook = Arc<dyn Fn() + Send + Sync>;

/// Called with a snitch's new wake-up time when a change moved it earlier (an update to a
/// shorter interval, a pause with an earlier end), e.g. to wake a sleeping scheduler.
pub type WakeHook = Arc<dyn Fn(Timestamp) + Send + Sync>;

/// Called with an outage when this server found it.
pub type OutageHook = Arc<dyn Fn(&Outage) + Send + Sync>;

/// Called with the events of each saved change (after the save), e.g. to count them.
pub type EmittedHook = Arc<dyn Fn(&[Event]) + Send + Sync>;

/// The most check-ins per snitch a service may be configured to keep.
pub const MAX_CHECK_IN_HISTORY: usize = 10_000;

/// The most bytes of a check-in's output a service may be configured to keep (1 MiB).
pub const MAX_PING_BODY_LIMIT: usize = 1 << 20;

/// The Snitch service over a store and a clock.
#[derive(Clone)]
pub struct SnitchService {
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    tokens: Arc<dyn TokenSource>,
    on_events: Option<EventsHook>,
    on_earlier_wake: Option<WakeHook>,
    on_outage: Option<OutageHook>,
    on_emitted: Option<EmittedHook>,
    /// How many check-ins per snitch the store keeps ([`Change::keep_check_ins`]).
    check_in_history: usize,
    /// How many bytes of a check-in's output are kept (docs/rules.md#runs).
    ping_body_limit: usize,
    sweep_batch: usize,
    /// Check-ins waiting for the save in flight of their snitch; shared by clones.
    check_in_queues: Arc<CheckInQueues>,
    liveness: Arc<Liveness>,
}

impl fmt::Debug for SnitchService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SnitchService").finish_non_exhaustive()
    }
}

impl SnitchService {
    /// A service that makes random tokens.
    pub fn new(storage: Arc<dyn Storage>, clock: Arc<dyn Clock>) -> Self {
        Self::with_tokens(storage, clock, Arc::new(RandomTokens))
    }

    /// A service that makes its tokens with `tokens` (e.g. predictable ones in tests).
    pub fn with_tokens(
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        tokens: Arc<dyn TokenSource>,
    ) -> Self {
        SnitchService {
            storage,
            clock,
            tokens,
            on_events: None,
            on_earlier_wake: None,
            on_outage: None,
            on_emitted: None,
            check_in_history: crate::snitch::CHECK_INS_KEPT,
            ping_body_limit: crate::runs::PING_BODY_LIMIT_DEFAULT,
            sweep_batch: SWEEP_BATCH,
            check_in_queues: Arc::default(),
            liveness: Arc::new(Liveness::new(DEFAULT_OUTAGE_THRESHOLD)),
        }
    }

    /// Calls `hook` when a saved change moved a snitch's wake-up time earlier.
    pub fn with_wake_hook(mut self, hook: WakeHook) -> Self {
        self.on_earlier_wake = Some(hook);
        self
    }

    /// Calls `hook` each time a change with events was saved (after the save).
    pub fn with_events_hook(mut self, hook: EventsHook) -> Self {
        self.on_events = Some(hook);
        self
    }

    /// Calls `hook` with the events of each saved change that emitted some (after the
    /// save, before the events hook).
    pub fn with_emitted_hook(mut self, hook: EmittedHook) -> Self {
        self.on_emitted = Some(hook);
        self
    }

    /// Keeps the newest `history` check-ins of each snitch (`check_in_history`; default
    /// [`crate::snitch::CHECK_INS_KEPT`]), at least 1 and at most
    /// [`MAX_CHECK_IN_HISTORY`] (out-of-range values are clamped).
    pub fn with_check_in_history(mut self, history: usize) -> Self {
        self.check_in_history = history.clamp(1, MAX_CHECK_IN_HISTORY);
        self
    }

    /// Claims and saves at most `batch` due snitches at a time in the sweep (default
    /// [`SWEEP_BATCH`]; at least 1). Smaller batches commit sooner and hold fewer leases;
    /// larger ones make fewer round trips.
    pub fn with_sweep_batch(mut self, batch: usize) -> Self {
        self.sweep_batch = batch.max(1);
        self
    }

    /// How many check-ins of each snitch this service keeps.
    pub fn check_in_history(&self) -> usize {
        self.check_in_history
    }

    /// Keeps at most `limit` bytes of a check-in's output (`ping_body_limit`; default
    /// [`crate::runs::PING_BODY_LIMIT_DEFAULT`], at most [`MAX_PING_BODY_LIMIT`]; 0 keeps
    /// none).
    pub fn with_ping_body_limit(mut self, limit: usize) -> Self {
        self.ping_body_limit = limit.min(MAX_PING_BODY_LIMIT);
        self
    }

    /// How many bytes of a check-in's output are kept.
    pub fn ping_body_limit(&self) -> usize {
        self.ping_body_limit
    }

    /// The clock the service reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Adds the deliveries of the change's events (one per hook of the case, and the
    /// e-mail) and saves it all in one step; gives back the snitch as saved.
    async fn save_with_outbox(
        &self,
        case: &Case,
        hooks: &mut Option<Targets>,
        before: &Snitch,
        mut change: Change,
    ) -> Result<Snitch, StorageError> {
        if !change.events.is_empty() && hooks.is_none() {
            *hooks = Some(self.targets(&case.id).await?);
        }
        let none = Targets::default();
        self.prepare(&mut change, case, hooks.as_ref().unwrap_or(&none));
        match self.storage.save(&change).await {
            Ok(()) => {}
            // The commit may have happened: it did if the store now holds exactly the
            // snitch this change made (same version, same state, times included). Then it
            // is answered as saved. Otherwise (not stored yet, or since changed by another
            // writer, or the read fails) the error stands and is not retried here: a
            // retry would step again on top of a change that may be stored, and count a
            // check-in twice. The caller is told the outcome is unknown (the API answers
            // 503); the dispatcher's hook is not called, a later claim finds any events.
            Err(e) if e.is_outcome_unknown() => {
                if !self.stored_as(&change.snitch).await {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
        self.saved(before.wake_at(), &change);
        Ok(change.snitch)
    }

    /// [`prepare`] with this service's history length.
    /// Where the case's alerts go: its webhooks and channels.
    pub(crate) async fn targets(&self, case: &CaseId) -> Result<Targets, StorageError> {
        Ok(Targets {
            hooks: self.storage.webhooks(case).await?,
            channels: self.storage.channels(case).await?,
        })
    }

    fn prepare(&self, change: &mut Change, case: &Case, hooks: &Targets) {
        prepare(change, case, hooks, self.check_in_history);
    }

    /// What follows every saved change: the wake hook when the snitch's wake-up time
    /// moved earlier, and the events hooks (one call per change) when it stored events.
    fn saved(&self, wake_before: Option<Timestamp>, change: &Change) {
        self.wake_if_earlier(wake_before, &change.snitch);
        if !change.events.is_empty() {
            if let Some(hook) = &self.on_emitted {
                hook(&change.events);
            }
            if let Some(hook) = &self.on_events {
                hook();
            }
        }
    }

    /// Tells the wake hook when a saved change moved the snitch's wake-up time earlier.
    fn wake_if_earlier(&self, wake_before: Option<Timestamp>, after: &Snitch) {
        if let (Some(hook), Some(wake)) = (&self.on_earlier_wake, after.wake_at()) {
            if wake_before.is_none_or(|old| wake < old) {
                hook(wake);
            }
        }
    }

    /// Whether the store holds exactly `snitch` (after a save whose commit outcome is
    /// unknown: then it was committed).
    async fn stored_as(&self, snitch: &Snitch) -> bool {
        matches!(self.storage.snitch(&snitch.token).await, Ok(Some(stored)) if stored == *snitch)
    }

    /// The store the service works on.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The current instant, in whole milliseconds.
    pub fn now(&self) -> Timestamp {
        to_millis(self.clock.now())
    }

    /// The case's snitches carrying every tag of `tags`, oldest first.
    pub async fn list(&self, case: &Case, tags: &[Tag]) -> Result<Vec<Snitch>, ServiceError> {
        ensure_active(case)?;
        Ok(self.storage.snitches(&case.id, tags).await?)
    }

    /// Parses the comma-separated `tags` filter of the list operation; empty parts are
    /// ignored, so `tags=` means no filter.
    pub fn parse_tag_filter(raw: &str) -> Result<Vec<Tag>, ServiceError> {
        let mut tags = Vec::new();
        let mut problems = Validations::new();
        for part in raw.split(',').filter(|p| !p.trim().is_empty()) {
            if let Some(tag) = problems.check(Tag::parse_stored(part)) {
                tags.push(tag);
            }
        }
        problems.into_result()?;
        Ok(tags)
    }

    /// The case's snitch with this token; another case's is not found.
    pub async fn get(&self, case: &Case, token: &str) -> Result<Snitch, ServiceError> {
        ensure_active(case)?;
        self.load_owned(case, token).await
    }

    /// Creates a snitch from `fields` (`name` and `interval` required), within the plan's limit.
    pub async fn create(&self, case: &Case, fields: &SnitchFields) -> Result<Snitch, ServiceError> {
        ensure_active(case)?;
        let mut problems = Validations::new();
        if fields.name.is_none() {
            problems.push("name", BLANK);
        }
        if fields.interval.is_none() && fields.schedule.is_none() {
            problems.push("interval", BLANK);
        }
        let now = self.now();
        let parsed = fields.parse(&mut problems, Current::Creating(now));
        let alert_type = parsed.alert_type.unwrap_or_default();
        if let Some(cadence) = &parsed.cadence {
            problems.check(cadence.check_alert_type(alert_type));
        }
        // A missing name or cadence is always among the problems.
        let (Some(name), Some(cadence), true) = (parsed.name, parsed.cadence, problems.is_empty())
        else {
            return Err(problems.into());
        };
        let mut snitch = Snitch {
            token: self.tokens.new_token(),
            case_id: case.id.clone(),
            name,
            tags: parsed.tags.unwrap_or_default(),
            notes: parsed.notes.unwrap_or_default(),
            cadence,
            alert_type,
            alert_email: parsed.alert_email.unwrap_or_default(),
            failure_tolerance: parsed.failure_tolerance.unwrap_or(0),
            missed_tolerance: parsed.missed_tolerance.unwrap_or(0),
            max_runtime_seconds: parsed.max_runtime_seconds,
            email_keywords: parsed.email_keywords.unwrap_or_default(),
            created_at: now,
            state: machine::initial_state(),
            version: 1,
        };
        for _ in 0..TOKEN_ATTEMPTS {
            match self
                .storage
                .insert_snitch(&snitch, case.plan.max_snitches)
                .await
            {
                Ok(()) => return Ok(snitch),
                Err(StorageError::DuplicateToken) => snitch.token = self.tokens.new_token(),
                Err(StorageError::LimitReached { max }) => {
                    return Err(ServiceError::PlanLimitReached { max })
                }
                Err(other) => return Err(other.into()),
            }
        }
        Err(StorageError::DuplicateToken.into())
    }

    /// Changes the given attributes; a new interval, schedule or alert type moves the
    /// deadline.
    pub async fn update(
        &self,
        case: &Case,
        token: &str,
        fields: &SnitchFields,
    ) -> Result<Snitch, ServiceError> {
        ensure_active(case)?;
        let mut problems = Validations::new();
        let parsed = fields.parse(&mut problems, Current::Unknown);
        problems.into_result()?;
        self.modify(case, token, |s, now| {
            let mut next = s.clone();
            if let Some(name) = &parsed.name {
                next.name = name.clone();
            }
            if let Some(notes) = &parsed.notes {
                next.notes = notes.clone();
            }
            if let Some(tags) = &parsed.tags {
                next.tags = tags.clone();
            }
            if let Some(alert_email) = &parsed.alert_email {
                next.alert_email = alert_email.clone();
            }
            if let Some(keywords) = &parsed.email_keywords {
                next.email_keywords = keywords.clone();
            }
            next.failure_tolerance = parsed.failure_tolerance.unwrap_or(s.failure_tolerance);
            next.missed_tolerance = parsed.missed_tolerance.unwrap_or(s.missed_tolerance);
            if parsed.max_runtime_seconds.is_some() {
                // Runs open now keep the timeout they started with.
                next.max_runtime_seconds = parsed.max_runtime_seconds;
            }
            let mut problems = Validations::new();
            if let Some(cadence) = fields.cadence(Current::Is(&s.cadence, now), &mut problems) {
                next.cadence = cadence;
            }
            problems.into_result()?;
            next.alert_type = parsed.alert_type.unwrap_or(s.alert_type);
            next.cadence
                .check_alert_type(next.alert_type)
                .map_err(Validations::from)?;
            let cadence_changed = next.cadence != s.cadence;
            if cadence_changed || next.alert_type != s.alert_type {
                Ok(machine::reschedule(&next, cadence_changed, now))
            } else {
                Ok(Step::new(next, Vec::new()))
            }
        })
        .await
    }

    /// Appends tags (duplicates dropped) and returns all tags after the addition.
    pub async fn add_tags(
        &self,
        case: &Case,
        token: &str,
        tags: &[String],
    ) -> Result<Tags, ServiceError> {
        ensure_active(case)?;
        if tags.is_empty() {
            return Err(Validations::single("tags", BLANK).into());
        }
        let snitch = self
            .modify(case, token, |s, _| {
                let mut next = s.clone();
                next.tags.extend_parsed(tags).map_err(Validations::from)?;
                Ok(Step::new(next, Vec::new()))
            })
            .await?;
        Ok(snitch.tags)
    }

    /// Removes one tag (a no-op when absent) and returns the remaining tags.
    pub async fn remove_tag(
        &self,
        case: &Case,
        token: &str,
        tag: &str,
    ) -> Result<Tags, ServiceError> {
        ensure_active(case)?;
        // A tag that cannot exist is simply not on the snitch.
        let tag = Tag::parse(tag).ok();
        let snitch = self
            .modify(case, token, |s, _| {
                let mut next = s.clone();
                if let Some(tag) = &tag {
                    next.tags.remove(tag);
                }
                Ok(Step::new(next, Vec::new()))
            })
            .await?;
        Ok(snitch.tags)
    }

    /// Pauses until `until` (`healthy` when absent). See [`parse_pause_until`].
    pub async fn pause(
        &self,
        case: &Case,
        token: &str,
        until: Option<&str>,
    ) -> Result<(), ServiceError> {
        ensure_active(case)?;
        self.modify(case, token, |s, now| {
            let until = parse_pause_until(until, now).map_err(Validations::from)?;
            machine::pause(s, until, now)
        })
        .await?;
        Ok(())
    }

    /// Ends a pause; a no-op for a snitch that is not paused.
    pub async fn unpause(&self, case: &Case, token: &str) -> Result<(), ServiceError> {
        ensure_active(case)?;
        self.modify(case, token, |s, now| Ok(machine::unpause(s, now)))
            .await?;
        Ok(())
    }

    /// Deletes the case's snitch with its history.
    pub async fn delete(&self, case: &Case, token: &str) -> Result<(), ServiceError> {
        ensure_active(case)?;
        let snitch = self.load_owned(case, token).await?;
        if self.storage.delete_snitch(&snitch.token).await? {
            Ok(())
        } else {
            Err(ServiceError::NotFound)
        }
    }

    /// The most recent outages, newest first, with how many of the case's snitches each
    /// deferred.
    pub async fn outages(
        &self,
        case: &Case,
        limit: usize,
    ) -> Result<Vec<CaseOutage>, ServiceError> {
        ensure_active(case)?;
        Ok(self.storage.case_outages(&case.id, limit).await?)
    }

    /// The snitch's most recent check-ins, newest first.
    pub async fn check_ins(
        &self,
        case: &Case,
        token: &str,
        limit: usize,
    ) -> Result<Vec<CheckIn>, ServiceError> {
        ensure_active(case)?;
        let snitch = self.load_owned(case, token).await?;
        Ok(self.storage.check_ins(&snitch.token, limit).await?)
    }

    /// The output kept with the snitch's check-in numbered `number`, among those its
    /// history keeps; `NotFound` when there is no such check-in or it kept no output.
    pub async fn check_in_body(
        &self,
        case: &Case,
        token: &str,
        number: u64,
    ) -> Result<crate::runs::CheckInBody, ServiceError> {
        let check_ins = self.check_ins(case, token, self.check_in_history).await?;
        check_ins
            .into_iter()
            .find(|c| c.number == number && number > 0)
            .and_then(|c| c.body)
            .ok_or(ServiceError::NotFound)
    }

    /// The snitch's most recent events, newest first.
    pub async fn events(
        &self,
        case: &Case,
        token: &str,
        limit: usize,
    ) -> Result<Vec<Event>, ServiceError> {
        ensure_active(case)?;
        let snitch = self.load_owned(case, token).await?;
        Ok(self.storage.events(&snitch.token, limit).await?)
    }

    /// The case's webhooks, oldest first.
    pub async fn webhooks(&self, case: &Case) -> Result<Vec<Webhook>, ServiceError> {
        ensure_active(case)?;
        Ok(self.storage.webhooks(&case.id).await?)
    }

    /// Registers a webhook for the case's events.
    pub async fn create_webhook(
        &self,
        case: &Case,
        url: &str,
        secret: Option<&str>,
    ) -> Result<Webhook, ServiceError> {
        ensure_active(case)?;
        let mut problems = Validations::new();
        let url = problems.check(WebhookUrl::parse(url));
        let secret = secret.and_then(|s| problems.check(WebhookSecret::parse(s)));
        let (Some(url), true) = (url, problems.is_empty()) else {
            return Err(problems.into());
        };
        let mut hook = Webhook {
            id: self.tokens.new_token().to_string(),
            case_id: case.id.clone(),
            url,
            secret,
            created_at: self.now(),
        };
        for _ in 0..TOKEN_ATTEMPTS {
            match self.storage.insert_webhook(&hook).await {
                Ok(()) => return Ok(hook),
                Err(StorageError::DuplicateToken) => hook.id = self.tokens.new_token().to_string(),
                Err(other) => return Err(other.into()),
            }
        }
        Err(StorageError::DuplicateToken.into())
    }

    /// Removes one of the case's webhooks; another case's hook is not found.
    pub async fn delete_webhook(&self, case: &Case, id: &str) -> Result<(), ServiceError> {
        ensure_active(case)?;
        // Hook ids are tokens: anything else (a NUL, a stray byte) names no hook, and is
        // not handed to a store that might choke on it.
        if Token::parse(id).is_err() {
            return Err(ServiceError::NotFound);
        }
        if self.storage.delete_webhook(&case.id, id).await? {
            Ok(())
        } else {
            Err(ServiceError::NotFound)
        }
    }

    /// The snitch's most recent events, newest first, each with its deliveries and their
    /// attempts: why an alert did or did not arrive.
    pub async fn events_with_deliveries(
        &self,
        case: &Case,
        token: &str,
        limit: usize,
    ) -> Result<Vec<(Event, Vec<Delivery>)>, ServiceError> {
        let events = self.events(case, token, limit).await?;
        let ids: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
        let mut deliveries = self.storage.deliveries(&ids).await?;
        Ok(events
            .into_iter()
            .map(|e| {
                let (mine, rest): (Vec<Delivery>, Vec<Delivery>) =
                    deliveries.drain(..).partition(|d| d.event.id == e.id);
                deliveries = rest;
                (e, mine)
            })
            .collect())
    }

    /// Loads a snitch of the case; another case's snitch is reported as not found.
    async fn load_owned(&self, case: &Case, token: &str) -> Result<Snitch, ServiceError> {
        let token = Token::parse(token).map_err(|_| ServiceError::NotFound)?;
        match self.storage.snitch(&token).await? {
            Some(s) if s.case_id == case.id => Ok(s),
            _ => Err(ServiceError::NotFound),
        }
    }

    /// Load, advance to now, apply `step`, save; retried on a concurrent change.
    async fn modify<F>(&self, case: &Case, token: &str, step: F) -> Result<Snitch, ServiceError>
    where
        F: Fn(&Snitch, Timestamp) -> Result<Step, Validations> + Send + Sync,
    {
        let parsed = Token::parse(token).map_err(|_| ServiceError::NotFound)?;
        // This server's check-ins of the snitch wait while it is read and saved, so the
        // save is not outdated by them (see `check_in_queue`).
        let _turn = self.check_in_queues.writer_turn(&parsed).await;
        let now = self.now();
        self.notice_stall(now).await?;
        let outages = self.known_outages();
        let mut hooks = None;
        for _ in 0..MAX_ATTEMPTS {
            let snitch = self.load_owned(case, token).await?;
            let advanced = machine::advance_through(&snitch, now, &outages);
            let stepped = step(&advanced.snitch, now)?;
            let result = Step::new(
                stepped.snitch,
                advanced.events.into_iter().chain(stepped.events).collect(),
            );
            if !result.changes(&snitch) {
                return Ok(snitch);
            }
            let mut change = Change::new(&snitch, result.snitch, Vec::new(), result.events);
            change.deferred_by = advanced.deferred_by;
            match self
                .save_with_outbox(case, &mut hooks, &snitch, change)
                .await
            {
                Ok(saved) => return Ok(saved),
                Err(StorageError::Conflict) => continue,
                Err(StorageError::NotFound) => return Err(ServiceError::NotFound),
                Err(other) => return Err(other.into()),
            }
        }
        Err(StorageError::Conflict.into())
    }
}

fn ensure_active(case: &Case) -> Result<(), ServiceError> {
    if case.on_hold {
        Err(ServiceError::AccountOnHold)
    } else {
        Ok(())
    }
}
