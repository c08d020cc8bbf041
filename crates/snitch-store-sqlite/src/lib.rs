//! SQLite storage for Snitch: a [`Storage`] in one file, durable, with no server to run.
//!
//! [`SqliteStorage`] takes the host's [`SqlitePool`]; its tables, all named `snitch_*` so
//! they sit beside the host's own, are created by the embedded migrations in
//! [`MIGRATOR`], which the host runs. [`connect`] opens a pool
//! with the settings the store is meant for (see [`connect_options`]):
//!
//! ```no_run
//! # async fn start() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = snitch_store_sqlite::connect(std::path::Path::new("snitch.db"), 8).await?;
//! snitch_store_sqlite::MIGRATOR.run(&pool).await?;
//! let store = snitch_store_sqlite::SqliteStorage::new(pool);
//! # Ok(()) }
//! ```
//!
//! How the contract of [`Storage`] maps onto SQLite:
//! - Durability: WAL journal with `synchronous = FULL`, so a save that returned `Ok` (a
//!   check-in answered 202) is on disk, even if the machine loses power. `check_ready`
//!   refuses a host's pool whose connections run with less.
//! - One writer: SQLite has one write lock per file. Every write of a store waits for its
//!   turn (an async mutex, see `writer.rs`) and then runs in a `BEGIN IMMEDIATE`
//!   transaction, so writers of one process never see `SQLITE_BUSY`; another process on
//!   the same file is waited for by the busy timeout. Reads go to the pool and, thanks to
//!   WAL, never wait for the writer.
//! - Group commit: concurrent saves share one transaction, each in a savepoint of its own,
//!   answered once it committed ([`SqliteStorageOptions`]).
//! - Optimistic concurrency: a save's `UPDATE … WHERE version = expected` either applies
//!   (and then the check-ins, events and deliveries are inserted with it) or touches no
//!   row, which is a conflict or a missing snitch.
//! - The plan limit: the count and the insert are one write transaction.
//! - The deadline sweep reads a partial index on `wake_at` (kept equal to
//!   [`Snitch::wake_at`] by every write, so a change that keeps it, applied at the
//!   expected version, need not assign it: [`Change::keeps_wake_at`]); sweep leases and
//!   delivery claims are write transactions, so concurrent claims never take the same row.
//! - Instants are INTEGER milliseconds since the epoch (UTC); lists are JSON text.
//! - History is bounded: each snitch keeps its newest `Change::keep_check_ins` check-ins and
//!   [`EVENTS_KEPT`] events; finished deliveries go with their event, pending ones stay
//!   until they finish.

#![warn(missing_docs)]

mod claims;
mod records_lite;
mod set_based;
mod writer;

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use snitch_core::{
    ApiKeyRecord, Attempt, AttemptResult, Case, CaseId, CaseOutage, Change, ChannelConfig, CheckIn,
    ClaimLimits, Delivery, Event, Outage, Snitch, Storage, StorageError, StoreStats, Tag,
    Timestamp, Token, Webhook,
};
use snitch_store_sql::batcher::{AttemptWrite, Batcher};
use snitch_store_sql::check_in_cache::CheckInCache;
use snitch_store_sql::queue::failed_batch;
use snitch_store_sql::records::{
    self, after_attempt, ApiKeyRow, AttemptRecord, CaseRow, ChannelFields, ChannelRow,
    CheckInRecord, DeliveryFields, DeliveryRow, EventRecord, SnitchFields, SnitchRow, WebhookRow,
    DELIVERY_COLUMNS, DELIVERY_FIELDS, EVENT_COLUMNS, SNITCH_FIELDS,
};
use snitch_store_sql::{
    backend, bind_channel, bind_delivery, bind_event, bind_snitch_fields, corrupt, count, fetch,
    limit, migrations_applied, opt_instant, opt_time, outage_of, sql, to_integer, Dialect,
    SERVERS_KEPT_FOR,
};
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::types::Json;

use records_lite::Lite;
use set_based::RowRecord;
pub use writer::SqliteStorageOptions;
use writer::Writer;

/// How many events are kept per snitch (the core's limit, re-exported).
pub use snitch_core::snitch::EVENTS_KEPT;

/// How long a connection waits for another process's write lock before it fails.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The migrations that create and evolve the schema; hosts run them before use.
///
/// sqlx records applied migrations in the database's `_sqlx_migrations` table, which a
/// host using sqlx migrations of its own shares: this migrator ignores versions it does
/// not know, and the host's own needs [`Migrator::set_ignore_missing`] for the same
/// reason (and versions other than Snitch's, which are dates: `2026…`).
pub static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.set_ignore_missing(true);
    migrator
});

/// How many pages the WAL may hold before a commit copies them into the database file
/// (SQLite's default is 1,000). Check-ins rewrite the same hot pages (snitch rows, the
/// deadline index) batch after batch: a longer window copies each of them once per
/// checkpoint instead of once per thousand pages written.
const WAL_AUTOCHECKPOINT_PAGES: &str = "10000";

/// The connection settings the store is meant for, for the database file at `path`
/// (created if missing; its directory must exist): WAL journal, `synchronous = FULL`
/// (a commit is on disk when it returns), foreign keys on, a busy timeout of
/// [`BUSY_TIMEOUT`], the WAL copied into the database file every 10,000 pages, and
/// temporary files in memory (`temp_store`: a batch's savepoint journal otherwise spills
/// to a file created and deleted in every batch).
pub fn connect_options(path: &Path) -> SqliteConnectOptions {
    with_store_settings(SqliteConnectOptions::new().filename(path))
}

/// `options` with the settings of [`connect_options`] on top (the file created if
/// missing): the one place both ways of connecting take them from.
fn with_store_settings(options: SqliteConnectOptions) -> SqliteConnectOptions {
    options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .foreign_keys(true)
        .busy_timeout(BUSY_TIMEOUT)
        .pragma("wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)
        .pragma("temp_store", "memory")
}

/// A pool of up to `max_connections` on the database file at `path`, with
/// [`connect_options`]. The file is created if missing; its directory must exist.
pub async fn connect(path: &Path, max_connections: u32) -> Result<SqlitePool, sqlx::Error> {
    pool_with(connect_options(path), max_connections).await
}

/// A pool on a `sqlite://…` URL, with the settings of [`connect_options`] (options in the
/// URL's query come first and are then overridden).
pub async fn connect_url(url: &str, max_connections: u32) -> Result<SqlitePool, sqlx::Error> {
    let options = with_store_settings(SqliteConnectOptions::from_str(url)?);
    pool_with(options, max_connections).await
}

async fn pool_with(
    options: SqliteConnectOptions,
    max_connections: u32,
) -> Result<SqlitePool, sqlx::Error> {
    SqlitePoolOptions::new()
        .max_connections(max_connections.max(1))
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(options)
        .await
}

/// A [`Storage`] in a SQLite database.
///
/// Clones share the pool, the writer's turn, the group commit of saves and the check-in
/// cache. Saves need a
/// Tokio runtime: the first one spawns the task that groups them, and it ends when the
/// last clone is dropped. A save whose caller stops waiting is not withdrawn: it may still
/// commit.
#[derive(Debug, Clone)]
pub struct SqliteStorage {
    pool: SqlitePool,
    writer: Arc<Writer>,
    cache: Arc<CheckInCache>,
    /// Deliveries' attempts, recorded in batches (one transaction each).
    attempts: Arc<Batcher<AttemptWrite, Result<(), StorageError>>>,
    /// See [`SqliteStorageOptions::claim_window`].
    claim_window: usize,
}

/// The most attempts recorded in one transaction.
const ATTEMPTS_PER_BATCH: usize = 256;

impl SqliteStorage {
    /// Runs `write` (an insert or upsert of something of `case`) through the writer, once
    /// the case is known to be stored: [`StorageError::UnknownCase`] otherwise, and
    /// [`StorageError::DuplicateToken`] when it takes a unique value already held.
    async fn write_of_case<'q>(
        &self,
        case: &CaseId,
        write: sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    ) -> Result<(), StorageError> {
        let mut w = self.writer.begin().await?;
        let known: bool = sqlx::query_scalar(&CASE_EXISTS)
            .bind(case.as_str())
            .fetch_one(&mut *w.tx)
            .await
            .map_err(backend)?;
        if !known {
            return Err(StorageError::UnknownCase(case.clone()));
        }
        match write.execute(&mut *w.tx).await {
            Ok(_) => w.commit().await,
            Err(e) if is_unique_violation(&e) => Err(StorageError::DuplicateToken),
            Err(e) => Err(backend(e)),
        }
    }

    /// Runs `statement` (a delete by case `?1` and id `?2`) through the writer: whether it
    /// removed a row.
    async fn delete_of_case(
        &self,
        statement: &str,
        case: &CaseId,
        id: &str,
    ) -> Result<bool, StorageError> {
        let mut w = self.writer.begin().await?;
        let deleted = sqlx::query(statement)
            .bind(case.as_str())
            .bind(id)
            .execute(&mut *w.tx)
            .await
            .map_err(backend)?;
        w.commit().await?;
        Ok(deleted.rows_affected() > 0)
    }

    /// A store on the host's pool, grouping saves by [`SqliteStorageOptions::default`];
    /// [`MIGRATOR`] must have run on its database.
    pub fn new(pool: SqlitePool) -> Self {
        Self::with_options(pool, SqliteStorageOptions::default())
    }

    /// A store on the host's pool, grouping saves as `options` say.
    pub fn with_options(pool: SqlitePool, options: SqliteStorageOptions) -> Self {
        let writer = Arc::new(Writer::new(pool.clone(), options));
        let recorder = Arc::clone(&writer);
        let attempts = Batcher::new(
            ATTEMPTS_PER_BATCH,
            Arc::new(move |batch: Vec<AttemptWrite>| {
                let writer = Arc::clone(&recorder);
                Box::pin(async move { record_attempts(&writer, &batch).await })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
            }),
        );
        SqliteStorage {
            writer,
            cache: Arc::new(CheckInCache::new(options.cache_capacity, options.case_ttl)),
            attempts: Arc::new(attempts),
            claim_window: options.claim_window,
            pool,
        }
    }

    /// The delete of a snitch and everything of it, in one write transaction.
    async fn delete_snitch_rows(&self, token: &Token) -> Result<bool, StorageError> {
        let mut w = self.writer.begin().await?;
        if !snitch_exists(&mut w.tx, token.as_str()).await? {
            return Ok(false);
        }
        sqlx::query(&DELETE_FINISHED_DELIVERIES_OF)
            .bind(token.as_str())
            .execute(&mut *w.tx)
            .await
            .map_err(backend)?;
        // Explicitly, whether or not the host's pool enforces foreign keys.
        for table in ["snitch_check_ins", "snitch_events", "snitch_snitches"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE token = ?1"))
                .bind(token.as_str())
                .execute(&mut *w.tx)
                .await
                .map_err(backend)?;
        }
        w.commit().await?;
        Ok(true)
    }

    /// How many check-in reads the store's check-in cache answered (see
    /// [`SqliteStorageOptions::cache_capacity`]).
    pub fn check_in_cache_hits(&self) -> u64 {
        self.cache.hits()
    }

    /// The pool the store reads from.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// How many transactions of grouped saves committed so far.
    pub fn batches_committed(&self) -> u64 {
        self.writer.batches_committed()
    }

    /// How many changes this store saved in a set-based round (a batch's check-ins that
    /// only move their snitches, in one query) rather than one by one.
    pub fn saved_in_rounds(&self) -> u64 {
        self.writer.saved_in_rounds()
    }
}

/// Whether `e` is a violation of a UNIQUE or PRIMARY KEY constraint.
fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.kind() == sqlx::error::ErrorKind::UniqueViolation)
}

/// A statement written in the shared canonical form (`snitch_store_sql::sql`), for SQLite.
fn lite(canonical: &str) -> String {
    Lite::sql(canonical)
}

/// `INSERT` of a whole snitch: token, case and creation, then [`SNITCH_FIELDS`].
static INSERT_SNITCH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO snitch_snitches (token, case_id, created_at, {}) VALUES (?1, ?2, ?3, {})",
        SNITCH_FIELDS.join(", "),
        Lite::parameters(4, SNITCH_FIELDS.len())
    )
});

static UPDATE_SNITCH: LazyLock<String> = LazyLock::new(sql::update_snitch::<Lite>);
static SELECT_SNITCHES: LazyLock<String> = LazyLock::new(sql::select_snitches::<Lite>);
static SNITCH_EXISTS: LazyLock<String> = LazyLock::new(|| lite(sql::SNITCH_EXISTS));
static CASE_EXISTS: LazyLock<String> = LazyLock::new(|| lite(sql::CASE_EXISTS));
static DEFER: LazyLock<String> = LazyLock::new(|| lite(sql::DEFER));
static INSERT_EVENT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO snitch_events ({EVENT_COLUMNS}) VALUES ({})",
        Lite::parameters(1, EVENT_COLUMNS.split(", ").count())
    )
});
static INSERT_DELIVERY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT OR REPLACE INTO snitch_deliveries ({DELIVERY_FIELDS}) VALUES ({})",
        Lite::parameters(1, DELIVERY_FIELDS.split(", ").count())
    )
});

async fn insert_events(conn: &mut SqliteConnection, events: &[Event]) -> Result<(), StorageError> {
    // Only the newest EVENTS_KEPT can be kept: older ones of a long change are not written.
    let newest = &events[events.len().saturating_sub(EVENTS_KEPT)..];
    for e in newest.iter().map(EventRecord::<Lite>::of) {
        bind_event!(sqlx::query(&INSERT_EVENT), e, bind)
            .execute(&mut *conn)
            .await
            .map_err(backend)?;
    }
    Ok(())
}

/// Stores deliveries. A delivery id is taken again only when a deleted snitch's token is
/// reused; the new delivery then replaces the old one (with a new place in the order of
/// storing), as the other stores do.
async fn insert_deliveries(
    conn: &mut SqliteConnection,
    deliveries: &[Delivery],
) -> Result<(), StorageError> {
    for d in deliveries.iter().map(DeliveryFields::<Lite>::of) {
        bind_delivery!(sqlx::query(&INSERT_DELIVERY), d, bind)
            .execute(&mut *conn)
            .await
            .map_err(backend)?;
    }
    Ok(())
}

/// Appends check-ins in order, then settles the history: the length kept, the history cut
/// to it, the count of what is stored (`set_based::SETTLE_HISTORY`).
async fn insert_check_ins(
    conn: &mut SqliteConnection,
    token: &str,
    check_ins: &[CheckIn],
    keep: usize,
) -> Result<(), StorageError> {
    let keep = keep.max(1);
    let newest = &check_ins[check_ins.len().saturating_sub(keep)..];
    for c in newest.iter().map(CheckInRecord::<Lite>::of) {
        let insert = sqlx::query(
            "INSERT INTO snitch_check_ins (token, at, exit_status, message, number, details, body) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        );
        c.bind_to(insert.bind(token))
            .execute(&mut *conn)
            .await
            .map_err(backend)?;
    }
    sqlx::query(&set_based::SETTLE_HISTORY)
        .bind(token)
        .bind(limit(keep))
        .bind(limit(newest.len()))
        .execute(&mut *conn)
        .await
        .map_err(backend)?;
    Ok(())
}

/// Whether the snitch `token` is stored.
async fn snitch_exists(conn: &mut SqliteConnection, token: &str) -> Result<bool, StorageError> {
    sqlx::query_scalar(&SNITCH_EXISTS)
        .bind(token)
        .fetch_one(&mut *conn)
        .await
        .map_err(backend)
}

/// Why an update of the snitch `token` over its expected version changed no row: another
/// version is stored ([`StorageError::Conflict`]) or none ([`StorageError::NotFound`]).
async fn not_applied(
    conn: &mut SqliteConnection,
    token: &str,
) -> Result<StorageError, StorageError> {
    Ok(if snitch_exists(conn, token).await? {
        StorageError::Conflict
    } else {
        StorageError::NotFound
    })
}

/// Applies one change in the caller's transaction: the new state, then its check-ins,
/// events, deferrals and deliveries. Nothing is written when the version is stale
/// ([`StorageError::Conflict`]) or the snitch is gone ([`StorageError::NotFound`]); after
/// any other error part of it may be, so the caller rolls back to a savepoint set before.
pub(crate) async fn save_change(
    conn: &mut SqliteConnection,
    change: &Change,
) -> Result<(), StorageError> {
    let snitch = change.snitch();
    let token = snitch.token().as_str();
    let expected = to_integer("version", change.expected_version())?;

    if set_based::fits_a_round(change) {
        // A round of one: its rows and its state in a few statements, the histories
        // trimmed lazily.
        let mut outcome = set_based::save_round(conn, &[change])
            .await
            .map_err(backend)?;
        std::mem::take(&mut outcome.housekeeping).run(conn).await?;
        return outcome.results.pop().unwrap_or(Ok(()));
    }
    let fields = SnitchFields::<Lite>::of(snitch)?;
    let updated = bind_snitch_fields!(
        sqlx::query(&UPDATE_SNITCH).bind(token).bind(expected),
        fields,
        bind,
        Json
    )
    .execute(&mut *conn)
    .await
    .map_err(backend)?;
    if updated.rows_affected() == 0 {
        return Err(not_applied(conn, token).await?);
    }

    if !change.check_ins().is_empty() {
        insert_check_ins(conn, token, change.check_ins(), change.keep_check_ins()).await?;
    }

    if !change.events().is_empty() {
        insert_events(conn, change.events()).await?;
        // Events that fall out of the history take their finished deliveries along.
        const EVICTED: &str = "SELECT id FROM snitch_events WHERE token = ?1 AND seq <= \
             (SELECT seq FROM snitch_events WHERE token = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)";
        sqlx::query(&format!(
            "DELETE FROM snitch_deliveries WHERE state <> 'pending' AND event_id IN ({EVICTED})"
        ))
        .bind(token)
        .bind(limit(EVENTS_KEPT))
        .execute(&mut *conn)
        .await
        .map_err(backend)?;
        sqlx::query(&format!(
            "DELETE FROM snitch_events WHERE id IN ({EVICTED})"
        ))
        .bind(token)
        .bind(limit(EVENTS_KEPT))
        .execute(&mut *conn)
        .await
        .map_err(backend)?;
    }

    for outage in change.deferred_by() {
        sqlx::query(&DEFER)
            .bind(to_integer("outage id", *outage)?)
            .bind(snitch.case_id().as_str())
            .execute(&mut *conn)
            .await
            .map_err(backend)?;
    }

    insert_deliveries(conn, change.deliveries()).await
}

/// Records a batch of attempts in one write transaction: each its own answer
/// ([`StorageError::NotFound`] for a delivery no longer stored), or every one the error
/// that failed the transaction.
async fn record_attempts(writer: &Writer, batch: &[AttemptWrite]) -> Vec<Result<(), StorageError>> {
    match record_attempts_in_one(writer, batch).await {
        Ok(answers) => answers,
        Err(e) => {
            let unknown = e.is_outcome_unknown();
            failed_batch(e, unknown, batch.len())
        }
    }
}

async fn record_attempts_in_one(
    writer: &Writer,
    batch: &[AttemptWrite],
) -> Result<Vec<Result<(), StorageError>>, StorageError> {
    let mut w = writer.begin().await?;
    let mut answers = Vec::with_capacity(batch.len());
    for write in batch {
        let (state, next_attempt_at) = after_attempt::<Lite>(write.result);
        let updated = sqlx::query(
            "UPDATE snitch_deliveries SET attempts = json_insert(attempts, '$[#]', json(?2)), \
             state = ?3, next_attempt_at = ?4 WHERE id = ?1",
        )
        .bind(&write.delivery_id)
        .bind(Json(AttemptRecord::<Lite>::of(&write.attempt)))
        .bind(state.as_str())
        .bind(next_attempt_at)
        .execute(&mut *w.tx)
        .await
        .map_err(backend)?;
        if updated.rows_affected() == 0 {
            answers.push(Err(StorageError::NotFound));
            continue;
        }
        // A finished delivery of an event no longer in its snitch's history has no one
        // left to read it.
        sqlx::query(&DELETE_ORPHAN_DELIVERY)
            .bind(&write.delivery_id)
            .execute(&mut *w.tx)
            .await
            .map_err(backend)?;
        answers.push(Ok(()));
    }
    w.commit().await?;
    Ok(answers)
}

#[async_trait]
impl Storage for SqliteStorage {
    async fn upsert_case(&self, case: &Case) -> Result<(), StorageError> {
        let mut w = self.writer.begin().await?;
        let written = sqlx::query(&UPSERT_CASE)
            .bind(case.id.as_str())
            .bind(records::members::<Lite>(case))
            .bind(i64::from(case.plan.max_snitches))
            .bind(case.plan.error_notices)
            .bind(case.on_hold)
            .execute(&mut *w.tx)
            .await
            .map_err(backend);
        let result = match written {
            Ok(_) => w.commit().await,
            Err(e) => Err(e),
        };
        // Whether or not it committed, the held copy may be out of date.
        self.cache
            .forget_case(case.id.as_str(), snitch_core::clock::monotonic_now());
        result
    }

    async fn case(&self, id: &CaseId) -> Result<Option<Case>, StorageError> {
        let query = sqlx::query_as(&SELECT_CASE).bind(id.as_str());
        fetch::optional(query, &self.pool, CaseRow::<Lite>::into_case).await
    }

    async fn cases(&self) -> Result<Vec<Case>, StorageError> {
        fetch::all(
            sqlx::query_as(&SELECT_CASES),
            &self.pool,
            CaseRow::<Lite>::into_case,
        )
        .await
    }

    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<(), StorageError> {
        let mut w = self.writer.begin().await?;
        let (case, taken): (bool, bool) = sqlx::query_as(
            "SELECT EXISTS (SELECT 1 FROM snitch_cases WHERE id = ?1), \
             EXISTS (SELECT 1 FROM snitch_api_keys WHERE id = ?2 OR digest = ?3)",
        )
        .bind(key.case_id.as_str())
        .bind(&key.id)
        .bind(&key.digest)
        .fetch_one(&mut *w.tx)
        .await
        .map_err(backend)?;
        if !case {
            return Err(StorageError::UnknownCase(key.case_id.clone()));
        }
        if taken {
            return Err(StorageError::DuplicateToken);
        }
        sqlx::query(&INSERT_API_KEY)
            .bind(&key.id)
            .bind(key.case_id.as_str())
            .bind(&key.digest)
            .bind(&key.prefix)
            .bind(&key.label)
            .bind(Lite::time(key.created_at))
            .bind(opt_time::<Lite>(key.last_used_at))
            .bind(key.revoked)
            .execute(&mut *w.tx)
            .await
            .map_err(backend)?;
        w.commit().await
    }

    async fn api_keys(&self, case: Option<CaseId>) -> Result<Vec<ApiKeyRecord>, StorageError> {
        let query = sqlx::query_as(&API_KEYS).bind(case.as_ref().map(CaseId::as_str));
        fetch::all(query, &self.pool, ApiKeyRow::<Lite>::into_record).await
    }

    async fn revoke_api_key(&self, id: &str) -> Result<bool, StorageError> {
        let mut w = self.writer.begin().await?;
        let revoked = sqlx::query(&REVOKE_API_KEY)
            .bind(id)
            .execute(&mut *w.tx)
            .await
            .map_err(backend)?;
        w.commit().await?;
        Ok(revoked.rows_affected() > 0)
    }

    async fn record_api_key_use(&self, uses: &[(String, Timestamp)]) -> Result<(), StorageError> {
        if uses.is_empty() {
            return Ok(());
        }
        let mut w = self.writer.begin().await?;
        for (id, at) in uses {
            sqlx::query(
                "UPDATE snitch_api_keys SET last_used_at = max(coalesce(last_used_at, ?2), ?2) \
                 WHERE id = ?1",
            )
            .bind(id)
            .bind(Lite::time(*at))
            .execute(&mut *w.tx)
            .await
            .map_err(backend)?;
        }
        w.commit().await
    }

    async fn insert_snitch(&self, snitch: &Snitch, max_snitches: u32) -> Result<(), StorageError> {
        self.insert_snitches(std::slice::from_ref(snitch), max_snitches)
            .await
    }

    /// One write transaction for the lot: the counts and the inserts cannot be
    /// interleaved, and an error rolls them all back.
    async fn insert_snitches(
        &self,
        snitches: &[Snitch],
        max_snitches: u32,
    ) -> Result<(), StorageError> {
        if snitches.is_empty() {
            return Ok(());
        }
        let mut w = self.writer.begin().await?;
        // Each case is looked up and counted once (counting per snitch would make a large
        // import quadratic); then only the token is checked per snitch.
        let mut held: HashMap<&CaseId, i64> = HashMap::new();
        for snitch in snitches {
            let fields = SnitchFields::<Lite>::of(snitch)?;
            let case = snitch.case_id();
            if !held.contains_key(case) {
                let (known, count): (bool, i64) = sqlx::query_as(
                    "SELECT EXISTS (SELECT 1 FROM snitch_cases WHERE id = ?1), \
                     (SELECT count(*) FROM snitch_snitches WHERE case_id = ?1)",
                )
                .bind(case.as_str())
                .fetch_one(&mut *w.tx)
                .await
                .map_err(backend)?;
                if !known {
                    return Err(StorageError::UnknownCase(case.clone()));
                }
                held.insert(case, count);
            }
            if snitch_exists(&mut w.tx, snitch.token().as_str()).await? {
                return Err(StorageError::DuplicateToken);
            }
            let count = held.entry(case).or_default();
            if *count >= i64::from(max_snitches) {
                return Err(StorageError::LimitReached { max: max_snitches });
            }
            *count += 1;
            let insert = sqlx::query(&INSERT_SNITCH)
                .bind(snitch.token().as_str())
                .bind(case.as_str())
                .bind(Lite::time(snitch.created_at()));
            bind_snitch_fields!(insert, fields, bind, Json)
                .execute(&mut *w.tx)
                .await
                .map_err(backend)?;
        }
        w.commit().await
    }

    async fn snitch(&self, token: &Token) -> Result<Option<Snitch>, StorageError> {
        let query = sqlx::query_as(&SELECT_SNITCH).bind(token.as_str());
        fetch::optional(query, &self.pool, SnitchRow::<Lite>::into_snitch).await
    }

    async fn snitches(&self, case: &CaseId, tags: &[Tag]) -> Result<Vec<Snitch>, StorageError> {
        let query = sqlx::query_as(&SNITCHES_OF_CASE).bind(case.as_str());
        let snitches = fetch::all(query, &self.pool, SnitchRow::<Lite>::into_snitch).await?;
        // Tags are a JSON list: the filter runs on the parsed values, within one case.
        Ok(snitches
            .into_iter()
            .filter(|s| s.tags().contains_all(tags))
            .collect())
    }

    /// All at once: the writer groups concurrent saves into one transaction (one
    /// `fsync`) per batch, where one after another would cost one each.
    async fn save_all(&self, changes: &[Change]) -> Vec<Result<(), StorageError>> {
        futures::future::join_all(changes.iter().map(|change| self.save(change))).await
    }

    async fn save(&self, change: &Change) -> Result<(), StorageError> {
        let result = self.writer.save(change).await;
        self.cache.after_save(change, &result);
        result
    }

    async fn delete_snitch(&self, token: &Token) -> Result<bool, StorageError> {
        let deleted = self.delete_snitch_rows(token).await;
        // Gone or not, the held copy is no longer known to be the stored one.
        self.cache.forget(token.as_str());
        deleted
    }

    async fn due(&self, now: Timestamp, limit_to: usize) -> Result<Vec<Snitch>, StorageError> {
        let query = sqlx::query_as(&DUE)
            .bind(Lite::time(now))
            .bind(limit(limit_to));
        fetch::all(query, &self.pool, SnitchRow::<Lite>::into_snitch).await
    }

    async fn claim_due(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit_to: usize,
    ) -> Result<Vec<Snitch>, StorageError> {
        let mut w = self.writer.begin().await?;
        let query = sqlx::query_as(&CLAIM_DUE)
            .bind(Lite::time(now))
            .bind(limit(limit_to));
        let claimed = fetch::all(query, &mut *w.tx, SnitchRow::<Lite>::into_snitch).await?;
        let tokens: Vec<&str> = claimed.iter().map(|s| s.token().as_str()).collect();
        sqlx::query(
            "UPDATE snitch_snitches SET sweep_lease_until = ?1 \
             WHERE token IN (SELECT value FROM json_each(?2))",
        )
        .bind(Lite::time(lease_until))
        .bind(Json(tokens))
        .execute(&mut *w.tx)
        .await
        .map_err(backend)?;
        w.commit().await?;
        Ok(claimed)
    }

    /// The migrations, and on a pool a host made, the settings durability depends on.
    async fn check_ready(&self) -> Result<(), StorageError> {
        let applied: Vec<i64> = sqlx::query_scalar(sql::APPLIED_MIGRATIONS)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        migrations_applied(&MIGRATOR, &applied)?;
        check_pragmas(&self.pool).await
    }

    async fn stats(&self) -> Result<StoreStats, StorageError> {
        let by_status: Vec<(String, i64)> = sqlx::query_as(SNITCHES_BY_STATUS)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        let pending: i64 = sqlx::query_scalar(&PENDING_DELIVERIES)
            .fetch_one(&self.pool)
            .await
            .map_err(backend)?;
        Ok(snitch_store_sql::stats(by_status, pending))
    }

    async fn next_wake_at(&self) -> Result<Option<Timestamp>, StorageError> {
        let next: Option<i64> = sqlx::query_scalar(&NEXT_WAKE_AT)
            .fetch_one(&self.pool)
            .await
            .map_err(backend)?;
        opt_instant::<Lite>("wake_at", next)
    }

    async fn check_ins(
        &self,
        token: &Token,
        limit_to: usize,
    ) -> Result<Vec<CheckIn>, StorageError> {
        let query = sqlx::query_as(
            "SELECT at, exit_status, message, number, details, body FROM snitch_check_ins \
             WHERE token = ?1 ORDER BY seq DESC LIMIT min(?2, \
               coalesce((SELECT check_ins_keep FROM snitch_snitches WHERE token = ?1), 0))",
        )
        .bind(token.as_str())
        // Saves trim the history lazily: more than the newest `check_ins_keep` (the
        // length the last change asked for) may be stored, and are never shown.
        .bind(limit(limit_to));
        fetch::all(query, &self.pool, CheckInRecord::<Lite>::into_check_in).await
    }

    async fn events(&self, token: &Token, limit_to: usize) -> Result<Vec<Event>, StorageError> {
        let query = sqlx::query_as(&EVENTS)
            .bind(token.as_str())
            // Saves trim events lazily: more than the newest EVENTS_KEPT may be stored, and
            // are never shown.
            .bind(limit(limit_to.min(EVENTS_KEPT)));
        fetch::all(query, &self.pool, EventRecord::<Lite>::into_event).await
    }

    async fn insert_webhook(&self, hook: &Webhook) -> Result<(), StorageError> {
        let insert = sqlx::query(&INSERT_WEBHOOK)
            .bind(&hook.id)
            .bind(hook.case_id.as_str())
            .bind(hook.url.as_str())
            .bind(hook.secret.as_ref().map(|s| s.expose()))
            .bind(Lite::time(hook.created_at));
        self.write_of_case(&hook.case_id, insert).await
    }

    async fn webhooks(&self, case: &CaseId) -> Result<Vec<Webhook>, StorageError> {
        let query = sqlx::query_as(&WEBHOOKS).bind(case.as_str());
        fetch::all(query, &self.pool, WebhookRow::<Lite>::into_webhook).await
    }

    async fn delete_webhook(&self, case: &CaseId, id: &str) -> Result<bool, StorageError> {
        self.delete_of_case(&DELETE_WEBHOOK, case, id).await
    }

    async fn insert_channel(&self, channel: &ChannelConfig) -> Result<(), StorageError> {
        let fields = ChannelFields::<Lite>::of(channel);
        let insert = bind_channel!(sqlx::query(&INSERT_CHANNEL), fields);
        self.write_of_case(&channel.case_id, insert).await
    }

    async fn channels(&self, case: &CaseId) -> Result<Vec<ChannelConfig>, StorageError> {
        let query = sqlx::query_as(&CHANNELS).bind(case.as_str());
        fetch::all(query, &self.pool, ChannelRow::<Lite>::into_channel).await
    }

    async fn update_channel(&self, channel: &ChannelConfig) -> Result<bool, StorageError> {
        let mut w = self.writer.begin().await?;
        let fields = ChannelFields::<Lite>::of(channel);
        let updated = bind_channel!(sqlx::query(&UPDATE_CHANNEL), fields)
            .execute(&mut *w.tx)
            .await
            .map_err(backend)?;
        w.commit().await?;
        Ok(updated.rows_affected() > 0)
    }

    async fn set_badge_key(&self, case: &CaseId, key: &str) -> Result<(), StorageError> {
        let set = sqlx::query(&SET_BADGE_KEY).bind(case.as_str()).bind(key);
        self.write_of_case(case, set).await
    }

    async fn badge_key_or_insert(&self, case: &CaseId, key: &str) -> Result<String, StorageError> {
        // Writes take turns on the writer: a first use that lost the race inserts
        // nothing, and both read the key committed first.
        let insert = sqlx::query(&INSERT_FIRST_BADGE_KEY)
            .bind(case.as_str())
            .bind(key);
        self.write_of_case(case, insert).await?;
        self.badge_key(case)
            .await?
            // Keys are replaced, never removed; only a case deleted meanwhile has none.
            .ok_or_else(|| StorageError::UnknownCase(case.clone()))
    }

    async fn badge_key(&self, case: &CaseId) -> Result<Option<String>, StorageError> {
        sqlx::query_scalar(&BADGE_KEY)
            .bind(case.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)
    }

    async fn case_of_badge_key(&self, key: &str) -> Result<Option<CaseId>, StorageError> {
        let case: Option<String> = sqlx::query_scalar(&CASE_OF_BADGE_KEY)
            .bind(key)
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)?;
        case.map(|raw| {
            CaseId::parse(&raw).map_err(|v| {
                corrupt(
                    "badge key's case id",
                    format!("{} {}", v.attribute, v.message),
                )
            })
        })
        .transpose()
    }

    async fn delete_channel(&self, case: &CaseId, id: &str) -> Result<bool, StorageError> {
        self.delete_of_case(&DELETE_CHANNEL, case, id).await
    }

    async fn claim_deliveries(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limits: &ClaimLimits,
    ) -> Result<Vec<Delivery>, StorageError> {
        claims::claim_deliveries(&self.writer, now, lease_until, limits, self.claim_window).await
    }

    async fn record_attempt(
        &self,
        delivery_id: &str,
        attempt: &Attempt,
        result: AttemptResult,
    ) -> Result<(), StorageError> {
        self.attempts.record(delivery_id, attempt, result).await
    }

    async fn next_delivery_at(&self) -> Result<Option<Timestamp>, StorageError> {
        let next: Option<i64> = sqlx::query_scalar(NEXT_DELIVERY_AT)
            .fetch_one(&self.pool)
            .await
            .map_err(backend)?;
        opt_instant::<Lite>("next_attempt_at", next)
    }

    async fn heartbeat(
        &self,
        server: &str,
        now: Timestamp,
        threshold: chrono::Duration,
    ) -> Result<Option<Outage>, StorageError> {
        // The write transaction serializes heartbeats of every server on the file, so of
        // servers racing after one outage exactly one finds it.
        let mut w = self.writer.begin().await?;
        let last_alive: Option<i64> = sqlx::query_scalar(&LAST_ALIVE)
            .fetch_one(&mut *w.tx)
            .await
            .map_err(backend)?;
        let now_ms = Lite::time(now);
        let outage = match last_alive {
            Some(last) if now - Lite::instant("last_seen", last)? > threshold => {
                let id: i64 = sqlx::query_scalar(&INSERT_OUTAGE)
                    .bind(last)
                    .bind(now_ms)
                    .fetch_one(&mut *w.tx)
                    .await
                    .map_err(backend)?;
                Some(outage_of::<Lite>(id, last, now_ms)?)
            }
            _ => None,
        };
        sqlx::query(
            "INSERT INTO snitch_servers (id, last_seen, stopped) VALUES (?1, ?2, 0) \
             ON CONFLICT (id) DO UPDATE \
             SET last_seen = max(snitch_servers.last_seen, excluded.last_seen), stopped = 0",
        )
        .bind(server)
        .bind(now_ms)
        .execute(&mut *w.tx)
        .await
        .map_err(backend)?;
        sqlx::query(&FORGET_SERVERS)
            .bind(Lite::time(now - SERVERS_KEPT_FOR))
            .execute(&mut *w.tx)
            .await
            .map_err(backend)?;
        w.commit().await?;
        Ok(outage)
    }

    async fn record_stop(&self, server: &str, at: Timestamp) -> Result<(), StorageError> {
        let mut w = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO snitch_servers (id, last_seen, stopped) VALUES (?1, ?2, 1) \
             ON CONFLICT (id) DO UPDATE \
             SET last_seen = max(snitch_servers.last_seen, excluded.last_seen), stopped = 1",
        )
        .bind(server)
        .bind(Lite::time(at))
        .execute(&mut *w.tx)
        .await
        .map_err(backend)?;
        w.commit().await
    }

    async fn outages(&self, since: Timestamp) -> Result<Vec<Outage>, StorageError> {
        let rows: Vec<(i64, i64, i64)> = sqlx::query_as(&OUTAGES)
            .bind(Lite::time(since))
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        rows.into_iter()
            .map(|(id, started_at, ended_at)| outage_of::<Lite>(id, started_at, ended_at))
            .collect()
    }

    async fn case_outages(
        &self,
        case: &CaseId,
        limit_to: usize,
    ) -> Result<Vec<CaseOutage>, StorageError> {
        let rows: Vec<(i64, i64, i64, i64)> = sqlx::query_as(&CASE_OUTAGES)
            .bind(case.as_str())
            .bind(limit(limit_to))
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        rows.into_iter()
            .map(|(id, started_at, ended_at, deferred)| {
                Ok(CaseOutage {
                    outage: outage_of::<Lite>(id, started_at, ended_at)?,
                    snitches_deferred: count(deferred),
                })
            })
            .collect()
    }

    async fn deliveries(&self, event_ids: &[String]) -> Result<Vec<Delivery>, StorageError> {
        let query = sqlx::query_as(&DELIVERIES_OF_EVENTS).bind(Json(event_ids));
        fetch::all(query, &self.pool, DeliveryRow::<Lite>::into_delivery).await
    }

    async fn snitch_with_case(
        &self,
        token: &Token,
    ) -> Result<Option<(Snitch, Option<Case>)>, StorageError> {
        // From the cache when it holds both (see `check_in_cache` for why a stale entry
        // is harmless). Otherwise two indexed reads on a local file: a join would save
        // little.
        self.cache
            .read_through(
                token.as_str(),
                snitch_core::storage::fallback::snitch_with_case(self, token),
            )
            .await
    }

    async fn step_in_place(
        &self,
        _token: &Token,
        _pending: &mut snitch_core::PendingCheckIns,
    ) -> Option<Result<Option<Change>, StorageError>> {
        // A database store reads, steps and saves with a version check instead.
        None
    }
}

/// Checks the pragma durability depends on, which a pool the host made may lack:
/// `synchronous = FULL`, so that a commit is on disk when it returns. (Foreign keys are
/// not checked: the store deletes what a cascade would and checks what a reference would,
/// so it is right with them on or off.)
async fn check_pragmas(pool: &SqlitePool) -> Result<(), StorageError> {
    let mut conn = pool.acquire().await.map_err(backend)?;
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(&mut *conn)
        .await
        .map_err(backend)?;
    if synchronous != SYNCHRONOUS_FULL {
        return Err(StorageError::Backend(
            format!(
                "the pool's connections run with PRAGMA synchronous = {synchronous}, not FULL (2): \
                 a commit may be lost on power loss; open it with \
                 snitch_store_sqlite::connect_options or .synchronous(SqliteSynchronous::Full)"
            )
            .into(),
        ));
    }
    Ok(())
}

/// What `PRAGMA synchronous` answers for FULL.
const SYNCHRONOUS_FULL: i64 = 2;

static UPSERT_CASE: LazyLock<String> = LazyLock::new(|| lite(sql::UPSERT_CASE));
static SELECT_CASE: LazyLock<String> = LazyLock::new(sql::select_case::<Lite>);
static SELECT_CASES: LazyLock<String> = LazyLock::new(sql::select_cases::<Lite>);
static INSERT_API_KEY: LazyLock<String> = LazyLock::new(sql::insert_api_key::<Lite>);
static API_KEYS: LazyLock<String> = LazyLock::new(sql::api_keys::<Lite>);
static REVOKE_API_KEY: LazyLock<String> = LazyLock::new(|| lite(sql::REVOKE_API_KEY));
static SELECT_SNITCH: LazyLock<String> =
    LazyLock::new(|| format!("{} WHERE token = ?1", *SELECT_SNITCHES));
static SNITCHES_OF_CASE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} WHERE case_id = ?1 ORDER BY created_at, seq",
        *SELECT_SNITCHES
    )
});
static DELETE_FINISHED_DELIVERIES_OF: LazyLock<String> =
    LazyLock::new(|| lite(sql::DELETE_FINISHED_DELIVERIES_OF));
static DUE: LazyLock<String> = LazyLock::new(sql::due::<Lite>);
static CLAIM_DUE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} WHERE wake_at IS NOT NULL AND wake_at <= ?1 \
         AND (sweep_lease_until IS NULL OR sweep_lease_until <= ?1) \
         ORDER BY wake_at, token LIMIT ?2",
        *SELECT_SNITCHES
    )
});
/// Snitches by status, as the triggers of the status_counts migration keep them.
const SNITCHES_BY_STATUS: &str = "SELECT status, n FROM snitch_status_counts WHERE n <> 0";
static PENDING_DELIVERIES: LazyLock<String> = LazyLock::new(|| lite(sql::PENDING_DELIVERIES));
static NEXT_WAKE_AT: LazyLock<String> = LazyLock::new(|| lite(sql::NEXT_WAKE_AT));
/// When the next pending delivery is due: the earliest of each budget's (HTTP, e-mail),
/// each the first entry of its part of `snitch_deliveries_due_by_class` (a `min` over
/// every pending delivery reads them all).
const NEXT_DELIVERY_AT: &str = "SELECT min(t) FROM ( \
       SELECT (SELECT next_attempt_at FROM snitch_deliveries \
               WHERE state = 'pending' AND (destination IS NULL) = 0 \
                 AND next_attempt_at IS NOT NULL \
               ORDER BY next_attempt_at LIMIT 1) AS t \
       UNION ALL \
       SELECT (SELECT next_attempt_at FROM snitch_deliveries \
               WHERE state = 'pending' AND (destination IS NULL) = 1 \
                 AND next_attempt_at IS NOT NULL \
               ORDER BY next_attempt_at LIMIT 1))";
static EVENTS: LazyLock<String> = LazyLock::new(sql::events::<Lite>);
static INSERT_WEBHOOK: LazyLock<String> = LazyLock::new(sql::insert_webhook::<Lite>);
static WEBHOOKS: LazyLock<String> = LazyLock::new(sql::webhooks::<Lite>);
static DELETE_WEBHOOK: LazyLock<String> = LazyLock::new(|| lite(sql::DELETE_WEBHOOK));
static INSERT_CHANNEL: LazyLock<String> = LazyLock::new(sql::insert_channel::<Lite>);
static CHANNELS: LazyLock<String> = LazyLock::new(sql::channels::<Lite>);
static UPDATE_CHANNEL: LazyLock<String> = LazyLock::new(sql::update_channel::<Lite>);
static DELETE_CHANNEL: LazyLock<String> = LazyLock::new(|| lite(sql::DELETE_CHANNEL));
static SET_BADGE_KEY: LazyLock<String> = LazyLock::new(|| lite(sql::SET_BADGE_KEY));
static INSERT_FIRST_BADGE_KEY: LazyLock<String> =
    LazyLock::new(|| lite(sql::INSERT_FIRST_BADGE_KEY));
static BADGE_KEY: LazyLock<String> = LazyLock::new(|| lite(sql::BADGE_KEY));
static CASE_OF_BADGE_KEY: LazyLock<String> = LazyLock::new(|| lite(sql::CASE_OF_BADGE_KEY));
static DELETE_ORPHAN_DELIVERY: LazyLock<String> =
    LazyLock::new(|| lite(sql::DELETE_ORPHAN_DELIVERY));
static LAST_ALIVE: LazyLock<String> = LazyLock::new(|| lite(sql::LAST_ALIVE));
static INSERT_OUTAGE: LazyLock<String> = LazyLock::new(|| lite(sql::INSERT_OUTAGE));
static FORGET_SERVERS: LazyLock<String> = LazyLock::new(|| lite(sql::FORGET_SERVERS));
static OUTAGES: LazyLock<String> = LazyLock::new(|| lite(sql::OUTAGES));
static CASE_OUTAGES: LazyLock<String> = LazyLock::new(|| lite(sql::CASE_OUTAGES));
static DELIVERIES_OF_EVENTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {DELIVERY_COLUMNS} FROM snitch_deliveries \
         WHERE event_id IN (SELECT value FROM json_each(?1)) ORDER BY seq"
    )
});
