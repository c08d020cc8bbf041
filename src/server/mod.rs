//! A runnable Snitch server: configuration, store selection, listeners and graceful
//! shutdown over the [`SnitchRuntime`](crate::SnitchRuntime) runtime (which runs the
//! scheduler, the dispatcher and the key refresh). `examples/server.rs` is a thin command
//! line over [`launch`]; tests call [`launch`] with listeners on port 0.
//!
//! - `config.rs`: [`Config`] (the TOML file, `SNITCH_*` overrides, checks, derived options);
//! - `bootstrap.rs`: opening and migrating the store ([`open_storage`], [`open_postgres`],
//!   [`open_sqlite`]) and loading the configured cases;
//! - `launch.rs`: [`launch`], [`launch_with_clock`] and [`Running`].

pub(crate) mod bootstrap;
pub mod cli;
mod config;
mod launch;

#[cfg(feature = "postgres")]
pub use bootstrap::open_postgres;
#[cfg(feature = "sqlite")]
pub use bootstrap::open_sqlite;
pub use bootstrap::open_storage;
pub use config::{
    config_from_toml, env_from, process_env, CaseConfig, Config, LogFormat, StoreKind,
    StoreLocation,
};
pub use launch::{launch, launch_with_clock, Running};

pub use crate::runtime::MAX_SWEEP_SLEEP;

use crate::runtime::BuildError;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("invalid configuration: {0}")]
    /// The configuration is invalid, or asks for something this build cannot do.
    Config(String),
    #[error("storage failed at start-up: {0}")]
    /// The store failed at start.
    Storage(#[from] snitch_core::StorageError),
    #[error(transparent)]
    /// A listener failed.
    Io(#[from] std::io::Error),
}

impl From<BuildError> for ServerError {
    fn from(e: BuildError) -> Self {
        match e {
            BuildError::Storage(e) => ServerError::Storage(e),
            BuildError::Notifier(m) => ServerError::Config(m),
            BuildError::Liveness(e) => ServerError::Config(format!("cannot record liveness: {e}")),
        }
    }
}
