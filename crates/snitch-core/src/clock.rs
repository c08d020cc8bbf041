//! Where time comes from. The domain never reads the wall clock itself: the service asks
//! a [`Clock`] once per operation and passes `now` down, so tests can move time.
//!
//! This is the one module that reads the machine's clocks (clippy's `disallowed-methods`,
//! in `clippy.toml`, refuses them everywhere else): [`SystemClock`] for the time of the
//! product, and [`monotonic_now`] for measuring how long something took.

use std::sync::Mutex;

use chrono::{Duration, Timelike, Utc};

use crate::calendar::Timestamp;

/// A source of the current instant.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The real time of the machine.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place that reads the wall clock
    fn now(&self) -> Timestamp {
        Utc::now()
    }
}

/// The machine's monotonic clock, for measuring how long something took: latency in logs
/// and metrics, the age of a cached read, a test's failure bound. Never for a decision of
/// the product (a deadline, a limit, an expiry): those read a [`Clock`], which tests move.
pub fn monotonic_now() -> std::time::Instant {
    #[allow(clippy::disallowed_methods)] // the one place that reads the monotonic clock
    std::time::Instant::now()
}

/// A clock that stands still until told to move: for tests and simulations.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Timestamp>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            now: Mutex::new(start),
        }
    }

    /// Moves time forward (or backward, with a negative duration).
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }

    /// Moves time to `to` (forward or backward).
    pub fn set(&self, to: Timestamp) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Cuts an instant to whole milliseconds, the precision of the wire format and of every
/// store, so that what is saved reads back equal.
pub fn to_millis(t: Timestamp) -> Timestamp {
    // The sub-second part is never negative (earlier instants floor their seconds), so
    // this truncates toward the past, as `duration_trunc` does, without its arithmetic
    // on whole nanosecond timestamps (read on every check-in).
    t.with_nanosecond(t.nanosecond() / 1_000_000 * 1_000_000)
        .unwrap_or(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = Utc.with_ymd_and_hms(2026, 11, 22, 3, 0, 0).unwrap();
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(Duration::seconds(90));
        assert_eq!(clock.now(), start + Duration::seconds(90));
        clock.set(start);
        assert_eq!(clock.now(), start);
    }

    #[test]
    fn millis_truncate_sub_millisecond_parts() {
        let t =
            Utc.with_ymd_and_hms(2026, 11, 22, 3, 0, 0).unwrap() + Duration::nanoseconds(1_999_999);
        assert_eq!(to_millis(t).timestamp_subsec_nanos(), 1_000_000);
        // Toward the past on both sides of the epoch, as whole milliseconds count.
        let epoch = Utc.timestamp_opt(0, 0).unwrap();
        for nanos in [-1, -999_999, -1_000_001, 0, 999_999, 1_500_000_001] {
            let t = epoch + Duration::nanoseconds(nanos);
            let floor = chrono::DateTime::from_timestamp_millis(t.timestamp_millis());
            assert_eq!(Some(to_millis(t)), floor, "{nanos} ns");
        }
    }
}
