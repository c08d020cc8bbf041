//! Process-level tests of the server's default store, SQLite: the real server binary
//! (`examples/server.rs`) started with no configuration in an empty directory keeps its
//! data in `./snitch.db`, and what it acknowledged survives `kill -9` and SIGTERM; the
//! `demo` key is made once and keeps working after a restart.
//!
//! The server listens on ports it picks (`SNITCH_LISTEN=127.0.0.1:0`), read back from
//! the "listening on" lines it prints. The process environment cannot leak in: `SNITCH_*`
//! variables and `DATABASE_URL` are removed.

mod common;

use common::binary::server_binary;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};
use snitch::core::clock::monotonic_now;
use snitch::prelude::{Storage, Token};
use snitch::store::sqlite::SqliteStorage;

/// The server binary, running in `dir`; killed with SIGKILL when dropped.
struct ServerProcess {
    child: Child,
    api: String,
    check_ins: String,
    stdout: Arc<Mutex<Vec<String>>>,
}

fn listening_on(line: &str, prefix: &str) -> Option<SocketAddr> {
    let rest = line.strip_prefix(prefix)?;
    let start = rest.find("(listening on ")? + "(listening on ".len();
    let end = start + rest[start..].find(')')?;
    rest[start..end].parse().ok()
}

impl ServerProcess {
    fn start(dir: &Path) -> ServerProcess {
        let mut command = Command::new(server_binary());
        command
            .current_dir(dir)
            .env_remove("DATABASE_URL")
            .env("SNITCH_LISTEN", "127.0.0.1:0")
            .env("SNITCH_CHECK_IN_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy().into_owned();
            if name.starts_with("SNITCH_") && name != "SNITCH_LISTEN" {
                command.env_remove(name);
            }
        }
        command.env("SNITCH_CHECK_IN_LISTEN", "127.0.0.1:0");
        let mut child = command.spawn().expect("start the server binary");
        let stdout = child.stdout.take().expect("piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    eprintln!("[server] {line}");
                    lines.lock().expect("not poisoned").push(line.clone());
                    let _ = tx.send(line);
                }
            });
        }
        let (mut api, mut check_ins) = (None, None);
        let deadline = monotonic_now() + Duration::from_secs(30);
        while api.is_none() || check_ins.is_none() {
            let left = deadline.saturating_duration_since(monotonic_now());
            let line = rx
                .recv_timeout(left)
                .expect("the server prints its addresses within 30 s");
            api = api.or(listening_on(&line, "Snitch API:"));
            check_ins = check_ins.or(listening_on(&line, "Snitch check-ins:"));
        }
        ServerProcess {
            child,
            api: format!("http://{}", api.expect("set")),
            check_ins: format!("http://{}", check_ins.expect("set")),
            stdout: lines,
        }
    }

    /// The demo key it printed, waiting a moment for the line after the addresses.
    fn printed_key(&self) -> Option<String> {
        let deadline = monotonic_now() + Duration::from_secs(5);
        loop {
            let lines = self.stdout.lock().expect("not poisoned").clone();
            if let Some(i) = lines.iter().position(|l| l.contains("made case \"demo\"")) {
                if let Some(key) = lines.get(i + 1) {
                    return Some(key.trim().to_owned());
                }
            }
            if monotonic_now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }

    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = monotonic_now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(monotonic_now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn create_snitch(client: &Client, server: &ServerProcess, key: &str, n: usize) -> String {
    let response = client
        .post(format!("{}/v1/snitches", server.api))
        .basic_auth(key, Some(""))
        .json(&json!({"name": format!("job {n}"), "interval": "daily"}))
        .send()
        .await
        .expect("create");
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.expect("json");
    body["token"].as_str().expect("a token").to_owned()
}

/// Sends `per_snitch` check-ins to each token at once, message `<round>-<n>`: every one
/// must be answered 202. Returns the messages by token.
async fn check_in_all(
    client: &Client,
    server: &ServerProcess,
    tokens: &[String],
    round: &str,
    per_snitch: usize,
) -> Vec<(String, Vec<String>)> {
    let mut sent = Vec::new();
    let mut requests = Vec::new();
    for token in tokens {
        let messages: Vec<String> = (0..per_snitch).map(|n| format!("{round}-{n}")).collect();
        for m in &messages {
            let url = format!("{}/{token}?m={m}", server.check_ins);
            requests.push(async move { client.get(url).send().await });
        }
        sent.push((token.clone(), messages));
    }
    for response in join_all(requests).await {
        assert_eq!(response.expect("check-in").status(), StatusCode::ACCEPTED);
    }
    sent
}

async fn listed(client: &Client, server: &ServerProcess, key: &str) -> (StatusCode, Value) {
    let response = client
        .get(format!("{}/v1/snitches", server.api))
        .basic_auth(key, Some(""))
        .send()
        .await
        .expect("list");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Every acknowledged check-in's message is in the database file.
async fn assert_stored(dir: &Path, sent: &[(String, Vec<String>)]) {
    let pool = snitch::store::sqlite::connect(&dir.join("snitch.db"), 1)
        .await
        .expect("open the database the server left");
    let store = SqliteStorage::new(pool.clone());
    for (token, messages) in sent {
        let token = Token::parse(token).expect("a token");
        let stored: Vec<String> = store
            .check_ins(&token, 1_000)
            .await
            .expect("read")
            .into_iter()
            .filter_map(|c| c.message.map(|m| m.as_str().to_owned()))
            .collect();
        for m in messages {
            assert!(stored.contains(m), "check-in {m} of {token:?} is lost");
        }
    }
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_configuration_data_and_the_demo_key_survive_kill_9_and_sigterm() {
    let dir = tempfile::Builder::new()
        .prefix("sqlite-server-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory");
    let client = Client::new();

    let mut first = ServerProcess::start(dir.path());
    let key = first.printed_key().expect("a fresh key on the first start");
    assert!(dir.path().join("snitch.db").is_file(), "./snitch.db made");
    let mut tokens = Vec::new();
    for n in 0..4 {
        tokens.push(create_snitch(&client, &first, &key, n).await);
    }
    let mut sent = check_in_all(&client, &first, &tokens, "a", 20).await;
    first.signal("-KILL");
    first.wait_exit();
    assert_stored(dir.path(), &sent).await;

    let mut second = ServerProcess::start(dir.path());
    assert_eq!(second.printed_key(), None, "no new key on a restart");
    let (status, body) = listed(&client, &second, &key).await;
    assert_eq!(status, StatusCode::OK, "the old key works: {body}");
    assert_eq!(body.as_array().map(Vec::len), Some(tokens.len()));
    for snitch in body.as_array().expect("a list") {
        assert_eq!(snitch["status"], "healthy");
    }
    sent.extend(check_in_all(&client, &second, &tokens, "b", 20).await);
    second.signal("-TERM");
    assert!(second.wait_exit().success(), "a clean stop");
    assert_stored(dir.path(), &sent).await;

    let third = ServerProcess::start(dir.path());
    assert_eq!(third.printed_key(), None);
    let (status, _) = listed(&client, &third, &key).await;
    assert_eq!(status, StatusCode::OK);
}
