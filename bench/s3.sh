#!/usr/bin/env bash
# Packs in S3: snapshot and checkout of the node_modules data set (the Next.js app of
# bench/tree.sh) with cairn's S3 backend against a MinIO on loopback, cairn with local packs,
# and restic with its S3 backend on the same MinIO (and with a local repository), in one run.
#
#   bench/s3.sh [RUNS]
#
# Builds the data set with npm when missing, installs restic from Debian and MinIO with
# `go install` (into target/tools) when missing, builds cairn in release, starts MinIO with a
# temporary data directory and stops it at exit. Every run uses a fresh repository (bucket
# prefix), and runs interleave the setups. Checkouts are `--mode copy` (restic restore writes
# copies too) into a new directory on a tmpfs, and the S3 ones start cold: cairn's local pack cache and
# shared checkout copies are deleted first, so every pack comes from MinIO (restic keeps only
# metadata in its local cache). The page cache stays warm. Prints medians of RUNS runs (default
# 3), and the stored size.
#
#   S3_RATE=400mbit bench/s3.sh 3   # loopback throttled (tc tbf, needs root) like a network link
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
. bench/lib.sh
WORK=${BENCH_WORK:-/tmp/bench-work}/s3
OUT=${BENCH_OUT:-/dev/shm/cairn-bench-out}

if ! need restic || ! need bc || ! need curl; then
  apt-get update -qq && apt-get install -y -qq restic bc curl >/dev/null
fi
node_modules_sets
cargo build --release -q -p cairn-cli
CAIRN="$PWD/target/release/cairn"
MINIO=${CAIRN_MINIO:-$PWD/target/tools/minio}
if [ ! -x "$MINIO" ]; then
  mkdir -p target/tools && GOBIN="$PWD/target/tools" go install github.com/minio/minio@latest
  MINIO="$PWD/target/tools/minio"
fi

rm -rf "$WORK" && mkdir -p "$WORK/minio/bench"   # a top-level directory is a bucket
PORT=${MINIO_PORT:-19000}
export MINIO_ROOT_USER=benchadmin MINIO_ROOT_PASSWORD=bench-secret-123
"$MINIO" server "$WORK/minio" --address "127.0.0.1:$PORT" --console-address "127.0.0.1:$((PORT + 1))" \
  >"$WORK/minio.log" 2>&1 &
MINIO_PID=$!
cleanup() {
  [ -n "${S3_RATE:-}" ] && tc qdisc del dev lo root 2>/dev/null
  kill "$MINIO_PID" 2>/dev/null; wait "$MINIO_PID" 2>/dev/null || true; rm -rf "$OUT"
}
trap cleanup EXIT
until curl -sf "http://127.0.0.1:$PORT/minio/health/live" >/dev/null; do sleep 0.2; done
ENDPOINT="http://127.0.0.1:$PORT"
if [ -n "${S3_RATE:-}" ]; then
  need tc || { apt-get update -qq && apt-get install -y -qq iproute2 >/dev/null; }
  tc qdisc replace dev lo root tbf rate "$S3_RATE" burst 256kb latency 100ms
fi
export AWS_ACCESS_KEY_ID=$MINIO_ROOT_USER AWS_SECRET_ACCESS_KEY=$MINIO_ROOT_PASSWORD RESTIC_PASSWORD=bench

# setup ops: init REPO; ingest REPO; cold REPO (before a checkout, untimed); restore REPO DEST;
# size REPO (MiB stored). REPO is a directory; for the S3 setups its name is the bucket prefix.
cairn_local_init() { rm -rf "$1"; }
cairn_local_ingest() { "$CAIRN" --dir "$1" snapshot "$A" --name a; }
cairn_local_cold() { rm -rf "$1/files"; }
cairn_local_restore() { "$CAIRN" --dir "$1" checkout a "$2" --mode copy; }
cairn_local_size() { du -smc "$1/kv" "$1/packs" | tail -1 | cut -f1; }
cairn_s3_init() {
  rm -rf "$1" && mkdir -p "$1"
  printf '[s3]\nbucket = "bench"\nendpoint = "%s"\nprefix = "%s/"\n' "$ENDPOINT" "$(basename "$1")" >"$1/cairn.toml"
}
cairn_s3_ingest() { cairn_local_ingest "$@"; }
cairn_s3_cold() { rm -rf "$1/files" "$1/packs"; }
cairn_s3_restore() { cairn_local_restore "$@"; }
cairn_s3_size() { echo $(($(du -sm "$WORK/minio/bench/$(basename "$1")" | cut -f1) + $(du -sm "$1/kv" | cut -f1))); }
restic_local_init() { rm -rf "$1"; restic init -q --repo "$1" >/dev/null; }
restic_local_ingest() { restic -q --repo "$1" backup "$A"; }
restic_local_cold() { :; }
restic_local_restore() { restic -q --repo "$1" restore latest --target "$2"; }
restic_local_size() { du -sm "$1" | cut -f1; }
s3repo() { echo "s3:$ENDPOINT/bench/$(basename "$1")"; }
restic_s3_init() { rm -rf "$1"; restic init -q --repo "$(s3repo "$1")" >/dev/null; }
restic_s3_ingest() { restic -q --repo "$(s3repo "$1")" backup "$A"; }
restic_s3_cold() { :; }
restic_s3_restore() { restic -q --repo "$(s3repo "$1")" restore latest --target "$2"; }
restic_s3_size() { du -sm "$WORK/minio/bench/$(basename "$1")" | cut -f1; }

echo "data: A=$A ($(files "$A") files, $(du -sh "$A" | cut -f1)); runs=$RUNS; machine: $(nproc) cores; $(restic version | cut -d' ' -f1-2); MinIO on loopback${S3_RATE:+ throttled to $S3_RATE}"
SETUPS=(cairn_local cairn_s3 restic_local restic_s3)
declare -A ingest restore size
# Runs interleave the setups. Checkouts go to a tmpfs ($BENCH_OUT): on ext4, creating files is
# several times slower for minutes after many were deleted (inode allocation skips recently
# freed inodes), which made the checkout times depend on what the previous run deleted.
for r in $(seq "$RUNS"); do
  for setup in "${SETUPS[@]}"; do
    repo="$WORK/${setup//_/-}-$r"
    dest="$OUT/$setup-$r"
    "${setup}_init" "$repo"
    ingest[$setup]+="$(secs "${setup}_ingest" "$repo") "
    "${setup}_cold" "$repo"
    restore[$setup]+="$(secs "${setup}_restore" "$repo" "$dest") "
    # Every checkout must be complete (restic restores under the absolute source path).
    got=$(files "$dest")
    [ "$got" -eq "$(files "$A")" ] || { echo "$setup run $r restored $got files" >&2; exit 1; }
    size[$setup]=$("${setup}_size" "$repo")
    rm -rf "$dest"
  done
done
printf '%-13s %12s %12s %12s %12s\n' setup "snapshot s" "files/s" "checkout s" "stored MiB"
for setup in "${SETUPS[@]}"; do
  i=$(printf '%s\n' ${ingest[$setup]} | median)
  printf '%-13s %12.2f %12.0f %12.2f %12s\n' "$setup" "$i" "$(echo "$(files "$A") / $i" | bc -l)" \
    "$(printf '%s\n' ${restore[$setup]} | median)" "${size[$setup]}"
  echo "  runs: snapshot ${ingest[$setup]}; checkout ${restore[$setup]}"
done
