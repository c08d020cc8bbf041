//! The v1 JSON API as a mountable router ([`api_router`]): its state ([`ApiState`]:
//! the service, API keys, rate limits, maintenance mode), the extractors every handler
//! shares (an authenticated case, a JSON body), and the routes. The handlers themselves are
//! in [`handlers`].

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, MethodRouter};
use axum::Router;
use base64::Engine;
use governor::Quota;
use serde_json::Value;
use snitch_core::{Case, ServiceError, SnitchService};
use tower_http::catch_panic::CatchPanicLayer;

use crate::auth_limit::{self, keyed_limiter, FailureLimiter, KeyedLimiter, LimitClock};
use crate::wire::{CheckInTargets, SnitchJson};
use crate::{
    history, observe, openapi, refusal, ApiError, ApiKeys, AuthFailureLimit, KeyDigest, Metrics,
    Refusal, MAX_BODY_BYTES,
};

pub mod channels;
pub(crate) mod handlers;

pub use channels::{ChannelTester, SharedChannelTester};
use handlers::*;

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
    /// Failed authentications per client address ([`AuthFailureLimit`](crate::AuthFailureLimit)).
    pub auth_failures: AuthFailureLimit,
    /// Start in maintenance mode (503 for the API; check-ins keep working).
    pub maintenance: bool,
    /// What sends channels' test notifications (`POST /v1/channels/<id>/test`); none:
    /// the test answers 422.
    pub channel_tester: Option<SharedChannelTester>,
    /// The server's public URL (`base_url`): `/v1/badges` gives absolute URLs under it;
    /// none, paths.
    pub public_base: Option<String>,
    /// The domain check-in e-mails are received at, lowercase: snitches then show
    /// `check_in_email` (`<token>@<domain>`); none, they do not.
    pub check_in_email_domain: Option<String>,
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
            channel_tester: None,
            public_base: None,
            check_in_email_domain: None,
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

    /// Badge URLs under `base` (the server's public URL).
    pub fn with_public_base(mut self, base: Option<String>) -> Self {
        self.public_base = base.map(|b| b.trim_end_matches('/').to_owned());
        self
    }

    /// Check-in e-mail addresses at `domain` (stored lowercase); none: snitches show no
    /// `check_in_email`.
    pub fn with_check_in_email_domain(mut self, domain: Option<String>) -> Self {
        self.check_in_email_domain = domain
            .map(|d| d.trim().to_lowercase())
            .filter(|d| !d.is_empty());
        self
    }

    /// Channel tests go through `tester`.
    pub fn with_channel_tester(mut self, tester: SharedChannelTester) -> Self {
        self.channel_tester = Some(tester);
        self
    }
}

/// What the API handlers share. Keep a clone to switch maintenance mode at run time.
#[derive(Clone)]
pub struct ApiState {
    pub(crate) inner: Arc<ApiInner>,
}

pub(crate) struct ApiInner {
    pub(crate) service: SnitchService,
    pub(crate) keys: Arc<ApiKeys>,
    /// Requests per key, on the service's clock.
    pub(crate) limiter: KeyedLimiter<KeyDigest>,
    /// The limiter's clock, for how long a refused request must wait.
    pub(crate) limit_clock: LimitClock,
    pub(crate) failures: FailureLimiter,
    pub(crate) maintenance: AtomicBool,
    pub(crate) check_in_base: String,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) channel_tester: Option<SharedChannelTester>,
    pub(crate) public_base: Option<String>,
    pub(crate) check_in_email_domain: Option<String>,
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
                channel_tester: config.channel_tester,
                public_base: config.public_base,
                check_in_email_domain: config.check_in_email_domain,
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
        SnitchJson::new(snitch, self.check_in_targets(), self.inner.service.now())
    }

    /// Where snitches' check-ins are addressed: URLs, and e-mail when received.
    pub(crate) fn check_in_targets(&self) -> CheckInTargets<'_> {
        CheckInTargets::new(&self.inner.check_in_base)
            .with_email_domain(self.inner.check_in_email_domain.as_deref())
    }
}

/// The v1 API (docs/api.md#endpoints) and its extensions (webhooks, history, events,
/// outages).
pub fn api_router(state: ApiState) -> Router {
    // Every path answers alike with one trailing slash (Rails routes both, and clients
    // such as snitchit send `/v1/snitches/`).
    let routes: [(&str, MethodRouter<ApiState>); 21] = [
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
        (
            "/v1/snitches/{token}/check_ins/{id}/body",
            get(history::check_in_body),
        ),
        ("/v1/webhooks", get(list_webhooks).post(create_webhook)),
        ("/v1/webhooks/{id}", delete(delete_webhook)),
        (
            "/v1/channels",
            get(channels::list_channels).post(channels::create_channel),
        ),
        (
            "/v1/channels/{id}",
            get(channels::get_channel)
                .patch(channels::update_channel)
                .delete(channels::delete_channel),
        ),
        ("/v1/channels/{id}/test", post(channels::test_channel)),
        ("/v1/badges", get(crate::badge::list_badges)),
        ("/v1/badges/rotate", post(crate::badge::rotate_badges)),
        ("/badge/{key}/{file}", get(crate::badge::badge)),
        ("/badge/{key}/s/{file}", get(crate::badge::snitch_badge)),
        ("/v1/outages", get(list_outages)),
        ("/v1/schedules/preview", get(preview_schedule)),
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
                .layer(axum::middleware::from_fn(
                    crate::unread_body::close_when_body_unread,
                ))
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

/// The case of a request with a valid API key, after the maintenance and rate checks.
pub(crate) struct Authed(pub(crate) Case);

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
pub(crate) fn whole_secs(wait: std::time::Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// The username of HTTP Basic credentials: the API key. The password is ignored (compat).
pub(crate) fn basic_username(headers: &HeaderMap) -> Option<String> {
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
pub(crate) struct JsonBody(Option<Value>);

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
