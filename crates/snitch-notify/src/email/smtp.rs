//! [`SmtpEmailNotifier`]: alerts through an SMTP relay with lettre (feature `smtp`).

use std::time::Duration;

use async_trait::async_trait;
use lettre::message::header::{HeaderName, HeaderValue};
use lettre::message::{Mailbox, SinglePart};
use lettre::transport::smtp::response::Response;
use lettre::{Address, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use snitch_core::{Delivery, EmailAddress, Notifier, NotifyError};

use super::recipients;
use super::render::{render_email, EmailContent};

/// How long one e-mail may take, connection included, unless told otherwise.
pub const DEFAULT_SMTP_TIMEOUT: Duration = Duration::from_secs(30);
/// The message for one delivery: one e-mail to every recipient. Its `Message-ID` is built
/// from the delivery id, so a retried alert has the same one.
fn build_message(
    from: &Mailbox,
    to: &[EmailAddress],
    content: &EmailContent,
    delivery_id: &str,
) -> Result<Message, NotifyError> {
    let mut builder = Message::builder()
        .from(from.clone())
        .subject(content.subject.clone())
        .message_id(Some(format!(
            "<snitch-{delivery_id}@{}>",
            from.email.domain()
        )))
        .raw_header(HeaderValue::new(
            HeaderName::new_from_ascii_str("Auto-Submitted"),
            "auto-generated".to_owned(),
        ));
    for address in to {
        let parsed: Address = address
            .as_str()
            .parse()
            .map_err(|e| NotifyError::permanent(format!("recipient {address}: {e}")))?;
        builder = builder.to(Mailbox::new(None, parsed));
    }
    builder
        .singlepart(SinglePart::plain(content.text.clone()))
        .map_err(|e| NotifyError::permanent(format!("building the e-mail: {e}")))
}

/// The SMTP server's final reply, e.g. `250 2.0.0 Ok: queued as 1234`.
fn describe(response: &Response) -> String {
    let message: Vec<&str> = response.message().collect();
    if message.is_empty() {
        response.code().to_string()
    } else {
        format!("{} {}", response.code(), message.join(" "))
    }
}

/// Sends alerts through an SMTP server.
#[derive(Debug, Clone)]
pub struct SmtpEmailNotifier {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    timeout: Duration,
    check_in_base: Option<String>,
}

impl SmtpEmailNotifier {
    /// `smtp_url` as lettre reads it: `smtp://host:port` (plain, port 25 by default),
    /// `smtp://host?tls=required` or `?tls=opportunistic` (STARTTLS, port 587),
    /// `smtps://host` (TLS from the start, port 465); `user:password@` in it logs in.
    /// `mail_from` is an address or `Name <address>`. Sends time out after 30 s.
    pub fn new(smtp_url: &str, mail_from: &str) -> Result<Self, String> {
        Self::with_timeout(smtp_url, mail_from, DEFAULT_SMTP_TIMEOUT)
    }

    /// As [`new`](Self::new), with a limit on the whole of each send.
    pub fn with_timeout(
        smtp_url: &str,
        mail_from: &str,
        timeout: Duration,
    ) -> Result<Self, String> {
        let from: Mailbox = mail_from
            .trim()
            .parse()
            .map_err(|e| format!("invalid mail_from {mail_from:?}: {e}"))?;
        // The URL may hold a password: it is never repeated in errors.
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(smtp_url)
            .map_err(|e| format!("invalid smtp_url: {e}"))?
            .timeout(Some(timeout))
            .build();
        Ok(SmtpEmailNotifier {
            transport,
            from,
            timeout,
            check_in_base: None,
        })
    }

    /// Adds each snitch's check-in URL (`<base>/<token>`) to its alerts.
    pub fn with_check_in_base(mut self, check_in_base: impl Into<String>) -> Self {
        self.check_in_base = Some(check_in_base.into());
        self
    }
}

#[async_trait]
impl Notifier for SmtpEmailNotifier {
    async fn send(&self, delivery: &Delivery) -> Result<String, NotifyError> {
        let to = recipients(delivery)?;
        let content = render_email(&delivery.event, self.check_in_base.as_deref());
        let message = build_message(&self.from, to, &content, &delivery.id)?;
        match tokio::time::timeout(self.timeout, self.transport.send(message)).await {
            Ok(Ok(response)) => Ok(describe(&response)),
            Ok(Err(e)) => Err(NotifyError::new(format!("SMTP {e}"))),
            Err(_) => Err(NotifyError::new(format!(
                "SMTP timed out after {} ms",
                self.timeout.as_millis()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use snitch_core::clock::monotonic_now;

    use snitch_core::{Channel, EventKind, Notes, Status, WebhookUrl};
    use tokio::net::TcpListener;

    use super::super::fixtures::{email_delivery, errored, event, missing_delivery};
    use super::super::smtp_sink::SmtpSink;
    use super::super::LogEmailNotifier;
    use super::*;

    const WAIT: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn smtp_delivers_one_message_to_every_recipient() {
        let sink = SmtpSink::start().await;
        let notifier = SmtpEmailNotifier::new(&sink.url(), "Snitch <alerts@snitch.test>")
            .expect("notifier")
            .with_check_in_base("https://nosnch.in");
        let delivery = missing_delivery();

        let detail = notifier.send(&delivery).await.expect("delivered");
        assert!(detail.starts_with("250 "), "{detail}");
        assert!(detail.contains("queued as 1"), "{detail}");

        let mail = sink.next_mail(WAIT).await.expect("a message");
        assert_eq!(mail.from, "alerts@snitch.test");
        assert_eq!(mail.to, ["ann@example.test", "bob@example.org"]);
        assert_eq!(
            mail.header("From").as_deref(),
            Some("Snitch <alerts@snitch.test>")
        );
        let to = mail.header("To").expect("To");
        assert!(
            to.contains("ann@example.test") && to.contains("bob@example.org"),
            "{to}"
        );
        assert_eq!(
            mail.header("Subject").as_deref(),
            Some(r#"[Snitch] "Nightly backup" is missing"#)
        );
        assert_eq!(
            mail.header("Message-ID").as_deref(),
            Some("<snitch-abcdefghij0123456789-3-1@snitch.test>")
        );
        assert_eq!(
            mail.header("Auto-Submitted").as_deref(),
            Some("auto-generated")
        );
        assert_eq!(
            mail.header("Content-Transfer-Encoding").as_deref(),
            Some("7bit")
        );
        let body = mail.body();
        for expected in [
            "Status:         missing (was healthy)\r\n",
            "Check-in URL:   https://nosnch.in/abcdefghij0123456789\r\n",
            "Notes:\r\n  > Runs pg_dump on db1.\r\n",
        ] {
            assert!(body.contains(expected), "{expected:?} not in:\n{body}");
        }
        assert_eq!(sink.received(), [mail]);
    }

    #[tokio::test]
    async fn lines_of_dots_survive_the_trip() {
        let sink = SmtpSink::start().await;
        let notifier = SmtpEmailNotifier::new(&sink.url(), "alerts@snitch.test").expect("notifier");
        let mut delivery = missing_delivery();
        delivery.event.notes = Notes::parse("before\n.\n..two\nafter").expect("notes");
        notifier.send(&delivery).await.expect("delivered");
        let mail = sink.next_mail(WAIT).await.expect("a message");
        assert!(
            mail.body()
                .contains("Notes:\r\n  > before\r\n  > .\r\n  > ..two\r\n  > after\r\n"),
            "{}",
            mail.body()
        );
    }

    #[tokio::test]
    async fn concurrent_sends_each_arrive() {
        let sink = SmtpSink::start().await;
        let notifier = SmtpEmailNotifier::new(&sink.url(), "alerts@snitch.test").expect("notifier");
        let a = email_delivery(
            event(EventKind::Missing, Status::Failed, Status::Healthy),
            &["ann@example.test"],
        );
        let b = email_delivery(errored(), &["bob@example.org"]);
        let (ra, rb) = tokio::join!(notifier.send(&a), notifier.send(&b));
        assert!(ra.is_ok() && rb.is_ok(), "{ra:?} {rb:?}");
        let mut to: Vec<String> = Vec::new();
        for _ in 0..2 {
            to.extend(sink.next_mail(WAIT).await.expect("a message").to);
        }
        to.sort();
        assert_eq!(to, ["ann@example.test", "bob@example.org"]);
    }

    #[tokio::test]
    async fn a_451_is_a_failure_and_the_retry_succeeds() {
        let sink = SmtpSink::start().await;
        let notifier = SmtpEmailNotifier::new(&sink.url(), "alerts@snitch.test").expect("notifier");
        sink.fail_next(1);
        let err = notifier
            .send(&missing_delivery())
            .await
            .expect_err("451 fails");
        assert!(err.detail.contains("451"), "{}", err.detail);
        assert!(err.detail.contains("try again later"), "{}", err.detail);
        assert!(sink.received().is_empty());

        let detail = notifier
            .send(&missing_delivery())
            .await
            .expect("then delivered");
        assert!(detail.starts_with("250"), "{detail}");
        assert_eq!(sink.received().len(), 1);
    }

    #[tokio::test]
    async fn a_closed_port_fails_quickly() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let notifier = SmtpEmailNotifier::new(&format!("smtp://{addr}"), "alerts@snitch.test")
            .expect("notifier");
        let started = monotonic_now();
        let err = notifier
            .send(&missing_delivery())
            .await
            .expect_err("nothing listens");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!err.detail.is_empty());
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let silent = tokio::spawn(async move {
            let (_stream, _) = listener.accept().await.expect("accept");
            std::future::pending::<()>().await;
        });
        let notifier = SmtpEmailNotifier::with_timeout(
            &format!("smtp://{addr}"),
            "alerts@snitch.test",
            Duration::from_millis(300),
        )
        .expect("notifier");
        let started = monotonic_now();
        let err = notifier
            .send(&missing_delivery())
            .await
            .expect_err("no greeting");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(err.detail.contains("timed out"), "{}", err.detail);
        silent.abort();
    }

    #[tokio::test]
    async fn construction_checks_the_sender_and_the_url() {
        assert!(SmtpEmailNotifier::new("smtp://127.0.0.1:2525", "not an address").is_err());
        assert!(SmtpEmailNotifier::new("http://mail.example.test", "a@example.test").is_err());
        assert!(SmtpEmailNotifier::new("not a url", "a@example.test").is_err());
        for url in [
            "smtp://127.0.0.1:2525",
            "smtps://user:secret@mail.example.test",
            "smtp://mail.example.test:587?tls=required",
        ] {
            assert!(
                SmtpEmailNotifier::new(url, "Snitch <a@example.test>").is_ok(),
                "{url}"
            );
        }
        let err = SmtpEmailNotifier::new("smtp://user:hunter2@[bad", "a@example.test")
            .expect_err("bad url");
        assert!(!err.contains("hunter2"), "{err}");
    }

    #[tokio::test]
    async fn webhook_deliveries_are_refused() {
        let mut delivery = missing_delivery();
        delivery.channel = Channel::Webhook {
            hook_id: "h1".into(),
            url: WebhookUrl::parse("https://hooks.example.test/x").expect("url"),
            secret: None,
        };
        let smtp =
            SmtpEmailNotifier::new("smtp://127.0.0.1:1", "a@example.test").expect("notifier");
        let err = smtp.send(&delivery).await.expect_err("not e-mail");
        assert_eq!(err.detail, "not an e-mail delivery");
        let err = LogEmailNotifier::new()
            .send(&delivery)
            .await
            .expect_err("not e-mail");
        assert_eq!(err.detail, "not an e-mail delivery");
    }
}
