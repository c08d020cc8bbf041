//! A local webhook receiver that prints every hook it receives and answers 204: register
//! it with `POST /v1/webhooks` (and `allow_private_webhooks = true`, since it is on
//! loopback) to see alerts arrive. With `--secret S` it also checks `Snitch-Signature`.
//!
//! `cargo run --example webhook_receiver -- 127.0.0.1:9000 [--secret S]`

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use snitch::notify::webhook::verify_signature;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args
        .first()
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:9000".into());
    let secret = args
        .iter()
        .position(|a| a == "--secret")
        .and_then(|i| args.get(i + 1).cloned());
    let app = Router::new().fallback(post(move |headers: HeaderMap, body: Bytes| {
        let secret = secret.clone();
        async move {
            let header = |name: &str| {
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-")
                    .to_owned()
            };
            println!("--- {} {}", header("snitch-event-id"), header("user-agent"));
            if let Some(secret) = &secret {
                let valid = verify_signature(secret, &header("snitch-signature"), &body);
                println!("signature valid: {valid}");
                if !valid {
                    return StatusCode::UNAUTHORIZED;
                }
            }
            println!("{}", String::from_utf8_lossy(&body));
            StatusCode::NO_CONTENT
        }
    }));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!(
        "webhook receiver listening on http://{}",
        listener.local_addr()?
    );
    axum::serve(listener, app).await
}
