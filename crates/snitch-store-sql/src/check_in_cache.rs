//! The check-in path's cache, shared by the SQL stores: the snitches a store last read or
//! saved, and their cases, so a check-in of a snitch it knows costs its save alone, not a
//! read and a save.
//!
//! Only a store's `snitch_with_case`, the read of a check-in, answers from it; every
//! other read goes to the database. It is safe because a check-in's change carries
//! the version it was computed from, and a save applies only over that version: when
//! another server (or anything outside this store) changed the snitch since, the save is
//! refused as a [`snitch_core::StorageError::Conflict`], the entry is dropped, and the
//! service computes the check-in again from a fresh read. (Another server on Postgres;
//! an admin command on the same SQLite file.) So a stale entry costs one
//! refused save, never a wrong state. A snitch deleted elsewhere makes the save find
//! nothing (`NotFound`), as it would after a fresh read.
//!
//! A case has no version a save checks, so a cached case is used for at most the store's
//! `case_ttl` after the read that fetched it, and dropped at once when this store changes it (a read that began before
//! the change puts no case back): a plan or members changed through another server apply
//! to this server's check-ins within that time.
//!
//! Versions only protect while they never repeat for a token. They could after a
//! failover that lost commits, so the whole cache is dropped whenever the database fails
//! a read or a save. (A snitch deleted and created again with the same token could also
//! reach a held version; tokens are random, so only hosts with their own
//! `TokenSource` of predictable tokens should turn the cache off.)
//!
//! When full, a new snitch takes the place of a held one, in turn over the places (the
//! oldest of a full cache goes first, unless a forgotten snitch's place was refilled).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use snitch_core::{Case, Change, Snitch, StorageError};

/// A case as read, and when the read began.
#[derive(Debug)]
struct CachedCase {
    /// `None`: the snitch's case is not stored.
    case: Option<Case>,
    read_at: Instant,
}

/// Maps by token and case id with a randomly seeded fast hash: two lookups per check-in,
/// where SipHash cost more than the rest of the lookup.
type Map<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// The snitches, in places that a full cache refills in turn: finding a victim in a hash
/// map by `keys().next()` walked the empty buckets its earlier victims left, a walk that
/// grew with every eviction (a sweep of 100,000 snitches the cache did not hold, or
/// check-ins spread over more snitches than it holds, evict one per save).
type Places = IndexMap<String, Snitch, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
struct Entries {
    snitches: Places,
    /// The place a full cache refills next.
    next_place: usize,
    cases: Map<CachedCase>,
    /// When this store last changed a case: reads that began earlier put no case back.
    cases_changed_at: Option<Instant>,
}

#[derive(Debug)]
/// The check-in path's cache of snitches and cases (see the module's documentation).
pub struct CheckInCache {
    /// The most snitches (and cases) held; 0 turns the cache off.
    capacity: usize,
    case_ttl: Duration,
    entries: Mutex<Entries>,
    hits: AtomicU64,
}

impl CheckInCache {
    /// A cache of at most `capacity` snitches (and cases; 0: off) whose cases serve for
    /// `case_ttl` after they were read.
    pub fn new(capacity: usize, case_ttl: Duration) -> Self {
        CheckInCache {
            capacity,
            case_ttl,
            entries: Mutex::new(Entries::default()),
            hits: AtomicU64::new(0),
        }
    }

    /// How many reads the cache answered.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A check-in's read of `token`: from the cache when it holds the snitch and a fresh
    /// enough case, else `read` (the database's), whose answer is kept, or the held copy
    /// dropped when there is no such snitch. A failed read drops everything: the database
    /// may have lost commits.
    pub async fn read_through(
        &self,
        token: &str,
        read: impl Future<Output = Result<Option<(Snitch, Option<Case>)>, StorageError>>,
    ) -> Result<Option<(Snitch, Option<Case>)>, StorageError> {
        let now = snitch_core::clock::monotonic_now();
        if let Some(held) = self.get(token, now) {
            return Ok(Some(held));
        }
        let read = read.await.inspect_err(|_| self.clear())?;
        match &read {
            Some((snitch, case)) => self.read(snitch, case.as_ref(), now),
            None => self.forget(token),
        }
        Ok(read)
    }

    /// The snitch and its case, when both are held and the case is fresh enough.
    fn get(&self, token: &str, now: Instant) -> Option<(Snitch, Option<Case>)> {
        if self.capacity == 0 {
            return None;
        }
        let entries = self.entries();
        let snitch = entries.snitches.get(token)?;
        let case = entries.cases.get(snitch.case_id().as_str())?;
        if now.saturating_duration_since(case.read_at) > self.case_ttl {
            return None;
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some((snitch.clone(), case.case.clone()))
    }

    /// Keeps what a read that began at `read_at` found.
    fn read(&self, snitch: &Snitch, case: Option<&Case>, read_at: Instant) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.entries();
        keep_snitch(&mut entries, snitch, self.capacity);
        let case_id = snitch.case_id().as_str();
        let newer = entries
            .cases
            .get(case_id)
            .is_none_or(|held| held.read_at <= read_at)
            && entries
                .cases_changed_at
                .is_none_or(|changed| changed < read_at);
        if newer && (entries.cases.len() < self.capacity || entries.cases.contains_key(case_id)) {
            entries.cases.insert(
                case_id.to_owned(),
                CachedCase {
                    case: case.cloned(),
                    read_at,
                },
            );
        }
    }

    /// Keeps the snitch a save committed.
    pub fn saved(&self, change: &Change) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.entries();
        match entries.snitches.get_mut(change.snitch().token().as_str()) {
            // The snitch the change was made from, as on every cached check-in: moved on
            // in place (its state alone when the settings are kept), not copied whole.
            Some(held) if held.version() == change.expected_version() => change.apply_to(held),
            _ => keep_snitch(&mut entries, change.snitch(), self.capacity),
        }
    }

    /// Keeps the cache right after a save of `change` ended with `result`: the saved
    /// snitch; nothing of it when its stored version is not known (refused, gone); nothing
    /// at all when the database failed (it may have lost commits).
    pub fn after_save(&self, change: &Change, result: &Result<(), StorageError>) {
        match result {
            Ok(()) => self.saved(change),
            Err(StorageError::Conflict | StorageError::NotFound) => {
                self.forget(change.snitch().token().as_str());
            }
            Err(_) => self.clear(),
        }
    }

    /// Drops a snitch whose stored version is not known (a refused or failed save, a
    /// delete).
    pub fn forget(&self, token: &str) {
        if self.capacity == 0 {
            return;
        }
        self.entries().snitches.swap_remove(token);
    }

    /// Drops a case this store changed at `now`.
    pub fn forget_case(&self, case_id: &str, now: Instant) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.entries();
        entries.cases.remove(case_id);
        entries.cases_changed_at = Some(now);
    }

    /// Drops everything: the database failed, and may have lost commits (a failover).
    pub fn clear(&self) {
        if self.capacity == 0 {
            return;
        }
        let mut entries = self.entries();
        entries.snitches.clear();
        entries.cases.clear();
    }
}

/// Holds `snitch` unless a newer version is held (a read that began before a save may
/// end after it); a full cache gives it the next place in turn, letting that one's
/// snitch go.
fn keep_snitch(entries: &mut Entries, snitch: &Snitch, capacity: usize) {
    let token = snitch.token().as_str();
    if let Some(held) = entries.snitches.get_mut(token) {
        if held.version() <= snitch.version() {
            *held = snitch.clone();
        }
    } else if entries.snitches.len() < capacity {
        entries.snitches.insert(token.to_owned(), snitch.clone());
    } else if let Some(place) = entries.next_place.checked_rem(entries.snitches.len()) {
        // The token is not held (just looked up), so the place takes it.
        if entries
            .snitches
            .replace_index(place, token.to_owned())
            .is_ok()
        {
            entries.snitches[place] = snitch.clone();
            entries.next_place = place + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snitch_core::clock::monotonic_now;
    use snitch_core::contract;

    fn snitch(n: u64) -> Snitch {
        contract::snitch(&contract::case("cache"), n, contract::t0())
    }

    #[test]
    fn a_hit_needs_the_snitch_and_a_fresh_case() {
        let cache = CheckInCache::new(10, Duration::from_secs(1));
        let t0 = monotonic_now();
        let change = contract::checked_in(&snitch(1), contract::at(1));
        let s = change.snitch().clone();
        assert!(cache.get(s.token().as_str(), t0).is_none());
        cache.saved(&change);
        // The case was never read.
        assert!(cache.get(s.token().as_str(), t0).is_none());
        cache.read(&s, None, t0);
        let (hit, case) = cache.get(s.token().as_str(), t0).expect("held");
        assert_eq!(hit, s);
        assert!(case.is_none());
        // The case is too old a second later.
        assert!(cache
            .get(s.token().as_str(), t0 + Duration::from_millis(1001))
            .is_none());
        cache.read(&s, None, t0 + Duration::from_secs(2));
        cache.forget_case(s.case_id().as_str(), t0 + Duration::from_secs(3));
        assert!(cache
            .get(s.token().as_str(), t0 + Duration::from_secs(3))
            .is_none());
        // A read that began before the case changed puts no case back.
        cache.read(&s, None, t0 + Duration::from_secs(2));
        assert!(cache
            .get(s.token().as_str(), t0 + Duration::from_secs(3))
            .is_none());
        // One that began after it does; nothing is held after the database failed.
        let later = t0 + Duration::from_secs(4);
        cache.read(&s, None, later);
        assert!(cache.get(s.token().as_str(), later).is_some());
        cache.clear();
        assert!(cache.get(s.token().as_str(), later).is_none());
    }

    #[test]
    fn an_older_version_never_replaces_a_newer_one() {
        let cache = CheckInCache::new(10, Duration::from_secs(60));
        let t0 = monotonic_now();
        let to_older = contract::checked_in(&snitch(1), contract::at(1));
        let older = to_older.snitch().clone();
        let to_newer = contract::checked_in(&older, contract::at(2));
        let newer = to_newer.snitch().clone();
        assert!(newer.version() > older.version());
        cache.read(&newer, None, t0);
        cache.read(&older, None, t0);
        cache.saved(&to_older);
        let (held, _) = cache.get(older.token().as_str(), t0).expect("held");
        assert_eq!(held, newer);
        // A save over the held version moves it on in place, to exactly the saved snitch.
        let to_newest = contract::checked_in(&newer, contract::at(3));
        cache.saved(&to_newest);
        let (held, _) = cache.get(older.token().as_str(), t0).expect("held");
        assert_eq!(&held, to_newest.snitch());
        cache.forget(older.token().as_str());
        assert!(cache.get(older.token().as_str(), t0).is_none());
    }

    #[test]
    fn a_full_cache_makes_room_and_zero_holds_nothing() {
        let t0 = monotonic_now();
        let cache = CheckInCache::new(2, Duration::from_secs(60));
        for n in 1..=3 {
            cache.read(&snitch(n), None, t0);
        }
        let held = (1..=3)
            .filter(|n| cache.get(snitch(*n).token().as_str(), t0).is_some())
            .count();
        assert_eq!(held, 2);
        assert!(
            cache.get(snitch(3).token().as_str(), t0).is_some(),
            "the newest is held"
        );
        let off = CheckInCache::new(0, Duration::from_secs(60));
        off.saved(&contract::checked_in(&snitch(1), contract::at(1)));
        off.read(&snitch(1), None, t0);
        assert!(off.get(snitch(1).token().as_str(), t0).is_none());
    }

    #[test]
    fn a_full_cache_lets_its_oldest_go_in_turn() {
        let t0 = monotonic_now();
        let cache = CheckInCache::new(3, Duration::from_secs(60));
        let held = |cache: &CheckInCache| -> Vec<u64> {
            (1..=20)
                .filter(|n| cache.get(snitch(*n).token().as_str(), t0).is_some())
                .collect()
        };
        for n in 1..=6 {
            cache.read(&snitch(n), None, t0);
        }
        assert_eq!(held(&cache), [4, 5, 6]);
        // A snitch held again keeps its place; forgetting one makes room, which the next
        // read takes without letting another go, and the turn goes on from there.
        cache.read(&snitch(5), None, t0);
        cache.forget(snitch(4).token().as_str());
        cache.read(&snitch(7), None, t0);
        assert_eq!(held(&cache), [5, 6, 7]);
        for n in 8..=20 {
            cache.read(&snitch(n), None, t0);
        }
        assert_eq!(held(&cache), [18, 19, 20]);
        assert_eq!(cache.entries().snitches.len(), 3);
    }
}
