//! The state machine of behaviour.md sections 3 and 4, as pure functions.
//!
//! Each step takes a snitch and the instant it happens at and returns the new snitch and
//! the events it emits. Nothing here reads a clock or touches storage; the service loads,
//! steps and saves.
//!
//! Deadlines: a snitch whose last check-in (or resume) fell in period P is due in period
//! P+1, at the *due point* of that period: its end for `basic`, or the learned point of
//! section 4 for `smart`. When a due point passes with no check-in the snitch is missing,
//! and it becomes due in the following period, so a snitch that stays silent emits one
//! `snitch.missing` per period.

use chrono::Duration;

use crate::calendar::{Period, Timestamp};
use crate::snitch::{
    CheckIn, Event, EventKind, Pause, PauseUntil, Snitch, SnitchState, SMART_OFFSETS_KEPT,
};
use crate::types::{AlertType, Plan, Status};
use crate::validation::Validations;

/// Smart deadlines need at least this many learned offsets.
pub const SMART_MIN_SAMPLES: usize = 3;
/// The smallest margin a smart deadline leaves after the latest learned offset.
pub const SMART_MIN_MARGIN: Duration = Duration::minutes(5);

pub const PAUSED_WHILE_PENDING: &str = "can't be paused while pending";

/// The outcome of one step: the snitch as it is now and what it emitted, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub snitch: Snitch,
    pub events: Vec<Event>,
}

impl Step {
    fn unchanged(snitch: &Snitch) -> Step {
        Step {
            snitch: snitch.clone(),
            events: Vec::new(),
        }
    }

    /// Applies a further step to the result of this one, keeping all events in order.
    pub fn then(mut self, next: impl FnOnce(&Snitch) -> Step) -> Step {
        let mut step = next(&self.snitch);
        self.events.append(&mut step.events);
        step.events = self.events;
        step
    }

    /// Whether the step changed anything that must be saved.
    pub fn changes(&self, before: &Snitch) -> bool {
        !self.events.is_empty() || self.snitch != *before
    }
}

/// When a snitch with these learned offsets must have checked in during `period`.
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
fn period_due(snitch: &Snitch, deadline: Timestamp) -> Period {
    snitch
        .interval
        .period_of(deadline - Duration::nanoseconds(1))
}

/// Deadline of a snitch whose last check-in or resume was at `anchor`.
fn deadline_after(snitch: &Snitch, anchor: Timestamp) -> Timestamp {
    due_point(snitch, snitch.interval.period_of(anchor).next())
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
        check_in: check_in.cloned(),
    }
}

/// Brings a snitch up to `now`: ends a timed pause whose time has come, and declares it
/// missing once for every due point that passed with no check-in.
pub fn advance(snitch: &Snitch, now: Timestamp) -> Step {
    let mut s = snitch.clone();
    let mut events = Vec::new();
    while let Some(wake) = s.wake_at().filter(|w| *w <= now) {
        if s.state.pause.is_some() {
            resume(&mut s, wake);
            continue;
        }
        let previous = s.state.status;
        s.state.status = Status::Failed;
        let due_period = period_due(&s, wake);
        s.state.deadline_at = Some(due_point(&s, due_period.next()));
        events.push(emit(&mut s, EventKind::Missing, wake, previous, None));
    }
    Step { snitch: s, events }
}

/// Records a check-in at `check_in.at` (behaviour.md section 3). Call [`advance`] first so
/// that deadlines passed before it are accounted for.
pub fn check_in(snitch: &Snitch, check_in: &CheckIn, plan: &Plan) -> Step {
    let now = check_in.at;
    let mut s = snitch.clone();
    let mut events = Vec::new();
    let success = check_in.outcome.is_success();
    let period = s.interval.period_of(now);

    s.state.last_check_in_at = Some(now);
    s.state.anchor_at = Some(now);
    if success {
        s.state.checked_in_at = Some(now);
    }
    let offsets = &mut s.state.smart_offsets_ms;
    offsets.push((now - period.start()).num_milliseconds());
    if offsets.len() > SMART_OFFSETS_KEPT {
        offsets.remove(0);
    }

    if let Some(pause) = &mut s.state.pause {
        if !success {
            // An error while paused is recorded but changes nothing: alerts are muted.
            return Step { snitch: s, events };
        }
        if pause.until != PauseUntil::Healthy {
            pause.checked_in_while_paused = true;
            return Step { snitch: s, events };
        }
        s.state.pause = None;
    }

    let previous = s.state.status;
    if !success && plan.error_notices {
        s.state.status = Status::Errored;
        if s.state.errored_alert_period != Some(period.start()) {
            s.state.errored_alert_period = Some(period.start());
            events.push(emit(
                &mut s,
                EventKind::Errored,
                now,
                previous,
                Some(check_in),
            ));
        }
    } else {
        s.state.status = Status::Healthy;
        if previous != Status::Healthy {
            events.push(emit(
                &mut s,
                EventKind::Reporting,
                now,
                previous,
                Some(check_in),
            ));
        }
    }
    s.state.deadline_at = Some(deadline_after(&s, now));
    Step { snitch: s, events }
}

/// Pauses a snitch until `until` (behaviour.md section 3). A pending snitch cannot be
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
            Ok(Step {
                snitch: s,
                events: Vec::new(),
            })
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
            Ok(Step {
                snitch: s,
                events: vec![event],
            })
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
    Step {
        snitch: s,
        events: Vec::new(),
    }
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

/// Recomputes the deadline after the interval or alert type changed (behaviour.md
/// section 3, "Update"). Learned offsets belong to the old periods, so a new interval
/// forgets them.
pub fn reschedule(snitch: &Snitch, interval_changed: bool, now: Timestamp) -> Step {
    let mut s = snitch.clone();
    if interval_changed {
        s.state.smart_offsets_ms.clear();
    }
    if s.state.pause.is_some() {
        return Step {
            snitch: s,
            events: Vec::new(),
        };
    }
    if let Some(anchor) = s.state.anchor_at {
        let mut period = s.interval.period_of(anchor).next();
        if s.state.status == Status::Failed {
            // Already alerted: the next alert is for the next period that ends silent,
            // not an immediate repeat for the periods already reported.
            let current = s.interval.period_of(now);
            if current.start() > period.start() {
                period = current;
            }
            if due_point(&s, period) <= now {
                period = period.next();
            }
        }
        s.state.deadline_at = Some(due_point(&s, period));
    }
    Step {
        snitch: s,
        events: Vec::new(),
    }
}

/// The state of a snitch that was just created.
pub fn initial_state() -> SnitchState {
    SnitchState::default()
}
