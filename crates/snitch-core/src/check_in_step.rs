//! A check-in batch's step, apart from the service that makes it: what a store that steps
//! a snitch where it lies ([`crate::Storage::step_in_place`]) is handed, so the storage
//! contract depends on this module and the state machine, not on the service.

use crate::calendar::Timestamp;
use crate::liveness::Outage;
use crate::machine::{self, Step};
use crate::outbox::{deliveries_for, Targets};
use crate::snitch::{CheckIn, Snitch};
use crate::storage::Change;
use crate::types::{Case, CaseId};

/// What every change gets before it is saved, by a check-in, an API call or the sweep
/// alike: the deliveries of its events and the server's history length.
pub(crate) fn prepare(change: &mut Change, case: &Case, targets: &Targets, keep_check_ins: usize) {
    change.deliveries = change
        .events
        .iter()
        .flat_map(|e| deliveries_for(e, case, targets))
        .collect();
    change.keep_check_ins = keep_check_ins;
}

/// Check-ins of one snitch waiting to be stepped and saved as one change, as the service
/// hands them to [`Storage::step_in_place`](crate::Storage::step_in_place).
#[derive(Debug)]
pub struct PendingCheckIns {
    pub(crate) batch: Vec<CheckIn>,
    pub(crate) outages: Vec<Outage>,
    /// The case's webhooks and channels, once read: a change with events needs them.
    pub(crate) hooks: Option<Targets>,
    pub(crate) keep_check_ins: usize,
    /// The wake-up time of the snitch `step` stepped, before the step.
    pub(crate) wake_before: Option<Option<Timestamp>>,
    /// The case whose webhooks `step` needed and did not have.
    pub(crate) hooks_wanted: Option<CaseId>,
}

impl PendingCheckIns {
    /// Check-ins of one snitch, in order, stepped with the known `outages`; `hooks`
    /// are the case's webhooks when already read; the change keeps the newest
    /// `keep_check_ins` check-ins. The service makes these; a store's tests may too.
    pub fn new(
        batch: Vec<CheckIn>,
        outages: Vec<Outage>,
        hooks: Option<Targets>,
        keep_check_ins: usize,
    ) -> Self {
        PendingCheckIns {
            batch,
            outages,
            hooks,
            keep_check_ins,
            wake_before: None,
            hooks_wanted: None,
        }
    }

    /// The change these check-ins make of `snitch` (stored, of `case`: `None` when the
    /// case is not stored), ready to save; `None` when it has events and the case's
    /// webhooks are not read yet (the service reads them and tries again).
    pub fn step(&mut self, snitch: &Snitch, case: Option<&Case>) -> Option<Change> {
        let orphan;
        let case = match case {
            Some(case) => case,
            // A snitch whose case is gone still records check-ins.
            None => {
                orphan = Case::new(snitch.case_id.clone());
                &orphan
            }
        };
        let mut change = self.change_from(snitch, case);
        let none = Targets::default();
        let hooks = match &self.hooks {
            Some(hooks) => hooks,
            None if change.events.is_empty() => &none,
            None => {
                self.hooks_wanted = Some(case.id.clone());
                return None;
            }
        };
        prepare(&mut change, case, hooks, self.keep_check_ins);
        self.wake_before = Some(snitch.wake_at());
        Some(change)
    }

    /// The change these check-ins make of `snitch`, without deliveries: one copy of it,
    /// stepped in place through every check-in in order.
    pub(crate) fn change_from(&self, snitch: &Snitch, case: &Case) -> Change {
        // Times never go backwards for a snitch: a check-in read the clock before a newer
        // one (on this server or another) was saved counts as at that one's time.
        let mut floor = snitch.state.last_check_in_at.max(snitch.state.anchor_at);
        let mut stamped = Vec::with_capacity(self.batch.len());
        let mut step = Step::new(snitch.clone(), Vec::new());
        for check_in in &self.batch {
            let at = floor.map_or(check_in.at, |f| f.max(check_in.at));
            floor = Some(at);
            let number = step.snitch.state.check_in_seq + 1;
            let mut check_in = CheckIn {
                at,
                number,
                ..check_in.clone()
            };
            step = step.then_owned(|s| machine::advance_through_owned(s, at, &self.outages));
            let run_before = step.snitch.state.last_run.clone();
            step = step.then_owned(|s| machine::check_in_owned(s, &check_in, &case.plan));
            step.snitch.state.check_in_seq = number;
            // The end of a run keeps the run's duration in the history (docs/rules.md#runs).
            let last_run = &step.snitch.state.last_run;
            if check_in.duration_ms.is_none() && *last_run != run_before {
                check_in.duration_ms = last_run.as_ref().and_then(|r| r.duration_ms);
            }
            stamped.push(check_in);
        }
        let mut change = Change::new(snitch, step.snitch, stamped, step.events);
        change.deferred_by = step.deferred_by;
        change
    }
}
