"""The request pipeline's cost counted in instructions: `Pipeline.prepare` (media URIs, validation, capabilities,
artifact policy, lowering) of the bench's small chat on `openai_chat`, under callgrind, as the difference between a
process that makes `CALLS` calls and one that makes none (so imports and set-up cancel out). The count does not
depend on the machine's load, which the timed rows do.

    python bench/pipeline_instructions.py                     # this tree
    python bench/pipeline_instructions.py /tmp/before/python/src  # another tree's beside it (on this venv)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import callgrind

CALLS = 2000

# What each counted process runs: 50 calls to warm the caches, then `argv[1]` more.
_CALLER = """
import sys
from modelir import build_request
from modelir.pipeline import media_policy
from modelir.pipeline.prepare import Pipeline
from modelir.transports.openai.chat import OpenAIChat

pipeline = Pipeline(OpenAIChat(provider_model="bench-model"), model="bench")
request = build_request("bench", messages=[("user", "Hello!")], max_output_tokens=16)
try:
    pipeline.prepare(request, media=media_policy.DEFAULT_POLICY)

    def call():
        return pipeline.prepare(request, media=media_policy.DEFAULT_POLICY)
except TypeError:  # a tree from before #37: the media check ran beside the pipeline, in `Model`

    def call():
        media_policy.check(request)
        return pipeline.prepare(request)
for _ in range(50 + int(sys.argv[1])):
    call()
"""


def _instructions(src: str | None, calls: int, workdir: Path) -> int:
    return callgrind.count(_CALLER, [str(calls)], src, workdir)


def per_call(src: str | None = None, calls: int = CALLS) -> float:
    """Instructions per `prepare` of the tree at `src` (None: this one)."""
    with tempfile.TemporaryDirectory() as workdir:
        return (_instructions(src, calls, Path(workdir)) - _instructions(src, 0, Path(workdir))) / calls


def run(other_src: str | None = None) -> list[tuple[str, str, str]]:
    if shutil.which("valgrind") is None:
        return [("Pipeline.prepare instructions per call", "skipped: valgrind is not installed", "")]
    this = per_call()
    rows = [("Pipeline.prepare, small chat, instructions per call (callgrind): this tree", f"{this / 1e3:.0f} k", "")]
    if other_src is not None:
        other = per_call(other_src)
        rows.append((f"the same, {other_src}", f"{other / 1e3:.0f} k", f"this tree {this / other:.2f}x of it"))
    return rows


if __name__ == "__main__":
    for case, measured, ratio in run(sys.argv[1] if len(sys.argv) > 1 else None):
        print(f"{case}  {measured}  |  {ratio}")
