//! How SQLite keeps Snitch's values ([`Lite`], the store's [`Dialect`]): instants are
//! INTEGER milliseconds since the Unix epoch (the service hands whole milliseconds, so
//! nothing is lost, and integers compare and index exactly); lists are JSON arrays in
//! TEXT; tables are named `snitch_*` (the host's database may hold tables of its own).
//! The rows and their mapping to domain values are `snitch_store_sql::records`.

use chrono::DateTime;
use snitch_core::{StorageError, Timestamp};
use snitch_store_sql::{corrupt, Dialect};
use sqlx::types::Json;

/// SQLite's [`Dialect`].
#[derive(Debug)]
pub(crate) struct Lite;

impl Dialect for Lite {
    type Time = i64;
    type Texts = Json<Vec<String>>;
    type Numbers = Json<Vec<i64>>;

    const TABLES: &'static str = "snitch_";
    const PARAMETER: char = '?';
    // SQLite's default collation (BINARY) compares bytes.
    const BYTE_ORDER: &'static str = "";

    fn time(t: Timestamp) -> i64 {
        t.timestamp_millis()
    }

    fn instant(what: &str, ms: i64) -> Result<Timestamp, StorageError> {
        DateTime::from_timestamp_millis(ms)
            .ok_or_else(|| corrupt(what, format!("{ms} ms is out of range")))
    }

    fn texts(items: Vec<String>) -> Json<Vec<String>> {
        Json(items)
    }

    fn text_items(texts: &Json<Vec<String>>) -> &[String] {
        &texts.0
    }

    fn numbers(numbers: Json<Vec<i64>>) -> Vec<i64> {
        numbers.0
    }
}
