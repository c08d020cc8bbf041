#!/usr/bin/env bash
# End-to-end tests of the dashboard in a real headless browser: Debian's chromium driven
# by playwright-core (pinned in tests/e2e/package-lock.json). Installs what is missing,
# starts the example server on free 127.0.0.1 ports with a temporary SQLite store and a
# key made by the admin commands, runs tests/e2e/dashboard.mjs (at most 2 minutes), and
# fails on any failure. Screenshots of each page: target/screenshots/ (not in git).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then
  echo "== installing chromium (apt)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
if [ ! -d tests/e2e/node_modules/playwright-core ]; then
  echo "== installing playwright-core (npm ci)"
  (cd tests/e2e && npm ci --no-audit --no-fund --loglevel=error)
fi

echo "== building the example server"
# The features of scripts/test.sh, so that CI reuses what the tests built.
cargo build -q --workspace --all-features --example server
target_dir="${CARGO_TARGET_DIR:-target}"
server="$target_dir/debug/examples/server"
shots="$target_dir/screenshots"

work=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Two free ports, picked by the kernel.
read -r api_port check_in_port < <(node -e '
const net = require("net");
const a = net.createServer().listen(0, "127.0.0.1", () => {
  const b = net.createServer().listen(0, "127.0.0.1", () => {
    console.log(a.address().port, b.address().port); a.close(); b.close();
  });
});')

# A temporary SQLite store, whatever the environment says about databases.
unset DATABASE_URL SNITCH_DATABASE_URL SNITCH_STORE
export SNITCH_DATA_PATH="$work/snitch.db"
export SNITCH_LISTEN="127.0.0.1:$api_port"
export SNITCH_CHECK_IN_LISTEN="127.0.0.1:$check_in_port"
# The channel scenario sends a test to a stand-in vendor on 127.0.0.1.
export SNITCH_ALLOW_PRIVATE_WEBHOOKS=true
"$server" cases create e2e >/dev/null
key=$("$server" keys create --case e2e --label e2e 2>/dev/null)

"$server" >"$work/server.log" 2>&1 &
pid=$!
url="http://127.0.0.1:$api_port"
for _ in $(seq 1 150); do
  if curl -fsS -o /dev/null "$url/ui/login"; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then cat "$work/server.log"; echo "the server exited"; exit 1; fi
  sleep 0.2
done
if ! curl -fsS -o /dev/null "$url/ui/login"; then
  cat "$work/server.log"; echo "the server did not answer within 30 s"; exit 1
fi

echo "== dashboard in headless chromium"
rm -rf "$shots"
status=0
SNITCH_URL="$url" SNITCH_KEY="$key" SCREENSHOTS="$shots" \
  timeout 120 node tests/e2e/dashboard.mjs || status=$?
if [ "$status" -ne 0 ]; then
  echo "== server log"; tail -n 50 "$work/server.log"
fi
echo "screenshots: $shots"
exit "$status"
