//! A custom store plugged into Snitch: `cargo run --example custom_storage`.
//!
//! Wraps the in-memory store in [`counting::CountingStorage`], runs Snitch on it, makes a
//! snitch and checks in, then prints how often each storage method was called.
//! `tests/custom_storage.rs` runs the storage contract suite on the same wrapper.

mod counting;

use std::sync::Arc;

use counting::CountingStorage;
use snitch::prelude::{Case, CaseId, Outcome, SnitchFields, SnitchRuntime};
use snitch::store::memory::MemoryStorage;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let storage = Arc::new(CountingStorage::new(Arc::new(MemoryStorage::new())));
    let snitch = SnitchRuntime::builder(storage.clone()).build().await?;

    let case = Case::new(CaseId::parse("acme").map_err(|v| v.message)?);
    snitch.service().storage().upsert_case(&case).await?;
    let fields = SnitchFields {
        name: Some("nightly backup".into()),
        interval: Some("daily".into()),
        ..Default::default()
    };
    let made = snitch.service().create(&case, &fields).await?;
    snitch
        .service()
        .check_in(made.token().as_str(), Outcome::Success, None)
        .await?;
    snitch.shutdown().await;

    println!(
        "the check-in was one save: {} save(s) in all",
        storage.count("save")
    );
    println!("storage calls:");
    for (method, n) in storage.calls() {
        println!("  {method:<20} {n}");
    }
    Ok(())
}
