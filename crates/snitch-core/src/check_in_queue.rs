//! Concurrent check-ins of one snitch, saved together.
//!
//! Many workers may share one check-in URL. Saved one by one, their changes would all be
//! computed from the same version and all but one refused as stale, again and again
//! (docs/rules.md#concurrency: every concurrent check-in is answered and recorded).
//! Instead, the first check-in of a token *leads*: it saves its own check-in, and the
//! check-ins that arrive meanwhile queue behind it. When its save is done, the leader hands
//! the whole queue to one of the queued callers, who saves them as one change (the state
//! machine steps through them in order) and answers them all. So one snitch costs one save
//! per round, however many callers share it, and nobody waits for more than the save in
//! flight and its own.
//!
//! Other writers of a snitch (API updates, pauses, the dashboard) take their turn in the
//! same queue ([`CheckInQueues::writer_turn`]): a save computed from a read that a
//! check-in batch then outdates would be refused, and the loser retried, again and again
//! under load (an update could fail, or a check-in be lost, to the other writer). Holding
//! the turn, a writer's read-and-save cannot be outdated by this server. Turns alternate:
//! after a writer, the check-ins queued meanwhile go first; after a batch of check-ins, the
//! first queued writer; so neither a flood of check-ins nor of updates starves the other.
//!
//! No I/O and no runtime: a mutex around a map of queues and one-shot channels. A leader
//! whose future is dropped mid-round passes its batch on from `Drop`, and so does a lead
//! handed to a caller whose future was dropped before it took it, so no queued caller is
//! left waiting.

use std::sync::{Arc, Mutex};

use futures::channel::oneshot;

use crate::error::ServiceError;
use crate::snitch::{CheckIn, Snitch};
use crate::storage::StorageError;
use crate::types::Token;

/// A queued check-in and where its caller waits.
pub(crate) struct Waiter {
    pub(crate) check_in: CheckIn,
    reply: oneshot::Sender<Turn>,
}

/// What a queued caller is told.
pub(crate) enum Turn {
    /// Its check-in was saved (or not) with the batch of another caller.
    Done(Result<Box<Snitch>, SharedError>),
    /// It leads now: its own check-in and the others of the next batch.
    Lead(Handover),
}

impl Turn {
    /// The queued callers a turn that could not be handed over carried.
    fn into_waiters(self) -> Vec<Waiter> {
        match self {
            Turn::Done(_) => Vec::new(),
            Turn::Lead(handover) => handover.take().1,
        }
    }
}

/// The lead handed to a queued caller: its own check-in and the others of the next
/// batch. Dropped before its caller took them (the caller's future was dropped after the
/// hand-over, before it ran again), it passes the others on, as a dropped leader's
/// [`Leadership`] does: the token never stays queued behind nobody.
pub(crate) struct Handover {
    queues: Arc<CheckInQueues>,
    token: Token,
    batch: Option<(CheckIn, Vec<Waiter>)>,
}

impl Handover {
    /// The caller's own check-in and the others queued with it.
    pub(crate) fn take(mut self) -> (CheckIn, Vec<Waiter>) {
        self.batch
            .take()
            .expect("a hand-over's batch is taken once, by this call")
    }
}

impl Drop for Handover {
    fn drop(&mut self) {
        // That caller's own check-in goes with it (its future was dropped); the others
        // are still waiting.
        if let Some((_, others)) = self.batch.take() {
            self.queues.pass_on(&self.token, others);
        }
    }
}

/// An outcome shared by every caller of a batch.
#[derive(Debug, Clone)]
pub(crate) enum SharedError {
    NotFound,
    Storage(String),
}

impl SharedError {
    pub(crate) fn of(error: &ServiceError) -> Self {
        match error {
            ServiceError::NotFound => SharedError::NotFound,
            other => SharedError::Storage(other.to_string()),
        }
    }

    pub(crate) fn into_service_error(self) -> ServiceError {
        match self {
            SharedError::NotFound => ServiceError::NotFound,
            SharedError::Storage(detail) => {
                ServiceError::Storage(StorageError::Backend(detail.into()))
            }
        }
    }
}

/// How a check-in gets its turn.
pub(crate) enum Entry {
    /// No save of this token is in flight: the caller leads a batch of its own.
    Lead,
    /// It was queued behind the save in flight.
    Queued(oneshot::Receiver<Turn>),
}

/// What waits behind the turn in flight of one token.
#[derive(Default)]
struct Queue {
    check_ins: Vec<Waiter>,
    writers: std::collections::VecDeque<oneshot::Sender<WriterTurn>>,
}

/// Who held the turn that is being passed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    CheckIns,
    Writer,
}

/// The queues of the tokens that have a save in flight. A token is in the map exactly
/// while some caller holds its turn: a check-in leader or a writer.
#[derive(Default)]
pub(crate) struct CheckInQueues {
    queues: Mutex<TokenMap<Queue>>,
}

/// A writer's hold on a token's turn. Dropped (the write is done, or its future was
/// cancelled), it passes the turn on.
pub(crate) struct WriterTurn {
    queues: Arc<CheckInQueues>,
    token: Token,
    /// False once the turn was handed over or never reached its writer, so that dropping
    /// it passes nothing on a second time.
    armed: bool,
}

impl Drop for WriterTurn {
    fn drop(&mut self) {
        if self.armed {
            self.armed = false;
            self.queues
                .pass_on_from(&self.token, Vec::new(), Holder::Writer);
        }
    }
}

impl std::fmt::Debug for WriterTurn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterTurn")
            .field("token", &self.token)
            .finish()
    }
}

/// A map by token with a randomly seeded fast hash: three lookups per check-in, where
/// SipHash cost a tenth of a check-in's work. The keys come from request paths, so the
/// seed is random per map.
type TokenMap<V> = std::collections::HashMap<Token, V, foldhash::fast::RandomState>;

impl CheckInQueues {
    fn lock(&self) -> std::sync::MutexGuard<'_, TokenMap<Queue>> {
        // The map stays consistent across a panic: every change to it is one call.
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Leads a new batch, or queues behind the one in flight.
    pub(crate) fn enter(&self, token: &Token, check_in: &CheckIn) -> Entry {
        let mut queues = self.lock();
        match queues.get_mut(token) {
            Some(queue) => {
                let (reply, turn) = oneshot::channel();
                queue.check_ins.push(Waiter {
                    check_in: check_in.clone(),
                    reply,
                });
                Entry::Queued(turn)
            }
            None => {
                queues.insert(token.clone(), Queue::default());
                Entry::Lead
            }
        }
    }

    /// Waits for the token's turn for a writer other than check-ins; held until the
    /// returned turn is dropped.
    pub(crate) async fn writer_turn(self: &Arc<Self>, token: &Token) -> WriterTurn {
        let waiting = {
            let mut queues = self.lock();
            match queues.get_mut(token) {
                Some(queue) => {
                    let (reply, turn) = oneshot::channel();
                    queue.writers.push_back(reply);
                    Some(turn)
                }
                None => {
                    queues.insert(token.clone(), Queue::default());
                    None
                }
            }
        };
        match waiting {
            None => WriterTurn {
                queues: Arc::clone(self),
                token: token.clone(),
                armed: true,
            },
            Some(turn) => match turn.await {
                Ok(turn) => turn,
                // The sender is only dropped unsent when the whole map goes (the service
                // is gone); nothing else waits on this token then.
                Err(oneshot::Canceled) => WriterTurn {
                    queues: Arc::clone(self),
                    token: token.clone(),
                    armed: false,
                },
            },
        }
    }

    /// Ends a leader's round of check-ins: see [`CheckInQueues::pass_on_from`].
    pub(crate) fn pass_on(self: &Arc<Self>, token: &Token, batch: Vec<Waiter>) {
        self.pass_on_from(token, batch, Holder::CheckIns);
    }

    /// Gives the turn to the first queued writer still waiting; `false` when none is.
    /// Called with the map's lock held (the caller puts the token back when it is `true`).
    fn hand_to_writer(
        self: &Arc<Self>,
        token: &Token,
        writers: &mut std::collections::VecDeque<oneshot::Sender<WriterTurn>>,
    ) -> bool {
        while let Some(reply) = writers.pop_front() {
            let turn = WriterTurn {
                queues: Arc::clone(self),
                token: token.clone(),
                armed: true,
            };
            match reply.send(turn) {
                Ok(()) => return true,
                // That writer is gone: disarm the turn (the lock is held) and try the
                // next one.
                Err(mut turn) => turn.armed = false,
            }
        }
        false
    }

    /// Ends a turn: the first queued writer still waiting takes it (after a round of
    /// check-ins, or when no check-in waits), or the check-ins queued meanwhile go, as
    /// one batch, to the first of their callers still waiting; with nobody waiting, the
    /// token leaves the map.
    fn pass_on_from(self: &Arc<Self>, token: &Token, mut batch: Vec<Waiter>, from: Holder) {
        let mut queues = self.lock();
        // Out of the map first (one lookup when nobody queued, as on most check-ins);
        // back in if a queued caller takes the turn.
        let mut writers = std::collections::VecDeque::new();
        if let Some(mut queue) = queues.remove(token) {
            batch.append(&mut queue.check_ins);
            writers = queue.writers;
        }
        let writer_first = from == Holder::CheckIns || batch.is_empty();
        if writer_first && self.hand_to_writer(token, &mut writers) {
            queues.insert(
                token.clone(),
                Queue {
                    check_ins: batch,
                    writers,
                },
            );
            return;
        }
        while !batch.is_empty() {
            let Waiter { check_in, reply } = batch.remove(0);
            let handover = Handover {
                queues: Arc::clone(self),
                token: token.clone(),
                batch: Some((check_in, batch)),
            };
            // Should that caller drop the hand-over before it runs, its `Drop` waits for
            // this lock, so it finds the token back in the map.
            match reply.send(Turn::Lead(handover)) {
                Ok(()) => {
                    queues.insert(
                        token.clone(),
                        Queue {
                            check_ins: Vec::new(),
                            writers,
                        },
                    );
                    return;
                }
                // That caller is gone (its request was dropped): try the next one.
                Err(turn) => batch = turn.into_waiters(),
            }
        }
        // No check-in waits; a writer may still (after a writer's turn, check-ins were
        // tried first).
        if self.hand_to_writer(token, &mut writers) {
            queues.insert(
                token.clone(),
                Queue {
                    check_ins: Vec::new(),
                    writers,
                },
            );
        }
    }
}

impl std::fmt::Debug for CheckInQueues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckInQueues")
            .field("tokens", &self.lock().len())
            .finish()
    }
}

/// Answers every caller of a batch with its shared outcome.
pub(crate) fn answer(batch: Vec<Waiter>, outcome: &Result<Snitch, ServiceError>) {
    for waiter in batch {
        let shared = match outcome {
            Ok(snitch) => Ok(Box::new(snitch.clone())),
            Err(e) => Err(SharedError::of(e)),
        };
        // A caller that is gone needs no answer.
        let _ = waiter.reply.send(Turn::Done(shared));
    }
}

/// A leader's hold on its token: dropped before the round was passed on (the leading
/// future was cancelled), it passes the batch on, so the queued callers still get saved.
pub(crate) struct Leadership<'a> {
    pub(crate) queues: &'a Arc<CheckInQueues>,
    pub(crate) token: Token,
    pub(crate) others: Option<Vec<Waiter>>,
}

impl Drop for Leadership<'_> {
    fn drop(&mut self) {
        if let Some(others) = self.others.take() {
            self.queues.pass_on(&self.token, others);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Outcome;

    fn check_in(n: i64) -> CheckIn {
        CheckIn {
            at: chrono::DateTime::from_timestamp(n, 0).expect("a time"),
            outcome: Outcome::Success,
            message: None,
            ..Default::default()
        }
    }

    /// A queued caller whose future is dropped after the lead was handed to it, before it
    /// ran again, passes the rest of the batch on: the next caller leads, and once it is
    /// done the token leaves the map, so later check-ins do not queue behind nobody.
    #[test]
    fn a_lead_dropped_before_it_was_taken_is_passed_on() {
        let queues = Arc::new(CheckInQueues::default());
        let token = Token::parse("aaaaaaaaaaaaaaaaaaaa").expect("a token");
        assert!(matches!(queues.enter(&token, &check_in(1)), Entry::Lead));
        let Entry::Queued(second) = queues.enter(&token, &check_in(2)) else {
            panic!("queued behind the first");
        };
        let Entry::Queued(mut third) = queues.enter(&token, &check_in(3)) else {
            panic!("queued behind the first");
        };
        queues.pass_on(&token, Vec::new());
        // The second caller holds the lead now; its future goes before it runs again.
        drop(second);
        let Ok(Some(Turn::Lead(handover))) = third.try_recv() else {
            panic!("the third caller leads once the second is gone");
        };
        let (own, others) = handover.take();
        assert_eq!(own, check_in(3));
        assert!(others.is_empty());
        assert_eq!(
            queues.lock().len(),
            1,
            "the token is held while the third leads"
        );
        queues.pass_on(&token, others);
        assert!(queues.lock().is_empty());
        assert!(matches!(queues.enter(&token, &check_in(4)), Entry::Lead));
    }

    fn token() -> Token {
        Token::parse("aaaaaaaaaaaaaaaaaaaa").expect("a token")
    }

    /// A writer waits for the check-in batch in flight; check-ins arriving while the
    /// writer holds the turn wait for it, and lead once it is done.
    #[test]
    fn a_writer_and_check_ins_take_turns() {
        use futures::FutureExt;
        let queues = Arc::new(CheckInQueues::default());
        let token = token();
        assert!(matches!(queues.enter(&token, &check_in(1)), Entry::Lead));
        let mut writer = Box::pin(queues.writer_turn(&token));
        assert!(
            writer.as_mut().now_or_never().is_none(),
            "the writer waits for the leader"
        );
        let Entry::Queued(mut queued) = queues.enter(&token, &check_in(2)) else {
            panic!("queued behind the leader");
        };
        // The leader is done: the waiting writer goes before the check-in queued meanwhile.
        queues.pass_on(&token, Vec::new());
        let turn = writer
            .now_or_never()
            .expect("the writer holds the turn now");
        assert!(queued.try_recv().expect("not cancelled").is_none());
        let Entry::Queued(mut later) = queues.enter(&token, &check_in(3)) else {
            panic!("a check-in waits for the writer");
        };
        drop(turn);
        let Ok(Some(Turn::Lead(handover))) = queued.try_recv() else {
            panic!("the check-ins lead once the writer is done");
        };
        let (own, others) = handover.take();
        assert_eq!(own, check_in(2));
        assert_eq!(others.len(), 1, "the later check-in goes in the same batch");
        answer(others, &Err(ServiceError::NotFound));
        assert!(matches!(later.try_recv(), Ok(Some(Turn::Done(_)))));
        queues.pass_on(&token, Vec::new());
        assert!(queues.lock().is_empty(), "nobody holds the token");
    }

    /// Turns alternate: after a writer the queued check-ins go first, even when another
    /// writer waits, so a stream of API writes cannot starve check-ins; and a writer whose
    /// future was dropped while it waited is skipped.
    #[test]
    fn writers_and_check_ins_alternate() {
        use futures::FutureExt;
        let queues = Arc::new(CheckInQueues::default());
        let token = token();
        let first = queues
            .writer_turn(&token)
            .now_or_never()
            .expect("a free token's turn is taken at once");
        let mut gone = Box::pin(queues.writer_turn(&token));
        assert!(gone.as_mut().now_or_never().is_none());
        let mut second = Box::pin(queues.writer_turn(&token));
        assert!(second.as_mut().now_or_never().is_none());
        let Entry::Queued(mut queued) = queues.enter(&token, &check_in(1)) else {
            panic!("a check-in waits for the writer");
        };
        drop(first);
        let Ok(Some(Turn::Lead(handover))) = queued.try_recv() else {
            panic!("after a writer, the waiting check-ins lead");
        };
        assert!(second.as_mut().now_or_never().is_none(), "the writers wait");
        drop(gone);
        let (_, others) = handover.take();
        queues.pass_on(&token, others);
        let turn = second
            .now_or_never()
            .expect("after the check-ins, the next writer still waiting");
        drop(turn);
        assert!(queues.lock().is_empty(), "nobody holds the token");
    }
}
