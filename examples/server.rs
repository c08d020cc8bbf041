//! The Snitch server: `cargo run --release --example server [-- --config snitch.toml]`.
//!
//! With no `database_url` it keeps its data in the SQLite file `data_path` (default
//! `./snitch.db`, created if missing). With no configured case it makes a `demo` case and
//! prints its API key.
//!
//! Admin commands (`cases list|create|update`, `keys create|list|revoke`, `migrate`) work
//! on the store the same configuration names; `serve` is the default. See
//! `snitch::admin`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use snitch::admin::{AdminCommand, CaseOptions};
use snitch::server::{launch, process_env, Config, LogFormat};
use tokio::net::TcpListener;

/// Under check-in load the system allocator (glibc's malloc, shared by the runtime's
/// threads) took about a fifth of the server's time; mimalloc (version 2, see
/// Cargo.toml) keeps per-thread heaps.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "Snitch: a monitor of scheduled jobs")]
struct Args {
    /// A TOML configuration file; every key can also be set as SNITCH_<KEY>.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the server (the default).
    Serve,
    /// Lists, makes and changes cases.
    #[command(subcommand)]
    Cases(CasesCommand),
    /// Makes, lists and revokes API keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Runs the store's migrations and exits.
    Migrate,
}

#[derive(Subcommand)]
enum CasesCommand {
    /// Lists every case.
    List,
    /// Makes a case.
    Create {
        name: String,
        #[command(flatten)]
        options: CaseArgs,
    },
    /// Changes the given settings of a case.
    Update {
        name: String,
        #[command(flatten)]
        options: CaseArgs,
    },
}

#[derive(clap::Args)]
struct CaseArgs {
    /// Team members who get alerts, comma-separated (an empty string clears them).
    #[arg(long, value_name = "a@x,b@y")]
    members: Option<String>,
    /// The most snitches the case may hold [new cases: 100].
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    max_snitches: Option<String>,
    /// Whether error check-ins make a snitch errored [new cases: true].
    #[arg(long, value_name = "true|false")]
    error_notices: Option<String>,
    /// On hold: the API refuses every call, check-ins still count [new cases: false].
    #[arg(long, value_name = "true|false")]
    on_hold: Option<String>,
}

impl From<CaseArgs> for CaseOptions {
    fn from(a: CaseArgs) -> Self {
        let mut options = CaseOptions::default();
        options.members = a.members;
        options.max_snitches = a.max_snitches;
        options.error_notices = a.error_notices;
        options.on_hold = a.on_hold;
        options
    }
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Makes an API key for a case and prints it (only this once).
    Create {
        #[arg(long, value_name = "NAME")]
        case: String,
        /// What the key is for.
        #[arg(long, default_value = "")]
        label: String,
    },
    /// Lists a case's keys: id, label, prefix, created, last used, revoked (never a key).
    List {
        #[arg(long, value_name = "NAME")]
        case: String,
    },
    /// Revokes a key by its id (as `keys list` shows it).
    Revoke { id: String },
}

impl Command {
    fn admin(self) -> Option<AdminCommand> {
        Some(match self {
            Command::Serve => return None,
            Command::Migrate => AdminCommand::Migrate,
            Command::Cases(CasesCommand::List) => AdminCommand::CasesList,
            Command::Cases(CasesCommand::Create { name, options }) => AdminCommand::CasesCreate {
                name,
                options: options.into(),
            },
            Command::Cases(CasesCommand::Update { name, options }) => AdminCommand::CasesUpdate {
                name,
                options: options.into(),
            },
            Command::Keys(KeysCommand::Create { case, label }) => {
                AdminCommand::KeysCreate { case, label }
            }
            Command::Keys(KeysCommand::List { case }) => AdminCommand::KeysList { case },
            Command::Keys(KeysCommand::Revoke { id }) => AdminCommand::KeysRevoke { id },
        })
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let admin = args.command.and_then(Command::admin);
    // Admin commands print their results on stdout: logs go to stderr, warnings only
    // unless RUST_LOG says otherwise.
    let default_filter = if admin.is_some() {
        "warn"
    } else {
        "info,tower_http=info"
    };
    let config = match read_config(args.config.as_ref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("snitch: {e}");
            return ExitCode::FAILURE;
        }
    };
    init_logging(config.log_format, default_filter, admin.is_some());
    let result = match admin {
        Some(command) => snitch::admin::run(
            &config,
            &command,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        )
        .await
        .map_err(Into::into),
        None => serve(config).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("snitch: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Installs the log subscriber: `RUST_LOG` or `default_filter`, as `log_format` says;
/// to stderr for admin commands (their results go to stdout).
fn init_logging(format: LogFormat, default_filter: &str, to_stderr: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
    // Colours only for a person at a terminal: escape codes in a log file or a pipe are
    // noise, and cost every line its formatting.
    let ansi = if to_stderr {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    match (format, to_stderr) {
        (LogFormat::Json, true) => builder
            .json()
            .flatten_event(true)
            .with_writer(std::io::stderr)
            .init(),
        (LogFormat::Json, false) => builder.json().flatten_event(true).init(),
        (LogFormat::Pretty, true) => builder.with_writer(std::io::stderr).init(),
        (LogFormat::Pretty, false) => builder.init(),
    }
}

fn read_config(path: Option<&PathBuf>) -> Result<Config, Box<dyn std::error::Error>> {
    let text = match path {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?,
        None => String::new(),
    };
    Ok(Config::parse(&text, process_env)?)
}

async fn serve(config: Config) -> Result<(), Box<dyn std::error::Error>> {
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
    if config.ui && cfg!(feature = "ui") {
        println!(
            "Snitch dashboard: {}/ui/",
            config.base_url().trim_end_matches('/')
        );
    }
    if let Some(addr) = running.metrics_addr {
        println!("Snitch metrics:   http://{addr}/metrics");
    }
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
