//! Cron snitches over HTTP on every store (docs/rules.md#expected-runs): a job that runs
//! on time through a daylight saving night is never announced missing, and one that stops
//! is announced once per silent run, on memory, SQLite and PostgreSQL alike.

mod common;

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use common::stores::{start_on, Store};
use common::{default_cases, token_of, Server, MANUAL_TIME, NO_RATE_LIMIT};
use serde_json::{json, Value};
use snitch::prelude::ManualClock;
use snitch_store_postgres::test_databases::{self, TestDatabase};

fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("a valid instant")
}

/// The kinds of the snitch's events, oldest first.
async fn event_kinds(server: &Server, token: &str) -> Vec<String> {
    let events = server.get_ok(&format!("/v1/snitches/{token}/events")).await;
    let mut kinds: Vec<String> = events
        .as_array()
        .expect("an array of events")
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    kinds.reverse();
    kinds
}

/// Riga falls back on 2026-10-25 at 04:00 to 03:00. A job at 03:30 runs once that night,
/// at the first 03:30 (00:30 UTC), then at 01:30 UTC from the next night on. Checking in
/// at each of its runs, with the sweep every 10 minutes, it is never missing.
async fn a_job_on_time_through_the_fall_back_night_is_never_missing(store: Store) {
    let clock = Arc::new(ManualClock::new(at("2026-10-22T12:00:00Z")));
    let (server, _kept) = start_on(store, clock.clone()).await;
    let snitch = server
        .create(json!({
            "name": "nightly",
            "schedule": "30 3 * * *",
            "timezone": "Europe/Riga",
            "grace_seconds": 900,
        }))
        .await;
    let token = token_of(&snitch);
    let runs = [
        "2026-10-23T00:30:00Z",
        "2026-10-24T00:30:00Z",
        "2026-10-25T00:30:00Z",
        "2026-10-26T01:30:00Z",
        "2026-10-27T01:30:00Z",
    ];
    let mut now = at("2026-10-22T12:00:00Z");
    for run in runs.map(at) {
        while now + Duration::minutes(10) < run {
            now += Duration::minutes(10);
            server.tick_at(&clock, now).await;
        }
        now = run + Duration::seconds(20);
        server.tick_at(&clock, now).await;
        server.check_in(&token, "").await;
    }
    let snitch: Value = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(snitch["status"], "healthy", "{store:?}: {snitch}");
    assert_eq!(snitch["next_expected_at"], "2026-10-28T01:30:00.000Z");
    assert_eq!(
        event_kinds(&server, &token).await,
        ["snitch.reporting"],
        "{store:?}: only the first check-in's"
    );

    // Then the job stops: one missing event per silent run, each once its grace passed.
    server.tick_at(&clock, at("2026-10-28T01:44:59Z")).await;
    assert_eq!(event_kinds(&server, &token).await.len(), 1, "{store:?}");
    server.tick_at(&clock, at("2026-10-28T01:45:00Z")).await;
    server.tick_at(&clock, at("2026-10-29T01:45:00Z")).await;
    assert_eq!(
        event_kinds(&server, &token).await,
        ["snitch.reporting", "snitch.missing", "snitch.missing"],
        "{store:?}"
    );
}

#[tokio::test]
async fn memory_a_job_on_time_through_the_fall_back_night_is_never_missing() {
    a_job_on_time_through_the_fall_back_night_is_never_missing(Store::Memory).await;
}

#[tokio::test]
async fn sqlite_a_job_on_time_through_the_fall_back_night_is_never_missing() {
    a_job_on_time_through_the_fall_back_night_is_never_missing(Store::Sqlite).await;
}

#[tokio::test]
async fn postgres_a_job_on_time_through_the_fall_back_night_is_never_missing() {
    a_job_on_time_through_the_fall_back_night_is_never_missing(Store::Postgres).await;
}

/// A grace longer than the gap between runs: a snitch of every minute with an hour of
/// grace, checked in as it is made, expects its next run after that check-in (never one
/// from before it existed), is not announced while the job keeps running, and after a
/// pause and a resume is again due after the resume.
async fn a_first_check_in_and_a_resume_expect_no_run_before_them(store: Store) {
    let made = at("2026-03-10T12:00:10Z");
    let clock = Arc::new(ManualClock::new(made));
    let (server, _kept) = start_on(store, clock.clone()).await;
    let snitch = server
        .create(json!({"name": "ov", "schedule": "* * * * *", "grace_seconds": 3600}))
        .await;
    let token = token_of(&snitch);
    let path = format!("/v1/snitches/{token}");
    server.check_in(&token, "").await;
    let snitch = server.get_ok(&path).await;
    assert_eq!(
        snitch["next_expected_at"], "2026-03-10T12:01:00.000Z",
        "{store:?}"
    );
    assert_eq!(
        snitch["deadline_at"], "2026-03-10T13:01:00.000Z",
        "{store:?}"
    );

    // The job runs every minute, at :05 past, for ten minutes: never announced, and its
    // next run is always the one after its last check-in.
    let mut now = made;
    for minute in 1..=10 {
        now = at("2026-03-10T12:00:05Z") + Duration::minutes(minute);
        server.tick_at(&clock, now).await;
        server.check_in(&token, "").await;
        let snitch = server.get_ok(&path).await;
        let next: DateTime<Utc> = snitch["next_expected_at"]
            .as_str()
            .expect("next_expected_at")
            .parse()
            .expect("an instant");
        assert!(next > now - Duration::minutes(1), "{store:?}: {snitch}");
        assert_eq!(snitch["status"], "healthy", "{store:?}: {snitch}");
    }
    // Silent, then: nothing before an hour past the first run after the last check-in.
    server.tick_at(&clock, now + Duration::minutes(59)).await;
    assert_eq!(server.status_of(&token).await, "healthy", "{store:?}");
    assert_eq!(event_kinds(&server, &token).await, ["snitch.reporting"]);

    // Paused, then resumed at 14:30:10: the run due is 14:31's, by 15:31.
    let paused = server.post_json(&format!("{path}/pause"), &json!({})).await;
    assert_eq!(paused.status(), 204, "{store:?}");
    clock.set(at("2026-03-10T14:30:10Z"));
    let resumed = server
        .post_json(&format!("{path}/unpause"), &json!({}))
        .await;
    assert_eq!(resumed.status(), 204, "{store:?}");
    let snitch = server.get_ok(&path).await;
    assert_eq!(
        snitch["next_expected_at"], "2026-03-10T14:31:00.000Z",
        "{store:?}"
    );
    server.tick_at(&clock, at("2026-03-10T15:30:59Z")).await;
    assert_ne!(server.status_of(&token).await, "failed", "{store:?}");
    server.tick_at(&clock, at("2026-03-10T15:31:00Z")).await;
    assert_eq!(server.status_of(&token).await, "failed", "{store:?}");
}

#[tokio::test]
async fn memory_a_first_check_in_and_a_resume_expect_no_run_before_them() {
    a_first_check_in_and_a_resume_expect_no_run_before_them(Store::Memory).await;
}

#[tokio::test]
async fn sqlite_a_first_check_in_and_a_resume_expect_no_run_before_them() {
    a_first_check_in_and_a_resume_expect_no_run_before_them(Store::Sqlite).await;
}

#[tokio::test]
async fn postgres_a_first_check_in_and_a_resume_expect_no_run_before_them() {
    a_first_check_in_and_a_resume_expect_no_run_before_them(Store::Postgres).await;
}

/// Two servers on one PostgreSQL database sweeping a silent cron snitch at the same
/// instant announce each missed run once, not once per server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_announce_a_missed_run_once() {
    let clock = Arc::new(ManualClock::new(at("2026-03-10T08:00:00Z")));
    let db: TestDatabase = test_databases::empty(4).await;
    let top = format!("{NO_RATE_LIMIT}{MANUAL_TIME}database_url = {:?}\n", db.url);
    let first = Server::launch(&top, &default_cases(), clock.clone()).await;
    let second = Server::launch(&top, &default_cases(), clock.clone()).await;
    let snitch = first
        .create(json!({"name": "n", "schedule": "0 9 * * *", "grace_seconds": 600}))
        .await;
    let token = token_of(&snitch);
    first.check_in(&token, "").await;
    for day in 11..=13 {
        let deadline = at(&format!("2026-03-{day}T09:10:00Z"));
        clock.set(deadline);
        let (a, b) = tokio::join!(
            first.running.service.tick(deadline),
            second.running.service.tick(deadline)
        );
        a.expect("the first server's sweep");
        b.expect("the second server's sweep");
    }
    assert_eq!(
        event_kinds(&first, &token).await,
        [
            "snitch.reporting",
            "snitch.missing",
            "snitch.missing",
            "snitch.missing"
        ]
    );
}
