//! What the Postgres store's test files share beyond a database of their own
//! ([`snitch_store_postgres::test_databases`]): waiting for a condition, counting rows.

use std::future::Future;
use std::time::Duration;

use snitch_core::clock::monotonic_now;
use snitch_store_postgres::test_databases::{self, TestDatabase};
use sqlx::PgPool;

/// A new, migrated database of its own (dropped with the value): a pool of 5 connections.
pub async fn fresh_database() -> TestDatabase {
    test_databases::migrated(5).await
}

/// A new, migrated database of its own: a pool of up to `connections` on it.
#[allow(dead_code)] // Not every test file needs a larger pool.
pub async fn fresh_database_with_connections(connections: u32) -> TestDatabase {
    test_databases::migrated(connections).await
}

/// Waits until `condition` holds (a state another connection or a background task
/// reaches), or fails the test once `within` has passed.
#[allow(dead_code)] // Not every test file waits for something.
pub async fn until<F, Fut>(what: &str, within: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up = monotonic_now() + within;
    while !condition().await {
        assert!(monotonic_now() < give_up, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How many check-ins of `token` are stored, trimmed ones gone and the ones readers are
/// not shown included.
#[allow(dead_code)] // Not every test file counts rows.
pub async fn stored_check_ins(pool: &PgPool, token: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM snitch.check_ins WHERE token = $1")
        .bind(token)
        .fetch_one(pool)
        .await
        .expect("count")
}
