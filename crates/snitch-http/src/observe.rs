//! The request log and request metrics of both routers: every request logs its method,
//! route template (never the token: `/v1/snitches/{token}`, `/{token}`), status and
//! latency (at info; an accepted check-in at debug); API requests are counted by method, route and status
//! (`snitch_api_requests_total`). Every label value comes from a fixed set, so a hostile
//! client cannot grow the number of series (unknown methods are `OTHER`, paths that match
//! no route `unmatched`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use snitch_core::clock::monotonic_now;

use crate::metrics::Metrics;

/// Which router a request came through, and where its metrics go.
#[derive(Clone, Debug)]
pub struct Observer {
    listener: &'static str,
    /// API requests are counted here; check-ins are counted by outcome by their handler.
    metrics: Option<Arc<Metrics>>,
    /// Whether a successful request is logged at debug, not info (accepted check-ins).
    routine_when_accepted: bool,
    /// Check-ins for unknown tokens (404 on the check-in listener): each logged at debug,
    /// a count of them at info at most once a minute. A flood of them (a deleted snitch's
    /// job, a scanner) would otherwise write a log line each.
    unknown_tokens: Option<Arc<Mutex<UnknownTokens>>>,
}

/// How often the count of check-ins for unknown tokens is logged at most.
pub const UNKNOWN_TOKENS_SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// Check-ins for unknown tokens counted since the last summary.
#[derive(Debug)]
pub(crate) struct UnknownTokens {
    since: Option<Instant>,
    count: u64,
}

impl UnknownTokens {
    pub(crate) fn new() -> Self {
        UnknownTokens {
            since: None,
            count: 0,
        }
    }

    /// Counts one at `now`; the count and the span it covers when a summary is due (the
    /// first one counted was at least [`UNKNOWN_TOKENS_SUMMARY_EVERY`] ago).
    pub(crate) fn count(&mut self, now: Instant) -> Option<(u64, Duration)> {
        let since = *self.since.get_or_insert(now);
        self.count += 1;
        let span = now.saturating_duration_since(since);
        if span < UNKNOWN_TOKENS_SUMMARY_EVERY {
            return None;
        }
        let count = std::mem::take(&mut self.count);
        self.since = Some(now);
        Some((count, span))
    }
}

impl Observer {
    /// The API router's: requests are logged and counted in `metrics`.
    pub fn api(metrics: Arc<Metrics>) -> Self {
        Observer {
            listener: "api",
            metrics: Some(metrics),
            routine_when_accepted: false,
            unknown_tokens: None,
        }
    }

    /// The check-in router's: requests are logged, accepted ones at debug (their handler
    /// counts them).
    pub fn check_ins() -> Self {
        Observer {
            listener: "check_in",
            metrics: None,
            routine_when_accepted: true,
            unknown_tokens: Some(Arc::new(Mutex::new(UnknownTokens::new()))),
        }
    }
}

/// A method name from a fixed set.
pub fn method_name(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::PUT => "PUT",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "OTHER",
    }
}

/// Logs and counts one request (middleware of the API router).
pub async fn observe(State(observer): State<Observer>, req: Request, next: Next) -> Response {
    let started = monotonic_now();
    let method = method_name(req.method());
    let route = req.extensions().get::<MatchedPath>().cloned();
    let response = next.run(req).await;
    let route = route.as_ref().map_or(UNMATCHED, MatchedPath::as_str);
    observer.record(method, route, response.status(), started);
    response
}

/// The route label of a request that matched no route.
pub const UNMATCHED: &str = "unmatched";

impl Observer {
    /// Logs and counts one answered request: `method` (from [`method_name`]) on `route`,
    /// answered `status`, received at `started`. The check-in endpoint calls it itself,
    /// so a check-in goes through no middleware.
    pub fn record(&self, method: &'static str, route: &str, status: StatusCode, started: Instant) {
        if let Some(metrics) = &self.metrics {
            metrics.api_request(method, route, status);
        }
        // An accepted check-in is recorded in the snitch's history already, and comes by
        // the thousand a second: logged at debug. Everything else (API calls, refused
        // check-ins) at info.
        let unknown_token = status == StatusCode::NOT_FOUND && self.unknown_tokens.is_some();
        if let Some(unknown) = self.unknown_tokens.as_ref().filter(|_| unknown_token) {
            let due = unknown
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .count(started);
            if let Some((count, span)) = due {
                tracing::info!(
                    target: "snitch::request",
                    listener = self.listener,
                    count,
                    "{count} check-ins for unknown tokens in the last {} s",
                    span.as_secs()
                );
            }
        }
        if (self.routine_when_accepted && status.is_success()) || unknown_token {
            tracing::debug!(
                target: "snitch::request",
                listener = self.listener,
                method,
                route,
                status = status.as_u16(),
                latency_ms = latency_ms(started),
                "request"
            );
        } else {
            tracing::info!(
                target: "snitch::request",
                listener = self.listener,
                method,
                route,
                status = status.as_u16(),
                latency_ms = latency_ms(started),
                "request"
            );
        }
    }
}

fn latency_ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flood of check-ins for unknown tokens is summed up once a minute at most.
    #[test]
    fn unknown_tokens_are_summed_up_once_a_minute() {
        let start = monotonic_now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut unknown = UnknownTokens::new();
        for ms in 0..12_034 {
            assert_eq!(unknown.count(at(ms * 4)), None, "{ms}");
        }
        assert_eq!(
            unknown.count(at(60_000)),
            Some((12_035, Duration::from_secs(60)))
        );
        assert_eq!(unknown.count(at(60_001)), None);
        assert_eq!(unknown.count(at(119_999)), None);
        assert_eq!(
            unknown.count(at(120_000)),
            Some((3, Duration::from_secs(60)))
        );
    }
}
