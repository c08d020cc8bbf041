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
