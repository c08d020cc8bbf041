#!/usr/bin/env python3
"""Golden vectors for snitch-core's CronSchedule, generated with cronsim.

cronsim (https://github.com/cuu508/cronsim, the engine of healthchecks and Sentry Crons)
implements Debian cron's semantics, DST quirks included. This script asks it for the run
times of many expressions in several time zones, starting shortly before every DST
transition of 2026-2030 (and at sample instants in zones without DST), and writes them to
crates/snitch-core/tests/data/cron_golden.json, which tests/cron_golden.rs checks against
CronSchedule. The test needs only the JSON, not Python.

    pip install cronsim==2.7      # the version the vectors were made with
    python3 scripts/cron-golden.py

Python's zoneinfo reads the system tz database (or the `tzdata` package); its version is
recorded in the JSON. Snitch uses jiff's bundled database: if the two disagree on a
zone's rules for 2026-2030, vectors of that zone will differ and the test says so.

Format (compact JSON):
  {"cronsim": "2.7", "tzdata": "...", "count": N,
   "cases": [{"expr": "30 2 * * *", "zone": "Europe/Riga",
              "seqs": [[start, d1, d2, ...], ...]}, ...],
   "invalid": ["* * 30 2 *", ...]}
  start is a Unix time in seconds; run i is at start + d1 + ... + di (seconds). Each run
  is the first one strictly after the previous (after start, for the first). A sequence
  shorter than RUNS means cronsim found no further run within its 50-year horizon.
  "invalid" are expressions cronsim refuses (CronSim raises CronSimError).
"""

import json
import os
import signal
import sys
from datetime import datetime, timedelta, timezone
from importlib.metadata import version
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

UTC = timezone.utc
RUNS = 10
YEARS = range(2026, 2031)
OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)),
    "..",
    "crates",
    "snitch-core",
    "tests",
    "data",
    "cron_golden.json",
)

ZONES = [
    "UTC",
    "Europe/Riga",  # EET/EEST, changes at 03:00/04:00 local
    "Europe/London",  # GMT/BST, changes at 01:00/02:00 local
    "America/New_York",  # changes at 02:00 local
    "America/Santiago",  # southern hemisphere, changes at midnight local
    "Australia/Sydney",  # southern hemisphere
    "Australia/Lord_Howe",  # 30-minute DST shift
    "Asia/Kathmandu",  # +05:45, no DST
    "Asia/Kolkata",  # +05:30, no DST
]

# Snitch translates these before parsing; cronsim does not know them.
MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}

EXPRESSIONS = [
    # Real-time jobs (minute or hour starts with *): gap times never happen, a repeated
    # hour happens twice.
    "* * * * *",
    "*/5 * * * *",
    "*/7 * * * *",  # restarts each hour: 4-minute gap after :56
    "5/15 * * * *",  # = 5-59/15
    "*/15 * * * *",
    "0,15,30,45 * * * *",
    "2-58/7 * * * *",
    "59 * * * *",
    "0 */2 * * *",
    "0 */3 * * *",
    "15 */4 * * *",
    "30 */2 * * *",
    "0 */6 * * *",
    "* 2 * * *",
    "*/10 2 * * *",
    "*/20 0-3 * * *",
    "*/30 0 * * *",
    # Fixed-time jobs: once per wall clock time; gap times at the first minute after.
    "30 2 * * *",  # New York's and Sydney's gap (02:00-03:00)
    "30 3 * * *",  # Riga's gap
    "15 3 * * *",
    "30 1 * * *",  # London's gap; New York's repeated hour
    "0 2 * * *",  # the first minute of that gap
    "15 2 * * *",  # Lord Howe's gap (02:00-02:30)
    "45 1 * * *",  # Lord Howe's repeated half hour (01:30-02:00)
    "45 2 * * *",
    "0 3 * * *",
    "0 0 * * *",
    "59 23 * * *",
    "0 0,1 * * *",
    "0 2,14 * * *",
    "30 1,2,3 * * *",
    "30 0-3 * * *",
    "0 1-5 * * *",
    "0,30 1-3 * * *",
    "0 1-4/2 * * *",
    "0 8-18 * * 1-5",
    # Day rules: OR unless a day field starts with *.
    "0 0 */2 * MON",
    "0 0 1,15 * MON",
    "1 1 1-7 * */7",
    "0 12 1-7 * 1",
    "0 12 * * 1-5",
    "0 9 * * MON-FRI",
    "0 1 * * SAT,SUN",
    "30 2 * * 0",
    "30 2 * * 7",
    "0 9 1 JAN,APR,JUL,OCT *",
    "0 0 15 * 5L",
    # L, LW, 5L, MON#2
    "0 0 L * *",
    "0 22 LW * *",
    "0 3 LW,L * *",
    "0 0 1,L * *",
    "0 0 L 2 *",
    "0 3 * * 5L",
    "5 4 * * 7L",
    "0 3 * * MON#2",
    "0 2 * * SUN#1",
    "0 23 * * FRI#5",
    # Months and rare dates
    "0 0 1 * *",
    "0 0 1 1 *",
    "0 0 31 * *",
    "0 0 29 2 *",
    "0 0 29 2 */7",  # Feb 29 that is a Sunday (AND): 2032, 2060
    "0 0 * 2 MON#5",  # a fifth Monday in February: 2044, 2072
] + list(MACROS)

# Refused by cronsim; Snitch must refuse them too.
INVALID = [
    "* * 30 2 *",
    "0 0 31 4 *",
    "0 0 31 2,4,6 *",
    "0 0 30,31 2 *",
    "* * * *",
    "* * * * * * *",
    "60 * * * *",
    "* 24 * * *",
    "* * 0 * *",
    "* * 32 * *",
    "* * * 13 *",
    "* * * 0 *",
    "* * * * 8",
    "*/0 * * * *",
    "5-1 * * * *",
    "* * * * MON#6",
    "* * * * MON#0",
    "* * * * L",
    "* * * * 8L",
    "* * L5 * *",
    "* * * * FOO",
    "* * * JANUARY *",
    "1,,2 * * * *",
    "a * * * *",
    "/5 * * * *",
    "5/ * * * *",
    "-5 * * * *",
    "* * * * 1-5L",
    "* * W * *",
    "* * 15W * *",
    "* * ? * *",
]

RUN_TIMEOUT_SECONDS = 10


class Timeout(Exception):
    pass


def on_alarm(signum, frame):
    raise Timeout()


def transitions(zone):
    """Every UTC instant of 2026-2030 at which the zone's UTC offset changes, to the minute."""
    tz = ZoneInfo(zone)
    found = []
    t = datetime(YEARS.start, 1, 1, tzinfo=UTC)
    end = datetime(YEARS.stop, 1, 1, tzinfo=UTC)
    step = timedelta(hours=1)
    while t < end:
        if t.astimezone(tz).utcoffset() != (t + step).astimezone(tz).utcoffset():
            low, high = t, t + step
            while high - low > timedelta(minutes=1):
                mid = low + (high - low) / 2
                mid = mid.replace(second=0, microsecond=0)
                if mid == low:
                    break
                if mid.astimezone(tz).utcoffset() == low.astimezone(tz).utcoffset():
                    low = mid
                else:
                    high = mid
            found.append(high)
        t += step
    return found


def starts(zone):
    """Start instants: before each transition (never inside a repeated hour's second pass,
    where cronsim, which drops the fold of a fixed-time job's start, can answer a time
    before the start), or samples for zones without transitions."""
    points = transitions(zone)
    if points:
        offsets = [
            timedelta(hours=26),
            timedelta(hours=3),
            timedelta(minutes=70),
            timedelta(minutes=25),
            timedelta(minutes=5),
        ]
        return [p - o for p in points for o in offsets]
    tz = ZoneInfo(zone)
    samples = []
    for year in YEARS:
        for month, day, hour, minute in [(1, 1, 0, 0), (2, 28, 20, 0), (6, 15, 13, 37), (10, 31, 23, 55)]:
            local = datetime(year, month, day, hour, minute, tzinfo=tz)
            samples.append(local.astimezone(UTC) - timedelta(minutes=5))
    return samples


def tz_database_version():
    """Where zoneinfo reads zones from, and that database's version."""
    import zoneinfo

    for root in zoneinfo.TZPATH:
        path = os.path.join(root, "tzdata.zi")
        if os.path.exists(path):
            with open(path) as f:
                return f"{root} {f.readline().strip().lstrip('# ')}"
    try:
        return f"tzdata package {version('tzdata')}"
    except Exception:
        return "unknown"


def runs(expr, zone, start):
    five = MACROS.get(expr, expr)
    local = start.astimezone(ZoneInfo(zone))
    if zone == "UTC":
        local = start
    it = CronSim(five, local)
    out = []
    signal.alarm(RUN_TIMEOUT_SECONDS)
    try:
        for _ in range(RUNS):
            try:
                out.append(next(it))
            except StopIteration:
                break
    finally:
        signal.alarm(0)
    return [int(r.timestamp()) for r in out]


def main():
    signal.signal(signal.SIGALRM, on_alarm)
    cases = []
    total = 0
    for expr in EXPRESSIONS:
        for zone in ZONES:
            seqs = []
            for start in starts(zone):
                s = int(start.timestamp())
                try:
                    times = runs(expr, zone, start)
                except Timeout:
                    print(f"timeout: {expr!r} {zone} {start.isoformat()}", file=sys.stderr)
                    continue
                deltas, previous = [], s
                for t in times:
                    deltas.append(t - previous)
                    previous = t
                seqs.append([s] + deltas)
                total += 1
            cases.append({"expr": expr, "zone": zone, "seqs": seqs})
    invalid = []
    for expr in INVALID:
        try:
            CronSim(expr, datetime(2026, 1, 1, tzinfo=UTC))
        except CronSimError:
            invalid.append(expr)
        else:
            sys.exit(f"cronsim accepts {expr!r}, which INVALID says it refuses")
    tzdata = tz_database_version()
    doc = {
        "cronsim": version("cronsim"),
        "tzdata": tzdata,
        "count": total,
        "cases": cases,
        "invalid": invalid,
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"{total} sequences, {len(EXPRESSIONS)} expressions x {len(ZONES)} zones -> {OUT}")


if __name__ == "__main__":
    main()
