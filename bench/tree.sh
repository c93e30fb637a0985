#!/usr/bin/env bash
# Directory-snapshot benchmark: cairn vs restic, borg and git on real node_modules trees.
#
#   bench/tree.sh [RUNS]
#   SETS="node_modules packages linux" bench/tree.sh 1   # also ~80k files of popular npm
#                                                     # packages and Debian's linux-source tree
#   TOOLS="cairn git" bench/tree.sh               # a subset of the tools
#
# Builds the data sets under $BENCH_DATA (default /tmp/bench-data) with npm (a Next.js + React
# app, and a second app sharing most packages), installs restic and borg from Debian if missing,
# builds cairn in release, then for every tool and data set measures, with a warm page cache
# (the tree, or the repository before a restore, is read right before each timed step) and a
# fresh repository per run: first ingest, unchanged re-ingest, ingest of the second project
# into the same repository (cross-project dedup), and checkout/restore. Prints medians of RUNS
# runs (default 3) and the repository size.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
. bench/lib.sh
WORK=${BENCH_WORK:-/tmp/bench-work}
mkdir -p "$WORK"

if ! need restic || ! need borg || ! need bc; then
  apt-get update -qq && apt-get install -y -qq restic borgbackup bc >/dev/null
fi
node_modules_sets

cargo build --release -q -p cairn-cli
CAIRN="$PWD/target/release/cairn"
export RESTIC_PASSWORD=bench BORG_PASSPHRASE=bench BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes BORG_RELOCATED_REPO_ACCESS_IS_OK=yes

# tool ops: init REPO; ingest REPO SRC TAG; restore REPO TAG DEST
cairn_init() { rm -rf "$1"; }
cairn_ingest() { "$CAIRN" --dir "$1" snapshot "$2" --name "$3"; }
cairn_restore() { "$CAIRN" --dir "$1" checkout "$2" "$3" --mode hardlink; }
restic_init() { rm -rf "$1"; restic init -q --repo "$1" >/dev/null; }
restic_ingest() { restic -q --repo "$1" backup --tag "$3" "$2"; }
restic_restore() { restic -q --repo "$1" restore latest --tag "$2" --target "$3"; }
borg_init() { rm -rf "$1"; borg init -e none "$1"; }
borg_ingest() { (cd "$2" && borg create "$1::$3" .); }
borg_restore() { mkdir -p "$3" && (cd "$3" && borg extract "$1::$2"); }
git_init() { rm -rf "$1"; git init -q --bare "$1"; }
# -f: every file, as the other tools take (Debian's linux-source ships a .gitignore ending in
# `/*`, which would leave git nothing to add).
git_ingest() { git --git-dir="$1" --work-tree="$2" add -A -f && git --git-dir="$1" --work-tree="$2" -c user.name=b -c user.email=b@b commit -qm "$3"; }
git_restore() { mkdir -p "$3" && git --git-dir="$1" --work-tree="$3" checkout -f HEAD -- .; }

# One data set: SRC is ingested, re-ingested unchanged and restored; SECOND (optional) is
# ingested into the same repository after it (cross-project dedup).
run_set() { # label, SRC, SECOND
  local label=$1 src=$2 second=${3:-}
  echo "data $label: $src ($(files "$src") files, $(du -sh "$src" | cut -f1))${second:+, second project $second ($(files "$second") files)}; runs=$RUNS; machine: $(nproc) cores"
  printf '%-7s %12s %12s %12s %12s %12s %12s\n' tool "ingest s" "files/s" "re-ingest s" "+2nd s" "restore s" "repo MiB"
  for tool in ${TOOLS:-cairn restic borg git}; do
    first=(); again=(); second_t=(); restore=(); size=0
    for r in $(seq "$RUNS"); do
      repo="$WORK/$tool-repo"
      "${tool}_init" "$repo"
      [ "$tool" = git ] && rm -f "$repo/index"
      warm "$src"
      first+=("$(secs "${tool}_ingest" "$repo" "$src" a1)")
      warm "$src"
      again+=("$(secs "${tool}_ingest" "$repo" "$src" a2)")
      if [ -n "$second" ]; then warm "$second"; second_t+=("$(secs "${tool}_ingest" "$repo" "$second" b1)"); else second_t+=(0); fi
      rm -rf "$WORK/restore"
      warm "$repo"
      restore+=("$(secs "${tool}_restore" "$repo" a1 "$WORK/restore")")
      # cairn's repository is the engine and the packs; files/ holds the shared copies that
      # hard-link checkouts link to (the checkout's own disk use, like the other tools' restores).
      if [ "$tool" = cairn ]; then size=$(du -smc "$repo/kv" "$repo/packs" | tail -1 | cut -f1); else size=$(du -sm "$repo" | cut -f1); fi
    done
    f=$(printf '%s\n' "${first[@]}" | median)
    printf '%-7s %12.2f %12.0f %12.2f %12.2f %12.2f %12s\n' "$tool" "$f" "$(echo "$(files "$src") / $f" | bc -l)" \
      "$(printf '%s\n' "${again[@]}" | median)" "$(printf '%s\n' "${second_t[@]}" | median)" \
      "$(printf '%s\n' "${restore[@]}" | median)" "$size"
  done
}

for set in ${SETS:-node_modules}; do
  case $set in
    node_modules) run_set node_modules "$A" "$B" ;;
    packages) run_set packages "$(big_app_set)" ;;
    linux) run_set linux "$(linux_source_tree)" ;;
    *) echo "unknown data set $set (node_modules, packages, linux)" >&2; exit 1 ;;
  esac
done
