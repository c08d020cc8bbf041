//! What the Postgres store's test files share: a fresh database per test.
//!
//! The server is `DATABASE_URL`, or the local one that `scripts/ensure-postgres.sh`
//! starts. A test that cannot reach it fails: a skipped test would pass in silence.
//!
//! The migrations run once, into a template database named by a hash of them
//! (`snitch_tpl_<hash>`, kept for later runs of the same migrations); each test's
//! database is a copy of it (`CREATE DATABASE … TEMPLATE …`), which takes milliseconds
//! where running every migration took a good part of a second. Test databases are named
//! `snitch_test_p<pid>_<random>`: the store owns the test's pool and the suites have no
//! teardown hook, so each test process first drops the databases of processes that have
//! ended (a run leaves only its last binary's, which the next run drops).

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::time::Duration;

use snitch_core::clock::monotonic_now;
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
    let template = migrated_template(&mut admin, &server).await;
    drop_databases_of_ended_processes(&mut admin).await;
    let name = format!(
        "snitch_test_p{}_{}",
        std::process::id(),
        RandomTokens.new_token().as_str()
    );
    admin
        .execute(format!("CREATE DATABASE {name} TEMPLATE {template}").as_str())
        .await
        .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
    admin.close().await.ok();

    PgPoolOptions::new()
        .max_connections(connections)
        .connect_with(server.database(&name))
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test database {name}: {e}"))
}

/// The template database holding every migration of [`MIGRATOR`], made by the first test
/// that needs it (under an advisory lock, so concurrent tests and processes make it once).
/// It counts as made only once it is marked a template, after its migrations ran.
async fn migrated_template(admin: &mut PgConnection, server: &PgConnectOptions) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for migration in MIGRATOR.iter() {
        migration.version.hash(&mut hasher);
        migration.checksum.hash(&mut hasher);
    }
    let name = format!("snitch_tpl_{:016x}", hasher.finish());
    if is_template(admin, &name).await {
        return name;
    }
    // One lock for every maker of a template: they take a second, once per migration set.
    admin
        .execute("SELECT pg_advisory_lock(7236561902)")
        .await
        .expect("the template lock");
    if !is_template(admin, &name).await {
        admin
            .execute(format!("DROP DATABASE IF EXISTS {name}").as_str())
            .await
            .unwrap_or_else(|e| panic!("cannot drop a half-made template {name}: {e}"));
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap_or_else(|e| panic!("cannot create the template {name}: {e}"));
        let mut conn = PgConnection::connect_with(&server.clone().database(&name))
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the template {name}: {e}"));
        MIGRATOR
            .run(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("cannot migrate the template {name}: {e}"));
        conn.close().await.ok();
        admin
            .execute(format!("ALTER DATABASE {name} IS_TEMPLATE true").as_str())
            .await
            .unwrap_or_else(|e| panic!("cannot mark the template {name}: {e}"));
    }
    admin
        .execute("SELECT pg_advisory_unlock(7236561902)")
        .await
        .expect("the template unlock");
    name
}

/// Whether database `name` exists and is marked a template.
async fn is_template(admin: &mut PgConnection, name: &str) -> bool {
    sqlx::query_scalar::<_, bool>("SELECT datistemplate FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_optional(admin)
        .await
        .unwrap_or_else(|e| panic!("cannot look for the template {name}: {e}"))
        == Some(true)
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

/// Drops the test databases that processes no longer running left behind (named
/// `snitch_test_p<pid>_…`), once per test process: a run leaves at most its last test
/// binary's databases, and the next run drops those. A database of a live process (one
/// running now, maybe another clone's tests) is never touched.
async fn drop_databases_of_ended_processes(admin: &mut PgConnection) {
    static DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if DONE.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let names: Vec<(String,)> =
        sqlx::query_as("SELECT datname FROM pg_database WHERE datname LIKE 'snitch\\_test\\_p%'")
            .fetch_all(&mut *admin)
            .await
            .unwrap_or_default();
    for (name,) in names {
        let pid = name
            .strip_prefix("snitch_test_p")
            .and_then(|rest| rest.split('_').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        let ended = pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
        if ended {
            // Best effort: one still in use by a straggler is dropped next time.
            let _ = admin
                .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                .await;
        }
    }
}
