//! The window rule for a cron schedule (docs/rules.md#expected-runs): every expected time T
//! of the schedule has a window `[T − early, T + grace]`; a check-in (or a run's start)
//! inside it satisfies the run of T; a window that closes empty is a miss. A snitch keeps
//! one deadline, the close of the first run not yet satisfied or missed, and each step
//! below moves it.
//!
//! - `early` is at most half the gap to the previous run, so that no check-in can count
//!   for two runs: a window opens at the later of `T − early` and the midpoint between
//!   the previous run and T. Clients whose clocks run fast still count.
//! - `grace` may be longer than the gap between runs: then windows overlap, and a check-in
//!   satisfies the oldest run still open (the one the deadline is for). A snitch that
//!   starts counting (a first check-in, a resume) has no run open: the latest run whose
//!   window holds the instant is satisfied, so it never starts runs behind.
//! - A schedule with no run left (within its search horizon) has no deadline: `None`.

use chrono::Duration;

use super::CronSchedule;
use crate::calendar::Timestamp;
use crate::validation::Validation;

/// The shortest and longest grace a user may set.
pub const GRACE_MIN: Duration = Duration::seconds(60);
/// A year (healthchecks' limit).
pub const GRACE_MAX: Duration = Duration::seconds(31_536_000);
/// The grace of a schedule that sets none: an hour, or the shortest gap between two runs
/// when that is shorter (never under [`GRACE_MIN`]).
pub const GRACE_DEFAULT_MAX: Duration = Duration::hours(1);
/// How early a check-in may come by default: client clocks run fast.
pub const EARLY_DEFAULT: Duration = Duration::seconds(60);
/// The longest early span a user may set.
pub const EARLY_MAX: Duration = Duration::hours(1);

/// The span in which a check-in satisfies the run expected at `expected`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The first instant that counts.
    pub opens: Timestamp,
    /// When the run is expected.
    pub expected: Timestamp,
    /// The last instant that counts: the run's deadline.
    pub closes: Timestamp,
}

impl Window {
    /// Whether a check-in at `t` counts for this run.
    pub fn contains(&self, t: Timestamp) -> bool {
        self.opens <= t && t <= self.closes
    }
}

/// A cron schedule with its grace and early spans: when runs are expected, and when a
/// check-in counts for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedRuns {
    schedule: CronSchedule,
    grace: Duration,
    early: Duration,
}

impl ExpectedRuns {
    /// The runs of `schedule` with the grace and early spans a user gave (`None`: the
    /// defaults). The default grace depends on the schedule's gaps from `now` on, and is
    /// fixed here, once. A span out of range is a validation problem naming its attribute
    /// (`grace_seconds`, `early_seconds`).
    pub fn new(
        schedule: CronSchedule,
        grace: Option<Duration>,
        early: Option<Duration>,
        now: Timestamp,
    ) -> Result<ExpectedRuns, Validation> {
        ExpectedRuns::check_spans(grace, early)?;
        let grace = grace.unwrap_or_else(|| {
            schedule
                .shortest_gap(now)
                .clamp(GRACE_MIN, GRACE_DEFAULT_MAX)
        });
        let early = early.unwrap_or(EARLY_DEFAULT);
        Ok(ExpectedRuns {
            schedule,
            grace,
            early,
        })
    }

    /// Whether the spans a user gave are within their ranges: the problem of the first
    /// that is not, naming its attribute (`grace_seconds`, `early_seconds`).
    pub fn check_spans(grace: Option<Duration>, early: Option<Duration>) -> Result<(), Validation> {
        if grace.is_some_and(|grace| grace < GRACE_MIN || grace > GRACE_MAX) {
            return Err(Validation::new(
                "grace_seconds",
                format!(
                    "must be between {} and {} seconds",
                    GRACE_MIN.num_seconds(),
                    GRACE_MAX.num_seconds()
                ),
            ));
        }
        if early.is_some_and(|early| early < Duration::zero() || early > EARLY_MAX) {
            return Err(Validation::new(
                "early_seconds",
                format!("must be between 0 and {} seconds", EARLY_MAX.num_seconds()),
            ));
        }
        Ok(())
    }

    /// The runs of `schedule` with spans that were settled before (a store reading a
    /// snitch back): checked against the same ranges as [`ExpectedRuns::new`].
    pub fn with_spans(
        schedule: CronSchedule,
        grace: Duration,
        early: Duration,
    ) -> Result<ExpectedRuns, Validation> {
        // Both spans given: `now` only matters for a default grace.
        ExpectedRuns::new(schedule, Some(grace), Some(early), Timestamp::UNIX_EPOCH)
    }

    /// The schedule.
    pub fn schedule(&self) -> &CronSchedule {
        &self.schedule
    }

    /// How long after an expected time a check-in still counts for it.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// How long before an expected time a check-in already counts for it (at most half
    /// the gap to the previous run, see [`ExpectedRuns::window`]).
    pub fn early(&self) -> Duration {
        self.early
    }

    /// The window of the run expected at `expected` (an expected time of the schedule).
    pub fn window(&self, expected: Timestamp) -> Window {
        let earliest = expected - self.early;
        // The last run before `expected`, if it is close enough for the halfway point to
        // fall after `earliest` (within twice the early span): the window opens no
        // earlier than halfway from it.
        let previous = self.last_run_within(expected, self.early * 2);
        let opens = match previous {
            Some(previous) => earliest.max(previous + (expected - previous) / 2),
            None => earliest,
        };
        Window {
            opens,
            expected,
            closes: expected + self.grace,
        }
    }

    /// The last run in `[before - span, before)`, if any. Probes back a minute, then
    /// twice as far each time, so a frequent schedule costs a few searches, not one per
    /// run in the span (every-minute runs and an hour early span: 2, not 120).
    fn last_run_within(&self, before: Timestamp, span: Duration) -> Option<Timestamp> {
        if span <= Duration::zero() {
            return None;
        }
        let mut reach = Duration::minutes(1).min(span);
        loop {
            let from = before - reach;
            let first = self
                .schedule
                .next_after(from - Duration::milliseconds(1))
                .filter(|t| *t < before);
            if let Some(mut last) = first {
                // Runs lie in [from, before): the last of them is the one.
                while let Some(t) = self.schedule.next_after(last).filter(|t| *t < before) {
                    last = t;
                }
                return Some(last);
            }
            if reach >= span {
                return None;
            }
            reach = (reach * 2).min(span);
        }
    }

    /// When the run whose deadline is `deadline` is expected: its deadline less the grace
    /// (no search of the schedule, as the window's opening needs).
    pub fn expected_at(&self, deadline: Timestamp) -> Timestamp {
        deadline - self.grace
    }

    /// The window whose deadline (close) is `deadline`.
    pub fn window_closing_at(&self, deadline: Timestamp) -> Window {
        self.window(self.expected_at(deadline))
    }

    /// The deadline of a snitch that starts counting at `t` with no run pending: after
    /// its first check-in, a resume from a pause, or the end of our own outage, each of
    /// which counts as a check-in at `t`. The latest run whose window holds `t` is
    /// satisfied and the run after it is due; when no window holds `t`, the next run is
    /// due. Either way the run due is after `t`: nothing before it is ever expected.
    pub fn deadline_from(&self, t: Timestamp) -> Option<Timestamp> {
        // Only the first run after `t` can hold `t` in its early span (the next one opens
        // after halfway to it); every run up to `t` whose grace holds `t` is older than it.
        // So: that first run is satisfied when its window is open, else it is the one due
        // (whether or not an older run's grace still holds `t`).
        let next = self.schedule.next_after(t)?;
        let due = if self.window(next).opens <= t {
            self.schedule.next_after(next)?
        } else {
            next
        };
        Some(due + self.grace)
    }

    /// The deadline after a check-in at `t` of a snitch whose deadline was `pending` (not
    /// passed: the snitch was brought up to `t` first). A check-in inside the pending
    /// run's window satisfies it and the next run is due; one before it changes nothing.
    pub fn deadline_after_check_in(
        &self,
        pending: Option<Timestamp>,
        t: Timestamp,
    ) -> Option<Timestamp> {
        match pending {
            Some(deadline) if deadline >= t => {
                let window = self.window_closing_at(deadline);
                if window.opens <= t {
                    Some(self.schedule.next_after(window.expected)? + self.grace)
                } else {
                    Some(deadline)
                }
            }
            _ => self.deadline_from(t),
        }
    }

    /// The deadline of the run after the one whose deadline passed empty.
    pub fn deadline_after_miss(&self, deadline: Timestamp) -> Option<Timestamp> {
        Some(self.schedule.next_after(self.expected_at(deadline))? + self.grace)
    }

    /// The deadline once the schedule, zone or spans changed at `now`: the first run
    /// strictly after the change is the first that must happen, so nothing earlier is
    /// ever alerted.
    pub fn deadline_after_change(&self, now: Timestamp) -> Option<Timestamp> {
        Some(self.schedule.next_after(now)? + self.grace)
    }

    /// Whether `earlier` and `later` fall between the same two expected times (no run is
    /// expected in `(earlier, later]`): the slot in which at most one alert of a kind is
    /// sent.
    pub fn same_slot(&self, earlier: Timestamp, later: Timestamp) -> bool {
        self.schedule
            .next_after(earlier)
            .is_none_or(|next| next > later)
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};
    use proptest::prelude::*;

    use super::*;

    fn at(s: &str) -> Timestamp {
        DateTime::parse_from_rfc3339(s)
            .expect("a valid instant")
            .with_timezone(&Utc)
    }

    fn runs(expression: &str, timezone: &str, grace: i64, early: i64) -> ExpectedRuns {
        ExpectedRuns::new(
            CronSchedule::parse(expression, timezone).expect("a valid schedule"),
            Some(Duration::seconds(grace)),
            Some(Duration::seconds(early)),
            at("2026-01-01T00:00:00Z"),
        )
        .expect("valid spans")
    }

    #[test]
    fn defaults_are_an_hour_or_the_shortest_gap_and_a_minute_early() {
        let now = at("2026-01-01T00:00:00Z");
        let daily = ExpectedRuns::new(
            CronSchedule::parse("30 2 * * *", "Europe/Riga").expect("valid"),
            None,
            None,
            now,
        )
        .expect("valid");
        assert_eq!(daily.grace(), Duration::hours(1));
        assert_eq!(daily.early(), Duration::seconds(60));
        let quarter = ExpectedRuns::new(
            CronSchedule::parse("*/15 * * * *", "UTC").expect("valid"),
            None,
            None,
            now,
        )
        .expect("valid");
        assert_eq!(quarter.grace(), Duration::minutes(15));
        let every_minute = ExpectedRuns::new(
            CronSchedule::parse("* * * * *", "UTC").expect("valid"),
            None,
            None,
            now,
        )
        .expect("valid");
        assert_eq!(every_minute.grace(), GRACE_MIN);
    }

    #[test]
    fn spans_out_of_range_name_their_attribute() {
        let schedule = CronSchedule::parse("@daily", "UTC").expect("valid");
        let now = at("2026-01-01T00:00:00Z");
        for (grace, early, attribute) in [
            (Some(59), None, "grace_seconds"),
            (Some(31_536_001), None, "grace_seconds"),
            (None, Some(-1), "early_seconds"),
            (None, Some(3_601), "early_seconds"),
        ] {
            let made = ExpectedRuns::new(
                schedule.clone(),
                grace.map(Duration::seconds),
                early.map(Duration::seconds),
                now,
            );
            assert_eq!(made.expect_err("out of range").attribute, attribute);
        }
        for (grace, early) in [(60, 0), (31_536_000, 3_600)] {
            ExpectedRuns::new(
                schedule.clone(),
                Some(Duration::seconds(grace)),
                Some(Duration::seconds(early)),
                now,
            )
            .expect("the bounds are allowed");
        }
    }

    #[test]
    fn a_check_in_a_little_early_counts_for_the_run() {
        let daily = runs("30 2 * * *", "UTC", 1_800, 60);
        let pending = Some(at("2026-03-10T03:00:00Z"));
        // 02:29:30 is within a minute of 02:30: that run is done, the next is due.
        assert_eq!(
            daily.deadline_after_check_in(pending, at("2026-03-10T02:29:30Z")),
            Some(at("2026-03-11T03:00:00Z"))
        );
        // 02:28 is before the window: still due by 03:00.
        assert_eq!(
            daily.deadline_after_check_in(pending, at("2026-03-10T02:28:00Z")),
            pending
        );
        // Late but within the grace counts too.
        assert_eq!(
            daily.deadline_after_check_in(pending, at("2026-03-10T02:59:59Z")),
            Some(at("2026-03-11T03:00:00Z"))
        );
    }

    #[test]
    fn early_is_at_most_half_the_gap_to_the_previous_run() {
        let every_minute = runs("* * * * *", "UTC", 60, 3_600);
        let window = every_minute.window(at("2026-03-10T10:00:00Z"));
        assert_eq!(window.opens, at("2026-03-10T09:59:30Z"));
        assert_eq!(window.closes, at("2026-03-10T10:01:00Z"));
        // The first run of a day-time job: no run in the early span before it.
        let office = runs("0 9-17 * * *", "UTC", 600, 3_600);
        assert_eq!(
            office.window(at("2026-03-10T09:00:00Z")).opens,
            at("2026-03-10T08:00:00Z")
        );
        assert_eq!(
            office.window(at("2026-03-10T10:00:00Z")).opens,
            at("2026-03-10T09:30:00Z")
        );
    }

    #[test]
    fn a_grace_longer_than_the_gap_satisfies_the_oldest_open_run() {
        let hourly = runs("0 * * * *", "UTC", 3 * 3_600, 0);
        // Due: the 10:00 run, by 13:00. A check-in at 11:30 is inside the windows of
        // 10:00 and 11:00: it counts for 10:00, and 11:00 is due next.
        assert_eq!(
            hourly.deadline_after_check_in(
                Some(at("2026-03-10T13:00:00Z")),
                at("2026-03-10T11:30:00Z")
            ),
            Some(at("2026-03-10T14:00:00Z"))
        );
    }

    #[test]
    fn a_first_check_in_between_windows_makes_the_next_run_due() {
        let daily = runs("30 2 * * *", "UTC", 1_800, 60);
        assert_eq!(
            daily.deadline_from(at("2026-03-10T12:00:00Z")),
            Some(at("2026-03-11T03:00:00Z"))
        );
        // Inside a window: that run counts, the next one is due.
        assert_eq!(
            daily.deadline_from(at("2026-03-10T02:45:00Z")),
            Some(at("2026-03-11T03:00:00Z"))
        );
        assert_eq!(
            daily.deadline_from(at("2026-03-10T02:00:00Z")),
            Some(at("2026-03-10T03:00:00Z"))
        );
    }

    #[test]
    fn a_first_check_in_satisfies_the_latest_run_whose_window_holds_it() {
        // Every minute with an hour of grace: a check-in at 12:00:10 is inside the windows
        // of the sixty runs 11:01..12:00. The latest (12:00) is satisfied; 12:01 is due.
        let every_minute = runs("* * * * *", "UTC", 3_600, 60);
        assert_eq!(
            every_minute.deadline_from(at("2026-03-10T12:00:10Z")),
            Some(at("2026-03-10T13:01:00Z"))
        );
        // At 12:00:40 the early span of 12:01 holds it (it opens halfway, at 12:00:30).
        assert_eq!(
            every_minute.deadline_from(at("2026-03-10T12:00:40Z")),
            Some(at("2026-03-10T13:02:00Z"))
        );
        // Hourly runs with three hours of grace, started at 11:30: 11:00 is satisfied,
        // not 09:00, and the next check-in inside 12:00's window moves on by one run.
        let hourly = runs("0 * * * *", "UTC", 3 * 3_600, 0);
        let deadline = hourly.deadline_from(at("2026-03-10T11:30:00Z"));
        assert_eq!(deadline, Some(at("2026-03-10T15:00:00Z")));
        assert_eq!(
            hourly.deadline_after_check_in(deadline, at("2026-03-10T12:05:00Z")),
            Some(at("2026-03-10T16:00:00Z"))
        );
    }

    #[test]
    fn a_change_makes_the_first_run_after_it_due() {
        let daily = runs("30 2 * * *", "Europe/Riga", 3_600, 60);
        // 00:20 UTC is 02:20 in Riga (winter): today's 02:30 run is after the change.
        assert_eq!(
            daily.deadline_after_change(at("2026-01-15T00:20:00Z")),
            Some(at("2026-01-15T01:30:00Z"))
        );
        assert_eq!(
            daily.deadline_after_change(at("2026-01-15T00:30:00Z")),
            Some(at("2026-01-16T01:30:00Z"))
        );
    }

    #[test]
    fn a_fall_back_night_expects_a_fixed_time_job_once() {
        // Europe/Riga falls back at 04:00 to 03:00 on 2026-10-25: 03:30 happens twice.
        let nightly = runs("30 3 * * *", "Europe/Riga", 1_800, 60);
        let first = at("2026-10-25T00:30:00Z"); // 03:30 +03:00
        let deadline = nightly.deadline_from(first - Duration::hours(1));
        assert_eq!(deadline, Some(first + Duration::minutes(30)));
        // The job runs once, at the first 03:30; the next run is the next night's.
        assert_eq!(
            nightly.deadline_after_check_in(deadline, first),
            Some(at("2026-10-26T02:00:00Z"))
        );
    }

    #[test]
    fn missed_runs_step_to_the_next_run_and_slots_split_at_expected_times() {
        let quarter = runs("*/15 * * * *", "UTC", 300, 60);
        let deadline = at("2026-03-10T10:20:00Z");
        assert_eq!(
            quarter.deadline_after_miss(deadline),
            Some(at("2026-03-10T10:35:00Z"))
        );
        assert!(quarter.same_slot(at("2026-03-10T10:15:00Z"), at("2026-03-10T10:29:59Z")));
        assert!(!quarter.same_slot(at("2026-03-10T10:14:59Z"), at("2026-03-10T10:15:00Z")));
    }

    /// Zones with DST in both hemispheres, a half-hour shift, an odd offset and none.
    const ZONES: [&str; 6] = [
        "UTC",
        "Europe/Riga",
        "America/New_York",
        "Australia/Lord_Howe",
        "Asia/Kathmandu",
        "Pacific/Auckland",
    ];
    const EXPRESSIONS: [&str; 6] = [
        "30 2 * * *",
        "*/20 * * * *",
        "0 */3 * * *",
        "15 1,2,3 * * *",
        "0 9 * * MON-FRI",
        "45 23 L * *",
    ];

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// A job that runs at every expected time, off by any amount its window allows,
        /// is never late: each check-in satisfies the pending run, and the deadline moves
        /// to the next run's close, strictly later each time. Started at random days
        /// around the transitions of 2026.
        #[test]
        fn a_job_within_its_windows_is_never_missed(
            expression in prop::sample::select(&EXPRESSIONS[..]),
            timezone in prop::sample::select(&ZONES[..]),
            start_day in 0i64..365,
            grace in 60i64..7_200,
            early in 0i64..3_600,
            jitter in prop::collection::vec(0.0f64..=1.0, 40),
        ) {
            let expected = runs(expression, timezone, grace, early);
            let start = at("2026-01-01T00:00:00Z") + Duration::days(start_day);
            let mut deadline = expected.deadline_after_change(start);
            for fraction in jitter {
                let pending = deadline.expect("runs go on");
                let window = expected.window_closing_at(pending);
                prop_assert!(window.opens <= window.expected && window.expected < window.closes);
                let span = (window.closes - window.opens).num_milliseconds() as f64;
                let t = window.opens + Duration::milliseconds((span * fraction) as i64);
                let next = expected.deadline_after_check_in(deadline, t);
                let next_run = expected.schedule().next_after(window.expected);
                prop_assert_eq!(next, next_run.map(|r| r + expected.grace()));
                prop_assert!(next > deadline);
                deadline = next;
            }
        }

        /// A snitch that starts counting at `t` (a first check-in, a resume, the end of
        /// our outage) expects no run before `t`: the run due is after `t`, so no alert
        /// can come before the first expected time after `t` plus its grace, and a job
        /// that keeps running on time is never behind. Any grace, longer than the gap or
        /// not.
        #[test]
        fn a_snitch_that_starts_counting_expects_nothing_before_it(
            expression in prop::sample::select(&EXPRESSIONS[..]),
            timezone in prop::sample::select(&ZONES[..]),
            start_minute in 0i64..525_600,
            offset_ms in 0i64..60_000,
            grace in 60i64..=31_536_000,
            early in 0i64..=3_600,
        ) {
            let expected = runs(expression, timezone, grace, early);
            let t = at("2026-01-01T00:00:00Z")
                + Duration::minutes(start_minute)
                + Duration::milliseconds(offset_ms);
            let deadline = expected.deadline_from(t).expect("runs go on");
            let due = expected.expected_at(deadline);
            let first_after = expected.schedule().next_after(t).expect("runs go on");
            prop_assert!(due > t - expected.early(), "due {due} for a start at {t}");
            prop_assert!(due >= first_after, "due {due}, first run after {t}: {first_after}");
            prop_assert!(deadline >= first_after + expected.grace());
            // The run due is the first after `t`, or the one after it when the first's
            // early span already holds `t`.
            let window = expected.window(first_after);
            if window.opens <= t {
                prop_assert_eq!(Some(due), expected.schedule().next_after(first_after));
            } else {
                prop_assert_eq!(due, first_after);
            }
        }

        /// In UTC a schedule of every `n` minutes is plain arithmetic: the deadlines
        /// after misses are `n` minutes apart.
        #[test]
        fn utc_steps_are_arithmetic(
            n in prop::sample::select(vec![1i64, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30]),
            start_minute in 0i64..100_000,
        ) {
            let expected = runs(&format!("*/{n} * * * *"), "UTC", 60, 0);
            let start = at("2026-01-01T00:00:00Z") + Duration::minutes(start_minute);
            let mut deadline = expected.deadline_after_change(start).expect("runs");
            for _ in 0..20 {
                let next = expected.deadline_after_miss(deadline).expect("runs");
                prop_assert_eq!(next - deadline, Duration::minutes(n));
                deadline = next;
            }
        }

        /// The backward probe finds the same previous run as walking every run of the
        /// span forward.
        #[test]
        fn the_previous_run_is_the_last_one_walked_forward(
            expression in prop::sample::select(&EXPRESSIONS[..]),
            timezone in prop::sample::select(&ZONES[..]),
            start_minute in 0i64..525_600,
            span_minutes in 0i64..=120,
        ) {
            let expected = runs(expression, timezone, 60, 0);
            let before = at("2026-01-01T00:00:00Z") + Duration::minutes(start_minute);
            let span = Duration::minutes(span_minutes);
            let mut walked = None;
            let mut run = expected.schedule().next_after(before - span - Duration::milliseconds(1));
            while let Some(t) = run.filter(|t| *t < before) {
                walked = Some(t);
                run = expected.schedule().next_after(t);
            }
            prop_assert_eq!(expected.last_run_within(before, span), walked);
        }

        /// No check-in counts for two runs: a window opens no earlier than halfway from
        /// the previous run, so with a grace under half the gap consecutive windows are
        /// apart.
        #[test]
        fn windows_of_consecutive_runs_are_disjoint_within_the_gap(
            expression in prop::sample::select(&EXPRESSIONS[..]),
            timezone in prop::sample::select(&ZONES[..]),
            start_day in 0i64..365,
            early in 0i64..3_600,
        ) {
            let expected = runs(expression, timezone, 60, early);
            let start = at("2026-01-01T00:00:00Z") + Duration::days(start_day);
            let times: Vec<_> = expected.schedule().times_after(start).take(30).collect();
            for pair in times.windows(2) {
                let (a, b) = (expected.window(pair[0]), expected.window(pair[1]));
                if b.expected - a.expected > Duration::seconds(120) {
                    prop_assert!(a.closes < b.opens, "{a:?} overlaps {b:?}");
                }
                prop_assert!(b.opens >= a.expected + (b.expected - a.expected) / 2);
            }
        }
    }
}
