//! The domain of Snitch, a monitor of scheduled jobs: snitches, their UTC-aligned periods,
//! cron schedules in IANA time zones ([`CronSchedule`]), the state machine that turns check-ins and missed deadlines into events, and the
//! contracts ([`Storage`], [`Clock`], [`Notifier`]) that adapters implement.
//!
//! This crate does no I/O, never reads the wall clock (time comes from a [`Clock`] or a
//! `now` argument) and knows nothing of HTTP, SQL or JSON.

#![warn(missing_docs)]

pub mod badge;
pub mod cadence;
pub mod calendar;
pub mod channel;
mod check_in_queue;
pub mod check_in_step;
pub mod clock;
#[cfg(feature = "test-support")]
pub mod contract;
pub mod derived;
pub mod email;
pub mod error;
pub mod liveness;
pub mod machine;
pub mod notifier;
pub mod observer;
pub mod outbox;
pub mod runs;
pub mod schedule;
pub mod service;
pub mod snitch;
pub mod storage;
pub mod tokens;
pub mod types;
pub mod validation;
pub mod webhook;

pub use badge::{badge_state, snitch_badge_state, BadgeState};
pub use cadence::Cadence;
pub use calendar::{period_of, Interval, Period, Timestamp};
pub use channel::{
    ChannelConfig, ChannelKey, ChannelSettings, EventFilter, SettingSpec, SettingValue,
};
pub use check_in_step::PendingCheckIns;
pub use clock::{Clock, ManualClock, SystemClock};
pub use email::{email_check_in, EmailKeywords, EmailVerdict, KeywordScope};
pub use error::ServiceError;
pub use liveness::{CaseOutage, Outage};
pub use notifier::{ChannelTester, Notifier, NotifyError};
pub use observer::{CheckInObserver, CheckInOutcome, DeliveryObserver, DeliveryOutcome};
pub use outbox::{
    Attempt, AttemptResult, Channel, ChannelKind, ClaimLimits, Delivery, DeliveryState,
    RetryPolicy, Targets,
};
pub use runs::{AlertReason, CheckInBody, CheckInKind, OpenRun, Run, RunId};
pub use schedule::{CronSchedule, ExpectedRuns, ScheduleError};
pub use service::{EmailKeywordsInput, SnitchFields, SnitchService, SweepReport};
pub use snitch::{
    CheckIn, Event, EventKind, InvalidSnitch, Pause, PauseUntil, Snitch, SnitchRecord, SnitchState,
};
pub use storage::{ApiKeyRecord, Change, Storage, StorageError, StoreStats};
pub use tokens::{RandomTokens, SequentialTokens, TokenSource};
pub use types::{
    AlertEmails, AlertType, Case, CaseId, CheckInMessage, EmailAddress, Notes, Outcome, Plan,
    SnitchName, Status, Tag, Tags, Token,
};
pub use validation::{Validation, Validations};
pub use webhook::{Webhook, WebhookSecret, WebhookUrl};
