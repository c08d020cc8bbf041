//! `snitch`: the job wrapper (`snitch run`) and, with the default `server` feature, the
//! Snitch server and its admin commands (`serve`, `cases`, `keys`, `migrate`).

// The wrapper times a real job on this machine (its duration, `--timeout`, the report
// budget): there is no domain clock to move, unlike the monitor's own rules.
#![allow(clippy::disallowed_methods)]

mod run;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[cfg(feature = "server")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "snitch",
    version,
    about = "Snitch: a monitor of scheduled jobs"
)]
struct Cli {
    /// A TOML configuration file for the server commands; every key can also be set in
    /// the environment, e.g. SNITCH_LISTEN for listen.
    #[cfg(feature = "server")]
    #[arg(long, global = true)]
    config: Option<std::path::PathBuf>,
    /// With no command, `snitch` serves (as `snitch serve` does); built without the server,
    /// it prints its usage.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a command and reports its run to Snitch.
    Run(run::RunArgs),
    #[cfg(feature = "server")]
    #[command(flatten)]
    Server(snitch::server::cli::Command),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Run(args)) => run::run(args),
        #[cfg(feature = "server")]
        Some(Command::Server(command)) => {
            snitch::server::cli::main(cli.config.as_deref(), Some(command))
        }
        #[cfg(feature = "server")]
        None => snitch::server::cli::main(cli.config.as_deref(), None),
        #[cfg(not(feature = "server"))]
        None => {
            use clap::CommandFactory;
            let _ = Cli::command().print_help();
            ExitCode::from(2)
        }
    }
}
