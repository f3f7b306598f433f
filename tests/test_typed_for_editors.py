"""modelir is typed for an editor (`py.typed`): mypy passes the eight examples as a user's program, and it catches
what an editor should flag: a misspelt keyword of `chat`, and a view's text used as something else."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PROGRAMS = [
    "rl_rollout",
    "token_in_rollout",
    "bits_per_byte",
    "classify",
    "reasoning_replay",
    "many_requests",
    "streaming",
    "records",
]
MISTAKES = """
import modelir

model = modelir.connect("reference")
reply = modelir.view(model.chat("Hello", max_tokens=5))
length: int = reply.text
ids: str = reply.sampled_token_ids
calls: int = reply.tool_calls
"""


def _mypy(*paths: Path, cache: Path) -> subprocess.CompletedProcess:
    args = ["--python-version", "3.11", "--cache-dir", str(cache), "--no-error-summary", *map(str, paths)]
    # From another folder: no project configuration applies, as in a user's program.
    return subprocess.run([sys.executable, "-m", "mypy", *args], capture_output=True, text=True, cwd=cache.parent)


def test_the_package_says_it_is_typed():
    assert resources.files("modelir").joinpath("py.typed").is_file()


def test_mypy_passes_the_examples_and_flags_the_mistakes(tmp_path):
    mistakes = tmp_path / "mistakes.py"
    mistakes.write_text(MISTAKES)
    done = _mypy(*(EXAMPLES / f"{p}.py" for p in PROGRAMS), mistakes, cache=tmp_path / "cache")
    lines = [line for line in done.stdout.splitlines() if ": note: " not in line]
    flagged = {int(line.split(":")[1]) for line in lines if line.startswith("mistakes.py:")}
    others = [line for line in lines if not line.startswith("mistakes.py:")]
    assert others == [], "\n".join(others)
    assert flagged == {5, 6, 7, 8}, done.stdout
