"""The eight examples run offline with one command (`examples/README.md`): the test fake has an entry point that
runs programs against it, so the three written for OpenAI need no key."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ".venv/bin/python -m tests.fake_openai examples/*.py"


def test_the_examples_readme_gives_the_one_command():
    assert f"\n{COMMAND}\n" in (ROOT / "examples" / "README.md").read_text()


def test_the_openai_examples_run_offline_without_a_key():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MODELIR_"))}
    programs = ["examples/many_requests.py", "examples/streaming.py", "examples/records.py"]
    done = subprocess.run(
        [sys.executable, "-m", "tests.fake_openai", *programs],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert re.findall(r"^==> (\S+)$", done.stdout, re.M) == programs
    assert "200 answers, 800 output tokens" in done.stdout
    assert done.stdout.count("via openai_chat") == 3


def test_a_failing_program_fails_the_command(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise SystemExit(3)\n")
    done = subprocess.run(
        [sys.executable, "-m", "tests.fake_openai", str(broken)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "failed with status 3" in done.stderr
