"""Counting a Python program's instructions under callgrind: what the `*_instructions.py` benches share.

Instruction counts do not depend on the machine's load, so two trees counted one after the other compare fairly.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def count(caller: str, args: list[str], src: str | None, workdir: Path, *, fixed_hash_seed: bool = False) -> int:
    """The instructions callgrind counts for `python caller.py ARGS`, with the package taken from the tree at `src`
    (None: this one). `fixed_hash_seed` gives every counted process the same dict layouts."""
    env = dict(os.environ)
    if fixed_hash_seed:
        env["PYTHONHASHSEED"] = "0"
    if src is not None:
        env["PYTHONPATH"] = str(Path(src).resolve())
    out = workdir / ("callgrind." + ".".join(args))
    script = workdir / "caller.py"
    script.write_text(caller)
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind reported no count:\n{done.stderr[-2000:]}")
    out.unlink(missing_ok=True)
    return int(found.group(1))
