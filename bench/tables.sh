#!/usr/bin/env bash
# Record-table benchmarks: cairn-tables side by side with SQLite (built into cairn-bench) and
# PostgreSQL from Debian, which this script installs when missing, initializes under
# $BENCH_DATA/pg (default /tmp/bench-data/pg) and runs on 127.0.0.1:54329 for the duration.
#
#   bash bench/tables.sh                 # 100k records, 300k ops/phase, 3 repetitions, unsynced
#   bash bench/tables.sh --durable       # fsync per commit on every engine
#   QUICK=1 bash bench/tables.sh         # 20k records, 20k ops/phase, 1 repetition
#
# Extra arguments go to `cairn-bench tables`.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${BENCH_DATA:-/tmp/bench-data}
PORT=54329
mkdir -p "$DATA"

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ]; then
  apt-get update -qq && apt-get install -y -qq postgresql >/dev/null
  pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi

# PostgreSQL refuses to run as root: run it as the postgres user (created by the package).
as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
PGDATA="$DATA/pg"
if [ ! -f "$PGDATA/PG_VERSION" ]; then
  rm -rf "$PGDATA" && mkdir -p "$PGDATA"
  [ "$(id -u)" = 0 ] && chown postgres "$PGDATA"
  as_pg "$pgbin/initdb -D '$PGDATA' -U postgres --auth=trust -E UTF8" >/dev/null
fi
[ "$(id -u)" = 0 ] && chown -R postgres "$PGDATA"
as_pg "$pgbin/pg_ctl -D '$PGDATA' -l '$PGDATA/server.log' -w stop -m fast" >/dev/null 2>&1 || true
as_pg "$pgbin/pg_ctl -D '$PGDATA' -l '$PGDATA/server.log' -w start \
  -o \"-c listen_addresses=127.0.0.1 -p $PORT -k /tmp -c shared_buffers=256MB -c max_connections=100 \
       -c fsync=on -c full_page_writes=on -c max_wal_size=4GB\"" >/dev/null
trap 'as_pg "$pgbin/pg_ctl -D \"$PGDATA\" -w stop -m fast" >/dev/null 2>&1 || true' EXIT

cargo build --release -q -p cairn-bench
export CAIRN_BENCH_PG="host=127.0.0.1 port=$PORT user=postgres dbname=postgres"
if [ -n "${QUICK:-}" ]; then
  target/release/cairn-bench tables --records 20000 --ops 20000 --repeat 1 "$@"
else
  target/release/cairn-bench tables "$@"
fi
