//! Check-ins through the service: each token's queue, the batch's step and save, and the
//! retry from a fresh read when another server changed the snitch meanwhile.

use futures::channel::oneshot;

use super::*;

impl SnitchService {
    /// Records a check-in at the snitch's secret URL. No case is involved: the token is
    /// the secret, and check-ins count even for a case on hold.
    ///
    /// Concurrent check-ins of one snitch are saved together (see `check_in_queue`), so
    /// each is recorded however many workers share the URL. Drive the future to the end
    /// (an HTTP server should spawn it): a caller dropped while it leads a batch passes the
    /// others on, but its own check-in may or may not be saved.
    pub async fn check_in(
        &self,
        token: &str,
        outcome: Outcome,
        message: Option<CheckInMessage>,
    ) -> Result<Snitch, ServiceError> {
        let token = Token::parse(token).map_err(|_| ServiceError::NotFound)?;
        self.check_in_token(token, outcome, message).await
    }

    /// [`SnitchService::check_in`] of a token already parsed (the check-in endpoint
    /// parses it from the path, and answers 404 to a text that is no token).
    pub async fn check_in_token(
        &self,
        token: Token,
        outcome: Outcome,
        message: Option<CheckInMessage>,
    ) -> Result<Snitch, ServiceError> {
        let report = CheckIn::new(Timestamp::default(), outcome, message);
        self.report(token, report).await
    }

    /// Records a check-in of any kind (docs/rules.md#runs): a run's start or end, with its
    /// run id, reported duration and output, or output alone. Its time is now: `at` is
    /// ignored.
    pub async fn report(&self, token: Token, report: CheckIn) -> Result<Snitch, ServiceError> {
        let now = self.now();
        self.notice_stall(now).await?;
        let check_in = CheckIn { at: now, ..report };
        let queues = &self.check_in_queues;
        let (own, others) = match queues.enter(&token, &check_in) {
            Entry::Lead => (check_in, Vec::new()),
            Entry::Queued(turn) => match turn.await {
                Ok(Turn::Done(outcome)) => {
                    return outcome
                        .map(|saved| *saved)
                        .map_err(SharedError::into_service_error);
                }
                Ok(Turn::Lead(handover)) => handover.take(),
                // Only a leader that vanished without passing on drops the channel; save
                // this check-in on its own then.
                Err(oneshot::Canceled) => {
                    return self.save_check_ins(&token, vec![check_in]).await;
                }
            },
        };
        let mut leadership = Leadership {
            queues,
            token: token.clone(),
            others: Some(others),
        };
        let others = leadership.others.as_deref().unwrap_or_default();
        let mut batch = Vec::with_capacity(1 + others.len());
        batch.push(own);
        batch.extend(others.iter().map(|w| w.check_in.clone()));
        let outcome = self.save_check_ins(&token, batch).await;
        answer(leadership.others.take().unwrap_or_default(), &outcome);
        queues.pass_on(&token, Vec::new());
        outcome
    }

    /// Saves check-ins of one snitch, in order, as one change; retried from a fresh read
    /// when the snitch changed meanwhile (a sweep, an update, another server).
    pub(super) async fn save_check_ins(
        &self,
        token: &Token,
        batch: Vec<CheckIn>,
    ) -> Result<Snitch, ServiceError> {
        let mut pending =
            PendingCheckIns::new(batch, self.known_outages(), None, self.check_in_history);
        // A store that steps the snitch where it lies: its events may need the case's
        // webhooks, read (outside the store's lock) before a second, final try.
        for _ in 0..2 {
            let Some(result) = self.storage.step_in_place(token, &mut pending).await else {
                break;
            };
            match result {
                Ok(Some(change)) => {
                    self.saved(pending.wake_before.flatten(), &change);
                    return Ok(change.snitch);
                }
                Ok(None) => match pending.hooks_wanted.take() {
                    Some(case) => pending.hooks = Some(self.targets(&case).await?),
                    // Not an answer the trait allows: the read and save below is right
                    // for any store.
                    None => break,
                },
                Err(StorageError::NotFound) => return Err(ServiceError::NotFound),
                Err(StorageError::Conflict) => break,
                Err(other) => return Err(other.into()),
            }
        }
        let mut hooks = pending.hooks.take();
        for _ in 0..MAX_ATTEMPTS {
            // The snitch and its case in one read (one query, one lock).
            let (snitch, case) = self
                .storage
                .snitch_with_case(token)
                .await?
                .ok_or(ServiceError::NotFound)?;
            // A snitch whose case is gone still records check-ins.
            let case = &case.unwrap_or_else(|| Case::new(snitch.case_id.clone()));
            let change = pending.change_from(&snitch, case);
            match self
                .save_with_outbox(case, &mut hooks, &snitch, change)
                .await
            {
                Ok(saved) => return Ok(saved),
                Err(StorageError::Conflict) => continue,
                Err(StorageError::NotFound) => return Err(ServiceError::NotFound),
                Err(other) => return Err(other.into()),
            }
        }
        Err(StorageError::Conflict.into())
    }
}
