//! The operator surface (history, health, metrics, OpenAPI) on real servers: the check-in
//! history endpoint with a configured length, `/healthz` and `/readyz` on every listener,
//! `GET /metrics` on `metrics_listen`, and the OpenAPI document (served = committed
//! `openapi.json`).

mod common;

use std::sync::Arc;

use common::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use snitch::prelude::SystemClock;

fn sqlite_top(dir: &tempfile::TempDir, extra: &str) -> String {
    let path = dir.path().join("snitch.db");
    format!(
        "{NO_RATE_LIMIT}data_path = \"{}\"\nmetrics_listen = \"127.0.0.1:0\"\n{extra}",
        path.display()
    )
}

async fn body_text(url: &str) -> (StatusCode, String) {
    let response = reqwest::get(url).await.expect("answered");
    let status = response.status();
    (status, response.text().await.expect("text"))
}

#[tokio::test]
async fn the_history_shows_the_configured_number_of_check_ins_newest_first() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::launch(
        &sqlite_top(&dir, "check_in_history = 3\n"),
        &default_cases(),
        Arc::new(SystemClock),
    )
    .await;
    let token = server.create_snitch("backup", "daily").await;
    for query in ["m=one", "m=two", "s=1&m=three", "m=four", "s=127&m=five"] {
        server.check_in(&token, query).await;
    }
    let path = format!("/v1/snitches/{token}/check_ins");
    let shown = server.get_ok(&path).await;
    assert_eq!(
        shown
            .as_array()
            .expect("array")
            .iter()
            .map(|c| json!([c["status"], c["exit_status"], c["message"]]))
            .collect::<Vec<_>>(),
        vec![
            json!(["error", "127", "five"]),
            json!(["success", null, "four"]),
            json!(["error", "1", "three"]),
        ]
    );
    let first = server.get_ok(&format!("{path}?limit=1")).await;
    assert_eq!(first[0]["message"], "five");
    // More than the kept history is a 422 naming `limit`.
    let invalid = assert_invalid(server.get(&format!("{path}?limit=4")).await).await;
    assert_eq!(attributes(&invalid), ["limit"]);
    // Another case's snitch does not exist for the caller.
    let other = server
        .request_as(OTHER_KEY, Method::GET, &path)
        .send()
        .await
        .expect("answered");
    assert_error(other, StatusCode::NOT_FOUND, "resource_not_found").await;
    server.shut_down().await.expect("clean stop");
}

#[tokio::test]
async fn health_is_on_every_listener_and_metrics_on_their_own() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::launch(
        &sqlite_top(&dir, ""),
        &default_cases(),
        Arc::new(SystemClock),
    )
    .await;
    let metrics = format!(
        "http://{}",
        server
            .running
            .metrics_addr
            .expect("metrics_listen is bound")
    );
    for base in [&server.api_base, &server.check_in_base, &metrics] {
        let (status, body) = body_text(&format!("{base}/healthz")).await;
        assert_eq!(status, StatusCode::OK, "{base}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).expect("JSON"),
            json!({"status": "ok"})
        );
        let (status, body) = body_text(&format!("{base}/readyz")).await;
        assert_eq!(status, StatusCode::OK, "{base}: {body}");
        let body: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(
            body["checks"],
            json!({"store": "ok", "sweep": "ok"}),
            "{base}"
        );
    }
    // Metrics are not on the public listeners.
    let on_api = server
        .anonymous(Method::GET, "/metrics")
        .send()
        .await
        .expect("answered");
    assert_eq!(on_api.status(), StatusCode::NOT_FOUND);

    let token = server.create_snitch("backup", "daily").await;
    server.check_in(&token, "m=ok").await;
    server.check_in(&token, "s=2").await;
    server.get(&format!("/v1/snitches/{token}")).await;
    // Dashboard pages are counted by their route template too.
    let login = server
        .anonymous(Method::GET, "/ui/login")
        .send()
        .await
        .expect("answered");
    assert_eq!(login.status(), StatusCode::OK);
    let (status, text) = body_text(&format!("{metrics}/metrics")).await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        "snitch_check_ins_total{outcome=\"success\"} 1",
        "snitch_check_ins_total{outcome=\"error\"} 1",
        "snitch_api_requests_total{method=\"POST\",route=\"/v1/snitches\",status=\"200\"} 1",
        "snitch_api_requests_total{method=\"GET\",route=\"/v1/snitches/{token}\",status=\"200\"} 1",
        "snitch_api_requests_total{method=\"GET\",route=\"/ui/login\",status=\"200\"} 1",
        "snitch_events_total{kind=\"snitch.reporting\"} 1",
        "snitch_events_total{kind=\"snitch.errored\"} 1",
        "snitch_snitches{status=\"errored\"} 1",
        "snitch_snitches{status=\"pending\"} 0",
        "snitch_store_up 1",
        "snitch_outages_total 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    // The log e-mails may or may not have gone out yet.
    assert!(text.contains("snitch_outbox_depth "), "{text}");
    assert!(text.contains("snitch_sweep_lag_seconds "), "{text}");
    assert!(!text.contains(&token), "no token in any label");
    server.shut_down().await.expect("clean stop");
}

/// Hostile: a flood of requests with made-up methods, paths and tokens adds no series.
#[tokio::test]
async fn a_flood_of_odd_requests_adds_no_metric_series() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::launch(
        &sqlite_top(&dir, ""),
        &default_cases(),
        Arc::new(SystemClock),
    )
    .await;
    let metrics = format!(
        "http://{}/metrics",
        server.running.metrics_addr.expect("bound")
    );
    let series = |text: &str| text.lines().filter(|l| !l.starts_with('#')).count();
    // Warm up the statuses the flood will hit once, so only new label values could add.
    let (_, before) = body_text(&metrics).await;
    for i in 0..200 {
        let method = Method::from_bytes(format!("X{i}").as_bytes()).expect("method");
        server
            .request(method, &format!("/v1/nothing/{i}"))
            .send()
            .await
            .expect("answered");
        server
            .request(Method::GET, &format!("/v1/snitches/tok{i:016}"))
            .send()
            .await
            .expect("answered");
        server
            .client
            .get(server.check_in_url(&format!("unknown{i:012}")))
            .send()
            .await
            .expect("answered");
    }
    let (_, after) = body_text(&metrics).await;
    let added = series(&after) - series(&before);
    // At most: OTHER on the fallback (404) and GET on /v1/snitches/{token} (404).
    assert!(added <= 2, "{added} series added:\n{after}");
    assert!(
        after.contains("snitch_check_ins_total{outcome=\"unknown_token\"} 200"),
        "{after}"
    );
    server.shut_down().await.expect("clean stop");
}

#[tokio::test]
async fn the_served_openapi_document_is_the_committed_file() {
    let server = Server::start().await;
    let response = server
        .anonymous(Method::GET, "/v1/openapi.json")
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), StatusCode::OK);
    let served = response.text().await.expect("text");
    assert_eq!(served, snitch::http::openapi_document());
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    if std::env::var_os("SNITCH_BLESS").is_some() {
        std::fs::write(&path, &served).expect("write openapi.json");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == served,
        "openapi.json differs from the document the code serves: run \
         `SNITCH_BLESS=1 cargo test --test operator` and commit it"
    );
    let doc: Value = serde_json::from_str(&served).expect("JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    server.shut_down().await.expect("clean stop");
}
