# Helpers shared by the benchmark scripts (sourced, not run).
#
# BENCH_DATA (default /tmp/bench-data) holds the data sets, built on first use.

DATA=${BENCH_DATA:-/tmp/bench-data}
mkdir -p "$DATA"

need() { command -v "$1" >/dev/null 2>&1; }
# Seconds a command takes (its output discarded).
secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }
# The median of the numbers on standard input.
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
files() { find "$1" -type f | wc -l; }

# The node_modules data sets: a Next.js + React app (A) and a second app sharing most packages
# (B), installed with npm into $DATA/next-app and $DATA/next-app2.
make_app() { # name, dependencies (JSON object body)
  local dir="$DATA/$1"
  if [ ! -d "$dir/node_modules" ]; then
    need npm || { echo "npm is required to build the data sets" >&2; exit 1; }
    mkdir -p "$dir"
    printf '{ "name": "%s", "version": "1.0.0", "private": true, "dependencies": { %s } }\n' "$1" "$2" > "$dir/package.json"
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
  fi
}
# A larger set of popular packages (about 80,000 files, 860 MB) in $DATA/big-app; prints its
# node_modules path.
big_app_set() {
  make_app big-app '"next": "15", "react": "19", "react-dom": "19", "typescript": "5", "eslint": "9", "jest": "29", "webpack": "5", "webpack-cli": "6", "@babel/core": "7", "@babel/preset-env": "7", "@mui/material": "7", "@mui/icons-material": "7", "@emotion/react": "11", "@emotion/styled": "11", "date-fns": "4", "lodash": "4", "rxjs": "7", "googleapis": "148", "@aws-sdk/client-s3": "3", "vite": "6"'
  echo "$DATA/big-app/node_modules"
}
node_modules_sets() {
  make_app next-app '"next": "15", "react": "19", "react-dom": "19", "typescript": "5", "eslint": "9", "@types/react": "19", "@types/node": "22"'
  make_app next-app2 '"next": "15", "react": "19", "react-dom": "19", "typescript": "5", "eslint": "9", "@types/react": "19", "@types/node": "22", "lodash": "4", "zod": "3"'
  A="$DATA/next-app/node_modules"
  B="$DATA/next-app2/node_modules"
}

# The Debian linux-source tree (about 80,000 files), extracted into $DATA/linux; prints its path.
linux_source_tree() {
  if ! ls /usr/src/linux-source-*.tar.xz >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq linux-source >/dev/null
  fi
  if [ ! -d "$DATA/linux" ]; then
    local tarball
    tarball=$(ls /usr/src/linux-source-*.tar.xz | head -1)
    mkdir -p "$DATA/linux" && tar -xJf "$tarball" -C "$DATA/linux" --strip-components=1
  fi
  echo "$DATA/linux"
}
