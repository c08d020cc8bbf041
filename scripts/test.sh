#!/usr/bin/env bash
# Runs every test of the workspace: the one test command of README.md and .ci/run.
# The Postgres store's tests need PostgreSQL on 127.0.0.1:5432: started here when it is
# down; the run fails loudly, never skips, when it cannot be.
set -euo pipefail
cd "$(dirname "$0")/.."
url=$(bash scripts/ensure-postgres.sh | sed -n 's/^DATABASE_URL=//p')
export DATABASE_URL="${DATABASE_URL:-$url}"
cargo test --workspace --all-features "$@"

# With arguments (a filter, say) only the cargo tests run; without, every test does: the
# dashboard in a real browser and the API fuzzed against its OpenAPI document too.
if [ "$#" -eq 0 ]; then
    echo "== end-to-end: the dashboard in headless chromium"
    bash scripts/e2e.sh
    echo "== API fuzzing (schemathesis against a running server)"
    bash scripts/fuzz-api.sh
fi
