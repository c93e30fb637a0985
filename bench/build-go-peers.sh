#!/usr/bin/env bash
# Builds cairn-bench's Go peer program (Pebble v2 and Badger v4, crates/cairn-bench/go) into
# target/release/cairnbench-peers, next to the cairn-bench binary, which runs it for
# `--engines pebble,badger`. Installs Go from Debian if it is missing; modules come from the
# Go module proxy (pinned by go.sum). Exits non-zero if Go is unusable.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v go >/dev/null 2>&1; then
  echo "go not found; installing golang-go from Debian" >&2
  (apt-get update -qq && apt-get install -y -qq golang-go >/dev/null) || { echo "could not install Go" >&2; exit 1; }
fi
mkdir -p target/release
# GOTOOLCHAIN=local: never try to download another toolchain (go.mod needs Go >= 1.24).
(cd crates/cairn-bench/go && GOTOOLCHAIN=local go build -trimpath -o ../../../target/release/cairnbench-peers .)
echo "built target/release/cairnbench-peers ($(go version | cut -d' ' -f3))" >&2
