//! A database of its own for each test that needs Postgres (feature `test-support`), the
//! one helper both this crate's tests and the facade's server tests use.
//!
//! The server is `DATABASE_URL`, or the local one `scripts/ensure-postgres.sh` starts. A
//! test that cannot reach it fails: a skipped test would pass in silence.
//!
//! - [`migrated`]: a copy of a template database that holds every migration of
//!   [`MIGRATOR`] (`snitch_tpl_<hash of the migrations>`, made once under an advisory lock
//!   and kept for later runs): copying takes milliseconds where migrating took a good part
//!   of a second.
//! - [`empty`]: no tables, for what runs the migrations itself (a server starting, the
//!   `migrate` command).
//!
//! A [`TestDatabase`] drops its database when it goes out of scope, at the end of the test
//! whether it passed or panicked. What a killed or aborted test process leaves behind
//! (databases named `snitch_test_p<pid>_…` of a process no longer running) is dropped by
//! the next test process that makes one.

use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

use snitch_core::{RandomTokens, TokenSource};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgConnection, PgPool};

use crate::MIGRATOR;

/// The server `scripts/ensure-postgres.sh` starts, when `DATABASE_URL` is not set.
pub const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A test's own database: its name, a URL for servers and a pool for the test's queries.
/// Derefs to the pool. Dropped (with `FORCE`, so connections still open do not keep it)
/// when this value is.
#[derive(Debug)]
pub struct TestDatabase {
    /// The database's name (`snitch_test_p<pid>_<random>`).
    pub name: String,
    /// A URL of the database, for a server or a command.
    pub url: String,
    /// A pool on it.
    pub pool: PgPool,
    server: PgConnectOptions,
}

impl Deref for TestDatabase {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.pool
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let server = self.server.clone();
        let name = std::mem::take(&mut self.name);
        // A thread and a runtime of its own: Drop cannot await, and may run on the
        // test's runtime, which must not be blocked waiting on itself.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let mut admin = PgConnection::connect_with(&server)
                    .await
                    .map_err(|e| e.to_string())?;
                admin
                    .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                    .await
                    .map_err(|e| e.to_string())?;
                admin.close().await.ok();
                Ok::<_, String>(())
            })
        })
        .join();
        // Not a failure of the test: the next test process drops what is left.
        if let Ok(Err(e)) | Err(e) = dropped.map_err(|_| "panicked".to_owned()) {
            eprintln!("test database {}: not dropped now ({e})", self.url);
        }
    }
}

/// A new database holding every migration, with a pool of up to `connections` on it.
pub async fn migrated(connections: u32) -> TestDatabase {
    let (server, mut admin) = connect_to_server().await;
    let template = migrated_template(&mut admin, &server).await;
    create(server, admin, Some(&template), connections).await
}

/// A new database with no tables, with a pool of up to `connections` on it.
pub async fn empty(connections: u32) -> TestDatabase {
    let (server, admin) = connect_to_server().await;
    create(server, admin, None, connections).await
}

async fn connect_to_server() -> (PgConnectOptions, PgConnection) {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_DATABASE_URL.to_owned());
    let server = PgConnectOptions::from_str(&url)
        .unwrap_or_else(|e| panic!("DATABASE_URL {url:?} is not a Postgres URL: {e}"));
    let mut admin = PgConnection::connect_with(&server)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot reach Postgres at {url}: {e}\n\
                 start it with `bash scripts/ensure-postgres.sh`, or set DATABASE_URL"
            )
        });
    drop_databases_of_ended_processes(&mut admin).await;
    (server, admin)
}

async fn create(
    server: PgConnectOptions,
    mut admin: PgConnection,
    template: Option<&str>,
    connections: u32,
) -> TestDatabase {
    let name = format!(
        "snitch_test_p{}_{}",
        std::process::id(),
        RandomTokens.new_token().as_str()
    );
    let statement = match template {
        Some(template) => format!("CREATE DATABASE {name} TEMPLATE {template}"),
        None => format!("CREATE DATABASE {name}"),
    };
    admin
        .execute(statement.as_str())
        .await
        .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
    admin.close().await.ok();
    let options = server.clone().database(&name);
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .connect_with(options.clone())
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test database {name}: {e}"));
    TestDatabase {
        url: options.to_url_lossy().to_string(),
        name,
        pool,
        server,
    }
}

/// The template database holding every migration of [`MIGRATOR`], made by the first test
/// that needs it (under an advisory lock, so concurrent tests and processes make it once).
/// It counts as made only once it is marked a template, after its migrations ran.
async fn migrated_template(admin: &mut PgConnection, server: &PgConnectOptions) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for migration in MIGRATOR.iter() {
        migration.version.hash(&mut hasher);
        migration.checksum.hash(&mut hasher);
    }
    let name = format!("snitch_tpl_{:016x}", hasher.finish());
    if is_template(admin, &name).await {
        return name;
    }
    // One lock for every maker of a template: they take a second, once per migration set.
    admin
        .execute("SELECT pg_advisory_lock(7236561902)")
        .await
        .expect("the template lock");
    if !is_template(admin, &name).await {
        admin
            .execute(format!("DROP DATABASE IF EXISTS {name}").as_str())
            .await
            .unwrap_or_else(|e| panic!("cannot drop a half-made template {name}: {e}"));
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .unwrap_or_else(|e| panic!("cannot create the template {name}: {e}"));
        let mut conn = PgConnection::connect_with(&server.clone().database(&name))
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the template {name}: {e}"));
        MIGRATOR
            .run(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("cannot migrate the template {name}: {e}"));
        conn.close().await.ok();
        admin
            .execute(format!("ALTER DATABASE {name} IS_TEMPLATE true").as_str())
            .await
            .unwrap_or_else(|e| panic!("cannot mark the template {name}: {e}"));
    }
    admin
        .execute("SELECT pg_advisory_unlock(7236561902)")
        .await
        .expect("the template unlock");
    name
}

/// Whether database `name` exists and is marked a template.
async fn is_template(admin: &mut PgConnection, name: &str) -> bool {
    sqlx::query_scalar::<_, bool>("SELECT datistemplate FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_optional(admin)
        .await
        .unwrap_or_else(|e| panic!("cannot look for the template {name}: {e}"))
        == Some(true)
}

/// Drops the test databases that processes no longer running left behind (a test process
/// killed, or aborted before its values were dropped), once per test process. A database
/// of a live process (one running now, maybe another clone's tests) is never touched.
async fn drop_databases_of_ended_processes(admin: &mut PgConnection) {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::SeqCst) {
        return;
    }
    let names: Vec<(String,)> =
        sqlx::query_as("SELECT datname FROM pg_database WHERE datname LIKE 'snitch\\_test\\_p%'")
            .fetch_all(&mut *admin)
            .await
            .unwrap_or_default();
    for (name,) in names {
        let pid = name
            .strip_prefix("snitch_test_p")
            .and_then(|rest| rest.split('_').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        let ended = pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists());
        if ended {
            // Best effort: one still in use by a straggler is dropped next time.
            let _ = admin
                .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                .await;
        }
    }
}
