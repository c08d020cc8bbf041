//! A third-party store: `examples/custom_storage`'s `CountingStorage` (counts every call,
//! forwards to any other store) passes the storage contract suite, and Snitch's runtime
//! runs on it through the trait alone.

#[path = "../examples/custom_storage/counting.rs"]
mod counting;

use std::sync::Arc;

use counting::CountingStorage;
use snitch::prelude::{Case, CaseId, Outcome, SnitchFields, SnitchRuntime, Storage};
use snitch::store::memory::MemoryStorage;

async fn counting_memory() -> CountingStorage {
    CountingStorage::new(Arc::new(MemoryStorage::new()))
}

snitch::core::storage_contract_tests!(counting_memory);

#[tokio::test]
async fn the_runtime_runs_on_it_and_every_call_is_counted() {
    let storage = Arc::new(counting_memory().await);
    let snitch = SnitchRuntime::builder(storage.clone())
        .build()
        .await
        .expect("starts");
    // Started: this server's liveness recorded, the API keys loaded.
    assert_eq!(storage.count("heartbeat"), 1);
    assert!(storage.count("api_keys") >= 1);

    let case = Case::new(CaseId::parse("acme").expect("valid"));
    storage.upsert_case(&case).await.expect("stored");
    let fields = SnitchFields {
        name: Some("nightly backup".into()),
        interval: Some("daily".into()),
        ..Default::default()
    };
    let made = snitch.service().create(&case, &fields).await.expect("made");
    let checked = snitch
        .service()
        .check_in(made.token().as_str(), Outcome::Success, None)
        .await
        .expect("checked in");
    assert_eq!(checked.status().as_str(), "healthy");
    assert_eq!(storage.count("insert_snitch"), 1);
    // Forwarded whole: the memory store underneath steps the check-in in place.
    assert!(
        storage.count("save") + storage.count("step_in_place") >= 1,
        "{:?}",
        storage.calls()
    );
    snitch.shutdown().await;
    assert_eq!(storage.count("record_stop"), 1);
    // What it forwarded is in the inner store.
    let stored = storage
        .snitch(made.token())
        .await
        .expect("read")
        .expect("kept");
    assert_eq!(stored.status().as_str(), "healthy");
}
