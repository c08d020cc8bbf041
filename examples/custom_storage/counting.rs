//! `CountingStorage`: a third-party [`Storage`] that wraps any other and counts the calls
//! of each method. It shows how a backend plugs into Snitch: implement the trait (with
//! `async_trait`), hand an `Arc` of it to [`snitch::SnitchRuntime::builder`], and run the
//! storage contract suite on it (`tests/custom_storage.rs`:
//! `snitch::core::storage_contract_tests!`, feature `test-support` of `snitch-core`).
//!
//! A wrapper like this is where a host adds metrics, tracing or fault injection around a
//! store it does not own.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use snitch::core::{
    ApiKeyRecord, Attempt, AttemptResult, CaseOutage, Change, ChannelConfig, CheckIn, ClaimLimits,
    Outage, PendingCheckIns, StoreStats, Tag, Timestamp, Webhook,
};
use snitch::prelude::{Case, CaseId, Delivery, Event, Snitch, Storage, StorageError, Token};

/// Counts the calls of each [`Storage`] method, then forwards them to the inner store.
pub struct CountingStorage {
    inner: Arc<dyn Storage>,
    calls: Mutex<BTreeMap<&'static str, u64>>,
}

impl std::fmt::Debug for CountingStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingStorage")
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

impl CountingStorage {
    pub fn new(inner: Arc<dyn Storage>) -> Self {
        CountingStorage {
            inner,
            calls: Mutex::default(),
        }
    }

    /// The calls so far, by method name (methods never called are absent).
    pub fn calls(&self) -> BTreeMap<&'static str, u64> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The calls of one method so far.
    pub fn count(&self, method: &str) -> u64 {
        self.calls().get(method).copied().unwrap_or(0)
    }

    fn called(&self, method: &'static str) {
        *self
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(method)
            .or_insert(0) += 1;
    }
}

#[async_trait]
impl Storage for CountingStorage {
    async fn upsert_case(&self, case: &Case) -> Result<(), StorageError> {
        self.called("upsert_case");
        self.inner.upsert_case(case).await
    }

    async fn case(&self, id: &CaseId) -> Result<Option<Case>, StorageError> {
        self.called("case");
        self.inner.case(id).await
    }

    async fn cases(&self) -> Result<Vec<Case>, StorageError> {
        self.called("cases");
        self.inner.cases().await
    }

    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<(), StorageError> {
        self.called("insert_api_key");
        self.inner.insert_api_key(key).await
    }

    async fn api_keys(&self, case: Option<CaseId>) -> Result<Vec<ApiKeyRecord>, StorageError> {
        self.called("api_keys");
        self.inner.api_keys(case).await
    }

    async fn revoke_api_key(&self, id: &str) -> Result<bool, StorageError> {
        self.called("revoke_api_key");
        self.inner.revoke_api_key(id).await
    }

    async fn record_api_key_use(&self, uses: &[(String, Timestamp)]) -> Result<(), StorageError> {
        self.called("record_api_key_use");
        self.inner.record_api_key_use(uses).await
    }

    async fn insert_snitch(&self, snitch: &Snitch, max_snitches: u32) -> Result<(), StorageError> {
        self.called("insert_snitch");
        self.inner.insert_snitch(snitch, max_snitches).await
    }

    async fn insert_snitches(
        &self,
        snitches: &[Snitch],
        max_snitches: u32,
    ) -> Result<(), StorageError> {
        self.called("insert_snitches");
        self.inner.insert_snitches(snitches, max_snitches).await
    }

    async fn snitch(&self, token: &Token) -> Result<Option<Snitch>, StorageError> {
        self.called("snitch");
        self.inner.snitch(token).await
    }

    async fn snitches(&self, case: &CaseId, tags: &[Tag]) -> Result<Vec<Snitch>, StorageError> {
        self.called("snitches");
        self.inner.snitches(case, tags).await
    }

    async fn snitch_with_case(
        &self,
        token: &Token,
    ) -> Result<Option<(Snitch, Option<Case>)>, StorageError> {
        self.called("snitch_with_case");
        self.inner.snitch_with_case(token).await
    }

    async fn step_in_place(
        &self,
        token: &Token,
        pending: &mut PendingCheckIns,
    ) -> Option<Result<Option<Change>, StorageError>> {
        self.called("step_in_place");
        self.inner.step_in_place(token, pending).await
    }

    async fn save(&self, change: &Change) -> Result<(), StorageError> {
        self.called("save");
        self.inner.save(change).await
    }

    async fn save_all(&self, changes: &[Change]) -> Vec<Result<(), StorageError>> {
        self.called("save_all");
        self.inner.save_all(changes).await
    }

    async fn delete_snitch(&self, token: &Token) -> Result<bool, StorageError> {
        self.called("delete_snitch");
        self.inner.delete_snitch(token).await
    }

    async fn due(&self, now: Timestamp, limit: usize) -> Result<Vec<Snitch>, StorageError> {
        self.called("due");
        self.inner.due(now, limit).await
    }

    async fn claim_due(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: usize,
    ) -> Result<Vec<Snitch>, StorageError> {
        self.called("claim_due");
        self.inner.claim_due(now, lease_until, limit).await
    }

    async fn next_wake_at(&self) -> Result<Option<Timestamp>, StorageError> {
        self.called("next_wake_at");
        self.inner.next_wake_at().await
    }

    async fn check_ins(&self, token: &Token, limit: usize) -> Result<Vec<CheckIn>, StorageError> {
        self.called("check_ins");
        self.inner.check_ins(token, limit).await
    }

    async fn events(&self, token: &Token, limit: usize) -> Result<Vec<Event>, StorageError> {
        self.called("events");
        self.inner.events(token, limit).await
    }

    async fn insert_webhook(&self, hook: &Webhook) -> Result<(), StorageError> {
        self.called("insert_webhook");
        self.inner.insert_webhook(hook).await
    }

    async fn webhooks(&self, case: &CaseId) -> Result<Vec<Webhook>, StorageError> {
        self.called("webhooks");
        self.inner.webhooks(case).await
    }

    async fn delete_webhook(&self, case: &CaseId, id: &str) -> Result<bool, StorageError> {
        self.called("delete_webhook");
        self.inner.delete_webhook(case, id).await
    }

    async fn insert_channel(&self, channel: &ChannelConfig) -> Result<(), StorageError> {
        self.called("insert_channel");
        self.inner.insert_channel(channel).await
    }

    async fn channels(&self, case: &CaseId) -> Result<Vec<ChannelConfig>, StorageError> {
        self.called("channels");
        self.inner.channels(case).await
    }

    async fn update_channel(&self, channel: &ChannelConfig) -> Result<bool, StorageError> {
        self.called("update_channel");
        self.inner.update_channel(channel).await
    }

    async fn set_badge_key(&self, case: &CaseId, key: &str) -> Result<(), StorageError> {
        self.called("set_badge_key");
        self.inner.set_badge_key(case, key).await
    }

    async fn badge_key_or_insert(&self, case: &CaseId, key: &str) -> Result<String, StorageError> {
        self.called("badge_key_or_insert");
        self.inner.badge_key_or_insert(case, key).await
    }

    async fn badge_key(&self, case: &CaseId) -> Result<Option<String>, StorageError> {
        self.called("badge_key");
        self.inner.badge_key(case).await
    }

    async fn case_of_badge_key(&self, key: &str) -> Result<Option<CaseId>, StorageError> {
        self.called("case_of_badge_key");
        self.inner.case_of_badge_key(key).await
    }

    async fn delete_channel(&self, case: &CaseId, id: &str) -> Result<bool, StorageError> {
        self.called("delete_channel");
        self.inner.delete_channel(case, id).await
    }

    async fn claim_deliveries(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limits: &ClaimLimits,
    ) -> Result<Vec<Delivery>, StorageError> {
        self.called("claim_deliveries");
        self.inner.claim_deliveries(now, lease_until, limits).await
    }

    async fn record_attempt(
        &self,
        delivery_id: &str,
        attempt: &Attempt,
        result: AttemptResult,
    ) -> Result<(), StorageError> {
        self.called("record_attempt");
        self.inner
            .record_attempt(delivery_id, attempt, result)
            .await
    }

    async fn next_delivery_at(&self) -> Result<Option<Timestamp>, StorageError> {
        self.called("next_delivery_at");
        self.inner.next_delivery_at().await
    }

    async fn heartbeat(
        &self,
        server: &str,
        now: Timestamp,
        threshold: chrono::Duration,
    ) -> Result<Option<Outage>, StorageError> {
        self.called("heartbeat");
        self.inner.heartbeat(server, now, threshold).await
    }

    async fn record_stop(&self, server: &str, at: Timestamp) -> Result<(), StorageError> {
        self.called("record_stop");
        self.inner.record_stop(server, at).await
    }

    async fn outages(&self, since: Timestamp) -> Result<Vec<Outage>, StorageError> {
        self.called("outages");
        self.inner.outages(since).await
    }

    async fn case_outages(
        &self,
        case: &CaseId,
        limit: usize,
    ) -> Result<Vec<CaseOutage>, StorageError> {
        self.called("case_outages");
        self.inner.case_outages(case, limit).await
    }

    async fn deliveries(&self, event_ids: &[String]) -> Result<Vec<Delivery>, StorageError> {
        self.called("deliveries");
        self.inner.deliveries(event_ids).await
    }

    async fn check_ready(&self) -> Result<(), StorageError> {
        self.called("check_ready");
        self.inner.check_ready().await
    }

    async fn stats(&self) -> Result<StoreStats, StorageError> {
        self.called("stats");
        self.inner.stats().await
    }
}
