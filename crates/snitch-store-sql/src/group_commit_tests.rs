//! What group commit must do on both SQL stores, written once (feature `test-support`):
//! concurrent saves share transactions, and within one batch each change applies whole or
//! not at all, as if the changes had been saved one after another. Each store's tests call
//! these on a fresh database.
//!
//! A test that needs several saves in one batch makes them on a store whose batches close
//! when full ([`Driver::batching`]: `max_batch` = the number of saves, a long
//! `max_wait` as a backstop) and checks that exactly one transaction committed. Fixtures
//! are set up through another store on the same database, so they never wait for such a
//! batch.

use futures::future::join_all;
use snitch_core::contract::{at, case, checked_in, snitch};
use snitch_core::{Case, Change, Snitch, Storage, StorageError};

/// How these tests drive a store's group commit.
#[derive(Debug, Clone, Copy)]
pub struct Driver<S> {
    /// How many transactions of saves the store has committed.
    pub batches_committed: fn(&S) -> u64,
    /// Another store on the same database whose batches close only once `saves` changes
    /// are queued.
    pub batching: fn(&S, usize) -> S,
}

/// Stored cases never hold more snitches than this in these tests.
const NO_LIMIT: u32 = 1_000_000;

/// Stores case `acme` with pending snitches `1..=count`, as they were stored.
pub async fn acme_with_snitches(store: &impl Storage, count: u64) -> (Case, Vec<Snitch>) {
    let acme = case("acme");
    store.upsert_case(&acme).await.expect("upsert");
    let snitches: Vec<Snitch> = (1..=count).map(|n| snitch(&acme, n, at(0))).collect();
    for chunk in snitches.chunks(50) {
        for inserted in join_all(chunk.iter().map(|s| store.insert_snitch(s, NO_LIMIT))).await {
            inserted.expect("insert");
        }
    }
    (acme, snitches)
}

/// The results, `Ok` or the name of the error, to compare with what was expected.
pub fn outcomes(results: &[Result<(), StorageError>]) -> Vec<&'static str> {
    results
        .iter()
        .map(|r| match r {
            Ok(()) => "ok",
            Err(StorageError::Conflict) => "conflict",
            Err(StorageError::NotFound) => "not found",
            Err(StorageError::Backend(_)) => "backend",
            Err(_) => "other",
        })
        .collect()
}

/// The stored snitch `s` is a version of.
pub async fn stored(store: &impl Storage, s: &Snitch) -> Option<Snitch> {
    store.snitch(s.token()).await.expect("read")
}

/// How many check-ins of `s` are kept.
pub async fn check_in_count(store: &impl Storage, s: &Snitch) -> usize {
    store.check_ins(s.token(), 1_000).await.expect("read").len()
}

/// Saves the changes concurrently (queued in order) and returns their results.
pub async fn save_all(store: &impl Storage, changes: &[Change]) -> Vec<Result<(), StorageError>> {
    join_all(changes.iter().map(|c| store.save(c))).await
}

/// `count` check-ins on `count` snitches, saved from as many tasks at once, all commit, in
/// fewer than half as many transactions, each with its check-in.
pub async fn concurrent_saves_share_few_transactions<S: Storage + Clone + 'static>(
    store: S,
    driver: Driver<S>,
    count: u64,
) {
    let (_, snitches) = acme_with_snitches(&store, count).await;
    let changes: Vec<Change> = snitches.iter().map(|s| checked_in(s, at(5))).collect();

    let before = (driver.batches_committed)(&store);
    let saves = changes.iter().cloned().map(|change| {
        let store = store.clone();
        tokio::spawn(async move { store.save(&change).await })
    });
    for saved in join_all(saves).await {
        saved.expect("the save task ran").expect("saved");
    }
    let transactions = (driver.batches_committed)(&store) - before;

    assert!(
        transactions < count / 2,
        "{count} saves took {transactions} transactions"
    );
    for change in &changes {
        assert_eq!(
            stored(&store, change.snitch()).await.as_ref(),
            Some(change.snitch())
        );
        let check_ins = store
            .check_ins(change.snitch().token(), 10)
            .await
            .expect("read");
        assert_eq!(check_ins, change.check_ins().to_vec());
    }
}

/// In one batch, changes refused for a stale version leave the others committed, and
/// changes to one snitch apply as if one after another: the second from the same read
/// conflicts, one made from the first's result applies.
pub async fn conflicts_in_a_batch_leave_the_others_committed<S: Storage>(
    setup: S,
    driver: Driver<S>,
) {
    let (_, read) = acme_with_snitches(&setup, 4).await;
    // Snitch 2 moves on after it was read.
    let moved_on = checked_in(&read[1], at(1));
    setup.save(&moved_on).await.expect("save");

    let first = checked_in(&read[0], at(5));
    let batch = vec![
        first.clone(),
        checked_in(&read[1], at(5)),
        checked_in(&read[2], at(5)),
        checked_in(&read[0], at(6)),
        checked_in(first.snitch(), at(7)),
        checked_in(&read[3], at(5)),
    ];
    let store = (driver.batching)(&setup, batch.len());
    let results = save_all(&store, &batch).await;

    assert_eq!(
        outcomes(&results),
        ["ok", "conflict", "ok", "conflict", "ok", "ok"]
    );
    assert_eq!((driver.batches_committed)(&store), 1, "one transaction");
    assert_eq!(
        stored(&store, &read[0]).await,
        Some(batch[4].snitch().clone())
    );
    let check_ins = store.check_ins(read[0].token(), 10).await.expect("read");
    let expected: Vec<_> = [&batch[4], &batch[0]]
        .iter()
        .flat_map(|c| c.check_ins().to_vec())
        .collect();
    assert_eq!(check_ins, expected, "the first and the one made from it");
    assert_eq!(
        stored(&store, &read[1]).await,
        Some(moved_on.snitch().clone())
    );
    assert_eq!(check_in_count(&store, &read[1]).await, 1);
    assert_eq!(
        stored(&store, &read[2]).await,
        Some(batch[2].snitch().clone())
    );
    assert_eq!(
        stored(&store, &read[3]).await,
        Some(batch[5].snitch().clone())
    );
}

/// A change to a snitch deleted meanwhile is `NotFound`; the rest of its batch commits.
pub async fn a_deleted_snitch_in_a_batch_is_not_found_and_the_others_commit<S: Storage>(
    setup: S,
    driver: Driver<S>,
) {
    let (_, read) = acme_with_snitches(&setup, 3).await;
    assert!(setup.delete_snitch(read[1].token()).await.expect("delete"));

    let batch: Vec<Change> = read.iter().map(|s| checked_in(s, at(5))).collect();
    let store = (driver.batching)(&setup, batch.len());
    let results = save_all(&store, &batch).await;

    assert_eq!(outcomes(&results), ["ok", "not found", "ok"]);
    assert_eq!((driver.batches_committed)(&store), 1, "one transaction");
    assert_eq!(
        stored(&store, &read[0]).await,
        Some(batch[0].snitch().clone())
    );
    assert_eq!(stored(&store, &read[1]).await, None);
    assert_eq!(check_in_count(&store, &read[1]).await, 0);
    assert_eq!(store.events(read[1].token(), 10).await.expect("read"), []);
    assert_eq!(
        stored(&store, &read[2]).await,
        Some(batch[2].snitch().clone())
    );
}

/// A change that fails in the database (here: events whose ids are taken) is rolled back
/// whole, its new state included, and fails alone: the rest of its batch commits.
pub async fn a_failing_change_rolls_back_alone<S: Storage>(setup: S, driver: Driver<S>) {
    let (_, read) = acme_with_snitches(&setup, 3).await;
    let earlier = checked_in(&read[0], at(1));
    assert!(!earlier.events().is_empty(), "fixture: the check-in emits");
    setup.save(&earlier).await.expect("save");

    let taken_ids = checked_in(&read[1], at(5)).with_events(earlier.events().to_vec());
    let batch = vec![taken_ids, checked_in(&read[2], at(5))];
    let store = (driver.batching)(&setup, batch.len());
    let results = save_all(&store, &batch).await;

    assert_eq!(outcomes(&results), ["backend", "ok"]);
    assert_eq!((driver.batches_committed)(&store), 1, "one transaction");
    assert_eq!(stored(&store, &read[1]).await, Some(read[1].clone()));
    assert_eq!(check_in_count(&store, &read[1]).await, 0);
    assert_eq!(
        stored(&store, &read[2]).await,
        Some(batch[1].snitch().clone())
    );
}

/// Expands to one `#[tokio::test]` per rule of this module, each on a fresh store made by
/// `$make`, called as `$make()`, whose future gives the store and what must outlive the
/// test (its database, say), driven by `$driver`, a [`Driver`].
#[macro_export]
macro_rules! group_commit_tests {
    ($make:expr, $driver:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn concurrent_saves_share_few_transactions() {
            let (store, _kept) = ($make)().await;
            $crate::group_commit_tests::concurrent_saves_share_few_transactions(
                store, $driver, 200,
            )
            .await;
        }

        #[tokio::test]
        async fn conflicts_in_a_batch_leave_the_others_committed() {
            let (store, _kept) = ($make)().await;
            $crate::group_commit_tests::conflicts_in_a_batch_leave_the_others_committed(
                store, $driver,
            )
            .await;
        }

        #[tokio::test]
        async fn a_deleted_snitch_in_a_batch_is_not_found_and_the_others_commit() {
            let (store, _kept) = ($make)().await;
            $crate::group_commit_tests::a_deleted_snitch_in_a_batch_is_not_found_and_the_others_commit(
                store, $driver,
            )
            .await;
        }

        #[tokio::test]
        async fn a_failing_change_rolls_back_alone() {
            let (store, _kept) = ($make)().await;
            $crate::group_commit_tests::a_failing_change_rolls_back_alone(store, $driver).await;
        }
    };
}
