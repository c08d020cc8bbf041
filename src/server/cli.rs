//! The server's command line, shared by the `snitch` binary (crate `snitch-cli`) and
//! `cargo run --example server`: `serve` (the default), `cases list|create|update`,
//! `keys create|list|revoke` and `migrate`, on the store the configuration names.

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;
use tokio::net::TcpListener;

use crate::admin::{AdminCommand, CaseOptions};
use crate::server::{launch, process_env, Config, LogFormat};

/// The server and its admin commands.
#[derive(Debug, Subcommand)]
pub enum Command {
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

/// `cases …`
#[derive(Debug, Subcommand)]
pub enum CasesCommand {
    /// Lists every case.
    List,
    /// Makes a case.
    Create {
        /// The case\'s name.
        name: String,
        /// Its settings.
        #[command(flatten)]
        options: CaseArgs,
    },
    /// Changes the given settings of a case.
    Update {
        /// The case\'s name.
        name: String,
        /// Its settings.
        #[command(flatten)]
        options: CaseArgs,
    },
}

/// A case's settings on the command line.
#[derive(Debug, clap::Args)]
pub struct CaseArgs {
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
        CaseOptions {
            members: a.members,
            max_snitches: a.max_snitches,
            error_notices: a.error_notices,
            on_hold: a.on_hold,
        }
    }
}

/// `keys …`
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Makes an API key for a case and prints it (only this once).
    Create {
        /// The case\'s name.
        #[arg(long, value_name = "NAME")]
        case: String,
        /// What the key is for.
        #[arg(long, default_value = "")]
        label: String,
    },
    /// Lists a case's keys: id, label, prefix, created, last used, revoked (never a key).
    List {
        /// The case\'s name.
        #[arg(long, value_name = "NAME")]
        case: String,
    },
    /// Revokes a key by its id (as `keys list` shows it).
    Revoke {
        /// The key's id.
        id: String,
    },
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

/// Runs `command` with the configuration file `config` (none: defaults and the
/// environment): the server until SIGINT or SIGTERM, or one admin command.
pub fn main(config: Option<&Path>, command: Option<Command>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("snitch: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(config, command))
}

async fn run(config: Option<&Path>, command: Option<Command>) -> ExitCode {
    let admin = command.and_then(Command::admin);
    // Admin commands print their results on stdout: logs go to stderr, warnings only
    // unless RUST_LOG says otherwise.
    let default_filter = if admin.is_some() {
        "warn"
    } else {
        "info,tower_http=info"
    };
    let config = match read_config(config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("snitch: {e}");
            return ExitCode::FAILURE;
        }
    };
    init_logging(config.log_format, default_filter, admin.is_some());
    let result = match admin {
        Some(command) => crate::admin::run(
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

fn read_config(path: Option<&Path>) -> Result<Config, Box<dyn std::error::Error>> {
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
    if let (Some(addr), Some(domain)) = (running.email_addr, &config.check_in_email_domain) {
        println!("Snitch e-mail check-ins: <token>@{domain} (SMTP on {addr})");
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
