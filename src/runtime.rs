//! The Snitch runtime: everything a host application needs to run Snitch inside its own
//! process, on its own tokio runtime and its own store.
//!
//! [`SnitchRuntime::builder`] takes a [`Storage`] (migrated: see the stores' `MIGRATOR`s) and
//! optional settings; [`SnitchBuilder::build`] records that this server is alive, loads
//! the API keys and starts the background work on the current tokio runtime:
//!
//! - the deadline scheduler (sweeps due snitches, keeps this server's heartbeat);
//! - the dispatcher (sends the outbox through the webhook and e-mail notifiers);
//! - the API-key refresh (keys revoked or made elsewhere take effect within a second).
//!
//! The returned [`SnitchRuntime`] hands out the two axum routers (mount them anywhere, e.g.
//! `Router::new().nest("/monitor", snitch.api_router())`) and stops the background work
//! with [`SnitchRuntime::shutdown`], which records the clean stop. [`crate::server::launch`] is
//! this runtime plus configuration and listeners.
//!
//! ```
//! use std::sync::Arc;
//! use snitch::store::memory::MemoryStorage;
//! use snitch::SnitchRuntime;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let snitch = SnitchRuntime::builder(Arc::new(MemoryStorage::new()))
//!     .check_in_base("https://example.com/monitor/check-in")
//!     .build()
//!     .await
//!     .expect("the store answers");
//! let app: axum::Router = axum::Router::new()
//!     .nest("/monitor/api", snitch.api_router())
//!     .nest("/monitor/check-in", snitch.check_in_router());
//! # drop(app);
//! // … serve `app`; when the host stops:
//! snitch.shutdown().await;
//! # });
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use snitch_core::{
    Clock, Delivery, Notifier, NotifyError, ServiceError, SnitchService, Storage, SystemClock,
    Timestamp,
};
use snitch_http::{
    api_router, check_in_router_with_metrics, ApiConfig, ApiKeys, ApiState, AuthFailureLimit,
    CheckInService, Metrics, RateLimit,
};
use snitch_http::{
    health_router, metrics_router, Health, MetricsState, SweepWatch, SWEEP_STALLED_AFTER,
};
use snitch_notify::dispatcher::{Dispatcher, DispatcherOptions};
use snitch_notify::email::LogEmailNotifier;
#[cfg(feature = "smtp")]
use snitch_notify::email::SmtpEmailNotifier;
#[cfg(feature = "webhooks")]
use snitch_notify::webhook::{WebhookNotifier, WebhookOptions};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// The longest the scheduler sleeps between sweeps: a missed deadline is noticed within
/// this time even if the store's earliest deadline moved meanwhile.
pub const MAX_SWEEP_SLEEP: Duration = Duration::from_secs(1);

/// Why [`SnitchBuilder::build`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// A notifier could not be built from its settings (SMTP URL, sender, HTTP client).
    #[error("invalid notifier settings: {0}")]
    Notifier(String),
    /// The store failed while recording liveness or loading the API keys.
    #[error("storage failed at start-up: {0}")]
    Storage(#[from] snitch_core::StorageError),
    /// This server's liveness could not be recorded.
    #[error("cannot record liveness: {0}")]
    Liveness(ServiceError),
}

/// How alert e-mails are sent.
enum EmailChoice {
    /// Written to the log (`tracing`), for development.
    Log,
    #[cfg(feature = "smtp")]
    Smtp {
        url: String,
        from: String,
    },
    Custom(Arc<dyn Notifier>),
}

/// How webhooks are sent.
enum WebhookChoice {
    #[cfg(feature = "webhooks")]
    Builtin(WebhookOptions),
    /// No built-in notifier (feature `webhooks` off) and none given: each delivery fails
    /// at once, recorded with a detail that says why.
    #[cfg(not(feature = "webhooks"))]
    Missing,
    Custom(Arc<dyn Notifier>),
}

/// Settings of a [`SnitchRuntime`] runtime; made by [`SnitchRuntime::builder`].
#[must_use = "a builder does nothing until `build().await`"]
pub struct SnitchBuilder {
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    webhooks: WebhookChoice,
    email: EmailChoice,
    check_in_base: String,
    rate_limit: RateLimit,
    auth_failures: AuthFailureLimit,
    maintenance: bool,
    dispatcher: DispatcherOptions,
    outage_threshold: chrono::Duration,
    key_refresh_every: Duration,
    check_in_history: usize,
    ping_body_limit: usize,
    sweep_batch: usize,
    metrics: Option<Arc<Metrics>>,
    dashboard_url: Option<String>,
    channel_test_deadline: Option<Duration>,
    check_in_email_domain: Option<String>,
    #[cfg(feature = "ui")]
    ui: snitch_http::ui::UiConfig,
}

impl std::fmt::Debug for SnitchBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let webhooks: String = match &self.webhooks {
            #[cfg(feature = "webhooks")]
            WebhookChoice::Builtin(options) => format!("{options:?}"),
            #[cfg(not(feature = "webhooks"))]
            WebhookChoice::Missing => "none (feature `webhooks` off)".into(),
            WebhookChoice::Custom(_) => "custom".into(),
        };
        let email = match &self.email {
            EmailChoice::Log => "log",
            #[cfg(feature = "smtp")]
            EmailChoice::Smtp { .. } => "smtp",
            EmailChoice::Custom(_) => "custom",
        };
        f.debug_struct("SnitchBuilder")
            .field("webhooks", &webhooks)
            .field("email", &email)
            .field("check_in_base", &self.check_in_base)
            .field("rate_limit", &self.rate_limit)
            .field("auth_failures", &self.auth_failures)
            .field("maintenance", &self.maintenance)
            .field("dispatcher", &self.dispatcher)
            .field("outage_threshold", &self.outage_threshold)
            .field("key_refresh_every", &self.key_refresh_every)
            .field("check_in_history", &self.check_in_history)
            .field("ping_body_limit", &self.ping_body_limit)
            .field("sweep_batch", &self.sweep_batch)
            .field("channel_test_deadline", &self.channel_test_deadline)
            .finish_non_exhaustive()
    }
}

impl SnitchBuilder {
    /// The clock of the service, the dispatcher, the webhook signatures and the API keys
    /// (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Settings of the built-in webhook notifier (default: [`WebhookOptions::default`],
    /// which refuses private addresses). Only with the `webhooks` feature; without it, and
    /// without [`SnitchBuilder::webhook_notifier`], every webhook delivery fails at once
    /// with a detail naming the feature (recorded in the outbox, never dropped silently).
    #[cfg(feature = "webhooks")]
    pub fn webhooks(mut self, options: WebhookOptions) -> Self {
        self.webhooks = WebhookChoice::Builtin(options);
        self
    }

    /// The server's public URL (`base_url`): channel messages (Slack, PagerDuty, …) link
    /// to the dashboard under it. None (the default): messages carry no link.
    pub fn dashboard_url(mut self, url: Option<String>) -> Self {
        self.dashboard_url = url;
        self
    }

    /// How long a channel's test notification waits for its vendor before it answers
    /// `{"ok": false, "permanent": false}` (default 10 s): keep it under the request
    /// timeout of whatever serves the API, so the test never ends in a 408.
    pub fn channel_test_deadline(mut self, deadline: Duration) -> Self {
        self.channel_test_deadline = Some(deadline);
        self
    }

    /// Sends webhook deliveries through `notifier` instead of the built-in one.
    pub fn webhook_notifier(mut self, notifier: Arc<dyn Notifier>) -> Self {
        self.webhooks = WebhookChoice::Custom(notifier);
        self
    }

    /// Sends alert e-mails through the SMTP relay at `url` (`smtp://…`, `smtps://…`) from
    /// `from`. Without this (or [`SnitchBuilder::email_notifier`]) e-mails go to the log.
    /// Only with the `smtp` feature (lettre); without it, give an
    /// [`email_notifier`](SnitchBuilder::email_notifier) of your own, or e-mails are logged.
    #[cfg(feature = "smtp")]
    pub fn smtp(mut self, url: impl Into<String>, from: impl Into<String>) -> Self {
        self.email = EmailChoice::Smtp {
            url: url.into(),
            from: from.into(),
        };
        self
    }

    /// Sends e-mail deliveries through `notifier`.
    pub fn email_notifier(mut self, notifier: Arc<dyn Notifier>) -> Self {
        self.email = EmailChoice::Custom(notifier);
        self
    }

    /// The domain of check-in e-mail addresses, when an e-mail listener receives them: the
    /// snitch JSON and the dashboard then show `<token>@<domain>`.
    pub fn check_in_email_domain(mut self, domain: Option<String>) -> Self {
        self.check_in_email_domain = domain;
        self
    }

    /// Where check-in URLs point: the base the check-in router is reachable at from
    /// outside, e.g. `https://example.com/monitor/check-in` (default
    /// [`ApiConfig::default`]'s).
    pub fn check_in_base(mut self, base: impl Into<String>) -> Self {
        self.check_in_base = base.into();
        self
    }

    /// The API's settings at once: check-in base, rate limit, authentication failures and
    /// maintenance mode.
    pub fn api_config(mut self, config: ApiConfig) -> Self {
        self.check_in_base = config.check_in_base;
        self.rate_limit = config.rate_limit;
        self.auth_failures = config.auth_failures;
        self.maintenance = config.maintenance;
        self
    }

    /// The per-key request rate of the API.
    pub fn rate_limit(mut self, limit: RateLimit) -> Self {
        self.rate_limit = limit;
        self
    }

    /// Failed authentications allowed per client address.
    pub fn auth_failures(mut self, limit: AuthFailureLimit) -> Self {
        self.auth_failures = limit;
        self
    }

    /// Starts the API in maintenance mode (503; check-ins keep working).
    pub fn maintenance(mut self, on: bool) -> Self {
        self.maintenance = on;
        self
    }

    /// Delivery slots, caps, retries and lease of the dispatcher.
    pub fn dispatcher(mut self, options: DispatcherOptions) -> Self {
        self.dispatcher = options;
        self
    }

    /// How long no server of the store may be alive before the gap is an outage whose
    /// deadlines are deferred (default 60 s).
    pub fn outage_threshold(mut self, threshold: Duration) -> Self {
        // Beyond chrono's range (about 292 million years) is as good as never.
        self.outage_threshold =
            chrono::Duration::from_std(threshold).unwrap_or(chrono::Duration::MAX);
        self
    }

    /// Settings of the web dashboard ([`SnitchRuntime::ui_router`]; default
    /// [`snitch_http::ui::UiConfig::default`]: under `/ui`, cookies not `Secure`).
    #[cfg(feature = "ui")]
    pub fn ui(mut self, config: snitch_http::ui::UiConfig) -> Self {
        self.ui = config;
        self
    }

    /// How often the API keys are reloaded from the store (default
    /// [`snitch_http::REFRESH_EVERY`]).
    pub fn key_refresh_every(mut self, every: Duration) -> Self {
        self.key_refresh_every = every;
        self
    }

    /// How many check-ins of each snitch are kept (`check_in_history`; default
    /// [`snitch_core::snitch::CHECK_INS_KEPT`], at most
    /// [`snitch_core::service::MAX_CHECK_IN_HISTORY`]): the most
    /// `GET /v1/snitches/<token>/check_ins` can show.
    pub fn check_in_history(mut self, history: usize) -> Self {
        self.check_in_history = history;
        self
    }

    /// How many bytes of a check-in's output are kept (`ping_body_limit`; default
    /// [`snitch_core::runs::PING_BODY_LIMIT_DEFAULT`], at most
    /// [`snitch_core::service::MAX_PING_BODY_LIMIT`]; docs/rules.md#runs).
    pub fn ping_body_limit(mut self, limit: usize) -> Self {
        self.ping_body_limit = limit;
        self
    }

    /// How many due snitches the sweep claims and saves at a time (`sweep_batch`; default
    /// [`snitch_core::service::SWEEP_BATCH`]).
    pub fn sweep_batch(mut self, batch: usize) -> Self {
        self.sweep_batch = batch;
        self
    }

    /// Counts in these metrics (default: a fresh [`Metrics`]; see
    /// [`SnitchRuntime::metrics_router`]).
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Records that this server is alive (before anything is served, so no check-in is
    /// stepped past the deadlines of an outage this start ends), loads the API keys, and
    /// starts the scheduler, the dispatcher and the key refresh on the current tokio
    /// runtime.
    pub async fn build(self) -> Result<SnitchRuntime, BuildError> {
        let SnitchBuilder {
            storage,
            clock,
            webhooks,
            email,
            check_in_base,
            rate_limit,
            auth_failures,
            maintenance,
            dispatcher,
            outage_threshold,
            key_refresh_every,
            check_in_history,
            ping_body_limit,
            sweep_batch,
            metrics,
            dashboard_url,
            channel_test_deadline,
            check_in_email_domain,
            #[cfg(feature = "ui")]
            ui,
        } = self;
        // Vendor channels go over the same guarded client settings as webhooks.
        #[cfg(feature = "webhooks")]
        let channels = {
            let options = match &webhooks {
                WebhookChoice::Builtin(options) => options.clone(),
                WebhookChoice::Custom(_) => WebhookOptions::default(),
            };
            let mut notifier = snitch_notify::channels::ChannelNotifier::new(options)
                .map_err(|e| BuildError::Notifier(format!("cannot build the channel client: {e}")))?
                .with_dashboard(dashboard_url.clone())
                .with_longest_hold(dispatcher.retry.max_delay.to_std().unwrap_or_default());
            if let Some(deadline) = channel_test_deadline {
                notifier = notifier.with_test_deadline(deadline);
            }
            Arc::new(notifier)
        };
        #[cfg(not(feature = "webhooks"))]
        let _ = channel_test_deadline;
        let metrics = metrics.unwrap_or_default();
        let webhooks: Arc<dyn Notifier> = match webhooks {
            #[cfg(not(feature = "webhooks"))]
            WebhookChoice::Missing => Arc::new(WebhooksNotCompiled),
            #[cfg(feature = "webhooks")]
            WebhookChoice::Builtin(options) => Arc::new(
                WebhookNotifier::new(options)
                    .map_err(|e| {
                        BuildError::Notifier(format!("cannot build the webhook client: {e}"))
                    })?
                    .with_clock(clock.clone()),
            ),
            WebhookChoice::Custom(notifier) => notifier,
        };
        let email: Arc<dyn Notifier> = match email {
            EmailChoice::Log => {
                Arc::new(LogEmailNotifier::new().with_check_in_base(check_in_base.clone()))
            }
            #[cfg(feature = "smtp")]
            EmailChoice::Smtp { url, from } => Arc::new(
                SmtpEmailNotifier::new(&url, &from)
                    .map_err(|e| BuildError::Notifier(format!("SMTP URL or sender: {e}")))?
                    .with_check_in_base(check_in_base.clone()),
            ),
            EmailChoice::Custom(notifier) => notifier,
        };
        let dispatcher =
            Dispatcher::new(storage.clone(), clock.clone(), webhooks, email, dispatcher)
                .with_metrics(metrics.clone());
        #[cfg(feature = "webhooks")]
        let dispatcher = dispatcher.with_channels(channels.clone());
        let dispatcher = Arc::new(dispatcher);
        let waker = dispatcher.waker();
        let scheduler_waker = Arc::new(Notify::new());
        let wake_scheduler = scheduler_waker.clone();
        let counted = metrics.clone();
        let outages_counted = metrics.clone();
        let service = SnitchService::new(storage.clone(), clock.clone())
            .with_check_in_history(check_in_history)
            .with_ping_body_limit(ping_body_limit)
            .with_sweep_batch(sweep_batch)
            .with_events_hook(Arc::new(move || waker.notify_one()))
            .with_emitted_hook(Arc::new(move |events| {
                counted.events(events.iter().map(|e| e.kind));
            }))
            .with_wake_hook(Arc::new(move |_| wake_scheduler.notify_one()))
            .with_outage_threshold(outage_threshold)
            .with_outage_hook(Arc::new(move |outage| {
                outages_counted.outage();
                tracing::warn!(
                    started_at = %outage.started_at,
                    ended_at = %outage.ended_at,
                    "outage: no server of this store was alive; deadlines inside it are deferred"
                );
            }));
        service
            .heartbeat(service.now())
            .await
            .map_err(|e| match e {
                ServiceError::Storage(e) => BuildError::Storage(e),
                other => BuildError::Liveness(other),
            })?;
        let keys = Arc::new(ApiKeys::with_storage(storage.clone(), clock.clone()));
        keys.refresh().await?;
        let api_config = ApiConfig::default()
            .with_public_base(dashboard_url.clone())
            .with_check_in_email_domain(check_in_email_domain)
            .with_check_in_base(check_in_base)
            .with_rate_limit(rate_limit)
            .with_auth_failures(auth_failures)
            .with_maintenance(maintenance);
        #[cfg(feature = "webhooks")]
        let api_config = api_config.with_channel_tester(channels);
        let api =
            ApiState::with_metrics(service.clone(), keys.clone(), api_config, metrics.clone());
        let sweep = Arc::new(SweepWatch::new(SWEEP_STALLED_AFTER));
        let health = Health::new(storage.clone(), Some(sweep.clone()));

        let (stop, stop_rx) = watch::channel(false);
        let stopped = move |mut rx: watch::Receiver<bool>| async move {
            // Also when the handle is dropped (the sender with it).
            let _ = rx.wait_for(|stop| *stop).await;
        };
        let tasks = vec![
            tokio::spawn(run_scheduler(
                service.clone(),
                scheduler_waker,
                sweep,
                stopped(stop_rx.clone()),
            )),
            // Deliveries in flight finish and are recorded; pending ones stay in the
            // outbox.
            tokio::spawn(dispatcher.run(stopped(stop_rx.clone()))),
            tokio::spawn(
                keys.clone()
                    .run_refresh(key_refresh_every, stopped(stop_rx)),
            ),
        ];
        Ok(SnitchRuntime {
            service,
            #[cfg(feature = "ui")]
            ui: snitch_http::ui::UiState::new(api.clone(), ui),
            api,
            keys,
            metrics: MetricsState {
                metrics,
                storage,
                clock,
            },
            health,
            stop,
            tasks,
        })
    }
}

/// A running Snitch: its service, its routers and its background work. Call
/// [`SnitchRuntime::shutdown`] when the host stops; dropping it also stops the background work,
/// without recording a clean stop (the next start then sees the gap as downtime).
#[derive(Debug)]
pub struct SnitchRuntime {
    service: SnitchService,
    api: ApiState,
    #[cfg(feature = "ui")]
    ui: snitch_http::ui::UiState,
    keys: Arc<ApiKeys>,
    metrics: MetricsState,
    health: Health,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl SnitchRuntime {
    /// A builder over `storage`, which must be migrated already (e.g.
    /// `snitch::store::sqlite::MIGRATOR.run(&pool)`). Every other setting has a default.
    pub fn builder(storage: Arc<dyn Storage>) -> SnitchBuilder {
        let api = ApiConfig::default();
        SnitchBuilder {
            storage,
            clock: Arc::new(SystemClock),
            #[cfg(feature = "webhooks")]
            webhooks: WebhookChoice::Builtin(WebhookOptions::default()),
            #[cfg(not(feature = "webhooks"))]
            webhooks: WebhookChoice::Missing,
            email: EmailChoice::Log,
            check_in_base: api.check_in_base,
            rate_limit: api.rate_limit,
            auth_failures: api.auth_failures,
            maintenance: api.maintenance,
            dispatcher: DispatcherOptions::default(),
            outage_threshold: snitch_core::liveness::DEFAULT_OUTAGE_THRESHOLD,
            key_refresh_every: snitch_http::REFRESH_EVERY,
            check_in_history: snitch_core::snitch::CHECK_INS_KEPT,
            ping_body_limit: snitch_core::runs::PING_BODY_LIMIT_DEFAULT,
            sweep_batch: snitch_core::service::SWEEP_BATCH,
            dashboard_url: None,
            channel_test_deadline: None,
            check_in_email_domain: None,
            metrics: None,
            #[cfg(feature = "ui")]
            ui: snitch_http::ui::UiConfig::default(),
        }
    }

    /// The v1 API (`/v1/…`, with `/v1/openapi.json`), ready to serve or to `nest` under a
    /// prefix. `/healthz` and `/readyz` are [`SnitchRuntime::health_router`]'s: merge it
    /// once into each router you serve on its own address, so routers merged together
    /// never mount a path twice.
    pub fn api_router(&self) -> Router {
        api_router(self.api.clone())
    }

    /// The check-in endpoint (`/<token>`), ready to serve or to `nest` under the prefix that
    /// [`SnitchBuilder::check_in_base`] names (health: see [`SnitchRuntime::api_router`]).
    pub fn check_in_router(&self) -> Router {
        check_in_router_with_metrics(self.service.clone(), self.metrics.metrics.clone())
    }

    /// `GET /healthz` and `GET /readyz` (what the store and the sweep say), without
    /// authentication.
    pub fn health_router(&self) -> Router {
        health_router(self.health.clone())
    }

    /// What [`SnitchRuntime::check_in_router`] answers, as a bare service for a listener that
    /// serves nothing else: no router's work per request (see [`CheckInService`]).
    pub fn check_in_service(&self) -> CheckInService {
        CheckInService::new(self.service.clone(), self.metrics.metrics.clone())
            .with_health(health_router(self.health.clone()))
    }

    /// `GET /metrics` (Prometheus): serve it on an address only operators reach (the
    /// server's `metrics_listen`), with [`SnitchRuntime::health_router`] merged in.
    pub fn metrics_router(&self) -> Router {
        metrics_router(self.metrics.clone())
    }

    /// The metrics this runtime counts in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics.metrics
    }

    /// What `/readyz` checks.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// The web dashboard (feature `ui`), serving its pages under the configured base path
    /// (default `/ui`): `merge` it into the router that serves [`SnitchRuntime::api_router`]
    /// (it signs in with the same API keys and counts failed sign-ins against the same
    /// limit). Every call shares the same sessions.
    #[cfg(feature = "ui")]
    pub fn ui_router(&self) -> Router {
        snitch_http::ui::ui_router(self.ui.clone())
    }

    /// The service, for operations without HTTP (create a case's snitch, check in, …).
    pub fn service(&self) -> &SnitchService {
        &self.service
    }

    /// Switches the API's maintenance mode (503 for every API call and dashboard page;
    /// check-ins keep working).
    pub fn set_maintenance(&self, on: bool) {
        self.api.set_maintenance(on);
    }

    /// Whether the API is in maintenance mode.
    pub fn maintenance(&self) -> bool {
        self.api.maintenance()
    }

    /// The API's state, for the server's own handle on maintenance mode.
    #[cfg(feature = "server")]
    pub(crate) fn api_state_for_launch(&self) -> ApiState {
        self.api.clone()
    }

    /// The API keys: make one for a case with [`ApiKeys::create`].
    pub fn keys(&self) -> &Arc<ApiKeys> {
        &self.keys
    }

    /// Stops the scheduler, the key refresh and the dispatcher (its deliveries in flight
    /// finish and are recorded), then records the clean stop, so the next start measures
    /// the downtime exactly. Stop serving the routers first.
    pub async fn shutdown(self) {
        let SnitchRuntime {
            service,
            stop,
            tasks,
            ..
        } = self;
        let _ = stop.send(true);
        for task in tasks {
            if let Err(e) = task.await {
                tracing::error!(error = %e, "a background task of Snitch failed");
            }
        }
        if let Err(e) = service.record_stop(service.now()).await {
            tracing::warn!(error = %e, "cannot record the clean stop");
        }
    }
}

/// The webhook notifier of a build without the `webhooks` feature, when the host gave none:
/// each delivery fails permanently, and its recorded attempt says why.
#[cfg_attr(feature = "webhooks", allow(dead_code))]
#[derive(Debug)]
struct WebhooksNotCompiled;

/// The detail recorded for a webhook delivery that no notifier can send.
pub const WEBHOOKS_NOT_COMPILED: &str = "not sent: this build of Snitch has no webhook notifier \
     (enable the `webhooks` feature, or give SnitchBuilder::webhook_notifier)";

#[async_trait]
impl Notifier for WebhooksNotCompiled {
    async fn send(&self, _delivery: &Delivery) -> Result<String, NotifyError> {
        tracing::warn!("{WEBHOOKS_NOT_COMPILED}");
        Err(NotifyError::permanent(WEBHOOKS_NOT_COMPILED))
    }
}

/// Sweeps due snitches, then sleeps until the store's earliest wake-up time (at most
/// [`MAX_SWEEP_SLEEP`]), until `wake` (a change moved a deadline earlier) or `stop`.
async fn run_scheduler(
    service: SnitchService,
    wake: Arc<Notify>,
    watch: Arc<SweepWatch>,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    loop {
        let now = service.now();
        match service.tick(now).await {
            Ok(report) => {
                watch.swept();
                if report.events > 0 || report.deferred > 0 {
                    tracing::info!(
                        snitches = report.snitches,
                        events = report.events,
                        deferred = report.deferred,
                        "deadline sweep"
                    );
                }
            }
            Err(e) => tracing::error!(error = %e, "deadline sweep failed"),
        }
        let next = service.storage().next_wake_at().await.ok().flatten();
        let sleep = sleep_until(now, next);
        tokio::select! {
            () = &mut stop => return,
            () = wake.notified() => {}
            () = tokio::time::sleep(sleep) => {}
        }
    }
}

/// How long to sleep at `now` before the wake-up time `next`, capped.
fn sleep_until(now: Timestamp, next: Option<Timestamp>) -> Duration {
    next.and_then(|n| (n - now).to_std().ok())
        .map_or(MAX_SWEEP_SLEEP, |d| d.min(MAX_SWEEP_SLEEP))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_a_webhook_notifier_a_delivery_fails_at_once_saying_why() {
        use snitch_core::{
            AlertEmails, CaseId, Channel, DeliveryState, Event, EventKind, Notes, SnitchName,
            Status, Tags, Token, WebhookUrl,
        };
        let event = Event {
            id: "abcdefghijklmnop-1".into(),
            kind: EventKind::Missing,
            at: chrono::DateTime::from_timestamp(1_000_000, 0).expect("valid"),
            case_id: CaseId::parse("acme").expect("valid"),
            token: Token::parse("abcdefghijklmnop").expect("valid"),
            name: SnitchName::parse("backup").expect("valid"),
            notes: Notes::default(),
            tags: Tags::default(),
            alert_email: AlertEmails::default(),
            status: Status::Failed,
            previous_status: Status::Healthy,
            checked_in_at: None,
            check_in: None,
            missed_periods: 1,
            expected_at: None,
            expected_at_local: None,
            reason: None,
            run: None,
        };
        let delivery = Delivery {
            id: format!("{}-1", event.id),
            event,
            channel: Channel::Webhook {
                hook_id: "h1".into(),
                url: WebhookUrl::parse("https://hooks.example.test/x").expect("valid"),
                secret: None,
            },
            state: DeliveryState::Pending,
            next_attempt_at: None,
            attempts: Vec::new(),
        };
        let err = WebhooksNotCompiled
            .send(&delivery)
            .await
            .expect_err("never sent");
        assert!(err.permanent);
        assert!(err.detail.contains("`webhooks` feature"), "{}", err.detail);
    }

    #[test]
    fn the_scheduler_sleeps_until_the_next_deadline_but_at_most_a_second() {
        let now = chrono::DateTime::from_timestamp(1_000_000, 0).expect("valid");
        let soon = now + chrono::Duration::milliseconds(250);
        assert_eq!(sleep_until(now, Some(soon)), Duration::from_millis(250));
        assert_eq!(sleep_until(now, None), MAX_SWEEP_SLEEP);
        assert_eq!(
            sleep_until(now, Some(now - chrono::Duration::seconds(5))),
            MAX_SWEEP_SLEEP
        );
        let later = now + chrono::Duration::hours(1);
        assert_eq!(sleep_until(now, Some(later)), MAX_SWEEP_SLEEP);
    }
}
