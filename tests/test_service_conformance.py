"""The Python runner of the service conformance suite: every case in conformance/service/cases against `modelir serve`.

The same cases are replayed by the TypeScript, Go and Rust runners under clients/; the format and the comparison
rules are in conformance/README.md. `python tests/test_service_conformance.py --record [case ...]` rewrites the
named cases' `expect` (every case's, when none is named) from a live server (only when the reference model's output
changes on purpose; review the diff).
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
# An ignore path is dotted from the root of one answer (the response, each stream event, the accumulated response,
# the error), with no list indexes: strip the `expect` key (and a stream event's index), then every other index.
_ANSWER_ROOT = re.compile(r"^\$\.[^.\[]+(?:\[\d+\])?\.?")
_INDEX = re.compile(r"\[\d+\]")
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
    "retryInfo": error_details_pb2.RetryInfo,
}
# The keys a runner may put in an error answer besides `code`: an ignore path may name them even when the recorded
# answer lacks them (a deadline's status comes from the client's timer, with no details, or from the server's).
ERROR_KEYS = frozenset({"reason", *_DETAIL_TYPES})
# A call's deadline when the case sets none.
DEFAULT_DEADLINE_MS = 30_000
SERVERS = list(json.loads((SUITE / "servers.json").read_text()))


# ---- servers --------------------------------------------------------------------------------------------


def start_server(name: str, *, suite: Path = SUITE, binary: str | None = None) -> tuple[subprocess.Popen, str]:
    """`modelir serve` on a free 127.0.0.1 port, configured as `servers.json` says; returns it and its address.
    `suite` and `binary` name another release's suite and server (the cross-release tests)."""
    spec = json.loads((suite / "servers.json").read_text())[name]
    binary = binary or os.environ.get("MODELIR_BIN") or str(Path(sys.executable).with_name("modelir"))
    process = subprocess.Popen(
        [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--grace", "0", *spec["args"]],
        cwd=suite,
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


def external_addresses(environ: dict[str, str] | os._Environ[str]) -> dict[str, str] | None:
    """The servers to test instead of starting `modelir serve`: `MODELIR_CONFORMANCE_<NAME>=host:port` for each
    name of `servers.json` that the implementation under test serves; None when no address is given."""
    names = json.loads((SUITE / "servers.json").read_text())
    given = {name: environ.get(f"MODELIR_CONFORMANCE_{name.upper()}", "") for name in names}
    given = {name: address for name, address in given.items() if address}
    return given or None


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
    """Run one case; returns what happened in the shape of the case's `expect`. The case's optional keys (see
    conformance/README.md): `token`, `deadlineMs` (the call's deadline), `repeat` (make the call that many times,
    answer with the last) and `cancelAfterEvents` (cancel a stream from this side after that many events)."""
    request_type, streams = _RPCS[case["rpc"]]
    request = json_format.ParseDict(case["request"], request_type())
    method = getattr(service_pb2_grpc.ModelServiceStub(channel), case["rpc"])
    metadata = [("authorization", f"Bearer {case['token']}")] if "token" in case else None
    timeout = case.get("deadlineMs", DEFAULT_DEADLINE_MS) / 1000
    answer: dict[str, Any] = {}
    for _ in range(case.get("repeat", 1)):
        events: list[service_pb2.StreamGenerateResponse] = []
        try:
            if not streams:
                answer = {"response": _as_json(method(request, metadata=metadata, timeout=timeout))}
                continue
            stream = method(request, metadata=metadata, timeout=timeout)
            for event in stream:
                events.append(event)
                if len(events) == case.get("cancelAfterEvents"):
                    stream.cancel()  # the next read raises CANCELLED
            answer = {"stream": [_as_json(e) for e in events], "accumulated": _accumulate(events)}
        except grpc.RpcError as error:
            # A stream that fails after some events answers with them too.
            answer = {"stream": [_as_json(e) for e in events]} if events else {}
            answer["error"] = _error_json(error)
    return answer


def still_serving(channel: grpc.Channel) -> bool:
    """Whether the server answers a plain call: after a cancelled case, the next case must find it healthy."""
    stub = service_pb2_grpc.ModelServiceStub(channel)
    return bool(stub.GetServerInfo(service_pb2.GetServerInfoRequest(), timeout=10).ir_version)


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


def answer_path(where: str) -> str:
    """`$.stream[2].event.delta` -> `event.delta`: the form of the paths a case's `ignore` lists."""
    return _INDEX.sub("", _ANSWER_ROOT.sub("", where, count=1))


def differences(expected: Any, actual: Any, path: str = "$", ignore: frozenset[str] = frozenset()) -> Iterator[str]:
    """Where `actual` differs from `expected`, as JSON paths with both values."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in sorted(set(expected) | set(actual)):
            where = f"{path}.{key}"
            if key == "timing" or answer_path(where) in ignore:
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
    external = external_addresses(os.environ)
    started = {} if external else {name: start_server(name) for name in SERVERS}
    addresses = external or {name: address for name, (_, address) in started.items()}
    opened = {name: grpc.insecure_channel(address) for name, address in addresses.items()}
    yield opened
    for channel in opened.values():
        channel.close()
    for process, _ in started.values():
        stop_server(process)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_service_case(channels, path: Path):
    case = json.loads(path.read_text())
    if case["server"] not in channels:
        server = case["server"]
        pytest.skip(f"no address given for the {server!r} server (MODELIR_CONFORMANCE_{server.upper()})")
    actual = call(channels[case["server"]], case)
    problems = list(differences(case["expect"], actual, ignore=frozenset(case.get("ignore", []))))
    assert not problems, "\n".join(problems)
    if "cancelAfterEvents" in case:
        assert still_serving(channels[case["server"]])


def test_the_suite_covers_every_rpc_and_every_kind_of_rejection():
    cases = [json.loads(p.read_text()) for p in CASES]
    rpcs = {c["rpc"] for c in cases}
    assert rpcs == set(service_pb2.DESCRIPTOR.services_by_name["ModelService"].methods_by_name)
    errors = [c["expect"]["error"] for c in cases if "error" in c["expect"]]
    assert {e.get("reason") for e in errors} >= {
        "UNKNOWN_MODEL",
        "INVALID_REQUEST",
        "UNSUPPORTED_CAPABILITY",
        "UNAUTHENTICATED",
    }
    assert any(e.get("unsupportedCapabilities", {}).get("limitViolations") for e in errors)
    assert any(e.get("unsupportedCapabilities", {}).get("missing") for e in errors)
    assert any("stream" in c["expect"] for c in cases)
    # What a new implementation must also get right: soft errors, RetryInfo, deadlines and cancellation.
    assert any(c["expect"].get("response", {}).get("response", {}).get("errors") for c in cases)
    assert any("retryInfo" in e for e in errors)
    assert any(e["code"] == "DEADLINE_EXCEEDED" and "deadlineMs" in c for c, e in _with_errors(cases))
    assert any(e["code"] == "CANCELLED" and c["expect"].get("stream") for c, e in _with_errors(cases))


def _with_errors(cases: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    return ((c, c["expect"]["error"]) for c in cases if "error" in c["expect"])


def test_the_comparison_rules():
    assert not list(differences({"x": 0.1}, {"x": 0.10000000149011612}))  # float32 spelled as a double
    assert not list(differences({"x": "NaN"}, {"x": math.nan}))
    assert not list(differences({"x": "9007199254740993"}, {"x": 9007199254740993}))  # int64 beyond 2^53
    assert list(differences({"x": "9007199254740993"}, {"x": "9007199254740992"}))
    assert list(differences({"x": 0.1}, {"x": 0.1001}))
    assert list(differences({"x": [1, 2]}, {"x": [1]}))
    assert list(differences({"x": 1}, {}))
    assert not list(differences({"timing": 1}, {"timing": 2}))
    # Ignore paths start at each answer's root and name every item of a list.
    ignored = frozenset({"serverVersion", "event.delta.text"})
    versions = {"response": {"serverVersion": "1"}}, {"response": {"serverVersion": "2"}}
    assert not list(differences(*versions, ignore=ignored))
    stream = [{"event": {"delta": {"text": "a"}}}, {"event": {"delta": {"text": "b"}}}]
    assert not list(differences({"stream": stream}, {"stream": stream[::-1]}, ignore=ignored))
    assert list(differences({"response": {"irVersion": "1"}}, {"response": {"irVersion": "2"}}, ignore=ignored))
    assert answer_path("$.accumulated.choices[1].message.parts[0].text") == "choices.message.parts.text"


def test_every_ignore_path_names_a_value_of_the_expected_answer():
    """An ignore that matches nothing is dead (as `serverVersion` was while paths started at `expect`)."""

    def paths(value: Any, where: str) -> Iterator[str]:
        if isinstance(value, dict):
            for key, item in value.items():
                yield answer_path(f"{where}.{key}")
                yield from paths(item, f"{where}.{key}")
        elif isinstance(value, list):
            for i, item in enumerate(value):
                yield from paths(item, f"{where}[{i}]")

    for path in CASES:
        case = json.loads(path.read_text())
        present = set(paths(case["expect"], "$")) | (ERROR_KEYS if "error" in case["expect"] else set())
        assert set(case.get("ignore", [])) <= present, f"{path.name}: ignore paths that match nothing"


def test_external_servers_come_from_the_environment():
    assert external_addresses({}) is None
    assert external_addresses({"MODELIR_CONFORMANCE_OPEN": "127.0.0.1:50051"}) == {"open": "127.0.0.1:50051"}


# ---- recording ---------------------------------------------------------------------------------------------


def _without_timing(value: Any) -> Any:
    """Wall-clock timing is never compared, so it is not stored either."""
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k != "timing"}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value


def _record(names: list[str]) -> None:
    """Rewrite the `expect` of the named cases (file stems), or of every case when none is named."""
    started = {name: start_server(name) for name in SERVERS}
    try:
        for path in [p for p in CASES if not names or p.stem in names]:
            case = json.loads(path.read_text())
            with grpc.insecure_channel(started[case["server"]][1]) as channel:
                case["expect"] = _without_timing(call(channel, case))
            path.write_text(json.dumps(case, indent=2, ensure_ascii=False) + "\n")
            print(f"recorded {path.name}: {next(iter(case['expect']))}")
    finally:
        for process, _ in started.values():
            stop_server(process)


if __name__ == "__main__":
    if sys.argv[1:2] != ["--record"]:
        sys.exit(__doc__)
    _record(sys.argv[2:])
