//! E-mail alerts over SMTP (behaviour.md section 5, api-v1.md section 1).
//!
//! [`render_email`] turns an [`Event`] into a plain-text alert; [`SmtpEmailNotifier`]
//! sends it through a real SMTP server; [`LogEmailNotifier`] writes it to the log when no
//! SMTP server is configured. [`smtp_sink`] is a tiny SMTP server that keeps what it
//! receives, for tests and for trying Snitch locally without a mail server.

use std::fmt::Write as _;
use std::time::Duration;

use async_trait::async_trait;
use lettre::message::header::{HeaderName, HeaderValue};
use lettre::message::{Mailbox, SinglePart};
use lettre::transport::smtp::response::Response;
use lettre::{Address, AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use snitch_core::{
    Channel, Delivery, EmailAddress, Event, EventKind, Notifier, NotifyError, Outcome, Status,
};

use crate::wire::format_time;

/// How long one e-mail may take, connection included, unless told otherwise.
pub const DEFAULT_SMTP_TIMEOUT: Duration = Duration::from_secs(30);

/// What an alert says: a subject and a plain-text body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmailContent {
    pub subject: String,
    pub text: String,
}

/// `1440` as `1,440`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Renders the alert for an event. `check_in_base` (e.g. `https://nosnch.in`) adds the
/// snitch's check-in URL to the body.
pub fn render_email(event: &Event, check_in_base: Option<&str>) -> EmailContent {
    let quoted = format!("\"{}\"", one_line(event.name.as_str()));
    let at = format_time(event.at);
    let first_check_in = event.previous_status == Status::Pending;
    // Lines stay short so that an ASCII alert goes out as readable 7bit text.
    let (tail, detail) = match event.kind {
        EventKind::Missing if event.missed_periods > 1 => (
            if event.previous_status == Status::Failed {
                "is still missing"
            } else {
                "is missing"
            },
            format!(
                "It missed {} check-ins in a row; the latest deadline was {at}.",
                thousands(event.missed_periods)
            ),
        ),
        EventKind::Missing if event.previous_status == Status::Failed => (
            "is still missing",
            format!("Another deadline passed with no check-in ({at})."),
        ),
        EventKind::Missing => (
            "is missing",
            format!("No check-in arrived before its deadline ({at})."),
        ),
        EventKind::Errored => (
            "reported an error",
            format!("It checked in with a failure at {at}."),
        ),
        EventKind::Reporting if first_check_in => (
            "is reporting",
            format!("It checked in for the first time at {at}."),
        ),
        EventKind::Reporting => ("is reporting again", format!("It checked in at {at}.")),
        EventKind::Paused => ("was paused", format!("It was paused at {at}.")),
        // A kind newer than this renderer.
        _ => ("changed", format!("Its status changed at {at}.")),
    };
    let subject = format!("[Snitch] {quoted} {tail}");

    // Writing to a String cannot fail.
    let mut text = String::new();
    let _ = writeln!(text, "{quoted} {tail}.\n{detail}\n");
    let _ = writeln!(text, "Snitch:         {}", one_line(event.name.as_str()));
    let _ = writeln!(
        text,
        "Status:         {} (was {})",
        event.status.webhook_name(),
        event.previous_status.webhook_name()
    );
    let _ = writeln!(
        text,
        "Last success:   {}",
        event
            .checked_in_at
            .map_or_else(|| "never".to_owned(), format_time)
    );
    let _ = writeln!(text, "Event:          {} at {at}", event.kind.as_str());
    let _ = writeln!(text, "Token:          {}", event.token);
    if let Some(base) = check_in_base {
        let _ = writeln!(
            text,
            "Check-in URL:   {}/{}",
            base.trim_end_matches('/'),
            event.token
        );
    }
    if !event.tags.is_empty() {
        let tags: Vec<&str> = event.tags.iter().map(|t| t.as_str()).collect();
        let _ = writeln!(text, "Tags:           {}", tags.join(", "));
    }
    if let Some(check_in) = &event.check_in {
        let _ = writeln!(text, "\nThe check-in:");
        let _ = writeln!(text, "  Time:         {}", format_time(check_in.at));
        match &check_in.outcome {
            Outcome::Success => {
                let _ = writeln!(text, "  Outcome:      success");
            }
            Outcome::Error { exit_status } => {
                let _ = writeln!(text, "  Outcome:      error");
                let _ = writeln!(text, "  Exit status:  {exit_status}");
            }
        }
        if let Some(message) = &check_in.message {
            let _ = writeln!(
                text,
                "  Message:      {}",
                message.as_str().replace('\n', "\n                ")
            );
        }
    }
    let notes = event.notes.as_str().trim_end();
    if !notes.is_empty() {
        let _ = writeln!(text, "\nNotes:\n{notes}");
    }
    let _ = write!(
        text,
        "\n-- \nSent by Snitch to the snitch's alert_email list, or to its team.\n"
    );
    EmailContent { subject, text }
}

/// Header values and one-line fields must not break lines.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn recipients(delivery: &Delivery) -> Result<&[EmailAddress], NotifyError> {
    match &delivery.channel {
        Channel::Email { to } if to.is_empty() => Err(NotifyError::permanent("no recipients")),
        Channel::Email { to } => Ok(to),
        Channel::Webhook { .. } => Err(NotifyError::permanent("not an e-mail delivery")),
    }
}

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

/// Used when no SMTP server is configured: writes every alert to the log
/// (`tracing::info!`) and counts it as delivered.
#[derive(Debug, Clone, Default)]
pub struct LogEmailNotifier {
    check_in_base: Option<String>,
}

impl LogEmailNotifier {
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
        tracing::info!(
            delivery = %delivery.id,
            to = %to.join(", "),
            subject = %content.subject,
            "e-mail alert (no smtp_url configured, not sent):\n{}",
            content.text
        );
        Ok("written to the log".to_owned())
    }
}

/// A small SMTP server that accepts every message and keeps it in memory.
///
/// Made for tests, and handy for trying Snitch locally without a mail server: start one
/// with [`smtp_sink::SmtpSink::bind`]`("127.0.0.1:2525")` and set `smtp_url` to
/// `smtp://127.0.0.1:2525`; each message is also logged with `tracing::info!`.
/// It speaks just enough SMTP for ordinary clients (no TLS, no AUTH, no extensions),
/// serves connections concurrently, and stops when dropped. Not for production use.
pub mod smtp_sink {
    use std::io;
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Duration;

    use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
    use tokio::sync::mpsc;
    use tokio::task::{JoinHandle, JoinSet};

    /// Longest command or data line read at once; longer ones are split.
    const MAX_LINE: u64 = 64 * 1024;
    /// Larger messages are refused with `552`.
    const MAX_MESSAGE: usize = 10 * 1024 * 1024;

    /// One accepted message: the envelope and the data as sent (headers and body, CRLF
    /// line endings, dot-stuffing removed).
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct ReceivedMail {
        /// The `MAIL FROM` address, without `<>`.
        pub from: String,
        /// The `RCPT TO` addresses, in order.
        pub to: Vec<String>,
        pub data: String,
    }

    impl ReceivedMail {
        /// The first header of that name (case-insensitive), unfolded; raw, not decoded.
        pub fn header(&self, name: &str) -> Option<String> {
            let head = self.data.split("\r\n\r\n").next().unwrap_or_default();
            let mut value: Option<String> = None;
            for line in head.split("\r\n") {
                match &mut value {
                    Some(v) if line.starts_with([' ', '\t']) => {
                        v.push(' ');
                        v.push_str(line.trim());
                    }
                    Some(_) => break,
                    None => {
                        if let Some((n, v)) = line.split_once(':') {
                            if n.eq_ignore_ascii_case(name) {
                                value = Some(v.trim().to_owned());
                            }
                        }
                    }
                }
            }
            value
        }

        /// Everything after the header, as sent (still transfer-encoded).
        pub fn body(&self) -> &str {
            self.data
                .split_once("\r\n\r\n")
                .map_or("", |(_, body)| body)
        }
    }

    #[derive(Debug)]
    struct Shared {
        received: Mutex<Vec<ReceivedMail>>,
        fail_next: AtomicUsize,
        queue_ids: AtomicU64,
        tx: mpsc::UnboundedSender<ReceivedMail>,
    }

    /// A running sink; see the [module docs](self).
    #[derive(Debug)]
    pub struct SmtpSink {
        addr: SocketAddr,
        shared: Arc<Shared>,
        rx: tokio::sync::Mutex<mpsc::UnboundedReceiver<ReceivedMail>>,
        task: JoinHandle<()>,
    }

    impl SmtpSink {
        /// Starts a sink on a free port of 127.0.0.1. Panics if it cannot bind.
        pub async fn start() -> SmtpSink {
            SmtpSink::bind("127.0.0.1:0")
                .await
                .expect("binding the SMTP sink to 127.0.0.1")
        }

        /// Starts a sink on the given address (inside a Tokio runtime).
        pub async fn bind(addr: impl ToSocketAddrs) -> io::Result<SmtpSink> {
            let listener = TcpListener::bind(addr).await?;
            let addr = listener.local_addr()?;
            let (tx, rx) = mpsc::unbounded_channel();
            let shared = Arc::new(Shared {
                received: Mutex::new(Vec::new()),
                fail_next: AtomicUsize::new(0),
                queue_ids: AtomicU64::new(0),
                tx,
            });
            let task = tokio::spawn(serve(listener, Arc::clone(&shared)));
            Ok(SmtpSink {
                addr,
                shared,
                rx: tokio::sync::Mutex::new(rx),
                task,
            })
        }

        pub fn addr(&self) -> SocketAddr {
            self.addr
        }

        /// `smtp://127.0.0.1:<port>`: an `smtp_url` that reaches this sink.
        pub fn url(&self) -> String {
            format!("smtp://{}", self.addr)
        }

        /// The next message not yet taken by this method, waiting up to `timeout`.
        pub async fn next_mail(&self, timeout: Duration) -> Option<ReceivedMail> {
            let mut rx = self.rx.lock().await;
            tokio::time::timeout(timeout, rx.recv())
                .await
                .ok()
                .flatten()
        }

        /// Every message received so far, oldest first (whether taken by
        /// [`next_mail`](Self::next_mail) or not).
        pub fn received(&self) -> Vec<ReceivedMail> {
            self.shared
                .received
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }

        /// Answers the next `n` `DATA` commands with `451 try again later`.
        pub fn fail_next(&self, n: usize) {
            self.shared.fail_next.store(n, Ordering::SeqCst);
        }
    }

    impl Drop for SmtpSink {
        fn drop(&mut self) {
            // Dropping the serving task drops its JoinSet, which ends every session.
            self.task.abort();
        }
    }

    async fn serve(listener: TcpListener, shared: Arc<Shared>) {
        let mut sessions = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let shared = Arc::clone(&shared);
                        sessions.spawn(async move {
                            if let Err(e) = session(stream, &shared).await {
                                tracing::debug!(%peer, error = %e, "SMTP sink session ended");
                            }
                        });
                    }
                    Err(e) => {
                        // E.g. out of file descriptors: give the system a moment.
                        tracing::warn!(error = %e, "SMTP sink cannot accept");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
            }
        }
    }

    async fn read_line<R: AsyncBufRead + Unpin>(
        reader: &mut R,
        line: &mut Vec<u8>,
    ) -> io::Result<usize> {
        line.clear();
        reader.take(MAX_LINE).read_until(b'\n', line).await
    }

    /// The address in `FROM:<a@b> PARAMS` or `TO:<a@b>` after the keyword.
    fn path(arg: &str, keyword: &str) -> Option<String> {
        let head = arg.get(..keyword.len())?;
        if !head.eq_ignore_ascii_case(keyword) {
            return None;
        }
        let rest = arg[keyword.len()..].trim_start();
        let address = match rest.strip_prefix('<') {
            Some(inner) => inner.split_once('>')?.0,
            None => rest.split_whitespace().next().unwrap_or_default(),
        };
        Some(address.to_owned())
    }

    async fn session(stream: TcpStream, shared: &Shared) -> io::Result<()> {
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::new(read);
        let mut line = Vec::new();
        let mut from: Option<String> = None;
        let mut to: Vec<String> = Vec::new();
        write.write_all(b"220 snitch-smtp-sink ready\r\n").await?;
        loop {
            if read_line(&mut reader, &mut line).await? == 0 {
                return Ok(());
            }
            let command = String::from_utf8_lossy(&line);
            let command = command.trim_end_matches(['\r', '\n']);
            let (verb, arg) = command.split_once(' ').unwrap_or((command, ""));
            let reply: String = match verb.to_ascii_uppercase().as_str() {
                "EHLO" | "HELO" => "250 snitch-smtp-sink".into(),
                "MAIL" => match path(arg, "FROM:") {
                    Some(address) => {
                        from = Some(address);
                        to.clear();
                        "250 2.1.0 OK".into()
                    }
                    None => "501 5.5.4 syntax: MAIL FROM:<address>".into(),
                },
                "RCPT" if from.is_none() => "503 5.5.1 MAIL first".into(),
                "RCPT" => match path(arg, "TO:") {
                    Some(address) => {
                        to.push(address);
                        "250 2.1.5 OK".into()
                    }
                    None => "501 5.5.4 syntax: RCPT TO:<address>".into(),
                },
                "DATA" if from.is_none() || to.is_empty() => "503 5.5.1 RCPT first".into(),
                "DATA" => {
                    let fail = shared
                        .fail_next
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    if fail {
                        "451 try again later".into()
                    } else {
                        write
                            .write_all(b"354 end data with <CR><LF>.<CR><LF>\r\n")
                            .await?;
                        let Some(data) = read_data(&mut reader, &mut line).await? else {
                            return Ok(());
                        };
                        let mail = ReceivedMail {
                            from: from.take().unwrap_or_default(),
                            to: std::mem::take(&mut to),
                            data,
                        };
                        match mail.data.len() {
                            n if n > MAX_MESSAGE => "552 5.3.4 message too big".into(),
                            _ => record(shared, mail),
                        }
                    }
                }
                "RSET" => {
                    from = None;
                    to.clear();
                    "250 2.0.0 OK".into()
                }
                "NOOP" => "250 2.0.0 OK".into(),
                "QUIT" => {
                    write.write_all(b"221 2.0.0 bye\r\n").await?;
                    return Ok(());
                }
                _ => "502 5.5.2 command not implemented".into(),
            };
            // One write per reply: a reply split in two waits for the client's delayed
            // ACK (Nagle), about 40 ms a command.
            write.write_all(format!("{reply}\r\n").as_bytes()).await?;
        }
    }

    /// Reads message data up to the lone `.` line, removing dot-stuffing. `None` when the
    /// client went away first. Data beyond the size limit is read but not kept.
    async fn read_data<R: AsyncBufRead + Unpin>(
        reader: &mut R,
        line: &mut Vec<u8>,
    ) -> io::Result<Option<String>> {
        let mut data: Vec<u8> = Vec::new();
        loop {
            if read_line(reader, line).await? == 0 {
                return Ok(None);
            }
            if line.as_slice() == b".\r\n" || line.as_slice() == b".\n" {
                break;
            }
            let unstuffed = line.strip_prefix(b".").unwrap_or(line);
            if data.len() <= MAX_MESSAGE {
                data.extend_from_slice(unstuffed);
            }
        }
        Ok(Some(String::from_utf8_lossy(&data).into_owned()))
    }

    fn record(shared: &Shared, mail: ReceivedMail) -> String {
        let id = shared.queue_ids.fetch_add(1, Ordering::SeqCst) + 1;
        tracing::info!(
            from = %mail.from,
            to = %mail.to.join(", "),
            "SMTP sink received message {id}:\n{}",
            mail.data
        );
        shared
            .received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(mail.clone());
        // The receiver lives as long as the sink.
        let _ = shared.tx.send(mail);
        format!("250 2.0.0 OK queued as {id}")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use chrono::{DateTime, Utc};
    use snitch_core::{
        CaseId, CheckIn, CheckInMessage, DeliveryState, Notes, SnitchName, Tags, Token, WebhookUrl,
    };
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::net::{TcpListener, TcpStream};

    use super::smtp_sink::SmtpSink;
    use super::*;

    const WAIT: Duration = Duration::from_secs(5);

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .expect("valid time")
            .to_utc()
    }

    fn event(kind: EventKind, status: Status, previous: Status) -> Event {
        Event {
            id: "abcdefghij0123456789-3".into(),
            kind,
            at: t("2026-11-22T00:00:00Z"),
            case_id: CaseId::parse("acme").expect("case"),
            token: Token::parse("abcdefghij0123456789").expect("token"),
            name: SnitchName::parse("Nightly backup").expect("name"),
            notes: Notes::parse("Runs pg_dump on db1.\nCall Ann if it fails.").expect("notes"),
            tags: Tags::parse(&["db", "nightly"]).expect("tags"),
            alert_email: Default::default(),
            status,
            previous_status: previous,
            checked_in_at: Some(t("2026-11-20T23:05:00Z")),
            check_in: None,
            missed_periods: u64::from(kind == EventKind::Missing),
        }
    }

    fn errored() -> Event {
        let mut e = event(EventKind::Errored, Status::Errored, Status::Healthy);
        e.at = t("2026-11-21T23:04:00Z");
        e.check_in = Some(CheckIn::new(
            t("2026-11-21T23:04:00Z"),
            Outcome::from_exit_status(Some("2")),
            CheckInMessage::truncating("pg_dump: disk full"),
        ));
        e
    }

    fn email_delivery(event: Event, to: &[&str]) -> Delivery {
        Delivery {
            id: format!("{}-1", event.id),
            event,
            channel: Channel::Email {
                to: to
                    .iter()
                    .map(|a| EmailAddress::parse(a).expect("address"))
                    .collect(),
            },
            state: DeliveryState::Pending,
            next_attempt_at: None,
            attempts: Vec::new(),
        }
    }

    fn missing_delivery() -> Delivery {
        email_delivery(
            event(EventKind::Missing, Status::Failed, Status::Healthy),
            &["ann@example.test", "bob@example.org"],
        )
    }

    #[tokio::test]
    async fn renders_a_missing_alert() {
        let e = event(EventKind::Missing, Status::Failed, Status::Healthy);
        let mail = render_email(&e, Some("https://nosnch.in/"));
        assert_eq!(mail.subject, r#"[Snitch] "Nightly backup" is missing"#);
        let text = &mail.text;
        for expected in [
            "\"Nightly backup\" is missing.\nNo check-in arrived before its deadline (2026-11-22T00:00:00.000Z).\n\n",
            "Snitch:         Nightly backup\n",
            "Status:         missing (was healthy)\n",
            "Last success:   2026-11-20T23:05:00.000Z\n",
            "Event:          snitch.missing at 2026-11-22T00:00:00.000Z\n",
            "Token:          abcdefghij0123456789\n",
            "Check-in URL:   https://nosnch.in/abcdefghij0123456789\n",
            "Tags:           db, nightly\n",
            "Notes:\nRuns pg_dump on db1.\nCall Ann if it fails.\n",
        ] {
            assert!(text.contains(expected), "{expected:?} not in:\n{text}");
        }
        assert!(!text.contains("The check-in:"), "{text}");

        let mut again = e.clone();
        again.previous_status = Status::Failed;
        again.checked_in_at = None;
        let mail = render_email(&again, None);
        assert_eq!(
            mail.subject,
            r#"[Snitch] "Nightly backup" is still missing"#
        );
        assert!(mail
            .text
            .contains("Status:         missing (was missing)\n"));
        assert!(mail.text.contains("Last success:   never\n"));
        assert!(!mail.text.contains("Check-in URL"));
    }

    #[tokio::test]
    async fn renders_an_error_alert_with_message_and_exit_status() {
        let mail = render_email(&errored(), None);
        assert_eq!(
            mail.subject,
            r#"[Snitch] "Nightly backup" reported an error"#
        );
        for expected in [
            "Status:         errored (was healthy)\n",
            "Event:          snitch.errored at 2026-11-21T23:04:00.000Z\n",
            "The check-in:\n  Time:         2026-11-21T23:04:00.000Z\n",
            "  Outcome:      error\n",
            "  Exit status:  2\n",
            "  Message:      pg_dump: disk full\n",
        ] {
            assert!(
                mail.text.contains(expected),
                "{expected:?} not in:\n{}",
                mail.text
            );
        }
    }

    #[tokio::test]
    async fn renders_a_reporting_alert() {
        let mut e = event(EventKind::Reporting, Status::Healthy, Status::Failed);
        e.at = t("2026-11-22T01:00:00Z");
        e.checked_in_at = Some(e.at);
        e.check_in = Some(CheckIn::new(e.at, Outcome::Success, None));
        let mail = render_email(&e, None);
        assert_eq!(
            mail.subject,
            r#"[Snitch] "Nightly backup" is reporting again"#
        );
        assert!(mail
            .text
            .contains("Status:         healthy (was missing)\n"));
        assert!(mail.text.contains("  Outcome:      success\n"));
        assert!(!mail.text.contains("Message:"));

        e.previous_status = Status::Pending;
        let first = render_email(&e, None);
        assert_eq!(first.subject, r#"[Snitch] "Nightly backup" is reporting"#);
        assert!(first.text.contains("for the first time"));
    }

    #[tokio::test]
    async fn a_name_cannot_break_the_subject_line() {
        let mut e = event(EventKind::Missing, Status::Failed, Status::Healthy);
        e.name = SnitchName::parse("a\r\nBcc: eve@example.test").expect("name");
        let mail = render_email(&e, None);
        assert!(!mail.subject.contains(['\r', '\n']), "{:?}", mail.subject);
    }

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
            "Notes:\r\nRuns pg_dump on db1.\r\n",
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
                .contains("Notes:\r\nbefore\r\n.\r\n..two\r\nafter\r\n"),
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
        let started = Instant::now();
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
        let started = Instant::now();
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

    #[tokio::test]
    async fn the_log_notifier_counts_as_delivered() {
        let notifier = LogEmailNotifier::new().with_check_in_base("https://nosnch.in");
        assert_eq!(
            notifier.send(&missing_delivery()).await,
            Ok("written to the log".to_owned())
        );
    }

    /// Talks to the sink by hand: one command, its reply's first line.
    async fn say(
        reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
        writer: &mut tokio::net::tcp::OwnedWriteHalf,
        command: &str,
    ) -> String {
        writer.write_all(command.as_bytes()).await.expect("write");
        let mut line = String::new();
        reader.read_line(&mut line).await.expect("read");
        line
    }

    #[tokio::test]
    async fn the_sink_speaks_smtp() {
        let sink = SmtpSink::start().await;
        let (read, mut w) = TcpStream::connect(sink.addr())
            .await
            .expect("connect")
            .into_split();
        let mut r = BufReader::new(read);
        let mut greeting = String::new();
        r.read_line(&mut greeting).await.expect("greeting");
        assert!(greeting.starts_with("220 "), "{greeting}");
        assert!(say(&mut r, &mut w, "HELO me\r\n").await.starts_with("250 "));
        assert!(say(&mut r, &mut w, "RCPT TO:<x@y.test>\r\n")
            .await
            .starts_with("503 "));
        assert!(say(&mut r, &mut w, "VRFY x\r\n").await.starts_with("502 "));
        assert!(
            say(&mut r, &mut w, "MAIL FROM:<a@b.test> BODY=8BITMIME\r\n")
                .await
                .starts_with("250 ")
        );
        assert!(say(&mut r, &mut w, "DATA\r\n").await.starts_with("503 "));
        assert!(say(&mut r, &mut w, "RCPT TO:<x@y.test>\r\n")
            .await
            .starts_with("250 "));
        assert!(say(&mut r, &mut w, "rcpt to:<z@y.test>\r\n")
            .await
            .starts_with("250 "));
        assert!(say(&mut r, &mut w, "NOOP\r\n").await.starts_with("250 "));
        assert!(say(&mut r, &mut w, "DATA\r\n").await.starts_with("354 "));
        let reply = say(
            &mut r,
            &mut w,
            "Subject: hi\r\n  there\r\n\r\n..one\r\n.\r\n",
        )
        .await;
        assert!(
            reply.starts_with("250 ") && reply.contains("queued as 1"),
            "{reply}"
        );
        sink.fail_next(1);
        assert!(say(&mut r, &mut w, "MAIL FROM:<a@b.test>\r\n")
            .await
            .starts_with("250 "));
        assert!(say(&mut r, &mut w, "RCPT TO:<x@y.test>\r\n")
            .await
            .starts_with("250 "));
        assert_eq!(
            say(&mut r, &mut w, "DATA\r\n").await,
            "451 try again later\r\n"
        );
        assert!(say(&mut r, &mut w, "RSET\r\n").await.starts_with("250 "));
        assert!(say(&mut r, &mut w, "QUIT\r\n").await.starts_with("221 "));

        let mail = sink.next_mail(WAIT).await.expect("a message");
        assert_eq!(mail.from, "a@b.test");
        assert_eq!(mail.to, ["x@y.test", "z@y.test"]);
        assert_eq!(mail.data, "Subject: hi\r\n  there\r\n\r\n.one\r\n");
        assert_eq!(mail.header("subject").as_deref(), Some("hi there"));
        assert_eq!(mail.body(), ".one\r\n");
        assert!(sink.next_mail(Duration::from_millis(50)).await.is_none());
        assert_eq!(sink.received().len(), 1);
    }
}
