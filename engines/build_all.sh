#!/usr/bin/env bash
# Every engine `make test-engines` runs, built once per machine (or found in the cache at once), printed as the
# environment the live suites read: one NAME=path line each. Fails, naming the engine, when any build fails, so that
# a broken build can never turn into live suites that skip.
#
# vLLM's install is mostly downloading and unpacking (~140 s of CPU in ~9 min of wall time, measured cold), so it
# runs beside the compiles (llama-server, llama-cpp-python's wheel, Ollama), which take both cores one after another.
#
#   engines/build_all.sh > engines.env && env $(cat engines.env) pytest tests/engines
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VLLM_OUT=$(mktemp)
trap 'rm -f "$VLLM_OUT"' EXIT

built() {  # built NAME SCRIPT: the script's one line of output, timed on stderr
  local started=$SECONDS path
  path=$("$2") || { echo "[engines] building $1 failed" >&2; return 1; }
  [ -n "$path" ] || { echo "[engines] $2 printed no path" >&2; return 1; }
  echo "[engines] $1 ready in $((SECONDS - started)) s: $path" >&2
  echo "$path"
}

built vllm "$HERE/vllm/build.sh" >"$VLLM_OUT" &
vllm=$!
# A plain assignment, not `echo "...$(built ...)"`: only an assignment passes a failed build on to `set -e`.
llama_server=$(built llama-server "$HERE/llamacpp/build.sh")
llama_cpp_python=$(built llama-cpp-python "$HERE/llama_cpp_python/build.sh")
ollama=$(built ollama "$HERE/ollama/build.sh")
wait "$vllm" || exit 1
echo "MODELIR_LLAMA_SERVER=$llama_server"
echo "MODELIR_LLAMA_CPP_PYTHON=$llama_cpp_python"
echo "MODELIR_OLLAMA=$ollama"
echo "MODELIR_VLLM=$(cat "$VLLM_OUT")"
