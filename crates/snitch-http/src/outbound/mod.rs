//! Outbound adapters that plug the core's `Notifier` trait: webhooks over HTTP(S) and
//! e-mail over SMTP, and the dispatcher that drives them from the outbox.

pub mod dispatcher;
pub mod email;
pub mod webhook;
