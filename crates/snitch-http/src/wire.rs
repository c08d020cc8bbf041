//! The JSON wire format (docs/api.md) and the compat rules of docs/rules.md#api-details.
//! The core knows nothing of JSON: requests become [`SnitchFields`] here, and snitches
//! become [`SnitchJson`].

use serde::Serialize;
use serde_json::{Map, Value};
use snitch_core::{
    CaseOutage, Channel, Delivery, EmailKeywords, EmailKeywordsInput, Event, EventKind, Snitch,
    SnitchFields, Tag, Timestamp, Validations, Webhook,
};
use utoipa::ToSchema;

/// Datetimes on the wire: ISO 8601, milliseconds, `Z`. chrono's RFC 3339 writer, not a
/// `format` string, which is parsed again at every call: a list of 10,000 snitches formats
/// 50,000 instants, and that parsing was a sixth of the server's time for the list.
pub fn format_time(t: Timestamp) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn format_opt(t: Option<Timestamp>) -> Option<String> {
    t.map(format_time)
}

/// `{"interval": …}`: the compat `type` object.
#[derive(Debug, Serialize, ToSchema)]
#[non_exhaustive]
pub struct TypeJson {
    /// The interval's name (`daily`, `15_minute`, …), or `cron` for a snitch with a
    /// schedule.
    #[schema(value_type = String, example = "daily")]
    pub interval: &'static str,
}

/// A snitch as the API shows it (docs/api.md#snitch-json).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Snitch)]
#[non_exhaustive]
pub struct SnitchJson {
    /// The snitch's token, its id in the API.
    pub token: String,
    /// The snitch's URL in the API (`/v1/snitches/<token>`).
    pub href: String,
    /// The name.
    pub name: String,
    /// The tags, in order.
    pub tags: Vec<String>,
    /// `pending`, `healthy`, `failed`, `errored` or `paused`.
    #[schema(value_type = String, example = "healthy")]
    pub status: &'static str,
    /// The notes.
    pub notes: String,
    /// The last check-in's time, RFC 3339 UTC.
    pub checked_in_at: Option<String>,
    /// Where the job checks in.
    pub check_in_url: String,
    /// Where the job may check in by e-mail (`<token>@<domain>`); only on a server that
    /// receives check-in e-mails.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "c2354d53d2@check-ins.example.com")]
    pub check_in_email: Option<String>,
    /// The interval's name (also under `type`), or `cron` for a snitch with a schedule.
    #[schema(value_type = String, example = "daily")]
    pub interval: &'static str,
    /// `{"interval": …}`, as Dead Man's Snitch answers it.
    #[serde(rename = "type")]
    pub type_: TypeJson,
    /// `basic` or `smart`.
    #[schema(value_type = String, example = "basic")]
    pub alert_type: &'static str,
    /// The snitch's own alert addresses.
    pub alert_email: Vec<String>,
    /// When the snitch was made, RFC 3339 UTC.
    pub created_at: String,
    /// When the current period's check-in is due, RFC 3339 UTC; `null` while pending or
    /// paused.
    pub deadline_at: Option<String>,
    /// The cron expression (only on a snitch with a schedule, as the fields below).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "30 2 * * *")]
    pub schedule: Option<String>,
    /// The schedule's IANA time zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "Europe/Riga")]
    pub timezone: Option<String>,
    /// How many seconds after an expected time a check-in still counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_seconds: Option<i64>,
    /// How many seconds before an expected time a check-in already counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub early_seconds: Option<i64>,
    /// When the run now due is expected, RFC 3339 UTC (its deadline is `deadline_at`);
    /// while pending, the schedule's next run; absent while paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_expected_at: Option<String>,
    /// How many failed runs in a row are tolerated before the errored alert (on a snitch
    /// with a schedule, or with a tolerance set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_tolerance: Option<u16>,
    /// How many missed runs in a row are tolerated before the missing alert.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed_tolerance: Option<u16>,
    /// How long a run may stay open before it times out, in seconds: the setting, or its
    /// default (the grace of a schedule, the length of an interval's period), never more
    /// than the 72 hours every run is held to. Shown on a
    /// snitch with a schedule, one that reports runs, or one with it set, as the two below.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_runtime_seconds: Option<i64>,
    /// Whether a run is open (started, not ended, not timed out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    /// The last run that ended or timed out; `null` before the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<RunJson>)]
    pub last_run: Option<Option<RunJson>>,
    /// The words that decide what a check-in e-mail means; only when some are set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email_keywords: Option<EmailKeywordsJson>,
}

/// A snitch's e-mail keywords (docs/api.md#snitch-json): what makes a check-in e-mail a
/// failed run, a successful one or a run's start, and where to look for them. Matching
/// ignores case; failure wins over success, success over start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = EmailKeywords)]
#[non_exhaustive]
pub struct EmailKeywordsJson {
    /// Words that make an e-mail a failed run (at most 10, each 1 to 100 characters).
    #[schema(max_items = 10, example = json!(["failed", "error"]))]
    pub failure: Vec<String>,
    /// Words that make an e-mail a successful run.
    #[schema(max_items = 10, example = json!(["completed"]))]
    pub success: Vec<String>,
    /// Words that make an e-mail a run's start.
    #[schema(max_items = 10, example = json!(["starting"]))]
    pub start: Vec<String>,
    /// Where to look: `both` (the subject and the body, the default), `subject` or
    /// `body`.
    #[schema(value_type = String, example = "both")]
    pub search: &'static str,
}

impl EmailKeywordsJson {
    /// The JSON of `keywords`; `None` when none is set.
    pub fn new(keywords: &EmailKeywords) -> Option<Self> {
        (!keywords.is_empty()).then(|| EmailKeywordsJson {
            failure: keywords.failure().to_vec(),
            success: keywords.success().to_vec(),
            start: keywords.start().to_vec(),
            search: keywords.scope().name(),
        })
    }
}

/// Where a snitch's check-ins are addressed: the check-in URLs' base and, on a server
/// that receives check-in e-mails, their domain.
#[derive(Debug, Clone, Copy)]
pub struct CheckInTargets<'a> {
    /// The base of check-in URLs.
    pub base: &'a str,
    /// The domain of check-in e-mail addresses, lowercase.
    pub email_domain: Option<&'a str>,
}

impl<'a> CheckInTargets<'a> {
    /// Check-in URLs under `base`, no e-mail address.
    pub fn new(base: &'a str) -> Self {
        CheckInTargets {
            base,
            email_domain: None,
        }
    }

    /// With e-mail addresses at `domain`, when some.
    pub fn with_email_domain(mut self, domain: Option<&'a str>) -> Self {
        self.email_domain = domain;
        self
    }

    /// The check-in URL of `token`.
    pub fn url(&self, token: &str) -> String {
        format!("{}/{token}", self.base.trim_end_matches('/'))
    }

    /// The check-in e-mail address of `token`, when e-mails are received.
    pub fn email(&self, token: &str) -> Option<String> {
        self.email_domain.map(|domain| format!("{token}@{domain}"))
    }
}

/// A run as the API, webhooks and the dashboard show it (docs/rules.md#runs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, ToSchema)]
#[schema(as = Run)]
pub struct RunJson {
    /// The client's id of the run (`rid`), if it gave one.
    pub rid: Option<String>,
    /// When it started, RFC 3339 UTC, when known.
    pub started_at: Option<String>,
    /// When it ended; `null` for a run that timed out.
    pub finished_at: Option<String>,
    /// How long it took in milliseconds: the duration the client reported, else its end
    /// less its start; for a run that timed out, how long it was open.
    pub duration_ms: Option<u64>,
    /// The exit status it reported; `null` for a success or a timeout.
    pub exit_status: Option<String>,
    /// Whether it timed out.
    pub timed_out: bool,
}

impl RunJson {
    /// The JSON of `run`.
    pub fn new(run: &snitch_core::Run) -> Self {
        RunJson {
            rid: run.run_id.as_ref().map(|r| r.as_str().to_owned()),
            started_at: format_opt(run.started_at),
            finished_at: format_opt(run.finished_at),
            duration_ms: run.duration_ms,
            exit_status: run.exit_status.clone(),
            timed_out: run.timed_out,
        }
    }
}

impl SnitchJson {
    /// The JSON of `s` at `now`, its check-in URL (and e-mail address) at `targets`.
    pub fn new(s: &Snitch, targets: CheckInTargets<'_>, now: snitch_core::Timestamp) -> Self {
        let runs = s.cadence().expected_runs();
        // Shown where a Dead Man's Snitch client cannot be surprised by them.
        let tolerances = runs.is_some() || s.failure_tolerance() > 0 || s.missed_tolerance() > 0;
        let state = s.state();
        let reports_runs = runs.is_some()
            || s.max_runtime_seconds().is_some()
            || state.running()
            || state.last_run().is_some();
        let now_or_created = state.anchor_at().unwrap_or_else(|| s.created_at());
        SnitchJson {
            token: s.token().to_string(),
            href: format!("/v1/snitches/{}", s.token()),
            name: s.name().as_str().to_owned(),
            tags: tag_names(s.tags().as_slice()),
            status: s.status().as_str(),
            notes: s.notes().as_str().to_owned(),
            checked_in_at: format_opt(s.state().checked_in_at()),
            check_in_url: targets.url(s.token().as_str()),
            check_in_email: targets.email(s.token().as_str()),
            interval: s.cadence().name(),
            type_: TypeJson {
                interval: s.cadence().name(),
            },
            alert_type: s.alert_type().as_str(),
            alert_email: s.alert_email().iter().map(|e| e.to_string()).collect(),
            created_at: format_time(s.created_at()),
            // Null while pending or paused (docs/rules.md#deadlines).
            deadline_at: format_opt(s.state().deadline_at()),
            schedule: runs.map(|r| r.schedule().expression().to_owned()),
            timezone: runs.map(|r| r.schedule().timezone().to_owned()),
            grace_seconds: runs.map(|r| r.grace().num_seconds()),
            early_seconds: runs.map(|r| r.early().num_seconds()),
            // The run now due; while pending, the schedule's next run (the first check-in
            // may come at any time, but this is when the job should run).
            next_expected_at: runs.and_then(|r| match s.state().deadline_at() {
                Some(deadline) => Some(format_time(r.expected_at(deadline))),
                None if s.status() == snitch_core::Status::Pending => {
                    r.schedule().next_after(now).map(format_time)
                }
                None => None,
            }),
            failure_tolerance: tolerances.then_some(s.failure_tolerance()),
            missed_tolerance: tolerances.then_some(s.missed_tolerance()),
            // What is in force (the setting or the default, never past the 72 hours every
            // run is held to), so the value can be sent back and changes nothing.
            max_runtime_seconds: reports_runs
                .then(|| s.runtime_allowed(now_or_created).num_seconds()),
            running: reports_runs.then_some(state.running()),
            last_run: reports_runs.then(|| state.last_run().map(RunJson::new)),
            email_keywords: EmailKeywordsJson::new(s.email_keywords()),
        }
    }
}

/// The names of `tags`, in order.
pub fn tag_names(tags: &[Tag]) -> Vec<String> {
    tags.iter().map(|t| t.as_str().to_owned()).collect()
}

/// Reads a create or update body. `None` is an empty body: no parameters.
pub fn snitch_fields(body: Option<&Value>) -> Result<SnitchFields, Validations> {
    let empty = Map::new();
    let object = json_object(body)?.unwrap_or(&empty);
    let mut problems = Validations::new();
    let mut fields = SnitchFields {
        name: text(object, "name", &mut problems),
        interval: text(object, "interval", &mut problems),
        alert_type: text(object, "alert_type", &mut problems),
        notes: text(object, "notes", &mut problems),
        schedule: text(object, "schedule", &mut problems),
        // `tz` is accepted for `timezone` (healthchecks' name).
        timezone: match object.contains_key("timezone") {
            true => text(object, "timezone", &mut problems),
            false => text(object, "tz", &mut problems),
        },
        grace_seconds: whole_number(object, "grace_seconds", SECONDS, &mut problems),
        early_seconds: whole_number(object, "early_seconds", SECONDS, &mut problems),
        failure_tolerance: whole_number(object, "failure_tolerance", RUNS, &mut problems),
        missed_tolerance: whole_number(object, "missed_tolerance", RUNS, &mut problems),
        max_runtime_seconds: whole_number(object, "max_runtime_seconds", SECONDS, &mut problems),
        ..SnitchFields::default()
    };
    // Compat: `type.interval` stands in for a missing top-level interval.
    if !object.contains_key("interval") {
        if let Some(Value::Object(type_)) = object.get("type") {
            fields.interval = text(type_, "interval", &mut problems);
        }
    }
    // `null` for alert_type means the default.
    if object.get("alert_type") == Some(&Value::Null) {
        fields.alert_type = None;
    }
    fields.tags = match object.get("tags") {
        None => None,
        Some(Value::Null) => Some(Vec::new()),
        Some(value) => strings(value, "tags", &mut problems),
    };
    fields.alert_email = match object.get("alert_email") {
        None => None,
        Some(Value::Null) => Some(Vec::new()),
        // The string form is one comma-separated list.
        Some(Value::String(s)) => Some(s.split(',').map(str::to_owned).collect()),
        Some(value) => strings(value, "alert_email", &mut problems),
    };
    fields.email_keywords = match object.get("email_keywords") {
        None => None,
        // `null` (as `{}`) means none.
        Some(Value::Null) => Some(EmailKeywordsInput::default()),
        Some(value) => email_keywords(value, &mut problems),
    };
    problems.into_result()?;
    Ok(fields)
}

/// The keys an `email_keywords` object may have.
const EMAIL_KEYWORDS_KEYS: [&str; 4] = ["failure", "success", "start", "search"];

/// An `email_keywords` object: three lists of strings (absent or `null`: empty) and
/// `search` (absent or `null`: `both`); every problem is one of `email_keywords`.
fn email_keywords(value: &Value, problems: &mut Validations) -> Option<EmailKeywordsInput> {
    const ATTRIBUTE: &str = "email_keywords";
    let Value::Object(object) = value else {
        problems.push(
            ATTRIBUTE,
            "must be an object of failure, success and start keywords and search",
        );
        return None;
    };
    if object
        .keys()
        .any(|k| !EMAIL_KEYWORDS_KEYS.contains(&k.as_str()))
    {
        problems.push(
            ATTRIBUTE,
            "may only have failure, success, start and search",
        );
        return None;
    }
    let mut valid = true;
    let mut list = |key: &str| match object.get(key) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_owned))
            .collect(),
        Some(_) => {
            problems.push(ATTRIBUTE, format!("{key} must be an array of strings"));
            valid = false;
            Vec::new()
        }
    };
    let (failure, success, start) = (list("failure"), list("success"), list("start"));
    let search = match object.get("search") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            problems.push(ATTRIBUTE, "search must be one of both, subject, body");
            valid = false;
            None
        }
    };
    valid.then_some(EmailKeywordsInput {
        failure,
        success,
        start,
        search,
    })
}

const SECONDS: &str = "must be a whole number of seconds";
const RUNS: &str = "must be a whole number of runs";

/// A whole JSON number (`problem` otherwise); `null` reads as not given.
fn whole_number(
    object: &Map<String, Value>,
    key: &str,
    problem: &str,
    problems: &mut Validations,
) -> Option<i64> {
    match object.get(key)? {
        Value::Null => None,
        Value::Number(n) => {
            let whole = n.as_i64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1e15)
                    .map(|f| f as i64)
            });
            if whole.is_none() {
                problems.push(key, problem);
            }
            whole
        }
        _ => {
            problems.push(key, problem);
            None
        }
    }
}

/// The object of a request body; `None` for an empty body. Anything else is refused.
fn json_object(body: Option<&Value>) -> Result<Option<&Map<String, Value>>, Validations> {
    match body {
        None => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => Err(Validations::single("base", "must be a JSON object")),
    }
}

/// A string attribute; `null` reads as empty (so a required one is blank).
fn text(object: &Map<String, Value>, key: &str, problems: &mut Validations) -> Option<String> {
    match object.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => Some(String::new()),
        _ => {
            problems.push(key, "must be a string");
            None
        }
    }
}

/// An array of strings.
pub fn strings(value: &Value, attribute: &str, problems: &mut Validations) -> Option<Vec<String>> {
    let items = match value {
        Value::Array(items) => items,
        _ => {
            problems.push(attribute, "must be an array of strings");
            return None;
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match item {
            Value::String(s) => out.push(s.clone()),
            _ => {
                problems.push(attribute, "must be an array of strings");
                return None;
            }
        }
    }
    Some(out)
}

/// The `until` of a pause body: absent, or a string.
pub fn pause_until(body: Option<&Value>) -> Result<Option<String>, Validations> {
    match body {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => match map.get("until") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(Validations::single(
                "until",
                "must be healthy, unpaused or an ISO 8601 time in the future",
            )),
        },
        Some(_) => Err(Validations::single("base", "must be a JSON object")),
    }
}

/// An event with its deliveries, for `GET /v1/snitches/<token>/events`.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventJson {
    /// Stable across delivery retries (the `Snitch-Event-Id` header).
    pub id: String,
    /// `snitch.reporting`, `snitch.missing`, `snitch.errored` or `snitch.paused`.
    #[serde(rename = "type")]
    #[schema(value_type = String, example = "snitch.missing")]
    pub kind: &'static str,
    /// When the event happened, RFC 3339 UTC.
    #[schema(example = "2026-11-23T03:00:04.120Z")]
    pub timestamp: String,
    /// The snitch's status after the event, as webhooks name it.
    #[schema(value_type = String)]
    pub status: &'static str,
    /// The status before the event, as webhooks name it.
    #[schema(value_type = String)]
    pub previous_status: &'static str,
    /// Its deliveries, in the order they were stored.
    pub deliveries: Vec<DeliveryJson>,
    /// Only for `snitch.missing`: how many periods passed without a check-in (at least 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed_periods: Option<u64>,
}

impl EventJson {
    /// The event with its deliveries as the API shows them.
    pub fn new(event: &Event, deliveries: &[Delivery]) -> Self {
        EventJson {
            id: event.id.clone(),
            kind: event.kind.as_str(),
            timestamp: format_time(event.at),
            status: event.status.webhook_name(),
            previous_status: event.previous_status.webhook_name(),
            deliveries: deliveries.iter().map(DeliveryJson::new).collect(),
            missed_periods: (event.kind == EventKind::Missing).then(|| event.missed_periods.max(1)),
        }
    }
}

/// What a cron schedule means (`GET /v1/schedules/preview`): its next expected times.
#[derive(Debug, Serialize, ToSchema)]
pub struct SchedulePreviewJson {
    /// The next expected times strictly after `after`, RFC 3339 UTC with milliseconds.
    pub times: Vec<String>,
    /// The same instants in the schedule's time zone, ISO 8601 with its offset.
    pub local: Vec<String>,
    /// What a person should know about these runs (a run daylight saving time moves).
    pub warnings: Vec<String>,
}

/// An outage as the caller's case saw it (`GET /v1/outages`, docs/rules.md#outages).
#[derive(Debug, Serialize, ToSchema)]
pub struct OutageJson {
    /// When no server of the store was alive any more, RFC 3339 UTC.
    pub started_at: String,
    /// When service resumed, RFC 3339 UTC.
    pub ended_at: String,
    /// How many of the caller's case's snitches got a fresh deadline because of it.
    pub snitches_deferred: u64,
}

impl OutageJson {
    /// The outage as the caller's case saw it.
    pub fn new(o: &CaseOutage) -> Self {
        OutageJson {
            started_at: format_time(o.outage.started_at),
            ended_at: format_time(o.outage.ended_at),
            snitches_deferred: o.snitches_deferred,
        }
    }
}

/// One delivery of an event (a webhook or an e-mail) with every attempt.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryJson {
    /// The delivery's id.
    pub id: String,
    /// The channel's kind: `webhook`, `email`, `slack`, `pagerduty`, ….
    #[schema(value_type = String)]
    pub channel: &'static str,
    /// The hook's URL without credentials (query values masked), or the recipients.
    pub target: String,
    /// `pending`, `delivered` or `failed`.
    #[schema(value_type = String)]
    pub state: &'static str,
    /// While pending: when it is tried next (or its lease ends), RFC 3339 UTC.
    pub next_attempt_at: Option<String>,
    /// Every attempt so far, oldest first.
    pub attempts: Vec<AttemptJson>,
}

/// One try at a delivery.
#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptJson {
    /// When the attempt started, RFC 3339 UTC.
    pub at: String,
    /// Whether it was delivered.
    pub ok: bool,
    /// The HTTP status or SMTP reply, or why it failed.
    pub detail: String,
    /// How long it took.
    pub duration_ms: u64,
}

impl DeliveryJson {
    /// The delivery as the API shows it (credentials never shown).
    pub fn new(d: &Delivery) -> Self {
        DeliveryJson {
            id: d.id.clone(),
            channel: d.channel.kind(),
            target: delivery_target(&d.channel),
            state: d.state.as_str(),
            next_attempt_at: d.next_attempt_at.map(format_time),
            attempts: d
                .attempts
                .iter()
                .map(|a| AttemptJson {
                    at: format_time(a.at),
                    ok: a.ok,
                    detail: a.detail.clone(),
                    duration_ms: a.duration_ms,
                })
                .collect(),
        }
    }
}

/// Where a delivery goes, fit to show: a hook's URL without credentials, the e-mail
/// recipients, or a vendor endpoint's origin alone (a chat webhook's path and a
/// Telegram URL hold secrets).
pub fn delivery_target(channel: &Channel) -> String {
    match channel {
        Channel::Webhook { url, .. } => without_credentials(url.as_str()),
        Channel::Email { to } => to.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", "),
        Channel::Native { settings, .. } => endpoint_origin(settings),
    }
}

/// A channel endpoint's `scheme://host[:port]/…`: never its path, query or credentials.
pub fn endpoint_origin(settings: &snitch_core::ChannelSettings) -> String {
    match settings
        .endpoint()
        .and_then(|u| url::Url::parse(u.as_str()).ok())
    {
        Some(u) => format!("{}/…", u.origin().ascii_serialization()),
        None => String::new(),
    }
}

/// What a hidden password or query value is shown as.
const MASK: &str = "***";

/// A URL with any `user:password@` removed and its query values masked: credentials are
/// never shown, and neither are tokens passed as query parameters (`?token=…`).
pub(crate) fn without_credentials(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            // Both only fail for URLs that cannot have credentials at all.
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            mask_query_values(&mut parsed);
            mask_secret_segments(&mut parsed);
            parsed.to_string()
        }
        Err(_) => url.to_owned(),
    }
}

/// A URL with its password, if any, and every query value replaced by `***`: the user
/// name and the query keys still tell which credentials a hook uses, the secrets are
/// never shown again.
pub(crate) fn password_masked(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some(MASK));
            }
            mask_query_values(&mut parsed);
            mask_secret_segments(&mut parsed);
            parsed.to_string()
        }
        Err(_) => url.to_owned(),
    }
}

/// Replaces the value of each `key=value` pair of the query by [`MASK`], keeping the keys
/// as written; pairs without a value (`?flag`, `?key=`) hide nothing and stay.
fn mask_query_values(url: &mut url::Url) {
    let Some(query) = url.query() else { return };
    let masked: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, value)) if !value.is_empty() => format!("{key}={MASK}"),
            _ => pair.to_owned(),
        })
        .collect();
    url.set_query(Some(&masked.join("&")));
}

/// How many characters of a secret path segment are kept to recognise the hook by.
const SECRET_SEGMENT_KEPT: usize = 4;

/// Whether a path segment looks like a secret: chat hooks (Slack, Discord, Mattermost,
/// Teams) carry their credential in the path. A long run of URL-safe characters mixing
/// letters and digits is one; words (`incoming-webhooks`) and plain numbers (ids) are not.
fn is_secret_segment(segment: &str) -> bool {
    segment.len() >= 16
        && segment
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && segment.bytes().any(|b| b.is_ascii_digit())
        && segment.bytes().any(|b| b.is_ascii_alphabetic())
}

/// Masks each secret-looking path segment but for its first few characters.
fn mask_secret_segments(url: &mut url::Url) {
    let Some(segments) = url.path_segments() else {
        return;
    };
    let segments: Vec<String> = segments.map(str::to_owned).collect();
    if !segments.iter().any(|s| is_secret_segment(s)) {
        return;
    }
    let masked: Vec<String> = segments
        .iter()
        .map(|s| {
            if is_secret_segment(s) {
                format!("{}{MASK}", &s[..SECRET_SEGMENT_KEPT])
            } else {
                s.clone()
            }
        })
        .collect();
    url.set_path(&masked.join("/"));
}

/// A hook as the API shows it; its secret is never shown.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookJson {
    /// The hook's id (for `DELETE /v1/webhooks/<id>`).
    pub id: String,
    /// The URL with its password, query values and secret path segments masked (`***`).
    pub url: String,
    /// When the hook was registered, RFC 3339 UTC.
    pub created_at: String,
}

impl WebhookJson {
    /// The hook as the API shows it (its secret never shown).
    pub fn new(hook: &Webhook) -> Self {
        WebhookJson {
            id: hook.id.clone(),
            url: password_masked(hook.url.as_str()),
            created_at: format_time(hook.created_at),
        }
    }
}

/// The `url` and optional `secret` of a webhook body.
pub fn webhook_fields(body: Option<&Value>) -> Result<(String, Option<String>), Validations> {
    let empty = Map::new();
    let object = json_object(body)?.unwrap_or(&empty);
    let mut problems = Validations::new();
    let url = text(object, "url", &mut problems).unwrap_or_default();
    let secret = match object.get("secret") {
        None | Some(Value::Null) => None,
        Some(_) => text(object, "secret", &mut problems),
    };
    problems.into_result()?;
    Ok((url, secret))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn instants_are_written_with_milliseconds_and_z() {
        let at = |text: &str| text.parse::<Timestamp>().unwrap();
        for (instant, written) in [
            ("2026-12-04T21:35:03.123456Z", "2026-12-04T21:35:03.123Z"),
            ("2026-12-04T21:35:03Z", "2026-12-04T21:35:03.000Z"),
            ("2026-03-29T01:30:00.5+02:00", "2026-03-28T23:30:00.500Z"),
            ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000Z"),
            ("9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"),
        ] {
            assert_eq!(format_time(at(instant)), written);
            // The same as the `format` string the wire used before.
            assert_eq!(
                format_time(at(instant)),
                at(instant).format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
            );
        }
    }

    #[test]
    fn credentials_in_hook_urls_are_never_shown() {
        let url = "https://ops:s3cret@hooks.acme.test/x?y=1";
        assert_eq!(without_credentials(url), "https://hooks.acme.test/x?y=***");
        assert_eq!(
            password_masked(url),
            "https://ops:***@hooks.acme.test/x?y=***"
        );
        assert_eq!(
            password_masked("https://hooks.acme.test/x"),
            "https://hooks.acme.test/x"
        );
    }

    #[test]
    fn secrets_in_the_paths_of_chat_hooks_are_masked() {
        for (url, shown) in [
            (
                "https://hooks.slack.com/services/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",
                "https://hooks.slack.com/services/T0A1B2C3D/B0E4F5G6H/a1B2***",
            ),
            (
                "https://discord.com/api/webhooks/1234567890123456789/AbC-9xYz_0123456789abcdefABCDEF",
                "https://discord.com/api/webhooks/1234567890123456789/AbC-***",
            ),
            (
                "https://chat.acme.test/hooks/x9k2m4p6q8r0s1t3u5v7w9y1z3",
                "https://chat.acme.test/hooks/x9k2***",
            ),
            (
                "https://hooks.acme.test/incoming-webhooks/deploys",
                "https://hooks.acme.test/incoming-webhooks/deploys",
            ),
        ] {
            assert_eq!(password_masked(url), shown);
            assert_eq!(without_credentials(url), shown);
        }
    }

    #[test]
    fn query_values_of_hook_urls_are_masked_and_keys_kept() {
        let url = "https://hooks.acme.test/x?token=abc123&flag&empty=&a%20b=c%3Dd&k=v=w#frag";
        let expected = "https://hooks.acme.test/x?token=***&flag&empty=&a%20b=***&k=***#frag";
        assert_eq!(password_masked(url), expected);
        assert_eq!(without_credentials(url), expected);
        assert_eq!(
            password_masked("https://u@hooks.acme.test/?token=abc"),
            "https://u@hooks.acme.test/?token=***",
            "a user name without a password stays"
        );
        assert_eq!(
            password_masked("https://hooks.acme.test/x?"),
            "https://hooks.acme.test/x?"
        );
    }

    #[test]
    fn compat_type_interval_is_read_when_interval_is_absent() {
        let body = json!({"name": "x", "type": {"interval": "daily"}});
        let f = snitch_fields(Some(&body)).expect("valid");
        assert_eq!(f.interval.as_deref(), Some("daily"));
        let body = json!({"name": "x", "interval": "hourly", "type": {"interval": "daily"}});
        let f = snitch_fields(Some(&body)).expect("valid");
        assert_eq!(f.interval.as_deref(), Some("hourly"));
    }

    #[test]
    fn nulls_mean_what_the_reference_says() {
        let body = json!({"alert_email": null, "tags": null, "notes": null, "alert_type": null});
        let f = snitch_fields(Some(&body)).expect("valid");
        assert_eq!(f.alert_email, Some(vec![]));
        assert_eq!(f.tags, Some(vec![]));
        assert_eq!(f.notes.as_deref(), Some(""));
        assert_eq!(f.alert_type, None);
    }

    #[test]
    fn alert_email_may_be_one_comma_separated_string() {
        let body = json!({"alert_email": "a@x.test,b@x.test"});
        let f = snitch_fields(Some(&body)).expect("valid");
        assert_eq!(
            f.alert_email,
            Some(vec!["a@x.test".to_owned(), "b@x.test".to_owned()])
        );
    }

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn email_keywords_are_read_as_an_object_of_lists_and_search() {
        let body = json!({"email_keywords": {
            "failure": ["FAILED", "say \"no\""],
            "success": ["O'Brien's OK", "réussi ✓"],
            "search": "subject",
        }});
        let f = snitch_fields(Some(&body)).expect("valid");
        assert_eq!(
            f.email_keywords,
            Some(EmailKeywordsInput {
                failure: words(&["FAILED", "say \"no\""]),
                success: words(&["O'Brien's OK", "réussi ✓"]),
                start: vec![],
                search: Some("subject".into()),
            })
        );
        // `null` lists are empty, a `null` search the default.
        let body = json!({"email_keywords": {"start": ["go"], "failure": null, "search": null}});
        let f = snitch_fields(Some(&body)).expect("valid");
        let given = f.email_keywords.expect("given");
        assert_eq!((given.start, given.search), (words(&["go"]), None));
        // `null` and `{}` mean none; absent, unchanged.
        for none in [json!(null), json!({})] {
            let f = snitch_fields(Some(&json!({"email_keywords": none}))).expect("valid");
            assert_eq!(f.email_keywords, Some(EmailKeywordsInput::default()));
        }
        let f = snitch_fields(Some(&json!({"name": "n"}))).expect("valid");
        assert_eq!(f.email_keywords, None);
    }

    #[test]
    fn email_keywords_of_another_shape_are_problems_of_email_keywords() {
        for (keywords, message) in [
            (json!("failed"), "must be an object"),
            (json!(["failed"]), "must be an object"),
            (
                json!({"failure": "failed"}),
                "failure must be an array of strings",
            ),
            (
                json!({"success": ["ok", 1]}),
                "success must be an array of strings",
            ),
            (
                json!({"start": [null]}),
                "start must be an array of strings",
            ),
            (json!({"search": 1}), "search must be one of"),
            (json!({"failure": ["x"], "subject": ["y"]}), "may only have"),
        ] {
            let body = json!({"name": 5, "email_keywords": keywords});
            let problems = snitch_fields(Some(&body)).expect_err("invalid");
            let found: Vec<_> = problems
                .iter()
                .map(|v| (v.attribute.as_str(), v.message.as_str()))
                .collect();
            assert_eq!(found.len(), 2, "{keywords}: {found:?}");
            assert_eq!(found[0].0, "name");
            assert_eq!(found[1].0, "email_keywords", "{keywords}");
            assert!(
                found[1].1.starts_with(message),
                "{keywords}: {}",
                found[1].1
            );
        }
    }

    fn a_snitch() -> Snitch {
        let case = snitch_core::CaseId::parse("acme").expect("valid");
        let token = snitch_core::Token::parse("tok00000000000000001").expect("valid");
        let name = snitch_core::SnitchName::parse("job").expect("valid");
        let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("valid");
        Snitch::new(token, case, name, snitch_core::Interval::Daily, at)
    }

    #[test]
    fn email_keywords_and_the_check_in_email_are_shown_only_when_set() {
        let s = a_snitch();
        let now = s.created_at();
        let plain = serde_json::to_value(SnitchJson::new(
            &s,
            CheckInTargets::new("https://nosnch.test/"),
            now,
        ))
        .expect("JSON");
        let object = plain.as_object().expect("object");
        assert!(!object.contains_key("email_keywords"), "{plain}");
        assert!(!object.contains_key("check_in_email"), "{plain}");
        assert_eq!(
            plain["check_in_url"],
            "https://nosnch.test/tok00000000000000001"
        );

        let keywords = EmailKeywords::parse(
            &words(&["FAILED"]),
            &[],
            &words(&["début"]),
            snitch_core::KeywordScope::Body,
        )
        .expect("valid");
        let shown = EmailKeywordsJson::new(&keywords).expect("set");
        assert_eq!(
            serde_json::to_value(&shown).expect("JSON"),
            json!({"failure": ["FAILED"], "success": [], "start": ["début"], "search": "body"})
        );
        assert_eq!(EmailKeywordsJson::new(&EmailKeywords::default()), None);

        let targets = CheckInTargets::new("https://nosnch.test")
            .with_email_domain(Some("check-ins.example.com"));
        let with_email = serde_json::to_value(SnitchJson::new(&s, targets, now)).expect("JSON");
        assert_eq!(
            with_email["check_in_email"],
            "tok00000000000000001@check-ins.example.com"
        );
    }

    #[test]
    fn read_only_and_unknown_fields_are_ignored_and_wrong_types_reported() {
        let body = json!({"token": "x", "status": "healthy", "bogus": 1, "name": "n"});
        assert!(snitch_fields(Some(&body)).is_ok());
        let body = json!({"name": 5, "tags": "a"});
        let problems = snitch_fields(Some(&body)).expect_err("wrong types");
        let attributes: Vec<_> = problems.iter().map(|v| v.attribute.as_str()).collect();
        assert_eq!(attributes, ["name", "tags"]);
    }
}
