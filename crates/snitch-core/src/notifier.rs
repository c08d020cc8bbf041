//! The outbound side: adapters that deliver events (webhooks, e-mail; `snitch-notify`)
//! plug in here. The core decides *what* to send and *to whom* (see [`crate::outbox`]); a
//! notifier only delivers one [`Delivery`] and says what the receiver answered.

use async_trait::async_trait;

use crate::outbox::Delivery;
use crate::snitch::Event;
use crate::types::{Case, EmailAddress};

/// A failed attempt, with what went wrong (`HTTP 500`, `timed out`, an SMTP reply, …).
///
/// Most failures are *transient* (a timeout, a refused connection, a 5xx): the dispatcher
/// retries them with backoff until the retry window closes. A *permanent* one (a target
/// refused as private, a URL or recipient that cannot be sent to at all) can never
/// succeed by trying again: the delivery is given up at once (docs/rules.md#delivery).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct NotifyError {
    /// What went wrong, for people (stored with the attempt).
    pub detail: String,
    /// Whether retrying is pointless.
    pub permanent: bool,
    /// For a transient failure, how long the receiver asked us to wait (a vendor's 429
    /// `Retry-After`): the retry comes then rather than after the usual backoff.
    pub retry_after: Option<chrono::Duration>,
    /// No request went out: the channel is held after its vendor's 429. Such a failure
    /// never gives up a delivery that no request has reached yet.
    pub held: bool,
}

impl NotifyError {
    /// A transient failure: retried.
    pub fn new(detail: impl Into<String>) -> Self {
        NotifyError {
            detail: detail.into(),
            permanent: false,
            retry_after: None,
            held: false,
        }
    }

    /// A permanent failure: given up without retries.
    pub fn permanent(detail: impl Into<String>) -> Self {
        NotifyError {
            detail: detail.into(),
            permanent: true,
            retry_after: None,
            held: false,
        }
    }

    /// A transient failure to retry no sooner than `after`.
    pub fn retry_after(detail: impl Into<String>, after: chrono::Duration) -> Self {
        NotifyError {
            detail: detail.into(),
            permanent: false,
            retry_after: Some(after),
            held: false,
        }
    }

    /// No request was made: the channel is held for `after` more (its vendor asked us to
    /// wait). The detail starts with [`crate::outbox::HELD_PREFIX`], so the attempt it
    /// records says so too.
    pub fn held(detail: impl std::fmt::Display, after: chrono::Duration) -> Self {
        NotifyError {
            detail: format!("{}{detail}", crate::outbox::HELD_PREFIX),
            permanent: false,
            retry_after: Some(after),
            held: true,
        }
    }
}

/// Sends a channel's test notification now, outside the outbox: what the dashboard's and
/// the API's test button call (docs/rules.md#channels).
#[async_trait]
pub trait ChannelTester: Send + Sync + std::fmt::Debug {
    /// Sends a test through `channel`, shown as `name`: what the vendor answered.
    async fn test(
        &self,
        channel: &crate::channel::ChannelConfig,
        name: &str,
    ) -> Result<String, NotifyError>;
}

/// Delivers through one kind of channel.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Notifier: Send + Sync {
    /// Sends one delivery; on success, what the receiver answered (e.g. `HTTP 204`).
    async fn send(&self, delivery: &Delivery) -> Result<String, NotifyError>;
}

/// Who gets the e-mail for an event: the snitch's `alert_email` override when it has one,
/// else every team member of the case (docs/rules.md#e-mail-alerts).
pub fn alert_recipients<'a>(case: &'a Case, event: &'a Event) -> &'a [EmailAddress] {
    if event.alert_email.is_empty() {
        &case.members
    } else {
        event.alert_email.as_slice()
    }
}
