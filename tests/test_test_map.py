"""`tests/README.md` maps every module of the package to its tests: no module left out, none that is gone, no test
file that does not exist, and every folder of `tests/` described."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).parent
PACKAGE = TESTS.parent / "python/src/modelir"
MAP = TESTS / "README.md"
ROW = re.compile(r"^\| `(?P<module>[^`]+)` \| (?P<tests>.*) \|$")


def _rows() -> list[tuple[str, list[str]]]:
    """The rows of every `| module | tests |` table: a module path and the test files named for it."""
    rows = []
    in_table = False
    for line in MAP.read_text().splitlines():
        if line == "| module | tests |":
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
        if in_table and (match := ROW.match(line)):
            rows.append((match["module"], re.findall(r"`([^`]+)`", match["tests"])))
    return rows


def _modules() -> set[str]:
    """Every module of the package, as a path under `python/src/modelir/`; the generated `v1/` is not mapped."""
    return {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] != "v1"
    }


def test_every_module_has_one_row_and_every_row_a_module():
    mapped = [module for module, _ in _rows()]
    assert len(mapped) > 100, "the map's tables were not found (`| module | tests |` headers)"
    duplicates = sorted({m for m in mapped if mapped.count(m) > 1})
    assert not duplicates, f"tests/README.md maps these modules twice: {duplicates}"
    missing = sorted(_modules() - set(mapped))
    assert not missing, f"add these modules to tests/README.md with the tests that test them: {missing}"
    gone = sorted(set(mapped) - _modules())
    assert not gone, f"tests/README.md maps modules that no longer exist: {gone}"


def test_every_row_names_test_files_that_exist():
    for module, tests in _rows():
        assert tests, f"tests/README.md names no test file for {module}"
        absent = [name for name in tests if not (TESTS / name).is_file()]
        assert not absent, f"tests/README.md names test files for {module} that do not exist: {absent}"


def test_every_test_folder_is_described():
    text = MAP.read_text()
    folders = sorted(p.name for p in TESTS.iterdir() if (p / "__init__.py").is_file())
    assert folders, "no test folders found"
    undescribed = [name for name in folders if f"| `{name}/` |" not in text]
    assert not undescribed, f"describe these folders in tests/README.md's table of folders: {undescribed}"


def test_the_parser_sees_a_missing_module(tmp_path, monkeypatch):
    """The check can fail: a map without one of its rows reports that module."""
    lines = MAP.read_text().splitlines()
    dropped = next(line for line in lines if line.startswith("| `pipeline/needs.py` |"))
    shortened = tmp_path / "README.md"
    shortened.write_text("\n".join(line for line in lines if line != dropped) + "\n")
    monkeypatch.setattr(f"{__name__}.MAP", shortened)
    assert "pipeline/needs.py" in _modules() - {module for module, _ in _rows()}
