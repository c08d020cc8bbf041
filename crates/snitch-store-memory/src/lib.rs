//! In-memory storage for Snitch: thread-safe, with a deadline index so that check-ins and
//! sweeps cost O(log n) per affected snitch. Nothing survives a restart; use it for
//! development, tests and single-process deployments that can afford to lose state.

#![warn(missing_docs)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use async_trait::async_trait;
use snitch_core::{ApiKeyRecord, CaseOutage, Outage, PendingCheckIns};
use snitch_core::{Attempt, AttemptResult, ChannelConfig, ClaimLimits, Delivery, DeliveryState};
use snitch_core::{
    Case, CaseId, Change, CheckIn, Event, Snitch, Status, Storage, StorageError, StoreStats, Tag,
    Timestamp, Token, Webhook,
};

/// Maps keyed by tokens, ids and cases: foldhash, seeded per map (std's SipHash took a
/// tenth of a sweep's instructions).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// How many events are kept per snitch (the core's limit, re-exported).
pub use snitch_core::snitch::EVENTS_KEPT;

/// A [`Storage`] that keeps everything in this process's memory.
#[derive(Debug, Default)]
pub struct MemoryStorage {
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    cases: HashMap<CaseId, Case>,
    /// Boxed: the table keeps spare slots, and a pointer-sized slot wastes far less than
    /// an `Entry`-sized one (about 1.3 KiB per snitch unboxed at a million, under 1 KiB
    /// boxed).
    snitches: HashMap<Token, Box<Entry>>,
    /// Each case's snitches in creation order: (created_at, insertion number).
    by_case: HashMap<CaseId, BTreeMap<(Timestamp, u64), Token>>,
    /// Every snitch with a wake-up time, ordered by it: the sweep's index.
    wake_index: BTreeSet<(Timestamp, Token)>,
    /// Sweep leases by snitch, dropped when the snitch is saved or deleted.
    sweep_leases: HashMap<Token, Timestamp>,
    inserted: u64,
    /// Hooks in registration order.
    webhooks: Vec<Webhook>,
    /// Channels in order of adding.
    channels: Vec<ChannelConfig>,
    /// Badge keys by case: each case's one key, if it has one.
    badge_keys: HashMap<CaseId, String>,
    /// The outbox, by delivery id. Boxed, as `snitches` is: a mass miss grows the table
    /// by one entry per alert, and each doubling moves every entry (a delivery carries
    /// its event: hundreds of bytes unboxed, a pointer boxed).
    deliveries: HashMap<String, Box<StoredDelivery>>,
    /// Delivery ids by event id, in order of storing.
    deliveries_of_event: HashMap<String, Vec<String>>,
    /// Pending deliveries by their next attempt: the dispatcher's index.
    delivery_index: BTreeSet<(Timestamp, String)>,
    stored_deliveries: u64,
    /// How many snitches have each status (by [`status_slot`]), kept on every write.
    by_status: [u64; 5],
    /// How many deliveries are not finished.
    pending_deliveries: u64,
    /// The last moment each server was alive: its last heartbeat or its clean stop.
    servers: HashMap<String, Timestamp>,
    /// Outages, oldest first; ids are their positions plus one.
    outages: Vec<Outage>,
    /// Snitches deferred by an outage, per (outage id, case).
    deferred: HashMap<(u64, CaseId), u64>,
    /// API keys (as digests) in order of insertion.
    api_keys: Vec<ApiKeyRecord>,
}

#[derive(Debug)]
struct StoredDelivery {
    delivery: Delivery,
    /// Order of storing, for listing.
    seq: u64,
}

#[derive(Debug)]
struct Entry {
    snitch: Snitch,
    insertion: u64,
    check_ins: VecDeque<CheckIn>,
    events: VecDeque<Event>,
}

impl MemoryStorage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-updated (every write
        // below validates before it mutates), so a poisoned lock is still usable.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// The slot of a status in `Inner::by_status` (its place in [`Status::ALL`]).
fn status_slot(status: Status) -> usize {
    Status::ALL.iter().position(|s| *s == status).unwrap_or(0)
}

/// Appends and returns what fell off the front.
fn push_bounded<T>(list: &mut VecDeque<T>, item: T, max: usize) -> Vec<T> {
    // A first push would make room for four (an event is over 400 bytes): most snitches
    // hold one or two events, and a mass miss gives each of them its first.
    if list.capacity() == 0 {
        list.reserve_exact(1);
    }
    list.push_back(item);
    let mut evicted = Vec::new();
    while list.len() > max {
        evicted.extend(list.pop_front());
    }
    evicted
}

impl Inner {
    /// Applies a change as `Storage::save` does.
    fn apply(&mut self, change: &Change) -> Result<(), StorageError> {
        let new = change.snitch();
        let entry = self
            .snitches
            .get_mut(new.token())
            .ok_or(StorageError::NotFound)?;
        if entry.snitch.version() != change.expected_version() {
            return Err(StorageError::Conflict);
        }
        let (old_wake, new_wake) = (entry.snitch.wake_at(), new.wake_at());
        if old_wake != new_wake {
            if let Some(w) = old_wake {
                self.wake_index.remove(&(w, new.token().clone()));
            }
            if let Some(w) = new_wake {
                self.wake_index.insert((w, new.token().clone()));
            }
        }
        let keep = change.keep_check_ins().max(1);
        let newest = change.check_ins().len().saturating_sub(keep);
        for check_in in &change.check_ins()[newest..] {
            push_bounded(&mut entry.check_ins, check_in.clone(), keep);
        }
        let mut evicted = Vec::new();
        for event in change.events() {
            evicted.extend(push_bounded(&mut entry.events, event.clone(), EVENTS_KEPT));
        }
        self.sweep_leases.remove(new.token());
        self.by_status[status_slot(entry.snitch.status())] -= 1;
        self.by_status[status_slot(new.status())] += 1;
        change.apply_to(&mut entry.snitch);
        for outage in change.deferred_by() {
            *self
                .deferred
                .entry((*outage, entry.snitch.case_id().clone()))
                .or_default() += 1;
        }
        for delivery in change.deliveries() {
            self.insert_delivery(delivery);
        }
        for event in evicted {
            self.forget_finished_deliveries(&event.id);
        }
        Ok(())
    }

    /// Adds a snitch the caller checked: its case is stored, its token free, its case
    /// under the limit.
    fn insert_new(&mut self, snitch: &Snitch) {
        self.inserted += 1;
        let insertion = self.inserted;
        self.by_case
            .entry(snitch.case_id().clone())
            .or_default()
            .insert((snitch.created_at(), insertion), snitch.token().clone());
        if let Some(wake) = snitch.wake_at() {
            self.wake_index.insert((wake, snitch.token().clone()));
        }
        self.by_status[status_slot(snitch.status())] += 1;
        self.snitches.insert(
            snitch.token().clone(),
            Box::new(Entry {
                snitch: snitch.clone(),
                insertion,
                check_ins: VecDeque::new(),
                events: VecDeque::new(),
            }),
        );
    }

    fn insert_delivery(&mut self, delivery: &Delivery) {
        self.stored_deliveries += 1;
        if delivery.state == DeliveryState::Pending {
            self.pending_deliveries += 1;
        }
        if let (DeliveryState::Pending, Some(at)) = (delivery.state, delivery.next_attempt_at) {
            self.delivery_index.insert((at, delivery.id.clone()));
        }
        self.deliveries_of_event
            .entry(delivery.event.id.clone())
            .or_default()
            .push(delivery.id.clone());
        self.deliveries.insert(
            delivery.id.clone(),
            Box::new(StoredDelivery {
                delivery: delivery.clone(),
                seq: self.stored_deliveries,
            }),
        );
    }

    /// Forgets the finished deliveries of an event that is no longer kept; pending ones
    /// stay until they finish, so an alert already emitted still goes out.
    fn forget_finished_deliveries(&mut self, event_id: &str) {
        let Some(ids) = self.deliveries_of_event.get_mut(event_id) else {
            return;
        };
        let deliveries = &mut self.deliveries;
        ids.retain(|id| {
            let pending = deliveries
                .get(id)
                .is_some_and(|d| d.delivery.state == DeliveryState::Pending);
            if !pending {
                deliveries.remove(id);
            }
            pending
        });
        if ids.is_empty() {
            self.deliveries_of_event.remove(event_id);
        }
    }

    /// Whether the snitch of an event still keeps the event in its history.
    fn event_is_kept(&self, event: &Event) -> bool {
        self.snitches
            .get(&event.token)
            .is_some_and(|e| e.events.iter().any(|kept| kept.id == event.id))
    }
}

fn newest_first<T: Clone>(list: &VecDeque<T>, limit: usize) -> Vec<T> {
    list.iter().rev().take(limit).cloned().collect()
}

#[async_trait]
impl Storage for MemoryStorage {
    async fn upsert_case(&self, case: &Case) -> Result<(), StorageError> {
        self.write().cases.insert(case.id.clone(), case.clone());
        Ok(())
    }

    async fn case(&self, id: &CaseId) -> Result<Option<Case>, StorageError> {
        Ok(self.read().cases.get(id).cloned())
    }

    async fn cases(&self) -> Result<Vec<Case>, StorageError> {
        let mut cases: Vec<Case> = self.read().cases.values().cloned().collect();
        cases.sort_by(|a, b| a.id.as_str().cmp(b.id.as_str()));
        Ok(cases)
    }

    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<(), StorageError> {
        let mut inner = self.write();
        if !inner.cases.contains_key(&key.case_id) {
            return Err(StorageError::UnknownCase(key.case_id.clone()));
        }
        if inner
            .api_keys
            .iter()
            .any(|k| k.id == key.id || k.digest == key.digest)
        {
            return Err(StorageError::DuplicateToken);
        }
        inner.api_keys.push(key.clone());
        Ok(())
    }

    async fn api_keys(&self, case: Option<CaseId>) -> Result<Vec<ApiKeyRecord>, StorageError> {
        let mut keys: Vec<ApiKeyRecord> = self
            .read()
            .api_keys
            .iter()
            .filter(|k| case.as_ref().is_none_or(|c| k.case_id == *c))
            .cloned()
            .collect();
        // Stable: insertion order breaks ties.
        keys.sort_by_key(|k| k.created_at);
        Ok(keys)
    }

    async fn revoke_api_key(&self, id: &str) -> Result<bool, StorageError> {
        let mut inner = self.write();
        let Some(key) = inner.api_keys.iter_mut().find(|k| k.id == id) else {
            return Ok(false);
        };
        key.revoked = true;
        Ok(true)
    }

    async fn record_api_key_use(&self, uses: &[(String, Timestamp)]) -> Result<(), StorageError> {
        let mut inner = self.write();
        for (id, at) in uses {
            if let Some(key) = inner.api_keys.iter_mut().find(|k| k.id == *id) {
                key.last_used_at = key.last_used_at.max(Some(*at));
            }
        }
        Ok(())
    }

    async fn insert_snitch(&self, snitch: &Snitch, max_snitches: u32) -> Result<(), StorageError> {
        self.insert_snitches(std::slice::from_ref(snitch), max_snitches)
            .await
    }

    /// All checked under one lock, then all inserted.
    async fn insert_snitches(
        &self,
        snitches: &[Snitch],
        max_snitches: u32,
    ) -> Result<(), StorageError> {
        let mut inner = self.write();
        let mut adding: HashMap<&CaseId, usize> = HashMap::default();
        let mut tokens = HashSet::with_capacity_and_hasher(snitches.len(), Default::default());
        for snitch in snitches {
            if !inner.cases.contains_key(snitch.case_id()) {
                return Err(StorageError::UnknownCase(snitch.case_id().clone()));
            }
            if inner.snitches.contains_key(snitch.token()) || !tokens.insert(snitch.token()) {
                return Err(StorageError::DuplicateToken);
            }
            *adding.entry(snitch.case_id()).or_default() += 1;
        }
        for (case, n) in adding {
            let held = inner.by_case.get(case).map_or(0, BTreeMap::len);
            if held + n > max_snitches as usize {
                return Err(StorageError::LimitReached { max: max_snitches });
            }
        }
        for snitch in snitches {
            inner.insert_new(snitch);
        }
        Ok(())
    }

    async fn snitch(&self, token: &Token) -> Result<Option<Snitch>, StorageError> {
        Ok(self.read().snitches.get(token).map(|e| e.snitch.clone()))
    }

    /// One lock for both.
    async fn snitch_with_case(
        &self,
        token: &Token,
    ) -> Result<Option<(Snitch, Option<Case>)>, StorageError> {
        let inner = self.read();
        Ok(inner.snitches.get(token).map(|e| {
            let case = inner.cases.get(e.snitch.case_id()).cloned();
            (e.snitch.clone(), case)
        }))
    }

    async fn snitches(&self, case: &CaseId, tags: &[Tag]) -> Result<Vec<Snitch>, StorageError> {
        let inner = self.read();
        let Some(tokens) = inner.by_case.get(case) else {
            return Ok(Vec::new());
        };
        Ok(tokens
            .values()
            .filter_map(|t| inner.snitches.get(t))
            .map(|e| &e.snitch)
            .filter(|s| s.tags().contains_all(tags))
            .cloned()
            .collect())
    }

    async fn save(&self, change: &Change) -> Result<(), StorageError> {
        self.write().apply(change)
    }

    async fn step_in_place(
        &self,
        token: &Token,
        pending: &mut PendingCheckIns,
    ) -> Option<Result<Option<Change>, StorageError>> {
        // One write lock for the read, the step and the save: nothing else changes the
        // snitch in between, and the step reads the stored snitch where it lies (no copy
        // of it is read out; the step makes the one it changes). The step is the state
        // machine's pure work, a few microseconds under the lock.
        let mut inner = self.write();
        let Some(entry) = inner.snitches.get(token) else {
            return Some(Err(StorageError::NotFound));
        };
        let case = inner.cases.get(entry.snitch.case_id());
        let Some(change) = pending.step(&entry.snitch, case) else {
            return Some(Ok(None));
        };
        Some(inner.apply(&change).map(|()| Some(change)))
    }

    async fn delete_snitch(&self, token: &Token) -> Result<bool, StorageError> {
        let mut inner = self.write();
        let Some(entry) = inner.snitches.remove(token) else {
            return Ok(false);
        };
        let snitch = &entry.snitch;
        inner.by_status[status_slot(snitch.status())] -= 1;
        if let Some(list) = inner.by_case.get_mut(snitch.case_id()) {
            list.remove(&(snitch.created_at(), entry.insertion));
        }
        if let Some(w) = snitch.wake_at() {
            inner.wake_index.remove(&(w, token.clone()));
        }
        inner.sweep_leases.remove(token);
        for event in &entry.events {
            inner.forget_finished_deliveries(&event.id);
        }
        Ok(true)
    }

    async fn due(&self, now: Timestamp, limit: usize) -> Result<Vec<Snitch>, StorageError> {
        let inner = self.read();
        Ok(inner
            .wake_index
            .iter()
            .take_while(|(wake, _)| *wake <= now)
            .take(limit)
            .filter_map(|(_, token)| inner.snitches.get(token))
            .map(|e| e.snitch.clone())
            .collect())
    }

    async fn claim_due(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: usize,
    ) -> Result<Vec<Snitch>, StorageError> {
        let mut guard = self.write();
        let inner = &mut *guard;
        let mut claimed = Vec::with_capacity(limit.min(inner.wake_index.len()));
        for (_, token) in inner.wake_index.iter().take_while(|(wake, _)| *wake <= now) {
            if claimed.len() == limit {
                break;
            }
            if inner
                .sweep_leases
                .get(token)
                .is_some_and(|held| *held > now)
            {
                continue;
            }
            if let Some(entry) = inner.snitches.get(token) {
                inner.sweep_leases.insert(token.clone(), lease_until);
                claimed.push(entry.snitch.clone());
            }
        }
        Ok(claimed)
    }

    async fn next_wake_at(&self) -> Result<Option<Timestamp>, StorageError> {
        Ok(self.read().wake_index.first().map(|(wake, _)| *wake))
    }

    async fn check_ins(&self, token: &Token, limit: usize) -> Result<Vec<CheckIn>, StorageError> {
        Ok(self
            .read()
            .snitches
            .get(token)
            .map(|e| newest_first(&e.check_ins, limit))
            .unwrap_or_default())
    }

    async fn events(&self, token: &Token, limit: usize) -> Result<Vec<Event>, StorageError> {
        Ok(self
            .read()
            .snitches
            .get(token)
            .map(|e| newest_first(&e.events, limit))
            .unwrap_or_default())
    }

    async fn insert_webhook(&self, hook: &Webhook) -> Result<(), StorageError> {
        let mut inner = self.write();
        if !inner.cases.contains_key(&hook.case_id) {
            return Err(StorageError::UnknownCase(hook.case_id.clone()));
        }
        if inner.webhooks.iter().any(|h| h.id == hook.id) {
            return Err(StorageError::DuplicateToken);
        }
        inner.webhooks.push(hook.clone());
        Ok(())
    }

    async fn webhooks(&self, case: &CaseId) -> Result<Vec<Webhook>, StorageError> {
        Ok(self
            .read()
            .webhooks
            .iter()
            .filter(|h| h.case_id == *case)
            .cloned()
            .collect())
    }

    async fn delete_webhook(&self, case: &CaseId, id: &str) -> Result<bool, StorageError> {
        let mut inner = self.write();
        let before = inner.webhooks.len();
        inner
            .webhooks
            .retain(|h| !(h.case_id == *case && h.id == id));
        Ok(inner.webhooks.len() != before)
    }

    async fn insert_channel(&self, channel: &ChannelConfig) -> Result<(), StorageError> {
        let mut inner = self.write();
        if !inner.cases.contains_key(&channel.case_id) {
            return Err(StorageError::UnknownCase(channel.case_id.clone()));
        }
        if inner.channels.iter().any(|c| c.id == channel.id) {
            return Err(StorageError::DuplicateToken);
        }
        inner.channels.push(channel.clone());
        Ok(())
    }

    async fn channels(&self, case: &CaseId) -> Result<Vec<ChannelConfig>, StorageError> {
        let mut found: Vec<ChannelConfig> = self
            .read()
            .channels
            .iter()
            .filter(|c| c.case_id == *case)
            .cloned()
            .collect();
        // Stable: channels added at the same instant keep their order of adding.
        found.sort_by_key(|c| c.created_at);
        Ok(found)
    }

    async fn update_channel(&self, channel: &ChannelConfig) -> Result<bool, StorageError> {
        let mut inner = self.write();
        match inner
            .channels
            .iter_mut()
            .find(|c| c.case_id == channel.case_id && c.id == channel.id)
        {
            Some(stored) => {
                *stored = channel.clone();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn set_badge_key(&self, case: &CaseId, key: &str) -> Result<(), StorageError> {
        let mut inner = self.write();
        if !inner.cases.contains_key(case) {
            return Err(StorageError::UnknownCase(case.clone()));
        }
        if inner.badge_keys.iter().any(|(c, k)| k == key && c != case) {
            return Err(StorageError::DuplicateToken);
        }
        inner.badge_keys.insert(case.clone(), key.to_owned());
        Ok(())
    }

    async fn badge_key_or_insert(&self, case: &CaseId, key: &str) -> Result<String, StorageError> {
        let mut inner = self.write();
        if !inner.cases.contains_key(case) {
            return Err(StorageError::UnknownCase(case.clone()));
        }
        if let Some(held) = inner.badge_keys.get(case) {
            return Ok(held.clone());
        }
        if inner.badge_keys.values().any(|k| k == key) {
            return Err(StorageError::DuplicateToken);
        }
        inner.badge_keys.insert(case.clone(), key.to_owned());
        Ok(key.to_owned())
    }

    async fn badge_key(&self, case: &CaseId) -> Result<Option<String>, StorageError> {
        Ok(self.read().badge_keys.get(case).cloned())
    }

    async fn case_of_badge_key(&self, key: &str) -> Result<Option<CaseId>, StorageError> {
        Ok(self
            .read()
            .badge_keys
            .iter()
            .find(|(_, k)| *k == key)
            .map(|(c, _)| c.clone()))
    }

    async fn delete_channel(&self, case: &CaseId, id: &str) -> Result<bool, StorageError> {
        let mut inner = self.write();
        let before = inner.channels.len();
        inner
            .channels
            .retain(|c| !(c.case_id == *case && c.id == id));
        Ok(inner.channels.len() != before)
    }

    async fn claim_deliveries(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limits: &ClaimLimits,
    ) -> Result<Vec<Delivery>, StorageError> {
        let mut guard = self.write();
        let inner = &mut *guard;
        // Every due delivery, earliest first, then in order of storing: the claim's rounds
        // (ClaimLimits::select) look past a flooded case to the others.
        let mut due: Vec<&StoredDelivery> = inner
            .delivery_index
            .iter()
            .take_while(|(at, _)| *at <= now)
            .filter_map(|(_, id)| inner.deliveries.get(id).map(|d| &**d))
            .collect();
        due.sort_by_key(|d| (d.delivery.next_attempt_at, d.seq));
        let deliveries: Vec<&Delivery> = due.iter().map(|d| &d.delivery).collect();
        let chosen: Vec<(Timestamp, String)> = limits
            .select(&deliveries)
            .into_iter()
            .filter_map(|i| {
                let d = deliveries[i];
                d.next_attempt_at.map(|at| (at, d.id.clone()))
            })
            .collect();
        let mut claimed = Vec::with_capacity(chosen.len());
        for key in chosen {
            inner.delivery_index.remove(&key);
            if let Some(stored) = inner.deliveries.get_mut(&key.1) {
                stored.delivery.next_attempt_at = Some(lease_until);
                inner.delivery_index.insert((lease_until, key.1.clone()));
                claimed.push(stored.delivery.clone());
            }
        }
        Ok(claimed)
    }

    async fn record_attempt(
        &self,
        delivery_id: &str,
        attempt: &Attempt,
        result: AttemptResult,
    ) -> Result<(), StorageError> {
        let mut guard = self.write();
        let inner = &mut *guard;
        let stored = inner
            .deliveries
            .get_mut(delivery_id)
            .ok_or(StorageError::NotFound)?;
        let delivery = &mut stored.delivery;
        let was_pending = delivery.state == DeliveryState::Pending;
        if let Some(at) = delivery.next_attempt_at {
            inner.delivery_index.remove(&(at, delivery_id.to_owned()));
        }
        delivery.attempts.push(attempt.clone());
        match result {
            AttemptResult::Delivered => {
                delivery.state = DeliveryState::Delivered;
                delivery.next_attempt_at = None;
            }
            AttemptResult::GaveUp => {
                delivery.state = DeliveryState::Failed;
                delivery.next_attempt_at = None;
            }
            AttemptResult::RetryAt(at) => {
                delivery.state = DeliveryState::Pending;
                delivery.next_attempt_at = Some(at);
                inner.delivery_index.insert((at, delivery_id.to_owned()));
            }
        }
        match (was_pending, delivery.state == DeliveryState::Pending) {
            (true, false) => inner.pending_deliveries -= 1,
            (false, true) => inner.pending_deliveries += 1,
            _ => {}
        }
        let event = delivery.event.clone();
        if !inner.event_is_kept(&event) {
            inner.forget_finished_deliveries(&event.id);
        }
        Ok(())
    }

    async fn next_delivery_at(&self) -> Result<Option<Timestamp>, StorageError> {
        Ok(self.read().delivery_index.first().map(|(at, _)| *at))
    }

    async fn heartbeat(
        &self,
        server: &str,
        now: Timestamp,
        threshold: chrono::Duration,
    ) -> Result<Option<Outage>, StorageError> {
        let mut inner = self.write();
        let last_alive = inner.servers.values().max().copied();
        let outage = match last_alive {
            Some(last) if now - last > threshold => {
                let outage = Outage {
                    id: inner.outages.len() as u64 + 1,
                    started_at: last,
                    ended_at: now,
                };
                inner.outages.push(outage);
                Some(outage)
            }
            _ => None,
        };
        let seen = inner.servers.entry(server.to_owned()).or_insert(now);
        *seen = (*seen).max(now);
        Ok(outage)
    }

    async fn record_stop(&self, server: &str, at: Timestamp) -> Result<(), StorageError> {
        let mut inner = self.write();
        let seen = inner.servers.entry(server.to_owned()).or_insert(at);
        *seen = (*seen).max(at);
        Ok(())
    }

    async fn outages(&self, since: Timestamp) -> Result<Vec<Outage>, StorageError> {
        let inner = self.read();
        Ok(inner
            .outages
            .iter()
            .filter(|o| o.ended_at >= since)
            .copied()
            .collect())
    }

    async fn case_outages(
        &self,
        case: &CaseId,
        limit: usize,
    ) -> Result<Vec<CaseOutage>, StorageError> {
        let inner = self.read();
        Ok(inner
            .outages
            .iter()
            .rev()
            .take(limit)
            .map(|o| CaseOutage {
                outage: *o,
                snitches_deferred: inner
                    .deferred
                    .get(&(o.id, case.clone()))
                    .copied()
                    .unwrap_or(0),
            })
            .collect())
    }

    async fn deliveries(&self, event_ids: &[String]) -> Result<Vec<Delivery>, StorageError> {
        let inner = self.read();
        let mut found: Vec<&StoredDelivery> = event_ids
            .iter()
            .filter_map(|e| inner.deliveries_of_event.get(e))
            .flatten()
            .filter_map(|id| inner.deliveries.get(id).map(|d| &**d))
            .collect();
        found.sort_by_key(|d| d.seq);
        found.dedup_by_key(|d| d.seq);
        Ok(found.into_iter().map(|d| d.delivery.clone()).collect())
    }

    async fn stats(&self) -> Result<StoreStats, StorageError> {
        let inner = self.read();
        let counts = Status::ALL
            .iter()
            .map(|s| (*s, inner.by_status[status_slot(*s)]));
        Ok(StoreStats::from_counts(
            counts,
            Some(inner.pending_deliveries),
        ))
    }

    async fn save_all(&self, changes: &[Change]) -> Vec<Result<(), StorageError>> {
        // Each save takes the write lock for an instant: one after another is the same.
        snitch_core::storage::fallback::save_all(self, changes).await
    }

    async fn check_ready(&self) -> Result<(), StorageError> {
        // Memory has no migrations and no settings to check: it is ready while it answers.
        Ok(())
    }
}

#[cfg(test)]
mod contract {
    use super::MemoryStorage;

    snitch_core::storage_contract_tests!(|| async { MemoryStorage::new() });
}
