"""`make serve` installs what serving needs and nothing else (the package with its own dependencies), while `make
test` and the suites install the extras on top, each with its own stamp (a dry run of make on an absent venv)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _planned(target: str, venv: Path) -> list[str]:
    done = subprocess.run(
        ["make", "-n", target, f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    return [line.strip() for line in done.stdout.splitlines() if " pip install " in line]


def test_serve_installs_the_package_alone(tmp_path):
    installs = _planned("serve", tmp_path / "venv")
    assert any(line.endswith("-c python/constraints.txt -e python") for line in installs), installs
    assert not any("python[" in line for line in installs), installs


@pytest.mark.parametrize("target", ["pytest", "lint", "test-engines"])
def test_the_test_targets_add_the_extras(tmp_path, target):
    installs = _planned(target, tmp_path / "venv")
    assert any("'python[dev,redis,ray]'" in line for line in installs), installs
