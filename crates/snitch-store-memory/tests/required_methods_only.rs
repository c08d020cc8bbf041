//! A third-party store that implements only the required methods of `Storage` compiles
//! and runs the service: the provided ones (lease-less claims, no liveness, no key-use
//! records) are enough for check-ins and the sweep.

use std::sync::Arc;

use async_trait::async_trait;
use snitch_core::contract::{at, case, snitch};
use snitch_core::outbox::{Attempt, AttemptResult, ClaimLimits, Delivery};
use snitch_core::{
    ApiKeyRecord, Case, CaseId, Change, CheckIn, EventKind, ManualClock, Outcome, Snitch,
    SnitchService, Status, Storage, StorageError, Tag, Timestamp, Token, Webhook,
};
use snitch_store_memory::MemoryStorage;

/// Forwards the required methods to a memory store, and nothing else.
struct RequiredOnly(MemoryStorage);

#[async_trait]
impl Storage for RequiredOnly {
    async fn upsert_case(&self, case: &Case) -> Result<(), StorageError> {
        self.0.upsert_case(case).await
    }
    async fn case(&self, id: &CaseId) -> Result<Option<Case>, StorageError> {
        self.0.case(id).await
    }
    async fn cases(&self) -> Result<Vec<Case>, StorageError> {
        self.0.cases().await
    }
    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<(), StorageError> {
        self.0.insert_api_key(key).await
    }
    async fn api_keys(&self, case: Option<CaseId>) -> Result<Vec<ApiKeyRecord>, StorageError> {
        self.0.api_keys(case).await
    }
    async fn revoke_api_key(&self, id: &str) -> Result<bool, StorageError> {
        self.0.revoke_api_key(id).await
    }
    async fn insert_snitch(&self, snitch: &Snitch, max: u32) -> Result<(), StorageError> {
        self.0.insert_snitch(snitch, max).await
    }
    async fn snitch(&self, token: &Token) -> Result<Option<Snitch>, StorageError> {
        self.0.snitch(token).await
    }
    async fn snitches(&self, case: &CaseId, tags: &[Tag]) -> Result<Vec<Snitch>, StorageError> {
        self.0.snitches(case, tags).await
    }
    async fn save(&self, change: &Change) -> Result<(), StorageError> {
        self.0.save(change).await
    }
    async fn delete_snitch(&self, token: &Token) -> Result<bool, StorageError> {
        self.0.delete_snitch(token).await
    }
    async fn due(&self, now: Timestamp, limit: usize) -> Result<Vec<Snitch>, StorageError> {
        self.0.due(now, limit).await
    }
    async fn next_wake_at(&self) -> Result<Option<Timestamp>, StorageError> {
        self.0.next_wake_at().await
    }
    async fn check_ins(&self, token: &Token, limit: usize) -> Result<Vec<CheckIn>, StorageError> {
        self.0.check_ins(token, limit).await
    }
    async fn events(
        &self,
        token: &Token,
        limit: usize,
    ) -> Result<Vec<snitch_core::Event>, StorageError> {
        self.0.events(token, limit).await
    }
    async fn insert_webhook(&self, hook: &Webhook) -> Result<(), StorageError> {
        self.0.insert_webhook(hook).await
    }
    async fn webhooks(&self, case: &CaseId) -> Result<Vec<Webhook>, StorageError> {
        self.0.webhooks(case).await
    }
    async fn delete_webhook(&self, case: &CaseId, id: &str) -> Result<bool, StorageError> {
        self.0.delete_webhook(case, id).await
    }
    async fn claim_deliveries(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limits: &ClaimLimits,
    ) -> Result<Vec<Delivery>, StorageError> {
        self.0.claim_deliveries(now, lease_until, limits).await
    }
    async fn record_attempt(
        &self,
        id: &str,
        attempt: &Attempt,
        result: AttemptResult,
    ) -> Result<(), StorageError> {
        self.0.record_attempt(id, attempt, result).await
    }
    async fn next_delivery_at(&self) -> Result<Option<Timestamp>, StorageError> {
        self.0.next_delivery_at().await
    }
    async fn deliveries(&self, event_ids: &[String]) -> Result<Vec<Delivery>, StorageError> {
        self.0.deliveries(event_ids).await
    }
}

#[tokio::test]
async fn a_store_with_only_the_required_methods_runs_check_ins_and_the_sweep() {
    let store = Arc::new(RequiredOnly(MemoryStorage::new()));
    let acme = case("acme");
    store.upsert_case(&acme).await.expect("case");
    let fresh = snitch(&acme, 1, at(0));
    store.insert_snitch(&fresh, 10).await.expect("insert");
    let clock = Arc::new(ManualClock::new(at(5)));
    let service = SnitchService::new(store.clone(), clock.clone());

    assert_eq!(service.heartbeat(at(5)).await.expect("heartbeat"), None);
    let checked = service
        .check_in(fresh.token().as_str(), Outcome::Success, None)
        .await
        .expect("check-in");
    assert_eq!(checked.status(), Status::Healthy);

    // Due at the end of the next hour: the sweep claims it through the provided
    // `claim_due` (no lease) and declares it missing, once.
    let report = service.tick(at(125)).await.expect("sweep");
    assert_eq!((report.snitches, report.events), (1, 1));
    assert_eq!(service.tick(at(125)).await.expect("again").events, 0);
    let events = store.events(fresh.token(), 10).await.expect("events");
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Missing, EventKind::Reporting]);
    assert_eq!(store.outages(at(0)).await.expect("none"), []);
    assert_eq!(store.case_outages(&acme.id, 5).await.expect("none"), []);
}

/// The provided bulk insert (checks, then one insert after another, undone on failure)
/// keeps the contract's all-or-nothing rules when nothing else writes meanwhile.
#[tokio::test]
async fn the_provided_bulk_insert_passes_the_contract() {
    snitch_core::contract::insert_snitches_is_all_or_nothing(Arc::new(RequiredOnly(
        MemoryStorage::new(),
    )))
    .await;
}
