#!/usr/bin/env bash
# The one benchmark command: installs wrk, valgrind and setpriv if missing (Debian),
# starts the local PostgreSQL, builds the release benchmark and runs every row of BENCHMARKS.md,
# printing the table and writing BENCHMARKS.md (keeping its hand-written findings).
#
#   bash scripts/bench.sh                    # every row, writes BENCHMARKS.md
#   bash scripts/bench.sh --quick            # small sizes, prints only
#   bash scripts/bench.sh --only check-in-memory,check-in-postgres
#
# Check-in rows are loaded by wrk, a separate process, against Snitch and a bare axum
# server answering 202, alternately, in the same run: compare the ratios, not the
# absolute rates, on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v valgrind >/dev/null || missing+=(valgrind)
# setpriv --pdeathsig: the benchmark's servers and loads die with it, even by a signal.
command -v setpriv >/dev/null || missing+=(util-linux)
if ((${#missing[@]})); then
    echo "installing ${missing[*]}" >&2
    if [ "$(id -u)" = 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >&2
    else
        sudo DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" >&2
    fi
fi

if [ -z "${DATABASE_URL:-}" ]; then
    DATABASE_URL=$(bash scripts/ensure-postgres.sh | sed -n 's/^DATABASE_URL=//p')
    export DATABASE_URL
fi

# The check-in rows start the server and the baseline as separate processes, and row 7
# runs check_in_instructions under valgrind: the benchmark finds them next to itself.
cargo build --release --example bench --example server --example baseline \
    --example check_in_instructions >&2
exec "${CARGO_TARGET_DIR:-target}/release/examples/bench" "$@"
