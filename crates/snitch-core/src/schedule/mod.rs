//! Cron schedules in an IANA time zone: when a job that cron runs is expected.
//!
//! A [`CronSchedule`] reads a 5-field cron expression the way Debian's cron does, as the
//! Python package cronsim implements it (the engine of healthchecks and Sentry Crons), and
//! yields the instants the user's cron daemon runs the job, daylight saving time included:
//!
//! - Names (`JAN`, `MON`), ranges, lists and steps; `*/7` restarts each hour (a 4-minute gap
//!   after :56); `5/15` is `5-59/15`; `L` and `LW` in day-of-month; `5L` (last Friday) and
//!   `MON#2` in day-of-week; 0 and 7 are Sunday. Day-of-month and day-of-week are ORed,
//!   unless either field starts with `*`, then ANDed (`0 0 */2 * MON`: odd days that are
//!   Mondays). `@hourly`, `@daily`, `@midnight`, `@weekly`, `@monthly`, `@yearly` and
//!   `@annually` stand for their five fields.
//! - Refused, with a message naming what is wrong: `@reboot`, six fields (seconds),
//!   impossible dates (`* * 30 2 *`), expressions that match no day at all
//!   (`0 0 */8 * MON#5`), unknown time zones.
//! - DST, Debian's rule: a job whose minute and hour fields do not start with `*` (a
//!   "fixed-time" job, lists and ranges included) runs once per wall clock time: a time in
//!   a spring-forward gap runs at the first real minute after the gap, a repeated
//!   fall-back time runs once, the first time. Any other job steps in real time: gap times
//!   never happen and a repeated hour runs twice.
//!
//! Croner finds the next wall clock time the fields match; jiff, with its bundled copy of
//! the IANA database, maps wall clock times to instants. Nothing here reads the clock or
//! the file system: every instant is an argument.
//!
//! Every search is bounded. It looks at most [`HORIZON_YEARS`] years of wall clock time
//! ahead, as cronsim does, and gives `None` when nothing matches within them. Since an
//! expression that matches no date at all is refused, and the calendar repeats every 400
//! years, that happens only near the end of the supported range (croner's year 5000,
//! jiff's 9999): the rarest accepted expressions (`0 0 * 2 MON#5`: 2044, 2072, ...) still
//! run at least every 40 years or so.

mod expected;
mod fields;

use std::fmt;
use std::sync::LazyLock;

use chrono::{DateTime, Duration, Utc};
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use jiff::civil;
use jiff::tz::{AmbiguousOffset, TimeZone, TimeZoneDatabase};
use jiff::{SignedDuration, Timestamp as JiffTimestamp};

use crate::types::CONTAINS_NUL;
use crate::validation::Validation;
use fields::{Field, Fields};

pub use expected::{
    ExpectedRuns, Window, EARLY_DEFAULT, EARLY_MAX, GRACE_DEFAULT_MAX, GRACE_MAX, GRACE_MIN,
};

/// The longest expression accepted, in characters (healthchecks' limit).
pub const EXPRESSION_MAX_CHARS: usize = 100;
/// The time zone of a schedule that names none.
pub const DEFAULT_TIMEZONE: &str = "UTC";
/// How many years of wall clock time a search looks ahead before it gives up, as cronsim.
pub const HORIZON_YEARS: i16 = 50;
/// At most this many runs are looked at by [`CronSchedule::shortest_gap`].
pub const GAP_SAMPLE_RUNS: usize = 1_000;
/// [`CronSchedule::shortest_gap`] stops once its runs span this many days (a year of
/// DST changes, months of every length).
pub const GAP_SAMPLE_DAYS: i64 = 366;

/// The longest time zone name looked up (the longest IANA name has 32 characters).
const TIMEZONE_MAX_CHARS: usize = 64;
/// The longest DST gap walked minute by minute to its end: two days covers every gap the
/// database holds (the longest, Samoa's skipped day in 2011, is 24 hours).
const GAP_MAX_MINUTES: i64 = 2 * 24 * 60;
/// Fall-back repeats skipped by one search of a fixed-time job: at most the minutes of
/// one repeated range; the bound only guards against a database that is not.
const FOLD_MAX_SKIPS: usize = 10_000;
/// Time zone transitions crossed by one search of a real-time job (50 years of DST is
/// about 100).
const SEGMENT_MAX: usize = 10_000;

/// The bundled IANA database, opened once. Opened explicitly rather than through
/// `jiff::tz::db()`, which reads `/usr/share/zoneinfo` when another crate of the build
/// turns on jiff's `tzdb-zoneinfo` feature.
static TZDB: LazyLock<TimeZoneDatabase> = LazyLock::new(TimeZoneDatabase::bundled);

/// The IANA names a schedule's `timezone` may take, sorted (for a searchable list).
pub fn timezone_names() -> &'static [String] {
    static NAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
        let mut names: Vec<String> = TZDB.available().map(|n| n.as_str().to_owned()).collect();
        names.sort();
        names
    });
    &NAMES
}

/// Why an expression or a time zone was refused. [`ScheduleError::attribute`] is the API
/// attribute at fault (`schedule` or `timezone`), [`ScheduleError::message`] what is wrong
/// in plain words, Rails style (`is not a valid cron expression: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScheduleError {
    /// Empty or only spaces.
    Blank,
    /// Longer than [`EXPRESSION_MAX_CHARS`].
    TooLong,
    /// Holds U+0000.
    ContainsNul,
    /// Holds a control character other than spaces, tabs and line breaks.
    ControlCharacter,
    /// `@reboot`: Snitch can't know when a machine starts.
    Reboot,
    /// `@something` that is not one of the macros.
    UnknownMacro(String),
    /// Not five fields; `found` is how many there were (6 is the seconds form).
    FieldCount {
        /// How many fields the expression had.
        found: usize,
    },
    /// One field is wrong.
    BadField {
        /// `minute`, `hour`, `day-of-month`, `month` or `day-of-week`.
        field: &'static str,
        /// The field as written.
        text: String,
        /// What is wrong with it.
        problem: String,
    },
    /// Every field is fine but no day ever matches them all.
    NeverRuns,
    /// The time zone is not an IANA name the bundled database knows.
    UnknownTimezone(String),
}

impl ScheduleError {
    /// The API attribute at fault: `timezone` for an unknown zone, else `schedule`.
    pub fn attribute(&self) -> &'static str {
        match self {
            ScheduleError::UnknownTimezone(_) => "timezone",
            _ => "schedule",
        }
    }

    /// What is wrong, in plain words, to follow the attribute's name.
    pub fn message(&self) -> String {
        const INVALID: &str = "is not a valid cron expression";
        match self {
            ScheduleError::Blank => crate::types::BLANK.to_string(),
            ScheduleError::TooLong => {
                format!("is too long (maximum is {EXPRESSION_MAX_CHARS} characters)")
            }
            ScheduleError::ContainsNul => CONTAINS_NUL.to_string(),
            ScheduleError::ControlCharacter => {
                "can't contain control characters other than spaces and tabs".to_string()
            }
            ScheduleError::Reboot => {
                "@reboot is not supported: Snitch can't know when a machine starts".to_string()
            }
            ScheduleError::UnknownMacro(name) => format!(
                "{INVALID}: {name} is not one of @hourly, @daily, @midnight, @weekly, \
                 @monthly, @yearly, @annually"
            ),
            ScheduleError::FieldCount { found: 6 } => {
                "must have 5 fields (minute hour day-of-month month day-of-week): \
                 seconds are not supported"
                    .to_string()
            }
            ScheduleError::FieldCount { found } => format!(
                "must have 5 fields (minute hour day-of-month month day-of-week), not {found}"
            ),
            ScheduleError::BadField {
                field,
                text,
                problem,
            } => format!("{INVALID}: {field} {text:?}: {problem}"),
            ScheduleError::NeverRuns => {
                "never runs: no date matches its day-of-month, month and day-of-week together"
                    .to_string()
            }
            ScheduleError::UnknownTimezone(name) if name.trim().is_empty() => {
                crate::types::BLANK.to_string()
            }
            ScheduleError::UnknownTimezone(_) => {
                "is not a known time zone (an IANA name such as Europe/Riga)".to_string()
            }
        }
    }
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.attribute(), self.message())
    }
}

impl std::error::Error for ScheduleError {}

impl From<ScheduleError> for Validation {
    fn from(error: ScheduleError) -> Self {
        Validation::new(error.attribute(), error.message())
    }
}

/// A cron expression in a time zone, checked: it runs at some time, and every search of
/// it is bounded. Built only by [`CronSchedule::parse`]. Its parsed parts are shared:
/// a clone costs a reference count, so a store may keep one parse per expression and
/// hand out copies (parsing is far dearer than a snitch's other fields).
#[derive(Debug, Clone)]
pub struct CronSchedule {
    parsed: std::sync::Arc<ParsedSchedule>,
}

#[derive(Debug)]
struct ParsedSchedule {
    /// As given, trimmed.
    expression: String,
    /// The IANA name as the database spells it (`europe/riga` becomes `Europe/Riga`).
    timezone_name: String,
    timezone: TimeZone,
    fields: Fields,
    /// Croner patterns whose union is the expression's wall clock times (see
    /// `Fields::croner_patterns`); never empty.
    patterns: Vec<Cron>,
    /// Debian's fixed-time job: neither the minute nor the hour field starts with `*`.
    fixed_time: bool,
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.parsed.expression == other.parsed.expression
            && self.parsed.timezone_name == other.parsed.timezone_name
    }
}

impl Eq for CronSchedule {}

impl CronSchedule {
    /// Parses `expression` (5 fields or a macro) in the IANA time zone `timezone`
    /// ([`DEFAULT_TIMEZONE`] when the user gave none). The expression's problems are
    /// reported before the zone's.
    pub fn parse(expression: &str, timezone: &str) -> Result<CronSchedule, ScheduleError> {
        let (expression, fields, fixed_time) = parse_expression(expression)?;
        let (timezone_name, timezone) = lookup_timezone(timezone)?;
        let patterns = build_patterns(&fields)?;
        Ok(CronSchedule {
            parsed: std::sync::Arc::new(ParsedSchedule {
                expression,
                timezone_name,
                timezone,
                fields,
                patterns,
                fixed_time,
            }),
        })
    }

    /// The expression as given (trimmed; a macro stays a macro).
    pub fn expression(&self) -> &str {
        &self.parsed.expression
    }

    /// The IANA name of the time zone, as the database spells it.
    pub fn timezone(&self) -> &str {
        &self.parsed.timezone_name
    }

    /// The first expected instant strictly after `t`, or `None` when there is none within
    /// [`HORIZON_YEARS`] of wall clock time (or past year 5000, where croner stops).
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let t = to_jiff(t)?;
        let next = if self.parsed.fixed_time {
            self.next_fixed_time(t)
        } else {
            self.next_real_time(t)
        }?;
        from_jiff(next)
    }

    /// The expected instants strictly after `t`, in order.
    pub fn times_after(&self, t: DateTime<Utc>) -> Times<'_> {
        Times {
            schedule: self,
            after: Some(t),
        }
    }

    /// `t` in the schedule's time zone as ISO 8601 with its offset and milliseconds, e.g.
    /// `2026-03-29T04:00:00.000+03:00` (for `expected_at_local`).
    pub fn to_local_iso(&self, t: DateTime<Utc>) -> String {
        match to_jiff(t) {
            Some(ts) => ts
                .to_zoned(self.parsed.timezone.clone())
                .strftime("%Y-%m-%dT%H:%M:%S%.3f%:z")
                .to_string(),
            // Past jiff's range (year 9999): no offset to show, so UTC's.
            None => t.format("%Y-%m-%dT%H:%M:%S%.3f+00:00").to_string(),
        }
    }

    /// An estimate of the shortest time between two consecutive runs, for the default
    /// grace (the shorter of an hour and this) and the cap on early check-ins (half of
    /// this). Computed from the runs after `from`: the smallest gap between consecutive
    /// ones among the first [`GAP_SAMPLE_RUNS`], stopping once they span
    /// [`GAP_SAMPLE_DAYS`] days (so at most 1,000 searches). That covers every pattern
    /// of minutes within an hour and of hours within a day, each month length and a
    /// year's DST changes (a `30 2 * * *` job in New York has a 23.5-hour gap on the
    /// spring-forward day). Rarer patterns (`0 0 29 2 *`) give the gap between their
    /// first two runs. `Duration::MAX` when fewer than two runs follow `from` within the
    /// horizon.
    pub fn shortest_gap(&self, from: DateTime<Utc>) -> Duration {
        let Some(first) = self.next_after(from) else {
            return Duration::MAX;
        };
        let span_end = first + Duration::days(GAP_SAMPLE_DAYS);
        let mut shortest = Duration::MAX;
        let mut previous = first;
        for _ in 1..GAP_SAMPLE_RUNS {
            let Some(next) = self.next_after(previous) else {
                break;
            };
            shortest = shortest.min(next - previous);
            if next > span_end {
                break;
            }
            previous = next;
        }
        shortest
    }

    /// What a person should know about these runs (the next ones of this schedule):
    /// for a job at fixed wall clock times, each run that daylight saving time moves off
    /// the written time (a spring-forward gap: the run is at the first minute after it).
    /// A repeated fall-back hour needs no note: the job runs once, at the first.
    pub fn notes_on(&self, times: &[DateTime<Utc>]) -> Vec<String> {
        if !self.parsed.fixed_time {
            return Vec::new();
        }
        let mut notes = Vec::new();
        for &t in times {
            let Some(ts) = to_jiff(t) else { continue };
            let local = ts.to_zoned(self.parsed.timezone.clone());
            let (hour, minute) = (local.hour() as u32, local.minute() as u32);
            let written = (self.parsed.fields.hours.values >> hour) & 1 == 1
                && (self.parsed.fields.minutes.values >> minute) & 1 == 1;
            if !written {
                notes.push(format!(
                    "on {} the written time does not exist in {} (clocks go forward): \
                     that run is at {:02}:{:02} local time",
                    local.strftime("%Y-%m-%d"),
                    self.parsed.timezone_name,
                    hour,
                    minute
                ));
            }
        }
        notes
    }

    /// The schedule in words when it is a common simple one ("every 15 minutes", "every
    /// day at 02:30", "every Monday at 09:00"), else `None`. Says nothing of the zone.
    pub fn describe(&self) -> Option<String> {
        let f = &self.parsed.fields;
        let every_day = f.days.values.count_ones() == 31
            && !f.days.last_day
            && !f.days.last_weekday
            && f.months.values.count_ones() == 12
            && f.weekdays.values.count_ones() == 7
            && f.weekdays.last_of == 0
            && f.weekdays.nth == 0;
        let all_hours = f.hours.values.count_ones() == 24;
        let minute = Fields::single(&f.minutes);
        let hour = Fields::single(&f.hours);
        if !every_day {
            // Only "every <weekday> at HH:MM": one plain weekday, every day of the month.
            let weekday = Fields::single(&f.weekdays)?;
            let weekly =
                f.day_and && f.days.values.count_ones() == 31 && f.months.values.count_ones() == 12;
            if !weekly {
                return None;
            }
            let names = [
                "Sunday",
                "Monday",
                "Tuesday",
                "Wednesday",
                "Thursday",
                "Friday",
                "Saturday",
            ];
            let (minute, hour) = (minute?, hour?);
            return Some(format!(
                "every {} at {hour:02}:{minute:02}",
                names[weekday as usize]
            ));
        }
        if all_hours && f.minutes.values.count_ones() == 60 {
            return Some("every minute".to_string());
        }
        if all_hours {
            if let Some(minute) = minute {
                return Some(format!("every hour at minute {minute}"));
            }
            // Evenly spaced minutes from :00 that divide the hour: "every N minutes".
            let minutes: Vec<u32> = f.minutes.iter_values().collect();
            let step = minutes.get(1).copied()?;
            let even = minutes.first() == Some(&0)
                && 60 % step == 0
                && minutes.len() as u32 == 60 / step
                && minutes
                    .iter()
                    .enumerate()
                    .all(|(i, m)| *m == i as u32 * step);
            return even.then(|| format!("every {step} minutes"));
        }
        let (minute, hour) = (minute?, hour?);
        Some(format!("every day at {hour:02}:{minute:02}"))
    }

    /// The first wall clock time after `after` (or at it, when `inclusive`) that the
    /// expression matches, up to the end of `last_year`.
    fn next_civil(
        &self,
        after: civil::DateTime,
        inclusive: bool,
        last_year: i16,
    ) -> Option<civil::DateTime> {
        self.parsed
            .patterns
            .iter()
            .filter_map(|pattern| pattern.find_next_occurrence(&after, inclusive).ok())
            .filter(|found| found.year() <= last_year)
            .min()
    }

    /// A fixed-time job: wall clock times in order, each mapped to one instant (a gap
    /// time to the first real minute after the gap, a repeated time to its first
    /// instant), the first one after `t`. The mapping never goes back in time, so the
    /// times before `t`'s own wall clock time are all at or before `t`; when `t` is in the
    /// second pass of a repeated hour, the times of that hour map to the first pass and
    /// are skipped.
    fn next_fixed_time(&self, t: JiffTimestamp) -> Option<JiffTimestamp> {
        let mut cursor = self.parsed.timezone.to_datetime(t);
        let last_year = cursor.year().saturating_add(HORIZON_YEARS);
        for _ in 0..FOLD_MAX_SKIPS {
            let wall = self.next_civil(cursor, false, last_year)?;
            let instant = self.first_real_instant(wall)?;
            if instant > t {
                return Some(instant);
            }
            cursor = wall;
        }
        None
    }

    /// The instant a fixed-time job runs for wall clock time `wall`: the first real
    /// minute at or after it, at its first instant when it repeats. That is cronsim's
    /// walk, a minute at a time, out of the gap.
    fn first_real_instant(&self, wall: civil::DateTime) -> Option<JiffTimestamp> {
        let mut minute = wall;
        for _ in 0..=GAP_MAX_MINUTES {
            let ambiguous = self.parsed.timezone.to_ambiguous_timestamp(minute);
            if !matches!(ambiguous.offset(), AmbiguousOffset::Gap { .. }) {
                return ambiguous.earlier().ok();
            }
            minute = minute.checked_add(SignedDuration::from_mins(1)).ok()?;
        }
        None
    }

    /// Any other job: the first instant after `t` whose wall clock time matches. Time is
    /// cut at the zone's transitions into stretches of one offset, where wall clock and
    /// instant move together; each stretch is searched on the wall clock with its own
    /// offset. Gap times belong to no stretch (they never happen); a repeated hour
    /// belongs to two (it happens twice).
    fn next_real_time(&self, t: JiffTimestamp) -> Option<JiffTimestamp> {
        let last_year = self
            .parsed
            .timezone
            .to_datetime(t)
            .year()
            .saturating_add(HORIZON_YEARS);
        let mut start = t;
        let mut inclusive = false;
        // The last search: no match in (from, found) of wall clock time, so a later
        // stretch starting after `from` need not search up to `found` again. Rare
        // expressions would otherwise search years ahead once per stretch.
        let mut known: Option<(civil::DateTime, civil::DateTime)> = None;
        for _ in 0..SEGMENT_MAX {
            let offset = self.parsed.timezone.to_offset(start);
            let wall_start = offset.to_datetime(start);
            let stretch_end = self
                .parsed
                .timezone
                .following(start)
                .next()
                .map(|transition| transition.timestamp());
            let wall = match known {
                Some((from, found)) if wall_start > from && found >= wall_start => found,
                _ => {
                    let found = self.next_civil(wall_start, inclusive, last_year)?;
                    known = Some((wall_start, found));
                    found
                }
            };
            let instant = offset.to_timestamp(wall).ok()?;
            match stretch_end {
                Some(end) if instant >= end => {
                    start = end;
                    inclusive = true;
                }
                _ => return Some(instant),
            }
        }
        None
    }
}

/// The expected instants of a schedule after a given one; see
/// [`CronSchedule::times_after`].
#[derive(Debug, Clone)]
pub struct Times<'a> {
    schedule: &'a CronSchedule,
    after: Option<DateTime<Utc>>,
}

impl Iterator for Times<'_> {
    type Item = DateTime<Utc>;

    fn next(&mut self) -> Option<DateTime<Utc>> {
        let next = self.schedule.next_after(self.after?);
        self.after = next;
        next
    }
}

/// The checks and the grammar: the trimmed expression, its fields and whether it is a
/// fixed-time job.
fn parse_expression(raw: &str) -> Result<(String, Fields, bool), ScheduleError> {
    // Cheap bounds first, so a megabyte of input costs nothing.
    if raw.len() > EXPRESSION_MAX_CHARS * 4 || raw.chars().count() > EXPRESSION_MAX_CHARS {
        return Err(ScheduleError::TooLong);
    }
    if raw.contains('\0') {
        return Err(ScheduleError::ContainsNul);
    }
    if raw
        .chars()
        .any(|c| c.is_control() && !matches!(c, ' ' | '\t' | '\n' | '\r'))
    {
        return Err(ScheduleError::ControlCharacter);
    }
    let expression = raw.trim();
    if expression.is_empty() {
        return Err(ScheduleError::Blank);
    }
    let upper = expression.to_ascii_uppercase();
    let parts: Vec<&str> = upper.split_ascii_whitespace().collect();
    let parts: Vec<&str> = match parts[..] {
        [single] if single.starts_with('@') => expand_macro(single)?,
        _ => {
            if let Some(at) = parts.iter().find(|part| part.starts_with('@')) {
                return Err(ScheduleError::UnknownMacro(at.to_ascii_lowercase()));
            }
            parts
        }
    };
    let Ok(five): Result<[&str; 5], _> = parts.as_slice().try_into() else {
        return Err(ScheduleError::FieldCount { found: parts.len() });
    };
    let fields = Fields::parse(five).map_err(|(field, problem)| {
        let index = Field::ALL.iter().position(|f| *f == field).unwrap_or(0);
        ScheduleError::BadField {
            field: field.name(),
            text: original_field(expression, &parts, index),
            problem,
        }
    })?;
    let fixed_time = !five[0].starts_with('*') && !five[1].starts_with('*');
    Ok((expression.to_string(), fields, fixed_time))
}

/// The field at `index` as the user wrote it (case kept), for error messages.
fn original_field(expression: &str, upper_parts: &[&str], index: usize) -> String {
    expression
        .split_ascii_whitespace()
        .nth(index)
        .filter(|_| upper_parts.len() == 5 && !expression.starts_with('@'))
        .or_else(|| upper_parts.get(index).copied())
        .unwrap_or_default()
        .to_string()
}

/// The five fields a macro stands for (Debian's list, as Sentry translates them).
fn expand_macro(name: &str) -> Result<Vec<&'static str>, ScheduleError> {
    let expansion = match name {
        "@HOURLY" => "0 * * * *",
        "@DAILY" | "@MIDNIGHT" => "0 0 * * *",
        "@WEEKLY" => "0 0 * * 0",
        "@MONTHLY" => "0 0 1 * *",
        "@YEARLY" | "@ANNUALLY" => "0 0 1 1 *",
        "@REBOOT" => return Err(ScheduleError::Reboot),
        other => return Err(ScheduleError::UnknownMacro(other.to_ascii_lowercase())),
    };
    Ok(expansion.split(' ').collect())
}

fn lookup_timezone(name: &str) -> Result<(String, TimeZone), ScheduleError> {
    let unknown = || ScheduleError::UnknownTimezone(name.to_string());
    let trimmed = name.trim();
    if trimmed.is_empty() || trimmed.len() > TIMEZONE_MAX_CHARS || trimmed.contains('\0') {
        return Err(unknown());
    }
    let timezone = TZDB.get(trimmed).map_err(|_| unknown())?;
    let canonical = timezone.iana_name().ok_or_else(unknown)?.to_string();
    // jiff answers "Etc/Unknown" with its zone for "no idea": not a zone to schedule in.
    if canonical.eq_ignore_ascii_case("Etc/Unknown") {
        return Err(unknown());
    }
    Ok((canonical, timezone))
}

fn build_patterns(fields: &Fields) -> Result<Vec<Cron>, ScheduleError> {
    let parser = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .dom_and_dow(fields.day_and)
        .build();
    let mut patterns = Vec::with_capacity(2);
    for (text, _) in fields.croner_patterns() {
        // The text is plain lists written by us; croner refusing it is a bug of ours,
        // reported rather than hidden.
        let pattern = parser
            .parse(&text)
            .map_err(|error| ScheduleError::BadField {
                field: "expression",
                text: text.clone(),
                problem: format!("croner can't read it ({error})"),
            })?;
        patterns.push(pattern);
    }
    if patterns.is_empty() {
        return Err(ScheduleError::NeverRuns);
    }
    Ok(patterns)
}

/// chrono to jiff at the boundary, by nanoseconds since the epoch; `None` past jiff's
/// range (years -9999 to 9999).
fn to_jiff(t: DateTime<Utc>) -> Option<JiffTimestamp> {
    let nanos = i128::from(t.timestamp()) * 1_000_000_000 + i128::from(t.timestamp_subsec_nanos());
    JiffTimestamp::from_nanosecond(nanos).ok()
}

fn from_jiff(t: JiffTimestamp) -> Option<DateTime<Utc>> {
    let nanos = t.as_nanosecond();
    let seconds = i64::try_from(nanos.div_euclid(1_000_000_000)).ok()?;
    let subsec = u32::try_from(nanos.rem_euclid(1_000_000_000)).ok()?;
    DateTime::from_timestamp(seconds, subsec)
}

#[cfg(test)]
mod tests;
