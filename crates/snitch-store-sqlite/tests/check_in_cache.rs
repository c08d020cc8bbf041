//! The check-in cache with a second writer on the same file: two stores on one SQLite
//! database, as the server and an admin command (or a second process) would be. Each
//! check-in's read may come from a store's cache; what the other wrote since must still
//! count (its check-ins, its changes, its deletes).

use std::sync::Arc;

use chrono::Duration;
use futures::future::join_all;
use snitch_core::contract::{case, snitch, t0, token};
use snitch_core::{Clock, ManualClock, Outcome, ServiceError, SnitchService, Status, Storage};
use snitch_store_sqlite::{connect, SqliteStorage, SqliteStorageOptions, MIGRATOR};

const NO_LIMIT: u32 = 1_000_000;

struct Two {
    a: SnitchService,
    b: SnitchService,
    store_a: SqliteStorage,
    store_b: SqliteStorage,
    clock: Arc<ManualClock>,
    _dir: tempfile::TempDir,
}

/// Two services on their own stores (each with its own pool) over one file.
async fn two_writers() -> Two {
    two_writers_with(SqliteStorageOptions::default()).await
}

/// [`two_writers`], the first store with `options_a`.
async fn two_writers_with(options_a: SqliteStorageOptions) -> Two {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a directory");
    let path = dir.path().join("snitch.db");
    let pool_a = connect(&path, 4).await.expect("open");
    MIGRATOR.run(&pool_a).await.expect("migrate");
    let pool_b = connect(&path, 4).await.expect("open");
    let store_a = SqliteStorage::with_options(pool_a, options_a);
    let store_b = SqliteStorage::new(pool_b);
    let acme = case("acme");
    store_a.upsert_case(&acme).await.expect("upsert");
    store_a
        .insert_snitch(&snitch(&acme, 1, t0()), NO_LIMIT)
        .await
        .expect("insert");
    let clock = Arc::new(ManualClock::new(t0()));
    let on = |store: &SqliteStorage| {
        SnitchService::new(
            Arc::new(store.clone()) as Arc<dyn Storage>,
            Arc::clone(&clock) as Arc<dyn Clock>,
        )
    };
    Two {
        a: on(&store_a),
        b: on(&store_b),
        store_a,
        store_b,
        clock,
        _dir: dir,
    }
}

fn token_text() -> String {
    token(1).as_str().to_owned()
}

#[tokio::test]
async fn a_second_check_in_needs_no_read() {
    let two = two_writers().await;
    two.clock.advance(Duration::minutes(1));
    two.a
        .check_in(&token_text(), Outcome::Success, None)
        .await
        .expect("checked in");
    let hits = two.store_a.check_in_cache_hits();
    two.clock.advance(Duration::minutes(1));
    two.a
        .check_in(&token_text(), Outcome::Success, None)
        .await
        .expect("checked in");
    assert_eq!(two.store_a.check_in_cache_hits(), hits + 1);
}

#[tokio::test]
async fn check_ins_through_two_writers_are_all_recorded() {
    let two = two_writers().await;
    // Alternating, so each store's cached copy is stale at each of its check-ins.
    for n in 0..6 {
        two.clock.advance(Duration::minutes(1));
        let service = if n % 2 == 0 { &two.a } else { &two.b };
        let snitch = service
            .check_in(&token_text(), Outcome::Success, None)
            .await
            .expect("checked in");
        assert_eq!(snitch.version(), 2 + n, "one version per check-in");
    }
    let history = two.store_a.check_ins(&token(1), 100).await.expect("read");
    assert_eq!(history.len(), 6, "every check-in is in the history");
    let hits = two.store_a.check_in_cache_hits() + two.store_b.check_in_cache_hits();
    assert!(
        hits >= 2,
        "the stale copies were read from the caches: {hits}"
    );

    // Concurrent ones on both, all recorded.
    let calls = (0..40).map(|n| {
        let service = if n % 2 == 0 {
            two.a.clone()
        } else {
            two.b.clone()
        };
        async move {
            service
                .check_in(&token_text(), Outcome::Success, None)
                .await
        }
    });
    for result in join_all(calls).await {
        result.expect("checked in");
    }
    let history = two.store_b.check_ins(&token(1), 100).await.expect("read");
    assert_eq!(history.len(), 46);
}

#[tokio::test]
async fn what_the_other_writer_changed_or_deleted_counts() {
    let two = two_writers().await;
    two.clock.advance(Duration::minutes(1));
    // Held in A's cache.
    two.a
        .check_in(&token_text(), Outcome::Success, None)
        .await
        .expect("checked in");
    // B pauses it: A's copy is now stale.
    let acme = case("acme");
    two.b
        .pause(&acme, &token_text(), None)
        .await
        .expect("paused");
    two.clock.advance(Duration::minutes(1));
    let after = two
        .a
        .check_in(&token_text(), Outcome::Success, None)
        .await
        .expect("checked in");
    // Made from B's paused copy (version 3), not from A's stale one (2): a check-in
    // ends a pause, and its change applies over the pause's.
    assert_eq!(after.version(), 4, "{after:?}");
    assert_eq!(after.status(), Status::Healthy);
    assert!(
        after.state().event_seq() >= 3,
        "the pause's event was counted"
    );
    let stored = two
        .store_b
        .snitch(&token(1))
        .await
        .expect("read")
        .expect("stored");
    assert_eq!(stored.version(), after.version(), "A's save was over B's");
    // B deletes it: A's check-in finds nothing, whatever it held.
    assert!(two.store_b.delete_snitch(&token(1)).await.expect("deleted"));
    two.clock.advance(Duration::minutes(1));
    let gone = two.a.check_in(&token_text(), Outcome::Success, None).await;
    assert!(matches!(gone, Err(ServiceError::NotFound)), "{gone:?}");
}

#[tokio::test]
async fn a_store_without_a_cache_reads_every_time() {
    let two = two_writers_with(SqliteStorageOptions::default().with_cache_capacity(0)).await;
    let (service, store, clock) = (&two.a, &two.store_a, &two.clock);
    for _ in 0..3 {
        clock.advance(Duration::minutes(1));
        service
            .check_in(&token_text(), Outcome::Success, None)
            .await
            .expect("checked in");
    }
    assert_eq!(store.check_in_cache_hits(), 0);
}
