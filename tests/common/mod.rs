//! Shared helpers of the black-box HTTP tests: each test starts its own real server
//! (`snitch::server::launch`) on two listeners bound to port 0 and talks to it with
//! reqwest, so tests run in parallel without sharing anything.

// Each test crate uses only some of these helpers.
#![allow(dead_code)]

pub mod binary;
pub mod stores;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use reqwest::header::CONTENT_TYPE;
use reqwest::{Client, Method, RequestBuilder, Response, StatusCode};
use serde_json::{json, Value};
use snitch::core::SweepReport;
use snitch::prelude::{Case, CaseId, Clock, ManualClock, SystemClock};
use snitch::server::{config_from_toml, launch_with_clock, Running, ServerError};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// The first key of the `acme` case.
pub const ACME_KEY: &str = "acme-key-0000000000000000000000000001";
/// The second key of the `acme` case: a case may hold several.
pub const ACME_KEY_2: &str = "acme-key-0000000000000000000000000002";
/// The key of the `other` case.
pub const OTHER_KEY: &str = "other-key-000000000000000000000000001";

/// The two cases most tests use. Top-level settings must come before these tables.
pub fn default_cases() -> String {
    format!(
        r#"
[[case]]
name = "acme"
members = ["ops@acme.test"]
api_keys = ["{ACME_KEY}", "{ACME_KEY_2}"]

[[case]]
name = "other"
api_keys = ["{OTHER_KEY}"]
"#
    )
}

/// A rate limit high enough that no ordinary test meets it.
pub const NO_RATE_LIMIT: &str = "rate_limit_per_second = 10000\nrate_limit_burst = 10000\n";

/// For servers on a [`ManualClock`]: a test's jump in time is not our downtime (an
/// outage would defer the deadlines the test wants announced). Outage tests set their own.
pub const MANUAL_TIME: &str = "outage_threshold_secs = 3153600000\n";

/// A running server, its addresses and an HTTP client.
pub struct Server {
    pub running: Running,
    pub api_base: String,
    pub check_in_base: String,
    pub client: Client,
    shutdown: Option<oneshot::Sender<()>>,
}

/// The instant `ManualClock`-based tests start at (a Sunday, mid-hour, with milliseconds).
pub fn start_time() -> DateTime<Utc> {
    at("2026-11-22T03:00:00.123Z")
}

pub fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("valid test time")
        .to_utc()
}

impl Server {
    /// The two default cases, no rate limit in practice, the real clock.
    pub async fn start() -> Server {
        Server::start_with(NO_RATE_LIMIT, &default_cases()).await
    }

    /// `top` holds top-level settings, `cases` the `[[case]]` tables.
    pub async fn start_with(top: &str, cases: &str) -> Server {
        Server::launch(top, cases, Arc::new(SystemClock)).await
    }

    /// The default cases on a manual clock.
    pub async fn start_with_clock(clock: Arc<ManualClock>) -> Server {
        let top = format!("{NO_RATE_LIMIT}{MANUAL_TIME}");
        Server::launch(&top, &default_cases(), clock).await
    }

    pub async fn launch(top: &str, cases: &str, clock: Arc<dyn Clock>) -> Server {
        let api = TcpListener::bind("127.0.0.1:0").await.expect("bind api");
        let check_in = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind check-in");
        let check_in_base = format!("http://{}", check_in.local_addr().expect("address"));
        // The server's default is a SQLite file in the working directory: a test that
        // names no store gets the in-memory one.
        let store = if ["store", "database_url", "data_path"]
            .iter()
            .any(|key| top.lines().any(|l| l.trim_start().starts_with(key)))
        {
            ""
        } else {
            "store = \"memory\"\n"
        };
        let text = format!("check_in_base = \"{check_in_base}\"\n{store}{top}\n{cases}");
        let config = config_from_toml(&text).expect("valid test configuration");
        let (tx, rx) = oneshot::channel::<()>();
        let running = launch_with_clock(config, api, check_in, clock, async move {
            // A dropped sender (the test ended) also stops the server.
            let _ = rx.await;
        })
        .await
        .expect("server starts");
        Server {
            api_base: format!("http://{}", running.api_addr),
            check_in_base,
            client: Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            running,
            shutdown: Some(tx),
        }
    }

    /// Sets the manual `clock` to `t`, then runs the server's sweep at `t`: what the
    /// scheduler would do there, without waiting for it.
    pub async fn tick_at(&self, clock: &ManualClock, t: DateTime<Utc>) -> SweepReport {
        clock.set(t);
        self.running.service.tick(clock.now()).await.expect("tick")
    }

    /// Triggers the shutdown future and waits for the server to stop.
    pub async fn shut_down(self) -> Result<(), ServerError> {
        let Server {
            running, shutdown, ..
        } = self;
        if let Some(tx) = shutdown {
            let _ = tx.send(());
        }
        running.wait().await
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.api_base)
    }

    pub fn check_in_url(&self, token: &str) -> String {
        format!("{}/{token}", self.check_in_base)
    }

    /// A request without credentials.
    pub fn anonymous(&self, method: Method, path: &str) -> RequestBuilder {
        self.client.request(method, self.url(path))
    }

    /// A request with `key` as the Basic username and an empty password.
    pub fn request_as(&self, key: &str, method: Method, path: &str) -> RequestBuilder {
        self.anonymous(method, path).basic_auth(key, Some(""))
    }

    /// A request as the `acme` case.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.request_as(ACME_KEY, method, path)
    }

    pub async fn get(&self, path: &str) -> Response {
        send(self.request(Method::GET, path)).await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Response {
        send(self.request(Method::POST, path).json(body)).await
    }

    pub async fn patch_json(&self, path: &str, body: &Value) -> Response {
        send(self.request(Method::PATCH, path).json(body)).await
    }

    pub async fn delete(&self, path: &str) -> Response {
        send(self.request(Method::DELETE, path)).await
    }

    /// GET that must answer 200 with JSON.
    pub async fn get_ok(&self, path: &str) -> Value {
        json_ok(self.get(path).await).await
    }

    /// Creates a snitch of `acme` from `body`; must answer 200.
    pub async fn create(&self, body: Value) -> Value {
        json_ok(self.post_json("/v1/snitches", &body).await).await
    }

    /// Creates a snitch of `acme` and returns its token.
    pub async fn create_snitch(&self, name: &str, interval: &str) -> String {
        let snitch = self
            .create(json!({"name": name, "interval": interval}))
            .await;
        token_of(&snitch)
    }

    /// The snitch's current status as GET shows it.
    pub async fn status_of(&self, token: &str) -> String {
        let snitch = self.get_ok(&format!("/v1/snitches/{token}")).await;
        snitch["status"].as_str().expect("status").to_owned()
    }

    /// A check-in by GET with the given query string (without `?`); must answer 202.
    pub async fn check_in(&self, token: &str, query: &str) {
        let url = if query.is_empty() {
            self.check_in_url(token)
        } else {
            format!("{}?{query}", self.check_in_url(token))
        };
        let response = send(self.client.get(url)).await;
        assert_eq!(
            response.status(),
            StatusCode::ACCEPTED,
            "check-in of {token}"
        );
    }

    /// The stored case record.
    pub async fn case(&self, name: &str) -> Case {
        self.running
            .service
            .storage()
            .case(&CaseId::parse(name).expect("case name"))
            .await
            .expect("storage")
            .expect("configured case")
    }

    /// The case record with `on_hold` cleared, to read a held case's data.
    pub async fn active_case(&self, name: &str) -> Case {
        let mut case = self.case(name).await;
        case.on_hold = false;
        case
    }

    /// The snitch's event types, oldest first.
    pub async fn event_types(&self, token: &str) -> Vec<String> {
        let case = self.active_case("acme").await;
        let mut events = self
            .running
            .service
            .events(&case, token, 100)
            .await
            .expect("events");
        events.reverse();
        events.iter().map(|e| e.kind.as_str().to_owned()).collect()
    }
}

pub async fn send(request: RequestBuilder) -> Response {
    request.send().await.expect("request is answered")
}

pub fn token_of(snitch: &Value) -> String {
    snitch["token"].as_str().expect("token").to_owned()
}

/// The content type of a response, `""` when absent.
pub fn content_type(response: &Response) -> String {
    response
        .headers()
        .get(CONTENT_TYPE)
        .map(|v| v.to_str().expect("ascii").to_owned())
        .unwrap_or_default()
}

/// A 200 answer with a JSON body.
pub async fn json_ok(response: Response) -> Value {
    let status = response.status();
    let ctype = content_type(&response);
    let text = response.text().await.expect("body");
    assert_eq!(status, StatusCode::OK, "body: {text}");
    assert!(
        ctype.starts_with("application/json"),
        "content type {ctype}"
    );
    serde_json::from_str(&text).expect("JSON body")
}

/// A 204 answer with an empty body.
pub async fn assert_no_content(response: Response) {
    let status = response.status();
    let text = response.text().await.expect("body");
    assert_eq!(status, StatusCode::NO_CONTENT, "body: {text}");
    assert_eq!(text, "");
}

/// An error answer: `status`, a JSON body `{type, error[, validations]}` of type `kind`.
/// Returns the body.
pub async fn assert_error(response: Response, status: StatusCode, kind: &str) -> Value {
    let actual = response.status();
    let ctype = content_type(&response);
    let text = response.text().await.expect("body");
    assert_eq!(actual, status, "body: {text}");
    assert!(
        ctype.starts_with("application/json"),
        "content type {ctype}"
    );
    let body: Value = serde_json::from_str(&text).expect("JSON error body");
    assert_eq!(body["type"], kind, "{body}");
    assert!(
        body["error"].as_str().is_some_and(|e| !e.is_empty()),
        "error message in {body}"
    );
    let object = body.as_object().expect("object");
    if kind == "resource_invalid" {
        assert!(body["validations"].is_array(), "{body}");
        assert_eq!(object.len(), 3, "only type, error, validations: {body}");
    } else {
        assert_eq!(object.len(), 2, "only type and error: {body}");
    }
    body
}

/// A 422 `resource_invalid`; returns its validations as (attribute, message) pairs.
pub async fn assert_invalid(response: Response) -> Vec<(String, String)> {
    let body = assert_error(
        response,
        StatusCode::UNPROCESSABLE_ENTITY,
        "resource_invalid",
    )
    .await;
    body["validations"]
        .as_array()
        .expect("validations")
        .iter()
        .map(|v| {
            assert_eq!(v.as_object().expect("object").len(), 2, "{v}");
            (
                v["attribute"].as_str().expect("attribute").to_owned(),
                v["message"].as_str().expect("message").to_owned(),
            )
        })
        .collect()
}

/// The attributes named by a list of validations.
pub fn attributes(validations: &[(String, String)]) -> Vec<&str> {
    validations.iter().map(|(a, _)| a.as_str()).collect()
}

/// Whether `s` has the wire format of datetimes: `YYYY-MM-DDTHH:MM:SS.mmmZ`
/// (the regex `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).
pub fn is_wire_time(s: &str) -> bool {
    const SHAPE: &[u8] = b"dddd-dd-ddTdd:dd:dd.dddZ";
    s.len() == SHAPE.len()
        && s.bytes().zip(SHAPE).all(|(c, &p)| match p {
            b'd' => c.is_ascii_digit(),
            other => c == other,
        })
}

/// Whether `s` has the shape of a snitch token: at least 16 of `[a-z0-9]`.
pub fn is_token(s: &str) -> bool {
    s.len() >= 16
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}
