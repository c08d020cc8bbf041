//! What Snitch's two SQL stores (`snitch-store-sqlite`, `snitch-store-postgres`) share,
//! so that each of them holds only its dialect: the SQL text that differs, its type
//! mappings, and (Postgres) its set-based batches and read batches.
//!
//! - [`Dialect`]: how a store keeps instants and lists, names its tables and numbers its
//!   parameters. Statements both stores run are written once here, in the canonical form
//!   ([`sql`]: Postgres' `snitch.` tables and `$N` parameters), and each store rewrites
//!   them for itself with [`Dialect::sql`].
//! - [`records`]: rows ↔ domain values, generic over the dialect; reading re-parses every
//!   value, so a row that is no longer valid is [`StorageError::Corrupt`].
//! - [`queue`]: the self-respawning queue of group commit, which each store drains in
//!   batches its own way.
//! - [`fetch`]: running a query and turning its rows into domain values.
//! - [`check_in_cache`]: the snitches a store last read or saved, so a check-in's read is
//!   answered without the database (safe behind the save's version check).
//! - `claims` (feature `test-support`): the property test that a store's fair delivery
//!   claim picks what [`snitch_core::ClaimLimits::select`] picks.
//! - `group_commit_tests` (feature `test-support`): what group commit must do, for both
//!   stores' tests.
//!
//! An internal crate: its API follows the stores, not semver.

#![warn(missing_docs)]

pub mod batcher;
pub mod check_in_cache;
#[cfg(feature = "test-support")]
pub mod claims;
pub mod fetch;
#[cfg(feature = "test-support")]
pub mod group_commit_tests;
pub mod queue;
pub mod records;
pub mod sql;

use std::fmt::{self, Display};

use serde::de::DeserializeOwned;
use serde::Serialize;
use snitch_core::liveness::Outage;
use snitch_core::{Status, StorageError, StoreStats, Timestamp};
use sqlx::migrate::Migrator;

/// How one SQL database keeps Snitch's values, names its tables and numbers parameters.
pub trait Dialect: fmt::Debug + Send + Sync + Unpin + 'static {
    /// An instant as a column holds it.
    type Time: Copy + fmt::Debug + Send + Sync + Unpin + Serialize + DeserializeOwned + 'static;
    /// A list of texts as a column holds it (tags, e-mail addresses).
    type Texts: fmt::Debug + Send + Sync + Unpin + Serialize + DeserializeOwned + 'static;
    /// A list of numbers as a column holds it (smart alerts' offsets).
    type Numbers: fmt::Debug + Send + Sync + Unpin + Serialize + DeserializeOwned + 'static;

    /// What stands before a table's name: `snitch.` (a schema) or `snitch_`.
    const TABLES: &'static str;
    /// The sign of a numbered parameter: `$` (`$1`) or `?` (`?1`).
    const PARAMETER: char;
    /// How text sorts byte by byte in `ORDER BY` (appended to the column).
    const BYTE_ORDER: &'static str;

    /// An instant as stored.
    fn time(t: Timestamp) -> Self::Time;
    /// A stored instant.
    fn instant(what: &str, t: Self::Time) -> Result<Timestamp, StorageError>;
    /// A list of texts as stored.
    fn texts(items: Vec<String>) -> Self::Texts;
    /// The items of a stored list of texts.
    fn text_items(texts: &Self::Texts) -> &[String];
    /// The items of a stored list of numbers.
    fn numbers(numbers: Self::Numbers) -> Vec<i64>;

    /// A statement written in the canonical form of [`sql`], in this dialect.
    fn sql(canonical: &str) -> String {
        let tables = canonical.replace("snitch.", Self::TABLES);
        if Self::PARAMETER == '$' {
            tables
        } else {
            tables.replace('$', &Self::PARAMETER.to_string())
        }
    }

    /// `$from, $from+1, …`: `count` numbered parameters, comma-separated.
    fn parameters(from: usize, count: usize) -> String {
        (from..from + count)
            .map(|i| format!("{}{i}", Self::PARAMETER))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// An optional instant as stored.
pub fn opt_time<D: Dialect>(t: Option<Timestamp>) -> Option<D::Time> {
    t.map(D::time)
}

/// An optional stored instant.
pub fn opt_instant<D: Dialect>(
    what: &str,
    t: Option<D::Time>,
) -> Result<Option<Timestamp>, StorageError> {
    t.map(|t| D::instant(what, t)).transpose()
}

/// Stored data that is not valid.
pub fn corrupt(what: &str, problem: impl Display) -> StorageError {
    StorageError::Corrupt(format!("{what}: {problem}"))
}

/// A failure of the database itself. A value that cannot be decoded from its column is
/// stored data that is not valid; anything else may pass if retried.
pub fn backend(e: sqlx::Error) -> StorageError {
    match e {
        sqlx::Error::ColumnDecode { .. } => StorageError::Corrupt(e.to_string()),
        e => StorageError::Backend(Box::new(e)),
    }
}

/// A count for `LIMIT`/`OFFSET`.
pub fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A `u64` counter as a 64-bit integer column; counters never get near `i64::MAX`, so one
/// that does is refused rather than wrapped.
pub fn to_integer(what: &str, n: u64) -> Result<i64, StorageError> {
    i64::try_from(n).map_err(|_| {
        StorageError::Backend(format!("{what} {n} exceeds a 64-bit integer column").into())
    })
}

/// A stored counter, which is never negative.
pub fn from_integer(what: &str, n: i64) -> Result<u64, StorageError> {
    u64::try_from(n).map_err(|_| corrupt(what, format!("negative value {n}")))
}

/// Liveness records of servers not seen for this long are dropped; the latest is always
/// kept, as the heartbeat writes it just before.
pub const SERVERS_KEPT_FOR: chrono::Duration = chrono::Duration::days(7);

/// An outage as stored.
pub fn outage_of<D: Dialect>(
    id: i64,
    started_at: D::Time,
    ended_at: D::Time,
) -> Result<Outage, StorageError> {
    Ok(Outage {
        id: u64::try_from(id)
            .map_err(|_| StorageError::Corrupt(format!("outage id {id} is negative")))?,
        started_at: D::instant("outage start", started_at)?,
        ended_at: D::instant("outage end", ended_at)?,
    })
}

/// A count from `count(*)`, which is never negative.
pub fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The store's figures from its counts of snitches by status and of pending deliveries
/// (each store's kept counts, [`sql::PENDING_DELIVERIES`]).
pub fn stats(by_status: Vec<(String, i64)>, pending: i64) -> StoreStats {
    let counts = by_status
        .into_iter()
        .filter_map(|(status, n)| Some((Status::parse(&status)?, count(n))));
    StoreStats::from_counts(counts, Some(count(pending)))
}

/// Whether every migration of `migrator` is among the `applied` versions (from
/// [`sql::APPLIED_MIGRATIONS`]); the first one that is not, as an error, otherwise.
pub fn migrations_applied(migrator: &Migrator, applied: &[i64]) -> Result<(), StorageError> {
    match migrator
        .iter()
        .find(|m| !m.migration_type.is_down_migration() && !applied.contains(&m.version))
    {
        Some(missing) => Err(StorageError::Backend(
            format!(
                "migration {} ({}) is not applied",
                missing.version, missing.description
            )
            .into(),
        )),
        None => Ok(()),
    }
}
