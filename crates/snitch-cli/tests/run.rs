//! `snitch run`, the real binary, against a stand-in check-in server on 127.0.0.1 that
//! records every request and answers as each test scripts it (202, 404, 429 with
//! `Retry-After`, 500, a hang, a closed connection), or against no server at all.

// These tests time the real binary: bounds on how long it holds a job.
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const SNITCH: &str = env!("CARGO_BIN_EXE_snitch");

/// How the stand-in answers one request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Accept,
    /// A redirect: the status (3xx) and the `Location`.
    Redirect(u16, String),
    NotFound,
    TooMany(u64),
    Fail,
    /// Reads the request and never answers.
    Hang,
}

/// One request the stand-in received.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    content_length: Option<usize>,
    body: Vec<u8>,
    at: Instant,
}

struct StandIn {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl StandIn {
    /// A server answering with `script` in order, then `Accept`.
    fn start(script: &[Reply]) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("address"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script.to_vec()));
        let recorded = seen.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let recorded = recorded.clone();
                let script = script.clone();
                thread::spawn(move || serve(stream, &recorded, &script));
            }
        });
        StandIn { base, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>, script: &Mutex<Vec<Reply>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let path = parts.next().unwrap_or_default().to_owned();
        let mut content_length = None;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    content_length = value.trim().parse().ok();
                }
            }
        }
        let mut body = vec![0; content_length.unwrap_or(0)];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        seen.lock().expect("lock").push(Seen {
            method,
            path,
            content_length,
            body,
            at: Instant::now(),
        });
        let reply = {
            let mut script = script.lock().expect("lock");
            if script.is_empty() {
                Reply::Accept
            } else {
                script.remove(0)
            }
        };
        let head = match reply {
            Reply::Accept => "HTTP/1.1 200 OK\r\nPing-Body-Limit: 10000\r\nContent-Length: 2\r\n\r\nOK".to_owned(),
            Reply::NotFound => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_owned(),
            Reply::TooMany(after) => format!(
                "HTTP/1.1 429 Too Many Requests\r\nRetry-After: {after}\r\nContent-Length: 0\r\n\r\n"
            ),
            Reply::Fail => "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n".to_owned(),
            Reply::Redirect(status, location) => format!(
                "HTTP/1.1 {status} Moved\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n"
            ),
            Reply::Hang => {
                thread::sleep(Duration::from_secs(600));
                return;
            }
        };
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
    }
}

/// `snitch run` with `args`, stdin from /dev/null (so the job gets a process group).
fn run(args: &[&str], env: &[(&str, &str)]) -> (Output, Duration) {
    let started = Instant::now();
    let mut command = Command::new(SNITCH);
    command
        .arg("run")
        .args(args)
        .env_remove("SNITCH_TOKEN")
        .env_remove("SNITCH_URL")
        .stdin(Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().expect("the binary runs");
    (output, started.elapsed())
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("an exit code")
}

fn query_value<'a>(path: &'a str, key: &str) -> Option<&'a str> {
    path.split_once('?')?
        .1
        .split('&')
        .find_map(|pair| pair.strip_prefix(&format!("{key}=")))
}

#[test]
fn a_run_reports_its_start_then_its_end_with_status_duration_summary_and_output() {
    let server = StandIn::start(&[]);
    let url = format!("{}/tok123", server.base);
    let (out, _) = run(
        &[
            &url,
            "--",
            "sh",
            "-c",
            "echo starting; sleep 0.2; echo 'disk full' >&2; exit 3",
        ],
        &[],
    );
    assert_eq!(code(&out), 3, "the job's own exit status");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "starting\n",
        "passed through"
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "disk full\n");
    let seen = server.seen();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    let start = &seen[0];
    assert!(
        start.path.starts_with("/tok123/start?rid="),
        "{}",
        start.path
    );
    assert_eq!(start.content_length, Some(0), "an empty body says so");
    let end = &seen[1];
    assert_eq!(end.method, "POST");
    assert!(end.path.starts_with("/tok123/3?"), "{}", end.path);
    assert_eq!(
        query_value(&end.path, "rid"),
        query_value(&start.path, "rid")
    );
    let duration: f64 = query_value(&end.path, "duration")
        .and_then(|d| d.parse().ok())
        .expect("a duration");
    assert!((0.0..10.0).contains(&duration), "{duration}");
    let summary = query_value(&end.path, "m").expect("a summary");
    assert!(summary.starts_with("exit%203%20after%20"), "{summary}");
    assert!(summary.ends_with("disk%20full"), "{summary}");
    let body = String::from_utf8(end.body.clone()).expect("UTF-8");
    assert_eq!(body, "starting\ndisk full\n");
}

#[test]
fn exit_statuses_pass_through_for_signals_missing_and_unrunnable_commands() {
    let server = StandIn::start(&[]);
    let url = format!("{}/tok", server.base);
    let (out, _) = run(&[&url, "--", "sh", "-c", "kill -TERM $$"], &[]);
    assert_eq!(code(&out), 128 + 15, "killed by SIGTERM");
    let (out, _) = run(&[&url, "--", "/no/such/command"], &[]);
    assert_eq!(code(&out), 127);
    let dir = tempfile::tempdir().expect("dir");
    let script = dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("write");
    let (out, _) = run(&[&url, "--", script.to_str().expect("path")], &[]);
    assert_eq!(code(&out), 126);
    let (out, elapsed) = run(&[&url, "--timeout", "500ms", "--", "sleep", "30"], &[]);
    assert_eq!(code(&out), 124);
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    let ends: Vec<String> = server
        .seen()
        .into_iter()
        .filter(|s| !s.path.contains("/start?"))
        .map(|s| s.path)
        .collect();
    let summaries: Vec<&str> = ends
        .iter()
        .map(|p| query_value(p, "m").unwrap_or_default())
        .collect();
    assert!(ends[0].starts_with("/tok/143?"), "{ends:?}");
    assert!(
        summaries[0].starts_with("killed%20by%20SIGTERM"),
        "{summaries:?}"
    );
    assert!(ends[1].starts_with("/tok/127?"), "{ends:?}");
    assert!(ends[2].starts_with("/tok/126?"), "{ends:?}");
    assert!(ends[3].starts_with("/tok/124?"), "{ends:?}");
    assert!(summaries[3].starts_with("timed%20out"), "{summaries:?}");
    // --ok-codes: reported as a success, the wrapper's exit status unchanged.
    let (out, _) = run(
        &[&url, "--ok-codes", "0,1", "--", "sh", "-c", "exit 1"],
        &[],
    );
    assert_eq!(code(&out), 1);
    let last = server.seen().pop().expect("a report");
    assert!(last.path.starts_with("/tok/0?"), "{}", last.path);
}

#[test]
fn a_monitor_that_is_down_or_hangs_never_holds_the_job_or_its_status() {
    // Nothing listens there.
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let down = format!("http://{}/tok", closed.local_addr().expect("address"));
    drop(closed);
    let (out, elapsed) = run(
        &[
            &down,
            "--ping-budget",
            "2s",
            "--",
            "sh",
            "-c",
            "echo hi; exit 5",
        ],
        &[],
    );
    assert_eq!(code(&out), 5);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");

    let hanging = StandIn::start(&[Reply::Hang, Reply::Hang, Reply::Hang, Reply::Hang]);
    let url = format!("{}/tok", hanging.base);
    let (out, elapsed) = run(
        &[
            &url,
            "--ping-timeout",
            "1s",
            "--ping-budget",
            "2s",
            "--",
            "sh",
            "-c",
            "exit 4",
        ],
        &[],
    );
    assert_eq!(code(&out), 4);
    assert!(
        elapsed < Duration::from_secs(6),
        "the budget bounds it: {elapsed:?}"
    );
}

#[test]
fn retries_send_identical_bytes_and_honour_retry_after_and_dms_servers_get_one_check_in() {
    // The start is accepted; the end fails, is throttled, then accepted.
    let server = StandIn::start(&[Reply::Accept, Reply::Fail, Reply::TooMany(1), Reply::Accept]);
    let url = format!("{}/tok", server.base);
    let (out, _) = run(&[&url, "--", "sh", "-c", "echo output; exit 2"], &[]);
    assert_eq!(code(&out), 2);
    let seen = server.seen();
    let ends: Vec<&Seen> = seen
        .iter()
        .filter(|s| !s.path.contains("/start?"))
        .collect();
    assert_eq!(ends.len(), 3, "{seen:#?}");
    assert!(ends
        .windows(2)
        .all(|w| w[0].path == w[1].path && w[0].body == w[1].body));
    assert!(
        ends[2].at - ends[1].at >= Duration::from_millis(950),
        "Retry-After is honoured"
    );

    // A server that knows only `/<token>` (Dead Man's Snitch): one plain check-in.
    let dms = StandIn::start(&[Reply::NotFound]);
    let url = format!("{}/tok", dms.base);
    let (out, _) = run(&[&url, "--", "sh", "-c", "exit 0"], &[]);
    assert_eq!(code(&out), 0);
    let seen = dms.seen();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    assert!(
        seen[1].path.starts_with("/tok?m=ok%20after"),
        "{}",
        seen[1].path
    );
    assert!(seen[1].path.ends_with("&s=0"), "{}", seen[1].path);

    // Other 4xx are never retried.
    let refusing = StandIn::start(&[Reply::Accept, Reply::NotFound, Reply::NotFound]);
    let url = format!("{}/tok", refusing.base);
    run(&[&url, "--", "true"], &[]);
    assert_eq!(
        refusing.seen().len(),
        3,
        "start, end, the DMS form: no retry"
    );
}

#[test]
fn without_a_token_the_job_runs_unless_strict_and_never_sees_the_token() {
    let dir = tempfile::tempdir().expect("dir");
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let (out, _) = run(&["--", "sh", "-c", &touch], &[]);
    assert_eq!(code(&out), 0);
    assert!(marker.exists(), "the job ran unmonitored");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no token"));
    std::fs::remove_file(&marker).expect("remove");
    let (out, _) = run(&["--strict", "--", "sh", "-c", &touch], &[]);
    assert_eq!(code(&out), 125);
    assert!(!marker.exists(), "with --strict, not run");

    let server = StandIn::start(&[]);
    let (out, _) = run(
        &[
            "--",
            "sh",
            "-c",
            "echo \"rid=$SNITCH_RUN_ID token=${SNITCH_TOKEN:-none}\"",
        ],
        &[("SNITCH_TOKEN", "secret42"), ("SNITCH_URL", &server.base)],
    );
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(printed.ends_with("token=none\n"), "{printed}");
    let start = &server.seen()[0];
    assert!(start.path.starts_with("/secret42/start?"), "{}", start.path);
    let rid = query_value(&start.path, "rid").expect("a run id");
    assert!(printed.contains(&format!("rid={rid} ")), "{printed}");
}

#[test]
fn any_output_is_sent_as_valid_utf8_within_the_limit_and_passes_through_unchanged() {
    let server = StandIn::start(&[]);
    let url = format!("{}/tok", server.base);
    let (out, _) = run(&[&url, "--", "printf", "a\\377\\376b\\000c"], &[]);
    assert_eq!(out.stdout, b"a\xff\xfeb\0c", "passed through unchanged");
    let end = server.seen().pop().expect("the end");
    let body = String::from_utf8(end.body).expect("valid UTF-8");
    assert_eq!(body, "a\u{FFFD}\u{FFFD}b\0c");

    // 100 MB of output: passed through, only the tail sent.
    let (out, _) = run(
        &[
            &url,
            "--quiet",
            "--",
            "sh",
            "-c",
            "head -c 100000000 /dev/zero | tr '\\0' x; echo; echo last line",
        ],
        &[],
    );
    assert_eq!(code(&out), 0);
    assert!(out.stdout.is_empty(), "--quiet");
    let end = server.seen().pop().expect("the end");
    assert!(end.body.len() <= 10_000, "{}", end.body.len());
    let body = String::from_utf8(end.body).expect("UTF-8");
    assert!(
        body.starts_with("[snitch run: the output's first"),
        "{}",
        &body[..80]
    );
    assert!(body.ends_with("last line\n"));
    assert!(query_value(&end.path, "m").is_some_and(|m| m.ends_with("last%20line")));
    let (out, _) = run(
        &[&url, "--no-output", "--", "echo", "secret file names"],
        &[],
    );
    assert_eq!(code(&out), 0);
    assert!(
        server.seen().pop().expect("the end").body.is_empty(),
        "--no-output"
    );
}

#[test]
fn signals_reach_the_whole_job_and_nothing_of_it_is_left_behind() {
    let server = StandIn::start(&[]);
    let url = format!("{}/tok", server.base);
    // A unique duration marks this test's sleeps.
    let marker = format!("{}.{}", 300 + std::process::id() % 100, std::process::id());
    let script = format!("sleep {marker} & sleep {marker} & wait");
    let mut child = Command::new(SNITCH)
        .args(["run", &url, "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawned");
    let alive = |marker: &str| {
        Command::new("pgrep")
            .args(["-f", &format!("sleep {marker}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    let until = Instant::now() + Duration::from_secs(5);
    while !alive(&marker) && Instant::now() < until {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(alive(&marker), "the job started");
    let pid = nix_pid(child.id());
    let kill = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(kill.success());
    let status = child.wait().expect("the wrapper exits");
    assert_eq!(status.code(), Some(128 + 15), "the shell was terminated");
    assert!(!alive(&marker), "no process of the job is left");
    let end = server.seen().pop().expect("the end");
    assert!(end.path.starts_with("/tok/143?"), "{}", end.path);
}

fn nix_pid(id: u32) -> String {
    id.to_string()
}

#[test]
fn stdin_reaches_the_job() {
    let server = StandIn::start(&[]);
    let url = format!("{}/tok", server.base);
    let mut child = Command::new(SNITCH)
        .args([
            "run",
            &url,
            "--",
            "sh",
            "-c",
            "read line; echo \"got $line\"",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawned");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"hello\n")
        .expect("written");
    let out = child.wait_with_output().expect("ends");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "got hello\n");
}

/// Runs `snitch run` on `bytes` bytes of output under `/usr/bin/time`: how many bytes
/// passed through, and the wrapper's peak resident set in KiB.
fn pass_through(url: &str, bytes: u64) -> (u64, u64) {
    let script = format!(
        "/usr/bin/time -f 'peak_kib=%M' -o /dev/stderr {SNITCH} run {url} -- \
         sh -c 'head -c {bytes} /dev/zero' | wc -c"
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .output()
        .expect("ran");
    let passed: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a byte count");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let peak: u64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("peak_kib="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak in {stderr}"));
    (passed, peak)
}

/// A gigabyte of output passes through whole, and the wrapper's memory does not grow
/// with it: its peak resident set (as `/usr/bin/time` reports it) with 1 GB of output is
/// within a few MiB of its peak with one byte.
#[test]
fn a_gigabyte_of_output_passes_through_in_bounded_memory() {
    let server = StandIn::start(&[]);
    let url = format!("{}/tok", server.base);
    let (_, small) = pass_through(&url, 1);
    let (passed, large) = pass_through(&url, 1_000_000_000);
    assert_eq!(passed, 1_000_000_000, "every byte passed through");
    println!(
        "peak resident set of snitch run: {small} KiB with 1 byte of output, {large} KiB with 1 GB"
    );
    assert!(large < small + 4 * 1024, "{small} KiB, then {large} KiB");
    let end = server.seen().pop().expect("the end");
    assert!(end.body.len() <= 10_000);
}

#[test]
fn a_job_that_ignores_sigterm_is_killed_after_the_grace() {
    let server = StandIn::start(&[]);
    let url = format!("{}/tok", server.base);
    let (out, elapsed) = run(
        &[
            &url,
            "--timeout",
            "300ms",
            "--kill-after",
            "300ms",
            "--",
            "sh",
            "-c",
            "trap '' TERM; sleep 30",
        ],
        &[],
    );
    assert_eq!(code(&out), 124);
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("SIGKILL"));
}

/// On a terminal the job stays in the wrapper's (foreground) process group, so the
/// terminal's own signals reach it; elsewhere it gets a group of its own.
#[test]
fn the_job_shares_the_terminals_group_only_on_a_terminal() {
    let server = StandIn::start(&[]);
    let url = format!("{}/tok", server.base);
    let probe =
        "echo \"job=$(ps -o pgid= -p $$ | tr -d ' ') wrapper=$(ps -o pgid= -p $PPID | tr -d ' ')\"";
    let groups = |text: &str| -> (String, String) {
        let line = text
            .lines()
            .find(|l| l.contains("job="))
            .unwrap_or_else(|| panic!("no probe line in {text:?}"));
        let value = |key: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .unwrap_or_default()
                .to_owned()
        };
        (value("job="), value("wrapper="))
    };
    let (out, _) = run(&[&url, "--", "sh", "-c", probe], &[]);
    let (job, wrapper) = groups(&String::from_utf8_lossy(&out.stdout));
    assert_ne!(job, wrapper, "not a terminal: a group of its own");

    // `script` gives the wrapper a pseudo-terminal as its stdin.
    let line = format!(
        "{SNITCH} run {url} -- sh -c '{}'",
        probe.replace('\'', "'\\''")
    );
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .output()
        .expect("script runs");
    let (job, wrapper) = groups(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(
        job, wrapper,
        "on a terminal: the terminal's foreground group"
    );
}

/// What `snitch run` says (its own messages on stderr) names the failure and the host,
/// never the token (given as an argument, in SNITCH_TOKEN, in a `file:`, or in a whole
/// check-in URL) nor the user and password of a URL.
#[test]
fn no_message_names_the_token_or_url_credentials() {
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let down = closed.local_addr().expect("address").to_string();
    drop(closed);
    let dir = tempfile::tempdir().expect("dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "tokfile6633\n").expect("write");
    let from_file = format!("file:{}", token_file.display());
    let refusing = StandIn::start(&[Reply::NotFound, Reply::NotFound, Reply::NotFound]);
    let refusing_host = refusing.base.trim_start_matches("http://").to_owned();
    let failing = StandIn::start(&[Reply::Fail, Reply::Fail]);
    let failing_host = failing.base.trim_start_matches("http://").to_owned();
    let secrets = [
        "tokflag4411",
        "tokenv5522",
        "tokfile6633",
        "tokurl7744",
        "usr9966",
        "pw8855",
        "badtok1122",
    ];
    let with_credentials = |host: &str| format!("http://usr9966:pw8855@{host}");
    // Arguments, environment, and the host the messages must name, if any.
    type Case<'a> = (Vec<String>, Vec<(&'a str, String)>, Option<&'a str>);
    let cases: Vec<Case> = vec![
        (
            vec![
                "--url".into(),
                with_credentials(&down),
                "tokflag4411".into(),
            ],
            vec![],
            Some(&down),
        ),
        (
            vec![],
            vec![
                ("SNITCH_TOKEN", "tokenv5522".into()),
                ("SNITCH_URL", with_credentials(&down)),
            ],
            Some(&down),
        ),
        (
            vec![],
            vec![
                ("SNITCH_TOKEN", from_file.clone()),
                ("SNITCH_URL", format!("http://{down}")),
            ],
            Some(&down),
        ),
        (
            vec![format!("{}/tokurl7744", with_credentials(&down))],
            vec![],
            Some(&down),
        ),
        // Refused (404 to the run form and to the DMS form).
        (
            vec![format!("{}/tokurl7744", with_credentials(&refusing_host))],
            vec![],
            Some(&refusing_host),
        ),
        // 500, past every retry.
        (
            vec![format!("{}/tokflag4411", with_credentials(&failing_host))],
            vec![],
            Some(&failing_host),
        ),
        // Usage problems: a token that is not one, a base that is not http(s), a
        // check-in URL without a token.
        (
            vec![],
            vec![
                ("SNITCH_TOKEN", "badtok1122/x".into()),
                ("SNITCH_URL", format!("http://{down}")),
            ],
            None,
        ),
        (
            vec![
                "--url".into(),
                "ftp://usr9966:pw8855@h".into(),
                "tokflag4411".into(),
            ],
            vec![],
            None,
        ),
        (vec![format!("{}/", with_credentials("h"))], vec![], None),
    ];
    for (args, env, host) in cases {
        let mut line: Vec<&str> = vec!["--retries", "0"];
        line.extend(args.iter().map(String::as_str));
        line.extend(["--", "true"]);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (out, _) = run(&line, &env);
        assert_eq!(code(&out), 0, "{line:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.trim().is_empty(), "the failure is told: {line:?}");
        for secret in secrets {
            assert!(
                !stderr.contains(secret),
                "{secret} in the messages of {line:?} {env:?}:\n{stderr}"
            );
        }
        if let Some(host) = host {
            assert!(
                stderr.contains(host),
                "the host is named: {line:?}:\n{stderr}"
            );
        }
    }
}

/// A 3xx is a refusal: told on stderr with its status and `Location` (our token in it
/// redacted), never taken as recorded, never followed, never retried.
#[test]
fn a_redirect_is_a_refusal_told_with_its_location_and_never_followed() {
    let elsewhere = StandIn::start(&[]);
    let moved = format!("{}/moved/tok3388/start", elsewhere.base);
    let home = format!("{}/new-home", elsewhere.base);
    let server = StandIn::start(&[
        Reply::Redirect(302, moved.clone()),
        Reply::Redirect(308, home.clone()),
    ]);
    let url = format!("{}/tok3388", server.base);
    let (out, _) = run(&[&url, "--", "sh", "-c", "echo done; exit 0"], &[]);
    assert_eq!(code(&out), 0, "the job's status, whatever the monitor says");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let host = server.base.trim_start_matches("http://");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "the start and the end are told:\n{stderr}");
    assert!(
        lines[0].contains(host) && lines[0].contains("302"),
        "{stderr}"
    );
    assert!(
        lines[0].contains(&format!("{}/moved/***/start", elsewhere.base)),
        "the Location, our token redacted:\n{stderr}"
    );
    assert!(
        lines[1].contains("308") && lines[1].contains(&home),
        "{stderr}"
    );
    assert!(!stderr.contains("tok3388"), "{stderr}");
    assert!(elsewhere.seen().is_empty(), "not followed");
    let seen = server.seen();
    assert_eq!(seen.len(), 2, "neither retried nor sent again: {seen:#?}");
    assert!(seen[1].path.starts_with("/tok3388/0?"), "{}", seen[1].path);
}

/// The pids of the processes whose command line matches `pattern` (`pgrep -f`).
fn pids_matching(pattern: &str) -> Vec<String> {
    Command::new("pgrep")
        .args(["-f", pattern])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// A wrapper killed with SIGKILL can forward nothing: the job still ends. Its process
/// gets SIGTERM as its parent dies, and what is left of its process group (children
/// that ignore SIGTERM among them) is ended as when the wrapper exits: SIGTERM, then
/// SIGKILL a second later.
#[test]
fn no_process_of_the_job_outlives_a_wrapper_killed_with_sigkill() {
    let server = StandIn::start(&[]);
    let url = format!("{}/tok", server.base);
    let id = std::process::id();
    // Unique durations mark this test's sleeps.
    let direct = format!("{}.{id}", 500 + id % 100);
    let stubborn = format!("{}.{id}", 600 + id % 100);
    let jobs = [
        // The job is the process itself.
        (direct.clone(), vec!["sleep".to_owned(), direct.clone()], 1),
        // A shell whose children outlive it, none minding SIGTERM.
        (
            stubborn.clone(),
            vec![
                "sh".to_owned(),
                "-c".to_owned(),
                format!("trap '' TERM; sleep {stubborn} & sleep {stubborn} & wait"),
            ],
            2,
        ),
    ];
    for (marker, job, sleeps) in jobs {
        let mut wrapper = Command::new(SNITCH)
            .args(["run", &url, "--"])
            .args(&job)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawned");
        // The sleeps themselves: their command line starts with `sleep`.
        let running = format!("^sleep {marker}$");
        let until = Instant::now() + Duration::from_secs(5);
        while pids_matching(&running).len() < sleeps && Instant::now() < until {
            thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(pids_matching(&running).len(), sleeps, "the job started");
        let killed = Command::new("kill")
            .args(["-KILL", &wrapper.id().to_string()])
            .status()
            .expect("kill");
        assert!(killed.success());
        let killed_at = Instant::now();
        wrapper.wait().expect("the wrapper is reaped");
        let until = killed_at + Duration::from_secs(5);
        while !pids_matching(&running).is_empty() && Instant::now() < until {
            thread::sleep(Duration::from_millis(20));
        }
        let sleeps_gone = killed_at.elapsed();
        // Anything naming the marker: the sleeps, the shell, any helper of the wrapper.
        let any = format!("sleep {marker}");
        while !pids_matching(&any).is_empty() && Instant::now() < until {
            thread::sleep(Duration::from_millis(20));
        }
        let left = pids_matching(&any);
        if !left.is_empty() {
            // Ended here, so a failure leaves nothing behind either.
            for pid in &left {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
            panic!("{job:?}: {left:?} still ran 5 s after the wrapper was killed");
        }
        println!(
            "{job:?}: its sleeps gone {sleeps_gone:?}, everything {:?} after the wrapper was killed",
            killed_at.elapsed()
        );
    }
}
