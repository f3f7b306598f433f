"""The repository's habits hold: pre-commit runs the ruff that `make lint` runs, and the package ships its licence."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).parent.parent


def _pinned(package: str) -> str:
    """The version python/constraints.txt pins for `package`."""
    match = re.search(rf"^{re.escape(package)}==(\S+)$", (ROOT / "python/constraints.txt").read_text(), re.MULTILINE)
    assert match, f"python/constraints.txt pins no {package}"
    return match[1]


def _ruff_pins(config: dict) -> list[str]:
    """Every ruff version a pre-commit configuration installs for its hooks."""
    pins = []
    for repo in config["repos"]:
        if "ruff" in repo["repo"]:  # astral-sh/ruff-pre-commit: the tag is the version
            pins.append(repo["rev"].removeprefix("v"))
        for hook in repo.get("hooks", ()):
            for requirement in hook.get("additional_dependencies", ()):
                if requirement.startswith("ruff=="):
                    pins.append(requirement.removeprefix("ruff=="))
    return pins


def test_pre_commit_runs_the_pinned_ruff():
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    pins = _ruff_pins(config)
    hooks = {hook["id"] for repo in config["repos"] for hook in repo["hooks"]}
    assert {"ruff-check", "ruff-format", "buf-lint", "buf-format"} <= hooks
    assert pins, "the pre-commit configuration installs no pinned ruff"
    assert set(pins) == {_pinned("ruff")}, f"pre-commit installs ruff {pins}, constraints.txt pins {_pinned('ruff')}"


def test_the_ruff_pin_check_can_fail():
    config = {"repos": [{"repo": "local", "hooks": [{"id": "x", "additional_dependencies": ["ruff==0.0.1"]}]}]}
    assert _ruff_pins(config) == ["0.0.1"] != [_pinned("ruff")]


def test_the_package_declares_and_ships_its_licence():
    project = tomllib.loads((ROOT / "python/pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert (ROOT / "python/LICENSE").read_text() == text  # the wheel's copy is the repository's
