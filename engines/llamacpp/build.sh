#!/usr/bin/env bash
# Builds a real llama-server from the llama.cpp tree that the PyPI sdist of llama-cpp-python vendors.
# Nothing comes from anywhere but PyPI and Debian's packages. The result is cached outside the repository,
# keyed by the pinned version, so only the first run on a machine pays for the ~12-minute compile.
#
#   engines/llamacpp/build.sh            -> prints the path of the llama-server binary
#
# Environment: MODELIR_ENGINE_CACHE (default ~/.cache/modelir/engines), LLAMA_CPP_PYTHON_VERSION.
set -euo pipefail
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
CACHE=${MODELIR_ENGINE_CACHE:-$HOME/.cache/modelir/engines}/llama-cpp-python-$VERSION
BIN=$CACHE/build/bin/llama-server
log() { echo "[llamacpp] $*" >&2; }

if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi

# shellcheck source=../build_tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/../build_tools.sh"
ensure_build_tools

mkdir -p "$CACHE"
SRC=$CACHE/llama_cpp_python-$VERSION/vendor/llama.cpp
if [ ! -d "$SRC/tools/server" ]; then
  log "downloading the llama-cpp-python $VERSION sdist from PyPI"
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$CACHE/sdist"
  tar xzf "$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz" -C "$CACHE"
fi

log "configuring (server only; no web UI, so nothing is downloaded during the build)"
cmake -S "$SRC" -B "$CACHE/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >"$CACHE/configure.log"
log "compiling llama-server (about 12 minutes on 2 cores; log: $CACHE/build.log)"
nice -n 10 cmake --build "$CACHE/build" --target llama-server -j"$(nproc)" >"$CACHE/build.log" 2>&1
echo "$BIN"
