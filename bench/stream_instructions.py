"""A streamed token's cost counted in instructions: `Model.astream` on `openai_chat` in-process, reading streams of
`streams.CHUNKS` one-token chunks from the instant upstream (`streams.py upstream`, in its own process, not counted),
under callgrind. Two processes, one reading `FEW` streams in turn and one reading `MANY`: the difference over the
extra tokens is the cost of one more token (the stream's start, the request, imports and set-up cancel out). The
count does not depend on the machine's load, which the timed stream rows do.

    python bench/stream_instructions.py                       # this tree
    python bench/stream_instructions.py /tmp/before/python/src  # another tree's beside it (on this venv)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import callgrind
from gateway import _process
from streams import CHUNKS

HERE = Path(__file__).resolve().parent
FEW, MANY = 2, 10

_CALLER = """
import asyncio
import sys

from modelir import Model, build_request
from modelir.http.executor import Executor
from modelir.transports.openai.chat import OpenAIChat


async def main(port: int, streams: int, merged: bool) -> None:
    model = Model(OpenAIChat(provider_model="bench-model"), name="bench", executor=Executor(f"http://127.0.0.1:{port}/v1"))
    request = build_request("bench", messages=[("user", "Hello!")], max_output_tokens=1000)
    for _ in range(streams):
        events = 0
        if merged:  # the server's path: batches, runs of plain chunks merged
            async for batch in model.astream_batches(request, merge=True):
                events += len(batch)
            assert events > 2, events
            continue
        async for _event in model.astream(request):
            events += 1
        assert events > 500, events


asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "merged"))
"""


def _instructions(src: str | None, port: int, streams: int, workdir: Path, mode: str) -> int:
    return callgrind.count(_CALLER, [str(port), str(streams), mode], src, workdir, fixed_hash_seed=True)


def per_token(port: int, src: str | None = None, mode: str = "events") -> float:
    """Instructions per streamed token in the tree at `src` (None: this one); `mode` "merged" reads
    `astream_batches(merge=True)`, the server's path, instead of `astream`."""
    with tempfile.TemporaryDirectory() as workdir:
        few = _instructions(src, port, FEW, Path(workdir), mode)
        many = _instructions(src, port, MANY, Path(workdir), mode)
    return (many - few) / ((MANY - FEW) * CHUNKS)


def run(other_src: str | None = None) -> list[tuple[str, str, str]]:
    if shutil.which("valgrind") is None:
        return [("astream instructions per token", "skipped: valgrind is not installed", "")]
    rows = []
    with _process([sys.executable, str(HERE / "streams.py"), "upstream"], r"READY (\d+)") as (port, _):
        this = per_token(int(port))
        label = f"Model.astream, openai_chat, {CHUNKS}-chunk streams, instructions per token"
        rows.append((f"{label}: this tree", f"{this / 1e3:.1f} k", ""))
        if other_src is not None:
            other = per_token(int(port), other_src)
            rows.append((f"the same, {other_src}", f"{other / 1e3:.1f} k", f"this tree {this / other:.2f}x of it"))
        merged = per_token(int(port), mode="merged")
        label = "Model.astream_batches(merge=True), the server's path: this tree"
        rows.append((label, f"{merged / 1e3:.1f} k", f"{merged / this:.2f}x of astream's"))
    return rows


if __name__ == "__main__":
    for row in run(sys.argv[1] if len(sys.argv) > 1 else None):
        print(f"{row[0]}  {row[1]}  |  {row[2]}")
