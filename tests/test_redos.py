"""A caller's catastrophic regex cannot stall other calls: constraint checks match with RE2, in linear time.

The caller writes the pattern and, through the prompt, much of the output, and the check runs on the event loop.
With a backtracking engine `(a+)+` against 28 `a`s and a `!` takes seconds, and every other call on the loop
waits for it; here the concurrent calls' latency is measured with and without such a call in flight.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import httpx
import orjson
import pytest
from modelir import Model, build_request
from modelir.errors import soft
from modelir.http.executor import Executor
from modelir.registry import build_transport
from modelir.v1 import errors_pb2, request_pb2

EVIL_OUTPUT = "a" * 28 + "!"  # a backtracking engine spends seconds on it (each two more: ~3.5 times longer)
CATASTROPHIC = "(a+)+"


def _answer(request: httpx.Request) -> httpx.Response:
    body = orjson.loads(request.content)
    wanted = body.get("structured_outputs", {})
    text = orjson.dumps(EVIL_OUTPUT).decode() if "json" in wanted else EVIL_OUTPUT if "regex" in wanted else "fine"
    return httpx.Response(
        200,
        json={
            "id": "c",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        },
    )


def _request(constraint: request_pb2.Constraint | None = None) -> request_pb2.Request:
    request = build_request("m", messages=[("user", "hi")])
    if constraint is not None:
        request.constraint.CopyFrom(constraint)
    return request


async def _latencies(model: Model, attack: request_pb2.Request | None) -> tuple[list[float], list]:
    """The latency of 40 plain calls made while `attack` (if any) runs beside them, and the attack's response."""

    async def timed() -> float:
        started = time.perf_counter()
        await model.arun(_request())
        return time.perf_counter() - started

    attacks = [asyncio.ensure_future(model.arun(attack)) for _ in range(5)] if attack is not None else []
    latencies = []
    for _ in range(8):
        latencies += await asyncio.gather(*(timed() for _ in range(5)))
    return latencies, [await a for a in attacks]


@pytest.mark.parametrize(
    "constraint",
    [
        request_pb2.Constraint(regex=CATASTROPHIC),
        request_pb2.Constraint(
            json_schema=request_pb2.JsonSchema(
                schema_json=orjson.dumps({"type": "string", "pattern": f"^{CATASTROPHIC}$"}).decode()
            )
        ),
    ],
    ids=["regex", "json_schema_pattern"],
)
async def test_a_catastrophic_pattern_leaves_concurrent_calls_unchanged(constraint):
    executor = Executor("http://redos.invalid", transport=httpx.MockTransport(_answer))
    model = Model(build_transport("vllm", {"provider_model": "m"}), name="m", executor=executor)
    try:
        await _latencies(model, None)  # warm up: imports, caches, connection setup
        baseline, _ = await _latencies(model, None)
        under_attack, attacked = await _latencies(model, _request(constraint))
    finally:
        await executor.aclose()
    print(
        f"median latency {statistics.median(baseline) * 1e3:.2f} ms alone, "
        f"{statistics.median(under_attack) * 1e3:.2f} ms beside the attack; "
        f"max {max(baseline) * 1e3:.2f} ms / {max(under_attack) * 1e3:.2f} ms"
    )
    # Generous: a scheduler hiccup may double a latency, a stalled loop multiplies it by thousands.
    assert max(under_attack) < 10 * max(baseline) + 0.2
    assert statistics.median(under_attack) < 5 * statistics.median(baseline) + 0.05
    for response in attacked:  # the check still ran: 28 `a`s and a `!` break the anchored pattern
        assert [e.reason for e in response.errors] == [errors_pb2.ERROR_REASON_CONSTRAINT_VIOLATED]


def test_a_pattern_outside_re2s_dialect_is_a_warning_not_silence():
    request = _request(request_pb2.Constraint(regex=r"(a)\1"))
    warnings: list[errors_pb2.Warning] = []
    assert soft.soft_errors(request, soft.Facts(), [(0, 0, "aa")], warnings) == []
    assert [w.code for w in warnings] == ["constraint_not_checked"]
    assert "RE2" in warnings[0].message and "choice 0" in warnings[0].message


def test_a_schema_pattern_outside_re2s_dialect_is_a_warning():
    schema = {"type": "object", "patternProperties": {"(?=x)": {"type": "integer"}}}
    request = _request(
        request_pb2.Constraint(json_schema=request_pb2.JsonSchema(schema_json=orjson.dumps(schema).decode()))
    )
    warnings: list[errors_pb2.Warning] = []
    assert soft.soft_errors(request, soft.Facts(), [(0, 0, '{"x": 1}')], warnings) == []
    assert [w.code for w in warnings] == ["constraint_not_checked"]


def test_schema_regex_keywords_still_judge_the_output():
    schema = {
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": "^[a-z]+$"}},
        "patternProperties": {"^n_": {"type": "integer"}},
        "additionalProperties": False,
    }
    request = _request(
        request_pb2.Constraint(json_schema=request_pb2.JsonSchema(schema_json=orjson.dumps(schema).decode()))
    )

    def reasons(text: str) -> list[str]:
        return [e.message for e in soft.soft_errors(request, soft.Facts(), [(0, 0, text)])]

    assert reasons('{"id": "abc", "n_1": 3}') == []
    assert "does not match" in reasons('{"id": "ABC"}')[0]
    assert "n_1" in reasons('{"id": "abc", "n_1": "three"}')[0]
    assert "'other' unexpected" in reasons('{"id": "abc", "other": 1}')[0]


def test_an_output_past_the_bound_is_not_checked_and_says_so(monkeypatch):
    monkeypatch.setattr(soft, "MAX_CHECKED_CHARS", 10)
    request = _request(request_pb2.Constraint(regex="a*"))
    warnings: list[errors_pb2.Warning] = []
    assert soft.soft_errors(request, soft.Facts(), [(0, 0, "b" * 11)], warnings) == []
    assert [w.code for w in warnings] == ["constraint_not_checked"]


def test_a_schema_whose_regex_nests_too_deep_to_read_is_a_warning_about_the_schema():
    schema = {"type": "string", "pattern": "(" * 5000 + "a" + ")" * 5000}
    request = _request(
        request_pb2.Constraint(json_schema=request_pb2.JsonSchema(schema_json=orjson.dumps(schema).decode()))
    )
    warnings: list[errors_pb2.Warning] = []
    assert soft.soft_errors(request, soft.Facts(), [(0, 0, '"a"')], warnings) == []
    assert [w.code for w in warnings] == ["constraint_not_checked"] and "schema" in warnings[0].message
