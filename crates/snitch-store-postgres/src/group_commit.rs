//! Group commit: concurrent saves share one transaction, so a burst of check-ins costs a
//! few commits (and WAL flushes) instead of one per check-in.
//!
//! [`GroupCommit::save`] queues the change with a reply channel and waits. A background
//! task, spawned on the first save, takes the first queued change, gathers more for at
//! most [`PgStorageOptions::max_wait`] or until [`PgStorageOptions::max_batch`], and
//! applies the batch set-based ([`crate::set_based`]): one statement for all its
//! snitches, its own transaction (several in one transaction when a snitch comes twice).
//! When Postgres refuses that statement, the batch is applied again in one transaction
//! with each change inside a savepoint of its own, so a change that is refused or fails
//! is rolled back alone and never aborts the others.
//!
//! One batch applies at a time while it is quick: the changes that arrive meanwhile wait
//! in the queue and make the next batch, so a burst costs few statements (each costs
//! Postgres about as much as a dozen rows). A batch still applying after
//! [`PgStorageOptions::overlap_after`] (waiting for a row lock, say) lets the next one
//! start beside it, up to [`PgStorageOptions::max_concurrent_batches`], each on a
//! connection of its own: one slow transaction never holds up every save.
//!
//! While busy, the batching task keeps its connections from one batch to the next (sqlx
//! tests a connection returned to the pool with a round trip, and the next batch got a
//! cold backend), only while the pool has another for reads, and returns them all once
//! it has been idle for `HELD_IDLE` (20 ms). A batch does all its work, its fallback and
//! its trims included, on one connection, so it never waits for a second one.
//!
//! Every reply goes out only after `COMMIT` returned: an `Ok` means the change is
//! durable, and when the commit (or anything outside a single change) fails, every change
//! of the batch gets an error, never an `Ok`: [`StorageError::CommitOutcomeUnknown`] when
//! the `COMMIT` got no answer (it may have committed), [`StorageError::Backend`] otherwise
//! (rolled back). Serialization failures and deadlocks (SQLSTATE 40001, 40P01), whether of
//! one change or of the whole batch, were rolled back by Postgres and are applied again,
//! at most `ATTEMPTS` (5) times, before anyone is answered.
//!
//! The changes of a batch apply one after another, ordered by token, and changes to one
//! snitch in the order they were queued: two of them behave as two sequential saves, the
//! second one sees the version the first one wrote. The order by token makes batches
//! that apply at once update the snitch rows they share in the same order, so they wait
//! for each other rather than deadlock (see [`crate::set_based`]). A change to a snitch
//! that another batch holds waits for that batch's commit, then finds the version moved
//! on ([`StorageError::Conflict`]), exactly as with separate transactions.
//!
//! The batching task holds the only receiver of the queue; when it stops (its runtime
//! shut down, or it panicked), pending saves get a `Backend` error instead of waiting
//! forever, and the next save spawns a new task. It ends when the last clone of the store
//! is dropped, after applying what was queued.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use snitch_store_sql::queue::{answer_all, Job, SaveQueue};
use std::task::Poll;
use std::time::Duration;

use futures::future::FutureExt;
use futures::stream::{FuturesUnordered, StreamExt};
use snitch_core::{Change, StorageError};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, Postgres};
use sqlx::{Connection, Executor};
use tokio::sync::mpsc;
use tokio::time::{sleep, sleep_until, Instant, Sleep};

use crate::set_based::{Housekeeping, Plan, TrimsInFlight};

/// How [`crate::PgStorage`] groups concurrent saves into transactions, and how much its
/// check-in cache holds.
///
/// ```
/// use std::time::Duration;
/// use snitch_store_postgres::PgStorageOptions;
///
/// let options = PgStorageOptions::default()
///     .with_max_wait(Duration::from_millis(5))
///     .with_max_batch(64);
/// assert_eq!(options.max_batch, 64);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PgStorageOptions {
    /// How long a batch waits for more changes after its first one: the most a save
    /// waits before its transaction starts. Zero takes only the changes already queued.
    pub max_wait: Duration,
    /// The most changes in one transaction (at least 1; 1 turns grouping off, so every
    /// save commits alone).
    pub max_batch: usize,
    /// How many batches may be applying at once, each in a transaction on a connection
    /// of its own (at least 1), when they take longer than
    /// [`PgStorageOptions::overlap_after`]. Saves take at most this many of the pool's
    /// connections.
    pub max_concurrent_batches: usize,
    /// How long a batch applies alone before the next one may start beside it. One batch
    /// at a time gathers the most changes per transaction (a statement costs Postgres
    /// about as much as a dozen rows); a batch that takes longer than this (waiting for a
    /// row lock another transaction holds, say) no longer holds up the saves behind it.
    pub overlap_after: Duration,
    /// How many snitches (and cases) the check-in cache holds: a check-in of a snitch
    /// held there is one statement, its save, instead of a read and a save. 0 turns the
    /// cache off. A held snitch is about a kilobyte.
    pub cache_capacity: usize,
    /// How long a cached case (plan, members) serves check-ins after it was read: a
    /// change made through another server reaches this one's check-ins within it (one
    /// made through this store at once).
    pub case_ttl: Duration,
    /// How many of the earliest due deliveries of each budget (HTTP, e-mail) a claim of
    /// deliveries reads first, in time order (at least 1, and never fewer than the
    /// claim's budget: `ClaimLimits::window`). When the fairness rounds over
    /// those settle the claim (there are no more, the budget is full, or every later one
    /// goes to a destination at its cap), it takes them; otherwise it walks every (case,
    /// channel kind) with pending deliveries, which costs in proportion to their number.
    /// Ranking the window is most of a settled claim's time: 64 took 0.7 ms on Postgres
    /// where 256 took 1.9 ms (BENCHMARKS.md, "Deliveries").
    pub claim_window: usize,
    /// How long a count of the unfinished deliveries (`StoreStats::outbox_depth`, the
    /// `snitch_outbox_depth` gauge) serves further reads of the stats. Counting reads
    /// every pending delivery's index entry: 12–17 ms at 100,000 pending, and a scrape
    /// every few milliseconds during a mass miss took a fifth of the machine from the
    /// sweep. Zero counts on every read.
    pub outbox_depth_for: Duration,
}

impl Default for PgStorageOptions {
    /// Batches of up to 256 changes, of what is queued when a batch can start (no
    /// waiting for more: under load a batch forms while the one before it commits, and
    /// waiting 2 ms only added latency: 7,500–7,800 → 8,700–9,500 check-ins/s in
    /// BENCHMARKS.md row 2), one at a time while each takes under 5 ms and up to 4 at
    /// once beyond that (four at once from the start split the same load into smaller
    /// batches: 18,000 against 21,000 check-ins/s); a check-in cache of 100,000 snitches
    /// whose cases serve for a second; claims of deliveries that read 64 of each budget
    /// first; a count of the outbox that serves for a second.
    fn default() -> Self {
        PgStorageOptions {
            max_wait: Duration::ZERO,
            max_batch: 256,
            max_concurrent_batches: 4,
            overlap_after: Duration::from_millis(5),
            cache_capacity: 100_000,
            case_ttl: Duration::from_secs(1),
            claim_window: 64,
            outbox_depth_for: Duration::from_secs(1),
        }
    }
}

impl PgStorageOptions {
    /// These options with [`PgStorageOptions::outbox_depth_for`] set.
    #[must_use]
    pub fn with_outbox_depth_for(mut self, outbox_depth_for: Duration) -> Self {
        self.outbox_depth_for = outbox_depth_for;
        self
    }

    /// These options with [`PgStorageOptions::claim_window`] set.
    #[must_use]
    pub fn with_claim_window(mut self, claim_window: usize) -> Self {
        self.claim_window = claim_window.max(1);
        self
    }

    /// These options with [`PgStorageOptions::max_wait`] set.
    #[must_use]
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// These options with [`PgStorageOptions::max_batch`] set (0 counts as 1).
    #[must_use]
    pub fn with_max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch.max(1);
        self
    }

    /// These options with [`PgStorageOptions::cache_capacity`] set (0: no cache).
    #[must_use]
    pub fn with_cache_capacity(mut self, snitches: usize) -> Self {
        self.cache_capacity = snitches;
        self
    }

    /// These options with [`PgStorageOptions::case_ttl`] set.
    #[must_use]
    pub fn with_case_ttl(mut self, case_ttl: Duration) -> Self {
        self.case_ttl = case_ttl;
        self
    }

    /// These options with [`PgStorageOptions::overlap_after`] set.
    #[must_use]
    pub fn with_overlap_after(mut self, overlap_after: Duration) -> Self {
        self.overlap_after = overlap_after;
        self
    }

    /// These options with [`PgStorageOptions::max_concurrent_batches`] set (0 counts as
    /// 1).
    #[must_use]
    pub fn with_max_concurrent_batches(mut self, batches: usize) -> Self {
        self.max_concurrent_batches = batches.max(1);
        self
    }
}

/// The saving side of a store: the queue to its batching task.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    pool: PgPool,
    options: PgStorageOptions,
    saves: SaveQueue,
}

impl GroupCommit {
    pub(crate) fn new(pool: PgPool, options: PgStorageOptions) -> Self {
        let options = options
            .with_max_batch(options.max_batch)
            .with_max_concurrent_batches(options.max_concurrent_batches);
        GroupCommit {
            pool,
            saves: SaveQueue::new(options.max_batch),
            options,
        }
    }

    /// Queues the change for the next batch and waits until its batch committed.
    ///
    /// A caller that stops waiting does not withdraw the change: it may still commit.
    pub(crate) async fn save(&self, change: &Change) -> Result<(), StorageError> {
        self.saves
            .save(change, |queue, batches_committed| {
                run(self.pool.clone(), self.options, queue, batches_committed)
            })
            .await
    }

    pub(crate) fn batches_committed(&self) -> u64 {
        self.saves.batches_committed()
    }
}

/// The batching task: gathers one batch after another until every sender is gone, and
/// applies up to `max_concurrent_batches` of them at once.
///
/// It drives the batches it applies itself instead of spawning a task for each: under
/// load, a task woken or spawned waits behind every connection task woken before it,
/// and each hop between tasks (a save's job arriving, a batch starting) cost a
/// check-in about half a millisecond of waiting (BENCHMARKS.md).
async fn run(
    pool: PgPool,
    options: PgStorageOptions,
    mut queue: mpsc::Receiver<Job>,
    batches_committed: Arc<AtomicU64>,
) {
    let held = Arc::new(HeldConnections::default());
    let trims = Arc::new(TrimsInFlight::default());
    let mut applying = FuturesUnordered::new();
    // The next batch, and when it stops waiting for more changes.
    let mut gathering: Vec<Job> = Vec::with_capacity(options.max_batch);
    let mut wait_over: Option<Pin<Box<Sleep>>> = None;
    // When the batches applying may be joined by another: `overlap_after` after the
    // newest of them started.
    let mut overlap_at: Option<Pin<Box<Sleep>>> = None;
    // When the connections held while idle go back to the pool.
    let mut release_at: Option<Pin<Box<Sleep>>> = None;
    let mut open = true;
    loop {
        let room = applying.is_empty()
            || (applying.len() < options.max_concurrent_batches
                && overlap_at
                    .as_ref()
                    .is_some_and(|sleep| sleep.deadline() <= Instant::now()));
        let ready = gathering.len() >= options.max_batch
            || !open
            || wait_over
                .as_ref()
                .is_some_and(|sleep| sleep.deadline() <= Instant::now());
        if room && !gathering.is_empty() && ready {
            let batch = std::mem::replace(&mut gathering, Vec::with_capacity(options.max_batch));
            wait_over = None;
            overlap_at = Some(Box::pin(sleep_until(
                Instant::now() + options.overlap_after,
            )));
            let (pool, held, trims, batches_committed) = (
                pool.clone(),
                Arc::clone(&held),
                Arc::clone(&trims),
                Arc::clone(&batches_committed),
            );
            // A batch that panics (a bug) fails its own saves only: dropped, its reply
            // channels tell them so, and the other batches go on.
            applying.push(
                AssertUnwindSafe(async move {
                    if commit(&pool, &held, &trims, batch).await {
                        batches_committed.fetch_add(1, Ordering::Relaxed);
                    }
                })
                .catch_unwind()
                .map(drop),
            );
            continue;
        }
        if !open && gathering.is_empty() && applying.is_empty() {
            return;
        }
        // A batch starts gathering once it can start applying right after: while every
        // slot is busy, changes queue up (in the channel) for the next batch.
        let receive = open && room && gathering.len() < options.max_batch;
        std::future::poll_fn(|cx| {
            let mut progress = false;
            while let Poll::Ready(Some(())) = applying.poll_next_unpin(cx) {
                progress = true;
            }
            // Batches still applying when their time alone is over make room for one
            // more.
            if !room && !applying.is_empty() && applying.len() < options.max_concurrent_batches {
                if let Some(sleep) = overlap_at.as_mut() {
                    progress |= sleep.as_mut().poll(cx).is_ready();
                }
            }
            if receive {
                let limit = options.max_batch - gathering.len();
                if let Poll::Ready(received) = queue.poll_recv_many(cx, &mut gathering, limit) {
                    if received == 0 {
                        // Every sender is gone: apply what is gathered, then stop.
                        open = false;
                    } else if wait_over.is_none() {
                        wait_over = Some(Box::pin(sleep_until(Instant::now() + options.max_wait)));
                    }
                    progress = true;
                }
            }
            // The wait matters only when the batch could start: full slots end it.
            if let Some(sleep) = wait_over.as_mut().filter(|_| room) {
                progress |= sleep.as_mut().poll(cx).is_ready();
            }
            // Idle (nothing applying, nothing to apply) for `HELD_IDLE`: the connections go
            // back to the pool, so that only a busy store holds any. Not at once: a
            // store saving one change after another (check-ins of one snitch, each
            // waiting for the one before) is busy too.
            if !progress && applying.is_empty() && gathering.is_empty() && held.any() {
                let release = release_at.get_or_insert_with(|| Box::pin(sleep(HELD_IDLE)));
                if release.as_mut().poll(cx).is_ready() {
                    held.release_all();
                    release_at = None;
                }
            } else {
                release_at = None;
            }
            if progress {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }
}

/// Applies the batch and answers each change once it is over: its own result when the
/// transaction committed, an error otherwise ([`batch_error`]). A batch that Postgres
/// rolled back for a serialization failure or a deadlock is applied again, up to
/// [`ATTEMPTS`] times. Tells whether the transaction committed. The histories are trimmed
/// after the answers.
///
/// All of it runs on one connection, held or taken from the pool: a batch never waits
/// for a second one (a pool of one connection, or one whose others are all busy, would
/// keep it waiting for itself).
async fn commit(
    pool: &PgPool,
    held: &HeldConnections,
    trims: &TrimsInFlight,
    mut batch: Vec<Job>,
) -> bool {
    // Batches applying at once update the rows they share in the same order, so they
    // wait for each other rather than deadlock. The sort is stable: changes to one snitch
    // keep the order they were queued in, and apply as if one after another.
    batch.sort_by(|a, b| a.token().cmp(b.token()));
    let (mut conn, outcome) = match held.take(pool).await {
        Ok(mut conn) => {
            let mut attempt = 1;
            let outcome = loop {
                match apply(&mut conn.connection, &batch).await {
                    Err(failure)
                        if attempt < ATTEMPTS && is_rolled_back_to_retry(failure.error()) =>
                    {
                        attempt += 1;
                    }
                    outcome => break outcome,
                }
            };
            (Some(conn), outcome)
        }
        Err(e) => (None, Err(BatchFailure::Before(e))),
    };
    // A connection is kept only after a batch that committed or that Postgres answered
    // with an error that leaves the session as it was (the statement rolled back); after
    // anything else it goes back to the pool, which tests it.
    let mut connection_fine = match &outcome {
        Ok(_) => true,
        Err(BatchFailure::Before(e)) => answered(e),
        Err(BatchFailure::Commit(_)) => false,
    };
    let committed = match outcome {
        Ok((results, housekeeping)) => {
            answer_all(batch, results);
            // A failure leaves the trimming to a later save: the snitches stay over the
            // mark, and readers never see more than is kept.
            if let Some(conn) = conn.as_mut() {
                if let Err(e) = housekeeping.run(&mut conn.connection, trims).await {
                    connection_fine &= answered(&e);
                }
            }
            true
        }
        Err(failure) => {
            let e = Arc::new(failure);
            for job in batch {
                job.answer(Err(batch_error(&e)));
            }
            false
        }
    };
    if let Some(conn) = conn.filter(|_| connection_fine) {
        held.give_back(conn, pool);
    }
    committed
}

/// The batch, set-based (see [`crate::set_based`]): the result of each change, once
/// committed. A batch that is one statement (every snitch in it once, the usual case)
/// runs without `BEGIN` and `COMMIT`: the statement is its own transaction, one round
/// trip, and a failure Postgres did not answer is an unknown commit outcome. When Postgres
/// refuses a statement (a change breaks a constraint, say), nothing of it is stored, and
/// the batch is applied again one change at a time ([`apply_one_by_one`]), so the failing
/// change fails alone.
async fn apply(conn: &mut PgConnection, batch: &[Job]) -> SetResults {
    let changes: Vec<&Change> = batch.iter().map(|job| &job.change).collect();
    let plan = Plan::of(&changes);
    let applied = if plan.is_one_statement() {
        plan.apply(&mut *conn).await.map_err(|e| {
            if answered(&e) {
                BatchFailure::Before(e)
            } else {
                BatchFailure::Commit(e)
            }
        })
    } else {
        let mut tx = conn.begin().await.map_err(BatchFailure::Before)?;
        match plan.apply(&mut tx).await {
            Ok(done) => {
                tx.commit().await.map_err(BatchFailure::Commit)?;
                Ok(done)
            }
            Err(e) => Err(BatchFailure::Before(e)),
        }
    };
    match applied {
        Err(BatchFailure::Before(e))
            if e.as_database_error().is_some() && !is_rolled_back_to_retry(&e) =>
        {
            // A statement Postgres could not run at all (class 42: a type or a parameter
            // out of place) is a fault of ours, not of a change, and the fallback would
            // hide it behind slower saves: the tests fail on it.
            debug_assert!(
                !is_statement_fault(&e),
                "a batch's statement is broken: {e}"
            );
            Ok((
                apply_one_by_one(conn, batch).await?,
                Housekeeping::default(),
            ))
        }
        other => other,
    }
}

/// Connections the batching task keeps from one batch to the next while it is busy,
/// instead of returning them to the pool: a connection returned to sqlx's pool is
/// tested with a round trip (`ping`) before anyone can take it again, so every batch
/// took another of the pool's connections (a Postgres backend whose caches were cold)
/// and cost one more round trip besides. Under load, one backend stays busy and warm:
/// a fifth less Postgres CPU per check-in (BENCHMARKS.md).
///
/// A connection is kept only while the pool has another for everyone else (an idle one,
/// or room to open one), so that reads never wait for a store busy saving.
///
/// They go back to the pool once the task has had nothing applying and nothing to apply
/// for [`HELD_IDLE`] ([`HeldConnections::release_all`]), so an idle store holds none
/// (and `PgPool::close` is not kept waiting long), and a connection is reused only
/// within that much of its last batch. One held for [`HELD_AT_MOST`] goes back all the
/// same, for the pool's `max_lifetime` to apply.
#[derive(Debug, Default)]
struct HeldConnections {
    idle: Mutex<Vec<HeldConnection>>,
}

/// How long the batching task holds its connections while it has nothing to apply.
const HELD_IDLE: Duration = Duration::from_millis(20);

/// How long a connection may be held, busy all along, before it goes back to the pool.
const HELD_AT_MOST: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct HeldConnection {
    connection: PoolConnection<Postgres>,
    /// When it was taken from the pool.
    taken_at: Instant,
}

impl HeldConnections {
    /// A held connection, or one from the pool.
    async fn take(&self, pool: &PgPool) -> Result<HeldConnection, sqlx::Error> {
        let held = self.lock().pop();
        match held {
            Some(held) => Ok(held),
            None => Ok(HeldConnection {
                connection: pool.acquire().await?,
                taken_at: Instant::now(),
            }),
        }
    }

    /// Keeps the connection for the next batch, unless it has been held long enough or
    /// the pool has no other to give anyone else (every other connection busy, and no
    /// room to open one): reads must not wait for a store that is busy saving. Dropping
    /// it returns it to the pool.
    fn give_back(&self, held: HeldConnection, pool: &PgPool) {
        let others_available =
            pool.num_idle() > 0 || pool.size() < pool.options().get_max_connections();
        if others_available && held.taken_at.elapsed() < HELD_AT_MOST {
            self.lock().push(held);
        }
    }

    /// Whether any connection is held.
    fn any(&self) -> bool {
        !self.lock().is_empty()
    }

    /// Returns every held connection to the pool.
    fn release_all(&self) {
        // Dropped after the lock is: returning a connection starts its test (a ping).
        let released = std::mem::take(&mut *self.lock());
        drop(released);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<HeldConnection>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Each change's result and what is left after the commit, or what failed the batch.
type SetResults = Result<(Vec<Result<(), StorageError>>, Housekeeping), BatchFailure>;

/// How many times a batch, or one change inside it, is applied when Postgres rolled it
/// back for a serialization failure or a deadlock (it picks one of the transactions
/// involved; the others go on, so the next attempt usually passes).
const ATTEMPTS: usize = 5;

/// Whether Postgres rolled the work back because of a concurrent transaction, so that
/// doing it again may succeed: a serialization failure (40001) or a deadlock (40P01).
fn is_rolled_back_to_retry(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|code| code == "40001" || code == "40P01")
}

/// Why a whole batch failed: before its `COMMIT` (nothing is stored: dropping the
/// transaction rolled it all back), or in its `COMMIT`.
#[derive(Debug, thiserror::Error)]
enum BatchFailure {
    #[error("{0}")]
    Before(#[source] sqlx::Error),
    #[error("COMMIT failed: {0}")]
    Commit(#[source] sqlx::Error),
}

impl BatchFailure {
    fn error(&self) -> &sqlx::Error {
        match self {
            BatchFailure::Before(e) | BatchFailure::Commit(e) => e,
        }
    }
}

/// What each change of a failed batch is told. A `COMMIT` that Postgres answered with an
/// error (a deferred constraint, a serialization failure) rolled the transaction back: a
/// [`StorageError::Backend`], like any failure before it. A `COMMIT` that got no answer
/// (the connection broke, the server ended the session: a FATAL error or a connection
/// exception, class 08) may or may not have committed:
/// [`StorageError::CommitOutcomeUnknown`].
fn batch_error(failure: &Arc<BatchFailure>) -> StorageError {
    let boxed = Box::new(Arc::clone(failure));
    let BatchFailure::Commit(e) = &**failure else {
        return StorageError::Backend(boxed);
    };
    if answered(e) {
        StorageError::Backend(boxed)
    } else {
        StorageError::CommitOutcomeUnknown(boxed)
    }
}

/// Whether Postgres answered the statement with an error and so rolled its transaction
/// back; not when the connection broke or the server ended the session (a FATAL error or
/// a connection exception, class 08), after which the work may or may not be committed.
fn answered(e: &sqlx::Error) -> bool {
    e.as_database_error().is_some_and(|d| {
        let fatal = d
            .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .is_some_and(|pg| {
                matches!(
                    pg.severity(),
                    sqlx::postgres::PgSeverity::Fatal | sqlx::postgres::PgSeverity::Panic
                )
            });
        let connection = d.code().is_some_and(|c| c.starts_with("08"));
        !fatal && !connection
    })
}

/// Whether Postgres refused the statement itself, whatever its values (SQLSTATE class 42:
/// syntax, types, undefined names).
fn is_statement_fault(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c.starts_with("42"))
}

/// Whether a change failed only because Postgres picked it to roll back (see
/// [`is_rolled_back_to_retry`]).
fn change_rolled_back_to_retry(result: &Result<(), StorageError>) -> bool {
    match result {
        Err(StorageError::Backend(e)) => e
            .downcast_ref::<sqlx::Error>()
            .is_some_and(is_rolled_back_to_retry),
        _ => false,
    }
}

/// One transaction with a savepoint per change (the fallback of [`apply`]): the result of
/// each change, if the transaction committed. An error here (begin, a savepoint, the
/// commit) is the batch's:
/// dropping the transaction rolls all of it back. A change that Postgres rolled back for
/// a serialization failure or a deadlock is rolled back to its savepoint and applied
/// again, up to [`ATTEMPTS`] times.
async fn apply_one_by_one(conn: &mut PgConnection, batch: &[Job]) -> Results {
    let before = BatchFailure::Before;
    let mut tx = conn.begin().await.map_err(before)?;
    tx.execute("SAVEPOINT change").await.map_err(before)?;
    let mut results = Vec::with_capacity(batch.len());
    for job in batch {
        let mut attempt = 1;
        let result = loop {
            let result = crate::save_change(&mut tx, &job.change).await;
            if attempt < ATTEMPTS && change_rolled_back_to_retry(&result) {
                attempt += 1;
                tx.execute("ROLLBACK TO SAVEPOINT change")
                    .await
                    .map_err(before)?;
                continue;
            }
            break result;
        };
        // Where the next change starts: a new savepoint after this one's work, or, when
        // this one failed, the same savepoint once rolled back to (it stays set).
        let next = match result {
            Ok(()) => "RELEASE SAVEPOINT change; SAVEPOINT change",
            Err(_) => "ROLLBACK TO SAVEPOINT change",
        };
        tx.execute(next).await.map_err(before)?;
        results.push(result);
    }
    // The last savepoint holds no work; it commits with the rest.
    tx.commit().await.map_err(BatchFailure::Commit)?;
    Ok(results)
}

/// Each change's result, or what failed the whole batch.
type Results = Result<Vec<Result<(), StorageError>>, BatchFailure>;
