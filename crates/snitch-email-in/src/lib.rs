//! Check-ins by e-mail: an SMTP listener that takes a message to `<token>@<domain>` as a
//! check-in of that snitch (docs/rules.md#e-mail-check-ins). It owns the SMTP dialogue and
//! the decoding of messages; what a message means is the core's (`email_check_in`), and
//! it never serves HTTP nor sends mail.
//!
//! It is not a mail server: it relays nothing, accepts only addresses of existing
//! snitches, and answers `250` to a message only once its check-ins are stored, so that a
//! sending server keeps (and retries) whatever could not be. `smtp-proto` parses the
//! commands and undoes dot-stuffing; `mail-parser` decodes the message (RFC 2047 subjects,
//! multipart bodies, transfer encodings and charsets) into UTF-8 text.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use smtp_proto::request::receiver::{DataReceiver, RequestReceiver};
use smtp_proto::{EhloResponse, Error as SmtpError, Request};
use snitch_core::{EmailVerdict, ServiceError, SnitchService, Token};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{timeout_at, Instant};
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

use snitch_core::{CheckInObserver, CheckInOutcome};

/// The largest message accepted by default (advertised with `SIZE`).
pub const EMAIL_MAX_MESSAGE_BYTES_DEFAULT: usize = 4 * 1024 * 1024;
/// How many bytes of messages all connections may hold at once by default.
pub const EMAIL_MAX_BUFFERED_BYTES_DEFAULT: usize = 64 * 1024 * 1024;
/// The steps, in KiB, in which a message being read takes its share of that budget.
const BUFFER_STEP_KIB: u32 = 64;
/// The most recipients one message may have.
pub const EMAIL_MAX_RECIPIENTS: usize = 20;
/// How many unknown or foreign recipients one connection may try before it is closed.
const REFUSED_RECIPIENTS_PER_CONNECTION: usize = 5;
/// How many malformed or out-of-order commands one connection may send before it is closed.
const BAD_COMMANDS_PER_CONNECTION: usize = 10;
/// Every this many connections, the per-address allowances that are full again are
/// forgotten (the memory of a flood from many addresses is given back).
const SWEEP_EVERY: u64 = 1024;
/// How long a sender may take for the TLS handshake after `STARTTLS`.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The limits and identity of the e-mail check-in listener.
#[derive(Clone)]
#[non_exhaustive]
pub struct EmailOptions {
    /// The domain of check-in addresses (`check_in_email_domain`): `<token>@<domain>`.
    pub domain: String,
    /// The largest message, in bytes (advertised with `SIZE`; larger ones get `552`).
    pub max_message_bytes: usize,
    /// How long the listener waits for each command or chunk of a message.
    pub command_timeout: Duration,
    /// How long one connection may last in all, however busy it keeps.
    pub session_timeout: Duration,
    /// Connections served at once, in all; more get `421` at once.
    pub max_connections: usize,
    /// Bytes of messages all connections may hold at once (never less than one message
    /// of `max_message_bytes`): a message that finds no room is read to its end and
    /// answered `452`, so its sender tries again later. What bounds the listener's memory
    /// under a flood from many addresses.
    pub max_buffered_bytes: usize,
    /// Connections one client address may hold at once.
    pub max_connections_per_address: usize,
    /// Messages (and refused recipients) one client address (IPv6: its /64) may send a
    /// minute, after a burst of the same number.
    pub messages_per_minute: NonZeroU32,
    /// `STARTTLS` with this configuration (see [`tls_config_from_pem`]); none: not offered.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl std::fmt::Debug for EmailOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailOptions")
            .field("domain", &self.domain)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("command_timeout", &self.command_timeout)
            .field("session_timeout", &self.session_timeout)
            .field("max_connections", &self.max_connections)
            .field("max_buffered_bytes", &self.max_buffered_bytes)
            .field(
                "max_connections_per_address",
                &self.max_connections_per_address,
            )
            .field("messages_per_minute", &self.messages_per_minute)
            .field("starttls", &self.tls.is_some())
            .finish()
    }
}

impl EmailOptions {
    /// Defaults for check-in addresses under `domain`: 4 MiB messages, a minute per
    /// command, ten minutes per connection, 256 connections (8 per address), 64 MiB of
    /// messages held at once, 60 messages a minute per address, no STARTTLS.
    pub fn new(domain: &str) -> Self {
        EmailOptions {
            domain: domain.trim().trim_end_matches('.').to_ascii_lowercase(),
            max_message_bytes: EMAIL_MAX_MESSAGE_BYTES_DEFAULT,
            command_timeout: Duration::from_secs(60),
            session_timeout: Duration::from_secs(600),
            max_connections: 256,
            max_connections_per_address: 8,
            max_buffered_bytes: EMAIL_MAX_BUFFERED_BYTES_DEFAULT,
            messages_per_minute: NonZeroU32::new(60).unwrap_or(NonZeroU32::MIN),
            tls: None,
        }
    }

    /// These options with messages up to `bytes`.
    #[must_use]
    pub fn with_max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// These options with a wait of `timeout` for each command, and a connection's whole
    /// life capped at ten times that.
    #[must_use]
    pub fn with_command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self.session_timeout = timeout.saturating_mul(10);
        self
    }

    /// These options with `per_minute` messages a minute per client address.
    #[must_use]
    pub fn with_messages_per_minute(mut self, per_minute: NonZeroU32) -> Self {
        self.messages_per_minute = per_minute;
        self
    }

    /// These options with at most `total` connections, `per_address` of them from one
    /// client address.
    #[must_use]
    pub fn with_connections(mut self, total: usize, per_address: usize) -> Self {
        self.max_connections = total.max(1);
        self.max_connections_per_address = per_address.max(1);
        self
    }

    /// These options with at most `bytes` of messages held at once.
    #[must_use]
    pub fn with_max_buffered_bytes(mut self, bytes: usize) -> Self {
        self.max_buffered_bytes = bytes;
        self
    }

    /// These options offering `STARTTLS` with `tls`.
    #[must_use]
    pub fn with_tls(mut self, tls: Arc<rustls::ServerConfig>) -> Self {
        self.tls = Some(tls);
        self
    }
}

/// A TLS configuration from a PEM certificate chain and a PEM private key, for
/// [`EmailOptions::with_tls`].
pub fn tls_config_from_pem(
    cert_path: &Path,
    key_path: &Path,
) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert_path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("email_tls_cert {}: {e}", cert_path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "email_tls_cert {}: no certificate in the file",
            cert_path.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key_path)
        .map_err(|e| format!("email_tls_key {}: {e}", key_path.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| format!("email_tls_cert and email_tls_key: {e}"))?;
    Ok(Arc::new(config))
}

/// The SMTP listener of check-ins by e-mail.
#[derive(Clone)]
pub struct EmailCheckIns {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EmailCheckIns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailCheckIns")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

struct Inner {
    service: SnitchService,
    options: EmailOptions,
    /// Where check-ins are counted, once [`EmailCheckIns::with_metrics`] said.
    metrics: OnceLock<Arc<dyn CheckInObserver>>,
    connections: Arc<Semaphore>,
    /// The budget of message bytes, in KiB.
    buffered: Arc<Semaphore>,
    buffered_kib: u32,
    per_address: Mutex<HashMap<IpAddr, usize>>,
    attempts: DefaultKeyedRateLimiter<IpAddr>,
}

impl EmailCheckIns {
    /// A listener recording check-ins through `service`.
    pub fn new(service: SnitchService, options: EmailOptions) -> Self {
        let quota = Quota::per_minute(options.messages_per_minute);
        // Room for one whole message at least, and for the step a message reads in.
        let budget = options
            .max_buffered_bytes
            .max(options.max_message_bytes + 1024 * BUFFER_STEP_KIB as usize);
        let buffered_kib = u32::try_from(budget.div_ceil(1024)).unwrap_or(u32::MAX >> 4);
        EmailCheckIns {
            inner: Arc::new(Inner {
                service,
                connections: Arc::new(Semaphore::new(options.max_connections)),
                buffered: Arc::new(Semaphore::new(buffered_kib as usize)),
                buffered_kib,
                per_address: Mutex::new(HashMap::new()),
                attempts: RateLimiter::keyed(quota),
                options,
                metrics: OnceLock::new(),
            }),
        }
    }

    /// This listener (and its clones), counting its check-ins in `metrics`
    /// (`snitch_check_ins_total`); the first metrics given stay.
    #[must_use]
    pub fn with_metrics(self, metrics: Arc<dyn CheckInObserver>) -> Self {
        let _ = self.inner.metrics.set(metrics);
        self
    }

    /// Bytes of messages held now, in steps of 64 KiB (for tests and operators).
    pub fn buffered_bytes(&self) -> usize {
        let free = self.inner.buffered.available_permits();
        (self.inner.buffered_kib as usize).saturating_sub(free) * 1024
    }

    /// Serves connections from `listener` until `shutdown` completes; then stops
    /// accepting and returns. A connection still open goes on until it ends or times out.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> std::io::Result<()> {
        tokio::pin!(shutdown);
        let mut accepted_count: u64 = 0;
        loop {
            let accepted = tokio::select! {
                () = &mut shutdown => return Ok(()),
                accepted = listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of files or a connection reset before it was accepted: keep
                    // serving the others.
                    tracing::warn!(error = %e, "e-mail listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            accepted_count += 1;
            if accepted_count.is_multiple_of(SWEEP_EVERY) {
                // Addresses whose allowance is full again need no entry.
                self.inner.attempts.retain_recent();
                self.inner.attempts.shrink_to_fit();
            }
            let inner = Arc::clone(&self.inner);
            tokio::spawn(async move { inner.connection(stream, peer).await });
        }
    }
}

/// A connection's place in the per-address count, given back when it ends.
struct AddressSlot<'a> {
    inner: &'a Inner,
    ip: IpAddr,
}

impl Drop for AddressSlot<'_> {
    fn drop(&mut self) {
        let mut counts = self
            .inner
            .per_address
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = counts.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// How a session over one stream ended.
enum Ended {
    /// Closed (QUIT, a timeout, the client gone, or a limit).
    Closed,
    /// The client asked for TLS: the stream is to be wrapped and served again.
    StartTls,
}

/// One reply line (or lines): the code, the enhanced status code, the text.
struct Reply(u16, &'static str, String);

fn reply(code: u16, esc: &'static str, text: impl Into<String>) -> Reply {
    Reply(code, esc, text.into())
}

impl Inner {
    /// A place for one more connection from `ip`, unless it holds its share already.
    fn address_slot(&self, ip: IpAddr) -> Option<AddressSlot<'_>> {
        let mut counts = self
            .per_address
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = counts.entry(ip).or_insert(0);
        if *n >= self.options.max_connections_per_address {
            return None;
        }
        *n += 1;
        Some(AddressSlot { inner: self, ip })
    }

    async fn connection(self: Arc<Self>, mut stream: TcpStream, peer: SocketAddr) {
        let ip = snitch_core::observer::client_address(peer.ip());
        let Ok(_permit) = Arc::clone(&self.connections).try_acquire_owned() else {
            let _ = write_reply(
                &mut stream,
                &reply(421, "4.3.2", "too many connections; try again later"),
            )
            .await;
            return;
        };
        let Some(_slot) = self.address_slot(ip) else {
            let _ = write_reply(
                &mut stream,
                &reply(421, "4.7.0", "too many connections from your address"),
            )
            .await;
            return;
        };
        let deadline = Instant::now() + self.options.session_timeout;
        let greeting = reply(
            220,
            "",
            format!("{} Snitch check-ins ESMTP", self.options.domain),
        );
        if write_reply(&mut stream, &greeting).await.is_err() {
            return;
        }
        let mut session = Session::new(&self, ip, deadline, false);
        match session.run(&mut stream).await {
            Ended::Closed => {}
            Ended::StartTls => {
                let Some(tls) = self.options.tls.clone() else {
                    return;
                };
                let handshake = TlsAcceptor::from(tls).accept(stream);
                let handshake_deadline = deadline.min(Instant::now() + TLS_HANDSHAKE_TIMEOUT);
                let Ok(Ok(mut tls_stream)) = timeout_at(handshake_deadline, handshake).await else {
                    return;
                };
                // RFC 3207: everything known before the handshake is forgotten.
                let mut session = Session::new(&self, ip, deadline, true);
                let _ = session.run(&mut tls_stream).await;
            }
        }
    }
}

/// One SMTP session: the state of the envelope being built.
struct Session<'a> {
    inner: &'a Inner,
    ip: IpAddr,
    deadline: Instant,
    tls_active: bool,
    greeted: bool,
    mail_from: bool,
    recipients: Vec<Token>,
    refused_recipients: usize,
    bad_commands: usize,
    /// Bytes read and not yet consumed.
    pending: Vec<u8>,
}

impl<'a> Session<'a> {
    fn new(inner: &'a Inner, ip: IpAddr, deadline: Instant, tls_active: bool) -> Self {
        Session {
            inner,
            ip,
            deadline,
            tls_active,
            greeted: false,
            mail_from: false,
            recipients: Vec::new(),
            refused_recipients: 0,
            bad_commands: 0,
            pending: Vec::new(),
        }
    }

    fn reset(&mut self) {
        self.mail_from = false;
        self.recipients.clear();
    }

    /// Reads more bytes into `pending`; `false` when the client is gone or too slow.
    async fn fill<S: AsyncRead + Unpin>(&mut self, stream: &mut S) -> bool {
        let mut chunk = [0u8; 8192];
        let wait_until = self
            .deadline
            .min(Instant::now() + self.inner.options.command_timeout);
        match timeout_at(wait_until, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => false,
            Ok(Ok(n)) => {
                self.pending.extend_from_slice(&chunk[..n]);
                true
            }
            Err(_elapsed) => false,
        }
    }

    /// Serves commands until the connection ends or asks for TLS.
    async fn run<S: AsyncRead + AsyncWrite + Unpin>(&mut self, stream: &mut S) -> Ended {
        let mut receiver = RequestReceiver::default();
        loop {
            let parsed = {
                let mut bytes = self.pending.iter();
                let before = bytes.len();
                let result = receiver.ingest(&mut bytes).map(Request::into_owned);
                let consumed = before - bytes.len();
                self.pending.drain(..consumed);
                result
            };
            let answer = match parsed {
                Err(SmtpError::NeedsMoreData { .. }) => {
                    if !self.fill(stream).await {
                        let _ = write_reply(stream, &self.timeout_reply()).await;
                        return Ended::Closed;
                    }
                    continue;
                }
                Ok(request) => match self.command(request, stream).await {
                    Step::Reply(answer) => answer,
                    Step::Close(answer) => {
                        let _ = write_reply(stream, &answer).await;
                        return Ended::Closed;
                    }
                    Step::Gone => return Ended::Closed,
                    Step::StartTls => return Ended::StartTls,
                },
                Err(e) => {
                    self.bad_commands += 1;
                    match e {
                        SmtpError::UnknownCommand => reply(500, "5.5.1", "command not recognized"),
                        SmtpError::ResponseTooLong => reply(500, "5.5.2", "line too long"),
                        SmtpError::InvalidSenderAddress => {
                            reply(501, "5.1.7", "invalid sender address")
                        }
                        SmtpError::InvalidRecipientAddress => {
                            reply(501, "5.1.3", "invalid recipient address")
                        }
                        SmtpError::UnsupportedParameter { .. }
                        | SmtpError::InvalidParameter { .. } => {
                            reply(555, "5.5.4", "parameter not supported")
                        }
                        _ => reply(501, "5.5.4", "syntax error"),
                    }
                }
            };
            if self.bad_commands > BAD_COMMANDS_PER_CONNECTION {
                let _ = write_reply(stream, &reply(421, "4.7.0", "too many bad commands")).await;
                return Ended::Closed;
            }
            if write_reply(stream, &answer).await.is_err() {
                return Ended::Closed;
            }
        }
    }

    fn timeout_reply(&self) -> Reply {
        reply(421, "4.4.2", "timeout; closing the connection")
    }

    fn out_of_order(&mut self, text: &'static str) -> Step {
        self.bad_commands += 1;
        Step::Reply(reply(503, "5.5.1", text))
    }

    async fn command<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        request: Request<String>,
        stream: &mut S,
    ) -> Step {
        let options = &self.inner.options;
        match request {
            Request::Ehlo { .. } => {
                self.reset();
                self.greeted = true;
                let mut ehlo = EhloResponse::new(options.domain.as_str());
                ehlo.capabilities = smtp_proto::EXT_8BIT_MIME
                    | smtp_proto::EXT_ENHANCED_STATUS_CODES
                    | smtp_proto::EXT_SIZE;
                if options.tls.is_some() && !self.tls_active {
                    ehlo.capabilities |= smtp_proto::EXT_START_TLS;
                }
                ehlo.size = options.max_message_bytes;
                let mut text = Vec::new();
                let _ = ehlo.write(&mut text);
                Step::Reply(Reply(0, "", String::from_utf8_lossy(&text).into_owned()))
            }
            Request::Helo { .. } => {
                self.reset();
                self.greeted = true;
                Step::Reply(reply(250, "", options.domain.clone()))
            }
            Request::Lhlo { .. } => {
                self.bad_commands += 1;
                Step::Reply(reply(500, "5.5.1", "this is not an LMTP server"))
            }
            Request::StartTls => {
                if self.tls_active {
                    return self.out_of_order("TLS is already active");
                }
                if options.tls.is_none() {
                    self.bad_commands += 1;
                    return Step::Reply(reply(502, "5.5.1", "STARTTLS is not offered"));
                }
                if write_reply(stream, &reply(220, "2.0.0", "ready to start TLS"))
                    .await
                    .is_err()
                {
                    return Step::Gone;
                }
                // RFC 3207: commands sent before the handshake are discarded, never run
                // inside the TLS session (the STARTTLS command injection).
                self.pending.clear();
                Step::StartTls
            }
            Request::Mail { from } => {
                if !self.greeted {
                    return self.out_of_order("send EHLO or HELO first");
                }
                if self.mail_from {
                    return self.out_of_order("a message is already started");
                }
                if from.size > options.max_message_bytes {
                    return Step::Reply(reply(
                        552,
                        "5.3.4",
                        format!(
                            "message too large: at most {} bytes",
                            options.max_message_bytes
                        ),
                    ));
                }
                if self.inner.attempts.check_key(&self.ip).is_err() {
                    return Step::Reply(reply(
                        450,
                        "4.7.1",
                        "too many messages from your address; try again later",
                    ));
                }
                self.mail_from = true;
                Step::Reply(reply(250, "2.1.0", "sender ok"))
            }
            Request::Rcpt { to } => {
                if !self.mail_from {
                    return self.out_of_order("send MAIL FROM first");
                }
                if self.recipients.len() >= EMAIL_MAX_RECIPIENTS {
                    return Step::Reply(reply(452, "4.5.3", "too many recipients"));
                }
                match self.recipient(&to.address).await {
                    Ok(token) => {
                        if !self.recipients.contains(&token) {
                            self.recipients.push(token);
                        }
                        Step::Reply(reply(250, "2.1.5", "recipient ok"))
                    }
                    Err(Refused::Storage) => Step::Reply(reply(
                        451,
                        "4.3.0",
                        "cannot look the address up now; try again later",
                    )),
                    Err(refused) => {
                        self.refused_recipients += 1;
                        let limited = self.inner.attempts.check_key(&self.ip).is_err();
                        if limited || self.refused_recipients > REFUSED_RECIPIENTS_PER_CONNECTION {
                            return Step::Close(reply(
                                421,
                                "4.7.0",
                                "too many refused recipients; closing the connection",
                            ));
                        }
                        let (esc, text) = match refused {
                            Refused::Foreign => {
                                ("5.7.1", "relaying denied: not a check-in address")
                            }
                            _ => ("5.1.1", "no such check-in address"),
                        };
                        Step::Reply(reply(550, esc, text))
                    }
                }
            }
            Request::Data => {
                if !self.mail_from {
                    return self.out_of_order("send MAIL FROM first");
                }
                if self.recipients.is_empty() {
                    return self.out_of_order("no valid recipients");
                }
                if write_reply(
                    stream,
                    &reply(354, "", "end the message with <CRLF>.<CRLF>"),
                )
                .await
                .is_err()
                {
                    return Step::Gone;
                }
                let Some(message) = self.read_message(stream).await else {
                    return Step::Close(self.timeout_reply());
                };
                let answer = match message {
                    Message::TooLarge => reply(
                        552,
                        "5.3.4",
                        format!(
                            "message too large: at most {} bytes",
                            options.max_message_bytes
                        ),
                    ),
                    Message::NoRoom => reply(
                        452,
                        "4.3.1",
                        "too many messages are being received; try again later",
                    ),
                    // The message's share of the budget is given back once it is stored.
                    Message::Whole(raw, _share) => self.store(raw).await,
                };
                self.reset();
                Step::Reply(answer)
            }
            Request::Bdat { .. } => {
                self.bad_commands += 1;
                Step::Close(reply(502, "5.5.1", "CHUNKING is not offered"))
            }
            Request::Rset => {
                self.reset();
                Step::Reply(reply(250, "2.0.0", "reset"))
            }
            Request::Noop { .. } => Step::Reply(reply(250, "2.0.0", "ok")),
            Request::Quit => Step::Close(reply(221, "2.0.0", "bye")),
            Request::Vrfy { .. } => Step::Reply(reply(
                252,
                "2.5.2",
                "cannot verify; send the message to find out",
            )),
            Request::Auth { .. } => {
                self.bad_commands += 1;
                Step::Reply(reply(
                    502,
                    "5.5.1",
                    "no authentication: this is not a relay",
                ))
            }
            Request::Expn { .. }
            | Request::Help { .. }
            | Request::Etrn { .. }
            | Request::Atrn { .. }
            | Request::Burl { .. } => {
                self.bad_commands += 1;
                Step::Reply(reply(502, "5.5.1", "command not implemented"))
            }
        }
    }

    /// The snitch an address names, if it is a check-in address of an existing snitch.
    async fn recipient(&self, address: &str) -> Result<Token, Refused> {
        let (local, domain) = address.rsplit_once('@').ok_or(Refused::Foreign)?;
        let domain = domain.trim_end_matches('.');
        if !domain.eq_ignore_ascii_case(&self.inner.options.domain) {
            return Err(Refused::Foreign);
        }
        // Tokens are lowercase; some senders change the case of the local part.
        let token = Token::parse(&local.to_ascii_lowercase()).map_err(|_| Refused::Unknown)?;
        match self.inner.service.is_check_in_address(&token).await {
            Ok(true) => Ok(token),
            Ok(false) => Err(Refused::Unknown),
            Err(e) => {
                tracing::warn!(error = %e, "e-mail check-in: recipient lookup failed");
                Err(Refused::Storage)
            }
        }
    }

    /// Reads the message after `DATA`, keeping at most the size limit (the rest is read
    /// and dropped, so the answer comes after the whole message). `None`: the client went
    /// away or was too slow.
    async fn read_message<S: AsyncRead + Unpin>(&mut self, stream: &mut S) -> Option<Message> {
        let limit = self.inner.options.max_message_bytes;
        let mut receiver = DataReceiver::new();
        let mut kept = Vec::new();
        // The share of the budget the message holds, taken as it grows.
        let mut held: Option<OwnedSemaphorePermit> = None;
        let mut held_kib = 0u32;
        let (mut too_large, mut no_room) = (false, false);
        loop {
            let done = {
                let mut bytes = self.pending.iter();
                let before = bytes.len();
                let done = receiver.ingest(&mut bytes, &mut kept);
                let consumed = before - bytes.len();
                self.pending.drain(..consumed);
                done
            };
            if kept.len() > limit {
                too_large = true;
                kept.clear();
            }
            let needed = u32::try_from(kept.len().div_ceil(1024)).unwrap_or(u32::MAX);
            if !no_room && needed > held_kib {
                let more = (needed - held_kib).max(BUFFER_STEP_KIB);
                match Arc::clone(&self.inner.buffered).try_acquire_many_owned(more) {
                    Ok(permit) => {
                        match &mut held {
                            Some(held) => held.merge(permit),
                            None => held = Some(permit),
                        }
                        held_kib += more;
                    }
                    Err(_) => no_room = true,
                }
            }
            if no_room {
                // Read on to the end, holding nothing.
                kept = Vec::new();
                held = None;
                held_kib = 0;
            }
            if done {
                return Some(if too_large {
                    Message::TooLarge
                } else if no_room {
                    Message::NoRoom
                } else {
                    Message::Whole(kept, held)
                });
            }
            if !self.fill(stream).await {
                return None;
            }
        }
    }

    /// Stores the message as a check-in of each recipient; `250` only once all are.
    async fn store(&self, raw: Vec<u8>) -> Reply {
        let (subject, body) = decode(&raw);
        let service = self.inner.service.clone();
        let recipients = self.recipients.clone();
        let metrics = self.inner.metrics.get().cloned();
        // On a task of its own: a session that ends meanwhile (the client gone, a
        // shutdown) does not cut a save in half.
        let saving = tokio::spawn(async move {
            let mut failed = 0;
            for token in recipients {
                let outcome = match service.email_check_in(token, &subject, &body).await {
                    Ok((_, verdict)) => match verdict {
                        EmailVerdict::Success => CheckInOutcome::Success,
                        EmailVerdict::Failure => CheckInOutcome::Error,
                        EmailVerdict::Start => CheckInOutcome::Start,
                        EmailVerdict::Unmatched => CheckInOutcome::Log,
                    },
                    // Deleted since RCPT: nothing to record, nothing to retry.
                    Err(ServiceError::NotFound) => CheckInOutcome::UnknownToken,
                    Err(e) => {
                        tracing::warn!(error = %e, "e-mail check-in not stored");
                        failed += 1;
                        CheckInOutcome::Failed
                    }
                };
                if let Some(metrics) = &metrics {
                    metrics.check_in(outcome);
                }
            }
            failed
        });
        match saving.await {
            Ok(0) => reply(250, "2.0.0", "check-in recorded"),
            _ => reply(
                451,
                "4.3.0",
                "the check-in could not be stored; try again later",
            ),
        }
    }
}

enum Refused {
    Foreign,
    Unknown,
    Storage,
}

enum Message {
    /// The message, and its share of the buffer budget.
    Whole(Vec<u8>, Option<OwnedSemaphorePermit>),
    TooLarge,
    /// No room in the buffer budget: not kept.
    NoRoom,
}

enum Step {
    Reply(Reply),
    Close(Reply),
    Gone,
    StartTls,
}

/// The subject and the body's text of a message, as UTF-8 (RFC 2047 words, transfer
/// encodings and charsets decoded; an HTML-only body as its text; [`plain_lines`]).
pub(crate) fn decode(raw: &[u8]) -> (String, String) {
    match mail_parser::MessageParser::default().parse(raw) {
        Some(message) => (
            message.subject().unwrap_or_default().to_owned(),
            message
                .body_text(0)
                .map(|text| plain_lines(&text))
                .unwrap_or_default(),
        ),
        None => (String::new(), String::new()),
    }
}

/// A job's output as it printed it: mail's `\r\n` line ends back to `\n`, and the blank
/// lines that transport adds at the end dropped (one `\n` kept after text that had one).
fn plain_lines(text: &str) -> String {
    let mut plain = text.replace("\r\n", "\n");
    let had_newline = plain.ends_with('\n');
    plain.truncate(plain.trim_end_matches(['\n', '\r']).len());
    if had_newline && !plain.is_empty() {
        plain.push('\n');
    }
    plain
}

async fn write_reply<S: AsyncWrite + Unpin>(stream: &mut S, answer: &Reply) -> std::io::Result<()> {
    let Reply(code, esc, text) = answer;
    let line = if *code == 0 {
        // Already formatted (the EHLO answer).
        text.clone()
    } else if esc.is_empty() {
        format!("{code} {text}\r\n")
    } else {
        format!("{code} {esc} {text}\r\n")
    };
    // A client that does not read its answers is cut off like one that does not write.
    match tokio::time::timeout(Duration::from_secs(30), async {
        stream.write_all(line.as_bytes()).await?;
        stream.flush().await
    })
    .await
    {
        Ok(result) => result,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the listener keeps of a message sent as `wire` after `DATA`.
    fn received(wire: &[u8]) -> Vec<u8> {
        let mut receiver = DataReceiver::new();
        let mut kept = Vec::new();
        let mut bytes = wire.iter();
        assert!(receiver.ingest(&mut bytes, &mut kept), "the end was seen");
        kept
    }

    #[test]
    fn dots_are_unstuffed_and_line_ends_become_newlines() {
        let kept = received(b"Subject: x\r\n\r\n..dot\r\nrsync ok\r\n\r\n\r\n.\r\n");
        assert_eq!(
            decode(&kept),
            ("x".to_owned(), ".dot\nrsync ok\n".to_owned())
        );
        // A sloppy client's bare line feeds, and the line end it adds before the dot.
        let kept = received(b"Subject: y\n\nrsync ok\n\r\n.\r\n");
        assert_eq!(decode(&kept), ("y".to_owned(), "rsync ok\n".to_owned()));
    }

    #[test]
    fn a_message_with_no_headers_or_no_text_decodes_to_empty_strings() {
        assert_eq!(decode(b""), (String::new(), String::new()));
        let (subject, body) = decode(b"\r\n\r\n");
        assert_eq!((subject.as_str(), body.trim()), ("", ""));
        let image_only = b"Subject: pic\r\nContent-Type: image/png\r\nContent-Transfer-Encoding: base64\r\n\r\niVBORw0KGgo=\r\n";
        assert_eq!(decode(image_only), ("pic".to_owned(), String::new()));
    }
}
