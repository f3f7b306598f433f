"""The README's shell commands run as written, from the repository's root, against `make serve` on a free port.

Every `$ ` line of a fenced block in README.md is a command (indented lines after it continue it); the lines up to
the next command are its shown output, and each shown line (but `...`) must appear in what it prints. A command
that cannot run here is listed in `_CANNOT_RUN` with the reason: anything else that the README adds runs, so the
README cannot rot unnoticed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

# Prefixes of commands that do not run in `make test`, and why.
_CANNOT_RUN = {
    ".venv/bin/modelir run ... --resume": "an elided command line (shown for the flag)",
    "modelir generate --target 10.0.0.1": "a fleet's addresses, not this machine's",
    "modelir run --target dns:///modelir.internal": "a fleet's addresses, not this machine's",
    "OTEL_": "a server exporting to a collector that is not here",
    ".venv/bin/python -m modelir.integrations.lm_eval": "lm-eval's tasks run in tests/integrations",
    "... --model_args": "an elided command line",
    ".venv/bin/inspect eval": "Inspect's tasks run in tests/integrations",
    "... --model modelir/tiny": "an elided command line",
}


def _commands(text: str) -> list[tuple[str, list[str]]]:
    """(command, shown output lines) for every `$ ` line in a fenced block."""
    found: list[tuple[str, list[str]]] = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                i += 1
                continue
            command = [lines[i][2:]]
            i += 1
            while i < len(lines) and lines[i].startswith("  ") and not lines[i].lstrip().startswith("$"):
                command.append(lines[i])
                i += 1
            shown = []
            while i < len(lines) and not lines[i].startswith("$ "):
                shown.append(lines[i])
                i += 1
            found.append(("\n".join(command), shown))
    return found


def _runnable(command: str) -> bool:
    return not any(command.startswith(prefix) for prefix in _CANNOT_RUN)


def test_every_readme_command_is_run_or_has_a_reason():
    commands = [c for c, _ in _commands(README.read_text())]
    assert len([c for c in commands if _runnable(c)]) >= 15
    for prefix in _CANNOT_RUN:  # a stale reason is rot too
        assert any(c.startswith(prefix) for c in commands), prefix


@pytest.fixture(scope="module")
def served():
    """`make serve PORT=0`: the reference model, exactly as the README starts it, on a free port."""
    process = subprocess.Popen(
        ["make", "--no-print-directory", "serve", "PORT=0"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # make and the server it starts share a process group, stopped together below
    )
    try:
        for line in process.stderr:
            match = re.search(r"serving .* on 127\.0\.0\.1:(\d+)", line)
            if match:
                yield match.group(1)
                break
        else:
            raise AssertionError("make serve never said where it listens")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
        process.stderr.close()


def test_readme_commands_run_as_written(served, tmp_path):
    workdir = tmp_path / "clone"  # what a fresh clone has, with anything a command writes kept out of the repository
    workdir.mkdir()
    for name in (".venv", "node_modules", "examples", "Makefile"):
        (workdir / name).symlink_to(ROOT / name)
    assignments: list[str] = []
    for command, shown in _commands(README.read_text()):
        if not _runnable(command):
            continue
        command = command.replace("127.0.0.1:50051", f"127.0.0.1:{served}")
        if re.fullmatch(r"[A-Z_]+=\$\(.*\)", command):  # a variable later commands use
            assignments.append(command)
            continue
        script = "\n".join([*assignments, command])
        done = subprocess.run(["bash", "-c", script], cwd=workdir, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, command
        for line in shown:
            if line.strip() and line.strip() != "...":
                assert line in done.stdout, f"{command}: the README shows {line!r}; it printed\n{done.stdout}"
