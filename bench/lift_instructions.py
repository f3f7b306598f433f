"""A unary lift's cost counted in instructions: `lift_accounted` (the lift and the accounting of every native member,
as `Model` runs it) of a small chat answer, under callgrind, as the difference between a process that makes `CALLS`
calls and one that makes none (so imports and set-up cancel out, their noise spread over 5,000 calls), like
`pipeline_instructions.py`. The count does not depend on the machine's load, which timed rows do.

    python bench/lift_instructions.py                     # this tree
    python bench/lift_instructions.py /tmp/before/python/src  # another tree's beside it (on this venv)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import callgrind
import orjson
from processes import SMALL_ANSWER

CALLS = 5000

# The small answer of the bench's upstream (`processes.upstream`), and the same with one member no lift reads (which
# takes the accounting's slow path: a warning naming it).
_CALLER = """
import sys
import orjson
from modelir import build_request
from modelir.transports.base import HttpResponse
from modelir.transports.llamacpp import LlamaCpp
from modelir.transports.openai.chat import OpenAIChat
from modelir.transports.vllm import VLLM

answer = orjson.loads(@ANSWER@)
case = sys.argv[2]
if case == "unread":
    answer["x_unknown"] = {"a": 1}
transport = {"vllm": VLLM, "llamacpp": LlamaCpp}.get(case, OpenAIChat)(provider_model="bench-model")
response = HttpResponse(200, (("content-type", "application/json"),), orjson.dumps(answer))
request = build_request("bench", messages=[("user", "Hello!")], max_output_tokens=16)
for _ in range(50 + int(sys.argv[1])):
    transport.lift_accounted(request, response)
""".replace("@ANSWER@", repr(orjson.dumps(SMALL_ANSWER)))
CASES = {
    "openai_chat": "openai_chat, small answer",
    "unread": "openai_chat, small answer with one unread member",
    "vllm": "vllm chat, small answer",
    "llamacpp": "llamacpp chat, small answer",
}


def _instructions(src: str | None, calls: int, case: str, workdir: Path) -> int:
    return callgrind.count(_CALLER, [str(calls), case], src, workdir, fixed_hash_seed=True)


def per_call(case: str, src: str | None = None, calls: int = CALLS) -> float:
    """Instructions per `lift_accounted` of `case` in the tree at `src` (None: this one)."""
    with tempfile.TemporaryDirectory() as workdir:
        return (_instructions(src, calls, case, Path(workdir)) - _instructions(src, 0, case, Path(workdir))) / calls


def run(other_src: str | None = None, cases: tuple[str, ...] = tuple(CASES)) -> list[tuple[str, str, str]]:
    if shutil.which("valgrind") is None:
        return [("lift_accounted instructions per call", "skipped: valgrind is not installed", "")]
    rows = []
    for case in cases:
        this = per_call(case)
        rows.append((f"lift_accounted, {CASES[case]}, instructions per call: this tree", f"{this / 1e3:.1f} k", ""))
        if other_src is not None:
            other = per_call(case, other_src)
            rows.append((f"the same, {other_src}", f"{other / 1e3:.1f} k", f"this tree {this / other:.2f}x of it"))
    return rows


if __name__ == "__main__":
    for row in run(sys.argv[1] if len(sys.argv) > 1 else None):
        print(f"{row[0]}  {row[1]}  |  {row[2]}")
