//! Process-level tests of the server binary's admin commands (`examples/server.rs`):
//! `cases …`, `keys …` and `migrate` run as child processes against the same stores a
//! running server uses, SQLite (a temporary directory) and PostgreSQL (a fresh database
//! `snitch_test_<random>` on `DATABASE_URL`, default the local server of
//! `scripts/ensure-postgres.sh`; a test that cannot reach it fails, never skips).
//!
//! A key made by `keys create` must work on a running server, and a revoked one must be
//! refused within a couple of seconds (servers reload keys every 0.5 s): both are polled
//! with a bounded deadline. The process environment cannot leak in: `SNITCH_*` variables
//! are removed and `DATABASE_URL` is set or removed for each child.

mod common;

use common::binary::server_binary;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use reqwest::{Client, StatusCode};
use snitch::core::clock::monotonic_now;

/// How long a revocation (or a new key) may take to reach a running server: it reloads
/// keys every 0.5 s; the rest is margin for a loaded machine.
const KEY_PROPAGATION: Duration = Duration::from_secs(3);

/// How often a poll looks again.
const POLL: Duration = Duration::from_millis(50);

/// Where a child process keeps its data: a directory (SQLite's `./snitch.db` in it) and,
/// for PostgreSQL, the database URL.
#[derive(Debug, Clone)]
struct Store {
    dir: PathBuf,
    database_url: Option<String>,
}

impl Store {
    /// The server binary with `args`, in the store's directory, with a clean environment.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(server_binary());
        command
            .args(args)
            .current_dir(&self.dir)
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("SNITCH_") {
                command.env_remove(name);
            }
        }
        match &self.database_url {
            Some(url) => command.env("DATABASE_URL", url),
            None => command.env_remove("DATABASE_URL"),
        };
        command
    }

    /// Runs an admin command to its end (at most 60 s).
    fn run(&self, args: &[&str]) -> Ran {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", server_binary().display()));
        let deadline = monotonic_now() + Duration::from_secs(60);
        while child.try_wait().expect("wait").is_none() {
            if monotonic_now() > deadline {
                let _ = child.kill();
                panic!("`server {}` did not finish within 60 s", args.join(" "));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let output = child.wait_with_output().expect("the output");
        let ran = Ran {
            what: args.join(" "),
            output,
        };
        eprintln!(
            "$ server {}\n{}{}[exit {}]",
            ran.what,
            ran.stdout(),
            ran.stderr(),
            ran.output.status
        );
        ran
    }

    /// Runs an admin command that must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let ran = self.run(args);
        assert!(
            ran.output.status.success(),
            "`server {}` failed: {}",
            ran.what,
            ran.stderr()
        );
        ran.stdout()
    }

    /// Runs an admin command that must fail with one line on stderr containing `message`
    /// and nothing on stdout.
    fn fails(&self, args: &[&str], message: &str) {
        let ran = self.run(args);
        assert!(
            !ran.output.status.success(),
            "`server {}` should fail",
            ran.what
        );
        let stderr = ran.stderr();
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line on stderr: {stderr:?}");
        assert!(
            lines[0].starts_with("snitch: ") && lines[0].contains(message),
            "`server {}`: {:?} should say {message:?}",
            ran.what,
            lines[0]
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert_eq!(ran.stdout(), "", "nothing on stdout");
    }

    /// `keys create`: the key it printed (its only output line).
    fn create_key(&self, case: &str, label: &str) -> String {
        let out = self.ok(&["keys", "create", "--case", case, "--label", label]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "only the key on stdout: {out:?}");
        let key = lines[0].trim().to_owned();
        assert!(key.len() >= 32, "a key of at least 32 characters: {key:?}");
        key
    }

    /// `keys list`: its rows (after the header), as columns.
    fn list_keys(&self, case: &str) -> Vec<Vec<String>> {
        let out = self.ok(&["keys", "list", "--case", case]);
        let mut lines = out.lines();
        let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
        assert_eq!(
            header,
            ["ID", "LABEL", "PREFIX", "CREATED", "LAST_USED", "REVOKED"]
        );
        lines
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()
    }

    fn start_server(&self, label: &str) -> ServerProcess {
        let mut command = self.command(&[]);
        command
            .env("SNITCH_LISTEN", "127.0.0.1:0")
            .env("SNITCH_CHECK_IN_LISTEN", "127.0.0.1:0")
            // Polling for a key that is not (or no longer) live is many failed
            // authentications from one address: keep it clear of that limit and of the
            // per-key rate limit.
            .env("SNITCH_AUTH_FAILURES_BURST", "100000")
            .env("SNITCH_RATE_LIMIT_BURST", "100000")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("start the server");
        echo(
            format!("{label} stderr"),
            child.stderr.take().expect("piped"),
        );
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let stdout = child.stdout.take().expect("piped");
        let echo_label = label.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                eprintln!("[{echo_label}] {line}");
                let _ = tx.send(line);
            }
        });
        let deadline = monotonic_now() + Duration::from_secs(30);
        let api = loop {
            let left = deadline.saturating_duration_since(monotonic_now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("{label} did not print its address within 30 s"));
            if let Some(addr) = listening_on(&line, "Snitch API:") {
                break addr;
            }
        };
        ServerProcess {
            child,
            api: format!("http://{api}"),
        }
    }
}

/// What an admin command did.
struct Ran {
    what: String,
    output: Output,
}

impl Ran {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

fn echo(label: String, from: impl Read + Send + 'static) {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            eprintln!("[{label}] {line}");
        }
    });
}

fn listening_on(line: &str, prefix: &str) -> Option<SocketAddr> {
    let rest = line.strip_prefix(prefix)?;
    let start = rest.find("(listening on ")? + "(listening on ".len();
    let end = start + rest[start..].find(')')?;
    rest[start..end].parse().ok()
}

/// A running server; killed when dropped.
struct ServerProcess {
    child: Child,
    api: String,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServerProcess {
    async fn list_status(&self, client: &Client, key: &str) -> StatusCode {
        client
            .get(format!("{}/v1/snitches", self.api))
            .basic_auth(key, Some(""))
            .send()
            .await
            .expect("GET /v1/snitches")
            .status()
    }

    /// Polls `GET /v1/snitches` with `key` until it answers `want`, at most
    /// [`KEY_PROPAGATION`]; how long it took.
    async fn await_status(&self, client: &Client, key: &str, want: StatusCode) -> Duration {
        let started = monotonic_now();
        loop {
            let got = self.list_status(client, key).await;
            if got == want {
                return started.elapsed();
            }
            assert!(
                started.elapsed() < KEY_PROPAGATION,
                "{}: GET /v1/snitches answered {got}, not {want}, for {KEY_PROPAGATION:?}",
                self.api
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

fn sqlite_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::Builder::new()
        .prefix("admin-cli-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory");
    let store = Store {
        dir: dir.path().to_path_buf(),
        database_url: None,
    };
    (dir, store)
}

/// Every byte of the SQLite database (the main file and its write-ahead log).
fn database_bytes(dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for name in ["snitch.db", "snitch.db-wal"] {
        if let Ok(b) = std::fs::read(dir.join(name)) {
            bytes.extend(b);
        }
    }
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keys_are_made_listed_used_and_revoked_on_a_running_server() {
    let (_dir, store) = sqlite_store();
    let client = Client::new();

    let migrated = store.ok(&["migrate"]);
    assert!(migrated.contains("migrated"), "{migrated}");
    assert!(store.dir.join("snitch.db").is_file(), "./snitch.db made");
    store.ok(&[
        "cases",
        "create",
        "acme",
        "--members",
        "ops@acme.test,dev@acme.test",
        "--max-snitches",
        "7",
    ]);
    let listed = store.ok(&["cases", "list"]);
    let acme: Vec<&str> = listed
        .lines()
        .find(|l| l.starts_with("acme "))
        .expect("acme listed")
        .split_whitespace()
        .collect();
    assert_eq!(
        acme,
        ["acme", "ops@acme.test,dev@acme.test", "7", "true", "false"]
    );
    store.ok(&["cases", "update", "acme", "--error-notices", "false"]);
    let listed = store.ok(&["cases", "list"]);
    assert!(
        listed
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["acme", "ops@acme.test,dev@acme.test", "7", "false", "false"]),
        "only --error-notices changed: {listed}"
    );

    let key = store.create_key("acme", "ci");
    let other = store.create_key("acme", "deploys");
    assert_ne!(key, other);
    let rows = store.list_keys("acme");
    assert_eq!(rows.len(), 2, "{rows:?}");
    let id = rows[0][0].clone();
    assert_eq!(rows[0][1], "ci");
    assert_eq!(rows[0][2], format!("{}…", &key[..6]), "the prefix only");
    assert_eq!((rows[0][4].as_str(), rows[0][5].as_str()), ("never", "no"));
    let out = store.ok(&["keys", "list", "--case", "acme"]);
    assert!(
        !out.contains(&key) && !out.contains(&other),
        "keys list never prints a key"
    );
    let bytes = database_bytes(&store.dir);
    assert!(!bytes.is_empty());
    assert!(!contains(&bytes, &key), "only a digest is stored");

    let server = store.start_server("server");
    assert_eq!(server.list_status(&client, &key).await, StatusCode::OK);
    // The server records uses with its key refresh: `keys list` shows the use.
    let started = monotonic_now();
    loop {
        let rows = store.list_keys("acme");
        let row = rows.iter().find(|r| r[0] == id).expect("listed");
        if row[4] != "never" {
            assert!(row[4].ends_with('Z'), "a time: {row:?}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the use is not recorded: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let out = store.ok(&["keys", "revoke", &id]);
    assert!(out.contains("revoked"), "{out}");
    let took = server
        .await_status(&client, &key, StatusCode::UNAUTHORIZED)
        .await;
    eprintln!("the revocation took effect after {} ms", took.as_millis());
    let rows = store.list_keys("acme");
    assert_eq!(rows[0][5], "yes");
    assert_eq!(rows[1][5], "no");
    assert_eq!(
        server.list_status(&client, &other).await,
        StatusCode::OK,
        "the case's other key still works"
    );

    // A key made while the server runs is accepted without a restart.
    let fresh = store.create_key("acme", "later");
    server.await_status(&client, &fresh, StatusCode::OK).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_one_line_on_stderr_and_a_non_zero_exit() {
    let (_dir, store) = sqlite_store();
    store.ok(&["cases", "create", "acme"]);

    store.fails(&["keys", "create", "--case", "ghost"], "no case \"ghost\"");
    store.fails(&["keys", "list", "--case", "ghost"], "no case \"ghost\"");
    store.fails(&["keys", "revoke", "nosuchkeyid"], "no API key with id");
    store.fails(
        &[
            "cases",
            "create",
            "beta",
            "--members",
            "ops@acme.test,not-an-address",
        ],
        "\"not-an-address\" is not a valid e-mail address",
    );
    store.fails(
        &["cases", "update", "acme", "--members", "nope"],
        "is not a valid e-mail address",
    );
    store.fails(&["cases", "create", "no spaces"], "case \"no spaces\"");
    store.fails(&["cases", "create", "acme"], "exists already");
    store.fails(
        &["cases", "update", "ghost", "--on-hold", "true"],
        "no case",
    );
    store.fails(
        &["cases", "create", "beta", "--max-snitches", "-1"],
        "--max-snitches",
    );
    store.fails(
        &["cases", "create", "beta", "--max-snitches", "lots"],
        "is not a whole number",
    );
    store.fails(
        &["cases", "create", "beta", "--error-notices", "yes"],
        "is not true or false",
    );
    store.fails(&["cases", "update", "acme"], "nothing to change");
    store.fails(
        &[
            "keys",
            "create",
            "--case",
            "acme",
            "--label",
            &"x".repeat(101),
        ],
        "too long",
    );

    // Nothing was made by the failures.
    let listed = store.ok(&["cases", "list"]);
    assert_eq!(listed.lines().count(), 2, "a header and acme: {listed}");
    assert_eq!(store.list_keys("acme").len(), 0);

    // The in-memory store keeps nothing: refused.
    let ran = {
        let mut command = store.command(&["keys", "list", "--case", "acme"]);
        command.env("SNITCH_STORE", "memory");
        command.output().expect("run")
    };
    assert!(!ran.status.success());
    assert!(String::from_utf8_lossy(&ran.stderr).contains("durable store"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_key_made_by_the_cli_reaches_two_servers_and_its_revocation_too() {
    let db = snitch_store_postgres::test_databases::empty(2).await;
    let (url, pool) = (db.url.clone(), db.pool.clone());
    let (_dir, mut store) = sqlite_store();
    store.database_url = Some(url);
    let client = Client::new();

    let migrated = store.ok(&["migrate"]);
    assert!(migrated.contains("PostgreSQL"), "{migrated}");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'snitch' \
         AND table_name = 'api_keys'",
    )
    .fetch_one(&pool)
    .await
    .expect("query");
    assert_eq!(tables, 1, "migrate made the schema");
    assert!(
        !store.dir.join("snitch.db").exists(),
        "no SQLite file with DATABASE_URL"
    );

    store.ok(&["cases", "create", "acme", "--members", "ops@acme.test"]);
    let first = store.start_server("first");
    let second = store.start_server("second");

    let key = store.create_key("acme", "ci");
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT row_to_json(k)::text FROM snitch.api_keys k")
            .fetch_all(&pool)
            .await
            .expect("query");
    assert!(
        stored.iter().all(|row| !row.contains(&key)),
        "only a digest is stored: {stored:?}"
    );
    let rows = store.list_keys("acme");
    assert_eq!(rows.len(), 1);
    let id = rows[0][0].clone();
    assert!(!store.ok(&["keys", "list", "--case", "acme"]).contains(&key));

    for server in [&first, &second] {
        server.await_status(&client, &key, StatusCode::OK).await;
    }
    store.ok(&["keys", "revoke", &id]);
    for server in [&first, &second] {
        let took = server
            .await_status(&client, &key, StatusCode::UNAUTHORIZED)
            .await;
        eprintln!("{}: revoked after {} ms", server.api, took.as_millis());
    }
    assert_eq!(store.list_keys("acme")[0][5], "yes");
    store.fails(&["keys", "create", "--case", "ghost"], "no case \"ghost\"");
    store.fails(
        &["cases", "create", "beta", "--members", "bad@"],
        "is not a valid e-mail address",
    );
    store.fails(&["keys", "revoke", "nosuchkeyid"], "no API key with id");
    pool.close().await;
}
