//! Check-ins through `SnitchService` on one store, for counting their instructions with
//! valgrind (row 7 of `examples/bench.rs`): instruction counts are stable where times on a
//! shared machine are not.
//!
//! ```sh
//! cargo build --release --example check_in_instructions
//! valgrind --tool=callgrind --dump-before='*measured_check_ins*' \
//!     --dump-before='*measurement_finished*' --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/check_in_instructions sqlite --check-ins 100
//! ```
//!
//! It makes one case and one snitch on the chosen store (memory; a SQLite file in a
//! temporary directory; a fresh Postgres database `snitch_test_instructions_<random>` on
//! `--database-url`, dropped afterwards), checks in `--warm-up` times (statements
//! prepared, pools and caches filled), then `--check-ins` times one after another inside
//! [`measured_check_ins`], the function the profiler is told to measure. Everything runs
//! on one current-thread runtime, so the async work of a check-in happens inside that
//! function's `block_on`.

use std::str::FromStr;
use std::sync::Arc;

use clap::{Parser, ValueEnum};
use snitch::core::{RandomTokens, TokenSource};
use snitch::prelude::{
    Case, CaseId, Outcome, SnitchFields, SnitchService, Storage, SystemClock, Token,
};
use snitch::store::memory::MemoryStorage;
use snitch::store::postgres::{PgStorage, PgStorageOptions};
use snitch::store::sqlite::{SqliteStorage, SqliteStorageOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// How long the stores' check-in caches keep a case (a server's default: a second). Under
/// valgrind a check-in takes fifty times as long, so a second's case ran out every few
/// dozen check-ins, and how many read it again (and split the batches of `--snitches`)
/// depended on how busy the machine was: counts of one build varied by half. A case
/// read once, as a real server's is for thousands of check-ins, counts the same.
const CASE_TTL: std::time::Duration = std::time::Duration::from_secs(3600);
/// Connections of the SQLite and Postgres pools: more than one, as a server has, and few
/// enough that the warm-up prepares the statements on each.
const POOL_CONNECTIONS: u32 = 2;

/// Runs check-ins of one snitch through the service on one store.
#[derive(Debug, Parser)]
struct Args {
    /// The store.
    #[arg(value_enum)]
    store: StoreChoice,
    /// Check-ins inside `measured_check_ins`.
    #[arg(long, default_value_t = 100)]
    check_ins: usize,
    /// Check-ins before it, not measured.
    #[arg(long, default_value_t = 20)]
    warm_up: usize,
    /// Snitches checked in at once: each of the check-ins (and of the warm-up's) is one
    /// check-in of every snitch, all awaited together, so a store that groups concurrent
    /// saves (SQLite, Postgres) saves them in batches of this size, as under load.
    #[arg(long, default_value_t = 1)]
    snitches: usize,
    /// The PostgreSQL server for `postgres` [default: $DATABASE_URL, else
    /// postgres://postgres@127.0.0.1:5432/postgres].
    #[arg(long)]
    database_url: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StoreChoice {
    Memory,
    Sqlite,
    Postgres,
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match args.store {
        StoreChoice::Memory => run(&runtime, &args, Arc::new(MemoryStorage::new())),
        StoreChoice::Sqlite => {
            let dir = tempfile::Builder::new()
                .prefix("snitch-instructions-")
                .tempdir()?;
            let path = dir.path().join("instructions.db");
            let pool = runtime.block_on(async {
                let pool = snitch::store::sqlite::connect(&path, POOL_CONNECTIONS).await?;
                snitch::store::sqlite::MIGRATOR.run(&pool).await?;
                Ok::<_, BoxError>(pool)
            })?;
            let options = SqliteStorageOptions::default().with_case_ttl(CASE_TTL);
            let storage = SqliteStorage::with_options(pool.clone(), options);
            let result = run(&runtime, &args, Arc::new(storage));
            runtime.block_on(pool.close());
            result
        }
        StoreChoice::Postgres => {
            let server_url = args
                .database_url
                .clone()
                .or_else(|| std::env::var("DATABASE_URL").ok())
                .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
            let server = PgConnectOptions::from_str(&server_url)?;
            let name = format!("snitch_test_instructions_{}", RandomTokens.new_token());
            runtime.block_on(admin(&server, &format!("CREATE DATABASE {name}")))?;
            let result = runtime
                .block_on(async {
                    let pool = PgPoolOptions::new()
                        .max_connections(POOL_CONNECTIONS)
                        .connect_with(server.clone().database(&name))
                        .await?;
                    snitch::store::postgres::MIGRATOR.run(&pool).await?;
                    Ok::<_, BoxError>(pool)
                })
                .and_then(|pool| {
                    let options = PgStorageOptions::default().with_case_ttl(CASE_TTL);
                    let storage = PgStorage::with_options(pool.clone(), options);
                    let result = run(&runtime, &args, Arc::new(storage));
                    runtime.block_on(pool.close());
                    result
                });
            let dropped = runtime.block_on(admin(
                &server,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            ));
            result.and(dropped)
        }
    }
}

/// One statement on the server's default database (creating or dropping ours).
async fn admin(server: &PgConnectOptions, sql: &str) -> Result<(), BoxError> {
    let mut connection = PgConnection::connect_with(server).await?;
    connection.execute(sql).await?;
    connection.close().await?;
    Ok(())
}

/// Makes the case and the snitch, warms up, then runs the measured check-ins.
fn run(
    runtime: &tokio::runtime::Runtime,
    args: &Args,
    storage: Arc<dyn Storage>,
) -> Result<(), BoxError> {
    let service = SnitchService::new(storage, Arc::new(SystemClock));
    let tokens = runtime.block_on(async {
        let mut case = Case::new(CaseId::parse("instructions").map_err(|v| v.message)?);
        case.plan.max_snitches = u32::try_from(args.snitches).unwrap_or(u32::MAX).max(1);
        service.storage().upsert_case(&case).await?;
        let mut tokens = Vec::with_capacity(args.snitches);
        for n in 0..args.snitches.max(1) {
            let fields = SnitchFields {
                name: Some(format!("nightly backup {n}")),
                interval: Some("daily".into()),
                tags: Some(vec!["bench".into(), "prod".into()]),
                ..Default::default()
            };
            tokens.push(service.create(&case, &fields).await?.token().to_string());
        }
        for _ in 0..args.warm_up {
            check_in_all(&service, &tokens).await?;
        }
        Ok::<_, BoxError>(tokens)
    })?;
    let versions = |service: &SnitchService| {
        runtime.block_on(async {
            let mut sum = 0;
            for token in &tokens {
                let token = Token::parse(token).map_err(|e| e.to_string())?;
                let snitch = service.storage().snitch(&token).await?;
                sum += snitch.ok_or("the snitch is not stored")?.version();
            }
            Ok::<_, BoxError>(sum)
        })
    };
    let before = versions(&service)?;
    measured_check_ins(runtime, &service, &tokens, args.check_ins)?;
    measurement_finished();
    // Each check-in is one save of its snitch: the count measured is that of as many
    // stored check-ins.
    let saved = versions(&service)? - before;
    let expected = (args.check_ins * tokens.len()) as u64;
    if saved != expected {
        return Err(format!("{saved} saves for {expected} check-ins").into());
    }
    println!(
        "{expected} check-ins measured on {:?}, {} snitches at once (after {} rounds to warm up)",
        args.store,
        tokens.len(),
        args.warm_up
    );
    Ok(())
}

/// One check-in of each snitch, all awaited together.
async fn check_in_all(service: &SnitchService, tokens: &[String]) -> Result<(), BoxError> {
    if let [token] = tokens {
        // Alone, as the benchmark's row 7 counts it: no `join_all` around it.
        service.check_in(token, Outcome::Success, None).await?;
        return Ok(());
    }
    let check_ins = tokens
        .iter()
        .map(|token| service.check_in(token, Outcome::Success, None));
    for result in futures::future::join_all(check_ins).await {
        result?;
    }
    Ok(())
}

/// The measured part: `count` rounds of one check-in of each of `tokens`, a round awaited
/// to its answers (stored, as the store defines it) before the next. Never inlined, so
/// that valgrind can name it (`--dump-before`, or `--toggle-collect` for this thread
/// alone).
#[inline(never)]
fn measured_check_ins(
    runtime: &tokio::runtime::Runtime,
    service: &SnitchService,
    tokens: &[String],
    count: usize,
) -> Result<(), BoxError> {
    runtime.block_on(async {
        for _ in 0..count {
            check_in_all(service, tokens).await?;
        }
        Ok(())
    })
}

/// Called right after [`measured_check_ins`] returns: valgrind's `--dump-before` of this
/// function ends the measured window. (Callgrind 3.19 does not dump after a function that
/// also triggered a dump before it, so `--dump-after` cannot end the window.)
#[inline(never)]
fn measurement_finished() {
    // Not removed as a call without effects.
    std::hint::black_box(());
}
