//! Fast router tests without TCP: requests go through `tower::ServiceExt::oneshot`.
//! The black-box tests over real sockets are in the root crate's `tests/`.

use super::*;
use crate::api::handlers::*;
use crate::api::*;
use crate::check_in::*;
use axum::body::Body;
use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::http::{Method, Request};
use axum::routing::get;
use axum::Router;
use base64::Engine;
use http_body_util::BodyExt;
use serde_json::Value;
use snitch_core::{Case, SnitchService};
use snitch_core::{CaseId, SnitchFields, SystemClock};
use snitch_store_memory::MemoryStorage;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
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
            channel_tester: None,
            public_base: None,
            check_in_email_domain: None,
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

fn request(method: Method, uri: &str, auth: Option<&str>, body: impl Into<Body>) -> Request<Body> {
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
    let anonymous = |auth: &str| request(Method::GET, "/v1/snitches", Some(auth), Body::empty());
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
    // Any method and any path of the check-in router: the size is refused first, past
    // the bound of a check-in's output (cut, not refused, up to it: docs/rules.md#runs).
    let over_output = u64::try_from(crate::CHECK_IN_OUTPUT_READ_MAX).expect("small") + 1;
    for (method, uri, declared) in [
        (Method::POST, format!("/{token}"), over_output),
        (Method::GET, format!("/{token}"), over_output),
        (Method::PUT, format!("/{token}"), over_output),
        (Method::POST, format!("/{token}/more"), over_output),
    ] {
        let req = declaring(method.clone(), &uri, None, declared);
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
        let (status, ctype, body) = answer(&f.api, authed(Method::GET, uri, Body::empty())).await;
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
    let (status, _, _) = answer(&f.api, authed(Method::GET, "/v1/snitches", Body::empty())).await;
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
async fn email_keywords_are_set_shown_refused_and_cleared_through_the_api() {
    let f = fixture().await;
    let body = serde_json::json!({
        "name": "mailed", "interval": "daily",
        "email_keywords": {"failure": ["FAILED", "é \"x\" 'y'"], "search": "subject"},
    });
    let req = authed(Method::POST, "/v1/snitches", body.to_string());
    let (status, _, made) = answer(&f.api, req).await;
    assert_eq!(status, StatusCode::OK, "{made}");
    let made = json(&made);
    assert_eq!(
        made["email_keywords"],
        serde_json::json!({"failure": ["FAILED", "é \"x\" 'y'"], "success": [], "start": [], "search": "subject"})
    );
    // No domain configured: no check-in e-mail address.
    assert!(made.get("check_in_email").is_none(), "{made}");
    let uri = format!("/v1/snitches/{}", made["token"].as_str().expect("token"));

    // A bad list is a 422 of the DMS shape under `email_keywords`, and changes nothing.
    let bad = serde_json::json!({"email_keywords": {"failure": [" "], "start": [1]}});
    let (status, _, body) = answer(&f.api, authed(Method::PATCH, &uri, bad.to_string())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let body = json(&body);
    assert_eq!(body["type"], "resource_invalid");
    assert_eq!(
        body["validations"],
        serde_json::json!([{"attribute": "email_keywords", "message": "start must be an array of strings"}])
    );
    let bad = serde_json::json!({"email_keywords": {"failure": [" "]}});
    let (status, _, body) = answer(&f.api, authed(Method::PATCH, &uri, bad.to_string())).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(json(&body)["validations"][0]["attribute"], "email_keywords");

    // An update without them keeps them; `null` clears them, and they are not shown.
    let rename = serde_json::json!({"name": "renamed"});
    let (_, _, kept) = answer(&f.api, authed(Method::PATCH, &uri, rename.to_string())).await;
    assert_eq!(json(&kept)["email_keywords"], made["email_keywords"]);
    let clear = serde_json::json!({"email_keywords": null});
    let (status, _, cleared) = answer(&f.api, authed(Method::PATCH, &uri, clear.to_string())).await;
    assert_eq!(status, StatusCode::OK);
    assert!(json(&cleared).get("email_keywords").is_none(), "{cleared}");
}

#[tokio::test]
async fn snitch_json_has_the_check_in_email_when_a_domain_is_set() {
    let f = fixture().await;
    let token = f.snitch(&[]).await;
    let keys = Arc::new(ApiKeys::new());
    keys.add_plain(KEY, f.case.id.clone()).expect("long enough");
    let api = api_router(ApiState::new(
        f.service.clone(),
        keys,
        ApiConfig::default().with_check_in_email_domain(Some(" Check-Ins.Example.COM ".into())),
    ));
    let uri = format!("/v1/snitches/{token}");
    let (status, _, body) = answer(&api, authed(Method::GET, &uri, Body::empty())).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        json(&body)["check_in_email"],
        format!("{token}@check-ins.example.com")
    );
    let none = ApiConfig::default().with_check_in_email_domain(Some(String::new()));
    assert_eq!(none.check_in_email_domain, None);
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
        ("/v1/channels", &["get", "post"]),
        ("/v1/channels/{id}", &["get", "patch", "delete"]),
        ("/v1/channels/{id}/test", &["post"]),
        ("/v1/badges", &["get"]),
        ("/v1/badges/rotate", &["post"]),
        ("/badge/{key}/{file}", &["get"]),
        ("/badge/{key}/s/{file}", &["get"]),
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
            let badge_key = f.service.badge_key(&f.case).await.expect("badge key");
            // A badge of the tag `x`, or of the snitch itself under `/s/`.
            let badge_file = if path.contains("/s/") {
                format!("{}.svg", crate::badge::snitch_badge_ref(&badge_key, &token))
            } else {
                "x.svg".to_owned()
            };
            let uri = path
                .replace("{token}", &token)
                .replace("{tag}", "x")
                .replace("{key}", &badge_key)
                .replace("{file}", &badge_file)
                .replace("{id}", "nohook");
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let (status, _, _) = answer(&f.api, authed(method.clone(), &uri, Body::empty())).await;
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
