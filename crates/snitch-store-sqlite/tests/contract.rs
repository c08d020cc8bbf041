//! The storage contract, run against SQLite: every test gets a fresh database file of its
//! own, in a directory under Cargo's `target/tmp` (kept after the test, removed by
//! `cargo clean`: the store outlives the function that makes it).

use snitch_store_sqlite::{connect, SqliteStorage, SqliteStorageOptions, MIGRATOR};

/// A store on a fresh, migrated database file; the directory lives as long as the test.
async fn fresh_store() -> SqliteStorage {
    fresh_store_with(SqliteStorageOptions::default()).await
}

/// A store with `options` on a fresh, migrated database file.
async fn fresh_store_with(options: SqliteStorageOptions) -> SqliteStorage {
    let dir = tempfile::Builder::new()
        .prefix("contract-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory")
        .keep();
    let pool = connect(&dir.join("snitch.db"), 4)
        .await
        .expect("open the database");
    MIGRATOR.run(&pool).await.expect("migrate");
    SqliteStorage::with_options(pool, options)
}

snitch_core::storage_contract_tests!(fresh_store);

/// The claim of deliveries with a window of one, two or five due deliveries per budget, so
/// that the contract's claims go every way: settled by the window (full budget, every
/// later one to a full destination) and by walking the keys.
mod claims_through_a_small_window {
    use std::sync::Arc;

    use snitch_core::contract;
    use snitch_core::Storage;
    use snitch_store_sqlite::SqliteStorageOptions;

    use super::fresh_store_with;

    async fn each_window<F, Fut>(test: F)
    where
        F: Fn(Arc<dyn Storage>) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        for window in [1, 2, 5] {
            let options = SqliteStorageOptions::default().with_claim_window(window);
            test(Arc::new(fresh_store_with(options).await)).await;
        }
    }

    #[tokio::test]
    async fn claims_choose_what_the_three_rounds_choose() {
        each_window(contract::claims_choose_what_the_three_rounds_choose).await;
    }

    #[tokio::test]
    async fn a_flooded_case_does_not_keep_others_out_of_a_claim() {
        each_window(contract::a_flooded_case_does_not_keep_others_out_of_a_claim).await;
    }

    #[tokio::test]
    async fn claims_take_what_is_in_flight_into_account() {
        each_window(contract::claims_take_what_is_in_flight_into_account).await;
    }

    #[tokio::test]
    async fn destination_caps_count_only_what_the_case_caps_let_through() {
        each_window(contract::destination_caps_count_only_what_the_case_caps_let_through).await;
    }

    #[tokio::test]
    async fn saved_deliveries_are_claimed_earliest_first_under_a_lease() {
        each_window(contract::saved_deliveries_are_claimed_earliest_first_under_a_lease).await;
    }
}
