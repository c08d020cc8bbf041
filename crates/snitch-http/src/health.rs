//! `GET /healthz` (the process is up) and `GET /readyz` (the store answers, its
//! migrations are applied, the deadline sweep is not stalled): unauthenticated, tiny
//! JSON, merged into every router a server listens with.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Map, Value};
use snitch_core::clock::monotonic_now;
use snitch_core::Storage;

use crate::openapi::HealthJson;

/// How long after its last completed sweep the scheduler counts as stalled (it sweeps at
/// least every second).
pub const SWEEP_STALLED_AFTER: Duration = Duration::from_secs(30);

/// How long readiness waits for the store.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// When the deadline sweep last completed: the scheduler calls [`SweepWatch::swept`]
/// after each sweep that succeeded. Monotonic time, so a fake clock cannot stall it.
#[derive(Debug)]
pub struct SweepWatch {
    origin: Instant,
    /// Milliseconds from `origin` to the last completed sweep (or the watch's start).
    last_ms: AtomicU64,
    stalled_after: Duration,
}

impl SweepWatch {
    /// A watch that counts as stalled `stalled_after` after its last sweep (or now).
    pub fn new(stalled_after: Duration) -> Self {
        SweepWatch {
            origin: monotonic_now(),
            last_ms: AtomicU64::new(0),
            stalled_after,
        }
    }

    /// Records a completed sweep.
    pub fn swept(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// How long ago the last sweep completed (or the watch started).
    pub fn since_last(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.origin.elapsed().saturating_sub(last)
    }

    /// Whether the last sweep completed `stalled_after` ago or longer.
    pub fn stalled(&self) -> bool {
        self.since_last() >= self.stalled_after
    }
}

/// What the health endpoints look at.
#[derive(Clone)]
pub struct Health {
    storage: Arc<dyn Storage>,
    /// `None` where no scheduler runs (a router without a runtime).
    sweep: Option<Arc<SweepWatch>>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("sweep", &self.sweep)
            .finish_non_exhaustive()
    }
}

impl Health {
    /// Checks `storage` and, when given, the sweep's watch.
    pub fn new(storage: Arc<dyn Storage>, sweep: Option<Arc<SweepWatch>>) -> Self {
        Health { storage, sweep }
    }

    /// Each check by name with `ok` or why not, and whether all passed.
    pub async fn readiness(&self) -> (bool, Map<String, Value>) {
        let mut checks = Map::new();
        let store = match tokio::time::timeout(STORE_TIMEOUT, self.storage.check_ready()).await {
            Ok(Ok(())) => "ok".to_owned(),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {} s", STORE_TIMEOUT.as_secs()),
        };
        checks.insert("store".into(), Value::String(store));
        if let Some(sweep) = &self.sweep {
            let since = sweep.since_last();
            let state = if sweep.stalled() {
                format!("stalled: last sweep completed {} s ago", since.as_secs())
            } else {
                "ok".into()
            };
            checks.insert("sweep".into(), Value::String(state));
        }
        let ready = checks.values().all(|v| v == "ok");
        (ready, checks)
    }
}

/// The paths of [`health_router`]: `/healthz` and `/readyz`.
pub const HEALTH_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// `/healthz` and `/readyz`; merge into any router.
pub fn health_router(health: Health) -> Router {
    let [healthz_path, readyz_path] = HEALTH_PATHS;
    Router::new()
        .route(healthz_path, get(healthz))
        .route(readyz_path, get(readyz))
        .with_state(health)
}

/// The process is up.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "The process is up", body = HealthJson))
)]
pub(crate) async fn healthz() -> Json<HealthJson> {
    Json(HealthJson {
        status: "ok".into(),
        checks: None,
    })
}

/// Ready to serve: the store answers with its migrations applied, the sweep runs.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready", body = HealthJson),
        (status = 503, description = "Not ready; `checks` says why", body = HealthJson),
    )
)]
pub(crate) async fn readyz(State(health): State<Health>) -> Response {
    let (ready, checks) = health.readiness().await;
    let (status, word) = if ready {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    };
    let body = HealthJson {
        status: word.into(),
        checks: Some(checks),
    };
    (status, Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use snitch_core::storage::MockStorage;
    use snitch_core::StorageError;
    use snitch_store_memory::MemoryStorage;
    use tower::ServiceExt;

    async fn get_json(router: &Router, uri: &str) -> (StatusCode, Value) {
        let req = Request::get(uri).body(Body::empty()).expect("request");
        let response = router.clone().oneshot(req).await.expect("infallible");
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, serde_json::from_slice(&body).expect("JSON"))
    }

    #[tokio::test]
    async fn a_migrated_store_with_a_running_sweep_is_ready() {
        let watch = Arc::new(SweepWatch::new(Duration::from_secs(30)));
        watch.swept();
        let router = health_router(Health::new(Arc::new(MemoryStorage::new()), Some(watch)));
        let (status, body) = get_json(&router, "/healthz").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, serde_json::json!({"status": "ok"}));
        let (status, body) = get_json(&router, "/readyz").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            body,
            serde_json::json!({"status": "ok", "checks": {"store": "ok", "sweep": "ok"}})
        );
    }

    #[tokio::test]
    async fn a_store_that_fails_or_a_stalled_sweep_is_not_ready_but_healthy() {
        let mut store = MockStorage::new();
        store
            .expect_check_ready()
            .returning(|| Err(StorageError::Backend("connection refused".into())));
        // A watch that counts as stalled at once.
        let watch = Arc::new(SweepWatch::new(Duration::ZERO));
        let router = health_router(Health::new(Arc::new(store), Some(watch)));
        let (status, body) = get_json(&router, "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body["status"], "unavailable");
        assert!(
            body["checks"]["store"]
                .as_str()
                .is_some_and(|s| s.contains("connection refused")),
            "{body}"
        );
        assert!(
            body["checks"]["sweep"]
                .as_str()
                .is_some_and(|s| s.starts_with("stalled")),
            "{body}"
        );
        let (status, _) = get_json(&router, "/healthz").await;
        assert_eq!(status, StatusCode::OK, "up, though not ready");
    }
}
