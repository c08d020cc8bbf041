//! Intervals and their UTC-aligned periods (docs/rules.md#time-and-periods).
//!
//! Every interval cuts time into fixed periods `[start, end)`: minute intervals at minutes
//! divisible by N within each hour, hour intervals at hours divisible by N from midnight,
//! days at 00:00, weeks at Monday 00:00 and months at the 1st, 00:00, all in UTC.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Timelike, Utc};

/// An instant. All times in Snitch are UTC.
pub type Timestamp = DateTime<Utc>;

/// How often a job is expected to check in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Interval {
    /// One minute.
    Minute1,
    /// Two minutes.
    Minute2,
    /// Three minutes.
    Minute3,
    /// Five minutes.
    Minute5,
    /// Ten minutes.
    Minute10,
    /// Fifteen minutes.
    Minute15,
    /// Thirty minutes.
    Minute30,
    /// One hour.
    Hourly,
    /// Two hours.
    Hour2,
    /// Three hours.
    Hour3,
    /// Four hours.
    Hour4,
    /// Six hours.
    Hour6,
    /// Eight hours.
    Hour8,
    /// Twelve hours.
    Hour12,
    /// One day (UTC midnight to midnight).
    Daily,
    /// One week, from Monday 00:00 UTC.
    Weekly,
    /// One calendar month, from the 1st 00:00 UTC.
    Monthly,
}

/// The shape of an interval's periods.
enum Unit {
    Minutes(u32),
    Hours(u32),
    Day,
    Week,
    Month,
}

impl Interval {
    /// Every interval, shortest first, in the order the API lists them.
    pub const ALL: [Interval; 17] = [
        Interval::Minute1,
        Interval::Minute2,
        Interval::Minute3,
        Interval::Minute5,
        Interval::Minute10,
        Interval::Minute15,
        Interval::Minute30,
        Interval::Hourly,
        Interval::Hour2,
        Interval::Hour3,
        Interval::Hour4,
        Interval::Hour6,
        Interval::Hour8,
        Interval::Hour12,
        Interval::Daily,
        Interval::Weekly,
        Interval::Monthly,
    ];

    /// The API name, e.g. `15_minute` or `daily`.
    pub fn as_str(self) -> &'static str {
        match self {
            Interval::Minute1 => "1_minute",
            Interval::Minute2 => "2_minute",
            Interval::Minute3 => "3_minute",
            Interval::Minute5 => "5_minute",
            Interval::Minute10 => "10_minute",
            Interval::Minute15 => "15_minute",
            Interval::Minute30 => "30_minute",
            Interval::Hourly => "hourly",
            Interval::Hour2 => "2_hour",
            Interval::Hour3 => "3_hour",
            Interval::Hour4 => "4_hour",
            Interval::Hour6 => "6_hour",
            Interval::Hour8 => "8_hour",
            Interval::Hour12 => "12_hour",
            Interval::Daily => "daily",
            Interval::Weekly => "weekly",
            Interval::Monthly => "monthly",
        }
    }

    /// Intervals of 30 minutes or less: these allow only the `basic` alert type.
    pub fn is_sub_hourly(self) -> bool {
        matches!(self.unit(), Unit::Minutes(_))
    }

    fn unit(self) -> Unit {
        match self {
            Interval::Minute1 => Unit::Minutes(1),
            Interval::Minute2 => Unit::Minutes(2),
            Interval::Minute3 => Unit::Minutes(3),
            Interval::Minute5 => Unit::Minutes(5),
            Interval::Minute10 => Unit::Minutes(10),
            Interval::Minute15 => Unit::Minutes(15),
            Interval::Minute30 => Unit::Minutes(30),
            Interval::Hourly => Unit::Hours(1),
            Interval::Hour2 => Unit::Hours(2),
            Interval::Hour3 => Unit::Hours(3),
            Interval::Hour4 => Unit::Hours(4),
            Interval::Hour6 => Unit::Hours(6),
            Interval::Hour8 => Unit::Hours(8),
            Interval::Hour12 => Unit::Hours(12),
            Interval::Daily => Unit::Day,
            Interval::Weekly => Unit::Week,
            Interval::Monthly => Unit::Month,
        }
    }

    /// The period of this interval that contains `t`.
    pub fn period_of(self, t: Timestamp) -> Period {
        let date = t.date_naive();
        let (start, end) = match self.unit() {
            Unit::Minutes(n) => {
                let hour = midnight(date) + Duration::hours(i64::from(t.hour()));
                let start = hour + Duration::minutes(i64::from(t.minute() / n * n));
                (start, start + Duration::minutes(i64::from(n)))
            }
            Unit::Hours(n) => {
                let start = midnight(date) + Duration::hours(i64::from(t.hour() / n * n));
                (start, start + Duration::hours(i64::from(n)))
            }
            Unit::Day => {
                let start = midnight(date);
                (start, start + Duration::days(1))
            }
            Unit::Week => {
                let monday =
                    date - Duration::days(i64::from(date.weekday().num_days_from_monday()));
                let start = midnight(monday);
                (start, start + Duration::weeks(1))
            }
            Unit::Month => {
                let first = date.with_day(1).unwrap_or(date);
                let next_first = if first.month() == 12 {
                    NaiveDate::from_ymd_opt(first.year() + 1, 1, 1)
                } else {
                    NaiveDate::from_ymd_opt(first.year(), first.month() + 1, 1)
                };
                // Past the last representable month there is no next one: the period is
                // then cut at chrono's maximum, which no real deadline reaches.
                let end = next_first.map(midnight).unwrap_or(DateTime::<Utc>::MAX_UTC);
                (midnight(first), end)
            }
        };
        Period {
            interval: self,
            start,
            end,
        }
    }
}

fn midnight(date: NaiveDate) -> Timestamp {
    Utc.from_utc_datetime(&date.and_time(chrono::NaiveTime::MIN))
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text is not one of the 17 interval names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown interval {0:?}")]
pub struct UnknownInterval(pub String);

impl FromStr for Interval {
    type Err = UnknownInterval;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Interval::ALL
            .into_iter()
            .find(|i| i.as_str() == s)
            .ok_or_else(|| UnknownInterval(s.to_owned()))
    }
}

/// One period of an interval: the instants `start <= t < end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Period {
    interval: Interval,
    start: Timestamp,
    end: Timestamp,
}

impl Period {
    /// The interval the period belongs to.
    pub fn interval(&self) -> Interval {
        self.interval
    }

    /// The first instant of the period.
    pub fn start(&self) -> Timestamp {
        self.start
    }

    /// The first instant after the period, which is the start of the next one.
    pub fn end(&self) -> Timestamp {
        self.end
    }

    /// How long the period lasts (months and weeks included, so not a constant).
    pub fn len(&self) -> Duration {
        self.end - self.start
    }

    /// Whether `t` is inside the period (`start <= t < end`).
    pub fn contains(&self, t: Timestamp) -> bool {
        self.start <= t && t < self.end
    }

    /// The period right after this one.
    pub fn next(&self) -> Period {
        self.interval.period_of(self.end)
    }

    /// The period right before this one.
    pub fn prev(&self) -> Period {
        self.interval
            .period_of(self.start - Duration::nanoseconds(1))
    }
}

/// The period of `interval` that contains `t`; shorthand for [`Interval::period_of`].
pub fn period_of(interval: Interval, t: Timestamp) -> Period {
    interval.period_of(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        DateTime::parse_from_rfc3339(s)
            .expect("test timestamps are valid")
            .with_timezone(&Utc)
    }

    fn check(interval: Interval, t: &str, start: &str, end: &str) {
        let p = interval.period_of(at(t));
        assert_eq!(
            (p.start(), p.end()),
            (at(start), at(end)),
            "{interval} at {t}"
        );
    }

    #[test]
    fn names_round_trip() {
        for i in Interval::ALL {
            assert_eq!(i.as_str().parse::<Interval>(), Ok(i));
        }
        assert!("1_minutes".parse::<Interval>().is_err());
        assert!("Daily".parse::<Interval>().is_err());
        assert!("".parse::<Interval>().is_err());
    }

    #[test]
    fn only_minute_intervals_are_sub_hourly() {
        let sub: Vec<_> = Interval::ALL
            .into_iter()
            .filter(|i| i.is_sub_hourly())
            .collect();
        assert_eq!(sub.len(), 7);
        assert!(sub.iter().all(|i| i.as_str().ends_with("_minute")));
    }

    #[test]
    fn minute_intervals_align_within_the_hour() {
        let t = "2026-11-22T03:13:07.123Z";
        check(
            Interval::Minute1,
            t,
            "2026-11-22T03:13:00Z",
            "2026-11-22T03:14:00Z",
        );
        check(
            Interval::Minute2,
            t,
            "2026-11-22T03:12:00Z",
            "2026-11-22T03:14:00Z",
        );
        check(
            Interval::Minute3,
            t,
            "2026-11-22T03:12:00Z",
            "2026-11-22T03:15:00Z",
        );
        check(
            Interval::Minute5,
            t,
            "2026-11-22T03:10:00Z",
            "2026-11-22T03:15:00Z",
        );
        check(
            Interval::Minute10,
            t,
            "2026-11-22T03:10:00Z",
            "2026-11-22T03:20:00Z",
        );
        check(
            Interval::Minute15,
            t,
            "2026-11-22T03:00:00Z",
            "2026-11-22T03:15:00Z",
        );
        check(
            Interval::Minute30,
            t,
            "2026-11-22T03:00:00Z",
            "2026-11-22T03:30:00Z",
        );
    }

    #[test]
    fn minute_periods_cross_the_hour_day_and_year() {
        let t = "2026-12-31T23:59:59.999Z";
        check(
            Interval::Minute1,
            t,
            "2026-12-31T23:59:00Z",
            "2027-01-01T00:00:00Z",
        );
        check(
            Interval::Minute3,
            t,
            "2026-12-31T23:57:00Z",
            "2027-01-01T00:00:00Z",
        );
        check(
            Interval::Minute30,
            t,
            "2026-12-31T23:30:00Z",
            "2027-01-01T00:00:00Z",
        );
    }

    #[test]
    fn hour_intervals_align_from_midnight() {
        let t = "2026-11-22T23:59:59.999Z";
        check(
            Interval::Hourly,
            t,
            "2026-11-22T23:00:00Z",
            "2026-11-23T00:00:00Z",
        );
        check(
            Interval::Hour2,
            t,
            "2026-11-22T22:00:00Z",
            "2026-11-23T00:00:00Z",
        );
        check(
            Interval::Hour3,
            t,
            "2026-11-22T21:00:00Z",
            "2026-11-23T00:00:00Z",
        );
        check(
            Interval::Hour4,
            t,
            "2026-11-22T20:00:00Z",
            "2026-11-23T00:00:00Z",
        );
        check(
            Interval::Hour6,
            t,
            "2026-11-22T18:00:00Z",
            "2026-11-23T00:00:00Z",
        );
        check(
            Interval::Hour8,
            t,
            "2026-11-22T16:00:00Z",
            "2026-11-23T00:00:00Z",
        );
        check(
            Interval::Hour12,
            t,
            "2026-11-22T12:00:00Z",
            "2026-11-23T00:00:00Z",
        );
        let t = "2026-11-22T00:00:00Z";
        for i in [
            Interval::Hourly,
            Interval::Hour3,
            Interval::Hour8,
            Interval::Hour12,
        ] {
            assert_eq!(i.period_of(at(t)).start(), at(t), "{i} at midnight");
        }
    }

    #[test]
    fn exact_boundaries_start_a_new_period() {
        check(
            Interval::Minute5,
            "2026-11-22T03:15:00Z",
            "2026-11-22T03:15:00Z",
            "2026-11-22T03:20:00Z",
        );
        check(
            Interval::Hour6,
            "2026-11-22T12:00:00Z",
            "2026-11-22T12:00:00Z",
            "2026-11-22T18:00:00Z",
        );
        check(
            Interval::Daily,
            "2026-11-23T00:00:00Z",
            "2026-11-23T00:00:00Z",
            "2026-11-24T00:00:00Z",
        );
        check(
            Interval::Monthly,
            "2026-12-01T00:00:00Z",
            "2026-12-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
        );
        // One millisecond before a boundary is still the old period.
        check(
            Interval::Minute5,
            "2026-11-22T03:14:59.999Z",
            "2026-11-22T03:10:00Z",
            "2026-11-22T03:15:00Z",
        );
    }

    #[test]
    fn daily_periods_handle_leap_days() {
        check(
            Interval::Daily,
            "2028-02-28T23:59:59.999Z",
            "2028-02-28T00:00:00Z",
            "2028-02-29T00:00:00Z",
        );
        check(
            Interval::Daily,
            "2028-02-29T12:00:00Z",
            "2028-02-29T00:00:00Z",
            "2028-03-01T00:00:00Z",
        );
        check(
            Interval::Daily,
            "2026-12-31T23:59:59.999Z",
            "2026-12-31T00:00:00Z",
            "2027-01-01T00:00:00Z",
        );
    }

    #[test]
    fn weeks_run_monday_to_monday() {
        // 2026-11-22 is a Sunday: the last instant of the week that began on the 16th.
        check(
            Interval::Weekly,
            "2026-11-22T23:59:59.999Z",
            "2026-11-16T00:00:00Z",
            "2026-11-23T00:00:00Z",
        );
        check(
            Interval::Weekly,
            "2026-11-23T00:00:00Z",
            "2026-11-23T00:00:00Z",
            "2026-11-30T00:00:00Z",
        );
        // A week spanning a year end.
        check(
            Interval::Weekly,
            "2027-01-01T08:00:00Z",
            "2026-12-28T00:00:00Z",
            "2027-01-04T00:00:00Z",
        );
        // A week spanning 29 February.
        check(
            Interval::Weekly,
            "2028-02-29T08:00:00Z",
            "2028-02-28T00:00:00Z",
            "2028-03-06T00:00:00Z",
        );
    }

    #[test]
    fn months_have_their_own_lengths() {
        check(
            Interval::Monthly,
            "2028-02-29T23:59:59.999Z",
            "2028-02-01T00:00:00Z",
            "2028-03-01T00:00:00Z",
        );
        check(
            Interval::Monthly,
            "2027-02-28T23:59:59.999Z",
            "2027-02-01T00:00:00Z",
            "2027-03-01T00:00:00Z",
        );
        check(
            Interval::Monthly,
            "2026-12-31T23:59:59.999Z",
            "2026-12-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
        );
        check(
            Interval::Monthly,
            "2026-04-30T10:00:00Z",
            "2026-04-01T00:00:00Z",
            "2026-05-01T00:00:00Z",
        );
        check(
            Interval::Monthly,
            "2026-01-31T10:00:00Z",
            "2026-01-01T00:00:00Z",
            "2026-02-01T00:00:00Z",
        );
        let feb = Interval::Monthly.period_of(at("2028-02-10T00:00:00Z"));
        assert_eq!(feb.len(), Duration::days(29));
        assert_eq!(feb.next().len(), Duration::days(31));
    }

    #[test]
    fn sunday_last_millisecond_for_every_interval_ends_at_monday_midnight() {
        let t = at("2026-11-22T23:59:59.999Z");
        let monday = at("2026-11-23T00:00:00Z");
        for i in Interval::ALL {
            let p = i.period_of(t);
            assert!(p.contains(t), "{i}");
            if i != Interval::Monthly {
                assert_eq!(p.end(), monday, "{i}");
            }
            assert_eq!(p.next().start(), p.end(), "{i}");
            assert_eq!(p.next().prev(), p, "{i}");
        }
    }

    #[test]
    fn next_and_prev_walk_across_a_leap_year_end() {
        let mut p = Interval::Monthly.period_of(at("2027-11-15T00:00:00Z"));
        let mut starts = Vec::new();
        for _ in 0..5 {
            p = p.next();
            starts.push(p.start());
        }
        assert_eq!(
            starts,
            [
                at("2027-12-01T00:00:00Z"),
                at("2028-01-01T00:00:00Z"),
                at("2028-02-01T00:00:00Z"),
                at("2028-03-01T00:00:00Z"),
                at("2028-04-01T00:00:00Z"),
            ]
        );
        assert_eq!(p.prev().prev().len(), Duration::days(29));
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        fn any_interval() -> impl Strategy<Value = Interval> {
            proptest::sample::select(Interval::ALL.to_vec())
        }

        /// Instants from 1970 to 2200 with millisecond precision.
        fn any_instant() -> impl Strategy<Value = Timestamp> {
            (0i64..7_258_118_400_000)
                .prop_map(|ms| DateTime::from_timestamp_millis(ms).expect("in chrono's range"))
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            #[test]
            fn every_instant_lies_in_exactly_one_period(i in any_interval(), t in any_instant()) {
                let p = i.period_of(t);
                prop_assert!(p.contains(t));
                prop_assert!(p.start() < p.end());
                // The period is the same seen from any of its instants, and the instants
                // just outside belong to the neighbours.
                prop_assert_eq!(i.period_of(p.start()), p);
                prop_assert_eq!(i.period_of(p.end() - Duration::milliseconds(1)), p);
                prop_assert_eq!(i.period_of(p.end()), p.next());
                prop_assert_eq!(i.period_of(p.start() - Duration::milliseconds(1)), p.prev());
            }

            #[test]
            fn consecutive_periods_touch(i in any_interval(), t in any_instant()) {
                let p = i.period_of(t);
                prop_assert_eq!(p.next().start(), p.end());
                prop_assert_eq!(p.prev().end(), p.start());
                prop_assert_eq!(p.next().prev(), p);
            }

            #[test]
            fn periods_start_on_their_boundaries(i in any_interval(), t in any_instant()) {
                let p = i.period_of(t);
                let start = p.start();
                prop_assert_eq!(start.timestamp_subsec_nanos(), 0);
                prop_assert_eq!(start.second(), 0);
                let len = p.len();
                match i {
                    Interval::Weekly => {
                        prop_assert_eq!(start.weekday(), chrono::Weekday::Mon);
                        prop_assert_eq!(len, Duration::weeks(1));
                    }
                    Interval::Monthly => {
                        prop_assert_eq!(start.day(), 1);
                        prop_assert!(len >= Duration::days(28) && len <= Duration::days(31));
                    }
                    _ => {
                        // Fixed-length periods divide the day evenly from midnight.
                        let since_midnight = start - midnight(start.date_naive());
                        prop_assert_eq!(since_midnight.num_milliseconds() % len.num_milliseconds(), 0);
                        prop_assert!(len <= Duration::days(1));
                    }
                }
            }
        }
    }
}
