//! The storage contract, run against PostgreSQL, and what only a shared SQL store has to
//! get right (bounded history in one long change, concurrent dispatchers, unreadable rows,
//! a lost connection, migrations beside a host's). Every test gets a fresh database (see
//! `support` for where the server is).

mod support;

use snitch_store_postgres::{PgStorage, PgStorageOptions};
use support::fresh_database;

/// A store on a database of its own, and the database (dropped when the test ends).
async fn fresh_store() -> (
    PgStorage,
    snitch_store_postgres::test_databases::TestDatabase,
) {
    let db = fresh_database().await;
    // The contract reads the outbox's depth right after each change.
    let options = PgStorageOptions::default().with_outbox_depth_for(std::time::Duration::ZERO);
    (PgStorage::with_options(db.pool.clone(), options), db)
}

snitch_core::storage_contract_tests!(fresh_store);

/// A store whose claims rank a window of `window` due deliveries per budget.
async fn fresh_store_with_window(
    window: usize,
) -> (
    PgStorage,
    snitch_store_postgres::test_databases::TestDatabase,
) {
    let db = fresh_database().await;
    let options = PgStorageOptions::default().with_claim_window(window);
    (PgStorage::with_options(db.pool.clone(), options), db)
}

snitch_core::claim_window_tests!(fresh_store_with_window);

mod beyond_the_contract {
    use std::collections::HashSet;

    use chrono::Duration;
    use futures::future::join_all;
    use snitch_core::contract::{at, case, checked_in, snitch, token, webhook};
    use snitch_core::outbox::deliveries_for;
    use snitch_core::{
        Attempt, AttemptResult, Case, ClaimLimits, Delivery, EmailAddress, Storage, StorageError,
        Webhook,
    };
    use snitch_store_postgres::{PgStorage, EVENTS_KEPT, MIGRATOR};

    use super::fresh_database;

    /// The outbox's depth is counted at most once per `outbox_depth_for`: a read within
    /// it gets the count made before, one after it counts again.
    #[tokio::test]
    async fn the_outbox_depth_is_counted_once_per_period() {
        let db = fresh_database().await;
        let store = PgStorage::with_options(
            db.pool.clone(),
            snitch_store_postgres::PgStorageOptions::default()
                .with_outbox_depth_for(std::time::Duration::from_secs(3_600)),
        );
        let (acme, hooks) = case_with_outbox(&store).await;
        assert_eq!(store.stats().await.expect("stats").outbox_depth, Some(0));
        let queued = reporting(&store, &acme, &hooks, 1, 1).await;
        assert_eq!(queued.len(), 2);
        assert_eq!(
            store.stats().await.expect("stats").outbox_depth,
            Some(0),
            "within the period: the count made before"
        );
        let fresh = PgStorage::with_options(
            db.pool.clone(),
            snitch_store_postgres::PgStorageOptions::default()
                .with_outbox_depth_for(std::time::Duration::ZERO),
        );
        assert_eq!(
            fresh.stats().await.expect("stats").outbox_depth,
            Some(2),
            "a store that counts every time sees both"
        );
    }

    /// A case with a team member and one hook, stored.
    async fn case_with_outbox(store: &PgStorage) -> (Case, Vec<Webhook>) {
        let mut acme = case("acme");
        acme.members = vec![EmailAddress::parse("ops@acme.test").expect("valid")];
        store.upsert_case(&acme).await.expect("upsert");
        let hook = webhook(&acme, 1, Some("s3cret"));
        store.insert_webhook(&hook).await.expect("insert hook");
        (acme, vec![hook])
    }

    /// Inserts snitch `n` and saves its first check-in at `at(minute)` with the
    /// deliveries of its `snitch.reporting`: one to the hook, one e-mail.
    async fn reporting(
        store: &PgStorage,
        acme: &Case,
        hooks: &[Webhook],
        n: u64,
        minute: i64,
    ) -> Vec<Delivery> {
        let fresh = snitch(acme, n, at(0));
        store.insert_snitch(&fresh, 100).await.expect("insert");
        let change = checked_in(&fresh, at(minute));
        let targets = snitch_core::Targets {
            hooks: hooks.to_vec(),
            channels: Vec::new(),
        };
        let deliveries = change
            .events()
            .iter()
            .flat_map(|e| deliveries_for(e, acme, &targets))
            .collect();
        let change = change.with_deliveries(deliveries);
        store.save(&change).await.expect("save");
        change.deliveries().to_vec()
    }

    fn delivered(minute: i64) -> Attempt {
        Attempt {
            at: at(minute),
            ok: true,
            detail: "HTTP 204".into(),
            duration_ms: 3,
        }
    }

    /// A change with more events than a snitch keeps stores the newest ones; the events
    /// it pushes out take their finished deliveries along, and their pending ones stay
    /// until they finish.
    #[tokio::test]
    async fn a_long_change_keeps_the_newest_events_and_pending_deliveries() {
        let db = fresh_database().await;
        let store = PgStorage::new(db.pool.clone());
        let (acme, hooks) = case_with_outbox(&store).await;
        let made = reporting(&store, &acme, &hooks, 1, 1).await;
        let (hook, mail) = (&made[0], &made[1]);
        let event_ids = [hook.event.id.clone()];
        store
            .record_attempt(&mail.id, &delivered(1), AttemptResult::Delivered)
            .await
            .expect("record");

        let read = store
            .snitch(&token(1))
            .await
            .expect("read")
            .expect("stored");
        // One change with more events than are kept: a sweep catches up in one event, so
        // the fixture steps hour by hour and keeps every event in the change.
        let mut step = snitch_core::machine::advance(&read, at(1) + Duration::hours(2));
        for hour in 3..150 {
            step = step.then(|s| snitch_core::machine::advance(s, at(1) + Duration::hours(hour)));
        }
        let down = snitch_core::Change::new(&read, step.snitch, Vec::new(), step.events);
        assert!(down.events().len() > EVENTS_KEPT, "fixture: a long change");
        store.save(&down).await.expect("save");

        let kept = store.events(&token(1), 1_000).await.expect("read");
        let newest: Vec<_> = down
            .events()
            .iter()
            .rev()
            .take(EVENTS_KEPT)
            .cloned()
            .collect();
        assert_eq!(kept, newest);
        let left = store.deliveries(&event_ids).await.expect("read");
        assert_eq!(
            left,
            std::slice::from_ref(hook),
            "the pending delivery stays, whole"
        );

        store
            .record_attempt(&hook.id, &delivered(2), AttemptResult::Delivered)
            .await
            .expect("record");
        assert_eq!(store.deliveries(&event_ids).await.expect("read"), []);
        assert_eq!(store.next_delivery_at().await.expect("read"), None);
    }

    /// A token used again after its snitch was deleted gets events and deliveries with
    /// the same ids: they replace the old ones instead of failing every save.
    #[tokio::test]
    async fn a_reused_token_replaces_old_deliveries() {
        let db = fresh_database().await;
        let store = PgStorage::new(db.pool.clone());
        let (acme, hooks) = case_with_outbox(&store).await;
        let old = reporting(&store, &acme, &hooks, 1, 1).await;
        assert!(store.delete_snitch(&token(1)).await.expect("delete"));
        let new = reporting(&store, &acme, &hooks, 1, 5).await;

        assert_eq!(old[0].id, new[0].id, "fixture: the same ids");
        let stored = store
            .deliveries(&[new[0].event.id.clone()])
            .await
            .expect("read");
        assert_eq!(stored, new);
    }

    /// Check-ins and events hold no foreign key to their snitch (each save writes them
    /// under its row's lock): deleting the snitch deletes them itself, while another
    /// snitch's history stays whole.
    #[tokio::test]
    async fn deleting_a_snitch_leaves_none_of_its_history_behind() {
        let db = fresh_database().await;
        let store = PgStorage::new(db.pool.clone());
        let (acme, hooks) = case_with_outbox(&store).await;
        reporting(&store, &acme, &hooks, 1, 1).await;
        reporting(&store, &acme, &hooks, 2, 1).await;
        let rows = |table: &'static str, n: u64| {
            let pool = db.pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(&format!(
                    "SELECT count(*) FROM snitch.{table} WHERE token = $1"
                ))
                .bind(token(n).as_str())
                .fetch_one(&pool)
                .await
                .expect("count")
            }
        };
        for table in ["check_ins", "events"] {
            assert!(rows(table, 1).await > 0, "fixture: {table} stored");
        }

        assert!(store.delete_snitch(&token(1)).await.expect("delete"));

        for table in ["check_ins", "events"] {
            assert_eq!(rows(table, 1).await, 0, "{table} of the deleted snitch");
            assert!(rows(table, 2).await > 0, "{table} of the other snitch");
        }
    }

    /// A store on a pool of its own on `pool`'s database: another server.
    async fn another_server(pool: &sqlx::PgPool) -> PgStorage {
        PgStorage::new(
            sqlx::postgres::PgPoolOptions::new()
                .max_connections(5)
                .connect_with(pool.connect_options().as_ref().clone())
                .await
                .expect("a second pool"),
        )
    }

    /// Dispatchers on different pools (different servers) share the outbox: no delivery
    /// is claimed twice, and together they claim every one.
    #[tokio::test]
    async fn dispatchers_on_several_pools_never_claim_a_delivery_twice() {
        let db = fresh_database().await;
        let pool = db.pool.clone();
        let store = PgStorage::new(pool.clone());
        let (acme, hooks) = case_with_outbox(&store).await;
        let mut all = HashSet::new();
        for n in 1..=15 {
            all.extend(
                reporting(&store, &acme, &hooks, n, n as i64)
                    .await
                    .into_iter()
                    .map(|d| d.id),
            );
        }
        let other_server = another_server(&pool).await;

        let servers = [&store, &other_server, &store, &other_server, &other_server];
        let four = ClaimLimits::at_most(4);
        let claims = join_all(
            servers
                .iter()
                .map(|s| s.claim_deliveries(at(60), at(90), &four)),
        )
        .await;
        let mut claimed = Vec::new();
        for claim in claims {
            claimed.extend(claim.expect("claim").into_iter().map(|d| d.id));
        }
        let rest = store
            .claim_deliveries(at(60), at(90), &ClaimLimits::at_most(100))
            .await
            .expect("claim");
        claimed.extend(rest.into_iter().map(|d| d.id));

        let distinct: HashSet<String> = claimed.iter().cloned().collect();
        assert_eq!(distinct.len(), claimed.len(), "claimed twice: {claimed:?}");
        assert_eq!(distinct, all);
    }

    /// Sweeps on different pools (different servers) share the due snitches: none is
    /// claimed twice, and together they claim every one. The leases are rows of their
    /// own (`snitch.sweep_leases`): deleting a snitch deletes its lease too.
    #[tokio::test]
    async fn sweeps_on_several_pools_never_claim_a_snitch_twice() {
        let db = fresh_database().await;
        let pool = db.pool.clone();
        let store = PgStorage::new(pool.clone());
        let (acme, hooks) = case_with_outbox(&store).await;
        for n in 1..=15 {
            reporting(&store, &acme, &hooks, n, n as i64).await;
        }
        let other_server = another_server(&pool).await;
        // A month on, every one of them is overdue.
        let later = at(60 * 24 * 30);
        let lease = later + Duration::seconds(30);

        let servers = [&store, &other_server, &store, &other_server, &other_server];
        let claims = join_all(servers.iter().map(|s| s.claim_due(later, lease, 4))).await;
        let mut claimed = Vec::new();
        for claim in claims {
            claimed.extend(claim.expect("claim").into_iter().map(|s| s.token().clone()));
        }
        let rest = store.claim_due(later, lease, 100).await.expect("claim");
        claimed.extend(rest.into_iter().map(|s| s.token().clone()));

        let distinct: HashSet<_> = claimed.iter().cloned().collect();
        assert_eq!(distinct.len(), claimed.len(), "claimed twice: {claimed:?}");
        assert_eq!(distinct, (1..=15).map(token).collect::<HashSet<_>>());
        assert!(
            other_server
                .claim_due(later, lease, 100)
                .await
                .expect("claim")
                .is_empty(),
            "all are leased"
        );

        let leases = |token: Option<String>| {
            let pool = pool.clone();
            async move {
                sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM snitch.sweep_leases WHERE $1::text IS NULL OR token = $1",
                )
                .bind(token)
                .fetch_one(&pool)
                .await
                .expect("count")
            }
        };
        assert_eq!(leases(None).await, 15);
        assert!(store.delete_snitch(&token(1)).await.expect("delete"));
        assert_eq!(leases(Some(token(1).as_str().to_owned())).await, 0);
        assert_eq!(leases(None).await, 14, "the others' leases stay");
    }

    /// A stored value that its domain type refuses reads as `Corrupt`, never as a value.
    #[tokio::test]
    async fn unreadable_rows_are_corrupt() {
        let db = fresh_database().await;
        let pool = db.pool.clone();
        let store = PgStorage::new(pool.clone());
        let acme = case("acme");
        store.upsert_case(&acme).await.expect("upsert");
        store
            .insert_snitch(&snitch(&acme, 1, at(0)), 100)
            .await
            .expect("insert");
        sqlx::query("UPDATE snitch.snitches SET interval = 'fortnightly'")
            .execute(&pool)
            .await
            .expect("spoil the row");

        let read = store.snitch(&token(1)).await;
        assert!(matches!(read, Err(StorageError::Corrupt(_))), "{read:?}");
        let listed = store.snitches(&acme.id, &[]).await;
        assert!(
            matches!(listed, Err(StorageError::Corrupt(_))),
            "{listed:?}"
        );
        // E-mail keywords that are no JSON, search nowhere known, or hold an empty keyword.
        for spoiled in [
            "not json",
            r#"{"failure":["x"],"success":[],"start":[],"search":"headers"}"#,
            r#"{"failure":[" "],"success":[],"start":[],"search":"both"}"#,
        ] {
            sqlx::query("UPDATE snitch.snitches SET interval = 'hourly', email_keywords = $1")
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

    /// A database that cannot be reached is a `Backend` failure, which may be retried.
    #[tokio::test]
    async fn a_lost_database_is_a_backend_failure() {
        let db = fresh_database().await;
        let pool = db.pool.clone();
        let store = PgStorage::new(pool.clone());
        pool.close().await;
        let read = store.case(&case("acme").id).await;
        assert!(matches!(read, Err(StorageError::Backend(_))), "{read:?}");
    }

    /// Migrations can run again, and beside the host's own sqlx migrations.
    #[tokio::test]
    async fn migrations_rerun_beside_the_hosts() {
        let db = fresh_database().await;
        let pool = db.pool.clone();
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, \
             execution_time) VALUES (1, 'the host''s own', true, '\\x00', 0)",
        )
        .execute(&pool)
        .await
        .expect("record a host migration");
        MIGRATOR.run(&pool).await.expect("migrate again");
    }
}

mod fair_claims {
    use proptest::prelude::*;
    use snitch_store_sql::claims::{claims_as_select_picks, outboxes};

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        /// The store's fair claim takes what `ClaimLimits::select` picks, on a fresh
        /// database per outbox, whatever the window it ranks first (of one to three, or
        /// the default, which holds every due delivery of these outboxes).
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
                let (store, _db) = match window {
                    Some(window) => super::fresh_store_with_window(window).await,
                    None => super::fresh_store().await,
                };
                claims_as_select_picks(&store, &outbox).await;
            });
        }
    }
}
