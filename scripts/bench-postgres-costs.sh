#!/usr/bin/env bash
# What a check-in costs one Snitch server and one PostgreSQL, and what 2 and 3 servers on
# one database do: check-in rate, CPU per check-in on each side, WAL bytes, rows and
# transactions per check-in, bytes per snitch and per stored check-in, and a deadline
# sweep shared by the servers. docs/scaling.md reads its figures.
#
#   bash scripts/bench-postgres-costs.sh               # build, then measure under the lock
#   bash scripts/bench-postgres-costs.sh --no-build    # use the release examples as built
#
# It takes the measurement lock itself (SNITCH_MEASURE_LOCK, default
# /tmp/snitch-measure.lock) after building, so do not wrap it in `flock` of the same file.
# Settings (environment): SNITCHES (10000, checked in by the load), SWEEP_SNITCHES (10000,
# due at one minute boundary), SERVER_COUNTS ("1 2 3"), MEASURE_SECONDS (10),
# WARM_UP_SECONDS (1), CONNECTIONS (64, split between the servers), DATABASE_URL (an
# existing database of the server, default postgres://postgres@127.0.0.1:5432/postgres;
# a fresh database beside it is made and dropped).
#
# How: the release `server` example (examples/server.rs) runs on a fresh database, as
# many processes as measured, each with its own listeners; `wrk` (scripts/bench-check-ins.lua,
# 2 threads) loads each server's check-in listener at once, and `baseline` (bare axum
# answering 202) is loaded the same way in the same run for the ratio. With several
# servers the load runs twice: every snitch through every server, then each snitch through
# one server (affinity). A pass through scripts/bench-postgres-costs-once.lua checks each
# 1-minute snitch in once in a new period (its deadline moves), and their deadline then
# times the shared sweep through /metrics. Costs are deltas over each window:
# /proc/<pid>/stat of the Snitch servers and of the Postgres processes serving this
# database (its backends, plus the WAL writer, checkpointer and background writer, which
# the load keeps busy); pg_current_wal_lsn(), pg_stat_wal, pg_stat_bgwriter;
# pg_stat_user_tables and pg_stat_database of the fresh database. Snitches are made with
# POST /v1/snitches and checked in once over HTTP before any load, as examples/bench.rs
# does.
set -Eeuo pipefail
cd "$(dirname "$0")/.."

BUILD=1
for arg in "$@"; do
    case "$arg" in
    --no-build) BUILD=0 ;;
    --measure) ;; # the locked part below; given by this script itself
    *)
        echo "usage: $0 [--no-build]" >&2
        exit 2
        ;;
    esac
done

SNITCHES=${SNITCHES:-10000}
SWEEP_SNITCHES=${SWEEP_SNITCHES:-10000}
SERVER_COUNTS=${SERVER_COUNTS:-"1 2 3"}
MEASURE_SECONDS=${MEASURE_SECONDS:-10}
WARM_UP_SECONDS=${WARM_UP_SECONDS:-1}
CONNECTIONS=${CONNECTIONS:-64}
WRK_THREADS=2
LOAD_CASES=10
ADMIN_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
LOCK=${SNITCH_MEASURE_LOCK:-/tmp/snitch-measure.lock}
BIN="${CARGO_TARGET_DIR:-target}/release/examples"
HELPER=scripts/bench-postgres-costs.py
LUA=scripts/bench-check-ins.lua
# A backend's table counters reach pg_stat_* when it goes idle, but at most once a second:
# one that flushed less than a second before goes idle flushes 10 s later
# (PGSTAT_IDLE_INTERVAL). Windows are this far apart so that none counts another's rows.
STATS_SETTLE_SECONDS=${STATS_SETTLE_SECONDS:-11}

if [[ " $* " != *" --measure "* ]]; then
    for tool in wrk psql curl jq python3 flock bc; do
        command -v "$tool" >/dev/null || {
            echo "bench-postgres-costs: $tool is missing" >&2
            exit 1
        }
    done
    if ((BUILD)); then
        # Never build while holding the lock: the build competes for the same cores.
        cargo build --release --example server --example baseline >&2
    fi
    echo "bench-postgres-costs: waiting for the measurement lock $LOCK" >&2
    exec flock "$LOCK" bash "$0" --measure
fi

# ---------------------------------------------------------------------------------------
# The measured part (holding the lock).

CLK_TCK=$(getconf CLK_TCK)
WORK=$(mktemp -d /tmp/bench-postgres-costs.XXXXXX)
DB="snitch_test_costs_$(date +%s)_$$" # snitch_test_%: scripts/ensure-postgres.sh drops leftovers
DB_URL="${ADMIN_URL%/*}/$DB"
STARTED_PIDS=()

cleanup() {
    local pid
    for pid in "${STARTED_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${STARTED_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    psql "$ADMIN_URL" -Xq -c "DROP DATABASE IF EXISTS \"$DB\"" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo "bench-postgres-costs: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
admin_sql() { psql "$ADMIN_URL" -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
db_sql() { psql "$DB_URL" -XAtq -v ON_ERROR_STOP=1 -F ' ' -c "$1"; }

# utime + stime of a process, in clock ticks; empty if it is gone.
process_ticks() {
    local line rest
    line=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    rest=${line##*) } # the command name may hold spaces
    # shellcheck disable=SC2086 # split into the stat fields on purpose
    set -- $rest
    echo $((${12} + ${13}))
}

# "pid ticks" for every Postgres process serving this load: backends of the fresh
# database and the background processes that write its WAL and pages.
postgres_ticks() {
    local pid
    for pid in $(admin_sql "SELECT pid FROM pg_stat_activity WHERE datname = '$DB'
        OR backend_type IN ('walwriter', 'checkpointer', 'background writer',
                            'autovacuum launcher', 'autovacuum worker')"); do
        echo "$pid $(process_ticks "$pid")"
    done
}

# CPU seconds used between two `postgres_ticks` snapshots; a process new in the second
# counts from zero (it started in the window). Prints "seconds processes_gone".
postgres_cpu_between() {
    awk -v tck="$CLK_TCK" 'NR == FNR { before[$1] = $2; next }
        $2 != "" { used += $2 - ($1 in before ? before[$1] : 0); seen[$1] = 1 }
        END { for (p in before) if (!(p in seen)) gone++; printf "%.3f %d\n", used / tck, gone }' \
        "$1" "$2"
}

# Every Postgres process of the cluster: the postmaster, its children, and the children
# it reaped (cutime, cstime). Includes other databases' work: a check on the figure above.
cluster_ticks() {
    local postmaster line rest total=0 pid ticks
    postmaster=$(head -1 "$(admin_sql 'SHOW data_directory')/postmaster.pid" 2>/dev/null ||
        pgrep -o -x postgres)
    line=$(cat "/proc/$postmaster/stat")
    rest=${line##*) }
    # shellcheck disable=SC2086
    set -- $rest
    total=$((${12} + ${13} + ${14} + ${15}))
    for pid in $(pgrep -P "$postmaster"); do
        ticks=$(process_ticks "$pid")
        total=$((total + ${ticks:-0}))
    done
    echo "$total"
}

table_stats() {
    db_sql "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
              FROM pg_stat_user_tables WHERE schemaname = 'snitch'
               AND relname IN ('snitches', 'check_ins', 'events', 'deliveries')
            UNION ALL
            SELECT 'xacts', xact_commit, xact_rollback, 0, 0
              FROM pg_stat_database WHERE datname = current_database()
            UNION ALL
            SELECT 'wal', wal_records, wal_fpi, wal_bytes, 0 FROM pg_stat_wal
            UNION ALL
            SELECT 'checkpoints', checkpoints_timed + checkpoints_req, buffers_checkpoint, 0, 0
              FROM pg_stat_bgwriter
            ORDER BY 1"
}

# "name rows_per_check_in…" from two table_stats snapshots and the check-ins between.
table_deltas() {
    awk -v n="$3" 'NR == FNR { for (i = 2; i <= 5; i++) before[$1, i] = $i; next }
        $1 == "checkpoints" { next }
        { printf "%s", $1
          for (i = 2; i <= 5; i++) printf " %.4f", ($i - before[$1, i]) / n
          printf "\n" }' "$1" "$2"
}

wal_lsn() { admin_sql "SELECT pg_current_wal_lsn()"; }
wal_bytes_between() { admin_sql "SELECT pg_wal_lsn_diff('$2', '$1')::bigint"; }

# Starts server $1 (a process of examples/server.rs on the fresh database); sets
# API_ADDR[$1], CHECK_IN_ADDR[$1], METRICS_URL[$1], SERVER_PID[$1].
declare -a API_ADDR CHECK_IN_ADDR METRICS_URL SERVER_PID
STARTS=0
start_server() {
    local i=$1 config="$WORK/server-$1.toml" out c line
    # A new log file per start: the shell opens it in the child, after this goes on.
    STARTS=$((STARTS + 1))
    out="$WORK/server-$1.$STARTS.log"
    {
        echo 'listen = "127.0.0.1:0"'
        echo 'check_in_listen = "127.0.0.1:0"'
        echo 'metrics_listen = "127.0.0.1:0"'
        # The API's limiter must not slow the set-up (as examples/bench.rs).
        echo 'rate_limit_per_second = 1000000'
        echo 'rate_limit_burst = 1000000'
        echo 'store = "postgres"'
        echo "database_url = \"$DB_URL\""
        for ((c = 0; c < LOAD_CASES; c++)); do
            printf '\n[[case]]\nname = "load-%d"\nmax_snitches = %d\napi_keys = ["%s"]\n' \
                "$c" "$PER_CASE" "$(case_key "load-$c")"
        done
        for ((c = 0; c < LOAD_CASES; c++)); do
            printf '\n[[case]]\nname = "sweep-%d"\nmax_snitches = %d\napi_keys = ["%s"]\n' \
                "$c" "$SWEEP_PER_CASE" "$(case_key "sweep-$c")"
        done
    } >"$config"
    # Only the file configures it: no DATABASE_URL or SNITCH_* of this environment.
    local unset=(-u DATABASE_URL) name
    for name in $(compgen -e); do
        [[ "$name" == SNITCH_* ]] && unset+=(-u "$name")
    done
    env "${unset[@]}" RUST_LOG=info NO_COLOR=1 "$BIN/server" --config "$config" serve >"$out" 2>&1 &
    SERVER_PID[i]=$!
    STARTED_PIDS+=("$!")
    for ((c = 0; c < 600; c++)); do
        if grep -q '^Snitch metrics:' "$out"; then break; fi
        kill -0 "${SERVER_PID[i]}" 2>/dev/null || {
            cat "$out" >&2
            echo "server $i exited while starting" >&2
            exit 1
        }
        sleep 0.05
    done
    line=$(grep '^Snitch API:' "$out") && API_ADDR[i]=${line##*listening on } && API_ADDR[i]=${API_ADDR[i]%)}
    line=$(grep '^Snitch check-ins:' "$out") && CHECK_IN_ADDR[i]=${line##*listening on } &&
        CHECK_IN_ADDR[i]=${CHECK_IN_ADDR[i]%)}
    line=$(grep '^Snitch metrics:' "$out") && METRICS_URL[i]=${line##* }
    curl -fsS --retry 20 --retry-connrefused --retry-delay 1 "http://${CHECK_IN_ADDR[i]}/healthz" >/dev/null
    log "server $i: pid ${SERVER_PID[i]}, API ${API_ADDR[i]}, check-ins ${CHECK_IN_ADDR[i]}"
}

stop_servers() {
    local i
    for i in "${!SERVER_PID[@]}"; do
        kill "${SERVER_PID[i]}" 2>/dev/null || true
        wait "${SERVER_PID[i]}" 2>/dev/null || true
    done
    SERVER_PID=()
}

# A fixed API key per case (at least 32 characters).
case_key() { printf 'bench-costs-key-%-24s' "$1" | tr ' ' x; }

# Sum over servers of a metric's samples (the helper's `metric`).
metric_total() {
    local i total=0
    for i in "${!SERVER_PID[@]}"; do
        total=$((total + $(python3 "$HELPER" metric --url "${METRICS_URL[i]}" --name "$1")))
    done
    echo "$total"
}

# Runs wrk for $1 seconds against each "addr paths connections" line of $2 at once;
# writes each run's output to $3.<n>.
run_wrk() {
    local seconds=$1 targets=$2 prefix=$3 n=0 addr paths conns pids=()
    while read -r addr paths conns; do
        wrk -t"$WRK_THREADS" -c"$conns" -d"${seconds}s" --latency -s "$LUA" \
            "http://$addr" -- "$paths" "$WRK_THREADS" >"$prefix.$n" 2>&1 &
        pids+=("$!")
        n=$((n + 1))
    done <"$targets"
    for n in "${pids[@]}"; do wait "$n"; done
}

# "requests rate p50 p99 failures" of one wrk output.
wrk_figures() {
    awk '/ requests in / { requests = $1 }
        /^Requests\/sec:/ { rate = $2 }
        $1 == "50%" { p50 = $2 } $1 == "99%" { p99 = $2 }
        /Non-2xx/ { failures += $NF } /Socket errors:/ { failures += 1 }
        END { printf "%s %s %s %s %d\n", requests, rate, p50, p99, failures }' "$1"
}

# ---------------------------------------------------------------------------------------

# Several cases, as the Postgres store makes inserts into one case take turns.
PER_CASE=$(((SNITCHES + LOAD_CASES - 1) / LOAD_CASES))
SWEEP_PER_CASE=$(((SWEEP_SNITCHES + LOAD_CASES - 1) / LOAD_CASES))
SNITCHES=$((PER_CASE * LOAD_CASES))
SWEEP_SNITCHES=$((SWEEP_PER_CASE * LOAD_CASES))
log "database $DB; $SNITCHES snitches in $LOAD_CASES cases, $SWEEP_SNITCHES for the sweep"
log "server binary: $(stat -c %y "$BIN/server" | cut -d. -f1), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' with uncommitted changes in the tree')"
log "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $(admin_sql 'SHOW server_version')"
admin_sql "CREATE DATABASE \"$DB\"" >/dev/null
start_server 1

cases=""
for ((c = 0; c < LOAD_CASES; c++)); do cases+="${cases:+,}load-$c:$(case_key "load-$c")"; done
t0=$(date +%s.%N)
python3 "$HELPER" create --api "${API_ADDR[1]}" --cases "$cases" --per-case "$PER_CASE" \
    --interval daily --out "$WORK/load.paths"
cases=""
for ((c = 0; c < LOAD_CASES; c++)); do cases+="${cases:+,}sweep-$c:$(case_key "sweep-$c")"; done
python3 "$HELPER" create --api "${API_ADDR[1]}" --cases "$cases" \
    --per-case "$SWEEP_PER_CASE" --interval 1_minute --out "$WORK/sweep.paths"
t1=$(date +%s.%N)
python3 "$HELPER" check-in --addr "${CHECK_IN_ADDR[1]}" --paths "$WORK/load.paths"
t2=$(date +%s.%N)
log "created $((SNITCHES + SWEEP_SNITCHES)) snitches in $(bc <<<"$t1 - $t0") s; checked $SNITCHES in in $(bc <<<"$t2 - $t1") s"

# Sizes of a fresh store: every load snitch checked in once (one history row each).
read -r fresh_snitches fresh_snitch_bytes fresh_snitch_heap fresh_check_ins fresh_check_in_bytes < <(db_sql \
    "SELECT (SELECT count(*) FROM snitch.snitches), pg_total_relation_size('snitch.snitches'),
            pg_relation_size('snitch.snitches'), (SELECT count(*) FROM snitch.check_ins),
            pg_total_relation_size('snitch.check_ins')")

# The baseline, loaded the same way (one process, all connections), before and after the
# Snitch loads; it runs only while measured. Sets BASELINE_RATE.
measure_baseline() {
    local pid c rate p50 p99 out="$WORK/baseline-$1.log"
    "$BIN/baseline" 127.0.0.1:0 >"$out" 2>&1 &
    pid=$!
    STARTED_PIDS+=("$pid")
    for ((c = 0; c < 200; c++)); do
        grep -q 'listening on' "$out" && break
        sleep 0.05
    done
    echo "$(sed -n 's/.*listening on //p' "$out") $WORK/load.paths $CONNECTIONS" \
        >"$WORK/baseline.targets"
    run_wrk "$WARM_UP_SECONDS" "$WORK/baseline.targets" "$WORK/wrk-baseline-warm"
    run_wrk "$MEASURE_SECONDS" "$WORK/baseline.targets" "$WORK/wrk-baseline-$1"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    read -r _ rate p50 p99 _ < <(wrk_figures "$WORK/wrk-baseline-$1.0")
    log "baseline ($1): $rate req/s, p50 $p50, p99 $p99"
    BASELINE_RATE=$rate
}
# Nothing else of ours runs while the baseline is measured.
stop_servers
measure_baseline before
BASELINE_BEFORE=$BASELINE_RATE

SUMMARY="$WORK/summary"
: >"$SUMMARY"
: >"$WORK/rates"
FIRST_SWEEP_TOKEN=$(head -1 "$WORK/sweep.paths")
FIRST_SWEEP_TOKEN=${FIRST_SWEEP_TOKEN#/}
LAST_SWEEP_TOKEN=$(tail -1 "$WORK/sweep.paths")
LAST_SWEEP_TOKEN=${LAST_SWEEP_TOKEN#/}

# The deadline of sweep snitch $1 of case $2.
deadline_of() {
    curl -fsS -u "$(case_key "$2"):" "http://${API_ADDR[1]}/v1/snitches/$1" | jq -r .deadline_at
}

servers_ticks() {
    local i total=0
    for i in "${!SERVER_PID[@]}"; do total=$((total + $(process_ticks "${SERVER_PID[i]}"))); done
    echo "$total"
}

# Snapshots before a measured window; the stats of earlier work must have settled.
window_start() {
    table_stats >"$WORK/tables-before"
    postgres_ticks >"$WORK/pg-before"
    W_CLUSTER_BEFORE=$(cluster_ticks)
    W_LSN_BEFORE=$(wal_lsn)
    W_CHECK_INS_BEFORE=$(metric_total 'snitch_check_ins_total{outcome="success"}')
    W_SERVER_BEFORE=$(servers_ticks)
    W_START=$(date +%s.%N)
}

# Snapshots after it; prints the costs per stored check-in. $1: the window's name, $2 the
# wall time to divide by (default: the window's), for the rate.
window_end() {
    local end server_after lsn_after cluster_after check_ins_after check_ins elapsed
    local pg_seconds pg_gone wal
    end=$(date +%s.%N)
    server_after=$(servers_ticks)
    lsn_after=$(wal_lsn)
    cluster_after=$(cluster_ticks)
    postgres_ticks >"$WORK/pg-after"
    check_ins_after=$(metric_total 'snitch_check_ins_total{outcome="success"}')
    sleep "$STATS_SETTLE_SECONDS"
    table_stats >"$WORK/tables-after"

    check_ins=$((check_ins_after - W_CHECK_INS_BEFORE))
    elapsed=${2:-$(bc -l <<<"$end - $W_START")}
    read -r pg_seconds pg_gone < <(postgres_cpu_between "$WORK/pg-before" "$WORK/pg-after")
    wal=$(wal_bytes_between "$W_LSN_BEFORE" "$lsn_after")
    echo "  $1: $check_ins check-ins stored"
    echo "$(bc -l <<<"$check_ins / $elapsed") $1" >>"$WORK/rates"
    printf '    rate: %.0f/s over %.2f s; ratio to the bare axum baseline (%s req/s): %.3f\n' \
        "$(bc -l <<<"$check_ins / $elapsed")" "$elapsed" "$BASELINE_BEFORE" \
        "$(bc -l <<<"$check_ins / $elapsed / $BASELINE_BEFORE")"
    printf '    CPU per check-in: Snitch server(s) %.1f us, Postgres (this database and the WAL writer, checkpointer, background writer) %.1f us (%d of its processes ended meanwhile), all of the Postgres cluster %.1f us\n' \
        "$(bc -l <<<"($server_after - $W_SERVER_BEFORE) / $CLK_TCK / $check_ins * 1000000")" \
        "$(bc -l <<<"$pg_seconds / $check_ins * 1000000")" "$pg_gone" \
        "$(bc -l <<<"($cluster_after - $W_CLUSTER_BEFORE) / $CLK_TCK / $check_ins * 1000000")"
    printf '    CPU busy: Snitch %.2f cores, Postgres %.2f cores (of %d; load average %s at the end)\n' \
        "$(bc -l <<<"($server_after - $W_SERVER_BEFORE) / $CLK_TCK / $elapsed")" \
        "$(bc -l <<<"$pg_seconds / $elapsed")" "$(nproc)" "$(cut -d' ' -f1 /proc/loadavg)"
    printf '    WAL: %d bytes = %.0f bytes per check-in (%.1f MB/s)\n' "$wal" \
        "$(bc -l <<<"$wal / $check_ins")" "$(bc -l <<<"$wal / $elapsed / 1000000")"
    echo "    per check-in (tables: rows inserted, updated, of which HOT, deleted; xacts: committed, rolled back;"
    echo "    wal (whole cluster): records, full-page images, bytes; checkpoints: started, buffers written):"
    table_deltas "$WORK/tables-before" "$WORK/tables-after" "$check_ins" | sed 's/^/      /'
    awk 'NR == FNR { before[$1] = $2; next } $1 == "checkpoints" {
            printf "    checkpoints in the window: %d (full-page images follow each)\n", $2 - before[$1] }' \
        "$WORK/tables-before" "$WORK/tables-after"
}

# One check-in load: warm-up, settle, then the measured window. $1 the targets, $2 a
# name for wrk's files, $3 the window's name.
measure_load() {
    local n requests rate p50 p99 failed wrk_requests=0 rates="" failures=0
    run_wrk "$WARM_UP_SECONDS" "$1" "$WORK/wrk-warm-$2"
    sleep "$STATS_SETTLE_SECONDS"
    window_start
    run_wrk "$MEASURE_SECONDS" "$1" "$WORK/wrk-$2"
    {
        window_end "$3"
        for ((n = 0; n < $(wc -l <"$1"); n++)); do
            read -r requests rate p50 p99 failed < <(wrk_figures "$WORK/wrk-$2.$n")
            wrk_requests=$((wrk_requests + requests))
            failures=$((failures + failed))
            rates+="${rates:+, }server $((n + 1)): $rate/s p50 $p50 p99 $p99"
        done
        echo "    wrk: $wrk_requests requests, $failures not 2xx or socket errors; $rates"
    } | tee -a "$SUMMARY" >&2
}

for servers in $SERVER_COUNTS; do
    stop_servers
    for ((i = 1; i <= servers; i++)); do start_server "$i"; done

    # Arm the sweep: check every sweep snitch in within one minute M (deadline: the end
    # of the next period, M + 2 min); the check-in load below runs while it comes.
    while (($(date +%-S) > 45)); do sleep 1; done
    armed_minute=$(($(date +%s) / 60))
    python3 "$HELPER" check-in --addr "${CHECK_IN_ADDR[1]}" --paths "$WORK/sweep.paths"
    ((armed_minute == $(date +%s) / 60)) || {
        echo "arming the sweep snitches took more than the minute" >&2
        exit 1
    }

    # The check-in load: one wrk per server at once, the connections split between them.
    # Each server's list starts 1/N further along, so at any moment the servers check in
    # different snitches, yet every snitch is checked in by every server in turn (as a
    # load balancer spreads one job's check-ins): most check-ins find a copy in the
    # server's check-in cache that another server has made stale.
    : >"$WORK/targets"
    : >"$WORK/once-targets"
    : >"$WORK/affinity-targets"
    for ((i = 1; i <= servers; i++)); do
        conns=$((CONNECTIONS / servers + (i <= CONNECTIONS % servers ? 1 : 0)))
        shift_by=$((SNITCHES * (i - 1) / servers))
        { tail -n +"$((shift_by + 1))" "$WORK/load.paths"; head -n "$shift_by" "$WORK/load.paths"; } \
            >"$WORK/load-$i.paths"
        echo "${CHECK_IN_ADDR[i]} $WORK/load-$i.paths $conns" >>"$WORK/targets"
        # The once-a-period pass below: a disjoint share of the sweep snitches per server.
        awk -v i="$i" -v n="$servers" '(NR - 1) % n == i - 1' "$WORK/sweep.paths" >"$WORK/sweep-$i.paths"
        echo "${CHECK_IN_ADDR[i]} $WORK/sweep-$i.paths $conns" >>"$WORK/once-targets"
        # The load again with affinity, as a load balancer hashing the URL path gives it:
        # each snitch through one server only, whose check-in cache then stays valid.
        awk -v i="$i" -v n="$servers" '(NR - 1) % n == i - 1' "$WORK/load.paths" >"$WORK/load-own-$i.paths"
        echo "${CHECK_IN_ADDR[i]} $WORK/load-own-$i.paths $conns" >>"$WORK/affinity-targets"
    done
    echo "== $servers server(s) on one database: wrk, $MEASURE_SECONDS s, $CONNECTIONS connections" |
        tee -a "$SUMMARY" >&2
    spread=""
    ((servers == 1)) || spread=", every snitch through every server"
    measure_load "$WORK/targets" "$servers-spread" \
        "$servers server(s), check-ins repeated within a period (the deadline stays: the benchmark's load)$spread"

    # Check-ins that move the deadline, as a job checking in once a period does (every
    # one a non-HOT update: the deadline is indexed): each sweep snitch once, in the
    # minute after it was armed, which moves its deadline on by a minute.
    # (The load's window ended with a settle: its rows are counted already.)
    while (($(date +%s) / 60 == armed_minute)); do sleep 0.2; done
    (($(date +%-S) <= 45)) || {
        echo "the load ran too long to check the sweep snitches in within their period" >&2
        exit 1
    }
    window_start
    wrk_pids=()
    while read -r addr paths conns; do
        wrk -t"$WRK_THREADS" -c"$conns" -d40s -s scripts/bench-postgres-costs-once.lua \
            "http://$addr" -- "$paths" "$WRK_THREADS" >/dev/null 2>&1 &
        wrk_pids+=("$!")
    done <"$WORK/once-targets"
    # The pass is done when every sweep snitch is counted; wrk, which would wait out its
    # whole -d, is stopped then.
    once_target=$((W_CHECK_INS_BEFORE + SWEEP_SNITCHES))
    until (($(metric_total 'snitch_check_ins_total{outcome="success"}') >= once_target)); do
        (($(bc <<<"$(date +%s.%N) - $W_START < 30"))) || {
            echo "the once-a-period pass did not store every check-in within 30 s" >&2
            exit 1
        }
        sleep 0.02
    done
    once_elapsed=$(bc -l <<<"$(date +%s.%N) - $W_START")
    for pid in "${wrk_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    window_end "$servers server(s), each sweep snitch checked in once in its next period (the deadline moves)" \
        "$once_elapsed" | tee -a "$SUMMARY" >&2

    # With several servers, the load with affinity too (before the deadline, now a minute
    # further on: there is time).
    if ((servers > 1)); then
        measure_load "$WORK/affinity-targets" "$servers-affinity" \
            "$servers server(s), the same load, each snitch through one server (affinity)"
    fi

    deadline=$(deadline_of "$FIRST_SWEEP_TOKEN" sweep-0)
    [[ "$deadline" == "$(deadline_of "$LAST_SWEEP_TOKEN" "sweep-$((LOAD_CASES - 1))")" && "$deadline" != null ]] || {
        echo "the sweep snitches do not share one deadline" >&2
        exit 1
    }
    deadline_epoch=$(date -d "$deadline" +%s.%N)
    log "$servers server(s): $SWEEP_SNITCHES sweep snitches due at $deadline"

    # The sweep, shared by the servers: from the deadline until the gauge shows every
    # sweep snitch failed, and each server's share of the events.
    failed_before=$(python3 "$HELPER" metric --url "${METRICS_URL[1]}" --name 'snitch_snitches{status="failed"}')
    ((failed_before == 0)) || {
        echo "$failed_before snitches failed before the deadline" >&2
        exit 1
    }
    declare -a missing_before=()
    for i in "${!SERVER_PID[@]}"; do
        missing_before[i]=$(python3 "$HELPER" metric --url "${METRICS_URL[i]}" --name 'snitch_events_total{kind="snitch.missing"}')
    done
    until (($(bc <<<"$(date +%s.%N) > $deadline_epoch - 3"))); do sleep 0.5; done
    sweep_lsn_before=$(wal_lsn)
    postgres_ticks >"$WORK/pg-sweep-before"
    server_before=$(servers_ticks)
    read -r first_failed all_failed < <(python3 "$HELPER" wait --url "${METRICS_URL[1]}" \
        --name 'snitch_snitches{status="failed"}' --count "$SWEEP_SNITCHES" --timeout 90)
    server_after=$(servers_ticks)
    postgres_ticks >"$WORK/pg-sweep-after"
    sweep_wal=$(wal_bytes_between "$sweep_lsn_before" "$(wal_lsn)")
    read -r sweep_pg_seconds _ < <(postgres_cpu_between "$WORK/pg-sweep-before" "$WORK/pg-sweep-after")
    split=""
    for i in "${!SERVER_PID[@]}"; do
        events=$(($(python3 "$HELPER" metric --url "${METRICS_URL[i]}" --name 'snitch_events_total{kind="snitch.missing"}') - missing_before[i]))
        split+="${split:+, }server $i: $events"
    done
    {
        printf '  sweep: %d snitches due at %s; first failed seen %.2f s after it, all %.2f s after it (gauge scraped every 20 ms)\n' \
            "$SWEEP_SNITCHES" "$deadline" "$(bc -l <<<"$first_failed - $deadline_epoch")" \
            "$(bc -l <<<"$all_failed - $deadline_epoch")"
        echo "  sweep: snitch.missing events by server: $split"
        printf '  sweep: WAL %d bytes = %.0f bytes per swept snitch\n' "$sweep_wal" \
            "$(bc -l <<<"$sweep_wal / $SWEEP_SNITCHES")"
        printf '  sweep: CPU from 3 s before the deadline until all failed (the gauge scrapes included): Snitch %.0f us, Postgres %.0f us per swept snitch\n' \
            "$(bc -l <<<"($server_after - $server_before) / $CLK_TCK / $SWEEP_SNITCHES * 1000000")" \
            "$(bc -l <<<"$sweep_pg_seconds / $SWEEP_SNITCHES * 1000000")"
    } | tee -a "$SUMMARY" >&2
done

# Failed 1-minute snitches go missing again every minute: no server may sweep them
# while the baseline is measured.
stop_servers
measure_baseline after
BASELINE_AFTER=$BASELINE_RATE

read -r snitches snitch_bytes snitch_heap snitch_indexes snitch_dead check_ins_kept check_in_bytes < <(db_sql \
    "SELECT (SELECT count(*) FROM snitch.snitches), pg_total_relation_size('snitch.snitches'),
            pg_relation_size('snitch.snitches'), pg_indexes_size('snitch.snitches'),
            (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'snitch.snitches'::regclass),
            (SELECT count(*) FROM snitch.check_ins), pg_total_relation_size('snitch.check_ins')")
{
    echo "== sizes"
    printf '  fresh (each load snitch checked in once): %d snitches, %d bytes = %.0f bytes per snitch (heap %.0f, the rest its indexes and TOAST); %d check-ins, %.0f bytes each\n' \
        "$fresh_snitches" "$fresh_snitch_bytes" "$(bc -l <<<"$fresh_snitch_bytes / $fresh_snitches")" \
        "$(bc -l <<<"$fresh_snitch_heap / $fresh_snitches")" "$fresh_check_ins" \
        "$(bc -l <<<"$fresh_check_in_bytes / $fresh_check_ins")"
    printf '  after the loads (no vacuum ran: dead row versions included): %.0f bytes per snitch (heap %.0f, indexes %.0f; %d dead rows), %d check-ins kept, %.0f bytes each (table and indexes)\n' \
        "$(bc -l <<<"$snitch_bytes / $snitches")" "$(bc -l <<<"$snitch_heap / $snitches")" \
        "$(bc -l <<<"$snitch_indexes / $snitches")" "$snitch_dead" "$check_ins_kept" \
        "$(bc -l <<<"$check_in_bytes / $check_ins_kept")"
    echo "== baseline (bare axum, one process, $CONNECTIONS connections): $BASELINE_BEFORE req/s before the loads, $BASELINE_AFTER after"
    echo "== check-in rates as a ratio to the baseline before / after the loads / their mean:"
    awk -v b="$BASELINE_BEFORE" -v a="$BASELINE_AFTER" '{ rate = $1; $1 = ""
        printf "  %.0f/s = %.3f / %.3f / %.3f:%s\n", rate, rate / b, rate / a, 2 * rate / (a + b), $0 }' \
        "$WORK/rates"
    echo "== pg_stat_statements: $(admin_sql "SELECT CASE WHEN current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%' THEN 'preloaded (not read by this script)' ELSE 'not preloaded (needs a restart): statements per check-in not measured' END")"
} | tee -a "$SUMMARY" >&2

echo
echo "bench-postgres-costs: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cores"
cat "$SUMMARY"
