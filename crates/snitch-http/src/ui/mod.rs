//! The web dashboard (feature `ui`): server-rendered pages over the same
//! [`SnitchService`] as the API, mounted by the server under `/ui`.
//!
//! - Signing in takes an API key; the browser then holds only a random session id in an
//!   `HttpOnly`, `SameSite=Strict` cookie (`Secure` when [`UiConfig::secure_cookies`]).
//!   Sessions live on the server ([`session`]), expire, end at sign-out and end when their
//!   key is revoked. Failed sign-ins count against the API's failed-authentication limit
//!   of the client's address ([`crate::AuthFailureLimit`]), and a blocked address cannot sign in.
//! - Every POST carries the session's CSRF token (the sign-in form a token of its own,
//!   double-submitted in a short cookie) and is refused when the browser says it came
//!   from another site (`Sec-Fetch-Site`).
//! - Text a user or a job wrote is escaped by maud (`pages.rs`); every answer carries a
//!   `Content-Security-Policy` that allows scripts and styles only from the dashboard's
//!   own files (no inline script, no inline style).
//!
//! The router serves its pages under [`UiConfig::base_path`] itself: `merge` it into the
//! host's router (`api_router(api).merge(ui_router(ui))`).

mod auth;
mod badges;
mod channels;
mod pages;
pub use auth::session;
pub mod timeline;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Path, RawQuery, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::Markup;
use snitch_core::{EmailKeywordsInput, ServiceError, SnitchFields, SnitchService, Validations};
use tower_http::catch_panic::CatchPanicLayer;

use crate::{refusal, ApiState, Refusal, MAX_BODY_BYTES};
use auth::{login, login_form, logout, SignedForm, SignedIn};
use pages::{Frame, SignedInView, SnitchForm};
use session::{Sessions, MAX_SESSIONS};

/// The cookie naming a session.
pub const SESSION_COOKIE: &str = "snitch_session";
/// The cookie of the sign-in form's CSRF token (before there is a session).
pub const LOGIN_COOKIE: &str = "snitch_login";
/// How long a sign-in form stays valid.
const EVENTS_SHOWN: usize = 20;
/// How many periods the timeline shows.
pub const TIMELINE_PERIODS: usize = 30;

/// The policy of every dashboard answer: scripts, styles and images only from the
/// dashboard itself, no inline script or style, forms only to itself, never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     base-uri 'none'; frame-ancestors 'none'";

const APP_CSS: &str = include_str!("assets/app.css");
const APP_JS: &str = include_str!("assets/app.js");
const ICON_SVG: &str = include_str!("assets/icon.svg");

/// Settings of the dashboard: `UiConfig::default()` plus the `with_*` setters.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct UiConfig {
    /// Where the pages live, without a trailing slash (default `/ui`): the routes, links,
    /// redirects and the cookies' `Path` use it.
    pub base_path: String,
    /// Mark the cookies `Secure` (sent only over https). The server sets it when its
    /// `base_url` is https.
    pub secure_cookies: bool,
    /// How long a session lasts from sign-in (default 12 hours).
    pub session_ttl: Duration,
}

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig {
            base_path: "/ui".into(),
            secure_cookies: false,
            session_ttl: Duration::from_secs(12 * 3600),
        }
    }
}

/// What the dashboard's handlers share: the API's state (service, keys, limits) and the
/// sessions. Clones share the sessions.
#[derive(Clone, Debug)]
pub struct UiState {
    api: ApiState,
    sessions: Arc<Sessions>,
    config: Arc<UiConfig>,
}

impl UiConfig {
    /// Serves the pages under `base_path` (e.g. `/monitor/ui`).
    pub fn with_base_path(mut self, base_path: impl Into<String>) -> Self {
        self.base_path = base_path.into();
        self
    }

    /// Marks the cookies `Secure` (for a dashboard served over https).
    pub fn with_secure_cookies(mut self, secure: bool) -> Self {
        self.secure_cookies = secure;
        self
    }

    /// How long a session lasts from sign-in.
    pub fn with_session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = ttl;
        self
    }
}

impl UiState {
    /// The dashboard over the API's state (its service, keys and failure limit).
    pub fn new(api: ApiState, mut config: UiConfig) -> Self {
        config.base_path = config.base_path.trim_end_matches('/').to_owned();
        UiState {
            sessions: Arc::new(Sessions::new(
                config.session_ttl,
                MAX_SESSIONS,
                api.inner.service.clock().clone(),
            )),
            api,
            config: Arc::new(config),
        }
    }

    fn service(&self) -> &SnitchService {
        &self.api.inner.service
    }

    fn base(&self) -> &str {
        &self.config.base_path
    }

    fn cookie_path(&self) -> &str {
        if self.base().is_empty() {
            "/"
        } else {
            self.base()
        }
    }

    fn cookie(&self, name: &str, value: &str, max_age: Duration) -> HeaderValue {
        let secure = if self.config.secure_cookies {
            "; Secure"
        } else {
            ""
        };
        let text = format!(
            "{name}={value}; Path={}; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
            self.cookie_path(),
            max_age.as_secs()
        );
        // Names, values and the configured path are printable ASCII.
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    fn frame<'a>(&'a self, signed: Option<&'a SignedIn>) -> Frame<'a> {
        Frame {
            base: self.base(),
            signed_in: signed.map(|s| SignedInView {
                case: s.case.id.as_str(),
                csrf: &s.csrf,
            }),
        }
    }

    fn page(&self, status: StatusCode, markup: Markup) -> Response {
        (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            markup.into_string(),
        )
            .into_response()
    }

    fn error_page(
        &self,
        signed: Option<&SignedIn>,
        status: StatusCode,
        title: &str,
        message: &str,
    ) -> Response {
        self.page(status, pages::error(&self.frame(signed), title, message))
    }

    fn see_other(&self, path: &str) -> Response {
        let location = format!("{}{path}", self.base());
        match HeaderValue::from_str(&location) {
            Ok(v) => (StatusCode::SEE_OTHER, [(header::LOCATION, v)]).into_response(),
            Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        }
    }

    /// The page for a failed operation of the service.
    fn service_error(&self, signed: &SignedIn, err: ServiceError) -> Response {
        let page = |status, title: &str, message: &str| {
            self.error_page(Some(signed), status, title, message)
        };
        match err {
            ServiceError::NotFound => page(
                StatusCode::NOT_FOUND,
                "Not found",
                "There is no such snitch or webhook in this case.",
            ),
            ServiceError::Invalid(v) => {
                page(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", &v.to_string())
            }
            ServiceError::PlanLimitReached { max } => page(
                StatusCode::PAYMENT_REQUIRED,
                "Plan limit reached",
                &format!("The case's plan allows at most {max} snitches."),
            ),
            ServiceError::AccountOnHold => page(
                StatusCode::PAYMENT_REQUIRED,
                "Account on hold",
                "The case is on hold; its snitches cannot be shown or changed.",
            ),
            ServiceError::Storage(e) if e.is_transient() || e.is_outcome_unknown() => {
                tracing::warn!(cause = %e, "storage failed; the dashboard answered 503");
                let mut r = page(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Try again",
                    "The store is unavailable for a moment; reload the page.",
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(1));
                r
            }
            e => {
                tracing::error!(cause = %e, "dashboard request failed");
                page(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong",
                    "The request failed; it was logged.",
                )
            }
        }
    }
}

/// The dashboard's routes, under [`UiConfig::base_path`] (`/ui/`, `/ui/login`, …):
/// `merge` the router into the host's (the server merges it into the API's). Unknown
/// paths under the base get an HTML 404.
pub fn ui_router(state: UiState) -> Router {
    let base = state.base().to_owned();
    let at = |path: &str| format!("{base}{path}");
    let not_found = state.clone();
    let for_refusal = state.clone();
    // Dashboard requests are logged and counted by route template as the API's are.
    let observer = crate::observe::Observer::api(state.api.inner.metrics.clone());
    let mut router = Router::new()
        .route(&at("/"), get(index))
        .route(&at("/login"), get(login_form).post(login))
        .route(&at("/logout"), post(logout))
        .route(&at("/snitches"), post(create))
        .route(&at("/snitches/new"), get(new_form))
        .route(&at("/snitches/{token}"), get(show))
        .route(&at("/schedules/preview"), get(preview))
        .route(
            &at("/snitches/{token}/check_ins/{id}/body"),
            get(check_in_body),
        )
        .route(&at("/snitches/{token}/edit"), get(edit_form).post(update))
        .route(&at("/snitches/{token}/pause"), post(pause))
        .route(&at("/snitches/{token}/unpause"), post(unpause))
        .route(
            &at("/snitches/{token}/delete"),
            get(confirm_delete).post(delete),
        )
        .route(&at("/webhooks"), get(webhooks).post(add_webhook))
        .route(&at("/webhooks/{id}/delete"), post(delete_webhook))
        .route(
            &at("/channels"),
            get(channels::channels).post(channels::add_channel),
        )
        .route(&at("/channels/new"), get(channels::new_channel))
        .route(
            &at("/channels/{id}/edit"),
            get(channels::edit_channel_form).post(channels::update_channel),
        )
        .route(&at("/channels/{id}/test"), post(channels::test_channel))
        .route(&at("/channels/{id}/delete"), post(channels::delete_channel))
        .route(&at("/badges"), get(badges::badges))
        .route(&at("/badges/rotate"), post(badges::rotate))
        .route(
            &at("/alerts/{channel_id}/{reference}"),
            get(channels::alert),
        )
        .route(
            &at("/assets/app.css"),
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
        .route(
            &at("/assets/icon.svg"),
            get(|| async { asset("image/svg+xml", ICON_SVG) }),
        )
        .route(
            &at("/assets/app.js"),
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        );
    if !base.is_empty() {
        router = router.route(&base, get(index)).route(
            &at("/{*rest}"),
            axum::routing::any(move || async move {
                not_found.error_page(
                    None,
                    StatusCode::NOT_FOUND,
                    "Not found",
                    "There is no such page.",
                )
            }),
        );
    }
    router
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let ui = for_refusal.clone();
                async move {
                    match refusal(&req) {
                        Some(Refusal::NotFound) => ui.error_page(
                            None,
                            StatusCode::NOT_FOUND,
                            "Not found",
                            "There is no such page.",
                        ),
                        Some(Refusal::TooLarge) => ui.error_page(
                            None,
                            StatusCode::PAYLOAD_TOO_LARGE,
                            "Too large",
                            "The form is too large.",
                        ),
                        None => next.run(req).await,
                    }
                }
            },
        ))
        .layer(axum::middleware::map_response(security_headers))
        .layer(axum::middleware::from_fn(
            crate::unread_body::close_when_body_unread,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(CatchPanicLayer::new())
        .layer(axum::middleware::from_fn_with_state(
            observer,
            crate::observe::observe,
        ))
        .with_state(state)
}

async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        // Check-in URLs hold their snitch's secret: never sent on as a referrer.
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// A form body (`application/x-www-form-urlencoded`): the first value of each field.
/// Never refused for its content; over [`MAX_BODY_BYTES`] it is 413.
struct Form(HashMap<String, String>);

impl Form {
    fn get(&self, name: &str) -> &str {
        self.0.get(name).map_or("", String::as_str)
    }
}

impl FromRequest<UiState> for Form {
    type Rejection = Response;

    async fn from_request(req: Request, ui: &UiState) -> Result<Self, Response> {
        let bytes = Bytes::from_request(req, ui).await.map_err(|_| {
            ui.error_page(
                None,
                StatusCode::PAYLOAD_TOO_LARGE,
                "Too large",
                "The form is too large.",
            )
        })?;
        let mut fields = HashMap::new();
        for (k, v) in form_urlencoded::parse(&bytes) {
            fields
                .entry(k.into_owned())
                .or_insert_with(|| v.into_owned());
        }
        Ok(Form(fields))
    }
}

/// `?done=…` of a page after an action.
fn done_of(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .find(|(k, _)| k == "done")
        .map(|(_, v)| v.into_owned())
}

/// Where a snitch of this status comes in the dashboard's list: the ones that need
/// attention first.
fn attention(status: snitch_core::Status) -> u8 {
    use snitch_core::Status;
    match status {
        Status::Failed => 0,
        Status::Errored => 1,
        _ => 2,
    }
}

async fn index(State(ui): State<UiState>, signed: SignedIn, RawQuery(query): RawQuery) -> Response {
    let params: HashMap<String, String> =
        form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let raw = params.get("tags").map_or("", String::as_str);
    let (filter, problem) = match SnitchService::parse_tag_filter(raw) {
        Ok(tags) => (tags, None),
        Err(ServiceError::Invalid(v)) => (Vec::new(), v.iter().next().map(|p| p.message.clone())),
        Err(e) => return ui.service_error(&signed, e),
    };
    // An invalid filter shows nothing rather than everything.
    let mut snitches = if problem.is_some() {
        Vec::new()
    } else {
        match ui.service().list(&signed.case, &filter).await {
            Ok(s) => s,
            Err(e) => return ui.service_error(&signed, e),
        }
    };
    // What needs attention first (failed, then errored), each group oldest first as
    // the API lists them (the sort is stable).
    snitches.sort_by_key(|s| attention(s.status()));
    let view = pages::ListView {
        snitches: &snitches,
        filter: raw,
        filter_problem: problem.as_deref(),
        now: ui.service().now(),
        done: params.get("done").map(String::as_str),
    };
    let status = if problem.is_some() {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    ui.page(status, pages::list(&ui.frame(Some(&signed)), &view))
}

/// The create and edit form's values as the service's fields: every field given, so an
/// edit that empties one clears it.
fn snitch_fields(form: &Form) -> (SnitchFields, SnitchForm) {
    let typed = SnitchForm {
        name: form.get("name").to_owned(),
        interval: form.get("interval").to_owned(),
        schedule: form.get("schedule").to_owned(),
        timezone: form.get("timezone").to_owned(),
        grace_seconds: form.get("grace_seconds").to_owned(),
        max_runtime_seconds: form.get("max_runtime_seconds").to_owned(),
        failure_tolerance: form.get("failure_tolerance").to_owned(),
        missed_tolerance: form.get("missed_tolerance").to_owned(),
        alert_type: form.get("alert_type").to_owned(),
        alert_email: form.get("alert_email").to_owned(),
        notes: form.get("notes").to_owned(),
        tags: form.get("tags").to_owned(),
        failure_keywords: form.get("failure_keywords").to_owned(),
        success_keywords: form.get("success_keywords").to_owned(),
        start_keywords: form.get("start_keywords").to_owned(),
        keyword_search: form.get("keyword_search").to_owned(),
    };
    let list = |raw: &str| -> Vec<String> {
        raw.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect()
    };
    // A schedule, when one is typed, instead of the interval.
    let schedule = Some(typed.schedule.trim().to_owned()).filter(|s| !s.is_empty());
    let schedule_given = schedule.is_some();
    let timezone = Some(typed.timezone.trim().to_owned()).filter(|s| !s.is_empty());
    let fields = SnitchFields {
        name: Some(typed.name.clone()),
        interval: match schedule {
            Some(_) => None,
            None => Some(typed.interval.clone()),
        },
        timezone: schedule
            .as_ref()
            .map(|_| timezone.unwrap_or_else(|| "UTC".to_owned())),
        schedule,
        alert_type: Some(if typed.alert_type.is_empty() {
            "basic".to_owned()
        } else {
            typed.alert_type.clone()
        }),
        alert_email: Some(list(&typed.alert_email)),
        notes: Some(typed.notes.clone()),
        tags: Some(list(&typed.tags)),
        grace_seconds: schedule_given
            .then(|| whole_number(&typed.grace_seconds))
            .flatten(),
        max_runtime_seconds: whole_number(&typed.max_runtime_seconds),
        failure_tolerance: whole_number(&typed.failure_tolerance),
        missed_tolerance: whole_number(&typed.missed_tolerance),
        // Empty lists clear them.
        email_keywords: Some(EmailKeywordsInput {
            failure: list(&typed.failure_keywords),
            success: list(&typed.success_keywords),
            start: list(&typed.start_keywords),
            search: Some(typed.keyword_search.trim().to_owned()).filter(|s| !s.is_empty()),
        }),
        ..SnitchFields::default()
    };
    (fields, typed)
}

/// A number field of the form: empty is not given; text that is no whole number is
/// given as a value no range holds, so the service's problem names the field.
fn whole_number(raw: &str) -> Option<i64> {
    let raw = raw.trim();
    (!raw.is_empty()).then(|| raw.parse::<i64>().unwrap_or(i64::MIN))
}

/// `GET /schedules/preview?schedule=…&timezone=…`: the API's preview for the form, as the
/// user types (`app.js`); a bad parameter is the API's 422 naming it.
async fn preview(
    State(ui): State<UiState>,
    // Only for a signed-in browser; the preview itself needs no case.
    _signed_in: SignedIn,
    RawQuery(query): RawQuery,
) -> Response {
    match crate::api::handlers::schedule_preview(query.as_deref(), ui.service().now()) {
        Ok(preview) => axum::Json(preview).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The output a check-in kept, as plain text (never rendered as a page).
async fn check_in_body(
    State(ui): State<UiState>,
    signed: SignedIn,
    Path((token, id)): Path<(String, String)>,
) -> Response {
    let Ok(number) = id.parse::<u64>() else {
        return ui.service_error(&signed, ServiceError::NotFound);
    };
    match ui
        .service()
        .check_in_body(&signed.case, &token, number)
        .await
    {
        Ok(body) => (
            [
                (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                (header::CONTENT_DISPOSITION, "inline"),
            ],
            body.as_str().to_owned(),
        )
            .into_response(),
        Err(e) => ui.service_error(&signed, e),
    }
}

async fn new_form(State(ui): State<UiState>, signed: SignedIn) -> Response {
    let frame = ui.frame(Some(&signed));
    ui.page(
        StatusCode::OK,
        pages::snitch_form(&frame, None, &SnitchForm::default(), None),
    )
}

async fn create(State(ui): State<UiState>, SignedForm { signed, form }: SignedForm) -> Response {
    let (fields, typed) = snitch_fields(&form);
    match ui.service().create(&signed.case, &fields).await {
        Ok(s) => ui.see_other(&format!("/snitches/{}?done=created", s.token().as_str())),
        Err(ServiceError::Invalid(v)) => {
            let frame = ui.frame(Some(&signed));
            ui.page(
                StatusCode::UNPROCESSABLE_ENTITY,
                pages::snitch_form(&frame, None, &typed, Some(&v)),
            )
        }
        Err(e) => ui.service_error(&signed, e),
    }
}

async fn show(
    State(ui): State<UiState>,
    signed: SignedIn,
    Path(token): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let done = done_of(query.as_deref());
    snitch_page(&ui, &signed, &token, done.as_deref(), None).await
}

async fn snitch_page(
    ui: &UiState,
    signed: &SignedIn,
    token: &str,
    done: Option<&str>,
    pause_problems: Option<&Validations>,
) -> Response {
    let service = ui.service();
    let snitch = match service.get(&signed.case, token).await {
        Ok(s) => s,
        Err(e) => return ui.service_error(signed, e),
    };
    let kept = service.check_in_history();
    let check_ins = match service.check_ins(&signed.case, token, kept).await {
        Ok(c) => c,
        Err(e) => return ui.service_error(signed, e),
    };
    let events = match service
        .events_with_deliveries(&signed.case, token, EVENTS_SHOWN)
        .await
    {
        Ok(e) => e,
        Err(e) => return ui.service_error(signed, e),
    };
    let now = service.now();
    // The pause in force began with the latest `snitch.paused` event (among those shown;
    // otherwise it is older than them, and so is every period it covers).
    let paused_since = snitch.state().pause().as_ref().map(|_| {
        events
            .iter()
            .find(|(e, _)| e.kind == snitch_core::EventKind::Paused)
            .map_or(chrono::DateTime::<chrono::Utc>::MIN_UTC, |(e, _)| e.at)
    });
    let cells = timeline::timeline(
        snitch.cadence(),
        snitch.created_at(),
        &check_ins,
        check_ins.len() < kept,
        paused_since,
        now,
        TIMELINE_PERIODS,
    );
    let targets = ui.api.check_in_targets();
    let check_in_url = targets.url(snitch.token().as_str());
    let check_in_email = targets.email(snitch.token().as_str());
    let view = pages::SnitchView {
        snitch: &snitch,
        check_in_url: &check_in_url,
        check_in_email: check_in_email.as_deref(),
        check_ins: &check_ins,
        events: &events,
        timeline: &cells,
        now,
        done,
        pause_problems,
    };
    let status = if pause_problems.is_some() {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    ui.page(status, pages::snitch(&ui.frame(Some(signed)), &view))
}

async fn edit_form(
    State(ui): State<UiState>,
    signed: SignedIn,
    Path(token): Path<String>,
) -> Response {
    match ui.service().get(&signed.case, &token).await {
        Ok(s) => {
            let frame = ui.frame(Some(&signed));
            let form = SnitchForm::of(&s);
            ui.page(
                StatusCode::OK,
                pages::snitch_form(&frame, Some(s.token().as_str()), &form, None),
            )
        }
        Err(e) => ui.service_error(&signed, e),
    }
}

async fn update(
    State(ui): State<UiState>,
    Path(token): Path<String>,
    SignedForm { signed, form }: SignedForm,
) -> Response {
    let (fields, typed) = snitch_fields(&form);
    match ui.service().update(&signed.case, &token, &fields).await {
        Ok(s) => ui.see_other(&format!("/snitches/{}?done=updated", s.token().as_str())),
        Err(ServiceError::Invalid(v)) => {
            // Fields are checked before the snitch is looked up: a token of no snitch
            // of this case is still a 404, and the form's action names a real one.
            match ui.service().get(&signed.case, &token).await {
                Ok(s) => {
                    let frame = ui.frame(Some(&signed));
                    ui.page(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        pages::snitch_form(&frame, Some(s.token().as_str()), &typed, Some(&v)),
                    )
                }
                Err(e) => ui.service_error(&signed, e),
            }
        }
        Err(e) => ui.service_error(&signed, e),
    }
}

/// The `until` of the pause form for the service: `healthy`, `unpaused`, or a time (the
/// browser's UTC conversion when its script ran, else the typed time read as UTC).
fn pause_until(form: &Form) -> Result<String, Validations> {
    match form.get("until") {
        "" | "healthy" => Ok("healthy".into()),
        "unpaused" => Ok("unpaused".into()),
        "at" => {
            let utc = form.get("until_utc").trim();
            if !utc.is_empty() {
                return Ok(utc.to_owned());
            }
            let typed = form.get("until_at").trim();
            if typed.is_empty() {
                return Err(Validations::single("until", "needs a time"));
            }
            ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]
                .iter()
                .find_map(|f| chrono::NaiveDateTime::parse_from_str(typed, f).ok())
                .map(|t| crate::wire::format_time(t.and_utc()))
                .ok_or_else(|| Validations::single("until", "is not a date and time"))
        }
        _ => Err(Validations::single(
            "until",
            "must be healthy, unpaused or a time",
        )),
    }
}

async fn pause(
    State(ui): State<UiState>,
    Path(token): Path<String>,
    SignedForm { signed, form }: SignedForm,
) -> Response {
    let result = match pause_until(&form) {
        Ok(until) => ui.service().pause(&signed.case, &token, Some(&until)).await,
        Err(v) => Err(ServiceError::Invalid(v)),
    };
    match result {
        Ok(()) => ui.see_other(&format!("/snitches/{token}?done=paused")),
        Err(ServiceError::Invalid(v)) => snitch_page(&ui, &signed, &token, None, Some(&v)).await,
        Err(e) => ui.service_error(&signed, e),
    }
}

async fn unpause(
    State(ui): State<UiState>,
    Path(token): Path<String>,
    SignedForm { signed, .. }: SignedForm,
) -> Response {
    match ui.service().unpause(&signed.case, &token).await {
        Ok(()) => ui.see_other(&format!("/snitches/{token}?done=unpaused")),
        Err(e) => ui.service_error(&signed, e),
    }
}

async fn confirm_delete(
    State(ui): State<UiState>,
    signed: SignedIn,
    Path(token): Path<String>,
) -> Response {
    match ui.service().get(&signed.case, &token).await {
        Ok(s) => ui.page(
            StatusCode::OK,
            pages::confirm_delete(&ui.frame(Some(&signed)), &s),
        ),
        Err(e) => ui.service_error(&signed, e),
    }
}

async fn delete(
    State(ui): State<UiState>,
    Path(token): Path<String>,
    SignedForm { signed, .. }: SignedForm,
) -> Response {
    match ui.service().delete(&signed.case, &token).await {
        Ok(()) => ui.see_other("/?done=deleted"),
        Err(e) => ui.service_error(&signed, e),
    }
}

async fn webhooks(
    State(ui): State<UiState>,
    signed: SignedIn,
    RawQuery(query): RawQuery,
) -> Response {
    let done = done_of(query.as_deref());
    hooks_page(&ui, &signed, done.as_deref(), None, "").await
}

async fn hooks_page(
    ui: &UiState,
    signed: &SignedIn,
    done: Option<&str>,
    errors: Option<&Validations>,
    url: &str,
) -> Response {
    match ui.service().webhooks(&signed.case).await {
        Ok(hooks) => {
            let status = if errors.is_some() {
                StatusCode::UNPROCESSABLE_ENTITY
            } else {
                StatusCode::OK
            };
            let frame = ui.frame(Some(signed));
            ui.page(status, pages::webhooks(&frame, &hooks, done, errors, url))
        }
        Err(e) => ui.service_error(signed, e),
    }
}

async fn add_webhook(
    State(ui): State<UiState>,
    SignedForm { signed, form }: SignedForm,
) -> Response {
    let url = form.get("url").trim();
    let secret = Some(form.get("secret")).filter(|s| !s.is_empty());
    match ui.service().create_webhook(&signed.case, url, secret).await {
        Ok(_) => ui.see_other("/webhooks?done=hook-added"),
        Err(ServiceError::Invalid(v)) => hooks_page(&ui, &signed, None, Some(&v), url).await,
        Err(e) => ui.service_error(&signed, e),
    }
}

async fn delete_webhook(
    State(ui): State<UiState>,
    Path(id): Path<String>,
    SignedForm { signed, .. }: SignedForm,
) -> Response {
    match ui.service().delete_webhook(&signed.case, &id).await {
        Ok(()) => ui.see_other("/webhooks?done=hook-removed"),
        Err(e) => ui.service_error(&signed, e),
    }
}

#[cfg(test)]
mod tests;
