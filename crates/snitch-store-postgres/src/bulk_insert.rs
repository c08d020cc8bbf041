//! Bulk inserts (`Storage::insert_snitches`): a chunk of snitches in one statement, the
//! whole call in one transaction, so an import or a benchmark's set-up of 100,000 snitches
//! costs a few dozen round trips, not 100,000.

use std::collections::HashSet;
use std::sync::LazyLock;

use serde::Serialize;
use snitch_core::{Snitch, StorageError};
use sqlx::postgres::PgPool;
use sqlx::types::Json;

use crate::records::{SnitchFields, SNITCH_FIELDS};
use crate::set_based::SNITCH_FIELD_TYPES;
use crate::{backend, violates};

/// Snitches per statement: one JSON parameter of a few megabytes.
const CHUNK: usize = 5_000;

/// `$1` the snitches as a JSON array of rows, `$2` the most a case may hold. Locks the
/// cases in id order (bulk inserts running at once never deadlock), raises the count of
/// each case only if all its new snitches fit, and inserts the snitches of those cases in
/// the order given. Returns how many were inserted; fewer than given means a case was full
/// or unknown, and the caller rolls back.
static INSERT_CHUNK: LazyLock<String> = LazyLock::new(|| {
    let input_columns: Vec<String> = SNITCH_FIELDS
        .iter()
        .zip(SNITCH_FIELD_TYPES)
        .map(|(field, ty)| format!("{field} {ty}"))
        .collect();
    let selects: Vec<String> = SNITCH_FIELDS.iter().map(|f| format!("i.{f}")).collect();
    format!(
        "WITH input AS ( \
           SELECT * FROM jsonb_to_recordset($1) \
             AS i(token text, case_id text, created_at timestamptz, ord integer, \
               {input_columns})), \
         wanted AS (SELECT case_id, count(*) AS n FROM input GROUP BY case_id), \
         locked AS ( \
           SELECT c.id FROM snitch.cases c WHERE c.id IN (SELECT case_id FROM wanted) \
           ORDER BY c.id FOR UPDATE), \
         slots AS ( \
           UPDATE snitch.cases c SET snitches_held = c.snitches_held + w.n \
           FROM wanted w \
           WHERE c.id = w.case_id AND c.id IN (SELECT id FROM locked) \
             AND c.snitches_held + w.n <= $2 \
           RETURNING c.id), \
         inserted AS ( \
           INSERT INTO snitch.snitches (token, case_id, created_at, {fields}) \
           SELECT i.token, i.case_id, i.created_at, {selects} FROM input i \
           WHERE i.case_id IN (SELECT id FROM slots) ORDER BY i.ord \
           RETURNING 1) \
         SELECT count(*) FROM inserted",
        input_columns = input_columns.join(", "),
        fields = SNITCH_FIELDS.join(", "),
        selects = selects.join(", "),
    )
});

#[derive(Serialize)]
struct NewSnitch<'a> {
    token: &'a str,
    case_id: &'a str,
    created_at: chrono::DateTime<chrono::Utc>,
    ord: usize,
    #[serde(flatten)]
    fields: SnitchFields<'a>,
}

/// Inserts `snitches` all or nothing (see `Storage::insert_snitches`).
pub(crate) async fn insert_snitches(
    pool: &PgPool,
    snitches: &[Snitch],
    max_snitches: u32,
) -> Result<(), StorageError> {
    if snitches.is_empty() {
        return Ok(());
    }
    // A token given twice would fail the statement as a taken one does; say so at once.
    let mut tokens = HashSet::with_capacity(snitches.len());
    if !snitches.iter().all(|s| tokens.insert(s.token())) {
        return Err(StorageError::DuplicateToken);
    }
    let mut tx = pool.begin().await.map_err(backend)?;
    for chunk in snitches.chunks(CHUNK) {
        let rows = chunk
            .iter()
            .enumerate()
            .map(|(ord, s)| {
                Ok(NewSnitch {
                    token: s.token().as_str(),
                    case_id: s.case_id().as_str(),
                    created_at: s.created_at(),
                    ord,
                    fields: SnitchFields::of(s)?,
                })
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        let inserted: Result<i64, sqlx::Error> = sqlx::query_scalar(&INSERT_CHUNK)
            .bind(Json(&rows))
            .bind(i64::from(max_snitches))
            .fetch_one(&mut *tx)
            .await;
        match inserted {
            Ok(n) if n == rows.len() as i64 => {}
            Ok(_) => {
                // Some case was full or is not stored: nothing of the call stays.
                let cases: Vec<&str> = chunk.iter().map(|s| s.case_id().as_str()).collect();
                let unknown: Option<String> = sqlx::query_scalar(
                    "SELECT c FROM unnest($1::text[]) AS c \
                     WHERE c NOT IN (SELECT id FROM snitch.cases) LIMIT 1",
                )
                .bind(&cases)
                .fetch_optional(&mut *tx)
                .await
                .map_err(backend)?;
                tx.rollback().await.map_err(backend)?;
                let unknown = unknown
                    .and_then(|id| chunk.iter().map(Snitch::case_id).find(|c| c.as_str() == id));
                return Err(match unknown {
                    Some(case) => StorageError::UnknownCase(case.clone()),
                    None => StorageError::LimitReached { max: max_snitches },
                });
            }
            Err(e) if violates(&e, "snitches_pkey") => return Err(StorageError::DuplicateToken),
            Err(e) => return Err(backend(e)),
        }
    }
    tx.commit().await.map_err(backend)
}
