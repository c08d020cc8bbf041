//! The storage contract: what any backend must keep and answer.
//!
//! Stores persist whole snitches, with optimistic concurrency: each [`Change`] names the
//! version it was computed from, and a store refuses it with [`StorageError::Conflict`]
//! when the stored snitch moved on meanwhile. The service then reloads and steps again,
//! so concurrent check-ins and sweeps never lose an update or emit an event twice.
//!
//! Stores keep timestamps to at least millisecond precision (the service hands them whole
//! milliseconds) and keep the most recent [`Change::keep_check_ins`] (by default
//! [`crate::snitch::CHECK_INS_KEPT`]) check-ins and [`crate::snitch::EVENTS_KEPT`] events per
//! snitch.
//!
//! The contract test suite in `contract` (feature `test-support`) pins down the behaviour
//! described here; every store runs it.

use async_trait::async_trait;

use crate::calendar::Timestamp;
use crate::channel::ChannelConfig;
use crate::check_in_step::PendingCheckIns;
use crate::liveness::{CaseOutage, Outage};
use crate::outbox::{Attempt, AttemptResult, ClaimLimits, Delivery};
use crate::snitch::{CheckIn, Event, Snitch};
use crate::types::{Case, CaseId, Status, Tag, Token};
use crate::webhook::Webhook;

/// Why a store could not do what was asked.
///
/// Callers that only need to know whether to retry use [`StorageError::is_transient`]
/// and [`StorageError::is_outcome_unknown`] instead of matching variants.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// The snitch was changed by someone else since it was read; read it again.
    #[error("the snitch changed since it was read")]
    Conflict,
    /// The snitch to change does not exist (any more).
    #[error("no such snitch")]
    NotFound,
    /// The case already holds its plan's maximum number of snitches.
    #[error("the case holds its plan's maximum of {max} snitches")]
    LimitReached {
        /// The plan's maximum.
        max: u32,
    },
    /// A snitch with this token exists already.
    #[error("the token is taken")]
    DuplicateToken,
    /// The case of a new snitch is not stored.
    #[error("no such case: {0}")]
    UnknownCase(CaseId),
    /// The backend failed (connection lost, disk full, …); the operation may be retried.
    #[error("storage backend failed: {0}")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// What was stored cannot be read back as a valid value.
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    /// The write was sent and its `COMMIT` failed in a way that leaves its outcome unknown
    /// (the connection broke while committing, an I/O error in the middle of the commit):
    /// it may or may not be stored. Not transient: retrying the same write blindly may do
    /// it twice. A caller retries only what is idempotent, or reads first to find out
    /// (a versioned [`Storage::save`] is refused with [`StorageError::Conflict`] if the
    /// first one was stored; the service compares the stored snitch with its change).
    #[error("the commit failed and its outcome is unknown: {0}")]
    CommitOutcomeUnknown(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl From<crate::snitch::InvalidSnitch> for StorageError {
    fn from(e: crate::snitch::InvalidSnitch) -> Self {
        StorageError::Corrupt(e.to_string())
    }
}

impl StorageError {
    /// Whether the same operation may succeed if tried again: the backend failed
    /// (connection lost, pool exhausted, database busy) or the snitch changed since it
    /// was read (read it again, then retry). Everything else is permanent: retrying the
    /// same call gives the same answer (not found, a limit, a taken token, an unknown case,
    /// corrupt data). A commit whose outcome is unknown is not transient either (see
    /// [`StorageError::is_outcome_unknown`]).
    pub fn is_transient(&self) -> bool {
        match self {
            StorageError::Backend(_) | StorageError::Conflict => true,
            StorageError::NotFound
            | StorageError::LimitReached { .. }
            | StorageError::DuplicateToken
            | StorageError::UnknownCase(_)
            | StorageError::Corrupt(_)
            | StorageError::CommitOutcomeUnknown(_) => false,
        }
    }

    /// Whether the write may have been stored although it failed: its `COMMIT` failed
    /// with an unknown outcome. Retry it only if doing it twice is harmless, or after
    /// reading what is stored.
    pub fn is_outcome_unknown(&self) -> bool {
        matches!(self, StorageError::CommitOutcomeUnknown(_))
    }
}

/// One atomic change to a snitch: its new state, the check-ins that caused it (oldest
/// first; several when concurrent check-ins of one snitch are saved together), the events
/// it emitted and their deliveries (the outbox). A store keeps all of it or none.
///
/// Built by the service, or by [`Change::new`] from the snitch it changes (whose identity it
/// keeps); read-only, through accessors.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Change {
    /// The snitch as it is after the change; its `version` is one more than the stored one.
    pub(crate) snitch: Snitch,
    /// Oldest first; a store keeps the newest [`Change::keep_check_ins`] of the snitch's
    /// history, this change's included.
    pub(crate) check_ins: Vec<CheckIn>,
    /// How many check-ins of the snitch's history the store keeps after this change
    /// (at least 1; [`crate::snitch::CHECK_INS_KEPT`] unless the server is configured
    /// otherwise): older ones are dropped when check-ins are appended.
    pub(crate) keep_check_ins: usize,
    /// The events the change emitted, in order.
    pub(crate) events: Vec<Event>,
    /// The deliveries of `events`, to be sent by a dispatcher.
    pub(crate) deliveries: Vec<Delivery>,
    /// The ids of the outages that gave this snitch a fresh deadline in this change: the
    /// store counts the snitch once per outage for its case ([`Storage::case_outages`]).
    pub(crate) deferred_by: Vec<u64>,
    /// Whether the snitch's settings are those of the snitch the change was made from.
    pub(crate) keeps_settings: bool,
    /// Whether the snitch's [`Snitch::wake_at`] is that of the snitch the change was made
    /// from.
    pub(crate) keeps_wake_at: bool,
}

impl Change {
    /// A change computed from `before`: `after` gets the next version, and keeps the
    /// identity of `before` (token, case, creation), which no change can alter.
    pub fn new(
        before: &Snitch,
        mut after: Snitch,
        check_ins: Vec<CheckIn>,
        events: Vec<Event>,
    ) -> Self {
        after.version = before.version + 1;
        after.token = before.token.clone();
        after.case_id = before.case_id.clone();
        after.created_at = before.created_at;
        let keeps_settings = after.same_settings(before);
        let keeps_wake_at = after.wake_at() == before.wake_at();
        Change {
            keeps_settings,
            keeps_wake_at,
            snitch: after,
            check_ins,
            keep_check_ins: crate::snitch::CHECK_INS_KEPT,
            events,
            deliveries: Vec::new(),
            deferred_by: Vec::new(),
        }
    }

    /// The change with these deliveries instead (test support: stores' tests build
    /// outboxes the service would build from the case's webhooks and members).
    #[cfg(feature = "test-support")]
    pub fn with_deliveries(mut self, deliveries: Vec<Delivery>) -> Self {
        self.deliveries = deliveries;
        self
    }

    /// The change with these events instead (test support: a change the service would
    /// never make, e.g. reusing another change's event ids, to test how a store refuses it).
    #[cfg(feature = "test-support")]
    pub fn with_events(mut self, events: Vec<Event>) -> Self {
        self.events = events;
        self
    }

    /// The change with this history length instead (test support: the service sets it
    /// from its `check_in_history`; a short one makes stores trim soon).
    #[cfg(feature = "test-support")]
    pub fn with_keep_check_ins(mut self, keep: usize) -> Self {
        self.keep_check_ins = keep;
        self
    }

    /// Whether the change leaves the snitch's settings (name, tags, notes, interval,
    /// alert type and e-mails) as they were: only its state moves, as with every
    /// check-in and sweep. A store may then write the state alone.
    pub fn keeps_settings(&self) -> bool {
        self.keeps_settings
    }

    /// Whether the change leaves [`Snitch::wake_at`] where it was, as a check-in repeated
    /// within its period does: a store that indexes `wake_at` need not touch that index
    /// (the stored snitch, at [`Change::expected_version`], has the `wake_at` of the snitch
    /// the change was made from).
    pub fn keeps_wake_at(&self) -> bool {
        self.keeps_wake_at
    }

    /// The version the stored snitch must have for the change to apply.
    pub fn expected_version(&self) -> u64 {
        self.snitch.version.saturating_sub(1)
    }

    /// The snitch as it is after the change; its `version` is one more than the stored one.
    pub fn snitch(&self) -> &Snitch {
        &self.snitch
    }

    /// Makes `stored`, the snitch this change was made from (its version is
    /// [`Change::expected_version`]), the snitch after it,
    /// reusing what it holds: when the change keeps the settings, only the state and
    /// version are copied (no settings' reference counts touched, no allocation).
    pub fn apply_to(&self, stored: &mut Snitch) {
        debug_assert_eq!(
            stored.version,
            self.expected_version(),
            "applied to the snitch the change was made from"
        );
        if self.keeps_settings {
            stored.state.clone_from(&self.snitch.state);
            stored.version = self.snitch.version;
        } else {
            stored.clone_from(&self.snitch);
        }
    }

    /// The check-ins the change appends to the snitch's history, oldest first.
    pub fn check_ins(&self) -> &[CheckIn] {
        &self.check_ins
    }

    /// How many check-ins of the snitch's history the store keeps after this change (at
    /// least 1): older ones are dropped when check-ins are appended.
    pub fn keep_check_ins(&self) -> usize {
        self.keep_check_ins
    }

    /// The events the change emitted, in order.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// The deliveries of `events`, to be sent by a dispatcher.
    pub fn deliveries(&self) -> &[Delivery] {
        &self.deliveries
    }

    /// The ids of the outages that gave this snitch a fresh deadline in this change: the
    /// store counts the snitch once per outage for its case ([`Storage::case_outages`]).
    pub fn deferred_by(&self) -> &[u64] {
        &self.deferred_by
    }
}

/// What an operator watches of a store (`GET /metrics`): counted by the store at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStats {
    /// How many snitches have each status; every [`Status`] is listed, in
    /// [`Status::ALL`]'s order, 0 when none has it.
    pub snitches_by_status: Vec<(Status, u64)>,
    /// Deliveries not finished yet (waiting for an attempt, or leased to a dispatcher);
    /// `None` when the store cannot count them. A store whose count reads every pending
    /// delivery may answer with one it made at most a second before.
    pub outbox_depth: Option<u64>,
}

impl StoreStats {
    /// Stats from a count per status (missing statuses count 0).
    pub fn from_counts(
        counts: impl IntoIterator<Item = (Status, u64)>,
        outbox_depth: Option<u64>,
    ) -> Self {
        let mut by_status: Vec<(Status, u64)> = Status::ALL.iter().map(|s| (*s, 0)).collect();
        for (status, n) in counts {
            if let Some(slot) = by_status.iter_mut().find(|(s, _)| *s == status) {
                slot.1 += n;
            }
        }
        StoreStats {
            snitches_by_status: by_status,
            outbox_depth,
        }
    }
}

/// An API key as a store keeps it: never the key itself, only its digest, computed by the
/// host (the core treats it as an opaque string and compares nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// Unique, chosen by the host; what admin commands name a key by.
    pub id: String,
    /// The case the key authenticates as.
    pub case_id: CaseId,
    /// The host's digest of the key (e.g. SHA-256, hex): unique.
    pub digest: String,
    /// The first characters of the key, so a person can tell keys apart.
    pub prefix: String,
    /// What the key is for, given by whoever made it; may be empty.
    pub label: String,
    /// When the key was made.
    pub created_at: Timestamp,
    /// The latest use recorded by [`Storage::record_api_key_use`].
    pub last_used_at: Option<Timestamp>,
    /// A revoked key is kept (and listed) but authenticates nothing.
    pub revoked: bool,
}

/// A backend that keeps cases, snitches, their recent check-ins and their events.
///
/// Object-safe: hosts hold an `Arc<dyn Storage>`.
///
/// # Every method is required
///
/// No method has a default: a default weaker than the real thing (a heartbeat that finds
/// no outage, a readiness check that skips migrations, stats without the outbox depth)
/// would quietly weaken every store that forgot it, and every decorator that wraps a store
/// and forwards only what it knew of. A store that has nothing better may answer with the
/// generic versions in [`fallback`], by name, so the choice is visible where it is made.
///
/// The contract suite (`storage_contract_tests!`) tests every method.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Storage: Send + Sync {
    /// Creates the case or replaces its members, plan and hold flag.
    async fn upsert_case(&self, case: &Case) -> Result<(), StorageError>;

    /// The case with this id, if stored.
    async fn case(&self, id: &CaseId) -> Result<Option<Case>, StorageError>;

    /// Every case, by id.
    async fn cases(&self) -> Result<Vec<Case>, StorageError>;

    /// Stores a new API key. A taken id or digest is [`StorageError::DuplicateToken`]; a
    /// case that is not stored is [`StorageError::UnknownCase`].
    async fn insert_api_key(&self, key: &ApiKeyRecord) -> Result<(), StorageError>;

    /// The API keys of `case` (of every case when `None`), revoked ones included, oldest
    /// first (by `created_at`, then by order of insertion).
    async fn api_keys(&self, case: Option<CaseId>) -> Result<Vec<ApiKeyRecord>, StorageError>;

    /// Revokes a key for good; `false` when there is no key with this id.
    async fn revoke_api_key(&self, id: &str) -> Result<bool, StorageError>;

    /// Records uses of keys: each key's `last_used_at` becomes the later of the stored one
    /// and the given one. Unknown ids are ignored (the key may be gone).
    async fn record_api_key_use(&self, uses: &[(String, Timestamp)]) -> Result<(), StorageError>;

    /// Stores a new snitch, unless its case already holds `max_snitches`
    /// ([`StorageError::LimitReached`]); the count and the insert are one atomic step.
    async fn insert_snitch(&self, snitch: &Snitch, max_snitches: u32) -> Result<(), StorageError>;

    /// Stores new snitches (an import, a benchmark's set-up) as [`Storage::insert_snitch`]
    /// would one after another, in order, each case holding at most `max_snitches`; all or
    /// nothing: on any error ([`StorageError::LimitReached`] if a case would go over,
    /// [`StorageError::DuplicateToken`] if a token is taken or given twice,
    /// [`StorageError::UnknownCase`]) none is stored.
    ///
    /// When a batch breaks more than one rule, which error is reported is unspecified.
    /// ([`fallback::insert_snitches`] is a version that is all or nothing only when
    /// nothing else writes meanwhile.)
    async fn insert_snitches(
        &self,
        snitches: &[Snitch],
        max_snitches: u32,
    ) -> Result<(), StorageError>;

    /// The snitch with this token, if stored.
    async fn snitch(&self, token: &Token) -> Result<Option<Snitch>, StorageError>;

    /// The snitch and its case (`None` when the case is not stored), as one read: what a
    /// check-in needs. A store that cannot read both at once (one query, one lock) may
    /// answer [`fallback::snitch_with_case`], one read after the other.
    async fn snitch_with_case(
        &self,
        token: &Token,
    ) -> Result<Option<(Snitch, Option<Case>)>, StorageError>;

    /// A check-in's read, step and save as one operation, for a store that can step the
    /// stored snitch where it lies: under one lock, with no copy of it read out first
    /// (the memory store). The store calls [`PendingCheckIns::step`] once with the stored
    /// snitch and its case, and saves the change it answers (if any).
    ///
    /// A store that cannot answers `None`, and the service reads with
    /// [`Storage::snitch_with_case`] and saves with [`Storage::save`]. A store that can
    /// answers `Some`: [`StorageError::NotFound`] when no snitch has `token`, otherwise
    /// the change `step` answered, applied exactly as [`Storage::save`] would apply it.
    /// Nothing else may change the snitch between the step's read and the save, so such a
    /// store never answers [`StorageError::Conflict`] (nor an error whose outcome is
    /// unknown).
    async fn step_in_place(
        &self,
        token: &Token,
        pending: &mut PendingCheckIns,
    ) -> Option<Result<Option<Change>, StorageError>>;

    /// The case's snitches that carry every tag of `tags` (all of them when empty),
    /// oldest first (by `created_at`, then by order of insertion).
    async fn snitches(&self, case: &CaseId, tags: &[Tag]) -> Result<Vec<Snitch>, StorageError>;

    /// Applies a change atomically: the new snitch state, its check-ins (appended in
    /// order; the newest [`Change::keep_check_ins`] are kept) and its events. Refused with
    /// [`StorageError::Conflict`] when the stored version is not
    /// [`Change::expected_version`], or [`StorageError::NotFound`] when it is gone.
    async fn save(&self, change: &Change) -> Result<(), StorageError>;

    /// Applies changes, each as [`Storage::save`] would, and gives each one's result, in
    /// order: one change refused (stale, gone) never stops the others, and changes to one
    /// snitch apply in order, the second seeing what the first wrote. A store that cannot
    /// apply many at once (one statement, one commit) may answer [`fallback::save_all`],
    /// one save after another.
    async fn save_all(&self, changes: &[Change]) -> Vec<Result<(), StorageError>>;

    /// Removes a snitch with its check-ins and events; `false` when there was none.
    async fn delete_snitch(&self, token: &Token) -> Result<bool, StorageError>;

    /// Up to `limit` snitches whose [`Snitch::wake_at`] is at or before `now`, earliest
    /// first. Must cost about O(log n) per snitch returned, never a scan of all snitches.
    async fn due(&self, now: Timestamp, limit: usize) -> Result<Vec<Snitch>, StorageError>;

    /// Leases up to `limit` due snitches (as [`Storage::due`]) that no sweeper holds:
    /// until `lease_until`, or until the snitch is saved, no other call returns them, so
    /// sweepers on several servers share the work; a dead sweeper's snitches come back
    /// when its lease ends. Earliest first.
    async fn claim_due(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: usize,
    ) -> Result<Vec<Snitch>, StorageError>;

    /// The earliest [`Snitch::wake_at`] of all snitches, so a scheduler knows how long it
    /// may sleep.
    async fn next_wake_at(&self) -> Result<Option<Timestamp>, StorageError>;

    /// The snitch's most recent check-ins, newest first, at most `limit`.
    async fn check_ins(&self, token: &Token, limit: usize) -> Result<Vec<CheckIn>, StorageError>;

    /// The snitch's most recent events, newest first, at most `limit`.
    async fn events(&self, token: &Token, limit: usize) -> Result<Vec<Event>, StorageError>;

    /// Registers a hook. Ids are unique: a taken id gives [`StorageError::DuplicateToken`].
    async fn insert_webhook(&self, hook: &Webhook) -> Result<(), StorageError>;

    /// The case's hooks, oldest first.
    async fn webhooks(&self, case: &CaseId) -> Result<Vec<Webhook>, StorageError>;

    /// Removes a hook of the case; `false` when the case has no hook with this id.
    async fn delete_webhook(&self, case: &CaseId, id: &str) -> Result<bool, StorageError>;

    /// Adds a channel. Ids are unique: a taken id gives [`StorageError::DuplicateToken`];
    /// an unknown case gives [`StorageError::UnknownCase`].
    async fn insert_channel(&self, channel: &ChannelConfig) -> Result<(), StorageError>;

    /// The case's channels, oldest first.
    async fn channels(&self, case: &CaseId) -> Result<Vec<ChannelConfig>, StorageError>;

    /// Replaces a channel of the case (matched by case and id; everything else is taken
    /// from `channel`, `created_at` and `key` included); `false` when there is none.
    async fn update_channel(&self, channel: &ChannelConfig) -> Result<bool, StorageError>;

    /// Sets the case's badge key, replacing the one it had (docs/rules.md#badges). A key
    /// another case holds is [`StorageError::DuplicateToken`]; a case that is not stored
    /// is [`StorageError::UnknownCase`].
    async fn set_badge_key(&self, case: &CaseId, key: &str) -> Result<(), StorageError>;

    /// The case's badge key, if it has one.
    async fn badge_key(&self, case: &CaseId) -> Result<Option<String>, StorageError>;

    /// The case's badge key, storing `key` as it first when the case has none: the key
    /// the case holds afterwards. Callers racing to make a case's first key all get the
    /// one that was stored, never a key a later write replaced. A `key` another case
    /// holds is [`StorageError::DuplicateToken`]; a case that is not stored is
    /// [`StorageError::UnknownCase`].
    async fn badge_key_or_insert(&self, case: &CaseId, key: &str) -> Result<String, StorageError>;

    /// The case whose badge key is `key`, if any.
    async fn case_of_badge_key(&self, key: &str) -> Result<Option<CaseId>, StorageError>;

    /// Removes a channel of the case; `false` when the case has no channel with this id.
    /// Deliveries already in the outbox still go out.
    async fn delete_channel(&self, case: &CaseId, id: &str) -> Result<bool, StorageError>;

    /// Leases pending deliveries whose `next_attempt_at` is at or before `now`, as many
    /// as `limits` lets through (per (case, channel kind), per destination, per channel
    /// kind: see [`ClaimLimits`] for the exact rule), earliest first: their
    /// `next_attempt_at` becomes `lease_until`, so no other dispatcher takes them
    /// meanwhile, and a crashed one's are taken again after it. A flooded case or
    /// destination never keeps another's deliveries out of the claim.
    async fn claim_deliveries(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limits: &ClaimLimits,
    ) -> Result<Vec<Delivery>, StorageError>;

    /// Appends an attempt to a delivery and applies its result: delivered, retry at a
    /// time, or given up (failed). Unknown ids are [`StorageError::NotFound`].
    async fn record_attempt(
        &self,
        delivery_id: &str,
        attempt: &Attempt,
        result: AttemptResult,
    ) -> Result<(), StorageError>;

    /// The earliest `next_attempt_at` of all pending deliveries.
    async fn next_delivery_at(&self) -> Result<Option<Timestamp>, StorageError>;

    /// Records that `server` is alive at `now` and, in the same atomic step, whether
    /// service was interrupted: when the latest moment any server of the store was alive
    /// (its last heartbeat or its clean stop, this server's own included) is more than
    /// `threshold` before `now`, stores the outage from then to `now` and returns it.
    /// A store no server ever recorded has no outage. Of servers racing after one outage,
    /// exactly one gets it.
    async fn heartbeat(
        &self,
        server: &str,
        now: Timestamp,
        threshold: chrono::Duration,
    ) -> Result<Option<Outage>, StorageError>;

    /// Records that `server` stopped cleanly at `at`, its last moment alive, so the next
    /// start measures the downtime exactly.
    async fn record_stop(&self, server: &str, at: Timestamp) -> Result<(), StorageError>;

    /// The outages that ended at or after `since`, oldest first.
    async fn outages(&self, since: Timestamp) -> Result<Vec<Outage>, StorageError>;

    /// The most recent outages, newest first, at most `limit`, each with how many of the
    /// case's snitches it deferred (counted from saved [`Change::deferred_by`]; 0 when
    /// none).
    async fn case_outages(
        &self,
        case: &CaseId,
        limit: usize,
    ) -> Result<Vec<CaseOutage>, StorageError>;

    /// The deliveries of these events (any state), in the order they were stored.
    async fn deliveries(&self, event_ids: &[String]) -> Result<Vec<Delivery>, StorageError>;

    /// Whether the store can serve now: it answers and, for a database, every migration
    /// of this build is applied and the settings its durability depends on hold
    /// (`GET /readyz`). A decorator forwards it: answering for itself would hide the
    /// store's state.
    async fn check_ready(&self) -> Result<(), StorageError>;

    /// Snitches by status and the outbox depth, for metrics. Called at each scrape, never
    /// on a request path. The built-in stores count in the database;
    /// [`fallback::stats_by_scan`] reads every case's snitches and cannot tell the outbox
    /// depth.
    async fn stats(&self) -> Result<StoreStats, StorageError>;
}

/// Generic versions of a few [`Storage`] methods, in terms of the others, for a store
/// that has nothing better. Each is weaker than a store's own (slower, or not atomic, or
/// blind to something), as its doc says; a store answers with one by name.
pub mod fallback {
    use super::{Change, Storage, StorageError, StoreStats};
    use crate::snitch::Snitch;
    use crate::types::{Case, CaseId, Token};

    /// [`Storage::snitch_with_case`] as two reads, one after the other.
    pub async fn snitch_with_case(
        store: &(impl Storage + ?Sized),
        token: &Token,
    ) -> Result<Option<(Snitch, Option<Case>)>, StorageError> {
        let Some(snitch) = store.snitch(token).await? else {
            return Ok(None);
        };
        let case = store.case(&snitch.case_id).await?;
        Ok(Some((snitch, case)))
    }

    /// [`Storage::save_all`] as one [`Storage::save`] after another.
    pub async fn save_all(
        store: &(impl Storage + ?Sized),
        changes: &[Change],
    ) -> Vec<Result<(), StorageError>> {
        let mut results = Vec::with_capacity(changes.len());
        for change in changes {
            results.push(store.save(change).await);
        }
        results
    }

    /// [`Storage::insert_snitches`] as checks against what is stored, then one insert
    /// after another, deleting those it inserted if one fails: all or nothing only when
    /// nothing else writes meanwhile and the deletes succeed.
    pub async fn insert_snitches(
        store: &(impl Storage + ?Sized),
        snitches: &[Snitch],
        max_snitches: u32,
    ) -> Result<(), StorageError> {
        let mut per_case: std::collections::HashMap<&CaseId, u64> = Default::default();
        let mut seen = std::collections::HashSet::new();
        for snitch in snitches {
            if !seen.insert(snitch.token()) || store.snitch(snitch.token()).await?.is_some() {
                return Err(StorageError::DuplicateToken);
            }
            *per_case.entry(snitch.case_id()).or_default() += 1;
        }
        for (case, adding) in per_case {
            if store.case(case).await?.is_none() {
                return Err(StorageError::UnknownCase(case.clone()));
            }
            let held = store.snitches(case, &[]).await?.len() as u64;
            if held + adding > u64::from(max_snitches) {
                return Err(StorageError::LimitReached { max: max_snitches });
            }
        }
        for (done, snitch) in snitches.iter().enumerate() {
            if let Err(e) = store.insert_snitch(snitch, max_snitches).await {
                for inserted in &snitches[..done] {
                    // Best effort: the first error is the one to report.
                    let _ = store.delete_snitch(inserted.token()).await;
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// [`Storage::stats`] by reading every case's snitches (O(n)), without the outbox
    /// depth.
    pub async fn stats_by_scan(
        store: &(impl Storage + ?Sized),
    ) -> Result<StoreStats, StorageError> {
        let mut counts = Vec::new();
        for case in store.cases().await? {
            for snitch in store.snitches(&case.id, &[]).await? {
                counts.push((snitch.status(), 1));
            }
        }
        Ok(StoreStats::from_counts(counts, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_failures_and_conflicts_are_transient_the_rest_permanent() {
        let backend = StorageError::Backend("connection reset".into());
        assert!(backend.is_transient());
        assert!(StorageError::Conflict.is_transient());
        let case = CaseId::parse("acme").expect("valid");
        for permanent in [
            StorageError::NotFound,
            StorageError::LimitReached { max: 3 },
            StorageError::DuplicateToken,
            StorageError::UnknownCase(case),
            StorageError::Corrupt("bad row".into()),
            StorageError::CommitOutcomeUnknown("connection reset in COMMIT".into()),
        ] {
            assert!(!permanent.is_transient(), "{permanent}");
        }
        assert!(StorageError::CommitOutcomeUnknown("reset".into()).is_outcome_unknown());
        assert!(!StorageError::Backend("reset".into()).is_outcome_unknown());
    }

    /// A change cannot move a snitch to another case or rewrite when it was made: a store
    /// that keeps the change's snitch whole (memory) would file it under the wrong case.
    #[test]
    fn a_change_keeps_the_identity_of_the_snitch_it_changes() {
        use crate::calendar::Interval;
        use crate::types::{SnitchName, Token};
        let at = |s: &str| {
            chrono::DateTime::parse_from_rfc3339(s)
                .expect("time")
                .to_utc()
        };
        let name = SnitchName::parse("backup").expect("valid");
        let token = Token::parse("aaaaaaaaaaaaaaaaaaaa").expect("valid");
        let before = Snitch::new(
            token.clone(),
            CaseId::parse("acme").expect("valid"),
            name.clone(),
            Interval::Daily,
            at("2026-11-23T03:00:00Z"),
        );
        let impostor = Snitch::new(
            Token::parse("bbbbbbbbbbbbbbbbbbbb").expect("valid"),
            CaseId::parse("globex").expect("valid"),
            name,
            Interval::Daily,
            at("2026-11-24T03:00:00Z"),
        );
        let change = Change::new(&before, impostor, Vec::new(), Vec::new());
        assert_eq!(change.snitch().token(), &token);
        assert_eq!(change.snitch().case_id(), before.case_id());
        assert_eq!(change.snitch().created_at(), before.created_at());
        assert_eq!(change.expected_version(), before.version());
    }

    /// A store applying changes to the snitch it holds ends with each change's snitch
    /// exactly: through check-ins that fill and roll the learned offsets, an error, and
    /// a change of the settings.
    #[test]
    fn a_change_applied_in_place_leaves_exactly_its_snitch() {
        use crate::calendar::Interval;
        use crate::machine;
        use crate::snitch::{CheckIn, SMART_OFFSETS_KEPT};
        use crate::types::{Outcome, Plan, SnitchName, Token};
        let start = chrono::DateTime::parse_from_rfc3339("2026-11-23T03:00:00Z")
            .expect("time")
            .to_utc();
        let mut stored = Snitch::new(
            Token::parse("aaaaaaaaaaaaaaaaaaaa").expect("valid"),
            CaseId::parse("acme").expect("valid"),
            SnitchName::parse("backup").expect("valid"),
            Interval::Hourly,
            start,
        );
        let plan = Plan::default();
        for n in 0..(SMART_OFFSETS_KEPT as i64 + 5) {
            let check_in = CheckIn {
                at: start + chrono::Duration::minutes(61 * n),
                outcome: Outcome::from_exit_status((n == 3).then_some("1")),
                message: None,
                ..Default::default()
            };
            let step = machine::check_in(&stored, &check_in, &plan);
            let change = Change::new(&stored, step.snitch, vec![check_in], step.events);
            assert!(change.keeps_settings());
            change.apply_to(&mut stored);
            assert_eq!(&stored, change.snitch(), "after check-in {n}");
        }
        assert_eq!(stored.state.smart_offsets_ms.len(), SMART_OFFSETS_KEPT);
        let mut renamed = stored.clone();
        renamed.name = SnitchName::parse("nightly backup").expect("valid");
        let change = Change::new(&stored, renamed, Vec::new(), Vec::new());
        assert!(!change.keeps_settings());
        change.apply_to(&mut stored);
        assert_eq!(&stored, change.snitch());
        assert_eq!(stored.name().as_str(), "nightly backup");
    }
}
