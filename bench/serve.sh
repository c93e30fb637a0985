#!/usr/bin/env bash
# The daemon under many clients, against SQLite FTS5 doing the same load in the same run
# (`cairn-bench mixed`; SQLite is built into cairn-bench):
#   1. 16 and 64 clients, mixes 60/30/10 and 10/80/10 (add/search/ls), 200 ops per client,
#      1,000 documents preloaded, medians of 3 runs (engines rotated);
#   2. the long run: 10 rounds of 64 clients x 200 adds into one daemon (one database), ops/s
#      and RSS after every round.
#
#   bash bench/serve.sh            # both
#   SERVE=1 bash bench/serve.sh    # also `cairn-bench serve` (framing, 1-64 clients adding)
#   QUICK=1 bash bench/serve.sh    # 1 run, 50 ops per client, 3 rounds: checks the harness
#
# Run it under the shared cargo lock so nothing compiles while it measures:
#   flock /tmp/cairn-cargo.lock bash bench/serve.sh
# Extra arguments go to both `cairn-bench mixed` runs. Tables: target/cairn-bench/serve-mixed.md
# and serve-long.md; every run as JSON: target/cairn-bench/mixed/{results,long}.jsonl, medians
# in summary.json.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -q -p cairn-cli -p cairn-bench
BENCH=target/release/cairn-bench
OUT=target/cairn-bench
mkdir -p "$OUT"
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (crates modified)'), $(date -u +%F), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
if [ -n "${QUICK:-}" ]; then
  $BENCH mixed --repeat 1 --ops 50 "$@" | tee "$OUT/serve-mixed.md"
  $BENCH mixed --long --rounds 3 --round-ops 50 "$@" | tee "$OUT/serve-long.md"
else
  $BENCH mixed "$@" | tee "$OUT/serve-mixed.md"
  $BENCH mixed --long "$@" | tee "$OUT/serve-long.md"
fi
if [ -n "${SERVE:-}" ]; then
  $BENCH serve | tee "$OUT/serve-framing.md"
fi
