//! Reporting a run: the start (on a thread of its own, never waited for before the job
//! starts), then the end with its exit status, duration, summary and output, bounded
//! per request (`--ping-timeout`), in retries (`--retries`: connect errors, timeouts,
//! 408, 429 with `Retry-After`, 5xx; never other 4xx nor a 3xx, which is a refusal and
//! never followed) and in all (`--ping-budget`). A retry sends the identical bytes. A server that only speaks Dead Man's Snitch's v1
//! (the run forms unknown: 404) gets one plain check-in, `/<token>?m=…&s=…`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::DEFAULT_BODY_LIMIT;

/// What may stand unescaped in a path segment or a query value.
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Where reports go: the check-in base and the token.
#[derive(Debug, Clone)]
pub struct Target {
    base: String,
    token: String,
}

impl Target {
    /// A base (`http://` or `https://`) and a token; `Err` says what is wrong, naming
    /// neither the token nor the base's user and password.
    pub fn new(base: &str, token: &str) -> Result<Target, String> {
        let base = base.trim().trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err("the check-in URL must start with http:// or https://".into());
        }
        let token = token.trim();
        if token.is_empty()
            || token.contains(['/', '?', '#'])
            || token.chars().any(char::is_whitespace)
        {
            return Err(
                "the token is not one (empty, or with a /, ?, # or white space in it)".into(),
            );
        }
        Ok(Target {
            base: base.to_owned(),
            token: token.to_owned(),
        })
    }

    #[cfg(test)]
    pub fn base(&self) -> &str {
        &self.base
    }

    #[cfg(test)]
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The host (and port) reports go to: what a message may name of the target.
    pub fn host(&self) -> &str {
        host_of(&self.base)
    }

    /// `text` with the token (as given and as escaped in a URL) and the base's user and
    /// password replaced by `***`: a message may quote text that is not ours (an
    /// error's, a server's `Location`), and it never names them
    /// (docs/rules.md#the-job-wrapper-snitch-run).
    pub fn redact(&self, text: &str) -> String {
        let escaped = utf8_percent_encode(&self.token, ESCAPED).to_string();
        let mut secrets = vec![self.token.clone(), escaped];
        if let Some((user, password)) = userinfo(&self.base) {
            for part in [user, password] {
                secrets.push(part.to_owned());
                secrets.push(
                    percent_encoding::percent_decode_str(part)
                        .decode_utf8_lossy()
                        .into_owned(),
                );
            }
        }
        let mut text = text.to_owned();
        for secret in secrets.iter().filter(|s| !s.is_empty()) {
            text = text.replace(secret.as_str(), "***");
        }
        text
    }

    /// `<base>/<token><suffix>?<query>`.
    fn url(&self, suffix: &str, query: &[(&str, String)]) -> String {
        let mut url = format!(
            "{}/{}{suffix}",
            self.base,
            utf8_percent_encode(&self.token, ESCAPED)
        );
        for (n, (key, value)) in query.iter().enumerate() {
            url.push(if n == 0 { '?' } else { '&' });
            url.push_str(key);
            url.push('=');
            url.extend(utf8_percent_encode(value, ESCAPED));
        }
        url
    }
}

/// The host (and port) of an `http://` or `https://` URL, without its user and
/// password: all a message says of where reports go.
pub fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
}

/// The user and password (either may be empty) of a URL that has them.
fn userinfo(url: &str) -> Option<(&str, &str)> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (info, _) = authority.rsplit_once('@')?;
    Some(info.split_once(':').unwrap_or((info, "")))
}

/// How reports are bounded.
#[derive(Debug, Clone, Copy)]
pub struct ReportOptions {
    pub ping_timeout: Duration,
    pub retries: u32,
}

/// How a report was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Recorded (2xx).
    Accepted,
    /// Refused for good (a 4xx other than 408 and 429): not retried.
    Refused,
    /// Answered with a redirect (3xx): a refusal too, never followed (the token goes only
    /// where the user said), nor retried, nor sent again in the Dead Man's Snitch form
    /// (to the same place that redirects).
    Redirected,
    /// Not recorded: the monitor is down, slow or failing, past every retry.
    Failed,
}

/// Reports one run.
#[derive(Debug, Clone)]
pub struct Reporter(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    target: Target,
    run_id: String,
    options: ReportOptions,
    agent: ureq::Agent,
    /// The server's `Ping-Body-Limit`, once a report told it.
    body_limit: AtomicUsize,
}

/// The end of a run, as reported.
pub struct Finish<'a> {
    /// 0 for a success, else the exit status (1 to 255).
    pub exit_status: u8,
    pub duration: Duration,
    pub summary: &'a str,
    pub body: &'a [u8],
    /// The start was refused (a DMS server): send the plain check-in at once.
    pub start_refused: bool,
}

impl Reporter {
    pub fn new(target: Target, run_id: String, options: ReportOptions) -> Self {
        let agent = ureq::AgentBuilder::new()
            .timeout(options.ping_timeout)
            // The token goes only where the user said: never on to a redirect. (ureq then
            // returns the 3xx as a response, which `send` takes as a refusal.)
            .redirects(0)
            .user_agent(concat!("snitch-run/", env!("CARGO_PKG_VERSION")))
            .build();
        Reporter(Arc::new(Inner {
            target,
            run_id,
            options,
            agent,
            body_limit: AtomicUsize::new(DEFAULT_BODY_LIMIT),
        }))
    }

    /// How many bytes of output the server keeps (its `Ping-Body-Limit`, default
    /// 10,000).
    pub fn body_limit(&self) -> usize {
        self.0.body_limit.load(Ordering::Relaxed)
    }

    /// Sends the start on a thread of its own.
    pub fn start_in_background(&self) -> JoinHandle<Answer> {
        let reporter = self.clone();
        thread::spawn(move || {
            let url = reporter
                .0
                .target
                .url("/start", &[("rid", reporter.0.run_id.clone())]);
            // The job may run for hours: the start is not bound by the post-run budget.
            let deadline = Instant::now()
                + reporter.0.options.ping_timeout * (reporter.0.options.retries + 1) * 2;
            reporter.send(&url, &[], deadline)
        })
    }

    /// Sends the end of the run, within `deadline`.
    pub fn finish(&self, finish: Finish, deadline: Instant) -> Answer {
        let target = &self.0.target;
        let dms = |reporter: &Reporter| {
            let url = target.url(
                "",
                &[
                    ("m", finish.summary.to_owned()),
                    ("s", finish.exit_status.to_string()),
                ],
            );
            reporter.send(&url, &[], deadline)
        };
        if finish.start_refused {
            return dms(self);
        }
        let url = target.url(
            &format!("/{}", finish.exit_status),
            &[
                ("rid", self.0.run_id.clone()),
                ("duration", format!("{:.3}", finish.duration.as_secs_f64())),
                ("m", finish.summary.to_owned()),
            ],
        );
        match self.send(&url, finish.body, deadline) {
            // The run forms are unknown there: Dead Man's Snitch itself.
            Answer::Refused => dms(self),
            other => other,
        }
    }

    /// One report: POSTs `body` (the same bytes on every try) until it is answered, the
    /// retries are spent or `deadline` passes. A report not recorded is told on stderr
    /// once, naming the host and why, never the URL (docs/rules.md#the-job-wrapper-snitch-run).
    fn send(&self, url: &str, body: &[u8], deadline: Instant) -> Answer {
        let options = self.0.options;
        let target = &self.0.target;
        let mut delay = Duration::from_millis(500);
        let mut failure = String::from("--ping-budget ran out");
        for attempt in 0..=options.retries {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let answer = self
                .0
                .agent
                .post(url)
                .timeout(left.min(options.ping_timeout))
                .set("Content-Type", "text/plain; charset=utf-8")
                .send_bytes(body);
            let wait = match answer {
                Ok(response) if (300..400).contains(&response.status()) => {
                    let location = response
                        .header("Location")
                        .map_or_else(|| "no Location".to_owned(), |l| self.server_text(l));
                    eprintln!(
                        "snitch run: the monitor at {} refused the report: {} {}, to {location} \
                         (a redirect is not followed)",
                        target.host(),
                        response.status(),
                        self.server_text(response.status_text()),
                    );
                    return Answer::Redirected;
                }
                Ok(response) => {
                    self.learn_limit(&response);
                    return Answer::Accepted;
                }
                Err(ureq::Error::Status(code, response)) => {
                    self.learn_limit(&response);
                    let status = format!("{code} {}", self.server_text(response.status_text()));
                    match code {
                        408 | 429 | 500..=599 => {
                            failure = format!("it answered {status}");
                            retry_after(&response).unwrap_or(delay)
                        }
                        _ => {
                            eprintln!(
                                "snitch run: the monitor at {} refused the report: {status}",
                                target.host()
                            );
                            return Answer::Refused;
                        }
                    }
                }
                Err(ureq::Error::Transport(e)) => {
                    failure = target.redact(&transport_text(&e));
                    delay
                }
            };
            if attempt == options.retries {
                break;
            }
            // Backoff with jitter (up to a half more), within the budget.
            let jitter = wait.mul_f64(f64::from(uuid::Uuid::new_v4().as_bytes()[0]) / 510.0);
            let left = deadline.saturating_duration_since(Instant::now());
            thread::sleep((wait + jitter).min(left));
            delay = (delay * 2).min(Duration::from_secs(8));
        }
        eprintln!(
            "snitch run: cannot report to the monitor at {}: {failure}",
            target.host()
        );
        Answer::Failed
    }

    /// Text the server chose (a status's reason, a header), fit for a message of ours:
    /// one line of at most 300 characters, control characters replaced, our token and
    /// credentials redacted.
    fn server_text(&self, text: &str) -> String {
        let line: String = text
            .chars()
            .take(300)
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        self.0.target.redact(&line)
    }

    fn learn_limit(&self, response: &ureq::Response) {
        if let Some(limit) = response
            .header("Ping-Body-Limit")
            .and_then(|v| v.trim().parse::<usize>().ok())
        {
            self.0
                .body_limit
                .store(limit.min(DEFAULT_BODY_LIMIT * 100), Ordering::Relaxed);
        }
    }
}

/// What went wrong with a request, from its kind, message and cause: never its URL,
/// which ureq's own `Display` starts with (and which holds the token).
fn transport_text(e: &ureq::Transport) -> String {
    let mut text = e.kind().to_string();
    if let Some(message) = e.message() {
        text.push_str(": ");
        text.push_str(message);
    }
    if let Some(source) = std::error::Error::source(e) {
        text.push_str(": ");
        text.push_str(&source.to_string());
    }
    text
}

/// A 429's or 503's `Retry-After` in seconds.
fn retry_after(response: &ureq::Response) -> Option<Duration> {
    response
        .header("Retry-After")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// The start's answer, waiting for it until `deadline` at most.
pub fn join_until(handle: JoinHandle<Answer>, deadline: Instant) -> Option<Answer> {
    while !handle.is_finished() {
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
    handle.join().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_escape_the_token_and_the_query() {
        let t = Target::new("http://127.0.0.1:8080/", "tok.1").expect("valid");
        assert_eq!(
            t.url("/3", &[("rid", "a-b".into()), ("m", "exit 3: disk full & ünï".into())]),
            "http://127.0.0.1:8080/tok.1/3?rid=a-b&m=exit%203%3A%20disk%20full%20%26%20%C3%BCn%C3%AF"
        );
        assert!(Target::new("ftp://x", "t").is_err());
        assert!(Target::new("http://x", "a/b").is_err());
        assert!(Target::new("http://x", "").is_err());
    }

    #[test]
    fn messages_name_the_host_and_never_the_token_or_credentials() {
        let t =
            Target::new("https://us%65r:p%40ss@ci.example.com:8443/base", "tk.1").expect("valid");
        assert_eq!(t.host(), "ci.example.com:8443");
        assert_eq!(host_of("http://h"), "h");
        assert_eq!(host_of("http://a:b@h/x?y#z"), "h");
        assert_eq!(
            t.redact("https://user:p@ss@ci.example.com:8443/base/tk.1/start us%65r p%40ss"),
            "https://***:***@ci.example.com:8443/base/***/start *** ***"
        );
        let odd = Target::new("http://h", "ü").expect("valid");
        assert_eq!(odd.redact("/%C3%BC/ and ü"), "/***/ and ***");
    }
}
