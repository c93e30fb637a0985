#!/usr/bin/env bash
# Directory-snapshot benchmark: cairn vs restic, borg and git on real trees.
#
#   bench/tree.sh [RUNS]
#   SETS="node_modules packages linux" bench/tree.sh 1   # also ~80k files of popular npm
#                                                     # packages and Debian's linux-source tree
#   TOOLS="cairn,git" bench/tree.sh                   # a subset of the tools
#
# Builds the data sets under $BENCH_DATA (default /tmp/bench-data) with npm (a Next.js + React
# app, and a second app sharing most packages; a larger set of popular packages) and from
# Debian's linux-source package, installs restic, borg and git from Debian if missing, builds
# cairn and cairn-bench in release, then runs `cairn-bench trees`: for every tool and data set,
# with a warm page cache (the tree, or the repository before a restore, is read right before
# each timed step, then `sync`) and a fresh repository per run, first ingest, unchanged
# re-ingest, ingest of the second project into the same repository (cross-project dedup),
# checkout/restore, and the repository's size. Prints medians of RUNS runs (default 3) and
# cairn/peer ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
. bench/lib.sh
WORK=${BENCH_WORK:-/tmp/bench-work}
mkdir -p "$WORK"

if ! need restic || ! need borg || ! need git; then
  apt-get update -qq && apt-get install -y -qq restic borgbackup git >/dev/null
fi

sets=()
for set in ${SETS:-node_modules}; do
  case $set in
    node_modules) node_modules_sets; sets+=(--set "node_modules=$A,$B") ;;
    packages) sets+=(--set "packages=$(big_app_set)") ;;
    linux) sets+=(--set "linux=$(linux_source_tree)") ;;
    *) echo "unknown data set $set (node_modules, packages, linux)" >&2; exit 1 ;;
  esac
done

cargo build --release -q -p cairn-cli
cargo build --release -q -p cairn-bench
tools=${TOOLS:-cairn,restic,borg,git}
target/release/cairn-bench trees --runs "$RUNS" --tools "${tools// /,}" --dir "$WORK" --cairn target/release/cairn "${sets[@]}"
