//! Channels end to end (docs/rules.md#channels): a real server on loopback, configured
//! through its file and its API, alerting local stand-ins of the vendors' APIs.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use snitch::core::clock::monotonic_now;
use snitch::prelude::ManualClock;

/// How long a test waits for what should happen at once.
const WAIT: Duration = Duration::from_secs(15);

/// One request a stand-in received.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: HeaderMap,
    body: Value,
    raw: String,
}

/// A stand-in of a vendor's API: records requests, answers `status` and `answer`, or
/// never answers when `hang`.
#[derive(Clone)]
struct StandIn {
    seen: Arc<Mutex<Vec<Seen>>>,
    answer: Arc<Mutex<(u16, String)>>,
    /// A `Retry-After` header sent with the answer, when set.
    retry_after: Arc<Mutex<Option<String>>>,
    hang: bool,
    base: String,
}

impl StandIn {
    async fn start(status: u16, answer: &str, hang: bool) -> StandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let stand_in = StandIn {
            seen: Arc::default(),
            answer: Arc::new(Mutex::new((status, answer.to_owned()))),
            retry_after: Arc::default(),
            hang,
            base,
        };
        let app = Router::new().fallback(record).with_state(stand_in.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        stand_in
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("not poisoned").clone()
    }

    async fn wait_for(&self, n: usize) -> Vec<Seen> {
        let start = monotonic_now();
        loop {
            let seen = self.seen();
            if seen.len() >= n {
                return seen;
            }
            assert!(
                start.elapsed() < WAIT,
                "expected {n} requests, got {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn answer(&self, status: u16, body: &str) {
        *self.answer.lock().expect("not poisoned") = (status, body.to_owned());
        *self.retry_after.lock().expect("not poisoned") = None;
    }

    /// Answers 429 with `Retry-After: <seconds>` from now on.
    fn rate_limit(&self, seconds: u64) {
        *self.answer.lock().expect("not poisoned") = (429, "{}".to_owned());
        *self.retry_after.lock().expect("not poisoned") = Some(seconds.to_string());
    }
}

async fn record(State(s): State<StandIn>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    let raw = String::from_utf8_lossy(&body).into_owned();
    s.seen.lock().expect("not poisoned").push(Seen {
        path: uri.to_string(),
        headers,
        body: serde_json::from_str(&raw).unwrap_or(Value::Null),
        raw,
    });
    if s.hang {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    let (status, answer) = s.answer.lock().expect("not poisoned").clone();
    let mut response = (
        StatusCode::from_u16(status).expect("valid status"),
        [("content-type", "application/json")],
        answer,
    )
        .into_response();
    if let Some(wait) = s.retry_after.lock().expect("not poisoned").clone() {
        let value = wait.parse().expect("a header value");
        response.headers_mut().insert("retry-after", value);
    }
    response
}

/// `POST /v1/channels/<id>/test`, which must answer 200: its JSON result.
async fn channel_test(server: &Server, id: &str) -> Value {
    let answer = server
        .post_json(&format!("/v1/channels/{id}/test"), &json!({}))
        .await;
    assert_eq!(answer.status(), 200, "the test of {id}");
    answer.json().await.expect("json")
}

const PD_OK: &str = r#"{"status":"success","message":"Event processed","dedup_key":"x"}"#;

async fn server_with(cases: &str, clock: Arc<ManualClock>) -> Server {
    let top = format!("{NO_RATE_LIMIT}{MANUAL_TIME}allow_private_webhooks = true\n");
    Server::launch(&top, cases, clock).await
}

fn acme_and_other(acme_channels: &str, other_channels: &str) -> String {
    format!(
        r#"
[[case]]
name = "acme"
api_keys = ["{ACME_KEY}"]
channels = [{acme_channels}]

[[case]]
name = "other"
api_keys = ["{OTHER_KEY}"]
channels = [{other_channels}]
"#
    )
}

/// A snitch of `key`'s case, checked in at the start, due an hour later.
async fn hourly_snitch(server: &Server, key: &str, name: &str) -> String {
    let created = send(
        server
            .request_as(key, Method::POST, "/v1/snitches")
            .json(&json!({
                "name": name, "interval": "hourly", "tags": ["prod"],
            })),
    )
    .await;
    let status = created.status();
    let body: Value = created.json().await.expect("json");
    assert!(status.is_success(), "{status}: {body}");
    let token = token_of(&body);
    server.check_in(&token, "").await;
    token
}

#[tokio::test]
async fn a_missed_deadline_pages_and_the_recovery_resolves_with_the_same_key() {
    let pd = StandIn::start(202, PD_OK, false).await;
    let channel = format!(
        r#"{{ kind = "pagerduty", routing_key = "R0UTINGKEY0123456789", api_url = "{}/v2/enqueue", name = "On call" }}"#,
        pd.base
    );
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = server_with(&acme_and_other(&channel, ""), clock.clone()).await;
    let token = hourly_snitch(&server, ACME_KEY, "Nightly <b>backup</b> @everyone").await;

    server.tick_at(&clock, at("2026-11-22T05:00:01Z")).await;
    let trigger = pd.wait_for(1).await.remove(0);
    assert_eq!(trigger.path, "/v2/enqueue");
    assert_eq!(
        trigger
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    assert_eq!(trigger.body["event_action"], "trigger");
    assert_eq!(trigger.body["routing_key"], "R0UTINGKEY0123456789");
    assert_eq!(trigger.body["payload"]["severity"], "critical");
    let summary = trigger.body["payload"]["summary"]
        .as_str()
        .expect("summary");
    assert!(summary.contains("is missing"), "{summary}");
    let dedup_key = trigger.body["dedup_key"].as_str().expect("key").to_owned();

    clock.set(at("2026-11-22T05:10:00Z"));
    server.check_in(&token, "").await;
    let resolve = pd.wait_for(2).await.remove(1);
    assert_eq!(resolve.body["event_action"], "resolve");
    assert_eq!(resolve.body["dedup_key"], dedup_key.as_str());
    for seen in pd.seen() {
        assert!(
            !seen.raw.contains(&token),
            "no token to the vendor: {}",
            seen.raw
        );
        assert!(!seen.path.contains(&token));
    }

    // The channel from the file sends a test notification on request.
    let listed = server.get_ok("/v1/channels").await;
    let id = listed[0]["id"].as_str().expect("id");
    let test: Value = channel_test(&server, id).await;
    assert_eq!(test["ok"], true, "{test}");
    let tested = pd.wait_for(4).await;
    assert_eq!(tested[2].body["payload"]["severity"], "info");
    assert_eq!(tested[3].body["event_action"], "resolve");

    // The attempts show in the events, as webhooks' do (recorded just after the vendor
    // answered: read until both are).
    let started = monotonic_now();
    let (events, deliveries) = loop {
        let events = server.get_ok(&format!("/v1/snitches/{token}/events")).await;
        let deliveries: Vec<Value> = events
            .as_array()
            .expect("events")
            .iter()
            .flat_map(|e| e["deliveries"].as_array().cloned().unwrap_or_default())
            .filter(|d| d["channel"] == "pagerduty")
            .collect();
        if deliveries
            .iter()
            .filter(|d| d["state"] == "delivered")
            .count()
            == 2
        {
            break (events, deliveries);
        }
        assert!(started.elapsed() < WAIT, "{events}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for d in &deliveries {
        assert_eq!(d["state"], "delivered", "{d}");
        assert_eq!(
            d["attempts"][0]["detail"], "pagerduty answered HTTP 202",
            "{d}"
        );
        assert!(
            !d["target"].to_string().contains("enqueue"),
            "only the origin: {d}"
        );
    }
    let raw = events.to_string();
    assert!(
        !raw.contains("R0UTINGKEY"),
        "the routing key is never shown: {raw}"
    );
}

#[tokio::test]
async fn a_hanging_channel_of_one_case_does_not_delay_another_cases_alerts() {
    let hung = StandIn::start(200, "ok", true).await;
    let healthy = StandIn::start(202, PD_OK, false).await;
    let cases = acme_and_other(
        &format!(
            r#"{{ kind = "pagerduty", routing_key = "acme-key", api_url = "{}/v2/enqueue" }}"#,
            healthy.base
        ),
        &format!(
            r#"{{ kind = "slack", url = "{}/services/T/B/X" }}"#,
            hung.base
        ),
    );
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = server_with(&cases, clock.clone()).await;
    // The other case's snitches are due first and fill the hung vendor's slots.
    for n in 0..4 {
        hourly_snitch(&server, OTHER_KEY, &format!("theirs {n}")).await;
    }
    hourly_snitch(&server, ACME_KEY, "ours").await;
    let started = monotonic_now();
    server.tick_at(&clock, at("2026-11-22T05:00:01Z")).await;
    healthy.wait_for(1).await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "acme's page waited for the other case's hung channel: {:?}",
        started.elapsed()
    );
    assert!(!hung.seen().is_empty(), "the hung vendor was tried");
}

#[tokio::test]
async fn channels_through_the_api_are_validated_masked_tested_and_removed() {
    let pd = StandIn::start(202, PD_OK, false).await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = server_with(&acme_and_other("", ""), clock).await;

    // A bad setting is a 422 naming it; so is an unknown kind or setting.
    for (body, attribute) in [
        (
            json!({"kind": "slack", "url": "javascript:alert(1)"}),
            "url",
        ),
        (json!({"kind": "fax"}), "kind"),
        (json!({"kind": "pagerduty"}), "routing_key"),
        (
            json!({"kind": "ntfy", "topic": "t", "colour": "red"}),
            "colour",
        ),
        (
            json!({"kind": "telegram", "bot_token": "a\u{0}b", "chat_id": "1"}),
            "bot_token",
        ),
        (
            json!({"kind": "webhook", "url": "https://x.test/", "events": ["missing"]}),
            "events",
        ),
    ] {
        let answer = server.post_json("/v1/channels", &body).await;
        assert_eq!(answer.status(), 422, "{body}");
        let error: Value = answer.json().await.expect("json");
        assert_eq!(error["type"], "resource_invalid", "{error}");
        assert!(
            error.to_string().contains(attribute),
            "{body} names {attribute}: {error}"
        );
    }

    let created = server
        .post_json(
            "/v1/channels",
            &json!({
                "kind": "pagerduty", "name": "On call", "routing_key": "SECRETROUTINGKEY",
                "api_url": format!("{}/v2/enqueue", pd.base), "events": ["missing"],
                "tags": ["prod"],
            }),
        )
        .await;
    assert_eq!(created.status(), 200);
    let channel: Value = created.json().await.expect("json");
    assert_eq!(channel["routing_key"], "***");
    assert_eq!(channel["events"], json!(["missing"]));
    let id = channel["id"].as_str().expect("id").to_owned();

    // Sent back as shown (masked), the secret stays; the name changes.
    let mut changed = channel.clone();
    changed["name"] = json!("Pager");
    let patched = server
        .patch_json(&format!("/v1/channels/{id}"), &changed)
        .await;
    assert_eq!(patched.status(), 200);
    let result = channel_test(&server, &id).await;
    assert_eq!(result["ok"], true, "{result}");
    let seen = pd.wait_for(2).await;
    assert_eq!(seen[0].body["routing_key"], "SECRETROUTINGKEY");
    assert_eq!(seen[0].body["event_action"], "trigger");
    assert_eq!(seen[1].body["event_action"], "resolve");
    assert_eq!(seen[0].body["dedup_key"], seen[1].body["dedup_key"]);

    // The vendor's refusal is shown with its reason.
    pd.answer(
        400,
        r#"{"status":"invalid event","message":"Event object is invalid","errors":["'routing_key' is invalid"]}"#,
    );
    let refused: Value = channel_test(&server, &id).await;
    assert_eq!(refused["ok"], false);
    assert_eq!(refused["permanent"], true);
    assert!(
        refused["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("'routing_key' is invalid"),
        "{refused}"
    );

    // Another case sees nothing of it.
    let theirs =
        send(server.request_as(OTHER_KEY, Method::GET, &format!("/v1/channels/{id}"))).await;
    assert_eq!(theirs.status(), 404);
    let listed = server.get_ok("/v1/channels").await;
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    assert_eq!(listed[0]["name"], "Pager");
    assert!(!listed.to_string().contains("SECRETROUTINGKEY"));

    // Webhooks are channels of kind `webhook`, and /v1/webhooks is unchanged.
    let hook = server
        .post_json(
            "/v1/channels",
            &json!({"kind": "webhook", "url": "https://hooks.acme.test/x?k=v"}),
        )
        .await;
    assert_eq!(hook.status(), 200);
    let hooks = server.get_ok("/v1/webhooks").await;
    assert_eq!(hooks.as_array().map(Vec::len), Some(1));
    assert_eq!(hooks[0]["url"], "https://hooks.acme.test/x?k=***");

    let removed = server.delete(&format!("/v1/channels/{id}")).await;
    assert_eq!(removed.status(), 204);
    let again = server.delete(&format!("/v1/channels/{id}")).await;
    assert_eq!(again.status(), 404);
    assert_eq!(
        server.get_ok("/v1/channels").await.as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test]
async fn a_configured_channel_is_kept_once_across_restarts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("snitch.db");
    let channel = r#"{ kind = "ntfy", topic = "alerts", server = "https://ntfy.example.test", token = "tk_secret" }"#;
    let top = format!(
        "{NO_RATE_LIMIT}{MANUAL_TIME}data_path = \"{}\"\nstore = \"sqlite\"\n",
        db.display()
    );
    for _ in 0..2 {
        let clock = Arc::new(ManualClock::new(start_time()));
        let server = Server::launch(&top, &acme_and_other(channel, ""), clock).await;
        let listed = server.get_ok("/v1/channels").await;
        assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
        assert_eq!(listed[0]["kind"], "ntfy");
        assert_eq!(listed[0]["token"], "***");
        server.shut_down().await.expect("stops");
    }
}

#[tokio::test]
async fn pausing_a_failed_snitch_resolves_its_page() {
    let pd = StandIn::start(202, PD_OK, false).await;
    let channel = format!(
        r#"{{ kind = "pagerduty", routing_key = "R0UTINGKEY0123456789", api_url = "{}/v2/enqueue" }}"#,
        pd.base
    );
    let clock = Arc::new(ManualClock::new(start_time()));
    let server = server_with(&acme_and_other(&channel, ""), clock.clone()).await;
    let token = hourly_snitch(&server, ACME_KEY, "Nightly backup").await;
    server.tick_at(&clock, at("2026-11-22T05:00:01Z")).await;
    let trigger = pd.wait_for(1).await.remove(0);
    assert_eq!(trigger.body["event_action"], "trigger");
    let paused = server
        .post_json(&format!("/v1/snitches/{token}/pause"), &json!({}))
        .await;
    assert!(paused.status().is_success(), "{}", paused.status());
    let resolve = pd.wait_for(2).await.remove(1);
    assert_eq!(resolve.body["event_action"], "resolve");
    assert_eq!(resolve.body["dedup_key"], trigger.body["dedup_key"]);
}

/// A server on the real clock retrying quickly (2 s, at most 4 s apart), with an ntfy
/// channel of `acme` at `stand_in` that is told of pauses.
async fn quick_retry_server_with_ntfy(stand_in: &StandIn, extra: &str) -> Server {
    let channel = format!(
        r#"{{ kind = "ntfy", topic = "alerts", server = "{}", events = ["paused"] }}"#,
        stand_in.base
    );
    let top = format!(
        "{NO_RATE_LIMIT}allow_private_webhooks = true\n\
         retry_first_delay_ms = 2000\nretry_max_delay_ms = 4000\n{extra}"
    );
    Server::launch(
        &top,
        &acme_and_other(&channel, ""),
        Arc::new(snitch::prelude::SystemClock),
    )
    .await
}

/// A snitch of `acme` that checks in, then is paused: one `snitch.paused` event.
async fn checked_in_then_paused(server: &Server) -> String {
    let token = server.create_snitch("backup", "hourly").await;
    server.check_in(&token, "").await;
    let paused = server
        .post_json(&format!("/v1/snitches/{token}/pause"), &json!({}))
        .await;
    assert_eq!(paused.status(), 204);
    token
}

/// docs/rules.md#channels, #delivery: a vendor's `Retry-After` of two hours holds its
/// channel no longer than the retry policy's longest delay (4 s here), so the delivery's
/// retry reaches the vendor within seconds instead of failing "held" without a request
/// until it is given up.
#[tokio::test]
async fn a_vendors_wait_holds_a_channel_no_longer_than_the_longest_retry_delay() {
    let ntfy = StandIn::start(200, "{}", false).await;
    ntfy.rate_limit(7200);
    let server = quick_retry_server_with_ntfy(&ntfy, "").await;
    let token = checked_in_then_paused(&server).await;
    ntfy.wait_for(1).await;
    ntfy.answer(200, "{}");
    let seen = ntfy.wait_for(2).await;
    assert_eq!(seen[0].body, seen[1].body, "the same alert, retried");
    let events = server.get_ok(&format!("/v1/snitches/{token}/events")).await;
    let attempts = events[0]["deliveries"][0]["attempts"].clone();
    assert!(
        attempts
            .as_array()
            .is_some_and(|a| a.last().is_some_and(|last| last["ok"] == true)),
        "{events}"
    );
}

/// docs/rules.md#channels: the test button's 429 holds nothing: the real channel's next
/// alert goes out at once.
#[tokio::test]
async fn a_test_notification_never_holds_its_channel() {
    let ntfy = StandIn::start(200, "{}", false).await;
    let server = quick_retry_server_with_ntfy(&ntfy, "").await;
    let listed = server.get_ok("/v1/channels").await;
    let id = listed[0]["id"].as_str().expect("an id").to_owned();
    ntfy.rate_limit(7200);
    let tested: Value = channel_test(&server, &id).await;
    assert_eq!(tested["ok"], false, "{tested}");
    assert_eq!(tested["permanent"], false, "{tested}");
    ntfy.answer(200, "{}");
    let token = checked_in_then_paused(&server).await;
    let seen = ntfy.wait_for(2).await;
    assert_eq!(seen.len(), 2);
    let events = server.get_ok(&format!("/v1/snitches/{token}/events")).await;
    let attempts = &events[0]["deliveries"][0]["attempts"];
    assert_eq!(attempts.as_array().map(Vec::len), Some(1), "{events}");
    assert_eq!(attempts[0]["ok"], true, "{events}");
}

/// docs/rules.md#channels: a test whose vendor never answers gets its answer, 200
/// `{"ok": false, "permanent": false}`, within a deadline shorter than the request
/// timeout (3 s here, so 2 s), never a 408.
#[tokio::test]
async fn a_test_of_a_vendor_that_never_answers_is_answered_before_the_request_timeout() {
    let ntfy = StandIn::start(200, "{}", true).await;
    let server = quick_retry_server_with_ntfy(&ntfy, "request_timeout_ms = 3000\n").await;
    let listed = server.get_ok("/v1/channels").await;
    let id = listed[0]["id"].as_str().expect("an id").to_owned();
    let started = monotonic_now();
    let tested = channel_test(&server, &id).await;
    assert_eq!(tested["ok"], false, "{tested}");
    assert_eq!(tested["permanent"], false, "{tested}");
    assert!(
        tested["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("no answer within 2 s"),
        "{tested}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "it waited for the vendor"
    );
    assert_eq!(ntfy.seen().len(), 1);
}
