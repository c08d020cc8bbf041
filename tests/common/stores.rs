//! Servers under test on the store a test names: the top-level configuration that puts a
//! server there, and what must outlive the server.

use std::any::Any;

use snitch_store_postgres::test_databases;

/// Which store a server under test keeps its data in.
#[derive(Debug, Clone, Copy)]
pub enum Store {
    Memory,
    Sqlite,
    Postgres,
}

/// The configuration lines that put a server on `store`, and what must outlive it: a
/// SQLite file's directory, or a PostgreSQL database of its own (dropped with it).
pub async fn store_config(store: Store) -> (String, Box<dyn Any>) {
    match store {
        Store::Memory => (String::new(), Box::new(())),
        Store::Sqlite => {
            let dir = tempfile::tempdir().expect("a directory");
            let top = format!("data_path = {:?}\n", dir.path().join("snitch.db"));
            (top, Box::new(dir))
        }
        Store::Postgres => {
            let db = test_databases::empty(2).await;
            (format!("database_url = {:?}\n", db.url), Box::new(db))
        }
    }
}

/// A server on `store` on `clock`, its time manual and its rate limits off, and what must
/// outlive it (its directory or database).
#[allow(dead_code)] // Not every test binary that shares this module starts one.
pub async fn start_on(
    store: Store,
    clock: std::sync::Arc<snitch::prelude::ManualClock>,
) -> (super::Server, Box<dyn Any>) {
    let (top, kept) = store_config(store).await;
    let top = format!("{}{}{top}", super::NO_RATE_LIMIT, super::MANUAL_TIME);
    let server = super::Server::launch(&top, &super::default_cases(), clock).await;
    (server, kept)
}
