//! Dashboard sessions, kept on the server: the cookie holds only a random id; the id
//! names the digest of the API key the session signed in with (never the key), a CSRF
//! token for its forms and when it expires.
//!
//! Every request re-checks the key by its digest, so revoking a key ends its sessions
//! within the key refresh (a second). Sign-out deletes the session.
//!
//! Expiry is read from the service's [`Clock`], so tests move time by hand.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use snitch_core::{Clock, Timestamp};

use base64::Engine;
use rand::RngCore;
use subtle::ConstantTimeEq;

use crate::keys::KeyDigest;

/// At most this many sessions are kept; past it, expired ones are dropped first, then
/// the ones closest to expiring, so signing in never fails for lack of room.
pub const MAX_SESSIONS: usize = 10_000;

/// At most this many sessions per API key: past it, the key's own oldest goes, so one
/// key signing in again and again never pushes out the sessions of other keys (cases).
pub const MAX_SESSIONS_PER_KEY: usize = 16;

/// 32 random bytes from the thread's CSPRNG, URL-safe base64 (43 characters).
pub(crate) fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether two secrets are equal, in time independent of where they differ.
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    !a.is_empty() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// One signed-in browser.
#[derive(Clone)]
pub(crate) struct Session {
    pub key: KeyDigest,
    /// The token every form of this session carries; a POST without it is refused.
    pub csrf: String,
    pub expires: Timestamp,
    /// Order of sign-in: of sessions expiring at the same instant, the older goes first.
    seq: u64,
}

/// The sessions of one dashboard, by id.
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
    clock: Arc<dyn Clock>,
    ttl: Duration,
    max: usize,
    started: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the ids or tokens: they are credentials.
        f.debug_struct("Sessions")
            .field("live", &self.lock().len())
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Sessions {
    pub(crate) fn new(ttl: Duration, max: usize, clock: Arc<dyn Clock>) -> Self {
        Sessions {
            by_id: Mutex::new(HashMap::new()),
            clock,
            ttl,
            max: max.max(1),
            started: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        // Every update is one insert or remove: a panic elsewhere leaves it whole.
        self.by_id.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a session for `key`; returns its id (for the cookie) and the session.
    pub(crate) fn start(&self, key: KeyDigest) -> (String, Session) {
        let now = self.clock.now();
        let session = Session {
            key,
            csrf: random_secret(),
            // A TTL too long for a timestamp never expires.
            expires: chrono::TimeDelta::from_std(self.ttl)
                .ok()
                .and_then(|ttl| now.checked_add_signed(ttl))
                .unwrap_or(Timestamp::MAX_UTC),
            seq: self
                .started
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        };
        let id = random_secret();
        let mut sessions = self.lock();
        let mut own: Vec<(Timestamp, u64, String)> = sessions
            .iter()
            .filter(|(_, s)| s.key == key)
            .map(|(id, s)| (s.expires, s.seq, id.clone()))
            .collect();
        if own.len() >= MAX_SESSIONS_PER_KEY {
            own.sort_unstable();
            for (_, _, id) in &own[..=own.len() - MAX_SESSIONS_PER_KEY] {
                sessions.remove(id);
            }
        }
        if sessions.len() >= self.max {
            sessions.retain(|_, s| s.expires > now);
        }
        while sessions.len() >= self.max {
            let soonest = sessions
                .iter()
                .min_by_key(|(_, s)| (s.expires, s.seq))
                .map(|(id, _)| id.clone());
            match soonest {
                Some(id) => sessions.remove(&id),
                None => break,
            };
        }
        sessions.insert(id.clone(), session.clone());
        (id, session)
    }

    /// The live session with this id; an expired one is removed.
    pub(crate) fn get(&self, id: &str) -> Option<Session> {
        let mut sessions = self.lock();
        let session = sessions.get(id)?;
        if session.expires <= self.clock.now() {
            sessions.remove(id);
            return None;
        }
        Some(session.clone())
    }

    /// Ends a session (sign-out, or its key was revoked); `false` when there was none.
    pub(crate) fn end(&self, id: &str) -> bool {
        self.lock().remove(id).is_some()
    }

    /// How long a session lasts from sign-in.
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
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

    fn sessions(ttl: Duration, max: usize) -> Sessions {
        Sessions::new(ttl, max, manual_clock())
    }

    #[test]
    fn sessions_are_random_found_and_ended() {
        let sessions = sessions(Duration::from_secs(60), 10);
        let key = KeyDigest::of("some-key-0123456789abcdef0123456789");
        let (a, sa) = sessions.start(key);
        let (b, sb) = sessions.start(key);
        assert_ne!(a, b);
        assert_ne!(sa.csrf, sb.csrf);
        assert_eq!(a.len(), 43);
        assert_eq!(sessions.get(&a).map(|s| s.csrf), Some(sa.csrf));
        assert!(sessions.end(&a));
        assert!(sessions.get(&a).is_none());
        assert!(!sessions.end(&a));
        assert!(sessions.get(&b).is_some());
        assert!(sessions.get("").is_none());
    }

    #[test]
    fn an_expired_session_is_gone() {
        let sessions = sessions(Duration::ZERO, 10);
        let (id, _) = sessions.start(KeyDigest::of("k"));
        assert!(sessions.get(&id).is_none());
        assert_eq!(sessions.len(), 0);
    }

    #[test]
    fn a_session_lasts_its_ttl_on_the_clock() {
        let clock = manual_clock();
        let sessions = Sessions::new(Duration::from_secs(60), 10, clock.clone());
        let (id, session) = sessions.start(KeyDigest::of("k"));
        assert_eq!(session.expires, clock.now() + chrono::Duration::seconds(60));
        clock.advance(chrono::Duration::milliseconds(59_999));
        assert!(
            sessions.get(&id).is_some(),
            "live until its last millisecond"
        );
        clock.advance(chrono::Duration::milliseconds(1));
        assert!(sessions.get(&id).is_none(), "gone when the TTL is up");
        assert_eq!(sessions.len(), 0);
    }

    #[test]
    fn a_full_store_drops_expired_sessions_before_live_ones() {
        let clock = manual_clock();
        let sessions = Sessions::new(Duration::from_secs(60), 3, clock.clone());
        let (old, _) = sessions.start(KeyDigest::of("old"));
        clock.advance(chrono::Duration::seconds(30));
        let (a, _) = sessions.start(KeyDigest::of("a"));
        let (b, _) = sessions.start(KeyDigest::of("b"));
        clock.advance(chrono::Duration::seconds(30));
        // `old` has expired: the new session takes its place, not a live one's.
        let (c, _) = sessions.start(KeyDigest::of("c"));
        assert_eq!(sessions.len(), 3);
        assert!(sessions.get(&old).is_none());
        for id in [&a, &b, &c] {
            assert!(sessions.get(id).is_some());
        }
        // Full of live sessions: the one closest to expiring goes (of equals, the older).
        let (d, _) = sessions.start(KeyDigest::of("d"));
        assert!(sessions.get(&a).is_none());
        for id in [&b, &c, &d] {
            assert!(sessions.get(id).is_some());
        }
    }

    #[test]
    fn a_ttl_too_long_for_a_timestamp_never_expires() {
        let sessions = sessions(Duration::MAX, 10);
        let (id, session) = sessions.start(KeyDigest::of("k"));
        assert_eq!(session.expires, Timestamp::MAX_UTC);
        assert!(sessions.get(&id).is_some());
    }

    #[test]
    fn a_flood_of_sign_ins_keeps_at_most_max_sessions_and_the_newest() {
        let sessions = sessions(Duration::from_secs(60), 100);
        let ids: Vec<String> = (0..1_000)
            .map(|i| sessions.start(KeyDigest::of(&format!("key {i}"))).0)
            .collect();
        assert_eq!(sessions.len(), 100);
        assert!(sessions.get(&ids[999]).is_some());
        assert!(sessions.get(&ids[0]).is_none());
    }

    #[test]
    fn one_key_signing_in_again_and_again_never_pushes_out_another_keys_session() {
        let sessions = sessions(Duration::from_secs(60), 100);
        let (theirs, _) = sessions.start(KeyDigest::of("their-key"));
        let flooder = KeyDigest::of("flooding-key");
        let ids: Vec<String> = (0..1_000).map(|_| sessions.start(flooder).0).collect();
        assert!(
            sessions.get(&theirs).is_some(),
            "another key's session survives"
        );
        assert_eq!(sessions.len(), 1 + MAX_SESSIONS_PER_KEY);
        assert!(sessions.get(&ids[999]).is_some(), "the newest is kept");
        assert!(sessions.get(&ids[0]).is_none(), "the key's oldest went");
    }

    #[test]
    fn secrets_compare_whole_and_never_empty() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
        assert!(!same_secret("", ""));
    }
}
