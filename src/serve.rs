//! Serving a router on a listener with the limits of docs/rules.md#overload:
//! a connection that has not sent complete request headers within `header_timeout` is
//! closed (also an idle keep-alive connection waiting for its next request), a request not
//! complete within `request_timeout` is answered 408 ([`with_request_timeout`], a service
//! around the whole router), and at most
//! `max_connections` connections are open at once: beyond that, new connections wait in
//! the kernel's backlog. Accept errors (running out of file descriptors) back off briefly
//! and never stop the loop. Graceful shutdown stops accepting, closes idle connections and
//! waits for requests in flight.
//!
//! `axum::serve` has none of these limits, hence this loop over hyper's HTTP/1 connection.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

mod long_lines;
pub use long_lines::{LongRequestLines, MAX_HEAD_BYTES};

/// The limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeOptions {
    /// A connection must send complete request headers within this time after it is
    /// accepted or after its previous response; otherwise it is closed.
    pub header_timeout: Duration,
    /// At most this many connections are served at once.
    pub max_connections: usize,
    /// Whether handlers see the client's address as `ConnectInfo<SocketAddr>` (the API's
    /// failure limiter needs it; the check-in endpoint does not, and skips the extension
    /// on every request).
    pub connect_info: bool,
    /// Whether request heads are read by [`LongRequestLines`] first, which cuts an
    /// over-long check-in query down instead of letting hyper refuse it (the check-in
    /// listener's; the API keeps hyper's limits, as a cut there would change a request's
    /// meaning).
    pub long_request_lines: bool,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            connect_info: true,
            long_request_lines: false,
        }
    }
}

impl ServeOptions {
    /// With `timeout` for request headers.
    pub fn with_header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// With at most `n` connections served at once.
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n;
        self
    }

    /// With or without [`LongRequestLines`] before hyper.
    pub fn with_long_request_lines(mut self, on: bool) -> Self {
        self.long_request_lines = on;
        self
    }

    /// With or without `ConnectInfo<SocketAddr>` in each request's extensions.
    pub fn with_connect_info(mut self, connect_info: bool) -> Self {
        self.connect_info = connect_info;
        self
    }
}

/// docs/rules.md#overload: 10 s for request headers.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// docs/rules.md#overload: 30 s for a whole request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// docs/rules.md#overload: 10,000 connections per listener.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// The first pause after a failed `accept`; it doubles up to [`MAX_ACCEPT_BACKOFF`] while
/// accepting keeps failing and starts over after a success.
pub const FIRST_ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
/// The longest pause between failed `accept`s.
pub const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// `app` with a request timeout: a request (reading its body included) not answered
/// within `timeout` gets `on_timeout()` (a 408), and its connection is then closed.
///
/// A service around the whole router, for [`serve`], rather than a `Router::layer`, which
/// wraps every route in a boxed service of its own: one more boxed clone and one more
/// boxed future on every request.
pub fn with_request_timeout<S>(
    app: S,
    timeout: Duration,
    on_timeout: fn() -> Response,
) -> RequestTimeout<S> {
    RequestTimeout {
        inner: app,
        timeout,
        on_timeout,
    }
}

/// A service answering `on_timeout()` to a request its inner service has not answered
/// within `timeout` ([`with_request_timeout`]).
#[derive(Debug, Clone)]
pub struct RequestTimeout<S> {
    inner: S,
    timeout: Duration,
    on_timeout: fn() -> Response,
}

impl<S> tower::Service<Request> for RequestTimeout<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = RequestTimeoutFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        RequestTimeoutFuture {
            answer: tokio::time::timeout(self.timeout, self.inner.call(req)),
            timeout: self.timeout,
            on_timeout: self.on_timeout,
        }
    }
}

pin_project_lite::pin_project! {
    /// The answer of [`RequestTimeout`].
    pub struct RequestTimeoutFuture<F> {
        #[pin]
        answer: tokio::time::Timeout<F>,
        timeout: Duration,
        on_timeout: fn() -> Response,
    }
}

impl<F> Future for RequestTimeoutFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.answer.poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(answered)) => Poll::Ready(answered),
            Poll::Ready(Err(_elapsed)) => {
                tracing::info!(timeout = ?this.timeout, "request timed out");
                Poll::Ready(Ok((this.on_timeout)()))
            }
        }
    }
}

/// What the accept loop needs of a listener; a seam for testing accept errors.
pub trait Accept: Send + 'static {
    /// Accepts the next connection.
    fn accept(&mut self) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send;
}

impl Accept for TcpListener {
    fn accept(&mut self) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send {
        TcpListener::accept(self)
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting (the
/// listener is closed), closes idle connections and returns once the requests in flight
/// are answered. Handlers see the client's address as `ConnectInfo<SocketAddr>` unless
/// `options.connect_info` is off.
pub async fn serve<S>(
    mut listener: impl Accept,
    app: S,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let permits = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let connect_info = options.connect_info;
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(options.header_timeout)
        .keep_alive(true);
    if options.long_request_lines {
        // Heads that `LongRequestLines` lets through (their query cut down, their headers
        // up to its limit) are not refused by hyper's smaller read buffer.
        http.max_buf_size(MAX_HEAD_BYTES + 64 * 1024);
    }
    let long_request_lines = options.long_request_lines;
    let mut backoff = FIRST_ACCEPT_BACKOFF;
    tokio::pin!(shutdown);
    loop {
        // The permit is taken before `accept`: at the cap, connections stay in the
        // backlog instead of being accepted and starved.
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break, // never closed
            },
        };
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, remote) = match accepted {
            Ok(accepted) => {
                backoff = FIRST_ACCEPT_BACKOFF;
                accepted
            }
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // EMFILE/ENFILE (out of file descriptors) and the like: wait for some to
                // be released, then try again; the loop never gives up.
                tracing::warn!(error = %e, ?backoff, "accept failed; retrying");
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_ACCEPT_BACKOFF);
                continue;
            }
        };
        let app = app.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let mut req = req.map(Body::new);
            if connect_info {
                req.extensions_mut().insert(ConnectInfo(remote));
            }
            let app = app.clone();
            async move { Ok::<_, Infallible>(app.oneshot(req).await.unwrap_or_else(|e| match e {})) }
        });
        let stream = if long_request_lines {
            LongRequestLines::new(stream)
        } else {
            LongRequestLines::passing(stream)
        };
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, %remote, "connection closed with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// Errors of one incoming connection (it was reset before it was accepted): the next
/// `accept` may succeed at once.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// File descriptors kept free for everything but client connections: the database pool,
/// outgoing webhooks and e-mail, logs.
pub const RESERVED_FDS: u64 = 512;

/// Raises this process's soft limit of open files to its hard limit (at most 2^20) and
/// returns the limit now in force, if known.
pub fn raise_fd_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(1 << 20) {
        Ok(limit) => Some(limit),
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the limit of open files");
            rlimit::Resource::NOFILE.get().ok().map(|(soft, _)| soft)
        }
    }
}

/// The connection cap per listener that fits `listeners` listeners in `fd_limit` file
/// descriptors beside [`RESERVED_FDS`]: `configured`, or less (at least 1).
pub fn fitting_max_connections(configured: usize, listeners: u64, fd_limit: Option<u64>) -> usize {
    let Some(limit) = fd_limit else {
        return configured;
    };
    let fitting = limit.saturating_sub(RESERVED_FDS) / listeners.max(1);
    usize::try_from(fitting)
        .unwrap_or(usize::MAX)
        .clamp(1, configured.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use axum::Router;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A listener whose first `failures` accepts fail like a process out of descriptors.
    struct OutOfFiles {
        inner: TcpListener,
        failures: Arc<AtomicUsize>,
    }

    impl Accept for OutOfFiles {
        async fn accept(&mut self) -> io::Result<(TcpStream, SocketAddr)> {
            let left = self.failures.load(Ordering::SeqCst);
            if left > 0 {
                self.failures.store(left - 1, Ordering::SeqCst);
                // EMFILE on Linux and the BSDs: "Too many open files".
                return Err(io::Error::from_raw_os_error(24));
            }
            self.inner.accept().await
        }
    }

    #[tokio::test]
    async fn accept_errors_back_off_and_accepting_resumes() {
        let inner = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = inner.local_addr().expect("address");
        let failures = Arc::new(AtomicUsize::new(5));
        let listener = OutOfFiles {
            inner,
            failures: failures.clone(),
        };
        let app = Router::new().route("/", get(|| async { "ok" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, app, ServeOptions::default(), async {
            let _ = stopped.await;
        }));
        let started = snitch_core::clock::monotonic_now();
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut answer))
            .await
            .expect("answered after the errors")
            .expect("read");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
        assert_eq!(
            failures.load(Ordering::SeqCst),
            0,
            "every failure was retried"
        );
        // 10 + 20 + 40 + 80 + 160 ms of back-off: brief, but not a busy loop.
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(250), "{elapsed:?}");
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("stops")
            .expect("no panic")
            .expect("no error");
    }

    #[test]
    fn the_connection_cap_fits_the_descriptor_limit() {
        assert_eq!(fitting_max_connections(10_000, 2, None), 10_000);
        assert_eq!(fitting_max_connections(10_000, 2, Some(1 << 20)), 10_000);
        assert_eq!(fitting_max_connections(10_000, 2, Some(1024)), 256);
        assert_eq!(fitting_max_connections(10_000, 2, Some(100)), 1);
        assert_eq!(fitting_max_connections(20, 2, Some(20_000)), 20);
    }
}
