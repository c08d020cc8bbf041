//! Group commit for writes that are not saves of a snitch (a delivery's attempt): each
//! caller queues its write and waits for its answer; a batching task, spawned on the
//! current runtime by the first write, takes every write queued and applies them in one
//! transaction (one commit, one `fsync`), as [`crate::queue`] does for saves.
//!
//! A sweep that fails 10,000 snitches queues 10,000 deliveries, and each sent one records
//! its attempt: one transaction each made the commits of deliveries compete with the
//! sweep's own for the disk and the connections.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use snitch_core::{Attempt, AttemptResult, StorageError};
use tokio::sync::{mpsc, oneshot};

use crate::queue::TaskQueue;

/// Applies a batch of writes, answering each in order (one answer per write).
pub type ApplyBatch<T, R> =
    Arc<dyn Fn(Vec<T>) -> Pin<Box<dyn Future<Output = Vec<R>> + Send>> + Send + Sync>;

/// A write waiting for its batch, with where its answer goes.
type Queued<T, R> = (T, oneshot::Sender<R>);

/// The queue to a batching task of writes of one kind.
pub struct Batcher<T, R> {
    max_batch: usize,
    apply: ApplyBatch<T, R>,
    queue: TaskQueue<Queued<T, R>>,
}

impl<T, R> std::fmt::Debug for Batcher<T, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("max_batch", &self.max_batch)
            .finish_non_exhaustive()
    }
}

impl<T: Send + 'static, R: Send + 'static> Batcher<T, R> {
    /// A batcher applying up to `max_batch` writes at once with `apply`.
    pub fn new(max_batch: usize, apply: ApplyBatch<T, R>) -> Self {
        Batcher {
            max_batch: max_batch.max(1),
            apply,
            queue: TaskQueue::new(max_batch),
        }
    }

    /// Queues `write` and waits for its answer: `None` when no batching task could take
    /// it or the task stopped before answering (its runtime shut down). A caller that
    /// stops waiting does not withdraw the write: it may still commit.
    pub async fn submit(&self, write: T) -> Option<R> {
        let (reply, answer) = oneshot::channel();
        let sender = self
            .queue
            .sender(|receiver| run(receiver, Arc::clone(&self.apply), self.max_batch))
            .ok()?;
        sender.send((write, reply)).await.ok()?;
        answer.await.ok()
    }
}

/// A delivery's attempt to record: both SQL stores record them in batches.
#[derive(Debug)]
pub struct AttemptWrite {
    /// The delivery tried.
    pub delivery_id: String,
    /// The attempt, as `Storage::record_attempt` got it.
    pub attempt: Attempt,
    /// What it led to.
    pub result: AttemptResult,
}

impl Batcher<AttemptWrite, Result<(), StorageError>> {
    /// Records one attempt in the next batch (`Storage::record_attempt`).
    pub async fn record(
        &self,
        delivery_id: &str,
        attempt: &Attempt,
        result: AttemptResult,
    ) -> Result<(), StorageError> {
        let write = AttemptWrite {
            delivery_id: delivery_id.to_owned(),
            attempt: attempt.clone(),
            result,
        };
        self.submit(write).await.unwrap_or_else(|| {
            Err(StorageError::Backend(
                "the task recording attempts stopped before answering".into(),
            ))
        })
    }
}

/// The batching task: applies what is queued, batch after batch, until every sender is
/// gone.
async fn run<T, R>(
    mut queue: mpsc::Receiver<Queued<T, R>>,
    apply: ApplyBatch<T, R>,
    max_batch: usize,
) {
    loop {
        let mut batch = Vec::with_capacity(max_batch);
        if queue.recv_many(&mut batch, max_batch).await == 0 {
            return;
        }
        let (writes, replies): (Vec<T>, Vec<oneshot::Sender<R>>) = batch.into_iter().unzip();
        let answers = apply(writes).await;
        // A write left without an answer (none should be) gets `None` from `submit`.
        for (reply, answer) in replies.into_iter().zip(answers) {
            let _ = reply.send(answer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn writes_queued_together_are_applied_in_one_batch_and_answered_in_order() {
        let batches = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&batches);
        let doubler: Batcher<u32, u32> = Batcher::new(
            64,
            Arc::new(move |writes: Vec<u32>| {
                counted.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move { writes.into_iter().map(|w| w * 2).collect() })
            }),
        );
        // Polled together: all four are queued before the task takes any.
        let answers = tokio::join!(
            doubler.submit(1),
            doubler.submit(2),
            doubler.submit(3),
            doubler.submit(4)
        );
        assert_eq!(
            answers,
            (Some(2), Some(4), Some(6), Some(8)),
            "each its own answer"
        );
        assert_eq!(batches.load(Ordering::SeqCst), 1, "one batch for all four");
    }

    #[tokio::test]
    async fn a_write_the_batch_does_not_answer_gets_none() {
        let forgetful: Batcher<u32, u32> =
            Batcher::new(8, Arc::new(|_| Box::pin(async { Vec::new() })));
        assert_eq!(forgetful.submit(1).await, None);
    }
}
