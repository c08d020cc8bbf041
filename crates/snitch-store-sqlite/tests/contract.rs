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

snitch_core::claim_window_tests!(|window| fresh_store_with(
    SqliteStorageOptions::default().with_claim_window(window)
));
