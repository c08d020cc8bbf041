//! The one writer: SQLite takes one write transaction at a time, so every write of a store
//! goes through [`Writer`], which makes them take turns inside the process instead of
//! racing for the database lock and failing with `SQLITE_BUSY`.
//!
//! - [`Writer::begin`] waits for the writer's turn (a fair async mutex), then starts a
//!   `BEGIN IMMEDIATE` transaction, which takes the database's write lock at once: a
//!   transaction never starts as a reader and fails to upgrade later. Another process on
//!   the same file (an admin command) is waited for by SQLite's busy timeout.
//! - Saves are grouped (group commit, as on Postgres): [`Writer::save`] queues the change
//!   and waits; a background task, spawned on the first save, takes every queued change
//!   (gathering more for at most [`SqliteStorageOptions::max_wait`], up to
//!   [`SqliteStorageOptions::max_batch`]), takes the writer's turn, and applies them in
//!   ONE transaction, each change inside a savepoint of its own, so a change that is
//!   refused or fails is rolled back alone. While one batch commits (an fsync with
//!   `synchronous = FULL`), the next one gathers.
//!
//! The batching task writes on one connection of the pool, which it holds while saves keep
//! coming (and gives back after 100 ms without any, at once with a pool of one): SQLite
//! keeps a page cache per connection, valid only until another connection writes.
//!
//! Every reply goes out only after `COMMIT` returned: an `Ok` means the change is on
//! disk, and when the commit (or anything outside a single change) fails, every change of
//! the batch gets an error: [`StorageError::CommitOutcomeUnknown`] when the `COMMIT` may
//! have reached the disk (see [`commit_error`]), [`StorageError::Backend`] otherwise. The
//! changes of a batch apply one after
//! another in the order they were queued: two changes to one snitch behave as two
//! sequential saves.
//!
//! The batching task holds the only receiver of the queue; when it stops (its runtime
//! shut down), pending saves get a `Backend` error instead of waiting forever, and the
//! next save spawns a new task. It ends when the last clone of the store is dropped.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use snitch_core::{Change, StorageError};
use snitch_store_sql::backend;
use snitch_store_sql::queue::{answer_all, failed_batch, Job, SaveQueue};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::SqlitePool;
use sqlx::{Sqlite, Transaction};
use tokio::sync::{mpsc, Mutex as AsyncMutex, OwnedMutexGuard};
use tokio::time::{timeout, timeout_at, Instant};

use crate::set_based;

/// How [`crate::SqliteStorage`] groups concurrent saves into transactions.
///
/// ```
/// use std::time::Duration;
/// use snitch_store_sqlite::SqliteStorageOptions;
///
/// let options = SqliteStorageOptions::default()
///     .with_max_wait(Duration::from_millis(1))
///     .with_max_batch(64);
/// assert_eq!(options.max_batch, 64);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteStorageOptions {
    /// How long a batch waits for more changes after its first one. Zero (the default)
    /// takes the changes already queued: those that arrived while the previous batch was
    /// committing, which is where the grouping comes from.
    pub max_wait: Duration,
    /// The most changes in one transaction (at least 1; 1 turns grouping off).
    pub max_batch: usize,
    /// How many snitches (and cases) the check-in cache holds: a check-in of a snitch
    /// held there is its save alone, not a read and a save (`snitch_store_sql`'s
    /// `check_in_cache`). 0 turns the cache off. A held snitch is about a kilobyte.
    pub cache_capacity: usize,
    /// How long a cached case (plan, members) serves check-ins after it was read: a
    /// change written by another process on the same file (an admin command) reaches
    /// this store's check-ins within it; one made through this store at once.
    pub case_ttl: Duration,
    /// How many of the earliest due deliveries of each budget (HTTP, e-mail) a claim of
    /// deliveries reads first, in time order (at least 1, and never fewer than the
    /// claim's budget: `ClaimLimits::window`). When the fairness rounds over
    /// those settle the claim (there are no more, the budget is full, or every later one
    /// goes to a destination at its cap), it takes them; otherwise it walks every (case,
    /// channel kind) with pending deliveries, which costs in proportion to their number.
    /// Ranking the window is most of a settled claim's time: 64 took 0.7 ms on Postgres
    /// where 256 took 1.9 ms (BENCHMARKS.md, "Deliveries").
    /// Check-ins wait for a claim: it is a write transaction.
    pub claim_window: usize,
}

impl Default for SqliteStorageOptions {
    /// Batches of up to 512 changes, with no extra wait; a check-in cache of 100,000
    /// snitches whose cases serve for a second; claims that read 64 due deliveries of
    /// each budget first.
    fn default() -> Self {
        SqliteStorageOptions {
            max_wait: Duration::ZERO,
            max_batch: 512,
            cache_capacity: 100_000,
            case_ttl: Duration::from_secs(1),
            claim_window: 64,
        }
    }
}

impl SqliteStorageOptions {
    /// These options with [`SqliteStorageOptions::max_wait`] set.
    #[must_use]
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// These options with [`SqliteStorageOptions::max_batch`] set (0 counts as 1).
    #[must_use]
    pub fn with_max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch.max(1);
        self
    }

    /// These options with [`SqliteStorageOptions::cache_capacity`] set (0: no cache).
    #[must_use]
    pub fn with_cache_capacity(mut self, capacity: usize) -> Self {
        self.cache_capacity = capacity;
        self
    }

    /// These options with [`SqliteStorageOptions::case_ttl`] set.
    #[must_use]
    pub fn with_case_ttl(mut self, ttl: Duration) -> Self {
        self.case_ttl = ttl;
        self
    }

    /// These options with [`SqliteStorageOptions::claim_window`] set (0 counts as 1).
    #[must_use]
    pub fn with_claim_window(mut self, claim_window: usize) -> Self {
        self.claim_window = claim_window.max(1);
        self
    }
}

/// A write transaction holding the writer's turn: dropped without
/// [`WriteTx::commit`], it rolls back.
#[derive(Debug)]
pub(crate) struct WriteTx {
    pub(crate) tx: Transaction<'static, Sqlite>,
    _turn: OwnedMutexGuard<Option<HeldConnection>>,
}

/// The connection the batching task writes on, held from one batch to the next while
/// saves keep coming. SQLite keeps a page cache per connection and drops it when another
/// connection wrote meanwhile: batches on whichever connection the pool handed out read
/// their pages again each time, about twice the instructions per check-in (BENCHMARKS.md).
/// It goes back to the pool once nothing was queued for [`HOLD_WHILE_IDLE`] (closing a
/// pool waits for every connection).
#[derive(Debug)]
pub(crate) struct HeldConnection {
    conn: PoolConnection<Sqlite>,
    /// A transaction was begun on it and not ended (the task stopped midway): rolled back
    /// before the next.
    open: bool,
}

/// How long the batching task keeps its connection with nothing to save: long enough to
/// bridge the gaps between batches of a steady load, short enough that a pool being closed
/// waits little.
const HOLD_WHILE_IDLE: Duration = Duration::from_millis(100);

/// The writer's turn, and the connection the batching task holds between batches.
type Turn = Arc<AsyncMutex<Option<HeldConnection>>>;

impl WriteTx {
    /// Commits; a failure is classified by [`commit_error`].
    pub(crate) async fn commit(self) -> Result<(), StorageError> {
        self.tx.commit().await.map_err(commit_error)
    }
}

/// What a failed `COMMIT` means. SQLite answers most failures before anything is written,
/// and the transaction is then rolled back (it stays open and is dropped): busy, a
/// deferred foreign key, a full disk. Those are [`StorageError::Backend`]. An I/O error
/// (`SQLITE_IOERR` and its extended codes) may come after the commit reached the log, and
/// an error of the connection's worker thread leaves no answer at all: the outcome is
/// unknown, [`StorageError::CommitOutcomeUnknown`].
pub(crate) fn commit_error(e: sqlx::Error) -> StorageError {
    /// SQLite's primary result code for I/O errors.
    const SQLITE_IOERR: i64 = 10;
    let answered = e.as_database_error().is_some_and(|d| {
        let code = d.code().and_then(|c| c.parse::<i64>().ok());
        code.is_none_or(|c| c & 0xff != SQLITE_IOERR)
    });
    if answered {
        backend(e)
    } else {
        StorageError::CommitOutcomeUnknown(Box::new(e))
    }
}

/// The writing side of a store.
#[derive(Debug)]
pub(crate) struct Writer {
    pool: SqlitePool,
    turn: Turn,
    options: SqliteStorageOptions,
    saves: SaveQueue,
    /// Changes committed in a set-based round rather than one by one.
    saved_in_rounds: Arc<AtomicU64>,
}

impl Writer {
    pub(crate) fn new(pool: SqlitePool, options: SqliteStorageOptions) -> Self {
        let options = options.with_max_batch(options.max_batch);
        Writer {
            pool,
            turn: Arc::new(AsyncMutex::new(None)),
            saves: SaveQueue::new(options.max_batch),
            saved_in_rounds: Arc::new(AtomicU64::new(0)),
            options,
        }
    }

    /// Waits for the writer's turn and starts a write transaction.
    pub(crate) async fn begin(&self) -> Result<WriteTx, StorageError> {
        begin(&self.pool, &self.turn).await
    }

    /// Queues the change for the next batch and waits until its batch committed.
    ///
    /// A caller that stops waiting does not withdraw the change: it may still commit.
    pub(crate) async fn save(&self, change: &Change) -> Result<(), StorageError> {
        self.saves
            .save(change, |queue, batches_committed| {
                run(
                    self.pool.clone(),
                    Arc::clone(&self.turn),
                    self.options,
                    queue,
                    batches_committed,
                    Arc::clone(&self.saved_in_rounds),
                )
            })
            .await
    }

    pub(crate) fn batches_committed(&self) -> u64 {
        self.saves.batches_committed()
    }

    pub(crate) fn saved_in_rounds(&self) -> u64 {
        self.saved_in_rounds.load(Ordering::Relaxed)
    }
}

/// A write outside the batches (an admin command, a claim): on a connection of the pool,
/// in the writer's turn.
async fn begin(pool: &SqlitePool, turn: &Turn) -> Result<WriteTx, StorageError> {
    let turn = Arc::clone(turn).lock_owned().await;
    let tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(backend)?;
    Ok(WriteTx { tx, _turn: turn })
}

/// Gives the held connection back to the pool (the writer is idle), rolled back first if
/// a transaction was left open; one that cannot be is closed instead.
async fn release(turn: &Turn) {
    let mut turn = turn.lock().await;
    let rolled_back = match turn.as_mut() {
        None => return,
        Some(held) if held.open => sqlx::query("ROLLBACK")
            .execute(&mut *held.conn)
            .await
            .is_ok(),
        Some(_) => true,
    };
    if rolled_back {
        drop(turn.take());
    } else {
        close_held(&mut turn);
    }
}

/// The batching task: gathers one batch after another until every sender is gone, and
/// applies each in one transaction; the next batch gathers meanwhile.
async fn run(
    pool: SqlitePool,
    turn: Turn,
    options: SqliteStorageOptions,
    mut queue: mpsc::Receiver<Job>,
    batches_committed: Arc<AtomicU64>,
    saved_in_rounds: Arc<AtomicU64>,
) {
    // With a pool of one connection, holding it would keep every read waiting: it goes
    // back after each batch.
    let hold = if pool.options().get_max_connections() > 1 {
        HOLD_WHILE_IDLE
    } else {
        Duration::ZERO
    };
    loop {
        let mut batch = Vec::with_capacity(options.max_batch);
        // The held connection goes back to the pool once no save came for a while.
        let received = match timeout(hold, queue.recv_many(&mut batch, options.max_batch)).await {
            Ok(received) => received,
            Err(_) => {
                release(&turn).await;
                queue.recv_many(&mut batch, options.max_batch).await
            }
        };
        if received == 0 {
            release(&turn).await;
            return;
        }
        if !options.max_wait.is_zero() {
            let deadline = Instant::now() + options.max_wait;
            while batch.len() < options.max_batch {
                let room = options.max_batch - batch.len();
                match timeout_at(deadline, queue.recv_many(&mut batch, room)).await {
                    Ok(received) if received > 0 => {}
                    _ => break,
                }
            }
        }
        commit(&pool, &turn, batch, &batches_committed, &saved_in_rounds).await;
        if hold.is_zero() {
            release(&turn).await;
        }
    }
}

/// Applies the batch in one transaction and answers each change once it is over: its own
/// result when the transaction committed, a `Backend` error otherwise. A batch that
/// committed is counted, and the changes it saved in the set-based round, before the
/// answers (so that a caller answered sees them counted).
async fn commit(
    pool: &SqlitePool,
    turn: &Turn,
    batch: Vec<Job>,
    batches_committed: &AtomicU64,
    saved_in_rounds: &AtomicU64,
) {
    match apply(pool, turn, &batch).await {
        Ok((results, in_round)) => {
            batches_committed.fetch_add(1, Ordering::Relaxed);
            saved_in_rounds.fetch_add(in_round, Ordering::Relaxed);
            answer_all(batch, results);
        }
        Err(e) => {
            let unknown = e.0.is_outcome_unknown();
            let answers = failed_batch(e, unknown, batch.len());
            answer_all(batch, answers);
        }
    }
}

/// One transaction on the held connection: first a round (`set_based`) of the changes
/// that keep their snitch's settings and are its first in the batch; then the others, one
/// after another in the order queued, each in a savepoint of its own (a change to a
/// snitch the round moved comes after it, as queued); then the trims of histories the
/// batch filled. The result of each change, if the transaction committed. An error here
/// (begin, a savepoint, the commit) is the batch's, and the transaction is rolled back.
async fn apply(pool: &SqlitePool, turn: &Turn, batch: &[Job]) -> Results {
    let mut turn = Arc::clone(turn).lock_owned().await;
    let held = match turn.take() {
        Some(held) => held,
        None => HeldConnection {
            conn: pool.acquire().await.map_err(batch_error)?,
            open: false,
        },
    };
    let held = turn.insert(held);
    // The transaction and the first change's savepoint in one round trip to the
    // connection's thread (a round trip took about 0.3 ms of a batch's 3.7 ms under row
    // 2c's load, BENCHMARKS.md).
    let begin = if held.open {
        "ROLLBACK; BEGIN IMMEDIATE; SAVEPOINT change"
    } else {
        "BEGIN IMMEDIATE; SAVEPOINT change"
    };
    if let Err(e) = sqlx::query(begin).execute(&mut *held.conn).await {
        // The transaction may or may not have begun: the connection is closed, not reused
        // (a begin fails rarely: busy beyond the timeout, or a connection gone bad).
        close_held(&mut turn);
        return Err(batch_error(e));
    }
    held.open = true;
    let outcome = apply_in(&mut held.conn, batch).await;
    let end = if outcome.is_ok() {
        "COMMIT"
    } else {
        "ROLLBACK"
    };
    match sqlx::query(end).execute(&mut *held.conn).await {
        Ok(_) => {
            held.open = false;
            outcome
        }
        Err(e) => {
            let failed = outcome.err().unwrap_or_else(|| BatchError(commit_error(e)));
            // A COMMIT that SQLite refused (busy, a full disk) leaves the transaction
            // open, rolled back before the next. A COMMIT whose outcome is unknown, or a
            // ROLLBACK that failed, may have left the connection unusable.
            if failed.0.is_outcome_unknown() || end == "ROLLBACK" {
                close_held(&mut turn);
            }
            Err(failed)
        }
    }
}

/// Closes the held connection (not back to the pool): it may be unusable.
fn close_held(turn: &mut Option<HeldConnection>) {
    if let Some(held) = turn.take() {
        drop(held.conn.detach());
    }
}

/// The batch's work inside its transaction on `tx`: the result of each change, or the
/// error that fails the whole batch.
async fn apply_in(tx: &mut PoolConnection<Sqlite>, batch: &[Job]) -> Results {
    // Statements go through `sqlx::query`, so each is prepared once per connection and
    // kept (a bare string is parsed again every time: a few percent of a check-in). The
    // savepoint `change` is set (by `apply`'s begin).
    let mut results: Vec<Option<Result<(), StorageError>>> = batch.iter().map(|_| None).collect();
    let mut housekeeping = set_based::Housekeeping::default();
    let mut in_round = 0;

    let mut seen = HashSet::with_capacity(batch.len());
    let round: Vec<usize> = (0..batch.len())
        .filter(|&i| {
            let change = &batch[i].change;
            seen.insert(change.snitch().token().as_str()) && set_based::fits_a_round(change)
        })
        .collect();
    if round.len() > 1 {
        let changes: Vec<&Change> = round.iter().map(|&i| &batch[i].change).collect();
        // A failed statement leaves the round's changes to the path below, one by one,
        // where the one that fails fails alone.
        let next = match set_based::save_round(tx, &changes).await {
            Ok(outcome) => {
                for (&i, result) in round.iter().zip(outcome.results) {
                    in_round += u64::from(result.is_ok());
                    results[i] = Some(result);
                }
                housekeeping = outcome.housekeeping;
                // A batch the round saved whole (row 2c's steady state) goes straight to
                // COMMIT, which ends the savepoint with the transaction: one round trip
                // less. Work that follows gets a savepoint of its own.
                let done = housekeeping.is_empty() && results.iter().all(Option::is_some);
                (!done).then_some("RELEASE SAVEPOINT change; SAVEPOINT change")
            }
            Err(_) => Some("ROLLBACK TO SAVEPOINT change"),
        };
        if let Some(next) = next {
            sqlx::query(next)
                .execute(&mut **tx)
                .await
                .map_err(batch_error)?;
        }
    }

    for (job, slot) in batch.iter().zip(results.iter_mut()) {
        if slot.is_some() {
            continue;
        }
        let result = crate::save_change(tx, &job.change).await;
        // Where the next change starts: a new savepoint after this one's work, or, when
        // this one failed, the same savepoint once rolled back to (it stays set).
        let next = match result {
            Ok(()) => "RELEASE SAVEPOINT change; SAVEPOINT change",
            Err(_) => "ROLLBACK TO SAVEPOINT change",
        };
        sqlx::query(next)
            .execute(&mut **tx)
            .await
            .map_err(batch_error)?;
        *slot = Some(result);
    }

    // Trims are no change's: one that fails is undone and left for a later save (readers
    // never see more than is kept).
    if !housekeeping.is_empty() && housekeeping.run(tx).await.is_err() {
        sqlx::query("ROLLBACK TO SAVEPOINT change")
            .execute(&mut **tx)
            .await
            .map_err(batch_error)?;
    }
    // The last savepoint holds no work, or the trims; it commits with the rest.
    // Every change has its result by now: the round's, or its own above.
    let results = results.into_iter().map(|r| r.unwrap_or(Ok(()))).collect();
    Ok((results, in_round))
}

/// What failed a whole batch.
#[derive(Debug)]
struct BatchError(StorageError);

impl std::fmt::Display for BatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the batch's transaction failed: {}", self.0)
    }
}

impl std::error::Error for BatchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

fn batch_error(e: sqlx::Error) -> BatchError {
    BatchError(backend(e))
}

/// Each change's result and how many were saved in the round, or the error that failed
/// the whole batch.
type Results = Result<(Vec<Result<(), StorageError>>, u64), BatchError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_without_an_answer_has_an_unknown_outcome() {
        for lost in [
            sqlx::Error::WorkerCrashed,
            sqlx::Error::Io(std::io::Error::other("disk unplugged")),
        ] {
            assert!(commit_error(lost).is_outcome_unknown());
        }
    }
}
