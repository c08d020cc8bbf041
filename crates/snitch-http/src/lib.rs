//! The HTTP side of Snitch: the v1 JSON API ([`api_router`]) and the check-in endpoint
//! ([`check_in_router`]) as mountable axum routers over a [`SnitchService`].
//!
//! The two live on separate routers because they live on separate hosts (`base_url` and
//! `check_in_base`): a host application nests or serves each wherever it likes.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, RawPathParams, RawQuery, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use base64::Engine;
use governor::clock::{Clock as _, DefaultClock};
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use serde::Deserialize;
use serde_json::Value;
use snitch_core::{Case, CheckInMessage, Outcome, ServiceError, SnitchService, Validations};
use tower_http::catch_panic::CatchPanicLayer;

pub mod error;
pub mod keys;
pub mod wire;

pub use error::ApiError;
pub use keys::{ApiKeys, KeyDigest};
use wire::SnitchJson;

/// Request bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The body of a successful check-in (compat: clients look for 202).
pub const CHECK_IN_OK: &str = "Got it, thanks!\n";

/// Per-key request rate: a token bucket refilled at `per_second`, holding `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub per_second: NonZeroU32,
    pub burst: NonZeroU32,
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
pub struct ApiConfig {
    /// Where check-in URLs point, e.g. `https://nosnch.example.com`.
    pub check_in_base: String,
    pub rate_limit: RateLimit,
    /// Start in maintenance mode (503 for the API; check-ins keep working).
    pub maintenance: bool,
}

type KeyedLimiter = RateLimiter<KeyDigest, DefaultKeyedStateStore<KeyDigest>, DefaultClock>;

/// What the API handlers share. Keep a clone to switch maintenance mode at run time.
#[derive(Clone)]
pub struct ApiState {
    inner: Arc<ApiInner>,
}

struct ApiInner {
    service: SnitchService,
    keys: Arc<ApiKeys>,
    limiter: KeyedLimiter,
    maintenance: AtomicBool,
    check_in_base: String,
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
    pub fn new(service: SnitchService, keys: Arc<ApiKeys>, config: ApiConfig) -> Self {
        let quota =
            Quota::per_second(config.rate_limit.per_second).allow_burst(config.rate_limit.burst);
        ApiState {
            inner: Arc::new(ApiInner {
                service,
                keys,
                limiter: RateLimiter::keyed(quota),
                maintenance: AtomicBool::new(config.maintenance),
                check_in_base: config.check_in_base,
            }),
        }
    }

    pub fn set_maintenance(&self, on: bool) {
        self.inner.maintenance.store(on, Ordering::Relaxed);
    }

    pub fn maintenance(&self) -> bool {
        self.inner.maintenance.load(Ordering::Relaxed)
    }

    fn json(&self, snitch: &snitch_core::Snitch) -> SnitchJson {
        SnitchJson::new(snitch, &self.inner.check_in_base)
    }
}

/// The v1 API of api-v1.md section 4 and the webhooks extension of behaviour.md section 7.
pub fn api_router(state: ApiState) -> Router {
    Router::new()
        .route("/v1/snitches", get(list_snitches).post(create_snitch))
        .route(
            "/v1/snitches/{token}",
            get(get_snitch).patch(update_snitch).delete(delete_snitch),
        )
        .route("/v1/snitches/{token}/tags", post(add_tags))
        .route("/v1/snitches/{token}/tags/{tag}", delete(remove_tag))
        .route("/v1/snitches/{token}/pause", post(pause))
        .route("/v1/snitches/{token}/unpause", post(unpause))
        .route("/v1/webhooks", get(list_webhooks).post(create_webhook))
        .route("/v1/webhooks/{id}", delete(delete_webhook))
        .fallback(|| async { ApiError::not_found() })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(CatchPanicLayer::new())
        .with_state(state)
}

/// The check-in endpoint of behaviour.md section 2: `GET|POST|HEAD /<token>`.
pub fn check_in_router(service: SnitchService) -> Router {
    Router::new()
        .route("/{token}", get(check_in).post(check_in))
        .fallback(|| async { not_found_text() })
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(CatchPanicLayer::new())
        .with_state(service)
}

/// The case of a request with a valid API key, after the maintenance and rate checks.
struct Authed(Case);

impl FromRequestParts<ApiState> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        if state.maintenance() {
            return Err(ApiError::service_unavailable());
        }
        let key = basic_username(&parts.headers).ok_or_else(ApiError::api_key_invalid)?;
        let (digest, case_id) = state
            .inner
            .keys
            .case_of(&key)
            .ok_or_else(ApiError::api_key_invalid)?;
        if let Err(not_until) = state.inner.limiter.check_key(&digest) {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            // Whole seconds, rounded up: never tell a client to come back too early.
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            return Err(ApiError::rate_limited(secs.max(1)));
        }
        let case = state
            .inner
            .service
            .storage()
            .case(&case_id)
            .await
            .map_err(|e| ApiError::from(ServiceError::from(e)))?
            // A key whose case is gone is no longer valid.
            .ok_or_else(ApiError::api_key_invalid)?;
        Ok(Authed(case))
    }
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
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(None));
        }
        serde_json::from_slice(&bytes)
            .map(|v| JsonBody(Some(v)))
            .map_err(|_| ApiError::MalformedJson.into_response())
    }
}

#[derive(Deserialize)]
struct ListQuery {
    tags: Option<String>,
}

async fn list_snitches(
    State(state): State<ApiState>,
    Authed(case): Authed,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<SnitchJson>>, ApiError> {
    // Decoded by hand so that a malformed query is a clear 422, not a bare 400.
    let query: ListQuery = serde_urlencoded::from_str(query.as_deref().unwrap_or(""))
        .map_err(|_| ApiError::invalid_attribute("tags", "must be a comma-separated list"))?;
    let filter = SnitchService::parse_tag_filter(query.tags.as_deref().unwrap_or(""))?;
    let snitches = state.inner.service.list(&case, &filter).await?;
    Ok(Json(snitches.iter().map(|s| state.json(s)).collect()))
}

async fn get_snitch(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
) -> Result<Json<SnitchJson>, ApiError> {
    let snitch = state.inner.service.get(&case, &token).await?;
    Ok(Json(state.json(&snitch)))
}

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

async fn delete_snitch(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.inner.service.delete(&case, &token).await?;
    Ok(StatusCode::NO_CONTENT)
}

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

async fn remove_tag(
    State(state): State<ApiState>,
    Authed(case): Authed,
    raw: RawPathParams,
) -> Result<Json<Vec<String>>, ApiError> {
    let mut token = None;
    let mut tag = None;
    for (name, value) in &raw {
        match name {
            "token" => token = Some(decode_path_segment(value)),
            "tag" => tag = Some(decode_path_segment(value)),
            _ => {}
        }
    }
    let (Some(token), Some(tag)) = (token, tag) else {
        return Err(ApiError::not_found());
    };
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

async fn unpause(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.inner.service.unpause(&case, &token).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn list_webhooks(
    State(state): State<ApiState>,
    Authed(case): Authed,
) -> Result<Json<Vec<Value>>, ApiError> {
    let hooks = state.inner.service.webhooks(&case).await?;
    Ok(Json(hooks.iter().map(wire::webhook_json).collect()))
}

async fn create_webhook(
    State(state): State<ApiState>,
    Authed(case): Authed,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let (url, secret) = wire::webhook_fields(body.as_ref()).map_err(ApiError::invalid)?;
    let hook = state
        .inner
        .service
        .create_webhook(&case, &url, secret.as_deref())
        .await?;
    Ok(Json(wire::webhook_json(&hook)))
}

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

async fn check_in(
    State(service): State<SnitchService>,
    Path(token): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let params = check_in_params(query.as_deref(), &headers, &body);
    let outcome = Outcome::from_exit_status(params.get("s").map(String::as_str));
    let message = params.get("m").and_then(|m| CheckInMessage::truncating(m));
    match service.check_in(&token, outcome, message).await {
        Ok(_) => (
            StatusCode::ACCEPTED,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            CHECK_IN_OK,
        )
            .into_response(),
        Err(ServiceError::NotFound) => not_found_text(),
        Err(other) => ApiError::from(other).into_response(),
    }
}
