//! Group commit: concurrent saves share a transaction, each change still applies whole or
//! not at all, and a save is answered `Ok` only once its transaction committed.
//!
//! Tests that need several saves in one batch make them on a store whose batches close
//! when full (`max_batch` = the number of saves, with a long `max_wait` as a backstop)
//! and check that exactly one transaction committed. Fixtures are set up through a
//! second store on the same database, so they never wait for such a batch.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use snitch_core::clock::monotonic_now;
use snitch_core::contract::{at, checked_in, checked_in_with, failure, token};
use snitch_core::{Change, Snitch, Storage, StorageError};
use snitch_store_postgres::{PgStorage, PgStorageOptions, TRIMS_PER_BATCH};
use snitch_store_sql::group_commit_tests::{
    acme_with_snitches, check_in_count, outcomes, save_all, stored,
};
use sqlx::PgPool;
use support::{fresh_database, fresh_database_with_connections, stored_check_ins, until};

/// A store whose next batch is `saves` changes: it waits (up to a minute) until they are
/// all queued, then commits them in one transaction.
fn batching(pool: &PgPool, saves: usize) -> PgStorage {
    PgStorage::with_options(
        pool.clone(),
        PgStorageOptions::default()
            .with_max_wait(Duration::from_secs(60))
            .with_max_batch(saves),
    )
}

/// The rules of group commit both SQL stores share.
mod shared {
    use snitch_store_postgres::PgStorage;
    use snitch_store_sql::group_commit_tests::Driver;

    use super::support::fresh_database;

    async fn fresh_store() -> (
        PgStorage,
        snitch_store_postgres::test_databases::TestDatabase,
    ) {
        let db = fresh_database().await;
        (PgStorage::new(db.pool.clone()), db)
    }

    const DRIVER: Driver<PgStorage> = Driver {
        batches_committed: PgStorage::batches_committed,
        batching: |store, saves| super::batching(store.pool(), saves),
    };

    snitch_store_sql::group_commit_tests!(fresh_store, DRIVER);
}

/// A batch needs one connection, whatever it does: on a pool of one, a batch that falls
/// back to one change at a time (a failing change) and trims histories afterwards still
/// commits at once, where a second connection would be waited for until the pool's
/// timeout.
#[tokio::test]
async fn a_store_on_a_pool_of_one_connection_falls_back_and_trims() {
    let db = fresh_database_with_connections(1).await;
    let pool = db.pool.clone();
    let setup = PgStorage::new(pool.clone());
    let (_, read) = acme_with_snitches(&setup, 3).await;
    let earlier = checked_in(&read[0], at(1));
    setup.save(&earlier).await.expect("save");
    // A history of 1 is full after 2 check-ins: the second save trims it.
    let first = checked_in(&read[2], at(2)).with_keep_check_ins(1);
    setup.save(&first).await.expect("save");
    let second = checked_in(first.snitch(), at(3)).with_keep_check_ins(1);

    let taken_ids = checked_in(&read[1], at(5)).with_events(earlier.events().to_vec());
    let batch = vec![taken_ids, second];
    let store = batching(&pool, batch.len());
    let results = tokio::time::timeout(Duration::from_secs(10), save_all(&store, &batch))
        .await
        .expect("the batch did not wait for a second connection");

    assert_eq!(outcomes(&results), ["backend", "ok"]);
    let token = read[2].token().as_str();
    until(
        "the history was trimmed to the one it keeps",
        Duration::from_secs(10),
        || async { stored_check_ins(&pool, token).await == 1 },
    )
    .await;
}

/// A batch trims at most `TRIMS_PER_BATCH` full histories (snitches checked in alike
/// fill up together); each of the others is trimmed after a later save of its own.
#[tokio::test]
async fn a_batch_trims_so_many_histories_and_later_saves_trim_the_rest() {
    let db = fresh_database().await;
    let pool = db.pool.clone();
    let setup = PgStorage::new(pool.clone());
    let count = 2 * TRIMS_PER_BATCH + 4;
    let (_, read) = acme_with_snitches(&setup, count as u64).await;
    let mut held = Vec::new();
    for s in &read {
        let first = checked_in(s, at(1)).with_keep_check_ins(1);
        setup.save(&first).await.expect("save");
        held.push(first.snitch().clone());
    }
    let mut untrimmed: Vec<usize> = (0..count).collect();
    let mut second = 2;
    // Each round: one batch of a check-in of every snitch not trimmed yet, each history
    // full after it (a history of 1 is full at 2).
    while !untrimmed.is_empty() && second < 10 {
        let changes: Vec<Change> = untrimmed
            .iter()
            .map(|&i| checked_in(&held[i], at(second)).with_keep_check_ins(1))
            .collect();
        let store = batching(&pool, changes.len());
        for result in save_all(&store, &changes).await {
            result.expect("save");
        }
        for (&i, change) in untrimmed.iter().zip(&changes) {
            held[i] = change.snitch().clone();
        }
        let expected_trims = untrimmed.len().min(TRIMS_PER_BATCH);
        let tokens: Vec<(usize, String)> = untrimmed
            .iter()
            .map(|&i| (i, held[i].token().as_str().to_owned()))
            .collect();
        let trimmed_now = || async {
            let mut trimmed = Vec::new();
            for (i, token) in &tokens {
                if stored_check_ins(&pool, token).await == 1 {
                    trimmed.push(*i);
                }
            }
            trimmed
        };
        until(
            "the batch's trims are done",
            Duration::from_secs(10),
            || async { trimmed_now().await.len() >= expected_trims },
        )
        .await;
        // No save is left to trim more: the count stays.
        let trimmed = trimmed_now().await;
        assert_eq!(trimmed.len(), expected_trims, "round {second}");
        untrimmed.retain(|i| !trimmed.contains(i));
        second += 1;
    }
    assert!(
        untrimmed.is_empty(),
        "{} histories never trimmed",
        untrimmed.len()
    );
    // 20 snitches: 8, 8, then the last 4.
    assert_eq!(second, 5);
}

/// A store busy saving does not keep its pool's only connection from reads: on a pool of
/// one, with saves queued back to back (stale ones, which need no read), a read still
/// gets its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_busy_saving_leaves_its_pool_to_reads() {
    let db = fresh_database_with_connections(1).await;
    let pool = db.pool.clone();
    let store = PgStorage::new(pool.clone());
    let (_, read) = acme_with_snitches(&store, 20).await;
    for s in &read {
        store.save(&checked_in(s, at(1))).await.expect("save");
    }
    // Made from the first reads: every one of them conflicts now, without reading.
    let stale: Vec<Change> = read.iter().map(|s| checked_in(s, at(2))).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let busy = tokio::spawn({
        let (store, stop, rounds) = (store.clone(), Arc::clone(&stop), Arc::clone(&rounds));
        async move {
            while !stop.load(Ordering::Relaxed) {
                save_all(&store, &stale).await;
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    // Busy: a round of saves done and the next under way.
    until("a round of busy saves", Duration::from_secs(10), || async {
        rounds.load(Ordering::Relaxed) >= 1
    })
    .await;

    let mut reads = Vec::new();
    for s in &read[..5] {
        reads.push(tokio::time::timeout(Duration::from_secs(5), store.snitch(s.token())).await);
    }
    stop.store(true, Ordering::Relaxed);
    busy.abort();
    for answer in reads {
        let found = answer
            .expect("the read got a connection while the store was busy")
            .expect("read");
        assert!(found.is_some());
    }
}

/// When the commit itself fails, no change of the batch is reported saved, and none is.
#[tokio::test]
async fn a_failed_commit_fails_every_change_of_its_batch() {
    let db = fresh_database().await;
    let pool = db.pool.clone();
    let setup = PgStorage::new(pool.clone());
    let (_, read) = acme_with_snitches(&setup, 3).await;
    // A deferred check that refuses a poisoned check-in at commit, after every change of
    // the batch applied.
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN \
           IF NEW.message = 'poison' THEN RAISE EXCEPTION 'poisoned check-in'; END IF; \
           RETURN NULL; \
         END $$; \
         CREATE CONSTRAINT TRIGGER refuse_poison AFTER INSERT ON snitch.check_ins \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_poison();",
    )
    .execute(&pool)
    .await
    .expect("create the trigger");

    let batch = vec![
        checked_in(&read[0], at(5)),
        checked_in_with(&read[1], failure(at(5), "1", "poison")),
        checked_in(&read[2], at(5)),
    ];
    let store = batching(&pool, batch.len());
    let results = save_all(&store, &batch).await;

    assert_eq!(outcomes(&results), ["backend", "backend", "backend"]);
    assert_eq!(store.batches_committed(), 0);
    for s in &read {
        assert_eq!(stored(&store, s).await.as_ref(), Some(s), "unchanged");
        assert_eq!(check_in_count(&store, s).await, 0);
    }
}

/// Batches applying at once that change the same snitches in opposite orders neither
/// deadlock nor lose a conflict: of the changes made from one read of a snitch, exactly
/// one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_batches_on_the_same_snitches_let_exactly_one_win_each() {
    let db = fresh_database().await;
    let pool = db.pool.clone();
    let store = PgStorage::with_options(
        pool,
        PgStorageOptions::default()
            .with_max_wait(Duration::ZERO)
            .with_max_batch(2)
            .with_max_concurrent_batches(4)
            // Every batch starts beside the ones applying.
            .with_overlap_after(Duration::ZERO),
    );
    let (_, read) = acme_with_snitches(&store, 40).await;
    // For each pair of snitches, a batch that changes both and one right after it that
    // changes them in the opposite order.
    let changes: Vec<Change> = read
        .chunks(2)
        .flat_map(|pair| {
            let [a, b] = pair else { unreachable!() };
            [
                checked_in(a, at(5)),
                checked_in(b, at(5)),
                checked_in(b, at(6)),
                checked_in(a, at(6)),
            ]
        })
        .collect();

    let results = save_all(&store, &changes).await;

    let mut winners = Vec::new();
    for (change, result) in changes.iter().zip(results) {
        match result {
            Ok(()) => winners.push(change),
            Err(StorageError::Conflict) => {}
            Err(e) => panic!("expected Ok or Conflict, got {e:?}"),
        }
    }
    assert_eq!(winners.len(), read.len(), "one winner per snitch");
    for winner in winners {
        assert_eq!(
            stored(&store, winner.snitch()).await.as_ref(),
            Some(winner.snitch())
        );
        assert_eq!(check_in_count(&store, winner.snitch()).await, 1);
    }
}

/// A batch waiting for a row lock that another transaction holds (another server, an
/// operator's open `psql` session) holds up the saves queued behind it only briefly:
/// after `overlap_after` the next batch starts beside it, on a connection of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_stuck_on_a_row_lock_does_not_hold_up_the_next() {
    let db = fresh_database().await;
    let pool = db.pool.clone();
    let store = PgStorage::with_options(
        pool.clone(),
        PgStorageOptions::default().with_overlap_after(Duration::from_millis(5)),
    );
    let (_, read) = acme_with_snitches(&store, 2).await;
    let (stuck, free) = (&read[0], &read[1]);
    let mut holder = pool.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM snitch.snitches WHERE token = $1 FOR UPDATE")
        .bind(stuck.token().as_str())
        .execute(&mut *holder)
        .await
        .expect("lock the row");

    let stuck_change = checked_in(stuck, at(5));
    let stuck_save = tokio::spawn({
        let store = store.clone();
        async move { store.save(&stuck_change).await }
    });
    // The batch of `stuck` is applying, waiting for the lock.
    let waiting = "SELECT count(*) FROM pg_stat_activity \
                   WHERE datname = current_database() AND wait_event_type = 'Lock'";
    until(
        "the save reaches the lock",
        Duration::from_secs(30),
        || async {
            sqlx::query_scalar::<_, i64>(waiting)
                .fetch_one(&pool)
                .await
                .expect("activity")
                > 0
        },
    )
    .await;

    let saved = tokio::time::timeout(
        Duration::from_secs(30),
        store.save(&checked_in(free, at(5))),
    )
    .await
    .expect("saved while the other batch still waits");
    assert!(saved.is_ok(), "{saved:?}");
    assert!(!stuck_save.is_finished(), "the lock is still held");

    holder.rollback().await.expect("release the lock");
    let stuck_saved = stuck_save.await.expect("joined");
    assert!(stuck_saved.is_ok(), "{stuck_saved:?}");
    assert_eq!(check_in_count(&store, stuck).await, 1);
    assert_eq!(check_in_count(&store, free).await, 1);
}

/// Between bursts the batching task holds no connection: though it keeps its
/// connections from one batch to the next while busy, every one is back in the pool
/// once it is idle (for other users of the pool, and for `PgPool::close`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_store_holds_no_connection() {
    let db = fresh_database().await;
    let pool = db.pool.clone();
    let store = PgStorage::new(pool.clone());
    let (_, snitches) = acme_with_snitches(&store, 100).await;
    let changes: Vec<Change> = snitches.iter().map(|s| checked_in(s, at(5))).collect();
    for saved in save_all(&store, &changes).await {
        saved.expect("saved");
    }

    until(
        "every connection of the pool is back in it",
        Duration::from_secs(30),
        || async { pool.num_idle() == pool.size() as usize },
    )
    .await;
}

/// Postgres ending every session of the store while it is busy (a restart, an operator's
/// `pg_terminate_backend`) fails at most the saves of the batches on those connections:
/// the store keeps no dead connection, and the saves after it commit, right after the
/// busy time (while the store still holds its connections) as later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saves_after_postgres_ended_the_sessions_commit() {
    let db = fresh_database_with_connections(10).await;
    let pool = db.pool.clone();
    let store = PgStorage::new(pool.clone());
    let (_, snitches) = acme_with_snitches(&store, 40).await;
    let stop = Arc::new(AtomicBool::new(false));
    let waves = Arc::new(AtomicUsize::new(0));
    let busy = tokio::spawn({
        let (store, snitches, stop, waves) = (
            store.clone(),
            snitches.clone(),
            Arc::clone(&stop),
            Arc::clone(&waves),
        );
        async move {
            let mut minute = 1;
            while !stop.load(Ordering::Relaxed) {
                check_in_wave(&store, &snitches, minute).await;
                minute += 1;
                waves.fetch_add(1, Ordering::Relaxed);
            }
            minute
        }
    });
    // Busy: a wave of check-ins done (the store holds its connections), the next under way.
    until(
        "a wave of busy check-ins",
        Duration::from_secs(10),
        || async { waves.load(Ordering::Relaxed) >= 1 },
    )
    .await;
    let ended: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(&pool)
    .await
    .expect("end the other sessions");
    assert!(!ended.is_empty(), "the store had sessions to end");
    // Busy a while longer: the batches of the next waves meet the dead connections.
    let ended_at = waves.load(Ordering::Relaxed);
    until(
        "two more waves of busy check-ins",
        Duration::from_secs(10),
        || async { waves.load(Ordering::Relaxed) >= ended_at + 2 },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let minute = busy.await.expect("the busy saves ran");

    let right_after = check_in_wave(&store, &snitches, minute).await;
    assert!(right_after.iter().all(Result::is_ok), "{right_after:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let later = check_in_wave(&store, &snitches, minute + 1).await;
    assert!(later.iter().all(Result::is_ok), "{later:?}");
}

/// Checks every snitch in at `minute`, all at once, each from a fresh read.
async fn check_in_wave(
    store: &PgStorage,
    snitches: &[Snitch],
    minute: i64,
) -> Vec<Result<(), StorageError>> {
    let saves = snitches.iter().map(|s| async {
        let read = store
            .snitch(s.token())
            .await?
            .ok_or(StorageError::NotFound)?;
        store.save(&checked_in(&read, at(minute))).await
    });
    join_all(saves).await
}

/// With `max_batch` 1, every save is a transaction of its own.
#[tokio::test]
async fn a_batch_of_one_commits_each_save_alone() {
    let db = fresh_database().await;
    let pool = db.pool.clone();
    let store = PgStorage::with_options(pool, PgStorageOptions::default().with_max_batch(1));
    let (_, read) = acme_with_snitches(&store, 20).await;

    let batch: Vec<Change> = read.iter().map(|s| checked_in(s, at(5))).collect();
    let results = save_all(&store, &batch).await;

    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(store.batches_committed(), 20);
}

/// A store can be made outside a runtime. When the runtime its batching task ran on is
/// gone, a save neither hangs nor claims success without committing: it spawns a new
/// task and commits, or fails.
#[test]
fn a_save_after_its_batching_task_died_answers() {
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    };
    let first = runtime();
    let db = first.block_on(fresh_database());
    let pool = db.pool.clone();
    let store = PgStorage::new(pool.clone());
    let (_, read) = first.block_on(acme_with_snitches(&store, 2));
    first
        .block_on(store.save(&checked_in(&read[0], at(5))))
        .expect("save");
    drop(first);

    let second = runtime();
    let change = checked_in(&read[1], at(5));
    let result = second
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(30), store.save(&change)).await
        })
        .expect("the save answers");
    let now = second.block_on(async {
        let pool = PgStorage::new(fresh_pool_like(&pool).await);
        pool.snitch(&token(2)).await.expect("read")
    });
    // The pool's connections died with the first runtime: the save fails before its
    // statement (`Backend`), or when its COMMIT cannot be sent or answered (outcome
    // unknown: stored whole or not at all); it never claims a commit it did not make.
    match result {
        Ok(()) => assert_eq!(now, Some(change.snitch().clone())),
        Err(StorageError::Backend(_)) => assert_eq!(now, Some(read[1].clone())),
        Err(StorageError::CommitOutcomeUnknown(_)) => assert!(
            now == Some(read[1].clone()) || now == Some(change.snitch().clone()),
            "half a change stored: {now:?}"
        ),
        Err(e) => panic!("expected Ok, Backend or CommitOutcomeUnknown, got {e:?}"),
    }
}

/// A new pool on the database of `pool`, for a runtime other than the one it was made on.
async fn fresh_pool_like(pool: &PgPool) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(pool.connect_options().as_ref().clone())
        .await
        .expect("a new pool")
}

/// Saves/s of 2,000 concurrent check-ins on 2,000 snitches, with group commit and with
/// every save committed alone (`max_batch` 1), each with the defaults (one batch at a
/// time while it is quick), with 4 transactions at a time from the start, and with 1. Prints, asserts nothing about speed:
/// `cargo test -p snitch-store-postgres --test group_commit -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a benchmark: run it on purpose"]
async fn throughput_of_grouped_and_single_commits() {
    const SAVES: u64 = 2_000;
    let defaults = PgStorageOptions::default();
    let configurations = [
        ("group commit, defaults", defaults),
        (
            "group commit, 4 batches at a time",
            defaults.with_overlap_after(Duration::ZERO),
        ),
        (
            "group commit, 1 batch at a time",
            defaults.with_max_concurrent_batches(1),
        ),
        (
            "no grouping (max_batch 1), defaults",
            defaults.with_max_batch(1),
        ),
        (
            "no grouping (max_batch 1), 4 at a time",
            defaults
                .with_max_batch(1)
                .with_overlap_after(Duration::ZERO),
        ),
        (
            "no grouping (max_batch 1), 1 at a time",
            defaults.with_max_batch(1).with_max_concurrent_batches(1),
        ),
    ];
    for (name, options) in configurations {
        let db = fresh_database_with_connections(16).await;
        let pool = db.pool.clone();
        let store = PgStorage::with_options(pool, options);
        let (_, read) = acme_with_snitches(&store, SAVES).await;
        let changes: Vec<Change> = read.iter().map(|s| checked_in(s, at(5))).collect();

        let before = store.batches_committed();
        let started = monotonic_now();
        let saves = changes.into_iter().map(|change| {
            let store = store.clone();
            tokio::spawn(async move { store.save(&change).await })
        });
        for saved in join_all(saves).await {
            saved.expect("the save task ran").expect("saved");
        }
        let elapsed = started.elapsed();
        let transactions = store.batches_committed() - before;
        eprintln!(
            "{name}: {SAVES} saves in {:.1} ms = {:.0} saves/s, {transactions} transactions",
            elapsed.as_secs_f64() * 1e3,
            SAVES as f64 / elapsed.as_secs_f64(),
        );
    }
}
