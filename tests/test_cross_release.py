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
    problems = []
    for result in results:
        case = cases[result["case"]]
        expect = {k: v for k, v in case["expect"].items() if k != "accumulated"}  # folding needs the SDK
        ignore = frozenset(case.get("ignore", []))
        problems += [f"{result['case']}: {p}" for p in differences(expect, result["actual"], ignore=ignore)]
    assert not problems, "\n".join(problems)
