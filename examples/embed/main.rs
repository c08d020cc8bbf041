//! An axum application that embeds Snitch:
//! `cargo run --example embed [-- <listen address> <database file>]`.
//!
//! The application has its own routes (`GET /`, `POST /teams`) and its own SQLite pool;
//! Snitch lives in the same database file (its migrations run beside the application's)
//! and is mounted under `/monitor`: the v1 API at `/monitor/api`, check-ins at
//! `/monitor/check-in/<token>`. Its deadline scheduler, dispatcher and key refresh run on
//! this process's tokio runtime and stop with it. `tests/embed.rs` runs it as a test.
//!
//! ```sh
//! cargo run --example embed
//! KEY=$(curl -s -d '{"name": "acme"}' -H 'content-type: application/json' \
//!        http://127.0.0.1:3000/teams | jq -r .api_key)
//! curl -s -u "$KEY:" -d '{"name": "backup", "interval": "hourly"}' \
//!      -H 'content-type: application/json' http://127.0.0.1:3000/monitor/api/v1/snitches
//! ```

mod app;

use std::path::PathBuf;

use snitch::serve::{serve, ServeOptions};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:3000".into());
    let path = PathBuf::from(args.next().unwrap_or_else(|| "embed.db".into()));

    // The application's own pool; Snitch's store works on it too.
    let pool = snitch::store::sqlite::connect(&path, 8).await?;
    let listener = TcpListener::bind(&listen).await?;
    let base = format!("http://{}", listener.local_addr()?);
    let host = app::start(pool, &base, |builder| match std::env::var("SMTP_URL") {
        Ok(url) => builder.smtp(url, "snitch@localhost"),
        Err(_) => builder,
    })
    .await?;
    println!(
        "Listening on {base}: POST /teams, then {base}{}/v1/…",
        app::API_PREFIX
    );

    // Snitch's hardened accept loop (header timeout, connection cap, the client address
    // its authentication limit needs); `axum::serve` with `ConnectInfo` works too.
    serve(listener, host.router, ServeOptions::default(), async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    // After serving stops: the background work ends and the clean stop is recorded.
    host.snitch.shutdown().await;
    Ok(())
}
