//! A reference-model state-machine property test of [`SnitchService`].
//!
//! Random sequences of operations (create, check-ins, time jumps with a deadline sweep,
//! pause, unpause, update, delete, check-ins to deleted tokens) are applied both to the
//! real service — on [`MemoryStorage`] (1,000 cases), on PostgreSQL and on SQLite (fewer:
//! each case needs a clean database), a [`ManualClock`] and [`SequentialTokens`] — and to a
//! small model written here from docs/rules.md#time-and-periods,
//! docs/rules.md#state-machine and docs/rules.md#smart-alerts. After every step the status,
//! `checked_in_at`, the deadline and the events that step emitted must agree.
//!
//! The model computes periods on its own, in epoch milliseconds: fixed-length intervals by
//! floor division, weeks from the Monday 1970-01-05 (1970-01-01 was a Thursday), months
//! by civil-calendar arithmetic. It never calls `snitch_core::machine` or
//! `Interval::period_of`.
//!
//! Besides agreeing with the model, the service must keep a few invariants seen from its
//! output alone: a pending snitch never goes missing, a snitch is failed only after a
//! `snitch.missing`, and a step that starts and ends paused emits nothing. Event ids are
//! `<token>-<n>` (documented on `Event::id`), which lets the test count every event even
//! beyond the 100 the memory store keeps. A failure prints the trace of the minimal
//! sequence proptest shrank to.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Duration, FixedOffset, SecondsFormat, TimeZone, Utc};
use proptest::prelude::*;
use proptest::sample::Index;
use snitch_core::{
    AlertReason, AlertType, Case, CaseId, CheckIn, CheckInKind, Clock, CronSchedule, Event,
    EventKind, ManualClock, Outcome, RunId, SequentialTokens, ServiceError, Snitch, SnitchFields,
    SnitchService, Status, Storage, Token,
};
use snitch_store_memory::MemoryStorage;

// ---------------------------------------------------------------------------------------
// Time, in epoch milliseconds.

const SEC: i64 = 1_000;
const MIN: i64 = 60 * SEC;
const HOUR: i64 = 60 * MIN;
const DAY: i64 = 24 * HOUR;
const WEEK: i64 = 7 * DAY;
/// 1970-01-05T00:00:00Z, the first Monday after the epoch.
const FIRST_MONDAY: i64 = 4 * DAY;
/// The smallest margin of a learned (smart) deadline.
const SMART_MARGIN_MIN: i64 = 5 * MIN;
/// How many check-in offsets smart alerts learn from.
const OFFSETS_KEPT: usize = 10;
/// How many events the memory store keeps per snitch.
const EVENTS_KEPT: usize = 100;
/// Time jumps are shortened until they make at most this many `snitch.missing` events, so
/// that a 1_minute snitch does not make a jump of weeks expensive.
const MAX_MISSING_PER_JUMP: usize = 300;
/// docs/rules.md#runs: at most this many runs open per snitch; none open past 72 hours.
const OPEN_RUNS_MAX: usize = 100;
const RUN_OPEN_LONGEST: i64 = 72 * HOUR;

/// 2026-11-22T03:00:00Z, a Sunday: a week and a month end come soon.
fn start_ms() -> i64 {
    Utc.with_ymd_and_hms(2026, 11, 22, 3, 0, 0)
        .single()
        .expect("valid start")
        .timestamp_millis()
}

fn to_ts(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("representable instant")
}

fn iso(ms: i64) -> String {
    to_ts(ms).to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn iso_opt(ms: Option<i64>) -> String {
    ms.map_or_else(|| "none".to_owned(), iso)
}

/// Days since the epoch of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Year and month of a day since the epoch (H. Hinnant's algorithm).
fn year_month_of_day(days: i64) -> (i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m)
}

/// A representative subset of the intervals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Iv {
    Minute1,
    Minute5,
    Minute30,
    Hourly,
    Hour6,
    Daily,
    Weekly,
    Monthly,
}

const IVS: [Iv; 8] = [
    Iv::Minute1,
    Iv::Minute5,
    Iv::Minute30,
    Iv::Hourly,
    Iv::Hour6,
    Iv::Daily,
    Iv::Weekly,
    Iv::Monthly,
];

/// A period `[start, end)` in epoch milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Per {
    start: i64,
    end: i64,
}

impl Iv {
    fn name(self) -> &'static str {
        match self {
            Iv::Minute1 => "1_minute",
            Iv::Minute5 => "5_minute",
            Iv::Minute30 => "30_minute",
            Iv::Hourly => "hourly",
            Iv::Hour6 => "6_hour",
            Iv::Daily => "daily",
            Iv::Weekly => "weekly",
            Iv::Monthly => "monthly",
        }
    }

    fn sub_hourly(self) -> bool {
        matches!(self, Iv::Minute1 | Iv::Minute5 | Iv::Minute30)
    }

    /// The period containing `t`.
    fn period(self, t: i64) -> Per {
        let fixed = |len: i64| {
            let start = t.div_euclid(len) * len;
            Per {
                start,
                end: start + len,
            }
        };
        match self {
            Iv::Minute1 => fixed(MIN),
            Iv::Minute5 => fixed(5 * MIN),
            Iv::Minute30 => fixed(30 * MIN),
            Iv::Hourly => fixed(HOUR),
            Iv::Hour6 => fixed(6 * HOUR),
            Iv::Daily => fixed(DAY),
            Iv::Weekly => {
                let start = (t - FIRST_MONDAY).div_euclid(WEEK) * WEEK + FIRST_MONDAY;
                Per {
                    start,
                    end: start + WEEK,
                }
            }
            Iv::Monthly => {
                let (y, m) = year_month_of_day(t.div_euclid(DAY));
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                Per {
                    start: days_from_civil(y, m, 1) * DAY,
                    end: days_from_civil(ny, nm, 1) * DAY,
                }
            }
        }
    }

    fn next(self, p: Per) -> Per {
        self.period(p.end)
    }
}

// ---------------------------------------------------------------------------------------
// The model of one snitch.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Pending,
    Healthy,
    Failed,
    Errored,
    Paused,
}

impl St {
    fn real(self) -> Status {
        match self {
            St::Pending => Status::Pending,
            St::Healthy => Status::Healthy,
            St::Failed => Status::Failed,
            St::Errored => Status::Errored,
            St::Paused => Status::Paused,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MUntil {
    Healthy,
    Unpaused,
    At(i64),
}

#[derive(Clone, Debug)]
struct MPause {
    until: MUntil,
    /// The status it had when paused.
    resume: St,
    /// Whether a check-in that counts as a success arrived while paused.
    success_seen: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Reporting,
    Missing,
    Errored,
    Paused,
}

impl Kind {
    fn real(self) -> EventKind {
        match self {
            Kind::Reporting => EventKind::Reporting,
            Kind::Missing => EventKind::Missing,
            Kind::Errored => EventKind::Errored,
            Kind::Paused => EventKind::Paused,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct MEvent {
    kind: Kind,
    at: i64,
    status: St,
    previous: St,
    /// The causing check-in: its instant and whether it was a success.
    check_in: Option<(i64, bool)>,
    /// For missing: how many due points it stands for; 0 for other kinds.
    missed: u64,
}

impl fmt::Display for MEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at {} {:?}->{:?} check_in={:?}",
            self.kind.real().as_str(),
            iso(self.at),
            self.previous,
            self.status,
            self.check_in.map(|(t, ok)| (iso(t), ok))
        )
    }
}

#[derive(Clone, Debug)]
struct Model {
    iv: Iv,
    smart: bool,
    status: St,
    checked_in_at: Option<i64>,
    /// The last check-in (any outcome) or resume.
    anchor: Option<i64>,
    deadline: Option<i64>,
    /// Offsets of the recent check-ins from the start of their periods, oldest first.
    offsets: VecDeque<i64>,
    pause: Option<MPause>,
    /// When the last `snitch.errored` was emitted.
    last_errored_alert: Option<i64>,
    /// Whether the error it is in was announced (docs/rules.md#alert-economy).
    error_announced: bool,
    /// When the last `snitch.reporting` after an error was emitted.
    last_recovery_alert: Option<i64>,
    /// How many events it emitted in all.
    events: u64,
    /// The events of the current step, oldest first.
    step_events: Vec<MEvent>,
    /// docs/rules.md#tolerances: failed or missed runs in a row that alert nobody.
    failure_tolerance: u16,
    missed_tolerance: u16,
    /// Failed and missed runs in a row so far.
    failures: u32,
    misses: u32,
    /// docs/rules.md#runs: the maximum runtime set (ms), the runs open (oldest first) and
    /// the last run that ended or timed out.
    max_runtime: Option<i64>,
    open_runs: Vec<MRun>,
    last_run: Option<MLastRun>,
    /// A schedule in place of the interval.
    cron: Option<CronModel>,
}

#[derive(Clone, Debug)]
struct MRun {
    rid: Option<u8>,
    started: i64,
    timeout: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct MLastRun {
    duration: Option<i64>,
    timed_out: bool,
}

/// The schedules the model's cron snitches use (expression, zone): frequent and daily,
/// across DST zones and half-hour offsets.
const SCHEDULES: [(&str, &str); 5] = [
    ("*/7 * * * *", "UTC"),
    ("30 2 * * *", "Europe/Riga"),
    ("0 */6 * * MON-FRI", "America/New_York"),
    ("15 3 * * *", "Australia/Lord_Howe"),
    ("*/20 9-17 * * *", "Asia/Kathmandu"),
];
/// Grace and early spans (ms) the model's cron snitches use.
const GRACES: [i64; 3] = [MIN, 15 * MIN, 2 * HOUR];
const EARLIES: [i64; 3] = [0, MIN, 30 * MIN];

/// A cron snitch's cadence in the model (docs/rules.md#expected-runs): when runs are
/// expected comes from the schedule (its times are the golden vectors' business); the
/// windows, deadlines and slots are the model's own, from the rules.
#[derive(Clone, Debug)]
struct CronModel {
    which: (usize, usize, usize),
    schedule: CronSchedule,
    grace: i64,
    early: i64,
}

impl CronModel {
    fn new(which: (usize, usize, usize)) -> Self {
        let (expr, zone) = SCHEDULES[which.0];
        CronModel {
            which,
            schedule: CronSchedule::parse(expr, zone).expect("a valid schedule"),
            grace: GRACES[which.1],
            early: EARLIES[which.2],
        }
    }

    /// The first run strictly after `t`.
    fn next_after(&self, t: i64) -> i64 {
        ms(self.schedule.next_after(to_ts(t)).expect("runs for ever"))
    }

    /// When a check-in counts for the run at `run`: from `early` before it, never before
    /// halfway from the previous run.
    fn opens(&self, run: i64) -> i64 {
        let earliest = run - self.early;
        let mut previous = None;
        let mut t = self.next_after(earliest - self.early - 1);
        while t < run {
            previous = Some(t);
            t = self.next_after(t);
        }
        match previous {
            Some(p) => earliest.max(p + (run - p) / 2),
            None => earliest,
        }
    }

    /// After a check-in (or resume) at `t` with no run pending: the latest run whose window
    /// holds `t` is done and the next one is due; if none holds it, the next run is due.
    /// Walks every run from `t − grace` to `t + early` (the model's own reading of the
    /// rule, not the core's shortcut).
    fn deadline_from(&self, t: i64) -> i64 {
        let mut latest_holding = None;
        let mut run = self.next_after(t - self.grace - 1);
        while run <= t + self.early {
            if self.opens(run) <= t && t <= run + self.grace {
                latest_holding = Some(run);
            }
            run = self.next_after(run);
        }
        let due = match latest_holding {
            Some(done) => self.next_after(done),
            None => self.next_after(t),
        };
        due + self.grace
    }

    /// After a check-in at `t` with the deadline `pending` (not passed).
    fn deadline_after_check_in(&self, pending: Option<i64>, t: i64) -> i64 {
        match pending {
            Some(d) if d >= t => {
                let run = d - self.grace;
                if self.opens(run) <= t {
                    self.next_after(run) + self.grace
                } else {
                    d
                }
            }
            _ => self.deadline_from(t),
        }
    }

    /// Whether no run is expected in `(earlier, later]`.
    fn same_slot(&self, earlier: i64, later: i64) -> bool {
        self.next_after(earlier) > later
    }
}

impl Model {
    fn new(iv: Iv, smart: bool, tolerances: (u16, u16), max_runtime: Option<i64>) -> Self {
        Model {
            cron: None,
            max_runtime,
            open_runs: Vec::new(),
            last_run: None,
            failure_tolerance: tolerances.0,
            missed_tolerance: tolerances.1,
            failures: 0,
            misses: 0,
            iv,
            smart,
            status: St::Pending,
            checked_in_at: None,
            anchor: None,
            deadline: None,
            offsets: VecDeque::new(),
            pause: None,
            last_errored_alert: None,
            error_announced: false,
            last_recovery_alert: None,
            events: 0,
            step_events: Vec::new(),
        }
    }

    /// When the snitch must have checked in during period `p`.
    fn due(&self, p: Per) -> i64 {
        if !self.smart || self.offsets.len() < 3 {
            return p.end;
        }
        let latest = self.offsets.iter().copied().max().unwrap_or(0);
        let margin = ((p.end - p.start) / 10).max(SMART_MARGIN_MIN);
        (p.start + latest + margin).min(p.end)
    }

    /// The deadline of a snitch that checked in or resumed at `at`.
    fn due_after(&self, at: i64) -> i64 {
        match &self.cron {
            Some(c) => c.deadline_from(at),
            None => self.due(self.iv.next(self.iv.period(at))),
        }
    }

    /// The deadline after a run counted at `at` with the deadline `pending`.
    fn due_after_run(&self, pending: Option<i64>, at: i64) -> i64 {
        match &self.cron {
            Some(c) => c.deadline_after_check_in(pending, at),
            None => self.due_after(at),
        }
    }

    /// Whether `earlier` and `later` fall in one period (or one slot between runs).
    fn same_period(&self, earlier: i64, later: i64) -> bool {
        match &self.cron {
            Some(c) => c.same_slot(earlier, later),
            None => self.iv.period(earlier) == self.iv.period(later),
        }
    }

    fn cadence_name(&self) -> &'static str {
        match self.cron {
            Some(_) => "cron",
            None => self.iv.name(),
        }
    }

    fn emit(&mut self, kind: Kind, at: i64, previous: St, check_in: Option<(i64, bool)>) {
        self.events += 1;
        self.step_events.push(MEvent {
            kind,
            at,
            status: self.status,
            previous,
            check_in,
            missed: 0,
        });
    }

    /// When something happens to it without a request.
    fn wake(&self) -> Option<i64> {
        let timeout = self.first_timeout().map(|(_, at)| at);
        match (self.wake_for_deadline(), timeout) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The end of a timed pause, or the deadline.
    fn wake_for_deadline(&self) -> Option<i64> {
        match &self.pause {
            Some(MPause {
                until: MUntil::At(t),
                ..
            }) => Some(*t),
            Some(_) => None,
            None => self.deadline,
        }
    }

    /// The open run that times out first (the oldest of those that tie).
    fn first_timeout(&self) -> Option<(usize, i64)> {
        let mut first: Option<(usize, i64)> = None;
        for (i, r) in self.open_runs.iter().enumerate() {
            if first.is_none_or(|(_, at)| r.timeout < at) {
                first = Some((i, r.timeout));
            }
        }
        first
    }

    /// How long a run that starts at `at` may stay open.
    fn runtime_allowed(&self, at: i64) -> i64 {
        let allowed = self.max_runtime.unwrap_or_else(|| match &self.cron {
            Some(c) => c.grace,
            None => {
                let p = self.iv.period(at);
                p.end - p.start
            }
        });
        allowed.min(RUN_OPEN_LONGEST)
    }

    /// The open run at `index` timed out: a failed run, told unless paused, tolerated or
    /// already failed.
    fn time_out(&mut self, index: usize) {
        let run = self.open_runs.remove(index);
        self.last_run = Some(MLastRun {
            duration: Some(run.timeout - run.started),
            timed_out: true,
        });
        if self.pause.is_some() {
            return;
        }
        self.failures += 1;
        let tolerated =
            self.status != St::Pending && self.failures <= u32::from(self.failure_tolerance);
        if tolerated || self.status == St::Failed {
            return;
        }
        let previous = self.status;
        self.status = St::Failed;
        if self.deadline.is_none() {
            self.anchor = Some(run.started);
            self.deadline = Some(self.due_after_run(None, run.started));
        }
        self.emit(Kind::Missing, run.timeout, previous, None);
    }

    /// A run starts: the window is satisfied, the status stays; a start with an open
    /// run's id keeps it alive; one without id replaces the open run without id.
    fn start(&mut self, now: i64, rid: Option<u8>) {
        self.advance(now);
        let allowed = self.runtime_allowed(now);
        match self.open_runs.iter().position(|r| r.rid == rid) {
            Some(i) if rid.is_some() => {
                let run = &mut self.open_runs[i];
                run.timeout = (now + allowed).min(run.started + RUN_OPEN_LONGEST);
                return;
            }
            Some(i) => {
                self.open_runs.remove(i);
            }
            None => {}
        }
        if self.open_runs.len() >= OPEN_RUNS_MAX {
            let oldest = self.open_runs.remove(0);
            self.last_run = Some(MLastRun {
                duration: Some(now - oldest.started),
                timed_out: true,
            });
        }
        self.open_runs.push(MRun {
            rid,
            started: now,
            timeout: now + allowed,
        });
        if self.pause.is_none() && self.status != St::Pending {
            let pending = self.deadline;
            self.anchor = Some(now);
            self.misses = 0;
            self.learn(now);
            self.deadline = Some(self.due_after_run(pending, now));
        }
    }

    fn learn(&mut self, at: i64) {
        if self.cron.is_some() {
            return; // smart alerts are for intervals
        }
        let period = self.iv.period(at);
        self.offsets.push_back(at - period.start);
        while self.offsets.len() > OFFSETS_KEPT {
            self.offsets.pop_front();
        }
    }

    fn resume(&mut self, at: i64) {
        let Some(pause) = self.pause.take() else {
            return;
        };
        self.status = if pause.success_seen {
            St::Healthy
        } else {
            pause.resume
        };
        self.anchor = Some(at);
        self.deadline = Some(self.due_after(at));
    }

    /// Brings it up to `now`: timed resumes and one missing per passed due point.
    fn advance(&mut self, now: i64) {
        self.advance_at_most(now, usize::MAX);
    }

    /// [`Model::advance`], stopping early once the step holds `max_events` events.
    fn advance_at_most(&mut self, now: i64, max_events: usize) {
        // docs/rules.md#catch-up: due points passed one after another
        // in one step make one missing, for the latest, counting them.
        let mut run_open = false;
        while self.step_events.len() < max_events {
            // A run's timeout before the next deadline or pause end comes first.
            if let Some((index, _)) = self
                .first_timeout()
                .filter(|(_, at)| *at <= now && self.wake_for_deadline().is_none_or(|d| *at < d))
            {
                self.time_out(index);
                run_open = false;
                continue;
            }
            if let Some(pause) = &self.pause {
                match pause.until {
                    MUntil::At(t) if t <= now => {
                        self.resume(t);
                        run_open = false;
                        continue;
                    }
                    _ => return,
                }
            }
            match self.deadline {
                Some(d) if d <= now => {
                    // A deadline lies in (start, end] of the period it is due in; a
                    // schedule's next run is due after a miss.
                    let next = match &self.cron {
                        Some(c) => c.next_after(d - c.grace) + c.grace,
                        None => self.due(self.iv.next(self.iv.period(d - 1))),
                    };
                    self.misses += 1;
                    if self.misses <= u32::from(self.missed_tolerance) {
                        // A tolerated miss: the next period is due, nothing said.
                        self.deadline = Some(next);
                        continue;
                    }
                    let previous = self.status;
                    self.status = St::Failed;
                    match self.step_events.last_mut() {
                        Some(run) if run_open => {
                            run.at = d;
                            run.missed += 1;
                        }
                        _ => {
                            self.emit(Kind::Missing, d, previous, None);
                            if let Some(event) = self.step_events.last_mut() {
                                event.missed = 1;
                            }
                        }
                    }
                    run_open = true;
                    self.deadline = Some(next);
                }
                _ => return,
            }
        }
    }

    fn check_in(&mut self, now: i64, success: bool, error_notices: bool, rid: Option<u8>) {
        self.advance(now);
        // The end of a run (docs/rules.md#runs): its start already counted, so the
        // deadline counts from it, and only when there is none yet.
        let index = match rid {
            Some(_) => self.open_runs.iter().position(|r| r.rid == rid),
            None => self.open_runs.iter().rposition(|r| r.rid.is_none()),
        };
        let started = index.map(|i| self.open_runs.remove(i).started);
        if started.is_some() || rid.is_some() {
            self.last_run = Some(MLastRun {
                duration: started.map(|s| now - s),
                timed_out: false,
            });
        }
        let pending = self.deadline;
        let deadline_after = |m: &Model| match (started, pending) {
            (Some(_), Some(d)) => d,
            (Some(s), None) => m.due_after_run(None, s),
            (None, _) => m.due_after_run(pending, now),
        };
        match started {
            None => {
                self.learn(now);
                self.anchor = Some(now);
            }
            Some(s) if self.anchor.is_none() => self.anchor = Some(s),
            Some(_) => {}
        }
        if success {
            self.checked_in_at = Some(now);
        }
        // docs/rules.md#check-in-transitions: without error notices an error counts as a
        // success (except that checked_in_at holds only successful check-ins). That holds
        // while paused too: it ends an `until: healthy` pause, and makes an unpause resume
        // as healthy.
        let counts_as_success = success || !error_notices;
        if let Some(pause) = &mut self.pause {
            if !counts_as_success {
                // An error (with error notices) while paused is recorded and changes
                // nothing: no status change, no event.
                return;
            }
            if pause.until != MUntil::Healthy {
                pause.success_seen = true;
                return;
            }
            self.pause = None;
        }
        // A run came: the misses in a row end, a success ends the failures too; a failure
        // within the tolerance says nothing (but a pending snitch's first run always does).
        self.misses = 0;
        if counts_as_success {
            self.failures = 0;
        } else {
            self.failures += 1;
        }
        let tolerated = !counts_as_success
            && self.status != St::Pending
            && self.failures <= u32::from(self.failure_tolerance);
        let previous = self.status;
        if tolerated {
            self.deadline = Some(deadline_after(self));
            return;
        }
        if counts_as_success {
            self.status = St::Healthy;
            // docs/rules.md#alert-economy: a recovery from an error is announced only if
            // the error was, and at most once per period; recoveries from anything else
            // always are.
            let announce = match previous {
                St::Healthy => false,
                St::Errored => {
                    self.error_announced
                        && !self
                            .last_recovery_alert
                            .is_some_and(|r| self.same_period(r, now))
                }
                _ => true,
            };
            if announce {
                if previous == St::Errored {
                    self.last_recovery_alert = Some(now);
                }
                self.emit(Kind::Reporting, now, previous, Some((now, success)));
            }
        } else {
            self.status = St::Errored;
            // At most one errored alert per period: none if one was already emitted in the
            // period (of the current interval) that contains now, even when the interval
            // changed since.
            let alerted = self
                .last_errored_alert
                .is_some_and(|e| self.same_period(e, now));
            if !alerted {
                self.last_errored_alert = Some(now);
                self.error_announced = true;
                self.emit(Kind::Errored, now, previous, Some((now, success)));
            } else if previous != St::Errored {
                self.error_announced = false;
            }
        }
        self.deadline = Some(deadline_after(self));
    }

    /// `Err(attribute)` when refused; a refused operation changes nothing.
    fn pause(&mut self, now: i64, until: MUntil) -> Result<(), &'static str> {
        if let MUntil::At(t) = until {
            if t <= now {
                return Err("until");
            }
        }
        if self.status == St::Pending {
            return Err("status");
        }
        self.advance(now);
        if let Some(pause) = &mut self.pause {
            pause.until = until;
            return Ok(());
        }
        let previous = self.status;
        self.pause = Some(MPause {
            until,
            resume: previous,
            success_seen: false,
        });
        self.status = St::Paused;
        self.deadline = None;
        self.emit(Kind::Paused, now, previous, None);
        Ok(())
    }

    fn unpause(&mut self, now: i64) {
        self.advance(now);
        if self.pause.is_some() {
            self.resume(now);
        }
    }

    fn update(
        &mut self,
        now: i64,
        cadence: (Option<Iv>, Option<(usize, usize, usize)>),
        smart: Option<bool>,
        tolerances: (Option<u16>, Option<u16>),
    ) -> Result<(), &'static str> {
        let (iv, cron) = cadence;
        // An interval makes it an interval snitch; a schedule a cron one; neither keeps it.
        let new_iv = iv.unwrap_or(self.iv);
        let new_cron = match (iv, cron) {
            (_, Some(which)) => Some(which),
            (Some(_), None) => None,
            (None, None) => self.cron.as_ref().map(|c| c.which),
        };
        let new_smart = smart.unwrap_or(self.smart);
        if new_smart && (new_cron.is_some() || new_iv.sub_hourly()) {
            return Err("alert_type");
        }
        self.advance(now);
        self.failure_tolerance = tolerances.0.unwrap_or(self.failure_tolerance);
        self.missed_tolerance = tolerances.1.unwrap_or(self.missed_tolerance);
        let old_cron = self.cron.as_ref().map(|c| c.which);
        let iv_changed = new_cron != old_cron || (new_cron.is_none() && new_iv != self.iv);
        let alert_changed = new_smart != self.smart;
        self.iv = new_iv;
        self.cron = new_cron.map(CronModel::new);
        self.smart = new_smart;
        if iv_changed {
            self.offsets.clear();
        }
        if !(iv_changed || alert_changed) || self.pause.is_some() {
            return Ok(());
        }
        let Some(anchor) = self.anchor else {
            return Ok(()); // pending
        };
        if let Some(c) = &self.cron {
            // docs/rules.md#expected-runs: from now on, the first run after the change.
            self.deadline = Some(c.next_after(now) + c.grace);
            return Ok(());
        }
        let mut p = self.iv.next(self.iv.period(anchor));
        if self.status == St::Failed {
            let current = self.iv.period(now);
            if current.start > p.start {
                p = current;
            }
            while self.due(p) <= now {
                p = self.iv.next(p);
            }
        }
        self.deadline = Some(self.due(p));
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// Operations.

#[derive(Clone, Copy, Debug)]
enum Jump {
    Millis(i64),
    Seconds(i64),
    Minutes(i64),
    Hours(i64),
    Days(i64),
    /// To the end of the current period of `iv`, `periods` periods further, ± `nudge` ms.
    Boundary {
        iv: Iv,
        periods: u8,
        nudge: i64,
    },
    /// To the wake-up time (deadline or end of a timed pause) of a snitch, ± `nudge` ms.
    ToWake {
        who: Index,
        nudge: i64,
    },
    /// Into the next period of a snitch's interval, `permille` of its length after its start.
    IntoNextPeriod {
        who: Index,
        permille: i64,
    },
}

#[derive(Clone, Copy, Debug)]
enum UntilGen {
    /// No `until` given (means healthy).
    Absent,
    Healthy,
    Unpaused,
    /// `now + ms` (zero or negative: invalid).
    In(i64),
    /// The end of the current period of `iv`, `periods` further, ± `nudge` ms.
    Boundary {
        iv: Iv,
        periods: u8,
        nudge: i64,
    },
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Create {
        second_case: bool,
        iv: Iv,
        smart: bool,
        tolerances: (u16, u16),
        /// A maximum runtime in minutes.
        max_runtime: Option<u16>,
        /// A schedule in place of the interval: indices into SCHEDULES, GRACES, EARLIES.
        cron: Option<(usize, usize, usize)>,
    },
    CheckIn {
        who: Index,
        success: bool,
        /// The run it ends, by id (docs/rules.md#runs).
        rid: Option<u8>,
    },
    /// A run starts (`/start`), with a run id or without.
    Start {
        who: Index,
        rid: Option<u8>,
    },
    CheckInUnknown,
    Jump {
        jump: Jump,
        sub_ms_nanos: u32,
    },
    Pause {
        who: Index,
        until: UntilGen,
        plus_two_hours_offset: bool,
    },
    Unpause {
        who: Index,
    },
    Update {
        who: Index,
        iv: Option<Iv>,
        cron: Option<(usize, usize, usize)>,
        smart: Option<bool>,
        tolerances: (Option<u16>, Option<u16>),
    },
    Delete {
        who: Index,
    },
    /// A job that runs once a period, `runs` times, at a drifting time of its period: one
    /// jump into the next period and one check-in per run (every `error_every`-th an error,
    /// when nonzero). Exercises the learning of smart alerts.
    Routine {
        who: Index,
        runs: u8,
        base_permille: i64,
        drift_permille: i64,
        error_every: u8,
    },
}

impl Op {
    /// The primitive operations of a routine; other operations as they are.
    fn expand(self) -> Vec<Op> {
        let Op::Routine {
            who,
            runs,
            base_permille,
            drift_permille,
            error_every,
        } = self
        else {
            return vec![self];
        };
        (0..runs)
            .flat_map(|run| {
                let permille = (base_permille + i64::from(run) * drift_permille).clamp(0, 999);
                let success = error_every == 0 || (run + 1) % error_every != 0;
                [
                    Op::Jump {
                        jump: Jump::IntoNextPeriod { who, permille },
                        sub_ms_nanos: 0,
                    },
                    Op::CheckIn {
                        who,
                        success,
                        rid: None,
                    },
                ]
            })
            .collect()
    }
}

fn iv_strategy() -> impl Strategy<Value = Iv> {
    proptest::sample::select(IVS.to_vec())
}

fn nudge() -> impl Strategy<Value = i64> {
    prop_oneof![2 => Just(0i64), 1 => Just(-1i64), 1 => Just(1i64)]
}

/// Tolerances: mostly none, else a few runs of either kind.
fn tolerances_strategy() -> impl Strategy<Value = (u16, u16)> {
    prop_oneof![3 => Just((0u16, 0u16)), 2 => (0u16..=3, 0u16..=3)]
}

/// A run id: mostly none, else one of a few (so that ends find their starts and starts
/// repeat as keep-alives).
fn rid_strategy() -> impl Strategy<Value = Option<u8>> {
    prop_oneof![3 => Just(None), 2 => (0u8..3).prop_map(Some)]
}

fn cron_strategy() -> impl Strategy<Value = (usize, usize, usize)> {
    (0..SCHEDULES.len(), 0..GRACES.len(), 0..EARLIES.len())
}

fn create_strategy() -> impl Strategy<Value = Op> {
    (
        proptest::bool::weighted(0.3),
        iv_strategy(),
        proptest::bool::weighted(0.4),
        tolerances_strategy(),
        proptest::option::weighted(0.4, 1u16..=240),
        proptest::option::weighted(0.3, cron_strategy()),
    )
        .prop_map(
            |(second_case, iv, smart, tolerances, max_runtime, cron)| Op::Create {
                second_case,
                iv,
                smart,
                tolerances,
                max_runtime,
                cron,
            },
        )
}

fn jump_strategy() -> impl Strategy<Value = Jump> {
    prop_oneof![
        2 => (1i64..1_000).prop_map(Jump::Millis),
        2 => (1i64..=600).prop_map(Jump::Seconds),
        3 => (1i64..=180).prop_map(Jump::Minutes),
        3 => (1i64..=48).prop_map(Jump::Hours),
        2 => (1i64..=70).prop_map(Jump::Days),
        4 => (iv_strategy(), 0u8..3, nudge())
            .prop_map(|(iv, periods, nudge)| Jump::Boundary { iv, periods, nudge }),
        4 => (any::<Index>(), nudge()).prop_map(|(who, nudge)| Jump::ToWake { who, nudge }),
    ]
}

fn until_strategy() -> impl Strategy<Value = UntilGen> {
    prop_oneof![
        2 => Just(UntilGen::Absent),
        2 => Just(UntilGen::Healthy),
        3 => Just(UntilGen::Unpaused),
        3 => (1i64..=3 * DAY).prop_map(UntilGen::In),
        1 => (-HOUR..=0).prop_map(UntilGen::In),
        2 => (iv_strategy(), 0u8..3, nudge())
            .prop_map(|(iv, periods, nudge)| UntilGen::Boundary { iv, periods, nudge }),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => create_strategy(),
        6 => (any::<Index>(), rid_strategy()).prop_map(|(who, rid)| Op::CheckIn { who, success: true, rid }),
        3 => (any::<Index>(), rid_strategy()).prop_map(|(who, rid)| Op::CheckIn { who, success: false, rid }),
        4 => (any::<Index>(), rid_strategy()).prop_map(|(who, rid)| Op::Start { who, rid }),
        1 => Just(Op::CheckInUnknown),
        9 => (jump_strategy(), prop_oneof![Just(0u32), 0u32..1_000_000])
            .prop_map(|(jump, sub_ms_nanos)| Op::Jump { jump, sub_ms_nanos }),
        3 => (any::<Index>(), until_strategy(), proptest::bool::weighted(0.2)).prop_map(
            |(who, until, plus_two_hours_offset)| Op::Pause {
                who,
                until,
                plus_two_hours_offset,
            }
        ),
        2 => any::<Index>().prop_map(|who| Op::Unpause { who }),
        3 => (
            any::<Index>(),
            prop_oneof![
                2 => iv_strategy().prop_map(|iv| (Some(iv), None, None)),
                2 => any::<bool>().prop_map(|smart| (None, None, Some(smart))),
                1 => (iv_strategy(), any::<bool>()).prop_map(|(iv, s)| (Some(iv), None, Some(s))),
                2 => cron_strategy().prop_map(|c| (None, Some(c), None)),
            ],
            proptest::option::weighted(0.2, tolerances_strategy()),
        )
            .prop_map(|(who, (iv, cron, smart), tolerances)| Op::Update {
                who,
                iv,
                cron,
                smart,
                tolerances: tolerances.map_or((None, None), |(f, m)| (Some(f), Some(m))),
            }),
        1 => any::<Index>().prop_map(|who| Op::Delete { who }),
        2 => (
            any::<Index>(),
            3u8..=12,
            0i64..1_000,
            -80i64..=80,
            prop_oneof![3 => Just(0u8), 1 => 2u8..=4],
        )
            .prop_map(|(who, runs, base_permille, drift_permille, error_every)| Op::Routine {
                who,
                runs,
                base_permille,
                drift_permille,
                error_every,
            }),
    ]
}

// ---------------------------------------------------------------------------------------
// The harness: the service and the model side by side.

/// One snitch the test created, with its model and what was observed of the service.
struct Tracked {
    token: String,
    case: usize,
    deleted: bool,
    model: Model,
    /// Whether the service ever emitted `snitch.missing` for it.
    seen_missing: bool,
    /// The service's status after the previous step.
    last_status: Status,
    /// The sequence number of the newest event the service had after the previous step.
    last_seq: u64,
}

struct World {
    service: SnitchService,
    storage: Arc<dyn Storage>,
    clock: Arc<ManualClock>,
    /// Case 0 has error notices, case 1 has not.
    cases: Vec<Case>,
    now: i64,
    snitches: Vec<Tracked>,
    log: Vec<String>,
}

/// The API fields of the model's schedule `which`.
fn schedule_fields(fields: &mut SnitchFields, which: (usize, usize, usize)) {
    let (expr, zone) = SCHEDULES[which.0];
    fields.schedule = Some(expr.to_owned());
    fields.timezone = Some(zone.to_owned());
    fields.grace_seconds = Some(GRACES[which.1] / SEC);
    fields.early_seconds = Some(EARLIES[which.2] / SEC);
}

fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

fn whole_ms(t: Option<DateTime<Utc>>) -> bool {
    match t {
        Some(t) => t.timestamp_subsec_nanos() % 1_000_000 == 0,
        None => true,
    }
}

fn expect_not_found<T: fmt::Debug>(res: Result<T, ServiceError>) -> Result<(), String> {
    match res {
        Err(ServiceError::NotFound) => Ok(()),
        other => Err(format!("expected NotFound, got {other:?}")),
    }
}

fn expect_invalid<T: fmt::Debug>(
    res: Result<T, ServiceError>,
    attributes: &[&str],
) -> Result<(), String> {
    match res {
        Err(ServiceError::Invalid(v))
            if v.iter().any(|p| attributes.contains(&p.attribute.as_str())) =>
        {
            Ok(())
        }
        other => Err(format!("expected Invalid on {attributes:?}, got {other:?}")),
    }
}

/// The sequence number of an event id `<token>-<n>` (the documented id format).
fn seq_of(event: &Event, token: &str) -> Result<u64, String> {
    event
        .id
        .strip_prefix(token)
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("event id {:?} is not {token}-<n>", event.id))
}

fn describe_event(e: &Event) -> String {
    format!(
        "{} at {} {:?}->{:?} check_in={:?}",
        e.kind.as_str(),
        iso(ms(e.at)),
        e.previous_status,
        e.status,
        e.check_in
            .as_ref()
            .map(|c| (iso(ms(c.at)), c.outcome.is_success()))
    )
}

fn describe_model(m: &Model) -> String {
    format!(
        "model: {} {} status={:?} checked_in_at={} anchor={} deadline={} offsets={:?} pause={:?} tolerances={}/{} in a row={}/{}",
        m.cadence_name(),
        if m.smart { "smart" } else { "basic" },
        m.status,
        iso_opt(m.checked_in_at),
        iso_opt(m.anchor),
        iso_opt(m.deadline),
        m.offsets,
        m.pause,
        m.failure_tolerance,
        m.missed_tolerance,
        m.failures,
        m.misses
    )
}

fn describe_real(s: &Snitch) -> String {
    format!(
        "service: {} {} status={} checked_in_at={} deadline={} offsets={:?} pause={:?} tolerances={}/{} in a row={}/{}",
        s.cadence().name(),
        s.alert_type().as_str(),
        s.state().status(),
        iso_opt(s.state().checked_in_at().map(ms)),
        iso_opt(s.state().deadline_at().map(ms)),
        s.state().smart_offsets_ms(),
        s.state().pause(),
        s.failure_tolerance(),
        s.missed_tolerance(),
        s.state().consecutive_failures(),
        s.state().consecutive_misses()
    )
}

impl World {
    async fn new(storage: Arc<dyn Storage>) -> World {
        let clock = Arc::new(ManualClock::new(to_ts(start_ms())));
        let service = SnitchService::with_tokens(
            storage.clone(),
            clock.clone(),
            Arc::new(SequentialTokens::default()),
        )
        // Time jumps here are the model's, not our downtime: outages are tests/outages.rs's.
        .with_outage_threshold(chrono::Duration::days(36_500));
        let mut cases = Vec::new();
        for (name, error_notices) in [("notices", true), ("no-notices", false)] {
            let mut case = Case::new(CaseId::parse(name).expect("valid case id"));
            case.plan.error_notices = error_notices;
            storage.upsert_case(&case).await.expect("store the case");
            cases.push(case);
        }
        World {
            service,
            storage,
            clock,
            cases,
            now: start_ms(),
            snitches: Vec::new(),
            log: Vec::new(),
        }
    }

    fn pick(&self, who: &Index) -> Option<usize> {
        (!self.snitches.is_empty()).then(|| who.index(self.snitches.len()))
    }

    fn live(&self) -> impl Iterator<Item = &Tracked> {
        self.snitches.iter().filter(|t| !t.deleted)
    }

    /// The instant a jump goes to, before capping.
    fn jump_target(&self, jump: &Jump) -> i64 {
        let now = self.now;
        let boundary = |iv: Iv, periods: u8, nudge: i64| {
            let mut p = iv.period(now);
            for _ in 0..periods {
                p = iv.next(p);
            }
            p.end + nudge
        };
        let target = match *jump {
            Jump::Millis(n) => now + n,
            Jump::Seconds(n) => now + n * SEC,
            Jump::Minutes(n) => now + n * MIN,
            Jump::Hours(n) => now + n * HOUR,
            Jump::Days(n) => now + n * DAY,
            Jump::Boundary { iv, periods, nudge } => boundary(iv, periods, nudge),
            Jump::ToWake { who, nudge } => match self.pick(&who).map(|i| &self.snitches[i]) {
                Some(t) if !t.deleted => match t.model.wake() {
                    Some(w) => w + nudge,
                    None => boundary(t.model.iv, 0, nudge),
                },
                _ => now + MIN,
            },
            Jump::IntoNextPeriod { who, permille } => {
                match self.pick(&who).map(|i| &self.snitches[i]) {
                    Some(t) if !t.deleted => {
                        let iv = t.model.iv;
                        let p = iv.next(iv.period(now));
                        p.start + (p.end - p.start) / 1_000 * permille
                    }
                    _ => now + MIN,
                }
            }
        };
        target.max(now)
    }

    /// Whether the live snitches would emit more than [`MAX_MISSING_PER_JUMP`] missing
    /// events in all if time went to `to`.
    fn too_many_missing_until(&self, to: i64) -> bool {
        let mut budget = MAX_MISSING_PER_JUMP + 1;
        for t in self.live() {
            let mut m = t.model.clone();
            m.step_events.clear();
            m.advance_at_most(to, budget);
            budget -= m.step_events.len();
            if budget == 0 {
                return true;
            }
        }
        false
    }

    fn until_instant(&self, until: &UntilGen) -> Option<i64> {
        let now = self.now;
        match *until {
            UntilGen::Absent | UntilGen::Healthy | UntilGen::Unpaused => None,
            UntilGen::In(d) => Some(now + d),
            UntilGen::Boundary { iv, periods, nudge } => {
                let mut p = iv.period(now);
                for _ in 0..periods {
                    p = iv.next(p);
                }
                Some(p.end + nudge)
            }
        }
    }

    async fn step(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Create {
                second_case,
                iv,
                smart,
                tolerances,
                max_runtime,
                cron,
            } => {
                let case = usize::from(second_case);
                let mut fields = SnitchFields {
                    name: Some("nightly job".to_owned()),
                    interval: Some(iv.name().to_owned()),
                    alert_type: Some(if smart { "smart" } else { "basic" }.to_owned()),
                    failure_tolerance: Some(i64::from(tolerances.0)),
                    missed_tolerance: Some(i64::from(tolerances.1)),
                    max_runtime_seconds: max_runtime.map(|m| i64::from(m) * 60),
                    ..SnitchFields::default()
                };
                if let Some(which) = cron {
                    fields.interval = None;
                    schedule_fields(&mut fields, which);
                }
                let res = self.service.create(&self.cases[case], &fields).await;
                if smart && (iv.sub_hourly() || cron.is_some()) {
                    return expect_invalid(res, &["alert_type"]);
                }
                let s = res.map_err(|e| format!("create failed: {e:?}"))?;
                self.log.push(format!("    -> created {}", s.token()));
                self.snitches.push(Tracked {
                    token: s.token().as_str().to_owned(),
                    case,
                    deleted: false,
                    model: Model {
                        cron: cron.map(CronModel::new),
                        ..Model::new(
                            iv,
                            smart,
                            tolerances,
                            max_runtime.map(|m| i64::from(m) * MIN),
                        )
                    },
                    seen_missing: false,
                    last_status: Status::Pending,
                    last_seq: 0,
                });
            }
            Op::CheckIn { who, success, rid } => {
                let Some(i) = self.pick(&who) else {
                    return Ok(());
                };
                let outcome = if success {
                    Outcome::Success
                } else {
                    Outcome::Error {
                        exit_status: "1".to_owned(),
                    }
                };
                let report = CheckIn::new(self.clock.now(), outcome, None)
                    .with_run_id(rid.and_then(|n| RunId::parse(&format!("r{n}"))));
                let res = self.report(i, report).await;
                let error_notices = self.cases[self.snitches[i].case].plan.error_notices;
                let now = self.now;
                let t = &mut self.snitches[i];
                if t.deleted {
                    return expect_not_found(res);
                }
                res.map_err(|e| format!("check-in failed: {e:?}"))?;
                t.model.check_in(now, success, error_notices, rid);
            }
            Op::Start { who, rid } => {
                let Some(i) = self.pick(&who) else {
                    return Ok(());
                };
                let report = CheckIn::new(self.clock.now(), Outcome::Success, None)
                    .with_kind(CheckInKind::Start)
                    .with_run_id(rid.and_then(|n| RunId::parse(&format!("r{n}"))));
                let res = self.report(i, report).await;
                let now = self.now;
                let t = &mut self.snitches[i];
                if t.deleted {
                    return expect_not_found(res);
                }
                res.map_err(|e| format!("start failed: {e:?}"))?;
                t.model.start(now, rid);
            }
            Op::CheckInUnknown => {
                let res = self
                    .service
                    .check_in("zzzzzzzzzzzzzzzzzzzz", Outcome::Success, None)
                    .await;
                return expect_not_found(res);
            }
            Op::Jump { jump, sub_ms_nanos } => {
                let mut target = self.jump_target(&jump);
                while target > self.now && self.too_many_missing_until(target) {
                    target = self.now + (target - self.now) / 2;
                }
                self.now = target;
                self.clock
                    .set(to_ts(target) + Duration::nanoseconds(i64::from(sub_ms_nanos)));
                self.log.push(format!("    -> now {}", iso(target)));
                let report = self
                    .service
                    .tick(self.clock.now())
                    .await
                    .map_err(|e| format!("tick failed: {e:?}"))?;
                let now = self.now;
                let mut expected = 0;
                for t in self.snitches.iter_mut().filter(|t| !t.deleted) {
                    t.model.advance(now);
                    expected += t.model.step_events.len();
                }
                if report.events != expected {
                    return Err(format!(
                        "tick reported {} events, the model {expected}",
                        report.events
                    ));
                }
            }
            Op::Pause {
                who,
                until,
                plus_two_hours_offset,
            } => {
                let Some(i) = self.pick(&who) else {
                    return Ok(());
                };
                let at = self.until_instant(&until);
                let raw = match (until, at) {
                    (UntilGen::Absent, _) => None,
                    (UntilGen::Healthy, _) => Some("healthy".to_owned()),
                    (UntilGen::Unpaused, _) => Some("unpaused".to_owned()),
                    (_, Some(at)) if plus_two_hours_offset => Some(
                        to_ts(at)
                            .with_timezone(&FixedOffset::east_opt(2 * 3600).expect("offset"))
                            .to_rfc3339_opts(SecondsFormat::Millis, false),
                    ),
                    (_, Some(at)) => Some(iso(at)),
                    (_, None) => unreachable!("timestamps have an instant"),
                };
                let m_until = match (until, at) {
                    (UntilGen::Absent | UntilGen::Healthy, _) => MUntil::Healthy,
                    (UntilGen::Unpaused, _) => MUntil::Unpaused,
                    (_, Some(at)) => MUntil::At(at),
                    (_, None) => unreachable!("timestamps have an instant"),
                };
                self.log.push(format!("    -> until {raw:?}"));
                let t = &self.snitches[i];
                let res = self
                    .service
                    .pause(&self.cases[t.case], &t.token, raw.as_deref())
                    .await;
                let now = self.now;
                let t = &mut self.snitches[i];
                if t.deleted {
                    return expect_not_found(res);
                }
                let invalid_until = matches!(m_until, MUntil::At(at) if at <= now);
                match t.model.pause(now, m_until) {
                    Ok(()) => res.map_err(|e| format!("pause failed: {e:?}"))?,
                    // A pending snitch with an invalid `until`: either problem may be named.
                    Err(_) if invalid_until => expect_invalid(res, &["until", "status"])?,
                    Err(attribute) => expect_invalid(res, &[attribute])?,
                }
            }
            Op::Unpause { who } => {
                let Some(i) = self.pick(&who) else {
                    return Ok(());
                };
                let t = &self.snitches[i];
                let res = self.service.unpause(&self.cases[t.case], &t.token).await;
                let now = self.now;
                let t = &mut self.snitches[i];
                if t.deleted {
                    return expect_not_found(res);
                }
                res.map_err(|e| format!("unpause failed: {e:?}"))?;
                t.model.unpause(now);
            }
            Op::Update {
                who,
                iv,
                cron,
                smart,
                tolerances,
            } => {
                let Some(i) = self.pick(&who) else {
                    return Ok(());
                };
                let mut fields = SnitchFields {
                    interval: iv.map(|iv| iv.name().to_owned()),
                    alert_type: smart.map(|s| if s { "smart" } else { "basic" }.to_owned()),
                    failure_tolerance: tolerances.0.map(i64::from),
                    missed_tolerance: tolerances.1.map(i64::from),
                    ..SnitchFields::default()
                };
                if let Some(which) = cron {
                    schedule_fields(&mut fields, which);
                }
                let t = &self.snitches[i];
                let res = self
                    .service
                    .update(&self.cases[t.case], &t.token, &fields)
                    .await;
                let now = self.now;
                let t = &mut self.snitches[i];
                if t.deleted {
                    return expect_not_found(res);
                }
                match t.model.update(now, (iv, cron), smart, tolerances) {
                    Ok(()) => {
                        res.map_err(|e| format!("update failed: {e:?}"))?;
                    }
                    Err(attribute) => expect_invalid(res, &[attribute])?,
                }
            }
            Op::Delete { who } => {
                let Some(i) = self.pick(&who) else {
                    return Ok(());
                };
                let t = &self.snitches[i];
                let res = self.service.delete(&self.cases[t.case], &t.token).await;
                let t = &mut self.snitches[i];
                if t.deleted {
                    return expect_not_found(res);
                }
                res.map_err(|e| format!("delete failed: {e:?}"))?;
                t.deleted = true;
            }
            Op::Routine { .. } => unreachable!("routines are expanded before they run"),
        }
        Ok(())
    }

    /// A check-in of any kind of snitch `i`, as the check-in endpoint makes it.
    async fn report(&self, i: usize, report: CheckIn) -> Result<Snitch, ServiceError> {
        let token = Token::parse(&self.snitches[i].token).map_err(|_| ServiceError::NotFound)?;
        self.service.report(token, report).await
    }

    /// Compares every snitch with its model, and the events of the step just done.
    async fn check(&mut self) -> Result<(), String> {
        for t in &mut self.snitches {
            let case = &self.cases[t.case];
            if t.deleted {
                expect_not_found(self.service.get(case, &t.token).await)
                    .map_err(|e| format!("{}: deleted, but get: {e}", t.token))?;
                expect_not_found(self.service.events(case, &t.token, 1).await)
                    .map_err(|e| format!("{}: deleted, but events: {e}", t.token))?;
                continue;
            }
            let s = self
                .service
                .get(case, &t.token)
                .await
                .map_err(|e| format!("{}: get failed: {e:?}", t.token))?;
            let m = &t.model;
            let state = || {
                format!(
                    "{}\n  {}\n  {}",
                    t.token,
                    describe_real(&s),
                    describe_model(m)
                )
            };
            if s.cadence().name() != m.cadence_name()
                || (s.alert_type() == AlertType::Smart) != m.smart
            {
                return Err(format!("configuration differs: {}", state()));
            }
            if s.state().status() != m.status.real() {
                return Err(format!("status differs: {}", state()));
            }
            if (s.failure_tolerance(), s.missed_tolerance())
                != (m.failure_tolerance, m.missed_tolerance)
                || (
                    s.state().consecutive_failures(),
                    s.state().consecutive_misses(),
                ) != (m.failures, m.misses)
            {
                return Err(format!("tolerances or runs in a row differ: {}", state()));
            }
            if s.state().checked_in_at().map(ms) != m.checked_in_at {
                return Err(format!("checked_in_at differs: {}", state()));
            }
            if s.state().deadline_at().map(ms) != m.deadline {
                return Err(format!("deadline differs: {}", state()));
            }
            let open: Vec<(i64, i64)> = s
                .state()
                .open_runs()
                .iter()
                .map(|r| (ms(r.started_at), ms(r.timeout_at)))
                .collect();
            let model_open: Vec<(i64, i64)> =
                m.open_runs.iter().map(|r| (r.started, r.timeout)).collect();
            let last_run = s.state().last_run().map(|r| MLastRun {
                duration: r.duration_ms.and_then(|d| i64::try_from(d).ok()),
                timed_out: r.timed_out,
            });
            if open != model_open || last_run != m.last_run {
                return Err(format!(
                    "runs differ: service open {open:?} last {last_run:?}, model open {model_open:?} last {:?}: {}",
                    m.last_run,
                    state()
                ));
            }
            if !whole_ms(s.state().checked_in_at()) || !whole_ms(s.state().deadline_at()) {
                return Err(format!("times are not whole milliseconds: {}", state()));
            }

            // The events of this step: the newest `new` of the service's events.
            let new = m.step_events.len();
            let limit = (new + 1).min(EVENTS_KEPT);
            let events = self
                .service
                .events(case, &t.token, limit)
                .await
                .map_err(|e| format!("{}: events failed: {e:?}", t.token))?;
            let newest_seq = match events.first() {
                Some(e) => seq_of(e, &t.token)?,
                None => 0,
            };
            let service_new = newest_seq.saturating_sub(t.last_seq);
            if newest_seq != m.events || service_new != new as u64 {
                let got: Vec<String> = events.iter().rev().map(describe_event).collect();
                let want: Vec<String> = m.step_events.iter().map(ToString::to_string).collect();
                return Err(format!(
                    "events differ: service emitted {service_new} (newest #{newest_seq}), model {new} (#{})\n  service (oldest first, last {limit}): {got:#?}\n  model (this step): {want:#?}\n  {}",
                    m.events,
                    state()
                ));
            }
            if events.len() as u64 != m.events.min(limit as u64) {
                return Err(format!(
                    "{}: {} events read with limit {limit}, {} emitted in all",
                    t.token,
                    events.len(),
                    m.events
                ));
            }
            for (i, (real, want)) in events.iter().zip(m.step_events.iter().rev()).enumerate() {
                let expected_id = format!("{}-{}", t.token, m.events - i as u64);
                let same = real.id == expected_id
                    && real.kind == want.kind.real()
                    && ms(real.at) == want.at
                    && real.status == want.status.real()
                    && real.previous_status == want.previous.real()
                    && real.missed_periods == want.missed
                    && real.token.as_str() == t.token
                    && real.case_id == case.id
                    && real
                        .check_in
                        .as_ref()
                        .map(|c| (ms(c.at), c.outcome.is_success()))
                        == want.check_in;
                if !same {
                    return Err(format!(
                        "event #{} differs:\n  service: {} (id {})\n  model:   {want}\n  {}",
                        m.events - i as u64,
                        describe_event(real),
                        real.id,
                        state()
                    ));
                }
            }

            // Invariants on what the service did, independent of the model.
            let step_real: Vec<&Event> = events.iter().take(service_new as usize).collect();
            for e in &step_real {
                if e.kind == EventKind::Missing {
                    // A pending snitch has no deadline to miss; only a run it started can
                    // time out (docs/rules.md#runs).
                    if e.previous_status == Status::Pending
                        && e.reason != Some(AlertReason::Timeout)
                    {
                        return Err(format!("a pending snitch went missing: {}", state()));
                    }
                    t.seen_missing = true;
                }
            }
            if s.state().status() == Status::Failed && !t.seen_missing {
                return Err(format!("failed without a missing event: {}", state()));
            }
            // A step that starts and ends paused emits nothing, unless a timed pause ended
            // during it and a pause operation paused it again (then the newest is
            // `snitch.paused`).
            if t.last_status == Status::Paused
                && s.state().status() == Status::Paused
                && step_real
                    .first()
                    .is_some_and(|e| e.kind != EventKind::Paused)
            {
                return Err(format!(
                    "a step that started and ended paused emitted events: {}",
                    state()
                ));
            }
            t.last_status = s.state().status();
            t.last_seq = newest_seq;
            t.model.step_events.clear();
        }
        let wake = self.live().filter_map(|t| t.model.wake()).min();
        let real_wake = self
            .storage
            .next_wake_at()
            .await
            .map_err(|e| format!("next_wake_at failed: {e:?}"))?;
        if real_wake.map(ms) != wake {
            return Err(format!(
                "next wake-up: store {}, model {}",
                iso_opt(real_wake.map(ms)),
                iso_opt(wake)
            ));
        }
        Ok(())
    }
}

async fn run(storage: Arc<dyn Storage>, ops: &[Op]) -> Result<(), String> {
    let mut world = World::new(storage).await;
    let ops: Vec<Op> = ops.iter().flat_map(|op| op.expand()).collect();
    for (n, op) in ops.iter().enumerate() {
        world
            .log
            .push(format!("{n:>3} @ {}: {op:?}", iso(world.now)));
        let outcome = match world.step(op).await {
            Ok(()) => world.check().await,
            Err(e) => Err(e),
        };
        if let Err(problem) = outcome {
            return Err(format!(
                "step {n} ({op:?}) at {}: {problem}\ntrace:\n{}",
                iso(world.now),
                world.log.join("\n")
            ));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Keep the source tree clean; a failure prints the minimal sequence instead.
        failure_persistence: None,
        ..ProptestConfig::with_cases(1000)
    })]

    #[test]
    fn service_agrees_with_the_reference_model(
        creates in proptest::collection::vec(create_strategy(), 1..=3),
        // Options, so that shrinking can drop operations below the minimum length.
        ops in proptest::collection::vec(proptest::option::weighted(0.98, op_strategy()), 20..=40),
    ) {
        let ops: Vec<Op> = creates.into_iter().chain(ops.into_iter().flatten()).collect();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a tokio runtime");
        let outcome = runtime.block_on(run(Arc::new(MemoryStorage::new()), &ops));
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}

// ---------------------------------------------------------------------------------------
// The same on PostgreSQL: one database for this test, emptied before each case.

/// The URL of a migrated database of this test process's own, which the proptest cases
/// share (each empties it first). Kept for the whole process: a static is never dropped,
/// so the next test process drops it (it is named after this process).
fn postgres_model_database() -> &'static str {
    static DATABASE: std::sync::OnceLock<snitch_store_postgres::test_databases::TestDatabase> =
        std::sync::OnceLock::new();
    &DATABASE
        .get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime")
                .block_on(snitch_store_postgres::test_databases::migrated(1))
        })
        .url
}

async fn empty_postgres_store(url: &str) -> Arc<dyn Storage> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(url)
        .await
        .expect("connect to the test database");
    sqlx::query(
        "TRUNCATE snitch.deliveries, snitch.events, snitch.check_ins, snitch.snitches, \
         snitch.webhooks, snitch.channels, snitch.badge_keys, snitch.api_keys, snitch.cases, \
         snitch.sweep_leases",
    )
    .execute(&pool)
    .await
    .expect("empty the test database");
    Arc::new(snitch::store::postgres::PgStorage::new(pool))
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(64)
    })]

    #[test]
    fn service_on_postgres_agrees_with_the_reference_model(
        creates in proptest::collection::vec(create_strategy(), 1..=3),
        ops in proptest::collection::vec(proptest::option::weighted(0.98, op_strategy()), 20..=40),
    ) {
        let ops: Vec<Op> = creates.into_iter().chain(ops.into_iter().flatten()).collect();
        let url = postgres_model_database();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let outcome = runtime.block_on(async { run(empty_postgres_store(url).await, &ops).await });
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}

// ---------------------------------------------------------------------------------------
// The same on SQLite: a fresh database file per case, as many cases as on PostgreSQL.

/// A store on a fresh database file, with the directory that holds it (removed when
/// dropped, so it must outlive the store).
async fn empty_sqlite_store() -> (Arc<dyn Storage>, tempfile::TempDir) {
    let dir = tempfile::Builder::new()
        .prefix("model-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory");
    let pool = snitch::store::sqlite::connect(&dir.path().join("snitch.db"), 2)
        .await
        .expect("open the test database");
    snitch::store::sqlite::MIGRATOR
        .run(&pool)
        .await
        .expect("migrate the test database");
    (
        Arc::new(snitch::store::sqlite::SqliteStorage::new(pool)),
        dir,
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(64)
    })]

    #[test]
    fn service_on_sqlite_agrees_with_the_reference_model(
        creates in proptest::collection::vec(create_strategy(), 1..=3),
        ops in proptest::collection::vec(proptest::option::weighted(0.98, op_strategy()), 20..=40),
    ) {
        let ops: Vec<Op> = creates.into_iter().chain(ops.into_iter().flatten()).collect();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let outcome = runtime.block_on(async {
            let (store, _dir) = empty_sqlite_store().await;
            run(store, &ops).await
        });
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}

// ---------------------------------------------------------------------------------------
// The model's own calendar, checked against chrono's.

#[test]
fn model_periods_follow_the_utc_calendar() {
    let at = |s: &str| {
        DateTime::parse_from_rfc3339(s)
            .expect("valid test time")
            .timestamp_millis()
    };
    let cases = [
        (
            Iv::Minute5,
            "2026-11-22T03:14:59.999Z",
            "2026-11-22T03:10:00Z",
            "2026-11-22T03:15:00Z",
        ),
        (
            Iv::Minute30,
            "2026-12-31T23:59:59.999Z",
            "2026-12-31T23:30:00Z",
            "2027-01-01T00:00:00Z",
        ),
        (
            Iv::Hour6,
            "2026-11-22T12:00:00Z",
            "2026-11-22T12:00:00Z",
            "2026-11-22T18:00:00Z",
        ),
        (
            Iv::Daily,
            "2028-02-29T12:00:00Z",
            "2028-02-29T00:00:00Z",
            "2028-03-01T00:00:00Z",
        ),
        (
            Iv::Weekly,
            "2026-11-22T23:59:59.999Z",
            "2026-11-16T00:00:00Z",
            "2026-11-23T00:00:00Z",
        ),
        (
            Iv::Weekly,
            "2026-11-23T00:00:00Z",
            "2026-11-23T00:00:00Z",
            "2026-11-30T00:00:00Z",
        ),
        (
            Iv::Weekly,
            "2027-01-01T08:00:00Z",
            "2026-12-28T00:00:00Z",
            "2027-01-04T00:00:00Z",
        ),
        (
            Iv::Monthly,
            "2028-02-29T23:59:59.999Z",
            "2028-02-01T00:00:00Z",
            "2028-03-01T00:00:00Z",
        ),
        (
            Iv::Monthly,
            "2026-12-31T23:59:59.999Z",
            "2026-12-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
        ),
        (
            Iv::Monthly,
            "2027-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
            "2027-02-01T00:00:00Z",
        ),
        (
            Iv::Monthly,
            "2100-03-01T00:00:00Z",
            "2100-03-01T00:00:00Z",
            "2100-04-01T00:00:00Z",
        ),
    ];
    for (iv, t, start, end) in cases {
        assert_eq!(
            iv.period(at(t)),
            Per {
                start: at(start),
                end: at(end)
            },
            "{} at {t}",
            iv.name()
        );
    }
}

proptest! {
    #[test]
    fn model_periods_contain_their_instant_and_align(t in 0i64..5_000_000_000_000) {
        use chrono::{Datelike, Timelike, Weekday};
        for iv in IVS {
            let p = iv.period(t);
            prop_assert!(p.start <= t && t < p.end);
            prop_assert_eq!(iv.next(p).start, p.end);
            let start = to_ts(p.start);
            let midnight = start.hour() == 0 && start.minute() == 0;
            prop_assert_eq!(start.second(), 0);
            prop_assert_eq!(start.timestamp_subsec_nanos(), 0);
            match iv {
                Iv::Weekly => prop_assert!(midnight && start.weekday() == Weekday::Mon),
                Iv::Monthly => prop_assert!(midnight && start.day() == 1),
                _ => {}
            }
        }
    }
}
