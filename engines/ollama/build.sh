#!/usr/bin/env bash
# Builds a real Ollama from its Go module on the Go module proxy (cgo compiles the llama.cpp/ggml it vendors).
# The module zip leaves out every `vendor/` folder, so the three header-only libraries the build needs (nlohmann,
# miniaudio, stb) come from the llama-cpp-python sdist on PyPI, the same source the llama.cpp build uses, and are
# put on gcc's include path with CPATH (the module cache is not touched). See ../shared/engines/ollama.md.
# The result is cached outside the repository, keyed by version, behind a lock: only the first run on a machine
# compiles (~430 s of CPU), and two runs at once wait for each other instead of racing.
#
#   engines/ollama/build.sh            -> prints the path of the ollama binary
#
# Environment: MODELIR_ENGINE_CACHE (default ~/.cache/modelir/engines), OLLAMA_VERSION, LLAMA_CPP_PYTHON_VERSION.
set -euo pipefail
VERSION=${OLLAMA_VERSION:-0.17.4}
HEADERS_FROM=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
ROOT=${MODELIR_ENGINE_CACHE:-$HOME/.cache/modelir/engines}
CACHE=$ROOT/ollama-$VERSION
BIN=$CACHE/bin/ollama
log() { echo "[ollama] $*" >&2; }

if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
command -v go >/dev/null || { log "building Ollama needs go (>= 1.24.1) on PATH"; exit 1; }

# shellcheck source=../build_tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/../build_tools.sh"
ensure_build_tools

mkdir -p "$CACHE"
exec 9>"$CACHE.lock"
flock 9
if [ -x "$BIN" ]; then  # another run built it while this one waited for the lock
  echo "$BIN"
  exit 0
fi

HEADERS=$CACHE/headers
if [ ! -f "$HEADERS/nlohmann/json_fwd.hpp" ]; then
  SDIST=$ROOT/llama-cpp-python-$HEADERS_FROM/sdist/llama_cpp_python-$HEADERS_FROM.tar.gz
  if [ ! -f "$SDIST" ]; then
    log "downloading the llama-cpp-python $HEADERS_FROM sdist from PyPI (for the vendored headers)"
    python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python "llama-cpp-python==$HEADERS_FROM" -d "$CACHE/sdist"
    SDIST=$CACHE/sdist/llama_cpp_python-$HEADERS_FROM.tar.gz
  fi
  mkdir -p "$HEADERS"
  tar xzf "$SDIST" -C "$HEADERS" --strip-components=4 --wildcards \
    "llama_cpp_python-$HEADERS_FROM/vendor/llama.cpp/vendor/nlohmann/*" \
    "llama_cpp_python-$HEADERS_FROM/vendor/llama.cpp/vendor/miniaudio/*" \
    "llama_cpp_python-$HEADERS_FROM/vendor/llama.cpp/vendor/stb/*"
fi

log "compiling ollama $VERSION from the Go module proxy (several minutes on 2 cores; log: $CACHE/build.log)"
mkdir -p "$CACHE/bin.partial"
if ! GOBIN=$CACHE/bin.partial GOFLAGS=-mod=mod CPATH=$HEADERS nice -n 10 go install \
    -ldflags "-X github.com/ollama/ollama/version.Version=$VERSION" "github.com/ollama/ollama@v$VERSION" \
    >"$CACHE/build.log" 2>&1; then
  tail -20 "$CACHE/build.log" >&2
  exit 1
fi
rm -rf "$CACHE/bin" && mv "$CACHE/bin.partial" "$CACHE/bin"  # the binary appears whole or not at all
echo "$BIN"
