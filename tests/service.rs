//! The service's operations on the memory store: validation, plan limits, holds,
//! ownership, tags, pauses, check-ins and the sweep.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use snitch::core::{
    CheckInMessage, EventKind, SequentialTokens, ServiceError, SweepReport, Tag, Validation,
};
use snitch::http::ErrorType;
use snitch::prelude::{
    Case, CaseId, ManualClock, Outcome, SnitchFields, SnitchService, Status, Storage,
};
use snitch::store::memory::MemoryStorage;

struct World {
    service: SnitchService,
    clock: Arc<ManualClock>,
    acme: Case,
    other: Case,
}

impl World {
    /// Sets the clock to `t`, then runs the sweep at `t`.
    async fn tick_at(&self, t: DateTime<Utc>) -> SweepReport {
        self.clock.set(t);
        self.service.tick(t).await.expect("sweep")
    }
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("valid test time")
        .to_utc()
}

async fn world() -> World {
    let storage = Arc::new(MemoryStorage::new());
    let clock = Arc::new(ManualClock::new(at("2026-11-22T03:00:00.123456Z")));
    let mut acme = Case::new(CaseId::parse("acme").expect("valid"));
    acme.plan.max_snitches = 3;
    let other = Case::new(CaseId::parse("other").expect("valid"));
    storage.upsert_case(&acme).await.expect("store case");
    storage.upsert_case(&other).await.expect("store case");
    let service = SnitchService::with_tokens(
        storage,
        clock.clone(),
        Arc::new(SequentialTokens::default()),
    )
    // Time jumps here are the model's, not our downtime: outages are tests/outages.rs's.
    .with_outage_threshold(chrono::Duration::days(36_500));
    World {
        service,
        clock,
        acme,
        other,
    }
}

fn fields(name: &str, interval: &str) -> SnitchFields {
    SnitchFields {
        name: Some(name.into()),
        interval: Some(interval.into()),
        ..Default::default()
    }
}

fn problems(err: ServiceError) -> Vec<Validation> {
    match err {
        ServiceError::Invalid(v) => v.into_iter().collect(),
        other => panic!("expected a validation error, got {other:?}"),
    }
}

#[tokio::test]
async fn create_fills_defaults_and_truncates_time_to_milliseconds() {
    let w = world().await;
    let s = w
        .service
        .create(&w.acme, &fields("  backup  ", "daily"))
        .await
        .expect("valid");
    assert_eq!(s.name().as_str(), "backup");
    assert_eq!(s.status(), Status::Pending);
    assert_eq!(s.state().checked_in_at(), None);
    assert_eq!(s.state().deadline_at(), None);
    assert!(s.tags().is_empty() && s.notes().as_str().is_empty() && s.alert_email().is_empty());
    assert_eq!(s.created_at(), at("2026-11-22T03:00:00.123Z"));
    assert_eq!(s.token().as_str(), "tok00000000000000001");
    let got = w
        .service
        .get(&w.acme, s.token().as_str())
        .await
        .expect("stored");
    assert_eq!(got, s);
}

#[tokio::test]
async fn create_reports_every_problem_at_once() {
    let w = world().await;
    let err = w
        .service
        .create(&w.acme, &SnitchFields::default())
        .await
        .expect_err("nothing given");
    assert_eq!(ErrorType::of(&err), Some(ErrorType::ResourceInvalid));
    assert_eq!(
        problems(err),
        [
            Validation::new("name", "can't be blank"),
            Validation::new("interval", "can't be blank"),
        ]
    );

    let bad = SnitchFields {
        name: Some("x".repeat(256)),
        interval: Some("fortnightly".into()),
        alert_type: Some("clever".into()),
        alert_email: Some(vec!["nope".into()]),
        notes: Some("n".repeat(10_001)),
        tags: Some(vec!["a,b".into()]),
        ..SnitchFields::default()
    };
    let err = w.service.create(&w.acme, &bad).await.expect_err("invalid");
    let attributes: Vec<String> = problems(err).into_iter().map(|v| v.attribute).collect();
    assert_eq!(
        attributes,
        [
            "name",
            "interval",
            "alert_type",
            "alert_email",
            "notes",
            "tags"
        ]
    );
}

#[tokio::test]
async fn smart_alerts_need_an_hourly_or_longer_interval() {
    let w = world().await;
    let mut smart_minute = fields("fast", "5_minute");
    smart_minute.alert_type = Some("smart".into());
    let err = w
        .service
        .create(&w.acme, &smart_minute)
        .await
        .expect_err("smart needs an hour");
    assert_eq!(
        problems(err),
        [Validation::new(
            "alert_type",
            "smart alerts need an interval of an hour or longer"
        )]
    );

    let mut smart_hourly = fields("slow", "hourly");
    smart_hourly.alert_type = Some("smart".into());
    let s = w
        .service
        .create(&w.acme, &smart_hourly)
        .await
        .expect("valid");
    let to_minute = SnitchFields {
        interval: Some("1_minute".into()),
        ..Default::default()
    };
    let err = w
        .service
        .update(&w.acme, s.token().as_str(), &to_minute)
        .await
        .expect_err("the combination is checked on update too");
    assert_eq!(problems(err)[0].attribute, "alert_type");
}

#[tokio::test]
async fn the_plan_limit_and_holds_refuse_with_their_types() {
    let mut w = world().await;
    for n in 0..3 {
        w.service
            .create(&w.acme, &fields(&format!("job {n}"), "hourly"))
            .await
            .expect("within the plan");
    }
    let err = w
        .service
        .create(&w.acme, &fields("one too many", "hourly"))
        .await
        .expect_err("over the plan");
    assert_eq!(ErrorType::of(&err), Some(ErrorType::PlanLimitReached));

    let token = w.service.list(&w.acme, &[]).await.expect("list")[0]
        .token()
        .clone();
    w.acme.on_hold = true;
    let err = w.service.list(&w.acme, &[]).await.expect_err("on hold");
    assert_eq!(ErrorType::of(&err), Some(ErrorType::AccountOnHold));
    assert!(matches!(
        w.service.get(&w.acme, token.as_str()).await,
        Err(ServiceError::AccountOnHold)
    ));
    // Check-ins of a case on hold still count.
    let s = w
        .service
        .check_in(token.as_str(), Outcome::Success, None)
        .await
        .expect("check-ins work on hold");
    assert_eq!(s.status(), Status::Healthy);
}

#[tokio::test]
async fn another_cases_snitch_is_not_found() {
    let w = world().await;
    let s = w
        .service
        .create(&w.acme, &fields("mine", "hourly"))
        .await
        .expect("valid");
    let token = s.token().as_str();
    let not_found = |r: Result<(), ServiceError>| {
        assert_eq!(
            ErrorType::of(&r.expect_err("not owned")),
            Some(ErrorType::ResourceNotFound)
        )
    };
    not_found(w.service.get(&w.other, token).await.map(|_| ()));
    not_found(
        w.service
            .update(&w.other, token, &SnitchFields::default())
            .await
            .map(|_| ()),
    );
    not_found(
        w.service
            .add_tags(&w.other, token, &["x".into()])
            .await
            .map(|_| ()),
    );
    not_found(w.service.remove_tag(&w.other, token, "x").await.map(|_| ()));
    not_found(w.service.pause(&w.other, token, None).await);
    not_found(w.service.unpause(&w.other, token).await);
    not_found(w.service.delete(&w.other, token).await);
    not_found(w.service.get(&w.acme, "no-such-token").await.map(|_| ()));
    assert!(w
        .service
        .list(&w.other, &[])
        .await
        .expect("list")
        .is_empty());
    assert_eq!(w.service.get(&w.acme, token).await.expect("still there"), s);
}

#[tokio::test]
async fn tags_keep_order_drop_duplicates_and_filter_the_list() {
    let w = world().await;
    let mut with_tags = fields("a", "hourly");
    with_tags.tags = Some(vec!["prod".into(), "db".into()]);
    let a = w.service.create(&w.acme, &with_tags).await.expect("valid");
    let b = w
        .service
        .create(&w.acme, &fields("b", "hourly"))
        .await
        .expect("valid");

    let tags = w
        .service
        .add_tags(
            &w.acme,
            a.token().as_str(),
            &["db".into(), "eu west".into()],
        )
        .await
        .expect("add");
    let names: Vec<&str> = tags.iter().map(Tag::as_str).collect();
    assert_eq!(names, ["prod", "db", "eu west"]);
    let err = w
        .service
        .add_tags(&w.acme, a.token().as_str(), &[])
        .await
        .expect_err("one or more tags");
    assert_eq!(ErrorType::of(&err), Some(ErrorType::ResourceInvalid));

    let filter = SnitchService::parse_tag_filter("prod,eu west").expect("valid filter");
    let listed = w.service.list(&w.acme, &filter).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].token(), a.token());
    let everything = SnitchService::parse_tag_filter("").expect("empty filter");
    let listed = w.service.list(&w.acme, &everything).await.expect("list");
    let order: Vec<_> = listed.iter().map(|s| s.token().clone()).collect();
    assert_eq!(
        order,
        [a.token().clone(), b.token().clone()],
        "oldest first"
    );

    let tags = w
        .service
        .remove_tag(&w.acme, a.token().as_str(), "eu west")
        .await
        .expect("remove");
    assert_eq!(tags.len(), 2);
    let tags = w
        .service
        .remove_tag(&w.acme, a.token().as_str(), "absent")
        .await
        .expect("removing an absent tag is harmless");
    assert_eq!(tags.len(), 2);

    let replace = SnitchFields {
        tags: Some(vec![]),
        ..Default::default()
    };
    let s = w
        .service
        .update(&w.acme, a.token().as_str(), &replace)
        .await
        .expect("update");
    assert!(s.tags().is_empty(), "an empty array removes all tags");
}

#[tokio::test]
async fn pause_validates_until_and_state() {
    let w = world().await;
    let s = w
        .service
        .create(&w.acme, &fields("job", "hourly"))
        .await
        .expect("valid");
    let token = s.token().as_str();
    let err = w
        .service
        .pause(&w.acme, token, None)
        .await
        .expect_err("pending");
    assert_eq!(
        problems(err),
        [Validation::new("status", "can't be paused while pending")]
    );
    w.service
        .check_in(token, Outcome::Success, None)
        .await
        .expect("check in");
    for bad in [
        "tomorrow",
        "2026-11-22T02:00:00Z",
        "2026-11-22T03:00:00.123Z",
    ] {
        let err = w
            .service
            .pause(&w.acme, token, Some(bad))
            .await
            .expect_err(bad);
        assert_eq!(problems(err)[0].attribute, "until", "{bad}");
    }
    w.service
        .pause(&w.acme, token, Some("2026-11-22T05:00:01+02:00"))
        .await
        .expect("any offset is accepted: this is 03:00:01Z, just in the future");
    let s = w.service.get(&w.acme, token).await.expect("get");
    assert_eq!(s.status(), Status::Paused);
    assert_eq!(s.wake_at(), Some(at("2026-11-22T03:00:01Z")));
    w.clock.advance(Duration::seconds(1));
    w.service.tick(w.service.now()).await.expect("sweep");
    let s = w.service.get(&w.acme, token).await.expect("get");
    assert_eq!(s.status(), Status::Healthy, "resumed at its time");
}

#[tokio::test]
async fn check_ins_are_recorded_with_their_messages_and_unknown_tokens_are_not_found() {
    let w = world().await;
    let s = w
        .service
        .create(&w.acme, &fields("job", "hourly"))
        .await
        .expect("valid");
    let token = s.token().as_str();
    let message = CheckInMessage::truncating(&"m".repeat(300));
    let s = w
        .service
        .check_in(token, Outcome::from_exit_status(Some("3")), message.clone())
        .await
        .expect("check in");
    assert_eq!(s.status(), Status::Errored);
    let history = w
        .service
        .check_ins(&w.acme, token, 10)
        .await
        .expect("history");
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].message, message);
    assert_eq!(
        history[0].message.as_ref().map(|m| m.as_str().len()),
        Some(256)
    );
    let events = w.service.events(&w.acme, token, 10).await.expect("events");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, EventKind::Errored);
    let told = events[0].check_in.as_ref().expect("the errored check-in");
    assert_eq!(
        (told.at, &told.outcome, &told.message),
        (history[0].at, &history[0].outcome, &history[0].message)
    );

    for bad in ["tok00000000000000099", "short", "../../etc", ""] {
        assert!(matches!(
            w.service.check_in(bad, Outcome::Success, None).await,
            Err(ServiceError::NotFound)
        ));
    }
    w.service.delete(&w.acme, token).await.expect("delete");
    assert!(matches!(
        w.service.check_in(token, Outcome::Success, None).await,
        Err(ServiceError::NotFound)
    ));
    assert!(matches!(
        w.service.delete(&w.acme, token).await,
        Err(ServiceError::NotFound)
    ));
}

#[tokio::test]
async fn the_sweep_declares_missing_snitches_once_per_period() {
    let w = world().await;
    let mut tokens = Vec::new();
    for n in 0..3 {
        let s = w
            .service
            .create(&w.acme, &fields(&format!("job {n}"), "1_minute"))
            .await
            .expect("valid");
        tokens.push(s.token().clone());
    }
    // Two check in, one stays pending.
    for t in &tokens[..2] {
        w.service
            .check_in(t.as_str(), Outcome::Success, None)
            .await
            .expect("check in");
    }
    let storage = w.service.storage().clone();
    assert_eq!(
        storage.next_wake_at().await.expect("read"),
        Some(at("2026-11-22T03:02:00Z"))
    );
    let report = w
        .service
        .tick(at("2026-11-22T03:01:59.999Z"))
        .await
        .expect("sweep");
    assert_eq!(report.events, 0);

    let report = w.tick_at(at("2026-11-22T03:02:30Z")).await;
    assert_eq!((report.snitches, report.events), (2, 2), "03:02 passed");
    let report = w.tick_at(at("2026-11-22T03:04:30Z")).await;
    // 03:03 and 03:04 passed for each of the two: one catch-up event each.
    assert_eq!((report.snitches, report.events), (2, 2));
    let again = w.service.tick(w.service.now()).await.expect("sweep");
    assert_eq!(again.events, 0, "a sweep never repeats an event");
    for t in &tokens[..2] {
        let s = w.service.get(&w.acme, t.as_str()).await.expect("get");
        assert_eq!(s.status(), Status::Failed);
        let events = w
            .service
            .events(&w.acme, t.as_str(), 10)
            .await
            .expect("events");
        let kinds: Vec<_> = events.iter().map(|e| (e.kind, e.missed_periods)).collect();
        assert_eq!(
            kinds,
            [
                (EventKind::Missing, 2),
                (EventKind::Missing, 1),
                (EventKind::Reporting, 0)
            ]
        );
    }
    let pending = w
        .service
        .get(&w.acme, tokens[2].as_str())
        .await
        .expect("get");
    assert_eq!(pending.status(), Status::Pending);
}

#[tokio::test]
async fn concurrent_check_ins_and_sweeps_lose_nothing() {
    let w = world().await;
    let s = w
        .service
        .create(&w.acme, &fields("busy", "1_minute"))
        .await
        .expect("valid");
    let token = s.token().to_string();
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let service = w.service.clone();
        let token = token.clone();
        tasks.push(tokio::spawn(async move {
            service.check_in(&token, Outcome::Success, None).await
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("every check-in is stored");
    }
    let history = w
        .service
        .check_ins(&w.acme, &token, 100)
        .await
        .expect("history");
    assert_eq!(history.len(), 50);
    let events = w
        .service
        .events(&w.acme, &token, 100)
        .await
        .expect("events");
    assert_eq!(
        events.len(),
        1,
        "exactly one reporting for the first check-in"
    );
}

#[tokio::test]
async fn the_wake_hook_hears_of_deadlines_that_moved_earlier_only() {
    let w = world().await;
    let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = heard.clone();
    let service = w
        .service
        .clone()
        .with_wake_hook(Arc::new(move |t| sink.lock().expect("ok").push(t)));
    let s = service
        .create(&w.acme, &fields("job", "daily"))
        .await
        .expect("valid");
    let token = s.token().as_str();
    service
        .check_in(token, Outcome::Success, None)
        .await
        .expect("check in");
    // A later check-in moves the deadline later: nobody needs waking.
    w.clock.advance(Duration::days(1));
    service
        .check_in(token, Outcome::Success, None)
        .await
        .expect("check in");
    let hourly = SnitchFields {
        interval: Some("hourly".into()),
        ..Default::default()
    };
    service
        .update(&w.acme, token, &hourly)
        .await
        .expect("update");
    assert_eq!(
        *heard.lock().expect("ok"),
        [at("2026-11-24T00:00:00Z"), at("2026-11-23T05:00:00Z")],
        "the first deadline, then the one the shorter interval moved earlier"
    );
}

/// One snitch the store fails to save does not stop the sweep: the other due snitches are
/// saved (and their leases end), and the failure is reported at the end. The failing one
/// keeps its lease and is taken again by a later sweep.
#[tokio::test]
async fn a_snitch_the_store_cannot_save_does_not_stop_the_sweep() {
    use std::sync::Mutex;

    use snitch::core::contract::{at, case, checked_in, snitch as fixture};
    use snitch::core::storage::MockStorage;
    use snitch::prelude::StorageError;

    let acme = case("acme");
    let due: Vec<snitch::prelude::Snitch> = (1..=3)
        .map(|n| {
            checked_in(&fixture(&acme, n, at(0)), at(1))
                .snitch()
                .clone()
        })
        .collect();
    let poisoned = due[1].token().clone();
    let saved = Arc::new(Mutex::new(Vec::new()));

    let mut store = MockStorage::new();
    store.expect_heartbeat().returning(|_, _, _| Ok(None));
    store.expect_outages().returning(|_| Ok(Vec::new()));
    // The failing snitch comes in a batch of its own, before the others: a sweep that
    // stopped at the failure would never claim them.
    let batches = Mutex::new(vec![
        Vec::new(),
        vec![due[0].clone(), due[2].clone()],
        vec![due[1].clone()],
    ]);
    store.expect_claim_due().returning(move |_, _, _| {
        Ok(batches
            .lock()
            .expect("not poisoned")
            .pop()
            .unwrap_or_default())
    });
    let owner = acme.clone();
    store
        .expect_case()
        .returning(move |_| Ok(Some(owner.clone())));
    store.expect_webhooks().returning(|_| Ok(Vec::new()));
    store.expect_channels().returning(|_| Ok(Vec::new()));
    let log = saved.clone();
    // The sweep saves each claimed batch with one `save_all`.
    store.expect_save_all().returning(move |changes| {
        changes
            .iter()
            .map(|change| {
                if change.snitch().token() == &poisoned {
                    return Err(StorageError::Backend("disk full".into()));
                }
                log.lock()
                    .expect("not poisoned")
                    .push(change.snitch().token().clone());
                Ok(())
            })
            .collect()
    });

    let clock = Arc::new(ManualClock::new(at(125)));
    let service = SnitchService::new(Arc::new(store), clock);
    let result = service.tick(at(125)).await;
    assert!(
        matches!(result, Err(ServiceError::Storage(StorageError::Backend(_)))),
        "the failure is reported: {result:?}"
    );
    let mut saved = saved.lock().expect("not poisoned").clone();
    saved.sort();
    assert_eq!(saved, [due[0].token().clone(), due[2].token().clone()]);
}

/// A mocked store holding one snitch of `acme`: reads give the current snitch, saves
/// apply `on_save` (given the change and how many saves came before).
fn one_snitch_store(
    acme: &Case,
    current: Arc<std::sync::Mutex<snitch::core::Snitch>>,
    on_save: impl Fn(&snitch::core::Change, usize) -> Result<(), snitch::core::StorageError>
        + Send
        + 'static,
) -> snitch::core::storage::MockStorage {
    use std::sync::atomic::{AtomicUsize, Ordering};

    let mut store = snitch::core::storage::MockStorage::new();
    let read = current.clone();
    store
        .expect_snitch()
        .returning(move |_| Ok(Some(read.lock().expect("not poisoned").clone())));
    let owner = acme.clone();
    store
        .expect_case()
        .returning(move |_| Ok(Some(owner.clone())));
    // A check-in reads its snitch and case at once, and saves apart (this store cannot
    // step a snitch in place).
    store.expect_step_in_place().returning(|_, _| None);
    let (read, owner) = (current.clone(), acme.clone());
    store.expect_snitch_with_case().returning(move |_| {
        let snitch = read.lock().expect("not poisoned").clone();
        Ok(Some((snitch, Some(owner.clone()))))
    });
    store.expect_webhooks().returning(|_| Ok(Vec::new()));
    store.expect_channels().returning(|_| Ok(Vec::new()));
    let saves = AtomicUsize::new(0);
    store
        .expect_save()
        .returning(move |change| on_save(change, saves.fetch_add(1, Ordering::SeqCst)));
    store
}

/// Times never go backwards for a snitch (docs/rules.md#check-in-transitions; a regression
/// test): a check-in that read the clock just before a period boundary, then lost its save
/// to a newer check-in committed just after the boundary (another server), is retried from
/// a fresh read. It must count at the newer one's time: stamped at its own, older time it
/// would move `checked_in_at` and `anchor_at` back across the boundary and the deadline a
/// period earlier, which could send a false `snitch.missing`.
#[tokio::test]
async fn a_check_in_retried_after_a_newer_one_committed_never_moves_times_back() {
    use std::sync::Mutex;

    use snitch::core::contract::{at as minute, case, checked_in, snitch as fixture};
    use snitch::core::StorageError;

    let acme = case("acme");
    // Checked in at 03:01: due at 05:00, the end of the next hour.
    let v1 = checked_in(&fixture(&acme, 1, minute(0)), minute(1))
        .snitch()
        .clone();
    let ours = minute(60) - Duration::milliseconds(100); // 03:59:59.900
    let theirs = minute(60) + Duration::milliseconds(100); // 04:00:00.100
    let newer = checked_in(&v1, theirs).snitch().clone();
    assert_eq!(
        newer.state().deadline_at(),
        Some(minute(180)),
        "due at 06:00"
    );

    let current = Arc::new(Mutex::new(v1.clone()));
    let stored = current.clone();
    let store = one_snitch_store(&acme, current.clone(), move |change, before| {
        let mut stored = stored.lock().expect("not poisoned");
        if before == 0 {
            // Between our read and our save, the other server's check-in commits.
            *stored = newer.clone();
            return Err(StorageError::Conflict);
        }
        if change.expected_version() != stored.version() {
            return Err(StorageError::Conflict);
        }
        *stored = change.snitch().clone();
        Ok(())
    });
    let clock = Arc::new(ManualClock::new(ours));
    let service = SnitchService::new(Arc::new(store), clock);
    let saved = service
        .check_in(v1.token().as_str(), Outcome::Success, None)
        .await
        .expect("checked in after one conflict");

    let state = saved.state();
    assert!(state.checked_in_at() >= Some(theirs), "{state:?}");
    assert!(state.anchor_at() >= Some(theirs), "{state:?}");
    assert!(
        state.deadline_at() >= Some(minute(180)),
        "the deadline never moves earlier than the newer check-in set it: {state:?}"
    );
    assert_eq!(current.lock().expect("not poisoned").state(), state);
}

/// A save whose COMMIT failed with an unknown outcome is never retried by the service
/// (a retry would step again and count the check-in twice): it is acknowledged when the
/// store holds exactly the change, and reported as unknown (503) otherwise.
#[tokio::test]
async fn a_check_in_whose_commit_outcome_is_unknown_is_never_saved_twice() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use snitch::core::contract::{at as minute, case, checked_in, snitch as fixture};
    use snitch::core::StorageError;

    let acme = case("acme");
    let v1 = checked_in(&fixture(&acme, 1, minute(0)), minute(1))
        .snitch()
        .clone();
    for landed in [true, false] {
        let current = Arc::new(Mutex::new(v1.clone()));
        let stored = current.clone();
        let saves = Arc::new(AtomicUsize::new(0));
        let counted = saves.clone();
        let store = one_snitch_store(&acme, current.clone(), move |change, _| {
            counted.fetch_add(1, Ordering::SeqCst);
            if landed {
                *stored.lock().expect("not poisoned") = change.snitch().clone();
            }
            Err(StorageError::CommitOutcomeUnknown(
                "connection reset during COMMIT".into(),
            ))
        });
        let clock = Arc::new(ManualClock::new(minute(30)));
        let service = SnitchService::new(Arc::new(store), clock);
        let result = service
            .check_in(v1.token().as_str(), Outcome::Success, None)
            .await;
        assert_eq!(saves.load(Ordering::SeqCst), 1, "saved once, never retried");
        if landed {
            let saved = result.expect("the commit landed: acknowledged");
            assert_eq!(saved, *current.lock().expect("not poisoned"));
            assert_eq!(saved.state().last_check_in_at(), Some(minute(30)));
        } else {
            let err = result.expect_err("the outcome is unknown");
            assert!(
                matches!(&err, ServiceError::Storage(e) if e.is_outcome_unknown()),
                "{err:?}"
            );
            assert_eq!(ErrorType::of(&err), Some(ErrorType::ServiceUnavailable));
            assert_eq!(*current.lock().expect("not poisoned"), v1);
        }
    }
}
