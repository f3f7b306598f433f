"""Every fault of the fault-injecting upstream ends typed, within its deadline, with delivered output kept.

One census (`tests/faults/census.py`) runs each fault through `Model` and through the gRPC server, unary and
streamed, for the OpenAI chat, Anthropic, Gemini and Ollama wires; these tests state what must hold of every row.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.faults.census import DEADLINE, Outcome, census

# Streams that deliver text before they fail: that text must reach the caller.
DELIVERS_BEFORE_FAILING = {"reset-mid-body", "truncated-event", "endless-stream"}
MALFORMED = {"200-html", "malformed-json", "wrong-shape", "empty-object"}


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    return asyncio.run(census())


def _failing(rows: list[Outcome]) -> str:
    return "\n".join(row.row() for row in rows)


def test_every_call_ends_typed(outcomes):
    bad = [o for o in outcomes if o.ended.startswith("untyped") or o.ended == "raised:INTERNAL"]
    assert not bad, _failing(bad)


def test_every_call_ends_within_its_deadline(outcomes):
    late = [o for o in outcomes if o.seconds > DEADLINE + 0.5]
    assert not late, _failing(late)


def test_healthy_answers_arrive_whole(outcomes):
    bad = [o for o in outcomes if o.fault == "ok" and (o.ended != "ok" or o.partial_text != "Hello there")]
    assert not bad, _failing(bad)


def test_output_delivered_before_a_failure_is_kept(outcomes):
    lost = [o for o in outcomes if o.mode == "stream" and o.fault in DELIVERS_BEFORE_FAILING and not o.partial_text]
    assert not lost, _failing(lost)


def test_answers_of_the_wrong_shape_are_malformed_and_not_retried(outcomes):
    bad = [
        o
        for o in outcomes
        if o.fault in MALFORMED
        and (o.ended not in ("raised:MALFORMED_RESPONSE",) or o.upstream_hits != 1)
        and not (
            o.mode == "stream" and o.ended == "soft:TRUNCATED_STREAM" and o.fault in ("wrong-shape", "empty-object")
        )
    ]
    assert not bad, _failing(bad)


def test_bytes_that_are_not_utf8_are_malformed_with_the_output_kept(outcomes):
    bad = [
        o
        for o in outcomes
        if o.fault == "not-utf8" and (o.ended != "soft:MALFORMED_RESPONSE" or o.partial_text != "Hello there")
    ]
    assert not bad, _failing(bad)


def test_a_streamed_call_answered_without_a_stream_is_not_a_connection_failure(outcomes):
    bad = [
        o
        for o in outcomes
        if o.fault == "non-sse-stream" and o.mode == "stream" and (o.upstream_hits != 1 or "UNAVAILABLE" in o.ended)
    ]
    assert not bad, _failing(bad)


def test_rate_limits_end_as_rate_limits(outcomes):
    """A 429 whose hint would outlast the deadline or the cap is raised at once, as RATE_LIMITED, not waited out."""
    bad = [o for o in outcomes if o.fault.startswith("429") and o.ended != "raised:RATE_LIMITED"]
    assert not bad, _failing(bad)
    huge = [o for o in outcomes if o.fault in ("429-retry-after-huge", "429-retry-after-inf") and o.upstream_hits != 1]
    assert not huge, _failing(huge)


def test_provider_failures_are_retried(outcomes):
    bad = [o for o in outcomes if o.fault in ("500", "503-html", "reset-before") and o.upstream_hits < 2]
    assert not bad, _failing(bad)


async def test_a_huge_retry_hint_fails_later_calls_at_once_not_at_their_deadline():
    """After one 429 with `Retry-After: 86400`, a call on the same limiter is RATE_LIMITED at once, with the pause as
    its retry delay, without reaching the upstream: not a DEADLINE_EXCEEDED after waiting its whole deadline."""
    import time

    from modelir import Model, build_request, errors
    from modelir.http.executor import Executor
    from modelir.limiter import Limiter
    from modelir.transports.openai.chat import OpenAIChat

    from tests.faults.census import RETRY
    from tests.faults.upstream import Upstream

    upstream = Upstream()
    base_url = await upstream.start()
    executor = Executor(base_url + "/v1", retry=RETRY)
    limiter = Limiter()
    hinted = Model(OpenAIChat(provider_model="429-retry-after-huge~a"), name="a", executor=executor, limiter=limiter)
    healthy = Model(OpenAIChat(provider_model="ok~b"), name="b", executor=executor, limiter=limiter)
    try:
        with pytest.raises(errors.RateLimitedError):
            await hinted.arun(build_request("a", messages=[("user", "hi")]), deadline=time.monotonic() + DEADLINE)
        started = time.monotonic()
        with pytest.raises(errors.RateLimitedError) as caught:
            await healthy.arun(build_request("b", messages=[("user", "hi")]), deadline=time.monotonic() + DEADLINE)
        assert time.monotonic() - started < 0.5
        assert caught.value.retry_after is not None and caught.value.retry_after > DEADLINE
        assert upstream.hits["ok~b"] == 0
    finally:
        await executor.aclose()
        await upstream.stop()
