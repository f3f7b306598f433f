"""Each transport's capability manifest, shipped as data in conformance/manifests/<transport>.json, equals the code's.

The manifests let a runner in another language check fixture coverage (every claimed capability proven by a
positive fixture, every other one named by a negative fixture) without running Python. They are the manifests of
transports built with no options (`transport_options: {}`), and `<transport>@<option>.json` the manifest of one
built with an option that changes it (sglang's chat template adds CHAT, SYSTEM_MESSAGES, MULTI_TURN_TOKEN_INPUT):
a fixture whose `transport_options` set that option is checked against that one. When a transport's manifest
changes on purpose, `python tests/test_transport_manifests.py --record` rewrites the files (review the diff).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format
from modelir.transports import TRANSPORTS
from modelir.v1 import capabilities_pb2

CONFORMANCE = Path(__file__).resolve().parent.parent / "conformance"
MANIFESTS = CONFORMANCE / "manifests"
# Every transport that has golden fixtures has a manifest file.
WITH_FIXTURES = sorted(p.name for p in (CONFORMANCE / "fixtures").iterdir() if p.is_dir())
# The options that change a manifest, each with a value that sets it: `<transport>@<option>.json`.
WITH_OPTIONS = {"sglang@chat_template": {"chat_template": "{{ messages }}"}}


def _manifest_json(name: str) -> dict:
    transport = name.partition("@")[0]
    return json_format.MessageToDict(TRANSPORTS[transport](WITH_OPTIONS.get(name, {})).manifest())


@pytest.mark.parametrize("name", WITH_FIXTURES + sorted(WITH_OPTIONS))
def test_the_shipped_manifest_is_the_transports(name: str):
    path = MANIFESTS / f"{name}.json"
    assert path.exists(), f"{path} is missing: run `python tests/test_transport_manifests.py --record`"
    shipped = json.loads(path.read_text())
    json_format.ParseDict(shipped, capabilities_pb2.CapabilityManifest())  # it is a valid manifest
    assert shipped == _manifest_json(name), f"{path} is stale: run `python tests/test_transport_manifests.py --record`"


def test_no_manifest_without_a_transport():
    assert {p.stem for p in MANIFESTS.glob("*.json")} == set(WITH_FIXTURES) | set(WITH_OPTIONS)


def test_an_option_manifest_differs_from_the_plain_one():
    for name in WITH_OPTIONS:
        assert _manifest_json(name) != _manifest_json(name.partition("@")[0]), f"{name} changes nothing"


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(__doc__)
    MANIFESTS.mkdir(exist_ok=True)
    for transport in WITH_FIXTURES + sorted(WITH_OPTIONS):
        (MANIFESTS / f"{transport}.json").write_text(json.dumps(_manifest_json(transport), indent=2) + "\n")
        print(f"recorded {transport}")
