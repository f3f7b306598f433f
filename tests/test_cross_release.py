"""Both directions of IR 1.0 / 1.1 through the service conformance suite: a client built from IR 1.0.0's stubs
(generated at test time from the kept 1.0.0 image, `proto/baseline/modelir-v1.0.0.binpb`) against this release's
server gets what every case expects."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from tests.test_service_conformance import SERVERS, SUITE, differences, start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent
RELEASE_1_0 = ROOT / "proto" / "baseline" / "modelir-v1.0.0.binpb"


@pytest.fixture(scope="module")
def stubs_1_0(tmp_path_factory) -> Path:
    """IR 1.0.0's Python stubs, alone under the name `modelir` (an empty package around `modelir.v1`)."""
    out = tmp_path_factory.mktemp("ir-1.0.0")
    image = descriptor_pb2.FileDescriptorSet.FromString(RELEASE_1_0.read_bytes())
    ours = [file.name for file in image.file if file.name.startswith("modelir/")]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--descriptor_set_in={RELEASE_1_0}",
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            *ours,
        ],
        check=True,
    )
    (out / "modelir" / "__init__.py").write_text("")
    (out / "modelir" / "v1" / "__init__.py").write_text("")
    return out


def test_a_1_0_client_gets_what_every_case_expects_from_this_server(stubs_1_0):
    started = {name: start_server(name) for name in SERVERS}
    try:
        ran = subprocess.run(
            [
                sys.executable,
                str(ROOT / "tests" / "cross_release" / "old_client.py"),
                str(SUITE / "cases"),
                json.dumps({name: address for name, (_, address) in started.items()}),
            ],
            env={**os.environ, "PYTHONPATH": str(stubs_1_0)},
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        for process, _ in started.values():
            stop_server(process)
    results = [json.loads(line) for line in ran.stdout.splitlines()]
    cases = {path.stem: json.loads(path.read_text()) for path in (SUITE / "cases").glob("*.json")}
    assert {r["case"] for r in results} == {name for name, case in cases.items() if case["rpc"] != "Embed"}
    added = _enum_values_added_since_1_0()
    problems = []
    for result in results:
        case = cases[result["case"]]
        expect = {k: v for k, v in case["expect"].items() if k != "accumulated"}  # folding needs the SDK
        expect = _as_release_1_0_reads_it(expect, added)
        ignore = frozenset(case.get("ignore", []))
        problems += [f"{result['case']}: {p}" for p in differences(expect, result["actual"], ignore=ignore)]
    assert not problems, "\n".join(problems)


def _enum_values(files: list[descriptor_pb2.FileDescriptorProto]) -> dict[str, int]:
    """Every enum value of `files` (nested ones too), by name."""
    out: dict[str, int] = {}

    def visit(enums, messages) -> None:
        for enum in enums:
            out.update({value.name: value.number for value in enum.value})
        for message in messages:
            visit(message.enum_type, message.nested_type)

    for file in files:
        visit(file.enum_type, file.message_type)
    return out


def _enum_values_added_since_1_0() -> dict[str, int]:
    """The enum values this release has and IR 1.0.0 does not (`CAPABILITY_EMBEDDINGS`, ...), by name."""
    import importlib
    import pkgutil

    import modelir.v1

    current = []
    for module in pkgutil.iter_modules(modelir.v1.__path__):
        if module.name.endswith("_pb2"):
            file = descriptor_pb2.FileDescriptorProto()
            importlib.import_module(f"modelir.v1.{module.name}").DESCRIPTOR.CopyToProto(file)
            current.append(file)
    image = descriptor_pb2.FileDescriptorSet.FromString(RELEASE_1_0.read_bytes())
    known = _enum_values([f for f in image.file if f.name.startswith("modelir/")])
    return {name: number for name, number in _enum_values(current).items() if name not in known}


def _as_release_1_0_reads_it(value, added: dict[str, int]):
    """`value` as a 1.0 reader writes it back: an enum value its release does not know is kept as its number
    (proto-JSON prints an unknown value as the number; `proto/README.md` says a 1.0 reader ignores a capability it
    does not know in a manifest), so this release's name for it becomes that number."""
    if isinstance(value, dict):
        return {k: _as_release_1_0_reads_it(v, added) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_release_1_0_reads_it(v, added) for v in value]
    return added.get(value, value) if isinstance(value, str) else value
