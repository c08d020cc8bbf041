//! Failures Postgres reports at the worst moments of a batch of saves: a deadlock or a
//! serialization failure (the database rolled the work back: tried again, a bounded
//! number of times), and a COMMIT that ends without an answer (the outcome is unknown:
//! reported as such, never as a plain backend error and never as `Ok`).
//!
//! Each provokes the failure for real in its fresh database: competing transactions on a
//! second and third connection, or triggers that fail at commit.

mod support;

use std::time::Duration;

use snitch_core::contract::{at, case, checked_in, snitch};
use snitch_core::{Snitch, Storage, StorageError};
use snitch_store_postgres::PgStorage;
use sqlx::{Executor, PgPool};
use support::{fresh_database, fresh_database_with_connections, until};

/// Stores case `acme` with pending snitch 1.
async fn one_snitch(store: &PgStorage) -> Snitch {
    let acme = case("acme");
    store.upsert_case(&acme).await.expect("upsert");
    let fresh = snitch(&acme, 1, at(0));
    store.insert_snitch(&fresh, 10).await.expect("insert");
    fresh
}

/// How long a test waits for a state of the database another connection reaches.
const WAIT: Duration = Duration::from_secs(60);

/// Whether a backend waits for a lock: the advisory lock `key`, or any lock of `pid`.
async fn waiting(pool: &PgPool, advisory: Option<i64>, pid: Option<i32>) -> bool {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE NOT granted \
         AND ($1::bigint IS NULL OR (locktype = 'advisory' AND objid = $1)) \
         AND ($2::int IS NULL OR pid = $2))",
    )
    .bind(advisory)
    .bind(pid)
    .fetch_one(pool)
    .await
    .expect("read pg_locks")
}

/// A real deadlock between a batch and another transaction: the batch has updated the
/// snitch's row and waits for a lock the other transaction holds, which waits for the
/// row. Postgres cancels the batch's statement (40P01); the change is tried again once
/// the other transaction is gone, and saved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deadlock_inside_a_batch_is_tried_again() {
    let db = fresh_database_with_connections(8).await;
    let pool = db.pool.clone();
    let store = PgStorage::new(pool.clone());
    let fresh = one_snitch(&store).await;
    // Updating a snitch takes advisory lock 1, then 2 (released at the end of the
    // transaction).
    pool.execute(
        "CREATE FUNCTION public.lock_one_then_two() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN PERFORM pg_advisory_xact_lock(1); PERFORM pg_advisory_xact_lock(2); \
         RETURN NULL; END $$; \
         CREATE TRIGGER lock_one_then_two AFTER UPDATE ON snitch.snitches \
         FOR EACH ROW EXECUTE FUNCTION public.lock_one_then_two();",
    )
    .await
    .expect("trigger");

    // The gate holds lock 1; the rival holds lock 2 and never looks for deadlocks itself,
    // so the batch is the one Postgres cancels.
    let mut gate = pool.acquire().await.expect("gate");
    gate.execute("SELECT pg_advisory_lock(1)").await.expect("1");
    let mut rival = pool.begin().await.expect("rival");
    rival
        .execute("SET LOCAL deadlock_timeout = '1h'; SELECT pg_advisory_xact_lock(2)")
        .await
        .expect("2");
    let rival_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *rival)
        .await
        .expect("pid");

    let change = checked_in(&fresh, at(5));
    let saving = tokio::spawn({
        let store = store.clone();
        let change = change.clone();
        async move { store.save(&change).await }
    });
    // The batch updated the row and waits at lock 1.
    until("the batch waits for lock 1", WAIT, || {
        waiting(&pool, Some(1), None)
    })
    .await;
    // The rival waits for the row the batch updated.
    let token = fresh.token().as_str().to_owned();
    let rival_done = tokio::spawn(async move {
        sqlx::query("SELECT 1 FROM snitch.snitches WHERE token = $1 FOR UPDATE")
            .bind(token)
            .execute(&mut *rival)
            .await
            .expect("the rival gets the row once the batch's statement is cancelled");
        rival.commit().await.expect("the rival commits");
    });
    until("the rival waits for the row", WAIT, || {
        waiting(&pool, None, Some(rival_pid))
    })
    .await;
    // Lock 1 free: the batch goes on to lock 2, held by the rival, which waits for it.
    gate.execute("SELECT pg_advisory_unlock(1)")
        .await
        .expect("free 1");

    let saved = saving.await.expect("no panic");
    assert!(saved.is_ok(), "saved after the deadlock: {saved:?}");
    rival_done.await.expect("the rival finished");
    assert_eq!(
        store.snitch(fresh.token()).await.expect("read"),
        Some(change.snitch().clone())
    );
    assert_eq!(
        store
            .check_ins(fresh.token(), 10)
            .await
            .expect("read")
            .len(),
        1
    );
}

/// A serialization failure at COMMIT (a deferred trigger raising 40001 the first time,
/// as a serializable rival would): the whole batch was rolled back and is tried again.
#[tokio::test]
async fn a_serialization_failure_at_commit_tries_the_batch_again() {
    let db = fresh_database().await;
    let pool = db.pool.clone();
    let store = PgStorage::new(pool.clone());
    let fresh = one_snitch(&store).await;
    pool.execute(
        "CREATE SEQUENCE public.commits; \
         CREATE FUNCTION public.fail_first_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF nextval('public.commits') = 1 THEN \
         RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END IF; \
         RETURN NULL; END $$; \
         CREATE CONSTRAINT TRIGGER fail_first_commit AFTER UPDATE ON snitch.snitches \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW \
         EXECUTE FUNCTION public.fail_first_commit();",
    )
    .await
    .expect("trigger");

    let change = checked_in(&fresh, at(5));
    let saved = store.save(&change).await;
    assert!(saved.is_ok(), "saved on the second try: {saved:?}");
    let commits: i64 = sqlx::query_scalar("SELECT last_value FROM public.commits")
        .fetch_one(&pool)
        .await
        .expect("read");
    assert_eq!(commits, 2, "one failed commit, one that held");
    assert_eq!(
        store.snitch(fresh.token()).await.expect("read"),
        Some(change.snitch().clone())
    );
    assert_eq!(
        store
            .check_ins(fresh.token(), 10)
            .await
            .expect("read")
            .len(),
        1
    );
}

/// A COMMIT that ends without an answer (the connection dies while committing: here a
/// deferred trigger terminates its own backend) leaves the outcome unknown: the save
/// says so, it is neither `Ok` nor a plain backend error. The store goes on working.
#[tokio::test]
async fn a_commit_without_an_answer_is_reported_as_outcome_unknown() {
    let db = fresh_database().await;
    let pool = db.pool.clone();
    let store = PgStorage::new(pool.clone());
    let fresh = one_snitch(&store).await;
    pool.execute(
        "CREATE FUNCTION public.die_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$; \
         CREATE CONSTRAINT TRIGGER die_at_commit AFTER UPDATE ON snitch.snitches \
         DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.die_at_commit();",
    )
    .await
    .expect("trigger");

    let change = checked_in(&fresh, at(5));
    let failed = store.save(&change).await;
    assert!(
        matches!(&failed, Err(e) if e.is_outcome_unknown()),
        "the outcome is unknown: {failed:?}"
    );
    assert!(!failed.as_ref().is_err_and(StorageError::is_transient));

    pool.execute("DROP TRIGGER die_at_commit ON snitch.snitches")
        .await
        .expect("drop");
    // Here the trigger ran before the commit record, so nothing was stored.
    assert_eq!(
        store.snitch(fresh.token()).await.expect("read"),
        Some(fresh)
    );
    store
        .save(&change)
        .await
        .expect("saved once the database lets it");
}
