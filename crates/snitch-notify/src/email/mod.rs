//! E-mail alerts (docs/rules.md#e-mail-alerts).
//!
//! [`render_email`] turns an [`Event`](snitch_core::Event) into a plain-text alert;
//! [`SmtpEmailNotifier`] (feature `smtp`, lettre) sends it through a real SMTP server;
//! [`LogEmailNotifier`] writes it to the log when no SMTP server is configured.
//! `smtp_sink` (feature `test-support`) is a tiny SMTP server that keeps what it
//! receives, for tests and for trying Snitch locally without a mail server.
//!
//! The parts: `render.rs` (the content), `smtp.rs`, `log.rs`, `smtp_sink.rs`.

mod log;
mod render;
#[cfg(feature = "smtp")]
mod smtp;
#[cfg(any(test, feature = "test-support"))]
pub mod smtp_sink;

#[cfg(test)]
pub(crate) mod fixtures;

use snitch_core::{Channel, Delivery, EmailAddress, NotifyError};

pub use log::LogEmailNotifier;
pub use render::{render_email, EmailContent};
#[cfg(feature = "smtp")]
pub use smtp::{SmtpEmailNotifier, DEFAULT_SMTP_TIMEOUT};

/// The recipients of an e-mail delivery; a webhook delivery or none is a permanent failure.
fn recipients(delivery: &Delivery) -> Result<&[EmailAddress], NotifyError> {
    match &delivery.channel {
        Channel::Email { to } if to.is_empty() => Err(NotifyError::permanent("no recipients")),
        Channel::Email { to } => Ok(to),
        Channel::Webhook { .. } | Channel::Native { .. } => {
            Err(NotifyError::permanent("not an e-mail delivery"))
        }
    }
}
