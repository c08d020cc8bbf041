//! The set-based round of the SQLite store: a batch's changes that keep their snitches'
//! settings saved in a few statements, the histories trimmed lazily, and the connection
//! the writer holds between batches. Batches are made whole
//! with a long `max_wait` and a `max_batch` of exactly the saves sent, so each test knows
//! which changes share a transaction.

use std::time::Duration;

use snitch_core::contract::{at, checked_in, checked_in_with, paused, success, token};
use snitch_core::snitch::EVENTS_KEPT;
use snitch_core::{
    machine, Change, CheckIn, CheckInBody, CheckInMessage, Outcome, PauseUntil, Plan, Snitch,
    Storage, Timestamp,
};
use snitch_store_sql::group_commit_tests::{acme_with_snitches, outcomes};
use snitch_store_sqlite::{connect, SqliteStorage, SqliteStorageOptions, MIGRATOR};

/// How often the store cuts a snitch's events back (its set-based saves' step).
const EVENT_TRIM_STEP: usize = 32;
use sqlx::SqlitePool;

/// A store on a fresh file whose batches hold exactly `saves` changes.
async fn store_batching(saves: usize) -> (SqliteStorage, SqlitePool, tempfile::TempDir) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a directory");
    let pool = connect(&dir.path().join("snitch.db"), 4)
        .await
        .expect("open");
    MIGRATOR.run(&pool).await.expect("migrate");
    let store = SqliteStorage::with_options(
        pool.clone(),
        SqliteStorageOptions::default()
            .with_max_wait(Duration::from_secs(60))
            .with_max_batch(saves),
    );
    (store, pool, dir)
}

/// Saves `snitches`' first check-ins one batch at a time (so they are healthy, and the
/// next check-ins change nothing but their state), answering them as stored.
async fn healthy(store: &SqliteStorage, snitches: &[Snitch]) -> Vec<Snitch> {
    let changes: Vec<Change> = snitches.iter().map(|s| checked_in(s, at(1))).collect();
    for result in store.save_all(&changes).await {
        result.expect("first check-in");
    }
    changes.into_iter().map(|c| c.snitch().clone()).collect()
}

async fn stored_count(pool: &SqlitePool, n: u64) -> (i64, i64) {
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM snitch_check_ins WHERE token = ?1")
        .bind(token(n).as_str())
        .fetch_one(pool)
        .await
        .expect("count");
    let counted: i64 =
        sqlx::query_scalar("SELECT check_ins_stored FROM snitch_snitches WHERE token = ?1")
            .bind(token(n).as_str())
            .fetch_one(pool)
            .await
            .expect("counter");
    (rows, counted)
}

/// Checks `snitch` in at minute 2 through another store on the same file, so that a
/// change made from `snitch` as given is stale; answers the change saved.
async fn move_on(pool: &SqlitePool, snitch: &Snitch) -> Change {
    let moved_on = checked_in(snitch, at(2));
    SqliteStorage::new(pool.clone())
        .save(&moved_on)
        .await
        .expect("moved on");
    moved_on
}

/// The snitch as stored now.
async fn stored(store: &SqliteStorage, snitch: &Snitch) -> Option<Snitch> {
    store.snitch(snitch.token()).await.expect("read")
}

/// When the snitch's stored check-ins (up to 10) came, newest first.
async fn history(store: &SqliteStorage, snitch: &Snitch) -> Vec<Timestamp> {
    let check_ins = store.check_ins(snitch.token(), 10).await.expect("read");
    check_ins.iter().map(|c| c.at).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_answers_each_change_and_applies_repeats_in_order() {
    let (store, pool, _dir) = store_batching(3).await;
    let (_, snitches) = acme_with_snitches(&store, 4).await;
    let ready = healthy(&store, &snitches[..3]).await;
    let (a, b, stale) = (&ready[0], &ready[1], &ready[2]);
    // The stale snitch moves on in a batch before: the round's change of it is refused.
    let moved_on = move_on(&pool, stale).await;

    let a1 = checked_in(a, at(3));
    let a2 = checked_in(a1.snitch(), at(4));
    let batch = vec![
        a1.clone(),
        checked_in(b, at(3)),
        checked_in(stale, at(3)),
        // Never inserted: not found.
        checked_in(&snitches[3], at(3)),
        a2.clone(),
    ];
    let store = SqliteStorage::with_options(
        pool.clone(),
        SqliteStorageOptions::default()
            .with_max_wait(Duration::from_secs(60))
            .with_max_batch(batch.len()),
    );
    store
        .delete_snitch(snitches[3].token())
        .await
        .expect("delete");
    let results = store.save_all(&batch).await;
    assert_eq!(
        outcomes(&results),
        ["ok", "ok", "conflict", "not found", "ok"]
    );
    assert_eq!(
        store.saved_in_rounds(),
        2,
        "a1 and b in the round (the refused two answered from it), a2 after it"
    );
    assert_eq!(stored(&store, a).await.as_ref(), Some(a2.snitch()));
    assert_eq!(
        stored(&store, b).await.as_ref(),
        Some(batch[1].snitch()),
        "the round stores every field of the state"
    );
    assert_eq!(
        stored(&store, stale).await.as_ref(),
        Some(moved_on.snitch()),
        "the refused change wrote nothing"
    );
    assert_eq!(history(&store, a).await, [at(4), at(3), at(1)]);
    assert_eq!(
        history(&store, stale).await,
        [at(2), at(1)],
        "only the check-ins that applied"
    );
    for n in 1..=3 {
        let (rows, counted) = stored_count(&pool, n).await;
        assert_eq!(rows, counted, "snitch {n} counts what it stores");
    }
}

/// A batch the round saves whole commits with its savepoint still set (one round trip
/// less): a refusal in it writes nothing, and the held connection is left out of any
/// transaction, for the next batch and for writes outside the batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_the_round_saves_whole_commits_and_leaves_no_transaction_open() {
    let (store, pool, _dir) = store_batching(2).await;
    let (_, snitches) = acme_with_snitches(&store, 3).await;
    let ready = healthy(&store, &snitches[..2]).await;
    let (a, stale) = (&ready[0], &ready[1]);
    let moved_on = move_on(&pool, stale).await;

    let a1 = checked_in(a, at(3));
    let rounds_before = store.saved_in_rounds();
    let results = store
        .save_all(&[a1.clone(), checked_in(stale, at(3))])
        .await;
    assert_eq!(outcomes(&results), ["ok", "conflict"]);
    assert_eq!(store.saved_in_rounds() - rounds_before, 1);
    // A write outside the batches takes the writer's turn on another connection: it would
    // wait out the busy timeout and fail if the batch had left its transaction open.
    store
        .delete_snitch(snitches[2].token())
        .await
        .expect("a write after the batch");
    let a2 = checked_in(a1.snitch(), at(4));
    let again = checked_in(moved_on.snitch(), at(4));
    let results = store.save_all(&[a2.clone(), again.clone()]).await;
    assert_eq!(
        outcomes(&results),
        ["ok", "ok"],
        "the next batch on the held connection"
    );

    assert_eq!(stored(&store, a).await.as_ref(), Some(a2.snitch()));
    assert_eq!(stored(&store, stale).await.as_ref(), Some(again.snitch()));
    assert_eq!(
        history(&store, stale).await,
        [at(4), at(2), at(1)],
        "the refused check-in was not written"
    );
    for n in 1..=2 {
        let (rows, counted) = stored_count(&pool, n).await;
        assert_eq!(rows, counted, "snitch {n} counts what it stores");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_stores_hostile_text_exactly() {
    let texts = [
        "quote ' and \" and \\ backslash",
        "$.message ->> '$.token()' ; DROP TABLE snitch_check_ins; --",
        "nul \u{0} inside, and \u{1} \u{1f} controls",
        "emoji 🦀, RTL \u{202e}, line separator \u{2028}, BOM \u{feff}",
        "{\"token\": \"tok00000000000000001\", \"expected\": 0}",
        "",
    ];
    let (store, _pool, _dir) = store_batching(texts.len()).await;
    let (_, snitches) = acme_with_snitches(&store, texts.len() as u64).await;
    let ready = healthy(&store, &snitches).await;
    let changes: Vec<Change> = ready
        .iter()
        .zip(texts)
        .map(|(s, text)| {
            checked_in_with(
                s,
                CheckIn::new(at(5), Outcome::Success, CheckInMessage::truncating(text))
                    .with_body(CheckInBody::truncating(text.repeat(50).as_bytes(), 100_000)),
            )
        })
        .collect();
    let before = store.saved_in_rounds();
    for result in store.save_all(&changes).await {
        result.expect("saved");
    }
    assert_eq!(store.saved_in_rounds() - before, texts.len() as u64);
    for (s, text) in ready.iter().zip(texts) {
        let newest = store.check_ins(s.token(), 1).await.expect("read");
        assert_eq!(
            newest[0].message,
            CheckInMessage::truncating(text),
            "{text:?}"
        );
        assert_eq!(
            newest[0].body,
            CheckInBody::truncating(text.repeat(50).as_bytes(), 100_000)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_history_is_trimmed_lazily_and_never_shown() {
    const KEEP: usize = 5;
    const SNITCHES: usize = 12;
    let (store, pool, _dir) = store_batching(SNITCHES).await;
    let (_, snitches) = acme_with_snitches(&store, SNITCHES as u64).await;
    let mut current = healthy(&store, &snitches).await;
    for minute in 2..40 {
        let changes: Vec<Change> = current
            .iter()
            .map(|s| checked_in(s, at(minute)).with_keep_check_ins(KEEP))
            .collect();
        for result in store.save_all(&changes).await {
            result.expect("saved");
        }
        current = changes.iter().map(|c| c.snitch().clone()).collect();
        assert_eq!(store.saved_in_rounds(), minute as u64 * SNITCHES as u64);
        for s in &current {
            let shown = store.check_ins(s.token(), 100).await.expect("read");
            // Check-ins at minutes 1 to `minute`.
            let held = KEEP.min(usize::try_from(minute).expect("positive"));
            assert_eq!(shown.len(), held, "readers see the newest {KEEP} only");
            assert_eq!(shown[0].at, at(minute));
        }
    }
    let mut most = 0;
    for n in 1..=SNITCHES as u64 {
        let (rows, counted) = stored_count(&pool, n).await;
        assert_eq!(rows, counted, "snitch {n} counts what it stores");
        most = most.max(rows);
    }
    // Twice the history, plus what a batch adds while trims wait their turn (at most
    // TRIMS_PER_BATCH a batch): 12 snitches filled alike are all trimmed within two
    // batches of filling up.
    assert!(most <= 2 * KEEP as i64 + 2, "held {most}");
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM snitch_check_ins")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert!(total < (SNITCHES * (2 * KEEP + 2)) as i64, "{total} stored");
}

#[tokio::test]
async fn a_history_stored_before_the_counts_is_counted() {
    const COUNTED: i64 = 20270101000000;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a directory");
    let pool = connect(&dir.path().join("old.db"), 2).await.expect("open");
    let old = sqlx::migrate::Migrator {
        migrations: std::borrow::Cow::Owned(
            MIGRATOR
                .iter()
                .filter(|m| m.version < COUNTED)
                .cloned()
                .collect(),
        ),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    old.run(&pool).await.expect("the old migrations");
    let store = SqliteStorage::new(pool.clone());
    let (_, snitches) = acme_with_snitches(&store, 2).await;
    for (i, at_minute) in (1..=7).enumerate() {
        sqlx::query(
            "INSERT INTO snitch_check_ins (token, at, exit_status, message) \
             VALUES (?1, ?2, NULL, ?3)",
        )
        .bind(snitches[0].token().as_str())
        .bind(at(at_minute).timestamp_millis())
        .bind(format!("old {i}"))
        .execute(&pool)
        .await
        .expect("an old check-in");
    }
    MIGRATOR.run(&pool).await.expect("the counts");
    assert_eq!(stored_count(&pool, 1).await, (7, 7));
    assert_eq!(stored_count(&pool, 2).await, (0, 0));
    let store = SqliteStorage::new(pool.clone());
    let shown = store
        .check_ins(snitches[0].token(), 100)
        .await
        .expect("read");
    assert_eq!(shown.len(), 7, "all kept: fewer than the default length");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_of_more_snitches_than_a_statement_holds_saves_them_all_in_order() {
    // Two statements' worth (256 rows each) and then some, each change with three
    // check-ins, one snitch paused (its pause is part of the state a round writes).
    const SNITCHES: usize = 300;
    let (store, pool, _dir) = store_batching(SNITCHES).await;
    let (_, snitches) = acme_with_snitches(&store, SNITCHES as u64).await;
    let mut ready = healthy(&store, &snitches).await;
    let pause = paused(&ready[7], PauseUntil::Unpaused, at(2));
    SqliteStorage::new(pool.clone())
        .save(&pause)
        .await
        .expect("paused");
    ready[7] = pause.snitch().clone();
    let changes: Vec<Change> = ready
        .iter()
        .map(|s| {
            let mut step = machine::check_in(s, &success(at(3)), &Plan::default());
            for minute in [4, 5] {
                step = step
                    .then(|after| machine::check_in(after, &success(at(minute)), &Plan::default()));
            }
            Change::new(
                s,
                step.snitch,
                vec![success(at(3)), success(at(4)), success(at(5))],
                Vec::new(),
            )
        })
        .collect();
    assert!(changes.iter().all(|c| c.events().is_empty()));
    let store = SqliteStorage::with_options(
        pool.clone(),
        SqliteStorageOptions::default()
            .with_max_wait(Duration::from_secs(60))
            .with_max_batch(SNITCHES),
    );
    for result in store.save_all(&changes).await {
        result.expect("saved");
    }
    assert_eq!(store.saved_in_rounds(), SNITCHES as u64);
    for (n, change) in changes.iter().enumerate() {
        let token = change.snitch().token();
        assert_eq!(
            store.snitch(token).await.expect("read").as_ref(),
            Some(change.snitch()),
            "snitch {n}"
        );
        let history = store.check_ins(token, 10).await.expect("read");
        let times: Vec<_> = history.iter().map(|c| c.at).collect();
        assert_eq!(times[..3], [at(5), at(4), at(3)], "snitch {n}");
        let (rows, counted) = stored_count(&pool, n as u64 + 1).await;
        assert_eq!((rows, counted), (4, 4), "snitch {n}");
    }
    assert!(store
        .snitch(ready[7].token())
        .await
        .expect("read")
        .expect("stored")
        .state()
        .pause()
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_saved_in_rounds_are_trimmed_lazily_and_never_shown_beyond_the_kept() {
    // Check-ins hours apart: each reports a snitch that went missing, with events.
    const SNITCHES: usize = 12;
    let (store, pool, _dir) = store_batching(SNITCHES).await;
    let (_, snitches) = acme_with_snitches(&store, SNITCHES as u64).await;
    let mut current = healthy(&store, &snitches).await;
    let mut minute = 2;
    let mut emitted = 0;
    for _ in 0..100 {
        let changes: Vec<Change> = current.iter().map(|s| checked_in(s, at(minute))).collect();
        emitted += changes[0].events().len();
        for result in store.save_all(&changes).await {
            result.expect("saved");
        }
        current = changes.iter().map(|c| c.snitch().clone()).collect();
        // Hours later: each check-in finds its snitch's deadline missed.
        minute += 180;
    }
    assert!(
        emitted > EVENTS_KEPT + EVENT_TRIM_STEP,
        "only {emitted} events a snitch"
    );
    assert!(store.saved_in_rounds() >= 100 * SNITCHES as u64);
    for s in &current {
        let shown = store.events(s.token(), 1000).await.expect("read");
        assert_eq!(shown.len(), EVENTS_KEPT, "readers see the newest kept only");
        let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM snitch_events WHERE token = ?1")
            .bind(s.token().as_str())
            .fetch_one(&pool)
            .await
            .expect("count");
        assert!(
            stored as usize <= EVENTS_KEPT + EVENT_TRIM_STEP,
            "{stored} events stored"
        );
    }
}

/// The batching task holds a connection while saves keep coming: a pool being closed,
/// or a pool of one connection being read, still gets it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writers_held_connection_goes_back_to_the_pool() {
    for connections in [1, 4] {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a directory");
        let pool = connect(&dir.path().join("snitch.db"), connections)
            .await
            .expect("open");
        MIGRATOR.run(&pool).await.expect("migrate");
        let store = SqliteStorage::new(pool.clone());
        let (_, snitches) = acme_with_snitches(&store, 3).await;
        let ready = healthy(&store, &snitches).await;
        // Right after a save, a read on the pool is answered (with one connection, the
        // writer gave it back).
        let read = tokio::time::timeout(Duration::from_secs(30), store.snitch(ready[0].token()))
            .await
            .expect("a read after a save is not kept waiting")
            .expect("read");
        assert_eq!(read.as_ref(), Some(&ready[0]));
        // Closing the pool waits for every connection, the held one included.
        tokio::time::timeout(Duration::from_secs(30), pool.close())
            .await
            .expect("the pool closes");
        drop(store);
    }
}
