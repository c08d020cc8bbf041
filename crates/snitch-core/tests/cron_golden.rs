//! Golden vectors: CronSchedule against cronsim, the Python engine of healthchecks and
//! Sentry Crons that implements Debian cron's semantics (DST quirks included).
//!
//! `scripts/cron-golden.py` made `tests/data/cron_golden.json`: for each expression and
//! time zone, the runs cronsim gives from start instants shortly before every DST
//! transition of 2026-2030 (sample instants in zones without DST). Every sequence must
//! match, except the ones listed in [`EXCEPTIONS`], each a reviewed cronsim bug with its
//! reason. An exception that no longer matches anything fails the test too, so the list
//! cannot go stale.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use snitch_core::CronSchedule;

const GOLDEN: &str = include_str!("data/cron_golden.json");

/// Reviewed differences from cronsim: (expression, zone, first, last, reason). In the
/// sequences this excuses, we give every run cronsim gives, plus runs that cronsim skips,
/// all between `first` and `last` (wall clock times of `zone`, ISO 8601 with offset,
/// inclusive). Nothing else is excused: a run cronsim gives that we don't is always a
/// failure.
const EXCEPTIONS: &[(&str, &str, &str, &str, &str)] = &[
    (
        "* 2 * * *",
        "Australia/Lord_Howe",
        "2026-04-05T02:00:00.000+10:30",
        "2026-04-05T02:29:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "* 2 * * *",
        "Australia/Lord_Howe",
        "2027-04-04T02:00:00.000+10:30",
        "2027-04-04T02:29:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "* 2 * * *",
        "Australia/Lord_Howe",
        "2028-04-02T02:00:00.000+10:30",
        "2028-04-02T02:29:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "* 2 * * *",
        "Australia/Lord_Howe",
        "2029-04-01T02:00:00.000+10:30",
        "2029-04-01T02:29:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "* 2 * * *",
        "Australia/Lord_Howe",
        "2030-04-07T02:00:00.000+10:30",
        "2030-04-07T02:29:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/10 2 * * *",
        "Australia/Lord_Howe",
        "2026-04-05T02:00:00.000+10:30",
        "2026-04-05T02:20:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/10 2 * * *",
        "Australia/Lord_Howe",
        "2027-04-04T02:00:00.000+10:30",
        "2027-04-04T02:20:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/10 2 * * *",
        "Australia/Lord_Howe",
        "2028-04-02T02:00:00.000+10:30",
        "2028-04-02T02:20:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/10 2 * * *",
        "Australia/Lord_Howe",
        "2029-04-01T02:00:00.000+10:30",
        "2029-04-01T02:20:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/10 2 * * *",
        "Australia/Lord_Howe",
        "2030-04-07T02:00:00.000+10:30",
        "2030-04-07T02:20:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/30 0 * * *",
        "Australia/Lord_Howe",
        "2026-04-06T00:00:00.000+10:30",
        "2026-04-06T00:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/30 0 * * *",
        "Australia/Lord_Howe",
        "2026-10-05T00:00:00.000+11:00",
        "2026-10-05T00:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/30 0 * * *",
        "Australia/Lord_Howe",
        "2027-04-05T00:00:00.000+10:30",
        "2027-04-05T00:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/30 0 * * *",
        "Australia/Lord_Howe",
        "2027-10-04T00:00:00.000+11:00",
        "2027-10-04T00:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/30 0 * * *",
        "Australia/Lord_Howe",
        "2028-04-03T00:00:00.000+10:30",
        "2028-04-03T00:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/30 0 * * *",
        "Australia/Lord_Howe",
        "2028-10-02T00:00:00.000+11:00",
        "2028-10-02T00:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/30 0 * * *",
        "Australia/Lord_Howe",
        "2029-04-02T00:00:00.000+10:30",
        "2029-04-02T00:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/30 0 * * *",
        "Australia/Lord_Howe",
        "2029-10-08T00:00:00.000+11:00",
        "2029-10-08T00:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/30 0 * * *",
        "Australia/Lord_Howe",
        "2030-04-08T00:00:00.000+10:30",
        "2030-04-08T00:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "*/30 0 * * *",
        "Australia/Lord_Howe",
        "2030-10-07T00:00:00.000+11:00",
        "2030-10-07T00:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */2 * * *",
        "Australia/Lord_Howe",
        "2026-04-05T02:00:00.000+10:30",
        "2026-04-05T02:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */2 * * *",
        "Australia/Lord_Howe",
        "2027-04-04T02:00:00.000+10:30",
        "2027-04-04T02:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */2 * * *",
        "Australia/Lord_Howe",
        "2028-04-02T02:00:00.000+10:30",
        "2028-04-02T02:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */2 * * *",
        "Australia/Lord_Howe",
        "2029-04-01T02:00:00.000+10:30",
        "2029-04-01T02:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */2 * * *",
        "Australia/Lord_Howe",
        "2030-04-07T02:00:00.000+10:30",
        "2030-04-07T02:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */3 * * *",
        "Australia/Lord_Howe",
        "2026-04-05T03:00:00.000+10:30",
        "2026-04-05T03:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */3 * * *",
        "Australia/Lord_Howe",
        "2026-10-04T03:00:00.000+11:00",
        "2026-10-04T03:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */3 * * *",
        "Australia/Lord_Howe",
        "2027-04-04T03:00:00.000+10:30",
        "2027-04-04T03:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */3 * * *",
        "Australia/Lord_Howe",
        "2027-10-03T03:00:00.000+11:00",
        "2027-10-03T03:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */3 * * *",
        "Australia/Lord_Howe",
        "2028-04-02T03:00:00.000+10:30",
        "2028-04-02T03:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */3 * * *",
        "Australia/Lord_Howe",
        "2028-10-01T03:00:00.000+11:00",
        "2028-10-01T03:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */3 * * *",
        "Australia/Lord_Howe",
        "2029-04-01T03:00:00.000+10:30",
        "2029-04-01T03:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */3 * * *",
        "Australia/Lord_Howe",
        "2029-10-07T03:00:00.000+11:00",
        "2029-10-07T03:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */3 * * *",
        "Australia/Lord_Howe",
        "2030-04-07T03:00:00.000+10:30",
        "2030-04-07T03:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */3 * * *",
        "Australia/Lord_Howe",
        "2030-10-06T03:00:00.000+11:00",
        "2030-10-06T03:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */6 * * *",
        "Australia/Lord_Howe",
        "2026-04-05T06:00:00.000+10:30",
        "2026-04-05T06:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */6 * * *",
        "Australia/Lord_Howe",
        "2026-10-04T06:00:00.000+11:00",
        "2026-10-04T06:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */6 * * *",
        "Australia/Lord_Howe",
        "2027-04-04T06:00:00.000+10:30",
        "2027-04-04T06:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */6 * * *",
        "Australia/Lord_Howe",
        "2027-10-03T06:00:00.000+11:00",
        "2027-10-03T06:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */6 * * *",
        "Australia/Lord_Howe",
        "2028-04-02T06:00:00.000+10:30",
        "2028-04-02T06:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */6 * * *",
        "Australia/Lord_Howe",
        "2028-10-01T06:00:00.000+11:00",
        "2028-10-01T06:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */6 * * *",
        "Australia/Lord_Howe",
        "2029-04-01T06:00:00.000+10:30",
        "2029-04-01T06:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */6 * * *",
        "Australia/Lord_Howe",
        "2029-10-07T06:00:00.000+11:00",
        "2029-10-07T06:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */6 * * *",
        "Australia/Lord_Howe",
        "2030-04-07T06:00:00.000+10:30",
        "2030-04-07T06:00:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "0 */6 * * *",
        "Australia/Lord_Howe",
        "2030-10-06T06:00:00.000+11:00",
        "2030-10-06T06:00:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "15 */4 * * *",
        "Australia/Lord_Howe",
        "2026-04-05T04:15:00.000+10:30",
        "2026-04-05T04:15:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "15 */4 * * *",
        "Australia/Lord_Howe",
        "2026-10-04T04:15:00.000+11:00",
        "2026-10-04T04:15:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "15 */4 * * *",
        "Australia/Lord_Howe",
        "2027-04-04T04:15:00.000+10:30",
        "2027-04-04T04:15:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "15 */4 * * *",
        "Australia/Lord_Howe",
        "2027-10-03T04:15:00.000+11:00",
        "2027-10-03T04:15:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "15 */4 * * *",
        "Australia/Lord_Howe",
        "2028-04-02T04:15:00.000+10:30",
        "2028-04-02T04:15:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "15 */4 * * *",
        "Australia/Lord_Howe",
        "2028-10-01T04:15:00.000+11:00",
        "2028-10-01T04:15:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "15 */4 * * *",
        "Australia/Lord_Howe",
        "2029-04-01T04:15:00.000+10:30",
        "2029-04-01T04:15:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "15 */4 * * *",
        "Australia/Lord_Howe",
        "2029-10-07T04:15:00.000+11:00",
        "2029-10-07T04:15:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "15 */4 * * *",
        "Australia/Lord_Howe",
        "2030-04-07T04:15:00.000+10:30",
        "2030-04-07T04:15:00.000+10:30",
        LORD_HOWE_HOUR_STEPS,
    ),
    (
        "15 */4 * * *",
        "Australia/Lord_Howe",
        "2030-10-06T04:15:00.000+11:00",
        "2030-10-06T04:15:00.000+11:00",
        LORD_HOWE_HOUR_STEPS,
    ),
];

/// The one cronsim bug the vectors show (research/schedules.md section 4.3 found its
/// first case), reviewed by hand on each entry above. For a job stepped in real time,
/// cronsim moves to the next allowed hour by adding whole real hours to a wall clock time
/// set to minute 0. Across Australia/Lord_Howe's 30-minute change, that time is no
/// longer on the hour: it lands on hh:30, finds the hour's minute already past, and steps
/// on, skipping a wall clock time that happens once, unambiguously, after the change
/// (02:00+10:30 after the 02:00+11:00 -> 01:30+10:30 fall-back; 03:00+11:00 after the
/// 02:00 -> 02:30 spring-forward; the next midnight for `*/30 0`). Debian's cron reads
/// the wall clock every minute and runs the job then, and so do we. cronsim never gives
/// a run we lack in these sequences: we only add the skipped ones.
const LORD_HOWE_HOUR_STEPS: &str =
    "cronsim skips a once-only wall clock time after Lord Howe's 30-minute change";

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(seconds, 0).expect("vector instants are in range")
}

#[test]
fn every_golden_vector_matches_cronsim() {
    let doc: serde_json::Value = serde_json::from_str(GOLDEN).expect("golden JSON parses");
    let mut failures = Vec::new();
    let mut used_exceptions = BTreeSet::new();
    let mut checked = 0usize;
    for case in doc["cases"].as_array().expect("cases") {
        let expr = case["expr"].as_str().expect("expr");
        let zone = case["zone"].as_str().expect("zone");
        let schedule = CronSchedule::parse(expr, zone)
            .unwrap_or_else(|e| panic!("{expr:?} in {zone} refused: {e}"));
        for seq in case["seqs"].as_array().expect("seqs") {
            let numbers: Vec<i64> = seq
                .as_array()
                .expect("seq")
                .iter()
                .map(|n| n.as_i64().expect("integer"))
                .collect();
            let start = numbers[0];
            let mut expected = Vec::new();
            let mut previous = start;
            for delta in &numbers[1..] {
                previous += delta;
                expected.push(at(previous));
            }
            checked += 1;
            let ours: Vec<DateTime<Utc>> = schedule.times_after(at(start)).take(10).collect();
            if ours == expected {
                continue;
            }
            // Compare over the stretch both cover: up to cronsim's last run (all of ours
            // when cronsim stopped early, having found nothing more within 50 years).
            let limit = if expected.len() < 10 {
                DateTime::<Utc>::MAX_UTC
            } else {
                expected[expected.len() - 1]
            };
            let ours_all: Vec<DateTime<Utc>> = schedule
                .times_after(at(start))
                .take_while(|t| *t <= limit)
                .take(1_000)
                .collect();
            let missing: Vec<_> = expected.iter().filter(|t| !ours_all.contains(t)).collect();
            let extra: Vec<_> = ours_all.iter().filter(|t| !expected.contains(t)).collect();
            let excuse = |t: &DateTime<Utc>| {
                EXCEPTIONS.iter().position(|(e, z, first, last, _)| {
                    *e == expr && *z == zone && {
                        let local = schedule.to_local_iso(*t);
                        // Same zone and offset format, so text order is time order
                        // within one exception's day.
                        local.as_str() >= *first && local.as_str() <= *last
                    }
                })
            };
            let excused: Vec<Option<usize>> = extra.iter().map(|t| excuse(t)).collect();
            if missing.is_empty() && !extra.is_empty() && excused.iter().all(Option::is_some) {
                used_exceptions.extend(excused.into_iter().flatten());
                continue;
            }
            let show = |ts: &[&DateTime<Utc>]| {
                ts.iter()
                    .map(|t| schedule.to_local_iso(**t))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            failures.push(format!(
                "{expr:?} {zone} from {}: cronsim's runs we lack: [{}]; runs we add: [{}]",
                schedule.to_local_iso(at(start)),
                show(&missing),
                show(&extra),
            ));
        }
    }
    assert!(checked >= 50 * 8 * 10, "only {checked} sequences");
    let unused: Vec<_> = (0..EXCEPTIONS.len())
        .filter(|i| !used_exceptions.contains(i))
        .map(|i| EXCEPTIONS[i])
        .collect();
    assert!(
        failures.is_empty() && unused.is_empty(),
        "{} of {checked} sequences differ from cronsim:\n{}\nunused exceptions: {unused:?}",
        failures.len(),
        failures
            .iter()
            .take(100_000)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
    );
}

#[test]
fn what_cronsim_refuses_is_refused() {
    let doc: serde_json::Value = serde_json::from_str(GOLDEN).expect("golden JSON parses");
    for expr in doc["invalid"].as_array().expect("invalid") {
        let expr = expr.as_str().expect("string");
        let error = CronSchedule::parse(expr, "UTC").expect_err(expr);
        assert_eq!(error.attribute(), "schedule", "{expr:?}");
    }
}
