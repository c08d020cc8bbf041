//! PostgreSQL storage for Snitch: a [`Storage`] that several servers can share.
//!
//! [`PgStorage`] takes the host's [`PgPool`]; its tables live in their own schema,
//! `snitch`, created by the embedded migrations in [`MIGRATOR`], which the host runs:
//!
//! ```no_run
//! # async fn start(pool: sqlx::PgPool) -> Result<(), sqlx::migrate::MigrateError> {
//! snitch_store_postgres::MIGRATOR.run(&pool).await?;
//! let store = snitch_store_postgres::PgStorage::new(pool);
//! # Ok(()) }
//! ```
//!
//! How the contract of [`Storage`] maps onto Postgres:
//! - Optimistic concurrency: a save's `UPDATE … WHERE version = expected` either applies
//!   (and then the check-in, events and deliveries are inserted with it) or touches no row,
//!   which is a conflict or a missing snitch.
//! - Group commit: concurrent saves share one transaction and are answered once it
//!   committed (see [`PgStorageOptions`]). A save is durable when it returns `Ok`, yet a
//!   burst of check-ins costs a few commits, not one each. A batch is applied set-based:
//!   one statement for all its snitches (typed arrays; the events, deliveries and
//!   deferrals changes emit as JSON rows), not several per change. Changes to one
//!   snitch in one transaction apply as if one after another.
//! - Concurrent reads of snitches share one query (the case joined). A check-in's read
//!   comes from the store's check-in cache when it holds the snitch: a stale copy only
//!   makes its save a conflict, which the service retries from a fresh read (see
//!   [`PgStorageOptions::cache_capacity`]).
//! - The plan limit: each case counts its snitches; an insert raises the count only while
//!   under the limit and inserts in the same statement, so concurrent inserts into one
//!   case take turns on its row.
//! - The deadline sweep reads a partial index on `wake_at`, which every write keeps equal
//!   to [`Snitch::wake_at`]; sweepers claim due snitches and dispatchers claim deliveries
//!   with `FOR UPDATE SKIP LOCKED` under a lease, so several servers share the work, and a
//!   save ends a snitch's sweep lease.
//! - History is bounded: each snitch keeps its newest `Change::keep_check_ins` check-ins and
//!   [`EVENTS_KEPT`] events; finished deliveries go with their event, pending ones stay
//!   until they finish. Check-ins are trimmed lazily (once a snitch holds twice what is
//!   kept, after the commit); reads never show more than is kept.

#![warn(missing_docs)]

mod bulk_insert;
mod claims;
mod group_commit;
mod read_batch;
mod records;
mod set_based;
#[cfg(feature = "test-support")]
pub mod test_databases;

use std::convert::identity;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use snitch_core::{ApiKeyRecord, CaseOutage, Outage};
use snitch_core::{
    Attempt, AttemptResult, Case, CaseId, Change, ChannelConfig, CheckIn, ClaimLimits, Delivery,
    Event, Snitch, Storage, StorageError, StoreStats, Tag, Timestamp, Token, Webhook,
};
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::types::Json;
use sqlx::{Postgres, QueryBuilder};

use group_commit::GroupCommit;
pub use group_commit::PgStorageOptions;
pub use set_based::TRIMS_PER_BATCH;

use records::{
    ApiKeyRow, AttemptRecord, CaseRow, ChannelFields, ChannelRow, CheckInRecord, DeliveryFields,
    DeliveryRow, EventRecord, ListedSnitchRow, Pg, SnitchFields, SnitchRow, WebhookRow,
    DELIVERY_COLUMNS, DELIVERY_FIELDS, SNITCH_COLUMNS, SNITCH_FIELDS,
};
use snitch_store_sql::batcher::{AttemptWrite, Batcher};
use snitch_store_sql::check_in_cache::CheckInCache;
use snitch_store_sql::queue::failed_batch;
pub(crate) use snitch_store_sql::{backend, limit};
use snitch_store_sql::{
    bind_channel, bind_delivery, bind_event, bind_snitch_fields, corrupt, count, fetch,
    migrations_applied, outage_of, sql, Dialect, SERVERS_KEPT_FOR,
};

/// How many events are kept per snitch (the core's limit, re-exported).
pub use snitch_core::snitch::EVENTS_KEPT;

/// The migrations that create and evolve the `snitch` schema; hosts run them before use.
///
/// sqlx records applied migrations in the `_sqlx_migrations` table of the connection's
/// search path, which a host using sqlx migrations of its own shares: this migrator
/// ignores versions it does not know, and the host's own needs
/// [`Migrator::set_ignore_missing`] for the same reason.
pub static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.set_ignore_missing(true);
    migrator
});

/// A [`Storage`] in a PostgreSQL database, in the schema `snitch`.
///
/// Clones share the pool, the group commit of saves, the check-in cache and the count of
/// the outbox. Saves need a Tokio runtime: the first one spawns the task that groups them
/// (so the store itself can be made anywhere), and it ends when the last clone is
/// dropped. A save whose caller stops waiting is not withdrawn: it may still commit.
#[derive(Debug, Clone)]
pub struct PgStorage {
    pool: PgPool,
    saves: Arc<GroupCommit>,
    reads: Arc<read_batch::Reads>,
    cache: Arc<CheckInCache>,
    /// Deliveries' attempts, recorded in batches (one transaction each).
    attempts: Arc<Batcher<AttemptWrite, Result<(), StorageError>>>,
    /// See [`PgStorageOptions::claim_window`].
    claim_window: usize,
    /// The last count of unfinished deliveries and when it was made (see
    /// [`PgStorageOptions::outbox_depth_for`]).
    outbox_depth: Arc<std::sync::Mutex<Option<(std::time::Instant, i64)>>>,
    outbox_depth_for: std::time::Duration,
}

/// The most attempts recorded in one transaction.
const ATTEMPTS_PER_BATCH: usize = 256;

impl PgStorage {
    /// Runs `write` (an insert or upsert of something of `case`): a violation of its
    /// `unique` constraint is [`StorageError::DuplicateToken`], of its foreign key to the
    /// cases (`case_fkey`) [`StorageError::UnknownCase`].
    async fn write_of_case<'q>(
        &self,
        case: &CaseId,
        write: sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
        unique: &str,
        case_fkey: &str,
    ) -> Result<(), StorageError> {
        match write.execute(&self.pool).await {
            Ok(_) => Ok(()),
            Err(e) if violates(&e, unique) => Err(StorageError::DuplicateToken),
            Err(e) if violates(&e, case_fkey) => Err(StorageError::UnknownCase(case.clone())),
            Err(e) => Err(backend(e)),
        }
    }

    /// Runs `statement` (a delete by case `$1` and id `$2`): whether it removed a row.
    async fn delete_of_case(
        &self,
        statement: &str,
        case: &CaseId,
        id: &str,
    ) -> Result<bool, StorageError> {
        let deleted = sqlx::query(statement)
            .bind(case.as_str())
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(deleted.rows_affected() > 0)
    }

    /// A store on the host's pool, grouping saves by [`PgStorageOptions::default`];
    /// [`MIGRATOR`] must have run on its database.
    pub fn new(pool: PgPool) -> Self {
        Self::with_options(pool, PgStorageOptions::default())
    }

    /// A store on the host's pool, grouping saves as `options` say; [`MIGRATOR`] must
    /// have run on its database.
    pub fn with_options(pool: PgPool, options: PgStorageOptions) -> Self {
        let recorder = pool.clone();
        let attempts = Batcher::new(
            ATTEMPTS_PER_BATCH,
            Arc::new(move |batch: Vec<AttemptWrite>| {
                let pool = recorder.clone();
                Box::pin(async move { record_attempts(&pool, &batch).await })
                    as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
            }),
        );
        PgStorage {
            saves: Arc::new(GroupCommit::new(pool.clone(), options)),
            reads: Arc::new(read_batch::Reads::new(pool.clone())),
            cache: Arc::new(CheckInCache::new(options.cache_capacity, options.case_ttl)),
            attempts: Arc::new(attempts),
            claim_window: options.claim_window,
            outbox_depth: Arc::default(),
            outbox_depth_for: options.outbox_depth_for,
            pool,
        }
    }

    /// How many deliveries are unfinished: counted, or the count made within
    /// [`PgStorageOptions::outbox_depth_for`].
    async fn outbox_depth(&self) -> Result<i64, StorageError> {
        let lock = || {
            self.outbox_depth
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let now = snitch_core::clock::monotonic_now();
        let held = *lock();
        if let Some((counted_at, n)) = held {
            if now.duration_since(counted_at) < self.outbox_depth_for {
                return Ok(n);
            }
        }
        let n: i64 = sqlx::query_scalar(sql::PENDING_DELIVERIES)
            .fetch_one(&self.pool)
            .await
            .map_err(backend)?;
        *lock() = Some((now, n));
        Ok(n)
    }

    /// The pool the store runs on.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// How many check-in reads the store's check-in cache answered (see
    /// [`PgStorageOptions::cache_capacity`]).
    pub fn check_in_cache_hits(&self) -> u64 {
        self.cache.hits()
    }

    /// How many transactions of grouped saves committed so far (with at least one change
    /// each, applied or refused): compared with the number of saves, how well they were
    /// grouped.
    pub fn batches_committed(&self) -> u64 {
        self.saves.batches_committed()
    }
}

/// Whether `e` is a violation of the named constraint.
fn violates(e: &sqlx::Error, constraint: &str) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.constraint() == Some(constraint))
}

/// `INSERT` of a whole snitch: token, case and creation, then [`SNITCH_FIELDS`], then the
/// case's limit; inserts nothing (and counts nothing) when the case is unknown or holds
/// its limit already.
static INSERT_SNITCH: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH slot AS ( \
           UPDATE snitch.cases SET snitches_held = snitches_held + 1 \
           WHERE id = $2 AND snitches_held < ${limit} RETURNING id) \
         INSERT INTO snitch.snitches (token, case_id, created_at, {}) \
         SELECT $1, slot.id, $3, {} FROM slot",
        SNITCH_FIELDS.join(", "),
        Pg::parameters(4, SNITCH_FIELDS.len()),
        limit = SNITCH_FIELDS.len() + 4,
    )
});

/// Claims due snitches for a sweep (`$1` now, `$2` the lease's end, `$3` how many): the
/// earliest due whose lease is void (ended, or taken on a version since saved), each
/// leased in `snitch.sweep_leases` with its version. A claim writes only that narrow row,
/// not the snitch's (migration `sweep_leases_apart`).
///
/// Two servers claiming at once may pick the same snitches: the later insert waits for
/// the earlier and then finds a lease it may not take, so each snitch goes to one of them
/// (the later may come back with fewer, or none, and its sweep ends; its next one picks
/// up what is left). Locking the candidates (`FOR UPDATE SKIP LOCKED`) would keep two
/// claims apart, but wrote a lock into each row: row 3d took 1.09–1.25 s with it,
/// 1.01–1.19 s without. A snitch read while a check-in saves it is swept from that read,
/// and its save is refused over the new version and done again from a fresh read.
static CLAIM_DUE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH candidates AS ( \
           SELECT {SNITCH_COLUMNS} FROM snitch.snitches s \
           WHERE s.wake_at <= $1 AND NOT EXISTS ( \
             SELECT 1 FROM snitch.sweep_leases l \
             WHERE l.token = s.token AND l.version = s.version AND l.until > $1) \
           ORDER BY s.wake_at, s.token LIMIT $3), \
         leased AS ( \
           INSERT INTO snitch.sweep_leases AS l (token, version, until) \
           SELECT token, version, $2 FROM candidates \
           ON CONFLICT (token) DO UPDATE SET version = EXCLUDED.version, until = EXCLUDED.until \
           WHERE l.version <> EXCLUDED.version OR l.until <= $1 \
           RETURNING l.token) \
         SELECT {SNITCH_COLUMNS} FROM candidates WHERE token IN (SELECT token FROM leased)"
    )
});
static UPDATE_SNITCH: LazyLock<String> = LazyLock::new(sql::update_snitch::<Pg>);
static INSERT_EVENTS: LazyLock<String> =
    LazyLock::new(|| format!("INSERT INTO snitch.events ({}) ", records::EVENT_COLUMNS));
static INSERT_DELIVERIES: LazyLock<String> =
    LazyLock::new(|| format!("INSERT INTO snitch.deliveries ({DELIVERY_FIELDS}) "));

/// Deliveries are inserted this many per statement, well below the 65,535 parameters of
/// one statement.
const DELIVERIES_PER_INSERT: usize = 1_000;

/// Inserts the events of a change, in the order emitted: one multi-row `INSERT` draws
/// their `seq` in the order of its rows. Only the newest [`EVENTS_KEPT`] can be kept, so
/// older ones of a long change are not written at all.
async fn insert_events(conn: &mut PgConnection, events: &[Event]) -> Result<(), StorageError> {
    let newest = &events[events.len().saturating_sub(EVENTS_KEPT)..];
    if newest.is_empty() {
        return Ok(());
    }
    let mut q = QueryBuilder::<Postgres>::new(INSERT_EVENTS.as_str());
    q.push_values(newest.iter().map(EventRecord::of), |mut row, e| {
        bind_event!(row, e, push_bind);
    });
    q.build().execute(&mut *conn).await.map_err(backend)?;
    Ok(())
}

/// Stores deliveries. A delivery id is taken again only when a deleted snitch's token is
/// reused; the new delivery then replaces the old one, as the in-memory store does.
async fn insert_deliveries(
    conn: &mut PgConnection,
    deliveries: &[Delivery],
) -> Result<(), StorageError> {
    for chunk in deliveries.chunks(DELIVERIES_PER_INSERT) {
        let mut q = QueryBuilder::<Postgres>::new(INSERT_DELIVERIES.as_str());
        q.push_values(chunk.iter().map(DeliveryFields::of), |mut row, d| {
            bind_delivery!(row, d, push_bind);
        });
        q.push(
            " ON CONFLICT (id) DO UPDATE SET seq = EXCLUDED.seq, event_id = EXCLUDED.event_id, \
             event = EXCLUDED.event, case_id = EXCLUDED.case_id, \
             destination = EXCLUDED.destination, channel = EXCLUDED.channel, hook_id = EXCLUDED.hook_id, \
             url = EXCLUDED.url, secret = EXCLUDED.secret, recipients = EXCLUDED.recipients, \
             state = EXCLUDED.state, next_attempt_at = EXCLUDED.next_attempt_at, \
             attempts = EXCLUDED.attempts, settings = EXCLUDED.settings",
        );
        q.build().execute(&mut *conn).await.map_err(backend)?;
    }
    Ok(())
}

/// Appends check-ins in order, one statement, then trims the history to the newest
/// `keep`. Older ones of a long change would be trimmed at once, so they are
/// not written at all.
async fn insert_check_ins(
    conn: &mut PgConnection,
    token: &str,
    check_ins: &[CheckIn],
    keep: usize,
) -> Result<(), StorageError> {
    let keep = keep.max(1);
    let newest = &check_ins[check_ins.len().saturating_sub(keep)..];
    let mut q = QueryBuilder::<Postgres>::new(
        "INSERT INTO snitch.check_ins (token, at, exit_status, message, number, details, body) ",
    );
    q.push_values(newest.iter().map(CheckInRecord::of), |mut row, c| {
        row.push_bind(token)
            .push_bind(c.at)
            .push_bind(c.exit_status)
            .push_bind(c.message)
            .push_bind(c.number)
            .push_bind(c.details)
            .push_bind(c.body);
    });
    q.build().execute(&mut *conn).await.map_err(backend)?;
    let kept = set_based::set_keep(conn, token, keep, newest.len()).await?;
    sqlx::query(
        "DELETE FROM snitch.check_ins WHERE token = $1 AND seq <= \
         (SELECT seq FROM snitch.check_ins WHERE token = $1 \
          ORDER BY seq DESC OFFSET $2 LIMIT 1)",
    )
    .bind(token)
    .bind(kept)
    .execute(&mut *conn)
    .await
    .map_err(backend)?;
    set_based::recount_check_ins(conn, token).await
}

/// Applies one change in the caller's transaction: the new state, then its check-in,
/// events and deliveries. Nothing is written when the version is stale
/// ([`StorageError::Conflict`]) or the snitch is gone ([`StorageError::NotFound`]); after
/// any other error part of it may be, so the caller rolls back to a savepoint set before.
async fn save_change(conn: &mut PgConnection, change: &Change) -> Result<(), StorageError> {
    let snitch = change.snitch();
    let token = snitch.token().as_str();
    let expected = records::to_bigint("version", change.expected_version())?;

    // A concurrent save of the same snitch (in another transaction) waits for this row's
    // lock, then finds the version moved on and updates nothing.
    let fields = SnitchFields::of(snitch)?;
    let update = sqlx::query(&UPDATE_SNITCH).bind(token).bind(expected);
    let updated = bind_snitch_fields!(update, fields, bind, identity)
        .execute(&mut *conn)
        .await
        .map_err(backend)?;
    if updated.rows_affected() == 0 {
        let exists: bool = sqlx::query_scalar(sql::SNITCH_EXISTS)
            .bind(token)
            .fetch_one(&mut *conn)
            .await
            .map_err(backend)?;
        return Err(if exists {
            StorageError::Conflict
        } else {
            StorageError::NotFound
        });
    }

    if !change.check_ins().is_empty() {
        insert_check_ins(conn, token, change.check_ins(), change.keep_check_ins()).await?;
    }

    if !change.events().is_empty() {
        insert_events(conn, change.events()).await?;
        // Events that fall out of the history take their finished deliveries along.
        sqlx::query(
            "WITH evicted AS ( \
               DELETE FROM snitch.events WHERE token = $1 AND seq <= \
               (SELECT seq FROM snitch.events WHERE token = $1 \
                ORDER BY seq DESC OFFSET $2 LIMIT 1) \
               RETURNING id) \
             DELETE FROM snitch.deliveries \
             WHERE state <> 'pending' AND event_id IN (SELECT id FROM evicted)",
        )
        .bind(token)
        .bind(limit(EVENTS_KEPT))
        .execute(&mut *conn)
        .await
        .map_err(backend)?;
    }

    for outage in change.deferred_by() {
        sqlx::query(sql::DEFER)
            .bind(records::to_bigint("outage id", *outage)?)
            .bind(snitch.case_id().as_str())
            .execute(&mut *conn)
            .await
            .map_err(backend)?;
    }

    insert_deliveries(conn, change.deliveries()).await
}

/// Serializes heartbeats across servers, so that of servers racing after one outage
/// exactly one finds it ("snitch" in ASCII).
const LIVENESS_LOCK: i64 = 0x736e_6974_6368;

/// Records a batch of attempts in one transaction: each its own answer
/// ([`StorageError::NotFound`] for a delivery no longer stored), or every one the error
/// that failed the transaction.
async fn record_attempts(pool: &PgPool, batch: &[AttemptWrite]) -> Vec<Result<(), StorageError>> {
    match record_attempts_in_one(pool, batch).await {
        Ok(answers) => answers,
        Err(e) => failed_batch(e, false, batch.len()),
    }
}

async fn record_attempts_in_one(
    pool: &PgPool,
    batch: &[AttemptWrite],
) -> Result<Vec<Result<(), StorageError>>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let mut answers = Vec::with_capacity(batch.len());
    for write in batch {
        let (state, next_attempt_at) = snitch_store_sql::records::after_attempt::<Pg>(write.result);
        let updated = sqlx::query(
            "UPDATE snitch.deliveries SET attempts = attempts || jsonb_build_array($2::jsonb), \
             state = $3, next_attempt_at = $4 WHERE id = $1",
        )
        .bind(&write.delivery_id)
        .bind(Json(AttemptRecord::of(&write.attempt)))
        .bind(state.as_str())
        .bind(next_attempt_at)
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() == 0 {
            answers.push(Err(StorageError::NotFound));
            continue;
        }
        // A finished delivery of an event no longer in its snitch's history has no one
        // left to read it.
        sqlx::query(sql::DELETE_ORPHAN_DELIVERY)
            .bind(&write.delivery_id)
            .execute(&mut *tx)
            .await?;
        answers.push(Ok(()));
    }
    tx.commit().await?;
    Ok(answers)
}

#[async_trait]
impl Storage for PgStorage {
    async fn upsert_case(&self, case: &Case) -> Result<(), StorageError> {
        let result = sqlx::query(sql::UPSERT_CASE)
            .bind(case.id.as_str())
            .bind(snitch_store_sql::records::members::<Pg>(case))
            .bind(i64::from(case.plan.max_snitches))
            .bind(case.plan.error_notices)
            .bind(case.on_hold)
            .execute(&self.pool)
            .await
            .map_err(backend);
        // Whether or not it committed, the held copy may be out of date.
        self.cache
            .forget_case(case.id.as_str(), snitch_core::clock::monotonic_now());
        result?;
        Ok(())
    }

    async fn case(&self, id: &CaseId) -> Result<Option<Case>, StorageError> {
        let query = sqlx::query_as(&SELECT_CASE).bind(id.as_str());
        fetch::optional(query, &self.pool, CaseRow::into_case).await
    }

    async fn cases(&self) -> Result<Vec<Case>, StorageError> {
        fetch::all(
            sqlx::query_as(&SELECT_CASES),
            &self.pool,
            CaseRow::into_case,
        )
        .await
    }

    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<(), StorageError> {
        let inserted = sqlx::query(&INSERT_API_KEY)
            .bind(&key.id)
            .bind(key.case_id.as_str())
            .bind(&key.digest)
            .bind(&key.prefix)
            .bind(&key.label)
            .bind(key.created_at)
            .bind(key.last_used_at)
            .bind(key.revoked)
            .execute(&self.pool)
            .await;
        match inserted {
            Ok(_) => Ok(()),
            Err(e) if violates(&e, "api_keys_pkey") || violates(&e, "api_keys_digest_key") => {
                Err(StorageError::DuplicateToken)
            }
            Err(e) if violates(&e, "api_keys_case_id_fkey") => {
                Err(StorageError::UnknownCase(key.case_id.clone()))
            }
            Err(e) => Err(backend(e)),
        }
    }

    async fn api_keys(&self, case: Option<CaseId>) -> Result<Vec<ApiKeyRecord>, StorageError> {
        let query = sqlx::query_as(&API_KEYS).bind(case.as_ref().map(CaseId::as_str));
        fetch::all(query, &self.pool, ApiKeyRow::into_record).await
    }

    async fn revoke_api_key(&self, id: &str) -> Result<bool, StorageError> {
        let revoked = sqlx::query(sql::REVOKE_API_KEY)
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(revoked.rows_affected() > 0)
    }

    async fn record_api_key_use(&self, uses: &[(String, Timestamp)]) -> Result<(), StorageError> {
        if uses.is_empty() {
            return Ok(());
        }
        let (ids, times): (Vec<&str>, Vec<Timestamp>) =
            uses.iter().map(|(id, at)| (id.as_str(), *at)).unzip();
        sqlx::query(
            "UPDATE snitch.api_keys k \
             SET last_used_at = GREATEST(k.last_used_at, u.at) \
             FROM (SELECT id, max(at) AS at FROM unnest($1::text[], $2::timestamptz[]) \
                   AS u(id, at) GROUP BY id) u \
             WHERE k.id = u.id",
        )
        .bind(ids)
        .bind(times)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn insert_snitch(&self, snitch: &Snitch, max_snitches: u32) -> Result<(), StorageError> {
        // One statement: the case's count of snitches is raised only while under the
        // limit (concurrent inserts into one case take turns on its row, and each
        // re-checks the count it waited for), and the snitch is inserted only if it was.
        // A taken token fails the statement, count included.
        let fields = SnitchFields::of(snitch)?;
        let insert = sqlx::query(&INSERT_SNITCH)
            .bind(snitch.token().as_str())
            .bind(snitch.case_id().as_str())
            .bind(snitch.created_at());
        let inserted = bind_snitch_fields!(insert, fields, bind, identity)
            .bind(i64::from(max_snitches))
            .execute(&self.pool)
            .await;
        match inserted {
            Ok(done) if done.rows_affected() > 0 => Ok(()),
            Ok(_) => {
                let known: bool = sqlx::query_scalar(sql::CASE_EXISTS)
                    .bind(snitch.case_id().as_str())
                    .fetch_one(&self.pool)
                    .await
                    .map_err(backend)?;
                Err(if known {
                    StorageError::LimitReached { max: max_snitches }
                } else {
                    StorageError::UnknownCase(snitch.case_id().clone())
                })
            }
            Err(e) if violates(&e, "snitches_pkey") => Err(StorageError::DuplicateToken),
            Err(e) => Err(backend(e)),
        }
    }

    /// A few statements for the lot, in one transaction (`bulk_insert.rs`).
    async fn insert_snitches(
        &self,
        snitches: &[Snitch],
        max_snitches: u32,
    ) -> Result<(), StorageError> {
        bulk_insert::insert_snitches(&self.pool, snitches, max_snitches).await
    }

    async fn snitch(&self, token: &Token) -> Result<Option<Snitch>, StorageError> {
        Ok(self
            .reads
            .snitch_with_case(token.as_str())
            .await?
            .map(|(snitch, _)| snitch))
    }

    async fn snitch_with_case(
        &self,
        token: &Token,
    ) -> Result<Option<(Snitch, Option<Case>)>, StorageError> {
        // From the cache when it holds both (see `check_in_cache` for why a stale entry
        // is harmless).
        self.cache
            .read_through(token.as_str(), self.reads.snitch_with_case(token.as_str()))
            .await
    }

    /// Read 2,000 snitches at a time, all in one snapshot, by the case's index in order
    /// (`LIST_PAGE`, `LIST_TRANSACTION`).
    async fn snitches(&self, case: &CaseId, tags: &[Tag]) -> Result<Vec<Snitch>, StorageError> {
        let tags: Vec<&str> = tags.iter().map(Tag::as_str).collect();
        let mut tx = self
            .pool
            .begin_with(LIST_TRANSACTION)
            .await
            .map_err(backend)?;
        let mut snitches = Vec::new();
        let mut after = None;
        loop {
            let query = match after {
                None => sqlx::query_as(&SNITCHES_OF_CASE),
                Some((created_at, seq)) => sqlx::query_as(&SNITCHES_OF_CASE_AFTER)
                    .bind(created_at)
                    .bind(seq),
            };
            let rows: Vec<ListedSnitchRow> = query
                .bind(case.as_str())
                .bind(&tags)
                .fetch_all(&mut *tx)
                .await
                .map_err(backend)?;
            let full = rows.len() == LIST_PAGE;
            after = rows.last().map(|row| (row.snitch.created_at, row.seq));
            for row in rows {
                snitches.push(row.snitch.into_snitch()?);
            }
            if !full {
                break;
            }
        }
        tx.commit().await.map_err(backend)?;
        Ok(snitches)
    }

    async fn save(&self, change: &Change) -> Result<(), StorageError> {
        let result = self.saves.save(change).await;
        self.cache.after_save(change, &result);
        result
    }

    /// Queued to the group commit all at once (in order), so they apply in batches of
    /// up to [`PgStorageOptions::max_batch`], each one statement.
    async fn save_all(&self, changes: &[Change]) -> Vec<Result<(), StorageError>> {
        futures::future::join_all(changes.iter().map(|change| async move {
            let result = self.saves.save(change).await;
            self.cache.after_save(change, &result);
            result
        }))
        .await
    }

    async fn delete_snitch(&self, token: &Token) -> Result<bool, StorageError> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        // The snitch's row first, as a save takes it: a save in flight finishes before
        // its events are looked at, and the two never wait for each other's locks.
        let found = sqlx::query("SELECT 1 FROM snitch.snitches WHERE token = $1 FOR UPDATE")
            .bind(token.as_str())
            .fetch_optional(&mut *tx)
            .await
            .map_err(backend)?;
        if found.is_none() {
            self.cache.forget(token.as_str());
            return Ok(false);
        }
        sqlx::query(sql::DELETE_FINISHED_DELIVERIES_OF)
            .bind(token.as_str())
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        // Its check-ins and events (no foreign keys: see the migrations that dropped
        // them) go first; its case holds one snitch less.
        sqlx::query(
            "WITH check_ins AS (DELETE FROM snitch.check_ins WHERE token = $1) \
             DELETE FROM snitch.events WHERE token = $1",
        )
        .bind(token.as_str())
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        sqlx::query(
            "WITH gone AS (DELETE FROM snitch.snitches WHERE token = $1 RETURNING case_id), \
               lease AS (DELETE FROM snitch.sweep_leases WHERE token = $1) \
             UPDATE snitch.cases SET snitches_held = snitches_held - 1 \
             WHERE id IN (SELECT case_id FROM gone)",
        )
        .bind(token.as_str())
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        let committed = tx.commit().await.map_err(backend);
        self.cache.forget(token.as_str());
        committed?;
        Ok(true)
    }

    async fn due(&self, now: Timestamp, limit_to: usize) -> Result<Vec<Snitch>, StorageError> {
        let query = sqlx::query_as(&DUE).bind(now).bind(limit(limit_to));
        fetch::all(query, &self.pool, SnitchRow::into_snitch).await
    }

    async fn claim_due(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit_to: usize,
    ) -> Result<Vec<Snitch>, StorageError> {
        let mut claimed = sqlx::query_as::<_, SnitchRow>(&CLAIM_DUE)
            .bind(now)
            .bind(lease_until)
            .bind(limit(limit_to))
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?
            .into_iter()
            .map(SnitchRow::into_snitch)
            .collect::<Result<Vec<Snitch>, StorageError>>()?;
        // The statement answers in no set order.
        claimed.sort_by(|a, b| (a.wake_at(), a.token()).cmp(&(b.wake_at(), b.token())));
        Ok(claimed)
    }

    async fn check_ready(&self) -> Result<(), StorageError> {
        let applied: Vec<i64> = sqlx::query_scalar(sql::APPLIED_MIGRATIONS)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        migrations_applied(&MIGRATOR, &applied)
    }

    async fn stats(&self) -> Result<StoreStats, StorageError> {
        // The counts are kept by triggers as rows of changes (the status_counts
        // migration); folding them first keeps the sum short.
        sqlx::query(FOLD_STATUS_COUNTS)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        let by_status: Vec<(String, i64)> = sqlx::query_as(STATUS_COUNTS)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        let pending = self.outbox_depth().await?;
        Ok(snitch_store_sql::stats(by_status, pending))
    }

    async fn next_wake_at(&self) -> Result<Option<Timestamp>, StorageError> {
        sqlx::query_scalar(sql::NEXT_WAKE_AT)
            .fetch_one(&self.pool)
            .await
            .map_err(backend)
    }

    async fn check_ins(
        &self,
        token: &Token,
        limit_to: usize,
    ) -> Result<Vec<CheckIn>, StorageError> {
        let query = sqlx::query_as(
            "SELECT at, exit_status, message, number, details, body FROM snitch.check_ins \
             WHERE token = $1 ORDER BY seq DESC \
             LIMIT least($2, (SELECT check_ins_keep FROM snitch.snitches WHERE token = $1))",
        )
        .bind(token.as_str())
        // Saves trim the history lazily: more than the newest `check_ins_keep` (the
        // length the last change asked for) may be stored, and are never shown.
        .bind(limit(limit_to));
        fetch::all(query, &self.pool, CheckInRecord::into_check_in).await
    }

    async fn events(&self, token: &Token, limit_to: usize) -> Result<Vec<Event>, StorageError> {
        let query = sqlx::query_as(&EVENTS)
            .bind(token.as_str())
            // Events are trimmed just after the commit that added them: more than the
            // newest EVENTS_KEPT may be stored for a moment, and are never shown.
            .bind(limit(limit_to.min(EVENTS_KEPT)));
        fetch::all(query, &self.pool, EventRecord::into_event).await
    }

    async fn insert_webhook(&self, hook: &Webhook) -> Result<(), StorageError> {
        let insert = sqlx::query(&INSERT_WEBHOOK)
            .bind(&hook.id)
            .bind(hook.case_id.as_str())
            .bind(hook.url.as_str())
            .bind(hook.secret.as_ref().map(|s| s.expose()))
            .bind(hook.created_at);
        self.write_of_case(
            &hook.case_id,
            insert,
            "webhooks_pkey",
            "webhooks_case_id_fkey",
        )
        .await
    }

    async fn webhooks(&self, case: &CaseId) -> Result<Vec<Webhook>, StorageError> {
        let query = sqlx::query_as(&WEBHOOKS).bind(case.as_str());
        fetch::all(query, &self.pool, WebhookRow::into_webhook).await
    }

    async fn delete_webhook(&self, case: &CaseId, id: &str) -> Result<bool, StorageError> {
        self.delete_of_case(sql::DELETE_WEBHOOK, case, id).await
    }

    async fn insert_channel(&self, channel: &ChannelConfig) -> Result<(), StorageError> {
        let fields = ChannelFields::of(channel);
        let insert = bind_channel!(sqlx::query(&INSERT_CHANNEL), fields);
        self.write_of_case(
            &channel.case_id,
            insert,
            "channels_pkey",
            "channels_case_id_fkey",
        )
        .await
    }

    async fn channels(&self, case: &CaseId) -> Result<Vec<ChannelConfig>, StorageError> {
        let query = sqlx::query_as(&CHANNELS).bind(case.as_str());
        fetch::all(query, &self.pool, ChannelRow::into_channel).await
    }

    async fn update_channel(&self, channel: &ChannelConfig) -> Result<bool, StorageError> {
        let fields = ChannelFields::of(channel);
        let updated = bind_channel!(sqlx::query(&UPDATE_CHANNEL), fields)
            .execute(&self.pool)
            .await
            .map_err(backend)?;
        Ok(updated.rows_affected() > 0)
    }

    async fn set_badge_key(&self, case: &CaseId, key: &str) -> Result<(), StorageError> {
        let set = sqlx::query(sql::SET_BADGE_KEY)
            .bind(case.as_str())
            .bind(key);
        self.write_of_case(case, set, "badge_keys_key_key", "badge_keys_case_id_fkey")
            .await
    }

    async fn badge_key_or_insert(&self, case: &CaseId, key: &str) -> Result<String, StorageError> {
        // Two statements, not one: a statement's own snapshot would not see the key of
        // a first use that committed while this insert waited on it.
        let insert = sqlx::query(sql::INSERT_FIRST_BADGE_KEY)
            .bind(case.as_str())
            .bind(key);
        self.write_of_case(
            case,
            insert,
            "badge_keys_key_key",
            "badge_keys_case_id_fkey",
        )
        .await?;
        self.badge_key(case)
            .await?
            // Keys are replaced, never removed; only a case deleted meanwhile has none.
            .ok_or_else(|| StorageError::UnknownCase(case.clone()))
    }

    async fn badge_key(&self, case: &CaseId) -> Result<Option<String>, StorageError> {
        sqlx::query_scalar(sql::BADGE_KEY)
            .bind(case.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(backend)
    }

    async fn case_of_badge_key(&self, key: &str) -> Result<Option<CaseId>, StorageError> {
        let case: Option<String> = sqlx::query_scalar(sql::CASE_OF_BADGE_KEY)
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
        self.delete_of_case(sql::DELETE_CHANNEL, case, id).await
    }

    async fn claim_deliveries(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limits: &ClaimLimits,
    ) -> Result<Vec<Delivery>, StorageError> {
        claims::claim_deliveries(&self.pool, now, lease_until, limits, self.claim_window).await
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
        sqlx::query_scalar(NEXT_DELIVERY_AT)
            .fetch_one(&self.pool)
            .await
            .map_err(backend)
    }

    async fn heartbeat(
        &self,
        server: &str,
        now: Timestamp,
        threshold: chrono::Duration,
    ) -> Result<Option<Outage>, StorageError> {
        let mut tx = self.pool.begin().await.map_err(backend)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(LIVENESS_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        let last_alive: Option<Timestamp> = sqlx::query_scalar(sql::LAST_ALIVE)
            .fetch_one(&mut *tx)
            .await
            .map_err(backend)?;
        let outage = match last_alive {
            Some(last) if now - last > threshold => {
                let id: i64 = sqlx::query_scalar(sql::INSERT_OUTAGE)
                    .bind(last)
                    .bind(now)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(backend)?;
                Some(outage_of::<Pg>(id, last, now)?)
            }
            _ => None,
        };
        sqlx::query(
            "INSERT INTO snitch.servers (id, last_seen) VALUES ($1, $2) \
             ON CONFLICT (id) DO UPDATE \
             SET last_seen = GREATEST(servers.last_seen, EXCLUDED.last_seen), stopped = false",
        )
        .bind(server)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
        sqlx::query(sql::FORGET_SERVERS)
            .bind(now - SERVERS_KEPT_FOR)
            .execute(&mut *tx)
            .await
            .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        Ok(outage)
    }

    async fn record_stop(&self, server: &str, at: Timestamp) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO snitch.servers (id, last_seen, stopped) VALUES ($1, $2, true) \
             ON CONFLICT (id) DO UPDATE \
             SET last_seen = GREATEST(servers.last_seen, EXCLUDED.last_seen), stopped = true",
        )
        .bind(server)
        .bind(at)
        .execute(&self.pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn outages(&self, since: Timestamp) -> Result<Vec<Outage>, StorageError> {
        let rows: Vec<(i64, Timestamp, Timestamp)> = sqlx::query_as(sql::OUTAGES)
            .bind(since)
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        rows.into_iter()
            .map(|(id, started_at, ended_at)| outage_of::<Pg>(id, started_at, ended_at))
            .collect()
    }

    async fn case_outages(
        &self,
        case: &CaseId,
        limit: usize,
    ) -> Result<Vec<CaseOutage>, StorageError> {
        let rows: Vec<(i64, Timestamp, Timestamp, i64)> = sqlx::query_as(sql::CASE_OUTAGES)
            .bind(case.as_str())
            .bind(self::limit(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(backend)?;
        rows.into_iter()
            .map(|(id, started_at, ended_at, deferred)| {
                Ok(CaseOutage {
                    outage: outage_of::<Pg>(id, started_at, ended_at)?,
                    snitches_deferred: count(deferred),
                })
            })
            .collect()
    }

    async fn deliveries(&self, event_ids: &[String]) -> Result<Vec<Delivery>, StorageError> {
        let query = sqlx::query_as(&DELIVERIES_OF_EVENTS).bind(event_ids);
        fetch::all(query, &self.pool, DeliveryRow::into_delivery).await
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

/// When the earliest pending delivery may be tried: the earlier of each class's (HTTP,
/// e-mail) first down `deliveries_due_by_class`. The class comes from a list, not a
/// constant: Postgres rewrites `(destination IS NULL) = false` as `destination IS NOT
/// NULL`, which that index does not serve (it read all 100,000 pending instead).
const NEXT_DELIVERY_AT: &str = "SELECT min(first.at) \
     FROM (VALUES (false), (true)) AS class(is_email), LATERAL ( \
       SELECT next_attempt_at AS at FROM snitch.deliveries \
       WHERE state = 'pending' AND (destination IS NULL) = class.is_email \
       ORDER BY next_attempt_at LIMIT 1) first";
/// Folds the rows of changes to the status counts into one row per status, once there are
/// more than a few. A fold running at the same time on another server waits for the rows
/// this one deletes and then skips them, so no change is counted twice or lost.
const FOLD_STATUS_COUNTS: &str = "WITH folded AS ( \
         DELETE FROM snitch.status_counts \
         WHERE (SELECT count(*) FROM snitch.status_counts) > 64 \
         RETURNING status, n) \
     INSERT INTO snitch.status_counts (status, n) \
     SELECT status, sum(n) FROM folded GROUP BY status";
/// Snitches by status, from the kept counts.
const STATUS_COUNTS: &str =
    "SELECT status, sum(n)::int8 FROM snitch.status_counts GROUP BY status HAVING sum(n) <> 0";
static SELECT_CASE: LazyLock<String> = LazyLock::new(sql::select_case::<Pg>);
static SELECT_CASES: LazyLock<String> = LazyLock::new(sql::select_cases::<Pg>);
static INSERT_API_KEY: LazyLock<String> = LazyLock::new(sql::insert_api_key::<Pg>);
static API_KEYS: LazyLock<String> = LazyLock::new(sql::api_keys::<Pg>);
/// Snitches per statement of a case's list: a long list is read a page at a time, so the
/// server never holds all of a large case's raw rows at once.
const LIST_PAGE: usize = 2_000;
/// The transaction of a case's list: one snapshot for all its pages, and no sort, so the
/// planner reads the case's index in order and a case costs the same whatever the rest of
/// the table holds. Left to choose, at a million snitches it took a bitmap scan of the case
/// and a sort of its rows, in parallel workers: 23 ms for a case of 10,000 where its index
/// takes 6 ms; and on a table not yet analyzed it guessed a case of 29 rows and sorted
/// the whole case again for every page (BENCHMARKS.md, row 8e). One simple query, one
/// round trip.
const LIST_TRANSACTION: &str =
    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL enable_sort = off";
/// A case's first page: `$1` the case, `$2` the tags.
static SNITCHES_OF_CASE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {SNITCH_COLUMNS}, seq FROM snitch.snitches WHERE case_id = $1 AND tags @> $2 \
         ORDER BY created_at, seq LIMIT {LIST_PAGE}"
    )
});
/// The page after the snitch created at `$1` with `seq` `$2`; `$3` the case, `$4` the tags.
static SNITCHES_OF_CASE_AFTER: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {SNITCH_COLUMNS}, seq FROM snitch.snitches WHERE case_id = $3 AND tags @> $4 \
         AND (created_at, seq) > ($1, $2) ORDER BY created_at, seq LIMIT {LIST_PAGE}"
    )
});
static DUE: LazyLock<String> = LazyLock::new(sql::due::<Pg>);
static EVENTS: LazyLock<String> = LazyLock::new(sql::events::<Pg>);
static INSERT_WEBHOOK: LazyLock<String> = LazyLock::new(sql::insert_webhook::<Pg>);
static WEBHOOKS: LazyLock<String> = LazyLock::new(sql::webhooks::<Pg>);
static INSERT_CHANNEL: LazyLock<String> = LazyLock::new(sql::insert_channel::<Pg>);
static CHANNELS: LazyLock<String> = LazyLock::new(sql::channels::<Pg>);
static UPDATE_CHANNEL: LazyLock<String> = LazyLock::new(sql::update_channel::<Pg>);
static DELIVERIES_OF_EVENTS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {DELIVERY_COLUMNS} FROM snitch.deliveries WHERE event_id = ANY($1) ORDER BY seq"
    )
});
