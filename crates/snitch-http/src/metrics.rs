//! Metrics for Prometheus (`GET /metrics`, OpenMetrics text format, `prometheus-client`).
//!
//! One [`Metrics`] per server, shared by the routers, the dispatcher and the service's
//! hooks. Counters on the check-in path are created up front and bumped with one atomic
//! add (no lock, no map lookup); no label ever holds a token, a case or a URL, so the
//! number of series is fixed by the code. The store's gauges (snitches by status, outbox
//! depth, sweep lag) are read from the store when scraped, not kept on any request path.
//! docs/operating.md lists every metric with its labels.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use snitch_core::{Clock, EventKind, Storage, Timestamp};

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeliveryLabels {
    channel: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabel {
    channel: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

pub use snitch_core::{CheckInOutcome, DeliveryOutcome};

const CHANNELS: [&str; 2] = ["webhook", "email"];
const EVENT_KINDS: [EventKind; 4] = [
    EventKind::Reporting,
    EventKind::Missing,
    EventKind::Errored,
    EventKind::Paused,
];

/// Every metric of a server.
pub struct Metrics {
    registry: Registry,
    /// success, error, unknown_token, failed: created up front, bumped lock-free.
    check_ins: [Counter; 6],
    api_requests: Family<RouteLabels, Counter>,
    events: Family<KindLabel, Counter>,
    deliveries: Family<DeliveryLabels, Counter>,
    delivery_latency: Family<ChannelLabel, Histogram>,
    outages: Counter,
    sweep_lag: Gauge<f64, AtomicU64>,
    snitches: Family<StatusLabel, Gauge>,
    outbox_depth: Gauge,
    store_up: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric at zero, registered under the `snitch_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("snitch");
        let check_in_family = Family::<OutcomeLabel, Counter>::default();
        let check_ins = [
            "success",
            "error",
            "unknown_token",
            "failed",
            "start",
            "log",
        ]
        .map(|outcome| check_in_family.get_or_create_owned(&OutcomeLabel { outcome }));
        registry.register(
            "check_ins",
            "Check-in requests by outcome: success, error, start and log were recorded; \
             unknown_token had no snitch; failed could not be stored",
            check_in_family,
        );
        let api_requests = Family::<RouteLabels, Counter>::default();
        registry.register(
            "api_requests",
            "API requests by method, route template (never a token) and HTTP status",
            api_requests.clone(),
        );
        let events = Family::<KindLabel, Counter>::default();
        for kind in EVENT_KINDS {
            let _ = events.get_or_create(&KindLabel {
                kind: kind.as_str(),
            });
        }
        registry.register(
            "events",
            "Events emitted (stored with their state change) by kind",
            events.clone(),
        );
        let deliveries = Family::<DeliveryLabels, Counter>::default();
        let delivery_latency =
            Family::<ChannelLabel, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
        for channel in CHANNELS {
            for outcome in [
                DeliveryOutcome::Delivered,
                DeliveryOutcome::Retry,
                DeliveryOutcome::Failed,
            ] {
                let _ = deliveries.get_or_create(&DeliveryLabels {
                    channel,
                    outcome: outcome.as_str(),
                });
            }
            let _ = delivery_latency.get_or_create(&ChannelLabel { channel });
        }
        registry.register(
            "deliveries",
            "Delivery attempts by channel (webhook, email) and outcome (delivered, retry, failed)",
            deliveries.clone(),
        );
        registry.register_with_unit(
            "delivery_latency",
            "From an event to its delivery, for delivered attempts, by channel",
            Unit::Seconds,
            delivery_latency.clone(),
        );
        let outages = Counter::default();
        registry.register(
            "outages",
            "Outages this server found (no server of the store alive for longer than the threshold)",
            outages.clone(),
        );
        let sweep_lag = Gauge::<f64, AtomicU64>::default();
        registry.register_with_unit(
            "sweep_lag",
            "Now minus the earliest wake-up time not yet processed (0 when none is due), at scrape",
            Unit::Seconds,
            sweep_lag.clone(),
        );
        let snitches = Family::<StatusLabel, Gauge>::default();
        registry.register(
            "snitches",
            "Snitches by status, at scrape",
            snitches.clone(),
        );
        let outbox_depth = Gauge::default();
        registry.register(
            "outbox_depth",
            "Deliveries not finished (waiting or in flight), counted at scrape or at most a second before",
            outbox_depth.clone(),
        );
        let store_up = Gauge::default();
        registry.register(
            "store_up",
            "1 when the store answered the scrape's queries, else 0",
            store_up.clone(),
        );
        Metrics {
            registry,
            check_ins,
            api_requests,
            events,
            deliveries,
            delivery_latency,
            outages,
            sweep_lag,
            snitches,
            outbox_depth,
            store_up,
        }
    }

    /// Counts a check-in request: one atomic add.
    pub fn check_in(&self, outcome: CheckInOutcome) {
        let slot = match outcome {
            CheckInOutcome::Success => 0,
            CheckInOutcome::Error => 1,
            CheckInOutcome::UnknownToken => 2,
            CheckInOutcome::Failed => 3,
            CheckInOutcome::Start => 4,
            CheckInOutcome::Log => 5,
        };
        self.check_ins[slot].inc();
    }

    /// Counts an API request; `route` is the matched route template (never a token).
    pub fn api_request(&self, method: &str, route: &str, status: StatusCode) {
        self.api_requests
            .get_or_create(&RouteLabels {
                method: method.to_owned(),
                route: route.to_owned(),
                status: status.as_u16(),
            })
            .inc();
    }

    /// Counts emitted events.
    pub fn events(&self, kinds: impl IntoIterator<Item = EventKind>) {
        for kind in kinds {
            self.events
                .get_or_create(&KindLabel {
                    kind: kind.as_str(),
                })
                .inc();
        }
    }

    /// Counts a delivery attempt; `latency` (event to delivery) only for delivered ones.
    pub fn delivery(
        &self,
        channel: &'static str,
        outcome: DeliveryOutcome,
        latency: Option<Duration>,
    ) {
        self.deliveries
            .get_or_create(&DeliveryLabels {
                channel,
                outcome: outcome.as_str(),
            })
            .inc();
        if let Some(latency) = latency {
            self.delivery_latency
                .get_or_create(&ChannelLabel { channel })
                .observe(latency.as_secs_f64());
        }
    }

    /// Counts an outage this server found.
    pub fn outage(&self) {
        self.outages.inc();
    }

    /// Reads the store's gauges (snitches by status, outbox depth, sweep lag at `now`),
    /// then encodes every metric. A store that does not answer sets `snitch_store_up` to
    /// 0 and leaves its gauges as they were.
    pub async fn render(&self, storage: &dyn Storage, now: Timestamp) -> String {
        let read = async {
            let stats = storage.stats().await?;
            let next = storage.next_wake_at().await?;
            Ok::<_, snitch_core::StorageError>((stats, next))
        };
        match tokio::time::timeout(SCRAPE_STORE_TIMEOUT, read).await {
            Ok(Ok((stats, next))) => {
                self.store_up.set(1);
                for (status, n) in stats.snitches_by_status {
                    self.snitches
                        .get_or_create(&StatusLabel {
                            status: status.as_str(),
                        })
                        .set(i64::try_from(n).unwrap_or(i64::MAX));
                }
                if let Some(depth) = stats.outbox_depth {
                    self.outbox_depth
                        .set(i64::try_from(depth).unwrap_or(i64::MAX));
                }
                let lag = next
                    .and_then(|n| (now - n).to_std().ok())
                    .unwrap_or_default();
                self.sweep_lag.set(lag.as_secs_f64());
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "metrics: the store did not answer");
                self.store_up.set(0);
            }
            Err(_) => {
                tracing::warn!("metrics: the store did not answer in time");
                self.store_up.set(0);
            }
        }
        self.encode()
    }

    /// Every metric in the OpenMetrics text format, as they stand.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!(error = %e, "metrics: cannot encode");
        }
        text
    }
}

/// How long a scrape waits for the store.
const SCRAPE_STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// 10 ms to about 11 hours: deliveries go out in milliseconds, retries take up to a day.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 4.0, 12))
}

/// What `GET /metrics` needs.
#[derive(Clone)]
pub struct MetricsState {
    /// The server's metrics.
    pub metrics: Arc<Metrics>,
    /// The store whose gauges a scrape reads.
    pub storage: Arc<dyn Storage>,
    /// The clock the sweep lag is measured with.
    pub clock: Arc<dyn Clock>,
}

/// The e-mail listener (`snitch-email-in`) tells the metrics of every check-in it took.
impl snitch_core::CheckInObserver for Metrics {
    fn check_in(&self, outcome: CheckInOutcome) {
        Metrics::check_in(self, outcome);
    }
}

/// The dispatcher (`snitch-notify`) tells the metrics of every attempt.
impl snitch_core::DeliveryObserver for Metrics {
    fn delivery(&self, channel: &'static str, outcome: DeliveryOutcome, latency: Option<Duration>) {
        Metrics::delivery(self, channel, outcome, latency);
    }
}

impl std::fmt::Debug for MetricsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsState").finish_non_exhaustive()
    }
}

/// `GET /metrics`: serve it on its own listener (`metrics_listen`), not to the world.
pub fn metrics_router(state: MetricsState) -> Router {
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(state)
}

async fn scrape(State(state): State<MetricsState>) -> Response {
    let now = snitch_core::clock::to_millis(state.clock.now());
    let text = state.metrics.render(state.storage.as_ref(), now).await;
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use snitch_store_memory::MemoryStorage;

    /// What the dispatcher tells of its attempts (`snitch-notify` knows only the core's
    /// observer trait) is counted by channel and outcome, with the delay since the event.
    #[test]
    fn attempts_told_by_the_dispatcher_are_counted_with_their_delay() {
        let metrics = Metrics::new();
        let observer: &dyn snitch_core::DeliveryObserver = &metrics;
        observer.delivery("webhook", DeliveryOutcome::Retry, None);
        observer.delivery(
            "webhook",
            DeliveryOutcome::Delivered,
            Some(Duration::from_secs(30)),
        );
        observer.delivery("email", DeliveryOutcome::Delivered, Some(Duration::ZERO));
        let text = metrics.encode();
        for line in [
            "snitch_deliveries_total{channel=\"webhook\",outcome=\"retry\"} 1",
            "snitch_deliveries_total{channel=\"webhook\",outcome=\"delivered\"} 1",
            "snitch_deliveries_total{channel=\"email\",outcome=\"delivered\"} 1",
            "snitch_deliveries_total{channel=\"webhook\",outcome=\"failed\"} 0",
            "snitch_delivery_latency_seconds_sum{channel=\"webhook\"} 30.0",
            "snitch_delivery_latency_seconds_count{channel=\"email\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
    }

    #[tokio::test]
    async fn every_metric_is_exposed_with_bounded_labels() {
        let metrics = Metrics::new();
        metrics.check_in(CheckInOutcome::Success);
        metrics.check_in(CheckInOutcome::Success);
        metrics.check_in(CheckInOutcome::Error);
        metrics.api_request("GET", "/v1/snitches/{token}", StatusCode::NOT_FOUND);
        metrics.events([EventKind::Missing]);
        metrics.delivery(
            "webhook",
            DeliveryOutcome::Delivered,
            Some(Duration::from_millis(250)),
        );
        metrics.outage();
        let store = MemoryStorage::new();
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("valid");
        let text = metrics.render(&store, now).await;
        for line in [
            "snitch_check_ins_total{outcome=\"success\"} 2",
            "snitch_check_ins_total{outcome=\"error\"} 1",
            "snitch_check_ins_total{outcome=\"unknown_token\"} 0",
            "snitch_api_requests_total{method=\"GET\",route=\"/v1/snitches/{token}\",status=\"404\"} 1",
            "snitch_events_total{kind=\"snitch.missing\"} 1",
            "snitch_events_total{kind=\"snitch.reporting\"} 0",
            "snitch_deliveries_total{channel=\"webhook\",outcome=\"delivered\"} 1",
            "snitch_deliveries_total{channel=\"email\",outcome=\"failed\"} 0",
            "snitch_delivery_latency_seconds_count{channel=\"webhook\"} 1",
            "snitch_outages_total 1",
            "snitch_sweep_lag_seconds 0.0",
            "snitch_snitches{status=\"healthy\"} 0",
            "snitch_outbox_depth 0",
            "snitch_store_up 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }
}
