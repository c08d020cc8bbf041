//! The request log and request metrics of both routers: every request logs its method,
//! route template (never the token: `/v1/snitches/{token}`, `/{token}`), status and
//! latency (at info; an accepted check-in at debug); API requests are counted by method, route and status
//! (`snitch_api_requests_total`). Every label value comes from a fixed set, so a hostile
//! client cannot grow the number of series (unknown methods are `OTHER`, paths that match
//! no route `unmatched`).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use crate::metrics::Metrics;

/// Which router a request came through, and where its metrics go.
#[derive(Clone, Debug)]
pub struct Observer {
    listener: &'static str,
    /// API requests are counted here; check-ins are counted by outcome by their handler.
    metrics: Option<Arc<Metrics>>,
    /// Whether a successful request is logged at debug, not info (accepted check-ins).
    routine_when_accepted: bool,
}

impl Observer {
    /// The API router's: requests are logged and counted in `metrics`.
    pub fn api(metrics: Arc<Metrics>) -> Self {
        Observer {
            listener: "api",
            metrics: Some(metrics),
            routine_when_accepted: false,
        }
    }

    /// The check-in router's: requests are logged, accepted ones at debug (their handler
    /// counts them).
    pub fn check_ins() -> Self {
        Observer {
            listener: "check_in",
            metrics: None,
            routine_when_accepted: true,
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
    let started = Instant::now();
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
        if self.routine_when_accepted && status.is_success() {
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
