"""The native logprob fast path (`native/`, `modelir.logprobs.native`)
gives the same IR as the Python builders, byte for byte.

Every lift here runs twice, with `MODELIR_NATIVE=0` (the Python reference) and with the fast path, and the two
outcomes must be equal: the deterministic serialization of the `Response`, or the same exception with the same
message (a body the native path declines goes to the Python path whole, which raises the typed error). The bodies
are every unary conformance fixture of the OpenAI-shaped transports, the real recordings in ../shared/wire (when
present), hand-made edge cases (-inf and vLLM's -9999.0 clamp, partial UTF-8 bytes, missing `bytes`, duplicate
alternatives, `token_id:N` spellings, odd numbers) and seeded fuzzed bodies. Tests that need the extension skip
only when it was not built (`make native`, part of `make venv` and `make test`).
"""

from __future__ import annotations

import copy
import logging
import math
import os
import random
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import orjson
import pytest
from modelir import build_request
from modelir.conformance.runner import request_that_runs
from modelir.logprobs import native
from modelir.registry import build_transport
from modelir.transports.base import HttpResponse
from modelir.v1 import request_pb2

from tests.fuzz import mutate
from tests.recordings import WIRE

FIXTURES = Path(__file__).resolve().parents[1] / "conformance" / "fixtures"
# The transports whose lifts have a native fast path (llama.cpp's chat is the OpenAI chat lift).
NATIVE_TRANSPORTS = ("openai_chat", "openai_completions", "openai_responses", "vllm", "llamacpp")

needs_native = pytest.mark.skipif(native._ext is None, reason="the native extension is not built (make native)")


@pytest.fixture(autouse=True)
def _every_body_native(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bodies here are small; the fast path takes only large ones unless told otherwise."""
    monkeypatch.setattr(native, "MIN_BODY_BYTES", 0)


@contextmanager
def _mode(on: bool) -> Iterator[None]:
    with mock.patch.dict(os.environ, {"MODELIR_NATIVE": "1" if on else "0"}):
        yield


def _outcome(transport: Any, request: request_pb2.Request, body: bytes, *, on: bool) -> tuple:
    with _mode(on):
        try:
            response = transport.lift(request, HttpResponse(200, {}, body))
        except Exception as exc:  # the Python path's own error, typed or not: both sides must raise the same
            return ("error", type(exc).__name__, str(exc))
    return ("ok", response.SerializeToString(deterministic=True))


class _Taken:
    """Counts what the extension answered (built columns, empty, absent) and declined, per call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: Counter[str] = Counter()
        ext = native._ext
        for name in ("chat_choice_logprobs", "entries_logprobs", "completion_logprobs"):
            monkeypatch.setattr(native._ext, name, self._wrap(getattr(ext, name)))

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            try:
                result = fn(*args, **kwargs)
            except native.Unsupported:
                self.counts["declined"] += 1
                raise
            sections = [s[2] for s in result if s] if isinstance(result, list) else [result]
            for section in sections:
                self.counts["built" if section else "empty" if section is not None else "absent"] += 1
            return result

        return counted


def _same(transport: Any, request: request_pb2.Request, body: bytes) -> tuple:
    reference = _outcome(transport, request, body, on=False)
    fast = _outcome(transport, request, body, on=True)
    assert fast == reference
    return reference


# ---- every fixture and recording --------------------------------------------------------------------------


def _fixtures() -> list[Path]:
    out = []
    for path in sorted(FIXTURES.glob("*/*.json")):
        fixture = orjson.loads(path.read_bytes())
        if (
            path.parent.name in NATIVE_TRANSPORTS
            and "http_response" in fixture
            and fixture.get("mode") != "stream"
            and fixture.get("operation") != "embed"  # the embedding lifts have no native fast path
        ):
            out.append(path)
    return out


@needs_native
@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_fixture_lifts_the_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = orjson.loads(path.read_bytes())
    transport = build_transport(path.parent.name, fixture.get("transport_options", {}))
    request = request_that_runs(fixture)
    answer = fixture["http_response"]
    body = answer["body_text"].encode() if "body_text" in answer else orjson.dumps(answer.get("body"))
    taken = _Taken(monkeypatch)
    _same(transport, request, body)
    if b'"logprobs":{' in body or b'"logprobs":[{' in body:
        if not request.HasField("input_scoring"):  # echo scoring stays on the Python path
            assert taken.counts["built"] and not taken.counts["declined"], taken.counts


def _recorded_bodies() -> list[tuple[str, Path]]:
    """Recorded unary bodies with logprobs, by the wire their `object` names."""
    wires = {"chat.completion": "openai_chat", "text_completion": "openai_completions", "response": "openai_responses"}
    out = []
    for path in sorted(WIRE.glob("**/*.json")) if WIRE.is_dir() else ():
        try:
            body = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError:
            continue
        if isinstance(body, dict) and body.get("object") in wires and b"logprobs" in path.read_bytes():
            out.append((wires[body["object"]], path))
    return out


@needs_native
def test_recorded_bodies_lift_the_same() -> None:
    cases = _recorded_bodies()
    if not cases:
        pytest.skip(f"no recordings with logprobs under {WIRE}")
    for wire, path in cases:
        kind = {"messages": [("user", "Hi")]} if wire != "openai_completions" else {"prompt": "Hi"}
        request = build_request("m", top_logprobs=5, **kind)  # type: ignore[arg-type]
        _same(build_transport(wire, {"provider_model": "m"}), request, path.read_bytes())


# ---- edge cases, one by one -------------------------------------------------------------------------------


def _entry(token: str, logprob: float, tops: list | None = None, **extra: Any) -> dict:
    out: dict[str, Any] = {"token": token, "logprob": logprob, "bytes": list(token.encode()), **extra}
    if tops is not None:
        out["top_logprobs"] = tops
    return out


def _chat(content: Any, **choice: Any) -> bytes:
    body = {
        "id": "c",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop", **choice}],
    }
    if content is not ...:
        body["choices"][0]["logprobs"] = {"content": content, "refusal": None}
    return orjson.dumps(body)


def _completion(logprobs: Any) -> bytes:
    return orjson.dumps(
        {"id": "c", "model": "m", "choices": [{"index": 0, "text": "x", "logprobs": logprobs, "finish_reason": "stop"}]}
    )


def _responses(logprobs: Any) -> bytes:
    part = {"type": "output_text", "text": "x", "annotations": [], "logprobs": logprobs}
    item = {"type": "message", "id": "m1", "role": "assistant", "content": [part]}
    return orjson.dumps({"id": "r", "model": "m", "status": "completed", "output": [item]})


def _float32_midpoints() -> list[str]:
    """Shortest reprs of f64 values exactly halfway between two float32s, and of their f64 neighbours: a parser
    one f64 ulp off rounds these to another float32 (the lift stores float32), so they test the f64 rounding."""
    rng = random.Random(37)
    out = []
    for _ in range(300):
        low = struct.unpack("<f", struct.pack("<I", rng.randrange(0x3000_0000, 0x4200_0000)))[0]
        high = struct.unpack("<f", struct.pack("<I", struct.unpack("<I", struct.pack("<f", low))[0] + 1))[0]
        middle = (low + high) / 2
        out += [repr(-v) for v in (middle, math.nextafter(middle, 0), math.nextafter(middle, math.inf))]
    return out


def _float32_neighbours() -> list[str]:
    """Shortest reprs of the f64 values next to float32 values (the clamp -9999.0 among them), 17 digits long: where
    an f64 a few ulps off would round to, or compare with, a float32 differently (`decimal::near_f64` must not take
    them)."""
    rng = random.Random(38)
    values = [-9999.0, -1.0, -0.5, -1.1754943508222875e-38]
    for _ in range(100):
        values.append(struct.unpack("<f", struct.pack("<I", rng.randrange(0x3000_0000, 0x4200_0000)))[0])
    out = []
    for v in values:
        v = -abs(v)
        out += [
            repr(math.nextafter(v, 0)),
            repr(math.nextafter(v, -math.inf)),
            repr(math.nextafter(v, 0) * (1 + 2**-50)),
        ]
    # 19 digits whose f64 one rounding of the mantissa and one of the quotient would put at the clamp itself.
    return [*out, "-9998.999999999999065", "-9999.000000000000956"]


CHAT = build_request("m", messages=[("user", "Hi")], top_logprobs=2)
PROMPT = build_request("m", prompt="Hi", top_logprobs=2)
SPLIT_EURO = [  # "€" is e2 82 ac: split across two tokens, each spelled with the replacement character
    {"token": "\\xe2\\x82", "logprob": -0.5, "bytes": [0xE2, 0x82], "top_logprobs": []},
    {"token": "\\xac", "logprob": -0.25, "bytes": [0xAC], "top_logprobs": []},
]


class Case:
    """A chat-shaped logprob section: `content` (... for no `logprobs` key), extra choice keys, a byte-level
    patch (for what JSON writers cannot write), and whether the native path must take it rather than decline."""

    def __init__(self, name: str, content: Any, takes: bool, patch: tuple[bytes, bytes] = (b"", b""), **choice):
        self.name, self.content, self.takes, self.patch, self.choice = name, content, takes, patch, choice

    def _patched(self, body: bytes) -> bytes:
        return body.replace(*self.patch, 1) if self.patch[0] else body

    def chat(self) -> bytes:
        return self._patched(_chat(self.content, **self.choice))

    def responses(self) -> bytes | None:
        """The same entries as the Responses API's output_text.logprobs (None: a choice-level case)."""
        if self.content is ... or self.choice:
            return None
        return self._patched(_responses(self.content))


CHAT_CASES = [
    Case("plain", [_entry("a", -1.0, [_entry("a", -1.0), _entry("b", -2.0)])], True),
    Case("partial UTF-8 bytes", SPLIT_EURO, True),
    Case("missing bytes", [{"token": "é", "logprob": -1.0, "top_logprobs": [{"token": "ü", "logprob": -2.0}]}], True),
    Case("null bytes", [{"token": "é", "logprob": -1.0, "bytes": None}], True),
    Case("empty bytes", [{"token": "é", "logprob": -1.0, "bytes": []}], True),
    Case("duplicate top strings", [_entry("a", -1.0, [_entry("a", -1.0), _entry("a", -1.5)])], True),
    Case("clamp -9999.0", [_entry("a", -9999.0, [_entry("a", -9999.0), _entry("b", -10000.5)])], True),
    Case("just above the clamp", [_entry("a", -9998.9999999, [_entry("b", -9998.99999999999)])], True),
    Case("integer logprobs", [_entry("a", -1.0), _entry("b", -2.5)], True, (b"-1.0", b"-3")),
    Case("negative zero", [_entry("a", -0.0)], True),
    Case("negative zero integer", [_entry("a", -1.0)], True, (b"-1.0", b"-0")),
    Case("exponents", [_entry("a", -1.0), _entry("b", -2.0)], True, (b"-1.0", b'-1E-3,"x":-0e0')),
    Case("out of range", [_entry("a", -1.0)], False, (b"-1.0", b"-1e400")),
    Case("beyond float32", [_entry("a", -1e39)], False),
    Case("just past float32's largest", [_entry("a", -3.4028235677973366e38)], False),
    Case("float32 subnormal", [_entry("a", -1e-40), _entry("b", -1.4e-45), _entry("c", -1e-50)], True),
    Case("17 digits", [_entry("a", -0.12345678901234568), _entry("b", -2.2250738585072014e-308)], True),
    Case("escapes", [_entry('\n\t"\\', -1.0), _entry("\u00e9\U0001f600", -2.0)], True),
    Case("ids (llama.cpp)", [_entry("a", -1.0, [_entry("a", -1.0, id=5)], id=5), _entry("b", -1.0, [], id=-7)], True),
    Case("ids on the first only", [_entry("a", -1.0, id=5), _entry("b", -1.0)], False),
    Case("ids after the first only", [_entry("a", -1.0), _entry("b", -1.0, id=6)], True),
    Case("id beyond int32", [_entry("a", -1.0, id=2**31)], False),
    Case("tops absent on the first", [_entry("a", -1.0), _entry("b", -1.0, [_entry("c", -3.0)])], True),
    Case("tops null on the first", [_entry("a", -1.0, None, top_logprobs=None), _entry("b", -1.0, [])], True),
    Case("tops empty everywhere", [_entry("a", -1.0, []), _entry("b", -1.0, [])], True),
    Case("no tops at all", [_entry("a", -1.0), _entry("b", -1.0)], True),
    Case("content empty", [], True),
    Case("content null", None, True),
    Case("logprobs absent", ..., True),
    Case("logprobs null", ..., True, logprobs=None),
    Case("logprobs empty object", ..., True, logprobs={}),
    Case("logprobs a list", ..., False, logprobs=[[_entry("a", -1.0)]]),
    Case("entry a list", [["a", -1.0, [97], None, None]], False),
    Case("top a list", [_entry("a", -1.0, [["a", -1.0, [97], None]])], False),
    Case("token not a string", [_entry("a", -1.0) | {"token": 5}], False),
    Case("logprob null", [_entry("a", -1.0) | {"logprob": None}], False),
    Case("logprob a string", [_entry("a", -1.0) | {"logprob": "-1"}], False),
    Case("logprob true", [_entry("a", -1.0) | {"logprob": True}], False),
    Case("byte past 255", [_entry("a", -1.0) | {"bytes": [256]}], False),
    Case("byte negative", [_entry("a", -1.0) | {"bytes": [-1]}], False),
    Case("missing token", [{"logprob": -1.0}], False),
    Case("missing logprob", [{"token": "a"}], False),
    Case("repeated key", [{"token": "a", "logprob": -1.0}], False, (b'"logprob":-1.0', b'"logprob":-1.0,"logprob":-2')),
    Case("lone surrogate", [_entry("a", -1.0)], False, (b'"token":"a"', b'"token":"\\ud800"')),
    Case("unknown keys", [_entry("a", -1.0, [_entry("b", -2.0, extra=[1, {"x": None}])], extra={"y": [1.5]})], True),
    Case(
        "second choice",
        [_entry("a", -1.0)],
        True,
        (
            b'"finish_reason":"stop"}]',
            b'"finish_reason":"stop"},'
            b'{"index":1,"logprobs":null},{"index":2,"logprobs":{"content":[{"token":"c","logprob":-3}]}}]',
        ),
    ),
]


def _entries_text(values: list[str], tokens: list[str] | None = None, extra: str = "", key: str = '"token"') -> str:
    """Chat-shaped entries (each with two alternatives) whose logprobs and tokens are the given JSON literals, as
    written: number forms and escapes that `orjson.dumps` would never produce."""
    tokens = tokens or [f'"t{i}"' for i in range(len(values))]
    return (
        "["
        + ",".join(
            f'{{{key}:{t},"logprob":{v},"bytes":null,"top_logprobs":[{{"token":{t},"logprob":{v}}},'
            f'{{"token":"b{i}","logprob":{v},"bytes":[98]}}]{extra}}}'
            for i, (t, v) in enumerate(zip(tokens, values, strict=True))
        )
        + "]"
    )


def _literal(name: str, text: str, takes: bool) -> Case:
    """A case whose entries are the given JSON text, patched in whole."""
    return Case(name, "__entries__", takes, (b'"__entries__"', text.encode()))


# The hand-written reader (native/src/chat.rs over json.rs): number forms, rounding, escapes, keys, byte lists, ids,
# and what it must decline.
CHAT_CASES += [
    _literal(
        "number forms",
        _entries_text(
            "-1 -0 0 -0.0 -0.000 -1e2 -1E+2 -1.5e-3 -0.00012345678901234567 -12345678901234567890.5 "
            "-3.4553023145678907 -9007199254740993 -123.456e-5 -1e-30 -2.5e-45 -0.1e1 -123456789012345678901234567890 "
            "-0.1000000000000000055511151231257827021181583404541015625 "
            "-1.00000000000000011102230246251565404236316680908203125 "
            "-1.00000000000000011102230246251565404236316680908203126 "
            "-4.9e-324 -2.2250738585072011e-308 -1e-320 -0.0000000000000000000000000000001e1".split()
        ),
        True,
    ),
    _literal("float32 midpoints", _entries_text(_float32_midpoints()), True),
    _literal("float32 neighbours", _entries_text(_float32_neighbours()), True),
    _literal("a leading zero", _entries_text(["-01"]), False),
    _literal("a bare minus", _entries_text(["-"]), False),
    _literal("a fraction without digits", _entries_text(["-1."]), False),
    _literal("beyond f64", _entries_text(["-1e400"]), False),
    _literal("1e308", _entries_text(["1e308"]), False),
    _literal("-1e308", _entries_text(["-1e308"]), False),
    _literal(
        "escaped tokens", _entries_text(["-1", "-2", "-3"], [r'"\ud83d\ude00"', r'"\u00E9\/\b"', r'"a\u0000"']), True
    ),
    _literal("a lone surrogate token", _entries_text(["-1"], [r'"\ud800"']), False),
    _literal("a lone low surrogate token", _entries_text(["-1"], [r'"\udc00x"']), False),
    _literal("an unknown escape", _entries_text(["-1"], [r'"\x"']), False),
    _literal("a raw control character", _entries_text(["-1"], ['"a\tb"']), False),
    _literal("escaped key", _entries_text(["-1", "-2"], key=r'"tok\u0065n"'), True),
    _literal("escaped unknown key", _entries_text(["-1"], extra=r',"\u00e9\n":[1]'), True),
    _literal("a lone surrogate key", _entries_text(["-1"], extra=r',"\ud800":1'), False),
    _literal("nested extra key", _entries_text(["-1"], extra=',"x":[[{"y":[1,"z",null,true,false,-0.5e1]}]]'), True),
    _literal("deep extra key", _entries_text(["-1"], extra=',"x":' + "[" * 200 + "]" * 200), False),
    _literal("trailing comma", _entries_text(["-1"], extra=","), False),
    _literal("whitespace", _entries_text(["-1", "-2"]).replace(":", " :\n\t ").replace(",", " ,\r\n "), True),
    _literal("bytes spaced", _entries_text(["-1"]).replace("[98]", "[ 98 , 0 ,255 ]"), True),
    _literal("bytes a float", _entries_text(["-1"]).replace("[98]", "[98.0]"), False),
    _literal("bytes a leading zero", _entries_text(["-1"]).replace("[98]", "[098]"), False),
    _literal("bytes minus zero", _entries_text(["-1"]).replace("[98]", "[-0]"), False),
    _literal("bytes a string", _entries_text(["-1"]).replace("[98]", '"b"'), False),
    _literal(
        "ids at the bounds",
        _entries_text(["-1", "-2", "-3"], extra=',"id":2147483647').replace('"id":2147483647}]', '"id":-2147483648}]'),
        True,
    ),
    _literal("id minus zero", _entries_text(["-1"], extra=',"id":-0'), True),
    _literal("id a float", _entries_text(["-1"], extra=',"id":5.0'), False),
    _literal("id an exponent", _entries_text(["-1"], extra=',"id":1e2'), False),
    _literal("id below int32", _entries_text(["-1"], extra=',"id":-2147483649'), False),
    _literal("id a string", _entries_text(["-1"], extra=',"id":"5"'), False),
    _literal(
        "a repeated bytes key", _entries_text(["-1"]).replace('"bytes":null', '"bytes":null,"bytes":[1]', 1), False
    ),
    _literal("a repeated tops key", _entries_text(["-1"], extra=',"top_logprobs":[]'), False),
    _literal(
        "tops on an alternative", _entries_text(["-1"]).replace('"bytes":[98]', '"bytes":[98],"top_logprobs":7'), True
    ),
    _literal("an empty entry", "[{}]", False),
    _literal("entries not a list", '{"token":"a","logprob":-1}', False),
    _literal("trailing bytes", _entries_text(["-1"]) + " 5", False),
]


def _assert_case(transport: Any, request: request_pb2.Request, body: bytes, takes: bool, taken: _Taken) -> None:
    taken.counts.clear()
    _same(transport, request, body)
    if takes:
        assert not taken.counts["declined"], taken.counts
    else:  # declined by the extension, or refused by msgspec before it (the Python path is the reference)
        assert not taken.counts["built"], f"expected the native path not to build this body: {taken.counts}"


@needs_native
@pytest.mark.parametrize("transport_name", ["openai_chat", "vllm", "llamacpp"])
@pytest.mark.parametrize("case", CHAT_CASES, ids=[c.name for c in CHAT_CASES])
def test_chat_edge_cases(transport_name: str, case: Case, monkeypatch) -> None:
    transport = build_transport(transport_name, {"provider_model": "m"})
    _assert_case(transport, CHAT, case.chat(), case.takes, _Taken(monkeypatch))


@needs_native
@pytest.mark.parametrize("case", CHAT_CASES, ids=[c.name for c in CHAT_CASES])
def test_responses_edge_cases(case: Case, monkeypatch) -> None:
    body = case.responses()
    if body is None or case.name == "second choice":
        pytest.skip("a choice-level case: the Responses API carries the entries on output text")
    transport = build_transport("openai_responses", {"provider_model": "m"})
    _assert_case(transport, CHAT, body, case.takes, _Taken(monkeypatch))


def _arrays(tokens: list[str], values: list[Any], tops: Any = ..., **extra: Any) -> dict:
    out: dict[str, Any] = {"tokens": tokens, "token_logprobs": values, "text_offset": list(range(len(tokens)))}
    if tops is not ...:
        out["top_logprobs"] = tops
    return out | extra


def _literals(values: list[str], tokens: str = "", extra: str = "") -> bytes:
    """A completions body whose logprobs (and alternatives) are the given JSON literals, as written: number forms
    and escapes that `orjson.dumps` would never produce."""
    tokens = tokens or ",".join(f'"t{i}"' for i in range(len(values)))
    tops = ",".join(f'{{"a":{v},"b{i}":{v}}}' for i, v in enumerate(values))
    section = f'{{"tokens":[{tokens}],"token_logprobs":[{",".join(values)}],"top_logprobs":[{tops}]{extra}}}'
    return b'{"id":"c","model":"m","choices":[{"index":0,"text":"x","logprobs":' + section.encode() + b"}]}"


COMPLETION_CASES: list[tuple[str, bytes, bool]] = [
    ("plain", _completion(_arrays(["a", "b"], [-1.0, -2.0], [{"a": -1.0, "c": -3.0}, {"b": -2.0}])), True),
    ("null logprob", _completion(_arrays(["a", "b"], [None, -2.0], [None, {"b": None}])), True),
    (
        "clamp -9999.0",
        _completion(_arrays(["a", "b"], [-9999.0, -2.0], [{"a": -9999.0, "x": -12000}, {"b": -2}])),
        True,
    ),
    ("just above the clamp", _completion(_arrays(["a"], [-9998.9999999], [{"a": -9998.99999999999}])), True),
    ("negative zero", _completion(_arrays(["a", "b"], [-0.0, -1.0], [{"a": -0.0}, {"b": -1.0}])), True),
    ("negative zero integer", _completion(_arrays(["a"], [-1.0], [{"a": -1.0}])).replace(b"-1.0", b"-0"), True),
    ("big integer", _completion(_arrays(["a"], [-1.0])).replace(b"-1.0", b"-123456789012345678901234567890"), True),
    ("beyond float32", _completion(_arrays(["a"], [-1e39])), "vllm-takes"),  # vLLM reads it as -inf first
    ("no tops", _completion(_arrays(["a"], [-1.0])), True),
    ("tops null", _completion(_arrays(["a"], [-1.0], None)), True),
    ("tops empty list", _completion(_arrays(["a"], [-1.0], [])), True),
    ("tops all empty", _completion(_arrays(["a", "b"], [-1.0, -2.0], [{}, None])), True),
    ("tops of another length", _completion(_arrays(["a", "b"], [-1.0, -2.0], [{"a": -1.0}])), False),
    ("values of another length", _completion(_arrays(["a", "b"], [-1.0])), False),
    ("values missing", _completion({"tokens": ["a"]}), False),
    ("tokens empty", _completion(_arrays([], [])), True),
    ("tokens null", _completion({"tokens": None, "token_logprobs": None}), True),
    ("logprobs null", _completion(None), True),
    ("logprobs empty", _completion({}), True),
    ("logprobs a list", _completion([["a"], [-1.0]]), False),
    ("token not a string", _completion(_arrays([5], [-1.0])), False),  # type: ignore[list-item]
    ("top value a string", _completion(_arrays(["a"], [-1.0], [{"a": "x"}])), False),
    (
        "duplicate top key",
        _completion(_arrays(["a"], [-1.0], [{"a": -1.0}])).replace(b'{"a":-1.0}', b'{"a":-1.0,"a":-2.0}'),
        False,
    ),
    (
        "token ids",
        _completion(
            _arrays(
                ["token_id:5", "token_id:0007"],
                [-1.0, -2.0],
                [{"token_id:5": -1.0, "token_id:-3": -4.0}, {"token_id:7": -2.0}],
            )
        ),
        True,
    ),
    (
        "token ids, one not",
        _completion(_arrays(["token_id:5", "b"], [-1.0, -2.0], [{"token_id:5": -1.0}, {"b": -2.0}])),
        True,
    ),
    ("token ids, first not", _completion(_arrays(["a", "token_id:5"], [-1.0, -2.0])), True),
    ("token id with a plus", _completion(_arrays(["token_id:+5"], [-1.0])), "vllm-declines"),
    ("token id with spaces", _completion(_arrays(["token_id: 5 "], [-1.0])), "vllm-declines"),
    ("token id not a number", _completion(_arrays(["token_id:x"], [-1.0])), "vllm-declines"),
    ("token id beyond int32", _completion(_arrays(["token_id:99999999999"], [-1.0])), "vllm-declines"),
    (
        "escapes",
        _completion(_arrays(["\n", "\u00e9\U0001f600"], [-1.0, -2.0], [{"\t": -1.0, "\\": -1.5}, {'"': -2.0}])),
        True,
    ),
    (
        "repeated logprobs key",
        _completion(_arrays(["a"], [-1.0])).replace(b'"logprobs":', b'"logprobs":null,"logprobs":'),
        False,
    ),
    ("choices not a list", orjson.dumps({"id": "c", "choices": {"0": {"logprobs": None}}}), False),
    ("choice not an object", orjson.dumps({"id": "c", "choices": [5]}), False),
    ("not JSON", b'{"choices": [', False),
    ("not an object", b"[1, 2]", False),
    (
        "two choices",
        orjson.dumps(
            {
                "id": "c",
                "choices": [
                    {"index": 0, "text": "a", "logprobs": _arrays(["a"], [-1.0], [{"a": -1.0}])},
                    {"index": 1, "text": "b"},
                    {"index": 2, "text": "c", "logprobs": None},
                    {"index": 3, "text": "d", "logprobs": _arrays(["d"], [-4.0], [{"e": -5.0}])},
                ],
            }
        ),
        True,
    ),
    # The hand-written reader (native/src/json.rs): number forms, rounding, escapes, what it must decline.
    (
        "number forms",
        _literals(
            "-1 -0 0 -0.0 -0.000 -1e2 -1E+2 -1.5e-3 -0.00012345678901234567 -12345678901234567890.5 "
            "-3.4553023145678907 -9007199254740993 -123.456e-5 -1e-30 -2.5e-45 -0.1e1".split()
        ),
        True,
    ),
    ("float32 midpoints", _literals(_float32_midpoints()), True),
    ("float32 neighbours", _literals(_float32_neighbours()), True),
    ("a leading zero", _literals(["-01"]), False),
    ("a bare minus", _literals(["-"]), False),
    ("a fraction without digits", _literals(["-1."]), False),
    ("beyond f64", _literals(["-1e400"]), False),
    ("true for a logprob", _literals(["true"]), False),
    ("escaped tokens", _literals(["-1", "-2", "-3"], r'"\ud83d\ude00","\u00E9\/\b","a\u0000"'), True),
    ("a lone surrogate", _literals(["-1"], r'"\ud800"'), False),
    ("a lone low surrogate", _literals(["-1"], r'"\udc00x"'), False),
    ("an unknown escape", _literals(["-1"], r'"\x"'), False),
    ("a raw control character", _literals(["-1"], '"a\tb"'), False),
    ("not UTF-8", _literals(["-1"]).replace(b'"t0"', b'"t\xff"'), False),
    ("nested extra key", _literals(["-1"], extra=',"x":[[{"y":[1,"z",null,true]}]]'), True),
    ("deep extra key", _literals(["-1"], extra=',"x":' + "[" * 200 + "]" * 200), False),
    ("trailing comma", _literals(["-1"], extra=","), False),
    ("escaped outer key", _literals(["-1"]).replace(b'"choices"', b'"ch\\u006fices"'), False),
    ("escaped logprobs key", _literals(["-1"]).replace(b'"logprobs"', b'"l\\u006fgprobs"'), False),
    ("whitespace", _literals(["-1"]).replace(b":", b" :\n\t ").replace(b",", b" ,\r\n"), True),
]


@needs_native
@pytest.mark.parametrize("transport_name", ["openai_completions", "vllm"])
@pytest.mark.parametrize(("name", "body", "takes"), COMPLETION_CASES, ids=[c[0] for c in COMPLETION_CASES])
def test_completion_edge_cases(transport_name: str, name: str, body: bytes, takes: Any, monkeypatch) -> None:
    transport = build_transport(transport_name, {"provider_model": "m"})
    if takes == "vllm-declines":
        takes = transport_name != "vllm"  # only vLLM reads token_id spellings
    elif takes == "vllm-takes":
        takes = transport_name == "vllm"
    _assert_case(transport, PROMPT, body, takes, _Taken(monkeypatch))


@needs_native
def test_logprobs_not_asked_for_are_not_lifted(monkeypatch: pytest.MonkeyPatch) -> None:
    body = COMPLETION_CASES[0][1]
    for name in ("openai_completions", "vllm"):
        assert _same(build_transport(name, {"provider_model": "m"}), build_request("m", prompt="Hi"), body)[0] == "ok"


@needs_native
def test_responses_with_several_output_texts(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = [
        {"type": "output_text", "text": "a\xe2", "logprobs": [_entry("a", -1.0, [_entry("b", -2.0)]), SPLIT_EURO[0]]},
        {"type": "refusal", "refusal": "no"},
        {"type": "output_text", "text": "x", "logprobs": []},
        {"type": "output_text", "text": "\xac", "logprobs": [SPLIT_EURO[1]]},
    ]
    item = {"type": "message", "id": "m1", "role": "assistant", "content": parts}
    body = orjson.dumps({"id": "r", "model": "m", "status": "completed", "output": [item]})
    taken = _Taken(monkeypatch)
    _same(build_transport("openai_responses", {"provider_model": "m"}), CHAT, body)
    assert taken.counts == Counter(built=2, empty=1), taken.counts


@needs_native
def test_vllm_clamp_reads_back_as_minus_infinity() -> None:
    transport = build_transport("vllm", {"provider_model": "m"})
    body = _completion(_arrays(["a", "b"], [-9999.0, -2.0], [{"a": -9999.0}, {"b": -2.0}]))
    with _mode(True):
        logprobs = transport.lift(PROMPT, HttpResponse(200, {}, body)).choices[0].logprobs
    assert logprobs.token_logprobs[0] == -math.inf and logprobs.top_logprobs[0] == -math.inf
    assert list(logprobs.token_ids) == []


@needs_native
def test_vllm_chat_clamp_is_read_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    """The native builder reads vLLM chat's -9999.0 as -inf itself: no Python pass over the float columns."""
    from modelir.transports.vllm import chat as vllm_chat

    def no_pass(logprobs: Any) -> None:
        raise AssertionError("the Python unclamp pass ran over natively built columns")

    monkeypatch.setattr(vllm_chat, "_unclamp_columns", no_pass)
    body = _chat([_entry("a", -9999.0, [_entry("a", -9999.0), _entry("b", -2.0)]), _entry("b", -9998.9999999)])
    with _mode(True):
        logprobs = build_transport("vllm", {"provider_model": "m"}).lift(CHAT, HttpResponse(200, {}, body))
    lp = logprobs.choices[0].logprobs
    assert list(lp.token_logprobs) == [-math.inf, -math.inf] and list(lp.top_logprobs) == [-math.inf, -2.0]


@needs_native
def test_partial_utf8_bytes_survive() -> None:
    transport = build_transport("openai_chat", {"provider_model": "m"})
    with _mode(True):
        logprobs = transport.lift(CHAT, HttpResponse(200, {}, _chat(SPLIT_EURO))).choices[0].logprobs
    assert logprobs.token_bytes == "€".encode() and list(logprobs.token_byte_offsets) == [0, 2]


# ---- fuzzed bodies ----------------------------------------------------------------------------------------

ODD_LOGPROBS = (-9999.0, -9999.5, -10000, -0.0, 0, -1, 1e39, -1e-45, 3.4028235677973366e38, 2**63, None, "x", True)
ODD_TOKENS = ("", "token_id:1", "token_id:-2", "token_id:+3", "token_id:4_0", "\ud83d", "\u00e9", "a", "a", 7, None)


def _mutate_section(rng: random.Random, body: Any) -> Any:
    """One targeted change inside a logprob section: a value, a token, `bytes`, a duplicate, a key dropped."""
    body = copy.deepcopy(body)
    paths = [p for p in mutate._paths(body) if "logprobs" in p]
    if not paths:
        return mutate.mutate_json(rng, body)
    path = rng.choice(paths)
    roll = rng.random()
    if roll < 0.3:
        new: Any = rng.choice(ODD_LOGPROBS)
    elif roll < 0.55:
        new = rng.choice(ODD_TOKENS)
    elif roll < 0.7:
        new = rng.choice(([0xE2, 0x82], [], None, [256], [0xFF]))
    elif roll < 0.85:
        parent = mutate._get(body, path[:-1])
        if isinstance(parent, list) and parent:
            return mutate._set(body, path[:-1], [*parent, copy.deepcopy(rng.choice(parent))])  # a duplicate
        new = rng.choice(mutate.ODD_VALUES)
    else:
        parent = mutate._get(body, path[:-1])
        if isinstance(parent, dict) and path[-1] in parent:
            parent = {k: v for k, v in parent.items() if k != path[-1]}  # a key dropped
            return mutate._set(body, path[:-1], parent)
        new = rng.choice(mutate.ODD_VALUES)
    return mutate._set(body, path, new)


def _seed_bodies() -> list[tuple[str, request_pb2.Request, dict]]:
    """(transport, request, body) for every logprob fixture plus small generated bodies of each shape."""
    out = []
    for path in _fixtures():
        fixture = orjson.loads(path.read_bytes())
        body = fixture["http_response"].get("body")
        if isinstance(body, dict) and "logprobs" in orjson.dumps(body).decode():
            out.append((path.parent.name, request_that_runs(fixture), body))
    rng = random.Random(7)
    words = ["a", " b", "\u00e9", "\n", "token_id:3"]
    entries = [
        _entry(rng.choice(words), -rng.random() * 5, [_entry(rng.choice(words), -rng.random() * 9) for _ in range(3)])
        for _ in range(6)
    ]
    for name in ("openai_chat", "vllm", "llamacpp"):
        out.append((name, CHAT, orjson.loads(_chat(entries))))
    out.append(("openai_chat", CHAT, orjson.loads(_chat(SPLIT_EURO))))
    out.append(("openai_responses", CHAT, orjson.loads(_responses(entries))))
    arrays = _arrays(
        [e["token"] for e in entries],
        [e["logprob"] for e in entries],
        [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
    )
    for name in ("openai_completions", "vllm"):
        out.append((name, PROMPT, orjson.loads(_completion(arrays))))
    return out


@needs_native
def test_fuzzed_bodies_lift_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    seed = int(os.environ.get("MODELIR_FUZZ_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    seeds = _seed_bodies()
    transports = {name: build_transport(name, {"provider_model": "m"}) for name, _, _ in seeds}
    taken = _Taken(monkeypatch)
    outcomes: Counter[str] = Counter()
    for _ in range(int(os.environ.get("MODELIR_NATIVE_FUZZ_INPUTS", "1500"))):
        name, request, body = rng.choice(seeds)
        if rng.random() < 0.7:
            text = mutate.dumps(_mutate_section(rng, body))
        else:
            text = mutate.mutate_body(rng, body, orjson.dumps(body))
        reference = _outcome(transports[name], request, text, on=False)
        fast = _outcome(transports[name], request, text, on=True)
        assert fast == reference, f"seed {seed}: {name} differs on {text[:400]!r}"
        outcomes[reference[0]] += 1
    print(f"native fuzz seed {seed}: {dict(outcomes)}, native {dict(taken.counts)}")
    assert outcomes["ok"] > 100 and taken.counts["built"] > 50, (
        outcomes,
        taken.counts,
    )  # refusal tokens go to the typed structs


# ---- without the extension ----------------------------------------------------------------------------------


def test_without_the_extension_the_python_builders_lift(monkeypatch, caplog) -> None:
    monkeypatch.setattr(native, "_ext", None)
    monkeypatch.setattr(native, "_said", False)
    caplog.set_level(logging.DEBUG, logger="modelir.logprobs.native")
    chat = build_transport("openai_chat", {"provider_model": "m"})
    completions = build_transport("openai_completions", {"provider_model": "m"})
    first = chat.lift(CHAT, HttpResponse(200, {}, CHAT_CASES[0].chat()))
    completions.lift(PROMPT, HttpResponse(200, {}, COMPLETION_CASES[0][1]))
    assert list(first.choices[0].logprobs.tokens) == ["a"]
    said = [r for r in caplog.records if r.name == "modelir.logprobs.native"]
    assert len(said) == 1 and said[0].levelno == logging.DEBUG and "Python builders" in said[0].getMessage()


@needs_native
def test_small_bodies_take_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "MIN_BODY_BYTES", 16_384)
    taken = _Taken(monkeypatch)
    small = CHAT_CASES[0].chat()
    build_transport("openai_chat", {"provider_model": "m"}).lift(CHAT, HttpResponse(200, {}, small))
    assert not taken.counts
    large = _chat([_entry("a", -1.0, [_entry("b", -2.0)] * 5)] * 100)
    assert len(large) >= native.MIN_BODY_BYTES
    build_transport("openai_chat", {"provider_model": "m"}).lift(CHAT, HttpResponse(200, {}, large))
    assert taken.counts["built"] == 1


@needs_native
def test_completions_fast_path_is_on_by_default(monkeypatch) -> None:
    body = native.completion_body(COMPLETION_CASES[0][1], unclamp=False, token_ids=False)
    assert body is not None and isinstance(body["choices"][0]["logprobs"], bytes)
    monkeypatch.setattr(native, "COMPLETIONS", False)  # the switch still takes the Python path
    assert native.completion_body(COMPLETION_CASES[0][1], unclamp=False, token_ids=False) is None


def test_turned_off_by_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("MODELIR_NATIVE", "0")
    assert not native.enabled()
    assert native.completion_body(COMPLETION_CASES[0][1], unclamp=False, token_ids=False) is None


@needs_native
@pytest.mark.parametrize("case", [c for c in CHAT_CASES if c.responses() is not None], ids=lambda c: c.name)
def test_final_stream_event_of_responses(case: Case) -> None:
    """`response.completed` carries the whole response: its logprobs take the same path as a unary body's."""
    from modelir.transports.openai import responses_lift
    from modelir.v1 import response_pb2

    event = b'{"type":"response.completed","sequence_number":9,"response":' + case.responses() + b"}"  # type: ignore[operator]
    transport = build_transport("openai_responses", {"provider_model": "m"})
    outcomes = []
    for on in (False, True):
        with _mode(on):
            try:
                out = response_pb2.Response()
                responses_lift.lift_object(transport, CHAT, responses_lift.decode(event, event=True), out)
                outcomes.append(("ok", out.SerializeToString(deterministic=True)))
            except Exception as exc:
                outcomes.append(("error", type(exc).__name__, str(exc)))
    assert outcomes[0] == outcomes[1]
