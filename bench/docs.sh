#!/usr/bin/env bash
# Document-memory benchmarks, cairn side by side with SQLite (WAL, FTS5; built into cairn-bench)
# and ripgrep, plus retrieval quality on BEIR SciFact.
#
#   bash bench/docs.sh          # YAMS set (3 repetitions), linux-source search/grep, SciFact
#   QUICK=1 bash bench/docs.sh  # smaller YAMS set, no source tree
#
# Installs ripgrep and the Debian linux-source package when missing; the tree is extracted to
# $BENCH_DATA/linux (default /tmp/bench-data/linux).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
if [ -z "${QUICK:-}" ]; then
  need rg || { apt-get update -qq && apt-get install -y -qq ripgrep >/dev/null; }
  linux_source_tree >/dev/null
fi

cargo build --release -q -p cairn-bench
BENCH=target/release/cairn-bench
echo "# retrieval quality (BEIR SciFact, test split)"
$BENCH ir --data ../shared/data/ir
echo
if [ -n "${QUICK:-}" ]; then
  $BENCH docs --small 500 --medium 50 --updates 500 --bulk 4 --repeat 1
else
  $BENCH docs --repeat 3 --tree "$DATA/linux"
fi
