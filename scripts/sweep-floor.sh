#!/usr/bin/env bash
# The floor under a mass miss on PostgreSQL: what the database alone spends to write what
# 100,000 missed snitches must leave behind, with no Snitch server and no client, so that
# the time row 8c of BENCHMARKS.md measures can be set against what cannot be saved.
#
#   bash scripts/sweep-floor.sh              # build the release server example, then measure
#   bash scripts/sweep-floor.sh --no-build   # use target/release/examples/server as built
#
# A database of Snitch's schema (migrated by `server migrate`) is filled by SQL alone with
# 1,000,000 snitches in 100 cases, the last 100,000 due at one boundary. Each measurement
# runs on a fresh copy of it (CREATE DATABASE ... TEMPLATE) and is one PL/pgSQL loop, in
# the database, that takes the due snitches 1,000 at a time by the deadline index (as the
# sweep claims them), writes them and commits: each snitch's new state (`failed`, its
# deadline a day on: the row's new version, with an entry in each of its indexes, and the
# kept status counts' trigger), its event, and one webhook delivery carrying the event as
# JSON (row 8 gives each case one webhook and no member). The parts are measured apart
# (`update`: the snitches only; `events`: and their events; `all`: and the deliveries), with
# and without the sweep's lease (`snitch.sweep_leases`, written and committed before each
# batch, as a claim does), on one connection and on two (each half of the tokens), and
# once with an outbox bare of the indexes its claims read (only its primary key: what a
# leaner outbox could save at most). It prints the backend's CPU (utime + stime from
# /proc) per missed snitch and the wall time.
#
# Settings (environment): DATABASE_URL (an existing database of the server, default
# postgres://postgres@127.0.0.1:5432/postgres; databases snitch_floor_template and
# snitch_floor_run beside it are made and dropped); FLOOR_PARTS (the parts measured on one
# connection without the lease, default "update events all"). Run it on an otherwise idle
# machine, and more than once: two runs minutes apart on a shared host differed by a third.
set -Eeuo pipefail
cd "$(dirname "$0")/.."

BUILD=1
for arg in "$@"; do
    case "$arg" in
    --no-build) BUILD=0 ;;
    *)
        echo "usage: $0 [--no-build]" >&2
        exit 2
        ;;
    esac
done

URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
export PGOPTIONS='-c client_min_messages=warning'
BASE=${URL%/*}
TEMPLATE=snitch_floor_template
RUN=snitch_floor_run
BOUNDARY='2026-12-05 04:00:00+00'
SERVER=${CARGO_TARGET_DIR:-target}/release/examples/server

for tool in psql awk bc; do
    command -v "$tool" >/dev/null || {
        echo "sweep-floor: $tool is needed" >&2
        exit 1
    }
done
if [[ $BUILD == 1 ]]; then
    cargo build --release --example server >&2
fi
[[ -x $SERVER ]] || {
    echo "sweep-floor: no $SERVER (build it, or run without --no-build)" >&2
    exit 1
}

admin() { psql "$URL" -v ON_ERROR_STOP=1 -qAtc "$1"; }
cleanup() {
    admin "DROP DATABASE IF EXISTS $RUN" || true
    admin "DROP DATABASE IF EXISTS $TEMPLATE" || true
    rm -f "${CONFIG:-}"
}
trap cleanup EXIT

# The template: Snitch's schema, then the snitches.
admin "DROP DATABASE IF EXISTS $RUN"
admin "DROP DATABASE IF EXISTS $TEMPLATE"
admin "CREATE DATABASE $TEMPLATE"
CONFIG=$(mktemp --suffix=.toml)
printf 'store = "postgres"\ndatabase_url = "%s"\n' "$BASE/$TEMPLATE" >"$CONFIG"
"$SERVER" --config "$CONFIG" migrate >&2
psql "$BASE/$TEMPLATE" -v ON_ERROR_STOP=1 -q -v boundary="$BOUNDARY" <<'SQL'
INSERT INTO snitch.cases (id, members, max_snitches, error_notices, on_hold)
SELECT 'bench-' || i, '{}', 4294967295, true, false FROM generate_series(0, 99) i;
-- Daily snitches that last checked in an hour before the boundary: the last 100,000 due
-- at it (a cron job at 03:59 with a minute's grace), the others a day later.
INSERT INTO snitch.snitches (token, case_id, name, tags, notes, interval, alert_type,
    alert_email, created_at, status, checked_in_at, last_check_in_at, anchor_at, deadline_at,
    smart_offsets_ms, event_seq, version, wake_at, schedule)
SELECT 'bench' || lpad(n::text, 15, '0'), 'bench-' || (n % 100), 'nightly backup ' || n,
    '{prod,db}', '', 'daily', 'basic', '{}', timestamptz :'boundary' - interval '2 days',
    'healthy', timestamptz :'boundary' - interval '1 hour',
    timestamptz :'boundary' - interval '1 hour', timestamptz :'boundary' - interval '1 day',
    due.at, '{}', 1, 2, due.at, CASE WHEN n >= 900000 THEN '59 3 * * *' END
FROM generate_series(0, 999999) n,
    LATERAL (SELECT CASE WHEN n >= 900000 THEN timestamptz :'boundary'
                         ELSE timestamptz :'boundary' + interval '1 day' END AS at) due;
VACUUM (ANALYZE) snitch.snitches;
SQL

# One measurement: PARTS (update, events, all), LEASE (on, off), WORKERS (1, 2), OUTBOX
# (indexed, bare).
measure() {
    local parts=$1 lease=$2 workers=$3 outbox=${4:-indexed}
    admin "DROP DATABASE IF EXISTS $RUN"
    admin "CREATE DATABASE $RUN TEMPLATE $TEMPLATE"
    if [[ $outbox == bare ]]; then
        psql "$BASE/$RUN" -qAtc "DROP INDEX snitch.deliveries_by_event, snitch.deliveries_due_by_class,
            snitch.deliveries_due_by_key, snitch.deliveries_pending_by_destination"
    fi
    psql "$BASE/$RUN" -qAtc "CHECKPOINT"
    local ranges=("bench000000000000000 bench999999999999999")
    if [[ $workers == 2 ]]; then
        ranges=("bench000000000000000 bench000000000950000" "bench000000000950000 bench999999999999999")
    fi
    local out started ended
    out=$(mktemp -d)
    started=$(date +%s.%N)
    local i=0
    for range in "${ranges[@]}"; do
        read -r lo hi <<<"$range"
        miss "$parts" "$lease" "$lo" "$hi" >"$out/$i" 2>&1 &
        i=$((i + 1))
    done
    wait
    ended=$(date +%s.%N)
    # A worker that failed prints no figure: its CPU and counts would be of a partial run.
    if grep -q ERROR "$out"/*; then
        cat "$out"/* >&2
        exit 1
    fi
    local ticks hz failed
    ticks=$(awk '/^ticks/ { sum += $2 } END { print sum }' "$out"/*)
    hz=$(getconf CLK_TCK)
    failed=$(psql "$BASE/$RUN" -qAtc "SELECT count(*) FILTER (WHERE status = 'failed') || ' failed, ' \
        || (SELECT count(*) FROM snitch.events) || ' events, ' \
        || (SELECT count(*) FROM snitch.deliveries) || ' deliveries, ' \
        || (SELECT count(*) FROM snitch.sweep_leases) || ' leases' FROM snitch.snitches")
    printf '%-7s lease %-3s outbox %-7s %d connection(s): %5.1f µs of Postgres CPU per missed snitch, %5.2f s wall (%s)\n' \
        "$parts" "$lease" "$outbox" "$workers" "$(echo "$ticks * 1000000 / $hz / 100000" | bc -l)" \
        "$(echo "$ended - $started" | bc -l)" "$failed"
    rm -rf "$out"
}

# The loop over the due snitches whose tokens are in [LO, HI), in the backend; prints the
# backend's CPU ticks used (`ticks N`).
miss() {
    local parts=$1 lease=$2 lo=$3 hi=$4
    psql "$BASE/$RUN" -v ON_ERROR_STOP=1 -qAt <<SQL
SELECT pg_backend_pid() AS pid \gset
\setenv BACKEND :pid
\! awk '{ print "before", \$14 + \$15 }' /proc/\$BACKEND/stat > /tmp/sweep-floor-\$BACKEND
DO \$\$
DECLARE
    tokens text[];
BEGIN
    LOOP
        SELECT array_agg(token) INTO tokens FROM (
            SELECT token FROM snitch.snitches
            WHERE wake_at IS NOT NULL AND wake_at <= '$BOUNDARY'
              AND token >= '$lo' AND token < '$hi'
            ORDER BY wake_at, token LIMIT 1000) due;
        EXIT WHEN tokens IS NULL;
        IF '$lease' = 'on' THEN
            INSERT INTO snitch.sweep_leases AS l (token, version, until)
            SELECT s.token, s.version, now() + interval '30 seconds'
            FROM snitch.snitches s WHERE s.token = ANY (tokens)
              AND NOT EXISTS (SELECT 1 FROM snitch.sweep_leases x
                              WHERE x.token = s.token AND x.version = s.version AND x.until > now())
            ON CONFLICT (token) DO UPDATE SET version = EXCLUDED.version, until = EXCLUDED.until
            WHERE l.version <> EXCLUDED.version OR l.until <= now();
            COMMIT;
        END IF;
        WITH updated AS (
            UPDATE snitch.snitches s SET status = 'failed', wake_at = s.wake_at + interval '1 day',
                deadline_at = s.deadline_at + interval '1 day', event_seq = s.event_seq + 1,
                version = s.version + 1, consecutive_misses = s.consecutive_misses + 1
            WHERE s.token = ANY (tokens)
            RETURNING s.*),
        new_events AS (
            INSERT INTO snitch.events (id, token, kind, at, case_id, name, notes, tags,
                alert_email, status, previous_status, checked_in_at, expected_at)
            SELECT 'ev' || u.token || u.event_seq, u.token, 'snitch.missing',
                u.wake_at - interval '1 day', u.case_id, u.name, u.notes, u.tags, u.alert_email,
                'failed', 'healthy', u.checked_in_at, u.wake_at - interval '1 day 1 minute'
            FROM updated u WHERE '$parts' IN ('events', 'all')
            RETURNING *)
        INSERT INTO snitch.deliveries (id, event_id, event, case_id, destination, channel,
            hook_id, url, secret, state, next_attempt_at)
        SELECT 'dl' || e.id, e.id,
            jsonb_build_object('type', e.kind, 'id', e.id, 'at', e.at, 'data', jsonb_build_object(
                'snitch', jsonb_build_object('token', e.token, 'name', e.name, 'notes', e.notes,
                    'tags', e.tags, 'status', e.status, 'previous_status', e.previous_status,
                    'interval', 'daily', 'alert_type', 'basic', 'checked_in_at', e.checked_in_at,
                    'created_at', e.at - interval '2 days', 'href', '/v1/snitches/' || e.token),
                'expected_at', e.expected_at, 'missed_periods', 1)),
            e.case_id, 'webhook:' || e.case_id, 'webhook', 'hook-' || e.case_id,
            'http://127.0.0.1:9/hook', NULL, 'pending', e.at
        FROM new_events e WHERE '$parts' = 'all';
        COMMIT;
    END LOOP;
END
\$\$;
\! awk '{ print "ticks", \$14 + \$15 - before }' before="\$(cut -d' ' -f2 /tmp/sweep-floor-\$BACKEND)" /proc/\$BACKEND/stat; rm -f /tmp/sweep-floor-\$BACKEND
SQL
}

echo "100,000 due of 1,000,000 snitches, in transactions of 1,000 (CPU: the backends' only)"
for parts in ${FLOOR_PARTS:-update events all}; do
    measure "$parts" off 1
done
measure all on 1
measure all off 1 bare
measure all off 2
measure all on 2
