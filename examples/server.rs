//! The Snitch server: `cargo run --release --example server [-- --config snitch.toml]`.
//!
//! With no `database_url` it keeps its data in the SQLite file `data_path` (default
//! `./snitch.db`, created if missing). With no configured case it makes a `demo` case and
//! prints its API key.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use snitch::server::{launch, process_env, Config};
use tokio::net::TcpListener;

#[derive(Parser)]
#[command(about = "Snitch: a monitor of scheduled jobs")]
struct Args {
    /// A TOML configuration file; every key can also be set as SNITCH_<KEY>.
    #[arg(long)]
    config: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,tower_http=info".into()),
        )
        .init();
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("snitch: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let text = match &args.config {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        None => String::new(),
    };
    let config = Config::parse(&text, process_env)?;
    let api = TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let check_in = TcpListener::bind(config.check_in_listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.check_in_listen))?;
    let running = launch(config.clone(), api, check_in, shutdown_signal()).await?;

    println!(
        "Snitch API:       {} (listening on {})",
        config.base_url(),
        running.api_addr
    );
    println!(
        "Snitch check-ins: {} (listening on {})",
        config.check_in_base(),
        running.check_in_addr
    );
    if let Some(key) = &running.demo_key {
        println!("No case configured: made case \"demo\" with this API key (shown once):");
        println!("  {key}");
    }
    if config.smtp_url.is_none() {
        tracing::info!("no smtp_url: alert e-mails go to the log");
    }
    running.wait().await?;
    Ok(())
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
