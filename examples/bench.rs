//! The benchmarks of BENCHMARKS.md: one function per row, each printing
//! its figure, its target and whether it was met. A miss is a finding, not a failure, and
//! a row that cannot run (say, Postgres is down) says why in its figure: the command exits
//! 0 unless it cannot write its report.
//!
//! ```sh
//! cargo run --release --example bench                 # every row, writes BENCHMARKS.md
//! cargo run --release --example bench -- --quick      # small sizes, prints only
//! cargo run --release --example bench -- --only sweep-memory,api-list
//! cargo run --release --example bench -- --only check-in-sqlite,sweep-sqlite
//! ```
//!
//! Everything runs on 127.0.0.1. The check-in rows start the release server
//! (`examples/server.rs`) and the baseline (`examples/baseline.rs`) as separate processes,
//! found next to this executable (`scripts/bench.sh` builds them), and load them with
//! `wrk`; the other rows run the store or the server in this process. The Postgres rows use a fresh database
//! `snitch_test_bench_<random>` on `--database-url` (default `$DATABASE_URL`, else the local
//! server of `scripts/ensure-postgres.sh`) and drop it afterwards. The SQLite rows use a
//! fresh file in a temporary directory (`$TMPDIR`), removed afterwards.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use clap::{Parser, ValueEnum};
use hyper::Uri;
use snitch::core::clock::monotonic_now;
use snitch::core::machine;
use snitch::core::{
    CheckIn, CronSchedule, EmailAddress, ExpectedRuns, Interval, RandomTokens, SnitchName, Tags,
    Timestamp, TokenSource,
};
use snitch::prelude::{
    Case, CaseId, Clock, ManualClock, Outcome, Snitch, SnitchFields, SnitchService, Storage,
    SystemClock, Token,
};
use snitch::server::{launch_with_clock, CaseConfig, Config, Running, StoreKind};
use snitch::store::memory::MemoryStorage;
use snitch::store::postgres::{PgStorage, MIGRATOR};
use snitch::store::sqlite::SqliteStorage;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The allocator the server binaries ship with, so the rows run in this process (3a–3c,
/// 4, 5, 6) measure the library as the server runs it. On row 3a, four runs each:
/// glibc's malloc 0.43–0.56 s, mimalloc 0.467–0.470 s.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const DEFAULT_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";
const DEFAULT_OUTPUT: &str = "BENCHMARKS.md";
/// Where the hand-written part of BENCHMARKS.md starts; it is kept when the file is
/// generated again.
const FINDINGS_HEADING: &str = "## Findings";
/// Connections of the Postgres sweep row's pool.
const PG_CONNECTIONS: u32 = 32;
/// Connections of the pool that fills the SQLite sweep row's file.
const SQLITE_FILL_CONNECTIONS: u32 = 8;
/// How far ahead of the alert boundary the shifted clock is set once all is ready.
const ALERT_LEAD: chrono::Duration = chrono::Duration::seconds(2);
/// The API key of the API row's case.
const API_KEY: &str = "bench-key-00000000000000000000000000001";
/// The rate limit of the API row: far above anything the row sends.
const NO_RATE_LIMIT: u32 = 1_000_000;

/// Measures Snitch against the targets of the rows of BENCHMARKS.md.
#[derive(Debug, Parser)]
struct Args {
    /// Small sizes and short runs, to check every row end to end (writes no file unless
    /// --output is given).
    #[arg(long)]
    quick: bool,
    /// Runs only these rows (comma-separated; writes no file unless --output is given).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<RowId>,
    /// The PostgreSQL server for the Postgres rows [default: $DATABASE_URL, else
    /// postgres://postgres@127.0.0.1:5432/postgres].
    #[arg(long)]
    database_url: Option<String>,
    /// Where to write the table [default: BENCHMARKS.md for a full run of every row].
    #[arg(long)]
    output: Option<PathBuf>,
    /// Rows 3d, 3e and 8 without their webhooks (to see what delivering them costs the
    /// sweep); not for the table.
    #[arg(long)]
    no_webhooks: bool,
    /// The pause between two scrapes of `/metrics` in rows 3d, 3e and 8 [default: 5].
    #[arg(long, default_value_t = 5)]
    scrape_pause_ms: u64,
}

/// The rows, in the order of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RowId {
    CheckInMemory,
    CheckInPostgres,
    CheckInPostgresOneToken,
    CheckInSqlite,
    CheckInPostgresLong,
    SweepMemory,
    SweepPostgres,
    SweepSqlite,
    SweepSeenPostgres,
    SweepSeenSqlite,
    Memory,
    AlertDelay,
    ApiList,
    Instructions,
    MillionPostgres,
}

impl RowId {
    const ALL: [RowId; 15] = [
        RowId::CheckInMemory,
        RowId::CheckInPostgres,
        RowId::CheckInPostgresOneToken,
        RowId::CheckInSqlite,
        RowId::CheckInPostgresLong,
        RowId::SweepMemory,
        RowId::SweepPostgres,
        RowId::SweepSqlite,
        RowId::SweepSeenPostgres,
        RowId::SweepSeenSqlite,
        RowId::Memory,
        RowId::AlertDelay,
        RowId::ApiList,
        RowId::Instructions,
        RowId::MillionPostgres,
    ];

    /// The order rows run in: the memory row first, while the heap holds nothing freed
    /// that the snitches could reuse (which would hide their cost).
    /// Row 8 comes after rows 2 and 6, whose figures it is compared with (it measures
    /// them itself when they did not run).
    const RUN_ORDER: [RowId; 15] = [
        RowId::Memory,
        RowId::CheckInMemory,
        RowId::CheckInPostgres,
        RowId::CheckInPostgresOneToken,
        RowId::CheckInSqlite,
        RowId::CheckInPostgresLong,
        RowId::SweepMemory,
        RowId::SweepPostgres,
        RowId::SweepSqlite,
        RowId::SweepSeenPostgres,
        RowId::SweepSeenSqlite,
        RowId::AlertDelay,
        RowId::ApiList,
        RowId::Instructions,
        RowId::MillionPostgres,
    ];

    fn number(self) -> &'static str {
        match self {
            RowId::CheckInMemory => "1",
            RowId::CheckInPostgres => "2",
            RowId::CheckInPostgresOneToken => "2b",
            RowId::CheckInSqlite => "2c",
            RowId::CheckInPostgresLong => "2d",
            RowId::SweepMemory => "3a",
            RowId::SweepPostgres => "3b",
            RowId::SweepSqlite => "3c",
            RowId::SweepSeenPostgres => "3d",
            RowId::SweepSeenSqlite => "3e",
            RowId::Memory => "4",
            RowId::AlertDelay => "5",
            RowId::ApiList => "6",
            RowId::Instructions => "7",
            RowId::MillionPostgres => "8",
        }
    }

    fn title(self, sizes: &Sizes) -> String {
        match self {
            RowId::CheckInMemory => format!(
                "Check-in throughput, memory store ({} snitches, {} connections)",
                thousands(sizes.check_in_snitches),
                sizes.connections
            ),
            RowId::CheckInPostgres => format!(
                "Check-in throughput, Postgres store ({} snitches, {} connections)",
                thousands(sizes.check_in_snitches),
                sizes.connections
            ),
            RowId::CheckInPostgresOneToken => format!(
                "Check-ins on one token, Postgres store ({} connections), vs many tokens",
                sizes.connections
            ),
            RowId::CheckInSqlite => format!(
                "Check-in throughput, SQLite store ({} snitches, {} connections)",
                thousands(sizes.check_in_snitches),
                sizes.connections
            ),
            RowId::CheckInPostgresLong => format!(
                "Check-ins long enough for history trims and vacuum, Postgres store ({} \
                 snitches, {} connections, rounds of {} s)",
                thousands(sizes.check_in_snitches),
                sizes.connections,
                sizes.long_round.as_secs()
            ),
            RowId::SweepSeenPostgres => format!(
                "Sweep as users see it, Postgres store ({} snitches, {} due at each of {}, \
                 release server on the real clock, seen through `/metrics`)",
                thousands(sizes.sweep_seen.total),
                thousands(sizes.sweep_seen.due),
                boundaries_apart(&sizes.sweep_seen)
            ),
            RowId::SweepSeenSqlite => format!(
                "Sweep as users see it, SQLite store ({} snitches, {} due at each of {}, \
                 release server on the real clock, seen through `/metrics`)",
                thousands(sizes.sweep_seen.total),
                thousands(sizes.sweep_seen.due),
                boundaries_apart(&sizes.sweep_seen)
            ),
            RowId::MillionPostgres => format!(
                "{} snitches on Postgres, one release server ({} cases, one of {}; {} due at \
                 each of {})",
                thousands(sizes.million.total),
                sizes.million.cases,
                thousands(sizes.million.list_case),
                thousands(sizes.million.due),
                boundaries_apart(&sizes.million)
            ),
            RowId::SweepMemory => format!(
                "Sweep, memory store ({} snitches, {} due at one boundary; {} runs)",
                thousands(sizes.sweep_memory.total),
                thousands(sizes.sweep_memory.due),
                sizes.sweep_runs
            ),
            RowId::SweepPostgres => format!(
                "Sweep, Postgres store ({} snitches, {} due at one boundary; {} runs)",
                thousands(sizes.sweep_postgres.total),
                thousands(sizes.sweep_postgres.due),
                sizes.sweep_runs
            ),
            RowId::SweepSqlite => format!(
                "Sweep, SQLite store ({} snitches, {} due at one boundary; {} runs)",
                thousands(sizes.sweep_postgres.total),
                thousands(sizes.sweep_postgres.due),
                sizes.sweep_runs
            ),
            RowId::Memory => format!(
                "Resident memory per snitch ({} in the memory store)",
                thousands(sizes.memory_snitches)
            ),
            RowId::AlertDelay => format!(
                "Alert delay, boundary to webhook arrival ({} snitches, one hook)",
                thousands(sizes.alert_snitches)
            ),
            RowId::ApiList => format!(
                "API `GET /v1/snitches` latency ({} snitches in the case)",
                thousands(sizes.api_snitches)
            ),
            RowId::Instructions => format!(
                "Instructions per check-in through `SnitchService`, one snitch (valgrind \
                 callgrind, {COUNTED_CHECK_INS} check-ins after {WARM_UP_CHECK_INS} unmeasured)"
            ),
        }
    }

    fn target(self) -> Cow<'static, str> {
        let of_baseline = |ratio: f64| Cow::Owned(format!("≥ {ratio} of baseline"));
        Cow::Borrowed(match self {
            RowId::CheckInMemory => return of_baseline(MEMORY_CHECK_IN_RATIO),
            RowId::CheckInPostgres => return of_baseline(POSTGRES_CHECK_IN_RATIO),
            RowId::CheckInPostgresOneToken => "≥ 0.8 of many tokens",
            RowId::CheckInSqlite => return of_baseline(SQLITE_CHECK_IN_RATIO),
            RowId::CheckInPostgresLong => "every round ≥ 0.8 of the first (ours)",
            RowId::SweepSeenPostgres | RowId::SweepSeenSqlite => {
                "all due seen `failed` < 1 s after the boundary (the median boundary)"
            }
            RowId::MillionPostgres => {
                return Cow::Owned(format!(
                    "created < 60 s; check-ins ≥ 0.9 of row 2's rate; all due `failed` < 5 s \
                     after the boundary (the median boundary); resident < 512 MiB; the list's \
                     p50 ≤ {LIST_UNCHANGED_WITHIN} of the case's alone"
                ))
            }
            RowId::SweepMemory => "< 0.5 s (the median run)",
            RowId::SweepPostgres => "< 2 s (the median run)",
            RowId::SweepSqlite => "< 2 s (the median run; ours)",
            RowId::Memory => "< 1 KiB",
            RowId::AlertDelay => "p99 < 1 s",
            RowId::ApiList => "p99 < 500 ms (ours)",
            RowId::Instructions => "— (informative)",
        })
    }
}

/// The check-in rows' targets, as ratios to the baseline: the label of each row and its
/// check read the same number (row 2c's check once read 0.25 under a label of 0.15).
const MEMORY_CHECK_IN_RATIO: f64 = 0.8;
const POSTGRES_CHECK_IN_RATIO: f64 = 0.25;
const SQLITE_CHECK_IN_RATIO: f64 = 0.15;

/// How big each row is: the table's sizes, or small ones with `--quick`.
#[derive(Debug, Clone)]
struct Sizes {
    /// The command that runs with these sizes, for the report.
    command: &'static str,
    check_in_snitches: usize,
    connections: usize,
    warm_up: Duration,
    measure: Duration,
    /// Alternating rounds (baseline, Snitch) of each throughput row; medians are reported.
    rounds: usize,
    sweep_memory: Population,
    sweep_postgres: Population,
    /// How many times rows 3a–3c run, each on a fresh store; the median is reported.
    sweep_runs: usize,
    memory_snitches: usize,
    alert_snitches: usize,
    api_snitches: usize,
    api_requests: usize,
    /// Rows 3d and 3e.
    sweep_seen: LivePopulation,
    /// Row 8.
    million: LivePopulation,
    /// Row 2d: the length of a round, and the fewest and most rounds.
    long_round: Duration,
    long_rounds: (usize, usize),
    /// Rows 3d, 3e and 8: whether each case has its webhook, and the pause between two
    /// scrapes of `/metrics` (`--no-webhooks`, `--scrape-pause-ms`).
    webhooks: bool,
    scrape_pause: Duration,
}

/// How many snitches a store holds and how many of them are due at the boundary.
#[derive(Debug, Clone, Copy)]
struct Population {
    total: usize,
    due: usize,
    cases: usize,
}

impl Sizes {
    fn full() -> Sizes {
        Sizes {
            command: "cargo run --release --example bench",
            check_in_snitches: 10_000,
            connections: 64,
            warm_up: Duration::from_secs(1),
            measure: Duration::from_secs(5),
            rounds: 3,
            sweep_memory: Population {
                total: 1_000_000,
                due: 100_000,
                cases: 100,
            },
            sweep_postgres: Population {
                total: 100_000,
                due: 10_000,
                cases: 100,
            },
            sweep_runs: 3,
            memory_snitches: 1_000_000,
            alert_snitches: 1_000,
            api_snitches: 10_000,
            api_requests: 200,
            sweep_seen: LivePopulation {
                total: 100_000,
                due: 10_000,
                cases: 100,
                list_case: 0,
                boundaries: 3,
                apart: chrono::Duration::minutes(1),
            },
            million: LivePopulation {
                total: 1_000_000,
                due: 100_000,
                cases: 100,
                list_case: 10_000,
                boundaries: 3,
                apart: chrono::Duration::minutes(2),
            },
            long_round: Duration::from_secs(30),
            long_rounds: (3, 8),
            webhooks: true,
            scrape_pause: Duration::from_millis(5),
        }
    }

    fn quick() -> Sizes {
        Sizes {
            command: "cargo run --release --example bench -- --quick",
            check_in_snitches: 1_000,
            connections: 64,
            warm_up: Duration::from_millis(300),
            measure: Duration::from_secs(1),
            rounds: 2,
            sweep_memory: Population {
                total: 20_000,
                due: 2_000,
                cases: 10,
            },
            sweep_postgres: Population {
                total: 2_000,
                due: 200,
                cases: 10,
            },
            sweep_runs: 2,
            memory_snitches: 50_000,
            alert_snitches: 100,
            api_snitches: 1_000,
            api_requests: 20,
            sweep_seen: LivePopulation {
                total: 2_000,
                due: 200,
                cases: 10,
                list_case: 0,
                boundaries: 2,
                apart: chrono::Duration::minutes(1),
            },
            million: LivePopulation {
                total: 20_000,
                due: 2_000,
                cases: 10,
                list_case: 1_000,
                boundaries: 2,
                apart: chrono::Duration::minutes(1),
            },
            long_round: Duration::from_secs(2),
            long_rounds: (3, 3),
            webhooks: true,
            scrape_pause: Duration::from_millis(5),
        }
    }
}

/// What a row measured: its figure as text and whether it met the target.
#[derive(Debug)]
struct Measured {
    figure: String,
    met: bool,
}

/// A row of the table; `met` is `None` when the row could not be measured.
#[derive(Debug)]
struct Row {
    id: RowId,
    title: String,
    figure: String,
    met: Option<bool>,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let started = monotonic_now();
    let load_at_start = load_average();
    let mut sizes = if args.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    sizes.webhooks = !args.no_webhooks;
    sizes.scrape_pause = Duration::from_millis(args.scrape_pause_ms);
    let database_url = args
        .database_url
        .clone()
        .or_else(|| std::env::var("DATABASE_URL").ok())
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
    let selected: Vec<RowId> = RowId::RUN_ORDER
        .into_iter()
        .filter(|id| args.only.is_empty() || args.only.contains(id))
        .collect();

    let mut rows = Vec::new();
    for id in selected {
        eprintln!("== {} {}", id.number(), id.title(&sizes));
        let row_started = monotonic_now();
        let result = run_row(id, &sizes, &database_url).await;
        let (figure, met) = match result {
            Ok(m) => (m.figure, Some(m.met)),
            Err(e) => (format!("not measured: {e}"), None),
        };
        eprintln!(
            "   {figure} (target {}) [{:.1} s]",
            id.target(),
            row_started.elapsed().as_secs_f64()
        );
        rows.push(Row {
            id,
            title: id.title(&sizes),
            figure,
            met,
        });
    }
    rows.sort_by_key(|r| RowId::ALL.iter().position(|id| *id == r.id));

    let table = table(&rows);
    println!("{table}");
    let elapsed = started.elapsed();
    eprintln!("done in {}", human_duration(elapsed));

    let output = args
        .output
        .clone()
        .or_else(|| (!args.quick && args.only.is_empty()).then(|| PathBuf::from(DEFAULT_OUTPUT)));
    match output {
        Some(path) => match write_report(&path, &sizes, &table, elapsed, &load_at_start) {
            Ok(()) => eprintln!("wrote {}", path.display()),
            Err(e) => {
                eprintln!("cannot write {}: {e}", path.display());
                std::process::exit(1);
            }
        },
        None => eprintln!("--quick or --only: no file written (use --output to write one)"),
    }
}

async fn run_row(id: RowId, sizes: &Sizes, database_url: &str) -> Result<Measured, BoxError> {
    match id {
        RowId::CheckInMemory => check_in_memory(sizes).await,
        RowId::CheckInPostgres => check_in_postgres(sizes, database_url).await,
        RowId::CheckInPostgresOneToken => check_in_postgres_one_token(sizes, database_url).await,
        RowId::SweepMemory => {
            let population = sizes.sweep_memory;
            let target = Duration::from_millis(500);
            sweep_runs(sizes, population, target, || sweep_memory(population)).await
        }
        RowId::SweepPostgres => {
            let population = sizes.sweep_postgres;
            let target = Duration::from_secs(2);
            sweep_runs(sizes, population, target, || {
                sweep_postgres(population, database_url)
            })
            .await
        }
        RowId::CheckInSqlite => check_in_sqlite(sizes).await,
        RowId::SweepSqlite => {
            let population = sizes.sweep_postgres;
            let target = Duration::from_secs(2);
            sweep_runs(sizes, population, target, || sweep_sqlite(population)).await
        }
        RowId::Memory => memory_per_snitch(sizes.memory_snitches).await,
        RowId::AlertDelay => alert_delay(sizes.alert_snitches).await,
        RowId::ApiList => api_list(sizes).await,
        RowId::Instructions => instructions(database_url).await,
        RowId::CheckInPostgresLong => check_in_postgres_long(sizes, database_url).await,
        RowId::SweepSeenPostgres => sweep_seen_postgres(sizes, database_url).await,
        RowId::SweepSeenSqlite => sweep_seen_sqlite(sizes).await,
        RowId::MillionPostgres => million_postgres(sizes, database_url).await,
    }
}

// ---------------------------------------------------------------------------------------
// Rows 1 and 2: check-in throughput against a bare axum baseline.

/// Row 1: check-ins through the whole in-memory server.
async fn check_in_memory(sizes: &Sizes) -> Result<Measured, BoxError> {
    let comparison = check_in_throughput(sizes, BenchStore::Memory).await?;
    Ok(comparison.measured(MEMORY_CHECK_IN_RATIO))
}

/// Row 2: the same on the Postgres store, in a fresh database.
async fn check_in_postgres(sizes: &Sizes, database_url: &str) -> Result<Measured, BoxError> {
    let db = FreshDatabase::create(database_url).await?;
    let result = check_in_throughput(sizes, BenchStore::Postgres(db.url.clone())).await;
    db.drop_it().await;
    let comparison = result?;
    let measured = comparison.measured(POSTGRES_CHECK_IN_RATIO);
    let _ = ROW_2.set(comparison);
    Ok(measured)
}

/// Row 2's medians, when it ran in this run: row 8 compares its check-ins with them.
static ROW_2: std::sync::OnceLock<Comparison> = std::sync::OnceLock::new();
/// Row 6's latency, when it ran in this run: row 8 compares its list with it.
static ROW_6: std::sync::OnceLock<Latency> = std::sync::OnceLock::new();

/// Row 2c: the same on the SQLite store (the default durable one), in a fresh file.
async fn check_in_sqlite(sizes: &Sizes) -> Result<Measured, BoxError> {
    let dir = fresh_sqlite_dir()?;
    let path = dir.path().join("bench.db");
    let result = check_in_throughput(sizes, BenchStore::Sqlite(path)).await;
    Ok(result?.measured(SQLITE_CHECK_IN_RATIO))
}

/// A temporary directory for a SQLite row's database file, removed when dropped.
fn fresh_sqlite_dir() -> Result<tempfile::TempDir, BoxError> {
    let dir = tempfile::Builder::new()
        .prefix("snitch-bench-sqlite-")
        .tempdir()?;
    eprintln!("   database {}", dir.path().join("bench.db").display());
    Ok(dir)
}

/// The store a whole-server row runs on.
#[derive(Debug, Clone)]
enum BenchStore {
    Memory,
    /// A `postgres://` URL.
    Postgres(String),
    /// A SQLite database file (the server's settings: WAL, `synchronous = FULL`).
    Sqlite(PathBuf),
}

/// Starts the release server on `store` as a separate process, makes the snitches and
/// checks each in once through HTTP (so the measured check-ins are the steady state,
/// healthy to healthy), then loads it and the baseline in alternating rounds.
async fn check_in_throughput(sizes: &Sizes, store: BenchStore) -> Result<Comparison, BoxError> {
    let (server, paths) = check_in_server(sizes, store).await?;
    compare_with_baseline(server.check_in_addr, paths, sizes).await
    // `server` is killed here, when dropped.
}

/// The release server on `store`, whose `sizes.check_in_snitches` snitches (made through
/// the API) have each checked in once, and the check-in paths of those snitches.
async fn check_in_server(
    sizes: &Sizes,
    store: BenchStore,
) -> Result<(SnitchProcess, Arc<[Uri]>), BoxError> {
    // Several cases: the Postgres store makes inserts into one case take turns.
    let cases: Vec<BenchCase> = (0..10)
        .map(|i| BenchCase {
            name: format!("bench-{i}"),
            key: format!("bench-key-{i:030}"),
        })
        .collect();
    let per_case = sizes.check_in_snitches.div_ceil(cases.len());
    let server = SnitchProcess::start(&store, &cases, per_case).await?;
    let tokens = create_snitches_over_http(server.api_addr, &cases, per_case, "daily").await?;
    check_in_all_over_http(server.check_in_addr, &tokens).await?;
    let paths: Arc<[Uri]> = tokens
        .iter()
        .map(|t| Uri::from_str(&format!("/{t}")))
        .collect::<Result<_, _>>()?;
    Ok((server, paths))
}

/// Row 2b: every connection checks in to the same snitch (many workers sharing one
/// check-in URL), against check-ins spread over many snitches, alternately on one server.
async fn check_in_postgres_one_token(
    sizes: &Sizes,
    database_url: &str,
) -> Result<Measured, BoxError> {
    let db = FreshDatabase::create(database_url).await?;
    let result = async {
        let (server, many) = check_in_server(sizes, BenchStore::Postgres(db.url.clone())).await?;
        let one: Arc<[Uri]> = many.iter().take(1).cloned().collect();
        let addr = server.check_in_addr;
        alternate_loads(("many", addr, many), ("one", addr, one), sizes).await
    }
    .await;
    db.drop_it().await;
    let (many, one) = result?;
    let ratio = one.per_second / many.per_second;
    Ok(Measured {
        figure: format!(
            "{ratio:.2} of many tokens: {} vs {} req/s; p50/p99 {} / {} (many {} / {})",
            thousands(one.per_second.round() as usize),
            thousands(many.per_second.round() as usize),
            ms(one.latency.p50),
            ms(one.latency.p99),
            ms(many.latency.p50),
            ms(many.latency.p99),
        ),
        met: ratio >= 0.8,
    })
}

/// Throughput and latency of one load run.
#[derive(Debug, Clone, Copy)]
struct LoadResult {
    per_second: f64,
    latency: Latency,
}

/// The medians of the baseline's and Snitch's rounds.
#[derive(Debug)]
struct Comparison {
    baseline: LoadResult,
    snitch: LoadResult,
}

impl Comparison {
    fn ratio(&self) -> f64 {
        self.snitch.per_second / self.baseline.per_second
    }

    fn measured(&self, target: f64) -> Measured {
        let (s, b) = (&self.snitch, &self.baseline);
        Measured {
            figure: format!(
                "{:.2} of baseline: {} vs {} req/s; p50/p99 {} / {} (baseline {} / {})",
                self.ratio(),
                thousands(s.per_second.round() as usize),
                thousands(b.per_second.round() as usize),
                ms(s.latency.p50),
                ms(s.latency.p99),
                ms(b.latency.p50),
                ms(b.latency.p99),
            ),
            met: self.ratio() >= target,
        }
    }
}

/// Loads the baseline (`examples/baseline.rs`, its own release process) and `target`
/// alternately (B, S, B, S, …) so that noise of the machine touches both alike; reports
/// the medians of each.
async fn compare_with_baseline(
    target: SocketAddr,
    paths: Arc<[Uri]>,
    sizes: &Sizes,
) -> Result<Comparison, BoxError> {
    let mut command = child_command(sibling_binary("baseline")?);
    command.arg("127.0.0.1:0");
    let baseline_server = ChildServer::start("baseline", command, &["listening on"]).await?;
    let (baseline, snitch) = alternate_loads(
        ("baseline", baseline_server.addrs[0], paths.clone()),
        ("snitch", target, paths),
        sizes,
    )
    .await?;
    Ok(Comparison { baseline, snitch })
}

/// One side of an alternating comparison: a name, a server and the paths loaded.
type LoadTarget = (&'static str, SocketAddr, Arc<[Uri]>);

/// Loads `first` and `second` alternately, `sizes.rounds` times each; the medians.
async fn alternate_loads(
    first: LoadTarget,
    second: LoadTarget,
    sizes: &Sizes,
) -> Result<(LoadResult, LoadResult), BoxError> {
    let mut results: [Vec<LoadResult>; 2] = [Vec::new(), Vec::new()];
    for round in 1..=sizes.rounds {
        for (i, (name, addr, paths)) in [&first, &second].into_iter().enumerate() {
            let result = load(*addr, paths.clone(), sizes).await?;
            eprintln!(
                "   round {round}/{} {name:8}: {} req/s, p50 {}, p99 {}",
                sizes.rounds,
                thousands(result.per_second.round() as usize),
                ms(result.latency.p50),
                ms(result.latency.p99)
            );
            results[i].push(result);
        }
        if let (Some(a), Some(b)) = (results[0].last(), results[1].last()) {
            eprintln!("   round {round} ratio: {:.2}", b.per_second / a.per_second);
        }
    }
    Ok((median_load(&results[0]), median_load(&results[1])))
}

/// Loads `paths` of `addr` with `wrk` (a separate process: `sizes.connections`
/// keep-alive connections on [`WRK_THREADS`] threads, `scripts/bench-check-ins.lua`
/// picking the paths) for the warm-up, unmeasured, then for the measured time. Any
/// answer other than 2xx, or a socket error, fails the row.
async fn load(addr: SocketAddr, paths: Arc<[Uri]>, sizes: &Sizes) -> Result<LoadResult, BoxError> {
    load_from(addr, paths, sizes, None).await
}

/// [`load`], with `warm_up` replaced when given (zero: none) and each `wrk` run starting
/// at a different place of the list (runs over a list longer than a run covers then
/// reach snitches the earlier runs did not).
async fn load_spread(
    addr: SocketAddr,
    paths: Arc<[Uri]>,
    sizes: &Sizes,
    warm_up: Option<Duration>,
) -> Result<LoadResult, BoxError> {
    load_from(addr, paths, sizes, Some(warm_up.unwrap_or(sizes.warm_up))).await
}

/// Where the next spread run starts in its list, as a fraction of it (golden ratio
/// steps: evenly spread, never the same place twice).
static SPREAD_STEP: AtomicUsize = AtomicUsize::new(0);

fn spread_start(len: usize) -> usize {
    let step = SPREAD_STEP.fetch_add(1, Ordering::Relaxed) as f64;
    ((step * 0.618_033_988_75).fract() * len as f64) as usize
}

async fn load_from(
    addr: SocketAddr,
    paths: Arc<[Uri]>,
    sizes: &Sizes,
    spread_warm_up: Option<Duration>,
) -> Result<LoadResult, BoxError> {
    let list = tempfile::NamedTempFile::new()?;
    let mut text = String::with_capacity(paths.len() * 40);
    for path in paths.iter() {
        text.push_str(&path.to_string());
        text.push('\n');
    }
    std::fs::write(list.path(), text)?;
    let list_path = list.path().to_owned();
    let warm_up = spread_warm_up.unwrap_or(sizes.warm_up);
    let sizes_owned = (sizes.connections, warm_up, sizes.measure);
    let len = paths.len();
    let spread = spread_warm_up.is_some();
    tokio::task::spawn_blocking(move || {
        let (connections, warm_up, measure) = sizes_owned;
        let start = || if spread { spread_start(len) } else { 0 };
        if !warm_up.is_zero() {
            wrk(addr, &list_path, connections, warm_up, start())?;
        }
        wrk(addr, &list_path, connections, measure, start())
    })
    .await?
}

/// Threads of `wrk`: as many as the cores, which the server shares.
const WRK_THREADS: usize = 2;

/// One run of `wrk`, parsed.
fn wrk(
    addr: SocketAddr,
    list: &Path,
    connections: usize,
    duration: Duration,
    start: usize,
) -> Result<LoadResult, BoxError> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench-check-ins.lua");
    let output = child_command("wrk")
        .arg(format!("-t{WRK_THREADS}"))
        .arg(format!("-c{connections}"))
        // wrk takes whole seconds.
        .arg(format!("-d{}s", duration.as_secs().max(1)))
        .arg("--latency")
        .arg("-s")
        .arg(&script)
        .arg(format!("http://{addr}"))
        .arg("--")
        .arg(list)
        .arg(WRK_THREADS.to_string())
        .arg(start.to_string())
        .output()
        .map_err(|e| format!("cannot run wrk (scripts/bench.sh installs it): {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "wrk failed: {}{}",
            text,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    parse_wrk(&text)
}

/// Requests/s and the 50th and 99th percentiles from `wrk --latency` output.
fn parse_wrk(text: &str) -> Result<LoadResult, BoxError> {
    let mut per_second = None;
    let (mut p50, mut p99, mut max) = (None, None, None);
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", n] => per_second = Some(n.parse::<f64>()?),
            ["50%", t] => p50 = Some(wrk_micros(t)?),
            ["99%", t] => p99 = Some(wrk_micros(t)?),
            ["Latency", _avg, _stdev, m, ..] => max = Some(wrk_micros(m)?),
            ["Non-2xx", ..] | ["Socket", "errors:", ..] => {
                return Err(format!("wrk saw failures: {line}").into())
            }
            _ => {}
        }
    }
    match (per_second, p50, p99, max) {
        (Some(per_second), Some(p50), Some(p99), Some(max)) => Ok(LoadResult {
            per_second,
            latency: Latency { p50, p99, max },
        }),
        _ => Err(format!("cannot read wrk's output: {text}").into()),
    }
}

/// A `wrk` duration (`812.00us`, `1.25ms`, `2.01s`) in microseconds.
fn wrk_micros(raw: &str) -> Result<u32, BoxError> {
    let (number, unit) = raw.split_at(
        raw.find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(raw.len()),
    );
    let value: f64 = number.parse()?;
    let micros = match unit {
        "us" => value,
        "ms" => value * 1e3,
        "s" => value * 1e6,
        "m" => value * 60e6,
        other => return Err(format!("unknown wrk unit {other:?}").into()),
    };
    Ok(micros.round().min(f64::from(u32::MAX)) as u32)
}

// ---------------------------------------------------------------------------------------
// Rows 3a, 3b and 4: a large population of snitches written straight into a store.

/// One run of a sweep row (3a, 3b, 3c): how long `tick` took, and how its store was set up.
struct SweepRun {
    took: Duration,
    set_up: String,
}

/// Rows 3a–3c: `run`, each time on a fresh store, `sizes.sweep_runs` times; the figure is
/// the median run's, with every run's time, and the target is the median's.
async fn sweep_runs<F, Fut>(
    sizes: &Sizes,
    population: Population,
    target: Duration,
    mut run: F,
) -> Result<Measured, BoxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<SweepRun, BoxError>>,
{
    let mut runs = Vec::new();
    for n in 1..=sizes.sweep_runs {
        let done = run().await?;
        eprintln!(
            "   run {n}/{}: {:.3} s ({})",
            sizes.sweep_runs,
            done.took.as_secs_f64(),
            done.set_up
        );
        runs.push(done);
    }
    let median = median_by(&runs, |r| r.took)?;
    Ok(Measured {
        figure: format!(
            "median {:.3} s of {} runs ({}) to detect and store {} events (set-up of the \
             median run: {})",
            median.took.as_secs_f64(),
            runs.len(),
            seconds(runs.iter().map(|r| r.took)),
            thousands(population.due),
            median.set_up
        ),
        met: median.took < target,
    })
}

/// Row 3a: one sweep of the memory store.
async fn sweep_memory(population: Population) -> Result<SweepRun, BoxError> {
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    let snitches = Snitches::new(population)?;
    snitches.store_cases(storage.as_ref()).await?;
    let inserted = snitches.insert(storage.clone()).await?;
    eprintln!(
        "   inserted {} snitches in {:.2} s",
        thousands(population.total),
        inserted.as_secs_f64()
    );
    let took = snitches.sweep(storage).await?;
    Ok(SweepRun {
        took,
        set_up: format!(
            "{} snitches inserted in {:.1} s",
            thousands(population.total),
            inserted.as_secs_f64()
        ),
    })
}

/// Row 3b: one sweep of the Postgres store, in a fresh database.
async fn sweep_postgres(population: Population, database_url: &str) -> Result<SweepRun, BoxError> {
    let db = FreshDatabase::create(database_url).await?;
    let result = sweep_postgres_in(population, &db).await;
    db.drop_it().await;
    result
}

async fn sweep_postgres_in(
    population: Population,
    db: &FreshDatabase,
) -> Result<SweepRun, BoxError> {
    let pool = PgPoolOptions::new()
        .max_connections(PG_CONNECTIONS)
        .connect_with(db.options.clone())
        .await?;
    MIGRATOR.run(&pool).await?;
    let storage: Arc<dyn Storage> = Arc::new(PgStorage::new(pool.clone()));
    let snitches = Snitches::new(population)?;
    snitches.store_cases(storage.as_ref()).await?;
    let inserted = snitches.insert(storage.clone()).await?;
    eprintln!(
        "   inserted {} snitches in {:.1} s (bulk insert)",
        thousands(population.total),
        inserted.as_secs_f64()
    );
    let took = snitches.sweep(storage).await?;
    pool.close().await;
    Ok(SweepRun {
        took,
        set_up: format!(
            "{} snitches created in {:.1} s by the bulk `insert_snitches`, target < 10 s",
            thousands(population.total),
            inserted.as_secs_f64()
        ),
    })
}

/// Row 3c: one sweep of the SQLite store, in a fresh file, at the Postgres row's size.
/// The file is filled with `synchronous = OFF` (set-up, not measured: one writer with an
/// fsync per insert would take minutes), then reopened with the server's settings
/// (`synchronous = FULL`) for the timed sweep.
async fn sweep_sqlite(population: Population) -> Result<SweepRun, BoxError> {
    let dir = fresh_sqlite_dir()?;
    let path = dir.path().join("bench.db");
    let snitches = Snitches::new(population)?;
    let inserted = fill_sqlite(&path, &snitches).await?;
    eprintln!(
        "   inserted {} snitches in {:.1} s (bulk insert, synchronous = OFF)",
        thousands(population.total),
        inserted.as_secs_f64()
    );
    let pool = snitch::store::sqlite::connect(&path, 16).await?;
    let storage: Arc<dyn Storage> = Arc::new(SqliteStorage::new(pool.clone()));
    let took = snitches.sweep(storage).await;
    pool.close().await;
    let took = took?;
    Ok(SweepRun {
        took,
        set_up: format!(
            "{} snitches created in {:.1} s by the bulk `insert_snitches`, `synchronous = \
             OFF`; swept with `synchronous = FULL`",
            thousands(population.total),
            inserted.as_secs_f64()
        ),
    })
}

/// Makes the database at `path`, migrated, with `snitches` in it; the insert's time.
async fn fill_sqlite(path: &Path, snitches: &Snitches) -> Result<Duration, BoxError> {
    let options = snitch::store::sqlite::connect_options(path)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Off);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(SQLITE_FILL_CONNECTIONS)
        .connect_with(options)
        .await?;
    snitch::store::sqlite::MIGRATOR.run(&pool).await?;
    let storage: Arc<dyn Storage> = Arc::new(SqliteStorage::new(pool.clone()));
    snitches.store_cases(storage.as_ref()).await?;
    let inserted = snitches.insert(storage).await;
    pool.close().await;
    inserted
}

/// Row 4: the growth of resident memory while the memory store takes the snitches.
async fn memory_per_snitch(count: usize) -> Result<Measured, BoxError> {
    let snitches = Snitches::new(Population {
        total: count,
        due: count / 10,
        cases: 100,
    })?;
    let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
    snitches.store_cases(storage.as_ref()).await?;
    let before = resident_bytes()?;
    snitches.insert(storage.clone()).await?;
    let after = resident_bytes()?;
    drop(storage);
    let per_snitch = after.saturating_sub(before) as f64 / count as f64;
    Ok(Measured {
        figure: format!(
            "{per_snitch:.0} bytes per snitch (RSS {} → {} MiB)",
            before / (1 << 20),
            after / (1 << 20)
        ),
        met: per_snitch < 1024.0,
    })
}

/// A population of snitches made from two templates: checked in once an hour apart, so
/// the first `due` are due at `boundary` and the others an hour later. The templates'
/// states come from the state machine itself (`machine::check_in`).
#[derive(Debug, Clone)]
struct Snitches {
    population: Population,
    cases: Vec<Case>,
    due_template: Snitch,
    later_template: Snitch,
    boundary: Timestamp,
}

impl Snitches {
    fn new(population: Population) -> Result<Snitches, BoxError> {
        let member = EmailAddress::parse("ops@bench.test").map_err(|v| v.message)?;
        let cases = (0..population.cases)
            .map(|i| {
                let mut case =
                    Case::new(CaseId::parse(&format!("bench-{i}")).map_err(|v| v.message)?);
                // One team member: each event also queues its e-mail, as in real use.
                case.members = vec![member.clone()];
                case.plan.max_snitches = u32::MAX;
                Ok(case)
            })
            .collect::<Result<Vec<_>, BoxError>>()?;
        let start = chrono::DateTime::parse_from_rfc3339("2026-11-22T03:10:00Z")?.to_utc();
        let mut blank = Snitch::new(
            bench_token(0)?,
            cases[0].id.clone(),
            SnitchName::parse("nightly backup").map_err(|v| v.message)?,
            Interval::Hourly,
            start,
        );
        blank.set_tags(Tags::parse(&["prod", "db"]).map_err(|v| v.message)?);
        let checked_in_at = |at: Timestamp| {
            let check_in = CheckIn::new(at, Outcome::Success, None);
            machine::check_in(&blank, &check_in, &cases[0].plan).snitch
        };
        let due_template = checked_in_at(start);
        let later_template = checked_in_at(start + chrono::Duration::hours(1));
        let boundary = due_template
            .wake_at()
            .ok_or("a checked-in snitch has a deadline")?;
        Ok(Snitches {
            population,
            cases,
            due_template,
            later_template,
            boundary,
        })
    }

    async fn store_cases(&self, storage: &dyn Storage) -> Result<(), BoxError> {
        for case in &self.cases {
            storage.upsert_case(case).await?;
        }
        Ok(())
    }

    /// The `n`-th snitch: due at the boundary when `n < due`.
    fn snitch(&self, n: usize) -> Result<Snitch, BoxError> {
        let template = if n < self.population.due {
            &self.due_template
        } else {
            &self.later_template
        };
        let mut record = template.to_record();
        record.token = bench_token(n)?;
        record.case_id = self.cases[n % self.cases.len()].id.clone();
        // Its own name and tags, as a snitch made through the API has: shared text would
        // flatter the memory row.
        record.name = SnitchName::parse(&format!("nightly backup {n}")).map_err(|v| v.message)?;
        record.tags = Tags::parse(&["prod", "db"]).map_err(|v| v.message)?;
        Ok(Snitch::restore(record)?)
    }

    /// Inserts them all with the store's bulk insert (`Storage::insert_snitches`), a
    /// batch at a time; the time it took.
    async fn insert(&self, storage: Arc<dyn Storage>) -> Result<Duration, BoxError> {
        insert_in_batches(storage.as_ref(), 0..self.population.total, |n| {
            self.snitch(n)
        })
        .await
    }

    /// Times `service.tick(boundary)` on a manual clock and checks that it found exactly
    /// the due snitches.
    async fn sweep(&self, storage: Arc<dyn Storage>) -> Result<Duration, BoxError> {
        let clock = Arc::new(ManualClock::new(self.boundary));
        let service = SnitchService::new(storage, clock);
        let started = monotonic_now();
        let report = service.tick(self.boundary).await?;
        let took = started.elapsed();
        let due = self.population.due;
        if report.snitches != due || report.events != due {
            return Err(format!(
                "the sweep changed {} snitches with {} events, not {due}",
                report.snitches, report.events
            )
            .into());
        }
        Ok(took)
    }
}

/// `bench000000000000042`: 20 characters, like a random token.
fn bench_token(n: usize) -> Result<Token, BoxError> {
    Token::parse(&format!("bench{n:015}")).map_err(|e| e.to_string().into())
}

/// The resident set of this process, from `/proc/self/statm` (pages) and the page size
/// the kernel reports for this process's mappings.
fn resident_bytes() -> Result<u64, BoxError> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .ok_or("/proc/self/statm has no resident field")?
        .parse()?;
    let page_kib: u64 = std::fs::read_to_string("/proc/self/smaps")?
        .lines()
        .find_map(|l| l.strip_prefix("KernelPageSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(4);
    Ok(pages * page_kib * 1024)
}

// ---------------------------------------------------------------------------------------
// Row 5: alert delay through the whole server (scheduler, dispatcher, webhook client).

/// The real time shifted by an offset that the benchmark sets, so a period boundary can be
/// brought to a couple of seconds from now while everything else runs in real time.
#[derive(Debug, Default)]
struct ShiftedClock {
    offset: Mutex<chrono::Duration>,
}

impl ShiftedClock {
    /// Shifts the clock so that it reads `at` now.
    fn show(&self, at: Timestamp) {
        *self.offset.lock().unwrap_or_else(|e| e.into_inner()) = at - SystemClock.now();
    }
}

impl Clock for ShiftedClock {
    fn now(&self) -> Timestamp {
        SystemClock.now() + *self.offset.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A webhook receiver that notes when each hook arrives, by the shifted clock.
#[derive(Debug)]
struct Receiver {
    clock: Arc<ShiftedClock>,
    arrivals: Mutex<Arrivals>,
}

#[derive(Debug, Default)]
struct Arrivals {
    reporting: usize,
    missing: Vec<Timestamp>,
}

impl Receiver {
    async fn start(clock: Arc<ShiftedClock>) -> Result<(Arc<Receiver>, SocketAddr), BoxError> {
        let receiver = Arc::new(Receiver {
            clock,
            arrivals: Mutex::new(Arrivals::default()),
        });
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(receiver.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok((receiver, addr))
    }

    fn arrivals<T>(&self, read: impl FnOnce(&Arrivals) -> T) -> T {
        read(&self.arrivals.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Waits until `done` holds, or for at most `timeout`; whether it holds.
    async fn wait_for(&self, timeout: Duration, done: impl Fn(&Arrivals) -> bool) -> bool {
        let give_up = monotonic_now() + timeout;
        while !self.arrivals(&done) {
            if monotonic_now() >= give_up {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }
}

async fn receive(State(receiver): State<Arc<Receiver>>, body: Bytes) -> StatusCode {
    let at = receiver.clock.now();
    let kind = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["type"].as_str().map(str::to_owned));
    let mut arrivals = receiver.arrivals.lock().unwrap_or_else(|e| e.into_inner());
    match kind.as_deref() {
        Some("snitch.missing") => arrivals.missing.push(at),
        Some("snitch.reporting") => arrivals.reporting += 1,
        _ => {}
    }
    StatusCode::NO_CONTENT
}

/// Row 5: `count` one-minute snitches checked in during one minute are due at the end of
/// the next; the clock is then set to just before that boundary and each `snitch.missing`
/// hook's arrival is timed from it.
async fn alert_delay(count: usize) -> Result<Measured, BoxError> {
    let clock = Arc::new(ShiftedClock::default());
    let (receiver, receiver_addr) = Receiver::start(clock.clone()).await?;
    let mut config = Config::default();
    config.store = Some(StoreKind::Memory);
    config.allow_private_webhooks = true;
    // The row jumps the clock about two minutes ahead to reach the boundary: that jump is
    // not our downtime, which would defer the very alerts this row times
    // (docs/rules.md#outages).
    config.outage_threshold_secs = 3_153_600_000;
    config.cases = vec![case_config(
        "alerts",
        count,
        &[],
        &[format!("http://{receiver_addr}/hook")],
    )];
    let server = BenchServer::start(config, clock.clone()).await?;
    let service = server.running.service.clone();
    let tokens = create_snitches(&service, &["alerts".to_owned()], count, "1_minute").await?;

    // Check in 5 s into a minute: each snitch is due at the end of the next minute.
    let minute = Interval::Minute1.period_of(SystemClock.now()).next();
    clock.show(minute.start() + chrono::Duration::seconds(5));
    check_in_all(&service, &tokens).await?;
    let boundary = minute.next().end();
    let next_wake = service.storage().next_wake_at().await?;
    if next_wake != Some(boundary) {
        server.stop().await?;
        return Err(
            format!("expected the deadline {boundary}, the store has {next_wake:?}").into(),
        );
    }
    // The check-ins' `snitch.reporting` hooks go out first; the boundary comes after.
    if !receiver
        .wait_for(Duration::from_secs(60), |a| a.reporting >= count)
        .await
    {
        eprintln!("   warning: not every snitch.reporting hook arrived before the boundary");
    }
    clock.show(boundary - ALERT_LEAD);
    eprintln!(
        "   {count} snitches due in {} s; waiting for their hooks",
        ALERT_LEAD.num_seconds()
    );
    let arrived = receiver
        .wait_for(ALERT_LEAD.to_std()? + Duration::from_secs(60), |a| {
            a.missing.len() >= count
        })
        .await;
    server.stop().await?;
    let delays: Vec<u32> = receiver.arrivals(|a| {
        a.missing
            .iter()
            .map(|t| (*t - boundary).num_microseconds().unwrap_or(0).max(0) as u32)
            .collect()
    });
    let latency = Latency::of(delays.clone()).ok_or("no snitch.missing hook arrived")?;
    let mut figure = format!(
        "p50 {}, p99 {}, max {}",
        ms(latency.p50),
        ms(latency.p99),
        ms(latency.max)
    );
    if !arrived {
        figure += &format!(
            " — only {} of {count} hooks arrived within 60 s",
            delays.len()
        );
    }
    Ok(Measured {
        figure,
        met: arrived && latency.p99 < 1_000_000,
    })
}

// ---------------------------------------------------------------------------------------
// Row 6: the list API.

/// Row 6: sequential `GET /v1/snitches` with HTTP Basic on a case of `api_snitches`.
async fn api_list(sizes: &Sizes) -> Result<Measured, BoxError> {
    let mut config = Config::default();
    config.store = Some(StoreKind::Memory);
    config.rate_limit_per_second = NO_RATE_LIMIT;
    config.rate_limit_burst = NO_RATE_LIMIT;
    config.cases = vec![case_config(
        "api",
        sizes.api_snitches,
        &[API_KEY.to_owned()],
        &[],
    )];
    let server = BenchServer::start(config, Arc::new(SystemClock)).await?;
    let service = server.running.service.clone();
    create_snitches(&service, &["api".to_owned()], sizes.api_snitches, "daily").await?;
    let result = time_list(server.running.api_addr, sizes).await;
    server.stop().await?;
    let (latency, body_bytes) = result?;
    let _ = ROW_6.set(latency);
    Ok(Measured {
        figure: format!(
            "p50 {}, p99 {} ({} requests, {:.1} MB each)",
            ms(latency.p50),
            ms(latency.p99),
            sizes.api_requests,
            body_bytes as f64 / 1e6
        ),
        met: latency.p99 < 500_000,
    })
}

/// The latency of the list requests, after a check of the first answer and a warm-up;
/// and the size of an answer.
async fn time_list(api: SocketAddr, sizes: &Sizes) -> Result<(Latency, usize), BoxError> {
    let client = reqwest::Client::new();
    let url = format!("http://{api}/v1/snitches");
    let list = || client.get(&url).basic_auth(API_KEY, None::<&str>).send();
    let first: Vec<serde_json::Value> = list().await?.error_for_status()?.json().await?;
    if first.len() != sizes.api_snitches {
        return Err(format!(
            "listed {} snitches, not {}",
            first.len(),
            sizes.api_snitches
        )
        .into());
    }
    let mut body_bytes = 0;
    for _ in 0..5 {
        body_bytes = list().await?.error_for_status()?.bytes().await?.len();
    }
    let mut micros = Vec::with_capacity(sizes.api_requests);
    for _ in 0..sizes.api_requests {
        let sent = monotonic_now();
        let body = list().await?.error_for_status()?.bytes().await?;
        micros.push(as_micros(sent.elapsed()));
        body_bytes = body.len();
    }
    Ok((Latency::of(micros).ok_or("no request")?, body_bytes))
}

// ---------------------------------------------------------------------------------------
// Row 7: instructions per check-in, counted by valgrind.

/// Check-ins measured in each run of `examples/check_in_instructions.rs`.
const COUNTED_CHECK_INS: usize = 100;
/// Check-ins before them, not measured (statements prepared, caches filled).
const WARM_UP_CHECK_INS: usize = 20;
/// The function of `check_in_instructions` holding the measured check-ins (a glob on its
/// demangled name, `check_in_instructions::measured_check_ins`).
const MEASURED_FUNCTION: &str = "*measured_check_ins*";
/// Runs of each store: the median is reported, the range shows how repeatable it is.
const CALLGRIND_RUNS: usize = 3;
/// The function it calls right after them.
const MEASUREMENT_FINISHED: &str = "measurement_finished";

/// Row 7: each store [`CALLGRIND_RUNS`] times under `valgrind --tool=callgrind`;
/// instructions per check-in (the median run) and how far apart the runs were. Met when
/// measured: the row informs, it has no target.
async fn instructions(database_url: &str) -> Result<Measured, BoxError> {
    let program = sibling_binary("check_in_instructions")?;
    let database_url = database_url.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut figures = Vec::new();
        for (store, label) in [
            ("memory", "memory"),
            ("sqlite", "SQLite"),
            ("postgres", "Postgres"),
        ] {
            let mut counts = (0..CALLGRIND_RUNS)
                .map(|_| callgrind_check_ins(&program, store, &database_url))
                .collect::<Result<Vec<u64>, BoxError>>()?;
            counts.sort_unstable();
            let median = counts[counts.len() / 2];
            let range = (counts[counts.len() - 1] - counts[0]) as f64 / median.max(1) as f64;
            eprintln!(
                "   {label}: {} instructions for {COUNTED_CHECK_INS} check-ins",
                counts
                    .iter()
                    .map(|n| thousands(*n as usize))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let agreement = if range == 0.0 {
                "runs identical".to_owned()
            } else {
                format!("runs within {:.2}%", range * 100.0)
            };
            figures.push(format!(
                "{label} {} ({agreement})",
                thousands((median as f64 / COUNTED_CHECK_INS as f64).round() as usize)
            ));
        }
        Ok(Measured {
            figure: format!(
                "{} instructions per check-in, the median of {CALLGRIND_RUNS} runs each (every \
                 thread of the process: SQLite's own work included; Postgres: the client side \
                 only)",
                figures.join(", ")
            ),
            met: true,
        })
    })
    .await?
}

/// One run of `check_in_instructions <store>` under callgrind; the instructions executed
/// while [`MEASURED_FUNCTION`] ran. A `--dump-before` of it and one of
/// [`MEASUREMENT_FINISHED`] cut the profile there, so the second dump holds exactly that
/// window, in every thread (SQLite runs on sqlx's worker threads, which
/// `--toggle-collect` would leave out: it counts only the thread that enters the
/// function).
fn callgrind_check_ins(program: &Path, store: &str, database_url: &str) -> Result<u64, BoxError> {
    let dir = tempfile::Builder::new()
        .prefix("snitch-bench-callgrind-")
        .tempdir()?;
    let output = child_command("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--dump-before={MEASURED_FUNCTION}"))
        .arg(format!("--dump-before=*{MEASUREMENT_FINISHED}*"))
        .arg(format!(
            "--callgrind-out-file={}",
            dir.path().join("callgrind.out").display()
        ))
        .arg(program)
        .arg(store)
        .arg(format!("--check-ins={COUNTED_CHECK_INS}"))
        .arg(format!("--warm-up={WARM_UP_CHECK_INS}"))
        .arg(format!("--database-url={database_url}"))
        .output()
        .map_err(|e| format!("cannot run valgrind (scripts/bench.sh installs it): {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(10).collect();
        return Err(format!(
            "valgrind on {store} failed ({}): {}",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
        )
        .into());
    }
    let mut measured = None;
    for entry in std::fs::read_dir(dir.path())? {
        let text = std::fs::read_to_string(entry?.path())?;
        if let Some(count) = window_total(&text)? {
            if measured.replace(count).is_some() {
                return Err(format!("{MEASURED_FUNCTION} ran more than once").into());
            }
        }
    }
    measured.ok_or_else(|| format!("no callgrind dump before {MEASUREMENT_FINISHED}").into())
}

/// The instructions of the callgrind dump that ends the measured window (its
/// `desc: Trigger:` line names [`MEASUREMENT_FINISHED`]), from its `totals:` (or
/// `summary:`) line; `None` for the other dumps.
fn window_total(dump: &str) -> Result<Option<u64>, BoxError> {
    let ends_window = dump
        .lines()
        .any(|l| l.starts_with("desc: Trigger:") && l.contains(MEASUREMENT_FINISHED));
    if !ends_window {
        return Ok(None);
    }
    let total = dump
        .lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or("a callgrind dump without totals")?;
    Ok(Some(total.parse()?))
}

// ---------------------------------------------------------------------------------------
// Rows 3d, 3e and 8: a population in the store of the release server, on the real clock.

/// How long the live rows allow, at least, between making the due snitches' states and
/// their boundary (the due part of the insert and the server's start); the boundary is
/// the first minute start after that, so up to a minute more.
const SEEN_LEAD: chrono::Duration = chrono::Duration::seconds(10);
/// The same for row 8, whose server starts on a million snitches.
const MILLION_LEAD: chrono::Duration = chrono::Duration::seconds(20);
/// The grace of the live rows' due snitches: the least a schedule may have.
const GRACE: chrono::Duration = chrono::Duration::seconds(60);

/// How many snitches a live row's store holds, how many are due at the boundary, in how
/// many cases, and how many of them the first case holds (0: spread evenly).
#[derive(Debug, Clone, Copy)]
struct LivePopulation {
    total: usize,
    /// Due at each boundary.
    due: usize,
    cases: usize,
    list_case: usize,
    /// How many boundaries the row watches, each with its own `due` snitches, and how
    /// far apart they are (each sweep's alerts are delivered before the next boundary).
    boundaries: usize,
    apart: chrono::Duration,
}

impl LivePopulation {
    /// The snitches due at no boundary of the row.
    fn never_due(&self) -> usize {
        self.total - self.due * self.boundaries
    }
}

/// A population for the store of a server on the real clock. Snitch `n` is in case 0
/// when `n < list_case`, else spread over the other cases; the last `due × boundaries`
/// snitches run daily by cron, `due` of them at each boundary: minute starts `apart`
/// from one another, the first a few seconds ahead (see
/// [`LiveSnitches::plan_boundaries`]); the others check in daily and last did at the
/// start. Both states come from the state machine (`machine::check_in`).
#[derive(Debug)]
struct LiveSnitches {
    population: LivePopulation,
    cases: Vec<Case>,
    later_template: Snitch,
    /// Each boundary's due snitch and the boundary, in time order; set by
    /// [`LiveSnitches::plan_boundaries`].
    due: Vec<(Snitch, Timestamp)>,
}

impl LiveSnitches {
    fn new(population: LivePopulation) -> Result<LiveSnitches, BoxError> {
        let cases = (0..population.cases)
            .map(|i| {
                let mut case =
                    Case::new(CaseId::parse(&format!("bench-{i}")).map_err(|v| v.message)?);
                case.plan.max_snitches = u32::MAX;
                Ok(case)
            })
            .collect::<Result<Vec<_>, BoxError>>()?;
        let now = SystemClock.now();
        let later_template = checked_in(&cases[0], Interval::Daily, now)?;
        Ok(LiveSnitches {
            population,
            cases,
            later_template,
            due: Vec::new(),
        })
    }

    /// The row's boundaries, in time order.
    fn boundaries(&self) -> Result<Vec<Timestamp>, BoxError> {
        if self.due.is_empty() {
            return Err("no boundary planned".into());
        }
        Ok(self.due.iter().map(|(_, at)| *at).collect())
    }

    /// Plans the boundaries: the first minute start at least `lead` from now, the others
    /// `apart` after one another.
    fn plan_boundaries(&mut self, lead: chrono::Duration) -> Result<Vec<Timestamp>, BoxError> {
        let first = Interval::Minute1.period_of(SystemClock.now() + lead).end();
        self.due = (0..self.population.boundaries)
            .map(|k| {
                let boundary = first + self.population.apart * k as i32;
                Ok((self.due_template(boundary)?, boundary))
            })
            .collect::<Result<_, BoxError>>()?;
        self.boundaries()
    }

    /// The state of a snitch due at `boundary`: a job run once a day by cron, a minute
    /// before that minute start, with the least grace (a minute), so due at the boundary;
    /// it last checked in an hour before. Missed, it is due the next day: it does not fail
    /// again while the row runs, as a one-minute interval would, every minute.
    fn due_template(&self, boundary: Timestamp) -> Result<Snitch, BoxError> {
        use chrono::Timelike;
        let run = boundary - GRACE;
        let schedule =
            CronSchedule::parse(&format!("{} {} * * *", run.minute(), run.hour()), "UTC")?;
        let runs = ExpectedRuns::with_spans(schedule, GRACE, chrono::Duration::zero())
            .map_err(|v| v.message)?;
        let mut record = Snitch::new(
            bench_token(0)?,
            self.cases[0].id.clone(),
            SnitchName::parse("nightly backup").map_err(|v| v.message)?,
            Interval::Daily,
            boundary - chrono::Duration::days(2),
        )
        .to_record();
        record.cadence = runs.into();
        record.tags = Tags::parse(&["prod", "db"]).map_err(|v| v.message)?;
        let blank = Snitch::restore(record)?;
        let check_in = CheckIn::new(
            boundary - chrono::Duration::hours(1),
            Outcome::Success,
            None,
        );
        let template = machine::check_in(&blank, &check_in, &self.cases[0].plan).snitch;
        if template.wake_at() != Some(boundary) {
            return Err(format!(
                "the due template's deadline is {:?}, not {boundary}",
                template.wake_at()
            )
            .into());
        }
        Ok(template)
    }

    fn first_due(&self) -> usize {
        self.population.never_due()
    }

    fn case_of(&self, n: usize) -> usize {
        let p = &self.population;
        if n < p.list_case {
            0
        } else if p.list_case > 0 {
            1 + n % (p.cases - 1)
        } else {
            n % p.cases
        }
    }

    fn snitch(&self, n: usize) -> Result<Snitch, BoxError> {
        let template = if n >= self.first_due() {
            let boundary = (n - self.first_due()) / self.population.due;
            &self.due.get(boundary).ok_or("no boundary planned")?.0
        } else {
            &self.later_template
        };
        let mut record = template.to_record();
        record.token = bench_token(n)?;
        record.case_id = self.cases[self.case_of(n)].id.clone();
        record.name = SnitchName::parse(&format!("nightly backup {n}")).map_err(|v| v.message)?;
        record.tags = Tags::parse(&["prod", "db"]).map_err(|v| v.message)?;
        Ok(Snitch::restore(record)?)
    }

    /// Stores the cases, inserts the snitches never due, plans the boundaries (the first
    /// `lead` ahead; none when the population has none) and inserts the due ones, with
    /// the store's bulk insert, a batch at a time; the time the inserts took.
    async fn fill(
        &mut self,
        storage: Arc<dyn Storage>,
        lead: chrono::Duration,
    ) -> Result<Duration, BoxError> {
        for case in &self.cases {
            storage.upsert_case(case).await?;
        }
        let mut took = self.insert(storage.as_ref(), 0..self.first_due()).await?;
        if self.population.boundaries == 0 {
            return Ok(took);
        }
        let boundaries = self.plan_boundaries(lead)?;
        eprintln!("   the boundaries: {boundaries:?}");
        took += self
            .insert(storage.as_ref(), self.first_due()..self.population.total)
            .await?;
        Ok(took)
    }

    async fn insert(
        &self,
        storage: &dyn Storage,
        range: std::ops::Range<usize>,
    ) -> Result<Duration, BoxError> {
        insert_in_batches(storage, range, |n| self.snitch(n)).await
    }

    /// The check-in paths of snitches `range`.
    fn paths(&self, range: std::ops::Range<usize>) -> Result<Arc<[Uri]>, BoxError> {
        range
            .map(|n| Ok(Uri::from_str(&format!("/{}", bench_token(n)?))?))
            .collect()
    }

    /// The release server's configuration for this population: `store`, `/metrics` on a
    /// port of its own, every case with one webhook to `hook` (no member: no e-mail), the
    /// first case with [`API_KEY`] when it is the list's.
    fn server_config(&self, store: &BenchStore, hook: Option<&str>) -> String {
        let quoted = |text: &str| toml::Value::String(text.to_owned()).to_string();
        let mut config = server_config(store, &[], 0);
        config += "metrics_listen = \"127.0.0.1:0\"\nallow_private_webhooks = true\n";
        for (i, case) in self.cases.iter().enumerate() {
            let keys = if i == 0 && self.population.list_case > 0 {
                quoted(API_KEY)
            } else {
                String::new()
            };
            config += &format!(
                "\n[[case]]\nname = {}\nmax_snitches = {}\napi_keys = [{keys}]\nwebhooks = [{}]\n",
                quoted(case.id.as_str()),
                u32::MAX,
                hook.map(quoted).unwrap_or_default()
            );
        }
        config
    }
}

/// A snitch of `case` on `interval` that checked in (successfully) at `at`.
fn checked_in(case: &Case, interval: Interval, at: Timestamp) -> Result<Snitch, BoxError> {
    let mut blank = Snitch::new(
        bench_token(0)?,
        case.id.clone(),
        SnitchName::parse("nightly backup").map_err(|v| v.message)?,
        interval,
        at - chrono::Duration::hours(1),
    );
    blank.set_tags(Tags::parse(&["prod", "db"]).map_err(|v| v.message)?);
    let check_in = CheckIn::new(at, Outcome::Success, None);
    Ok(machine::check_in(&blank, &check_in, &case.plan).snitch)
}

/// Fills the fresh database `db` (migrated here) with `snitches`; the inserts' time.
async fn fill_postgres_live(
    db: &FreshDatabase,
    snitches: &mut LiveSnitches,
    lead: chrono::Duration,
) -> Result<Duration, BoxError> {
    let pool = PgPoolOptions::new()
        .max_connections(PG_CONNECTIONS)
        .connect_with(db.options.clone())
        .await?;
    MIGRATOR.run(&pool).await?;
    let storage: Arc<dyn Storage> = Arc::new(PgStorage::new(pool.clone()));
    let took = snitches.fill(storage, lead).await;
    pool.close().await;
    took
}

/// Fills a new SQLite file at `path` (migrated here, `synchronous = OFF` while filling)
/// with `snitches`; the inserts' time.
async fn fill_sqlite_live(
    path: &Path,
    snitches: &mut LiveSnitches,
    lead: chrono::Duration,
) -> Result<Duration, BoxError> {
    let options = snitch::store::sqlite::connect_options(path)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Off);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(SQLITE_FILL_CONNECTIONS)
        .connect_with(options)
        .await?;
    snitch::store::sqlite::MIGRATOR.run(&pool).await?;
    let storage: Arc<dyn Storage> = Arc::new(SqliteStorage::new(pool.clone()));
    let took = snitches.fill(storage, lead).await;
    pool.close().await;
    took
}

/// The release server on `store` (already filled with `snitches`), its `/metrics`
/// address and the webhook receiver its hooks go to.
struct LiveServer {
    server: SnitchProcess,
    metrics: SocketAddr,
    receiver: Arc<Receiver>,
    scrape_pause: Duration,
    webhooks: bool,
    /// Kept until the server is gone.
    _config: tempfile::NamedTempFile,
}

impl LiveServer {
    async fn start(
        store: &BenchStore,
        snitches: &LiveSnitches,
        sizes: &Sizes,
    ) -> Result<LiveServer, BoxError> {
        let (receiver, receiver_addr) = Receiver::start(Arc::new(ShiftedClock::default())).await?;
        let config = tempfile::Builder::new()
            .prefix("snitch-bench-")
            .suffix(".toml")
            .tempfile()?;
        let hook = format!("http://{receiver_addr}/hook");
        let hook = if sizes.webhooks { Some(hook) } else { None };
        std::fs::write(
            config.path(),
            snitches.server_config(store, hook.as_deref()),
        )?;
        let started = monotonic_now();
        let (server, metrics) = SnitchProcess::start_configured(config.path(), true).await?;
        eprintln!(
            "   server {} healthy in {:.1} s",
            server.pid(),
            started.elapsed().as_secs_f64()
        );
        Ok(LiveServer {
            server,
            metrics: metrics.ok_or("the server printed no metrics address")?,
            receiver,
            scrape_pause: sizes.scrape_pause,
            webhooks: sizes.webhooks,
            _config: config,
        })
    }
}

/// `snitch_snitches{status=…}` of one scrape of `/metrics`.
async fn scrape_statuses(
    client: &reqwest::Client,
    metrics: SocketAddr,
) -> Result<std::collections::BTreeMap<String, u64>, BoxError> {
    let text = client
        .get(format!("http://{metrics}/metrics"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let mut statuses = std::collections::BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("snitch_snitches{status=\"") {
            if let Some((status, value)) = rest.split_once("\"} ") {
                statuses.insert(status.to_owned(), value.trim().parse::<f64>()? as u64);
            }
        }
    }
    Ok(statuses)
}

/// What a live row saw of its sweep.
#[derive(Debug)]
struct SeenSweep {
    /// From the boundary to the answer of the first scrape showing every due snitch
    /// `failed`.
    all_failed: Duration,
    /// To the answer of the first scrape showing any of this boundary's.
    first_failed: Option<Duration>,
    scrapes: usize,
    /// How long a scrape took (nearest-rank, microseconds).
    scrape: Latency,
    /// The statuses a second after.
    settled: std::collections::BTreeMap<String, u64>,
    /// How many should be `failed` then: this boundary's due and those of the ones before.
    failed_after: usize,
    /// From the boundary to the first and the last `snitch.missing` hook, and how many.
    hooks: Option<(Duration, Duration)>,
    hook_count: usize,
}

impl SeenSweep {
    /// Whether exactly the snitches due so far are failed and all the others are not.
    fn exact(&self, population: &LivePopulation) -> bool {
        let failed = self.settled.get("failed").copied().unwrap_or(0) as usize;
        let all: u64 = self.settled.values().sum();
        failed == self.failed_after && all as usize == population.total
    }

    fn statuses(&self) -> String {
        self.settled
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(status, n)| format!("{} {status}", thousands(*n as usize)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `0.412 s from the boundary to … (…)`, one sweep of rows 3d and 3e.
    fn figure(&self, population: &LivePopulation) -> String {
        let hooks = match self.hooks {
            Some((first, last)) => format!(
                "`snitch.missing` webhooks {} of {}, the first {:.3} s and the last {:.3} s \
                 after the boundary",
                thousands(self.hook_count),
                thousands(population.due),
                first.as_secs_f64(),
                last.as_secs_f64()
            ),
            None => "no webhook arrived".into(),
        };
        format!(
            "{:.3} s from the boundary to `/metrics` showing all {} due at it `failed` (the first \
             `failed` seen at {}; {} scrapes, p50 {} each); a second later {}{}; {hooks}",
            self.all_failed.as_secs_f64(),
            thousands(population.due),
            self.first_failed
                .map_or("—".to_owned(), |d| format!("{:.3} s", d.as_secs_f64())),
            thousands(self.scrapes),
            ms(self.scrape.p50),
            self.statuses(),
            if self.exact(population) {
                " (exactly the ones due so far: checked)"
            } else {
                " — NOT exactly the ones due so far"
            },
        )
    }
}

/// The item of `items` whose `key` is the median (of an even count, the upper one).
fn median_by<T, K: Ord>(items: &[T], key: impl Fn(&T) -> K) -> Result<&T, BoxError> {
    let mut sorted: Vec<&T> = items.iter().collect();
    sorted.sort_by_key(|item| key(item));
    sorted
        .get(sorted.len() / 2)
        .copied()
        .ok_or_else(|| "nothing was measured".into())
}

/// `0.812, 0.950, 0.801 s`: each run's time, in the order run.
fn seconds(times: impl Iterator<Item = Duration>) -> String {
    let times: Vec<String> = times.map(|t| format!("{:.3}", t.as_secs_f64())).collect();
    format!("{} s", times.join(", "))
}

/// `3 boundaries a minute apart` (`2 minutes`, …).
fn boundaries_apart(population: &LivePopulation) -> String {
    let minutes = population.apart.num_minutes();
    let apart = if minutes == 1 {
        "a minute".to_owned()
    } else {
        format!("{minutes} minutes")
    };
    format!("{} boundaries {apart} apart", population.boundaries)
}

/// Watches every boundary of `snitches` in turn ([`watch_sweep`]); the webhooks of
/// each are waited for up to `hook_timeout`, and never closer than [`NEXT_BOUNDARY_ROOM`]
/// to the next boundary.
async fn watch_sweeps(
    live: &LiveServer,
    snitches: &LiveSnitches,
    timeout: Duration,
    hook_timeout: Duration,
) -> Result<Vec<SeenSweep>, BoxError> {
    let boundaries = snitches.boundaries()?;
    let mut seen = Vec::new();
    for (k, boundary) in boundaries.iter().enumerate() {
        let hooks_until = match boundaries.get(k + 1) {
            Some(next) => (*boundary + chrono::Duration::from_std(hook_timeout)?)
                .min(*next - NEXT_BOUNDARY_ROOM),
            None => *boundary + chrono::Duration::from_std(hook_timeout)?,
        };
        let sweep = watch_sweep(
            live,
            *boundary,
            &snitches.population,
            k * snitches.population.due,
            timeout,
            hooks_until,
        )
        .await?;
        eprintln!(
            "   boundary {}/{}: {}",
            k + 1,
            boundaries.len(),
            sweep.figure(&snitches.population)
        );
        seen.push(sweep);
    }
    Ok(seen)
}

/// How long before the next boundary a row stops waiting for the webhooks of the one
/// before, to scrape the statuses ahead of it.
const NEXT_BOUNDARY_ROOM: chrono::Duration = chrono::Duration::seconds(10);

/// Scrapes `/metrics` from just before `boundary`, when `failed_before` snitches are
/// failed (those of the boundaries before), one scrape at a time with
/// `--scrape-pause-ms` between (5 ms), until this boundary's `due` are failed too (or
/// `timeout` after the boundary); then waits for their webhooks until `hooks_until` at
/// the latest.
async fn watch_sweep(
    live: &LiveServer,
    boundary: Timestamp,
    population: &LivePopulation,
    failed_before: usize,
    timeout: Duration,
    hooks_until: Timestamp,
) -> Result<SeenSweep, BoxError> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let before = scrape_statuses(&client, live.metrics).await?;
    let hooks_before = live.receiver.arrivals(|a| a.missing.len());
    let left = boundary - SystemClock.now();
    let all: u64 = before.values().sum();
    if before.get("failed").copied().unwrap_or(0) as usize != failed_before
        || all as usize != population.total
    {
        return Err(format!(
            "before the boundary the server shows {before:?}, not {failed_before} failed"
        )
        .into());
    }
    if left <= chrono::Duration::milliseconds(200) {
        return Err(format!(
            "the boundary {boundary} came before the server was ready ({} ms left): raise \
             the lead",
            left.num_milliseconds()
        )
        .into());
    }
    eprintln!(
        "   {} snitches due in {:.1} s; scraping /metrics from just before",
        thousands(population.due),
        left.num_milliseconds() as f64 / 1000.0
    );
    tokio::time::sleep((left - chrono::Duration::milliseconds(100)).to_std()?).await;
    let since = |at: Timestamp| (at - boundary).to_std().unwrap_or(Duration::ZERO);
    let mut scrape_micros = Vec::new();
    let mut first_failed = None;
    let all_failed = loop {
        let sent = monotonic_now();
        let statuses = scrape_statuses(&client, live.metrics).await?;
        let answered = SystemClock.now();
        scrape_micros.push(as_micros(sent.elapsed()));
        let failed = statuses.get("failed").copied().unwrap_or(0) as usize;
        if failed > failed_before && first_failed.is_none() && answered >= boundary {
            first_failed = Some(since(answered));
        }
        if failed >= failed_before + population.due {
            break since(answered);
        }
        if since(answered) > timeout {
            return Err(format!(
                "{} s after the boundary /metrics shows {} of {} failed",
                timeout.as_secs(),
                failed,
                failed_before + population.due
            )
            .into());
        }
        tokio::time::sleep(live.scrape_pause).await;
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let settled = scrape_statuses(&client, live.metrics).await?;
    let due = population.due;
    let hook_timeout = if live.webhooks {
        (hooks_until - SystemClock.now())
            .to_std()
            .unwrap_or(Duration::ZERO)
    } else {
        Duration::ZERO
    };
    live.receiver
        .wait_for(hook_timeout, |a| a.missing.len() >= hooks_before + due)
        .await;
    let (hooks, hook_count) = live.receiver.arrivals(|a| {
        let these = &a.missing[hooks_before.min(a.missing.len())..];
        let first = these.iter().min().copied();
        let last = these.iter().max().copied();
        (
            first.zip(last).map(|(f, l)| (since(f), since(l))),
            these.len(),
        )
    });
    Ok(SeenSweep {
        all_failed,
        first_failed,
        scrapes: scrape_micros.len(),
        scrape: Latency::of(scrape_micros).ok_or("no scrape")?,
        settled,
        failed_after: failed_before + due,
        hooks,
        hook_count,
    })
}

/// Row 3d: the sweep of a release server on Postgres as its users see it.
async fn sweep_seen_postgres(sizes: &Sizes, database_url: &str) -> Result<Measured, BoxError> {
    let db = FreshDatabase::create(database_url).await?;
    let result = async {
        let mut snitches = LiveSnitches::new(sizes.sweep_seen)?;
        let inserted = fill_postgres_live(&db, &mut snitches, SEEN_LEAD).await?;
        sweep_seen(
            sizes,
            &BenchStore::Postgres(db.url.clone()),
            &snitches,
            format!("bulk `insert_snitches` in {:.1} s", inserted.as_secs_f64()),
        )
        .await
    }
    .await;
    db.drop_it().await;
    result
}

/// Row 3e: the same on SQLite, the file filled with `synchronous = OFF` first, then
/// opened by the server with its own settings.
async fn sweep_seen_sqlite(sizes: &Sizes) -> Result<Measured, BoxError> {
    let dir = fresh_sqlite_dir()?;
    let path = dir.path().join("bench.db");
    let mut snitches = LiveSnitches::new(sizes.sweep_seen)?;
    let inserted = fill_sqlite_live(&path, &mut snitches, SEEN_LEAD).await?;
    sweep_seen(
        sizes,
        &BenchStore::Sqlite(path),
        &snitches,
        format!(
            "bulk `insert_snitches` in {:.1} s, `synchronous = OFF`",
            inserted.as_secs_f64()
        ),
    )
    .await
}

async fn sweep_seen(
    sizes: &Sizes,
    store: &BenchStore,
    snitches: &LiveSnitches,
    set_up: String,
) -> Result<Measured, BoxError> {
    let live = LiveServer::start(store, snitches, sizes).await?;
    let population = snitches.population;
    let seen = watch_sweeps(
        &live,
        snitches,
        Duration::from_secs(60),
        Duration::from_secs(60),
    )
    .await?;
    let median = median_by(&seen, |s| s.all_failed)?;
    Ok(Measured {
        figure: format!(
            "median {:.3} s of {} ({}); the median one: {} (set-up: {} snitches, {} due at \
             each boundary, made by {set_up})",
            median.all_failed.as_secs_f64(),
            boundaries_apart(&population),
            seconds(seen.iter().map(|s| s.all_failed)),
            median.figure(&population),
            thousands(population.total),
            thousands(population.due),
        ),
        met: seen.iter().all(|s| s.exact(&population))
            && median.all_failed < Duration::from_secs(1),
    })
}

/// `VmRSS` and `VmHWM` of process `pid`, in bytes.
fn process_memory(pid: u32) -> Result<(u64, u64), BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64, BoxError> {
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .ok_or_else(|| format!("no {name} in /proc/{pid}/status"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()?;
        Ok(kib * 1024)
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / f64::from(1 << 20))
}

/// Row 8: a million snitches in one release server on Postgres.
async fn million_postgres(sizes: &Sizes, database_url: &str) -> Result<Measured, BoxError> {
    let population = sizes.million;
    if population.list_case != sizes.api_snitches {
        return Err("row 8's list case must hold row 6's number of snitches".into());
    }
    // Row 2's figure (measured now, in a database of its own, if it did not run).
    if ROW_2.get().is_none() {
        eprintln!("   row 2 did not run: measuring it first, for the comparison");
        check_in_postgres(sizes, database_url).await?;
    }
    if ROW_6.get().is_none() {
        eprintln!("   row 6 did not run: measuring it first, for the comparison");
        api_list(sizes).await?;
    }
    let row_2 = ROW_2.get().ok_or("row 2 has no figure")?;
    let row_6 = *ROW_6.get().ok_or("row 6 has no figure")?;
    let alone = list_alone(sizes, database_url).await?;
    eprintln!(
        "   (e) the list case alone in a store of its own: p50 {}, p99 {}",
        ms(alone.p50),
        ms(alone.p99)
    );
    let db = FreshDatabase::create(database_url).await?;
    let result = million_in(sizes, &db, row_2, row_6, alone).await;
    db.drop_it().await;
    result
}

/// Row 8e's comparator: the list case's snitches, made as row 8 makes them, alone in a
/// Postgres store of their own, behind the same release server, listed by the same client.
async fn list_alone(sizes: &Sizes, database_url: &str) -> Result<Latency, BoxError> {
    let n = sizes.million.list_case;
    let population = LivePopulation {
        total: n,
        due: 0,
        cases: 1,
        list_case: n,
        boundaries: 0,
        apart: chrono::Duration::zero(),
    };
    let db = FreshDatabase::create(database_url).await?;
    let listed = async {
        let mut snitches = LiveSnitches::new(population)?;
        fill_postgres_live(&db, &mut snitches, MILLION_LEAD).await?;
        let store = BenchStore::Postgres(db.url.clone());
        let live = LiveServer::start(&store, &snitches, sizes).await?;
        let (latency, _) = time_list(live.server.api_addr, sizes).await?;
        Ok::<_, BoxError>(latency)
    }
    .await;
    db.drop_it().await;
    listed
}

/// Row 8e's target: "a case's list of 10,000 unchanged" by the million around it, read as
/// a median at most this much slower than the case's alone.
const LIST_UNCHANGED_WITHIN: f64 = 1.2;

async fn million_in(
    sizes: &Sizes,
    db: &FreshDatabase,
    row_2: &Comparison,
    row_6: Latency,
    alone: Latency,
) -> Result<Measured, BoxError> {
    let population = sizes.million;
    let row_started = monotonic_now();
    // (a) Creating them.
    let mut snitches = LiveSnitches::new(population)?;
    // The boundary comes after the check-in loads and the list (their time, generously,
    // on top of the start's lead).
    let loads = 3 * sizes.rounds as u32 * (sizes.warm_up + sizes.measure);
    let lead = MILLION_LEAD + chrono::Duration::from_std(loads * 3 / 2 + Duration::from_secs(15))?;
    let inserted = fill_postgres_live(db, &mut snitches, lead).await?;
    eprintln!(
        "   (a) {} snitches inserted in {:.1} s",
        thousands(population.total),
        inserted.as_secs_f64()
    );
    let live = LiveServer::start(&BenchStore::Postgres(db.url.clone()), &snitches, sizes).await?;
    let pid = live.server.pid();
    let (rss_started, _) = process_memory(pid)?;
    // (e) The list of the 10,000-snitch case, before any load.
    let (list_before, _) = time_list(live.server.api_addr, sizes).await?;
    eprintln!(
        "   (e) the list before the loads: p50 {}, p99 {}",
        ms(list_before.p50),
        ms(list_before.p99)
    );
    // (b) Check-ins, before the boundary: 10,000 of them (never due), then spread over
    // every snitch never due (a check-in of a due one would move its deadline).
    let first = population.list_case;
    let checked = snitches.paths(first..first + sizes.check_in_snitches)?;
    let tokens: Vec<String> = checked
        .iter()
        .map(|p| p.path().trim_start_matches('/').to_owned())
        .collect();
    check_in_all_over_http(live.server.check_in_addr, &tokens).await?;
    let comparison = compare_with_baseline(live.server.check_in_addr, checked, sizes).await?;
    let (rss_loaded, _) = process_memory(pid)?;
    let spread_paths = snitches.paths(0..snitches.first_due())?;
    let mut spread_rounds = Vec::new();
    for round in 1..=sizes.rounds {
        let result =
            load_spread(live.server.check_in_addr, spread_paths.clone(), sizes, None).await?;
        eprintln!(
            "   round {round}/{} spread over {}: {} req/s, p50 {}, p99 {}",
            sizes.rounds,
            thousands(spread_paths.len()),
            thousands(result.per_second.round() as usize),
            ms(result.latency.p50),
            ms(result.latency.p99)
        );
        spread_rounds.push(result);
    }
    let spread = median_load(&spread_rounds);
    let (rss_spread, _) = process_memory(pid)?;
    // (e) And after them.
    let (list, list_bytes) = time_list(live.server.api_addr, sizes).await?;
    eprintln!(
        "   (e) the list after the loads: p50 {}, p99 {}",
        ms(list.p50),
        ms(list.p99)
    );
    // (c) The sweeps, as users see them.
    let seen = watch_sweeps(
        &live,
        &snitches,
        Duration::from_secs(120),
        Duration::from_secs(120),
    )
    .await?;
    let median = median_by(&seen, |s| s.all_failed)?;
    // (d) Memory at the end.
    let (rss, hwm) = process_memory(pid)?;
    let last_boundary = *snitches.boundaries()?.last().ok_or("no boundary")?;
    let (hooks_at_end, last_hook) = live.receiver.arrivals(|a| {
        (
            a.missing.len(),
            a.missing
                .iter()
                .max()
                .map(|l| (*l - last_boundary).num_milliseconds() as f64 / 1000.0),
        )
    });
    drop(live);
    eprintln!(
        "   resident: {} at the start, {} after the 10,000-token load, {} after the spread \
         load, {} at the end, after the sweep (peak {})",
        mib(rss_started),
        mib(rss_loaded),
        mib(rss_spread),
        mib(rss),
        mib(hwm)
    );
    let to_row_2 = comparison.snitch.per_second / row_2.snitch.per_second;
    let spread_to_row_2 = spread.per_second / row_2.snitch.per_second;
    let list_to_alone = list.p50 as f64 / alone.p50 as f64;
    let figure = format!(
        "(a) created in {:.1} s (bulk `insert_snitches`, batches of 10,000); (b) {} \
         snitches checked in: {:.2} of row 2's rate ({} vs {} req/s), {:.2} of baseline \
         ({} req/s; row 2 {:.2}); p50/p99 {} / {}; spread over the {} never due: {} req/s \
         ({:.2} of row 2's), p50/p99 {} / {}; (c) median {:.3} s of {} ({}) from the \
         boundary to `/metrics` showing all {} due at it `failed` (the median one: a second \
         later {}{}; its webhooks {} of {}{}; by the row's end {} of {}{}); \
         (d) resident {} at the end, after the sweep, peak {} (VmRSS/VmHWM; {} when \
         started, {} after the {}-snitch load, {} after the spread load); (e) list of {} \
         snitches p50 {}, p99 {} ({:.1} MB), {:.2} of the case's alone in a Postgres store \
         of its own (p50 {}, p99 {}); before the loads p50 {}, p99 {} (row 6, memory store \
         in-process: p50 {}, p99 {}); the row took {}",
        inserted.as_secs_f64(),
        thousands(sizes.check_in_snitches),
        to_row_2,
        thousands(comparison.snitch.per_second.round() as usize),
        thousands(row_2.snitch.per_second.round() as usize),
        comparison.ratio(),
        thousands(comparison.baseline.per_second.round() as usize),
        row_2.ratio(),
        ms(comparison.snitch.latency.p50),
        ms(comparison.snitch.latency.p99),
        thousands(spread_paths.len()),
        thousands(spread.per_second.round() as usize),
        spread_to_row_2,
        ms(spread.latency.p50),
        ms(spread.latency.p99),
        median.all_failed.as_secs_f64(),
        boundaries_apart(&population),
        seconds(seen.iter().map(|s| s.all_failed)),
        thousands(population.due),
        median.statuses(),
        if median.exact(&population) {
            ", exactly the ones due so far"
        } else {
            ", NOT exactly the ones due so far"
        },
        thousands(median.hook_count),
        thousands(population.due),
        median.hooks.map_or(String::new(), |(f, l)| format!(
            ", the first {:.2} s and the last {:.2} s after its boundary",
            f.as_secs_f64(),
            l.as_secs_f64()
        )),
        thousands(hooks_at_end),
        thousands(population.due * population.boundaries),
        last_hook.map_or(String::new(), |l| format!(
            ", the last {l:.1} s after the last boundary"
        )),
        mib(rss),
        mib(hwm),
        mib(rss_started),
        mib(rss_loaded),
        thousands(sizes.check_in_snitches),
        mib(rss_spread),
        thousands(population.list_case),
        ms(list.p50),
        ms(list.p99),
        list_bytes as f64 / 1e6,
        list_to_alone,
        ms(alone.p50),
        ms(alone.p99),
        ms(list_before.p50),
        ms(list_before.p99),
        ms(row_6.p50),
        ms(row_6.p99),
        human_duration(row_started.elapsed()),
    );
    Ok(Measured {
        figure,
        met: inserted < Duration::from_secs(60)
            && to_row_2 >= 0.9
            && seen.iter().all(|s| s.exact(&population))
            && median.all_failed < Duration::from_secs(5)
            && hwm < 512 << 20
            && list_to_alone <= LIST_UNCHANGED_WITHIN,
    })
}

// ---------------------------------------------------------------------------------------
// Row 2d: Postgres check-ins long enough for history trims and vacuum.

/// Row 2d: row 2's load, in rounds until every snitch has passed a history trim, then the
/// history table's rows, size and a `VACUUM (ANALYZE)`, and one more round with a
/// `VACUUM` running meanwhile.
async fn check_in_postgres_long(sizes: &Sizes, database_url: &str) -> Result<Measured, BoxError> {
    let db = FreshDatabase::create(database_url).await?;
    let result = long_in(sizes, &db).await;
    db.drop_it().await;
    result
}

/// `SELECT` of one bigint.
async fn pg_number(admin: &mut PgConnection, sql: &str) -> Result<i64, BoxError> {
    Ok(sqlx::query_scalar::<_, i64>(sql).fetch_one(admin).await?)
}

const CHECK_INS_SIZE: &str = "SELECT pg_total_relation_size('snitch.check_ins')";

async fn long_in(sizes: &Sizes, db: &FreshDatabase) -> Result<Measured, BoxError> {
    let (server, paths) = check_in_server(sizes, BenchStore::Postgres(db.url.clone())).await?;
    let mut admin = PgConnection::connect_with(&db.options).await?;
    let snitches = paths.len();
    // The server's default history (`check_in_history`), and where a save trims it
    // (`trim_at` of the Postgres store: twice the keep).
    let keep = snitch::core::snitch::CHECK_INS_KEPT;
    let trim_at = 2 * keep;
    // Every snitch holds its set-up check-in; each needs `trim_at` to be trimmed once.
    let needed = (snitches * trim_at) as f64 * 1.1;
    let mut round_sizes = sizes.clone();
    round_sizes.measure = sizes.long_round;
    let (min_rounds, max_rounds) = sizes.long_rounds;
    let mut rounds = Vec::new();
    let mut total = 0.0;
    while rounds.len() < max_rounds && (rounds.len() < min_rounds || total < needed) {
        let result = load_spread(
            server.check_in_addr,
            paths.clone(),
            &round_sizes,
            Some(Duration::ZERO),
        )
        .await?;
        total += result.per_second * sizes.long_round.as_secs_f64();
        let stored = pg_number(&mut admin, "SELECT count(*) FROM snitch.check_ins").await?;
        eprintln!(
            "   round {}: {} req/s, p50 {}, p99 {}; {:.0} check-ins per snitch so far, {} \
             rows stored",
            rounds.len() + 1,
            thousands(result.per_second.round() as usize),
            ms(result.latency.p50),
            ms(result.latency.p99),
            total / snitches as f64,
            thousands(stored as usize)
        );
        rounds.push(result);
    }
    let per_snitch = total / snitches as f64 + 1.0;
    let stored = pg_number(&mut admin, "SELECT count(*) FROM snitch.check_ins").await?;
    let (least, most): (i64, i64) = sqlx::query_as(
        "SELECT min(n), max(n) FROM (SELECT count(*) AS n FROM snitch.check_ins GROUP BY token) c",
    )
    .fetch_one(&mut admin)
    .await?;
    let (dead, autovacuums): (i64, i64) = sqlx::query_as(
        "SELECT n_dead_tup, autovacuum_count FROM pg_stat_user_tables \
         WHERE schemaname = 'snitch' AND relname = 'check_ins'",
    )
    .fetch_one(&mut admin)
    .await?;
    let size_before = pg_number(&mut admin, CHECK_INS_SIZE).await?;
    let vacuum_started = monotonic_now();
    admin.execute("VACUUM (ANALYZE) snitch.check_ins").await?;
    let vacuum = vacuum_started.elapsed();
    let size_after = pg_number(&mut admin, CHECK_INS_SIZE).await?;
    eprintln!(
        "   VACUUM (ANALYZE) in {:.2} s: {} → {} MiB ({} dead rows before, {} autovacuums)",
        vacuum.as_secs_f64(),
        size_before >> 20,
        size_after >> 20,
        thousands(dead as usize),
        autovacuums
    );
    // One more round, a VACUUM started a third into it.
    let options = db.options.clone();
    let delay = sizes.long_round / 3;
    let concurrent = tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let mut connection = PgConnection::connect_with(&options).await?;
        let started = monotonic_now();
        connection
            .execute("VACUUM (ANALYZE) snitch.check_ins")
            .await?;
        let took = started.elapsed();
        connection.close().await?;
        Ok::<_, BoxError>(took)
    });
    let during = load_spread(
        server.check_in_addr,
        paths.clone(),
        &round_sizes,
        Some(Duration::ZERO),
    )
    .await?;
    let concurrent_vacuum = concurrent.await??;
    admin.close().await?;
    drop(server);
    let first = rounds[0].per_second;
    let lowest = rounds
        .iter()
        .map(|r| r.per_second)
        .fold(f64::INFINITY, f64::min);
    let rates = rounds
        .iter()
        .map(|r| thousands(r.per_second.round() as usize))
        .collect::<Vec<_>>()
        .join(" / ");
    let median = median_load(&rounds);
    Ok(Measured {
        figure: format!(
            "{} rounds of {} s: {rates} req/s (median {}, p50/p99 {} / {}; lowest {:.2} of \
             the first), about {per_snitch:.0} check-ins per snitch (a trim at {trim_at}, \
             back to {keep}); then {} rows in `snitch.check_ins` vs {} snitches × {keep} = \
             {} (per snitch {least}–{most}); `VACUUM (ANALYZE)` took {:.2} s, {} → {} MiB \
             ({} dead rows before it, {autovacuums} autovacuums during the rounds); a round \
             with a `VACUUM (ANALYZE)` started {:.1} s in (it took {:.2} s): {} req/s, p50/p99 \
             {} / {}",
            rounds.len(),
            sizes.long_round.as_secs(),
            thousands(median.per_second.round() as usize),
            ms(median.latency.p50),
            ms(median.latency.p99),
            lowest / first,
            thousands(stored as usize),
            thousands(snitches),
            thousands(snitches * keep),
            vacuum.as_secs_f64(),
            size_before >> 20,
            size_after >> 20,
            thousands(dead as usize),
            delay.as_secs_f64(),
            concurrent_vacuum.as_secs_f64(),
            thousands(during.per_second.round() as usize),
            ms(during.latency.p50),
            ms(during.latency.p99),
        ),
        met: lowest >= 0.8 * first,
    })
}

// ---------------------------------------------------------------------------------------
// Shared helpers: the server, snitches through the service, Postgres, statistics, report.

/// The real server (`snitch::server::launch_with_clock`) on two listeners on 127.0.0.1:0.
#[derive(Debug)]
struct BenchServer {
    running: Running,
    stop: oneshot::Sender<()>,
}

impl BenchServer {
    async fn start(config: Config, clock: Arc<dyn Clock>) -> Result<BenchServer, BoxError> {
        let api = TcpListener::bind("127.0.0.1:0").await?;
        let check_in = TcpListener::bind("127.0.0.1:0").await?;
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async {
            let _ = stopped.await;
        };
        let running = launch_with_clock(config, api, check_in, clock, shutdown).await?;
        Ok(BenchServer { running, stop })
    }

    async fn stop(self) -> Result<(), BoxError> {
        let _ = self.stop.send(());
        self.running.wait().await?;
        Ok(())
    }
}

/// How long a server process may take to listen and answer `/healthz` (Postgres
/// migrations included).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A release example binary built next to this one (`scripts/bench.sh` builds them all),
/// so that a `CARGO_TARGET_DIR` elsewhere works too.
fn sibling_binary(name: &str) -> Result<PathBuf, BoxError> {
    let exe = std::env::current_exe()?;
    let path = exe
        .parent()
        .ok_or("the benchmark's executable has no directory")?
        .join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing: build it with `cargo build --release --example {name}` \
             (scripts/bench.sh does)",
            path.display()
        )
        .into())
    }
}

/// A command running `program` as a child that is killed when the benchmark dies, killed
/// by a signal included (no destructor runs then): through util-linux's `setpriv
/// --pdeathsig`, which sets the signal and then runs the program in its place (same
/// process, nothing else in between). The signal goes when the thread that started the
/// child ends: the children here are started on the main thread, on a runtime worker,
/// or on a blocking thread that waits for them. Without `setpriv`, a plain command.
fn child_command(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    static SETPRIV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let setpriv = *SETPRIV.get_or_init(|| {
        let found = std::process::Command::new("setpriv")
            .arg("--version")
            .output()
            .is_ok_and(|output| output.status.success());
        if !found {
            eprintln!(
                "no setpriv (util-linux): a signal that kills the benchmark leaves its \
                 servers running"
            );
        }
        found
    });
    if !setpriv {
        return std::process::Command::new(program);
    }
    let mut command = std::process::Command::new("setpriv");
    command
        .arg("--pdeathsig")
        .arg("KILL")
        .arg("--")
        .arg(program);
    command
}

/// A server running as a child process. Dropping it kills the child by its PID and waits
/// for it, so no error path leaves a server running; a signal that kills the benchmark
/// kills it too ([`child_command`]).
#[derive(Debug)]
struct ChildServer {
    name: &'static str,
    child: std::process::Child,
    /// The addresses it printed, one for each prefix given to [`ChildServer::start`].
    addrs: Vec<SocketAddr>,
}

impl ChildServer {
    /// Starts `command`, reads the address of the line it prints starting with each of
    /// `prefixes` (`… listening on <address>…`), then waits until `/healthz` answers on
    /// each address.
    async fn start(
        name: &'static str,
        mut command: std::process::Command,
        prefixes: &[&str],
    ) -> Result<ChildServer, BoxError> {
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let stdout = child.stdout.take();
        // The guard first: from here on, any error kills the child.
        let mut server = ChildServer {
            name,
            child,
            addrs: Vec::new(),
        };
        let stdout = stdout.ok_or("the child's stdout is not piped")?;
        let (lines, listening) = std::sync::mpsc::channel::<String>();
        let wanted: Vec<String> = prefixes.iter().map(|p| (*p).to_owned()).collect();
        // Reads the child's output to its end, so it never blocks on a full pipe; lines
        // other than its addresses (warnings, errors) are passed on to stderr.
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
                let Ok(line) = line else { break };
                if line.contains("listening on ") || wanted.iter().any(|p| line.starts_with(p)) {
                    let _ = lines.send(line);
                } else if line.contains(" INFO ") && line.contains("delivery attempt") {
                    // One a delivery: read (the server writes them, as for its users),
                    // not repeated here, where a sweep's thousands would drown the rest.
                } else {
                    eprintln!("   [{name}] {line}");
                }
            }
        });
        let mut addrs: Vec<Option<SocketAddr>> = vec![None; prefixes.len()];
        let give_up = monotonic_now() + START_TIMEOUT;
        while addrs.iter().any(Option::is_none) {
            match listening.try_recv() {
                Ok(line) => {
                    if let Some(i) = prefixes.iter().position(|p| line.starts_with(p)) {
                        addrs[i] = Some(listening_addr(&line)?);
                    }
                }
                Err(std::sync::mpsc::TryRecvError::Empty) if monotonic_now() < give_up => {
                    if let Some(status) = server.child.try_wait()? {
                        return Err(format!("{name} exited before listening: {status}").into());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    return Err(format!(
                        "{name} did not print its addresses within {} s",
                        START_TIMEOUT.as_secs()
                    )
                    .into())
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    let status = server.child.wait()?;
                    return Err(
                        format!("{name} closed its output before listening: {status}").into(),
                    );
                }
            }
        }
        server.addrs = addrs.into_iter().flatten().collect();
        for addr in server.addrs.clone() {
            server.wait_healthy(addr, give_up).await?;
        }
        Ok(server)
    }

    /// Polls `GET /healthz` on `addr` until it answers 2xx.
    async fn wait_healthy(&mut self, addr: SocketAddr, give_up: Instant) -> Result<(), BoxError> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()?;
        let url = format!("http://{addr}/healthz");
        loop {
            let last = match client.get(&url).send().await {
                Ok(answer) if answer.status().is_success() => return Ok(()),
                Ok(answer) => format!("answered {}", answer.status()),
                Err(e) => e.to_string(),
            };
            if let Some(status) = self.child.try_wait()? {
                return Err(format!("{} exited while starting: {status}", self.name).into());
            }
            if monotonic_now() >= give_up {
                return Err(format!("{} is not healthy at {url}: {last}", self.name).into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        // `Child::kill` signals this child's own PID; `wait` reaps it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address after `listening on ` in a line such as
/// `Snitch API: http://… (listening on 127.0.0.1:40123)`.
/// or `Snitch metrics:   http://127.0.0.1:40125/metrics`.
fn listening_addr(line: &str) -> Result<SocketAddr, BoxError> {
    let rest = line
        .split_once("listening on ")
        .or_else(|| line.split_once("http://"))
        .map(|(_, rest)| rest)
        .ok_or_else(|| format!("no address in {line:?}"))?;
    let addr = rest
        .split(|c: char| c == ')' || c == '/' || c.is_whitespace())
        .next()
        .unwrap_or(rest);
    addr.parse()
        .map_err(|e| format!("cannot read the address in {line:?}: {e}").into())
}

/// A case of a check-in row's server, with its own API key.
#[derive(Debug, Clone)]
struct BenchCase {
    name: String,
    key: String,
}

/// The release server (`examples/server.rs`) as a separate process on two ports picked by
/// the system.
#[derive(Debug)]
struct SnitchProcess {
    api_addr: SocketAddr,
    check_in_addr: SocketAddr,
    /// Killed when dropped.
    process: ChildServer,
}

impl SnitchProcess {
    /// The process id of the server (`setpriv` runs it in its own place).
    fn pid(&self) -> u32 {
        self.process.child.id()
    }
}

impl SnitchProcess {
    /// Starts the server on `store` with `cases` holding up to `max_snitches` each, from a
    /// configuration file made for it; the API's rate limit is raised so that it does not
    /// slow the set-up.
    async fn start(
        store: &BenchStore,
        cases: &[BenchCase],
        max_snitches: usize,
    ) -> Result<SnitchProcess, BoxError> {
        let config = tempfile::Builder::new()
            .prefix("snitch-bench-")
            .suffix(".toml")
            .tempfile()?;
        std::fs::write(config.path(), server_config(store, cases, max_snitches))?;
        let (server, _) = SnitchProcess::start_configured(config.path(), false).await?;
        Ok(server)
    }

    /// Starts the server with the configuration file at `config`; with `metrics`, the
    /// file must set `metrics_listen`, and the metrics address is returned too.
    async fn start_configured(
        config: &Path,
        metrics: bool,
    ) -> Result<(SnitchProcess, Option<SocketAddr>), BoxError> {
        let mut command = child_command(sibling_binary("server")?);
        command.arg("--config").arg(config).arg("serve");
        // Only the file configures it: `DATABASE_URL` (set by scripts/bench.sh) or a
        // `SNITCH_*` variable of this environment would override it.
        for (name, _) in std::env::vars_os() {
            if name == "DATABASE_URL" || name.to_string_lossy().starts_with("SNITCH_") {
                command.env_remove(name);
            }
        }
        // The server's default log level, as an operator runs it (accepted check-ins are
        // logged at debug, so not per request; API calls are).
        command.env("RUST_LOG", "info").env("NO_COLOR", "1");
        let prefixes: &[&str] = if metrics {
            &["Snitch API:", "Snitch check-ins:", "Snitch metrics:"]
        } else {
            &["Snitch API:", "Snitch check-ins:"]
        };
        let process = ChildServer::start("server", command, prefixes).await?;
        let metrics_addr = process.addrs.get(2).copied();
        Ok((
            SnitchProcess {
                api_addr: process.addrs[0],
                check_in_addr: process.addrs[1],
                process,
            },
            metrics_addr,
        ))
    }
}

/// The server's TOML configuration for a check-in row.
fn server_config(store: &BenchStore, cases: &[BenchCase], max_snitches: usize) -> String {
    let quoted = |text: &str| toml::Value::String(text.to_owned()).to_string();
    let mut config = format!(
        "listen = \"127.0.0.1:0\"\n\
         check_in_listen = \"127.0.0.1:0\"\n\
         rate_limit_per_second = {NO_RATE_LIMIT}\n\
         rate_limit_burst = {NO_RATE_LIMIT}\n"
    );
    match store {
        BenchStore::Memory => config += "store = \"memory\"\n",
        BenchStore::Postgres(url) => {
            config += &format!("store = \"postgres\"\ndatabase_url = {}\n", quoted(url));
        }
        BenchStore::Sqlite(path) => {
            config += &format!(
                "store = \"sqlite\"\ndata_path = {}\n",
                quoted(&path.to_string_lossy())
            );
        }
    }
    for case in cases {
        config += &format!(
            "\n[[case]]\nname = {}\nmax_snitches = {max_snitches}\napi_keys = [{}]\n",
            quoted(&case.name),
            quoted(&case.key)
        );
    }
    config
}

/// Creates `per_case` snitches in each case with `POST /v1/snitches` (one client task per
/// case, as the Postgres store makes inserts into one case take turns); their tokens.
async fn create_snitches_over_http(
    api: SocketAddr,
    cases: &[BenchCase],
    per_case: usize,
    interval: &str,
) -> Result<Vec<String>, BoxError> {
    let progress = Progress::start("created", per_case * cases.len());
    let client = reqwest::Client::new();
    let url = format!("http://{api}/v1/snitches");
    let mut tasks = JoinSet::new();
    for case in cases {
        let (client, url, case, done) = (
            client.clone(),
            url.clone(),
            case.clone(),
            progress.counter(),
        );
        let interval = interval.to_owned();
        tasks.spawn(async move {
            let mut tokens = Vec::with_capacity(per_case);
            for n in 0..per_case {
                let body = serde_json::json!({
                    "name": format!("job {n} of {}", case.name),
                    "interval": interval,
                    "tags": ["bench", "prod"],
                    "notes": "made by examples/bench.rs",
                });
                let answer = client
                    .post(&url)
                    .basic_auth(&case.key, None::<&str>)
                    .json(&body)
                    .send()
                    .await?;
                let status = answer.status();
                if !status.is_success() {
                    let text = answer.text().await.unwrap_or_default();
                    return Err(format!("POST /v1/snitches answered {status}: {text}").into());
                }
                let created: serde_json::Value = answer.json().await?;
                let token = created["token"]
                    .as_str()
                    .ok_or("the created snitch has no token")?;
                tokens.push(token.to_owned());
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, BoxError>(tokens)
        });
    }
    let mut tokens = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        tokens.extend(joined??);
    }
    progress.finish();
    Ok(tokens)
}

/// Checks every snitch in once through the check-in endpoint (16 at a time); each must
/// be answered 202.
async fn check_in_all_over_http(check_in: SocketAddr, tokens: &[String]) -> Result<(), BoxError> {
    const WORKERS: usize = 16;
    let progress = Progress::start("checked in", tokens.len());
    let client = reqwest::Client::new();
    let tokens: Arc<[String]> = tokens.into();
    let mut tasks = JoinSet::new();
    for worker in 0..WORKERS {
        let (client, tokens, done) = (client.clone(), tokens.clone(), progress.counter());
        tasks.spawn(async move {
            for token in tokens.iter().skip(worker).step_by(WORKERS) {
                let status = client
                    .get(format!("http://{check_in}/{token}"))
                    .send()
                    .await?
                    .status();
                if status != reqwest::StatusCode::ACCEPTED {
                    return Err(format!("a check-in was answered {status}, not 202").into());
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), BoxError>(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    progress.finish();
    Ok(())
}

/// A case of the configuration that holds up to `max_snitches`.
fn case_config(name: &str, max_snitches: usize, keys: &[String], hooks: &[String]) -> CaseConfig {
    let mut case = CaseConfig::new(name);
    case.max_snitches = u32::try_from(max_snitches).unwrap_or(u32::MAX);
    case.api_keys = keys.to_vec();
    case.webhooks = hooks.to_vec();
    case
}

/// Creates `per_case` snitches in each case through the service (one task per case, as
/// the Postgres store makes inserts into one case take turns); their tokens.
async fn create_snitches(
    service: &SnitchService,
    cases: &[String],
    per_case: usize,
    interval: &str,
) -> Result<Vec<String>, BoxError> {
    let progress = Progress::start("created", per_case * cases.len());
    let mut tasks = JoinSet::new();
    for name in cases {
        let case = service
            .storage()
            .case(&CaseId::parse(name).map_err(|v| v.message)?)
            .await?
            .ok_or("a configured case is not stored")?;
        let (service, done, interval) = (service.clone(), progress.counter(), interval.to_owned());
        tasks.spawn(async move {
            let mut tokens = Vec::with_capacity(per_case);
            for n in 0..per_case {
                let fields = SnitchFields {
                    name: Some(format!("job {n} of {}", case.id)),
                    interval: Some(interval.clone()),
                    tags: Some(vec!["bench".into(), "prod".into()]),
                    notes: Some("made by examples/bench.rs".into()),
                    ..Default::default()
                };
                tokens.push(service.create(&case, &fields).await?.token().to_string());
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, BoxError>(tokens)
        });
    }
    let mut tokens = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        tokens.extend(joined??);
    }
    progress.finish();
    Ok(tokens)
}

/// Checks every snitch in once through the service (16 at a time).
async fn check_in_all(service: &SnitchService, tokens: &[String]) -> Result<(), BoxError> {
    const WORKERS: usize = 16;
    let progress = Progress::start("checked in", tokens.len());
    let tokens: Arc<[String]> = tokens.into();
    let mut tasks = JoinSet::new();
    for worker in 0..WORKERS {
        let (service, tokens, done) = (service.clone(), tokens.clone(), progress.counter());
        tasks.spawn(async move {
            for token in tokens.iter().skip(worker).step_by(WORKERS) {
                service.check_in(token, Outcome::Success, None).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), BoxError>(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    progress.finish();
    Ok(())
}

/// A database of its own on the Postgres server, dropped by [`FreshDatabase::drop_it`].
/// Its name matches `snitch_test_%`, so `scripts/ensure-postgres.sh` also drops it if this
/// program dies first.
#[derive(Debug)]
struct FreshDatabase {
    server: PgConnectOptions,
    name: String,
    options: PgConnectOptions,
    url: String,
}

impl FreshDatabase {
    async fn create(server_url: &str) -> Result<FreshDatabase, BoxError> {
        let server = PgConnectOptions::from_str(server_url)?;
        let mut admin = PgConnection::connect_with(&server)
            .await
            .map_err(|e| format!("cannot reach Postgres (bash scripts/ensure-postgres.sh): {e}"))?;
        let name = format!("snitch_test_bench_{}", RandomTokens.new_token());
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await?;
        admin.close().await?;
        eprintln!("   database {name}");
        Ok(FreshDatabase {
            options: server.clone().database(&name),
            url: with_database(server_url, &name),
            server,
            name,
        })
    }

    async fn drop_it(self) {
        let dropped = async {
            let mut admin = PgConnection::connect_with(&self.server).await?;
            let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
            admin.execute(sql.as_str()).await?;
            admin.close().await
        };
        if let Err(e) = dropped.await {
            eprintln!("   warning: cannot drop the database {}: {e}", self.name);
        }
    }
}

/// `url` with its database path replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let host_start = base.find("://").map_or(0, |i| i + 3);
    let server = match base[host_start..].find('/') {
        Some(slash) => &base[..host_start + slash],
        None => base,
    };
    format!("{server}/{name}{query}")
}

/// Percentiles of a set of durations in microseconds (nearest rank).
#[derive(Debug, Clone, Copy)]
struct Latency {
    p50: u32,
    p99: u32,
    max: u32,
}

impl Latency {
    fn of(mut micros: Vec<u32>) -> Option<Latency> {
        if micros.is_empty() {
            return None;
        }
        micros.sort_unstable();
        let rank = |p: f64| {
            let r = (p / 100.0 * micros.len() as f64).ceil() as usize;
            micros[r.clamp(1, micros.len()) - 1]
        };
        Some(Latency {
            p50: rank(50.0),
            p99: rank(99.0),
            max: micros[micros.len() - 1],
        })
    }
}

/// The median of the rounds, figure by figure.
fn median_load(rounds: &[LoadResult]) -> LoadResult {
    let median_of = |value: fn(&LoadResult) -> f64| {
        let mut values: Vec<f64> = rounds.iter().map(value).collect();
        values.sort_by(f64::total_cmp);
        let mid = values.len() / 2;
        if values.len().is_multiple_of(2) {
            (values[mid - 1] + values[mid]) / 2.0
        } else {
            values[mid]
        }
    };
    LoadResult {
        per_second: median_of(|r| r.per_second),
        latency: Latency {
            p50: median_of(|r| f64::from(r.latency.p50)) as u32,
            p99: median_of(|r| f64::from(r.latency.p99)) as u32,
            max: median_of(|r| f64::from(r.latency.max)) as u32,
        },
    }
}

fn as_micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// Microseconds as milliseconds for the table: `0.42 ms`, `12.3 ms`, `140 ms`.
fn ms(micros: u32) -> String {
    let ms = f64::from(micros) / 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 100.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if secs >= 60 {
        format!("{} min {} s", secs / 60, secs % 60)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Inserts snitches `range`, each made by `snitch`, with the store's bulk insert
/// (`Storage::insert_snitches`) 10,000 at a time, showing progress; the time it took.
async fn insert_in_batches(
    storage: &dyn Storage,
    range: std::ops::Range<usize>,
    snitch: impl Fn(usize) -> Result<Snitch, BoxError>,
) -> Result<Duration, BoxError> {
    const BATCH: usize = 10_000;
    let started = monotonic_now();
    let progress = Progress::start("inserted", range.len());
    let done = progress.counter();
    for first in range.clone().step_by(BATCH) {
        let last = (first + BATCH).min(range.end);
        let batch = (first..last).map(&snitch).collect::<Result<Vec<_>, _>>()?;
        storage.insert_snitches(&batch, u32::MAX).await?;
        done.fetch_add(batch.len(), Ordering::Relaxed);
    }
    progress.finish();
    Ok(started.elapsed())
}

/// A line on stderr every second while a long step runs.
#[derive(Debug)]
struct Progress {
    done: Arc<AtomicUsize>,
    ticker: tokio::task::JoinHandle<()>,
}

impl Progress {
    fn start(what: &'static str, total: usize) -> Progress {
        let done = Arc::new(AtomicUsize::new(0));
        let seen = done.clone();
        let ticker = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            every.tick().await;
            loop {
                every.tick().await;
                let n = seen.load(Ordering::Relaxed);
                eprintln!("   … {what} {} of {}", thousands(n), thousands(total));
            }
        });
        Progress { done, ticker }
    }

    fn counter(&self) -> Arc<AtomicUsize> {
        self.done.clone()
    }

    fn finish(self) {
        self.ticker.abort();
    }
}

/// The markdown table of the rows.
fn table(rows: &[Row]) -> String {
    let mut out = String::from("| # | Row | Figure | Target | Met? |\n|---|---|---|---|---|\n");
    for row in rows {
        let met = match row.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        out += &format!(
            "| {} | {} | {} | {} | {met} |\n",
            row.id.number(),
            row.title,
            row.figure.replace('|', "\\|"),
            row.id.target()
        );
    }
    out
}

/// Writes the header, the table and the findings already in the file (if any).
fn write_report(
    path: &std::path::Path,
    sizes: &Sizes,
    table: &str,
    elapsed: Duration,
    load_at_start: &str,
) -> std::io::Result<()> {
    let findings = std::fs::read_to_string(path)
        .ok()
        .and_then(|old| old.find(FINDINGS_HEADING).map(|i| old[i..].to_owned()))
        .unwrap_or_else(|| {
            format!("{FINDINGS_HEADING}\n\n(None written yet; this section is kept when the file is generated again.)\n")
        });
    let text = format!(
        "# Benchmarks\n\n{}\n{table}\n{findings}",
        header(sizes, elapsed, load_at_start)
    );
    std::fs::write(path, text)
}

fn header(sizes: &Sizes, elapsed: Duration, load_at_start: &str) -> String {
    let date = SystemClock.now().format("%Y-%m-%d %H:%M UTC");
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!(
        "Generated by `{}` on {date}; the run took {}.\n\n\
         Machine: {cores} cores (nproc), {}, {}, transparent huge pages {}. Load average \
         (1 min) just before the run: \
         {} (other work running meanwhile competes with the benchmark for the cores). \
         Code: {}.\n\n\
         How to read it:\n\
         - The check-in rows (1, 2, 2b, 2c) are loaded by `wrk`, a separate process \
         (`scripts/bench-check-ins.lua` spreads the requests over the snitches), on the \
         same {cores} cores as the server under test and PostgreSQL, on a machine shared \
         with other work: absolute rates say little, so rows 1, 2 and 2c are given as a \
         ratio to a bare axum server answering 202 doing no work, loaded the same way in the \
         same run: {} keep-alive HTTP/1 connections on 2 wrk threads, {} s warm-up then {} \
         s measured, baseline and Snitch alternately ({} rounds each), medians reported. \
         The server under test (`examples/server.rs`) and the baseline \
         (`examples/baseline.rs`, axum on tokio's multi-thread runtime, like the server) are \
         separate release processes started by the benchmark; the snitches are made with \
         `POST /v1/snitches` and each checked in once over HTTP before the load.\n\
         - Commits are durable (`fdatasync`: 0.12 ms on this disk when quiet, \
         `pg_test_fsync`; several ms while other builds run).\n\
         - Rows 5 and 6 run the whole server in the benchmark's process \
         (`snitch::server::launch_with_clock`); \
         rows 3a–3c and 4 write snitches straight into the store with `Storage::insert_snitches` \
         (states made by `machine::check_in`) and time `SnitchService::tick`. Each case has \
         one team member, so every event also queues an e-mail delivery. The benchmark's \
         process allocates with mimalloc, as the server binaries (`snitch`, \
         `examples/server.rs`) do, so these rows run the library as the server runs it \
         (an application that embeds it brings its own allocator).\n\
         - The sweeps are measured three times each, and the median is the figure its \
         target is checked against: rows 3a–3c on a fresh store each time; rows 3d, 3e and \
         8 watch three boundaries of one server, each with its own due snitches (the \
         others of the population never due), far enough apart for each sweep's webhooks \
         to be delivered before the next boundary.\n\
         - Postgres rows use a fresh database on the local server with its default \
         settings (durable commits); row 2 uses the server's default pool of 16 connections.\n\
         - SQLite rows use a fresh file in a temporary directory with the server's settings \
         (WAL, `synchronous = FULL`: each commit on disk); row 3c fills it with \
         `synchronous = OFF` first (set-up, not measured). Their targets are ours.\n\
         - Rows 1, 2, 2b, 2c and 6 raise `rate_limit_per_second` and `rate_limit_burst` to {} \
         so the API's limiter does not interfere with their set-up or requests; row 6's \
         target is ours.\n\
         - Latencies of the check-in rows are wrk's percentiles; the others are \
         nearest-rank percentiles of every request in the measured time.\n\
         - Row 7 counts instructions, which the machine's load does not change: \
         `examples/check_in_instructions.rs` checks one snitch in through `SnitchService` \
         on a current-thread runtime, and `valgrind --tool=callgrind`, dumping its profile \
         when `measured_check_ins` starts and when it has returned, counts that window in \
         every thread of the process (SQLite's worker threads included; for Postgres only \
         the client side: the server's work is not counted). Each store is run three times, \
         on a fresh database each time, and the median reported: the memory store's counts \
         are identical; on SQLite and Postgres runs differ by up to a few percent, as how \
         often the runtime polls and parks while it waits for the disk or the socket \
         depends on timing.\n",
        sizes.command,
        human_duration(elapsed),
        cpu_model(),
        memory_total(),
        transparent_huge_pages(),
        load_at_start,
        code_version(),
        sizes.connections,
        sizes.warm_up.as_secs_f64(),
        sizes.measure.as_secs_f64(),
        sizes.rounds,
        thousands(NO_RATE_LIMIT as usize),
    )
}

/// The commit measured, and whether tracked files differ from it.
fn code_version() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(commit) => match git(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(changes) if !changes.is_empty() => {
                format!("commit {commit} with uncommitted changes")
            }
            _ => format!("commit {commit}"),
        },
        None => "unknown commit".into(),
    }
}

/// The 1-minute load average of the machine.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// The kernel's policy for transparent huge pages (`always`, `madvise` or `never`): with
/// `always` the server's allocator gets huge pages unasked, whose first touch zeroes 2 MiB
/// (BENCHMARKS.md, "Memory and allocation").
fn transparent_huge_pages() -> String {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .and_then(|setting| {
            let chosen = setting.split_once('[')?.1.split_once(']')?.0;
            Some(format!("`{chosen}`"))
        })
        .unwrap_or_else(|| "unknown".into())
}

fn memory_total() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let kib: f64 = info
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(format!("{:.0} GiB RAM", kib / f64::from(1 << 20)))
        })
        .unwrap_or_else(|| "unknown RAM".into())
}
