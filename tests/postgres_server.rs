//! Process-level tests of the server on PostgreSQL: what survives a restart, a `kill -9`,
//! and the death of one of two servers sharing a database.
//!
//! Each test gets a database of its own, `snitch_test_<random>` on the server named by
//! `DATABASE_URL` (default: the local one that `scripts/ensure-postgres.sh` starts, which
//! also drops these databases on its next run). A test that cannot reach PostgreSQL fails:
//! it never skips.
//!
//! The first two tests run the real server binary (`examples/server.rs`) as a child
//! process, on ports it picks itself (`127.0.0.1:0`, read back from the "listening on"
//! lines it prints), and stop it with SIGTERM or SIGKILL. The third runs two servers in
//! this process, so that their clocks can be moved (see its comments).

mod common;

use common::binary::server_binary;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode as AxumStatus};
use axum::response::IntoResponse;
use axum::Router;
use chrono::{DateTime, DurationRound, Utc};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use snitch::core::clock::monotonic_now;
use snitch::core::{RandomTokens, TokenSource};
use snitch::prelude::{Clock, SystemClock};
use snitch::server::{config_from_toml, launch_with_clock};
use snitch::store::postgres::MIGRATOR;
use snitch_store_postgres::test_databases::{self, TestDatabase};
use sqlx::Row;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};

/// The API key of the one case, `acme`, of every test.
const KEY: &str = "acme-key-pg-000000000000000000000000001";

/// The longest wait for something that takes milliseconds (the margin is for loaded
/// machines): a failure names what did not happen.
const WAIT: Duration = Duration::from_secs(10);

/// How often a poll looks again.
const POLL: Duration = Duration::from_millis(20);

// ---------------------------------------------------------------------------------------
// Bounded waits

/// A deadline for one awaited condition: `check` panics with `what` once it has passed.
struct Deadline {
    what: String,
    end: Instant,
    within: Duration,
}

impl Deadline {
    fn after(within: Duration, what: impl Into<String>) -> Deadline {
        Deadline {
            what: what.into(),
            end: monotonic_now() + within,
            within,
        }
    }

    /// Panics if the deadline passed (with `state` describing what was seen), else waits
    /// [`POLL`] before the caller looks again.
    async fn check(&self, state: impl FnOnce() -> String) {
        if monotonic_now() >= self.end {
            panic!(
                "{}: not within {:?}; last seen: {}",
                self.what,
                self.within,
                state()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

// ---------------------------------------------------------------------------------------
// A database of its own

struct TestDb(TestDatabase);

impl std::ops::Deref for TestDb {
    type Target = TestDatabase;

    fn deref(&self) -> &TestDatabase {
        &self.0
    }
}

/// Creates a fresh, empty database (the server migrates it on start), dropped at the end
/// of the test.
async fn fresh_database() -> TestDb {
    TestDb(test_databases::empty(4).await)
}

impl TestDb {
    /// Migrates the database now (servers do it on start; a test that reads the tables
    /// before any server started needs it done).
    async fn migrate(&self) {
        MIGRATOR
            .run(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("cannot migrate the test database {}: {e}", self.name));
    }

    /// `(event id, token)` of every stored `snitch.missing` event at `at`.
    async fn missing_at(&self, at: DateTime<Utc>) -> Vec<(String, String)> {
        sqlx::query(
            "SELECT id, token FROM snitch.events WHERE kind = 'snitch.missing' \
             AND (extract(epoch FROM at) * 1000)::bigint = $1",
        )
        .bind(at.timestamp_millis())
        .fetch_all(&self.pool)
        .await
        .expect("read the missing events")
        .iter()
        .map(|r| (r.get("id"), r.get("token")))
        .collect()
    }

    /// How many `snitch.missing` events are stored.
    async fn missing_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM snitch.events WHERE kind = 'snitch.missing'")
            .fetch_one(&self.pool)
            .await
            .expect("count the missing events")
    }
}

// ---------------------------------------------------------------------------------------
// The server binary as a child process

/// A running server process. Dropped (a test failed): killed with SIGKILL and reaped.
struct ServerProcess {
    label: String,
    child: Child,
    api: String,
    check_ins: String,
    /// The last lines of its stderr, for failure messages.
    stderr: Arc<Mutex<Vec<String>>>,
}

/// Echoes a child's output lines to this test's stderr (shown with `--nocapture` or on
/// failure), keeping the last ones in `tail`, and passes each line to `line`.
fn drain(
    label: String,
    from: impl Read + Send + 'static,
    tail: Option<Arc<Mutex<Vec<String>>>>,
    line: impl Fn(&str) + Send + 'static,
) {
    std::thread::spawn(move || {
        for text in BufReader::new(from).lines() {
            let Ok(text) = text else { break };
            eprintln!("[{label}] {text}");
            line(&text);
            if let Some(tail) = &tail {
                let mut tail = tail.lock().expect("not poisoned");
                tail.push(text);
                let excess = tail.len().saturating_sub(20);
                tail.drain(..excess);
            }
        }
    });
}

/// The address of a line such as `Snitch API:  http://… (listening on 127.0.0.1:4711)`.
fn listening_on(line: &str, prefix: &str) -> Option<SocketAddr> {
    let rest = line.strip_prefix(prefix)?;
    let start = rest.find("(listening on ")? + "(listening on ".len();
    let end = start + rest[start..].find(')')?;
    rest[start..end].parse().ok()
}

impl ServerProcess {
    /// Starts the server binary with `config` and waits until it listens. The process
    /// environment cannot leak in: `SNITCH_*` variables are removed and `DATABASE_URL`,
    /// which overrides the file, is set to the file's database.
    async fn start(label: &str, config: &Path, database_url: &str) -> ServerProcess {
        let mut command = Command::new(server_binary());
        command
            .arg("--config")
            .arg(config)
            .env("DATABASE_URL", database_url)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("SNITCH_") {
                command.env_remove(name);
            }
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", server_binary().display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let tail = Arc::new(Mutex::new(Vec::new()));
        let (tx, mut rx) = mpsc::unbounded_channel::<(bool, SocketAddr)>();
        drain(label.to_owned(), stdout, None, move |line| {
            if let Some(addr) = listening_on(line, "Snitch API:") {
                let _ = tx.send((true, addr));
            } else if let Some(addr) = listening_on(line, "Snitch check-ins:") {
                let _ = tx.send((false, addr));
            }
        });
        drain(label.to_owned(), stderr, Some(tail.clone()), |_| {});
        let mut process = ServerProcess {
            label: label.to_owned(),
            child,
            api: String::new(),
            check_ins: String::new(),
            stderr: tail,
        };
        let within = Duration::from_secs(20);
        let (mut api, mut check_ins) = (None, None);
        while api.is_none() || check_ins.is_none() {
            match tokio::time::timeout(within, rx.recv()).await {
                Ok(Some((true, addr))) => api = Some(addr),
                Ok(Some((false, addr))) => check_ins = Some(addr),
                Ok(None) => {
                    // Its stdout closed: it exited. Let the stderr reader catch up.
                    let status = process.wait_exit(Duration::from_secs(5)).await;
                    panic!(
                        "{label} exited ({status}) before listening; its stderr:\n{}",
                        process.stderr_tail()
                    );
                }
                Err(_) => panic!(
                    "{label} did not print its addresses within {within:?}; its stderr:\n{}",
                    process.stderr_tail()
                ),
            }
        }
        process.api = format!("http://{}", api.expect("set"));
        process.check_ins = format!("http://{}", check_ins.expect("set"));
        eprintln!(
            "{label}: pid {}, API {}, check-ins {}",
            process.child.id(),
            process.api,
            process.check_ins
        );
        process
    }

    fn stderr_tail(&self) -> String {
        self.stderr.lock().expect("not poisoned").join("\n")
    }

    /// Sends `signal` with `kill(1)`.
    fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        let status = Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap_or_else(|e| panic!("cannot run `kill {signal} {pid}`: {e}"));
        assert!(status.success(), "`kill {signal} {pid}` failed: {status}");
    }

    /// Waits for the process to exit, at most `within`.
    async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Deadline::after(within, format!("{} exits", self.label));
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for the server") {
                return status;
            }
            deadline.check(|| "still running".into()).await;
        }
    }

    /// SIGTERM, then waits for a clean exit.
    async fn terminate(mut self) {
        let started = monotonic_now();
        self.signal("-TERM");
        let status = self.wait_exit(WAIT).await;
        assert!(
            status.success(),
            "{} exited with {status} after SIGTERM; its stderr:\n{}",
            self.label,
            self.stderr_tail()
        );
        eprintln!(
            "{}: stopped by SIGTERM in {} ms",
            self.label,
            started.elapsed().as_millis()
        );
    }

    /// `kill -9`, then reaps it.
    async fn kill_9(mut self) {
        self.signal("-KILL");
        let status = self.wait_exit(WAIT).await;
        assert!(
            !status.success(),
            "{} survived kill -9: {status}",
            self.label
        );
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A configuration file in a temporary directory of its own, removed on drop.
struct ConfigFile {
    dir: PathBuf,
    path: PathBuf,
}

impl ConfigFile {
    fn write(text: &str) -> ConfigFile {
        let dir = std::env::temp_dir().join(format!(
            "snitch-pg-server-{}",
            RandomTokens.new_token().as_str()
        ));
        std::fs::create_dir_all(&dir).expect("create a temporary directory");
        let path = dir.join("snitch.toml");
        std::fs::write(&path, text).expect("write the configuration");
        ConfigFile { dir, path }
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The configuration every test uses: listeners on port 0, a fixed `check_in_base` (so
/// that snitches read the same through any server), no rate limit in practice, one case
/// with [`KEY`]; `top` adds top-level settings, `webhook` a hook of the case.
fn config_text(database_url: &str, top: &str, webhook: Option<&str>) -> String {
    let hooks = webhook.map(|w| format!("{w:?}")).unwrap_or_default();
    format!(
        r#"listen = "127.0.0.1:0"
check_in_listen = "127.0.0.1:0"
check_in_base = "http://check-ins.snitch.test"
database_url = {database_url:?}
rate_limit_per_second = 100000
rate_limit_burst = 100000
{top}

[[case]]
name = "acme"
max_snitches = 1000
api_keys = ["{KEY}"]
webhooks = [{hooks}]
"#
    )
}

// ---------------------------------------------------------------------------------------
// The API over HTTP

#[derive(Clone)]
struct Api {
    client: Client,
    api: String,
    check_ins: String,
}

impl Api {
    fn new(api: &str, check_ins: &str) -> Api {
        Api {
            client: Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(WAIT)
                .build()
                .expect("an HTTP client"),
            api: api.to_owned(),
            check_ins: check_ins.to_owned(),
        }
    }

    fn of(server: &ServerProcess) -> Api {
        Api::new(&server.api, &server.check_ins)
    }

    async fn get(&self, path: &str) -> Value {
        let response = self
            .client
            .get(format!("{}{path}", self.api))
            .basic_auth(KEY, Some(""))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = response.status();
        let text = response.text().await.expect("a body");
        assert_eq!(status, StatusCode::OK, "GET {path}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {path}: {e}: {text}"))
    }

    async fn snitches(&self) -> Vec<Value> {
        self.get("/v1/snitches")
            .await
            .as_array()
            .expect("an array of snitches")
            .clone()
    }

    async fn events(&self, token: &str) -> Vec<Value> {
        self.get(&format!("/v1/snitches/{token}/events"))
            .await
            .as_array()
            .expect("an array of events")
            .clone()
    }

    /// How many deliveries of the events of `tokens` are still pending.
    async fn pending_deliveries(&self, tokens: &[String]) -> usize {
        let mut pending = 0;
        for token in tokens {
            for event in self.events(token).await {
                let deliveries = event["deliveries"].as_array().cloned().unwrap_or_default();
                pending += deliveries
                    .iter()
                    .filter(|d| d["state"] == "pending")
                    .count();
            }
        }
        pending
    }

    async fn create(&self, name: &str, interval: &str) -> String {
        let response = self
            .client
            .post(format!("{}/v1/snitches", self.api))
            .basic_auth(KEY, Some(""))
            .json(&json!({"name": name, "interval": interval}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("create {name}: {e}"));
        let status = response.status();
        let text = response.text().await.expect("a body");
        assert_eq!(status, StatusCode::OK, "create {name}: {text}");
        let body: Value = serde_json::from_str(&text).expect("JSON");
        body["token"].as_str().expect("a token").to_owned()
    }

    /// A check-in by GET with `query` (without `?`): its answer's status.
    async fn try_check_in(&self, token: &str, query: &str) -> reqwest::Result<StatusCode> {
        let response = self
            .client
            .get(format!("{}/{token}?{query}", self.check_ins))
            .send()
            .await?;
        let status = response.status();
        response.bytes().await?;
        Ok(status)
    }

    /// A check-in that must answer 202.
    async fn check_in(&self, token: &str, query: &str) {
        let status = self
            .try_check_in(token, query)
            .await
            .unwrap_or_else(|e| panic!("check-in of {token}: {e}"));
        assert_eq!(status, StatusCode::ACCEPTED, "check-in of {token}");
    }
}

// ---------------------------------------------------------------------------------------
// A webhook receiver

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Hit {
    event_id: String,
    kind: String,
    timestamp: String,
    token: String,
    /// The status it answered.
    answered: u16,
}

#[derive(Clone)]
struct ReceiverState {
    /// Answer 204 (true) or 500 (false).
    accept: Arc<AtomicBool>,
    hits: Arc<Mutex<Vec<Hit>>>,
}

/// An axum app on 127.0.0.1:0 that records every webhook request.
struct Receiver {
    url: String,
    state: ReceiverState,
    task: JoinHandle<()>,
}

impl Receiver {
    async fn start(accept: bool) -> Receiver {
        let state = ReceiverState {
            accept: Arc::new(AtomicBool::new(accept)),
            hits: Arc::default(),
        };
        let app = Router::new().fallback(receive).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let url = format!(
            "http://{}/hooks/snitch",
            listener.local_addr().expect("bound")
        );
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("the receiver runs");
        });
        Receiver { url, state, task }
    }

    fn accept(&self, accept: bool) {
        self.state.accept.store(accept, Ordering::SeqCst);
    }

    fn hits(&self) -> Vec<Hit> {
        self.state.hits.lock().expect("not poisoned").clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn receive(
    State(state): State<ReceiverState>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let accept = state.accept.load(Ordering::SeqCst);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let hit = Hit {
        event_id: headers
            .get("snitch-event-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned(),
        kind: text(&body["type"]),
        timestamp: text(&body["timestamp"]),
        token: text(&body["data"]["snitch"]["token"]),
        answered: if accept { 204 } else { 500 },
    };
    state.hits.lock().expect("not poisoned").push(hit);
    if accept {
        AxumStatus::NO_CONTENT.into_response()
    } else {
        (AxumStatus::INTERNAL_SERVER_ERROR, "not now").into_response()
    }
}

/// Datetimes as the API writes them.
fn wire(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("no string {key} in {v}"))
}

// ---------------------------------------------------------------------------------------
// 1. A restart keeps everything, and pending deliveries go out after it

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restart_keeps_everything_and_pending_deliveries_go_out() {
    let started = monotonic_now();
    let db = fresh_database().await;
    let receiver = Receiver::start(false).await;
    let config = ConfigFile::write(&config_text(
        &db.url,
        "allow_private_webhooks = true\nretry_first_delay_ms = 500\nretry_max_delay_ms = 1000",
        Some(&receiver.url),
    ));
    let first = ServerProcess::start("server 1", &config.path, &db.url).await;
    let api = Api::of(&first);

    // A healthy snitch, an errored one and one never checked in.
    let healthy = api.create("Nightly backup", "daily").await;
    let errored = api.create("Hourly sync", "hourly").await;
    let pending = api.create("Weekly report", "weekly").await;
    api.check_in(&healthy, "m=42+files").await;
    api.check_in(&errored, "s=1&m=disk+full").await;
    let tokens = [healthy.clone(), errored.clone(), pending.clone()];

    // Every event's webhook is tried once, answered 500, and the failure recorded: the
    // deliveries stay pending.
    let deadline = Deadline::after(WAIT, "a recorded failed attempt for every event");
    let before: BTreeMap<String, Vec<Value>> = loop {
        let mut all = BTreeMap::new();
        for token in &tokens {
            all.insert(token.clone(), api.events(token).await);
        }
        let tried = all.values().flatten().all(|e| {
            e["deliveries"].as_array().is_some_and(|ds| {
                ds.iter().any(|d| {
                    d["channel"] == "webhook"
                        && d["attempts"].as_array().is_some_and(|a| !a.is_empty())
                })
            })
        });
        let events = all.values().map(Vec::len).sum::<usize>();
        if events >= 2 && tried {
            break all;
        }
        deadline.check(|| format!("{all:?}")).await;
    };
    assert!(before[&pending].is_empty(), "{:?}", before[&pending]);
    let event_ids: BTreeSet<String> = before
        .values()
        .flatten()
        .map(|e| str_of(e, "id").to_owned())
        .collect();
    for e in before.values().flatten() {
        let hook = e["deliveries"]
            .as_array()
            .expect("deliveries")
            .iter()
            .find(|d| d["channel"] == "webhook")
            .expect("a webhook delivery");
        assert_eq!(hook["state"], "pending", "{e}");
        assert_eq!(hook["attempts"][0]["ok"], false, "{e}");
    }
    let snitches_before = api.snitches().await;
    assert_eq!(snitches_before.len(), 3);
    let status_of = |list: &[Value], token: &str| -> (String, Value) {
        let s = list
            .iter()
            .find(|s| s["token"] == token)
            .unwrap_or_else(|| panic!("{token} not listed"));
        (str_of(s, "status").to_owned(), s["checked_in_at"].clone())
    };
    assert_eq!(status_of(&snitches_before, &healthy).0, "healthy");
    assert_eq!(status_of(&snitches_before, &errored).0, "errored");
    assert_eq!(status_of(&snitches_before, &pending).0, "pending");
    assert!(status_of(&snitches_before, &healthy).1.is_string());

    first.terminate().await;
    let failed_hits = receiver.hits();
    assert!(failed_hits.iter().all(|h| h.answered == 500));
    let failed_ids: BTreeSet<String> = failed_hits.iter().map(|h| h.event_id.clone()).collect();
    assert_eq!(
        failed_ids, event_ids,
        "each event was tried before the stop"
    );

    // From now on the receiver accepts: whatever it gets comes from the second server.
    receiver.accept(true);
    let second = ServerProcess::start("server 2", &config.path, &db.url).await;
    let api = Api::of(&second);

    // The same snitches, field for field: statuses, checked_in_at, deadlines, everything.
    let snitches_after = api.snitches().await;
    assert_eq!(
        Value::from(snitches_after),
        Value::from(snitches_before),
        "the snitches after the restart"
    );
    for token in &tokens {
        let one = api.get(&format!("/v1/snitches/{token}")).await;
        assert_eq!(one["token"], token.as_str());
    }
    // The same events (the deliveries move on; the events do not).
    let summary = |events: &[Value]| -> Vec<(String, String, String, String)> {
        events
            .iter()
            .map(|e| {
                let s = |k| str_of(e, k).to_owned();
                (s("id"), s("type"), s("timestamp"), s("status"))
            })
            .collect()
    };
    for token in &tokens {
        assert_eq!(
            summary(&api.events(token).await),
            summary(&before[token]),
            "events of {token} after the restart"
        );
    }

    // Each pending delivery goes out after the restart, with the event's id.
    let deadline = Deadline::after(WAIT, "every pending delivery delivered after the restart");
    loop {
        let hits = receiver.hits();
        let delivered: BTreeSet<String> = hits
            .iter()
            .filter(|h| h.answered == 204)
            .map(|h| h.event_id.clone())
            .collect();
        if delivered == event_ids {
            break;
        }
        assert!(delivered.is_subset(&event_ids), "{hits:?}");
        deadline.check(|| format!("{hits:?}")).await;
    }
    let deadline = Deadline::after(WAIT, "the deliveries recorded as delivered");
    loop {
        let mut done = true;
        let mut seen = Vec::new();
        for token in &tokens {
            for e in api.events(token).await {
                let hook = e["deliveries"]
                    .as_array()
                    .expect("deliveries")
                    .iter()
                    .find(|d| d["channel"] == "webhook")
                    .cloned()
                    .expect("a webhook delivery");
                let attempts = hook["attempts"].as_array().expect("attempts").clone();
                done &= hook["state"] == "delivered"
                    && attempts.first().is_some_and(|a| a["ok"] == false)
                    && attempts.last().is_some_and(|a| a["ok"] == true);
                seen.push(hook);
            }
        }
        if done {
            break;
        }
        deadline.check(|| Value::from(seen).to_string()).await;
    }
    second.terminate().await;
    let hits = receiver.hits();
    eprintln!(
        "test 1: {} events, {} webhook requests ({} failed before the restart), {} ms",
        event_ids.len(),
        hits.len(),
        failed_hits.len(),
        started.elapsed().as_millis()
    );
}

// ---------------------------------------------------------------------------------------
// 2. kill -9 loses no acknowledged check-in

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_loses_no_acknowledged_check_in() {
    const SNITCHES: usize = 20;
    const TASKS: usize = 8;
    /// The kill comes after this many acknowledged check-ins or [`LOAD_FOR`], whichever
    /// is first; well below the 100 check-ins each snitch keeps, so none is pruned.
    const ACKED_BEFORE_KILL: usize = 1_000;
    const LOAD_FOR: Duration = Duration::from_secs(1);

    let started = monotonic_now();
    let db = fresh_database().await;
    let config = ConfigFile::write(&config_text(&db.url, "", None));
    let server = ServerProcess::start("server", &config.path, &db.url).await;
    let api = Api::of(&server);
    let mut tokens = Vec::new();
    for n in 0..SNITCHES {
        tokens.push(api.create(&format!("job {n}"), "hourly").await);
    }
    let tokens = Arc::new(tokens);

    // Check-ins m=msg-<n> on the snitches in turn, from concurrent tasks, until the server
    // dies under them. Every message answered 202 is recorded.
    let next = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut load = JoinSet::new();
    for _ in 0..TASKS {
        let (api, tokens, next, stop, acked) = (
            api.clone(),
            tokens.clone(),
            next.clone(),
            stop.clone(),
            acked.clone(),
        );
        load.spawn(async move {
            let mut other = BTreeMap::<String, usize>::new();
            while !stop.load(Ordering::SeqCst) {
                let n = next.fetch_add(1, Ordering::SeqCst);
                let token = &tokens[usize::try_from(n).expect("small") % tokens.len()];
                let message = format!("msg-{n}");
                match api.try_check_in(token, &format!("m={message}")).await {
                    Ok(StatusCode::ACCEPTED) => {
                        acked.lock().expect("not poisoned").push(message);
                    }
                    Ok(status) => *other.entry(status.to_string()).or_default() += 1,
                    // The server is gone.
                    Err(_) => break,
                }
            }
            other
        });
    }
    let load_started = monotonic_now();
    let deadline = Deadline::after(WAIT, "the first acknowledged check-ins");
    loop {
        let n = acked.lock().expect("not poisoned").len();
        if n >= ACKED_BEFORE_KILL || (n > 0 && load_started.elapsed() >= LOAD_FOR) {
            break;
        }
        deadline.check(|| format!("{n} acknowledged")).await;
    }
    server.kill_9().await;
    let killed_after = load_started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let mut other = BTreeMap::<String, usize>::new();
    while let Some(result) = load.join_next().await {
        for (status, n) in result.expect("a load task") {
            *other.entry(status).or_default() += n;
        }
    }
    let acked = acked.lock().expect("not poisoned").clone();
    let sent = next.load(Ordering::SeqCst);

    // Every acknowledged message is in the database.
    let rows = sqlx::query("SELECT token, message FROM snitch.check_ins")
        .fetch_all(&db.pool)
        .await
        .expect("read the check-ins");
    let mut per_token = HashMap::<String, usize>::new();
    let mut stored = HashSet::<String>::new();
    for row in &rows {
        *per_token.entry(row.get("token")).or_default() += 1;
        if let Some(message) = row.get::<Option<String>, _>("message") {
            stored.insert(message);
        }
    }
    let most = per_token.values().copied().max().unwrap_or(0);
    assert!(
        most < snitch::core::snitch::CHECK_INS_KEPT,
        "a snitch holds {most} check-ins: older ones may have been pruned, so this test \
         cannot tell a lost check-in from a pruned one; lower ACKED_BEFORE_KILL"
    );
    let lost: Vec<&String> = acked.iter().filter(|m| !stored.contains(*m)).collect();
    eprintln!(
        "test 2: {} check-ins sent, {} acknowledged, {} stored, other answers {other:?}, \
         killed after {} ms",
        sent,
        acked.len(),
        rows.len(),
        killed_after.as_millis()
    );
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged check-ins are not in the database after kill -9, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(20)]
    );
    assert!(!acked.is_empty(), "no check-in was acknowledged");

    // The killed server's database serves a new one.
    let again = ServerProcess::start("server after kill -9", &config.path, &db.url).await;
    let snitches = Api::of(&again).snitches().await;
    assert_eq!(snitches.len(), SNITCHES);
    assert!(
        snitches
            .iter()
            .all(|s| s["status"] == "healthy" && s["checked_in_at"].is_string()),
        "{}",
        Value::from(snitches)
    );
    again.terminate().await;
    eprintln!("test 2 took {} ms", started.elapsed().as_millis());
}

// ---------------------------------------------------------------------------------------
// 3. Two servers on one database; the one killed mid-sweep loses no `snitch.missing`

/// The real time plus an offset that the test moves forward: the server sees time run at
/// the real pace, but jumps past a deadline instead of waiting for it.
#[derive(Debug, Default)]
struct ShiftedClock {
    offset: Mutex<chrono::Duration>,
}

impl ShiftedClock {
    fn set(&self, to: DateTime<Utc>) {
        let mut offset = self.offset.lock().expect("not poisoned");
        let real = SystemClock.now();
        assert!(to >= real + *offset, "the shifted clock only moves forward");
        *offset = to - real;
    }
}

impl Clock for ShiftedClock {
    fn now(&self) -> DateTime<Utc> {
        SystemClock.now() + *self.offset.lock().expect("not poisoned")
    }
}

/// A tokio runtime of its own for one server: shutting it down in the background drops
/// every task of the server at its next await, mid-transaction or mid-request, as a
/// crash would (its database connections close, so PostgreSQL rolls back what was not
/// committed). Dropped on a test failure, it is shut down the same way.
struct Crashable(Option<tokio::runtime::Runtime>);

impl Crashable {
    fn new() -> Crashable {
        Crashable(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime"),
        ))
    }

    fn runtime(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("not crashed")
    }

    fn crash(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Crashable {
    fn drop(&mut self) {
        self.crash();
    }
}

/// Launches a server on the current runtime with `clock`: its API and check-in bases.
/// The server runs until `shutdown` completes.
async fn launch_in_process(
    text: String,
    clock: Arc<dyn Clock>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> (Api, snitch::server::Running) {
    let api = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the API");
    let check_in = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind check-ins");
    let config = config_from_toml(&text).expect("a valid configuration");
    let running = launch_with_clock(config, api, check_in, clock, shutdown)
        .await
        .expect("the server starts");
    let api = Api::new(
        &format!("http://{}", running.api_addr),
        &format!("http://{}", running.check_in_addr),
    );
    (api, running)
}

/// Two servers share one database. Both are in this process because their clocks must
/// jump (a child process runs on the machine's clock), and each has a clock of its own:
///
/// - Snitches are made and checked in through both, at the same shifted time.
/// - Only A's clock jumps past the deadline, so A alone starts the deadline sweep. As soon
///   as the database shows ten of A's `snitch.missing` events, A is crashed: its runtime
///   is shut down in the background, dropping the sweep, its open transactions and its
///   deliveries in flight, like a `kill -9` (this is the one way to "kill" an in-process
///   server: `Running` has only a graceful shutdown, which lets the sweep finish).
/// - Then B's clock jumps too, past A's sweep lease: B sweeps what A left. Every snitch must be `failed` with
///   exactly one `snitch.missing` for the deadline: none lost, none doubled.
/// - The deliveries A had claimed when it died stay leased for a minute (the
///   dispatcher's lease), so B's clock then jumps past the lease: B sends them. That jump
///   also passes two more due points, whose `snitch.missing` events are checked to be
///   single too. The receiver must have had every event of the deadline at least once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_servers_share_one_database_and_a_killed_one_loses_no_missing() {
    const SNITCHES: usize = 400;
    /// A dies when its sweep has saved this many snitch.missing.
    const KILL_AFTER: i64 = 10;
    /// The longest wait for a sweep of every snitch and its deliveries.
    const SWEEP_WAIT: Duration = Duration::from_secs(20);
    let started = monotonic_now();
    let db = fresh_database().await;
    db.migrate().await;
    let receiver = Receiver::start(true).await;
    let text = config_text(
        &db.url,
        // The shifted clocks jump ahead of the real one: not an outage (tests/outages.rs).
        // Small sweep batches: a sweep of them all takes many commits, so A can die
        // mid-sweep (one batch of 400 would be one statement on Postgres).
        "allow_private_webhooks = true\nretry_first_delay_ms = 200\nretry_max_delay_ms = 1000\n\
         outage_threshold_secs = 3153600000\nsweep_batch = 4",
        Some(&receiver.url),
    );

    // Both clocks read a minute boundary ahead plus 1 s, so that every check-in falls in
    // the same minute and every deadline is the end of the next one.
    let boundary = SystemClock
        .now()
        .duration_trunc(chrono::Duration::minutes(1))
        .expect("whole minutes")
        + chrono::Duration::minutes(5);
    let clock_a = Arc::new(ShiftedClock::default());
    let clock_b = Arc::new(ShiftedClock::default());
    clock_a.set(boundary + chrono::Duration::seconds(1));
    clock_b.set(clock_a.now());

    let mut runtime_a = Crashable::new();
    let a = {
        let (text, clock) = (text.clone(), clock_a.clone() as Arc<dyn Clock>);
        runtime_a
            .runtime()
            .spawn(async move {
                // Only the addresses leave A's runtime: nothing of A (its pool above all)
                // may outlive the crash.
                let (api, running) = launch_in_process(text, clock, std::future::pending()).await;
                drop(running);
                api
            })
            .await
            .expect("server A starts")
    };
    let (stop_b, stopped_b) = tokio::sync::oneshot::channel::<()>();
    let (b, running_b) = launch_in_process(text, clock_b.clone(), async move {
        let _ = stopped_b.await;
    })
    .await;

    // The snitches, made and checked in through A and B in turn.
    let mut jobs = JoinSet::new();
    for n in 0..SNITCHES {
        let server = if n % 2 == 0 { a.clone() } else { b.clone() };
        let other = if n % 2 == 0 { b.clone() } else { a.clone() };
        jobs.spawn(async move {
            let token = server.create(&format!("job {n}"), "1_minute").await;
            other.check_in(&token, "").await;
            token
        });
        // At most 16 at once.
        if jobs.len() >= 16 {
            jobs.join_next().await.expect("a job").expect("made");
        }
    }
    while let Some(done) = jobs.join_next().await {
        done.expect("made");
    }
    let set_up = started.elapsed();
    let snitches = b.snitches().await;
    assert_eq!(snitches.len(), SNITCHES);
    let tokens: BTreeSet<String> = snitches
        .iter()
        .map(|s| str_of(s, "token").to_owned())
        .collect();
    let deadlines: BTreeSet<&str> = snitches.iter().map(|s| str_of(s, "deadline_at")).collect();
    let deadline = boundary + chrono::Duration::minutes(2);
    assert_eq!(
        deadlines,
        BTreeSet::from([wire(deadline).as_str()]),
        "every check-in fell in the minute after {boundary}"
    );
    assert!(
        clock_a.now() < boundary + chrono::Duration::seconds(55),
        "the set-up took too long: {set_up:?}"
    );
    // The snitch.reporting webhooks are out, so that what is in flight later is the
    // sweep's.
    let wait = Deadline::after(WAIT, "every snitch.reporting delivered");
    loop {
        let hits = receiver.hits();
        let reported: HashSet<&str> = hits
            .iter()
            .filter(|h| h.kind == "snitch.reporting")
            .map(|h| h.token.as_str())
            .collect();
        if reported.len() == SNITCHES {
            break;
        }
        wait.check(|| format!("{} of {SNITCHES}", reported.len()))
            .await;
    }

    // A alone passes the deadline, and dies once its sweep has saved a few snitches (so
    // that its dispatcher has deliveries of them in flight too). The database is looked
    // at every 2 ms: a sweep of them all takes many group commits.
    clock_a.set(deadline + chrono::Duration::milliseconds(500));
    let jumped = monotonic_now();
    let kill_at = monotonic_now() + WAIT;
    loop {
        let n = db.missing_count().await;
        if n >= KILL_AFTER {
            break;
        }
        assert!(
            monotonic_now() < kill_at,
            "A's sweep saved {n} snitch.missing within {WAIT:?} of the jump"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    runtime_a.crash();
    let sweep_seen_after = jumped.elapsed();
    let by_a = db.missing_at(deadline).await.len();
    assert!(
        by_a < SNITCHES,
        "A finished its sweep ({by_a} events) before it was killed: the test needs a kill \
         mid-sweep"
    );
    let hits_before_b = receiver.hits().len();

    // B passes the deadline too, and past the sweep lease A held on the snitches it had
    // claimed (a dead server's claims come back when their lease ends), but not past the
    // next due point a minute after the deadline: B sweeps what A left.
    clock_b.set(clock_a.now() + snitch_core::service::SWEEP_LEASE + chrono::Duration::seconds(1));
    // A sweep saves about 100 snitches a second in a debug build on a small machine.
    let wait = Deadline::after(SWEEP_WAIT, "B's sweep leaves every snitch failed");
    let statuses = loop {
        let listed = b.snitches().await;
        let statuses: BTreeMap<String, usize> = listed.iter().fold(BTreeMap::new(), |mut m, s| {
            *m.entry(str_of(s, "status").to_owned()).or_default() += 1;
            m
        });
        if statuses.get("failed") == Some(&SNITCHES) {
            break statuses;
        }
        wait.check(|| format!("{statuses:?}")).await;
    };
    let missing = db.missing_at(deadline).await;
    let mut per_token = BTreeMap::<&str, usize>::new();
    for (_, token) in &missing {
        *per_token.entry(token.as_str()).or_default() += 1;
    }
    let doubled: Vec<_> = per_token.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        doubled.is_empty(),
        "snitches with more than one snitch.missing for {deadline}: {doubled:?}"
    );
    assert_eq!(
        per_token
            .keys()
            .map(|t| t.to_string())
            .collect::<BTreeSet<_>>(),
        tokens,
        "every snitch has its snitch.missing for {deadline} ({statuses:?})"
    );
    assert_eq!(
        db.missing_count().await,
        i64::try_from(SNITCHES).expect("small"),
        "no other snitch.missing yet"
    );
    let swept = jumped.elapsed();
    let received_by_sweep_end = receiver
        .hits()
        .iter()
        .filter(|h| h.kind == "snitch.missing")
        .map(|h| h.event_id.clone())
        .collect::<HashSet<_>>()
        .len();

    // Past the lease of A's deliveries in flight: B sends them.
    clock_b.set(clock_a.now() + chrono::Duration::minutes(2) + chrono::Duration::seconds(10));
    let ids: BTreeSet<String> = missing.iter().map(|(id, _)| id.clone()).collect();
    let wait = Deadline::after(
        SWEEP_WAIT,
        "the receiver gets every snitch.missing of the deadline",
    );
    let hits = loop {
        let hits = receiver.hits();
        let got: BTreeSet<String> = hits
            .iter()
            .filter(|h| h.kind == "snitch.missing" && h.timestamp == wire(deadline))
            .map(|h| h.event_id.clone())
            .collect();
        if got == ids {
            break hits;
        }
        assert!(got.is_subset(&ids), "unknown events received: {got:?}");
        let absent: Vec<_> = ids.difference(&got).take(10).collect();
        wait.check(|| format!("{} of {}; absent e.g. {absent:?}", got.len(), ids.len()))
            .await;
    };
    let copies = hits
        .iter()
        .filter(|h| h.kind == "snitch.missing" && h.timestamp == wire(deadline))
        .count();
    // The two due points the lease jump passed at once: one catch-up snitch.missing per
    // snitch, for the later one (docs/rules.md#catch-up), none for the earlier.
    let later = deadline + chrono::Duration::minutes(2);
    let wait = Deadline::after(WAIT, format!("a snitch.missing for {later} per snitch"));
    loop {
        let events = db.missing_at(later).await;
        let per: HashSet<&str> = events.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            per.len(),
            events.len(),
            "a doubled snitch.missing for {later}"
        );
        if events.len() == SNITCHES {
            break;
        }
        wait.check(|| format!("{} of {SNITCHES}", events.len()))
            .await;
    }
    let skipped = deadline + chrono::Duration::minutes(1);
    assert_eq!(db.missing_at(skipped).await, [], "caught up in one event");

    let _ = stop_b.send(());
    running_b.wait().await.expect("B stops cleanly");
    eprintln!(
        "test 3: set-up {} ms; A's sweep seen {} ms after the jump; A had saved {by_a} of \
         {SNITCHES} when killed (receiver had {hits_before_b} requests); B's sweep done {} ms \
         after the jump, the receiver then had {received_by_sweep_end} of them (the rest were \
         leased by A); {copies} requests for {} distinct events of the deadline; {} ms in all",
        set_up.as_millis(),
        sweep_seen_after.as_millis(),
        swept.as_millis(),
        ids.len(),
        started.elapsed().as_millis()
    );
}

// ---------------------------------------------------------------------------------------
// 5. Our own downtime (docs/rules.md#outages): no page storm after a restart

/// When the snitch answers its deadline, parsed.
fn deadline_of(snitch: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(str_of(snitch, "deadline_at"))
        .expect("a deadline")
        .to_utc()
}

/// One-minute snitches check in; the server is stopped (SIGTERM, which records the stop)
/// over their deadlines, far longer than the 5 s outage threshold, and started again.
/// The jobs that resume checking in are never announced; the one that stays silent is
/// announced once, at the deadline a check-in at the resume would have had. On the
/// PostgreSQL and the SQLite store at once: real time, about four minutes, so it runs
/// beside the rest of the suite.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_after_downtime_pages_nobody_and_a_dead_job_once() {
    let db = fresh_database().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let sqlite_url = format!("sqlite://{}", dir.path().join("snitch.db").display());
    tokio::join!(
        restart_after_downtime("postgres", &db.url),
        restart_after_downtime("sqlite", &sqlite_url),
    );
}

async fn restart_after_downtime(store: &str, database_url: &str) {
    let receiver = Receiver::start(true).await;
    let config = ConfigFile::write(&config_text(
        database_url,
        "allow_private_webhooks = true\noutage_threshold_secs = 5",
        Some(&receiver.url),
    ));
    let first = ServerProcess::start(
        &format!("{store}: before the outage"),
        &config.path,
        database_url,
    )
    .await;
    let api = Api::of(&first);
    let mut healthy = Vec::new();
    for i in 0..3 {
        healthy.push(api.create(&format!("job {i}"), "1_minute").await);
    }
    let dead = api.create("dead job", "1_minute").await;
    for token in healthy.iter().chain([&dead]) {
        api.check_in(token, "").await;
    }
    let last_deadline = api
        .snitches()
        .await
        .iter()
        .map(deadline_of)
        .max()
        .expect("snitches");
    first.terminate().await;

    // Down over every deadline.
    let down_until = last_deadline + chrono::Duration::seconds(2);
    let wait = (down_until - SystemClock.now())
        .to_std()
        .unwrap_or_default();
    eprintln!("{store}: down for {} s", wait.as_secs());
    tokio::time::sleep(wait).await;
    let second = ServerProcess::start(
        &format!("{store}: after the outage"),
        &config.path,
        database_url,
    )
    .await;
    let resumed = SystemClock.now();
    let api = Api::of(&second);
    for token in &healthy {
        api.check_in(token, "").await;
    }
    let outages = api.get("/v1/outages").await;
    let outages = outages.as_array().expect("an array");
    assert_eq!(outages.len(), 1, "{store}: {outages:?}");
    assert!(str_of(&outages[0], "ended_at") > str_of(&outages[0], "started_at"));

    // The dead job is due one period after the resume; the others go on checking in.
    let due = period_end_after(resumed);
    let wait = Deadline::after(
        (due - SystemClock.now()).to_std().unwrap_or_default() + WAIT,
        "the dead job announced missing",
    );
    let mut last_round = monotonic_now();
    loop {
        let missing: Vec<Hit> = receiver
            .hits()
            .into_iter()
            .filter(|h| h.kind == "snitch.missing")
            .collect();
        if !missing.is_empty() {
            break;
        }
        if last_round.elapsed() >= Duration::from_secs(20) {
            for token in &healthy {
                api.check_in(token, "").await;
            }
            last_round = monotonic_now();
        }
        wait.check(|| format!("{} hits", receiver.hits().len()))
            .await;
    }
    // Every delivery of every event done (none pending): the receiver has had all it
    // will get of them, any second alert included.
    let mut tokens = healthy.clone();
    tokens.push(dead.clone());
    let drained = Deadline::after(WAIT, format!("{store}: the outbox drained"));
    loop {
        let pending = api.pending_deliveries(&tokens).await;
        if pending == 0 {
            break;
        }
        drained
            .check(|| format!("{pending} deliveries pending"))
            .await;
    }
    let hits = receiver.hits();
    let missing: Vec<&Hit> = hits.iter().filter(|h| h.kind == "snitch.missing").collect();
    assert_eq!(missing.len(), 1, "{store}: {missing:?}");
    assert_eq!(missing[0].token, dead);
    assert_eq!(missing[0].timestamp, wire(due));
    for token in &healthy {
        let kinds: Vec<String> = api
            .events(token)
            .await
            .iter()
            .map(|e| str_of(e, "type").to_owned())
            .collect();
        assert_eq!(
            kinds,
            ["snitch.reporting"],
            "{store}: {token} was never announced"
        );
    }
    let outages = api.get("/v1/outages").await;
    assert_eq!(outages[0]["snitches_deferred"], 4);
    second.terminate().await;
}

/// The end of the period after the one holding `t`, for one-minute snitches.
fn period_end_after(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(chrono::Duration::minutes(1))
        .expect("whole minutes")
        + chrono::Duration::minutes(2)
}

/// Two servers on one database; one is killed. The other was alive all along, so a
/// server started after the threshold finds no outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_killed_beside_a_live_one_is_no_outage() {
    let db = fresh_database().await;
    let config = ConfigFile::write(&config_text(&db.url, "outage_threshold_secs = 3", None));
    let a = ServerProcess::start("server A", &config.path, &db.url).await;
    let b = ServerProcess::start("server B", &config.path, &db.url).await;
    let token = Api::of(&a).create("job", "1_minute").await;
    Api::of(&a).check_in(&token, "").await;
    a.kill_9().await;
    // Three times the threshold with only B alive.
    tokio::time::sleep(Duration::from_secs(9)).await;
    let c = ServerProcess::start("server C", &config.path, &db.url).await;
    for server in [&b, &c] {
        let outages = Api::of(server).get("/v1/outages").await;
        assert_eq!(outages, json!([]), "one live server means no outage");
    }
    let outages: i64 = sqlx::query_scalar("SELECT count(*) FROM snitch.outages")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(outages, 0);
    c.terminate().await;
    b.terminate().await;
}
