//! A small SMTP server that accepts every message and keeps it in memory.
//!
//! Made for tests, and handy for trying Snitch locally without a mail server: start one
//! with [`SmtpSink::bind`]`("127.0.0.1:2525")` and set `smtp_url` to
//! `smtp://127.0.0.1:2525`; each message is also logged with `tracing::info!`.
//! It speaks just enough SMTP for ordinary clients (no TLS, no AUTH, no extensions),
//! serves connections concurrently, and stops when dropped. Not for production use.
//!
//! Compiled with the `test-support` feature (and in this crate's own tests).

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
#[non_exhaustive]
pub struct ReceivedMail {
    /// The `MAIL FROM` address, without `<>`.
    pub from: String,
    /// The `RCPT TO` addresses, in order.
    pub to: Vec<String>,
    /// The data as sent: headers and body, CRLF line endings, dot-stuffing removed.
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

    /// The address the sink listens on.
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

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::net::TcpStream;

    use super::*;

    const WAIT: Duration = Duration::from_secs(5);

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
