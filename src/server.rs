//! A runnable Snitch server: configuration, store selection, listeners and graceful
//! shutdown over the [`SnitchRuntime`] runtime (which runs the scheduler, the dispatcher and the
//! key refresh). `examples/server.rs` is a thin command line over [`launch`]; tests call
//! [`launch`] with listeners on port 0.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use snitch_core::{
    AlertEmails, Case, CaseId, Clock, Plan, RetryPolicy, SnitchService, Storage, SystemClock,
    WebhookUrl,
};
use snitch_http::outbound::dispatcher::DispatcherOptions;
use snitch_http::outbound::webhook::WebhookOptions;
use snitch_http::{ApiError, ApiKeys, ApiState, AuthFailureLimit, RateLimit};
use snitch_store_memory::MemoryStorage;
use snitch_store_postgres::PgStorage;
use snitch_store_sqlite::SqliteStorage;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tower_http::trace::TraceLayer;

use crate::runtime::{BuildError, SnitchBuilder, SnitchRuntime};
use crate::serve::{
    fitting_max_connections, raise_fd_limit, serve, with_request_timeout, ServeOptions,
};

pub use crate::runtime::MAX_SWEEP_SLEEP;

/// The server's settings: a TOML file, each key overridable by `SNITCH_<KEY>`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    #[serde(default = "default_check_in_listen")]
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
    pub mail_from: String,
    #[serde(default)]
    pub allow_private_webhooks: bool,
    #[serde(default = "default_rate")]
    pub rate_limit_per_second: u32,
    #[serde(default = "default_burst")]
    pub rate_limit_burst: u32,
    /// Failed authentications allowed per client address: a burst, then this many a
    /// minute; beyond that the address gets 429 for a while, correct keys included.
    #[serde(default = "default_auth_failures_per_minute")]
    pub auth_failures_per_minute: u32,
    #[serde(default = "default_auth_failures_burst")]
    pub auth_failures_burst: u32,
    #[serde(default)]
    pub maintenance: bool,
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
    /// it are deferred, not announced (behaviour.md section 8).
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
    #[serde(default, rename = "case")]
    pub cases: Vec<CaseConfig>,
}

/// The kinds of store the server can keep its data in.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
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
pub enum StoreLocation {
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
pub struct CaseConfig {
    pub name: String,
    #[serde(default)]
    pub members: Vec<String>,
    #[serde(default = "default_max_snitches")]
    pub max_snitches: u32,
    #[serde(default = "default_true")]
    pub error_notices: bool,
    #[serde(default)]
    pub on_hold: bool,
    /// Plain keys for development; hashed when loaded, never kept.
    #[serde(default)]
    pub api_keys: Vec<String>,
    #[serde(default)]
    pub webhooks: Vec<String>,
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
const ENV_KEYS: [&str; 27] = [
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
];

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("storage failed at start-up: {0}")]
    Storage(#[from] snitch_core::StorageError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl From<BuildError> for ServerError {
    fn from(e: BuildError) -> Self {
        match e {
            BuildError::Storage(e) => ServerError::Storage(e),
            BuildError::Notifier(m) => ServerError::Config(m),
            BuildError::Liveness(e) => ServerError::Config(format!("cannot record liveness: {e}")),
        }
    }
}

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
                "allow_private_webhooks" | "maintenance" => value
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
                | "delivery_cap_per_destination" => value
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
        self.store_location()?;
        let mut names = std::collections::HashSet::new();
        for case in &self.cases {
            if !names.insert(case.name.as_str()) {
                return bad(format!("case {:?} is configured twice", case.name));
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

    /// How the dispatcher shares its delivery slots (behaviour.md section 8).
    pub fn dispatcher_options(&self) -> DispatcherOptions {
        DispatcherOptions {
            retry: self.retry_policy(),
            concurrency: self.webhook_concurrency,
            email_concurrency: self.email_concurrency,
            per_case_channel: self.delivery_cap_per_case,
            per_destination: self.delivery_cap_per_destination,
            ..DispatcherOptions::default()
        }
    }

    /// A [`SnitchRuntime`] runtime over `storage` with these settings (clock: the system's).
    pub fn snitch_builder(&self, storage: Arc<dyn Storage>) -> SnitchBuilder {
        let nonzero = |n: u32| NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        let mut builder = SnitchRuntime::builder(storage)
            .webhooks(WebhookOptions {
                allow_private: self.allow_private_webhooks,
                ..WebhookOptions::default()
            })
            .check_in_base(self.check_in_base())
            .rate_limit(RateLimit {
                per_second: nonzero(self.rate_limit_per_second),
                burst: nonzero(self.rate_limit_burst),
            })
            .auth_failures(AuthFailureLimit {
                per_minute: nonzero(self.auth_failures_per_minute),
                burst: nonzero(self.auth_failures_burst),
            })
            .maintenance(self.maintenance)
            .dispatcher(self.dispatcher_options())
            .outage_threshold(self.outage_threshold());
        if let Some(url) = &self.smtp_url {
            builder = builder.smtp(url, &self.mail_from);
        }
        builder
    }

    /// How long no server may be alive before the gap is an outage.
    pub fn outage_threshold(&self) -> chrono::Duration {
        i64::try_from(self.outage_threshold_secs)
            .ok()
            .and_then(chrono::Duration::try_seconds)
            .unwrap_or(chrono::Duration::MAX)
    }

    /// The backoff of failed deliveries.
    pub fn retry_policy(&self) -> RetryPolicy {
        let ms = |v: u64| chrono::Duration::milliseconds(i64::try_from(v).unwrap_or(i64::MAX));
        RetryPolicy {
            first_delay: ms(self.retry_first_delay_ms),
            max_delay: ms(self.retry_max_delay_ms),
            give_up_after: ms(self.retry_give_up_after_secs.saturating_mul(1000)),
        }
    }

    /// The limits of each listener.
    pub fn serve_options(&self) -> ServeOptions {
        ServeOptions {
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            max_connections: self.max_connections,
        }
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    pub fn base_url(&self) -> String {
        self.base_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.listen))
    }

    pub fn check_in_base(&self) -> String {
        self.check_in_base
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.check_in_listen))
    }
}

/// A running server.
#[derive(Debug)]
pub struct Running {
    pub api_addr: SocketAddr,
    pub check_in_addr: SocketAddr,
    /// The key of the `demo` case made when no case is configured: shown once.
    pub demo_key: Option<String>,
    pub service: SnitchService,
    pub api: ApiState,
    task: JoinHandle<Result<(), std::io::Error>>,
}

impl Running {
    /// Waits until the server has shut down and every accepted request was answered.
    pub async fn wait(self) -> Result<(), ServerError> {
        match self.task.await {
            Ok(result) => Ok(result?),
            Err(join) => Err(ServerError::Io(std::io::Error::other(join))),
        }
    }
}

/// Starts the API on `api` and check-ins on `check_in`, with the deadline scheduler, until
/// `shutdown` completes; then stops accepting, finishes in-flight requests and returns.
pub async fn launch(
    config: Config,
    api: TcpListener,
    check_in: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, ServerError> {
    launch_with_clock(config, api, check_in, Arc::new(SystemClock), shutdown).await
}

/// The router with `TraceLayer`'s request spans, when the subscriber installed now wants
/// them (`RUST_LOG=tower_http=debug`): otherwise the layer would cost every request its
/// time and record nothing (failures are logged by the HTTP crate itself).
fn traced(router: axum::Router) -> axum::Router {
    if tracing::enabled!(target: "tower_http::trace", tracing::Level::DEBUG) {
        router.layer(TraceLayer::new_for_http())
    } else {
        router
    }
}

/// [`launch`] with a chosen clock (tests use a [`snitch_core::ManualClock`]).
pub async fn launch_with_clock(
    config: Config,
    api: TcpListener,
    check_in: TcpListener,
    clock: Arc<dyn Clock>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, ServerError> {
    let storage = open_storage(&config).await?;
    let snitch = config.snitch_builder(storage).clock(clock).build().await?;
    let demo_key = match load_cases(&config, snitch.service(), snitch.keys()).await {
        Ok(demo_key) => demo_key,
        Err(e) => {
            snitch.shutdown().await;
            return Err(e);
        }
    };
    if let Err(e) = snitch.keys().refresh().await {
        snitch.shutdown().await;
        return Err(e.into());
    }

    let api_app = traced(with_request_timeout(
        snitch.api_router(),
        config.request_timeout(),
        || ApiError::request_timeout().into_response(),
    ));
    let check_in_app = traced(with_request_timeout(
        snitch.check_in_router(),
        config.request_timeout(),
        request_timeout_text,
    ));

    let api_addr = api.local_addr()?;
    let check_in_addr = check_in.local_addr()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };

    let mut options = config.serve_options();
    let fd_limit = raise_fd_limit();
    options.max_connections = fitting_max_connections(options.max_connections, 2, fd_limit);
    if options.max_connections < config.max_connections {
        tracing::warn!(
            configured = config.max_connections,
            used = options.max_connections,
            fd_limit,
            "max_connections lowered to fit the limit of open files"
        );
    }
    let api_server = tokio::spawn(serve(api, api_app, options, stopped(stop_rx.clone())));
    let check_in_server = tokio::spawn(serve(check_in, check_in_app, options, stopped(stop_rx)));

    let service = snitch.service().clone();
    let api_state = snitch.api_state().clone();
    let task = tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down: finishing requests in flight");
        let _ = stop_tx.send(true);
        let results = [api_server.await, check_in_server.await];
        // The scheduler, the dispatcher (deliveries in flight are recorded) and the key
        // refresh stop; the clean stop is recorded.
        snitch.shutdown().await;
        for result in results {
            result.map_err(std::io::Error::other)??;
        }
        tracing::info!("stopped");
        Ok(())
    });

    Ok(Running {
        api_addr,
        check_in_addr,
        demo_key,
        service,
        api: api_state,
        task,
    })
}

/// The check-in listener's 408: text, like its other answers.
fn request_timeout_text() -> Response {
    (
        StatusCode::REQUEST_TIMEOUT,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "The request was not complete in time.\n",
    )
        .into_response()
}

/// The store of [`Config::store_location`], opened and migrated.
pub async fn open_storage(config: &Config) -> Result<Arc<dyn Storage>, ServerError> {
    Ok(match config.store_location()? {
        StoreLocation::Memory => {
            tracing::info!("using the in-memory store: data is lost when the server stops");
            Arc::new(MemoryStorage::new())
        }
        StoreLocation::Postgres(url) => {
            Arc::new(PgStorage::new(open_postgres(config, &url).await?))
        }
        location => Arc::new(SqliteStorage::new(open_sqlite(config, &location).await?)),
    })
}

/// A pool on PostgreSQL at `url`, migrated.
pub async fn open_postgres(config: &Config, url: &str) -> Result<sqlx::PgPool, ServerError> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(config.database_max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect(url)
        .await
        // The URL may hold a password: name the failure, not the URL.
        .map_err(|e| ServerError::Config(format!("cannot connect to database_url: {e}")))?;
    snitch_store_postgres::MIGRATOR
        .run(&pool)
        .await
        .map_err(|e| ServerError::Config(format!("cannot migrate the database: {e}")))?;
    tracing::info!("using PostgreSQL storage");
    Ok(pool)
}

/// A pool on the SQLite database of `location` (a file, created with its directory if
/// missing, or a `sqlite:` URL), migrated.
pub async fn open_sqlite(
    config: &Config,
    location: &StoreLocation,
) -> Result<sqlx::SqlitePool, ServerError> {
    let connections = config.database_max_connections;
    let pool = match location {
        StoreLocation::SqliteFile(path) => {
            create_parent_dir(path)?;
            snitch_store_sqlite::connect(path, connections)
                .await
                .map_err(|e| ServerError::Config(format!("cannot open {}: {e}", path.display())))?
        }
        StoreLocation::SqliteUrl(url) => {
            snitch_store_sqlite::connect_url(url, connections)
                .await
                .map_err(|e| ServerError::Config(format!("cannot open database_url: {e}")))?
        }
        other => {
            return Err(ServerError::Config(format!(
                "not a SQLite location: {other:?}"
            )))
        }
    };
    snitch_store_sqlite::MIGRATOR
        .run(&pool)
        .await
        .map_err(|e| ServerError::Config(format!("cannot migrate the database: {e}")))?;
    match location {
        StoreLocation::SqliteFile(path) => {
            tracing::info!(path = %path.display(), "using SQLite storage");
        }
        _ => tracing::info!("using SQLite storage at database_url"),
    }
    Ok(pool)
}

/// Creates the directory a database file goes in, if missing.
fn create_parent_dir(path: &Path) -> Result<(), ServerError> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir).map_err(|e| {
            ServerError::Config(format!(
                "cannot create the directory {}: {e}",
                dir.display()
            ))
        }),
        _ => Ok(()),
    }
}

/// Stores the configured cases, their keys (once) and hooks; with none configured and none
/// stored, makes a `demo` case with a key on the first start and returns that key (`None`
/// on later starts, or when the admin commands made cases).
async fn load_cases(
    config: &Config,
    service: &SnitchService,
    keys: &ApiKeys,
) -> Result<Option<String>, ServerError> {
    let invalid = |case: &str, what: String| ServerError::Config(format!("case {case:?}: {what}"));
    if config.cases.is_empty() {
        // Made once, on the first start, and kept: a later start finds it with its key.
        let id = CaseId::parse("demo").map_err(|v| invalid("demo", v.message))?;
        let storage = service.storage();
        let stored = storage.cases().await?;
        let demo_ready = stored.iter().any(|c| c.id == id)
            && !storage.api_keys(Some(id.clone())).await?.is_empty();
        // Cases made with the admin commands are the store's own: no demo beside them.
        if demo_ready || stored.iter().any(|c| c.id != id) {
            return Ok(None);
        }
        storage.upsert_case(&Case::new(id.clone())).await?;
        return Ok(Some(keys.create(&id, "demo").await?.key));
    }
    for c in &config.cases {
        let id = CaseId::parse(&c.name).map_err(|v| invalid(&c.name, v.message))?;
        let members = AlertEmails::parse(&c.members)
            .map_err(|v| invalid(&c.name, format!("members: {}", v.message)))?;
        let case = Case {
            id: id.clone(),
            members: members.as_slice().to_vec(),
            plan: Plan {
                max_snitches: c.max_snitches,
                error_notices: c.error_notices,
            },
            on_hold: c.on_hold,
        };
        service.storage().upsert_case(&case).await?;
        for key in &c.api_keys {
            keys.ensure_plain(key, &id, "configuration")
                .await
                .map_err(|e| invalid(&c.name, e))?;
        }
        // Hooks go through the service so they are validated like API input; a case on
        // hold still gets its configured hooks, and one already stored is kept.
        let mut active = case.clone();
        active.on_hold = false;
        let stored: Vec<String> = service
            .webhooks(&active)
            .await
            .map_err(|e| invalid(&c.name, e.to_string()))?
            .into_iter()
            .map(|h| h.url.to_string())
            .collect();
        for url in &c.webhooks {
            let parsed = WebhookUrl::parse(url)
                .map_err(|v| invalid(&c.name, format!("webhook {url:?}: {}", v.message)))?;
            if stored.contains(&parsed.to_string()) {
                continue;
            }
            service
                .create_webhook(&active, url, None)
                .await
                .map_err(|e| invalid(&c.name, format!("webhook {url:?}: {e}")))?;
        }
    }
    Ok(None)
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
    fn zero_rates_and_duplicate_cases_are_refused() {
        assert!(config_from_toml("rate_limit_burst = 0").is_err());
        assert!(config_from_toml("max_connections = 0").is_err());
        assert!(config_from_toml("header_timeout_ms = 0").is_err());
        assert!(config_from_toml("[[case]]\nname = \"a\"\n[[case]]\nname = \"a\"\n").is_err());
    }
}
