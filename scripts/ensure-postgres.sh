#!/usr/bin/env bash
# Makes sure the local PostgreSQL server that the Postgres store's tests use is up, drops
# the databases earlier test runs left behind, and prints the DATABASE_URL to use.
#
# Idempotent and fast when the server is already up. Needs a package-installed cluster
# (Debian's postgresql, driven by pg_ctlcluster) with trust auth for `postgres` on
# 127.0.0.1:5432, as on the project's machines.
set -euo pipefail

HOST=127.0.0.1
PORT=5432
USER_NAME=postgres
DATABASE_URL="postgres://${USER_NAME}@${HOST}:${PORT}/postgres"
WAIT_SECONDS=30

fail() {
    echo "ensure-postgres: ERROR: $*" >&2
    exit 1
}

ready() {
    pg_isready -q -h "$HOST" -p "$PORT"
}

command -v pg_isready >/dev/null || fail "pg_isready not found: is PostgreSQL installed?"

if ! ready; then
    version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1 || true)
    [[ -n "$version" ]] || fail "PostgreSQL is down and no cluster is installed in /etc/postgresql"
    echo "ensure-postgres: starting PostgreSQL $version (cluster main)" >&2
    # A second start of a running cluster is harmless; only the wait below decides.
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
    for ((i = 0; i < WAIT_SECONDS * 4; i++)); do
        ready && break
        sleep 0.25
    done
    ready || fail "PostgreSQL $version is still not accepting connections on $HOST:$PORT \
after ${WAIT_SECONDS}s; see /var/log/postgresql/postgresql-$version-main.log"
fi

psql_admin() {
    psql -h "$HOST" -p "$PORT" -U "$USER_NAME" -d postgres -X -q -v ON_ERROR_STOP=1 -Atc "$1"
}

# Test databases no session is connected to and made over an hour ago are left over from
# earlier runs. Younger ones may belong to a run going on now (another clone's tests, a
# benchmark): a test's database is unused for a moment between its creation and its first
# connection. One session drops them all; a drop that fails because a test connected
# meanwhile leaves that database be.
drops=$(psql_admin "SELECT format('DROP DATABASE IF EXISTS %I;', datname) FROM pg_database d
    WHERE datname LIKE 'snitch\_test\_%'
    AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.datid = d.oid)
    AND (pg_stat_file('base/' || d.oid || '/PG_VERSION', true)).modification
        < now() - interval '1 hour'") ||
    fail "cannot query $DATABASE_URL (is trust auth set up for user $USER_NAME?)"
if [[ -n "$drops" ]]; then
    echo "ensure-postgres: dropping $(wc -l <<<"$drops") leftover test databases" >&2
    psql -h "$HOST" -p "$PORT" -U "$USER_NAME" -d postgres -X -q <<<"$drops" 2>/dev/null || true
fi

echo "DATABASE_URL=$DATABASE_URL"
