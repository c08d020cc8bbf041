//! The state machine (docs/rules.md#state-machine, #smart-alerts), as pure functions.
//!
//! Each step takes a snitch and the instant it happens at and returns the new snitch and
//! the events it emits. Nothing here reads a clock or touches storage; the service loads,
//! steps and saves.
//!
//! Deadlines: a snitch whose last check-in (or resume) fell in period P is due in period
//! P+1, at the *due point* of that period: its end for `basic`, or the learned point of
//! `docs/rules.md#smart-alerts` for `smart`. When a due point passes with no check-in the
//! snitch is missing, and it becomes due in the following period, so a snitch that stays
//! silent emits one `snitch.missing` per period.

use chrono::Duration;

use crate::cadence::{or_horizon, Cadence};
use crate::calendar::{Interval, Period, Timestamp};
use crate::liveness::Outage;
use crate::runs::{AlertReason, CheckInKind, OpenRun, Run, OPEN_RUNS_MAX, RUN_OPEN_LONGEST};
use crate::snitch::{CheckIn, Event, EventKind, Pause, PauseUntil, Snitch, SnitchState};
use crate::types::{AlertType, Plan, Status};
use crate::validation::Validations;

/// Smart deadlines need at least this many learned offsets.
pub const SMART_MIN_SAMPLES: usize = 3;
/// The smallest margin a smart deadline leaves after the latest learned offset.
pub const SMART_MIN_MARGIN: Duration = Duration::minutes(5);

/// The validation message for pausing a pending snitch.
pub const PAUSED_WHILE_PENDING: &str = "can't be paused while pending";

/// The outcome of one step: the snitch as it is now and what it emitted, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The snitch after the step.
    pub snitch: Snitch,
    /// What the step emitted, in order.
    pub events: Vec<Event>,
    /// The outages that gave the snitch a fresh deadline in this step (their ids).
    pub deferred_by: Vec<u64>,
}

impl Step {
    /// A step to `snitch` that emitted `events` and deferred nothing.
    pub fn new(snitch: Snitch, events: Vec<Event>) -> Step {
        Step {
            snitch,
            events,
            deferred_by: Vec::new(),
        }
    }

    fn unchanged(snitch: &Snitch) -> Step {
        Step::new(snitch.clone(), Vec::new())
    }

    /// Applies a further step to the result of this one, keeping all events in order.
    pub fn then(self, next: impl FnOnce(&Snitch) -> Step) -> Step {
        self.then_owned(|snitch| next(&snitch))
    }

    /// [`Step::then`] with a further step that takes this step's snitch itself, so it
    /// need not copy it.
    pub fn then_owned(self, next: impl FnOnce(Snitch) -> Step) -> Step {
        let Step {
            snitch,
            mut events,
            mut deferred_by,
        } = self;
        let mut step = next(snitch);
        events.append(&mut step.events);
        step.events = events;
        for id in step.deferred_by {
            if !deferred_by.contains(&id) {
                deferred_by.push(id);
            }
        }
        step.deferred_by = deferred_by;
        step
    }

    /// Whether the step changed anything that must be saved.
    pub fn changes(&self, before: &Snitch) -> bool {
        !self.events.is_empty() || self.snitch != *before
    }
}

/// When an interval snitch with these learned offsets must have checked in during
/// `period`.
pub fn due_point(snitch: &Snitch, period: Period) -> Timestamp {
    let basic = period.end();
    let offsets = &snitch.state.smart_offsets_ms;
    if snitch.alert_type != AlertType::Smart || offsets.len() < SMART_MIN_SAMPLES {
        return basic;
    }
    let latest = offsets.iter().copied().max().unwrap_or(0);
    let margin = std::cmp::max(period.len() / 10, SMART_MIN_MARGIN);
    let smart = period.start() + Duration::milliseconds(latest) + margin;
    smart.min(basic)
}

/// The period a deadline belongs to: deadlines lie in `(start, end]` of their period.
fn period_due(interval: Interval, deadline: Timestamp) -> Period {
    interval.period_of(deadline - Duration::nanoseconds(1))
}

/// Deadline of a snitch that starts counting at `anchor` with no run pending: its last
/// check-in, a resume, or the end of our outage.
fn deadline_after(snitch: &Snitch, anchor: Timestamp) -> Timestamp {
    match &snitch.cadence {
        Cadence::Interval(interval) => due_point(snitch, interval.period_of(anchor).next()),
        Cadence::Cron(runs) => or_horizon(runs.deadline_from(anchor), anchor),
    }
}

/// The span a job had to check in during for the deadline `deadline`, as
/// `(opens, the deadline after it)` when it passes empty.
fn missed_window(snitch: &Snitch, deadline: Timestamp) -> (Timestamp, Timestamp) {
    match &snitch.cadence {
        Cadence::Interval(interval) => {
            let period = period_due(*interval, deadline);
            (period.start(), due_point(snitch, period.next()))
        }
        Cadence::Cron(runs) => (
            runs.window_closing_at(deadline).opens,
            or_horizon(runs.deadline_after_miss(deadline), deadline),
        ),
    }
}

/// Whether `earlier` falls in the same period (or, for a schedule, between the same two
/// expected times) as `now`: at most one alert of a kind per period.
fn same_period(snitch: &Snitch, earlier: Timestamp, now: Timestamp) -> bool {
    match &snitch.cadence {
        Cadence::Interval(interval) => interval.period_of(now).contains(earlier),
        Cadence::Cron(runs) => runs.same_slot(earlier, now),
    }
}

fn emit(
    snitch: &mut Snitch,
    kind: EventKind,
    at: Timestamp,
    previous_status: Status,
    check_in: Option<&CheckIn>,
) -> Event {
    snitch.state.event_seq += 1;
    Event {
        id: format!("{}-{}", snitch.token, snitch.state.event_seq),
        kind,
        at,
        case_id: snitch.case_id.clone(),
        token: snitch.token.clone(),
        name: snitch.name.clone(),
        notes: snitch.notes.clone(),
        tags: snitch.tags.clone(),
        alert_email: snitch.alert_email.clone(),
        status: snitch.state.status,
        previous_status,
        checked_in_at: snitch.state.checked_in_at,
        // What the DMS payload tells of the check-in; its run is the event's `run`, and
        // its output stays in the history (not copied into every delivery).
        check_in: check_in.map(|c| CheckIn::new(c.at, c.outcome.clone(), c.message.clone())),
        missed_periods: 0,
        expected_at: None,
        expected_at_local: None,
        reason: None,
        run: None,
    }
}

/// Brings a snitch up to `now`: ends a timed pause whose time has come, and declares it
/// missing when due points passed with no check-in. See [`advance_through`].
pub fn advance(snitch: &Snitch, now: Timestamp) -> Step {
    advance_through(snitch, now, &[])
}

/// [`advance`], knowing our own `outages` (docs/rules.md#outages, #catch-up):
/// - a due point inside an outage is not the job's fault: no event, and the snitch is due
///   again as if it had checked in when service resumed (the outage's end). The same
///   holds when only part of the period the job had to check in fell inside the outage
///   (its check-in may have been lost while we were down): a job that checks in within
///   one period after the resume is never announced;
/// - due points missed one after another (the sweep did not run for a while) make one
///   `snitch.missing`, for the latest, with `missed_periods` counting them.
pub fn advance_through(snitch: &Snitch, now: Timestamp, outages: &[Outage]) -> Step {
    advance_through_owned(snitch.clone(), now, outages)
}

/// [`advance_through`] stepping `s` itself, for a caller that owns a copy already.
pub fn advance_through_owned(mut s: Snitch, now: Timestamp, outages: &[Outage]) -> Step {
    let mut events = Vec::new();
    let mut deferred_by = Vec::new();
    let mut missed: Option<MissedRun> = None;
    while let Some(wake) = s.wake_at().filter(|w| *w <= now) {
        if let Some((index, _)) = s
            .next_run_timeout()
            .filter(|(_, at)| s.wake_for_deadline().is_none_or(|d| *at < d))
        {
            // A run open past its maximum runtime (docs/rules.md#runs); the misses
            // before it are told first, in order.
            announce_missed(&mut s, &mut events, missed.take());
            time_out_run(&mut s, &mut events, index);
            continue;
        }
        if s.state.pause.is_some() {
            announce_missed(&mut s, &mut events, missed.take());
            resume(&mut s, wake);
            continue;
        }
        let (opened, next_deadline) = missed_window(&s, wake);
        if let Some(outage) = outages.iter().find(|o| o.overlaps(opened, wake)) {
            announce_missed(&mut s, &mut events, missed.take());
            s.state.anchor_at = Some(outage.ended_at);
            s.state.deadline_at = Some(deadline_after(&s, outage.ended_at));
            if !deferred_by.contains(&outage.id) {
                deferred_by.push(outage.id);
            }
            continue;
        }
        s.state.consecutive_misses = s.state.consecutive_misses.saturating_add(1);
        if s.state.consecutive_misses <= u32::from(s.missed_tolerance) {
            // Tolerated (docs/rules.md#tolerances): the next run is due, nothing said.
            s.state.deadline_at = Some(next_deadline);
            continue;
        }
        let previous = s.state.status;
        s.state.status = Status::Failed;
        s.state.deadline_at = Some(next_deadline);
        missed = Some(match missed {
            Some(run) => MissedRun {
                count: run.count + 1,
                latest: wake,
                ..run
            },
            None => MissedRun {
                previous,
                count: 1,
                latest: wake,
            },
        });
    }
    announce_missed(&mut s, &mut events, missed);
    Step {
        snitch: s,
        events,
        deferred_by,
    }
}

/// Due points missed one after another, announced as one event.
#[derive(Debug, Clone, Copy)]
struct MissedRun {
    /// The status before the first of them.
    previous: Status,
    count: u64,
    latest: Timestamp,
}

fn announce_missed(s: &mut Snitch, events: &mut Vec<Event>, run: Option<MissedRun>) {
    if let Some(run) = run {
        let mut event = emit(s, EventKind::Missing, run.latest, run.previous, None);
        event.missed_periods = run.count;
        event.reason = Some(AlertReason::Missed);
        match &s.cadence {
            Cadence::Interval(_) => event.expected_at = Some(run.latest),
            Cadence::Cron(runs) => {
                let expected = runs.expected_at(run.latest);
                event.expected_at = Some(expected);
                event.expected_at_local = Some(runs.schedule().to_local_iso(expected));
            }
        }
        events.push(event);
    }
}

/// Records a check-in at `check_in.at` (docs/rules.md#check-in-transitions). Call
/// [`advance`] first so that deadlines passed before it are accounted for.
pub fn check_in(snitch: &Snitch, check_in: &CheckIn, plan: &Plan) -> Step {
    check_in_owned(snitch.clone(), check_in, plan)
}

/// [`check_in`] stepping `s` itself, for a caller that owns a copy already.
pub fn check_in_owned(mut s: Snitch, check_in: &CheckIn, plan: &Plan) -> Step {
    match check_in.kind {
        // Output only: kept in the history, changes nothing.
        CheckInKind::Log => return Step::new(s, Vec::new()),
        CheckInKind::Start => return start_run(s, check_in),
        CheckInKind::End => {}
    }
    let now = check_in.at;
    let mut events = Vec::new();
    let success = check_in.outcome.is_success();
    // The end of a run that started: its start satisfied the expected run's window, so
    // the deadline counts from the start, and only when it has none yet (pending).
    let started_at = end_run(&mut s, check_in);
    // The run pending before this check-in (none while pending or paused).
    let pending = s.state.deadline_at;

    s.state.last_check_in_at = Some(now);
    if started_at.is_none() {
        s.state.anchor_at = Some(now);
        learn_offset(&mut s, now);
    } else if s.state.anchor_at.is_none() {
        s.state.anchor_at = started_at;
    }
    if success {
        s.state.checked_in_at = Some(now);
    }

    // Without error notices an error check-in counts as a success
    // (docs/rules.md#check-in-transitions), also for ending a pause; `checked_in_at` still
    // only moves on a real success.
    let counts_as_success = success || !plan.error_notices;
    if let Some(pause) = &mut s.state.pause {
        if !counts_as_success {
            // An error while paused is recorded but changes nothing: alerts are muted.
            return Step::new(s, events);
        }
        if pause.until != PauseUntil::Healthy {
            pause.checked_in_while_paused = true;
            return Step::new(s, events);
        }
        s.state.pause = None;
    }

    // A run came: the misses in a row end; a success ends the failures in a row too.
    s.state.consecutive_misses = 0;
    if counts_as_success {
        s.state.consecutive_failures = 0;
    } else {
        s.state.consecutive_failures = s.state.consecutive_failures.saturating_add(1);
    }
    // A failed run within the tolerance (docs/rules.md#tolerances) counts as a run (the
    // next one is due) but changes no status and says nothing. A pending snitch's first
    // run sets its status whatever it is.
    let tolerated = !counts_as_success
        && s.state.status != Status::Pending
        && s.state.consecutive_failures <= u32::from(s.failure_tolerance);

    let previous = s.state.status;
    if !counts_as_success {
        if !tolerated {
            s.state.status = Status::Errored;
            let alerted_this_period = s
                .state
                .last_errored_alert_at
                .is_some_and(|t| same_period(&s, t, now));
            if !alerted_this_period {
                s.state.last_errored_alert_at = Some(now);
                s.state.error_announced = true;
                let mut event = emit(&mut s, EventKind::Errored, now, previous, Some(check_in));
                event.reason = Some(AlertReason::ExitStatus);
                event.run = run_concerned(&s, check_in, started_at.is_some());
                events.push(event);
            } else if previous != Status::Errored {
                // A new error in a period that already had its errored alert: followed in
                // the status, never announced, so its recovery is not announced either.
                s.state.error_announced = false;
            }
        }
    } else {
        s.state.status = Status::Healthy;
        // Alert economy (docs/rules.md#alert-economy): a recovery from an error is
        // announced only if the error was, and at most once per period; any other recovery
        // (from pending, failed or a pause) always is.
        let announce = match previous {
            Status::Healthy => false,
            Status::Errored => {
                let recovered_this_period = s
                    .state
                    .last_recovery_alert_at
                    .is_some_and(|t| same_period(&s, t, now));
                s.state.error_announced && !recovered_this_period
            }
            Status::Pending | Status::Failed | Status::Paused => true,
        };
        if previous == Status::Errored && announce {
            s.state.last_recovery_alert_at = Some(now);
        }
        if announce {
            let mut event = emit(&mut s, EventKind::Reporting, now, previous, Some(check_in));
            event.run = run_concerned(&s, check_in, started_at.is_some());
            events.push(event);
        }
    }
    s.state.deadline_at = match (started_at, pending) {
        // The run's start already set the deadline.
        (Some(_), Some(deadline)) => Some(deadline),
        (Some(start), None) => Some(deadline_after_run(&s, None, start)),
        (None, _) => Some(deadline_after_run(&s, pending, now)),
    };
    Step::new(s, events)
}

/// The deadline after a run counted at `at` (a check-in, or a run's start), with the run
/// `pending` before it.
fn deadline_after_run(s: &Snitch, pending: Option<Timestamp>, at: Timestamp) -> Timestamp {
    match &s.cadence {
        Cadence::Interval(_) => deadline_after(s, at),
        // A check-in before the pending run's window leaves that run due.
        Cadence::Cron(runs) => or_horizon(runs.deadline_after_check_in(pending, at), at),
    }
}

/// Smart alerts learn when in its period a job checks in (or starts).
fn learn_offset(s: &mut Snitch, at: Timestamp) {
    if let Some(interval) = s.cadence.interval() {
        let period = interval.period_of(at);
        s.state
            .smart_offsets_ms
            .push((at - period.start()).num_milliseconds());
    }
}

/// The run an event of `check_in` concerns: the last run, when the check-in was one
/// (paired with a start, or with a run id or a duration); `None` for a plain check-in.
fn run_concerned(s: &Snitch, check_in: &CheckIn, ended_a_run: bool) -> Option<Run> {
    let is_run = ended_a_run || check_in.run_id.is_some() || check_in.duration_ms.is_some();
    is_run
        .then(|| s.state.last_run.as_deref().cloned())
        .flatten()
}

/// A run starts (docs/rules.md#runs): it satisfies the expected run's window as a
/// check-in does, without changing the status (its end says how it went), and opens a
/// run that times out after the snitch's maximum runtime. A start with the id of an open
/// run keeps that run alive; a start without id replaces the open run without id.
fn start_run(mut s: Snitch, check_in: &CheckIn) -> Step {
    let now = check_in.at;
    s.state.last_check_in_at = Some(now);
    let allowed = s.runtime_allowed(now);
    let same = s
        .state
        .open_runs
        .iter()
        .position(|r| r.run_id == check_in.run_id);
    match same {
        Some(index) if check_in.run_id.is_some() => {
            let run = &mut s.state.open_runs[index];
            run.timeout_at = (now + allowed).min(run.started_at + RUN_OPEN_LONGEST);
            return Step::new(s, Vec::new());
        }
        Some(index) => {
            s.state.open_runs.remove(index);
        }
        None => {}
    }
    if s.state.open_runs.len() >= OPEN_RUNS_MAX {
        // The oldest gives way, closed as timed out without an alert: a job that starts
        // runs it never ends was told of by the first of them that timed out.
        let oldest = s.state.open_runs.remove(0);
        s.state.last_run = Some(Box::new(timed_out(&oldest, now)));
    }
    s.state.open_runs.push(OpenRun {
        run_id: check_in.run_id.clone(),
        started_at: now,
        timeout_at: now + allowed,
    });
    if s.state.pause.is_none() && s.state.status != Status::Pending {
        let pending = s.state.deadline_at;
        s.state.anchor_at = Some(now);
        s.state.consecutive_misses = 0;
        learn_offset(&mut s, now);
        s.state.deadline_at = Some(deadline_after_run(&s, pending, now));
    }
    Step::new(s, Vec::new())
}

/// Closes the open run `check_in` ends, if any (the one with its run id; without one, the
/// newest without id), records the last run, and gives the run's start.
fn end_run(s: &mut Snitch, check_in: &CheckIn) -> Option<Timestamp> {
    let now = check_in.at;
    let index = match &check_in.run_id {
        Some(id) => s
            .state
            .open_runs
            .iter()
            .position(|r| r.run_id.as_ref() == Some(id)),
        None => s.state.open_runs.iter().rposition(|r| r.run_id.is_none()),
    };
    let opened = index.map(|i| s.state.open_runs.remove(i));
    if opened.is_none() && check_in.run_id.is_none() && check_in.duration_ms.is_none() {
        // A plain check-in: no run to tell of.
        return None;
    }
    let reported = check_in
        .duration_ms
        .and_then(|ms| i64::try_from(ms).ok())
        .map(Duration::milliseconds);
    let started_at = opened
        .as_ref()
        .map(|r| r.started_at)
        .or_else(|| reported.map(|d| now - d));
    let duration_ms = check_in.duration_ms.or_else(|| {
        opened
            .as_ref()
            .map(|r| u64::try_from((now - r.started_at).num_milliseconds()).unwrap_or(0))
    });
    s.state.last_run = Some(Box::new(Run {
        run_id: check_in.run_id.clone(),
        started_at,
        finished_at: Some(now),
        duration_ms,
        exit_status: check_in.outcome.exit_status().map(str::to_owned),
        timed_out: false,
    }));
    opened.map(|r| r.started_at)
}

/// The record of `run`, closed as timed out at `at`.
fn timed_out(run: &OpenRun, at: Timestamp) -> Run {
    Run {
        run_id: run.run_id.clone(),
        started_at: Some(run.started_at),
        finished_at: None,
        duration_ms: u64::try_from((at - run.started_at).num_milliseconds()).ok(),
        exit_status: None,
        timed_out: true,
    }
}

/// The open run at `index` timed out (docs/rules.md#runs): a failed run, told with
/// `snitch.missing` (reason `timeout`) unless paused, within the failure tolerance, or
/// already failed.
fn time_out_run(s: &mut Snitch, events: &mut Vec<Event>, index: usize) {
    let open = s.state.open_runs.remove(index);
    let at = open.timeout_at;
    let run = timed_out(&open, at);
    s.state.last_run = Some(Box::new(run.clone()));
    if s.state.pause.is_some() {
        return;
    }
    s.state.consecutive_failures = s.state.consecutive_failures.saturating_add(1);
    let tolerated = s.state.status != Status::Pending
        && s.state.consecutive_failures <= u32::from(s.failure_tolerance);
    if tolerated || s.state.status == Status::Failed {
        return;
    }
    let previous = s.state.status;
    s.state.status = Status::Failed;
    if s.state.deadline_at.is_none() {
        // Pending: it started once, so deadlines count from that start.
        s.state.anchor_at = Some(open.started_at);
        s.state.deadline_at = Some(deadline_after_run(s, None, open.started_at));
    }
    let mut event = emit(s, EventKind::Missing, at, previous, None);
    event.reason = Some(AlertReason::Timeout);
    event.run = Some(run);
    events.push(event);
}

/// Pauses a snitch until `until` (docs/rules.md#pause). A pending snitch cannot be
/// paused; pausing a paused snitch only replaces `until`.
pub fn pause(snitch: &Snitch, until: PauseUntil, now: Timestamp) -> Result<Step, Validations> {
    if let PauseUntil::At(t) = until {
        if t <= now {
            return Err(Validations::single("until", "must be in the future"));
        }
    }
    let mut s = snitch.clone();
    match (&mut s.state.pause, s.state.status) {
        (Some(pause), _) => {
            pause.until = until;
            Ok(Step::new(s, Vec::new()))
        }
        (None, Status::Pending) => Err(Validations::single("status", PAUSED_WHILE_PENDING)),
        (None, previous) => {
            s.state.pause = Some(Pause {
                until,
                resume_status: previous,
                checked_in_while_paused: false,
            });
            s.state.status = Status::Paused;
            s.state.deadline_at = None;
            let event = emit(&mut s, EventKind::Paused, now, previous, None);
            Ok(Step::new(s, vec![event]))
        }
    }
}

/// Ends a pause by request; a no-op for a snitch that is not paused.
pub fn unpause(snitch: &Snitch, now: Timestamp) -> Step {
    if snitch.state.pause.is_none() {
        return Step::unchanged(snitch);
    }
    let mut s = snitch.clone();
    resume(&mut s, now);
    Step::new(s, Vec::new())
}

/// Ends the pause at `at`: healthy if it checked in meanwhile, else the status it had;
/// the deadline restarts as if it had checked in at `at`. Emits nothing.
fn resume(s: &mut Snitch, at: Timestamp) {
    let Some(pause) = s.state.pause.take() else {
        return;
    };
    s.state.status = if pause.checked_in_while_paused {
        Status::Healthy
    } else {
        pause.resume_status
    };
    s.state.anchor_at = Some(at);
    s.state.deadline_at = Some(deadline_after(s, at));
}

/// Recomputes the deadline after the interval, schedule or alert type changed
/// (docs/rules.md#update-and-delete, #expected-runs). Learned offsets belong to the old
/// periods, so a new cadence forgets them. A schedule takes effect from `now`: its first
/// run after the change is the first that must happen.
pub fn reschedule(snitch: &Snitch, cadence_changed: bool, now: Timestamp) -> Step {
    let mut s = snitch.clone();
    if cadence_changed {
        s.state.smart_offsets_ms.clear();
    }
    if s.state.pause.is_some() {
        return Step::new(s, Vec::new());
    }
    let Some(anchor) = s.state.anchor_at else {
        return Step::new(s, Vec::new());
    };
    let deadline = match &s.cadence {
        Cadence::Cron(runs) => or_horizon(runs.deadline_after_change(now), now),
        Cadence::Interval(interval) => {
            let interval = *interval;
            let mut period = interval.period_of(anchor).next();
            if s.state.status == Status::Failed {
                // Already alerted: the next alert is for the next period that ends silent,
                // not an immediate repeat for the periods already reported.
                let current = interval.period_of(now);
                if current.start() > period.start() {
                    period = current;
                }
                if due_point(&s, period) <= now {
                    period = period.next();
                }
            }
            due_point(&s, period)
        }
    };
    s.state.deadline_at = Some(deadline);
    Step::new(s, Vec::new())
}

/// The state of a snitch that was just created.
pub fn initial_state() -> SnitchState {
    SnitchState::default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calendar::Interval;
    use crate::types::{AlertEmails, CaseId, Notes, Outcome, SnitchName, Tags, Token};
    use chrono::{DateTime, Utc};

    fn at(s: &str) -> Timestamp {
        DateTime::parse_from_rfc3339(s)
            .expect("test timestamps are valid")
            .with_timezone(&Utc)
    }

    fn new_snitch(interval: Interval, alert_type: AlertType) -> Snitch {
        Snitch {
            token: Token::parse("tok00000000000000001").expect("valid"),
            case_id: CaseId::parse("acme").expect("valid"),
            name: SnitchName::parse("nightly backup").expect("valid"),
            tags: Tags::default(),
            notes: Notes::default(),
            cadence: interval.into(),
            alert_type,
            alert_email: AlertEmails::default(),
            failure_tolerance: 0,
            missed_tolerance: 0,
            max_runtime_seconds: None,
            email_keywords: Default::default(),
            created_at: at("2026-11-22T00:00:00Z"),
            state: initial_state(),
            version: 1,
        }
    }

    const NOTICES: Plan = Plan {
        max_snitches: 10,
        error_notices: true,
    };
    const NO_NOTICES: Plan = Plan {
        max_snitches: 10,
        error_notices: false,
    };

    fn ok(t: &str) -> CheckIn {
        CheckIn {
            at: at(t),
            outcome: Outcome::Success,
            message: None,
            ..Default::default()
        }
    }

    fn err(t: &str) -> CheckIn {
        CheckIn {
            at: at(t),
            outcome: Outcome::Error {
                exit_status: "2".into(),
            },
            message: None,
            ..Default::default()
        }
    }

    /// `advance` to the check-in's time, then the check-in: what the service does.
    fn arrive(s: &Snitch, c: &CheckIn, plan: &Plan) -> Step {
        advance(s, c.at).then(|s| check_in(s, c, plan))
    }

    fn kinds(step: &Step) -> Vec<(EventKind, Status, Status)> {
        step.events
            .iter()
            .map(|e| (e.kind, e.previous_status, e.status))
            .collect()
    }

    #[test]
    fn first_check_in_reports_and_sets_a_basic_deadline_at_the_end_of_the_next_period() {
        let s = new_snitch(Interval::Hourly, AlertType::Basic);
        let step = arrive(&s, &ok("2026-11-22T03:10:00Z"), &NOTICES);
        assert_eq!(
            kinds(&step),
            [(EventKind::Reporting, Status::Pending, Status::Healthy)]
        );
        let s = step.snitch;
        assert_eq!(s.state.checked_in_at, Some(at("2026-11-22T03:10:00Z")));
        assert_eq!(s.state.deadline_at, Some(at("2026-11-22T05:00:00Z")));
        assert_eq!(step.events[0].id, "tok00000000000000001-1");

        let again = arrive(&s, &ok("2026-11-22T04:59:59.999Z"), &NOTICES);
        assert!(again.events.is_empty(), "healthy to healthy is silent");
        assert_eq!(
            again.snitch.state.deadline_at,
            Some(at("2026-11-22T06:00:00Z"))
        );
    }

    #[test]
    fn pending_snitches_never_go_missing() {
        let s = new_snitch(Interval::Minute1, AlertType::Basic);
        let step = advance(&s, at("2027-01-01T00:00:00Z"));
        assert!(step.events.is_empty());
        assert_eq!(step.snitch.status(), Status::Pending);
        assert_eq!(step.snitch.wake_at(), None);
    }

    #[test]
    fn a_silent_snitch_goes_missing_once_per_period_at_each_deadline() {
        let s = arrive(
            &new_snitch(Interval::Minute5, AlertType::Basic),
            &ok("2026-11-22T03:01:00Z"),
            &NOTICES,
        )
        .snitch;
        // Due by 03:10. At 03:09:59.999 nothing happens; at 03:10 exactly it is missing.
        assert!(advance(&s, at("2026-11-22T03:09:59.999Z"))
            .events
            .is_empty());
        let step = advance(&s, at("2026-11-22T03:10:00Z"));
        assert_eq!(
            kinds(&step),
            [(EventKind::Missing, Status::Healthy, Status::Failed)]
        );
        assert_eq!(step.events[0].at, at("2026-11-22T03:10:00Z"));
        assert_eq!(
            step.snitch.state.deadline_at,
            Some(at("2026-11-22T03:15:00Z"))
        );

        // Each further period that ends silent: another `missing`, previous status missing.
        let next = advance(&step.snitch, at("2026-11-22T03:15:00Z"));
        assert_eq!(
            kinds(&next),
            [(EventKind::Missing, Status::Failed, Status::Failed)]
        );
        assert_eq!(next.events[0].missed_periods, 1);
        assert_eq!(Status::Failed.webhook_name(), "missing");

        // Two more passed before anyone looked (catch-up): one event for the latest,
        // counting both (docs/rules.md#catch-up).
        let later = advance(&next.snitch, at("2026-11-22T03:26:00Z"));
        assert_eq!(
            kinds(&later),
            [(EventKind::Missing, Status::Failed, Status::Failed)]
        );
        assert_eq!(later.events[0].at, at("2026-11-22T03:25:00Z"));
        assert_eq!(later.events[0].missed_periods, 2);
        assert_eq!(
            later.snitch.state.deadline_at,
            Some(at("2026-11-22T03:30:00Z"))
        );

        let back = arrive(&later.snitch, &ok("2026-11-22T03:27:00Z"), &NOTICES);
        assert_eq!(
            kinds(&back),
            [(EventKind::Reporting, Status::Failed, Status::Healthy)]
        );
    }

    #[test]
    fn a_late_check_in_first_reports_the_missed_deadline() {
        let s = arrive(
            &new_snitch(Interval::Hourly, AlertType::Basic),
            &ok("2026-11-22T03:59:00Z"),
            &NOTICES,
        )
        .snitch;
        let step = arrive(&s, &ok("2026-11-22T05:00:00.001Z"), &NOTICES);
        assert_eq!(
            kinds(&step),
            [
                (EventKind::Missing, Status::Healthy, Status::Failed),
                (EventKind::Reporting, Status::Failed, Status::Healthy)
            ]
        );
    }

    #[test]
    fn error_check_ins_alert_once_per_period_and_satisfy_it() {
        let s = arrive(
            &new_snitch(Interval::Hourly, AlertType::Basic),
            &ok("2026-11-22T03:00:00Z"),
            &NOTICES,
        )
        .snitch;
        let first = arrive(&s, &err("2026-11-22T04:10:00Z"), &NOTICES);
        assert_eq!(
            kinds(&first),
            [(EventKind::Errored, Status::Healthy, Status::Errored)]
        );
        let e = &first.events[0];
        assert_eq!(
            e.check_in.as_ref().map(|c| c.at),
            Some(at("2026-11-22T04:10:00Z"))
        );
        let s = first.snitch;
        assert_eq!(s.state.checked_in_at, Some(at("2026-11-22T03:00:00Z")));
        assert_eq!(s.state.deadline_at, Some(at("2026-11-22T06:00:00Z")));

        let same_period = arrive(&s, &err("2026-11-22T04:50:00Z"), &NOTICES);
        assert!(same_period.events.is_empty());
        let next_period = arrive(&same_period.snitch, &err("2026-11-22T05:01:00Z"), &NOTICES);
        assert_eq!(
            kinds(&next_period),
            [(EventKind::Errored, Status::Errored, Status::Errored)]
        );
        let recovered = arrive(&next_period.snitch, &ok("2026-11-22T05:02:00Z"), &NOTICES);
        assert_eq!(
            kinds(&recovered),
            [(EventKind::Reporting, Status::Errored, Status::Healthy)]
        );
    }

    #[test]
    fn a_flapping_snitch_follows_every_check_in_but_alerts_one_pair_per_period() {
        let mut s = arrive(
            &new_snitch(Interval::Hourly, AlertType::Basic),
            &ok("2026-11-22T03:00:00Z"),
            &NOTICES,
        )
        .snitch;
        let start = at("2026-11-22T04:00:00Z");
        let mut events = Vec::new();
        // 1,000 error/success flaps inside one hour, 1.8 s apart.
        for i in 0..2_000 {
            let c = CheckIn {
                at: start + Duration::milliseconds(i * 1_800),
                outcome: if i % 2 == 0 {
                    Outcome::Error {
                        exit_status: "1".into(),
                    }
                } else {
                    Outcome::Success
                },
                message: None,
                ..Default::default()
            };
            let step = arrive(&s, &c, &NOTICES);
            let expected = if i % 2 == 0 {
                Status::Errored
            } else {
                Status::Healthy
            };
            assert_eq!(step.snitch.status(), expected, "follows check-in {i}");
            events.extend(kinds(&step));
            s = step.snitch;
        }
        assert_eq!(
            events,
            [
                (EventKind::Errored, Status::Healthy, Status::Errored),
                (EventKind::Reporting, Status::Errored, Status::Healthy),
            ]
        );

        // The next period gets its own pair.
        let next = arrive(&s, &err("2026-11-22T05:00:00Z"), &NOTICES);
        let back = arrive(&next.snitch, &ok("2026-11-22T05:00:01Z"), &NOTICES);
        let flap = arrive(&back.snitch, &err("2026-11-22T05:00:02Z"), &NOTICES);
        let quiet = arrive(&flap.snitch, &ok("2026-11-22T05:00:03Z"), &NOTICES);
        assert_eq!(
            [&next, &back, &flap, &quiet].map(|step| step.events.len()),
            [1, 1, 0, 0]
        );
    }

    #[test]
    fn an_unannounced_error_that_goes_missing_still_announces_its_recovery() {
        let s = arrive(
            &new_snitch(Interval::Hourly, AlertType::Basic),
            &ok("2026-11-22T03:00:00Z"),
            &NOTICES,
        )
        .snitch;
        let errored = arrive(&s, &err("2026-11-22T04:10:00Z"), &NOTICES).snitch;
        let healthy = arrive(&errored, &ok("2026-11-22T04:11:00Z"), &NOTICES).snitch;
        // A second error in the hour is not announced...
        let quiet = arrive(&healthy, &err("2026-11-22T04:12:00Z"), &NOTICES);
        assert!(quiet.events.is_empty());
        // ...but the job then falls silent: missing at 06:00, and its return is news.
        let back = arrive(&quiet.snitch, &ok("2026-11-22T06:30:00Z"), &NOTICES);
        assert_eq!(
            kinds(&back),
            [
                (EventKind::Missing, Status::Errored, Status::Failed),
                (EventKind::Reporting, Status::Failed, Status::Healthy),
            ]
        );
    }

    #[test]
    fn without_error_notices_an_error_counts_as_success_but_keeps_checked_in_at() {
        let s = new_snitch(Interval::Daily, AlertType::Basic);
        let step = arrive(&s, &err("2026-11-22T03:00:00Z"), &NO_NOTICES);
        assert_eq!(
            kinds(&step),
            [(EventKind::Reporting, Status::Pending, Status::Healthy)]
        );
        assert_eq!(step.snitch.state.checked_in_at, None);
        assert_eq!(
            step.snitch.state.deadline_at,
            Some(at("2026-11-24T00:00:00Z"))
        );
    }

    #[test]
    fn without_error_notices_an_error_check_in_also_ends_a_pause() {
        let s = arrive(
            &new_snitch(Interval::Hourly, AlertType::Basic),
            &ok("2026-11-22T03:00:00Z"),
            &NO_NOTICES,
        )
        .snitch;
        let paused = pause(&s, PauseUntil::Healthy, at("2026-11-22T03:10:00Z"))
            .expect("pausable")
            .snitch;
        let back = arrive(&paused, &err("2026-11-22T03:20:00Z"), &NO_NOTICES);
        assert_eq!(
            kinds(&back),
            [(EventKind::Reporting, Status::Paused, Status::Healthy)]
        );
        assert_eq!(
            back.snitch.state.checked_in_at,
            Some(at("2026-11-22T03:00:00Z"))
        );
        let with_notices = arrive(&paused, &err("2026-11-22T03:20:00Z"), &NOTICES);
        assert_eq!(with_notices.snitch.status(), Status::Paused);
    }

    #[test]
    fn an_interval_change_does_not_allow_a_second_errored_alert_in_a_period() {
        let s = arrive(
            &new_snitch(Interval::Hourly, AlertType::Basic),
            &err("2026-11-22T03:00:00Z"),
            &NOTICES,
        );
        assert_eq!(s.events.len(), 1);
        let mut longer = s.snitch.clone();
        longer.cadence = Interval::Hour6.into();
        let longer = reschedule(&longer, true, at("2026-11-22T03:00:00Z")).snitch;
        let again = arrive(&longer, &err("2026-11-22T04:30:00Z"), &NOTICES);
        assert!(
            again.events.is_empty(),
            "00:00-06:00 already had its errored alert"
        );
    }

    #[test]
    fn pausing_a_pending_snitch_or_into_the_past_is_invalid() {
        let s = new_snitch(Interval::Daily, AlertType::Basic);
        let now = at("2026-11-22T03:00:00Z");
        let problem = pause(&s, PauseUntil::Healthy, now).expect_err("pending");
        assert_eq!(
            problem
                .iter()
                .next()
                .map(|v| (v.attribute.as_str(), v.message.as_str())),
            Some(("status", PAUSED_WHILE_PENDING))
        );
        let s = arrive(&s, &ok("2026-11-22T02:00:00Z"), &NOTICES).snitch;
        assert!(pause(&s, PauseUntil::At(now), now).is_err());
    }

    #[test]
    fn pause_until_healthy_mutes_deadlines_and_ends_with_a_success_check_in() {
        let s = arrive(
            &new_snitch(Interval::Minute1, AlertType::Basic),
            &ok("2026-11-22T03:00:00Z"),
            &NOTICES,
        )
        .snitch;
        let paused = pause(&s, PauseUntil::Healthy, at("2026-11-22T03:00:30Z")).expect("pausable");
        assert_eq!(
            kinds(&paused),
            [(EventKind::Paused, Status::Healthy, Status::Paused)]
        );
        let s = paused.snitch;
        assert_eq!(s.wake_at(), None);
        assert!(advance(&s, at("2026-11-23T00:00:00Z")).events.is_empty());
        let again = pause(&s, PauseUntil::Unpaused, at("2026-11-22T03:01:00Z")).expect("ok");
        assert!(
            again.events.is_empty(),
            "pausing a paused snitch emits nothing"
        );

        let errored = arrive(&s, &err("2026-11-22T05:00:00Z"), &NOTICES);
        assert!(errored.events.is_empty());
        assert_eq!(errored.snitch.status(), Status::Paused);
        let back = arrive(&errored.snitch, &ok("2026-11-22T05:00:10Z"), &NOTICES);
        assert_eq!(
            kinds(&back),
            [(EventKind::Reporting, Status::Paused, Status::Healthy)]
        );
        assert_eq!(
            back.snitch.state.deadline_at,
            Some(at("2026-11-22T05:02:00Z"))
        );
    }

    #[test]
    fn a_timed_pause_resumes_at_its_time_with_the_old_status_and_a_fresh_deadline() {
        let s = arrive(
            &new_snitch(Interval::Hourly, AlertType::Basic),
            &ok("2026-11-22T01:00:00Z"),
            &NOTICES,
        )
        .snitch;
        let failed = advance(&s, at("2026-11-22T03:00:00Z")).snitch;
        assert_eq!(failed.status(), Status::Failed);
        let until = at("2026-11-22T08:30:00Z");
        let paused = pause(&failed, PauseUntil::At(until), at("2026-11-22T03:30:00Z"))
            .expect("pausable")
            .snitch;
        assert_eq!(paused.wake_at(), Some(until));
        // Nothing happens while paused; at 08:30 it resumes, silently, still failed, due
        // by the end of the next hour; at 10:00 it is missing again.
        let resumed = advance(&paused, at("2026-11-22T09:59:59Z"));
        assert!(resumed.events.is_empty());
        assert_eq!(resumed.snitch.status(), Status::Failed);
        assert_eq!(
            resumed.snitch.state.deadline_at,
            Some(at("2026-11-22T10:00:00Z"))
        );
        let missing = advance(&resumed.snitch, at("2026-11-22T10:00:00Z"));
        assert_eq!(
            kinds(&missing),
            [(EventKind::Missing, Status::Failed, Status::Failed)]
        );
    }

    #[test]
    fn check_ins_during_a_pause_until_unpaused_make_the_unpause_healthy() {
        let s = arrive(
            &new_snitch(Interval::Hourly, AlertType::Basic),
            &err("2026-11-22T01:00:00Z"),
            &NOTICES,
        )
        .snitch;
        let paused = pause(&s, PauseUntil::Unpaused, at("2026-11-22T01:30:00Z"))
            .expect("pausable")
            .snitch;
        assert_eq!(
            unpause(&paused, at("2026-11-22T02:00:00Z")).snitch.status(),
            Status::Errored
        );
        let checked = arrive(&paused, &ok("2026-11-22T04:00:00Z"), &NOTICES);
        assert!(checked.events.is_empty());
        assert_eq!(checked.snitch.status(), Status::Paused);
        let resumed = unpause(&checked.snitch, at("2026-11-22T05:15:00Z"));
        assert!(resumed.events.is_empty());
        assert_eq!(resumed.snitch.status(), Status::Healthy);
        assert_eq!(
            resumed.snitch.state.deadline_at,
            Some(at("2026-11-22T07:00:00Z"))
        );
        let noop = unpause(&resumed.snitch, at("2026-11-22T05:20:00Z"));
        assert!(!noop.changes(&resumed.snitch));
    }

    #[test]
    fn smart_deadlines_follow_the_learned_offsets() {
        let mut s = new_snitch(Interval::Hourly, AlertType::Smart);
        // Two check-ins: still basic.
        for t in ["2026-11-22T01:10:00Z", "2026-11-22T02:12:00Z"] {
            s = arrive(&s, &ok(t), &NOTICES).snitch;
        }
        assert_eq!(s.state.deadline_at, Some(at("2026-11-22T04:00:00Z")));
        // The third: due at the next period's start + latest offset (12 min) + 6 min.
        s = arrive(&s, &ok("2026-11-22T03:11:00Z"), &NOTICES).snitch;
        assert_eq!(s.state.deadline_at, Some(at("2026-11-22T04:18:00Z")));
        let missing = advance(&s, at("2026-11-22T04:18:00Z"));
        assert_eq!(
            kinds(&missing),
            [(EventKind::Missing, Status::Healthy, Status::Failed)]
        );
        // Still silent: due again at 05:18, one `missing` per period.
        assert_eq!(
            missing.snitch.state.deadline_at,
            Some(at("2026-11-22T05:18:00Z"))
        );
    }

    #[test]
    fn smart_margins_are_at_least_five_minutes_and_never_pass_the_basic_deadline() {
        let mut s = new_snitch(Interval::Daily, AlertType::Smart);
        for t in [
            "2026-11-20T23:00:00Z",
            "2026-11-21T23:30:00Z",
            "2026-11-22T22:00:00Z",
        ] {
            s = arrive(&s, &ok(t), &NOTICES).snitch;
        }
        // 23:30 + 2h24m (a tenth of a day) is past midnight: the basic deadline wins.
        assert_eq!(s.state.deadline_at, Some(at("2026-11-24T00:00:00Z")));

        let mut s = new_snitch(Interval::Hourly, AlertType::Smart);
        for t in [
            "2026-11-22T01:00:00Z",
            "2026-11-22T02:00:00Z",
            "2026-11-22T03:00:00Z",
        ] {
            s = arrive(&s, &ok(t), &NOTICES).snitch;
        }
        assert_eq!(s.state.deadline_at, Some(at("2026-11-22T04:06:00Z")));
        let mut s = new_snitch(Interval::Hourly, AlertType::Smart);
        s.cadence = Interval::Hour2.into();
        for t in [
            "2026-11-22T00:00:00Z",
            "2026-11-22T02:00:00Z",
            "2026-11-22T04:00:00Z",
        ] {
            s = arrive(&s, &ok(t), &NOTICES).snitch;
        }
        // A tenth of two hours is twelve minutes.
        assert_eq!(s.state.deadline_at, Some(at("2026-11-22T06:12:00Z")));
    }

    #[test]
    fn rescheduling_counts_from_the_last_check_in_and_does_not_repeat_alerts() {
        let s = arrive(
            &new_snitch(Interval::Daily, AlertType::Basic),
            &ok("2026-11-22T03:00:00Z"),
            &NOTICES,
        )
        .snitch;
        let mut hourly = s.clone();
        hourly.cadence = Interval::Hourly.into();
        let step = reschedule(&hourly, true, at("2026-11-22T06:30:00Z"));
        // Due by 05:00 under the new interval: already past, so the next sweep alerts.
        assert_eq!(
            step.snitch.state.deadline_at,
            Some(at("2026-11-22T05:00:00Z"))
        );
        assert!(step.snitch.state.smart_offsets_ms.is_empty());
        let failed = advance(&step.snitch, at("2026-11-22T06:30:00Z"));
        let missed: Vec<_> = failed
            .events
            .iter()
            .map(|e| (e.at, e.missed_periods))
            .collect();
        assert_eq!(
            missed,
            [(at("2026-11-22T06:00:00Z"), 2)],
            "one catch-up event"
        );
        assert_eq!(
            failed.snitch.state.deadline_at,
            Some(at("2026-11-22T07:00:00Z"))
        );

        let mut daily = failed.snitch.clone();
        daily.cadence = Interval::Daily.into();
        // The day of the last check-in is covered: due by the end of the next day.
        let step = reschedule(&daily, true, at("2026-11-22T06:45:00Z"));
        assert_eq!(
            step.snitch.state.deadline_at,
            Some(at("2026-11-24T00:00:00Z"))
        );

        // A failed snitch whose last check-in is long gone is due at the end of the
        // current period, not at once for the periods already reported.
        let old = advance(&s, at("2026-11-25T12:00:00Z")).snitch;
        assert_eq!(old.status(), Status::Failed);
        let mut weekly = old.clone();
        weekly.cadence = Interval::Weekly.into();
        let step = reschedule(&weekly, true, at("2026-11-25T12:00:00Z"));
        assert_eq!(
            step.snitch.state.deadline_at,
            Some(at("2026-11-30T00:00:00Z"))
        );
    }

    /// A snitch on `expression` in `timezone` with these spans (seconds).
    fn cron_snitch(expression: &str, timezone: &str, grace: i64, early: i64) -> Snitch {
        let runs = crate::schedule::ExpectedRuns::with_spans(
            crate::schedule::CronSchedule::parse(expression, timezone).expect("valid"),
            Duration::seconds(grace),
            Duration::seconds(early),
        )
        .expect("valid spans");
        let mut s = new_snitch(Interval::Daily, AlertType::Basic);
        s.cadence = runs.into();
        s
    }

    #[test]
    fn a_cron_snitch_is_due_at_its_next_run_plus_grace_and_missed_once_per_run() {
        // 02:30 in Riga is 00:30 UTC in winter; half an hour of grace.
        let s = cron_snitch("30 2 * * *", "Europe/Riga", 1_800, 60);
        let step = arrive(&s, &ok("2026-01-10T00:31:00Z"), &NOTICES);
        assert_eq!(
            kinds(&step),
            [(EventKind::Reporting, Status::Pending, Status::Healthy)]
        );
        let s = step.snitch;
        // That run is done: the next night's is due by 01:00 UTC.
        assert_eq!(s.state.deadline_at, Some(at("2026-01-11T01:00:00Z")));
        assert!(advance(&s, at("2026-01-11T00:59:59Z")).events.is_empty());
        // Three silent nights: one missing event counting them, due the next night.
        let step = advance(&s, at("2026-01-13T12:00:00Z"));
        assert_eq!(
            kinds(&step),
            [(EventKind::Missing, Status::Healthy, Status::Failed)]
        );
        assert_eq!(step.events[0].missed_periods, 3);
        assert_eq!(step.events[0].at, at("2026-01-13T01:00:00Z"));
        // The latest missed run, as its owner wrote it and in UTC.
        assert_eq!(step.events[0].expected_at, Some(at("2026-01-13T00:30:00Z")));
        assert_eq!(
            step.events[0].expected_at_local.as_deref(),
            Some("2026-01-13T02:30:00.000+02:00")
        );
        assert_eq!(
            step.snitch.state.deadline_at,
            Some(at("2026-01-14T01:00:00Z"))
        );
        // The job comes back a minute early: that counts for tonight's run.
        let step = arrive(&step.snitch, &ok("2026-01-14T00:29:10Z"), &NOTICES);
        assert_eq!(
            kinds(&step),
            [(EventKind::Reporting, Status::Failed, Status::Healthy)]
        );
        assert_eq!(
            step.snitch.state.deadline_at,
            Some(at("2026-01-15T01:00:00Z"))
        );
    }

    #[test]
    fn a_cron_job_checking_in_on_time_through_a_fall_back_night_is_never_missed() {
        // Riga falls back on 2026-10-25 at 04:00 to 03:00: 03:30 happens twice, and a
        // fixed-time job runs once, at the first.
        let mut s = cron_snitch("30 3 * * *", "Europe/Riga", 900, 60);
        for run in [
            "2026-10-23T00:30:00Z",
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z", // 03:30 +03:00, the first of two
            "2026-10-26T01:30:00Z", // 03:30 +02:00
            "2026-10-27T01:30:00Z",
        ] {
            let step = arrive(&s, &ok(run), &NOTICES);
            assert!(
                step.events.iter().all(|e| e.kind != EventKind::Missing),
                "a missing event at {run}: {:?}",
                step.events
            );
            s = step.snitch;
        }
        assert_eq!(s.state.status, Status::Healthy);
        assert_eq!(s.state.deadline_at, Some(at("2026-10-28T01:45:00Z")));
    }

    #[test]
    fn a_check_in_before_the_window_leaves_the_run_due() {
        let s = cron_snitch("0 12 * * *", "UTC", 600, 60);
        let s = arrive(&s, &ok("2026-03-10T12:05:00Z"), &NOTICES).snitch;
        assert_eq!(s.state.deadline_at, Some(at("2026-03-11T12:10:00Z")));
        // An extra run at 08:00 the next day counts for nothing.
        let s = arrive(&s, &ok("2026-03-11T08:00:00Z"), &NOTICES).snitch;
        assert_eq!(s.state.deadline_at, Some(at("2026-03-11T12:10:00Z")));
        let step = advance(&s, at("2026-03-11T12:10:00Z"));
        assert_eq!(
            kinds(&step),
            [(EventKind::Missing, Status::Healthy, Status::Failed)]
        );
    }

    #[test]
    fn an_error_alert_of_a_cron_snitch_is_once_between_two_runs() {
        let s = cron_snitch("0 * * * *", "UTC", 600, 60);
        let s = arrive(&s, &ok("2026-03-10T10:00:00Z"), &NOTICES).snitch;
        let step = arrive(&s, &err("2026-03-10T10:20:00Z"), &NOTICES);
        assert_eq!(
            kinds(&step),
            [(EventKind::Errored, Status::Healthy, Status::Errored)]
        );
        let s = arrive(&step.snitch, &ok("2026-03-10T10:30:00Z"), &NOTICES).snitch;
        // A second error before the next run: followed in the status, not announced.
        let step = arrive(&s, &err("2026-03-10T10:40:00Z"), &NOTICES);
        assert!(step.events.is_empty(), "{:?}", step.events);
        // After the 11:00 run, a new error is announced again.
        let s = arrive(&step.snitch, &ok("2026-03-10T11:00:00Z"), &NOTICES).snitch;
        let step = arrive(&s, &err("2026-03-10T11:05:00Z"), &NOTICES);
        assert_eq!(step.events.len(), 1);
    }

    #[test]
    fn an_outage_over_a_cron_window_defers_the_run_instead_of_alerting() {
        let s = cron_snitch("30 2 * * *", "UTC", 1_800, 60);
        let s = arrive(&s, &ok("2026-03-10T02:30:00Z"), &NOTICES).snitch;
        // We were down from 02:00 to 04:00 on the 11th, over the whole window.
        let outage = Outage {
            id: 7,
            started_at: at("2026-03-11T02:00:00Z"),
            ended_at: at("2026-03-11T04:00:00Z"),
        };
        let step = advance_through(&s, at("2026-03-11T04:00:01Z"), &[outage]);
        assert!(step.events.is_empty(), "{:?}", step.events);
        assert_eq!(step.deferred_by, [7]);
        // As if checked in at the resume: the next night's run is due.
        assert_eq!(
            step.snitch.state.deadline_at,
            Some(at("2026-03-12T03:00:00Z"))
        );
    }

    #[test]
    fn a_new_schedule_takes_effect_from_the_change_without_a_retroactive_alert() {
        let s = new_snitch(Interval::Weekly, AlertType::Basic);
        let s = arrive(&s, &ok("2026-03-02T10:00:00Z"), &NOTICES).snitch;
        let mut changed = s.clone();
        changed.cadence = cron_snitch("0 9 * * *", "UTC", 600, 60).cadence;
        // Changed at 09:30: today's 09:00 run is in the past and never alerted.
        let step = reschedule(&changed, true, at("2026-03-04T09:30:00Z"));
        assert_eq!(
            step.snitch.state.deadline_at,
            Some(at("2026-03-05T09:10:00Z"))
        );
        assert!(advance(&step.snitch, at("2026-03-05T09:09:59Z"))
            .events
            .is_empty());
    }

    #[test]
    fn tolerated_failures_and_misses_say_nothing_until_the_first_beyond() {
        let mut s = new_snitch(Interval::Hourly, AlertType::Basic);
        s.failure_tolerance = 2;
        s.missed_tolerance = 1;
        let s = arrive(&s, &ok("2026-11-22T03:10:00Z"), &NOTICES).snitch;
        // Two failed runs in a row are tolerated; the third alerts.
        let step = arrive(&s, &err("2026-11-22T04:10:00Z"), &NOTICES);
        assert!(step.events.is_empty(), "{:?}", step.events);
        assert_eq!(step.snitch.state.status, Status::Healthy);
        assert_eq!(
            step.snitch.state.deadline_at,
            Some(at("2026-11-22T06:00:00Z"))
        );
        let step = arrive(&step.snitch, &err("2026-11-22T05:10:00Z"), &NOTICES);
        assert!(step.events.is_empty(), "{:?}", step.events);
        let step = arrive(&step.snitch, &err("2026-11-22T06:10:00Z"), &NOTICES);
        assert_eq!(
            kinds(&step),
            [(EventKind::Errored, Status::Healthy, Status::Errored)]
        );
        // A success ends the count: two failures are tolerated again.
        let s = arrive(&step.snitch, &ok("2026-11-22T07:10:00Z"), &NOTICES).snitch;
        assert_eq!(s.state.consecutive_failures, 0);
        let step = arrive(&s, &err("2026-11-22T08:10:00Z"), &NOTICES);
        assert!(step.events.is_empty(), "{:?}", step.events);
        // One missed run is tolerated, the second is announced (counting only itself).
        let s = arrive(&step.snitch, &ok("2026-11-22T09:10:00Z"), &NOTICES).snitch;
        let step = advance(&s, at("2026-11-22T11:00:00Z"));
        assert!(step.events.is_empty(), "{:?}", step.events);
        assert_eq!(step.snitch.state.status, Status::Healthy);
        let step = advance(&step.snitch, at("2026-11-22T12:00:00Z"));
        assert_eq!(
            kinds(&step),
            [(EventKind::Missing, Status::Healthy, Status::Failed)]
        );
        assert_eq!(step.events[0].missed_periods, 1);
        // An interval's run is expected at its deadline, in no zone of its own.
        assert_eq!(step.events[0].expected_at, Some(at("2026-11-22T12:00:00Z")));
        assert_eq!(step.events[0].expected_at_local, None);
    }

    #[test]
    fn a_pending_snitchs_first_run_sets_its_status_whatever_the_tolerance() {
        let mut s = new_snitch(Interval::Hourly, AlertType::Basic);
        s.failure_tolerance = 5;
        let step = arrive(&s, &err("2026-11-22T03:10:00Z"), &NOTICES);
        assert_eq!(
            kinds(&step),
            [(EventKind::Errored, Status::Pending, Status::Errored)]
        );
    }

    fn start(t: &str, rid: Option<&str>) -> CheckIn {
        CheckIn::new(at(t), Outcome::Success, None)
            .with_kind(CheckInKind::Start)
            .with_run_id(rid.and_then(crate::runs::RunId::parse))
    }

    fn end(c: CheckIn, rid: Option<&str>) -> CheckIn {
        c.with_run_id(rid.and_then(crate::runs::RunId::parse))
    }

    /// A start satisfies the window without changing the status; its end closes the run
    /// with its duration and decides the status; the deadline counts from the start.
    #[test]
    fn a_run_counts_from_its_start_and_its_end_tells_how_it_went() {
        let s = arrive(
            &new_snitch(Interval::Hourly, AlertType::Basic),
            &ok("2026-11-22T09:10:00Z"),
            &NOTICES,
        )
        .snitch;
        let step = arrive(&s, &start("2026-11-22T10:50:00Z", Some("r1")), &NOTICES);
        assert!(step.events.is_empty(), "a start says nothing");
        let s = step.snitch;
        assert!(s.state.running());
        assert_eq!(s.state.status, Status::Healthy);
        assert_eq!(s.state.deadline_at, Some(at("2026-11-22T12:00:00Z")));
        // It ends after the hour it started in: the start already counted for 10:00.
        let step = arrive(&s, &end(err("2026-11-22T11:20:00Z"), Some("r1")), &NOTICES);
        assert_eq!(
            kinds(&step),
            [(EventKind::Errored, Status::Healthy, Status::Errored)]
        );
        let event = &step.events[0];
        assert_eq!(event.reason, Some(AlertReason::ExitStatus));
        let run = event.run.as_ref().expect("the run is told");
        assert_eq!(run.duration_ms, Some(30 * 60 * 1000));
        assert_eq!(run.exit_status.as_deref(), Some("2"));
        let s = step.snitch;
        assert!(!s.state.running());
        assert_eq!(s.state.deadline_at, Some(at("2026-11-22T12:00:00Z")));
        assert_eq!(s.state.last_run.as_deref(), Some(run));
    }

    /// A run open past its maximum runtime times out: `snitch.missing` with reason
    /// `timeout`, once; a start with its id again keeps it alive.
    #[test]
    fn a_run_that_never_ends_times_out_once_and_keep_alives_defer_it() {
        let mut s = arrive(
            &new_snitch(Interval::Daily, AlertType::Basic),
            &ok("2026-11-22T01:00:00Z"),
            &NOTICES,
        )
        .snitch;
        s.max_runtime_seconds = Some(600);
        let s = arrive(&s, &start("2026-11-23T02:00:00Z", Some("r1")), &NOTICES).snitch;
        assert_eq!(s.wake_at(), Some(at("2026-11-23T02:10:00Z")));
        let s = arrive(&s, &start("2026-11-23T02:08:00Z", Some("r1")), &NOTICES).snitch;
        assert_eq!(s.state.open_runs.len(), 1, "a keep-alive opens no run");
        let step = advance(&s, at("2026-11-23T02:17:59Z"));
        assert!(step.events.is_empty(), "kept alive until 02:18");
        let step = advance(&s, at("2026-11-23T03:00:00Z"));
        assert_eq!(
            kinds(&step),
            [(EventKind::Missing, Status::Healthy, Status::Failed)]
        );
        let event = &step.events[0];
        assert_eq!(event.reason, Some(AlertReason::Timeout));
        assert_eq!(event.at, at("2026-11-23T02:18:00Z"));
        let run = event.run.as_ref().expect("the run is told");
        assert!(run.timed_out);
        assert_eq!(run.duration_ms, Some(18 * 60 * 1000));
        let s = step.snitch;
        assert!(!s.state.running());
        // The next run starts and hangs too: already failed, nothing more is said.
        let s = arrive(&s, &start("2026-11-24T02:00:00Z", Some("r2")), &NOTICES).snitch;
        let step = advance(&s, at("2026-11-24T03:00:00Z"));
        assert!(step.events.is_empty());
        assert!(step
            .snitch
            .state
            .last_run
            .as_ref()
            .is_some_and(|r| r.timed_out));
        // A run that ends well brings it back.
        let s = arrive(&step.snitch, &start("2026-11-25T02:00:00Z", None), &NOTICES).snitch;
        let step = arrive(&s, &ok("2026-11-25T02:05:00Z"), &NOTICES);
        assert_eq!(
            kinds(&step),
            [(EventKind::Reporting, Status::Failed, Status::Healthy)]
        );
        assert_eq!(
            step.events[0].run.as_ref().and_then(|r| r.duration_ms),
            Some(5 * 60 * 1000)
        );
    }

    /// Several runs may be open, each by its id; past the cap the oldest gives way
    /// silently; a start without id replaces the open run without id; a log changes
    /// nothing.
    #[test]
    fn open_runs_are_paired_by_id_and_capped() {
        let s = arrive(
            &new_snitch(Interval::Daily, AlertType::Basic),
            &ok("2026-11-22T01:00:00Z"),
            &NOTICES,
        )
        .snitch;
        let mut step = Step::new(s, Vec::new());
        for n in 0..(OPEN_RUNS_MAX + 5) {
            let c = start("2026-11-22T02:00:00Z", Some(&format!("r{n}")));
            step = step.then(|s| check_in(s, &c, &NOTICES));
        }
        assert!(step.events.is_empty());
        let s = step.snitch;
        assert_eq!(s.state.open_runs.len(), OPEN_RUNS_MAX);
        assert_eq!(
            s.state.open_runs[0].run_id.as_ref().map(|r| r.as_str()),
            Some("r5")
        );
        let step = check_in(&s, &end(ok("2026-11-22T02:01:00Z"), Some("r50")), &NOTICES);
        assert_eq!(step.snitch.state.open_runs.len(), OPEN_RUNS_MAX - 1);
        assert!(step
            .snitch
            .state
            .open_runs
            .iter()
            .all(|r| r.run_id.as_ref().map(|r| r.as_str()) != Some("r50")));
        let s = step.snitch;
        let log = ok("2026-11-22T02:02:00Z").with_kind(CheckInKind::Log);
        assert_eq!(
            check_in(&s, &log, &NOTICES).snitch,
            s,
            "a log changes nothing"
        );

        let fresh = arrive(
            &new_snitch(Interval::Daily, AlertType::Basic),
            &ok("2026-11-22T01:00:00Z"),
            &NOTICES,
        )
        .snitch;
        let s = check_in(&fresh, &start("2026-11-22T02:00:00Z", None), &NOTICES).snitch;
        let s = check_in(&s, &start("2026-11-22T02:30:00Z", None), &NOTICES).snitch;
        assert_eq!(s.state.open_runs.len(), 1);
        assert_eq!(s.state.open_runs[0].started_at, at("2026-11-22T02:30:00Z"));
    }

    /// A pending snitch that starts a run stays pending; the run's end makes it healthy
    /// with a deadline from the start; a timeout while pending fails it with one.
    #[test]
    fn a_pending_snitch_runs_and_times_out_from_its_start() {
        let fresh = new_snitch(Interval::Hourly, AlertType::Basic);
        let s = arrive(&fresh, &start("2026-11-22T09:50:00Z", None), &NOTICES).snitch;
        assert_eq!(s.state.status, Status::Pending);
        assert_eq!(s.state.deadline_at, None);
        let step = arrive(&s, &ok("2026-11-22T10:05:00Z"), &NOTICES);
        assert_eq!(
            kinds(&step),
            [(EventKind::Reporting, Status::Pending, Status::Healthy)]
        );
        assert_eq!(
            step.snitch.state.deadline_at,
            Some(at("2026-11-22T11:00:00Z")),
            "due the hour after the start's"
        );
        let step = advance(&s, at("2026-11-22T10:59:00Z"));
        assert_eq!(
            kinds(&step),
            [(EventKind::Missing, Status::Pending, Status::Failed)]
        );
        assert_eq!(step.events[0].at, at("2026-11-22T10:50:00Z"));
        assert_eq!(
            step.snitch.state.deadline_at,
            Some(at("2026-11-22T11:00:00Z"))
        );
        Snitch::restore(step.snitch.to_record()).expect("a valid snitch");
    }

    /// A timed-out run within the failure tolerance says nothing; the client's duration
    /// wins over end less start.
    #[test]
    fn timeouts_count_against_the_failure_tolerance_and_reported_durations_win() {
        let mut s = arrive(
            &new_snitch(Interval::Daily, AlertType::Basic),
            &ok("2026-11-22T01:00:00Z"),
            &NOTICES,
        )
        .snitch;
        s.failure_tolerance = 1;
        s.max_runtime_seconds = Some(60);
        let s = arrive(&s, &start("2026-11-23T02:00:00Z", None), &NOTICES).snitch;
        let step = advance(&s, at("2026-11-23T02:05:00Z"));
        assert!(step.events.is_empty(), "the first failed run is tolerated");
        assert_eq!(step.snitch.state.status, Status::Healthy);
        let s = arrive(&step.snitch, &start("2026-11-24T02:00:00Z", None), &NOTICES).snitch;
        let step = arrive(
            &s,
            &ok("2026-11-24T02:00:30Z").with_duration_ms(Some(12_345)),
            &NOTICES,
        );
        assert_eq!(
            step.snitch
                .state
                .last_run
                .as_ref()
                .and_then(|r| r.duration_ms),
            Some(12_345)
        );
        assert_eq!(step.snitch.state.consecutive_failures, 0);
    }
}
