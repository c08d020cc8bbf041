//! Delivery isolation (docs/rules.md#delivery-isolation): one case's dead hooks must not
//! hold back another case's alerts. Real time, real TCP: a real server, a "black hole" that
//! accepts connections and never answers, a real HTTP receiver and a real SMTP server.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::response::IntoResponse;
use axum::Router;
use common::*;
use reqwest::Method;
use serde_json::json;
use snitch::core::clock::monotonic_now;
use snitch::notify::email::smtp_sink::SmtpSink;
use snitch::prelude::SystemClock;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long a test waits for something that takes milliseconds (margin for loaded hosts).
const WAIT: Duration = Duration::from_secs(10);
/// Caps small enough that the bully's 100 hook deliveries saturate them.
const CAPS: &str = "webhook_concurrency = 16\nemail_concurrency = 8\n\
                    delivery_cap_per_case = 4\ndelivery_cap_per_destination = 8\n";
const CAP_PER_CASE: usize = 4;

const BULLY_KEY: &str = "bully-key-000000000000000000000000001";

/// A listener on 127.0.0.1 that accepts every connection, keeps it open and never reads
/// or answers: each request to it hangs until the sender's timeout.
struct BlackHole {
    port: u16,
    accepted: mpsc::UnboundedReceiver<()>,
    task: JoinHandle<()>,
}

impl BlackHole {
    async fn start() -> BlackHole {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("bound").port();
        let (tx, accepted) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut held: Vec<TcpStream> = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                held.push(stream);
                let _ = tx.send(());
            }
        });
        BlackHole {
            port,
            accepted,
            task,
        }
    }

    /// Waits until `n` connections (in all) were accepted.
    async fn wait_for_connections(&mut self, n: usize) {
        for i in 0..n {
            tokio::time::timeout(WAIT, self.accepted.recv())
                .await
                .unwrap_or_else(|_| panic!("only {i} of {n} connections within {WAIT:?}"))
                .expect("the black hole runs");
        }
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An HTTP receiver that answers 200 and reports when each request arrived.
async fn receiver() -> (u16, mpsc::UnboundedReceiver<Instant>, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = Router::new().fallback(move || {
        let _ = tx.send(monotonic_now());
        async { "ok".into_response() }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("bound").port();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.expect("the receiver runs");
    });
    (port, rx, task)
}

/// How many webhook attempts of the bully's deliveries have ended (and been recorded).
async fn bully_webhook_attempts(server: &Server) -> usize {
    let snitches =
        json_ok(send(server.request_as(BULLY_KEY, Method::GET, "/v1/snitches")).await).await;
    let mut attempts = 0;
    for snitch in snitches.as_array().expect("an array of snitches") {
        let path = format!("/v1/snitches/{}/events", token_of(snitch));
        let events = json_ok(send(server.request_as(BULLY_KEY, Method::GET, &path)).await).await;
        for event in events.as_array().expect("an array of events") {
            for delivery in event["deliveries"].as_array().expect("deliveries") {
                if delivery["channel"] == "webhook" {
                    attempts += delivery["attempts"].as_array().expect("attempts").len();
                }
            }
        }
    }
    attempts
}

#[tokio::test]
async fn dead_hooks_of_one_case_do_not_delay_another_cases_alerts() {
    isolation_scenario("").await;
}

#[tokio::test]
async fn dead_hooks_of_one_case_do_not_delay_another_cases_alerts_on_postgres() {
    let db = snitch_store_postgres::test_databases::empty(1).await;
    isolation_scenario(&format!("database_url = \"{}\"\n", db.url)).await;
}

/// Case `bully` has five hooks into a black hole and sends 20 events; then a snitch of
/// `acme` reports: its webhook and its e-mail must arrive while the bully's deliveries
/// still hang. `store` is
/// top-level configuration (the store to use).
async fn isolation_scenario(store: &str) {
    let sink = SmtpSink::start().await;
    let mut hole = BlackHole::start().await;
    let (port, mut arrivals, receiver_task) = receiver().await;
    let bully_hooks: Vec<String> = (1..=5)
        .map(|n| format!("\"http://127.0.0.1:{}/hook{n}\"", hole.port))
        .collect();
    let top = format!(
        "{NO_RATE_LIMIT}{CAPS}{store}allow_private_webhooks = true\nsmtp_url = \"{}\"\n\
         mail_from = \"alerts@snitch.test\"\n",
        sink.url()
    );
    let cases = format!(
        r#"
[[case]]
name = "acme"
members = ["ops@acme.test"]
api_keys = ["{ACME_KEY}"]
webhooks = ["http://127.0.0.1:{port}/acme"]

[[case]]
name = "bully"
members = ["ops@bully.test"]
max_snitches = 100
api_keys = ["{BULLY_KEY}"]
webhooks = [{}]
"#,
        bully_hooks.join(", ")
    );
    let server = Server::launch(&top, &cases, Arc::new(SystemClock)).await;

    // 20 events of the bully: each goes to its five dead hooks (and by e-mail).
    for n in 0..20 {
        let created = send(
            server
                .request_as(BULLY_KEY, Method::POST, "/v1/snitches")
                .json(&json!({"name": format!("bully {n}"), "interval": "hourly"})),
        )
        .await;
        let token = token_of(&json_ok(created).await);
        server.check_in(&token, "").await;
    }
    // The bully's deliveries now hold connections to the black hole: as many as its cap.
    hole.wait_for_connections(CAP_PER_CASE).await;

    let token = server.create_snitch("Nightly backup", "hourly").await;
    let event_at = monotonic_now();
    server.check_in(&token, "").await;

    let hook_at = tokio::time::timeout(WAIT, arrivals.recv())
        .await
        .unwrap_or_else(|_| panic!("acme's webhook did not arrive within {WAIT:?}"))
        .expect("the receiver runs");
    let mail_at = loop {
        let remaining = WAIT.saturating_sub(event_at.elapsed());
        let mail = sink
            .next_mail(remaining)
            .await
            .unwrap_or_else(|| panic!("acme's e-mail did not arrive within {WAIT:?}"));
        if mail.to == ["ops@acme.test"] {
            break monotonic_now();
        }
    };
    let hook_delay = hook_at.saturating_duration_since(event_at);
    let mail_delay = mail_at.saturating_duration_since(event_at);
    eprintln!(
        "acme's event → webhook: {} ms, → e-mail: {} ms",
        hook_delay.as_millis(),
        mail_delay.as_millis()
    );
    // Both went out while the bully's deliveries still hung in the black hole (each one
    // hangs for the whole attempt timeout): none of its webhook attempts has ended, so
    // acme's alerts waited for none of them (docs/rules.md#delivery-isolation). Measured
    // as a condition, not as a number of seconds, so a slow machine cannot fail it.
    let bully_attempts = bully_webhook_attempts(&server).await;
    assert_eq!(
        bully_attempts, 0,
        "acme's alerts went out only after {bully_attempts} of the bully's attempts ended"
    );

    receiver_task.abort();
    drop(server);
}
