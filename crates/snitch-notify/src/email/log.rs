//! [`LogEmailNotifier`]: alerts written to the log when no SMTP relay is configured.

use async_trait::async_trait;
use snitch_core::{Delivery, EmailAddress, Notifier, NotifyError};

use super::recipients;
use super::render::render_email;
use crate::{loggable_id, loggable_token};

/// Used when no SMTP server is configured: writes every alert to the log
/// (`tracing::info!`) and counts it as delivered.
#[derive(Debug, Clone, Default)]
pub struct LogEmailNotifier {
    check_in_base: Option<String>,
}

impl LogEmailNotifier {
    /// A notifier that logs alerts without check-in URLs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds each snitch's check-in URL (`<base>/<token>`) to its alerts.
    pub fn with_check_in_base(mut self, check_in_base: impl Into<String>) -> Self {
        self.check_in_base = Some(check_in_base.into());
        self
    }
}

#[async_trait]
impl Notifier for LogEmailNotifier {
    async fn send(&self, delivery: &Delivery) -> Result<String, NotifyError> {
        let to = recipients(delivery)?;
        let content = render_email(&delivery.event, self.check_in_base.as_deref());
        let to: Vec<&str> = to.iter().map(EmailAddress::as_str).collect();
        // The e-mail names the snitch's token (its check-in URL); the log shows only its
        // first characters.
        let token = delivery.event.token.as_str();
        let shown = loggable_token(token);
        tracing::info!(
            delivery = %loggable_id(&delivery.id),
            to = %to.join(", "),
            subject = %content.subject.replace(token, &shown),
            "e-mail alert (no smtp_url configured, not sent):\n{}",
            content.text.replace(token, &shown)
        );
        Ok("written to the log".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use snitch_core::{Channel, WebhookUrl};

    use super::super::fixtures::missing_delivery;
    use super::*;

    #[tokio::test]
    async fn the_log_notifier_counts_as_delivered() {
        let notifier = LogEmailNotifier::new().with_check_in_base("https://nosnch.in");
        assert_eq!(
            notifier.send(&missing_delivery()).await,
            Ok("written to the log".to_owned())
        );
    }

    #[tokio::test]
    async fn webhook_deliveries_are_refused() {
        let mut delivery = missing_delivery();
        delivery.channel = Channel::Webhook {
            hook_id: "h1".into(),
            url: WebhookUrl::parse("https://hooks.example.test/x").expect("url"),
            secret: None,
        };
        let err = LogEmailNotifier::new()
            .send(&delivery)
            .await
            .expect_err("not e-mail");
        assert_eq!(err.detail, "not an e-mail delivery");
    }
}
