//! The dashboard's handlers without TCP (`oneshot`), merged into the API router as the
//! server mounts them: sign-in, cookies, CSRF, escaping, the actions.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use snitch_core::{Case, CaseId, Outcome, SnitchFields, SnitchService, Status, SystemClock};
use snitch_store_memory::MemoryStorage;
use tower::ServiceExt;

use super::*;
use crate::{api_router, ApiConfig, ApiKeys, AuthFailureLimit};
use session::random_secret;

const KEY: &str = "ui-test-key-0123456789abcdef0123456789";

struct Fixture {
    app: Router,
    service: SnitchService,
    case: Case,
    keys: Arc<ApiKeys>,
    api: ApiState,
}

async fn fixture() -> Fixture {
    fixture_with(AuthFailureLimit::default(), false).await
}

async fn fixture_with(auth_failures: AuthFailureLimit, secure: bool) -> Fixture {
    fixture_full(
        auth_failures,
        secure,
        std::time::Duration::from_secs(12 * 3600),
    )
    .await
}

async fn fixture_full(
    auth_failures: AuthFailureLimit,
    secure: bool,
    session_ttl: std::time::Duration,
) -> Fixture {
    let storage = Arc::new(MemoryStorage::new());
    let service = SnitchService::new(storage, Arc::new(SystemClock));
    let case = Case::new(CaseId::parse("acme").expect("valid"));
    service.storage().upsert_case(&case).await.expect("case");
    let keys = Arc::new(ApiKeys::new());
    keys.add_plain(KEY, case.id.clone()).expect("long enough");
    let api = ApiState::new(
        service.clone(),
        keys.clone(),
        ApiConfig {
            check_in_base: "https://nosnch.test".into(),
            auth_failures,
            ..ApiConfig::default()
        },
    );
    let ui = UiState::new(
        api.clone(),
        UiConfig {
            secure_cookies: secure,
            session_ttl,
            ..UiConfig::default()
        },
    );
    Fixture {
        app: api_router(api.clone()).merge(ui_router(ui)),
        service,
        case,
        keys,
        api,
    }
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all(header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().expect("ascii").to_owned())
            .collect()
    }

    /// The value of a cookie this answer sets.
    fn cookie(&self, name: &str) -> Option<String> {
        self.set_cookies().iter().find_map(|c| {
            let (pair, _) = c.split_once(';')?;
            let (k, v) = pair.split_once('=')?;
            (k == name).then(|| v.to_owned())
        })
    }

    /// The first hidden CSRF field of the page.
    fn csrf(&self) -> String {
        let marker = "name=\"csrf\" value=\"";
        let at = self.body.find(marker).expect("a form with a CSRF token") + marker.len();
        self.body[at..].split('"').next().expect("value").to_owned()
    }
}

async fn send(app: &Router, req: Request<Body>) -> Answer {
    let response = app.clone().oneshot(req).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).expect("UTF-8"),
    }
}

fn get(uri: &str, cookie: Option<&str>) -> Request<Body> {
    let mut req = Request::builder().method(Method::GET).uri(uri);
    if let Some(c) = cookie {
        req = req.header(header::COOKIE, c);
    }
    req.body(Body::empty()).expect("request")
}

fn post(uri: &str, cookie: Option<&str>, form: &[(&str, &str)]) -> Request<Body> {
    let body: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    if let Some(c) = cookie {
        req = req.header(header::COOKIE, c);
    }
    req.body(Body::from(body)).expect("request")
}

fn from(mut req: Request<Body>, addr: &str) -> Request<Body> {
    let addr: SocketAddr = addr.parse().expect("address");
    req.extensions_mut().insert(ConnectInfo(addr));
    req
}

/// Opens the sign-in form and submits `key`; the answer and the form's cookie.
async fn sign_in_with(app: &Router, key: &str, addr: &str) -> Answer {
    let form = send(app, get("/ui/login", None)).await;
    assert_eq!(form.status, StatusCode::OK);
    let token = form.cookie(LOGIN_COOKIE).expect("form cookie");
    assert_eq!(form.csrf(), token, "double submit: field and cookie agree");
    let cookie = format!("{LOGIN_COOKIE}={token}");
    let req = post(
        "/ui/login",
        Some(&cookie),
        &[("csrf", &token), ("key", key)],
    );
    send(app, from(req, addr)).await
}

/// A signed-in browser: its cookie header and its session's CSRF token.
struct Browser {
    cookie: String,
    csrf: String,
}

async fn sign_in(app: &Router) -> Browser {
    let answer = sign_in_with(app, KEY, "10.1.1.1:1000").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert_eq!(answer.location(), "/ui/");
    let id = answer.cookie(SESSION_COOKIE).expect("session cookie");
    let cookie = format!("{SESSION_COOKIE}={id}");
    let page = send(app, get("/ui/", Some(&cookie))).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    Browser {
        csrf: page.csrf(),
        cookie,
    }
}

impl Fixture {
    async fn snitch(&self, name: &str) -> String {
        let fields = SnitchFields {
            name: Some(name.into()),
            interval: Some("hourly".into()),
            tags: Some(vec!["a-tag".into()]),
            ..SnitchFields::default()
        };
        let s = self
            .service
            .create(&self.case, &fields)
            .await
            .expect("create");
        s.token().as_str().to_owned()
    }
}

#[tokio::test]
async fn the_session_cookie_is_httponly_strict_and_names_a_server_side_session() {
    let f = fixture().await;
    let answer = sign_in_with(&f.app, KEY, "10.0.0.1:1").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    let set = answer
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with(SESSION_COOKIE))
        .expect("session cookie");
    assert!(set.contains("; HttpOnly"), "{set}");
    assert!(set.contains("; SameSite=Strict"), "{set}");
    assert!(set.contains("; Path=/ui;"), "{set}");
    assert!(set.contains("; Max-Age=43200"), "{set}");
    assert!(!set.contains("Secure"), "plain http: {set}");
    assert!(!set.contains(KEY), "the key is never in the cookie: {set}");
    let id = answer.cookie(SESSION_COOKIE).expect("id");
    assert_eq!(id.len(), 43);
    // The sign-in form's token is cleared.
    let login = answer.cookie(LOGIN_COOKIE).expect("cleared");
    assert_eq!(login, "");
    // Over https the cookies are Secure.
    let f = fixture_with(AuthFailureLimit::default(), true).await;
    let form = send(&f.app, get("/ui/login", None)).await;
    assert!(form.set_cookies()[0].ends_with("; Secure"));
    let answer = sign_in_with(&f.app, KEY, "10.0.0.1:1").await;
    assert!(answer.set_cookies().iter().all(|c| c.contains("; Secure")));
}

#[tokio::test]
async fn pages_need_a_session_and_a_made_up_cookie_is_sent_to_sign_in() {
    let f = fixture().await;
    let token = f.snitch("x").await;
    for uri in [
        "/ui/".to_owned(),
        "/ui".to_owned(),
        format!("/ui/snitches/{token}"),
        "/ui/webhooks".to_owned(),
        "/ui/snitches/new".to_owned(),
        "/ui/channels".to_owned(),
        "/ui/channels/new?kind=slack".to_owned(),
        "/ui/badges".to_owned(),
    ] {
        for cookie in [
            None,
            Some("snitch_session=made-up"),
            Some("snitch_session="),
        ] {
            let answer = send(&f.app, get(&uri, cookie)).await;
            assert_eq!(answer.status, StatusCode::SEE_OTHER, "{uri} {cookie:?}");
            assert_eq!(answer.location(), "/ui/login");
        }
    }
    // An action without a session changes nothing.
    let answer = send(
        &f.app,
        post(&format!("/ui/snitches/{token}/delete"), None, &[]),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert!(f.service.get(&f.case, &token).await.is_ok());
}

#[tokio::test]
async fn a_wrong_key_is_refused_and_counts_against_the_api_failure_limit() {
    let f = fixture_with(
        AuthFailureLimit {
            per_minute: NonZeroU32::MIN,
            burst: NonZeroU32::new(2).expect("non-zero"),
        },
        false,
    )
    .await;
    let wrong = "wrong-key-0123456789abcdef0123456789";
    for _ in 0..2 {
        let answer = sign_in_with(&f.app, wrong, "10.9.9.9:1").await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
        assert!(answer.body.contains("That API key is not valid."));
        assert!(answer.cookie(SESSION_COOKIE).is_none());
    }
    // An empty key is not a guess: not counted.
    let answer = sign_in_with(&f.app, "  ", "10.9.9.9:1").await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    // The third failure blocks the address: sign-in with the right key too, and the API.
    let answer = sign_in_with(&f.app, wrong, "10.9.9.9:1").await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(answer.headers.contains_key(header::RETRY_AFTER));
    let answer = sign_in_with(&f.app, KEY, "10.9.9.9:2").await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(answer.cookie(SESSION_COOKIE).is_none());
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{KEY}:"))
    );
    let api = Request::builder()
        .uri("/v1/snitches")
        .header(header::AUTHORIZATION, basic)
        .body(Body::empty())
        .expect("request");
    assert_eq!(
        send(&f.app, from(api, "10.9.9.9:3")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another address signs in.
    let answer = sign_in_with(&f.app, KEY, "10.9.9.8:1").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
}

use base64::Engine as _;

#[tokio::test]
async fn sign_in_without_the_forms_token_is_refused() {
    let f = fixture().await;
    let form = send(&f.app, get("/ui/login", None)).await;
    let token = form.cookie(LOGIN_COOKIE).expect("cookie");
    let other = random_secret();
    let cookie = format!("{LOGIN_COOKIE}={token}");
    for (cookie, csrf) in [
        (None, token.as_str()),
        (Some(cookie.as_str()), ""),
        (Some(cookie.as_str()), other.as_str()),
    ] {
        let req = post("/ui/login", cookie, &[("csrf", csrf), ("key", KEY)]);
        let answer = send(&f.app, req).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{cookie:?} {csrf}");
        assert!(answer.cookie(SESSION_COOKIE).is_none());
    }
}

#[tokio::test]
async fn posts_without_the_sessions_csrf_token_or_from_another_site_are_refused() {
    let f = fixture().await;
    let token = f.snitch("keep me").await;
    let b = sign_in(&f.app).await;
    let uri = format!("/ui/snitches/{token}/delete");
    for csrf in ["", "wrong", &random_secret()] {
        let answer = send(&f.app, post(&uri, Some(&b.cookie), &[("csrf", csrf)])).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{csrf}");
    }
    let mut req = post(&uri, Some(&b.cookie), &[("csrf", &b.csrf)]);
    req.headers_mut()
        .insert("sec-fetch-site", "cross-site".parse().expect("header"));
    assert_eq!(send(&f.app, req).await.status, StatusCode::FORBIDDEN);
    // Another session's token does not work in this one.
    let other = sign_in(&f.app).await;
    assert_ne!(other.csrf, b.csrf);
    let answer = send(
        &f.app,
        post(&uri, Some(&b.cookie), &[("csrf", &other.csrf)]),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert!(f.service.get(&f.case, &token).await.is_ok(), "still there");
    // With it, from the same origin: deleted.
    let mut req = post(&uri, Some(&b.cookie), &[("csrf", &b.csrf)]);
    req.headers_mut()
        .insert("sec-fetch-site", "same-origin".parse().expect("header"));
    let answer = send(&f.app, req).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.location(), "/ui/?done=deleted");
    assert!(f.service.get(&f.case, &token).await.is_err());
}

const HOSTILE: [&str; 2] = [
    "<script>alert(1)</script>",
    "\"><img src=x onerror=alert(1)>",
];

#[tokio::test]
async fn text_written_by_users_and_jobs_renders_inert() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let mut tokens = Vec::new();
    for hostile in HOSTILE {
        let fields = SnitchFields {
            name: Some(hostile.into()),
            interval: Some("hourly".into()),
            notes: Some(hostile.into()),
            tags: Some(vec![hostile.into()]),
            ..SnitchFields::default()
        };
        let s = f.service.create(&f.case, &fields).await.expect("create");
        let token = s.token().as_str().to_owned();
        let message = snitch_core::CheckInMessage::truncating(hostile);
        f.service
            .check_in(
                &token,
                Outcome::Error {
                    exit_status: hostile.into(),
                },
                message,
            )
            .await
            .expect("check in");
        tokens.push(token);
    }
    f.service
        .create_webhook(
            &f.case,
            "https://hooks.test/x?a=\"><script>alert(1)</script>",
            None,
        )
        .await
        .expect("hook");
    let mut pages = vec!["/ui/".to_owned(), "/ui/webhooks".to_owned()];
    for t in &tokens {
        pages.push(format!("/ui/snitches/{t}"));
        pages.push(format!("/ui/snitches/{t}/edit"));
        pages.push(format!("/ui/snitches/{t}/delete"));
    }
    for uri in &pages {
        let page = send(&f.app, get(uri, Some(&b.cookie))).await;
        assert_eq!(page.status, StatusCode::OK, "{uri}");
        assert!(!page.body.contains("<script>alert"), "{uri}");
        assert!(!page.body.contains("<img"), "{uri}");
        assert!(!page.body.contains("onerror=alert(1)>"), "{uri}");
        // The only scripts are the dashboard's own file.
        assert_eq!(page.body.matches("<script").count(), 1, "{uri}");
    }
    let detail = send(&f.app, get(&pages[2], Some(&b.cookie))).await;
    assert!(detail
        .body
        .contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    let detail = send(&f.app, get(&pages[5], Some(&b.cookie))).await;
    assert!(detail
        .body
        .contains("&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"));
}

#[tokio::test]
async fn every_answer_has_a_strict_content_security_policy() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    for (uri, cookie) in [
        ("/ui/login", None),
        ("/ui/", Some(b.cookie.as_str())),
        ("/ui/no-such-page", None),
        ("/ui/assets/app.js", None),
    ] {
        let answer = send(&f.app, get(uri, cookie)).await;
        let csp = answer.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .expect("ascii");
        assert!(csp.contains("script-src 'self'"), "{uri}: {csp}");
        assert!(!csp.contains("unsafe-inline"), "{uri}: {csp}");
        assert!(csp.contains("frame-ancestors 'none'"));
        assert_eq!(answer.headers[header::REFERRER_POLICY], "no-referrer");
        assert_eq!(answer.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }
    // No inline script or style in any page: the policy would block it anyway.
    let page = send(&f.app, get("/ui/", Some(&b.cookie))).await;
    assert!(!page.body.contains("style=\""));
    assert!(!page.body.contains("onclick"));
    let missing = send(&f.app, get("/ui/no-such-page", None)).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.headers[header::CONTENT_TYPE]
        .to_str()
        .expect("ascii")
        .starts_with("text/html"));
}

#[tokio::test]
async fn sign_out_deletes_the_session() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let answer = send(
        &f.app,
        post("/ui/logout", Some(&b.cookie), &[("csrf", &b.csrf)]),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.location(), "/ui/login?done=signed-out");
    assert_eq!(answer.cookie(SESSION_COOKIE).as_deref(), Some(""));
    // The old cookie, replayed, names nothing.
    let answer = send(&f.app, get("/ui/", Some(&b.cookie))).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.location(), "/ui/login");
}

#[tokio::test]
async fn revoking_the_key_ends_its_sessions() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    assert!(f.keys.revoke(&crate::KeyDigest::of(KEY)));
    let answer = send(&f.app, get("/ui/", Some(&b.cookie))).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.location(), "/ui/login");
}

#[tokio::test]
async fn create_pause_unpause_and_edit_go_through_the_service() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let form = [
        ("csrf", b.csrf.as_str()),
        ("name", "nightly backup"),
        ("interval", "hourly"),
        ("alert_type", "basic"),
        ("tags", "db, nightly"),
        ("alert_email", ""),
        ("notes", "call Bob"),
    ];
    let answer = send(&f.app, post("/ui/snitches", Some(&b.cookie), &form)).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let list = f.service.list(&f.case, &[]).await.expect("list");
    assert_eq!(list.len(), 1);
    let s = &list[0];
    let token = s.token().as_str();
    assert_eq!(s.name().as_str(), "nightly backup");
    assert_eq!(s.tags().len(), 2);
    assert_eq!(
        answer.location(),
        format!("/ui/snitches/{token}?done=created")
    );
    let page = send(&f.app, get(answer.location(), Some(&b.cookie))).await;
    assert!(page.body.contains("Snitch created."));
    assert!(page.body.contains(&format!("https://nosnch.test/{token}")));
    assert!(page.body.contains("can be paused once it has checked in"));
    assert_eq!(
        page.body.matches("<li class=\"cell ").count(),
        TIMELINE_PERIODS
    );
    // Pending cannot be paused: a clear 422, not an error page.
    let here = format!("/ui/snitches/{token}");
    let pause = |until: &'static str| {
        post(
            &format!("{here}/pause"),
            Some(&b.cookie),
            &[("csrf", b.csrf.as_str()), ("until", until)],
        )
    };
    let answer = send(&f.app, pause("healthy")).await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        answer.body.contains("can&#39;t be paused while pending")
            || answer.body.contains("can't be paused while pending"),
        "{}",
        answer.body
    );
    f.service
        .check_in(
            token,
            Outcome::Success,
            snitch_core::CheckInMessage::truncating("all good"),
        )
        .await
        .expect("check in");
    let page = send(&f.app, get(&here, Some(&b.cookie))).await;
    assert!(page.body.contains("all good"));
    assert!(page.body.contains("snitch.reporting"));
    let answer = send(&f.app, pause("unpaused")).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(
        f.service.get(&f.case, token).await.expect("get").status(),
        Status::Paused
    );
    let answer = send(
        &f.app,
        post(
            &format!("{here}/unpause"),
            Some(&b.cookie),
            &[("csrf", &b.csrf)],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(
        f.service.get(&f.case, token).await.expect("get").status(),
        Status::Healthy
    );
    // Pause until a time: the browser's UTC value, or the typed time read as UTC.
    let answer = send(
        &f.app,
        post(
            &format!("{here}/pause"),
            Some(&b.cookie),
            &[
                ("csrf", &b.csrf),
                ("until", "at"),
                ("until_at", "2999-01-02T03:04"),
                ("until_utc", ""),
            ],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let s = f.service.get(&f.case, token).await.expect("get");
    let until = s.state().pause().expect("paused").until;
    assert_eq!(
        until,
        snitch_core::PauseUntil::At(
            chrono::DateTime::parse_from_rfc3339("2999-01-02T03:04:00Z")
                .expect("t")
                .to_utc()
        )
    );
    let answer = send(
        &f.app,
        post(
            &format!("{here}/pause"),
            Some(&b.cookie),
            &[
                ("csrf", &b.csrf),
                ("until", "at"),
                ("until_at", "2000-01-01T00:00"),
            ],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(answer.body.contains("must be in the future"));
    // Edit: every field as typed; an emptied one is cleared.
    let edit = [
        ("csrf", b.csrf.as_str()),
        ("name", "renamed"),
        ("interval", "daily"),
        ("alert_type", "smart"),
        ("tags", ""),
        ("alert_email", "ops@acme.test"),
        ("notes", ""),
    ];
    let answer = send(
        &f.app,
        post(&format!("{here}/edit"), Some(&b.cookie), &edit),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let s = f.service.get(&f.case, token).await.expect("get");
    assert_eq!(s.name().as_str(), "renamed");
    assert!(s.tags().is_empty() && s.notes().as_str().is_empty());
    assert_eq!(s.alert_email().as_slice().len(), 1);
}

#[tokio::test]
async fn a_cron_snitch_is_made_shown_and_edited_without_losing_its_schedule() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let form = [
        ("csrf", b.csrf.as_str()),
        ("name", "nightly backup"),
        ("interval", "daily"),
        ("schedule", "30 2 * * *"),
        ("timezone", "Europe/Riga"),
        ("alert_type", "basic"),
        ("tags", ""),
        ("alert_email", ""),
        ("notes", ""),
    ];
    let answer = send(&f.app, post("/ui/snitches", Some(&b.cookie), &form)).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let list = f.service.list(&f.case, &[]).await.expect("list");
    let s = &list[0];
    let runs = s
        .cadence()
        .expected_runs()
        .expect("a schedule, not the interval");
    assert_eq!(runs.schedule().expression(), "30 2 * * *");
    assert_eq!(runs.schedule().timezone(), "Europe/Riga");
    let token = s.token().as_str().to_owned();
    let page = send(&f.app, get(answer.location(), Some(&b.cookie))).await;
    assert!(
        page.body.contains("every day at 02:30 (Europe/Riga)"),
        "{}",
        page.body
    );
    // Its next runs, in the schedule's zone too, and its window.
    assert_eq!(
        page.body.matches(":30:00.000+0").count(),
        5,
        "{}",
        page.body
    );
    assert!(page.body.contains(" in Europe/Riga)"), "{}", page.body);
    assert!(
        page.body.contains("from up to 60 s before a run"),
        "{}",
        page.body
    );
    // The edit form shows the schedule, and saving it unchanged keeps it.
    let here = format!("/ui/snitches/{token}");
    let edit_page = send(&f.app, get(&format!("{here}/edit"), Some(&b.cookie))).await;
    assert!(
        edit_page.body.contains("value=\"30 2 * * *\""),
        "{}",
        edit_page.body
    );
    let rename = [
        ("csrf", b.csrf.as_str()),
        ("name", "renamed"),
        ("interval", ""),
        ("schedule", "30 2 * * *"),
        ("timezone", "Europe/Riga"),
        ("alert_type", "basic"),
        ("tags", ""),
        ("alert_email", ""),
        ("notes", ""),
    ];
    let answer = send(
        &f.app,
        post(&format!("{here}/edit"), Some(&b.cookie), &rename),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let s = f.service.get(&f.case, &token).await.expect("get");
    assert_eq!(s.name().as_str(), "renamed");
    assert_eq!(s.cadence(), list[0].cadence(), "the schedule is kept");
    // A bad schedule is a 422 on the form, naming the field.
    let mut bad = rename;
    bad[3] = ("schedule", "@reboot");
    let answer = send(&f.app, post(&format!("{here}/edit"), Some(&b.cookie), &bad)).await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        answer.body.contains("@reboot is not supported"),
        "{}",
        answer.body
    );
}

#[tokio::test]
async fn bad_form_input_is_a_clear_422_never_a_panic() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let nul = "bad\0name";
    let long = "x".repeat(300);
    for (name, interval, alert_type, expected) in [
        (nul, "hourly", "basic", "can&#39;t contain a NUL character"),
        ("", "hourly", "basic", "can&#39;t be blank"),
        (long.as_str(), "hourly", "basic", "Name"),
        ("ok", "fortnightly", "basic", "Interval"),
        (
            "ok",
            "1_minute",
            "smart",
            "smart alerts need an interval of an hour or longer",
        ),
    ] {
        let form = [
            ("csrf", b.csrf.as_str()),
            ("name", name),
            ("interval", interval),
            ("alert_type", alert_type),
        ];
        let answer = send(&f.app, post("/ui/snitches", Some(&b.cookie), &form)).await;
        assert_eq!(
            answer.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{name:?} {interval}"
        );
        let body = answer.body.replace("can't", "can&#39;t");
        assert!(body.contains(expected), "{expected}: {}", answer.body);
    }
    assert!(f.service.list(&f.case, &[]).await.expect("list").is_empty());
    // A bad tag filter, an unknown token, a hook that is not http: clear answers.
    let answer = send(&f.app, get("/ui/?tags=a%00b", Some(&b.cookie))).await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    let answer = send(
        &f.app,
        get("/ui/snitches/nosuchtoken0000000000", Some(&b.cookie)),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    let answer = send(&f.app, get("/ui/snitches/%FF", Some(&b.cookie))).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    // Bad fields for a snitch that is not there: not found, not a form naming it.
    let answer = send(
        &f.app,
        post(
            "/ui/snitches/nosuchtoken0000000000/edit",
            Some(&b.cookie),
            &[("csrf", &b.csrf), ("name", ""), ("interval", "daily")],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    let answer = send(
        &f.app,
        post(
            "/ui/webhooks",
            Some(&b.cookie),
            &[("csrf", &b.csrf), ("url", "ftp://x.test/")],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        answer.body.contains("ftp://x.test/"),
        "the typed URL is kept"
    );
    // A form over 64 KiB: 413.
    let big = "x".repeat(MAX_BODY_BYTES + 1);
    let answer = send(
        &f.app,
        post(
            "/ui/snitches",
            Some(&b.cookie),
            &[("csrf", &b.csrf), ("notes", &big)],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn webhooks_are_added_shown_masked_and_removed() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let url = "https://user:hunter2@hooks.acme.test/snitch?token=s3cr3t";
    let answer = send(
        &f.app,
        post(
            "/ui/webhooks",
            Some(&b.cookie),
            &[("csrf", &b.csrf), ("url", url), ("secret", "sign-me")],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let hooks = f.service.webhooks(&f.case).await.expect("hooks");
    assert_eq!(hooks.len(), 1);
    assert!(hooks[0].secret.is_some());
    let page = send(&f.app, get("/ui/webhooks?done=hook-added", Some(&b.cookie))).await;
    assert!(page.body.contains("Webhook added."));
    assert!(page.body.contains("hooks.acme.test"));
    assert!(!page.body.contains("hunter2") && !page.body.contains("s3cr3t"));
    assert!(!page.body.contains("sign-me"));
    let answer = send(
        &f.app,
        post(
            &format!("/ui/webhooks/{}/delete", hooks[0].id),
            Some(&b.cookie),
            &[("csrf", &b.csrf)],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert!(f.service.webhooks(&f.case).await.expect("hooks").is_empty());
}

#[tokio::test]
async fn the_list_filters_by_tags_and_another_cases_snitch_is_not_found() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    f.snitch("tagged one").await;
    let fields = SnitchFields {
        name: Some("untagged one".into()),
        interval: Some("daily".into()),
        ..SnitchFields::default()
    };
    f.service.create(&f.case, &fields).await.expect("create");
    let page = send(&f.app, get("/ui/", Some(&b.cookie))).await;
    assert!(page.body.contains("tagged one") && page.body.contains("untagged one"));
    assert!(page.body.contains("pending"), "status words beside colours");
    let page = send(&f.app, get("/ui/?tags=a-tag", Some(&b.cookie))).await;
    assert!(page.body.contains("tagged one") && !page.body.contains("untagged one"));
    // Another case's snitch.
    let other = Case::new(CaseId::parse("other").expect("valid"));
    f.service.storage().upsert_case(&other).await.expect("case");
    let theirs = f.service.create(&other, &fields).await.expect("create");
    let uri = format!("/ui/snitches/{}", theirs.token().as_str());
    assert_eq!(
        send(&f.app, get(&uri, Some(&b.cookie))).await.status,
        StatusCode::NOT_FOUND
    );
    let answer = send(
        &f.app,
        post(
            &format!("{uri}/delete"),
            Some(&b.cookie),
            &[("csrf", &b.csrf)],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert!(f.service.get(&other, theirs.token().as_str()).await.is_ok());
}

#[tokio::test]
async fn the_list_shows_what_needs_attention_first() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let calm = f.snitch("calm job").await;
    let broken = f.snitch("broken job").await;
    for (token, outcome) in [
        (&calm, Outcome::Success),
        (
            &broken,
            Outcome::Error {
                exit_status: "2".into(),
            },
        ),
    ] {
        f.service
            .check_in(token, outcome, None)
            .await
            .expect("check in");
    }
    let page = send(&f.app, get("/ui/", Some(&b.cookie))).await;
    let (broken_at, calm_at) = (
        page.body.find("broken job").expect("listed"),
        page.body.find("calm job").expect("listed"),
    );
    assert!(broken_at < calm_at, "the errored one first");
}

#[tokio::test]
async fn an_expired_session_is_sent_to_sign_in() {
    let f = fixture_full(
        AuthFailureLimit::default(),
        false,
        std::time::Duration::ZERO,
    )
    .await;
    let answer = sign_in_with(&f.app, KEY, "10.0.0.1:1").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    let set = answer.set_cookies().join("\n");
    assert!(set.contains("Max-Age=0"), "{set}");
    let cookie = format!(
        "{SESSION_COOKIE}={}",
        answer.cookie(SESSION_COOKIE).expect("id")
    );
    let answer = send(&f.app, get("/ui/", Some(&cookie))).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.location(), "/ui/login");
}

#[tokio::test]
async fn maintenance_and_a_case_on_hold_get_clear_pages() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    f.api.set_maintenance(true);
    let answer = send(&f.app, get("/ui/", Some(&b.cookie))).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(answer.body.contains("maintenance"));
    let answer = sign_in_with(&f.app, KEY, "10.0.0.1:1").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    f.api.set_maintenance(false);
    let mut held = f.case.clone();
    held.on_hold = true;
    f.service.storage().upsert_case(&held).await.expect("case");
    let answer = send(&f.app, get("/ui/", Some(&b.cookie))).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED);
    assert!(answer.body.contains("on hold"));
}

#[tokio::test]
async fn the_delete_confirmation_changes_nothing_until_confirmed() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let token = f.snitch("precious").await;
    let page = send(
        &f.app,
        get(&format!("/ui/snitches/{token}/delete"), Some(&b.cookie)),
    )
    .await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("Delete precious?"));
    assert!(page
        .body
        .contains(&format!("action=\"/ui/snitches/{token}/delete\"")));
    assert!(f.service.get(&f.case, &token).await.is_ok());
}

#[tokio::test]
async fn signing_in_again_ends_the_browsers_old_session() {
    let f = fixture().await;
    let old = sign_in(&f.app).await;
    let form = send(&f.app, get("/ui/login", Some(&old.cookie))).await;
    let token = form.cookie(LOGIN_COOKIE).expect("cookie");
    let cookie = format!("{}; {LOGIN_COOKIE}={token}", old.cookie);
    let req = post(
        "/ui/login",
        Some(&cookie),
        &[("csrf", &token), ("key", KEY)],
    );
    let answer = send(&f.app, req).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    let fresh = format!(
        "{SESSION_COOKIE}={}",
        answer.cookie(SESSION_COOKIE).expect("new session")
    );
    assert_ne!(fresh, old.cookie);
    assert_eq!(
        send(&f.app, get("/ui/", Some(&fresh))).await.status,
        StatusCode::OK
    );
    let replayed = send(&f.app, get("/ui/", Some(&old.cookie))).await;
    assert_eq!(replayed.status, StatusCode::SEE_OTHER);
}

#[tokio::test]
async fn another_base_path_is_used_by_routes_links_redirects_and_cookies() {
    let storage = Arc::new(MemoryStorage::new());
    let service = SnitchService::new(storage, Arc::new(SystemClock));
    let case = Case::new(CaseId::parse("acme").expect("valid"));
    service.storage().upsert_case(&case).await.expect("case");
    let keys = Arc::new(ApiKeys::new());
    keys.add_plain(KEY, case.id.clone()).expect("long enough");
    let api = ApiState::new(service, keys, ApiConfig::default());
    let ui = UiState::new(
        api,
        UiConfig {
            base_path: "/monitor/ui/".into(),
            ..UiConfig::default()
        },
    );
    let app = Router::new().merge(ui_router(ui));
    let form = send(&app, get("/monitor/ui/login", None)).await;
    assert_eq!(form.status, StatusCode::OK);
    assert!(form.set_cookies()[0].contains("; Path=/monitor/ui;"));
    assert!(form.body.contains("action=\"/monitor/ui/login\""));
    assert!(form.body.contains("href=\"/monitor/ui/assets/app.css\""));
    let token = form.cookie(LOGIN_COOKIE).expect("cookie");
    let cookie = format!("{LOGIN_COOKIE}={token}");
    let req = post(
        "/monitor/ui/login",
        Some(&cookie),
        &[("csrf", &token), ("key", KEY)],
    );
    let answer = send(&app, req).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.location(), "/monitor/ui/");
    let session = format!(
        "{SESSION_COOKIE}={}",
        answer.cookie(SESSION_COOKIE).expect("id")
    );
    for uri in ["/monitor/ui/", "/monitor/ui"] {
        let page = send(&app, get(uri, Some(&session))).await;
        assert_eq!(page.status, StatusCode::OK, "{uri}");
        assert!(page.body.contains("href=\"/monitor/ui/snitches/new\""));
    }
    assert_eq!(
        send(&app, get("/ui/login", None)).await.status,
        StatusCode::NOT_FOUND
    );
    let missing = send(&app, get("/monitor/ui/nothing/here", None)).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert!(missing.body.contains("There is no such page."));
}

#[tokio::test]
async fn runs_are_charted_with_their_output_and_a_schedule_is_previewed_as_typed() {
    use snitch_core::runs::{CheckInBody, CheckInKind, RunId};
    use snitch_core::{CheckIn, Outcome, Token};
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let token = f.snitch("backup").await;
    let parsed = Token::parse(&token).expect("a token");
    let start = CheckIn::new(Default::default(), Outcome::Success, None)
        .with_kind(CheckInKind::Start)
        .with_run_id(RunId::parse("r-1"));
    f.service
        .report(parsed.clone(), start)
        .await
        .expect("start");
    let end = CheckIn::new(
        Default::default(),
        Outcome::from_exit_status(Some("3")),
        None,
    )
    .with_run_id(RunId::parse("r-1"))
    .with_duration_ms(Some(4_200))
    .with_body(CheckInBody::truncating(
        b"<script>alert(1)</script>\ndisk full",
        10_000,
    ));
    f.service.report(parsed, end).await.expect("end");

    let here = format!("/ui/snitches/{token}");
    let page = send(&f.app, get(&here, Some(&b.cookie))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("id=\"runs-heading\""), "{}", page.body);
    assert!(page.body.contains("class=\"run-failed\""), "{}", page.body);
    assert!(page.body.contains("after 4.2 s"), "{}", page.body);
    let link = format!("{here}/check_ins/2/body");
    assert!(page.body.contains(&link), "{}", page.body);
    let output = send(&f.app, get(&link, Some(&b.cookie))).await;
    assert_eq!(output.status, StatusCode::OK);
    assert_eq!(
        output
            .headers
            .get("content-type")
            .map(|v| v.to_str().unwrap_or("")),
        Some("text/plain; charset=utf-8"),
        "a job's output is shown as text, never as a page"
    );
    assert_eq!(output.body, "<script>alert(1)</script>\ndisk full");
    for missing in ["1", "99", "x"] {
        let answer = send(
            &f.app,
            get(&format!("{here}/check_ins/{missing}/body"), Some(&b.cookie)),
        )
        .await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{missing}");
    }
    let signed_out = send(&f.app, get(&link, None)).await;
    assert_ne!(signed_out.status, StatusCode::OK, "only with a session");

    let preview = send(
        &f.app,
        get(
            "/ui/schedules/preview?schedule=30%202%20*%20*%20*&timezone=Europe/Riga",
            Some(&b.cookie),
        ),
    )
    .await;
    assert_eq!(preview.status, StatusCode::OK, "{}", preview.body);
    let json: serde_json::Value = serde_json::from_str(&preview.body).expect("JSON");
    assert_eq!(json["times"].as_array().map(Vec::len), Some(5));
    assert!(json["local"][0]
        .as_str()
        .is_some_and(|t| t.contains("T02:30:00.000+0")));
    let bad = send(
        &f.app,
        get("/ui/schedules/preview?schedule=%40reboot", Some(&b.cookie)),
    )
    .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad.body.contains("\"attribute\":\"schedule\""),
        "{}",
        bad.body
    );
    let form_page = send(&f.app, get("/ui/snitches/new", Some(&b.cookie))).await;
    assert!(
        form_page
            .body
            .contains("data-preview=\"/ui/schedules/preview\""),
        "{}",
        form_page.body
    );
    // The time zone is picked from a searchable list of the IANA names.
    assert!(form_page.body.contains("list=\"timezones\""));
    assert!(form_page
        .body
        .contains("<option value=\"Australia/Lord_Howe\">"));

    // The run settings of the form: a bad number names its field, a good one is kept.
    let mut form = vec![
        ("csrf", b.csrf.as_str()),
        ("name", "worker"),
        ("interval", "hourly"),
        ("schedule", ""),
        ("timezone", ""),
        ("alert_type", "basic"),
        ("max_runtime_seconds", "ten"),
        ("failure_tolerance", "2"),
    ];
    let answer = send(&f.app, post("/ui/snitches", Some(&b.cookie), &form)).await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(answer.body.contains("Longest run"), "{}", answer.body);
    form[6] = ("max_runtime_seconds", "600");
    let answer = send(&f.app, post("/ui/snitches", Some(&b.cookie), &form)).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let made = f
        .service
        .list(&f.case, &[])
        .await
        .expect("list")
        .into_iter()
        .find(|s| s.name().as_str() == "worker")
        .expect("made");
    assert_eq!(made.max_runtime_seconds(), Some(600));
    assert_eq!(made.failure_tolerance(), 2);
}

/// A fixture whose server receives check-in e-mails at `domain`.
async fn fixture_with_email_domain(domain: &str) -> Fixture {
    let storage = Arc::new(MemoryStorage::new());
    let service = SnitchService::new(storage, Arc::new(SystemClock));
    let case = Case::new(CaseId::parse("acme").expect("valid"));
    service.storage().upsert_case(&case).await.expect("case");
    let keys = Arc::new(ApiKeys::new());
    keys.add_plain(KEY, case.id.clone()).expect("long enough");
    let api = ApiState::new(
        service.clone(),
        keys.clone(),
        ApiConfig::default()
            .with_check_in_base("https://nosnch.test")
            .with_check_in_email_domain(Some(domain.to_owned())),
    );
    let ui = UiState::new(api.clone(), UiConfig::default());
    Fixture {
        app: api_router(api.clone()).merge(ui_router(ui)),
        service,
        case,
        keys,
        api,
    }
}

#[tokio::test]
async fn the_form_saves_e_mail_keywords_shows_them_and_names_their_problems() {
    let f = fixture_with_email_domain("Mail.Example.TEST").await;
    let b = sign_in(&f.app).await;
    let form = vec![
        ("csrf", b.csrf.as_str()),
        ("name", "mailed"),
        ("interval", "daily"),
        ("alert_type", "basic"),
        ("failure_keywords", "FAILED, <b>échec</b>"),
        ("success_keywords", " O'Brien's \"OK\" , "),
        ("start_keywords", ""),
        ("keyword_search", "subject"),
    ];
    let answer = send(&f.app, post("/ui/snitches", Some(&b.cookie), &form)).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let made = f
        .service
        .list(&f.case, &[])
        .await
        .expect("list")
        .pop()
        .expect("made");
    let keywords = made.email_keywords();
    assert_eq!(keywords.failure(), ["FAILED", "<b>échec</b>"]);
    assert_eq!(keywords.success(), ["O'Brien's \"OK\""]);
    assert!(keywords.start().is_empty());
    assert_eq!(keywords.scope(), snitch_core::KeywordScope::Subject);

    // The page shows them, escaped, and the check-in e-mail beside the check-in URL.
    let token = made.token().as_str().to_owned();
    let here = format!("/ui/snitches/{token}");
    let page = send(&f.app, get(&here, Some(&b.cookie))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("E-mail keywords"), "{}", page.body);
    assert!(
        page.body.contains("&lt;b&gt;échec&lt;/b&gt;"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("<b>échec"), "escaped");
    assert!(page.body.contains("in the subject only"), "{}", page.body);
    let address =
        format!("id=\"check-in-email\" type=\"text\" readonly value=\"{token}@mail.example.test\"");
    assert!(page.body.contains(&address), "{}", page.body);
    assert!(page.body.contains("id=\"check-in-url\""));

    // The edit form shows them as typed lists and the search chosen.
    let edit_page = send(&f.app, get(&format!("{here}/edit"), Some(&b.cookie))).await;
    assert!(
        edit_page
            .body
            .contains("value=\"FAILED, &lt;b&gt;échec&lt;/b&gt;\""),
        "{}",
        edit_page.body
    );
    assert!(
        edit_page
            .body
            .contains("<option value=\"subject\" selected>"),
        "{}",
        edit_page.body
    );

    // A keyword too long is named next to the keyword fields; nothing changes.
    let long = "x".repeat(snitch_core::email::EMAIL_KEYWORD_MAX_CHARS + 1);
    let mut edit = form.clone();
    edit[6] = ("start_keywords", long.as_str());
    let answer = send(
        &f.app,
        post(&format!("{here}/edit"), Some(&b.cookie), &edit),
    )
    .await;
    assert_eq!(
        answer.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        answer.body
    );
    assert!(
        answer
            .body
            .contains("E-mail keywords start has a keyword longer"),
        "{}",
        answer.body
    );
    assert!(
        answer.body.contains("id=\"email_keywords-problem\""),
        "{}",
        answer.body
    );
    assert!(
        answer.body.contains(&long),
        "what was typed stays in the form"
    );
    let kept = f.service.get(&f.case, &token).await.expect("read");
    assert_eq!(kept.email_keywords(), keywords);

    // Emptying the lists clears them.
    let mut clear = form.clone();
    clear[4] = ("failure_keywords", "");
    clear[5] = ("success_keywords", " , ");
    let answer = send(
        &f.app,
        post(&format!("{here}/edit"), Some(&b.cookie), &clear),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let cleared = f.service.get(&f.case, &token).await.expect("read");
    assert!(cleared.email_keywords().is_empty());
    let page = send(&f.app, get(&here, Some(&b.cookie))).await;
    assert!(
        page.body
            .contains("none: every check-in e-mail is a success"),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn without_an_e_mail_domain_the_page_shows_no_check_in_e_mail() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let fields = SnitchFields {
        name: Some("plain".into()),
        interval: Some("daily".into()),
        ..SnitchFields::default()
    };
    let s = f.service.create(&f.case, &fields).await.expect("create");
    let page = send(
        &f.app,
        get(
            &format!("/ui/snitches/{}", s.token().as_str()),
            Some(&b.cookie),
        ),
    )
    .await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("id=\"check-in-url\""));
    assert!(!page.body.contains("check-in-email"), "{}", page.body);
}

// ---------------------------------------------------------------------------------------
// Channels
// ---------------------------------------------------------------------------------------

/// A tester that answers as a vendor would and remembers what it was asked to test.
#[derive(Debug, Default)]
struct FakeTester {
    tested: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl crate::api::ChannelTester for FakeTester {
    async fn test(
        &self,
        channel: &snitch_core::ChannelConfig,
        name: &str,
    ) -> Result<String, snitch_core::NotifyError> {
        self.tested.lock().expect("lock").push(channel.id.clone());
        if channel.settings.get("topic") == Some("down") {
            Err(snitch_core::NotifyError::new(
                "ntfy answered 503 <b>busy</b>",
            ))
        } else {
            Ok(format!("ntfy answered 200 for {name}"))
        }
    }
}

async fn fixture_with_tester(tester: Arc<FakeTester>) -> Fixture {
    let storage = Arc::new(MemoryStorage::new());
    let service = SnitchService::new(storage, Arc::new(SystemClock));
    let case = Case::new(CaseId::parse("acme").expect("valid"));
    service.storage().upsert_case(&case).await.expect("case");
    let keys = Arc::new(ApiKeys::new());
    keys.add_plain(KEY, case.id.clone()).expect("long enough");
    let api = ApiState::new(
        service.clone(),
        keys.clone(),
        ApiConfig {
            check_in_base: "https://nosnch.test".into(),
            ..ApiConfig::default()
        }
        .with_channel_tester(tester),
    );
    let ui = UiState::new(api.clone(), UiConfig::default());
    Fixture {
        app: api_router(api.clone()).merge(ui_router(ui)),
        service,
        case,
        keys,
        api,
    }
}

fn only_channel(all: Vec<snitch_core::service::ListedChannel>) -> snitch_core::ChannelConfig {
    let mut channels: Vec<_> = all
        .into_iter()
        .filter_map(|c| match c {
            snitch_core::service::ListedChannel::Channel(c) => Some(c),
            snitch_core::service::ListedChannel::Webhook(_) => None,
        })
        .collect();
    assert_eq!(channels.len(), 1, "{channels:?}");
    channels.remove(0)
}

#[tokio::test]
async fn channels_are_added_listed_masked_edited_and_removed() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    // The nav links to the page; its form chooses a kind; the kind's form has its settings.
    let home = send(&f.app, get("/ui/", Some(&b.cookie))).await;
    assert!(home.body.contains("href=\"/ui/channels\""));
    let page = send(&f.app, get("/ui/channels", Some(&b.cookie))).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains("No channels."));
    assert!(page.body.contains("value=\"pagerduty\""));
    assert!(
        !page.body.contains("value=\"webhook\""),
        "webhooks have their page"
    );
    let form = send(
        &f.app,
        get("/ui/channels/new?kind=pagerduty", Some(&b.cookie)),
    )
    .await;
    assert_eq!(form.status, StatusCode::OK, "{}", form.body);
    assert!(
        form.body.contains("name=\"s_routing_key\"") && form.body.contains("name=\"s_api_url\"")
    );
    assert!(form
        .body
        .contains("name=\"event_missing\" value=\"on\" checked"));
    assert!(!form
        .body
        .contains("name=\"event_paused\" value=\"on\" checked"));
    let other_kind = send(
        &f.app,
        get("/ui/channels/new?kind=webhook", Some(&b.cookie)),
    )
    .await;
    assert_eq!(other_kind.status, StatusCode::UNPROCESSABLE_ENTITY);

    let secret = "R0UT1NGKEYsecret0123456789abcdef";
    let answer = send(
        &f.app,
        post(
            "/ui/channels",
            Some(&b.cookie),
            &[
                ("csrf", &b.csrf),
                ("kind", "pagerduty"),
                ("name", "On call <b>night</b>"),
                ("s_routing_key", secret),
                ("s_api_url", ""),
                ("event_missing", "on"),
                ("event_paused", "on"),
                ("tags", "db, backups"),
            ],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let c = only_channel(f.service.channels(&f.case).await.expect("channels"));
    assert_eq!(
        answer.location(),
        format!("/ui/channels?done=channel-added#{}", c.id)
    );
    assert_eq!(c.settings.get("routing_key"), Some(secret));
    assert_eq!(c.events.names(), vec!["missing", "paused"]);
    assert_eq!(c.tags.len(), 2);

    let page = send(
        &f.app,
        get("/ui/channels?done=channel-added", Some(&b.cookie)),
    )
    .await;
    assert!(page.body.contains("Channel added."));
    assert!(page.body.contains(&format!("id=\"{}\"", c.id)));
    assert!(page.body.contains("pagerduty") && page.body.contains("routing_key"));
    assert!(page.body.contains("On call &lt;b&gt;night&lt;/b&gt;"));
    assert!(!page.body.contains("<b>night"));
    assert!(!page.body.contains(secret), "the routing key never shows");
    assert!(page.body.contains("events.pagerduty.com"));
    assert!(page.body.contains(&format!("/ui/channels/{}/edit", c.id)));
    assert!(page.body.contains(&format!("/ui/channels/{}/test", c.id)));
    assert!(page.body.contains(&format!("/ui/channels/{}/delete", c.id)));

    // Edit: the secret is not in the form; left empty it stays; the rest changes.
    let edit_uri = format!("/ui/channels/{}/edit", c.id);
    let form = send(&f.app, get(&edit_uri, Some(&b.cookie))).await;
    assert_eq!(form.status, StatusCode::OK, "{}", form.body);
    assert!(!form.body.contains(secret));
    assert!(form.body.contains("leave empty to keep"));
    let answer = send(
        &f.app,
        post(
            &edit_uri,
            Some(&b.cookie),
            &[
                ("csrf", &b.csrf),
                ("name", "Day shift"),
                ("s_routing_key", ""),
                ("s_api_url", "https://events.pagerduty.com/v2/enqueue"),
                ("event_errored", "on"),
                ("tags", ""),
            ],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let changed = only_channel(f.service.channels(&f.case).await.expect("channels"));
    assert_eq!(changed.settings.get("routing_key"), Some(secret), "kept");
    assert_eq!(changed.name.as_deref(), Some("Day shift"));
    assert_eq!(changed.events.names(), vec!["errored"]);
    assert!(changed.tags.is_empty());
    // A new secret replaces it.
    let answer = send(
        &f.app,
        post(
            &edit_uri,
            Some(&b.cookie),
            &[
                ("csrf", &b.csrf),
                ("name", "Day shift"),
                ("s_routing_key", "another-routing-key-0123456789"),
                ("event_errored", "on"),
            ],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let changed = only_channel(f.service.channels(&f.case).await.expect("channels"));
    assert_eq!(
        changed.settings.get("routing_key"),
        Some("another-routing-key-0123456789")
    );
    // An invalid setting re-renders the form naming it, and changes nothing.
    let answer = send(
        &f.app,
        post(
            &edit_uri,
            Some(&b.cookie),
            &[
                ("csrf", &b.csrf),
                ("s_api_url", "not a url"),
                ("event_errored", "on"),
            ],
        ),
    )
    .await;
    assert_eq!(
        answer.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        answer.body
    );
    assert!(
        answer.body.contains("id=\"api_url-problem\""),
        "{}",
        answer.body
    );
    assert!(answer.body.contains("api_url"));

    // Removed.
    let answer = send(
        &f.app,
        post(
            &format!("/ui/channels/{}/delete", c.id),
            Some(&b.cookie),
            &[("csrf", &b.csrf)],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.location(), "/ui/channels?done=channel-removed");
    assert!(f
        .service
        .channels(&f.case)
        .await
        .expect("channels")
        .is_empty());
}

#[tokio::test]
async fn an_invalid_channel_is_shown_again_with_each_problem_by_its_field() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let answer = send(
        &f.app,
        post(
            "/ui/channels",
            Some(&b.cookie),
            &[
                ("csrf", &b.csrf),
                ("kind", "ntfy"),
                ("name", "phones"),
                ("s_topic", ""),
                ("s_server", "ftp://ntfy.example"),
            ],
        ),
    )
    .await;
    assert_eq!(
        answer.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        answer.body
    );
    for field in ["topic", "server", "events"] {
        assert!(
            answer.body.contains(&format!("id=\"{field}-problem\"")),
            "{field}: {}",
            answer.body
        );
    }
    assert!(
        answer.body.contains("value=\"phones\""),
        "typed values stay"
    );
    assert!(answer.body.contains("value=\"ftp://ntfy.example\""));
    assert!(f
        .service
        .channels(&f.case)
        .await
        .expect("channels")
        .is_empty());
    // A kind the page does not add.
    let answer = send(
        &f.app,
        post(
            "/ui/channels",
            Some(&b.cookie),
            &[
                ("csrf", &b.csrf),
                ("kind", "webhook"),
                ("s_url", "https://x.test/"),
            ],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(f
        .service
        .channels(&f.case)
        .await
        .expect("channels")
        .is_empty());
}

#[tokio::test]
async fn channel_posts_without_the_csrf_token_are_refused() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let input = snitch_core::service::ChannelInput {
        kind: Some("ntfy".into()),
        settings: vec![("topic".into(), "alerts".into())],
        ..Default::default()
    };
    let c = f
        .service
        .create_channel(&f.case, &input)
        .await
        .expect("add");
    let id = c.id().to_owned();
    let add = [
        ("kind", "ntfy"),
        ("s_topic", "more"),
        ("event_missing", "on"),
    ];
    for (uri, fields) in [
        ("/ui/channels".to_owned(), &add[..]),
        (format!("/ui/channels/{id}/edit"), &[("name", "x")][..]),
        (format!("/ui/channels/{id}/test"), &[][..]),
        (format!("/ui/channels/{id}/delete"), &[][..]),
    ] {
        for csrf in ["", "wrong"] {
            let mut form = vec![("csrf", csrf)];
            form.extend_from_slice(fields);
            let answer = send(&f.app, post(&uri, Some(&b.cookie), &form)).await;
            assert_eq!(answer.status, StatusCode::FORBIDDEN, "{uri} {csrf}");
        }
        let mut req = post(&uri, Some(&b.cookie), &[("csrf", &b.csrf)]);
        req.headers_mut()
            .insert("sec-fetch-site", "cross-site".parse().expect("header"));
        assert_eq!(
            send(&f.app, req).await.status,
            StatusCode::FORBIDDEN,
            "{uri}"
        );
    }
    let all = f.service.channels(&f.case).await.expect("channels");
    assert_eq!(only_channel(all).name, None, "unchanged and still there");
}

#[tokio::test]
async fn send_test_shows_the_vendors_answer() {
    let tester = Arc::new(FakeTester::default());
    let f = fixture_with_tester(tester.clone()).await;
    let b = sign_in(&f.app).await;
    let mut ids = Vec::new();
    for topic in ["alerts", "down"] {
        let input = snitch_core::service::ChannelInput {
            kind: Some("ntfy".into()),
            name: Some(format!("phones {topic}")),
            settings: vec![("topic".into(), topic.into())],
            ..Default::default()
        };
        let c = f
            .service
            .create_channel(&f.case, &input)
            .await
            .expect("add");
        ids.push(c.id().to_owned());
    }
    let answer = send(
        &f.app,
        post(
            &format!("/ui/channels/{}/test", ids[0]),
            Some(&b.cookie),
            &[("csrf", &b.csrf)],
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert!(answer.body.contains("Test sent to phones alerts (ntfy)."));
    assert!(answer.body.contains("ntfy answered 200 for phones alerts"));
    let answer = send(
        &f.app,
        post(
            &format!("/ui/channels/{}/test", ids[1]),
            Some(&b.cookie),
            &[("csrf", &b.csrf)],
        ),
    )
    .await;
    assert!(answer
        .body
        .contains("The test to phones down (ntfy) failed."));
    assert!(answer
        .body
        .contains("ntfy answered 503 &lt;b&gt;busy&lt;/b&gt;"));
    assert_eq!(*tester.tested.lock().expect("lock"), ids);
    // Without a tester (the plain fixture) the page says so.
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let input = snitch_core::service::ChannelInput {
        kind: Some("ntfy".into()),
        settings: vec![("topic".into(), "alerts".into())],
        ..Default::default()
    };
    let c = f
        .service
        .create_channel(&f.case, &input)
        .await
        .expect("add");
    let answer = send(
        &f.app,
        post(
            &format!("/ui/channels/{}/test", c.id()),
            Some(&b.cookie),
            &[("csrf", &b.csrf)],
        ),
    )
    .await;
    assert!(answer
        .body
        .contains("this server sends no channel notifications"));
}

#[tokio::test]
async fn an_alert_link_leads_to_its_snitch_and_a_wrong_reference_is_404() {
    let f = fixture().await;
    let token = f.snitch("nightly").await;
    let other_token = f.snitch("hourly").await;
    let input = snitch_core::service::ChannelInput {
        kind: Some("ntfy".into()),
        settings: vec![("topic".into(), "alerts".into())],
        ..Default::default()
    };
    f.service
        .create_channel(&f.case, &input)
        .await
        .expect("add");
    let c = only_channel(f.service.channels(&f.case).await.expect("channels"));
    let reference = snitch_core::derived::derived_ref(&c.key, &token);
    assert!(!reference.contains(&token));
    let uri = format!("/ui/alerts/{}/{reference}", c.id);
    // Only for a signed-in browser.
    let answer = send(&f.app, get(&uri, None)).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert!(
        answer.location().starts_with("/ui/login"),
        "{}",
        answer.location()
    );
    let b = sign_in(&f.app).await;
    let answer = send(&f.app, get(&uri, Some(&b.cookie))).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert_eq!(answer.location(), format!("/ui/snitches/{token}"));
    let other = snitch_core::derived::derived_ref(&c.key, &other_token);
    let answer = send(
        &f.app,
        get(&format!("/ui/alerts/{}/{other}", c.id), Some(&b.cookie)),
    )
    .await;
    assert_eq!(answer.location(), format!("/ui/snitches/{other_token}"));
    for wrong in [
        format!("/ui/alerts/{}/0123456789abcdef0123456789abcdef", c.id),
        format!("/ui/alerts/{}/{token}", c.id),
        format!("/ui/alerts/nosuchchannel0000000/{reference}"),
    ] {
        let answer = send(&f.app, get(&wrong, Some(&b.cookie))).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{wrong}");
    }
}

#[tokio::test]
async fn another_cases_channel_is_not_shown_changed_tested_or_removed() {
    let f = fixture().await;
    let b = sign_in(&f.app).await;
    let other = Case::new(CaseId::parse("other").expect("valid"));
    f.service.storage().upsert_case(&other).await.expect("case");
    let input = snitch_core::service::ChannelInput {
        kind: Some("ntfy".into()),
        name: Some("their phones".into()),
        settings: vec![("topic".into(), "theirs".into())],
        ..Default::default()
    };
    let theirs = f.service.create_channel(&other, &input).await.expect("add");
    let id = theirs.id().to_owned();
    let page = send(&f.app, get("/ui/channels", Some(&b.cookie))).await;
    assert!(!page.body.contains("their phones") && !page.body.contains(&id));
    let answer = send(
        &f.app,
        get(&format!("/ui/channels/{id}/edit"), Some(&b.cookie)),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    for action in ["edit", "test", "delete"] {
        let answer = send(
            &f.app,
            post(
                &format!("/ui/channels/{id}/{action}"),
                Some(&b.cookie),
                &[("csrf", &b.csrf), ("name", "mine now")],
            ),
        )
        .await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{action}");
    }
    let token = f
        .service
        .create(
            &other,
            &SnitchFields {
                name: Some("their job".into()),
                interval: Some("daily".into()),
                ..SnitchFields::default()
            },
        )
        .await
        .expect("create");
    let snitch_core::service::ListedChannel::Channel(c) =
        f.service.channel(&other, &id).await.expect("theirs")
    else {
        panic!("a channel");
    };
    let reference = snitch_core::derived::derived_ref(&c.key, token.token().as_str());
    let answer = send(
        &f.app,
        get(&format!("/ui/alerts/{id}/{reference}"), Some(&b.cookie)),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(c.name.as_deref(), Some("their phones"), "unchanged");
}

/// The badge key in the page's `all` SVG URL.
fn shown_badge_key(body: &str) -> String {
    let marker = "<code>/badge/";
    let at = body.find(marker).expect("a badge URL") + marker.len();
    body[at..].split('/').next().expect("key").to_owned()
}

#[tokio::test]
async fn the_badges_page_lists_the_urls_of_all_each_tag_and_each_snitch() {
    let f = fixture().await;
    let token = f.snitch("nightly <backup>").await;
    let b = sign_in(&f.app).await;
    let home = send(&f.app, get("/ui/", Some(&b.cookie))).await;
    let channels_link = home.body.find("href=\"/ui/channels\"").expect("channels");
    let badges_link = home.body.find("href=\"/ui/badges\"").expect("badges link");
    assert!(badges_link > channels_link, "after Channels");
    let page = send(&f.app, get("/ui/badges", Some(&b.cookie))).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let key = f.service.badge_key(&f.case).await.expect("key");
    assert_eq!(shown_badge_key(&page.body), key);
    // A tag is one path segment of its URLs (`a-tag` needs no escape).
    assert!(page.body.contains("<th scope=\"row\">a-tag</th>"));
    for subject in ["all", "a-tag"] {
        for ext in ["svg", "json"] {
            let url = format!("/badge/{key}/{subject}.{ext}");
            assert!(
                page.body.contains(&format!("<code>{url}</code>")),
                "{url} shown as text: {}",
                page.body
            );
        }
        let svg = format!("/badge/{key}/{subject}.svg");
        assert!(
            page.body.contains(&format!("src=\"{svg}\"")),
            "preview of {subject}"
        );
    }
    let reference = crate::badge::snitch_badge_ref(&key, &token);
    assert!(page
        .body
        .contains(&format!("<code>/badge/{key}/s/{reference}.svg</code>")));
    assert!(page
        .body
        .contains(&format!("<code>/badge/{key}/s/{reference}.json</code>")));
    assert!(
        page.body.contains("nightly &lt;backup&gt;"),
        "the name escaped"
    );
    // Neither the API key nor a snitch's token is on the page.
    assert!(!page.body.contains(KEY));
    assert!(!page.body.contains(&token));
    assert!(page.body.contains("action=\"/ui/badges/rotate\""));
    // The previews are allowed by the dashboard's policy: images from itself.
    let csp = page
        .headers
        .get(header::CONTENT_SECURITY_POLICY)
        .and_then(|v| v.to_str().ok())
        .expect("policy");
    assert!(csp.contains("img-src 'self'"), "{csp}");
    // The shown URLs answer.
    for file in ["all.svg", "all.json", "a-tag.svg", "a-tag.json"] {
        let answer = send(&f.app, get(&format!("/badge/{key}/{file}"), None)).await;
        assert_eq!(answer.status, StatusCode::OK, "{file}");
    }
    // The same key on the next visit.
    let again = send(&f.app, get("/ui/badges", Some(&b.cookie))).await;
    assert_eq!(shown_badge_key(&again.body), key);
}

#[tokio::test]
async fn rotating_the_badge_key_ends_the_old_urls_and_needs_the_csrf_token() {
    let f = fixture().await;
    f.snitch("job").await;
    let b = sign_in(&f.app).await;
    let page = send(&f.app, get("/ui/badges", Some(&b.cookie))).await;
    let old = shown_badge_key(&page.body);
    let old_all = format!("/badge/{old}/all.svg");
    assert_eq!(
        send(&f.app, get(&old_all, None)).await.status,
        StatusCode::OK
    );
    // Without the session's token, or from another site: refused, the key stays.
    for csrf in ["", "wrong", &random_secret()] {
        let answer = send(
            &f.app,
            post("/ui/badges/rotate", Some(&b.cookie), &[("csrf", csrf)]),
        )
        .await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{csrf}");
    }
    let mut req = post("/ui/badges/rotate", Some(&b.cookie), &[("csrf", &b.csrf)]);
    req.headers_mut()
        .insert("sec-fetch-site", "cross-site".parse().expect("header"));
    assert_eq!(send(&f.app, req).await.status, StatusCode::FORBIDDEN);
    // Without a session: sent to sign in.
    let answer = send(&f.app, post("/ui/badges/rotate", None, &[])).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.location(), "/ui/login");
    assert_eq!(f.service.badge_key(&f.case).await.expect("key"), old);
    // With it: a new key, and the old URLs are gone.
    let answer = send(
        &f.app,
        post("/ui/badges/rotate", Some(&b.cookie), &[("csrf", &b.csrf)]),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    assert_eq!(answer.location(), "/ui/badges?done=badge-key-rotated");
    let new = f.service.badge_key(&f.case).await.expect("key");
    assert_ne!(new, old);
    assert_eq!(
        send(&f.app, get(&old_all, None)).await.status,
        StatusCode::NOT_FOUND
    );
    let page = send(&f.app, get(answer.location(), Some(&b.cookie))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("the old badge URLs stopped working"));
    assert_eq!(shown_badge_key(&page.body), new);
    assert!(!page.body.contains(&old));
    assert_eq!(
        send(&f.app, get(&format!("/badge/{new}/all.svg"), None))
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn another_case_sees_its_own_badge_key_and_badges() {
    const OTHER_KEY: &str = "ui-test-other-key-0123456789abcdef012345";
    let f = fixture().await;
    f.snitch("ours").await;
    let other = Case::new(CaseId::parse("other").expect("valid"));
    f.service.storage().upsert_case(&other).await.expect("case");
    f.keys
        .add_plain(OTHER_KEY, other.id.clone())
        .expect("long enough");
    let fields = SnitchFields {
        name: Some("theirs".into()),
        interval: Some("daily".into()),
        tags: Some(vec!["their-tag".into()]),
        ..SnitchFields::default()
    };
    f.service.create(&other, &fields).await.expect("create");
    let b = sign_in(&f.app).await;
    let ours = send(&f.app, get("/ui/badges", Some(&b.cookie))).await;
    let answer = sign_in_with(&f.app, OTHER_KEY, "10.2.2.2:1000").await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let id = answer.cookie(SESSION_COOKIE).expect("session cookie");
    let cookie = format!("{SESSION_COOKIE}={id}");
    let theirs = send(&f.app, get("/ui/badges", Some(&cookie))).await;
    assert_eq!(theirs.status, StatusCode::OK);
    let (our_key, their_key) = (shown_badge_key(&ours.body), shown_badge_key(&theirs.body));
    assert_ne!(our_key, their_key);
    assert_eq!(our_key, f.service.badge_key(&f.case).await.expect("key"));
    assert_eq!(their_key, f.service.badge_key(&other).await.expect("key"));
    assert!(theirs.body.contains("their-tag") && !theirs.body.contains("a-tag"));
    assert!(ours.body.contains("a-tag") && !ours.body.contains("their-tag"));
    assert!(!ours.body.contains(&their_key) && !theirs.body.contains(&our_key));
    // Their rotation leaves ours alone.
    let csrf = theirs.csrf();
    let answer = send(
        &f.app,
        post("/ui/badges/rotate", Some(&cookie), &[("csrf", &csrf)]),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(f.service.badge_key(&f.case).await.expect("key"), our_key);
    assert_ne!(f.service.badge_key(&other).await.expect("key"), their_key);
}
