//! Failed authentications per client address: a token bucket (governor) of failures per
//! address; an address that has used its bucket up is blocked until a failure would be
//! allowed again, and while blocked its requests are refused before any key is checked
//! (a correct key included), so guessing keys runs at the bucket's rate at most.
//!
//! The address comes from `ConnectInfo<SocketAddr>`; IPv6 clients are keyed by their /64
//! (one host usually holds a whole /64). A router served without connect info keys every
//! client alike: one shared bucket.
//!
//! Time comes from the service's [`Clock`] (through [`LimitClock`], for governor too), so
//! tests move it by hand. A wall-clock step backwards holds a bucket's refill (and a
//! block) until the clock catches up again: limits never loosen by one.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::Extensions;
use governor::clock::Clock as _;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{NotUntil, Quota, RateLimiter};
use snitch_core::{Clock, Timestamp};

/// Governor's clock over ours: instants are the time since the Unix epoch (never before
/// it), read from the service's [`Clock`] instead of the machine's monotonic clock.
#[derive(Clone)]
pub(crate) struct LimitClock(Arc<dyn Clock>);

impl LimitClock {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        LimitClock(clock)
    }

    /// The current instant of our clock.
    pub(crate) fn timestamp(&self) -> Timestamp {
        self.0.now()
    }

    /// How long until `not_until` allows the next request, from now.
    pub(crate) fn wait(&self, not_until: &NotUntil<Duration>) -> Duration {
        not_until.wait_time_from(self.now())
    }
}

impl std::fmt::Debug for LimitClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LimitClock").finish_non_exhaustive()
    }
}

impl governor::clock::Clock for LimitClock {
    type Instant = Duration;

    fn now(&self) -> Duration {
        since_epoch(self.0.now())
    }
}

fn since_epoch(t: Timestamp) -> Duration {
    (t - Timestamp::UNIX_EPOCH).to_std().unwrap_or_default()
}

/// A keyed token bucket on our clock.
pub(crate) type KeyedLimiter<K> =
    RateLimiter<K, DefaultKeyedStateStore<K>, LimitClock, NoOpMiddleware<Duration>>;

/// A keyed limiter of `quota` reading `clock`.
pub(crate) fn keyed_limiter<K: Hash + Eq + Clone>(
    quota: Quota,
    clock: LimitClock,
) -> KeyedLimiter<K> {
    RateLimiter::new(quota, DefaultKeyedStateStore::default(), clock)
}

/// How many failed authentications an address may make: `burst` at once, then one more
/// every `60 / per_minute` seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthFailureLimit {
    /// Failures refilled per minute (default 10).
    pub per_minute: NonZeroU32,
    /// Failures allowed at once (default 20).
    pub burst: NonZeroU32,
}

impl AuthFailureLimit {
    /// `burst` failures at once, then `per_minute` a minute.
    pub fn new(per_minute: NonZeroU32, burst: NonZeroU32) -> Self {
        AuthFailureLimit { per_minute, burst }
    }
}

impl Default for AuthFailureLimit {
    fn default() -> Self {
        AuthFailureLimit {
            per_minute: NonZeroU32::new(10).unwrap_or(NonZeroU32::MIN),
            burst: NonZeroU32::new(20).unwrap_or(NonZeroU32::MIN),
        }
    }
}

/// Whom a failure is counted against: an address (IPv6 by /64), or `None` when the
/// router runs without connect info.
pub(crate) type Client = Option<IpAddr>;

/// The client of a request, from its `ConnectInfo<SocketAddr>`.
pub(crate) fn client_of(extensions: &Extensions) -> Client {
    let ConnectInfo(addr) = extensions.get::<ConnectInfo<SocketAddr>>()?;
    Some(client_address(addr.ip()))
}

pub(crate) use snitch_core::observer::client_address;

/// The smallest number of tracked clients at which stale entries are swept.
const SWEEP_AT_LEAST: usize = 1024;

pub(crate) struct FailureLimiter {
    clock: LimitClock,
    failures: KeyedLimiter<Client>,
    /// Until when each blocked client is blocked.
    blocked: Mutex<HashMap<Client, Timestamp>>,
    /// Tracked clients beyond which the next failure sweeps stale entries (doubling, so
    /// sweeping stays amortised O(1) per failure).
    sweep_at: AtomicUsize,
}

impl FailureLimiter {
    pub(crate) fn new(limit: AuthFailureLimit, clock: LimitClock) -> Self {
        let quota = Quota::per_minute(limit.per_minute).allow_burst(limit.burst);
        FailureLimiter {
            failures: keyed_limiter(quota, clock.clone()),
            clock,
            blocked: Mutex::new(HashMap::new()),
            sweep_at: AtomicUsize::new(SWEEP_AT_LEAST),
        }
    }

    /// How much longer `client` is blocked, if it is.
    pub(crate) fn blocked_for(&self, client: &Client) -> Option<Duration> {
        let mut blocked = self.lock();
        let until = *blocked.get(client)?;
        let left = (until - self.clock.timestamp())
            .to_std()
            .unwrap_or_default();
        if left.is_zero() {
            blocked.remove(client);
            return None;
        }
        Some(left)
    }

    /// Counts a failure of `client`; when it is one too many, blocks the client and
    /// returns for how long.
    pub(crate) fn record_failure(&self, client: Client) -> Option<Duration> {
        let result = self.failures.check_key(&client);
        self.sweep_if_large();
        let not_until = result.err()?;
        let now = self.clock.timestamp();
        let wait = not_until.wait_time_from(since_epoch(now));
        let until = chrono::TimeDelta::from_std(wait)
            .ok()
            .and_then(|wait| now.checked_add_signed(wait))
            .unwrap_or(Timestamp::MAX_UTC);
        self.lock().insert(client, until);
        Some(wait)
    }

    fn sweep_if_large(&self) {
        let tracked = self.failures.len();
        if tracked < self.sweep_at.load(Ordering::Relaxed) {
            return;
        }
        self.failures.retain_recent();
        self.failures.shrink_to_fit();
        let now = self.clock.timestamp();
        let mut blocked = self.lock();
        blocked.retain(|_, until| *until > now);
        blocked.shrink_to_fit();
        let left = self.failures.len().max(blocked.len());
        self.sweep_at
            .store((left * 2).max(SWEEP_AT_LEAST), Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Client, Timestamp>> {
        self.blocked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use snitch_core::ManualClock;

    fn manual_clock() -> Arc<ManualClock> {
        let start = chrono::Utc.with_ymd_and_hms(2026, 11, 22, 3, 0, 0).unwrap();
        Arc::new(ManualClock::new(start))
    }

    fn client(addr: &str) -> Client {
        let mut extensions = Extensions::new();
        extensions.insert(ConnectInfo(addr.parse::<SocketAddr>().expect("address")));
        client_of(&extensions)
    }

    #[test]
    fn clients_are_addresses_and_ipv6_clients_their_64() {
        assert_eq!(client("10.0.0.1:80"), client("10.0.0.1:9999"));
        assert_ne!(client("10.0.0.1:80"), client("10.0.0.2:80"));
        assert_eq!(client("[2001:db8::1]:80"), client("[2001:db8::ffff:1]:80"));
        assert_ne!(client("[2001:db8::1]:80"), client("[2001:db8:0:1::1]:80"));
        assert_eq!(client("[::ffff:10.0.0.1]:80"), client("10.0.0.1:80"));
        assert_eq!(client_of(&Extensions::new()), None);
    }

    #[test]
    fn a_client_is_blocked_after_its_burst_of_failures_and_others_are_not() {
        let clock = manual_clock();
        let limiter = FailureLimiter::new(
            AuthFailureLimit {
                per_minute: NonZeroU32::MIN,
                burst: NonZeroU32::new(2).expect("non-zero"),
            },
            LimitClock::new(clock.clone()),
        );
        let (a, b) = (client("10.0.0.1:1"), client("10.0.0.2:1"));
        assert_eq!(limiter.record_failure(a), None);
        assert_eq!(limiter.record_failure(a), None);
        assert_eq!(limiter.blocked_for(&a), None, "at the limit, not over it");
        // One failure a minute refills: the next is allowed a minute after the first.
        let wait = limiter.record_failure(a).expect("over the limit");
        assert_eq!(wait, Duration::from_secs(60));
        assert_eq!(limiter.blocked_for(&a), Some(Duration::from_secs(60)));
        assert_eq!(limiter.blocked_for(&b), None);
        assert_eq!(limiter.record_failure(b), None);

        clock.advance(chrono::Duration::seconds(59));
        assert_eq!(limiter.blocked_for(&a), Some(Duration::from_secs(1)));
        clock.advance(chrono::Duration::seconds(1));
        assert_eq!(
            limiter.blocked_for(&a),
            None,
            "unblocked when the minute is up"
        );
        // One failure refilled, and only one.
        assert_eq!(limiter.record_failure(a), None);
        assert_eq!(limiter.record_failure(a), Some(Duration::from_secs(60)));
    }

    #[test]
    fn a_step_back_of_the_clock_never_unblocks_early() {
        let clock = manual_clock();
        let limiter = FailureLimiter::new(
            AuthFailureLimit {
                per_minute: NonZeroU32::MIN,
                burst: NonZeroU32::MIN,
            },
            LimitClock::new(clock.clone()),
        );
        let a = client("10.0.0.1:1");
        assert_eq!(limiter.record_failure(a), None);
        assert_eq!(limiter.record_failure(a), Some(Duration::from_secs(60)));
        clock.advance(chrono::Duration::seconds(-30));
        assert_eq!(limiter.blocked_for(&a), Some(Duration::from_secs(90)));
        assert!(limiter.record_failure(a).is_some());
    }
}
