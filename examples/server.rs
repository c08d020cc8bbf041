//! The Snitch server: `cargo run --release --example server [-- --config snitch.toml]`.
//!
//! With no `database_url` it keeps its data in the SQLite file `data_path` (default
//! `./snitch.db`, created if missing). With no configured case it makes a `demo` case and
//! prints its API key.
//!
//! Admin commands (`cases list|create|update`, `keys create|list|revoke`, `migrate`) work
//! on the store the same configuration names; `serve` is the default. The same commands
//! are the `snitch` binary's (crate `snitch-cli`); see `snitch::server::cli`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

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
    command: Option<snitch::server::cli::Command>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    snitch::server::cli::main(args.config.as_deref(), args.command)
}
