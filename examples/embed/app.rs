//! The host application of `examples/embed`: its own routes and its own SQLite pool, with
//! Snitch mounted under `/monitor` (the v1 API at `/monitor/api`, check-ins at
//! `/monitor/check-in`). `tests/embed.rs` builds it with [`start`] too.

use std::sync::{Arc, LazyLock};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use snitch::http::ApiKeys;
use snitch::prelude::{Case, CaseId, SnitchBuilder, SnitchRuntime, SnitchService};
use snitch::store::sqlite::SqliteStorage;
use sqlx::migrate::Migrator;
use sqlx::SqlitePool;

/// The host's own migrations. sqlx records them in the same `_sqlx_migrations` table as
/// Snitch's, so each migrator ignores the other's versions.
static HOST_MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    let mut migrator = sqlx::migrate!("examples/embed/migrations");
    migrator.set_ignore_missing(true);
    migrator
});

/// Where Snitch's v1 API is mounted.
pub const API_PREFIX: &str = "/monitor/api";
/// Where Snitch's check-in endpoint is mounted.
pub const CHECK_IN_PREFIX: &str = "/monitor/check-in";

/// The running application: its router (serve it) and the Snitch runtime (shut it down
/// after serving stops).
#[derive(Debug)]
pub struct Host {
    pub router: Router,
    pub snitch: SnitchRuntime,
}

/// What the host's handlers share: its pool, and the parts of Snitch they use.
#[derive(Clone)]
struct AppState {
    pool: SqlitePool,
    service: SnitchService,
    keys: Arc<ApiKeys>,
}

/// Runs the host's and Snitch's migrations on `pool`, starts Snitch on it (`public_base`
/// is where this application is reached, e.g. `https://jobs.example.com`; `configure`
/// sets anything else on the builder: clock, SMTP, webhook options) and builds the
/// router.
pub async fn start(
    pool: SqlitePool,
    public_base: &str,
    configure: impl FnOnce(SnitchBuilder) -> SnitchBuilder,
) -> Result<Host, Box<dyn std::error::Error + Send + Sync>> {
    HOST_MIGRATOR.run(&pool).await?;
    snitch::store::sqlite::MIGRATOR.run(&pool).await?;

    let storage = Arc::new(SqliteStorage::new(pool.clone()));
    let builder = SnitchRuntime::builder(storage).check_in_base(format!(
        "{}{CHECK_IN_PREFIX}",
        public_base.trim_end_matches('/')
    ));
    let snitch = configure(builder).build().await?;

    let monitor = Router::new()
        .nest(API_PREFIX, snitch.api_router())
        .nest(CHECK_IN_PREFIX, snitch.check_in_router());
    let state = AppState {
        pool,
        service: snitch.service().clone(),
        keys: snitch.keys().clone(),
    };
    let router = Router::new()
        .route("/", get(|| async { "The host application.\n" }))
        .route("/teams", post(create_team))
        .with_state(state)
        .merge(monitor);
    Ok(Host { router, snitch })
}

/// `POST /teams {"name": "acme"}`: the host's own operation, which also gives the team a
/// Snitch case and an API key for `/monitor/api` (shown once).
async fn create_team(
    State(state): State<AppState>,
    Json(body): Json<Value>,
) -> Result<Json<Value>, (StatusCode, String)> {
    let bad = |m: String| (StatusCode::UNPROCESSABLE_ENTITY, m);
    let failed = |e: &dyn std::fmt::Display| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let name = body["name"].as_str().unwrap_or_default();
    let id = CaseId::parse(name).map_err(|v| bad(format!("name {}", v.message)))?;
    sqlx::query("INSERT INTO teams (name) VALUES (?)")
        .bind(id.as_str())
        .execute(&state.pool)
        .await
        .map_err(|e| match e.as_database_error() {
            Some(db) if db.is_unique_violation() => (
                StatusCode::CONFLICT,
                format!("a team named {:?} exists already", id.as_str()),
            ),
            _ => failed(&e),
        })?;
    state
        .service
        .storage()
        .upsert_case(&Case::new(id.clone()))
        .await
        .map_err(|e| failed(&e))?;
    let key = state
        .keys
        .create(&id, "created with the team")
        .await
        .map_err(|e| failed(&e))?;
    Ok(Json(json!({"name": id.as_str(), "api_key": key.key})))
}
