use super::*;
use chrono::{Datelike, TimeZone as _, Timelike};
use proptest::prelude::*;

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
}

fn schedule(expression: &str, zone: &str) -> CronSchedule {
    CronSchedule::parse(expression, zone).unwrap()
}

/// The next `n` runs after `from`, as local ISO 8601 without milliseconds.
fn local_runs(expression: &str, zone: &str, from: DateTime<Utc>, n: usize) -> Vec<String> {
    let s = schedule(expression, zone);
    s.times_after(from)
        .take(n)
        .map(|t| s.to_local_iso(t).replace(".000", ""))
        .collect()
}

fn refusal(expression: &str) -> ScheduleError {
    CronSchedule::parse(expression, "UTC").expect_err(expression)
}

// --- Refusals -----------------------------------------------------------------------

#[test]
fn refusals_name_what_is_wrong() {
    let cases: &[(&str, &str)] = &[
        ("", "can't be blank"),
        ("   ", "can't be blank"),
        ("@reboot", "@reboot is not supported"),
        ("@REBOOT", "@reboot is not supported"),
        ("@fortnightly", "@fortnightly is not one of"),
        ("0 @daily", "is not one of"),
        ("0 0 * * * *", "must have 5 fields"),
        ("0 0 * * * *", "seconds are not supported"),
        ("* * * *", "not 4"),
        ("* * 30 2 *", "day-of-month"),
        ("* * 30 2 *", "day 30 does not exist in February"),
        ("0 0 31 4 *", "day 31 does not exist in April"),
        ("0 0 31 2,4 *", "February or April"),
        ("garbage", "must have 5 fields"),
        ("a b c d e", "minute \"a\": \"A\" is not a number"),
        ("60 * * * *", "minute \"60\": 60 is not between 0 and 59"),
        ("* 24 * * *", "hour \"24\""),
        ("* * 0 * *", "day-of-month \"0\""),
        ("* * * 13 *", "month \"13\""),
        (
            "* * * jan-foo *",
            "month \"jan-foo\": \"FOO\" is not a number or a month name",
        ),
        ("* * * * 8", "day-of-week \"8\""),
        ("* * * * MON#6", "day-of-week \"MON#6\""),
        ("* * * * L", "L in day-of-week follows a weekday number"),
        ("*/0 * * * *", "a step can't be 0"),
        ("5-1 * * * *", "goes backwards"),
        ("1,,2 * * * *", "empty item"),
        ("0 0 */8 * MON#5", "never runs"),
        ("0\u{0} * * * *", "can't contain a NUL character"),
        ("0\u{7} * * * *", "control characters"),
    ];
    for (expression, wanted) in cases {
        let error = refusal(expression);
        assert_eq!(error.attribute(), "schedule", "{expression:?}");
        assert!(
            error.message().contains(wanted),
            "{expression:?}: {:?} lacks {wanted:?}",
            error.message()
        );
    }
}

/// Debian's cron and cronsim OR a restricted day-of-month with a restricted day-of-week:
/// a day that February never has is no reason to refuse a schedule that also names a
/// weekday. The impossible-date check holds only when the day-of-week field is `*`.
#[test]
fn an_impossible_day_of_month_with_a_weekday_runs_on_that_weekday() {
    for expression in ["0 0 30 2 MON", "0 0 31 2 1", "0 0 30,31 2 mon-mon"] {
        let runs = local_runs(expression, "UTC", utc(2026, 1, 1, 0, 0), 4);
        assert_eq!(
            runs,
            [
                "2026-02-02T00:00:00+00:00",
                "2026-02-09T00:00:00+00:00",
                "2026-02-16T00:00:00+00:00",
                "2026-02-23T00:00:00+00:00"
            ],
            "{expression}"
        );
    }
    // A weekday field that starts with `*` ANDs the two: still never.
    assert!(refusal("0 0 30 2 */2")
        .message()
        .contains("day 30 does not exist"));
}

#[test]
fn length_is_capped_at_100_characters() {
    let long = format!("0 0 * * {}", "1,".repeat(46) + "1");
    assert!(long.chars().count() == 101);
    assert_eq!(refusal(&long), ScheduleError::TooLong);
    assert_eq!(refusal(&"9".repeat(1_000_000)), ScheduleError::TooLong);
    let fits = format!("0 0 * * {}", "1,".repeat(45) + "1");
    assert!(fits.chars().count() <= 100);
    assert!(CronSchedule::parse(&fits, "UTC").is_ok());
}

#[test]
fn unknown_timezones_are_refused_for_the_timezone_attribute() {
    for zone in [
        "Mars/Olympus",
        "",
        "  ",
        "Etc/Unknown",
        "Europe/Riga\0",
        "../../etc/passwd",
    ] {
        let error = CronSchedule::parse("* * * * *", zone).expect_err(zone);
        assert_eq!(error.attribute(), "timezone", "{zone:?}");
        let validation = Validation::from(error);
        assert_eq!(validation.attribute, "timezone");
    }
    let error = CronSchedule::parse("* * * * *", "Mars/Olympus").unwrap_err();
    assert_eq!(
        error.to_string(),
        "timezone is not a known time zone (an IANA name such as Europe/Riga)"
    );
    // The expression's problem comes first.
    let error = CronSchedule::parse("@reboot", "Mars/Olympus").unwrap_err();
    assert_eq!(error.attribute(), "schedule");
}

#[test]
fn timezone_names_are_spelled_as_the_database_does() {
    assert_eq!(
        schedule("* * * * *", "europe/riga").timezone(),
        "Europe/Riga"
    );
    assert_eq!(schedule("* * * * *", DEFAULT_TIMEZONE).timezone(), "UTC");
    assert_eq!(schedule("  @daily\n", "UTC").expression(), "@daily");
}

// --- Grammar ------------------------------------------------------------------------

#[test]
fn steps_names_and_specials_follow_cronsim() {
    let from = utc(2026, 6, 1, 0, 50);
    assert_eq!(
        local_runs("*/7 * * * *", "UTC", from, 3),
        [
            "2026-06-01T00:56:00+00:00",
            "2026-06-01T01:00:00+00:00",
            "2026-06-01T01:07:00+00:00"
        ]
    );
    // From 00:50 exactly: strictly after it.
    assert_eq!(
        local_runs("5/15 * * * *", "UTC", from, 3),
        [
            "2026-06-01T01:05:00+00:00",
            "2026-06-01T01:20:00+00:00",
            "2026-06-01T01:35:00+00:00"
        ]
    );
    // A step over one value counts from it to the end of the range.
    assert_eq!(
        local_runs("5-5/20 * * * *", "UTC", utc(2026, 6, 1, 0, 0), 3),
        [
            "2026-06-01T00:05:00+00:00",
            "2026-06-01T00:25:00+00:00",
            "2026-06-01T00:45:00+00:00"
        ]
    );
    // Names, any case; 7 is Sunday; MON/2 is Monday, Wednesday, Friday and Sunday (7).
    assert_eq!(
        local_runs("0 0 * jun mon/2", "UTC", utc(2026, 6, 1, 0, 0), 4),
        [
            "2026-06-03T00:00:00+00:00",
            "2026-06-05T00:00:00+00:00",
            "2026-06-07T00:00:00+00:00",
            "2026-06-08T00:00:00+00:00"
        ]
    );
    // L, LW, 5L, MON#2.
    assert_eq!(
        local_runs("0 0 L 2 *", "UTC", utc(2028, 1, 1, 0, 0), 1),
        ["2028-02-29T00:00:00+00:00"]
    );
    // 2026-05-31 is a Sunday: the last weekday is Friday the 29th.
    assert_eq!(
        local_runs("0 0 LW 5 *", "UTC", utc(2026, 1, 1, 0, 0), 1),
        ["2026-05-29T00:00:00+00:00"]
    );
    assert_eq!(
        local_runs("0 0 * * 5L", "UTC", utc(2026, 6, 1, 0, 0), 1),
        ["2026-06-26T00:00:00+00:00"]
    );
    assert_eq!(
        local_runs("0 0 * * MON#2", "UTC", utc(2026, 6, 1, 0, 0), 1),
        ["2026-06-08T00:00:00+00:00"]
    );
    // L and LW together (croner needs two patterns for it): 2026-05-29 and 05-31.
    assert_eq!(
        local_runs("0 0 LW,L 5 *", "UTC", utc(2026, 1, 1, 0, 0), 2),
        ["2026-05-29T00:00:00+00:00", "2026-05-31T00:00:00+00:00"]
    );
}

#[test]
fn day_fields_are_ored_unless_one_starts_with_a_star() {
    // OR: the 1st and 15th, and every Monday.
    assert_eq!(
        local_runs("0 0 1,15 * MON", "UTC", utc(2026, 6, 1, 0, 0), 5),
        [
            "2026-06-08T00:00:00+00:00",
            "2026-06-15T00:00:00+00:00",
            "2026-06-22T00:00:00+00:00",
            "2026-06-29T00:00:00+00:00",
            "2026-07-01T00:00:00+00:00"
        ]
    );
    // AND: odd days that are Mondays.
    assert_eq!(
        local_runs("0 0 */2 * MON", "UTC", utc(2026, 6, 1, 0, 0), 2),
        ["2026-06-15T00:00:00+00:00", "2026-06-29T00:00:00+00:00"]
    );
}

#[test]
fn macros_stand_for_their_fields() {
    let from = utc(2026, 6, 10, 12, 34);
    for (name, fields) in [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
    ] {
        let a = schedule(name, "Europe/Riga");
        let b = schedule(fields, "Europe/Riga");
        assert_eq!(
            a.times_after(from).take(5).collect::<Vec<_>>(),
            b.times_after(from).take(5).collect::<Vec<_>>(),
            "{name}"
        );
        assert_eq!(a.expression(), name);
    }
}

// --- DST ------------------------------------------------------------------------------

/// cronsim's own Riga examples (tests/test_cronsim.py, TestDstTransitions): 2021-03-28
/// 03:00 -> 04:00 and 2021-10-31 04:00 -> 03:00.
#[test]
fn riga_transitions_as_cronsim_tests_them() {
    let spring = utc(2021, 3, 27, 12, 0);
    assert_eq!(
        local_runs("15 3 * * *", "Europe/Riga", spring, 2),
        ["2021-03-28T04:00:00+03:00", "2021-03-29T03:15:00+03:00"]
    );
    assert_eq!(
        local_runs(
            "30 1,2,3,4,5 * * *",
            "Europe/Riga",
            utc(2021, 3, 27, 22, 0),
            5
        ),
        [
            "2021-03-28T01:30:00+02:00",
            "2021-03-28T02:30:00+02:00",
            "2021-03-28T04:00:00+03:00",
            "2021-03-28T04:30:00+03:00",
            "2021-03-28T05:30:00+03:00"
        ]
    );
    let autumn = utc(2021, 10, 30, 21, 30);
    assert_eq!(
        local_runs("0 1-5 * * *", "Europe/Riga", autumn, 5),
        [
            "2021-10-31T01:00:00+03:00",
            "2021-10-31T02:00:00+03:00",
            "2021-10-31T03:00:00+03:00",
            "2021-10-31T04:00:00+02:00",
            "2021-10-31T05:00:00+02:00"
        ]
    );
    assert_eq!(
        local_runs("*/15 3 * * *", "Europe/Riga", autumn, 8)[..],
        [
            "2021-10-31T03:00:00+03:00",
            "2021-10-31T03:15:00+03:00",
            "2021-10-31T03:30:00+03:00",
            "2021-10-31T03:45:00+03:00",
            "2021-10-31T03:00:00+02:00",
            "2021-10-31T03:15:00+02:00",
            "2021-10-31T03:30:00+02:00",
            "2021-10-31T03:45:00+02:00"
        ]
    );
}

#[test]
fn fixed_time_jobs_run_once_per_wall_clock_time() {
    // Spring-forward gap: the first real minute after it.
    assert_eq!(
        local_runs("30 2 * * *", "America/New_York", utc(2026, 3, 7, 17, 0), 2),
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"]
    );
    assert_eq!(
        local_runs(
            "15 2 * * *",
            "Australia/Lord_Howe",
            utc(2026, 10, 3, 0, 0),
            1
        ),
        ["2026-10-04T02:30:00+11:00"]
    );
    // Fall-back: once, the first time.
    assert_eq!(
        local_runs(
            "30 1 * * *",
            "America/New_York",
            utc(2026, 10, 31, 16, 0),
            2
        ),
        ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"]
    );
    // From inside the second pass of the repeated hour, the day's run is behind.
    let second_pass = utc(2026, 11, 1, 6, 10); // 01:10 EST
    assert_eq!(
        local_runs("30 1 * * *", "America/New_York", second_pass, 1),
        ["2026-11-02T01:30:00-05:00"]
    );
    // A real-time job runs in both passes.
    assert_eq!(
        local_runs("30 * * * *", "America/New_York", second_pass, 1),
        ["2026-11-01T01:30:00-05:00"]
    );
}

#[test]
fn next_after_is_strictly_after_even_within_a_second() {
    let s = schedule("0 12 * * *", "UTC");
    let noon = utc(2026, 6, 1, 12, 0);
    assert_eq!(s.next_after(noon - Duration::nanoseconds(1)), Some(noon));
    assert_eq!(s.next_after(noon), Some(noon + Duration::days(1)));
    assert_eq!(
        s.next_after(noon + Duration::milliseconds(500)),
        Some(noon + Duration::days(1))
    );
}

// --- Rare expressions and the horizon ------------------------------------------------

#[test]
fn rare_expressions_terminate_quickly() {
    // OR rule: 29 February, or any Monday of February.
    assert_eq!(
        local_runs("0 0 29 2 1", "UTC", utc(2026, 3, 1, 0, 0), 2),
        ["2027-02-01T00:00:00+00:00", "2027-02-08T00:00:00+00:00"]
    );
    // AND: a 29 February that is a Sunday (2032, then 2060).
    assert_eq!(
        local_runs("0 0 29 2 */7", "America/New_York", utc(2026, 3, 1, 0, 0), 2),
        ["2032-02-29T00:00:00-05:00", "2060-02-29T00:00:00-05:00"]
    );
    // A fifth Monday in February: 2044, 2072.
    assert_eq!(
        local_runs("0 0 * 2 MON#5", "Europe/Riga", utc(2026, 3, 1, 0, 0), 2),
        ["2044-02-29T00:00:00+02:00", "2072-02-29T00:00:00+02:00"]
    );
    assert_eq!(
        local_runs("0 0 29 2 *", "UTC", utc(2097, 1, 1, 0, 0), 1),
        ["2104-02-29T00:00:00+00:00"]
    );
    // Near the end of jiff's range there is nothing more: None, not a loop.
    assert_eq!(
        schedule("0 0 * 2 MON#5", "UTC").next_after(utc(9990, 1, 1, 0, 0)),
        None
    );
    assert_eq!(
        schedule("* * * * *", "UTC").next_after(utc(9999, 12, 31, 23, 59)),
        None
    );
    let far = DateTime::<Utc>::MAX_UTC;
    assert_eq!(schedule("* * * * *", "Europe/Riga").next_after(far), None);
    assert_eq!(
        schedule("* * * * *", "UTC").shortest_gap(far),
        Duration::MAX
    );
}

// --- shortest_gap, describe, local rendering ---------------------------------------

#[test]
fn shortest_gap_between_runs() {
    let from = utc(2026, 1, 1, 0, 0);
    assert_eq!(
        schedule("* * * * *", "UTC").shortest_gap(from),
        Duration::minutes(1)
    );
    assert_eq!(
        schedule("*/7 * * * *", "UTC").shortest_gap(from),
        Duration::minutes(4)
    );
    assert_eq!(
        schedule("0 */2 * * *", "UTC").shortest_gap(from),
        Duration::hours(2)
    );
    assert_eq!(
        schedule("0 9 * * 1-5", "UTC").shortest_gap(from),
        Duration::days(1)
    );
    // The spring-forward day: 02:30 EST, then 03:00 EDT the next day.
    assert_eq!(
        schedule("30 2 * * *", "America/New_York").shortest_gap(from),
        Duration::minutes(23 * 60 + 30)
    );
    assert_eq!(
        schedule("0 0 29 2 *", "UTC").shortest_gap(from),
        Duration::days(1461)
    );
}

#[test]
fn describes_common_schedules() {
    let cases = [
        ("* * * * *", Some("every minute")),
        ("*/15 * * * *", Some("every 15 minutes")),
        ("0,20,40 * * * *", Some("every 20 minutes")),
        ("*/7 * * * *", None),
        ("5 * * * *", Some("every hour at minute 5")),
        ("30 2 * * *", Some("every day at 02:30")),
        ("@daily", Some("every day at 00:00")),
        ("0 9 * * MON", Some("every Monday at 09:00")),
        ("0 9 * * 7", Some("every Sunday at 09:00")),
        ("0 9 1 * MON", None),
        ("0 9 * * 1-5", None),
        ("0 9 1 * *", None),
        ("0 9-17 * * *", None),
    ];
    for (expression, words) in cases {
        assert_eq!(
            schedule(expression, "UTC").describe().as_deref(),
            words,
            "{expression}"
        );
    }
}

#[test]
fn renders_instants_in_the_schedule_zone() {
    let s = schedule("* * * * *", "Asia/Kathmandu");
    assert_eq!(
        s.to_local_iso(utc(2026, 6, 1, 0, 0)),
        "2026-06-01T05:45:00.000+05:45"
    );
    let s = schedule("* * * * *", "America/New_York");
    assert_eq!(
        s.to_local_iso(utc(2026, 6, 1, 0, 0) + Duration::milliseconds(7)),
        "2026-05-31T20:00:00.007-04:00"
    );
}

// --- Properties -----------------------------------------------------------------------

const ZONES: [&str; 9] = [
    "UTC",
    "Europe/Riga",
    "Europe/London",
    "America/New_York",
    "America/Santiago",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "Pacific/Chatham",
];

/// One term of a field with numbers in `low..=high`.
fn term(low: u32, high: u32) -> impl Strategy<Value = String> {
    let n = low..=high;
    prop_oneof![
        Just("*".to_string()),
        n.clone().prop_map(|a| a.to_string()),
        (n.clone(), n.clone()).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
        (1..=12u32).prop_map(|k| format!("*/{k}")),
        (n.clone(), 1..=15u32).prop_map(|(a, k)| format!("{a}/{k}")),
        (n.clone(), n, 1..=5u32).prop_map(|(a, b, k)| format!("{}-{}/{k}", a.min(b), a.max(b))),
    ]
}

fn field(low: u32, high: u32, extra: &'static [&'static str]) -> impl Strategy<Value = String> {
    let one = prop_oneof![
        4 => term(low, high),
        1 => proptest::sample::select(if extra.is_empty() { &["*"][..] } else { extra })
            .prop_map(str::to_string),
    ];
    proptest::collection::vec(one, 1..=3).prop_map(|terms| {
        if terms.iter().any(|t| t == "*") && terms.len() > 1 {
            terms
                .into_iter()
                .filter(|t| t != "*")
                .collect::<Vec<_>>()
                .join(",")
        } else {
            terms.join(",")
        }
    })
}

fn expression() -> impl Strategy<Value = String> {
    (
        field(0, 59, &[]),
        field(0, 23, &[]),
        field(1, 31, &["L", "LW"]),
        field(1, 12, &["JAN", "FEB", "JUN", "DEC"]),
        field(0, 7, &["MON", "FRI", "5L", "0L", "MON#2", "7#1", "SAT#5"]),
    )
        .prop_map(|(mi, h, dom, mo, dow)| format!("{mi} {h} {dom} {mo} {dow}"))
}

fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    // 2025 to 2031, on whole seconds or not.
    (
        1_735_689_600i64..1_924_992_000,
        prop_oneof![Just(0u32), 0..1_000_000_000u32],
    )
        .prop_map(|(s, ns)| DateTime::from_timestamp(s, ns).unwrap())
}

/// A reference for the wall clock search, written independently of croner: day by day
/// with `Fields::matches_date`, then the first hour and minute allowed. Within `days`.
fn reference_next_civil(
    fields: &Fields,
    after: chrono::NaiveDateTime,
    days: u32,
) -> Option<chrono::NaiveDateTime> {
    let mut date = after.date();
    for _ in 0..days {
        let jiff_date =
            civil::Date::new(date.year() as i16, date.month() as i8, date.day() as i8).ok()?;
        if fields.matches_date(jiff_date) {
            for hour in fields.hours.iter_values() {
                for minute in fields.minutes.iter_values() {
                    let t = date.and_hms_opt(hour, minute, 0)?;
                    if t > after {
                        return Some(t);
                    }
                }
            }
        }
        date = date.succ_opt()?;
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parse_never_panics_on_any_text(text in "\\PC{0,120}") {
        let _ = CronSchedule::parse(&text, "UTC");
    }

    #[test]
    fn parse_never_panics_on_cron_like_text(
        text in "[0-9*/,LW#@ \\-A-Za-z]{0,40}",
        zone in "[A-Za-z/_]{0,20}",
    ) {
        let _ = CronSchedule::parse(&text, &zone);
        if let Ok(s) = CronSchedule::parse(&text, "UTC") {
            let _ = s.next_after(utc(2026, 1, 1, 0, 0));
        }
    }

    #[test]
    fn runs_strictly_increase_and_follow_t(
        expression in expression(),
        zone in proptest::sample::select(&ZONES[..]),
        t in instant(),
    ) {
        let Ok(s) = CronSchedule::parse(&expression, zone) else { return Ok(()); };
        let mut previous = t;
        for next in s.times_after(t).take(8) {
            prop_assert!(next > previous, "{expression} {zone}: {next} after {previous}");
            prop_assert_eq!(next.nanosecond(), 0);
            prop_assert_eq!(s.next_after(previous), Some(next));
            previous = next;
        }
    }

    /// Croner's wall clock search against the independent reference, in UTC (where wall
    /// clock and instant agree).
    #[test]
    fn wall_clock_search_matches_the_reference(expression in expression(), t in instant()) {
        let Ok(s) = CronSchedule::parse(&expression, "UTC") else { return Ok(()); };
        let ours = s.next_after(t).map(|n| n.naive_utc());
        let reference = reference_next_civil(&s.parsed.fields, t.naive_utc(), 3 * 366);
        if let Some(reference) = reference {
            prop_assert_eq!(ours, Some(reference), "{}", expression);
        } else {
            prop_assert!(ours.is_none_or(|o| o > t.naive_utc() + Duration::days(3 * 366 - 2)));
        }
    }

    #[test]
    fn utc_minute_steps_are_naive_arithmetic(n in 1..=59u32, t in instant()) {
        let s = CronSchedule::parse(&format!("*/{n} * * * *"), "UTC").unwrap();
        // The allowed minutes are 0, n, 2n, ... up to 59, each hour.
        let hour = t.with_minute(0).unwrap().with_second(0).unwrap().with_nanosecond(0).unwrap();
        let expected = (0..60)
            .step_by(n as usize)
            .map(|m| hour + Duration::minutes(m as i64))
            .chain([hour + Duration::hours(1)])
            .find(|c| *c > t)
            .unwrap();
        prop_assert_eq!(s.next_after(t), Some(expected));
    }

    #[test]
    fn utc_daily_times_are_naive_arithmetic(h in 0..24u32, m in 0..60u32, t in instant()) {
        let s = CronSchedule::parse(&format!("{m} {h} * * *"), "UTC").unwrap();
        let today = Utc.from_utc_datetime(&t.date_naive().and_hms_opt(h, m, 0).unwrap());
        let expected = if today > t { today } else { today + Duration::days(1) };
        prop_assert_eq!(s.next_after(t), Some(expected));
    }

    #[test]
    fn fixed_time_jobs_never_repeat_a_wall_clock_time(
        minutes in proptest::collection::btree_set(0..60u32, 1..4),
        hours in proptest::collection::btree_set(0..24u32, 1..4),
        zone in proptest::sample::select(&ZONES[..]),
        t in instant(),
    ) {
        let list = |set: &std::collections::BTreeSet<u32>| {
            set.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        };
        let s = CronSchedule::parse(&format!("{} {} * * *", list(&minutes), list(&hours)), zone).unwrap();
        let mut seen = std::collections::HashSet::new();
        // Start a day before a random instant; 60 runs cover at least 5 days.
        for run in s.times_after(t - Duration::days(1)).take(60) {
            let local = s.to_local_iso(run);
            let wall = local[..19].to_string();
            prop_assert!(seen.insert(wall.clone()), "{} {zone}: {wall} twice", s.expression());
        }
    }
}

#[test]
fn fixed_time_jobs_over_every_fall_back_night_of_2026_2030() {
    // The runs of `30 1 * * *` etc. on the nights the clock goes back, in each DST zone.
    for zone in [
        "America/New_York",
        "Europe/London",
        "Australia/Lord_Howe",
        "America/Santiago",
    ] {
        for expression in ["30 1 * * *", "45 1 * * *", "0 0-3 * * *", "59 0,1,2 * * *"] {
            let s = schedule(expression, zone);
            let mut seen = std::collections::HashSet::new();
            for run in s
                .times_after(utc(2026, 1, 1, 0, 0))
                .take_while(|t| t.year() < 2031)
            {
                let local = s.to_local_iso(run);
                assert!(
                    seen.insert(local[..19].to_string()),
                    "{expression} {zone}: {local}"
                );
            }
            assert!(
                seen.len() > 365 * 5 - 5,
                "{expression} {zone}: {}",
                seen.len()
            );
        }
    }
}

#[test]
fn expressions_that_match_no_day_are_refused() {
    // Days 1, 9, 17 and 25 are never a fifth Monday; a 31 April never comes, and the
    // last weekday of a month is never a Sunday.
    assert_eq!(refusal("0 0 */8 * MON#5"), ScheduleError::NeverRuns);
    assert_eq!(refusal("0 0 LW * */7"), ScheduleError::NeverRuns);
    // With L as well, the L half still runs.
    assert!(CronSchedule::parse("0 0 LW,L * */7", "UTC").is_ok());
}

#[test]
fn schedules_can_be_shared_between_threads() {
    fn shared<T: Send + Sync + Clone + 'static>() {}
    shared::<CronSchedule>();
    shared::<ScheduleError>();
}

#[test]
fn the_searchable_zone_list_is_sorted_and_every_name_in_it_parses() {
    let names = super::timezone_names();
    assert!(names.len() > 300, "{}", names.len());
    assert!(names.windows(2).all(|w| w[0] < w[1]));
    for zone in [
        "Europe/Riga",
        "Asia/Kathmandu",
        "Australia/Lord_Howe",
        "UTC",
    ] {
        assert!(names.iter().any(|n| n == zone), "{zone}");
    }
    for zone in names {
        assert!(super::CronSchedule::parse("@daily", zone).is_ok(), "{zone}");
    }
}
