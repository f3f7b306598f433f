# Sourced by the engine build scripts: installs what compiling an engine from source needs, from Debian's packages.
ensure_build_tools() {
  local missing=() tool
  for tool in cmake make g++ python3; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "[engines] installing build tools: ${missing[*]}" >&2
    apt-get update -qq && apt-get install -y -qq cmake build-essential python3-venv >/dev/null
  fi
}
