"""The `modelir` command's start-up: `--version` and `--help` against `python -c "import asyncio"`, and a
`generate --target` call against the imports it needs, each pair timed side by side in fresh processes.

Every case is a new interpreter, as a user's shell starts one; the pairs alternate (`timing.paired`) so that the
machine's drift over the run lands on both sides of each ratio.
"""

from __future__ import annotations

import subprocess
import sys

from gateway import _process
from timing import paired

PYTHON = sys.executable
MODELIR = [PYTHON, "-m", "modelir.cli"]


def _runs(args: list[str]):
    def run() -> None:
        subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

    return run


def run(repeat: int) -> list[tuple[str, str, str]]:
    asyncio_import = _runs([PYTHON, "-c", "import asyncio"])
    rows = []
    for flag in ("--version", "--help"):
        command, baseline, ratio = paired(_runs([*MODELIR, flag]), asyncio_import, repeat)
        rows.append(
            (
                f"modelir {flag} vs python -c 'import asyncio'",
                f"{command * 1e3:,.0f} ms vs {baseline * 1e3:,.0f} ms",
                f"{ratio:.2f}x (target <= 3x)",
            )
        )
    # One generate against a served reference model: the imports a call needs (the SDK, gRPC, protobuf) are a
    # floor no lazy import removes; the ratio says how much of the command is that floor.
    serve = [*MODELIR, "serve", "--port", "0", "--access-log", "off"]
    with _process(serve, r"on 127\.0\.0\.1:(\d+)") as (port, _):
        generate = [*MODELIR, "generate", "--target", f"127.0.0.1:{port}", "--model", "reference", "--max-tokens", "8"]
        imports = [PYTHON, "-c", "import modelir.cli.calls, modelir.remote, modelir.reading.view, asyncio"]
        command, floor, ratio = paired(_runs([*generate, "Hello"]), _runs(imports), max(3, repeat // 3))
    rows.append(
        (
            "modelir generate --target vs importing what it calls",
            f"{command * 1e3:,.0f} ms vs {floor * 1e3:,.0f} ms",
            f"{ratio:.2f}x (reported: near 1x, the command is its imports and the call)",
        )
    )
    return rows
