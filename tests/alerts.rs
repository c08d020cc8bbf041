//! End-to-end tests of alerts (docs/rules.md#state-machine,
//! docs/rules.md#alerts-and-webhooks): a real server on loopback, a real HTTP receiver for
//! its webhooks and a real SMTP server ([`SmtpSink`]) for its e-mails, in real time. Events
//! are driven through the check-in endpoint and the API; what was sent is read back from
//! the receivers and from `GET /v1/snitches/<token>/events`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode as AxumStatus, Uri};
use axum::response::{IntoResponse, Response as AxumResponse};
use axum::Router;
use chrono::{DateTime, DurationRound, Utc};
use common::*;
use reqwest::Method;
use serde_json::Value;
use snitch::core::clock::monotonic_now;
use snitch::notify::email::smtp_sink::{ReceivedMail, SmtpSink};
use snitch::prelude::{Clock, SystemClock};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How long a test waits for something that should happen at once (it takes
/// milliseconds; the margin is for loaded machines).
const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// A clock that runs in real time, shifted

/// The real time plus an offset that the test can move forward: the server sees time run
/// at the real pace, but can be put just before a deadline instead of waiting for it.
#[derive(Debug, Default)]
struct ShiftedClock {
    offset: Mutex<chrono::Duration>,
}

impl ShiftedClock {
    /// Shifts the clock so that it reads `to` now; returns the real instant it did.
    fn set(&self, to: DateTime<Utc>) -> Instant {
        let mut offset = self.offset.lock().expect("not poisoned");
        let real = SystemClock.now();
        let instant = monotonic_now();
        assert!(to >= real + *offset, "the shifted clock only moves forward");
        *offset = to - real;
        instant
    }
}

impl Clock for ShiftedClock {
    fn now(&self) -> DateTime<Utc> {
        SystemClock.now() + *self.offset.lock().expect("not poisoned")
    }
}

// ---------------------------------------------------------------------------------------
// An HTTP receiver for webhooks

/// One request the receiver got.
#[derive(Debug)]
struct Received {
    method: String,
    path: String,
    headers: HeaderMap,
    raw: Vec<u8>,
    /// The body as JSON (`Null` when it is not JSON).
    body: Value,
    arrived: Instant,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("header {name} missing: {:?}", self.headers))
            .to_str()
            .expect("ASCII header")
    }

    fn kind(&self) -> &str {
        self.body["type"].as_str().unwrap_or_default()
    }
}

/// How the receiver answers: given the path and how many requests it got before on any
/// path (0 for the first).
type Responder = Arc<dyn Fn(&str, usize) -> AxumResponse + Send + Sync>;

#[derive(Clone)]
struct ReceiverState {
    tx: mpsc::UnboundedSender<Received>,
    seen: Arc<AtomicUsize>,
    respond: Responder,
}

/// An axum app on 127.0.0.1:0 that records every request into a channel.
struct Receiver {
    port: u16,
    rx: mpsc::UnboundedReceiver<Received>,
    task: JoinHandle<()>,
}

impl Receiver {
    async fn start(respond: impl Fn(&str, usize) -> AxumResponse + Send + Sync + 'static) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let state = ReceiverState {
            tx,
            seen: Arc::new(AtomicUsize::new(0)),
            respond: Arc::new(respond),
        };
        let app = Router::new().fallback(record).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let port = listener.local_addr().expect("bound").port();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("the receiver runs");
        });
        Receiver { port, rx, task }
    }

    /// A receiver that answers 200 to everything.
    async fn ok() -> Self {
        Receiver::start(|_, _| "ok".into_response()).await
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The next request, waiting up to `within`.
    async fn next(&mut self, within: Duration) -> Received {
        tokio::time::timeout(within, self.rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no request reached the receiver within {within:?}"))
            .expect("the receiver runs")
    }

    /// The next request, which must be a webhook of type `kind`.
    async fn next_event(&mut self, kind: &str) -> Received {
        let received = self.next(WAIT).await;
        assert_eq!(received.kind(), kind, "{}", received.body);
        received
    }

    /// Asserts that no request arrived that was not taken yet.
    fn assert_nothing_more(&mut self) {
        if let Ok(extra) = self.rx.try_recv() {
            panic!(
                "unexpected request {} {}: {}",
                extra.method, extra.path, extra.body
            );
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(
    State(state): State<ReceiverState>,
    method: axum::http::Method,
    uri: Uri,
    headers: HeaderMap,
    raw: Bytes,
) -> AxumResponse {
    let arrived = monotonic_now();
    let n = state.seen.fetch_add(1, Ordering::SeqCst);
    let response = (state.respond)(uri.path(), n);
    let _ = state.tx.send(Received {
        method: method.to_string(),
        path: uri.path().to_owned(),
        headers,
        body: serde_json::from_slice(&raw).unwrap_or(Value::Null),
        raw: raw.to_vec(),
        arrived,
    });
    response
}

// ---------------------------------------------------------------------------------------
// The server and its events

/// A server whose one case, `acme` (member `ops@acme.test`, key [`ACME_KEY`]), has one
/// hook, `hook`, and whose e-mails go to `sink`. `top` adds top-level settings.
async fn server(top: &str, hook: &str, sink: &SmtpSink, clock: Arc<dyn Clock>) -> Server {
    let top = format!(
        "{NO_RATE_LIMIT}{MANUAL_TIME}smtp_url = \"{}\"\nmail_from = \"Snitch <alerts@snitch.test>\"\n{top}\n",
        sink.url()
    );
    let cases = format!(
        r#"
[[case]]
name = "acme"
members = ["ops@acme.test"]
api_keys = ["{ACME_KEY}"]
webhooks = ["{hook}"]
"#
    );
    Server::launch(&top, &cases, clock).await
}

/// The snitch's events as the API shows them, newest first.
async fn events(server: &Server, token: &str) -> Vec<Value> {
    let body = server.get_ok(&format!("/v1/snitches/{token}/events")).await;
    body.as_array().expect("an array of events").clone()
}

/// Polls the events endpoint every 50 ms until `done` holds, for at most [`WAIT`].
async fn events_until(
    server: &Server,
    token: &str,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = monotonic_now() + WAIT;
    loop {
        let events = events(server, token).await;
        if done(&events) {
            return events;
        }
        assert!(
            monotonic_now() < deadline,
            "{what}: not within {WAIT:?}; events: {}",
            Value::from(events)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The newest event of type `kind`.
fn event<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {}", Value::from(events.to_vec())))
}

/// The event's delivery on `channel` (`webhook` or `email`), if any.
fn delivery<'a>(event: &'a Value, channel: &str) -> Option<&'a Value> {
    event["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .find(|d| d["channel"] == channel)
}

fn attempts(delivery: &Value) -> &[Value] {
    delivery["attempts"].as_array().expect("attempts")
}

/// Whether the newest `kind` event's `channel` delivery has at least `n` attempts.
fn attempted(events: &[Value], kind: &str, channel: &str, n: usize) -> bool {
    events
        .iter()
        .find(|e| e["type"] == kind)
        .and_then(|e| delivery(e, channel))
        .is_some_and(|d| attempts(d).len() >= n)
}

async fn next_mail(sink: &SmtpSink) -> ReceivedMail {
    sink.next_mail(WAIT)
        .await
        .unwrap_or_else(|| panic!("no e-mail within {WAIT:?}"))
}

/// Asserts the headers every webhook request carries, and the snitch part of its body.
fn assert_webhook(r: &Received, token: &str, status: &str, previous: &str) {
    assert_eq!(r.method, "POST");
    assert_eq!(r.header("content-type"), "application/json");
    let agent = r.header("user-agent");
    assert!(agent.starts_with("Snitch/"), "{agent}");
    assert!(!r.header("snitch-event-id").is_empty());
    let snitch = &r.body["data"]["snitch"];
    assert_eq!(snitch["token"], token, "{}", r.body);
    assert_eq!(snitch["name"], "Nightly backup", "{}", r.body);
    assert_eq!(snitch["status"], status, "{}", r.body);
    assert_eq!(snitch["previous_status"], previous, "{}", r.body);
    let timestamp = r.body["timestamp"].as_str().expect("timestamp");
    assert!(is_wire_time(timestamp), "{timestamp}");
}

/// Asserts an alert e-mail to the case member about the snitch.
fn assert_mail(mail: &ReceivedMail, subject_tail: &str) {
    assert_eq!(mail.to, ["ops@acme.test"]);
    assert_eq!(mail.from, "alerts@snitch.test");
    let subject = mail.header("Subject").expect("a subject");
    assert_eq!(
        subject,
        format!("[Snitch] \"Nightly backup\" {subject_tail}")
    );
}

fn wire(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

// ---------------------------------------------------------------------------------------
// The tests

#[tokio::test]
async fn a_missed_deadline_reaches_the_webhook_and_the_inbox() {
    let started = monotonic_now();
    let sink = SmtpSink::start().await;
    let mut hooks = Receiver::ok().await;
    let clock = Arc::new(ShiftedClock::default());
    let server = server(
        "allow_private_webhooks = true",
        &hooks.url("/hooks/snitch"),
        &sink,
        clock.clone(),
    )
    .await;
    let token = server.create_snitch("Nightly backup", "1_minute").await;

    // B is a minute boundary ahead. A check-in at B − 63 s falls in the period
    // [B − 120 s, B − 60 s), so the snitch is due by the end of the next one: B.
    let boundary = clock
        .now()
        .duration_trunc(chrono::Duration::minutes(1))
        .expect("whole minutes")
        + chrono::Duration::minutes(3);
    clock.set(boundary - chrono::Duration::seconds(63));
    server.check_in(&token, "").await;
    let snitch = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(snitch["status"], "healthy");
    assert_eq!(snitch["deadline_at"], wire(boundary), "{snitch}");

    // The first check-in: snitch.reporting, by webhook and by e-mail.
    let reporting = hooks.next_event("snitch.reporting").await;
    assert_webhook(&reporting, &token, "healthy", "pending");
    assert_mail(&next_mail(&sink).await, "is reporting");

    // Then the server's time jumps to 2 s before the deadline, and runs on in real time.
    let lead = chrono::Duration::seconds(2);
    let jumped = clock.set(boundary - lead);
    let deadline = jumped + lead.to_std().expect("positive");
    let (missing, (mail, mail_arrived)) = tokio::join!(hooks.next(WAIT), async {
        let mail = next_mail(&sink).await;
        (mail, monotonic_now())
    });
    assert_eq!(missing.kind(), "snitch.missing", "{}", missing.body);
    assert_webhook(&missing, &token, "missing", "healthy");
    assert_eq!(missing.body["timestamp"], wire(boundary), "the deadline");
    assert_ne!(
        missing.header("snitch-event-id"),
        reporting.header("snitch-event-id")
    );
    // Not before the deadline; how long after is reported, not asserted (a loaded machine
    // is slower, not wrong): the failure bound is `WAIT`.
    let delay = missing
        .arrived
        .checked_duration_since(deadline)
        .unwrap_or_else(|| {
            panic!(
                "the webhook came {:?} before the deadline",
                deadline - missing.arrived
            )
        });
    let mail_delay = mail_arrived.saturating_duration_since(deadline);
    eprintln!(
        "deadline → webhook: {} ms; deadline → e-mail: {} ms",
        delay.as_millis(),
        mail_delay.as_millis()
    );
    assert_mail(&mail, "is missing");
    assert!(mail
        .body()
        .contains("Status:         missing (was healthy)"));
    assert!(mail.body().contains(&token), "{}", mail.body());
    assert_eq!(server.status_of(&token).await, "failed");

    // A check-in: reporting again.
    server.check_in(&token, "").await;
    let back = hooks.next_event("snitch.reporting").await;
    assert_webhook(&back, &token, "healthy", "missing");
    assert_mail(&next_mail(&sink).await, "is reporting again");

    // An error check-in: snitch.errored, and the message in the e-mail.
    server.check_in(&token, "s=1&m=disk+full").await;
    let errored = hooks.next_event("snitch.errored").await;
    assert_webhook(&errored, &token, "errored", "healthy");
    let mail = next_mail(&sink).await;
    assert_mail(&mail, "reported an error");
    assert!(mail.body().contains("disk full"), "{}", mail.body());

    // A pause: snitch.paused by webhook only.
    assert_no_content(
        send(server.request(Method::POST, &format!("/v1/snitches/{token}/pause"))).await,
    )
    .await;
    let paused = hooks.next_event("snitch.paused").await;
    assert_webhook(&paused, &token, "paused", "errored");
    // Every delivery done (each attempt is recorded just after its answer).
    let events = events_until(&server, &token, "every delivery done", |e| {
        attempted(e, "snitch.paused", "webhook", 1)
            && e.iter().all(|e| {
                e["deliveries"]
                    .as_array()
                    .expect("deliveries")
                    .iter()
                    .all(|d| d["state"] == "delivered")
            })
    })
    .await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect();
    assert_eq!(
        kinds,
        [
            "snitch.paused",
            "snitch.errored",
            "snitch.reporting",
            "snitch.missing",
            "snitch.reporting"
        ]
    );
    let paused_event = event(&events, "snitch.paused");
    assert_eq!(paused_event["id"], paused.header("snitch-event-id"));
    assert!(delivery(paused_event, "email").is_none(), "{paused_event}");
    for e in &events {
        for d in e["deliveries"].as_array().expect("deliveries") {
            assert_eq!(attempts(d).len(), 1, "{e}");
        }
    }
    // Everything was delivered, so a stray e-mail would already be on its way.
    assert!(sink.next_mail(Duration::from_millis(300)).await.is_none());
    assert_eq!(
        sink.received().len(),
        4,
        "reporting, missing, reporting, errored"
    );
    hooks.assert_nothing_more();

    server.shut_down().await.expect("a clean shutdown");
    eprintln!("test 1 took {} ms", started.elapsed().as_millis());
}

#[tokio::test]
async fn a_failing_receiver_gets_the_event_on_the_third_attempt_with_the_same_event_id() {
    let sink = SmtpSink::start().await;
    let mut hooks = Receiver::start(|_, n| {
        if n < 2 {
            (AxumStatus::INTERNAL_SERVER_ERROR, "boom").into_response()
        } else {
            AxumStatus::NO_CONTENT.into_response()
        }
    })
    .await;
    let top =
        "allow_private_webhooks = true\nretry_first_delay_ms = 200\nretry_max_delay_ms = 1000";
    let server = server(top, &hooks.url("/hook"), &sink, Arc::new(SystemClock)).await;
    let token = server.create_snitch("Nightly backup", "hourly").await;
    server.check_in(&token, "").await;

    let first = hooks.next_event("snitch.reporting").await;
    let second = hooks.next(WAIT).await;
    let third = hooks.next(WAIT).await;
    assert_webhook(&first, &token, "healthy", "pending");
    let id = first.header("snitch-event-id");
    for retry in [&second, &third] {
        assert_eq!(retry.header("snitch-event-id"), id);
        assert_eq!(retry.raw, first.raw, "the same body");
        assert_eq!(retry.path, "/hook");
    }
    // Backoff: about 200 ms, then about 400 ms (±20 %).
    let gaps = [
        second.arrived - first.arrived,
        third.arrived - second.arrived,
    ];
    eprintln!("retry gaps: {gaps:?}");
    assert!(gaps[0] >= Duration::from_millis(150), "{gaps:?}");
    assert!(gaps[1] >= Duration::from_millis(300), "{gaps:?}");

    let events = events_until(&server, &token, "the third attempt recorded", |e| {
        attempted(e, "snitch.reporting", "webhook", 3)
    })
    .await;
    let reporting = event(&events, "snitch.reporting");
    assert_eq!(reporting["id"], id);
    let hook = delivery(reporting, "webhook").expect("a webhook delivery");
    assert_eq!(hook["target"], hooks.url("/hook"));
    assert_eq!(hook["state"], "delivered", "{hook}");
    assert_eq!(hook["next_attempt_at"], Value::Null, "{hook}");
    let tries = attempts(hook);
    let oks: Vec<bool> = tries
        .iter()
        .map(|a| a["ok"].as_bool().expect("ok"))
        .collect();
    assert_eq!(oks, [false, false, true], "{hook}");
    for failed in &tries[..2] {
        let detail = failed["detail"].as_str().expect("detail");
        assert!(detail.contains("500"), "{detail}");
    }
    assert!(
        tries[2]["detail"].as_str().expect("detail").contains("204"),
        "{hook}"
    );
    let times: Vec<&str> = tries
        .iter()
        .map(|a| a["at"].as_str().expect("at"))
        .collect();
    assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    // The e-mail went out once, unaffected by the failing hook.
    assert_mail(&next_mail(&sink).await, "is reporting");
    let events = events_until(&server, &token, "the e-mail recorded", |e| {
        attempted(e, "snitch.reporting", "email", 1)
    })
    .await;
    let mail = delivery(event(&events, "snitch.reporting"), "email").expect("an e-mail delivery");
    assert_eq!(mail["state"], "delivered", "{mail}");
    assert_eq!(attempts(mail).len(), 1, "{mail}");
    hooks.assert_nothing_more();

    server.shut_down().await.expect("a clean shutdown");
}

#[tokio::test]
async fn a_redirecting_receiver_counts_as_failure() {
    let sink = SmtpSink::start().await;
    let port = Arc::new(Mutex::new(0u16));
    let target_port = port.clone();
    let mut hooks = Receiver::start(move |path, _| {
        if path == "/target" {
            "ok".into_response()
        } else {
            let port = *target_port.lock().expect("not poisoned");
            let location = format!("http://127.0.0.1:{port}/target");
            (AxumStatus::FOUND, [(header::LOCATION, location)]).into_response()
        }
    })
    .await;
    *port.lock().expect("not poisoned") = hooks.port;
    // The first retry would come a minute later: after the test.
    let top = "allow_private_webhooks = true\nretry_first_delay_ms = 60000";
    let server = server(top, &hooks.url("/hook"), &sink, Arc::new(SystemClock)).await;
    let token = server.create_snitch("Nightly backup", "hourly").await;
    server.check_in(&token, "").await;

    let first = hooks.next_event("snitch.reporting").await;
    assert_eq!(first.path, "/hook");
    let events = events_until(&server, &token, "the attempt recorded", |e| {
        attempted(e, "snitch.reporting", "webhook", 1)
    })
    .await;
    let hook = delivery(event(&events, "snitch.reporting"), "webhook").expect("a webhook delivery");
    let tries = attempts(hook);
    assert_eq!(tries.len(), 1, "{hook}");
    assert_eq!(tries[0]["ok"], false, "{hook}");
    let detail = tries[0]["detail"].as_str().expect("detail");
    assert!(detail.contains("302"), "{detail}");
    assert_eq!(hook["state"], "pending", "a retry is scheduled: {hook}");
    let next = hook["next_attempt_at"].as_str().expect("a retry time");
    assert!(
        is_wire_time(next) && next > tries[0]["at"].as_str().expect("at"),
        "{hook}"
    );
    // The attempt is recorded after its answer: had the redirect been followed, the
    // target would have been hit by now.
    hooks.assert_nothing_more();

    server.shut_down().await.expect("a clean shutdown");
}

/// A hook at a private address, with the guard on, fails at once: one attempt, recorded
/// as failed with the reason, never retried (docs/rules.md#private-addresses).
#[tokio::test]
async fn a_private_address_hook_is_refused_by_default() {
    let sink = SmtpSink::start().await;
    let mut hooks = Receiver::ok().await;
    // An ordinary failure would be retried within 200 ms.
    let top = "retry_first_delay_ms = 200\nretry_max_delay_ms = 200";
    let server = server(top, &hooks.url("/"), &sink, Arc::new(SystemClock)).await;
    let token = server.create_snitch("Nightly backup", "hourly").await;
    server.check_in(&token, "").await;

    let events = events_until(&server, &token, "the attempt recorded", |e| {
        attempted(e, "snitch.reporting", "webhook", 1)
    })
    .await;
    let hook = delivery(event(&events, "snitch.reporting"), "webhook").expect("a webhook delivery");
    let tries = attempts(hook);
    assert_eq!(tries.len(), 1, "{hook}");
    assert_eq!(tries[0]["ok"], false, "{hook}");
    let detail = tries[0]["detail"].as_str().expect("detail");
    assert_eq!(detail, "refused: 127.0.0.1 is a private address");
    assert_eq!(hook["state"], "failed", "given up at once: {hook}");
    assert_eq!(hook["next_attempt_at"], Value::Null, "{hook}");
    // The e-mail of the same event is not held back.
    assert_mail(&next_mail(&sink).await, "is reporting");
    hooks.assert_nothing_more();

    server.shut_down().await.expect("a clean shutdown");
}
