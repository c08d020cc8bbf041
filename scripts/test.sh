#!/usr/bin/env bash
# Runs the tests of the workspace: the one test command of README.md and .ci/run.
#
#   bash scripts/test.sh            # everything: every cargo test, the browser test, fuzzing
#   bash scripts/test.sh --quick    # the quick tier, while editing (see CONTRIBUTING.md)
#   bash scripts/test.sh <args>     # cargo test with these arguments (a filter, --test api…)
#
# The Postgres store's tests need PostgreSQL on 127.0.0.1:5432: started here when it is
# down; the run fails loudly, never skips, when it cannot be.
set -euo pipefail
cd "$(dirname "$0")/.."
url=$(bash scripts/ensure-postgres.sh | sed -n 's/^DATABASE_URL=//p')
export DATABASE_URL="${DATABASE_URL:-$url}"
# The mail clients of the e-mail check-in tests (swaks, python3, openssl).
bash scripts/ensure-mail-tools.sh

# The quick tier: every crate's unit tests and the integration tests that run in-process
# on the memory, SQLite and (template-copied) PostgreSQL stores. Left to the whole suite:
# the tests that start server processes or run for seconds by design (process restarts,
# kill -9, outages in real time, timeouts of hanging peers, the model test's thousands of
# random runs), doc tests, building the examples (the benchmark among them), the browser
# test and fuzzing. Further arguments go to cargo test (a filter, say).
QUICK_TESTS=(
    # tests/ of the facade
    api check_in check_in_service service runtime ui operator request_log outages
    custom_storage alerts abuse_http schedules
    # the stores' own: the storage contract, the Postgres check-in cache
    contract check_in_cache
)

if [ "${1:-}" = "--quick" ]; then
    shift
    targets=(--lib)
    for name in "${QUICK_TESTS[@]}"; do
        targets+=(--test "$name")
    done
    exec cargo test --workspace --all-features "${targets[@]}" "$@"
fi

# With arguments (a filter, say) only those cargo tests run; without, every test does: the
# dashboard in a real browser and the API fuzzed against its OpenAPI document too.
if [ "$#" -gt 0 ]; then
    exec cargo test --workspace --all-features "$@"
fi

if cargo nextest --version >/dev/null 2>&1; then
    # Every binary's tests side by side (.config/nextest.toml says why), then the doc
    # tests, which nextest does not run.
    cargo nextest run --workspace --all-features
    cargo test --workspace --all-features --doc
else
    cargo test --workspace --all-features
fi

echo "== end-to-end: the dashboard in headless chromium"
bash scripts/e2e.sh
echo "== API fuzzing (schemathesis against a running server)"
bash scripts/fuzz-api.sh
