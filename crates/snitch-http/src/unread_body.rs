//! Answers that leave a request's body unread say `Connection: close`
//! (docs/rules.md#request-parsing). hyper cannot take the connection's next request
//! before the rest of this one's body has gone by: it drains what has already arrived and
//! otherwise closes the connection, and a client that was not told would send its next
//! request on a connection about to close, and lose it.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Frame, SizeHint};

/// Middleware: runs the request and, when it came with a body that the answer left
/// unread (or read only in part), adds `Connection: close` to the answer. A request
/// without a body (a `GET`, a declared length of 0) costs one check.
pub(crate) async fn close_when_body_unread(req: Request, next: Next) -> Response {
    if req.body().is_end_stream() {
        return next.run(req).await;
    }
    let finished = Arc::new(AtomicBool::new(false));
    let req = req.map(|inner| {
        Body::new(Watched {
            inner,
            finished: finished.clone(),
        })
    });
    let mut response = next.run(req).await;
    if !finished.load(Ordering::Acquire) {
        close(&mut response);
    }
    response
}

/// Adds `Connection: close` to `response`: for an answer given before its request's
/// body was read.
pub(crate) fn close(response: &mut Response) {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}

/// A request body that records when it has been read to its end.
struct Watched {
    inner: Body,
    finished: Arc<AtomicBool>,
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.finished.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
