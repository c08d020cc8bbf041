#!/usr/bin/env bash
# Schema-driven fuzzing of the API: schemathesis generates requests for every operation of
# the OpenAPI document the server serves (/v1/openapi.json), sends them to a real server
# (a temporary SQLite store, a key made with the admin commands) and fails on any 5xx or
# any response the document does not describe (status, content type, headers, schema),
# on an operation that answers without its key, or on a deleted snitch still served.
#
# schemathesis (pinned) lives in a virtual environment outside the repository:
# ${XDG_CACHE_HOME:-$HOME/.cache}/snitch-venv. Bounded: FUZZ_EXAMPLES examples per
# operation (default 40) and FUZZ_MAX_TIME seconds in all (default 120).
set -euo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
EXAMPLES=${FUZZ_EXAMPLES:-40}
MAX_TIME=${FUZZ_MAX_TIME:-120}
venv="${XDG_CACHE_HOME:-$HOME/.cache}/snitch-venv"

if ! "$venv/bin/st" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
    echo "fuzz-api: installing schemathesis $SCHEMATHESIS_VERSION in $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "schemathesis==$SCHEMATHESIS_VERSION"
fi

# The features of scripts/test.sh, so that CI reuses what the tests built.
cargo build --quiet --workspace --all-features --example server
target="${CARGO_TARGET_DIR:-target}"
server="$target/debug/examples/server"

work=$(mktemp -d)
server_pid=""
cleanup() {
    if [[ -n "$server_pid" ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# Three free ports on 127.0.0.1 (the API, check-ins, metrics).
read -r api_port check_in_port metrics_port < <(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
)

# A temporary SQLite store of its own, whatever the environment says about databases
# (scripts/test.sh exports DATABASE_URL for the Postgres tests).
unset DATABASE_URL SNITCH_DATABASE_URL SNITCH_STORE
export SNITCH_DATA_PATH="$work/snitch.db"
export SNITCH_LISTEN="127.0.0.1:$api_port"
export SNITCH_CHECK_IN_LISTEN="127.0.0.1:$check_in_port"
export SNITCH_METRICS_LISTEN="127.0.0.1:$metrics_port"
# The fuzzer sends thousands of requests, wrong keys among them: no limit may answer 429
# to the requests that follow.
export SNITCH_RATE_LIMIT_PER_SECOND=1000000
export SNITCH_RATE_LIMIT_BURST=1000000
export SNITCH_AUTH_FAILURES_PER_MINUTE=1000000
export SNITCH_AUTH_FAILURES_BURST=1000000
export RUST_LOG=warn

"$server" cases create fuzz --members ops@fuzz.test --max-snitches 1000000 >/dev/null
key=$("$server" keys create --case fuzz --label fuzz 2>/dev/null)

"$server" >"$work/server.log" 2>&1 &
server_pid=$!
base="http://127.0.0.1:$api_port"
for _ in $(seq 1 100); do
    if curl -fsS "$base/readyz" >/dev/null 2>&1; then break; fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
        cat "$work/server.log"
        echo "fuzz-api: the server did not start" >&2
        exit 1
    fi
    sleep 0.1
done
curl -fsS "$base/readyz" >/dev/null

# A snitch the operations on one snitch work on, so requests reach past the 404 of an
# unknown token, and another for DELETE to delete.
make_snitch() {
    curl -fsS -u "$key:" -H 'Content-Type: application/json' \
        -d "{\"name\": \"$1\", \"interval\": \"daily\", \"tags\": [\"fuzz\"]}" \
        "$base/v1/snitches" | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])'
}
token=$(make_snitch kept)
doomed=$(make_snitch doomed)
cat >"$work/schemathesis.toml" <<TOML
[parameters]
"path.token" = "$token"

[[operations]]
include-name = "DELETE /v1/snitches/{token}"
parameters = { "path.token" = "$doomed" }
TOML

echo "fuzz-api: schemathesis $SCHEMATHESIS_VERSION against $base ($EXAMPLES examples per operation, at most ${MAX_TIME}s)"
# Run from the temporary directory: schemathesis keeps a cache (.schemathesis/) in its
# working directory, which must not land in the repository.
# One worker: CPython 3.11 tracks the AST parser's recursion depth per interpreter, not per
# thread, and hypothesis parses lambdas' source to describe them, so two workers at once
# crashed the tool now and then ("SystemError: AST constructor recursion depth mismatch",
# twice in CI). The run is bounded by FUZZ_MAX_TIME either way.
fuzz() {
    (cd "$work" && "$venv/bin/st" --config-file "$work/schemathesis.toml" run "$base/v1/openapi.json" \
        --auth "$key:" \
        --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance,ignored_auth,use_after_free \
        --max-examples "$EXAMPLES" \
        --max-time "$MAX_TIME" \
        --phases examples,coverage,fuzzing \
        --generation-deterministic \
        --workers 1 \
        --request-timeout 10 \
        --no-color \
        --report-dir "$work/report")
}
status=0
fuzz || status=$?

if ! kill -0 "$server_pid" 2>/dev/null; then
    echo "fuzz-api: the server died during the run" >&2
    tail -50 "$work/server.log" >&2
    exit 1
fi
if grep -q "panicked" "$work/server.log"; then
    echo "fuzz-api: the server panicked" >&2
    grep -B2 -A5 "panicked" "$work/server.log" >&2
    exit 1
fi
exit "$status"
