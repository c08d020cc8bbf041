//! The period timeline of a snitch's page: its last periods, oldest first, each marked by
//! what the kept check-ins say about it. Pure: the caller passes `now`.

use chrono::Duration;
use snitch_core::schedule::Window;
use snitch_core::{Cadence, CheckIn, Timestamp};

/// What one period shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A successful check-in arrived in the period (green).
    Ok,
    /// Only error check-ins arrived (amber).
    Error,
    /// The period is over and nothing arrived, after the first check-in (red).
    Missed,
    /// Nothing to judge (grey): the snitch did not exist or had not checked in yet, the
    /// period is still running, or it is older than the kept check-ins.
    None,
}

impl Mark {
    /// The word shown beside the colour.
    pub fn word(self) -> &'static str {
        match self {
            Mark::Ok => "ok",
            Mark::Error => "error",
            Mark::Missed => "missed",
            Mark::None => "no data",
        }
    }

    /// A one-character sign, so the timeline reads without colour.
    pub fn glyph(self) -> &'static str {
        match self {
            Mark::Ok => "✓",
            Mark::Error => "!",
            Mark::Missed => "✗",
            Mark::None => "·",
        }
    }

    /// The CSS class of the mark's cell.
    pub fn class(self) -> &'static str {
        match self {
            Mark::Ok => "ok",
            Mark::Error => "error",
            Mark::Missed => "missed",
            Mark::None => "none",
        }
    }
}

/// One period of the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// Where the period starts.
    pub start: Timestamp,
    /// Where the period ends (the next one's start).
    pub end: Timestamp,
    /// What happened in it.
    pub mark: Mark,
    /// Why a grey cell is grey, or what the mark means, in words.
    pub reason: &'static str,
}

/// The last `periods` periods (a schedule's run windows) up to the one containing `now`,
/// oldest first.
///
/// `check_ins` are the kept ones, newest first; `complete` says whether they are the
/// whole history (fewer than the store keeps): when they are not, periods before the
/// oldest kept check-in are unknown rather than missed. `paused_since`: when the pause in
/// force began (its `snitch.paused` event), if the snitch is paused; periods that ended
/// after it without a check-in are paused, not missed.
pub fn timeline(
    cadence: &Cadence,
    created_at: Timestamp,
    check_ins: &[CheckIn],
    complete: bool,
    paused_since: Option<Timestamp>,
    now: Timestamp,
    periods: usize,
) -> Vec<Cell> {
    let oldest = check_ins.iter().map(|c| c.at).min();
    let mut cells = Vec::with_capacity(periods);
    for (start, end) in recent_spans(cadence, now, periods) {
        let inside = check_ins.iter().filter(|c| start <= c.at && c.at < end);
        let (mut ok, mut error) = (false, false);
        for c in inside {
            if c.outcome.is_success() {
                ok = true;
            } else {
                error = true;
            }
        }
        let (mark, reason) = if ok {
            (Mark::Ok, "checked in")
        } else if error {
            (Mark::Error, "only error check-ins")
        } else if end <= created_at {
            (Mark::None, "before the snitch was made")
        } else if !complete && oldest.is_none_or(|o| start < o) {
            (Mark::None, "older than the kept check-ins")
        } else if oldest.is_none_or(|first| end <= first) {
            (Mark::None, "before the first check-in")
        } else if paused_since.is_some_and(|p| p < end) {
            (Mark::None, "paused")
        } else if now < end {
            (Mark::None, "running, no check-in yet")
        } else {
            (Mark::Missed, "no check-in")
        };
        cells.push(Cell {
            start,
            end,
            mark,
            reason,
        });
    }
    cells.reverse();
    cells
}

/// The spans a cell stands for, newest first, up to the one holding `now`: an interval's
/// periods, or a schedule's run windows (`[opens, closes)`; the newest may still be open).
fn recent_spans(cadence: &Cadence, now: Timestamp, count: usize) -> Vec<(Timestamp, Timestamp)> {
    match cadence {
        Cadence::Interval(interval) => {
            let mut period = interval.period_of(now);
            let mut spans = Vec::with_capacity(count);
            for _ in 0..count {
                spans.push((period.start(), period.end()));
                period = period.prev();
            }
            spans
        }
        Cadence::Cron(runs) => {
            // Far enough back for `count` runs at the schedule's tightest spacing (a
            // year at most): the runs are searched forward from there.
            let gap = runs
                .schedule()
                .shortest_gap(now - Duration::days(366))
                .min(Duration::days(366));
            let back =
                (gap * i32::try_from(count + 1).unwrap_or(i32::MAX)).min(Duration::days(366));
            let windows: Vec<Window> = runs
                .schedule()
                .times_after(now - back)
                .map(|t| runs.window(t))
                .take_while(|w| w.opens <= now)
                .collect();
            windows
                .iter()
                .rev()
                .take(count)
                .map(|w| (w.opens, w.closes))
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snitch_core::Interval;
    use snitch_core::Outcome;

    fn at(s: &str) -> Timestamp {
        chrono::DateTime::parse_from_rfc3339(s)
            .expect("valid")
            .to_utc()
    }

    fn check_in(t: &str, ok: bool) -> CheckIn {
        let outcome = if ok {
            Outcome::Success
        } else {
            Outcome::Error {
                exit_status: "1".into(),
            }
        };
        CheckIn::new(at(t), outcome, None)
    }

    fn marks(cells: &[Cell]) -> String {
        cells.iter().map(|c| c.mark.glyph()).collect()
    }

    #[test]
    fn periods_are_marked_ok_error_missed_or_grey() {
        // Hourly, made at 00:30, first check-in in hour 1; an error only in hour 3;
        // nothing in hours 2 and 4; now in hour 5 with nothing yet.
        let ins = vec![
            check_in("2026-11-23T03:10:00Z", false),
            check_in("2026-11-23T01:05:00Z", true),
            check_in("2026-11-23T01:50:00Z", false),
        ];
        let cells = timeline(
            &Interval::Hourly.into(),
            at("2026-11-23T00:30:00Z"),
            &ins,
            true,
            None,
            at("2026-11-23T05:20:00Z"),
            8,
        );
        assert_eq!(cells.len(), 8);
        assert_eq!(cells[0].start, at("2026-11-22T22:00:00Z"));
        assert_eq!(cells[7].end, at("2026-11-23T06:00:00Z"));
        // 22h, 23h: before it existed; 0h: before the first check-in; 1h ok (an error
        // too, but a success counts); 2h missed; 3h error only; 4h missed; 5h running.
        assert_eq!(marks(&cells), "···✓✗!✗·");
        assert_eq!(cells[0].reason, "before the snitch was made");
        assert_eq!(cells[2].reason, "before the first check-in");
        assert_eq!(cells[7].reason, "running, no check-in yet");
        // A check-in in the running period marks it at once.
        let mut more = ins.clone();
        more.insert(0, check_in("2026-11-23T05:01:00Z", true));
        let cells = timeline(
            &Interval::Hourly.into(),
            at("2026-11-23T00:30:00Z"),
            &more,
            true,
            None,
            at("2026-11-23T05:20:00Z"),
            8,
        );
        assert_eq!(cells[7].mark, Mark::Ok);
    }

    #[test]
    fn periods_older_than_an_incomplete_history_are_unknown_not_missed() {
        let ins = vec![
            check_in("2026-11-23T05:00:30Z", true),
            check_in("2026-11-23T04:59:30Z", true),
        ];
        let cells = timeline(
            &Interval::Minute1.into(),
            at("2026-11-20T00:00:00Z"),
            &ins,
            false,
            None,
            at("2026-11-23T05:00:40Z"),
            5,
        );
        assert_eq!(marks(&cells), "···✓✓");
        assert_eq!(cells[0].reason, "older than the kept check-ins");
        // The same history, complete: those periods come before the first check-in.
        let cells = timeline(
            &Interval::Minute1.into(),
            at("2026-11-20T00:00:00Z"),
            &ins,
            true,
            None,
            at("2026-11-23T05:00:40Z"),
            5,
        );
        assert_eq!(cells[0].reason, "before the first check-in");
    }

    #[test]
    fn periods_since_the_pause_in_force_are_paused_not_missed() {
        let ins = vec![check_in("2026-11-23T01:05:00Z", true)];
        let cells = timeline(
            &Interval::Hourly.into(),
            at("2026-11-23T00:30:00Z"),
            &ins,
            true,
            Some(at("2026-11-23T02:30:00Z")),
            at("2026-11-23T05:20:00Z"),
            6,
        );
        // 0h before the first, 1h ok; 2h ended after the pause began: paused, as are
        // 3h, 4h and the running 5h.
        assert_eq!(marks(&cells), "·✓····");
        assert!(cells[2..].iter().all(|c| c.reason == "paused"));
        // Without the pause, 2h to 4h are missed.
        let cells = timeline(
            &Interval::Hourly.into(),
            at("2026-11-23T00:30:00Z"),
            &ins,
            true,
            None,
            at("2026-11-23T05:20:00Z"),
            6,
        );
        assert_eq!(marks(&cells), "·✓✗✗✗·");
    }

    #[test]
    fn a_snitch_without_check_ins_is_all_grey() {
        let cells = timeline(
            &Interval::Daily.into(),
            at("2026-10-01T00:00:00Z"),
            &[],
            true,
            None,
            at("2026-11-23T05:00:00Z"),
            30,
        );
        assert_eq!(cells.len(), 30);
        assert!(cells.iter().all(|c| c.mark == Mark::None));
        // Consecutive and aligned.
        assert!(cells.windows(2).all(|w| w[0].end == w[1].start));
    }
}
