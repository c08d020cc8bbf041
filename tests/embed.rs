//! `examples/embed` as a test: the host application (its own routes, its own SQLite pool
//! and migrations, Snitch mounted under `/monitor`) served on loopback. A snitch created
//! through the mounted API goes missing and its webhook reaches a local receiver; the
//! application restarts on the same file and finds everything again.
//!
//! Time is a [`ManualClock`]: the test moves it past the deadline instead of waiting, and
//! the scheduler (which sweeps at least every second) notices within a bounded wait.

#[path = "../examples/embed/app.rs"]
mod app;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode as AxumStatus;
use axum::Router;
use chrono::DateTime;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use snitch::notify::webhook::WebhookOptions;
use snitch::prelude::ManualClock;
use snitch::serve::{serve, ServeOptions};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// How long the test waits for what should happen within a sweep or two.
const WAIT: Duration = Duration::from_secs(10);

/// The host application served on loopback.
struct Running {
    base: String,
    stop: oneshot::Sender<()>,
    served: JoinHandle<std::io::Result<()>>,
    snitch: snitch::SnitchRuntime,
}

impl Running {
    /// Opens the database file at `path` (the application's own pool) and serves the
    /// application on a fresh port, on `clock`.
    async fn start(path: &Path, clock: Arc<ManualClock>) -> Running {
        let pool = snitch::store::sqlite::connect(path, 4)
            .await
            .expect("the host's pool");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("bound"));
        let host = app::start(pool, &base, |builder| {
            builder
                .clock(clock)
                // The receiver is on loopback.
                .webhooks(WebhookOptions::default().with_allow_private(true))
                // The test's jumps in time are not our downtime.
                .outage_threshold(std::time::Duration::from_secs(365_000 * 86_400))
        })
        .await
        .expect("the application starts");
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(serve(
            listener,
            host.router,
            ServeOptions::default(),
            async move {
                let _ = stopped.await;
            },
        ));
        Running {
            base,
            stop,
            served,
            snitch: host.snitch,
        }
    }

    async fn shut_down(self) {
        let _ = self.stop.send(());
        self.served
            .await
            .expect("the server task")
            .expect("served without error");
        self.snitch.shutdown().await;
    }
}

/// A webhook receiver on loopback: every request's JSON body goes into the channel.
async fn receiver() -> (String, mpsc::UnboundedReceiver<Value>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = Router::new()
        .fallback(
            |State(tx): State<mpsc::UnboundedSender<Value>>, body: Bytes| async move {
                let _ = tx.send(serde_json::from_slice(&body).unwrap_or(Value::Null));
                AxumStatus::OK
            },
        )
        .with_state(tx);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("bound"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, rx)
}

async fn json_of(response: reqwest::Response) -> Value {
    let status = response.status();
    let text = response.text().await.expect("body");
    assert_eq!(status, StatusCode::OK, "body: {text}");
    serde_json::from_str(&text).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snitch_made_through_the_host_goes_missing_and_its_webhook_arrives() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("host.db");
    let start = DateTime::parse_from_rfc3339("2026-11-22T03:00:00.123Z")
        .expect("valid")
        .to_utc();
    let clock = Arc::new(ManualClock::new(start));
    let host = Running::start(&path, clock.clone()).await;
    let client = Client::new();
    let (hook_url, mut hooks) = receiver().await;

    // The host's own routes answer beside Snitch's.
    let home = client.get(&host.base).send().await.expect("answered");
    assert_eq!(home.status(), StatusCode::OK);
    assert_eq!(home.text().await.expect("body"), "The host application.\n");
    let team = json_of(
        client
            .post(format!("{}/teams", host.base))
            .json(&json!({"name": "acme"}))
            .send()
            .await
            .expect("answered"),
    )
    .await;
    let key = team["api_key"].as_str().expect("a key").to_owned();
    let api = format!("{}{}", host.base, app::API_PREFIX);

    // Snitch's API, mounted: a hook and a 15-minute snitch of the team's case.
    json_of(
        client
            .post(format!("{api}/v1/webhooks"))
            .basic_auth(&key, Some(""))
            .json(&json!({"url": hook_url}))
            .send()
            .await
            .expect("answered"),
    )
    .await;
    let snitch = json_of(
        client
            .post(format!("{api}/v1/snitches"))
            .basic_auth(&key, Some(""))
            .json(&json!({"name": "nightly backup", "interval": "15_minute"}))
            .send()
            .await
            .expect("answered"),
    )
    .await;
    let token = snitch["token"].as_str().expect("token").to_owned();
    let check_in_url = snitch["check_in_url"].as_str().expect("check-in URL");
    assert_eq!(
        check_in_url,
        format!("{}{}/{token}", host.base, app::CHECK_IN_PREFIX)
    );
    let checked_in = client.get(check_in_url).send().await.expect("answered");
    assert_eq!(checked_in.status(), StatusCode::ACCEPTED);
    let status = |body: Value| body["status"].as_str().unwrap_or_default().to_owned();
    let get_snitch = || {
        client
            .get(format!("{api}/v1/snitches/{token}"))
            .basic_auth(&key, Some(""))
            .send()
    };
    assert_eq!(
        status(json_of(get_snitch().await.expect("answered")).await),
        "healthy"
    );
    // The first check-in is announced: pending → healthy.
    let reporting = tokio::time::timeout(WAIT, hooks.recv())
        .await
        .expect("the webhook arrives")
        .expect("the receiver runs");
    assert_eq!(reporting["type"], "snitch.reporting", "{reporting}");
    // The receiver passes a hook on before it answers: wait until the delivery is
    // recorded as delivered. Moved past its lease while still in flight, the clock would
    // let the dispatcher claim it again and send it twice (deliveries are at least
    // once), and the next hook here would be this one again.
    let events_url = format!("{api}/v1/snitches/{token}/events");
    let recorded = async {
        loop {
            let events = json_of(
                client
                    .get(&events_url)
                    .basic_auth(&key, Some(""))
                    .send()
                    .await
                    .expect("answered"),
            )
            .await;
            let delivered = events
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["type"] == "snitch.reporting")
                .flat_map(|e| e["deliveries"].as_array().cloned().unwrap_or_default())
                .any(|d| d["channel"] == "webhook" && d["state"] == "delivered");
            if delivered {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(WAIT, recorded)
        .await
        .expect("the delivery is recorded");

    // Checked in during 03:00–03:15, so due by 03:30: a minute later it is missing.
    clock.set(start + chrono::Duration::minutes(31));
    let missing = tokio::time::timeout(WAIT, hooks.recv())
        .await
        .expect("the webhook arrives within a sweep")
        .expect("the receiver runs");
    assert_eq!(missing["type"], "snitch.missing", "{missing}");
    assert_eq!(
        missing["data"]["snitch"]["token"],
        token.as_str(),
        "{missing}"
    );
    assert_eq!(
        status(json_of(get_snitch().await.expect("answered")).await),
        "failed"
    );
    host.shut_down().await;

    // Restarted on the same file: both migrators run again, the team and its key and
    // snitch are there, and the host's table kept its row.
    let host = Running::start(&path, clock.clone()).await;
    let api = format!("{}{}", host.base, app::API_PREFIX);
    let again = json_of(
        client
            .get(format!("{api}/v1/snitches/{token}"))
            .basic_auth(&key, Some(""))
            .send()
            .await
            .expect("answered"),
    )
    .await;
    assert_eq!(status(again), "failed");
    let duplicate = client
        .post(format!("{}/teams", host.base))
        .json(&json!({"name": "acme"}))
        .send()
        .await
        .expect("answered");
    assert_eq!(
        duplicate.status(),
        StatusCode::CONFLICT,
        "a clear error, not a 500"
    );
    host.shut_down().await;
    // One alert: the restart announced nothing again.
    assert!(hooks.try_recv().is_err());
}
