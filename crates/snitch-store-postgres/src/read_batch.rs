//! Batched reads of snitches: concurrent reads share one query.
//!
//! [`Reads::snitch_with_case`] queues the token and waits. A background task, spawned on
//! the first read, takes whatever is queued (at most [`MAX_READ_BATCH`]) and has it read
//! by a task of its own with one `SELECT … WHERE token = ANY($1)` (the case joined), at
//! most [`READ_CONCURRENCY`] at once. A read never waits for company: when a slot is free,
//! the first queued read goes at once, alone if it is alone; only while every slot is busy
//! do reads gather, so a burst of check-ins costs a few queries instead of one each.
//!
//! Like the group commit, the task holds the only receiver; when it stops, pending reads
//! get a `Backend` error and the next read spawns a new task. It ends when the last clone
//! of the store is dropped.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use snitch_core::{Case, Snitch, StorageError};
use sqlx::postgres::PgPool;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::records::{SnitchCaseRow, CASE_OF_SNITCH_COLUMNS, SNITCH_COLUMNS};

/// The most tokens one query reads.
pub(crate) const MAX_READ_BATCH: usize = 512;
/// How many batched reads run at once, each on a connection of the pool.
pub(crate) const READ_CONCURRENCY: usize = 4;

static SELECT_WITH_CASES: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {SNITCH_COLUMNS}, {CASE_OF_SNITCH_COLUMNS} \
         FROM snitch.snitches s LEFT JOIN snitch.cases c ON c.id = s.case_id \
         WHERE s.token = ANY($1)"
    )
});

type Pair = (Snitch, Option<Case>);

/// An answer every read of one token in a batch shares.
#[derive(Debug, Clone)]
enum Shared {
    Backend(Arc<sqlx::Error>),
    Corrupt(String),
}

impl From<Shared> for StorageError {
    fn from(e: Shared) -> Self {
        match e {
            Shared::Backend(e) => StorageError::Backend(Box::new(e)),
            Shared::Corrupt(detail) => StorageError::Corrupt(detail),
        }
    }
}

struct ReadJob {
    token: String,
    reply: oneshot::Sender<Result<Option<Pair>, Shared>>,
}

/// The reading side of a store: the queue to its batching task.
#[derive(Debug)]
pub(crate) struct Reads {
    pool: PgPool,
    queue: Mutex<Option<mpsc::Sender<ReadJob>>>,
}

impl Reads {
    pub(crate) fn new(pool: PgPool) -> Self {
        Reads {
            pool,
            queue: Mutex::new(None),
        }
    }

    /// The snitch and its case, read with whatever other reads are queued.
    pub(crate) async fn snitch_with_case(&self, token: &str) -> Result<Option<Pair>, StorageError> {
        let (reply, answer) = oneshot::channel();
        let job = ReadJob {
            token: token.to_owned(),
            reply,
        };
        self.queue()?.send(job).await.map_err(|_| stopped())?;
        Ok(answer.await.map_err(|_| stopped())??)
    }

    fn queue(&self) -> Result<mpsc::Sender<ReadJob>, StorageError> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = queue.as_ref().filter(|q| !q.is_closed()) {
            return Ok(running.clone());
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| StorageError::Backend(Box::new(e)))?;
        let (sender, receiver) = mpsc::channel(MAX_READ_BATCH * 2);
        runtime.spawn(run(self.pool.clone(), receiver));
        *queue = Some(sender.clone());
        Ok(sender)
    }
}

fn stopped() -> StorageError {
    StorageError::Backend("the read-batching task stopped before answering".into())
}

async fn run(pool: PgPool, mut queue: mpsc::Receiver<ReadJob>) {
    let slots = Arc::new(Semaphore::new(READ_CONCURRENCY));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let mut batch = Vec::with_capacity(MAX_READ_BATCH);
        if queue.recv_many(&mut batch, MAX_READ_BATCH).await == 0 {
            return;
        }
        let pool = pool.clone();
        tokio::spawn(async move {
            read(&pool, batch).await;
            drop(slot);
        });
    }
}

/// Reads the batch's tokens in one query and answers every job.
async fn read(pool: &PgPool, batch: Vec<ReadJob>) {
    let tokens: Vec<&str> = batch.iter().map(|job| job.token.as_str()).collect();
    let rows = sqlx::query_as::<_, SnitchCaseRow>(&SELECT_WITH_CASES)
        .bind(&tokens)
        .fetch_all(pool)
        .await;
    let mut found: HashMap<String, Result<Pair, Shared>> = match rows {
        Ok(rows) => rows
            .into_iter()
            .map(|row| {
                let token = row.token().to_owned();
                let pair = row.into_pair().map_err(|e| match e {
                    StorageError::Corrupt(detail) => Shared::Corrupt(detail),
                    other => Shared::Corrupt(other.to_string()),
                });
                (token, pair)
            })
            .collect(),
        Err(e) => {
            let e = Shared::Backend(Arc::new(e));
            for job in batch {
                // A reader that stopped waiting needs no answer.
                let _ = job.reply.send(Err(e.clone()));
            }
            return;
        }
    };
    let mut readers: HashMap<String, usize> = HashMap::new();
    for job in &batch {
        *readers.entry(job.token.clone()).or_default() += 1;
    }
    for job in batch {
        let last = readers.get_mut(&job.token).is_none_or(|n| {
            *n -= 1;
            *n == 0
        });
        // The last reader of a token takes the row, the others a copy.
        let answer = if last {
            found.remove(&job.token)
        } else {
            found.get(&job.token).cloned()
        };
        // A reader that stopped waiting needs no answer.
        let _ = job.reply.send(answer.transpose());
    }
}
