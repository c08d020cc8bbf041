//! Check-ins with request lines too long for hyper.
//!
//! A check-in is never refused for its message: the message is cut to 256 characters
//! (docs/rules.md#check-ins). hyper refuses a request target over 65,534 bytes (414) and
//! a head over its read buffer (431), both with an empty body and without the check-in
//! ever reaching us. [`LongRequestLines`] sits between the socket and hyper on the
//! check-in listener: it reads each request head itself (up to [`MAX_HEAD_BYTES`]), and
//! when the request target is longer than [`LONG_TARGET_BYTES`] it cuts the query down to
//! what a check-in can use before hyper sees it: the `m` value to [`KEPT_MESSAGE_BYTES`]
//! (at least 256 characters however they are encoded, so the stored message is the same),
//! other over-long parameters dropped (a bad optional parameter never loses the check-in).
//! A head over [`MAX_HEAD_BYTES`], or a path over [`LONG_TARGET_BYTES`], is answered here
//! with a plain-text error saying what was too long.
//!
//! The framing of each request is followed (`Content-Length` bodies are passed through
//! untouched) so every request of a keep-alive connection is looked at; after a request
//! with `Transfer-Encoding` (chunked bodies, not a check-in's way) or an upgrade, the rest
//! of the connection passes through as it is.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The longest request head read (request line and headers).
pub const MAX_HEAD_BYTES: usize = 2 * 1024 * 1024;
/// A request target longer than this has its query cut down.
pub const LONG_TARGET_BYTES: usize = 8 * 1024;
/// What is kept of an over-long `m` value: 256 characters take at most 12 bytes each
/// percent-encoded (4 UTF-8 bytes, 3 characters each).
pub const KEPT_MESSAGE_BYTES: usize = 256 * 12;
/// The most header fields a head is read with (hyper's default too).
const MAX_HEADERS: usize = 100;

/// What the wrapper expects next from the client.
#[derive(Debug)]
enum State {
    /// The next request's head.
    Head,
    /// This many bytes of a body, passed through.
    Body(u64),
    /// Everything, untouched.
    PassThrough,
    /// Writing our own answer (the head was too long), then closing.
    Answer,
    /// Answered: what the client still sends is read and dropped, so closing does not
    /// reset the connection before our answer is read. hyper's header timeout ends it.
    Drain,
}

/// A stream that hands hyper request heads with over-long check-in queries cut down.
#[derive(Debug)]
pub struct LongRequestLines<S> {
    inner: S,
    state: State,
    /// Bytes read from the client and not yet handed over.
    held: Vec<u8>,
    /// How much of `held` was already searched for the end of the head.
    searched: usize,
    /// How many bytes at the start of `held` (a head, as it came or rewritten in place) to
    /// hand over before anything else.
    verbatim: usize,
    /// Our own answer while [`State::Answer`].
    answer: Vec<u8>,
    answer_at: usize,
}

impl<S> LongRequestLines<S> {
    /// Wraps a client's stream.
    pub fn new(inner: S) -> Self {
        Self::starting(inner, State::Head)
    }

    /// Wraps a client's stream without looking at it: every byte passes as it is.
    pub fn passing(inner: S) -> Self {
        Self::starting(inner, State::PassThrough)
    }

    fn starting(inner: S, state: State) -> Self {
        LongRequestLines {
            inner,
            state,
            held: Vec::new(),
            searched: 0,
            verbatim: 0,
            answer: Vec::new(),
            answer_at: 0,
        }
    }
}

/// What one complete head becomes.
enum Head {
    /// Hand the head over (rewritten, or as it was when `None`), then expect this.
    Forward(Option<Vec<u8>>, State),
    /// Answer this text with this status line, and close.
    Refuse(&'static str, &'static str),
}

fn examine(head: &[u8]) -> Head {
    // Left uninitialised: httparse writes the ones it fills (a head of a few fields need
    // not pay for clearing a hundred).
    let mut headers =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut []);
    match request.parse_with_uninit_headers(head, &mut headers) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => {
            return Head::Refuse(
                "431 Request Header Fields Too Large",
                "The request has too many header fields.\n",
            )
        }
        // Not HTTP we understand: hyper answers it.
        _ => return Head::Forward(None, State::PassThrough),
    }
    let mut next = State::Head;
    let mut length: Option<u64> = None;
    for header in request.headers.iter() {
        if header.name.eq_ignore_ascii_case("transfer-encoding")
            || header.name.eq_ignore_ascii_case("upgrade")
        {
            next = State::PassThrough;
        } else if header.name.eq_ignore_ascii_case("content-length") {
            match std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
            {
                // Two different lengths: hyper refuses it.
                Some(n) if length.is_none_or(|l| l == n) => length = Some(n),
                _ => next = State::PassThrough,
            }
        }
    }
    if matches!(next, State::Head) {
        if let Some(n) = length.filter(|n| *n > 0) {
            next = State::Body(n);
        }
    }
    if request.method == Some("CONNECT") {
        next = State::PassThrough;
    }
    let target = request.path.unwrap_or_default();
    if target.len() <= LONG_TARGET_BYTES {
        return Head::Forward(None, next);
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path.len() > LONG_TARGET_BYTES {
        return Head::Refuse("414 URI Too Long", "The request path is too long.\n");
    }
    // The target's place in the head: httparse borrows it from `head`.
    let start = target.as_ptr() as usize - head.as_ptr() as usize;
    let end = start + target.len();
    let mut rewritten = Vec::with_capacity(head.len() - target.len() + KEPT_MESSAGE_BYTES + 64);
    rewritten.extend_from_slice(&head[..start]);
    rewritten.extend_from_slice(path.as_bytes());
    let query = shortened_query(query);
    if !query.is_empty() {
        rewritten.push(b'?');
        rewritten.extend_from_slice(query.as_bytes());
    }
    rewritten.extend_from_slice(&head[end..]);
    Head::Forward(Some(rewritten), next)
}

/// The query with `m` values cut to [`KEPT_MESSAGE_BYTES`] (never inside a `%XX`
/// escape) and other parameters longer than that dropped.
fn shortened_query(query: &str) -> String {
    let mut kept = Vec::new();
    for pair in query.split('&') {
        if pair.len() <= KEPT_MESSAGE_BYTES {
            kept.push(pair.to_owned());
            continue;
        }
        let Some(value) = pair.strip_prefix("m=") else {
            continue;
        };
        let mut cut = KEPT_MESSAGE_BYTES;
        // Back to before a `%` whose escape the cut would split.
        let bytes = value.as_bytes();
        for back in 1..=2 {
            if bytes[cut - back] == b'%' {
                cut -= back;
                break;
            }
        }
        kept.push(format!("m={}", &value[..cut]));
    }
    kept.join("&")
}

/// The end of the head (just past its blank line) in `bytes`, searching from `from`.
fn head_end(bytes: &[u8], from: usize) -> Option<usize> {
    let from = from.saturating_sub(3);
    memchr::memmem::find(&bytes[from..], b"\r\n\r\n").map(|i| from + i + 4)
}

fn answer_bytes(status: &str, text: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    )
    .into_bytes()
}

impl<S: AsyncRead + AsyncWrite + Unpin> LongRequestLines<S> {
    /// Reads more of the client's bytes into `held`, through hyper's own buffer (its
    /// unfilled part is memory already initialised; the bytes are taken back out of it);
    /// `Ok(false)` at the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<bool>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let read = &buf.filled()[before..];
        if read.is_empty() {
            return Poll::Ready(Ok(false));
        }
        self.held.extend_from_slice(read);
        buf.set_filled(before);
        Poll::Ready(Ok(true))
    }

    /// Hands over up to `limit` held bytes; how many it gave.
    fn give_held(&mut self, buf: &mut ReadBuf<'_>, limit: u64) -> usize {
        let n = (buf.remaining() as u64)
            .min(limit)
            .min(self.held.len() as u64) as usize;
        buf.put_slice(&self.held[..n]);
        self.held.drain(..n);
        n
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for LongRequestLines<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.verbatim > 0 {
                let n = this.give_held(buf, this.verbatim as u64);
                this.verbatim -= n;
                return Poll::Ready(Ok(()));
            }
            match this.state {
                State::PassThrough => {
                    if !this.held.is_empty() {
                        this.give_held(buf, u64::MAX);
                        return Poll::Ready(Ok(()));
                    }
                    return Pin::new(&mut this.inner).poll_read(cx, buf);
                }
                State::Body(remaining) => {
                    if this.held.is_empty() && !ready!(this.poll_fill(cx, buf))? {
                        return Poll::Ready(Ok(()));
                    }
                    let n = this.give_held(buf, remaining) as u64;
                    this.state = next_after_body(remaining - n);
                    return Poll::Ready(Ok(()));
                }
                State::Head if this.held.is_empty() => {
                    // The common case, without copying: a read that brings a whole head
                    // of normal size is examined where it lies, in hyper's buffer.
                    let before = buf.filled().len();
                    ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
                    let read = &buf.filled()[before..];
                    if read.is_empty() {
                        return Poll::Ready(Ok(()));
                    }
                    let fast = head_end(read, 0)
                        .filter(|end| *end <= LONG_TARGET_BYTES)
                        .and_then(|end| match examine(&read[..end]) {
                            Head::Forward(None, next) => Some((end, next)),
                            _ => None,
                        });
                    match fast {
                        Some((end, next)) => {
                            // What follows the head (a body, a pipelined request) goes
                            // through the state machine on the next reads.
                            this.held.extend_from_slice(&read[end..]);
                            buf.set_filled(before + end);
                            this.state = next;
                            return Poll::Ready(Ok(()));
                        }
                        None => {
                            // A long, partial or refused head: the general way below.
                            this.held.extend_from_slice(read);
                            buf.set_filled(before);
                        }
                    }
                }
                State::Head => {
                    let found = head_end(&this.held, this.searched);
                    if found.unwrap_or(this.held.len()) > MAX_HEAD_BYTES {
                        this.answer = answer_bytes(
                            "431 Request Header Fields Too Large",
                            "The request line and headers are too long: at most 2 MiB.\n",
                        );
                        this.state = State::Answer;
                        continue;
                    }
                    if let Some(end) = found {
                        this.searched = 0;
                        match examine(&this.held[..end]) {
                            Head::Forward(rewritten, next) => {
                                this.verbatim = match rewritten {
                                    Some(bytes) => {
                                        let len = bytes.len();
                                        this.held.splice(..end, bytes);
                                        len
                                    }
                                    None => end,
                                };
                                this.state = next;
                            }
                            Head::Refuse(status, text) => {
                                this.answer = answer_bytes(status, text);
                                this.state = State::Answer;
                            }
                        }
                        continue;
                    }
                    this.searched = this.held.len();
                    if !ready!(this.poll_fill(cx, buf))? {
                        // The client stopped mid-head: hyper sees what there was.
                        this.state = State::PassThrough;
                    }
                }
                State::Answer => {
                    while this.answer_at < this.answer.len() {
                        let n = ready!(Pin::new(&mut this.inner)
                            .poll_write(cx, &this.answer[this.answer_at..]))?;
                        if n == 0 {
                            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                        }
                        this.answer_at += n;
                    }
                    ready!(Pin::new(&mut this.inner).poll_flush(cx))?;
                    this.held = Vec::new();
                    this.state = State::Drain;
                }
                State::Drain => {
                    if !ready!(this.poll_fill(cx, buf))? {
                        // End of stream for hyper: it closes the connection.
                        return Poll::Ready(Ok(()));
                    }
                    this.held.clear();
                }
            }
        }
    }
}

fn next_after_body(remaining: u64) -> State {
    if remaining == 0 {
        State::Head
    } else {
        State::Body(remaining)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for LongRequestLines<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if matches!(this.state, State::Answer | State::Drain) {
            // Our own answer owns the connection now; hyper has nothing to say on it.
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if matches!(this.state, State::Answer | State::Drain) {
            return Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()));
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forwarded(head: &str) -> (String, String) {
        match examine(head.as_bytes()) {
            Head::Forward(bytes, next) => (
                String::from_utf8(bytes.unwrap_or_else(|| head.as_bytes().to_vec())).expect("text"),
                format!("{next:?}"),
            ),
            Head::Refuse(status, _) => panic!("refused: {status}"),
        }
    }

    #[test]
    fn short_heads_pass_unchanged() {
        let head = "GET /abc?m=hi HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(forwarded(head), (head.to_owned(), "Head".to_owned()));
        let post = "POST /abc HTTP/1.1\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(forwarded(post).1, "Body(5)");
        let chunked = "POST /abc HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(forwarded(chunked).1, "PassThrough");
    }

    #[test]
    fn a_long_message_is_cut_and_other_long_values_dropped() {
        let message = "%C3%A9".repeat(20_000);
        let junk = "x".repeat(10_000);
        let head =
            format!("GET /abc?s=1&m={message}&junk={junk}&rid=r1 HTTP/1.1\r\nHost: x\r\n\r\n");
        let (out, next) = forwarded(&head);
        assert_eq!(next, "Head");
        let target = out.split(' ').nth(1).expect("a target");
        let (_, query) = target.split_once('?').expect("a query");
        let pairs: Vec<&str> = query.split('&').collect();
        assert_eq!(pairs.len(), 3, "{pairs:?}");
        assert_eq!(pairs[0], "s=1");
        assert_eq!(pairs[2], "rid=r1");
        let kept = pairs[1].strip_prefix("m=").expect("m kept");
        assert!(kept.len() <= KEPT_MESSAGE_BYTES);
        let decoded = percent_encoding::percent_decode_str(kept)
            .decode_utf8()
            .expect("cut between escapes and characters");
        assert!(decoded.chars().count() >= 256);
        assert!(out.ends_with("HTTP/1.1\r\nHost: x\r\n\r\n"));
    }

    #[test]
    fn a_cut_never_splits_an_escape() {
        for shift in 0..3 {
            let value = format!("{}{}", "a".repeat(shift), "%41".repeat(4_000));
            let query = shortened_query(&format!("m={value}"));
            let kept = query.strip_prefix("m=").expect("m");
            assert!(kept.len() <= KEPT_MESSAGE_BYTES && kept.len() >= KEPT_MESSAGE_BYTES - 2);
            assert!(!kept.ends_with('%') && !kept[..kept.len() - 1].ends_with('%'));
        }
    }

    #[test]
    fn a_long_path_is_refused_with_text() {
        let head = format!(
            "GET /{} HTTP/1.1\r\n\r\n",
            "a".repeat(LONG_TARGET_BYTES + 1)
        );
        assert!(matches!(
            examine(head.as_bytes()),
            Head::Refuse("414 URI Too Long", _)
        ));
    }

    /// Everything hyper would read through the wrapper, from `client`'s bytes arriving
    /// in writes of `chunk` bytes, read into a buffer of 8 KiB as hyper's.
    async fn through(client: &[u8], chunk: usize) -> Vec<u8> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut near, far) = tokio::io::duplex(64 * 1024);
        let mut wrapped = LongRequestLines::new(far);
        let bytes = client.to_vec();
        let writer = tokio::spawn(async move {
            for piece in bytes.chunks(chunk) {
                near.write_all(piece).await.expect("write");
                tokio::task::yield_now().await;
            }
            near.shutdown().await.expect("shutdown");
            // Keep the near end open until the reader is done.
            near
        });
        let mut seen = Vec::new();
        let mut buf = vec![0u8; 8 * 1024];
        loop {
            let n = wrapped.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        drop(writer.await.expect("the writer"));
        seen
    }

    /// Pipelined requests in one write, whatever the pieces they arrive in: short heads
    /// and bodies pass unchanged (a body that looks like a head included), and a long
    /// message after them is still cut.
    #[tokio::test]
    async fn pipelined_requests_and_bodies_pass_and_long_ones_are_still_cut() {
        let body = "GET /x HTTP/1.1\r\n\r\n";
        let short = format!(
            "POST /abc HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}GET /abc?m=hi HTTP/1.1\r\n\r\n",
            body.len()
        );
        let long = format!(
            "GET /abc?m={} HTTP/1.1\r\nHost: x\r\n\r\n",
            "a".repeat(20_000)
        );
        let client = format!("{short}{long}{short}");
        for chunk in [client.len(), 4_096, 100, 7, 1] {
            let seen = String::from_utf8(through(client.as_bytes(), chunk).await).expect("text");
            assert!(seen.starts_with(&short), "chunk {chunk}");
            assert!(seen.ends_with(&short), "chunk {chunk}");
            let middle = &seen[short.len()..seen.len() - short.len()];
            assert!(middle.starts_with("GET /abc?m=aaa"), "chunk {chunk}");
            assert!(
                middle.len() < 4_000,
                "cut: {} bytes, chunk {chunk}",
                middle.len()
            );
            assert!(
                middle.ends_with(" HTTP/1.1\r\nHost: x\r\n\r\n"),
                "chunk {chunk}"
            );
        }
    }
}
