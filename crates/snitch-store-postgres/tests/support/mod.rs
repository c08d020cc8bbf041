//! What the Postgres store's test files share: a fresh database per test.
//!
//! The server is `DATABASE_URL`, or the local one that `scripts/ensure-postgres.sh`
//! starts. A test that cannot reach it fails: a skipped test would pass in silence.
//! Test databases are named `snitch_test_<random>` and left behind (the suites have no
//! teardown hook); `scripts/ensure-postgres.sh` drops them.

use std::future::Future;
use std::str::FromStr;
use std::time::{Duration, Instant};

use snitch_core::{RandomTokens, TokenSource};
use snitch_store_postgres::MIGRATOR;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection, PgPool};

const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A new, migrated database of its own: a pool of 5 connections on it.
pub async fn fresh_database() -> PgPool {
    fresh_database_with_connections(5).await
}

/// A new, migrated database of its own: a pool of up to `connections` on it.
#[allow(dead_code)] // Not every test file needs a larger pool.
pub async fn fresh_database_with_connections(connections: u32) -> PgPool {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned());
    let server = PgConnectOptions::from_str(&url)
        .unwrap_or_else(|e| panic!("DATABASE_URL {url:?} is not a Postgres URL: {e}"));
    let mut admin = PgConnection::connect_with(&server)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot reach Postgres at {url}: {e}\n\
             start it with `bash scripts/ensure-postgres.sh`, or set DATABASE_URL"
            )
        });
    let name = format!("snitch_test_{}", RandomTokens.new_token());
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
    admin.close().await.ok();

    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .connect_with(server.database(&name))
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test database {name}: {e}"));
    MIGRATOR
        .run(&pool)
        .await
        .unwrap_or_else(|e| panic!("cannot migrate the test database {name}: {e}"));
    pool
}

/// Waits until `condition` holds (a state another connection or a background task
/// reaches), or fails the test once `within` has passed.
#[allow(dead_code)] // Not every test file waits for something.
pub async fn until<F, Fut>(what: &str, within: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up = Instant::now() + within;
    while !condition().await {
        assert!(Instant::now() < give_up, "never happened: {what}");
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
