//! The dashboard as the server mounts it (feature `ui`): under `/ui/` on the API
//! listener over real TCP, off with `ui = false`, `Secure` cookies behind an https
//! `base_url`, and a sign-in that works with a configured key while the API is unchanged.
//! The handlers' own tests are in `snitch-http` (`ui/tests.rs`); the browser test is
//! `scripts/e2e.sh`.
#![cfg(feature = "ui")]

mod common;

use common::{default_cases, Server, ACME_KEY};
use reqwest::header;
use reqwest::StatusCode;

/// The sign-in form: its cookie header and its CSRF field.
async fn login_form(server: &Server) -> (reqwest::Response, String) {
    let form = server
        .client
        .get(format!("{}/ui/login", server.api_base))
        .send()
        .await
        .expect("answer");
    let cookie = form
        .headers()
        .get(header::SET_COOKIE)
        .map(|v| v.to_str().expect("ascii").to_owned())
        .unwrap_or_default();
    (form, cookie)
}

#[tokio::test]
async fn the_server_serves_the_dashboard_under_ui_beside_the_api() {
    let server = Server::start().await;
    let (form, set_cookie) = login_form(&server).await;
    assert_eq!(form.status(), StatusCode::OK);
    assert!(form.headers()[header::CONTENT_TYPE]
        .to_str()
        .expect("ascii")
        .starts_with("text/html"));
    assert!(!set_cookie.contains("Secure"), "plain http: {set_cookie}");
    let pair = set_cookie.split(';').next().expect("pair").to_owned();
    let token = pair.split_once('=').expect("name=value").1.to_owned();
    let body = form.text().await.expect("body");
    assert!(body.contains(&format!("value=\"{token}\"")));
    let answer = server
        .client
        .post(format!("{}/ui/login", server.api_base))
        .header(header::COOKIE, &pair)
        .form(&[("csrf", token.as_str()), ("key", ACME_KEY)])
        .send()
        .await
        .expect("answer");
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    assert_eq!(answer.headers()[header::LOCATION], "/ui/");
    let session = answer
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().expect("ascii"))
        .find(|c| c.starts_with("snitch_session="))
        .expect("session cookie")
        .split(';')
        .next()
        .expect("pair")
        .to_owned();
    let page = server
        .client
        .get(format!("{}/ui/", server.api_base))
        .header(header::COOKIE, session)
        .send()
        .await
        .expect("answer");
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page
        .text()
        .await
        .expect("body")
        .contains("Case <strong>acme</strong>"));
    // The API around it is unchanged: JSON errors, its own routes.
    let api = server
        .client
        .get(format!("{}/v1/snitches", server.api_base))
        .basic_auth(ACME_KEY, Some(""))
        .send()
        .await
        .expect("answer");
    assert_eq!(api.status(), StatusCode::OK);
    let unknown = server
        .client
        .get(format!("{}/v1/nothing", server.api_base))
        .send()
        .await
        .expect("answer");
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    assert!(unknown.headers()[header::CONTENT_TYPE]
        .to_str()
        .expect("ascii")
        .starts_with("application/json"));
}

#[tokio::test]
async fn ui_false_serves_no_dashboard() {
    let server = Server::start_with("ui = false\n", &default_cases()).await;
    let (form, _) = login_form(&server).await;
    assert_eq!(form.status(), StatusCode::NOT_FOUND);
    assert!(form.headers()[header::CONTENT_TYPE]
        .to_str()
        .expect("ascii")
        .starts_with("application/json"));
}

#[tokio::test]
async fn behind_an_https_base_url_the_cookies_are_secure() {
    let server = Server::start_with(
        "base_url = \"https://snitch.acme.test\"\n",
        &default_cases(),
    )
    .await;
    let (form, set_cookie) = login_form(&server).await;
    assert_eq!(form.status(), StatusCode::OK);
    assert!(set_cookie.ends_with("; Secure"), "{set_cookie}");
    assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"));
}
