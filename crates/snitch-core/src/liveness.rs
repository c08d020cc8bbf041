//! Our own downtime (docs/rules.md#outages): servers record in the store that they are
//! alive, and a span in which no server of the store was alive for longer than the
//! outage threshold is an [`Outage`]. Deadlines that fell inside an outage send no alert:
//! the snitch gets a fresh deadline as if it had checked in when service resumed.

use chrono::Duration;

use crate::calendar::Timestamp;

/// The default of `outage_threshold_secs`: a gap in liveness shorter than this is not an
/// outage (a restart, a slow sweep).
pub const DEFAULT_OUTAGE_THRESHOLD: Duration = Duration::seconds(60);

/// How often a server records that it is alive, at most: well inside the threshold, so a
/// live server is never mistaken for a dead one.
pub fn heartbeat_interval(threshold: Duration) -> Duration {
    std::cmp::min(Duration::seconds(5), threshold / 4)
}

/// A span in which no server of the store was alive: from the last moment one was (its
/// last heartbeat, or its clean stop) to the moment service resumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    /// Assigned by the store, increasing.
    pub id: u64,
    /// The last moment a server was alive.
    pub started_at: Timestamp,
    /// When service resumed (the heartbeat that found the outage).
    pub ended_at: Timestamp,
}

impl Outage {
    /// Whether a deadline at `deadline` fell inside the outage, so missing it is not the
    /// job's fault. A deadline at the very start was due while a server was alive.
    pub fn covers(&self, deadline: Timestamp) -> bool {
        self.started_at < deadline && deadline <= self.ended_at
    }

    /// Whether the outage overlaps the time a job had to check in by `deadline`, from
    /// `window_start` (the start of the period it was due in): then missing the deadline
    /// may be ours, not the job's.
    pub fn overlaps(&self, window_start: Timestamp, deadline: Timestamp) -> bool {
        self.started_at < deadline && window_start < self.ended_at
    }
}

/// An outage as one case saw it: how many of its snitches got a fresh deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaseOutage {
    /// The outage.
    pub outage: Outage,
    /// How many of the case's snitches it gave a fresh deadline.
    pub snitches_deferred: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    #[test]
    fn an_outage_covers_deadlines_after_its_start_up_to_its_end() {
        let t = |s| {
            Utc.timestamp_opt(s, 0)
                .single()
                .unwrap_or_else(|| unreachable!("a valid time"))
        };
        let outage = Outage {
            id: 1,
            started_at: t(100),
            ended_at: t(200),
        };
        assert!(!outage.covers(t(100)));
        assert!(outage.covers(t(101)));
        assert!(outage.covers(t(200)));
        assert!(!outage.covers(t(201)));

        // A window that ends after the outage but began before its end overlaps it.
        assert!(outage.overlaps(t(150), t(260)));
        assert!(outage.overlaps(t(40), t(101)));
        assert!(!outage.overlaps(t(200), t(260)), "began as service resumed");
        assert!(!outage.overlaps(t(40), t(100)), "due as the outage began");
    }

    #[test]
    fn heartbeats_come_several_times_per_threshold() {
        assert_eq!(
            heartbeat_interval(DEFAULT_OUTAGE_THRESHOLD),
            Duration::seconds(5)
        );
        assert_eq!(
            heartbeat_interval(Duration::seconds(4)),
            Duration::seconds(1)
        );
    }
}
