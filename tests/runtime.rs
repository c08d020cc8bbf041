//! The embedded runtime ([`SnitchRuntime`]) on its own, without listeners: what `build`
//! and `shutdown` record, and what `build` refuses. `tests/embed.rs` serves it inside a
//! host application; every server test runs it through `launch`.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use snitch::prelude::{BuildError, ManualClock, SnitchRuntime};
use snitch::store::memory::MemoryStorage;

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T03:00:00.123Z")
        .expect("valid")
        .to_utc()
}

#[tokio::test]
async fn shutdown_records_the_clean_stop_so_the_next_start_measures_the_downtime_from_it() {
    let storage = Arc::new(MemoryStorage::new());
    let clock = Arc::new(ManualClock::new(start()));
    let first = SnitchRuntime::builder(storage.clone())
        .clock(clock.clone())
        .build()
        .await
        .expect("starts");
    assert!(first.service().known_outages().is_empty());
    // Under the heartbeat interval (5 s): the last heartbeat stays the start's, so only
    // the recorded stop can say the server was alive until now.
    clock.advance(Duration::seconds(2));
    first.shutdown().await;

    clock.advance(Duration::hours(1));
    let second = SnitchRuntime::builder(storage)
        .clock(clock.clone())
        .build()
        .await
        .expect("starts again");
    let outages = second.service().known_outages();
    assert_eq!(outages.len(), 1, "{outages:?}");
    assert_eq!(outages[0].started_at, start() + Duration::seconds(2));
    assert_eq!(
        outages[0].ended_at,
        start() + Duration::seconds(2) + Duration::hours(1)
    );
    second.shutdown().await;
}

#[tokio::test]
async fn a_gap_under_the_threshold_after_a_clean_stop_is_no_outage() {
    let storage = Arc::new(MemoryStorage::new());
    let clock = Arc::new(ManualClock::new(start()));
    let first = SnitchRuntime::builder(storage.clone())
        .clock(clock.clone())
        .outage_threshold(std::time::Duration::from_secs(600))
        .build()
        .await
        .expect("starts");
    first.shutdown().await;
    clock.advance(Duration::minutes(9));
    let second = SnitchRuntime::builder(storage)
        .clock(clock)
        .outage_threshold(std::time::Duration::from_secs(600))
        .build()
        .await
        .expect("starts again");
    assert!(second.service().known_outages().is_empty());
    second.shutdown().await;
}

#[tokio::test]
async fn an_unusable_smtp_url_is_refused_at_build() {
    let built = SnitchRuntime::builder(Arc::new(MemoryStorage::new()))
        .smtp("http://not-smtp.example", "snitch@example.com")
        .build()
        .await;
    match built {
        Err(BuildError::Notifier(message)) => assert!(message.contains("SMTP"), "{message}"),
        other => panic!("expected a notifier error, got {other:?}"),
    }
}

/// With no case configured, a store that already holds cases made by the admin commands
/// gets no `demo` case (and no key printed); an empty store gets it once.
#[tokio::test]
async fn no_demo_case_beside_cases_made_with_the_admin_commands() {
    use snitch::admin::{Admin, CaseOptions};
    use snitch::server::{config_from_toml, launch};

    let dir = tempfile::tempdir().expect("a temporary directory");
    let start_on = |file: &str| {
        let text = format!(
            "listen = \"127.0.0.1:0\"\ncheck_in_listen = \"127.0.0.1:0\"\ndata_path = {:?}\n",
            dir.path().join(file).display().to_string()
        );
        config_from_toml(&text).expect("valid configuration")
    };
    let serve = |config| async move {
        let api = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let check_in = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = launch(config, api, check_in, async move {
            let _ = stopped.await;
        })
        .await
        .expect("starts");
        let demo_key = running.demo_key.clone();
        let _ = stop.send(());
        running.wait().await.expect("stops");
        demo_key
    };

    // A store the admin commands made a case in.
    let config = start_on("admin.db");
    let storage = snitch::server::open_sqlite(&config, &config.store_location().expect("sqlite"))
        .await
        .map(|pool| Arc::new(snitch::store::sqlite::SqliteStorage::new(pool)))
        .expect("open");
    Admin::new(storage)
        .create_case("ops", &CaseOptions::default())
        .await
        .expect("create");
    assert_eq!(serve(config).await, None, "no demo beside the admin's case");

    // An empty store: the demo case, once.
    assert!(serve(start_on("empty.db")).await.is_some());
    assert_eq!(
        serve(start_on("empty.db")).await,
        None,
        "kept from the first start"
    );
}

/// The runtime's routers go together on one address (a host serving them all): the API,
/// the dashboard, metrics and health merged, check-ins nested under their prefix. No path
/// is mounted twice, so nothing panics, and health is where it was merged, once.
#[cfg(feature = "ui")]
#[tokio::test]
async fn every_router_merges_into_one_with_health_once() {
    use tower::ServiceExt;
    let snitch = SnitchRuntime::builder(Arc::new(MemoryStorage::new()))
        .build()
        .await
        .expect("starts");
    let all = snitch
        .api_router()
        .nest("/check-in", snitch.check_in_router())
        .merge(snitch.metrics_router())
        .merge(snitch.ui_router())
        .merge(snitch.health_router());
    for path in ["/healthz", "/metrics", "/v1/openapi.json", "/ui/login"] {
        let response = all
            .clone()
            .oneshot(
                axum::http::Request::get(path)
                    .body(axum::body::Body::empty())
                    .expect("a request"),
            )
            .await
            .expect("answered");
        assert_eq!(response.status(), axum::http::StatusCode::OK, "{path}");
    }
    // The maintenance switch, without reaching into the API's state.
    snitch.set_maintenance(true);
    assert!(snitch.maintenance());
    snitch.set_maintenance(false);
    snitch.shutdown().await;
}
