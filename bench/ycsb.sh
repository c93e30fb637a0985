#!/usr/bin/env bash
# YCSB A-G: cairn against fjall, redb and sled (in-process Rust crates), Pebble and Badger (a Go
# program replaying the same op streams) and, with ROCKSDB=1, RocksDB. Builds everything it
# needs, runs the comparison and prints one table of medians with cairn/peer ratios.
#
#   bench/ycsb.sh [REGIME] [extra cairn-bench ycsb flags...]
#
# REGIME (each sets defaults that the environment variables below override):
#   small  1M records x 256 B values, 1M ops per workload, 64 MiB memtable, 512 MiB cache: the
#          data set (~280 MB) fits in memory (default)
#   big    10M records x 1000 B values, 1M ops per workload, 64 MiB memtable, 64 MiB cache: the
#          data set (~10 GB) is far larger than the engines' caches (the OS page cache still
#          holds much of it on a 24 GiB machine, so misses are mostly page-cache reads)
#   quick  the small regime scaled down 5x: 200k records x 256 B, 200k ops, 16 MiB memtable,
#          128 MiB cache; checks the harness in minutes
#
# Environment: RECORDS, OPS, VALUE_SIZE, CACHE_MB, MEMTABLE_MB (override the regime), WORKLOADS
# (default all), ENGINES (default all = every built engine + pebble,badger when Go is available),
# THREADS (default 1; e.g. 1,2), REPEAT (default 3), DURABILITY (nosync | groupsync, default
# nosync), ROCKSDB=1 (also build and run RocksDB: needs libclang, ~13 min build), LOAD_BATCH
# (records per write batch or transaction in the load phase, every engine alike; default 1, one
# insert per transaction as YCSB loads; the run phase always writes one op at a time; batches
# do not make redb's load faster: 10M records in 1000-record transactions took over 14 minutes
# against 8.5-11 one at a time), LOAD_ONCE=1 (load each engine once, start every run from a copy
# of its loaded database with the page cache dropped: a big run then costs a copy, not a
# 10M-record load; needs disk for every engine's loaded database and one run's copy, redb's and
# sled's about 18 GB each).
# Extra flags go to `cairn-bench ycsb` (see `cairn-bench ycsb --help`), e.g. --seed 7 or
# --bg-threads 1; do not repeat a flag this script already passes.
# Databases, streams and raw JSON results go under target/cairn-bench/ (override with --dir).
# CAIRN_BENCH_DEBUG=1 prints engine internals to stderr at each run's close (cairn: cache hit
# rate, write stall time by cause, intra-L0 compactions, tables and MiB per level; RocksDB: its
# "rocksdb.stats" property); CAIRN_BENCH_DEBUG=2 also prints cairn's level 0 and levels every
# second. CAIRN_BENCH_COMPACTION_NICE=N runs cairn's compactions out of levels 1+ at nice +N instead of
# its default (for experiments; the settings line shows the value used). CAIRN_BENCH_SYNC_PACING=0
# turns off cairn's pacing of compactions by sync latency while synced writes happen (same);
# CAIRN_BENCH_READ_PACING=0 its pacing by the latency of reads that wait for the device (same).
# CAIRN_BENCH_REWARM=0 turns off cairn's reading back, after a compaction, of the blocks it
# rewrote from hot blocks (same; CAIRN_BENCH_DEBUG=1 prints how many it read back).
# CAIRN_BENCH_SLOW_US=N prints, after each run, every op of the run phase that took N microseconds
# or more (any engine): its start in milliseconds into the run, its kind and its latency.
set -euo pipefail
cd "$(dirname "$0")/.."
REGIME=${1:-small}
[ $# -gt 0 ] && shift
case "$REGIME" in
  small) R=1000000;  O=1000000; V=256;  C=512; M=64 ;;
  big)   R=10000000; O=1000000; V=1000; C=64;  M=64 ;;
  quick) R=200000;   O=200000;  V=256;  C=128; M=16 ;;
  *) sed -n '2,30p' "$0" >&2; exit 2 ;;
esac

bash bench/build-go-peers.sh || echo "warning: Go peers not built; pebble and badger will be skipped" >&2

FEATURES=(--no-default-features --features cairn,redb,sled)
if [ "${ROCKSDB:-0}" = 1 ]; then
  # bindgen needs libclang itself (libclang.so or libclang-NN.so); a clang binary or
  # libclang-cpp alone does not do.
  if [ -z "${LIBCLANG_PATH:-}" ] && ! ldconfig -p | grep -Eq 'libclang(-[0-9.]+)?\.so'; then
    apt-get update -qq && apt-get install -y -qq libclang-dev clang >/dev/null
  fi
  FEATURES=(--no-default-features --features cairn,redb,sled,rocksdb)
fi
# fjall runs from a binary of its own: its lsm-tree turns on lz4_flex's safe (slower) encoder
# for every crate in the binary it is linked into, cairn-kv's included. Cargo keeps both
# builds' artifacts, so rebuilding either is quick after the first time.
cargo build --release -q -p cairn-bench --no-default-features --features fjall
cp target/release/cairn-bench target/release/cairn-bench-fjall
cargo build --release -q -p cairn-bench "${FEATURES[@]}"

mkdir -p target/cairn-bench
OUT=target/cairn-bench/ycsb-$REGIME.txt
target/release/cairn-bench ycsb \
  --workload "${WORKLOADS:-all}" --engines "${ENGINES:-all}" --threads "${THREADS:-1}" \
  --repeat "${REPEAT:-3}" --durability "${DURABILITY:-nosync}" \
  --records "${RECORDS:-$R}" --ops "${OPS:-$O}" --value-size "${VALUE_SIZE:-$V}" \
  --cache-mb "${CACHE_MB:-$C}" --memtable-mb "${MEMTABLE_MB:-$M}" --load-batch "${LOAD_BATCH:-1}" \
  --engine-exe fjall=target/release/cairn-bench-fjall ${LOAD_ONCE:+--load-once} \
  "$@" | tee "$OUT"
echo "table saved to $OUT" >&2
