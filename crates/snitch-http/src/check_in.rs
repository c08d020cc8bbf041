//! The check-in endpoint: `GET|POST|HEAD /<token>` as a router
//! ([`check_in_router`]) or a bare service ([`CheckInService`]), one handler doing a
//! check-in's whole request (docs/rules.md#check-ins).

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Bytes;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use snitch_core::clock::monotonic_now;
use snitch_core::runs::{parse_reported_duration, CheckInBody, CheckInKind, RunId};
use snitch_core::{
    CheckIn, CheckInMessage, Outcome, ServiceError, SnitchService, Timestamp, Token,
};

use crate::metrics::CheckInOutcome;
use crate::{
    health, observe, refusal, too_large_text, ApiError, Metrics, Refusal, CHECK_IN_OK,
    MAX_BODY_BYTES,
};

/// The check-in endpoint (docs/rules.md#check-ins): `GET|POST|HEAD /<token>`, counting
/// in metrics of its own (see [`check_in_router_with_metrics`]).
pub fn check_in_router(service: SnitchService) -> Router {
    check_in_router_with_metrics(service, Arc::new(Metrics::new()))
}

/// What the check-in endpoint shares, behind one `Arc`: a request clones one pointer.
pub(crate) struct CheckInState {
    service: SnitchService,
    metrics: Arc<Metrics>,
    observer: observe::Observer,
}

impl CheckInState {
    fn new(service: SnitchService, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(CheckInState {
            service,
            metrics,
            observer: observe::Observer::check_ins(),
        })
    }
}

/// The check-in endpoint, counting check-ins in `metrics` (`snitch_check_ins_total`).
///
/// One handler does a check-in's whole request (the refusals, reading the body, the
/// check-in, the request log, catching a panic), with no middleware: check-ins come by
/// the thousand a second, and a `from_fn` layer costs a clone of the service inside it
/// and a boxed future per request.
pub fn check_in_router_with_metrics(service: SnitchService, metrics: Arc<Metrics>) -> Router {
    let state = CheckInState::new(service, metrics);
    // A route, not a fallback taking every path: a host's own routes (a catch-all of a
    // single-page app, say) would come first, as axum tries fallbacks last.
    Router::new()
        .route("/{token}", any(check_in))
        .route("/{token}/{action}", any(check_in))
        .route("/ping/{token}", any(check_in))
        .route("/ping/{token}/{action}", any(check_in))
        .fallback(unmatched_check_in)
        .with_state(state)
}

/// The check-in endpoint as a bare [`tower::Service`], for a listener that serves
/// check-ins and nothing else (the example server's): it answers every request as
/// [`check_in_router_with_metrics`] served at the root does, without a router's work per
/// request (matching the path, then storing its parameters and `MatchedPath` among the
/// request's extensions: in the example server, a fifth of the instructions a check-in
/// cost). Under a prefix or beside other routes, use the router.
#[derive(Clone)]
pub struct CheckInService {
    state: Arc<CheckInState>,
    /// Answers [`health::HEALTH_PATHS`], when given.
    health: Option<Router>,
}

impl CheckInService {
    /// The endpoint, counting check-ins in `metrics` (`snitch_check_ins_total`).
    pub fn new(service: SnitchService, metrics: Arc<Metrics>) -> Self {
        CheckInService {
            state: CheckInState::new(service, metrics),
            health: None,
        }
    }

    /// This endpoint, with `/healthz` and `/readyz` answered by `health` (a
    /// [`health::health_router`]), as the router merged with it does.
    #[must_use]
    pub fn with_health(mut self, health: Router) -> Self {
        self.health = Some(health);
        self
    }
}

impl std::fmt::Debug for CheckInService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckInService").finish_non_exhaustive()
    }
}

impl tower::Service<Request> for CheckInService {
    type Response = Response;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if let Some(health) = self
            .health
            .as_ref()
            .filter(|_| health::HEALTH_PATHS.contains(&req.uri().path()))
        {
            return Box::pin(tower::ServiceExt::oneshot(health.clone(), req));
        }
        let state = Arc::clone(&self.state);
        Box::pin(async move {
            Ok(if is_check_in_path(req.uri().path()) {
                check_in(State(state), req).await
            } else {
                unmatched_check_in(State(state), req).await
            })
        })
    }
}

/// Whether one of the router's check-in routes takes the path.
pub(crate) fn is_check_in_path(path: &str) -> bool {
    CheckInPath::parse(path).is_some()
}

/// The forms of a check-in's path (docs/rules.md#check-ins): `/<token>`, and the forms of
/// healthchecks' ping API, `/<token>/<action>` and the same under `/ping/`, whose answers
/// are healthchecks' (`200 OK`) so its clients and job wrappers work unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CheckInPath<'a> {
    /// The token's segment, still percent-encoded.
    token: &'a str,
    /// `fail`, an exit status, `start` or `log`.
    action: Option<&'a str>,
    /// Under `/ping/`: answered as healthchecks answers.
    ping: bool,
}

impl<'a> CheckInPath<'a> {
    fn parse(path: &'a str) -> Option<CheckInPath<'a>> {
        let mut segments = path.strip_prefix('/')?.split('/');
        let first = segments.next()?;
        let (ping, token) = match first {
            "ping" => (true, segments.next()?),
            token => (false, token),
        };
        let action = segments.next();
        if token.is_empty() || action == Some("") || segments.next().is_some() {
            return None;
        }
        Some(CheckInPath {
            token,
            action,
            ping,
        })
    }

    /// The kind and outcome the action says, or `None` for an action that is not one:
    /// `start` and `log` (docs/rules.md#runs), `fail` an exit status of 1, `0` to `255` an
    /// exit status (0: success). Without an action, the `s` parameter decides.
    fn outcome(&self, params: &HashMap<String, String>) -> Option<(CheckInKind, Outcome)> {
        let end = |outcome| Some((CheckInKind::End, outcome));
        match self.action {
            None => end(Outcome::from_exit_status(
                params.get("s").map(String::as_str),
            )),
            Some("start") => Some((CheckInKind::Start, Outcome::Success)),
            Some("log") => Some((CheckInKind::Log, Outcome::Success)),
            Some("fail") => end(Outcome::from_exit_status(Some("1"))),
            // Digits only (`+5` is no exit status), read as a number (`00` is 0).
            Some(code) if code.len() <= 3 && code.bytes().all(|b| b.is_ascii_digit()) => code
                .parse::<u8>()
                .ok()
                .and_then(|n| end(Outcome::from_exit_status(Some(&n.to_string())))),
            Some(_) => None,
        }
    }
}

pub(crate) fn not_found_text() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "No snitch has this token.\n",
    )
        .into_response()
}

/// `m` (message) and `s` (exit status) from the query string and a form-encoded body;
/// the body wins where both give one.
pub(crate) fn check_in_params(
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> HashMap<String, String> {
    let mut params: HashMap<String, String> = query
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    if is_form(headers) {
        params.extend(form_urlencoded::parse(body).into_owned());
    }
    params
}

/// Whether the body is a form (`application/x-www-form-urlencoded`): its fields are
/// parameters; any other body is the run's output.
fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/x-www-form-urlencoded")
        })
}

/// The most bytes of output a check-in's request may carry: what is past the kept limit
/// is read and dropped, never refused, up to this (a bound on the work a request makes).
pub const CHECK_IN_OUTPUT_READ_MAX: usize = 16 << 20;

/// Why a check-in's output could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OutputError {
    /// Longer than the bound: a 413.
    TooLarge,
    /// The connection failed while sending it: a 400.
    Unreadable,
}

/// The first `keep` bytes of a body, reading (and dropping) the rest up to `max` bytes.
async fn read_head(body: axum::body::Body, keep: usize, max: usize) -> Result<Bytes, OutputError> {
    use http_body_util::BodyExt;
    let mut body = body;
    let mut kept = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| OutputError::Unreadable)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total = total.saturating_add(data.len());
        if total > max {
            return Err(OutputError::TooLarge);
        }
        if kept.len() < keep {
            let room = keep - kept.len();
            kept.extend_from_slice(&data[..data.len().min(room)]);
        }
    }
    Ok(Bytes::from(kept))
}

/// `GET|POST|HEAD /<token>`: records a check-in (docs/rules.md#check-ins).
pub(crate) async fn check_in(State(state): State<Arc<CheckInState>>, req: Request) -> Response {
    let started = monotonic_now();
    let method = observe::method_name(req.method());
    // The template as the host sees it (under the prefix it nests the router at).
    let route = req.extensions().get::<MatchedPath>().cloned();
    let response = match catch_panic(answer_check_in(&state, req)).await {
        Some(response) => response,
        None => {
            state.metrics.check_in(CheckInOutcome::Failed);
            internal_error_text()
        }
    };
    let route = route.as_ref().map_or("/{token}", MatchedPath::as_str);
    state
        .observer
        .record(method, route, response.status(), started);
    response
}

/// Any other path: 404, or 413 when it declares a body over the limit (as every path).
pub(crate) async fn unmatched_check_in(
    State(state): State<Arc<CheckInState>>,
    req: Request,
) -> Response {
    let started = monotonic_now();
    let mut response = match refusal(&req) {
        Some(Refusal::TooLarge) => too_large_text(),
        Some(Refusal::NotFound) | None => not_found_text(),
    };
    if !axum::body::HttpBody::is_end_stream(req.body()) {
        crate::unread_body::close(&mut response);
    }
    let method = observe::method_name(req.method());
    state
        .observer
        .record(method, observe::UNMATCHED, response.status(), started);
    response
}

pub(crate) async fn answer_check_in(state: &Arc<CheckInState>, req: Request) -> Response {
    // No middleware here (see check_in_router_with_metrics): an answer given before the
    // body was read to its end says `Connection: close` (docs/rules.md#request-parsing).
    let has_body = !axum::body::HttpBody::is_end_stream(req.body());
    match answer_or_refuse(state, req).await {
        Ok(answer) => answer,
        Err(mut refusal) => {
            if has_body {
                crate::unread_body::close(&mut refusal);
            }
            refusal
        }
    }
}

/// The answer of a check-in whose body (if any) was read to its end, or a refusal given
/// before it was.
async fn answer_or_refuse(state: &Arc<CheckInState>, req: Request) -> Result<Response, Response> {
    // The refusals first, for every method, as the API router's middleware does; a body
    // that is the run's output is cut, not refused, up to CHECK_IN_OUTPUT_READ_MAX.
    let output = !is_form(req.headers());
    let over_output_bound =
        crate::declared_length(&req).is_some_and(|len| len > CHECK_IN_OUTPUT_READ_MAX as u64);
    match refusal(&req) {
        Some(Refusal::NotFound) => return Err(not_found_text()),
        Some(Refusal::TooLarge) if !output || over_output_bound => return Err(too_large_text()),
        _ => {}
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD | Method::POST) {
        return Err(method_not_allowed_text());
    }
    let (parts, body) = req.into_parts();
    // One of the check-in routes (after the prefix the router is nested under), valid
    // UTF-8 once decoded (`refusal`). A text that is no token is no snitch's.
    let Some(path) = CheckInPath::parse(parts.uri.path()) else {
        return Err(not_found_text());
    };
    let segment = path.token;
    let decoded = if segment.contains('%') {
        percent_encoding::percent_decode_str(segment).decode_utf8_lossy()
    } else {
        Cow::Borrowed(segment)
    };
    let Ok(token) = Token::parse(&decoded) else {
        state.metrics.check_in(CheckInOutcome::UnknownToken);
        return Err(not_found_text());
    };
    // Most check-ins have no body (a GET, or a declared length of 0): nothing to
    // collect then.
    let limit = state.service.ping_body_limit();
    let body = if axum::body::HttpBody::is_end_stream(&body) {
        Bytes::new()
    } else if output {
        match read_head(body, limit, CHECK_IN_OUTPUT_READ_MAX).await {
            Ok(head) => head,
            Err(OutputError::TooLarge) => return Err(too_large_text()),
            Err(OutputError::Unreadable) => return Err(unreadable_body_text()),
        }
    } else {
        match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
            Ok(body) => body,
            Err(e) if is_length_limit(&e) => return Err(too_large_text()),
            Err(_) => return Err(unreadable_body_text()),
        }
    };
    let params = check_in_params(parts.uri.query(), &parts.headers, &body);
    let Some((kind, outcome)) = path.outcome(&params) else {
        return Ok(not_found_text());
    };
    let counted = match kind {
        CheckInKind::End if outcome.is_success() => CheckInOutcome::Success,
        CheckInKind::End => CheckInOutcome::Error,
        CheckInKind::Start => CheckInOutcome::Start,
        CheckInKind::Log => CheckInOutcome::Log,
    };
    let message = params.get("m").and_then(|m| CheckInMessage::truncating(m));
    // A bad optional parameter is dropped, never the check-in (docs/rules.md#runs).
    let report = CheckIn::new(Timestamp::default(), outcome, message)
        .with_kind(kind)
        .with_run_id(params.get("rid").and_then(|r| RunId::parse(r.trim())))
        .with_duration_ms(
            params
                .get("duration")
                .and_then(|d| parse_reported_duration(d)),
        )
        .with_body(if output {
            CheckInBody::truncating(&body, limit)
        } else {
            None
        });
    // Driven by this request; if the request is dropped first (its client hung up),
    // the rest runs on a task of its own: once it arrived, a check-in is recorded, and
    // check-ins queued behind it are never held up.
    let shared = Arc::clone(state);
    let saved = FinishOnDrop::new(async move { shared.service.report(token, report).await }).await;
    Ok(match saved {
        Ok(_) => {
            state.metrics.check_in(counted);
            if path.ping {
                ping_ok_text(limit)
            } else {
                accepted_text()
            }
        }
        Err(ServiceError::NotFound) => {
            state.metrics.check_in(CheckInOutcome::UnknownToken);
            not_found_text()
        }
        Err(other) => {
            state.metrics.check_in(CheckInOutcome::Failed);
            ApiError::from(other).into_response()
        }
    })
}

/// healthchecks' answer to a ping it recorded: `200 OK`, with the body limit its clients
/// cut what they send to (`ping_body_limit`).
fn ping_ok_text(limit: usize) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (
                header::HeaderName::from_static("ping-body-limit"),
                // Digits only: always a valid header value.
                &limit.to_string(),
            ),
        ],
        "OK",
    )
        .into_response()
}

/// The answer to an accepted check-in, from static parts: no header value is parsed or
/// copied, and the length is set so that axum's route does not format it per request.
pub(crate) fn accepted_text() -> Response {
    const LENGTH: &str = "16";
    const _: () = assert!(CHECK_IN_OK.len() == 16, "LENGTH is CHECK_IN_OK's");
    let mut response = Response::new(axum::body::Body::from(CHECK_IN_OK));
    *response.status_mut() = StatusCode::ACCEPTED;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static(LENGTH));
    response
}

/// Whether reading a body failed because it is longer than the limit given.
pub(crate) fn is_length_limit(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// A future that is driven to its end even if its caller drops it: what is left of it
/// then runs on a task of its own, on the runtime the drop happens in (dropped outside a
/// runtime, or by one shutting down, it is dropped too). Spawning it up front would cost
/// every request a task and a second wake-up; this costs one only to a request whose
/// client hung up.
pub(crate) struct FinishOnDrop<F: Future + Send + 'static>
where
    F::Output: Send + 'static,
{
    future: Option<Pin<Box<F>>>,
    /// Set while the future is being polled: a poll that panicked leaves it set, and a
    /// future that panicked is not polled again.
    polling: bool,
}

impl<F: Future + Send + 'static> FinishOnDrop<F>
where
    F::Output: Send + 'static,
{
    pub(crate) fn new(future: F) -> Self {
        FinishOnDrop {
            future: Some(Box::pin(future)),
            polling: false,
        }
    }
}

impl<F: Future + Send + 'static> Future for FinishOnDrop<F>
where
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let Some(future) = this.future.as_mut() else {
            panic!("FinishOnDrop polled after it returned");
        };
        this.polling = true;
        let polled = future.as_mut().poll(cx);
        this.polling = false;
        if polled.is_ready() {
            this.future = None;
        }
        polled
    }
}

impl<F: Future + Send + 'static> Drop for FinishOnDrop<F>
where
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        if self.polling {
            return;
        }
        if let (Some(future), Ok(runtime)) =
            (self.future.take(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(future);
        }
    }
}

/// `future`'s output, or `None` if polling it panicked (`CatchPanicLayer`, for a handler
/// that runs without middleware).
pub(crate) async fn catch_panic<T>(future: impl Future<Output = T>) -> Option<T> {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Some(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(None),
        }
    })
    .await
}

pub(crate) fn method_not_allowed_text() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::ALLOW, "GET,HEAD,POST"),
        ],
        "Check in with GET, HEAD or POST.\n",
    )
        .into_response()
}

pub(crate) fn unreadable_body_text() -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "The request body could not be read.\n",
    )
        .into_response()
}

pub(crate) fn internal_error_text() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "The check-in could not be recorded.\n",
    )
        .into_response()
}
