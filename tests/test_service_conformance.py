"""The Python runner of the service conformance suite: every case in conformance/service/cases against `modelir serve`.

The same cases are replayed by the TypeScript, Go and Rust runners under clients/; the format and the comparison
rules are in conformance/README.md. `python tests/test_service_conformance.py --record` rewrites every case's
`expect` from a live server (only when the reference model's output changes on purpose; review the diff).
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from modelir.v1 import embedding_pb2, errors_pb2, service_pb2, service_pb2_grpc

SUITE = Path(__file__).resolve().parent.parent / "conformance" / "service"
CASES = sorted((SUITE / "cases").glob("*.json"))
_LISTENING = re.compile(r"modelir serving .* on [\d.]+:(\d+)")
# The request message of each RPC, and whether it streams.
_RPCS = {
    "Generate": (service_pb2.GenerateRequest, False),
    "StreamGenerate": (service_pb2.StreamGenerateRequest, True),
    "Tokenize": (service_pb2.TokenizeRequest, False),
    "Detokenize": (service_pb2.DetokenizeRequest, False),
    "ListModels": (service_pb2.ListModelsRequest, False),
    "Validate": (service_pb2.ValidateRequest, False),
    "GetServerInfo": (service_pb2.GetServerInfoRequest, False),
    "Embed": (embedding_pb2.EmbedRequest, False),
}
_DETAIL_TYPES = {
    "errorInfo": error_details_pb2.ErrorInfo,
    "badRequest": error_details_pb2.BadRequest,
    "unsupportedCapabilities": errors_pb2.UnsupportedCapabilities,
}


# ---- servers --------------------------------------------------------------------------------------------


def start_server(name: str) -> tuple[subprocess.Popen, str]:
    """`modelir serve` on a free 127.0.0.1 port, configured as `servers.json` says; returns it and its address."""
    spec = json.loads((SUITE / "servers.json").read_text())[name]
    binary = os.environ.get("MODELIR_BIN") or str(Path(sys.executable).with_name("modelir"))
    process = subprocess.Popen(
        [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--grace", "0", *spec["args"]],
        cwd=SUITE,
        env={**os.environ, **spec["env"]},
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        match = _LISTENING.search(line)
        if match:
            return process, f"127.0.0.1:{match.group(1)}"
    raise RuntimeError(f"modelir serve ({name}) exited before listening:\n{''.join(seen)}")


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


# ---- calling one case ------------------------------------------------------------------------------------


def _as_json(message) -> Any:
    return json_format.MessageToDict(message)


def _error_json(error: grpc.RpcError) -> dict[str, Any]:
    out: dict[str, Any] = {"code": error.code().name}
    status = rpc_status.from_call(error)
    for holder in status.details if status is not None else ():
        for key, cls in _DETAIL_TYPES.items():
            if holder.Is(cls.DESCRIPTOR):
                detail = cls()
                holder.Unpack(detail)
                out[key] = _as_json(detail)
    if "errorInfo" in out:
        out["reason"] = out["errorInfo"].get("reason", "")
    return out


def _accumulate(events: list[service_pb2.StreamGenerateResponse]) -> Any:
    from modelir import accumulate

    return _as_json(accumulate([e.event for e in events]))


def call(channel: grpc.Channel, case: dict[str, Any]) -> dict[str, Any]:
    """Run one case; returns what happened in the shape of the case's `expect`."""
    request_type, streams = _RPCS[case["rpc"]]
    request = json_format.ParseDict(case["request"], request_type())
    method = getattr(service_pb2_grpc.ModelServiceStub(channel), case["rpc"])
    metadata = [("authorization", f"Bearer {case['token']}")] if "token" in case else None
    try:
        if streams:
            events = list(method(request, metadata=metadata, timeout=30))
            return {"stream": [_as_json(e) for e in events], "accumulated": _accumulate(events)}
        return {"response": _as_json(method(request, metadata=metadata, timeout=30))}
    except grpc.RpcError as error:
        return {"error": _error_json(error)}


# ---- the comparison rules (conformance/README.md) --------------------------------------------------------

_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _number(value: Any) -> float | int | None:
    """A JSON number, or a string proto-JSON uses for one (int64 as decimal, NaN and infinities); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        if value in _FLOAT_WORDS:
            return _FLOAT_WORDS[value]
        if re.fullmatch(r"-?\d+", value):
            return int(value)
    return None


def _float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0] if math.isfinite(value) else value


def differences(expected: Any, actual: Any, path: str = "$", ignore: frozenset[str] = frozenset()) -> Iterator[str]:
    """Where `actual` differs from `expected`, as JSON paths with both values."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual)):
            where = f"{path}.{key}"
            if key == "timing" or where.removeprefix("$.") in ignore:
                continue
            if key not in actual:
                yield f"{where}: missing (expected {expected[key]!r})"
            elif key not in expected:
                yield f"{where}: unexpected {actual[key]!r}"
            else:
                yield from differences(expected[key], actual[key], where, ignore)
        return
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            yield f"{path}: {len(actual)} items, expected {len(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            yield from differences(e, a, f"{path}[{i}]", ignore)
        return
    if expected == actual:
        return
    e, a = _number(expected), _number(actual)
    if e is not None and a is not None:
        if isinstance(e, int) and isinstance(a, int):
            if e == a:
                return
        elif (math.isnan(e) and math.isnan(a)) or _float32(e) == _float32(a):
            return
    yield f"{path}: {actual!r}, expected {expected!r}"


# ---- the pytest runner -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def channels():
    started = {name: start_server(name) for name in ("open", "auth")}
    opened = {name: grpc.insecure_channel(address) for name, (_, address) in started.items()}
    yield opened
    for channel in opened.values():
        channel.close()
    for process, _ in started.values():
        stop_server(process)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_service_case(channels, path: Path):
    case = json.loads(path.read_text())
    actual = call(channels[case["server"]], case)
    problems = list(differences(case["expect"], actual, ignore=frozenset(case.get("ignore", []))))
    assert not problems, "\n".join(problems)


def test_the_suite_covers_every_rpc_and_every_kind_of_rejection():
    cases = [json.loads(p.read_text()) for p in CASES]
    rpcs = {c["rpc"] for c in cases}
    assert rpcs == set(service_pb2.DESCRIPTOR.services_by_name["ModelService"].methods_by_name)
    errors = [c["expect"]["error"] for c in cases if "error" in c["expect"]]
    assert {e["reason"] for e in errors} >= {
        "UNKNOWN_MODEL",
        "INVALID_REQUEST",
        "UNSUPPORTED_CAPABILITY",
        "UNAUTHENTICATED",
    }
    assert any(e.get("unsupportedCapabilities", {}).get("limitViolations") for e in errors)
    assert any(e.get("unsupportedCapabilities", {}).get("missing") for e in errors)
    assert any("stream" in c["expect"] for c in cases)


def test_the_comparison_rules():
    assert not list(differences({"x": 0.1}, {"x": 0.10000000149011612}))  # float32 spelled as a double
    assert not list(differences({"x": "NaN"}, {"x": math.nan}))
    assert not list(differences({"x": "9007199254740993"}, {"x": 9007199254740993}))  # int64 beyond 2^53
    assert list(differences({"x": "9007199254740993"}, {"x": "9007199254740992"}))
    assert list(differences({"x": 0.1}, {"x": 0.1001}))
    assert list(differences({"x": [1, 2]}, {"x": [1]}))
    assert list(differences({"x": 1}, {}))
    assert not list(differences({"timing": 1}, {"timing": 2}))
    assert not list(differences({"a": {"b": 1}}, {"a": {"b": 2}}, ignore=frozenset({"a.b"})))


# ---- recording ---------------------------------------------------------------------------------------------


def _without_timing(value: Any) -> Any:
    """Wall-clock timing is never compared, so it is not stored either."""
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k != "timing"}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def _record() -> None:
    started = {name: start_server(name) for name in ("open", "auth")}
    try:
        for path in CASES:
            case = json.loads(path.read_text())
            with grpc.insecure_channel(started[case["server"]][1]) as channel:
                case["expect"] = _without_timing(call(channel, case))
            path.write_text(json.dumps(case, indent=2, ensure_ascii=False) + "\n")
            print(f"recorded {path.name}: {next(iter(case['expect']))}")
    finally:
        for process, _ in started.values():
            stop_server(process)


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit(__doc__)
    _record()
