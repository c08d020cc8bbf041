//! The server's configuration: the TOML file, `SNITCH_<KEY>` overrides, the checks, and the
//! options derived from it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use snitch_core::{Plan, RetryPolicy, Storage};
use snitch_http::{AuthFailureLimit, RateLimit};
use snitch_notify::dispatcher::DispatcherOptions;
#[cfg(feature = "webhooks")]
use snitch_notify::webhook::WebhookOptions;

use super::ServerError;
use crate::runtime::{SnitchBuilder, SnitchRuntime};
use crate::serve::ServeOptions;

/// The server's settings: a TOML file, each key overridable by `SNITCH_<KEY>`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Config {
    #[serde(default = "default_listen")]
    /// Where the API listens (default `127.0.0.1:8080`).
    pub listen: SocketAddr,
    #[serde(default = "default_check_in_listen")]
    /// Where check-ins are received (default `127.0.0.1:8081`).
    pub check_in_listen: SocketAddr,
    /// Where the API is reached from outside; defaults to `http://<listen>`.
    pub base_url: Option<String>,
    /// Where check-ins are sent; defaults to `http://<check_in_listen>`.
    pub check_in_base: Option<String>,
    /// Which store: `memory`, `sqlite` or `postgres`. Absent: picked by `database_url`
    /// (`sqlite://…` or `postgres://…`), or SQLite at `data_path` without one.
    pub store: Option<StoreKind>,
    /// The SQLite database file used when no `database_url` is given (created, with its
    /// directory, if missing).
    #[serde(default = "default_data_path")]
    pub data_path: PathBuf,
    /// `postgres://…` (PostgreSQL) or `sqlite://…` (a SQLite file).
    pub database_url: Option<String>,
    /// The size of the database connection pool.
    #[serde(default = "default_database_max_connections")]
    pub database_max_connections: u32,
    /// SMTP relay for alert e-mails; absent: e-mails are written to the log.
    pub smtp_url: Option<String>,
    #[serde(default = "default_mail_from")]
    /// The sender of alert e-mails (default `snitch@localhost`).
    pub mail_from: String,
    #[serde(default)]
    /// Deliver webhooks to private addresses too (default `false`; needs the `webhooks` feature).
    pub allow_private_webhooks: bool,
    #[serde(default = "default_rate")]
    /// Requests per second refilled into each API key's bucket.
    pub rate_limit_per_second: u32,
    #[serde(default = "default_burst")]
    /// Requests an API key may make at once.
    pub rate_limit_burst: u32,
    /// Failed authentications allowed per client address: a burst, then this many a
    /// minute; beyond that the address gets 429 for a while, correct keys included.
    #[serde(default = "default_auth_failures_per_minute")]
    pub auth_failures_per_minute: u32,
    #[serde(default = "default_auth_failures_burst")]
    /// Failed authentications an address may make at once.
    pub auth_failures_burst: u32,
    #[serde(default)]
    /// Start in maintenance mode (503 for the API; check-ins keep working).
    pub maintenance: bool,
    /// Serve the web dashboard under `/ui/` on the API listener (feature `ui`). Its
    /// cookies are `Secure` when `base_url` is https.
    #[serde(default = "default_true")]
    pub ui: bool,
    /// Connections each listener serves at once; more wait in the kernel's backlog.
    /// Lowered (with a warning) to what the limit of open files allows.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// A connection that has not sent complete request headers within this time (after
    /// it was accepted, or after its previous response) is closed.
    #[serde(default = "default_header_timeout_ms")]
    pub header_timeout_ms: u64,
    /// A request not complete (body read and answered) within this time is answered 408.
    #[serde(default = "default_request_timeout_ms")]
    pub request_timeout_ms: u64,
    /// The first retry of a failed delivery comes about this long after it (doubling).
    #[serde(default = "default_retry_first_delay_ms")]
    pub retry_first_delay_ms: u64,
    /// Retries are never further apart than this.
    #[serde(default = "default_retry_max_delay_ms")]
    pub retry_max_delay_ms: u64,
    /// A delivery still failing this long after its event is dropped and recorded failed.
    #[serde(default = "default_retry_give_up_after_secs")]
    pub retry_give_up_after_secs: u64,
    /// No server of the store alive for longer than this is an outage: deadlines inside
    /// it are deferred, not announced (docs/rules.md#outages).
    #[serde(default = "default_outage_threshold_secs")]
    pub outage_threshold_secs: u64,
    /// Webhook deliveries in flight at once, in all.
    #[serde(default = "default_webhook_concurrency")]
    pub webhook_concurrency: usize,
    /// E-mail deliveries in flight at once (the SMTP relay's own budget).
    #[serde(default = "default_email_concurrency")]
    pub email_concurrency: usize,
    /// Deliveries of one case through one channel kind (webhook, e-mail) in flight at once.
    #[serde(default = "default_delivery_cap_per_case")]
    pub delivery_cap_per_case: usize,
    /// Webhook deliveries to one destination (`host:port`) in flight at once.
    #[serde(default = "default_delivery_cap_per_destination")]
    pub delivery_cap_per_destination: usize,
    /// How many check-ins of each snitch are kept (and shown by
    /// `GET /v1/snitches/<token>/check_ins`): 1 to 10,000.
    #[serde(default = "default_check_in_history")]
    pub check_in_history: usize,
    /// How many bytes of a check-in's output (a POST body that is not a form) are kept:
    /// 0 to 1,048,576 (docs/rules.md#runs).
    #[serde(default = "default_ping_body_limit")]
    pub ping_body_limit: usize,
    /// How many due snitches the sweep claims and saves at a time: 1 to 100,000.
    #[serde(default = "default_sweep_batch")]
    pub sweep_batch: usize,
    /// Where check-ins by e-mail are received (SMTP), e.g. `0.0.0.0:25`; absent (the
    /// default): nowhere. Needs `check_in_email_domain` (docs/rules.md#e-mail-check-ins).
    pub email_listen: Option<SocketAddr>,
    /// The domain of check-in addresses, `<token>@<domain>`: a domain whose MX record
    /// points at `email_listen`.
    pub check_in_email_domain: Option<String>,
    /// The largest check-in e-mail, in bytes (advertised with `SIZE`): 1,024 to
    /// 67,108,864; default 4 MiB.
    #[serde(default = "default_email_max_bytes")]
    pub email_max_bytes: usize,
    /// How long the e-mail listener waits for each command, in seconds (a connection
    /// lasts ten times that at most).
    #[serde(default = "default_email_timeout_secs")]
    pub email_timeout_secs: u64,
    /// Messages (and refused recipients) one client address may send a minute.
    #[serde(default = "default_email_messages_per_minute")]
    pub email_messages_per_minute: u32,
    /// A PEM certificate chain: with `email_tls_key`, the listener offers STARTTLS.
    pub email_tls_cert: Option<PathBuf>,
    /// The PEM private key of `email_tls_cert`.
    pub email_tls_key: Option<PathBuf>,
    /// Where `GET /metrics` (Prometheus) is served, with `/healthz` and `/readyz`;
    /// absent: nowhere. Keep it to operators (e.g. `127.0.0.1:9090`).
    pub metrics_listen: Option<SocketAddr>,
    /// How logs are written: `pretty` (for people, the default) or `json` (one object a
    /// line).
    #[serde(default)]
    pub log_format: LogFormat,
    #[serde(default, rename = "case")]
    /// The `[[case]]` tables: cases made (or updated) at start, with keys and hooks.
    pub cases: Vec<CaseConfig>,
}

/// How the server writes its logs.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Pretty,
    /// One JSON object a line (timestamp, level, target, fields, message).
    Json,
}

/// The kinds of store the server can keep its data in.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StoreKind {
    /// In memory: everything is lost when the server stops.
    Memory,
    /// A SQLite file: `database_url = "sqlite://…"`, or `data_path`.
    Sqlite,
    /// PostgreSQL at `database_url`, shared by several servers.
    Postgres,
}

/// Where the server keeps its data, as decided by [`Config::store_location`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreLocation {
    /// The in-memory store: nothing is kept when the server stops.
    Memory,
    /// A SQLite database file.
    SqliteFile(PathBuf),
    /// A `sqlite:` URL.
    SqliteUrl(String),
    /// A `postgres:` URL.
    Postgres(String),
}

/// One `[[case]]` of the configuration.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct CaseConfig {
    /// The case id.
    pub name: String,
    #[serde(default)]
    /// The e-mail addresses alerted for the case's snitches.
    pub members: Vec<String>,
    #[serde(default = "default_max_snitches")]
    /// The most snitches the case may have.
    pub max_snitches: u32,
    #[serde(default = "default_true")]
    /// Whether `snitch.errored` alerts are sent.
    pub error_notices: bool,
    #[serde(default)]
    /// On hold: the API refuses every call; check-ins still count.
    pub on_hold: bool,
    /// Plain keys for development; hashed when loaded, never kept.
    #[serde(default)]
    pub api_keys: Vec<String>,
    #[serde(default)]
    /// Hook URLs stored for the case (needs the `webhooks` feature).
    pub webhooks: Vec<String>,
    /// Channels stored for the case, each as `/v1/channels` takes it:
    /// `{ kind = "slack", url = "…", events = ["missing"], tags = ["prod"] }`.
    #[serde(default)]
    pub channels: Vec<serde_json::Map<String, serde_json::Value>>,
}

impl CaseConfig {
    /// The case `name` with the defaults of a `[[case]]` that gives only its name.
    pub fn new(name: impl Into<String>) -> Self {
        CaseConfig {
            name: name.into(),
            members: Vec::new(),
            max_snitches: default_max_snitches(),
            error_notices: true,
            on_hold: false,
            api_keys: Vec::new(),
            webhooks: Vec::new(),
            channels: Vec::new(),
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}
fn default_check_in_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8081))
}
fn default_data_path() -> PathBuf {
    PathBuf::from("./snitch.db")
}
fn default_mail_from() -> String {
    "snitch@localhost".into()
}
fn default_rate() -> u32 {
    10
}
fn default_burst() -> u32 {
    60
}
fn default_auth_failures_per_minute() -> u32 {
    AuthFailureLimit::default().per_minute.get()
}
fn default_auth_failures_burst() -> u32 {
    AuthFailureLimit::default().burst.get()
}
fn default_max_connections() -> usize {
    crate::serve::DEFAULT_MAX_CONNECTIONS
}
fn default_header_timeout_ms() -> u64 {
    millis(crate::serve::DEFAULT_HEADER_TIMEOUT)
}
fn default_request_timeout_ms() -> u64 {
    millis(crate::serve::DEFAULT_REQUEST_TIMEOUT)
}
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
fn default_database_max_connections() -> u32 {
    16
}
fn default_retry_first_delay_ms() -> u64 {
    60_000
}
fn default_retry_max_delay_ms() -> u64 {
    3_600_000
}
fn default_retry_give_up_after_secs() -> u64 {
    86_400
}
fn default_outage_threshold_secs() -> u64 {
    snitch_core::liveness::DEFAULT_OUTAGE_THRESHOLD
        .num_seconds()
        .unsigned_abs()
}
fn default_webhook_concurrency() -> usize {
    DispatcherOptions::default().concurrency
}
fn default_email_concurrency() -> usize {
    DispatcherOptions::default().email_concurrency
}
fn default_delivery_cap_per_case() -> usize {
    DispatcherOptions::default().per_case_channel
}
fn default_delivery_cap_per_destination() -> usize {
    DispatcherOptions::default().per_destination
}
fn default_check_in_history() -> usize {
    snitch_core::snitch::CHECK_INS_KEPT
}
fn default_ping_body_limit() -> usize {
    snitch_core::runs::PING_BODY_LIMIT_DEFAULT
}
fn default_email_max_bytes() -> usize {
    4 * 1024 * 1024
}
fn default_email_timeout_secs() -> u64 {
    60
}
fn default_email_messages_per_minute() -> u32 {
    60
}
fn default_sweep_batch() -> usize {
    snitch_core::service::SWEEP_BATCH
}
fn default_max_snitches() -> u32 {
    Plan::default().max_snitches
}
fn default_true() -> bool {
    true
}

impl Default for Config {
    fn default() -> Self {
        Config::parse("", |_| None).unwrap_or_else(|e| unreachable!("defaults are valid: {e}"))
    }
}

/// The top-level keys that an environment variable `SNITCH_<KEY>` can set.
const ENV_KEYS: [&str; 40] = [
    "listen",
    "check_in_listen",
    "base_url",
    "check_in_base",
    "store",
    "data_path",
    "database_url",
    "database_max_connections",
    "smtp_url",
    "mail_from",
    "allow_private_webhooks",
    "rate_limit_per_second",
    "rate_limit_burst",
    "auth_failures_per_minute",
    "auth_failures_burst",
    "maintenance",
    "ui",
    "max_connections",
    "header_timeout_ms",
    "request_timeout_ms",
    "retry_first_delay_ms",
    "retry_max_delay_ms",
    "retry_give_up_after_secs",
    "outage_threshold_secs",
    "webhook_concurrency",
    "email_concurrency",
    "delivery_cap_per_case",
    "delivery_cap_per_destination",
    "check_in_history",
    "ping_body_limit",
    "sweep_batch",
    "metrics_listen",
    "log_format",
    "email_listen",
    "check_in_email_domain",
    "email_max_bytes",
    "email_timeout_secs",
    "email_messages_per_minute",
    "email_tls_cert",
    "email_tls_key",
];

impl Config {
    /// Reads the TOML text `toml_text`, then overrides its keys from `env` (called with
    /// variable names such as `SNITCH_LISTEN` or `DATABASE_URL`). Unknown keys are an error
    /// naming the key.
    pub fn parse(
        toml_text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ServerError> {
        let mut table: toml::Table =
            toml::from_str(toml_text).map_err(|e| ServerError::Config(e.to_string()))?;
        for key in ENV_KEYS {
            let var = format!("SNITCH_{}", key.to_ascii_uppercase());
            let value = env(&var).or_else(|| {
                (key == "database_url")
                    .then(|| env("DATABASE_URL"))
                    .flatten()
            });
            let Some(value) = value else { continue };
            let parsed = match key {
                "allow_private_webhooks" | "maintenance" | "ui" => value
                    .trim()
                    .parse::<bool>()
                    .map(toml::Value::Boolean)
                    .map_err(|_| format!("{var} must be true or false")),
                "rate_limit_per_second"
                | "rate_limit_burst"
                | "auth_failures_per_minute"
                | "auth_failures_burst"
                | "database_max_connections"
                | "max_connections"
                | "header_timeout_ms"
                | "request_timeout_ms"
                | "retry_first_delay_ms"
                | "retry_max_delay_ms"
                | "retry_give_up_after_secs"
                | "outage_threshold_secs"
                | "webhook_concurrency"
                | "email_concurrency"
                | "delivery_cap_per_case"
                | "delivery_cap_per_destination"
                | "check_in_history"
                | "ping_body_limit"
                | "email_max_bytes"
                | "email_timeout_secs"
                | "email_messages_per_minute"
                | "sweep_batch" => value
                    .trim()
                    .parse::<i64>()
                    .map(toml::Value::Integer)
                    .map_err(|_| format!("{var} must be a whole number")),
                _ => Ok(toml::Value::String(value)),
            };
            table.insert(key.to_owned(), parsed.map_err(ServerError::Config)?);
        }
        let config: Config = table
            .try_into()
            .map_err(|e: toml::de::Error| ServerError::Config(e.to_string()))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), ServerError> {
        let bad = |m: String| Err(ServerError::Config(m));
        if self.rate_limit_per_second == 0 || self.rate_limit_burst == 0 {
            return bad("rate_limit_per_second and rate_limit_burst must be at least 1".into());
        }
        if self.auth_failures_per_minute == 0 || self.auth_failures_burst == 0 {
            return bad(
                "auth_failures_per_minute and auth_failures_burst must be at least 1".into(),
            );
        }
        if self.max_connections == 0 {
            return bad("max_connections must be at least 1".into());
        }
        if self.header_timeout_ms == 0 || self.request_timeout_ms == 0 {
            return bad("header_timeout_ms and request_timeout_ms must be at least 1".into());
        }
        if self.database_max_connections == 0 {
            return bad("database_max_connections must be at least 1".into());
        }
        if self.webhook_concurrency == 0
            || self.email_concurrency == 0
            || self.delivery_cap_per_case == 0
            || self.delivery_cap_per_destination == 0
        {
            return bad(
                "webhook_concurrency, email_concurrency, delivery_cap_per_case and \
                 delivery_cap_per_destination must be at least 1"
                    .into(),
            );
        }
        if !(1..=snitch_core::service::MAX_CHECK_IN_HISTORY).contains(&self.check_in_history) {
            return bad(format!(
                "check_in_history must be from 1 to {}",
                snitch_core::service::MAX_CHECK_IN_HISTORY
            ));
        }
        if self.ping_body_limit > snitch_core::service::MAX_PING_BODY_LIMIT {
            return bad(format!(
                "ping_body_limit must be from 0 to {}",
                snitch_core::service::MAX_PING_BODY_LIMIT
            ));
        }
        if !(1..=100_000).contains(&self.sweep_batch) {
            return bad("sweep_batch must be from 1 to 100000".into());
        }
        self.check_email()?;
        self.store_location()?;
        self.check_features(cfg!(feature = "smtp"), cfg!(feature = "webhooks"))?;
        let mut names = std::collections::HashSet::new();
        for case in &self.cases {
            if !names.insert(case.name.as_str()) {
                return bad(format!("case {:?} is configured twice", case.name));
            }
        }
        Ok(())
    }

    /// The e-mail listener's settings: a domain that is one, limits in range, a
    /// certificate with its key.
    fn check_email(&self) -> Result<(), ServerError> {
        let bad = |m: &str| Err(ServerError::Config(m.to_owned()));
        if let Some(domain) = &self.check_in_email_domain {
            let domain = domain.trim().trim_end_matches('.');
            let label_ok = |l: &str| {
                !l.is_empty()
                    && l.len() <= 63
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            };
            if domain.len() > 253 || !domain.split('.').all(label_ok) {
                return bad(
                    "check_in_email_domain must be a domain name, e.g. checkin.example.com",
                );
            }
        }
        if self.email_listen.is_some() && self.check_in_email_domain.is_none() {
            return bad(
                "email_listen needs check_in_email_domain (the domain of check-in addresses)",
            );
        }
        if !(1024..=64 * 1024 * 1024).contains(&self.email_max_bytes) {
            return bad("email_max_bytes must be from 1024 to 67108864");
        }
        if self.email_timeout_secs == 0 || self.email_messages_per_minute == 0 {
            return bad("email_timeout_secs and email_messages_per_minute must be at least 1");
        }
        if self.email_tls_cert.is_some() != self.email_tls_key.is_some() {
            return bad("email_tls_cert and email_tls_key go together");
        }
        if self.email_listen.is_some() && !cfg!(feature = "email-check-ins") {
            return bad(
                "email_listen needs the `email-check-ins` feature, which this build of Snitch \
                 was compiled without",
            );
        }
        Ok(())
    }

    /// Refuses settings that need a part this build was compiled without, rather than
    /// dropping alerts: `smtp_url` needs the `smtp` feature, configured webhooks and
    /// `allow_private_webhooks` the `webhooks` feature.
    fn check_features(&self, smtp: bool, webhooks: bool) -> Result<(), ServerError> {
        let missing = |what: &str, feature: &str| {
            Err(ServerError::Config(format!(
                "{what} needs the `{feature}` feature, which this build of Snitch was compiled \
                 without"
            )))
        };
        if !smtp && self.smtp_url.is_some() {
            return missing("smtp_url", "smtp");
        }
        if !webhooks {
            if self.allow_private_webhooks {
                return missing("allow_private_webhooks", "webhooks");
            }
            if let Some(case) = self.cases.iter().find(|c| !c.webhooks.is_empty()) {
                return missing(&format!("case {:?}: webhooks", case.name), "webhooks");
            }
        }
        Ok(())
    }

    /// Where the data lives: `store` when set, else the scheme of `database_url`, else
    /// SQLite at `data_path`.
    pub fn store_location(&self) -> Result<StoreLocation, ServerError> {
        let bad = |m: &str| Err(ServerError::Config(m.to_owned()));
        let url = self.database_url.as_deref().map(str::trim);
        let scheme = url.map(|u| u.split_once(':').map_or("", |(scheme, _)| scheme));
        let is_sqlite = scheme == Some("sqlite");
        let is_postgres = matches!(scheme, Some("postgres" | "postgresql"));
        if url.is_some() && !is_sqlite && !is_postgres {
            // The URL may hold a password: name the scheme only.
            return bad("database_url must start with postgres://, postgresql:// or sqlite://");
        }
        match (self.store, url) {
            (Some(StoreKind::Memory), _) => Ok(StoreLocation::Memory),
            (Some(StoreKind::Postgres), Some(u)) if is_postgres => {
                Ok(StoreLocation::Postgres(u.to_owned()))
            }
            (Some(StoreKind::Postgres), _) => {
                bad("store = \"postgres\" needs a postgres:// database_url")
            }
            (Some(StoreKind::Sqlite) | None, Some(u)) if is_sqlite => {
                Ok(StoreLocation::SqliteUrl(u.to_owned()))
            }
            (Some(StoreKind::Sqlite), Some(_)) => {
                bad("store = \"sqlite\" with a database_url that is not sqlite://")
            }
            (None, Some(u)) => Ok(StoreLocation::Postgres(u.to_owned())),
            (Some(StoreKind::Sqlite) | None, None) => {
                if self.data_path.as_os_str().is_empty() {
                    return bad("data_path must not be empty");
                }
                Ok(StoreLocation::SqliteFile(self.data_path.clone()))
            }
        }
    }

    /// How long a channel's test waits for its vendor: the default deadline, or two
    /// thirds of the request timeout when that is shorter, so the test answers before
    /// the 408.
    pub fn channel_test_deadline(&self) -> Duration {
        snitch_notify::channels::CHANNEL_TEST_DEADLINE.min(self.request_timeout() * 2 / 3)
    }

    /// How the dispatcher shares its delivery slots (docs/rules.md#delivery-isolation).
    pub fn dispatcher_options(&self) -> DispatcherOptions {
        DispatcherOptions::default()
            .with_retry(self.retry_policy())
            .with_concurrency(self.webhook_concurrency)
            .with_email_concurrency(self.email_concurrency)
            .with_per_case_channel(self.delivery_cap_per_case)
            .with_per_destination(self.delivery_cap_per_destination)
    }

    /// A [`SnitchRuntime`] runtime over `storage` with these settings (clock: the system's).
    pub fn snitch_builder(&self, storage: Arc<dyn Storage>) -> SnitchBuilder {
        let nonzero = |n: u32| NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        let builder = SnitchRuntime::builder(storage);
        #[cfg(feature = "webhooks")]
        let builder = builder
            .webhooks(WebhookOptions::default().with_allow_private(self.allow_private_webhooks));
        let builder = builder
            .check_in_base(self.check_in_base())
            .rate_limit(RateLimit::new(
                nonzero(self.rate_limit_per_second),
                nonzero(self.rate_limit_burst),
            ))
            .auth_failures(AuthFailureLimit::new(
                nonzero(self.auth_failures_per_minute),
                nonzero(self.auth_failures_burst),
            ))
            .maintenance(self.maintenance)
            .dispatcher(self.dispatcher_options())
            .outage_threshold(self.outage_threshold())
            .check_in_history(self.check_in_history)
            .ping_body_limit(self.ping_body_limit)
            .sweep_batch(self.sweep_batch)
            .dashboard_url(self.base_url.clone())
            .channel_test_deadline(self.channel_test_deadline())
            // Addresses are shown only where a listener receives them.
            .check_in_email_domain(
                self.email_listen
                    .and(self.check_in_email_domain.clone())
                    .filter(|_| cfg!(feature = "email-check-ins")),
            );
        #[cfg(feature = "smtp")]
        let builder = match &self.smtp_url {
            Some(url) => builder.smtp(url, &self.mail_from),
            None => builder,
        };
        #[cfg(feature = "ui")]
        let builder = builder.ui(snitch_http::ui::UiConfig::default()
            .with_secure_cookies(self.base_url().starts_with("https://")));
        builder
    }

    /// The e-mail listener's options, with its TLS files read; `None` when no
    /// `check_in_email_domain` is set.
    #[cfg(feature = "email-check-ins")]
    pub fn email_options(&self) -> Result<Option<snitch_email_in::EmailOptions>, ServerError> {
        use snitch_email_in::{tls_config_from_pem, EmailOptions};
        let Some(domain) = &self.check_in_email_domain else {
            return Ok(None);
        };
        let per_minute = NonZeroU32::new(self.email_messages_per_minute).unwrap_or(NonZeroU32::MIN);
        let options = EmailOptions::new(domain)
            .with_max_message_bytes(self.email_max_bytes)
            .with_command_timeout(Duration::from_secs(self.email_timeout_secs))
            .with_messages_per_minute(per_minute);
        Ok(Some(match (&self.email_tls_cert, &self.email_tls_key) {
            (Some(cert), Some(key)) => {
                options.with_tls(tls_config_from_pem(cert, key).map_err(ServerError::Config)?)
            }
            _ => options,
        }))
    }

    /// How long no server may be alive before the gap is an outage.
    pub fn outage_threshold(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.outage_threshold_secs)
    }

    /// The backoff of failed deliveries.
    pub fn retry_policy(&self) -> RetryPolicy {
        let ms = |v: u64| chrono::Duration::milliseconds(i64::try_from(v).unwrap_or(i64::MAX));
        RetryPolicy::new(
            ms(self.retry_first_delay_ms),
            ms(self.retry_max_delay_ms),
            ms(self.retry_give_up_after_secs.saturating_mul(1000)),
        )
    }

    /// The limits of each listener.
    pub fn serve_options(&self) -> ServeOptions {
        ServeOptions::default()
            .with_header_timeout(Duration::from_millis(self.header_timeout_ms))
            .with_max_connections(self.max_connections)
    }

    /// How long a whole request may take before the 408.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    /// Where the API is reached from outside.
    pub fn base_url(&self) -> String {
        self.base_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.listen))
    }

    /// Where check-ins are sent from outside.
    pub fn check_in_base(&self) -> String {
        self.check_in_base
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.check_in_listen))
    }
}

/// Env-free convenience for tests and embedding: TOML text only.
pub fn config_from_toml(text: &str) -> Result<Config, ServerError> {
    Config::parse(text, |_| None)
}

/// The environment of this process, for [`Config::parse`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A map-backed environment, for [`Config::parse`] in tests.
pub fn env_from(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documented_ones() {
        let c = Config::default();
        assert_eq!(c.listen, default_listen());
        assert_eq!(c.base_url(), "http://127.0.0.1:8080");
        assert_eq!(c.check_in_base(), "http://127.0.0.1:8081");
        assert_eq!((c.rate_limit_per_second, c.rate_limit_burst), (10, 60));
        assert!(c.cases.is_empty() && !c.maintenance && c.database_url.is_none());
        assert_eq!(
            c.store_location().expect("valid"),
            StoreLocation::SqliteFile(PathBuf::from("./snitch.db"))
        );
        assert_eq!(c.max_connections, 10_000);
        assert_eq!(
            (c.auth_failures_per_minute, c.auth_failures_burst),
            (10, 20)
        );
        assert_eq!(c.serve_options().header_timeout, Duration::from_secs(10));
        assert_eq!(c.request_timeout(), Duration::from_secs(30));
    }

    #[test]
    fn the_documented_file_parses() {
        let text = r#"
listen = "127.0.0.1:9080"
check_in_listen = "127.0.0.1:9081"
base_url = "https://snitch.acme.test"
check_in_base = "https://nosnch.acme.test"
smtp_url = "smtp://127.0.0.1:2525"
mail_from = "snitch@example.com"
allow_private_webhooks = false
rate_limit_per_second = 10
rate_limit_burst = 60
maintenance = false

[[case]]
name = "acme"
members = ["ops@acme.test"]
max_snitches = 100
error_notices = true
on_hold = false
api_keys = ["0123456789abcdef0123456789abcdef"]
webhooks = ["https://hooks.acme.test/snitch"]
"#;
        let c = config_from_toml(text).expect("valid");
        assert_eq!(c.check_in_base(), "https://nosnch.acme.test");
        assert_eq!(c.cases.len(), 1);
        assert_eq!(c.cases[0].members, ["ops@acme.test"]);
    }

    #[test]
    fn operator_settings_default_parse_and_are_checked() {
        let c = Config::default();
        assert_eq!(c.check_in_history, 100);
        assert_eq!(c.metrics_listen, None);
        assert_eq!(c.log_format, LogFormat::Pretty);
        let c = config_from_toml(
            "check_in_history = 500\nmetrics_listen = \"127.0.0.1:9090\"\nlog_format = \"json\"",
        )
        .expect("valid");
        assert_eq!(c.check_in_history, 500);
        assert_eq!(
            c.metrics_listen,
            Some(SocketAddr::from(([127, 0, 0, 1], 9090)))
        );
        assert_eq!(c.log_format, LogFormat::Json);
        let env = env_from(&[
            ("SNITCH_CHECK_IN_HISTORY", "7"),
            ("SNITCH_LOG_FORMAT", "json"),
            ("SNITCH_METRICS_LISTEN", "127.0.0.1:0"),
        ]);
        let c = Config::parse("", env).expect("valid");
        assert_eq!((c.check_in_history, c.log_format), (7, LogFormat::Json));
        assert_eq!(c.sweep_batch, snitch_core::service::SWEEP_BATCH);
        assert_eq!(
            config_from_toml("sweep_batch = 4")
                .expect("valid")
                .sweep_batch,
            4
        );
        assert!(c.metrics_listen.is_some());
        for bad in [
            "check_in_history = 0",
            "check_in_history = 10001",
            "check_in_history = -1",
            "sweep_batch = 0",
            "sweep_batch = 100001",
            "log_format = \"xml\"",
            "metrics_listen = \"somewhere\"",
        ] {
            assert!(config_from_toml(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn unknown_keys_are_named_in_the_error() {
        let err = config_from_toml("lisen = \"127.0.0.1:1\"").expect_err("typo");
        assert!(err.to_string().contains("lisen"), "{err}");
        let err = config_from_toml("[[case]]\nname = \"a\"\nmax_snitchs = 3\n").expect_err("typo");
        assert!(err.to_string().contains("max_snitchs"), "{err}");
    }

    #[test]
    fn environment_variables_override_the_file() {
        let env = env_from(&[
            ("SNITCH_LISTEN", "127.0.0.1:7000"),
            ("SNITCH_MAINTENANCE", "true"),
            ("SNITCH_RATE_LIMIT_BURST", "5"),
            ("SNITCH_MAX_CONNECTIONS", "300"),
            ("DATABASE_URL", "postgres://localhost/snitch"),
        ]);
        let c = Config::parse("listen = \"127.0.0.1:1\"", env).expect("valid");
        assert_eq!(c.listen, SocketAddr::from(([127, 0, 0, 1], 7000)));
        assert!(c.maintenance);
        assert_eq!(c.rate_limit_burst, 5);
        assert_eq!(c.max_connections, 300);
        assert_eq!(
            c.database_url.as_deref(),
            Some("postgres://localhost/snitch")
        );
        let err =
            Config::parse("", env_from(&[("SNITCH_MAINTENANCE", "yes")])).expect_err("not a bool");
        assert!(err.to_string().contains("SNITCH_MAINTENANCE"), "{err}");
    }

    #[test]
    fn the_store_is_picked_by_store_then_database_url_then_data_path() {
        let location = |text: &str| config_from_toml(text).map(|c| c.store_location());
        let ok = |text: &str| location(text).expect("valid").expect("valid");
        assert_eq!(ok("store = \"memory\""), StoreLocation::Memory);
        assert_eq!(
            ok("store = \"memory\"\ndatabase_url = \"postgres://x/y\""),
            StoreLocation::Memory
        );
        assert_eq!(
            ok("data_path = \"/var/lib/snitch/data.db\""),
            StoreLocation::SqliteFile(PathBuf::from("/var/lib/snitch/data.db"))
        );
        assert_eq!(
            ok("database_url = \"sqlite:///tmp/s.db\""),
            StoreLocation::SqliteUrl("sqlite:///tmp/s.db".into())
        );
        assert_eq!(
            ok("database_url = \"postgres://u@h/db\""),
            StoreLocation::Postgres("postgres://u@h/db".into())
        );
        assert_eq!(
            ok("store = \"postgres\"\ndatabase_url = \"postgresql://u@h/db\""),
            StoreLocation::Postgres("postgresql://u@h/db".into())
        );
        for bad in [
            "store = \"postgres\"",
            "store = \"sqlite\"\ndatabase_url = \"postgres://u@h/db\"",
            "database_url = \"mysql://u:secret@h/db\"",
            "store = \"redis\"",
            "data_path = \"\"",
        ] {
            let err = config_from_toml(bad).expect_err(bad);
            assert!(!err.to_string().contains("secret"), "{err}");
        }
        let env = env_from(&[
            ("SNITCH_STORE", "sqlite"),
            ("SNITCH_DATA_PATH", "/data/s.db"),
        ]);
        assert_eq!(
            Config::parse("", env)
                .expect("valid")
                .store_location()
                .expect("valid"),
            StoreLocation::SqliteFile(PathBuf::from("/data/s.db"))
        );
    }

    #[test]
    fn delivery_caps_default_and_can_be_set() {
        let o = Config::default().dispatcher_options();
        assert_eq!(
            (
                o.concurrency,
                o.email_concurrency,
                o.per_case_channel,
                o.per_destination
            ),
            (256, 16, 8, 16)
        );
        let text = "webhook_concurrency = 32\nemail_concurrency = 4\n\
                    delivery_cap_per_case = 2\ndelivery_cap_per_destination = 3";
        let env = env_from(&[("SNITCH_DELIVERY_CAP_PER_CASE", "5")]);
        let o = Config::parse(text, env)
            .expect("valid")
            .dispatcher_options();
        assert_eq!(
            (
                o.concurrency,
                o.email_concurrency,
                o.per_case_channel,
                o.per_destination
            ),
            (32, 4, 5, 3)
        );
        for zero in [
            "webhook_concurrency = 0",
            "email_concurrency = 0",
            "delivery_cap_per_case = 0",
            "delivery_cap_per_destination = 0",
        ] {
            assert!(config_from_toml(zero).is_err(), "{zero}");
        }
    }

    #[test]
    fn settings_for_parts_compiled_out_are_refused_not_dropped() {
        let smtp = config_from_toml("smtp_url = \"smtp://127.0.0.1:2525\"").expect("valid");
        let err = smtp.check_features(false, true).expect_err("no smtp");
        assert!(err.to_string().contains("`smtp` feature"), "{err}");
        assert!(smtp.check_features(true, false).is_ok());

        let hooks =
            config_from_toml("[[case]]\nname = \"acme\"\nwebhooks = [\"https://h.test/x\"]")
                .expect("valid");
        let err = hooks.check_features(true, false).expect_err("no webhooks");
        assert!(err.to_string().contains("\"acme\": webhooks"), "{err}");
        assert!(err.to_string().contains("`webhooks` feature"), "{err}");
        let private = config_from_toml("allow_private_webhooks = true").expect("valid");
        assert!(private.check_features(true, false).is_err());
        // Without either, a configuration that asks for neither is fine.
        assert!(Config::default().check_features(false, false).is_ok());
    }

    #[test]
    fn zero_rates_and_duplicate_cases_are_refused() {
        assert!(config_from_toml("rate_limit_burst = 0").is_err());
        assert!(config_from_toml("max_connections = 0").is_err());
        assert!(config_from_toml("header_timeout_ms = 0").is_err());
        assert!(config_from_toml("[[case]]\nname = \"a\"\n[[case]]\nname = \"a\"\n").is_err());
    }
}
