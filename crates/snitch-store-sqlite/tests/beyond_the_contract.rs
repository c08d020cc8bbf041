//! What only the SQLite store has to get right: the durability settings, group commit
//! (the rules both SQL stores share, from `snitch_store_sql::group_commit_tests`), no
//! `SQLITE_BUSY` under
//! concurrent writers (of one store, and of two stores on one file), unreadable rows,
//! migrations that run again, and data that survives reopening the file.

use std::path::PathBuf;

use futures::future::join_all;
use snitch_core::contract::{at, case, checked_in, snitch, token};
use snitch_core::{Storage, StorageError};
use snitch_store_sql::group_commit_tests::acme_with_snitches;
use snitch_store_sqlite::{connect, SqliteStorage, MIGRATOR};
use sqlx::SqlitePool;

/// A fresh directory under Cargo's `target/tmp`.
fn fresh_dir() -> PathBuf {
    tempfile::Builder::new()
        .prefix("sqlite-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory")
        .keep()
}

async fn open(path: &std::path::Path) -> SqlitePool {
    let pool = connect(path, 4).await.expect("open");
    MIGRATOR.run(&pool).await.expect("migrate");
    pool
}

async fn fresh_pool() -> SqlitePool {
    open(&fresh_dir().join("snitch.db")).await
}

/// The rules of group commit both SQL stores share.
mod shared {
    use std::time::Duration;

    use snitch_store_sql::group_commit_tests::Driver;
    use snitch_store_sqlite::{SqliteStorage, SqliteStorageOptions};

    /// A store on a file in a directory of its own, and the directory (removed when the
    /// test ends).
    async fn fresh_store() -> (SqliteStorage, tempfile::TempDir) {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a directory");
        let pool = super::open(&dir.path().join("snitch.db")).await;
        (SqliteStorage::new(pool), dir)
    }

    const DRIVER: Driver<SqliteStorage> = Driver {
        batches_committed: SqliteStorage::batches_committed,
        batching: |store, saves| {
            SqliteStorage::with_options(
                store.pool().clone(),
                SqliteStorageOptions::default()
                    .with_max_wait(Duration::from_secs(60))
                    .with_max_batch(saves),
            )
        },
    };

    snitch_store_sql::group_commit_tests!(fresh_store, DRIVER);
}

#[tokio::test]
async fn connections_are_durable_wal_with_foreign_keys() {
    let pool = fresh_pool().await;
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&pool)
        .await
        .expect("read");
    assert_eq!(mode, "wal");
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(&pool)
        .await
        .expect("read");
    assert_eq!(synchronous, 2, "FULL");
    let foreign_keys: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(&pool)
        .await
        .expect("read");
    assert_eq!(foreign_keys, 1);
    let timeout: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(&pool)
        .await
        .expect("read");
    assert!(timeout >= 1_000, "{timeout}");
}

/// Two stores on one file (two pools, as two processes would have) write at once: every
/// write succeeds, none fails with SQLITE_BUSY.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_file_never_fail_busy() {
    let path = fresh_dir().join("snitch.db");
    let one = SqliteStorage::new(open(&path).await);
    let two = SqliteStorage::new(open(&path).await);
    let (acme, snitches) = acme_with_snitches(&one, 100).await;
    let mut tasks = Vec::new();
    for (i, s) in snitches.iter().enumerate() {
        let store = if i % 2 == 0 { one.clone() } else { two.clone() };
        let change = checked_in(s, at(5));
        tasks.push(tokio::spawn(async move { store.save(&change).await }));
        let store = if i % 2 == 0 { two.clone() } else { one.clone() };
        let extra = snitch(&acme, 1_000 + i as u64, at(0));
        tasks.push(tokio::spawn(async move {
            store.insert_snitch(&extra, 1_000_000).await
        }));
    }
    for result in join_all(tasks).await {
        result.expect("the task ran").expect("written");
    }
    assert_eq!(one.snitches(&acme.id, &[]).await.expect("list").len(), 200);
}

/// What was saved is there after the pool is closed and the file opened again.
#[tokio::test]
async fn saved_changes_survive_reopening_the_file() {
    let path = fresh_dir().join("snitch.db");
    let store = SqliteStorage::new(open(&path).await);
    let (_, snitches) = acme_with_snitches(&store, 2).await;
    let change = checked_in(&snitches[0], at(3));
    store.save(&change).await.expect("save");
    store.pool().close().await;

    let again = SqliteStorage::new(open(&path).await);
    assert_eq!(
        again.snitch(&token(1)).await.expect("read"),
        Some(change.snitch().clone())
    );
    assert_eq!(
        again.check_ins(&token(1), 10).await.expect("read"),
        change.check_ins()
    );
}

/// A stored value that its domain type refuses reads as `Corrupt`, never as a value.
#[tokio::test]
async fn unreadable_rows_are_corrupt() {
    let pool = fresh_pool().await;
    let store = SqliteStorage::new(pool.clone());
    acme_with_snitches(&store, 1).await;
    sqlx::query("UPDATE snitch_snitches SET interval = 'fortnightly'")
        .execute(&pool)
        .await
        .expect("spoil the row");
    let read = store.snitch(&token(1)).await;
    assert!(matches!(read, Err(StorageError::Corrupt(_))), "{read:?}");
    sqlx::query("UPDATE snitch_snitches SET interval = 'daily', tags = 'not json'")
        .execute(&pool)
        .await
        .expect("spoil the row");
    let read = store.snitch(&token(1)).await;
    assert!(matches!(read, Err(StorageError::Corrupt(_))), "{read:?}");
    // E-mail keywords that are no JSON, search nowhere known, or hold an empty keyword.
    for spoiled in [
        "not json",
        r#"{"failure":["x"],"success":[],"start":[],"search":"headers"}"#,
        r#"{"failure":[" "],"success":[],"start":[],"search":"both"}"#,
    ] {
        sqlx::query("UPDATE snitch_snitches SET tags = '[]', email_keywords = ?")
            .bind(spoiled)
            .execute(&pool)
            .await
            .expect("spoil the row");
        let read = store.snitch(&token(1)).await;
        assert!(
            matches!(read, Err(StorageError::Corrupt(_))),
            "{spoiled}: {read:?}"
        );
    }
}

/// A closed pool is a `Backend` failure, which may be retried.
#[tokio::test]
async fn a_closed_database_is_a_backend_failure() {
    let pool = fresh_pool().await;
    let store = SqliteStorage::new(pool.clone());
    pool.close().await;
    let read = store.case(&case("acme").id).await;
    assert!(matches!(read, Err(StorageError::Backend(_))), "{read:?}");
    let write = store.upsert_case(&case("acme")).await;
    assert!(matches!(write, Err(StorageError::Backend(_))), "{write:?}");
}

#[tokio::test]
async fn migrations_run_again() {
    let pool = fresh_pool().await;
    MIGRATOR.run(&pool).await.expect("migrate again");
}

/// A host that keeps its own tables in the same file with sqlx migrations of its own: both
/// migrators record into the one `_sqlx_migrations` table, and each runs again on every
/// start without tripping over the other's versions.
#[tokio::test]
async fn migrations_share_the_file_with_a_hosts_own() {
    let dir = fresh_dir();
    let path = dir.join("host.db");
    let host_migrations = dir.join("host-migrations");
    std::fs::create_dir(&host_migrations).expect("a directory");
    std::fs::write(
        host_migrations.join("1_teams.sql"),
        "CREATE TABLE teams (name TEXT PRIMARY KEY);",
    )
    .expect("a migration");
    let mut host = sqlx::migrate::Migrator::new(host_migrations)
        .await
        .expect("the host's migrations");
    host.set_ignore_missing(true);
    for _start in 0..2 {
        let pool = connect(&path, 4).await.expect("open");
        host.run(&pool).await.expect("the host's migrations");
        MIGRATOR.run(&pool).await.expect("Snitch's migrations");
        let store = SqliteStorage::new(pool.clone());
        store
            .upsert_case(&case("acme"))
            .await
            .expect("Snitch's tables");
        sqlx::query("INSERT OR IGNORE INTO teams (name) VALUES ('acme')")
            .execute(&pool)
            .await
            .expect("the host's tables");
        pool.close().await;
    }
}

/// `/readyz`: a file whose migrations did not (all) run is not ready, and says which one
/// is missing; once migrated it is.
#[tokio::test]
async fn a_store_without_its_migrations_is_not_ready() {
    let path = fresh_dir().join("snitch.db");
    let pool = connect(&path, 2).await.expect("open");
    let store = SqliteStorage::new(pool.clone());
    let err = store.check_ready().await.expect_err("nothing migrated");
    assert!(matches!(err, StorageError::Backend(_)), "{err}");
    MIGRATOR.run(&pool).await.expect("migrate");
    store.check_ready().await.expect("ready");
    // A migration of this build that is not recorded as applied (an older file).
    let newest = MIGRATOR
        .iter()
        .map(|m| m.version)
        .max()
        .expect("migrations");
    sqlx::query("DELETE FROM _sqlx_migrations WHERE version = ?1")
        .bind(newest)
        .execute(&pool)
        .await
        .expect("forget one");
    let err = store.check_ready().await.expect_err("one missing");
    assert!(err.to_string().contains(&newest.to_string()), "{err}");
}

/// A COMMIT that SQLite refuses (here a deferred foreign key a trigger broke) rolls the
/// batch back: the save is a plain backend error, not an unknown outcome and never `Ok`,
/// nothing of it is stored, and the store goes on working.
#[tokio::test]
async fn a_commit_sqlite_refuses_is_rolled_back_and_reported() {
    let pool = fresh_pool().await;
    let store = SqliteStorage::new(pool.clone());
    let (_, snitches) = acme_with_snitches(&store, 1).await;
    let fresh = &snitches[0];
    sqlx::raw_sql(
        "CREATE TABLE parents (id INTEGER PRIMARY KEY); \
         CREATE TABLE orphans (parent INTEGER REFERENCES parents(id) \
         DEFERRABLE INITIALLY DEFERRED); \
         CREATE TRIGGER orphan_on_update AFTER UPDATE ON snitch_snitches \
         BEGIN INSERT INTO orphans VALUES (42); END;",
    )
    .execute(&pool)
    .await
    .expect("trigger");

    let change = checked_in(fresh, at(5));
    let refused = store.save(&change).await;
    assert!(
        matches!(&refused, Err(StorageError::Backend(_))),
        "refused at commit, rolled back: {refused:?}"
    );
    assert_eq!(
        store.snitch(fresh.token()).await.expect("read").as_ref(),
        Some(fresh)
    );
    assert!(store
        .check_ins(fresh.token(), 10)
        .await
        .expect("read")
        .is_empty());

    sqlx::query("DROP TRIGGER orphan_on_update")
        .execute(&pool)
        .await
        .expect("drop");
    store.save(&change).await.expect("saved once allowed");
    assert_eq!(
        store
            .check_ins(fresh.token(), 10)
            .await
            .expect("read")
            .len(),
        1
    );
}

/// A host's pool that commits without waiting for the disk (`synchronous` below FULL) is
/// not ready, and the error names the pragma; the store's own settings are.
#[tokio::test]
async fn a_host_pool_without_synchronous_full_is_not_ready() {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteSynchronous};
    let path = fresh_dir().join("host.db");
    let lax = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .synchronous(SqliteSynchronous::Normal);
    let pool = SqlitePoolOptions::new()
        .max_connections(2)
        .connect_with(lax)
        .await
        .expect("open");
    MIGRATOR.run(&pool).await.expect("migrate");
    let err = SqliteStorage::new(pool.clone())
        .check_ready()
        .await
        .expect_err("not durable");
    assert!(err.to_string().contains("synchronous"), "{err}");
    pool.close().await;
    let pool = connect(&path, 2).await.expect("open");
    SqliteStorage::new(pool).check_ready().await.expect("ready");
}

/// A snitch stored before schedules and tolerances existed reads back after their
/// migrations as what it was: an interval snitch, tolerating nothing.
#[tokio::test]
async fn a_snitch_stored_before_schedules_reads_back_as_an_interval_snitch() {
    const SCHEDULES: i64 = 20261227000000;
    let pool = connect(&fresh_dir().join("old.db"), 2).await.expect("open");
    let old = sqlx::migrate::Migrator {
        migrations: std::borrow::Cow::Owned(
            MIGRATOR
                .iter()
                .filter(|m| m.version < SCHEDULES)
                .cloned()
                .collect(),
        ),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    old.run(&pool).await.expect("the old migrations");
    sqlx::raw_sql(
        "INSERT INTO snitch_cases (id, members, max_snitches, error_notices, on_hold) \
         VALUES ('acme', '[]', 10, 1, 0); \
         INSERT INTO snitch_snitches (token, case_id, name, tags, notes, interval, \
           alert_type, alert_email, created_at, status, checked_in_at, last_check_in_at, \
           anchor_at, deadline_at, smart_offsets_ms, error_announced, event_seq, version, \
           wake_at) \
         VALUES ('tok00000000000000001', 'acme', 'old job', '[]', '', 'hourly', 'basic', \
           '[]', 0, 'healthy', 60000, 60000, 60000, 7200000, '[60000]', 0, 1, 2, 7200000);",
    )
    .execute(&pool)
    .await
    .expect("a row of the old table");
    MIGRATOR.run(&pool).await.expect("the new migrations");
    let store = SqliteStorage::new(pool.clone());
    let old_job = store.snitch(&token(1)).await.expect("read").expect("kept");
    assert_eq!(old_job.interval(), Some(snitch_core::Interval::Hourly));
    assert_eq!(old_job.cadence().expected_runs(), None);
    assert_eq!(
        (old_job.failure_tolerance(), old_job.missed_tolerance()),
        (0, 0)
    );
    assert_eq!(old_job.state().consecutive_misses(), 0);
    // And it saves as any other.
    store
        .save(&checked_in(&old_job, at(2)))
        .await
        .expect("save");
}

/// A file migrated before the tables took the prefix `snitch_` keeps its data: the
/// migration renames the tables (and remakes their indexes), it does not recreate them.
#[tokio::test]
async fn tables_renamed_to_snitch_prefix_keep_their_rows() {
    const PREFIXED: i64 = 20261226000000;
    let pool = connect(&fresh_dir().join("old.db"), 2).await.expect("open");
    let old = sqlx::migrate::Migrator {
        migrations: std::borrow::Cow::Owned(
            MIGRATOR
                .iter()
                .filter(|m| m.version < PREFIXED)
                .cloned()
                .collect(),
        ),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    old.run(&pool).await.expect("the old migrations");
    sqlx::raw_sql(
        "INSERT INTO cases (id, members, max_snitches, error_notices, on_hold) \
         VALUES ('acme', '[]', 10, 1, 0); \
         INSERT INTO webhooks (id, case_id, url, secret, created_at) \
         VALUES ('hook1', 'acme', 'https://hooks.example.test/1', NULL, 0);",
    )
    .execute(&pool)
    .await
    .expect("rows of the old tables");
    MIGRATOR.run(&pool).await.expect("the prefix");
    let store = SqliteStorage::new(pool.clone());
    store.check_ready().await.expect("ready");
    let acme = store
        .case(&case("acme").id)
        .await
        .expect("read")
        .expect("kept");
    assert_eq!(acme.plan.max_snitches, 10);
    let hooks = store.webhooks(&acme.id).await.expect("read");
    assert_eq!(hooks.len(), 1);
    // The renamed tables work as before, references between them included.
    let (_, snitches) = acme_with_snitches(&store, 1).await;
    store
        .save(&checked_in(&snitches[0], at(1)))
        .await
        .expect("save");
    assert_eq!(store.check_ins(&token(1), 10).await.expect("read").len(), 1);
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'index') \
         AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations' ORDER BY name",
    )
    .fetch_all(&pool)
    .await
    .expect("the schema");
    let unprefixed: Vec<&String> = tables
        .iter()
        .filter(|t| !t.starts_with("snitch_"))
        .collect();
    assert!(unprefixed.is_empty(), "{unprefixed:?}");
}

mod fair_claims {
    use proptest::prelude::*;
    use snitch_store_sql::claims::{claims_as_select_picks, outboxes};
    use snitch_store_sqlite::{SqliteStorage, SqliteStorageOptions};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        /// The store's fair claim takes what `ClaimLimits::select` picks, on a fresh file
        /// per outbox, whatever the window it ranks first (of one to three, or the
        /// default, which holds every due delivery of these outboxes).
        #[test]
        fn claims_take_what_claim_limits_select(
            outbox in outboxes(),
            window in prop::option::of(1usize..4),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                let options = window.map_or_else(SqliteStorageOptions::default, |w| {
                    SqliteStorageOptions::default().with_claim_window(w)
                });
                let store = SqliteStorage::with_options(super::fresh_pool().await, options);
                claims_as_select_picks(&store, &outbox).await;
            });
        }
    }
}
