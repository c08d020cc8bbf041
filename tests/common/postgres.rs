//! A fresh PostgreSQL database for each test that needs one (named after the test process,
//! whose databases the next process drops once it has ended). Without a reachable server
//! the test fails loudly (it never skips): `bash scripts/ensure-postgres.sh` starts the
//! local one.

use std::str::FromStr;

use snitch::core::{RandomTokens, TokenSource};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgConnection, PgPool};

/// The server `scripts/ensure-postgres.sh` starts, when `DATABASE_URL` is not set.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database of its own: its name, a URL for servers and a pool for the test's queries.
pub struct FreshDatabase {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
}

/// Creates an empty database (servers migrate it on start) with a pool of
/// `max_connections` on it.
pub async fn fresh_database(max_connections: u32) -> FreshDatabase {
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
    drop_databases_of_ended_processes(&mut admin).await;
    let name = format!(
        "snitch_test_p{}_{}",
        std::process::id(),
        RandomTokens.new_token().as_str()
    );
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
    admin.close().await.ok();
    let options = server.database(&name);
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .connect_with(options.clone())
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test database {name}: {e}"));
    eprintln!("test database: {name}");
    FreshDatabase {
        url: options.to_url_lossy().to_string(),
        name,
        pool,
    }
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
