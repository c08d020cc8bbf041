//! The five fields of a cron expression, read with the grammar of Debian's cron as the
//! Python package cronsim reads it (the engine of healthchecks and Sentry), into the set
//! of values each field allows.
//!
//! The grammar is cronsim's to the letter, quirks included, because a monitor must expect
//! the runs the user's cron daemon makes: `5/15` means `5-59/15`; a step over a single
//! value counts from that value to the end of the range (`5-5/10` is `5,15,...,55`); a step
//! over a range or `*` takes every Nth value of it; `L/3` is `L`; 0 and 7 are both Sunday.

use jiff::civil::{Date, Weekday};

/// The most days one pass of [`Fields::runs_on_some_day`] looks at: the Gregorian
/// calendar, weekdays included, repeats every 400 years (146,097 days, a whole number of
/// weeks), so a day rule that matches no day in 400 years matches none ever.
const GREGORIAN_CYCLE_DAYS: u32 = 146_097;

/// Month names, JAN = 1.
const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
/// Weekday names, SUN = 0.
const WEEKDAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
/// The longest month of each month number (February counts its leap day).
const LONGEST_MONTH: [u32; 13] = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// One of the five fields, in the order they are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
}

impl Field {
    pub(crate) const ALL: [Field; 5] = [
        Field::Minute,
        Field::Hour,
        Field::DayOfMonth,
        Field::Month,
        Field::DayOfWeek,
    ];

    /// The name the error messages use.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
        }
    }

    /// The smallest and largest number the field accepts (day-of-week takes 7 for Sunday).
    fn bounds(self) -> (u32, u32) {
        match self {
            Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            Field::DayOfWeek => (0, 7),
        }
    }

    fn names(self) -> &'static [&'static str] {
        match self {
            Field::Month => &MONTH_NAMES,
            Field::DayOfWeek => &WEEKDAY_NAMES,
            _ => &[],
        }
    }

    /// The number of a name (`JAN` is 1, `SUN` is 0), for the two fields that have names.
    fn name_value(self, text: &str) -> Option<u32> {
        let index = self.names().iter().position(|name| *name == text)?;
        let first = if self == Field::Month { 1 } else { 0 };
        Some(index as u32 + first)
    }
}

/// What one field allows: plain values as bits, plus the special days.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Set {
    /// Bit n set: value n is allowed (day-of-week keeps 7 apart until [`Fields`] folds it).
    pub(crate) values: u64,
    /// `L` in day-of-month: the last day of the month.
    pub(crate) last_day: bool,
    /// `LW` in day-of-month: the last weekday (Monday to Friday) of the month.
    pub(crate) last_weekday: bool,
    /// `5L` in day-of-week: bit n set, the last weekday n of the month.
    pub(crate) last_of: u8,
    /// `MON#2` in day-of-week: bit `weekday * 5 + (nth - 1)` set.
    pub(crate) nth: u64,
}

impl Set {
    fn union(self, other: Set) -> Set {
        Set {
            values: self.values | other.values,
            last_day: self.last_day || other.last_day,
            last_weekday: self.last_weekday || other.last_weekday,
            last_of: self.last_of | other.last_of,
            nth: self.nth | other.nth,
        }
    }

    fn only_values(values: impl IntoIterator<Item = u32>) -> Set {
        Set {
            values: values.into_iter().fold(0, |bits, v| bits | (1 << v)),
            ..Set::default()
        }
    }

    /// The plain values, smallest first.
    pub(crate) fn iter_values(&self) -> impl Iterator<Item = u32> + '_ {
        (0..64).filter(move |v| self.values & (1 << v) != 0)
    }

    fn has_specials(&self) -> bool {
        self.last_day || self.last_weekday || self.last_of != 0 || self.nth != 0
    }
}

/// Why a field was refused, in plain words (the caller adds the field's name and text).
pub(crate) type FieldProblem = String;

/// The parsed expression: one [`Set`] per field and the day rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fields {
    pub(crate) minutes: Set,
    pub(crate) hours: Set,
    pub(crate) days: Set,
    pub(crate) months: Set,
    /// Sunday is 0 here: a 7 of the expression is folded into it.
    pub(crate) weekdays: Set,
    /// Day-of-month AND day-of-week (either field starts with `*`), else OR: Debian's rule.
    pub(crate) day_and: bool,
}

impl Fields {
    /// Parses five fields, already split and upper-cased. On error, the field at fault.
    pub(crate) fn parse(parts: [&str; 5]) -> Result<Fields, (Field, FieldProblem)> {
        let mut sets = [Set::default(); 5];
        for (field, (text, set)) in Field::ALL.iter().zip(parts.iter().zip(sets.iter_mut())) {
            *set = parse_field(*field, text).map_err(|problem| (*field, problem))?;
        }
        let [minutes, hours, days, months, mut weekdays] = sets;
        // 7 and 0 are both Sunday; cronsim compares each day against both.
        if weekdays.values & (1 << 7) != 0 {
            weekdays.values = (weekdays.values & !(1 << 7)) | 1;
        }
        if weekdays.last_of & (1 << 7) != 0 {
            weekdays.last_of = (weekdays.last_of & !(1 << 7)) | 1;
        }
        let sunday_seventh = (7 * 5..7 * 5 + 5).fold(0u64, |bits, b| bits | (1 << b));
        weekdays.nth = (weekdays.nth & !sunday_seventh) | ((weekdays.nth & sunday_seventh) >> 35);
        let fields = Fields {
            minutes,
            hours,
            days,
            months,
            weekdays,
            day_and: parts[2].starts_with('*') || parts[4].starts_with('*'),
        };
        fields.check_days_exist()?;
        Ok(fields)
    }

    /// cronsim's (and Debian's) impossible-date check: when every day-of-month asked for
    /// is past the 29th and no month asked for is that long, the expression can never run
    /// (`* * 30 2 *`, `0 0 31 4 *`). A field with `L` or `LW` always has a day. With a
    /// restricted day-of-week the two day fields are ORed (`0 0 30 2 MON` runs every
    /// Monday of February), so the check applies only when they are ANDed.
    fn check_days_exist(&self) -> Result<(), (Field, FieldProblem)> {
        if !self.day_and || self.days.last_day || self.days.last_weekday {
            return Ok(());
        }
        let Some(first_day) = self.days.iter_values().next() else {
            return Ok(());
        };
        let longest = self
            .months
            .iter_values()
            .map(|m| LONGEST_MONTH[m as usize])
            .max()
            .unwrap_or(31);
        if first_day > 29 && first_day > longest {
            let months: Vec<&str> = self.months.iter_values().map(month_display).collect();
            return Err((
                Field::DayOfMonth,
                format!(
                    "day {first_day} does not exist in {} (no such date, it would never run)",
                    join_words(&months)
                ),
            ));
        }
        Ok(())
    }

    /// Whether the month and the day rule allow `date`.
    pub(crate) fn matches_date(&self, date: Date) -> bool {
        if self.months.values & (1 << date.month()) == 0 {
            return false;
        }
        let dom = self.dom_matches(date);
        let dow = self.dow_matches(date);
        if self.day_and {
            dom && dow
        } else {
            dom || dow
        }
    }

    fn dom_matches(&self, date: Date) -> bool {
        let day = date.day() as u32;
        if self.days.values & (1 << day) != 0 {
            return true;
        }
        let last = date.days_in_month() as u32;
        if self.days.last_day && day == last {
            return true;
        }
        if self.days.last_weekday {
            // The last day, or the Friday before it when it falls on a weekend.
            let last_date = date.last_of_month();
            let last_weekday = match last_date.weekday() {
                Weekday::Saturday => last - 1,
                Weekday::Sunday => last - 2,
                _ => last,
            };
            if day == last_weekday {
                return true;
            }
        }
        false
    }

    fn dow_matches(&self, date: Date) -> bool {
        let weekday = date.weekday().to_sunday_zero_offset() as u32;
        if self.weekdays.values & (1 << weekday) != 0 {
            return true;
        }
        let day = date.day() as u32;
        let last = date.days_in_month() as u32;
        // The same weekday a week later would be in the next month: the last one.
        if self.weekdays.last_of & (1 << weekday) != 0 && day + 7 > last {
            return true;
        }
        let nth = day.div_ceil(7);
        self.weekdays.nth & (1 << (weekday * 5 + nth - 1)) != 0
    }

    /// Whether any date at all satisfies the month and the day rule: `0 0 */8 * MON#5`
    /// (days 1, 9, 17, 25 that are a fifth Monday) never does, though every field is
    /// fine on its own. Looks at one whole Gregorian cycle, at most 146,097 days; an
    /// expression that runs stops at its first day (usually the first one looked at).
    pub(crate) fn runs_on_some_day(&self) -> bool {
        let mut date = Date::constant(2000, 1, 1);
        for _ in 0..GREGORIAN_CYCLE_DAYS {
            if self.matches_date(date) {
                return true;
            }
            match date.tomorrow() {
                Ok(next) => date = next,
                Err(_) => return false,
            }
        }
        false
    }

    /// Croner patterns whose union matches exactly the wall clock times these fields
    /// match. One pattern, except when day-of-month holds both `L` and `LW`: croner reads
    /// that pair as `LW` alone, so each gets a pattern of its own. A pattern that can
    /// never match is left out (croner would search to year 5000 for it).
    pub(crate) fn croner_patterns(&self) -> Vec<(String, Fields)> {
        let mut variants = Vec::with_capacity(2);
        if self.days.last_day && self.days.last_weekday {
            let mut with_last = *self;
            with_last.days.last_weekday = false;
            let mut with_last_weekday = *self;
            with_last_weekday.days.last_day = false;
            variants.push(with_last);
            variants.push(with_last_weekday);
        } else {
            variants.push(*self);
        }
        variants
            .into_iter()
            .filter(|variant| variant.runs_on_some_day())
            .map(|variant| (variant.croner_pattern(), variant))
            .collect()
    }

    /// The fields written out as plain lists, in the syntax croner reads the same way as
    /// cronsim: no `*`, no steps, no names; Sunday is 0.
    fn croner_pattern(&self) -> String {
        fn list(set: &Set) -> Vec<String> {
            set.iter_values().map(|v| v.to_string()).collect()
        }
        let mut days = list(&self.days);
        if self.days.last_day {
            days.push("L".into());
        }
        if self.days.last_weekday {
            days.push("LW".into());
        }
        let mut weekdays = list(&self.weekdays);
        for weekday in 0..7u32 {
            if self.weekdays.last_of & (1 << weekday) != 0 {
                weekdays.push(format!("{weekday}L"));
            }
            for nth in 1..=5u32 {
                if self.weekdays.nth & (1 << (weekday * 5 + nth - 1)) != 0 {
                    weekdays.push(format!("{weekday}#{nth}"));
                }
            }
        }
        format!(
            "{} {} {} {} {}",
            list(&self.minutes).join(","),
            list(&self.hours).join(","),
            days.join(","),
            list(&self.months).join(","),
            weekdays.join(",")
        )
    }

    /// The only value of a field of plain values, if it has exactly one.
    pub(crate) fn single(set: &Set) -> Option<u32> {
        if set.has_specials() || set.values.count_ones() != 1 {
            return None;
        }
        Some(set.values.trailing_zeros())
    }
}

fn month_display(month: u32) -> &'static str {
    [
        "",
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ][month as usize]
}

fn join_words(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// One field: cronsim's `Field.parse`, branch for branch.
fn parse_field(field: Field, text: &str) -> Result<Set, FieldProblem> {
    let (low, high) = field.bounds();
    if text == "*" {
        return Ok(Set::only_values(low..=high));
    }
    if text.contains(',') {
        let mut set = Set::default();
        for term in text.split(',') {
            if term.is_empty() {
                return Err("a list has an empty item".into());
            }
            set = set.union(parse_field(field, term)?);
        }
        return Ok(set);
    }
    if field == Field::DayOfWeek && text.contains('L') {
        // Only `<number>L`: the last such weekday of the month.
        let number = &text[..text.len() - 1];
        if !text.ends_with('L') || number.is_empty() || !is_digits(number) {
            return Err(format!(
                "{text:?}: L in day-of-week follows a weekday number, as in 5L (the last Friday)"
            ));
        }
        let weekday = value(field, number)?;
        return Ok(Set {
            last_of: 1 << weekday,
            ..Set::default()
        });
    }
    if field == Field::DayOfWeek && text.contains('#') {
        let (weekday, nth) = text.split_once('#').unwrap_or((text, ""));
        let nth = digits(nth).ok_or_else(|| format!("{text:?}: # is followed by a number"))?;
        if !(1..=5).contains(&nth) {
            return Err(format!(
                "{text:?}: the week of the month after # is 1 to 5, not {nth}"
            ));
        }
        let weekday = value(field, weekday)?;
        return Ok(Set {
            nth: 1 << (weekday * 5 + nth as u32 - 1),
            ..Set::default()
        });
    }
    if let Some((term, step)) = text.split_once('/') {
        let step = digits(step).ok_or_else(|| format!("{text:?}: a step is a number"))?;
        if step == 0 {
            return Err(format!("{text:?}: a step can't be 0"));
        }
        let items = parse_field(field, term)?;
        if items.has_specials() {
            // `L/3` and `LW/3`: cronsim ignores the step.
            return Ok(items);
        }
        let values: Vec<u32> = items.iter_values().collect();
        let stepped: Vec<u32> = if let [start] = values[..] {
            // A single value is where the steps start: `5/15` is 5, 20, 35, 50.
            (start..=high).step_by(clamp_step(step)).collect()
        } else {
            values.into_iter().step_by(clamp_step(step)).collect()
        };
        return Ok(Set::only_values(stepped));
    }
    if let Some((start, end)) = text.split_once('-') {
        let start = value(field, start)?;
        let end = value(field, end)?;
        if end < start {
            return Err(format!(
                "the range {text:?} goes backwards ({start} is after {end})"
            ));
        }
        return Ok(Set::only_values(start..=end));
    }
    if field == Field::DayOfMonth && text == "LW" {
        return Ok(Set {
            last_weekday: true,
            ..Set::default()
        });
    }
    if field == Field::DayOfMonth && text == "L" {
        return Ok(Set {
            last_day: true,
            ..Set::default()
        });
    }
    Ok(Set::only_values([value(field, text)?]))
}

/// A step as `step_by` takes it; any step past the range is as good as the largest one.
fn clamp_step(step: u64) -> usize {
    usize::try_from(step.min(64)).unwrap_or(64)
}

fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// A run of ASCII digits as a number; one too large for u64 saturates (only its size
/// matters, as a step). `None` when empty or not all digits.
fn digits(text: &str) -> Option<u64> {
    if !is_digits(text) {
        return None;
    }
    Some(text.parse::<u64>().unwrap_or(u64::MAX))
}

/// cronsim's `Field.int`: a name (months and weekdays) or a number within the bounds.
fn value(field: Field, text: &str) -> Result<u32, FieldProblem> {
    if let Some(v) = field.name_value(text) {
        return Ok(v);
    }
    let (low, high) = field.bounds();
    let Some(number) = digits(text) else {
        if text.is_empty() {
            return Err("a value is missing".into());
        }
        let expected = match field {
            Field::Month => "a number or a month name (JAN to DEC)",
            Field::DayOfWeek => "a number or a weekday name (SUN to SAT)",
            _ => "a number",
        };
        return Err(format!("{text:?} is not {expected}"));
    };
    if number < u64::from(low) || number > u64::from(high) {
        return Err(format!("{text} is not between {low} and {high}"));
    }
    Ok(number as u32)
}
