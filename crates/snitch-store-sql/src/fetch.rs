//! Running a query and turning its rows into domain values, the same in every dialect:
//! a database failure is [`backend`], a row that does not convert is the
//! conversion's error.

use snitch_core::StorageError;
use sqlx::query::QueryAs;
use sqlx::{Database, Executor, FromRow, IntoArguments};

use crate::backend;

/// Every row of `query`, converted by `into`.
pub async fn all<'q, DB, O, T, A, E>(
    query: QueryAs<'q, DB, O, A>,
    executor: E,
    into: fn(O) -> Result<T, StorageError>,
) -> Result<Vec<T>, StorageError>
where
    DB: Database,
    A: 'q + IntoArguments<'q, DB>,
    O: Send + Unpin + for<'r> FromRow<'r, DB::Row> + 'q,
    E: Executor<'q, Database = DB> + 'q,
{
    query
        .fetch_all(executor)
        .await
        .map_err(backend)?
        .into_iter()
        .map(into)
        .collect()
}

/// The row of `query`, if any, converted by `into`.
pub async fn optional<'q, DB, O, T, A, E>(
    query: QueryAs<'q, DB, O, A>,
    executor: E,
    into: fn(O) -> Result<T, StorageError>,
) -> Result<Option<T>, StorageError>
where
    DB: Database,
    A: 'q + IntoArguments<'q, DB>,
    O: Send + Unpin + for<'r> FromRow<'r, DB::Row> + 'q,
    E: Executor<'q, Database = DB> + 'q,
{
    query
        .fetch_optional(executor)
        .await
        .map_err(backend)?
        .map(into)
        .transpose()
}
