//! A fresh PostgreSQL database for each test that needs one. Without a reachable server
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
    let name = format!("snitch_test_{}", RandomTokens.new_token().as_str());
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
