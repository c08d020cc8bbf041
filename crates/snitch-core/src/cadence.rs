//! When a snitch's job is expected: one of the 17 calendar intervals
//! (docs/rules.md#time-and-periods), or a cron schedule in a time zone with its windows
//! (docs/rules.md#expected-runs). The state machine asks the cadence where deadlines fall;
//! the rules that come after (outages, catch-up, the alert economy) are the same for both.

use std::sync::Arc;

use chrono::Duration;

use crate::calendar::{Interval, Timestamp};
use crate::schedule::{ExpectedRuns, HORIZON_YEARS};
use crate::types::{AlertType, SMART_NEEDS_HOUR};
use crate::validation::Validation;

/// The name a cron snitch shows where an interval's name would be (`interval`,
/// `type.interval`).
pub const CRON: &str = "cron";

/// The validation message of `smart` with a schedule.
pub const SMART_NEEDS_INTERVAL: &str = "smart alerts need an interval, not a schedule";

/// When a snitch's job is expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cadence {
    /// Once per calendar-aligned period of one of the 17 intervals.
    Interval(Interval),
    /// At the times of a cron schedule, each within its window. Shared: a snitch is
    /// cloned at every step, and a schedule is large next to an interval.
    Cron(Arc<ExpectedRuns>),
}

impl From<ExpectedRuns> for Cadence {
    fn from(runs: ExpectedRuns) -> Self {
        Cadence::Cron(Arc::new(runs))
    }
}

impl From<Interval> for Cadence {
    fn from(interval: Interval) -> Self {
        Cadence::Interval(interval)
    }
}

impl Cadence {
    /// The interval's name, or [`CRON`].
    pub fn name(&self) -> &'static str {
        match self {
            Cadence::Interval(interval) => interval.as_str(),
            Cadence::Cron(_) => CRON,
        }
    }

    /// The interval, for an interval snitch.
    pub fn interval(&self) -> Option<Interval> {
        match self {
            Cadence::Interval(interval) => Some(*interval),
            Cadence::Cron(_) => None,
        }
    }

    /// The schedule and its windows, for a cron snitch.
    pub fn expected_runs(&self) -> Option<&ExpectedRuns> {
        match self {
            Cadence::Interval(_) => None,
            Cadence::Cron(runs) => Some(runs.as_ref()),
        }
    }

    /// Whether `alert_type` may go with this cadence: `smart` needs an interval of an hour
    /// or longer (docs/rules.md#smart-alerts).
    pub fn check_alert_type(&self, alert_type: AlertType) -> Result<(), Validation> {
        match (self, alert_type) {
            (_, AlertType::Basic) => Ok(()),
            (Cadence::Interval(interval), AlertType::Smart) if !interval.is_sub_hourly() => Ok(()),
            (Cadence::Interval(_), AlertType::Smart) => {
                Err(Validation::new("alert_type", SMART_NEEDS_HOUR))
            }
            (Cadence::Cron(_), AlertType::Smart) => {
                Err(Validation::new("alert_type", SMART_NEEDS_INTERVAL))
            }
        }
    }
}

/// A deadline a schedule may not have: when no run falls within the search horizon
/// ([`HORIZON_YEARS`] of wall clock time from `from`), the snitch is looked at again at the
/// horizon's end, and searched anew from there.
pub(crate) fn or_horizon(deadline: Option<Timestamp>, from: Timestamp) -> Timestamp {
    deadline.unwrap_or_else(|| from + Duration::days(365 * i64::from(HORIZON_YEARS)))
}
