#!/usr/bin/env bash
# Builds llama-cpp-python (the Python bindings and their OpenAI-compatible server, `llama_cpp.server`) from its
# PyPI sdist, into a virtual environment of its own. Nothing comes from anywhere but PyPI and Debian's packages.
# The result is cached outside the repository, keyed by the pinned version, next to the llama-server that
# engines/llamacpp/build.sh builds from the same sdist; only the first run on a machine pays for the compile.
#
#   engines/llama_cpp_python/build.sh     -> prints the path of that environment's python
#
# That python runs the server (`python -m llama_cpp.server`) and loads the same model in-process
# (`llama_cpp.Llama`), which is what the live tests compare the server's scores against.
#
# Environment: MODELIR_ENGINE_CACHE (default ~/.cache/modelir/engines), LLAMA_CPP_PYTHON_VERSION.
set -euo pipefail
VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${MODELIR_ENGINE_CACHE:-$HOME/.cache/modelir/engines}/llama-cpp-python-$VERSION
VENV=$CACHE/python-server
PY=$VENV/bin/python
log() { echo "[llama-cpp-python] $*" >&2; }

if [ -x "$PY" ] && [ -f "$VENV/.installed" ]; then
  echo "$PY"
  exit 0
fi

# shellcheck source=../build_tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/../build_tools.sh"
ensure_build_tools

mkdir -p "$CACHE"
SDIST=$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz
if [ ! -f "$SDIST" ]; then
  log "downloading the llama-cpp-python $VERSION sdist from PyPI"
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d "$CACHE/sdist"
fi

WHEEL_DIR=$CACHE/python-wheel
if ! ls "$WHEEL_DIR"/llama_cpp_python-"$VERSION"-*.whl >/dev/null 2>&1; then
  # The shared libllama and libggml only: no multimodal (mtmd) library, no native-CPU tuning, so the wheel
  # runs on any x86-64 machine of this kind.
  log "compiling the llama-cpp-python $VERSION wheel (about 10 minutes on 2 cores; log: $CACHE/python-build.log)"
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_OPENSSL=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    nice -n 10 python3 -m pip wheel --no-deps "$SDIST" -w "$WHEEL_DIR" >"$CACHE/python-build.log" 2>&1 ||
    { tail -30 "$CACHE/python-build.log" >&2; exit 1; }
fi

log "installing it with its server extra into $VENV"
rm -rf "$VENV"
python3 -m venv "$VENV"
"$PY" -m pip install --quiet --upgrade pip
"$PY" -m pip install --quiet -c "$HERE/constraints.txt" \
  "$(ls "$WHEEL_DIR"/llama_cpp_python-"$VERSION"-*.whl)[server]"
touch "$VENV/.installed"
echo "$PY"
