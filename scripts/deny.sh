#!/usr/bin/env bash
# cargo deny over the dependency tree (rules in deny.toml): licences, bans and sources
# always; security advisories only when their database can be fetched (it comes from a
# git host that a machine without network cannot reach: then a note says so, and the run
# does not fail for it). Installs cargo-deny into the cargo home when it is missing, once
# per machine (a build of a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

# A release that builds with the toolchain of rust-toolchain.toml.
DENY_VERSION=0.20.2

if ! cargo deny --version 2>/dev/null | grep -qF " $DENY_VERSION"; then
    echo "== installing cargo-deny $DENY_VERSION (cargo install, once per machine)"
    # Its own target directory: the workspace's CARGO_TARGET_DIR stays the workspace's.
    CARGO_TARGET_DIR="${TMPDIR:-/tmp}/cargo-deny-build" \
        cargo install --locked cargo-deny --version "$DENY_VERSION"
fi

cargo deny --log-level error check licenses bans sources

# `fetch` gets the advisory database; without network it fails (or hangs until the
# timeout), and the advisories are skipped with a note.
if timeout 120 cargo deny --log-level error fetch db >/dev/null 2>&1; then
    cargo deny --log-level error check --disable-fetch advisories
else
    echo "cargo deny: the advisory database cannot be fetched here; advisories not checked"
fi
