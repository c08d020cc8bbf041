#!/usr/bin/env python3
"""HTTP helper of scripts/bench-postgres-costs.sh (standard library only).

  create     makes snitches with POST /v1/snitches, one keep-alive client per case (the
             Postgres store makes inserts into one case take turns), and writes their
             check-in paths (`/<token>`), one a line, as scripts/bench-check-ins.lua reads
  check-in   checks every path of a file in once (GET, 16 clients); each must be 202
  metric     prints the sum of one metric's samples, e.g. snitch_snitches{status="failed"}
  wait       polls /metrics until a metric reaches a count; prints the wall-clock times
             (epoch seconds) when it first rose above its start and when it got there

Only 127.0.0.1 is ever contacted: the addresses come from the servers the script started.
"""

import argparse
import base64
import http.client
import json
import sys
import threading
import time


def connection(addr):
    host, port = addr.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=30)


def create(args):
    cases = [spec.split(":", 1) for spec in args.cases.split(",")]
    results = {}
    errors = []

    def make(name, key):
        conn = connection(args.api)
        auth = "Basic " + base64.b64encode(f"{key}:".encode()).decode()
        tokens = []
        try:
            for n in range(args.per_case):
                body = json.dumps(
                    {
                        "name": f"job {n} of {name}",
                        "interval": args.interval,
                        "tags": ["bench", "prod"],
                        "notes": "made by scripts/bench-postgres-costs.sh",
                    }
                )
                conn.request(
                    "POST",
                    "/v1/snitches",
                    body,
                    {"Authorization": auth, "Content-Type": "application/json"},
                )
                answer = conn.getresponse()
                text = answer.read()
                if not 200 <= answer.status < 300:
                    raise RuntimeError(f"POST /v1/snitches answered {answer.status}: {text!r}")
                tokens.append(json.loads(text)["token"])
        except Exception as e:  # reported once all threads are done
            errors.append(f"case {name}: {e}")
        results[name] = tokens

    threads = [threading.Thread(target=make, args=(n, k)) for n, k in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit("create: " + "; ".join(errors))
    with open(args.out, "w") as out:
        for name, _ in cases:
            for token in results[name]:
                out.write(f"/{token}\n")


def check_in(args):
    with open(args.paths) as f:
        paths = [line.strip() for line in f if line.strip()]
    errors = []

    def worker(i):
        conn = connection(args.addr)
        try:
            for path in paths[i :: args.clients]:
                conn.request("GET", path)
                answer = conn.getresponse()
                answer.read()
                if answer.status != 202:
                    raise RuntimeError(f"GET {path[:6]}… answered {answer.status}, not 202")
        except Exception as e:
            errors.append(str(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit("check-in: " + errors[0])


def metric_sum(url, name):
    """The sum of the samples of `name` (`metric` or `metric{label="value"}`)."""
    addr, path = url.removeprefix("http://").split("/", 1)
    conn = connection(addr)
    conn.request("GET", "/" + path)
    answer = conn.getresponse()
    text = answer.read().decode()
    conn.close()
    if answer.status != 200:
        raise RuntimeError(f"{url} answered {answer.status}")
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        # A bare name matches every labelled sample of that metric.
        if sample == name or ("{" not in name and sample.startswith(name + "{")):
            total += float(value)
    return total


def metric(args):
    print(int(metric_sum(args.url, args.name)))


def wait(args):
    start = metric_sum(args.url, args.name)
    first = None
    give_up = time.time() + args.timeout
    while time.time() < give_up:
        now = time.time()
        value = metric_sum(args.url, args.name)
        if first is None and value > start:
            first = now
        if value >= args.count:
            print(f"{first if first is not None else now:.3f} {now:.3f}")
            return
        time.sleep(args.every)
    sys.exit(f"wait: {args.name} did not reach {args.count} within {args.timeout} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("create")
    p.add_argument("--api", required=True, help="127.0.0.1:port of the API listener")
    p.add_argument("--cases", required=True, help="name:key,name:key,…")
    p.add_argument("--per-case", type=int, required=True)
    p.add_argument("--interval", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(run=create)
    p = commands.add_parser("check-in")
    p.add_argument("--addr", required=True, help="127.0.0.1:port of the check-in listener")
    p.add_argument("--paths", required=True)
    p.add_argument("--clients", type=int, default=16)
    p.set_defaults(run=check_in)
    p = commands.add_parser("metric")
    p.add_argument("--url", required=True)
    p.add_argument("--name", required=True)
    p.set_defaults(run=metric)
    p = commands.add_parser("wait")
    p.add_argument("--url", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--count", type=float, required=True)
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--every", type=float, default=0.02, help="seconds between scrapes")
    p.set_defaults(run=wait)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
