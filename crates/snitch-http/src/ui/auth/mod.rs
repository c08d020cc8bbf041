//! Who may use the dashboard, in one place for a security reviewer: signing in with an
//! API key (the sign-in form's CSRF token double-submitted in a cookie, failed attempts
//! limited per client address as on the API), server-side sessions ([`session`]: the
//! cookie holds a random session id, never the key), the [`SignedIn`] extractor every
//! page goes through (maintenance, revoked keys, the key's rate limit), the CSRF check of
//! every form a signed-in page posts, and signing out.

pub mod session;

use std::time::Duration;

use axum::extract::{FromRequest, FromRequestParts, RawQuery, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use snitch_core::Case;

use super::{done_of, pages, Form, UiState, LOGIN_COOKIE, SESSION_COOKIE};
use crate::api::whole_secs;
use crate::auth_limit::client_of;
use session::{random_secret, same_secret};

pub(super) const LOGIN_FORM_TTL: Duration = Duration::from_secs(3600);
/// How many recent events a snitch's page shows.
/// The value of cookie `name` in the request's `Cookie` headers.
pub(super) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// Whether the browser says the request came from another site (`Sec-Fetch-Site`):
/// such a POST is refused whatever it carries.
pub(super) fn cross_site(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| !matches!(v, "same-origin" | "none"))
}

/// A signed-in browser: its live session's case and CSRF token (no `Debug`: the id and
/// the token are credentials).
pub(super) struct SignedIn {
    pub(super) case: Case,
    pub(super) id: String,
    pub(super) csrf: String,
}

impl FromRequestParts<UiState> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, ui: &UiState) -> Result<Self, Response> {
        let api = &ui.api.inner;
        if ui.api.maintenance() {
            return Err(ui.error_page(
                None,
                StatusCode::SERVICE_UNAVAILABLE,
                "Maintenance",
                "Snitch is in maintenance; check-ins are still recorded. Try again later.",
            ));
        }
        let to_login = || ui.see_other("/login");
        let Some(id) = cookie(&parts.headers, SESSION_COOKIE) else {
            return Err(to_login());
        };
        let Some(session) = ui.sessions.get(id) else {
            return Err(to_login());
        };
        // A revoked key ends its sessions.
        let Some((digest, case_id)) = api.keys.case_of_digest(&session.key) else {
            ui.sessions.end(id);
            return Err(to_login());
        };
        if let Err(not_until) = api.limiter.check_key(&digest) {
            let wait = whole_secs(api.limit_clock.wait(&not_until));
            let mut r = ui.error_page(
                None,
                StatusCode::TOO_MANY_REQUESTS,
                "Too many requests",
                &format!("This key made too many requests; try again in {wait} s."),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(wait));
            return Err(r);
        }
        let case = match api.service.storage().case(&case_id).await {
            Ok(Some(case)) => case,
            Ok(None) => {
                ui.sessions.end(id);
                return Err(to_login());
            }
            Err(e) => {
                let signed = SignedIn {
                    case: Case::new(case_id),
                    id: String::new(),
                    csrf: String::new(),
                };
                return Err(ui.service_error(&signed, e.into()));
            }
        };
        Ok(SignedIn {
            case,
            id: id.to_owned(),
            csrf: session.csrf,
        })
    }
}

/// A form posted by a signed-in browser from its own session's page: every dashboard
/// POST but the sign-in's. Refused (403) when it comes from another site or without the
/// session's CSRF token.
pub(super) struct SignedForm {
    pub(super) signed: SignedIn,
    pub(super) form: Form,
}

impl FromRequest<UiState> for SignedForm {
    type Rejection = Response;

    async fn from_request(req: Request, ui: &UiState) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let signed = SignedIn::from_request_parts(&mut parts, ui).await?;
        let cross_site = cross_site(&parts.headers);
        let form = Form::from_request(Request::from_parts(parts, body), ui).await?;
        if cross_site || !same_secret(form.get("csrf"), &signed.csrf) {
            return Err(ui.error_page(
                Some(&signed),
                StatusCode::FORBIDDEN,
                "Refused",
                "This form did not come from this session's page (or the page is old). Go back, reload and try again.",
            ));
        }
        Ok(SignedForm { signed, form })
    }
}

pub(super) async fn login_form(State(ui): State<UiState>, RawQuery(query): RawQuery) -> Response {
    let done = done_of(query.as_deref());
    let token = random_secret();
    let frame = ui.frame(None);
    let page = pages::login(&frame, &token, None, done.as_deref());
    with_login_cookie(&ui, ui.page(StatusCode::OK, page), &token)
}

pub(super) fn with_login_cookie(ui: &UiState, mut r: Response, token: &str) -> Response {
    r.headers_mut().append(
        header::SET_COOKIE,
        ui.cookie(LOGIN_COOKIE, token, LOGIN_FORM_TTL),
    );
    r
}

/// The sign-in form with a fresh CSRF token, double-submitted in [`LOGIN_COOKIE`].
pub(super) fn login_page(ui: &UiState, status: StatusCode, message: Option<&str>) -> Response {
    let token = random_secret();
    let page = pages::login(&ui.frame(None), &token, message, None);
    with_login_cookie(ui, ui.page(status, page), &token)
}

pub(super) async fn login(State(ui): State<UiState>, req: Request) -> Response {
    let api = &ui.api.inner;
    if ui.api.maintenance() {
        return ui.error_page(
            None,
            StatusCode::SERVICE_UNAVAILABLE,
            "Maintenance",
            "Snitch is in maintenance; try again later.",
        );
    }
    let client = client_of(req.extensions());
    let headers = req.headers().clone();
    let form = match Form::from_request(req, &ui).await {
        Ok(form) => form,
        Err(r) => return r,
    };
    let form_token = cookie(&headers, LOGIN_COOKIE).unwrap_or("");
    if cross_site(&headers) || !same_secret(form.get("csrf"), form_token) {
        return login_page(
            &ui,
            StatusCode::FORBIDDEN,
            Some("The sign-in form expired or came from elsewhere; sign in again."),
        );
    }
    let blocked = |wait: Duration| {
        let secs = whole_secs(wait);
        let mut r = login_page(
            &ui,
            StatusCode::TOO_MANY_REQUESTS,
            Some(&format!(
                "Too many failed sign-ins from this address; try again in {secs} s."
            )),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        r
    };
    // Blocked addresses are refused before the key is looked at, as on the API.
    if let Some(wait) = api.failures.blocked_for(&client) {
        return blocked(wait);
    }
    let key = form.get("key").trim();
    if key.is_empty() {
        return login_page(
            &ui,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("Enter an API key."),
        );
    }
    let failed = || match api.failures.record_failure(client) {
        Some(wait) => blocked(wait),
        None => login_page(
            &ui,
            StatusCode::UNAUTHORIZED,
            Some("That API key is not valid."),
        ),
    };
    let Some((digest, case_id)) = api.keys.case_of(key) else {
        return failed();
    };
    match api.service.storage().case(&case_id).await {
        Ok(Some(_)) => {}
        Ok(None) => return failed(),
        Err(e) => {
            let signed = SignedIn {
                case: Case::new(case_id),
                id: String::new(),
                csrf: String::new(),
            };
            return ui.service_error(&signed, e.into());
        }
    }
    // A new sign-in replaces the browser's old session, if any: one session per cookie.
    if let Some(old) = cookie(&headers, SESSION_COOKIE) {
        ui.sessions.end(old);
    }
    let (id, _) = ui.sessions.start(digest);
    let mut r = ui.see_other("/");
    let headers = r.headers_mut();
    headers.append(
        header::SET_COOKIE,
        ui.cookie(SESSION_COOKIE, &id, ui.sessions.ttl()),
    );
    headers.append(
        header::SET_COOKIE,
        ui.cookie(LOGIN_COOKIE, "", Duration::ZERO),
    );
    r
}

pub(super) async fn logout(
    State(ui): State<UiState>,
    SignedForm { signed, .. }: SignedForm,
) -> Response {
    ui.sessions.end(&signed.id);
    let mut r = ui.see_other("/login?done=signed-out");
    r.headers_mut().append(
        header::SET_COOKIE,
        ui.cookie(SESSION_COOKIE, "", Duration::ZERO),
    );
    r
}
