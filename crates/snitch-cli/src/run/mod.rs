//! `snitch run`: runs a job and reports the run (its start, then its end with the exit
//! status, duration, a one-line summary and the output's tail) to a Snitch server, or a
//! Dead Man's Snitch one, without ever getting in the job's way: a monitor that is down,
//! slow or refusing changes neither whether the job runs nor its exit status.

mod child;
mod guard;
mod output;
mod report;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;

pub use report::{ReportOptions, Reporter, Target};

/// The exit status of the wrapper's own usage errors (with `--strict`).
pub const USAGE_ERROR: u8 = 125;
/// The exit status when `--timeout` ended the job.
pub const TIMED_OUT: u8 = 124;
/// The exit status when the command cannot be run.
pub const NOT_EXECUTABLE: u8 = 126;
/// The exit status when the command is not found.
pub const NOT_FOUND: u8 = 127;
/// How many bytes of output are sent when the server says no limit.
pub const DEFAULT_BODY_LIMIT: usize = 10_000;
/// The longest summary (`m`), in characters.
pub const SUMMARY_MAX_CHARS: usize = 256;

/// `snitch run [OPTIONS] [TOKEN | CHECK-IN-URL] -- COMMAND [ARGS...]`
#[derive(Debug, Args)]
#[command(
    about = "Runs a command and reports its run (start, end, exit status, duration, output) to Snitch",
    after_help = "The job always runs: a missing token or a monitor that is down never stops or delays it, \
and never changes its exit status (128+n when killed by signal n; 124 after --timeout; \
126 not executable; 127 not found)."
)]
pub struct RunArgs {
    /// The snitch's token, or its whole check-in URL (which sets --url too). Default:
    /// SNITCH_TOKEN (`file:/path` reads it from a file).
    #[arg(value_name = "TOKEN | CHECK-IN-URL")]
    pub target: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    /// The check-in base, e.g. `https://check-ins.example.com` (default: SNITCH_URL).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// A usage problem (no token, a bad option) exits 125 without running the job,
    /// instead of a warning.
    #[arg(long)]
    pub strict: bool,
    /// Seconds (or `500ms`, `2m`, `1h`) each report may take.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    pub ping_timeout: Duration,
    /// How many times a report is retried (connect errors, timeouts, 408, 429, 5xx).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub retries: u32,
    /// The most time all reporting may take after the job ended.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration)]
    pub ping_budget: Duration,
    /// Ends the job at DUR: SIGTERM to its process group, SIGKILL after --kill-after.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// How long after SIGTERM the job gets before SIGKILL.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    pub kill_after: Duration,
    /// Sends only the summary, not the output (e.g. backups that list file names).
    #[arg(long)]
    pub no_output: bool,
    /// Does not echo the job's output (it is still reported).
    #[arg(long)]
    pub quiet: bool,
    /// Exit statuses reported as success, e.g. `0,1` (the wrapper's own exit status is
    /// the job's, whatever this says).
    #[arg(long, value_name = "CODES", value_delimiter = ',', default_value = "0")]
    pub ok_codes: Vec<u8>,
}

/// A duration: seconds (`30`, `1.5`) or with a unit (`500ms`, `30s`, `2m`, `1h`).
pub fn parse_duration(raw: &str) -> Result<Duration, String> {
    let raw = raw.trim();
    let (number, unit) = match raw.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => raw.split_at(i),
        None => (raw, "s"),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{raw:?} is not a duration (such as 30, 30s, 500ms, 2m, 1h)"))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("{raw:?}: the unit must be ms, s, m or h")),
    };
    let seconds = value * scale;
    if !seconds.is_finite() || !(0.0..=31_536_000.0).contains(&seconds) {
        return Err(format!("{raw:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// What the token and the check-in base are, from the arguments and the environment:
/// `Err` says why there is none.
fn resolve_target(args: &RunArgs, env: impl Fn(&str) -> Option<String>) -> Result<Target, String> {
    let raw = match &args.target {
        Some(t) => t.clone(),
        None => match env("SNITCH_TOKEN") {
            Some(t) => match t.strip_prefix("file:") {
                Some(path) => std::fs::read_to_string(PathBuf::from(path))
                    .map_err(|e| format!("cannot read the token from {path}: {e}"))?
                    .trim()
                    .to_owned(),
                None => t,
            },
            None => return Err("no token: give one, or set SNITCH_TOKEN".into()),
        },
    };
    if raw.starts_with("http://") || raw.starts_with("https://") {
        // A whole check-in URL: its last segment is the token, the rest the base.
        let trimmed = raw.trim_end_matches('/');
        let (base, token) = trimmed
            .rsplit_once('/')
            .filter(|(base, token)| !token.is_empty() && base.contains("://") && base.len() > 8)
            .ok_or_else(|| {
                format!(
                    "the check-in URL at {} names no token (it ends in /<token>)",
                    report::host_of(&raw)
                )
            })?;
        return Target::new(base, token);
    }
    let base = args
        .url
        .clone()
        .or_else(|| env("SNITCH_URL"))
        .ok_or("no check-in URL: give --url, or set SNITCH_URL (output is never sent to a host you did not name)")?;
    Target::new(&base, &raw)
}

/// Runs `snitch run`: the job's exit status.
pub fn run(args: RunArgs) -> ExitCode {
    let started = Instant::now();
    let target = match resolve_target(&args, |k| std::env::var(k).ok()) {
        Ok(target) => Some(target),
        Err(why) if args.strict => {
            eprintln!("snitch run: {why}");
            return ExitCode::from(USAGE_ERROR);
        }
        Err(why) => {
            eprintln!("snitch run: warning: {why}; the job runs unmonitored");
            None
        }
    };
    let own_group = !std::io::stdin().is_terminal();
    // Forked now, while the wrapper has one thread: the reports' threads come next.
    let guardian = if own_group {
        guard::Guardian::start()
    } else {
        None
    };
    let run_id = uuid::Uuid::new_v4().to_string();
    let reporter = target.map(|target| {
        Reporter::new(
            target,
            run_id.clone(),
            ReportOptions {
                ping_timeout: args.ping_timeout,
                retries: args.retries,
            },
        )
    });
    // The start goes out on a thread of its own: the job never waits for it.
    let start = reporter.as_ref().map(Reporter::start_in_background);
    let tail_limit = DEFAULT_BODY_LIMIT;
    let outcome = child::run_job(
        &child::JobSpec {
            command: &args.command,
            run_id: &run_id,
            own_group,
            quiet: args.quiet,
            tail_limit,
            timeout: args.timeout,
            kill_after: args.kill_after,
        },
        guardian,
    );
    let duration = started.elapsed();
    let code = outcome.exit_code();
    if let Some(reporter) = reporter {
        let deadline = Instant::now() + args.ping_budget;
        let success = args.ok_codes.contains(&code) && !outcome.timed_out();
        let summary = summary(&outcome, duration, success);
        let body = if args.no_output {
            Vec::new()
        } else {
            outcome.tail_text(reporter.body_limit()).into_bytes()
        };
        let start_answer = start.and_then(|handle| report::join_until(handle, deadline));
        let reported = if success { 0 } else { code.max(1) };
        reporter.finish(
            report::Finish {
                exit_status: reported,
                duration,
                summary: &summary,
                body: &body,
                start_refused: start_answer == Some(report::Answer::Refused),
            },
            deadline,
        );
    }
    ExitCode::from(code)
}

/// The one-line summary of a run: `exit 3 after 4.2 s: <last output line>`.
fn summary(outcome: &child::Outcome, duration: Duration, success: bool) -> String {
    let head = match (&outcome.status, success) {
        (child::Status::Exited(0), _) => "ok".to_owned(),
        (child::Status::Exited(n), true) => format!("ok (exit {n})"),
        (child::Status::Exited(n), false) => format!("exit {n}"),
        (child::Status::Signalled(name, _), _) => format!("killed by {name}"),
        (child::Status::TimedOut, _) => "timed out".to_owned(),
        (child::Status::NotFound(why), _) => format!("exit 127, not found: {why}"),
        (child::Status::NotExecutable(why), _) => format!("exit 126, cannot run: {why}"),
    };
    let mut line = format!("{head} after {:.1} s", duration.as_secs_f64());
    if let Some(last) = outcome.last_line() {
        line.push_str(": ");
        line.push_str(&last);
    }
    line.chars().take(SUMMARY_MAX_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn args(line: &[&str]) -> RunArgs {
        Cli::try_parse_from(std::iter::once("run").chain(line.iter().copied()))
            .expect("valid")
            .run
    }

    #[test]
    fn durations_take_seconds_and_units() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1_500)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3_600)));
        for bad in ["", "x", "-1", "5d", "inf", "NaN"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_target_comes_from_a_url_a_token_or_the_environment() {
        let none = |_: &str| None;
        let t = resolve_target(
            &args(&["https://ci.example.com/abc123", "--", "true"]),
            none,
        )
        .expect("a URL");
        assert_eq!((t.base(), t.token()), ("https://ci.example.com", "abc123"));
        let t = resolve_target(
            &args(&["--url", "http://127.0.0.1:9/", "tok", "--", "true"]),
            none,
        )
        .expect("a token and a base");
        assert_eq!((t.base(), t.token()), ("http://127.0.0.1:9", "tok"));
        let env = |k: &str| match k {
            "SNITCH_TOKEN" => Some("fromenv".to_owned()),
            "SNITCH_URL" => Some("http://h".to_owned()),
            _ => None,
        };
        let t = resolve_target(&args(&["--", "true"]), env).expect("from the environment");
        assert_eq!((t.base(), t.token()), ("http://h", "fromenv"));
        assert!(resolve_target(&args(&["--", "true"]), none).is_err());
        assert!(
            resolve_target(&args(&["tok", "--", "true"]), none).is_err(),
            "no implicit host"
        );
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("token");
        std::fs::write(&file, "filetoken\n").expect("write");
        let from_file = format!("file:{}", file.display());
        let env = |k: &str| match k {
            "SNITCH_TOKEN" => Some(from_file.clone()),
            "SNITCH_URL" => Some("http://h".to_owned()),
            _ => None,
        };
        let t = resolve_target(&args(&["--", "true"]), env).expect("from a file");
        assert_eq!(t.token(), "filetoken");
    }
}
