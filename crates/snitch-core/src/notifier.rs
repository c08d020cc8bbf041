//! The outbound side: adapters that tell people about events (webhooks, e-mail) plug in
//! here. The core decides *what* to say and *to whom*; a notifier only delivers.

use async_trait::async_trait;

use crate::snitch::Event;
use crate::types::{Case, EmailAddress};

/// Why a delivery failed; `retryable` failures are tried again later.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct NotifyError {
    pub message: String,
    pub retryable: bool,
}

/// Delivers one event through one channel.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Notifier: Send + Sync {
    async fn notify(&self, case: &Case, event: &Event) -> Result<(), NotifyError>;
}

/// Who gets the e-mail for an event: the snitch's `alert_email` override when it has one,
/// else every team member of the case (api-v1.md section 1).
pub fn alert_recipients<'a>(case: &'a Case, event: &'a Event) -> &'a [EmailAddress] {
    if event.alert_email.is_empty() {
        &case.members
    } else {
        event.alert_email.as_slice()
    }
}
