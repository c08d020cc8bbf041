//! The structured log (docs/operating.md, "Logs"), in a test binary of its own: `tracing` caches
//! which call sites are enabled per process, so a subscriber set for one thread only sees
//! them reliably when no other test runs beside it.

mod common;

use std::sync::Arc;

use common::*;
use serde_json::Value;

/// A `Write` into a shared buffer, for capturing the log.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<Value> {
        let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(|l| serde_json::from_str(l).expect("every line is one JSON object"))
            .collect()
    }
}

/// JSON logs (as `log_format = "json"` writes them): every request with method, route
/// template (never the token), status and latency; every delivery attempt with the event
/// id, channel and outcome. One thread, so the server's tasks log to this subscriber.
#[tokio::test(flavor = "current_thread")]
async fn requests_and_delivery_attempts_are_logged_as_json_without_tokens() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = Server::start().await;
    let token = server.create_snitch("backup", "daily").await;
    server.check_in(&token, "m=done").await;
    let unknown = reqwest::get(server.check_in_url("nosuchtoken000000000"))
        .await
        .expect("check in to an unknown token");
    assert_eq!(unknown.status(), 404);
    // The `acme` team gets an e-mail (written to the log): wait until it is delivered.
    let path = format!("/v1/snitches/{token}/events");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let events = server.get_ok(&path).await;
        if events[0]["deliveries"][0]["state"] == "delivered" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not delivered: {events}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let event_id = server.get_ok(&path).await[0]["id"].clone();
    server.shut_down().await.expect("clean stop");

    let lines = captured.lines();
    let requests: Vec<&Value> = lines.iter().filter(|l| l["message"] == "request").collect();
    let find = |listener: &str, method: &str, route: &str| {
        requests
            .iter()
            .find(|r| r["listener"] == listener && r["method"] == method && r["route"] == route)
    };
    let created = find("api", "POST", "/v1/snitches")
        .unwrap_or_else(|| panic!("the create is not logged: {requests:?}"));
    assert_eq!(created["status"], 200);
    assert!(created["latency_ms"].as_f64().is_some_and(|ms| ms >= 0.0));
    let check_in = find("check_in", "GET", "/{token}").expect("the check-in is logged");
    assert_eq!(check_in["status"], 202);
    // Accepted check-ins (thousands a second, each in the history anyway) and check-ins
    // for unknown tokens (a flood of them is summed up once a minute) at debug; every API
    // call at info.
    assert_eq!(check_in["level"], "DEBUG", "{check_in}");
    assert_eq!(created["level"], "INFO", "{created}");
    let refused = requests
        .iter()
        .find(|r| r["listener"] == "check_in" && r["status"] == 404)
        .unwrap_or_else(|| panic!("the refused check-in is not logged: {requests:?}"));
    assert_eq!(refused["level"], "DEBUG", "{refused}");
    assert!(find("api", "GET", "/v1/snitches/{token}/events").is_some());
    // No line names the token: not a request, a span, a delivery attempt, nor the e-mail
    // written to the log (a token is a secret; logs are read by more people).
    for line in &lines {
        assert!(!line.to_string().contains(&token), "token in {line}");
    }
    let attempt = lines
        .iter()
        .find(|l| l["message"] == "delivery attempt")
        .expect("the delivery attempt is logged");
    let event_id = event_id.as_str().expect("an event id");
    let (_, seq) = event_id.split_once('-').expect("<token>-<n>");
    assert_eq!(attempt["event"], format!("{}…-{seq}", &token[..4]));
    assert_eq!(attempt["channel"], "email");
    assert_eq!(attempt["outcome"], "delivered");
}
