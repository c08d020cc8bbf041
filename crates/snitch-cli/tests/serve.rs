//! `snitch` with no command serves, as its help says and as `cargo run --example server`
//! does: in an empty folder, a durable SQLite store made there and a `demo` case whose key
//! is printed once; with `--config F` too.

#![cfg(feature = "server")]
// The test waits, in real time, for a real server process to print its address.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SNITCH: &str = env!("CARGO_BIN_EXE_snitch");

/// A server process; killed when dropped.
struct Serving {
    child: Child,
    api: SocketAddr,
    demo_key: Option<String>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `snitch <args>` in `dir` on ports of its own (the only settings given, by
/// environment: none of the test run's, such as its `DATABASE_URL`) and waits for its
/// address and, when it makes one, the demo key.
fn serve(dir: &Path, args: &[&str]) -> Serving {
    let mut child = Command::new(SNITCH)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("SNITCH_LISTEN", "127.0.0.1:0")
        .env("SNITCH_CHECK_IN_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("snitch starts");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut api = None;
    // The listeners' lines first; the API's carries the address it listens on.
    while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if let Some(rest) = line.strip_prefix("Snitch API:") {
            let start = rest.find("(listening on ").expect("an address") + 14;
            let end = start + rest[start..].find(')').expect("a closing parenthesis");
            api = Some(rest[start..end].parse().expect("a socket address"));
        }
        if line.starts_with("Snitch check-ins:") {
            break;
        }
    }
    // Then, when it made the demo case, its key on the line after the notice.
    let mut demo_key = None;
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(2)) {
        if line.starts_with("No case configured") {
            demo_key = rx
                .recv_timeout(Duration::from_secs(2))
                .ok()
                .map(|key| key.trim().to_owned());
            break;
        }
    }
    Serving {
        child,
        api: api.expect("snitch printed its API address within 30 s"),
        demo_key,
    }
}

/// `GET /v1/snitches` as `key`: its status.
fn list_status(api: SocketAddr, key: &str) -> u16 {
    match ureq::get(&format!("http://{api}/v1/snitches"))
        .set(
            "Authorization",
            &format!(
                "Basic {}",
                base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    format!("{key}:")
                )
            ),
        )
        .call()
    {
        Ok(response) => response.status(),
        Err(ureq::Error::Status(status, _)) => status,
        Err(e) => panic!("the API answers: {e}"),
    }
}

#[test]
fn snitch_with_no_command_serves_a_durable_store_in_an_empty_folder() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let first = serve(dir.path(), &[]);
    let key = first.demo_key.clone().expect("the demo key is printed");
    assert_eq!(list_status(first.api, &key), 200);
    assert_eq!(
        list_status(first.api, "not-a-key-0000000000000000000000"),
        401
    );
    drop(first);
    assert!(
        dir.path().join("snitch.db").exists(),
        "the default store is a SQLite file in the working folder"
    );

    // Again, with --config: the same store, the same key, no second demo case.
    let config = dir.path().join("snitch.toml");
    std::fs::write(&config, "data_path = \"snitch.db\"\n").expect("a configuration file");
    let again = serve(dir.path(), &["--config", config.to_str().expect("UTF-8")]);
    assert_eq!(again.demo_key, None, "the demo case is made once");
    assert_eq!(list_status(again.api, &key), 200);
}
