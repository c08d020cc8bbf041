#!/usr/bin/env bash
# Runs every test of the workspace: the one test command of README.md and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-features "$@"
