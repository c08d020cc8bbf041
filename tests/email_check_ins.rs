//! Check-ins by e-mail end to end (docs/rules.md#e-mail-check-ins): a real server with its
//! SMTP listener on, and real clients: Python's smtplib (tests/email/smtp_client.py),
//! Debian's swaks, and raw sockets for what a client library will not do (a slow client, a
//! flood, a crash between `DATA` and the reply).
//!
//! swaks and python3 must be installed (`scripts/ensure-mail-tools.sh`, run by
//! `scripts/test.sh`): a test fails, never skips, without them.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::binary::server_binary;
use common::*;
use serde_json::{json, Value};
use snitch::core::clock::monotonic_now;

const DOMAIN: &str = "checkin.test";

/// A server with the e-mail listener on, `extra` settings added.
async fn mail_server(extra: &str) -> Server {
    let top = format!(
        "{NO_RATE_LIMIT}email_listen = \"127.0.0.1:0\"\ncheck_in_email_domain = \"{DOMAIN}\"\n{extra}"
    );
    Server::start_with(&top, &default_cases()).await
}

fn smtp_addr(server: &Server) -> SocketAddr {
    server
        .running
        .email_addr
        .expect("the e-mail listener is on")
}

fn address(token: &str) -> String {
    format!("{token}@{DOMAIN}")
}

/// Runs tests/email/smtp_client.py's `action` with `args` (host and port added).
async fn python(server: &Server, action: &str, mut args: Value) -> Value {
    let addr = smtp_addr(server);
    args["host"] = json!(addr.ip().to_string());
    args["port"] = json!(addr.port());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/email/smtp_client.py");
    let action = action.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(script)
            .arg(action)
            .arg(args.to_string())
            .output()
            .expect("python3 runs (scripts/ensure-mail-tools.sh installs it)")
    })
    .await
    .expect("joined");
    assert!(
        output.status.success(),
        "smtp_client.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("smtp_client.py prints JSON")
}

/// Runs swaks against the listener; its exit code and transcript.
async fn swaks(server: &Server, args: &[&str]) -> (i32, String) {
    let addr = smtp_addr(server);
    let mut command = Command::new("swaks");
    command
        .args([
            "--server",
            &addr.ip().to_string(),
            "--port",
            &addr.port().to_string(),
        ])
        .args([
            "--helo",
            "client.example.net",
            "--from",
            "backup@example.net",
        ])
        .args(["--timeout", "30"])
        .args(args);
    let output = tokio::task::spawn_blocking(move || {
        command
            .output()
            .expect("swaks runs (scripts/ensure-mail-tools.sh installs it)")
    })
    .await
    .expect("joined");
    let transcript = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code().unwrap_or(-1), transcript)
}

async fn check_ins(server: &Server, token: &str) -> Vec<Value> {
    server
        .get_ok(&format!("/v1/snitches/{token}/check_ins"))
        .await
        .as_array()
        .expect("a list")
        .clone()
}

async fn body_of(server: &Server, token: &str, check_in: &Value) -> String {
    let id = check_in["id"].as_u64().expect("an id");
    let answer = server
        .get(&format!("/v1/snitches/{token}/check_ins/{id}/body"))
        .await;
    assert_eq!(answer.status(), 200, "a body was kept");
    answer.text().await.expect("text")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_message_is_a_check_in_with_its_subject_and_body() {
    let server = mail_server("").await;
    let token = server.create_snitch("Nightly backup", "daily").await;
    let snitch = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert_eq!(snitch["check_in_email"], json!(address(&token)), "{snitch}");

    let sent = python(
        &server,
        "send",
        json!({"to": [address(&token)], "subject": "Backup done: 12 GB", "body": "rsync ok\n"}),
    )
    .await;
    assert_eq!(sent["ok"], json!(true), "{sent}");
    let history = check_ins(&server, &token).await;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["kind"], "success");
    assert_eq!(history[0]["message"], "Backup done: 12 GB");
    assert_eq!(body_of(&server, &token, &history[0]).await, "rsync ok\n");
    assert_eq!(server.status_of(&token).await, "healthy");

    // The upper-cased address some senders make of it is the same snitch.
    let (code, transcript) = swaks(
        &server,
        &[
            "--to",
            &address(&token).to_uppercase(),
            "--header",
            "Subject: again",
        ],
    )
    .await;
    assert_eq!(code, 0, "{transcript}");
    assert!(
        transcript.contains("250 2.0.0 check-in recorded"),
        "{transcript}"
    );
    assert_eq!(check_ins(&server, &token).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_address_is_only_in_the_json_when_the_listener_is_on() {
    let server = Server::start().await;
    let token = server.create_snitch("No mail", "daily").await;
    let snitch = server.get_ok(&format!("/v1/snitches/{token}")).await;
    assert!(snitch.get("check_in_email").is_none(), "{snitch}");
    assert!(server.running.email_addr.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encoded_subjects_multipart_and_8_bit_bodies_become_utf8_text() {
    let server = mail_server("").await;
    let token = server.create_snitch("Encodings", "daily").await;
    let to = json!([address(&token)]);
    let cases = [
        (
            json!({"shape": "rfc2047", "subject": "Sauvegarde réussie ✓", "body": "Durée : 3 min — ok\n"}),
            "Sauvegarde réussie ✓",
            "Durée : 3 min — ok",
        ),
        (
            json!({"shape": "multipart", "subject": "Бэкап готов", "body": "всё хорошо"}),
            "Бэкап готов",
            "всё хорошо",
        ),
        (
            json!({"shape": "latin1", "subject": "Contrôle terminé", "body": "Données copiées: 3 fichiers à jour\n"}),
            "Contrôle terminé",
            "Données copiées: 3 fichiers à jour",
        ),
        (
            json!({"shape": "shift_jis", "subject": "バックアップ完了", "body": "正常に終了しました\n"}),
            "バックアップ完了",
            "正常に終了しました",
        ),
        (
            json!({"shape": "html_only", "subject": "HTML report", "body": "<p>Job <b>ok</b></p>"}),
            "HTML report",
            "Job",
        ),
        // Raw 8-bit bytes with no charset at all (Latin-1 é, then a NUL): still text.
        (
            json!({"shape": "undeclared_8bit", "subject": "raw bytes", "body_hex": "63616665e900210a"}),
            "raw bytes",
            "caf",
        ),
    ];
    for (mut args, subject, body) in cases {
        args["to"] = to.clone();
        let sent = python(&server, "send", args.clone()).await;
        assert_eq!(sent["ok"], json!(true), "{args}: {sent}");
        let latest = check_ins(&server, &token).await[0].clone();
        assert_eq!(latest["message"], json!(subject), "{args}: {latest}");
        let kept = body_of(&server, &token, &latest).await;
        assert!(kept.contains(body), "{args}: {kept:?}");
        assert!(!kept.contains('\0'), "{kept:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keywords_decide_failure_success_start_and_unmatched_messages() {
    let server = mail_server("").await;
    let token = server.create_snitch("NAS backup", "daily").await;
    let set = server
        .patch_json(
            &format!("/v1/snitches/{token}"),
            &json!({"email_keywords": {"failure": ["FAILED", "error"], "success": ["completed"], "start": ["starting"]}}),
        )
        .await;
    assert!(
        set.status().is_success(),
        "{}",
        set.text().await.unwrap_or_default()
    );

    let send = |subject: &str, body: &str| {
        let (subject, body) = (subject.to_owned(), body.to_owned());
        let server = &server;
        let token = token.clone();
        async move {
            let (code, transcript) = swaks(
                server,
                &[
                    "--to",
                    &address(&token),
                    "--header",
                    &format!("Subject: {subject}"),
                    "--body",
                    &body,
                ],
            )
            .await;
            assert_eq!(code, 0, "{transcript}");
        }
    };
    send("Job starting", "pid 4242").await;
    assert_eq!(check_ins(&server, &token).await[0]["kind"], "start");
    send("Backup completed", "0 files skipped").await;
    assert_eq!(check_ins(&server, &token).await[0]["kind"], "success");
    assert_eq!(server.status_of(&token).await, "healthy");
    // Failure keywords win, in the body too, whatever the case.
    send("Backup completed", "1 Error while copying").await;
    let latest = check_ins(&server, &token).await[0].clone();
    assert_eq!(latest["kind"], "error", "{latest}");
    assert_eq!(server.status_of(&token).await, "errored");
    // A message no keyword matches is kept as output and changes nothing.
    send("Weekly statistics", "42 files").await;
    let latest = check_ins(&server, &token).await[0].clone();
    assert_eq!(latest["kind"], "log", "{latest}");
    assert_eq!(server.status_of(&token).await, "errored");

    let bad = server
        .patch_json(
            &format!("/v1/snitches/{token}"),
            &json!({"email_keywords": {"failure": ["a\u{0}b"]}}),
        )
        .await;
    let problems = assert_invalid(bad).await;
    assert_eq!(attributes(&problems), ["email_keywords"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tokens_and_foreign_domains_are_refused_at_rcpt() {
    let server = mail_server("").await;
    let token = server.create_snitch("Real", "daily").await;
    let unknown = python(
        &server,
        "send",
        json!({"to": [format!("aaaaaaaaaaaaaaaaaaaa@{DOMAIN}")]}),
    )
    .await;
    assert_eq!(
        unknown,
        json!({"ok": false, "stage": "rcpt", "codes": [550]})
    );
    let foreign = python(
        &server,
        "send",
        json!({"to": [format!("{token}@example.com")]}),
    )
    .await;
    assert_eq!(
        foreign,
        json!({"ok": false, "stage": "rcpt", "codes": [550]})
    );
    let (code, transcript) = swaks(&server, &["--to", "postmaster@gmail.com"]).await;
    assert_ne!(code, 0);
    assert!(transcript.contains("550 5.7.1"), "{transcript}");
    // A good and a bad recipient: the good one's check-in is recorded, the bad refused.
    let mixed = python(
        &server,
        "send",
        json!({"to": [address(&token), format!("zzzzzzzzzzzzzzzzzzzz@{DOMAIN}")]}),
    )
    .await;
    assert_eq!(mixed["ok"], json!(true), "{mixed}");
    assert_eq!(
        mixed["refused"][format!("zzzzzzzzzzzzzzzzzzzz@{DOMAIN}")],
        json!(550)
    );
    assert_eq!(check_ins(&server, &token).await.len(), 1);
    // No token reaches another case's snitch list, and nothing was made.
    assert_eq!(
        server.get_ok("/v1/snitches").await.as_array().map(Vec::len),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_is_advertised_and_an_oversized_message_is_refused() {
    let server = mail_server("email_max_bytes = 4096\n").await;
    let token = server.create_snitch("Big", "daily").await;
    let features = python(&server, "features", json!({})).await;
    assert_eq!(features["features"]["size"], "4096", "{features}");
    assert!(features["features"].get("8bitmime").is_some(), "{features}");
    assert!(features["features"].get("starttls").is_none(), "{features}");
    // smtplib declares the size with MAIL FROM: refused there.
    let big = python(
        &server,
        "send",
        json!({"to": [address(&token)], "shape": "big", "size": 10_000}),
    )
    .await;
    assert_eq!(big, json!({"ok": false, "stage": "mail", "codes": [552]}));
    // A client that declares nothing: the whole message is read, then refused.
    let mut smtp = RawSmtp::connect(smtp_addr(&server));
    smtp.command("EHLO raw.example.net", "250");
    smtp.command("MAIL FROM:<a@example.net>", "250");
    smtp.command(&format!("RCPT TO:<{}>", address(&token)), "250");
    smtp.command("DATA", "354");
    let filler = "y".repeat(998);
    for _ in 0..10 {
        smtp.send(&filler);
    }
    smtp.command(".", "552");
    // The session goes on: a small message is still taken.
    smtp.command("MAIL FROM:<a@example.net>", "250");
    smtp.command(&format!("RCPT TO:<{}>", address(&token)), "250");
    smtp.command("DATA", "354");
    smtp.send("Subject: small");
    smtp.send("");
    smtp.send("..a line that starts with a dot");
    smtp.command(".", "250");
    let history = check_ins(&server, &token).await;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["message"], "small");
    assert_eq!(
        body_of(&server, &token, &history[0]).await,
        ".a line that starts with a dot\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_silent_clients_are_cut_off() {
    let server = mail_server("email_timeout_secs = 1\n").await;
    let addr = smtp_addr(&server);
    let outcome = tokio::task::spawn_blocking(move || {
        // Silent after the greeting: 421 once the command wait is over.
        let mut silent = RawSmtp::connect(addr);
        let started = monotonic_now();
        let line = silent.line();
        let silent_waited = started.elapsed();
        // A slowloris: a byte at a time, never finishing a line, each within the command
        // wait; the connection's whole-life cap (ten waits) ends it.
        let mut slow = RawSmtp::connect(addr);
        let started = monotonic_now();
        let mut cut = None;
        for byte in b"EHLO ".iter().cycle().take(200) {
            if slow.stream.write_all(&[*byte]).is_err() {
                cut = Some(started.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_millis(300));
            if slow.closed() {
                cut = Some(started.elapsed());
                break;
            }
        }
        (line, silent_waited, cut)
    })
    .await
    .expect("joined");
    let (line, silent_waited, cut) = outcome;
    assert!(line.starts_with("421 4.4.2"), "{line}");
    assert!(silent_waited < Duration::from_secs(10), "{silent_waited:?}");
    let cut = cut.expect("the slow client was cut off");
    assert!(cut < Duration::from_secs(30), "{cut:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_address_is_limited() {
    let server = mail_server("email_messages_per_minute = 5\n").await;
    let token = server.create_snitch("Flooded", "daily").await;
    let addr = smtp_addr(&server);
    let to = address(&token);
    let codes = tokio::task::spawn_blocking(move || {
        let mut smtp = RawSmtp::connect(addr);
        smtp.command("EHLO flood.example.net", "250");
        let mut codes = Vec::new();
        for i in 0..8 {
            let answer = smtp.ask("MAIL FROM:<f@example.net>");
            codes.push(answer[..3].to_owned());
            if answer.starts_with("250") {
                smtp.command(&format!("RCPT TO:<{to}>"), "250");
                smtp.command("DATA", "354");
                smtp.send(&format!("Subject: flood {i}"));
                smtp.command(".", "250");
            }
        }
        codes
    })
    .await
    .expect("joined");
    assert_eq!(codes[..5], ["250"; 5], "{codes:?}");
    assert!(codes[5..].iter().all(|c| c == "450"), "{codes:?}");
    assert_eq!(check_ins(&server, &token).await.len(), 5);

    // Guessing tokens: the connection is closed after a few refusals.
    let server = mail_server("").await;
    let addr = smtp_addr(&server);
    let closed_after = tokio::task::spawn_blocking(move || {
        let mut smtp = RawSmtp::connect(addr);
        smtp.command("EHLO guess.example.net", "250");
        smtp.command("MAIL FROM:<g@example.net>", "250");
        for i in 0..20 {
            let answer = smtp.ask(&format!("RCPT TO:<guess{i:016}@{DOMAIN}>"));
            if answer.starts_with("421") {
                return i;
            }
            assert!(answer.starts_with("550 5.1.1"), "{answer}");
        }
        20
    })
    .await
    .expect("joined");
    assert!(closed_after <= 6, "closed after {closed_after} guesses");

    // Connections from one address beyond its share get 421 at once.
    let held: Vec<RawSmtp> = (0..8).map(|_| RawSmtp::connect(addr)).collect();
    let extra = tokio::task::spawn_blocking(move || {
        let mut extra = RawSmtp::connect_raw(addr);
        extra.line()
    })
    .await
    .expect("joined");
    assert!(extra.starts_with("421"), "{extra}");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_works_and_discards_what_was_pipelined_before_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl makes a test certificate");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let server = mail_server(&format!(
        "email_tls_cert = \"{}\"\nemail_tls_key = \"{}\"\n",
        cert.display(),
        key.display()
    ))
    .await;
    let token = server.create_snitch("Over TLS", "daily").await;
    let cafile = cert.display().to_string();
    let sent = python(
        &server,
        "starttls",
        json!({"to": [address(&token)], "cafile": cafile, "subject": "sealed"}),
    )
    .await;
    assert_eq!(sent["ok"], json!(true), "{sent}");
    assert_eq!(sent["offered"], json!(true));
    assert_eq!(sent["offered_after_tls"], json!(false));
    assert_eq!(check_ins(&server, &token).await[0]["message"], "sealed");

    let injected = python(&server, "injection", json!({"cafile": cafile})).await;
    assert!(
        injected["ready"]
            .as_str()
            .unwrap_or_default()
            .starts_with("220"),
        "{injected}"
    );
    assert_eq!(
        injected["leaked"], "",
        "the pipelined NOOP was answered: {injected}"
    );
    assert!(
        injected["ehlo_after"]
            .as_str()
            .unwrap_or_default()
            .starts_with("250"),
        "{injected}"
    );
}

/// The server binary with the e-mail listener on, in `dir` (its SQLite file there); killed
/// with SIGKILL when dropped.
struct MailServerProcess {
    child: std::process::Child,
    api: String,
    smtp: SocketAddr,
    key: Option<String>,
}

impl MailServerProcess {
    /// Started; `first`: on an empty directory, where it prints the demo key it made.
    fn start(dir: &Path, first: bool) -> MailServerProcess {
        let mut command = Command::new(server_binary());
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy().into_owned();
            if name.starts_with("SNITCH_") {
                command.env_remove(name);
            }
        }
        command
            .current_dir(dir)
            .env_remove("DATABASE_URL")
            .env("SNITCH_LISTEN", "127.0.0.1:0")
            .env("SNITCH_CHECK_IN_LISTEN", "127.0.0.1:0")
            .env("SNITCH_EMAIL_LISTEN", "127.0.0.1:0")
            .env("SNITCH_CHECK_IN_EMAIL_DOMAIN", DOMAIN)
            .env("SNITCH_EMAIL_MESSAGES_PER_MINUTE", "100000")
            .env("SNITCH_CHECK_IN_HISTORY", "1000")
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped());
        let mut child = command.spawn().expect("start the server binary");
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let (mut api, mut smtp, mut key) = (None, None, None);
        let mut key_next = false;
        while api.is_none() || smtp.is_none() {
            let line = lines
                .next()
                .expect("the server prints its addresses")
                .expect("a line");
            if key_next {
                key = Some(line.trim().to_owned());
                key_next = false;
            }
            key_next |= line.contains("made case \"demo\"");
            if let Some(rest) = line.strip_prefix("Snitch API:") {
                api = rest
                    .split("(listening on ")
                    .nth(1)
                    .and_then(|r| r.strip_suffix(')'))
                    .map(|a| format!("http://{a}"));
            }
            if let Some(rest) = line.strip_prefix("Snitch e-mail check-ins:") {
                smtp = rest
                    .split("(SMTP on ")
                    .nth(1)
                    .and_then(|r| r.strip_suffix(')'))
                    .and_then(|a| a.parse().ok());
            }
        }
        if first && key.is_none() {
            // The demo key comes after the addresses on a first start.
            for line in lines.by_ref().take(3) {
                let line = line.expect("a line");
                if key_next {
                    key = Some(line.trim().to_owned());
                    break;
                }
                key_next |= line.contains("made case \"demo\"");
            }
        }
        std::thread::spawn(move || for _ in lines {});
        MailServerProcess {
            child,
            api: api.expect("set"),
            smtp: smtp.expect("set"),
            key,
        }
    }

    fn kill_9(&mut self) {
        let status = Command::new("kill")
            .args(["-KILL", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        let _ = self.child.wait();
    }
}

impl Drop for MailServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One message over `smtp`; whether the server acknowledged it (`250` after `DATA`).
fn deliver(smtp: &mut RawSmtp, to: &str, subject: &str) -> Option<bool> {
    for (line, expected) in [
        ("MAIL FROM:<k@example.net>".to_owned(), "250"),
        (format!("RCPT TO:<{to}>"), "250"),
        ("DATA".to_owned(), "354"),
    ] {
        smtp.stream
            .write_all(format!("{line}\r\n").as_bytes())
            .ok()?;
        if !smtp.line().starts_with(expected) {
            return None;
        }
    }
    let message = format!("Subject: {subject}\r\n\r\nbody of {subject}\r\n.\r\n");
    smtp.stream.write_all(message.as_bytes()).ok()?;
    Some(smtp.line().starts_with("250"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_between_data_and_the_reply_loses_no_acknowledged_message() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut first = MailServerProcess::start(dir.path(), true);
    let key = first.key.clone().expect("a demo key on the first start");
    let client = reqwest::Client::new();
    let created: Value = client
        .post(format!("{}/v1/snitches", first.api))
        .basic_auth(&key, Some(""))
        .json(&json!({"name": "Crash", "interval": "daily"}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let to = address(&token_of(&created));
    let smtp = first.smtp;
    let acknowledged = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Four senders, each a connection sending message after message until the crash.
    let senders: Vec<_> = (0..4)
        .map(|sender| {
            let (to, acknowledged, count) = (to.clone(), acknowledged.clone(), count.clone());
            std::thread::spawn(move || {
                let mut connection = RawSmtp::connect(smtp);
                connection.command("EHLO crash.example.net", "250");
                for n in 0..100 {
                    let subject = format!("m-{sender}-{n}");
                    match deliver(&mut connection, &to, &subject) {
                        Some(true) => {
                            acknowledged.lock().expect("not poisoned").push(subject);
                            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                        Some(false) | None => return,
                    }
                }
            })
        })
        .collect();
    // The crash comes while messages are in flight: some written up to their final dot,
    // their reply not yet sent.
    let started = monotonic_now();
    while count.load(std::sync::atomic::Ordering::SeqCst) < 40 {
        assert!(started.elapsed() < Duration::from_secs(60), "messages flow");
        std::thread::sleep(Duration::from_millis(1));
    }
    first.kill_9();
    for sender in senders {
        sender.join().expect("sender");
    }
    let acknowledged = acknowledged.lock().expect("not poisoned").clone();
    assert!(acknowledged.len() >= 40 && acknowledged.len() < 400);

    let second = MailServerProcess::start(dir.path(), false);
    let history: Value = client
        .get(format!(
            "{}/v1/snitches/{}/check_ins?limit=1000",
            second.api,
            token_of(&created)
        ))
        .basic_auth(&key, Some(""))
        .send()
        .await
        .expect("history")
        .json()
        .await
        .expect("json");
    let stored: std::collections::HashSet<&str> = history
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|c| c["message"].as_str())
        .collect();
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|s| !stored.contains(s.as_str()))
        .collect();
    assert!(lost.is_empty(), "acknowledged, then lost: {lost:?}");
    // And the restarted listener takes mail again.
    let mut connection = RawSmtp::connect(second.smtp);
    connection.command("EHLO again.example.net", "250");
    assert_eq!(deliver(&mut connection, &to, "after the crash"), Some(true));
}

/// A line-at-a-time SMTP client over a blocking socket.
struct RawSmtp {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl RawSmtp {
    /// Connected, the greeting read and checked.
    fn connect(addr: SocketAddr) -> RawSmtp {
        let mut smtp = RawSmtp::connect_raw(addr);
        let greeting = smtp.line();
        assert!(greeting.starts_with("220"), "{greeting}");
        smtp
    }

    fn connect_raw(addr: SocketAddr) -> RawSmtp {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        RawSmtp {
            reader: BufReader::new(stream.try_clone().expect("clone")),
            stream,
        }
    }

    /// One reply, its continuation lines folded in; empty when the server closed.
    fn line(&mut self) -> String {
        let mut whole = String::new();
        loop {
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) | Err(_) => return whole,
                Ok(_) => {}
            }
            whole.push_str(&line);
            if line.as_bytes().get(3) != Some(&b'-') {
                return whole;
            }
        }
    }

    fn send(&mut self, line: &str) {
        self.stream
            .write_all(format!("{line}\r\n").as_bytes())
            .expect("write");
    }

    fn ask(&mut self, line: &str) -> String {
        self.send(line);
        self.line()
    }

    fn command(&mut self, line: &str, expected: &str) {
        let answer = self.ask(line);
        assert!(answer.starts_with(expected), "{line} -> {answer}");
    }

    /// Whether the server closed the connection (a read sees the end, or its 421).
    fn closed(&mut self) -> bool {
        self.stream.set_nonblocking(true).expect("nonblocking");
        let mut byte = [0u8; 64];
        let closed = match self.reader.get_mut().read(&mut byte) {
            Ok(0) => true,
            Ok(_) => byte.starts_with(b"421"),
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        };
        self.stream.set_nonblocking(false).expect("blocking");
        closed
    }
}
