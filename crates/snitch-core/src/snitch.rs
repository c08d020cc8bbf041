//! The snitch record, its check-ins and the events its transitions emit.

use crate::calendar::{Interval, Timestamp};
use crate::types::{
    AlertEmails, AlertType, CaseId, CheckInMessage, Notes, Outcome, SnitchName, Status, Tags, Token,
};

/// How many check-in offsets smart alerts learn from (behaviour.md section 4).
pub const SMART_OFFSETS_KEPT: usize = 10;
/// How many check-ins a store keeps per snitch (behaviour.md section 2).
pub const CHECK_INS_KEPT: usize = 100;

/// A monitor of one job: what the user configured and where the state machine stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snitch {
    pub token: Token,
    pub case_id: CaseId,
    pub name: SnitchName,
    pub tags: Tags,
    pub notes: Notes,
    pub interval: Interval,
    pub alert_type: AlertType,
    pub alert_email: AlertEmails,
    pub created_at: Timestamp,
    pub state: SnitchState,
    /// Bumped on every saved change; stores refuse a save made from a stale read.
    pub version: u64,
}

/// Where a snitch stands in the state machine of behaviour.md section 3.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnitchState {
    pub status: Status,
    /// The last successful check-in (error check-ins do not move it).
    pub checked_in_at: Option<Timestamp>,
    /// The last check-in of any outcome.
    pub last_check_in_at: Option<Timestamp>,
    /// The instant deadlines count from: the last check-in, or the last resume from a
    /// pause, whichever is later. `None` while pending.
    pub anchor_at: Option<Timestamp>,
    /// When the snitch is declared missing if nothing arrives. `None` while pending or
    /// paused. Always inside (or at the end of) the period it is due in.
    pub deadline_at: Option<Timestamp>,
    pub pause: Option<Pause>,
    /// Offsets in milliseconds of the recent check-ins from the start of their periods,
    /// oldest first, at most [`SMART_OFFSETS_KEPT`].
    pub smart_offsets_ms: Vec<i64>,
    /// When the last `snitch.errored` was emitted: at most one errored alert per period
    /// (the period of the current interval, so an interval change cannot double it).
    pub last_errored_alert_at: Option<Timestamp>,
    /// Whether the error the snitch is in (while `errored`) was announced: a recovery is
    /// announced only if its error was (behaviour.md section 8, "Alert economy").
    pub error_announced: bool,
    /// When the last `snitch.reporting` after an error was emitted: at most one per period.
    pub last_recovery_alert_at: Option<Timestamp>,
    /// How many events this snitch has emitted; event ids are built from it.
    pub event_seq: u64,
}

/// A pause in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    pub until: PauseUntil,
    /// The status to return to on unpause when no successful check-in came meanwhile.
    pub resume_status: Status,
    /// Whether a successful check-in arrived while paused.
    pub checked_in_while_paused: bool,
}

/// When a pause ends (api-v1.md 4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseUntil {
    /// At the next successful check-in.
    Healthy,
    /// Only by an explicit unpause.
    Unpaused,
    /// At this instant.
    At(Timestamp),
}

impl Snitch {
    /// The instant at which the deadline sweep must look at this snitch: its deadline, or
    /// the end of a timed pause. `None` when nothing can happen without a request.
    pub fn wake_at(&self) -> Option<Timestamp> {
        match &self.state.pause {
            Some(Pause {
                until: PauseUntil::At(t),
                ..
            }) => Some(*t),
            Some(_) => None,
            None => self.state.deadline_at,
        }
    }

    pub fn status(&self) -> Status {
        self.state.status
    }
}

/// One check-in as recorded in a snitch's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckIn {
    pub at: Timestamp,
    pub outcome: Outcome,
    pub message: Option<CheckInMessage>,
}

/// What happened to a snitch, as webhooks name it (api-v1.md 6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    Reporting,
    Missing,
    Errored,
    Paused,
}

impl EventKind {
    /// The webhook `type`, e.g. `snitch.missing`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Reporting => "snitch.reporting",
            EventKind::Missing => "snitch.missing",
            EventKind::Errored => "snitch.errored",
            EventKind::Paused => "snitch.paused",
        }
    }

    pub fn parse(raw: &str) -> Option<EventKind> {
        [
            EventKind::Reporting,
            EventKind::Missing,
            EventKind::Errored,
            EventKind::Paused,
        ]
        .into_iter()
        .find(|k| k.as_str() == raw)
    }

    /// Whether this event is also sent by e-mail (all but `snitch.paused`).
    pub fn alerts_by_email(self) -> bool {
        self != EventKind::Paused
    }
}

/// A transition worth telling the owners about, with what the snitch looked like then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Unique and stable: `<token>-<n>` for the n-th event of the snitch.
    pub id: String,
    pub kind: EventKind,
    /// When it happened; for `snitch.missing` the deadline that passed.
    pub at: Timestamp,
    pub case_id: CaseId,
    pub token: Token,
    pub name: SnitchName,
    pub notes: Notes,
    pub tags: Tags,
    pub alert_email: AlertEmails,
    pub status: Status,
    pub previous_status: Status,
    /// The last successful check-in when it happened.
    pub checked_in_at: Option<Timestamp>,
    /// The check-in that caused it, for `snitch.reporting` and `snitch.errored`.
    pub check_in: Option<CheckIn>,
    /// For `snitch.missing`: how many due points passed with no check-in, announced at
    /// once (behaviour.md section 8, "Catch-up is one event"); 0 for other kinds.
    pub missed_periods: u64,
}
