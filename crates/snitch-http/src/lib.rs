//! The HTTP side of Snitch: the v1 JSON API ([`api_router`]) and the check-in endpoint
//! ([`check_in_router`]) as mountable axum routers over a [`SnitchService`].
//!
//! The two live on separate routers because they live on separate hosts (`base_url` and
//! `check_in_base`): a host application nests or serves each wherever it likes.

#![warn(missing_docs)]

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, MatchedPath, Path, RawQuery, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, delete, get, post, MethodRouter};
use axum::{Json, Router};
use base64::Engine;
use governor::Quota;
use serde_json::Value;
use snitch_core::clock::monotonic_now;
use snitch_core::{Case, CheckInMessage, Outcome, ServiceError, SnitchService, Token, Validations};
use tower_http::catch_panic::CatchPanicLayer;

pub mod auth_limit;
pub mod error;
pub mod health;
pub mod history;
pub mod keys;
pub mod metrics;
pub mod observe;
pub mod openapi;
pub mod outbound;
#[cfg(feature = "ui")]
pub mod ui;
pub mod wire;

pub use auth_limit::AuthFailureLimit;
use auth_limit::{keyed_limiter, FailureLimiter, KeyedLimiter, LimitClock};
pub use error::ApiError;
pub use keys::{ApiKeys, KeyDigest};
use metrics::CheckInOutcome;
pub use metrics::Metrics;
use wire::SnitchJson;

/// Request bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The body of a successful check-in (compat: clients look for 202).
pub const CHECK_IN_OK: &str = "Got it, thanks!\n";

/// Per-key request rate: a token bucket refilled at `per_second`, holding `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimit {
    /// Requests per second refilled into each key's bucket (default 10).
    pub per_second: NonZeroU32,
    /// The bucket's size: requests a key may make at once (default 60).
    pub burst: NonZeroU32,
}

impl RateLimit {
    /// `per_second` requests a second, `burst` at once.
    pub fn new(per_second: NonZeroU32, burst: NonZeroU32) -> Self {
        RateLimit { per_second, burst }
    }
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit {
            per_second: NonZeroU32::new(10).unwrap_or(NonZeroU32::MIN),
            burst: NonZeroU32::new(60).unwrap_or(NonZeroU32::MIN),
        }
    }
}

/// Settings of the API router.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ApiConfig {
    /// Where check-in URLs point, e.g. `https://nosnch.example.com`.
    pub check_in_base: String,
    /// The per-key request rate.
    pub rate_limit: RateLimit,
    /// Failed authentications per client address ([`auth_limit`]).
    pub auth_failures: AuthFailureLimit,
    /// Start in maintenance mode (503 for the API; check-ins keep working).
    pub maintenance: bool,
}

impl Default for ApiConfig {
    /// Check-in URLs on `http://127.0.0.1:8081` (the server's default check-in listener),
    /// the default rate and authentication limits, not in maintenance.
    fn default() -> Self {
        ApiConfig {
            check_in_base: "http://127.0.0.1:8081".into(),
            rate_limit: RateLimit::default(),
            auth_failures: AuthFailureLimit::default(),
            maintenance: false,
        }
    }
}

impl ApiConfig {
    /// With check-in URLs under `base`.
    pub fn with_check_in_base(mut self, base: impl Into<String>) -> Self {
        self.check_in_base = base.into();
        self
    }

    /// With the per-key request rate `limit`.
    pub fn with_rate_limit(mut self, limit: RateLimit) -> Self {
        self.rate_limit = limit;
        self
    }

    /// With the failed-authentication limit `limit`.
    pub fn with_auth_failures(mut self, limit: AuthFailureLimit) -> Self {
        self.auth_failures = limit;
        self
    }

    /// Starting in maintenance mode, or not.
    pub fn with_maintenance(mut self, on: bool) -> Self {
        self.maintenance = on;
        self
    }
}

/// What the API handlers share. Keep a clone to switch maintenance mode at run time.
#[derive(Clone)]
pub struct ApiState {
    inner: Arc<ApiInner>,
}

struct ApiInner {
    service: SnitchService,
    keys: Arc<ApiKeys>,
    /// Requests per key, on the service's clock.
    limiter: KeyedLimiter<KeyDigest>,
    /// The limiter's clock, for how long a refused request must wait.
    limit_clock: LimitClock,
    failures: FailureLimiter,
    maintenance: AtomicBool,
    check_in_base: String,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("check_in_base", &self.inner.check_in_base)
            .field("maintenance", &self.maintenance())
            .finish_non_exhaustive()
    }
}

impl ApiState {
    /// The state of the API routers over `service`, answering keys from `keys`, with
    /// metrics of its own (see [`ApiState::with_metrics`] to share a server's).
    pub fn new(service: SnitchService, keys: Arc<ApiKeys>, config: ApiConfig) -> Self {
        Self::with_metrics(service, keys, config, Arc::new(Metrics::new()))
    }

    /// State that counts requests in `metrics`.
    pub fn with_metrics(
        service: SnitchService,
        keys: Arc<ApiKeys>,
        config: ApiConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        let quota =
            Quota::per_second(config.rate_limit.per_second).allow_burst(config.rate_limit.burst);
        let limit_clock = LimitClock::new(service.clock().clone());
        ApiState {
            inner: Arc::new(ApiInner {
                service,
                keys,
                limiter: keyed_limiter(quota, limit_clock.clone()),
                failures: FailureLimiter::new(config.auth_failures, limit_clock.clone()),
                limit_clock,
                maintenance: AtomicBool::new(config.maintenance),
                check_in_base: config.check_in_base,
                metrics,
            }),
        }
    }

    /// The metrics this state counts requests in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// Switches maintenance mode (503 for the API; check-ins keep working) at run time.
    pub fn set_maintenance(&self, on: bool) {
        self.inner.maintenance.store(on, Ordering::Relaxed);
    }

    /// Whether the API is in maintenance mode.
    pub fn maintenance(&self) -> bool {
        self.inner.maintenance.load(Ordering::Relaxed)
    }

    fn json(&self, snitch: &snitch_core::Snitch) -> SnitchJson {
        SnitchJson::new(snitch, &self.inner.check_in_base)
    }
}

/// The v1 API (docs/api.md#endpoints) and its extensions (webhooks, history, events,
/// outages).
pub fn api_router(state: ApiState) -> Router {
    // Every path answers alike with one trailing slash (Rails routes both, and clients
    // such as snitchit send `/v1/snitches/`).
    let routes: [(&str, MethodRouter<ApiState>); 12] = [
        ("/v1/snitches", get(list_snitches).post(create_snitch)),
        (
            "/v1/snitches/{token}",
            get(get_snitch).patch(update_snitch).delete(delete_snitch),
        ),
        ("/v1/snitches/{token}/tags", post(add_tags)),
        ("/v1/snitches/{token}/tags/{tag}", delete(remove_tag)),
        ("/v1/snitches/{token}/pause", post(pause)),
        ("/v1/snitches/{token}/unpause", post(unpause)),
        ("/v1/snitches/{token}/events", get(list_events)),
        (
            "/v1/snitches/{token}/check_ins",
            get(history::list_check_ins),
        ),
        ("/v1/webhooks", get(list_webhooks).post(create_webhook)),
        ("/v1/webhooks/{id}", delete(delete_webhook)),
        ("/v1/outages", get(list_outages)),
        ("/v1/openapi.json", get(openapi::openapi_json)),
    ];
    let mut router = Router::new();
    for (path, methods) in routes {
        router = router
            .route(&format!("{path}/"), methods.clone())
            .route(path, methods);
    }
    router
        // After the routes: it applies to those registered before it.
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .fallback(|| async { ApiError::not_found() })
        // One layer of the whole stack, outermost first: each `Router::layer` would box the
        // routes again, and every request would clone each box.
        .layer(
            tower::ServiceBuilder::new()
                .layer(axum::middleware::from_fn_with_state(
                    observe::Observer::api(state.inner.metrics.clone()),
                    observe::observe,
                ))
                .layer(CatchPanicLayer::new())
                .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
                .layer(axum::middleware::from_fn(
                    |req: Request, next: Next| async {
                        match refusal(&req) {
                            Some(Refusal::NotFound) => ApiError::not_found().into_response(),
                            Some(Refusal::TooLarge) => {
                                ApiError::payload_too_large().into_response()
                            }
                            None => next.run(req).await,
                        }
                    },
                )),
        )
        .with_state(state)
}

/// The check-in endpoint (docs/rules.md#check-ins): `GET|POST|HEAD /<token>`, counting
/// in metrics of its own (see [`check_in_router_with_metrics`]).
pub fn check_in_router(service: SnitchService) -> Router {
    check_in_router_with_metrics(service, Arc::new(Metrics::new()))
}

/// What the check-in endpoint shares, behind one `Arc`: a request clones one pointer.
struct CheckInState {
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

/// Whether the router's `/{token}` route takes the path: one segment, not empty.
fn is_check_in_path(path: &str) -> bool {
    path.strip_prefix('/')
        .is_some_and(|segment| !segment.is_empty() && !segment.contains('/'))
}

/// Why a request is refused before anything else: by the API router's middleware, and
/// first thing by the check-in handlers.
enum Refusal {
    /// A path segment is not valid UTF-8 once percent-decoded: no resource has that name.
    NotFound,
    /// The declared `Content-Length` is over [`MAX_BODY_BYTES`]: refused at once, without
    /// reading (or waiting for) the body. A body without a declared length is cut off as
    /// it is read (`DefaultBodyLimit` on the API, the check-in handler's own limit).
    TooLarge,
}

fn refusal(req: &Request) -> Option<Refusal> {
    // A path without `%` is the text it decodes to (a `&str` already).
    let path = req.uri().path();
    if path.contains('%')
        && percent_encoding::percent_decode_str(path)
            .decode_utf8()
            .is_err()
    {
        return Some(Refusal::NotFound);
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return Some(Refusal::TooLarge);
    }
    None
}

fn too_large_text() -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "The request body is too large.\n",
    )
        .into_response()
}

/// The case of a request with a valid API key, after the maintenance and rate checks.
struct Authed(Case);

impl FromRequestParts<ApiState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        if state.maintenance() {
            return Err(ApiError::service_unavailable());
        }
        let client = auth_limit::client_of(&parts.extensions);
        let failures = &state.inner.failures;
        // A blocked address is refused before its key is looked at, a correct one too:
        // otherwise 200 versus 429 would go on telling right keys from wrong ones.
        if let Some(wait) = failures.blocked_for(&client) {
            return Err(ApiError::too_many_failures(whole_secs(wait)));
        }
        // A request without credentials gives a guesser nothing and is not counted
        // (clients that wait for the 401 challenge before sending them stay welcome).
        let presented = parts.headers.contains_key(header::AUTHORIZATION);
        let failed = || match failures.record_failure(client) {
            Some(wait) => ApiError::too_many_failures(whole_secs(wait)),
            None => ApiError::api_key_invalid(),
        };
        let Some((digest, case_id)) =
            basic_username(&parts.headers).and_then(|key| state.inner.keys.case_of(&key))
        else {
            return Err(if presented {
                failed()
            } else {
                ApiError::api_key_invalid()
            });
        };
        if let Err(not_until) = state.inner.limiter.check_key(&digest) {
            let wait = state.inner.limit_clock.wait(&not_until);
            return Err(ApiError::rate_limited(whole_secs(wait)));
        }
        let case = state
            .inner
            .service
            .storage()
            .case(&case_id)
            .await
            .map_err(|e| ApiError::from(ServiceError::from(e)))?;
        // A key whose case is gone is no longer valid.
        let Some(case) = case else {
            return Err(failed());
        };
        Ok(Authed(case))
    }
}

/// Whole seconds, rounded up and at least 1: never tell a client to come back too early.
fn whole_secs(wait: std::time::Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// The username of HTTP Basic credentials: the API key. The password is ignored (compat).
fn basic_username(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let user = text.split_once(':').map_or(text.as_str(), |(u, _)| u);
    (!user.is_empty()).then(|| user.to_owned())
}

/// A JSON request body: `None` when empty; 400 with an empty body when malformed; 413
/// when over [`MAX_BODY_BYTES`]. The content type is not checked, so
/// `application/json; charset=utf-8` and a missing header both work (compat).
struct JsonBody(Option<Value>);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large().into_response()
            } else {
                rejection.into_response()
            }
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(None));
        }
        serde_json::from_slice(&bytes)
            .map(|v| JsonBody(Some(v)))
            .map_err(|_| ApiError::MalformedJson.into_response())
    }
}

/// The tag filter of a list: `tags=a,b` as DMS documents it, and the array forms of PHP
/// and Rails clients (`tags[]=a&tags[]=b`, `tags[0]=a`), all one AND filter.
fn list_tag_filter(query: Option<&str>) -> String {
    let mut parts: Vec<String> = Vec::new();
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let is_tags = key == "tags"
            || key
                .strip_prefix("tags[")
                .and_then(|k| k.strip_suffix(']'))
                .is_some_and(|index| index.bytes().all(|b| b.is_ascii_digit()));
        if is_tags && !value.is_empty() {
            parts.push(value.into_owned());
        }
    }
    parts.join(",")
}

/// Lists the case's snitches.
#[utoipa::path(
    get,
    path = "/v1/snitches",
    tag = "snitches",
    params(("tags" = Option<String>, Query, description = "Comma-separated tags; only snitches with every one")),
    responses(
        (status = 200, description = "The case's snitches, oldest first", body = Vec<wire::SnitchJson>),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
async fn list_snitches(
    State(state): State<ApiState>,
    Authed(case): Authed,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<SnitchJson>>, ApiError> {
    // Decoded by hand: every form of the filter, and never a bare 400.
    let filter = SnitchService::parse_tag_filter(&list_tag_filter(query.as_deref()))?;
    let snitches = state.inner.service.list(&case, &filter).await?;
    Ok(Json(snitches.iter().map(|s| state.json(s)).collect()))
}

/// One snitch.
#[utoipa::path(
    get,
    path = "/v1/snitches/{token}",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token")),
    responses(
        (status = 200, description = "The snitch", body = wire::SnitchJson),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
async fn get_snitch(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
) -> Result<Json<SnitchJson>, ApiError> {
    let snitch = state.inner.service.get(&case, &token).await?;
    Ok(Json(state.json(&snitch)))
}

/// Makes a snitch.
#[utoipa::path(
    post,
    path = "/v1/snitches",
    tag = "snitches",
    request_body(content = openapi::NewSnitchRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The new snitch (200, not 201: compat)", body = wire::SnitchJson),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
        (status = 400, response = openapi::Malformed),
        (status = 413, response = openapi::TooLarge),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
async fn create_snitch(
    State(state): State<ApiState>,
    Authed(case): Authed,
    JsonBody(body): JsonBody,
) -> Result<Json<SnitchJson>, ApiError> {
    let fields = wire::snitch_fields(body.as_ref()).map_err(ApiError::invalid)?;
    let snitch = state.inner.service.create(&case, &fields).await?;
    // Compat: 200, not 201.
    Ok(Json(state.json(&snitch)))
}

/// Changes the attributes given.
#[utoipa::path(
    patch,
    path = "/v1/snitches/{token}",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token")),
    request_body(content = openapi::SnitchRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The snitch as updated", body = wire::SnitchJson),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
        (status = 404, response = openapi::NotFound),
        (status = 400, response = openapi::Malformed),
        (status = 413, response = openapi::TooLarge),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
async fn update_snitch(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<SnitchJson>, ApiError> {
    let fields = wire::snitch_fields(body.as_ref()).map_err(ApiError::invalid)?;
    let snitch = state.inner.service.update(&case, &token, &fields).await?;
    Ok(Json(state.json(&snitch)))
}

/// Deletes a snitch with its history.
#[utoipa::path(
    delete,
    path = "/v1/snitches/{token}",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
async fn delete_snitch(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.inner.service.delete(&case, &token).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Adds tags.
#[utoipa::path(
    post,
    path = "/v1/snitches/{token}/tags",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token")),
    request_body(content = Vec<openapi::TagName>, content_type = "application/json"),
    responses(
        (status = 200, description = "Every tag of the snitch", body = Vec<String>),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
        (status = 404, response = openapi::NotFound),
        (status = 400, response = openapi::Malformed),
        (status = 413, response = openapi::TooLarge),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
async fn add_tags(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Vec<String>>, ApiError> {
    let mut problems = Validations::new();
    let tags = match &body {
        Some(value) => wire::strings(value, "tags", &mut problems),
        None => Some(Vec::new()),
    };
    problems.into_result().map_err(ApiError::invalid)?;
    let tags = state
        .inner
        .service
        .add_tags(&case, &token, &tags.unwrap_or_default())
        .await?;
    Ok(Json(wire::tag_names(tags.as_slice())))
}

/// Removes a tag.
#[utoipa::path(
    delete,
    path = "/v1/snitches/{token}/tags/{tag}",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token"), ("tag" = String, Path, description = "The tag, percent-encoded (`+` is a space)")),
    responses(
        (status = 200, description = "The tags left", body = Vec<String>),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
async fn remove_tag(
    State(state): State<ApiState>,
    Authed(case): Authed,
    uri: Uri,
) -> Result<Json<Vec<String>>, ApiError> {
    // The raw segments of `…/<token>/tags/<tag>`, decoded exactly once here: axum's path
    // parameters are already percent-decoded, and decoding those again would turn a
    // form-encoded literal plus (`%2B`) into a space.
    let path = uri.path();
    let path = path.strip_suffix('/').unwrap_or(path);
    let mut segments = path.rsplitn(4, '/');
    let (Some(tag), Some("tags"), Some(token)) =
        (segments.next(), segments.next(), segments.next())
    else {
        return Err(ApiError::not_found());
    };
    let (token, tag) = (decode_path_segment(token), decode_path_segment(tag));
    let tags = state.inner.service.remove_tag(&case, &token, &tag).await?;
    Ok(Json(wire::tag_names(tags.as_slice())))
}

/// Percent-decodes a path segment with `+` as a space (compat: clients form-encode tags).
fn decode_path_segment(raw: &str) -> String {
    let spaced = raw.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

/// Pauses a snitch.
#[utoipa::path(
    post,
    path = "/v1/snitches/{token}/pause",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token")),
    request_body(content = openapi::PauseRequest, content_type = "application/json"),
    responses(
        (status = 204, description = "Paused"),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
        (status = 404, response = openapi::NotFound),
        (status = 400, response = openapi::Malformed),
        (status = 413, response = openapi::TooLarge),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
async fn pause(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<StatusCode, ApiError> {
    let until = wire::pause_until(body.as_ref()).map_err(ApiError::invalid)?;
    state
        .inner
        .service
        .pause(&case, &token, until.as_deref())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Unpauses a snitch.
#[utoipa::path(
    post,
    path = "/v1/snitches/{token}/unpause",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token")),
    responses(
        (status = 204, description = "Unpaused"),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
async fn unpause(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.inner.service.unpause(&case, &token).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// How many recent events the events endpoint shows.
const EVENTS_SHOWN: usize = 100;

/// Recent events with their deliveries.
#[utoipa::path(
    get,
    path = "/v1/snitches/{token}/events",
    tag = "extensions",
    params(("token" = String, Path, description = "The snitch's token")),
    responses(
        (status = 200, description = "The snitch's recent events (at most 100), newest first, each with its deliveries and their attempts", body = Vec<wire::EventJson>),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
async fn list_events(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
) -> Result<Json<Vec<wire::EventJson>>, ApiError> {
    let events = state
        .inner
        .service
        .events_with_deliveries(&case, &token, EVENTS_SHOWN)
        .await?;
    Ok(Json(
        events
            .iter()
            .map(|(e, d)| wire::EventJson::new(e, d))
            .collect(),
    ))
}

/// How many recent outages `GET /v1/outages` shows.
const OUTAGES_SHOWN: usize = 100;

/// Our own recent outages.
#[utoipa::path(
    get,
    path = "/v1/outages",
    tag = "extensions",
    responses(
        (status = 200, description = "Recent outages (at most 100), newest first", body = Vec<wire::OutageJson>),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
    ),
    security(("api_key" = []))
)]
async fn list_outages(
    State(state): State<ApiState>,
    Authed(case): Authed,
) -> Result<Json<Vec<wire::OutageJson>>, ApiError> {
    let outages = state.inner.service.outages(&case, OUTAGES_SHOWN).await?;
    Ok(Json(outages.iter().map(wire::OutageJson::new).collect()))
}

/// The case's webhooks.
#[utoipa::path(
    get,
    path = "/v1/webhooks",
    tag = "extensions",
    responses(
        (status = 200, description = "The case's webhooks, oldest first", body = Vec<wire::WebhookJson>),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
    ),
    security(("api_key" = []))
)]
async fn list_webhooks(
    State(state): State<ApiState>,
    Authed(case): Authed,
) -> Result<Json<Vec<wire::WebhookJson>>, ApiError> {
    let hooks = state.inner.service.webhooks(&case).await?;
    Ok(Json(hooks.iter().map(wire::WebhookJson::new).collect()))
}

/// Registers a webhook.
#[utoipa::path(
    post,
    path = "/v1/webhooks",
    tag = "extensions",
    request_body(content = openapi::WebhookRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The new webhook", body = wire::WebhookJson),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
        (status = 400, response = openapi::Malformed),
        (status = 413, response = openapi::TooLarge),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
async fn create_webhook(
    State(state): State<ApiState>,
    Authed(case): Authed,
    JsonBody(body): JsonBody,
) -> Result<Json<wire::WebhookJson>, ApiError> {
    let (url, secret) = wire::webhook_fields(body.as_ref()).map_err(ApiError::invalid)?;
    let hook = state
        .inner
        .service
        .create_webhook(&case, &url, secret.as_deref())
        .await?;
    Ok(Json(wire::WebhookJson::new(&hook)))
}

/// Removes a webhook.
#[utoipa::path(
    delete,
    path = "/v1/webhooks/{id}",
    tag = "extensions",
    params(("id" = String, Path, description = "The webhook's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, response = openapi::Unauthorized),
        (status = 402, response = openapi::PaymentRequired),
        (status = 429, response = openapi::TooMany),
        (status = 503, response = openapi::Unavailable),
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
async fn delete_webhook(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.inner.service.delete_webhook(&case, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn not_found_text() -> Response {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "No snitch has this token.\n",
    )
        .into_response()
}

/// `m` (message) and `s` (exit status) from the query string and a form-encoded body;
/// the body wins where both give one.
fn check_in_params(
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> HashMap<String, String> {
    let mut params: HashMap<String, String> = query
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/x-www-form-urlencoded")
        });
    if is_form {
        params.extend(form_urlencoded::parse(body).into_owned());
    }
    params
}

/// `GET|POST|HEAD /<token>`: records a check-in (docs/rules.md#check-ins).
async fn check_in(State(state): State<Arc<CheckInState>>, req: Request) -> Response {
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
async fn unmatched_check_in(State(state): State<Arc<CheckInState>>, req: Request) -> Response {
    let started = monotonic_now();
    let response = match refusal(&req) {
        Some(Refusal::TooLarge) => too_large_text(),
        Some(Refusal::NotFound) | None => not_found_text(),
    };
    let method = observe::method_name(req.method());
    state
        .observer
        .record(method, observe::UNMATCHED, response.status(), started);
    response
}

async fn answer_check_in(state: &Arc<CheckInState>, req: Request) -> Response {
    // The refusals first, for every method, as the API router's middleware does.
    match refusal(&req) {
        Some(Refusal::NotFound) => return not_found_text(),
        Some(Refusal::TooLarge) => return too_large_text(),
        None => {}
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD | Method::POST) {
        return method_not_allowed_text();
    }
    let (parts, body) = req.into_parts();
    // The route is `/{token}` (after the prefix the router is nested under): one
    // segment, valid UTF-8 once decoded (`refusal`). A text that is no token is no
    // snitch's.
    let segment = parts.uri.path().strip_prefix('/').unwrap_or_default();
    let decoded = if segment.contains('%') {
        percent_encoding::percent_decode_str(segment).decode_utf8_lossy()
    } else {
        Cow::Borrowed(segment)
    };
    let Ok(token) = Token::parse(&decoded) else {
        state.metrics.check_in(CheckInOutcome::UnknownToken);
        return not_found_text();
    };
    // Most check-ins have no body (a GET, or a declared length of 0): nothing to
    // collect then.
    let body = if axum::body::HttpBody::is_end_stream(&body) {
        Bytes::new()
    } else {
        match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
            Ok(body) => body,
            Err(e) if is_length_limit(&e) => return too_large_text(),
            Err(_) => return unreadable_body_text(),
        }
    };
    let params = check_in_params(parts.uri.query(), &parts.headers, &body);
    let outcome = Outcome::from_exit_status(params.get("s").map(String::as_str));
    let counted = if outcome.is_success() {
        CheckInOutcome::Success
    } else {
        CheckInOutcome::Error
    };
    let message = params.get("m").and_then(|m| CheckInMessage::truncating(m));
    // Driven by this request; if the request is dropped first (its client hung up),
    // the rest runs on a task of its own: once it arrived, a check-in is recorded, and
    // check-ins queued behind it are never held up.
    let shared = Arc::clone(state);
    let saved =
        FinishOnDrop::new(
            async move { shared.service.check_in_token(token, outcome, message).await },
        )
        .await;
    match saved {
        Ok(_) => {
            state.metrics.check_in(counted);
            accepted_text()
        }
        Err(ServiceError::NotFound) => {
            state.metrics.check_in(CheckInOutcome::UnknownToken);
            not_found_text()
        }
        Err(other) => {
            state.metrics.check_in(CheckInOutcome::Failed);
            ApiError::from(other).into_response()
        }
    }
}

/// The answer to an accepted check-in, from static parts: no header value is parsed or
/// copied, and the length is set so that axum's route does not format it per request.
fn accepted_text() -> Response {
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
fn is_length_limit(error: &axum::Error) -> bool {
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
struct FinishOnDrop<F: Future + Send + 'static>
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
    fn new(future: F) -> Self {
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
async fn catch_panic<T>(future: impl Future<Output = T>) -> Option<T> {
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

fn method_not_allowed_text() -> Response {
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

fn unreadable_body_text() -> Response {
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "The request body could not be read.\n",
    )
        .into_response()
}

fn internal_error_text() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "The check-in could not be recorded.\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    //! Fast router tests without TCP: requests go through `tower::ServiceExt::oneshot`.
    //! The black-box tests over real sockets are in the root crate's `tests/`.

    use super::*;
    use axum::body::Body;
    use axum::http::{Method, Request};
    use http_body_util::BodyExt;
    use snitch_core::{CaseId, SnitchFields, SystemClock};
    use snitch_store_memory::MemoryStorage;
    use tower::ServiceExt;

    const KEY: &str = "router-test-key-0123456789abcdef0123";

    struct Fixture {
        api: Router,
        check_ins: Router,
        service: SnitchService,
        case: Case,
        state: ApiState,
    }

    async fn fixture() -> Fixture {
        fixture_with(AuthFailureLimit::default()).await
    }

    async fn fixture_with(auth_failures: AuthFailureLimit) -> Fixture {
        let storage = Arc::new(MemoryStorage::new());
        let service = SnitchService::new(storage, Arc::new(SystemClock));
        let case = Case::new(CaseId::parse("acme").expect("valid"));
        service
            .storage()
            .upsert_case(&case)
            .await
            .expect("store case");
        let keys = Arc::new(ApiKeys::new());
        keys.add_plain(KEY, case.id.clone()).expect("long enough");
        let state = ApiState::new(
            service.clone(),
            keys,
            ApiConfig {
                check_in_base: "https://nosnch.test/".into(),
                rate_limit: RateLimit::default(),
                auth_failures,
                maintenance: false,
            },
        );
        Fixture {
            api: api_router(state.clone()),
            check_ins: check_in_router(service.clone()),
            service,
            case,
            state,
        }
    }

    impl Fixture {
        async fn snitch(&self, tags: &[&str]) -> String {
            let fields = SnitchFields {
                name: Some("n".into()),
                interval: Some("daily".into()),
                tags: Some(tags.iter().map(|t| (*t).to_owned()).collect()),
                ..Default::default()
            };
            let snitch = self
                .service
                .create(&self.case, &fields)
                .await
                .expect("created");
            snitch.token().to_string()
        }
    }

    fn basic(user_and_password: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_and_password)
        )
    }

    fn request(
        method: Method,
        uri: &str,
        auth: Option<&str>,
        body: impl Into<Body>,
    ) -> Request<Body> {
        let mut builder = Request::builder().method(method).uri(uri);
        if let Some(auth) = auth {
            builder = builder.header(header::AUTHORIZATION, auth);
        }
        builder.body(body.into()).expect("valid request")
    }

    fn authed(method: Method, uri: &str, body: impl Into<Body>) -> Request<Body> {
        request(method, uri, Some(&basic(&format!("{KEY}:"))), body)
    }

    /// Status, content type and body text of a response.
    async fn answer(router: &Router, req: Request<Body>) -> (StatusCode, String, String) {
        let response = router.clone().oneshot(req).await.expect("infallible");
        let status = response.status();
        let ctype = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (
            status,
            ctype,
            String::from_utf8(bytes.to_vec()).expect("utf-8"),
        )
    }

    fn json(text: &str) -> Value {
        serde_json::from_str(text).expect("JSON")
    }

    #[test]
    fn basic_auth_gives_the_username_and_ignores_the_password() {
        let headers = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, value.parse().expect("header"));
            h
        };
        let user = |value: &str| basic_username(&headers(value));
        assert_eq!(user(&basic("key:")).as_deref(), Some("key"));
        assert_eq!(user(&basic("key:secret")).as_deref(), Some("key"));
        assert_eq!(user(&basic("key")).as_deref(), Some("key"), "no colon");
        assert_eq!(user(&basic("key:a:b")).as_deref(), Some("key"));
        let lower = basic("key:").replacen("Basic", "basic", 1);
        assert_eq!(user(&lower).as_deref(), Some("key"));
        assert_eq!(user(&basic(":key")), None, "empty username");
        assert_eq!(user(&basic("")), None);
        assert_eq!(user("Bearer a2V5Og=="), None);
        assert_eq!(user("Basic"), None);
        assert_eq!(user("Basic !!not base64!!"), None);
        assert_eq!(user("a2V5Og=="), None, "no scheme");
        assert_eq!(basic_username(&HeaderMap::new()), None);
    }

    #[test]
    fn path_segments_decode_percent_escapes_and_plus_once() {
        assert_eq!(decode_path_segment("needs+space"), "needs space");
        assert_eq!(decode_path_segment("needs%20space"), "needs space");
        assert_eq!(decode_path_segment("c%2B%2B"), "c++");
        assert_eq!(decode_path_segment("50%25"), "50%");
        assert_eq!(decode_path_segment("%E2%9C%93"), "✓");
    }

    #[test]
    fn check_in_parameters_come_from_the_query_and_a_form_body() {
        let form = {
            let mut h = HeaderMap::new();
            h.insert(
                header::CONTENT_TYPE,
                "Application/X-WWW-Form-Urlencoded; charset=utf-8"
                    .parse()
                    .expect("header"),
            );
            h
        };
        let params = check_in_params(Some("m=a+b&s=1"), &HeaderMap::new(), b"m=ignored");
        assert_eq!(params.get("m").map(String::as_str), Some("a b"));
        assert_eq!(params.get("s").map(String::as_str), Some("1"));
        let params = check_in_params(Some("m=query&s=1"), &form, b"m=body%21");
        assert_eq!(params.get("m").map(String::as_str), Some("body!"));
        assert_eq!(params.get("s").map(String::as_str), Some("1"));
    }

    #[tokio::test]
    async fn a_missing_or_unknown_key_is_401_json() {
        let f = fixture().await;
        for auth in [
            None,
            Some(basic("wrong-key-0123456789abcdef0123456789:")),
            Some(format!("Bearer {KEY}")),
        ] {
            let req = request(Method::GET, "/v1/snitches", auth.as_deref(), Body::empty());
            let (status, ctype, body) = answer(&f.api, req).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{auth:?}");
            assert!(ctype.starts_with("application/json"), "{ctype}");
            let body = json(&body);
            assert_eq!(body["type"], "api_key_invalid");
            assert!(body["error"].is_string());
        }
        let req = request(
            Method::GET,
            "/v1/snitches",
            Some(&basic(&format!("{KEY}:pw"))),
            Body::empty(),
        );
        let (status, _, body) = answer(&f.api, req).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(json(&body), serde_json::json!([]));
    }

    /// A request from `addr` (as the server's accept loop records it).
    fn from(addr: &str, auth: Option<&str>) -> Request<Body> {
        let mut req = request(Method::GET, "/v1/snitches", auth, Body::empty());
        let addr: std::net::SocketAddr = addr.parse().expect("address");
        req.extensions_mut()
            .insert(axum::extract::ConnectInfo(addr));
        req
    }

    #[tokio::test]
    async fn failed_authentication_is_limited_per_client_address() {
        let f = fixture_with(AuthFailureLimit {
            per_minute: NonZeroU32::MIN,
            burst: NonZeroU32::new(3).expect("non-zero"),
        })
        .await;
        let good = basic(&format!("{KEY}:"));
        let wrong = basic("wrong-key-0123456789abcdef0123456789:");
        let status = |req| async { answer(&f.api, req).await.0 };
        // Without credentials: not counted.
        for _ in 0..5 {
            assert_eq!(
                status(from("10.0.0.1:1", None)).await,
                StatusCode::UNAUTHORIZED
            );
        }
        for _ in 0..3 {
            let req = from("10.0.0.1:1", Some(&wrong));
            assert_eq!(status(req).await, StatusCode::UNAUTHORIZED);
        }
        // The right key still works while the address is within its limit.
        assert_eq!(
            status(from("10.0.0.1:2", Some(&good))).await,
            StatusCode::OK
        );
        let response = f
            .api
            .clone()
            .oneshot(from("10.0.0.1:1", Some(&wrong)))
            .await
            .expect("infallible");
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry: u64 = response.headers()[header::RETRY_AFTER]
            .to_str()
            .expect("ascii")
            .parse()
            .expect("seconds");
        assert!((1..=60).contains(&retry), "{retry}");
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(body["type"], "rate_limited");
        // Blocked: even the right key, from any port of that address.
        for auth in [Some(good.as_str()), Some(wrong.as_str()), None] {
            let (status, _, body) = answer(&f.api, from("10.0.0.1:9", auth)).await;
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{auth:?}");
            assert_eq!(json(&body)["type"], "rate_limited");
        }
        // Other addresses are unaffected; failures without connect info share one bucket.
        assert_eq!(
            status(from("10.0.0.2:1", Some(&good))).await,
            StatusCode::OK
        );
        assert_eq!(
            status(from("10.0.0.2:1", Some(&wrong))).await,
            StatusCode::UNAUTHORIZED
        );
        let anonymous =
            |auth: &str| request(Method::GET, "/v1/snitches", Some(auth), Body::empty());
        for _ in 0..3 {
            assert_eq!(status(anonymous(&wrong)).await, StatusCode::UNAUTHORIZED);
        }
        assert_eq!(
            status(anonymous(&wrong)).await,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(
            status(anonymous(&good)).await,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(
            status(from("10.0.0.3:1", Some(&good))).await,
            StatusCode::OK
        );
    }

    #[tokio::test]
    async fn malformed_json_is_400_with_an_empty_body() {
        let f = fixture().await;
        let req = authed(Method::POST, "/v1/snitches", "{\"name\":");
        let (status, _, body) = answer(&f.api, req).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body, "");
    }

    #[tokio::test]
    async fn an_empty_body_is_422_with_every_problem() {
        let f = fixture().await;
        let (status, _, body) = answer(&f.api, authed(Method::POST, "/v1/snitches", "")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            json(&body)["validations"],
            serde_json::json!([
                {"attribute": "name", "message": "can't be blank"},
                {"attribute": "interval", "message": "can't be blank"},
            ])
        );
    }

    #[tokio::test]
    async fn a_body_over_64_kib_is_413_json() {
        let f = fixture().await;
        let big = format!("{{\"notes\":\"{}\"}}", "x".repeat(MAX_BODY_BYTES));
        let (status, ctype, body) =
            answer(&f.api, authed(Method::POST, "/v1/snitches", big.clone())).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(ctype.starts_with("application/json"), "{ctype}");
        assert_eq!(json(&body)["type"], "payload_too_large");
        // Sent without a declared length (chunked): cut off while reading, same answer.
        let chunks = futures::stream::iter(
            big.into_bytes()
                .chunks(4096)
                .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c)))
                .collect::<Vec<_>>(),
        );
        let req = authed(Method::POST, "/v1/snitches", Body::from_stream(chunks));
        let (status, _, body) = answer(&f.api, req).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(json(&body)["type"], "payload_too_large");
        assert!(f.service.list(&f.case, &[]).await.expect("list").is_empty());
    }

    /// A request declaring `len` bytes of body that never come.
    fn declaring(method: Method, uri: &str, auth: Option<&str>, len: u64) -> Request<Body> {
        let never = futures::stream::pending::<Result<Bytes, std::io::Error>>();
        let mut req = request(method, uri, auth, Body::from_stream(never));
        req.headers_mut().insert(
            header::CONTENT_LENGTH,
            len.to_string().parse().expect("header"),
        );
        req
    }

    #[tokio::test]
    async fn a_declared_length_over_64_kib_is_413_at_once_without_reading() {
        let f = fixture().await;
        let token = f.snitch(&[]).await;
        let key = basic(&format!("{KEY}:"));
        let within = std::time::Duration::from_secs(5);
        for auth in [Some(key.as_str()), None] {
            for (method, uri) in [
                (Method::POST, "/v1/snitches".to_owned()),
                (Method::PATCH, format!("/v1/snitches/{token}")),
                (Method::GET, "/v1/snitches".to_owned()),
            ] {
                let req = declaring(method.clone(), &uri, auth, 10_000_000_000);
                let (status, ctype, body) = tokio::time::timeout(within, answer(&f.api, req))
                    .await
                    .expect("answered at once");
                assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{method} {uri}");
                assert!(ctype.starts_with("application/json"), "{ctype}");
                assert_eq!(json(&body)["type"], "payload_too_large");
            }
        }
        let over = u64::try_from(MAX_BODY_BYTES).expect("small") + 1;
        // Any method and any path of the check-in router: the size is refused first.
        for (method, uri) in [
            (Method::POST, format!("/{token}")),
            (Method::GET, format!("/{token}")),
            (Method::PUT, format!("/{token}")),
            (Method::POST, format!("/{token}/more")),
        ] {
            let req = declaring(method.clone(), &uri, None, over);
            let (status, ctype, _) = tokio::time::timeout(within, answer(&f.check_ins, req))
                .await
                .expect("answered at once");
            assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{method} {uri}");
            assert!(ctype.starts_with("text/plain"), "{ctype}");
        }
        let stored = f
            .service
            .check_ins(&f.case, &token, 10)
            .await
            .expect("history");
        assert!(stored.is_empty(), "refused check-ins are not recorded");
    }

    #[tokio::test]
    async fn a_check_in_form_body_over_64_kib_is_413_text() {
        let f = fixture().await;
        let token = f.snitch(&[]).await;
        let body = format!("m={}", "x".repeat(MAX_BODY_BYTES));
        let mut req = request(Method::POST, &format!("/{token}"), None, body);
        req.headers_mut().insert(
            header::CONTENT_TYPE,
            "application/x-www-form-urlencoded".parse().expect("header"),
        );
        let (status, ctype, _) = answer(&f.check_ins, req).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(ctype.starts_with("text/plain"), "{ctype}");
    }

    #[tokio::test]
    async fn path_segments_that_are_not_utf8_are_404() {
        let f = fixture().await;
        let token = f.snitch(&["a"]).await;
        for (method, uri) in [
            (Method::GET, "/v1/snitches/%FF".to_owned()),
            (Method::DELETE, "/v1/snitches/%C3%28".to_owned()),
            (Method::GET, "/v1/snitches/%FF/events".to_owned()),
            (Method::DELETE, format!("/v1/snitches/{token}/tags/%FF")),
            (Method::DELETE, "/v1/webhooks/%80".to_owned()),
            (Method::GET, "/v1/%FF".to_owned()),
        ] {
            let (status, ctype, body) =
                answer(&f.api, authed(method.clone(), &uri, Body::empty())).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{method} {uri}");
            assert!(ctype.starts_with("application/json"), "{uri}: {ctype}");
            assert_eq!(json(&body)["type"], "resource_not_found", "{uri}");
        }
        for uri in ["/%FF", "/abc%FFdef?m=x"] {
            let (status, ctype, body) =
                answer(&f.check_ins, request(Method::GET, uri, None, Body::empty())).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
            assert!(ctype.starts_with("text/plain"), "{uri}: {ctype}");
            assert!(!body.is_empty());
        }
        // Valid escapes still reach the handlers.
        let uri = format!("/v1/snitches/{token}/tags/%61");
        let (status, _, body) = answer(&f.api, authed(Method::DELETE, &uri, Body::empty())).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(json(&body), serde_json::json!([]));
    }

    #[tokio::test]
    async fn a_wrong_method_is_405_json_with_allow() {
        let f = fixture().await;
        let token = f.snitch(&[]).await;
        for (method, uri, allow) in [
            (Method::PUT, "/v1/snitches".to_owned(), "GET,HEAD,POST"),
            (
                Method::POST,
                format!("/v1/snitches/{token}"),
                "GET,HEAD,PATCH,DELETE",
            ),
            (Method::GET, format!("/v1/snitches/{token}/pause"), "POST"),
            (Method::GET, "/v1/webhooks/x".to_owned(), "DELETE"),
        ] {
            let response = f
                .api
                .clone()
                .oneshot(authed(method.clone(), &uri, Body::empty()))
                .await
                .expect("infallible");
            assert_eq!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {uri}"
            );
            let allowed = response.headers().get(header::ALLOW).expect("Allow");
            assert_eq!(allowed, allow, "{method} {uri}");
            let (status, ctype, body) =
                answer(&f.api, authed(method.clone(), &uri, Body::empty())).await;
            assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
            assert!(ctype.starts_with("application/json"), "{ctype}");
            let body = json(&body);
            assert_eq!(body["type"], "method_not_allowed");
            assert!(body["error"].is_string());
        }
    }

    #[tokio::test]
    async fn unknown_api_paths_are_404_json() {
        let f = fixture().await;
        for uri in ["/v1/unknown", "/", "/v1/snitches/a/b/c"] {
            let (status, ctype, body) =
                answer(&f.api, authed(Method::GET, uri, Body::empty())).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
            assert!(ctype.starts_with("application/json"), "{ctype}");
            assert_eq!(json(&body)["type"], "resource_not_found");
        }
    }

    #[tokio::test]
    async fn maintenance_mode_is_503_and_can_be_switched_off() {
        let f = fixture().await;
        f.state.set_maintenance(true);
        let (status, _, body) =
            answer(&f.api, authed(Method::GET, "/v1/snitches", Body::empty())).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(json(&body)["type"], "service_unavailable");
        f.state.set_maintenance(false);
        let (status, _, _) =
            answer(&f.api, authed(Method::GET, "/v1/snitches", Body::empty())).await;
        assert_eq!(status, StatusCode::OK);
    }

    #[tokio::test]
    async fn snitch_json_has_the_check_in_url_and_type() {
        let f = fixture().await;
        let token = f.snitch(&[]).await;
        let uri = format!("/v1/snitches/{token}");
        let (status, _, body) = answer(&f.api, authed(Method::GET, &uri, Body::empty())).await;
        assert_eq!(status, StatusCode::OK);
        let body = json(&body);
        // The configured base's trailing slash is not doubled.
        assert_eq!(body["check_in_url"], format!("https://nosnch.test/{token}"));
        assert_eq!(body["type"], serde_json::json!({"interval": "daily"}));
        assert_eq!(body["href"], uri);
    }

    #[tokio::test]
    async fn remove_tag_decodes_the_raw_segment_once() {
        let f = fixture().await;
        let token = f.snitch(&["c++", "a b", "keep"]).await;
        let uri = format!("/v1/snitches/{token}/tags/c%2B%2B");
        let (status, _, body) = answer(&f.api, authed(Method::DELETE, &uri, Body::empty())).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(json(&body), serde_json::json!(["a b", "keep"]));
        let uri = format!("/v1/snitches/{token}/tags/a+b");
        let (_, _, body) = answer(&f.api, authed(Method::DELETE, &uri, Body::empty())).await;
        assert_eq!(json(&body), serde_json::json!(["keep"]));
    }

    /// Embedded under a prefix (`Router::nest`), the check-in router answers there, and
    /// only for `/<token>`: one segment, GET, HEAD or POST.
    #[tokio::test]
    async fn the_check_in_router_answers_under_the_prefix_it_is_nested_under() {
        let f = fixture().await;
        let token = f.snitch(&[]).await;
        let host = Router::new()
            .route("/health", get(|| async { "host" }))
            .nest("/monitor/check-in", f.check_ins.clone());
        for (method, uri, expected) in [
            (Method::GET, format!("/monitor/check-in/{token}"), 202),
            (Method::POST, format!("/monitor/check-in/{token}?s=1"), 202),
            (Method::HEAD, format!("/monitor/check-in/{token}"), 202),
            (
                Method::GET,
                "/monitor/check-in/no-such-token-00000".into(),
                404,
            ),
            (Method::GET, format!("/monitor/check-in/{token}/more"), 404),
            (Method::GET, "/monitor/check-in/".into(), 404),
            (Method::GET, format!("/{token}"), 404),
            (Method::PUT, format!("/monitor/check-in/{token}"), 405),
            (Method::DELETE, format!("/monitor/check-in/{token}"), 405),
        ] {
            let response = host
                .clone()
                .oneshot(request(method.clone(), &uri, None, Body::empty()))
                .await
                .expect("infallible");
            assert_eq!(response.status().as_u16(), expected, "{method} {uri}");
            if expected == 405 {
                let allow = response.headers().get(header::ALLOW).expect("Allow");
                assert_eq!(allow, "GET,HEAD,POST");
            }
        }
        let (status, _, body) = answer(&host, request(Method::GET, "/health", None, "")).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "host"));
        let stored = f
            .service
            .check_ins(&f.case, &token, 10)
            .await
            .expect("history");
        assert_eq!(stored.len(), 3, "GET, POST and HEAD recorded, nothing else");
    }

    #[tokio::test]
    async fn check_ins_answer_202_and_head_has_no_body() {
        let f = fixture().await;
        let token = f.snitch(&[]).await;
        let uri = format!("/{token}?m=hello");
        for method in [Method::GET, Method::POST, Method::HEAD] {
            let req = request(method.clone(), &uri, None, Body::empty());
            let (status, ctype, body) = answer(&f.check_ins, req).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{method}");
            assert!(ctype.starts_with("text/plain"), "{ctype}");
            let expected = if method == Method::HEAD {
                ""
            } else {
                CHECK_IN_OK
            };
            assert_eq!(body, expected, "{method}");
        }
        let stored = f
            .service
            .check_ins(&f.case, &token, 10)
            .await
            .expect("history");
        assert_eq!(stored.len(), 3);
        assert!(stored
            .iter()
            .all(|c| c.message.as_ref().map(|m| m.as_str()) == Some("hello")));
    }

    #[tokio::test]
    async fn check_in_history_is_newest_first_with_status_exit_status_and_message() {
        let f = fixture().await;
        let token = f.snitch(&[]).await;
        for uri in [
            format!("/{token}?m=first"),
            format!("/{token}?s=2&m=disk+full"),
            format!("/{token}?s=0"),
            format!("/{token}?m=nul%00byte&s=%00"),
        ] {
            let (status, _, _) = answer(
                &f.check_ins,
                request(Method::GET, &uri, None, Body::empty()),
            )
            .await;
            assert_eq!(status, StatusCode::ACCEPTED, "{uri}");
        }
        let uri = format!("/v1/snitches/{token}/check_ins");
        let (status, ctype, body) = answer(&f.api, authed(Method::GET, &uri, Body::empty())).await;
        assert_eq!(status, StatusCode::OK);
        assert!(ctype.starts_with("application/json"), "{ctype}");
        let body = json(&body);
        let shown: Vec<(Value, Value, Value)> = body
            .as_array()
            .expect("array")
            .iter()
            .map(|c| {
                (
                    c["status"].clone(),
                    c["exit_status"].clone(),
                    c["message"].clone(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                ("error".into(), "\u{FFFD}".into(), "nul\u{FFFD}byte".into()),
                ("success".into(), Value::Null, Value::Null),
                ("error".into(), "2".into(), "disk full".into()),
                ("success".into(), Value::Null, "first".into()),
            ]
        );
        assert!(body[0]["at"].as_str().is_some_and(|t| t.ends_with('Z')));

        let (status, _, body) = answer(
            &f.api,
            authed(Method::GET, &format!("{uri}?limit=2"), Body::empty()),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(json(&body).as_array().map(Vec::len), Some(2));
        for bad in ["0", "101", "x", "-1", "%00"] {
            let (status, _, body) = answer(
                &f.api,
                authed(Method::GET, &format!("{uri}?limit={bad}"), Body::empty()),
            )
            .await;
            assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
            assert_eq!(json(&body)["validations"][0]["attribute"], "limit");
        }
        // Same authentication and errors as the rest of the API.
        let (status, _, _) = answer(&f.api, request(Method::GET, &uri, None, Body::empty())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let (status, _, body) = answer(
            &f.api,
            authed(
                Method::GET,
                "/v1/snitches/nosuchtoken01/check_ins",
                Body::empty(),
            ),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(json(&body)["type"], "resource_not_found");
    }

    #[tokio::test]
    async fn requests_and_check_ins_are_counted_without_tokens() {
        let f = fixture().await;
        let metrics = f.state.metrics().clone();
        let check_ins = check_in_router_with_metrics(f.service.clone(), metrics.clone());
        let token = f.snitch(&[]).await;
        for uri in [
            format!("/{token}"),
            format!("/{token}?s=1"),
            "/unknowntoken0".to_owned(),
        ] {
            answer(&check_ins, request(Method::GET, &uri, None, Body::empty())).await;
        }
        let uri = format!("/v1/snitches/{token}");
        answer(&f.api, authed(Method::GET, &uri, Body::empty())).await;
        answer(&f.api, authed(Method::GET, "/v1/nothing", Body::empty())).await;
        let weird = Method::from_bytes(b"BREW").expect("method");
        answer(&f.api, authed(weird, &uri, Body::empty())).await;
        let text = metrics.encode();
        for line in [
            "snitch_check_ins_total{outcome=\"success\"} 1",
            "snitch_check_ins_total{outcome=\"error\"} 1",
            "snitch_check_ins_total{outcome=\"unknown_token\"} 1",
            "snitch_api_requests_total{method=\"GET\",route=\"/v1/snitches/{token}\",status=\"200\"} 1",
            "snitch_api_requests_total{method=\"GET\",route=\"unmatched\",status=\"404\"} 1",
            "snitch_api_requests_total{method=\"OTHER\",route=\"/v1/snitches/{token}\",status=\"405\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
        assert!(!text.contains(&token), "no token in any label");
    }

    #[tokio::test]
    async fn the_served_document_lists_every_route_of_the_router() {
        let f = fixture().await;
        let (status, ctype, body) = answer(
            &f.api,
            request(Method::GET, "/v1/openapi.json", None, Body::empty()),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "no key needed");
        assert!(ctype.starts_with("application/json"), "{ctype}");
        let doc = json(&body);
        assert_eq!(doc["openapi"], "3.1.0");
        let paths = doc["paths"].as_object().expect("paths");
        for (path, methods) in [
            ("/v1/snitches", &["get", "post"][..]),
            ("/v1/snitches/{token}", &["get", "patch", "delete"]),
            ("/v1/snitches/{token}/tags", &["post"]),
            ("/v1/snitches/{token}/tags/{tag}", &["delete"]),
            ("/v1/snitches/{token}/pause", &["post"]),
            ("/v1/snitches/{token}/unpause", &["post"]),
            ("/v1/snitches/{token}/events", &["get"]),
            ("/v1/snitches/{token}/check_ins", &["get"]),
            ("/v1/webhooks", &["get", "post"]),
            ("/v1/webhooks/{id}", &["delete"]),
            ("/v1/outages", &["get"]),
            ("/v1/openapi.json", &["get"]),
            ("/healthz", &["get"]),
            ("/readyz", &["get"]),
        ] {
            for method in methods {
                assert!(paths[path][method].is_object(), "{method} {path} missing");
            }
        }
        // Every documented operation of the router is served (not 404 or 405 from routing).
        for (path, item) in paths {
            if path == "/healthz" || path == "/readyz" {
                continue; // merged in by the runtime
            }
            for method in item.as_object().expect("operations").keys() {
                let token = f.snitch(&["x"]).await;
                let uri = path
                    .replace("{token}", &token)
                    .replace("{tag}", "x")
                    .replace("{id}", "nohook");
                let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
                let (status, _, _) =
                    answer(&f.api, authed(method.clone(), &uri, Body::empty())).await;
                assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
                if !path.contains("{id}") {
                    assert_ne!(status, StatusCode::NOT_FOUND, "{method} {uri}");
                }
            }
        }
    }

    #[tokio::test]
    async fn unknown_check_in_tokens_are_404_text() {
        let f = fixture().await;
        for uri in ["/abcdefghij0123456789", "/x", "/", "/a/b"] {
            let req = request(Method::GET, uri, None, Body::empty());
            let (status, ctype, body) = answer(&f.check_ins, req).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{uri}");
            assert!(ctype.starts_with("text/plain"), "{uri}: {ctype}");
            assert!(!body.is_empty());
        }
    }

    /// A check-in whose request is dropped while it waits (its client hung up) is still
    /// saved: the rest of its future runs on a task of its own.
    #[tokio::test]
    async fn a_future_dropped_while_pending_runs_to_its_end() {
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let (done, finished) = tokio::sync::oneshot::channel::<&str>();
        let mut saving = Box::pin(FinishOnDrop::new(async move {
            let _ = gate.await;
            let _ = done.send("saved");
        }));
        let first = std::future::poll_fn(|cx| Poll::Ready(saving.as_mut().poll(cx))).await;
        assert!(first.is_pending(), "waits for the gate");
        drop(saving);
        open.send(()).expect("the dropped future still waits");
        assert_eq!(finished.await, Ok("saved"));
    }

    /// Driven to its end by its caller, the future is not run again; one that panicked
    /// is dropped, not polled again on a task.
    #[tokio::test]
    async fn a_future_that_returned_or_panicked_is_not_run_again() {
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&polls);
        let output = FinishOnDrop::new(async move {
            counted.fetch_add(1, Ordering::SeqCst);
            7
        })
        .await;
        assert_eq!(output, 7);

        /// Panics on every poll, counting them (an `async` block would only panic again
        /// without counting).
        struct Panicking(Arc<std::sync::atomic::AtomicUsize>);
        impl Future for Panicking {
            type Output = ();
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
                self.0.fetch_add(1, Ordering::SeqCst);
                panic!("a bug in the save");
            }
        }
        let panicking = catch_panic(FinishOnDrop::new(Panicking(Arc::clone(&polls)))).await;
        assert_eq!(panicking, None, "the panic is caught");
        // A task spawned from the drop would run at the next yield.
        tokio::task::yield_now().await;
        assert_eq!(polls.load(Ordering::SeqCst), 2, "each future polled once");
    }
}
