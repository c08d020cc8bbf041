//! Badges (docs/rules.md#badges): a case's or a tag's health in one word, `up`, `late` or
//! `down`, for a README or a wiki page, read with a badge key that can read nothing else.

use crate::calendar::{period_of, Timestamp};
use crate::snitch::Snitch;
use crate::types::Status;

/// What a badge shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BadgeState {
    /// Every snitch is healthy, pending or paused, none near its deadline.
    Up,
    /// None is failing, but one is near its deadline: a schedule's run is overdue within
    /// its grace, or an interval's check-in is still missing in the last tenth of its
    /// period.
    Late,
    /// One is failed (missing) or errored.
    Down,
}

impl BadgeState {
    /// `up`, `late` or `down`.
    pub fn as_str(self) -> &'static str {
        match self {
            BadgeState::Up => "up",
            BadgeState::Late => "late",
            BadgeState::Down => "down",
        }
    }
}

/// The state of `snitches` at `now`: the worst of theirs.
pub fn badge_state<'a>(
    snitches: impl IntoIterator<Item = &'a Snitch>,
    now: Timestamp,
) -> BadgeState {
    snitches
        .into_iter()
        .map(|s| snitch_badge_state(s, now))
        .max()
        .unwrap_or(BadgeState::Up)
}

/// One snitch's state at `now`.
pub fn snitch_badge_state(snitch: &Snitch, now: Timestamp) -> BadgeState {
    match snitch.status() {
        Status::Failed | Status::Errored => BadgeState::Down,
        Status::Healthy if is_late(snitch, now) => BadgeState::Late,
        _ => BadgeState::Up,
    }
}

fn is_late(snitch: &Snitch, now: Timestamp) -> bool {
    let Some(deadline) = snitch.state().deadline_at() else {
        return false;
    };
    if now >= deadline {
        // Past it: the sweep is about to declare it missing.
        return true;
    }
    if let Some(runs) = snitch.cadence().expected_runs() {
        // The run was expected at the deadline less the grace.
        return now >= deadline - runs.grace();
    }
    match snitch.cadence().interval() {
        Some(interval) => {
            let period = period_of(interval, now);
            let tenth = (period.end() - period.start()) / 10;
            deadline - now <= tenth && deadline <= period.end()
        }
        None => false,
    }
}
