"""The `modelir` command answers `--version` and `--help` without loading the SDK: no gRPC, aiohttp, OpenTelemetry
or generated code is imported before the arguments are parsed (how fast that is: `make bench`, group `cli`)."""

from __future__ import annotations

import subprocess
import sys

import modelir.cli
import pytest
from modelir.version import IR_VERSION, SDK_VERSION

HEAVY = ("grpc", "aiohttp", "opentelemetry", "modelir.v1", "google.protobuf", "numpy", "httpx")
PROBE = """
import sys
from modelir.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
loaded = (name for name in sys.modules if name.split(".")[0] in {roots!r} or name.startswith({heavy!r}))
print("LOADED:" + ",".join(sorted(loaded)))
"""


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["generate", "--help"], ["run", "--concurrency", "0"]])
def test_parsing_imports_nothing_heavy(argv):
    roots = {h.split(".")[0] for h in HEAVY} - {"google", "modelir"}
    code = PROBE.format(argv=argv, roots=roots, heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    loaded = [name for name in done.stdout.rsplit("LOADED:", 1)[1].strip().split(",") if name]
    assert loaded == [], f"modelir {' '.join(argv)} imported {loaded}"


def test_version_names_the_sdk_and_the_spec_ir_version():
    assert modelir.cli.SPEC_IR_VERSION == IR_VERSION  # the spelled-out copy follows the spec's own option
    done = subprocess.run([sys.executable, "-m", "modelir.cli", "--version"], capture_output=True, text=True)
    assert done.stdout.strip() == f"modelir {SDK_VERSION} (IR {IR_VERSION})"


def test_importing_modelir_loads_a_name_only_when_it_is_used():
    code = "import sys, modelir; a = 'grpc' in sys.modules; modelir.RemoteModel; print(a, 'grpc' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


def test_a_submodule_named_like_a_public_name_does_not_replace_it():
    code = "import modelir.connect, modelir; from modelir import connect; print(callable(connect), modelir.connect)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("True <function connect"), done.stdout


def test_the_lazy_table_and_the_type_checking_imports_agree():
    import ast
    from pathlib import Path

    import modelir

    tree = ast.parse(Path(modelir.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    declared = {(i.module, a.name) for i in block.body if isinstance(i, ast.ImportFrom) for a in i.names}
    assert declared == {(module, name) for module, names in modelir._EXPORTS.items() for name in names}
    for name in modelir.__all__:
        assert getattr(modelir, name) is not None
