//! Snitch: a monitor of scheduled jobs, compatible with Dead Man's Snitch's v1 API.
//!
//! A job (a cron task, a backup, a queue worker) checks in at a secret URL once per
//! interval; when it misses an interval its snitch goes `failed` and its owners are
//! alerted. This facade re-exports the parts so that a host needs one dependency:
//!
//! - [`core`]: the domain: snitches, periods, the state machine, the [`SnitchService`],
//!   and the [`Storage`], [`Clock`] and [`Notifier`] traits;
//! - [`http`]: the v1 API and check-in routers for axum;
//! - [`store::memory`], [`store::sqlite`], [`store::postgres`]: the in-memory, SQLite and
//!   PostgreSQL stores;
//! - [`runtime`]: [`SnitchRuntime`], the runtime a host application embeds (routers plus the
//!   scheduler, dispatcher and key refresh on the host's tokio runtime);
//! - [`server`]: a runnable server (configuration, scheduler, graceful shutdown);
//! - [`admin`]: its admin commands (cases, API keys, migrations);
//! - [`serve`]: its accept loop with timeouts and a connection cap.
//!
//! ```
//! use std::sync::Arc;
//! use snitch::{Case, CaseId, Outcome, SnitchFields, SnitchService, SystemClock, Storage};
//! use snitch::store::memory::MemoryStorage;
//!
//! # tokio_test_block(async {
//! let storage = Arc::new(MemoryStorage::new());
//! let case = Case::new(CaseId::parse("acme").unwrap());
//! storage.upsert_case(&case).await.unwrap();
//! let service = SnitchService::new(storage, Arc::new(SystemClock));
//!
//! let fields = SnitchFields {
//!     name: Some("nightly backup".into()),
//!     interval: Some("daily".into()),
//!     ..Default::default()
//! };
//! let snitch = service.create(&case, &fields).await.unwrap();
//! let snitch = service.check_in(snitch.token.as_str(), Outcome::Success, None).await.unwrap();
//! assert_eq!(snitch.status().as_str(), "healthy");
//! # });
//! # fn tokio_test_block(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

pub mod admin;
pub mod runtime;
pub mod serve;
pub mod server;

// Not `Snitch`: that is the domain type of `snitch_core`.
pub use runtime::{BuildError, SnitchBuilder, SnitchRuntime};

pub use snitch_core as core;
pub use snitch_core::*;
pub use snitch_http as http;

/// The Rust snippets of README.md, compiled and run as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The storage backends.
pub mod store {
    pub use snitch_store_memory as memory;
    pub use snitch_store_postgres as postgres;
    pub use snitch_store_sqlite as sqlite;
}
