//! The queue of group commit: a save queues its change with a reply channel and waits;
//! a batching task, spawned on the current runtime by the first save, drains the queue
//! in batches (each store its own way) and answers every change once its batch is over.
//!
//! The batching task holds the only receiver of the queue; when it stops (its runtime
//! shut down, or it panicked), pending saves get a `Backend` error instead of waiting
//! forever, and the next save spawns a new task. It ends when the last sender (the
//! store and its clones) is gone, after applying what was queued.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use snitch_core::{Change, StorageError};
use tokio::sync::{mpsc, oneshot};

/// A change waiting for its batch, with where its result goes.
#[derive(Debug)]
pub struct Job {
    /// The change to apply.
    pub change: Change,
    reply: oneshot::Sender<Result<(), StorageError>>,
}

impl Job {
    /// The token of the changed snitch.
    pub fn token(&self) -> &str {
        self.change.snitch().token().as_str()
    }

    /// Answers the save. A caller that stopped waiting has no one to tell.
    pub fn answer(self, result: Result<(), StorageError>) {
        let _ = self.reply.send(result);
    }
}

/// Answers each job of a batch that committed with its own result, in order.
pub fn answer_all(batch: Vec<Job>, results: Vec<Result<(), StorageError>>) {
    for (job, result) in batch.into_iter().zip(results) {
        job.answer(result);
    }
}

/// The answers of a batch of `n` writes that failed as a whole: each the same `cause`, as
/// [`StorageError::CommitOutcomeUnknown`] when the commit may have reached the disk, else
/// as [`StorageError::Backend`].
pub fn failed_batch<E>(cause: E, outcome_unknown: bool, n: usize) -> Vec<Result<(), StorageError>>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let cause = Arc::new(cause);
    (0..n)
        .map(|_| {
            let shared = Box::new(Arc::clone(&cause));
            Err(if outcome_unknown {
                StorageError::CommitOutcomeUnknown(shared)
            } else {
                StorageError::Backend(shared)
            })
        })
        .collect()
}

/// The queue to a batching task spawned on the current runtime by the first message, and
/// spawned again by the next one once the task has stopped (its runtime shut down, or
/// it panicked). Saves ([`SaveQueue`]) and other batched writes
/// ([`crate::batcher::Batcher`]) both sit on one.
#[derive(Debug)]
pub(crate) struct TaskQueue<M> {
    /// Room for the batch being gathered and the next one: messages beyond that wait for
    /// room, in order, which bounds the memory a burst takes.
    capacity: usize,
    /// The queue to the running task; `None` before the first message.
    queue: Mutex<Option<mpsc::Sender<M>>>,
}

impl<M> TaskQueue<M> {
    /// A queue for batches of up to `max_batch` messages (room for two batches).
    pub(crate) fn new(max_batch: usize) -> Self {
        TaskQueue {
            capacity: max_batch.max(1).saturating_mul(2),
            queue: Mutex::new(None),
        }
    }

    /// The queue to the running task; when none runs, `spawn` makes one from the
    /// receiving end of a new queue. Fails outside a tokio runtime.
    pub(crate) fn sender<F, T>(
        &self,
        spawn: F,
    ) -> Result<mpsc::Sender<M>, tokio::runtime::TryCurrentError>
    where
        F: FnOnce(mpsc::Receiver<M>) -> T,
        T: Future<Output = ()> + Send + 'static,
    {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = queue.as_ref().filter(|q| !q.is_closed()) {
            return Ok(running.clone());
        }
        let runtime = tokio::runtime::Handle::try_current()?;
        let (sender, receiver) = mpsc::channel(self.capacity);
        runtime.spawn(spawn(receiver));
        *queue = Some(sender.clone());
        Ok(sender)
    }
}

/// The queue to a store's batching task.
#[derive(Debug)]
pub struct SaveQueue {
    queue: TaskQueue<Job>,
    batches_committed: Arc<AtomicU64>,
}

impl SaveQueue {
    /// A queue for batches of up to `max_batch` changes (room for two batches).
    pub fn new(max_batch: usize) -> Self {
        SaveQueue {
            queue: TaskQueue::new(max_batch),
            batches_committed: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Queues the change for the next batch and waits for its answer. When no batching
    /// task runs (none yet, or the last one stopped), `spawn` makes one from the
    /// receiving end of a new queue and the counter of committed batches, which it raises
    /// for each batch that committed.
    ///
    /// A caller that stops waiting does not withdraw the change: it may still commit.
    pub async fn save<F, T>(&self, change: &Change, spawn: F) -> Result<(), StorageError>
    where
        F: FnOnce(mpsc::Receiver<Job>, Arc<AtomicU64>) -> T,
        T: Future<Output = ()> + Send + 'static,
    {
        let (reply, result) = oneshot::channel();
        let job = Job {
            change: change.clone(),
            reply,
        };
        self.sender(spawn)?.send(job).await.map_err(|_| stopped())?;
        result.await.map_err(|_| stopped())?
    }

    /// How many batches committed so far.
    pub fn batches_committed(&self) -> u64 {
        self.batches_committed.load(Ordering::Relaxed)
    }

    fn sender<F, T>(&self, spawn: F) -> Result<mpsc::Sender<Job>, StorageError>
    where
        F: FnOnce(mpsc::Receiver<Job>, Arc<AtomicU64>) -> T,
        T: Future<Output = ()> + Send + 'static,
    {
        self.queue
            .sender(|receiver| spawn(receiver, Arc::clone(&self.batches_committed)))
            .map_err(|e| StorageError::Backend(Box::new(e)))
    }
}

fn stopped() -> StorageError {
    StorageError::Backend("the group-commit task stopped before answering".into())
}
