//! Snitch: a monitor of scheduled jobs, compatible with Dead Man's Snitch's v1 API.
//!
//! A job (a cron task, a backup, a queue worker) checks in at a secret URL once per
//! interval; when it misses an interval its snitch goes `failed` and its owners are
//! alerted. This facade re-exports the parts so that a host needs one dependency:
//!
//! - [`prelude`]: the handful of types an embedder names (`use snitch::prelude::*;`);
//! - [`core`]: the domain: snitches, periods, the state machine, the
//!   [`SnitchService`](core::SnitchService), and the [`Storage`](core::Storage),
//!   [`Clock`](core::Clock) and [`Notifier`](core::Notifier) traits;
//! - [`http`]: the v1 API and check-in routers for axum;
//! - [`store`]: the in-memory, SQLite and PostgreSQL stores;
//! - [`runtime`]: [`SnitchRuntime`], the runtime a host application embeds (routers plus the
//!   scheduler, dispatcher and key refresh on the host's tokio runtime);
//! - `server`: a runnable server (configuration, scheduler, graceful shutdown);
//! - `admin`: its admin commands (cases, API keys, migrations);
//! - `serve`: its accept loop with timeouts and a connection cap.
//!
//! # Cargo features
//!
//! All on by default; an embedder turns off what it does not use
//! (`default-features = false, features = ["sqlite"]`):
//!
//! - `postgres`, `sqlite`: the stores `store::postgres` and `store::sqlite` (the in-memory
//!   store is always there);
//! - `smtp`: the built-in SMTP notifier ([`SnitchBuilder::smtp`](runtime::SnitchBuilder),
//!   the server's `smtp_url`); without it e-mail alerts go to the log or to a notifier of
//!   the host's;
//! - `webhooks`: the built-in webhook notifier (reqwest); without it, and without a
//!   notifier of the host's, each webhook delivery fails at once, recorded with a detail
//!   naming the feature (the server refuses a configuration with webhooks);
//! - `server`: the modules `server`, `admin` and `serve` (configuration file, environment,
//!   listeners, admin commands).
//!
//! ```
//! use std::sync::Arc;
//! use snitch::prelude::*;
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
//! let snitch = service.check_in(snitch.token().as_str(), Outcome::Success, None).await.unwrap();
//! assert_eq!(snitch.status().as_str(), "healthy");
//! # });
//! # fn tokio_test_block(f: impl std::future::Future<Output = ()>) {
//! #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
//! # }
//! ```

#![warn(missing_docs)]

#[cfg(feature = "server")]
pub mod admin;
pub mod runtime;
#[cfg(feature = "server")]
pub mod serve;
#[cfg(feature = "server")]
pub mod server;

// Not `Snitch`: that is the domain type of `snitch_core`.
pub use runtime::{BuildError, SnitchBuilder, SnitchRuntime};

pub use snitch_core as core;
/// Check-ins by e-mail (feature `email-check-ins`).
#[cfg(feature = "email-check-ins")]
pub use snitch_email_in as email_in;
pub use snitch_http as http;
pub use snitch_notify as notify;

/// The types an embedder names most: the runtime and its builder, the store and clock
/// traits, cases, snitches and check-in outcomes. Everything else is under [`core`],
/// [`http`] and [`notify`].
///
/// ```
/// use snitch::prelude::*;
/// ```
pub mod prelude {
    pub use crate::runtime::{BuildError, SnitchBuilder, SnitchRuntime};
    // The option types the builder takes.
    pub use snitch_core::{
        Case, CaseId, Clock, Delivery, Event, ManualClock, Notifier, NotifyError, Outcome, Plan,
        Snitch, SnitchFields, SnitchService, Status, Storage, StorageError, SystemClock, Token,
    };
    #[cfg(feature = "ui")]
    pub use snitch_http::ui::UiConfig;
    pub use snitch_http::{ApiConfig, AuthFailureLimit, RateLimit};
    pub use snitch_notify::dispatcher::DispatcherOptions;
    #[cfg(feature = "webhooks")]
    pub use snitch_notify::webhook::WebhookOptions;
}

/// The Rust snippets of README.md, compiled and run as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The Rust snippets of docs/embedding.md, compiled and run as doc-tests.
#[cfg(doctest)]
#[doc = include_str!("../docs/embedding.md")]
struct EmbeddingDoctests;

/// The storage backends: [`memory`](store::memory) always, `sqlite` and `postgres` with
/// their features.
pub mod store {
    pub use snitch_store_memory as memory;
    #[cfg(feature = "postgres")]
    pub use snitch_store_postgres as postgres;
    #[cfg(feature = "sqlite")]
    pub use snitch_store_sqlite as sqlite;
}
