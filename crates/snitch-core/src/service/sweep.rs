//! The deadline sweep and this server's liveness: claiming due snitches, stepping and
//! saving them in batches, heartbeats, and the outages found from gaps in them
//! (docs/rules.md#outages).

use std::collections::HashMap;

use super::*;

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepReport {
    /// Snitches that changed (declared missing or resumed from a timed pause).
    pub snitches: usize,
    /// Events emitted.
    pub events: usize,
    /// Snitches whose deadline fell inside an outage and got a fresh one.
    pub deferred: usize,
}

/// What sweeping one snitch did.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Swept {
    pub(super) events: usize,
    pub(super) deferred: bool,
}

/// How far back the service keeps outages for the machine: a deadline inside one is
/// swept within seconds of the resume, so a day is ample.
pub(super) const OUTAGES_REMEMBERED: chrono::Duration = chrono::Duration::days(1);

/// This server's liveness: its name in the store, the threshold, its last heartbeat and
/// the recent outages.
pub(super) struct Liveness {
    pub(super) server: String,
    pub(super) threshold: chrono::Duration,
    pub(super) state: std::sync::Mutex<LivenessState>,
}

#[derive(Default)]
pub(super) struct LivenessState {
    pub(super) last_heartbeat: Option<Timestamp>,
    pub(super) outages: Vec<Outage>,
}

impl Liveness {
    pub(super) fn new(threshold: chrono::Duration) -> Self {
        Liveness {
            server: RandomTokens.new_token().to_string(),
            threshold,
            state: std::sync::Mutex::default(),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, LivenessState> {
        // Every update is one assignment: a panic elsewhere cannot leave it half done.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl SnitchService {
    /// The deadline sweep: brings every snitch whose deadline or timed pause is due by
    /// `now` up to date, emitting `snitch.missing` events. Costs O(log n) per due snitch.
    /// Snitches are claimed under a lease, so sweeps on several servers share the work.
    ///
    /// It first records that this server is alive (every [`heartbeat_interval`] at most),
    /// which finds an outage when no server was alive for longer than the threshold:
    /// deadlines inside it are deferred, not announced. One snitch the store fails to
    /// save does not stop the others; the first such error is returned at the end.
    pub async fn tick(&self, now: Timestamp) -> Result<SweepReport, ServiceError> {
        let now = to_millis(now);
        self.keep_alive(now).await?;
        let outages = self.known_outages();
        let mut report = SweepReport::default();
        let mut first_error = None;
        // Each case and its hooks are read once per sweep.
        let mut owners: HashMap<CaseId, (Case, Targets)> = HashMap::new();
        let claim = || {
            self.storage
                .claim_due(now, now + SWEEP_LEASE, self.sweep_batch)
        };
        let mut claimed = claim().await;
        loop {
            let due = claimed?;
            if due.is_empty() {
                return match first_error {
                    None => Ok(report),
                    Some(e) => Err(e),
                };
            }
            for snitch in &due {
                if !owners.contains_key(&snitch.case_id) {
                    let case = self
                        .storage
                        .case(&snitch.case_id)
                        .await?
                        .unwrap_or_else(|| Case::new(snitch.case_id.clone()));
                    let hooks = self.targets(&case.id).await?;
                    owners.insert(snitch.case_id.clone(), (case, hooks));
                }
            }
            // Stepped here and saved in one `save_all`, so a store that applies many
            // changes at once (Postgres: one statement per batch) does.
            let mut changes = Vec::with_capacity(due.len());
            let mut stepped = Vec::with_capacity(due.len());
            for snitch in due {
                let Some((case, hooks)) = owners.get(&snitch.case_id) else {
                    continue;
                };
                let step = machine::advance_through(&snitch, now, &outages);
                if !step.changes(&snitch) {
                    report.snitches += 1;
                    continue;
                }
                let swept = Swept {
                    events: step.events.len(),
                    deferred: !step.deferred_by.is_empty(),
                };
                let mut change = Change::new(&snitch, step.snitch, Vec::new(), step.events);
                change.deferred_by = step.deferred_by;
                self.prepare(&mut change, case, hooks);
                changes.push(change);
                stepped.push((snitch, swept));
            }
            // The next batch is claimed while this one is saved: the two take turns on
            // the database otherwise, leaving a core idle (the lease keeps this batch's
            // snitches out of the next claim).
            let (results, next) = futures::join!(self.storage.save_all(&changes), claim());
            claimed = next;
            for ((change, (before, swept)), result) in changes.iter().zip(stepped).zip(results) {
                let swept = match result {
                    Ok(()) => {
                        self.saved(before.wake_at(), change);
                        Ok(swept)
                    }
                    // A check-in (or another server) raced the sweep: read it again.
                    Err(StorageError::Conflict) => match owners.get(&before.case_id) {
                        Some((case, hooks)) => match self.storage.snitch(&before.token).await {
                            Ok(Some(fresh)) => {
                                self.sweep_one(fresh, now, case, hooks, &outages).await
                            }
                            Ok(None) => Ok(Swept::default()),
                            Err(e) => Err(e.into()),
                        },
                        None => Ok(Swept::default()),
                    },
                    Err(StorageError::NotFound) => Ok(Swept::default()),
                    // Committed after all if the store holds exactly this change's snitch
                    // (see `save_with_outbox`); otherwise the error stands.
                    Err(e) if e.is_outcome_unknown() => {
                        if self.stored_as(&change.snitch).await {
                            self.saved(before.wake_at(), change);
                            Ok(swept)
                        } else {
                            Err(e.into())
                        }
                    }
                    Err(other) => Err(other.into()),
                };
                match swept {
                    Ok(swept) => {
                        report.snitches += 1;
                        report.events += swept.events;
                        report.deferred += usize::from(swept.deferred);
                    }
                    // Its lease runs out and a later sweep takes it again.
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
    }

    /// Advances one due snitch, re-reading it when a check-in raced the sweep.
    pub(super) async fn sweep_one(
        &self,
        mut snitch: Snitch,
        now: Timestamp,
        case: &Case,
        hooks: &Targets,
        outages: &[Outage],
    ) -> Result<Swept, ServiceError> {
        let mut hooks = Some(hooks.clone());
        for _ in 0..MAX_ATTEMPTS {
            let step = machine::advance_through(&snitch, now, outages);
            if !step.changes(&snitch) {
                return Ok(Swept::default());
            }
            let swept = Swept {
                events: step.events.len(),
                deferred: !step.deferred_by.is_empty(),
            };
            let mut change = Change::new(&snitch, step.snitch, Vec::new(), step.events);
            change.deferred_by = step.deferred_by;
            match self
                .save_with_outbox(case, &mut hooks, &snitch, change)
                .await
            {
                Ok(_) => return Ok(swept),
                Err(StorageError::Conflict) => match self.storage.snitch(&snitch.token).await? {
                    Some(fresh) => snitch = fresh,
                    None => return Ok(Swept::default()),
                },
                Err(StorageError::NotFound) => return Ok(Swept::default()),
                Err(other) => return Err(other.into()),
            }
        }
        Err(StorageError::Conflict.into())
    }

    /// Records that this server is alive now, finding an outage if no server of the store
    /// was for longer than the threshold, and refreshes the outages the machine honours.
    /// The server calls it once before serving; [`SnitchService::tick`] keeps it up.
    pub async fn heartbeat(&self, now: Timestamp) -> Result<Option<Outage>, ServiceError> {
        let now = to_millis(now);
        let found = self
            .storage
            .heartbeat(&self.liveness.server, now, self.liveness.threshold)
            .await?;
        let recent = self.storage.outages(now - OUTAGES_REMEMBERED).await?;
        {
            let mut state = self.liveness.lock();
            state.last_heartbeat = Some(state.last_heartbeat.map_or(now, |t| t.max(now)));
            state.outages = recent;
        }
        if let (Some(outage), Some(hook)) = (&found, &self.on_outage) {
            hook(outage);
        }
        Ok(found)
    }

    /// Calls `hook` with each outage this server finds (e.g. to log it).
    pub fn with_outage_hook(mut self, hook: OutageHook) -> Self {
        self.on_outage = Some(hook);
        self
    }

    /// Records a clean stop at `at`, so the next start measures the downtime exactly.
    pub async fn record_stop(&self, at: Timestamp) -> Result<(), ServiceError> {
        Ok(self
            .storage
            .record_stop(&self.liveness.server, to_millis(at))
            .await?)
    }

    /// The outages the service knows of (the recent ones), oldest first.
    pub fn known_outages(&self) -> Vec<Outage> {
        self.liveness.lock().outages.clone()
    }

    /// How long no server may be alive before the gap is an outage.
    pub fn outage_threshold(&self) -> chrono::Duration {
        self.liveness.threshold
    }

    /// Sets the outage threshold (`outage_threshold_secs`; default 60 s).
    pub fn with_outage_threshold(mut self, threshold: chrono::Duration) -> Self {
        let liveness = Liveness::new(threshold);
        self.liveness = Arc::new(liveness);
        self
    }

    /// The sweep's heartbeat: at most once per [`heartbeat_interval`].
    pub(super) async fn keep_alive(&self, now: Timestamp) -> Result<(), ServiceError> {
        let last = self.liveness.lock().last_heartbeat;
        if last.is_none_or(|t| now - t >= heartbeat_interval(self.liveness.threshold)) {
            self.heartbeat(now).await?;
        }
        Ok(())
    }

    /// Before a request steps a snitch: if this server has not been alive for longer
    /// than the threshold (the process was suspended, the store unreachable), find out
    /// whether that was an outage first, so the request cannot announce its deadlines.
    pub(super) async fn notice_stall(&self, now: Timestamp) -> Result<(), ServiceError> {
        let last = self.liveness.lock().last_heartbeat;
        if last.is_some_and(|t| now - t > self.liveness.threshold) {
            self.heartbeat(now).await?;
        }
        Ok(())
    }
}
