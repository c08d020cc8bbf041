//! Runs (docs/rules.md#runs): a job that says when it starts and when it ends. A start
//! satisfies the expected run's window and opens a run; the end closes it with its
//! duration; a run open longer than its snitch's maximum runtime times out.

use chrono::Duration;

use crate::cadence::Cadence;
use crate::calendar::Timestamp;
use crate::types::Outcome;
use crate::validation::Validation;

/// The shortest maximum runtime a snitch may set, in seconds.
pub const MAX_RUNTIME_MIN_SECONDS: u32 = 60;
/// The longest maximum runtime a snitch may set (28 days), in seconds; also the longest
/// duration a client may report.
pub const MAX_RUNTIME_MAX_SECONDS: u32 = 2_419_200;
/// How many runs of one snitch may be open at once; a start beyond it closes the oldest
/// as timed out, silently (a job that starts and never ends is already told by its first
/// timeout).
pub const OPEN_RUNS_MAX: usize = 100;
/// A run open this long closes as timed out whatever the snitch's maximum runtime.
pub const RUN_OPEN_LONGEST: Duration = Duration::hours(72);
/// How many bytes of a check-in's body are kept when the server sets no limit.
pub const PING_BODY_LIMIT_DEFAULT: usize = 10_000;
/// The longest a run id may be.
pub const RUN_ID_MAX_LEN: usize = 64;

/// What a check-in says of its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CheckInKind {
    /// A run ended (or a job that reports once, at its end): its outcome counts.
    #[default]
    End,
    /// A run started: it satisfies the expected run's window and opens a run.
    Start,
    /// Output to keep: recorded, changes nothing.
    Log,
}

impl CheckInKind {
    /// The history's name of a check-in of this kind with `outcome`: `success`, `error`,
    /// `start` or `log`.
    pub fn name(self, outcome: &Outcome) -> &'static str {
        match (self, outcome.is_success()) {
            (CheckInKind::End, true) => "success",
            (CheckInKind::End, false) => "error",
            (CheckInKind::Start, _) => "start",
            (CheckInKind::Log, _) => "log",
        }
    }

    /// The kind of a stored name ([`CheckInKind::name`]).
    pub fn parse(name: &str) -> Option<CheckInKind> {
        match name {
            "success" | "error" => Some(CheckInKind::End),
            "start" => Some(CheckInKind::Start),
            "log" => Some(CheckInKind::Log),
            _ => None,
        }
    }
}

/// The id a client gives a run to pair its start with its end (`rid`): 1 to 64 of
/// `A-Z a-z 0-9 . _ : -`, a UUID typically.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunId(String);

impl RunId {
    /// The id, or `None` for text that is not one.
    pub fn parse(raw: &str) -> Option<RunId> {
        let ok = !raw.is_empty()
            && raw.len() <= RUN_ID_MAX_LEN
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        ok.then(|| RunId(raw.to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A duration a client reported (`duration`, seconds, decimal): 0 to
/// [`MAX_RUNTIME_MAX_SECONDS`], kept in milliseconds; `None` for anything else.
pub fn parse_reported_duration(raw: &str) -> Option<u64> {
    let seconds: f64 = raw.trim().parse().ok()?;
    if !seconds.is_finite() || !(0.0..=f64::from(MAX_RUNTIME_MAX_SECONDS)).contains(&seconds) {
        return None;
    }
    // In range, so the product fits: at most 2.4e9 milliseconds.
    Some((seconds * 1000.0).round() as u64)
}

/// What a job printed, kept with its check-in: at most the server's limit in bytes, cut at
/// a character boundary, as valid UTF-8 without NUL (a store's text columns refuse NUL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckInBody(String);

impl CheckInBody {
    /// The first `limit` bytes of `raw`, made valid UTF-8 (invalid sequences and NUL
    /// become U+FFFD, which may make it longer; it is cut again). `None` when empty.
    pub fn truncating(raw: &[u8], limit: usize) -> Option<CheckInBody> {
        let head = &raw[..raw.len().min(limit)];
        let mut text = String::from_utf8_lossy(head).replace('\0', "\u{FFFD}");
        if text.len() > limit {
            let mut cut = limit;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        (!text.is_empty()).then_some(CheckInBody(text))
    }

    /// A body read back from a store, as it was kept.
    pub fn restore(text: String) -> CheckInBody {
        CheckInBody(text)
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A run that started and has not ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRun {
    /// The client's id of the run, if it gave one.
    pub run_id: Option<RunId>,
    /// When it started (its first start).
    pub started_at: Timestamp,
    /// When it times out unless it ends or is kept alive (a start with its id again).
    pub timeout_at: Timestamp,
}

/// The last run that ended or timed out, as the snitch shows it (`last_run`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The client's id of the run, if it gave one.
    pub run_id: Option<RunId>,
    /// When it started, when known (a start, or the end less a reported duration).
    pub started_at: Option<Timestamp>,
    /// When it ended; `None` for a run that timed out.
    pub finished_at: Option<Timestamp>,
    /// How long it took, in milliseconds: the duration the client reported, else its end
    /// less its start; for a timed-out run, how long it was open.
    pub duration_ms: Option<u64>,
    /// The exit status it reported, `None` for a success or a timeout.
    pub exit_status: Option<String>,
    /// Whether it timed out (no end within the maximum runtime).
    pub timed_out: bool,
}

/// Why a `snitch.missing` or `snitch.errored` was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AlertReason {
    /// An expected run's window closed without a check-in.
    Missed,
    /// A run stayed open past the maximum runtime.
    Timeout,
    /// A run ended with a failing exit status.
    ExitStatus,
}

impl AlertReason {
    /// The wire name: `missed`, `timeout` or `exit_status`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertReason::Missed => "missed",
            AlertReason::Timeout => "timeout",
            AlertReason::ExitStatus => "exit_status",
        }
    }

    /// The reason of a wire name.
    pub fn parse(raw: &str) -> Option<AlertReason> {
        [
            AlertReason::Missed,
            AlertReason::Timeout,
            AlertReason::ExitStatus,
        ]
        .into_iter()
        .find(|r| r.as_str() == raw)
    }
}

/// A maximum runtime from its seconds, or the validation naming `max_runtime_seconds`.
pub fn check_max_runtime(seconds: u32) -> Result<Duration, Validation> {
    if (MAX_RUNTIME_MIN_SECONDS..=MAX_RUNTIME_MAX_SECONDS).contains(&seconds) {
        Ok(Duration::seconds(i64::from(seconds)))
    } else {
        Err(Validation::new(
            "max_runtime_seconds",
            format!(
                "must be a whole number of seconds from {MAX_RUNTIME_MIN_SECONDS} to {MAX_RUNTIME_MAX_SECONDS}"
            ),
        ))
    }
}

/// How long a run that started at `started_at` may stay open: the snitch's setting, else
/// the grace of a schedule or the length of an interval's period, never past
/// [`RUN_OPEN_LONGEST`].
pub fn runtime_allowed(
    cadence: &Cadence,
    max_runtime: Option<Duration>,
    started_at: Timestamp,
) -> Duration {
    let allowed = max_runtime.unwrap_or_else(|| default_max_runtime(cadence, started_at));
    allowed.min(RUN_OPEN_LONGEST)
}

/// The maximum runtime of a snitch that sets none: a schedule's grace, an interval's
/// period (the one `at` falls in).
pub fn default_max_runtime(cadence: &Cadence, at: Timestamp) -> Duration {
    match cadence {
        Cadence::Interval(interval) => interval.period_of(at).len(),
        Cadence::Cron(runs) => runs.grace(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_short_plain_text() {
        assert!(RunId::parse("5b7c1d2e-0000-4000-8000-000000000001").is_some());
        assert!(RunId::parse("a.b_c:d-9").is_some());
        assert!(RunId::parse(&"x".repeat(64)).is_some());
        for bad in ["", "a b", "a/b", "ä", "a\0", &"x".repeat(65)] {
            assert!(RunId::parse(bad).is_none(), "{bad:?} is refused");
        }
    }

    #[test]
    fn reported_durations_are_seconds_within_range() {
        assert_eq!(parse_reported_duration("4.2"), Some(4_200));
        assert_eq!(parse_reported_duration("0"), Some(0));
        assert_eq!(parse_reported_duration("2419200"), Some(2_419_200_000));
        for bad in ["-1", "2419200.5", "NaN", "inf", "1e400", "", "abc"] {
            assert_eq!(parse_reported_duration(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn bodies_are_cut_to_the_limit_as_valid_utf8_without_nul() {
        assert_eq!(CheckInBody::truncating(b"", 10), None);
        let body = CheckInBody::truncating(b"ab\0c\xff", 100).expect("kept");
        assert_eq!(body.as_str(), "ab\u{FFFD}c\u{FFFD}");
        // "é" is two bytes: a limit inside it keeps what is before it.
        let cut = CheckInBody::truncating("aé".as_bytes(), 2).expect("kept");
        assert_eq!(cut.as_str(), "a");
        // Replacement characters are three bytes: the text is cut again to the limit.
        let replaced = CheckInBody::truncating(b"\xff\xff\xff\xff", 4).expect("kept");
        assert!(replaced.as_str().len() <= 4);
        assert_eq!(replaced.as_str(), "\u{FFFD}");
    }

    #[test]
    fn kinds_and_reasons_read_back_their_names() {
        for (kind, outcome) in [
            (CheckInKind::End, Outcome::Success),
            (
                CheckInKind::End,
                Outcome::Error {
                    exit_status: "1".into(),
                },
            ),
            (CheckInKind::Start, Outcome::Success),
            (CheckInKind::Log, Outcome::Success),
        ] {
            assert_eq!(CheckInKind::parse(kind.name(&outcome)), Some(kind));
        }
        for reason in [
            AlertReason::Missed,
            AlertReason::Timeout,
            AlertReason::ExitStatus,
        ] {
            assert_eq!(AlertReason::parse(reason.as_str()), Some(reason));
        }
    }

    #[test]
    fn max_runtime_is_checked_and_defaults_to_the_cadence() {
        assert!(check_max_runtime(59).is_err());
        assert!(check_max_runtime(2_419_201).is_err());
        assert_eq!(check_max_runtime(60), Ok(Duration::seconds(60)));
        let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("valid");
        let hourly = Cadence::Interval(crate::calendar::Interval::Hourly);
        assert_eq!(runtime_allowed(&hourly, None, at), Duration::hours(1));
        let weekly = Cadence::Interval(crate::calendar::Interval::Weekly);
        assert_eq!(runtime_allowed(&weekly, None, at), RUN_OPEN_LONGEST);
        assert_eq!(
            runtime_allowed(&weekly, Some(Duration::minutes(5)), at),
            Duration::minutes(5)
        );
    }
}
