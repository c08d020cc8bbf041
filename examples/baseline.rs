//! The benchmark's baseline: a bare axum server answering 202 to every check-in path and
//! doing nothing else, run as its own release process like the Snitch server, so that
//! `examples/bench.rs` loads both the same way with `wrk`.
//!
//! ```sh
//! cargo run --release --example baseline -- 127.0.0.1:0
//! ```
//!
//! Prints `listening on <address>` on stdout once it accepts connections (the address it
//! bound, which the benchmark reads when it passes port 0).

use std::io::Write;
use std::net::SocketAddr;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;

/// The same runtime as the server's: tokio's multi-thread scheduler, one worker per core.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = match std::env::args().nth(1) {
        Some(arg) => arg
            .parse()
            .map_err(|e| format!("{arg:?} is not an address such as 127.0.0.1:0: {e}"))?,
        None => SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    let listener = TcpListener::bind(addr).await?;
    // A path parameter, as the check-in router's `/{token}`, so routing costs alike; any
    // other path (the readiness poll's `/healthz` included) is answered the same.
    let app = Router::new()
        .route("/{token}", get(accepted).post(accepted))
        .fallback(accepted);
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on {}", listener.local_addr()?)?;
    stdout.flush()?;
    axum::serve(listener, app).await?;
    Ok(())
}

async fn accepted() -> StatusCode {
    StatusCode::ACCEPTED
}
