//! Our own downtime is not the job's fault (docs/rules.md#outages): deadlines that fall
//! inside an outage send no alert, and each affected snitch is due again as if it had
//! checked in when service resumed. A property test on the service, and a server whose
//! process stalls (its clock jumps) over the API.

mod common;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use common::{default_cases, start_time, Server, NO_RATE_LIMIT};
use proptest::prelude::*;
use reqwest::StatusCode;
use serde_json::Value;
use snitch::core::{EventKind, Interval, SequentialTokens};
use snitch::prelude::{
    Case, CaseId, Clock, ManualClock, Outcome, SnitchFields, SnitchService, Storage,
};
use snitch::store::memory::MemoryStorage;

const THRESHOLD: Duration = Duration::seconds(60);
/// How often the simulated server sweeps (and so records that it is alive) while up.
const TICK: Duration = Duration::seconds(20);

/// The intervals the property draws from: short ones, so that a case runs few steps.
const INTERVALS: [&str; 6] = [
    "1_minute",
    "2_minute",
    "5_minute",
    "15_minute",
    "30_minute",
    "hourly",
];

#[derive(Debug, Clone)]
struct Job {
    interval: usize,
    /// When in its period the job checks in, in thousandths of the period.
    offset_permille: i64,
    /// Whether it keeps checking in after service resumes (else it died with us).
    alive_after: bool,
}

fn job() -> impl Strategy<Value = Job> {
    (0..INTERVALS.len(), 0i64..1_000, any::<bool>()).prop_map(
        |(interval, offset_permille, alive_after)| Job {
            interval,
            offset_permille,
            alive_after,
        },
    )
}

fn interval_of(job: &Job) -> Interval {
    INTERVALS[job.interval]
        .parse()
        .expect("the test's intervals are valid")
}

/// The instants in `[from, to)` at which the job checks in: once per period, at its offset.
fn check_in_times(job: &Job, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let interval = interval_of(job);
    let mut period = interval.period_of(from);
    let mut times = Vec::new();
    while period.start() < to {
        let len = period.end() - period.start();
        let at = period.start() + len / 1_000 * i32::try_from(job.offset_permille).unwrap_or(0);
        if at >= from && at < to {
            times.push(at);
        }
        period = period.next();
    }
    times
}

/// The scenario of one case: jobs checking in on schedule while the server sweeps every
/// [`TICK`]; the server goes down at `down` for `outage`; it resumes and the living jobs
/// carry on (their first check-in comes within one period of the resume, as the
/// schedule falls), the dead ones never check in again. Checked: no alert for a deadline
/// inside the outage, none for a living job, exactly one for each dead one, at the
/// deadline a check-in at the resume would have had.
async fn outage_scenario(jobs: Vec<Job>, down_after: Duration, outage: Duration) {
    let start = start_time();
    let clock = Arc::new(ManualClock::new(start));
    let storage = Arc::new(MemoryStorage::new());
    let case = Case::new(CaseId::parse("acme").expect("valid"));
    storage.upsert_case(&case).await.expect("store the case");
    let service = SnitchService::with_tokens(
        storage.clone(),
        clock.clone(),
        Arc::new(SequentialTokens::default()),
    )
    .with_outage_threshold(THRESHOLD);

    let mut tokens = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let fields = SnitchFields {
            name: Some(format!("job {i}")),
            interval: Some(INTERVALS[job.interval].into()),
            ..SnitchFields::default()
        };
        let snitch = service.create(&case, &fields).await.expect("create");
        service
            .check_in(snitch.token().as_str(), Outcome::Success, None)
            .await
            .expect("first check-in");
        tokens.push(snitch.token().to_string());
    }

    let down = start + down_after;
    let resume = down + outage;
    // Long enough for the slowest dead job's deadline measured from the resume.
    let end = jobs
        .iter()
        .map(|j| {
            let interval = interval_of(j);
            interval.period_of(resume).next().end() + Duration::seconds(1)
        })
        .max()
        .unwrap_or(resume);

    // Every instant something happens, in order: sweeps while up, check-ins.
    let mut moments: Vec<(DateTime<Utc>, Option<usize>)> = Vec::new();
    let mut t = start + TICK;
    while t <= end {
        if t <= down || t >= resume {
            moments.push((t, None));
        }
        t += TICK;
    }
    moments.push((resume, None));
    for (i, job) in jobs.iter().enumerate() {
        for at in check_in_times(job, start + Duration::milliseconds(1), down) {
            moments.push((at, Some(i)));
        }
        if job.alive_after {
            for at in check_in_times(job, resume, end) {
                moments.push((at, Some(i)));
            }
        }
    }
    moments.sort();

    // Each dead job is looked at once its deadline measured from the resume has passed
    // (a silent job goes on emitting one missing per period after it).
    let mut dead_checked: Vec<Option<Vec<DateTime<Utc>>>> = vec![None; jobs.len()];
    for (at, who) in moments {
        clock.set(at);
        match who {
            None => {
                service.tick(at).await.expect("sweep");
            }
            Some(i) => {
                service
                    .check_in(&tokens[i], Outcome::Success, None)
                    .await
                    .expect("check-in");
            }
        }
        for (i, job) in jobs.iter().enumerate() {
            let due = interval_of(job).period_of(resume).next().end();
            if who.is_none() && !job.alive_after && dead_checked[i].is_none() && at >= due {
                dead_checked[i] = Some(missing_of(&service, &case, &tokens[i]).await);
            }
        }
    }

    let outages = storage.outages(start).await.expect("read outages");
    assert_eq!(outages.len(), 1, "one outage: {outages:?}");
    let recorded = outages[0];
    assert!(recorded.started_at <= down && down - recorded.started_at <= TICK);
    assert_eq!(recorded.ended_at, resume);

    for (i, job) in jobs.iter().enumerate() {
        let missing = match &dead_checked[i] {
            Some(seen) => seen.clone(),
            None => missing_of(&service, &case, &tokens[i]).await,
        };
        for at in &missing {
            assert!(
                !recorded.covers(*at),
                "job {i} ({job:?}) was announced missing at {at}, inside the outage"
            );
        }
        if job.alive_after {
            assert!(
                missing.is_empty(),
                "job {i} ({job:?}) kept checking in: {missing:?}"
            );
        } else {
            // Before the outage the job checked in every period, so every deadline before
            // it was met. Its first alert comes after the resume and no later than the
            // deadline a check-in at the resume would have had; exactly one by then.
            let due = interval_of(job).period_of(resume).next().end();
            let by_then: Vec<_> = missing.iter().filter(|at| **at <= due).collect();
            assert_eq!(
                by_then.len(),
                1,
                "job {i} ({job:?}) died with us: {missing:?}"
            );
            assert!(*by_then[0] > resume, "job {i} ({job:?}): {missing:?}");
        }
    }
    let deferred: u64 = service
        .outages(&case, 10)
        .await
        .expect("read")
        .iter()
        .map(|o| o.snitches_deferred)
        .sum();
    assert!(deferred as usize <= jobs.len());
}

/// The instants of the snitch's `snitch.missing` events, oldest first.
async fn missing_of(service: &SnitchService, case: &Case, token: &str) -> Vec<DateTime<Utc>> {
    let mut events = service.events(case, token, 100).await.expect("events");
    events.reverse();
    events
        .iter()
        .filter(|e| e.kind == EventKind::Missing)
        .map(|e| e.at)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(64)
    })]

    #[test]
    fn deadlines_inside_an_outage_never_alert_and_dead_jobs_alert_once_after_it(
        jobs in proptest::collection::vec(job(), 1..=6),
        down_minutes in 1i64..90,
        // From just over the threshold to several periods of the longest interval.
        outage_seconds in 61i64..(3 * 3_600),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(outage_scenario(
            jobs,
            Duration::minutes(down_minutes),
            Duration::seconds(outage_seconds),
        ));
    }
}

/// A gap shorter than the threshold is no outage: a job that missed a deadline in it
/// is announced as usual.
#[tokio::test]
async fn a_short_gap_is_not_an_outage() {
    let start = start_time();
    let clock = Arc::new(ManualClock::new(start));
    let storage = Arc::new(MemoryStorage::new());
    let case = Case::new(CaseId::parse("acme").expect("valid"));
    storage.upsert_case(&case).await.expect("store the case");
    let service =
        SnitchService::new(storage.clone(), clock.clone()).with_outage_threshold(THRESHOLD);
    let fields = SnitchFields {
        name: Some("job".into()),
        interval: Some("1_minute".into()),
        ..SnitchFields::default()
    };
    let s = service.create(&case, &fields).await.expect("create");
    service.tick(start).await.expect("sweep");
    service
        .check_in(s.token().as_str(), Outcome::Success, None)
        .await
        .expect("check in");
    // Due by 03:02; the server sweeps every 50 s, never stalling for a whole minute.
    let mut t = start;
    for _ in 0..4 {
        t += Duration::seconds(50);
        clock.set(t);
        service.tick(t).await.expect("sweep");
    }
    let events = service
        .events(&case, s.token().as_str(), 10)
        .await
        .expect("events");
    assert_eq!(events[0].kind, EventKind::Missing);
    assert!(storage.outages(start).await.expect("read").is_empty());
}

// ---------------------------------------------------------------------------------------
// A running server whose process stalls: the sweep notices when it resumes.

async fn stalled_server(clock: Arc<ManualClock>) -> Server {
    let top = format!("{NO_RATE_LIMIT}outage_threshold_secs = 60\n");
    Server::launch(&top, &default_cases(), clock).await
}

/// The server's own sweep (every second at most) records the stall as an outage.
async fn wait_for_outage(server: &Server) -> Vec<Value> {
    for _ in 0..100 {
        let response = server.get("/v1/outages").await;
        assert_eq!(response.status(), StatusCode::OK);
        let outages: Vec<Value> = response.json().await.expect("JSON");
        if !outages.is_empty() {
            return outages;
        }
        tokio::time::sleep(StdDuration::from_millis(50)).await;
    }
    panic!("no outage recorded within 5 s of the stall");
}

#[tokio::test]
async fn a_stalled_server_defers_the_deadlines_of_its_stall_and_lists_the_outage() {
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = stalled_server(clock.clone()).await;
    let fine = server.create_snitch("fine job", "1_minute").await;
    let dead = server.create_snitch("dead job", "1_minute").await;
    server.check_in(&fine, "").await;
    server.check_in(&dead, "").await;
    assert!(server
        .get("/v1/outages")
        .await
        .json::<Vec<Value>>()
        .await
        .expect("JSON")
        .is_empty());

    // The process is suspended for ten minutes (03:00:00.123 → 03:10:00.123): both
    // deadlines (03:02) fall inside.
    let resumed = start_time() + Duration::minutes(10);
    clock.set(resumed);
    let outages = wait_for_outage(&server).await;
    assert_eq!(outages.len(), 1);
    assert_eq!(outages[0]["ended_at"], "2026-11-22T03:10:00.123Z");
    assert_eq!(outages[0]["snitches_deferred"], 2);
    for token in [&fine, &dead] {
        assert_eq!(server.status_of(token).await, "healthy");
        assert_eq!(server.event_types(token).await, ["snitch.reporting"]);
        let snitch = server.get_ok(&format!("/v1/snitches/{token}")).await;
        // Due as if it had checked in at the resume: by the end of the next minute.
        assert_eq!(snitch["deadline_at"], "2026-11-22T03:12:00.000Z");
    }

    // The fine job checks in within the minute; the dead one stays silent. Time goes on
    // at the sweep's pace (no further stall).
    server.check_in(&fine, "").await;
    let mut t = resumed;
    while t < start_time() + Duration::minutes(12) + Duration::seconds(1) {
        t += Duration::seconds(10);
        clock.set(t);
        server.running.service.tick(t).await.expect("sweep");
        if t == resumed + Duration::minutes(1) {
            // And again in the next minute, as a job on a one-minute schedule does.
            server.check_in(&fine, "").await;
        }
    }
    assert_eq!(server.event_types(&fine).await, ["snitch.reporting"]);
    assert_eq!(
        server.event_types(&dead).await,
        ["snitch.reporting", "snitch.missing"],
        "the dead job is announced once, one period after the resume"
    );
    let other_case = server
        .request_as(common::OTHER_KEY, reqwest::Method::GET, "/v1/outages")
        .send()
        .await
        .expect("answered");
    let seen: Vec<Value> = other_case.json().await.expect("JSON");
    assert_eq!(seen.len(), 1, "every case sees the outage");
    assert_eq!(seen[0]["snitches_deferred"], 0, "but none of its snitches");
    assert!(clock.now() > resumed);
}
