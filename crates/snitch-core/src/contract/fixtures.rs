//! The contract suite's fixtures: fixed instants, cases, snitches and changes built
//! around them, and small helpers that store and read them back. Public ones are for a
//! store's own tests too.

use crate::outbox::{Attempt, ClaimLimits, Delivery};
use crate::storage::ApiKeyRecord;
use crate::webhook::{Webhook, WebhookSecret, WebhookUrl};
use std::sync::Arc;

use chrono::{Duration, TimeZone, Utc};

use crate::cadence::Cadence;
use crate::calendar::{Interval, Timestamp};
use crate::email::{EmailKeywords, KeywordScope};
use crate::machine;
use crate::schedule::{CronSchedule, ExpectedRuns};
use crate::snitch::{CheckIn, PauseUntil, Snitch};
use crate::storage::{Change, Storage};
use crate::types::{
    AlertEmails, AlertType, Case, CaseId, CheckInMessage, Notes, Outcome, Plan, SnitchName, Status,
    Tag, Tags, Token,
};

/// A fixed instant the fixtures are built around.
pub fn t0() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 11, 22, 3, 0, 0)
        .single()
        .unwrap_or_else(|| unreachable!("a valid date"))
}

/// A case with a valid id made from `name`.
pub fn case(name: &str) -> Case {
    Case::new(CaseId::parse(name).expect("fixture case names are valid"))
}

/// A token made from a number, e.g. `token(7)` is `tok00000000000000007`.
pub fn token(n: u64) -> Token {
    Token::parse(&format!("tok{n:017}")).expect("fixture tokens are valid")
}

/// A fresh, pending snitch of `case`, created at `created_at`.
pub fn snitch(case: &Case, n: u64, created_at: Timestamp) -> Snitch {
    Snitch {
        token: token(n),
        case_id: case.id.clone(),
        name: SnitchName::parse(&format!("job {n}")).expect("valid name"),
        tags: Tags::default(),
        notes: Notes::default(),
        cadence: Interval::Hourly.into(),
        alert_type: AlertType::Basic,
        alert_email: AlertEmails::default(),
        failure_tolerance: 0,
        missed_tolerance: 0,
        max_runtime_seconds: None,
        email_keywords: Default::default(),
        created_at,
        state: machine::initial_state(),
        version: 1,
    }
}

/// `minutes` after [`t0`]. An hourly snitch checked in at `at(m)` with `0 <= m < 60` is
/// due at `at(120)`, the end of the next hour.
pub fn at(minutes: i64) -> Timestamp {
    t0() + Duration::minutes(minutes)
}

/// A successful check-in at `at`.
pub fn success(at: Timestamp) -> CheckIn {
    CheckIn {
        at,
        outcome: Outcome::Success,
        message: None,
        ..Default::default()
    }
}

/// A failed check-in at `at`, with an exit status and a message.
pub fn failure(at: Timestamp, exit_status: &str, message: &str) -> CheckIn {
    CheckIn {
        at,
        outcome: Outcome::Error {
            exit_status: exit_status.to_owned(),
        },
        message: CheckInMessage::truncating(message),
        ..Default::default()
    }
}

/// The change a check-in makes to `snitch`, as the service computes it: deadlines that
/// passed before it first, then the check-in itself.
pub fn checked_in_with(snitch: &Snitch, check_in: CheckIn) -> Change {
    let step = machine::advance(snitch, check_in.at)
        .then(|s| machine::check_in(s, &check_in, &Plan::default()));
    Change::new(snitch, step.snitch, vec![check_in], step.events)
}

/// [`checked_in_with`] as the service makes it of a batch of one: the check-in numbered,
/// the snitch counting it.
pub fn numbered_check_in(snitch: &Snitch, check_in: CheckIn) -> Change {
    let pending = crate::check_in_step::PendingCheckIns::new(
        vec![check_in],
        Vec::new(),
        None,
        crate::snitch::CHECK_INS_KEPT,
    );
    pending.change_from(snitch, &Case::new(snitch.case_id.clone()))
}

/// The change a successful check-in at `at` makes to `snitch`.
pub fn checked_in(snitch: &Snitch, at: Timestamp) -> Change {
    checked_in_with(snitch, success(at))
}

/// The change the deadline sweep makes to `snitch` at `now` (missed deadlines, ended
/// pauses).
pub fn advanced(snitch: &Snitch, now: Timestamp) -> Change {
    let step = machine::advance(snitch, now);
    Change::new(snitch, step.snitch, Vec::new(), step.events)
}

/// The change pausing `snitch` at `now` makes.
pub fn paused(snitch: &Snitch, until: PauseUntil, now: Timestamp) -> Change {
    let step = machine::advance(snitch, now)
        .then(|s| machine::pause(s, until, now).expect("the fixture snitch can be paused"));
    Change::new(snitch, step.snitch, Vec::new(), step.events)
}

/// A cron schedule with these spans (seconds), as a snitch's cadence.
pub fn cron_cadence(expression: &str, timezone: &str, grace: i64, early: i64) -> Cadence {
    ExpectedRuns::with_spans(
        CronSchedule::parse(expression, timezone).expect("a valid schedule"),
        Duration::seconds(grace),
        Duration::seconds(early),
    )
    .expect("valid spans")
    .into()
}

/// A snitch with every field set and a state the machine reached through check-ins, an
/// error and a timed pause: smart daily, paused until `t0 + 5 days`, errored before the
/// pause and checked in while paused.
pub fn rich_snitch(case: &Case, n: u64) -> Snitch {
    let mut s = snitch(case, n, t0());
    s.name = SnitchName::parse("Nightly backup — prod ✓").expect("valid name");
    s.tags = Tags::parse(&["backup", "db", "prod eu"]).expect("valid tags");
    s.notes = Notes::parse("Runs at 03:00 UTC.\nSee the wiki: “Backups”, O'Brien's page.")
        .expect("valid notes");
    s.alert_email =
        AlertEmails::parse(&["ops@example.test", "dba@example.test"]).expect("valid addresses");
    s.cadence = Interval::Daily.into();
    s.alert_type = AlertType::Smart;

    let day = |d: i64, minutes: i64| t0() + Duration::days(d) + Duration::minutes(minutes);
    s = checked_in(&s, day(0, 5)).snitch;
    s = checked_in(&s, day(1, 7)).snitch;
    s = checked_in(&s, day(2, 3)).snitch;
    s = checked_in_with(&s, failure(day(3, 4), "2", "disk full")).snitch;
    s = paused(&s, PauseUntil::At(day(5, 0)), day(3, 60)).snitch;
    s = checked_in(&s, day(3, 120)).snitch;
    s.version = 7;

    let state = &s.state;
    assert_eq!(state.status, Status::Paused, "fixture: paused");
    let pause = state.pause.as_ref().expect("fixture: paused");
    assert_eq!(
        pause.resume_status,
        Status::Errored,
        "fixture: errored before"
    );
    assert!(
        pause.checked_in_while_paused,
        "fixture: checked in while paused"
    );
    assert!(state.checked_in_at.is_some() && state.last_check_in_at.is_some());
    assert!(state.anchor_at.is_some() && state.last_errored_alert_at.is_some());
    assert_eq!(state.smart_offsets_ms.len(), 5, "fixture: learned offsets");
    assert!(
        state.event_seq >= 3,
        "fixture: reporting, errored and paused"
    );
    // Tolerances set after the steps above (which they would have changed), and runs in
    // a row counted, as a store must keep them.
    s.failure_tolerance = 3;
    s.missed_tolerance = crate::snitch::TOLERANCE_MAX;
    s.state.consecutive_failures = 2;
    s.state.consecutive_misses = 1;
    s.email_keywords = rich_email_keywords();
    s
}

/// E-mail keywords in every list, with quotes, a backslash, braces, the word NULL and
/// non-ASCII text, looked for in the subject only.
pub fn rich_email_keywords() -> EmailKeywords {
    let words = |list: &[&str]| list.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    EmailKeywords::parse(
        &words(&["FAILED", r#"say "no""#, "échec ✗"]),
        &words(&["O'Brien's OK", r"back\slash {x}", "NULL"]),
        &words(&["Start"]),
        KeywordScope::Subject,
    )
    .expect("valid keywords")
}

/// A limit no test reaches.
pub(crate) const NO_LIMIT: u32 = 1_000;
/// A `now` after every instant the tests use.
pub(crate) fn far_future() -> Timestamp {
    t0() + Duration::days(365)
}

pub(crate) async fn with_case(store: &Arc<dyn Storage>, name: &str) -> Case {
    let case = case(name);
    store.upsert_case(&case).await.expect("upsert the case");
    case
}

pub(crate) async fn insert(store: &Arc<dyn Storage>, snitch: &Snitch) {
    store
        .insert_snitch(snitch, NO_LIMIT)
        .await
        .expect("insert the snitch");
}

/// Saves `change` and returns the snitch as it now is.
pub(crate) async fn apply(store: &Arc<dyn Storage>, change: Change) -> Snitch {
    store.save(&change).await.expect("save the change");
    change.snitch
}

/// Inserts pending snitch `n` of `case` and saves a successful check-in at `at`.
pub(crate) async fn insert_checked_in(
    store: &Arc<dyn Storage>,
    case: &Case,
    n: u64,
    at: Timestamp,
) -> Snitch {
    let fresh = snitch(case, n, t0());
    insert(store, &fresh).await;
    apply(store, checked_in(&fresh, at)).await
}

pub(crate) async fn stored(store: &Arc<dyn Storage>, token: &Token) -> Option<Snitch> {
    store.snitch(token).await.expect("read the snitch")
}

pub(crate) async fn listed(store: &Arc<dyn Storage>, case: &Case, tags: &[&str]) -> Vec<Token> {
    let tags: Vec<Tag> = tags
        .iter()
        .map(|t| Tag::parse(t).expect("valid tag"))
        .collect();
    let snitches = store
        .snitches(&case.id, &tags)
        .await
        .expect("list the snitches");
    tokens(&snitches)
}

pub(crate) async fn due(store: &Arc<dyn Storage>, now: Timestamp, limit: usize) -> Vec<Token> {
    tokens(&store.due(now, limit).await.expect("read due snitches"))
}

pub(crate) async fn next_wake_at(store: &Arc<dyn Storage>) -> Option<Timestamp> {
    store.next_wake_at().await.expect("read the next wake-up")
}

pub(crate) fn tokens(snitches: &[Snitch]) -> Vec<Token> {
    snitches.iter().map(|s| s.token.clone()).collect()
}

pub(crate) fn tokens_of(numbers: &[u64]) -> Vec<Token> {
    numbers.iter().copied().map(token).collect()
}

pub(crate) fn newest_first<T: Clone>(oldest_first: &[T]) -> Vec<T> {
    oldest_first.iter().rev().cloned().collect()
}

/// The change the service makes for check-ins saved together.
pub(crate) fn several_check_ins(snitch: &Snitch, check_ins: &[CheckIn]) -> Change {
    let mut step = machine::advance(snitch, check_ins[0].at);
    for c in check_ins {
        step = step
            .then(|s| machine::advance(s, c.at))
            .then(|s| machine::check_in(s, c, &Plan::default()));
    }
    Change::new(snitch, step.snitch, check_ins.to_vec(), step.events)
}

/// A hook of `case` with id `hook<n>`, registered `n` minutes after [`t0`].
pub fn webhook(case: &Case, n: i64, secret: Option<&str>) -> Webhook {
    Webhook {
        id: format!("hook{n}"),
        case_id: case.id.clone(),
        url: WebhookUrl::parse(&format!("https://user:pw@hooks.example.test/{n}"))
            .expect("fixture URLs are valid"),
        secret: secret.map(|s| WebhookSecret::parse(s).expect("fixture secrets are valid")),
        created_at: at(n),
    }
}

pub(crate) fn attempt(at: Timestamp, ok: bool) -> Attempt {
    Attempt {
        at,
        ok,
        detail: if ok {
            "HTTP 204".into()
        } else {
            "HTTP 500".into()
        },
        duration_ms: 12,
    }
}

pub(crate) fn ids(deliveries: &[Delivery]) -> Vec<String> {
    deliveries.iter().map(|d| d.id.clone()).collect()
}

/// A hook of `case` to `https://<host>/<n>`, with an id unique across cases.
pub(crate) fn hook_to(case: &Case, n: i64, host: &str) -> Webhook {
    Webhook {
        id: format!("{}-hook{n}", case.id.as_str()),
        case_id: case.id.clone(),
        url: WebhookUrl::parse(&format!("https://{host}/{n}")).expect("valid URL"),
        secret: None,
        created_at: at(n),
    }
}

pub(crate) fn limits(
    webhooks: usize,
    emails: usize,
    per_case: usize,
    per_destination: usize,
) -> ClaimLimits {
    ClaimLimits {
        webhooks,
        emails,
        per_case_channel: per_case,
        per_destination,
        case_channels_in_flight: Vec::new(),
        destinations_in_flight: Vec::new(),
    }
}

pub(crate) fn secs(n: i64) -> Timestamp {
    t0() + Duration::seconds(n)
}

/// A key of `case` with id `key-<n>` and digest `digest-<n>`, made at minute `n`.
pub fn api_key(case: &Case, n: i64) -> ApiKeyRecord {
    ApiKeyRecord {
        id: format!("key-{n}"),
        case_id: case.id.clone(),
        digest: format!("digest-{n}"),
        prefix: format!("pre{n}"),
        label: format!("label {n}"),
        created_at: at(n),
        last_used_at: None,
        revoked: false,
    }
}
