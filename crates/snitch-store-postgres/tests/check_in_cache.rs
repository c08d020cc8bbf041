//! The check-in cache with a second server: two stores on one database, as two Snitch
//! servers would be. Each check-in's read may come from a store's cache; what another
//! server wrote since must still count (its check-ins, its changes, its deletes).

mod support;

use std::sync::Arc;

use chrono::Duration;
use futures::future::join_all;
use snitch_core::contract::{case, snitch, t0};
use snitch_core::{
    CheckIn, Clock, ManualClock, Outcome, ServiceError, SnitchService, Status, Storage, Token,
};
use snitch_store_postgres::test_databases::TestDatabase;
use snitch_store_postgres::PgStorage;
use support::{fresh_database, stored_check_ins};

const NO_LIMIT: u32 = 1_000_000;

/// Two services ("servers") on their own stores over one database, sharing a clock.
/// Two servers' services on one database, a store on it, their clock, and the database
/// (dropped when the test ends).
async fn two_servers() -> (
    SnitchService,
    SnitchService,
    PgStorage,
    Arc<ManualClock>,
    TestDatabase,
) {
    let db = fresh_database().await;
    let pool = db.pool.clone();
    let clock = Arc::new(ManualClock::new(t0()));
    let first = PgStorage::new(pool.clone());
    let second = PgStorage::new(pool.clone());
    let acme = case("acme");
    first.upsert_case(&acme).await.expect("upsert");
    first
        .insert_snitch(&snitch(&acme, 1, t0()), NO_LIMIT)
        .await
        .expect("insert");
    let on = |store: &PgStorage| {
        SnitchService::new(
            Arc::new(store.clone()) as Arc<dyn Storage>,
            Arc::clone(&clock) as Arc<dyn Clock>,
        )
    };
    (on(&first), on(&second), first, clock, db)
}

/// The token of the one snitch, as the check-in URL carries it.
fn token() -> String {
    snitch_token().as_str().to_owned()
}

fn snitch_token() -> Token {
    snitch_core::contract::token(1)
}

/// The snitch's stored check-ins, newest first.
async fn history(store: &PgStorage) -> Vec<CheckIn> {
    store.check_ins(&snitch_token(), 100).await.expect("read")
}

#[tokio::test]
async fn check_ins_through_two_servers_are_all_recorded() {
    let (a, b, store, clock, _db) = two_servers().await;
    // Alternating, so each server's cached copy is stale at each of its check-ins.
    for n in 0..6 {
        clock.advance(Duration::minutes(1));
        let server = if n % 2 == 0 { &a } else { &b };
        let snitch = server
            .check_in(&token(), Outcome::Success, None)
            .await
            .expect("checked in");
        assert_eq!(snitch.version(), 2 + n, "one version per check-in");
    }
    let history = history(&store).await;
    assert_eq!(history.len(), 6, "every check-in is in the history");
    // Each server read its stale copy from its cache (and then had its save refused).
    assert!(store.check_in_cache_hits() >= 2, "the cache was used");
}

#[tokio::test]
async fn a_second_check_in_through_one_server_needs_no_read() {
    let (a, _, store, clock, _db) = two_servers().await;
    clock.advance(Duration::minutes(1));
    a.check_in(&token(), Outcome::Success, None)
        .await
        .expect("checked in");
    let hits = store.check_in_cache_hits();
    clock.advance(Duration::minutes(1));
    a.check_in(&token(), Outcome::Success, None)
        .await
        .expect("checked in");
    assert_eq!(store.check_in_cache_hits(), hits + 1);
}

#[tokio::test]
async fn concurrent_check_ins_on_two_servers_are_all_recorded() {
    let (a, b, store, clock, _db) = two_servers().await;
    clock.advance(Duration::minutes(1));
    let calls = (0..40).map(|n| {
        let server = if n % 2 == 0 { a.clone() } else { b.clone() };
        async move { server.check_in(&token(), Outcome::Success, None).await }
    });
    for result in join_all(calls).await {
        result.expect("checked in");
    }
    let stored = store
        .snitch(&snitch_token())
        .await
        .expect("read")
        .expect("stored");
    let history = history(&store).await;
    assert_eq!(history.len(), 40);
    // Each change bumped the version once; same-server check-ins may share a change.
    assert!(stored.version() >= 2 && stored.version() <= 41);
}

#[tokio::test]
async fn a_change_made_through_the_other_server_is_not_undone() {
    let (a, b, store, clock, _db) = two_servers().await;
    clock.advance(Duration::minutes(1));
    a.check_in(&token(), Outcome::Success, None)
        .await
        .expect("checked in");
    // The other server records an error; the first one's cached copy says healthy.
    clock.advance(Duration::minutes(1));
    let errored = b
        .check_in(
            &token(),
            Outcome::Error {
                exit_status: "1".into(),
            },
            None,
        )
        .await
        .expect("checked in");
    assert_eq!(errored.state().status(), Status::Errored);
    clock.advance(Duration::minutes(1));
    let recovered = a
        .check_in(&token(), Outcome::Success, None)
        .await
        .expect("checked in");
    assert_eq!(recovered.state().status(), Status::Healthy);
    assert_eq!(recovered.version(), errored.version() + 1);
    let events = store.events(&snitch_token(), 10).await.expect("read");
    assert!(
        events.iter().any(|e| e.status == Status::Errored),
        "the error the other server recorded has its event: {events:?}"
    );
}

#[tokio::test]
async fn a_snitch_deleted_through_the_other_server_takes_no_more_check_ins() {
    let (a, b, store, clock, _db) = two_servers().await;
    clock.advance(Duration::minutes(1));
    a.check_in(&token(), Outcome::Success, None)
        .await
        .expect("checked in");
    assert!(b
        .storage()
        .delete_snitch(&snitch_token())
        .await
        .expect("deleted"));
    clock.advance(Duration::minutes(1));
    let result = a.check_in(&token(), Outcome::Success, None).await;
    assert!(
        matches!(result, Err(ServiceError::NotFound)),
        "expected NotFound, got {result:?}"
    );
    let history = history(&store).await;
    assert_eq!(history, vec![], "no check-in outlives its snitch");
}

#[tokio::test]
async fn a_delete_racing_check_ins_leaves_no_check_in_behind() {
    let (a, b, store, clock, db) = two_servers().await;
    clock.advance(Duration::minutes(1));
    let token_value = snitch_token();
    let check_ins = (0..30).map(|_| {
        let a = a.clone();
        async move { a.check_in(&token(), Outcome::Success, None).await }
    });
    let delete = async {
        tokio::task::yield_now().await;
        b.storage().delete_snitch(&token_value).await
    };
    let (results, deleted) = tokio::join!(join_all(check_ins), delete);
    assert!(deleted.expect("delete"));
    for result in results {
        assert!(
            matches!(result, Ok(_) | Err(ServiceError::NotFound)),
            "a check-in either counted before the delete or found nothing: {result:?}"
        );
    }
    let history = history(&store).await;
    assert_eq!(history, vec![], "no check-in outlives its snitch");
    assert_eq!(
        stored_check_ins(&db, token_value.as_str()).await,
        0,
        "no stored check-in row outlives its snitch"
    );
}
